"""Chapter 5 tasks (``05_multihead``): what the chapter's page does not show.

* 5.1 ``head_weights`` (formula): every head's attention weights from its own query and key
  matrices, given per head as (H, Dh, D) tensors, with a mask shared by the heads. The page
  shows the layer with packed projections and the reshapes around them; this task writes the
  math of one head, for all heads at once, from another layout of the weights.
* 5.2 ``grouped_query_attention`` (extension): grouped-query attention (Ainslie et al., 2023):
  H query heads share G groups of keys and values, the heads of group g being the consecutive
  heads g * H/G to (g + 1) * H/G - 1. G = H is multi-head attention, G = 1 multi-query
  attention. The book stops at multi-head attention; the reference lives here.
* 5.3 ``train_two_markers`` (train): the training loop of a small multi-head model
  (:class:`TwoMarkerModel`, one layer of the package's MultiHeadAttention over embeddings) on a
  task that needs two look-ups at once: a sequence of letters with two marked positions (marker
  1 and marker 2); answer both marked letters. Judged on held-out sequences from a seed the
  student's function never sees, in bands of held-out accuracy, within
  :data:`TWO_TIME_LIMIT` seconds on one thread.
* 5.4 ``padded_multi_head_attention`` (debug): the exercise shows a multi-head attention over
  a padded batch of keys (separate W^Q, W^K, W^V, W^O and a length per sequence, a signature
  the page's code does not have) with four planted bugs (heads cut without moving them before
  time, heads merged without moving them back, scores divided by sqrt(D), a padding mask that
  lets one padding key in); judged on behaviour, every combination of bugs left is named.
* 5.5 to 5.7 (questions, keys computed from coursepkg at check time): the parameters of a
  multi-head layer, the key/value cache of grouped-query attention per token, and how many
  attention weights a layer returns.

The conventions are those of :mod:`coursepkg.multihead`: batch first; a weight matrix has one
row per output feature, like ``nn.Linear``'s; head h owns features h * Dh to (h + 1) * Dh - 1
of a packed projection; boolean masks are **True = may attend**, broadcast to the scores
(B, H, T, S), a 3-D mask being (B, T, S), one per sequence, shared by the heads; a masked score
is ``float("-inf")``, hence the weight exactly 0.

Cases, plain values and judging work as in chapters 3 and 4 (:mod:`coursepkg.checks.tensors`).
The cases are made so that the usual mistakes change the numbers: D, Dh and the width of all
heads differ (a scale by the wrong square root shows); one public case of each mask task has
B = H with a (B, T, S) mask, so a mask that is not given a head axis runs and is named; T and S
differ in the cross-attention cases; 1 < G < H in a public case of 5.2, where assigning heads to
groups the wrong way round shows. Masks are plain nested lists (:mod:`coursepkg.checks.masks`):
a checks module does no tensor work when it is imported (the grader forks its workers from a
process that imported it). The hidden cases' generators draw the seeds, the sizes and the masks
from the grader's random generator.

Shape letters: B batch, T queries, S keys, D model width, H heads, Dh head width, G groups.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from coursepkg.checks import masks
from coursepkg.checks.attention_mistakes import (  # the hints of this chapter's judges
    HINT_MASK_INVERTED,
    HINT_NO_SCALE,
    HINT_PAIR_ORDER,
    HINT_SCALE_NO_SQRT,
    HINT_SCORES_TRANSPOSED,
    HINT_SOFTMAX_DIM,
    HINT_SOFTMAX_DIM_1,
)
from coursepkg.checks.core import (
    Args,
    Task,
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
    tensor_plain,
    train_task,
    training_cases,
)
from coursepkg.multihead import MultiHeadAttention

__all__ = [
    "ASSIGNMENT",
    "TwoMarkerModel",
    "grouped_query_attention",
    "head_weights",
    "padded_multi_head_attention",
    "train_two_markers",
    "two_marker_data",
]

ASSIGNMENT = "05_multihead"
NEG_INF = float("-inf")

# The package's multi-head code, torch's fused attention and its multi-head module do the
# whole task. Chapter 4's scaled_dot_product_attention (coursepkg.self_attention) stays allowed
# in 5.2 and 5.4: it is the previous exercise, and the lesson is what goes around it.
_NO_MULTIHEAD_LIBRARIES = (
    "coursepkg.multihead",
    "coursepkg.transformer",
    "coursepkg.lm",
    "coursepkg.checks",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
    *ATTENTION_KERNELS,
)
# Task 5.1 is the scores and the softmax of every head: no attention function of the course.
_NO_ATTENTION_LIBRARIES = (
    *_NO_MULTIHEAD_LIBRARIES,
    "coursepkg.self_attention",
    "coursepkg.attention",
)


# --------------------------------------------------------------------------------------------
# Hints shared by the tasks
# --------------------------------------------------------------------------------------------

HINT_HEADS_NO_TRANSPOSE = (
    "The heads are cut in the wrong place: a (B, T, H * Dh) projection is stored position by "
    "position, so reading it directly as (B, H, T, Dh) gives a 'head' a stretch of positions "
    "instead of a slice of features. Cut the features into (H, Dh) first, then move the head "
    "axis before time."
)
HINT_HEADS_INTERLEAVED = (
    "Head h owns a block of Dh consecutive features (rows h * Dh to (h + 1) * Dh - 1 of the "
    "stacked projection); yours gives it every H-th feature instead."
)
HINT_MASK_NOT_PER_HEAD = (
    "A (B, T, S) mask holds one mask per sequence: give it a head axis of size 1, (B, 1, T, S), "
    "so that it broadcasts over the heads. Used as it is, broadcasting lines its B up with the "
    "H of the (B, H, T, S) scores, and sequence b's mask lands on head b."
)


# --------------------------------------------------------------------------------------------
# Task 5.1 head_weights (formula)
# --------------------------------------------------------------------------------------------

HINT_HW_SCALE_D_MODEL = (
    "Divide each head's scores by the square root of Dh, the width of ONE head's queries and "
    "keys (the middle size of w_q), not of D, the width of the input vectors."
)
HINT_HW_SCALE_ALL_HEADS = (
    "Divide by the square root of Dh, the width of one head: the scores of head h are dot "
    "products of its own Dh numbers, not of all H * Dh features of the layer."
)
HINT_HW_KEYS_WITH_WQ = (
    "The keys have their own matrices: head h's keys are K_h = key W^K_h^T, with w_k, not w_q."
)
HINT_HW_NO_SOFTMAX = (
    "Return the attention weights, the softmax of the scaled (and masked) scores over the keys: "
    "each row sums to 1."
)
HINT_HW_AVERAGED = (
    "Return every head's weights, (B, H, T, S): one (T, S) map per head, not their average "
    "or one shared map."
)
HINT_HW_AXES = (
    "The weights are (B, H, T, S): the heads come right after the batch, then the queries, "
    "then the keys."
)
HINT_HW_SHAPE = "Return the weights (B, H, T, S): one row per query and one column per key."
HINT_HW_GENERIC = (
    "For each head h, project the queries with W^Q_h and the keys with W^K_h (both (Dh, D), one "
    "row per output feature), compare every query with every key, divide by the square root of "
    "Dh, hide what the mask forbids (the same mask for every head), and normalise each row over "
    "the keys."
)


def _build_hw_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, S, D, H, Dh = (int(args[name]) for name in ("B", "T", "S", "D", "H", "Dh"))
    query = normal(gen, (B, T, D), 1.0, dtype)
    key = normal(gen, (B, S, D), 1.0, dtype) if args["cross"] else query
    # Scaled so that the projections have unit variance.
    w_q = normal(gen, (H, Dh, D), 1 / math.sqrt(D), dtype)
    w_k = normal(gen, (H, Dh, D), 1 / math.sqrt(D), dtype)
    if args["mask"] is None:
        return query, key, w_q, w_k
    return query, key, w_q, w_k, masks.as_tensor(args["mask"])


def head_weights(query: Tensor, key: Tensor, w_q: Tensor, w_k: Tensor,
                 mask: Tensor | None = None) -> Tensor:
    """Task 5.1's reference: the attention weights of every head.

    Args:
        query: (B, T, D); key: (B, S, D).
        w_q, w_k: (H, Dh, D): head h's W^Q_h and W^K_h, one row per output feature.
        mask: None, or bool (B, T, S), True = may attend, the same for every head.

    Returns:
        (B, H, T, S): softmax over s of (W^Q_h q_t) . (W^K_h k_s) / sqrt(Dh).
    """
    q = torch.einsum("btd,hed->bhte", query, w_q)  # (B, H, T, Dh)
    k = torch.einsum("bsd,hed->bhse", key, w_k)  # (B, H, S, Dh)
    scores = torch.einsum("bhte,bhse->bhts", q, k) / math.sqrt(w_q.shape[1])
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None], NEG_INF)  # (B, 1, T, S) for every head
    return torch.softmax(scores, dim=-1)


def _hw(inputs: tuple, *, scale: float | None = None, keys_with: str = "w_k",
        cut: str = "right", mask_mode: str = "per head", dim: int = -1, softmax: bool = True,
        swapped: bool = False) -> Callable[[], list[Tensor]]:
    """Task 5.1 with one knob turned to a known mistake (defaults: right)."""
    query, key, w_q, w_k = inputs[:4]
    mask = inputs[4] if len(inputs) > 4 else None
    H, Dh, D = w_q.shape

    def project(x: Tensor, w: Tensor) -> Tensor:
        packed = x @ w.reshape(H * Dh, D).T  # (B, L, H * Dh): head h in block h
        B, L = x.shape[:2]
        if cut == "no transpose":
            return packed.reshape(B, H, L, Dh)
        if cut == "interleaved":
            return packed.reshape(B, L, Dh, H).permute(0, 3, 1, 2)
        return packed.reshape(B, L, H, Dh).transpose(1, 2)

    def compute() -> list[Tensor]:
        if mask_mode != "per head" and mask is None:
            raise ValueError("this mistake needs a mask")
        q = project(query, w_q)
        k = project(key, w_q if keys_with == "w_q" else w_k)
        scores = (k @ q.transpose(-2, -1)) if swapped else (q @ k.transpose(-2, -1))
        scores = scores / (math.sqrt(Dh) if scale is None else scale)
        if mask is not None:
            m = {"per head": mask[:, None], "as is": mask, "inverted": ~mask[:, None]}[mask_mode]
            scores = scores.masked_fill(~m, NEG_INF)
        return [torch.softmax(scores, dim=dim) if softmax else scores]

    return compute


def _hw_variants(inputs: tuple) -> list[Variant]:
    H, Dh, D = inputs[2].shape
    return [
        (HINT_HW_SCALE_D_MODEL, _hw(inputs, scale=math.sqrt(D)), ""),
        (HINT_HW_SCALE_ALL_HEADS, _hw(inputs, scale=math.sqrt(H * Dh)), ""),
        (HINT_NO_SCALE, _hw(inputs, scale=1.0), ""),
        (HINT_SCALE_NO_SQRT, _hw(inputs, scale=float(Dh)), ""),
        (HINT_HW_KEYS_WITH_WQ, _hw(inputs, keys_with="w_q"), ""),
        (HINT_HEADS_NO_TRANSPOSE, _hw(inputs, cut="no transpose"), ""),
        (HINT_HEADS_INTERLEAVED, _hw(inputs, cut="interleaved"), ""),
        (HINT_MASK_NOT_PER_HEAD, _hw(inputs, mask_mode="as is"), ""),
        (HINT_MASK_INVERTED, _hw(inputs, mask_mode="inverted"), ""),
        (HINT_SOFTMAX_DIM, _hw(inputs, dim=-2), ""),
        (HINT_SOFTMAX_DIM_1, _hw(inputs, dim=1), ""),
        (HINT_SCORES_TRANSPOSED, _hw(inputs, swapped=True), ""),
        (HINT_HW_NO_SOFTMAX, _hw(inputs, softmax=False), ""),
    ]


def _hw_shape_hint(got: list, expected: list, k: int) -> str:
    B, H, T, S = expected[0]
    shape = got[0]
    if shape in ((B, T, S), (B, 1, T, S), (1, T, S)):
        return HINT_HW_AVERAGED
    if shape == (B, H, S, T):
        return HINT_SCORES_TRANSPOSED
    if len(shape) == 4 and sorted(shape) == sorted((B, H, T, S)):
        return HINT_HW_AXES
    return HINT_HW_SHAPE


_judge_hw = tensor_judge(_build_hw_args, ("weights",), _hw_variants, _hw_shape_hint,
                         HINT_HW_GENERIC)


@dataclass(frozen=True)
class HeadScores(Args):
    """A case of task 5.1: query (B, T, D), key (B, S, D) (``cross``) or the query itself
    (S = T), H heads of width Dh (H * Dh need not be D), a (B, T, S) mask or None."""

    seed: int
    B: int
    T: int
    S: int
    D: int
    H: int
    Dh: int
    cross: bool
    mask: list | None = None
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if not self.cross and self.S != self.T:
            raise ValueError("self-attention has S = T")


_HW_CASES = (
    HeadScores(511, B=2, T=5, S=4, D=6, H=3, Dh=4, cross=True).case(
        "cross-attention, no mask; 5 queries and 4 keys, D = 6, 3 heads of width 4"),
    HeadScores(512, B=2, T=4, S=4, D=8, H=2, Dh=3, cross=False,
               mask=[masks.causal(4), masks.rows("1000", "1100", "0110", "0011")]).case(
        "self-attention, a (B, T, S) mask per sequence with B = H = 2; D = 8, Dh = 3"),
    HeadScores(513, B=3, T=3, S=6, D=10, H=4, Dh=2, cross=True,
               mask=[masks.padding([6], 6, ones=0) * 3, masks.padding([4], 6, ones=0) * 3,
                     masks.padding([2], 6, ones=0) * 3]).case(
        "cross-attention, 3 queries and 6 padded keys (lengths 6, 4, 2) as a (B, T, S) mask; "
        "4 heads of width 2"),
)


def _hw_case(rng: random.Random, *, cross: bool = True, mask: str | None = None,
             H: int | None = None, B: int | None = None, T: int | None = None,
             large: bool = False, dtype: str = "float32") -> HeadScores:
    """A case of task 5.1 drawn from ``rng``; ``mask``: None, "rows" (every sequence its
    own), "causal"."""
    D, Dh = (rng.randint(12, 20), rng.choice([4, 8])) if large else draw_sizes(rng, 2, 2, 7)
    H = (rng.randint(2, 4) if not large else rng.choice([4, 8])) if H is None else H
    B = (rng.randint(1, 3) if large else rng.choice([b for b in (2, 3) if b != H])
         ) if B is None else B
    T = (rng.randint(8, 12) if large else rng.randint(2, 6)) if T is None else T
    S = (rng.choice([n for n in range(2, 9) if n != T]) if cross else T)
    plain = {
        None: lambda: None,
        "rows": lambda: [masks.random_rows(rng, T, S) for _ in range(B)],
        "causal": lambda: [masks.causal(T) for _ in range(B)],
    }[mask]()
    return HeadScores(draw_seed(rng), B, T, S, D, H, Dh, cross, plain, dtype)


_HW_HIDDEN = (
    hidden("hidden: float64, a mask per sequence",
           lambda rng: _hw_case(rng, mask="rows", dtype="float64")),
    hidden("hidden: one head", lambda rng: _hw_case(rng, mask="rows", H=1)),
    hidden("hidden: causal self-attention, larger sizes",
           lambda rng: _hw_case(rng, cross=False, mask="causal", large=True)),
    hidden("hidden: one query, a batch of one", lambda rng: _hw_case(rng, B=1, T=1)),
)

register(
    Task(
        id="5.1",
        assignment=ASSIGNMENT,
        func_name="head_weights",
        title="Every head's attention weights from per-head query and key matrices",
        cases=_HW_CASES,
        hidden=_HW_HIDDEN,
        build_args=_build_hw_args,
        reference=head_weights,
        to_plain=lambda value: tensor_plain(value, "the weights"),
        judge=_judge_hw,
        forbidden=_NO_ATTENTION_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "w_q and w_k are (H, Dh, D), so head h's queries are (B, T, Dh) and its keys "
            "(B, S, Dh); the scores are (B, H, T, S); a (B, T, S) mask needs a head axis to "
            "broadcast to them.",
            "TypeError": "The function is called without a mask when there is none: give it "
            "the default mask=None.",
            "CheckError": "Return one tensor, the weights (B, H, T, S).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 5.2 grouped_query_attention (extension)
# --------------------------------------------------------------------------------------------

HINT_GQA_CYCLIC = (
    "The heads are assigned to the wrong groups: group g serves the CONSECUTIVE query heads "
    "g * H/G to (g + 1) * H/G - 1. Yours gives group g the heads g, g + G, g + 2G, ... (each "
    "group's keys and values repeated as a whole block, instead of each group repeated in "
    "place)."
)
HINT_GQA_FIRST_GROUP = (
    "Every head reads the keys and values of the first group only: that is multi-query "
    "attention whatever G is. Each of the G groups serves its own H/G query heads."
)
HINT_GQA_SCALE_D_MODEL = (
    "Scale each head's scores by the square root of Dh = D / H, the width of one head's "
    "queries and keys, not of D, the model width."
)
HINT_GQA_SCALE_KV = (
    "Scale by the square root of Dh, the width of one head, not of G * Dh, the width of the "
    "whole key projection: each score is a dot product of Dh numbers."
)
HINT_GQA_NO_OUT_PROJ = (
    "Apply the output projection W^O to the merged heads: out = [head_1; ...; head_H] W^O^T."
)
HINT_GQA_VALUES = "The values have their own projection, W^V: do not reuse the keys'."
HINT_GQA_MERGE = (
    "The heads are merged in the wrong place: move the head axis back next to the features "
    "before flattening (B, H, T, Dh) into (B, T, D), so that row t holds position t's outputs "
    "of every head."
)
HINT_GQA_WEIGHTS_PER_GROUP = (
    "Return one map of weights per QUERY head, (B, H, T, T): the heads of a group share keys "
    "and values, but each has its own queries, hence its own weights."
)
HINT_GQA_SHAPE = "Return (out, weights): out (B, T, D), weights (B, H, T, T)."
HINT_GQA_GENERIC = (
    "Project the queries into H heads of width Dh = D / H, the keys and values into G groups "
    "of the same width; let head h use the keys and values of group h // (H / G); attend in "
    "every head (scores divided by the square root of Dh, the mask shared by the heads); merge "
    "the heads and apply W^O."
)


def _build_gqa_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, D, H, G = (int(args[name]) for name in ("B", "T", "D", "H", "G"))
    Dh = D // H
    x = normal(gen, (B, T, D), 1.0, dtype)
    w_q = normal(gen, (D, D), 1 / math.sqrt(D), dtype)
    w_k = normal(gen, (G * Dh, D), 1 / math.sqrt(D), dtype)
    w_v = normal(gen, (G * Dh, D), 1 / math.sqrt(D), dtype)
    w_o = normal(gen, (D, D), 1 / math.sqrt(D), dtype)
    inputs = (x, w_q, w_k, w_v, w_o, H, G)
    if args["mask"] is None:
        return inputs
    return (*inputs, masks.as_tensor(args["mask"]))


def _kv_groups(x: Tensor, w: Tensor, n_groups: int) -> Tensor:
    """(B, T, D) projected by ``w`` (G * Dh, D) and cut into G groups: (B, G, T, Dh)."""
    B, T, _ = x.shape
    return (x @ w.T).reshape(B, T, n_groups, -1).transpose(1, 2)


def kv_cache_numbers(n_groups: int, d_head: int) -> int:
    """How many numbers one token adds to a layer's key/value cache under grouped-query
    attention: the keys and the values of every group, as :func:`grouped_query_attention`
    computes them (question 5.6 counts them on a token)."""
    token = torch.zeros(1, 1, n_groups * d_head)  # one token of width G * Dh
    w = torch.zeros(n_groups * d_head, n_groups * d_head)
    return _kv_groups(token, w, n_groups).numel() * 2  # keys and values


def grouped_query_attention(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor,
                            n_heads: int, n_groups: int,
                            mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Task 5.2's reference: grouped-query self-attention.

    Args:
        x: (B, T, D).
        w_q: (D, D), the H query heads of width Dh = D // H stacked; w_k, w_v: (G * Dh, D),
            the G key and value groups stacked; w_o: (D, D). No biases.
        n_heads: H; n_groups: G, a divisor of H. Head h reads group h // (H // G).
        mask: bool, True = may attend, broadcastable to (B, H, T, T); 3-D: (B, T, T).

    Returns:
        ``(out (B, T, D), weights (B, H, T, T))``.
    """
    B, T, D = x.shape
    Dh = D // n_heads
    q = (x @ w_q.T).reshape(B, T, n_heads, Dh).transpose(1, 2)  # (B, H, T, Dh)
    per_group = n_heads // n_groups
    k = _kv_groups(x, w_k, n_groups).repeat_interleave(per_group, dim=1)  # (B, H, T, Dh)
    v = _kv_groups(x, w_v, n_groups).repeat_interleave(per_group, dim=1)  # (B, H, T, Dh)
    scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)  # (B, H, T, T)
    if mask is not None:
        allowed = mask.unsqueeze(1) if mask.dim() == 3 else mask
        scores = scores.masked_fill(~allowed, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    heads = (weights @ v).transpose(1, 2).reshape(B, T, D)  # (B, T, D)
    return heads @ w_o.T, weights


def _gqa(inputs: tuple, *, assign: str = "in place", scale: float | None = None,
         values_with: str = "w_v", project_out: bool = True, cut: str = "right",
         merge: str = "right", mask_mode: str = "per head") -> Callable[[], tuple]:
    """Grouped-query attention with one knob turned to a known mistake (defaults: right)."""
    x, w_q, w_k, w_v, w_o, H, G = inputs[:7]
    mask = inputs[7] if len(inputs) > 7 else None
    B, T, D = x.shape
    Dh = D // H

    def groups(w: Tensor, n: int) -> Tensor:
        packed = x @ w.T  # (B, T, n * Dh)
        if cut == "no transpose":
            return packed.reshape(B, n, T, Dh)
        return packed.reshape(B, T, n, Dh).transpose(1, 2)

    def shared(t: Tensor) -> Tensor:  # (B, G, T, Dh) -> (B, H, T, Dh)
        if assign == "cyclic":
            return t.repeat(1, H // G, 1, 1)
        if assign == "first":
            return t[:, :1].expand(B, H, T, Dh)
        return t.repeat_interleave(H // G, dim=1)

    def forward() -> tuple[Tensor, Tensor]:
        if mask_mode != "per head" and (mask is None or mask.dim() != 3):
            raise ValueError("this mistake needs a (B, T, T) mask")
        q = groups(w_q, H)
        k = shared(groups(w_k, G))
        v = shared(groups(w_k if values_with == "w_k" else w_v, G))
        scores = q @ k.transpose(-2, -1) / (math.sqrt(Dh) if scale is None else scale)
        if mask is not None:
            m = mask.unsqueeze(1) if mask.dim() == 3 and mask_mode == "per head" else mask
            scores = scores.masked_fill(~m, NEG_INF)
        weights = torch.softmax(scores, dim=-1)
        heads = weights @ v  # (B, H, T, Dh)
        merged = (heads.reshape(B, T, D) if merge == "no transpose"
                  else heads.transpose(1, 2).reshape(B, T, D))
        return (merged @ w_o.T if project_out else merged), weights

    return forward


def _gqa_variants(inputs: tuple) -> list[Variant]:
    D, H, G = inputs[0].shape[-1], inputs[5], inputs[6]
    Dh = D // H
    return [
        (HINT_GQA_CYCLIC, _gqa(inputs, assign="cyclic"), ""),
        (HINT_GQA_FIRST_GROUP, _gqa(inputs, assign="first"), ""),
        (HINT_GQA_SCALE_D_MODEL, _gqa(inputs, scale=math.sqrt(D)), ""),
        (HINT_GQA_SCALE_KV, _gqa(inputs, scale=math.sqrt(G * Dh)), ""),
        (HINT_NO_SCALE, _gqa(inputs, scale=1.0), ""),
        (HINT_GQA_NO_OUT_PROJ, _gqa(inputs, project_out=False), ""),
        (HINT_GQA_VALUES, _gqa(inputs, values_with="w_k"), ""),
        (HINT_HEADS_NO_TRANSPOSE, _gqa(inputs, cut="no transpose"), ""),
        (HINT_GQA_MERGE, _gqa(inputs, merge="no transpose"), ""),
        (HINT_HEADS_NO_TRANSPOSE, _gqa(inputs, cut="no transpose", merge="no transpose"), ""),
        (HINT_MASK_NOT_PER_HEAD, _gqa(inputs, mask_mode="as is"), ""),
    ]


def _gqa_shape_hint_for(inputs: tuple) -> Callable[[list, list, int], str]:
    G = inputs[6]

    def hint(got: list, expected: list, k: int) -> str:
        out_shape, weights_shape = expected
        B, H, T, S = weights_shape
        if got[0] == weights_shape and got[1] == out_shape:
            return HINT_PAIR_ORDER
        if k == 1 and got[1] == (B, G, T, S):
            return HINT_GQA_WEIGHTS_PER_GROUP
        return HINT_GQA_SHAPE

    return hint


def _gqa_all_variants(inputs: tuple) -> list[Variant]:
    mask = inputs[7] if len(inputs) > 7 else None
    variants = _gqa_variants(inputs)
    if mask is not None:
        flipped = (*inputs[:7], ~mask)
        variants.append((HINT_MASK_INVERTED, _gqa(flipped), ""))
    return variants


_judge_gqa = tensor_judge(_build_gqa_args, ("out", "weights"), _gqa_all_variants,
                          _gqa_shape_hint_for, HINT_GQA_GENERIC, inputs_shape_hint=True)


@dataclass(frozen=True)
class Grouped(Args):
    """A case of task 5.2: x (B, T, D), H query heads, G key/value groups, a mask or None."""

    seed: int
    B: int
    T: int
    D: int
    H: int
    G: int
    mask: list | None = None
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.D % self.H or self.H % self.G:
            raise ValueError("H divides D and G divides H")


_GQA_CASES = (
    Grouped(521, B=2, T=5, D=8, H=4, G=2).case(
        "4 query heads in 2 groups, no mask; D = 8 (Dh = 2)"),
    Grouped(522, B=2, T=4, D=12, H=3, G=1, mask=masks.causal(4)).case(
        "multi-query (G = 1), 3 heads, a causal (T, T) mask"),
    Grouped(523, B=2, T=4, D=8, H=2, G=2,
            mask=[masks.rows("1100", "1110", "0111", "0011"), masks.causal(4)]).case(
        "multi-head (G = H = 2), a (B, T, T) mask per sequence with B = H"),
    Grouped(524, B=2, T=6, D=12, H=6, G=3, mask=masks.padding([6, 4], 6, ones=2)).case(
        "6 heads in 3 groups, a (B, 1, 1, T) key-padding mask (lengths 6 and 4)"),
)


def _gqa_case(rng: random.Random, *, groups: str = "between", mask: str | None = None,
              B: int | None = None, large: bool = False, dtype: str = "float32") -> Grouped:
    """A case of task 5.2 drawn from ``rng``; ``groups``: "between" (1 < G < H), "one"
    (G = 1), "all" (G = H), "single" (H = G = 1); ``mask``: None, "causal", "padding",
    "sequences" (B, T, T) with B != H."""
    H = rng.choice([4, 8]) if large else rng.choice([4, 6])
    if groups == "single":
        H = 1
    G = {"between": rng.choice([g for g in range(2, H) if H % g == 0] or [1]), "one": 1,
         "all": H, "single": 1}[groups]
    Dh = rng.choice([2, 4]) if large else rng.randint(1, 3)
    if B is None:  # a (B, T, T) mask: B > 1 and B != H, so that its head axis matters
        B = rng.choice([b for b in (2, 3) if b != H]) if mask == "sequences" else rng.randint(1, 3)
    T = rng.randint(8, 12) if large else rng.randint(2, 6)
    plain = {
        None: lambda: None,
        "causal": lambda: masks.causal(T),
        "padding": lambda: masks.padding(masks.random_lengths(rng, B, T), T, ones=2),
        "sequences": lambda: [masks.random_rows(rng, T, T) for _ in range(B)],
    }[mask]()
    return Grouped(draw_seed(rng), B, T, H * Dh, H, G, plain, dtype)


_GQA_HIDDEN = (
    hidden("hidden: float64, groups of several heads, causal",
           lambda rng: _gqa_case(rng, mask="causal", dtype="float64")),
    hidden("hidden: multi-query, key padding", lambda rng: _gqa_case(rng, groups="one",
                                                                     mask="padding")),
    hidden("hidden: multi-head, float64", lambda rng: _gqa_case(rng, groups="all",
                                                                dtype="float64")),
    hidden("hidden: one head", lambda rng: _gqa_case(rng, groups="single", mask="causal")),
    hidden("hidden: a (B, T, T) mask with B != H",
           lambda rng: _gqa_case(rng, mask="sequences")),
    hidden("hidden: larger sizes", lambda rng: _gqa_case(rng, mask="causal", large=True)),
)

register(
    Task(
        id="5.2",
        assignment=ASSIGNMENT,
        func_name="grouped_query_attention",
        title="Grouped-query attention: H query heads sharing G groups of keys and values",
        cases=_GQA_CASES,
        hidden=_GQA_HIDDEN,
        build_args=_build_gqa_args,
        reference=grouped_query_attention,
        to_plain=lambda value: parts_plain(value, ("out", "weights")),
        judge=_judge_gqa,
        forbidden=_NO_MULTIHEAD_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "w_q (D, D) gives H heads of width Dh = D // H, w_k and w_v (G * Dh, D) give G "
            "groups of the same width; the G groups must become H heads (one copy per head "
            "of the group) before they meet the queries; a (B, T, T) mask needs a head axis; "
            "and .view after a transpose fails: use .reshape.",
            "ValueError": "A function refused its arguments: chapter 4's "
            "scaled_dot_product_attention raises this when the mask does not broadcast to the "
            "scores (B, H, T, T), or when the queries and keys have different numbers of heads.",
            "TypeError": "The function is called without a mask when there is none: give it "
            "the default mask=None.",
            "CheckError": "Return a pair (out, weights) of tensors.",
        },
        kind="extension",
    )
)


# --------------------------------------------------------------------------------------------
# Task 5.3 train_two_markers (train)
# --------------------------------------------------------------------------------------------

#: The task's letters, sequence length, training and held-out sizes.
TWO_LETTERS = 16
TWO_T = 8
TWO_TRAIN = 2000
TWO_HELD_OUT = 2000
#: TwoMarkerModel's width and heads. With two heads (of width 8) the reference's loop got stuck
#: on 10 of 300 drawn training sets, one head never finding its marker (held-out accuracy about
#: 0.53); with four (of width 4), on none (benchmarks/bench_train_margins.py).
TWO_D = 16
TWO_HEADS = 4
#: Full marks from 0.95 held-out accuracy, half from 0.7, a quarter from 0.4 (chance: 1/16).
TWO_BANDS = ((0.95, 1.0), (0.7, 0.5), (0.4, 0.25))
#: Seconds one training may take (measured on one thread); the reference needs one or two.
TWO_TIME_LIMIT = 10.0

HINT_TWO_TRAIN = (
    "The model is confident but wrong on held-out sequences: it learnt something else than the "
    "task. Train on the sequences, markers and answers given, with the cross-entropy of both "
    "answers (the letter at marker 1, then the letter at marker 2), and clear the gradients "
    "before every backward pass."
)
HINT_TWO_PARTIAL = (
    "Partial credit: the model has learnt part of the task (often one of the two look-ups). "
    "Train for more steps (or with a larger learning rate) on the sequences given, and watch "
    "the training loss of both answers fall."
)
HINT_TWO_UNTRAINED = (
    "The model's predictions are close to uniform: it links no sequence to its answers. Is it "
    "trained at all (a backward pass and an optimizer step on the parameters of the model you "
    "return), and does each minibatch pair the sequences with their own answers?"
)


class TwoMarkerModel(nn.Module):
    """The course model of task 5.3: one layer of multi-head self-attention reads a sequence of
    letters in which two positions are marked, and predicts both marked letters at the last
    position.

    A token's vector is the sum of its letter's embedding and its marker's (0: none, 1: marker
    1, 2: marker 2); the layer (:class:`coursepkg.multihead.MultiHeadAttention`, D = 16, four
    heads; no positions: both look-ups are by content) is added to its input, and a linear
    layer reads the two letters out of the last position.
    """

    def __init__(self, n_heads: int = TWO_HEADS) -> None:
        super().__init__()
        self.letters = nn.Embedding(TWO_LETTERS, TWO_D)
        self.markers = nn.Embedding(3, TWO_D)
        self.attention = MultiHeadAttention(TWO_D, n_heads)
        self.readout = nn.Linear(TWO_D, 2 * TWO_LETTERS)

    def forward(self, tokens: Tensor, markers: Tensor) -> Tensor:
        """tokens, markers: (B, T) int64 -> logits (B, 2, letters): the letter at marker 1,
        then the letter at marker 2."""
        x = self.letters(tokens) + self.markers(markers)  # (B, T, D)
        out, _ = self.attention(x, x, x)  # (B, T, D)
        h = x + out
        return self.readout(h[:, -1]).view(-1, 2, TWO_LETTERS)


#: Every name of TwoMarkerModel's state_dict and its shape.
TWO_SHAPES = {
    "letters.weight": (TWO_LETTERS, TWO_D),
    "markers.weight": (3, TWO_D),
    "attention.in_proj_weight": (3 * TWO_D, TWO_D),
    "attention.in_proj_bias": (3 * TWO_D,),
    "attention.out_proj.weight": (TWO_D, TWO_D),
    "attention.out_proj.bias": (TWO_D,),
    "readout.weight": (2 * TWO_LETTERS, TWO_D),
    "readout.bias": (2 * TWO_LETTERS,),
}


def two_marker_data(seed: int, n: int, *,
                    answer: str = "both") -> tuple[Tensor, Tensor, Tensor]:
    """``n`` sequences of the task, their markers and their answers, drawn from ``seed``.

    Each sequence holds :data:`TWO_T` letters out of :data:`TWO_LETTERS`; two different
    positions (never the last) carry marker 1 and marker 2.

    Args:
        seed: seeds the draw.
        n: the number of sequences.
        answer: ``"both"``: (the letter at marker 1, the letter at marker 2), the task;
            ``"swapped"``: the two answers in the other order (another task, for the tests).

    Returns:
        ``(tokens (n, T) int64, markers (n, T) int64 in {0, 1, 2}, targets (n, 2) int64)``.
    """
    gen = torch.Generator().manual_seed(int(seed))
    tokens = torch.randint(0, TWO_LETTERS, (n, TWO_T), generator=gen)
    where = torch.rand(n, TWO_T - 1, generator=gen).argsort(dim=1)[:, :2]  # (n, 2) distinct
    markers = torch.zeros(n, TWO_T, dtype=torch.long)
    markers.scatter_(1, where, torch.tensor([1, 2]).expand(n, 2))
    targets = tokens.gather(1, where)  # (n, 2)
    if answer == "swapped":
        targets = targets.flip(1)
    return tokens, markers, targets


def _build_two_args(args: dict) -> tuple:
    """The student's arguments: the training sequences, markers, answers and a seed (never the
    held-out seed, which :func:`coursepkg.checks.core.student_args` holds back)."""
    tokens, markers, targets = two_marker_data(int(args["seed"]), int(args["n"]))
    return tokens, markers, targets, int(args["seed"])


def two_held_out(args: dict) -> tuple[Tensor, Tensor, Tensor]:
    """The ``expected`` hook: held-out sequences drawn from the case's ``"_heldout"`` seed."""
    return two_marker_data(int(args["_heldout"]), TWO_HELD_OUT)


def train_two_markers(tokens: Tensor, markers: Tensor, targets: Tensor,
                      seed: int) -> TwoMarkerModel:
    """Task 5.3's reference: Adam on minibatches of 128 sequences, 150 steps (one or two
    seconds of CPU on one thread).

    Args:
        tokens, markers: (N, T) the training sequences and their markers; targets: (N, 2);
        seed: seeds the initialisation and the minibatches.

    Returns:
        The trained :class:`TwoMarkerModel`.
    """
    torch.manual_seed(seed)
    model = TwoMarkerModel()
    return fit_classifier(model, (tokens, markers), targets, seed, steps=150, lr=0.03,
                          batch=128)


register(
    train_task(
        "5.3",
        ASSIGNMENT,
        "train_two_markers",
        "Train a multi-head model to read two marked letters at once",
        **training_cases("2,000 training sequences", TWO_TRAIN, 531, 9531),
        build_args=_build_two_args,
        reference=train_two_markers,
        model=TwoMarkerModel,
        held_out=two_held_out,
        score=classifier_accuracy,
        bands=TWO_BANDS,
        time_limit=TWO_TIME_LIMIT,
        metric="held-out accuracy",
        advise=classifier_advice(HINT_TWO_PARTIAL, HINT_TWO_TRAIN,
                                 untrained=(0.25, HINT_TWO_UNTRAINED)),
        forbidden=("coursepkg.lm", "torch.nn.functional.scaled_dot_product_attention",
                   "torch.nn.MultiheadAttention"),
        error_hints={
            "CheckError": "Return the trained TwoMarkerModel (or its state_dict()), with the "
            "names and shapes of TwoMarkerModel().state_dict().",
            "RuntimeError": "A tensor operation failed: the sequences and markers are (N, T) "
            "integers and the answers (N, 2); TwoMarkerModel takes (tokens, markers) and "
            "returns (B, 2, letters) logits, which cross_entropy wants as (B * 2, letters) "
            "beside (B * 2,) answers.",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 5.4 padded_multi_head_attention (debug)
# --------------------------------------------------------------------------------------------

HINT_DEBUG_SPLIT = (
    "The heads are cut in the wrong place: the projection is stored position by position, so "
    "reading (B, L, D) straight as (B, H, L, Dh) gives a 'head' a stretch of positions. Cut the "
    "features into (H, Dh) at each position first, then move the head axis before the "
    "positions."
)
HINT_DEBUG_MERGE = (
    "The heads are merged in the wrong place: the outputs are (B, H, T, Dh), and flattening "
    "them straight to (B, T, D) mixes heads with positions. Move the head axis back next to the "
    "features first, then flatten."
)
HINT_DEBUG_SCALE = (
    "The scores are divided by the square root of D: each head's scores are dot products of "
    "Dh = D / H numbers, so their spread is the square root of Dh, and dividing by sqrt(D) "
    "flattens every head's weights."
)
HINT_DEBUG_PADDING = (
    "The padding mask lets one padding key in: sequence b has lengths[b] real keys, at "
    "positions 0 to lengths[b] - 1, and the key at position lengths[b] is already padding."
)
PREFIX_DEBUG_SEVERAL = "Several bugs are still there:"
HINT_DEBUG_INVERTED = (
    "The padding mask is applied inverted: the scores filled with -inf must be those of the "
    "padding keys; yours hides the real keys and keeps the padding."
)
HINT_DEBUG_SCALE_NO_SQRT = (
    "Divide by the square root of Dh, not by Dh itself: the spread of a dot product of Dh "
    "unit-variance terms is sqrt(Dh)."
)
HINT_DEBUG_NO_OUT_PROJ = "Keep the output projection W^O on the merged heads."
HINT_DEBUG_SHAPE = "Return (out, weights): out (B, T, D), weights (B, H, T, S)."
HINT_DEBUG_GENERIC = (
    "Run the starter code on a small input and test what must hold: each head's weights sum "
    "to 1 over the keys and are exactly 0 on every padding key; changing a padding key's "
    "vector changes nothing; with one head the layer is chapter 4's attention followed by W^O; "
    "and the scores have the scale of one head's width."
)

_BUG_HINTS = {
    "split": HINT_DEBUG_SPLIT,
    "merge": HINT_DEBUG_MERGE,
    "scale": HINT_DEBUG_SCALE,
    "padding": HINT_DEBUG_PADDING,
}


def _build_padded_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, S, D, H = (int(args[name]) for name in ("B", "T", "S", "D", "H"))
    query = normal(gen, (B, T, D), 1.0, dtype)
    key, value = normal(gen, (B, S, D), 1.0, dtype), normal(gen, (B, S, D), 1.0, dtype)
    lengths = torch.tensor(args["lengths"], dtype=torch.long)
    w_q, w_k, w_v, w_o = (normal(gen, (D, D), 1 / math.sqrt(D), dtype) for _ in range(4))
    return query, key, value, lengths, w_q, w_k, w_v, w_o, H


def padded_with_bugs(query: Tensor, key: Tensor, value: Tensor, lengths: Tensor, w_q: Tensor,
                     w_k: Tensor, w_v: Tensor, w_o: Tensor, n_heads: int,
                     bugs: frozenset = frozenset(), *, inverted: bool = False,
                     scale: float | None = None,
                     project_out: bool = True) -> tuple[Tensor, Tensor]:
    """The layer with some of the starter code's bugs (``bugs``, names of :data:`_BUG_HINTS`)
    and other mistakes: the padding mask filled where it is True (``inverted``), scores
    divided by ``scale``, no W^O."""
    B, T, D = query.shape
    S = key.shape[1]
    Dh = D // n_heads

    def cut(x: Tensor) -> Tensor:
        L = x.shape[1]
        if "split" in bugs:
            return x.reshape(B, n_heads, L, Dh)
        return x.reshape(B, L, n_heads, Dh).transpose(1, 2)

    q, k, v = cut(query @ w_q.T), cut(key @ w_k.T), cut(value @ w_v.T)
    if scale is None:
        scale = math.sqrt(D) if "scale" in bugs else math.sqrt(Dh)
    scores = q @ k.transpose(-2, -1) / scale  # (B, H, T, S)
    positions = torch.arange(S)
    keep = (positions <= lengths[:, None]) if "padding" in bugs else (positions < lengths[:, None])
    keep = keep[:, None, None, :]  # (B, 1, 1, S)
    scores = scores.masked_fill(keep if inverted else ~keep, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    heads = weights @ v  # (B, H, T, Dh)
    merged = heads.reshape(B, T, D) if "merge" in bugs else heads.transpose(1, 2).reshape(B, T, D)
    return (merged @ w_o.T if project_out else merged), weights


def padded_multi_head_attention(query: Tensor, key: Tensor, value: Tensor, lengths: Tensor,
                                w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor,
                                n_heads: int) -> tuple[Tensor, Tensor]:
    """Task 5.4's reference (the starter code fixed): multi-head attention from T queries to S
    keys of which the first ``lengths[b]`` of sequence b are real.

    Args:
        query: (B, T, D); key, value: (B, S, D); lengths: (B,) int64, from 1 to S.
        w_q, w_k, w_v, w_o: (D, D), one row per output feature; no biases.
        n_heads: H, a divisor of D.

    Returns:
        ``(out (B, T, D), weights (B, H, T, S))``, the weights 0 on the padding keys.
    """
    return padded_with_bugs(query, key, value, lengths, w_q, w_k, w_v, w_o, n_heads)


def debug_hint(bugs: frozenset) -> str:
    """The feedback to the starter code with ``bugs`` left (one hint, or each of them)."""
    hints = [_BUG_HINTS[name] for name in _BUG_HINTS if name in bugs]
    return hints[0] if len(hints) == 1 else " ".join([PREFIX_DEBUG_SEVERAL, *hints])


#: Every combination of the starter code's bugs, one bug first.
BUG_SETS = tuple(frozenset(combo) for n in range(1, len(_BUG_HINTS) + 1)
                 for combo in itertools.combinations(_BUG_HINTS, n))


def _padded_variants(inputs: tuple) -> list[Variant]:
    D = inputs[0].shape[-1]
    Dh = D // inputs[8]
    variants: list[Variant] = [
        (debug_hint(bugs), lambda bugs=bugs: padded_with_bugs(*inputs, bugs), "")
        for bugs in BUG_SETS
    ]
    variants += [
        (HINT_DEBUG_INVERTED, lambda: padded_with_bugs(*inputs, inverted=True), ""),
        (HINT_DEBUG_SCALE_NO_SQRT, lambda: padded_with_bugs(*inputs, scale=float(Dh)), ""),
        (HINT_DEBUG_NO_OUT_PROJ, lambda: padded_with_bugs(*inputs, project_out=False), ""),
    ]
    return variants


def _padded_shape_hint(got: list, expected: list, k: int) -> str:
    out_shape, weights_shape = expected
    if got[0] == weights_shape and got[1] == out_shape:
        return HINT_PAIR_ORDER
    return HINT_DEBUG_SHAPE


_judge_padded = tensor_judge(_build_padded_args, ("out", "weights"), _padded_variants,
                             _padded_shape_hint, HINT_DEBUG_GENERIC)


@dataclass(frozen=True)
class Padded(Args):
    """A case of task 5.4: T queries, S keys of which ``lengths[b]`` are real, H heads."""

    seed: int
    B: int
    T: int
    S: int
    D: int
    H: int
    lengths: tuple
    dtype: str = "float32"


_PADDED_CASES = (
    Padded(541, B=2, T=4, S=5, D=8, H=2, lengths=(5, 3)).case(
        "4 queries, 5 keys (lengths 5 and 3); D = 8, 2 heads"),
    Padded(542, B=3, T=3, S=6, D=12, H=3, lengths=(2, 6, 4)).case(
        "3 queries, 6 keys (lengths 2, 6 and 4); D = 12, 3 heads"),
    Padded(543, B=1, T=5, S=4, D=8, H=4, lengths=(3,)).case(
        "one sequence, 5 queries, 4 keys of which 3 are real; 4 heads of width 2"),
)


def _padded_case(rng: random.Random, *, H: int | None = None, T: int | None = None,
                 large: bool = False, dtype: str = "float32") -> Padded:
    H = (rng.choice([4, 8]) if large else rng.randint(2, 4)) if H is None else H
    Dh = rng.choice([4, 8]) if large else rng.randint(2, 3)
    B = rng.randint(2, 4)
    S = rng.randint(8, 12) if large else rng.randint(3, 7)
    T = (rng.randint(8, 12) if large else rng.randint(2, 6)) if T is None else T
    lengths = masks.random_lengths(rng, B, S)
    return Padded(draw_seed(rng), B, T, S, H * Dh, H, tuple(lengths), dtype)


_PADDED_HIDDEN = (
    hidden("hidden: float64", lambda rng: _padded_case(rng, dtype="float64")),
    hidden("hidden: one head", lambda rng: _padded_case(rng, H=1)),
    hidden("hidden: larger sizes", lambda rng: _padded_case(rng, large=True)),
)

register(
    Task(
        id="5.4",
        assignment=ASSIGNMENT,
        func_name="padded_multi_head_attention",
        title="Fix a multi-head attention over padded keys with planted bugs",
        cases=_PADDED_CASES,
        hidden=_PADDED_HIDDEN,
        build_args=_build_padded_args,
        reference=padded_multi_head_attention,
        to_plain=lambda value: parts_plain(value, ("out", "weights")),
        judge=_judge_padded,
        forbidden=_NO_MULTIHEAD_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "the queries are (B, T, D), the keys and values (B, S, D), each cut into H heads "
            "of width Dh; the padding mask (B, S) needs axes of size 1 for the heads and the "
            "queries; and .view after a transpose fails: use .reshape.",
            "CheckError": "Return a pair (out, weights) of tensors.",
        },
        kind="debug",
    )
)


# --------------------------------------------------------------------------------------------
# Questions 5.5 to 5.7
# --------------------------------------------------------------------------------------------

#: Question 5.5's layer; question 5.6's decoder layer; question 5.7's layer and sequence.
Q_PARAMS_D, Q_PARAMS_H = 64, 8
Q_CACHE_H, Q_CACHE_DH, Q_CACHE_G, Q_CACHE_BYTES = 12, 64, 3, 4
Q_MAPS_D, Q_MAPS_H, Q_MAPS_T = 32, 4, 10


def attention_parameters_key() -> int:
    """Question 5.5's key: the parameters of the package's MultiHeadAttention(64, 8)."""
    with torch.random.fork_rng(devices=[]):
        layer = MultiHeadAttention(Q_PARAMS_D, Q_PARAMS_H)
    return sum(p.numel() for p in layer.parameters())


def kv_cache_bytes_key() -> int:
    """Question 5.6's key: the bytes one token adds to the layer's key/value cache, float32."""
    return kv_cache_numbers(Q_CACHE_G, Q_CACHE_DH) * torch.finfo(torch.float32).bits // 8


def attention_maps_key() -> int:
    """Question 5.7's key: how many weights MultiHeadAttention(32, 4) returns for one sequence
    of 10 tokens attending to itself."""
    with torch.random.fork_rng(devices=[]):
        layer = MultiHeadAttention(Q_MAPS_D, Q_MAPS_H)
    x = torch.zeros(1, Q_MAPS_T, Q_MAPS_D)
    with torch.no_grad():
        _, weights = layer(x, x, x)
    return weights.numel()


HINT_Q_PARAMS = (
    "Count the four D x D matrices W^Q, W^K, W^V and W^O and their biases: how do they depend "
    "on the number of heads?"
)
HINT_Q_PARAMS_PER_HEAD = (
    "Cutting W^Q into H blocks of rows does not make it H times larger: the layer has the same "
    "parameters for every number of heads."
)
HINT_Q_PARAMS_NO_BIAS = (
    "Almost: the layer has biases too, one per output feature of each of the four projections."
)
HINT_Q_PARAMS_NO_OUT = "Almost: the output projection W^O (and its bias) is part of the layer."
HINT_Q_CACHE = (
    "Per token, the cache keeps the keys and the values of that token for every key/value "
    "group (not for every query head), each a vector of one head's width, in 4-byte floats."
)
HINT_Q_CACHE_HEADS = (
    "That is the cache of multi-head attention, one key and one value per QUERY head: with "
    "grouped-query attention only the G groups have keys and values."
)
HINT_Q_CACHE_KEYS_ONLY = "Almost: the cache keeps the values as well as the keys."
HINT_Q_CACHE_NUMBERS = "That is the count of numbers: the question asks for bytes (4 each)."
HINT_Q_CACHE_GROUP_SIZE = (
    "G is the number of groups (each serving H / G query heads), and it is the groups that "
    "have keys and values: count G vectors of keys and G of values, not H / G."
)
HINT_Q_MAPS = (
    "The layer returns every head's weights: one weight per (head, query, key)."
)
HINT_Q_MAPS_ONE = (
    "That is one map of T x T weights: each of the H heads has its own."
)
HINT_Q_MAPS_ROWS = "Each query has one weight per KEY, in every head: T x T per head."

register(question(
    "5.5", ASSIGNMENT, "attention_parameters",
    f"How many parameters does a multi-head attention layer with D = {Q_PARAMS_D} and "
    f"H = {Q_PARAMS_H} heads have, biases included?",
    attention_parameters_key, points=1, kind_of_answer="int", hint=HINT_Q_PARAMS,
    wrong_answers=lambda: {
        Q_PARAMS_H * attention_parameters_key(): HINT_Q_PARAMS_PER_HEAD,
        4 * Q_PARAMS_D**2: HINT_Q_PARAMS_NO_BIAS,
        3 * Q_PARAMS_D**2 + 3 * Q_PARAMS_D: HINT_Q_PARAMS_NO_OUT,
    },
))
register(question(
    "5.6", ASSIGNMENT, "kv_cache_bytes",
    f"A layer of grouped-query attention with H = {Q_CACHE_H} query heads of width "
    f"Dh = {Q_CACHE_DH} in G = {Q_CACHE_G} groups, in float32: how many bytes does each token "
    "add to its key/value cache?",
    kv_cache_bytes_key, points=1, kind_of_answer="int", hint=HINT_Q_CACHE,
    wrong_answers=lambda: {
        2 * Q_CACHE_H * Q_CACHE_DH * Q_CACHE_BYTES: HINT_Q_CACHE_HEADS,
        kv_cache_bytes_key() // 2: HINT_Q_CACHE_KEYS_ONLY,
        kv_cache_numbers(Q_CACHE_G, Q_CACHE_DH): HINT_Q_CACHE_NUMBERS,
        2 * (Q_CACHE_H // Q_CACHE_G) * Q_CACHE_DH * Q_CACHE_BYTES: HINT_Q_CACHE_GROUP_SIZE,
    },
))
register(question(
    "5.7", ASSIGNMENT, "attention_weights_returned",
    f"A multi-head attention layer with D = {Q_MAPS_D} and H = {Q_MAPS_H} heads attends over "
    f"one sequence of T = {Q_MAPS_T} tokens (self-attention): how many attention weights does "
    "it return?",
    attention_maps_key, points=1, kind_of_answer="int", hint=HINT_Q_MAPS,
    wrong_answers=lambda: {Q_MAPS_T**2: HINT_Q_MAPS_ONE,
                           Q_MAPS_H * Q_MAPS_T: HINT_Q_MAPS_ROWS},
))
