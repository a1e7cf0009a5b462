"""The checks of chapter 2 (coursepkg.checks.ch02_rnn): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do: the references against
torch and autograd, the train task's target, budget and bands, the debug task's starter code,
the questions' keys, and the chapter's shares of points.
"""

from __future__ import annotations

import copy
import itertools
import time

import pytest
import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, hidden_cases, run_task

from coursepkg import checks, data, lm, rnn
from coursepkg.checks import ch02_rnn as ch02
from coursepkg.checks import core
from coursepkg.checks.tensors import held_out_accuracy

# ---------------------------------------------------------------------------------------------
# 2.1 bptt_gradients: correct implementations written differently, and wrong ones
# ---------------------------------------------------------------------------------------------


def bptt_gradients(states, weight_hh, grad_last):
    """The notebook's solution: a loop backwards, the gradients put back in time order."""
    grads = [grad_last]
    for t in range(states.shape[1] - 1, 0, -1):
        local = 1 - states[:, t] * states[:, t]  # tanh' at step t, from its output
        grads.insert(0, (grads[0] * local) @ weight_hh)
    return torch.stack(grads, dim=1)


def bptt_by_jacobians(states, weight_hh, grad_last):
    """The chapter's formula literally: the Jacobians diag(1 - h_k^2) W_hh as matrices."""
    B, T, Hs = states.shape
    jacobians = torch.diag_embed(1 - states.pow(2)) @ weight_hh  # (B, T, Hs, Hs)
    out = torch.empty_like(states)
    out[:, -1] = grad_last
    for t in reversed(range(T - 1)):
        out[:, t] = torch.einsum("bi,bij->bj", out[:, t + 1], jacobians[:, t + 1])
    return out


def bptt_transposed(states, weight_hh, grad_last):
    grads = [grad_last]
    for t in range(states.shape[1] - 1, 0, -1):
        grads.insert(0, (grads[0] * (1 - states[:, t] ** 2)) @ weight_hh.T)
    return torch.stack(grads, dim=1)


def bptt_earlier_state(states, weight_hh, grad_last):
    grads = [grad_last]
    for t in range(states.shape[1] - 1, 0, -1):
        grads.insert(0, (grads[0] * (1 - states[:, t - 1] ** 2)) @ weight_hh)
    return torch.stack(grads, dim=1)


def bptt_no_tanh_derivative(states, weight_hh, grad_last):
    grads = [grad_last]
    for _ in range(states.shape[1] - 1):
        grads.insert(0, grads[0] @ weight_hh)
    return torch.stack(grads, dim=1)


def bptt_scales_after_the_product(states, weight_hh, grad_last):
    grads = [grad_last]
    for t in range(states.shape[1] - 1, 0, -1):
        grads.insert(0, (grads[0] @ weight_hh) * (1 - states[:, t] ** 2))
    return torch.stack(grads, dim=1)


def bptt_backwards_order(states, weight_hh, grad_last):
    grads = [grad_last]
    for t in range(states.shape[1] - 1, 0, -1):
        grads.append((grads[-1] * (1 - states[:, t] ** 2)) @ weight_hh)
    return torch.stack(grads, dim=1)  # index 0 holds the last position's


def bptt_tanh_again(states, weight_hh, grad_last):
    grads = [grad_last]
    for t in range(states.shape[1] - 1, 0, -1):
        grads.insert(0, (grads[0] * (1 - torch.tanh(states[:, t]) ** 2)) @ weight_hh)
    return torch.stack(grads, dim=1)


def bptt_time_major(states, weight_hh, grad_last):
    return bptt_gradients(states, weight_hh, grad_last).transpose(0, 1)


# ---------------------------------------------------------------------------------------------
# 2.2 gru_layer
# ---------------------------------------------------------------------------------------------


def gru_layer(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    """The notebook's solution."""
    h, states = h0, []
    for t in range(x.shape[1]):
        a_r, a_z, a_n = (x[:, t] @ weight_ih.T + bias_ih).chunk(3, dim=-1)
        b_r, b_z, b_n = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
        n = torch.tanh(a_n + r * b_n)
        h = n + z * (h - n)
        states.append(h)
    return torch.stack(states, dim=1), h


def gru_layer_alt(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    """Input projections of all steps at once, one gate at a time from slices, a buffer."""
    B, T, _ = x.shape
    Hs = h0.shape[1]
    rows = [slice(k * Hs, (k + 1) * Hs) for k in range(3)]
    projected = [F.linear(x, weight_ih[r], bias_ih[r]) for r in rows]  # each (B, T, Hs)
    outputs = x.new_empty(B, T, Hs)
    h = h0
    for t in range(T):
        recurrent = [F.linear(h, weight_hh[r], bias_hh[r]) for r in rows]
        r = (projected[0][:, t] + recurrent[0]).sigmoid()
        z = (projected[1][:, t] + recurrent[1]).sigmoid()
        n = (projected[2][:, t] + r * recurrent[2]).tanh()
        h = torch.lerp(n, h, z)
        outputs[:, t] = h
    return outputs, outputs[:, -1]


def _gru_with(step):
    def run(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
        h, states = h0, []
        for t in range(x.shape[1]):
            h = step(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
            states.append(h)
        return torch.stack(states, dim=1), h
    return run


def _z_r_n_step(x_t, h, wi, wh, bi, bh):
    a_z, a_r, a_n = (x_t @ wi.T + bi).chunk(3, dim=-1)
    b_z, b_r, b_n = (h @ wh.T + bh).chunk(3, dim=-1)
    r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
    n = torch.tanh(a_n + r * b_n)
    return (1 - z) * n + z * h


def _cho_step(x_t, h, wi, wh, bi, bh):
    Hs = h.shape[1]
    a_r, a_z, a_n = (x_t @ wi.T + bi).chunk(3, dim=-1)
    b_r, b_z, _ = (h @ wh.T + bh).chunk(3, dim=-1)
    r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
    n = torch.tanh(a_n + (r * h) @ wh[2 * Hs:].T + bh[2 * Hs:])
    return (1 - z) * n + z * h


def _swapped_mix_step(x_t, h, wi, wh, bi, bh):
    a_r, a_z, a_n = (x_t @ wi.T + bi).chunk(3, dim=-1)
    b_r, b_z, b_n = (h @ wh.T + bh).chunk(3, dim=-1)
    r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
    n = torch.tanh(a_n + r * b_n)
    return z * n + (1 - z) * h


def _bias_outside_step(x_t, h, wi, wh, bi, bh):
    Hs = h.shape[1]
    a_r, a_z, a_n = (x_t @ wi.T + bi).chunk(3, dim=-1)
    b_r, b_z, _ = (h @ wh.T + bh).chunk(3, dim=-1)
    r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
    n = torch.tanh(a_n + r * (h @ wh[2 * Hs:].T) + bh[2 * Hs:])
    return (1 - z) * n + z * h


gru_gate_order_z_r_n = _gru_with(_z_r_n_step)
gru_gate_order_z_r_n.__name__ = "gru_gate_order_z_r_n"
gru_cho_reset = _gru_with(_cho_step)
gru_cho_reset.__name__ = "gru_cho_reset"
gru_swapped_mix = _gru_with(_swapped_mix_step)
gru_swapped_mix.__name__ = "gru_swapped_mix"
gru_bias_outside_reset = _gru_with(_bias_outside_step)
gru_bias_outside_reset.__name__ = "gru_bias_outside_reset"


def _right_step(x_t, h, wi, wh, bi, bh):
    a_r, a_z, a_n = (x_t @ wi.T + bi).chunk(3, dim=-1)
    b_r, b_z, b_n = (h @ wh.T + bh).chunk(3, dim=-1)
    r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
    n = torch.tanh(a_n + r * b_n)
    return (1 - z) * n + z * h


def gru_h0_every_step(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    states = [_right_step(x[:, t], h0, weight_ih, weight_hh, bias_ih, bias_hh)
              for t in range(x.shape[1])]
    return torch.stack(states, dim=1), states[-1]


def gru_time_major(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    outputs, h = gru_layer_alt(x, h0, weight_ih, weight_hh, bias_ih, bias_hh)
    return outputs.transpose(0, 1), h


def gru_torch_style_final_state(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    outputs, h = gru_layer_alt(x, h0, weight_ih, weight_hh, bias_ih, bias_hh)
    return outputs, h[None]


# ---------------------------------------------------------------------------------------------
# 2.3 train_ab_acceptor
# ---------------------------------------------------------------------------------------------


def _torch_lstm_acceptor(x, y, seed, steps):
    torch.manual_seed(seed)
    lstm = torch.nn.LSTM(2, ch02.AB_HIDDEN, batch_first=True)
    out = torch.nn.Linear(ch02.AB_HIDDEN, 2)
    optimizer = torch.optim.AdamW([*lstm.parameters(), *out.parameters()], lr=0.03)
    inputs = F.one_hot(x, 2).float()
    for batch in torch.arange(len(y)).repeat(steps).split(128)[:steps]:
        states, _ = lstm(inputs[batch])
        loss = F.cross_entropy(out(states[:, -1]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {**{f"rnn.{k}": v for k, v in lstm.state_dict().items()},
            **{f"out.{k}": v for k, v in out.state_dict().items()}}


def train_with_torch_lstm(x, y, seed):
    """Correct, written differently: torch's fused nn.LSTM (allowed here), AdamW on the
    strings in order, 128 at a time, the state_dict renamed to the course model's names."""
    return _torch_lstm_acceptor(x, y, seed, steps=200)


def latch_by_hand(x, y, seed):
    """Correct without training: one LSTM unit whose cell counts the B's (its input gate opens
    for a B only, its forget gate stays open), read out against a threshold."""
    model = ch02.ABAcceptor()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        Hs = ch02.AB_HIDDEN
        model.rnn.weight_ih_l0[0] = torch.tensor([-10.0, 10.0])  # i: open for B only
        model.rnn.bias_ih_l0[Hs] = 20.0  # f: keep everything
        model.rnn.bias_ih_l0[2 * Hs] = 20.0  # g: write 1
        model.rnn.bias_ih_l0[3 * Hs] = 20.0  # o: show the cell
        model.out.weight[:, 0] = torch.tensor([-20.0, 20.0])
        model.out.bias[:] = torch.tensor([7.6, -7.6])  # the threshold, tanh(1) / 2
    return model


def untrained(x, y, seed):
    torch.manual_seed(seed)
    return ch02.ABAcceptor()


def trained_on_shuffled_labels(x, y, seed):
    """Trained on labels that do not belong to the strings."""
    shuffled = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))]
    return _torch_lstm_acceptor(x, shuffled, seed, steps=40)


def trained_on_the_last_symbol(x, y, seed):
    """Trained on another task: is the LAST symbol a B? (learns the B's near the end only)."""
    return _torch_lstm_acceptor(x, x[:, -5:].amax(dim=1), seed, steps=100)


def torch_names_without_prefix(x, y, seed):
    return torch.nn.LSTM(2, ch02.AB_HIDDEN, batch_first=True).state_dict()


def too_wide(x, y, seed):
    model = ch02.ABAcceptor(hidden_size=16)
    return model.state_dict()


# ---------------------------------------------------------------------------------------------
# 2.4 train_tbptt
# ---------------------------------------------------------------------------------------------


def starter_tbptt(model, ids, chunk, lr):
    """The exercise's starter code, unfixed: three bugs."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for start in range(0, len(ids) - 1, chunk):
        inputs = ids[start:start + chunk][None]
        targets = ids[start:start + chunk][None]
        state = None
        out, state = model.rnn(model.embed(inputs), state)
        loss = F.cross_entropy(model.head(out)[0], targets[0])
        loss.backward()
        optimizer.step()
    return model


def _tbptt_fixed(model, ids, chunk, lr, *, shift=True, carry=True, zero=True, last=True,
                 detach=True):
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    state = None
    pairs = len(ids) - 1
    for start in range(0, pairs, chunk):
        end = min(start + chunk, pairs)
        if not last and end - start < chunk:
            break
        inputs = ids[start:end][None] if shift else ids[start:start + chunk][None]
        targets = ids[start + 1:end + 1][None] if shift else inputs
        out, (h, c) = model.rnn(model.embed(inputs), state if carry else None)
        loss = F.cross_entropy(model.head(out)[0], targets[0])
        if zero:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state = (h.detach(), c.detach()) if detach else (h, c)
    return model


def tbptt_fixed(model, ids, chunk, lr):
    """The notebook's solution."""
    return _tbptt_fixed(model, ids, chunk, lr)


def tbptt_by_hand(model, ids, chunk, lr):
    """Correct, written differently: the chunks from split, a hand-written SGD update."""
    model = copy.deepcopy(model)
    inputs, targets = ids[:-1], ids[1:]
    state = None
    for x, y in zip(inputs.split(chunk), targets.split(chunk), strict=True):
        out, state = model.rnn(model.embed(x[None]), state)
        loss = F.cross_entropy(model.head(out).squeeze(0), y)
        for parameter in model.parameters():
            parameter.grad = None
        loss.backward()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter -= lr * parameter.grad
        state = tuple(s.detach() for s in state)
    return model.state_dict()


def tbptt_only_targets_fixed(model, ids, chunk, lr):
    return _tbptt_fixed(model, ids, chunk, lr, carry=False, zero=False)


def tbptt_no_zero_grad(model, ids, chunk, lr):
    return _tbptt_fixed(model, ids, chunk, lr, zero=False)


def tbptt_state_reset(model, ids, chunk, lr):
    return _tbptt_fixed(model, ids, chunk, lr, carry=False)


def tbptt_drops_the_last_chunk(model, ids, chunk, lr):
    return _tbptt_fixed(model, ids, chunk, lr, last=False)


def tbptt_not_detached(model, ids, chunk, lr):
    return _tbptt_fixed(model, ids, chunk, lr, detach=False)


def tbptt_trains_the_caller_s_model(model, ids, chunk, lr):
    trained = tbptt_fixed(model, ids, chunk, lr)
    model.load_state_dict(trained.state_dict())
    return model


# ---------------------------------------------------------------------------------------------
# 2.5 and 2.6: questions
# ---------------------------------------------------------------------------------------------


def lstm_parameter_count():
    return 4 * 32 * (10 + 32) + 2 * 4 * 32


def lstm_parameter_count_one_bias():
    return 4 * 32 * (10 + 32) + 4 * 32


def lstm_parameter_count_as_float():
    return 5632.0


def lstm_parameter_count_as_text():
    return "5632"


def input_gradient_norms(model, steps=80, batch_size=32, input_size=16, seed=0):
    """The notebook's copy of the chapter's measurement."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, steps, input_size, generator=generator, dtype=torch.float64,
                    requires_grad=True)
    target = torch.randint(0, 10, (batch_size,), generator=generator)
    head = torch.nn.Linear(model.hidden_size, 10, dtype=torch.float64)
    out, _ = model(x)
    loss = F.cross_entropy(head(out[:, -1]), target)
    (grad,) = torch.autograd.grad(loss, x)
    return grad.norm(dim=-1).mean(dim=0).flip(0)


def vanishing_distance():
    torch.manual_seed(0)
    model = rnn.ElmanRNN(16, 64).double()
    norms = input_gradient_norms(model, seed=0)
    return int((norms / norms[0] < 1e-6).nonzero()[0, 0])


def vanishing_distance_last_above():
    """Off by one: the last distance still above the threshold."""
    return vanishing_distance() - 1


def vanishing_distance_of_the_lstm():
    torch.manual_seed(0)
    norms = input_gradient_norms(rnn.LSTM(16, 64).double(), seed=0)
    below = (norms / norms[0] < 1e-6).nonzero()
    return int(below[0, 0]) if len(below) else 80


def vanishing_distance_as_text():
    return str(vanishing_distance())


def vanishing_distance_as_float():
    return float(vanishing_distance())


CORRECT = {
    "2.1": [ch02.bptt_gradients, bptt_gradients, bptt_by_jacobians],
    "2.2": [ch02.gru_layer, gru_layer, gru_layer_alt],
    "2.3": [ch02.train_ab_acceptor, train_with_torch_lstm, latch_by_hand],
    "2.4": [ch02.train_tbptt, tbptt_fixed, tbptt_by_hand],
    "2.5": [checks.get_task("2.5").reference, lstm_parameter_count],
    "2.6": [checks.get_task("2.6").reference, vanishing_distance],
}

WRONG = {
    "2.1": [
        (bptt_transposed, ch02.HINT_BPTT_TRANSPOSE),
        (bptt_earlier_state, ch02.HINT_BPTT_WHICH_STATE),
        (bptt_no_tanh_derivative, ch02.HINT_BPTT_NO_DERIVATIVE),
        (bptt_scales_after_the_product, ch02.HINT_BPTT_FACTOR_ORDER),
        (bptt_backwards_order, ch02.HINT_BPTT_TIME_ORDER),
        (bptt_tanh_again, ch02.HINT_BPTT_DERIVATIVE_FORM),
        (bptt_time_major, ch02.HINT_BPTT_SHAPE),
    ],
    "2.2": [
        (gru_gate_order_z_r_n, ch02.HINT_GRU_GATE_ORDER),
        (gru_cho_reset, ch02.HINT_GRU_RESET_BEFORE),
        (gru_swapped_mix, ch02.HINT_GRU_INTERPOLATION),
        (gru_bias_outside_reset, ch02.HINT_GRU_RESET_OUTSIDE),
        (gru_h0_every_step, ch02.HINT_GRU_H0_REUSED),
        (gru_time_major, ch02.HINT_GRU_TIME_MAJOR),
        (gru_torch_style_final_state, ch02.HINT_GRU_H_T_SHAPE),
    ],
    "2.3": [
        (untrained, ch02.HINT_AB_FAR),
        (trained_on_shuffled_labels, ch02.HINT_AB_FAR),
        (trained_on_the_last_symbol, ch02.HINT_AB_FAR),
        (torch_names_without_prefix, "the state_dict lacks 'rnn.weight_ih_l0'"),
        (too_wide, "'rnn.weight_ih_l0' has shape (64, 2), the model's is (32, 2)"),
    ],
    "2.4": [
        (starter_tbptt, ch02.PREFIX_TBPTT_BUGS),
        (tbptt_only_targets_fixed,
         f"{ch02.PREFIX_TBPTT_BUGS} {ch02.HINT_TBPTT_RESET} {ch02.HINT_TBPTT_ZERO_GRAD}"),
        (tbptt_no_zero_grad, ch02.HINT_TBPTT_ZERO_GRAD),
        (tbptt_state_reset, ch02.HINT_TBPTT_RESET),
        (tbptt_drops_the_last_chunk, ch02.HINT_TBPTT_LAST_CHUNK),
        (tbptt_not_detached, "backward through the graph a second time"),
    ],
    "2.5": [
        (lstm_parameter_count_one_bias, checks.get_task("2.5").judge(0, 1, {}).hint),
        (lstm_parameter_count_as_float, "a whole number (an int), got a float"),
        (lstm_parameter_count_as_text, "got a str"),
    ],
    "2.6": [
        (vanishing_distance_last_above, checks.get_task("2.6").judge(0, 1, {}).hint),
        (vanishing_distance_of_the_lstm, checks.get_task("2.6").judge(0, 1, {}).hint),
        (vanishing_distance_as_float, "a whole number (an int), got a float"),
        (vanishing_distance_as_text, "got a str"),
    ],
}


def stub(*args):
    raise NotImplementedError("Task 2.1: write bptt_gradients")


def _tbptt_hints() -> frozenset[str]:
    """Every hint the debug task composes: the bugs left, two or three of them."""
    return frozenset(
        " ".join([ch02.PREFIX_TBPTT_BUGS, *(ch02.TBPTT_BUGS[bug] for bug in bugs)])
        for count in (2, 3) for bugs in itertools.combinations(ch02.TBPTT_BUGS, count))


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="02_rnn",
    tasks={"2.1": ("bptt_gradients", 3, 6), "2.2": ("gru_layer", 3, 7),
           "2.3": ("train_ab_acceptor", 3, 6), "2.4": ("train_tbptt", 2, 4),
           "2.5": ("lstm_parameter_count", 1, 1), "2.6": ("vanishing_distance", 2, 2)},
    hints=ch02,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=1,
    min_hidden=1,
    public_points=(1, 3),
    forbidden=("coursepkg.lm",),
    package="coursepkg.lm",
    not_finite_hint=ch02.HINT_NOT_FINITE,
    failure_reports=(
        ("2.1", bptt_transposed, "Task 2.1 bptt_gradients: 1/3 points",
         ("  FAIL  [0/1] 2 sequences of 4 states, 3 hidden units: " + ch02.HINT_BPTT_TRANSPOSE,)),
        ("2.2", gru_gate_order_z_r_n, "Task 2.2 gru_layer: 0/3 points",
         (ch02.HINT_GRU_GATE_ORDER,)),
        ("2.4", starter_tbptt, "Task 2.4 train_tbptt: 0/2 points",
         (ch02.PREFIX_TBPTT_BUGS,)),
    ),
    typed=("2.1", "2.2"),
    seeded=("2.1", "2.2", "2.3", "2.4"),
    scalar_inputs=("2.5", "2.6"),
    exact_results=("2.3", "2.4", "2.5", "2.6"),
    more_hints=_tbptt_hints(),
    wrong_types=(
        ("2.1", lambda *a: None, "Wrong return type: expected grads as a torch.Tensor, got "
         "NoneType."),
        ("2.1", lambda *a: bptt_gradients(*a).tolist(), "got list"),
        ("2.2", lambda *a: gru_layer_alt(*a)[0], "expected a pair (outputs, h_T), got Tensor"),
        ("2.3", lambda *a: [1, 2], "expected the trained model or its state_dict(), got list"),
        ("2.4", lambda *a: None, "expected the trained model or its state_dict(), got NoneType"),
    ),
    hidden_type_hints={"2.1": ch02.HINT_WRONG_TYPE},
    forbidden_calls={lm.train: None},
    allowed_calls=(torch.sigmoid, torch.tanh),
)


# ---------------------------------------------------------------------------------------------
# The references against torch
# ---------------------------------------------------------------------------------------------


def test_bptt_reference_equals_autograd():
    """The chapter's Jacobian product, by hand, is what autograd computes through the loop."""
    torch.manual_seed(0)
    model = rnn.ElmanRNN(3, 5).double()
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    h, hs = torch.zeros(2, 5, dtype=torch.float64), []
    for t in range(7):
        h = rnn.elman_step(x[:, t], h, *model.cell_parameters(layer=0))
        hs.append(h)
    grad_last = torch.randn(2, 5, dtype=torch.float64)
    loss = (hs[-1] * grad_last).sum()  # dL/dh_{T-1} = grad_last
    by_autograd = torch.stack(torch.autograd.grad(loss, hs), dim=1)  # (B, T, Hs)
    states = torch.stack(hs, dim=1).detach()
    got = ch02.bptt_gradients(states, model.weight_hh_l0.detach(), grad_last)
    torch.testing.assert_close(got, by_autograd)


def test_gru_reference_equals_torch_gru():
    task = checks.get_task("2.2")
    x, h0, *params = task.build_args({**task.cases[0].args, "dtype": "float64"})
    reference = torch.nn.GRU(x.shape[-1], h0.shape[-1], batch_first=True).double()
    with torch.no_grad():
        for name, value in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"),
                               params, strict=True):
            getattr(reference, name).copy_(value)
        expected, h_n = reference(x, h0[None])
    outputs, h_T = ch02.gru_layer(x, h0, *params)
    torch.testing.assert_close(outputs, expected)
    torch.testing.assert_close(h_T, h_n[0])


def test_the_gru_reference_lives_with_the_checks():
    """An extension's reference is not in a module the book includes."""
    import coursepkg.rnn

    assert not hasattr(coursepkg.rnn, "gru_step") and not hasattr(coursepkg.rnn, "GRU")


# ---------------------------------------------------------------------------------------------
# 2.3: the train task's target, budget and bands
# ---------------------------------------------------------------------------------------------


def test_the_reference_reaches_the_target_on_three_seeds_in_half_the_budget():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for seed in (1, 2, 3):
            x, y, _ = ch02._build_ab_args({"seed": seed, "n": ch02.AB_TRAIN})
            start = time.process_time()
            model = ch02.train_ab_acceptor(x, y, seed)
            cpu = time.process_time() - start
            held_out = ch02.ab_held_out({"_heldout": seed + 1000})
            assert (
                held_out_accuracy(ch02.ABAcceptor, model.state_dict(), *held_out)
                >= ch02.AB_BANDS[0][0]
            )
            # CPU time, not wall-clock: the machine may be shared; the budget is generous
            assert cpu < ch02.AB_TIME_LIMIT / 2, cpu
    finally:
        torch.set_num_threads(threads)


def test_untrained_or_otherwise_trained_models_get_nothing():
    for func in (untrained, trained_on_shuffled_labels, latch_by_hand):
        result = run_task("2.3", func, hidden=True)
        assert (result.points == 0) == (func is not latch_by_hand), func.__name__


def test_a_model_of_the_b_s_near_the_end_is_far_from_the_target():
    result = run_task("2.3", trained_on_the_last_symbol, hidden=True)
    assert result.points < result.max_points / 4


def test_too_little_training_earns_a_partial_band():
    task = checks.get_task("2.3")
    held_out = ch02.ab_held_out(task.cases[0].args)
    # a model that knows about a B only in the last 14 positions: 0.5 + 0.5 * 14 / 20 = 0.85
    x, y = held_out
    knows = (x[:, -14:].amax(dim=1) == y).float().mean().item()
    verdict = core.banded(knows, ch02.AB_BANDS)
    assert 0 < verdict.credit < 1
    state = latch_by_hand(*task.build_args(core.student_args(task.cases[0].args))).state_dict()
    assert held_out_accuracy(ch02.ABAcceptor, state, *held_out) == 1.0


def test_the_held_out_strings_never_reach_the_student_s_function():
    case = checks.get_task("2.3").cases[0]
    assert "_heldout" in case.args and "_heldout" not in core.student_args(case.args)
    seen = []

    def spy(x, y, seed):
        seen.append((x, y, seed))
        return latch_by_hand(x, y, seed)

    checks.run_task("2.3", spy, tripwire=False)
    x, y, seed = seen[0]
    held_x, _ = ch02.ab_held_out(case.args)
    assert seed == case.args["seed"] and x.shape == (ch02.AB_TRAIN, ch02.AB_LENGTH)
    assert not torch.equal(held_x[:len(x)], x)


def test_the_check_cell_prints_the_time_of_the_training(capsys):
    out = check_output(capsys, "2.3", latch_by_hand)
    assert out.startswith("Task 2.3 train_ab_acceptor: 3/3 points\n")
    assert f" s of {ch02.AB_TIME_LIMIT:g} s budget)" in out


# ---------------------------------------------------------------------------------------------
# 2.4: the debug task
# ---------------------------------------------------------------------------------------------


def test_the_starter_code_fails_every_case_naming_its_three_bugs():
    result = run_task("2.4", starter_tbptt, hidden=True)
    assert result.status == "failed" and result.points == 0
    three = " ".join([ch02.PREFIX_TBPTT_BUGS, *ch02.TBPTT_BUGS.values()])
    assert all(case.status == "failed" and case.message.startswith(three)
               for case in result.cases), [case.message for case in result.cases]


def test_each_bug_fixed_alone_is_recognised():
    for bug, hint in ch02.TBPTT_BUGS.items():
        others = frozenset(ch02.TBPTT_BUGS) - {bug}

        def two_left(model, ids, chunk, lr, others=others):
            return ch02._tbptt(model, ids, chunk, lr, bugs=others)

        message = checks.run_task("2.4", two_left, tripwire=False).cases[0].message
        assert message.startswith(ch02.PREFIX_TBPTT_BUGS) and hint not in message, bug


def test_a_state_that_keeps_its_history_raises_with_a_hint():
    result = run_task("2.4", tbptt_not_detached)
    assert all(case.status == "error" for case in result.cases)
    assert "cut it (detach)" in result.cases[0].message


def test_a_trained_caller_s_model_is_a_changed_input():
    result = run_task("2.4", tbptt_trains_the_caller_s_model)
    assert result.points == 0
    assert result.cases[0].message.startswith("Your function changed its input model.")


def test_the_debug_reference_trains():
    """The fixed loop lowers the loss on its text (it is a training loop, not a no-op)."""
    task = checks.get_task("2.4")
    model, ids, chunk, lr = task.build_args({**task.cases[0].args, "N": 60})

    def loss_of(m):
        with torch.no_grad():
            return F.cross_entropy(m(ids[None, :-1])[0], ids[1:]).item()

    trained = model
    for _ in range(5):
        trained = ch02.train_tbptt(trained, ids, chunk, lr)
    assert loss_of(trained) < loss_of(model) - 0.1


# ---------------------------------------------------------------------------------------------
# 2.5 and 2.6: the questions' keys follow the package
# ---------------------------------------------------------------------------------------------


def test_the_keys_are_computed_from_the_package():
    assert ch02.lstm_parameter_count_key() == 4 * 32 * (10 + 32) + 8 * 32
    assert ch02.vanishing_distance_key() == vanishing_distance()
    torch.manual_seed(0)
    norms = ch02.input_gradient_norms(rnn.ElmanRNN(16, 64).double())
    d = ch02.vanishing_distance_key()
    assert norms[d] / norms[0] < 1e-6 <= norms[d - 1] / norms[0]


def test_the_question_keys_leave_the_global_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    ch02.vanishing_distance_key()
    assert torch.equal(torch.rand(2), expected)


def test_a_question_s_key_follows_the_package(monkeypatch):
    task = checks.get_task("2.5")
    task.reference.cache_clear()
    try:
        monkeypatch.setattr(ch02, "QUESTION_LSTM", {"input_size": 4, "hidden_size": 2})
        assert checks.run_task("2.5", lambda: 4 * 2 * 6 + 16).status == "passed"
    finally:
        task.reference.cache_clear()


# ---------------------------------------------------------------------------------------------
# The chapter's shares of points, and a submission that pastes the book
# ---------------------------------------------------------------------------------------------


def test_the_shares_of_points_by_kind():
    points = checks.points_by_kind("02_rnn")
    total = sum(points.values())
    assert points["formula"] <= total / 3
    assert points["extension"] > 0 and points["train"] > 0 and points["debug"] > 0
    assert points["question"] > 0


def paste_bptt(states, weight_hh, grad_last):
    """What the book shows for BPTT: autograd (forbidden here) through the package's RNN."""
    states = states.detach().requires_grad_()
    return torch.autograd.grad((states[:, -1] * grad_last).sum(), states)[0]


def paste_gru(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    """The book's recurrent module in place of a GRU (it has none)."""
    return rnn.ElmanRNN(x.shape[-1], h0.shape[-1])(x, h0[None])


class PageAcceptor(torch.nn.Module):
    """The page's A/B acceptor, pasted (its LSTM of 16 units)."""

    def __init__(self, hidden_size=16):
        super().__init__()
        self.rnn = rnn.LSTM(input_size=2, hidden_size=hidden_size)
        self.out = torch.nn.Linear(hidden_size, 2)

    def forward(self, x):
        states, _ = self.rnn(F.one_hot(x, 2).float())
        return self.out(states[:, -1])


def paste_acceptor(x, y, seed):
    """The page's A/B training loop, pasted: fresh strings of length 40 every step (not the
    strings given), 250 steps, the page's acceptor."""
    torch.manual_seed(seed)
    model = PageAcceptor()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(seed + 1)
    for _ in range(250):
        strings, labels = data.ab_task(64, 40, generator=generator, max_b=1)
        loss = F.cross_entropy(model(strings), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def paste_tbptt(model, ids, chunk, lr):
    """The book's language-model training, lm.train, on the text."""
    model = copy.deepcopy(model)
    lm.train(model, ids, steps=2, batch_size=1, block_size=chunk, lr=lr, progress=False)
    return model


def test_a_book_paster_gets_at_most_the_formula_share():
    """Each function delegating to the code the chapter page shows, as far as that goes: the
    grader gives at most the formula tasks' share (here: nothing)."""
    pasted = {"2.1": paste_bptt, "2.2": paste_gru, "2.3": paste_acceptor, "2.4": paste_tbptt,
              "2.5": lambda: 4 * 32 * (10 + 32), "2.6": lambda: 40}
    earned = sum(run_task(task_id, func, hidden=True).points for task_id, func in pasted.items())
    points = checks.points_by_kind("02_rnn")
    assert earned <= points["formula"]


# ---------------------------------------------------------------------------------------------
# Cases and messages
# ---------------------------------------------------------------------------------------------


def test_hidden_edge_cases_are_there():
    assert any(case.args["T"] == 1 for case in all_cases(checks.get_task("2.1")))
    assert any(case.args["Hs"] == 1 for case in hidden_cases(checks.get_task("2.1")))
    gru = hidden_cases(checks.get_task("2.2"))
    assert any(case.args["T"] == 1 for case in gru) and any(case.args["B"] == 1 for case in gru)
    texts = all_cases(checks.get_task("2.4"))
    shorter = [(case.args["N"] - 1) % case.args["chunk"] != 0 for case in texts]
    assert any(shorter) and not all(shorter)
    assert {shorter[0], shorter[1]} == {True, False}  # both in public


def test_public_failures_show_the_specifics():
    result = run_task("2.2", gru_time_major)
    assert "Expected outputs of shape (2, 5, 4), got (5, 2, 4)." in result.cases[0].message
    result = run_task("2.1", bptt_transposed)
    detail = result.cases[0].message.removeprefix(ch02.HINT_BPTT_TRANSPOSE).strip()
    assert detail.startswith("grads[") and "values differ)." in detail


def test_torchs_gru_is_forbidden_in_the_gru_layer():
    from coursepkg.checks.forbidden import Tripwire

    tripwire = Tripwire(checks.get_task("2.2"))
    assert tripwire.forbidden_callable(torch.nn.GRU.forward) == "torch.nn.GRU"
    assert tripwire.forbidden_callable(torch.gru_cell) == "torch.gru_cell"


def test_autograd_is_forbidden_in_bptt_by_hand():
    result = run_task("2.1", paste_bptt)
    assert result.points == 0
    assert all(case.message.startswith("forbidden: you called torch.autograd")
               for case in result.cases)


def test_check_a_function_that_raises(capsys):
    def broken(states, weight_hh, grad_last):
        return states @ grad_last  # shapes that do not fit

    out = check_output(capsys, "2.1", broken)
    assert "ERROR [0/1]" in out and "raised RuntimeError: " in out


@pytest.mark.parametrize("task_id", ["2.1", "2.2", "2.4"])
def test_inputs_are_reproducible_and_fresh(task_id):
    task = checks.get_task(task_id)
    case = task.cases[0]
    first, second = task.build_args(case.args), task.build_args(case.args)
    assert first[1] is not second[1]
    a, b = first[1], second[1]
    assert torch.equal(a, b)
