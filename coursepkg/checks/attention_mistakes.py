"""The known mistakes of attention and of causal masks, each with its hint, defined once.

Chapters 3, 4, 5 and 7 judge attention that students write: the weights and context of one
query (chapter 3), scaled dot-product attention and the causal mask (chapter 4), attention in
every head (chapter 5), the masks of a decoder block (chapter 7). A wrong answer is compared
with each known wrong implementation, recomputed from the case's inputs, and gets the hint of
the first one it equals (:func:`coursepkg.checks.tensors.judge_parts`). The mistakes live here,
once, with their hints:

* :func:`attention_mistakes`: wrong ``f(q, k, v, mask=None) -> (out, weights)`` of scaled
  dot-product attention, most specific first; chapter 4 judges its task 4.2 with them, and
  chapters 4 and 5 the attention inside a layer. The building blocks (:func:`masked`,
  :func:`mask_after_softmax`, ...) take a ``scale`` keyword, so that chapter 3, whose scale is
  an argument, judges its attention with the same functions;
* :data:`CAUSAL_MISTAKES`: wrong causal masks ``f(T) -> (T, T) bool``, for chapter 4's
  ``causal_mask`` and chapter 7's decoder, which builds its own.

Conventions, those of :mod:`coursepkg.self_attention`: q (..., T, Dk), k (..., S, Dk),
v (..., S, Dv); boolean masks are True = may attend, broadcastable to the scores (..., T, S);
a masked score is ``float("-inf")``. A mistake that needs a mask raises ValueError without one,
and :func:`~coursepkg.checks.tensors.judge_parts` skips it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "CAUSAL_MISTAKES",
    "Attention",
    "attend_by_width",
    "attention_mistakes",
    "mask_after_softmax",
    "mask_ignored",
    "mask_times_inf",
    "masked",
    "output_of",
    "raw_scores",
    "reversed_dims",
    "scale_on_weights",
]

NEG_INF = float("-inf")

#: ``f(q, k, v, mask=None, *, scale=None) -> (out, weights)``.
Attention = Callable[..., tuple[Tensor, Tensor]]


# --------------------------------------------------------------------------------------------
# Hints
# --------------------------------------------------------------------------------------------

HINT_NO_SCALE = (
    "Divide the scores by sqrt(d_k): q . k sums d_k products, so its spread grows like "
    "sqrt(d_k), and unscaled scores of wide vectors push the softmax into saturation (one key "
    "takes all the weight, and the gradients vanish)."
)
HINT_SCALE_D_V = (
    "Scale by sqrt(d_k), the width of the queries and keys (q.shape[-1]), not sqrt(d_v), the "
    "width of the values: the values take no part in the scores."
)
HINT_SCALE_NO_SQRT = (
    "Divide by the SQUARE ROOT of d_k, math.sqrt(d_k) or d_k ** 0.5, not by d_k: the standard "
    "deviation of a dot product of d_k unit-variance products is sqrt(d_k)."
)
HINT_SCALE_MULTIPLIES = "Divide the scores by sqrt(d_k), do not multiply them by it."
HINT_SCALE_WRONG_DIM = (
    "d_k is the LAST dim of the queries, q.shape[-1]: for (B, T, Dk) queries q.shape[1] is T "
    "(and for (B, H, T, Dk) it is H), and q.shape[-2] is T, the number of queries."
)
HINT_SOFTMAX_DIM = (
    "Take the softmax over the keys, the last dim (dim=-1): row t of the weights is query t's "
    "distribution over the S keys and must sum to 1. Your softmax normalises over the queries "
    "(dim=-2), so each key's column sums to 1 instead."
)
HINT_SOFTMAX_DIM_1 = (
    "Take the softmax over the keys with dim=-1: dim=1 is the queries for (B, T, S) scores and "
    "the heads for (B, H, T, S) scores. Counting dims from the end works for any number of "
    "leading dims."
)
HINT_SOFTMAX_DIM_0 = (
    "Take the softmax over the keys, dim=-1: your softmax normalises over the batch (dim=0), "
    "mixing different sequences."
)
HINT_K_NOT_TRANSPOSED = (
    "Transpose the keys: the scores are q @ k.transpose(-2, -1), (..., T, Dk) @ (..., Dk, S) "
    "-> (..., T, S). q @ k multiplies query features with key positions; it runs only when Dk "
    "happens to equal S, and then gives wrong numbers."
)
HINT_K_REVERSED = (
    "k.T reverses ALL the dims of a 3-D or 4-D tensor ((B, S, Dk) -> (Dk, S, B)): transpose "
    "only the last two, k.transpose(-2, -1) (or k.mT)."
)
HINT_SCORES_TRANSPOSED = (
    "The score matrix is Q K^T: row t holds query t's scores with every key, scores[..., t, s] "
    "= q_t . k_s / sqrt(d_k). Yours is its transpose, K Q^T."
)
HINT_MASK_AFTER_SOFTMAX = (
    "Mask BEFORE the softmax: set the masked scores to float('-inf'), then take the softmax. "
    "Zeroing weights after the softmax leaves rows that no longer sum to 1."
)
HINT_MASK_ZERO = (
    "A score of 0 is not 'never': exp(0) = 1, so a masked key still gets weight. Fill the "
    "masked scores with float('-inf'), whose exp is exactly 0."
)
HINT_MASK_FINITE = (
    "Fill the masked scores with float('-inf'), not a large finite number such as -1e9: that "
    "works only while every real score is far above it. One test has scores far below -1e9, "
    "and there the masked keys take the weight. exp(-inf) is exactly 0 whatever the scores."
)
HINT_MASK_NAN = (
    "Multiplying by the mask to bring in -inf gives 0 * -inf = NaN at the keys you keep: "
    "select instead, scores.masked_fill(~mask, float('-inf')) or torch.where(mask, scores, "
    "float('-inf'))."
)
HINT_OUT_TRANSPOSED = (
    "The output is weights @ v, (..., T, S) @ (..., S, Dv) -> (..., T, Dv): row t averages the "
    "values with query t's weights. Do not transpose the weights."
)
HINT_PAIR_ORDER = "Return the pair in the order (out, weights)."
HINT_CAUSAL_UPPER = (
    "Row t is query t and column s is key s: query t may attend to keys s <= t, on and BELOW "
    "the diagonal (tril). Yours lets every position see the future and hides the past."
)
HINT_CAUSAL_ONE_AHEAD = (
    "Query t may attend to keys 0..t only: tril() with diagonal 0. Yours also lets every "
    "position see the next one."
)
HINT_CAUSAL_ALL = (
    "Hide the future: the causal mask is False above the diagonal (key s > query t)."
)


HINT_SCALE_ON_WEIGHTS = (
    "Scale the scores, before the softmax, not the weights after it: softmax(scale * scores), "
    "where scaled dot-product attention's scale is 1 / sqrt(d_k). Scaled weights no longer sum "
    "to 1."
)
HINT_SOFTMAX_OVERFLOW = (
    "Your softmax breaks on large scores: exp of a score above about 88 (float32) or 709 "
    "(float64) is inf, and far below 0 it is 0, so inf / inf or 0 / 0 gives NaN. Subtract each "
    "row's largest score before exp (softmax(s) = softmax(s - max(s))), or use torch.softmax, "
    "which does."
)
HINT_MASK_INVERTED = (
    "The mask is True where a query MAY attend to a key: the convention of "
    "F.scaled_dot_product_attention, which this course follows (nn.MultiheadAttention's "
    "attn_mask and key_padding_mask mean the opposite, True = NOT allowed). Fill the scores "
    "where the mask is False, masked_fill(~mask, float('-inf')), not where it is True."
)
HINT_MASK_IGNORED = (
    "Apply the mask: where it is False (padding, the future) the weight must be exactly 0, via "
    "the score float('-inf') before the softmax."
)
HINT_OUT_KEYS = (
    "The output averages the VALUES with the weights, not the keys: the keys only decide the "
    "weights."
)
HINT_CAUSAL_DIAGONAL = (
    "A position may attend to itself: keep the diagonal True. The causal mask is True where "
    "s <= t, the lower triangle with its diagonal; tril(-1) (s < t) hides the token itself, and "
    "the first query then has no key at all (its attention is NaN)."
)
HINT_CAUSAL_INVERTED = (
    "True means MAY attend: your mask is True on the future, the positions to hide, which is "
    "the convention of torch's nn.Transformer.generate_square_subsequent_mask (triu with "
    "diagonal=1) and of nn.MultiheadAttention's masks. The causal mask is its complement, True "
    "on and below the diagonal (tril)."
)


# --------------------------------------------------------------------------------------------
# Scaled dot-product attention with one mistake
# --------------------------------------------------------------------------------------------


def raw_scores(q: Tensor, k: Tensor) -> Tensor:
    """q @ k^T, unscaled: (..., T, Dk), (..., S, Dk) -> (..., T, S)."""
    return q @ k.transpose(-2, -1)


def reversed_dims(t: Tensor) -> Tensor:
    """What ``t.T`` gives for any number of dims: every dim reversed."""
    return t.permute(*range(t.dim() - 1, -1, -1))


def _scaled(scores: Tensor, q: Tensor, scale: float | None) -> Tensor:
    """The scores times ``scale``, or divided by sqrt(Dk) when it is None."""
    return scores / math.sqrt(q.shape[-1]) if scale is None else scale * scores


def _needs(mask: Tensor | None) -> Tensor:
    if mask is None:
        raise ValueError("this mistake needs a mask")
    return mask


def _attend(scores: Tensor, v: Tensor, mask: Tensor | None, *, fill: float = NEG_INF,
            invert: bool = False, dim: int = -1) -> tuple[Tensor, Tensor]:
    if mask is not None:
        scores = scores.masked_fill(mask if invert else ~mask, fill)
    weights = torch.softmax(scores, dim=dim)
    return weights @ v, weights


def masked(*, fill: float = NEG_INF, invert: bool = False, dim: int = -1) -> Attention:
    """Attention whose masked scores get ``fill``, with the mask ``invert``-ed, or whose softmax
    runs over ``dim`` (defaults: right)."""

    def f(q, k, v, mask=None, *, scale=None):
        if fill != NEG_INF or invert:
            _needs(mask)
        return _attend(_scaled(raw_scores(q, k), q, scale), v, mask, fill=fill, invert=invert,
                       dim=dim)

    return f


def naive_softmax(q, k, v, mask=None, *, scale=None):
    """exp(scores) / sum: inf / inf on large scores."""
    scores = _scaled(raw_scores(q, k), q, scale)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    exps = torch.exp(scores)
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return weights @ v, weights


def mask_after_softmax(q, k, v, mask=None, *, scale=None):
    """The weights zeroed after the softmax, not renormalised."""
    weights = torch.softmax(_scaled(raw_scores(q, k), q, scale), dim=-1) * _needs(mask)
    return weights @ v, weights


def mask_times_inf(q, k, v, mask=None, *, scale=None):
    """-inf brought in by multiplying with the mask: 0 * -inf = NaN."""
    mask = _needs(mask)
    scores = _scaled(raw_scores(q, k), q, scale)
    weights = torch.softmax(scores * mask + (~mask) * NEG_INF, dim=-1)
    return weights @ v, weights


def mask_ignored(q, k, v, mask=None, *, scale=None):
    """The mask given but not applied."""
    _needs(mask)
    return _attend(_scaled(raw_scores(q, k), q, scale), v, None)


def scale_on_weights(q, k, v, mask=None, *, scale=None):
    """The scale applied to the weights after the softmax instead of the scores."""
    _, weights = _attend(raw_scores(q, k), v, mask)
    weights = _scaled(weights, q, scale)
    return weights @ v, weights


def output_of(of: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Attention:
    """The right weights, and an output ``of(weights, k, v)`` other than weights @ v."""

    def f(q, k, v, mask=None, *, scale=None):
        _, weights = _attend(_scaled(raw_scores(q, k), q, scale), v, mask)
        return of(weights, k, v), weights

    return f


def _scaled_by(divisor: Callable[[Tensor, Tensor, Tensor], float]) -> Attention:
    def f(q, k, v, mask=None):
        return _attend(raw_scores(q, k) / divisor(q, k, v), v, mask)

    return f


def _scores_by(product: Callable[[Tensor, Tensor], Tensor]) -> Attention:
    def f(q, k, v, mask=None):
        return _attend(product(q, k) / math.sqrt(q.shape[-1]), v, mask)

    return f


def _second_dim(q: Tensor, k: Tensor, v: Tensor) -> float:
    if q.dim() < 3:
        raise ValueError("q.shape[1] is Dk for 2-D queries")
    return math.sqrt(q.shape[1])


def attend_by_width(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                    width: int) -> tuple[Tensor, Tensor]:
    """Attention with the scores divided by sqrt(width) instead of sqrt(Dk) (the width of x,
    or of the model rather than of one head)."""
    return _attend(raw_scores(q, k) / math.sqrt(width), v, mask)


def attention_mistakes() -> list[tuple[str, Attention]]:
    """Known wrong scaled dot-product attentions ``f(q, k, v, mask=None) -> (out, weights)``,
    most specific first. A mistake that needs a mask raises ValueError without one."""
    return [
        (HINT_SOFTMAX_OVERFLOW, naive_softmax),
        (HINT_MASK_AFTER_SOFTMAX, mask_after_softmax),
        (HINT_MASK_FINITE, masked(fill=-1e9)),
        (HINT_MASK_FINITE, masked(fill=-1e4)),
        (HINT_MASK_ZERO, masked(fill=0.0)),
        (HINT_MASK_NAN, mask_times_inf),
        (HINT_MASK_INVERTED, masked(invert=True)),
        (HINT_MASK_IGNORED, mask_ignored),
        (HINT_SOFTMAX_DIM, masked(dim=-2)),
        (HINT_SOFTMAX_DIM_1, masked(dim=1)),
        (HINT_SOFTMAX_DIM_0, masked(dim=0)),
        (HINT_NO_SCALE, _scaled_by(lambda q, k, v: 1.0)),
        (HINT_SCALE_D_V, _scaled_by(lambda q, k, v: math.sqrt(v.shape[-1]))),
        (HINT_SCALE_NO_SQRT, _scaled_by(lambda q, k, v: q.shape[-1])),
        (HINT_SCALE_MULTIPLIES, _scaled_by(lambda q, k, v: 1 / math.sqrt(q.shape[-1]))),
        (HINT_SCALE_WRONG_DIM, _scaled_by(_second_dim)),
        (HINT_SCALE_WRONG_DIM, _scaled_by(lambda q, k, v: math.sqrt(q.shape[-2]))),
        (HINT_SCALE_WRONG_DIM, _scaled_by(lambda q, k, v: math.sqrt(k.shape[-2]))),
        (HINT_SCALE_ON_WEIGHTS, scale_on_weights),
        (HINT_K_NOT_TRANSPOSED, _scores_by(lambda q, k: q @ k)),
        (HINT_K_REVERSED, _scores_by(lambda q, k: q @ reversed_dims(k))),
        (HINT_SCORES_TRANSPOSED, _scores_by(lambda q, k: k @ q.transpose(-2, -1))),
        (HINT_OUT_KEYS, output_of(lambda weights, k, v: weights @ k)),
        (HINT_OUT_TRANSPOSED, output_of(lambda weights, k, v: weights.transpose(-2, -1) @ v)),
    ]


# --------------------------------------------------------------------------------------------
# Causal masks with one mistake
# --------------------------------------------------------------------------------------------


def _ones(T: int) -> Tensor:
    return torch.ones(T, T, dtype=torch.bool)


#: Known wrong causal masks ``f(T) -> (T, T) bool`` (True = may attend), most specific first.
CAUSAL_MISTAKES: tuple[tuple[str, Callable[[int], Tensor]], ...] = (
    (HINT_CAUSAL_DIAGONAL, lambda T: _ones(T).tril(-1)),
    (HINT_CAUSAL_UPPER, lambda T: _ones(T).triu()),
    (HINT_CAUSAL_INVERTED, lambda T: _ones(T).triu(1)),
    (HINT_CAUSAL_ONE_AHEAD, lambda T: _ones(T).tril(1)),
    (HINT_CAUSAL_ALL, _ones),
)
