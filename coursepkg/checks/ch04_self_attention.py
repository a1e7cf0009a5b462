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

Cases, plain values and judging work as in chapter 3 (:mod:`coursepkg.checks.tensors`). The
cases are made so that the usual mistakes change the numbers: widths differ (D, Dk, Dv and T all
distinct in one case, Dk, Dv, T and S in another) so that dividing by the wrong square root
shows; queries and keys differ in number or width so that a missing transposition cannot hide
in a square product, while one case where every size agrees lets it run and be named; one case
has scores of about 1000 (a softmax without the max subtracted overflows) and one has scores
far below -1e9, where filling masked scores with a large finite number instead of -inf lets
masked keys take the weight. The masks are plain nested lists: a checks module does no tensor
work when it is imported (the grader forks its workers from a process that imported it).

Shape letters: B batch, H heads (a second leading dim), T queries (positions), S keys, D model
width, Dk query/key width, Dv value width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from coursepkg.checks.core import Case, CheckError, Task, Verdict, register
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    Variant,
    generator,
    judge_parts,
    normal,
    parts_plain,
)
from coursepkg.self_attention import SelfAttention, causal_mask, scaled_dot_product_attention

__all__ = ["ASSIGNMENT", "qkv_scores", "self_attention"]

ASSIGNMENT = "04_self_attention"

NEG_INF = float("-inf")

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
)
# torch's own causal-mask helper (a float 0 / -inf mask) is also off limits in task 4.3.
_NO_MASK_LIBRARIES = (
    *_NO_ATTENTION_LIBRARIES,
    "torch.nn.Transformer.generate_square_subsequent_mask",
)


# --------------------------------------------------------------------------------------------
# Hints shared by the tasks
# --------------------------------------------------------------------------------------------

HINT_NO_SCALE = (
    "Divide the scores by sqrt(d_k): q . k sums d_k products, so its spread grows like "
    "sqrt(d_k), and unscaled scores of wide vectors push the softmax into saturation (one key "
    "takes all the weight, and the gradients vanish)."
)
HINT_SCALE_D_MODEL = (
    "Scale by sqrt(d_k), the width of the queries and keys (q.shape[-1]), not sqrt(d_model), "
    "the width of x: the scores are dot products of d_k numbers."
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
HINT_SCALE_ON_WEIGHTS = (
    "Scale the scores, before the softmax, not the weights after it: softmax(q k^T / "
    "sqrt(d_k)). Scaled weights no longer sum to 1."
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
HINT_SOFTMAX_OVERFLOW = (
    "Your softmax breaks on large scores: exp of a score above about 88 (float32) is inf and "
    "below about -104 it is 0, so inf / inf or 0 / 0 gives NaN. Subtract each row's largest "
    "score before exp (softmax(s) = softmax(s - max(s))), or use torch.softmax, which does."
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
    "q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T; scores = q @ k.transpose(-2, -1) / "
    "math.sqrt(q.shape[-1])."
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
    with torch.random.fork_rng(devices=[]):  # its random initialisation is overwritten anyway
        layer = SelfAttention(d_model, d_k, w_v.shape[0], causal=causal).to(w_q.dtype)
    layer.load_state_dict({"w_q.weight": w_q, "w_k.weight": w_k, "w_v.weight": w_v})
    return layer


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


def _reversed(t: Tensor) -> Tensor:
    """What ``t.T`` gives for any number of dims: every dim reversed."""
    return t.permute(*range(t.dim() - 1, -1, -1))


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
        (HINT_K_REVERSED, with_scores(lambda: q @ _reversed(k) / math.sqrt(Dk)), ""),
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


def _judge_qkv(got: object, expected: object, args: dict) -> Verdict:
    inputs = _build_qkv_args(args)
    return judge_parts(list(got), list(expected), _QKV_NAMES, args["dtype"],
                       lambda: _qkv_variants(inputs), _qkv_shape_hint, HINT_QKV_GENERIC)


def _qkv_case(name: str, seed: int, B: int, T: int, D: int, Dk: int, Dv: int, *,
              dtype: str = "float32", hidden: bool = False) -> Case:
    args = {"seed": seed, "B": B, "T": T, "D": D, "Dk": Dk, "Dv": Dv, "dtype": dtype}
    return Case(name, 1, args, hidden)


_QKV_CASES = (
    _qkv_case("2 sequences of 5 vectors; D = 6, Dk = 4, Dv = 3", 401, 2, 5, 6, 4, 3),
    _qkv_case("every size 4 (B = T = D = Dk = Dv)", 402, 4, 4, 4, 4, 4),
    _qkv_case("3 sequences of 3 vectors; D = 8, Dk = 2, Dv = 5", 403, 3, 3, 8, 2, 5),
    _qkv_case("hidden: float64", 411, 3, 6, 5, 3, 4, dtype="float64", hidden=True),
    _qkv_case("hidden: one position", 412, 2, 1, 4, 6, 2, hidden=True),
    _qkv_case("hidden: a batch of one", 413, 1, 7, 12, 8, 6, hidden=True),
    _qkv_case("hidden: larger sizes", 414, 4, 16, 32, 16, 8, hidden=True),
)

register(
    Task(
        id="4.1",
        assignment=ASSIGNMENT,
        func_name="qkv_scores",
        title="The query, key and value projections and the score matrix Q K^T / sqrt(d_k)",
        cases=_QKV_CASES,
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

HINT_MASK_INVERTED = (
    "The mask is True where a query MAY attend (torch's convention): fill the scores where "
    "the mask is False, scores.masked_fill(~mask, float('-inf')), not where it is True."
)
HINT_MASK_IGNORED = (
    "Apply the mask: where it is False the weight must be exactly 0, via the score "
    "float('-inf') before the softmax."
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
HINT_OUT_KEYS = (
    "The output averages the VALUES with the weights, weights @ v, not the keys: the keys "
    "only decide the weights."
)
HINT_OUT_TRANSPOSED = (
    "The output is weights @ v, (..., T, S) @ (..., S, Dv) -> (..., T, Dv): row t averages the "
    "values with query t's weights. Do not transpose the weights."
)
HINT_PAIR_ORDER = "Return the pair in the order (out, weights)."
HINT_OUT_SHAPE = "out has one row per query and the values' width, (..., T, Dv)."
HINT_WEIGHTS_SHAPE = (
    "The weights are (..., T, S), the scores' shape: the leading dims of q, one row per query, "
    "one column per key."
)
HINT_SDPA_GENERIC = (
    "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]); if mask is not None: scores = "
    "scores.masked_fill(~mask, float('-inf')); weights = torch.softmax(scores, dim=-1); "
    "return weights @ v, weights."
)

_Attention = Callable[..., tuple[Tensor, Tensor]]


def _raw_scores(q: Tensor, k: Tensor) -> Tensor:
    return q @ k.transpose(-2, -1)  # (..., T, S), unscaled


def _attention_mistakes() -> list[tuple[str, _Attention]]:
    """Known wrong ``f(q, k, v, mask=None) -> (out, weights)``, most specific first. A mistake
    that needs a mask raises ValueError without one (it is then skipped)."""

    def sqrt_dk(q: Tensor) -> float:
        return math.sqrt(q.shape[-1])

    def needs(mask: Tensor | None) -> Tensor:
        if mask is None:
            raise ValueError("this mistake needs a mask")
        return mask

    def attend(scores: Tensor, v: Tensor, mask: Tensor | None, *, fill: float = NEG_INF,
               invert: bool = False, dim: int = -1) -> tuple[Tensor, Tensor]:
        if mask is not None:
            scores = scores.masked_fill(mask if invert else ~mask, fill)
        weights = torch.softmax(scores, dim=dim)
        return weights @ v, weights

    def scaled_by(divisor: Callable[[Tensor, Tensor, Tensor], float]) -> _Attention:
        def f(q, k, v, mask=None):
            return attend(_raw_scores(q, k) / divisor(q, k, v), v, mask)
        return f

    def masked(*, fill: float = NEG_INF, invert: bool = False, dim: int = -1) -> _Attention:
        def f(q, k, v, mask=None):
            if fill != NEG_INF or invert:
                needs(mask)
            return attend(_raw_scores(q, k) / sqrt_dk(q), v, mask, fill=fill, invert=invert,
                          dim=dim)
        return f

    def naive_softmax(q, k, v, mask=None):
        scores = _raw_scores(q, k) / sqrt_dk(q)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        exps = torch.exp(scores)
        weights = exps / exps.sum(dim=-1, keepdim=True)
        return weights @ v, weights

    def mask_after(q, k, v, mask=None):
        weights = torch.softmax(_raw_scores(q, k) / sqrt_dk(q), dim=-1) * needs(mask)
        return weights @ v, weights

    def mask_times_inf(q, k, v, mask=None):
        mask = needs(mask)
        scores = _raw_scores(q, k) / sqrt_dk(q)
        weights = torch.softmax(scores * mask + (~mask) * NEG_INF, dim=-1)
        return weights @ v, weights

    def mask_ignored(q, k, v, mask=None):
        needs(mask)
        return attend(_raw_scores(q, k) / sqrt_dk(q), v, None)

    def scale_on_weights(q, k, v, mask=None):
        _, weights = attend(_raw_scores(q, k), v, mask)
        weights = weights / sqrt_dk(q)
        return weights @ v, weights

    def scores_by(product: Callable[[Tensor, Tensor], Tensor]) -> _Attention:
        def f(q, k, v, mask=None):
            return attend(product(q, k) / sqrt_dk(q), v, mask)
        return f

    def output(of: Callable[[Tensor, Tensor, Tensor], Tensor]) -> _Attention:
        def f(q, k, v, mask=None):
            _, weights = attend(_raw_scores(q, k) / sqrt_dk(q), v, mask)
            return of(weights, k, v), weights
        return f

    def second_dim(q: Tensor, k: Tensor, v: Tensor) -> float:
        if q.dim() < 3:
            raise ValueError("q.shape[1] is Dk for 2-D queries")
        return math.sqrt(q.shape[1])

    return [
        (HINT_SOFTMAX_OVERFLOW, naive_softmax),
        (HINT_MASK_AFTER_SOFTMAX, mask_after),
        (HINT_MASK_FINITE, masked(fill=-1e9)),
        (HINT_MASK_FINITE, masked(fill=-1e4)),
        (HINT_MASK_ZERO, masked(fill=0.0)),
        (HINT_MASK_NAN, mask_times_inf),
        (HINT_MASK_INVERTED, masked(invert=True)),
        (HINT_MASK_IGNORED, mask_ignored),
        (HINT_SOFTMAX_DIM, masked(dim=-2)),
        (HINT_SOFTMAX_DIM_1, masked(dim=1)),
        (HINT_SOFTMAX_DIM_0, masked(dim=0)),
        (HINT_NO_SCALE, scaled_by(lambda q, k, v: 1.0)),
        (HINT_SCALE_D_V, scaled_by(lambda q, k, v: math.sqrt(v.shape[-1]))),
        (HINT_SCALE_NO_SQRT, scaled_by(lambda q, k, v: q.shape[-1])),
        (HINT_SCALE_MULTIPLIES, scaled_by(lambda q, k, v: 1 / math.sqrt(q.shape[-1]))),
        (HINT_SCALE_WRONG_DIM, scaled_by(second_dim)),
        (HINT_SCALE_WRONG_DIM, scaled_by(lambda q, k, v: math.sqrt(q.shape[-2]))),
        (HINT_SCALE_WRONG_DIM, scaled_by(lambda q, k, v: math.sqrt(k.shape[-2]))),
        (HINT_SCALE_ON_WEIGHTS, scale_on_weights),
        (HINT_K_NOT_TRANSPOSED, scores_by(lambda q, k: q @ k)),
        (HINT_K_REVERSED, scores_by(lambda q, k: q @ _reversed(k))),
        (HINT_SCORES_TRANSPOSED, scores_by(lambda q, k: k @ q.transpose(-2, -1))),
        (HINT_OUT_KEYS, output(lambda weights, k, v: weights @ k)),
        (HINT_OUT_TRANSPOSED, output(lambda weights, k, v: weights.transpose(-2, -1) @ v)),
    ]


def _build_sdpa_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    lead = tuple(int(n) for n in args["lead"])
    T, S, Dk, Dv = int(args["T"]), int(args["S"]), int(args["Dk"]), int(args["Dv"])
    kind = args["kind"]
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
    return q, k, v, torch.tensor(args["mask"], dtype=torch.bool)


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


def _judge_sdpa(got: object, expected: object, args: dict) -> Verdict:
    inputs = _build_sdpa_args(args)

    def variants() -> list[Variant]:
        def swapped() -> tuple[Tensor, Tensor]:
            out, weights = scaled_dot_product_attention(*inputs)
            return weights, out

        known = [(hint, lambda f=f: f(*inputs), "") for hint, f in _attention_mistakes()]
        return [(HINT_PAIR_ORDER, swapped, ""), *known]

    return judge_parts(list(got), list(expected), ("out", "weights"), args["dtype"], variants,
                       _sdpa_shape_hint_for(inputs), HINT_SDPA_GENERIC)


def _nested(value: list, depth: int) -> list:
    """``value`` inside ``depth`` more lists: ``depth`` leading dims of size 1."""
    for _ in range(depth):
        value = [value]
    return value


# The masks are built in plain Python: the checks do no tensor work when they are imported (the
# grader forks its workers from a process that imported them).


def _padding(lengths: list[int], S: int, ones: int = 1) -> list:
    """A key-padding mask, True on the first ``lengths[b]`` keys of row b, with ``ones`` dims of
    size 1 between B and S: (B, 1, S) or (B, 1, 1, S)."""
    return [_nested([s < n for s in range(S)], ones) for n in lengths]


def _rows(*rows: str) -> list[list[bool]]:
    """``_rows("110", "011")`` -> [[True, True, False], [False, True, True]]."""
    return [[ch == "1" for ch in row] for row in rows]


def _causal(T: int, ones: int = 0) -> list:
    """The causal mask (T, T), True where s <= t, inside ``ones`` leading dims of size 1."""
    return _nested([[s <= t for s in range(T)] for t in range(T)], ones)


def _sdpa_case(name: str, seed: int, lead: list[int], T: int, S: int, Dk: int, Dv: int,
               mask: list | None, *, kind: str = "normal", dtype: str = "float32",
               hidden: bool = False) -> Case:
    args = {"seed": seed, "lead": lead, "T": T, "S": S, "Dk": Dk, "Dv": Dv, "kind": kind,
            "mask": mask, "dtype": dtype}
    return Case(name, 1, args, hidden)


_SDPA_CASES = (
    _sdpa_case("no mask; 3 queries, 5 keys, Dk = 4, Dv = 6", 421, [2], 3, 5, 4, 6, None),
    _sdpa_case("a causal mask (T, T) shared by the batch; Dk = 3, Dv = 5", 422, [2], 4, 4, 3, 5,
               _causal(4)),
    _sdpa_case("a key-padding mask (B, 1, S), lengths [6, 3, 1]", 423, [3], 4, 6, 8, 2,
               _padding([6, 3, 1], 6)),
    _sdpa_case("large scores (about 1000): the softmax must not overflow", 424, [2], 3, 4, 4, 3,
               None, kind="large"),
    _sdpa_case("scores from -8e3 down to -1.7e10, causal mask: masked keys must get 0", 425, [2],
               6, 6, 4, 3, _causal(6), kind="negative"),
    _sdpa_case("hidden: float64, (B, H, T, S) inputs, a (T, S) mask", 431, [2, 3], 4, 6, 5, 2,
               _rows("110100", "011011", "100001", "111110"), dtype="float64", hidden=True),
    _sdpa_case("hidden: one query, (B, H, T, S) inputs, a (B, 1, 1, S) mask", 432, [3, 2], 1, 5,
               4, 3, _padding([5, 2, 4], 5, ones=2), hidden=True),
    _sdpa_case("hidden: large scores, (B, H, T, S) inputs, a (1, 1, T, T) causal mask", 433,
               [2, 2], 5, 5, 4, 3, _causal(5, ones=2), kind="large", hidden=True),
    _sdpa_case("hidden: a batch of one, a (B, T, S) mask", 434, [1], 6, 3, 2, 7,
               [_rows("100", "010", "001", "110", "011", "111")], hidden=True),
    _sdpa_case("hidden: float64, no batch dims, no mask", 435, [], 5, 4, 3, 6, None,
               dtype="float64", hidden=True),
)

register(
    Task(
        id="4.2",
        assignment=ASSIGNMENT,
        func_name="scaled_dot_product_attention",
        title="Scaled dot-product attention softmax(Q K^T / sqrt(d_k)) V with a boolean mask",
        cases=_SDPA_CASES,
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

HINT_CAUSAL_DIAGONAL = (
    "A position may attend to itself: keep the diagonal True. The mask is True where s <= t, "
    "torch.ones(T, T, dtype=torch.bool).tril() (tril(-1) or s < t hides the token itself, and "
    "the first row then has no key at all)."
)
HINT_CAUSAL_UPPER = (
    "Row t is query t and column s is key s: query t may attend to keys s <= t, on and BELOW "
    "the diagonal (tril). Yours lets every position see the future and hides the past."
)
HINT_CAUSAL_INVERTED = (
    "True means MAY attend: your mask is True on the future, the positions to hide. The "
    "causal mask is its complement, True on and below the diagonal (tril)."
)
HINT_CAUSAL_ONE_AHEAD = (
    "Query t may attend to keys 0..t only: tril() with diagonal 0. Yours also lets every "
    "position see the next one."
)
HINT_CAUSAL_ALL = (
    "Hide the future: the causal mask is False above the diagonal (key s > query t)."
)
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
    "mask[t, s] is True when s <= t (key s is not in query t's future): "
    "torch.ones(T, T, dtype=torch.bool).tril()."
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


def _mask_mistakes() -> list[tuple[str, Callable[[int], Tensor]]]:
    """Known wrong causal masks ``f(T) -> (T, T) bool``, most specific first."""

    def ones(T: int) -> Tensor:
        return torch.ones(T, T, dtype=torch.bool)

    return [
        (HINT_CAUSAL_DIAGONAL, lambda T: ones(T).tril(-1)),
        (HINT_CAUSAL_UPPER, lambda T: ones(T).triu()),
        (HINT_CAUSAL_INVERTED, lambda T: ones(T).triu(1)),
        (HINT_CAUSAL_ONE_AHEAD, lambda T: ones(T).tril(1)),
        (HINT_CAUSAL_ALL, ones),
    ]


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
        for hint, wrong in _mask_mistakes():
            if torch.equal(pattern, wrong(T)):
                return Verdict(False, hint, detail)
        return Verdict(False, HINT_MASK_BOOL, detail)
    if torch.equal(values, want):
        return Verdict(True)
    detail = _mask_difference(values, want)
    for hint, wrong in _mask_mistakes():
        if torch.equal(values.bool(), wrong(T)):
            return Verdict(False, hint, detail)
    return Verdict(False, HINT_CAUSAL_GENERIC, detail)


def _decode_mask(plain: object) -> tuple[tuple[int, ...], str, Tensor]:
    """A plain mask -> (shape, dtype name, float64 values); ValueError if it is malformed."""
    if type(plain) is not dict or set(plain) != {"shape", "dtype", "data"}:
        raise ValueError("not a plain tensor")
    shape, dtype, data = plain["shape"], plain["dtype"], plain["data"]
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("bad shape")
    if type(dtype) is not str or type(data) is not list or len(data) != math.prod(shape):
        raise ValueError("bad data")
    if not all(type(v) in (int, float) for v in data):
        raise ValueError("bad values")
    values = torch.tensor(data, dtype=torch.float64).reshape(shape)
    if dtype == "bool" and not bool(((values == 0) | (values == 1)).all()):
        raise ValueError("a bool mask holds 0 and 1 only")
    return tuple(shape), dtype, values


def _mask_difference(got: Tensor, expected: Tensor) -> str:
    """``"mask[0, 1]: expected False, got True (3 of 16 values differ)."``"""
    wrong = (got != expected).nonzero()
    index = ", ".join(str(int(i)) for i in wrong[0])
    return (
        f"mask[{index}]: expected {bool(expected[tuple(wrong[0])])}, "
        f"got {bool(got[tuple(wrong[0])])} ({len(wrong)} of {got.numel()} values differ)."
    )


def _mask_case(name: str, T: int, *, hidden: bool = False) -> Case:
    return Case(name, 1, {"T": T}, hidden)


_MASK_CASES = (
    _mask_case("T = 4", 4),
    _mask_case("T = 7", 7),
    _mask_case("hidden: one position", 1, hidden=True),
    _mask_case("hidden: two positions", 2, hidden=True),
    _mask_case("hidden: an odd length", 5, hidden=True),
    _mask_case("hidden: a longer sequence", 16, hidden=True),
)

register(
    Task(
        id="4.3",
        assignment=ASSIGNMENT,
        func_name="causal_mask",
        title="The causal mask: query t may attend to keys 0..t",
        cases=_MASK_CASES,
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
    "q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T; mask = causal_mask(x.shape[1]) if causal else "
    "None; return scaled_dot_product_attention(q, k, v, mask)."
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
            attend: _Attention = scaled_dot_product_attention) -> Callable[[], tuple]:
        return lambda: attend(q, k, v, mask)

    variants: list[Variant] = []
    if causal:
        variants.append((HINT_CAUSAL_IGNORED, run(mask=None), ""))
        wrong_masks = [(f"{HINT_LAYER_MASK_WRONG} {hint}", run(mask=wrong(T)), "")
                       for hint, wrong in _mask_mistakes() if hint != HINT_CAUSAL_INVERTED]
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
        (HINT_SCALE_D_MODEL, run(attend=lambda q, k, v, m: _attend_by(q, k, v, m, x.shape[-1])),
         ""),
    ]
    for hint, wrong in _attention_mistakes():
        variants.append((f"{HINT_LAYER_ATTENTION_WRONG} {hint}", run(attend=wrong), ""))
    return variants


def _attend_by(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
               width: int) -> tuple[Tensor, Tensor]:
    """Attention with the scores divided by sqrt(width) instead of sqrt(Dk)."""
    scores = _raw_scores(q, k) / math.sqrt(width)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


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


def _judge_layer(got: object, expected: object, args: dict) -> Verdict:
    inputs = _build_layer_args(args)
    return judge_parts(list(got), list(expected), ("out", "weights"), args["dtype"],
                       lambda: _layer_variants(inputs), _layer_shape_hint_for(inputs),
                       HINT_LAYER_GENERIC)


def _layer_case(name: str, seed: int, B: int, T: int, D: int, Dk: int, Dv: int, causal: bool,
                *, dtype: str = "float32", hidden: bool = False) -> Case:
    args = {"seed": seed, "B": B, "T": T, "D": D, "Dk": Dk, "Dv": Dv, "causal": causal,
            "dtype": dtype}
    return Case(name, 1, args, hidden)


_LAYER_CASES = (
    _layer_case("not causal; 2 sequences of 5, D = 6, Dk = 4, Dv = 3", 441, 2, 5, 6, 4, 3,
                False),
    _layer_case("causal; 2 sequences of 4, D = 5, Dk = 3, Dv = 6", 442, 2, 4, 5, 3, 6, True),
    _layer_case("causal; every size 4 (B = T = D = Dk = Dv)", 443, 4, 4, 4, 4, 4, True),
    _layer_case("hidden: float64, causal", 451, 3, 6, 4, 5, 2, True, dtype="float64",
                hidden=True),
    _layer_case("hidden: one position, causal", 452, 2, 1, 3, 4, 5, True, hidden=True),
    _layer_case("hidden: a batch of one, not causal", 453, 1, 7, 8, 6, 4, False, hidden=True),
    _layer_case("hidden: larger sizes, causal", 454, 4, 12, 16, 8, 12, True, hidden=True),
)

register(
    Task(
        id="4.4",
        assignment=ASSIGNMENT,
        func_name="self_attention",
        title="A self-attention layer's forward pass, optionally causal",
        cases=_LAYER_CASES,
        build_args=_build_layer_args,
        reference=self_attention,
        to_plain=_layer_to_plain,
        judge=_judge_layer,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x is (B, T, D) and the weights (Dk, D), (Dk, D), (Dv, D), one row per output "
            "feature like nn.Linear's, so q = x @ w_q.T is (B, T, Dk) and v = x @ w_v.T "
            "(B, T, Dv); the mask is causal_mask(T) with T = x.shape[1].",
            "NameError": "A name is not defined: call scaled_dot_product_attention from task "
            "4.2 and causal_mask from task 4.3; run their cells first.",
            "CheckError": "Return a pair (out, weights) of tensors.",
        },
    )
)
