"""The checks of chapter 5 (coursepkg.checks.ch05_multihead): their tables and their own tests.

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
from torch import nn

from coursepkg import checks
from coursepkg import multihead as mh
from coursepkg.checks import attention_mistakes as bank
from coursepkg.checks import ch04_self_attention as ch04
from coursepkg.checks import ch05_multihead as ch05
from coursepkg.self_attention import scaled_dot_product_attention

TASK_IDS = ("5.1", "5.2", "5.3")
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def split_heads(x, n_heads):
    """The notebook's solution."""
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)


def split_heads_stack(x, n_heads):
    """Cut the features into H chunks, stack them on a new head axis."""
    return torch.stack(x.split(x.shape[-1] // n_heads, dim=-1), dim=1)


def split_heads_unflatten_permute(x, n_heads):
    """unflatten the last dim, then permute; contiguous at the end."""
    return x.unflatten(-1, (n_heads, -1)).permute(0, 2, 1, 3).contiguous()


def merge_heads(x):
    """The notebook's solution."""
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)


def merge_heads_cat(x):
    """The heads side by side with torch.cat."""
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_heads_contiguous_view(x):
    """permute, contiguous, then view (legal after contiguous), flatten with -1."""
    B, _, T, _ = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(B, T, -1)


def multi_head_attention(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                         out_proj_bias, n_heads, mask=None):
    """The notebook's solution: own split/merge around chapter 4's attention."""
    w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (None,) * 3
    q = split_heads(F.linear(query, w_q, b_q), n_heads)
    k = split_heads(F.linear(key, w_k, b_k), n_heads)
    v = split_heads(F.linear(value, w_v, b_v), n_heads)
    if mask is not None and mask.dim() == 3:
        mask = mask.unsqueeze(1)
    heads, weights = scaled_dot_product_attention(q, k, v, mask)
    return F.linear(merge_heads(heads), out_proj_weight, out_proj_bias), weights


def mha_loop_over_heads(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                        out_proj_bias, n_heads, mask=None):
    """One head at a time, with slices of the weights; torch.where for the mask."""
    D = query.shape[-1]
    Dh = D // n_heads
    bias = in_proj_bias if in_proj_bias is not None else torch.zeros(3 * D, dtype=query.dtype)
    if mask is not None:
        mask = mask[:, None] if mask.dim() == 3 else mask
    outs, maps = [], []
    for h in range(n_heads):
        rows = slice(h * Dh, (h + 1) * Dh)
        q = query @ in_proj_weight[:D][rows].T + bias[:D][rows]
        k = key @ in_proj_weight[D:2 * D][rows].T + bias[D:2 * D][rows]
        v = value @ in_proj_weight[2 * D:][rows].T + bias[2 * D:][rows]
        scores = q @ k.mT / math.sqrt(Dh)  # (B, T, S)
        if mask is not None:
            head_mask = torch.broadcast_to(mask, (*scores.shape[:1], n_heads, *scores.shape[1:]))
            scores = torch.where(head_mask[:, h], scores, NEG_INF)
        weights = scores.softmax(dim=-1)
        outs.append(weights @ v)
        maps.append(weights)
    out = torch.cat(outs, dim=-1) @ out_proj_weight.T
    if out_proj_bias is not None:
        out = out + out_proj_bias
    return out, torch.stack(maps, dim=1)


def mha_einsum(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
               n_heads, mask=None):
    """One projection for the three (when self-attention would allow it, it still projects
    each input), einsum scores, an additive mask, the package-free softmax."""
    B, T, D = query.shape
    S = key.shape[1]
    H, Dh = n_heads, D // n_heads
    w = in_proj_weight.view(3, H, Dh, D)
    b = in_proj_bias.view(3, H, Dh) if in_proj_bias is not None else None
    q = torch.einsum("btd,hed->bhte", query, w[0])
    k = torch.einsum("bsd,hed->bhse", key, w[1])
    v = torch.einsum("bsd,hed->bhse", value, w[2])
    if b is not None:
        q, k, v = q + b[0, :, None], k + b[1, :, None], v + b[2, :, None]
    scores = torch.einsum("bhte,bhse->bhts", q, k) * Dh**-0.5
    if mask is not None:
        if mask.dim() == 3:
            mask = mask.unsqueeze(1)
        scores = scores + torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    heads = torch.einsum("bhts,bhse->bthe", weights, v).reshape(B, T, D)
    assert heads.shape[1] == T and weights.shape[-1] == S
    return F.linear(heads, out_proj_weight, out_proj_bias), weights


CORRECT = {
    "5.1": [mh.split_heads, split_heads, split_heads_stack, split_heads_unflatten_permute],
    "5.2": [mh.merge_heads, merge_heads, merge_heads_cat, merge_heads_contiguous_view],
    "5.3": [ch05.multi_head_attention, multi_head_attention, mha_loop_over_heads, mha_einsum],
}


# ---------------------------------------------------------------------------------------------
# Plausible wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------


def split_no_transpose(x, n_heads):
    B, T, D = x.shape
    return x.view(B, n_heads, T, D // n_heads)  # heads mixed with time


def split_wrong_axes(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 3)


def split_interleaved(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, D // n_heads, n_heads).permute(0, 3, 1, 2)


def split_transpose_first(x, n_heads):
    B, T, D = x.shape
    return x.transpose(1, 2).reshape(B, n_heads, T, D // n_heads)


def split_not_moved(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads)


def split_folded(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2).reshape(B * n_heads, T, -1)


def split_float_width(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D / n_heads).transpose(1, 2)


def merge_no_transpose(x):
    B, H, T, Dh = x.shape
    return x.reshape(B, T, H * Dh)  # heads mixed with time


def merge_view(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).view(B, T, H * Dh)  # view of a non-contiguous tensor


def merge_interleaved(x):
    B, H, T, Dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * Dh)


def merge_wrong_axes(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 3).reshape(B, T, H * Dh)


def merge_mean(x):
    return x.mean(dim=1)


def merge_cat_over_time(x):
    return torch.cat(x.unbind(dim=1), dim=1)


def merge_not_flattened(x):
    return x.transpose(1, 2)


def _attention(q, k, v, mask=None, *, width=None, invert=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(width or q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask if invert else ~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _mha_with(*, split=split_heads, merge=merge_heads, attend=_attention, order=(0, 1, 2),
              out_proj=True, in_bias=True, unsqueeze=True, kv_from_query=False,
              average=False, scale_by_d_model=False):
    """A student's forward with one mistake switched on (defaults: right)."""

    def forward(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                out_proj_bias, n_heads, mask=None):
        chunks = in_proj_weight.chunk(3)
        w_q, w_k, w_v = (chunks[i] for i in order)
        if in_proj_bias is not None and in_bias:
            b_chunks = in_proj_bias.chunk(3)
            b_q, b_k, b_v = (b_chunks[i] for i in order)
        else:
            b_q = b_k = b_v = None
        if kv_from_query:
            key = value = query
        q = split(F.linear(query, w_q, b_q), n_heads)
        k = split(F.linear(key, w_k, b_k), n_heads)
        v = split(F.linear(value, w_v, b_v), n_heads)
        if mask is not None and mask.dim() == 3 and unsqueeze:
            mask = mask.unsqueeze(1)
        if scale_by_d_model:
            heads, weights = _attention(q, k, v, mask, width=query.shape[-1])
        else:
            heads, weights = attend(q, k, v, mask)
        out = merge(heads)
        if out_proj:
            out = F.linear(out, out_proj_weight, out_proj_bias)
        return out, weights.mean(dim=1) if average else weights

    return forward


def _named(func, name):
    func.__name__ = name
    return func


mha_no_out_proj = _named(_mha_with(out_proj=False), "mha_no_out_proj")
mha_sqrt_d_model = _named(_mha_with(scale_by_d_model=True), "mha_sqrt_d_model")
mha_kqv_order = _named(_mha_with(order=(1, 0, 2)), "mha_kqv_order")
mha_vkq_order = _named(_mha_with(order=(2, 1, 0)), "mha_vkq_order")
mha_weights_averaged = _named(_mha_with(average=True), "mha_weights_averaged")
mha_mask_not_per_head = _named(_mha_with(unsqueeze=False), "mha_mask_not_per_head")
mha_torch_mask_convention = _named(
    _mha_with(attend=lambda q, k, v, m: _attention(q, k, v, m, invert=True)),
    "mha_torch_mask_convention")
mha_split_no_transpose = _named(_mha_with(split=split_no_transpose), "mha_split_no_transpose")
mha_split_interleaved = _named(_mha_with(split=split_interleaved), "mha_split_interleaved")
mha_merge_no_transpose = _named(_mha_with(merge=merge_no_transpose), "mha_merge_no_transpose")
mha_merge_view = _named(_mha_with(merge=merge_view), "mha_merge_view")
mha_no_in_bias = _named(_mha_with(in_bias=False), "mha_no_in_bias")
mha_self_attention_only = _named(_mha_with(kv_from_query=True), "mha_self_attention_only")


def _softmax_over_heads(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=1)  # dim 1 of (B, H, T, S) is the heads
    return weights @ v, weights


mha_softmax_over_heads = _named(_mha_with(attend=_softmax_over_heads), "mha_softmax_over_heads")


def mha_no_out_bias(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                    out_proj_bias, n_heads, mask=None):
    out, weights = multi_head_attention(query, key, value, in_proj_weight, in_proj_bias,
                                        out_proj_weight, None, n_heads, mask)
    return out, weights


def mha_bias_never_none(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                        out_proj_bias, n_heads, mask=None):
    b_q, b_k, b_v = in_proj_bias.chunk(3)  # AttributeError when the bias is None
    return multi_head_attention(query, key, value, in_proj_weight, in_proj_bias,
                                out_proj_weight, out_proj_bias, n_heads, mask)


def mha_weights_not_transposed(query, key, value, in_proj_weight, in_proj_bias,
                               out_proj_weight, out_proj_bias, n_heads, mask=None):
    w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (0, 0, 0)
    q = split_heads(query @ w_q + b_q, n_heads)
    k = split_heads(key @ w_k + b_k, n_heads)
    v = split_heads(value @ w_v + b_v, n_heads)
    if mask is not None and mask.dim() == 3:
        mask = mask.unsqueeze(1)
    heads, weights = _attention(q, k, v, mask)
    return F.linear(merge_heads(heads), out_proj_weight, out_proj_bias), weights


def mha_returns_weights_first(*args):
    out, weights = multi_head_attention(*args)
    return weights, out


SOFTMAX_DIM_1 = ch04.HINT_SOFTMAX_DIM_1
RUNTIME_HINTS = {task_id: checks.get_task(task_id).error_hints.get("RuntimeError")
                 for task_id in TASK_IDS}

WRONG = {
    "5.1": [
        (split_no_transpose, ch05.HINT_SPLIT_NO_TRANSPOSE),
        (split_wrong_axes, ch05.HINT_SPLIT_WRONG_AXES),
        (split_interleaved, ch05.HINT_SPLIT_INTERLEAVED),
        (split_transpose_first, ch05.HINT_SPLIT_TRANSPOSE_FIRST),
        (split_not_moved, ch05.HINT_SPLIT_NOT_MOVED),
        (split_folded, ch05.HINT_SPLIT_FOLDED),
        (split_float_width, "Dh = D // n_heads"),
    ],
    "5.2": [
        (merge_no_transpose, ch05.HINT_MERGE_NO_TRANSPOSE),
        (merge_view, ch05.HINT_MERGE_VIEW),
        (merge_interleaved, ch05.HINT_MERGE_INTERLEAVED),
        (merge_wrong_axes, ch05.HINT_MERGE_WRONG_AXES),
        (merge_mean, ch05.HINT_MERGE_REDUCED),
        (merge_cat_over_time, ch05.HINT_MERGE_STACKED),
        (merge_not_flattened, ch05.HINT_MERGE_NOT_FLAT),
    ],
    "5.3": [
        (mha_no_out_proj, ch05.HINT_NO_OUT_PROJ),
        (mha_sqrt_d_model, ch05.HINT_SCALE_D_HEAD),
        (mha_kqv_order, ch05.HINT_CHUNK_ORDER),
        (mha_vkq_order, ch05.HINT_CHUNK_ORDER),
        (mha_weights_averaged, ch05.HINT_WEIGHTS_AVERAGED),
        (mha_mask_not_per_head, ch05.HINT_MASK_NOT_PER_HEAD),
        (mha_torch_mask_convention, ch05.HINT_MASK_TORCH_CONVENTION),
        (mha_split_no_transpose,
         f"{ch05.HINT_MHA_SPLIT_WRONG} {ch05.HINT_SPLIT_NO_TRANSPOSE}"),
        (mha_split_interleaved, f"{ch05.HINT_MHA_SPLIT_WRONG} {ch05.HINT_SPLIT_INTERLEAVED}"),
        (mha_merge_no_transpose,
         f"{ch05.HINT_MHA_MERGE_WRONG} {ch05.HINT_MERGE_NO_TRANSPOSE}"),
        (mha_merge_view, ".view after a transpose fails: use .reshape"),
        (mha_no_in_bias, ch05.HINT_IN_BIAS),
        (mha_no_out_bias, ch05.HINT_OUT_BIAS),
        (mha_bias_never_none, "may be None"),
        (mha_self_attention_only, ch05.HINT_WEIGHTS_SELF_ONLY),
        (mha_weights_not_transposed, ch05.HINT_IN_NOT_TRANSPOSED),
        (mha_softmax_over_heads, f"{ch05.HINT_MHA_ATTENTION_WRONG} {SOFTMAX_DIM_1}"),
        (mha_returns_weights_first, ch04.HINT_PAIR_ORDER),
    ],
}

def stub(*args):
    raise NotImplementedError("Task 5.1: write split_heads")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="05_multihead",
    tasks={"5.1": ("split_heads", 3, 8), "5.2": ("merge_heads", 3, 8),
           "5.3": ("multi_head_attention", 5, 14)},
    hints=ch05,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=3,
    min_hidden=5,
    public_points=(3, 5),
    forbidden=("coursepkg.multihead", "coursepkg.checks", "torch.nn.MultiheadAttention",
               "torch.nn.functional.scaled_dot_product_attention",
               "torch.nn.functional.multi_head_attention_forward"),
    package="coursepkg.multihead",
    not_finite_hint=ch05.HINT_NOT_FINITE,
    failure_reports=(
        ("5.3", mha_mask_not_per_head, "Task 5.3 multi_head_attention: 4/5 points",
         ("  FAIL  [0/1] a (B, T, S) mask, one per sequence, shared by the heads; B = H = 2: "
          + ch05.HINT_MASK_NOT_PER_HEAD,)),
        ("5.1", split_no_transpose, "Task 5.1 split_heads: 0/3 points",
         ("  FAIL  [0/1] every size 2 (B = T = H = Dh = 2, D = 4): ",)),
        ("5.3", mha_sqrt_d_model, "Task 5.3 multi_head_attention: 0/5 points",
         (ch05.HINT_SCALE_D_HEAD,)),
    ),
    # chapter 4's function is the previous exercise: task 5.3 may call it
    allowed=("coursepkg.self_attention",),
    more_hints=frozenset(
        {ch04.HINT_PAIR_ORDER}
        | {f"{ch05.HINT_MHA_ATTENTION_WRONG} {hint}" for hint, _ in bank.attention_mistakes()}
        | {f"{ch05.HINT_MHA_SPLIT_WRONG} {hint}" for hint, _ in ch05._SPLIT_MISTAKES}
        | {f"{ch05.HINT_MHA_MERGE_WRONG} {hint}" for hint, _ in ch05._MERGE_MISTAKES}),
    wrong_types=(
        ("5.1", lambda x, n: split_heads(x, n).tolist(),
         "expected the heads as a torch.Tensor, got list"),
        ("5.1", lambda x, n: split_heads(x, n).unbind(1), "got tuple"),
        ("5.2", lambda x: None, "expected the merged heads as a torch.Tensor, got NoneType"),
        ("5.2", lambda x: merge_heads(x).long(), "got dtype torch.int64"),
        ("5.3", lambda *a: multi_head_attention(*a)[0],
         "expected a pair (out, weights), got Tensor"),
        ("5.3", lambda *a: (*multi_head_attention(*a), None), "got a tuple of 3"),
    ),
    hidden_type_hints={"5.3": "Return a pair (out, weights) of tensors."},
    forged={
        "5.1": lambda good: [{**good, "shape": [60]}, {**good, "dtype": None}],
        "5.3": lambda good: forged_pairs(good, [2, 5, 4], 80),
    },
    forbidden_calls={
        mh.split_heads: None,
        mh.MultiHeadAttention.forward: "coursepkg.multihead",
        F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
        nn.MultiheadAttention.forward: "torch.nn.MultiheadAttention",
        F.multi_head_attention_forward: "torch.nn.functional.multi_head_attention_forward",
        ch05.multi_head_attention: None,
    },
    allowed_calls=(scaled_dot_product_attention, torch.softmax, torch.Tensor.view,
                   torch.Tensor.transpose, torch.Tensor.reshape, F.linear, torch.cat),
)


def _inputs(task_id, case):
    """The case's arguments, with the optional mask made explicit for 5.3."""
    args = checks.get_task(task_id).build_args(case.args)
    return args if task_id != "5.3" or len(args) == 9 else (*args, None)


# ---------------------------------------------------------------------------------------------
# The registry and the cases
# ---------------------------------------------------------------------------------------------


def _width(task_id, case):
    """Dh of a case."""
    args = case.args
    return args["Dh"] if task_id == "5.2" else args["D"] // args["H"]


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_every_task_has_hidden_cases_of_one_head_and_of_heads_of_width_1(task_id):
    heads = [(case.args["H"], _width(task_id, case))
             for case in hidden_cases(checks.get_task(task_id))]
    assert any(H == 1 for H, _ in heads)  # one head
    assert any(Dh == 1 for _, Dh in heads)  # heads of width 1


def test_the_reshape_cases_let_wrong_axes_keep_the_shape():
    """In one public case of 5.1 and 5.2 every size is 2: a transposition of the wrong axes
    runs and gives the right shape, so the values name it."""
    for task_id in ("5.1", "5.2"):
        cases = checks.get_task(task_id).public_cases
        assert any(len({c.args["B"], c.args["T"], c.args["H"], _width(task_id, c)}) == 1
                   and c.args["H"] > 1 for c in cases), task_id
        assert any(len({c.args["B"], c.args["T"], c.args["H"], _width(task_id, c)}) == 4
                   for c in cases), task_id
        layouts = {c.args["layout"] for c in hidden_cases(checks.get_task(task_id))}
        assert layouts == {"contiguous", "transposed"}


def test_a_non_contiguous_input_is_really_one():
    for task_id in ("5.1", "5.2"):
        task = checks.get_task(task_id)
        for case in all_cases(task):
            x = task.build_args(case.args)[0]
            assert x.is_contiguous() == (case.args["layout"] == "contiguous"), case.name


def test_the_attention_cases_cover_masks_layouts_and_widths():
    task = checks.get_task("5.3")
    public, hidden = task.public_cases, hidden_cases(task)
    ranks = set()
    for case in all_cases(task):
        query, key, value, w_in, b_in, w_out, b_out, H, mask = _inputs("5.3", case)
        B, T, D = query.shape
        S = key.shape[1]
        assert value.shape == key.shape and w_in.shape == (3 * D, D) and w_out.shape == (D, D)
        assert (b_in is None) == (b_out is None) == (not case.args["bias"])
        assert (key is query) == (not case.args["cross"])
        if mask is None:
            continue
        ranks.add(mask.dim())
        scores_shape = (B, H, T, S)
        full = mask.unsqueeze(1) if mask.dim() == 3 else mask
        assert torch.broadcast_shapes(full.shape, scores_shape) == scores_shape, case.name
        assert full.expand(scores_shape).any(dim=-1).all(), case.name  # a key for every query
        assert not mask.all(), case.name
    assert ranks == {2, 3, 4}
    # sqrt(D) and sqrt(Dh) differ; cross-attention with S != T; no biases; a (B, T, S) mask
    # with B = H in public (wrong numbers) and B != H hidden (a crash)
    for cases in (public, hidden):
        assert any(c.args["cross"] and c.args["S"] != c.args["T"] for c in cases)
        assert any(not c.args["bias"] for c in cases)
        assert {c.args["mask"] is None for c in cases} == {True, False}
    assert all(c.args["H"] > 1 for c in public)
    three_d = [c for c in all_cases(task) if _inputs("5.3", c)[-1] is not None
               and _inputs("5.3", c)[-1].dim() == 3]
    assert {(c.hidden, c.args["B"] == c.args["H"]) for c in three_d} == {(False, True),
                                                                         (True, False)}
    assert any(c.args["T"] == 1 for c in hidden) and any(c.args["B"] == 1 for c in hidden)


def test_inputs_are_reproducible_and_fresh():
    task = checks.get_task("5.3")
    case = task.cases[1]
    first, second = task.build_args(case.args), task.build_args(case.args)
    for a, b in zip(first, second, strict=True):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b) and a is not b
    float64 = task.build_args({**case.args, "dtype": "float64"})
    assert float64[0].dtype == torch.float64 and float64[-1].dtype == torch.bool
    torch.testing.assert_close(float64[3].float(), first[3])


def test_references_agree_with_torch():
    """The reference of 5.3 equals torch.nn.MultiheadAttention with the same weights (torch's
    masks are True = NOT allowed; a (B, T, S) mask is repeated for each head)."""
    for case in all_cases(checks.get_task("5.3")):
        args = checks.get_task("5.3").build_args({**case.args, "dtype": "float64"})
        query, key, value, w_in, b_in, w_out, b_out, H, mask = (
            args if len(args) == 9 else (*args, None))
        D = query.shape[-1]
        torch.manual_seed(0)
        ref = nn.MultiheadAttention(D, H, bias=b_in is not None, batch_first=True).double()
        state = {"in_proj_weight": w_in, "out_proj.weight": w_out}
        if b_in is not None:
            state |= {"in_proj_bias": b_in, "out_proj.bias": b_out}
        ref.load_state_dict(state)
        torch_mask = None
        if mask is not None:
            B, T, S = query.shape[0], query.shape[1], key.shape[1]
            full = (mask.unsqueeze(1) if mask.dim() == 3 else mask).expand(B, H, T, S)
            torch_mask = ~full.reshape(B * H, T, S)
        with torch.no_grad():
            expected_out, expected_weights = ref(query, key, value, attn_mask=torch_mask,
                                                 average_attn_weights=False)
        out, weights = ch05.multi_head_attention(*args)
        torch.testing.assert_close(out, expected_out)
        torch.testing.assert_close(weights, expected_weights)
    for case in all_cases(checks.get_task("5.1")):
        x, H = checks.get_task("5.1").build_args(case.args)
        heads = ch05.split_heads(x, H)
        D = x.shape[-1]
        for h in range(H):
            assert torch.equal(heads[:, h], x[..., h * D // H:(h + 1) * D // H])
        assert torch.equal(mh.merge_heads(heads), x)


# ---------------------------------------------------------------------------------------------
# Correct implementations: full marks
# ---------------------------------------------------------------------------------------------


def test_float64_computation_of_float32_inputs_is_close_enough():
    def via_float64(query, key, value, w_in, b_in, w_out, b_out, n_heads, mask=None):
        def d(t):
            return None if t is None else t.double()

        out, weights = multi_head_attention(d(query), d(key), d(value), d(w_in), d(b_in),
                                            d(w_out), d(b_out), n_heads, mask)
        return out.to(query.dtype), weights.to(query.dtype)

    assert run_task("5.3", via_float64, hidden=True).status == "passed"


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


def test_the_view_mistake_fails_only_where_the_memory_is_out_of_order():
    """transpose(1, 2).view(...) raises on a contiguous (B, H, T, Dh) input with H, T > 1, with
    a hint naming reshape; on split_heads' own output (a transposed view), with one head or with
    heads of width 1 it happens to work."""
    result = run_task("5.2", merge_view, hidden=True)
    by_name = {case.name: case for case in result.cases}
    for case in result.cases:
        if case.status == "error":
            assert case.message.startswith("raised RuntimeError")
            assert ".reshape(B, T, H * Dh)" in case.message and ".contiguous()" in case.message
    task = checks.get_task("5.2")
    works = {c.name for c in all_cases(task)
             if c.args["layout"] == "transposed" or c.args["H"] == 1 or c.args["Dh"] == 1}
    assert {name for name, case in by_name.items() if case.status == "passed"} == works
    public = run_task("5.2", merge_view)
    assert all("view size is not compatible" in case.message for case in public.cases)


def test_shapes_name_the_mistake_where_values_cannot():
    """Where the sizes differ, a transposition of the wrong axes gives the wrong shape and the
    shape names it; in the every-size-2 case the values do."""
    result = run_task("5.1", split_wrong_axes)
    assert [case.status for case in result.cases] == ["failed"] * 3
    assert "Expected heads of shape (2, 2, 5, 3), got (2, 3, 2, 5)." in result.cases[0].message
    assert all(case.message.startswith(ch05.HINT_SPLIT_WRONG_AXES) for case in result.cases)
    result = run_task("5.3", mha_weights_averaged)
    assert "Expected weights of shape (2, 2, 5, 4), got (2, 5, 4)." in result.cases[0].message


def test_the_mask_mistakes_show_only_where_they_matter():
    """A (B, T, S) mask not unsqueezed costs the public case where B = H (wrong numbers, named)
    and the hidden one where B != H (chapter 4's attention refuses the mask); masks of other
    ranks are not affected."""
    result = run_task("5.3", mha_mask_not_per_head, hidden=True)
    bad = {case.name: case for case in result.cases if case.status != "passed"}
    assert set(bad) == {checks.get_task("5.3").cases[3].name,
                        "hidden: a (B, T, S) mask with B != H"}
    assert bad["hidden: a (B, T, S) mask with B != H"].status == "error"
    result = run_task("5.3", mha_torch_mask_convention, hidden=True)
    masked = [c.args["mask"] is not None for c in all_cases(checks.get_task("5.3"))]
    assert [case.status == "passed" for case in result.cases] == [not m for m in masked]


def test_chunk_orders_and_biases_show_in_every_case_they_can():
    task = checks.get_task("5.3")
    for func in (mha_kqv_order, mha_vkq_order):
        assert run_task("5.3", func).points == 0
    for func in (mha_no_in_bias, mha_no_out_bias):
        result = run_task("5.3", func, hidden=True)
        assert [case.status == "passed" for case in result.cases] == [
            not c.args["bias"] for c in all_cases(task)]


def test_one_head_and_heads_of_width_1_are_the_edge_cases_they_should_be():
    """With H = 1 the split without transpose and the scale by sqrt(D) are right; with Dh = 1
    the interleaved split is."""
    result = run_task("5.3", mha_sqrt_d_model, hidden=True)
    passed = {case.name for case in result.cases if case.status == "passed"}
    assert passed == {"hidden: one head (H = 1)"}
    result = run_task("5.1", split_interleaved, hidden=True)
    passed = {case.name for case in result.cases if case.status == "passed"}
    assert passed == {"hidden: one head (H = 1)", "hidden: heads of width 1 (H = D)"}


def test_public_failures_show_the_specifics():
    result = run_task("5.1", split_no_transpose)
    detail = result.cases[0].message.removeprefix(ch05.HINT_SPLIT_NO_TRANSPOSE).strip()
    assert detail.startswith("heads[") and "expected" in detail and "values differ)." in detail
    result = run_task("5.2", merge_mean)
    assert result.cases[0].message.endswith("Expected out of shape (2, 5, 6), got (2, 5, 3).")
    result = run_task("5.3", mha_returns_weights_first)
    assert result.cases[0].message.endswith(
        "Expected out of shape (2, 5, 8), got (2, 2, 5, 4).")
    result = run_task("5.1", split_float_width)
    assert result.cases[0].message.startswith("raised TypeError: view(): argument 'size'")


def test_dtype_mismatch_is_named_in_the_float64_case():
    def float32_heads(x, n_heads):
        return split_heads(x, n_heads).float()

    result = run_task("5.1", float32_heads, hidden=True)
    failed = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in failed] == ["hidden: float64"]
    assert failed[0].message == ch05.HINT_DTYPE


def test_a_crash_on_an_edge_case_costs_only_that_case():
    def no_single_query(*args):
        if args[0].shape[1] == 1:
            raise IndexError("index 1 is out of bounds")
        return multi_head_attention(*args)

    result = run_task("5.3", no_single_query, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == ["hidden: one query, a key-padding mask"]
    assert bad[0].status == "error" and bad[0].message.startswith("raised IndexError.")


def test_exceptions_become_errors_with_hints():
    result = run_task("5.3", mha_bias_never_none)
    errors = [case for case in result.cases if case.status == "error"]
    assert len(errors) == 1
    assert errors[0].message.startswith("raised AttributeError: 'NoneType' object has no "
                                        "attribute 'chunk'")

    def no_default(query, key, value, w_in, b_in, w_out, b_out, n_heads, mask):
        return multi_head_attention(query, key, value, w_in, b_in, w_out, b_out, n_heads, mask)

    result = run_task("5.3", no_default)
    assert result.cases[0].status == "error" and "default mask=None" in result.cases[0].message
    assert result.cases[1].status == "passed"
    assert all("\n" not in case.message for case in result.cases)


def test_a_tensor_that_requires_grad_or_is_a_view_is_fine():
    def with_grad(query, key, value, w_in, *rest):
        return multi_head_attention(query, key, value, nn.Parameter(w_in.clone()), *rest)

    def as_view(x, n_heads):  # a strided view of a larger tensor
        padded = torch.cat([x, x], dim=-1)
        return split_heads(padded[..., : x.shape[-1]], n_heads)

    assert run_task("5.3", with_grad, hidden=True).status == "passed"
    assert run_task("5.1", as_view, hidden=True).status == "passed"


# ---------------------------------------------------------------------------------------------
# The split used by the grader: student half, JSON, trusted half
# ---------------------------------------------------------------------------------------------


def test_nan_survives_the_trip_through_json():
    """The mask read with torch's convention leaves rows with no key (NaN weights): they go
    through the worker's JSON and still get the hint naming the convention."""
    task = checks.get_task("5.3")
    case = task.cases[2]  # the causal mask: its last row is all False once inverted
    plain = checks.student_output(task, case, mha_torch_mask_convention)
    assert any(math.isnan(value) for value in plain[1]["data"])
    result = checks.grade_output(task, case, json.loads(json.dumps(plain)))
    assert result.status == "failed"
    assert result.message.startswith(ch05.HINT_MASK_TORCH_CONVENTION)


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


def test_check_a_function_that_raises(capsys):
    out = check_output(capsys, "5.2", merge_view)
    assert "ERROR [0/1]" in out and "raised RuntimeError: view size is not compatible" in out
    assert "Use .reshape(B, T, H * Dh)" in out
