"""Tensor helpers shared by the checks of the chapters whose tasks return torch tensors.

A case's ``args`` hold a seed, sizes and a dtype name (plain JSON); :func:`generator` and
:func:`normal` draw the inputs from a seeded ``torch.Generator``, so the grader's worker and its
trusted process build the same tensors (:func:`cell_parameters` draws a recurrent cell's, as
``torch.nn.RNN`` and ``torch.nn.LSTM`` store them). A reference that runs a package module holds
the case's tensors in one built by :func:`with_weights`. A returned tensor crosses the process
boundary as the plain value ``{"shape": [...], "dtype": "float32", "data": [...]}``
(:func:`tensor_plain`, :func:`parts_plain`) and is read back with :func:`decode`.

:func:`judge_parts` is the verdict on one or more returned tensors: shapes first (a task's
``shape_hint`` names the known shape mistakes), then dtypes, then values within the dtype's
:data:`TOLERANCE`; a wrong answer is compared with known wrong implementations, each recomputed
from the case's inputs, and gets the hint of the first one it equals. :func:`tensor_judge`
makes a task's judge of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn

from coursepkg.checks.core import CheckError, Verdict

__all__ = [
    "DTYPES",
    "HINT_DTYPE",
    "HINT_NOT_FINITE",
    "SKIPPED",
    "TOLERANCE",
    "ShapeHint",
    "Variant",
    "cell_parameters",
    "decode",
    "difference",
    "generator",
    "judge_parts",
    "matches",
    "normal",
    "parts_plain",
    "same",
    "tensor_judge",
    "tensor_plain",
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
