"""Chapter 7 tasks (``07_transformer``): the position-wise feed-forward network, the wiring of
a post-norm and a pre-norm encoder block, a pre-norm decoder block with cross-attention, and
the sampling loop of a language model.

The conventions are those of :mod:`coursepkg.transformer` and :mod:`coursepkg.lm`:

* the feed-forward network is ``act(x @ w1.T + b1) @ w2.T + b2`` with the weights stored like
  ``nn.Linear``'s, ``w1`` (F, D) and ``w2`` (D, F); ``activation`` is ``"relu"`` or
  ``"gelu"`` (the exact GELU);
* a post-norm block (``norm_first=False``, the original paper) computes
  ``x = norm1(x + SA(x)); x = norm2(x + FF(x))``, a pre-norm block (``norm_first=True``,
  GPT-2) ``x = x + SA(norm1(x)); x = x + FF(norm2(x))``;
* the decoder block is pre-norm: causal self-attention, then cross-attention whose queries
  come from the decoder and whose keys and values come from the encoder's output ``memory``,
  then the feed-forward network, each as ``x = x + f(norm(x))``;
* masks are boolean, **True = may attend**; the student builds the causal mask;
* sampling crops the context to the last ``block_size`` tokens, takes the last position's
  logits, divides them by the temperature (0 means greedy: the argmax), keeps the ``top_k``
  largest (the others -inf), and draws with ``torch.multinomial(probs, 1,
  generator=generator)`` over the whole vocabulary.

The student's functions get the layer's parts as modules, as a ``TransformerEncoderLayer`` holds
them: ``self_attn`` and ``cross_attn`` are chapter 5's ``coursepkg.multihead.MultiHeadAttention``
(called as ``attn(query, key, value, mask)``, returning ``(out, weights)``), ``ff`` is an
``nn.Sequential(Linear, ReLU or GELU, Linear)`` and the norms are ``nn.LayerNorm``. Every
parameter is drawn from the case's seeded generator (LayerNorm weights around 1 with biases,
so that swapping two norms shows). The references are the package's own tested code: a
``FeedForward``, ``TransformerEncoderLayer`` or ``TransformerDecoderLayer`` holding the case's
weights, and ``coursepkg.lm.generate``. The sampling cases use a small ``TransformerLM`` (its
attention fused: five times faster, and the same model for the student and the reference):
with learned positions it refuses more than ``block_size`` tokens (an uncropped context fails
loudly), with sinusoidal or rotary positions it reads any length (an uncropped context gives
other tokens, which are named).

The cases are made so that the usual mistakes change the numbers: S differs from T in most
decoder cases (and equals it in one public case, so that keys, values or queries taken from the
wrong side run and are named); the public sampling cases have temperatures other than 1,
prompts that grow past ``block_size``, and top-k. Cases hold plain numbers and lists: a checks
module does no tensor work when it is imported (the grader forks its workers from a process
that imported it). The hidden cases' generators draw the seeds, the sizes, the masks and the
sampling settings from the grader's random generator. The known mistakes of the decoder's causal
mask are the course's bank of them (:mod:`coursepkg.checks.attention_mistakes`).

Shape letters: B batch, T (target) positions, S source positions, D model width, H heads,
F feed-forward width, V vocabulary.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursepkg.checks import attention_mistakes as bank
from coursepkg.checks import masks
from coursepkg.checks.attention_mistakes import (
    HINT_CAUSAL_DIAGONAL,
    HINT_CAUSAL_INVERTED,
    HINT_CAUSAL_UPPER,
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
from coursepkg.checks.forbidden import FUSED_LAYER_KERNELS
from coursepkg.checks.tensors import (
    HINT_DTYPE,  # noqa: F401 - a hint of this chapter's judges too, named by the tests
    HINT_NOT_FINITE,  # noqa: F401 - idem
    SKIPPED,
    Variant,
    generator,
    normal,
    tensor_judge,
    tensor_plain,
    with_weights,
)
from coursepkg.lm import generate
from coursepkg.multihead import MultiHeadAttention
from coursepkg.transformer import (
    FeedForward,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
    TransformerLM,
)

__all__ = ["ASSIGNMENT", "decoder_block", "encoder_block", "feed_forward", "sample"]

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
        title="An encoder block: self-attention and a feed-forward network, each with a "
        "residual and a layer norm, post-norm or pre-norm",
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
    )
)


# --------------------------------------------------------------------------------------------
# Task 7.3 decoder_block
# --------------------------------------------------------------------------------------------

HINT_NO_CAUSAL = (
    "Mask the future in the decoder's self-attention: position t may attend to positions "
    "0..t only. Build the causal mask, a (T, T) boolean matrix True on and below the diagonal "
    "(True = may attend), and pass it to self_attn. Without it every position reads the "
    "tokens it is trained to predict."
)
HINT_KV_FROM_DECODER = (
    "In cross-attention the queries come from the decoder and BOTH the keys and the values "
    "from the encoder's output: cross_attn(h, memory, memory, memory_mask). Yours takes the "
    "keys or the values from the decoder, so it attends to the target instead of the source."
)
HINT_QUERIES_FROM_MEMORY = (
    "The queries of cross-attention come from the decoder, one per target position, and the "
    "keys and values from memory: cross_attn(h, memory, memory, memory_mask). Yours takes the "
    "queries from memory."
)
HINT_MEMORY_NORMALISED = (
    "norm2 normalises the decoder's stream only: cross_attn(norm2(x), memory, memory, "
    "memory_mask). The memory is used as the encoder returns it (a pre-norm encoder ends with "
    "its own final norm)."
)
HINT_MEMORY_MASK_IGNORED = (
    "Pass memory_mask to the cross-attention, cross_attn(h, memory, memory, memory_mask): it "
    "hides the source's padding, and without it the decoder attends to padding tokens."
)
HINT_CAUSAL_ON_CROSS = (
    "The causal mask belongs to the self-attention only: every target position may read the "
    "WHOLE source, so the cross-attention gets memory_mask alone."
)
HINT_MASKS_SWAPPED = (
    "The causal mask goes to the self-attention (T, T) and memory_mask to the cross-attention "
    "(its keys are the S source positions): yours swaps them."
)
HINT_CROSS_FIRST = (
    "Self-attention comes first: the target positions first read each other (causally), then "
    "the source through cross-attention, then the feed-forward network."
)
HINT_ATTN_MODULES_SWAPPED = (
    "self_attn is the decoder's self-attention and cross_attn its attention to memory: yours "
    "uses each module in the other's place."
)
HINT_DEC_NO_RESIDUAL_SELF = (
    "Add the residual around the self-attention: its output is added to x, the stream before "
    "norm1, instead of taking its place."
)
HINT_DEC_NO_RESIDUAL_CROSS = (
    "Add the residual around the cross-attention: its output is added to x, the stream before "
    "norm2. Without it the target's own information is lost in this sublayer and only what "
    "was read from the source goes on."
)
HINT_DEC_NO_RESIDUAL_FF = (
    "Add the residual around the feed-forward network: the block returns x plus the "
    "network's output, not the output alone."
)
HINT_DEC_NO_RESIDUAL = (
    "Add the residuals: each of the three sublayers adds its output to its input, x = x + "
    "f(norm(x))."
)
HINT_DEC_POST_NORM = (
    "This decoder block is pre-norm: normalise each sublayer's input and add its output to the "
    "un-normalised x, x = x + f(norm(x)). Yours normalises after the residual sum (post-norm)."
)
HINT_DEC_NO_NORM = (
    "Normalise each sublayer's input with its own norm: norm1 before the self-attention, norm2 "
    "before the cross-attention, norm3 before the feed-forward network. Yours leaves one out."
)
HINT_DEC_NORMS_ORDER = (
    "norm1 goes with the self-attention, norm2 with the cross-attention and norm3 with the "
    "feed-forward network: yours uses them in another order."
)
HINT_DEC_SHAPE = (
    "Return (B, T, D), the shape of the decoder's input x: one vector per target position (the "
    "memory has S positions, the output has T)."
)
HINT_DECODER_GENERIC = (
    "Three pre-norm sublayers, each adding its output to the un-normalised stream x: causal "
    "self-attention on norm1(x), with the causal mask True on and below the diagonal; "
    "cross-attention with its queries from norm2(x) and its keys and values from memory, with "
    "memory_mask; then the feed-forward network on norm3(x)."
)


def _build_decoder_args(args: dict) -> tuple:
    gen, dtype = generator(args)
    B, T, S, D, H, d_ff = (int(args[name]) for name in ("B", "T", "S", "D", "H", "F"))
    x = normal(gen, (B, T, D), 1.0, dtype)
    memory = normal(gen, (B, S, D), 1.0, dtype)
    (self_attn, cross_attn), ff, norms = _sublayers(gen, dtype, D, H, d_ff, args["activation"],
                                                    2, 3)
    return (x, memory, self_attn, cross_attn, ff, *norms, masks.as_tensor(args["memory_mask"]))


def decoder_block(x: Tensor, memory: Tensor, self_attn: MultiHeadAttention,
                  cross_attn: MultiHeadAttention, ff: nn.Sequential, norm1: nn.LayerNorm,
                  norm2: nn.LayerNorm, norm3: nn.LayerNorm,
                  memory_mask: Tensor | None = None) -> Tensor:
    """Task 7.3's reference: a pre-norm :class:`TransformerDecoderLayer` holding the given parts,
    with the causal mask of T positions.

    Args:
        x: (B, T, D) the decoder's input.
        memory: (B, S, D) the encoder's output.
        self_attn, cross_attn: MultiHeadAttention(D, H).
        ff: ``nn.Sequential(Linear(D, F), ReLU or GELU, Linear(F, D))``.
        norm1, norm2, norm3: ``nn.LayerNorm(D)`` before the self-attention, the
            cross-attention and the feed-forward network.
        memory_mask: boolean, True = may attend, broadcastable to (B, H, T, S), or None.

    Returns:
        (B, T, D).
    """
    B, T, D = x.shape
    parts = {"self_attn": self_attn, "cross_attn": cross_attn, "norm1": norm1, "norm2": norm2,
             "norm3": norm3}
    layer = with_weights(
        lambda: TransformerDecoderLayer(D, self_attn.n_heads, ff[0].out_features,
                                        norm_first=True, activation=_ff_activation(ff),
                                        layer_norm_eps=norm1.eps),
        x.dtype, _layer_state(parts, ff))
    causal = _causal_mask(T)  # (T, T)
    with torch.no_grad():
        return layer(x, memory, causal, memory_mask)


def _causal_mask(T: int) -> Tensor:
    """The causal mask (T, T), True = may attend: on and below the diagonal."""
    return torch.ones(T, T, dtype=torch.bool).tril()


def _no_mask(T: int) -> None:
    return None


def _combine(first: Tensor | None, second: Tensor | None) -> Tensor | None:
    if first is None or second is None:
        return first if second is None else second
    return first & second


def _decoder(inputs: tuple, *, causal: Callable[[int], Tensor | None] = _causal_mask,
             sources: str = "dmm",
             normalise_memory: bool = False, use_memory_mask: bool = True,
             causal_on_cross: bool = False, swap_masks: bool = False,
             cross_first: bool = False, swap_modules: bool = False,
             residuals: tuple[bool, bool, bool] = (True, True, True),
             places: tuple[str, str, str] = ("pre", "pre", "pre"),
             norms: tuple[int, int, int] = (0, 1, 2)) -> Callable[[], list[Tensor]]:
    """The pre-norm decoder block with knobs turned to known mistakes (defaults: right).

    ``sources`` names where the cross-attention's query, key and value come from: ``d`` the
    decoder's normalised stream, ``m`` the memory ("dmm" is right).
    """
    x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3, memory_mask = inputs
    T = x.shape[1]
    layer_norms = (norm1, norm2, norm3)
    if swap_modules:
        self_attn, cross_attn = cross_attn, self_attn

    def run() -> list[Tensor]:  # everything here: a mistake whose shapes do not fit raises
        causal_mask = causal(T)
        self_mask, cross_mask = causal_mask, memory_mask if use_memory_mask else None
        if causal_on_cross:
            cross_mask = _combine(cross_mask, causal_mask)
        if swap_masks:
            self_mask, cross_mask = cross_mask, self_mask

        def attend_self(h: Tensor) -> Tensor:
            return self_attn(h, h, h, self_mask)[0]

        def attend_cross(h: Tensor) -> Tensor:
            mem = layer_norms[norms[1]](memory) if normalise_memory else memory
            q, k, v = (h if side == "d" else mem for side in sources)
            return cross_attn(q, k, v, cross_mask)[0]

        steps = [(attend_self, 0), (attend_cross, 1), (ff, 2)]
        if cross_first:
            steps[0], steps[1] = steps[1], steps[0]
        h = x
        with torch.no_grad():
            for f, i in steps:
                h = _sublayer(h, f, layer_norms[norms[i]], place=places[i],
                              residual="x" if residuals[i] else "none")
        return [h]

    return run


def _decoder_variants(inputs: tuple) -> list[Variant]:
    memory_mask = inputs[-1]

    def variant(hint: str, **knobs) -> Variant:
        return hint, _decoder(inputs, **knobs), ""

    # the masks a student may build: none, the diagonal hidden, the upper triangle, torch's
    variants = [
        variant(HINT_NO_CAUSAL, causal=_no_mask),
        *[variant(hint, causal=wrong) for hint, wrong in bank.CAUSAL_MISTAKES[:3]],
        variant(HINT_KV_FROM_DECODER, sources="ddd"),
        variant(HINT_KV_FROM_DECODER, sources="ddm"),
        variant(HINT_KV_FROM_DECODER, sources="dmd"),
        variant(HINT_QUERIES_FROM_MEMORY, sources="mdd"),
        variant(HINT_QUERIES_FROM_MEMORY, sources="mmm"),
        variant(HINT_QUERIES_FROM_MEMORY, sources="mdm"),
        variant(HINT_MEMORY_NORMALISED, normalise_memory=True),
        variant(HINT_CAUSAL_ON_CROSS, causal_on_cross=True),
        variant(HINT_MASKS_SWAPPED, swap_masks=True),
        variant(HINT_CROSS_FIRST, cross_first=True),
        variant(HINT_ATTN_MODULES_SWAPPED, swap_modules=True),
        variant(HINT_DEC_NO_RESIDUAL_SELF, residuals=(False, True, True)),
        variant(HINT_DEC_NO_RESIDUAL_CROSS, residuals=(True, False, True)),
        variant(HINT_DEC_NO_RESIDUAL_FF, residuals=(True, True, False)),
        variant(HINT_DEC_NO_RESIDUAL, residuals=(False, False, False)),
        variant(HINT_DEC_POST_NORM, places=("post", "post", "post")),
        variant(HINT_DEC_NO_NORM, places=("none", "none", "none")),
        *[variant(HINT_DEC_NO_NORM, places=tuple("none" if j == i else "pre"
                                                 for j in range(3))) for i in range(3)],
        *[variant(HINT_DEC_NORMS_ORDER, norms=order)
          for order in itertools.permutations(range(3)) if order != (0, 1, 2)],
        # two mistakes at once: keys and values from the decoder, and no causal mask
        variant(HINT_KV_FROM_DECODER, sources="ddd", causal=_no_mask),
    ]
    if memory_mask is not None:
        variants.insert(4, variant(HINT_MEMORY_MASK_IGNORED, use_memory_mask=False))
    return variants


#: Every hint the judge of task 7.3 may give for a known wrong block.
DECODER_HINTS = (
    HINT_NO_CAUSAL, HINT_CAUSAL_DIAGONAL, HINT_CAUSAL_UPPER, HINT_CAUSAL_INVERTED,
    HINT_MEMORY_MASK_IGNORED, HINT_KV_FROM_DECODER, HINT_QUERIES_FROM_MEMORY,
    HINT_MEMORY_NORMALISED, HINT_CAUSAL_ON_CROSS, HINT_MASKS_SWAPPED, HINT_CROSS_FIRST,
    HINT_ATTN_MODULES_SWAPPED, HINT_DEC_NO_RESIDUAL_SELF, HINT_DEC_NO_RESIDUAL_CROSS,
    HINT_DEC_NO_RESIDUAL_FF, HINT_DEC_NO_RESIDUAL, HINT_DEC_POST_NORM, HINT_DEC_NO_NORM,
    HINT_DEC_NORMS_ORDER,
)


def _decoder_shape_hint_for(S: int) -> Callable[[list, list, int], str]:
    def hint(got: list, expected: list, k: int) -> str:
        B, T, D = expected[0]
        shape = got[0]
        if shape == (B, S, D):
            return HINT_QUERIES_FROM_MEMORY
        if len(shape) == 4 and shape[0] == B and shape[2] == T:
            return HINT_BLOCK_WEIGHTS
        return HINT_DEC_SHAPE

    return hint


def _judge_decoder(got: object, expected: object, args: dict) -> Verdict:
    judge = tensor_judge(_build_decoder_args, ("out",), _decoder_variants,
                         _decoder_shape_hint_for(args["S"]), HINT_DECODER_GENERIC)
    return judge(got, expected, args)


@dataclass(frozen=True)
class Decoder(Args):
    """A case of task 7.3: x (B, T, D), memory (B, S, D), H heads, F hidden units, a memory mask
    or None."""

    seed: int
    B: int
    T: int
    S: int
    D: int
    H: int
    F: int
    activation: str = "relu"
    memory_mask: list | None = None
    dtype: str = "float32"


_DECODER_CASES = (
    Decoder(741, B=2, T=5, S=4, D=8, H=2, F=16).case(
        "5 target and 4 source positions, D = 8, H = 2, no memory mask"),
    Decoder(742, B=2, T=4, S=6, D=8, H=2, F=16, activation="gelu",
            memory_mask=masks.padding([6, 3], 6, ones=2)).case(
        "4 target and 6 source positions, a source padding mask (B, 1, 1, S)"),
    Decoder(743, B=2, T=4, S=4, D=12, H=3, F=24, memory_mask=masks.padding([4, 2], 4, ones=2)
            ).case("as many target as source positions (T = S = 4), a padding mask"),
    Decoder(744, B=3, T=3, S=5, D=8, H=4, F=8, activation="gelu",
            memory_mask=masks.padding([5, 2, 4], 5, ones=2)).case(
        "3 sequences, 3 target and 5 source positions, H = 4"),
)


def _decoder_case(rng: random.Random, *, T: int | None = None, S: int | None = None,
                  same: bool = False, H: int | None = None, padded: bool = True,
                  large: bool = False, dtype: str = "float32") -> Decoder:
    """A case of task 7.3 drawn from ``rng``: T and S different unless ``same``."""
    B = 1 if large else rng.randint(2, 3)
    low, high = (8, 12) if large else (3, 7)
    queries, keys = draw_sizes(rng, 2, low, high)
    T = queries if T is None else T
    S = (T if same else keys) if S is None else S
    mask = masks.padding(masks.random_lengths(rng, B, S), S, ones=2) if padded else None
    return Decoder(**_block_sizes(rng, H=H, large=large), B=B, T=T, S=S,
                   activation=rng.choice(["relu", "gelu"]), memory_mask=mask, dtype=dtype)


_DECODER_HIDDEN = (
    hidden("hidden: float64", lambda rng: _decoder_case(rng, dtype="float64")),
    hidden("hidden: one target position", lambda rng: _decoder_case(rng, T=1)),
    hidden("hidden: one source position", lambda rng: _decoder_case(rng, S=1, padded=False)),
    hidden("hidden: larger sizes", lambda rng: _decoder_case(rng, large=True)),
    hidden("hidden: one head, T = S", lambda rng: _decoder_case(rng, same=True, H=1)),
    hidden("hidden: float64, T = S, no memory mask",
           lambda rng: _decoder_case(rng, same=True, padded=False, dtype="float64")),
)

register(
    Task(
        id="7.3",
        assignment=ASSIGNMENT,
        func_name="decoder_block",
        title="A pre-norm decoder block: causal self-attention, cross-attention to the "
        "encoder's output, a feed-forward network",
        cases=_DECODER_CASES,
        hidden=_DECODER_HIDDEN,
        build_args=_build_decoder_args,
        reference=decoder_block,
        to_plain=_block_to_plain,
        judge=_judge_decoder,
        forbidden=_NO_TRANSFORMER_LIBRARIES,
        error_hints={
            "ValueError": "MultiHeadAttention refused its arguments: query, key and value are "
            "(B, length, D) with the same B, and key and value need the same length, so both "
            "come from memory (B, S, D). A mask must broadcast to the scores: the causal "
            "(T, T) mask to the self-attention's (B, H, T, T), memory_mask to the "
            "cross-attention's (B, H, T, S).",
            "RuntimeError": "A tensor operation failed, most often because shapes do not fit: "
            "an attention's output has one row per QUERY, so the cross-attention's queries "
            "come from the decoder (B, T, D) for its output to be added to x.",
            "TypeError": "self_attn and cross_attn return a pair (out, weights): keep out "
            "([0]). The function is called as decoder_block(x, memory, self_attn, cross_attn, "
            "ff, norm1, norm2, norm3, memory_mask); memory_mask may be None.",
            "CheckError": "Return one tensor, (B, T, D). The attention modules return (out, "
            "weights): keep out.",
        },
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
