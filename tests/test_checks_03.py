"""The checks of chapter 3 (coursepkg.checks.ch03_attention): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do.
"""

from __future__ import annotations

import json
import math
import string

import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, forged_pairs, hidden_cases, run_task

from coursepkg import attention, checks, rnn
from coursepkg.checks import ch03_attention as ch03
from coursepkg.checks import core
from coursepkg.data import SeqCodec, dates_task

TASK_IDS = ("3.1", "3.2", "3.3", "3.4")
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def attention_weights(query, keys, scale):
    """The notebook's solution: a batched product, then torch.softmax."""
    scores = scale * (keys @ query.unsqueeze(-1)).squeeze(-1)
    return torch.softmax(scores, dim=-1)


def attention_weights_alt(query, keys, scale):
    """einsum scores and a softmax by hand that subtracts each row's maximum."""
    scores = torch.einsum("bsd,bd->bs", keys, query) * scale
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True)


def attention_weights_elementwise(query, keys, scale):
    """Element-wise products summed over the features, F.softmax."""
    return F.softmax((keys * query.unsqueeze(1)).sum(dim=-1) * scale, dim=1)


def masked_attention(query, keys, values, mask, scale):
    """The notebook's solution."""
    scores = scale * (keys @ query.unsqueeze(-1)).squeeze(-1)
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def masked_attention_where(query, keys, values, mask, scale):
    """torch.where with -inf, einsum for the average."""
    scores = torch.einsum("bsd,bd->bs", keys, query) * scale
    weights = torch.where(mask, scores, torch.full_like(scores, NEG_INF)).softmax(dim=-1)
    return torch.einsum("bs,bsv->bv", weights, values), weights


def masked_attention_renormalised(query, keys, values, mask, scale):
    """Mask after the softmax, then renormalise: the same weights when nothing underflows."""
    weights = torch.softmax(scale * (keys @ query[:, :, None])[..., 0], dim=-1) * mask
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return (weights[..., None] * values).sum(dim=1), weights


def masked_attention_loop(query, keys, values, mask, scale):
    """One row at a time, over the allowed keys only."""
    contexts, all_weights = [], []
    for b in range(query.shape[0]):
        allowed = mask[b].nonzero().squeeze(-1)  # (n,)
        scores = scale * (keys[b, allowed] @ query[b])  # (n,)
        weights = query.new_zeros(keys.shape[1])
        weights[allowed] = torch.softmax(scores, dim=0)
        contexts.append(weights @ values[b])
        all_weights.append(weights)
    return torch.stack(contexts), torch.stack(all_weights)


def additive_scores(query, keys, w_q, w_k, v, bias):
    """The notebook's solution."""
    hidden = (query @ w_q.T).unsqueeze(1) + keys @ w_k.T + bias
    return torch.tanh(hidden) @ v


def additive_scores_alt(query, keys, w_q, w_k, v, bias):
    """F.linear for the projections, einsum for v."""
    hidden = F.linear(query, w_q)[:, None, :] + F.linear(keys, w_k, bias)
    return torch.einsum("bsh,h->bs", hidden.tanh(), v)


def additive_scores_loop(query, keys, w_q, w_k, v, bias):
    """A loop over the keys, each scored for the whole batch."""
    projected = query @ w_q.T  # (B, Hd)
    columns = [torch.tanh(projected + keys[:, s] @ w_k.T + bias) @ v
               for s in range(keys.shape[1])]
    return torch.stack(columns, dim=1)


def decoder_step(embedding, state, encoder_states, mask, key_proj, lstm_params):
    """The notebook's solution, with this file's masked_attention."""
    h_prev, _ = state
    keys = encoder_states @ key_proj.T
    context, weights = masked_attention(h_prev, keys, encoder_states, mask,
                                        h_prev.shape[-1] ** -0.5)
    h_t, c_t = rnn.lstm_step(torch.cat([embedding, context], dim=-1), state, *lstm_params)
    return h_t, c_t, context, weights


def decoder_step_inline(embedding, state, encoder_states, mask, key_proj, lstm_params):
    """Everything written out: attention, then the LSTM arithmetic with the weights split."""
    h_prev, c_prev = state
    weight_ih, weight_hh, bias_ih, bias_hh = lstm_params
    keys = F.linear(encoder_states, key_proj)  # (B, S, Hs)
    scores = torch.einsum("bsh,bh->bs", keys, h_prev) / math.sqrt(h_prev.shape[-1])
    weights = scores.masked_fill(mask.logical_not(), NEG_INF).softmax(-1)
    context = torch.einsum("bs,bsv->bv", weights, encoder_states)
    E = embedding.shape[-1]
    pre = (embedding @ weight_ih[:, :E].T + context @ weight_ih[:, E:].T + bias_ih
           + h_prev @ weight_hh.T + bias_hh)
    i, f, g, o = pre.chunk(4, dim=-1)
    c_t = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_t), c_t, context, weights


CORRECT = {
    "3.1": [ch03.attention_weights, attention_weights, attention_weights_alt,
            attention_weights_elementwise],
    "3.2": [ch03.masked_attention, masked_attention, masked_attention_where,
            masked_attention_renormalised, masked_attention_loop],
    "3.3": [attention.additive_scores, additive_scores, additive_scores_alt,
            additive_scores_loop],
    "3.4": [ch03.decoder_step, decoder_step, decoder_step_inline],
}


# ---------------------------------------------------------------------------------------------
# Plausible wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------


def _scores(query, keys):
    return (keys @ query.unsqueeze(-1)).squeeze(-1)  # (B, S)


def weights_softmax_over_batch(query, keys, scale):
    return torch.softmax(scale * _scores(query, keys), dim=0)


def weights_naive_softmax(query, keys, scale):
    exps = torch.exp(scale * _scores(query, keys))
    return exps / exps.sum(dim=-1, keepdim=True)


def weights_no_scale(query, keys, scale):
    return torch.softmax(_scores(query, keys), dim=-1)


def weights_scale_divides(query, keys, scale):
    return torch.softmax(_scores(query, keys) / scale, dim=-1)


def weights_own_sqrt_d(query, keys, scale):
    return torch.softmax(_scores(query, keys) / math.sqrt(query.shape[-1]), dim=-1)


def weights_scale_after_softmax(query, keys, scale):
    return scale * torch.softmax(_scores(query, keys), dim=-1)


def weights_scores_only(query, keys, scale):
    return scale * _scores(query, keys)


def weights_every_pair(query, keys, scale):
    return torch.softmax(scale * query @ keys.transpose(1, 2), dim=-1)  # (B, B, S)


def weights_keys_at_query_t(query, keys, scale):
    return torch.softmax(scale * keys @ query.T, dim=1)  # (B, S, B)


def weights_keep_axis(query, keys, scale):
    return torch.softmax(scale * keys @ query.unsqueeze(-1), dim=1)  # (B, S, 1)


def weights_bmm_without_unsqueeze(query, keys, scale):
    return torch.softmax(scale * torch.bmm(keys, query), dim=-1)


def weights_squeeze_all(query, keys, scale):
    return torch.softmax(scale * (keys @ query.unsqueeze(-1)).squeeze(), dim=-1)


def attend_mask_after_softmax(query, keys, values, mask, scale):
    weights = torch.softmax(scale * _scores(query, keys), dim=-1) * mask
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def attend_mask_with_zero(query, keys, values, mask, scale):
    weights = torch.softmax(scale * _scores(query, keys) * mask, dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def attend_mask_times_inf(query, keys, values, mask, scale):
    scores = scale * _scores(query, keys)
    weights = torch.softmax(scores * mask + (~mask) * NEG_INF, dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def attend_mask_inverted(query, keys, values, mask, scale):
    weights = torch.softmax((scale * _scores(query, keys)).masked_fill(mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def attend_mask_ignored(query, keys, values, mask, scale):
    weights = torch.softmax(scale * _scores(query, keys), dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def attend_scale_on_values(query, keys, values, mask, scale):
    weights = torch.softmax(_scores(query, keys).masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ (scale * values)).squeeze(1), weights


def attend_scale_on_weights(query, keys, values, mask, scale):
    weights = scale * torch.softmax(_scores(query, keys).masked_fill(~mask, NEG_INF), dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def attend_plain_mean(query, keys, values, mask, scale):
    _, weights = masked_attention(query, keys, values, mask, scale)
    return values.mean(dim=1), weights


def attend_context_of_keys(query, keys, values, mask, scale):
    _, weights = masked_attention(query, keys, values, mask, scale)
    return (weights.unsqueeze(1) @ keys).squeeze(1), weights


def attend_batch_product(query, keys, values, mask, scale):
    _, weights = masked_attention(query, keys, values, mask, scale)
    return weights @ values, weights  # (B, S) @ (B, S, Dv) -> (B, B, Dv)


def attend_returns_weights_first(query, keys, values, mask, scale):
    context, weights = masked_attention(query, keys, values, mask, scale)
    return weights, context


def attend_softmax_over_batch(query, keys, values, mask, scale):
    scores = (scale * _scores(query, keys)).masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=0)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def additive_no_tanh(query, keys, w_q, w_k, v, bias):
    return ((query @ w_q.T).unsqueeze(1) + keys @ w_k.T + bias) @ v


def additive_no_bias(query, keys, w_q, w_k, v, bias):
    return torch.tanh((query @ w_q.T).unsqueeze(1) + keys @ w_k.T) @ v


def additive_weights_swapped(query, keys, w_q, w_k, v, bias):
    return torch.tanh((query @ w_k.T).unsqueeze(1) + keys @ w_q.T + bias) @ v


def additive_not_transposed(query, keys, w_q, w_k, v, bias):
    return torch.tanh((query @ w_q).unsqueeze(1) + keys @ w_k + bias) @ v


def additive_tanh_per_projection(query, keys, w_q, w_k, v, bias):
    return (torch.tanh(query @ w_q.T).unsqueeze(1) + torch.tanh(keys @ w_k.T + bias)) @ v


def additive_v_inside(query, keys, w_q, w_k, v, bias):
    return torch.tanh(((query @ w_q.T).unsqueeze(1) + keys @ w_k.T + bias) @ v)


def additive_summed_units(query, keys, w_q, w_k, v, bias):
    return torch.tanh((query @ w_q.T).unsqueeze(1) + keys @ w_k.T + bias).sum(dim=-1)


def additive_softmaxed(query, keys, w_q, w_k, v, bias):
    return torch.softmax(additive_scores(query, keys, w_q, w_k, v, bias), dim=-1)


def additive_query_not_broadcast(query, keys, w_q, w_k, v, bias):
    return torch.tanh(query @ w_q.T + keys @ w_k.T + bias) @ v


def additive_units_kept(query, keys, w_q, w_k, v, bias):
    return torch.tanh((query @ w_q.T).unsqueeze(1) + keys @ w_k.T + bias) * v  # (B, S, Hd)


def _step_with(attend, *, query="h", keys="projected", order="ec", context_of=None,
               again=False, swap=False, scale="Hs"):
    """A decoder step built from parts, some of them wrong."""

    def step(embedding, state, encoder_states, mask, key_proj, lstm_params):
        h_prev, c_prev = state
        projected = encoder_states @ key_proj.T
        q = {"h": h_prev, "c": c_prev, "embedding": embedding}[query]
        k = projected if keys == "projected" else encoder_states
        factor = {"Hs": h_prev.shape[-1] ** -0.5, "none": 1.0}[scale]
        context, weights = attend(q, k, encoder_states, mask, factor)
        if context_of is not None:
            context = context_of(encoder_states, mask)
        parts = [embedding, context] if order == "ec" else [context, embedding]
        h_t, c_t = rnn.lstm_step(torch.cat(parts, dim=-1), state, *lstm_params)
        if again:
            context, weights = attend(h_t, k, encoder_states, mask, factor)
        return (c_t, h_t, context, weights) if swap else (h_t, c_t, context, weights)

    return step


step_queries_with_cell = _step_with(masked_attention, query="c")
step_queries_with_cell.__name__ = "step_queries_with_cell"
step_queries_with_embedding = _step_with(masked_attention, query="embedding")
step_queries_with_embedding.__name__ = "step_queries_with_embedding"
step_ignores_mask = _step_with(attend_mask_ignored)
step_ignores_mask.__name__ = "step_ignores_mask"
step_no_scale = _step_with(masked_attention, scale="none")
step_no_scale.__name__ = "step_no_scale"
step_keys_not_projected = _step_with(masked_attention, keys="raw")
step_keys_not_projected.__name__ = "step_keys_not_projected"
step_context_first = _step_with(masked_attention, order="ce")
step_context_first.__name__ = "step_context_first"
step_plain_mean = _step_with(masked_attention, context_of=lambda values, mask: values.mean(1))
step_plain_mean.__name__ = "step_plain_mean"
step_attends_again = _step_with(masked_attention, again=True)
step_attends_again.__name__ = "step_attends_again"
step_returns_c_first = _step_with(masked_attention, swap=True)
step_returns_c_first.__name__ = "step_returns_c_first"
step_with_mask_after_softmax = _step_with(attend_mask_after_softmax)
step_with_mask_after_softmax.__name__ = "step_with_mask_after_softmax"


def step_without_context(embedding, state, encoder_states, mask, key_proj, lstm_params):
    h_prev, _ = state
    context, weights = masked_attention(h_prev, encoder_states @ key_proj.T, encoder_states,
                                        mask, h_prev.shape[-1] ** -0.5)
    h_t, c_t = rnn.lstm_step(embedding, state, *lstm_params)  # the context is not fed
    return h_t, c_t, context, weights


RUNTIME_HINTS = {task_id: checks.get_task(task_id).error_hints["RuntimeError"]
                 for task_id in TASK_IDS}

WRONG = {
    "3.1": [
        (weights_softmax_over_batch, ch03.HINT_SOFTMAX_DIM_0),
        (weights_naive_softmax, ch03.HINT_SOFTMAX_OVERFLOW),
        (weights_no_scale, ch03.HINT_SCALE_IGNORED),
        (weights_scale_divides, ch03.HINT_SCALE_DIVIDES),
        (weights_own_sqrt_d, ch03.HINT_SCALE_ARGUMENT),
        (weights_scale_after_softmax, ch03.HINT_SCALE_ON_WEIGHTS),
        (weights_scores_only, ch03.HINT_NO_SOFTMAX),
        (weights_every_pair, ch03.HINT_ALL_PAIRS),
        (weights_keys_at_query_t, ch03.HINT_ALL_PAIRS),
        (weights_keep_axis, ch03.HINT_SQUEEZE_KEEP),
        (weights_bmm_without_unsqueeze, RUNTIME_HINTS["3.1"]),
    ],
    "3.2": [
        (attend_mask_after_softmax, ch03.HINT_MASK_AFTER_SOFTMAX),
        (attend_mask_with_zero, ch03.HINT_MASK_ZERO),
        (attend_mask_times_inf, ch03.HINT_MASK_NAN),
        (attend_mask_inverted, ch03.HINT_MASK_INVERTED),
        (attend_mask_ignored, ch03.HINT_MASK_IGNORED),
        (attend_scale_on_values, ch03.HINT_SCALE_ON_VALUES),
        (attend_scale_on_weights, ch03.HINT_SCALE_ON_WEIGHTS),
        (attend_plain_mean, ch03.HINT_CONTEXT_MEAN),
        (attend_context_of_keys, ch03.HINT_OUT_KEYS),
        (attend_batch_product, ch03.HINT_CONTEXT_BATCH),
        (attend_returns_weights_first, ch03.HINT_CONTEXT_ORDER),
        (attend_softmax_over_batch, ch03.HINT_SOFTMAX_DIM_0),
    ],
    "3.3": [
        (additive_no_tanh, ch03.HINT_ADDITIVE_NO_TANH),
        (additive_no_bias, ch03.HINT_ADDITIVE_NO_BIAS),
        (additive_weights_swapped, ch03.HINT_ADDITIVE_SWAPPED),
        (additive_not_transposed, ch03.HINT_ADDITIVE_TRANSPOSE),
        (additive_tanh_per_projection, ch03.HINT_ADDITIVE_TANH_SPLIT),
        (additive_v_inside, ch03.HINT_ADDITIVE_V_INSIDE),
        (additive_summed_units, ch03.HINT_ADDITIVE_NO_V),
        (additive_softmaxed, ch03.HINT_ADDITIVE_SOFTMAX),
        (additive_query_not_broadcast, ch03.HINT_QUERY_BROADCAST),
        (additive_units_kept, ch03.HINT_ADDITIVE_NO_V),
    ],
    "3.4": [
        (step_queries_with_cell, ch03.HINT_STEP_QUERY_CELL),
        (step_queries_with_embedding, ch03.HINT_STEP_QUERY_EMBEDDING),
        (step_ignores_mask, ch03.HINT_STEP_MASK),
        (step_no_scale, ch03.HINT_STEP_SCALE),
        (step_keys_not_projected, ch03.HINT_STEP_KEYS),
        (step_context_first, ch03.HINT_STEP_INPUT_ORDER),
        (step_plain_mean, ch03.HINT_STEP_CONTEXT_MEAN),
        (step_attends_again, ch03.HINT_STEP_NEW_STATE),
        (step_returns_c_first, ch03.HINT_STEP_STATE_ORDER),
        (step_with_mask_after_softmax,
         f"{ch03.HINT_STEP_ATTENTION_WRONG} {ch03.HINT_MASK_AFTER_SOFTMAX}"),
        (step_without_context, "torch.cat([embedding, context], dim=-1), (B, E + Dv)"),
    ],
}

def stub(*args):
    raise NotImplementedError("Task 3.1: write attention_weights")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="03_attention",
    tasks={"3.1": ("attention_weights", 3, 7), "3.2": ("masked_attention", 5, 10),
           "3.3": ("additive_scores", 3, 7), "3.4": ("decoder_step", 3, 8)},
    hints=ch03,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=3,
    min_hidden=4,
    public_points=(2, 5),
    forbidden=("coursepkg.attention", "coursepkg.checks",
               "torch.nn.functional.scaled_dot_product_attention"),
    package="coursepkg.attention",
    not_finite_hint=ch03.HINT_NOT_FINITE,
    failure_reports=(
        ("3.2", attend_mask_after_softmax, "Task 3.2 masked_attention: 1/5 points",
         ("  FAIL  [0/1] a right-padded batch, lengths [5, 3, 1]: "
          + ch03.HINT_MASK_AFTER_SOFTMAX,)),
        ("3.1", weights_naive_softmax, "Task 3.1 attention_weights: 2/3 points",
         (ch03.HINT_SOFTMAX_OVERFLOW,)),
        ("3.3", additive_no_tanh, "Task 3.3 additive_scores: 0/3 points",
         (ch03.HINT_ADDITIVE_NO_TANH,)),
    ),
    more_hints=frozenset(f"{ch03.HINT_STEP_ATTENTION_WRONG} {hint}"
                         for hint, _ in ch03._attention_mistakes()),
    more_hidden_funcs=(weights_squeeze_all,),
    # where the widths differ, swapped or untransposed weights crash: the error's hint names
    # the shapes
    crashes_excused=True,
    wrong_types=(
        ("3.1", lambda *a: None,
         "Wrong return type: expected the weights as a torch.Tensor, got NoneType."),
        ("3.1", lambda *a: attention_weights(*a).tolist(), "got list"),
        ("3.1", lambda *a: attention_weights(*a).numpy(), "got ndarray"),
        ("3.1", lambda *a: attention_weights(*a).max(dim=-1), "a pair (values, indices)"),
        ("3.1", lambda *a: attention_weights(*a).argmax(dim=-1),
         "floating-point tensor, got dtype torch.int64"),
        ("3.2", lambda *a: masked_attention(*a)[0],
         "expected a pair (context, weights), got Tensor"),
        ("3.2", lambda *a: (*masked_attention(*a), None), "got a tuple of 3"),
        ("3.3", lambda *a: "scores", "expected the scores as a torch.Tensor, got str"),
        ("3.4", lambda *a: decoder_step(*a)[:2],
         "expected a tuple of 4 (h_t, c_t, context, weights), got a tuple of 2"),
        ("3.4", lambda *a: None, "got NoneType"),
    ),
    hidden_type_hints={"3.4": "Return the four tensors (h_t, c_t, context, weights)."},
    forged={"3.2": lambda good: forged_pairs(good, [2, 6], 10)},
    forbidden_calls={
        attention.attend: "coursepkg.attention",
        F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
        torch.nn.MultiheadAttention.forward: "torch.nn.MultiheadAttention",
    },
    allowed_calls=(torch.softmax, torch.Tensor.masked_fill,
                   rnn.lstm_step),  # chapter 2's step is allowed
)


# ---------------------------------------------------------------------------------------------
# The registry and the cases
# ---------------------------------------------------------------------------------------------


def _masks(task_id):
    task = checks.get_task(task_id)
    return [(case, task.build_args(case.args)[3]) for case in all_cases(task)]


def test_hidden_edge_cases_are_there():
    # 3.1: scores large enough to overflow a naive exp, public and hidden, in both dtypes
    large = [case for case in all_cases(checks.get_task("3.1")) if case.args["kind"] == "large"]
    assert {case.hidden for case in large} == {True, False}
    assert {case.args["dtype"] for case in large} == {"float32", "float64"}
    for case in large:
        query, keys, scale = checks.get_task("3.1").build_args(case.args)
        scores = scale * (keys @ query.unsqueeze(-1)).squeeze(-1)
        assert not torch.isfinite(torch.exp(scores)).any()
        assert torch.isfinite(torch.softmax(scores, dim=-1)).all()
    # 3.2 and 3.4: rows with a single allowed key, rows with every key allowed, every row
    # allows at least one key; shapes where S, D and Dv differ
    for task_id in ("3.2", "3.4"):
        masks = _masks(task_id)
        assert all((mask.sum(dim=1) >= 1).all() for _, mask in masks)
        assert any((mask.sum(dim=1) == 1).any() for case, mask in masks if not case.hidden)
        assert any((mask.sum(dim=1) == 1).all() for case, mask in masks if case.hidden)
        assert any(mask.all() for case, mask in masks if case.hidden)
    assert any(case.args["S"] != case.args["D"] != case.args["Dv"]
               for case in checks.get_task("3.2").public_cases)
    # 3.3 and 3.4: one public case where every width agrees (so that swapped or untransposed
    # weights give numbers to recognise) and others where they do not (so shapes expose them)
    squares = [case.args["Dq"] == case.args["Dk"] == case.args["Hd"]
               for case in checks.get_task("3.3").public_cases]
    assert True in squares and False in squares
    squares = [case.args["E"] == case.args["Hs"] == case.args["Dv"]
               for case in checks.get_task("3.4").public_cases]
    assert True in squares and False in squares
    # every task: a batch of one and a single key
    for task_id in TASK_IDS:
        hidden = hidden_cases(checks.get_task(task_id))
        assert any(case.args["B"] == 1 for case in hidden), task_id
        assert any(case.args["S"] == 1 for case in hidden), task_id


def test_inputs_are_reproducible_and_fresh():
    task = checks.get_task("3.4")
    case = task.cases[0]
    first, second = task.build_args(case.args), task.build_args(case.args)
    assert torch.equal(first[0], second[0]) and first[0] is not second[0]
    assert torch.equal(first[1][1], second[1][1])
    assert all(torch.equal(a, b) for a, b in zip(first[5], second[5], strict=True))
    float64 = task.build_args({**case.args, "dtype": "float64"})
    assert float64[2].dtype == torch.float64
    torch.testing.assert_close(float64[2].float(), first[2])


def test_the_lecture_example_by_hand():
    key_a, key_b = [1.0, 0.0], [0.0, 1.0]
    keys = torch.tensor([[key_a, key_a, key_b, key_a]], dtype=torch.float64)
    weights = ch03.attention_weights(torch.tensor([[0.0, 1.0]], dtype=torch.float64), keys, 1.0)
    e = math.e
    torch.testing.assert_close(weights[0], torch.tensor([1, 1, e, 1], dtype=torch.float64)
                               / (3 + e))
    mask = torch.tensor([[True, True, False, True]])
    context, weights = ch03.masked_attention(torch.tensor([[0.0, 10.0]], dtype=torch.float64),
                                             keys, keys, mask, 1.0)
    torch.testing.assert_close(weights[0], torch.tensor([1 / 3, 1 / 3, 0.0, 1 / 3],
                                                        dtype=torch.float64))
    assert weights[0, 2].item() == 0.0
    torch.testing.assert_close(context[0], torch.tensor([1.0, 0.0], dtype=torch.float64))


def test_references_agree_with_torch():
    task = checks.get_task("3.2")
    for case in task.cases:
        query, keys, values, mask, scale = task.build_args({**case.args, "dtype": "float64"})
        context, weights = ch03.masked_attention(query, keys, values, mask, scale)
        expected = F.scaled_dot_product_attention(query[:, None], keys, values,
                                                  attn_mask=mask[:, None], scale=scale)
        torch.testing.assert_close(context, expected[:, 0])
        torch.testing.assert_close(weights.sum(dim=-1), torch.ones_like(weights[:, 0]))
        assert (weights[~mask] == 0).all()

    additive = checks.get_task("3.3")
    query, keys, w_q, w_k, v, bias = additive.build_args(
        {**additive.cases[0].args, "dtype": "float64"})
    by_formula = torch.tensor([[v @ torch.tanh(w_q @ query[b] + w_k @ keys[b, s] + bias)
                                for s in range(keys.shape[1])] for b in range(keys.shape[0])],
                              dtype=torch.float64)
    torch.testing.assert_close(attention.additive_scores(query, keys, w_q, w_k, v, bias),
                               by_formula)


def test_decoder_step_reference_is_a_step_of_the_seq2seq_model():
    source, target = SeqCodec(string.ascii_letters + string.digits + " ,./"), SeqCodec("0123-")
    pairs = dates_task(3, generator=torch.Generator().manual_seed(5))
    src, src_lengths = source.encode_batch([text for text, _ in pairs])
    tgt_in = torch.tensor([[1, 3, 4], [1, 5, 6], [1, 7, 3]])
    torch.manual_seed(0)
    model = attention.Seq2Seq(source.vocab_size, target.vocab_size, d_embed=6, d_hidden=5,
                              attention="dot").double()
    with torch.no_grad():
        expected = model(src, src_lengths, tgt_in)  # (B, T, V)
        states, summary, mask = model.encode(src, src_lengths)
        h, c = torch.tanh(model.bridge(summary)).chunk(2, dim=-1)
        for t in range(tgt_in.shape[1]):
            h, c, context, weights = ch03.decoder_step(
                model.tgt_embed(tgt_in[:, t]), (h, c), states, mask, model.key_proj.weight,
                model.decoder.cell_parameters(0))
            torch.testing.assert_close(model.out(torch.cat([h, context], dim=-1)),
                                       expected[:, t])
            assert (weights[~mask] == 0).all()


# ---------------------------------------------------------------------------------------------
# Correct implementations: full marks
# ---------------------------------------------------------------------------------------------


def test_float64_computation_of_float32_inputs_is_close_enough():
    def via_float64(query, keys, values, mask, scale):
        context, weights = masked_attention(query.double(), keys.double(), values.double(),
                                            mask, scale)
        return context.to(query.dtype), weights.to(query.dtype)

    assert run_task("3.2", via_float64, hidden=True).status == "passed"


def test_a_minus_1e9_mask_passes_too():
    """The book uses float("-inf"); a large negative number gives the same weights here."""
    def big_negative(query, keys, values, mask, scale):
        scores = (scale * _scores(query, keys)).masked_fill(~mask, -1e9)
        weights = torch.softmax(scores, dim=-1)
        return (weights.unsqueeze(1) @ values).squeeze(1), weights

    assert run_task("3.2", big_negative, hidden=True).status == "passed"


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


def test_shapes_name_the_mistake_where_values_cannot():
    """Where the widths differ, swapped or untransposed weights cannot even run: the error's
    hint names the shapes. Where they agree, the numbers name the mistake."""
    for func in (additive_weights_swapped, additive_not_transposed):
        result = run_task("3.3", func)
        statuses = [case.status for case in result.cases]
        assert statuses[1] == "failed" and "error" in statuses, (func.__name__, statuses)
        assert all("query @ w_q.T" in case.message for case in result.cases)
    result = run_task("3.4", step_queries_with_embedding)
    assert [case.status for case in result.cases] == ["error", "failed", "error"]


def test_public_failures_show_the_specifics():
    result = run_task("3.1", weights_every_pair)
    assert result.cases[0].message.endswith("Expected weights of shape (2, 5), got (2, 2, 5).")
    result = run_task("3.1", weights_no_scale)
    detail = result.cases[0].message.removeprefix(ch03.HINT_SCALE_IGNORED).strip()
    assert detail.startswith("weights[") and "expected" in detail and "values differ)." in detail
    result = run_task("3.2", attend_returns_weights_first)
    assert "Expected context of shape (2, 5), got (2, 4)." in result.cases[0].message
    result = run_task("3.1", weights_naive_softmax)
    large = result.cases[2]
    assert large.status == "failed" and "got nan" in large.message
    assert [case.status for case in result.cases[:2]] == ["passed", "passed"]


def test_the_squeeze_of_every_axis_fails_only_on_the_hidden_edge_cases():
    result = run_task("3.1", weights_squeeze_all, hidden=True)
    bad = {case.name: case for case in result.cases if case.status != "passed"}
    assert set(bad) == {"hidden: a batch of one", "hidden: a single key"}
    assert {case.message for case in bad.values()} == {ch03.HINT_SQUEEZE_ALL}


def test_dtype_mismatch_is_named_in_the_float64_case():
    def float32_weights(query, keys, scale):
        return attention_weights(query, keys, scale).float()

    result = run_task("3.1", float32_weights, hidden=True)
    failed = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in failed] == ["hidden: float64", "hidden: large scores in float64"]
    assert {case.message for case in failed} == {ch03.HINT_DTYPE}
    task = checks.get_task("3.3")
    case = core.Case("public float64", 1, {**task.cases[0].args, "dtype": "float64"})
    result = checks.evaluate_case(task, case, lambda *args: additive_scores(*args).float())
    assert "Expected scores of dtype torch.float64, got torch.float32." in result.message


def test_a_crash_on_an_edge_case_costs_only_that_case():
    def no_single_key(query, keys, values, mask, scale):
        if keys.shape[1] == 1:
            raise IndexError("index 1 is out of bounds")
        return masked_attention(query, keys, values, mask, scale)

    result = run_task("3.2", no_single_key, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == ["hidden: a single key"]
    assert bad[0].status == "error" and bad[0].message.startswith("raised IndexError.")


def test_exceptions_become_errors_with_hints():
    result = run_task("3.1", weights_bmm_without_unsqueeze)
    assert {case.status for case in result.cases} == {"error"}
    assert all(case.message.startswith("raised RuntimeError: ") for case in result.cases)
    assert all("\n" not in case.message for case in result.cases)
    result = run_task("3.4", step_without_context)
    assert {case.status for case in result.cases} == {"error"}
    assert all("weight_ih (4 Hs, E + Dv)" in case.message for case in result.cases)


def test_a_tensor_that_requires_grad_or_is_a_view_is_fine():
    def with_grad(query, keys, w_q, w_k, v, bias):
        return additive_scores(query, keys, torch.nn.Parameter(w_q.clone()), w_k, v, bias)

    def weights_as_view(query, keys, values, mask, scale):
        context, weights = masked_attention(query, keys, values, mask, scale)
        return context, weights[:, :]

    assert run_task("3.3", with_grad, hidden=True).status == "passed"
    assert run_task("3.2", weights_as_view, hidden=True).status == "passed"


def test_torchs_lstm_cell_is_forbidden_in_the_decoder_step():
    from coursepkg.checks.forbidden import Tripwire

    step = Tripwire(checks.get_task("3.4"))
    assert step.forbidden_callable(torch.lstm_cell) == "torch.lstm_cell"
    assert step.forbidden_callable(torch.nn.LSTMCell.forward) == "torch.nn.LSTMCell"
    assert step.forbidden_callable(rnn.lstm_step) is None  # chapter 2's step is allowed


# ---------------------------------------------------------------------------------------------
# The split used by the grader: student half, JSON, trusted half
# ---------------------------------------------------------------------------------------------


def test_nan_survives_the_trip_through_json():
    """The naive softmax's NaN goes through the worker's JSON and still gets its hint."""
    task = checks.get_task("3.1")
    case = task.cases[2]
    plain = checks.student_output(task, case, weights_naive_softmax)
    sent = json.loads(json.dumps(plain, allow_nan=True))
    result = checks.grade_output(task, case, sent)
    assert result.status == "failed" and result.message.startswith(ch03.HINT_SOFTMAX_OVERFLOW)


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


def test_check_a_function_that_raises(capsys):
    def broken(query, keys, scale):
        return keys @ query  # shapes that do not fit

    out = check_output(capsys, "3.1", broken)
    assert "ERROR [0/1]" in out and "raised RuntimeError: " in out
    assert "keys @ query.unsqueeze(-1)" in out
