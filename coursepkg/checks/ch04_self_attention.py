"""Chapter 4 tasks (``04_self_attention``): what the chapter's page does not show.

* 4.1 ``qkv_scores`` (formula): the three projections of a batch and the score matrix
  Q K^T / sqrt(d_k).
* 4.2 ``local_mask`` (extension): the boolean mask of sliding-window (local) causal attention
  over a padded batch, (B, T, T): a real query t sees the real keys among the ``window``
  positions ending at t; a padding query sees itself only (so no row is empty). The book stops
  at the full causal mask; its reference lives here.
* 4.3 ``causal_self_attention`` (debug): the exercise shows a causal self-attention head with
  four planted bugs (values made with the key weights, scores divided by d_k, a mask that lets
  each position see the next one, the softmax over the queries); judged on behaviour, every
  combination of bugs left is named.
* 4.4 ``train_recall`` (train): the training loop of a tiny one-head model
  (:class:`RecallModel`) on an associative-recall task (a set of letter-digit pairs and a query
  letter: answer the digit paired with it), judged on held-out sequences from a seed the
  student's function never sees, in bands of held-out accuracy, within :data:`RECALL_TIME_LIMIT`
  seconds on one thread.
* 4.5 to 4.7 (questions, keys computed from coursepkg at check time): how many scores causal
  attention keeps, how many a local window keeps, and which entries of the softmax's Jacobian
  a saturated row leaves.

The conventions are those of :mod:`coursepkg.self_attention`: batch first; a weight matrix has
one row per output feature, like ``nn.Linear``'s; boolean masks are **True = may attend**; a
masked score is ``float("-inf")``, hence the weight exactly 0.

Cases, plain values and judging work as in chapter 3 (:mod:`coursepkg.checks.tensors`); the
known mistakes of attention and of causal masks are the course's one bank of them
(:mod:`coursepkg.checks.attention_mistakes`), masks are plain nested lists
(:mod:`coursepkg.checks.masks`): a checks module does no tensor work when it is imported (the
grader forks its workers from a process that imported it). The cases are made so that the usual
mistakes change the numbers: widths differ (D, Dk, Dv and T all distinct in one case) so that
dividing by the wrong square root shows; one case where every size agrees lets a missing
transposition run and be named. The hidden cases' generators draw the seeds, sizes and masks
from the grader's random generator.

Shape letters: B batch, T queries (positions), S keys, D model width, Dk query/key width,
Dv value width, W the window.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from coursepkg.checks import attention_mistakes as bank
from coursepkg.checks import masks
from coursepkg.checks.attention_mistakes import (  # the hints of this chapter's judges
    HINT_CAUSAL_DIAGONAL,  # noqa: F401 - a hint of the debug task's judge, named by the tests
    HINT_CAUSAL_INVERTED,  # noqa: F401 - idem
    HINT_K_NOT_TRANSPOSED,
    HINT_K_REVERSED,
    HINT_NO_SCALE,
    HINT_PAIR_ORDER,
    HINT_SCALE_D_V,
    HINT_SCALE_MULTIPLIES,
    HINT_SCALE_NO_SQRT,
    HINT_SCALE_WRONG_DIM,
    HINT_SCORES_TRANSPOSED,
    HINT_SOFTMAX_DIM_1,  # noqa: F401 - named by chapter 5's tests
)
from coursepkg.checks.core import (
    Args,
    CheckError,
    Task,
    Verdict,
    draw_seed,
    draw_sizes,
    hidden,
    question,
    register,
)
from coursepkg.checks.forbidden import ATTENTION_KERNELS
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    Variant,
    classifier_accuracy,
    classifier_advice,
    decode,
    fit_classifier,
    generator,
    normal,
    parts_plain,
    tensor_judge,
    train_task,
    training_cases,
    with_weights,
)
from coursepkg.self_attention import SelfAttention, causal_mask

__all__ = [
    "ASSIGNMENT",
    "RecallModel",
    "causal_self_attention",
    "local_mask",
    "qkv_scores",
    "recall_data",
    "train_recall",
]

ASSIGNMENT = "04_self_attention"


# The package's attention code, torch's fused attention and its multi-head module do the whole
# task; a student must write the projections, the scores, the mask and the softmax.
_NO_ATTENTION_LIBRARIES = (
    "coursepkg.self_attention",
    "coursepkg.lm",
    "coursepkg.attention",
    "coursepkg.multihead",
    "coursepkg.transformer",
    "coursepkg.checks",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
    *ATTENTION_KERNELS,
)
# torch's own causal-mask helper (a float 0 / -inf mask) is also off limits in task 4.2.
_NO_MASK_LIBRARIES = (
    *_NO_ATTENTION_LIBRARIES,
    "torch.nn.Transformer.generate_square_subsequent_mask",
)


# --------------------------------------------------------------------------------------------
# Hints shared by the tasks
# --------------------------------------------------------------------------------------------

HINT_SCALE_D_MODEL = (
    "Scale by sqrt(d_k), the width of the queries and keys (q.shape[-1]), not sqrt(d_model), "
    "the width of x: the scores are dot products of d_k numbers."
)
HINT_QT_K = (
    "The scores compare every query with every key, Q K^T: (..., T, Dk) @ (..., Dk, T) -> "
    "(..., T, T). Q^T K multiplies features with features, (Dk, Dk)."
)


# --------------------------------------------------------------------------------------------
# Task 4.1 qkv_scores
# --------------------------------------------------------------------------------------------

HINT_NOT_TRANSPOSED_W = (
    "Multiply by the transposed weights: w_q, w_k (Dk, D) and w_v (Dv, D) have one row per "
    "output feature, like nn.Linear's weight, so q = x @ w_q.T, k = x @ w_k.T, v = x @ w_v.T."
)
HINT_WQ_WK_SWAPPED = (
    "w_q makes the queries and w_k the keys: q = x @ w_q.T, k = x @ w_k.T. With the two "
    "swapped, the score matrix comes out transposed."
)
HINT_WRONG_V = "The values have their own projection: v = x @ w_v.T."
HINT_RETURN_SCALED_Q = (
    "Return the projections themselves, q = x @ w_q.T and k = x @ w_k.T; the division by "
    "sqrt(d_k) belongs to the scores only."
)
HINT_SCORES_SOFTMAXED = (
    "Return the scores, not the weights: the softmax (and the mask) come later, in task 4.2."
)
HINT_PROJECTION_SHAPE = (
    "q and k are (B, T, Dk), v is (B, T, Dv): x (B, T, D) times the transposed weights "
    "(D, Dk), (D, Dk), (D, Dv)."
)
HINT_SCORES_SHAPE = "The scores are (B, T, T): one score per pair (query t, key s)."
HINT_QKV_GENERIC = (
    "Project x three times with the transposed weights (they hold one row per output feature, "
    "like nn.Linear's), then compare every query with every key: the scores are Q K^T, with "
    "only the last two dims of the keys transposed, divided by the square root of d_k, the "
    "queries' width."
)
_QKV_NAMES = ("q", "k", "v", "scores")


def _build_qkv_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, D = int(args["B"]), int(args["T"]), int(args["D"])
    Dk, Dv = int(args["Dk"]), int(args["Dv"])
    x = normal(gen, (B, T, D), 1.0, dtype)
    # Scaled so that q, k, v have unit variance, and the scaled scores too.
    w_q = normal(gen, (Dk, D), 1 / math.sqrt(D), dtype)
    w_k = normal(gen, (Dk, D), 1 / math.sqrt(D), dtype)
    w_v = normal(gen, (Dv, D), 1 / math.sqrt(D), dtype)
    return x, w_q, w_k, w_v


def _layer(w_q: Tensor, w_k: Tensor, w_v: Tensor, causal: bool) -> SelfAttention:
    """A :class:`SelfAttention` head holding the given weights (no bias)."""
    d_k, d_model = w_q.shape
    return with_weights(lambda: SelfAttention(d_model, d_k, w_v.shape[0], causal=causal),
                        w_q.dtype, {"w_q.weight": w_q, "w_k.weight": w_k, "w_v.weight": w_v})


def qkv_scores(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> tuple[Tensor, ...]:
    """Task 4.1's reference: the projections of :class:`SelfAttention` and its score matrix.

    Args:
        x: (B, T, D) the input vectors.
        w_q: (Dk, D); w_k: (Dk, D); w_v: (Dv, D), nn.Linear-style weights.

    Returns:
        ``(q (B, T, Dk), k (B, T, Dk), v (B, T, Dv), scores (B, T, T))`` with
        ``scores = q @ k^T / sqrt(Dk)``, as in :func:`scaled_dot_product_attention`.
    """
    layer = _layer(w_q, w_k, w_v, causal=False)
    with torch.no_grad():
        q, k, v = layer.w_q(x), layer.w_k(x), layer.w_v(x)
    return q, k, v, q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _qkv_to_plain(value: object) -> list[dict]:
    return parts_plain(value, _QKV_NAMES)


def _qkv_variants(inputs: tuple) -> list[Variant]:
    x, w_q, w_k, w_v = inputs
    D = x.shape[-1]
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    Dk, Dv, T = q.shape[-1], v.shape[-1], q.shape[1]
    raw = q @ k.transpose(-2, -1)  # (B, T, T) unscaled

    def with_scores(scores: Callable[[], Tensor]) -> Callable[[], tuple[Tensor, ...]]:
        return lambda: (q, k, v, scores())

    return [
        (HINT_NO_SCALE, with_scores(lambda: raw), ""),
        (HINT_SCALE_D_MODEL, with_scores(lambda: raw / math.sqrt(D)), ""),
        (HINT_SCALE_D_V, with_scores(lambda: raw / math.sqrt(Dv)), ""),
        (HINT_SCALE_NO_SQRT, with_scores(lambda: raw / Dk), ""),
        (HINT_SCALE_MULTIPLIES, with_scores(lambda: raw * math.sqrt(Dk)), ""),
        (HINT_SCALE_WRONG_DIM, with_scores(lambda: raw / math.sqrt(T)), ""),
        (HINT_SCORES_SOFTMAXED, with_scores(lambda: torch.softmax(raw / math.sqrt(Dk), -1)), ""),
        (HINT_SCORES_TRANSPOSED, with_scores(lambda: k @ q.transpose(-2, -1) / math.sqrt(Dk)),
         ""),
        (HINT_K_NOT_TRANSPOSED, with_scores(lambda: q @ k / math.sqrt(Dk)), ""),
        (HINT_K_REVERSED, with_scores(lambda: q @ bank.reversed_dims(k) / math.sqrt(Dk)), ""),
        (HINT_QT_K, with_scores(lambda: q.transpose(-2, -1) @ k / math.sqrt(Dk)), ""),
        (HINT_WQ_WK_SWAPPED, lambda: (k, q, v, raw.transpose(-2, -1) / math.sqrt(Dk)), ""),
        (HINT_RETURN_SCALED_Q, lambda: (q / math.sqrt(Dk), k, v, raw / math.sqrt(Dk)), ""),
        (HINT_RETURN_SCALED_Q, lambda: (q / Dk**0.25, k / Dk**0.25, v, raw / math.sqrt(Dk)),
         ""),
        (HINT_WRONG_V, lambda: (q, k, x @ w_k.T, raw / math.sqrt(Dk)), ""),
        (HINT_WRONG_V, lambda: (q, k, x, raw / math.sqrt(Dk)), ""),
        (HINT_NOT_TRANSPOSED_W, lambda: _qkv_untransposed(x, w_q, w_k, w_v), ""),
    ]


def _qkv_untransposed(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> tuple[Tensor, ...]:
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # runs only for square weights
    return q, k, v, q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _qkv_shape_hint(got: list, expected: list, k: int) -> str:
    (B, T, Dk), _, _, _ = expected
    if k < 3:
        return HINT_PROJECTION_SHAPE
    if got[3] == (B, Dk, Dk):
        return HINT_QT_K
    return HINT_SCORES_SHAPE


_judge_qkv = tensor_judge(_build_qkv_args, _QKV_NAMES, _qkv_variants, _qkv_shape_hint,
                          HINT_QKV_GENERIC)


@dataclass(frozen=True)
class Projections(Args):
    """A case of task 4.1 (and, with ``causal``, of task 4.4): x (B, T, D), w_q and w_k
    (Dk, D), w_v (Dv, D)."""

    seed: int
    B: int
    T: int
    D: int
    Dk: int
    Dv: int
    dtype: str = "float32"


_QKV_CASES = (
    Projections(401, B=2, T=5, D=6, Dk=4, Dv=3).case(
        "2 sequences of 5 vectors; D = 6, Dk = 4, Dv = 3"),
    Projections(402, B=4, T=4, D=4, Dk=4, Dv=4).case("every size 4 (B = T = D = Dk = Dv)"),
    Projections(403, B=3, T=3, D=8, Dk=2, Dv=5).case(
        "3 sequences of 3 vectors; D = 8, Dk = 2, Dv = 5"),
)


def _widths(rng: random.Random, *, B: int | None = None, T: int | None = None,
            large: bool = False) -> dict:
    """Sizes drawn from ``rng``: D, Dk, Dv and T all different (T as given)."""
    D, Dk, Dv, length = draw_sizes(rng, 4, 12, 36) if large else draw_sizes(rng, 4, 2, 8)
    B = (rng.randint(3, 5) if large else rng.randint(2, 4)) if B is None else B
    return {"seed": draw_seed(rng), "B": B, "T": length if T is None else T, "D": D, "Dk": Dk,
            "Dv": Dv}


_QKV_HIDDEN = (
    hidden("hidden: float64", lambda rng: Projections(**_widths(rng), dtype="float64")),
    hidden("hidden: one position", lambda rng: Projections(**_widths(rng, T=1))),
    hidden("hidden: a batch of one", lambda rng: Projections(**_widths(rng, B=1))),
    hidden("hidden: larger sizes", lambda rng: Projections(**_widths(rng, large=True))),
)

register(
    Task(
        id="4.1",
        assignment=ASSIGNMENT,
        func_name="qkv_scores",
        title="The query, key and value projections and the score matrix Q K^T / sqrt(d_k)",
        cases=_QKV_CASES,
        hidden=_QKV_HIDDEN,
        build_args=_build_qkv_args,
        reference=qkv_scores,
        to_plain=_qkv_to_plain,
        judge=_judge_qkv,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x is (B, T, D) and the weights (Dk, D), (Dk, D), (Dv, D), so q = x @ w_q.T is "
            "(B, T, Dk); the scores are q @ k.transpose(-2, -1), (B, T, Dk) @ (B, Dk, T) -> "
            "(B, T, T). k.T would reverse all three dims of k.",
            "CheckError": "Return the four tensors (q, k, v, scores).",
        },
    )
)



# --------------------------------------------------------------------------------------------
# Masks as plain values (task 4.2, and the shape of the answers of the mask mistakes)
# --------------------------------------------------------------------------------------------

HINT_MASK_BOOL = (
    "Return a boolean tensor (dtype=torch.bool), True = may attend: ~mask and masked_fill "
    "need booleans, and a mask of numbers is not one, even with its 1s in the right places."
)
HINT_MASK_ADDITIVE = (
    "That is an additive mask (0 where allowed, a negative number or -inf where not), another "
    "convention: this course's masks are boolean, True where query t may attend to key s."
)


def _mask_to_plain(value: object) -> dict:
    """A returned mask -> ``{"shape", "dtype", "data"}``, its values as 0/1 (bool) or floats.

    Any real tensor is accepted here (the judge names a float or an additive mask); anything
    else is a CheckError.
    """
    if not isinstance(value, torch.Tensor):
        raise CheckError(f"expected the mask as a torch.Tensor, got {type(value).__name__}")
    if value.is_complex():
        raise CheckError(f"expected the mask as a boolean tensor, got dtype {value.dtype}")
    value = value.detach().to("cpu")
    as_numbers = value.to(torch.int64 if value.dtype == torch.bool else torch.float64)
    return {
        "shape": list(value.shape),
        "dtype": str(value.dtype).removeprefix("torch."),
        "data": as_numbers.reshape(-1).tolist(),
    }


def _decode_mask(plain: object) -> tuple[tuple[int, ...], str, Tensor]:
    """A plain mask -> (shape, dtype name, float64 values); ValueError if it is malformed."""
    shape, dtype, values = decode(plain)
    if dtype == "bool" and not bool(((values == 0) | (values == 1)).all()):
        raise ValueError("a bool mask holds 0 and 1 only")
    return shape, dtype, values


def _mask_difference(got: Tensor, expected: Tensor) -> str:
    """``"mask[0, 1, 2]: expected False, got True (3 of 48 values differ)."``"""
    wrong = (got != expected).nonzero()
    index = ", ".join(str(int(i)) for i in wrong[0])
    return (
        f"mask[{index}]: expected {bool(expected[tuple(wrong[0])])}, "
        f"got {bool(got[tuple(wrong[0])])} ({len(wrong)} of {got.numel()} values differ)."
    )


# --------------------------------------------------------------------------------------------
# Task 4.2 local_mask (extension)
# --------------------------------------------------------------------------------------------

HINT_LOCAL_WIDE = (
    "The window holds W positions, the query's own included: query t sees keys t - W + 1 to t. "
    "Yours lets it see one key more, W + 1 of them."
)
HINT_LOCAL_NARROW = (
    "The window holds W positions, the query's own included: query t sees keys t - W + 1 to t. "
    "Yours has only W - 1 of them."
)
HINT_LOCAL_SYMMETRIC = (
    "Local attention here is causal too: the window ends at the query and reaches back W - 1 "
    "positions; keys after t stay hidden. Yours is centred on the query and sees the future."
)
HINT_LOCAL_FUTURE = (
    "The window reaches BACK from the query: keys t - W + 1 to t, the past and the token itself. "
    "Yours reaches forward, into the future."
)
HINT_LOCAL_NO_WINDOW = (
    "The window is missing: query t must not see keys more than W - 1 positions back, however "
    "many real tokens there are before it."
)
HINT_LOCAL_PADDING_IGNORED = (
    "Padding is ignored: a position where keep is False holds no token, so no real query may "
    "attend to it as a key (its column is False in the rows of real queries)."
)
HINT_LOCAL_PADDING_QUERIES = (
    "keep says which KEYS exist: hide the columns of padding positions. Yours hides the rows "
    "of padding queries instead, so real queries still attend to padding and padding rows are "
    "empty."
)
HINT_LOCAL_EMPTY_ROWS = (
    "A padding query must still attend to something, or its softmax divides 0 by 0 (NaN): let "
    "each padding query attend to itself only (its diagonal entry), and to nothing else."
)
HINT_LOCAL_PADDING_ROWS = (
    "The row of a padding query (keep False at t) is its diagonal entry alone: a padding "
    "position attends to itself only, whatever real keys its window holds."
)
HINT_LOCAL_FIRST_ROW = (
    "Each sequence has its own padding: use keep[b] for sequence b, not the first sequence's "
    "pattern for all of them."
)
HINT_LOCAL_LENGTHS = (
    "Padding is not always at the end: keep may hide positions at the start (left padding) or "
    "anywhere. Use keep itself, position by position, rather than a length per sequence."
)
HINT_LOCAL_INVERTED = (
    "True means MAY attend: your mask is True exactly where attention must be hidden. Return "
    "its complement."
)
HINT_LOCAL_SHAPE = "Return a (B, T, T) mask: one (T, T) mask per sequence, rows for queries."
HINT_LOCAL_GENERIC = (
    "Build the mask from three facts: key s is inside query t's window (from W - 1 positions "
    "back up to t itself), key s holds a token (keep), and a padding query attends to itself "
    "alone; combine them for each sequence of the batch."
)


def local_mask(keep: Tensor, window: int) -> Tensor:
    """Task 4.2's reference: the mask of sliding-window causal attention over a padded batch.

    Args:
        keep: (B, T) bool, True where position t of sequence b holds a token, False where it
            is padding (at the end, at the start or anywhere).
        window: W >= 1, the number of positions a query sees, its own included.

    Returns:
        BoolTensor (B, T, T): for a real query t, True at the real keys s with
        t - W < s <= t; for a padding query t, True at (t, t) only.
    """
    T = keep.shape[-1]
    position = torch.arange(T)
    offset = position[:, None] - position[None, :]  # (T, T): t - s
    inside = (offset >= 0) & (offset < window)  # (T, T)
    real = inside & keep[:, None, :] & keep[:, :, None]  # (B, T, T)
    itself = torch.eye(T, dtype=torch.bool) & ~keep[:, :, None]  # (B, T, T)
    return real | itself


def _band(T: int, low: int, high: int) -> Tensor:
    """(T, T): True where low <= t - s <= high."""
    position = torch.arange(T)
    offset = position[:, None] - position[None, :]
    return (offset >= low) & (offset <= high)


def _with_padding(band: Tensor, keep: Tensor) -> Tensor:
    """The right padding rules around another (T, T) band."""
    T = keep.shape[-1]
    itself = torch.eye(T, dtype=torch.bool) & ~keep[:, :, None]
    return (band & keep[:, None, :] & keep[:, :, None]) | itself


def _local_variants(keep: Tensor, W: int) -> list[tuple[str, Callable[[], Tensor]]]:
    T = keep.shape[-1]
    band = _band(T, 0, W - 1)
    B = keep.shape[0]
    lengths = keep.sum(dim=-1)  # (B,)
    as_right_padding = torch.arange(T)[None, :] < lengths[:, None]
    return [
        (HINT_LOCAL_INVERTED, lambda: ~local_mask(keep, W)),
        (HINT_LOCAL_WIDE, lambda: _with_padding(_band(T, 0, W), keep)),
        (HINT_LOCAL_NARROW, lambda: _with_padding(_band(T, 0, W - 2), keep)),
        (HINT_LOCAL_SYMMETRIC, lambda: _with_padding(_band(T, 1 - W, W - 1), keep)),
        (HINT_LOCAL_FUTURE, lambda: _with_padding(_band(T, 1 - W, 0), keep)),
        (HINT_LOCAL_NO_WINDOW, lambda: _with_padding(_band(T, 0, T), keep)),
        (HINT_LOCAL_PADDING_IGNORED, lambda: band.expand(B, T, T).clone()),
        (HINT_LOCAL_EMPTY_ROWS, lambda: band & keep[:, None, :] & keep[:, :, None]),
        (HINT_LOCAL_PADDING_QUERIES, lambda: band & keep[:, :, None]),
        (HINT_LOCAL_PADDING_ROWS, lambda: band & keep[:, None, :]),
        (HINT_LOCAL_PADDING_ROWS, lambda: (band & keep[:, None, :])
         | (torch.eye(T, dtype=torch.bool) & ~keep[:, :, None])),
        (HINT_LOCAL_FIRST_ROW, lambda: _with_padding(band, keep[:1].expand(B, T))),
        (HINT_LOCAL_LENGTHS, lambda: _with_padding(band, as_right_padding)),
    ]


def _build_local_args(args: dict) -> tuple:
    return masks.as_tensor(args["keep"]), int(args["window"])


def _judge_local(got: object, expected: object, args: dict) -> Verdict:
    got_shape, got_dtype, values = _decode_mask(got)
    expected_shape, _, want = _decode_mask(expected)
    keep, W = _build_local_args(args)
    if got_shape != expected_shape:
        return Verdict(False, HINT_LOCAL_SHAPE,
                       f"Expected a mask of shape {expected_shape}, got {got_shape}.")
    detail = ""
    if got_dtype != "bool":
        allowed = want.bool()
        detail = f"Expected dtype torch.bool, got torch.{got_dtype}."
        if bool((values[allowed] == 0).all()) and bool((values[~allowed] < 0).all()):
            return Verdict(False, HINT_MASK_ADDITIVE, detail)
        return Verdict(False, HINT_MASK_BOOL, detail)
    if torch.equal(values, want):
        return Verdict(True)
    detail = _mask_difference(values, want)
    pattern = values.bool()
    for hint, wrong in _local_variants(keep, W):
        if torch.equal(pattern, wrong()):
            return Verdict(False, hint, detail)
    return Verdict(False, HINT_LOCAL_GENERIC, detail)


@dataclass(frozen=True)
class Window(Args):
    """A case of task 4.2: which positions hold tokens, (B, T) as lists of bools, and W."""

    keep: list
    window: int


def _kept(lengths: list[int], T: int, *, left: bool = False) -> list[list[bool]]:
    """Right padding (tokens first) or, with ``left``, left padding (tokens last)."""
    return [[(t >= T - n) if left else (t < n) for t in range(T)] for n in lengths]


_LOCAL_CASES = (
    Window(_kept([6], 6), 3).case("one sequence of 6 tokens, no padding, a window of 3"),
    Window(_kept([6, 4], 6), 2).case("right padding (lengths 6 and 4), a window of 2"),
    Window(_kept([5, 2, 7], 7, left=True), 3).case(
        "left padding (lengths 5, 2 and 7, the tokens at the end), a window of 3"),
    Window(_kept([5, 3], 5), 8).case("a window longer than the sequences, right padding"),
)


def _random_keep(rng: random.Random, B: int, T: int) -> list[list[bool]]:
    """B rows of T: tokens and padding anywhere, each row with a token and one row with a gap."""
    rows = []
    for _ in range(B):
        row = [rng.random() < 0.65 for _ in range(T)]
        row[rng.randrange(T)] = True
        rows.append(row)
    if all(all(row) for row in rows):
        rows[rng.randrange(B)][rng.randrange(T)] = False
    return rows


def _hidden_random(rng: random.Random) -> Window:
    T = rng.randint(6, 9)
    return Window(_random_keep(rng, rng.randint(2, 4), T), rng.randint(2, 4))


def _hidden_left(rng: random.Random) -> Window:
    T = rng.randint(5, 9)
    lengths = masks.random_lengths(rng, rng.randint(2, 4), T)
    return Window(_kept(lengths, T, left=True), rng.randint(2, 4))


def _hidden_one(rng: random.Random) -> Window:
    T = rng.randint(4, 8)
    return Window(_kept(masks.random_lengths(rng, rng.randint(2, 3), T), T), 1)


def _hidden_longer(rng: random.Random) -> Window:
    T = rng.randint(12, 20)
    return Window(_random_keep(rng, rng.randint(2, 3), T), rng.randint(3, 6))


_LOCAL_HIDDEN = (
    hidden("hidden: padding anywhere, not only at one end", _hidden_random),
    hidden("hidden: left padding", _hidden_left),
    hidden("hidden: a window of 1", _hidden_one),
    hidden("hidden: one position", lambda rng: Window([[True]] * rng.randint(1, 3),
                                                      rng.randint(1, 3))),
    hidden("hidden: longer sequences", _hidden_longer),
)

register(
    Task(
        id="4.2",
        assignment=ASSIGNMENT,
        func_name="local_mask",
        title="The mask of sliding-window causal attention over a padded batch",
        cases=_LOCAL_CASES,
        hidden=_LOCAL_HIDDEN,
        build_args=_build_local_args,
        reference=local_mask,
        to_plain=_mask_to_plain,
        judge=_judge_local,
        forbidden=_NO_MASK_LIBRARIES,
        error_hints={
            "CheckError": "Return a (B, T, T) torch.bool tensor, True where query t of "
            "sequence b may attend to key s.",
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "keep is (B, T), the mask (B, T, T); to combine a (T, T) pattern with what each "
            "sequence keeps, give keep a dim of size 1 where the pattern has its rows or its "
            "columns.",
        },
        kind="extension",
    )
)


# --------------------------------------------------------------------------------------------
# Task 4.3 causal_self_attention (debug)
# --------------------------------------------------------------------------------------------

#: The planted bugs of the exercise's starter code, by name, with what a run of it shows.
HINT_DEBUG_VALUES = (
    "The values are made with the wrong weights: each of the three projections has its own "
    "matrix, and the values' one is the only matrix of width Dv."
)
HINT_DEBUG_SCALE = (
    "The scores are divided by d_k: the spread of a dot product of d_k unit-variance terms is "
    "the SQUARE ROOT of d_k, and dividing by d_k itself flattens the weights as d_k grows."
)
HINT_DEBUG_LEAK = (
    "The mask leaks the future: each position can also see the next one (its key at t + 1). "
    "Query t may attend to keys 0..t only, the diagonal included and nothing above it."
)
HINT_DEBUG_SOFTMAX = (
    "The softmax normalises the wrong axis: it makes each COLUMN (one key, all the queries) sum "
    "to 1. Each row of the weights is one query's distribution over the keys and must sum to 1."
)
PREFIX_DEBUG_SEVERAL = "Several bugs are still there:"
HINT_DEBUG_DIAGONAL = (
    "The mask now hides too much: a position may attend to itself (the diagonal), or the first "
    "position has no key at all (NaN)."
)
HINT_DEBUG_INVERTED = (
    "The mask is applied inverted: the scores filled with -inf must be those of the keys a "
    "query may NOT see, the future; yours hides the past and shows the future."
)
HINT_DEBUG_D_MODEL = (
    "Scale by the square root of d_k, the width of the queries and keys, not of D, the width "
    "of the input vectors."
)
HINT_DEBUG_OUT_SHAPE = "Return (out, weights): out (B, T, Dv), weights (B, T, T)."
HINT_DEBUG_GENERIC = (
    "Run the starter code on a small input and look at what it returns: do the weights of "
    "each query sum to 1 over the keys, is every weight above the diagonal exactly 0, do the "
    "scores have the scale the chapter derives, and is each projection made with its own "
    "matrix?"
)

_BUG_HINTS = {
    "values": HINT_DEBUG_VALUES,
    "scale": HINT_DEBUG_SCALE,
    "leak": HINT_DEBUG_LEAK,
    "softmax": HINT_DEBUG_SOFTMAX,
}


def with_bugs(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, bugs: frozenset = frozenset(),
              *, diagonal: int | None = None, inverted: bool = False,
              scale: float | None = None) -> tuple[Tensor, Tensor]:
    """Causal self-attention with some of the starter code's bugs (``bugs``, names of
    :data:`_BUG_HINTS`) and other mistakes: a mask ``tril(diagonal)``, filled where it is True
    (``inverted``), scores divided by ``scale``."""
    T = x.shape[1]
    q, k = x @ w_q.T, x @ w_k.T
    v = x @ (w_k if "values" in bugs else w_v).T
    if scale is None:
        scale = q.shape[-1] if "scale" in bugs else math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) / scale
    if diagonal is None:
        diagonal = 1 if "leak" in bugs else 0
    allowed = torch.ones(T, T, dtype=torch.bool).tril(diagonal)
    scores = scores.masked_fill(allowed if inverted else ~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=1 if "softmax" in bugs else -1)
    return weights @ v, weights


def causal_self_attention(x: Tensor, w_q: Tensor, w_k: Tensor,
                          w_v: Tensor) -> tuple[Tensor, Tensor]:
    """Task 4.3's reference (the starter code fixed): one causal self-attention head.

    Args:
        x: (B, T, D) the input vectors.
        w_q: (Dk, D); w_k: (Dk, D); w_v: (Dv, D), nn.Linear-style weights.

    Returns:
        ``(out (B, T, Dv), weights (B, T, T))``, query t attending to keys 0..t.
    """
    layer = with_weights(lambda: SelfAttention(w_q.shape[1], w_q.shape[0], w_v.shape[0],
                                               causal=True),
                         w_q.dtype, {"w_q.weight": w_q, "w_k.weight": w_k, "w_v.weight": w_v})
    with torch.no_grad():
        return layer(x)


def debug_hint(bugs: frozenset) -> str:
    """The feedback to the starter code with ``bugs`` left (one hint, or each of them)."""
    hints = [_BUG_HINTS[name] for name in _BUG_HINTS if name in bugs]
    return hints[0] if len(hints) == 1 else " ".join([PREFIX_DEBUG_SEVERAL, *hints])


#: Every combination of the starter code's bugs, one bug first.
BUG_SETS = tuple(frozenset(combo) for n in range(1, len(_BUG_HINTS) + 1)
                 for combo in itertools.combinations(_BUG_HINTS, n))


def _debug_variants(inputs: tuple) -> list[Variant]:
    x, w_q, w_k, w_v = inputs
    variants: list[Variant] = [
        (debug_hint(bugs), lambda bugs=bugs: with_bugs(x, w_q, w_k, w_v, bugs), "")
        for bugs in BUG_SETS
    ]
    variants += [
        (HINT_DEBUG_DIAGONAL, lambda: with_bugs(x, w_q, w_k, w_v, diagonal=-1), ""),
        (HINT_DEBUG_INVERTED, lambda: with_bugs(x, w_q, w_k, w_v, inverted=True), ""),
        (HINT_DEBUG_D_MODEL,
         lambda: with_bugs(x, w_q, w_k, w_v, scale=math.sqrt(x.shape[-1])), ""),
        (HINT_NO_SCALE, lambda: with_bugs(x, w_q, w_k, w_v, scale=1.0), ""),
    ]
    return variants


def _debug_shape_hint_for(inputs: tuple) -> Callable[[list, list, int], str]:
    Dk = inputs[1].shape[0]

    def hint(got: list, expected: list, k: int) -> str:
        out_shape, weights_shape = expected
        if got[0] == weights_shape and got[1] == out_shape:
            return HINT_PAIR_ORDER
        if k == 0 and got[0] == (*out_shape[:-1], Dk):
            return HINT_DEBUG_VALUES
        return HINT_DEBUG_OUT_SHAPE

    return hint


_judge_debug = tensor_judge(_build_qkv_args, ("out", "weights"), _debug_variants,
                            _debug_shape_hint_for, HINT_DEBUG_GENERIC, inputs_shape_hint=True)

_DEBUG_CASES = (
    Projections(431, B=2, T=5, D=6, Dk=4, Dv=4).case("2 sequences of 5; D = 6, Dk = Dv = 4"),
    Projections(432, B=1, T=4, D=5, Dk=3, Dv=3).case("1 sequence of 4; D = 5, Dk = Dv = 3"),
    Projections(433, B=3, T=6, D=8, Dk=2, Dv=5).case("3 sequences of 6; D = 8, Dk = 2, Dv = 5"),
)


def _debug_sizes(rng: random.Random, **fixed) -> Projections:
    sizes = _widths(rng, **fixed)
    sizes["Dv"] = sizes["Dk"]  # the values' bug shows in the numbers, not only in the shape
    return Projections(**sizes)


_DEBUG_HIDDEN = (
    hidden("hidden: float64", lambda rng: Projections(**{**_widths(rng), "dtype": "float64"})),
    hidden("hidden: Dv = Dk", _debug_sizes),
    hidden("hidden: larger sizes", lambda rng: _debug_sizes(rng, large=True)),
)

register(
    Task(
        id="4.3",
        assignment=ASSIGNMENT,
        func_name="causal_self_attention",
        title="Fix a causal self-attention head with planted bugs",
        cases=_DEBUG_CASES,
        hidden=_DEBUG_HIDDEN,
        build_args=_build_qkv_args,
        reference=causal_self_attention,
        to_plain=lambda value: parts_plain(value, ("out", "weights")),
        judge=_judge_debug,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x is (B, T, D) and the weights (Dk, D), (Dk, D), (Dv, D), one row per output "
            "feature; the scores of one sequence are (T, T), and so is its mask.",
            "CheckError": "Return a pair (out, weights) of tensors.",
        },
        kind="debug",
    )
)


# --------------------------------------------------------------------------------------------
# Task 4.4 train_recall (train)
# --------------------------------------------------------------------------------------------

#: The recall task's letters, digits and pairs per sequence; the training and held-out sizes.
RECALL_LETTERS = 16
RECALL_DIGITS = 10
RECALL_PAIRS = 8
RECALL_TRAIN = 2000
RECALL_HELD_OUT = 2000
#: RecallModel's widths: D of the embeddings and of the values, Dk of queries and keys.
RECALL_D = 32
RECALL_D_K = 16
#: Full marks from 0.95 held-out accuracy, half from 0.7, a quarter from 0.4 (chance: 0.1).
RECALL_BANDS = ((0.95, 1.0), (0.7, 0.5), (0.4, 0.25))
#: Seconds one training may take (measured on one thread); the reference needs about one.
RECALL_TIME_LIMIT = 10.0

HINT_RECALL_TRAIN = (
    "The model is confident but wrong on held-out sequences: it learnt something else than the "
    "task. Train on the sequences and answers given, with the cross-entropy of the digit "
    "predicted at the query, and clear the gradients before every backward pass."
)
HINT_RECALL_PARTIAL = (
    "Partial credit: the model has learnt part of the task. Train for more steps (or with a "
    "larger learning rate) on the sequences given, and watch the training loss fall."
)
HINT_RECALL_UNTRAINED = (
    "The model's predictions are close to uniform: it links no sequence to its answer. Is it "
    "trained at all (a backward pass and an optimizer step on the parameters of the model you "
    "return), and does each minibatch pair the sequences with their own answers?"
)


class RecallModel(nn.Module):
    """The course model of task 4.4: one self-attention head reads a set of letter-digit pairs
    and a query letter, and predicts the digit paired with the query's letter.

    A token is a pair (letter, digit), its vector the sum of a letter's and a digit's
    embedding; the query is the last token, its digit the extra symbol ``RECALL_DIGITS``
    ("?"). The head (:class:`coursepkg.self_attention.SelfAttention`, no positions: the pairs
    are a set) lets every token attend to every token, and a linear layer reads the query's
    output.
    """

    def __init__(self) -> None:
        super().__init__()
        self.letters = nn.Embedding(RECALL_LETTERS, RECALL_D)
        self.digits = nn.Embedding(RECALL_DIGITS + 1, RECALL_D)
        self.head = SelfAttention(RECALL_D, d_k=RECALL_D_K, d_v=RECALL_D)
        self.out = nn.Linear(RECALL_D, RECALL_DIGITS)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (B, P + 1, 2) of (letter, digit), the query last -> logits (B, digits)."""
        x = self.letters(tokens[..., 0]) + self.digits(tokens[..., 1])  # (B, P + 1, D)
        out, _ = self.head(x)  # (B, P + 1, D)
        return self.out(out[:, -1])  # (B, digits): read at the query


#: Every name of RecallModel's state_dict and its shape.
RECALL_SHAPES = {
    "letters.weight": (RECALL_LETTERS, RECALL_D),
    "digits.weight": (RECALL_DIGITS + 1, RECALL_D),
    "head.w_q.weight": (RECALL_D_K, RECALL_D),
    "head.w_k.weight": (RECALL_D_K, RECALL_D),
    "head.w_v.weight": (RECALL_D, RECALL_D),
    "out.weight": (RECALL_DIGITS, RECALL_D),
    "out.bias": (RECALL_DIGITS,),
}


def recall_data(seed: int, n: int, *, answer: str = "query") -> tuple[Tensor, Tensor]:
    """``n`` sequences of the recall task and their answers, drawn from ``seed``.

    Each sequence holds :data:`RECALL_PAIRS` pairs (letter, digit) with different letters, then
    the query (one of those letters, with the digit "?" = :data:`RECALL_DIGITS`).

    Args:
        seed: seeds the draw.
        n: the number of sequences.
        answer: ``"query"``: the digit paired with the query's letter (the task);
            ``"first"``: the first pair's digit (another task, for the tests).

    Returns:
        ``(tokens (n, P + 1, 2) int64, targets (n,) int64)``.
    """
    gen = torch.Generator().manual_seed(int(seed))
    letters = torch.rand(n, RECALL_LETTERS, generator=gen).argsort(dim=-1)[:, :RECALL_PAIRS]
    digits = torch.randint(0, RECALL_DIGITS, (n, RECALL_PAIRS), generator=gen)
    chosen = torch.randint(0, RECALL_PAIRS, (n, 1), generator=gen)
    query = torch.stack([letters.gather(1, chosen), torch.full_like(chosen, RECALL_DIGITS)], -1)
    tokens = torch.cat([torch.stack([letters, digits], dim=-1), query], dim=1)
    which = chosen[:, 0] if answer == "query" else torch.zeros(n, dtype=torch.long)
    return tokens, digits.gather(1, which[:, None])[:, 0]


def _build_recall_args(args: dict) -> tuple:
    """The student's arguments: the training sequences, their answers and a seed (never the
    held-out seed, which :func:`coursepkg.checks.core.student_args` holds back)."""
    tokens, targets = recall_data(int(args["seed"]), int(args["n"]))
    return tokens, targets, int(args["seed"])


def recall_held_out(args: dict) -> tuple[Tensor, Tensor]:
    """The ``expected`` hook: held-out sequences drawn from the case's ``"_heldout"`` seed."""
    return recall_data(int(args["_heldout"]), RECALL_HELD_OUT)


def train_recall(tokens: Tensor, targets: Tensor, seed: int) -> RecallModel:
    """Task 4.4's reference: Adam on minibatches of 64 sequences, 150 steps (about 0.3 s of CPU
    on one thread).

    Args:
        tokens: (N, P + 1, 2) the training sequences; targets: (N,) their answers;
        seed: seeds the initialisation and the minibatches.

    Returns:
        The trained :class:`RecallModel`.
    """
    torch.manual_seed(seed)
    model = RecallModel()
    return fit_classifier(model, tokens, targets, seed, steps=150, lr=0.01)


register(
    train_task(
        "4.4",
        ASSIGNMENT,
        "train_recall",
        "Train a one-head model to recall the digit paired with a query letter",
        **training_cases("2,000 training sequences", RECALL_TRAIN, 441, 9441),
        build_args=_build_recall_args,
        reference=train_recall,
        model=RecallModel,
        held_out=recall_held_out,
        score=classifier_accuracy,
        bands=RECALL_BANDS,
        time_limit=RECALL_TIME_LIMIT,
        metric="held-out accuracy",
        advise=classifier_advice(HINT_RECALL_PARTIAL, HINT_RECALL_TRAIN,
                                 untrained=(0.25, HINT_RECALL_UNTRAINED)),
        forbidden=("coursepkg.lm", "torch.nn.functional.scaled_dot_product_attention",
                   "torch.nn.MultiheadAttention"),
        error_hints={
            "CheckError": "Return the trained RecallModel (or its state_dict()), with the names "
            "and shapes of RecallModel().state_dict().",
            "RuntimeError": "A tensor operation failed: the sequences are (N, P + 1, 2) "
            "integers and the answers (N,); RecallModel takes the integer sequences themselves, "
            "(B, P + 1, 2), and returns (B, digits) logits.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Questions 4.5 to 4.7
# --------------------------------------------------------------------------------------------

#: The sequence length and the window of the counting questions.
QUESTION_T = 12
QUESTION_WINDOW = 4
#: The choices of question 4.7.
JACOBIAN_CHOICES = ("all of them", "the diagonal only", "all but the diagonal", "none of them")


def causal_scores_key() -> int:
    """Question 4.5's key: the allowed entries of the package's causal mask of T tokens."""
    return int(causal_mask(QUESTION_T).sum())


def local_scores_key() -> int:
    """Question 4.6's key: the allowed entries of task 4.2's mask, one unpadded sequence."""
    return int(local_mask(torch.ones(1, QUESTION_T, dtype=torch.bool), QUESTION_WINDOW).sum())


def saturated_jacobian_key() -> str:
    """Question 4.7's key: which entries of diag(a) - a a^T are 0 for a one-hot row a."""
    a = F.one_hot(torch.tensor(1), 4).to(torch.float64)
    zero = (torch.diag(a) - torch.outer(a, a)) == 0
    off = ~torch.eye(4, dtype=torch.bool)
    if bool(zero.all()):
        return JACOBIAN_CHOICES[0]
    if bool(zero.diagonal().all()) and not bool(zero[off].any()):
        return JACOBIAN_CHOICES[1]
    if bool(zero[off].all()):
        return JACOBIAN_CHOICES[2]
    return JACOBIAN_CHOICES[3]


HINT_Q_CAUSAL = (
    "Count the True entries of the causal mask row by row: row t allows the keys 0..t."
)
HINT_Q_CAUSAL_ALL = (
    "That counts every score, the masked ones too: the causal mask hides each query's future."
)
HINT_Q_CAUSAL_DIAGONAL = (
    "Almost: each query may attend to itself too, the diagonal of the mask."
)
HINT_Q_LOCAL = (
    "Count row by row: query t sees the keys of its window that exist, at most W of them."
)
HINT_Q_LOCAL_FULL = (
    "Near the start of the sequence a window is cut short: query t has only t + 1 keys before "
    "it, itself included, when t + 1 < W."
)
HINT_Q_LOCAL_CAUSAL = (
    "That is the count of full causal attention: the window also hides the keys more than "
    "W - 1 positions back."
)
HINT_Q_JACOBIAN = (
    "Write J = diag(a) - a a^T entry by entry for a row with one weight 1 and the others 0: a "
    "diagonal entry is a_s (1 - a_s), an off-diagonal one -a_s a_s'."
)
HINT_Q_JACOBIAN_DIAGONAL = (
    "Look at the diagonal entry of the key with weight 1: a_s (1 - a_s) with a_s = 1."
)
HINT_Q_JACOBIAN_NONE = (
    "A saturated softmax is the case where the gradient vanishes: compute a_s (1 - a_s) and "
    "-a_s a_s' for weights that are 0 or 1."
)
HINT_Q_JACOBIAN_OFF = (
    "The off-diagonal entries are -a_s a_s': with one weight 1 and the others 0, what is each "
    "product? And the diagonal ones, a_s (1 - a_s)?"
)


register(question(
    "4.5", ASSIGNMENT, "causal_scores_kept",
    f"Causal self-attention over T = {QUESTION_T} tokens: how many of its scores are not "
    "masked?",
    causal_scores_key, points=1, kind_of_answer="int", hint=HINT_Q_CAUSAL,
    wrong_answers=lambda: {QUESTION_T**2: HINT_Q_CAUSAL_ALL,
                           causal_scores_key() - QUESTION_T: HINT_Q_CAUSAL_DIAGONAL},
))
register(question(
    "4.6", ASSIGNMENT, "local_scores_kept",
    f"Local attention with a window of {QUESTION_WINDOW} over T = {QUESTION_T} tokens without "
    "padding: how many scores does it keep?",
    local_scores_key, points=1, kind_of_answer="int", hint=HINT_Q_LOCAL,
    wrong_answers=lambda: {QUESTION_T * QUESTION_WINDOW: HINT_Q_LOCAL_FULL,
                           causal_scores_key(): HINT_Q_LOCAL_CAUSAL},
))
register(question(
    "4.7", ASSIGNMENT, "saturated_jacobian_zeros",
    "A saturated row of weights (one weight 1, the others 0): which entries of the softmax's "
    "Jacobian diag(a) - a a^T are 0?",
    saturated_jacobian_key, points=1, kind_of_answer="choice", choices=JACOBIAN_CHOICES,
    hint=HINT_Q_JACOBIAN,
    wrong_answers=lambda: {JACOBIAN_CHOICES[1]: HINT_Q_JACOBIAN_DIAGONAL,
                           JACOBIAN_CHOICES[2]: HINT_Q_JACOBIAN_OFF,
                           JACOBIAN_CHOICES[3]: HINT_Q_JACOBIAN_NONE},
))
