"""The checks of chapter 1 (coursepkg.checks.ch01_ngrams): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest
from checks_support import AlwaysEqual, Chapter, check_output, hidden_cases, run_task

from coursepkg import checks
from coursepkg.checks import ch01_ngrams as ch01
from coursepkg.checks import core
from coursepkg.ngram import NGramLM

# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def count_ngrams_alt(sentences, n):
    counts = defaultdict(int)
    for sentence in sentences:
        tokens = ("<s>",) * (n - 1) + tuple(sentence) + ("</s>",)
        for end in range(n, len(tokens) + 1):
            counts[tokens[end - n : end]] += 1
    return counts


def mle_prob_alt(counts, word, context):
    by_context = defaultdict(Counter)
    for gram, c in counts.items():
        by_context[gram[:-1]][gram[-1]] += c
    followers = by_context.get(tuple(context))
    if not followers:
        return 0
    return followers[word] / sum(followers.values())


def add_k_prob_alt(counts, vocab, word, context, k):
    context = tuple(context)
    c_context = 0
    for gram, c in counts.items():
        if gram[: len(context)] == context and len(gram) == len(context) + 1:
            c_context += c
    smoothed = {w: counts.get(context + (w,), 0) + k for w in vocab}
    return smoothed[word] / (c_context + k * len(vocab))


def perplexity_alt(model, sentences):
    """Base-2 logs of model.prob, then 2 ** cross-entropy: the same number."""
    log2_sum, count = 0.0, 0
    for sentence in sentences:
        history = ["<s>"] * (model.n - 1)
        for token in list(sentence) + ["</s>"]:
            context = tuple(history[len(history) - (model.n - 1) :]) if model.n > 1 else ()
            log2_sum += math.log2(model.prob(token, context))
            count += 1
            history.append(token)
    return 2 ** (-log2_sum / count)


CORRECT = {
    "1.1": [ch01.count_ngrams, count_ngrams_alt],
    "1.2": [ch01.mle_prob, mle_prob_alt],
    "1.3": [ch01.add_k_prob, add_k_prob_alt],
    "1.4": [ch01.perplexity, perplexity_alt],
}


# ---------------------------------------------------------------------------------------------
# Plausible wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------


def _windows(tokens, n, stop_early=False):
    last = len(tokens) - n if stop_early else len(tokens) - n + 1
    return [tuple(tokens[i : i + n]) for i in range(last)]


def count_no_eos(sentences, n):
    counts = Counter()
    for s in sentences:
        counts.update(_windows(["<s>"] * (n - 1) + s, n))
    return counts


def count_off_by_one(sentences, n):
    counts = Counter()
    for s in sentences:
        counts.update(_windows(["<s>"] * (n - 1) + s + ["</s>"], n, stop_early=True))
    return counts


def count_n_bos(sentences, n):
    counts = Counter()
    for s in sentences:
        counts.update(_windows(["<s>"] * n + s + ["</s>"], n))
    return counts


def count_no_padding(sentences, n):
    counts = Counter()
    for s in sentences:
        counts.update(_windows(s, n))
    return counts


def count_string_keys(sentences, n):
    counts = Counter()
    for s in sentences:
        counts.update(" ".join(g) for g in _windows(["<s>"] * (n - 1) + s + ["</s>"], n))
    return counts


def count_last_sentence_only(sentences, n):
    for s in sentences:
        counts = Counter(_windows(["<s>"] * (n - 1) + s + ["</s>"], n))
    return counts


def count_overwrite(sentences, n):
    counts = {}
    for s in sentences:
        counts.update(Counter(_windows(["<s>"] * (n - 1) + s + ["</s>"], n)))
    return counts


def count_presence(sentences, n):
    counts = Counter()
    for s in sentences:
        counts.update(set(_windows(["<s>"] * (n - 1) + s + ["</s>"], n)))
    return counts


def count_eos_per_order(sentences, n):
    counts = Counter()
    for s in sentences:
        counts.update(_windows(["<s>"] * (n - 1) + s + ["</s>"] * (n - 1), n))
    return counts


def mle_joint(counts, word, context):
    return counts.get(tuple(context) + (word,), 0) / sum(counts.values())


def mle_distinct(counts, word, context):
    followers = [g for g in counts if g[:-1] == tuple(context)]
    return counts.get(tuple(context) + (word,), 0) / len(followers) if followers else 0.0


def mle_wrong_end(counts, word, context):
    total = sum(c for g, c in counts.items() if g[1:] == tuple(context))
    return counts.get(tuple(context) + (word,), 0) / total if total else 0.0


def mle_word_first(counts, word, context):
    total = sum(c for g, c in counts.items() if g[:-1] == tuple(context))
    return counts.get((word,) + tuple(context), 0) / total if total else 0.0


def mle_not_normalised(counts, word, context):
    return float(counts.get(tuple(context) + (word,), 0))


def mle_crashes_on_unseen_context(counts, word, context):
    total = sum(c for g, c in counts.items() if g[:-1] == tuple(context))
    return counts.get(tuple(context) + (word,), 0) / total


def mle_key_error(counts, word, context):
    total = sum(c for g, c in counts.items() if g[:-1] == tuple(context))
    return counts[tuple(context) + (word,)] / total if total else 0.0


def _c_context(counts, context):
    return sum(c for g, c in counts.items() if g[:-1] == tuple(context))


def add_k_no_kv(counts, vocab, word, context, k):
    c_context = _c_context(counts, context)
    if c_context == 0:
        return 1 / len(vocab)
    return (counts.get(tuple(context) + (word,), 0) + k) / c_context


def add_k_v_plus_one(counts, vocab, word, context, k):
    size = len(vocab) + 1  # "and <s>"
    return (counts.get(tuple(context) + (word,), 0) + k) / (_c_context(counts, context) + k * size)


def add_k_v_from_counts(counts, vocab, word, context, k):
    size = len({token for g in counts for token in g})
    return (counts.get(tuple(context) + (word,), 0) + k) / (_c_context(counts, context) + k * size)


def add_k_ignores_k(counts, vocab, word, context, k):
    c = counts.get(tuple(context) + (word,), 0)
    return (c + 1) / (_c_context(counts, context) + len(vocab))


def add_k_k_once(counts, vocab, word, context, k):
    return (counts.get(tuple(context) + (word,), 0) + k) / (_c_context(counts, context) + k)


def add_k_numerator_without_k(counts, vocab, word, context, k):
    return counts.get(tuple(context) + (word,), 0) / (_c_context(counts, context) + k * len(vocab))


def add_k_zero_for_unseen_context(counts, vocab, word, context, k):
    c_context = _c_context(counts, context)
    if c_context == 0:
        return 0.0
    return (counts.get(tuple(context) + (word,), 0) + k) / (c_context + k * len(vocab))


def _token_logprobs(model, sentence, *, eos=True, include_token=False):
    n = model.n
    tokens = ["<s>"] * (n - 1) + sentence + (["</s>"] if eos else [])
    out = []
    for i in range(n - 1, len(tokens)):
        context = tokens[i - n + 2 : i + 1] if include_token else tokens[i - n + 1 : i]
        out.append(model.logprob(tokens[i], tuple(context)))
    return out


def ppl_no_eos(model, sentences):
    lps = [lp for s in sentences for lp in _token_logprobs(model, s, eos=False)]
    return math.exp(-sum(lps) / len(lps))


def ppl_counts_bos(model, sentences):
    lps = [lp for s in sentences for lp in _token_logprobs(model, s)]
    n_tokens = sum(len(s) + 1 + (model.n - 1) for s in sentences)
    return math.exp(-sum(lps) / n_tokens)


def ppl_log10_then_exp(model, sentences):
    lps = [math.log10(model.prob(*args)) for s in sentences for args in _pairs(model, s)]
    return math.exp(-sum(lps) / len(lps))


def _pairs(model, sentence):
    tokens = ["<s>"] * (model.n - 1) + sentence + ["</s>"]
    n = model.n
    return [(tokens[i], tuple(tokens[i - n + 1 : i])) for i in range(n - 1, len(tokens))]


def ppl_ten_to_the(model, sentences):
    lps = [lp for s in sentences for lp in _token_logprobs(model, s)]
    return 10 ** (-sum(lps) / len(lps))


def ppl_no_exp(model, sentences):
    lps = [lp for s in sentences for lp in _token_logprobs(model, s)]
    return -sum(lps) / len(lps)


def ppl_per_sentence_mean(model, sentences):
    values = []
    for s in sentences:
        lps = _token_logprobs(model, s)
        values.append(math.exp(-sum(lps) / len(lps)))
    return sum(values) / len(values)


def ppl_sum(model, sentences):
    return math.exp(-sum(lp for s in sentences for lp in _token_logprobs(model, s)))


def ppl_no_minus(model, sentences):
    lps = [lp for s in sentences for lp in _token_logprobs(model, s)]
    return math.exp(sum(lps) / len(lps))


def ppl_context_includes_token(model, sentences):
    lps = [lp for s in sentences for lp in _token_logprobs(model, s, include_token=True)]
    return math.exp(-sum(lps) / len(lps))


def ppl_predicts_bos(model, sentences):
    total, count = 0.0, 0
    for s in sentences:
        tokens = ["<s>"] * (model.n - 1) + s + ["</s>"]
        for i, token in enumerate(tokens):
            total += model.logprob(token, tuple(tokens[max(0, i - model.n + 1) : i]))
            count += 1
    return math.exp(-total / count)


def ppl_calls_the_model(model, sentences):
    return model.perplexity(sentences)


WRONG = {
    "1.1": [
        (count_no_eos, ch01.HINT_LAST_NGRAM_MISSING),
        (count_off_by_one, ch01.HINT_LAST_NGRAM_MISSING),
        (count_n_bos, ch01.HINT_N_BOS),
        (count_no_padding, ch01.HINT_NO_PADDING),
        (count_string_keys, ch01.HINT_STRING_KEYS),
        (count_last_sentence_only, ch01.HINT_LAST_SENTENCE_ONLY),
        (count_overwrite, ch01.HINT_OVERWRITE),
        (count_presence, ch01.HINT_PRESENCE),
        (count_eos_per_order, ch01.HINT_EOS_PER_ORDER),
    ],
    "1.2": [
        (mle_joint, ch01.HINT_JOINT),
        (mle_distinct, ch01.HINT_DISTINCT),
        (mle_wrong_end, ch01.HINT_WRONG_END),
        (mle_word_first, ch01.HINT_WRONG_END),
        (mle_not_normalised, ch01.HINT_NOT_NORMALISED),
        (mle_crashes_on_unseen_context, ch01.HINT_MLE_UNSEEN_CONTEXT),
        (mle_key_error, "counts.get(ngram, 0)"),
    ],
    "1.3": [
        (add_k_no_kv, ch01.HINT_NO_KV),
        (add_k_v_plus_one, ch01.HINT_V_SIZE),
        (add_k_v_from_counts, ch01.HINT_V_SIZE),
        (add_k_ignores_k, ch01.HINT_K_IGNORED),
        (add_k_k_once, ch01.HINT_K_ONCE),
        (add_k_numerator_without_k, ch01.HINT_K_NUMERATOR),
        (add_k_zero_for_unseen_context, ch01.HINT_ADDK_UNSEEN_CONTEXT),
    ],
    "1.4": [
        (ppl_no_eos, ch01.HINT_PPL_NO_EOS),
        (ppl_counts_bos, ch01.HINT_PPL_BOS_IN_N),
        (ppl_log10_then_exp, ch01.HINT_PPL_BASE),
        (ppl_ten_to_the, ch01.HINT_PPL_BASE),
        (ppl_no_exp, ch01.HINT_PPL_NO_EXP),
        (ppl_per_sentence_mean, ch01.HINT_PPL_PER_SENTENCE),
        (ppl_sum, ch01.HINT_PPL_SUM),
        (ppl_no_minus, ch01.HINT_PPL_SIGN),
        (ppl_context_includes_token, ch01.HINT_PPL_CONTEXT),
        (ppl_predicts_bos, ch01.HINT_PPL_INFINITE),
        (ppl_calls_the_model, "forbidden: you called coursepkg.ngram.NGramLM.perplexity"),
    ],
}


def stub(*args):
    raise NotImplementedError("Task 1.1: write count_ngrams")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="01_ngrams",
    tasks={"1.1": ("count_ngrams", 5, 9), "1.2": ("mle_prob", 5, 10),
           "1.3": ("add_k_prob", 4, 7), "1.4": ("perplexity", 3, 6)},
    hints=ch01,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=3,
    min_hidden=2,
    public_points=(2, 5),
    forbidden=("nltk", "coursepkg.checks"),
    package="nltk",
    not_finite_hint="Your function returned NaN (not a number)",
    not_finite=("nan",),  # an infinite probability or perplexity gets its task's own hint
    failure_reports=(
        ("1.1", count_no_eos, "Task 1.1 count_ngrams: 0/5 points",
         ("  FAIL  [0/1] bigrams of two sentences: " + ch01.HINT_LAST_NGRAM_MISSING,)),
        ("1.4", ppl_per_sentence_mean, "Task 1.4 perplexity: 1/3 points",
         (ch01.HINT_PPL_PER_SENTENCE,)),
    ),
    typed=(),
    seeded=(),
    exact_results=("1.1",),
    more_hints=frozenset({
        "Return a single number (a float).",
        "Your function returned NaN (not a number), usually from 0/0 or a log of a negative "
        "number: find where that happens.",
    }),
    wrong_types=(
        ("1.1", lambda sentences, n: list(count_ngrams_alt(sentences, n)),
         "expected a dict mapping n-gram tuples to counts, got list"),
        ("1.2", lambda *args: True, "expected a float, got bool"),
        ("1.2", lambda *args: "0.5", "expected a float, got str"),
        ("1.1", lambda sentences, n: {(1, 2): 1}, "tuple containing an int"),
    ),
    # well-typed plain values of the wrong shape fail cleanly instead of crashing the grader
    forged={"1.1": lambda good: [[[1]], [[["a"], "x"]]]},
    forbidden_calls={NGramLM.perplexity: None},
    allowed_calls=(math.log, math.exp),
)


# ---------------------------------------------------------------------------------------------
# The references
# ---------------------------------------------------------------------------------------------


def test_references_agree_with_the_package_model():
    from coursepkg import ngram

    for sentences in (ch01._MLE_CORPUS, [[], ["a"]]):
        for n in (1, 2, 3):
            expected = Counter(g for s in sentences for g in ngram.ngrams(ngram.pad(s, n), n))
            assert ch01.count_ngrams(sentences, n) == dict(expected)
    for case in checks.get_task("1.4").cases:
        args = case.args
        kwargs = {"k": args["k"]} if args["smoothing"] == "add_k" else {}
        model = NGramLM(args["n"], args["smoothing"], **kwargs).fit(args["train"])
        assert math.isclose(
            ch01.perplexity(model, args["sentences"]), model.perplexity(args["sentences"]),
            rel_tol=1e-12,
        )


def test_mle_reference_by_hand():
    counts = {("the", "cat"): 2, ("the", "dog"): 1, ("a", "cat"): 1}
    assert ch01.mle_prob(counts, "cat", ("the",)) == pytest.approx(2 / 3)
    assert ch01.mle_prob(counts, "dog", ("a",)) == 0.0
    assert ch01.mle_prob(counts, "cat", ("mat",)) == 0.0
    # (1 + 0.5) / (3 + 0.5 * 4)
    vocab = ["a", "cat", "dog", "the"]
    assert ch01.add_k_prob(counts, vocab, "dog", ("the",), 0.5) == pytest.approx(1.5 / 5)
    assert ch01.add_k_prob(counts, vocab, "dog", ("mat",), 0.5) == pytest.approx(1 / 4)


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


def test_public_failures_show_the_specifics():
    result = run_task("1.1", count_no_eos)
    bigrams = next(case for case in result.cases if case.name == "bigrams of two sentences")
    assert "('sat', '</s>') is missing" in bigrams.message
    result = run_task("1.2", mle_joint)
    first = result.cases[0]
    assert first.message.endswith("For P('cat' | ('the',)): expected 0.5, got 0.0909091.")


def test_exceptions_become_errors_with_hints():
    result = run_task("1.2", mle_crashes_on_unseen_context)
    unseen = next(case for case in result.cases if case.name == "a context never seen in training")
    assert unseen.status == "error"
    assert unseen.message.startswith("raised ZeroDivisionError: division by zero.")
    assert "\n" not in unseen.message
    assert [case.status for case in result.cases].count("error") == 1


class SneakyDict(dict):
    def __eq__(self, other):
        return True

    __hash__ = None


class SneakyFloat(float):
    def __eq__(self, other):
        return True

    __hash__ = None


def test_a_dict_or_float_that_claims_equality_does_not_pass():
    assert run_task("1.1", lambda *args: SneakyDict(), hidden=True).points == 0
    assert run_task("1.2", lambda *args: SneakyFloat(0.123), hidden=True).points == 0


def test_numpy_and_torch_scalars_are_accepted():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    assert run_task("1.2", lambda *a: np.float64(mle_prob_alt(*a))).status == "passed"
    result = run_task("1.3", lambda *a: torch.tensor(add_k_prob_alt(*a)))
    assert result.status == "passed"
    result = run_task(
        "1.1", lambda s, n: {g: np.int64(c) for g, c in count_ngrams_alt(s, n).items()}
    )
    assert result.status == "passed"


def test_close_never_matches_nan_and_matches_infinities_exactly():
    assert not checks.close(math.nan, math.nan)
    assert checks.close(math.inf, math.inf) and not checks.close(math.inf, 1e308)
    assert checks.close(1.0 + 1e-8, 1.0) and not checks.close(1.0 + 1e-5, 1.0)
    assert not checks.close(True, 1.0)


def test_zero_counts_are_the_same_as_absent():
    def with_zeros(sentences, n):
        counts = defaultdict(int, count_ngrams_alt(sentences, n))
        counts[("never",) * n] += 0
        return counts

    assert run_task("1.1", with_zeros, hidden=True).status == "passed"


def test_forbidden_model_perplexity_is_refused_but_logprob_works():
    model, sentences = ch01._build_perplexity_args(checks.get_task("1.4").cases[0].args)
    assert isinstance(model, NGramLM)
    assert math.isfinite(model.logprob("the", ()))
    assert "coursepkg.ngram.NGramLM.perplexity" in checks.get_task("1.4").forbidden
    result = run_task("1.4", ppl_calls_the_model, hidden=True)
    assert result.points == 0
    assert all(case.message.startswith("forbidden: you called coursepkg.ngram.NGramLM.perplexity")
               for case in result.cases)
    assert run_task("1.4", perplexity_alt, hidden=True).status == "passed"


# ---------------------------------------------------------------------------------------------
# The split used by the grader: student half, JSON, trusted half
# ---------------------------------------------------------------------------------------------


def test_grade_output_rejects_values_that_are_not_plain():
    task = checks.get_task("1.2")
    case = task.cases[0]
    for value, what in [((0.5,), "a tuple"), ({0.5}, "a set"), (AlwaysEqual(), "an AlwaysEqual"),
                        ({1: 0.5}, "a dict with an int key"), (SneakyFloat(0.5), "a SneakyFloat")]:
        result = checks.grade_output(task, case, value)
        assert result.status == "failed" and result.points == 0
        assert result.message.startswith(f"returned {what}")


def test_exception_result_from_names_across_processes():
    task = checks.get_task("1.2")
    public, hidden = task.public_cases[0], hidden_cases(task)[0]
    assert checks.exception_result(task, public, "NotImplementedError", "x").status == (
        "not attempted"
    )
    error = checks.exception_result(task, public, "KeyError", "('the', 'cat')")
    assert error.status == "error" and "raised KeyError: ('the', 'cat')." in error.message
    hidden_error = checks.exception_result(task, hidden, "KeyError", "('the', 'cat')")
    assert "('the', 'cat')" not in hidden_error.message.replace(task.error_hints["KeyError"], "")
    wrong_type = checks.exception_result(task, hidden, "CheckError", "expected a float, got list")
    assert wrong_type.status == "failed" and "list" not in wrong_type.message

    class Sub(NotImplementedError):
        pass

    assert checks.exception_name(Sub()) == "NotImplementedError"
    assert checks.exception_name(checks.ForbiddenCallError()) == "ForbiddenCallError"


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


def test_check_raising_function(capsys):
    def broken(sentences, n):
        return {tuple(sentences[5]): 1}

    out = check_output(capsys, "1.1", broken)
    assert (
        "  ERROR [0/1] unigrams of one sentence: raised IndexError: list index out of range. "
        + core._DEFAULT_ERROR_HINTS["IndexError"]
    ) in out


def test_check_names_the_wrong_return_type(capsys):
    out = check_output(capsys, "1.1", lambda sentences, n: list(count_ngrams_alt(sentences, n)))
    assert "0/5 points" in out
    assert "Wrong return type: expected a dict mapping n-gram tuples to counts, got list." in out
    out = check_output(capsys, "1.2", lambda *args: AlwaysEqual())
    assert "0/5 points" in out and "expected a float, got AlwaysEqual" in out


def test_check_unknown_task_and_checker_bug(capsys, monkeypatch):
    out = check_output(capsys, "9.9", stub)
    assert out == f"check(): there is no task '9.9'. The tasks are: {', '.join(core.TASKS)}.\n"
    assert out.startswith("check(): there is no task '9.9'. The tasks are: 1.1, 1.2, 1.3, 1.4")

    def broken_build(args):
        raise RuntimeError("boom")

    task = checks.get_task("1.2")
    monkeypatch.setitem(core.TASKS, "1.2", core.Task(**{**vars(task), "build_args": broken_build}))
    out = check_output(capsys, "1.2", mle_prob_alt)
    assert "the checker itself failed" in out


