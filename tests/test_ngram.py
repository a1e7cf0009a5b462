"""Tests of coursepkg.ngram: hand-computed values, properties, and parity with NLTK 3.10."""

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coursepkg.ngram import BOS, EOS, NGramLM, ngrams, pad

CATS = [["the", "cat", "sat"], ["the", "dog", "sat"], ["a", "cat", "ran"]]
TINY = [["a", "b"], ["b", "b"], ["a"]]


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


# ----------------------------------------------------------------------------- helpers
def test_pad_adds_n_minus_1_starts_and_one_end():
    assert pad(["the", "cat"], 3) == [BOS, BOS, "the", "cat", EOS]
    assert pad(["the", "cat"], 1) == ["the", "cat", EOS]
    assert pad([], 2) == [BOS, EOS]


def test_ngrams_are_sliding_windows():
    assert list(ngrams(["a", "b", "c"], 2)) == [("a", "b"), ("b", "c")]
    assert list(ngrams(["a", "b", "c"], 3)) == [("a", "b", "c")]
    assert list(ngrams(["a", "b"], 3)) == []
    assert list(ngrams(iter(["a", "b"]), 1)) == [("a",), ("b",)]


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_helpers_reject_bad_orders(n):
    with pytest.raises(ValueError, match="n must be a positive int"):
        pad(["a"], n)
    with pytest.raises(ValueError, match="n must be a positive int"):
        ngrams(["a"], n)


def test_pad_rejects_a_string_sentence():
    with pytest.raises(ValueError, match="split it into words"):
        pad("the cat", 2)


# ----------------------------------------------------------------------------- counting
def test_counts_end_at_predicted_tokens_of_every_order():
    lm = NGramLM(3).fit(TINY)
    # <s> <s> a b </s> | <s> <s> b b </s> | <s> <s> a </s>
    assert lm.ngram_counts(3) == {
        (BOS, BOS, "a"): 2, (BOS, "a", "b"): 1, ("a", "b", EOS): 1, (BOS, BOS, "b"): 1,
        (BOS, "b", "b"): 1, ("b", "b", EOS): 1, (BOS, "a", EOS): 1,
    }
    assert lm.ngram_counts(2) == {
        (BOS, "a"): 2, ("a", "b"): 1, ("b", EOS): 2, (BOS, "b"): 1, ("b", "b"): 1, ("a", EOS): 1,
    }
    assert lm.ngram_counts(1) == {("a",): 2, ("b",): 3, (EOS,): 3}
    n_predicted = sum(len(s) + 1 for s in TINY)
    for m in (1, 2, 3):
        counts = lm.ngram_counts(m)
        assert sum(counts.values()) == n_predicted
        assert all(g[-1] != BOS for g in counts)
    assert lm.count(("a", "b", EOS)) == 1 and lm.count(("a", "a")) == 0
    # N1+(. b): b follows a, <s> and b; N1+(. b </s>) = |{a, b}|
    assert lm.continuation_count(("b",)) == 3
    assert lm.continuation_count(("b", EOS)) == 2


def test_fit_replaces_earlier_counts():
    lm = NGramLM(2).fit(CATS).fit(TINY)
    assert lm.vocab == (EOS, "a", "b")
    assert lm.count(("the", "cat")) == 0


# ----------------------------------------------------------------------------- MLE, add-k
def test_mle_is_count_ratios():
    lm = NGramLM(2, "mle").fit(CATS)
    assert lm.vocab == (EOS, "a", "cat", "dog", "ran", "sat", "the")
    assert lm.prob("the", [BOS]) == approx(2 / 3)  # c(<s> the) = 2, c(<s>) = 3
    assert lm.prob("cat", ["the"]) == approx(1 / 2)
    assert lm.prob("sat", ["cat"]) == approx(1 / 2)
    assert lm.prob(EOS, ["sat"]) == approx(1.0)
    assert lm.prob("sat", ["dog"]) == approx(1.0)
    assert lm.prob("dog", ["cat"]) == 0.0
    assert lm.prob("cat", ["ran"]) == 0.0  # "ran" is only followed by </s>
    assert lm.prob("cat", ["unseen"]) == 0.0  # unseen context
    assert lm.prob("the", ()) == lm.prob("the", [BOS])  # short context is left-padded
    assert lm.prob("cat", ["a", "b", "the"]) == lm.prob("cat", ["the"])  # only the last n-1
    unigram = NGramLM(1, "mle").fit(CATS)
    assert unigram.prob("sat", ["whatever"]) == approx(2 / 12)  # 9 words + 3 </s>
    assert unigram.prob(EOS, ()) == approx(3 / 12)


def test_add_k_formula():
    k = 0.5
    lm = NGramLM(2, "add_k", k=k).fit(CATS)
    v = 7  # the, cat, sat, dog, a, ran, </s>
    assert lm.prob("cat", ["the"]) == approx((1 + k) / (2 + k * v))
    assert lm.prob("ran", ["the"]) == approx((0 + k) / (2 + k * v))
    assert lm.prob("the", [BOS]) == approx((2 + k) / (3 + k * v))
    assert lm.prob("the", ["unseen"]) == approx(1 / v)
    trigram = NGramLM(3, "add_k", k=2.0).fit(CATS)
    assert trigram.prob("sat", ["the", "cat"]) == approx((1 + 2) / (1 + 2 * 7))


def test_explicit_vocab_enlarges_add_k_denominator():
    lm = NGramLM(2, "add_k", k=1.0, vocab=["a", "b", EOS, "zebra"]).fit(TINY)
    assert lm.vocab == (EOS, "a", "b", "zebra")
    assert lm.prob("b", ["a"]) == approx((1 + 1) / (2 + 4))
    assert lm.prob("zebra", ["a"]) == approx(1 / 6)


def test_word_outside_vocab_has_probability_zero():
    for smoothing in ("mle", "add_k", "kneser_ney"):
        lm = NGramLM(2, smoothing).fit(CATS)
        assert lm.prob("zebra", ["the"]) == 0.0
        assert lm.logprob("zebra", ["the"]) == -math.inf
        assert lm.prob(BOS, ["the"]) == 0.0


# ----------------------------------------------------------------------------- Kneser-Ney
def test_kneser_ney_bigram_by_hand():
    lm = NGramLM(2, "kneser_ney", discount=0.75).fit(TINY)
    # Bigram counts: (<s>,a)=2 (a,b)=1 (b,</s>)=2 (<s>,b)=1 (b,b)=1 (a,</s>)=1: 6 distinct.
    # Continuation unigram N1+(. w) / N1+(. .): a <- {<s>}: 1/6; b <- {a, <s>, b}: 3/6;
    # </s> <- {b, a}: 2/6.
    assert lm.prob("a", ["</s>"]) == approx(1 / 6)  # unseen context -> unigram level
    assert lm.prob("b", ["zzz"]) == approx(3 / 6)
    # Context a: c(a) = 2 with 2 distinct followers, lambda = 0.75 * 2 / 2 = 0.75.
    assert lm.prob("b", ["a"]) == approx((1 - 0.75) / 2 + 0.75 * 3 / 6)  # = 0.5
    assert lm.prob(EOS, ["a"]) == approx((1 - 0.75) / 2 + 0.75 * 2 / 6)  # = 0.375
    assert lm.prob("a", ["a"]) == approx(0 + 0.75 * 1 / 6)  # = 0.125
    # Context <s>: c(<s>) = 3 (a twice, b once), lambda = 0.75 * 2 / 3 = 0.5.
    assert lm.prob("a", [BOS]) == approx((2 - 0.75) / 3 + 0.5 * 1 / 6)  # = 0.5
    assert lm.prob("b", [BOS]) == approx((1 - 0.75) / 3 + 0.5 * 3 / 6)  # = 1/3
    assert lm.prob(EOS, [BOS]) == approx(0 + 0.5 * 2 / 6)  # = 1/6


def test_kneser_ney_trigram_by_hand():
    lm = NGramLM(3, "kneser_ney", discount=0.75).fit(TINY)
    # Top context (<s>, a): trigrams (<s> a b) = 1, (<s> a </s>) = 1: c = 2, lambda = 0.75.
    # Middle context (a,): continuation counts N1+(. a b) = 1, N1+(. a </s>) = 1: total 2,
    # 2 types, lambda = 0.75; so P2(b|a) = 0.25/2 + 0.75 * 3/6 = 0.5,
    # P2(</s>|a) = 0.25/2 + 0.75 * 2/6 = 0.375, P2(a|a) = 0.75 * 1/6 = 0.125.
    assert lm.prob("b", [BOS, "a"]) == approx(0.25 / 2 + 0.75 * 0.5)  # 0.5
    assert lm.prob(EOS, [BOS, "a"]) == approx(0.25 / 2 + 0.75 * 0.375)  # 0.40625
    assert lm.prob("a", [BOS, "a"]) == approx(0.75 * 0.125)  # 0.09375
    # Top context (b, b): (b b </s>) = 1, lambda = 0.75. Middle context (b,): continuation
    # counts N1+(. b </s>) = |{a, b}| = 2, N1+(. b b) = |{<s>}| = 1: total 3, 2 types,
    # lambda = 0.75 * 2/3 = 0.5, P2(</s>|b) = (2 - 0.75)/3 + 0.5 * 2/6 = 7/12.
    assert lm.prob(EOS, ["b", "b"]) == approx(0.25 / 1 + 0.75 * 7 / 12)  # 11/16
    # An unseen top context defers to the middle level: P2(</s>|b) = 7/12.
    assert lm.prob(EOS, ["a", "b"]) != approx(7 / 12)  # (a, b) was seen ...
    assert lm.prob(EOS, ["zzz", "b"]) == approx(7 / 12)  # ... (zzz, b) was not


def test_kneser_ney_unigram_model_with_uniform_floor():
    lm = NGramLM(1, "kneser_ney", discount=0.5, vocab=["a", "b", EOS, "x"]).fit(TINY)
    # Counts a=2, b=3, </s>=3 (N = 8, 3 types); "x" is unseen so the unigram level is
    # discounted and interpolated with the uniform 1/|V| = 1/4: lambda = 0.5 * 3 / 8.
    lam = 0.5 * 3 / 8
    assert lm.prob("a", ()) == approx((2 - 0.5) / 8 + lam / 4)
    assert lm.prob("x", ()) == approx(lam / 4)
    assert sum(lm.prob(w, ()) for w in lm.vocab) == approx(1.0)
    # With the default vocabulary every word is seen: plain relative frequencies.
    plain = NGramLM(1, "kneser_ney").fit(TINY)
    assert plain.prob("b", ()) == approx(3 / 8)


# ----------------------------------------------------------------------------- properties
WORDS = ["a", "b", "c", "d"]
corpora = st.lists(st.lists(st.sampled_from(WORDS), max_size=5), min_size=1, max_size=6)
contexts = st.lists(st.sampled_from([*WORDS, BOS, EOS, "zz"]), max_size=4)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    corpus=corpora,
    context=contexts,
    n=st.integers(1, 4),
    smoothing=st.sampled_from(["mle", "add_k", "kneser_ney"]),
    k=st.floats(0.01, 3.0),
    discount=st.floats(0.0, 1.0),
    extra=st.booleans(),
)
def test_distributions_sum_to_one(corpus, context, n, smoothing, k, discount, extra):
    vocab = [*WORDS, EOS, "unseen"] if extra else None
    lm = NGramLM(n, smoothing, k=k, discount=discount, vocab=vocab).fit(corpus)
    probs = [lm.prob(w, context) for w in lm.vocab]
    assert all(p >= 0 for p in probs)
    history = tuple(([BOS] * (n - 1) + list(context))[len(context):])  # last n - 1 tokens
    seen = any(lm.count(history + (w,)) for w in lm.vocab)
    if smoothing == "mle" and not seen:
        assert not any(probs)
        return
    assert math.fsum(probs) == pytest.approx(1.0, abs=1e-12)
    dist = lm.distribution(context)
    assert list(dist) == list(lm.vocab)
    assert list(dist.values()) == pytest.approx(probs, rel=1e-12, abs=1e-15)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(corpus=corpora, n=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_generate_is_seeded_and_emits_vocab_words(corpus, n, seed):
    lm = NGramLM(n, "kneser_ney").fit(corpus)
    first = lm.generate(12, seed=seed)
    assert first == lm.generate(12, seed=seed)
    assert first == lm.generate(12, seed=random.Random(seed))
    assert len(first) <= 12
    assert all(w in lm.vocab and w != EOS for w in first)


def test_generate_follows_a_deterministic_mle_model():
    lm = NGramLM(2, "mle").fit([["a", "b", "c"]])
    assert lm.generate(10, seed=0) == ["a", "b", "c"]  # stops at </s>
    assert lm.generate(2, seed=0) == ["a", "b"]  # stops at max_tokens
    assert lm.generate(10, context=["a"], seed=0) == ["b", "c"]
    assert lm.generate(0, seed=0) == []


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size():
    # Unigram MLE on a corpus where a, b and </s> are equally frequent: uniform over 3.
    lm = NGramLM(1, "mle").fit([["a", "b"], ["b", "a"]])
    assert lm.perplexity([["a", "a", "a", "b"], []]) == approx(3.0)
    # add-k is uniform after a context never seen: 1 / |V| for each of the 7 words.
    lm = NGramLM(3, "add_k", k=0.3).fit(CATS)
    assert [lm.prob(w, ["zz", "zz"]) for w in lm.vocab] == [approx(1 / 7)] * 7


def test_perplexity_counts_every_word_and_one_end_per_sentence():
    lm = NGramLM(2, "kneser_ney").fit(CATS)
    test = [["the", "cat"], ["a"]]
    logs = [
        lm.logprob("the", [BOS]), lm.logprob("cat", ["the"]), lm.logprob(EOS, ["cat"]),
        lm.logprob("a", [BOS]), lm.logprob(EOS, ["a"]),
    ]
    assert lm.perplexity(test) == approx(math.exp(-sum(logs) / 5))
    assert lm.logprob("cat", ["the"]) == approx(math.log(lm.prob("cat", ["the"])))
    assert NGramLM(2, "mle").fit(CATS).perplexity([["cat", "the"]]) == math.inf
    assert lm.perplexity([["zebra"]]) == math.inf  # out of vocabulary


# ----------------------------------------------------------------------------- NLTK parity
PARITY_CORPUS = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["the", "dog", "sat", "on", "the", "log"],
    ["a", "cat", "saw", "the", "dog"],
    ["the", "dog", "saw", "a", "cat", "on", "a", "mat"],
    ["cat"],
    [],
    ["the", "the", "the"],
]


def _nltk_model(name, n, words):
    """An NLTK model fed exactly the n-grams our fit counts (all orders, same padding)."""
    from nltk.lm import MLE, KneserNeyInterpolated, Laplace, Vocabulary

    vocabulary = Vocabulary([*words, BOS, EOS])  # NLTK adds <UNK>: |V| = |words| + 3
    model = {
        "mle": lambda: MLE(n, vocabulary=vocabulary),
        "add_k": lambda: Laplace(n, vocabulary=vocabulary),
        "kneser_ney": lambda: KneserNeyInterpolated(n, discount=0.75, vocabulary=vocabulary),
    }[name]()
    model.fit(
        [g for m in range(1, n + 1) for g in ngrams(pad(s, n)[n - m:], m)]
        for s in PARITY_CORPUS
    )
    return model


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("smoothing", ["mle", "add_k", "kneser_ney"])
def test_parity_with_nltk(smoothing, n):
    words = sorted({w for s in PARITY_CORPUS for w in s})
    theirs = _nltk_model(smoothing, n, words)
    # add-k: NLTK's |V| counts <s> and <UNK>; two dummy words make our |V| equal.
    vocab = [*words, EOS, "dummy1", "dummy2"] if smoothing == "add_k" else None
    ours = NGramLM(n, smoothing, k=1.0, discount=0.75, vocab=vocab).fit(PARITY_CORPUS)
    if smoothing == "add_k":
        assert len(ours.vocab) == len(theirs.vocab)
    compared = 0
    for context in itertools.product([*words, BOS, EOS, "unknown"], repeat=n - 1):
        for word in [*words, EOS]:
            try:
                expected = theirs.score(word, list(context))
            except ZeroDivisionError:  # NLTK's KN unigram model has no bigrams to count
                assert smoothing == "kneser_ney" and n == 1
                continue
            if math.isfinite(expected):
                assert ours.prob(word, context) == pytest.approx(expected, rel=0, abs=1e-9)
                compared += 1
    if smoothing == "kneser_ney" and n == 1:
        assert compared == 0  # documented: NLTK fails, ours is plain relative frequency
    else:
        assert compared == (len(words) + 1) * (len(words) + 3) ** (n - 1)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "n must be a positive int"),
        ({"n": 2.0}, "n must be a positive int"),
        ({"n": True}, "n must be a positive int"),
        ({"n": 2, "smoothing": "kn"}, "smoothing must be one of"),
        ({"n": 2, "smoothing": "add_k", "k": 0}, "k must be a positive"),
        ({"n": 2, "smoothing": "add_k", "k": -1.0}, "k must be a positive"),
        ({"n": 2, "smoothing": "add_k", "k": float("nan")}, "k must be a positive"),
        ({"n": 2, "smoothing": "kneser_ney", "discount": 1.5}, "discount must be"),
        ({"n": 2, "smoothing": "kneser_ney", "discount": -0.1}, "discount must be"),
        ({"n": 2, "vocab": ["a", "b"]}, "vocab must contain '</s>'"),
        ({"n": 2, "vocab": ["a", "</s>", "<s>"]}, "vocab must not contain '<s>'"),
        ({"n": 2, "vocab": "abc"}, "vocab must be a collection"),
    ],
)
def test_bad_arguments_raise_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NGramLM(**kwargs)


@pytest.mark.parametrize(
    ("sentences", "message"),
    [
        ("the cat sat", "got a string"),
        (["the cat sat"], "split it into words"),
        ([], "at least one sentence"),
        ([["the", "<s>", "cat"]], "contains '<s>'"),
        ([["the", "cat", "</s>"]], "contains '</s>'"),
    ],
)
def test_bad_training_data_raises_value_errors(sentences, message):
    with pytest.raises(ValueError, match=message):
        NGramLM(2).fit(sentences)


def test_training_words_must_be_in_an_explicit_vocab():
    with pytest.raises(ValueError, match=r"1 training word\(s\) are not in vocab"):
        NGramLM(2, vocab=["a", EOS]).fit(TINY)


def test_misuse_of_prob_and_generate():
    with pytest.raises(RuntimeError, match="not fitted"):
        NGramLM(2).prob("a", ())
    lm = NGramLM(2, "mle").fit(TINY)
    with pytest.raises(ValueError, match="context must be a sequence of words"):
        lm.prob("b", "a")
    with pytest.raises(ValueError, match="max_tokens must be an int"):
        lm.generate(-1, seed=0)
    with pytest.raises(ValueError, match="never seen in training"):
        lm.generate(5, context=["zzz"], seed=0)
    with pytest.raises(ValueError, match="order must be in 1..2"):
        lm.ngram_counts(3)
