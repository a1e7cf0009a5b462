"""Tests of the checks of chapter 6 (coursepkg.checks.ch06_positional): the checks are graded
code too.

Every task must give full marks (public and hidden) to the reference and to correct
implementations written differently here, take points from plausible wrong implementations with
the hint that names their mistake, and never leak hidden data. ``check`` must print and never
raise, whatever the student hands it.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from checks_support import AlwaysEqual, check_output, leaky, strip_raised

from coursepkg import checks
from coursepkg import positional as pos
from coursepkg.checks import ch06_positional as ch06
from coursepkg.checks import core

TASK_IDS = ("6.1", "6.2", "6.3")
FUNC_NAMES = ("sinusoidal_table", "apply_rope", "relative_bias")


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

WRONG_PARAMS = [
    pytest.param(task_id, func, hint, id=f"{task_id}-{func.__name__}")
    for task_id, wrongs in WRONG.items()
    for func, hint in wrongs
]


def stub(*args):
    raise NotImplementedError("Task 6.1: write sinusoidal_table")


def _args(task_id, case):
    return checks.get_task(task_id).build_args(case.args)


def _offsets_beyond(case):
    """(below -M, above M): whether some offset j - i of the case needs clipping on each side."""
    a = case.args
    return a["T"] - 1 > a["M"], a["S"] - 1 > a["M"]


# ---------------------------------------------------------------------------------------------
# The registry and the cases
# ---------------------------------------------------------------------------------------------


def test_chapter_6_tasks_are_registered_in_order():
    tasks = checks.tasks_for("06_positional")
    assert [task.id for task in tasks] == list(TASK_IDS)
    assert [task.func_name for task in tasks] == list(FUNC_NAMES)
    assert checks.task_by_func_name("apply_rope", "06_positional") is checks.get_task("6.2")
    assert sum(task.max_points() for task in tasks) == 30


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_every_task_has_public_and_hidden_cases_worth_points(task_id):
    task = checks.get_task(task_id)
    assert len(task.public_cases) >= 3
    assert len(task.hidden_cases) >= 5
    assert all(case.points > 0 for case in task.cases)
    assert 3 <= task.max_points(public_only=True) <= 5
    assert task.max_points() == sum(case.points for case in task.cases) == 10
    assert len({case.name for case in task.cases}) == len(task.cases)
    assert all(case.name.startswith("hidden:") for case in task.hidden_cases)
    for name in ("coursepkg.positional", "coursepkg.transformer", "coursepkg.checks"):
        assert name in task.forbidden


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_every_case_args_are_plain_json(task_id):
    task = checks.get_task(task_id)
    for case in task.cases:
        assert checks.plain_problem(case.args) is None, case.name
        assert json.loads(json.dumps(case.args)) == case.args, case.name
        expected = task.to_plain(task.reference(*task.build_args(case.args)))
        assert checks.plain_problem(expected) is None
        assert json.loads(json.dumps(expected)) == expected


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_hidden_cases_differ_from_the_public_ones(task_id):
    task = checks.get_task(task_id)
    public = [case.args for case in task.public_cases]
    for case in task.hidden_cases:
        assert case.args not in public
        if "seed" in case.args:
            assert case.args["seed"] not in {args["seed"] for args in public}
    assert {case.args["dtype"] for case in task.hidden_cases} == {"float32", "float64"}
    assert all(case.args["dtype"] == "float32" for case in task.public_cases)


def test_the_edge_cases_are_there():
    table = checks.get_task("6.1")
    assert any(c.args["T"] == 1 for c in table.hidden_cases)
    assert any(c.args["d"] == 2 for c in table.hidden_cases)
    assert any((c.args["d"] // 2) % 2 == 1 for c in table.hidden_cases)
    rope = checks.get_task("6.2")
    shapes = [c.args["shape"] for c in rope.hidden_cases]
    assert any(s[-2] == 1 for s in shapes) and any(s[-1] == 2 for s in shapes)
    assert {len(s) for s in (c.args["shape"] for c in rope.cases)} == {2, 3, 4}
    assert {c.args["layout"] for c in rope.hidden_cases} == {"contiguous", "heads view"}
    bias = checks.get_task("6.3")
    assert any(c.args["T"] == c.args["S"] == 1 for c in bias.hidden_cases)
    assert any(c.args["H"] == 1 for c in bias.hidden_cases)


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
        (case,) = [c for c in task.hidden_cases if c.args["dtype"] == "float64"]
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
    assert _args("6.1", checks.get_task("6.1").cases[3])[2] == torch.float64


def test_the_heads_view_is_really_one():
    for case in checks.get_task("6.2").cases:
        x = _args("6.2", case)[0]
        assert x.is_contiguous() == (case.args["layout"] == "contiguous"), case.name
        assert list(x.shape) == case.args["shape"]


def test_references_agree_with_the_formulas():
    """The references against the definitions written out with Python floats."""
    for case in checks.get_task("6.1").cases:
        T, d, dtype = _args("6.1", case)
        table = ch06.sinusoidal_table(T, d, dtype)
        assert table.dtype == dtype and table.shape == (T, d)
        for p in range(T):
            for i in range(d // 2):
                w = 10000 ** (-2 * i / d)
                assert table[p, 2 * i].item() == pytest.approx(math.sin(p * w), abs=1e-6)
                assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(p * w), abs=1e-6)
    for case in checks.get_task("6.2").cases:
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
    for case in checks.get_task("6.3").cases:
        table, T, S, M = _args("6.3", case)
        bias = ch06.relative_bias(table, T, S, M)
        assert bias.shape == (table.shape[0], T, S) and not bias.requires_grad
        for i in range(T):
            for j in range(S):
                assert torch.equal(bias[:, i, j], table[:, min(max(j - i, -M), M) + M])


# ---------------------------------------------------------------------------------------------
# Correct implementations: full marks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_correct_implementations_get_full_marks(task_id):
    for func in CORRECT[task_id]:
        result = checks.run_task(task_id, func, hidden=True)
        assert result.status == "passed", (func.__name__, [c.message for c in result.cases])
        assert result.points == result.max_points == checks.get_task(task_id).max_points()
        assert all(case.message == "" for case in result.cases)


def test_float32_angles_are_close_enough_for_the_float32_cases():
    for task_id, func in (("6.1", table_in_float32), ("6.2", rope_in_float32)):
        result = checks.run_task(task_id, func, hidden=True)
        failed = [case.name for case in result.cases if case.status != "passed"]
        assert failed == ["hidden: float64"], (task_id, failed)


def test_public_run_is_public_only():
    result = checks.run_task("6.2", apply_rope)
    assert not any(case.hidden for case in result.cases)
    assert result.max_points == checks.get_task("6.2").max_points(public_only=True)


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("task_id", "func", "hint"), WRONG_PARAMS)
def test_wrong_implementation_loses_points_with_its_hint(task_id, func, hint):
    public = checks.run_task(task_id, func)
    assert public.points < public.max_points
    assert public.status in ("partial", "failed")
    messages = [case.message for case in public.cases if case.status != "passed"]
    assert any(hint in message for message in messages), messages
    everything = checks.run_task(task_id, func, hidden=True)
    assert everything.points < everything.max_points


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_at_least_three_wrong_implementations_per_task(task_id):
    assert len(WRONG[task_id]) >= 3
    assert len({hint for _, hint in WRONG[task_id]}) >= 3


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_wrong_implementations_are_told_apart(task_id):
    """A failed public case names the function's own mistake, unless its output there is
    identical to that of another known mistake, or the case's shapes make it crash (a hint for
    the error), or they expose it (a shape hint)."""
    task = checks.get_task(task_id)

    def output(func, case):
        try:
            return json.dumps(checks.student_output(task, case, func))
        except Exception as exc:
            return type(exc).__name__

    for func, hint in WRONG[task_id]:
        for case, result in zip(task.public_cases, checks.run_task(task_id, func).cases,
                                strict=True):
            if result.status == "passed" or hint in result.message:
                continue
            if result.status == "error" or "of shape" in result.message:
                continue
            twins = [other for other, other_hint in WRONG[task_id]
                     if other_hint in result.message and output(other, case) == output(func, case)]
            assert twins, (func.__name__, case.name, result.message)


def test_every_hidden_failure_of_a_wrong_implementation_names_a_mistake():
    """In hidden cases too a wrong implementation gets a hint naming a mistake, never the
    generic one (a twin's hint where the case cannot tell them apart)."""
    generic = {ch06.HINT_TABLE_GENERIC, ch06.HINT_ROPE_GENERIC, ch06.HINT_BIAS_GENERIC}
    for task_id, wrongs in WRONG.items():
        for func, _ in wrongs:
            for case in checks.run_task(task_id, func, hidden=True).cases:
                assert case.status == "passed" or not any(
                    case.message.startswith(g) for g in generic), (func.__name__, case.name)


def test_sine_cosine_and_position_mistakes_show_in_every_case():
    for func in (table_sin_cos_swapped, table_from_1, table_sines_only):
        assert checks.run_task("6.1", func, hidden=True).points == 0
    result = checks.run_task("6.2", rope_sign_flipped, hidden=True)
    passed = {case.name for case in result.cases if case.status == "passed"}
    assert passed == {"hidden: one position (T = 1)"}  # position 0 is not rotated at all


def test_exponent_mistakes_hide_only_where_there_is_one_frequency_or_one_position():
    """With d = 2 there is one pair, i = 0, and every exponent gives w_0 = 1; with T = 1 every
    angle is 0."""
    for func in (table_exponent_i, table_range_step_doubled, table_positive_exponent):
        result = checks.run_task("6.1", func, hidden=True)
        passed = {case.name for case in result.cases if case.status == "passed"}
        assert passed == {"hidden: one position (T = 1)", "hidden: one frequency (d = 2)"}


def test_the_positive_exponent_is_named_despite_float32_rounding_of_huge_angles():
    """p * 10000^(2i/d) reaches thousands of radians, where float32 rounding moves sin by
    more than the usual tolerance; the mistake is still named, and the right table is not
    taken for it."""
    result = checks.run_task("6.1", table_positive_exponent, hidden=True)
    for case in result.cases:
        if case.status != "passed":
            assert case.message.startswith(ch06.HINT_EXPONENT_SIGN), case.name
    task = checks.get_task("6.1")
    for case in task.cases:
        plain = task.to_plain(sinusoidal_table(*task.build_args(case.args)))
        T, d, _ = task.build_args(case.args)
        assert not ch06._growing_frequencies(plain, T, d, case.args["dtype"]) or d == 2 or T == 1


def test_pairing_mistakes_hide_only_where_there_is_one_pair_or_one_position():
    """With one pair every pairing is the same; at position 0 nothing turns, but features
    put back in the wrong order still show."""
    for func in (rope_rotate_half, rope_rotate_half_interleaved_angles):
        result = checks.run_task("6.2", func, hidden=True)
        passed = {case.name for case in result.cases if case.status == "passed"}
        assert passed == {"hidden: one position (T = 1)", "hidden: one pair (Dh = 2)"}, func
    result = checks.run_task("6.2", rope_not_interleaved, hidden=True)
    assert {case.name for case in result.cases if case.status == "passed"} == {
        "hidden: one pair (Dh = 2)"}


def test_the_position_mistakes_show_only_where_they_matter():
    """Counting from 1 costs the cases without positions; ignoring the positions costs the
    cases with them."""
    task = checks.get_task("6.2")
    given = [case.args["positions"] is not None for case in task.cases]
    result = checks.run_task("6.2", rope_from_1, hidden=True)
    assert [case.status == "passed" for case in result.cases] == given
    result = checks.run_task("6.2", rope_positions_ignored, hidden=True)
    assert [case.status == "passed" for case in result.cases] == [not g for g in given]
    for case in result.cases:
        if case.status != "passed":
            assert case.message.startswith(ch06.HINT_ROPE_POSITIONS_IGNORED)


def test_the_clipping_mistakes_show_only_where_offsets_exceed_m():
    """Without clipping an index past the table raises IndexError (named by the task's hint)
    and a negative one wraps round (named by the values); where no offset exceeds M the
    unclipped lookup is right."""
    task = checks.get_task("6.3")
    result = checks.run_task("6.3", bias_not_clipped, hidden=True)
    for case, outcome in zip(task.cases, result.cases, strict=True):
        below, above = _offsets_beyond(case)
        if not (below or above):
            assert outcome.status == "passed", case.name
        elif above:
            assert outcome.status == "error", case.name
            assert "clip them to [-M, M]" in outcome.message
        else:
            assert outcome.status in ("failed", "error"), case.name
    result = checks.run_task("6.3", bias_clipped_above_only, hidden=True)
    for case, outcome in zip(task.cases, result.cases, strict=True):
        assert (outcome.status == "passed") == (not _offsets_beyond(case)[0]), case.name
    result = checks.run_task("6.3", bias_clip_exclusive, hidden=True)
    for case, outcome in zip(task.cases, result.cases, strict=True):
        T, S, M = case.args["T"], case.args["S"], case.args["M"]
        touches = T - 1 >= M or S - 1 >= M  # some offset reaches +-M
        assert (outcome.status == "passed") == (not touches), case.name


def test_the_heads_last_mistake_is_named_even_when_the_shape_is_right():
    """(T, S, H) is named from its shape, and from its values where H = T = S."""
    result = checks.run_task("6.3", bias_heads_last)
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
        result = checks.run_task(task_id, func, hidden=True)
        failed = [case for case in result.cases if case.status != "passed"]
        assert [case.name for case in failed] == ["hidden: float64"], (task_id, hint)
        assert failed[0].message == hint


def test_a_table_rounded_to_float32_and_back_is_within_float64_tolerance():
    """A lookup computes nothing: a float64 table rounded to float32 and back stays within
    float64's tolerance, so only a result left in float32 is a mistake (its dtype)."""

    def rounded(table, *rest):
        return relative_bias(table.float(), *rest).to(table.dtype)

    assert checks.run_task("6.3", rounded, hidden=True).status == "passed"


def test_a_mistake_computed_in_float32_is_still_named_in_the_float64_case():
    def halves_in_float32(T, d, dtype=torch.float32):
        return table_halves(T, d).to(dtype)

    result = checks.run_task("6.1", halves_in_float32, hidden=True)
    (case,) = [c for c in result.cases if c.name == "hidden: float64"]
    assert case.message == ch06.HINT_HALVES


def test_public_failures_show_the_specifics():
    result = checks.run_task("6.1", table_from_1)
    detail = result.cases[0].message.removeprefix(ch06.HINT_POSITIONS_FROM_1).strip()
    assert detail.startswith("table[") and "expected" in detail and "values differ)." in detail
    result = checks.run_task("6.2", rope_pairs_not_flattened)
    assert result.cases[0].message.endswith("Expected out of shape (5, 4), got (5, 2, 2).")
    result = checks.run_task("6.3", bias_square)
    assert result.cases[1].message.endswith("Expected bias of shape (3, 4, 7), got (3, 4, 4).")


def test_a_crash_on_an_edge_case_costs_only_that_case():
    def no_single_position(x, positions=None):
        if x.shape[-2] == 1:
            raise IndexError("index 1 is out of bounds")
        return apply_rope(x, positions)

    result = checks.run_task("6.2", no_single_position, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == ["hidden: one position (T = 1)"]
    assert bad[0].status == "error" and bad[0].message.startswith("raised IndexError.")


def test_exceptions_become_errors_with_hints():
    result = checks.run_task("6.2", rope_no_default)
    statuses = [case.status for case in result.cases]
    assert statuses == ["error", "error", "error", "passed"]
    assert "default positions=None" in result.cases[0].message
    result = checks.run_task("6.2", rope_positions_never_none)
    assert result.cases[0].message.startswith("raised AttributeError: 'NoneType' object has no "
                                              "attribute 'to'")
    assert "use torch.arange(T) then" in result.cases[0].message
    result = checks.run_task("6.3", bias_not_clipped)
    assert result.cases[0].message.startswith("raised IndexError: index 5 is out of bounds")
    assert all("\n" not in case.message for case in result.cases)


@pytest.mark.parametrize("exc", [SystemExit(3), RecursionError("deep"), MemoryError()])
def test_any_exception_from_student_code_is_an_error(exc):
    def raises(*args):
        raise exc

    result = checks.run_task("6.3", raises, hidden=True)
    assert {case.status for case in result.cases} == {"error"}
    assert result.points == 0 and result.status == "failed"


def test_stub_is_not_attempted():
    for task_id in TASK_IDS:
        result = checks.run_task(task_id, stub, hidden=True)
        assert result.status == "not attempted"
        assert result.points == 0
        assert {case.status for case in result.cases} == {"not attempted"}


@pytest.mark.parametrize(
    ("task_id", "func", "expected"),
    [
        ("6.1", lambda T, d, dtype: sinusoidal_table(T, d, dtype).tolist(),
         "expected the table as a torch.Tensor, got list"),
        ("6.1", lambda T, d, dtype: sinusoidal_table(T, d, dtype).numpy(), "got ndarray"),
        ("6.2", lambda x, positions=None: None,
         "expected the rotated x as a torch.Tensor, got NoneType"),
        ("6.2", lambda x, positions=None: (apply_rope(x, positions), x), "got tuple"),
        ("6.3", lambda *a: relative_bias(*a).long(), "got dtype torch.int64"),
        ("6.3", lambda *a: relative_bias(*a).unbind(0), "got tuple"),
    ],
)
def test_wrong_types_fail_and_say_what_was_expected(task_id, func, expected):
    result = checks.run_task(task_id, func)
    assert {case.status for case in result.cases} == {"failed"}
    assert result.points == 0
    assert expected in result.cases[0].message, result.cases[0].message


def test_wrong_types_in_hidden_cases_get_the_tasks_hint():
    result = checks.run_task("6.3", lambda *a: None, hidden=True)
    hidden = [case for case in result.cases if case.hidden]
    assert {case.message for case in hidden} == {"Return one tensor, (H, T, S)."}


def test_nan_and_inf_never_pass():
    for value in (math.nan, math.inf):
        for task_id, func in (("6.1", sinusoidal_table), ("6.2", apply_rope),
                              ("6.3", relative_bias)):
            def returns(*args, value=value, func=func):
                return torch.full_like(func(*args), value)

            result = checks.run_task(task_id, returns, hidden=True)
            assert result.points == 0
            assert ch06.HINT_NOT_FINITE in result.cases[0].message


def test_a_tensor_that_requires_grad_or_is_a_view_is_fine():
    def with_grad(x, positions=None):
        return apply_rope(x.clone().requires_grad_(), positions)

    def as_view(table, T, S, max_distance):  # a strided view of a larger tensor
        both = torch.cat([relative_bias(table, T, S, max_distance)] * 2, dim=-1)
        return both[..., :S]

    assert checks.run_task("6.2", with_grad, hidden=True).status == "passed"
    assert checks.run_task("6.3", as_view, hidden=True).status == "passed"


def test_a_function_that_mutates_its_inputs_cannot_change_the_expected_value():
    def mutating_rope(x, positions=None):
        out = apply_rope(x, positions).clone()
        x.zero_()
        if positions is not None:
            positions.zero_()
        return out

    def mutating_bias(table, T, S, max_distance):
        out = relative_bias(table, T, S, max_distance).clone()
        table.fill_(3.0)
        return out

    assert checks.run_task("6.2", mutating_rope, hidden=True).status == "passed"
    assert checks.run_task("6.3", mutating_bias, hidden=True).status == "passed"


def test_objects_that_claim_equality_do_not_pass():
    for task_id in TASK_IDS:
        result = checks.run_task(task_id, lambda *args: AlwaysEqual(), hidden=True)
        assert result.points == 0


def test_the_forbidden_calls_resolve_to_real_objects():
    from coursepkg.grading.worker import Tripwire

    for task_id in TASK_IDS:
        tripwire = Tripwire(checks.get_task(task_id))
        assert "coursepkg.positional" in tripwire.prefixes
        for forbidden in (pos.sinusoidal_encoding, pos.apply_rope, pos.rope_angles,
                          pos.RelativePositionBias.forward, pos.RelativePositionBias.offsets,
                          pos.LearnedPositionalEmbedding.forward):
            assert tripwire.forbidden_callable(forbidden) is not None, forbidden
        for allowed in (torch.sin, torch.cos, torch.stack, torch.cat, torch.arange,
                        torch.Tensor.clamp, torch.Tensor.flatten, torch.polar,
                        torch.view_as_complex, F.one_hot, torch.einsum):
            assert tripwire.forbidden_callable(allowed) is None, allowed
    assert Tripwire(checks.get_task("6.1")).forbidden_callable(ch06.sinusoidal_table)
    assert Tripwire(checks.get_task("6.3")).forbidden_callable(ch06.relative_bias)


# ---------------------------------------------------------------------------------------------
# Hidden cases never leak their data
# ---------------------------------------------------------------------------------------------


def _allowed_hidden_messages(task):
    hints = {value for name, value in vars(ch06).items() if name.startswith("HINT_")}
    hints |= set(task.error_hints.values()) | set(core._DEFAULT_ERROR_HINTS.values())
    hints.add(core._UNKNOWN_ERROR_HINT)
    hints |= {
        "The function still raises NotImplementedError.",
        "The function returned a value of the wrong type (see the public tests).",
        "The returned value does not have the expected form.",
        "The result is not the expected one: re-read the task's definition.",
    }
    return hints


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_hidden_messages_are_hints_only(task_id):
    task = checks.get_task(task_id)
    allowed = _allowed_hidden_messages(task)
    funcs = [func for func, _ in WRONG[task_id]] + [stub, leaky, lambda *a: AlwaysEqual()]
    funcs += [lambda *a: [1, 2], lambda *a: None]
    for func in funcs:
        result = checks.run_task(task_id, func, hidden=True)
        for case_result, case in zip(result.cases, task.cases, strict=True):
            if not case.hidden or case_result.status == "passed":
                continue
            message = case_result.message
            assert strip_raised(message) in allowed | {""}, (func, message)
            assert "expected" not in message.lower() or message in allowed
            assert json.dumps(case.args) not in message


# ---------------------------------------------------------------------------------------------
# The split used by the grader: student half, JSON, trusted half
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_student_half_and_trusted_half_through_json_equal_evaluate_case(task_id):
    task = checks.get_task(task_id)
    for func in [CORRECT[task_id][-1]] + [func for func, _ in WRONG[task_id][:4]]:
        for case in task.cases:
            direct = checks.evaluate_case(task, case, func)
            try:
                plain = checks.student_output(task, case, func)
            except Exception as exc:
                remote = checks.exception_result(task, case, checks.exception_name(exc), str(exc))
            else:
                remote = checks.grade_output(
                    task, case, json.loads(json.dumps(plain, allow_nan=True)))
            assert remote == direct


def test_grade_output_rejects_forged_plain_values():
    task = checks.get_task("6.2")
    case = task.cases[0]
    good = checks.student_output(task, case, apply_rope)
    forged = [
        None, 3.5, "text", [good], {"a": 1}, {**good, "shape": [4, 5]},
        {**good, "data": ["1"] * 20}, {**good, "dtype": 3}, {**good, "extra": 1},
        {**good, "shape": [5, 4, 1]}, {**good, "data": good["data"][:-1]},
    ]
    for value in forged:
        result = checks.grade_output(task, case, value)
        assert result.status == "failed" and result.points == 0, value
    assert checks.grade_output(task, case, good).status == "passed"
    task = checks.get_task("6.1")
    good = checks.student_output(task, task.cases[0], sinusoidal_table)
    for value in (None, [good], {**good, "shape": [48]}, {**good, "dtype": None}):
        assert checks.grade_output(task, task.cases[0], value).status == "failed", value
    assert checks.grade_output(task, task.cases[0], good).status == "passed"


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


def test_check_reports_full_marks(capsys):
    out = check_output(capsys, "6.2", rope_complex)
    assert out.splitlines()[0] == "Task 6.2 apply_rope: 4/4 points"
    assert "  PASS  [1/1] 4 new tokens at positions 3, 4, 5, 6 (the first 3 are cached)" in out
    assert out.splitlines()[-1] == "  (The grader also runs hidden tests on this task.)"
    out = check_output(capsys, "6.1", table_exp_log)
    assert out.splitlines()[0] == "Task 6.1 sinusoidal_table: 3/3 points"


def test_check_reports_failures_with_hints(capsys):
    out = check_output(capsys, "6.2", rope_positions_ignored)
    assert out.startswith("Task 6.2 apply_rope: 3/4 points\n")
    assert ("  FAIL  [0/1] 4 new tokens at positions 3, 4, 5, 6 (the first 3 are cached): "
            + ch06.HINT_ROPE_POSITIONS_IGNORED) in out
    out = check_output(capsys, "6.3", bias_reversed)
    assert out.startswith("Task 6.3 relative_bias: 0/4 points\n")


def test_check_stub(capsys):
    out = check_output(capsys, "6.1", stub)
    assert out == (
        "Task 6.1 sinusoidal_table: not attempted (0/3 points): the function still raises "
        "NotImplementedError. Replace the stub with your code.\n"
    )


@pytest.mark.parametrize(
    ("func", "expected"),
    [(None, "got None."), (42, "got an int, not a function."), ("apply_rope", "got a str")],
)
def test_check_non_functions(capsys, func, expected):
    out = check_output(capsys, "6.2", func)
    assert out.startswith("Task 6.2 apply_rope: not attempted (0/4 points): ")
    assert expected in out


def test_check_a_function_that_raises_or_returns_nonsense(capsys):
    out = check_output(capsys, "6.3", bias_not_clipped)
    assert "ERROR [0/1]" in out and "raised IndexError: index 5 is out of bounds" in out
    out = check_output(capsys, "6.1", lambda *args: AlwaysEqual())
    assert "0/3 points" in out and "got AlwaysEqual" in out


def test_check_is_deterministic(capsys):
    first = check_output(capsys, "6.2", rope_rotate_half)
    assert check_output(capsys, "6.2", rope_rotate_half) == first


def test_check_leaves_the_global_random_state_alone(capsys):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for task_id, func in zip(TASK_IDS, (table_python_loops, rope_complex, bias_one_hot),
                             strict=True):
        check_output(capsys, task_id, func)
    for task_id in TASK_IDS:  # the reference of 6.3 builds a RelativePositionBias module
        check_output(capsys, task_id, checks.get_task(task_id).reference)
    assert torch.equal(torch.rand(3), expected)


def test_check_lets_keyboard_interrupt_through(capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        checks.check("6.2", interrupted)
