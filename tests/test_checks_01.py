"""The checks of chapter 1 (coursepkg.checks.ch01_ngrams): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import nbformat
import pytest
import torch
from checks_support import (
    AlwaysEqual,
    Chapter,
    all_cases,
    check_output,
    hidden_cases,
    run_task,
)

from coursepkg import checks
from coursepkg.checks import ch01_ngrams as ch01
from coursepkg.checks import core
from coursepkg.ngram import NGramLM

ROOT = Path(__file__).resolve().parents[1]

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
            if token not in model.vocab:
                token = "<unk>"
            context = tuple(history[len(history) - (model.n - 1) :]) if model.n > 1 else ()
            log2_sum += math.log2(model.prob(token, context))
            count += 1
            history.append(token)
    return 2 ** (-log2_sum / count)


def _tables(counts):
    """Top-down tables: order -> history -> {word: count}, raw (c) and continuation (N1+)."""
    n = len(next(iter(counts)))
    raw, before = defaultdict(Counter), defaultdict(set)
    for gram, c in counts.items():
        for m in range(1, n + 1):
            raw[gram[n - m : -1]][gram[-1]] += c
            if m < n:
                before[gram[n - m :]].add(gram[n - m - 1])
    continuation = defaultdict(Counter)
    for ending, tokens in before.items():
        continuation[ending[:-1]][ending[-1]] += len(tokens)
    return n, raw, continuation


def kneser_ney_alt(counts, word, context, discount):
    """Top-down recursion on nested tables built in one pass."""
    n, raw, continuation = _tables(counts)

    def p(history, top):
        table = (raw if top else continuation)[history]
        lower = p(history[1:], False) if history else 0.0
        if not history and not top:
            return table[word] / sum(table.values())
        total = sum(table.values())
        if total == 0:
            return lower
        return (max(table[word] - discount, 0) + discount * len(+table) * lower) / total

    return p(tuple(context)[len(context) - n + 1 :] if n > 1 else (), True)


def witten_bell_alt(counts, word, context):
    """Top-down recursion on the raw tables."""
    n, raw, _ = _tables(counts)

    def p(history):
        table = raw[history]
        total, types = sum(table.values()), len(+table)
        if not history:
            return table[word] / total
        lower = p(history[1:])
        return (table[word] + types * lower) / (total + types) if total else lower

    return p(tuple(context)[len(context) - n + 1 :] if n > 1 else ())


def train_bigram_by_counting(x, vocab_size, seed):
    """Correct, written differently: no gradient descent, the log of the smoothed counts (the
    table the cross-entropy's minimum is)."""
    counts = torch.full((vocab_size, vocab_size), 0.1)
    counts.index_put_((x[:, :-1].reshape(-1), x[:, 1:].reshape(-1)),
                      torch.ones(x[:, 1:].numel()), accumulate=True)
    return {"weight": counts.log()}


def _descend(x, vocab_size, seed, steps, lr=0.5, transpose=False):
    torch.manual_seed(seed)
    table = torch.zeros(vocab_size, vocab_size, requires_grad=True)
    optimizer = torch.optim.Adam([table], lr=lr)
    previous, following = x[:, :-1].reshape(-1), x[:, 1:].reshape(-1)
    if transpose:
        previous, following = following, previous
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(table[previous], following).backward()
        optimizer.step()
    return {"weight": table.detach()}


def train_bigram_untrained(x, vocab_size, seed):
    torch.manual_seed(seed)
    return torch.nn.Embedding(vocab_size, vocab_size)


def train_bigram_on_other_data(x, vocab_size, seed):
    other = torch.randint(vocab_size, x.shape, generator=torch.Generator().manual_seed(seed))
    return _descend(other, vocab_size, seed, 60)


def train_bigram_too_few_steps(x, vocab_size, seed):
    return _descend(x, vocab_size, seed, 8)


def train_bigram_returns_probabilities(x, vocab_size, seed):
    return {"weight": torch.softmax(_descend(x, vocab_size, seed, 60)["weight"], dim=-1)}


def train_bigram_transposed(x, vocab_size, seed):
    return _descend(x, vocab_size, seed, 60, transpose=True)


def uniform_perplexity_alt():
    from coursepkg import data

    hamlet = data.sentences(data.shakespeare_plays()["Hamlet"])
    return len({word for sentence in hamlet for word in sentence}) + 1  # and "</s>"


def distinct_bigrams_alt():
    pairs = set()
    for text in ("to be or not to be", "to die to sleep"):
        tokens = ["<s>", *text.split(), "</s>"]
        pairs |= set(zip(tokens, tokens[1:], strict=False))
    return len(pairs)


def zero_for_unseen_alt():
    return "mle"


CORRECT = {
    "1.1": [ch01.count_ngrams, count_ngrams_alt],
    "1.2": [ch01.mle_prob, mle_prob_alt],
    "1.3": [ch01.add_k_prob, add_k_prob_alt],
    "1.4": [ch01.perplexity, perplexity_alt],
    "1.5": [ch01.kneser_ney_prob, kneser_ney_alt],
    "1.6": [ch01.witten_bell_prob, witten_bell_alt],
    "1.7": [checks.get_task("1.7").reference, uniform_perplexity_alt],
    "1.8": [checks.get_task("1.8").reference, distinct_bigrams_alt],
    "1.9": [checks.get_task("1.9").reference, zero_for_unseen_alt],
    "1.10": [ch01.train_bigram, train_bigram_by_counting],
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


def _known(model, sentence):
    return [w if w in model.vocab else "<unk>" for w in sentence]


def _token_logprobs(model, sentence, *, eos=True, include_token=False, unk=True):
    n = model.n
    words = _known(model, sentence) if unk else list(sentence)
    tokens = ["<s>"] * (n - 1) + words + (["</s>"] if eos else [])
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
    tokens = ["<s>"] * (model.n - 1) + _known(model, sentence) + ["</s>"]
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
        tokens = ["<s>"] * (model.n - 1) + _known(model, s) + ["</s>"]
        for i, token in enumerate(tokens):
            total += model.logprob(token, tuple(tokens[max(0, i - model.n + 1) : i]))
            count += 1
    return math.exp(-total / count)


def ppl_keeps_unknown_words(model, sentences):
    """The chapter's perplexity as the page shows it: an unknown word's log of 0 raises."""
    total, count = 0.0, 0
    for s in sentences:
        tokens = ["<s>"] * (model.n - 1) + s + ["</s>"]
        for i in range(model.n - 1, len(tokens)):
            total += math.log(model.prob(tokens[i], tokens[i - model.n + 1 : i]))
            count += 1
    return math.exp(-total / count)


def ppl_unknown_only_where_predicted(model, sentences):
    total, count = 0.0, 0
    for s in sentences:
        tokens = ["<s>"] * (model.n - 1) + s + ["</s>"]
        for i in range(model.n - 1, len(tokens)):
            word = tokens[i] if tokens[i] in model.vocab else "<unk>"
            total += model.logprob(word, tuple(tokens[i - model.n + 1 : i]))
            count += 1
    return math.exp(-total / count)


def ppl_pads_then_replaces(model, sentences):
    total, count = 0.0, 0
    for s in sentences:
        tokens = _known(model, ["<s>"] * (model.n - 1) + s + ["</s>"])
        for i in range(model.n - 1, len(tokens)):
            total += model.logprob(tokens[i], tuple(tokens[i - model.n + 1 : i]))
            count += 1
    return math.exp(-total / count)


def ppl_skips_unknown_words(model, sentences):
    known = [[w for w in s if w in model.vocab] for s in sentences]
    lps = [lp for s in known for lp in _token_logprobs(model, s)]
    return math.exp(-sum(lps) / len(lps))


def ppl_calls_the_model(model, sentences):
    return model.perplexity([_known(model, s) for s in sentences])


def _kn_student(counts, word, context, d, mistake=None):
    """A student's Kneser-Ney, top-down, with one of the known mistakes."""
    n, raw, continuation = _tables(counts)
    if mistake == "raw lower":
        continuation = raw

    def p(history, top):
        table = (continuation if top and mistake == "continuation top" else
                 raw if top else continuation)[history]
        total = sum(table.values())
        if not history:
            if mistake == "uniform":
                return 1 / len(+raw[()]) if raw[()][word] else 0.0
            return table[word] / total
        if total == 0:
            return 0.0 if mistake == "unseen zero" else p(history[1:], False)
        discounted = max(table[word] - d, 0) / total
        if mistake == "backoff" and table[word] > 0:
            return discounted
        lam = d / total if mistake == "lambda" else d * len(+table) / total
        return discounted + lam * p(history[1:], False)

    return p(tuple(context)[len(context) - n + 1 :], True)


def kn_raw_lower_counts(counts, word, context, discount):
    return _kn_student(counts, word, context, discount, "raw lower")


def kn_continuation_at_the_top(counts, word, context, discount):
    return _kn_student(counts, word, context, discount, "continuation top")


def kn_backs_off(counts, word, context, discount):
    return _kn_student(counts, word, context, discount, "backoff")


def kn_lambda_without_types(counts, word, context, discount):
    return _kn_student(counts, word, context, discount, "lambda")


def kn_unseen_history_zero(counts, word, context, discount):
    return _kn_student(counts, word, context, discount, "unseen zero")


def kn_uniform_unigrams(counts, word, context, discount):
    return _kn_student(counts, word, context, discount, "uniform")


def _wb_student(counts, word, context, mistake=None):
    n, raw, continuation = _tables(counts)
    vocab_size = len(+raw[()])

    def p(history):
        table = raw[history] if mistake != "continuation" or len(history) == n - 1 or (
            not history and n == 1) else continuation[history]
        total = sum(table.values())
        if not history:
            return table[word] / total
        if total == 0:
            return 0.0 if mistake == "unseen zero" else p(history[1:])
        types = vocab_size if mistake == "vocab" else len(+table)
        denominator = total if mistake == "denominator" else total + types
        if mistake == "backoff" and table[word] > 0:
            return table[word] / denominator
        return (table[word] + types * p(history[1:])) / denominator

    return p(tuple(context)[len(context) - n + 1 :] if n > 1 else ())


def wb_denominator_without_types(counts, word, context):
    return _wb_student(counts, word, context, "denominator")


def wb_vocabulary_size(counts, word, context):
    return _wb_student(counts, word, context, "vocab")


def wb_backs_off(counts, word, context):
    return _wb_student(counts, word, context, "backoff")


def wb_unseen_history_zero(counts, word, context):
    return _wb_student(counts, word, context, "unseen zero")


def wb_continuation_counts(counts, word, context):
    return _wb_student(counts, word, context, "continuation")


def uniform_perplexity_without_eos():
    return uniform_perplexity_alt() - 1


def uniform_perplexity_as_text():
    return str(uniform_perplexity_alt())


def distinct_bigrams_counted_with_repeats():
    total = 0
    for text in ("to be or not to be", "to die to sleep"):
        total += len(text.split()) + 1
    return total


def distinct_bigrams_as_float():
    return float(distinct_bigrams_alt())


def zero_for_kneser_ney():
    return "kneser_ney"


def zero_for_everything():
    return ["mle", "add_k", "kneser_ney"]


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
        (ppl_keeps_unknown_words, "math.log got 0"),
        (ppl_unknown_only_where_predicted, ch01.HINT_PPL_UNK_CONTEXT),
        (ppl_pads_then_replaces, ch01.HINT_PPL_UNK_BOS),
        (ppl_skips_unknown_words, ch01.HINT_PPL_UNK_DROPPED),
        (ppl_calls_the_model, "forbidden: you called coursepkg.ngram.NGramLM.perplexity"),
    ],
    "1.5": [
        (kn_raw_lower_counts, ch01.HINT_KN_RAW_LOWER),
        (kn_continuation_at_the_top, ch01.HINT_KN_TOP),
        (kn_backs_off, ch01.HINT_KN_BACKOFF),
        (kn_lambda_without_types, ch01.HINT_KN_LAMBDA),
        (kn_unseen_history_zero, ch01.HINT_UNSEEN_HISTORY),
        (kn_uniform_unigrams, ch01.HINT_KN_UNIFORM),
    ],
    "1.6": [
        (wb_denominator_without_types, ch01.HINT_WB_DENOMINATOR),
        (wb_vocabulary_size, ch01.HINT_WB_TYPES),
        (wb_backs_off, ch01.HINT_WB_BACKOFF),
        (wb_unseen_history_zero, ch01.HINT_UNSEEN_HISTORY),
        (wb_continuation_counts, ch01.HINT_WB_CONTINUATION),
    ],
    "1.7": [
        (uniform_perplexity_without_eos, "ln |V|"),
        (uniform_perplexity_as_text, "got a str"),
        (lambda: None, "got a NoneType"),
    ],
    "1.8": [
        (distinct_bigrams_counted_with_repeats, "count each different pair once"),
        (distinct_bigrams_as_float, "expected a whole number (an int), got a float"),
        (lambda: "10", "got a str"),
    ],
    "1.10": [
        (train_bigram_untrained, ch01.HINT_TRAIN_FAR),
        (train_bigram_on_other_data, ch01.HINT_TRAIN_FAR),
        (train_bigram_too_few_steps, ch01.HINT_TRAIN_SHORT),
        (train_bigram_returns_probabilities, ch01.HINT_TRAIN_PROBABILITIES),
        (train_bigram_transposed, ch01.HINT_TRAIN_TRANSPOSED),
    ],
    "1.9": [
        (zero_for_kneser_ney, "nothing but the bigram's own count"),
        (zero_for_everything, "got a list"),
        (lambda: "MLE", "got 'MLE'"),
    ],
}


def stub(*args):
    raise NotImplementedError("Task 1.1: write count_ngrams")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="01_ngrams",
    tasks={"1.1": ("count_ngrams", 2.5, 4.5), "1.2": ("mle_prob", 2.5, 5),
           "1.3": ("add_k_prob", 2, 3.5), "1.4": ("perplexity", 4, 8),
           "1.5": ("kneser_ney_prob", 6, 14), "1.6": ("witten_bell_prob", 5, 10),
           "1.7": ("uniform_perplexity", 1, 1), "1.8": ("distinct_bigrams", 1, 1),
           "1.9": ("zero_for_unseen", 1, 1), "1.10": ("train_bigram", 3, 9)},
    hints=ch01,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=1,  # the train task has one public case (a training run); the others >= 3
    min_hidden=2,
    public_points=(1, 6),
    forbidden=("nltk",),  # and "coursepkg.checks" in every task but the questions, which
    # forbid this chapter's checks module, where their keys are computed
    package="nltk",
    not_finite_hint="Your function returned NaN (not a number)",
    not_finite=("nan",),  # an infinite probability or perplexity gets its task's own hint
    failure_reports=(
        ("1.1", count_no_eos, "Task 1.1 count_ngrams: 0/2.5 points",
         ("  FAIL  [0/0.5] bigrams of two sentences: " + ch01.HINT_LAST_NGRAM_MISSING,)),
        ("1.4", ppl_per_sentence_mean, "Task 1.4 perplexity: 1/4 points",
         (ch01.HINT_PPL_PER_SENTENCE,)),
        ("1.5", kn_raw_lower_counts, "Task 1.5 kneser_ney_prob: 1/6 points",
         (ch01.HINT_KN_RAW_LOWER,)),
    ),
    typed=(),
    seeded=(),
    scalar_inputs=("1.7", "1.8", "1.9"),
    exact_results=("1.1", "1.7", "1.8", "1.9", "1.10"),
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
        ("1.5", lambda *args: [0.5], "expected a float, got list"),
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
        known = [[w if w in model.vocab else "<unk>" for w in s] for s in args["sentences"]]
        assert math.isclose(
            ch01.perplexity(model, args["sentences"]), model.perplexity(known), rel_tol=1e-12,
        )


def test_kneser_ney_reference_is_the_package_s_model_on_the_same_n_grams():
    """1.5's reference, given only the top order's counts, equals NGramLM's Kneser-Ney fitted
    on the sentences, for every word and context of every case, public and hidden."""
    for case in all_cases(checks.get_task("1.5")):
        counts, _, context, discount = ch01._build_smoothed_args(case.args)
        n = ch01.order_of(counts)
        sentences = case.args["_sentences"]  # the corpus counted, the trusted half's only
        model = NGramLM(n, "kneser_ney", discount=discount).fit(sentences)
        assert ch01.count_ngrams(sentences, n) == counts
        for word in model.vocab:
            assert math.isclose(ch01.kneser_ney_prob(counts, word, context, discount),
                                model.prob(word, context), rel_tol=1e-12, abs_tol=1e-15)
    model = NGramLM(3, "kneser_ney").fit(ch01._SMOOTH_CORPUS)
    counts = ch01.count_ngrams(ch01._SMOOTH_CORPUS, 3)
    for context in [("<s>", "<s>"), ("the", "cat"), ("mat", "the"), ("zebra", "zebra")]:
        for word in model.vocab:
            assert math.isclose(ch01.kneser_ney_prob(counts, word, context, 0.75),
                                model.prob(word, context), rel_tol=1e-12)


@pytest.mark.parametrize("task_id", ["1.5", "1.6"])
def test_the_smoothed_distributions_sum_to_one(task_id):
    reference = checks.get_task(task_id).reference
    for n in (1, 2, 3, 4):
        if task_id == "1.5" and n == 1:
            continue
        counts = ch01.count_ngrams(ch01._SMOOTH_CORPUS, n)
        vocab = sorted({g[-1] for g in counts})
        for context in [("<s>",) * (n - 1), ("the", "cat", "sat")[: n - 1], ("x",) * (n - 1)]:
            args = (0.6,) if task_id == "1.5" else ()
            total = math.fsum(reference(counts, w, context, *args) for w in vocab)
            assert math.isclose(total, 1.0, rel_tol=1e-12), (n, context)


def test_witten_bell_by_hand():
    counts = {("<s>", "a"): 2, ("a", "b"): 1, ("a", "</s>"): 1, ("b", "</s>"): 1}
    # unigrams c(w)/N: a 2/5, b 1/5, </s> 2/5; after "a": c = 2, T = 2
    assert ch01.witten_bell_prob(counts, "b", ("a",)) == pytest.approx((1 + 2 * 0.2) / 4)
    assert ch01.witten_bell_prob(counts, "a", ("a",)) == pytest.approx((0 + 2 * 0.4) / 4)
    assert ch01.witten_bell_prob(counts, "a", ("zebra",)) == pytest.approx(0.4)


def starter_perplexity():
    """The debug task's starter code, as the exercise notebook shows it (three planted bugs:
    no '</s>', unknown words not read as '<unk>', one mean per sentence)."""
    notebook = nbformat.read(ROOT / "exercises" / "01_ngrams.ipynb", as_version=4)
    source = next(cell.source for cell in notebook.cells
                  if cell.cell_type == "code" and "def perplexity(" in cell.source)
    namespace = {"math": math}
    exec(compile(source, "<starter>", "exec"), namespace)
    return namespace["perplexity"]


def test_the_debug_task_s_starter_fails_every_case_with_a_hint():
    result = run_task("1.4", starter_perplexity(), hidden=True)
    assert result.points == 0 and result.status == "failed"
    assert {case.status for case in result.cases} == {"failed"}  # it runs, and is wrong
    assert all(ch01.HINT_PPL_INFINITE in case.message for case in result.cases)
    # with unknown words read as '<unk>', the other two bugs show
    def unk_fixed(model, sentences):
        return starter_perplexity()(model, [[w if w in model.vocab else "<unk>" for w in s]
                                            for s in sentences])

    messages = [case.message for case in run_task("1.4", unk_fixed, hidden=True).cases]
    assert all(ch01.HINT_PPL_NO_EOS in m for m in messages)


def test_the_questions_keys_come_from_the_package(monkeypatch):
    from coursepkg import ngram

    task = checks.get_task("1.9")
    assert task.reference() == "mle"
    task.reference.cache_clear()
    monkeypatch.setattr(ngram.NGramLM, "prob", lambda self, word, context: 0.5
                        if self.smoothing == "mle" else 0.0)
    with pytest.raises(checks.CheckerBug):
        task.reference()
    monkeypatch.undo()
    task.reference.cache_clear()
    assert run_task("1.9", zero_for_unseen_alt).status == "passed"


def test_the_questions_forbid_asking_the_checks():
    def asks_the_checks():
        return ch01.distinct_bigrams_key()

    result = checks.run_task("1.8", asks_the_checks)
    assert result.points == 0
    assert "forbidden" in result.cases[0].message


def test_points_by_kind_keep_formulas_to_a_third_or_less():
    points = checks.points_by_kind("01_ngrams")
    assert points["formula"] <= sum(points.values()) / 3
    assert points["extension"] > 0 and points["debug"] > 0 and points["question"] > 0


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
        "  ERROR [0/0.5] unigrams of one sentence: raised IndexError: list index out of range. "
        + core._DEFAULT_ERROR_HINTS["IndexError"]
    ) in out


def test_check_names_the_wrong_return_type(capsys):
    out = check_output(capsys, "1.1", lambda sentences, n: list(count_ngrams_alt(sentences, n)))
    assert "0/2.5 points" in out
    assert "Wrong return type: expected a dict mapping n-gram tuples to counts, got list." in out
    out = check_output(capsys, "1.2", lambda *args: AlwaysEqual())
    assert "0/2.5 points" in out and "expected a float, got AlwaysEqual" in out


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




# ---------------------------------------------------------------------------------------------
# A student who pastes the book: at most the formula tasks' share
# ---------------------------------------------------------------------------------------------


def paster_count_ngrams(sentences, n):  # the page's pad and ngrams, copied
    counts = Counter()
    for sentence in sentences:
        tokens = ["<s>"] * (n - 1) + list(sentence) + ["</s>"]
        counts.update(zip(*(tokens[i:] for i in range(n)), strict=False))
    return counts


def paster_mle_prob(counts, word, context):  # NGramLM.prob's formula, on a dict of counts
    followers = {g[-1]: c for g, c in counts.items() if g[:-1] == tuple(context)}
    return followers.get(word, 0) / sum(followers.values()) if followers else 0.0


def paster_add_k_prob(counts, vocab, word, context, k):
    followers = {g[-1]: c for g, c in counts.items() if g[:-1] == tuple(context)}
    return (followers.get(word, 0) + k) / (sum(followers.values()) + k * len(vocab))


def paster_perplexity(model, sentences):  # NGramLM.perplexity as the page shows it
    total, count = 0.0, 0
    for sentence in sentences:
        toks = ["<s>"] * (model.n - 1) + list(sentence) + ["</s>"]
        for i in range(model.n - 1, len(toks)):
            p = model.prob(toks[i], toks[i - model.n + 1 : i])
            if p <= 0.0:
                return math.inf
            total += math.log(p)
            count += 1
    return math.exp(-total / count)


def paster_delegates_perplexity(model, sentences):
    return model.perplexity(sentences)


def test_a_book_paster_gets_at_most_the_formula_share():
    """Each function the page shows, pasted (or called) where a task asks for it: the page has
    no Kneser-Ney from counts, no Witten-Bell, no closed-vocabulary perplexity, no answers."""
    pasted = {"1.1": paster_count_ngrams, "1.2": paster_mle_prob, "1.3": paster_add_k_prob,
              "1.4": paster_perplexity}
    points = {task_id: run_task(task_id, func, hidden=True).points
              for task_id, func in pasted.items()}
    assert run_task("1.4", paster_delegates_perplexity, hidden=True).points == 0
    shares = checks.points_by_kind("01_ngrams")
    assert points["1.4"] == 0
    assert sum(points.values()) <= shares["formula"]


def test_the_trained_table_s_bands():
    """The reference and counting get full marks on every case; training too briefly earns a
    partial band; an untrained table or one trained on another source earns nothing."""
    for func in (ch01.train_bigram, train_bigram_by_counting):
        assert run_task("1.10", func, hidden=True).status == "passed"
    short = run_task("1.10", train_bigram_too_few_steps, hidden=True)
    assert {case.status for case in short.cases} == {"partial"}
    assert 0 < short.points < short.max_points
    for func in (train_bigram_untrained, train_bigram_on_other_data):
        assert run_task("1.10", func, hidden=True).points == 0


def test_the_train_task_s_held_out_data_never_reach_the_student():
    task = checks.get_task("1.10")
    for case in all_cases(task):
        assert "_heldout" in case.args
        assert "_heldout" not in core.student_args(case.args)
        x, vocab_size, seed = task.build_args(core.student_args(case.args))
        held_out = task.expected(case.args)["sequences"]
        assert x.shape == (case.args["B"], case.args["T"]) and vocab_size == ch01.SYMBOLS
        assert x.tolist()[0] != held_out[0]


def test_every_task_but_the_train_task_and_the_questions_has_three_public_cases():
    for task in checks.tasks_for("01_ngrams"):
        if task.kind not in ("train", "question"):
            assert len(task.public_cases) >= 3, task.id
