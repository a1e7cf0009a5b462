"""The checks of chapter 2 (coursepkg.checks.ch02_rnn): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, hidden_cases, run_task

from coursepkg import checks, rnn
from coursepkg.checks import ch02_rnn as ch02
from coursepkg.checks import core

# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def elman_step(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    """The notebook's solution: the products, the biases, one tanh."""
    return torch.tanh(x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh)


def elman_step_alt(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    """One product of the concatenated input and state with the concatenated weights."""
    xh = torch.cat([x_t, h_prev], dim=1)  # (B, I + Hs)
    weights = torch.cat([weight_ih, weight_hh], dim=1)  # (Hs, I + Hs)
    return F.linear(xh, weights, bias_ih + bias_hh).tanh()


def run_rnn_alt(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    """Input projections for all steps at once, a preallocated output, an in-place fill."""
    B, T, _ = x.shape
    projected = torch.einsum("bti,hi->bth", x, weight_ih) + bias_ih  # (B, T, Hs)
    outputs = x.new_empty(B, T, h0.shape[1])
    h = h0
    for t in range(T):
        h = torch.tanh(projected[:, t] + torch.addmm(bias_hh, h, weight_hh.T))
        outputs[:, t] = h
    return outputs, outputs[:, -1]


def lstm_step_alt(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    """One gate at a time, from slices of the weights."""
    h_prev, c_prev = state
    Hs = h_prev.shape[1]

    def gate(k):
        rows = slice(k * Hs, (k + 1) * Hs)
        return (F.linear(x_t, weight_ih[rows], bias_ih[rows])
                + F.linear(h_prev, weight_hh[rows], bias_hh[rows]))

    i, f, o = torch.sigmoid(gate(0)), torch.sigmoid(gate(1)), torch.sigmoid(gate(3))
    g = torch.tanh(gate(2))
    c_t = torch.addcmul(f * c_prev, i, g)
    return o * c_t.tanh(), c_t


def pool_outputs_alt(out, lengths, how):
    """A Python loop over the rows, slicing off each row's padding."""
    rows = []
    for b in range(out.shape[0]):
        real = out[b, : int(lengths[b])]  # (L_b, F)
        if how == "last":
            rows.append(real[-1])
        elif how == "mean":
            rows.append(real.mean(dim=0))
        else:
            rows.append(real.max(dim=0).values)
    return torch.stack(rows)


def run_rnn_with(step):
    def run(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
        h, states = h0, []
        for t in range(x.shape[1]):
            h = step(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
            states.append(h)
        return torch.stack(states, dim=1), h

    run.__name__ = f"run_rnn_with_{step.__name__}"
    return run


CORRECT = {
    "2.1": [rnn.elman_step, elman_step, elman_step_alt],
    "2.2": [ch02.run_rnn, run_rnn_with(elman_step), run_rnn_alt],
    "2.3": [rnn.lstm_step, lstm_step_alt],
    "2.4": [ch02.pool_outputs, pool_outputs_alt],
}


# ---------------------------------------------------------------------------------------------
# Plausible wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------


def elman_no_bias(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch.tanh(x_t @ weight_ih.T + h_prev @ weight_hh.T)


def elman_one_bias(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch.tanh(x_t @ weight_ih.T + h_prev @ weight_hh.T + bias_hh)


def elman_no_tanh(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh


def elman_tanh_on_recurrent_term(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return x_t @ weight_ih.T + bias_ih + torch.tanh(h_prev @ weight_hh.T + bias_hh)


def elman_tanh_on_input(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch.tanh(x_t) @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh


def elman_sigmoid(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch.sigmoid(x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh)


def elman_recurrent_weights_not_transposed(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch.tanh(x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh + bias_hh)


def elman_weights_not_transposed(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch.tanh(x_t @ weight_ih + bias_ih + h_prev @ weight_hh + bias_hh)


def elman_column_vectors(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    """The textbook's column-vector form, W x, without turning the result back: (Hs, B)."""
    pre = weight_ih @ x_t.T + weight_hh @ h_prev.T + (bias_ih + bias_hh)[:, None]
    return torch.tanh(pre)


def run_h0_every_step(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    states = [elman_step(x[:, t], h0, weight_ih, weight_hh, bias_ih, bias_hh)
              for t in range(x.shape[1])]
    return torch.stack(states, dim=1), states[-1]


def run_time_major(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = elman_step(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
        states.append(h)
    return torch.stack(states), h  # (T, B, Hs)


def run_last_state_only(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    h = h0
    for t in range(x.shape[1]):
        h = elman_step(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
    return h, h


def run_store_before_step(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    h, states = h0, []
    for t in range(x.shape[1]):
        states.append(h)
        h = elman_step(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
    return torch.stack(states, dim=1), h


def run_from_zeros(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    return run_rnn_with(elman_step)(x, torch.zeros_like(h0), weight_ih, weight_hh, bias_ih,
                                    bias_hh)


def run_returns_h0(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    outputs, _ = run_rnn_with(elman_step)(x, h0, weight_ih, weight_hh, bias_ih, bias_hh)
    return outputs, h0


def run_torch_style_final_state(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    outputs, h = run_rnn_with(elman_step)(x, h0, weight_ih, weight_hh, bias_ih, bias_hh)
    return outputs, h.unsqueeze(0)  # (1, B, Hs) like torch.nn.RNN's h_n


def run_float32_buffer(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    B, T, _ = x.shape
    outputs = torch.zeros(B, T, h0.shape[1])  # float32 whatever the inputs' dtype
    h = h0
    for t in range(T):
        h = elman_step(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
        outputs[:, t] = h
    return outputs, outputs[:, -1]


run_with_step_without_bias = run_rnn_with(elman_no_bias)
run_with_step_without_bias.__name__ = "run_with_step_without_bias"


def _lstm_pre(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh


def lstm_textbook_gate_order(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    i, f, o, g = _lstm_pre(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh).chunk(4, dim=1)
    i, f, o, g = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(g)
    c_t = f * c_prev + i * g
    return o * torch.tanh(c_t), c_t


def lstm_cell_from_h(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    i, f, g, o = _lstm_pre(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh).chunk(4, dim=1)
    c_t = torch.sigmoid(f) * h_prev + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_t), c_t


def lstm_no_tanh_on_c(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    i, f, g, o = _lstm_pre(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh).chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * c_t, c_t


def lstm_old_c_in_output(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    i, f, g, o = _lstm_pre(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh).chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_prev), c_t


def lstm_sigmoid_everywhere(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    pre = _lstm_pre(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh)
    i, f, g, o = torch.sigmoid(pre).chunk(4, dim=1)
    c_t = f * c_prev + i * g
    return o * torch.tanh(c_t), c_t


def lstm_returns_c_then_h(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_t, c_t = lstm_step_alt(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh)
    return c_t, h_t


def lstm_no_bias(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    i, f, g, o = (x_t @ weight_ih.T + h_prev @ weight_hh.T).chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_t), c_t


def lstm_forget_complement(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    i, f, g, o = _lstm_pre(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh).chunk(4, dim=1)
    f = torch.sigmoid(f)
    c_t = (1 - f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_t), c_t


def lstm_gates_not_split(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    pre = _lstm_pre(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh)
    return torch.tanh(pre), pre


def pool_last_at_t_minus_1(out, lengths, how):
    if how == "last":
        return out[:, -1]
    return pool_outputs_alt(out, lengths, how)


def pool_last_at_lengths(out, lengths, how):
    if how == "last":
        return out[torch.arange(out.shape[0]), lengths]
    return pool_outputs_alt(out, lengths, how)


def pool_last_broadcast_index(out, lengths, how):
    if how == "last":
        return out[:, lengths - 1]
    return pool_outputs_alt(out, lengths, how)


def pool_mean_with_padding(out, lengths, how):
    if how == "mean":
        return out.mean(dim=1)
    return pool_outputs_alt(out, lengths, how)


def pool_mean_divides_by_t(out, lengths, how):
    if how == "mean":
        mask = (torch.arange(out.shape[1])[None, :] < lengths[:, None]).unsqueeze(-1)
        return (out * mask).sum(dim=1) / out.shape[1]
    return pool_outputs_alt(out, lengths, how)


def pool_max_with_padding(out, lengths, how):
    if how == "max":
        return out.amax(dim=1)
    return pool_outputs_alt(out, lengths, how)


def pool_max_zero_fill(out, lengths, how):
    if how == "max":
        mask = torch.arange(out.shape[1])[None, :] < lengths[:, None]
        return (out * mask.unsqueeze(-1)).max(dim=1).values
    return pool_outputs_alt(out, lengths, how)


def pool_max_returns_namedtuple(out, lengths, how):
    if how == "max":
        mask = torch.arange(out.shape[1])[None, :] < lengths[:, None]
        return out.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(dim=1)
    return pool_outputs_alt(out, lengths, how)


def pool_ignores_how(out, lengths, how):
    return pool_outputs_alt(out, lengths, "mean")


def pool_over_features(out, lengths, how):
    return out.mean(dim=-1)


WRONG = {
    "2.1": [
        (elman_no_bias, ch02.HINT_NO_BIAS),
        (elman_one_bias, ch02.HINT_ONE_BIAS),
        (elman_no_tanh, ch02.HINT_NO_TANH),
        (elman_tanh_on_recurrent_term, ch02.HINT_TANH_PARTIAL),
        (elman_tanh_on_input, ch02.HINT_TANH_ON_INPUT),
        (elman_sigmoid, ch02.HINT_OTHER_NONLINEARITY),
        (elman_recurrent_weights_not_transposed, ch02.HINT_TRANSPOSE),
        (elman_weights_not_transposed, ch02._ELMAN_ERROR_HINTS["RuntimeError"]),
        (elman_column_vectors, ch02.HINT_ELMAN_SHAPE),
    ],
    "2.2": [
        (run_h0_every_step, ch02.HINT_H0_REUSED),
        (run_time_major, ch02.HINT_TIME_MAJOR),
        (run_last_state_only, ch02.HINT_OUTPUTS_NOT_COLLECTED),
        (run_store_before_step, ch02.HINT_OUTPUTS_SHIFTED),
        (run_from_zeros, ch02.HINT_H0_IGNORED),
        (run_returns_h0, ch02.HINT_H_T),
        (run_torch_style_final_state, ch02.HINT_H_T_SHAPE),
        (run_with_step_without_bias, f"{ch02.HINT_STEP_WRONG} {ch02.HINT_NO_BIAS}"),
    ],
    "2.3": [
        (lstm_textbook_gate_order, ch02.HINT_GATE_ORDER),
        (lstm_cell_from_h, ch02.HINT_C_FROM_H),
        (lstm_no_tanh_on_c, ch02.HINT_NO_TANH_C),
        (lstm_old_c_in_output, ch02.HINT_OLD_C),
        (lstm_sigmoid_everywhere, ch02.HINT_GATE_NONLINEARITY),
        (lstm_returns_c_then_h, ch02.HINT_STATE_ORDER),
        (lstm_no_bias, ch02.HINT_NO_BIAS),
        (lstm_forget_complement, ch02.HINT_FORGET_MEANING),
        (lstm_gates_not_split, ch02.HINT_GATES_NOT_SPLIT),
    ],
    "2.4": [
        (pool_last_at_t_minus_1, ch02.HINT_LAST_AT_T),
        (pool_last_at_lengths, "last real output of row b is at"),
        (pool_last_broadcast_index, ch02.HINT_LAST_INDEXING),
        (pool_mean_with_padding, ch02.HINT_MEAN_PADDING),
        (pool_mean_divides_by_t, ch02.HINT_MEAN_DENOMINATOR),
        (pool_max_with_padding, ch02.HINT_MAX_PADDING),
        (pool_max_zero_fill, ch02.HINT_MAX_ZERO_FILL),
        (pool_max_returns_namedtuple, "take its .values"),
        (pool_ignores_how, ch02.HINT_WRONG_MODE),
        (pool_over_features, ch02.HINT_POOL_DIM),
    ],
}

def stub(*args):
    raise NotImplementedError("Task 2.1: write elman_step")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="02_rnn",
    tasks={"2.1": ("elman_step", 3, 7), "2.2": ("run_rnn", 3, 7), "2.3": ("lstm_step", 4, 8),
           "2.4": ("pool_outputs", 4, 8)},
    hints=ch02,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=3,
    min_hidden=4,
    public_points=(2, 4),
    forbidden=("coursepkg.rnn", "coursepkg.checks"),
    package="coursepkg.rnn",
    not_finite_hint=ch02.HINT_NOT_FINITE,
    failure_reports=(
        ("2.2", run_h0_every_step, "Task 2.2 run_rnn: 0/3 points",
         ("  FAIL  [0/1] 3 sequences of 4 steps from h0 = 0: " + ch02.HINT_H0_REUSED,)),
        ("2.4", pool_mean_with_padding, "Task 2.4 pool_outputs: 3/4 points",
         (ch02.HINT_MEAN_PADDING,)),
        ("2.3", lstm_textbook_gate_order, "Task 2.3 lstm_step: 0/4 points",
         (ch02.HINT_GATE_ORDER,)),
    ),
    more_hints=frozenset(f"{ch02.HINT_STEP_WRONG} {hint}" for hint, _ in ch02._elman_mistakes()),
    wrong_types=(
        ("2.1", lambda *a: None,
         "Wrong return type: expected h_t as a torch.Tensor, got NoneType."),
        ("2.1", lambda *a: elman_step_alt(*a).tolist(), "expected h_t as a torch.Tensor, got list"),
        ("2.1", lambda *a: elman_step_alt(*a).numpy(), "got ndarray"),
        ("2.1", lambda *a: (elman_step_alt(*a),), "got tuple"),
        ("2.1", lambda *a: elman_step_alt(*a).long(),
         "floating-point tensor, got dtype torch.int64"),
        ("2.2", lambda *a: run_rnn_alt(*a)[0], "expected a pair (outputs, h_T), got Tensor"),
        ("2.2", lambda *a: (*run_rnn_alt(*a), None), "got a tuple of 3"),
        ("2.2", lambda *a: (run_rnn_alt(*a)[0], 1.0), "expected h_T as a torch.Tensor, got float"),
        ("2.3", lambda *a: None, "expected a pair (h_t, c_t), got NoneType"),
        ("2.4", lambda *a: "mean", "expected the pooled tensor as a torch.Tensor, got str"),
    ),
    hidden_type_hints={"2.2": "Return a pair (outputs, h_T) of tensors."},
    forged={
        "2.1": lambda good: [
            {"shape": [2, 4], "dtype": "float32"}, {**good, "shape": [2, 5]},
            {**good, "shape": [-8, -1]}, {**good, "data": ["0.5"] * 8},
            {**good, "data": [True] * 8}, {**good, "dtype": 3}, {**good, "extra": 1},
        ],
        "2.2": lambda pair: [[pair[0]], [pair[0], pair[1], pair[1]], [pair[1], pair[0]]],
    },
    forbidden_calls={rnn.elman_step: None, rnn.lstm_step: None},
    allowed_calls=(torch.sigmoid, torch.tanh, torch.Tensor.split),  # a student may split
)


# ---------------------------------------------------------------------------------------------
# The registry and the cases
# ---------------------------------------------------------------------------------------------


def test_hidden_edge_cases_are_there():
    run_cases = hidden_cases(checks.get_task("2.2"))
    assert any(case.args["T"] == 1 for case in run_cases)
    assert any(case.args["B"] == 1 for case in run_cases)
    pool_cases = all_cases(checks.get_task("2.4"))
    assert any(case.args["T"] == 1 for case in pool_cases if case.hidden)
    assert any(case.args["B"] == 1 for case in pool_cases if case.hidden)
    # "last" is tested with a row at full length (lengths[b] instead of lengths[b] - 1 crashes
    # there) and without one (where it gives wrong values instead)
    last = [case.args for case in pool_cases if case.args["how"] == "last" and not case.hidden]
    assert {max(args["lengths"]) == args["T"] for args in last} == {True, False}
    assert {case.args["how"] for case in pool_cases if not case.hidden} == {"last", "mean", "max"}
    for task_id in ("2.1", "2.2", "2.3"):  # a batch of one
        assert any(case.args["B"] == 1 for case in hidden_cases(checks.get_task(task_id)))


def test_inputs_are_reproducible_and_fresh():
    task = checks.get_task("2.3")
    case = task.cases[0]
    first, second = task.build_args(case.args), task.build_args(case.args)
    assert torch.equal(first[0], second[0]) and first[0] is not second[0]
    assert torch.equal(first[1][1], second[1][1])
    float64 = task.build_args({**case.args, "dtype": "float64"})
    assert float64[0].dtype == torch.float64
    torch.testing.assert_close(float64[0].float(), first[0])


def test_references_agree_with_torch():
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    task = checks.get_task("2.2")
    x, h0, *params = task.build_args({**task.cases[0].args, "dtype": "float64"})
    outputs, h_T = ch02.run_rnn(x, h0, *params)
    assert torch.equal(torch.random.get_rng_state(), before)  # the global RNG is untouched
    reference = torch.nn.RNN(x.shape[-1], h0.shape[-1], batch_first=True).double()
    with torch.no_grad():
        for name, value in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"),
                               params, strict=True):
            getattr(reference, name).copy_(value)
        expected, h_n = reference(x, h0[None])
    torch.testing.assert_close(outputs, expected)
    torch.testing.assert_close(h_T, h_n[0])

    lstm = checks.get_task("2.3")
    x_t, (h, c), *params = lstm.build_args({**lstm.cases[0].args, "dtype": "float64"})
    cell = torch.nn.LSTMCell(x_t.shape[-1], h.shape[-1]).double()
    with torch.no_grad():
        for name, value in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), params,
                               strict=True):
            getattr(cell, name).copy_(value)
        expected_h, expected_c = cell(x_t, (h, c))
    got_h, got_c = rnn.lstm_step(x_t, (h, c), *params)
    torch.testing.assert_close(got_h, expected_h)
    torch.testing.assert_close(got_c, expected_c)


def test_pool_reference_by_hand():
    out = torch.tensor([[[1.0], [-2.0], [9.0]], [[-1.0], [-3.0], [5.0]]])  # (2, 3, 1)
    lengths = torch.tensor([2, 1])
    assert ch02.pool_outputs(out, lengths, "last").tolist() == [[-2.0], [-1.0]]
    assert ch02.pool_outputs(out, lengths, "mean").tolist() == [[-0.5], [-1.0]]
    assert ch02.pool_outputs(out, lengths, "max").tolist() == [[1.0], [-1.0]]


# ---------------------------------------------------------------------------------------------
# Correct implementations: full marks
# ---------------------------------------------------------------------------------------------


def test_float64_computation_of_float32_inputs_is_close_enough():
    def via_float64(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
        args = [t.double() for t in (x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh)]
        return elman_step(*args).to(x_t.dtype)

    assert run_task("2.1", via_float64, hidden=True).status == "passed"


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


def test_public_failures_show_the_specifics():
    result = run_task("2.2", run_time_major)
    assert "Expected outputs of shape (2, 5, 4), got (5, 2, 4)." in result.cases[0].message
    result = run_task("2.1", elman_column_vectors)
    assert result.cases[0].message.endswith("Expected h_t of shape (2, 4), got (4, 2).")
    result = run_task("2.1", elman_no_bias)
    detail = result.cases[0].message.removeprefix(ch02.HINT_NO_BIAS).strip()
    assert detail.startswith("h_t[") and "expected" in detail and "values differ)." in detail
    result = run_task("2.3", lstm_textbook_gate_order)
    assert "Your result matches the gate order i, f, o, g." in result.cases[0].message
    result = run_task("2.4", pool_ignores_how)
    last = result.cases[0]
    assert last.status == "failed" and 'Your result is the "mean" pooling.' in last.message


def test_dtype_mismatch_is_named_in_the_float64_case():
    result = run_task("2.2", run_float32_buffer, hidden=True)
    statuses = {case.name: case.status for case in result.cases}
    float64 = next(case for case in result.cases if case.name == "hidden: float64")
    assert float64.status == "failed" and float64.message == ch02.HINT_DTYPE
    assert [name for name, status in statuses.items() if status != "passed"] == [float64.name]
    # and in a public case, the dtypes are named
    task = checks.get_task("2.1")
    case = core.Case("public float64", 1, {**task.cases[0].args, "dtype": "float64"})
    result = checks.evaluate_case(task, case, lambda *args: elman_step(*args).float())
    assert "Expected h_t of dtype torch.float64, got torch.float32." in result.message


def test_a_crash_on_an_edge_case_costs_only_that_case():
    def no_single_step(x, h0, *params):
        if x.shape[1] == 1:
            raise IndexError("index 1 is out of bounds")
        return run_rnn_with(elman_step)(x, h0, *params)

    result = run_task("2.2", no_single_step, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == ["hidden: one time step"]
    assert bad[0].status == "error" and "loop over t in range(x.shape[1])" in bad[0].message


def test_exceptions_become_errors_with_hints():
    result = run_task("2.1", elman_weights_not_transposed)
    errors = [case for case in result.cases if case.status == "error"]
    assert errors and all(case.message.startswith("raised RuntimeError: ") for case in errors)
    assert all("\n" not in case.message for case in result.cases)
    result = run_task("2.4", pool_last_at_lengths)
    full = result.cases[0]
    assert full.status == "error" and full.message.startswith("raised IndexError:")


def test_a_tensor_that_requires_grad_or_is_a_view_is_fine():
    def with_grad(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
        weight_ih = torch.nn.Parameter(weight_ih.clone())
        return elman_step(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh)

    def last_as_view(x, h0, *params):
        outputs, _ = run_rnn_with(elman_step)(x, h0, *params)
        return outputs, outputs[:, -1]

    assert run_task("2.1", with_grad, hidden=True).status == "passed"
    assert run_task("2.2", last_as_view, hidden=True).status == "passed"


def test_torchs_lstm_cell_is_forbidden_in_the_lstm_step():
    from coursepkg.checks.forbidden import Tripwire

    tripwire = Tripwire(checks.get_task("2.3"))
    assert tripwire.forbidden_callable(torch.lstm_cell) == "torch.lstm_cell"
    assert tripwire.forbidden_callable(torch._VF.lstm_cell) == "torch.lstm_cell"
    assert tripwire.forbidden_callable(torch.nn.LSTMCell.forward) == "torch.nn.LSTMCell"


# ---------------------------------------------------------------------------------------------
# The split used by the grader: student half, JSON, trusted half
# ---------------------------------------------------------------------------------------------


def test_sending_bigger_numbers_than_float32_holds_is_judged_on_values():
    task = checks.get_task("2.1")
    case = task.cases[0]
    good = checks.student_output(task, case, rnn.elman_step)
    nudged = {**good, "data": [v + 1e-3 for v in good["data"]]}
    result = checks.grade_output(task, case, nudged)
    assert result.status == "failed"
    assert result.message.startswith(ch02.HINT_ELMAN_GENERIC)


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


def test_check_a_function_that_raises(capsys):
    def broken(x_t, h_prev, *params):
        return x_t @ h_prev  # shapes that do not fit

    out = check_output(capsys, "2.1", broken)
    assert "ERROR [0/1]" in out and "raised RuntimeError: " in out
    assert "x_t @ weight_ih.T and h_prev @ weight_hh.T." in out
