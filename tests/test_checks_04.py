"""The checks of chapter 4 (coursepkg.checks.ch04_self_attention): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, forged_pairs, hidden_cases, run_task

from coursepkg import checks
from coursepkg import self_attention as sa
from coursepkg.checks import attention_mistakes as bank
from coursepkg.checks import ch04_self_attention as ch04

TASK_IDS = ("4.1", "4.2", "4.3", "4.4")
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def qkv_scores(x, w_q, w_k, w_v):
    """The notebook's solution."""
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    return q, k, v, q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def qkv_scores_linear_einsum(x, w_q, w_k, w_v):
    """F.linear for the projections, einsum and a multiplication by d_k ** -0.5 for the scores."""
    q, k, v = F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)
    return q, k, v, torch.einsum("btd,bsd->bts", q, k) * q.size(-1) ** -0.5


def qkv_scores_scaled_queries(x, w_q, w_k, w_v):
    """Scale the queries before the product (but return them unscaled), bmm with .mT."""
    q, k, v = torch.matmul(x, w_q.t()), torch.matmul(x, w_k.t()), torch.matmul(x, w_v.t())
    return q, k, v, torch.bmm(q / w_q.shape[0] ** 0.5, k.mT)


def scaled_dot_product_attention(q, k, v, mask=None):
    """The notebook's solution."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_where_stable_softmax(q, k, v, mask=None):
    """torch.where with -inf, .mT, a softmax by hand that subtracts each row's maximum."""
    scores = (q @ k.mT) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(NEG_INF, dtype=scores.dtype))
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return torch.matmul(weights, v), weights


def sdpa_additive_einsum(q, k, v, mask=None):
    """einsum over any leading dims, the boolean mask turned into an additive 0 / -inf one."""
    scores = torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(k.shape[-1])
    if mask is not None:
        scores = scores + torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, NEG_INF)
    weights = F.softmax(scores, dim=-1)
    return torch.einsum("...ts,...sv->...tv", weights, v), weights


def sdpa_finfo_min(q, k, v, mask=None):
    """The most negative finite number of the dtype: exp of it minus any real score is 0."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    return weights @ v, weights


def sdpa_renormalised(q, k, v, mask=None):
    """Mask after the softmax, then renormalise: the same weights when nothing underflows."""
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights * mask
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights @ v, weights


def causal_mask(T):
    """The notebook's solution."""
    return torch.ones(T, T, dtype=torch.bool).tril()


def causal_mask_compare(T):
    """Key index <= query index."""
    positions = torch.arange(T)
    return positions[None, :] <= positions[:, None]


def causal_mask_loop(T):
    """Row by row, from a list of lists."""
    return torch.tensor([[s <= t for s in range(T)] for t in range(T)])


def self_attention(x, w_q, w_k, w_v, causal=False):
    """The notebook's solution, with this file's functions."""
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    mask = causal_mask(x.shape[1]) if causal else None
    return scaled_dot_product_attention(q, k, v, mask)


def self_attention_inline(x, w_q, w_k, w_v, causal=False):
    """Everything written out; the future hidden with triu(1) of a full mask."""
    _, T, _ = x.shape
    q, k, v = F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)
    scores = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(w_k.shape[0])
    if causal:
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, NEG_INF)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def self_attention_from_scores(x, w_q, w_k, w_v, causal=False):
    """Task 4.1's function, then the mask and the softmax."""
    _, _, v, scores = qkv_scores(x, w_q, w_k, w_v)
    if causal:
        scores = scores.masked_fill(~causal_mask_compare(x.shape[1]), NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


CORRECT = {
    "4.1": [ch04.qkv_scores, qkv_scores, qkv_scores_linear_einsum, qkv_scores_scaled_queries],
    "4.2": [sa.scaled_dot_product_attention, scaled_dot_product_attention,
            sdpa_where_stable_softmax, sdpa_additive_einsum, sdpa_finfo_min, sdpa_renormalised],
    "4.3": [sa.causal_mask, causal_mask, causal_mask_compare, causal_mask_loop],
    "4.4": [ch04.self_attention, self_attention, self_attention_inline,
            self_attention_from_scores],
}


# ---------------------------------------------------------------------------------------------
# Plausible wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------


def _qkv(x, w_q, w_k, w_v):
    return x @ w_q.T, x @ w_k.T, x @ w_v.T


def qkv_no_scale(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, q @ k.transpose(-2, -1)


def qkv_sqrt_d_model(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])


def qkv_sqrt_d_v(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])


def qkv_divided_by_d_k(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, q @ k.transpose(-2, -1) / q.shape[-1]


def qkv_size_1(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, q @ k.transpose(-2, -1) / math.sqrt(q.size(1))


def qkv_k_not_transposed(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, q @ k / math.sqrt(q.shape[-1])


def qkv_k_dot_t(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, q @ k.permute(2, 1, 0) / math.sqrt(q.shape[-1])  # what k.T does


def qkv_weights_not_transposed(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return q, k, v, q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def qkv_weights_swapped(x, w_q, w_k, w_v):
    q, k, v = x @ w_k.T, x @ w_q.T, x @ w_v.T
    return q, k, v, q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def qkv_scores_transposed(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])


def qkv_softmaxed(x, w_q, w_k, w_v):
    q, k, v, scores = qkv_scores(x, w_q, w_k, w_v)
    return q, k, v, torch.softmax(scores, dim=-1)


def qkv_returns_scaled_q(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    q = q / math.sqrt(q.shape[-1])
    return q, k, v, q @ k.transpose(-2, -1)


def qkv_qt_k(x, w_q, w_k, w_v):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    return q, k, v, q.transpose(-2, -1) @ k / math.sqrt(q.shape[-1])


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _finish(scores, v):
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_no_scale(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    return _finish(scores if mask is None else scores.masked_fill(~mask, NEG_INF), v)


def sdpa_sqrt_d_v(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    return _finish(scores if mask is None else scores.masked_fill(~mask, NEG_INF), v)


def sdpa_softmax_over_queries(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-2)
    return weights @ v, weights


def sdpa_softmax_dim_1(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=1)
    return weights @ v, weights


def sdpa_mask_inverted(q, k, v, mask=None):
    scores = _scores(q, k)
    return _finish(scores if mask is None else scores.masked_fill(mask, NEG_INF), v)


def sdpa_mask_with_zero(q, k, v, mask=None):
    scores = _scores(q, k)
    return _finish(scores if mask is None else scores * mask, v)


def sdpa_mask_minus_1e9(q, k, v, mask=None):
    """The Annotated Transformer's fill value."""
    scores = _scores(q, k)
    return _finish(scores if mask is None else scores.masked_fill(mask == 0, -1e9), v)


def sdpa_mask_minus_1e4(q, k, v, mask=None):
    scores = _scores(q, k)
    return _finish(scores if mask is None else scores.masked_fill(~mask, -10000.0), v)


def sdpa_mask_after_softmax(q, k, v, mask=None):
    weights = torch.softmax(_scores(q, k), dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights


def sdpa_mask_times_inf(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores * mask + (~mask) * NEG_INF
    return _finish(scores, v)


def sdpa_mask_ignored(q, k, v, mask=None):
    return _finish(_scores(q, k), v)


def sdpa_naive_softmax(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    exps = torch.exp(scores)
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return weights @ v, weights


def sdpa_k_not_transposed(q, k, v, mask=None):
    scores = q @ k / math.sqrt(q.shape[-1])
    return _finish(scores if mask is None else scores.masked_fill(~mask, NEG_INF), v)


def sdpa_k_dot_t(q, k, v, mask=None):
    scores = q @ k.T / math.sqrt(q.shape[-1])
    return _finish(scores if mask is None else scores.masked_fill(~mask, NEG_INF), v)


def sdpa_if_mask(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask:  # ambiguous for a tensor of several values
        scores = scores.masked_fill(~mask, NEG_INF)
    return _finish(scores, v)


def sdpa_averages_keys(q, k, v, mask=None):
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    return weights @ k, weights


def sdpa_returns_weights_first(q, k, v, mask=None):
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    return weights, out


def sdpa_scale_on_weights(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1) / math.sqrt(q.shape[-1])
    return weights @ v, weights


def sdpa_transpose_1_2(q, k, v, mask=None):
    """Right for (B, T, Dk) inputs only."""
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    return _finish(scores if mask is None else scores.masked_fill(~mask, NEG_INF), v)


def mask_diagonal_hidden(T):
    return torch.ones(T, T, dtype=torch.bool).tril(diagonal=-1)


def mask_upper_triangle(T):
    return torch.ones(T, T, dtype=torch.bool).triu()


def mask_true_on_the_future(T):
    return torch.triu(torch.ones(T, T), diagonal=1).bool()


def mask_one_ahead(T):
    positions = torch.arange(T)
    return positions[None, :] <= positions[:, None] + 1


def mask_as_floats(T):
    return torch.ones(T, T).tril()


def mask_additive(T):
    return torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), NEG_INF)


def mask_with_a_batch_dim(T):
    return torch.ones(1, T, T, dtype=torch.bool).tril()


def layer_ignores_causal(x, w_q, w_k, w_v, causal=False):
    return scaled_dot_product_attention(*_qkv(x, w_q, w_k, w_v))


def layer_always_causal(x, w_q, w_k, w_v, causal=False):
    return scaled_dot_product_attention(*_qkv(x, w_q, w_k, w_v), causal_mask(x.shape[1]))


def _layer_with(attend=scaled_dot_product_attention, mask_of=causal_mask):
    def layer(x, w_q, w_k, w_v, causal=False):
        mask = mask_of(x.shape[1]) if causal else None
        return attend(*_qkv(x, w_q, w_k, w_v), mask)

    return layer


layer_diagonal_hidden = _layer_with(mask_of=mask_diagonal_hidden)
layer_diagonal_hidden.__name__ = "layer_diagonal_hidden"
layer_upper_triangle = _layer_with(mask_of=mask_upper_triangle)
layer_upper_triangle.__name__ = "layer_upper_triangle"
layer_no_scale = _layer_with(attend=sdpa_no_scale)
layer_no_scale.__name__ = "layer_no_scale"
layer_softmax_over_queries = _layer_with(attend=sdpa_softmax_over_queries)
layer_softmax_over_queries.__name__ = "layer_softmax_over_queries"
layer_mask_inverted = _layer_with(attend=sdpa_mask_inverted)
layer_mask_inverted.__name__ = "layer_mask_inverted"
layer_future_mask = _layer_with(mask_of=mask_true_on_the_future)
layer_future_mask.__name__ = "layer_future_mask"


def layer_sqrt_d_model(x, w_q, w_k, w_v, causal=False):
    q, k, v = _qkv(x, w_q, w_k, w_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
    if causal:
        scores = scores.masked_fill(~causal_mask(x.shape[1]), NEG_INF)
    return _finish(scores, v)


def layer_values_not_projected(x, w_q, w_k, w_v, causal=False):
    q, k, _ = _qkv(x, w_q, w_k, w_v)
    return scaled_dot_product_attention(q, k, x, causal_mask(x.shape[1]) if causal else None)


def layer_weights_swapped(x, w_q, w_k, w_v, causal=False):
    q, k, v = _qkv(x, w_k, w_q, w_v)
    return scaled_dot_product_attention(q, k, v, causal_mask(x.shape[1]) if causal else None)


def layer_weights_not_transposed(x, w_q, w_k, w_v, causal=False):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return scaled_dot_product_attention(q, k, v, causal_mask(x.shape[1]) if causal else None)


RUNTIME_HINTS = {task_id: checks.get_task(task_id).error_hints.get("RuntimeError")
                 for task_id in TASK_IDS}

WRONG = {
    "4.1": [
        (qkv_no_scale, ch04.HINT_NO_SCALE),
        (qkv_sqrt_d_model, ch04.HINT_SCALE_D_MODEL),
        (qkv_sqrt_d_v, ch04.HINT_SCALE_D_V),
        (qkv_divided_by_d_k, ch04.HINT_SCALE_NO_SQRT),
        (qkv_size_1, ch04.HINT_SCALE_WRONG_DIM),
        (qkv_k_not_transposed, ch04.HINT_K_NOT_TRANSPOSED),
        (qkv_k_dot_t, ch04.HINT_K_REVERSED),
        (qkv_weights_not_transposed, ch04.HINT_NOT_TRANSPOSED_W),
        (qkv_weights_swapped, ch04.HINT_WQ_WK_SWAPPED),
        (qkv_scores_transposed, ch04.HINT_SCORES_TRANSPOSED),
        (qkv_softmaxed, ch04.HINT_SCORES_SOFTMAXED),
        (qkv_returns_scaled_q, ch04.HINT_RETURN_SCALED_Q),
        (qkv_qt_k, ch04.HINT_QT_K),
    ],
    "4.2": [
        (sdpa_no_scale, ch04.HINT_NO_SCALE),
        (sdpa_sqrt_d_v, ch04.HINT_SCALE_D_V),
        (sdpa_softmax_over_queries, ch04.HINT_SOFTMAX_DIM),
        (sdpa_mask_inverted, ch04.HINT_MASK_INVERTED),
        (sdpa_mask_with_zero, ch04.HINT_MASK_ZERO),
        (sdpa_mask_minus_1e9, ch04.HINT_MASK_FINITE),
        (sdpa_mask_minus_1e4, ch04.HINT_MASK_FINITE),
        (sdpa_mask_after_softmax, ch04.HINT_MASK_AFTER_SOFTMAX),
        (sdpa_mask_times_inf, ch04.HINT_MASK_NAN),
        (sdpa_mask_ignored, ch04.HINT_MASK_IGNORED),
        (sdpa_naive_softmax, ch04.HINT_SOFTMAX_OVERFLOW),
        (sdpa_k_not_transposed, ch04.HINT_K_NOT_TRANSPOSED),
        (sdpa_k_dot_t, RUNTIME_HINTS["4.2"]),
        (sdpa_if_mask, "'if mask is not None:'"),
        (sdpa_averages_keys, ch04.HINT_OUT_KEYS),
        (sdpa_returns_weights_first, ch04.HINT_PAIR_ORDER),
        (sdpa_scale_on_weights, ch04.HINT_SCALE_ON_WEIGHTS),
    ],
    "4.3": [
        (mask_diagonal_hidden, ch04.HINT_CAUSAL_DIAGONAL),
        (mask_upper_triangle, ch04.HINT_CAUSAL_UPPER),
        (mask_true_on_the_future, ch04.HINT_CAUSAL_INVERTED),
        (mask_one_ahead, ch04.HINT_CAUSAL_ONE_AHEAD),
        (mask_as_floats, ch04.HINT_MASK_BOOL),
        (mask_additive, ch04.HINT_MASK_ADDITIVE),
        (mask_with_a_batch_dim, ch04.HINT_MASK_SHAPE),
    ],
    "4.4": [
        (layer_ignores_causal, ch04.HINT_CAUSAL_IGNORED),
        (layer_always_causal, ch04.HINT_ALWAYS_CAUSAL),
        (layer_diagonal_hidden, f"{ch04.HINT_LAYER_MASK_WRONG} {ch04.HINT_CAUSAL_DIAGONAL}"),
        (layer_upper_triangle, f"{ch04.HINT_LAYER_MASK_WRONG} {ch04.HINT_CAUSAL_UPPER}"),
        (layer_no_scale, f"{ch04.HINT_LAYER_ATTENTION_WRONG} {ch04.HINT_NO_SCALE}"),
        (layer_softmax_over_queries,
         f"{ch04.HINT_LAYER_ATTENTION_WRONG} {ch04.HINT_SOFTMAX_DIM}"),
        (layer_mask_inverted, ch04.HINT_LAYER_MASK_INVERTED),
        (layer_future_mask, ch04.HINT_LAYER_MASK_INVERTED),
        (layer_sqrt_d_model, ch04.HINT_SCALE_D_MODEL),
        (layer_values_not_projected, ch04.HINT_VALUES_NOT_PROJECTED),
        (layer_weights_swapped, ch04.HINT_WQ_WK_SWAPPED),
        (layer_weights_not_transposed, ch04.HINT_NOT_TRANSPOSED_W),
    ],
}

def stub(*args):
    raise NotImplementedError("Task 4.1: write qkv_scores")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="04_self_attention",
    tasks={"4.1": ("qkv_scores", 3, 7), "4.2": ("scaled_dot_product_attention", 7, 13),
           "4.3": ("causal_mask", 2, 6), "4.4": ("self_attention", 3, 7)},
    hints=ch04,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=2,
    min_hidden=4,
    public_points=(2, 7),
    forbidden=("coursepkg.self_attention", "coursepkg.checks",
               "torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention"),
    package="coursepkg.self_attention",
    not_finite_hint=ch04.HINT_NOT_FINITE,
    failure_reports=(
        ("4.2", sdpa_mask_minus_1e9, "Task 4.2 scaled_dot_product_attention: 6/7 points",
         ("  FAIL  [0/1] scores from -8e3 down to -1.7e10, causal mask: masked keys must get "
          "0: " + ch04.HINT_MASK_FINITE,)),
        ("4.3", mask_diagonal_hidden, "Task 4.3 causal_mask: 0/2 points",
         ("  FAIL  [0/1] T = 4: " + ch04.HINT_CAUSAL_DIAGONAL,)),
        ("4.2", sdpa_mask_with_zero, "Task 4.2 scaled_dot_product_attention: 2/7 points",
         (ch04.HINT_MASK_ZERO,)),
    ),
    typed=("4.1", "4.2", "4.4"),  # a causal mask is a function of T alone
    seeded=("4.1", "4.2", "4.4"),
    scalar_inputs=("4.3",),
    exact_results=("4.3",),
    more_hints=frozenset(
        {f"{ch04.HINT_LAYER_ATTENTION_WRONG} {hint}" for hint, _ in bank.attention_mistakes()}
        | {f"{ch04.HINT_LAYER_MASK_WRONG} {hint}" for hint, _ in bank.CAUSAL_MISTAKES}),
    more_hidden_funcs=(sdpa_transpose_1_2,),
    # where the widths differ, an untransposed key or weight matrix crashes: the error's hint
    # names the shapes
    crashes_excused=True,
    wrong_types=(
        ("4.1", lambda *a: qkv_scores(*a)[3],
         "expected a tuple of 4 (q, k, v, scores), got Tensor"),
        ("4.1", lambda *a: qkv_scores(*a)[:3], "got a tuple of 3"),
        ("4.2", lambda *a: scaled_dot_product_attention(*a)[0],
         "expected a pair (out, weights), got Tensor"),
        ("4.2", lambda *a: [t.tolist() for t in scaled_dot_product_attention(*a)],
         "expected out as a torch.Tensor, got list"),
        ("4.3", lambda T: causal_mask(T).tolist(), "expected the mask as a torch.Tensor, got list"),
        ("4.3", lambda T: None, "got NoneType"),
        ("4.3", lambda T: causal_mask(T).to(torch.complex64), "got dtype torch.complex64"),
        ("4.4", lambda *a: self_attention(*a)[0], "expected a pair (out, weights), got Tensor"),
    ),
    hidden_type_hints={
        "4.3": "Return a (T, T) torch.bool tensor, True where query t may attend to key s."},
    forged={
        "4.2": lambda good: forged_pairs(good, [2, 3, 5], 36),
        "4.3": lambda good: [{**good, "data": [2] * 16}, {**good, "data": [True] * 16},
                             {**good, "shape": [16]}, {**good, "dtype": None}],
    },
    forbidden_calls={
        sa.scaled_dot_product_attention: None,
        sa.SelfAttention.forward: "coursepkg.self_attention",
        F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
        torch.nn.MultiheadAttention.forward: "torch.nn.MultiheadAttention",
    },
    allowed_calls=(torch.softmax, torch.Tensor.masked_fill, torch.tril, torch.matmul, F.linear,
                   torch.Tensor.transpose),
)


# ---------------------------------------------------------------------------------------------
# The registry and the cases
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", ("4.1", "4.2", "4.4"))
def test_every_task_has_a_hidden_case_of_one_position(task_id):
    assert any(case.args["T"] == 1 for case in hidden_cases(checks.get_task(task_id)))


def test_hidden_causal_masks_have_other_lengths():
    task = checks.get_task("4.3")
    public = {case.args["T"] for case in task.public_cases}
    hidden = {case.args["T"] for case in hidden_cases(task)}
    assert not public & hidden
    assert {1, 2} <= hidden and max(hidden) > max(public)


def _sdpa_inputs(case):
    args = checks.get_task("4.2").build_args(case.args)
    return args if len(args) == 4 else (*args, None)


def test_the_attention_cases_cover_layouts_masks_and_widths():
    task = checks.get_task("4.2")
    public, hidden = task.public_cases, hidden_cases(task)
    # widths and lengths that differ, so that the wrong square root or a missing transposition
    # changes the numbers; and one public case where q @ k runs (Dk = S) to be recognised
    assert any(len({a["T"], a["S"], a["Dk"], a["Dv"]}) == 4 for a in (c.args for c in public))
    assert any(c.args["Dk"] == c.args["S"] != c.args["T"] for c in public)
    # several layouts: no leading dim, (B, ...), (B, H, ...); one query; float64
    assert {len(c.args["lead"]) for c in hidden} == {0, 1, 2}
    assert any(c.args["T"] == 1 for c in hidden)
    # masks of several ranks, each leaving every query at least one key
    ranks = set()
    for case in all_cases(task):
        q, k, v, mask = _sdpa_inputs(case)
        if mask is None:
            continue
        ranks.add(mask.dim())
        scores_shape = (*q.shape[:-1], k.shape[-2])
        assert torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
        assert mask.expand(scores_shape).any(dim=-1).all(), case.name
        assert not mask.all(), case.name
    assert ranks == {2, 3, 4}
    assert {c.args["mask"] is None for c in public} == {True, False}


def test_the_large_and_the_very_negative_scores_are_exact_and_extreme():
    task = checks.get_task("4.2")
    by_kind = {}
    for case in all_cases(task):
        by_kind.setdefault(case.args["kind"], []).append(case)
    assert {case.hidden for case in by_kind["large"]} == {True, False}
    for case in by_kind["large"] + by_kind["negative"]:
        assert case.args["Dk"] == 4  # sqrt(Dk) = 2: the scaled scores are exact
        q, k, v, mask = _sdpa_inputs(case)
        scores = q @ k.transpose(-2, -1) / 2
        if case.args["kind"] == "large":
            assert (scores > 990).all() and not torch.isfinite(torch.exp(scores)).any()
        else:
            # per query, the scores are about -8e3, -5.4e8 or -1.7e10: a finite fill of 0,
            # -1e4 or -1e9 each lets the masked keys win in some rows and not in others
            rows = scores[0].amax(dim=-1)
            assert rows.min() < -1e10 and ((rows > -1e9) & (rows < -1e4)).any()
            assert ((rows > -1e4) & (rows < -1e3)).any()
        out, weights = sa.scaled_dot_product_attention(q, k, v, mask)
        assert torch.isfinite(out).all() and torch.isfinite(weights).all()
        if mask is not None:
            assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_the_projection_cases_tell_the_widths_apart():
    for task_id in ("4.1", "4.4"):
        cases = checks.get_task(task_id).public_cases
        sizes = [(c.args["T"], c.args["D"], c.args["Dk"], c.args["Dv"]) for c in cases]
        assert any(len(set(s)) == 4 for s in sizes), task_id  # sqrt(D), sqrt(Dv), T differ
        assert any(len(set(s)) == 1 for s in sizes), task_id  # transpositions run
    layers = all_cases(checks.get_task("4.4"))
    assert {c.args["causal"] for c in layers if c.hidden} == {True, False}
    assert {c.args["causal"] for c in layers if not c.hidden} == {True, False}


def test_inputs_are_reproducible_and_fresh():
    task = checks.get_task("4.2")
    case = task.cases[2]
    first, second = task.build_args(case.args), task.build_args(case.args)
    assert all(torch.equal(a, b) and a is not b for a, b in zip(first, second, strict=True))
    float64 = task.build_args({**case.args, "dtype": "float64"})
    assert float64[0].dtype == torch.float64 and float64[3].dtype == torch.bool
    torch.testing.assert_close(float64[0].float(), first[0])


def test_references_agree_with_torch():
    for case in checks.get_task("4.2").cases:
        q, k, v, mask = _sdpa_inputs(case)
        q, k, v = q.double(), k.double(), v.double()
        out, weights = sa.scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        torch.testing.assert_close(weights.sum(dim=-1), torch.ones_like(weights[..., 0]))
    for case in checks.get_task("4.4").cases:
        x, w_q, w_k, w_v, causal = checks.get_task("4.4").build_args(
            {**case.args, "dtype": "float64"})
        out, weights = ch04.self_attention(x, w_q, w_k, w_v, causal)
        expected = F.scaled_dot_product_attention(x @ w_q.T, x @ w_k.T, x @ w_v.T,
                                                  is_causal=causal)
        torch.testing.assert_close(out, expected)
        q, k, v, scores = ch04.qkv_scores(x, w_q, w_k, w_v)
        if not causal:
            torch.testing.assert_close(torch.softmax(scores, dim=-1), weights)
    for T in (1, 2, 5):
        assert torch.equal(ch04.causal_mask(T), ~torch.ones(T, T, dtype=torch.bool).triu(1))


def test_the_causal_mask_by_hand():
    assert ch04.causal_mask(3).tolist() == [[True, False, False], [True, True, False],
                                            [True, True, True]]


# ---------------------------------------------------------------------------------------------
# Correct implementations: full marks
# ---------------------------------------------------------------------------------------------


def test_float64_computation_of_float32_inputs_is_close_enough():
    def via_float64(q, k, v, mask=None):
        out, weights = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
        return out.to(q.dtype), weights.to(q.dtype)

    assert run_task("4.2", via_float64, hidden=True).status == "passed"


def test_a_minus_1e9_mask_fails_only_where_scores_are_below_it():
    """The convention is float("-inf"); -1e9 gives the same weights except in the one public
    case whose scores are far below -1e9."""
    result = run_task("4.2", sdpa_mask_minus_1e9, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == [checks.get_task("4.2").cases[4].name]
    assert bad[0].message.startswith(ch04.HINT_MASK_FINITE)
    assert run_task("4.4", _layer_with(attend=sdpa_mask_minus_1e9),
                           hidden=True).status == "passed"


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


def test_the_finite_fills_and_the_zero_fill_are_told_apart():
    """The very negative case has rows where 0 and -1e4 let masked keys win but -1e9 does not,
    and rows where all three do: each fill gets its own numbers, hence its own hint."""
    case = checks.get_task("4.2").cases[4]
    outputs = {func.__name__: json.dumps(checks.student_output(checks.get_task("4.2"), case, func))
               for func in (sdpa_mask_with_zero, sdpa_mask_minus_1e4, sdpa_mask_minus_1e9,
                            scaled_dot_product_attention)}
    assert len(set(outputs.values())) == 4
    result = run_task("4.2", sdpa_mask_with_zero)
    assert all(c.message.startswith(ch04.HINT_MASK_ZERO) for c in result.cases if c.message)


def test_shapes_name_the_mistake_where_values_cannot():
    """Where the widths differ, an untransposed key or weight matrix cannot even run: the
    error's hint names the shapes. In the case where every size agrees, the numbers name it."""
    for func in (qkv_k_not_transposed, qkv_weights_not_transposed):
        result = run_task("4.1", func)
        assert [case.status for case in result.cases] == ["error", "failed", "error"]
        assert all("x @ w_q.T" in case.message for case in result.cases if case.status == "error")
    result = run_task("4.2", sdpa_k_not_transposed)
    assert [case.status for case in result.cases] == ["error", "error", "error", "failed",
                                                      "error", "error", "error"]
    assert all("k.transpose(-2, -1)" in case.message for case in result.cases)


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_a_transposition_right_only_for_3d_inputs_fails_the_other_layouts():
    for func in (sdpa_transpose_1_2, sdpa_k_dot_t):
        result = run_task("4.2", func, hidden=True)
        hidden = {case.name: case for case in result.cases if case.hidden}
        four_d = [case for name, case in hidden.items() if "(B, H, T, S)" in name]
        assert four_d and all(case.status == "error" for case in four_d), func.__name__
        assert all(case.message.startswith("raised RuntimeError.") and "k.transpose(-2, -1)"
                   in case.message for case in four_d)
    # the task promises any leading dims, and one public case is 4-D: it shows the mistake
    result = run_task("4.2", sdpa_transpose_1_2, hidden=True)
    public = [case for case in result.cases if not case.hidden]
    assert [case.name for case in public if case.status != "passed"] == [
        "(B, H, T, S) inputs (any leading dims) with a (B, 1, 1, S) key-padding mask"]
    assert "k.transpose(1, 2) is wrong for 4-D ones" in public[5].message
    unbatched = next(case for case in result.cases if "no batch dims" in case.name)
    assert unbatched.status == "error" and unbatched.message.startswith("raised IndexError.")


def test_public_failures_show_the_specifics():
    result = run_task("4.1", qkv_no_scale)
    detail = result.cases[0].message.removeprefix(ch04.HINT_NO_SCALE).strip()
    assert detail.startswith("scores[") and "expected" in detail and "values differ)." in detail
    result = run_task("4.2", sdpa_returns_weights_first)
    assert result.cases[0].message.endswith("Expected out of shape (2, 3, 6), got (2, 3, 5).")
    result = run_task("4.2", sdpa_naive_softmax)
    assert "got nan" in result.cases[3].message
    assert [case.status for case in result.cases[:3]] == ["passed"] * 3
    result = run_task("4.3", mask_one_ahead)
    assert result.cases[0].message.endswith("mask[0, 1]: expected False, got True "
                                            "(3 of 16 values differ).")
    result = run_task("4.3", mask_as_floats)
    assert result.cases[0].message.endswith("Expected dtype torch.bool, got torch.float32.")


def test_the_float_masks_are_named_whatever_their_pattern():
    def float_upper(T):
        return torch.ones(T, T).triu()

    def int_mask(T):
        return torch.ones(T, T, dtype=torch.int64).tril()

    def minus_1e9_additive(T):
        return torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -1e9)

    assert ch04.HINT_CAUSAL_UPPER in run_task("4.3", float_upper).cases[0].message
    assert ch04.HINT_MASK_BOOL in run_task("4.3", int_mask).cases[0].message
    assert ch04.HINT_MASK_ADDITIVE in run_task("4.3", minus_1e9_additive).cases[0].message


def test_dtype_mismatch_is_named_in_the_float64_case():
    def float32_out(q, k, v, mask=None):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return out.float(), weights.float()

    result = run_task("4.2", float32_out, hidden=True)
    failed = [case for case in result.cases if case.status != "passed"]
    assert all("float64" in case.name for case in failed) and len(failed) == 2
    assert {case.message for case in failed} == {ch04.HINT_DTYPE}


def test_a_crash_on_an_edge_case_costs_only_that_case():
    def no_single_position(x, w_q, w_k, w_v, causal=False):
        if x.shape[1] == 1:
            raise IndexError("index 1 is out of bounds")
        return self_attention(x, w_q, w_k, w_v, causal)

    result = run_task("4.4", no_single_position, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == ["hidden: one position, causal"]
    assert bad[0].status == "error" and bad[0].message.startswith("raised IndexError.")


def test_exceptions_become_errors_with_hints():
    result = run_task("4.2", sdpa_if_mask)
    errors = [case for case in result.cases if case.status == "error"]
    assert len(errors) == 5
    assert all(case.message.startswith("raised RuntimeError: Boolean value of Tensor")
               and "'if mask is not None:'" in case.message for case in errors)
    assert all("\n" not in case.message for case in result.cases)
    assert all("ambiguous. A tensor operation failed" in case.message for case in errors)

    def no_default(q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, mask)

    result = run_task("4.2", no_default)
    assert result.cases[0].status == "error" and "default mask=None" in result.cases[0].message
    assert result.cases[1].status == "passed"


def test_a_mask_of_nan_or_inf_never_passes():
    for value in (math.nan, math.inf):
        def mask_of(T, value=value):
            return torch.full((T, T), value)

        assert run_task("4.3", mask_of, hidden=True).points == 0


def test_a_tensor_that_requires_grad_or_is_a_view_is_fine():
    def with_grad(x, w_q, w_k, w_v, causal=False):
        return self_attention(x, torch.nn.Parameter(w_q.clone()), w_k, w_v, causal)

    def mask_as_view(T):
        return torch.ones(T + 1, T + 1, dtype=torch.bool).tril()[1:, :-1].tril()

    assert run_task("4.4", with_grad, hidden=True).status == "passed"
    assert run_task("4.3", mask_as_view, hidden=True).status == "passed"


def test_the_square_subsequent_mask_is_forbidden_in_the_causal_mask():
    from coursepkg.checks.forbidden import Tripwire

    masks = Tripwire(checks.get_task("4.3"))
    helper = torch.nn.Transformer.generate_square_subsequent_mask
    assert masks.forbidden_callable(helper) == (
        "torch.nn.Transformer.generate_square_subsequent_mask")


# ---------------------------------------------------------------------------------------------
# The split used by the grader: student half, JSON, trusted half
# ---------------------------------------------------------------------------------------------


def test_nan_and_inf_survive_the_trip_through_json():
    """The naive softmax's NaN and an additive mask's -inf go through the worker's JSON and
    still get their hints."""
    task = checks.get_task("4.2")
    case = task.cases[3]
    sent = json.loads(json.dumps(checks.student_output(task, case, sdpa_naive_softmax)))
    result = checks.grade_output(task, case, sent)
    assert result.status == "failed" and result.message.startswith(ch04.HINT_SOFTMAX_OVERFLOW)
    task = checks.get_task("4.3")
    sent = json.loads(json.dumps(checks.student_output(task, task.cases[0], mask_additive)))
    result = checks.grade_output(task, task.cases[0], sent)
    assert result.status == "failed" and result.message.startswith(ch04.HINT_MASK_ADDITIVE)


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


def test_check_a_function_that_raises(capsys):
    def broken(x, w_q, w_k, w_v):
        return x @ w_q  # shapes that do not fit

    out = check_output(capsys, "4.1", broken)
    assert "ERROR [0/1]" in out and "raised RuntimeError: " in out
    assert "q = x @ w_q.T" in out
