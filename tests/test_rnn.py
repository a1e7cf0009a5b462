"""Tests of coursepkg.rnn: parity with torch.nn.RNN / torch.nn.LSTM, hand-computed steps,
gradient checks, properties (causality, padding never matters), errors, and overfitting."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from coursepkg.data import ab_task
from coursepkg.rnn import (
    LSTM,
    RNNLM,
    ElmanRNN,
    LSTMGates,
    elman_step,
    lstm_gates,
    lstm_step,
    pool,
)

SMALL = settings(max_examples=12, deadline=None, derandomize=True)
F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


# ----------------------------------------------------------------------------- parity helpers
def make_pair(kind, input_size, hidden_size, *, dtype=F64, seed=0, **kwargs):
    """A torch reference (train mode, dropout 0) and ours with the reference's weights."""
    torch.manual_seed(seed)
    ref_cls, our_cls = (nn.RNN, ElmanRNN) if kind == "rnn" else (nn.LSTM, LSTM)
    ref = ref_cls(input_size, hidden_size, batch_first=True, dropout=0.0, **kwargs).to(dtype)
    ref.train()
    ours = our_cls(input_size, hidden_size, **kwargs).to(dtype)
    ours.load_state_dict(ref.state_dict())  # strict
    return ref, ours


def run_both(kind, ref, ours, x, state):
    """Outputs and gradients (of a loss touching out and every final state) of both modules."""
    results = []
    for module in (ref, ours):
        module.zero_grad(set_to_none=True)
        xi = x.detach().clone().requires_grad_()
        si = None
        if state is not None:
            si = tuple(s.detach().clone().requires_grad_() for s in state)
        arg = si if kind == "lstm" else (si[0] if si is not None else None)
        out, final = module(xi, arg)
        finals = final if kind == "lstm" else (final,)
        # random weights, so that every element of every output gets its own gradient
        loss = (out * randn(*out.shape, seed=11, dtype=out.dtype)).sum()
        for k, f in enumerate(finals):
            loss = loss + (f * randn(*f.shape, seed=12 + k, dtype=f.dtype)).sum()
        loss.backward()
        grads = {"x": xi.grad}
        if si is not None:
            grads.update({f"state{k}": s.grad for k, s in enumerate(si)})
        grads.update({name: p.grad for name, p in module.named_parameters()})
        results.append((out, finals, grads))
    return results


def assert_same(results, **tol):
    (out_r, fin_r, grad_r), (out_o, fin_o, grad_o) = results
    torch.testing.assert_close(out_o, out_r, **tol)
    assert len(fin_o) == len(fin_r)
    for f_o, f_r in zip(fin_o, fin_r, strict=True):
        torch.testing.assert_close(f_o, f_r, **tol)
    assert grad_o.keys() == grad_r.keys()
    for name in grad_r:
        assert grad_r[name] is not None and grad_o[name] is not None, name
        torch.testing.assert_close(grad_o[name], grad_r[name], **tol, msg=f"gradient of {name}")


def initial_state(kind, num_layers, bidirectional, B, Hs, dtype=F64):
    n = num_layers * (2 if bidirectional else 1)
    h0 = randn(n, B, Hs, seed=21, dtype=dtype)
    return (h0,) if kind == "rnn" else (h0, randn(n, B, Hs, seed=22, dtype=dtype))


# ----------------------------------------------------------------------------- parity, float64
@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_parity_float64(kind, num_layers, bidirectional, with_state):
    B, T, n_in, Hs = 3, 5, 4, 6
    ref, ours = make_pair(kind, n_in, Hs, num_layers=num_layers, bidirectional=bidirectional)
    x = randn(B, T, n_in, seed=1)
    state = initial_state(kind, num_layers, bidirectional, B, Hs) if with_state else None
    results = run_both(kind, ref, ours, x, state)
    out, finals, _ = results[1]
    dirs = 2 if bidirectional else 1
    assert out.shape == (B, T, dirs * Hs) and out.dtype == F64
    assert all(f.shape == (num_layers * dirs, B, Hs) for f in finals)
    assert_same(results)


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_padded_batch_equals_torch_packed_sequences(kind, num_layers, bidirectional):
    """With ``lengths``, real steps and final states equal torch's packed-sequence results,
    gradients included; padding values never matter."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    B, T, n_in, Hs = 4, 6, 3, 5
    ref, ours = make_pair(kind, n_in, Hs, num_layers=num_layers, bidirectional=bidirectional)
    lengths = torch.tensor([6, 2, 4, 1])
    real = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    x = randn(B, T, n_in, seed=3).masked_fill(~real[..., None], 1e3).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()

    packed_out, ref_state = ref(
        pack_padded_sequence(x_ref, lengths, batch_first=True, enforce_sorted=False)
    )
    ref_out, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=T)
    out, state = ours(x, lengths=lengths)
    ref_finals = ref_state if kind == "lstm" else (ref_state,)
    finals = state if kind == "lstm" else (state,)
    torch.testing.assert_close(out[real], ref_out[real])
    for ours_final, ref_final in zip(finals, ref_finals, strict=True):
        torch.testing.assert_close(ours_final, ref_final)

    loss = lambda o, fs: (o[real] ** 2).sum() + sum((f**3).sum() for f in fs)  # noqa: E731
    loss(out, finals).backward()
    loss(ref_out, ref_finals).backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert x.grad[~real].abs().max() == 0  # padding gets no gradient
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, dict(ref.named_parameters())[name].grad, msg=name)


def test_bad_lengths_are_rejected():
    rnn = LSTM(3, 4)
    with pytest.raises(ValueError, match="lengths must be 2 integers between 1 and T=5"):
        rnn(torch.zeros(2, 5, 3), lengths=torch.tensor([5, 0]))
    with pytest.raises(ValueError, match="lengths"):
        ElmanRNN(3, 4)(torch.zeros(2, 5, 3), lengths=torch.tensor([6, 1]))


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_parity_float32_default_tolerances(kind, bidirectional):
    B, T, n_in, Hs = 4, 7, 5, 8
    ref, ours = make_pair(kind, n_in, Hs, dtype=torch.float32, num_layers=2,
                          bidirectional=bidirectional, seed=3)
    x = randn(B, T, n_in, seed=2, dtype=torch.float32)
    state = initial_state(kind, 2, bidirectional, B, Hs, dtype=torch.float32)
    results = run_both(kind, ref, ours, x, state)
    assert results[1][0].dtype == torch.float32
    assert_same(results)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_parity_relu_nonlinearity(bidirectional):
    ref, ours = make_pair("rnn", 3, 5, num_layers=2, bidirectional=bidirectional,
                          nonlinearity="relu", seed=4)
    assert ours.nonlinearity == "relu"
    x = randn(2, 6, 3, seed=3)
    results = run_both("rnn", ref, ours, x, initial_state("rnn", 2, bidirectional, 2, 5))
    assert (results[1][0] >= 0).all()
    assert_same(results)


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
def test_parity_without_bias(kind):
    ref, ours = make_pair(kind, 3, 4, num_layers=2, bidirectional=True, bias=False, seed=5)
    assert not any("bias" in name for name, _ in ours.named_parameters())
    x = randn(2, 5, 3, seed=4)
    assert_same(run_both(kind, ref, ours, x, initial_state(kind, 2, True, 2, 4)))
    # without biases, zero inputs and a zero state stay exactly zero
    out, _ = ours(torch.zeros(2, 5, 3, dtype=F64))
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_our_state_dict_loads_into_torch(kind, bidirectional):
    torch.manual_seed(6)
    our_cls, ref_cls = (ElmanRNN, nn.RNN) if kind == "rnn" else (LSTM, nn.LSTM)
    ours = our_cls(4, 5, num_layers=2, bidirectional=bidirectional).to(F64)
    ref = ref_cls(4, 5, num_layers=2, bidirectional=bidirectional, batch_first=True).to(F64)
    ours_sd, ref_sd = ours.state_dict(), ref.state_dict()
    assert list(ours_sd) == list(ref_sd)  # same names, same order
    assert all(ours_sd[k].shape == ref_sd[k].shape for k in ref_sd)
    ref.load_state_dict(ours_sd)  # strict, the other direction
    ref.train()
    x = randn(3, 4, 4, seed=5)
    assert_same(run_both(kind, ref, ours, x, None))


@pytest.mark.parametrize("our_cls", [ElmanRNN, LSTM])
def test_initialisation_is_torch_s_uniform_range(our_cls):
    torch.manual_seed(0)
    m = our_cls(3, 16, num_layers=2, bidirectional=True)
    bound = 1 / math.sqrt(16)
    for name, p in m.named_parameters():
        assert p.abs().max() <= bound, name
        assert p.abs().max() > 0.5 * bound, name  # not all zeros or a tiny range
    assert "num_layers=2" in repr(m) and "bidirectional=True" in repr(m)


# ----------------------------------------------------------------------------- step functions
def test_elman_step_by_hand():
    # pre = 1*0.2 + 2*0.1 + 0.5*(-0.4) + b_ih + b_hh = 0.2 + b; with b = ln(3)/2 - 0.2,
    # tanh(ln(3)/2) = (3 - 1) / (3 + 1) = 0.5 exactly
    x = torch.tensor([[1.0, 2.0]], dtype=F64)
    h = torch.tensor([[0.5]], dtype=F64)
    w_ih = torch.tensor([[0.2, 0.1]], dtype=F64)
    w_hh = torch.tensor([[-0.4]], dtype=F64)
    b_ih = torch.tensor([math.log(3) / 2], dtype=F64)
    b_hh = torch.tensor([-0.2], dtype=F64)
    out = elman_step(x, h, w_ih, w_hh, b_ih, b_hh)
    torch.testing.assert_close(out, torch.tensor([[0.5]], dtype=F64))
    # without biases: tanh(0.2); relu of a negative pre-activation is 0
    torch.testing.assert_close(elman_step(x, h, w_ih, w_hh),
                               torch.tensor([[math.tanh(0.2)]], dtype=F64))
    assert elman_step(x, h, -w_ih, w_hh, nonlinearity="relu").item() == 0.0
    torch.testing.assert_close(elman_step(x, h, w_ih, w_hh, nonlinearity="relu"),
                               torch.tensor([[0.2]], dtype=F64))


def test_elman_step_matches_the_formula_on_a_batch():
    B, n_in, Hs = 3, 4, 5
    x, h = randn(B, n_in, seed=1), randn(B, Hs, seed=2)
    w_ih, w_hh = randn(Hs, n_in, seed=3), randn(Hs, Hs, seed=4)
    b_ih, b_hh = randn(Hs, seed=5), randn(Hs, seed=6)
    expected = torch.tanh(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh)
    torch.testing.assert_close(elman_step(x, h, w_ih, w_hh, b_ih, b_hh), expected)
    # equal to torch's own cell
    cell = nn.RNNCell(n_in, Hs).to(F64)
    with torch.no_grad():
        cell.weight_ih.copy_(w_ih)
        cell.weight_hh.copy_(w_hh)
        cell.bias_ih.copy_(b_ih)
        cell.bias_hh.copy_(b_hh)
    torch.testing.assert_close(elman_step(x, h, w_ih, w_hh, b_ih, b_hh), cell(x, h))


def test_lstm_step_by_hand():
    # One unit, x = 1, h_prev = 0: the pre-activations are the input weights themselves.
    # sigmoid(0) = 1/2, sigmoid(ln 3) = 3/4, tanh(ln(3)/2) = 1/2, sigmoid(-ln 3) = 1/4
    ln3 = math.log(3)
    x = torch.ones(1, 1, dtype=F64)
    h0, c0 = torch.zeros(1, 1, dtype=F64), torch.full((1, 1), 2.0, dtype=F64)
    w_ih = torch.tensor([[0.0], [ln3], [ln3 / 2], [-ln3]], dtype=F64)  # i, f, g, o
    w_hh = torch.full((4, 1), 7.0, dtype=F64)  # multiplied by h_prev = 0
    gates = lstm_gates(x, h0, w_ih, w_hh)
    assert isinstance(gates, LSTMGates)
    for value, expected in zip(gates, (0.5, 0.75, 0.5, 0.25), strict=True):
        torch.testing.assert_close(value, torch.tensor([[expected]], dtype=F64))
    h, c = lstm_step(x, (h0, c0), w_ih, w_hh)
    # c = f c_prev + i g = 0.75 * 2 + 0.5 * 0.5 = 1.75; h = o tanh(c) = 0.25 tanh(1.75)
    torch.testing.assert_close(c, torch.tensor([[1.75]], dtype=F64))
    torch.testing.assert_close(h, torch.tensor([[0.25 * math.tanh(1.75)]], dtype=F64))
    # the two biases are both added: shifting the pre-activations by +-b cancels out
    b = torch.tensor([0.3, -1.0, 2.0, 0.7], dtype=F64)
    h_b, c_b = lstm_step(x, (h0, c0), w_ih, w_hh, b, -b)
    torch.testing.assert_close((h_b, c_b), (h, c))


def test_lstm_step_matches_the_formula_and_torch_cell():
    B, n_in, Hs = 3, 4, 5
    x, h, c = randn(B, n_in, seed=1), randn(B, Hs, seed=2), randn(B, Hs, seed=7)
    w_ih, w_hh = randn(4 * Hs, n_in, seed=3), randn(4 * Hs, Hs, seed=4)
    b_ih, b_hh = randn(4 * Hs, seed=5), randn(4 * Hs, seed=6)
    pre = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    i, f, g, o = (pre[:, k * Hs:(k + 1) * Hs] for k in range(4))
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h_new = torch.sigmoid(o) * torch.tanh(c_new)
    torch.testing.assert_close(lstm_step(x, (h, c), w_ih, w_hh, b_ih, b_hh), (h_new, c_new))
    cell = nn.LSTMCell(n_in, Hs).to(F64)
    with torch.no_grad():
        cell.weight_ih.copy_(w_ih)
        cell.weight_hh.copy_(w_hh)
        cell.bias_ih.copy_(b_ih)
        cell.bias_hh.copy_(b_hh)
    torch.testing.assert_close(lstm_step(x, (h, c), w_ih, w_hh, b_ih, b_hh), cell(x, (h, c)))


def gate_bias(Hs, i=0.0, f=0.0, g=0.0, o=0.0):
    """A (4 Hs,) bias with one constant per block, in torch's order i, f, g, o."""
    return torch.cat([torch.full((Hs,), v, dtype=F64) for v in (i, f, g, o)])


def test_gate_order_is_i_f_g_o():
    B, n_in, Hs = 2, 3, 4
    x, h = randn(B, n_in, seed=1), randn(B, Hs, seed=2)
    c = randn(B, Hs, seed=3)
    w_ih, w_hh = 0.01 * randn(4 * Hs, n_in, seed=4), 0.01 * randn(4 * Hs, Hs, seed=5)
    big = 40.0
    # forget gate open, input gate shut: the cell is kept
    _, c_kept = lstm_step(x, (h, c), w_ih, w_hh, gate_bias(Hs, i=-big, f=big))
    torch.testing.assert_close(c_kept, c)
    # forget gate shut, input gate open, candidate saturated at +1: the cell becomes 1
    _, c_new = lstm_step(x, (h, c), w_ih, w_hh, gate_bias(Hs, i=big, f=-big, g=big))
    torch.testing.assert_close(c_new, torch.ones_like(c))
    # candidate saturated at -1 instead
    _, c_neg = lstm_step(x, (h, c), w_ih, w_hh, gate_bias(Hs, i=big, f=-big, g=-big))
    torch.testing.assert_close(c_neg, -torch.ones_like(c))
    # output gate shut: h is 0 whatever the cell; open: h = tanh(c)
    h_shut, c_any = lstm_step(x, (h, c), w_ih, w_hh, gate_bias(Hs, o=-big))
    torch.testing.assert_close(h_shut, torch.zeros_like(h))
    h_open, c_open = lstm_step(x, (h, c), w_ih, w_hh, gate_bias(Hs, o=big))
    torch.testing.assert_close(h_open, torch.tanh(c_open))
    # each block lands on its own gate
    gates = lstm_gates(x, h, w_ih, w_hh, gate_bias(Hs, i=big, f=-big, g=-big, o=big))
    torch.testing.assert_close(gates.i, torch.ones_like(h))
    torch.testing.assert_close(gates.f, torch.zeros_like(h))
    torch.testing.assert_close(gates.g, -torch.ones_like(h))
    torch.testing.assert_close(gates.o, torch.ones_like(h))


def test_gradcheck_elman_step():
    x, h = randn(2, 3, seed=1), randn(2, 4, seed=2)
    params = (randn(4, 3, seed=3), randn(4, 4, seed=4), randn(4, seed=5), randn(4, seed=6))
    inputs = tuple(t.requires_grad_() for t in (x, h, *params))
    assert torch.autograd.gradcheck(elman_step, inputs)
    assert torch.autograd.gradcheck(lambda *a: elman_step(*a, nonlinearity="relu"), inputs)


def test_gradcheck_lstm_step():
    Hs = 3
    x, h, c = randn(2, 2, seed=1), randn(2, Hs, seed=2), randn(2, Hs, seed=3)
    params = (randn(4 * Hs, 2, seed=4), randn(4 * Hs, Hs, seed=5),
              randn(4 * Hs, seed=6), randn(4 * Hs, seed=7))
    inputs = tuple(t.requires_grad_() for t in (x, h, c, *params))

    def step(x, h, c, *params):
        return lstm_step(x, (h, c), *params)

    assert torch.autograd.gradcheck(step, inputs)


@pytest.mark.parametrize("how", ["last", "mean", "max"])
def test_gradcheck_pool(how):
    out = randn(3, 4, 2, seed=1).requires_grad_()
    lengths = torch.tensor([4, 1, 2])
    assert torch.autograd.gradcheck(lambda o: pool(o, lengths, how), (out,))
    assert torch.autograd.gradcheck(lambda o: pool(o, how=how), (out,))


def test_pool_gradient_is_zero_on_padding():
    out = randn(3, 5, 2, seed=1).requires_grad_()
    lengths = torch.tensor([5, 2, 3])
    for how in ("last", "mean", "max"):
        out.grad = None
        pool(out, lengths, how).sum().backward()
        for b, n in enumerate(lengths.tolist()):
            assert torch.equal(out.grad[b, n:], torch.zeros_like(out.grad[b, n:])), how


def test_pool_by_hand():
    out = torch.tensor([[[1.0], [5.0], [3.0]],
                        [[-2.0], [4.0], [100.0]]])  # (B=2, T=3, F=1)
    lengths = torch.tensor([3, 2])
    assert pool(out, lengths, "last").tolist() == [[3.0], [4.0]]
    assert pool(out, lengths, "mean").tolist() == [[3.0], [1.0]]
    assert pool(out, lengths, "max").tolist() == [[5.0], [4.0]]
    assert pool(out).tolist() == [[3.0], [100.0]]  # default: last, all T real
    assert pool(out, [3, 2], "mean").tolist() == [[3.0], [1.0]]  # a plain list works


# ----------------------------------------------------------------------------- trace
@pytest.mark.parametrize("bidirectional", [False, True])
def test_trace_equals_the_forward_pass(bidirectional):
    torch.manual_seed(0)
    Hs = 5
    lstm = LSTM(3, Hs, num_layers=2, bidirectional=bidirectional).to(F64)
    x = randn(2, 6, 3, seed=1)
    tr = lstm.trace(x)
    assert set(tr) == set("ifgoch")
    assert all(v.shape == (2, 6, Hs) and not v.requires_grad for v in tr.values())
    # layer 0's forward direction, run alone
    first = LSTM(3, Hs).to(F64)
    first.load_state_dict({k: v for k, v in lstm.state_dict().items() if k.endswith("_l0")})
    out, (h_n, c_n) = first(x)
    torch.testing.assert_close(tr["h"], out)
    torch.testing.assert_close(tr["h"][:, -1], h_n[0])
    torch.testing.assert_close(tr["c"][:, -1], c_n[0])
    # the recurrence holds step by step, from a zero state
    c_prev = torch.zeros(2, Hs, dtype=F64)
    for t in range(6):
        c_t = tr["f"][:, t] * c_prev + tr["i"][:, t] * tr["g"][:, t]
        torch.testing.assert_close(tr["c"][:, t], c_t)
        torch.testing.assert_close(tr["h"][:, t], tr["o"][:, t] * torch.tanh(c_t))
        c_prev = c_t
    for key in "ifo":
        assert ((tr[key] > 0) & (tr[key] < 1)).all(), key
    assert ((tr["g"] > -1) & (tr["g"] < 1)).all()
    assert (tr["h"].abs() < 1).all()


def test_trace_of_a_one_layer_lstm_matches_its_output():
    torch.manual_seed(1)
    lstm = LSTM(4, 3)
    x = torch.randn(3, 7, 4)
    tr = lstm.trace(x)
    out, (h_n, c_n) = lstm(x)
    torch.testing.assert_close(tr["h"], out)
    torch.testing.assert_close(tr["c"][:, -1], c_n[0])


# ----------------------------------------------------------------------------- properties
def build(kind, n_in, Hs, num_layers, bidirectional, seed):
    torch.manual_seed(seed)
    cls = ElmanRNN if kind == "rnn" else LSTM
    return cls(n_in, Hs, num_layers=num_layers, bidirectional=bidirectional).to(F64)


def final_h(kind, final):
    return final if kind == "rnn" else final[0]


shapes = st.tuples(
    st.sampled_from(["rnn", "lstm"]),
    st.integers(1, 3),  # B
    st.integers(1, 6),  # T
    st.integers(1, 3),  # n_in
    st.integers(1, 4),  # Hs
    st.integers(1, 2),  # layers
    st.integers(0, 2**16),  # seed
)


@SMALL
@given(shapes, st.data())
def test_output_at_t_ignores_later_inputs(shape, data):
    kind, B, T, n_in, Hs, layers, seed = shape
    t = data.draw(st.integers(0, T - 1), label="t")
    model = build(kind, n_in, Hs, layers, False, seed)
    x = randn(B, T, n_in, seed=seed)
    x_changed = x.clone()
    x_changed[:, t + 1:] = randn(B, T - t - 1, n_in, seed=seed + 1) * 10
    with torch.no_grad():
        out, final = model(x)
        out_changed, _ = model(x_changed)
    torch.testing.assert_close(out_changed[:, : t + 1], out[:, : t + 1], rtol=0, atol=0)
    # the last step of out is the top layer's final state
    torch.testing.assert_close(out[:, -1], final_h(kind, final)[-1], rtol=0, atol=0)
    if t + 1 < T:  # and later outputs do see the change
        assert not torch.equal(out_changed[:, -1], out[:, -1])


@SMALL
@given(shapes)
def test_bidirectional_halves_and_final_states(shape):
    kind, B, T, n_in, Hs, layers, seed = shape
    model = build(kind, n_in, Hs, layers, True, seed)
    x = randn(B, T, n_in, seed=seed)
    with torch.no_grad():
        out, final = model(x)
    h_n = final_h(kind, final)
    assert out.shape == (B, T, 2 * Hs) and h_n.shape == (2 * layers, B, Hs)
    # top layer: forward half ends at t = T-1, reverse half ends at t = 0
    torch.testing.assert_close(out[:, -1, :Hs], h_n[-2], rtol=0, atol=0)
    torch.testing.assert_close(out[:, 0, Hs:], h_n[-1], rtol=0, atol=0)
    if layers == 1 and T > 1:
        # one layer: the reverse half at t reads only x_t .. x_T
        t = T // 2
        x_changed = x.clone()
        x_changed[:, :t] += 5.0
        with torch.no_grad():
            out_changed, _ = model(x_changed)
        torch.testing.assert_close(out_changed[:, t:, Hs:], out[:, t:, Hs:], rtol=0, atol=0)
        assert not torch.equal(out_changed[:, :t, :Hs], out[:, :t, :Hs])


@SMALL
@given(
    st.integers(1, 4),  # B
    st.integers(1, 6),  # T
    st.integers(1, 3),  # F
    st.integers(0, 2**16),  # seed
    st.sampled_from(["last", "mean", "max"]),
    st.sampled_from([0.0, -1e30, 1e30, 123.0]),  # the garbage in the padding
    st.data(),
)
def test_pool_equals_pooling_the_unpadded_prefix(B, T, F_, seed, how, garbage, data):
    lengths = data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B), label="lengths")
    out = randn(B, T, F_, seed=seed)
    padded = out.clone()
    noisy = out.clone()
    for b, n in enumerate(lengths):
        padded[b, n:] = garbage
        noisy[b, n:] = randn(T - n, F_, seed=seed + b + 1) * 1e6
    lengths_t = torch.tensor(lengths)
    pooled = pool(padded, lengths_t, how)
    assert pooled.shape == (B, F_)
    assert torch.isfinite(pooled).all()
    for b, n in enumerate(lengths):
        prefix = out[b : b + 1, :n]  # (1, n, F)
        expected = {"last": prefix[0, -1], "mean": prefix[0].mean(0),
                    "max": prefix[0].amax(0)}[how]
        torch.testing.assert_close(pooled[b], expected)
        torch.testing.assert_close(pooled[b : b + 1], pool(prefix, how=how))
    torch.testing.assert_close(pool(noisy, lengths_t, how), pooled)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("cls", [ElmanRNN, LSTM])
def test_clear_errors_on_bad_inputs(cls):
    m = cls(3, 4, num_layers=2, bidirectional=True)
    with pytest.raises(ValueError, match=r"x of shape \(B, T, 3\)"):
        m(torch.randn(5, 3))  # unbatched
    with pytest.raises(ValueError, match=r"x of shape \(B, T, 3\).*\(2, 5, 2\)"):
        m(torch.randn(2, 5, 2))  # wrong feature size
    bad = torch.zeros(2, 2, 4)  # layers*dirs is 4
    good = torch.zeros(4, 2, 4)
    x = torch.randn(2, 5, 3)
    if cls is ElmanRNN:
        with pytest.raises(ValueError, match=r"h0 of shape .*\(4, 2, 4\).*\(2, 2, 4\)"):
            m(x, bad)
    else:
        with pytest.raises(ValueError, match=r"h0 of shape .*\(4, 2, 4\)"):
            m(x, (bad, good))
        with pytest.raises(ValueError, match=r"c0 of shape"):
            m(x, (good, bad))
        with pytest.raises(ValueError, match="pair"):
            m(x, good)


@pytest.mark.parametrize("cls", [ElmanRNN, LSTM])
@pytest.mark.parametrize(
    "kwargs, name",
    [({"input_size": 0}, "input_size"), ({"hidden_size": 2.5}, "hidden_size"),
     ({"num_layers": 0}, "num_layers"), ({"num_layers": True}, "num_layers")],
)
def test_bad_sizes_are_rejected(cls, kwargs, name):
    args = {"input_size": 3, "hidden_size": 4, **kwargs}
    with pytest.raises(ValueError, match=f"{name} must be a positive int"):
        cls(**args)


def test_bad_nonlinearity_and_cell():
    with pytest.raises(ValueError, match="nonlinearity"):
        ElmanRNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match=r'cell must be "lstm" or "rnn", got .gru.'):
        RNNLM(10, 4, 8, cell="gru")


def test_pool_errors():
    out = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=r'how must be "last", "mean" or "max", got .median.'):
        pool(out, how="median")
    with pytest.raises(ValueError, match=r'how must be .*got .median.'):
        pool(out, torch.tensor([1, 2]), how="median")
    with pytest.raises(ValueError, match=r"between 1 and T=3.*\[0, 2\]"):
        pool(out, torch.tensor([0, 2]))
    with pytest.raises(ValueError, match=r"between 1 and T=3.*\[4, 2\]"):
        pool(out, torch.tensor([4, 2]), how="mean")
    with pytest.raises(ValueError, match=r"lengths of shape \(2,\)"):
        pool(out, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"out of shape \(B, T, F\)"):
        pool(torch.randn(2, 3))


# ----------------------------------------------------------------------------- RNNLM
@pytest.mark.parametrize("cell", ["lstm", "rnn"])
def test_rnnlm_shapes_and_causality(cell):
    torch.manual_seed(0)
    lm = RNNLM(11, 6, 8, cell=cell, num_layers=2)
    assert isinstance(lm.rnn, LSTM if cell == "lstm" else ElmanRNN)
    assert lm.rnn.num_layers == 2
    idx = torch.randint(0, 11, (3, 7), generator=gen(0))
    logits = lm(idx)
    assert logits.shape == (3, 7, 11)
    changed = idx.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 11
    torch.testing.assert_close(lm(changed)[:, :4], logits[:, :4], rtol=0, atol=0)


@pytest.mark.parametrize("cell", ["lstm", "rnn"])
def test_rnnlm_overfits_one_batch(cell):
    torch.manual_seed(0)
    V, B, T = 16, 4, 12
    ids = torch.randint(0, V, (B, T + 1), generator=gen(1))
    ids[:, 0] = torch.arange(B)  # distinct first tokens: every target is predictable
    x, y = ids[:, :-1], ids[:, 1:]
    lm = RNNLM(V, 16, 48, cell=cell)
    opt = torch.optim.Adam(lm.parameters(), lr=1e-2)
    first = None
    for _ in range(100):  # measured: loss 0.0042 (lstm), 0.0021 (rnn) after 100 steps
        loss = F.cross_entropy(lm(x).reshape(-1, V), y.reshape(-1))
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = F.cross_entropy(lm(x).reshape(-1, V), y.reshape(-1)).item()
        pred = lm(x).argmax(-1)
    assert first > 0.8 * math.log(V)
    assert final < 0.05
    assert torch.equal(pred, y)


def test_lstm_acceptor_with_pool_learns_ab_task():
    torch.manual_seed(0)
    x, y = ab_task(32, 10, generator=gen(0))
    lengths = torch.randint(6, 11, (32,), generator=gen(1))
    # a B placed only in the padding would not count: recompute the labels on the prefix
    real = torch.arange(10)[None, :] < lengths[:, None]
    y = ((x == 1) & real).any(dim=1).long()
    assert 0 < y.sum() < 32
    embed = nn.Embedding(2, 4)
    lstm = LSTM(4, 16)
    head = nn.Linear(16, 2)
    params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=3e-2)

    def logits():
        out, _ = lstm(embed(x))  # (B, T, Hs)
        return head(pool(out, lengths, "max"))  # (B, 2)

    for _ in range(40):  # measured: loss 0.0002 after 40 steps, 100% accuracy after 10
        loss = F.cross_entropy(logits(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        pred = logits().argmax(-1)
    assert loss.item() < 0.02
    assert torch.equal(pred, y)
