"""What every plot of :mod:`coursepkg.viz` shares: figures, colours, arrays, heatmaps, tables.

A plot of the package draws into axes it is given, or makes its own figure with
:func:`axes_or_new` (a :class:`matplotlib.figure.Figure`, not pyplot, so that a widget never makes
a notebook show its figure twice). Curves take colours ``C0, C1, ...`` in the order given
(:func:`colour`), so a label keeps its colour across the panels of one figure. Inputs may be
tensors or arrays (:func:`as_array`). Matrices are drawn with the one :func:`heatmap`.

- :func:`axes_or_new`, :func:`new_figure`, :func:`colour`, :func:`finish`: making and labelling
  axes.
- :func:`plot_curves`: one line per labelled curve against shared x values, the loop most plots
  of the book are made of.
- :func:`as_array`, :func:`positive_or_nan`, :func:`check_length`: inputs.
- :func:`heatmap`, :func:`token_ticks`, :func:`token_label`: matrices with token labels.
- :func:`figure_png`, :func:`html_escape`: what the widgets show.
- :func:`markdown_table`: a table of numbers for a page, as Markdown.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

__all__ = [
    "LINESTYLES", "NEG_INF_LABEL", "as_array", "axes_or_new", "check_length", "colour",
    "figure_png", "finish", "heatmap", "html_escape", "markdown_table", "new_figure",
    "plot_curves", "positive_or_nan", "token_label", "token_ticks",
]

NEG_INF_LABEL = "\u2212\u221e"  # "−∞", written into masked cells
LINESTYLES = ("-", "--", ":", "-.")


# ------------------------------------------------------------------------ figures and axes


def new_figure(width: float, height: float) -> Figure:
    """A figure outside pyplot, laid out so that titles, labels and colour bars fit."""
    return Figure(figsize=(width, height), layout="constrained")


def axes_or_new(ax: Axes | None, width: float, height: float) -> Axes:
    """``ax`` itself, or the axes of a new ``width`` x ``height`` figure when it is None."""
    return ax if ax is not None else new_figure(width, height).subplots()


def colour(index: int) -> str:
    """The colour of the ``index``-th curve: matplotlib's cycle C0 ... C9, then again."""
    return f"C{index % 10}"


def finish(
    ax: Axes,
    *,
    xlabel: str | None = None,
    ylabel: str | None = None,
    title: str | None = None,
    grid: str | None = "major",
    legend: float | None = 8,
) -> Axes:
    """Label the axes, draw the grid (``"major"``, ``"both"`` or None) and the legend (its font
    size, or None for no legend); labels that are None are left as they are."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    if grid is not None:
        ax.grid(True, which=grid, alpha=0.3)
    if legend is not None:
        ax.legend(fontsize=legend)
    return ax


# ------------------------------------------------------------------------ inputs


def as_array(values: Any, ndim: int, what: str) -> np.ndarray:
    """A float array of ``ndim`` dimensions from a tensor or an array.

    Leading dimensions of size 1 beyond ``ndim`` are dropped, so one sequence's (1, T, Hs) or
    one layer's (1, H, T, S) is accepted where (T, Hs) or (H, T, S) is expected.

    Raises:
        ValueError: ``expected <what>, got shape ...`` if the array is empty or has another
            number of dimensions.
    """
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    array = np.asarray(values, dtype=float)
    while array.ndim > ndim and array.shape[0] == 1:
        array = array[0]
    if array.ndim != ndim or array.size == 0:
        raise ValueError(f"expected {what}, got shape {array.shape}")
    return array


def positive_or_nan(values: Any) -> np.ndarray:
    """The values as floats, with NaN (a gap in a line) for what a log axis cannot show."""
    y = np.asarray(values, dtype=float)
    return np.where(y > 0, y, np.nan)


def check_length(label: str, values: Any, n: int, things: str) -> list:
    """``list(values)``, or ``ValueError("curve 'label' has k values for n things")``."""
    values = list(values)
    if len(values) != n:
        raise ValueError(f"curve {label!r} has {len(values)} values for {n} {things}")
    return values


def plot_curves(
    ax: Axes,
    x: Sequence[float],
    curves: Mapping[str, Sequence[float | None]],
    things: str,
    *,
    log_y: bool = False,
    colours: Mapping[str, str] | None = None,
    styles: bool = False,
    **style: Any,
) -> dict[str, np.ndarray]:
    """Draw one line per curve against ``x``, in the curves' order.

    Args:
        ax: the axes to draw into.
        x: the shared x values.
        curves: label -> one value per x; None (and, with ``log_y``, a value that is not
            positive) leaves a gap.
        things: what the x values are, for the error message ("positions", "widths", ...).
        log_y: make the y axis logarithmic.
        colours: label -> colour for some curves (the others: :func:`colour` of their index).
        styles: cycle through four line styles as well as colours, so that curves that
            coincide stay visible on top of each other.
        **style: passed to every ``ax.plot`` (``marker="o"``, ``markersize=3``, ...).

    Returns:
        label -> the y values drawn (NaN for the gaps).

    Raises:
        ValueError: if a curve does not have one value per x.
    """
    x = list(x)
    drawn = {}
    for index, (label, values) in enumerate(curves.items()):
        values = check_length(label, values, len(x), things)
        y = np.array([np.nan if v is None else float(v) for v in values])
        if log_y:
            y = positive_or_nan(y)
        if styles:
            style = {**style, "linestyle": LINESTYLES[index % len(LINESTYLES)]}
        ax.plot(x, y, color=(colours or {}).get(label, colour(index)), label=label, **style)
        drawn[label] = y
    if log_y:
        ax.set_yscale("log")
    return drawn


# ------------------------------------------------------------------------ matrices and tokens


def token_label(token: str) -> str:
    """A visible tick label for a character or word: newline, space and tab get a symbol."""
    return {"\n": "\u23ce", " ": "\u2423", "\t": "\u21e5"}.get(token, token)


def token_ticks(
    ax: Axes, axis: str, tokens: Sequence[str], *, fontsize: float = 8, rotation: float = 0,
    start: int = 0,
) -> None:
    """Label the ticks ``start, start + 1, ...`` of the x or y axis with tokens (see
    :func:`token_label`)."""
    labels = [token_label(t) for t in tokens]
    positions = range(start, start + len(labels))
    if axis == "x":
        ax.set_xticks(positions, labels=labels, fontsize=fontsize, rotation=rotation)
    else:
        ax.set_yticks(positions, labels=labels, fontsize=fontsize, rotation=rotation)


def heatmap(
    ax: Axes,
    matrix: np.ndarray,
    *,
    limits: tuple[float, float] | None = None,
    cmap: str = "RdBu_r",
    aspect: str = "equal",
    cells: str | Callable[[float], str] | None = None,
    fontsize: float = 7,
) -> AxesImage:
    """Draw a matrix as an image, row 0 at the top, one square per entry.

    Entries that are not finite (the ``-inf`` of a masked score) are light grey.

    Args:
        ax: the axes to draw into.
        matrix: (R, C) values.
        limits: ``(vmin, vmax)`` of the colour scale; None: symmetric around 0, as far as the
            largest finite absolute value (red positive, blue negative with ``RdBu_r``).
        cmap: a matplotlib colour map name.
        aspect: ``"equal"`` (square cells) or ``"auto"`` (fill the axes).
        cells: write every entry into its cell: a format such as ``"{:.2f}"``, or a function
            value -> text; ``-inf`` is written "−∞". The text is white on dark cells. None
            writes nothing.
        fontsize: the size of the cells' text.

    Returns:
        The image, for a colour bar.
    """
    matrix = np.asarray(matrix, dtype=float)
    finite = np.isfinite(matrix)
    if limits is None:
        bound = max(float(np.abs(matrix[finite]).max(initial=0.0)), 1e-6)
        limits = (-bound, bound)
    shown = np.ma.masked_array(np.where(finite, matrix, 0.0), mask=~finite)
    colour_map = matplotlib.colormaps[cmap].with_extremes(bad="0.85")
    image = ax.imshow(shown, cmap=colour_map, vmin=limits[0], vmax=limits[1], aspect=aspect,
                      interpolation="nearest")
    if cells is not None:
        write = cells.format if isinstance(cells, str) else cells
        for (row, col), value in np.ndenumerate(matrix):
            if np.isfinite(value):
                text = write(value)
                red, green, blue, _ = image.to_rgba(value)
                dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
            else:
                text, dark = (NEG_INF_LABEL if value < 0 else f"{value}"), False
            ax.text(col, row, text, ha="center", va="center", fontsize=fontsize,
                    color="white" if dark else "black")
    return image


# ------------------------------------------------------------------------ widgets and tables


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes, for an ``ipywidgets.Image``."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def html_escape(text: str) -> str:
    """Escape text for an HTML widget (``&``, ``<``, ``>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], *, align: str | None = None
) -> Any:
    """A table to display in a notebook (and in the rendered book) as Markdown.

    Args:
        header: the column titles (Markdown, so ``$a_s$`` is typeset in the book).
        rows: one sequence of cells per row, each cell already formatted as a string (numbers
            are converted with ``str``).
        align: one letter per column, ``"l"``, ``"c"`` or ``"r"`` (default: all right-aligned,
            as numbers are).

    Returns:
        An :class:`IPython.display.Markdown` object whose ``data`` is a GitHub-style table (a
        ``|`` inside a cell is escaped); display it as the last expression of a cell. The
        rendered book parses the table, and the Markdown in its cells, when the cell asks
        MyST-NB for the ``myst`` Markdown format (cell metadata ``mystnb: markdown_format:
        myst``); with the default format, ``commonmark``, the table stays text.

    Raises:
        ValueError: if a row does not have one cell per column, or ``align`` is malformed.
    """
    from IPython.display import Markdown

    align = "r" * len(header) if align is None else align
    if len(align) != len(header) or set(align) - set("lcr"):
        raise ValueError(f"align needs one of l, c, r per column ({len(header)}), got {align!r}")
    rule = {"l": ":--", "c": ":-:", "r": "--:"}

    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    lines = [line(header), "|" + "|".join(rule[a] for a in align) + "|"]
    for index, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"row {index} has {len(row)} cells for {len(header)} columns")
        lines.append(line(row))
    return Markdown("\n".join(lines))
