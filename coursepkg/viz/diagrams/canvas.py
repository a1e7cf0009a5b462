"""The drawing vocabulary of the book's diagrams: one palette, boxes, arrows, cells, grids, braces.

A diagram is drawn on a :class:`Canvas`: one matplotlib axes that fills its figure, measured in
*units* of :data:`UNIT` inches, with y pointing up. The canvas lays a light rounded panel behind
the drawing, so that dark text on mid-tone fills reads the same on the book's light and dark
themes (the figure itself is transparent around the panel). Every element returns the
rectangle it occupies (:class:`Rect`), whose sides and corners are where arrows attach.

- :data:`PALETTE`: the one colour of every role (``query``, ``key``, ``value``, ``state``,
  ``gate``, ``embedding``, ``output``, ...), the same in every chapter. Patches drawn in a role
  carry the role's name as their ``gid``, so a test can find them.
- :meth:`Canvas.box`, :meth:`Canvas.op`, :meth:`Canvas.tag`, :meth:`Canvas.text`: labelled
  boxes (with an optional shape annotation), operators in circles (+, ×, tanh), labels on a
  role's colour, free text.
- :meth:`Canvas.arrow`: straight, curved or bent (through corner points) arrows, with labels.
- :meth:`Canvas.cells`: a vector as a row or a column of cells, in a role's colour or coloured
  by the values of a real tensor.
- :meth:`Canvas.grid`: a matrix as a grid coloured by its values (scores red and blue around 0,
  weights grey from 0 to 1, ``-inf`` light grey and written "−∞"), optionally with the numbers in
  the cells, token labels and a small colour bar (:meth:`Canvas.colour_bar`).
- :meth:`Canvas.brace`, :meth:`Canvas.frame`: a curly brace ("the same weights", "4 heads")
  and a dashed frame around a group ("repeated N times").
- :class:`Diagram`: what every diagram function returns, the figure and its alt text; a page
  shows it as SVG (its ``_repr_svg_``), :func:`show_svg` does the same for any figure.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle
from matplotlib.path import Path

from coursepkg.viz import common

__all__ = [
    "INK", "MUTED", "PALETTE", "PANEL", "UNIT", "Canvas", "Diagram", "Palette", "Rect", "show_svg",
    "darker", "text_width", "weight_text",
]

UNIT = 0.25
"""Inches per canvas unit: a figure of 28 units is 7 inches wide, the width of the book's text."""

INK = "#222222"
"""Text and outlines."""
MUTED = "#6b6b6b"
"""Secondary text (shape annotations, captions) and light arrows."""
SHAPE_INK = "#474747"
"""Shape annotations inside boxes (darker than MUTED: they sit on coloured fills)."""
PANEL = "#fbfbf8"
PANEL_EDGE = "#d6d6d0"


@dataclass(frozen=True)
class Palette:
    """The fill colour of every role a diagram draws, one per role for the whole book.

    Mid-tone tints (from the Okabe-Ito colour-blind-safe set) under dark text, so a label stays
    legible on every fill; a role is never shown by colour alone (its letter or name is written
    too).
    """

    query: str = "#f4a582"  # orange: what a position looks for
    key: str = "#92c5de"  # blue: what a position offers to be matched on
    value: str = "#a6dba0"  # green: what a position hands over (and the context made of values)
    embedding: str = "#d4c4ec"  # lavender: a token's vector x_t
    position: str = "#e8d6a6"  # sand: a position's vector p_t
    state: str = "#f9e07f"  # yellow: a recurrent hidden state h_t
    cell: str = "#e6b54a"  # gold: the LSTM's cell c_t and its path
    gate: str = "#f4b6d0"  # pink: a gate (sigmoid) of the LSTM
    output: str = "#c9ced6"  # grey-blue: outputs, logits, predictions
    token: str = "#ffffff"  # white: a token (a word, a character)
    attention: str = "#e3c9ef"  # violet: an attention sublayer
    feedforward: str = "#b9e3d6"  # teal: a position-wise feed-forward network
    norm: str = "#e4e4e4"  # light grey: a layer normalisation
    recurrent: str = "#fbeeb8"  # light yellow: a recurrent cell, the box that makes h_t
    mask: str = "#d9d9d9"  # grey: a masked (forbidden) cell
    highlight: str = "#d1495b"  # red outline: the one element the caption talks about
    heads: tuple[str, ...] = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00")
    """Outline colours of heads 0, 1, 2, ... (strong colours: they mark, they do not fill)."""

    def role(self, name: str) -> str:
        """The colour of a role, by name; ``ValueError`` naming the roles for an unknown one."""
        if name not in self.roles():
            raise ValueError(f"unknown role {name!r}; the roles are {', '.join(self.roles())}")
        return getattr(self, name)

    @classmethod
    def roles(cls) -> tuple[str, ...]:
        """The names of the roles (the single colours, not ``heads``)."""
        return tuple(f.name for f in fields(cls) if f.name != "heads")

    def head(self, h: int) -> str:
        """The outline colour of head ``h`` (the colours repeat after six heads)."""
        return self.heads[h % len(self.heads)]


PALETTE = Palette()
"""The palette of every diagram of the book."""


class Rect(NamedTuple):
    """An axis-aligned rectangle of a canvas (x0, y0 its lower left corner), and its anchors."""

    x0: float
    y0: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x0 + self.w / 2

    @property
    def cy(self) -> float:
        return self.y0 + self.h / 2

    @property
    def x1(self) -> float:
        return self.x0 + self.w

    @property
    def y1(self) -> float:
        return self.y0 + self.h

    @property
    def top(self) -> tuple[float, float]:
        return (self.cx, self.y1)

    @property
    def bottom(self) -> tuple[float, float]:
        return (self.cx, self.y0)

    @property
    def left(self) -> tuple[float, float]:
        return (self.x0, self.cy)

    @property
    def right(self) -> tuple[float, float]:
        return (self.x1, self.cy)

    @property
    def center(self) -> tuple[float, float]:
        return (self.cx, self.cy)

    def at(self, side: str, fraction: float) -> tuple[float, float]:
        """A point on a side (``"top"``, ``"bottom"``, ``"left"``, ``"right"``), ``fraction``
        of the way along it (left to right, bottom to top)."""
        if side in ("top", "bottom"):
            return (self.x0 + fraction * self.w, self.y1 if side == "top" else self.y0)
        return (self.x0 if side == "left" else self.x1, self.y0 + fraction * self.h)

    def union(self, other: Rect) -> Rect:
        x0, y0 = min(self.x0, other.x0), min(self.y0, other.y0)
        return Rect(x0, y0, max(self.x1, other.x1) - x0, max(self.y1, other.y1) - y0)


class Cells(NamedTuple):
    """A vector drawn as cells: the rectangle of the whole, and of every cell in order."""

    rect: Rect
    cells: tuple[Rect, ...]


class Grid(NamedTuple):
    """A matrix drawn as a grid: its rectangle, the image of its values, and the cell size."""

    rect: Rect
    image: AxesImage
    cell: float

    def cell_rect(self, row: int, col: int) -> Rect:
        """The rectangle of one cell (row 0 at the top)."""
        rows = self.image.get_array().shape[0]
        return Rect(self.rect.x0 + col * self.cell, self.rect.y0 + (rows - 1 - row) * self.cell,
                    self.cell, self.cell)


def weight_text(value: float) -> str:
    """How a weight is written in a cell: "0" for an exact zero, else two decimals."""
    return "0" if value == 0 else f"{value:.2f}"


def _as_matrix(values: Any, what: str) -> np.ndarray:
    """A 2-D float array from a tensor or array (leading dimensions of size 1 dropped); a boolean
    mask (True = may attend) becomes 0 where allowed and -inf where not, as it is added to the
    scores."""
    if isinstance(values, torch.Tensor) and values.dtype == torch.bool:
        values = torch.zeros(values.shape).masked_fill(~values, float("-inf"))
    elif isinstance(values, np.ndarray) and values.dtype == bool:
        values = np.where(values, 0.0, -np.inf)
    return common.as_array(values, 2, what)


def _luminance(rgba: Sequence[float]) -> float:
    return 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2]


class Canvas:
    """A figure to draw a diagram on, in units of :data:`UNIT` inches, y pointing up.

    Args:
        width: the width in units (28 units is 7 inches, the width of the book's text).
        height: the height in units.
        title: a title at the top of the panel (leave about 1.2 units for it).

    Attributes:
        figure: the figure (transparent outside the panel).
        ax: the one axes, filling the figure, with limits ``(0, width)`` and ``(0, height)``.
    """

    def __init__(self, width: float, height: float, *, title: str | None = None) -> None:
        self.width, self.height = width, height
        self.figure = Figure(figsize=(width * UNIT, height * UNIT), facecolor="none")
        self.ax: Axes = self.figure.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_axis_off()
        self.ax.patch.set_alpha(0.0)
        self.ax.add_patch(FancyBboxPatch(
            (0.12, 0.12), width - 0.24, height - 0.24, boxstyle="round,pad=0,rounding_size=0.5",
            facecolor=PANEL, edgecolor=PANEL_EDGE, linewidth=0.8, zorder=0, gid="panel"))
        if title is not None:
            self.text(width / 2, height - 0.75, title, size=11, weight="bold")

    # ------------------------------------------------------------------ text and boxes

    def text(
        self, x: float, y: float, s: str, *, size: float = 10, color: str = INK,
        ha: str = "center", va: str = "center", weight: str = "normal", style: str = "normal",
        rotation: float = 0, zorder: float = 6, **kwargs: Any,
    ) -> Any:
        """Write ``s`` at (x, y), centred by default. Returns the Text artist."""
        return self.ax.text(x, y, s, fontsize=size, color=color, ha=ha, va=va, weight=weight,
                            style=style, rotation=rotation, zorder=zorder, **kwargs)

    def box(
        self, cx: float, cy: float, w: float, h: float, label: str = "", *, role: str = "token",
        shape: str | None = None, size: float = 10, dashed: bool = False, rounded: bool = True,
        edge: str | None = None, linewidth: float = 1.0, weight: str = "normal",
        fill: str | None = None, zorder: float = 3,
    ) -> Rect:
        """A box centred on (cx, cy) filled with the colour of ``role``, with a label.

        Args:
            cx, cy: the centre.
            w, h: the size in units.
            label: the text in the box (mathtext allowed: ``"$h_t$"``).
            role: a name of :class:`Palette` (the fill, and the patch's ``gid``).
            shape: a second, smaller line under the label: a tensor's shape such as
                ``"(B, T, D)"``, or a note.
            size: the label's font size.
            dashed: a dashed outline (something optional, or not drawn in full).
            rounded: rounded corners.
            edge: the outline colour (default: ink).
            linewidth: the outline width.
            weight: the label's font weight.
            fill: a fill that overrides the role's colour (the gid stays the role).
            zorder: drawing order.

        Returns:
            The box's rectangle.
        """
        rect = Rect(cx - w / 2, cy - h / 2, w, h)
        style = "round,pad=0,rounding_size=0.22" if rounded else "square,pad=0"
        self.ax.add_patch(FancyBboxPatch(
            (rect.x0, rect.y0), w, h, boxstyle=style,
            facecolor=fill if fill is not None else PALETTE.role(role),
            edgecolor=edge or INK, linewidth=linewidth, linestyle="--" if dashed else "-",
            zorder=zorder, gid=role))
        if shape is None:
            if label:
                self.text(cx, cy, label, size=size, weight=weight, zorder=zorder + 1)
        else:
            self.text(cx, cy + 0.2 * min(h, 1.6), label, size=size, weight=weight,
                      zorder=zorder + 1)
            self.text(cx, cy - 0.27 * min(h, 1.6), shape, size=size - 2.5, color=SHAPE_INK,
                      zorder=zorder + 1)
        return rect

    def op(self, cx: float, cy: float, symbol: str, *, r: float = 0.42, role: str = "token",
           size: float = 11) -> Rect:
        """An operator in a circle (``"+"``, ``"×"``, ``"tanh"``...). Returns its bounding
        rectangle."""
        self.ax.add_patch(Circle((cx, cy), r, facecolor=PALETTE.role(role), edgecolor=INK,
                                 linewidth=1.0, zorder=4, gid=role))
        self.text(cx, cy, symbol, size=size, zorder=5)
        return Rect(cx - r, cy - r, 2 * r, 2 * r)

    # ------------------------------------------------------------------ arrows

    def arrow(
        self, start: tuple[float, float], end: tuple[float, float], *, label: str | None = None,
        via: Sequence[tuple[float, float]] = (), bend: float = 0.0, color: str = INK,
        linewidth: float = 1.2, dashed: bool = False, head: bool = True,
        label_pos: float = 0.5, label_offset: tuple[float, float] = (0.0, 0.0),
        label_size: float = 9, label_color: str | None = None, zorder: float = 2,
        gid: str | None = None,
    ) -> FancyArrowPatch:
        """An arrow from ``start`` to ``end``.

        Args:
            start, end: the two points (the head is at ``end``).
            label: text placed beside the arrow (on a patch of the panel's colour, so that it
                stays legible across lines).
            via: corner points of a bent arrow, in order (straight segments between them).
            bend: with no ``via``, curve the arrow (matplotlib's ``arc3`` radius, e.g. 0.3).
            color, linewidth, dashed: the line.
            head: draw an arrow head (False: a plain line).
            label_pos: where along the arrow the label sits (0 start, 1 end), measured on the
                segments.
            label_offset: moves the label from that point, in units.
            label_size, label_color: the label's font size and colour.
            zorder: drawing order.
            gid: an id for the arrow (tests find arrows by it).

        Returns:
            The arrow patch.
        """
        style = "-|>,head_length=0.45,head_width=0.22" if head else "-"
        common_style = dict(arrowstyle=style, mutation_scale=12, color=color,
                            linewidth=linewidth, linestyle="--" if dashed else "-",
                            shrinkA=0, shrinkB=0, zorder=zorder, gid=gid)
        points = [start, *via, end]
        if via:
            patch = FancyArrowPatch(path=Path(points), **common_style)
        else:
            patch = FancyArrowPatch(start, end, connectionstyle=f"arc3,rad={bend}",
                                    **common_style)
        self.ax.add_patch(patch)
        if label:
            x, y = _along(points, label_pos)
            self.text(x + label_offset[0], y + label_offset[1], label, size=label_size,
                      color=label_color or color,
                      bbox=dict(boxstyle="round,pad=0.15", facecolor=PANEL, edgecolor="none"))
        return patch

    # ------------------------------------------------------------------ vectors and matrices

    def cells(
        self, x0: float, y0: float, values: Any = None, *, n: int | None = None,
        role: str = "embedding", vertical: bool = False, cell: float = 0.5,
        limits: tuple[float, float] | None = None, cmap: str = "RdBu_r",
        numbers: str | Callable[[float], str] | None = None, frame: str | None = None,
        name: str | None = None, linewidth: float = 0.8, size: float = 7,
    ) -> Cells:
        """A vector as a row (or a column, top to bottom) of square cells, lower left at (x0, y0).

        Args:
            x0, y0: the lower left corner of the whole.
            values: a real vector (a tensor or array of shape (n,)): the cells are coloured by
                its values (``cmap``, symmetric around 0 unless ``limits``), and outlined in the
                colour of ``role``. None: ``n`` plain cells filled with the role's colour.
            n: the number of cells when ``values`` is None.
            role: the vector's role (fill, or outline when coloured by values).
            vertical: a column, first entry at the top.
            cell: the side of a cell, in units.
            limits: the colour scale of ``values``.
            cmap: the colour map of ``values``.
            numbers: write each value in its cell (a format such as ``"{:.1f}"`` or a function).
            frame: the outline colour (default: ink for plain cells, the role's colour, made
                darker, for coloured ones).
            name: the label of the image of values (tests find it by ``get_label()``).
            linewidth: the outline width.
            size: the font size of the numbers.

        Returns:
            The rectangle of the whole and of each cell.
        """
        if values is not None:
            vector = common.as_array(values, 1, "a vector (n,)")
            n = vector.shape[0]
        elif n is None or n < 1:
            raise ValueError("cells needs values or a positive n")
        rects = tuple(
            Rect(x0, y0 + (n - 1 - i) * cell, cell, cell) if vertical
            else Rect(x0 + i * cell, y0, cell, cell) for i in range(n))
        whole = Rect(x0, y0, cell if vertical else n * cell, n * cell if vertical else cell)
        if values is None:
            for rect in rects:
                self.ax.add_patch(Rectangle((rect.x0, rect.y0), cell, cell,
                                            facecolor=PALETTE.role(role), edgecolor=frame or INK,
                                            linewidth=linewidth, zorder=3, gid=role))
            return Cells(whole, rects)
        matrix = vector[:, None] if vertical else vector[None, :]
        if limits is None:
            bound = max(float(np.abs(vector[np.isfinite(vector)]).max(initial=0.0)), 1e-6)
            limits = (-bound, bound)
        self._image(whole, matrix, limits=limits, cmap=cmap, name=name or role)
        for rect in rects:
            self.ax.add_patch(Rectangle((rect.x0, rect.y0), cell, cell, facecolor="none",
                                        edgecolor=frame or INK, linewidth=linewidth * 0.6,
                                        zorder=4))
        self.ax.add_patch(Rectangle((whole.x0, whole.y0), whole.w, whole.h, facecolor="none",
                                    edgecolor=frame or darker(PALETTE.role(role)),
                                    linewidth=linewidth * 2.2, zorder=5, gid=role))
        if numbers is not None:
            image = self.ax.images[-1]
            self._numbers(image, matrix, rects, numbers, size)
        return Cells(whole, rects)

    def grid(
        self, x0: float, y0: float, values: Any, *, cell: float = 0.6, kind: str = "scores",
        limits: tuple[float, float] | None = None, cmap: str | None = None,
        numbers: str | Callable[[float], str] | None = None, row_labels: Sequence[str] = (),
        col_labels: Sequence[str] = (), row_role: str | None = None,
        col_role: str | None = None, name: str | None = None, size: float = 7,
        label_size: float = 9,
    ) -> Grid:
        """A matrix as a grid of square cells, row 0 at the top, lower left corner at (x0, y0).

        Args:
            x0, y0: the lower left corner.
            values: a real (R, C) matrix (tensor or array; leading dimensions of size 1 are
                dropped). A boolean mask (True = may attend) is drawn as what it adds to the
                scores: 0 where allowed, −∞ where not.
            cell: the side of a cell, in units.
            kind: ``"scores"`` (red positive, blue negative, symmetric around 0, the colours of
                the chapters' plots), ``"weights"`` (white 0 to black 1), ``"counts"`` (white 0
                to dark blue at the largest count) or ``"mask"`` (0 white, −∞ grey).
            limits: the colour scale (default: from ``kind`` and the values).
            cmap: a colour map that overrides the kind's.
            numbers: write every value in its cell: a format (``"{:.2f}"``) or a function; −∞
                is written "−∞". The text is white on dark cells.
            row_labels, col_labels: labels left of the rows and above the columns.
            row_role, col_role: draw each label on a small tag of that role's colour (queries
                as rows, keys as columns).
            name: the image's label (tests find grids by ``get_label()``).
            size: the font size of the numbers.
            label_size: the font size of the labels.

        Returns:
            The grid's rectangle, its image (whose array is the matrix drawn) and the cell size.
        """
        matrix = _as_matrix(values, "a matrix (R, C)")
        rows, cols = matrix.shape
        rect = Rect(x0, y0, cols * cell, rows * cell)
        finite = matrix[np.isfinite(matrix)]
        if kind == "scores":
            bound = max(float(np.abs(finite).max(initial=0.0)), 1e-6)
            limits, cmap = limits or (-bound, bound), cmap or "RdBu_r"
        elif kind == "weights":
            limits, cmap = limits or (0.0, 1.0), cmap or "Greys"
        elif kind == "counts":
            largest = max(float(finite.max(initial=0.0)), 1.0)
            limits, cmap = limits or (0.0, largest), cmap or "Blues"
        elif kind == "mask":
            limits, cmap = limits or (0.0, 1.0), cmap or "Greys"
        else:
            raise ValueError(f"kind must be scores, weights, counts or mask, got {kind!r}")
        image = self._image(rect, matrix, limits=limits, cmap=cmap, name=name or kind)
        for i in range(rows + 1):
            self.ax.plot([rect.x0, rect.x1], [rect.y0 + i * cell] * 2, color="white",
                         linewidth=1.0, zorder=4)
        for j in range(cols + 1):
            self.ax.plot([rect.x0 + j * cell] * 2, [rect.y0, rect.y1], color="white",
                         linewidth=1.0, zorder=4)
        self.ax.add_patch(Rectangle((rect.x0, rect.y0), rect.w, rect.h, facecolor="none",
                                    edgecolor=MUTED, linewidth=0.8, zorder=5))
        grid = Grid(rect, image, cell)
        if numbers is not None:
            self._numbers(image, matrix, None, numbers, size, grid=grid)
        for r, label in enumerate(row_labels):
            y = rect.y1 - (r + 0.5) * cell
            self.tag(rect.x0 - 0.15, y, label, row_role, ha="right", size=label_size)
        for c, label in enumerate(col_labels):
            x = rect.x0 + (c + 0.5) * cell
            self.tag(x, rect.y1 + 0.15, label, col_role, va="bottom", size=label_size)
        return grid

    def colour_bar(self, x0: float, y0: float, image: AxesImage, *, length: float = 3.0,
                   thickness: float = 0.3, label: str = "", fmt: str = "{:.2g}") -> Rect:
        """A small horizontal colour bar for ``image``'s scale: the gradient, its two ends
        written under it, and a label above. Returns its rectangle."""
        vmin, vmax = image.get_clim()
        rect = Rect(x0, y0, length, thickness)
        self.ax.imshow(np.linspace(vmin, vmax, 64)[None, :], cmap=image.get_cmap(), vmin=vmin,
                       vmax=vmax, extent=(x0, x0 + length, y0, y0 + thickness), aspect="auto",
                       interpolation="bilinear", zorder=3, label="colour bar")
        self.ax.add_patch(Rectangle((x0, y0), length, thickness, facecolor="none",
                                    edgecolor=MUTED, linewidth=0.6, zorder=4))
        self.text(x0, y0 - 0.12, fmt.format(vmin), size=7, color=MUTED, va="top")
        self.text(x0 + length, y0 - 0.12, fmt.format(vmax), size=7, color=MUTED, va="top")
        if label:
            self.text(x0 + length / 2, y0 + thickness + 0.12, label, size=7.5, color=MUTED,
                      va="bottom")
        return rect

    # ------------------------------------------------------------------ groups

    def brace(self, start: tuple[float, float], end: tuple[float, float], label: str = "", *,
              side: str = "below", depth: float = 0.35, size: float = 9,
              color: str = MUTED) -> Any:
        """A curly brace from ``start`` to ``end`` (a horizontal or a vertical span), its tip
        pointing to ``side`` (``"below"``/``"above"`` for a horizontal span,
        ``"left"``/``"right"`` for a vertical one), with a label beyond the tip. Returns the
        label's Text (or None)."""
        (xa, ya), (xb, yb) = start, end
        horizontal = side in ("below", "above")
        sign = -1 if side in ("below", "left") else 1
        length = abs(xb - xa) if horizontal else abs(yb - ya)
        # the classic brace: two sigmoids per half, curling at the ends and at the tip
        half = np.linspace(0, length / 2, 51)
        curl = 14.0  # per unit: the curls are about a third of a unit long
        rise = (1 / (1 + np.exp(-curl * half)) + 1 / (1 + np.exp(-curl * (half - half[-1]))))
        profile = np.concatenate([rise, rise[-2::-1]]) - 0.5
        profile = profile / profile.max() * depth
        along = np.linspace(0, length, 101)
        if horizontal:
            x0 = min(xa, xb)
            xs, ys = x0 + along, ya + sign * profile
            tip = (x0 + length / 2, ya + sign * (depth + 0.12))
        else:
            y0 = min(ya, yb)
            xs, ys = xa + sign * profile, y0 + along
            tip = (xa + sign * (depth + 0.12), y0 + length / 2)
        self.ax.plot(xs, ys, color=color, linewidth=1.1, zorder=3)
        if not label:
            return None
        ha = "center" if horizontal else ("right" if sign < 0 else "left")
        va = ("top" if sign < 0 else "bottom") if horizontal else "center"
        return self.text(*tip, label, size=size, color=color, ha=ha, va=va)

    def frame(self, rect: Rect, label: str = "", *, pad: float = 0.3, corner: str = "right",
              size: float = 10, color: str = MUTED) -> Rect:
        """A dashed rounded frame around ``rect`` (a group repeated, or shared), with a label
        outside its ``corner`` side (``"right"`` or ``"left"``), e.g. ``"N×"``. Returns the
        frame's rectangle."""
        outer = Rect(rect.x0 - pad, rect.y0 - pad, rect.w + 2 * pad, rect.h + 2 * pad)
        self.ax.add_patch(FancyBboxPatch(
            (outer.x0, outer.y0), outer.w, outer.h, boxstyle="round,pad=0,rounding_size=0.35",
            facecolor="none", edgecolor=color, linewidth=1.1, linestyle=(0, (4, 3)), zorder=1,
            gid="frame"))
        if label:
            x = outer.x1 + 0.2 if corner == "right" else outer.x0 - 0.2
            self.text(x, outer.cy, label, size=size, color=color,
                      ha="left" if corner == "right" else "right", weight="bold")
        return outer

    def highlight(self, rect: Rect, *, pad: float = 0.08, linewidth: float = 2.2,
                  dashed: bool = False) -> None:
        """Outline ``rect`` in the highlight colour (the element the caption talks about)."""
        self.ax.add_patch(Rectangle((rect.x0 - pad, rect.y0 - pad), rect.w + 2 * pad,
                                    rect.h + 2 * pad, facecolor="none",
                                    edgecolor=PALETTE.highlight, linewidth=linewidth, zorder=7,
                                    linestyle=(0, (3, 3)) if dashed else "-", gid="highlight"))

    def legend(self, x: float | None, y: float, entries: Sequence[tuple[str, str]], *,
               size: float = 9, gap: float = 1.0) -> float:
        """A row of legend entries from (x, y) rightwards (x None: centred on the canvas): a
        swatch of each role's colour and its label (a role ``"window"``/``"next"`` draws a
        solid/dashed highlight frame). Returns the x where the row ends."""
        if x is None:
            total = sum(0.85 + text_width(label, size) + gap for _, label in entries) - gap
            x = (self.width - total) / 2
        for role, label in entries:
            if role in ("window", "next"):
                self.highlight(Rect(x, y - 0.3, 0.6, 0.6), pad=0.0,
                               linewidth=2.0 if role == "window" else 1.0,
                               dashed=role == "next")
            else:
                self.box(x + 0.3, y, 0.6, 0.6, role=role, rounded=False, linewidth=0.8)
            self.text(x + 0.85, y, label, size=size, ha="left")
            x += 0.85 + text_width(label, size) + gap
        return x - gap

    def curve(self, xs: Any, ys: Any, *, color: str = INK, linewidth: float = 1.2,
              dashed: bool = False, zorder: float = 2) -> None:
        """A plain polyline through the points (xs, ys)."""
        self.ax.plot(xs, ys, color=color, linewidth=linewidth, linestyle="--" if dashed else "-",
                     zorder=zorder, solid_capstyle="round")

    # ------------------------------------------------------------------ internals

    def _image(self, rect: Rect, matrix: np.ndarray, *, limits: tuple[float, float], cmap: str,
               name: str) -> AxesImage:
        finite = np.isfinite(matrix)
        shown = np.ma.masked_array(np.where(finite, matrix, 0.0), mask=~finite)
        colour_map = matplotlib.colormaps[cmap].with_extremes(bad=PALETTE.mask)
        image = self.ax.imshow(shown, cmap=colour_map, vmin=limits[0], vmax=limits[1],
                               extent=(rect.x0, rect.x1, rect.y0, rect.y1), aspect="auto",
                               interpolation="nearest", zorder=3, label=name)
        return image

    def _numbers(self, image: AxesImage, matrix: np.ndarray, rects: Sequence[Rect] | None,
                 numbers: str | Callable[[float], str], size: float, grid: Grid | None = None,
                 ) -> None:
        write = numbers.format if isinstance(numbers, str) else numbers
        for index, ((row, col), value) in enumerate(np.ndenumerate(matrix)):
            rect = rects[index] if rects is not None else grid.cell_rect(row, col)
            if np.isfinite(value):
                text, dark = write(value), _luminance(image.to_rgba(value)) < 0.5
            else:
                text, dark = (common.NEG_INF_LABEL if value < 0 else f"{value}"), False
            self.text(rect.cx, rect.cy, text, size=size, color="white" if dark else INK,
                      zorder=6)

    def tag(self, x: float, y: float, label: str, role: str | None, *, ha: str = "center",
            va: str = "center", size: float = 9, weight: str = "normal") -> Rect:
        """A label on a small rounded patch of its role's colour (a query's "q", a row's
        token), anchored at (x, y) as ``ha`` and ``va`` say; with ``role`` None, plain text.
        Returns the patch's rectangle."""
        w = text_width(label, size, weight) + 0.3
        h = size / 72 / UNIT * 1.25
        cx = {"left": x + w / 2, "right": x - w / 2}.get(ha, x)
        cy = {"bottom": y + h / 2, "top": y - h / 2}.get(va, y)
        rect = Rect(cx - w / 2, cy - h / 2, w, h)
        if role is not None:
            self.ax.add_patch(FancyBboxPatch(
                (rect.x0, rect.y0), w, h, boxstyle="round,pad=0,rounding_size=0.15",
                facecolor=PALETTE.role(role), edgecolor="none", zorder=5, gid=role))
        self.text(cx, cy, label, size=size, weight=weight, zorder=6)
        return rect

    def finish(self, alt: str) -> Diagram:
        """The diagram: this canvas's figure and its alt text."""
        return Diagram(self.figure, alt)


def text_width(s: str, size: float = 10, weight: str = "normal") -> float:
    """The width of ``s`` written at font ``size``, in canvas units (mathtext is measured as
    typeset)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath

    if not s.strip():
        return 0.0
    path = TextPath((0, 0), s, size=size, prop=FontProperties(weight=weight))
    return path.get_extents().width / 72 / UNIT


def darker(color: str, amount: float = 0.35) -> tuple[float, ...]:
    """``color`` darkened by ``amount`` (0 unchanged, 1 black), as RGBA: the outline of a
    role's vector, a head's colour as text."""
    rgba = np.array(matplotlib.colors.to_rgba(color))
    rgba[:3] *= 1 - amount
    return tuple(rgba)


def _along(points: Sequence[tuple[float, float]], fraction: float) -> tuple[float, float]:
    """The point ``fraction`` of the way along a polyline."""
    p = np.asarray(points, dtype=float)
    lengths = np.hypot(*np.diff(p, axis=0).T)
    target = fraction * lengths.sum()
    for (a, b), length in zip(zip(p[:-1], p[1:], strict=True), lengths, strict=True):
        if target <= length or length == lengths[-1]:
            t = 0.0 if length == 0 else min(target / length, 1.0)
            return tuple(a + t * (b - a))
        target -= length
    return tuple(p[-1])


# ---------------------------------------------------------------------- output


def _svg(fig: Figure) -> str:
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "coursepkg", "svg.fonttype": "path"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None}, facecolor="none")
    return buffer.getvalue()


@dataclass(frozen=True, repr=False)
class Diagram:
    """A diagram: the figure and an alt text that describes it.

    Shown as the last expression of a notebook cell, it displays as SVG (crisp at any zoom);
    the page puts :attr:`alt` into the cell's ``mystnb: image: alt:`` metadata.

    Attributes:
        figure: the matplotlib figure.
        alt: a description of the drawing for readers who cannot see it.
    """

    figure: Figure
    alt: str

    def svg(self) -> str:
        """The figure as SVG text (the same bytes for the same drawing)."""
        return _svg(self.figure)

    def png(self, dpi: float = 192) -> bytes:
        """The figure as PNG bytes, at twice the screen's resolution by default."""
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=dpi, facecolor="none")
        return buffer.getvalue()

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        return f"Diagram(alt={self.alt!r})"


def show_svg(fig: Figure) -> Any:
    """Any figure as an :class:`IPython.display.SVG`, to show it crisp at any zoom (the last
    expression of a cell)."""
    from IPython.display import SVG

    return SVG(_svg(fig))
