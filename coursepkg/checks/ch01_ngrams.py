"""Chapter 1 tasks (``01_ngrams``): count, estimate, smooth, measure, and three questions.

- 1.1 ``count_ngrams``, 1.2 ``mle_prob``, 1.3 ``add_k_prob`` (kind "formula"): the chapter's
  formulas from plain counts;
- 1.4 ``perplexity`` (kind "debug"): the exercise shows a perplexity function with three
  planted bugs, for a model fitted with a closed vocabulary (unknown words read as '<unk>');
- 1.5 ``kneser_ney_prob`` and 1.6 ``witten_bell_prob`` (kind "extension"): interpolated
  Kneser-Ney and Witten-Bell from the counts of the top order alone, so the student derives
  the lower orders' counts (continuation counts for Kneser-Ney) that the book's model keeps
  inside it; 1.5 is checked against :class:`coursepkg.ngram.NGramLM` by the tests, 1.6's
  reference is here (the book stops at Kneser-Ney);
- 1.7 to 1.9 (kind "question"): keys computed from :mod:`coursepkg` when checked;
- 1.10 ``train_bigram`` (kind "train"): a bigram table of logits trained by gradient descent
  on sequences of a random Markov source; judged in the trusted process on held-out sequences
  of the same source (drawn from the case's ``"_heldout"`` seed), by its cross-entropy above
  the source's entropy rate, in bands.

Each task has a reference implementation written to be obviously correct (small, no tricks),
JSON ``args`` for its cases, and a judge that recognises the mistakes students plausibly make by
recomputing each wrong variant from the case's ``args`` and comparing.

Conventions shared with :mod:`coursepkg.ngram`: a sentence is a list of words; it is padded with
n-1 ``"<s>"`` at the start and one ``"</s>"`` at the end; n-grams are tuples of words; natural logs.

The public cases are small corpora written out; the hidden cases' generators draw their corpora
(the words, how many sentences, how long) from the grader's random generator, keeping what each
case is there for: an empty sentence, n-grams longer than the sentence, a context seen only at a
sentence start, an unseen context, a word never seen after a frequent context, unknown words.
"""

from __future__ import annotations

import json
import math
import numbers
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from coursepkg.checks.core import (
    Case,
    CheckerBug,
    CheckError,
    HiddenCase,
    Task,
    Verdict,
    a_type,
    banded,
    close,
    draw_seed,
    fmt_number,
    question,
    register,
    to_plain_float,
)
from coursepkg.checks.tensors import state_dict_plain

ASSIGNMENT = "01_ngrams"
BOS = "<s>"
EOS = "</s>"

# Nobody should solve the n-gram tasks by calling the package's or NLTK's n-gram code (or ours).
_NO_LIBRARIES = ("nltk", "coursepkg.ngram", "coursepkg.checks")


# --------------------------------------------------------------------------------------------
# Reference implementations
# --------------------------------------------------------------------------------------------


def pad(sentence: Sequence[str], n: int) -> list[str]:
    """``n-1`` start symbols, the words, one end symbol."""
    return [BOS] * (n - 1) + list(sentence) + [EOS]


def windows(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """Every run of ``n`` consecutive tokens, as tuples, left to right."""
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def count_ngrams(sentences: list[list[str]], n: int) -> dict[tuple[str, ...], int]:
    """Task 1.1: the counts of the n-grams of the padded sentences, summed over sentences."""
    counts: Counter[tuple[str, ...]] = Counter()
    for sentence in sentences:
        counts.update(windows(pad(sentence, n), n))
    return dict(counts)


def context_count(counts: Mapping[tuple[str, ...], int], context: tuple[str, ...]) -> int:
    """c(context): the total count of the n-grams that start with ``context``."""
    return sum(count for gram, count in counts.items() if gram[:-1] == context)


def mle_prob(counts: dict[tuple[str, ...], int], word: str, context: tuple[str, ...]) -> float:
    """Task 1.2: c(context + (word,)) / c(context), and 0.0 for an unseen context."""
    context = tuple(context)
    total = context_count(counts, context)
    if total == 0:
        return 0.0
    return counts.get(context + (word,), 0) / total


def add_k_prob(
    counts: dict[tuple[str, ...], int],
    vocab: list[str],
    word: str,
    context: tuple[str, ...],
    k: float,
) -> float:
    """Task 1.3: (c(context + (word,)) + k) / (c(context) + k * |V|)."""
    context = tuple(context)
    numerator = counts.get(context + (word,), 0) + k
    return numerator / (context_count(counts, context) + k * len(vocab))


# --------------------------------------------------------------------------------------------
# Case data helpers (all JSON-able)
# --------------------------------------------------------------------------------------------

#: The words the hidden cases' corpora are drawn from (a few of them at a time).
_WORD_POOL = ("the", "a", "cat", "dog", "sat", "ran", "on", "mat", "saw", "big", "red", "fox",
              "hid", "under", "old", "tree", "bird", "sang", "we", "they", "see", "run", "small",
              "house")


def _draw_corpus(rng: random.Random, count: int, max_len: int,
                 n_words: int) -> tuple[list[list[str]], list[str]]:
    """A small corpus drawn from ``rng``: ``count`` sentences of 1 to ``max_len`` words, the
    first one ``max_len`` long, over ``n_words`` words of the pool (so that n-grams repeat).

    Returns:
        the sentences, and the words they are drawn from.
    """
    words = rng.sample(_WORD_POOL, n_words)
    sentences = [[rng.choice(words) for _ in range(rng.randint(1, max_len))]
                 for _ in range(count)]
    sentences[0] = [rng.choice(words) for _ in range(max_len)]
    return sentences, words


def _counts_arg(sentences: list[list[str]], n: int) -> list[list]:
    """count_ngrams(sentences, n) as JSON: a sorted list of [[w1, ..., wn], count]."""
    return [[list(gram), count] for gram, count in sorted(count_ngrams(sentences, n).items())]


def _vocab_arg(sentences: list[list[str]]) -> list[str]:
    """The prediction vocabulary of a corpus: every word plus '</s>' (never '<s>')."""
    return sorted({word for sentence in sentences for word in sentence} | {EOS})


def _counts_from_arg(entries: list[list]) -> dict[tuple[str, ...], int]:
    return {tuple(gram): count for gram, count in entries}


def _busiest(sentences: list[list[str]], n: int, *, start: bool) -> tuple[list[str], str]:
    """A seen (context, word) with the most frequent context, chosen deterministically.

    ``start=True`` picks among the contexts that hold '<s>' (the start of a sentence),
    ``start=False`` among the others.
    """
    counts = count_ngrams(sentences, n)
    contexts: Counter[tuple[str, ...]] = Counter()
    for gram, count in counts.items():
        if (BOS in gram[:-1]) == start:
            contexts[gram[:-1]] += count
    context = max(sorted(contexts), key=lambda c: contexts[c])
    words = sorted(gram[-1] for gram in counts if gram[:-1] == context)
    word = max(words, key=lambda w: counts[context + (w,)])
    return list(context), word


def _never_after(sentences: list[list[str]], n: int, context: list[str]) -> str | None:
    """The first vocabulary word (sorted) never seen after ``context`` (None: there is none)."""
    counts = count_ngrams(sentences, n)
    seen = {gram[-1] for gram in counts if list(gram[:-1]) == context}
    return next((word for word in _vocab_arg(sentences) if word not in seen), None)


def _float_verdict(
    got: object,
    expected: float,
    variants: Sequence[tuple[str, Callable[[], float]]],
    generic_hint: str,
    where: str = "",
) -> Verdict:
    """Compare a plain number with the expected one; name the first wrong variant it matches.

    Args:
        got: The student's plain value.
        expected: The reference value.
        variants: (hint, compute) pairs, most specific first; ``compute`` recomputes a known
            mistake from the case's args (it may raise, e.g. ZeroDivisionError: then it is skipped).
        generic_hint: The hint when no variant matches.
        where: The query, for the detail shown in public cases ("For P('cat' | ('the',))").
    """
    if type(got) not in (int, float):
        return Verdict(False, "Return a single number (a float).", f"Got {a_type(got)}.")
    if close(got, expected):
        return Verdict(True)
    values = f"expected {fmt_number(expected)}, got {fmt_number(float(got))}."
    detail = f"{where}: {values}" if where else values[0].upper() + values[1:]
    if math.isnan(got):
        return Verdict(
            False,
            "Your function returned NaN (not a number), usually from 0/0 or a log of a negative "
            "number: find where that happens.",
            detail,
        )
    for hint, compute in variants:
        try:
            value = compute()
        except (ArithmeticError, ValueError):
            continue
        if close(got, value):
            return Verdict(False, hint, detail)
    return Verdict(False, generic_hint, detail)


def _safe_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


# --------------------------------------------------------------------------------------------
# Task 1.1 count_ngrams
# --------------------------------------------------------------------------------------------

HINT_LAST_NGRAM_MISSING = (
    "The last n-gram of each sentence, the one ending in '</s>', is missing: pad every sentence "
    "with one '</s>' at its end, and let the window reach the end of the padded sentence "
    "(it has len(padded) - n + 1 n-grams)."
)
HINT_N_BOS = (
    "Pad with n-1 '<s>', not n: the context of the first word is n-1 tokens long, so n-1 start "
    "symbols are enough (unigrams get none)."
)
HINT_NO_PADDING = (
    "Pad each sentence before counting: n-1 '<s>' at the start and one '</s>' at the end."
)
HINT_NO_BOS = (
    "Pad the start too: put n-1 '<s>' before the first word, so that the first words are counted "
    "with a context."
)
HINT_EOS_PER_ORDER = (
    "Put exactly one '</s>' at the end (not n-1): '</s>' is predicted once, and after it the "
    "sentence is over."
)
HINT_LAST_SENTENCE_ONLY = (
    "Only the last sentence is counted: create the counter once, before the loop over sentences, "
    "and add every sentence's n-grams to it."
)
HINT_OVERWRITE = (
    "An n-gram that occurs in several sentences needs the SUM of its counts: add the counts up "
    "across sentences instead of overwriting them (Counter.update adds, dict.update replaces)."
)
HINT_PRESENCE = (
    "Count every occurrence of an n-gram, not only whether it occurs in a sentence: an n-gram "
    "that appears twice in one sentence counts 2."
)
HINT_STRING_KEYS = (
    "The keys must be tuples of words, like ('the', 'cat'), not strings joined together: "
    "tuples keep the words apart, and the next tasks look n-grams up as tuples."
)
HINT_KEY_LENGTH = (
    "Every key must be a tuple of exactly n words: slide a window of n tokens over the padded "
    "sentence, starting at each of its len(padded) - n + 1 positions."
)
HINT_COUNTS_GENERIC = (
    "Some counts differ from the expected ones: pad each sentence with n-1 '<s>' and one '</s>', "
    "take every window of n consecutive tokens as a tuple, and add the counts over all sentences."
)


def _counts_to_plain(value: object) -> list[list]:
    """A returned mapping -> a sorted list of [key, count], key a list of words (tuple key) or a
    str (a string key, kept so the judge can name that mistake)."""
    if not isinstance(value, Mapping):
        raise CheckError(
            f"expected a dict mapping n-gram tuples to counts, got {type(value).__name__}"
        )
    entries = []
    for key, count in value.items():
        if isinstance(key, tuple):
            for word in key:
                if not isinstance(word, str):
                    raise CheckError(
                        "expected keys that are tuples of words (str), got a tuple containing "
                        + a_type(word)
                    )
            plain_key: list[str] | str = [str(word) for word in key]
        elif isinstance(key, str):
            plain_key = str(key)
        else:
            raise CheckError(
                f"expected keys that are tuples of words, got {a_type(key)} key"
            )
        if isinstance(count, bool) or not isinstance(count, numbers.Real):
            raise CheckError(f"expected integer counts, got {a_type(count)} count")
        number = int(count) if isinstance(count, numbers.Integral) else float(count)
        entries.append([plain_key, number])
    entries.sort(key=lambda entry: json.dumps(entry[0]))
    return entries


def _counts_map(entries: list[list]) -> dict:
    """Plain entries -> {tuple or str key: count}, dropping zero counts (0 means absent)."""
    found = {}
    for key, count in entries:
        if type(count) not in (int, float):
            raise TypeError("count is not a number")
        if count != 0:
            found[tuple(key) if isinstance(key, list) else key] = count
    return found


def _describe_count_diff(got: dict, expected: dict) -> str:
    missing = [key for key in expected if key not in got]
    extra = [key for key in got if key not in expected]
    wrong = [key for key in expected if key in got and got[key] != expected[key]]
    parts = []
    if missing:
        shown = ", ".join(repr(key) for key in missing[:3])
        parts.append(f"{shown} {'is' if len(missing) == 1 else 'are'} missing"
                     + (f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""))
    if extra:
        shown = ", ".join(repr(key) for key in extra[:3])
        parts.append(f"{shown} should not be there"
                     + (f" (and {len(extra) - 3} more)" if len(extra) > 3 else ""))
    for key in wrong[:3]:
        parts.append(f"{key!r} should be counted {expected[key]}, not {fmt_number(got[key])}")
    return "; ".join(parts) + "." if parts else ""


def _count_variants(sentences: list[list[str]], n: int) -> list[tuple[str, Callable[[], dict]]]:
    """Known wrong versions of count_ngrams, most specific first."""

    def padded_with(before: int, after: int) -> Callable[[], dict]:
        def compute() -> dict:
            counts: Counter = Counter()
            for sentence in sentences:
                counts.update(windows([BOS] * before + list(sentence) + [EOS] * after, n))
            return dict(counts)

        return compute

    def last_only() -> dict:
        return count_ngrams(sentences[-1:], n)

    def overwrite() -> dict:
        counts: dict = {}
        for sentence in sentences:
            counts.update(count_ngrams([sentence], n))
        return counts

    def presence() -> dict:
        counts: Counter = Counter()
        for sentence in sentences:
            counts.update(set(windows(pad(sentence, n), n)))
        return dict(counts)

    return [
        (HINT_LAST_NGRAM_MISSING, padded_with(n - 1, 0)),
        (HINT_NO_PADDING, padded_with(0, 0)),
        (HINT_N_BOS, padded_with(n, 1)),
        (HINT_NO_BOS, padded_with(0, 1)),
        (HINT_EOS_PER_ORDER, padded_with(n - 1, n - 1)),
        (HINT_LAST_SENTENCE_ONLY, last_only),
        (HINT_OVERWRITE, overwrite),
        (HINT_PRESENCE, presence),
    ]


def _judge_counts(got: object, expected: object, args: dict) -> Verdict:
    got_map = _counts_map(got)
    expected_map = _counts_map(expected)
    if got_map == expected_map:
        return Verdict(True)
    detail = _describe_count_diff(got_map, expected_map)
    string_keys = [key for key in got_map if isinstance(key, str)]
    if string_keys:
        example = tuple(string_keys[0].split())
        return Verdict(False, HINT_STRING_KEYS, f"Use a tuple such as {example!r}, not "
                                                f"{string_keys[0]!r}.")
    sentences, n = args["sentences"], args["n"]
    for hint, compute in _count_variants(sentences, n):
        if _counts_map(_counts_to_plain(compute())) == got_map:
            return Verdict(False, hint, detail)
    if any(len(key) != n for key in got_map):
        return Verdict(False, HINT_KEY_LENGTH, detail)
    return Verdict(False, HINT_COUNTS_GENERIC, detail)


def _build_count_args(args: dict) -> tuple:
    return ([list(sentence) for sentence in args["sentences"]], int(args["n"]))


_COUNT_CASES = (
    Case("unigrams of one sentence", 0.5, {"sentences": [["the", "cat", "sat"]], "n": 1}),
    Case(
        "bigrams of two sentences",
        0.5,
        {"sentences": [["the", "cat", "sat"], ["the", "dog", "sat"]], "n": 2},
    ),
    Case(
        "bigrams with repeated words",
        0.5,
        {"sentences": [["the", "cat", "saw", "the", "cat"], ["the", "cat"]], "n": 2},
    ),
    Case(
        "trigrams of two sentences",
        0.5,
        {"sentences": [["i", "am", "sam"], ["sam", "i", "am"]], "n": 3},
    ),
    Case("an empty sentence gives one bigram", 0.5, {"sentences": [["the", "cat"], []], "n": 2}),
)


def _with_empty_sentences(rng: random.Random) -> dict:
    sentences, _ = _draw_corpus(rng, rng.randint(2, 3), 3, 3)
    for _ in range(rng.randint(1, 2)):
        sentences.insert(rng.randint(0, len(sentences)), [])
    return {"sentences": sentences, "n": rng.randint(2, 3)}


_COUNT_HIDDEN = (
    HiddenCase("hidden: an empty sentence", 0.5, _with_empty_sentences),
    HiddenCase("hidden: one word, long n-grams", 0.5,
               lambda rng: {"sentences": [[rng.choice(_WORD_POOL)]], "n": rng.randint(4, 5)}),
    HiddenCase("hidden: random corpus, trigrams", 0.5,
               lambda rng: {"sentences": _draw_corpus(rng, 8, 6, 4)[0], "n": 3}),
    HiddenCase("hidden: random corpus, unigrams", 0.5,
               lambda rng: {"sentences": _draw_corpus(rng, 6, 5, 5)[0], "n": 1}),
)

register(
    Task(
        id="1.1",
        assignment=ASSIGNMENT,
        func_name="count_ngrams",
        kind="formula",
        title="Count the n-grams of padded sentences",
        cases=_COUNT_CASES,
        hidden=_COUNT_HIDDEN,
        build_args=_build_count_args,
        reference=count_ngrams,
        to_plain=_counts_to_plain,
        judge=_judge_counts,
        forbidden=_NO_LIBRARIES,
        error_hints={
            "TypeError": "Check the types: sentences is a list of lists of words, and every "
            "key must be a tuple (lists cannot be dict keys; use tuple(window)).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 1.2 mle_prob
# --------------------------------------------------------------------------------------------

HINT_JOINT = (
    "Divide by the count of the context (the total of the n-grams that start with it), not by "
    "the total of all n-grams: P(word | context) is a conditional probability."
)
HINT_DISTINCT = (
    "The denominator is the total COUNT of the n-grams that start with the context, not the "
    "number of different words that follow it."
)
HINT_WRONG_END = (
    "The context is the FIRST n-1 words of an n-gram (g[:-1]) and the predicted word is the LAST "
    "one (g[-1]); you matched them at the other end."
)
HINT_NOT_NORMALISED = (
    "Divide the count of (context + word) by the count of the context: a probability lies "
    "between 0 and 1, a raw count does not."
)
HINT_MLE_UNSEEN_CONTEXT = (
    "For a context that never occurs, return 0.0 (the counts say nothing about it) instead of "
    "dividing by its count of 0."
)
HINT_MLE_GENERIC = (
    "P(word | context) = c(context + (word,)) / c(context), where c(context) is the sum of the "
    "counts of the n-grams g with g[:-1] == context."
)


def _build_mle_args(args: dict) -> tuple:
    return (_counts_from_arg(args["counts"]), args["word"], tuple(args["context"]))


def _judge_mle(got: object, expected: object, args: dict) -> Verdict:
    counts, word, context = _build_mle_args(args)
    where = f"For P({word!r} | {context!r})"
    joint = counts.get(context + (word,), 0)
    if context_count(counts, context) == 0 and type(got) in (int, float) and got != 0:
        return _float_verdict(got, expected, [], HINT_MLE_UNSEEN_CONTEXT, where)

    def distinct() -> float:
        return joint / sum(1 for gram in counts if gram[:-1] == context)

    def wrong_end_denominator() -> float:
        total = sum(c for gram, c in counts.items() if gram[1:] == context)
        return joint / total if total else 0.0

    def wrong_end_both() -> float:
        total = sum(c for gram, c in counts.items() if gram[1:] == context)
        return counts.get((word,) + context, 0) / total if total else 0.0

    def wrong_end_numerator() -> float:
        return counts.get((word,) + context, 0) / context_count(counts, context)

    variants = [
        (HINT_JOINT, lambda: joint / sum(counts.values())),
        (HINT_DISTINCT, distinct),
        (HINT_WRONG_END, wrong_end_denominator),
        (HINT_WRONG_END, wrong_end_both),
        (HINT_WRONG_END, wrong_end_numerator),
        (HINT_NOT_NORMALISED, lambda: float(joint)),
    ]
    return _float_verdict(got, expected, variants, HINT_MLE_GENERIC, where)


_MLE_CORPUS = [
    ["the", "cat", "sat"],
    ["the", "dog", "sat", "on", "the", "mat"],
    ["the", "cat", "ran"],
    ["a", "cat", "sat", "on", "a", "mat"],
]
_MLE_BIGRAMS = _counts_arg(_MLE_CORPUS, 2)
_MLE_TRIGRAMS = _counts_arg(_MLE_CORPUS, 3)
_MLE_CASES = (
    Case(
        "P(cat | the) from bigram counts",
        0.5,
        {"counts": _MLE_BIGRAMS, "word": "cat", "context": ["the"]},
    ),
    Case(
        "P(mat | sat, on) from trigram counts",
        0.5,
        {"counts": _MLE_TRIGRAMS, "word": "mat", "context": ["sat", "on"]},
    ),
    Case(
        "P(the | <s>): the first word of a sentence",
        0.5,
        {"counts": _MLE_BIGRAMS, "word": "the", "context": ["<s>"]},
    ),
    Case(
        "a word never seen after its context",
        0.25,
        {"counts": _MLE_BIGRAMS, "word": "ran", "context": ["dog"]},
    ),
    Case(
        "a context never seen in training",
        0.25,
        {"counts": _MLE_TRIGRAMS, "word": "cat", "context": ["mat", "the"]},
    ),
    Case(
        "P(cat) from unigram counts: the context is ()",
        0.5,
        {"counts": _counts_arg(_MLE_CORPUS, 1), "word": "cat", "context": []},
    ),
)


def _seen_query(rng: random.Random, n: int, *, start: bool, count: int, max_len: int,
                n_words: int = 6) -> tuple[list[list[str]], list[str], str]:
    """A corpus drawn from ``rng`` and its busiest context (see :func:`_busiest`) with the word
    that follows it most: (sentences, context, word)."""
    sentences, _ = _draw_corpus(rng, count, max_len, n_words)
    context, word = _busiest(sentences, n, start=start)
    return sentences, context, word


def _mle_seen(name: str, n: int, *, start: bool, count: int, max_len: int) -> HiddenCase:
    def make(rng: random.Random) -> dict:
        sentences, context, word = _seen_query(rng, n, start=start, count=count,
                                               max_len=max_len)
        return {"counts": _counts_arg(sentences, n), "word": word, "context": context}

    return HiddenCase(name, 0.5, make)


def _mle_unigrams(rng: random.Random) -> dict:
    sentences, words = _draw_corpus(rng, 6, 4, 6)
    return {"counts": _counts_arg(sentences, 1), "word": rng.choice(sorted(words)),
            "context": []}


def _mle_never_after(rng: random.Random) -> dict:
    while True:  # until the busiest context has a word it is never followed by
        sentences, context, _ = _seen_query(rng, 3, start=False, count=12, max_len=5)
        word = _never_after(sentences, 3, context)
        if word is not None:
            return {"counts": _counts_arg(sentences, 3), "word": word, "context": context}


def _unseen_context(sentences: list[list[str]], n: int, words: list[str],
                    rng: random.Random) -> list[str]:
    """A context of n-1 words never seen in the corpus' n-grams: of its words if one is left,
    else of words it does not use."""
    seen = {gram[:-1] for gram in count_ngrams(sentences, n)}
    unseen = [list(c) for c in _contexts(sorted(words), n - 1) if c not in seen]
    if unseen:
        return rng.choice(unseen)
    return rng.sample([w for w in _WORD_POOL if w not in words], n - 1)


def _contexts(words: list[str], size: int) -> list[tuple[str, ...]]:
    contexts: list[tuple[str, ...]] = [()]
    for _ in range(size):
        contexts = [c + (w,) for c in contexts for w in words]
    return contexts


def _mle_unseen(rng: random.Random) -> dict:
    sentences, words = _draw_corpus(rng, 12, 5, 6)
    return {"counts": _counts_arg(sentences, 3), "word": rng.choice(sorted(words)),
            "context": _unseen_context(sentences, 3, words, rng)}


_MLE_HIDDEN = (
    _mle_seen("hidden: random corpus, bigrams", 2, start=False, count=10, max_len=6),
    _mle_seen("hidden: random corpus, trigrams at a sentence start", 3, start=True, count=12,
              max_len=5),
    HiddenCase("hidden: unigrams (empty context)", 0.5, _mle_unigrams),
    HiddenCase("hidden: a word never seen after a frequent trigram context", 0.5,
               _mle_never_after),
    HiddenCase("hidden: an unseen trigram context", 0.5, _mle_unseen),
)

register(
    Task(
        id="1.2",
        assignment=ASSIGNMENT,
        func_name="mle_prob",
        kind="formula",
        title="Maximum-likelihood conditional probability from n-gram counts",
        cases=_MLE_CASES,
        hidden=_MLE_HIDDEN,
        build_args=_build_mle_args,
        reference=mle_prob,
        to_plain=to_plain_float,
        judge=_judge_mle,
        forbidden=_NO_LIBRARIES,
        error_hints={
            "ZeroDivisionError": HINT_MLE_UNSEEN_CONTEXT,
            "KeyError": "An n-gram that was never seen is not in counts: use "
            "counts.get(ngram, 0) to read a count that may be missing.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 1.3 add_k_prob
# --------------------------------------------------------------------------------------------

HINT_NO_KV = (
    "Add k * |V| to the denominator: k is added to the count of each of the |V| words, so the "
    "denominator grows by k * |V| and the probabilities still sum to 1."
)
HINT_V_SIZE = (
    "|V| is len(vocab), the words the model can predict ('</s>' included, '<s>' never): use the "
    "vocab you are given, without adding or removing a word."
)
HINT_K_IGNORED = "Use the smoothing constant k you are given, not 1 (add-one is only k = 1)."
HINT_K_ONCE = (
    "The denominator adds k once per vocabulary word: c(context) + k * |V|, not c(context) + k."
)
HINT_K_NUMERATOR = (
    "Add k to the numerator as well: every count, including 0, becomes c + k."
)
HINT_ADDK_JOINT = (
    "c(context) in the denominator is the total of the n-grams that start with the context, "
    "not the total of all n-grams."
)
HINT_ADDK_UNSEEN_CONTEXT = (
    "For an unseen context every word has count 0, so add-k gives each one k / (k * |V|) = "
    "1 / |V|; the formula handles this case without any special branch."
)
HINT_ADDK_GENERIC = (
    "P(word | context) = (c(context + (word,)) + k) / (c(context) + k * len(vocab)), where "
    "c(context) is the sum of the counts of the n-grams g with g[:-1] == context."
)


def _build_add_k_args(args: dict) -> tuple:
    return (
        _counts_from_arg(args["counts"]),
        list(args["vocab"]),
        args["word"],
        tuple(args["context"]),
        float(args["k"]),
    )


def _judge_add_k(got: object, expected: object, args: dict) -> Verdict:
    counts, vocab, word, context, k = _build_add_k_args(args)
    where = f"For P({word!r} | {context!r}) with k = {k:g}"
    c = counts.get(context + (word,), 0)
    c_context = context_count(counts, context)
    size = len(vocab)
    seen_tokens = {token for gram in counts for token in gram}

    variants = [
        (HINT_NO_KV, lambda: (c + k) / c_context),
        (HINT_K_IGNORED, lambda: (c + 1) / (c_context + size)),
        (HINT_K_ONCE, lambda: (c + k) / (c_context + k)),
        (HINT_K_NUMERATOR, lambda: c / (c_context + k * size)),
        (HINT_V_SIZE, lambda: (c + k) / (c_context + k * (size + 1))),
        (HINT_V_SIZE, lambda: (c + k) / (c_context + k * (size - 1))),
        (HINT_V_SIZE, lambda: (c + k) / (c_context + k * len(seen_tokens))),
        (HINT_ADDK_JOINT, lambda: (c + k) / (sum(counts.values()) + k * size)),
    ]
    if c_context == 0:
        variants.insert(0, (HINT_ADDK_UNSEEN_CONTEXT, lambda: 0.0))
    return _float_verdict(got, expected, variants, HINT_ADDK_GENERIC, where)


_ADDK_VOCAB = _vocab_arg(_MLE_CORPUS)
_ADDK_CASES = (
    Case(
        "add-one (k = 1): P(cat | the)",
        0.5,
        {"counts": _MLE_BIGRAMS, "vocab": _ADDK_VOCAB, "word": "cat", "context": ["the"],
         "k": 1.0},
    ),
    Case(
        "k = 0.5: P(sat | cat)",
        0.5,
        {"counts": _MLE_BIGRAMS, "vocab": _ADDK_VOCAB, "word": "sat", "context": ["cat"],
         "k": 0.5},
    ),
    Case(
        "k = 0.1: an unseen trigram",
        0.5,
        {"counts": _MLE_TRIGRAMS, "vocab": _ADDK_VOCAB, "word": "dog", "context": ["the", "cat"],
         "k": 0.1},
    ),
    Case(
        "k = 0.5: an unseen context",
        0.5,
        {"counts": _MLE_TRIGRAMS, "vocab": _ADDK_VOCAB, "word": "cat",
         "context": ["mat", "the"], "k": 0.5},
    ),
)


def _add_k_small(rng: random.Random) -> dict:
    sentences, context, word = _seen_query(rng, 3, start=False, count=12, max_len=5)
    return {"counts": _counts_arg(sentences, 3), "vocab": _vocab_arg(sentences), "word": word,
            "context": context, "k": rng.choice([0.01, 0.02, 0.05, 0.1, 0.2])}


def _add_k_unigrams(rng: random.Random) -> dict:
    sentences, words = _draw_corpus(rng, 6, 4, 6)
    return {"counts": _counts_arg(sentences, 1), "vocab": _vocab_arg(sentences),
            "word": rng.choice(sorted(words)), "context": [],
            "k": rng.choice([1.5, 2.0, 2.5, 3.0])}


def _add_k_unseen(rng: random.Random) -> dict:
    sentences, words = _draw_corpus(rng, 10, 6, 6)
    others = rng.sample([w for w in _WORD_POOL if w not in words], 4)
    vocab = sorted(set(words) | set(others) | {EOS})
    return {"counts": _counts_arg(sentences, 2), "vocab": vocab, "word": rng.choice(vocab),
            "context": [rng.choice(others)], "k": rng.choice([0.005, 0.01, 0.02])}


_ADDK_HIDDEN = (
    HiddenCase("hidden: random corpus, trigrams, small k", 0.5, _add_k_small),
    HiddenCase("hidden: unigrams, k above 1", 0.5, _add_k_unigrams),
    HiddenCase("hidden: unseen context, larger vocabulary", 0.5, _add_k_unseen),
)

register(
    Task(
        id="1.3",
        assignment=ASSIGNMENT,
        func_name="add_k_prob",
        kind="formula",
        title="Add-k smoothed conditional probability",
        cases=_ADDK_CASES,
        hidden=_ADDK_HIDDEN,
        build_args=_build_add_k_args,
        reference=add_k_prob,
        to_plain=to_plain_float,
        judge=_judge_add_k,
        forbidden=_NO_LIBRARIES,
        error_hints={
            "ZeroDivisionError": HINT_NO_KV,
            "KeyError": "An n-gram that was never seen is not in counts: use "
            "counts.get(ngram, 0) to read a count that may be missing.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 1.4 perplexity (debug): perplexity with a closed vocabulary
# --------------------------------------------------------------------------------------------

UNK = "<unk>"


def closed(sentence: Sequence[str], vocab: Sequence[str]) -> list[str]:
    """The sentence with every word outside ``vocab`` replaced by ``"<unk>"``."""
    known = set(vocab)
    return [word if word in known else UNK for word in sentence]


def perplexity(model, sentences: list[list[str]]) -> float:
    """Task 1.4 (the fixed function): the perplexity of a model fitted with a closed vocabulary.

    Every held-out word outside ``model.vocab`` is read as ``"<unk>"`` (as a predicted token and
    in contexts); then, as in the chapter, exp of the mean negative natural-log probability of
    every word and one ``"</s>"`` per sentence, each predicted from the n-1 tokens before it.
    """
    n = model.n
    total_logprob = 0.0
    n_predicted = 0
    for sentence in sentences:
        padded = pad(closed(sentence, model.vocab), n)
        for i in range(n - 1, len(padded)):
            total_logprob += model.logprob(padded[i], tuple(padded[i - n + 1 : i]))
            n_predicted += 1
    return math.exp(-total_logprob / n_predicted)


HINT_PPL_NO_EOS = (
    "Predict '</s>' too: N counts every word AND one '</s>' per sentence, each with its "
    "log-probability."
)
HINT_PPL_BOS_IN_N = (
    "N counts the predicted tokens only (every word and one '</s>' per sentence): the '<s>' "
    "padding is context, never predicted, so it is not counted."
)
HINT_PPL_BASE = (
    "Exponentiate with the base of the logarithm: model.logprob is a natural log, so "
    "perplexity = math.exp(-mean log-probability)."
)
HINT_PPL_NO_EXP = (
    "That is the cross-entropy (the mean negative log-probability); perplexity is its "
    "exponential: math.exp(cross_entropy)."
)
HINT_PPL_SIGN = (
    "Negate the mean log-probability before exponentiating: perplexity = exp(-mean log p), which "
    "is at least 1."
)
HINT_PPL_PER_SENTENCE = (
    "Pool all predicted tokens of all sentences into ONE mean, then exponentiate once; do not "
    "average per-sentence perplexities (or per-sentence means)."
)
HINT_PPL_SUM = (
    "Divide the total negative log-probability by N, the number of predicted tokens, before "
    "exponentiating: perplexity uses the mean, not the sum."
)
HINT_PPL_CONTEXT = (
    "The context of a token is the n-1 tokens BEFORE it in the padded sentence; do not include "
    "the token itself."
)
HINT_PPL_INFINITE = (
    "Your perplexity is infinite: some predicted token got probability 0. A word the model "
    "does not know must be read as '<unk>' (which the model was trained with), and '<s>' is "
    "never predicted."
)
HINT_PPL_UNK_CONTEXT = (
    "Unknown words must become '<unk>' in the contexts too, not only where they are predicted: "
    "replace them in the sentence once, before padding, and read every token from there."
)
HINT_PPL_UNK_BOS = (
    "The '<s>' padding became '<unk>': '<s>' is not in model.vocab (it is never predicted) but "
    "it is a context the model knows. Replace the unknown words before you pad the sentence."
)
HINT_PPL_UNK_DROPPED = (
    "An unknown word still has to be predicted (and counted in N): score it as '<unk>' instead "
    "of leaving it out."
)
HINT_PPL_GENERIC = (
    "perplexity = exp(-(1/N) * sum of ln P(token | context)) over every word and one '</s>' per "
    "sentence, unknown words read as '<unk>', each context the n-1 tokens before the token in "
    "the sentence padded with n-1 '<s>'."
)


def _fit_model(args: dict):
    """The package's NGramLM fitted on the case's training sentences (which hold '<unk>'). Its
    ``perplexity`` is forbidden in task 1.4: the tripwire of the check cells and of the grader
    fails a function that calls it. (Imported here so that the other tasks do not depend on
    :mod:`coursepkg.ngram`.)"""
    from coursepkg.ngram import NGramLM

    kwargs = {"k": float(args["k"])} if args["smoothing"] == "add_k" else {}
    model = NGramLM(int(args["n"]), args["smoothing"], **kwargs)
    return model.fit([list(sentence) for sentence in args["train"]])


def _build_perplexity_args(args: dict) -> tuple:
    return (_fit_model(args), [list(sentence) for sentence in args["sentences"]])


def _logprobs(model, tokens: list[str], shift: int = 0,
              context_tokens: list[str] | None = None) -> list[float]:
    """Log-probabilities of the predicted tokens of a padded sentence ``tokens``; contexts are
    read from ``context_tokens`` (default: ``tokens``), shifted ``shift`` tokens right."""
    n = model.n
    source = tokens if context_tokens is None else context_tokens
    return [model.logprob(tokens[i], tuple(source[i - n + 1 + shift : i + shift]))
            for i in range(n - 1, len(tokens))]


def _judge_perplexity(got: object, expected: object, args: dict) -> Verdict:
    model, sentences = _build_perplexity_args(args)
    n, vocab = model.n, model.vocab
    padded = [pad(closed(sentence, vocab), n) for sentence in sentences]
    per_sentence = [_logprobs(model, tokens) for tokens in padded]
    total = sum(sum(lps) for lps in per_sentence)
    big_n = sum(len(lps) for lps in per_sentence)
    n_sentences = len(sentences)
    mean_nll = -total / big_n
    plural = "" if n_sentences == 1 else "s"
    where = f"For {n_sentences} sentence{plural} ({big_n} predicted tokens)"

    if type(got) in (int, float) and math.isinf(got) and not math.isinf(expected):
        return _float_verdict(got, expected, [], HINT_PPL_INFINITE, where)

    def mean_of(lps: list[float]) -> float:
        return _safe_exp(-sum(lps) / len(lps))

    def no_eos() -> float:
        return math.exp(-sum(sum(lps[:-1]) for lps in per_sentence) / (big_n - n_sentences))

    def no_eos_per_sentence() -> float:  # two of the starter's bugs: name the first
        means = [-sum(lps[:-1]) / max(len(lps) - 1, 1) for lps in per_sentence]
        return math.exp(sum(means) / n_sentences)

    def shifted_context() -> float:
        return mean_of([lp for tokens in padded for lp in _logprobs(model, tokens, shift=1)])

    def raw_context() -> float:
        return mean_of([lp for sentence, tokens in zip(sentences, padded, strict=True)
                        for lp in _logprobs(model, tokens, context_tokens=pad(sentence, n))])

    def unk_padding() -> float:
        return mean_of([lp for sentence in sentences
                        for lp in _logprobs(model, closed(pad(sentence, n), vocab))])

    def dropped() -> float:
        known = [[word for word in sentence if word in set(vocab)] for sentence in sentences]
        return mean_of([lp for sentence in known for lp in _logprobs(model, pad(sentence, n))])

    variants = [
        (HINT_PPL_NO_EOS, no_eos),
        (HINT_PPL_NO_EOS, no_eos_per_sentence),
        (HINT_PPL_BOS_IN_N, lambda: math.exp(-total / (big_n + (n - 1) * n_sentences))),
        (HINT_PPL_BOS_IN_N, lambda: math.exp(-total / (big_n + n_sentences))),
        (HINT_PPL_NO_EXP, lambda: mean_nll),
        (HINT_PPL_NO_EXP, lambda: mean_nll / math.log(10)),
        (HINT_PPL_NO_EXP, lambda: mean_nll / math.log(2)),
        (HINT_PPL_BASE, lambda: 10**mean_nll),
        (HINT_PPL_BASE, lambda: 2**mean_nll),
        (HINT_PPL_BASE, lambda: math.exp(mean_nll / math.log(10))),
        (HINT_PPL_BASE, lambda: math.exp(mean_nll / math.log(2))),
        (HINT_PPL_SIGN, lambda: math.exp(-mean_nll)),
        (HINT_PPL_PER_SENTENCE,
         lambda: sum(math.exp(-sum(lps) / len(lps)) for lps in per_sentence) / n_sentences),
        (HINT_PPL_PER_SENTENCE,
         lambda: math.exp(sum(-sum(lps) / len(lps) for lps in per_sentence) / n_sentences)),
        (HINT_PPL_SUM, lambda: _safe_exp(-total)),
        (HINT_PPL_CONTEXT, shifted_context),
        (HINT_PPL_UNK_CONTEXT, raw_context),
        (HINT_PPL_UNK_BOS, unk_padding),
        (HINT_PPL_UNK_DROPPED, dropped),
    ]
    return _float_verdict(got, expected, variants, HINT_PPL_GENERIC, where)


#: Training sentences with a closed vocabulary: the rare words are already '<unk>'.
_PPL_TRAIN = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["the", "dog", "sat"],
    ["a", "cat", "ran"],
    ["a", "dog", "saw", "the", UNK],
    ["the", UNK, "saw", "a", "dog"],
    [UNK, "ran", "on", "the", "mat"],
]

_PPL_CASES = (
    Case(
        "add-one bigram model, one sentence ending in an unknown word",
        1,
        {"n": 2, "smoothing": "add_k", "k": 1.0, "train": _PPL_TRAIN,
         "sentences": [["the", "cat", "ran", "home"]]},
    ),
    Case(
        "add-k (k = 0.5) bigram model, an unknown word in the second sentence",
        1,
        {"n": 2, "smoothing": "add_k", "k": 0.5, "train": _PPL_TRAIN,
         "sentences": [["the", "cat"], ["a", "zebra", "sat", "on", "the", "mat"]]},
    ),
    Case(
        "Kneser-Ney trigram model, unknown words in the contexts of others",
        1,
        {"n": 3, "smoothing": "kneser_ney", "k": 1.0, "train": _PPL_TRAIN,
         "sentences": [["the", "cat", "sat"], ["a", "dog", "ran", "to", "the", "mat"],
                       ["the", "dog", "saw", "a", "cat"]]},
    ),
    Case(
        "add-k trigram model, an empty sentence and an unknown first word",
        1,
        {"n": 3, "smoothing": "add_k", "k": 0.25, "train": _PPL_TRAIN,
         "sentences": [["the", "mat"], [], ["zebra", "sat", "on", "a", "mat"]]},
    ),
)


def _closed_split(rng: random.Random, count: int, max_len: int, n_words: int,
                  n_test: int) -> tuple[list[list[str]], list[list[str]]]:
    """A corpus drawn from ``rng`` split into training and test sentences, with a closed
    vocabulary: the training words seen once become '<unk>' (at least one token does), and
    the test sentences hold words the model never saw (at least one)."""
    sentences, words = _draw_corpus(rng, count, max_len, n_words)
    train, test = sentences[:-n_test], sentences[-n_test:]
    seen = Counter(word for sentence in train for word in sentence)
    train = [[word if seen[word] > 1 else UNK for word in sentence] for sentence in train]
    if not any(UNK in sentence for sentence in train):
        train[-1] = [*train[-1], UNK]
    strangers = rng.sample([word for word in _WORD_POOL if word not in words], 2)
    test = [[rng.choice(strangers) if rng.random() < 0.2 else word for word in sentence]
            for sentence in test]
    first = test[0]
    test[0] = first[: len(first) // 2] + [strangers[0]] + first[len(first) // 2 :]
    return train, test


def _ppl_hidden(name: str, n: int, smoothing: str, *, empty: bool = False) -> HiddenCase:
    def make(rng: random.Random) -> dict:
        train, test = _closed_split(rng, 30, 7, 8, 5)
        if empty:
            test.insert(rng.randint(1, len(test)), [])
        k = rng.choice([0.05, 0.1, 0.2, 0.5]) if smoothing == "add_k" else 1.0
        return {"n": n, "smoothing": smoothing, "k": k, "train": train, "sentences": test}

    return HiddenCase(name, 1, make)


_PPL_HIDDEN = (
    _ppl_hidden("hidden: Kneser-Ney bigram model, unknown words", 2, "kneser_ney"),
    _ppl_hidden("hidden: add-k unigram model, unknown words", 1, "add_k"),
    _ppl_hidden("hidden: add-k trigram model, a test set with an empty sentence", 3, "add_k",
                empty=True),
    _ppl_hidden("hidden: Kneser-Ney trigram model, unknown words", 3, "kneser_ney"),
)

register(
    Task(
        id="1.4",
        assignment=ASSIGNMENT,
        func_name="perplexity",
        title="Fix the perplexity of a model with a closed vocabulary",
        cases=_PPL_CASES,
        hidden=_PPL_HIDDEN,
        build_args=_build_perplexity_args,
        reference=perplexity,
        to_plain=to_plain_float,
        judge=_judge_perplexity,
        forbidden=("nltk", "coursepkg.checks", "coursepkg.ngram.NGramLM.perplexity"),
        error_hints={
            "OverflowError": HINT_PPL_SUM,
            "ZeroDivisionError": "N, the number of predicted tokens, came out 0 for some "
            "sentence: an empty sentence still predicts its '</s>'.",
            "ValueError": "math.log got 0: a word outside model.vocab has probability 0. Read "
            "it as '<unk>', which the model knows.",
        },
        kind="debug",
    )
)


# --------------------------------------------------------------------------------------------
# Counts of every order from the counts of the top order (tasks 1.5 and 1.6)
# --------------------------------------------------------------------------------------------


def order_of(counts: Mapping[tuple[str, ...], int]) -> int:
    """n, the length of the n-grams counted."""
    return len(next(iter(counts)))


def level_counts(counts: Mapping[tuple[str, ...], int], m: int, *,
                 continuation: bool) -> Counter:
    """The m-gram counts (1 <= m <= n) that the n-gram counts of padded sentences imply.

    Every m-gram that ends at a predicted token is the last m tokens of the n-gram that ends
    there, so ``continuation=False`` gives c(v w), the total count of the n-grams ending in
    (v, w); ``continuation=True`` (m < n) gives N1+(. v w), the number of distinct tokens seen
    before (v, w): the number of distinct (m+1)-token endings that end in it.
    """
    n = order_of(counts)
    table: Counter = Counter()
    if continuation:
        for ending in {gram[n - m - 1 :] for gram, c in counts.items() if c}:
            table[ending[1:]] += 1
    else:
        for gram, c in counts.items():
            table[gram[n - m :]] += c
    return table


def followers(table: Mapping[tuple[str, ...], int], history: tuple[str, ...]) -> dict[str, int]:
    """The words seen after ``history`` in an m-gram table, with their counts."""
    return {gram[-1]: c for gram, c in table.items() if gram[:-1] == history and c}


def _history_arg(context: Sequence[str], m: int) -> tuple[str, ...]:
    """The last m - 1 tokens of a context."""
    context = tuple(context)
    return context[len(context) - (m - 1) :] if m > 1 else ()


# --------------------------------------------------------------------------------------------
# Task 1.5 kneser_ney_prob (extension)
# --------------------------------------------------------------------------------------------


def kneser_ney_prob(counts: dict[tuple[str, ...], int], word: str, context: tuple[str, ...],
                    discount: float) -> float:
    """Task 1.5: interpolated Kneser-Ney from the n-gram counts of one order n >= 2.

    Raw counts at the top order, continuation counts N1+(. v w) below it, the continuation
    unigram distribution at the bottom; a history never seen at some order is skipped. Equal to
    :class:`coursepkg.ngram.NGramLM` with ``smoothing="kneser_ney"`` fitted on the sentences
    whose counts these are (the tests check it).
    """
    return _kneser_ney(counts, word, context, discount)


def _kneser_ney(counts, word, context, d, *, raw_lower=False, continuation_top=False,
                backoff=False, lambda_without_types=False, unseen_zero=False,
                uniform_base=False) -> float:
    """Kneser-Ney, and with a flag set one of its known mistakes (see the judge)."""
    n = order_of(counts)
    if n == 1:
        unigram = level_counts(counts, 1, continuation=False)
        return unigram.get((word,), 0) / sum(unigram.values())
    unigram = level_counts(counts, 1, continuation=not raw_lower)
    if uniform_base:
        p = 1 / len(unigram) if (word,) in unigram else 0.0
    else:
        p = unigram.get((word,), 0) / sum(unigram.values())
    for m in range(2, n + 1):
        top = m == n
        table = level_counts(counts, m, continuation=(not top and not raw_lower)
                             or (top and continuation_top))
        seen = followers(table, _history_arg(context, m))
        if not seen:
            if unseen_zero:
                p = 0.0
            continue
        total = sum(seen.values())
        discounted = max(seen.get(word, 0) - d, 0.0) / total
        lam = d / total if lambda_without_types else d * len(seen) / total
        p = discounted if backoff and seen.get(word, 0) > 0 else discounted + lam * p
    return p


HINT_KN_RAW_LOWER = (
    "Below the top order, Kneser-Ney counts how many DIFFERENT tokens come before an n-gram "
    "(its continuation count), not how often it occurs: a word that always follows the same "
    "word ('Francisco' after 'San') is a poor guess after any other history."
)
HINT_KN_TOP = (
    "The top order uses the raw counts of the n-grams; only the lower orders use continuation "
    "counts."
)
HINT_KN_BACKOFF = (
    "Interpolate, do not back off: even for an n-gram that was seen, add lambda(u) times the "
    "lower order's probability to the discounted estimate, or the probabilities no longer sum "
    "to 1."
)
HINT_KN_LAMBDA = (
    "lambda(u) gives back the discount taken from EACH distinct word seen after the history: "
    "D times the number of such words, divided by the history's total count."
)
HINT_UNSEEN_HISTORY = (
    "A history never seen at some order has no counts to estimate from: skip that order and "
    "keep the estimate of the shorter history (its weight is 1), instead of returning 0."
)
HINT_KN_UNIFORM = (
    "The bottom of the recursion is the continuation unigram distribution: how many different "
    "tokens precede the word, out of the number of distinct bigrams, not 1/|V|."
)
HINT_KN_GENERIC = (
    "Build the recursion from the unigram level up: at order m the history is the last m-1 "
    "tokens of the context, the counts are raw at the top order and continuation counts below "
    "it, each level is max(c - D, 0) / total + D * (distinct followers) / total * (the level "
    "below), and a history never seen leaves the estimate as it is."
)


def _build_smoothed_args(args: dict) -> tuple:
    built = (_counts_from_arg(args["counts"]), args["word"], tuple(args["context"]))
    return (*built, float(args["discount"])) if "discount" in args else built


def _describe_query(args: dict) -> str:
    n = len(args["counts"][0][0])
    extra = f" with D = {args['discount']:g}" if "discount" in args else ""
    return f"For P({args['word']!r} | {tuple(args['context'])!r}) from {n}-gram counts{extra}"


def _judge_kneser_ney(got: object, expected: object, args: dict) -> Verdict:
    counts, word, context, d = _build_smoothed_args(args)

    def variant(**flag: bool) -> Callable[[], float]:
        return lambda: _kneser_ney(counts, word, context, d, **flag)

    variants = [
        (HINT_UNSEEN_HISTORY, variant(unseen_zero=True)),
        (HINT_KN_RAW_LOWER, variant(raw_lower=True)),
        (HINT_KN_TOP, variant(continuation_top=True)),
        (HINT_KN_BACKOFF, variant(backoff=True)),
        (HINT_KN_LAMBDA, variant(lambda_without_types=True)),
        (HINT_KN_UNIFORM, variant(uniform_base=True)),
    ]
    return _float_verdict(got, expected, variants, HINT_KN_GENERIC, _describe_query(args))


#: A small corpus with its own "San Francisco": a frequent word that follows one word only.
_SMOOTH_CORPUS = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["the", "dog", "sat", "on", "a", "log"],
    ["a", "cat", "saw", "the", "dog"],
    ["the", "cat", "ran", "to", "san", "francisco"],
    ["san", "francisco", "is", "far"],
    ["the", "dog", "ran", "to", "the", "cat"],
]
_SMOOTH_BIGRAMS = _counts_arg(_SMOOTH_CORPUS, 2)
_SMOOTH_TRIGRAMS = _counts_arg(_SMOOTH_CORPUS, 3)


def _query(counts: list, word: str, context: list[str], sentences: list[list[str]],
           **extra: float) -> dict:
    """A case's args: the student's function gets the counts, the word and the context (and
    the discount); ``"_sentences"``, the corpus counted, is the trusted half's only (the tests
    fit the package's model on it)."""
    return {"counts": counts, "word": word, "context": context, **extra,
            "_sentences": sentences}


_KN_CASES = (
    Case("bigrams, D = 0.75: P(cat | the), a seen bigram", 1,
         _query(_SMOOTH_BIGRAMS, "cat", ["the"], _SMOOTH_CORPUS, discount=0.75)),
    Case("bigrams: P(francisco | the), a frequent word never seen after the history", 1,
         _query(_SMOOTH_BIGRAMS, "francisco", ["the"], _SMOOTH_CORPUS, discount=0.75)),
    Case("trigrams, D = 0.5: P(on | cat, sat), a seen trigram", 1,
         _query(_SMOOTH_TRIGRAMS, "on", ["cat", "sat"], _SMOOTH_CORPUS, discount=0.5)),
    Case("trigrams: P(cat | mat, the), a history never seen", 1,
         _query(_SMOOTH_TRIGRAMS, "cat", ["mat", "the"], _SMOOTH_CORPUS, discount=0.75)),
    Case("trigrams: P(the | <s>, <s>), the first word of a sentence", 1,
         _query(_SMOOTH_TRIGRAMS, "the", ["<s>", "<s>"], _SMOOTH_CORPUS, discount=0.9)),
    Case("bigrams, D = 0: no discount at all", 1,
         _query(_SMOOTH_BIGRAMS, "sat", ["dog"], _SMOOTH_CORPUS, discount=0.0)),
)


def _smoothing_hidden(name: str, n: int, which: str, points: float, *,
                      with_discount: bool) -> HiddenCase:
    """A hidden case of tasks 1.5 and 1.6: a random corpus's n-gram counts and a query whose
    history is ``which``: "seen" (the busiest), "never after" (a word never seen after the
    busiest history), "unseen" (a history never seen), "start" (a sentence start)."""

    def make(rng: random.Random) -> dict:
        while True:
            sentences, words = _draw_corpus(rng, 14, 6, 7)
            counts = _counts_arg(sentences, n)
            if which == "unseen":
                context, word = _unseen_context(sentences, n, words, rng), rng.choice(words)
            else:
                context, word = _busiest(sentences, n, start=which == "start")
                if which == "never after":
                    word = _never_after(sentences, n, context)
            if word is not None:
                break
        extra = {"discount": rng.choice([0.5, 0.6, 0.75, 0.8, 0.9])} if with_discount else {}
        return _query(counts, word, context, sentences, **extra)

    return HiddenCase(name, points, make)


_KN_HIDDEN = (
    _smoothing_hidden("hidden: bigrams of a random corpus, a seen bigram", 2, "seen", 2,
                      with_discount=True),
    _smoothing_hidden("hidden: trigrams, a word never seen after a frequent history", 3,
                      "never after", 2, with_discount=True),
    _smoothing_hidden("hidden: trigrams, a history never seen", 3, "unseen", 2,
                      with_discount=True),
    _smoothing_hidden("hidden: 4-grams at the start of a sentence", 4, "start", 2,
                      with_discount=True),
)

_SMOOTHING_ERRORS = {
    "ZeroDivisionError": "A history never seen has no counts to divide by: skip that order and "
    "keep the estimate of the shorter history.",
    "KeyError": "An n-gram that was never seen is not in counts: use counts.get(ngram, 0) to "
    "read a count that may be missing.",
}

register(
    Task(
        id="1.5",
        assignment=ASSIGNMENT,
        func_name="kneser_ney_prob",
        title="Interpolated Kneser-Ney from the counts of one order",
        cases=_KN_CASES,
        hidden=_KN_HIDDEN,
        build_args=_build_smoothed_args,
        reference=kneser_ney_prob,
        to_plain=to_plain_float,
        judge=_judge_kneser_ney,
        forbidden=_NO_LIBRARIES,
        error_hints=_SMOOTHING_ERRORS,
        kind="extension",
    )
)


# --------------------------------------------------------------------------------------------
# Task 1.6 witten_bell_prob (extension)
# --------------------------------------------------------------------------------------------


def witten_bell_prob(counts: dict[tuple[str, ...], int], word: str,
                     context: tuple[str, ...]) -> float:
    """Task 1.6: interpolated Witten-Bell from the n-gram counts of one order n.

    At each order m, for the history u of the last m-1 tokens, with c(u .) its total count and
    T(u) the number of distinct words seen after it::

        P_WB(w | u) = (c(u w) + T(u) * P_WB(w | u')) / (c(u .) + T(u)),

    raw counts at every order, the unigram MLE c(w) / N at the bottom, and a history never seen
    skipped. Not in the book (nor in :mod:`coursepkg.ngram`): this is its reference.
    """
    return _witten_bell(counts, word, context)


def _witten_bell(counts, word, context, *, no_types_in_denominator=False, vocab_types=False,
                 backoff=False, unseen_zero=False, continuation_lower=False) -> float:
    """Witten-Bell, and with a flag set one of its known mistakes (see the judge)."""
    n = order_of(counts)
    unigram = level_counts(counts, 1, continuation=continuation_lower and n > 1)
    p = unigram.get((word,), 0) / sum(unigram.values())
    for m in range(2, n + 1):
        table = level_counts(counts, m, continuation=continuation_lower and m < n)
        seen = followers(table, _history_arg(context, m))
        if not seen:
            if unseen_zero:
                p = 0.0
            continue
        total, types = sum(seen.values()), len(seen)
        if vocab_types:
            types = len(unigram)
        c = seen.get(word, 0)
        denominator = total if no_types_in_denominator else total + types
        if backoff:
            p = c / denominator if c > 0 else types * p / denominator
        else:
            p = (c + types * p) / denominator
    return p


HINT_WB_DENOMINATOR = (
    "The denominator is c(u .) + T(u): the history's count plus the number of distinct words "
    "seen after it, so that the weights of the seen words and of the lower order sum to 1."
)
HINT_WB_TYPES = (
    "T(u) is the number of distinct words seen after THIS history, not the size of the "
    "vocabulary: a history followed by many different words trusts the shorter one more."
)
HINT_WB_BACKOFF = (
    "Interpolate, do not back off: a word seen after the history also gets T(u) / (c(u .) + "
    "T(u)) times the lower order's probability, added to its own count's share."
)
HINT_WB_CONTINUATION = (
    "Witten-Bell uses the plain counts at every order (the m-gram counts the n-grams imply), "
    "not Kneser-Ney's continuation counts."
)
HINT_WB_GENERIC = (
    "Build the estimate from the unigram level up: start from c(w) / N, and at each order m "
    "with a history seen T times as distinct followers, take (c(u w) + T * previous) / "
    "(c(u .) + T); a history never seen leaves the estimate as it is."
)


def _judge_witten_bell(got: object, expected: object, args: dict) -> Verdict:
    counts, word, context = _build_smoothed_args(args)

    def variant(**flag: bool) -> Callable[[], float]:
        return lambda: _witten_bell(counts, word, context, **flag)

    variants = [
        (HINT_UNSEEN_HISTORY, variant(unseen_zero=True)),
        (HINT_WB_DENOMINATOR, variant(no_types_in_denominator=True)),
        (HINT_WB_TYPES, variant(vocab_types=True)),
        (HINT_WB_BACKOFF, variant(backoff=True)),
        (HINT_WB_CONTINUATION, variant(continuation_lower=True)),
    ]
    return _float_verdict(got, expected, variants, HINT_WB_GENERIC, _describe_query(args))


_WB_CASES = (
    Case("bigrams: P(cat | the), a seen bigram", 1,
         _query(_SMOOTH_BIGRAMS, "cat", ["the"], _SMOOTH_CORPUS)),
    Case("bigrams: P(francisco | the), a word never seen after the history", 1,
         _query(_SMOOTH_BIGRAMS, "francisco", ["the"], _SMOOTH_CORPUS)),
    Case("trigrams: P(on | dog, sat), a seen trigram", 1,
         _query(_SMOOTH_TRIGRAMS, "on", ["dog", "sat"], _SMOOTH_CORPUS)),
    Case("trigrams: P(dog | mat, the), a history never seen", 1,
         _query(_SMOOTH_TRIGRAMS, "dog", ["mat", "the"], _SMOOTH_CORPUS)),
    Case("unigrams: P(cat), the context is ()", 1,
         _query(_counts_arg(_SMOOTH_CORPUS, 1), "cat", [], _SMOOTH_CORPUS)),
)

_WB_HIDDEN = (
    _smoothing_hidden("hidden: bigrams of a random corpus, a seen bigram", 2, "seen", 1.25,
                      with_discount=False),
    _smoothing_hidden("hidden: trigrams, a word never seen after a frequent history", 3,
                      "never after", 1.25, with_discount=False),
    _smoothing_hidden("hidden: trigrams, a history never seen", 3, "unseen", 1.25,
                      with_discount=False),
    _smoothing_hidden("hidden: 4-grams at the start of a sentence", 4, "start", 1.25,
                      with_discount=False),
)

register(
    Task(
        id="1.6",
        assignment=ASSIGNMENT,
        func_name="witten_bell_prob",
        title="Interpolated Witten-Bell from the counts of one order",
        cases=_WB_CASES,
        hidden=_WB_HIDDEN,
        build_args=_build_smoothed_args,
        reference=witten_bell_prob,
        to_plain=to_plain_float,
        judge=_judge_witten_bell,
        forbidden=_NO_LIBRARIES,
        error_hints=_SMOOTHING_ERRORS,
        kind="extension",
    )
)


# --------------------------------------------------------------------------------------------
# Questions 1.7 to 1.9: keys computed from coursepkg when the question is checked
# --------------------------------------------------------------------------------------------

#: The chapter's toy corpus (book/01_ngrams.md, "Count and normalise").
TOY = ["to be or not to be", "to die to sleep", "to sleep perchance to dream"]
#: The Shakespeare text of question 1.7.
HAMLET = "Hamlet"
#: The estimators of question 1.9, as NGramLM names them.
ESTIMATORS = ("mle", "add_k", "kneser_ney")


def uniform_perplexity_key() -> float:
    """|V| of a unigram NGramLM fitted on the sentences of Hamlet: the perplexity of the
    uniform distribution over that vocabulary, on any text made of its tokens."""
    from coursepkg import data
    from coursepkg.ngram import NGramLM

    model = NGramLM(1).fit(data.sentences(data.shakespeare_plays()[HAMLET]))
    return float(len(model.vocab))


def distinct_bigrams_key() -> int:
    """The number of distinct bigrams of the first two toy sentences, padded."""
    from coursepkg.ngram import ngrams, pad

    return len({gram for text in TOY[:2] for gram in ngrams(pad(text.split(), 2), 2)})


def zero_for_unseen_key() -> str:
    """The one estimator whose bigram model of the toy corpus gives P(or | dream) = 0."""
    from coursepkg.ngram import NGramLM

    toy = [text.split() for text in TOY]
    zero = [name for name in ESTIMATORS if NGramLM(2, name).fit(toy).prob("or", ["dream"]) == 0]
    if len(zero) != 1:
        raise CheckerBug(f"question 1.9 expects one estimator with a zero, found {zero}")
    return zero[0]


#: What a question's function may not call: this module computes the keys (a function that
#: asks it for one gets 0; the task's own reference is forbidden anyway).
_QUESTION_FORBIDDEN = ("nltk", "coursepkg.checks.ch01_ngrams")


def _question(*args, **kwargs) -> Task:
    """:func:`coursepkg.checks.question` with the chapter's forbidden names."""
    return replace(question(*args, **kwargs), forbidden=_QUESTION_FORBIDDEN)


register(_question(
    "1.7", ASSIGNMENT, "uniform_perplexity",
    "Perplexity of the uniform model over Hamlet's vocabulary",
    uniform_perplexity_key, points=1, kind_of_answer="number", tolerance=1e-6,
    hint="Not the expected answer: a model that gives each of |V| tokens the same probability "
    "1/|V| has a cross-entropy of ln |V| on any text; count the tokens of the vocabulary, '</s>' "
    "included.",
))
register(_question(
    "1.8", ASSIGNMENT, "distinct_bigrams",
    "The number of distinct bigrams of two padded sentences",
    distinct_bigrams_key, points=1, kind_of_answer="int",
    hint="Not the expected answer: pad each sentence with one '<s>' and one '</s>', list its "
    "bigrams, and count each different pair once over both sentences.",
))
register(_question(
    "1.9", ASSIGNMENT, "zero_for_unseen",
    "Which estimator gives an unseen bigram probability 0?",
    zero_for_unseen_key, points=1, kind_of_answer="choice", choices=ESTIMATORS,
    hint="Not the expected answer: which of the three formulas has nothing but the bigram's "
    "own count in its numerator?",
))


# --------------------------------------------------------------------------------------------
# Task 1.10 train_bigram (train): a bigram table of logits, trained by gradient descent
# --------------------------------------------------------------------------------------------

#: The number of symbols of the task's Markov sources (the model's vocabulary).
SYMBOLS = 10
#: The state_dict of the course model the student returns: ``nn.Embedding(10, 10)``, row i the
#: logits of the symbol after symbol i.
BIGRAM_SHAPES = {"weight": (SYMBOLS, SYMBOLS)}
#: Excess held-out cross-entropy over the source's entropy rate (nats per symbol): full marks
#: up to 0.05, half up to 0.15, a quarter up to 0.4. The reference stays below 0.03 in about
#: a second; counting (the MLE) gets the same; an untrained table is about 1 nat above.
BIGRAM_BANDS = ((0.05, 1.0), (0.15, 0.5), (0.4, 0.25))
BIGRAM_TIME_LIMIT = 10.0
#: Held-out sequences the grader scores a table on (drawn from the case's "_heldout" seed).
HELD_OUT_SEQUENCES, HELD_OUT_LENGTH = 50, 400


def bigram_model():
    """The course model of task 1.10: a table of next-symbol logits, one row per symbol."""
    from torch import nn

    return nn.Embedding(SYMBOLS, SYMBOLS)


def markov_chain(seed: int):
    """The case's source: a random chain over :data:`SYMBOLS` symbols (coursepkg.data)."""
    import torch

    from coursepkg import data

    return data.random_transition_matrix(SYMBOLS, generator=torch.Generator().manual_seed(seed),
                                         sharpness=2.0)


def markov_sequences(chain, seed: int, count: int, length: int):
    import torch

    from coursepkg import data

    return data.markov_source(count, length, generator=torch.Generator().manual_seed(seed),
                              transition=chain)


def _build_bigram_args(args: dict) -> tuple:
    """The student's arguments: the training sequences (B, T), the number of symbols, and a
    seed for the initialisation (``"init"``: not the source's seed, from which the chain
    itself could be rebuilt)."""
    chain = markov_chain(args["seed"])
    return (markov_sequences(chain, args["seed"] + 1, args["B"], args["T"]), SYMBOLS,
            args["init"])


def _bigram_held_out(args: dict) -> dict:
    """The ``expected`` hook: the held-out sequences (as lists) and the source's entropy rate;
    the trusted process only."""
    from coursepkg import data

    chain = markov_chain(args["seed"])
    held_out = markov_sequences(chain, args["_heldout"], HELD_OUT_SEQUENCES, HELD_OUT_LENGTH)
    return {"sequences": held_out.tolist(), "entropy_rate": data.markov_entropy_rate(chain)}


def bigram_cross_entropy(weight, sequences) -> float:
    """The mean cross-entropy (nats per symbol) of the logits table ``weight`` (K, K) on the
    next symbol of every position of ``sequences`` (B, T) but the first."""
    import torch

    x = torch.as_tensor(sequences)
    log_probs = torch.log_softmax(weight.double(), dim=-1)  # (K, K)
    return -log_probs[x[:, :-1], x[:, 1:]].mean().item()


def train_bigram(x, vocab_size: int, seed: int):
    """Task 1.10: full-batch gradient descent (Adam) on the cross-entropy of the next symbol."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Embedding(vocab_size, vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.5)
    previous, following = x[:, :-1].reshape(-1), x[:, 1:].reshape(-1)
    for _ in range(60):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(previous), following).backward()
        optimizer.step()
    return model


HINT_TRAIN_FAR = (
    "The held-out loss is far above what the source allows: train the table on the sequences "
    "you are given (each symbol predicts the next), minimising the cross-entropy, until the "
    "training loss stops falling."
)
HINT_TRAIN_SHORT = (
    "Partial credit: the table is still learning. Take more steps or a larger learning rate "
    "until the training loss stops falling."
)
HINT_TRAIN_PROBABILITIES = (
    "Return logits, not probabilities: the grader applies a softmax to each row of the table, "
    "so a row of probabilities becomes almost uniform. Log-probabilities are logits too."
)
HINT_TRAIN_TRANSPOSED = (
    "Row i of the table holds the logits of the symbol AFTER symbol i: your table is indexed "
    "the other way round (the next symbol picks the row)."
)

def _judge_bigram(got: object, expected: dict, args: dict) -> Verdict:
    import torch

    from coursepkg.checks.tensors import state_dict_tensors

    weight = state_dict_tensors(got, BIGRAM_SHAPES)["weight"]
    floor = expected["entropy_rate"]
    excess = bigram_cross_entropy(weight, expected["sequences"]) - floor
    rows = weight.double().sum(dim=-1)
    if bool((weight >= 0).all()) and bool(torch.allclose(rows, torch.ones_like(rows),
                                                         atol=1e-3)):
        return Verdict(False, HINT_TRAIN_PROBABILITIES, f"excess {excess:.4g} nats per symbol.")
    worst = BIGRAM_BANDS[-1][0]
    if excess > BIGRAM_BANDS[0][0]:
        flipped = bigram_cross_entropy(weight.T, expected["sequences"]) - floor
        if flipped < min(excess, worst):
            return Verdict(False, HINT_TRAIN_TRANSPOSED, f"excess {excess:.4g} nats per symbol.")
    hint = HINT_TRAIN_SHORT if excess <= worst else HINT_TRAIN_FAR
    return banded(excess, BIGRAM_BANDS, higher_is_better=False, hint=hint,
                  metric="held-out cross-entropy above the source's entropy rate (nats)")


def _bigram_hidden(name: str) -> HiddenCase:
    return HiddenCase(name, 3, lambda rng: {"seed": draw_seed(rng), "init": rng.randrange(1000),
                                            "B": 20, "T": 400, "_heldout": draw_seed(rng)})


register(
    Task(
        id="1.10",
        assignment=ASSIGNMENT,
        func_name="train_bigram",
        title="Train a bigram table of logits by gradient descent",
        cases=(Case("20 sequences of 400 symbols from a Markov source", 3,
                    {"seed": 101, "init": 0, "B": 20, "T": 400, "_heldout": 9101}),),
        hidden=(_bigram_hidden("hidden: another source"),
                _bigram_hidden("hidden: a third source")),
        build_args=_build_bigram_args,
        reference=train_bigram,
        to_plain=lambda value: state_dict_plain(value, BIGRAM_SHAPES),
        judge=_judge_bigram,
        forbidden=(*_NO_LIBRARIES, "coursepkg.lm.train", "coursepkg.data"),
        kind="train",
        time_limit=BIGRAM_TIME_LIMIT,
        expected=_bigram_held_out,
    )
)
