"""Tensor helpers shared by the checks of the chapters whose tasks return torch tensors.

A case's ``args`` hold a seed, sizes and a dtype name (plain JSON); :func:`generator` and
:func:`normal` draw the inputs from a seeded ``torch.Generator``, so the grader's worker and its
trusted process build the same tensors (:func:`cell_parameters` draws a recurrent cell's, as
``torch.nn.RNN`` and ``torch.nn.LSTM`` store them). A reference that runs a package module holds
the case's tensors in one built by :func:`with_weights`. A returned tensor crosses the process
boundary as the plain value ``{"shape": [...], "dtype": "float32", "data": [...]}``
(:func:`tensor_plain`, :func:`parts_plain`) and is read back with :func:`decode`.

A train task's answer is a model's weights: :func:`state_dict_plain` turns a returned module
or ``state_dict`` into plain data (its float tensors as float32 bytes in base64: a model of
100,000 parameters is about 0.55 MB of JSON, well within the grader's 8 MiB per message),
checking the names and shapes the task expects; the trusted half reads it back with
:func:`state_dict_tensors` and loads it into the course model (:func:`with_weights`).
:func:`train_task` declares a whole train task that way.

:func:`judge_parts` is the verdict on one or more returned tensors: shapes first (a task's
``shape_hint`` names the known shape mistakes), then dtypes, then values within the dtype's
:data:`TOLERANCE`; a wrong answer is compared with known wrong implementations, each recomputed
from the case's inputs, and gets the hint of the first one it equals. :func:`tensor_judge`
makes a task's judge of it.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn

from coursepkg.checks.core import Case, CheckError, HiddenCase, Task, Verdict, banded, draw_seed

__all__ = [
    "DTYPES",
    "HINT_DTYPE",
    "HINT_NOT_FINITE",
    "NO_ANSWER",
    "SKIPPED",
    "TOLERANCE",
    "ShapeHint",
    "Variant",
    "cell_parameters",
    "classifier_accuracy",
    "classifier_advice",
    "decode",
    "difference",
    "fit_classifier",
    "generator",
    "held_out_accuracy",
    "judge_parts",
    "matches",
    "normal",
    "parts_plain",
    "same",
    "state_dict_plain",
    "state_dict_tensors",
    "tensor_judge",
    "tensor_plain",
    "train_task",
    "training_cases",
    "with_weights",
]

#: (rtol, atol) of value comparisons per dtype: the defaults of torch.testing.assert_close.
TOLERANCE = {"float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}
#: The dtype names a case's ``args["dtype"]`` may hold.
DTYPES = {"float32": torch.float32, "float64": torch.float64}

HINT_DTYPE = (
    "Keep the dtype of the inputs (float32 or float64): create any new tensor with the inputs' "
    "dtype (x.new_zeros(...), torch.zeros(..., dtype=x.dtype)) and do not convert the result."
)
HINT_NOT_FINITE = (
    "The result holds NaN or infinite values: look for a division by zero or an overflow."
)

#: A known mistake: ``(hint, compute, note)``; ``compute()`` recomputes the mistake's returned
#: parts from the case's inputs, ``note`` is added to the detail message ("" for none).
Variant = tuple[str, Callable[[], Sequence[Tensor]], str]
#: ``(got shapes, expected shapes, index of the first wrong part) -> hint``.
ShapeHint = Callable[[list[tuple[int, ...]], list[tuple[int, ...]], int], str]
#: Exceptions that make :func:`judge_parts` skip a known mistake (it does not fit the shapes).
SKIPPED = (RuntimeError, ValueError, IndexError, ArithmeticError)


# --------------------------------------------------------------------------------------------
# Drawing the inputs of a case
# --------------------------------------------------------------------------------------------


def generator(args: dict) -> tuple[torch.Generator, torch.dtype]:
    """A generator seeded with ``args["seed"]`` and the dtype named by ``args["dtype"]``."""
    return torch.Generator().manual_seed(int(args["seed"])), DTYPES[args["dtype"]]


def normal(gen: torch.Generator, shape: tuple[int, ...], scale: float, dtype) -> Tensor:
    """Standard normal values times ``scale``, drawn in float64 then cast (same draws per dtype).

    Args:
        gen: the case's generator (advanced by the draw).
        shape: the tensor's shape.
        scale: multiplies the draws.
        dtype: the result's dtype.
    """
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def cell_parameters(
    gen: torch.Generator, gates: int, n_in: int, Hs: int, dtype
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(weight_ih (gates Hs, I), weight_hh (gates Hs, Hs), bias_ih, bias_hh)`` of a recurrent
    cell with ``gates`` blocks (1 for an Elman RNN, 4 for an LSTM), as torch stores them.

    Scaled so that the pre-activations are of order 1: the nonlinearities then bend them
    clearly, and every known mistake changes the result far beyond the tolerance.
    """
    weight_ih = normal(gen, (gates * Hs, n_in), 1 / math.sqrt(n_in), dtype)
    weight_hh = normal(gen, (gates * Hs, Hs), 1 / math.sqrt(Hs), dtype)
    bias_ih = normal(gen, (gates * Hs,), 0.5, dtype)
    bias_hh = normal(gen, (gates * Hs,), 0.5, dtype)
    return weight_ih, weight_hh, bias_ih, bias_hh


Module = TypeVar("Module", bound=nn.Module)


def with_weights(build: Callable[[], Module], dtype: torch.dtype,
                 state: Mapping[str, Tensor] | None = None) -> Module:
    """The module ``build()`` makes, in ``dtype`` and eval mode, holding ``state``.

    Its random initialisation runs on a fork of torch's global generator (it is overwritten
    anyway), so a check never moves the global random state of the notebook that runs it.

    Args:
        build: makes the module, e.g. ``lambda: SelfAttention(D, Dk, Dv)``.
        dtype: the dtype of its parameters.
        state: its state dict (every parameter and persistent buffer), or None to keep the
            initial values (the caller fills them, e.g. from a case's generator).
    """
    with torch.random.fork_rng(devices=[]):
        module = build()
    module.to(dtype)
    if state is not None:
        module.load_state_dict(state)
    return module.eval()


# --------------------------------------------------------------------------------------------
# Plain values: returned tensors -> JSON data, and back
# --------------------------------------------------------------------------------------------


def tensor_plain(value: object, name: str) -> dict:
    """A returned tensor -> ``{"shape", "dtype", "data"}``; CheckError for anything else.

    Args:
        value: what the student's function returned (or one part of it).
        name: how messages call it (``"the weights"``, ``"h_t"``).

    Raises:
        CheckError: ``value`` is not a floating-point torch tensor (the message names its type).
    """
    if isinstance(value, tuple) and hasattr(value, "values") and hasattr(value, "indices"):
        raise CheckError(
            f"expected {name} as a tensor, got torch.return_types.{type(value).__name__}, a pair "
            "(values, indices): keep its .values"
        )
    if not isinstance(value, torch.Tensor):
        raise CheckError(f"expected {name} as a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise CheckError(f"expected {name} as a floating-point tensor, got dtype {value.dtype}")
    value = value.detach().to("cpu")
    return {
        "shape": list(value.shape),
        "dtype": str(value.dtype).removeprefix("torch."),
        "data": value.reshape(-1).tolist(),
    }


def parts_plain(value: object, names: tuple[str, ...]) -> list[dict]:
    """A returned tuple of ``len(names)`` tensors -> a list of plain tensors.

    Raises:
        CheckError: ``value`` is not a tuple or list of that length, or a part is not a tensor:
            ``"expected a pair (context, weights), got Tensor"``.
    """
    if isinstance(value, torch.Tensor) or not isinstance(value, tuple | list) or len(
        value
    ) != len(names):
        if isinstance(value, tuple | list):
            got = f"a {type(value).__name__} of {len(value)}"
        else:
            got = type(value).__name__
        what = "a pair" if len(names) == 2 else f"a tuple of {len(names)}"
        raise CheckError(f"expected {what} ({', '.join(names)}), got {got}")
    return [tensor_plain(part, name) for part, name in zip(value, names, strict=True)]


def state_dict_plain(value: object, expected: Mapping[str, Sequence[int]]) -> dict:
    """A returned model or ``state_dict`` -> plain data: ``{name: {"shape", "dtype", "base64"}}``.

    For a train task's ``to_plain``: the student's function may return the trained module
    itself or its ``state_dict()``. Floating-point tensors travel as float32, others (a
    counter buffer) as int64, each as the base64 of its little-endian bytes.

    Args:
        value: what the student's function returned.
        expected: every name of the course model's state_dict and its shape, e.g.
            ``{"weight": (2, 2), "bias": (2,)}`` (``{k: tuple(v.shape) for k, v in
            Model().state_dict().items()}``).

    Raises:
        CheckError: naming the problem: not a module or a dict of tensors, a missing or an
            extra name, a value that is not a tensor, a wrong shape, NaN or infinite values.
    """
    if isinstance(value, nn.Module):
        value = value.state_dict()
    if not isinstance(value, Mapping):
        raise CheckError(
            f"expected the trained model or its state_dict(), got {type(value).__name__}"
        )
    missing = [name for name in expected if name not in value]
    if missing:
        raise CheckError(f"the state_dict lacks {', '.join(map(repr, missing))}: return the "
                         "weights of the course model asked for")
    extra = [str(name) for name in value if name not in expected]
    if extra:
        raise CheckError(f"the state_dict has names the model does not: "
                         f"{', '.join(map(repr, extra[:5]))}")
    plain = {}
    for name, shape in expected.items():
        tensor = value[name]
        if not isinstance(tensor, torch.Tensor):
            raise CheckError(f"expected {name!r} as a torch.Tensor, got {type(tensor).__name__}")
        if tuple(tensor.shape) != tuple(shape):
            raise CheckError(f"{name!r} has shape {tuple(tensor.shape)}, the model's is "
                             f"{tuple(shape)}")
        tensor = tensor.detach().to("cpu")
        if tensor.is_floating_point():
            if not bool(torch.isfinite(tensor).all()):
                raise CheckError(f"{name!r} holds NaN or infinite values: the training diverged "
                                 "(a learning rate too large?)")
            tensor, dtype = tensor.to(torch.float32), "float32"
        else:
            tensor, dtype = tensor.to(torch.int64), "int64"
        data = tensor.contiguous().numpy().astype(f"<{'f4' if dtype == 'float32' else 'i8'}")
        plain[name] = {"shape": list(shape), "dtype": dtype,
                       "base64": base64.b64encode(data.tobytes()).decode("ascii")}
    return plain


def state_dict_tensors(plain: object, expected: Mapping[str, Sequence[int]]) -> dict[str, Tensor]:
    """The trusted half's reading of :func:`state_dict_plain`: ``{name: tensor}`` in the
    expected names and shapes; ValueError for anything malformed (a forged answer)."""
    if type(plain) is not dict or set(plain) != set(expected):
        raise ValueError("not the expected state_dict")
    import numpy as np

    tensors = {}
    for name, shape in expected.items():
        part = plain[name]
        if type(part) is not dict or set(part) != {"shape", "dtype", "base64"}:
            raise ValueError(f"{name}: not a plain tensor")
        if part["shape"] != list(shape) or part["dtype"] not in ("float32", "int64"):
            raise ValueError(f"{name}: wrong shape or dtype")
        if type(part["base64"]) is not str:
            raise ValueError(f"{name}: bad data")
        raw = base64.b64decode(part["base64"], validate=True)
        array = np.frombuffer(raw, dtype="<f4" if part["dtype"] == "float32" else "<i8")
        if array.size != math.prod(shape):
            raise ValueError(f"{name}: wrong number of values")
        tensor = torch.from_numpy(array.copy()).reshape(tuple(shape))
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name}: values that are not finite")
        tensors[name] = tensor
    return tensors


def train_task(
    id: str,
    assignment: str,
    func_name: str,
    title: str,
    *,
    cases: tuple[Case, ...],
    build_args: Callable[[dict], tuple],
    reference: Callable,
    model: Callable[[], nn.Module],
    held_out: Callable[[dict], object],
    score: Callable[[nn.Module, object], float],
    bands: Sequence[tuple[float, float]],
    time_limit: float,
    hidden: tuple[HiddenCase, ...] = (),
    metric: str = "accuracy",
    higher_is_better: bool = True,
    hint: str = "",
    forbidden: tuple[str, ...] = (),
    error_hints: Mapping[str, str] | None = None,
    private_files: tuple[str, ...] = (),
    warm: Callable[[], None] | None = None,
    advise: Callable[[nn.Module, object, Verdict], str] | None = None,
    leaderboard: bool = False,
) -> Task:
    """A train task (kind ``"train"``), to ``register`` like any task.

    The student's function gets what ``build_args`` makes of a case's args (the training data
    and a seed; never the args' ``"_"`` keys, such as the held-out seed) and returns the
    trained course model, or its ``state_dict()``. The weights travel as plain data
    (:func:`state_dict_plain`, names and shapes those of ``model()``); the trusted half loads
    them into ``model()``, in eval mode, and awards the band of ``score(module, held_out(args))``
    (:func:`coursepkg.checks.core.banded`). Grading never runs ``reference``: it is the
    instructor's training, which the tests run (on 3 seeds it must reach the first band within
    half of ``time_limit``).

    Args:
        id, assignment, func_name, title, cases, build_args, reference, hidden, forbidden,
            error_hints, private_files, warm: as in :class:`~coursepkg.checks.core.Task`.
        model: builds the course model, untrained (``lambda: CharLSTM(V, 16, 32)``).
        held_out: ``held_out(args)``: the held-out data of a case (from its ``"_"`` seed).
        score: ``score(module, data) -> float``: the measure (accuracy, nats per char...),
            computed under ``torch.no_grad()``.
        bands: ``(threshold, fraction)`` pairs, best first, the first worth 1.0.
        time_limit: seconds per case (see :attr:`~coursepkg.checks.core.Task.time_limit`).
        metric, higher_is_better, hint: as in :func:`~coursepkg.checks.core.banded`.
        advise: ``advise(module, data, verdict) -> hint``, for a result short of full marks:
            a hint chosen by what the model does (:func:`classifier_advice`); it replaces
            ``hint``.
        leaderboard: rank the class by this task's ``metric`` in the report (a capstone; see
            :attr:`~coursepkg.checks.core.Task.leaderboard`).
    """
    with torch.random.fork_rng(devices=[]):
        shapes = {name: tuple(t.shape) for name, t in model().state_dict().items()}

    def judge(got: object, expected: object, args: dict) -> Verdict:
        module = with_weights(model, torch.float32, state_dict_tensors(got, shapes))
        with torch.no_grad():
            value = score(module, expected)
            verdict = banded(float(value), bands, metric=metric,
                             higher_is_better=higher_is_better, hint=hint)
            if verdict.ok or advise is None:
                return verdict
            return dataclasses.replace(verdict, hint=advise(module, expected, verdict))

    return Task(
        id=id, assignment=assignment, func_name=func_name, title=title, cases=cases,
        build_args=build_args, reference=reference,
        to_plain=lambda value: state_dict_plain(value, shapes), judge=judge,
        forbidden=forbidden, error_hints=dict(error_hints or {}), hidden=hidden, kind="train",
        time_limit=time_limit, expected=held_out, private_files=private_files, warm=warm,
        leaderboard=(metric, not higher_is_better) if leaderboard else None,
    )


def training_cases(name: str, n: int, seed: int, held_out_seed: int, points: float = 3
                   ) -> dict[str, tuple]:
    """A train task's cases, to pass as ``train_task(..., **training_cases(...))``.

    Returns ``{"cases": ..., "hidden": ...}``: the public case ``name`` (``n`` training rows
    drawn from ``seed``, the held-out data from ``held_out_seed``) and the hidden case
    "hidden: another training set" (both seeds drawn), each worth ``points``. The args are
    ``{"seed", "n", "_heldout"}``; the student's function never sees ``"_heldout"``.
    """
    def draw(rng: random.Random) -> dict:
        return {"seed": draw_seed(rng), "n": n, "_heldout": draw_seed(rng)}

    return {"cases": (Case(name, points, {"seed": seed, "n": n, "_heldout": held_out_seed}),),
            "hidden": (HiddenCase("hidden: another training set", points, draw),)}


#: A target that has no answer (torch's ``ignore_index``): not trained on, not scored.
NO_ANSWER = -100


def classifier_accuracy(module: nn.Module, data: tuple[Tensor, ...]) -> float:
    """A train task's ``score`` for a classifier: the share of answers that ``module`` gets.

    ``data = (*inputs, targets)``: ``module(*inputs)`` gives logits ``(..., C)`` and
    ``targets`` (int64, the logits' shape without C) the answers; an answer is got when it is
    the most likely class. Targets equal to :data:`NO_ANSWER` are not counted (positions
    that have no answer, as torch's ``ignore_index``).
    """
    *inputs, targets = data
    hits = module(*inputs).argmax(dim=-1) == targets
    return hits[targets != NO_ANSWER].float().mean().item()


def fit_classifier(model: nn.Module, inputs: Tensor | tuple[Tensor, ...], targets: Tensor,
                   seed: int, *, steps: int, lr: float, batch: int = 64) -> nn.Module:
    """The instructor's training of a classifier's train task: Adam on the cross-entropy of
    ``model(*inputs[rows])`` (logits ``(B, ..., C)``) against ``targets[rows]`` (``(B, ...)``;
    :data:`NO_ANSWER` targets left out), ``steps`` minibatches of ``batch`` rows drawn with a
    generator seeded with ``seed``; returns ``model`` in eval mode. ``inputs``: one tensor or
    a tuple of them (the model's arguments), rows first."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    batches = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        rows = torch.randint(0, len(targets), (batch,), generator=batches)
        logits = model(*(x[rows] for x in inputs))  # (B, ..., C)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           targets[rows].reshape(-1), ignore_index=NO_ANSWER)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def held_out_accuracy(build: Callable[[], nn.Module], state: Mapping[str, Tensor],
                      *data: Tensor) -> float:
    """:func:`classifier_accuracy` on ``data = (*inputs, targets)`` of the model ``build()``
    holding the weights ``state`` (float32, eval mode, no gradients): what the grader measures
    for a classifier's train task."""
    module = with_weights(build, torch.float32, state)
    with torch.no_grad():
        return classifier_accuracy(module, data)


def classifier_advice(partial: str, far: str, *, untrained: tuple[float, str] | None = None
                      ) -> Callable[[nn.Module, tuple[Tensor, ...], Verdict], str]:
    """A train task's ``advise`` hook for a classifier (see :func:`train_task`).

    Args:
        partial: the hint for a result that earns part of the points (train longer, better).
        far: the hint for a result that earns nothing.
        untrained: ``(confidence, hint)``: for a result that earns nothing, ``hint`` when the
            model's mean top probability on the held-out inputs (``data = (*inputs,
            targets)``, every position of the logits) is below ``confidence`` (it hardly left
            its initialisation, or predicts at random), else ``far``.
    """

    def advise(module: nn.Module, data: tuple[Tensor, ...], verdict: Verdict) -> str:
        if verdict.fraction:
            return partial
        if untrained is not None:
            threshold, hint = untrained
            if module(*data[:-1]).softmax(dim=-1).amax(dim=-1).mean().item() < threshold:
                return hint
        return far

    return advise


def decode(plain: object) -> tuple[tuple[int, ...], str, Tensor]:
    """A plain tensor -> (shape, dtype name, float64 values); ValueError if it is malformed."""
    if type(plain) is not dict or set(plain) != {"shape", "dtype", "data"}:
        raise ValueError("not a plain tensor")
    shape, dtype, data = plain["shape"], plain["dtype"], plain["data"]
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("bad shape")
    if type(dtype) is not str or type(data) is not list or len(data) != math.prod(shape):
        raise ValueError("bad data")
    if not all(type(v) in (int, float) for v in data):
        raise ValueError("bad values")
    return tuple(shape), dtype, torch.tensor(data, dtype=torch.float64).reshape(shape)


# --------------------------------------------------------------------------------------------
# Comparisons and the verdict
# --------------------------------------------------------------------------------------------


def matches(got: Tensor, expected: Tensor, dtype: str) -> bool:
    """Same shape, finite, and equal within the tolerance of the dtype named ``dtype``."""
    if got.shape != expected.shape:
        return False
    rtol, atol = TOLERANCE.get(dtype, TOLERANCE["float32"])
    got, expected = got.to(torch.float64), expected.to(torch.float64)
    return bool(torch.isfinite(got).all()) and torch.allclose(got, expected, rtol=rtol, atol=atol)


def same(got: Tensor, mistake: Tensor, dtype: str) -> bool:
    """Whether ``got`` equals a recomputed mistake, NaN and infinities in the same places."""
    if got.shape != mistake.shape:
        return False
    rtol, atol = TOLERANCE.get(dtype, TOLERANCE["float32"])
    mistake = mistake.detach().to(torch.float64)
    return bool(torch.allclose(got, mistake, rtol=rtol, atol=atol, equal_nan=True))


def difference(name: str, got: Tensor, expected: Tensor, dtype: str) -> str:
    """The largest gap: ``"h_t[1, 3]: expected 0.415203, got 0.731452 (6 of 8 values differ)."``"""
    rtol, atol = TOLERANCE.get(dtype, TOLERANCE["float32"])
    gap = (got - expected).abs().nan_to_num(nan=math.inf)
    flat = int(gap.reshape(-1).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), got.shape))
    bad = int((~torch.isclose(got, expected, rtol=rtol, atol=atol)).sum())
    where = f"{name}[{', '.join(map(str, index))}]" if index else name
    return (
        f"{where}: expected {expected[index].item():.6g}, got {got[index].item():.6g} "
        f"({bad} of {got.numel()} values differ)."
    )


def judge_parts(
    got: list,
    expected: list,
    names: Sequence[str],
    dtype: str,
    variants: Callable[[], list[Variant]],
    shape_hint: ShapeHint,
    generic_hint: str,
    *,
    non_finite_mistakes: bool = True,
) -> Verdict:
    """The verdict on one or more returned tensors.

    Args:
        got: the student's plain tensors, one per returned part.
        expected: the reference's plain tensors.
        names: the parts' names, for messages (``("context", "weights")``).
        dtype: the case's dtype name, which sets the tolerance.
        variants: a function returning the known mistakes, most specific first (see
            :data:`Variant`); a ``compute()`` that raises one of :data:`SKIPPED` (e.g. on
            shapes that do not fit) is skipped.
        shape_hint: ``(got_shapes, expected_shapes, index of the first wrong one) -> hint``.
        generic_hint: the hint when no known mistake matches.
        non_finite_mistakes: True: an answer with NaN or infinite values is first compared with
            the known mistakes, NaN and infinities in the same places (:func:`same`), so that a
            softmax that overflows or a ``0 * -inf`` gets the hint naming its cause; only an
            unrecognised one gets :data:`HINT_NOT_FINITE`. False: any non-finite answer gets
            :data:`HINT_NOT_FINITE` at once, and a known mistake must match finite values
            (:func:`matches`).

    Raises:
        ValueError: a plain value is malformed (the caller treats the answer as wrong).
    """
    got_parts = [decode(part) for part in got]
    expected_parts = [decode(part) for part in expected]
    if len(got_parts) != len(expected_parts):
        raise ValueError("wrong number of parts")
    got_shapes = [shape for shape, _, _ in got_parts]
    expected_shapes = [shape for shape, _, _ in expected_parts]
    for k, name in enumerate(names):
        if got_shapes[k] != expected_shapes[k]:
            detail = f"Expected {name} of shape {expected_shapes[k]}, got {got_shapes[k]}."
            return Verdict(False, shape_hint(got_shapes, expected_shapes, k), detail)
    for name, (_, got_dtype, _), (_, want, _) in zip(names, got_parts, expected_parts, strict=True):
        if got_dtype != want:
            return Verdict(False, HINT_DTYPE, f"Expected {name} of dtype torch.{want}, "
                                              f"got torch.{got_dtype}.")
    pairs = [(name, g[2], e[2]) for name, g, e in zip(names, got_parts, expected_parts,
                                                       strict=True)]

    def non_finite() -> Verdict | None:
        for name, values, _ in pairs:
            if not bool(torch.isfinite(values).all()):
                return Verdict(False, HINT_NOT_FINITE, f"{name} holds NaN or infinite values.")
        return None

    if not non_finite_mistakes and (verdict := non_finite()) is not None:
        return verdict
    wrong = [(name, g, e) for name, g, e in pairs if not matches(g, e, dtype)]
    if not wrong:
        return Verdict(True)
    detail = difference(*wrong[0], dtype)
    equal = same if non_finite_mistakes else matches
    for hint, compute, note in variants():
        try:
            parts = list(compute())
        except SKIPPED:
            continue
        if len(parts) == len(pairs) and all(
            equal(g, part, dtype) for (_, g, _), part in zip(pairs, parts, strict=True)
        ):
            return Verdict(False, hint, f"{note} {detail}" if note else detail)
    return non_finite() or Verdict(False, generic_hint, detail)


def tensor_judge(
    build_args: Callable[[dict], tuple],
    names: Sequence[str],
    variants: Callable[[tuple], list[Variant]],
    shape_hint: ShapeHint | Callable[[tuple], ShapeHint],
    generic_hint: str,
    *,
    inputs_shape_hint: bool = False,
    non_finite_mistakes: bool = True,
    verdict: Callable[..., Verdict] | None = None,
) -> Callable[[object, object, dict], Verdict]:
    """A task's judge over returned tensors: :func:`judge_parts` with the case's inputs rebuilt.

    Args:
        build_args: the task's ``build_args``: the judge rebuilds the case's inputs with it.
        names: the parts' names; one name: the function returns one tensor, not a tuple.
        variants: ``variants(inputs)``: the known mistakes (see :data:`Variant`).
        shape_hint: a :data:`ShapeHint`, or with ``inputs_shape_hint`` a function of the
            inputs that returns one.
        generic_hint: the hint when no known mistake matches.
        non_finite_mistakes: as in :func:`judge_parts`.
        verdict: another function with :func:`judge_parts`' parameters to call instead.
    """
    decide = verdict or judge_parts

    def judge(got: object, expected: object, args: dict) -> Verdict:
        inputs = build_args(args)
        hint = shape_hint(inputs) if inputs_shape_hint else shape_hint
        got_parts, expected_parts = ([got], [expected]) if len(names) == 1 else (list(got),
                                                                                   list(expected))
        return decide(got_parts, expected_parts, names, args["dtype"], lambda: variants(inputs),
                      hint, generic_hint, non_finite_mistakes=non_finite_mistakes)

    return judge
