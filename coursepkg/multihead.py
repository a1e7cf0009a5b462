"""Multi-head attention: several attention patterns at the cost of one.

One head of attention gives each query a single weighted average of the values: it can look
in one way only. Multi-head attention projects queries, keys and values once to the full
width D, cuts each projection into H heads of width Dh = D / H, lets every head attend on its
own, and concatenates the heads' outputs before a final projection W^O:

    head_h = Attention(Q W_h^Q, K W_h^K, V W_h^V),   out = concat(head_1 ... head_H) W^O.

The heads are a reshape, not a loop: :func:`split_heads` turns (B, T, D) into (B, H, T, Dh),
attention runs on all heads at once (chapter 4's :func:`scaled_dot_product_attention`
handles any leading dimensions), and :func:`merge_heads` undoes the split.

:class:`MultiHeadAttention` uses the parameter names of ``torch.nn.MultiheadAttention``
(``in_proj_weight`` stacks W^Q, W^K, W^V; ``out_proj`` is W^O), so
:meth:`MultiHeadAttention.from_torch` copies a torch module's weights unchanged.

Masks are boolean with **True = may attend**, broadcastable to (B, H, T, S). Shape letters:
B batch, T queries, S keys, D model width, H heads, Dh = D // H.

Two hooks serve chapter 6's encodings that act inside attention: ``rope_base`` rotates the
queries and keys of every head with :func:`coursepkg.positional.apply_rope`, and
``forward(..., score_bias=...)`` adds a bias such as a relative position bias to the scores.
``fused=True`` computes the same attention with torch's fused kernel (faster, but without the
weights); the tests prove both paths equal.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursepkg.positional import apply_rope
from coursepkg.self_attention import scaled_dot_product_attention

__all__ = ["MultiHeadAttention", "merge_heads", "split_heads"]


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


class MultiHeadAttention(nn.Module):
    """Multi-head attention with torch's parameter layout.

    Args:
        d_model: D, the width of queries, keys, values and output.
        n_heads: H; D must be divisible by H.
        dropout: dropout on the attention weights during training.
        bias: give the input and output projections biases.
        rope_base: if not None, rotate queries and keys with RoPE of this base (query t at
            position t, key s at position s; chapter 6).
        fused: compute attention with ``torch.nn.functional.scaled_dot_product_attention``;
            ``forward`` then returns None for the weights.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        rope_base: float | None = None,
        fused: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if rope_base is not None and (d_model // n_heads) % 2:
            raise ValueError(
                f"RoPE rotates pairs of dimensions: the head width {d_model // n_heads} must "
                "be even"
            )
        self.d_model = d_model
        self.n_heads = n_heads
        self.dropout = dropout
        self.rope_base = rope_base
        self.fused = fused
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
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from each query position to the key/value positions, in every head.

        Args:
            query: (B, T, D).
            key: (B, S, D).
            value: (B, S, D).
            mask: boolean, True = may attend, broadcastable to (B, H, T, S): e.g. (T, S) for
                a causal mask, (B, 1, 1, S) for key padding; a (B, T, S) mask is applied to
                every head.
            score_bias: float, broadcastable to (B, H, T, S), added to the scaled scores
                (e.g. a relative position bias (H, T, S)).

        Returns:
            ``(out, weights)``: out (B, T, D); weights (B, H, T, S), every head's attention
            weights (before dropout), or None when ``fused``.
        """
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
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)  # each (D, D)
        b_q, b_k, b_v = (
            self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None, None, None)
        )
        q = split_heads(F.linear(query, w_q, b_q), self.n_heads)  # (B, H, T, Dh)
        k = split_heads(F.linear(key, w_k, b_k), self.n_heads)  # (B, H, S, Dh)
        v = split_heads(F.linear(value, w_v, b_v), self.n_heads)  # (B, H, S, Dh)
        if self.rope_base is not None:
            q = apply_rope(q, base=self.rope_base)  # (B, H, T, Dh), query t at position t
            k = apply_rope(k, base=self.rope_base)  # (B, H, S, Dh), key s at position s
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # (B, 1, T, S): the same mask for every head
        if self.fused:
            heads = self._fused_attention(q, k, v, mask, score_bias)  # (B, H, T, Dh)
            return self.out_proj(merge_heads(heads)), None
        heads, weights = scaled_dot_product_attention(q, k, v, mask, bias=score_bias)
        if self.training and self.dropout > 0:
            heads = F.dropout(weights, self.dropout) @ v  # (B, H, T, Dh)
        return self.out_proj(merge_heads(heads)), weights  # (B, T, D), (B, H, T, S)

    def _fused_attention(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, score_bias: Tensor | None
    ) -> Tensor:
        """The same attention through torch's fused kernel: (B, H, T, Dh)."""
        if mask is not None and mask.dtype != torch.bool:
            raise ValueError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
        attn_mask = mask
        if score_bias is not None:  # one float mask: the bias, and -inf where not allowed
            attn_mask = score_bias.to(q.dtype)
            if mask is not None:
                attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
        dropout = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)

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
        extra = f", rope_base={self.rope_base}" if self.rope_base is not None else ""
        extra += ", fused=True" if self.fused else ""
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}, "
                f"dropout={self.dropout}, bias={self.in_proj_bias is not None}{extra}")
