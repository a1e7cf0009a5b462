"""Chapter 3 tasks (``03_attention``): attention weights, masked attention, the additive score,
and one decoder step of an attention encoder-decoder.

The conventions are those of :mod:`coursepkg.attention`: one query per batch row, batch first;
the dot-product score of key s is ``scale * keys[b, s] . query[b]``; boolean masks are
**True = may attend**, and a masked key gets the score ``float("-inf")``, hence the weight
exactly 0. The references are the package's own tested functions; the decoder step is one step
of :class:`coursepkg.attention.Seq2Seq` with ``attention="dot"``.

Cases, plain values and judging work as in chapter 2, with the shared tensor helpers of
:mod:`coursepkg.checks.tensors`: a case's ``args`` hold a seed, sizes, masks and a dtype name,
and the inputs are drawn from a seeded generator; the judges compare shapes, dtypes and values,
and recognise known mistakes by recomputing each one from the case's inputs. A recomputed
mistake also matches an answer with NaN or infinite values in the same places (a softmax that
overflows, ``0 * -inf``), so those answers get the hint that names their cause. The mistakes of
the mask and the softmax are the course's one bank of attention mistakes
(:mod:`coursepkg.checks.attention_mistakes`), run on one query per row; the mistakes of a scale
given as an argument, and of the context vector, are this chapter's. The decoder step's LSTM
parameters are drawn as chapter 2 draws them (:func:`coursepkg.checks.tensors.cell_parameters`).
One public case of masked attention passes the keys as the values too, as the chapter's own
``attend(query, keys, keys)`` does.

Shape letters: B batch, S keys (source positions), D query/key width, Dv value width,
Dq query width, Dk key width, Hd hidden units of the additive score, E embedding width,
Hs decoder hidden size.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from coursepkg import attention, rnn
from coursepkg.checks import attention_mistakes as bank
from coursepkg.checks import masks
from coursepkg.checks.attention_mistakes import (
    HINT_MASK_AFTER_SOFTMAX,
    HINT_MASK_IGNORED,
    HINT_MASK_INVERTED,
    HINT_MASK_NAN,
    HINT_MASK_ZERO,
    HINT_OUT_KEYS,
    HINT_SCALE_ON_WEIGHTS,
    HINT_SOFTMAX_DIM_0,
    HINT_SOFTMAX_OVERFLOW,
)
from coursepkg.checks.core import Args, Task, draw_seed, draw_sizes, hidden, register
from coursepkg.checks.forbidden import ATTENTION_KERNELS, RECURRENT_KERNELS
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    Variant,
    cell_parameters,
    generator,
    normal,
    parts_plain,
    tensor_judge,
    tensor_plain,
)

__all__ = [
    "ASSIGNMENT",
    "attention_weights",
    "decoder_step",
    "masked_attention",
]

ASSIGNMENT = "03_attention"

# The package's attention code and torch's fused attention do the whole task; a student must
# write the scores, the softmax and the weighted average.
_NO_ATTENTION_LIBRARIES = (
    "coursepkg.attention",
    "coursepkg.checks",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
    *ATTENTION_KERNELS,
)
# The decoder step may use the package's lstm_step (chapter 2), not torch's recurrent modules.
_NO_LIBRARIES_FOR_THE_STEP = (
    *_NO_ATTENTION_LIBRARIES,
    "torch.nn.LSTM",
    "torch.nn.LSTMCell",
    "torch.lstm",
    "torch.lstm_cell",
    *RECURRENT_KERNELS,
)


# --------------------------------------------------------------------------------------------
# Attention arithmetic the known mistakes share
# --------------------------------------------------------------------------------------------


def _one_per_row(mask: Tensor) -> Tensor:
    """The weights of a masked mean: 1 / (number of allowed keys) on each allowed key, (B, S)."""
    allowed = mask.to(torch.float64)
    return allowed / allowed.sum(dim=-1, keepdim=True)


def _weighted(weights: Tensor, values: Tensor) -> Tensor:
    """sum_s weights[b, s] * values[b, s]: (B, S), (B, S, Dv) -> (B, Dv)."""
    return (weights.unsqueeze(1) @ values).squeeze(1)


# --------------------------------------------------------------------------------------------
# Hints shared by the tasks
# --------------------------------------------------------------------------------------------

HINT_NO_SOFTMAX = (
    "Those are the scores: turn them into weights with a softmax over the keys, "
    "torch.softmax(scores, dim=-1), so that they are positive and sum to 1."
)
HINT_LOG_SOFTMAX = (
    "Use torch.softmax, not log_softmax: the weights are probabilities (positive, summing to "
    "1), not their logarithms."
)
HINT_NO_EXP = (
    "Dividing the scores by their sum is not a softmax: scores can be negative. Exponentiate "
    "first, softmax(s)_i = exp(s_i) / sum_j exp(s_j), or call torch.softmax(scores, dim=-1)."
)
HINT_SCALE_IGNORED = (
    "Multiply the scores by scale before the softmax: weights = softmax(scale * scores). "
    "Without it, long vectors give scores so large that the softmax picks a single key."
)
HINT_SCALE_DIVIDES = (
    "scale multiplies the scores (scale * scores), it does not divide them: for the usual "
    "scaled dot product, scale is already 1 / sqrt(D)."
)
HINT_SCALE_ARGUMENT = (
    "Use the scale you are given, not 1 / sqrt(D) computed yourself: the caller chooses the "
    "scale (1, 1 / sqrt(D), a learned temperature, ...)."
)
HINT_SCALE_ON_VALUES = (
    "The scale multiplies the scores, before the softmax, and nothing else: not the values, "
    "not the context. It changes how peaked the weights are; the context stays an average of "
    "the values."
)
HINT_QUERY_BROADCAST = (
    "Each row's keys meet their own row's query: give the query a key axis, "
    "query.unsqueeze(1) (B, 1, D), before multiplying with keys (B, S, D); without it the "
    "query of row s is paired with the keys of row b."
)
HINT_ALL_PAIRS = (
    "Your scores pair every row's query with every row's keys: one score per key of the SAME "
    "row is keys @ query.unsqueeze(-1), (B, S, D) @ (B, D, 1) -> (B, S, 1), then .squeeze(-1); "
    "or torch.einsum('bsd,bd->bs', keys, query)."
)
HINT_SQUEEZE_KEEP = (
    "Remove the axis of length 1 that the batched product leaves: .squeeze(-1) of (B, S, 1) "
    "(or .squeeze(1) of (B, 1, S)) gives the (B, S) weights."
)
HINT_SQUEEZE_ALL = (
    "squeeze() without a dim removes EVERY axis of length 1, also B = 1 or S = 1: name the "
    "axis you added, .squeeze(-1), so that the weights stay (B, S)."
)
HINT_SUM_OVER_KEYS = (
    "The dot product of a key with the query sums over the features D (dim=-1 of keys * "
    "query.unsqueeze(1)), not over the keys: there is one score per key, (B, S)."
)
HINT_WEIGHTS_TRANSPOSED = "The weights are (B, S), one row per query, not (S, B)."
HINT_ROW_WEIGHTS_SHAPE = "Return the weights as (B, S): one weight per key, for every row."


def _weights_shape_hint(got: tuple[int, ...], expected: tuple[int, ...]) -> str:
    """The hint for weights of the wrong shape."""
    B, S = expected
    if got in ((B, S, 1), (B, 1, S)):
        return HINT_SQUEEZE_KEEP
    if got in ((B, B, S), (B, S, B)):
        return HINT_ALL_PAIRS
    if len(got) < 2 and math.prod(got) == B * S:
        return HINT_SQUEEZE_ALL
    if got == (S, B):
        return HINT_WEIGHTS_TRANSPOSED
    if len(got) == 2 and got[0] == B:
        return HINT_SUM_OVER_KEYS  # (B, D): summed over the keys instead of the features
    return HINT_ROW_WEIGHTS_SHAPE


# --------------------------------------------------------------------------------------------
# Task 3.1 attention_weights
# --------------------------------------------------------------------------------------------

HINT_WEIGHTS_GENERIC = (
    "weights = torch.softmax(scale * scores, dim=-1), where scores[b, s] = keys[b, s] . "
    "query[b], the dot product of each key with its own row's query."
)


def _build_weights_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, S, D = int(args["B"]), int(args["S"]), int(args["D"])
    if args["kind"] == "large":
        # Small integers and one large feature: every score is 1000 plus a small integer,
        # computed exactly in any order, and far beyond what exp can hold.
        keys = torch.randint(-2, 3, (B, S, D), generator=gen).to(dtype)
        query = torch.randint(-2, 3, (B, D), generator=gen).to(dtype)
        keys[..., 0], query[:, 0] = 4.0, 250.0
    else:
        query = normal(gen, (B, D), 1.0, dtype)
        keys = normal(gen, (B, S, D), 1.0, dtype)
    return query, keys, float(args["scale"])


def attention_weights(query: Tensor, keys: Tensor, scale: float) -> Tensor:
    """Task 3.1's reference: the weights of :func:`coursepkg.attention.attend`.

    Args:
        query: (B, D); keys: (B, S, D); scale: multiplies the scores.

    Returns:
        (B, S) softmax over S of ``scale * keys[b, s] . query[b]``.
    """
    _, weights = attention.attend(query, keys, keys, scale=scale)
    return weights


def _weights_to_plain(value: object) -> dict:
    return tensor_plain(value, "the weights")


def _weights_variants(inputs: tuple) -> list[Variant]:
    query, keys, scale = inputs
    B, S, D = keys.shape
    raw = (keys @ query.unsqueeze(-1)).squeeze(-1)  # (B, S) unscaled scores
    scores = scale * raw

    def softmax(x: Tensor, dim: int = -1) -> Tensor:
        return torch.softmax(x, dim=dim)

    def naive() -> Tensor:
        exps = torch.exp(scores)
        return exps / exps.sum(dim=-1, keepdim=True)

    def query_broadcast() -> Tensor:
        return softmax(scale * (keys * query.unsqueeze(0)).sum(dim=-1))  # row s's query

    return [
        (HINT_SOFTMAX_OVERFLOW, lambda: (naive(),), ""),
        (HINT_SOFTMAX_DIM_0, lambda: (softmax(scores, 0),), ""),
        (HINT_NO_SOFTMAX, lambda: (scores,), ""),
        (HINT_LOG_SOFTMAX, lambda: (torch.log_softmax(scores, dim=-1),), ""),
        (HINT_NO_EXP, lambda: (scores / scores.sum(dim=-1, keepdim=True),), ""),
        (HINT_SCALE_IGNORED, lambda: (softmax(raw),), ""),
        (HINT_SCALE_DIVIDES, lambda: (softmax(raw / scale),), ""),
        (HINT_SCALE_ARGUMENT, lambda: (softmax(raw / math.sqrt(D)),), ""),
        (HINT_SCALE_ON_WEIGHTS, lambda: (scale * softmax(raw),), ""),
        (HINT_QUERY_BROADCAST, lambda: (query_broadcast(),), ""),
    ]


def _weights_shape_hint_3_1(got: list, expected: list, k: int) -> str:
    return _weights_shape_hint(got[0], expected[0])


_judge_weights = tensor_judge(_build_weights_args, ("weights",), _weights_variants,
                              _weights_shape_hint_3_1, HINT_WEIGHTS_GENERIC)


@dataclass(frozen=True)
class Weights(Args):
    """A case of task 3.1: query (B, D), keys (B, S, D); ``kind`` "large": scores of about
    1000, computed exactly."""

    seed: int
    B: int
    S: int
    D: int
    scale: float
    kind: str = "normal"
    dtype: str = "float32"


_WEIGHTS_CASES = (
    Weights(301, B=2, S=5, D=3, scale=3**-0.5).case(
        "2 queries, 5 keys of width 3, scale 1/sqrt(3)"),
    Weights(302, B=3, S=4, D=6, scale=1.0).case("3 queries, 4 keys of width 6, scale 1"),
    Weights(303, B=2, S=3, D=3, scale=1.0, kind="large").case(
        "large scores (about 1000): the softmax must not overflow"),
)

#: Scales of the hidden cases: neither 1 nor 1 / sqrt(D), which known mistakes compute.
_SCALES = (0.25, 0.5, 0.75, 1.5, 2.0)


def _weights(rng: random.Random, *, B: int | None = None, S: int | None = None,
             kind: str = "normal", dtype: str = "float32") -> Weights:
    """A case of task 3.1 drawn from ``rng`` (large scores are computed exactly at scale 1)."""
    sizes = draw_sizes(rng, 3, 2, 7)
    return Weights(draw_seed(rng), sizes[0] if B is None else B, sizes[1] if S is None else S,
                   sizes[2], 1.0 if kind == "large" else rng.choice(_SCALES), kind, dtype)


_WEIGHTS_HIDDEN = (
    hidden("hidden: float64", lambda rng: _weights(rng, dtype="float64")),
    hidden("hidden: a batch of one", lambda rng: _weights(rng, B=1)),
    hidden("hidden: a single key", lambda rng: _weights(rng, S=1)),
    hidden("hidden: large scores in float64",
           lambda rng: _weights(rng, kind="large", dtype="float64")),
)

_SCORES_RUNTIME_HINT = (
    "A tensor operation failed, most often because shapes do not fit: query is (B, D) and keys "
    "(B, S, D); one score per key is keys @ query.unsqueeze(-1), (B, S, 1), then .squeeze(-1), "
    "or torch.einsum('bsd,bd->bs', keys, query)."
)

register(
    Task(
        id="3.1",
        assignment=ASSIGNMENT,
        func_name="attention_weights",
        title="Dot-product scores and their softmax, one query per row",
        cases=_WEIGHTS_CASES,
        hidden=_WEIGHTS_HIDDEN,
        build_args=_build_weights_args,
        reference=attention_weights,
        to_plain=_weights_to_plain,
        judge=_judge_weights,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": _SCORES_RUNTIME_HINT,
            "CheckError": "Return the (B, S) tensor of weights.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 3.2 masked_attention
# --------------------------------------------------------------------------------------------

HINT_CONTEXT_MEAN = (
    "The context is the WEIGHTED average of the values, sum_s weights[b, s] * values[b, s], "
    "not their plain mean: the weights are what makes attention pick keys."
)
HINT_CONTEXT_MEAN_OF_PRODUCTS = (
    "Sum the weighted values over the keys, do not average them: the weights already sum to "
    "1, so sum_s weights[b, s] * values[b, s] is the average."
)
HINT_CONTEXT_BATCH = (
    "weights @ values with weights (B, S) multiplies every row's weights with every row's "
    "values, (B, B, Dv): give the weights an axis, weights.unsqueeze(1) @ values -> "
    "(B, 1, Dv), then .squeeze(1); or torch.einsum('bs,bsv->bv', weights, values)."
)
HINT_CONTEXT_NOT_SUMMED = (
    "Sum over the keys: weights.unsqueeze(-1) * values is (B, S, Dv), one weighted value per "
    "key; the context is their sum over S, (B, Dv)."
)
HINT_CONTEXT_KEEPDIM = "The context is (B, Dv): remove the axis of length 1, .squeeze(1)."
HINT_CONTEXT_ORDER = "Return the pair in the order (context, weights)."
HINT_CONTEXT_SHAPE = "The context is one vector per row, (B, Dv), like a value."
HINT_ATTEND_GENERIC = (
    "Score each key of a row with the row's own query, times scale; set the masked scores to "
    "float('-inf'); the weights are their softmax over the keys (dim=-1); the context is the "
    "values averaged with the weights, (B, Dv). Return (context, weights)."
)

_Attend = Callable[[Tensor, Tensor, Tensor, Tensor, float], tuple[Tensor, Tensor]]


def _one_query(f: bank.Attention) -> _Attend:
    """A mistake of the bank of attention mistakes, on one query per row: the query (B, D) is a
    sequence of one, (B, 1, D), and the mask (B, S) a (B, 1, S) one."""

    def g(query: Tensor, keys: Tensor, values: Tensor, mask: Tensor,
          scale: float) -> tuple[Tensor, Tensor]:
        out, weights = f(query.unsqueeze(-2), keys, values, mask.unsqueeze(-2), scale=scale)
        return out.squeeze(-2), weights.squeeze(-2)

    return g


def _attention_mistakes() -> list[tuple[str, _Attend]]:
    """Known wrong ``f(query, keys, values, mask, scale) -> (context, weights)``, most specific
    first: the bank's mistakes of the mask and the softmax, and this chapter's of the scale
    argument and of the context."""

    def scores_of(query: Tensor, keys: Tensor) -> Tensor:
        return (keys @ query.unsqueeze(-1)).squeeze(-1)  # (B, S), unscaled

    def masked(scores: Tensor, mask: Tensor) -> Tensor:
        return scores.masked_fill(~mask, float("-inf"))

    def right_weights(q, k, mask, scale):
        return torch.softmax(masked(scale * scores_of(q, k), mask), dim=-1)

    def mask_after_context_unmasked(q, k, v, mask, scale):
        weights = torch.softmax(scale * scores_of(q, k), dim=-1)
        return _weighted(weights, v), weights * mask

    def scaled(factor: Callable[[float], float]) -> _Attend:
        def f(q, k, v, mask, scale):
            weights = torch.softmax(masked(factor(scale) * scores_of(q, k), mask), dim=-1)
            return _weighted(weights, v), weights
        return f

    def scale_on_values(q, k, v, mask, scale):
        weights = torch.softmax(masked(scores_of(q, k), mask), dim=-1)
        return _weighted(weights, scale * v), weights

    def scale_on_context(q, k, v, mask, scale):
        weights = right_weights(q, k, mask, scale)
        return scale * _weighted(weights, v), weights

    def context(which: str) -> _Attend:
        def f(q, k, v, mask, scale):
            weights = right_weights(q, k, mask, scale)
            plain = {
                "mean": lambda: v.mean(dim=1),
                "masked mean": lambda: _weighted(_one_per_row(mask).to(v.dtype), v),
                "mean of products": lambda: (weights.unsqueeze(-1) * v).mean(dim=1),
            }[which]()
            return plain, weights
        return f

    return [
        (HINT_MASK_AFTER_SOFTMAX, _one_query(bank.mask_after_softmax)),
        (HINT_MASK_AFTER_SOFTMAX, mask_after_context_unmasked),
        (HINT_MASK_ZERO, _one_query(bank.masked(fill=0.0))),
        (HINT_MASK_NAN, _one_query(bank.mask_times_inf)),
        (HINT_MASK_INVERTED, _one_query(bank.masked(invert=True))),
        (HINT_MASK_IGNORED, _one_query(bank.mask_ignored)),
        (HINT_SOFTMAX_DIM_0, _one_query(bank.masked(dim=0))),
        (HINT_SCALE_ON_VALUES, scale_on_values),
        (HINT_SCALE_ON_VALUES, scale_on_context),
        (HINT_SCALE_ON_WEIGHTS, _one_query(bank.scale_on_weights)),
        (HINT_SCALE_IGNORED, scaled(lambda scale: 1.0)),
        (HINT_SCALE_DIVIDES, scaled(lambda scale: 1 / scale)),
        (HINT_CONTEXT_MEAN, context("mean")),
        (HINT_CONTEXT_MEAN, context("masked mean")),
        (HINT_CONTEXT_MEAN_OF_PRODUCTS, context("mean of products")),
        (HINT_OUT_KEYS, _one_query(bank.output_of(lambda weights, k, v: weights @ k))),
    ]


def _build_attend_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, S, D, Dv = int(args["B"]), int(args["S"]), int(args["D"]), int(args["Dv"])
    query = normal(gen, (B, D), 1.0, dtype)
    keys = normal(gen, (B, S, D), 1.0, dtype)
    values = normal(gen, (B, S, Dv), 1.0, dtype)
    if args["values_are_keys"]:  # attend(query, keys, keys): one tensor, twice
        values = keys
    mask = masks.as_tensor(args["mask"]).reshape(B, S)
    return query, keys, values, mask, float(args["scale"])


def masked_attention(
    query: Tensor, keys: Tensor, values: Tensor, mask: Tensor, scale: float
) -> tuple[Tensor, Tensor]:
    """Task 3.2's reference: :func:`coursepkg.attention.attend`.

    Args:
        query: (B, D); keys: (B, S, D); values: (B, S, Dv); mask: (B, S), True = may attend;
        scale: multiplies the scores.

    Returns:
        ``(context (B, Dv), weights (B, S))``.
    """
    return attention.attend(query, keys, values, mask, scale)


def _attend_to_plain(value: object) -> list[dict]:
    return parts_plain(value, ("context", "weights"))


def _attend_shape_hint(got: list, expected: list, k: int) -> str:
    (B, Dv), (_, S) = expected
    if got[0] == (B, S) and got[1] == (B, Dv):
        return HINT_CONTEXT_ORDER
    if k == 1:
        return _weights_shape_hint(got[1], expected[1])
    shape = got[0]
    if shape == (B, B, Dv):
        return HINT_CONTEXT_BATCH
    if shape == (B, S, Dv):
        return HINT_CONTEXT_NOT_SUMMED
    if shape == (B, 1, Dv):
        return HINT_CONTEXT_KEEPDIM
    if len(shape) == 2 and shape[0] == B:
        return HINT_OUT_KEYS  # (B, D): the keys averaged
    return HINT_CONTEXT_SHAPE


def _attend_variants(inputs: tuple) -> list[Variant]:
    def swapped() -> tuple[Tensor, Tensor]:
        context, weights = masked_attention(*inputs)
        return weights, context

    known = [(hint, lambda f=f: f(*inputs), "") for hint, f in _attention_mistakes()]
    return [(HINT_CONTEXT_ORDER, swapped, ""), *known]


_judge_attend = tensor_judge(_build_attend_args, ("context", "weights"), _attend_variants,
                             _attend_shape_hint, HINT_ATTEND_GENERIC)


@dataclass(frozen=True)
class Attend(Args):
    """A case of task 3.2: query (B, D), keys (B, S, D), values (B, S, Dv) or the keys
    themselves, the (B, S) mask."""

    seed: int
    D: int
    Dv: int
    mask: list
    scale: float
    values_are_keys: bool = False
    dtype: str = "float32"

    def plain(self) -> dict:
        return {**super().plain(), "B": len(self.mask), "S": len(self.mask[0])}


_ATTEND_CASES = (
    Attend(321, D=3, Dv=5, mask=masks.rows("1101", "0010"), scale=3**-0.5).case(
        "2 rows of 4 keys; the second row may attend to one key only"),
    Attend(322, D=4, Dv=2, mask=masks.rows("11111", "11100", "10000"), scale=0.5).case(
        "a right-padded batch, lengths [5, 3, 1]"),
    Attend(323, D=2, Dv=3, mask=masks.rows("111", "111", "111"), scale=1.0).case(
        "no key masked"),
    Attend(324, D=4, Dv=4, mask=masks.rows("101101", "011010"), scale=0.5).case(
        "values as wide as the keys (Dv = D)"),
    Attend(325, D=3, Dv=3, mask=masks.rows("1110", "1101", "0111"), scale=0.5,
           values_are_keys=True).case(
        "the keys are also the values, one tensor passed twice as in attend(query, keys, keys)"),
)


def _attend(rng: random.Random, mask: list, *, values_are_keys: bool = False,
            dtype: str = "float32") -> Attend:
    """A case of task 3.2 with ``mask``, drawn from ``rng``."""
    D, Dv = draw_sizes(rng, 2, 2, 6)
    return Attend(draw_seed(rng), D, D if values_are_keys else Dv, mask, rng.choice(_SCALES),
                  values_are_keys, dtype)


def _padded(rng: random.Random) -> list:
    S = rng.randint(5, 8)
    return masks.padding(masks.random_lengths(rng, rng.randint(3, 4), S), S, ones=0)


_ATTEND_HIDDEN = (
    hidden("hidden: float64, a padded batch with a full row",
           lambda rng: _attend(rng, _padded(rng), dtype="float64")),
    hidden("hidden: a batch of one",
           lambda rng: _attend(rng, masks.random_rows(rng, 1, rng.randint(4, 6)))),
    hidden("hidden: a single key", lambda rng: _attend(rng, [[True]] * rng.randint(2, 4))),
    hidden("hidden: one allowed key per row",
           lambda rng: _attend(rng, masks.random_rows(rng, rng.randint(2, 4), rng.randint(3, 6),
                                                      per_row=1))),
    hidden("hidden: the keys are also the values",
           lambda rng: _attend(rng, masks.random_rows(rng, rng.randint(2, 4), rng.randint(3, 6)),
                               values_are_keys=True)),
)

register(
    Task(
        id="3.2",
        assignment=ASSIGNMENT,
        func_name="masked_attention",
        title="Dot-product attention with a mask: the context and the weights",
        cases=_ATTEND_CASES,
        hidden=_ATTEND_HIDDEN,
        build_args=_build_attend_args,
        reference=masked_attention,
        to_plain=_attend_to_plain,
        judge=_judge_attend,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": _SCORES_RUNTIME_HINT + " The context is weights.unsqueeze(1) @ "
            "values, (B, 1, S) @ (B, S, Dv) -> (B, 1, Dv), then .squeeze(1).",
            "CheckError": "Return a pair (context, weights) of tensors.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 3.3 additive_scores
# --------------------------------------------------------------------------------------------

HINT_ADDITIVE_NO_TANH = (
    "Apply tanh to the sum W_q q + W_k k_s + b before the product with v: without it the "
    "score is linear, v . W_q q + v . W_k k_s + v . b, and the query's part is the same for "
    "every key, so it cannot change the weights at all."
)
HINT_ADDITIVE_NO_BIAS = (
    "Add the bias inside the tanh: tanh((query @ w_q.T).unsqueeze(1) + keys @ w_k.T + bias). "
    "Without it every hidden unit's threshold is stuck at 0."
)
HINT_ADDITIVE_BIAS_OUTSIDE = (
    "The bias goes inside the tanh, with the two projections: tanh(W_q q + W_k k_s + b), not "
    "tanh(W_q q + W_k k_s) + b."
)
HINT_ADDITIVE_TANH_SPLIT = (
    "Take one tanh of the whole sum, tanh(W_q q + W_k k_s + b): the query and the key meet "
    "inside the nonlinearity. A tanh on each projection separately makes the score a sum of "
    "a query part and a key part again."
)
HINT_ADDITIVE_V_INSIDE = (
    "v multiplies the tanh, it is not inside it: score = tanh(W_q q + W_k k_s + b) @ v."
)
HINT_ADDITIVE_NO_V = (
    "Reduce the Hd hidden units to one score with the vector v, tanh(...) @ v, not with a "
    "plain sum or mean: v is a learned parameter of the score."
)
HINT_ADDITIVE_SOFTMAX = (
    "Return the scores, not the weights: the softmax (and the mask) come after the score, in "
    "attention itself (task 3.2)."
)
HINT_ADDITIVE_NONLINEARITY = "The additive score uses tanh (Bahdanau et al.), not relu or sigmoid."
HINT_ADDITIVE_SWAPPED = (
    "w_q projects the query and w_k the keys, not the other way round: query @ w_q.T and "
    "keys @ w_k.T."
)
HINT_ADDITIVE_TRANSPOSE = (
    "Multiply by the transposed weights: w_q is (Hd, Dq) and w_k (Hd, Dk), one row per hidden "
    "unit, so the projections are query @ w_q.T and keys @ w_k.T."
)
HINT_ADDITIVE_SHAPE = "Return one score per key, (B, S)."
HINT_ADDITIVE_GENERIC = (
    "score[b, s] = v . tanh(w_q @ query[b] + w_k @ keys[b, s] + bias): for the whole batch, "
    "torch.tanh((query @ w_q.T).unsqueeze(1) + keys @ w_k.T + bias) @ v."
)


def _build_additive_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, S = int(args["B"]), int(args["S"])
    Dq, Dk, Hd = int(args["Dq"]), int(args["Dk"]), int(args["Hd"])
    query = normal(gen, (B, Dq), 1.0, dtype)
    keys = normal(gen, (B, S, Dk), 1.0, dtype)
    w_q = normal(gen, (Hd, Dq), 1 / math.sqrt(Dq), dtype)
    w_k = normal(gen, (Hd, Dk), 1 / math.sqrt(Dk), dtype)
    v = normal(gen, (Hd,), 1.0, dtype)
    bias = normal(gen, (Hd,), 0.5, dtype)
    return query, keys, w_q, w_k, v, bias


def _additive_to_plain(value: object) -> dict:
    return tensor_plain(value, "the scores")


def _additive_variants(inputs: tuple) -> list[Variant]:
    query, keys, w_q, w_k, v, bias = inputs
    tanh = torch.tanh
    q = (query @ w_q.T).unsqueeze(1)  # (B, 1, Hd)
    k = keys @ w_k.T  # (B, S, Hd)
    hidden = q + k + bias  # (B, S, Hd)

    def projections(q_weight: Tensor, k_weight: Tensor, q_in: Tensor = query,
                    k_in: Tensor = keys) -> Tensor:
        return tanh((q_in @ q_weight).unsqueeze(1) + k_in @ k_weight + bias) @ v

    def one(f: Callable[[], Tensor]) -> Callable[[], tuple[Tensor]]:
        return lambda: (f(),)

    return [
        (HINT_ADDITIVE_NO_TANH, one(lambda: hidden @ v), ""),
        (HINT_ADDITIVE_NO_BIAS, one(lambda: tanh(q + k) @ v), ""),
        (HINT_ADDITIVE_BIAS_OUTSIDE, one(lambda: (tanh(q + k) + bias) @ v), ""),
        (HINT_ADDITIVE_TANH_SPLIT, one(lambda: (tanh(q) + tanh(k) + bias) @ v), ""),
        (HINT_ADDITIVE_TANH_SPLIT, one(lambda: (tanh(q) + tanh(k + bias)) @ v), ""),
        (HINT_ADDITIVE_TANH_SPLIT, one(lambda: (tanh(q + bias) + tanh(k)) @ v), ""),
        (HINT_ADDITIVE_V_INSIDE, one(lambda: tanh(hidden @ v)), ""),
        (HINT_ADDITIVE_NO_V, one(lambda: tanh(hidden).sum(dim=-1)), ""),
        (HINT_ADDITIVE_NO_V, one(lambda: tanh(hidden).mean(dim=-1)), ""),
        (HINT_ADDITIVE_SOFTMAX, one(lambda: torch.softmax(tanh(hidden) @ v, dim=-1)), ""),
        (HINT_ADDITIVE_NONLINEARITY, one(lambda: torch.relu(hidden) @ v), ""),
        (HINT_ADDITIVE_NONLINEARITY, one(lambda: torch.sigmoid(hidden) @ v), ""),
        (HINT_ADDITIVE_SWAPPED, one(lambda: projections(w_k.T, w_q.T)), ""),
        (HINT_ADDITIVE_TRANSPOSE, one(lambda: projections(w_q, w_k.T)), ""),
        (HINT_ADDITIVE_TRANSPOSE, one(lambda: projections(w_q.T, w_k)), ""),
        (HINT_ADDITIVE_TRANSPOSE, one(lambda: projections(w_q, w_k)), ""),
        (HINT_ADDITIVE_SWAPPED, one(lambda: projections(w_k, w_q)), ""),
        (HINT_QUERY_BROADCAST, one(lambda: tanh((query @ w_q.T).unsqueeze(0) + hidden - q) @ v),
         ""),
    ]


def _additive_shape_hint(got: list, expected: list, k: int) -> str:
    B, S = expected[0]
    shape = got[0]
    if len(shape) == 3 and shape[:2] == (B, S):
        return HINT_ADDITIVE_NO_V
    if shape in ((B, B, S), (B, S, B)):
        return HINT_ALL_PAIRS
    if shape == (B, B):
        return HINT_QUERY_BROADCAST  # a single key: (B, Hd) + (B, 1, Hd) is (B, B, Hd)
    if len(shape) < 2 and math.prod(shape) == B * S:
        return HINT_SQUEEZE_ALL
    return HINT_ADDITIVE_SHAPE


_judge_additive = tensor_judge(_build_additive_args, ("scores",), _additive_variants,
                               _additive_shape_hint, HINT_ADDITIVE_GENERIC)


@dataclass(frozen=True)
class Additive(Args):
    """A case of task 3.3: query (B, Dq), keys (B, S, Dk), Hd hidden units."""

    seed: int
    B: int
    S: int
    Dq: int
    Dk: int
    Hd: int
    dtype: str = "float32"


_ADDITIVE_CASES = (
    Additive(341, B=2, S=5, Dq=3, Dk=4, Hd=6).case("2 rows of 5 keys; Dq = 3, Dk = 4, Hd = 6"),
    Additive(342, B=3, S=3, Dq=4, Dk=4, Hd=4).case(
        "every width 4 (Dq = Dk = Hd), 3 rows of 3 keys"),
    Additive(343, B=4, S=6, Dq=5, Dk=10, Hd=5).case("the decoder's widths: Dk = 2 Dq, Hd = Dq"),
)


def _additive(rng: random.Random, *, B: int | None = None, S: int | None = None,
              large: bool = False, dtype: str = "float32") -> Additive:
    """A case of task 3.3 drawn from ``rng``: three different widths."""
    low, high = (12, 32) if large else (2, 6)
    B = (rng.randint(6, 10) if large else rng.randint(2, 4)) if B is None else B
    S = (rng.randint(8, 14) if large else rng.randint(2, 6)) if S is None else S
    return Additive(draw_seed(rng), B, S, *draw_sizes(rng, 3, low, high), dtype=dtype)


_ADDITIVE_HIDDEN = (
    hidden("hidden: float64", lambda rng: _additive(rng, dtype="float64")),
    hidden("hidden: a batch of one", lambda rng: _additive(rng, B=1)),
    hidden("hidden: a single key", lambda rng: _additive(rng, S=1)),
    hidden("hidden: larger sizes", lambda rng: _additive(rng, large=True)),
)

register(
    Task(
        id="3.3",
        assignment=ASSIGNMENT,
        func_name="additive_scores",
        title="The additive (MLP, Bahdanau) score v^T tanh(W_q q + W_k k + b) of every key",
        cases=_ADDITIVE_CASES,
        hidden=_ADDITIVE_HIDDEN,
        build_args=_build_additive_args,
        reference=attention.additive_scores,
        to_plain=_additive_to_plain,
        judge=_judge_additive,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "w_q is (Hd, Dq) and w_k (Hd, Dk), so query @ w_q.T is (B, Hd) and keys @ w_k.T "
            "(B, S, Hd); give the query's projection a key axis, .unsqueeze(1), to add it to "
            "every key's.",
            "CheckError": "Return the (B, S) tensor of scores.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 3.4 decoder_step
# --------------------------------------------------------------------------------------------

HINT_STEP_QUERY_CELL = (
    "The query is the previous hidden state h_prev, not the cell state c_prev: state is the "
    "pair (h_prev, c_prev)."
)
HINT_STEP_QUERY_EMBEDDING = (
    "The query is the decoder's previous hidden state h_prev, which knows what has been "
    "written so far, not the embedding of the previous token."
)
HINT_STEP_MASK = (
    "Pass the mask to the attention: padded source positions (mask False) must get weight 0."
)
HINT_STEP_SCALE = (
    "Scale the scores by 1 / sqrt(Hs), Hs the width of h_prev and of the keys (as the "
    "Seq2Seq model does): masked_attention(h_prev, keys, encoder_states, mask, "
    "h_prev.shape[-1] ** -0.5)."
)
HINT_STEP_KEYS = (
    "Project the encoder states to keys first, keys = encoder_states @ key_proj.T (B, S, Hs); "
    "the values are the encoder states themselves."
)
HINT_STEP_VALUES = (
    "The values are the encoder states (B, S, Dv), not the projected keys: the context "
    "averages what the encoder computed."
)
HINT_STEP_INPUT_ORDER = (
    "The LSTM's input is torch.cat([embedding, context], dim=-1), the embedding first: the "
    "columns of weight_ih follow that order."
)
HINT_STEP_CONTEXT_MEAN = (
    "The context is the attention's weighted average of the encoder states, not their plain "
    "mean: that is what lets each step look at a different part of the source."
)
HINT_STEP_NEW_STATE = (
    "Return the context (and weights) that you fed to the LSTM, computed from h_prev; do not "
    "attend again with the new state h_t."
)
HINT_STEP_STATE_ORDER = "Return (h_t, c_t, context, weights) in that order: h_t before c_t."
HINT_STEP_ATTENTION_WRONG = (
    "The step is wired right but the attention in it is not: your results are those of a "
    "masked_attention with a mistake. Make masked_attention pass task 3.2, then call it here."
)
HINT_STEP_SHAPE = (
    "Return (h_t, c_t, context, weights): h_t and c_t (B, Hs), context (B, Dv) like one "
    "encoder state, weights (B, S)."
)
HINT_STEP_GENERIC = (
    "keys = encoder_states @ key_proj.T; context, weights = masked_attention(h_prev, keys, "
    "encoder_states, mask, h_prev.shape[-1] ** -0.5); h_t, c_t = lstm_step(torch.cat("
    "[embedding, context], dim=-1), (h_prev, c_prev), *lstm_params)."
)
_STEP_NAMES = ("h_t", "c_t", "context", "weights")


def _build_step_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, S, E = int(args["B"]), int(args["S"]), int(args["E"])
    Hs, Dv = int(args["Hs"]), int(args["Dv"])
    embedding = normal(gen, (B, E), 1.0, dtype)
    h_prev = torch.tanh(normal(gen, (B, Hs), 1.5, dtype))
    c_prev = normal(gen, (B, Hs), 1.0, dtype)
    encoder_states = torch.tanh(normal(gen, (B, S, Dv), 1.5, dtype))
    key_proj = normal(gen, (Hs, Dv), 2.0, dtype)
    lstm_params = cell_parameters(gen, 4, E + Dv, Hs, dtype)
    lengths = torch.tensor(args["lengths"])
    mask = torch.arange(S)[None, :] < lengths[:, None]  # (B, S)
    return embedding, (h_prev, c_prev), encoder_states, mask, key_proj, lstm_params


def decoder_step(
    embedding: Tensor,
    state: tuple[Tensor, Tensor],
    encoder_states: Tensor,
    mask: Tensor,
    key_proj: Tensor,
    lstm_params: tuple[Tensor, Tensor, Tensor, Tensor],
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Task 3.4's reference: one step of :class:`coursepkg.attention.Seq2Seq` (``"dot"``).

    Args:
        embedding: (B, E) the embedding of the previous target token.
        state: ``(h_prev, c_prev)``, each (B, Hs), the decoder's state.
        encoder_states: (B, S, Dv) the keys' sources and the values.
        mask: (B, S) True on real source positions.
        key_proj: (Hs, Dv): keys = encoder_states @ key_proj.T.
        lstm_params: ``(weight_ih (4 Hs, E + Dv), weight_hh (4 Hs, Hs), bias_ih, bias_hh)``.

    Returns:
        ``(h_t, c_t, context, weights)``: (B, Hs), (B, Hs), (B, Dv), (B, S).
    """
    h_prev, _ = state
    keys = encoder_states @ key_proj.T  # (B, S, Hs)
    context, weights = attention.attend(h_prev, keys, encoder_states, mask,
                                        scale=h_prev.shape[-1] ** -0.5)
    x_t = torch.cat([embedding, context], dim=-1)  # (B, E + Dv)
    h_t, c_t = rnn.lstm_step(x_t, state, *lstm_params)
    return h_t, c_t, context, weights


def _step_to_plain(value: object) -> list[dict]:
    return parts_plain(value, _STEP_NAMES)


def _step_variants(inputs: tuple) -> list[Variant]:
    embedding, (h_prev, c_prev), states, mask, key_proj, lstm_params = inputs
    Hs, Dv = h_prev.shape[-1], states.shape[-1]
    projected = states @ key_proj.T  # (B, S, Hs)

    def step(*, query: Tensor = h_prev, keys: Tensor = projected, values: Tensor = states,
             use_mask: Tensor = mask, scale: float = Hs**-0.5, attend: _Attend = masked_attention,
             order: str = "ec", again: bool = False, swap: bool = False,
             context_of: Callable[[Tensor, Tensor], Tensor] | None = None):
        def compute() -> tuple[Tensor, ...]:
            context, weights = attend(query, keys, values, use_mask, scale)
            if context_of is not None:
                context = context_of(weights, values)
            parts = [embedding, context] if order == "ec" else [context, embedding]
            h_t, c_t = rnn.lstm_step(torch.cat(parts, dim=-1), (h_prev, c_prev), *lstm_params)
            if again:
                context, weights = masked_attention(h_t, keys, values, use_mask, scale)
            return (c_t, h_t, context, weights) if swap else (h_t, c_t, context, weights)
        return compute

    def mean(masked: bool) -> Callable[[Tensor, Tensor], Tensor]:
        def context_of(weights: Tensor, values: Tensor) -> Tensor:
            if masked:
                return _weighted(_one_per_row(mask).to(values.dtype), values)
            return values.mean(dim=1)
        return context_of

    variants: list[Variant] = [
        (HINT_STEP_QUERY_CELL, step(query=c_prev), ""),
        (HINT_STEP_QUERY_EMBEDDING, step(query=embedding), ""),
        (HINT_STEP_MASK, step(use_mask=torch.ones_like(mask)), ""),
        (HINT_STEP_SCALE, step(scale=1.0), ""),
        (HINT_STEP_SCALE, step(scale=Dv**-0.5), ""),
        (HINT_STEP_KEYS, step(keys=states), ""),
        (HINT_STEP_VALUES, step(values=projected), ""),
        (HINT_STEP_INPUT_ORDER, step(order="ce"), ""),
        (HINT_STEP_CONTEXT_MEAN, step(context_of=mean(masked=False)), ""),
        (HINT_STEP_CONTEXT_MEAN, step(context_of=mean(masked=True)), ""),
        (HINT_STEP_NEW_STATE, step(again=True), ""),
        (HINT_STEP_STATE_ORDER, step(swap=True), ""),
    ]
    for hint, wrong in _attention_mistakes():
        variants.append((f"{HINT_STEP_ATTENTION_WRONG} {hint}", step(attend=wrong), ""))
    return variants


def _step_shape_hint(got: list, expected: list, k: int) -> str:
    if k == 3:
        return _weights_shape_hint(got[3], expected[3])
    B, Dv = expected[2]
    if k == 2 and len(got[2]) == 2 and got[2][0] == B:
        return HINT_STEP_VALUES  # (B, Hs): the projected keys averaged
    return HINT_STEP_SHAPE


_judge_step = tensor_judge(_build_step_args, _STEP_NAMES, _step_variants, _step_shape_hint,
                           HINT_STEP_GENERIC)


@dataclass(frozen=True)
class Step(Args):
    """A case of task 3.4: B = len(lengths) sources of S positions (the first ``lengths[b]``
    real), embeddings of width E, a decoder of Hs units, encoder states of width Dv."""

    seed: int
    lengths: tuple[int, ...]
    S: int
    E: int
    Hs: int
    Dv: int
    dtype: str = "float32"

    def plain(self) -> dict:
        return {**super().plain(), "B": len(self.lengths)}


_STEP_CASES = (
    Step(361, (5, 3), S=5, E=3, Hs=4, Dv=6).case(
        "2 sources of lengths [5, 3]; E = 3, Hs = 4, Dv = 6"),
    Step(362, (4, 2, 3), S=4, E=4, Hs=4, Dv=4).case(
        "every width 4 (E = Hs = Dv), lengths [4, 2, 3]"),
    Step(363, (6, 1, 4, 2), S=6, E=5, Hs=3, Dv=6).case(
        "the model's widths, Dv = 2 Hs; lengths [6, 1, 4, 2]"),
)


def _step(rng: random.Random, B: int, S: int, *, large: bool = False, padded: bool = True,
          full: bool = True, dtype: str = "float32") -> Step:
    """A case of task 3.4 drawn from ``rng``, with the model's widths (Dv = 2 Hs)."""
    E, Hs = draw_sizes(rng, 2, 8, 16) if large else draw_sizes(rng, 2, 2, 6)
    lengths = masks.random_lengths(rng, B, S, full=full) if padded else [S] * B
    return Step(draw_seed(rng), tuple(lengths), S, E, Hs, 2 * Hs, dtype)


_STEP_HIDDEN = (
    hidden("hidden: float64",
           lambda rng: _step(rng, rng.randint(2, 4), rng.randint(4, 6), dtype="float64")),
    hidden("hidden: a batch of one", lambda rng: _step(rng, 1, rng.randint(4, 7), full=False)),
    hidden("hidden: a one-token source", lambda rng: _step(rng, rng.randint(2, 3), 1)),
    hidden("hidden: larger sizes",
           lambda rng: _step(rng, rng.randint(6, 9), rng.randint(10, 14), large=True)),
    hidden("hidden: no padding",
           lambda rng: _step(rng, rng.randint(2, 4), rng.randint(3, 6), padded=False)),
)

register(
    Task(
        id="3.4",
        assignment=ASSIGNMENT,
        func_name="decoder_step",
        title="One decoder step: attend with the previous state, feed the context to the LSTM",
        cases=_STEP_CASES,
        hidden=_STEP_HIDDEN,
        build_args=_build_step_args,
        reference=decoder_step,
        to_plain=_step_to_plain,
        judge=_judge_step,
        forbidden=_NO_LIBRARIES_FOR_THE_STEP,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "keys = encoder_states @ key_proj.T is (B, S, Hs), to compare with h_prev (B, Hs); "
            "the context is (B, Dv); the LSTM's input is torch.cat([embedding, context], "
            "dim=-1), (B, E + Dv), the width weight_ih (4 Hs, E + Dv) expects.",
            "ValueError": "Unpacking failed: state is the pair (h_prev, c_prev), lstm_params "
            "the four tensors (weight_ih, weight_hh, bias_ih, bias_hh), and masked_attention "
            "returns the pair (context, weights).",
            "NameError": "A name is not defined: call masked_attention from task 3.2 and "
            "lstm_step (imported from coursepkg.rnn at the top); run those cells first.",
            "CheckError": "Return the four tensors (h_t, c_t, context, weights).",
        },
    )
)
