"""Positional encodings: telling attention where each token is.

Self-attention without positions is permutation-equivariant (chapter 4): shuffle the tokens
and the outputs are shuffled the same way. Four remedies, all usable by chapter 7's
``TransformerLM(pos=...)``:

* :class:`LearnedPositionalEmbedding`: one learned vector per absolute position, added to the
  token embeddings (GPT); it has a hard maximum length.
* :func:`sinusoidal_encoding` (and :class:`SinusoidalPositions`, the same table as a module):
  a fixed table of sines and cosines of geometrically spaced frequencies, added to the token
  embeddings (the original Transformer):
  PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)).
* :class:`RelativePositionBias`: a learned bias per head and per clipped offset s - t (key
  position s minus query position t), added to the attention scores (in the spirit of Shaw et
  al. 2018 and T5).
* :func:`apply_rope` (and :class:`Rotary`, the hook attention calls): rotary position
  embedding (RoPE) rotates each pair (2i, 2i+1) of a query or key at position m by the angle
  m * base^(-2i/Dh), so the score of a query at m and a key at n depends on their content and
  on m - n only.

The last two act inside attention, and reach it at call time, as values: chapter 5's
``multi_head_attention(..., score_bias=bias, rotate=rotary)`` knows nothing about positions.

Offsets, for decoding with a cache: T queries need not be the first T positions. With
``offset=o`` they are at positions o .. o+T-1 and the S keys at 0 .. S-1 (usually S = o + T:
the keys are every position up to the last query), so the T rows computed with an offset are
the last T rows of the full computation over o + T positions.

Shape letters: T positions (queries), S key positions, D model width, H heads, Dh head width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = [
    "LearnedPositionalEmbedding",
    "RelativePositionBias",
    "Rotary",
    "SinusoidalPositions",
    "apply_rope",
    "rope_angles",
    "sinusoidal_encoding",
]


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_offset(offset: object) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an int >= 0, got {offset!r}")


def sinusoidal_encoding(
    T: int, d: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The sinusoidal position table of Vaswani et al. (2017).

    Args:
        T: number of positions (0 .. T-1).
        d: width of each encoding (even).
        base: the wavelength scale (10000 in the paper).
        dtype: floating dtype of the table.

    Returns:
        (T, d): ``PE[p, 2i] = sin(p * w_i)``, ``PE[p, 2i+1] = cos(p * w_i)`` with
        ``w_i = base^(-2i/d)``.
    """
    _check_positive("T", T)
    _check_positive("d", d)
    if d % 2:
        raise ValueError(f"d must be even (sines and cosines come in pairs), got {d}")
    positions = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    frequencies = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = positions * frequencies  # (T, d/2)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, d/2, 2)
    return table.reshape(T, d).to(dtype)  # (T, d): sin, cos, sin, cos, ...


class SinusoidalPositions(nn.Module):
    """The sinusoidal table as a module: ``forward(T) -> (T, d)`` for any T.

    Nothing is learned and nothing is cached: each call computes the rows it needs (in float64,
    then rounded once to the module's dtype), so there is no maximum length, and a long call
    leaves no state behind. The empty buffer ``anchor`` only carries the dtype and the device
    that ``.to()`` / ``.double()`` give the module.

    Args:
        d: width of each encoding (even).
        base: the wavelength scale (10000 in the paper).
    """

    def __init__(self, d: int, base: float = 10000.0) -> None:
        super().__init__()
        _check_positive("d", d)
        if d % 2:
            raise ValueError(f"d must be even (sines and cosines come in pairs), got {d}")
        self.d = d
        self.base = base
        self.register_buffer("anchor", torch.empty(0), persistent=False)

    def forward(self, T: int, *, offset: int = 0) -> Tensor:
        """The encodings of positions offset .. offset+T-1: (T, d)."""
        _check_positive("T", T)
        _check_offset(offset)
        table = sinusoidal_encoding(offset + T, self.d, self.base, dtype=self.anchor.dtype)
        return table[offset:].to(self.anchor.device)  # (T, d)

    def extra_repr(self) -> str:
        return f"d={self.d}, base={self.base}"


class LearnedPositionalEmbedding(nn.Module):
    """One learned vector per absolute position 0 .. max_len-1.

    Args:
        max_len: the longest sequence the model can read; longer ones raise an error.
        d: width of each position vector.
    """

    def __init__(self, max_len: int, d: int) -> None:
        super().__init__()
        _check_positive("max_len", max_len)
        _check_positive("d", d)
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, T: int) -> Tensor:
        """The vectors of positions 0 .. T-1: (T, d)."""
        _check_positive("T", T)
        if T > self.max_len:
            raise ValueError(
                f"a learned positional embedding has no vector for positions >= max_len="
                f"{self.max_len}, got a sequence of length {T}"
            )
        return self.weight[:T]


def rope_angles(
    positions: Tensor, d_head: int, base: float = 10000.0, dtype: torch.dtype | None = None
) -> Tensor:
    """The rotation angle of every pair at every position: ``m * base^(-2i/Dh)``.

    Args:
        positions: (T,) integer or float positions m.
        d_head: Dh (even).
        base: 10000 in Su et al. (2021).
        dtype: of the result (default: float32, or the float dtype of ``positions``).

    Returns:
        (T, Dh/2) angles.
    """
    if d_head % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions: Dh must be even, got {d_head}")
    if positions.dim() != 1:
        raise ValueError(f"expected positions of shape (T,), got {tuple(positions.shape)}")
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)  # (Dh/2,)
    angles = positions.to(torch.float64)[:, None] * theta  # (T, Dh/2)
    if dtype is None:
        dtype = positions.dtype if positions.is_floating_point() else torch.float32
    return angles.to(dtype)


def apply_rope(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Rotate each adjacent pair (2i, 2i+1) of x at position m by the angle m * base^(-2i/Dh).

    Applied to queries and keys (not values) before their dot product, it makes
    ``<rope(q, m), rope(k, n)>`` depend only on q, k and the offset m - n.

    Args:
        x: (..., T, Dh) queries or keys, Dh even.
        positions: (T,) the position of each row (default 0 .. T-1).
        base: 10000 in Su et al. (2021).

    Returns:
        (..., T, Dh), the rotated vectors (same norms).
    """
    T, d_head = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T, device=x.device)
    if positions.shape != (T,):
        raise ValueError(f"expected positions of shape ({T},), got {tuple(positions.shape)}")
    # Angles and their cos/sin in float64: rounding m * theta to a short dtype first would
    # turn large angles into noise (a step of 2 rad near m = 500 in bfloat16).
    angles = rope_angles(positions, d_head, base, dtype=torch.float64)  # (T, Dh/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, Dh/2)
    pairs = x.unflatten(-1, (d_head // 2, 2))  # (..., T, Dh/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]  # (..., T, Dh/2)
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)  # (..., T, Dh)


class Rotary(nn.Module):
    """RoPE as the hook attention calls: ``rotate(q, k) -> (q, k)``, both rotated by apply_rope.

    Chapter 5's ``multi_head_attention(..., rotate=Rotary())`` calls it on every head's
    queries and keys, after the projections and before the scores. It has no parameters.

    Args:
        base: 10000 in Su et al. (2021).
    """

    def __init__(self, base: float = 10000.0) -> None:
        super().__init__()
        self.base = base

    def forward(self, q: Tensor, k: Tensor, *, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Rotate queries at positions offset .. offset+T-1 and keys at positions 0 .. S-1.

        Args:
            q: (..., T, Dh) queries, Dh even.
            k: (..., S, Dh) keys.
            offset: the position of the first query (0 for a whole sequence; the number of
                tokens before them when a cache holds the earlier keys).

        Returns:
            ``(q, k)`` rotated, the same shapes.
        """
        _check_offset(offset)
        T, S = q.shape[-2], k.shape[-2]
        q_positions = torch.arange(offset, offset + T, device=q.device)  # (T,)
        k_positions = torch.arange(S, device=k.device)  # (S,)
        return apply_rope(q, q_positions, self.base), apply_rope(k, k_positions, self.base)

    def extra_repr(self) -> str:
        return f"base={self.base}"


class RelativePositionBias(nn.Module):
    """A learned score bias per head for each offset between key and query, clipped.

    The bias added to the score of the query at position t and the key at position s is
    ``b[h, clip(s - t)]``, with offsets clipped to [-max_distance, max_distance]: every pair at
    the same (clipped) offset shares one learned number per head.

    Args:
        n_heads: H.
        max_distance: offsets beyond this share the bias of the largest offset.
    """

    def __init__(self, n_heads: int, max_distance: int) -> None:
        super().__init__()
        _check_positive("n_heads", n_heads)
        _check_positive("max_distance", max_distance)
        self.n_heads = n_heads
        self.max_distance = max_distance
        self.bias = nn.Parameter(torch.zeros(n_heads, 2 * max_distance + 1))  # (H, 2M+1)

    def offsets(self, T: int, S: int | None = None, *, offset: int = 0) -> Tensor:
        """(T, S) clipped offsets s - t, shifted to indices 0 .. 2 max_distance.

        Query row r is at position t = offset + r, key column s at position s; S defaults to
        offset + T (the keys are every position up to the last query).
        """
        _check_positive("T", T)
        _check_offset(offset)
        S = offset + T if S is None else S
        _check_positive("S", S)
        queries = torch.arange(offset, offset + T)  # (T,): positions t
        relative = torch.arange(S)[None, :] - queries[:, None]  # (T, S): s - t
        clipped = relative.clamp(-self.max_distance, self.max_distance)
        return (clipped + self.max_distance).to(self.bias.device)

    def forward(self, T: int, S: int | None = None, *, offset: int = 0) -> Tensor:
        """The bias to add to the scores of T queries (at positions offset .. offset+T-1)
        against S keys (at 0 .. S-1): (H, T, S). Attention takes it as a per-head score bias
        (1, H, T, S): pass ``bias[None]``."""
        return self.bias[:, self.offsets(T, S, offset=offset)]  # (H, T, S)
