"""The checks of chapter 3 (coursepkg.checks.ch03_attention): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do: the general score against
a torch computation, the pooling's masked positions, the debug task's every combination of
bugs; the train task's bands (the reference on three seeds, an untrained model, one trained on
another task); the questions' keys; the shares of points by kind and a submission that pastes
the book.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, forged_pairs, run_task, short_training

from coursepkg import attention, checks
from coursepkg.checks import ch03_attention as ch03
from coursepkg.checks.core import student_args
from coursepkg.checks.tensors import held_out_accuracy

TASK_IDS = ("3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7")
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def general_attention(query, keys, values, mask, w):
    """The notebook's solution: project the keys with W, then a batched product."""
    scores = ((keys @ w.T) @ query.unsqueeze(-1)).squeeze(-1)  # (B, S)
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def general_attention_einsum(query, keys, values, mask, w):
    """One einsum for the bilinear form, torch.where for the mask."""
    scores = torch.einsum("bq,qk,bsk->bs", query, w, keys)
    weights = torch.where(mask, scores, torch.full_like(scores, NEG_INF)).softmax(dim=-1)
    return torch.einsum("bs,bsv->bv", weights, values), weights


def general_attention_loop(query, keys, values, mask, w):
    """One row at a time, over the allowed keys only."""
    contexts, all_weights = [], []
    for b in range(query.shape[0]):
        allowed = mask[b].nonzero().squeeze(-1)
        scores = keys[b, allowed] @ (w.T @ query[b])
        weights = query.new_zeros(keys.shape[1])
        weights[allowed] = torch.softmax(scores, dim=0)
        contexts.append(weights @ values[b])
        all_weights.append(weights)
    return torch.stack(contexts), torch.stack(all_weights)


def attention_pool(states, mask, w, b, u):
    """The notebook's solution."""
    scores = torch.tanh(states @ w.T + b) @ u  # (B, S)
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ states).squeeze(1), weights


def attention_pool_linear(states, mask, w, b, u):
    """F.linear for the hidden layer; a masked softmax by hand, the maximum subtracted."""
    scores = F.linear(states, w, b).tanh() @ u
    scores = scores - scores.masked_fill(~mask, NEG_INF).amax(dim=-1, keepdim=True)
    exps = torch.exp(scores) * mask
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return (weights.unsqueeze(-1) * states).sum(dim=1), weights


def padded_attention(query, keys, values, lengths):
    """The notebook's solution: the starter code with its three bugs fixed."""
    S = keys.shape[1]
    mask = torch.arange(S)[None, :] < lengths[:, None]
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(query.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def padded_attention_slices(query, keys, values, lengths):
    """Each row's real keys sliced out; the padding's weights put back as zeros."""
    contexts, rows = [], []
    for b, n in enumerate(lengths.tolist()):
        weights = torch.softmax(keys[b, :n] @ query[b] / query.shape[-1] ** 0.5, dim=0)
        contexts.append(weights @ values[b, :n])
        rows.append(torch.cat([weights, weights.new_zeros(keys.shape[1] - n)]))
    return torch.stack(contexts), torch.stack(rows)


def _adam_loop(model, tokens, targets, steps, **faults):
    return short_training(model, tokens, targets, steps, lr=0.03, batch=64, **faults)


def train_marker(tokens, targets, seed):
    """The notebook's solution: random minibatches, 200 steps."""
    torch.manual_seed(seed)
    return _adam_loop(ch03.MarkerModel(), tokens, targets, 200, seed=seed)


def train_marker_epochs(tokens, targets, seed):
    """Epochs over a shuffled order, SGD with momentum, the state_dict returned."""
    torch.manual_seed(seed)
    model = ch03.MarkerModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    for _ in range(6):
        for rows in torch.randperm(len(targets)).split(50):
            loss = F.cross_entropy(model(tokens[rows]), targets[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.state_dict()


CORRECT = {
    "3.1": [ch03.general_attention, general_attention, general_attention_einsum,
            general_attention_loop],
    "3.2": [ch03.attention_pool, attention_pool, attention_pool_linear],
    "3.3": [ch03.padded_attention, padded_attention, padded_attention_slices],
    "3.4": [ch03.train_marker, train_marker, train_marker_epochs],
    "3.5": [checks.get_task("3.5").reference, lambda: 2 * 11 * 21],
    "3.6": [checks.get_task("3.6").reference, lambda: 11 * (21 - 8)],
    "3.7": [checks.get_task("3.7").reference, lambda: 128 * 64],
}


# ---------------------------------------------------------------------------------------------
# Wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------


def general_w_transposed(query, keys, values, mask, w):
    return general_attention(query, keys, values, mask, w.T)


def general_no_w(query, keys, values, mask, w):
    """The plain dot product q . k_s (shapes fit only when Dq = Dk)."""
    return general_attention(query, keys, values, mask, torch.eye(w.shape[0], dtype=w.dtype))


def general_scaled(query, keys, values, mask, w):
    context, _ = None, None
    scores = torch.einsum("bq,qk,bsk->bs", query, w, keys) / math.sqrt(keys.shape[-1])
    weights = scores.masked_fill(~mask, NEG_INF).softmax(dim=-1)
    context = torch.einsum("bs,bsv->bv", weights, values)
    return context, weights


def general_mask_with_zero(query, keys, values, mask, w):
    scores = torch.einsum("bq,qk,bsk->bs", query, w, keys).masked_fill(~mask, 0.0)
    weights = scores.softmax(dim=-1)
    return torch.einsum("bs,bsv->bv", weights, values), weights


def general_mask_after_softmax(query, keys, values, mask, w):
    weights = torch.einsum("bq,qk,bsk->bs", query, w, keys).softmax(dim=-1) * mask
    return torch.einsum("bs,bsv->bv", weights, values), weights


def general_softmax_over_batch(query, keys, values, mask, w):
    scores = torch.einsum("bq,qk,bsk->bs", query, w, keys).masked_fill(~mask, NEG_INF)
    weights = scores.softmax(dim=0)
    return torch.einsum("bs,bsv->bv", weights, values), weights


def general_plain_mean(query, keys, values, mask, w):
    _, weights = general_attention(query, keys, values, mask, w)
    return values.mean(dim=1), weights


def general_weights_first(query, keys, values, mask, w):
    context, weights = general_attention(query, keys, values, mask, w)
    return weights, context


def pool_no_tanh(states, mask, w, b, u):
    scores = (states @ w.T + b) @ u
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ states).squeeze(1), weights


def pool_bias_outside(states, mask, w, b, u):
    scores = (torch.tanh(states @ w.T) + b) @ u
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ states).squeeze(1), weights


def pool_averages_hidden(states, mask, w, b, u):
    hidden = torch.tanh(states @ w.T + b)
    weights = torch.softmax((hidden @ u).masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ hidden).squeeze(1), weights


def pool_summed_units(states, mask, w, b, u):
    scores = torch.tanh(states @ w.T + b).sum(dim=-1)
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ states).squeeze(1), weights


def pool_mask_ignored(states, mask, w, b, u):
    weights = torch.softmax(torch.tanh(states @ w.T + b) @ u, dim=-1)
    return (weights.unsqueeze(1) @ states).squeeze(1), weights


def pool_masked_mean(states, mask, w, b, u):
    _, weights = attention_pool(states, mask, w, b, u)
    allowed = mask.to(states.dtype)
    return (allowed.unsqueeze(-1) * states).sum(1) / allowed.sum(1, keepdim=True), weights


def pool_mask_with_zero(states, mask, w, b, u):
    scores = (torch.tanh(states @ w.T + b) @ u).masked_fill(~mask, 0.0)
    weights = torch.softmax(scores, dim=-1)
    return (weights.unsqueeze(1) @ states).squeeze(1), weights


def pool_w_not_transposed(states, mask, w, b, u):
    scores = torch.tanh(states @ w + b) @ u
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ states).squeeze(1), weights


def _buggy(query, keys, values, lengths, bugs, *, masking="right", scale=True):
    """The starter code with ``bugs`` left (names of ch03.BUG_SETS) and other mistakes."""
    S = keys.shape[1]
    positions = torch.arange(S)[None, :]
    mask = positions <= lengths[:, None] if "leak" in bugs else positions < lengths[:, None]
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1)
    if scale:
        scores = scores / math.sqrt(query.shape[-1])
    fill = 0.0 if "zero" in bugs else NEG_INF
    if masking == "right":
        scores = scores.masked_fill(~mask, fill)
    elif masking == "inverted":
        scores = scores.masked_fill(mask, fill)
    weights = torch.softmax(scores, dim=0 if "batch" in bugs else -1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def debug_with(*bugs, **options):
    def func(query, keys, values, lengths):
        return _buggy(query, keys, values, lengths, bugs, **options)

    func.__name__ = "debug_" + ("_".join(bugs) or "_".join(options))
    return func


debug_leak = debug_with("leak")
debug_zero = debug_with("zero")
debug_batch = debug_with("batch")
debug_leak_and_zero = debug_with("leak", "zero")
debug_untouched = debug_with("leak", "zero", "batch")
debug_inverted = debug_with(masking="inverted")
debug_unscaled = debug_with(scale=False)


def debug_weights_first(query, keys, values, lengths):
    context, weights = padded_attention(query, keys, values, lengths)
    return weights, context


# Task 3.4: trainings that fall short


def marker_untrained(tokens, targets, seed):
    torch.manual_seed(seed)
    return ch03.MarkerModel()


def marker_trained_on_another_task(tokens, targets, seed):
    """Trained on sequences whose answer is the first token's symbol."""
    torch.manual_seed(seed)
    other = ch03.marker_data(seed + 1, len(targets), answer="first")
    return _adam_loop(ch03.MarkerModel(), *other, 200, seed=seed)


def marker_answers_of_other_rows(tokens, targets, seed):
    """Draws the minibatch's answers apart from its sequences."""
    torch.manual_seed(seed)
    return _adam_loop(ch03.MarkerModel(), tokens, targets, 200, shuffled=True, seed=seed)


def marker_too_few_steps(tokens, targets, seed):
    torch.manual_seed(seed)
    return _adam_loop(ch03.MarkerModel(), tokens, targets, 6, seed=seed)


def marker_returns_a_wrapped_state(tokens, targets, seed):
    model = marker_too_few_steps(tokens, targets, seed)
    return {"weights": model.state_dict()}


RUNTIME_HINTS = {task_id: checks.get_task(task_id).error_hints.get("RuntimeError")
                 for task_id in TASK_IDS}

WRONG = {
    "3.1": [
        (general_w_transposed, ch03.HINT_GENERAL_TRANSPOSED),
        (general_no_w, ch03.HINT_GENERAL_NO_W),
        (general_scaled, ch03.HINT_GENERAL_SCALED),
        (general_mask_with_zero, ch03.HINT_MASK_ZERO),
        (general_mask_after_softmax, ch03.HINT_MASK_AFTER_SOFTMAX),
        (general_softmax_over_batch, ch03.HINT_SOFTMAX_DIM_0),
        (general_plain_mean, ch03.HINT_CONTEXT_MEAN),
        (general_weights_first, ch03.HINT_PAIR_ORDER_CTX),
    ],
    "3.2": [
        (pool_no_tanh, ch03.HINT_POOL_NO_TANH),
        (pool_bias_outside, ch03.HINT_POOL_BIAS_OUTSIDE),
        (pool_averages_hidden, ch03.HINT_POOL_AVERAGES_U),
        (pool_summed_units, ch03.HINT_POOL_NO_U),
        (pool_mask_ignored, ch03.HINT_MASK_IGNORED),
        (pool_masked_mean, ch03.HINT_POOL_MEAN),
        (pool_mask_with_zero, ch03.HINT_MASK_ZERO),
        (pool_w_not_transposed, ch03.HINT_POOL_TRANSPOSE),
    ],
    "3.3": [
        (debug_leak, ch03.HINT_DEBUG_LEAK),
        (debug_zero, ch03.HINT_DEBUG_ZERO),
        (debug_batch, ch03.HINT_DEBUG_BATCH),
        (debug_leak_and_zero, ch03.debug_hint(frozenset({"leak", "zero"}))),
        (debug_inverted, ch03.HINT_DEBUG_INVERTED),
        (debug_unscaled, ch03.HINT_DEBUG_SCALE),
        (debug_weights_first, ch03.HINT_PAIR_ORDER_CTX),
    ],
    "3.4": [
        (marker_untrained, ch03.HINT_MARKER_UNTRAINED),
        (marker_trained_on_another_task, ch03.HINT_MARKER_TRAIN),
        (marker_answers_of_other_rows, ch03.HINT_MARKER_UNTRAINED),
        (marker_too_few_steps, ch03.HINT_MARKER_PARTIAL),
        (marker_returns_a_wrapped_state, "the state_dict lacks"),
    ],
    "3.5": [(lambda: 11 * (8 + 21), ch03.HINT_Q_COUNT_UNPADDED),
            (lambda: 2 * 21, ch03.HINT_Q_COUNT_ONE_STEP), (lambda: 11 * 21, ch03.HINT_Q_COUNT),
            (lambda: 462.0, "a whole number")],
    "3.6": [(lambda: 13, ch03.HINT_Q_ZERO_ONE_STEP), (lambda: 0, ch03.HINT_Q_ZERO_NONE),
            (lambda: 11 * 8, ch03.HINT_Q_ZERO)],
    "3.7": [(lambda: ch03.additive_parameters(), ch03.HINT_Q_PARAMETERS_ADDITIVE),
            (lambda: 128 * 64 + 64, ch03.HINT_Q_PARAMETERS),
            (lambda: 8192.0, "a whole number")],
}


def stub(*args):
    raise NotImplementedError("Task 3.1: write general_attention")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="03_attention",
    tasks={"3.1": ("general_attention", 3, 7), "3.2": ("attention_pool", 3, 7),
           "3.3": ("padded_attention", 3, 5), "3.4": ("train_marker", 3, 6),
           "3.5": ("decoder_weights_count", 1, 1), "3.6": ("decoder_zero_weights", 1, 1),
           "3.7": ("dot_attention_parameters", 1, 1)},
    hints=ch03,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=1,
    min_hidden=1,
    public_points=(1, 3),
    forbidden=(),
    package="coursepkg.attention",
    not_finite_hint=ch03.HINT_NOT_FINITE,
    failure_reports=(
        ("3.1", general_no_w, "Task 3.1 general_attention: 0/3 points",
         (ch03.HINT_GENERAL_NO_W,)),
        ("3.3", debug_untouched, "Task 3.3 padded_attention: 0/3 points",
         (ch03.PREFIX_DEBUG_SEVERAL,)),
        ("3.2", pool_no_tanh, "Task 3.2 attention_pool: 0/3 points", (ch03.HINT_POOL_NO_TANH,)),
    ),
    typed=("3.1", "3.2", "3.3"),
    seeded=("3.1", "3.2", "3.3", "3.4"),
    scalar_inputs=("3.5", "3.6", "3.7"),
    exact_results=("3.4", "3.5", "3.6", "3.7"),
    more_hints=frozenset(ch03.debug_hint(bugs) for bugs in ch03.BUG_SETS),
    # where the widths differ, W used the other way round cannot run: the error's hint names
    # the shapes
    crashes_excused=True,
    wrong_types=(
        ("3.1", lambda *a: general_attention(*a)[1],
         "expected a pair (context, weights), got Tensor"),
        ("3.2", lambda *a: attention_pool(*a)[:1], "got a tuple of 1"),
        ("3.3", lambda *a: padded_attention(*a)[0],
         "expected a pair (context, weights), got Tensor"),
        ("3.4", lambda *a: [1.0], "expected the trained model or its state_dict(), got list"),
        ("3.5", lambda: "462", "a whole number (an int), got a str"),
    ),
    forged={
        "3.1": lambda good: forged_pairs(good, [2, 3, 5], 36),
        "3.2": lambda good: forged_pairs(good, [2, 3, 5], 36),
        "3.3": lambda good: forged_pairs(good, [2, 3, 5], 36),
    },
    forbidden_calls={  # in every task but the questions
        F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
    },
    allowed_calls=(torch.softmax, torch.Tensor.masked_fill, torch.matmul, F.linear, torch.tanh),
)


# ---------------------------------------------------------------------------------------------
# The registry, the kinds and the shares
# ---------------------------------------------------------------------------------------------


def test_the_kinds_and_their_shares():
    """No task asks for a function the page shows; formulas are at most a third of the
    points, and every other kind the design asks for is there."""
    points = checks.points_by_kind("03_attention")
    assert points == {"formula": 7.0, "extension": 7.0, "train": 6.0, "debug": 5.0,
                      "question": 3.0}
    assert points["formula"] <= sum(points.values()) / 3
    shown = {"attend", "weighted_average", "additive_scores", "encode", "_decode", "_context"}
    assert not shown & {task.func_name for task in checks.tasks_for("03_attention")}


def paste_general(query, keys, values, mask, w):
    """The book's attend, with the projected query."""
    return attention.attend(query @ w, keys, values, mask)


def paste_pool(states, mask, w, b, u):
    """The book's additive attention (the nearest it shows) with u as a query of zeros."""
    module = attention.AdditiveAttention(1, states.shape[-1], w.shape[0]).to(states.dtype)
    with torch.no_grad():
        module.w_k.weight.copy_(w)
        module.w_k.bias.copy_(b)
        module.v.copy_(u)
        module.w_q.weight.zero_()
    query = states.new_zeros(states.shape[0], 1)
    return module(query, states, states, mask)


def paste_padded(query, keys, values, lengths):
    """The book's attend with encode's mask."""
    mask = torch.arange(keys.shape[1])[None, :] < lengths[:, None]
    return attention.attend(query, keys, values, mask, scale=query.shape[-1] ** -0.5)


def paste_marker(tokens, targets, seed):
    """The book's A/B training loop, pasted: fresh A/B strings, 150 steps of its own model's
    loop on the marker model (the loss of the A/B labels)."""
    from coursepkg import data

    torch.manual_seed(seed)
    model = ch03.MarkerModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(seed + 1)
    for _ in range(150):
        x, y = data.ab_task(64, 12, generator=generator, max_b=1)
        loss = F.cross_entropy(model(x + 1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def test_a_book_paster_gets_at_most_the_formula_share():
    """Each function delegating to the code the chapter page shows, as far as that goes: the
    grader gives at most the formula tasks' share (here: nothing, the package's attention is
    forbidden in the attention tasks, and the page's training loop trains another task)."""
    pasted = {"3.1": paste_general, "3.2": paste_pool, "3.3": paste_padded,
              "3.4": paste_marker, "3.5": lambda: 11 * 21, "3.6": lambda: 0,
              "3.7": ch03.additive_parameters}
    earned = sum(run_task(task_id, func, hidden=True).points for task_id, func in pasted.items())
    points = checks.points_by_kind("03_attention")
    assert earned <= points["formula"]
    assert run_task("3.1", paste_general).cases[0].message.startswith("forbidden: you called "
                                                                      "coursepkg.attention")


def test_the_paster_s_functions_would_be_right_without_the_tripwire():
    """So the paster's zeros come from the tripwire, not from a wrong paste."""
    for task_id, func in (("3.1", paste_general), ("3.3", paste_padded)):
        result = checks.run_task(task_id, func, tripwire=False)
        assert result.status == "passed", (task_id, result)


# ---------------------------------------------------------------------------------------------
# Tasks 3.1 to 3.3
# ---------------------------------------------------------------------------------------------


def test_the_general_score_is_a_bilinear_form_and_the_reference_agrees_with_torch():
    task = checks.get_task("3.1")
    for case in all_cases(task):
        query, keys, values, mask, w = task.build_args({**case.args, "dtype": "float64"})
        context, weights = ch03.general_attention(query, keys, values, mask, w)
        scores = torch.stack([torch.stack([query[b] @ w @ keys[b, s]
                                           for s in range(keys.shape[1])])
                              for b in range(query.shape[0])])
        expected = F.scaled_dot_product_attention(
            query[:, None] @ w, keys, values, attn_mask=mask[:, None], scale=1.0)[:, 0]
        torch.testing.assert_close(context, expected)
        torch.testing.assert_close(weights, torch.softmax(scores.masked_fill(~mask, NEG_INF), -1))
        assert (weights[~mask] == 0).all()


def test_the_widths_of_3_1_differ_in_public_and_agree_in_one_case():
    cases = all_cases(checks.get_task("3.1"))
    assert any(len({c.args["Dq"], c.args["Dk"], c.args["Dv"]}) == 3 for c in cases if not c.hidden)
    assert any(c.args["Dq"] == c.args["Dk"] for c in cases if not c.hidden)
    assert any(c.args["Dq"] == c.args["Dk"] for c in cases if c.hidden)


def test_the_pooling_ignores_the_padding_and_equals_vanilla_attention_without_a_hidden_layer():
    task = checks.get_task("3.2")
    states, mask, w, b, u = task.build_args(task.cases[0].args)
    pooled, weights = ch03.attention_pool(states, mask, w, b, u)
    moved = states.clone()
    moved[~mask] = 100.0  # change the padding only
    torch.testing.assert_close(ch03.attention_pool(moved, mask, w, b, u)[0], pooled)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(len(states)))
    # the lectures' vanilla attention a_s = softmax(w . h_s) is attend with the query w
    vector = torch.randn(states.shape[-1])
    vanilla = attention.attend(vector.expand(len(states), -1), states, states, mask)
    D = states.shape[-1]
    scaled = ch03.attention_pool(states, mask, torch.eye(D) * 1e-4, torch.zeros(D),
                                 vector * 1e4)  # tanh(x) ~ x for small x
    torch.testing.assert_close(scaled[0], vanilla[0], rtol=1e-3, atol=1e-3)


def test_every_combination_of_bugs_is_named():
    task = checks.get_task("3.3")
    case = task.cases[0]
    for bugs in ch03.BUG_SETS:
        func = debug_with(*sorted(bugs))
        result = checks.grade_output(task, case, checks.student_output(task, case, func))
        assert result.status == "failed"
        assert result.message.startswith(ch03.debug_hint(bugs)), (sorted(bugs), result.message)
    assert len(ch03.BUG_SETS) == 7


def test_the_untouched_starter_code_fails_every_case():
    result = checks.run_task("3.3", ch03.padded_attention_starter, secret=b"s" * 20,
                             tripwire=False)
    assert result.points == 0 and result.status == "failed"
    assert {case.status for case in result.cases} == {"failed"}
    result = run_task("3.3", debug_untouched, hidden=True)
    assert result.points == 0 and result.status == "failed"


def test_every_debug_case_has_a_padded_row_and_a_full_one_in_a_batch():
    for case in all_cases(checks.get_task("3.3")):
        lengths = case.args["lengths"]
        assert any(n < case.args["S"] for n in lengths), case.name
        if len(lengths) > 1:
            assert any(n == case.args["S"] for n in lengths) or case.name.startswith("3 rows")


def test_the_forbidden_calls_of_the_attention_tasks():
    from coursepkg.checks.forbidden import Tripwire

    for task_id in ("3.1", "3.2", "3.3"):
        wire = Tripwire(checks.get_task(task_id))
        assert wire.forbidden_callable(attention.attend) == "coursepkg.attention"
        assert wire.forbidden_callable(ch03.attention_pool) is not None
        assert wire.forbidden_callable(F.scaled_dot_product_attention) == (
            "torch.nn.functional.scaled_dot_product_attention")
    train = Tripwire(checks.get_task("3.4"))
    assert train.forbidden_callable(ch03.MarkerModel.forward) is None  # the student runs it
    assert train.forbidden_callable(ch03.train_marker) is not None


# ---------------------------------------------------------------------------------------------
# The train task
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reference_reaches_the_target_on_three_seeds(seed):
    tokens, targets = ch03.marker_data(seed, ch03.MARKER_TRAIN)
    model = ch03.train_marker(tokens, targets, seed)
    held_out = ch03.marker_data(seed + 1000, ch03.MARKER_HELD_OUT)
    assert (
        held_out_accuracy(ch03.MarkerModel, model.state_dict(), *held_out)
        >= ch03.MARKER_BANDS[0][0]
    )


@pytest.mark.parametrize("func", [train_marker, train_marker_epochs])
def test_other_correct_trainings_get_full_marks(func):
    result = run_task("3.4", func, hidden=True)
    assert result.status == "passed" and result.points == result.max_points == 6, result


@pytest.mark.parametrize(("func", "most"), [
    (marker_untrained, 0.0), (marker_trained_on_another_task, 1.5),
    (marker_answers_of_other_rows, 0.0), (marker_too_few_steps, 4.5)])
def test_short_trainings_get_a_low_band_or_nothing(func, most):
    result = run_task("3.4", func, hidden=True)
    assert result.points <= most, (func.__name__, result)
    if func is marker_too_few_steps:
        assert 0 < result.points and {c.status for c in result.cases} == {"partial"}


def test_the_held_out_seed_never_reaches_the_student_and_the_sets_differ():
    task = checks.get_task("3.4")
    for case in all_cases(task):
        assert "_heldout" in case.args and "_heldout" not in student_args(case.args)
        tokens, targets, seed = task.build_args(student_args(case.args))
        held_tokens, _ = task.expected(case.args)
        assert seed == case.args["seed"] and not torch.equal(tokens[:5], held_tokens[:5])
        assert tokens.shape == (ch03.MARKER_TRAIN, ch03.MARKER_MAX_LENGTH)


def test_the_marker_data_is_what_the_task_says():
    K = ch03.MARKER_SYMBOLS
    tokens, targets = ch03.marker_data(5, 300)
    lengths = (tokens != 0).sum(dim=1)
    assert lengths.min() >= ch03.MARKER_MIN_LENGTH and lengths.max() <= ch03.MARKER_MAX_LENGTH
    assert torch.equal(tokens != 0, torch.arange(tokens.shape[1])[None] < lengths[:, None])
    marked = tokens > K
    assert (marked.sum(dim=1) == 1).all()
    assert torch.equal(tokens[marked] - K - 1, targets)
    _, first = ch03.marker_data(5, 300, answer="first")
    assert torch.equal(first, (tokens[:, 0] - 1) % K)
    shapes = {name: tuple(t.shape) for name, t in ch03.MarkerModel().state_dict().items()}
    assert shapes == ch03.MARKER_SHAPES


def test_the_marker_model_is_blind_to_padding_and_to_order():
    torch.manual_seed(0)
    model = ch03.MarkerModel().eval()
    tokens, _ = ch03.marker_data(3, 4)
    with torch.no_grad():
        logits = model(tokens)
        wider = torch.cat([tokens, torch.zeros_like(tokens[:, :3])], dim=1)  # more padding
        torch.testing.assert_close(model(wider), logits)
        n = int((tokens[0] != 0).sum())
        flipped = tokens[:1].clone()
        flipped[0, :n] = tokens[0, :n].flip(0)
        torch.testing.assert_close(model(flipped), logits[:1])


# ---------------------------------------------------------------------------------------------
# The questions
# ---------------------------------------------------------------------------------------------


def test_the_questions_keys_follow_the_package():
    assert ch03.weights_count_key() == 2 * 11 * 21
    assert ch03.zero_weights_key() == 11 * (21 - 8)
    assert ch03.dot_parameters_key() == 2 * 64 * 64  # key_proj: (Hs, 2 Hs), no bias
    assert ch03.additive_parameters() != ch03.dot_parameters_key()
    for form in (torch.tensor(462), 462.0):  # the answer is an int: the message says so
        result = run_task("3.5", lambda form=form: form)
        assert result.status == "failed" and "a whole number (an int)" in result.cases[0].message


def test_a_question_s_key_follows_the_package(monkeypatch):
    task = checks.get_task("3.5")
    task.reference.cache_clear()
    try:
        monkeypatch.setattr(ch03, "QUESTION_STEPS", 5)
        assert checks.run_task("3.5", lambda: 2 * 5 * 21).status == "passed"
    finally:
        task.reference.cache_clear()


# ---------------------------------------------------------------------------------------------
# Reports and details
# ---------------------------------------------------------------------------------------------


def test_public_failures_show_the_specifics():
    result = run_task("3.1", general_no_w)
    case = result.cases[1]  # every width 4: the numbers name the mistake
    detail = case.message.removeprefix(ch03.HINT_GENERAL_NO_W).strip()
    assert detail.startswith("context[") and "values differ)." in detail
    result = run_task("3.2", pool_averages_hidden)
    assert result.cases[0].message.endswith("Expected pooled of shape (2, 4), got (2, 6).")
    result = run_task("3.3", debug_weights_first)
    assert result.cases[0].message.endswith("Expected context of shape (2, 3), got (2, 5).")


def test_a_w_used_the_wrong_way_round_crashes_where_the_widths_differ():
    result = run_task("3.1", general_w_transposed)
    assert [case.status for case in result.cases] == ["error", "failed", "error"]
    assert all(case.message.startswith(ch03.HINT_GENERAL_TRANSPOSED)
               for case in result.cases if case.status == "failed")


def test_a_train_task_s_report_shows_the_time_and_the_band(capsys):
    out = check_output(capsys, "3.4", marker_too_few_steps)
    assert "Task 3.4 train_marker: " in out and "s of 6 s budget" in out
    assert ch03.HINT_MARKER_PARTIAL in out


def test_nan_survives_the_trip_through_json():
    task = checks.get_task("3.1")
    case = task.cases[0]

    def nan(query, keys, values, mask, w):
        context, weights = general_attention(query, keys, values, mask, w)
        return context * float("nan"), weights

    plain = json.loads(json.dumps(checks.student_output(task, case, nan)))
    result = checks.grade_output(task, case, plain)
    assert result.status == "failed"
