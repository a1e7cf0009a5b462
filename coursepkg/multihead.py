"""Multi-head attention: several attention patterns at the cost of one.

One head of attention gives each query a single weighted average of the values: it can look
in one way only. Multi-head attention projects queries, keys and values once to the full
width D, cuts each projection into H heads of width Dh = D / H, lets every head attend on its
own, and concatenates the heads' outputs before a final projection W^O:

    head_h = Attention(Q W_h^Q, K W_h^K, V W_h^V),   out = concat(head_1 ... head_H) W^O.

The heads are a reshape, not a loop: :func:`split_heads` turns (B, T, D) into (B, H, T, Dh),
attention runs on all heads at once (chapter 4's :func:`scaled_dot_product_attention`
handles any leading dimensions), and :func:`merge_heads` undoes the split.

:func:`multi_head_attention` is the computation, a pure function of the inputs and the
weights; :class:`MultiHeadAttention` owns the weights, under the parameter names of
``torch.nn.MultiheadAttention`` (``in_proj_weight`` stacks W^Q, W^K, W^V; ``out_proj`` is
W^O), so :meth:`MultiHeadAttention.from_torch` copies a torch module's weights unchanged. Its
``forward`` always returns ``(out, weights)``; :meth:`MultiHeadAttention.fused_forward` computes
the same ``out`` with torch's fused kernel, which gives no weights (the tests prove both equal).

One rule for masks and score biases alike: they broadcast to the scores (B, H, T, S), and a
3-D one is (B, T, S), the leading dimension being the batch, applied to every head; a
per-head one is (1, H, T, S). Masks are boolean with **True = may attend**.

Chapter 6's encodings that act inside attention reach it at call time, as values:
``score_bias`` (a relative position bias) is added to the scaled scores, and ``rotate``
(RoPE's ``coursepkg.positional.Rotary``) turns the split queries and keys. This module knows
nothing of positions.

The weights are never stored on a module: :func:`record_attention` collects them with
forward hooks. Shape letters: B batch, T queries, S keys, D model width, H heads, Dh = D // H.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursepkg.attention import check_mask_fits
from coursepkg.self_attention import scaled_dot_product_attention

__all__ = [
    "MultiHeadAttention",
    "Rotate",
    "fused_multi_head_attention",
    "merge_heads",
    "multi_head_attention",
    "record_attention",
    "split_heads",
]

Rotate = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
"""``rotate(q (B, H, T, Dh), k (B, H, S, Dh)) -> (q, k)``: a transformation of every head's
queries and keys before their scores (chapter 6's RoPE)."""


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the last dimension into heads and move the head axis before time.

    Args:
        x: (B, T, D) with D divisible by ``n_heads``.
        n_heads: H.

    Returns:
        (B, H, T, Dh): ``out[b, h, t] == x[b, t, h * Dh:(h + 1) * Dh]``.
    """
    if x.dim() != 3:
        raise ValueError(f"expected x of shape (B, T, D), got {tuple(x.shape)}")
    B, T, D = x.shape
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
    if D % n_heads:
        raise ValueError(f"the width D={D} is not divisible by n_heads={n_heads}")
    x = x.view(B, T, n_heads, D // n_heads)  # (B, T, H, Dh)
    return x.transpose(1, 2)  # (B, H, T, Dh)


def merge_heads(x: Tensor) -> Tensor:
    """Concatenate the heads again: the inverse of :func:`split_heads`.

    Args:
        x: (B, H, T, Dh).

    Returns:
        (B, T, H * Dh).
    """
    if x.dim() != 4:
        raise ValueError(f"expected x of shape (B, H, T, Dh), got {tuple(x.shape)}")
    B, H, T, Dh = x.shape
    x = x.transpose(1, 2)  # (B, T, H, Dh)
    return x.reshape(B, T, H * Dh)  # (B, T, D)


def multi_head_attention(
    query: Tensor, key: Tensor, value: Tensor,
    in_proj_weight: Tensor, in_proj_bias: Tensor | None,
    out_proj_weight: Tensor, out_proj_bias: Tensor | None,
    n_heads: int, mask: Tensor | None = None, *,
    score_bias: Tensor | None = None, rotate: Rotate | None = None, dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """H heads of attention from T queries to S keys and values, and the output projection.

    Args:
        query, key, value: (B, T, D), (B, S, D), (B, S, D).
        in_proj_weight, in_proj_bias: (3D, D) W^Q; W^K; W^V stacked, and (3D,) or None.
        out_proj_weight, out_proj_bias: (D, D) W^O, and (D,) or None.
        n_heads: H, a divisor of D.
        mask: boolean, True = may attend, broadcastable to (B, H, T, S); 3-D is (B, T, S).
        score_bias: float, added to the scaled scores; the same shapes as ``mask``.
        rotate: ``rotate(q, k) -> (q, k)``, applied to the split queries and keys.
        dropout_p: dropout on the weights (pass 0.0 outside training).

    Returns:
        ``(out, weights)``: out (B, T, D); weights (B, H, T, S), before dropout.
    """
    w_q, w_k, w_v = in_proj_weight.chunk(3)  # (D, D) each
    b_q, b_k, b_v = (None,) * 3 if in_proj_bias is None else in_proj_bias.chunk(3)
    q = split_heads(F.linear(query, w_q, b_q), n_heads)  # (B, H, T, Dh)
    k = split_heads(F.linear(key, w_k, b_k), n_heads)  # (B, H, S, Dh)
    v = split_heads(F.linear(value, w_v, b_v), n_heads)  # (B, H, S, Dh)
    if rotate is not None:
        q, k = rotate(q, k)  # positions enter the queries and keys (RoPE)
    mask, score_bias = _for_every_head(mask), _for_every_head(score_bias)  # 3-D -> (B, 1, T, S)
    heads, weights = scaled_dot_product_attention(q, k, v, mask, bias=score_bias)
    if dropout_p > 0:
        heads = F.dropout(weights, dropout_p) @ v  # (B, H, T, Dh)
    out = F.linear(merge_heads(heads), out_proj_weight, out_proj_bias)  # (B, T, D)
    return out, weights  # (B, T, D), (B, H, T, S)


def _for_every_head(x: Tensor | None) -> Tensor | None:
    """A 3-D mask or bias (B, T, S) as (B, 1, T, S), shared by the heads; others unchanged."""
    return x.unsqueeze(1) if x is not None and x.dim() == 3 else x


def fused_multi_head_attention(
    query: Tensor, key: Tensor, value: Tensor,
    in_proj_weight: Tensor, in_proj_bias: Tensor | None,
    out_proj_weight: Tensor, out_proj_bias: Tensor | None,
    n_heads: int, mask: Tensor | None = None, *,
    score_bias: Tensor | None = None, rotate: Rotate | None = None, dropout_p: float = 0.0,
) -> Tensor:
    """:func:`multi_head_attention`'s ``out`` (B, T, D), through torch's fused kernel
    ``F.scaled_dot_product_attention``: faster, and it never forms the weights, so it has
    none to return. The arguments are those of :func:`multi_head_attention`."""
    w_q, w_k, w_v = in_proj_weight.chunk(3)  # (D, D) each
    b_q, b_k, b_v = (None,) * 3 if in_proj_bias is None else in_proj_bias.chunk(3)
    q = split_heads(F.linear(query, w_q, b_q), n_heads)  # (B, H, T, Dh)
    k = split_heads(F.linear(key, w_k, b_k), n_heads)  # (B, H, S, Dh)
    v = split_heads(F.linear(value, w_v, b_v), n_heads)  # (B, H, S, Dh)
    if rotate is not None:
        q, k = rotate(q, k)
    mask, score_bias = _for_every_head(mask), _for_every_head(score_bias)
    attn_mask = mask
    if score_bias is not None:  # one float mask: the bias, and -inf where not allowed
        attn_mask = score_bias.to(q.dtype)
        if mask is not None:
            attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    return F.linear(merge_heads(heads), out_proj_weight, out_proj_bias)  # (B, T, D)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with torch's parameter layout: it owns the weights and calls
    :func:`multi_head_attention`.

    Args:
        d_model: D, the width of queries, keys, values and output.
        n_heads: H; D must be divisible by H.
        dropout: dropout on the attention weights during training.
        bias: give the input and output projections biases.
    """

    def __init__(
        self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))  # W^Q; W^K; W^V
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * d_model))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's initialisation: Xavier-uniform input projections, zero biases."""
        nn.init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    @property
    def d_head(self) -> int:
        """Dh = D // H."""
        return self.d_model // self.n_heads

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        *,
        score_bias: Tensor | None = None,
        rotate: Rotate | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Attend from each query position to the key/value positions, in every head.

        Args:
            query: (B, T, D).
            key: (B, S, D).
            value: (B, S, D).
            mask: boolean, True = may attend, broadcastable to (B, H, T, S): e.g. (T, S) for
                a causal mask, (B, 1, 1, S) for key padding; a 3-D mask is (B, T, S), applied
                to every head.
            score_bias: float, added to the scaled scores, with the shapes of ``mask``: e.g.
                a relative position bias (1, H, T, S).
            rotate: ``rotate(q, k) -> (q, k)`` on the split queries (B, H, T, Dh) and keys
                (B, H, S, Dh), e.g. ``coursepkg.positional.Rotary()``.

        Returns:
            ``(out, weights)``: out (B, T, D); weights (B, H, T, S), every head's attention
            weights (before dropout).
        """
        self._check(query, key, value, mask, score_bias)
        return multi_head_attention(
            query, key, value, self.in_proj_weight, self.in_proj_bias,
            self.out_proj.weight, self.out_proj.bias, self.n_heads, mask,
            score_bias=score_bias, rotate=rotate,
            dropout_p=self.dropout if self.training else 0.0,
        )

    def fused_forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        *,
        score_bias: Tensor | None = None,
        rotate: Rotate | None = None,
    ) -> Tensor:
        """``forward``'s ``out`` (B, T, D) through torch's fused kernel, without the weights
        (:func:`fused_multi_head_attention`). It is not ``forward``, so
        :func:`record_attention` records nothing for it. Same arguments as ``forward``."""
        self._check(query, key, value, mask, score_bias)
        return fused_multi_head_attention(
            query, key, value, self.in_proj_weight, self.in_proj_bias,
            self.out_proj.weight, self.out_proj.bias, self.n_heads, mask,
            score_bias=score_bias, rotate=rotate,
            dropout_p=self.dropout if self.training else 0.0,
        )

    def _check(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None,
        score_bias: Tensor | None,
    ) -> None:
        """Refuse inputs that do not fit, with a message that names the shapes."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.dim() != 3 or x.shape[-1] != self.d_model:
                raise ValueError(
                    f"expected {name} of shape (B, length, {self.d_model}), got {tuple(x.shape)}"
                )
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                "query, key and value need the same batch size B, got query "
                f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value need the same length S, got key {tuple(key.shape)} and value "
                f"{tuple(value.shape)}"
            )
        scores = torch.Size((query.shape[0], self.n_heads, query.shape[1], key.shape[1]))
        if mask is not None:
            if mask.dtype != torch.bool:
                raise ValueError(
                    f"mask must be boolean (True = may attend), got dtype {mask.dtype}; for an "
                    "additive float mask, pass it as score_bias"
                )
            check_mask_fits(_for_every_head(mask), scores)
        if score_bias is not None:
            check_mask_fits(_for_every_head(score_bias), scores, "score_bias")

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """A module with the weights of ``torch.nn.MultiheadAttention(batch_first=True)``.

        Only the standard configuration is supported: equal query/key/value widths, no
        ``add_bias_kv`` and no ``add_zero_attn``.
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise ValueError(f"expected a torch.nn.MultiheadAttention, got {type(m).__name__}")
        if not m.batch_first:
            raise ValueError("from_torch needs batch_first=True (the course is batch first)")
        if not m._qkv_same_embed_dim:
            raise ValueError("from_torch needs kdim == vdim == embed_dim (one in_proj_weight)")
        if m.bias_k is not None:
            raise ValueError("from_torch does not support add_bias_kv=True")
        if m.add_zero_attn:
            raise ValueError("from_torch does not support add_zero_attn=True")
        ours = cls(m.embed_dim, m.num_heads, dropout=m.dropout, bias=m.in_proj_bias is not None)
        ours.to(device=m.in_proj_weight.device, dtype=m.in_proj_weight.dtype)
        ours.load_state_dict(m.state_dict())
        ours.train(m.training)
        return ours

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}, "
                f"dropout={self.dropout}, bias={self.in_proj_bias is not None}")


@contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Collect the attention weights of every :class:`MultiHeadAttention` inside ``model``.

    ``with record_attention(model) as maps: model(x)`` leaves in ``maps`` one entry per module
    that ran through ``forward``: its qualified name in ``model`` (``"layers.0.self_attn"``,
    ``"decoder.1.cross_attn"``; ``""`` for ``model`` itself) -> its weights (B, H, T, S) from
    its last call, detached, in the order the modules first ran (``list(maps.values())`` is
    the layers in order). It works with forward hooks, removed on exit (also on an
    exception); nothing is stored on the modules. A module called through ``fused_forward``
    (a layer built with ``fused=True``) computes no weights and gets no entry.

    Args:
        model: any module; it may be a MultiHeadAttention itself.

    Yields:
        The dict, filled as the model runs.
    """
    maps: dict[str, Tensor] = {}

    def keeper(name: str) -> Callable:
        def hook(module: nn.Module, args: tuple, output: tuple[Tensor, Tensor]) -> None:
            maps[name] = output[1].detach()  # (B, H, T, S)
        return hook

    handles = [module.register_forward_hook(keeper(name))
               for name, module in model.named_modules()
               if isinstance(module, MultiHeadAttention)]
    try:
        yield maps
    finally:
        for handle in handles:
            handle.remove()
