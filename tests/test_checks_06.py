"""The checks of chapter 6 (coursepkg.checks.ch06_positional): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, hidden_cases, run_task

from coursepkg import checks
from coursepkg import positional as pos
from coursepkg.checks import ch06_positional as ch06

# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def sinusoidal_table(T, d, dtype=torch.float32):
    """The notebook's solution: angles in the dtype asked for, two strided assignments."""
    p = torch.arange(T, dtype=dtype)[:, None]  # (T, 1)
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=dtype) / d)  # (d/2,)
    table = torch.zeros(T, d, dtype=dtype)
    table[:, 0::2] = torch.sin(p * w)
    table[:, 1::2] = torch.cos(p * w)
    return table


def table_exp_log(T, d, dtype=torch.float32):
    """The Annotated Transformer's way: exp(-2i log(10000) / d), positions divided."""
    position = torch.arange(0, T, dtype=dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=dtype) * -(math.log(10000.0) / d))
    table = torch.empty(T, d, dtype=dtype)
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table


def table_python_loops(T, d, dtype=torch.float32):
    """Python floats in two loops, one tensor at the end."""
    rows = []
    for p in range(T):
        row = []
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=dtype).reshape(T, d)


def table_float64_then_cast(T, d, dtype=torch.float32):
    """Everything in float64, cast at the end; the pairs stacked and flattened."""
    angles = torch.outer(torch.arange(T).double(),
                         torch.pow(10000.0, -torch.arange(d // 2).double() * 2 / d))
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1).to(dtype)


def apply_rope(x, positions=None):
    """The notebook's solution: even and odd features, the angles in x's dtype."""
    T, Dh = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T)
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh)  # (Dh/2,)
    angles = positions.to(x.dtype)[:, None] * theta  # (T, Dh/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, Dh/2)
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)  # (..., T, Dh)


def rope_complex(x, positions=None):
    """Each pair as one complex number, multiplied by e^(i m theta)."""
    T, Dh = x.shape[-2], x.shape[-1]
    m = torch.arange(T, dtype=torch.float64) if positions is None else positions.double()
    theta = 1.0 / 10000 ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    turn = torch.polar(torch.ones(T, Dh // 2, dtype=torch.float64), torch.outer(m, theta))
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], Dh // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)


def rope_rotation_matrices(x, positions=None):
    """A 2 x 2 rotation matrix per position and pair, applied with einsum."""
    T, Dh = x.shape[-2], x.shape[-1]
    m = torch.arange(T) if positions is None else positions
    angles = m[:, None].to(x.dtype) * torch.tensor(
        [10000 ** (-2 * i / Dh) for i in range(Dh // 2)], dtype=x.dtype)  # (T, Dh/2)
    cos, sin = angles.cos(), angles.sin()
    rotation = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    pairs = x.unflatten(-1, (Dh // 2, 2))  # (..., T, Dh/2, 2)
    return torch.einsum("tpab,...tpb->...tpa", rotation, pairs).flatten(-2)


def rope_rotate_every_two(x, positions=None):
    """x * cos + rotate_every_two(x) * sin with the angles repeated pairwise (GPT-J's form)."""
    T, Dh = x.shape[-2], x.shape[-1]
    m = torch.arange(T, dtype=x.dtype) if positions is None else positions.to(x.dtype)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, Dh, 2).to(x.dtype) / Dh))
    angles = torch.einsum("t,f->tf", m, inv_freq).repeat_interleave(2, dim=-1)  # (T, Dh)
    turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).reshape(x.shape)
    return x * angles.cos() + turned * angles.sin()


def relative_bias(table, T, S, max_distance):
    """The notebook's solution."""
    offsets = torch.arange(S)[None, :] - torch.arange(T)[:, None]  # (T, S): j - i
    index = offsets.clamp(-max_distance, max_distance) + max_distance  # (T, S) in 0 .. 2M
    return table[:, index]  # (H, T, S)


def bias_loops(table, T, S, max_distance):
    """Three loops and min/max."""
    H, M = table.shape[0], max_distance
    out = torch.empty(H, T, S, dtype=table.dtype)
    for h in range(H):
        for i in range(T):
            for j in range(S):
                out[h, i, j] = table[h, min(max(j - i, -M), M) + M]
    return out


def bias_shift_then_clamp(table, T, S, max_distance):
    """Shift first, clamp to the columns 0 .. 2M, then index_select and view."""
    M = max_distance
    index = (torch.arange(S) - torch.arange(T).unsqueeze(-1) + M).clamp(0, 2 * M)
    return table.index_select(1, index.reshape(-1)).view(table.shape[0], T, S)


def bias_one_hot(table, T, S, max_distance):
    """A one-hot matrix product, then the heads moved first."""
    M = max_distance
    index = torch.clamp(torch.arange(S)[None] - torch.arange(T)[:, None], -M, M) + M
    one_hot = F.one_hot(index, 2 * M + 1).to(table.dtype)  # (T, S, 2M+1)
    return (one_hot @ table.T).permute(2, 0, 1)


CORRECT = {
    "6.1": [ch06.sinusoidal_table, sinusoidal_table, table_exp_log, table_python_loops,
            table_float64_then_cast],
    "6.2": [pos.apply_rope, apply_rope, rope_complex, rope_rotation_matrices,
            rope_rotate_every_two],
    "6.3": [ch06.relative_bias, relative_bias, bias_loops, bias_shift_then_clamp, bias_one_hot],
}


# ---------------------------------------------------------------------------------------------
# Plausible wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------


def _table_with(*, exponent=lambda i, d: 2 * i / d, cos_exponent=None, start=0,
                first=torch.sin, second=torch.cos, halves=False):
    """A student's table with one mistake switched on (defaults: right)."""

    def table(T, d, dtype=torch.float32):
        p = torch.arange(start, start + T, dtype=dtype)[:, None]
        i = torch.arange(d // 2, dtype=dtype)
        a = p / 10000 ** exponent(i, d)
        b = p / 10000 ** (cos_exponent or exponent)(i, d)
        if halves:
            return torch.cat([first(a), second(b)], dim=-1)
        out = torch.zeros(T, d, dtype=dtype)
        out[:, 0::2], out[:, 1::2] = first(a), second(b)
        return out

    return table


def _named(func, name):
    func.__name__ = name
    return func


table_sin_cos_swapped = _named(_table_with(first=torch.cos, second=torch.sin),
                               "table_sin_cos_swapped")
table_exponent_i = _named(_table_with(exponent=lambda i, d: i / d), "table_exponent_i")
table_exponent_per_column = _named(
    _table_with(cos_exponent=lambda i, d: (2 * i + 1) / d), "table_exponent_per_column")
table_positive_exponent = _named(_table_with(exponent=lambda i, d: -2 * i / d),
                                 "table_positive_exponent")
table_halves = _named(_table_with(halves=True), "table_halves")
table_from_1 = _named(_table_with(start=1), "table_from_1")
table_sines_only = _named(_table_with(second=torch.sin), "table_sines_only")


def table_column_frequencies(T, d, dtype=torch.float32):
    """One frequency per column: div = 10000 ** (arange(d) / d), sin even, cos odd."""
    angles = torch.arange(T, dtype=dtype)[:, None] / 10000 ** (torch.arange(d, dtype=dtype) / d)
    out = angles.clone()
    out[:, 0::2], out[:, 1::2] = angles[:, 0::2].sin(), angles[:, 1::2].cos()
    return out


def table_loop_doubled(T, d, dtype=torch.float32):
    """The loop over even columns, with 2 * i in the exponent of the sine and 2 * (i + 1) in
    the cosine's."""
    out = torch.zeros(T, d, dtype=dtype)
    for p in range(T):
        for i in range(0, d, 2):
            out[p, i] = math.sin(p / 10000 ** (2 * i / d))
            out[p, i + 1] = math.cos(p / 10000 ** (2 * (i + 1) / d))
    return out


def table_range_step_doubled(T, d, dtype=torch.float32):
    """i = arange(0, d, 2) already counts 2i, and the exponent doubles it again."""
    i = torch.arange(0, d, 2, dtype=dtype)
    angles = torch.arange(T, dtype=dtype)[:, None] * 10000 ** (-2 * i / d)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(T, d)


def table_transposed(T, d, dtype=torch.float32):
    return sinusoidal_table(T, d, dtype).T


def table_sines(T, d, dtype=torch.float32):
    return sinusoidal_table(T, d, dtype)[:, 0::2]


def table_batched(T, d, dtype=torch.float32):
    return sinusoidal_table(T, d, dtype).unsqueeze(0)


def table_in_float32(T, d, dtype=torch.float32):
    """Computed in float32 whatever the dtype, converted at the end."""
    return sinusoidal_table(T, d).to(dtype)


def table_ignores_dtype(T, d, dtype=torch.float32):
    return sinusoidal_table(T, d)


def table_without_dtype(T, d):
    """The signature without the dtype argument."""
    return sinusoidal_table(T, d)


def table_float_size(T, d, dtype=torch.float32):
    angles = torch.arange(T, dtype=dtype)[:, None] / 10000 ** (torch.arange(d / 2) * 2 / d)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).view(T, d / 2 * 2)


def _rope_with(*, start=0, exponent=lambda i, d: 2 * i / d, sign=1, use_positions=True,
               interleave=True):
    """A student's apply_rope with one mistake switched on (defaults: right)."""

    def rope(x, positions=None):
        T, Dh = x.shape[-2], x.shape[-1]
        if positions is None or not use_positions:
            positions = torch.arange(start, start + T)
        theta = 10000.0 ** -exponent(torch.arange(Dh // 2, dtype=x.dtype), Dh)
        angles = positions.to(x.dtype)[:, None] * theta
        cos, sin = angles.cos(), sign * angles.sin()
        even, odd = x[..., 0::2], x[..., 1::2]
        new_even, new_odd = even * cos - odd * sin, even * sin + odd * cos
        if interleave:
            return torch.stack([new_even, new_odd], dim=-1).flatten(-2)
        return torch.cat([new_even, new_odd], dim=-1)

    return rope


rope_sign_flipped = _named(_rope_with(sign=-1), "rope_sign_flipped")
rope_from_1 = _named(_rope_with(start=1), "rope_from_1")
rope_positions_ignored = _named(_rope_with(use_positions=False), "rope_positions_ignored")
rope_exponent_i = _named(_rope_with(exponent=lambda i, d: i / d), "rope_exponent_i")
rope_not_interleaved = _named(_rope_with(interleave=False), "rope_not_interleaved")


def _rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rope_rotate_half(x, positions=None):
    """LLaMA's code: the angles concatenated twice, x * cos + rotate_half(x) * sin."""
    T, Dh = x.shape[-2], x.shape[-1]
    m = torch.arange(T, dtype=x.dtype) if positions is None else positions.to(x.dtype)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, Dh, 2, dtype=x.dtype) / Dh))
    freqs = torch.outer(m, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # (T, Dh)
    return x * emb.cos() + _rotate_half(x) * emb.sin()


def rope_rotate_half_interleaved_angles(x, positions=None):
    """rotate_half with the angles repeated pairwise: the two conventions mixed."""
    T, Dh = x.shape[-2], x.shape[-1]
    m = torch.arange(T, dtype=x.dtype) if positions is None else positions.to(x.dtype)
    angles = torch.outer(m, 10000 ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh))
    angles = angles.repeat_interleave(2, dim=-1)
    return x * angles.cos() + _rotate_half(x) * angles.sin()


def rope_adds_the_table(x, positions=None):
    """Adds the sinusoidal table, like the absolute encoding."""
    return x + sinusoidal_table(x.shape[-2], x.shape[-1], x.dtype)


def rope_sin_cos_swapped(x, positions=None):
    T, Dh = x.shape[-2], x.shape[-1]
    m = torch.arange(T, dtype=x.dtype) if positions is None else positions.to(x.dtype)
    angles = m[:, None] * 10000 ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * angles.sin() - odd * angles.cos(),
                        even * angles.cos() + odd * angles.sin()], -1).flatten(-2)


def rope_pairs_not_flattened(x, positions=None):
    return apply_rope(x, positions).unflatten(-1, (x.shape[-1] // 2, 2))


def rope_in_float32(x, positions=None):
    """The angles in float32 whatever x's dtype (torch.arange(T).float())."""
    T, Dh = x.shape[-2], x.shape[-1]
    m = torch.arange(T).float() if positions is None else positions.float()
    angles = m[:, None] * 10000 ** (-torch.arange(0, Dh, 2).float() / Dh)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * angles.cos() - odd * angles.sin(),
                        even * angles.sin() + odd * angles.cos()], -1).flatten(-2)


def rope_returns_float32(x, positions=None):
    return apply_rope(x, positions).float()


def rope_no_default(x, positions):
    return apply_rope(x, positions)


def rope_positions_never_none(x, positions=None):
    angles = positions.to(x.dtype)  # AttributeError when positions is None
    return apply_rope(x, angles.long())


def _bias_with(*, reverse=False, low=None, high=None, clip=True, shift=True, absolute=False):
    """A student's lookup with one mistake switched on (defaults: right)."""

    def lookup(table, T, S, max_distance):
        M = max_distance
        i, j = torch.arange(T)[:, None], torch.arange(S)[None, :]
        offsets = i - j if reverse else j - i
        if absolute:
            offsets = offsets.abs()
        if clip:
            offsets = torch.clamp(offsets, -M if low is None else low(M),
                                  M if high is None else high(M))
        return table[:, offsets + M if shift else offsets]

    return lookup


bias_reversed = _named(_bias_with(reverse=True), "bias_reversed")
bias_not_clipped = _named(_bias_with(clip=False), "bias_not_clipped")
bias_clipped_above_only = _named(_bias_with(low=lambda M: -1000), "bias_clipped_above_only")
bias_clip_exclusive = _named(_bias_with(low=lambda M: -M + 1, high=lambda M: M - 1),
                             "bias_clip_exclusive")
bias_clip_high_minus_1 = _named(_bias_with(high=lambda M: M - 1), "bias_clip_high_minus_1")
bias_not_shifted = _named(_bias_with(shift=False), "bias_not_shifted")
bias_distance = _named(_bias_with(absolute=True), "bias_distance")


def bias_heads_last(table, T, S, max_distance):
    return relative_bias(table, T, S, max_distance).permute(1, 2, 0)


def bias_square(table, T, S, max_distance):
    return relative_bias(table, T, T, max_distance)


def bias_keys_down(table, T, S, max_distance):
    return relative_bias(table, T, S, max_distance).transpose(1, 2)


def bias_one_head(table, T, S, max_distance):
    return relative_bias(table, T, S, max_distance)[0]


WRONG = {
    "6.1": [
        (table_sin_cos_swapped, ch06.HINT_SIN_COS_SWAPPED),
        (table_exponent_i, ch06.HINT_EXPONENT_PAIR_INDEX),
        (table_exponent_per_column, ch06.HINT_EXPONENT_PER_COLUMN),
        (table_column_frequencies, ch06.HINT_EXPONENT_PER_COLUMN),
        (table_range_step_doubled, ch06.HINT_EXPONENT_DOUBLED),
        (table_loop_doubled, ch06.HINT_EXPONENT_DOUBLED),
        (table_positive_exponent, ch06.HINT_EXPONENT_SIGN),
        (table_halves, ch06.HINT_HALVES),
        (table_from_1, ch06.HINT_POSITIONS_FROM_1),
        (table_sines_only, ch06.HINT_ONE_FUNCTION),
        (table_transposed, ch06.HINT_TABLE_TRANSPOSED),
        (table_sines, ch06.HINT_TABLE_HALF),
        (table_batched, ch06.HINT_TABLE_EXTRA_DIM),
        (table_float_size, "Sizes must be ints (d // 2, not d / 2)"),
        (table_without_dtype, "keep the dtype argument"),
    ],
    "6.2": [
        (rope_rotate_half, ch06.HINT_ROPE_HALF_SPLIT),
        (rope_rotate_half_interleaved_angles, ch06.HINT_ROPE_MIXED),
        (rope_sign_flipped, ch06.HINT_ROPE_SIGN),
        (rope_from_1, ch06.HINT_ROPE_FROM_1),
        (rope_positions_ignored, ch06.HINT_ROPE_POSITIONS_IGNORED),
        (rope_exponent_i, ch06.HINT_ROPE_EXPONENT_PAIR_INDEX),
        (rope_not_interleaved, ch06.HINT_ROPE_NOT_INTERLEAVED),
        (rope_adds_the_table, ch06.HINT_ROPE_ADDED),
        (rope_sin_cos_swapped, ch06.HINT_ROPE_SIN_COS_SWAPPED),
        (rope_pairs_not_flattened, ch06.HINT_ROPE_NOT_FLAT),
        (rope_no_default, "give it the default positions=None"),
        (rope_positions_never_none, "positions is None unless it is given"),
    ],
    "6.3": [
        (bias_reversed, ch06.HINT_OFFSET_REVERSED),
        (bias_not_clipped, "clip them to [-M, M]"),
        (bias_clipped_above_only, ch06.HINT_CLIP_ONE_SIDE),
        (bias_clip_exclusive, ch06.HINT_CLIP_OFF_BY_ONE),
        (bias_clip_high_minus_1, ch06.HINT_CLIP_OFF_BY_ONE),
        (bias_not_shifted, ch06.HINT_NO_SHIFT),
        (bias_distance, ch06.HINT_ABSOLUTE_OFFSET),
        (bias_heads_last, ch06.HINT_BIAS_HEADS_LAST),
        (bias_square, ch06.HINT_BIAS_KEYS),
        (bias_keys_down, ch06.HINT_BIAS_TRANSPOSED),
        (bias_one_head, ch06.HINT_BIAS_NO_HEADS),
    ],
}

def stub(*args):
    raise NotImplementedError("Task 6.1: write sinusoidal_table")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="06_positional",
    tasks={"6.1": ("sinusoidal_table", 3, 10), "6.2": ("apply_rope", 4, 10),
           "6.3": ("relative_bias", 4, 10)},
    hints=ch06,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=3,
    min_hidden=5,
    public_points=(3, 5),
    forbidden=("coursepkg.positional", "coursepkg.transformer", "coursepkg.checks"),
    package="coursepkg.positional",
    not_finite_hint=ch06.HINT_NOT_FINITE,
    failure_reports=(
        ("6.2", rope_positions_ignored, "Task 6.2 apply_rope: 3/4 points",
         ("  FAIL  [0/1] 4 new tokens at positions 3, 4, 5, 6 (the first 3 are cached): "
          + ch06.HINT_ROPE_POSITIONS_IGNORED,)),
        ("6.3", bias_reversed, "Task 6.3 relative_bias: 0/4 points", ()),
        ("6.2", rope_rotate_half, "Task 6.2 apply_rope: 0/4 points", (ch06.HINT_ROPE_HALF_SPLIT,)),
    ),
    seeded=("6.2", "6.3"),  # a sinusoidal table is a function of its sizes alone
    scalar_inputs=("6.1",),
    wrong_types=(
        ("6.1", lambda T, d, dtype: sinusoidal_table(T, d, dtype).tolist(),
         "expected the table as a torch.Tensor, got list"),
        ("6.1", lambda T, d, dtype: sinusoidal_table(T, d, dtype).numpy(), "got ndarray"),
        ("6.2", lambda x, positions=None: None,
         "expected the rotated x as a torch.Tensor, got NoneType"),
        ("6.2", lambda x, positions=None: (apply_rope(x, positions), x), "got tuple"),
        ("6.3", lambda *a: relative_bias(*a).long(), "got dtype torch.int64"),
        ("6.3", lambda *a: relative_bias(*a).unbind(0), "got tuple"),
    ),
    hidden_type_hints={"6.3": "Return one tensor, (H, T, S)."},
    forged={
        "6.1": lambda good: [{**good, "shape": [48]}, {**good, "dtype": None}],
        "6.2": lambda good: [
            {**good, "shape": [4, 5]}, {**good, "data": ["1"] * 20}, {**good, "dtype": 3},
            {**good, "extra": 1}, {**good, "shape": [5, 4, 1]}, {**good, "data": good["data"][:-1]},
        ],
    },
    forbidden_calls={
        **dict.fromkeys((pos.sinusoidal_encoding, pos.rope_angles, pos.RelativePositionBias.forward,
                         pos.RelativePositionBias.offsets, pos.LearnedPositionalEmbedding.forward),
                        "coursepkg.positional"),
        pos.apply_rope: None, ch06.sinusoidal_table: None, ch06.relative_bias: None,
    },
    allowed_calls=(torch.sin, torch.cos, torch.stack, torch.cat, torch.arange, torch.Tensor.clamp,
                   torch.Tensor.flatten, torch.polar, torch.view_as_complex, F.one_hot,
                   torch.einsum),
)


def _args(task_id, case):
    return checks.get_task(task_id).build_args(case.args)


def _offsets_beyond(case):
    """(below -M, above M): whether some offset j - i of the case needs clipping on each side."""
    a = case.args
    return a["T"] - 1 > a["M"], a["S"] - 1 > a["M"]


# ---------------------------------------------------------------------------------------------
# The registry and the cases
# ---------------------------------------------------------------------------------------------


def test_the_edge_cases_are_there():
    table = checks.get_task("6.1")
    assert any(c.args["T"] == 1 for c in hidden_cases(table))
    assert any(c.args["d"] == 2 for c in hidden_cases(table))
    assert any((c.args["d"] // 2) % 2 == 1 for c in hidden_cases(table))
    rope = checks.get_task("6.2")
    shapes = [c.args["shape"] for c in hidden_cases(rope)]
    assert any(s[-2] == 1 for s in shapes) and any(s[-1] == 2 for s in shapes)
    assert {len(s) for s in (c.args["shape"] for c in all_cases(rope))} == {2, 3, 4}
    assert {c.args["layout"] for c in hidden_cases(rope)} == {"contiguous", "heads view"}
    bias = checks.get_task("6.3")
    assert any(c.args["T"] == c.args["S"] == 1 for c in hidden_cases(bias))
    assert any(c.args["H"] == 1 for c in hidden_cases(bias))


def test_the_public_cases_let_the_mistakes_show():
    """Enough frequencies for a wrong exponent to show; enough pairs for the half-split
    pairing; given positions that do not start at 0; offsets beyond M on both sides, queries
    and keys of different numbers."""
    assert all(c.args["d"] >= 6 and c.args["T"] >= 3 for c in checks.get_task("6.1").public_cases)
    rope = checks.get_task("6.2").public_cases
    assert all(c.args["shape"][-1] >= 4 and c.args["shape"][-2] >= 4 for c in rope)
    given = [c.args["positions"] for c in rope if c.args["positions"] is not None]
    assert given and all(p[0] != 0 for p in given)
    assert any(c.args["positions"] is None for c in rope)
    bias = checks.get_task("6.3").public_cases
    assert any(all(_offsets_beyond(c)) for c in bias)
    assert any(c.args["T"] > c.args["S"] for c in bias) and any(c.args["T"] < c.args["S"]
                                                                for c in bias)
    assert any(not any(_offsets_beyond(c)) for c in bias)
    assert all(c.args["H"] > 1 for c in bias)
    # no shape of the right values is ambiguous: (T, S, H) and (H, S, T) differ from (H, T, S)
    # wherever S != T
    for c in bias:
        H, T, S = c.args["H"], c.args["T"], c.args["S"]
        if S != T:
            assert len({(H, T, S), (T, S, H), (H, S, T)}) == 3, c.name


def test_the_float64_cases_are_wide_enough_for_float32_rounding_to_show():
    """sin of float32 angles is off by more than float64's tolerance in the hidden float64
    cases (the largest angles there are tens of radians in a slow pair)."""
    for task_id, func in (("6.1", table_in_float32), ("6.2", rope_in_float32)):
        task = checks.get_task(task_id)
        (case,) = [c for c in hidden_cases(task) if c.args["dtype"] == "float64"]
        got = func(*task.build_args(case.args))
        expected = task.reference(*task.build_args(case.args))
        assert not torch.allclose(got, expected, rtol=1e-7, atol=1e-7)
        torch.testing.assert_close(got.float(), expected.float())


def test_inputs_are_reproducible_and_fresh():
    for task_id, case_index in (("6.2", 2), ("6.3", 0)):
        task = checks.get_task(task_id)
        case = task.cases[case_index]
        first, second = task.build_args(case.args), task.build_args(case.args)
        assert torch.equal(first[0], second[0]) and first[0] is not second[0]
        float64 = task.build_args({**case.args, "dtype": "float64"})
        assert float64[0].dtype == torch.float64
        torch.testing.assert_close(float64[0].float(), first[0])
    x, positions = _args("6.2", checks.get_task("6.2").cases[3])
    assert positions.dtype == torch.long and positions.tolist() == [3, 4, 5, 6]
    assert _args("6.1", hidden_cases(checks.get_task("6.1"))[0])[2] == torch.float64


def test_the_heads_view_is_really_one():
    for case in all_cases(checks.get_task("6.2")):
        x = _args("6.2", case)[0]
        assert x.is_contiguous() == (case.args["layout"] == "contiguous"), case.name
        assert list(x.shape) == case.args["shape"]


def test_references_agree_with_the_formulas():
    """The references against the definitions written out with Python floats."""
    for case in all_cases(checks.get_task("6.1")):
        T, d, dtype = _args("6.1", case)
        table = ch06.sinusoidal_table(T, d, dtype)
        assert table.dtype == dtype and table.shape == (T, d)
        for p in range(T):
            for i in range(d // 2):
                w = 10000 ** (-2 * i / d)
                assert table[p, 2 * i].item() == pytest.approx(math.sin(p * w), abs=1e-6)
                assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(p * w), abs=1e-6)
    for case in all_cases(checks.get_task("6.2")):
        args = _args("6.2", case)
        x = args[0]
        T, Dh = x.shape[-2], x.shape[-1]
        m = args[1].tolist() if len(args) > 1 else list(range(T))
        out = pos.apply_rope(*args)
        flat_x, flat_out = x.reshape(-1, T, Dh), out.reshape(-1, T, Dh)
        for t in range(T):
            for i in range(Dh // 2):
                a = m[t] * 10000 ** (-2 * i / Dh)
                e, o = flat_x[:, t, 2 * i].double(), flat_x[:, t, 2 * i + 1].double()
                torch.testing.assert_close(flat_out[:, t, 2 * i].double(),
                                           e * math.cos(a) - o * math.sin(a),
                                           atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(flat_out[:, t, 2 * i + 1].double(),
                                           e * math.sin(a) + o * math.cos(a),
                                           atol=1e-5, rtol=1e-5)
    for case in all_cases(checks.get_task("6.3")):
        table, T, S, M = _args("6.3", case)
        bias = ch06.relative_bias(table, T, S, M)
        assert bias.shape == (table.shape[0], T, S) and not bias.requires_grad
        for i in range(T):
            for j in range(S):
                assert torch.equal(bias[:, i, j], table[:, min(max(j - i, -M), M) + M])


# ---------------------------------------------------------------------------------------------
# Correct implementations: full marks
# ---------------------------------------------------------------------------------------------


def test_float32_angles_are_close_enough_for_the_float32_cases():
    for task_id, func in (("6.1", table_in_float32), ("6.2", rope_in_float32)):
        result = run_task(task_id, func, hidden=True)
        failed = [case.name for case in result.cases if case.status != "passed"]
        assert failed == ["hidden: float64"], (task_id, failed)


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


def test_sine_cosine_and_position_mistakes_show_in_every_case():
    for func in (table_sin_cos_swapped, table_from_1, table_sines_only):
        assert run_task("6.1", func, hidden=True).points == 0
    result = run_task("6.2", rope_sign_flipped, hidden=True)
    passed = {case.name for case in result.cases if case.status == "passed"}
    assert passed == {"hidden: one position (T = 1)"}  # position 0 is not rotated at all


def test_exponent_mistakes_hide_only_where_there_is_one_frequency_or_one_position():
    """With d = 2 there is one pair, i = 0, and every exponent gives w_0 = 1; with T = 1 every
    angle is 0."""
    for func in (table_exponent_i, table_range_step_doubled, table_positive_exponent):
        result = run_task("6.1", func, hidden=True)
        passed = {case.name for case in result.cases if case.status == "passed"}
        assert passed == {"hidden: one position (T = 1)", "hidden: one frequency (d = 2)"}


def test_the_positive_exponent_is_named_despite_float32_rounding_of_huge_angles():
    """p * 10000^(2i/d) reaches thousands of radians, where float32 rounding moves sin by
    more than the usual tolerance; the mistake is still named, and the right table is not
    taken for it."""
    result = run_task("6.1", table_positive_exponent, hidden=True)
    for case in result.cases:
        if case.status != "passed":
            assert case.message.startswith(ch06.HINT_EXPONENT_SIGN), case.name
    task = checks.get_task("6.1")
    for case in all_cases(task):
        plain = task.to_plain(sinusoidal_table(*task.build_args(case.args)))
        T, d, _ = task.build_args(case.args)
        assert not ch06._growing_frequencies(plain, T, d, case.args["dtype"]) or d == 2 or T == 1


def test_pairing_mistakes_hide_only_where_there_is_one_pair_or_one_position():
    """With one pair every pairing is the same; at position 0 nothing turns, but features
    put back in the wrong order still show."""
    for func in (rope_rotate_half, rope_rotate_half_interleaved_angles):
        result = run_task("6.2", func, hidden=True)
        passed = {case.name for case in result.cases if case.status == "passed"}
        assert passed == {"hidden: one position (T = 1)", "hidden: one pair (Dh = 2)"}, func
    result = run_task("6.2", rope_not_interleaved, hidden=True)
    assert {case.name for case in result.cases if case.status == "passed"} == {
        "hidden: one pair (Dh = 2)"}


def test_the_position_mistakes_show_only_where_they_matter():
    """Counting from 1 costs the cases without positions; ignoring the positions costs the
    cases with them."""
    task = checks.get_task("6.2")
    given = [case.args["positions"] is not None for case in all_cases(task)]
    result = run_task("6.2", rope_from_1, hidden=True)
    assert [case.status == "passed" for case in result.cases] == given
    result = run_task("6.2", rope_positions_ignored, hidden=True)
    assert [case.status == "passed" for case in result.cases] == [not g for g in given]
    for case in result.cases:
        if case.status != "passed":
            assert case.message.startswith(ch06.HINT_ROPE_POSITIONS_IGNORED)


def test_the_clipping_mistakes_show_only_where_offsets_exceed_m():
    """Without clipping an index past the table raises IndexError (named by the task's hint)
    and a negative one wraps round (named by the values); where no offset exceeds M the
    unclipped lookup is right."""
    task = checks.get_task("6.3")
    result = run_task("6.3", bias_not_clipped, hidden=True)
    for case, outcome in zip(all_cases(task), result.cases, strict=True):
        below, above = _offsets_beyond(case)
        if not (below or above):
            assert outcome.status == "passed", case.name
        elif above:
            assert outcome.status == "error", case.name
            assert "clip them to [-M, M]" in outcome.message
        else:
            assert outcome.status in ("failed", "error"), case.name
    result = run_task("6.3", bias_clipped_above_only, hidden=True)
    for case, outcome in zip(all_cases(task), result.cases, strict=True):
        assert (outcome.status == "passed") == (not _offsets_beyond(case)[0]), case.name
    result = run_task("6.3", bias_clip_exclusive, hidden=True)
    for case, outcome in zip(all_cases(task), result.cases, strict=True):
        T, S, M = case.args["T"], case.args["S"], case.args["M"]
        touches = T - 1 >= M or S - 1 >= M  # some offset reaches +-M
        assert (outcome.status == "passed") == (not touches), case.name


def test_the_heads_last_mistake_is_named_even_when_the_shape_is_right():
    """(T, S, H) is named from its shape, and from its values where H = T = S."""
    result = run_task("6.3", bias_heads_last)
    assert all(case.message.startswith(ch06.HINT_BIAS_HEADS_LAST) for case in result.cases)
    square = [c for c in checks.get_task("6.3").public_cases
              if c.args["H"] == c.args["T"] == c.args["S"]]
    assert square, "a public case with H = T = S"


def test_precision_and_dtype_slips_are_named_in_the_float64_case():
    for task_id, func, hint in [
        ("6.1", table_in_float32, ch06.HINT_PRECISION),
        ("6.1", table_ignores_dtype, ch06.HINT_TABLE_DTYPE),
        ("6.2", rope_in_float32, ch06.HINT_PRECISION),
        ("6.2", rope_returns_float32, ch06.HINT_DTYPE),
        ("6.3", lambda *args: relative_bias(*args).float(), ch06.HINT_DTYPE),
    ]:
        result = run_task(task_id, func, hidden=True)
        failed = [case for case in result.cases if case.status != "passed"]
        assert [case.name for case in failed] == ["hidden: float64"], (task_id, hint)
        assert failed[0].message == hint


def test_a_table_rounded_to_float32_and_back_is_within_float64_tolerance():
    """A lookup computes nothing: a float64 table rounded to float32 and back stays within
    float64's tolerance, so only a result left in float32 is a mistake (its dtype)."""

    def rounded(table, *rest):
        return relative_bias(table.float(), *rest).to(table.dtype)

    assert run_task("6.3", rounded, hidden=True).status == "passed"


def test_a_mistake_computed_in_float32_is_still_named_in_the_float64_case():
    def halves_in_float32(T, d, dtype=torch.float32):
        return table_halves(T, d).to(dtype)

    result = run_task("6.1", halves_in_float32, hidden=True)
    (case,) = [c for c in result.cases if c.name == "hidden: float64"]
    assert case.message == ch06.HINT_HALVES


def test_public_failures_show_the_specifics():
    result = run_task("6.1", table_from_1)
    detail = result.cases[0].message.removeprefix(ch06.HINT_POSITIONS_FROM_1).strip()
    assert detail.startswith("table[") and "expected" in detail and "values differ)." in detail
    result = run_task("6.2", rope_pairs_not_flattened)
    assert result.cases[0].message.endswith("Expected out of shape (5, 4), got (5, 2, 2).")
    result = run_task("6.3", bias_square)
    assert result.cases[1].message.endswith("Expected bias of shape (3, 4, 7), got (3, 4, 4).")


def test_a_crash_on_an_edge_case_costs_only_that_case():
    def no_single_position(x, positions=None):
        if x.shape[-2] == 1:
            raise IndexError("index 1 is out of bounds")
        return apply_rope(x, positions)

    result = run_task("6.2", no_single_position, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == ["hidden: one position (T = 1)"]
    assert bad[0].status == "error" and bad[0].message.startswith("raised IndexError.")


def test_exceptions_become_errors_with_hints():
    result = run_task("6.2", rope_no_default)
    statuses = [case.status for case in result.cases]
    assert statuses == ["error", "error", "error", "passed"]
    assert "default positions=None" in result.cases[0].message
    result = run_task("6.2", rope_positions_never_none)
    assert result.cases[0].message.startswith("raised AttributeError: 'NoneType' object has no "
                                              "attribute 'to'")
    assert "use the positions 0 .. T-1 then" in result.cases[0].message
    result = run_task("6.3", bias_not_clipped)
    assert result.cases[0].message.startswith("raised IndexError: index 5 is out of bounds")
    assert all("\n" not in case.message for case in result.cases)


def test_a_tensor_that_requires_grad_or_is_a_view_is_fine():
    def with_grad(x, positions=None):
        return apply_rope(x.clone().requires_grad_(), positions)

    def as_view(table, T, S, max_distance):  # a strided view of a larger tensor
        both = torch.cat([relative_bias(table, T, S, max_distance)] * 2, dim=-1)
        return both[..., :S]

    assert run_task("6.2", with_grad, hidden=True).status == "passed"
    assert run_task("6.3", as_view, hidden=True).status == "passed"


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


def test_check_a_function_that_raises(capsys):
    out = check_output(capsys, "6.3", bias_not_clipped)
    assert "ERROR [0/1]" in out and "raised IndexError: index 5 is out of bounds" in out
