"""Chapter 4 (self-attention): score and weight matrices, measurements against d_k.

- :func:`plot_attention_matrices`: a sentence's score and weight matrices (queries x keys) side
  by side, masked scores shown as "−∞"; :func:`square_panel` draws one of them (chapters 5 and 6
  use it too).
- :func:`plot_against_width`: measurements (variance, largest weight, ...) against d_k.
- :func:`word_vectors`, :func:`random_self_attention` and :class:`SelfAttentionExplorer`
  (``self_attention_explorer``): an untrained self-attention head over a typed sentence, and a
  widget to switch the scaling by sqrt(d_k) and the causal mask and to change d_k.

The chapter's timings are :func:`coursepkg.viz.curves.plot_timings`.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from coursepkg.self_attention import causal_mask, scaled_dot_product_attention
from coursepkg.viz import common
from coursepkg.viz.explorer import Explorer

__all__ = [
    "SelfAttentionExplorer", "plot_against_width", "plot_attention_matrices",
    "random_self_attention", "self_attention_explorer", "square_panel", "word_vectors",
]


def _weight_text(value: float) -> str:
    return "0" if value == 0 else f"{value:.2f}"


def square_panel(
    ax: Axes, matrix: np.ndarray, tokens: Sequence[str], kind: str, annotate: bool, title: str
) -> AxesImage:
    """Draw one (T, T) matrix of ``kind`` ``"scores"`` or ``"weights"``, queries as rows, keys
    as columns.

    Scores are red (positive) and blue (negative), symmetric around 0, with ``-inf`` grey and
    written "−∞"; weights are greys from 0 (white) to 1 (black), exact zeros written "0". With
    ``annotate``, every cell's value is written (2 decimals). Returns the image, for a colour bar.
    """
    if kind == "weights":
        image = common.heatmap(ax, matrix, limits=(0.0, 1.0), cmap="Greys",
                               cells=_weight_text if annotate else None)
    else:
        image = common.heatmap(ax, matrix, cells="{:.2f}" if annotate else None)
    common.token_ticks(ax, "x", tokens, rotation=45 * (len(tokens) > 8))
    common.token_ticks(ax, "y", tokens)
    ax.set_xlabel("key (attended to)", fontsize=8)
    ax.set_ylabel("query (attending)", fontsize=8)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=9)
    return image


def plot_attention_matrices(
    tokens: Sequence[str],
    *,
    scores: Mapping[str, Any] | None = None,
    weights: Mapping[str, Any] | None = None,
    annotate: bool = True,
    title: str | None = None,
) -> Figure:
    """Self-attention matrices of one sentence side by side: scores first, then weights.

    Every panel has one row per query and one column per key (both are the sentence's tokens).
    Scores are drawn in red (positive) and blue (negative), symmetric around 0; masked scores
    (``-inf``) are light grey and labelled "−∞". Weights are drawn in greys from 0 (white) to 1
    (black).

    Args:
        tokens: the T tokens of the sentence.
        scores: panel title -> (T, T) scores (a tensor or an array; ``-inf`` where masked).
        weights: panel title -> (T, T) weights, each row a distribution over the keys.
        annotate: write every cell's value (2 decimals) into it.
        title: the figure title.

    Returns:
        The figure: one axes per panel (scores, then weights, in the order given), each with a
        colour bar, so ``2 * panels`` axes in all.

    Raises:
        ValueError: if there is no panel or a matrix is not T x T.
    """
    panels = [(name, matrix, "scores") for name, matrix in (scores or {}).items()]
    panels += [(name, matrix, "weights") for name, matrix in (weights or {}).items()]
    if not panels:
        raise ValueError("plot_attention_matrices needs at least one matrix of scores or weights")
    T = len(tokens)
    size = 0.42 * T + 1.4
    fig = common.new_figure(len(panels) * (size + 0.8), size + 0.4)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, matrix, kind) in zip(axes, panels, strict=True):
        expected = f"{T} x {T} for {T} tokens"
        values = common.as_array(matrix, 2, expected)
        if values.shape != (T, T):
            raise ValueError(f"panel {name!r}: expected {expected}, got {values.shape}")
        image = square_panel(ax, values, tokens, kind, annotate, name)
        fig.colorbar(image, ax=ax, pad=0.02, fraction=0.046, shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def plot_against_width(
    dims: Sequence[int],
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    log_y: Sequence[str] = (),
    references: Sequence[str] = (),
    ncols: int = 2,
    xlabel: str = "width $d_k$ of queries and keys",
    title: str | None = None,
) -> Figure:
    """Several measurements against a width (e.g. d_k), one panel per measurement.

    Args:
        dims: the widths on the x axis (drawn on a log scale, base 2).
        panels: panel y label -> (curve label -> one value per width). A curve label has the
            same colour in every panel.
        log_y: the panels (by y label) whose y axis is logarithmic; values that are not
            positive are left out of those.
        references: curve labels drawn as thin dashed grey lines without markers (e.g. the
            theoretical value), not coloured like the measurements.
        ncols: panels per row.
        xlabel: the x axis label of every panel.
        title: the figure title.

    Returns:
        The figure, one axes per panel (unused grid cells removed), each with a legend: its
        measured curves first, then its references.

    Raises:
        ValueError: if there is no panel, a curve does not have one value per width, or
            ``log_y`` names an unknown panel.
    """
    if not panels:
        raise ValueError("plot_against_width needs at least one panel")
    unknown = set(log_y) - set(panels)
    if unknown:
        raise ValueError(f"log_y names panels that do not exist: {sorted(unknown)}")
    nrows = -(-len(panels) // ncols)
    ncols = min(ncols, len(panels))
    fig = common.new_figure(4.3 * ncols + 0.4, 3.4 * nrows + 0.5)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    measured = list(dict.fromkeys(label for curves in panels.values() for label in curves
                                  if label not in references))
    colours = {label: common.colour(index) for index, label in enumerate(measured)}
    colours.update({label: "0.5" for label in references})
    for ax, (ylabel, curves) in zip(axes, panels.items(), strict=False):
        for chosen, style in (
            (measured, dict(marker="o", markersize=4)),
            (references, dict(linestyle="--", linewidth=1)),
        ):
            common.plot_curves(ax, list(dims), {k: v for k, v in curves.items() if k in chosen},
                               "widths", log_y=ylabel in log_y, colours=colours, **style)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(dims), labels=[str(d) for d in dims], fontsize=7)
        ax.minorticks_off()
        common.finish(ax, xlabel=xlabel, ylabel=ylabel, legend=7)
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    if title:
        fig.suptitle(title)
    return fig


def word_vectors(words: Sequence[str], dim: int, *, seed: int = 0) -> torch.Tensor:
    """A fixed random vector for every word, the same whatever sentence the word is in.

    Each word's vector is drawn from a standard normal distribution with a generator seeded
    from ``seed`` and the word's lower-cased spelling (through CRC-32, which does not change
    between runs as Python's ``hash`` does), so "Sleep" and "sleep" share one vector.

    Args:
        words: the T words of a sentence.
        dim: D, the width of each vector.
        seed: changes every word's vector.

    Returns:
        (T, D) float32 tensor, one row per word.
    """
    rows = []
    for word in words:
        generator = torch.Generator().manual_seed(
            zlib.crc32(word.lower().encode("utf-8")) + 1_000_003 * seed
        )
        rows.append(torch.randn(dim, generator=generator))
    return torch.stack(rows) if rows else torch.zeros(0, dim)


def random_self_attention(
    words: Sequence[str],
    d_k: int,
    *,
    scaled: bool = True,
    causal: bool = False,
    d_model: int = 32,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores and weights of an untrained self-attention head over a sentence.

    The words get :func:`word_vectors` of width ``d_model``; W^Q and W^K (each (d_k, D)) have
    independent normal entries of variance 1/D, so every coordinate of a query or a key has a
    variance of about 1 and the dot product q·k a variance of about d_k. The weights come from
    :func:`coursepkg.self_attention.scaled_dot_product_attention`; without scaling, the queries
    are multiplied by sqrt(d_k) first, which cancels the function's division.

    Args:
        words: the T >= 1 words.
        d_k: the width of queries and keys.
        scaled: divide the scores by sqrt(d_k) (True) or not.
        causal: mask the future with :func:`coursepkg.self_attention.causal_mask`.
        d_model: D, the width of the word vectors.
        seed: changes the word vectors and the projections.

    Returns:
        ``(scores, weights)``, each (T, T): the scores as fed to the softmax (``-inf`` where
        masked) and the weights.

    Raises:
        ValueError: if there are no words or a width is not positive.
    """
    if len(words) == 0:
        raise ValueError("random_self_attention needs at least one word")
    if d_k < 1 or d_model < 1:
        raise ValueError(f"d_k and d_model must be positive, got {d_k} and {d_model}")
    x = word_vectors(words, d_model, seed=seed)  # (T, D)
    generator = torch.Generator().manual_seed(seed)
    w_q = torch.randn(d_k, d_model, generator=generator) / d_model ** 0.5  # W^Q (Dk, D)
    w_k = torch.randn(d_k, d_model, generator=generator) / d_model ** 0.5  # W^K (Dk, D)
    q, k = x @ w_q.T, x @ w_k.T  # (T, Dk) each
    mask = causal_mask(len(words)) if causal else None  # (T, T) or None
    if not scaled:
        q = q * d_k ** 0.5  # undoes the division by sqrt(d_k) inside the function
    _, weights = scaled_dot_product_attention(q, k, k, mask)  # (T, T)
    scores = q @ k.T / d_k ** 0.5  # (T, T), as the function computes them
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores, weights


class SelfAttentionExplorer(Explorer):
    """A widget: type a sentence, switch the scaling and the causal mask, change d_k.

    Build it with ``self_attention_explorer`` (this class). The figure shows the scores and the
    weights of an untrained self-attention head (see :func:`random_self_attention`) over the
    words of the sentence. The controls are public attributes (``text``, ``scaled``,
    ``causal``, ``d_k``); changing any of them redraws :attr:`figure` and :attr:`image` (see
    :class:`Explorer`).

    Args:
        text: the initial sentence (split into words on whitespace).
        d_k: the initial width of queries and keys, a power of 2 from 1 to 1024.
        scaled: start with the scores divided by sqrt(d_k).
        causal: start with the causal mask.
        d_model: D, the width of the random word vectors.
        seed: changes the word vectors and the projections.

    Attributes:
        message: the mean largest weight and entropy of the rows, as text.
        words: the words of the current sentence.
        scores, weights: the current (T, T) matrices.
    """

    D_K_OPTIONS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

    def __init__(
        self,
        *,
        text: str = "the cat sat on the mat",
        d_k: int = 16,
        scaled: bool = True,
        causal: bool = False,
        d_model: int = 32,
        seed: int = 0,
    ) -> None:
        if d_k not in self.D_K_OPTIONS:
            raise ValueError(f"d_k must be one of {self.D_K_OPTIONS}, got {d_k}")
        super().__init__(figsize=(9.0, 4.2))
        self.d_model = d_model
        self.seed = seed
        self.text = widgets.Text(value=text, description="sentence", continuous_update=False,
                                 layout=widgets.Layout(width="95%"))
        self.scaled = widgets.Checkbox(value=scaled, description="divide by sqrt(d_k)")
        self.causal = widgets.Checkbox(value=causal, description="causal mask")
        self.d_k = widgets.SelectionSlider(options=list(self.D_K_OPTIONS), value=d_k,
                                           description="d_k")
        self._show([self.text, widgets.HBox([self.scaled, self.causal, self.d_k])],
                   watch=[self.text, self.scaled, self.causal, self.d_k])

    def draw(self) -> None:
        self.words = self.text.value.split()
        if not self.words:
            self.scores = self.weights = torch.zeros(0, 0)
            self._nothing_to_show("type a sentence")
            return
        self.scores, self.weights = random_self_attention(
            self.words, self.d_k.value, scaled=self.scaled.value, causal=self.causal.value,
            d_model=self.d_model, seed=self.seed,
        )
        division = "/ sqrt(d_k)" if self.scaled.value else "(not divided)"
        axes = self.figure.subplots(1, 2)
        annotate = len(self.words) <= 10
        for ax, matrix, kind, name in (
            (axes[0], self.scores, "scores", f"scores q·k {division}"),
            (axes[1], self.weights, "weights", "weights (softmax of each row)"),
        ):
            image = square_panel(ax, matrix.numpy(), self.words, kind, annotate, name)
            self.figure.colorbar(image, ax=ax, pad=0.02, fraction=0.046, shrink=0.8)
        self.figure.suptitle(f"d_k = {self.d_k.value}" +
                             (", causal mask" if self.causal.value else ""), fontsize=10)
        peak = self.weights.max(dim=-1).values.mean().item()
        entropy = -(self.weights * self.weights.clamp_min(1e-45).log()).sum(-1).mean().item()
        self.message.value = (f"largest weight of a row, on average: {peak:.3f}; "
                              f"entropy of a row, on average: {entropy:.3f} nats")


self_attention_explorer = SelfAttentionExplorer
"""The book's name for :class:`SelfAttentionExplorer`: ``viz.self_attention_explorer()``."""
