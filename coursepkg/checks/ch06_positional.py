"""Chapter 6 tasks (``06_positional``): the sinusoidal position table, rotary position embedding
(RoPE) on adjacent pairs, and the lookup of a clipped relative position bias.

The conventions are those of :mod:`coursepkg.positional`, with the base fixed at 10000:

* the sinusoidal table is (T, d), ``PE[p, 2i] = sin(p w_i)``, ``PE[p, 2i+1] = cos(p w_i)``,
  ``w_i = 10000^(-2i/d)``, positions p = 0 .. T-1, in the dtype asked for;
* RoPE rotates each ADJACENT pair (2i, 2i+1) of the last dim of x (..., T, Dh) at position m
  by the angle ``m theta_i``, ``theta_i = 10000^(-2i/Dh)``, counter-clockwise:
  ``out[2i] = x[2i] cos - x[2i+1] sin``, ``out[2i+1] = x[2i] sin + x[2i+1] cos``; positions
  default to 0 .. T-1 and may be given as a (T,) integer tensor;
* the relative bias of query i and key j in head h is ``table[h, clip(j - i, -M, M) + M]``
  for a (H, 2M+1) table: (H, T, S).

The references are the package's own tested code: ``sinusoidal_encoding`` and ``apply_rope``
themselves, and a ``RelativePositionBias`` holding the case's table. The package, chapter 7's
model and the checks are forbidden to the student's functions.

Cases, plain values and judging work as in chapters 3 to 5 (:mod:`coursepkg.checks.tensors`).
The cases are made so that the usual mistakes change the numbers: every public table has at
least three frequencies (a wrong exponent shows), RoPE's public inputs have at least two pairs
(pairing halves instead of neighbours shows) and one has given positions that do not start at
0; the public lookups have offsets beyond M on both sides, more queries than keys and fewer,
and H = T = S once (heads moved last keep the shape), so that missing, one-sided or shifted
clipping and swapped offsets all show. The float64 cases are hidden, wide enough for float32
angles to be off by more than float64's tolerance: computing in float32 is named there. The
cases hold plain numbers and lists: a checks module does no tensor work when it is imported
(the grader forks its workers from a process that imported it). The hidden cases' generators
draw the seeds, the sizes and the positions from the grader's random generator.

Shape letters: T positions (queries), S key positions, d table width, B batch, H heads,
Dh head width, M the largest offset with its own bias.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from coursepkg.checks.core import Args, Task, Verdict, draw_seed, hidden, register
from coursepkg.checks.tensors import (
    DTYPES,
    HINT_DTYPE,
    HINT_NOT_FINITE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    Variant,
    decode,
    generator,
    judge_parts,
    normal,
    tensor_judge,
    tensor_plain,
    with_weights,
)
from coursepkg.positional import RelativePositionBias, apply_rope, sinusoidal_encoding

__all__ = ["ASSIGNMENT", "apply_rope", "relative_bias", "sinusoidal_table"]

ASSIGNMENT = "06_positional"

#: The base of the frequencies (Vaswani et al. 2017; Su et al. 2021).
BASE = 10000.0

# The package computes every task; chapter 7's model calls it.
_NO_POSITIONAL_LIBRARIES = (
    "coursepkg.positional",
    "coursepkg.transformer",
    "coursepkg.checks",
)

HINT_PRECISION = (
    "Right only to float32's precision, and this case is float64: compute the angles in the "
    "result's dtype (torch.arange(T, dtype=...), the frequencies alike) or in float64. "
    "torch.arange(T).float() and a conversion at the end keep float32's rounding errors."
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


# --------------------------------------------------------------------------------------------
# Task 6.1 sinusoidal_table
# --------------------------------------------------------------------------------------------

HINT_SIN_COS_SWAPPED = (
    "Sine and cosine are swapped: the EVEN columns hold the sines, PE[p, 2i] = sin(p w_i), and "
    "the odd ones the cosines, PE[p, 2i+1] = cos(p w_i). Position 0 is then (0, 1, 0, 1, ...)."
)
HINT_EXPONENT_PAIR_INDEX = (
    "The exponent is 2i/d, where i counts the PAIRS (0 .. d/2 - 1), so that 2i is the column "
    "of the pair's sine: w_i = 10000^(-2i/d). Yours uses i/d, so the frequencies only fall to "
    "about 10000^(-1/2) = 1/100 instead of almost 1/10000."
)
HINT_EXPONENT_PER_COLUMN = (
    "Both columns of a pair share one frequency: PE[p, 2i] = sin(p w_i) and PE[p, 2i+1] = "
    "cos(p w_i) with the same w_i = 10000^(-2i/d). Yours gives column j its own frequency "
    "10000^(-j/d), so the cosine of a pair runs at another speed than its sine (and the shift "
    "by k positions is no longer a rotation of each pair)."
)
HINT_EXPONENT_DOUBLED = (
    "The exponent is doubled twice: if i already steps over the even columns (torch.arange(0, "
    "d, 2) or range(0, d, 2)), it is 2i itself and the exponent is i/d, not 2i/d. Take w = "
    "10000 ** (-torch.arange(0, d, 2) / d), or pair indices torch.arange(d // 2) times 2."
)
HINT_EXPONENT_SIGN = (
    "The frequencies must DECREASE along the pairs: w_i = 10000^(-2i/d), i.e. p is divided "
    "by 10000^(2i/d). Yours multiplies p by it, so the later pairs turn faster, not slower."
)
HINT_HALVES = (
    "Interleave the sines and cosines: column 2i holds sin(p w_i) and column 2i+1 cos(p w_i). "
    "Yours puts all the sines first and all the cosines after (torch.cat): stack them on a new "
    "last dim and flatten, torch.stack([sin, cos], dim=-1).reshape(T, d), or assign "
    "pe[:, 0::2] and pe[:, 1::2]."
)
HINT_POSITIONS_FROM_1 = (
    "Positions start at 0: the first row is position 0 (torch.arange(T)), not 1."
)
HINT_ONE_FUNCTION = (
    "Each pair holds one sine and one cosine: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i). "
    "Yours uses the same function in both columns."
)
HINT_TABLE_TRANSPOSED = "Return (T, d): one row per position, one column per feature."
HINT_TABLE_HALF = (
    "The table has d columns, two per frequency: a sine and a cosine for each of the d/2 "
    "frequencies."
)
HINT_TABLE_NOT_FLAT = (
    "Flatten the (T, d/2, 2) pairs into (T, d): .reshape(T, d) puts the sine and the cosine "
    "of pair i in columns 2i and 2i+1."
)
HINT_TABLE_EXTRA_DIM = (
    "Return the (T, d) table itself, without a batch dim: the caller adds it to (B, T, d) "
    "embeddings by broadcasting."
)
HINT_TABLE_ROWS = "One row per position 0 .. T-1: T rows (torch.arange(T))."
HINT_TABLE_SHAPE = "Return a (T, d) table."
HINT_TABLE_DTYPE = (
    "Return the table in the dtype asked for: create it with dtype=dtype (torch.zeros(T, d, "
    "dtype=dtype), torch.arange(T, dtype=dtype)) or convert it at the end with .to(dtype)."
)
HINT_TABLE_GENERIC = (
    "PE[p, 2i] must be sin(p w_i) and PE[p, 2i+1] cos(p w_i), with p = 0 .. T-1 and w_i = "
    "10000^(-2i/d) for the pairs i = 0 .. d/2 - 1."
)


def _build_table_args(args: dict) -> tuple:
    return int(args["T"]), int(args["d"]), DTYPES[args["dtype"]]


def sinusoidal_table(T: int, d: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Task 6.1's reference: the package's sinusoidal_encoding with base 10000: (T, d)."""
    return sinusoidal_encoding(T, d, BASE, dtype)


def _two_i(i: Tensor, d: int) -> Tensor:  # the right exponent, 2i/d for pair i
    return 2 * i / d


#: exponents of the sine and the cosine of pair i: name -> (sine's, cosine's)
_EXPONENTS: dict[str, tuple[Callable[[Tensor, int], Tensor], Callable[[Tensor, int], Tensor]]] = {
    "right": (_two_i, _two_i),
    "pair index": (lambda i, d: i / d, lambda i, d: i / d),
    "per column": (_two_i, lambda i, d: (2 * i + 1) / d),
    "doubled": (lambda i, d: 4 * i / d, lambda i, d: 4 * i / d),
    # the loop `for i in range(0, d, 2)` with 2 * i for the sine and 2 * (i + 1) for the cosine
    "doubled per column": (lambda i, d: 4 * i / d, lambda i, d: (4 * i + 2) / d),
    "positive": (lambda i, d: -2 * i / d, lambda i, d: -2 * i / d),
}


def _table(T: int, d: int, *, exponent: str = "right", start: int = 0,
           functions: tuple[Callable, Callable] = (torch.sin, torch.cos),
           halves: bool = False) -> Tensor:
    """A sinusoidal table in float64 with one knob turned to a known mistake (default: right)."""
    p = torch.arange(start, start + T, dtype=torch.float64)[:, None]  # (T, 1)
    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    sin_exponent, cos_exponent = _EXPONENTS[exponent]
    first = functions[0](p * BASE ** -sin_exponent(i, d))  # (T, d/2)
    second = functions[1](p * BASE ** -cos_exponent(i, d))  # (T, d/2)
    if halves:
        return torch.cat([first, second], dim=-1)  # (T, d): sines, then cosines
    return torch.stack([first, second], dim=-1).reshape(T, d)  # (T, d): interleaved


def _table_variants(T: int, d: int, dtype: torch.dtype) -> list[Variant]:
    def variant(hint: str, **knobs) -> Variant:
        return hint, lambda: [_table(T, d, **knobs).to(dtype)], ""

    return [
        variant(HINT_SIN_COS_SWAPPED, functions=(torch.cos, torch.sin)),
        variant(HINT_EXPONENT_PAIR_INDEX, exponent="pair index"),
        variant(HINT_EXPONENT_PER_COLUMN, exponent="per column"),
        variant(HINT_EXPONENT_DOUBLED, exponent="doubled"),
        variant(HINT_EXPONENT_DOUBLED, exponent="doubled per column"),
        variant(HINT_EXPONENT_SIGN, exponent="positive"),
        variant(HINT_HALVES, halves=True),
        variant(HINT_POSITIONS_FROM_1, start=1),
        variant(HINT_ONE_FUNCTION, functions=(torch.sin, torch.sin)),
        variant(HINT_ONE_FUNCTION, functions=(torch.cos, torch.cos)),
        # a swap together with the sines and cosines in halves: cat([cos, sin])
        variant(HINT_SIN_COS_SWAPPED, functions=(torch.cos, torch.sin), halves=True),
    ]


def _table_shape_hint(got: list, expected: list, k: int) -> str:
    T, d = expected[0]
    shape = got[0]
    if shape == (d, T):
        return HINT_TABLE_TRANSPOSED
    if shape == (T, d // 2):
        return HINT_TABLE_HALF
    if shape == (T, d // 2, 2):
        return HINT_TABLE_NOT_FLAT
    if len(shape) == 3 and shape[0] == 1 and shape[1:] == (T, d):
        return HINT_TABLE_EXTRA_DIM
    if len(shape) == 2 and shape[1] == d:
        return HINT_TABLE_ROWS
    return HINT_TABLE_SHAPE


def _table_to_plain(value: object) -> dict:
    return tensor_plain(value, "the table")


def _judge_table(got: object, expected: object, args: dict) -> Verdict:
    T, d, dtype = _build_table_args(args)
    verdict = _judge_precise([got], [expected], ("table",), args["dtype"],
                             lambda: _table_variants(T, d, dtype), _table_shape_hint,
                             HINT_TABLE_GENERIC)
    if verdict.hint == HINT_TABLE_GENERIC and _growing_frequencies(got, T, d, args["dtype"]):
        return Verdict(False, HINT_EXPONENT_SIGN, verdict.detail)
    if verdict.hint == HINT_DTYPE:
        return Verdict(False, HINT_TABLE_DTYPE, verdict.detail)
    return verdict


def _growing_frequencies(got: dict, T: int, d: int, dtype: str) -> bool:
    """Whether ``got`` is the table with w_i = 10000^(+2i/d). Its angles reach thousands of
    radians, and sin of such an angle computed in float32 carries the angle's rounding (a few
    float32 epsilons of it), so the tolerance grows with the largest angle."""
    shape, _, values = decode(got)
    if shape != (T, d):
        return False
    eps = torch.finfo(DTYPES[dtype]).eps
    largest = (T - 1) * BASE ** (2 * (d // 2 - 1) / d)
    mistake = _table(T, d, exponent="positive")
    return torch.allclose(values, mistake, rtol=0, atol=1e-5 + 8 * eps * largest)


@dataclass(frozen=True)
class Table(Args):
    """A case of task 6.1: the table of T positions and width d."""

    T: int
    d: int
    dtype: str = "float32"


_TABLE_CASES = (
    Table(6, 8).case("6 positions, d = 8 (4 frequencies)"),
    Table(10, 6).case("10 positions, d = 6"),
    Table(3, 16).case("3 positions, d = 16"),
)


def _table_of(T: tuple[int, int], widths: list[int], dtype: str = "float32"
              ) -> Callable[[random.Random], Table]:
    """A generator of tables of T[0] to T[1] positions and a width among ``widths``."""
    return lambda rng: Table(rng.randint(*T), rng.choice(widths), dtype)


_TABLE_HIDDEN = (
    hidden("hidden: float64", _table_of((32, 48), [24, 32], "float64")),
    hidden("hidden: one position (T = 1)", _table_of((1, 1), [4, 6, 8])),
    hidden("hidden: one frequency (d = 2)", _table_of((5, 10), [2])),
    hidden("hidden: an odd number of pairs", _table_of((5, 12), [10, 14, 18])),
    hidden("hidden: more columns than positions", _table_of((2, 3), [16, 20, 24])),
    hidden("hidden: larger sizes", _table_of((48, 80), [32, 48])),
    hidden("hidden: a long narrow table", _table_of((32, 48), [4])),
)

register(
    Task(
        id="6.1",
        assignment=ASSIGNMENT,
        func_name="sinusoidal_table",
        title="The sinusoidal position table (T, d): sines in the even columns, cosines in the "
        "odd ones",
        cases=_TABLE_CASES,
        hidden=_TABLE_HIDDEN,
        build_args=_build_table_args,
        reference=sinusoidal_table,
        to_plain=_table_to_plain,
        judge=_judge_table,
        forbidden=_NO_POSITIONAL_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often an assignment of the wrong "
            "shape: the angles p * w are (T, 1) * (d/2,) -> (T, d/2), which is what "
            "pe[:, 0::2] and pe[:, 1::2] hold.",
            "TypeError": "The function is called as sinusoidal_table(T, d, dtype): keep the "
            "dtype argument, a torch.dtype (torch.zeros(T, d, dtype=dtype)). Sizes must be ints "
            "(d // 2, not d / 2).",
            "CheckError": "Return one tensor, (T, d).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 6.2 apply_rope
# --------------------------------------------------------------------------------------------

HINT_ROPE_HALF_SPLIT = (
    "Pair each feature with its NEIGHBOUR, (2i, 2i+1) = (x[..., 0::2], x[..., 1::2]), as in "
    "Su et al. (2021). Yours pairs feature i with feature i + Dh/2 (the rotate_half of "
    "GPT-NeoX and LLaMA's code): also a rotary embedding, but another one, and weights trained "
    "with one pairing do not work with the other."
)
HINT_ROPE_MIXED = (
    "Your function mixes the two pairings: the angles are laid out for one of them and the "
    "rotation for the other. Here a pair is two NEIGHBOURS (2i, 2i+1), both rotated by "
    "m theta_i: the even features x[..., 0::2] and the odd ones x[..., 1::2] turn together, "
    "and each rotated pair goes back in its place."
)
HINT_ROPE_SIGN = (
    "The rotation turns the wrong way: rotating (a, b) by the angle m theta gives "
    "(a cos - b sin, a sin + b cos). Yours gives (a cos + b sin, -a sin + b cos), the rotation "
    "by -m theta."
)
HINT_ROPE_FROM_1 = (
    "Positions start at 0: without a positions argument the rows are at 0 .. T-1 "
    "(torch.arange(T)), so the first row is not rotated at all."
)
HINT_ROPE_POSITIONS_IGNORED = (
    "Use the positions you are given: when positions is not None row t is at position "
    "positions[t], not t (a model generating token after token rotates the new query by its "
    "real position)."
)
HINT_ROPE_EXPONENT_PAIR_INDEX = (
    "theta_i = 10000^(-2i/Dh) with i the index of the pair: 10000 ** (-torch.arange(0, Dh, 2) "
    "/ Dh). Yours uses i/Dh, so the slowest pair turns at about 10000^(-1/2) = 1/100 "
    "instead of almost 1/10000."
)
HINT_ROPE_EXPONENT_DOUBLED = (
    "The exponent is doubled twice: torch.arange(0, Dh, 2) already counts 2i, so theta = "
    "10000 ** (-torch.arange(0, Dh, 2) / Dh), without another factor 2."
)
HINT_ROPE_NOT_INTERLEAVED = (
    "Put each rotated pair back in its place, (2i, 2i+1): torch.stack([new_even, new_odd], "
    "dim=-1).flatten(-2). Concatenating them gives all the even features first and all the "
    "odd ones after."
)
HINT_ROPE_ADDED = (
    "RoPE rotates the vectors, it adds nothing: adding the sinusoidal table to x is the "
    "absolute encoding of the first Transformer. Rotate each pair (2i, 2i+1) by m theta_i; "
    "the norm of every row stays the same."
)
HINT_ROPE_SIN_COS_SWAPPED = (
    "cos and sin are swapped: the rotation by the angle a is (x cos a - y sin a, x sin a + "
    "y cos a); at position 0 (a = 0) it must give x back unchanged."
)
HINT_ROPE_NOT_FLAT = (
    "Flatten the pairs back: (..., T, Dh/2, 2) -> (..., T, Dh) with .flatten(-2), so that the "
    "result has the shape of x."
)
HINT_ROPE_HALF_WIDTH = (
    "Return both members of every pair: the result has the shape of x, (..., T, Dh), with the "
    "rotated pair i in features 2i and 2i+1."
)
HINT_ROPE_SHAPE = "Return a tensor of the shape of x, (..., T, Dh)."
HINT_ROPE_GENERIC = (
    "Pair i is features 2i and 2i+1 (x[..., 0::2] and x[..., 1::2]); row t turns it by the "
    "angle m * theta_i, theta_i = 10000^(-2i/Dh), m = positions[t] or t: a rotation of the "
    "plane, counter-clockwise, with the rotated pair back in features 2i and 2i+1."
)


def _build_rope_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    shape = tuple(int(n) for n in args["shape"])  # (..., T, Dh)
    if args["layout"] == "heads view":  # (B, T, H, Dh) in memory, as split_heads returns it
        B, H, T, Dh = shape
        x = normal(gen, (B, T, H, Dh), 1.0, dtype).transpose(1, 2)  # (B, H, T, Dh)
    else:
        x = normal(gen, shape, 1.0, dtype)
    if args["positions"] is None:
        return (x,)
    return x, torch.tensor(args["positions"], dtype=torch.long)


def _rope_angles(T: int, Dh: int, positions: Tensor | None, *, start: int = 0,
                 exponent: Callable[[Tensor, int], Tensor] = _two_i) -> Tensor:
    """(T, Dh/2) angles m * theta_i in float64."""
    m = torch.arange(start, start + T) if positions is None else positions
    i = torch.arange(Dh // 2, dtype=torch.float64)
    return m.to(torch.float64)[:, None] * BASE ** -exponent(i, Dh)  # (T, Dh/2)


def _rope(x: Tensor, positions: Tensor | None, *, start: int = 0,
          exponent: Callable[[Tensor, int], Tensor] = _two_i, sign: int = 1,
          pairing: str = "adjacent", interleave: bool = True,
          swap: bool = False) -> Callable[[], list[Tensor]]:
    """apply_rope with one knob turned to a known mistake (defaults: right)."""
    T, Dh = x.shape[-2], x.shape[-1]

    def rotate() -> list[Tensor]:
        angles = _rope_angles(T, Dh, positions, start=start, exponent=exponent)
        cos, sin = angles.cos().to(x.dtype), (sign * angles.sin()).to(x.dtype)  # (T, Dh/2)
        if swap:
            cos, sin = sin, cos
        if pairing == "halves":  # rotate_half: feature i with feature i + Dh/2
            first, second = x[..., : Dh // 2], x[..., Dh // 2 :]
            return [torch.cat([first * cos - second * sin, second * cos + first * sin], -1)]
        if pairing == "halves, angles repeated":  # rotate_half with interleaved angles
            first, second = x[..., : Dh // 2], x[..., Dh // 2 :]
            turned = torch.cat([-second, first], dim=-1)
            return [x * cos.repeat_interleave(2, -1) + turned * sin.repeat_interleave(2, -1)]
        if pairing == "neighbours, angles concatenated":  # adjacent turn with cat angles
            turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
            return [x * torch.cat([cos, cos], -1) + turned * torch.cat([sin, sin], -1)]
        even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, Dh/2)
        new_even, new_odd = even * cos - odd * sin, even * sin + odd * cos
        if not interleave:
            return [torch.cat([new_even, new_odd], dim=-1)]
        return [torch.stack([new_even, new_odd], dim=-1).flatten(-2)]

    return rotate


def _rope_added(x: Tensor, positions: Tensor | None) -> Callable[[], list[Tensor]]:
    """x plus the sinusoidal table of its positions (or of 0 .. T-1 when None)."""
    T, Dh = x.shape[-2], x.shape[-1]

    def add() -> list[Tensor]:
        angles = _rope_angles(T, Dh, positions)  # (T, Dh/2)
        table = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(T, Dh)
        return [x + table.to(x.dtype)]

    return add


def _rope_variants(x: Tensor, positions: Tensor | None = None) -> list[Variant]:
    variants: list[Variant] = [
        (HINT_ROPE_HALF_SPLIT, _rope(x, positions, pairing="halves"), ""),
        (HINT_ROPE_MIXED, _rope(x, positions, pairing="halves, angles repeated"), ""),
        (HINT_ROPE_MIXED, _rope(x, positions, pairing="neighbours, angles concatenated"), ""),
        (HINT_ROPE_SIGN, _rope(x, positions, sign=-1), ""),
        (HINT_ROPE_EXPONENT_PAIR_INDEX, _rope(x, positions, exponent=lambda i, d: i / d), ""),
        (HINT_ROPE_EXPONENT_DOUBLED, _rope(x, positions, exponent=lambda i, d: 4 * i / d), ""),
        (HINT_ROPE_NOT_INTERLEAVED, _rope(x, positions, interleave=False), ""),
        (HINT_ROPE_SIN_COS_SWAPPED, _rope(x, positions, swap=True), ""),
        (HINT_ROPE_ADDED, _rope_added(x, positions), ""),
        (HINT_ROPE_ADDED, _rope_added(x, None), ""),
        # the same mistakes with the half-split pairing, the one students copy most
        (HINT_ROPE_HALF_SPLIT, _rope(x, positions, pairing="halves", sign=-1), ""),
    ]
    if positions is None:
        variants.append((HINT_ROPE_FROM_1, _rope(x, None, start=1), ""))
    else:
        variants.append((HINT_ROPE_POSITIONS_IGNORED, _rope(x, None), ""))
        variants.append((HINT_ROPE_POSITIONS_IGNORED, _rope(x, None, start=1), ""))
    return variants


def _rope_shape_hint(got: list, expected: list, k: int) -> str:
    shape, want = got[0], expected[0]
    if shape == (*want[:-1], want[-1] // 2, 2):
        return HINT_ROPE_NOT_FLAT
    if shape == (*want[:-1], want[-1] // 2):
        return HINT_ROPE_HALF_WIDTH
    return HINT_ROPE_SHAPE


def _rope_to_plain(value: object) -> dict:
    return tensor_plain(value, "the rotated x")


_judge_rope = tensor_judge(_build_rope_args, ("out",), lambda inputs: _rope_variants(*inputs),
                           _rope_shape_hint, HINT_ROPE_GENERIC, verdict=_judge_precise)


@dataclass(frozen=True)
class Rope(Args):
    """A case of task 6.2: x of ``shape`` (..., T, Dh), at ``positions`` or 0 .. T-1 (None);
    ``layout`` "heads view": x (B, H, T, Dh) is a view of a (B, T, H, Dh) tensor."""

    seed: int
    shape: tuple[int, ...]
    positions: list | None = None
    dtype: str = "float32"
    layout: str = "contiguous"


_ROPE_CASES = (
    Rope(601, (5, 4)).case("one sequence of 5 vectors, Dh = 4 (2 pairs), x of shape (T, Dh)"),
    Rope(602, (2, 6, 8)).case("2 sequences of 6 vectors, Dh = 8"),
    Rope(603, (2, 3, 4, 6)).case("(B, H, T, Dh) = (2, 3, 4, 6) queries"),
    Rope(604, (2, 4, 6), positions=[3, 4, 5, 6]).case(
        "4 new tokens at positions 3, 4, 5, 6 (the first 3 are cached)"),
)


def _rope_case(rng: random.Random, lead: int, T: tuple[int, int], widths: list[int], *,
          ordered: bool = True, dtype: str = "float32", layout: str = "contiguous") -> Rope:
    """x of ``lead`` leading dims of 1 to 4, T[0] to T[1] positions and a width among
    ``widths``, drawn from ``rng``; with ``ordered`` False, positions in any order."""
    shape = (*(rng.randint(1 if n else 2, 4) for n in range(lead)), rng.randint(*T),
             rng.choice(widths))
    positions = None if ordered else rng.sample(range(3 * shape[-2]), shape[-2])
    return Rope(draw_seed(rng), shape, positions, dtype, layout)


_ROPE_HIDDEN = (
    hidden("hidden: float64", lambda rng: _rope_case(rng, 2, (24, 36), [12, 16], dtype="float64")),
    hidden("hidden: one position (T = 1)", lambda rng: _rope_case(rng, 1, (1, 1), [4, 6, 8])),
    hidden("hidden: one pair (Dh = 2)", lambda rng: _rope_case(rng, 1, (3, 7), [2])),
    hidden("hidden: positions in any order",
           lambda rng: _rope_case(rng, 2, (4, 7), [4, 6], ordered=False)),
    hidden("hidden: heads as split_heads returns them (a transposed view)",
           lambda rng: _rope_case(rng, 2, (3, 6), [4, 6], layout="heads view")),
    hidden("hidden: larger sizes", lambda rng: _rope_case(rng, 2, (12, 20), [24, 32])),
)

register(
    Task(
        id="6.2",
        assignment=ASSIGNMENT,
        func_name="apply_rope",
        title="Rotary position embedding: rotate each adjacent pair (2i, 2i+1) by m theta_i",
        cases=_ROPE_CASES,
        hidden=_ROPE_HIDDEN,
        build_args=_build_rope_args,
        reference=apply_rope,
        to_plain=_rope_to_plain,
        judge=_judge_rope,
        forbidden=_NO_POSITIONAL_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x[..., 0::2] is (..., T, Dh/2) and the angles (T, Dh/2) broadcast against it "
            "(T is x.shape[-2], Dh x.shape[-1], whatever the leading dims). view fails on a "
            "tensor that is not contiguous: use reshape or unflatten.",
            "AttributeError": "positions is None unless it is given: use the positions "
            "0 .. T-1 then.",
            "TypeError": "The function is called with x alone when there are no positions: "
            "give it the default positions=None. Sizes must be ints (Dh // 2, not Dh / 2).",
            "CheckError": "Return one tensor of the shape of x, (..., T, Dh).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 6.3 relative_bias
# --------------------------------------------------------------------------------------------

HINT_OFFSET_REVERSED = (
    "The offset is j - i, key position minus query position: a key 2 positions AFTER the "
    "query has offset +2 and uses table[:, M + 2]. Yours uses i - j (or returns the (H, S, T) "
    "transpose), so every bias lands on the mirrored offset."
)
HINT_NO_CLIP = (
    "Clip the offsets to [-M, M] before looking them up (offsets.clamp(-M, M)): every offset "
    "beyond M shares the bias of M, and every offset below -M that of -M. Without clipping "
    "the column index leaves 0 .. 2M (a negative index even wraps round to the other end of "
    "the table)."
)
HINT_CLIP_ONE_SIDE = (
    "Clip the offsets on BOTH sides, offsets.clamp(-M, M): offsets below -M need clipping as "
    "much as those above M (a negative index wraps round to the other end of the table)."
)
HINT_CLIP_OFF_BY_ONE = (
    "Clip to [-M, M] inclusive, offsets.clamp(-M, M) (clamp's bounds are included): the table "
    "has 2M + 1 columns, one for each offset -M, ..., 0, ..., M. Your bounds are off by one."
)
HINT_NO_SHIFT = (
    "Shift the clipped offsets by M to make them column indices: offset -M is column 0, "
    "offset 0 column M, offset M column 2M. Without the shift a negative offset wraps round "
    "to the other end of the table."
)
HINT_ABSOLUTE_OFFSET = (
    "Keep the offset's sign: j - i is negative for keys before the query and positive after "
    "it, and the two directions have their own biases (columns M - k and M + k). Yours uses "
    "the distance |j - i|."
)
HINT_BIAS_HEADS_LAST = (
    "Put the heads first, (H, T, S): index the table's columns, table[:, index] with an index "
    "of shape (T, S), rather than moving the heads last."
)
HINT_BIAS_KEYS = (
    "One column per KEY: the result is (H, T, S), offsets[i, j] = j - i with j = 0 .. S-1; "
    "S may differ from T."
)
HINT_BIAS_TRANSPOSED = (
    "Rows are queries and columns keys: result[h, i, j] is the bias of query i and key j, "
    "(H, T, S). Yours is (H, S, T)."
)
HINT_BIAS_NO_HEADS = (
    "Keep one (T, S) map per head: index the table's columns, table[:, index], for (H, T, S)."
)
HINT_BIAS_SHAPE = "Return (H, T, S): one bias per head, query and key."
HINT_BIAS_GENERIC = (
    "result[h, i, j] must be table[h, clip(j - i, -M, M) + M]: the offsets j - i of every "
    "query and key, clipped to [-M, M] and shifted by M, index the table's columns."
)


def _build_bias_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    H, M = int(args["H"]), int(args["M"])
    table = normal(gen, (H, 2 * M + 1), 1.0, dtype)  # (H, 2M+1)
    return table, int(args["T"]), int(args["S"]), M


def relative_bias(table: Tensor, T: int, S: int, max_distance: int) -> Tensor:
    """Task 6.3's reference: a :class:`RelativePositionBias` holding ``table``.

    Args:
        table: (H, 2M+1), the bias of offsets -M .. M per head.
        T: query positions; S: key positions.
        max_distance: M.

    Returns:
        (H, T, S): ``table[h, clip(j - i, -M, M) + M]``.
    """
    layer = with_weights(lambda: RelativePositionBias(table.shape[0], max_distance), table.dtype,
                         {"bias": table})
    with torch.no_grad():
        return layer(T, S)


def _lookup(table: Tensor, T: int, S: int, M: int, *, reverse: bool = False,
            low: int | None = None, high: int | None = None, clip: bool = True,
            shift: bool = True, absolute: bool = False) -> Callable[[], list[Tensor]]:
    """The lookup with one knob turned to a known mistake (defaults: right); a wrong index
    past the table raises IndexError, as it would for the student (the variant is skipped)."""

    def look() -> list[Tensor]:
        i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
        offsets = i - j if reverse else j - i  # (T, S)
        if absolute:
            offsets = offsets.abs()
        if clip:
            offsets = offsets.clamp(-M if low is None else low, M if high is None else high)
        index = offsets + M if shift else offsets
        return [table[:, index]]  # (H, T, S)

    return look


def _bias_variants(table: Tensor, T: int, S: int, M: int) -> list[Variant]:
    def variant(hint: str, **knobs) -> Variant:
        return hint, _lookup(table, T, S, M, **knobs), ""

    return [
        variant(HINT_OFFSET_REVERSED, reverse=True),
        variant(HINT_NO_CLIP, clip=False),
        variant(HINT_CLIP_ONE_SIDE, low=-(10**9)),
        variant(HINT_CLIP_ONE_SIDE, high=10**9),
        variant(HINT_CLIP_OFF_BY_ONE, low=-M + 1, high=M - 1),
        variant(HINT_CLIP_OFF_BY_ONE, high=M - 1),
        variant(HINT_CLIP_OFF_BY_ONE, low=-M + 1),
        variant(HINT_CLIP_OFF_BY_ONE, low=-M - 1, high=M + 1),
        variant(HINT_NO_SHIFT, shift=False),
        variant(HINT_ABSOLUTE_OFFSET, absolute=True),
        # two mistakes at once: reversed and unclipped
        variant(HINT_OFFSET_REVERSED, reverse=True, clip=False),
        # (T, S, H) has the shape of (H, T, S) when H = T = S
        (HINT_BIAS_HEADS_LAST, lambda: [_lookup(table, T, S, M)()[0].permute(1, 2, 0)], ""),
    ]


def _bias_shape_hint(got: list, expected: list, k: int) -> str:
    H, T, S = expected[0]
    shape = got[0]
    if shape == (T, S, H) and (H, T, S) != (T, S, H):
        return HINT_BIAS_HEADS_LAST
    if shape == (H, S, T):
        return HINT_BIAS_TRANSPOSED
    if len(shape) == 3 and shape[:2] == (H, T):
        return HINT_BIAS_KEYS
    if shape == (T, S):
        return HINT_BIAS_NO_HEADS
    return HINT_BIAS_SHAPE


def _bias_to_plain(value: object) -> dict:
    return tensor_plain(value, "the bias")


_judge_bias = tensor_judge(_build_bias_args, ("bias",), lambda inputs: _bias_variants(*inputs),
                           _bias_shape_hint, HINT_BIAS_GENERIC)


@dataclass(frozen=True)
class Bias(Args):
    """A case of task 6.3: a (H, 2M+1) table, T queries and S keys."""

    seed: int
    H: int
    T: int
    S: int
    M: int
    dtype: str = "float32"


_BIAS_CASES = (
    Bias(621, H=2, T=6, S=6, M=2).case(
        "2 heads, 6 queries and 6 keys, M = 2 (offsets -5 .. 5 clipped)"),
    Bias(622, H=3, T=4, S=7, M=2).case("3 heads, 4 queries and 7 keys, M = 2"),
    Bias(623, H=2, T=7, S=3, M=1).case("2 heads, 7 queries and 3 keys, M = 1"),
    Bias(624, H=4, T=4, S=4, M=5).case(
        "4 heads, 4 queries and 4 keys, M = 5: no offset needs clipping"),
)


def _bias(rng: random.Random, *, H: tuple[int, int] = (2, 4), T: tuple[int, int] = (5, 9),
          S: tuple[int, int] | None = (5, 9), M: tuple[int, int] = (2, 3),
          dtype: str = "float32") -> Bias:
    """A case of task 6.3 drawn from ``rng`` (S = T when ``S`` is None)."""
    queries = rng.randint(*T)
    keys = queries if S is None else rng.randint(*S)
    return Bias(draw_seed(rng), rng.randint(*H), queries, keys, rng.randint(*M), dtype)


_BIAS_HIDDEN = (
    hidden("hidden: float64", lambda rng: _bias(rng, S=None, dtype="float64")),
    hidden("hidden: one query and one key", lambda rng: _bias(rng, T=(1, 1), S=(1, 1))),
    hidden("hidden: one head", lambda rng: _bias(rng, H=(1, 1), T=(4, 6), S=(7, 10))),
    hidden("hidden: M = 1, long sequences", lambda rng: _bias(rng, T=(10, 14), S=None,
                                                              M=(1, 1))),
    hidden("hidden: one query, many keys", lambda rng: _bias(rng, T=(1, 1), S=(8, 12),
                                                             M=(3, 5))),
    hidden("hidden: larger sizes", lambda rng: _bias(rng, H=(6, 8), T=(14, 18), S=(18, 22),
                                                     M=(5, 7))),
)

register(
    Task(
        id="6.3",
        assignment=ASSIGNMENT,
        func_name="relative_bias",
        title="Look up a relative position bias (H, T, S) from a (H, 2M+1) table, offsets "
        "j - i clipped to [-M, M]",
        cases=_BIAS_CASES,
        hidden=_BIAS_HIDDEN,
        build_args=_build_bias_args,
        reference=relative_bias,
        to_plain=_bias_to_plain,
        judge=_judge_bias,
        forbidden=_NO_POSITIONAL_LIBRARIES,
        error_hints={
            "IndexError": "An index ran past the table's 2M + 1 columns: the offsets j - i "
            "run from -(T-1) to S-1, so clip them to [-M, M] with clamp(-M, M) before adding "
            "M; the indices are then 0 .. 2M.",
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "the offsets are (T, S) (queries down, keys across), and table[:, index] gives "
            "(H, T, S). Index with an integer tensor (torch.long).",
            "TypeError": "Index the table with an integer tensor (torch.arange gives int64) "
            "and pass ints as sizes.",
            "CheckError": "Return one tensor, (H, T, S).",
        },
    )
)
