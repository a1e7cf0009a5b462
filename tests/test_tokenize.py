"""Tests of coursepkg.tokenize: byte-level BPE. The round trip for every string (hypothesis,
non-ASCII and lone surrogates included); training by hand on a known example, with its ties;
the incremental training equals a plain recount after every merge; encoding the training text
applies each merge as often as training did; chunks are never crossed; files; errors."""

import re
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coursepkg import data
from coursepkg.tokenize import BPE, SPLIT_PATTERN

SMALL = settings(max_examples=60, deadline=None, derandomize=True)

MIXED = ("The quick brown fox -- it's 2021, isn't it? Caf\u00e9 na\u00efve \u00fcber "
         "\u65e5\u672c\u8a9e \U0001f600\U0001f600 tabs\tand\nnewlines\n\n  spaces  ") * 3


def merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def reference_train(text: str, vocab_size: int) -> tuple[list, list]:
    """BPE the plain way: every chunk of the text (repeats included), all pairs recounted
    after every merge; (merges, how many times each was applied)."""
    words = [list(c.encode("utf-8", "surrogatepass")) for c in re.findall(SPLIT_PATTERN, text)]
    merges, counts = [], []
    while len(merges) < vocab_size - 256:
        stats = Counter()
        for w in words:
            stats.update(zip(w, w[1:], strict=False))
        if not stats:
            break
        pair = min(stats, key=lambda p: (-stats[p], p))  # most frequent, then smallest
        new_id = 256 + len(merges)
        applied = 0
        for i, w in enumerate(words):
            words[i] = merge(w, pair, new_id)
            applied += len(w) - len(words[i])
        merges.append(pair)
        counts.append(applied)
    return merges, counts


@pytest.fixture(scope="module")
def mixed_bpe() -> BPE:
    return BPE.train(MIXED, 300)


# ----------------------------------------------------------------------------- round trip
@SMALL
@given(st.text())
def test_decode_encode_is_the_identity_for_every_string(mixed_bpe, s):
    ids = mixed_bpe.encode(s)
    assert all(isinstance(i, int) and 0 <= i < mixed_bpe.vocab_size for i in ids)
    assert mixed_bpe.decode(ids) == s


@SMALL
@given(st.text(st.characters(blacklist_categories=()), max_size=30))
def test_the_round_trip_holds_with_lone_surrogates_and_any_code_point(mixed_bpe, s):
    assert mixed_bpe.decode(mixed_bpe.encode(s)) == s


@SMALL
@given(st.text(alphabet="ab \n\u00e9\U0001f600", max_size=80), st.integers(256, 290))
def test_a_tokenizer_trained_on_a_text_reencodes_it_and_others(text, vocab_size):
    bpe = BPE.train(text, vocab_size)
    assert bpe.decode(bpe.encode(text)) == text
    other = text[::-1] + "zz \u00e9"
    assert bpe.decode(bpe.encode(other)) == other


def test_a_token_id_sequence_that_cuts_a_character_decodes_with_a_replacement():
    bpe = BPE()
    assert bpe.encode("\u00e9") == [195, 169]
    assert bpe.decode([195]) == "\ufffd" and bpe.decode([104, 195, 105]) == "h\ufffdi"
    assert bpe.decode(torch.tensor([104, 105])) == "hi"


# ----------------------------------------------------------------------------- training
def test_training_by_hand_on_a_known_example():
    """'aaabdaaabac': (a, a) occurs 4 times (overlaps count), merged twice (left to right),
    giving Z a b d Z a b a c; (Z, a) = (256, 97) and (a, b) = (97, 98) tie at 2, and the
    smaller pair wins; then (Z, Y) twice; then four pairs tie at 1 and (a, c) is smallest."""
    bpe = BPE.train("aaabdaaabac", 260)
    assert bpe.merges == [(97, 97), (97, 98), (256, 257), (97, 99)]
    assert bpe.counts == [2, 2, 2, 1]
    assert [bpe.vocab[i] for i in range(256, 260)] == [b"aa", b"ab", b"aaab", b"ac"]
    assert bpe.encode("aaabdaaabac") == [258, 100, 258, 259]
    assert bpe.vocab_size == 260


def test_ties_go_to_the_smallest_pair():
    bpe = BPE.train("ab cd", 257)  # (a, b), (' ', c), (c, d) once each: (32, 99) is smallest
    assert bpe.merges == [(32, 99)]


def test_training_stops_when_no_pair_is_left():
    bpe = BPE.train("ab ab", 1000)  # chunks "ab" and " ab": 2 merges make each one token
    assert bpe.vocab_size == 258 and bpe.encode("ab ab") == [256, 257]
    assert BPE.train("", 300).vocab_size == 256


@SMALL
@given(st.text(alphabet="aab b\n\u00e9.", max_size=120), st.integers(256, 300))
def test_incremental_training_equals_a_recount_after_every_merge(text, vocab_size):
    bpe = BPE.train(text, vocab_size)
    merges, counts = reference_train(text, vocab_size)
    assert bpe.merges == merges and bpe.counts == counts


def test_incremental_training_equals_a_recount_on_shakespeare():
    text = data.shakespeare()[:8_000]
    bpe = BPE.train(text, 360)
    assert (bpe.merges, bpe.counts) == reference_train(text, 360)
    assert bpe.merges == BPE.train(text, 360).merges  # deterministic


@SMALL
@given(st.text(alphabet="aab b\n\u00e9.", max_size=120), st.integers(256, 300))
def test_encoding_the_training_text_applies_each_merge_as_often_as_training(text, vocab_size):
    bpe = BPE.train(text, vocab_size)
    applied = [0] * len(bpe.merges)  # the merges applied one by one to every chunk
    words = [list(c.encode()) for c in re.findall(SPLIT_PATTERN, text)]
    for i, pair in enumerate(bpe.merges):
        for j, w in enumerate(words):
            words[j] = merge(w, pair, 256 + i)
            applied[i] += len(w) - len(words[j])
    assert applied == bpe.counts
    assert bpe.encode(text) == [t for w in words for t in w]
    assert len(bpe.encode(text)) == len(text.encode()) - sum(bpe.counts)


def test_shakespeare_at_a_few_vocabulary_sizes():
    """More merges, fewer tokens; frequent words are one token; no token crosses a chunk."""
    lines = data.shakespeare_lines()
    text = "\n".join(lines[:5000]) + "\n"
    held_out = "\n".join(lines[-200:]) + "\n"
    lengths = []
    for vocab_size in (256, 512, 1024):
        bpe = BPE.train(text, vocab_size)
        assert bpe.vocab_size == vocab_size
        ids = bpe.encode(held_out)
        assert bpe.decode(ids) == held_out
        lengths.append(len(ids))
        assert len(bpe.encode(text)) == len(text.encode()) - sum(bpe.counts)
        for token in bpe.vocab:
            assert not re.search(rb"\S ", token)  # a space only ever starts a token
    assert lengths[0] == len(held_out.encode()) and lengths[0] > lengths[1] > lengths[2]
    assert b" the" in bpe.vocab and b" and" in bpe.vocab
    assert bpe.encode(" the") == [bpe.vocab.index(b" the")]


# ----------------------------------------------------------------------------- files, errors
def test_save_and_load(tmp_path, mixed_bpe):
    path = tmp_path / "bpe.json"
    mixed_bpe.save(path)
    loaded = BPE.load(path)
    assert loaded.merges == mixed_bpe.merges and loaded.counts == mixed_bpe.counts
    assert loaded.pattern == mixed_bpe.pattern and loaded.vocab == mixed_bpe.vocab
    assert loaded.encode(MIXED) == mixed_bpe.encode(MIXED)
    assert BPE(mixed_bpe.merges).encode(MIXED) == mixed_bpe.encode(MIXED)
    (tmp_path / "other.json").write_text('{"merges": []}')
    with pytest.raises(ValueError, match="not a BPE tokenizer"):
        BPE.load(tmp_path / "other.json")


def test_bad_inputs_are_refused():
    with pytest.raises(TypeError, match="text must be a str"):
        BPE.train(b"bytes", 300)
    for vocab_size in (255, 0, True, 300.0):
        with pytest.raises(ValueError, match="vocab_size must be an int >= 256"):
            BPE.train("text", vocab_size)
    bpe = BPE.train("hello hello", 260)
    with pytest.raises(TypeError, match="encode takes a str"):
        bpe.encode(["hello"])
    for bad in ([260], [-1], [1.0], [True]):
        with pytest.raises(ValueError, match=r"is not a token id in 0\.\.259"):
            bpe.decode(bad)
    with pytest.raises(ValueError, match="1-D tensor"):
        bpe.decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="merge 0 must be a pair of token ids below 256"):
        BPE([(256, 1)])
    with pytest.raises(ValueError, match="merge 1 must be a pair"):
        BPE([(1, 2), (1, 2, 3)])
    with pytest.raises(ValueError, match="2 counts for 1 merges"):
        BPE([(1, 2)], counts=[1, 2])
