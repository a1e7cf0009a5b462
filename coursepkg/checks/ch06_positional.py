"""Chapter 6 tasks (``06_positional``): what the chapter's page does not show.

* 6.1 ``sinusoidal_at`` (formula): the sinusoidal encoding of arbitrary positions, a (N,)
  tensor of real numbers (fractions and negative numbers too) and any base: (N, d). The page
  shows the table of the positions 0 .. T-1 only.
* 6.2 ``rope_rotate_half`` (formula): RoPE in the "rotate half" pairing of GPT-NeoX and Llama
  (feature i turns with feature i + Dh/2), where the page pairs neighbours (2i, 2i+1); the two
  are the same rotation up to a permutation of the features (the tests check it).
* 6.3 ``alibi_bias`` (extension): the fixed score bias of ALiBi (Press et al. 2022), which the
  page only mentions: ``-m_h |p_t - s|`` for the query at position ``p_t = offset + t`` and the
  key at position s, with the paper's geometric slopes ``m_h = 2^(-8h/H)``, h = 1 .. H, and
  its rule for a number of heads that is not a power of two. Its reference lives here.
* 6.4 ``rope_batch`` (debug): the exercise shows a RoPE for a batch whose rows have their own
  positions, (B, T), with four planted bugs (the exponent i/Dh, the first row's positions for
  every row, a sine of the wrong sign that makes the turn a shear instead of a rotation, and
  pairs taken as halves but put back as neighbours); judged on behaviour, every combination of
  bugs left is named. The page's ``apply_rope`` takes (T,) positions only.
* 6.5 ``train_lookback`` (train): the training loop of a tiny causal attention model with RoPE
  (:class:`LookbackModel`) that must output, at every position t >= K, the token K positions
  back; judged on held-out sequences LONGER than the training ones (drawn from a seed the
  student's function never sees), in bands of accuracy, within :data:`LOOKBACK_TIME_LIMIT`
  seconds on one thread.
* 6.6 and 6.7 (questions, keys computed from coursepkg at check time): the wavelength of the
  slowest pair of a sinusoidal table, and how many biases of the page's relative model with
  M = 32 training on length 32 never reaches.

Notation of the book: the query at position t, the key at position s, the offset s - t
(negative for a key before its query). Frequencies ``w_i = base^(-2i/d)`` for the pairs
i = 0 .. d/2 - 1, as in :mod:`coursepkg.positional`.

Cases, plain values and judging work as in chapters 3 to 5 (:mod:`coursepkg.checks.tensors`).
The cases hold plain numbers and lists: a checks module does no tensor work when it is imported
(the grader forks its workers from a process that imported it). The hidden cases' generators
draw the seeds, the sizes and the positions from the grader's random generator.

Shape letters: N positions (6.1), T queries, S keys, d table width, B batch, H heads, Dh head
width.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from coursepkg.checks.core import (
    Args,
    Task,
    Verdict,
    draw_seed,
    hidden,
    question,
    register,
)
from coursepkg.checks.tensors import (
    HINT_DTYPE,
    HINT_NOT_FINITE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    NO_ANSWER,
    Variant,
    classifier_accuracy,
    classifier_advice,
    decode,
    fit_classifier,
    generator,
    judge_parts,
    normal,
    tensor_judge,
    tensor_plain,
    train_task,
    training_cases,
)
from coursepkg.positional import RelativePositionBias, apply_rope, rope_angles
from coursepkg.self_attention import causal_mask

__all__ = [
    "ASSIGNMENT",
    "LookbackModel",
    "alibi_bias",
    "alibi_slopes",
    "lookback_data",
    "rope_batch",
    "rope_rotate_half",
    "sinusoidal_at",
    "train_lookback",
]

ASSIGNMENT = "06_positional"

#: The base of the frequencies where a task fixes it (Vaswani et al. 2017; Su et al. 2021).
BASE = 10000.0

# The package computes the encodings (chapter 7's model and the lm module use them); the
# student writes them.
_NO_POSITIONAL_LIBRARIES = (
    "coursepkg.positional",
    "coursepkg.transformer",
    "coursepkg.lm",
    "coursepkg.checks",
)

HINT_PRECISION = (
    "Right only to float32's precision, and this case is float64: compute the angles in the "
    "dtype of the inputs (or in float64), never in float32 converted at the end."
)


def _judge_precise(got: list, expected: list, names: tuple[str, ...], dtype: str,
                   variants: Callable[[], list[Variant]], shape_hint, generic_hint: str,
                   **judge_options: bool) -> Verdict:
    """:func:`judge_parts`, and for a float64 case that fits no known mistake, a second look
    at float32's tolerance: right there means computed in float32 (named), a known mistake
    there is named."""
    verdict = judge_parts(got, expected, names, dtype, variants, shape_hint, generic_hint,
                          **judge_options)
    if verdict.ok or dtype != "float64" or verdict.hint != generic_hint:
        return verdict
    coarse = judge_parts(got, expected, names, "float32", variants, shape_hint, generic_hint,
                         **judge_options)
    if coarse.ok:
        return Verdict(False, HINT_PRECISION, verdict.detail)
    if coarse.hint != generic_hint:
        return Verdict(False, coarse.hint, verdict.detail)
    return verdict


def _two_i(i: Tensor, d: int) -> Tensor:  # the right exponent, 2i/d for pair i
    return 2 * i / d


# --------------------------------------------------------------------------------------------
# Task 6.1 sinusoidal_at (formula)
# --------------------------------------------------------------------------------------------

HINT_SIN_COS_SWAPPED = (
    "Sine and cosine are swapped: the EVEN columns hold the sines, PE[n, 2i] = sin(p_n w_i), "
    "and the odd ones the cosines. Position 0 is then (0, 1, 0, 1, ...)."
)
HINT_EXPONENT_PAIR_INDEX = (
    "The exponent is 2i/d, where i counts the PAIRS (0 .. d/2 - 1), so that 2i is the column "
    "of the pair's sine. Yours uses i/d, so the frequencies fall only half as far as they "
    "should."
)
HINT_EXPONENT_PER_COLUMN = (
    "Both columns of a pair share one frequency w_i: column 2i holds its sine and column 2i+1 "
    "its cosine. Yours gives column j a frequency of its own, so the cosine of a pair turns at "
    "another speed than its sine (and a shift is no longer a rotation of each pair)."
)
HINT_EXPONENT_DOUBLED = (
    "The exponent is doubled twice: if i already steps over the even columns (0, 2, 4, ...), "
    "it is 2i itself and the exponent is i/d, not 2i/d."
)
HINT_EXPONENT_SIGN = (
    "The frequencies must DECREASE along the pairs: w_i = base^(-2i/d), so the position is "
    "divided by base^(2i/d). Yours multiplies it, so the later pairs turn faster, not slower."
)
HINT_HALVES = (
    "Interleave the sines and cosines: column 2i holds the sine of pair i and column 2i+1 its "
    "cosine. Yours puts all the sines first and all the cosines after."
)
HINT_POSITIONS_IGNORED = (
    "Use the positions you are given: row n is the encoding of positions[n], which need not be "
    "0, 1, 2, ... (the page's table is the special case positions = 0 .. N-1)."
)
HINT_POSITIONS_ROUNDED = (
    "The positions are real numbers: keep their fractions (and their signs) as they are. "
    "Yours turns them into integers first."
)
HINT_POSITIONS_ABSOLUTE = (
    "A negative position keeps its sign: sin is odd, so PE at -p has the sines of +p negated. "
    "Yours uses the distance from 0 instead."
)
HINT_BASE_IGNORED = (
    "Use the base you are given: w_i = base^(-2i/d). Yours keeps 10000 whatever the base."
)
HINT_ONE_FUNCTION = (
    "Each pair holds one sine and one cosine of the same angle. Yours uses the same function "
    "in both columns."
)
HINT_AT_TRANSPOSED = "Return (N, d): one row per position, one column per feature."
HINT_AT_HALF = (
    "The encoding has d columns, two per frequency: a sine and a cosine for each of the d/2 "
    "frequencies."
)
HINT_AT_NOT_FLAT = (
    "Flatten the (N, d/2, 2) pairs into (N, d): the sine and the cosine of pair i go in "
    "columns 2i and 2i+1."
)
HINT_AT_SHAPE = "Return a (N, d) tensor: one row per given position."
HINT_AT_DTYPE = (
    "Return the encoding in the dtype of the positions (float32 or float64): compute in it, or "
    "convert once at the end from float64."
)
HINT_AT_GENERIC = (
    "Row n, pair i must hold sin(p_n w_i) in column 2i and cos(p_n w_i) in column 2i+1, with "
    "p_n the n-th position given and w_i = base^(-2i/d) for the pairs i = 0 .. d/2 - 1."
)

#: exponents of the sine and the cosine of pair i: name -> (sine's, cosine's)
_EXPONENTS: dict[str, tuple[Callable[[Tensor, int], Tensor], Callable[[Tensor, int], Tensor]]] = {
    "right": (_two_i, _two_i),
    "pair index": (lambda i, d: i / d, lambda i, d: i / d),
    "per column": (_two_i, lambda i, d: (2 * i + 1) / d),
    "doubled": (lambda i, d: 4 * i / d, lambda i, d: 4 * i / d),
    "positive": (lambda i, d: -2 * i / d, lambda i, d: -2 * i / d),
}


def _encode(p: Tensor, d: int, base: float, *, exponent: str = "right",
            functions: tuple[Callable, Callable] = (torch.sin, torch.cos),
            halves: bool = False) -> Tensor:
    """The encoding of the float64 positions ``p`` (N,) with one knob turned to a known
    mistake (default: right): (N, d) in float64."""
    p = p.to(torch.float64)[:, None]  # (N, 1)
    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    sin_exponent, cos_exponent = _EXPONENTS[exponent]
    first = functions[0](p * base ** -sin_exponent(i, d))  # (N, d/2)
    second = functions[1](p * base ** -cos_exponent(i, d))  # (N, d/2)
    if halves:
        return torch.cat([first, second], dim=-1)  # (N, d): sines, then cosines
    return torch.stack([first, second], dim=-1).reshape(len(p), d)  # (N, d): interleaved


def sinusoidal_at(positions: Tensor, d: int, base: float = BASE) -> Tensor:
    """Task 6.1's reference: the sinusoidal encoding of any real positions.

    Args:
        positions: (N,) floating-point positions (fractions and negative numbers allowed).
        d: the width (even).
        base: the wavelength scale (10000 in the paper).

    Returns:
        (N, d) in the dtype of ``positions``: ``sin(p_n w_i)`` in column 2i and
        ``cos(p_n w_i)`` in column 2i+1, ``w_i = base^(-2i/d)``.
    """
    return _encode(positions, d, base).to(positions.dtype)


def _at_variants(p: Tensor, d: int, base: float) -> list[Variant]:
    def variant(hint: str, positions: Tensor = p, b: float = base, **knobs) -> Variant:
        return hint, lambda: [_encode(positions, d, b, **knobs)], ""

    N = len(p)
    return [
        variant(HINT_SIN_COS_SWAPPED, functions=(torch.cos, torch.sin)),
        variant(HINT_EXPONENT_PAIR_INDEX, exponent="pair index"),
        variant(HINT_EXPONENT_PER_COLUMN, exponent="per column"),
        variant(HINT_EXPONENT_DOUBLED, exponent="doubled"),
        variant(HINT_EXPONENT_SIGN, exponent="positive"),
        variant(HINT_HALVES, halves=True),
        variant(HINT_ONE_FUNCTION, functions=(torch.sin, torch.sin)),
        variant(HINT_ONE_FUNCTION, functions=(torch.cos, torch.cos)),
        variant(HINT_POSITIONS_IGNORED, positions=torch.arange(N, dtype=torch.float64)),
        variant(HINT_POSITIONS_ROUNDED, positions=p.trunc()),
        variant(HINT_POSITIONS_ROUNDED, positions=p.round()),
        variant(HINT_POSITIONS_ROUNDED, positions=p.floor()),
        variant(HINT_POSITIONS_ABSOLUTE, positions=p.abs()),
        variant(HINT_BASE_IGNORED, b=BASE),
        # the page's table pasted: positions 0 .. N-1 and the base of the paper
        variant(HINT_POSITIONS_IGNORED, positions=torch.arange(N, dtype=torch.float64), b=BASE),
    ]


def _build_at_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    spread = float(args["spread"])
    positions = torch.rand(int(args["N"]), generator=gen, dtype=torch.float64)  # [0, 1)
    positions = (positions * 2 - 1) * spread if args["negative"] else positions * spread
    if not args["fractions"]:
        positions = positions.round()
    return positions.to(dtype), int(args["d"]), float(args["base"])


def _at_shape_hint(got: list, expected: list, k: int) -> str:
    N, d = expected[0]
    shape = got[0]
    if shape == (d, N) and N != d:
        return HINT_AT_TRANSPOSED
    if shape == (N, d // 2):
        return HINT_AT_HALF
    if shape == (N, d // 2, 2):
        return HINT_AT_NOT_FLAT
    return HINT_AT_SHAPE


def _judge_at(got: object, expected: object, args: dict) -> Verdict:
    positions, d, base = _build_at_args(args)
    verdict = _judge_precise([got], [expected], ("the encoding",), args["dtype"],
                             lambda: _at_variants(positions.to(torch.float64), d, base),
                             _at_shape_hint, HINT_AT_GENERIC)
    if verdict.hint == HINT_AT_GENERIC and _growing_frequencies(got, positions, d, base):
        return Verdict(False, HINT_EXPONENT_SIGN, verdict.detail)
    if verdict.hint == HINT_DTYPE:
        return Verdict(False, HINT_AT_DTYPE, verdict.detail)
    return verdict


def _growing_frequencies(got: object, positions: Tensor, d: int, base: float) -> bool:
    """Whether ``got`` is the encoding with w_i = base^(+2i/d): its angles are huge, and their
    rounding in float32 carries into the sines, so the tolerance grows with the largest one."""
    shape, _, values = decode(got)
    if shape != (len(positions), d):
        return False
    largest = float(positions.abs().max()) * base ** (2 * (d // 2 - 1) / d)
    eps = torch.finfo(positions.dtype).eps
    mistake = _encode(positions, d, base, exponent="positive")
    return torch.allclose(values, mistake, rtol=0, atol=1e-5 + 8 * eps * largest)


@dataclass(frozen=True)
class Positions(Args):
    """A case of task 6.1: N positions drawn from the seed in [0, spread) or, with
    ``negative``, in (-spread, spread); rounded unless ``fractions``; width d, a base."""

    seed: int
    N: int
    d: int
    spread: float
    negative: bool = True
    fractions: bool = True
    base: float = BASE
    dtype: str = "float32"


_AT_CASES = (
    Positions(611, N=5, d=8, spread=12.0).case(
        "5 positions between -12 and 12 with fractions, d = 8, base 10000"),
    Positions(612, N=6, d=6, spread=40.0, negative=False, base=1000.0).case(
        "6 positions between 0 and 40 with fractions, d = 6, base 1000"),
    Positions(613, N=4, d=10, spread=20.0, fractions=False).case(
        "4 whole positions between -20 and 20, d = 10, base 10000"),
)


def _at_case(rng: random.Random, *, N: tuple[int, int] = (3, 8), widths: tuple = (6, 8, 12),
             spread: tuple[float, float] = (5.0, 60.0), negative: bool = True,
             fractions: bool = True, base: float | None = None,
             dtype: str = "float32") -> Positions:
    """A case of task 6.1 drawn from ``rng`` (a base among 10, 1000, 10000 when None)."""
    return Positions(draw_seed(rng), rng.randint(*N), rng.choice(widths),
                     round(rng.uniform(*spread), 3), negative, fractions,
                     rng.choice([10.0, 1000.0, BASE]) if base is None else base, dtype)


_AT_HIDDEN = (
    hidden("hidden: float64, far positions",
           lambda rng: _at_case(rng, spread=(200.0, 500.0), widths=(16, 24), dtype="float64")),
    hidden("hidden: one frequency (d = 2), one position",
           lambda rng: _at_case(rng, N=(1, 1), widths=(2,))),
    hidden("hidden: another base, more positions",
           lambda rng: _at_case(rng, N=(12, 20), widths=(8, 10), base=rng.choice([50.0, 500.0]))),
)

register(
    Task(
        id="6.1",
        assignment=ASSIGNMENT,
        func_name="sinusoidal_at",
        title="The sinusoidal encoding of any real positions, with any base",
        cases=_AT_CASES,
        hidden=_AT_HIDDEN,
        build_args=_build_at_args,
        reference=sinusoidal_at,
        to_plain=lambda value: tensor_plain(value, "the encoding"),
        judge=_judge_at,
        forbidden=_NO_POSITIONAL_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "the positions are (N,) and the frequencies (d/2,); the angles of every position "
            "and pair form a (N, d/2) table.",
            "TypeError": "The function is called as sinusoidal_at(positions, d, base): "
            "positions a tensor, d an int, base a float. Sizes must be ints (d // 2).",
            "CheckError": "Return one tensor, (N, d).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 6.2 rope_rotate_half (formula)
# --------------------------------------------------------------------------------------------

HINT_HALF_INTERLEAVED = (
    "That is the page's pairing, neighbours (2i, 2i+1). This task asks for the other one: "
    "feature i turns together with feature i + Dh/2, the first half of x against the second."
)
HINT_HALF_MIXED = (
    "Your function mixes the two pairings: the angles are laid out for one and the rotation "
    "for the other. Here feature i and feature i + Dh/2 form pair i and both use the angle "
    "m theta_i: the first half of the features holds the angles of the pairs 0 .. Dh/2 - 1, "
    "and so does the second half."
)
HINT_HALF_SIGN = (
    "The rotation turns the wrong way: rotating (a, b) by the angle alpha gives "
    "(a cos - b sin, a sin + b cos). Yours turns by -alpha."
)
HINT_HALF_HALVES_SWAPPED = (
    "The two halves of the result are swapped: the first half holds the rotated first members "
    "(a cos - b sin), the second half the rotated second members (a sin + b cos)."
)
HINT_HALF_POSITIONS_IGNORED = (
    "Use the positions you are given: row t is at position positions[t], not t."
)
HINT_HALF_EXPONENT = (
    "theta_i = 10000^(-2i/Dh) with i the pair's index, 0 .. Dh/2 - 1: the exponent is 2i/Dh. "
    "Yours uses i/Dh, or counts the features of the whole width."
)
HINT_HALF_SIN_COS_SWAPPED = (
    "cos and sin are swapped: at position 0 (angle 0) the rotation must give x back."
)
HINT_HALF_SHAPE = "Return a tensor of the shape of x, (..., T, Dh)."
HINT_HALF_GENERIC = (
    "With a = x[..., i] and b = x[..., i + Dh/2] for i < Dh/2, row t must hold "
    "a cos - b sin in feature i and a sin + b cos in feature i + Dh/2, the angle being "
    "positions[t] theta_i with theta_i = 10000^(-2i/Dh)."
)


def _half_angles(T: int, Dh: int, positions: Tensor, *, exponent: Callable = _two_i) -> Tensor:
    """(T, Dh/2) angles m theta_i in float64."""
    i = torch.arange(Dh // 2, dtype=torch.float64)
    return positions.to(torch.float64)[:, None] * BASE ** -exponent(i, Dh)


def _rotate_half(x: Tensor, positions: Tensor, *, sign: int = 1, exponent: Callable = _two_i,
                 layout: str = "halves", swap_halves: bool = False,
                 swap_functions: bool = False) -> Tensor:
    """RoPE in the rotate-half pairing with one knob turned to a known mistake."""
    T, Dh = x.shape[-2], x.shape[-1]
    angles = _half_angles(T, Dh, positions, exponent=exponent)  # (T, Dh/2)
    cos, sin = angles.cos().to(x.dtype), (sign * angles.sin()).to(x.dtype)
    if swap_functions:
        cos, sin = sin, cos
    if layout == "neighbours":  # the page's pairing
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)
    if layout == "angles interleaved":  # rotate_half with the angles repeat_interleaved
        turned = torch.cat([-x[..., Dh // 2:], x[..., : Dh // 2]], dim=-1)
        return x * cos.repeat_interleave(2, -1) + turned * sin.repeat_interleave(2, -1)
    first, second = x[..., : Dh // 2], x[..., Dh // 2:]
    new = [first * cos - second * sin, first * sin + second * cos]
    return torch.cat(new[::-1] if swap_halves else new, dim=-1)


def rope_rotate_half(x: Tensor, positions: Tensor) -> Tensor:
    """Task 6.2's reference: RoPE with feature i paired with feature i + Dh/2.

    Args:
        x: (..., T, Dh) queries or keys, Dh even.
        positions: (T,) the position of each row.

    Returns:
        (..., T, Dh): ``x_i cos - x_{i+Dh/2} sin`` in feature i and
        ``x_i sin + x_{i+Dh/2} cos`` in feature i + Dh/2, the angle ``positions[t] theta_i``.
    """
    return _rotate_half(x, positions)


def _half_variants(x: Tensor, positions: Tensor) -> list[Variant]:
    def variant(hint: str, where: Tensor = positions, **knobs) -> Variant:
        return hint, lambda: [_rotate_half(x, where, **knobs)], ""

    ordered = torch.arange(x.shape[-2])
    return [
        variant(HINT_HALF_INTERLEAVED, layout="neighbours"),
        variant(HINT_HALF_INTERLEAVED, layout="neighbours", sign=-1),
        variant(HINT_HALF_MIXED, layout="angles interleaved"),
        variant(HINT_HALF_SIGN, sign=-1),
        variant(HINT_HALF_HALVES_SWAPPED, swap_halves=True),
        variant(HINT_HALF_POSITIONS_IGNORED, where=ordered),
        variant(HINT_HALF_POSITIONS_IGNORED, where=ordered + 1),
        variant(HINT_HALF_EXPONENT, exponent=lambda i, d: i / d),
        variant(HINT_HALF_EXPONENT, exponent=lambda i, d: 4 * i / d),
        variant(HINT_HALF_SIN_COS_SWAPPED, swap_functions=True),
    ]


def _build_half_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    x = normal(gen, tuple(int(n) for n in args["shape"]), 1.0, dtype)
    return x, torch.tensor(args["positions"], dtype=torch.long)


_judge_half = tensor_judge(_build_half_args, ("out",), lambda inputs: _half_variants(*inputs),
                           lambda got, expected, k: HINT_HALF_SHAPE, HINT_HALF_GENERIC,
                           verdict=_judge_precise)


@dataclass(frozen=True)
class HalfRope(Args):
    """A case of task 6.2: x of ``shape`` (..., T, Dh) at ``positions`` (T of them)."""

    seed: int
    shape: tuple[int, ...]
    positions: list
    dtype: str = "float32"


_HALF_CASES = (
    HalfRope(621, (4, 6), [0, 1, 2, 3]).case("4 rows at positions 0 .. 3, Dh = 6, x (T, Dh)"),
    HalfRope(622, (2, 5, 8), [7, 8, 9, 10, 11]).case(
        "2 sequences of 5 rows at positions 7 .. 11, Dh = 8"),
    HalfRope(623, (2, 3, 4, 4), [5, 0, 9, 2]).case(
        "(B, H, T, Dh) = (2, 3, 4, 4), positions in any order"),
)


def _half_case(rng: random.Random, lead: int, T: tuple[int, int], widths: list[int], *,
               dtype: str = "float32") -> HalfRope:
    shape = (*(rng.randint(1, 3) for _ in range(lead)), rng.randint(*T), rng.choice(widths))
    return HalfRope(draw_seed(rng), shape, rng.sample(range(4 * shape[-2] + 8), shape[-2]),
                    dtype)


_HALF_HIDDEN = (
    hidden("hidden: float64", lambda rng: _half_case(rng, 2, (16, 24), [12, 16],
                                                     dtype="float64")),
    hidden("hidden: one pair (Dh = 2), one position",
           lambda rng: _half_case(rng, 1, (1, 1), [2])),
)

register(
    Task(
        id="6.2",
        assignment=ASSIGNMENT,
        func_name="rope_rotate_half",
        title="RoPE in the rotate-half pairing: feature i turns with feature i + Dh/2",
        cases=_HALF_CASES,
        hidden=_HALF_HIDDEN,
        build_args=_build_half_args,
        reference=rope_rotate_half,
        to_plain=lambda value: tensor_plain(value, "the rotated x"),
        judge=_judge_half,
        forbidden=_NO_POSITIONAL_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "each half of x is (..., T, Dh/2), and so are the angles of the T positions, "
            "(T, Dh/2), which broadcast against it whatever the leading dims.",
            "TypeError": "The function is called as rope_rotate_half(x, positions), positions "
            "a (T,) integer tensor. Sizes must be ints (Dh // 2, not Dh / 2).",
            "CheckError": "Return one tensor of the shape of x, (..., T, Dh).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 6.3 alibi_bias (extension)
# --------------------------------------------------------------------------------------------

HINT_ALIBI_REVERSED = (
    "The slopes are in the wrong order: head 1 has the STEEPEST slope, 2^(-8/H), and head H "
    "the gentlest, 2^(-8)."
)
HINT_ALIBI_FROM_0 = (
    "The heads count from h = 1: the first slope is 2^(-8/H), not 2^0 = 1, and the last one "
    "is 2^(-8)."
)
HINT_ALIBI_SIGN = (
    "The bias is a PENALTY: it lowers the score of far keys, -m_h |p_t - s|, so it is 0 on "
    "the diagonal and negative elsewhere. Yours has the opposite sign."
)
HINT_ALIBI_NO_ABS = (
    "The penalty grows with the DISTANCE |p_t - s| on both sides: a key after its query is "
    "penalised as much as one before it at the same distance. Yours uses the signed offset, "
    "so keys after the query get a bonus."
)
HINT_ALIBI_OFFSET = (
    "The queries are at positions offset .. offset+T-1, the keys at 0 .. S-1: row t of the "
    "result is the query at position offset + t (with a cache, the new queries come after the "
    "keys already there). Yours puts the queries at 0 .. T-1."
)
HINT_ALIBI_LINEAR = (
    "The slopes form a GEOMETRIC sequence, m_h = 2^(-8h/H): each head's slope is the previous "
    "one times 2^(-8/H). Yours falls in equal steps."
)
HINT_ALIBI_POWER_OF_TWO = (
    "For a number of heads that is not a power of two, the paper takes the slopes of the "
    "nearest lower power of two, n, and adds the first H - n slopes of 2n heads taken every "
    "other one (the 1st, 3rd, 5th...). Yours uses 2^(-8h/H) for every H."
)
HINT_ALIBI_KEYS = (
    "There is one column per KEY, S of them; when S is not given, the keys are every position "
    "up to the last query, offset + T of them."
)
HINT_ALIBI_TRANSPOSED = (
    "Rows are queries and columns keys: result[h, t, s] is the bias of query t and key s, "
    "(H, T, S)."
)
HINT_ALIBI_NO_HEADS = "Keep one (T, S) map per head: (H, T, S)."
HINT_ALIBI_SHAPE = "Return (H, T, S): one bias per head, query and key."
HINT_ALIBI_DTYPE = "Return the bias as float32, the default dtype of torch's floats."
HINT_ALIBI_GENERIC = (
    "result[h, t, s] must be -m_h |offset + t - s|, with the slopes m_1 .. m_H of the paper "
    "(2^(-8h/H) when H is a power of two): check the slopes first, then the distances."
)


def _power_of_two_slopes(n: int) -> list[float]:
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def alibi_slopes(n_heads: int) -> list[float]:
    """ALiBi's slopes, head 1 first: 2^(-8h/H) when H is a power of two; otherwise those of
    the largest power of two n below H, then every other slope of 2n heads (the odd ones,
    which fall between them), H - n of them (Press et al. 2022, their code)."""
    n = 2 ** int(math.floor(math.log2(n_heads)))
    if n == n_heads:
        return _power_of_two_slopes(n)
    return _power_of_two_slopes(n) + _power_of_two_slopes(2 * n)[0::2][: n_heads - n]


def _alibi(slopes: list[float], T: int, S: int, offset: int, *, signed: bool = False,
           sign: float = -1.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """-m_h |p_t - s| (or the signed p_t - s) for every head: (H, T, S)."""
    queries = torch.arange(offset, offset + T, dtype=torch.float64)[:, None]  # (T, 1): p_t
    keys = torch.arange(S, dtype=torch.float64)[None, :]  # (1, S): s
    distance = queries - keys if signed else (queries - keys).abs()  # (T, S)
    m = torch.tensor(slopes, dtype=torch.float64)[:, None, None]  # (H, 1, 1)
    return (sign * m * distance).to(dtype)  # (H, T, S)


def alibi_bias(n_heads: int, T: int, S: int | None = None, offset: int = 0) -> Tensor:
    """Task 6.3's reference: ALiBi's score bias.

    Args:
        n_heads: H.
        T: the number of queries, at positions offset .. offset+T-1.
        S: the number of keys, at positions 0 .. S-1 (default: offset + T).
        offset: the position of the first query.

    Returns:
        (H, T, S) float32: ``-m_h |offset + t - s|``, slopes :func:`alibi_slopes`.
    """
    S = offset + T if S is None else S
    return _alibi(alibi_slopes(n_heads), T, S, offset)


def _alibi_variants(H: int, T: int, S: int | None, offset: int) -> list[Variant]:
    keys = offset + T if S is None else S
    right = alibi_slopes(H)

    def variant(hint: str, slopes: list[float] = right, **knobs) -> Variant:
        return hint, lambda: [_alibi(slopes, T, keys, offset, **knobs)], ""

    plain = _power_of_two_slopes(H)
    return [
        variant(HINT_ALIBI_REVERSED, right[::-1]),
        variant(HINT_ALIBI_FROM_0, [2.0 ** (-8.0 * h / H) for h in range(H)]),
        variant(HINT_ALIBI_SIGN, sign=1.0),
        variant(HINT_ALIBI_NO_ABS, signed=True),
        variant(HINT_ALIBI_NO_ABS, signed=True, sign=1.0),
        (HINT_ALIBI_OFFSET, lambda: [_alibi(right, T, keys, 0)], ""),
        variant(HINT_ALIBI_LINEAR, [(H + 1 - h) / H for h in range(1, H + 1)]),
        variant(HINT_ALIBI_LINEAR, [h / H for h in range(1, H + 1)]),
        variant(HINT_ALIBI_POWER_OF_TWO, plain),
        variant(HINT_ALIBI_POWER_OF_TWO, plain[::-1]),
    ]


def _build_alibi_args(args: dict) -> tuple:
    S = args["S"]
    return int(args["H"]), int(args["T"]), None if S is None else int(S), int(args["offset"])


def _alibi_shape_hint_for(inputs: tuple) -> Callable[[list, list, int], str]:
    H, T, S, offset = inputs

    def hint(got: list, expected: list, k: int) -> str:
        shape, (_, _, keys) = got[0], expected[0]
        if shape == (H, keys, T) and keys != T:
            return HINT_ALIBI_TRANSPOSED
        if len(shape) == 3 and shape[:2] == (H, T):
            return HINT_ALIBI_KEYS
        if shape == (T, keys):
            return HINT_ALIBI_NO_HEADS
        return HINT_ALIBI_SHAPE

    return hint


def _judge_alibi_parts(got: list, expected: list, names, dtype, variants, shape_hint,
                       generic_hint, **options) -> Verdict:
    verdict = judge_parts(got, expected, names, dtype, variants, shape_hint, generic_hint,
                          **options)
    if verdict.hint == HINT_DTYPE:
        return Verdict(False, HINT_ALIBI_DTYPE, verdict.detail)
    return verdict


_judge_alibi = tensor_judge(_build_alibi_args, ("the bias",),
                            lambda inputs: _alibi_variants(*inputs), _alibi_shape_hint_for,
                            HINT_ALIBI_GENERIC, inputs_shape_hint=True,
                            verdict=_judge_alibi_parts)


@dataclass(frozen=True)
class Alibi(Args):
    """A case of task 6.3: H heads, T queries from position ``offset``, S keys (None: all
    positions up to the last query)."""

    H: int
    T: int
    S: int | None = None
    offset: int = 0
    dtype: str = "float32"


_ALIBI_CASES = (
    Alibi(8, 5).case("8 heads, 5 queries and their 5 keys"),
    Alibi(4, 3, offset=4).case("4 heads, 3 new queries at positions 4 .. 6 against 7 keys"),
    Alibi(2, 4, S=6).case("2 heads, 4 queries against 6 keys (2 after the last query)"),
    Alibi(6, 4).case("6 heads (not a power of two), 4 queries and their keys"),
)


def _alibi_case(rng: random.Random, *, H: tuple = (2, 4, 8, 16), T: tuple[int, int] = (3, 9),
                S: bool = False, offset: tuple[int, int] = (0, 0)) -> Alibi:
    queries, start = rng.randint(*T), rng.randint(*offset)
    keys = start + queries + rng.randint(1, 4) if S else None
    return Alibi(rng.choice(H), queries, keys, start)


_ALIBI_HIDDEN = (
    hidden("hidden: a power of two", lambda rng: _alibi_case(rng, H=(4, 8, 16))),
    hidden("hidden: not a power of two", lambda rng: _alibi_case(rng, H=(3, 5, 12, 20))),
    hidden("hidden: one query after a cache (T = 1)",
           lambda rng: _alibi_case(rng, H=(8, 12), T=(1, 1), offset=(5, 30))),
    hidden("hidden: one head", lambda rng: _alibi_case(rng, H=(1,), T=(3, 6), offset=(0, 3))),
    hidden("hidden: more keys than positions up to the last query",
           lambda rng: _alibi_case(rng, H=(4, 6), S=True, offset=(1, 6))),
)

register(
    Task(
        id="6.3",
        assignment=ASSIGNMENT,
        func_name="alibi_bias",
        title="ALiBi's linear penalty -m_h |p_t - s| with the paper's geometric slopes",
        cases=_ALIBI_CASES,
        hidden=_ALIBI_HIDDEN,
        build_args=_build_alibi_args,
        reference=alibi_bias,
        to_plain=lambda value: tensor_plain(value, "the bias"),
        judge=_judge_alibi,
        forbidden=_NO_POSITIONAL_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "the slopes are (H,), the distances (T, S); give the slopes two dims of size 1 to "
            "broadcast them to (H, T, S).",
            "TypeError": "The function is called as alibi_bias(n_heads, T, S, offset), S "
            "possibly None (then S = offset + T). Sizes must be ints.",
            "ValueError": "A math domain error? log2 of the number of heads needs H >= 1, and "
            "the largest power of two at most H is 2 ** floor(log2(H)).",
            "CheckError": "Return one tensor, (H, T, S).",
        },
        kind="extension",
    )
)


# --------------------------------------------------------------------------------------------
# Task 6.4 rope_batch (debug)
# --------------------------------------------------------------------------------------------

HINT_DEBUG_EXPONENT = (
    "The frequencies are wrong: theta_i = base^(-2i/Dh) for the pair i = 0 .. Dh/2 - 1, so "
    "the exponent runs over the EVEN numbers 0, 2, 4, ... divided by Dh. The starter code's "
    "exponent stops halfway, and its slowest pair turns far too fast."
)
HINT_DEBUG_ROWS = (
    "Every sequence of the batch is rotated at the positions of the FIRST sequence: row b "
    "must use its own positions positions[b], which reach the (B, H, T, Dh/2) pairs once they "
    "have a dim of size 1 for the heads."
)
HINT_DEBUG_SIGN = (
    "The turn is not a rotation: a vector's length changes. Rotating (a, b) by alpha gives "
    "(a cos - b sin, a sin + b cos); check the sign of each sine term."
)
HINT_DEBUG_PAIRS = (
    "The pairs are taken as halves, (i, i + Dh/2), but put back as neighbours, (2i, 2i+1): "
    "the page's pairing reads and writes NEIGHBOURS, the even features with the odd ones."
)
PREFIX_DEBUG_SEVERAL = "Several bugs are still there:"
HINT_DEBUG_BACKWARDS = (
    "The rotation now turns the wrong way: both sine terms have the wrong sign."
)
HINT_DEBUG_SHAPE = "Return a tensor of the shape of x, (B, H, T, Dh)."
HINT_DEBUG_GENERIC = (
    "Test what must hold: each row keeps its length; a query and a key rotated at positions "
    "m and n have the score of the same two vectors at m + 5 and n + 5; the row at position "
    "0 is not turned; each sequence of the batch uses its own positions; the pair i turns by "
    "m base^(-2i/Dh)."
)

_BUG_HINTS = {
    "exponent": HINT_DEBUG_EXPONENT,
    "rows": HINT_DEBUG_ROWS,
    "sign": HINT_DEBUG_SIGN,
    "pairs": HINT_DEBUG_PAIRS,
}


def with_bugs(x: Tensor, positions: Tensor, bugs: frozenset = frozenset(), *,
              backwards: bool = False, base: float = BASE) -> Tensor:
    """RoPE for a batch with some of the starter code's bugs (``bugs``, names of
    :data:`_BUG_HINTS`), or turning the wrong way (``backwards``), in float64 angles; with
    neither, the right one."""
    Dh = x.shape[-1]
    step = 1 if "exponent" in bugs else 2
    theta = base ** (-torch.arange(0, step * (Dh // 2), step, dtype=torch.float64) / Dh)
    if "rows" in bugs:
        angles = positions[0].to(torch.float64)[:, None] * theta  # (T, Dh/2)
    else:
        angles = positions.to(torch.float64)[:, None, :, None] * theta  # (B, 1, T, Dh/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if "pairs" in bugs:
        even, odd = x[..., : Dh // 2], x[..., Dh // 2:]
    else:
        even, odd = x[..., 0::2], x[..., 1::2]
    first = even * cos + odd * sin if "sign" in bugs or backwards else even * cos - odd * sin
    second = -even * sin + odd * cos if backwards else even * sin + odd * cos
    return torch.stack([first, second], dim=-1).flatten(-2)


def rope_batch(x: Tensor, positions: Tensor, base: float = BASE) -> Tensor:
    """Task 6.4's reference (the starter code fixed): RoPE with positions per sequence.

    Args:
        x: (B, H, T, Dh) queries or keys, Dh even.
        positions: (B, T) integer positions, one row per sequence.
        base: 10000 in Su et al. (2021).

    Returns:
        (B, H, T, Dh): pair (2i, 2i+1) of row t of sequence b turned by
        ``positions[b, t] base^(-2i/Dh)``.
    """
    return with_bugs(x, positions, base=base)


def debug_hint(bugs: frozenset) -> str:
    """The feedback to the starter code with ``bugs`` left (one hint, or each of them)."""
    hints = [_BUG_HINTS[name] for name in _BUG_HINTS if name in bugs]
    return hints[0] if len(hints) == 1 else " ".join([PREFIX_DEBUG_SEVERAL, *hints])


#: Every combination of the starter code's bugs, one bug first.
BUG_SETS = tuple(frozenset(combo) for n in range(1, len(_BUG_HINTS) + 1)
                 for combo in itertools.combinations(_BUG_HINTS, n))


def _debug_variants(x: Tensor, positions: Tensor) -> list[Variant]:
    variants: list[Variant] = [
        (debug_hint(bugs), lambda bugs=bugs: [with_bugs(x, positions, bugs)], "")
        for bugs in BUG_SETS
    ]
    variants.append((HINT_DEBUG_BACKWARDS, lambda: [with_bugs(x, positions, backwards=True)],
                     ""))
    return variants


def _build_debug_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, H, T, Dh = (int(args[name]) for name in ("B", "H", "T", "Dh"))
    x = normal(gen, (B, H, T, Dh), 1.0, dtype)
    return x, torch.tensor(args["positions"], dtype=torch.long)


def _judge_debug(got: object, expected: object, args: dict) -> Verdict:
    x, positions = _build_debug_args(args)
    verdict = _judge_precise([got], [expected], ("the rotated x",), args["dtype"],
                             lambda: _debug_variants(x, positions),
                             lambda g, e, k: HINT_DEBUG_SHAPE, HINT_DEBUG_GENERIC)
    if verdict.hint != HINT_DEBUG_GENERIC:
        return verdict
    _, _, values = decode(got)  # the right shape: judge_parts compared it
    lengths = x.to(torch.float64).norm(dim=-1)
    if torch.isfinite(values).all() and not torch.allclose(values.norm(dim=-1), lengths,
                                                             rtol=1e-4, atol=1e-5):
        return Verdict(False, HINT_DEBUG_SIGN, verdict.detail)
    return verdict


@dataclass(frozen=True)
class Batch(Args):
    """A case of task 6.4: x (B, H, T, Dh) drawn from the seed, positions (B, T) as lists."""

    seed: int
    B: int
    H: int
    T: int
    Dh: int
    positions: list
    dtype: str = "float32"


def _shifted(starts: list[int], T: int) -> list[list[int]]:
    """Each row's positions start .. start+T-1 (a left-padded batch, or a cache per row)."""
    return [[start + t for t in range(T)] for start in starts]


_DEBUG_CASES = (
    Batch(641, B=2, H=2, T=4, Dh=8, positions=_shifted([0, 3], 4)).case(
        "2 sequences of 4 rows from positions 0 and 3; 2 heads, Dh = 8"),
    Batch(642, B=3, H=1, T=3, Dh=4, positions=_shifted([5, 0, 9], 3)).case(
        "3 sequences of 3 rows from positions 5, 0 and 9; 1 head, Dh = 4"),
    Batch(643, B=2, H=3, T=5, Dh=6, positions=[[0, 1, 2, 3, 4], [2, 3, 4, 5, 6]]).case(
        "2 sequences of 5 rows, the second shifted by 2; 3 heads, Dh = 6"),
)


def _debug_case(rng: random.Random, *, B: tuple[int, int] = (2, 4), T: tuple[int, int] = (3, 7),
                widths: tuple = (4, 6, 8), dtype: str = "float32") -> Batch:
    batch, length = rng.randint(*B), rng.randint(*T)
    starts = [rng.randint(0, 12) for _ in range(batch)]
    starts[rng.randrange(batch)] = 0
    if len(set(starts)) == 1:
        starts[0] += 1 + rng.randint(0, 4)
    return Batch(draw_seed(rng), batch, rng.randint(1, 3), length, rng.choice(widths),
                 _shifted(starts, length), dtype)


_DEBUG_HIDDEN = (
    hidden("hidden: float64", lambda rng: _debug_case(rng, dtype="float64")),
    hidden("hidden: rows at other positions", _debug_case),
    hidden("hidden: larger sizes", lambda rng: _debug_case(rng, B=(3, 5), T=(10, 16),
                                                            widths=(16, 24))),
)

register(
    Task(
        id="6.4",
        assignment=ASSIGNMENT,
        func_name="rope_batch",
        title="Fix a RoPE whose sequences each have their own positions",
        cases=_DEBUG_CASES,
        hidden=_DEBUG_HIDDEN,
        build_args=_build_debug_args,
        reference=rope_batch,
        to_plain=lambda value: tensor_plain(value, "the rotated x"),
        judge=_judge_debug,
        forbidden=_NO_POSITIONAL_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x is (B, H, T, Dh) and its pairs (B, H, T, Dh/2); the angles of the (B, T) "
            "positions are (B, T, Dh/2), and need a dim of size 1 for the heads to broadcast.",
            "CheckError": "Return one tensor of the shape of x, (B, H, T, Dh).",
        },
        kind="debug",
    )
)


# --------------------------------------------------------------------------------------------
# Task 6.5 train_lookback (train)
# --------------------------------------------------------------------------------------------

#: The task's symbols, how far back the answer is, the training length and the held-out one.
LOOKBACK_SYMBOLS = 10
LOOKBACK_K = 3
LOOKBACK_LENGTH = 16
LOOKBACK_TEST_LENGTH = 20
LOOKBACK_TRAIN = 2000
LOOKBACK_HELD_OUT = 1000
#: LookbackModel's widths: D of the embeddings and values, Dh of the rotated queries and keys.
LOOKBACK_D = 32
LOOKBACK_D_HEAD = 16
#: Full marks from 0.95 held-out accuracy, half from 0.6, a quarter from 0.25 (chance: 0.1;
#: a model early in its training sits near 0.3 before it finds the key K positions back).
LOOKBACK_BANDS = ((0.95, 1.0), (0.6, 0.5), (0.25, 0.25))
#: Seconds one training may take (measured on one thread); the reference needs under one.
LOOKBACK_TIME_LIMIT = 10.0

HINT_LOOKBACK_TRAIN = (
    "The model is confident but wrong on held-out sequences: it learnt another task. The "
    "answer at position t is the token at t - K: compare the logits at the positions K .. T-1 "
    "with the tokens at 0 .. T-1-K, and clear the gradients before every backward pass."
)
HINT_LOOKBACK_PARTIAL = (
    "Partial credit: the model has learnt part of the task. Train for more steps (or with a "
    "larger learning rate) on the sequences given, and watch the training loss fall."
)
HINT_LOOKBACK_UNTRAINED = (
    "The model's predictions are close to uniform: it links no position to its answer. Is it "
    "trained at all (a backward pass and an optimizer step on the parameters of the model you "
    "return), on the logits of the positions that have an answer?"
)


class LookbackModel(nn.Module):
    """The course model of task 6.5: one causal attention head with RoPE reads a sequence of
    tokens and predicts, at every position, the token :data:`LOOKBACK_K` positions back.

    Each token's vector is a learned embedding (no position is added to it); the queries and
    keys (with biases, so that a part of them does not depend on the token) are rotated by the
    package's ``apply_rope`` at the positions 0 .. T-1, the values are not; a linear layer reads
    each position's output. Nothing in it depends on the sequence's length: it runs on any T.
    """

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(LOOKBACK_SYMBOLS, LOOKBACK_D)
        self.w_q = nn.Linear(LOOKBACK_D, LOOKBACK_D_HEAD)
        self.w_k = nn.Linear(LOOKBACK_D, LOOKBACK_D_HEAD)
        self.w_v = nn.Linear(LOOKBACK_D, LOOKBACK_D, bias=False)
        self.out = nn.Linear(LOOKBACK_D, LOOKBACK_SYMBOLS)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (B, T) int64 -> logits (B, T, symbols)."""
        T = tokens.shape[1]
        x = self.embed(tokens)  # (B, T, D)
        q, k = apply_rope(self.w_q(x)), apply_rope(self.w_k(x))  # (B, T, Dh), rotated
        scores = q @ k.transpose(-2, -1) / math.sqrt(LOOKBACK_D_HEAD)  # (B, T, T)
        scores = scores.masked_fill(~causal_mask(T, device=tokens.device), float("-inf"))
        return self.out(scores.softmax(dim=-1) @ self.w_v(x))  # (B, T, symbols)


def lookback_data(seed: int, n: int, T: int = LOOKBACK_LENGTH) -> Tensor:
    """``n`` sequences of T tokens drawn uniformly from :data:`LOOKBACK_SYMBOLS`, from
    ``seed``: (n, T) int64. The answer at position t >= K is the token at t - K."""
    return torch.randint(0, LOOKBACK_SYMBOLS, (n, T),
                         generator=torch.Generator().manual_seed(int(seed)))


def lookback_targets(tokens: Tensor, K: int = LOOKBACK_K) -> Tensor:
    """The answers of ``tokens`` (n, T): (n, T) int64, the token at t - K at every position
    t >= K, :data:`~coursepkg.checks.tensors.NO_ANSWER` at the first K (they have none)."""
    targets = torch.full_like(tokens, NO_ANSWER)
    targets[:, K:] = tokens[:, :-K]
    return targets


def _build_lookback_args(args: dict) -> tuple:
    """The student's arguments: the training sequences and a seed (never the held-out seed,
    which :func:`coursepkg.checks.core.student_args` holds back)."""
    return lookback_data(int(args["seed"]), int(args["n"])), int(args["seed"])


def lookback_held_out(args: dict) -> tuple[Tensor, Tensor]:
    """The ``expected`` hook: held-out sequences, LONGER than the training ones, drawn from
    the case's ``"_heldout"`` seed, and their answers (:func:`lookback_targets`)."""
    tokens = lookback_data(int(args["_heldout"]), LOOKBACK_HELD_OUT, LOOKBACK_TEST_LENGTH)
    return tokens, lookback_targets(tokens)


with torch.random.fork_rng(devices=[]):
    #: Every name of LookbackModel's state_dict and its shape.
    LOOKBACK_SHAPES = {name: tuple(t.shape) for name, t in LookbackModel().state_dict().items()}


def train_lookback(tokens: Tensor, seed: int) -> LookbackModel:
    """Task 6.5's reference: Adam on minibatches of 32 sequences, 150 steps (about 0.3 s of
    CPU on one thread).

    Args:
        tokens: (N, T) the training sequences.
        seed: seeds the initialisation and the minibatches.

    Returns:
        The trained :class:`LookbackModel`.
    """
    torch.manual_seed(seed)
    model = LookbackModel()
    return fit_classifier(model, tokens, lookback_targets(tokens), seed, steps=150, lr=0.01,
                          batch=32)


register(
    train_task(
        "6.5",
        ASSIGNMENT,
        "train_lookback",
        "Train a RoPE head to output the token 3 positions back, tested on longer sequences",
        **training_cases("2,000 training sequences of 16 tokens", LOOKBACK_TRAIN, 651, 9651),
        build_args=_build_lookback_args,
        reference=train_lookback,
        model=LookbackModel,
        held_out=lookback_held_out,
        score=classifier_accuracy,
        bands=LOOKBACK_BANDS,
        time_limit=LOOKBACK_TIME_LIMIT,
        metric="held-out accuracy",
        advise=classifier_advice(HINT_LOOKBACK_PARTIAL, HINT_LOOKBACK_TRAIN,
                                 untrained=(0.3, HINT_LOOKBACK_UNTRAINED)),
        forbidden=("coursepkg.lm", "coursepkg.transformer",
                   "torch.nn.functional.scaled_dot_product_attention",
                   "torch.nn.MultiheadAttention"),
        error_hints={
            "CheckError": "Return the trained LookbackModel (or its state_dict()), with the "
            "names and shapes of LookbackModel().state_dict().",
            "RuntimeError": "A tensor operation failed: the sequences are (N, T) integers; "
            "LookbackModel takes (B, T) and returns (B, T, symbols) logits, and "
            "F.cross_entropy wants the logits flattened to (B * positions, symbols) and the "
            "answers to (B * positions,).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Questions 6.6 and 6.7
# --------------------------------------------------------------------------------------------

#: Question 6.6's table: width and base.
QUESTION_D = 64
#: Question 6.7's model: the relative bias clipped at M, trained on causal sequences of L.
QUESTION_M = 32
QUESTION_L = 32


def slowest_wavelength_key() -> float:
    """Question 6.6's key: 2 pi over the slowest frequency of the package's angles, d = 64."""
    slowest = rope_angles(torch.tensor([1.0], dtype=torch.float64), QUESTION_D,
                          dtype=torch.float64)[0, -1]
    return 2 * math.pi / slowest.item()


def untrained_biases_key() -> int:
    """Question 6.7's key: the biases of the page's RelativePositionBias (M = 32) that no
    allowed (causal) pair of a length-32 sequence looks up."""
    with torch.random.fork_rng(devices=[]):
        bias = RelativePositionBias(1, QUESTION_M)
    used = bias.offsets(QUESTION_L)[causal_mask(QUESTION_L)].unique().numel()
    return 2 * QUESTION_M + 1 - used


HINT_Q_WAVELENGTH = (
    "The slowest pair is the last one, i = d/2 - 1; it comes back to where it was after one "
    "full turn, 2 pi radians, at w_i radians per position."
)
HINT_Q_WAVELENGTH_BOUND = (
    "2 pi 10000 is the limit the wavelengths approach for very wide tables; the last pair has "
    "the exponent 2i/d with i = d/2 - 1, a little less than 1."
)
HINT_Q_WAVELENGTH_NO_2PI = (
    "That is 1 / w_i, positions per RADIAN: a full turn is 2 pi radians."
)
HINT_Q_WAVELENGTH_EXPONENT = "The exponent is 2i/d, with i the index of the pair."
HINT_Q_UNTRAINED = (
    "List the offsets s - t that a causal sequence of 32 tokens produces, clip them to "
    "[-M, M], and count the biases of the table they never reach."
)
HINT_Q_UNTRAINED_FUTURE = (
    "Count the offsets AFTER the query too: the causal mask hides every key s > t, so the "
    "biases of the positive offsets never get a gradient."
)
HINT_Q_UNTRAINED_BUCKET = (
    "Look at the end of the range: at length 32 the offsets reach -31 only, so the bucket of "
    "-32 (shared by every offset <= -32) is never looked up in training either."
)


register(question(
    "6.6", ASSIGNMENT, "slowest_wavelength",
    f"A sinusoidal table of width d = {QUESTION_D} and base 10000: after how many positions "
    "does its slowest pair come back to where it was?",
    slowest_wavelength_key, points=1, kind_of_answer="number", hint=HINT_Q_WAVELENGTH,
    wrong_answers=lambda: {
        2 * math.pi * BASE: HINT_Q_WAVELENGTH_BOUND,
        slowest_wavelength_key() / (2 * math.pi): HINT_Q_WAVELENGTH_NO_2PI,
        2 * math.pi * BASE ** ((QUESTION_D / 2 - 1) / QUESTION_D): HINT_Q_WAVELENGTH_EXPONENT,
    },
))
register(question(
    "6.7", ASSIGNMENT, "untrained_biases",
    f"The page's relative bias with M = {QUESTION_M}, trained causally on sequences of "
    f"{QUESTION_L} tokens: how many of the 2M + 1 biases of a head never get a gradient?",
    untrained_biases_key, points=1, kind_of_answer="int", hint=HINT_Q_UNTRAINED,
    wrong_answers=lambda: {
        QUESTION_M: HINT_Q_UNTRAINED_BUCKET,
        1: HINT_Q_UNTRAINED_FUTURE,
        0: HINT_Q_UNTRAINED_FUTURE,
    },
))
