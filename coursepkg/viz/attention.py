"""Chapter 3 (attention): accuracy by length, score spreads, source gradients, alignments.

- :func:`plot_accuracy_by_length`: accuracy of several models per bucket of input lengths.
- :func:`plot_score_spread`: how the spread of dot, scaled-dot and additive scores grows with D.
- :func:`plot_source_gradients`: how strongly a loss reaches each source token.
- :func:`plot_attention` and :func:`plot_alignments`: heatmaps of attention weights (outputs x
  source tokens).
- :func:`ab_attention` and :class:`AttentionLookupExplorer` (``attention_lookup_explorer``): the
  A/B lookup of the lectures computed with :func:`coursepkg.attention.attend`, and a widget to
  scale the query, move the B and change the number of tokens.

The chapter's tables come from :func:`coursepkg.viz.common.markdown_table`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from coursepkg.attention import attend
from coursepkg.viz import common
from coursepkg.viz.explorer import Explorer

__all__ = [
    "AttentionLookupExplorer", "ab_attention", "attention_lookup_explorer",
    "plot_accuracy_by_length", "plot_alignments", "plot_attention", "plot_score_spread",
    "plot_source_gradients",
]


def plot_accuracy_by_length(
    buckets: Sequence[str],
    curves: Mapping[str, Sequence[float]],
    counts: Sequence[int] | None = None,
    ax: Axes | None = None,
    *,
    xlabel: str = "length of the source (characters)",
    ylabel: str = "exact-match accuracy",
    title: str = "Accuracy against the length of the input",
) -> Axes:
    """One line per model: an accuracy for each bucket of input lengths.

    Args:
        buckets: the x tick labels, one per bucket (e.g. ``"8-10"``).
        curves: label -> one accuracy in [0, 1] per bucket.
        counts: how many test examples fall in each bucket, written under its tick label.
        ax: the axes to draw into; a new figure is made when None.
        xlabel: the x axis label.
        ylabel: the y axis label.
        title: the axes title.

    Returns:
        The axes, with one line per curve, y from 0 to 1 and a legend.

    Raises:
        ValueError: if a curve or ``counts`` does not have one value per bucket.
    """
    ax = common.axes_or_new(ax, 6.5, 3.8)
    positions = list(range(len(buckets)))
    common.plot_curves(ax, positions, curves, "buckets", marker="o")
    labels = list(buckets)
    if counts is not None:
        if len(counts) != len(buckets):
            raise ValueError(f"{len(counts)} counts for {len(buckets)} buckets")
        labels = [f"{b}\n(n={n})" for b, n in zip(buckets, counts, strict=True)]
    ax.set_xticks(positions, labels=labels, fontsize=8)
    ax.set_ylim(-0.03, 1.03)
    return common.finish(ax, xlabel=xlabel, ylabel=ylabel, title=title)


def plot_score_spread(
    dims: Sequence[int],
    spreads: Mapping[str, Sequence[float]],
    peaks: Mapping[str, Sequence[float]] | None = None,
    *,
    title: str = "Attention scores of random vectors against their dimension",
) -> Figure:
    """How spread out attention scores are, and how peaked their softmax, against the width D.

    Args:
        dims: the widths D on the x axis.
        spreads: score name -> the standard deviation of the scores over the keys, per width.
        peaks: score name -> the mean largest softmax weight, per width (a second panel).
        title: the figure title.

    Returns:
        The figure: the spreads on log-log axes, and, when ``peaks`` is given, a second axes
        with the largest weight (y from 0 to 1). One line per score name, same colour in both.

    Raises:
        ValueError: if a curve does not have one value per width.
    """
    panels = 1 if peaks is None else 2
    fig = common.new_figure(4.2 * panels + 1.0, 3.6)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    names = list(dict.fromkeys([*spreads, *(peaks or {})]))
    colours = {name: common.colour(index) for index, name in enumerate(names)}
    for ax, curves, ylabel in zip(
        axes, (spreads, peaks or {}),
        ("standard deviation of the scores", "largest softmax weight"), strict=False,
    ):
        common.plot_curves(ax, list(dims), curves, "widths", colours=colours, marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(dims), labels=[str(d) for d in dims])
        common.finish(ax, xlabel="width D of queries and keys", ylabel=ylabel, legend=None)
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    if panels == 2:
        axes[1].set_ylim(0.0, 1.02)
    fig.suptitle(title)
    return fig


def plot_source_gradients(
    norms: Mapping[str, Sequence[float]],
    tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    *,
    title: str = "How strongly the loss reaches each source token",
    ylabel: str = "gradient norm (log scale)",
) -> Axes:
    """Gradient norms per source position, one line per model, on a log axis.

    Args:
        norms: label -> one norm per source position (e.g. of the loss's gradient with respect
            to each token's embedding). Values that are not positive are left out.
        tokens: labels for the positions (e.g. the characters of one example); the positions
            1, 2, ... when None.
        ax: the axes to draw into; a new figure is made when None.
        title: the axes title.
        ylabel: the y axis label.

    Returns:
        The axes, with a logarithmic y axis and a legend.
    """
    ax = common.axes_or_new(ax, 6.5, 3.8)
    length = max((len(values) for values in norms.values()), default=0)
    for index, (label, values) in enumerate(norms.items()):
        common.plot_curves(ax, range(1, len(values) + 1), {label: values}, "positions", log_y=True,
                           colours={label: common.colour(index)}, marker="o", markersize=3)
    labels = [str(s) for s in range(1, length + 1)] if tokens is None else list(tokens)
    common.token_ticks(ax, "x", labels, fontsize=7, start=1)
    return common.finish(ax, xlabel="source position" if tokens is None else "source token",
                         ylabel=ylabel, title=title)


def plot_attention(
    weights: Any,
    source: Sequence[str],
    target: Sequence[str],
    ax: Axes | None = None,
    *,
    title: str | None = None,
) -> Axes:
    """A heatmap of attention weights: one row per output step, one column per source token.

    Args:
        weights: (T, S) weights (array or tensor), row t the distribution of output step t over
            the S source tokens.
        source: the S source tokens (column labels).
        target: the T output tokens (row labels).
        ax: the axes to draw into; a new figure is made when None.
        title: the axes title.

    Returns:
        The axes, with the weights drawn in greys from 0 (white) to 1 (black).

    Raises:
        ValueError: if the weights are not T x S for the given tokens.
    """
    expected = f"{len(target)} x {len(source)} weights (target x source)"
    matrix = common.as_array(weights, 2, expected)
    if matrix.shape != (len(target), len(source)):
        raise ValueError(f"expected {expected}, got {matrix.shape}")
    ax = common.axes_or_new(ax, 0.28 * len(source) + 1.5, 0.28 * len(target) + 1.2)
    common.heatmap(ax, matrix, limits=(0.0, 1.0), cmap="Greys")
    common.token_ticks(ax, "x", source)
    common.token_ticks(ax, "y", target)
    ax.tick_params(length=0)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_alignments(
    examples: Sequence[tuple[Any, Sequence[str], Sequence[str]]],
    *,
    ncols: int = 2,
    title: str | None = None,
) -> Figure:
    """Several attention heatmaps side by side (see :func:`plot_attention`).

    Args:
        examples: ``(weights (T, S), source tokens, target tokens)`` per panel; each panel is
            titled with its source text.
        ncols: panels per row.
        title: the figure title.

    Returns:
        The figure, one axes per example (unused grid cells are removed).
    """
    if not examples:
        raise ValueError("plot_alignments needs at least one example")
    nrows = -(-len(examples) // ncols)
    widest = max(len(source) for _, source, _ in examples)
    tallest = max(len(target) for _, _, target in examples)
    fig = common.new_figure(ncols * (0.22 * widest + 1.0), nrows * (0.22 * tallest + 1.0))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (weights, source, target) in zip(axes, examples, strict=False):
        plot_attention(weights, source, target, ax, title="".join(source))
    for ax in axes[len(examples):]:
        fig.delaxes(ax)
    if title:
        fig.suptitle(title)
    return fig


def ab_attention(
    n_keys: int, b_position: int | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The A/B lookup of the attention chapter, computed with :func:`coursepkg.attention.attend`.

    The sequence has ``n_keys`` tokens, all A = [1, 0] except one B = [0, 1] at
    ``b_position`` (or none); each token's vector is both its key and its value, and the
    query is ``[0, scale]``: "find the B's".

    Args:
        n_keys: S, the number of tokens.
        b_position: where the B is (0-based), or None for a sequence of A's only.
        scale: the second coordinate of the query.

    Returns:
        ``(keys, weights, output)``: keys (S, 2), weights (S,), output (2,).

    Raises:
        ValueError: if ``n_keys`` is not positive or ``b_position`` is outside the sequence.
    """
    if n_keys < 1:
        raise ValueError(f"n_keys must be positive, got {n_keys}")
    keys = torch.zeros(n_keys, 2, dtype=torch.float64)
    keys[:, 0] = 1.0
    if b_position is not None:
        if not 0 <= b_position < n_keys:
            raise ValueError(f"b_position must be in 0..{n_keys - 1} or None, got {b_position}")
        keys[b_position] = torch.tensor([0.0, 1.0], dtype=torch.float64)
    query = torch.tensor([[0.0, scale]], dtype=torch.float64)  # (1, 2)
    output, weights = attend(query, keys[None], keys[None])  # (1, 2), (1, S)
    return keys, weights[0], output[0]


class AttentionLookupExplorer(Explorer):
    """A widget on the A/B lookup: scale the query, move the B, change the number of tokens.

    Build it with ``attention_lookup_explorer`` (this class). The left panel shows the attention
    weight of every token; the right panel shows, in the plane of the two coordinates, the
    attention output, the plain average of the tokens (a DAN) and the ideal answer ([0, 1] if
    there is a B, [1, 0] if not). The controls are public attributes (``scale``, ``b_position``,
    ``n_keys``, ``has_b``); changing any of them redraws :attr:`figure` and :attr:`image` (see
    :class:`Explorer`).

    Args:
        n_keys: the initial number of tokens (A's and at most one B).
        b_position: the initial position of the B (0-based).
        scale: the initial query scale: the query is ``[0, scale]``.
        max_keys: the largest number of tokens the slider allows.

    Attributes:
        message: the weights and the output as text.
        key_vectors, weights, output: the current lookup (keys (S, 2), weights (S,), output
            (2,)), as returned by :func:`ab_attention`.
    """

    def __init__(
        self, *, n_keys: int = 4, b_position: int = 2, scale: float = 1.0, max_keys: int = 40
    ) -> None:
        if not 1 <= n_keys <= max_keys:
            raise ValueError(f"n_keys must be in 1..{max_keys}, got {n_keys}")
        if not 0 <= b_position < n_keys:
            raise ValueError(f"b_position must be in 0..{n_keys - 1}, got {b_position}")
        super().__init__(figsize=(8.5, 3.6))
        self.scale = widgets.FloatSlider(value=scale, min=0.0, max=12.0, step=0.5,
                                         description="query scale")
        self.n_keys = widgets.IntSlider(value=n_keys, min=1, max=max_keys, description="tokens")
        self.b_position = widgets.IntSlider(value=b_position, min=0, max=n_keys - 1,
                                            description="B position")
        self.has_b = widgets.Checkbox(value=True, description="the sequence has a B")
        self.n_keys.observe(self._on_n_keys, names="value")
        self._show([widgets.HBox([self.scale, self.has_b]),
                    widgets.HBox([self.n_keys, self.b_position])],
                   watch=[self.scale, self.b_position, self.has_b])

    def _on_n_keys(self, _change: dict) -> None:
        with self._changing():  # the B moves into a shorter sequence: redraw once, at the end
            last = self.n_keys.value - 1
            if self.b_position.value > last:
                self.b_position.value = last  # before max shrinks, so the slider accepts it
            self.b_position.max = last

    def draw(self) -> None:
        b_position = self.b_position.value if self.has_b.value else None
        self.key_vectors, self.weights, self.output = ab_attention(
            self.n_keys.value, b_position, self.scale.value
        )
        bars_ax, plane_ax = self.figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1.0]})
        n = self.n_keys.value
        is_b = self.key_vectors[:, 1].numpy() > 0.5
        weights = self.weights.numpy()
        bars = bars_ax.bar(range(n), weights, color=np.where(is_b, "tab:orange", "tab:blue"))
        if n <= 12:
            bars_ax.bar_label(bars, labels=[f"{w:.3f}" for w in weights], padding=2, fontsize=7)
        bars_ax.set_xticks(range(n), labels=["B" if b else "A" for b in is_b],
                           fontsize=8 if n <= 20 else 6)
        bars_ax.set_ylim(0.0, 1.12)
        bars_ax.set_ylabel("attention weight $a_s$")
        bars_ax.set_title(f"query [0, {self.scale.value:g}]: weights over the {n} tokens",
                          fontsize=9)
        mean = self.key_vectors.mean(dim=0).numpy()
        ideal = np.array([0.0, 1.0]) if b_position is not None else np.array([1.0, 0.0])
        out = self.output.numpy()
        plane_ax.plot([1.0, 0.0], [0.0, 1.0], color="0.7", linewidth=1)
        plane_ax.plot(*ideal, marker="*", markersize=14, color="tab:green", linestyle="none",
                      label="ideal answer")
        plane_ax.plot(*mean, marker="s", markersize=8, markerfacecolor="none", color="0.3",
                      linestyle="none", label=f"average (DAN) [{mean[0]:.3f}, {mean[1]:.3f}]")
        plane_ax.plot(*out, marker="o", markersize=8, color="tab:red", linestyle="none",
                      label=f"attention [{out[0]:.3f}, {out[1]:.3f}]")
        plane_ax.annotate("A = [1, 0]", (1.0, 0.0), xytext=(-10, 8), textcoords="offset points",
                          ha="right", fontsize=8)
        plane_ax.annotate("B = [0, 1]", (0.0, 1.0), xytext=(8, -3), textcoords="offset points",
                          fontsize=8)
        plane_ax.set_xlim(-0.1, 1.1)
        plane_ax.set_ylim(-0.1, 1.1)
        plane_ax.set_aspect("equal")
        plane_ax.set_xlabel("output, coordinate 1 (A)")
        plane_ax.set_ylabel("output, coordinate 2 (B)")
        plane_ax.legend(fontsize=7, loc="upper right")
        plane_ax.set_title("the output of the lookup", fontsize=9)
        self.message.value = (
            f"weight on the B: {weights[is_b].sum():.3f}; output [{out[0]:.3f}, {out[1]:.3f}]"
            if b_position is not None
            else f"no B: every weight is 1/{n}; output [{out[0]:.3f}, {out[1]:.3f}]"
        )


attention_lookup_explorer = AttentionLookupExplorer
"""The book's name for :class:`AttentionLookupExplorer`: ``viz.attention_lookup_explorer()``."""
