"""Chapter 1 tasks (``01_ngrams``): n-gram counts, MLE and add-k probabilities, perplexity.

Each task has a reference implementation written to be obviously correct (small, no tricks),
JSON ``args`` for its cases, and a judge that recognises the mistakes students plausibly make by
recomputing each wrong variant from the case's ``args`` and comparing.

Conventions shared with :mod:`coursepkg.ngram`: a sentence is a list of words; it is padded with
n-1 ``"<s>"`` at the start and one ``"</s>"`` at the end; n-grams are tuples of words; natural logs.

The public cases are small corpora written out; the hidden cases' generators draw their corpora
(the words, how many sentences, how long) from the grader's random generator, keeping what each
case is there for: an empty sentence, n-grams longer than the sentence, a context seen only at a
sentence start, an unseen context, a word never seen after a frequent context.
"""

from __future__ import annotations

import json
import math
import numbers
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from coursepkg.checks.core import (
    Case,
    CheckError,
    HiddenCase,
    Task,
    Verdict,
    a_type,
    close,
    fmt_number,
    register,
    to_plain_float,
)

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


def perplexity(model, sentences: list[list[str]]) -> float:
    """Task 1.4: exp of the mean negative natural-log probability of every predicted token.

    The predicted tokens are every word and one ``"</s>"`` per sentence; the context of the
    token at position i of the padded sentence is the n-1 tokens before it.
    """
    n = model.n
    total_logprob = 0.0
    n_predicted = 0
    for sentence in sentences:
        padded = pad(sentence, n)
        for i in range(n - 1, len(padded)):
            total_logprob += model.logprob(padded[i], tuple(padded[i - n + 1 : i]))
            n_predicted += 1
    return math.exp(-total_logprob / n_predicted)


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
    Case("unigrams of one sentence", 1, {"sentences": [["the", "cat", "sat"]], "n": 1}),
    Case(
        "bigrams of two sentences",
        1,
        {"sentences": [["the", "cat", "sat"], ["the", "dog", "sat"]], "n": 2},
    ),
    Case(
        "bigrams with repeated words",
        1,
        {"sentences": [["the", "cat", "saw", "the", "cat"], ["the", "cat"]], "n": 2},
    ),
    Case(
        "trigrams of two sentences",
        1,
        {"sentences": [["i", "am", "sam"], ["sam", "i", "am"]], "n": 3},
    ),
    Case("an empty sentence gives one bigram", 1, {"sentences": [["the", "cat"], []], "n": 2}),
)


def _with_empty_sentences(rng: random.Random) -> dict:
    sentences, _ = _draw_corpus(rng, rng.randint(2, 3), 3, 3)
    for _ in range(rng.randint(1, 2)):
        sentences.insert(rng.randint(0, len(sentences)), [])
    return {"sentences": sentences, "n": rng.randint(2, 3)}


_COUNT_HIDDEN = (
    HiddenCase("hidden: an empty sentence", 1, _with_empty_sentences),
    HiddenCase("hidden: one word, long n-grams", 1,
               lambda rng: {"sentences": [[rng.choice(_WORD_POOL)]], "n": rng.randint(4, 5)}),
    HiddenCase("hidden: random corpus, trigrams", 1,
               lambda rng: {"sentences": _draw_corpus(rng, 8, 6, 4)[0], "n": 3}),
    HiddenCase("hidden: random corpus, unigrams", 1,
               lambda rng: {"sentences": _draw_corpus(rng, 6, 5, 5)[0], "n": 1}),
)

register(
    Task(
        id="1.1",
        assignment=ASSIGNMENT,
        func_name="count_ngrams",
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
        1,
        {"counts": _MLE_BIGRAMS, "word": "cat", "context": ["the"]},
    ),
    Case(
        "P(mat | sat, on) from trigram counts",
        1,
        {"counts": _MLE_TRIGRAMS, "word": "mat", "context": ["sat", "on"]},
    ),
    Case(
        "P(the | <s>): the first word of a sentence",
        1,
        {"counts": _MLE_BIGRAMS, "word": "the", "context": ["<s>"]},
    ),
    Case(
        "a word never seen after its context",
        0.5,
        {"counts": _MLE_BIGRAMS, "word": "ran", "context": ["dog"]},
    ),
    Case(
        "a context never seen in training",
        0.5,
        {"counts": _MLE_TRIGRAMS, "word": "cat", "context": ["mat", "the"]},
    ),
    Case(
        "P(cat) from unigram counts: the context is ()",
        1,
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

    return HiddenCase(name, 1, make)


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
    HiddenCase("hidden: unigrams (empty context)", 1, _mle_unigrams),
    HiddenCase("hidden: a word never seen after a frequent trigram context", 1,
               _mle_never_after),
    HiddenCase("hidden: an unseen trigram context", 1, _mle_unseen),
)

register(
    Task(
        id="1.2",
        assignment=ASSIGNMENT,
        func_name="mle_prob",
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
        1,
        {"counts": _MLE_BIGRAMS, "vocab": _ADDK_VOCAB, "word": "cat", "context": ["the"],
         "k": 1.0},
    ),
    Case(
        "k = 0.5: P(sat | cat)",
        1,
        {"counts": _MLE_BIGRAMS, "vocab": _ADDK_VOCAB, "word": "sat", "context": ["cat"],
         "k": 0.5},
    ),
    Case(
        "k = 0.1: an unseen trigram",
        1,
        {"counts": _MLE_TRIGRAMS, "vocab": _ADDK_VOCAB, "word": "dog", "context": ["the", "cat"],
         "k": 0.1},
    ),
    Case(
        "k = 0.5: an unseen context",
        1,
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
    HiddenCase("hidden: random corpus, trigrams, small k", 1, _add_k_small),
    HiddenCase("hidden: unigrams, k above 1", 1, _add_k_unigrams),
    HiddenCase("hidden: unseen context, larger vocabulary", 1, _add_k_unseen),
)

register(
    Task(
        id="1.3",
        assignment=ASSIGNMENT,
        func_name="add_k_prob",
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
# Task 1.4 perplexity
# --------------------------------------------------------------------------------------------

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
    "Your perplexity is infinite: some predicted token got probability 0. Never predict '<s>' "
    "(start at the first word), and use the model's (smoothed) probabilities."
)
HINT_PPL_GENERIC = (
    "perplexity = exp(-(1/N) * sum of model.logprob(token, context)) over every word and one "
    "'</s>' per sentence, the context being the n-1 tokens before the token in the sentence "
    "padded with n-1 '<s>'."
)


def _fit_model(args: dict):
    """The package's NGramLM fitted on the case's training sentences. Its ``perplexity`` is
    what task 1.4 asks students to write: the task forbids it, and the tripwire of the check
    cells and of the grader fails a function that calls it. (Imported here so that tasks 1.1-1.3
    do not depend on :mod:`coursepkg.ngram`.)"""
    from coursepkg.ngram import NGramLM

    kwargs = {"k": float(args["k"])} if args["smoothing"] == "add_k" else {}
    model = NGramLM(int(args["n"]), args["smoothing"], **kwargs)
    return model.fit([list(sentence) for sentence in args["train"]])


def _build_perplexity_args(args: dict) -> tuple:
    return (_fit_model(args), [list(sentence) for sentence in args["sentences"]])


def _sentence_logprobs(model, sentence: list[str], shift: int = 0) -> list[float]:
    """Log-probabilities of every predicted token (words, then '</s>').

    ``shift=1`` moves the context window one token right, so it includes the token itself.
    """
    n = model.n
    padded = pad(sentence, n)
    return [
        model.logprob(padded[i], tuple(padded[i - n + 1 + shift : i + shift]))
        for i in range(n - 1, len(padded))
    ]


def _judge_perplexity(got: object, expected: object, args: dict) -> Verdict:
    model, sentences = _build_perplexity_args(args)
    n = model.n
    per_sentence = [_sentence_logprobs(model, sentence) for sentence in sentences]
    total = sum(sum(lps) for lps in per_sentence)
    big_n = sum(len(lps) for lps in per_sentence)
    n_sentences = len(sentences)
    mean_nll = -total / big_n
    plural = "" if n_sentences == 1 else "s"
    where = f"For {n_sentences} sentence{plural} ({big_n} predicted tokens)"

    if type(got) in (int, float) and math.isinf(got) and not math.isinf(expected):
        return _float_verdict(got, expected, [], HINT_PPL_INFINITE, where)

    def no_eos() -> float:
        return math.exp(-sum(sum(lps[:-1]) for lps in per_sentence) / (big_n - n_sentences))

    def shifted_context() -> float:
        lps = [lp for s in sentences for lp in _sentence_logprobs(model, s, shift=1)]
        return _safe_exp(-sum(lps) / len(lps))

    variants = [
        (HINT_PPL_NO_EOS, no_eos),
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
    ]
    return _float_verdict(got, expected, variants, HINT_PPL_GENERIC, where)


_PPL_TRAIN = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["the", "dog", "sat"],
    ["a", "cat", "ran"],
    ["a", "dog", "saw", "the", "cat"],
    ["the", "cat", "saw", "a", "dog"],
]

_PPL_CASES = (
    Case(
        "add-one bigram model, one sentence",
        1,
        {"n": 2, "smoothing": "add_k", "k": 1.0, "train": _PPL_TRAIN,
         "sentences": [["the", "cat", "ran"]]},
    ),
    Case(
        "add-k (k = 0.5) bigram model, two sentences of different lengths",
        1,
        {"n": 2, "smoothing": "add_k", "k": 0.5, "train": _PPL_TRAIN,
         "sentences": [["a", "dog", "sat", "on", "the", "mat"], ["the", "cat"]]},
    ),
    Case(
        "Kneser-Ney trigram model, three sentences",
        1,
        {"n": 3, "smoothing": "kneser_ney", "k": 1.0, "train": _PPL_TRAIN,
         "sentences": [["the", "cat", "sat"], ["a", "dog", "ran"],
                       ["the", "dog", "saw", "a", "cat"]]},
    ),
)


def _held_out(rng: random.Random, count: int, max_len: int, n_words: int,
              n_test: int) -> tuple[list[list[str]], list[list[str]]]:
    """A corpus drawn from ``rng`` split into training and test sentences; the test sentences
    use only words seen in training (an unseen word's probability is 0 for some models)."""
    sentences, _ = _draw_corpus(rng, count, max_len, n_words)
    train, test = sentences[:-n_test], sentences[-n_test:]
    seen = {word for sentence in train for word in sentence}
    return train, [[word for word in sentence if word in seen] or [sorted(seen)[0]]
                   for sentence in test]


def _kneser_ney_bigrams(rng: random.Random) -> dict:
    train, test = _held_out(rng, 30, 7, 8, 5)
    return {"n": 2, "smoothing": "kneser_ney", "k": 1.0, "train": train, "sentences": test}


def _add_k_unigram_model(rng: random.Random) -> dict:
    train, test = _held_out(rng, 20, 6, 6, 5)
    return {"n": 1, "smoothing": "add_k", "k": rng.choice([0.05, 0.1, 0.2, 0.3]),
            "train": train, "sentences": test}


def _with_an_empty_sentence(rng: random.Random) -> dict:
    words = sorted({word for sentence in _PPL_TRAIN for word in sentence})
    test = [[rng.choice(words) for _ in range(rng.randint(1, 6))] for _ in range(2)]
    test.insert(rng.randint(0, 2), [])
    return {"n": 3, "smoothing": "add_k", "k": rng.choice([0.25, 0.5, 0.75]),
            "train": _PPL_TRAIN, "sentences": test}


_PPL_HIDDEN = (
    HiddenCase("hidden: Kneser-Ney bigram model, random corpus", 1, _kneser_ney_bigrams),
    HiddenCase("hidden: add-k unigram model", 1, _add_k_unigram_model),
    HiddenCase("hidden: add-k trigram model, a test set with an empty sentence", 1,
               _with_an_empty_sentence),
)

register(
    Task(
        id="1.4",
        assignment=ASSIGNMENT,
        func_name="perplexity",
        title="Perplexity of an n-gram model on held-out sentences",
        cases=_PPL_CASES,
        hidden=_PPL_HIDDEN,
        build_args=_build_perplexity_args,
        reference=perplexity,
        to_plain=to_plain_float,
        judge=_judge_perplexity,
        forbidden=("nltk", "coursepkg.checks", "coursepkg.ngram.NGramLM.perplexity"),
        error_hints={
            "OverflowError": HINT_PPL_SUM,
            "ZeroDivisionError": "N, the number of predicted tokens, came out 0: count every "
            "word and one '</s>' per sentence.",
            "ValueError": "math.log got 0 (or less): use model.logprob, and never predict '<s>'.",
        },
    )
)
