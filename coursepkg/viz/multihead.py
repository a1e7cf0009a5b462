"""Chapter 5 (multi-head attention): the reshape into heads, and where each head looks.

- :func:`plot_head_split`: a (T, D) matrix cut into H column blocks by
  :func:`coursepkg.multihead.split_heads`, and what a reshape without the transpose makes of it.
- :func:`plot_head_maps`: the attention map of every head of every layer, as a grid.
- :class:`MultiHeadExplorer` (``multihead_explorer``): a widget to type an input and pick a layer
  and a head of a trained model, and see where that head looks.

The maps reach these plots as arrays: the page runs the model and collects its attention
weights, so the plots do not depend on how a model exposes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from coursepkg.multihead import split_heads
from coursepkg.viz import common
from coursepkg.viz.explorer import Explorer
from coursepkg.viz.self_attention import square_panel

__all__ = [
    "AttentionMaps", "MultiHeadExplorer", "multihead_explorer", "plot_head_maps",
    "plot_head_split",
]


def _tint(color: Any, amount: float) -> np.ndarray:
    """An RGBA colour mixed with white: amount 0 is white, 1 the colour itself."""
    rgba = np.array(matplotlib.colors.to_rgba(color))
    rgba[:3] = 1.0 - amount * (1.0 - rgba[:3])
    return rgba


def _numbered_matrix(ax: Axes, values: np.ndarray, heads: np.ndarray, title: str) -> None:
    """Draw an integer matrix cell by cell, each cell tinted with the colour of its head."""
    colours = np.stack([np.stack([_tint(common.colour(h), 0.45) for h in row]) for row in heads])
    ax.imshow(colours, aspect="equal", interpolation="nearest")
    for (row, col), value in np.ndenumerate(values):
        ax.text(col, row, str(value), ha="center", va="center", fontsize=8)
    rows, cols = values.shape
    ax.set_xticks(np.arange(-0.5, cols), minor=True)
    ax.set_yticks(np.arange(-0.5, rows), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="both", length=0)
    ax.set_xticks(range(cols), labels=[str(c) for c in range(cols)], fontsize=7)
    ax.set_yticks(range(rows), labels=[f"t={r}" for r in range(rows)], fontsize=7)
    ax.set_title(title, fontsize=9)


def plot_head_split(
    T: int, D: int, n_heads: int, *, wrong: bool = True, title: str | None = None
) -> Figure:
    """The reshape of multi-head attention, drawn: a (T, D) matrix cut into H column blocks.

    The matrix holds the numbers 0 ... T*D - 1 row by row (as ``torch.arange(T * D).view(T, D)``
    would), so every number tells where it came from. Its columns are tinted with the colour of
    the head they belong to (head h owns the columns h*Dh ... (h+1)*Dh - 1). The panels to its
    right are the H matrices (T, Dh) that :func:`coursepkg.multihead.split_heads` makes of it:
    each holds one block of columns, for every position. With ``wrong=True`` a second row shows
    what ``x.reshape(H, T, Dh)`` (a reshape without the transpose) gives instead: each cell keeps
    the colour of the head its number came from, and the "heads" mix positions and heads.

    Args:
        T: the number of positions (rows).
        D: the width (columns), divisible by ``n_heads``.
        n_heads: H.
        wrong: add the row with the reshape without the transpose.
        title: the figure title.

    Returns:
        The figure: the (T, D) panel, then one panel per head (then, with ``wrong``, an empty
        panel with a note and one panel per wrong "head"); every panel's cells are its numbers.

    Raises:
        ValueError: if a size is not positive or D is not divisible by H.
    """
    if min(T, D, n_heads) < 1:
        raise ValueError(f"T, D and n_heads must be positive, got {T}, {D}, {n_heads}")
    if D % n_heads:
        raise ValueError(f"D={D} is not divisible by n_heads={n_heads}")
    d_head = D // n_heads
    x = torch.arange(T * D).view(1, T, D)  # (B, T, D) = (1, T, D)
    heads = split_heads(x, n_heads)[0].numpy()  # (H, T, Dh)

    def owner(values: np.ndarray) -> np.ndarray:  # the head each number came from
        return (values % D) // d_head

    rows = 2 if wrong else 1
    width = 0.42 * (D + n_heads * d_head) + 1.2 * n_heads + 1.5
    fig = common.new_figure(width, rows * (0.42 * T + 1.3) + 0.3)
    axes = fig.subplots(rows, n_heads + 1, squeeze=False,
                        width_ratios=[D + 1] + [d_head + 0.6] * n_heads)
    matrix = x[0].numpy()
    _numbered_matrix(axes[0, 0], matrix, owner(matrix), f"x: (T, D) = ({T}, {D})")
    for h in range(n_heads):
        _numbered_matrix(axes[0, h + 1], heads[h], owner(heads[h]),
                         f"split_heads: head {h + 1}\n(T, Dh) = ({T}, {d_head})")
    if wrong:
        axes[1, 0].set_axis_off()
        axes[1, 0].text(0.5, 0.5, "x.reshape(H, T, Dh)\nwithout the transpose:\n"
                        "each 'head' mixes\npositions and heads",
                        ha="center", va="center", fontsize=9, transform=axes[1, 0].transAxes)
        mixed = matrix.reshape(n_heads, T, d_head)
        for h in range(n_heads):
            _numbered_matrix(axes[1, h + 1], mixed[h], owner(mixed[h]),
                             f"wrong 'head' {h + 1}")
    if title:
        fig.suptitle(title)
    return fig


def _head_stack(weights: Any) -> np.ndarray:
    """An (H, T, S) array from a tensor or array of shape (H, T, S) or (1, H, T, S)."""
    return common.as_array(weights, 3, "the weights of one layer as (H, T, T)")


def plot_head_maps(
    tokens: Sequence[str],
    weights: Any,
    *,
    heads: Sequence[int] | None = None,
    layer_names: Sequence[str] | None = None,
    annotate: bool = True,
    title: str | None = None,
) -> Figure:
    """The attention map of every head of every layer, one row per layer, one column per head.

    Args:
        tokens: the T tokens (queries and keys of self-attention).
        weights: one layer's weights (H, T, T) (or (1, H, T, T), as returned by
            :class:`coursepkg.multihead.MultiHeadAttention` for one sequence), or a sequence
            of them, one per layer.
        heads: the heads to draw (0-based), the same in every layer; default all.
        layer_names: one name per layer, used in the panel titles (default "layer 1", ...;
            left out of the titles when there is a single layer and no name is given).
        annotate: write every weight (2 decimals) into its cell.
        title: the figure title.

    Returns:
        The figure: one axes per (layer, head) drawn, row by row, then one shared colour bar.

    Raises:
        ValueError: if there is no layer, the layers have different numbers of heads, a matrix
            is not T x T, or a head does not exist.
    """
    layers = [weights] if not isinstance(weights, (list, tuple)) else list(weights)
    if not layers:
        raise ValueError("plot_head_maps needs the weights of at least one layer")
    stacks = [_head_stack(w) for w in layers]
    T, n_heads = len(tokens), stacks[0].shape[0]
    for index, stack in enumerate(stacks):
        if stack.shape[0] != n_heads:
            raise ValueError(f"layer {index + 1} has {stack.shape[0]} heads, layer 1 {n_heads}")
        if stack.shape[1:] != (T, T):
            raise ValueError(f"layer {index + 1}: expected {T} x {T} maps for {T} tokens, "
                             f"got {stack.shape[1:]}")
    shown = list(range(n_heads)) if heads is None else list(heads)
    if not shown or any(not 0 <= h < n_heads for h in shown):
        raise ValueError(f"heads must be among 0 ... {n_heads - 1}, got {heads}")
    if layer_names is None:
        layer_names = [""] if len(stacks) == 1 else [f"layer {i + 1}" for i in range(len(stacks))]
    elif len(layer_names) != len(stacks):
        raise ValueError(f"{len(layer_names)} layer names for {len(stacks)} layers")
    size = 0.42 * T + 1.4
    fig = common.new_figure(len(shown) * size + 1.0, len(stacks) * (size + 0.3) + 0.4)
    axes = fig.subplots(len(stacks), len(shown), squeeze=False)
    image = None
    for row, (stack, name) in enumerate(zip(stacks, layer_names, strict=True)):
        for col, h in enumerate(shown):
            label = f"{name}, head {h + 1}" if name else f"head {h + 1}"
            image = square_panel(axes[row, col], stack[h], tokens, "weights", annotate, label)
    fig.colorbar(image, ax=axes.ravel().tolist(), pad=0.02, fraction=0.03, shrink=0.8,
                 label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def _head_summary(weights: np.ndarray, tokens: Sequence[str]) -> str:
    """Where one head looks, on average over its queries: the previous token, itself, and the
    key with the largest mean weight."""
    T = weights.shape[0]
    previous = float(np.mean([weights[t, t - 1] for t in range(1, T)])) if T > 1 else 0.0
    itself = float(np.mean(np.diag(weights)))
    column = weights.mean(axis=0)
    top = int(column.argmax())
    return (f"on the previous token {previous:.3f}, on itself {itself:.3f}, "
            f"most on {common.token_label(tokens[top])!r} (key {top + 1}, {column[top]:.3f})")


AttentionMaps = Callable[[str], tuple[Sequence[str], Sequence[Any]]]
"""``text -> (tokens, weights)``: runs a model on a text and returns its T tokens and, for each
layer, the weights (H, T, T) of its heads."""


class MultiHeadExplorer(Explorer):
    """A widget: type an input, pick a layer and a head, see where that head looks.

    Build it with ``multihead_explorer`` (this class). The model is hidden behind a function
    ``attention_maps(text) -> (tokens, weights)`` that runs it on the typed text and returns the
    tokens and, for each layer, the weights (H, T, T) of its heads; the function may raise
    ValueError for a text the model cannot read, and the widget shows the message. The controls
    are public attributes (``text``, ``layer``, ``head``); changing any of them redraws
    :attr:`figure` and :attr:`image` (see :class:`Explorer`).

    Args:
        attention_maps: ``text -> (tokens, weights)`` (see :data:`AttentionMaps`); the weights
            of a layer may also be (1, H, T, T).
        text: the initial input.
        layer: the initial layer (1-based).
        head: the initial head (1-based), or ``"all"`` to draw every head of the layer.
        description: the label of the text box.

    Raises:
        ValueError: if the initial text cannot be read, or the layer or head does not exist.

    Attributes:
        message: one line per head drawn: where it looks on average (or the error).
        tokens: the tokens of the current input (empty if it could not be read).
        weights: the current weights, one (H, T, T) array per layer (empty if unreadable).
    """

    def __init__(
        self,
        attention_maps: AttentionMaps,
        *,
        text: str,
        layer: int = 1,
        head: int | str = "all",
        description: str = "input",
    ) -> None:
        tokens, layers = attention_maps(text)  # a bad initial text raises here
        n_layers, n_heads = len(layers), _head_stack(layers[0]).shape[0] if layers else 0
        if n_layers < 1 or n_heads < 1:
            raise ValueError("attention_maps must return the weights of at least one layer")
        if not 1 <= layer <= n_layers:
            raise ValueError(f"layer must be in 1 ... {n_layers}, got {layer}")
        if head != "all" and (isinstance(head, bool) or head not in range(1, n_heads + 1)):
            raise ValueError(f"head must be 'all' or in 1 ... {n_heads}, got {head!r}")
        super().__init__(figsize=(4.5, 4.0))
        self._maps = attention_maps
        self.n_layers, self.n_heads = n_layers, n_heads
        self.text = widgets.Text(value=text, description=description, continuous_update=False)
        self.layer = widgets.Dropdown(options=list(range(1, n_layers + 1)), value=layer,
                                      description="layer")
        self.head = widgets.Dropdown(options=["all", *range(1, n_heads + 1)], value=head,
                                     description="head")
        self._show([widgets.HBox([self.text, self.layer, self.head])],
                   watch=[self.text, self.layer, self.head])

    def draw(self) -> None:
        try:
            tokens, layers = self._maps(self.text.value)
            stacks = [_head_stack(w) for w in layers]
        except ValueError as error:
            self.tokens, self.weights = [], []
            why = common.html_escape(str(error))
            self._nothing_to_show("cannot read this input",
                                  f"<b>cannot read this input:</b> {why}")
            return
        self.tokens, self.weights = list(tokens), stacks
        layer = self.layer.value
        shown = range(self.n_heads) if self.head.value == "all" else [self.head.value - 1]
        T = len(self.tokens)
        size = 0.42 * T + 1.4
        self.figure.set_size_inches(len(shown) * size + 1.0, size + 0.5)
        axes = self.figure.subplots(1, len(shown), squeeze=False)[0]
        image = None
        lines = []
        for ax, h in zip(axes, shown, strict=True):
            weights = stacks[layer - 1][h]
            image = square_panel(ax, weights, self.tokens, "weights", T <= 12,
                                 f"layer {layer}, head {h + 1}")
            lines.append(f"layer {layer}, head {h + 1}: "
                         + common.html_escape(_head_summary(weights, self.tokens)))
        self.figure.colorbar(image, ax=list(axes), pad=0.02, fraction=0.04, shrink=0.8)
        self.message.value = "<br>".join(lines)


multihead_explorer = MultiHeadExplorer
"""The book's name for :class:`MultiHeadExplorer`: ``viz.multihead_explorer(maps, text=...)``."""
