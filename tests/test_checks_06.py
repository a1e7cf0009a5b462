"""The checks of chapter 6 (coursepkg.checks.ch06_positional): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do: the rotate-half RoPE is
the page's RoPE up to a permutation of the features; ALiBi's slopes and offsets; the debug
task's every combination of bugs and the behaviour the fix restores; the train task's bands
(the reference on three seeds, an untrained model, one trained on another task); the
questions' keys; the shares of points and a submission that pastes the book.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, hidden_cases, run_task, short_training

from coursepkg import checks
from coursepkg import positional as pos
from coursepkg.checks import ch06_positional as ch06
from coursepkg.checks.core import student_args
from coursepkg.checks.tensors import held_out_accuracy

TASK_IDS = ("6.1", "6.2", "6.3", "6.4", "6.5", "6.6", "6.7")


# ---------------------------------------------------------------------------------------------
# Task 6.1: correct implementations written differently from the reference, and wrong ones
# ---------------------------------------------------------------------------------------------


def sinusoidal_at(positions, d, base=10000.0):
    """The notebook's solution: angles in the positions' dtype, the pairs stacked."""
    w = base ** (-torch.arange(0, d, 2, dtype=positions.dtype) / d)  # (d/2,)
    angles = positions[:, None] * w  # (N, d/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(len(positions), d)


def at_exp_log(positions, d, base=10000.0):
    """exp(-2i log(base) / d), two strided assignments."""
    div = torch.exp(torch.arange(0, d, 2, dtype=positions.dtype) * -(math.log(base) / d))
    out = torch.empty(len(positions), d, dtype=positions.dtype)
    out[:, 0::2] = torch.sin(positions.unsqueeze(1) * div)
    out[:, 1::2] = torch.cos(positions.unsqueeze(1) * div)
    return out


def at_python_loops(positions, d, base=10000.0):
    """Python floats, one tensor at the end."""
    rows = []
    for p in positions.tolist():
        row = []
        for i in range(d // 2):
            angle = p / base ** (2 * i / d)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=positions.dtype).reshape(len(positions), d)


def _at(positions, d, base, *, swap=False, exponent=2, halves=False, sign=-1):
    i = torch.arange(d // 2, dtype=torch.float64)
    angles = positions.double()[:, None] * base ** (sign * exponent * i / d)
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if halves:
        out = torch.cat([first, second], dim=-1)
    else:
        out = torch.stack([first, second], dim=-1).reshape(len(positions), d)
    return out.to(positions.dtype)


def at_sin_cos_swapped(positions, d, base=10000.0):
    return _at(positions, d, base, swap=True)


def at_pair_index(positions, d, base=10000.0):
    return _at(positions, d, base, exponent=1)


def at_growing(positions, d, base=10000.0):
    return _at(positions, d, base, sign=1)


def at_halves(positions, d, base=10000.0):
    return _at(positions, d, base, halves=True)


def at_the_page_s_table(positions, d, base=10000.0):
    """The page's sinusoidal_encoding, pasted: positions 0 .. N-1, base 10000."""
    table_positions = torch.arange(len(positions), dtype=torch.float64)[:, None]
    frequencies = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = table_positions * frequencies
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)
    return table.reshape(len(positions), d).to(positions.dtype)


def at_integer_positions(positions, d, base=10000.0):
    return _at(positions.long().to(positions.dtype), d, base)


def at_base_ignored(positions, d, base=10000.0):
    return _at(positions, d, 10000.0)


def at_distance(positions, d, base=10000.0):
    return _at(positions.abs(), d, base)


def at_in_float32(positions, d, base=10000.0):
    return sinusoidal_at(positions.float(), d, base).to(positions.dtype)


# ---------------------------------------------------------------------------------------------
# Task 6.2
# ---------------------------------------------------------------------------------------------


def rope_rotate_half(x, positions):
    """The notebook's solution: LLaMA's rotate_half with the angles repeated."""
    Dh = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)  # (Dh/2,)
    angles = positions.double()[:, None] * theta  # (T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, Dh)
    turned = torch.cat([-x[..., Dh // 2:], x[..., : Dh // 2]], dim=-1)
    return x * angles.cos().to(x.dtype) + turned * angles.sin().to(x.dtype)


def _interleave(x):
    """(…, Dh) halves -> neighbours: feature i goes to 2i, feature i + Dh/2 to 2i + 1."""
    Dh = x.shape[-1]
    return torch.stack([x[..., : Dh // 2], x[..., Dh // 2:]], dim=-1).flatten(-2)


def _deinterleave(x):
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)


def half_through_a_permutation(x, positions):
    """The page's neighbours rotation, written here, between two permutations."""
    y = _interleave(x)
    Dh = y.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    angles = positions.double()[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = y[..., 0::2], y[..., 1::2]
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)
    return _deinterleave(turned)


def half_complex(x, positions):
    """Complex numbers: pair i is x_i + i x_{i+Dh/2}, multiplied by e^(i m theta)."""
    Dh = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    angles = positions.double()[:, None] * theta
    z = torch.complex(x[..., : Dh // 2].double(), x[..., Dh // 2:].double())
    turned = z * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([turned.real, turned.imag], dim=-1).to(x.dtype)


def _half(x, positions, *, sign=1, exponent=2, layout="halves", swap_halves=False):
    Dh = x.shape[-1]
    theta = 10000.0 ** (-exponent * torch.arange(Dh // 2, dtype=torch.float64) / Dh)
    angles = positions.double()[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), (sign * angles.sin()).to(x.dtype)
    if layout == "neighbours":
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)
    a, b = x[..., : Dh // 2], x[..., Dh // 2:]
    parts = [a * cos - b * sin, a * sin + b * cos]
    return torch.cat(parts[::-1] if swap_halves else parts, dim=-1)


def half_the_page_s_rope(x, positions):
    """The page's apply_rope, pasted: neighbours."""
    return _half(x, positions, layout="neighbours")


def half_backwards(x, positions):
    return _half(x, positions, sign=-1)


def half_halves_swapped(x, positions):
    return _half(x, positions, swap_halves=True)


def half_positions_ignored(x, positions):
    return _half(x, torch.arange(x.shape[-2]))


def half_pair_index(x, positions):
    return _half(x, positions, exponent=1)


def half_angles_interleaved(x, positions):
    """rotate_half with the angles laid out for neighbours (repeat_interleave)."""
    Dh = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    angles = (positions.double()[:, None] * theta).repeat_interleave(2, dim=-1)
    turned = torch.cat([-x[..., Dh // 2:], x[..., : Dh // 2]], dim=-1)
    return x * angles.cos().to(x.dtype) + turned * angles.sin().to(x.dtype)


def half_in_float32(x, positions):
    return rope_rotate_half(x.float(), positions.float()).to(x.dtype)


# ---------------------------------------------------------------------------------------------
# Task 6.3
# ---------------------------------------------------------------------------------------------


def _paper_slopes(n):
    """The paper's get_slopes, recursive."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


def alibi_bias(n_heads, T, S=None, offset=0):
    """The notebook's solution."""
    S = offset + T if S is None else S
    slopes = torch.tensor(_paper_slopes(n_heads))  # (H,)
    queries = torch.arange(offset, offset + T)[:, None]  # (T, 1)
    keys = torch.arange(S)[None, :]  # (1, S)
    return -slopes[:, None, None] * (queries - keys).abs()  # (H, T, S)


def alibi_loops(n_heads, T, S=None, offset=0):
    """Slopes by halving the exponent's step, entries in Python loops."""
    S = offset + T if S is None else S
    n = 1
    while n * 2 <= n_heads:
        n *= 2
    slopes = [2 ** (-8 * h / n) for h in range(1, n + 1)]
    slopes += [2 ** (-8 * h / (2 * n)) for h in range(1, 2 * n + 1, 2)][: n_heads - n]
    rows = [[[-m * abs(offset + t - s) for s in range(S)] for t in range(T)] for m in slopes]
    return torch.tensor(rows, dtype=torch.float32)


def _alibi(n_heads, T, S=None, offset=0, *, slopes=None, sign=-1, signed=False, at=None):
    S = offset + T if S is None else S
    slopes = _paper_slopes(n_heads) if slopes is None else slopes
    start = offset if at is None else at
    queries = torch.arange(start, start + T, dtype=torch.float64)[:, None]
    distance = queries - torch.arange(S, dtype=torch.float64)[None, :]
    if not signed:
        distance = distance.abs()
    return (sign * torch.tensor(slopes, dtype=torch.float64)[:, None, None] * distance).float()


def alibi_reversed(n_heads, T, S=None, offset=0):
    return _alibi(n_heads, T, S, offset, slopes=_paper_slopes(n_heads)[::-1])


def alibi_heads_from_0(n_heads, T, S=None, offset=0):
    return _alibi(n_heads, T, S, offset, slopes=[2 ** (-8 * h / n_heads) for h in range(n_heads)])


def alibi_a_bonus(n_heads, T, S=None, offset=0):
    return _alibi(n_heads, T, S, offset, sign=1)


def alibi_signed(n_heads, T, S=None, offset=0):
    return _alibi(n_heads, T, S, offset, signed=True)


def alibi_offset_ignored(n_heads, T, S=None, offset=0):
    return _alibi(n_heads, T, S, offset, at=0)


def alibi_linear(n_heads, T, S=None, offset=0):
    return _alibi(n_heads, T, S, offset, slopes=[h / n_heads for h in range(n_heads, 0, -1)])


def alibi_every_h(n_heads, T, S=None, offset=0):
    """2^(-8h/H) for every H, a power of two or not."""
    return _alibi(n_heads, T, S, offset,
                  slopes=[2 ** (-8 * h / n_heads) for h in range(1, n_heads + 1)])


def alibi_keys_default_t(n_heads, T, S=None, offset=0):
    return _alibi(n_heads, T, T if S is None else S, offset)


def alibi_float64(n_heads, T, S=None, offset=0):
    return alibi_bias(n_heads, T, S, offset).double()


# ---------------------------------------------------------------------------------------------
# Task 6.4: the starter code with some of its bugs left, and other slips
# ---------------------------------------------------------------------------------------------


def rope_batch(x, positions, base=10000.0):
    """The notebook's solution: the starter code with its four bugs fixed."""
    Dh = x.shape[-1]
    theta = base ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh)  # (Dh/2,)
    angles = positions.to(x.dtype)[:, None, :, None] * theta  # (B, 1, T, Dh/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)


def rope_batch_rows(x, positions, base=10000.0):
    """Written differently: one sequence at a time, complex numbers."""
    Dh = x.shape[-1]
    theta = base ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    out = []
    for b in range(x.shape[0]):
        angles = positions[b].double()[:, None] * theta  # (T, Dh/2)
        z = torch.view_as_complex(x[b].double().unflatten(-1, (Dh // 2, 2)).contiguous())
        turned = torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles))
        out.append(turned.flatten(-2).to(x.dtype))
    return torch.stack(out)


def _buggy(x, positions, bugs, *, base=10000.0, backwards=False):
    """The starter code with ``bugs`` left (the checks' own copy is forbidden to students)."""
    Dh = x.shape[-1]
    if "exponent" in bugs:
        theta = base ** (-torch.arange(Dh // 2, dtype=x.dtype) / Dh)
    else:
        theta = base ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh)
    if "rows" in bugs:
        angles = positions[0].to(x.dtype)[:, None] * theta
    else:
        angles = positions.to(x.dtype)[:, None, :, None] * theta
    cos, sin = angles.cos(), angles.sin()
    if "pairs" in bugs:
        even, odd = x[..., : Dh // 2], x[..., Dh // 2:]
    else:
        even, odd = x[..., 0::2], x[..., 1::2]
    first = even * cos + odd * sin if "sign" in bugs or backwards else even * cos - odd * sin
    second = -even * sin + odd * cos if backwards else even * sin + odd * cos
    return torch.stack([first, second], dim=-1).flatten(-2)


def with_bugs(*bugs, **other):
    def f(x, positions, base=10000.0):
        return _buggy(x, positions, bugs, base=base, **other)

    f.__name__ = "bugs_" + "_".join(bugs) if bugs else "other_" + "_".join(other)
    return f


debug_untouched = with_bugs("exponent", "rows", "sign", "pairs")
debug_exponent = with_bugs("exponent")
debug_first_row_for_all = with_bugs("rows")
debug_a_shear = with_bugs("sign")
debug_mixed_pairs = with_bugs("pairs")
debug_rows_and_sign = with_bugs("rows", "sign")
debug_backwards = with_bugs(backwards=True)


def debug_forgets_the_heads_dim(x, positions, base=10000.0):
    """angles (B, T, Dh/2) broadcast against (B, H, T, Dh/2): crashes unless B = H (or 1)."""
    Dh = x.shape[-1]
    theta = base ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh)
    angles = positions.to(x.dtype)[..., None] * theta
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([even * angles.cos() - odd * angles.sin(),
                           even * angles.sin() + odd * angles.cos()], dim=-1)
    return rotated.flatten(-2)


def debug_pairs_not_flattened(x, positions, base=10000.0):
    return rope_batch(x, positions, base).unflatten(-1, (x.shape[-1] // 2, 2))


# ---------------------------------------------------------------------------------------------
# Task 6.5: trainings
# ---------------------------------------------------------------------------------------------


def _loop(model, tokens, steps, *, K=ch06.LOOKBACK_K, lr=0.01, shift=True, **faults):
    """The reference's loop, trained on the token K back (or, not ``shift``-ed, on the token
    itself)."""
    targets = ch06.lookback_targets(tokens, K) if shift else tokens
    return short_training(model, tokens, targets, steps, lr=lr, batch=32, **faults)


def train_lookback(tokens, seed):
    """The notebook's solution: Adam, minibatches of 32, 200 steps, the state_dict returned."""
    torch.manual_seed(seed)
    model = ch06.LookbackModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(200):
        batch = tokens[torch.randint(0, len(tokens), (32,))]
        logits = model(batch)[:, 3:]  # (32, T - 3, V): positions with an answer
        loss = F.cross_entropy(logits.reshape(-1, 10), batch[:, :-3].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.state_dict()


def train_lookback_epochs(tokens, seed):
    """Written differently: whole epochs over a shuffled order, AdamW, a mean over positions
    taken by hand, the module returned."""
    generator = torch.Generator().manual_seed(seed + 5)
    torch.manual_seed(seed + 5)
    model = ch06.LookbackModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.005, weight_decay=0.0)
    for _ in range(3):
        for rows in torch.randperm(len(tokens), generator=generator).split(50):
            batch = tokens[rows]
            log_probs = model(batch).log_softmax(dim=-1)[:, 3:]  # (b, T - 3, V)
            picked = log_probs.gather(-1, batch[:, :-3, None])[..., 0]
            optimizer.zero_grad()
            (-picked.mean()).backward()
            optimizer.step()
    return model


def lookback_untrained(tokens, seed):
    torch.manual_seed(seed)
    return ch06.LookbackModel()


def lookback_the_page_s_distance(tokens, seed):
    """Trained on the page's echo task, 5 positions back."""
    torch.manual_seed(seed)
    return _loop(ch06.LookbackModel(), tokens, 150, K=5, seed=seed)


def lookback_not_shifted(tokens, seed):
    """The logits at t compared with the token at t itself."""
    torch.manual_seed(seed)
    return _loop(ch06.LookbackModel(), tokens, 100, shift=False, seed=seed)


def lookback_too_few_steps(tokens, seed):
    torch.manual_seed(seed)
    return _loop(ch06.LookbackModel(), tokens, 12, lr=0.01, seed=seed)


def lookback_returns_a_wrapped_state(tokens, seed):
    return {"model": lookback_too_few_steps(tokens, seed).state_dict()}


# ---------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------

CORRECT = {
    "6.1": [ch06.sinusoidal_at, sinusoidal_at, at_exp_log, at_python_loops],
    "6.2": [ch06.rope_rotate_half, rope_rotate_half, half_through_a_permutation, half_complex],
    "6.3": [ch06.alibi_bias, alibi_bias, alibi_loops],
    "6.4": [ch06.rope_batch, rope_batch, rope_batch_rows],
    # The train task and the questions: the second correct implementations are tested below
    # (their check report has a time, or no hidden tests' line).
    "6.5": [ch06.train_lookback, train_lookback],
    "6.6": [checks.get_task("6.6").reference],
    "6.7": [checks.get_task("6.7").reference],
}

WRONG = {
    "6.1": [
        (at_sin_cos_swapped, ch06.HINT_SIN_COS_SWAPPED),
        (at_pair_index, ch06.HINT_EXPONENT_PAIR_INDEX),
        (at_growing, ch06.HINT_EXPONENT_SIGN),
        (at_halves, ch06.HINT_HALVES),
        (at_the_page_s_table, ch06.HINT_POSITIONS_IGNORED),
        (at_integer_positions, ch06.HINT_POSITIONS_ROUNDED),
        (at_base_ignored, ch06.HINT_BASE_IGNORED),
        (at_distance, ch06.HINT_POSITIONS_ABSOLUTE),
    ],
    "6.2": [
        (half_the_page_s_rope, ch06.HINT_HALF_INTERLEAVED),
        (half_backwards, ch06.HINT_HALF_SIGN),
        (half_halves_swapped, ch06.HINT_HALF_HALVES_SWAPPED),
        (half_positions_ignored, ch06.HINT_HALF_POSITIONS_IGNORED),
        (half_pair_index, ch06.HINT_HALF_EXPONENT),
        (half_angles_interleaved, ch06.HINT_HALF_MIXED),
    ],
    "6.3": [
        (alibi_reversed, ch06.HINT_ALIBI_REVERSED),
        (alibi_heads_from_0, ch06.HINT_ALIBI_FROM_0),
        (alibi_a_bonus, ch06.HINT_ALIBI_SIGN),
        (alibi_signed, ch06.HINT_ALIBI_NO_ABS),
        (alibi_offset_ignored, ch06.HINT_ALIBI_OFFSET),
        (alibi_linear, ch06.HINT_ALIBI_LINEAR),
        (alibi_every_h, ch06.HINT_ALIBI_POWER_OF_TWO),
        (alibi_keys_default_t, ch06.HINT_ALIBI_KEYS),
        (alibi_float64, ch06.HINT_ALIBI_DTYPE),
    ],
    "6.4": [
        (debug_untouched, ch06.PREFIX_DEBUG_SEVERAL),
        (debug_exponent, ch06.HINT_DEBUG_EXPONENT),
        (debug_first_row_for_all, ch06.HINT_DEBUG_ROWS),
        (debug_a_shear, ch06.HINT_DEBUG_SIGN),
        (debug_mixed_pairs, ch06.HINT_DEBUG_PAIRS),
        (debug_rows_and_sign, ch06.debug_hint(frozenset({"rows", "sign"}))),
        (debug_backwards, ch06.HINT_DEBUG_BACKWARDS),
        (debug_pairs_not_flattened, ch06.HINT_DEBUG_SHAPE),
    ],
    "6.5": [
        (lookback_untrained, ch06.HINT_LOOKBACK_UNTRAINED),
        (lookback_the_page_s_distance, ch06.HINT_LOOKBACK_TRAIN),
        (lookback_not_shifted, ch06.HINT_LOOKBACK_TRAIN),
        (lookback_too_few_steps, ch06.HINT_LOOKBACK_PARTIAL),
        (lookback_returns_a_wrapped_state, "the state_dict lacks"),
    ],
    "6.6": [(lambda: 2 * math.pi * 10000, ch06.HINT_Q_WAVELENGTH_BOUND),
            (lambda: 10000 ** (62 / 64), ch06.HINT_Q_WAVELENGTH_NO_2PI),
            (lambda: 2 * math.pi * 10000 ** (31 / 64), ch06.HINT_Q_WAVELENGTH_EXPONENT),
            (lambda: 6.28, ch06.HINT_Q_WAVELENGTH)],
    "6.7": [(lambda: 32, ch06.HINT_Q_UNTRAINED_BUCKET), (lambda: 1, ch06.HINT_Q_UNTRAINED_FUTURE),
            (lambda: 65, ch06.HINT_Q_UNTRAINED), (lambda: 33.0, "a whole number")],
}


def stub(*args):
    raise NotImplementedError("Task 6.1: write sinusoidal_at")


CHAPTER = Chapter(
    assignment="06_positional",
    tasks={"6.1": ("sinusoidal_at", 3, 6), "6.2": ("rope_rotate_half", 3, 5),
           "6.3": ("alibi_bias", 4, 9), "6.4": ("rope_batch", 3, 6),
           "6.5": ("train_lookback", 3, 6), "6.6": ("slowest_wavelength", 1, 1),
           "6.7": ("untrained_biases", 1, 1)},
    hints=ch06,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=1,
    min_hidden=1,
    public_points=(1, 4),
    forbidden=(),  # the questions forbid their keys only
    package="coursepkg.transformer",  # the train task runs coursepkg.positional in its model
    not_finite_hint=ch06.HINT_NOT_FINITE,
    failure_reports=(
        ("6.2", half_the_page_s_rope, "Task 6.2 rope_rotate_half: 0/3 points",
         ("  FAIL  [0/1] 2 sequences of 5 rows at positions 7 .. 11, Dh = 8: "
          + ch06.HINT_HALF_INTERLEAVED,)),
        ("6.3", alibi_offset_ignored, "Task 6.3 alibi_bias: 3/4 points",
         ("  FAIL  [0/1] 4 heads, 3 new queries at positions 4 .. 6 against 7 keys: "
          + ch06.HINT_ALIBI_OFFSET,)),
        ("6.4", debug_untouched, "Task 6.4 rope_batch: 0/3 points",
         (ch06.PREFIX_DEBUG_SEVERAL,)),
    ),
    typed=("6.1", "6.2", "6.4"),
    seeded=("6.1", "6.2", "6.4", "6.5"),
    scalar_inputs=("6.3", "6.6", "6.7"),
    exact_results=("6.5", "6.6", "6.7"),
    more_hints=frozenset(ch06.debug_hint(bugs) for bugs in ch06.BUG_SETS),
    crashes_excused=True,  # a heads dim forgotten crashes where B and H differ
    wrong_types=(
        ("6.1", lambda *a: sinusoidal_at(*a).tolist(),
         "expected the encoding as a torch.Tensor, got list"),
        ("6.2", lambda *a: None, "expected the rotated x as a torch.Tensor, got NoneType"),
        ("6.3", lambda *a: alibi_bias(*a).long(), "got dtype torch.int64"),
        ("6.3", lambda *a: alibi_bias(*a).unbind(0), "got tuple"),
        ("6.4", lambda *a: (rope_batch(*a), a[0]), "got tuple"),
        ("6.5", lambda *a: [1.0], "expected the trained model or its state_dict(), got list"),
        ("6.6", lambda: "47117", "a number (an int or a float), got a str"),
        ("6.7", lambda: 33.0, "a whole number (an int), got a float"),
    ),
    forged={
        "6.1": lambda good: [{**good, "shape": [3]}, {**good, "dtype": None}],
        "6.3": lambda good: [{**good, "data": ["1"] * len(good["data"])},
                             {**good, "shape": [len(good["data"])]}, {**good, "extra": 1}],
    },
    forbidden_calls={ch06.train_lookback: None},  # its model runs coursepkg.positional
    allowed_calls=(torch.sin, torch.cos, torch.stack, torch.cat, torch.arange,
                   torch.Tensor.flatten, torch.polar, torch.view_as_complex, torch.einsum),
)


# ---------------------------------------------------------------------------------------------
# The kinds, the shares, and a submission that pastes the book
# ---------------------------------------------------------------------------------------------


def test_the_kinds_and_their_shares():
    """No task asks for a function the page shows; formulas are at most a third of the
    points, and every other kind the design asks for is there."""
    points = checks.points_by_kind("06_positional")
    assert points == {"formula": 11.0, "extension": 9.0, "train": 6.0, "debug": 6.0,
                      "question": 2.0}
    assert points["formula"] <= sum(points.values()) / 3
    shown = {"sinusoidal_encoding", "apply_rope", "rope_angles", "offsets", "forward",
             "relative_bias", "sinusoidal_table", "train_echo"}
    assert not shown & {task.func_name for task in checks.tasks_for("06_positional")}


def test_the_extension_s_reference_is_not_in_a_module_the_book_includes():
    assert not hasattr(pos, "alibi_bias") and not hasattr(pos, "alibi_slopes")
    assert ch06.alibi_bias.__module__ == "coursepkg.checks.ch06_positional"


def test_no_reference_is_the_code_the_page_shows(monkeypatch):
    """The references of tasks 6.1 to 6.4 are the checks' own: they run with the package's
    positional code out of reach (the share of points copied from the book is 0)."""

    def out_of_reach(*args, **kwargs):
        raise AssertionError("a reference called the page's code")

    for name in ("apply_rope", "rope_angles", "RelativePositionBias"):
        monkeypatch.setattr(ch06, name, out_of_reach)
    for task_id in ("6.1", "6.2", "6.3", "6.4"):
        task = checks.get_task(task_id)
        for case in all_cases(task):
            task.reference(*task.build_args(case.args))


def paste_at(positions, d, base=10000.0):
    """The page's sinusoidal_encoding, called: the table of 0 .. N-1."""
    return pos.sinusoidal_encoding(len(positions), d, base, positions.dtype)


def paste_rope(x, positions):
    """The page's apply_rope, called."""
    return pos.apply_rope(x, positions)


def paste_alibi(n_heads, T, S=None, offset=0):
    """The page's relative bias, the nearest it shows, its table set to -|s - t|."""
    M = offset + T + (0 if S is None else S)
    layer = pos.RelativePositionBias(n_heads, M)
    with torch.no_grad():
        layer.bias.copy_(-torch.arange(-M, M + 1).abs().float().expand(n_heads, -1))
        return layer(T, S, offset=offset)


def paste_rope_batch(x, positions, base=10000.0):
    """The page's apply_rope, pasted: it takes positions of shape (T,) only."""
    T = x.shape[-2]
    if positions.shape != (T,):
        raise ValueError(f"expected positions of shape ({T},), got {tuple(positions.shape)}")
    return half_the_page_s_rope(x, positions)


def paste_lookback(tokens, seed):
    """The page's echo training loop, pasted: fresh echo batches, 5 positions back."""
    torch.manual_seed(seed)
    model = ch06.LookbackModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(100 + seed)
    for _ in range(150):
        batch = torch.randint(0, ch06.LOOKBACK_SYMBOLS, (32, 32), generator=generator)
        loss = F.cross_entropy(model(batch)[:, 5:].reshape(-1, ch06.LOOKBACK_SYMBOLS),
                               batch[:, :-5].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def test_a_book_paster_gets_at_most_the_formula_share():
    """Each function delegating to the code the chapter page shows, as far as that goes (the
    page's table, its RoPE, its relative bias with a hand-set table, its echo loop), and the
    page's sentences for the questions: the grader gives at most the formula tasks' share."""
    pasted = {"6.1": paste_at, "6.2": paste_rope, "6.3": paste_alibi, "6.4": paste_rope_batch,
              "6.5": paste_lookback, "6.6": lambda: 2 * math.pi * 10000, "6.7": lambda: 32}
    earned = {task_id: run_task(task_id, func, hidden=True).points
              for task_id, func in pasted.items()}
    assert sum(earned.values()) <= checks.points_by_kind("06_positional")["formula"]
    assert earned["6.4"] == earned["6.5"] == 0
    assert run_task("6.1", at_the_page_s_table, hidden=True).points == 0
    # the page's RoPE pasted: right only where the two pairings agree, one pair (Dh = 2)
    result = run_task("6.2", half_the_page_s_rope, hidden=True)
    assert [case.name for case in result.cases if case.status == "passed"] == [
        "hidden: one pair (Dh = 2), one position"]


# ---------------------------------------------------------------------------------------------
# Tasks 6.1 to 6.3
# ---------------------------------------------------------------------------------------------


def test_the_encoding_at_whole_positions_is_the_page_s_table():
    positions = torch.arange(40, dtype=torch.float64)
    torch.testing.assert_close(ch06.sinusoidal_at(positions, 16),
                               pos.sinusoidal_encoding(40, 16, dtype=torch.float64))
    torch.testing.assert_close(ch06.sinusoidal_at(positions, 8, 100.0),
                               pos.sinusoidal_encoding(40, 8, 100.0, dtype=torch.float64))


def test_a_shift_by_a_fraction_is_a_rotation_of_each_pair():
    """PE(p + k) = S_k PE(p) holds for any real p and k, negative ones too."""
    p = torch.tensor([-7.25, 0.0, 3.5, 11.125], dtype=torch.float64)
    k, d = 2.75, 8
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    here, there = ch06.sinusoidal_at(p, d), ch06.sinusoidal_at(p + k, d)
    sin, cos = here[:, 0::2], here[:, 1::2]
    turned = torch.stack([sin * torch.cos(k * w) + cos * torch.sin(k * w),
                          cos * torch.cos(k * w) - sin * torch.sin(k * w)], -1).flatten(-2)
    torch.testing.assert_close(turned, there)


def test_the_6_1_cases_cover_fractions_negative_positions_and_other_bases():
    cases = all_cases(checks.get_task("6.1"))
    built = [checks.get_task("6.1").build_args(case.args) for case in cases]
    assert any((p < 0).any() for p, _, _ in built)
    assert any((p != p.round()).any() for p, _, _ in built[:3])
    assert {base for _, _, base in built[:3]} >= {1000.0, 10000.0}
    assert any(d == 2 for _, d, _ in built) and any(len(p) == 1 for p, _, _ in built)


def test_rotate_half_is_the_page_s_rope_up_to_a_permutation():
    """Reading the halves as neighbours (the permutation P) turns one convention into the
    other: rope_half(x) = P^-1 apply_rope(P x), and both keep norms and scores relative."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 7, 8, generator=gen, dtype=torch.float64)
    positions = torch.tensor([4, 0, 9, 2, 2, 30, 5])
    half = ch06.rope_rotate_half(x, positions)
    torch.testing.assert_close(half, _deinterleave(pos.apply_rope(_interleave(x), positions)))
    torch.testing.assert_close(half.norm(dim=-1), x.norm(dim=-1))
    q, k = x[0, :1], x[1, :1]
    scores = [(ch06.rope_rotate_half(q, torch.tensor([m + 3]))
               @ ch06.rope_rotate_half(k, torch.tensor([m])).T).item() for m in (0, 5, 40)]
    assert max(scores) - min(scores) < 1e-10
    assert not torch.allclose(half, pos.apply_rope(x, positions))  # another function of x


def test_the_slopes_are_the_paper_s():
    assert ch06.alibi_slopes(8) == [2 ** -h for h in range(1, 9)]
    for n in (1, 2, 3, 5, 6, 12, 16, 20):
        assert ch06.alibi_slopes(n) == pytest.approx(_paper_slopes(n), rel=1e-12), n
    assert ch06.alibi_slopes(6) == pytest.approx([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8,
                                                  2 ** -1, 2 ** -3])


def test_alibi_with_a_cache_is_the_last_rows_of_the_full_bias():
    """The T rows computed with an offset are the last rows over offset + T positions, and
    with scores of 0 its weights fall with the distance, every head more steeply than the
    next one."""
    full = ch06.alibi_bias(8, 10)
    torch.testing.assert_close(ch06.alibi_bias(8, 3, offset=7), full[:, 7:])
    torch.testing.assert_close(ch06.alibi_bias(8, 1, offset=9), full[:, 9:])
    assert (full.diagonal(dim1=1, dim2=2) == 0).all() and (full <= 0).all()
    weights = full[:, -1].softmax(dim=-1)  # (H, S): the last query
    assert (weights.diff(dim=-1) > 0).all()  # nearer keys weigh more
    assert (weights[:-1, -1] > weights[1:, -1]).all()  # a steeper head looks closer


def test_the_alibi_cases_cover_what_the_task_promises():
    cases = [case.args for case in all_cases(checks.get_task("6.3"))]
    public = cases[:4]
    assert any(a["offset"] > 0 and a["S"] is None for a in public)
    assert any(a["S"] is not None and a["S"] > a["offset"] + a["T"] for a in public)
    assert any(a["H"] & (a["H"] - 1) for a in public)  # not a power of two
    assert any(a["T"] == 1 and a["offset"] > 0 for a in cases)
    assert any(a["H"] == 1 for a in cases)


# ---------------------------------------------------------------------------------------------
# Task 6.4, the debug task
# ---------------------------------------------------------------------------------------------


def test_every_combination_of_bugs_is_named():
    task = checks.get_task("6.4")
    case = task.cases[0]
    for bugs in ch06.BUG_SETS:
        func = with_bugs(*sorted(bugs))
        result = checks.grade_output(task, case, checks.student_output(task, case, func))
        assert result.status == "failed"
        assert result.message.startswith(ch06.debug_hint(bugs)), (sorted(bugs), result.message)
    assert len(ch06.BUG_SETS) == 15


def test_the_untouched_starter_code_fails_every_case():
    result = run_task("6.4", debug_untouched, hidden=True)
    assert result.points == 0 and result.status == "failed"
    assert {case.status for case in result.cases} == {"failed"}


def test_the_fixed_function_has_the_behaviour_the_task_names():
    """Norms kept, each row at its own positions, scores depending on the offset only; the
    starter code breaks the first and the second."""
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(3, 2, 5, 8, generator=gen, dtype=torch.float64)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [3, 4, 5, 6, 7]])
    out = ch06.rope_batch(x, positions)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    for b in range(3):
        torch.testing.assert_close(out[b], pos.apply_rope(x[b], positions[b]))
    shifted = ch06.rope_batch(x, positions + 5)
    torch.testing.assert_close(shifted @ shifted.transpose(-2, -1), out @ out.transpose(-2, -1))
    starter = debug_untouched(x, positions)
    assert not torch.allclose(starter.norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(debug_first_row_for_all(x, positions)[1], out[1])


def test_the_debug_cases_give_each_sequence_its_own_positions():
    for case in all_cases(checks.get_task("6.4")):
        rows = case.args["positions"]
        assert len(rows) == case.args["B"] >= 2 and len({tuple(row) for row in rows}) > 1
        assert case.args["Dh"] >= 4


def test_the_page_s_rope_cannot_take_the_debug_task_s_positions():
    x, positions = checks.get_task("6.4").build_args(checks.get_task("6.4").cases[0].args)
    with pytest.raises(ValueError, match="positions of shape"):
        pos.apply_rope(x, positions)


# ---------------------------------------------------------------------------------------------
# Task 6.5, the train task
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reference_reaches_the_target_on_three_seeds(seed):
    tokens = ch06.lookback_data(seed, ch06.LOOKBACK_TRAIN)
    model = ch06.train_lookback(tokens, seed)
    held_out = ch06.lookback_data(seed + 1000, ch06.LOOKBACK_HELD_OUT, ch06.LOOKBACK_TEST_LENGTH)
    accuracy = held_out_accuracy(ch06.LookbackModel, model.state_dict(), held_out,
                                 ch06.lookback_targets(held_out))
    assert accuracy >= ch06.LOOKBACK_BANDS[0][0]


@pytest.mark.parametrize("func", [train_lookback, train_lookback_epochs])
def test_other_correct_trainings_get_full_marks(func):
    result = run_task("6.5", func, hidden=True)
    assert result.status == "passed" and result.points == result.max_points == 6, result


@pytest.mark.parametrize(("func", "most"), [
    (lookback_untrained, 0.0), (lookback_the_page_s_distance, 0.0),
    (lookback_not_shifted, 0.0), (lookback_too_few_steps, 4.5)])
def test_short_or_wrong_trainings_get_a_low_band_or_nothing(func, most):
    result = run_task("6.5", func, hidden=True)
    assert result.points <= most, (func.__name__, result)
    if most:
        assert 0 < result.points and {c.status for c in result.cases} == {"partial"}


def test_the_held_out_sequences_are_longer_and_never_reach_the_student():
    task = checks.get_task("6.5")
    for case in all_cases(task):
        assert "_heldout" in case.args and "_heldout" not in student_args(case.args)
        tokens, seed = task.build_args(student_args(case.args))
        held_out, answers = task.expected(case.args)
        assert seed == case.args["seed"]
        assert tokens.shape == (ch06.LOOKBACK_TRAIN, ch06.LOOKBACK_LENGTH)
        assert held_out.shape == answers.shape == (ch06.LOOKBACK_HELD_OUT,
                                                   ch06.LOOKBACK_TEST_LENGTH)
        assert not torch.equal(tokens[:5], held_out[:5, :ch06.LOOKBACK_LENGTH])


def test_the_lookback_model_is_causal_and_runs_at_any_length():
    torch.manual_seed(0)
    model = ch06.LookbackModel()
    tokens = ch06.lookback_data(4, 3, 12)
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % ch06.LOOKBACK_SYMBOLS
    with torch.no_grad():
        torch.testing.assert_close(model(changed)[:, :8], model(tokens)[:, :8])
        assert model(ch06.lookback_data(4, 2, 50)).shape == (2, 50, ch06.LOOKBACK_SYMBOLS)
    shapes = {name: tuple(t.shape) for name, t in ch06.LookbackModel().state_dict().items()}
    assert shapes == ch06.LOOKBACK_SHAPES


def test_the_forbidden_calls_of_the_train_task_let_its_model_run():
    from coursepkg.checks.forbidden import Tripwire

    train = Tripwire(checks.get_task("6.5"))
    assert train.forbidden_callable(pos.apply_rope) is None  # LookbackModel runs it
    assert train.forbidden_callable(ch06.train_lookback) is not None
    for task_id in ("6.1", "6.2", "6.3", "6.4"):
        wire = Tripwire(checks.get_task(task_id))
        for func in (pos.apply_rope, pos.sinusoidal_encoding, pos.rope_angles,
                     pos.RelativePositionBias.forward, pos.Rotary.forward):
            assert wire.forbidden_callable(func) == "coursepkg.positional", (task_id, func)


# ---------------------------------------------------------------------------------------------
# The questions
# ---------------------------------------------------------------------------------------------


def test_the_questions_keys_follow_the_package_and_other_answers_are_right_too():
    assert ch06.slowest_wavelength_key() == pytest.approx(2 * math.pi * 10000 ** (62 / 64))
    assert ch06.untrained_biases_key() == 33 == 32 + 1
    for task_id, answer in (("6.6", 47117.24), ("6.6", 2 * math.pi * 10000 ** (62 / 64)),
                            ("6.7", 33)):
        assert run_task(task_id, lambda answer=answer: answer).status == "passed"


# ---------------------------------------------------------------------------------------------
# Reports and details
# ---------------------------------------------------------------------------------------------


def test_precision_slips_are_named_in_the_float64_case():
    for task_id, func in (("6.1", at_in_float32), ("6.2", half_in_float32)):
        result = run_task(task_id, func, hidden=True)
        failed = [case for case in result.cases if case.status != "passed"]
        assert [case.name for case in failed] == [hidden_cases(checks.get_task(task_id))[0].name]
        assert failed[0].message == ch06.HINT_PRECISION


def test_public_failures_show_the_specifics():
    result = run_task("6.1", at_halves)
    detail = result.cases[0].message.removeprefix(ch06.HINT_HALVES).strip()
    assert detail.startswith("the encoding[") and "values differ)." in detail
    result = run_task("6.3", alibi_keys_default_t)
    assert result.cases[1].message.endswith("Expected the bias of shape (4, 3, 7), got "
                                            "(4, 3, 3).")


def test_a_forgotten_heads_dim_crashes_with_a_hint_or_is_named():
    result = run_task("6.4", debug_forgets_the_heads_dim)
    assert result.points < result.max_points
    for case in result.cases:
        if case.status == "error":
            assert "a dim of size 1 for the heads" in case.message


def test_check_prints_the_train_task_s_time_and_budget(capsys):
    out = check_output(capsys, "6.5", train_lookback)
    assert out.startswith("Task 6.5 train_lookback: 3/3 points\n")
    assert " s of 10 s budget)" in out


def test_the_second_correct_answers_print_full_marks(capsys):
    for task_id, func, answer in (("6.6", "slowest_wavelength", 47117.2),
                                  ("6.7", "untrained_biases", 33)):
        out = check_output(capsys, task_id, lambda answer=answer: answer)
        assert out == f"Task {task_id} {func}: 1/1 points\n  PASS  [1/1] the answer\n"
