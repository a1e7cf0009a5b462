"""Chapter 5 tasks (``05_multihead``): splitting a projection into heads, merging the heads
back, and the forward pass of multi-head attention with torch's parameter layout.

The conventions are those of :mod:`coursepkg.multihead`: batch first; ``split_heads`` cuts the
last dim D into H consecutive blocks of Dh = D // H features and moves the head axis before
time, (B, T, D) -> (B, H, T, Dh); ``merge_heads`` is its inverse. The multi-head forward takes
the parameters of ``torch.nn.MultiheadAttention``: ``in_proj_weight`` (3D, D) stacks W^Q, W^K,
W^V in that order, ``in_proj_bias`` (3D,) likewise, ``out_proj_weight`` (D, D) is W^O, and
both biases may be None. Masks are boolean, **True = may attend** (the opposite of
``nn.MultiheadAttention``'s ``attn_mask`` and ``key_padding_mask``), broadcastable to the
scores (B, H, T, S); a (B, T, S) mask holds one mask per sequence and applies to every head
(``mask.unsqueeze(1)``). The references are the package's own tested code: ``split_heads`` and
``merge_heads`` themselves, and a ``MultiHeadAttention`` module holding the case's weights.

Task 5.3 may call chapter 4's ``coursepkg.self_attention.scaled_dot_product_attention`` (the
previous exercise set had the student write it), but not ``coursepkg.multihead``, torch's fused
attention or its multi-head module.

Cases, plain values and judging work as in chapters 3 and 4 (:mod:`coursepkg.checks.tensors`);
the attention in each head is judged with the course's bank of attention mistakes
(:mod:`coursepkg.checks.attention_mistakes`). The cases are made so that the usual mistakes
change the numbers: in one public case of each reshaping task every size is 2, so that a
transposition of the wrong axes keeps the shape and is named from the values; D and Dh differ (a
scale by sqrt(D) shows); T and S differ in the cross-attention cases; one public case has a
(B, T, S) mask with B = H, so a mask that is not unsqueezed runs and is named; the
self-attention cases pass one tensor as query, key and value, as the chapter calls the layer.
The masks are plain nested lists (:mod:`coursepkg.checks.masks`): a checks module does no
tensor work when it is imported (the grader forks its workers from a process that imported it).
The hidden cases' generators draw the seeds, the sizes and the masks from the grader's random
generator.

Shape letters: B batch, T queries, S keys, D model width, H heads, Dh = D // H.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from coursepkg.checks import attention_mistakes as bank
from coursepkg.checks import masks
from coursepkg.checks.attention_mistakes import HINT_PAIR_ORDER
from coursepkg.checks.core import Args, Task, draw_seed, draw_sizes, hidden, register
from coursepkg.checks.forbidden import ATTENTION_KERNELS
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    Variant,
    generator,
    normal,
    parts_plain,
    tensor_judge,
    tensor_plain,
    with_weights,
)
from coursepkg.multihead import MultiHeadAttention, merge_heads, split_heads
from coursepkg.self_attention import scaled_dot_product_attention

__all__ = ["ASSIGNMENT", "merge_heads", "multi_head_attention", "split_heads"]

ASSIGNMENT = "05_multihead"

# The package's multi-head code and torch's fused attention and multi-head module do the whole
# task. Chapter 4's scaled_dot_product_attention (coursepkg.self_attention) stays allowed: it
# is the previous exercise, and the lesson here is the reshape around it.
_NO_MULTIHEAD_LIBRARIES = (
    "coursepkg.multihead",
    "coursepkg.transformer",
    "coursepkg.checks",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
    *ATTENTION_KERNELS,
)

_PERMUTATIONS = tuple(itertools.permutations(range(4)))


# --------------------------------------------------------------------------------------------
# Task 5.1 split_heads
# --------------------------------------------------------------------------------------------

HINT_SPLIT_NO_TRANSPOSE = (
    "Reshaping (B, T, D) straight to (B, H, T, Dh) mixes the heads with time: x is stored "
    "position by position, so view(B, H, T, Dh) cuts the sequence, not the features, into H "
    "pieces, and a 'head' gets a stretch of positions. Cut the features first, x.view(B, T, "
    "H, Dh), then move the head axis before time with .transpose(1, 2)."
)
HINT_SPLIT_INTERLEAVED = (
    "Head h takes the h-th block of Dh consecutive features, x[..., h*Dh:(h+1)*Dh]: view the "
    "last dim as (H, Dh), not (Dh, H). Yours gives head h every H-th feature (h, h + H, ...), "
    "which is not how the rows of W^Q, W^K, W^V are grouped into heads."
)
HINT_SPLIT_TRANSPOSE_FIRST = (
    "Reshape first, then transpose: x.view(B, T, H, Dh).transpose(1, 2). Transposing x to "
    "(B, D, T) first and reshaping that to (B, H, T, Dh) cuts across features and positions."
)
HINT_SPLIT_WRONG_AXES = (
    "After x.view(B, T, H, Dh), swap the time and head axes, dims 1 and 2: .transpose(1, 2) "
    "(or .permute(0, 2, 1, 3)) gives (B, H, T, Dh). Your transposition moves other axes."
)
HINT_SPLIT_NOT_MOVED = (
    "Move the head axis before time: (B, T, H, Dh) -> (B, H, T, Dh) with .transpose(1, 2), so "
    "that attention sees one (T, Dh) sequence per head."
)
HINT_SPLIT_FOLDED = (
    "Keep the batch and the heads as two dims, (B, H, T, Dh): attention (and merge_heads) "
    "need both."
)
HINT_SPLIT_NOT_SPLIT = (
    "Cut the features into n_heads blocks of Dh = D // n_heads: the result has 4 dims, "
    "(B, H, T, Dh)."
)
HINT_SPLIT_SHAPE = (
    "Return (B, H, T, Dh) with Dh = D // n_heads: x.view(B, T, H, Dh).transpose(1, 2)."
)
HINT_SPLIT_GENERIC = (
    "out[b, h, t] must be x[b, t, h*Dh:(h+1)*Dh]: x.view(B, T, H, Dh).transpose(1, 2)."
)


def _build_split_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, D, H = int(args["B"]), int(args["T"]), int(args["D"]), int(args["H"])
    if args["layout"] == "transposed":  # (B, D, T) in memory: the features are not contiguous
        x = normal(gen, (B, D, T), 1.0, dtype).transpose(1, 2)  # (B, T, D)
    else:
        x = normal(gen, (B, T, D), 1.0, dtype)
    return x, H


def _split_no_transpose(x: Tensor, H: int) -> Tensor:
    B, T, D = x.shape
    return x.reshape(B, H, T, D // H)


def _split_interleaved(x: Tensor, H: int) -> Tensor:
    B, T, D = x.shape
    return x.reshape(B, T, D // H, H).permute(0, 3, 1, 2)


def _split_transpose_first(x: Tensor, H: int) -> Tensor:
    B, T, D = x.shape
    return x.transpose(1, 2).reshape(B, H, T, D // H)


#: Known wrong ``split(x, H) -> (B, H, T, Dh)`` of the same shape as the right one.
_SPLIT_MISTAKES: tuple[tuple[str, Callable[[Tensor, int], Tensor]], ...] = (
    (HINT_SPLIT_NO_TRANSPOSE, _split_no_transpose),
    (HINT_SPLIT_INTERLEAVED, _split_interleaved),
    (HINT_SPLIT_TRANSPOSE_FIRST, _split_transpose_first),
)


def _split_to_plain(value: object) -> dict:
    return tensor_plain(value, "the heads")


def _split_variants(x: Tensor, H: int) -> list[Variant]:
    B, T, D = x.shape
    variants: list[Variant] = [(hint, lambda f=f: [f(x, H)], "") for hint, f in _SPLIT_MISTAKES]
    cut = x.reshape(B, T, H, D // H)  # (B, T, H, Dh)
    for perm in _PERMUTATIONS:
        if perm != (0, 2, 1, 3):
            hint = HINT_SPLIT_NOT_MOVED if perm == (0, 1, 2, 3) else HINT_SPLIT_WRONG_AXES
            variants.append((hint, lambda p=perm: [cut.permute(p)], ""))
    return variants


def _split_shape_hint(got: list, expected: list, k: int) -> str:
    B, H, T, Dh = expected[0]
    shape = got[0]
    if shape == (B, T, H, Dh):
        return HINT_SPLIT_NOT_MOVED
    if sorted(shape) == sorted((B, T, H, Dh)) and len(shape) == 4:
        return HINT_SPLIT_WRONG_AXES
    if shape in ((B * H, T, Dh), (B, H * T, Dh)):
        return HINT_SPLIT_FOLDED
    if shape == (B, T, H * Dh):
        return HINT_SPLIT_NOT_SPLIT
    return HINT_SPLIT_SHAPE


_judge_split = tensor_judge(_build_split_args, ("heads",), lambda inputs: _split_variants(*inputs),
                            _split_shape_hint, HINT_SPLIT_GENERIC)


@dataclass(frozen=True)
class Split(Args):
    """A case of task 5.1: x (B, T, D) cut into H heads; ``layout`` "transposed": x is a view of
    a (B, D, T) tensor, its features not contiguous in memory."""

    seed: int
    B: int
    T: int
    D: int
    H: int
    dtype: str = "float32"
    layout: str = "contiguous"


_SPLIT_CASES = (
    Split(501, B=2, T=5, D=6, H=2).case(
        "2 sequences of 5 vectors, D = 6 cut into 2 heads of width 3"),
    Split(502, B=2, T=2, D=4, H=2).case("every size 2 (B = T = H = Dh = 2, D = 4)"),
    Split(503, B=1, T=3, D=8, H=4).case(
        "one sequence of 3 vectors, D = 8 cut into 4 heads of width 2"),
)


def _heads(rng: random.Random, *, H: int | None = None, Dh: int | None = None,
           large: bool = False) -> tuple[int, int]:
    """(H, Dh) drawn from ``rng``, different from each other unless one is given."""
    if large:
        return rng.choice([4, 8]), rng.choice([4, 8])
    H_, Dh_ = draw_sizes(rng, 2, 2, 5)
    return (H_ if H is None else H), (Dh_ if Dh is None else Dh)


def _split(rng: random.Random, *, H: int | None = None, Dh: int | None = None,
           large: bool = False, dtype: str = "float32", layout: str = "contiguous") -> Split:
    H, Dh = _heads(rng, H=H, Dh=Dh, large=large)
    B, T = (rng.randint(2, 4), rng.randint(6, 10)) if large else draw_sizes(rng, 2, 2, 6)
    return Split(draw_seed(rng), B, T, H * Dh, H, dtype, layout)


_SPLIT_HIDDEN = (
    hidden("hidden: float64", lambda rng: _split(rng, dtype="float64")),
    hidden("hidden: one head (H = 1)", lambda rng: _split(rng, H=1)),
    hidden("hidden: heads of width 1 (H = D)", lambda rng: _split(rng, Dh=1)),
    hidden("hidden: an input that is not contiguous in memory",
           lambda rng: _split(rng, layout="transposed")),
    hidden("hidden: larger sizes", lambda rng: _split(rng, large=True)),
)

register(
    Task(
        id="5.1",
        assignment=ASSIGNMENT,
        func_name="split_heads",
        title="Split (B, T, D) into H heads of width Dh: (B, H, T, Dh)",
        cases=_SPLIT_CASES,
        hidden=_SPLIT_HIDDEN,
        build_args=_build_split_args,
        reference=split_heads,
        to_plain=_split_to_plain,
        judge=_judge_split,
        forbidden=_NO_MULTIHEAD_LIBRARIES,
        error_hints={
            "RuntimeError": "A reshape failed: view/reshape need sizes whose product is "
            "B * T * D, (B, T, n_heads, D // n_heads); and view cannot merge dims that are not "
            "contiguous in memory (reshape can).",
            "TypeError": "Sizes must be ints: Dh = D // n_heads (D / n_heads is a float, which "
            "view and reshape refuse).",
            "CheckError": "Return one tensor, (B, H, T, Dh).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 5.2 merge_heads
# --------------------------------------------------------------------------------------------

HINT_MERGE_NO_TRANSPOSE = (
    "Move the heads back next to the features before reshaping: swap dims 1 and 2 to get "
    "(B, T, H, Dh), and only then flatten the last two. Reshaping (B, H, T, Dh) directly "
    "mixes the heads with time: row t of the result holds pieces of other positions."
)
HINT_MERGE_INTERLEAVED = (
    "Concatenate the heads: out[b, t, h*Dh:(h+1)*Dh] = x[b, h, t], head 0's features first, "
    "then head 1's, ... Yours interleaves them (feature j of every head, then feature j + 1, "
    "...): go through (B, T, H, Dh), not (B, T, Dh, H)."
)
HINT_MERGE_WRONG_AXES = (
    "Swap the head and time axes back, dims 1 and 2, which gives (B, T, H, Dh), then flatten "
    "the last two. Your transposition moves other axes."
)
HINT_MERGE_NOT_FLAT = (
    "Flatten the heads into the features: (B, T, H, Dh) -> (B, T, H * Dh) with "
    ".reshape(B, T, H * Dh)."
)
HINT_MERGE_REDUCED = (
    "Concatenate the heads, do not sum or average them: the result is (B, T, H * Dh), each "
    "head keeping its own Dh features."
)
HINT_MERGE_STACKED = (
    "Concatenate along the features, the last dim: head 0's Dh features, then head 1's, ... "
    "for every position. Yours stacks the heads along time or the batch."
)
HINT_MERGE_SHAPE = "Return (B, T, H * Dh): one row per position, the heads side by side."
HINT_MERGE_GENERIC = (
    "out[b, t, h*Dh:(h+1)*Dh] must be x[b, h, t]: bring the head axis next to the features, "
    "then flatten the two."
)
HINT_MERGE_VIEW = (
    "A transposed tensor is a view with the strides of (B, H, T, Dh): its memory is no longer "
    "in (B, T, H, Dh) order, so .view(B, T, H * Dh) cannot merge its last two dims. Use "
    ".reshape(B, T, H * Dh) (it copies when it must) or .contiguous().view(B, T, H * Dh)."
)


def _build_merge_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, H, T, Dh = int(args["B"]), int(args["H"]), int(args["T"]), int(args["Dh"])
    if args["layout"] == "transposed":  # what split_heads returns: a view of (B, T, H, Dh)
        return (normal(gen, (B, T, H, Dh), 1.0, dtype).transpose(1, 2),)
    return (normal(gen, (B, H, T, Dh), 1.0, dtype),)


def _merge_no_transpose(x: Tensor) -> Tensor:
    B, H, T, Dh = x.shape
    return x.reshape(B, T, H * Dh)


def _merge_interleaved(x: Tensor) -> Tensor:
    B, H, T, Dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * Dh)


#: Known wrong ``merge(x) -> (B, T, D)``.
_MERGE_MISTAKES: tuple[tuple[str, Callable[[Tensor], Tensor]], ...] = (
    (HINT_MERGE_NO_TRANSPOSE, _merge_no_transpose),
    (HINT_MERGE_INTERLEAVED, _merge_interleaved),
)


def _merge_to_plain(value: object) -> dict:
    return tensor_plain(value, "the merged heads")


def _merge_variants(x: Tensor) -> list[Variant]:
    B, H, T, Dh = x.shape
    variants: list[Variant] = [(hint, lambda f=f: [f(x)], "") for hint, f in _MERGE_MISTAKES]
    for perm in _PERMUTATIONS:
        if perm not in ((0, 1, 2, 3), (0, 2, 1, 3), (0, 2, 3, 1)):
            variants.append((HINT_MERGE_WRONG_AXES,
                             lambda p=perm: [x.permute(p).reshape(B, T, H * Dh)], ""))
    return variants


def _merge_shape_hint(got: list, expected: list, k: int) -> str:
    B, T, D = expected[0]
    shape = got[0]
    if len(shape) == 4 and shape[:2] == (B, T) and math.prod(shape[2:]) == D:
        return HINT_MERGE_NOT_FLAT
    if len(shape) == 3 and shape[:2] == (B, T) and shape[2] < D and D % shape[2] == 0:
        return HINT_MERGE_REDUCED
    if len(shape) == 3 and math.prod(shape) == B * T * D and shape[2] < D:
        return HINT_MERGE_STACKED
    return HINT_MERGE_SHAPE


_judge_merge = tensor_judge(_build_merge_args, ("out",), lambda inputs: _merge_variants(*inputs),
                            _merge_shape_hint, HINT_MERGE_GENERIC)


@dataclass(frozen=True)
class Merge(Args):
    """A case of task 5.2: x (B, H, T, Dh); ``layout`` "transposed": x is a view of a
    (B, T, H, Dh) tensor, as split_heads returns it."""

    seed: int
    B: int
    H: int
    T: int
    Dh: int
    dtype: str = "float32"
    layout: str = "contiguous"


_MERGE_CASES = (
    Merge(521, B=2, H=2, T=5, Dh=3).case("2 sequences, 2 heads of 5 positions, Dh = 3"),
    Merge(522, B=2, H=2, T=2, Dh=2).case("every size 2 (B = H = T = Dh = 2)"),
    Merge(523, B=1, H=4, T=3, Dh=2).case("one sequence, 4 heads of 3 positions, Dh = 2"),
)


def _merge(rng: random.Random, *, H: int | None = None, Dh: int | None = None,
           large: bool = False, dtype: str = "float32", layout: str = "contiguous") -> Merge:
    H, Dh = _heads(rng, H=H, Dh=Dh, large=large)
    B, T = (rng.randint(2, 4), rng.randint(6, 10)) if large else draw_sizes(rng, 2, 2, 6)
    return Merge(draw_seed(rng), B, H, T, Dh, dtype, layout)


_MERGE_HIDDEN = (
    hidden("hidden: float64", lambda rng: _merge(rng, dtype="float64")),
    hidden("hidden: one head (H = 1)", lambda rng: _merge(rng, H=1)),
    hidden("hidden: heads of width 1 (Dh = 1)", lambda rng: _merge(rng, Dh=1)),
    hidden("hidden: the heads as split_heads returns them (a transposed view)",
           lambda rng: _merge(rng, layout="transposed")),
    hidden("hidden: larger sizes", lambda rng: _merge(rng, large=True)),
)

register(
    Task(
        id="5.2",
        assignment=ASSIGNMENT,
        func_name="merge_heads",
        title="Merge (B, H, T, Dh) back into (B, T, H * Dh), the inverse of split_heads",
        cases=_MERGE_CASES,
        hidden=_MERGE_HIDDEN,
        build_args=_build_merge_args,
        reference=merge_heads,
        to_plain=_merge_to_plain,
        judge=_judge_merge,
        forbidden=_NO_MULTIHEAD_LIBRARIES,
        error_hints={
            "RuntimeError": "A reshape failed. If it was view: " + HINT_MERGE_VIEW
            + " Otherwise check that the sizes multiply to B * H * T * Dh.",
            "TypeError": "Sizes must be ints: H * Dh is the width of the result.",
            "CheckError": "Return one tensor, (B, T, H * Dh).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 5.3 multi_head_attention
# --------------------------------------------------------------------------------------------

HINT_NO_OUT_PROJ = (
    "Apply the output projection W^O after merging the heads: out = merged @ "
    "out_proj_weight.T + out_proj_bias. Without it each head's output stays in its own block "
    "of features; W^O is what mixes the heads."
)
HINT_OUT_BIAS = "Add out_proj_bias after the output projection (when it is not None)."
HINT_IN_BIAS = (
    "Add the input projections' biases: in_proj_bias (3D,) holds b_q, b_k and b_v stacked like "
    "the weights, so q = query @ w_q.T + b_q, and likewise k and v (when in_proj_bias is not "
    "None)."
)
HINT_SCALE_D_HEAD = (
    "Scale the scores by sqrt(d_head), the width of one head (Dh = D // n_heads, "
    "q.shape[-1] after split_heads), not sqrt(d_model): each head's scores are dot products "
    "of Dh numbers."
)
HINT_CHUNK_ORDER = (
    "in_proj_weight (3D, D) stacks W^Q, W^K, W^V in this order: rows 0..D-1 make the queries, "
    "rows D..2D-1 the keys, the last D rows the values, and in_proj_bias alike. Your function "
    "takes them in another order."
)
HINT_KV_FROM_QUERY = (
    "Project the keys from key and the values from value: k = key @ w_k.T + b_k, v = value @ "
    "w_v.T + b_v. In cross-attention they are not the query (and S may differ from T)."
)
HINT_V_FROM_KEY = "Project the values from value, v = value @ w_v.T + b_v, not from key."
HINT_IN_NOT_TRANSPOSED = (
    "Multiply by the transposed weights, as nn.Linear does: q = query @ w_q.T + b_q, or "
    "F.linear(query, w_q, b_q); the weights have one row per output feature."
)
HINT_OUT_NOT_TRANSPOSED = (
    "out_proj_weight is stored like nn.Linear's weight, one row per output feature: out = "
    "merged @ out_proj_weight.T + out_proj_bias (or F.linear(merged, out_proj_weight, "
    "out_proj_bias))."
)
HINT_MASK_TORCH_CONVENTION = (
    "The mask is True where a query MAY attend (this course's convention, and "
    "F.scaled_dot_product_attention's). nn.MultiheadAttention's attn_mask and "
    "key_padding_mask mean the opposite, True = NOT allowed: fill the scores where the mask is "
    "False, masked_fill(~mask, float('-inf'))."
)
HINT_MASK_NOT_PER_HEAD = (
    "A (B, T, S) mask holds one mask per sequence: unsqueeze it to (B, 1, T, S) so that it "
    "broadcasts over the heads (mask.unsqueeze(1)). Used as it is, broadcasting lines its B up "
    "with the H of the (B, H, T, S) scores, and sequence b's mask lands on head b."
)
HINT_MHA_SPLIT_WRONG = "The projections are right but the heads are split wrong:"
HINT_MHA_MERGE_WRONG = "The heads are right but they are merged wrong:"
HINT_MHA_ATTENTION_WRONG = (
    "The projections and the heads are right but the attention in each head is not:"
)
HINT_WEIGHTS_AVERAGED = (
    "Return every head's weights, (B, H, T, S): one (T, S) map per head. Averaging over the "
    "heads (what nn.MultiheadAttention returns unless average_attn_weights=False) hides what "
    "each head does."
)
HINT_HEADS_NOT_MERGED = (
    "Merge the heads before the output projection: (B, H, T, Dh) -> (B, T, D) with your "
    "merge_heads."
)
HINT_WEIGHTS_SELF_ONLY = (
    "The weights have one column per KEY, (B, H, T, S): project the keys and values from key "
    "and value, which may be longer or shorter than query."
)
HINT_MHA_SHAPE = "Return (out, weights): out (B, T, D), weights (B, H, T, S)."
HINT_MHA_GENERIC = (
    "Cut in_proj_weight (and the bias) into W^Q, W^K, W^V; project the queries from query and "
    "the keys and values from key and value, and split each into heads; a (B, T, S) mask gets "
    "a head axis; attend in every head with the scores divided by sqrt(Dh); merge the heads "
    "and apply the output projection."
)

_MHA_NAMES = ("out", "weights")


def _build_mha_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, S, D, H = (int(args[name]) for name in ("B", "T", "S", "D", "H"))
    query = normal(gen, (B, T, D), 1.0, dtype)
    if args["cross"]:
        key, value = normal(gen, (B, S, D), 1.0, dtype), normal(gen, (B, S, D), 1.0, dtype)
    else:  # self-attention: the same tensor three times, as nn.MultiheadAttention is called
        key = value = query
    # Scaled so that the projections have unit variance; biases large enough to matter.
    w_in = normal(gen, (3 * D, D), 1 / math.sqrt(D), dtype)
    w_out = normal(gen, (D, D), 1 / math.sqrt(D), dtype)
    b_in, b_out = normal(gen, (3 * D,), 0.5, dtype), normal(gen, (D,), 0.5, dtype)
    if not args["bias"]:
        b_in = b_out = None
    inputs = (query, key, value, w_in, b_in, w_out, b_out, H)
    if args["mask"] is None:
        return inputs
    return (*inputs, masks.as_tensor(args["mask"]))


def multi_head_attention(query: Tensor, key: Tensor, value: Tensor, in_proj_weight: Tensor,
                         in_proj_bias: Tensor | None, out_proj_weight: Tensor,
                         out_proj_bias: Tensor | None, n_heads: int,
                         mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Task 5.3's reference: :class:`MultiHeadAttention` holding the given weights.

    Args:
        query: (B, T, D); key: (B, S, D); value: (B, S, D).
        in_proj_weight: (3D, D), W^Q; W^K; W^V. in_proj_bias: (3D,) or None.
        out_proj_weight: (D, D), W^O. out_proj_bias: (D,) or None.
        n_heads: H.
        mask: boolean, True = may attend, broadcastable to (B, H, T, S), or (B, T, S).

    Returns:
        ``(out (B, T, D), weights (B, H, T, S))``.
    """
    D = query.shape[-1]
    bias = in_proj_bias is not None
    state = {"in_proj_weight": in_proj_weight, "out_proj.weight": out_proj_weight}
    if bias:
        state |= {"in_proj_bias": in_proj_bias, "out_proj.bias": out_proj_bias}
    layer = with_weights(lambda: MultiHeadAttention(D, n_heads, bias=bias), query.dtype, state)
    with torch.no_grad():
        return layer(query, key, value, mask)


def _mha_to_plain(value: object) -> list[dict]:
    return parts_plain(value, _MHA_NAMES)


def _mha(inputs: tuple, *, order: tuple[int, int, int] = (0, 1, 2),
         split: Callable[[Tensor, int], Tensor] = split_heads,
         merge: Callable[[Tensor], Tensor] = merge_heads,
         attend: bank.Attention = scaled_dot_product_attention, project_out: bool = True,
         in_bias: bool = True, out_bias: bool = True, in_transposed: bool = True,
         out_transposed: bool = True, keys_from: str = "key", values_from: str = "value",
         per_head_mask: bool = True, invert_mask: bool = False) -> Callable[[], tuple]:
    """A multi-head forward with one knob turned to a known mistake (defaults: right)."""
    query, key, value, w_in, b_in, w_out, b_out, H = inputs[:8]
    mask = inputs[8] if len(inputs) > 8 else None
    sources = {"query": query, "key": key, "value": value}

    def forward() -> tuple[Tensor, Tensor]:
        weights = [w_in.chunk(3)[i] for i in order]
        biases = [b_in.chunk(3)[i] for i in order] if b_in is not None and in_bias else [0] * 3

        def project(x: Tensor, w: Tensor, b: Tensor | int) -> Tensor:
            return x @ (w.T if in_transposed else w) + b

        q = split(project(query, weights[0], biases[0]), H)  # (B, H, T, Dh)
        k = split(project(sources[keys_from], weights[1], biases[1]), H)  # (B, H, S, Dh)
        v = split(project(sources[values_from], weights[2], biases[2]), H)  # (B, H, S, Dh)
        m = mask
        if m is not None:
            if invert_mask:
                m = ~m
            if per_head_mask and m.dim() == 3:
                m = m.unsqueeze(1)  # (B, 1, T, S)
        heads, attention = attend(q, k, v, m)  # (B, H, T, Dh), (B, H, T, S)
        merged = merge(heads)  # (B, T, D)
        if not project_out:
            return merged, attention
        out = merged @ (w_out.T if out_transposed else w_out)
        if b_out is not None and out_bias:
            out = out + b_out
        return out, attention

    return forward


def _mha_variants(inputs: tuple) -> list[Variant]:
    D = inputs[0].shape[-1]

    def needs_mask() -> None:
        if len(inputs) < 9:
            raise ValueError("this mistake needs a mask")

    def with_mask(**knobs) -> Callable[[], tuple]:
        forward = _mha(inputs, **knobs)

        def run() -> tuple:
            needs_mask()
            return forward()

        return run

    orders = [p for p in itertools.permutations(range(3)) if p != (0, 1, 2)]
    variants: list[Variant] = [
        (HINT_NO_OUT_PROJ, _mha(inputs, project_out=False), ""),
        (HINT_SCALE_D_HEAD,
         _mha(inputs, attend=lambda q, k, v, m: bank.attend_by_width(q, k, v, m, D)), ""),
        *[(HINT_CHUNK_ORDER, _mha(inputs, order=order), "") for order in orders],
        (HINT_MASK_TORCH_CONVENTION, with_mask(invert_mask=True), ""),
        (HINT_MASK_NOT_PER_HEAD, with_mask(per_head_mask=False), ""),
        (HINT_OUT_BIAS, _mha(inputs, out_bias=False), ""),
        (HINT_IN_BIAS, _mha(inputs, in_bias=False), ""),
        (HINT_KV_FROM_QUERY, _mha(inputs, keys_from="query", values_from="query"), ""),
        (HINT_V_FROM_KEY, _mha(inputs, values_from="key"), ""),
        (HINT_IN_NOT_TRANSPOSED, _mha(inputs, in_transposed=False), ""),
        (HINT_OUT_NOT_TRANSPOSED, _mha(inputs, out_transposed=False), ""),
    ]
    for hint, split in _SPLIT_MISTAKES:
        variants.append((f"{HINT_MHA_SPLIT_WRONG} {hint}", _mha(inputs, split=split), ""))
    for hint, merge in _MERGE_MISTAKES:
        variants.append((f"{HINT_MHA_MERGE_WRONG} {hint}", _mha(inputs, merge=merge), ""))
    # The same mistake in both directions: a consistent but wrong reshape.
    for (hint, split), (_, merge) in zip(_SPLIT_MISTAKES, _MERGE_MISTAKES, strict=False):
        variants.append((f"{HINT_MHA_SPLIT_WRONG} {hint}",
                         _mha(inputs, split=split, merge=merge), ""))
    for hint, attend in bank.attention_mistakes():
        variants.append((f"{HINT_MHA_ATTENTION_WRONG} {hint}", _mha(inputs, attend=attend), ""))
    return variants


def _mha_shape_hint(got: list, expected: list, k: int) -> str:
    out_shape, weights_shape = expected
    B, H, T, S = weights_shape
    D = out_shape[-1]
    if got[0] == weights_shape and got[1] == out_shape:
        return HINT_PAIR_ORDER
    if k == 0:
        if got[0] == (B, H, T, D // H):
            return HINT_HEADS_NOT_MERGED
        return HINT_MHA_SHAPE
    if got[1] in ((B, T, S), (B, 1, T, S)):
        return HINT_WEIGHTS_AVERAGED
    if got[1] == (B, H, T, T) and T != S:
        return HINT_WEIGHTS_SELF_ONLY
    return HINT_MHA_SHAPE


_judge_mha = tensor_judge(_build_mha_args, _MHA_NAMES, _mha_variants, _mha_shape_hint,
                          HINT_MHA_GENERIC)


@dataclass(frozen=True)
class MultiHead(Args):
    """A case of task 5.3: query (B, T, D), key and value (B, S, D) (``cross``) or the query
    itself (self-attention, S = T), H heads, biases or None, a mask or None."""

    seed: int
    B: int
    T: int
    S: int
    D: int
    H: int
    cross: bool
    mask: list | None = None
    bias: bool = True
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if not self.cross and self.S != self.T:
            raise ValueError("self-attention has S = T")


_MHA_CASES = (
    MultiHead(541, B=2, T=5, S=4, D=8, H=2, cross=True).case(
        "cross-attention, no mask; 5 queries and 4 keys, D = 8, H = 2 (Dh = 4)"),
    MultiHead(542, B=2, T=3, S=6, D=12, H=3, cross=True,
              mask=masks.padding([6, 4], 6, ones=2)).case(
        "cross-attention, 3 queries and 6 keys, D = 12, H = 3, a (B, 1, 1, S) key-padding mask"),
    MultiHead(543, B=2, T=4, S=4, D=8, H=4, cross=False, mask=masks.causal(4), bias=False).case(
        "self-attention with a causal (T, T) mask, no biases; D = 8, H = 4 (Dh = 2)"),
    MultiHead(544, B=2, T=4, S=5, D=6, H=2, cross=True,
              mask=[masks.rows("11000", "11100", "11110", "11111"),
                    masks.rows("10001", "01001", "00101", "00011")]).case(
        "a (B, T, S) mask, one per sequence, shared by the heads; B = H = 2"),
    MultiHead(545, B=3, T=4, S=3, D=6, H=3, cross=True,
              mask=masks.rows("110", "011", "101", "111")).case(
        "cross-attention with a (T, S) mask; D = 6, H = 3 (Dh = 2)"),
)


def _multihead(rng: random.Random, *, cross: bool, mask: str | None = None, B: int | None = None,
               T: int | None = None, H: int | None = None, Dh: int | None = None,
               large: bool = False, bias: bool = True, dtype: str = "float32") -> MultiHead:
    """A case of task 5.3 drawn from ``rng``. ``mask``: None, "causal", "rows" (T, S),
    "padding" (B, 1, 1, S), "sequences" (B, T, S) with B != H, "heads" (B, H, T, S)."""
    H, Dh = _heads(rng, H=H, Dh=Dh, large=large)
    if B is None:
        B = rng.randint(1, 2) if large else rng.choice([b for b in (2, 3) if b != H])
    if T is None:
        T = rng.randint(8, 12) if large else rng.randint(3, 6)
    S = (rng.randint(8, 12) if large else rng.choice([n for n in range(2, 7) if n != T])
         ) if cross else T
    plain = {
        None: lambda: None,
        "causal": lambda: masks.causal(T),
        "rows": lambda: masks.random_rows(rng, T, S),
        "padding": lambda: masks.padding(masks.random_lengths(rng, B, S), S, ones=2),
        "sequences": lambda: [masks.random_rows(rng, T, S) for _ in range(B)],
        "heads": lambda: [[masks.random_rows(rng, T, S) for _ in range(H)] for _ in range(B)],
    }[mask]()
    return MultiHead(draw_seed(rng), B, T, S, H * Dh, H, cross, plain, bias, dtype)


_MHA_HIDDEN = (
    hidden("hidden: float64, causal self-attention",
           lambda rng: _multihead(rng, cross=False, mask="causal", dtype="float64")),
    hidden("hidden: one head (H = 1)", lambda rng: _multihead(rng, cross=True, mask="rows", H=1)),
    hidden("hidden: heads of width 1 (H = D)", lambda rng: _multihead(rng, cross=False, Dh=1)),
    hidden("hidden: cross-attention, float64, no biases, a (T, S) mask",
           lambda rng: _multihead(rng, cross=True, mask="rows", bias=False, dtype="float64")),
    hidden("hidden: one query, a key-padding mask",
           lambda rng: _multihead(rng, cross=True, mask="padding", T=1)),
    hidden("hidden: a (B, T, S) mask with B != H",
           lambda rng: _multihead(rng, cross=True, mask="sequences")),
    hidden("hidden: larger sizes, causal",
           lambda rng: _multihead(rng, cross=False, mask="causal", large=True)),
    hidden("hidden: a batch of one, no mask", lambda rng: _multihead(rng, cross=True, B=1)),
    hidden("hidden: a (B, H, T, S) mask, one per head",
           lambda rng: _multihead(rng, cross=True, mask="heads")),
)

register(
    Task(
        id="5.3",
        assignment=ASSIGNMENT,
        func_name="multi_head_attention",
        title="The forward pass of multi-head attention with nn.MultiheadAttention's parameters",
        cases=_MHA_CASES,
        hidden=_MHA_HIDDEN,
        build_args=_build_mha_args,
        reference=multi_head_attention,
        to_plain=_mha_to_plain,
        judge=_judge_mha,
        forbidden=_NO_MULTIHEAD_LIBRARIES,
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "in_proj_weight is (3D, D) and chunk(3) gives three (D, D) matrices; q = query @ "
            "w_q.T is (B, T, D), split into (B, H, T, Dh); k and v come from key and value, "
            "(B, S, D) -> (B, H, S, Dh); a (B, T, S) mask needs .unsqueeze(1) to broadcast to "
            "the scores (B, H, T, S); and .view after a transpose fails: use .reshape.",
            "ValueError": "A function refused its arguments. Chapter 4's "
            "scaled_dot_product_attention raises this when the mask does not broadcast to the "
            "scores (B, H, T, S): unsqueeze a (B, T, S) mask at dim 1.",
            "AttributeError": "in_proj_bias and out_proj_bias may be None (projections without "
            "bias): test whether they are None before chunking or adding them.",
            "TypeError": "The function is called without a mask when there is none: give it "
            "the default mask=None. The biases may be None too: F.linear(x, w, None) accepts "
            "that, x @ w.T + None does not.",
            "NameError": "A name is not defined: call your split_heads (task 5.1) and "
            "merge_heads (task 5.2), and run their cells first.",
            "CheckError": "Return a pair (out, weights) of tensors.",
        },
    )
)
