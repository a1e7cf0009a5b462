"""Chapter 4's diagram: self-attention over one sentence, from the token vectors to the outputs.

- :func:`diagram_self_attention`: the table of every token's query, key and value, then the
  score matrix, the causal mask, the weights and the outputs as grids, all computed from the
  real q, k and v it is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from coursepkg.self_attention import scaled_dot_product_attention
from coursepkg.viz import common
from coursepkg.viz.diagrams.canvas import MUTED, Canvas, Diagram, weight_text

__all__ = ["diagram_self_attention"]


def _matrix(values: Any, what: str) -> torch.Tensor:
    return torch.as_tensor(common.as_array(values, 2, what), dtype=torch.float64)


def diagram_self_attention(
    words: Sequence[str], q: Any, k: Any, v: Any, *, x: Any = None, mask: Any = None,
) -> Diagram:
    """Self-attention over one sentence: queries, keys and values, then the matrices.

    Top: one row per token, its vector x_t (when given) and the three vectors computed from it,
    q_t (orange), k_t (blue) and v_t (green), every cell coloured by its value (red positive,
    blue negative). Bottom, left to right: the scores E = Q Kᵀ / √d_k (row t: query t, column
    s: key s), the mask M' added to them (0 where a query may look, −∞ where it may not; drawn
    only when ``mask`` is given), the weights A (the softmax of each row, white 0 to black 1)
    and the outputs Y = A V. The scores, weights and outputs are computed here from ``q``,
    ``k``, ``v`` and ``mask`` with :func:`coursepkg.self_attention.scaled_dot_product_attention`,
    so they are the chapter's own numbers.

    Args:
        words: the T tokens (the chapter's ``"I want to sleep".split()``).
        q: (T, Dk) the queries (``head.w_q(x)[0]``).
        k: (T, Dk) the keys.
        v: (T, Dv) the values.
        x: (T, D) the tokens' vectors, drawn at the left of the table, or None.
        mask: (T, T) boolean, True where a query may attend (``causal_mask(T)``), or None.

    Returns:
        The diagram.

    Raises:
        ValueError: if the shapes do not agree.
    """
    words = list(words)
    T = len(words)
    q, k, v = _matrix(q, "q (T, Dk)"), _matrix(k, "k (T, Dk)"), _matrix(v, "v (T, Dv)")
    if not q.shape[0] == k.shape[0] == v.shape[0] == T or q.shape[1] != k.shape[1]:
        raise ValueError(f"expected q, k (T, Dk) and v (T, Dv) for T = {T} words, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    x_values = None if x is None else common.as_array(x, 2, "x (T, D)")
    if x_values is not None and x_values.shape[0] != T:
        raise ValueError(f"x has {x_values.shape[0]} rows for {T} words")
    bool_mask = None
    if mask is not None:
        bool_mask = torch.as_tensor(mask, dtype=torch.bool)
        if bool_mask.shape != (T, T):
            raise ValueError(f"expected a ({T}, {T}) mask, got {tuple(bool_mask.shape)}")
    d_k = q.shape[1]
    scores = q @ k.T / math.sqrt(d_k)  # (T, T)
    out, weights = scaled_dot_product_attention(q, k, v, bool_mask)  # (T, Dv), (T, T)

    vec_cell, cell = 0.5, 1.25
    word_w = max(2.4, 0.25 * max(len(w) for w in words) + 1.2)
    n_grids = 3 + (bool_mask is not None)
    bottom_w = word_w + (n_grids - 1) * T * cell + v.shape[1] * cell + (n_grids - 1) * 2.2 + 1.0
    width = max(27.0, bottom_w + 1.0)
    table_h = T * (vec_cell + 0.25)
    height = 3.0 + table_h + 2.3 + T * cell + 2.6
    canvas = Canvas(width, height, title=f"Self-attention over '{' '.join(words)}'")

    # -- the table of vectors
    top = height - 2.8
    column = [("embedding", "$x_t$", x_values)] if x_values is not None else []
    column += [("query", "$q_t = W^Q x_t$", q), ("key", "$k_t = W^K x_t$", k),
               ("value", "$v_t = W^V x_t$", v)]
    widths = [values.shape[1] * vec_cell for _, _, values in column]
    total = word_w + sum(widths) + 1.4 * (len(column) - 1) + 1.0
    x0 = (width - total) / 2 + word_w
    for t, word in enumerate(words):
        y = top - (t + 1) * (vec_cell + 0.25)
        canvas.text(x0 - 0.3, y + vec_cell / 2, word, size=10, ha="right")
    xc = x0 + 0.3
    for (role, header, values), w in zip(column, widths, strict=True):
        canvas.tag(xc + w / 2, top + 0.25, header, role, va="bottom", size=9.5)
        for t in range(T):
            y = top - (t + 1) * (vec_cell + 0.25)
            canvas.cells(xc, y, values[t], role=role, cell=vec_cell, name=f"{role}_{t}",
                         limits=_limits(values))
        xc += w + 1.4
    canvas.text(x0 - 0.3, top + 0.25, "token", size=8.5, color=MUTED, ha="right", va="bottom")

    # -- the matrices
    grid_top = top - table_h - 2.1
    y0 = grid_top - T * cell
    xg = (width - bottom_w) / 2 + word_w + 0.4
    short = [w if len(w) <= 6 else w[:5] + "…" for w in words]

    def place(values: Any, kind: str, name: str, numbers: Any, header: str,
              rows: bool = False, cols: Sequence[str] = (), col_role: str | None = "key"):
        nonlocal xg
        grid = canvas.grid(xg, y0, values, cell=cell, kind=kind, numbers=numbers, name=name,
                           row_labels=short if rows else (), row_role="query",
                           col_labels=cols, col_role=col_role, size=8, label_size=8)
        canvas.text(grid.rect.cx, y0 - 0.35, header, size=9, va="top")
        xg = grid.rect.x1
        return grid

    def operator(symbol: str) -> None:
        nonlocal xg
        canvas.text(xg + 1.1, y0 + T * cell / 2, symbol, size=12 if len(symbol) < 3 else 8.5,
                    color=MUTED)
        xg += 2.2

    place(scores, "scores", "scores", "{:.2f}", "scores $QK^\\top/\\sqrt{d_k}$", rows=True,
          cols=short)
    if bool_mask is not None:
        operator("+")
        place(bool_mask, "mask", "mask", lambda value: "0", "mask $M'$", cols=short)
    operator("softmax\nof each\nrow →")
    place(weights, "weights", "weights", weight_text, "weights $A$", cols=short)
    operator("× V =")
    place(out, "scores", "outputs", "{:.2f}", "outputs $Y = AV$", cols=(), col_role=None)
    canvas.text(width / 2, 0.7, "rows: queries (orange), columns: keys (blue)"
                + ("; the mask adds −∞ where a query may not look" if bool_mask is not None
                   else ""), size=8.5, color=MUTED)

    masked = (" A causal mask adds minus infinity above the diagonal, so every weight there "
              "is exactly 0." if bool_mask is not None else "")
    alt = (f"Self-attention over the {T} tokens '{' '.join(words)}'. At the top, a table gives "
           f"each token's query, key and value vectors (widths {d_k}, {d_k} and {v.shape[1]}) "
           "as rows of cells coloured by their values. Below, the score matrix of queries "
           "against keys, "
           + ("the mask, " if bool_mask is not None else "")
           + "the weights (each row a softmax that sums to one) and the outputs, the weights "
           f"times the values, are drawn as {T}-row grids with their numbers.{masked}")
    return canvas.finish(alt)


def _limits(values: Any) -> tuple[float, float]:
    bound = max(float(abs(torch.as_tensor(values)).max()), 1e-6)
    return (-bound, bound)
