"""Chapter 6's diagram: positions added to the embeddings, or queries and keys rotated (RoPE).

- :func:`diagram_positions`: the two ways side by side, then one pair of a real query and key
  rotated by RoPE at several placements: the angle between them depends on the offset only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from coursepkg.positional import apply_rope
from coursepkg.viz import common
from coursepkg.viz.diagrams.canvas import INK, MUTED, Canvas, Diagram

__all__ = ["diagram_positions"]

Q_LINE, K_LINE = "#c4622d", "#2b7bb9"  # the query and key colours, dark enough for arrows


def _flow(canvas: Canvas, x0: float, y_top: float, rope: bool, labels: Sequence[str]) -> None:
    """One way of bringing in positions, as two rows of boxes (the query's and the key's)."""
    word_q, word_k = labels
    for row, (word, pos, letter, role) in enumerate(
            [(word_q, "m", "q", "query"), (word_k, "n", "k", "key")]):
        y = y_top - row * 1.9
        x = x0
        token = canvas.box(x + 1.1, y, 2.2, 1.1, f"$x_{{{pos}}}$", role="embedding",
                           shape=f"'{word}'", size=10)
        x = token.x1
        if not rope:
            plus = canvas.op(x + 0.9, y, "+", size=10, r=0.35)
            canvas.arrow(token.right, plus.left)
            p = canvas.box(x + 0.9, y + 1.05 if row == 0 else y - 1.05, 1.5, 0.7,
                           f"$p_{{{pos}}}$", role="position", size=9.5)
            canvas.arrow(p.bottom if row == 0 else p.top, plus.top if row == 0 else plus.bottom)
            x = plus.x1
        w = canvas.box(x + 1.9, y, 1.6, 0.9, f"$W^{letter.upper()}$", role="token", size=9.5)
        canvas.arrow((x, y), w.left)
        out_role = role
        if rope:
            vec = canvas.box(w.x1 + 1.2, y, 1.0, 0.9, f"${letter}$", role=out_role, size=10)
            canvas.arrow(w.right, vec.left)
            rot = canvas.box(vec.x1 + 1.6, y, 1.9, 0.9, f"$R({pos}\\theta)$", role="position",
                             size=9.5)
            canvas.arrow(vec.right, rot.left)
            final = canvas.box(rot.x1 + 1.2, y, 1.2, 0.9, f"$\\tilde {letter}_{pos}$",
                               role=out_role, size=10)
            canvas.arrow(rot.right, final.left)
        else:
            final = canvas.box(w.x1 + 1.3, y, 1.2, 0.9, f"${letter}_{pos}$", role=out_role,
                               size=10)
            canvas.arrow(w.right, final.left)


def _angle(v: np.ndarray) -> float:
    return math.atan2(v[1], v[0])


def diagram_positions(
    q: Any, k: Any, *, pair: int = 0, placements: Sequence[tuple[int, int]] = ((4, 1), (6, 3),
                                                                              (4, 2)),
    labels: Sequence[str] = ("dog", "I"), base: float = 10000.0,
) -> Diagram:
    """Positions added to the token vectors, against RoPE's rotated queries and keys.

    Top left: a position vector p_m is added to the token's vector before the projections, so
    the query and the key each carry their absolute position. Top right: RoPE projects first and
    then rotates the query by the angle mθ and the key by nθ. Bottom: one pair of dimensions of
    the real query and key, rotated by :func:`coursepkg.positional.apply_rope` at each placement
    (m, n): the query's pair (orange) and the key's (blue) turn with the positions, but the
    angle between them, and so their dot product, is the same whenever m - n is the same, as in
    the lecture's "dog" three positions after "I".

    Args:
        q: (Dh,) the query of the first word before rotation (the chapter's ``q_dog``).
        k: (Dh,) the key of the second word before rotation (``k_i``).
        pair: which pair (2i, 2i + 1) to draw (0 turns fastest, by one radian per position).
        placements: (m, n) the positions of the two words, one panel each.
        labels: the two words.
        base: the RoPE base, 10000 in Su et al. (2021).

    Returns:
        The diagram.

    Raises:
        ValueError: if q and k are not vectors of the same even width, or ``pair`` is out of
            range.
    """
    qv = torch.as_tensor(common.as_array(q, 1, "q (Dh,)"), dtype=torch.float64)
    kv = torch.as_tensor(common.as_array(k, 1, "k (Dh,)"), dtype=torch.float64)
    if qv.shape != kv.shape or qv.shape[0] % 2:
        raise ValueError(f"q and k must have the same even width, got {tuple(qv.shape)} and "
                         f"{tuple(kv.shape)}")
    d_head = qv.shape[0]
    if not 0 <= pair < d_head // 2:
        raise ValueError(f"pair must be in 0 .. {d_head // 2 - 1}, got {pair}")
    placements = [(int(m), int(n)) for m, n in placements]

    width, height = 28.0, 17.4
    canvas = Canvas(width, height, title="Positions added to the inputs, or queries and keys "
                                         "rotated")
    canvas.text(7.0, height - 2.0, "added (learned or sinusoidal)", size=10, weight="bold")
    canvas.text(21.0, height - 2.0, "rotated (RoPE)", size=10, weight="bold")
    _flow(canvas, 0.8, height - 4.2, rope=False, labels=labels)
    _flow(canvas, 14.4, height - 4.2, rope=True, labels=labels)
    canvas.text(7.0, height - 8.1, "$q_m \\cdot k_n$ mixes the words with m and n", size=9,
                color=MUTED)
    canvas.text(21.0, height - 8.1, "$\\tilde q_m \\cdot \\tilde k_n$ depends on the words "
                "and m − n only", size=9, color=MUTED)
    canvas.curve([14.0, 14.0], [height - 8.4, height - 1.6], color="#d6d6d0", linewidth=1.0)

    # -- the rotation of one pair at each placement
    radius = 2.3
    scale = radius / max(float(qv[2 * pair:2 * pair + 2].norm()),
                         float(kv[2 * pair:2 * pair + 2].norm()), 1e-9)
    panel_w = (width - 2.0) / len(placements)
    cy = 4.6
    canvas.text(width / 2, 8.15, f"RoPE on the pair ({2 * pair}, {2 * pair + 1}) of the real "
                f"query of '{labels[0]}' and key of '{labels[1]}'", size=9.5, weight="bold")
    for index, (m, n) in enumerate(placements):
        cx = 1.0 + panel_w * (index + 0.5)
        rotated_q = apply_rope(qv[None], torch.tensor([m]), base)[0, 2 * pair:2 * pair + 2]
        rotated_k = apply_rope(kv[None], torch.tensor([n]), base)[0, 2 * pair:2 * pair + 2]
        qa, ka = rotated_q.numpy() * scale, rotated_k.numpy() * scale
        circle = np.linspace(0, 2 * np.pi, 100)
        canvas.curve(cx + radius * np.cos(circle), cy + radius * np.sin(circle),
                     color="#d6d6d0", linewidth=0.8, zorder=1)
        canvas.curve([cx - radius - 0.2, cx + radius + 0.2], [cy, cy], color="#e4e4e0",
                     linewidth=0.6, zorder=1)
        canvas.curve([cx, cx], [cy - radius - 0.2, cy + radius + 0.2], color="#e4e4e0",
                     linewidth=0.6, zorder=1)
        canvas.arrow((cx, cy), (cx + qa[0], cy + qa[1]), color=Q_LINE, linewidth=2.2,
                     gid="query")
        canvas.arrow((cx, cy), (cx + ka[0], cy + ka[1]), color=K_LINE, linewidth=2.2,
                     gid="key")
        canvas.text(cx + qa[0] * 1.22, cy + qa[1] * 1.22, f"$\\tilde q$ {labels[0]}", size=8.5,
                    color=Q_LINE)
        canvas.text(cx + ka[0] * 1.22, cy + ka[1] * 1.22, f"$\\tilde k$ {labels[1]}", size=8.5,
                    color=K_LINE)
        a_k, a_q = _angle(ka), _angle(qa)
        delta = (a_q - a_k + np.pi) % (2 * np.pi) - np.pi  # from the key to the query
        arc = a_k + np.linspace(0.0, delta, 40)
        canvas.curve(cx + 0.8 * np.cos(arc), cy + 0.8 * np.sin(arc), color=INK, linewidth=1.2)
        score = float(rotated_q @ rotated_k)
        canvas.text(cx, cy - radius - 0.5,
                    f"{labels[0]} at {m}, {labels[1]} at {n}: m − n = {m - n}", size=8.5,
                    va="top")
        canvas.text(cx, cy - radius - 1.1,
                    f"angle {math.degrees(delta):.0f}°, pair's score {score:.2f}",
                    size=8.5, color=MUTED, va="top")
    offsets = ", ".join(f"({m}, {n})" for m, n in placements)
    alt = ("Two ways to bring in positions. Added: a position vector is added to each word's "
           "vector before the query and key projections. Rotated (RoPE): the query and the key "
           "are projected first, then rotated by angles proportional to their positions. Below, "
           f"one pair of dimensions of the query of '{labels[0]}' and the key of '{labels[1]}' "
           f"drawn as two arrows on a circle for the positions {offsets}: the arrows turn with "
           "the positions, but the angle between them, and the pair's score, is the same "
           "whenever the offset m minus n is the same.")
    return canvas.finish(alt)
