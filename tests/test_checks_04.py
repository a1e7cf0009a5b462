"""The checks of chapter 4 (coursepkg.checks.ch04_self_attention): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do: the local mask's window
edge, padding rows and batch; the debug task's every combination of bugs; the train task's
bands (the reference on three seeds, an untrained model, one trained on another task); the
questions' keys.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from checks_support import (
    Chapter,
    all_cases,
    check_output,
    forged_pairs,
    hidden_cases,
    run_task,
    short_training,
)

from coursepkg import checks
from coursepkg import self_attention as sa
from coursepkg.checks import ch04_self_attention as ch04
from coursepkg.checks.core import student_args
from coursepkg.checks.tensors import held_out_accuracy

TASK_IDS = ("4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7")
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


def local_mask(keep, window):
    """The notebook's solution."""
    T = keep.shape[1]
    t = torch.arange(T)[:, None]
    s = torch.arange(T)[None, :]
    inside = (s <= t) & (s > t - window)
    real = inside & keep[:, None, :] & keep[:, :, None]
    return real | (torch.eye(T, dtype=torch.bool) & ~keep[:, :, None])


def local_mask_loops(keep, window):
    """Entry by entry, from lists."""
    B, T = keep.shape
    rows = []
    for b in range(B):
        rows.append([[bool(keep[b, s]) and t - window < s <= t if keep[b, t] else s == t
                      for s in range(T)] for t in range(T)])
    return torch.tensor(rows, dtype=torch.bool)


def local_mask_triangles(keep, window):
    """Two triangles of ones, torch.where for the padding queries."""
    B, T = keep.shape
    ones = torch.ones(T, T, dtype=torch.bool)
    band = ones.tril() & ~ones.tril(-window)
    allowed = band.expand(B, T, T) & keep.unsqueeze(1)
    alone = torch.eye(T, dtype=torch.bool).expand(B, T, T)
    return torch.where(keep.unsqueeze(-1), allowed, alone)


def causal_self_attention(x, w_q, w_k, w_v):
    """The notebook's solution: the starter code with its four bugs fixed."""
    def allowed(T):
        return torch.ones(T, T, dtype=torch.bool).tril()

    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed(x.shape[1]), NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def causal_self_attention_einsum(x, w_q, w_k, w_v):
    """F.linear, einsum, an additive mask of -inf above the diagonal."""
    T = x.shape[1]
    q, k, v = F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)
    scores = torch.einsum("btd,bsd->bts", q, k) * w_k.shape[0] ** -0.5
    future = torch.full((T, T), NEG_INF, dtype=x.dtype).triu(1)
    weights = F.softmax(scores + future, dim=-1)
    return torch.einsum("bts,bsv->btv", weights, v), weights


def train_recall(tokens, targets, seed):
    """The notebook's solution: Adam, minibatches of 64, 200 steps, the state_dict returned."""
    torch.manual_seed(seed)
    model = ch04.RecallModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(200):
        rows = torch.randint(0, len(targets), (64,))
        loss = F.cross_entropy(model(tokens[rows]), targets[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.state_dict()


def train_recall_epochs(tokens, targets, seed):
    """Written differently: whole epochs over a shuffled order, AdamW, the module returned."""
    generator = torch.Generator().manual_seed(seed + 7)
    torch.manual_seed(seed + 7)
    model = ch04.RecallModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.005, weight_decay=0.0)
    for _ in range(6):
        for rows in torch.randperm(len(targets), generator=generator).split(100):
            optimizer.zero_grad()
            F.cross_entropy(model(tokens[rows]), targets[rows]).backward()
            optimizer.step()
    return model


CORRECT = {
    "4.1": [ch04.qkv_scores, qkv_scores, qkv_scores_linear_einsum, qkv_scores_scaled_queries],
    "4.2": [ch04.local_mask, local_mask, local_mask_loops, local_mask_triangles],
    "4.3": [ch04.causal_self_attention, causal_self_attention, causal_self_attention_einsum],
    # The train task and the questions: the second correct implementations are tested below
    # (their check report has a time, or no hidden tests' line, which the common test of the
    # report does not expect).
    "4.4": [ch04.train_recall, train_recall],
    "4.5": [checks.get_task("4.5").reference],
    "4.6": [checks.get_task("4.6").reference],
    "4.7": [checks.get_task("4.7").reference],
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




# Task 4.2: masks with one mistake (keep (B, T), window W)


def _band(T, low, high):
    t = torch.arange(T)[:, None]
    s = torch.arange(T)[None, :]
    return (t - s >= low) & (t - s <= high)


def _padded(band, keep):
    T = keep.shape[1]
    return (band & keep[:, None, :] & keep[:, :, None]) | (
        torch.eye(T, dtype=torch.bool) & ~keep[:, :, None])


def local_one_too_wide(keep, window):
    return _padded(_band(keep.shape[1], 0, window), keep)


def local_one_too_narrow(keep, window):
    return _padded(_band(keep.shape[1], 0, window - 2), keep)


def local_centred(keep, window):
    return _padded(_band(keep.shape[1], 1 - window, window - 1), keep)


def local_into_the_future(keep, window):
    return _padded(_band(keep.shape[1], 1 - window, 0), keep)


def local_no_window(keep, window):
    return _padded(torch.ones(keep.shape[1], keep.shape[1], dtype=torch.bool).tril(), keep)


def local_padding_ignored(keep, window):
    B, T = keep.shape
    return _band(T, 0, window - 1).expand(B, T, T).clone()


def local_padding_on_queries(keep, window):
    return _band(keep.shape[1], 0, window - 1) & keep[:, :, None]


def local_empty_padding_rows(keep, window):
    return _band(keep.shape[1], 0, window - 1) & keep[:, None, :] & keep[:, :, None]


def local_padding_rows_see_their_window(keep, window):
    return _band(keep.shape[1], 0, window - 1) & keep[:, None, :]


def local_first_sequence_for_all(keep, window):
    return _padded(_band(keep.shape[1], 0, window - 1), keep[:1].expand_as(keep))


def local_lengths_only(keep, window):
    T = keep.shape[1]
    right = torch.arange(T)[None, :] < keep.sum(dim=1, keepdim=True)
    return _padded(_band(T, 0, window - 1), right)


def local_inverted(keep, window):
    return ~local_mask(keep, window)


def local_as_floats(keep, window):
    return local_mask(keep, window).float()


def local_additive(keep, window):
    return torch.zeros(keep.shape[0], keep.shape[1], keep.shape[1]).masked_fill(
        ~local_mask(keep, window), NEG_INF)


def local_without_batch(keep, window):
    return _band(keep.shape[1], 0, window - 1)


# Task 4.3: the starter code with some of its bugs left, and other slips


def _buggy(x, w_q, w_k, w_v, bugs, *, diagonal=None, inverted=False, scale=None):
    """The starter code with ``bugs`` left (the checks' own copy is forbidden to students)."""
    T = x.shape[1]
    q, k = x @ w_q.T, x @ w_k.T
    v = x @ (w_k if "values" in bugs else w_v).T
    if scale is None:
        scale = q.shape[-1] if "scale" in bugs else math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) / scale
    if diagonal is None:
        diagonal = 1 if "leak" in bugs else 0
    allowed = torch.ones(T, T, dtype=torch.bool).tril(diagonal)
    scores = scores.masked_fill(allowed if inverted else ~allowed, NEG_INF)
    weights = torch.softmax(scores, dim=1 if "softmax" in bugs else -1)
    return weights @ v, weights


def with_bugs(*bugs, **other):
    def f(x, w_q, w_k, w_v):
        return _buggy(x, w_q, w_k, w_v, bugs, **other)

    f.__name__ = "bugs_" + "_".join(bugs) if bugs else "other_" + "_".join(other)
    return f


debug_values_by_w_k = with_bugs("values")
debug_divides_by_d_k = with_bugs("scale")
debug_leaks_the_next_token = with_bugs("leak")
debug_softmax_over_the_queries = with_bugs("softmax")
debug_scale_and_leak = with_bugs("scale", "leak")
debug_untouched = with_bugs("values", "scale", "leak", "softmax")
debug_hides_the_diagonal = with_bugs(diagonal=-1)
debug_mask_inverted = with_bugs(inverted=True)


def debug_sqrt_d_model(x, w_q, w_k, w_v):
    return _buggy(x, w_q, w_k, w_v, (), scale=math.sqrt(x.shape[-1]))


def debug_returns_weights_first(x, w_q, w_k, w_v):
    out, weights = causal_self_attention(x, w_q, w_k, w_v)
    return weights, out


# Task 4.4: trainings that fall short


def _adam_loop(model, tokens, targets, steps, **faults):
    return short_training(model, tokens, targets, steps, lr=0.01, batch=64, **faults)


def recall_untrained(tokens, targets, seed):
    torch.manual_seed(seed)
    return ch04.RecallModel()


def recall_trained_on_another_task(tokens, targets, seed):
    """Trained on sequences whose answer is the first pair's digit."""
    torch.manual_seed(seed)
    other = ch04.recall_data(seed + 1, len(targets), answer="first")
    return _adam_loop(ch04.RecallModel(), *other, 60, seed=seed)


def recall_never_zero_grad(tokens, targets, seed):
    torch.manual_seed(seed)
    return _adam_loop(ch04.RecallModel(), tokens, targets, 60, zero_grad=False, seed=seed)


def recall_answers_of_other_rows(tokens, targets, seed):
    """Draws the minibatch's answers apart from its sequences."""
    torch.manual_seed(seed)
    return _adam_loop(ch04.RecallModel(), tokens, targets, 60, shuffled=True, seed=seed)


def recall_too_few_steps(tokens, targets, seed):
    torch.manual_seed(seed)
    return _adam_loop(ch04.RecallModel(), tokens, targets, 25, seed=seed)


def recall_returns_the_optimizer_state(tokens, targets, seed):
    model = recall_too_few_steps(tokens, targets, seed)
    return {"weights": model.state_dict()}


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
        (local_one_too_wide, ch04.HINT_LOCAL_WIDE),
        (local_one_too_narrow, ch04.HINT_LOCAL_NARROW),
        (local_centred, ch04.HINT_LOCAL_SYMMETRIC),
        (local_into_the_future, ch04.HINT_LOCAL_FUTURE),
        (local_no_window, ch04.HINT_LOCAL_NO_WINDOW),
        (local_padding_ignored, ch04.HINT_LOCAL_PADDING_IGNORED),
        (local_padding_on_queries, ch04.HINT_LOCAL_PADDING_QUERIES),
        (local_empty_padding_rows, ch04.HINT_LOCAL_EMPTY_ROWS),
        (local_padding_rows_see_their_window, ch04.HINT_LOCAL_PADDING_ROWS),
        (local_first_sequence_for_all, ch04.HINT_LOCAL_FIRST_ROW),
        (local_lengths_only, ch04.HINT_LOCAL_LENGTHS),
        (local_inverted, ch04.HINT_LOCAL_INVERTED),
        (local_as_floats, ch04.HINT_MASK_BOOL),
        (local_additive, ch04.HINT_MASK_ADDITIVE),
        (local_without_batch, ch04.HINT_LOCAL_SHAPE),
    ],
    "4.3": [
        (debug_values_by_w_k, ch04.HINT_DEBUG_VALUES),
        (debug_divides_by_d_k, ch04.HINT_DEBUG_SCALE),
        (debug_leaks_the_next_token, ch04.HINT_DEBUG_LEAK),
        (debug_softmax_over_the_queries, ch04.HINT_DEBUG_SOFTMAX),
        (debug_scale_and_leak, ch04.debug_hint(frozenset({"scale", "leak"}))),
        (debug_hides_the_diagonal, ch04.HINT_DEBUG_DIAGONAL),
        (debug_mask_inverted, ch04.HINT_DEBUG_INVERTED),
        (debug_sqrt_d_model, ch04.HINT_DEBUG_D_MODEL),
        (debug_returns_weights_first, ch04.HINT_PAIR_ORDER),
    ],
    "4.4": [
        (recall_untrained, ch04.HINT_RECALL_UNTRAINED),
        (recall_trained_on_another_task, ch04.HINT_RECALL_TRAIN),
        (recall_never_zero_grad, ch04.HINT_RECALL_TRAIN),
        (recall_answers_of_other_rows, ch04.HINT_RECALL_UNTRAINED),
        (recall_too_few_steps, ch04.HINT_RECALL_PARTIAL),
        (recall_returns_the_optimizer_state, "the state_dict lacks"),
    ],
    "4.5": [(lambda: 144, ch04.HINT_Q_CAUSAL_ALL), (lambda: 66, ch04.HINT_Q_CAUSAL_DIAGONAL),
            (lambda: 72, ch04.HINT_Q_CAUSAL), (lambda: 78.0, "a whole number")],
    "4.6": [(lambda: 48, ch04.HINT_Q_LOCAL_FULL), (lambda: 78, ch04.HINT_Q_LOCAL_CAUSAL),
            (lambda: 40, ch04.HINT_Q_LOCAL)],
    "4.7": [(lambda: "the diagonal only", ch04.HINT_Q_JACOBIAN_DIAGONAL),
            (lambda: "none of them", ch04.HINT_Q_JACOBIAN_NONE),
            (lambda: "all but the diagonal", ch04.HINT_Q_JACOBIAN_OFF),
            (lambda: "all", "one of the choices")],
}


def stub(*args):
    raise NotImplementedError("Task 4.1: write qkv_scores")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="04_self_attention",
    tasks={"4.1": ("qkv_scores", 3, 7), "4.2": ("local_mask", 4, 9),
           "4.3": ("causal_self_attention", 3, 6), "4.4": ("train_recall", 3, 6),
           "4.5": ("causal_scores_kept", 1, 1), "4.6": ("local_scores_kept", 1, 1),
           "4.7": ("saturated_jacobian_zeros", 1, 1)},
    hints=ch04,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=1,
    min_hidden=1,
    public_points=(1, 4),
    forbidden=(),
    package="coursepkg.lm",  # the train task runs coursepkg.self_attention in RecallModel
    not_finite_hint=ch04.HINT_NOT_FINITE,
    failure_reports=(
        ("4.2", local_empty_padding_rows, "Task 4.2 local_mask: 1/4 points",
         ("  FAIL  [0/1] right padding (lengths 6 and 4), a window of 2: "
          + ch04.HINT_LOCAL_EMPTY_ROWS,)),
        ("4.3", debug_untouched, "Task 4.3 causal_self_attention: 0/3 points",
         (ch04.PREFIX_DEBUG_SEVERAL,)),
        ("4.1", qkv_no_scale, "Task 4.1 qkv_scores: 0/3 points", (ch04.HINT_NO_SCALE,)),
    ),
    typed=("4.1", "4.3"),
    seeded=("4.1", "4.3", "4.4"),
    scalar_inputs=("4.5", "4.6", "4.7"),
    exact_results=("4.2", "4.4", "4.5", "4.6", "4.7"),
    more_hints=frozenset(ch04.debug_hint(bugs) for bugs in ch04.BUG_SETS),
    # where the widths differ, an untransposed key or weight matrix crashes: the error's hint
    # names the shapes
    crashes_excused=True,
    wrong_types=(
        ("4.1", lambda *a: qkv_scores(*a)[3],
         "expected a tuple of 4 (q, k, v, scores), got Tensor"),
        ("4.1", lambda *a: qkv_scores(*a)[:3], "got a tuple of 3"),
        ("4.2", lambda *a: local_mask(*a).tolist(),
         "expected the mask as a torch.Tensor, got list"),
        ("4.2", lambda *a: local_mask(*a).to(torch.complex64), "got dtype torch.complex64"),
        ("4.3", lambda *a: causal_self_attention(*a)[0],
         "expected a pair (out, weights), got Tensor"),
        ("4.4", lambda *a: [1.0], "expected the trained model or its state_dict(), got list"),
        ("4.5", lambda: "78", "a whole number (an int), got a str"),
        ("4.7", lambda: 1, "one of the choices, as a string"),
    ),
    forged={
        "4.2": lambda good: [{**good, "data": [2] * len(good["data"])},
                             {**good, "shape": [len(good["data"])]}, {**good, "dtype": None}],
        "4.3": lambda good: forged_pairs(good, [2, 3, 5], 36),
    },
    forbidden_calls={  # in every task but the questions (see the tests of 4.1 to 4.3 below)
        F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
    },
    allowed_calls=(torch.softmax, torch.Tensor.masked_fill, torch.tril, torch.matmul, F.linear,
                   torch.Tensor.transpose),
)


# ---------------------------------------------------------------------------------------------
# The registry, the kinds and the cases
# ---------------------------------------------------------------------------------------------


def test_the_kinds_and_their_shares():
    """No task asks for a function the page shows; formulas are at most a third of the
    points, and every other kind the design asks for is there."""
    points = checks.points_by_kind("04_self_attention")
    assert points == {"formula": 7.0, "extension": 9.0, "train": 6.0, "debug": 6.0,
                      "question": 3.0}
    assert points["formula"] <= sum(points.values()) / 3
    shown = {"scaled_dot_product_attention", "causal_mask", "self_attention", "forward"}
    assert not shown & {task.func_name for task in checks.tasks_for("04_self_attention")}


def test_the_local_cases_cover_the_window_edge_padding_rows_and_the_batch():
    task = checks.get_task("4.2")
    cases = all_cases(task)
    keeps = [case.args["keep"] for case in cases]
    T = [len(keep[0]) for keep in keeps]
    windows = [case.args["window"] for case in cases]
    assert any(w >= t for w, t in zip(windows, T, strict=True))  # a window past the start
    assert 1 in windows and any(1 < w < t for w, t in zip(windows, T, strict=True))
    left = [keep for keep in keeps if any(not row[0] and row[-1] for row in keep)]
    right = [keep for keep in keeps if any(row[0] and not row[-1] for row in keep)]
    assert left and right
    public = [case.args["keep"] for case in task.public_cases]
    assert any(len(keep) > 1 and keep[0] != keep[1] for keep in public)  # sequences differ
    for case in cases:  # padding rows whose whole window is padding: an empty row but for t
        keep, window = task.build_args(case.args)
        assert keep.any(dim=-1).all(), case.name
    empty = 0
    for case in task.public_cases:
        keep, window = task.build_args(case.args)
        band = ch04._band(keep.shape[1], 0, window - 1)
        empty += int((~(band & keep[:, None, :]).any(dim=-1)).sum())
    assert empty > 0


def test_the_local_mask_by_hand():
    keep = torch.tensor([[False, True, True, True, True], [True, True, True, False, False]])
    mask = ch04.local_mask(keep, 2).int().tolist()
    assert mask[0] == [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0],
                       [0, 0, 0, 1, 1]]
    assert mask[1] == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 1, 0],
                       [0, 0, 0, 0, 1]]
    full = torch.ones(1, 6, dtype=torch.bool)
    assert torch.equal(ch04.local_mask(full, 6)[0], sa.causal_mask(6))
    assert torch.equal(ch04.local_mask(full, 1)[0], torch.eye(6, dtype=torch.bool))


def test_the_local_mask_makes_attention_local_and_blind_to_padding():
    """Used in attention: every row has a key (no NaN), real queries give padding keys 0 and
    their output does not depend on tokens outside the window."""
    generator = torch.Generator().manual_seed(0)
    keep = torch.tensor([[True] * 7, [False, False, True, True, True, True, True]])
    x = torch.randn(2, 7, 4, generator=generator, dtype=torch.float64)
    mask = ch04.local_mask(keep, 3)
    out, weights = sa.scaled_dot_product_attention(x, x, x, mask)
    assert torch.isfinite(out).all()
    assert (weights[1][:, :2][keep[1]] == 0).all()
    changed = x.clone()
    changed[:, 0] += 5.0  # outside the window of queries 3..6
    out2, _ = sa.scaled_dot_product_attention(changed, changed, changed, mask)
    torch.testing.assert_close(out2[:, 3:], out[:, 3:])


def test_every_combination_of_bugs_is_named():
    task = checks.get_task("4.3")
    case = task.cases[0]  # Dk = Dv: the values' bug shows in the numbers
    for bugs in ch04.BUG_SETS:
        func = with_bugs(*sorted(bugs))
        result = checks.grade_output(task, case, checks.student_output(task, case, func))
        assert result.status == "failed"
        assert result.message.startswith(ch04.debug_hint(bugs)), (sorted(bugs), result.message)
    assert len(ch04.BUG_SETS) == 15


def test_the_untouched_starter_code_fails_every_case():
    result = run_task("4.3", debug_untouched, hidden=True)
    assert result.points == 0 and result.status == "failed"
    assert {case.status for case in result.cases} == {"failed"}
    # where Dv differs from Dk the out's shape already names the values' bug
    shaped = [case for case in result.cases if case.message.startswith(ch04.HINT_DEBUG_VALUES)]
    assert shaped


def test_the_debug_cases_tell_the_widths_apart():
    cases = all_cases(checks.get_task("4.3"))
    assert any(c.args["Dk"] == c.args["Dv"] for c in cases if not c.hidden)
    assert any(c.args["Dk"] != c.args["Dv"] for c in cases if not c.hidden)
    assert any(len({c.args["T"], c.args["D"], c.args["Dk"]}) == 3 for c in cases)


def test_references_agree_with_torch():
    task = checks.get_task("4.3")
    for case in task.cases:
        x, w_q, w_k, w_v = task.build_args({**case.args, "dtype": "float64"})
        out, weights = ch04.causal_self_attention(x, w_q, w_k, w_v)
        expected = F.scaled_dot_product_attention(x @ w_q.T, x @ w_k.T, x @ w_v.T,
                                                  is_causal=True)
        torch.testing.assert_close(out, expected)
        assert (weights.triu(1) == 0).all()


def test_the_forbidden_calls_of_the_attention_tasks():
    from coursepkg.checks.forbidden import Tripwire

    for task_id in ("4.1", "4.2", "4.3"):
        wire = Tripwire(checks.get_task(task_id))
        assert "coursepkg.self_attention" in wire.prefixes
        assert wire.forbidden_callable(sa.scaled_dot_product_attention) is not None
        assert wire.forbidden_callable(sa.SelfAttention.forward) == "coursepkg.self_attention"
        assert wire.forbidden_callable(F.scaled_dot_product_attention) == (
            "torch.nn.functional.scaled_dot_product_attention")
    helper = torch.nn.Transformer.generate_square_subsequent_mask
    assert Tripwire(checks.get_task("4.2")).forbidden_callable(helper) == (
        "torch.nn.Transformer.generate_square_subsequent_mask")
    train = Tripwire(checks.get_task("4.4"))
    assert train.forbidden_callable(sa.SelfAttention.forward) is None  # RecallModel runs it
    assert train.forbidden_callable(ch04.train_recall) is not None


# ---------------------------------------------------------------------------------------------
# The train task
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reference_reaches_the_target_on_three_seeds(seed):
    tokens, targets = ch04.recall_data(seed, ch04.RECALL_TRAIN)
    model = ch04.train_recall(tokens, targets, seed)
    held_out = ch04.recall_data(seed + 1000, ch04.RECALL_HELD_OUT)
    assert (
        held_out_accuracy(ch04.RecallModel, model.state_dict(), *held_out)
        >= ch04.RECALL_BANDS[0][0]
    )


@pytest.mark.parametrize("func", [train_recall, train_recall_epochs])
def test_other_correct_trainings_get_full_marks(func):
    result = run_task("4.4", func, hidden=True)
    assert result.status == "passed" and result.points == result.max_points == 6, result


@pytest.mark.parametrize(("func", "most"), [
    (recall_untrained, 0.0), (recall_trained_on_another_task, 0.0),
    (recall_never_zero_grad, 0.0), (recall_answers_of_other_rows, 0.0),
    (recall_too_few_steps, 4.5)])
def test_short_trainings_get_a_low_band_or_nothing(func, most):
    result = run_task("4.4", func, hidden=True)
    assert result.points <= most, (func.__name__, result)
    if most:
        assert 0 < result.points and {c.status for c in result.cases} == {"partial"}


def test_the_held_out_seed_never_reaches_the_student_and_the_sets_differ():
    task = checks.get_task("4.4")
    for case in all_cases(task):
        assert "_heldout" in case.args and "_heldout" not in student_args(case.args)
        tokens, targets, seed = task.build_args(student_args(case.args))
        held_tokens, _ = task.expected(case.args)
        assert seed == case.args["seed"] and not torch.equal(tokens[:5], held_tokens[:5])
        assert tokens.shape == (ch04.RECALL_TRAIN, ch04.RECALL_PAIRS + 1, 2)


def test_the_recall_data_is_what_the_task_says():
    tokens, targets = ch04.recall_data(5, 300)
    letters, digits = tokens[..., 0], tokens[..., 1]
    pairs = letters[:, :-1]
    assert all(len(set(row.tolist())) == ch04.RECALL_PAIRS for row in pairs)
    assert (digits[:, -1] == ch04.RECALL_DIGITS).all()
    where = (pairs == letters[:, -1:]).int().argmax(dim=1)
    assert torch.equal(digits[:, :-1].gather(1, where[:, None])[:, 0], targets)
    _, first = ch04.recall_data(5, 300, answer="first")
    assert torch.equal(first, digits[:, 0])
    shapes = {name: tuple(t.shape) for name, t in ch04.RecallModel().state_dict().items()}
    assert shapes == ch04.RECALL_SHAPES


def test_the_recall_model_is_blind_to_the_order_of_the_pairs():
    """No positions: the pairs are a set, and shuffling them leaves the answer's logits."""
    torch.manual_seed(0)
    model = ch04.RecallModel()
    tokens, _ = ch04.recall_data(3, 4)
    shuffled = torch.cat([tokens[:, :-1].flip(1), tokens[:, -1:]], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(shuffled), model(tokens))


# ---------------------------------------------------------------------------------------------
# The questions
# ---------------------------------------------------------------------------------------------


def test_the_questions_keys_follow_the_package_and_other_answers_are_right_too():
    assert ch04.causal_scores_key() == 78 == 12 * 13 // 2
    assert ch04.local_scores_key() == 1 + 2 + 3 + 4 * 9
    assert ch04.saturated_jacobian_key() == "all of them"
    for task_id, answer in (("4.5", 78), ("4.6", 42), ("4.7", "all of them")):
        assert run_task(task_id, lambda answer=answer: answer).status == "passed"
    for form in (torch.tensor(78), 78.0):  # the answer is an int: the message says so
        result = run_task("4.5", lambda form=form: form)
        assert result.status == "failed" and "a whole number (an int)" in result.cases[0].message


# ---------------------------------------------------------------------------------------------
# Reports and details
# ---------------------------------------------------------------------------------------------


def test_shapes_name_the_mistake_where_values_cannot():
    """Where the widths differ, an untransposed key or weight matrix cannot even run: the
    error's hint names the shapes. In the case where every size agrees, the numbers name it."""
    for func in (qkv_k_not_transposed, qkv_weights_not_transposed):
        result = run_task("4.1", func)
        assert [case.status for case in result.cases] == ["error", "failed", "error"]
        assert all("x @ w_q.T" in case.message for case in result.cases if case.status == "error")


def test_public_failures_show_the_specifics():
    result = run_task("4.1", qkv_no_scale)
    detail = result.cases[0].message.removeprefix(ch04.HINT_NO_SCALE).strip()
    assert detail.startswith("scores[") and "expected" in detail and "values differ)." in detail
    result = run_task("4.2", local_one_too_wide)
    assert result.cases[0].message.endswith("mask[0, 3, 0]: expected False, got True "
                                            "(3 of 36 values differ).")
    result = run_task("4.2", local_as_floats)
    assert result.cases[0].message.endswith("Expected dtype torch.bool, got torch.float32.")
    result = run_task("4.3", debug_returns_weights_first)
    assert result.cases[0].message.endswith("Expected out of shape (2, 5, 4), got (2, 5, 5).")


def test_check_a_function_that_raises(capsys):
    def broken(x, w_q, w_k, w_v):
        return x @ w_q  # shapes that do not fit

    out = check_output(capsys, "4.1", broken)
    assert "ERROR [0/1]" in out and "raised RuntimeError: " in out
    assert "q = x @ w_q.T" in out


def test_check_prints_the_train_task_s_time_and_budget(capsys):
    out = check_output(capsys, "4.4", train_recall)
    assert out.startswith("Task 4.4 train_recall: 3/3 points\n")
    assert " s of 10 s budget)" in out


def test_the_second_correct_answers_print_full_marks(capsys):
    for task_id, func, answer in (("4.5", "causal_scores_kept", 78),
                                  ("4.7", "saturated_jacobian_zeros", "all of them")):
        out = check_output(capsys, task_id, lambda answer=answer: answer)
        assert out == f"Task {task_id} {func}: 1/1 points\n  PASS  [1/1] the answer\n"


def test_hidden_plain_values_through_json():
    task = checks.get_task("4.2")
    case = task.cases[1]
    sent = json.loads(json.dumps(checks.student_output(task, case, local_additive)))
    result = checks.grade_output(task, case, sent)
    assert result.status == "failed" and result.message.startswith(ch04.HINT_MASK_ADDITIVE)


def test_hidden_cases_of_the_local_mask_are_not_in_the_public_ones():
    public = [case.args for case in checks.get_task("4.2").public_cases]
    assert all(case.args not in public for case in hidden_cases(checks.get_task("4.2")))
