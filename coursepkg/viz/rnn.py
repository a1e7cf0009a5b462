"""Chapter 2 (RNNs and LSTMs): gradients over distance, memory tests, gates, similarities.

- :func:`plot_gradient_norms`: the size of a late loss's gradient against how far back it reaches.
- :func:`plot_accuracy_vs_distance`: how well a model answers against how far back the evidence is.
- :func:`plot_lstm_gates`: heatmaps of an LSTM's gates and states over a sequence.
- :func:`plot_similarity_matrix`: a matrix of cosine similarities between labelled vectors.
- :func:`rnn_lm_states` and :class:`RNNStateExplorer` (``rnn_state_explorer``): a widget to type a
  text and step through a recurrent language model's hidden state (or an LSTM's gates) and
  next-token predictions.

The chapter's training curve is :func:`coursepkg.viz.curves.plot_loss_curves`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle

from coursepkg.viz import common
from coursepkg.viz.explorer import Explorer
from coursepkg.viz.ngrams import format_context, plot_next_word_distribution

__all__ = [
    "GATE_NAMES", "RNNStateExplorer", "plot_accuracy_vs_distance", "plot_gradient_norms",
    "plot_lstm_gates", "plot_similarity_matrix", "rnn_lm_states", "rnn_state_explorer",
]

GATE_NAMES = {
    "i": "i: input gate",
    "f": "f: forget gate",
    "g": "g: candidate",
    "o": "o: output gate",
    "c": "c: cell state",
    "h": "h: hidden state",
}


def plot_gradient_norms(
    norms: Mapping[str, Sequence[float]],
    ax: Axes | None = None,
    *,
    title: str = "Gradient of the last step's loss, against distance",
    ylabel: str = "gradient norm (log scale)",
) -> Axes:
    """Gradient norms against the distance between a loss and what it is differentiated by.

    Args:
        norms: label -> norms, where ``norms[label][k]`` is measured ``k`` steps before the step
            of the loss (index 0: the loss's own step). Values that are not positive (a
            gradient that underflowed to 0) cannot be shown on a log axis and are left out.
        ax: the axes to draw into; a new figure is made when None.
        title: the axes title.
        ylabel: the y axis label.

    Returns:
        The axes, with one line per label, a logarithmic y axis and a legend.
    """
    ax = common.axes_or_new(ax, 6.0, 4.0)
    for index, (label, values) in enumerate(norms.items()):
        common.plot_curves(ax, range(len(values)), {label: values}, "distances", log_y=True,
                           colours={label: common.colour(index)})
    return common.finish(ax, xlabel="distance T - t (steps between the input and the loss)",
                         ylabel=ylabel, title=title)


def plot_accuracy_vs_distance(
    distances: Sequence[int],
    curves: Mapping[str, Sequence[float]],
    ax: Axes | None = None,
    *,
    references: Mapping[str, float] | None = None,
    reference_label: str = "reference",
    chance: float | None = 0.5,
    ylabel: str = "accuracy at the last position",
    title: str = "Accuracy against how far back the evidence is",
) -> Axes:
    """One line per model: a score (accuracy or probability) against a distance.

    Args:
        distances: the x values, e.g. how many steps before the end the only B is.
        curves: label -> one value per distance, in [0, 1].
        ax: the axes to draw into; a new figure is made when None.
        references: label -> a single value drawn as a dotted horizontal line in the colour of
            that label's curve (e.g. the accuracy on sequences without any B).
        reference_label: what the reference lines show, for the legend.
        chance: draw a thin grey line at this level (None: no line).
        ylabel: the y axis label.
        title: the axes title.

    Returns:
        The axes: one line per curve, one per reference, one for chance; y from 0 to 1.

    Raises:
        ValueError: if a curve does not have one value per distance, or a reference has no curve.
    """
    ax = common.axes_or_new(ax, 6.0, 3.8)
    references = dict(references or {})
    if set(references) - set(curves):
        raise ValueError(f"references without a curve: {sorted(set(references) - set(curves))}")
    for index, (label, values) in enumerate(curves.items()):
        common.plot_curves(ax, distances, {label: values}, "distances",
                           colours={label: common.colour(index)}, marker="o", markersize=3)
        if label in references:
            ax.axhline(references[label], color=common.colour(index), linestyle=":",
                       label=f"{label}, {reference_label}")
    if chance is not None:
        ax.axhline(chance, color="0.6", linewidth=0.8, label="chance")
    ax.set_ylim(-0.03, 1.03)
    return common.finish(ax, xlabel="distance: steps from the only B to the end", ylabel=ylabel,
                         title=title)


def _state_heatmap(ax: Axes, matrix: np.ndarray, key: str, units: Sequence[int]) -> AxesImage:
    """One quantity (T, Hs) of an RNN as units x time, on the range of that quantity: gates in
    (0, 1), g and h in (-1, 1), the unbounded c centred on 0."""
    rows = matrix[:, list(units)].T  # (units, T)
    if key in ("i", "f", "o"):
        image = common.heatmap(ax, rows, limits=(0.0, 1.0), cmap="viridis", aspect="auto")
    else:
        image = common.heatmap(ax, rows, limits=(-1.0, 1.0) if key in ("g", "h") else None,
                               aspect="auto")
    ax.set_yticks(range(len(units)), labels=[str(u) for u in units], fontsize=6)
    ax.set_ylabel(GATE_NAMES.get(key, key), fontsize=8)
    return image


def plot_lstm_gates(
    trace: Mapping[str, Any],
    tokens: Sequence[str],
    *,
    keys: Sequence[str] = ("i", "f", "g", "o", "c", "h"),
    units: Sequence[int] | None = None,
    title: str | None = None,
) -> Figure:
    """Heatmaps of an LSTM's gates and states while it reads a sequence.

    Args:
        trace: key -> (T, Hs) activations (or (1, T, Hs)), e.g. from
            :meth:`coursepkg.rnn.LSTM.trace`; keys among ``i, f, g, o, c, h``.
        tokens: the T input tokens, shown under the time axis.
        keys: which quantities to draw, one row each, top to bottom.
        units: which hidden units to show (rows of each heatmap); all when None.
        title: the figure title.

    Returns:
        The figure: one heatmap per key (units x time), each with a colour bar beside it
        (so ``2 * len(keys)`` axes). Gates use the range (0, 1); g and h (-1, 1); c is
        centred on 0.

    Raises:
        ValueError: if a key is missing from ``trace`` or the lengths do not match ``tokens``.
    """
    missing = [k for k in keys if k not in trace]
    if missing:
        raise ValueError(f"trace has no {missing}; it has {sorted(trace)}")
    matrices = {k: common.as_array(trace[k], 2, "a (T, Hs) array of states") for k in keys}
    for key, matrix in matrices.items():
        if matrix.shape[0] != len(tokens):
            raise ValueError(
                f"{key!r} covers {matrix.shape[0]} steps but {len(tokens)} tokens were given"
            )
    hidden = next(iter(matrices.values())).shape[1]
    units = list(range(hidden)) if units is None else list(units)
    height = 0.9 + len(keys) * (0.4 + 0.07 * len(units))
    fig = common.new_figure(max(6.0, 0.16 * len(tokens) + 2.0), height)
    axes = fig.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    for ax, key in zip(axes, keys, strict=True):
        image = _state_heatmap(ax, matrices[key], key, units)
        fig.colorbar(image, ax=ax, pad=0.01, fraction=0.03)
    common.token_ticks(axes[-1], "x", tokens, fontsize=7)
    axes[-1].set_xlabel("input token (time step)")
    if title:
        fig.suptitle(title)
    return fig


def plot_similarity_matrix(
    matrix: Any,
    labels: Sequence[str],
    ax: Axes | None = None,
    *,
    title: str = "Cosine similarity",
) -> Axes:
    """A labelled heatmap of a square similarity matrix, each cell annotated with its value.

    Args:
        matrix: (N, N) similarities in [-1, 1] (an array or a tensor).
        labels: the N row (and column) labels.
        ax: the axes to draw into; a new figure is made when None.
        title: the axes title.

    Returns:
        The axes, with the row labels as y tick labels and numbered columns.

    Raises:
        ValueError: if the matrix is not N x N for N labels.
    """
    values = common.as_array(matrix, 2, f"a {len(labels)} x {len(labels)} matrix")
    if values.shape != (len(labels), len(labels)):
        raise ValueError(f"expected a {len(labels)} x {len(labels)} matrix, got {values.shape}")
    size = 1.2 + 0.45 * len(labels)
    ax = common.axes_or_new(ax, size + 3.5, size)
    common.heatmap(ax, values, limits=(-1.0, 1.0), cells="{:.2f}", fontsize=8)
    ax.set_yticks(range(len(labels)), labels=[f"{i + 1}. {t}" for i, t in enumerate(labels)],
                  fontsize=8)
    ax.set_xticks(range(len(labels)), labels=[str(i + 1) for i in range(len(labels))],
                  fontsize=8)
    return common.finish(ax, title=title, grid=None, legend=None)


class _Distribution:
    """A fixed next-token distribution, shaped like the models plot_next_word_distribution takes."""

    def __init__(self, probs: Mapping[str, float]) -> None:
        self.probs = dict(probs)
        self.vocab = list(self.probs)

    def prob(self, word: str, context: Sequence[str]) -> float:
        return self.probs.get(word, 0.0)

    def distribution(self, context: Sequence[str]) -> dict[str, float]:
        return self.probs


@torch.no_grad()
def rnn_lm_states(model: torch.nn.Module, ids: Sequence[int]) -> tuple[dict, np.ndarray]:
    """What a recurrent language model computes while it reads a sequence.

    Args:
        model: a :class:`coursepkg.rnn.RNNLM` (attributes ``embed``, ``rnn``, ``head``).
        ids: the T >= 1 token ids.

    Returns:
        ``(states, probs)``: states maps ``"i", "f", "g", "o", "c", "h"`` (an LSTM, first
        layer) or ``"h"`` (an Elman RNN, top layer) to (T, Hs) arrays; probs (T, V) is the
        model's next-token distribution after each token.
    """
    idx = torch.as_tensor(list(ids), dtype=torch.long)[None]  # (1, T)
    was_training = model.training
    model.eval()
    x = model.embed(idx)  # (1, T, E)
    trace = getattr(model.rnn, "trace", None)
    if callable(trace):
        states = {key: value[0].numpy() for key, value in trace(x).items()}  # each (T, Hs)
    else:
        out, _ = model.rnn(x)  # (1, T, Hs)
        states = {"h": out[0].numpy()}
    probs = torch.softmax(model(idx)[0], dim=-1).numpy()  # (T, V)
    model.train(was_training)
    return states, probs


class RNNStateExplorer(Explorer):
    """A widget: type a text, move a slider along it, see the RNN's state and its prediction.

    Build it with ``rnn_state_explorer`` (this class). The top panel is a heatmap of one
    quantity (the hidden state h, or an LSTM's cell state or gates) for the ``n_units`` units
    that vary most over the text, with the current step framed; the bottom panel is the model's
    next-token distribution after the current step. The controls are public attributes
    (``text``, ``step``, ``quantity``); changing any of them redraws :attr:`figure` and
    :attr:`image` (see :class:`Explorer`).

    Args:
        model: a :class:`coursepkg.rnn.RNNLM` (with an LSTM, every gate can be shown).
        tokenizer: its :class:`coursepkg.data.CharTokenizer` (attributes ``chars``, ``encode``).
        text: the initial text; the slider starts at its last character.
        quantity: ``"h"``, or for an LSTM also ``"c", "i", "f", "g", "o"``.
        n_units: how many hidden units the heatmap shows (those that vary most over the text).
        top: how many next-token bars to draw.

    Attributes:
        model: the recurrent language model.
        message: characters of the text the model does not know (left out).
        tokens: the tokens of the current text (those the tokenizer knows).
        states: quantity -> (T, Hs) array for the current text.
        probs: (T, V) next-token probabilities for the current text.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        text: str = "",
        quantity: str = "h",
        n_units: int = 16,
        top: int = 8,
    ) -> None:
        if n_units < 1 or top < 1:
            raise ValueError("n_units and top must be positive")
        options = ["h", "c", "i", "f", "g", "o"] if callable(getattr(model.rnn, "trace", None)) \
            else ["h"]
        if quantity not in options:
            raise ValueError(f"quantity must be one of {options}, got {quantity!r}")
        super().__init__(figsize=(7.5, 5.6))
        self.model = model
        self.tokenizer = tokenizer
        self.n_units = n_units
        self.top = top
        self.tokens: list[str] = []
        self.states: dict[str, np.ndarray] = {}
        self.probs = np.zeros((0, 0))
        self.text = widgets.Text(value=text, description="text", continuous_update=False,
                                 placeholder="type some text",
                                 layout=widgets.Layout(width="95%"))
        self.step = widgets.IntSlider(value=0, min=0, max=0, description="step")
        self.quantity = widgets.Dropdown(options=options, value=quantity, description="show")
        self._read_text()
        self.step.value = self.step.max
        self.text.observe(self._on_text, names="value")
        self._show([self.text, widgets.HBox([self.step, self.quantity])],
                   watch=[self.step, self.quantity])

    def _read_text(self) -> None:
        """Tokenize the text box and run the model over it."""
        known = set(self.tokenizer.chars)
        text = self.text.value
        self.tokens = [c for c in text if c in known]
        unknown = sorted({c for c in text if c not in known})
        self.message.value = (
            "Not in the vocabulary (left out): " + " ".join(repr(c) for c in unknown)
            if unknown else ""
        )
        if self.tokens:
            self.states, self.probs = rnn_lm_states(
                self.model, self.tokenizer.encode("".join(self.tokens))
            )
        else:
            self.states, self.probs = {}, np.zeros((0, 0))
        last = max(0, len(self.tokens) - 1)
        if self.step.value > last:
            self.step.value = last  # before max shrinks, so the slider never rejects a value
        self.step.max = last

    def _on_text(self, _change: dict) -> None:
        with self._changing():  # a new text moves the slider: redraw once, at the end
            self._read_text()
            self.step.value = self.step.max

    def units(self) -> list[int]:
        """The ``n_units`` units whose chosen quantity varies most over the text, by index."""
        matrix = self.states[self.quantity.value]  # (T, Hs)
        spread = matrix.std(axis=0) if len(matrix) > 1 else np.abs(matrix[0])
        order = np.argsort(-spread, kind="stable")[: self.n_units]
        return sorted(int(u) for u in order)

    def draw(self) -> None:
        if not self.tokens:  # the message (set when the text was read) says what was left out
            self._nothing_to_show("type some text the model knows", self.message.value)
            return
        top_ax, bottom_ax = self.figure.subplots(2, 1, gridspec_kw={"height_ratios": [1.3, 1.0]})
        t, key = self.step.value, self.quantity.value
        units = self.units()
        image = _state_heatmap(top_ax, self.states[key], key, units)
        self.figure.colorbar(image, ax=top_ax, pad=0.01, fraction=0.03)
        top_ax.add_patch(Rectangle((t - 0.5, -0.5), 1.0, len(units), fill=False,
                                   edgecolor="black", linewidth=1.5))  # the current step
        common.token_ticks(top_ax, "x", self.tokens, fontsize=7)
        top_ax.set_title(f"{GATE_NAMES.get(key, key)} after each token; step {t}: "
                         f"{self.tokens[t]!r}", fontsize=9)
        probs = dict(zip(self.tokenizer.chars, self.probs[t].tolist(), strict=True))
        plot_next_word_distribution(
            _Distribution(probs), self.tokens[: t + 1], self.top, bottom_ax, joiner="",
            title=f"next token after: {format_context(self.tokens[: t + 1], '')!r}",
        )


rnn_state_explorer = RNNStateExplorer
"""The book's name for :class:`RNNStateExplorer`: ``viz.rnn_state_explorer(model, tok, ...)``."""
