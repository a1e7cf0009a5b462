"""Chapter 5's diagram: the split into heads, attention in every head, and the merge.

- :func:`diagram_heads`: the queries (T, D) cut into H heads by a view and a transpose, every
  head's weights, and the heads' outputs put back side by side, all from real tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from coursepkg.multihead import merge_heads, split_heads
from coursepkg.self_attention import scaled_dot_product_attention
from coursepkg.viz import common
from coursepkg.viz.diagrams.canvas import MUTED, PALETTE, Canvas, Diagram, Rect, darker

__all__ = ["diagram_heads"]


def _frame(canvas: Canvas, rect: Rect, color: str, gid: str, linewidth: float = 2.2) -> None:
    from matplotlib.patches import Rectangle

    canvas.ax.add_patch(Rectangle((rect.x0, rect.y0), rect.w, rect.h, facecolor="none",
                                  edgecolor=color, linewidth=linewidth, zorder=6, gid=gid))


def diagram_heads(q: Any, k: Any, v: Any, n_heads: int) -> Diagram:
    """Multi-head attention as reshapes: split, attend in every head, merge.

    Along the top, left to right: the queries Q of one sequence (T, D), every cell coloured by
    its value, with each head's block of columns framed in the head's colour; the same numbers
    viewed as (T, H, Dh) (each position's row cut into H pieces); and, after the transpose,
    one (T, Dh) matrix per head, (H, T, Dh). Each head then attends on its own: its weights
    (T, T), from its own queries and keys, and its output (T, Dh). Along the bottom, right to
    left, the way back: the outputs transposed to (T, H, Dh) and reshaped to (T, D), the heads
    side by side again, ready for W^O. Every matrix is computed here from ``q``, ``k`` and
    ``v`` with the package's :func:`coursepkg.multihead.split_heads`,
    :func:`coursepkg.self_attention.scaled_dot_product_attention` and
    :func:`coursepkg.multihead.merge_heads` (no mask), so the picture shows the chapter's own
    numbers.

    Args:
        q: (T, D) or (1, T, D) the queries after the projection (the page's ``q[:1]``).
        k: the keys, the same shape.
        v: the values, the same shape.
        n_heads: H, which divides D.

    Returns:
        The diagram.

    Raises:
        ValueError: if the shapes disagree or D is not divisible by H.
    """
    tensors = [torch.as_tensor(common.as_array(t, 2, "(T, D)"), dtype=torch.float64)
               for t in (q, k, v)]
    q2, k2, v2 = tensors
    if not q2.shape == k2.shape == v2.shape:
        raise ValueError(f"q, k and v must have the same shape (T, D), got "
                         f"{tuple(q2.shape)}, {tuple(k2.shape)}, {tuple(v2.shape)}")
    T, D = q2.shape
    H = n_heads
    if isinstance(H, bool) or not isinstance(H, int) or H < 1 or D % H:
        raise ValueError(f"n_heads must be a positive divisor of D = {D}, got {n_heads!r}")
    Dh = D // H
    q_heads, k_heads, v_heads = (split_heads(t[None], H)[0] for t in tensors)  # (H, T, Dh)
    out_heads, weights = scaled_dot_product_attention(q_heads, k_heads, v_heads)
    merged = merge_heads(out_heads[None])[0]  # (T, D)
    q_bound = float(q2.abs().max())
    out_bound = float(out_heads.abs().max())

    c = min(0.42, 5.4 / D, 2.4 / T)
    gap = 0.3
    head_h = T * c
    stack_h = H * head_h + (H - 1) * 0.9
    width = 28.0
    height = stack_h + 6.4
    canvas = Canvas(width, height, title=f"{H} heads: split, attend in every head, merge")
    top_y = height - 2.6  # top edge of the top row's matrices
    bottom_y = 1.6  # bottom edge of the bottom row's matrices
    x_a = 1.3
    x_b = x_a + D * c + 2.2
    x_c = x_b + D * c + (H - 1) * gap + 4.0
    x_d = x_c + Dh * c + 1.6
    x_e = x_d + T * c + 1.6

    def block_row(x0: float, y_top: float, values: torch.Tensor, pieces: bool, name: str,
                  bound: float) -> list[Rect]:
        """(T, D) as a grid (pieces False) or as (T, H, Dh), each row cut into H pieces;
        returns the rectangle of every head's block of columns."""
        rects = []
        for h in range(H):
            x = x0 + h * (Dh * c + (gap if pieces else 0.0))
            grid = canvas.grid(x, y_top - head_h, values[:, h * Dh:(h + 1) * Dh], cell=c,
                               kind="scores", limits=(-bound, bound), name=f"{name}_{h}")
            rects.append(grid.rect)
            _frame(canvas, grid.rect, PALETTE.head(h), gid=f"head_{h}")
        return rects

    # -- the way in (top row)
    qa = block_row(x_a, top_y, q2, False, "Q", q_bound)
    canvas.tag(qa[0].x0, top_y + 0.3, "Q", "query", ha="left", va="bottom", size=10)
    canvas.text(qa[-1].x1, top_y + 0.3, "(B, T, D)", size=8.5, color=MUTED, ha="right",
                va="bottom")
    qb = block_row(x_b, top_y, q2, True, "Q_view", q_bound)
    canvas.text((qb[0].x0 + qb[-1].x1) / 2, top_y + 0.3, "(B, T, H, Dh)", size=8.5,
                color=MUTED, va="bottom")
    canvas.arrow((qa[-1].x1 + 0.2, top_y - head_h / 2), (qb[0].x0 - 0.2, top_y - head_h / 2),
                 label="view", label_offset=(0.0, 0.45), label_size=8.5)
    head_tops = [top_y - h * (head_h + 0.9) for h in range(H)]
    for h, y in enumerate(head_tops):
        grid = canvas.grid(x_c, y - head_h, q_heads[h], cell=c, kind="scores",
                           limits=(-q_bound, q_bound), name=f"q_head_{h}")
        _frame(canvas, grid.rect, PALETTE.head(h), gid=f"head_{h}")
        canvas.text(x_c + Dh * c / 2, y - head_h - 0.12, f"head {h}", size=8, va="top",
                    color=darker(PALETTE.head(h)), weight="bold")
        wgrid = canvas.grid(x_d, y - head_h, weights[h], cell=c, kind="weights",
                            name=f"weights_{h}")
        _frame(canvas, wgrid.rect, PALETTE.head(h), gid=f"head_{h}", linewidth=1.2)
        ogrid = canvas.grid(x_e, y - head_h, out_heads[h], cell=c, kind="scores",
                            limits=(-out_bound, out_bound), name=f"out_head_{h}")
        _frame(canvas, ogrid.rect, PALETTE.head(h), gid=f"head_{h}")
        canvas.arrow((grid.rect.x1 + 0.15, y - head_h / 2), (wgrid.rect.x0 - 0.15, y - head_h / 2),
                     linewidth=1.0)
        canvas.arrow((wgrid.rect.x1 + 0.15, y - head_h / 2), (ogrid.rect.x0 - 0.15, y - head_h / 2),
                     linewidth=1.0)
    canvas.arrow((qb[-1].x1 + 0.2, top_y - head_h / 2), (x_c - 0.2, top_y - head_h / 2),
                 label="transpose (1, 2)", label_offset=(0.0, 0.45), label_size=8.5)
    canvas.text(x_c + Dh * c / 2, top_y + 0.3, "(B, H, T, Dh)", size=8.5, color=MUTED,
                va="bottom")
    canvas.text(x_d + T * c / 2, top_y + 0.3, "weights (T, T)", size=8.5, color=MUTED,
                va="bottom")
    canvas.text(x_e + Dh * c / 2, top_y + 0.3, "× values", size=8.5, color=MUTED,
                va="bottom")

    # -- the way back (bottom row, right to left)
    back_top = bottom_y + head_h
    mb = block_row(x_b, back_top, merged, True, "out_view", out_bound)
    ma = block_row(x_a, back_top, merged, False, "merged", out_bound)
    canvas.text((mb[0].x0 + mb[-1].x1) / 2, bottom_y - 0.3, "(B, T, H, Dh)", size=8.5,
                color=MUTED, va="top")
    canvas.text(ma[0].x0, bottom_y - 0.3, "(B, T, D): side by side, then $W^O$", size=8.5,
                color=MUTED, va="top", ha="left")
    last_out = Rect(x_e, head_tops[-1] - head_h, Dh * c, head_h)
    canvas.arrow(last_out.bottom, (mb[-1].x1 + 0.2, bottom_y + head_h / 2),
                 via=[(last_out.cx, bottom_y + head_h / 2)], label="transpose (1, 2)",
                 label_pos=0.75, label_offset=(0.0, 0.4), label_size=8.5)
    canvas.arrow((mb[0].x0 - 0.2, bottom_y + head_h / 2), (ma[-1].x1 + 0.2, bottom_y + head_h / 2),
                 label="reshape", label_offset=(0.0, 0.45), label_size=8.5)

    alt = (f"Multi-head attention with {H} heads on {T} positions of width {D}. The queries, "
           f"a {T} by {D} grid coloured by value with each head's {Dh} columns framed in its "
           f"own colour, are viewed as {T} rows of {H} pieces and transposed into {H} separate "
           f"{T} by {Dh} matrices, one per head. Each head has its own {T} by {T} attention "
           "weights and its own output; the outputs are transposed back and reshaped so that "
           "the heads sit side by side again, in the same columns they came from.")
    return canvas.finish(alt)
