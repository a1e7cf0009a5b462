"""The checks of chapter 5 (coursepkg.checks.ch05_multihead): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do: grouped-query attention
equal to the package's multi-head attention when G = H and to multi-query attention when G = 1;
the debug task's every combination of bugs; the train task's bands (the reference on three seeds
within half the budget, an untrained model, one trained on another task, one head instead of
two); the questions' keys; and a student who pastes the book getting at most the formula share.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, forged_pairs, run_task, short_training

from coursepkg import checks
from coursepkg import multihead as mh
from coursepkg import self_attention as sa
from coursepkg.checks import ch05_multihead as ch05
from coursepkg.checks.core import student_args
from coursepkg.checks.tensors import held_out_accuracy

ROOT = Path(__file__).resolve().parents[1]
TASK_IDS = ("5.1", "5.2", "5.3", "5.4", "5.5", "5.6", "5.7")
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def head_weights(query, key, w_q, w_k, mask=None):
    """The notebook's solution."""
    q = query[:, None] @ w_q.transpose(-2, -1)
    k = key[:, None] @ w_k.transpose(-2, -1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(w_q.shape[1])
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None], NEG_INF)
    return torch.softmax(scores, dim=-1)


def head_weights_loop(query, key, w_q, w_k, mask=None):
    """One head at a time with F.linear, an additive mask, F.softmax; stacked on dim 1."""
    maps = []
    for h in range(w_q.shape[0]):
        q, k = F.linear(query, w_q[h]), F.linear(key, w_k[h])  # (B, T, Dh), (B, S, Dh)
        scores = torch.einsum("btd,bsd->bts", q, k) * w_q.shape[1] ** -0.5
        if mask is not None:
            scores = scores + torch.zeros_like(scores).masked_fill(~mask, NEG_INF)
        maps.append(F.softmax(scores, dim=-1))
    return torch.stack(maps, dim=1)


def head_weights_packed(query, key, w_q, w_k, mask=None):
    """The per-head matrices packed into one, then the chapter's split written out."""
    H, Dh, D = w_q.shape
    B, T, S = query.shape[0], query.shape[1], key.shape[1]
    q = (query @ w_q.reshape(H * Dh, D).T).view(B, T, H, Dh).permute(0, 2, 1, 3)
    k = (key @ w_k.reshape(H * Dh, D).T).view(B, S, H, Dh).permute(0, 2, 1, 3)
    scores = torch.matmul(q / math.sqrt(Dh), k.mT)
    if mask is not None:
        scores = torch.where(mask.unsqueeze(1), scores, NEG_INF)
    return scores.softmax(dim=-1)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
    """The notebook's solution: each group expanded once per head of the group, chapter 4's
    attention."""
    B, T, D = x.shape
    Dh = D // n_heads
    per_group = n_heads // n_groups
    q = (x @ w_q.T).view(B, T, n_heads, Dh).transpose(1, 2)

    def shared(w):
        groups = (x @ w.T).view(B, T, n_groups, 1, Dh)
        copies = groups.expand(B, T, n_groups, per_group, Dh)
        return copies.reshape(B, T, n_heads, Dh).transpose(1, 2)

    if mask is not None and mask.dim() == 3:
        mask = mask.unsqueeze(1)
    heads, weights = sa.scaled_dot_product_attention(q, shared(w_k), shared(w_v), mask)
    return heads.transpose(1, 2).reshape(B, T, D) @ w_o.T, weights


def grouped_query_attention_loop(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
    """Head by head, each head slicing its group's rows of W^K and W^V."""
    B, T, D = x.shape
    Dh = D // n_heads
    if mask is not None:
        mask = (mask.unsqueeze(1) if mask.dim() == 3 else mask).expand(B, n_heads, T, T)
    outs, maps = [], []
    for h in range(n_heads):
        g = h // (n_heads // n_groups)
        q = F.linear(x, w_q[h * Dh:(h + 1) * Dh])
        k = F.linear(x, w_k[g * Dh:(g + 1) * Dh])
        v = F.linear(x, w_v[g * Dh:(g + 1) * Dh])
        scores = q @ k.mT / math.sqrt(Dh)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, h], NEG_INF)
        weights = scores.softmax(-1)
        outs.append(weights @ v)
        maps.append(weights)
    return F.linear(torch.cat(outs, dim=-1), w_o), torch.stack(maps, dim=1)


def grouped_query_attention_wide_weights(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
    """Repeat the groups' rows of W^K and W^V into H heads' worth, then multi-head attention
    written out with einsum."""
    B, T, D = x.shape
    Dh = D // n_heads

    def widened(w):
        return w.view(n_groups, Dh, D).repeat_interleave(n_heads // n_groups, dim=0)

    q = torch.einsum("btd,hed->bhte", x, w_q.view(n_heads, Dh, D))
    k = torch.einsum("btd,hed->bhte", x, widened(w_k))
    v = torch.einsum("btd,hed->bhte", x, widened(w_v))
    scores = torch.einsum("bhte,bhse->bhts", q, k) / Dh**0.5
    if mask is not None:
        scores = scores.masked_fill(~(mask[:, None] if mask.dim() == 3 else mask), NEG_INF)
    weights = scores.softmax(-1)
    out = torch.einsum("bhts,bhse->bthe", weights, v).reshape(B, T, D)
    return out @ w_o.T, weights


def train_two_markers(tokens, markers, targets, seed):
    """The notebook's solution: Adam, minibatches of 128, 200 steps, the model returned."""
    torch.manual_seed(seed)
    model = ch05.TwoMarkerModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(200):
        rows = torch.randint(0, len(targets), (128,))
        logits = model(tokens[rows], markers[rows])
        loss = F.cross_entropy(logits.flatten(0, 1), targets[rows].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def train_two_markers_epochs(tokens, markers, targets, seed):
    """Written differently: whole epochs over a shuffled order, AdamW, one loss per answer,
    the state_dict returned."""
    generator = torch.Generator().manual_seed(seed + 5)
    torch.manual_seed(seed + 5)
    model = ch05.TwoMarkerModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.0)
    for _ in range(8):
        for rows in torch.randperm(len(targets), generator=generator).split(100):
            logits = model(tokens[rows], markers[rows])
            loss = sum(F.cross_entropy(logits[:, i], targets[rows, i]) for i in range(2))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.state_dict()


def padded_multi_head_attention(query, key, value, lengths, w_q, w_k, w_v, w_o, n_heads):
    """The notebook's solution: the starter code with its four bugs fixed."""
    B, T, D = query.shape
    S = key.shape[1]
    Dh = D // n_heads

    def heads(x):
        return x.view(B, x.shape[1], n_heads, Dh).transpose(1, 2)

    q, k, v = heads(query @ w_q.T), heads(key @ w_k.T), heads(value @ w_v.T)
    scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)
    keep = torch.arange(S) < lengths[:, None]
    scores = scores.masked_fill(~keep[:, None, None, :], NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(B, T, D)
    return out @ w_o.T, weights


def padded_multi_head_attention_einsum(query, key, value, lengths, w_q, w_k, w_v, w_o,
                                       n_heads):
    """unflatten, einsum, an additive mask from the lengths, F.linear."""
    Dh = query.shape[-1] // n_heads
    q = F.linear(query, w_q).unflatten(-1, (n_heads, Dh))  # (B, T, H, Dh)
    k = F.linear(key, w_k).unflatten(-1, (n_heads, Dh))
    v = F.linear(value, w_v).unflatten(-1, (n_heads, Dh))
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(Dh)
    padding = torch.arange(key.shape[1])[None, :] >= lengths[:, None]  # (B, S)
    scores = scores + torch.zeros_like(padding, dtype=scores.dtype).masked_fill(
        padding, NEG_INF)[:, None, None, :]
    weights = F.softmax(scores, dim=-1)
    out = torch.einsum("bhts,bshd->bthd", weights, v).flatten(-2)
    return F.linear(out, w_o), weights


CORRECT = {
    "5.1": [ch05.head_weights, head_weights, head_weights_loop, head_weights_packed],
    "5.2": [ch05.grouped_query_attention, grouped_query_attention, grouped_query_attention_loop,
            grouped_query_attention_wide_weights],
    # The train task: the second correct training is tested below (its check report has a
    # time, which the common test of the report does not expect).
    "5.3": [ch05.train_two_markers, train_two_markers],
    "5.4": [ch05.padded_multi_head_attention, padded_multi_head_attention,
            padded_multi_head_attention_einsum],
    "5.5": [checks.get_task("5.5").reference],
    "5.6": [checks.get_task("5.6").reference],
    "5.7": [checks.get_task("5.7").reference],
}


# ---------------------------------------------------------------------------------------------
# Plausible wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------

# Task 5.1


def _projections(query, key, w_q, w_k):
    return query[:, None] @ w_q.mT, key[:, None] @ w_k.mT  # (B, H, T, Dh), (B, H, S, Dh)


def _softmaxed(scores, mask, *, per_head=True, invert=False, dim=-1):
    if mask is not None:
        m = mask[:, None] if per_head else mask
        scores = scores.masked_fill(m if invert else ~m, NEG_INF)
    return torch.softmax(scores, dim=dim)


def hw_scale_d_model(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_k)
    return _softmaxed(q @ k.mT / math.sqrt(query.shape[-1]), mask)


def hw_scale_all_heads(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_k)
    return _softmaxed(q @ k.mT / math.sqrt(w_q.shape[0] * w_q.shape[1]), mask)


def hw_no_scale(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_k)
    return _softmaxed(q @ k.mT, mask)


def hw_keys_with_w_q(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_q)
    return _softmaxed(q @ k.mT / math.sqrt(w_q.shape[1]), mask)


def hw_view_without_transpose(query, key, w_q, w_k, mask=None):
    H, Dh, D = w_q.shape
    B = query.shape[0]
    q = (query @ w_q.reshape(H * Dh, D).T).view(B, H, query.shape[1], Dh)
    k = (key @ w_k.reshape(H * Dh, D).T).view(B, H, key.shape[1], Dh)
    return _softmaxed(q @ k.mT / math.sqrt(Dh), mask)


def hw_mask_not_per_head(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_k)
    return _softmaxed(q @ k.mT / math.sqrt(w_q.shape[1]), mask, per_head=False)


def hw_torch_mask_convention(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_k)
    return _softmaxed(q @ k.mT / math.sqrt(w_q.shape[1]), mask, invert=True)


def hw_softmax_over_queries(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_k)
    return _softmaxed(q @ k.mT / math.sqrt(w_q.shape[1]), mask, dim=-2)


def hw_softmax_dim_1(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_k)
    return _softmaxed(q @ k.mT / math.sqrt(w_q.shape[1]), mask, dim=1)


def hw_returns_scores(query, key, w_q, w_k, mask=None):
    q, k = _projections(query, key, w_q, w_k)
    scores = q @ k.mT / math.sqrt(w_q.shape[1])
    return scores if mask is None else scores.masked_fill(~mask[:, None], NEG_INF)


def hw_averaged(query, key, w_q, w_k, mask=None):
    return head_weights(query, key, w_q, w_k, mask).mean(dim=1)


# Task 5.2


def _gqa_wrong(*, assign="in place", scale=None, values_with_keys=False, project_out=True,
               cut_without_transpose=False, merge_without_transpose=False, mask_per_head=True):
    def f(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
        B, T, D = x.shape
        Dh = D // n_heads

        def cut(w, n):
            if cut_without_transpose:
                return (x @ w.T).view(B, n, T, Dh)
            return (x @ w.T).view(B, T, n, Dh).transpose(1, 2)

        def share(t):
            if assign == "cyclic":
                return t.repeat(1, n_heads // n_groups, 1, 1)
            if assign == "first":
                return t[:, :1].expand(B, n_heads, T, Dh)
            return t.repeat_interleave(n_heads // n_groups, dim=1)

        q = cut(w_q, n_heads)
        k = share(cut(w_k, n_groups))
        v = share(cut(w_k if values_with_keys else w_v, n_groups))
        scores = q @ k.mT / (math.sqrt(Dh) if scale is None else scale(D, Dh, n_groups))
        if mask is not None:
            m = mask.unsqueeze(1) if mask.dim() == 3 and mask_per_head else mask
            scores = scores.masked_fill(~m, NEG_INF)
        weights = scores.softmax(-1)
        heads = weights @ v
        merged = (heads.reshape(B, T, D) if merge_without_transpose
                  else heads.transpose(1, 2).reshape(B, T, D))
        return (merged @ w_o.T if project_out else merged), weights

    return f


gqa_groups_repeated_as_a_block = _gqa_wrong(assign="cyclic")
gqa_first_group_only = _gqa_wrong(assign="first")
gqa_scale_d_model = _gqa_wrong(scale=lambda D, Dh, G: math.sqrt(D))
gqa_scale_key_width = _gqa_wrong(scale=lambda D, Dh, G: math.sqrt(G * Dh))
gqa_no_out_proj = _gqa_wrong(project_out=False)
gqa_values_with_keys = _gqa_wrong(values_with_keys=True)
gqa_view_without_transpose = _gqa_wrong(cut_without_transpose=True)
gqa_merge_without_transpose = _gqa_wrong(merge_without_transpose=True)
gqa_mask_not_per_head = _gqa_wrong(mask_per_head=False)


def gqa_torch_mask_convention(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
    return grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_groups,
                                   None if mask is None else ~mask)


def gqa_weights_per_group(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
    """Returns one map per group: the mean of its heads' weights."""
    out, weights = grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask)
    B, H, T, S = weights.shape
    return out, weights.view(B, n_groups, H // n_groups, T, S).mean(dim=2)


# Task 5.3: trainings that fall short


def _adam_loop(model, data, steps, **faults):
    tokens, markers, targets = data
    return short_training(model, (tokens, markers), targets, steps, lr=0.03, batch=128, **faults)


def two_untrained(tokens, markers, targets, seed):
    torch.manual_seed(seed)
    return ch05.TwoMarkerModel()


def two_trained_on_swapped_answers(tokens, markers, targets, seed):
    """Trained on other sequences whose answers come in the other order."""
    torch.manual_seed(seed)
    other = ch05.two_marker_data(seed + 1, len(targets), answer="swapped")
    return _adam_loop(ch05.TwoMarkerModel(), other, 150, seed=seed)


def two_answers_of_other_rows(tokens, markers, targets, seed):
    """Draws the minibatch's answers apart from its sequences."""
    torch.manual_seed(seed)
    return _adam_loop(ch05.TwoMarkerModel(), (tokens, markers, targets), 100, shuffled=True,
                      seed=seed)


def two_too_few_steps(tokens, markers, targets, seed):
    torch.manual_seed(seed)
    return _adam_loop(ch05.TwoMarkerModel(), (tokens, markers, targets), 20, seed=seed)


def two_returns_a_wrapped_state(tokens, markers, targets, seed):
    model = two_too_few_steps(tokens, markers, targets, seed)
    return {"weights": model.state_dict()}


# Task 5.4: the starter code with some of its bugs left, and other slips


def with_bugs(*bugs, **other):
    def f(*args):
        return _buggy(*args, frozenset(bugs), **other)

    f.__name__ = "bugs_" + "_".join(bugs) if bugs else "other_" + "_".join(other)
    return f


def _buggy(query, key, value, lengths, w_q, w_k, w_v, w_o, n_heads, bugs, *, inverted=False,
           scale=None, project_out=True):
    """The starter code with ``bugs`` left (the checks' own copy is forbidden to students)."""
    B, T, D = query.shape
    S = key.shape[1]
    Dh = D // n_heads

    def heads(x):
        if "split" in bugs:
            return x.view(B, n_heads, x.shape[1], Dh)
        return x.view(B, x.shape[1], n_heads, Dh).transpose(1, 2)

    q, k, v = heads(query @ w_q.T), heads(key @ w_k.T), heads(value @ w_v.T)
    if scale is None:
        scale = math.sqrt(D) if "scale" in bugs else math.sqrt(Dh)
    scores = q @ k.transpose(-2, -1) / scale
    keep = (torch.arange(S) <= lengths[:, None]) if "padding" in bugs else (
        torch.arange(S) < lengths[:, None])
    keep = keep[:, None, None, :]
    scores = scores.masked_fill(keep if inverted else ~keep, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    heads_out = weights @ v
    out = heads_out.reshape(B, T, D) if "merge" in bugs else heads_out.transpose(1, 2).reshape(
        B, T, D)
    return (out @ w_o.T if project_out else out), weights


debug_split_left = with_bugs("split")
debug_merge_left = with_bugs("merge")
debug_scale_left = with_bugs("scale")
debug_padding_left = with_bugs("padding")
debug_split_and_merge_left = with_bugs("split", "merge")
debug_untouched = with_bugs("split", "merge", "scale", "padding")
debug_mask_inverted = with_bugs(inverted=True)
debug_no_out_proj = with_bugs(project_out=False)


def debug_scale_no_sqrt(query, key, value, lengths, w_q, w_k, w_v, w_o, n_heads):
    return _buggy(query, key, value, lengths, w_q, w_k, w_v, w_o, n_heads, frozenset(),
                  scale=float(query.shape[-1] // n_heads))


def debug_merge_by_view(query, key, value, lengths, w_q, w_k, w_v, w_o, n_heads):
    B, T, D = query.shape
    Dh = D // n_heads

    def heads(x):
        return x.view(B, x.shape[1], n_heads, Dh).transpose(1, 2)

    q, k, v = heads(query @ w_q.T), heads(key @ w_k.T), heads(value @ w_v.T)
    keep = torch.arange(key.shape[1]) < lengths[:, None]
    scores = (q @ k.mT / math.sqrt(Dh)).masked_fill(~keep[:, None, None, :], NEG_INF)
    weights = scores.softmax(-1)
    return (weights @ v).transpose(1, 2).view(B, T, D) @ w_o.T, weights


def debug_returns_weights_first(*args):
    out, weights = padded_multi_head_attention(*args)
    return weights, out


RUNTIME_HINTS = {task_id: checks.get_task(task_id).error_hints.get("RuntimeError")
                 for task_id in TASK_IDS}

WRONG = {
    "5.1": [
        (hw_scale_d_model, ch05.HINT_HW_SCALE_D_MODEL),
        (hw_scale_all_heads, ch05.HINT_HW_SCALE_ALL_HEADS),
        (hw_no_scale, ch05.HINT_NO_SCALE),
        (hw_keys_with_w_q, ch05.HINT_HW_KEYS_WITH_WQ),
        (hw_view_without_transpose, ch05.HINT_HEADS_NO_TRANSPOSE),
        (hw_mask_not_per_head, ch05.HINT_MASK_NOT_PER_HEAD),
        (hw_torch_mask_convention, ch05.HINT_MASK_INVERTED),
        (hw_softmax_over_queries, ch05.HINT_SOFTMAX_DIM),
        (hw_softmax_dim_1, ch05.HINT_SOFTMAX_DIM_1),
        (hw_returns_scores, ch05.HINT_HW_NO_SOFTMAX),
        (hw_averaged, ch05.HINT_HW_AVERAGED),
    ],
    "5.2": [
        (gqa_groups_repeated_as_a_block, ch05.HINT_GQA_CYCLIC),
        (gqa_first_group_only, ch05.HINT_GQA_FIRST_GROUP),
        (gqa_scale_d_model, ch05.HINT_GQA_SCALE_D_MODEL),
        (gqa_scale_key_width, ch05.HINT_GQA_SCALE_KV),
        (gqa_no_out_proj, ch05.HINT_GQA_NO_OUT_PROJ),
        (gqa_values_with_keys, ch05.HINT_GQA_VALUES),
        (gqa_view_without_transpose, ch05.HINT_HEADS_NO_TRANSPOSE),
        (gqa_merge_without_transpose, ch05.HINT_GQA_MERGE),
        (gqa_mask_not_per_head, ch05.HINT_MASK_NOT_PER_HEAD),
        (gqa_torch_mask_convention, ch05.HINT_MASK_INVERTED),
        (gqa_weights_per_group, ch05.HINT_GQA_WEIGHTS_PER_GROUP),
    ],
    "5.3": [
        (two_untrained, ch05.HINT_TWO_UNTRAINED),
        (two_trained_on_swapped_answers, ch05.HINT_TWO_TRAIN),
        (two_answers_of_other_rows, ch05.HINT_TWO_UNTRAINED),
        (two_too_few_steps, ch05.HINT_TWO_PARTIAL),
        (two_returns_a_wrapped_state, "the state_dict lacks"),
    ],
    "5.4": [
        (debug_split_left, ch05.HINT_DEBUG_SPLIT),
        (debug_merge_left, ch05.HINT_DEBUG_MERGE),
        (debug_scale_left, ch05.HINT_DEBUG_SCALE),
        (debug_padding_left, ch05.HINT_DEBUG_PADDING),
        (debug_split_and_merge_left, ch05.debug_hint(frozenset({"split", "merge"}))),
        (debug_untouched, ch05.PREFIX_DEBUG_SEVERAL),
        (debug_mask_inverted, ch05.HINT_DEBUG_INVERTED),
        (debug_scale_no_sqrt, ch05.HINT_DEBUG_SCALE_NO_SQRT),
        (debug_no_out_proj, ch05.HINT_DEBUG_NO_OUT_PROJ),
        (debug_merge_by_view, RUNTIME_HINTS["5.4"]),
        (debug_returns_weights_first, ch05.HINT_PAIR_ORDER),
    ],
    "5.5": [(lambda: 8 * 16640, ch05.HINT_Q_PARAMS_PER_HEAD),
            (lambda: 16384, ch05.HINT_Q_PARAMS_NO_BIAS),
            (lambda: 12480, ch05.HINT_Q_PARAMS_NO_OUT), (lambda: 4 * 64 * 64 // 8,
                                                        ch05.HINT_Q_PARAMS),
            (lambda: 16640.0, "a whole number")],
    "5.6": [(lambda: 6144, ch05.HINT_Q_CACHE_HEADS), (lambda: 768, ch05.HINT_Q_CACHE_KEYS_ONLY),
            (lambda: 384, ch05.HINT_Q_CACHE_NUMBERS),
            (lambda: 2048, ch05.HINT_Q_CACHE_GROUP_SIZE), (lambda: 3072, ch05.HINT_Q_CACHE)],
    "5.7": [(lambda: 100, ch05.HINT_Q_MAPS_ONE), (lambda: 40, ch05.HINT_Q_MAPS_ROWS),
            (lambda: 4 * 10 * 8, ch05.HINT_Q_MAPS)],
}


def stub(*args):
    raise NotImplementedError("Task 5.1: write head_weights")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="05_multihead",
    tasks={"5.1": ("head_weights", 3, 7), "5.2": ("grouped_query_attention", 4, 10),
           "5.3": ("train_two_markers", 3, 6), "5.4": ("padded_multi_head_attention", 3, 6),
           "5.5": ("attention_parameters", 1, 1), "5.6": ("kv_cache_bytes", 1, 1),
           "5.7": ("attention_weights_returned", 1, 1)},
    hints=ch05,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=1,
    min_hidden=1,
    public_points=(1, 4),
    forbidden=(),
    package="coursepkg.lm",  # the train task runs coursepkg.multihead in TwoMarkerModel
    not_finite_hint=ch05.HINT_NOT_FINITE,
    failure_reports=(
        ("5.1", hw_scale_d_model, "Task 5.1 head_weights: 0/3 points",
         (ch05.HINT_HW_SCALE_D_MODEL,)),
        ("5.2", gqa_groups_repeated_as_a_block, "Task 5.2 grouped_query_attention: 2/4 points",
         ("  FAIL  [0/1] 4 query heads in 2 groups, no mask; D = 8 (Dh = 2): "
          + ch05.HINT_GQA_CYCLIC,)),
        ("5.4", debug_untouched, "Task 5.4 padded_multi_head_attention: 0/3 points",
         (ch05.PREFIX_DEBUG_SEVERAL,)),
    ),
    typed=("5.1", "5.2", "5.4"),
    seeded=("5.1", "5.2", "5.3", "5.4"),
    scalar_inputs=("5.5", "5.6", "5.7"),
    exact_results=("5.3", "5.5", "5.6", "5.7"),
    more_hints=frozenset(ch05.debug_hint(bugs) for bugs in ch05.BUG_SETS),
    crashes_excused=True,  # a (B, T, S) mask without a head axis crashes where B != H
    wrong_types=(
        ("5.1", lambda *a: [head_weights(*a)], "expected the weights as a torch.Tensor"),
        ("5.2", lambda *a: grouped_query_attention(*a)[0],
         "expected a pair (out, weights), got Tensor"),
        ("5.3", lambda *a: [1.0], "expected the trained model or its state_dict(), got list"),
        ("5.4", lambda *a: padded_multi_head_attention(*a)[1],
         "expected a pair (out, weights), got Tensor"),
        ("5.5", lambda: "16640", "a whole number (an int), got a str"),
    ),
    forged={
        "5.2": lambda good: forged_pairs(good, [2, 3, 5], 80),
        "5.4": lambda good: forged_pairs(good, [2, 3, 5], 64),
    },
    forbidden_calls={  # in every task but the questions
        F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
    },
    allowed_calls=(torch.softmax, torch.Tensor.masked_fill, torch.matmul, F.linear,
                   torch.Tensor.transpose, torch.einsum),
)


# ---------------------------------------------------------------------------------------------
# The registry, the kinds and the cases
# ---------------------------------------------------------------------------------------------


def test_the_kinds_and_their_shares():
    """No task asks for a function the page shows; formulas are at most a third of the
    points, and every other kind the design asks for is there."""
    points = checks.points_by_kind("05_multihead")
    assert points == {"formula": 7.0, "extension": 10.0, "train": 6.0, "debug": 6.0,
                      "question": 3.0}
    assert points["formula"] <= sum(points.values()) / 3
    shown = {"split_heads", "merge_heads", "multi_head_attention", "forward",
             "scaled_dot_product_attention"}
    assert not shown & {task.func_name for task in checks.tasks_for("05_multihead")}


def test_the_cases_make_the_usual_mistakes_show():
    heads = [case.args for case in checks.get_task("5.1").public_cases]
    assert any(a["mask"] is not None and a["B"] == a["H"] for a in heads)  # runs unsqueezed
    assert all(len({a["D"], a["Dh"], a["H"] * a["Dh"]}) == 3 for a in heads)
    assert any(a["T"] != a["S"] for a in heads)
    grouped = [case.args for case in checks.get_task("5.2").public_cases]
    assert any(1 < a["G"] < a["H"] for a in grouped)
    assert {1, 2} <= {a["G"] for a in grouped} and any(a["G"] == a["H"] for a in grouped)
    assert any(a["mask"] is not None and a["B"] == a["H"] and len(a["mask"]) == a["B"]
               for a in grouped)
    padded = all_cases(checks.get_task("5.4"))
    assert all(min(c.args["lengths"]) < c.args["S"] for c in padded)  # "<=" shows everywhere
    assert all(min(c.args["lengths"]) >= 1 for c in padded)
    assert any(c.args["T"] != c.args["S"] for c in padded if not c.hidden)


# ---------------------------------------------------------------------------------------------
# Task 5.1 and 5.2: what the references compute
# ---------------------------------------------------------------------------------------------


def test_head_weights_are_the_package_s_heads():
    """Packed into in_proj_weight, the per-head matrices give the package's weights."""
    task = checks.get_task("5.1")
    for case in all_cases(task):
        args = task.build_args({**case.args, "dtype": "float64"})
        query, key, w_q, w_k = args[:4]
        mask = args[4] if len(args) > 4 else None
        H, Dh, D = w_q.shape
        if H * Dh != D:
            continue
        packed = torch.cat([w_q.reshape(D, D), w_k.reshape(D, D), torch.eye(D, dtype=w_q.dtype)])
        _, expected = mh.multi_head_attention(query, key, key, packed, None,
                                              torch.eye(D, dtype=w_q.dtype), None, H, mask)
        torch.testing.assert_close(ch05.head_weights(*args), expected)


@pytest.mark.parametrize("mask_kind", [None, "causal", "padding", "sequences"])
def test_grouped_query_attention_with_as_many_groups_as_heads_is_multi_head(mask_kind):
    generator = torch.Generator().manual_seed(7)
    B, T, D, H = 3, 6, 12, 4
    x = torch.randn(B, T, D, generator=generator, dtype=torch.float64)
    w_q, w_k, w_v, w_o = (torch.randn(D, D, generator=generator, dtype=torch.float64)
                          for _ in range(4))
    mask = {None: None, "causal": sa.causal_mask(T),
            "padding": (torch.arange(T) < torch.tensor([6, 3, 1])[:, None])[:, None, None, :],
            "sequences": torch.rand(B, T, T, generator=generator) < 0.6}[mask_kind]
    if mask_kind == "sequences":
        mask[..., 0] = True
    out, weights = ch05.grouped_query_attention(x, w_q, w_k, w_v, w_o, H, H, mask)
    out_mha, weights_mha = mh.multi_head_attention(
        x, x, x, torch.cat([w_q, w_k, w_v]), None, w_o, None, H, mask)
    assert (out - out_mha).abs().max() < 1e-10
    assert (weights - weights_mha).abs().max() < 1e-10


def test_one_group_is_multi_query_attention():
    """G = 1: every head attends with the same keys and values, its own queries."""
    generator = torch.Generator().manual_seed(8)
    B, T, D, H = 2, 5, 12, 3
    Dh = D // H
    x = torch.randn(B, T, D, generator=generator, dtype=torch.float64)
    w_q, w_o = (torch.randn(D, D, generator=generator, dtype=torch.float64) for _ in range(2))
    w_k, w_v = (torch.randn(Dh, D, generator=generator, dtype=torch.float64) for _ in range(2))
    out, weights = ch05.grouped_query_attention(x, w_q, w_k, w_v, w_o, H, 1)
    k, v = x @ w_k.T, x @ w_v.T  # (B, T, Dh): one key head, one value head
    heads = []
    for h in range(H):
        q = x @ w_q[h * Dh:(h + 1) * Dh].T
        a = torch.softmax(q @ k.mT / math.sqrt(Dh), dim=-1)
        torch.testing.assert_close(weights[:, h], a)
        heads.append(a @ v)
    torch.testing.assert_close(out, torch.cat(heads, dim=-1) @ w_o.T)


def test_the_groups_serve_consecutive_heads():
    """Head h reads group h // (H / G): with H = 4, G = 2, heads 0 and 1 give the same weights
    when their queries are the same, heads 1 and 2 do not."""
    generator = torch.Generator().manual_seed(9)
    B, T, D, H, G = 1, 5, 8, 4, 2
    Dh = D // H
    x = torch.randn(B, T, D, generator=generator, dtype=torch.float64)
    block = torch.randn(Dh, D, generator=generator, dtype=torch.float64)
    w_q = block.repeat(H, 1)  # every head the same queries
    w_k, w_v = (torch.randn(G * Dh, D, generator=generator, dtype=torch.float64)
                for _ in range(2))
    _, weights = ch05.grouped_query_attention(x, w_q, w_k, w_v, torch.eye(D).double(), H, G)
    torch.testing.assert_close(weights[:, 0], weights[:, 1])
    torch.testing.assert_close(weights[:, 2], weights[:, 3])
    assert not torch.allclose(weights[:, 1], weights[:, 2])


# ---------------------------------------------------------------------------------------------
# Task 5.4: the debug task
# ---------------------------------------------------------------------------------------------


def test_every_combination_of_bugs_is_named():
    task = checks.get_task("5.4")
    case = task.cases[0]
    for bugs in ch05.BUG_SETS:
        func = with_bugs(*sorted(bugs))
        result = checks.grade_output(task, case, checks.student_output(task, case, func))
        assert result.status == "failed"
        assert result.message.startswith(ch05.debug_hint(bugs)), (sorted(bugs), result.message)
    assert len(ch05.BUG_SETS) == 15


def test_the_untouched_starter_code_fails_every_case():
    result = run_task("5.4", debug_untouched, hidden=True)
    assert result.points == 0 and result.status == "failed"
    assert {case.status for case in result.cases} == {"failed"}


def test_the_starter_code_is_the_exercise_s():
    """The checks' copy of the bugs is the code the exercise shows, and pasting the page's
    functions cannot fix it: the page has no layer with separate matrices and lengths."""
    nb = nbformat.read(ROOT / "exercises" / "05_multihead.ipynb", as_version=4)
    source = next(cell.source for cell in nb.cells if cell.cell_type == "code"
                  and "def padded_multi_head_attention(" in cell.source)
    namespace = {"math": math, "torch": torch}
    exec(source, namespace)  # noqa: S102 - the course's own notebook
    starter = namespace["padded_multi_head_attention"]
    task = checks.get_task("5.4")
    every_bug = frozenset(ch05.BUG_SETS[-1])
    for case in all_cases(task):
        args = task.build_args(case.args)
        for got, want in zip(starter(*args), ch05.padded_with_bugs(*args, every_bug), strict=True):
            torch.testing.assert_close(got, want, equal_nan=True)


def test_the_fixed_layer_is_the_package_s_with_a_padding_mask():
    task = checks.get_task("5.4")
    for case in all_cases(task):
        query, key, value, lengths, w_q, w_k, w_v, w_o, H = task.build_args(
            {**case.args, "dtype": "float64"})
        keep = (torch.arange(key.shape[1]) < lengths[:, None])[:, None, None, :]
        out, weights = ch05.padded_multi_head_attention(query, key, value, lengths,
                                                        w_q, w_k, w_v, w_o, H)
        expected = mh.multi_head_attention(query, key, value, torch.cat([w_q, w_k, w_v]), None,
                                           w_o, None, H, keep)
        torch.testing.assert_close(out, expected[0])
        torch.testing.assert_close(weights, expected[1])
        assert (weights.masked_select(~keep) == 0).all()


# ---------------------------------------------------------------------------------------------
# The forbidden calls
# ---------------------------------------------------------------------------------------------


def test_the_forbidden_calls_of_the_attention_tasks():
    from coursepkg.checks.forbidden import Tripwire

    for task_id in ("5.1", "5.2", "5.4"):
        wire = Tripwire(checks.get_task(task_id))
        assert wire.forbidden_callable(mh.multi_head_attention) == "coursepkg.multihead"
        assert wire.forbidden_callable(mh.split_heads) == "coursepkg.multihead"
        assert wire.forbidden_callable(torch.nn.MultiheadAttention.forward) is not None
    first = Tripwire(checks.get_task("5.1"))
    assert first.forbidden_callable(sa.scaled_dot_product_attention) is not None
    for task_id in ("5.2", "5.4"):  # chapter 4's attention: the previous exercise, allowed
        wire = Tripwire(checks.get_task(task_id))
        assert wire.forbidden_callable(sa.scaled_dot_product_attention) is None
    train = Tripwire(checks.get_task("5.3"))
    assert train.forbidden_callable(mh.MultiHeadAttention.forward) is None  # the model runs it
    assert train.forbidden_callable(ch05.train_two_markers) is not None


# ---------------------------------------------------------------------------------------------
# The train task
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reference_reaches_the_target_on_three_seeds_within_half_the_budget(seed):
    tokens, markers, targets = ch05.two_marker_data(seed, ch05.TWO_TRAIN)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        started = time.process_time()
        model = ch05.train_two_markers(tokens, markers, targets, seed)
        seconds = time.process_time() - started
    finally:
        torch.set_num_threads(threads)
    held_out = ch05.two_marker_data(seed + 1000, ch05.TWO_HELD_OUT)
    assert held_out_accuracy(ch05.TwoMarkerModel, model.state_dict(), *held_out) >= \
        ch05.TWO_BANDS[0][0]
    assert seconds < ch05.TWO_TIME_LIMIT / 2, seconds  # CPU time: the machine may be busy


def test_one_head_with_the_same_loop_falls_short():
    """The task needs two look-ups at once: one head, trained by the reference's loop on the
    same data for the same steps, does not reach the target (on three seeds)."""
    for seed in (1, 2, 3):
        tokens, markers, targets = ch05.two_marker_data(seed, ch05.TWO_TRAIN)
        torch.manual_seed(seed)
        model = ch05.TwoMarkerModel(n_heads=1)
        _adam_loop(model, (tokens, markers, targets), 150, seed=seed)
        held_out = ch05.two_marker_data(seed + 1000, ch05.TWO_HELD_OUT)
        accuracy = held_out_accuracy(ch05.TwoMarkerModel, model.state_dict(), *held_out)
        assert accuracy < ch05.TWO_BANDS[0][0], seed


@pytest.mark.parametrize("func", [train_two_markers, train_two_markers_epochs])
def test_other_correct_trainings_get_full_marks(func):
    result = run_task("5.3", func, hidden=True)
    assert result.status == "passed" and result.points == result.max_points == 6, result


@pytest.mark.parametrize(("func", "most"), [
    (two_untrained, 0.0), (two_trained_on_swapped_answers, 0.0),
    (two_answers_of_other_rows, 0.0), (two_too_few_steps, 4.5)])
def test_short_trainings_get_a_low_band_or_nothing(func, most):
    result = run_task("5.3", func, hidden=True)
    assert result.points <= most, (func.__name__, result)
    if most:
        assert 0 < result.points and {c.status for c in result.cases} == {"partial"}


def test_the_held_out_seed_never_reaches_the_student_and_the_sets_differ():
    task = checks.get_task("5.3")
    for case in all_cases(task):
        assert "_heldout" in case.args and "_heldout" not in student_args(case.args)
        tokens, markers, targets, seed = task.build_args(student_args(case.args))
        held_tokens, _, _ = task.expected(case.args)
        assert seed == case.args["seed"] and not torch.equal(tokens[:5], held_tokens[:5])
        assert tokens.shape == markers.shape == (ch05.TWO_TRAIN, ch05.TWO_T)


def test_the_two_marker_data_is_what_the_task_says():
    tokens, markers, targets = ch05.two_marker_data(5, 300)
    assert ((markers == 1).sum(dim=1) == 1).all() and ((markers == 2).sum(dim=1) == 1).all()
    assert ((markers == 0).sum(dim=1) == ch05.TWO_T - 2).all()
    assert (markers[:, -1] == 0).all()  # never the last position
    for i in (1, 2):
        where = (markers == i).int().argmax(dim=1)
        assert torch.equal(tokens.gather(1, where[:, None])[:, 0], targets[:, i - 1])
    _, _, swapped = ch05.two_marker_data(5, 300, answer="swapped")
    assert torch.equal(swapped, targets.flip(1))
    shapes = {name: tuple(t.shape) for name, t in ch05.TwoMarkerModel().state_dict().items()}
    assert shapes == ch05.TWO_SHAPES


def test_the_model_reads_content_not_positions():
    """No positions: permuting the positions before the last leaves the logits."""
    torch.manual_seed(0)
    model = ch05.TwoMarkerModel().eval()
    tokens, markers, _ = ch05.two_marker_data(3, 4)
    order = torch.cat([torch.randperm(ch05.TWO_T - 1), torch.tensor([ch05.TWO_T - 1])])
    with torch.no_grad():
        torch.testing.assert_close(model(tokens[:, order], markers[:, order]),
                                   model(tokens, markers))


# ---------------------------------------------------------------------------------------------
# The questions
# ---------------------------------------------------------------------------------------------


def test_the_questions_keys_follow_the_package_and_other_answers_are_right_too():
    assert ch05.attention_parameters_key() == 4 * 64 * 64 + 4 * 64
    assert ch05.kv_cache_bytes_key() == 2 * 3 * 64 * 4
    assert ch05.attention_maps_key() == 4 * 10 * 10
    for task_id, answer in (("5.5", 16640), ("5.6", 1536), ("5.7", 400)):
        assert run_task(task_id, lambda answer=answer: answer).status == "passed"
    for form in (torch.tensor(400), 400.0):  # the answer is an int: the message says so
        result = run_task("5.7", lambda form=form: form)
        assert result.status == "failed" and "a whole number (an int)" in result.cases[0].message


def test_the_parameters_do_not_depend_on_the_number_of_heads():
    counts = {sum(p.numel() for p in mh.MultiHeadAttention(64, h).parameters())
              for h in (1, 2, 8, 64)}
    assert counts == {ch05.attention_parameters_key()}


# ---------------------------------------------------------------------------------------------
# A student who pastes the book: at most the formula tasks' share
# ---------------------------------------------------------------------------------------------


def paste_head_weights(query, key, w_q, w_k, mask=None):
    """The page's layer on the per-head matrices packed: its weights."""
    H, Dh, D = w_q.shape
    eye = torch.eye(H * Dh, D, dtype=query.dtype)
    packed = torch.cat([w_q.reshape(H * Dh, D), w_k.reshape(H * Dh, D), eye])
    return mh.multi_head_attention(query, key, key, packed, None, torch.eye(D, H * Dh,
                                   dtype=query.dtype), None, H, mask)[1]


def paste_grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
    """The page's multi_head_attention (it has no groups: with G < H the weights do not fit)."""
    return mh.multi_head_attention(x, x, x, torch.cat([w_q, w_k, w_v]), None, w_o, None,
                                   n_heads, mask)


def paste_train(tokens, markers, targets, seed):
    """The page's training loop, pasted: its own marker task and its own model (the page's
    MarkerReader: token, position and marker vectors, a layer of two heads, a read-out of two
    letters at every position), full batch, 300 steps of Adam."""
    from torch import nn

    V, T, D = 16, 8, 16

    class MarkerReader(nn.Module):
        def __init__(self):
            super().__init__()
            self.token = nn.Embedding(V, D)
            self.position = nn.Embedding(T, D)
            self.marker = nn.Parameter(torch.randn(D))
            self.layers = nn.ModuleList([mh.MultiHeadAttention(D, 2)])
            self.readout = nn.Linear(D, 2 * V)

        def forward(self, tokens, marked):
            B = tokens.shape[0]
            is_marked = (torch.arange(T) == marked[:, None])[..., None]
            h = self.token(tokens) + self.position.weight + is_marked * self.marker
            h = h + self.layers[0](h, h, h)[0]
            return self.readout(h).view(B, T, 2, V)

    torch.manual_seed(seed)
    model = MarkerReader()
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-2)
    marked = torch.randint(0, T - 1, (len(tokens),))
    previous = tokens.roll(1, dims=1)
    at_marker = tokens[torch.arange(len(tokens)), marked, None].expand(-1, T)
    page_targets = torch.stack([previous, at_marker], dim=-1)
    for _ in range(30):
        logits = model(tokens, marked)
        loss = F.cross_entropy(logits.reshape(-1, V), page_targets.reshape(-1))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return model


def paste_padded(query, key, value, lengths, w_q, w_k, w_v, w_o, n_heads):
    keep = (torch.arange(key.shape[1]) < lengths[:, None])[:, None, None, :]
    return mh.multi_head_attention(query, key, value, torch.cat([w_q, w_k, w_v]), None, w_o,
                                   None, n_heads, keep)


def paste_parameters():
    """The page's table counts the parameters of MultiHeadAttention(512, H): the same number,
    read for D = 512, not for the question's D = 64."""
    return sum(p.numel() for p in mh.MultiHeadAttention(512, 8).parameters())


def test_a_book_paster_gets_at_most_the_formula_share():
    """Each function delegating to the code the chapter page shows, as far as that goes: the
    grader gives at most the formula tasks' share (here: nothing; the package's multi-head code
    is forbidden in the attention tasks, and the page's training loop trains another model)."""
    pasted = {"5.1": paste_head_weights, "5.2": paste_grouped_query_attention,
              "5.3": paste_train, "5.4": paste_padded, "5.5": paste_parameters,
              "5.6": lambda: 2 * 12 * 64 * 4, "5.7": lambda: 10 * 10}
    earned = sum(run_task(task_id, func, hidden=True).points for task_id, func in pasted.items())
    points = checks.points_by_kind("05_multihead")
    assert earned <= points["formula"]
    assert run_task("5.2", paste_grouped_query_attention).cases[0].message.startswith(
        "forbidden: you called coursepkg.multihead")


def test_the_paster_s_attention_would_be_right_without_the_tripwire_where_it_can_be():
    """So the paster's zeros come from the tripwire, not from a wrong paste: the page's layer is
    right for 5.1 and 5.4, and for 5.2 where there is a group per head."""
    for task_id, func in (("5.1", paste_head_weights), ("5.4", paste_padded)):
        result = checks.run_task(task_id, func, tripwire=False)
        assert result.status == "passed", (task_id, result)
    result = checks.run_task("5.2", paste_grouped_query_attention, tripwire=False)
    passed = {case.name for case in result.cases if case.status == "passed"}
    assert passed == {"multi-head (G = H = 2), a (B, T, T) mask per sequence with B = H"}


# ---------------------------------------------------------------------------------------------
# Reports and details
# ---------------------------------------------------------------------------------------------


def test_public_failures_show_the_specifics():
    result = run_task("5.1", hw_scale_d_model)
    detail = result.cases[0].message.removeprefix(ch05.HINT_HW_SCALE_D_MODEL).strip()
    assert detail.startswith("weights[") and "expected" in detail and "values differ)." in detail
    result = run_task("5.1", hw_averaged)
    assert result.cases[0].message.endswith("Expected weights of shape (2, 3, 5, 4), got "
                                            "(2, 5, 4).")
    result = run_task("5.2", gqa_weights_per_group)
    assert result.cases[0].message.endswith("Expected weights of shape (2, 4, 5, 5), got "
                                            "(2, 2, 5, 5).")
    result = run_task("5.4", debug_returns_weights_first)
    assert result.cases[0].message.startswith(ch05.HINT_PAIR_ORDER)


def test_check_a_function_that_raises(capsys):
    out = check_output(capsys, "5.4", debug_merge_by_view)
    assert "ERROR [0/1]" in out and "raised RuntimeError: view size is not compatible" in out
    assert "use .reshape" in out


def test_check_prints_the_train_task_s_time_and_budget(capsys):
    out = check_output(capsys, "5.3", train_two_markers)
    assert out.startswith("Task 5.3 train_two_markers: 3/3 points\n")
    assert " s of 10 s budget)" in out


def test_the_second_correct_answers_print_full_marks(capsys):
    for task_id, func, answer in (("5.5", "attention_parameters", 16640),
                                  ("5.6", "kv_cache_bytes", 1536)):
        out = check_output(capsys, task_id, lambda answer=answer: answer)
        assert out == f"Task {task_id} {func}: 1/1 points\n  PASS  [1/1] the answer\n"


def test_nan_survives_the_trip_through_json():
    """The mask read with torch's convention leaves rows with no key (NaN weights): they go
    through the worker's JSON and still get the hint naming the convention."""
    task = checks.get_task("5.2")
    case = task.cases[1]  # the causal mask: its last row is all False once inverted
    plain = checks.student_output(task, case, gqa_torch_mask_convention)
    assert any(math.isnan(value) for value in plain[1]["data"])
    result = checks.grade_output(task, case, json.loads(json.dumps(plain)))
    assert result.status == "failed"
    assert result.message.startswith(ch05.HINT_MASK_INVERTED)
