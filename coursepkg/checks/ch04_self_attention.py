"""Chapter 4 tasks (``04_self_attention``): the projections and the score matrix, scaled
dot-product attention, the causal mask, and a self-attention layer's forward pass.

The conventions are those of :mod:`coursepkg.self_attention`: batch first; a weight matrix has
one row per output feature, like ``nn.Linear``'s, so the projections are ``q = x @ w_q.T``; the
scores are ``q @ k.transpose(-2, -1) / sqrt(Dk)`` for any number of leading dims; boolean masks
are **True = may attend**, broadcastable to the scores' shape, and a masked score is
``float("-inf")``, hence the weight exactly 0. The references are the package's own tested
code: ``scaled_dot_product_attention`` and ``causal_mask`` themselves, and a ``SelfAttention``
module holding the case's weights (task 4.1 takes its projections and the score formula of
``scaled_dot_product_attention``; task 4.4 is its forward pass).

Cases, plain values and judging work as in chapter 3 (:mod:`coursepkg.checks.tensors`); the
known mistakes of attention and of causal masks are the course's one bank of them
(:mod:`coursepkg.checks.attention_mistakes`). The cases are made so that the usual mistakes
change the numbers: widths differ (D, Dk, Dv and T all distinct in one case, Dk, Dv, T and S in
another) so that dividing by the wrong square root shows; queries and keys differ in number or
width so that a missing transposition cannot hide in a square product, while one case where
every size agrees lets it run and be named; one case has scores of about 1000 (a softmax without
the max subtracted overflows) and one has scores far below -1e9, where filling masked scores
with a large finite number instead of -inf lets masked keys take the weight. Task 4.2's public
cases keep the promises of its text: (B, H, T, S) inputs with a (B, 1, 1, S) mask, and the
chapter's self-attention call ``f(x, x, x)``, where q, k and v are one tensor (so that
``q /= sqrt(d)`` changes the keys and values too). The masks are plain nested lists
(:mod:`coursepkg.checks.masks`): a checks module does no tensor work when it is imported (the
grader forks its workers from a process that imported it). The hidden cases' generators draw
the seeds, sizes and masks from the grader's random generator.

Shape letters: B batch, H heads (a second leading dim), T queries (positions), S keys, D model
width, Dk query/key width, Dv value width.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from coursepkg.checks import attention_mistakes as bank
from coursepkg.checks import masks
from coursepkg.checks.attention_mistakes import (  # the hints of this chapter's judges
    HINT_CAUSAL_ALL,  # noqa: F401 - a hint of the causal mask's judge, named by the tests
    HINT_CAUSAL_DIAGONAL,  # noqa: F401 - idem
    HINT_CAUSAL_INVERTED,
    HINT_CAUSAL_ONE_AHEAD,  # noqa: F401 - idem
    HINT_CAUSAL_UPPER,  # noqa: F401 - idem
    HINT_K_NOT_TRANSPOSED,
    HINT_K_REVERSED,
    HINT_MASK_AFTER_SOFTMAX,  # noqa: F401 - a hint of the attention's judge, named by the tests
    HINT_MASK_FINITE,  # noqa: F401 - idem
    HINT_MASK_IGNORED,  # noqa: F401 - idem
    HINT_MASK_INVERTED,  # noqa: F401 - idem
    HINT_MASK_NAN,  # noqa: F401 - idem
    HINT_MASK_ZERO,  # noqa: F401 - idem
    HINT_NO_SCALE,
    HINT_OUT_KEYS,
    HINT_OUT_TRANSPOSED,
    HINT_PAIR_ORDER,
    HINT_SCALE_D_V,
    HINT_SCALE_MULTIPLIES,
    HINT_SCALE_NO_SQRT,
    HINT_SCALE_ON_WEIGHTS,  # noqa: F401 - idem
    HINT_SCALE_WRONG_DIM,
    HINT_SCORES_TRANSPOSED,
    HINT_SOFTMAX_DIM,  # noqa: F401 - idem
    HINT_SOFTMAX_DIM_0,  # noqa: F401 - idem
    HINT_SOFTMAX_DIM_1,  # noqa: F401 - idem
    HINT_SOFTMAX_OVERFLOW,  # noqa: F401 - idem
)
from coursepkg.checks.core import (
    Args,
    CheckError,
    Task,
    Verdict,
    draw_seed,
    draw_sizes,
    hidden,
    register,
)
from coursepkg.checks.forbidden import ATTENTION_KERNELS
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    Variant,
    decode,
    generator,
    normal,
    parts_plain,
    tensor_judge,
    with_weights,
)
from coursepkg.self_attention import SelfAttention, causal_mask, scaled_dot_product_attention

__all__ = ["ASSIGNMENT", "qkv_scores", "self_attention"]

ASSIGNMENT = "04_self_attention"


# The package's attention code, torch's fused attention and its multi-head module do the whole
# task; a student must write the projections, the scores, the mask and the softmax.
_NO_ATTENTION_LIBRARIES = (
    "coursepkg.self_attention",
    "coursepkg.attention",
    "coursepkg.multihead",
    "coursepkg.transformer",
    "coursepkg.checks",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
    *ATTENTION_KERNELS,
)
# torch's own causal-mask helper (a float 0 / -inf mask) is also off limits in task 4.3.
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
# Task 4.2 scaled_dot_product_attention
# --------------------------------------------------------------------------------------------

HINT_OUT_SHAPE = "out has one row per query and the values' width, (..., T, Dv)."
HINT_WEIGHTS_SHAPE = (
    "The weights are (..., T, S), the scores' shape: the leading dims of q, one row per query, "
    "one column per key."
)
HINT_SDPA_GENERIC = (
    "Divide the scores Q K^T (the keys' last two dims transposed) by the square root of d_k, "
    "put float('-inf') where the mask is False, take the softmax over the keys (the last dim), "
    "and average the values with the weights; return the output and the weights."
)


def _build_sdpa_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    lead = tuple(int(n) for n in args["lead"])
    T, S, Dk, Dv = int(args["T"]), int(args["S"]), int(args["Dk"]), int(args["Dv"])
    kind = args["kind"]
    if args["self_attention"]:  # the chapter's f(x, x, x): q, k and v are one tensor (T, Dk)
        x = normal(gen, (*lead, T, Dk), 1.0, dtype)
        return (x, x, x) if args["mask"] is None else (x, x, x, masks.as_tensor(args["mask"]))
    if kind == "normal":
        q = normal(gen, (*lead, T, Dk), 1.0, dtype)
        k = normal(gen, (*lead, S, Dk), 1.0, dtype)
    else:
        # Small integers and one large feature (Dk = 4, so dividing by sqrt(Dk) = 2 is exact):
        # the scores are computed exactly, or rounded the same way, in any order.
        q = torch.randint(-2, 3, (*lead, T, Dk), generator=gen).to(dtype)
        k = torch.randint(-2, 3, (*lead, S, Dk), generator=gen).to(dtype)
        if kind == "large":  # every score is 1000 plus a small number: exp overflows
            q[..., 0], k[..., 0] = 500.0, 4.0
        else:  # "negative": per query, the scores are about -8e3, or exactly -1.7e10 or -5.4e8
            firsts = [-(2.0**-4), -(2.0**17), -(2.0**12)]
            q[..., 0] = torch.tensor([firsts[t % 3] for t in range(T)], dtype=dtype)
            q[..., torch.arange(T) % 3 != 0, 1:] = 0.0  # equal scores there, in any precision
            k[..., 0] = 2.0**18
    v = normal(gen, (*lead, S, Dv), 1.0, dtype)
    if args["mask"] is None:
        return q, k, v
    return q, k, v, masks.as_tensor(args["mask"])


def _sdpa_to_plain(value: object) -> list[dict]:
    return parts_plain(value, ("out", "weights"))


def _sdpa_shape_hint_for(inputs: tuple) -> Callable[[list, list, int], str]:
    Dk = inputs[0].shape[-1]

    def hint(got: list, expected: list, k: int) -> str:
        out_shape, weights_shape = expected
        T, S = weights_shape[-2:]
        if got[0] == weights_shape and got[1] == out_shape:
            return HINT_PAIR_ORDER
        if k == 1:
            if got[1] == (*weights_shape[:-2], S, T):
                return HINT_SCORES_TRANSPOSED
            return HINT_WEIGHTS_SHAPE
        if got[0] == (*out_shape[:-1], Dk):
            return HINT_OUT_KEYS
        if got[0] == (*out_shape[:-2], S, out_shape[-1]):
            return HINT_OUT_TRANSPOSED
        return HINT_OUT_SHAPE

    return hint


def _sdpa_variants(inputs: tuple) -> list[Variant]:
    def swapped() -> tuple[Tensor, Tensor]:
        out, weights = scaled_dot_product_attention(*inputs)
        return weights, out

    known = [(hint, lambda f=f: f(*inputs), "") for hint, f in bank.attention_mistakes()]
    return [(HINT_PAIR_ORDER, swapped, ""), *known]


_judge_sdpa = tensor_judge(_build_sdpa_args, ("out", "weights"), _sdpa_variants,
                           _sdpa_shape_hint_for, HINT_SDPA_GENERIC, inputs_shape_hint=True)


@dataclass(frozen=True)
class Attention(Args):
    """A case of task 4.2: q (*lead, T, Dk), k (*lead, S, Dk), v (*lead, S, Dv), a mask or None.

    ``kind`` "large": scores of about 1000, "negative": scores from -8e3 to -1.7e10 (both with
    Dk = 4, computed exactly); ``self_attention``: q, k and v are one tensor (S = T, Dv = Dk).
    """

    seed: int
    lead: tuple[int, ...]
    T: int
    S: int
    Dk: int
    Dv: int
    mask: list | None
    kind: str = "normal"
    self_attention: bool = False
    dtype: str = "float32"


_SDPA_CASES = (
    Attention(421, [2], T=3, S=5, Dk=4, Dv=6, mask=None).case(
        "no mask; 3 queries, 5 keys, Dk = 4, Dv = 6"),
    Attention(422, [2], T=4, S=4, Dk=3, Dv=5, mask=masks.causal(4)).case(
        "a causal mask (T, T) shared by the batch; Dk = 3, Dv = 5"),
    Attention(423, [3], T=4, S=6, Dk=8, Dv=2, mask=masks.padding([6, 3, 1], 6)).case(
        "a key-padding mask (B, 1, S), lengths [6, 3, 1]"),
    Attention(424, [2], T=3, S=4, Dk=4, Dv=3, mask=None, kind="large").case(
        "large scores (about 1000): the softmax must not overflow"),
    Attention(425, [2], T=6, S=6, Dk=4, Dv=3, mask=masks.causal(6), kind="negative").case(
        "scores from -8e3 down to -1.7e10, causal mask: masked keys must get 0"),
    Attention(426, [2, 3], T=3, S=5, Dk=4, Dv=2, mask=masks.padding([5, 2], 5, ones=2)).case(
        "(B, H, T, S) inputs (any leading dims) with a (B, 1, 1, S) key-padding mask"),
    Attention(427, [2], T=4, S=4, Dk=3, Dv=3, mask=masks.causal(4), self_attention=True).case(
        "self-attention: q, k and v are one tensor, as in the chapter's call f(x, x, x)"),
)


def _attention(rng: random.Random, lead: list[int], T: int, S: int, mask: list | None, *,
               kind: str = "normal", self_attention: bool = False,
               dtype: str = "float32") -> Attention:
    """A case of task 4.2 drawn from ``rng``: Dk and Dv different (Dk = 4 for the exact kinds,
    Dv = Dk for self-attention)."""
    Dk, Dv = draw_sizes(rng, 2, 2, 7)
    if kind != "normal":
        Dk = 4
    if self_attention:
        Dv = Dk
    return Attention(draw_seed(rng), lead, T, S, Dk, Dv, mask, kind, self_attention, dtype)


def _heads(rng: random.Random) -> list[int]:
    return [rng.randint(2, 3), rng.randint(2, 3)]  # (B, H)


def _four_d_rows(rng: random.Random) -> Attention:
    T, S = draw_sizes(rng, 2, 3, 7)
    return _attention(rng, _heads(rng), T, S, masks.random_rows(rng, T, S), dtype="float64")


def _one_query(rng: random.Random) -> Attention:
    lead, S = _heads(rng), rng.randint(4, 7)
    mask = masks.padding(masks.random_lengths(rng, lead[0], S), S, ones=2)
    return _attention(rng, lead, 1, S, mask)


def _large_causal(rng: random.Random) -> Attention:
    T = rng.randint(4, 6)
    return _attention(rng, _heads(rng), T, T, masks.causal(T, ones=2), kind="large")


def _per_sequence(rng: random.Random) -> Attention:
    T, S = rng.randint(4, 7), rng.randint(2, 4)
    return _attention(rng, [1], T, S, [masks.random_rows(rng, T, S)])


def _unbatched(rng: random.Random) -> Attention:
    T, S = draw_sizes(rng, 2, 3, 7)
    return _attention(rng, [], T, S, None, dtype="float64")


def _self(rng: random.Random) -> Attention:
    T = rng.randint(3, 6)
    return _attention(rng, [rng.randint(2, 3)], T, T, masks.causal(T), self_attention=True)


_SDPA_HIDDEN = (
    hidden("hidden: float64, (B, H, T, S) inputs, a (T, S) mask", _four_d_rows),
    hidden("hidden: one query, (B, H, T, S) inputs, a (B, 1, 1, S) mask", _one_query),
    hidden("hidden: large scores, (B, H, T, S) inputs, a (1, 1, T, T) causal mask",
           _large_causal),
    hidden("hidden: a batch of one, a (B, T, S) mask", _per_sequence),
    hidden("hidden: float64, no batch dims, no mask", _unbatched),
    hidden("hidden: self-attention, q, k and v one tensor", _self),
)

register(
    Task(
        id="4.2",
        assignment=ASSIGNMENT,
        func_name="scaled_dot_product_attention",
        title="Scaled dot-product attention softmax(Q K^T / sqrt(d_k)) V with a boolean mask",
        cases=_SDPA_CASES,
        hidden=_SDPA_HIDDEN,
        build_args=_build_sdpa_args,
        reference=scaled_dot_product_attention,
        to_plain=_sdpa_to_plain,
        judge=_judge_sdpa,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "the scores are q @ k.transpose(-2, -1), (..., T, Dk) @ (..., Dk, S) -> (..., T, "
            "S), whatever the leading dims (k.T reverses ALL dims of a 3-D or 4-D tensor, and "
            "k.transpose(1, 2) is wrong for 4-D ones); the output is weights @ v. Test the "
            "mask with 'if mask is not None:', not 'if mask:'.",
            "IndexError": "A dim is out of range: count the dims from the end (dim=-1, "
            "transpose(-2, -1)) so that the function works for any number of leading dims.",
            "TypeError": "The function was called as f(q, k, v) without a mask: give it the "
            "default mask=None. Otherwise check the types of what you pass and return.",
            "CheckError": "Return a pair (out, weights) of tensors.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 4.3 causal_mask
# --------------------------------------------------------------------------------------------

HINT_MASK_BOOL = (
    "Return a boolean tensor (dtype=torch.bool), True = may attend: ~mask and masked_fill "
    "need booleans, and a mask of numbers is not one, even with its 1s in the right places."
)
HINT_MASK_ADDITIVE = (
    "That is an additive mask (0 where allowed, a negative number or -inf where not), another "
    "convention: this course's masks are boolean, True where query t may attend to key s."
)
HINT_MASK_SHAPE = "Return a (T, T) mask: one row per query, one column per key."
HINT_CAUSAL_GENERIC = (
    "mask[t, s] is True when s <= t (key s is not in query t's future): the lower triangle of "
    "a (T, T) boolean matrix, its diagonal included."
)


def _build_mask_args(args: dict) -> tuple:
    return (int(args["T"]),)


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


def _judge_mask(got: object, expected: object, args: dict) -> Verdict:
    got_shape, got_dtype, values = _decode_mask(got)
    expected_shape, _, want = _decode_mask(expected)
    if got_shape != expected_shape:
        return Verdict(False, HINT_MASK_SHAPE,
                       f"Expected a mask of shape {expected_shape}, got {got_shape}.")
    T = int(args["T"])
    if got_dtype != "bool":
        detail = f"Expected dtype torch.bool, got torch.{got_dtype}."
        allowed = want.bool()
        if bool((values[allowed] == 0).all()) and bool((values[~allowed] < 0).all()):
            return Verdict(False, HINT_MASK_ADDITIVE, detail)
        pattern = values != 0
        if torch.equal(pattern, allowed):
            return Verdict(False, HINT_MASK_BOOL, detail)
        for hint, wrong in bank.CAUSAL_MISTAKES:
            if torch.equal(pattern, wrong(T)):
                return Verdict(False, hint, detail)
        return Verdict(False, HINT_MASK_BOOL, detail)
    if torch.equal(values, want):
        return Verdict(True)
    detail = _mask_difference(values, want)
    for hint, wrong in bank.CAUSAL_MISTAKES:
        if torch.equal(values.bool(), wrong(T)):
            return Verdict(False, hint, detail)
    return Verdict(False, HINT_CAUSAL_GENERIC, detail)


def _decode_mask(plain: object) -> tuple[tuple[int, ...], str, Tensor]:
    """A plain mask -> (shape, dtype name, float64 values); ValueError if it is malformed."""
    shape, dtype, values = decode(plain)
    if dtype == "bool" and not bool(((values == 0) | (values == 1)).all()):
        raise ValueError("a bool mask holds 0 and 1 only")
    return shape, dtype, values


def _mask_difference(got: Tensor, expected: Tensor) -> str:
    """``"mask[0, 1]: expected False, got True (3 of 16 values differ)."``"""
    wrong = (got != expected).nonzero()
    index = ", ".join(str(int(i)) for i in wrong[0])
    return (
        f"mask[{index}]: expected {bool(expected[tuple(wrong[0])])}, "
        f"got {bool(got[tuple(wrong[0])])} ({len(wrong)} of {got.numel()} values differ)."
    )


@dataclass(frozen=True)
class Length(Args):
    """A case of task 4.3: the length T."""

    T: int


_MASK_CASES = (Length(4).case("T = 4"), Length(7).case("T = 7"))

_MASK_HIDDEN = (
    hidden("hidden: one position", lambda rng: Length(1)),
    hidden("hidden: two positions", lambda rng: Length(2)),
    hidden("hidden: an odd length", lambda rng: Length(rng.choice([3, 5, 9, 11]))),
    hidden("hidden: a longer sequence", lambda rng: Length(rng.randint(12, 24))),
)

register(
    Task(
        id="4.3",
        assignment=ASSIGNMENT,
        func_name="causal_mask",
        title="The causal mask: query t may attend to keys 0..t",
        cases=_MASK_CASES,
        hidden=_MASK_HIDDEN,
        build_args=_build_mask_args,
        reference=causal_mask,
        to_plain=_mask_to_plain,
        judge=_judge_mask,
        forbidden=_NO_MASK_LIBRARIES,
        error_hints={
            "CheckError": "Return a (T, T) torch.bool tensor, True where query t may attend to "
            "key s.",
            "TypeError": "causal_mask gets the length T, an int, and returns a (T, T) tensor: "
            "torch.ones(T, T, dtype=torch.bool) has the right shape and dtype to start from.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 4.4 self_attention
# --------------------------------------------------------------------------------------------

HINT_CAUSAL_IGNORED = (
    "With causal=True, position t must not see positions after it: pass causal_mask(T) as "
    "the mask (T is x.shape[1])."
)
HINT_ALWAYS_CAUSAL = (
    "With causal=False every position attends to every position: use the causal mask only "
    "when causal is True."
)
HINT_LAYER_MASK_WRONG = "The layer is wired right but its causal mask is not:"
HINT_LAYER_MASK_INVERTED = (
    "The causal mask reaches the softmax inverted: the future is allowed and the past hidden. "
    "True means MAY attend: causal_mask must be True on and below the diagonal, and "
    "scaled_dot_product_attention must fill the scores where the mask is False (~mask)."
)
HINT_LAYER_ATTENTION_WRONG = (
    "The projections are right but the attention is not: your results are those of a "
    "scaled_dot_product_attention with a mistake. Make it pass task 4.2, then call it here."
)
HINT_VALUES_NOT_PROJECTED = (
    "Project the values too: v = x @ w_v.T (B, T, Dv). Averaging x itself gives vectors of "
    "width D."
)
HINT_LAYER_SHAPE = "Return (out, weights): out (B, T, Dv), weights (B, T, T)."
HINT_LAYER_GENERIC = (
    "Project x to the queries, keys and values with the transposed weights, use the causal "
    "mask of x's length only when causal is True (no mask otherwise), and hand them to your "
    "scaled_dot_product_attention from task 4.2."
)


def _build_layer_args(args: dict) -> tuple:
    return (*_build_qkv_args(args), bool(args["causal"]))


def self_attention(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor,
                   causal: bool = False) -> tuple[Tensor, Tensor]:
    """Task 4.4's reference: :class:`SelfAttention` with the given weights.

    Args:
        x: (B, T, D) the input vectors.
        w_q: (Dk, D); w_k: (Dk, D); w_v: (Dv, D), nn.Linear-style weights.
        causal: whether position t attends only to positions 0..t.

    Returns:
        ``(out (B, T, Dv), weights (B, T, T))``.
    """
    layer = _layer(w_q, w_k, w_v, causal=causal)
    with torch.no_grad():
        return layer(x)


def _layer_to_plain(value: object) -> list[dict]:
    return parts_plain(value, ("out", "weights"))


def _layer_variants(inputs: tuple) -> list[Variant]:
    x, w_q, w_k, w_v, causal = inputs
    T = x.shape[1]
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    mask = causal_mask(T) if causal else None

    def run(*, q: Tensor = q, k: Tensor = k, v: Tensor = v, mask: Tensor | None = mask,
            attend: bank.Attention = scaled_dot_product_attention) -> Callable[[], tuple]:
        return lambda: attend(q, k, v, mask)

    variants: list[Variant] = []
    if causal:
        variants.append((HINT_CAUSAL_IGNORED, run(mask=None), ""))
        wrong_masks = [(f"{HINT_LAYER_MASK_WRONG} {hint}", run(mask=wrong(T)), "")
                       for hint, wrong in bank.CAUSAL_MISTAKES if hint != HINT_CAUSAL_INVERTED]
        # An inverted causal mask and a right one used inverted give the same numbers. It comes
        # after the diagonal mistake, which is the same for T = 1 and names what happens there.
        wrong_masks.insert(1, (HINT_LAYER_MASK_INVERTED, run(mask=~causal_mask(T)), ""))
        variants += wrong_masks
    else:
        variants.append((HINT_ALWAYS_CAUSAL, run(mask=causal_mask(T)), ""))
    variants += [
        (HINT_WQ_WK_SWAPPED, run(q=k, k=q), ""),
        (HINT_VALUES_NOT_PROJECTED, run(v=x), ""),
        (HINT_WRONG_V, run(v=x @ w_k.T), ""),
        (HINT_NOT_TRANSPOSED_W, lambda: scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v,
                                                                     mask), ""),
        (HINT_SCALE_D_MODEL,
         run(attend=lambda q, k, v, m: bank.attend_by_width(q, k, v, m, x.shape[-1])), ""),
    ]
    for hint, wrong in bank.attention_mistakes():
        variants.append((f"{HINT_LAYER_ATTENTION_WRONG} {hint}", run(attend=wrong), ""))
    return variants


def _layer_shape_hint_for(inputs: tuple) -> Callable[[list, list, int], str]:
    D = inputs[0].shape[-1]

    def hint(got: list, expected: list, k: int) -> str:
        out_shape, weights_shape = expected
        if got[0] == weights_shape and got[1] == out_shape:
            return HINT_PAIR_ORDER
        if k == 0 and got[0] == (*out_shape[:-1], D):
            return HINT_VALUES_NOT_PROJECTED
        if k == 1 and got[1] != weights_shape:
            return HINT_WEIGHTS_SHAPE
        return HINT_LAYER_SHAPE

    return hint


_judge_layer = tensor_judge(_build_layer_args, ("out", "weights"), _layer_variants,
                            _layer_shape_hint_for, HINT_LAYER_GENERIC, inputs_shape_hint=True)


@dataclass(frozen=True)
class Layer(Projections):
    """A case of task 4.4: the sizes of task 4.1, and whether the layer is causal."""

    causal: bool = False


_LAYER_CASES = (
    Layer(441, B=2, T=5, D=6, Dk=4, Dv=3, causal=False).case(
        "not causal; 2 sequences of 5, D = 6, Dk = 4, Dv = 3"),
    Layer(442, B=2, T=4, D=5, Dk=3, Dv=6, causal=True).case(
        "causal; 2 sequences of 4, D = 5, Dk = 3, Dv = 6"),
    Layer(443, B=4, T=4, D=4, Dk=4, Dv=4, causal=True).case(
        "causal; every size 4 (B = T = D = Dk = Dv)"),
)

_LAYER_HIDDEN = (
    hidden("hidden: float64, causal",
           lambda rng: Layer(**_widths(rng), dtype="float64", causal=True)),
    hidden("hidden: one position, causal", lambda rng: Layer(**_widths(rng, T=1), causal=True)),
    hidden("hidden: a batch of one, not causal", lambda rng: Layer(**_widths(rng, B=1))),
    hidden("hidden: larger sizes, causal",
           lambda rng: Layer(**_widths(rng, large=True), causal=True)),
)

register(
    Task(
        id="4.4",
        assignment=ASSIGNMENT,
        func_name="self_attention",
        title="A self-attention layer's forward pass, optionally causal",
        cases=_LAYER_CASES,
        hidden=_LAYER_HIDDEN,
        build_args=_build_layer_args,
        reference=self_attention,
        to_plain=_layer_to_plain,
        judge=_judge_layer,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x is (B, T, D) and the weights (Dk, D), (Dk, D), (Dv, D), one row per output "
            "feature like nn.Linear's, so q = x @ w_q.T is (B, T, Dk) and v = x @ w_v.T "
            "(B, T, Dv); the mask is causal_mask(T) with T the length of x, x.shape[1].",
            "NameError": "A name is not defined: call scaled_dot_product_attention from task "
            "4.2 and causal_mask from task 4.3; run their cells first.",
            "CheckError": "Return a pair (out, weights) of tensors.",
        },
    )
)
