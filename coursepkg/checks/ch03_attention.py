"""Chapter 3 tasks (``03_attention``): what the chapter's page does not show.

* 3.1 ``general_attention`` (formula): attention of one query per row with Luong's *general*
  (bilinear) score e_s = q^T W k_s, a query and keys of different widths, and a mask; the
  context vector and the weights.
* 3.2 ``attention_pool`` (extension): attention pooling without a query (Yang et al.'s
  hierarchical attention, of which the lectures' "vanilla attention" a_s = softmax_s(w . h_s)
  is the case without a hidden layer): u_s = tanh(W h_s + b), e_s = u . u_s, a masked softmax,
  and the weighted average of the states. The book stops at attention with a query; its
  reference lives here.
* 3.3 ``padded_attention`` (debug): the exercise shows a colleague's scaled dot-product
  attention over a right-padded batch (one query per row, the padding given by the lengths)
  with three planted bugs: a mask that lets the first padding position in, masked scores set
  to 0 instead of -inf, and a softmax over the batch instead of the keys; judged on behaviour,
  every combination of bugs left is named.
* 3.4 ``train_marker`` (train): the training loop of a tiny attention-pooling classifier
  (:class:`MarkerModel`, built on 3.2's pooling) that must find the one marked token of a
  padded sequence and name its symbol; judged on held-out sequences drawn from a seed the
  student's function never sees, in bands of held-out accuracy, within
  :data:`MARKER_TIME_LIMIT` seconds on one thread.
* 3.5 to 3.7 (questions, keys computed from coursepkg at check time): how many attention
  weights ``Seq2Seq.translate`` returns for a padded batch, how many of them are exactly 0,
  and how many parameters the dot-product variant of ``Seq2Seq`` adds to the model without
  attention.

The conventions are those of :mod:`coursepkg.attention`: one query per batch row, batch first;
boolean masks are **True = may attend**, and a masked key gets the score ``float("-inf")``,
hence the weight exactly 0; weight matrices are stored like ``nn.Linear``'s where they project
(one row per output feature).

Cases, plain values and judging use the shared tensor helpers of
:mod:`coursepkg.checks.tensors`: a case's ``args`` hold a seed, sizes, masks and a dtype name,
and the inputs are drawn from a seeded generator; the judges compare shapes, dtypes and values,
and recognise known mistakes by recomputing each one from the case's inputs. The mistakes of the
mask and the softmax are the course's one bank of attention mistakes
(:mod:`coursepkg.checks.attention_mistakes`), run on one query per row.

Shape letters: B batch, S keys (source positions), Dq query width, Dk key width, Dv value
width, D state width, Da the pooling's hidden width, K symbols of the marker task.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from coursepkg import attention
from coursepkg.checks import attention_mistakes as bank
from coursepkg.checks import masks
from coursepkg.checks.attention_mistakes import (
    HINT_MASK_AFTER_SOFTMAX,
    HINT_MASK_IGNORED,
    HINT_MASK_INVERTED,
    HINT_MASK_NAN,
    HINT_MASK_ZERO,
    HINT_OUT_KEYS,
    HINT_SOFTMAX_DIM_0,
)
from coursepkg.checks.core import (
    Args,
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
    fit_classifier,
    generator,
    normal,
    parts_plain,
    tensor_judge,
    train_task,
    training_cases,
)

__all__ = [
    "ASSIGNMENT",
    "MarkerModel",
    "attention_pool",
    "general_attention",
    "marker_data",
    "padded_attention",
    "padded_attention_starter",
    "train_marker",
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


def _masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """softmax over S of the scores, masked keys (False) at -inf: (B, S) -> (B, S)."""
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


_Attend = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


def _one_query(f: bank.Attention) -> _Attend:
    """A mistake of the bank of attention mistakes, on one query per row and no scale: the
    query (B, D) is a sequence of one, (B, 1, D), and the mask (B, S) a (B, 1, S) one."""

    def g(query: Tensor, keys: Tensor, values: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        out, weights = f(query.unsqueeze(-2), keys, values, mask.unsqueeze(-2), scale=1.0)
        return out.squeeze(-2), weights.squeeze(-2)

    return g


HINT_CONTEXT_MEAN = (
    "The context is the WEIGHTED average of the values, sum_s a_s v_s, not their plain mean: "
    "the weights are what makes attention pick keys."
)
HINT_CONTEXT_MEAN_OF_PRODUCTS = (
    "Sum the weighted values over the keys, do not average them: the weights already sum to "
    "1, so sum_s a_s v_s is the average."
)
HINT_CONTEXT_NOT_SUMMED = (
    "Sum over the keys: one weighted value per key is (B, S, Dv); the context is their sum "
    "over S, one vector per row."
)
HINT_PAIR_ORDER_CTX = "Return the pair in the order (context, weights)."
HINT_WEIGHTS_SHAPE = "Return the weights as (B, S): one weight per key, for every row."


def _attention_mistakes() -> list[tuple[str, _Attend]]:
    """Known wrong ``f(query, keys, values, mask) -> (context, weights)`` of dot-product
    attention without a scale, most specific first: the bank's mistakes of the mask and the
    softmax, and this chapter's of the context."""

    def scores_of(query: Tensor, keys: Tensor) -> Tensor:
        return (keys @ query.unsqueeze(-1)).squeeze(-1)  # (B, S)

    def mask_after_context_unmasked(q, k, v, mask):
        weights = torch.softmax(scores_of(q, k), dim=-1)
        return _weighted(weights, v), weights * mask

    def context(which: str) -> _Attend:
        def f(q, k, v, mask):
            weights = _masked_softmax(scores_of(q, k), mask)
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
        (HINT_CONTEXT_MEAN, context("mean")),
        (HINT_CONTEXT_MEAN, context("masked mean")),
        (HINT_CONTEXT_MEAN_OF_PRODUCTS, context("mean of products")),
        (HINT_OUT_KEYS, _one_query(bank.output_of(lambda weights, k, v: weights @ k))),
    ]


def _pair_shape_hint(first: str, wrong_first: str) -> Callable[[list, list, int], str]:
    """The shape hint of a pair (vector per row, weights (B, S))."""

    def hint(got: list, expected: list, k: int) -> str:
        (B, Dv), (_, S) = expected
        if got[0] == (B, S) and got[1] == (B, Dv):
            return HINT_PAIR_ORDER_CTX
        if k == 1:
            return HINT_WEIGHTS_SHAPE
        if got[0] == (B, S, Dv):
            return HINT_CONTEXT_NOT_SUMMED
        if len(got[0]) == 2 and got[0][0] == B:
            return wrong_first
        return first

    return hint


# --------------------------------------------------------------------------------------------
# Task 3.1 general_attention (formula)
# --------------------------------------------------------------------------------------------

HINT_GENERAL_TRANSPOSED = (
    "W is (Dq, Dk): the score is q^T W k_s, the query on W's left (its rows) and the key on its "
    "right (its columns). Yours uses W the other way round, q^T W^T k_s."
)
HINT_GENERAL_NO_W = (
    "The general score puts the learned matrix W between the query and the key, q^T W k_s; "
    "without it the score is the plain dot product q^T k_s."
)
HINT_GENERAL_SCALED = (
    "The general score is q^T W k_s as it stands: there is no division by a square root here "
    "(W is learned and can absorb any scale)."
)
HINT_GENERAL_CONTEXT_SHAPE = (
    "The context is one vector per row, (B, Dv), an average of the values."
)
HINT_GENERAL_GENERIC = (
    "e_s = q^T W k_s for every key s of a row (the row's own query); the masked keys' scores "
    "are -infinity; the weights are the softmax over the keys; the context is sum_s a_s v_s. "
    "Return (context, weights)."
)


def _build_general_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, S = len(args["mask"]), len(args["mask"][0])
    Dq, Dk, Dv = int(args["Dq"]), int(args["Dk"]), int(args["Dv"])
    query = normal(gen, (B, Dq), 1.0, dtype)
    keys = normal(gen, (B, S, Dk), 1.0, dtype)
    values = normal(gen, (B, S, Dv), 1.0, dtype)
    if args["values_are_keys"]:  # attend(query, keys, keys): one tensor, twice
        values = keys
    w = normal(gen, (Dq, Dk), 1 / math.sqrt(Dq), dtype)
    mask = masks.as_tensor(args["mask"]).reshape(B, S)
    return query, keys, values, mask, w


def general_attention(query: Tensor, keys: Tensor, values: Tensor, mask: Tensor,
                      w: Tensor) -> tuple[Tensor, Tensor]:
    """Task 3.1's reference: attention with Luong's general score ``e_s = q^T W k_s``.

    Args:
        query: (B, Dq); keys: (B, S, Dk); values: (B, S, Dv); mask: (B, S), True = may
        attend; w: (Dq, Dk).

    Returns:
        ``(context (B, Dv), weights (B, S))``.
    """
    return attention.attend(query @ w, keys, values, mask)  # q^T W k_s = (W^T q) . k_s


def _general_variants(inputs: tuple) -> list[Variant]:
    query, keys, values, mask, w = inputs
    projected = query @ w  # (B, Dk)

    def swapped() -> tuple[Tensor, Tensor]:
        context, weights = general_attention(*inputs)
        return weights, context

    def with_query(q: Callable[[], Tensor],
                   scale: float = 1.0) -> Callable[[], tuple[Tensor, Tensor]]:
        return lambda: attention.attend(q(), keys, values, mask, scale)

    variants: list[Variant] = [
        (HINT_PAIR_ORDER_CTX, swapped, ""),
        (HINT_GENERAL_TRANSPOSED, with_query(lambda: query @ w.T), ""),  # Dq = Dk only
        (HINT_GENERAL_NO_W, with_query(lambda: query), ""),  # Dq = Dk only
        (HINT_GENERAL_SCALED, with_query(lambda: projected, keys.shape[-1] ** -0.5), ""),
        (HINT_GENERAL_SCALED, with_query(lambda: projected, query.shape[-1] ** -0.5), ""),
    ]
    variants += [(hint, lambda f=f: f(projected, keys, values, mask), "")
                 for hint, f in _attention_mistakes()]
    return variants


_judge_general = tensor_judge(_build_general_args, ("context", "weights"), _general_variants,
                              _pair_shape_hint(HINT_GENERAL_CONTEXT_SHAPE, HINT_OUT_KEYS),
                              HINT_GENERAL_GENERIC)


@dataclass(frozen=True)
class General(Args):
    """A case of task 3.1: query (B, Dq), keys (B, S, Dk), values (B, S, Dv) or the keys
    themselves, the (B, S) mask, W (Dq, Dk)."""

    seed: int
    Dq: int
    Dk: int
    Dv: int
    mask: list
    values_are_keys: bool = False
    dtype: str = "float32"


_GENERAL_CASES = (
    General(311, Dq=3, Dk=5, Dv=4, mask=masks.rows("11111", "11100")).case(
        "2 rows of 5 keys, the second padded to length 3; Dq = 3, Dk = 5, Dv = 4"),
    General(312, Dq=4, Dk=4, Dv=4, mask=masks.rows("1101", "0110", "1111"),
            values_are_keys=True).case(
        "every width 4, keys masked anywhere; the keys are also the values, one tensor passed "
        "twice"),
    General(313, Dq=6, Dk=2, Dv=3, mask=masks.rows("100000", "111111")).case(
        "a row that may attend to one key only; Dq = 6, Dk = 2, Dv = 3"),
)


def _general(rng: random.Random, mask: list, *, square: bool = False,
             dtype: str = "float32") -> General:
    """A case of task 3.1 with ``mask`` drawn from ``rng``: three different widths, or one."""
    Dq, Dk, Dv = draw_sizes(rng, 3, 2, 7)
    if square:
        Dk = Dv = Dq
    return General(draw_seed(rng), Dq, Dk, Dv, mask, dtype=dtype)


def _padded_mask(rng: random.Random) -> list:
    S = rng.randint(5, 8)
    return masks.padding(masks.random_lengths(rng, rng.randint(3, 4), S), S, ones=0)


_GENERAL_HIDDEN = (
    hidden("hidden: float64, a padded batch with a full row",
           lambda rng: _general(rng, _padded_mask(rng), dtype="float64")),
    hidden("hidden: a batch of one",
           lambda rng: _general(rng, masks.random_rows(rng, 1, rng.randint(4, 6)))),
    hidden("hidden: a single key", lambda rng: _general(rng, [[True]] * rng.randint(2, 4))),
    hidden("hidden: every width equal",
           lambda rng: _general(rng, masks.random_rows(rng, rng.randint(2, 4), rng.randint(3, 6)),
                                square=True)),
)

register(
    Task(
        id="3.1",
        assignment=ASSIGNMENT,
        func_name="general_attention",
        title="Attention with Luong's general score q^T W k_s and a mask",
        cases=_GENERAL_CASES,
        hidden=_GENERAL_HIDDEN,
        build_args=_build_general_args,
        reference=general_attention,
        to_plain=lambda value: parts_plain(value, ("context", "weights")),
        judge=_judge_general,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "the query is (B, Dq), the keys (B, S, Dk) and W (Dq, Dk); W must meet the query "
            "on one side and the keys on the other, and each row's keys meet their own row's "
            "query only.",
            "CheckError": "Return a pair (context, weights) of tensors.",
        },
        kind="formula",
    )
)


# --------------------------------------------------------------------------------------------
# Task 3.2 attention_pool (extension)
# --------------------------------------------------------------------------------------------

HINT_POOL_NO_TANH = (
    "Apply tanh to W h_s + b before the product with u: u_s = tanh(W h_s + b). Without it the "
    "score is linear in the state."
)
HINT_POOL_BIAS_OUTSIDE = (
    "The bias goes inside the tanh: u_s = tanh(W h_s + b), not tanh(W h_s) + b."
)
HINT_POOL_NO_BIAS = "Add the bias b inside the tanh: u_s = tanh(W h_s + b)."
HINT_POOL_TRANSPOSE = (
    "W is stored like nn.Linear's weight, (Da, D), one row per hidden unit: W h_s has one entry "
    "per row of W. Yours multiplies by its transpose."
)
HINT_POOL_AVERAGES_U = (
    "Average the STATES h_s with the weights, not the hidden vectors u_s: the u_s only score "
    "the positions; the pooled vector is sum_s a_s h_s, of the states' width D."
)
HINT_POOL_MEAN = (
    "The pooled vector is the WEIGHTED average of the states, sum_s a_s h_s, not their plain "
    "mean (over all positions, or over the real ones): the weights are the point of attention "
    "pooling."
)
HINT_POOL_NO_U = (
    "Reduce the Da hidden units of u_s to one score with the learned vector u, e_s = u . u_s, "
    "not with a plain sum or mean."
)
HINT_POOL_SHAPE = "Return (pooled (B, D), weights (B, S))."
HINT_POOL_GENERIC = (
    "For every position s: u_s = tanh(W h_s + b), e_s = u . u_s; masked positions get the "
    "score -infinity; the weights are the softmax over the positions of each row; the pooled "
    "vector is sum_s a_s h_s. Return (pooled, weights)."
)


def _build_pool_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, S = len(args["mask"]), len(args["mask"][0])
    D, Da = int(args["D"]), int(args["Da"])
    states = normal(gen, (B, S, D), 1.0, dtype)
    w = normal(gen, (Da, D), 1 / math.sqrt(D), dtype)
    b = normal(gen, (Da,), 0.5, dtype)
    u = normal(gen, (Da,), 1.5, dtype)
    mask = masks.as_tensor(args["mask"]).reshape(B, S)
    return states, mask, w, b, u


def pooling_scores(states: Tensor, w: Tensor, b: Tensor, u: Tensor) -> Tensor:
    """The pooling's scores ``e_s = u . tanh(W h_s + b)``: (B, S, D) -> (B, S)."""
    return torch.tanh(states @ w.T + b) @ u  # (B, S, Da) @ (Da,) -> (B, S)


def attention_pool(states: Tensor, mask: Tensor, w: Tensor, b: Tensor,
                   u: Tensor) -> tuple[Tensor, Tensor]:
    """Task 3.2's reference: attention pooling without a query (Yang et al., 2016).

    Args:
        states: (B, S, D) the vectors to pool; mask: (B, S), True on real positions;
        w: (Da, D); b: (Da,); u: (Da,) the learned "query" of the pooling.

    Returns:
        ``(pooled (B, D), weights (B, S))``: a = softmax_s(u . tanh(W h_s + b)) over the real
        positions, pooled = sum_s a_s h_s.
    """
    weights = _masked_softmax(pooling_scores(states, w, b, u), mask)  # (B, S)
    return _weighted(weights, states), weights


def _pool_variants(inputs: tuple) -> list[Variant]:
    states, mask, w, b, u = inputs
    tanh = torch.tanh

    def pooled_with(scores: Callable[[], Tensor], of: Tensor | None = None) -> Callable[[], tuple]:
        def compute() -> tuple[Tensor, Tensor]:
            weights = _masked_softmax(scores(), mask)
            return _weighted(weights, states if of is None else of), weights
        return compute

    hidden_units = tanh(states @ w.T + b)  # (B, S, Da)
    scores = hidden_units @ u
    mean_of = {
        "all": lambda: (states.mean(dim=1), _masked_softmax(scores, mask)),
        "real": lambda: (_weighted(_one_per_row(mask).to(states.dtype), states),
                         _masked_softmax(scores, mask)),
    }
    variants: list[Variant] = [
        (HINT_PAIR_ORDER_CTX, lambda: tuple(reversed(attention_pool(*inputs))), ""),
        (HINT_POOL_NO_TANH, pooled_with(lambda: (states @ w.T + b) @ u), ""),
        (HINT_POOL_BIAS_OUTSIDE, pooled_with(lambda: (tanh(states @ w.T) + b) @ u), ""),
        (HINT_POOL_NO_BIAS, pooled_with(lambda: tanh(states @ w.T) @ u), ""),
        (HINT_POOL_TRANSPOSE, pooled_with(lambda: tanh(states @ w + b) @ u), ""),  # Da = D
        (HINT_POOL_AVERAGES_U, pooled_with(lambda: scores, of=hidden_units), ""),
        (HINT_POOL_NO_U, pooled_with(lambda: hidden_units.sum(dim=-1)), ""),
        (HINT_POOL_NO_U, pooled_with(lambda: hidden_units.mean(dim=-1)), ""),
        (HINT_POOL_MEAN, mean_of["all"], ""),
        (HINT_POOL_MEAN, mean_of["real"], ""),
    ]
    # the bank's mistakes of the mask and the softmax: dot-product attention of the scores
    # e_s = u . u_s is attention of the query u over the keys u_s
    query = u.expand(states.shape[0], -1)  # (B, Da)
    variants += [(hint, lambda f=f: f(query, hidden_units, states, mask), "")
                 for hint, f in _attention_mistakes()
                 if hint not in (HINT_CONTEXT_MEAN, HINT_OUT_KEYS)]
    return variants


def _pool_shape_hint(got: list, expected: list, k: int) -> str:
    (B, D), (_, S) = expected
    if got[0] == (B, S) and got[1] == (B, D):
        return HINT_PAIR_ORDER_CTX
    if k == 1:
        return HINT_WEIGHTS_SHAPE
    if got[0] == (B, S, D):
        return HINT_CONTEXT_NOT_SUMMED
    if len(got[0]) == 2 and got[0][0] == B:
        return HINT_POOL_AVERAGES_U  # (B, Da): the hidden vectors averaged
    return HINT_POOL_SHAPE


_judge_pool = tensor_judge(_build_pool_args, ("pooled", "weights"), _pool_variants,
                           _pool_shape_hint, HINT_POOL_GENERIC)


@dataclass(frozen=True)
class Pool(Args):
    """A case of task 3.2: states (B, S, D), the (B, S) mask, W (Da, D), b and u (Da,)."""

    seed: int
    D: int
    Da: int
    mask: list
    dtype: str = "float32"


_POOL_CASES = (
    Pool(321, D=4, Da=6, mask=masks.padding([5, 3], 5, ones=0)).case(
        "2 sequences of lengths 5 and 3; D = 4, Da = 6"),
    Pool(322, D=5, Da=5, mask=masks.padding([4, 1, 2], 4, ones=0)).case(
        "D = Da = 5, lengths 4, 1 and 2"),
    Pool(323, D=3, Da=7, mask=masks.padding([6], 6, ones=0)).case(
        "one sequence of 6 without padding; D = 3, Da = 7"),
)


def _pool(rng: random.Random, lengths: list[int], S: int, *, square: bool = False,
          dtype: str = "float32") -> Pool:
    D, Da = draw_sizes(rng, 2, 2, 8)
    return Pool(draw_seed(rng), D, D if square else Da, masks.padding(lengths, S, ones=0), dtype)


def _lengths(rng: random.Random, B: int) -> tuple[list[int], int]:
    S = rng.randint(4, 8)
    return masks.random_lengths(rng, B, S), S


_POOL_HIDDEN = (
    hidden("hidden: float64, a padded batch",
           lambda rng: _pool(rng, *_lengths(rng, rng.randint(3, 5)), dtype="float64")),
    hidden("hidden: a padded batch of one",
           lambda rng: _pool(rng, [rng.randint(2, 4)], rng.randint(5, 7))),
    hidden("hidden: sequences of one position", lambda rng: _pool(rng, [1] * rng.randint(2, 4), 1)),
    hidden("hidden: Da = D", lambda rng: _pool(rng, *_lengths(rng, rng.randint(2, 4)),
                                               square=True)),
)

register(
    Task(
        id="3.2",
        assignment=ASSIGNMENT,
        func_name="attention_pool",
        title="Attention pooling without a query: u . tanh(W h_s + b), a masked softmax, "
              "the weighted average of the states",
        cases=_POOL_CASES,
        hidden=_POOL_HIDDEN,
        build_args=_build_pool_args,
        reference=attention_pool,
        to_plain=lambda value: parts_plain(value, ("pooled", "weights")),
        judge=_judge_pool,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "the states are (B, S, D), W is (Da, D) with one row per hidden unit, b and u "
            "(Da,); each position gets one hidden vector of Da units and one score.",
            "CheckError": "Return a pair (pooled, weights) of tensors.",
        },
        kind="extension",
    )
)


# --------------------------------------------------------------------------------------------
# Task 3.3 padded_attention (debug)
# --------------------------------------------------------------------------------------------

HINT_DEBUG_LEAK = (
    "The mask lets one padding position in: a row of length n has its real keys at positions "
    "0 .. n - 1, and position n is already padding. Check the comparison that builds the mask "
    "from the lengths."
)
HINT_DEBUG_ZERO = (
    "The masked scores are set to a number that is not 'never': exp(0) = 1, so a padding key "
    "still gets weight. A masked score must be -infinity, whose exp is exactly 0."
)
HINT_DEBUG_BATCH = (
    "The softmax normalises the wrong axis: it makes each key position sum to 1 over the "
    "batch, mixing different sentences. Each row's weights are one query's distribution over "
    "its own keys and must sum to 1."
)
PREFIX_DEBUG_SEVERAL = "Several bugs are still there:"
HINT_DEBUG_SCALE = (
    "Keep the scale of the scaled dot product: the scores are divided by the square root of "
    "D, the width of the query and the keys."
)
HINT_DEBUG_INVERTED = (
    "The mask is applied inverted: the scores to fill are those of the padding positions, "
    "where the mask is False; yours hides the real keys."
)
HINT_DEBUG_NO_MASK = (
    "Padding is attended to: the keys past each row's length must get weight exactly 0."
)
HINT_DEBUG_SHAPE = "Return (context, weights): context (B, Dv), weights (B, S)."
HINT_DEBUG_GENERIC = (
    "Run the starter code on a small padded batch and test what must hold: each row of "
    "weights sums to 1; every weight past the row's length is exactly 0; a row's result does "
    "not change when another row of the batch changes."
)

_BUG_HINTS = {
    "leak": HINT_DEBUG_LEAK,
    "zero": HINT_DEBUG_ZERO,
    "batch": HINT_DEBUG_BATCH,
}


def with_bugs(query: Tensor, keys: Tensor, values: Tensor, lengths: Tensor,
              bugs: frozenset = frozenset(), *, masking: str = "right",
              scale: bool = True) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention over a right-padded batch, with some of the starter code's
    bugs (``bugs``, names of :data:`_BUG_HINTS`) and other mistakes: ``masking`` "inverted"
    (fills the real keys) or "none"; ``scale`` False: no division by sqrt(D)."""
    S = keys.shape[1]
    positions = torch.arange(S)[None, :]  # (1, S)
    mask = positions <= lengths[:, None] if "leak" in bugs else positions < lengths[:, None]
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1)  # (B, S)
    if scale:
        scores = scores / math.sqrt(query.shape[-1])
    fill = 0.0 if "zero" in bugs else float("-inf")
    if masking == "right":
        scores = scores.masked_fill(~mask, fill)
    elif masking == "inverted":
        scores = scores.masked_fill(mask, fill)
    weights = torch.softmax(scores, dim=0 if "batch" in bugs else -1)
    return _weighted(weights, values), weights


def padded_attention(query: Tensor, keys: Tensor, values: Tensor,
                     lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Task 3.3's reference (the starter code fixed).

    Args:
        query: (B, D); keys: (B, S, D); values: (B, S, Dv); lengths: (B,) int64, row b's
        real keys are its first ``lengths[b]``.

    Returns:
        ``(context (B, Dv), weights (B, S))``, the scores scaled by 1 / sqrt(D).
    """
    return with_bugs(query, keys, values, lengths)


def padded_attention_starter(query: Tensor, keys: Tensor, values: Tensor,
                             lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The starter code the exercise shows (every bug)."""
    return with_bugs(query, keys, values, lengths, frozenset(_BUG_HINTS))


def debug_hint(bugs: frozenset) -> str:
    """The feedback to the starter code with ``bugs`` left (one hint, or each of them)."""
    hints = [_BUG_HINTS[name] for name in _BUG_HINTS if name in bugs]
    return hints[0] if len(hints) == 1 else " ".join([PREFIX_DEBUG_SEVERAL, *hints])


#: Every combination of the starter code's bugs, one bug first.
BUG_SETS = tuple(frozenset(combo) for n in range(1, len(_BUG_HINTS) + 1)
                 for combo in itertools.combinations(_BUG_HINTS, n))


def _build_padded_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    lengths = torch.tensor(args["lengths"], dtype=torch.long)
    B, S, D, Dv = len(args["lengths"]), int(args["S"]), int(args["D"]), int(args["Dv"])
    query = normal(gen, (B, D), 1.0, dtype)
    keys = normal(gen, (B, S, D), 1.0, dtype)
    values = normal(gen, (B, S, Dv), 1.0, dtype)
    return query, keys, values, lengths


def _debug_variants(inputs: tuple) -> list[Variant]:
    variants: list[Variant] = [
        (debug_hint(bugs), lambda bugs=bugs: with_bugs(*inputs, bugs), "") for bugs in BUG_SETS
    ]
    variants += [
        (HINT_PAIR_ORDER_CTX, lambda: tuple(reversed(padded_attention(*inputs))), ""),
        (HINT_DEBUG_INVERTED, lambda: with_bugs(*inputs, masking="inverted"), ""),
        (HINT_DEBUG_NO_MASK, lambda: with_bugs(*inputs, masking="none"), ""),
        (HINT_DEBUG_SCALE, lambda: with_bugs(*inputs, scale=False), ""),
    ]
    return variants


def _debug_shape_hint(got: list, expected: list, k: int) -> str:
    if got[0] == expected[1] and got[1] == expected[0]:
        return HINT_PAIR_ORDER_CTX
    return HINT_DEBUG_SHAPE


_judge_debug = tensor_judge(_build_padded_args, ("context", "weights"), _debug_variants,
                            _debug_shape_hint, HINT_DEBUG_GENERIC)


@dataclass(frozen=True)
class Padded(Args):
    """A case of task 3.3: B = len(lengths) rows of S keys (the first ``lengths[b]`` real),
    query and keys of width D, values of width Dv."""

    seed: int
    lengths: tuple[int, ...]
    S: int
    D: int
    Dv: int
    dtype: str = "float32"


_DEBUG_CASES = (
    Padded(331, (5, 3), S=5, D=4, Dv=3).case("2 rows, lengths 5 and 3; D = 4, Dv = 3"),
    Padded(332, (2, 4, 1), S=4, D=3, Dv=5).case("3 rows, lengths 2, 4 and 1; D = 3, Dv = 5"),
    Padded(333, (3,), S=6, D=5, Dv=2).case("1 row of length 3 padded to 6; D = 5, Dv = 2"),
)


def _padded(rng: random.Random, B: int, *, large: bool = False,
            dtype: str = "float32") -> Padded:
    S = rng.randint(9, 14) if large else rng.randint(4, 7)
    D, Dv = draw_sizes(rng, 2, 2, 9)
    return Padded(draw_seed(rng), tuple(masks.random_lengths(rng, B, S)), S, D, Dv, dtype)


_DEBUG_HIDDEN = (
    hidden("hidden: float64", lambda rng: _padded(rng, rng.randint(2, 4), dtype="float64")),
    hidden("hidden: larger sizes", lambda rng: _padded(rng, rng.randint(5, 8), large=True)),
)

register(
    Task(
        id="3.3",
        assignment=ASSIGNMENT,
        func_name="padded_attention",
        title="Fix a scaled dot-product attention over a padded batch with planted bugs",
        cases=_DEBUG_CASES,
        hidden=_DEBUG_HIDDEN,
        build_args=_build_padded_args,
        reference=padded_attention,
        to_plain=lambda value: parts_plain(value, ("context", "weights")),
        judge=_judge_debug,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "the query is (B, D), the keys (B, S, D), the values (B, S, Dv) and the lengths "
            "(B,); the mask, like the scores, is (B, S).",
            "CheckError": "Return a pair (context, weights) of tensors.",
        },
        kind="debug",
    )
)


# --------------------------------------------------------------------------------------------
# Task 3.4 train_marker (train)
# --------------------------------------------------------------------------------------------

#: The marker task's symbols, the shortest and longest sequence, the training and held-out
#: sizes. Token ids: 0 padding, 1..K a symbol, K+1..2K the same symbol marked.
MARKER_SYMBOLS = 8
MARKER_MIN_LENGTH = 3
MARKER_MAX_LENGTH = 12
MARKER_TRAIN = 2000
MARKER_HELD_OUT = 2000
#: MarkerModel's widths: D of the embeddings, Da of the pooling's hidden layer.
MARKER_D = 16
MARKER_D_A = 16
#: Full marks from 0.95 held-out accuracy, half from 0.7, a quarter from 0.4 (chance: 1/8).
MARKER_BANDS = ((0.95, 1.0), (0.7, 0.5), (0.4, 0.25))
#: Seconds one training may take (measured on one thread); the reference needs well under one.
MARKER_TIME_LIMIT = 6.0

HINT_MARKER_TRAIN = (
    "The model is confident but wrong on held-out sequences: it learnt something else than the "
    "task. Train on the sequences and answers given, with the cross-entropy of the logits, and "
    "clear the gradients before every backward pass."
)
HINT_MARKER_PARTIAL = (
    "Partial credit: the model has learnt part of the task. Train for more steps (or with a "
    "larger learning rate) on the sequences given, and watch the training loss fall."
)
HINT_MARKER_UNTRAINED = (
    "The model's predictions are close to uniform, as if it had not been trained: does every "
    "step call backward() and the optimizer's step(), and does the optimizer hold the "
    "parameters of the model you return?"
)


class MarkerModel(nn.Module):
    """The course model of task 3.4: find the marked token of a padded sequence, name its symbol.

    Each token id is embedded (0, padding, to a zero vector); attention pooling without a query
    (task 3.2's, ``u . tanh(W h_s + b)``, over the real tokens) makes one vector of the
    sequence, and a linear layer reads it: K logits, one per symbol.
    """

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(2 * MARKER_SYMBOLS + 1, MARKER_D, padding_idx=0)
        self.w = nn.Linear(MARKER_D, MARKER_D_A)  # W and b of the pooling
        self.u = nn.Parameter(torch.randn(MARKER_D_A) / math.sqrt(MARKER_D_A))
        self.out = nn.Linear(MARKER_D, MARKER_SYMBOLS)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (B, S) int64, 0 = padding -> logits (B, K)."""
        h = self.embed(tokens)  # (B, S, D)
        pooled, _ = attention_pool(h, tokens != 0, self.w.weight, self.w.bias, self.u)  # (B, D)
        return self.out(pooled)


#: Every name of MarkerModel's state_dict and its shape.
MARKER_SHAPES = {
    "u": (MARKER_D_A,),
    "embed.weight": (2 * MARKER_SYMBOLS + 1, MARKER_D),
    "w.weight": (MARKER_D_A, MARKER_D),
    "w.bias": (MARKER_D_A,),
    "out.weight": (MARKER_SYMBOLS, MARKER_D),
    "out.bias": (MARKER_SYMBOLS,),
}


def marker_data(seed: int, n: int, *, answer: str = "marked") -> tuple[Tensor, Tensor]:
    """``n`` right-padded sequences of the marker task and their answers, drawn from ``seed``.

    A sequence has from :data:`MARKER_MIN_LENGTH` to :data:`MARKER_MAX_LENGTH` tokens, each a
    symbol 1..K; exactly one of them is marked (its id is the symbol's plus K); the rest is
    padding (0) up to :data:`MARKER_MAX_LENGTH`.

    Args:
        seed: seeds the draw.
        n: the number of sequences.
        answer: ``"marked"``: the marked token's symbol, 0..K-1 (the task); ``"first"``: the
            first token's symbol (another task, for the tests).

    Returns:
        ``(tokens (n, S) int64, targets (n,) int64)``.
    """
    gen = torch.Generator().manual_seed(int(seed))
    K, S = MARKER_SYMBOLS, MARKER_MAX_LENGTH
    lengths = torch.randint(MARKER_MIN_LENGTH, S + 1, (n,), generator=gen)  # (n,)
    symbols = torch.randint(0, K, (n, S), generator=gen)  # (n, S), 0..K-1
    marked = (torch.rand(n, generator=gen) * lengths).long()  # (n,), in 0..length-1
    rows = torch.arange(n)
    tokens = symbols + 1
    tokens[rows, marked] += K
    tokens = tokens.masked_fill(torch.arange(S)[None, :] >= lengths[:, None], 0)
    which = marked if answer == "marked" else torch.zeros(n, dtype=torch.long)
    return tokens, symbols[rows, which]


def _build_marker_args(args: dict) -> tuple:
    """The student's arguments: the training sequences, their answers and a seed (never the
    held-out seed, which :func:`coursepkg.checks.core.student_args` holds back)."""
    tokens, targets = marker_data(int(args["seed"]), int(args["n"]))
    return tokens, targets, int(args["seed"])


def marker_held_out(args: dict) -> tuple[Tensor, Tensor]:
    """The ``expected`` hook: held-out sequences drawn from the case's ``"_heldout"`` seed, and
    their answers."""
    return marker_data(int(args["_heldout"]), MARKER_HELD_OUT)


def train_marker(tokens: Tensor, targets: Tensor, seed: int) -> MarkerModel:
    """Task 3.4's reference: Adam on minibatches of 64 sequences, 150 steps (a few tenths of a
    second of CPU on one thread).

    Args:
        tokens: (N, S) the training sequences; targets: (N,) their answers;
        seed: seeds the initialisation and the minibatches.

    Returns:
        The trained :class:`MarkerModel`.
    """
    torch.manual_seed(seed)
    model = MarkerModel()
    return fit_classifier(model, tokens, targets, seed, steps=150, lr=0.03)


register(
    train_task(
        "3.4",
        ASSIGNMENT,
        "train_marker",
        "Train an attention-pooling classifier to name the marked token's symbol",
        **training_cases("2,000 training sequences", MARKER_TRAIN, 341, 9341),
        build_args=_build_marker_args,
        reference=train_marker,
        model=MarkerModel,
        held_out=marker_held_out,
        score=classifier_accuracy,
        bands=MARKER_BANDS,
        time_limit=MARKER_TIME_LIMIT,
        metric="held-out accuracy",
        advise=classifier_advice(HINT_MARKER_PARTIAL, HINT_MARKER_TRAIN,
                                 untrained=(0.3, HINT_MARKER_UNTRAINED)),
        forbidden=("coursepkg.attention", "torch.nn.functional.scaled_dot_product_attention",
                   "torch.nn.MultiheadAttention"),
        error_hints={
            "CheckError": "Return the trained MarkerModel (or its state_dict()), with the names "
            "and shapes of MarkerModel().state_dict().",
            "RuntimeError": "A tensor operation failed: the sequences are (N, S) integers and "
            "the answers (N,); MarkerModel takes the integer sequences themselves, (B, S), and "
            "returns (B, K) logits.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Questions 3.5 to 3.7
# --------------------------------------------------------------------------------------------

#: The two sources and the number of steps of questions 3.5 and 3.6.
QUESTION_SOURCES = ("5.mar.21", "the 5th of March 2021")
QUESTION_STEPS = 11


def _question_weights() -> Tensor:
    """The weights (B, T, S) that an (untrained) Seq2Seq with attention returns for the two
    sources of :data:`QUESTION_SOURCES` in one padded batch, after T = 11 steps."""
    from coursepkg.data import SeqCodec

    src_codec = SeqCodec(string.ascii_letters + string.digits + " ,./")
    tgt_codec = SeqCodec("0123456789-")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = attention.Seq2Seq(src_codec.vocab_size, tgt_codec.vocab_size)
    src, lengths = src_codec.encode_batch(list(QUESTION_SOURCES))
    _, weights = model.translate(src, lengths, max_len=QUESTION_STEPS, bos=tgt_codec.BOS)
    return weights


def weights_count_key() -> int:
    """Question 3.5's key: the number of weights ``translate`` returns."""
    return _question_weights().numel()


def zero_weights_key() -> int:
    """Question 3.6's key: how many of them are exactly 0."""
    return int((_question_weights() == 0).sum())


def _parameters(kind: str) -> int:
    from coursepkg.data import SeqCodec

    src = SeqCodec(string.ascii_letters + string.digits + " ,./").vocab_size
    tgt = SeqCodec("0123456789-").vocab_size
    with torch.random.fork_rng(devices=[]):
        model = attention.Seq2Seq(src, tgt, attention=kind)
    return sum(p.numel() for p in model.parameters())


def dot_parameters_key() -> int:
    """Question 3.7's key: the parameters of attention="dot" beyond attention="none"."""
    return _parameters("dot") - _parameters("none")


def additive_parameters() -> int:
    """The parameters of attention="additive" beyond "none" (the page prints it): a known wrong
    answer to question 3.7."""
    return _parameters("additive") - _parameters("none")


HINT_Q_COUNT = (
    "translate returns one row of weights per step written and per source in the batch, and "
    "each row has one weight per source position of the padded batch."
)
HINT_Q_COUNT_UNPADDED = (
    "The batch is padded: every row of weights is as long as the longest source, padding "
    "positions included."
)
HINT_Q_COUNT_ONE_STEP = (
    "That is the count of one step: the decoder computes a new row of weights at every step."
)
HINT_Q_ZERO = (
    "A weight is exactly 0 where the mask hides the key: count the padding positions of each "
    "source, at every step."
)
HINT_Q_ZERO_ONE_STEP = "Count them at every step the decoder writes, not at one."
HINT_Q_ZERO_NONE = (
    "The padding of the shorter source gets weight exactly 0 (its score is -infinity)."
)
HINT_Q_PARAMETERS = (
    "Look at what the constructor creates for attention=\"dot\" and not for \"none\": the "
    "matrix W of the score h^T W h_s, as an nn.Linear (does it have a bias?), from the "
    "encoder's width to the decoder's."
)
HINT_Q_PARAMETERS_ADDITIVE = (
    "That is the count of the additive attention (the one the chapter trains): the dot "
    "variant has a single matrix and no vector v."
)


def _knowing(task: Task, wrong: Callable[[], dict]) -> Task:
    """``task`` (a question) whose judge names known wrong answers: ``wrong()`` maps each
    (computed from the package, like the key) to its own hint."""
    judge = task.judge

    def judge_knowing(got: object, expected: object, args: dict) -> Verdict:
        verdict = judge(got, expected, args)
        if verdict.ok:
            return verdict
        for answer, hint in wrong().items():
            if type(got) is type(answer) and got == answer:
                return Verdict(False, hint)
        return verdict

    return dataclasses.replace(task, judge=judge_knowing)


def _unpadded_count() -> int:
    return QUESTION_STEPS * sum(len(source) for source in QUESTION_SOURCES)


def _one_step_count() -> int:
    return weights_count_key() // QUESTION_STEPS


register(_knowing(question(
    "3.5", ASSIGNMENT, "decoder_weights_count",
    "Seq2Seq with attention translates the batch of the two sources '5.mar.21' and 'the 5th "
    "of March 2021' with max_len = 11: how many attention weights does translate return?",
    weights_count_key, points=1, kind_of_answer="int", hint=HINT_Q_COUNT,
), lambda: {_unpadded_count(): HINT_Q_COUNT_UNPADDED,
            _one_step_count(): HINT_Q_COUNT_ONE_STEP}))
register(_knowing(question(
    "3.6", ASSIGNMENT, "decoder_zero_weights",
    "Of the weights of question 3.5, how many are exactly 0?",
    zero_weights_key, points=1, kind_of_answer="int", hint=HINT_Q_ZERO,
), lambda: {zero_weights_key() // QUESTION_STEPS: HINT_Q_ZERO_ONE_STEP,
            0: HINT_Q_ZERO_NONE}))
register(_knowing(question(
    "3.7", ASSIGNMENT, "dot_attention_parameters",
    "With the default widths, how many more parameters does Seq2Seq(..., attention=\"dot\") "
    "have than Seq2Seq(..., attention=\"none\")?",
    dot_parameters_key, points=1, kind_of_answer="int", hint=HINT_Q_PARAMETERS,
), lambda: {additive_parameters(): HINT_Q_PARAMETERS_ADDITIVE}))
