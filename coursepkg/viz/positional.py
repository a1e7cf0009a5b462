"""Chapter 6 (positional encodings): position tables, offsets, length tests, RoPE drawn.

- :func:`plot_position_table`: a table of position vectors (positions x dimensions) as a
  heatmap.
- :func:`plot_against_offset`: quantities against the offset between two positions.
- :func:`plot_accuracy_by_position`: each model's accuracy at every position, with the
  positions longer than in training shaded, gaps where a model cannot run, and the last point
  of a model that cannot run beyond some position marked.
- :func:`plot_rope_pairs` and :class:`RopeExplorer` (``rope_explorer``): the pairs of a query
  and a key rotated by RoPE, and a widget to slide the query's position and its offset to the
  key and watch the score stay the same for a fixed offset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from coursepkg.positional import apply_rope, sinusoidal_encoding
from coursepkg.viz import common
from coursepkg.viz.explorer import Explorer

__all__ = [
    "RopeExplorer", "plot_accuracy_by_position", "plot_against_offset", "plot_position_table",
    "plot_rope_pairs", "rope_explorer",
]


def plot_position_table(
    table: Any,
    ax: Axes | None = None,
    *,
    title: str = "Position vectors",
    xlabel: str = "dimension",
    ylabel: str = "position p",
) -> Axes:
    """A table of position vectors as a heatmap: one row per position, one column per dimension.

    Values are drawn in red (positive) and blue (negative) on a colour scale symmetric around
    0, with a colour bar; position 0 is the top row.

    Args:
        table: (T, d) position vectors (a tensor or an array), e.g.
            :func:`coursepkg.positional.sinusoidal_encoding`.
        ax: the axes to draw into; a new figure is made when None.
        title: the axes title.
        xlabel: the x axis label.
        ylabel: the y axis label.

    Returns:
        The axes, with one image of the table and a colour bar beside it.

    Raises:
        ValueError: if the table is not a non-empty 2-D table.
    """
    values = common.as_array(table, 2, "a non-empty 2-D table")
    ax = common.axes_or_new(ax, 7.0, 4.2)
    image = common.heatmap(ax, values, aspect="auto")
    ax.figure.colorbar(image, ax=ax, pad=0.02, fraction=0.046)
    return common.finish(ax, xlabel=xlabel, ylabel=ylabel, title=title, grid=None, legend=None)


def plot_against_offset(
    offsets: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    ax: Axes | None = None,
    *,
    title: str = "Against the offset between two positions",
    xlabel: str = "offset k",
    ylabel: str = "value",
) -> Axes:
    """One line per curve against an offset between positions, with a grey line at offset 0.

    Curves cycle through four line styles as well as colours, so curves that coincide (as
    those of a quantity that depends on the offset only do) stay visible on top of each other.

    Args:
        offsets: the offsets on the x axis.
        curves: label -> one value per offset.
        ax: the axes to draw into; a new figure is made when None.
        title: the axes title.
        xlabel: the x axis label.
        ylabel: the y axis label.

    Returns:
        The axes, with one line per curve (then the line at 0 if 0 is among the offsets) and a
        legend.

    Raises:
        ValueError: if there is no curve or a curve does not have one value per offset.
    """
    if not curves:
        raise ValueError("plot_against_offset needs at least one curve")
    ax = common.axes_or_new(ax, 6.5, 3.8)
    x = np.asarray(list(offsets), dtype=float)
    for index, (label, values) in enumerate(curves.items()):  # thinner lines on top
        style = dict(linestyle=common.LINESTYLES[index % 4], linewidth=2.2 - 0.4 * (index % 4))
        common.plot_curves(ax, x, {label: values}, "offsets",
                           colours={label: common.colour(index)}, **style)
    if len(x) and x.min() <= 0 <= x.max():
        ax.axvline(0.0, color="0.6", linewidth=0.8)
    return common.finish(ax, xlabel=xlabel, ylabel=ylabel, title=title)


def plot_accuracy_by_position(
    positions: Sequence[int],
    curves: Mapping[str, Sequence[float | None]],
    ax: Axes | None = None,
    *,
    trained_length: int | None = None,
    chance: float | None = None,
    title: str = "Accuracy at each position",
    xlabel: str = "position t",
    ylabel: str = "accuracy",
) -> Axes:
    """One line per model: its accuracy at every position of a sequence.

    A model that cannot be evaluated at a position (None) has a gap there, rather than a made-up
    value. A model that cannot run beyond some position (its values are None from there to the
    end, as a learned table of L positions) gets a large marker on its last point and a note
    "cannot run beyond ...", so that its line stays visible where it coincides with others.
    Positions at or beyond ``trained_length``, never seen in training, are shaded.

    Args:
        positions: the positions on the x axis.
        curves: label -> one accuracy in [0, 1] (or None) per position.
        ax: the axes to draw into; a new figure is made when None.
        trained_length: the training sequences' length L: positions >= L are shaded and
            labelled as longer than in training.
        chance: the accuracy of guessing, drawn as a dotted horizontal line.
        title: the axes title.
        xlabel: the x axis label.
        ylabel: the y axis label.

    Returns:
        The axes: one line per curve, then the chance line (if any), then one single-point line
        (no legend entry) per model that stops early; the texts are the shading's label (if
        any), then one note per model that stops early. y goes from 0 to 1 (a little more with
        ``trained_length``, for its label); the legend is to the right.

    Raises:
        ValueError: if a curve does not have one value per position.
    """
    ax = common.axes_or_new(ax, 8.5, 4.0)
    x = np.asarray(list(positions), dtype=float)
    drawn = common.plot_curves(ax, x, curves, "positions", styles=True, marker="o", markersize=2.5,
                               linewidth=1.4)
    if chance is not None:
        ax.axhline(chance, color="0.4", linestyle=":", linewidth=1, label=f"chance: {chance:.3f}")
    top = 1.03
    if trained_length is not None and len(x):
        ax.axvspan(trained_length - 0.5, x.max() + 0.5, color="0.9", zorder=0)
        ax.text(trained_length, 1.06,
                f" positions \u2265 {trained_length}: longer than in training", fontsize=8,
                color="0.35", va="center")
        top = 1.12
    for index, (label, y) in enumerate(drawn.items()):
        finite = np.flatnonzero(np.isfinite(y))
        if len(finite) == 0 or finite[-1] == len(y) - 1:
            continue  # runs to the end (or never runs): nothing to mark
        last = finite[-1]
        ax.plot(x[last], y[last], marker="D", markersize=8, color=common.colour(index),
                markeredgecolor="black", linestyle="none", zorder=5, label=f"_{label} stops")
        beyond = (f"L = {trained_length}" if trained_length == x[last] + 1
                  else f"position {x[last]:g}")
        ax.annotate(f"{label}: cannot run\nbeyond {beyond}", (x[last], y[last]),
                    xytext=(-10, -34 - 26 * index), textcoords="offset points", ha="right",
                    fontsize=8, color=common.colour(index),
                    arrowprops=dict(arrowstyle="-", color=common.colour(index), linewidth=0.8))
    ax.set_ylim(-0.03, top)
    common.finish(ax, xlabel=xlabel, ylabel=ylabel, title=title, legend=None)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


def _rope_vectors(
    q: torch.Tensor, k: torch.Tensor, m: int, n: int, base: float
) -> tuple[np.ndarray, np.ndarray]:
    """q rotated to position m and k to position n, in float64: (Dh,) each."""
    q_m = apply_rope(q.to(torch.float64)[None], torch.tensor([m]), base=base)[0]  # (Dh,)
    k_n = apply_rope(k.to(torch.float64)[None], torch.tensor([n]), base=base)[0]  # (Dh,)
    return q_m.numpy(), k_n.numpy()


def _check_rope_pair(q: Any, k: Any) -> tuple[torch.Tensor, torch.Tensor]:
    q, k = torch.as_tensor(q, dtype=torch.float64), torch.as_tensor(k, dtype=torch.float64)
    if q.dim() != 1 or q.shape != k.shape or q.shape[0] < 2 or q.shape[0] % 2:
        raise ValueError(f"q and k must be vectors of the same even width Dh >= 2, got "
                         f"{tuple(q.shape)} and {tuple(k.shape)}")
    return q, k


def _draw_rope_pairs(
    axes: Sequence[Axes], q: torch.Tensor, k: torch.Tensor, m: int, n: int, base: float,
    labels: Sequence[str],
) -> np.ndarray:
    """Draw pair i of q at position m and of k at position n into axes[i]; return the
    contribution of every pair to the score, (Dh/2,). The first axes holds the (invisible)
    lines that a figure legend shows."""
    q_m, k_n = _rope_vectors(q, k, m, n, base)
    d_head = q.shape[0]
    thetas = base ** (-np.arange(0, d_head, 2) / d_head)  # (Dh/2,)
    contributions = (q_m.reshape(-1, 2) * k_n.reshape(-1, 2)).sum(axis=1)  # (Dh/2,)
    for i, ax in enumerate(axes):
        pairs = {f"{labels[0]}, position 0": (q.numpy()[2 * i:2 * i + 2], "C0", 0.3),
                 f"{labels[1]}, position 0": (k.numpy()[2 * i:2 * i + 2], "C1", 0.3),
                 f"{labels[0]} at m = {m}": (q_m[2 * i:2 * i + 2], "C0", 1.0),
                 f"{labels[1]} at n = {n}": (k_n[2 * i:2 * i + 2], "C1", 1.0)}
        radius = max(float(np.hypot(*vector)) for vector, _, _ in pairs.values()) or 1.0
        circle = np.linspace(0.0, 2 * np.pi, 181)
        ax.plot(radius * np.cos(circle), radius * np.sin(circle), color="0.85", linewidth=0.8)
        for label, (vector, tint, alpha) in pairs.items():
            style = "-" if alpha == 1.0 else "--"
            ax.annotate("", xy=tuple(vector), xytext=(0.0, 0.0),
                        arrowprops=dict(arrowstyle="-|>", color=tint, alpha=alpha,
                                        linewidth=1.6 if alpha == 1.0 else 1.0, linestyle=style))
            ax.plot([], [], color=tint, alpha=alpha, linestyle=style, label=label)  # legend
        limit = 1.15 * radius
        ax.set_xlim(-limit, limit)
        ax.set_ylim(-limit, limit)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"pair {i}: $\\theta_{i}$ = {thetas[i]:.3g}\n"
                     f"(m - n)$\\theta_{i}$ = {(m - n) * thetas[i]:.3g} rad", fontsize=8)
        ax.set_xlabel(f"contribution {contributions[i]:.3f}", fontsize=8)
    return contributions


def plot_rope_pairs(
    q: Any,
    k: Any,
    m: int,
    n: int,
    *,
    base: float = 10000.0,
    labels: Sequence[str] = ("query", "key"),
    title: str | None = None,
) -> Figure:
    """RoPE drawn: every pair (2i, 2i+1) of a query at position m and of a key at position n.

    Each panel is the plane of one pair. The query's pair, rotated by the angle m θ_i, and the
    key's, rotated by n θ_i (θ_i = base^(-2i/Dh), as :func:`coursepkg.positional.apply_rope`
    does), are solid arrows; the unrotated pairs (position 0) are faint dashed arrows. The
    score of the rotated vectors is the sum over the pairs of their dot products, written under
    each panel; it depends on the angle between the two rotated arrows, (m - n) θ_i plus the
    angle they had at position 0, and not on m and n themselves.

    Args:
        q: (Dh,) the query (before rotation), Dh even.
        k: (Dh,) the key (before rotation).
        m: the query's position.
        n: the key's position.
        base: 10000 in Su et al. (2021).
        labels: the names of the query and the key, for the legend.
        title: the figure title (default: the positions and the score).

    Returns:
        The figure, one axes per pair, in order, and a legend below them; each pair's
        contribution to the score is its x label.

    Raises:
        ValueError: if q and k are not vectors of the same even width.
    """
    q, k = _check_rope_pair(q, k)
    n_pairs = q.shape[0] // 2
    fig = common.new_figure(2.3 * n_pairs + 0.4, 3.6)
    axes = fig.subplots(1, n_pairs, squeeze=False)[0]
    contributions = _draw_rope_pairs(axes, q, k, m, n, base, labels)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=4,
               fontsize=8)
    fig.suptitle(title if title is not None else
                 f"RoPE: {labels[0]} at m = {m}, {labels[1]} at n = {n}; "
                 f"score {contributions.sum():.3f}", fontsize=10)
    return fig


class RopeExplorer(Explorer):
    """A widget: slide a query's position and its offset to a key, watch RoPE rotate the pairs.

    Build it with ``rope_explorer`` (this class). The top row draws every pair of the query at
    position m and of the key at position n = m - offset (see :func:`plot_rope_pairs`); the
    bottom panel draws, against the query's position, the score of the rotated pair at this
    offset (flat: it depends on the offset only) and, for comparison, the score of the same
    vectors with the sinusoidal table of width Dh added to them instead
    (``(q + PE[m]) · (k + PE[n])``), which changes with the positions. The controls are public
    attributes (``position``, ``offset``, ``base``); changing any of them redraws
    :attr:`figure` and :attr:`image` (see :class:`Explorer`).

    Args:
        q: (Dh,) the query before rotation (default: standard normal, from ``seed``).
        k: (Dh,) the key before rotation (default: standard normal, from ``seed``).
        labels: the names of the query and the key (e.g. the words they come from).
        position: the initial position m of the query.
        offset: the initial offset m - n (the key is ``offset`` positions before the query).
        base: the initial base of the angles, one of 10, 100 and 10000.
        d_head: Dh, the width of the random q and k when they are not given (even).
        max_position: the largest position the slider allows.
        seed: the seed of the random q and k.

    Raises:
        ValueError: for vectors of different or odd widths, an unknown base, or positions
            outside 0 <= offset <= position <= max_position.

    Attributes:
        message: the positions and both scores, as text.
        q, k: the query and the key before rotation, (Dh,) float64.
        score: the RoPE score ``<rope(q, m), rope(k, n)>`` for the current controls.
        added_score: the score with the sinusoidal table added instead.
    """

    BASES = (10.0, 100.0, 10000.0)

    def __init__(
        self,
        q: Any = None,
        k: Any = None,
        *,
        labels: Sequence[str] = ("query", "key"),
        position: int = 4,
        offset: int = 3,
        base: float = 10000.0,
        d_head: int = 8,
        max_position: int = 63,
        seed: int = 0,
    ) -> None:
        generator = torch.Generator().manual_seed(seed)
        if q is None:
            q = torch.randn(d_head, generator=generator, dtype=torch.float64)
        if k is None:
            k = torch.randn(len(q), generator=generator, dtype=torch.float64)
        q, k = _check_rope_pair(q, k)
        if base not in self.BASES:
            raise ValueError(f"base must be one of {self.BASES}, got {base}")
        if not 0 <= offset <= position <= max_position:
            raise ValueError(f"need 0 <= offset <= position <= max_position, got offset={offset}, "
                             f"position={position}, max_position={max_position}")
        super().__init__(figsize=(9.0, 6.0))
        self.q, self.k = q, k
        self.labels = tuple(labels)
        self.max_position = max_position
        self.position = widgets.IntSlider(value=position, min=offset, max=max_position,
                                          description="position m")
        self.offset = widgets.IntSlider(value=offset, min=0, max=max_position,
                                        description="offset m - n")
        self.base = widgets.Dropdown(options=list(self.BASES), value=base, description="base")
        self.offset.observe(self._on_offset, names="value")
        self._show([widgets.HBox([self.position, self.offset, self.base])],
                   watch=[self.position, self.base])

    def _on_offset(self, _change: dict) -> None:
        with self._changing():  # the offset may push the query along: redraw once, at the end
            if self.position.value < self.offset.value:
                self.position.value = self.offset.value  # the key stays at n >= 0
            self.position.min = self.offset.value

    def _scores(self, offset: int, base: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Query positions offset..max_position, the RoPE scores at this offset, and the scores
        with the sinusoidal table added instead."""
        ms = torch.arange(offset, self.max_position + 1)  # (P,)
        d_head = self.q.shape[0]
        q_rot = apply_rope(self.q.expand(len(ms), d_head), ms, base=base)  # (P, Dh)
        k_rot = apply_rope(self.k.expand(len(ms), d_head), ms - offset, base=base)  # (P, Dh)
        table = sinusoidal_encoding(self.max_position + 1, d_head, base=base,
                                    dtype=torch.float64)  # (P_max, Dh)
        added = ((self.q + table[ms]) * (self.k + table[ms - offset])).sum(-1)  # (P,)
        return ms.numpy(), (q_rot * k_rot).sum(-1).numpy(), added.numpy()

    def draw(self) -> None:
        m, offset, base = self.position.value, self.offset.value, self.base.value
        n = m - offset
        n_pairs = self.q.shape[0] // 2
        mosaic = [[f"pair {i}" for i in range(n_pairs)], ["scores"] * n_pairs]
        axes = self.figure.subplot_mosaic(mosaic, height_ratios=[1.25, 1.0])
        contributions = _draw_rope_pairs([axes[f"pair {i}"] for i in range(n_pairs)], self.q,
                                         self.k, m, n, base, self.labels)
        self.figure.legend(*axes["pair 0"].get_legend_handles_labels(),
                           loc="outside lower center", ncols=4, fontsize=8)
        ms, rope, added = self._scores(offset, base)
        self.score, self.added_score = float(contributions.sum()), float(added[m - offset])
        ax = axes["scores"]
        ax.plot(ms, rope, color="C2", label="RoPE: rotate q by m θ, k by n θ")
        ax.plot(ms, added, color="C3", linestyle="--", label="sinusoidal table added to q and k")
        ax.plot([m, m], [self.score, self.added_score], linestyle="none", marker="o",
                color="k", markersize=5)
        ax.set_title(f"The score of the pair at offset {offset}, wherever it is", fontsize=9)
        common.finish(ax, xlabel=f"query position m (key at n = m - {offset})",
                      ylabel="score q · k", legend=7)
        self.figure.suptitle(f"{self.labels[0]} at m = {m}, {self.labels[1]} at n = {n}, "
                             f"base {base:g}", fontsize=10)
        query, key = (common.html_escape(label) for label in self.labels)
        self.message.value = (
            f"{query} at m = {m}, {key} at "
            f"n = {n} (offset {offset}): RoPE score {self.score:.3f}, the same at every m for "
            f"this offset; with the sinusoidal table added instead: {self.added_score:.3f}"
        )


rope_explorer = RopeExplorer
"""The book's name for :class:`RopeExplorer`: ``viz.rope_explorer(q, k, position=...)``."""
