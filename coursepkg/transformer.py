"""The full Transformer: attention, a feed-forward network, residuals and layer norms.

A Transformer *block* alternates two sublayers, each wrapped in a residual connection and a
layer norm:

* multi-head self-attention (chapter 5), where positions exchange information;
* a position-wise feed-forward network, the same two-layer MLP applied to every position
  on its own: ``FFN(x) = W_2 act(W_1 x + b_1) + b_2``.

Where the norm goes is the difference between the two variants of this module:

* post-norm (``norm_first=False``, the original paper): ``x = LN(x + sublayer(x))``;
* pre-norm (``norm_first=True``, GPT-2 and most models since): ``x = x + sublayer(LN(x))``,
  which leaves an unnormalised path from every layer's output to the input, so gradients
  reach the first layers undiminished.

:class:`TransformerEncoderLayer` and :class:`TransformerDecoderLayer` use the parameter names
of torch's ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` (up to the
feed-forward network, which lives in ``ff``) and load their weights with ``from_torch``.
:class:`Transformer` stacks them into an encoder-decoder, :class:`TransformerLM` into a
causal language model whose positional encoding is any of chapter 6's, configured by a
:class:`TransformerConfig`.

No layer keeps its attention weights: ``coursepkg.multihead.record_attention(model)`` collects
them with forward hooks.

Decoding one token at a time, ``TransformerLM.decode_step`` and ``Transformer.decode_step`` read
only the new tokens and carry what the earlier ones left in a :class:`KVCache`, passed in and
returned (no module keeps it).

Masks are boolean with **True = may attend**, broadcastable to (B, H, T, S) (torch's
boolean masks mean the opposite). Shape letters: B batch, T target (or LM) positions, S source
positions, D model width, H heads, F feed-forward width, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursepkg.decoding import batched_beam_search
from coursepkg.multihead import MultiHeadAttention, Rotate, record_attention
from coursepkg.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    Rotary,
    SinusoidalPositions,
)
from coursepkg.self_attention import causal_mask

__all__ = [
    "FeedForward",
    "KVCache",
    "PositionKind",
    "Transformer",
    "TransformerConfig",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
    "TransformerLM",
]

PositionKind = Literal["learned", "sinusoidal", "rope", "relative", "none"]
_POSITIONS = ("learned", "sinusoidal", "rope", "relative", "none")
_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_dropout(dropout: float) -> None:
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


class FeedForward(nn.Module):
    """The position-wise feed-forward network: ``linear2(dropout(act(linear1(x))))``.

    Args:
        d_model: D, the width of the input and output.
        d_ff: F, the hidden width (4 D in the paper and in GPT).
        dropout: dropout on the hidden activations during training.
        activation: ``"relu"`` (the paper) or ``"gelu"`` (GPT).
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"
    ) -> None:
        super().__init__()
        _check_positive("d_model", d_model)
        _check_positive("d_ff", d_ff)
        _check_dropout(dropout)
        if activation not in _ACTIVATIONS:
            raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)  # W_1, b_1
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)  # W_2, b_2

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., D), every position on its own."""
        hidden = _ACTIVATIONS[self.activation](self.linear1(x))  # (..., F)
        return self.linear2(self.dropout(hidden))  # (..., D)


def _torch_activation(m: nn.Module) -> str:
    act = m.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    raise ValueError(f"from_torch supports the relu and (exact) gelu activations, got {act!r}")


def _from_torch(cls: type, m: nn.Module, expected: type) -> nn.Module:
    """Build ``cls`` with the configuration of a torch layer and copy its weights: torch's
    ``linear1`` / ``linear2`` live in ``ours.ff``, ``multihead_attn`` is ``cross_attn``."""
    if not isinstance(m, expected):
        raise ValueError(f"expected a torch.nn.{expected.__name__}, got {type(m).__name__}")
    if not m.self_attn.batch_first:
        raise ValueError("from_torch needs batch_first=True (the course is batch first)")
    if m.linear1.bias is None:
        raise ValueError("from_torch needs a torch layer with biases (it was built with "
                         "bias=False; the course's layers always have them)")
    ours = cls(
        m.self_attn.embed_dim, m.self_attn.num_heads, m.linear1.out_features,
        dropout=m.dropout.p, norm_first=m.norm_first, activation=_torch_activation(m),
        layer_norm_eps=m.norm1.eps,
    )
    renames = {"multihead_attn.": "cross_attn.", "linear1.": "ff.linear1.",
               "linear2.": "ff.linear2."}
    state = {}
    for name, value in m.state_dict().items():
        for old, new in renames.items():
            if name.startswith(old):
                name = new + name[len(old):]
        state[name] = value
    ours.to(device=m.linear1.weight.device, dtype=m.linear1.weight.dtype)
    ours.load_state_dict(state)
    ours.train(m.training)
    return ours


def _check_width(name: str, x: Tensor, d_model: int) -> None:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"expected {name} of shape (B, length, {d_model}), got {tuple(x.shape)}")


@dataclass(frozen=True)
class KVCache:
    """What a Transformer decoder has read, so that each new token costs one position's work.

    Decoding one token at a time, the self-attention of the new position t needs the keys and
    values of positions 0 .. t. Those of 0 .. t-1 do not change when a token is added (the
    model is causal), so instead of running the whole prefix again, ``decode_step`` keeps, for
    every layer, what its self-attention read as keys and values, and computes only the new
    position. A cache is never changed in place: each step returns a new one.

    Where the cached keys are: each layer's key/value *input* (B, P, D), the layer's input
    after its first layer norm (pre-norm) or the layer's input itself (post-norm), before the
    key and value projections and before RoPE's rotation. A step concatenates the new
    position's input to it and calls the same ``multi_head_attention`` as ``forward``, which
    projects the P + 1 keys and values and rotates them at their positions 0 .. P, the query at
    P (``Rotary(offset=P)``; a relative bias takes the query offset the same way). So there is
    one attention function, positions reach it exactly as without a cache, and
    ``record_attention`` still sees the weights. The price is projecting the P cached inputs
    again at every step: with F = 4D, a cached step costs about (2P + 12) D^2 + 2PD
    multiply-adds per layer, a full recomputation about 12 P D^2 + 2 P^2 D. A cache of the keys
    and values after the projections and the rotation (B, H, P, Dh), as inference engines keep,
    would save the 2 P D^2 too, at the price of a second attention function that takes
    projected heads.

    Attributes:
        inputs: one (B, P, D) tensor per layer, in order: what its self-attention read as keys
            and values at positions 0 .. P-1.
    """

    inputs: tuple[Tensor, ...]

    @property
    def length(self) -> int:
        """P, the number of positions read so far."""
        return self.inputs[0].shape[1]

    def select(self, rows: Tensor) -> KVCache:
        """The cache of the batch rows ``rows`` (N,) (a beam search keeps those of its best
        hypotheses, a row more than once if two hypotheses share a prefix)."""
        return KVCache(tuple(x[rows] for x in self.inputs))


def _check_cache(cache: KVCache | None, n_layers: int, batch: int) -> int:
    """P, the length of a cache that fits the model and the batch (0 for None)."""
    if cache is None:
        return 0
    if not isinstance(cache, KVCache) or len(cache.inputs) != n_layers:
        raise ValueError(f"expected a KVCache with one tensor per layer ({n_layers}), got "
                         f"{type(cache).__name__}")
    if cache.inputs[0].shape[0] != batch:
        raise ValueError(f"the cache holds {cache.inputs[0].shape[0]} sequences, the batch has "
                         f"{batch}")
    return cache.length


def _causal_rows(T: int, P: int, device: torch.device) -> Tensor:
    """(T, P+T): the rows P .. P+T-1 of a causal mask, True where s <= P + t."""
    return torch.ones(T, P + T, dtype=torch.bool, device=device).tril(P)


class TransformerEncoderLayer(nn.Module):
    """Self-attention and a feed-forward network, each with a residual and a layer norm.

    Args:
        d_model: D.
        n_heads: H (D divisible by H).
        d_ff: F, the feed-forward width.
        dropout: dropout on the attention weights, the feed-forward hidden units and each
            sublayer's output.
        norm_first: False for post-norm ``LN(x + f(x))``, True for pre-norm ``x + f(LN(x))``.
        activation: the feed-forward activation, ``"relu"`` or ``"gelu"``.
        layer_norm_eps: the layer norms' epsilon.
        fused: call the attention's ``fused_forward`` (torch's fused kernel: the same outputs,
            no weights for ``record_attention``) instead of its ``forward``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        *,
        fused: bool = False,
    ) -> None:
        super().__init__()
        _check_dropout(dropout)
        self.norm_first = norm_first
        self.fused = fused
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _attend(
        self, x: Tensor, mask: Tensor | None, score_bias: Tensor | None, rotate: Rotate | None,
        keys_values: Tensor | None = None,
    ) -> Tensor:
        """Self-attention (B, T, D) of the queries ``x`` to ``keys_values`` (B, S, D) (default:
        ``x`` itself), through the fused kernel or through ``forward``."""
        kv = x if keys_values is None else keys_values
        if self.fused:
            out = self.self_attn.fused_forward(x, kv, kv, mask, score_bias=score_bias,
                                               rotate=rotate)
        else:  # forward: its weights reach record_attention
            out, _ = self.self_attn(x, kv, kv, mask, score_bias=score_bias, rotate=rotate)
        return self.dropout1(out)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        score_bias: Tensor | None = None,
        rotate: Rotate | None = None,
    ) -> Tensor:
        """One encoder layer.

        Args:
            x: (B, T, D).
            mask: boolean, True = may attend, broadcastable to (B, H, T, T); (B, T, T)
                applies to every head.
            score_bias: float, added to the attention scores, with the shapes of ``mask``
                (a relative position bias is (1, H, T, T)).
            rotate: ``rotate(q, k) -> (q, k)`` on every head's queries and keys (RoPE).

        Returns:
            (B, T, D).
        """
        _check_width("x", x, self.self_attn.d_model)
        if self.norm_first:
            x = x + self._attend(self.norm1(x), mask, score_bias, rotate)  # x + SA(LN(x))
            return x + self.dropout2(self.ff(self.norm2(x)))  # x + FF(LN(x))
        x = self.norm1(x + self._attend(x, mask, score_bias, rotate))  # LN(x + SA(x))
        return self.norm2(x + self.dropout2(self.ff(x)))  # LN(x + FF(x))

    def decode_step(
        self,
        x: Tensor,
        past: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        score_bias: Tensor | None = None,
        rotate: Rotate | None = None,
    ) -> tuple[Tensor, Tensor]:
        """:meth:`forward` for T new positions that follow P positions the layer has read.

        Self-attention's keys and values at the P earlier positions come from ``past``, what
        this layer's attention read there (its key/value *input*, before the projections), so
        only the T new positions are computed. The outputs are those of :meth:`forward` over
        all P + T positions, at the last T of them.

        Args:
            x: (B, T, D) the layer's input at positions P .. P+T-1.
            past: (B, P, D) what the attention read as keys and values at positions
                0 .. P-1 (the second result of the previous call), or None when P = 0.
            mask: boolean, True = may attend, broadcastable to (B, H, T, P+T): e.g. the rows
                P .. P+T-1 of a causal mask; None lets every new position see every key.
            score_bias: as in :meth:`forward`, for T queries and P + T keys (a relative
                position bias with its query offset P).
            rotate: as in :meth:`forward`, with the queries at positions P .. P+T-1 (RoPE
                with ``offset=P``).

        Returns:
            ``(out, keys_values)``: out (B, T, D); keys_values (B, P+T, D), what the attention
            read as keys and values at positions 0 .. P+T-1: the ``past`` of the next call.
        """
        _check_width("x", x, self.self_attn.d_model)
        h = self.norm1(x) if self.norm_first else x  # (B, T, D), what attention reads
        if past is not None:
            _check_width("past", past, self.self_attn.d_model)
        keys_values = h if past is None else torch.cat([past, h], dim=1)  # (B, P + T, D)
        if self.norm_first:
            x = x + self._attend(h, mask, score_bias, rotate, keys_values)  # x + SA(LN(x))
            return x + self.dropout2(self.ff(self.norm2(x))), keys_values  # x + FF(LN(x))
        x = self.norm1(x + self._attend(x, mask, score_bias, rotate, keys_values))
        return self.norm2(x + self.dropout2(self.ff(x))), keys_values

    @classmethod
    def from_torch(cls, m: nn.TransformerEncoderLayer) -> TransformerEncoderLayer:
        """A layer with the weights of ``torch.nn.TransformerEncoderLayer(batch_first=True)``."""
        return _from_torch(cls, m, nn.TransformerEncoderLayer)

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}" + (", fused=True" if self.fused else "")


class TransformerDecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, a feed-forward network.

    In cross-attention the queries come from the decoder (``x``), the keys and values from
    the encoder's output (``memory``).

    Args:
        d_model: D.
        n_heads: H.
        d_ff: F.
        dropout: as in :class:`TransformerEncoderLayer`.
        norm_first: post-norm (False) or pre-norm (True).
        activation: ``"relu"`` or ``"gelu"``.
        layer_norm_eps: the layer norms' epsilon.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        _check_dropout(dropout)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _self_block(
        self, x: Tensor, mask: Tensor | None, keys_values: Tensor | None = None
    ) -> Tensor:
        kv = x if keys_values is None else keys_values  # (B, S, D): S = T without a cache
        out, _ = self.self_attn(x, kv, kv, mask)  # (B, T, D); weights (B, H, T, S)
        return self.dropout1(out)

    def _cross_block(self, x: Tensor, memory: Tensor, mask: Tensor | None) -> Tensor:
        out, _ = self.cross_attn(x, memory, memory, mask)  # (B, T, D); weights (B, H, T, S)
        return self.dropout2(out)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        """One decoder layer.

        Args:
            x: (B, T, D) the decoder's input.
            memory: (B, S, D) the encoder's output.
            self_mask: boolean, broadcastable to (B, H, T, T), usually causal.
            memory_mask: boolean, broadcastable to (B, H, T, S), e.g. (B, 1, 1, S) to hide
                source padding.

        Returns:
            (B, T, D).
        """
        _check_width("x", x, self.self_attn.d_model)
        _check_width("memory", memory, self.self_attn.d_model)
        if self.norm_first:
            x = x + self._self_block(self.norm1(x), self_mask)
            x = x + self._cross_block(self.norm2(x), memory, memory_mask)
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self._self_block(x, self_mask))
        x = self.norm2(x + self._cross_block(x, memory, memory_mask))
        return self.norm3(x + self.dropout3(self.ff(x)))

    def decode_step(
        self,
        x: Tensor,
        memory: Tensor,
        past: Tensor | None = None,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """:meth:`forward` for T new target positions that follow P the layer has read.

        As :meth:`TransformerEncoderLayer.decode_step`: the self-attention's keys and values
        at the P earlier positions come from ``past``; cross-attention reads ``memory`` as
        :meth:`forward` does.

        Args:
            x: (B, T, D) the layer's input at positions P .. P+T-1.
            memory: (B, S, D) the encoder's output.
            past: (B, P, D) what the self-attention read as keys and values at positions
                0 .. P-1 (the second result of the previous call), or None when P = 0.
            self_mask: boolean, broadcastable to (B, H, T, P+T) (rows P .. P+T-1 of a causal
                mask); None: every key.
            memory_mask: boolean, broadcastable to (B, H, T, S).

        Returns:
            ``(out, keys_values)``: out (B, T, D); keys_values (B, P+T, D), the ``past`` of the
            next call.
        """
        _check_width("x", x, self.self_attn.d_model)
        _check_width("memory", memory, self.self_attn.d_model)
        h = self.norm1(x) if self.norm_first else x  # (B, T, D), what self-attention reads
        if past is not None:
            _check_width("past", past, self.self_attn.d_model)
        keys_values = h if past is None else torch.cat([past, h], dim=1)  # (B, P + T, D)
        if self.norm_first:
            x = x + self._self_block(h, self_mask, keys_values)
            x = x + self._cross_block(self.norm2(x), memory, memory_mask)
            return x + self.dropout3(self.ff(self.norm3(x))), keys_values
        x = self.norm1(x + self._self_block(x, self_mask, keys_values))
        x = self.norm2(x + self._cross_block(x, memory, memory_mask))
        return self.norm3(x + self.dropout3(self.ff(x))), keys_values

    @classmethod
    def from_torch(cls, m: nn.TransformerDecoderLayer) -> TransformerDecoderLayer:
        """A layer with the weights of ``torch.nn.TransformerDecoderLayer(batch_first=True)``."""
        return _from_torch(cls, m, nn.TransformerDecoderLayer)


class Transformer(nn.Module):
    """An encoder-decoder Transformer for sequence-to-sequence tasks, with greedy or beam decoding.

    Token embeddings are scaled by sqrt(D) and added to sinusoidal positions (as in the
    paper); id ``pad_id`` in the source is hidden from attention and ignored by :meth:`loss`.

    Args:
        src_vocab: source vocabulary size.
        tgt_vocab: target vocabulary size V.
        d_model: D.
        n_heads: H.
        n_layers: encoder layers and decoder layers (each).
        d_ff: F (default 4 D).
        dropout: dropout everywhere (embeddings, attention, feed-forward, sublayers).
        norm_first: pre-norm (True) or post-norm (False) layers; pre-norm adds a final layer
            norm after each stack.
        pad_id: the padding id (chapter 3's ``SeqCodec.PAD`` = 0).
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        dropout: float = 0.0,
        norm_first: bool = True,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        for name, value in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab),
                            ("n_layers", n_layers)):
            _check_positive(name, value)
        _check_dropout(dropout)
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.d_model = d_model
        self.pad_id = pad_id
        self.norm_first = norm_first
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        for embed in (self.src_embed, self.tgt_embed):
            nn.init.normal_(embed.weight, std=d_model**-0.5)  # unit scale after * sqrt(D)
        self.positions = SinusoidalPositions(d_model)
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(
            TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, norm_first)
            for _ in range(n_layers)
        )
        self.decoder = nn.ModuleList(
            TransformerDecoderLayer(d_model, n_heads, d_ff, dropout, norm_first)
            for _ in range(n_layers)
        )
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.head = nn.Linear(d_model, tgt_vocab)

    def _embed(self, embed: nn.Embedding, ids: Tensor, offset: int = 0) -> Tensor:
        """Embeddings and sinusoidal positions offset .. offset+L-1 of ids (B, L): (B, L, D)."""
        positions = self.positions(ids.shape[1], offset=offset)  # (L, D)
        return self.dropout(embed(ids) * math.sqrt(self.d_model) + positions)

    def source_mask(self, src: Tensor) -> Tensor:
        """(B, 1, 1, S): True for the real (non-padding) source tokens."""
        return (src != self.pad_id)[:, None, None, :]

    def encode(self, src: Tensor) -> Tensor:
        """The encoder: source ids (B, S) -> memory (B, S, D)."""
        if src.dim() != 2:
            raise ValueError(f"expected src of shape (B, S), got {tuple(src.shape)}")
        x = self._embed(self.src_embed, src)  # (B, S, D)
        mask = self.source_mask(src)  # (B, 1, 1, S)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.encoder_norm(x)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        """The decoder: input ids (B, T) and memory (B, S, D) -> logits (B, T, V)."""
        if tgt_in.dim() != 2:
            raise ValueError(f"expected tgt of shape (B, T), got {tuple(tgt_in.shape)}")
        y = self._embed(self.tgt_embed, tgt_in)  # (B, T, D)
        self_mask = causal_mask(tgt_in.shape[1], device=tgt_in.device)  # (T, T)
        memory_mask = self.source_mask(src)  # (B, 1, 1, S)
        for layer in self.decoder:
            y = layer(y, memory, self_mask, memory_mask)
        return self.head(self.decoder_norm(y))  # (B, T, V)

    def decode_step(
        self, tgt_in: Tensor, memory: Tensor, src: Tensor, cache: KVCache | None = None
    ) -> tuple[Tensor, KVCache]:
        """:meth:`decode` for T new target tokens after the P a cache holds.

        ``decode_step(tgt_in[:, :P], memory, src)`` then ``decode_step(tgt_in[:, P:], memory,
        src, cache)`` give the logits of ``decode(tgt_in, memory, src)`` (to rounding); the new
        tokens are at positions P .. P+T-1. See :class:`KVCache`.

        Args:
            tgt_in: (B, T) the new input ids (T >= 1).
            memory: (B, S, D) the encoder's output; src: (B, S) the source ids.
            cache: the second result of the previous call (None to start).

        Returns:
            ``(logits, cache)``: logits (B, T, V) of the new positions; the cache of all P + T.
        """
        if tgt_in.dim() != 2 or tgt_in.shape[1] < 1:
            raise ValueError(f"expected tgt of shape (B, T), T >= 1, got {tuple(tgt_in.shape)}")
        B, T = tgt_in.shape
        P = _check_cache(cache, len(self.decoder), B)
        y = self._embed(self.tgt_embed, tgt_in, offset=P)  # (B, T, D)
        self_mask = _causal_rows(T, P, tgt_in.device)  # (T, P + T)
        memory_mask = self.source_mask(src)  # (B, 1, 1, S)
        inputs = []
        for i, layer in enumerate(self.decoder):
            past = None if cache is None else cache.inputs[i]
            y, keys_values = layer.decode_step(y, memory, past, self_mask, memory_mask)
            inputs.append(keys_values)  # (B, P + T, D)
        return self.head(self.decoder_norm(y)), KVCache(tuple(inputs))

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing.

        Args:
            src: (B, S) source ids, padded with ``pad_id``.
            tgt: (B, T) the decoder's input: BOS followed by the target without its last token.

        Returns:
            (B, T, V) logits; position t predicts target token t.
        """
        return self.decode(tgt, self.encode(src), src)

    def loss(self, src: Tensor, tgt: Tensor, bos: int) -> Tensor:
        """Teacher-forced cross-entropy of the target ids (B, T) (``pad_id`` ignored)."""
        bos_column = torch.full_like(tgt[:, :1], bos)
        tgt_in = torch.cat([bos_column, tgt[:, :-1]], dim=1)  # (B, T)
        logits = self(src, tgt_in)  # (B, T, V)
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=self.pad_id
        )

    @torch.no_grad()
    def translate(
        self, src: Tensor, max_len: int, bos: int, *, beam_size: int = 1,
        eos_id: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Greedy decoding (or a beam search), with the last decoder layer's cross-attention.

        Args:
            src: (B, S) source ids.
            max_len: T, the number of tokens to produce.
            bos: the id that starts every target.
            beam_size: 1 for greedy decoding; more for a beam search of that width
                (``coursepkg.decoding.batched_beam_search``, with the decoder's :class:`KVCache`)
                that returns each row's best hypothesis: the one with the largest sum of
                log-probabilities.
            eos_id: for a beam search, the id that ends a hypothesis (the rest of its row is
                filled with it; its score stops there); None scores all T tokens. Greedy
                decoding ignores it.

        Returns:
            ``(tokens, weights)``: tokens (B, T), the argmax at each step (the best
            hypothesis); weights (B, T, S), the last layer's cross-attention averaged over
            heads, as it was when each token was predicted.
        """
        _check_positive("max_len", max_len)
        _check_positive("beam_size", beam_size)
        was_training = self.training
        self.eval()
        memory = self.encode(src)  # (B, S, D)
        if beam_size > 1:
            tokens = self._beam_translate(src, memory, max_len, bos, beam_size, eos_id)
            tgt_in = torch.cat([torch.full_like(tokens[:, :1], bos), tokens[:, :-1]], dim=1)
            with record_attention(self.decoder[-1].cross_attn) as maps:
                self.decode(tgt_in, memory, src)  # teacher-forced on the chosen tokens
            self.train(was_training)
            return tokens, maps[""].mean(dim=1)  # (B, T), (B, T, S)
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        with record_attention(self.decoder[-1].cross_attn) as maps:
            for _ in range(max_len):
                logits = self.decode(tokens, memory, src)  # (B, t, V)
                tokens = torch.cat([tokens, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        weights = maps[""].mean(dim=1)  # (B, T, S), from the last step, which saw all T inputs
        self.train(was_training)
        return tokens[:, 1:], weights

    def _beam_translate(
        self, src: Tensor, memory: Tensor, max_len: int, bos: int, beam_size: int,
        eos_id: int | None,
    ) -> Tensor:
        """The best hypothesis (B, T) of a beam search per source row, with a KVCache."""
        rows = torch.arange(src.shape[0], device=src.device)  # the source of each hypothesis
        cache: KVCache | None = None

        def step(seqs: Tensor, parents: Tensor | None) -> Tensor:
            nonlocal rows, cache
            if parents is not None:  # the hypotheses kept, in their new order
                rows, cache = rows[parents], cache.select(parents)
            new = seqs if cache is None else seqs[:, cache.length:]  # (N, 1) after the first
            logits, cache = self.decode_step(new, memory[rows], src[rows], cache)
            return torch.log_softmax(logits[:, -1], dim=-1)  # (N, V)

        start = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        sequences, _ = batched_beam_search(step, start, max_len, beam_size, eos_id=eos_id)
        return sequences[:, 0, 1:]  # (B, T): the best of each row, without BOS


@dataclass(frozen=True)
class TransformerConfig:
    """Everything that defines a :class:`TransformerLM` (the idea of nanoGPT's ``GPTConfig``).

    ``TransformerConfig(V, 64, 128, 4, 4, pos="rope")`` takes the arguments of
    ``TransformerLM(...)`` in the same order; the fields after ``norm_first`` are keyword-only.
    The values are checked when the config is made; ``d_ff`` and ``max_distance`` given as
    None are replaced by their defaults, so a config shows the model's real sizes.
    """

    vocab_size: int
    """V, the vocabulary size."""
    block_size: int
    """the training context length (the largest for ``pos="learned"``)."""
    d_model: int
    """D, the width of the residual stream."""
    n_heads: int
    """H, the heads of every attention; D must be divisible by H (and D / H even for RoPE)."""
    n_layers: int
    """the number of blocks."""
    d_ff: int | None = None
    """F, the feed-forward width (None: 4 D)."""
    dropout: float = 0.0
    """dropout on the embeddings, the attention weights and the sublayers."""
    pos: PositionKind = "learned"
    """the positional encoding of chapter 6 (see :class:`TransformerLM`)."""
    norm_first: bool = True
    """pre-norm (GPT) or post-norm blocks."""
    _: KW_ONLY
    tie_weights: bool = False
    """share the output projection with the token embedding."""
    activation: str = "gelu"
    """the feed-forward activation, ``"gelu"`` (GPT) or ``"relu"``."""
    fused: bool = False
    """attention through torch's fused kernel: the same results, no weights to record."""
    max_distance: int | None = None
    """the clipping distance M of ``pos="relative"`` (None: ``block_size``). With M below the
    training length, the bias of the clipped offsets is trained too."""

    def __post_init__(self) -> None:
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if self.max_distance is None:
            object.__setattr__(self, "max_distance", self.block_size)
        _check_dropout(self.dropout)
        for name in ("vocab_size", "block_size", "d_model", "n_heads", "n_layers", "d_ff",
                     "max_distance"):
            _check_positive(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}"
            )
        if self.pos not in _POSITIONS:
            raise ValueError(
                f"pos must be one of {', '.join(map(repr, _POSITIONS))}; got {self.pos!r}"
            )
        if self.pos == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"RoPE rotates pairs of dimensions: the head width {self.d_model // self.n_heads}"
                " must be even"
            )
        if self.pos == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                f"the sinusoidal table needs an even d_model (sines and cosines come in pairs), "
                f"got {self.d_model}"
            )
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f'activation must be "relu" or "gelu", got {self.activation!r}')


class TransformerLM(nn.Module):
    """A causal (GPT-style) Transformer language model.

    Tokens are embedded (scaled by sqrt(D)), combined with the positional encoding chosen by
    ``pos``, passed through ``n_layers`` causal encoder layers and a final layer norm
    (pre-norm), and projected to next-token logits.

    ``pos`` is one of chapter 6's encodings:

    * ``"learned"``: a learned vector per position added to the embeddings (GPT); sequences
      longer than ``block_size`` raise an error;
    * ``"sinusoidal"``: the fixed sine/cosine table added to the embeddings;
    * ``"rope"``: a :class:`~coursepkg.positional.Rotary` that every layer's attention calls
      on its queries and keys;
    * ``"relative"``: a learned bias per head and clipped offset (up to ``max_distance``),
      one table per layer, added to that layer's scores;
    * ``"none"``: no positions at all (the causal mask alone still tells a little).

    Every encoding but ``"learned"`` also runs on sequences longer than ``block_size``, the
    context ``coursepkg.lm.generate`` keeps.

    Build it from a :class:`TransformerConfig`, ``TransformerLM(config)``, or with the config's
    arguments, ``TransformerLM(vocab_size, block_size, d_model, n_heads, n_layers, ...)``;
    ``TransformerLM(config, fused=True)`` changes fields of a config. ``model.config`` holds
    the result.
    """

    def __init__(
        self, config: TransformerConfig | int | None = None, /, *args: Any, **kwargs: Any
    ) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):  # TransformerLM(vocab_size, ...)
            args = args if config is None else (config, *args)
            config = TransformerConfig(*args, **kwargs)
        elif args:
            raise TypeError("TransformerLM(config, ...) takes further fields by keyword only")
        elif kwargs:
            config = dataclasses.replace(config, **kwargs)
        self.config = config
        D = config.d_model
        self.token_embed = nn.Embedding(config.vocab_size, D)
        nn.init.normal_(self.token_embed.weight, std=D**-0.5)  # unit scale after * sqrt(D)
        self.positions: nn.Module | None = None
        if config.pos == "learned":
            self.positions = LearnedPositionalEmbedding(config.block_size, D)
            # The RMS of a sinusoidal entry: both absolute encodings start at the tokens' scale.
            nn.init.normal_(self.positions.weight, std=0.5**0.5)
        elif config.pos == "sinusoidal":
            self.positions = SinusoidalPositions(D)
        self.rotary = Rotary() if config.pos == "rope" else None
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(
                D, config.n_heads, config.d_ff, config.dropout, config.norm_first,
                config.activation, fused=config.fused,
            )
            for _ in range(config.n_layers)
        )
        self.relative = (
            nn.ModuleList(RelativePositionBias(config.n_heads, config.max_distance)
                          for _ in range(config.n_layers))
            if config.pos == "relative" else None
        )
        self.norm = nn.LayerNorm(D) if config.norm_first else nn.Identity()
        self.head = nn.Linear(D, config.vocab_size, bias=not config.tie_weights)
        if config.tie_weights:
            self.head.weight = self.token_embed.weight

    @property
    def vocab_size(self) -> int:
        """V, from the config."""
        return self.config.vocab_size

    @property
    def block_size(self) -> int:
        """The training context length, from the config."""
        return self.config.block_size

    @property
    def d_model(self) -> int:
        """D, from the config."""
        return self.config.d_model

    @property
    def pos(self) -> PositionKind:
        """The positional encoding, from the config."""
        return self.config.pos

    def decode_step(
        self, idx: Tensor, cache: KVCache | None = None
    ) -> tuple[Tensor, KVCache]:
        """:meth:`forward` for T new tokens after the P tokens a cache holds.

        ``decode_step(idx[:, :P])`` then ``decode_step(idx[:, P:], cache)`` give the logits of
        ``forward(idx)`` (to rounding) while computing only the new positions: what
        ``coursepkg.lm.generate`` does with ``use_cache=True``, one token per step. The new
        tokens are at positions P .. P+T-1 for every ``pos``: the rows P.. of the learned or
        sinusoidal table, RoPE's queries at offset P (its keys at 0 .. P+T-1), the relative
        bias with query offset P. With ``pos="learned"`` P + T may not exceed ``block_size``.
        See :class:`KVCache` for what is cached and why.

        Args:
            idx: (B, T) the new token ids (T >= 1).
            cache: what the model has read (the second result of the previous call), or None
                to start.

        Returns:
            ``(logits, cache)``: logits (B, T, V) at the new positions; the cache of all P + T.
        """
        if idx.dim() != 2 or idx.shape[1] < 1:
            raise ValueError(f"expected idx of shape (B, T), T >= 1, got {tuple(idx.shape)}")
        B, T = idx.shape
        P = _check_cache(cache, len(self.layers), B)
        x = self.token_embed(idx) * math.sqrt(self.d_model)  # (B, T, D)
        if self.pos == "learned":
            x = x + self.positions(P + T)[P:]  # (T, D): positions P .. P+T-1
        elif self.pos == "sinusoidal":
            x = x + self.positions(T, offset=P)  # (T, D)
        x = self.dropout(x)
        mask = _causal_rows(T, P, idx.device)  # (T, P + T)
        rotate = None if self.rotary is None else functools.partial(self.rotary, offset=P)
        inputs = []
        for i, layer in enumerate(self.layers):
            bias = (None if self.relative is None
                    else self.relative[i](T, P + T, offset=P)[None])  # (1, H, T, P + T)
            past = None if cache is None else cache.inputs[i]
            x, keys_values = layer.decode_step(x, past, mask, score_bias=bias, rotate=rotate)
            inputs.append(keys_values)  # (B, P + T, D)
        return self.head(self.norm(x)), KVCache(tuple(inputs))

    def forward(self, idx: Tensor) -> Tensor:
        """Next-token logits at every position.

        Args:
            idx: (B, T) token ids.

        Returns:
            (B, T, V) logits; position t predicts token t + 1 from tokens 0..t.
        """
        if idx.dim() != 2:
            raise ValueError(f"expected idx of shape (B, T), got {tuple(idx.shape)}")
        T = idx.shape[1]
        x = self.token_embed(idx) * math.sqrt(self.d_model)  # (B, T, D)
        if self.positions is not None:
            x = x + self.positions(T)  # (T, D) added to every sequence
        x = self.dropout(x)
        mask = causal_mask(T, device=idx.device)  # (T, T)
        for i, layer in enumerate(self.layers):
            bias = None if self.relative is None else self.relative[i](T)[None]  # (1, H, T, T)
            x = layer(x, mask, score_bias=bias, rotate=self.rotary)
        return self.head(self.norm(x))  # (B, T, V)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, pos={self.pos!r}"
