"""Chapter 2 tasks (``02_rnn``): an Elman step, an RNN over a sequence, an LSTM step, pooling.

The conventions are those of :mod:`coursepkg.rnn`, which are torch's (``torch.nn.RNN`` and
``torch.nn.LSTM`` with ``batch_first=True``): tensors are batch first; a weight matrix has one row
per output unit, so the products are ``x_t @ weight_ih.T``; the LSTM stacks its four gates in the
order i, f, g, o. The references are the package's own tested functions.

A case's ``args`` hold a seed, sizes and a dtype name (a row of the task's table: ``Step``,
``Run``, ``LSTMStep``, ``Pool``); ``build_args`` draws the tensors from a seeded
``torch.Generator``, so the grader's worker and its trusted process build the same inputs. The
hidden cases' generators draw the seed and the sizes from the grader's random generator and keep
what each case is for (float64, one time step, a batch of one, one hidden unit, larger sizes).
A returned tensor becomes the plain value ``{"shape": [...], "dtype": "float32", "data": [...]}``.
The judges compare shapes first (naming the known shape mistakes: time-major outputs, outputs
not collected, ...), then dtypes, then values within the dtype's tolerance, and recognise known
wrong implementations by recomputing each one from the case's inputs. The tensor helpers are
shared with the later chapters (:mod:`coursepkg.checks.tensors`); here an answer with NaN or
infinite values is told so at once (``non_finite_mistakes=False``).

Shape letters: B batch, T time steps, I input features, Hs hidden units, F features.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from coursepkg import rnn
from coursepkg.checks import masks
from coursepkg.checks.core import Args, Task, draw_seed, draw_sizes, hidden, register
from coursepkg.checks.forbidden import RECURRENT_KERNELS
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    Variant,
    cell_parameters,
    generator,
    normal,
    parts_plain,
    tensor_judge,
    tensor_plain,
    with_weights,
)

ASSIGNMENT = "02_rnn"

# The package's recurrent code, torch's recurrent modules and their fused kernels do the whole
# task; a student must write the arithmetic.
_NO_RECURRENT_LIBRARIES = (
    "coursepkg.rnn",
    "coursepkg.checks",
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
    *RECURRENT_KERNELS,
)
_NO_POOLING_LIBRARIES = ("coursepkg.rnn", "coursepkg.checks")


# --------------------------------------------------------------------------------------------
# Hints shared by the tasks
# --------------------------------------------------------------------------------------------

HINT_WRONG_TYPE = "Return torch tensors, computed with torch operations on the whole batch."
HINT_NO_BIAS = (
    "Add the biases: the pre-activation is x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T "
    "+ bias_hh. Without them every unit's threshold is stuck at 0."
)
HINT_ONE_BIAS = (
    "Add both biases, bias_ih AND bias_hh (torch keeps one per matrix product): one of them is "
    "missing from your pre-activation."
)
HINT_TRANSPOSE = (
    "Multiply by the transposed weights: a weight matrix has one row per hidden unit "
    "(weight_ih is (Hs, I), weight_hh is (Hs, Hs)), so the products are x_t @ weight_ih.T and "
    "h_prev @ weight_hh.T."
)
HINT_WEIGHTS_SWAPPED = (
    "weight_ih multiplies the input x_t and weight_hh the previous state h_prev, not the other "
    "way round."
)


# --------------------------------------------------------------------------------------------
# Drawing the inputs of a case (all from a seeded generator)
# --------------------------------------------------------------------------------------------


def _state(gen: torch.Generator, shape: tuple[int, ...], kind: str, dtype, scale: float = 1.0):
    """A hidden state: ``"random"`` (tanh of normal values, as an RNN's states are) or zeros."""
    values = torch.tanh(normal(gen, shape, scale, dtype))
    return values if kind == "random" else torch.zeros_like(values)


# --------------------------------------------------------------------------------------------
# Task 2.1 elman_step
# --------------------------------------------------------------------------------------------

HINT_NO_TANH = (
    "Apply tanh to the pre-activation: without a nonlinearity an RNN is a linear map of its "
    "inputs, however many steps it takes."
)
HINT_TANH_PARTIAL = (
    "Apply tanh once, to the whole sum: tanh(x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T "
    "+ bias_hh). Your tanh covers only part of it (e.g. only the recurrent term) and the rest "
    "is added outside."
)
HINT_TANH_ON_INPUT = (
    "tanh goes around the sum, after the matrix products, not on the inputs before them: "
    "multiply x_t as given by weight_ih.T, add h_prev @ weight_hh.T and the biases, then take "
    "tanh of the total."
)
HINT_OTHER_NONLINEARITY = (
    "The Elman RNN here uses torch.tanh, not sigmoid or ReLU: tanh keeps h_t in (-1, 1), "
    "centred on 0."
)
HINT_ELMAN_SHAPE = (
    "h_t has the shape of h_prev, (B, Hs): one row per sequence of the batch, one column per "
    "hidden unit. Multiply x_t @ weight_ih.T, not weight_ih @ x_t.T."
)
HINT_ELMAN_GENERIC = (
    "h_t = tanh(x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh), computed for the "
    "whole batch at once."
)

_ElmanStep = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def _elman_mistakes() -> list[tuple[str, _ElmanStep]]:
    """Known wrong Elman steps ``f(x, h, w_ih, w_hh, b_ih, b_hh)``, most specific first."""
    tanh, sigmoid, relu = torch.tanh, torch.sigmoid, torch.relu
    return [
        (HINT_NO_BIAS, lambda x, h, wi, wh, bi, bh: tanh(x @ wi.T + h @ wh.T)),
        (HINT_ONE_BIAS, lambda x, h, wi, wh, bi, bh: tanh(x @ wi.T + bi + h @ wh.T)),
        (HINT_ONE_BIAS, lambda x, h, wi, wh, bi, bh: tanh(x @ wi.T + h @ wh.T + bh)),
        (HINT_NO_TANH, lambda x, h, wi, wh, bi, bh: x @ wi.T + bi + h @ wh.T + bh),
        (HINT_TANH_PARTIAL, lambda x, h, wi, wh, bi, bh: x @ wi.T + bi + tanh(h @ wh.T + bh)),
        (HINT_TANH_PARTIAL, lambda x, h, wi, wh, bi, bh: x @ wi.T + bi + bh + tanh(h @ wh.T)),
        (HINT_TANH_PARTIAL, lambda x, h, wi, wh, bi, bh: tanh(x @ wi.T + bi) + h @ wh.T + bh),
        (HINT_TANH_PARTIAL,
         lambda x, h, wi, wh, bi, bh: tanh(x @ wi.T + bi) + tanh(h @ wh.T + bh)),
        (HINT_TANH_ON_INPUT, lambda x, h, wi, wh, bi, bh: tanh(x) @ wi.T + bi + h @ wh.T + bh),
        (HINT_TANH_ON_INPUT,
         lambda x, h, wi, wh, bi, bh: tanh(x) @ wi.T + bi + tanh(h) @ wh.T + bh),
        (HINT_TANH_ON_INPUT,
         lambda x, h, wi, wh, bi, bh: tanh(tanh(x) @ wi.T + bi + h @ wh.T + bh)),
        (HINT_OTHER_NONLINEARITY,
         lambda x, h, wi, wh, bi, bh: sigmoid(x @ wi.T + bi + h @ wh.T + bh)),
        (HINT_OTHER_NONLINEARITY,
         lambda x, h, wi, wh, bi, bh: relu(x @ wi.T + bi + h @ wh.T + bh)),
        (HINT_TRANSPOSE, lambda x, h, wi, wh, bi, bh: tanh(x @ wi.T + bi + h @ wh + bh)),
        (HINT_TRANSPOSE, lambda x, h, wi, wh, bi, bh: tanh(x @ wi + bi + h @ wh.T + bh)),
        (HINT_TRANSPOSE, lambda x, h, wi, wh, bi, bh: tanh(x @ wi + bi + h @ wh + bh)),
        (HINT_WEIGHTS_SWAPPED, lambda x, h, wi, wh, bi, bh: tanh(x @ wh.T + bi + h @ wi.T + bh)),
    ]


def _build_elman_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, n_in, Hs = int(args["B"]), int(args["n_in"]), int(args["Hs"])
    x_t = normal(gen, (B, n_in), 1.0, dtype)
    h_prev = _state(gen, (B, Hs), args["h_prev"], dtype)
    return (x_t, h_prev, *cell_parameters(gen, 1, n_in, Hs, dtype))


def _elman_to_plain(value: object) -> dict:
    return tensor_plain(value, "h_t")


def _elman_shape_hint(got: list, expected: list, k: int) -> str:
    return HINT_ELMAN_SHAPE


def _elman_variants(inputs: tuple) -> list[Variant]:
    return [(hint, lambda f=f: (f(*inputs),), "") for hint, f in _elman_mistakes()]


_judge_elman = tensor_judge(_build_elman_args, ("h_t",), _elman_variants, _elman_shape_hint,
                            HINT_ELMAN_GENERIC, non_finite_mistakes=False)


@dataclass(frozen=True)
class Step(Args):
    """A case of task 2.1 (and 2.3's sizes): x_t (B, n_in), h_prev (B, Hs)."""

    seed: int
    B: int
    n_in: int
    Hs: int
    h_prev: str = "random"
    dtype: str = "float32"


_ELMAN_CASES = (
    Step(201, B=2, n_in=3, Hs=4).case("a batch of 2, 3 inputs, 4 hidden units"),
    Step(202, B=3, n_in=2, Hs=5, h_prev="zeros").case("the first step: h_prev = 0"),
    Step(203, B=4, n_in=5, Hs=3).case("a batch of 4, 5 inputs, 3 hidden units"),
)


def _square(rng: random.Random) -> Step:
    n = rng.randint(2, 5)
    return Step(draw_seed(rng), B=1, n_in=n, Hs=n)


_ELMAN_HIDDEN = (
    hidden("hidden: float64", lambda rng: Step(draw_seed(rng), rng.randint(2, 4),
                                               *draw_sizes(rng, 2, 2, 7), dtype="float64")),
    hidden("hidden: a batch of one, as many inputs as hidden units", _square),
    hidden("hidden: one hidden unit",
           lambda rng: Step(draw_seed(rng), rng.randint(2, 4), rng.randint(2, 4), 1)),
    hidden("hidden: larger sizes", lambda rng: Step(draw_seed(rng), rng.randint(6, 10),
                                                    rng.randint(8, 12), rng.randint(12, 20))),
)

_ELMAN_ERROR_HINTS = {
    "RuntimeError": "A tensor operation failed, most often because shapes do not fit: x_t is "
    "(B, I), h_prev (B, Hs), weight_ih (Hs, I), weight_hh (Hs, Hs), so the products are "
    "x_t @ weight_ih.T and h_prev @ weight_hh.T.",
    "CheckError": HINT_WRONG_TYPE,
}

register(
    Task(
        id="2.1",
        assignment=ASSIGNMENT,
        func_name="elman_step",
        title="One step of an Elman RNN",
        cases=_ELMAN_CASES,
        hidden=_ELMAN_HIDDEN,
        build_args=_build_elman_args,
        reference=rnn.elman_step,
        to_plain=_elman_to_plain,
        judge=_judge_elman,
        forbidden=_NO_RECURRENT_LIBRARIES,
        error_hints=_ELMAN_ERROR_HINTS,
    )
)


# --------------------------------------------------------------------------------------------
# Task 2.2 run_rnn
# --------------------------------------------------------------------------------------------

HINT_H0_REUSED = (
    "Each step must start from the state the previous step returned: update h inside the loop "
    "(h = elman_step(x[:, t], h, ...)) instead of passing h0 to every step."
)
HINT_H0_IGNORED = (
    "Start from the given initial state h0, not from zeros: h0 is the state before the first "
    "input (it may carry what an earlier chunk of text left)."
)
HINT_OUTPUTS_SHIFTED = (
    "outputs[:, t] is the state AFTER reading x[:, t]: keep the state the step returns, not the "
    "one it started from (h0 is not an output)."
)
HINT_H_T = (
    "h_T is the state after the last step, the same as outputs[:, -1]: return the final h, not "
    "h0 or the first output."
)
HINT_REVERSED = (
    "Read the sequence left to right, t = 0, 1, ..., T - 1, and keep each state at its own "
    "position t."
)
HINT_SAME_INPUT = "Step t reads the input at time t, x[:, t]: your steps all read the same input."
HINT_TIME_MAJOR = (
    "outputs must be batch first, (B, T, Hs): stack the states along dim=1 "
    "(torch.stack(states, dim=1)); stacking along dim=0 gives (T, B, Hs)."
)
HINT_OUTPUTS_NOT_COLLECTED = (
    "outputs holds the hidden state after EVERY step, (B, T, Hs): keep h after each step in a "
    "list and stack the list along dim=1. The last state alone is h_T."
)
HINT_OUTPUTS_WITH_H0 = (
    "outputs has one state per input, T in all: leave out h0, the state before the first input."
)
HINT_H_T_SHAPE = (
    "h_T is one state per sequence, (B, Hs) like h0, without the leading layer dimension that "
    "torch.nn.RNN adds."
)
HINT_RUN_ORDER = "Return the pair in the order (outputs, h_T)."
HINT_RUN_SHAPE = (
    "Return (outputs, h_T): outputs (B, T, Hs), the state after every step, batch first; h_T "
    "(B, Hs), the state after the last step."
)
HINT_STEP_WRONG = (
    "The loop is right but the step is not: your outputs are those of an RNN whose step has a "
    "mistake. Make elman_step pass task 2.1, then call it here."
)
HINT_RUN_GENERIC = (
    "Loop over time: start from h = h0; for t in range(T): h = elman_step(x[:, t], h, ...) and "
    "keep each h. Return torch.stack(kept, dim=1) and the last h."
)


def _build_run_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, n_in, Hs = int(args["B"]), int(args["T"]), int(args["n_in"]), int(args["Hs"])
    x = normal(gen, (B, T, n_in), 1.0, dtype)
    h0 = _state(gen, (B, Hs), args["h0"], dtype)
    return (x, h0, *cell_parameters(gen, 1, n_in, Hs, dtype))


def run_rnn(
    x: Tensor, h0: Tensor, weight_ih: Tensor, weight_hh: Tensor, bias_ih: Tensor, bias_hh: Tensor
) -> tuple[Tensor, Tensor]:
    """Task 2.2's reference: :class:`coursepkg.rnn.ElmanRNN` with the given parameters.

    Args:
        x: (B, T, I) inputs; h0: (B, Hs) initial state; the parameters as in ``elman_step``.

    Returns:
        ``(outputs (B, T, Hs), h_T (B, Hs))``.
    """
    n_in, Hs = x.shape[-1], h0.shape[-1]
    model = with_weights(lambda: rnn.ElmanRNN(n_in, Hs), x.dtype,
                         {"weight_ih_l0": weight_ih, "weight_hh_l0": weight_hh,
                          "bias_ih_l0": bias_ih, "bias_hh_l0": bias_hh})
    with torch.no_grad():
        outputs, h_n = model(x, h0.unsqueeze(0))  # (B, T, Hs), (1, B, Hs)
    return outputs, h_n[0]


def _run_to_plain(value: object) -> list[dict]:
    return parts_plain(value, ("outputs", "h_T"))


def _scan(x: Tensor, h0: Tensor, step: Callable[[Tensor, Tensor], Tensor], *,
          times: Sequence[int] | None = None, reuse_h0: bool = False, same_input: bool = False,
          ) -> tuple[list[Tensor], Tensor]:
    """Run ``step`` over time the way a loop (possibly a wrong one) does.

    Returns:
        the state computed at each time (in time order, or in ``times`` order) and the last one.
    """
    T = x.shape[1]
    h = h0
    states = []
    for t in range(T) if times is None else times:
        h = step(x[:, 0 if same_input else t], h0 if reuse_h0 else h)
        states.append(h)
    return states, h


def _run_variants(inputs: tuple) -> list[Variant]:
    x, h0, wi, wh, bi, bh = inputs
    T = x.shape[1]

    def step(x_t: Tensor, h: Tensor) -> Tensor:
        return rnn.elman_step(x_t, h, wi, wh, bi, bh)

    def stacked(states: list[Tensor]) -> Tensor:
        return torch.stack(states, dim=1)  # (B, T, Hs)

    def reused() -> tuple[Tensor, Tensor]:
        states, last = _scan(x, h0, step, reuse_h0=True)
        return stacked(states), last

    def from_zeros() -> tuple[Tensor, Tensor]:
        states, last = _scan(x, torch.zeros_like(h0), step)
        return stacked(states), last

    def shifted() -> tuple[Tensor, Tensor]:
        states, last = _scan(x, h0, step)
        return stacked([h0, *states[:-1]]), last

    def final_is(which: str) -> Callable[[], tuple[Tensor, Tensor]]:
        def compute() -> tuple[Tensor, Tensor]:
            states, _ = _scan(x, h0, step)
            return stacked(states), h0 if which == "h0" else states[0]
        return compute

    def reversed_time(kept_in_place: bool) -> Callable[[], tuple[Tensor, Tensor]]:
        def compute() -> tuple[Tensor, Tensor]:
            states, last = _scan(x, h0, step, times=range(T - 1, -1, -1))
            return stacked(states[::-1] if kept_in_place else states), last
        return compute

    def same_input() -> tuple[Tensor, Tensor]:
        states, last = _scan(x, h0, step, same_input=True)
        return stacked(states), last

    variants: list[Variant] = [
        (HINT_H0_REUSED, reused, ""),
        (HINT_H0_IGNORED, from_zeros, ""),
        (HINT_OUTPUTS_SHIFTED, shifted, ""),
        (HINT_H_T, final_is("h0"), ""),
        (HINT_H_T, final_is("first"), ""),
        (HINT_REVERSED, reversed_time(True), ""),
        (HINT_REVERSED, reversed_time(False), ""),
        (HINT_SAME_INPUT, same_input, ""),
    ]
    for hint, wrong_step in _elman_mistakes():

        def compute(wrong_step: _ElmanStep = wrong_step) -> tuple[Tensor, Tensor]:
            states, last = _scan(x, h0, lambda x_t, h: wrong_step(x_t, h, wi, wh, bi, bh))
            return stacked(states), last

        variants.append((f"{HINT_STEP_WRONG} {hint}", compute, ""))
    return variants


def _run_shape_hint(got: list, expected: list, k: int) -> str:
    (B, T, Hs), _ = expected
    if got[0] == (B, Hs) and got[1] == (B, T, Hs):
        return HINT_RUN_ORDER
    if k == 0:
        if got[0] == (T, B, Hs):
            return HINT_TIME_MAJOR
        if got[0] == (B, Hs):
            return HINT_OUTPUTS_NOT_COLLECTED
        if got[0] in ((B, T + 1, Hs), (T + 1, B, Hs)):
            return HINT_OUTPUTS_WITH_H0
    elif got[1] == (1, B, Hs):
        return HINT_H_T_SHAPE
    return HINT_RUN_SHAPE


_judge_run = tensor_judge(_build_run_args, ("outputs", "h_T"), _run_variants, _run_shape_hint,
                          HINT_RUN_GENERIC, non_finite_mistakes=False)


@dataclass(frozen=True)
class Run(Args):
    """A case of task 2.2: x (B, T, n_in), h0 (B, Hs)."""

    seed: int
    B: int
    T: int
    n_in: int
    Hs: int
    h0: str = "random"
    dtype: str = "float32"


_RUN_CASES = (
    Run(221, B=2, T=5, n_in=3, Hs=4).case(
        "2 sequences of 5 steps, 3 inputs, 4 hidden units, random h0"),
    Run(222, B=3, T=4, n_in=2, Hs=5, h0="zeros").case("3 sequences of 4 steps from h0 = 0"),
    Run(223, B=4, T=7, n_in=3, Hs=2).case("4 sequences of 7 steps, 2 hidden units"),
)


def _run(rng: random.Random, *, B: int | None = None, T: int | None = None,
         dtype: str = "float32") -> Run:
    """A case of task 2.2 drawn from ``rng``: the sizes not given are small and different."""
    n_in, Hs = draw_sizes(rng, 2, 2, 6)
    B = rng.randint(2, 4) if B is None else B
    return Run(draw_seed(rng), B, rng.randint(3, 7) if T is None else T, n_in, Hs, dtype=dtype)


_RUN_HIDDEN = (
    hidden("hidden: one time step", lambda rng: _run(rng, T=1)),
    hidden("hidden: float64", lambda rng: _run(rng, dtype="float64")),
    hidden("hidden: a batch of one", lambda rng: _run(rng, B=1)),
    hidden("hidden: a long sequence", lambda rng: _run(rng, T=rng.randint(16, 24))),
)

register(
    Task(
        id="2.2",
        assignment=ASSIGNMENT,
        func_name="run_rnn",
        title="Run an Elman RNN over a batch of sequences",
        cases=_RUN_CASES,
        hidden=_RUN_HIDDEN,
        build_args=_build_run_args,
        reference=run_rnn,
        to_plain=_run_to_plain,
        judge=_judge_run,
        forbidden=_NO_RECURRENT_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x is (B, T, I), batch first, so the input at time t is x[:, t], (B, I); h0 is "
            "(B, Hs).",
            "IndexError": "An index ran past the end: x is (B, T, I), so loop over "
            "t in range(x.shape[1]) and read x[:, t].",
            "NameError": "A name is not defined: call your elman_step from task 2.1 (run its "
            "cell first).",
            "CheckError": "Return a pair (outputs, h_T) of tensors.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 2.3 lstm_step
# --------------------------------------------------------------------------------------------

HINT_GATE_ORDER = (
    "The rows of the weights and biases hold the gates in torch's order i, f, g, o (input, "
    "forget, candidate, output): split the pre-activations with .chunk(4, dim=-1) and name the "
    "pieces in that order (some textbooks use i, f, o, g)."
)
HINT_C_FROM_H = (
    "The cell update keeps part of the previous CELL state: the forget gate scales c_prev, not "
    "h_prev."
)
HINT_NO_TANH_C = (
    "The output squashes the new cell state: h_t = o * tanh(c_t); you used c_t without tanh."
)
HINT_OLD_C = (
    "h_t uses the NEW cell state: first update the cell, then h_t = o * tanh(c_t), not "
    "tanh(c_prev)."
)
HINT_GATE_NONLINEARITY = (
    "The gates i, f and o are fractions in (0, 1), so they use torch.sigmoid; the candidate g is "
    "a value in (-1, 1) and uses torch.tanh."
)
HINT_STATE_ORDER = "Return (h_t, c_t) in that order: the hidden state first, then the cell state."
HINT_NO_INPUT_GATE = (
    "The candidate g enters the cell scaled by the input gate i, element by element, as the "
    "old cell state is scaled by the forget gate."
)
HINT_NO_FORGET_GATE = (
    "The old cell state is scaled by the forget gate f, element by element, before the gated "
    "candidate is added."
)
HINT_FORGET_MEANING = (
    "f is the fraction of c_prev to KEEP (f near 1 keeps it all): the cell keeps f times "
    "c_prev, not (1 - f) times it."
)
HINT_GATES_NOT_SPLIT = (
    "The pre-activations are (B, 4 Hs), the four gates side by side: split them into i, f, g, o "
    "with .chunk(4, dim=-1); h_t and c_t are each (B, Hs)."
)
HINT_LSTM_SHAPE = "Return (h_t, c_t), each (B, Hs) like h_prev and c_prev."
HINT_LSTM_GENERIC = (
    "One product gives the four gates' pre-activations side by side, (B, 4 Hs): cut them into "
    "i, f, g, o in that order, sigmoid on i, f and o and tanh on g; the new cell state adds the "
    "forget-gated old one and the input-gated candidate, and h_t is the output gate times "
    "tanh of the new cell state."
)


def _build_lstm_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, n_in, Hs = int(args["B"]), int(args["n_in"]), int(args["Hs"])
    x_t = normal(gen, (B, n_in), 1.0, dtype)
    h_prev = _state(gen, (B, Hs), args["state"], dtype)
    # cell states are not squashed: c_scale > 1 gives values beyond (-1, 1)
    c_prev = normal(gen, (B, Hs), float(args["c_scale"]), dtype)
    if args["state"] == "zeros":
        c_prev = torch.zeros_like(c_prev)
    return (x_t, (h_prev, c_prev), *cell_parameters(gen, 4, n_in, Hs, dtype))


def _lstm_to_plain(value: object) -> list[dict]:
    return parts_plain(value, ("h_t", "c_t"))


def _lstm_variants(inputs: tuple) -> list[Variant]:
    x, (h, c), wi, wh, bi, bh = inputs
    sig, tanh = torch.sigmoid, torch.tanh

    products = x @ wi.T + h @ wh.T  # (B, 4 Hs)

    def chunks(with_ih: bool = True, with_hh: bool = True) -> tuple[Tensor, ...]:
        pre = products + bi if with_ih else products
        pre = pre + bh if with_hh else pre
        return pre.chunk(4, dim=-1)  # each (B, Hs)

    def lstm(*, order: str = "ifgo", acts: str = "ssts", cell: str = "f*c+i*g", out: str = "tanh",
             bias: tuple[bool, bool] = (True, True), swap: bool = False):
        def compute() -> tuple[Tensor, Tensor]:
            pieces = dict(zip(order, chunks(*bias), strict=True))
            act = {"s": sig, "t": tanh}
            i, f, g, o = (act[a](pieces[k]) for k, a in zip("ifgo", acts, strict=True))
            c_t = {
                "f*c+i*g": lambda: f * c + i * g,
                "f*h+i*g": lambda: f * h + i * g,
                "f*c+g": lambda: f * c + g,
                "c+i*g": lambda: c + i * g,
                "(1-f)*c+i*g": lambda: (1 - f) * c + i * g,
            }[cell]()
            h_t = {"tanh": lambda: o * tanh(c_t), "none": lambda: o * c_t,
                   "old": lambda: o * tanh(c)}[out]()
            return (c_t, h_t) if swap else (h_t, c_t)
        return compute

    variants: list[Variant] = []
    for perm in itertools.permutations("ifgo"):
        order = "".join(perm)
        if order != "ifgo":
            note = f"Your result matches the gate order {', '.join(order)}."
            variants.append((HINT_GATE_ORDER, lstm(order=order), note))
    variants += [
        (HINT_C_FROM_H, lstm(cell="f*h+i*g"), ""),
        (HINT_NO_TANH_C, lstm(out="none"), ""),
        (HINT_OLD_C, lstm(out="old"), ""),
        (HINT_STATE_ORDER, lstm(swap=True), ""),
        (HINT_NO_INPUT_GATE, lstm(cell="f*c+g"), ""),
        (HINT_NO_FORGET_GATE, lstm(cell="c+i*g"), ""),
        (HINT_FORGET_MEANING, lstm(cell="(1-f)*c+i*g"), ""),
        (HINT_NO_BIAS, lstm(bias=(False, False)), ""),
        (HINT_ONE_BIAS, lstm(bias=(True, False)), ""),
        (HINT_ONE_BIAS, lstm(bias=(False, True)), ""),
    ]
    for acts in ("ssss", "tttt", "ttst", "sstt"):
        variants.append((HINT_GATE_NONLINEARITY, lstm(acts=acts), ""))
    return variants


def _lstm_shape_hint(got: list, expected: list, k: int) -> str:
    B, Hs = expected[0]
    if got[k] == (B, 4 * Hs):
        return HINT_GATES_NOT_SPLIT
    return HINT_LSTM_SHAPE


_judge_lstm = tensor_judge(_build_lstm_args, ("h_t", "c_t"), _lstm_variants, _lstm_shape_hint,
                           HINT_LSTM_GENERIC, non_finite_mistakes=False)


@dataclass(frozen=True)
class LSTMStep(Args):
    """A case of task 2.3: x_t (B, n_in), h_prev and c_prev (B, Hs), c_prev's scale c_scale."""

    seed: int
    B: int
    n_in: int
    Hs: int
    state: str = "random"
    c_scale: float = 1.0
    dtype: str = "float32"


_LSTM_CASES = (
    LSTMStep(241, B=2, n_in=3, Hs=4).case("a batch of 2, 3 inputs, 4 hidden units"),
    LSTMStep(242, B=3, n_in=2, Hs=3, state="zeros").case("the first step: h_prev = c_prev = 0"),
    LSTMStep(243, B=3, n_in=5, Hs=2, c_scale=3.0).case("a large cell state (|c_prev| > 1)"),
    LSTMStep(244, B=4, n_in=3, Hs=6).case("a batch of 4, 3 inputs, 6 hidden units"),
)

_LSTM_HIDDEN = (
    hidden("hidden: float64", lambda rng: LSTMStep(draw_seed(rng), rng.randint(2, 4),
                                                   *draw_sizes(rng, 2, 2, 6), dtype="float64")),
    hidden("hidden: a batch of one",
           lambda rng: LSTMStep(draw_seed(rng), 1, *draw_sizes(rng, 2, 2, 5))),
    hidden("hidden: one hidden unit",
           lambda rng: LSTMStep(draw_seed(rng), rng.randint(2, 5), rng.randint(2, 4), 1,
                                c_scale=rng.uniform(1.5, 2.5))),
    hidden("hidden: larger sizes", lambda rng: LSTMStep(draw_seed(rng), rng.randint(6, 10),
                                                        rng.randint(8, 12), rng.randint(12, 20))),
)

register(
    Task(
        id="2.3",
        assignment=ASSIGNMENT,
        func_name="lstm_step",
        title="One step of an LSTM (torch's gate order i, f, g, o)",
        cases=_LSTM_CASES,
        hidden=_LSTM_HIDDEN,
        build_args=_build_lstm_args,
        reference=rnn.lstm_step,
        to_plain=_lstm_to_plain,
        judge=_judge_lstm,
        forbidden=_NO_RECURRENT_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x_t is (B, I), h_prev and c_prev (B, Hs), weight_ih (4 Hs, I), weight_hh (4 Hs, "
            "Hs), so the products are x_t @ weight_ih.T and h_prev @ weight_hh.T, each (B, 4 Hs).",
            "ValueError": "Unpacking failed: state is the pair (h_prev, c_prev), and "
            ".chunk(4, dim=-1) of the (B, 4 Hs) pre-activations gives the four gates.",
            "CheckError": "Return a pair (h_t, c_t) of tensors.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 2.4 pool_outputs
# --------------------------------------------------------------------------------------------

HINT_LAST_AT_T = (
    "In a padded row the last REAL output is at position lengths[b] - 1, not T - 1: the "
    "positions after it hold the outputs of padding. Pick each row's own position."
)
HINT_LAST_OFF_BY_ONE = (
    "Positions count from 0: the last real output of row b is at lengths[b] - 1, not lengths[b]."
)
HINT_LAST_FIRST = (
    '"last" is the output at the last real position, lengths[b] - 1, not at the first one.'
)
HINT_LAST_INDEXING = (
    "out[:, lengths - 1] takes those positions in every row, (B, B, F): pair each row with its "
    "own position, indexing the rows with torch.arange(B) and the positions with a tensor of "
    "the same length."
)
HINT_MEAN_PADDING = (
    "Padding is included in your mean: average each row over its real positions only (the sum "
    "of out[b, :lengths[b]] divided by lengths[b]); a (B, T) mask arange(T) < lengths[:, None] "
    "does it for the whole batch."
)
HINT_MEAN_DENOMINATOR = (
    "Divide each row's sum by its own length, lengths[b], not by T: padded positions are not "
    "part of the sequence."
)
HINT_MEAN_NOT_DIVIDED = "That is the sum over the real positions: divide it by lengths[b]."
HINT_MAX_PADDING = (
    'Padding is included in your max: set the padded positions to float("-inf") before the max '
    "over time, so that they can never win."
)
HINT_MAX_ZERO_FILL = (
    'Fill the padded positions with float("-inf"), not 0: outputs can be negative, and then a 0 '
    "from the padding beats every real value."
)
HINT_MASK_OFF_BY_ONE = (
    "Row b's real positions are 0, 1, ..., lengths[b] - 1: the mask is arange(T) < "
    "lengths[:, None], strictly less."
)
HINT_WRONG_MODE = (
    'That is another pooling than the one asked: how="last" takes the last real output, "mean" '
    'the mean over real positions, "max" the max over real positions.'
)
HINT_POOL_DIM = (
    "Pool over time, dim=1 of out (B, T, F): the result is one vector of F features per "
    "sequence, (B, F)."
)
HINT_POOL_KEEPDIM = "Drop the time dimension: the result is (B, F), not (B, 1, F)."
HINT_POOL_SHAPE = "Return one vector per sequence, (B, F)."
HINT_POOL_GENERIC = (
    "Only positions t < lengths[b] of row b are real: last = out[b, lengths[b] - 1]; mean = sum "
    "over real positions / lengths[b]; max = max over real positions (padding set to -inf)."
)


def _build_pool_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, F = int(args["B"]), int(args["T"]), int(args["F"])
    # Outputs at every position, padding included: an RNN run over a padded batch computes
    # states there too, and they are not zero.
    out = torch.tanh(normal(gen, (B, T, F), 1.5, dtype))
    lengths = torch.tensor(args["lengths"], dtype=torch.long)
    return out, lengths, str(args["how"])


def pool_outputs(out: Tensor, lengths: Tensor, how: str) -> Tensor:
    """Task 2.4's reference: :func:`coursepkg.rnn.pool`."""
    return rnn.pool(out, lengths, how)


def _pool_to_plain(value: object) -> dict:
    return tensor_plain(value, "the pooled tensor")


def _pool_variants(inputs: tuple) -> list[Variant]:
    out, lengths, how = inputs
    B, T, _ = out.shape
    rows = torch.arange(B)
    real = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    real_plus = torch.arange(T)[None, :] <= lengths[:, None]  # one position too many
    weights = real[..., None].to(out.dtype)  # (B, T, 1)
    total = (out * weights).sum(dim=1)  # (B, F)
    n = lengths[:, None].to(out.dtype)  # (B, 1)

    def masked_max(mask: Tensor, fill: float) -> Tensor:
        return out.masked_fill(~mask[..., None], fill).amax(dim=1)

    variants: list[Variant] = []
    if how == "last":
        variants += [
            (HINT_LAST_AT_T, lambda: (out[:, -1],), ""),
            (HINT_LAST_OFF_BY_ONE, lambda: (out[rows, lengths.clamp(max=T - 1)],), ""),
            (HINT_LAST_FIRST, lambda: (out[:, 0],), ""),
        ]
    elif how == "mean":
        variants += [
            (HINT_MEAN_PADDING, lambda: (out.mean(dim=1),), ""),
            (HINT_MEAN_PADDING, lambda: (out.sum(dim=1) / n,), ""),
            (HINT_MEAN_DENOMINATOR, lambda: (total / T,), ""),
            (HINT_MEAN_NOT_DIVIDED, lambda: (total,), ""),
            (HINT_MASK_OFF_BY_ONE,
             lambda: ((out * real_plus[..., None].to(out.dtype)).sum(dim=1) / n,), ""),
        ]
    elif how == "max":
        variants += [
            (HINT_MAX_PADDING, lambda: (out.amax(dim=1),), ""),
            (HINT_MAX_ZERO_FILL, lambda: (masked_max(real, 0.0),), ""),
            (HINT_MASK_OFF_BY_ONE, lambda: (masked_max(real_plus, float("-inf")),), ""),
        ]
    for other in ("last", "mean", "max"):
        if other != how:
            variants.append((HINT_WRONG_MODE, lambda other=other: (rnn.pool(out, lengths, other),),
                             f'Your result is the "{other}" pooling.'))
    return variants


def _pool_shape_hint(got: list, expected: list, k: int) -> str:
    B, F = expected[0]
    shape = got[0]
    if len(shape) == 2 and shape[0] == B:
        return HINT_POOL_DIM  # (B, T): pooled over the features
    if shape == (B, 1, F):
        return HINT_POOL_KEEPDIM
    if shape == (B, B, F):
        return HINT_LAST_INDEXING
    if len(shape) == 2 and shape[1] == F:
        return HINT_POOL_DIM  # (T, F): pooled over the batch
    return HINT_POOL_SHAPE


_judge_pool = tensor_judge(_build_pool_args, ("pooled",), _pool_variants, _pool_shape_hint,
                           HINT_POOL_GENERIC, non_finite_mistakes=False)


@dataclass(frozen=True)
class Pool(Args):
    """A case of task 2.4: out (B, T, F) with B = len(lengths), pooled the way ``how`` says."""

    seed: int
    how: str
    lengths: tuple[int, ...]
    T: int
    F: int
    dtype: str = "float32"

    def plain(self) -> dict:
        return {**super().plain(), "B": len(self.lengths)}


_POOL_CASES = (
    Pool(261, "last", (3, 5, 2), T=5, F=4).case('how="last", lengths [3, 5, 2] padded to T = 5'),
    Pool(262, "last", (2, 4), T=6, F=3).case('how="last", no row at full length'),
    Pool(263, "mean", (2, 5, 1, 4), T=5, F=3).case(
        'how="mean", lengths [2, 5, 1, 4] padded to T = 5'),
    Pool(264, "max", (4, 1, 3), T=6, F=5).case('how="max", lengths [4, 1, 3] padded to T = 6'),
)


def _pool(rng: random.Random, how: str, B: int, T: int, *, padded: bool = True,
          short: bool = False, dtype: str = "float32") -> Pool:
    """A batch drawn from ``rng``: one row at full length and, with ``padded``, one padded;
    with ``short``, every other row at most half as long as T."""
    lengths = masks.random_lengths(rng, B, T // 2 if short else T, padded=padded)
    if short:
        lengths[rng.randrange(B)] = T
    return Pool(draw_seed(rng), how, tuple(lengths), T, rng.randint(2, 6), dtype)


_POOL_HIDDEN = (
    hidden("hidden: float64 mean",
           lambda rng: _pool(rng, "mean", 3, rng.randint(5, 8), dtype="float64")),
    hidden("hidden: max over a batch with short rows",
           lambda rng: _pool(rng, "max", 4, rng.randint(5, 7), short=True)),
    hidden("hidden: one time step", lambda rng: _pool(rng, "last", rng.randint(2, 3), 1)),
    hidden("hidden: mean over a batch of one at full length",
           lambda rng: _pool(rng, "mean", 1, rng.randint(4, 7), padded=False)),
)

register(
    Task(
        id="2.4",
        assignment=ASSIGNMENT,
        func_name="pool_outputs",
        title="Pool a padded batch of RNN outputs: last, mean or max over the real positions",
        cases=_POOL_CASES,
        hidden=_POOL_HIDDEN,
        build_args=_build_pool_args,
        reference=pool_outputs,
        to_plain=_pool_to_plain,
        judge=_judge_pool,
        forbidden=_NO_POOLING_LIBRARIES,
        error_hints={
            "IndexError": "An index ran past the end of the time axis: the last real output of "
            "row b is at position lengths[b] - 1 (positions count from 0).",
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: a "
            "(B, T) mask multiplies out (B, T, F) once it has a last axis, mask[..., None].",
            "CheckError": "Return a (B, F) tensor (for max, out.max(dim=1) is a pair: take its "
            ".values, or use amax).",
        },
    )
)
