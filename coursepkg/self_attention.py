"""Self-attention: every token is a query, a key and a value.

A sequence of T vectors x_0 ... x_{T-1} (rows of X, (T, D); positions count from 0) is projected
three times, Q = X W^Q^T, K = X W^K^T, V = X W^V^T (q_t = W^Q x_t, as nn.Linear computes it), and
every position attends over every position (or, with a causal mask, over itself and the
positions before it):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

:func:`scaled_dot_product_attention` is that formula for any leading batch dimensions,
equal to ``torch.nn.functional.scaled_dot_product_attention`` (which returns only the
output); :class:`SelfAttention` owns W^Q, W^K, W^V and calls it.

Masks are boolean, **True = may attend**, broadcastable to the score shape (..., T, S); every
query must be allowed at least one key. Shape letters: B batch, T queries, S keys, D model
width, Dk query/key width, Dv value width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from coursepkg.attention import check_mask_fits

__all__ = ["SelfAttention", "causal_mask", "scaled_dot_product_attention"]


def _check_mask(mask: Tensor) -> None:
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be boolean (True = may attend), got dtype {mask.dtype}; for an "
            "additive float mask, add it to the scores yourself"
        )


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *, bias: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(Dk) + bias) v, with an optional boolean mask.

    Args:
        q: (..., T, Dk) queries.
        k: (..., S, Dk) keys.
        v: (..., S, Dv) values.
        mask: boolean, broadcastable to (..., T, S); True where query t may attend to key s.
            Masked scores become -inf, so their weights are exactly 0.
        bias: float, broadcastable to (..., T, S), added to the scaled scores (chapter 6's
            relative position bias); None adds nothing.

    Returns:
        ``(out, weights)``: out (..., T, Dv), the weighted averages of the values; weights
        (..., T, S), each row non-negative and summing to 1.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries and keys need the same width Dk, got q {tuple(q.shape)} and "
            f"k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"keys and values need the same length S, got k {tuple(k.shape)} and "
            f"v {tuple(v.shape)}"
        )
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T, S)
    if bias is not None:
        check_mask_fits(bias, scores.shape, "bias")
        scores = scores + bias  # (..., T, S)
    if mask is not None:
        _check_mask(mask)
        check_mask_fits(mask, scores.shape)  # (..., T, S)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., T, S)
    return weights @ v, weights  # (..., T, Dv), (..., T, S)


def causal_mask(T: int, device: torch.device | str | None = None) -> Tensor:
    """The mask that hides the future: position t may attend to positions 0..t.

    Args:
        T: the sequence length.
        device: where to create it.

    Returns:
        BoolTensor (T, T), True on and below the diagonal.
    """
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ValueError(f"T must be a positive int, got {T!r}")
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


class SelfAttention(nn.Module):
    """One head of self-attention: project x to Q, K, V and attend.

    Args:
        d_model: D, the width of the input vectors.
        d_k: Dk, the width of queries and keys (default D).
        d_v: Dv, the width of values and of the output (default D).
        causal: if True, position t attends only to positions 0..t.
        bias: give the three projections a bias.
    """

    def __init__(
        self,
        d_model: int,
        d_k: int | None = None,
        d_v: int | None = None,
        causal: bool = False,
        bias: bool = False,
    ) -> None:
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = d_model if d_v is None else d_v
        for name, value in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.d_model = d_model
        self.d_k = d_k
        self.d_v = d_v
        self.causal = causal
        self.w_q = nn.Linear(d_model, self.d_k, bias=bias)  # W^Q
        self.w_k = nn.Linear(d_model, self.d_k, bias=bias)  # W^K
        self.w_v = nn.Linear(d_model, self.d_v, bias=bias)  # W^V

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Attend from every position of x to every (allowed) position of x.

        Args:
            x: (B, T, D) the input sequence.
            mask: boolean, broadcastable to (B, T, T), True = may attend; combined with the
                causal mask when ``causal=True``.

        Returns:
            ``(out, weights)``: out (B, T, Dv); weights (B, T, T).
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"expected x of shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)  # (B, T, Dk), (B, T, Dk), (B, T, Dv)
        if mask is not None:
            _check_mask(mask)
        if self.causal:
            future = causal_mask(x.shape[1], device=x.device)  # (T, T)
            mask = future if mask is None else mask & future
        return scaled_dot_product_attention(q, k, v, mask)
