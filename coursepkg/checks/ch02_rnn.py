"""Chapter 2 tasks (``02_rnn``): backpropagation through time by hand, a GRU layer, an A/B
acceptor trained within a budget, a truncated-BPTT training loop to debug, two questions.

None of these functions is shown by the chapter page: the page shows the Elman and LSTM steps,
the module's loop, pooling and an A/B training loop at length 40 on fresh strings. Here:

* 2.1 ``bptt_gradients`` (formula): the chapter's Jacobian product, computed by hand, backwards
  through the states of an Elman RNN (the page only states it, and measures it with autograd);
* 2.2 ``gru_layer`` (extension): the gated recurrent unit, with torch's equations and gate
  order, run over a batch of sequences; its reference lives here, with the checks;
* 2.3 ``train_ab_acceptor`` (train): train the course's :class:`ABAcceptor` on a fixed set of
  A/B strings of length 20 within a time budget; judged on held-out strings drawn from a seed
  the student's function never sees, by bands of held-out accuracy;
* 2.4 ``train_tbptt`` (debug): a truncated-BPTT loop for a character language model, given
  with three planted bugs; judged on the weights it returns after a few SGD steps;
* 2.5 ``lstm_parameter_count`` and 2.6 ``vanishing_distance`` (questions), their keys computed
  from :mod:`coursepkg.rnn` when checked.

The conventions are those of :mod:`coursepkg.rnn`, which are torch's (``batch_first=True``):
tensors are batch first; a weight matrix has one row per output unit, so the products are
``x_t @ weight_ih.T``; torch's GRU stacks its gates in the order r, z, n. A case's ``args``
hold a seed, sizes and a dtype name (a row of the task's table); ``build_args`` draws the
tensors from a seeded ``torch.Generator``, so the grader's worker and its trusted process build
the same inputs. The judges compare shapes first, then dtypes, then values within the dtype's
tolerance, and recognise known wrong implementations by recomputing each one from the case's
inputs (:mod:`coursepkg.checks.tensors`).

Shape letters: B batch, T time steps, I input features, Hs hidden units, V vocabulary, E
embedding width, N tokens of a text.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursepkg import data, rnn
from coursepkg.checks.core import (
    Args,
    CheckError,
    Task,
    draw_seed,
    draw_sizes,
    hidden,
    question,
    register,
)
from coursepkg.checks.forbidden import RECURRENT_KERNELS
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    Variant,
    cell_parameters,
    classifier_accuracy,
    classifier_advice,
    fit_classifier,
    generator,
    normal,
    parts_plain,
    tensor_judge,
    tensor_plain,
    train_task,
    training_cases,
    with_weights,
)

ASSIGNMENT = "02_rnn"

# torch's recurrent modules and their fused kernels do a whole recurrence; the package's own
# recurrent code and the checks hold the answers.
_NO_RECURRENT_LIBRARIES = (
    "coursepkg.rnn",
    "coursepkg.checks",
    "coursepkg.lm",
    "torch.nn.RNN",
    "torch.nn.LSTM",
    "torch.nn.GRU",
    "torch.nn.RNNCell",
    "torch.nn.LSTMCell",
    "torch.nn.GRUCell",
    "torch.rnn_tanh",
    "torch.rnn_relu",
    "torch.rnn_tanh_cell",
    "torch.rnn_relu_cell",
    "torch.lstm",
    "torch.lstm_cell",
    "torch.gru",
    "torch.gru_cell",
    *RECURRENT_KERNELS,
)

HINT_WRONG_TYPE = "Return torch tensors, computed with torch operations on the whole batch."


def _state(gen: torch.Generator, shape: tuple[int, ...], kind: str, dtype) -> Tensor:
    """A hidden state: ``"random"`` (tanh of normal values, as an RNN's states are) or zeros."""
    values = torch.tanh(normal(gen, shape, 1.0, dtype))
    return values if kind == "random" else torch.zeros_like(values)


# --------------------------------------------------------------------------------------------
# Task 2.1 bptt_gradients (formula)
# --------------------------------------------------------------------------------------------

HINT_BPTT_TRANSPOSE = (
    "With row vectors, h_t depends on h_{t-1} through h_{t-1} W_hh^T, so the chain rule sends "
    "a row gradient back through W_hh itself, not through its transpose: check which side of "
    "the product the weights go on."
)
HINT_BPTT_WHICH_STATE = (
    "The derivative of tanh belongs to the step being undone: going from h_t back to h_{t-1} "
    "multiplies by 1 - h_t^2 (the state that tanh produced at step t), not 1 - h_{t-1}^2."
)
HINT_BPTT_NO_DERIVATIVE = (
    "Each step back must also multiply by the derivative of tanh at that step, 1 - h_t^2, "
    "element by element: the Jacobian is diag(1 - h_t^2) W_hh, not W_hh alone."
)
HINT_BPTT_DERIVATIVE_FORM = (
    "The derivative of tanh, written with its output h = tanh(a), is 1 - h^2: the states you "
    "are given are already tanh of the pre-activations, so do not apply tanh to them again, "
    "and square them."
)
HINT_BPTT_FACTOR_ORDER = (
    "The element-wise factor 1 - h_t^2 applies to the gradient with respect to h_t BEFORE it "
    "goes through the weights: first scale, then multiply by W_hh (the two do not commute)."
)
HINT_BPTT_TIME_ORDER = (
    "Keep each gradient at its own position: grads[:, t] is the gradient with respect to h_t, "
    "so grads[:, T - 1] is grad_last; you computed them backwards, so put them back in time "
    "order before stacking."
)
HINT_BPTT_SHIFTED = (
    "grads[:, T - 1] is grad_last itself, unchanged: the loss reaches the last state directly. "
    "Each earlier position is one step back from the position after it."
)
HINT_BPTT_SHAPE = "Return one gradient per state: (B, T, Hs), the shape of states."
HINT_BPTT_GENERIC = (
    "Start from the gradient with respect to the last state and walk back one step at a time: "
    "each step scales the gradient by the derivative of tanh at the later state and maps it "
    "through the recurrent weights; keep every gradient at the position of its state."
)

_BPTT_FORBIDDEN = (
    "coursepkg.rnn",
    "coursepkg.checks",
    "coursepkg.lm",
    "torch.autograd.grad",
    "torch.autograd.backward",
    "torch.autograd.functional",
    "torch.Tensor.backward",
    "torch.func",
)


def bptt_gradients(states: Tensor, weight_hh: Tensor, grad_last: Tensor) -> Tensor:
    """Task 2.1's reference: ``dL/dh_t`` for every t, for a loss of the last state only.

    With row vectors, ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``, so one step
    back is ``dL/dh_{t-1} = (dL/dh_t * (1 - h_t^2)) W_hh``.

    Args:
        states: (B, T, Hs) the RNN's states h_0 ... h_{T-1}.
        weight_hh: (Hs, Hs) the recurrent weights.
        grad_last: (B, Hs) dL/dh_{T-1}.

    Returns:
        (B, T, Hs) dL/dh_t at every position t.
    """
    grads = [grad_last]  # from the last position back
    for t in range(states.shape[1] - 1, 0, -1):
        grads.append((grads[-1] * (1 - states[:, t] ** 2)) @ weight_hh)  # (B, Hs)
    return torch.stack(grads[::-1], dim=1)  # (B, T, Hs)


def _walk_back(states: Tensor, grad_last: Tensor,
               back: Callable[[Tensor, int], Tensor]) -> list[Tensor]:
    """The gradients a (possibly wrong) backward step gives, from the last position back."""
    grads = [grad_last]
    for t in range(states.shape[1] - 1, 0, -1):
        grads.append(back(grads[-1], t))
    return grads


def _bptt_variants(inputs: tuple) -> list[Variant]:
    h, w, g = inputs

    def timed(back: Callable[[Tensor, int], Tensor]) -> Callable[[], tuple[Tensor]]:
        return lambda: (torch.stack(_walk_back(h, g, back)[::-1], dim=1),)

    def shifted() -> tuple[Tensor]:
        grads = [(g * (1 - h[:, -1] ** 2)) @ w]
        for t in range(h.shape[1] - 1, 0, -1):
            grads.append((grads[-1] * (1 - h[:, t - 1] ** 2)) @ w)
        return (torch.stack(grads[::-1], dim=1),)

    right = lambda grad, t: (grad * (1 - h[:, t] ** 2)) @ w  # noqa: E731
    return [
        (HINT_BPTT_TRANSPOSE, timed(lambda grad, t: (grad * (1 - h[:, t] ** 2)) @ w.T), ""),
        (HINT_BPTT_WHICH_STATE, timed(lambda grad, t: (grad * (1 - h[:, t - 1] ** 2)) @ w), ""),
        (HINT_BPTT_NO_DERIVATIVE, timed(lambda grad, t: grad @ w), ""),
        (HINT_BPTT_NO_DERIVATIVE, timed(lambda grad, t: grad @ w.T), ""),
        (HINT_BPTT_DERIVATIVE_FORM, timed(lambda grad, t: (grad * (1 - h[:, t])) @ w), ""),
        (HINT_BPTT_DERIVATIVE_FORM,
         timed(lambda grad, t: (grad * (1 - torch.tanh(h[:, t]) ** 2)) @ w), ""),
        (HINT_BPTT_FACTOR_ORDER, timed(lambda grad, t: (grad @ w) * (1 - h[:, t] ** 2)), ""),
        (HINT_BPTT_FACTOR_ORDER,
         timed(lambda grad, t: (grad @ w) * (1 - h[:, t - 1] ** 2)), ""),
        (HINT_BPTT_TIME_ORDER, lambda: (torch.stack(_walk_back(h, g, right), dim=1),), ""),
        (HINT_BPTT_SHIFTED, shifted, ""),
    ]


def _bptt_shape_hint(got: list, expected: list, k: int) -> str:
    return HINT_BPTT_SHAPE


@dataclass(frozen=True)
class Back(Args):
    """A case of task 2.1: the states of an Elman RNN (B, T, Hs) run over random inputs, its
    W_hh (Hs, Hs), and a random gradient at the last state (B, Hs)."""

    seed: int
    B: int
    T: int
    Hs: int
    dtype: str = "float32"


def _build_bptt_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, Hs = int(args["B"]), int(args["T"]), int(args["Hs"])
    n_in = 3
    weight_ih, weight_hh, bias_ih, bias_hh = cell_parameters(gen, 1, n_in, Hs, torch.float64)
    weight_hh = weight_hh * 1.5  # states well inside (-1, 1) and some near its ends
    x = normal(gen, (B, T, n_in), 1.0, torch.float64)
    h = torch.zeros(B, Hs, dtype=torch.float64)
    states = []
    for t in range(T):
        h = rnn.elman_step(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
        states.append(h)
    grad_last = normal(gen, (B, Hs), 1.0, torch.float64)
    return torch.stack(states, dim=1).to(dtype), weight_hh.to(dtype), grad_last.to(dtype)


_BPTT_CASES = (
    Back(211, B=2, T=4, Hs=3).case("2 sequences of 4 states, 3 hidden units"),
    Back(212, B=1, T=6, Hs=5).case("1 sequence of 6 states, 5 hidden units"),
    Back(213, B=3, T=1, Hs=4).case("one state: nothing to go back through"),
)

_BPTT_HIDDEN = (
    hidden("hidden: float64", lambda rng: Back(draw_seed(rng), rng.randint(2, 4),
                                               rng.randint(3, 6), rng.randint(2, 6),
                                               dtype="float64")),
    hidden("hidden: a long sequence",
           lambda rng: Back(draw_seed(rng), rng.randint(1, 3), rng.randint(15, 25),
                            rng.randint(3, 6))),
    hidden("hidden: one hidden unit",
           lambda rng: Back(draw_seed(rng), rng.randint(2, 4), rng.randint(3, 6), 1)),
)

register(
    Task(
        id="2.1",
        assignment=ASSIGNMENT,
        func_name="bptt_gradients",
        title="Backpropagation through time by hand: the gradient at every state",
        cases=_BPTT_CASES,
        hidden=_BPTT_HIDDEN,
        build_args=_build_bptt_args,
        reference=bptt_gradients,
        to_plain=lambda value: tensor_plain(value, "grads"),
        judge=tensor_judge(_build_bptt_args, ("grads",), _bptt_variants, _bptt_shape_hint,
                           HINT_BPTT_GENERIC, non_finite_mistakes=False),
        forbidden=_BPTT_FORBIDDEN,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "states is (B, T, Hs), weight_hh (Hs, Hs), grad_last and every gradient (B, Hs).",
            "IndexError": "An index ran past the end of the time axis: the states are at "
            "positions 0 to T - 1.",
            "CheckError": HINT_WRONG_TYPE,
        },
        kind="formula",
    )
)


# --------------------------------------------------------------------------------------------
# Task 2.2 gru_layer (extension)
# --------------------------------------------------------------------------------------------

HINT_GRU_GATE_ORDER = (
    "The rows of torch's GRU weights hold the gates in the order r, z, n (reset, update, new): "
    "cut the stacked pre-activations in that order."
)
HINT_GRU_RESET_OUTSIDE = (
    "In torch's GRU the reset gate scales the whole recurrent part of the candidate, its bias "
    "included: r * (h W_hn^T + b_hn), not r * (h W_hn^T) + b_hn."
)
HINT_GRU_RESET_BEFORE = (
    "That is the GRU of Cho et al. (2014), which resets the state before the product, "
    "(r * h) W_hn^T; torch (and this task) applies r after the product, to h W_hn^T + b_hn."
)
HINT_GRU_RESET_EVERYWHERE = (
    "The reset gate scales only the recurrent part of the candidate; the input part "
    "x W_in^T + b_in is added unscaled."
)
HINT_GRU_NO_RESET = (
    "The candidate n uses the reset gate: without it the cell cannot ignore its old state "
    "when it computes the new content."
)
HINT_GRU_INTERPOLATION = (
    "The update gate z is the share of the OLD state kept: h_t = (1 - z) * n + z * h_prev. "
    "You swapped the roles of the old state and the candidate."
)
HINT_GRU_NONLINEARITY = (
    "r and z are gates, fractions in (0, 1) (sigmoid); the candidate n is a value in (-1, 1) "
    "(tanh)."
)
HINT_GRU_H0_REUSED = (
    "Each step must start from the state the previous step returned: update h inside the loop "
    "instead of passing h0 to every step."
)
HINT_GRU_H0_IGNORED = (
    "Start from the given initial state h0, not from zeros: h0 is the state before the first "
    "input."
)
HINT_GRU_SHIFTED = (
    "outputs[:, t] is the state AFTER reading x[:, t]: keep the state each step returns, not "
    "the one it started from (h0 is not an output)."
)
HINT_GRU_H_T = (
    "h_T is the state after the last step, the same as outputs[:, -1]."
)
HINT_GRU_TIME_MAJOR = (
    "outputs must be batch first, (B, T, Hs): the time steps go along the second dimension."
)
HINT_GRU_NOT_COLLECTED = (
    "outputs holds the state after EVERY step, (B, T, Hs); the last state alone is h_T."
)
HINT_GRU_H_T_SHAPE = (
    "h_T is one state per sequence, (B, Hs) like h0, without the leading layer dimension that "
    "torch.nn.GRU adds."
)
HINT_GRU_ORDER = "Return the pair in the order (outputs, h_T)."
HINT_GRU_SHAPE = (
    "Return (outputs, h_T): outputs (B, T, Hs), the state after every step, batch first; h_T "
    "(B, Hs), the state after the last step."
)
HINT_GRU_GENERIC = (
    "Per step: the input part and the recurrent part of the three pre-activations (rows r, z, "
    "n), sigmoid gates r and z, the candidate n = tanh(input part + r * recurrent part), and "
    "the new state mixing n and the old state with weights 1 - z and z; then loop over time, "
    "keeping every state."
)


def gru_step(x_t: Tensor, h: Tensor, weight_ih: Tensor, weight_hh: Tensor, bias_ih: Tensor,
             bias_hh: Tensor) -> Tensor:
    """One GRU step with torch's equations (gates r, z, n stacked in that order).

    Args:
        x_t: (B, I); h: (B, Hs); weight_ih: (3 Hs, I); weight_hh: (3 Hs, Hs); biases (3 Hs,).

    Returns:
        (B, Hs) the new state ``(1 - z) * n + z * h``.
    """
    i_r, i_z, i_n = (x_t @ weight_ih.T + bias_ih).chunk(3, dim=-1)  # each (B, Hs)
    h_r, h_z, h_n = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def gru_layer(x: Tensor, h0: Tensor, weight_ih: Tensor, weight_hh: Tensor, bias_ih: Tensor,
              bias_hh: Tensor) -> tuple[Tensor, Tensor]:
    """Task 2.2's reference: a one-layer GRU over a batch, equal to ``torch.nn.GRU``.

    Args:
        x: (B, T, I) inputs, batch first; h0: (B, Hs); the parameters as in :func:`gru_step`.

    Returns:
        ``(outputs (B, T, Hs), h_T (B, Hs))``.
    """
    h, states = h0, []
    for t in range(x.shape[1]):
        h = gru_step(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
        states.append(h)
    return torch.stack(states, dim=1), h


_GruStep = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def _gru_step_variant(*, order: str = "rzn", reset: str = "after", mix: str = "right",
                      acts: str = "sst") -> _GruStep:
    """A GRU step with one known mistake (the defaults are torch's GRU)."""

    def step(x_t, h, wi, wh, bi, bh):  # noqa: ANN001, ANN202
        act = {"s": torch.sigmoid, "t": torch.tanh}
        gi = dict(zip(order, (x_t @ wi.T + bi).chunk(3, dim=-1), strict=True))
        gh = dict(zip(order, (h @ wh.T + bh).chunk(3, dim=-1), strict=True))
        r = act[acts[0]](gi["r"] + gh["r"])
        z = act[acts[1]](gi["z"] + gh["z"])
        rows = slice(2 * h.shape[-1], None)
        n_of = {
            "after": lambda: gi["n"] + r * gh["n"],
            "outside": lambda: gi["n"] + r * (gh["n"] - bh[rows]) + bh[rows],
            "before": lambda: gi["n"] + (r * h) @ wh[rows].T + bh[rows],
            "everywhere": lambda: r * (gi["n"] + gh["n"]),
            "none": lambda: gi["n"] + gh["n"],
        }
        n = act[acts[2]](n_of[reset]())
        return (1 - z) * n + z * h if mix == "right" else z * n + (1 - z) * h

    return step


def _gru_mistakes() -> list[tuple[str, _GruStep]]:
    """Known wrong GRU steps, most specific first."""
    mistakes = [(HINT_GRU_GATE_ORDER, _gru_step_variant(order="".join(order)))
                for order in itertools.permutations("rzn") if "".join(order) != "rzn"]
    return mistakes + [
        (HINT_GRU_RESET_OUTSIDE, _gru_step_variant(reset="outside")),
        (HINT_GRU_RESET_BEFORE, _gru_step_variant(reset="before")),
        (HINT_GRU_RESET_EVERYWHERE, _gru_step_variant(reset="everywhere")),
        (HINT_GRU_NO_RESET, _gru_step_variant(reset="none")),
        (HINT_GRU_INTERPOLATION, _gru_step_variant(mix="swapped")),
        (HINT_GRU_NONLINEARITY, _gru_step_variant(acts="sss")),
        (HINT_GRU_NONLINEARITY, _gru_step_variant(acts="tts")),
    ]


def _scan(x: Tensor, h0: Tensor, step: Callable[[Tensor, Tensor], Tensor], *,
          reuse_h0: bool = False) -> list[Tensor]:
    """The state after each step of a (possibly wrong) loop."""
    h, states = h0, []
    for t in range(x.shape[1]):
        h = step(x[:, t], h0 if reuse_h0 else h)
        states.append(h)
    return states


def _gru_variants(inputs: tuple) -> list[Variant]:
    x, h0, wi, wh, bi, bh = inputs

    def step(x_t: Tensor, h: Tensor) -> Tensor:
        return gru_step(x_t, h, wi, wh, bi, bh)

    def loop(start: Tensor, *, reuse: bool = False, shift: bool = False,
             last: str = "last") -> Callable[[], tuple[Tensor, Tensor]]:
        def compute() -> tuple[Tensor, Tensor]:
            states = _scan(x, start, step, reuse_h0=reuse)
            kept = [start, *states[:-1]] if shift else states
            final = {"last": states[-1], "h0": h0, "first": states[0]}[last]
            return torch.stack(kept, dim=1), final
        return compute

    variants: list[Variant] = [
        (HINT_GRU_H0_REUSED, loop(h0, reuse=True), ""),
        (HINT_GRU_H0_IGNORED, loop(torch.zeros_like(h0)), ""),
        (HINT_GRU_SHIFTED, loop(h0, shift=True), ""),
        (HINT_GRU_H_T, loop(h0, last="h0"), ""),
        (HINT_GRU_H_T, loop(h0, last="first"), ""),
    ]
    for hint, wrong in _gru_mistakes():

        def compute(wrong: _GruStep = wrong) -> tuple[Tensor, Tensor]:
            states = _scan(x, h0, lambda x_t, h: wrong(x_t, h, wi, wh, bi, bh))
            return torch.stack(states, dim=1), states[-1]

        variants.append((hint, compute, ""))
    return variants


def _gru_shape_hint(got: list, expected: list, k: int) -> str:
    (B, T, Hs), _ = expected
    if got[0] == (B, Hs) and got[1] == (B, T, Hs):
        return HINT_GRU_ORDER
    if k == 0:
        if got[0] == (T, B, Hs):
            return HINT_GRU_TIME_MAJOR
        if got[0] == (B, Hs):
            return HINT_GRU_NOT_COLLECTED
    elif got[1] == (1, B, Hs):
        return HINT_GRU_H_T_SHAPE
    return HINT_GRU_SHAPE


@dataclass(frozen=True)
class Run(Args):
    """A case of task 2.2: x (B, T, n_in), h0 (B, Hs), the GRU's parameters."""

    seed: int
    B: int
    T: int
    n_in: int
    Hs: int
    h0: str = "random"
    dtype: str = "float32"


def _build_gru_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, n_in, Hs = int(args["B"]), int(args["T"]), int(args["n_in"]), int(args["Hs"])
    x = normal(gen, (B, T, n_in), 1.0, dtype)
    h0 = _state(gen, (B, Hs), args["h0"], dtype)
    return (x, h0, *cell_parameters(gen, 3, n_in, Hs, dtype))


_GRU_CASES = (
    Run(221, B=2, T=5, n_in=3, Hs=4).case(
        "2 sequences of 5 steps, 3 inputs, 4 hidden units, random h0"),
    Run(222, B=3, T=4, n_in=2, Hs=5, h0="zeros").case("3 sequences of 4 steps from h0 = 0"),
    Run(223, B=4, T=6, n_in=4, Hs=2).case("4 sequences of 6 steps, 2 hidden units"),
)


def _run(rng: random.Random, *, B: int | None = None, T: int | None = None,
         dtype: str = "float32") -> Run:
    """A case of task 2.2 drawn from ``rng``: the sizes not given are small and different."""
    n_in, Hs = draw_sizes(rng, 2, 2, 6)
    B = rng.randint(2, 4) if B is None else B
    return Run(draw_seed(rng), B, rng.randint(3, 7) if T is None else T, n_in, Hs, dtype=dtype)


_GRU_HIDDEN = (
    hidden("hidden: one time step", lambda rng: _run(rng, T=1)),
    hidden("hidden: float64", lambda rng: _run(rng, dtype="float64")),
    hidden("hidden: a batch of one", lambda rng: _run(rng, B=1)),
    hidden("hidden: a long sequence", lambda rng: _run(rng, T=rng.randint(16, 24))),
)

register(
    Task(
        id="2.2",
        assignment=ASSIGNMENT,
        func_name="gru_layer",
        title="A GRU layer with torch's equations, run over a batch of sequences",
        cases=_GRU_CASES,
        hidden=_GRU_HIDDEN,
        build_args=_build_gru_args,
        reference=gru_layer,
        to_plain=lambda value: parts_plain(value, ("outputs", "h_T")),
        judge=tensor_judge(_build_gru_args, ("outputs", "h_T"), _gru_variants,
                           _gru_shape_hint, HINT_GRU_GENERIC, non_finite_mistakes=False),
        forbidden=_NO_RECURRENT_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x is (B, T, I), so the input at time t is x[:, t], (B, I); weight_ih is (3 Hs, I) "
            "and weight_hh (3 Hs, Hs), so each product has 3 Hs columns, three blocks of Hs.",
            "ValueError": "Unpacking failed: the (B, 3 Hs) pre-activations hold three blocks "
            "of Hs columns, one per gate.",
            "CheckError": "Return a pair (outputs, h_T) of tensors.",
        },
        kind="extension",
    )
)


# --------------------------------------------------------------------------------------------
# Task 2.3 train_ab_acceptor (train)
# --------------------------------------------------------------------------------------------

#: The A/B strings' length, the size of the training set, the held-out set's.
AB_LENGTH = 20
AB_TRAIN = 1024
AB_HELD_OUT = 1000
#: Full marks from 0.95 held-out accuracy, half from 0.85, a quarter from 0.7 (a coin: 0.5).
AB_BANDS = ((0.95, 1.0), (0.85, 0.5), (0.7, 0.25))
#: Seconds one training may take (measured on one thread); the reference needs a few.
AB_TIME_LIMIT = 20.0
AB_HIDDEN = 8

HINT_AB_FAR = (
    "The held-out accuracy is about what guessing gets: is the model trained at all, on the "
    "strings and labels given (minibatches drawn from them, the cross-entropy of the label "
    "predicted from the last state), and do you return the trained model's weights?"
)
HINT_AB_PARTIAL = (
    "Partial credit: the model has learned part of the task (often the B's near the end of the "
    "string, whose gradient is strongest). Train for more steps, or with a larger learning "
    "rate, within the budget."
)


class ABAcceptor(nn.Module):
    """The course model of task 2.3: read a string of A (0) and B (1), one-hot, with an LSTM
    of ``hidden_size`` units, and classify the last state: is there a B?

    Its state_dict's names are those of ``coursepkg.rnn.LSTM`` (torch's, ``rnn.weight_ih_l0``
    ...) and of ``nn.Linear`` (``out.weight``, ``out.bias``).
    """

    def __init__(self, hidden_size: int = AB_HIDDEN) -> None:
        super().__init__()
        self.rnn = rnn.LSTM(input_size=2, hidden_size=hidden_size)
        self.out = nn.Linear(hidden_size, 2)

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, T) of 0/1 -> logits (B, 2)."""
        states, _ = self.rnn(F.one_hot(x, 2).to(self.out.weight.dtype))  # (B, T, Hs)
        return self.out(states[:, -1])


#: Every name of ABAcceptor's state_dict and its shape.
AB_SHAPES = {
    "rnn.weight_ih_l0": (4 * AB_HIDDEN, 2),
    "rnn.weight_hh_l0": (4 * AB_HIDDEN, AB_HIDDEN),
    "rnn.bias_ih_l0": (4 * AB_HIDDEN,),
    "rnn.bias_hh_l0": (4 * AB_HIDDEN,),
    "out.weight": (2, AB_HIDDEN),
    "out.bias": (2,),
}


def ab_strings(seed: int, n: int) -> tuple[Tensor, Tensor]:
    """``n`` A/B strings of length :data:`AB_LENGTH` (at most one B) and their labels."""
    return data.ab_task(n, AB_LENGTH, generator=torch.Generator().manual_seed(seed), max_b=1)


def _build_ab_args(args: dict) -> tuple:
    """The student's arguments: the training strings, labels and a seed (never the held-out
    seed, which :func:`coursepkg.checks.core.student_args` holds back)."""
    x, y = ab_strings(int(args["seed"]), int(args["n"]))
    return x, y, int(args["seed"])


def ab_held_out(args: dict) -> tuple[Tensor, Tensor]:
    """The ``expected`` hook: the held-out strings, drawn from the case's ``"_heldout"`` seed."""
    return ab_strings(int(args["_heldout"]), AB_HELD_OUT)


def train_ab_acceptor(x: Tensor, y: Tensor, seed: int) -> ABAcceptor:
    """Task 2.3's reference: the forget gates' bias raised by 1 (the chapter's trick), then
    Adam on minibatches of 64 strings drawn from the training set, 400 steps (about 3 s of CPU
    on one thread, a seventh of the budget). With 200 steps it stayed at chance on 3 of 100
    drawn training sets (benchmarks/bench_train_margins.py), and on none of 203 with 400.

    Args:
        x: (N, T) the training strings, 0 for A and 1 for B; y: (N,) 1 iff a string holds a B;
        seed: seeds the initialisation and the minibatches.

    Returns:
        The trained :class:`ABAcceptor`.
    """
    torch.manual_seed(seed)
    model = ABAcceptor()
    with torch.no_grad():  # the forget gates start more open (rows Hs:2Hs, order i, f, g, o)
        model.rnn.bias_ih_l0[AB_HIDDEN:2 * AB_HIDDEN] += 1.0
    return fit_classifier(model, x, y, seed, steps=400, lr=0.02)


register(
    train_task(
        "2.3",
        ASSIGNMENT,
        "train_ab_acceptor",
        "Train an LSTM acceptor on the A/B task at length 20 within a time budget",
        **training_cases("1,024 training strings of length 20", AB_TRAIN, 231, 9231),
        build_args=_build_ab_args,
        reference=train_ab_acceptor,
        model=ABAcceptor,
        held_out=ab_held_out,
        score=classifier_accuracy,
        bands=AB_BANDS,
        time_limit=AB_TIME_LIMIT,
        metric="held-out accuracy",
        advise=classifier_advice(HINT_AB_PARTIAL, HINT_AB_FAR),
        forbidden=("coursepkg.lm",),
        error_hints={
            "CheckError": "Return the trained ABAcceptor (or its state_dict()), with the "
            "names and shapes of ABAcceptor().state_dict().",
            "RuntimeError": "A tensor operation failed: the strings x are (N, T) integers, "
            "the labels y (N,); ABAcceptor takes the integer strings themselves, (B, T).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 2.4 train_tbptt (debug)
# --------------------------------------------------------------------------------------------

HINT_TBPTT_TARGETS = (
    "The targets are the NEXT tokens: the model's output at position t predicts token t + 1, "
    "so the targets are the inputs shifted by one position."
)
HINT_TBPTT_RESET = (
    "Truncated BPTT carries the state from one chunk to the next (the text goes on); only the "
    "gradient is cut at the chunk's start. Start every chunk from the state the previous chunk "
    "ended in, detached from its history."
)
HINT_TBPTT_ZERO_GRAD = (
    "The gradients of one update are added to those of the previous ones: clear them before "
    "each backward pass (the optimizer can do it)."
)
HINT_TBPTT_LAST_CHUNK = (
    "The last chunk is shorter when the pairs do not divide evenly: train on it too (its "
    "targets end with the text's last token)."
)
HINT_TBPTT_SUM = (
    "The loss of a chunk is the MEAN cross-entropy over its positions (what cross_entropy "
    "gives by default), not the sum."
)
HINT_TBPTT_STATE_SHAPE = (
    "Return the trained model (or its state_dict()), with the names and shapes of the model "
    "you were given."
)
HINT_TBPTT_GENERIC = (
    "Walk over the text in chunks of `chunk` (input, next token) pairs; for each: run the RNN "
    "from the carried state, the mean cross-entropy, clear the gradients, backward, one SGD "
    "step, and carry the final state on with its history cut."
)
#: The bugs of the starter code, in the order a hint lists them.
TBPTT_BUGS = {
    "targets": HINT_TBPTT_TARGETS,
    "reset": HINT_TBPTT_RESET,
    "zero_grad": HINT_TBPTT_ZERO_GRAD,
}
PREFIX_TBPTT_BUGS = "Bugs left to fix:"

#: The language model's state_dict names, in the order they are compared.
TBPTT_NAMES = ("embed.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
               "rnn.bias_hh_l0", "head.weight", "head.bias")


def _tbptt(model: rnn.RNNLM, ids: Tensor, chunk: int, lr: float, *,
           bugs: frozenset[str] = frozenset()) -> rnn.RNNLM:
    """Truncated BPTT with SGD, with the ``bugs`` named (a subset of :data:`TBPTT_BUGS`, and
    ``"drop_last"``, ``"sum"``)."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    state = None
    pairs = len(ids) - 1
    for start in range(0, pairs, chunk):
        end = min(start + chunk, pairs)
        if "drop_last" in bugs and end - start < chunk:
            break
        if "targets" in bugs:  # the starter's slices: the same tokens, up to chunk of them
            inputs = targets = ids[start:start + chunk][None]
        else:
            inputs, targets = ids[start:end][None], ids[start + 1:end + 1][None]  # (1, k)
        if "reset" in bugs:
            state = None
        out, (h, c) = model.rnn(model.embed(inputs), state)  # (1, k, Hs)
        logits = model.head(out)  # (1, k, V)
        loss = F.cross_entropy(logits[0], targets[0],
                               reduction="sum" if "sum" in bugs else "mean")
        if "zero_grad" not in bugs:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state = (h.detach(), c.detach())
    return model


def train_tbptt(model: rnn.RNNLM, ids: Tensor, chunk: int, lr: float) -> rnn.RNNLM:
    """Task 2.4's reference: train a copy of ``model`` on the text ``ids`` by truncated BPTT.

    Args:
        model: an LSTM :class:`coursepkg.rnn.RNNLM` (not changed).
        ids: (N,) the text's token ids; its N - 1 (input, next token) pairs are cut into
            consecutive chunks of ``chunk`` pairs (the last may be shorter).
        chunk: pairs per update.
        lr: the SGD learning rate.

    Returns:
        The trained copy: one SGD step per chunk on the chunk's mean cross-entropy, the LSTM's
        state carried from chunk to chunk, its history cut (detached) at each chunk's start.
    """
    return _tbptt(model, ids, chunk, lr)


@dataclass(frozen=True)
class Text(Args):
    """A case of task 2.4: a random text of N tokens over V symbols, an RNNLM (V, E, Hs)
    in float64, chunks of ``chunk`` pairs, SGD at ``lr``."""

    seed: int
    N: int
    chunk: int
    V: int = 5
    E: int = 3
    Hs: int = 4
    lr: float = 0.5
    dtype: str = "float64"


def _build_tbptt_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    V, E, Hs = int(args["V"]), int(args["E"]), int(args["Hs"])
    model = with_weights(lambda: rnn.RNNLM(V, E, Hs, cell="lstm"), dtype)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(normal(gen, tuple(parameter.shape), 0.5, dtype))
    model.train()
    ids = torch.randint(0, V, (int(args["N"]),), generator=gen)
    return model, ids, int(args["chunk"]), float(args["lr"])


def _tbptt_to_plain(value: object) -> list[dict]:
    if isinstance(value, nn.Module):
        value = value.state_dict()
    if not isinstance(value, Mapping):
        raise CheckError(f"expected the trained model or its state_dict(), got "
                         f"{type(value).__name__}")
    missing = [name for name in TBPTT_NAMES if name not in value]
    if missing:
        raise CheckError(f"the state_dict lacks {', '.join(map(repr, missing))}")
    return [tensor_plain(value[name], name) for name in TBPTT_NAMES]


def _bugs_hint(bugs: tuple[str, ...]) -> str:
    return " ".join([PREFIX_TBPTT_BUGS, *(TBPTT_BUGS[bug] for bug in bugs)])


def _tbptt_variants(inputs: tuple) -> list[Variant]:
    model, ids, chunk, lr = inputs

    def trained(bugs: set[str]) -> Callable[[], tuple[Tensor, ...]]:
        def compute() -> tuple[Tensor, ...]:
            state = _tbptt(model, ids, chunk, lr, bugs=frozenset(bugs)).state_dict()
            return tuple(state[name] for name in TBPTT_NAMES)
        return compute

    variants: list[Variant] = []
    for count in (1, 2, 3):
        for bugs in itertools.combinations(TBPTT_BUGS, count):
            hint = TBPTT_BUGS[bugs[0]] if count == 1 else _bugs_hint(bugs)
            variants.append((hint, trained(set(bugs)), ""))
    variants += [
        (HINT_TBPTT_LAST_CHUNK, trained({"drop_last"}), ""),
        (HINT_TBPTT_SUM, trained({"sum"}), ""),
    ]
    return variants


def _tbptt_shape_hint(got: list, expected: list, k: int) -> str:
    return HINT_TBPTT_STATE_SHAPE


_TBPTT_CASES = (
    Text(241, N=13, chunk=4).case("a text of 13 tokens in chunks of 4 pairs"),
    Text(242, N=17, chunk=5).case("a text of 17 tokens: the last chunk is shorter"),
)


def _text(rng: random.Random, *, even: bool) -> Text:
    chunk = rng.randint(3, 6)
    chunks = rng.randint(3, 5)
    pairs = chunk * chunks if even else chunk * chunks + rng.randint(1, chunk - 1)
    return Text(draw_seed(rng), pairs + 1, chunk, V=rng.randint(4, 7), E=rng.randint(2, 4),
                Hs=rng.randint(3, 5))


_TBPTT_HIDDEN = (
    hidden("hidden: chunks that divide the text", lambda rng: _text(rng, even=True)),
    hidden("hidden: a shorter last chunk", lambda rng: _text(rng, even=False)),
)

register(
    Task(
        id="2.4",
        assignment=ASSIGNMENT,
        func_name="train_tbptt",
        title="Debug a truncated-BPTT training loop",
        cases=_TBPTT_CASES,
        hidden=_TBPTT_HIDDEN,
        build_args=_build_tbptt_args,
        reference=train_tbptt,
        to_plain=_tbptt_to_plain,
        judge=tensor_judge(_build_tbptt_args, TBPTT_NAMES, _tbptt_variants, _tbptt_shape_hint,
                           HINT_TBPTT_GENERIC, non_finite_mistakes=False),
        forbidden=("coursepkg.checks", "coursepkg.lm"),
        error_hints={
            "RuntimeError": "A tensor operation failed. 'Trying to backward through the graph "
            "a second time' means the carried state still holds the previous chunk's history: "
            "cut it (detach) before the next chunk. A size mismatch in the loss means inputs "
            "and targets differ in length (the last chunk).",
            "CheckError": "Return the trained model (or its state_dict()).",
        },
        kind="debug",
    )
)


# --------------------------------------------------------------------------------------------
# Task 2.5 and 2.6: questions
# --------------------------------------------------------------------------------------------

#: The LSTM layer of question 2.5.
QUESTION_LSTM = {"input_size": 10, "hidden_size": 32}


def lstm_parameter_count_key() -> int:
    """The key of 2.5: the parameters of ``coursepkg.rnn.LSTM(10, 32)``, counted."""
    layer = rnn.LSTM(**QUESTION_LSTM)
    return int(sum(parameter.numel() for parameter in layer.parameters()))


#: What a question's function may not call: the keys (it returns a number it found itself).
_QUESTION_FORBIDDEN = (
    "coursepkg.lm",
    "coursepkg.checks.core",  # get_task(...).reference() would hand over the key
    "coursepkg.checks.ch02_rnn.lstm_parameter_count_key",
    "coursepkg.checks.ch02_rnn.vanishing_distance_key",
)

register(replace(question(
    "2.5", ASSIGNMENT, "lstm_parameter_count",
    "How many parameters has an LSTM layer with 10 input features and 32 hidden units?",
    lstm_parameter_count_key, points=1, kind_of_answer="int",
    hint="Count the four gates' weights on the input and on the state, and torch's biases: "
    "how many bias vectors does each gate have?",
), forbidden=_QUESTION_FORBIDDEN))

#: Question 2.6: the Elman RNN measured, and the threshold its gradient must fall below.
VANISHING = {"input_size": 16, "hidden_size": 64, "seed": 0, "threshold": 1e-6}


def input_gradient_norms(model: nn.Module, steps: int = 80, batch_size: int = 32,
                         input_size: int = 16, seed: int = 0) -> Tensor:
    """The chapter's measurement (and the notebook's): the mean norm of d(loss at the last
    step) / d(x_t), indexed by the distance T - 1 - t. Draws the classifier's weights from
    torch's global generator, as the chapter's cell does."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, steps, input_size, generator=gen, dtype=torch.float64,
                    requires_grad=True)
    target = torch.randint(0, 10, (batch_size,), generator=gen)
    head = nn.Linear(model.hidden_size, 10, dtype=torch.float64)
    out, _ = model(x)  # (B, T, Hs)
    loss = F.cross_entropy(head(out[:, -1]), target)
    (grad,) = torch.autograd.grad(loss, x)  # (B, T, I)
    return grad.norm(dim=-1).mean(dim=0).flip(0)  # (T,), index 0 = the last step


def vanishing_distance_key() -> int:
    """The key of 2.6: the first distance at which the untrained Elman RNN's input gradient is
    below ``threshold`` times its size at distance 0 (torch's global generator is restored)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(VANISHING["seed"])
        model = rnn.ElmanRNN(VANISHING["input_size"], VANISHING["hidden_size"]).double()
        norms = input_gradient_norms(model, seed=VANISHING["seed"])
    below = (norms / norms[0] < VANISHING["threshold"]).nonzero()
    return int(below[0, 0])


register(replace(question(
    "2.6", ASSIGNMENT, "vanishing_distance",
    "At which distance does the untrained Elman RNN's gradient fall below 1e-6 of its size at "
    "the last step?",
    vanishing_distance_key, points=2, kind_of_answer="int",
    hint="Measure it with the cell given: the first distance d (counted from 0 at the last "
    "step) where the norm divided by the norm at d = 0 is below the threshold.",
), forbidden=_QUESTION_FORBIDDEN))
