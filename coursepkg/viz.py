"""Plots and interactive demos used by the book.

Every function returns a matplotlib object or an ipywidgets widget and prints nothing, so the same
code serves the rendered book (static figures) and a live notebook (widgets). Figures are built
with :class:`matplotlib.figure.Figure` directly where they are not meant for pyplot, so a widget
never makes a notebook show its figure twice.

Chapter 1 (n-grams):

- :func:`next_word_distribution` and :func:`plot_next_word_distribution`: the most probable next
  tokens of a language model after a context, as a bar chart.
- :func:`plot_perplexity_vs_n`: train and held-out perplexity against the order n.
- :func:`ngram_explorer`: a widget to choose an order and a smoothing method, type a context and
  watch the next-word distribution change.

Chapter 2 (RNNs and LSTMs):

- :func:`plot_gradient_norms`: the size of a late loss's gradient against how far back it reaches.
- :func:`plot_accuracy_vs_distance`: how well a model answers against how far back the evidence is.
- :func:`plot_lstm_gates`: heatmaps of an LSTM's gates and states over a sequence.
- :func:`plot_loss_curves`: training and held-out loss of language models, with baselines.
- :func:`plot_similarity_matrix`: a matrix of cosine similarities between labelled vectors.
- :func:`rnn_lm_states` and :func:`rnn_state_explorer`: a widget to type a text and step through
  a recurrent language model's hidden state (or an LSTM's gates) and next-token predictions.

Chapter 3 (attention):

- :func:`markdown_table`: a small table of numbers, displayed as Markdown.
- :func:`plot_accuracy_by_length`: accuracy of several models per bucket of input lengths.
- :func:`plot_score_spread`: how the spread of dot, scaled-dot and additive scores grows with D.
- :func:`plot_source_gradients`: how strongly a loss reaches each source token.
- :func:`plot_attention` and :func:`plot_alignments`: heatmaps of attention weights (outputs x
  source tokens).
- :func:`ab_attention` and :func:`attention_lookup_explorer`: the A/B lookup of the lectures
  computed with :func:`coursepkg.attention.attend`, and a widget to scale the query, move the B
  and change the number of tokens.

Chapter 4 (self-attention):

- :func:`plot_attention_matrices`: a sentence's score and weight matrices (queries x keys) side
  by side, masked scores shown as "−∞".
- :func:`plot_against_width`: measurements (variance, largest weight, ...) against d_k.
- :func:`plot_timings`: measured times against the sequence length, log-log, with n and n^2
  guides.
- :func:`word_vectors`, :func:`random_self_attention` and :func:`self_attention_explorer`: an
  untrained self-attention head over a typed sentence, and a widget to switch the scaling by
  sqrt(d_k) and the causal mask and to change d_k.

Chapter 5 (multi-head attention):

- :func:`plot_head_split`: a (T, D) matrix cut into H column blocks by
  :func:`coursepkg.multihead.split_heads`, and what a reshape without the transpose makes of it.
- :func:`plot_head_maps`: the attention map of every head of every layer, as a grid.
- :func:`multihead_explorer`: a widget to type an input and pick a layer and a head of a trained
  model, and see where that head looks.

Chapter 6 (positional encodings):

- :func:`plot_position_table`: a table of position vectors (positions x dimensions) as a
  heatmap.
- :func:`plot_against_offset`: quantities against the offset between two positions.
- :func:`plot_accuracy_by_position`: each model's accuracy at every position, with the
  positions longer than in training shaded and gaps where a model cannot run.
- :func:`plot_rope_pairs` and :func:`rope_explorer`: the pairs of a query and a key rotated by
  RoPE, and a widget to slide the query's position and its offset to the key and watch the
  score stay the same for a fixed offset.

Chapter 7 (the full Transformer):

- :func:`plot_gradients_by_layer`: every layer's gradient norm at several moments of training,
  one panel per model (post-norm and pre-norm stacks).
- :func:`plot_loss_against_time`: language models' training and held-out losses against the
  training time, with baselines, to compare models whose steps cost differently.
- :func:`next_token_distribution`, :func:`plot_sampling_distribution` and
  :func:`sampling_explorer`: the distribution :func:`coursepkg.lm.generate` samples from after
  a prompt, with a temperature and a top-k, and a widget to change both and read a sample.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from coursepkg.attention import attend
from coursepkg.lm import generate
from coursepkg.multihead import split_heads
from coursepkg.positional import apply_rope, sinusoidal_encoding
from coursepkg.self_attention import causal_mask, scaled_dot_product_attention

__all__ = [
    "AttentionLookupExplorer",
    "LanguageModel",
    "MultiHeadExplorer",
    "NGramExplorer",
    "RNNStateExplorer",
    "RopeExplorer",
    "SamplingExplorer",
    "SelfAttentionExplorer",
    "ab_attention",
    "attention_lookup_explorer",
    "markdown_table",
    "multihead_explorer",
    "next_token_distribution",
    "next_word_distribution",
    "ngram_explorer",
    "plot_accuracy_by_length",
    "plot_accuracy_by_position",
    "plot_accuracy_vs_distance",
    "plot_against_offset",
    "plot_against_width",
    "plot_alignments",
    "plot_attention",
    "plot_attention_matrices",
    "plot_gradient_norms",
    "plot_gradients_by_layer",
    "plot_head_maps",
    "plot_head_split",
    "plot_loss_against_time",
    "plot_loss_curves",
    "plot_lstm_gates",
    "plot_next_word_distribution",
    "plot_perplexity_vs_n",
    "plot_position_table",
    "plot_rope_pairs",
    "plot_sampling_distribution",
    "plot_score_spread",
    "plot_similarity_matrix",
    "plot_source_gradients",
    "plot_timings",
    "random_self_attention",
    "rnn_lm_states",
    "rnn_state_explorer",
    "rope_explorer",
    "sampling_explorer",
    "self_attention_explorer",
    "word_vectors",
]


class LanguageModel(Protocol):
    """What the plots need from a model: a vocabulary and conditional probabilities.

    A model may also have ``distribution(context) -> {token: probability}`` (as
    :class:`coursepkg.ngram.NGramLM` does); it is used when present, being much faster than one
    ``prob`` call per vocabulary token.
    """

    @property
    def vocab(self) -> Sequence[str]: ...  # pragma: no cover - protocol

    def prob(self, word: str, context: Sequence[str]) -> float: ...  # pragma: no cover


def next_word_distribution(
    model: LanguageModel, context: Sequence[str], top: int = 10
) -> list[tuple[str, float]]:
    """The `top` most probable next tokens after `context`.

    Args:
        model: a fitted language model with ``vocab`` and ``prob(word, context)``
            (for example :class:`coursepkg.ngram.NGramLM`).
        context: the preceding tokens (the model uses as many as its order needs).
        top: how many tokens to return (fewer if the vocabulary is smaller).

    Returns:
        ``(token, probability)`` pairs, most probable first; ties are broken by the token's
        spelling so the result is deterministic.

    Raises:
        ValueError: if ``top`` is not positive.
    """
    if top < 1:
        raise ValueError(f"top must be a positive number of tokens, got {top}")
    context = tuple(context)
    distribution = getattr(model, "distribution", None)
    if callable(distribution):  # NGramLM computes the whole distribution in one pass
        scored = list(distribution(context).items())
    else:
        scored = [(word, model.prob(word, context)) for word in model.vocab]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored[:top]


def _format_context(context: Sequence[str], joiner: str) -> str:
    if not context:
        return "(sentence start)"
    text = joiner.join(context)
    return text if len(text) <= 40 else "..." + text[-37:]


def plot_next_word_distribution(
    model: LanguageModel,
    context: Sequence[str],
    top: int = 10,
    ax: Axes | None = None,
    *,
    title: str | None = None,
    joiner: str = " ",
) -> Axes:
    """A horizontal bar chart of the most probable next tokens after `context`.

    The most probable token is the top bar; each bar is labelled with its probability.

    Args:
        model: a fitted language model with ``vocab`` and ``prob(word, context)``.
        context: the preceding tokens.
        top: how many bars to draw.
        ax: the axes to draw into; a new figure is made when None.
        title: the axes title; by default the context (its last 40 characters).
        joiner: how context tokens are joined in the default title (``""`` for characters).

    Returns:
        The axes, with one bar per token; the y tick labels are the tokens.
    """
    pairs = next_word_distribution(model, context, top)
    if ax is None:
        ax = Figure(figsize=(5.5, 0.32 * len(pairs) + 1.2), layout="constrained").subplots()
    words = [repr(word) if word.isspace() or not word else word for word, _ in pairs]
    probs = [p for _, p in pairs]
    positions = range(len(pairs))
    bars = ax.barh(positions, probs, color="tab:blue")
    ax.set_yticks(list(positions), labels=words)
    ax.invert_yaxis()
    ax.bar_label(bars, labels=[f"{p:.3f}" for p in probs], padding=3, fontsize=8)
    ax.set_xlim(0, max(max(probs, default=0.0) * 1.25, 1e-3))
    ax.set_xlabel("probability of the next token")
    ax.set_title(title if title is not None else f"after: {_format_context(context, joiner)}")
    return ax


def plot_perplexity_vs_n(
    orders: Sequence[int],
    train: Mapping[str, Sequence[float]],
    heldout: Mapping[str, Sequence[float]],
    ax: Axes | None = None,
    *,
    title: str = "Perplexity against the order n",
) -> Axes:
    """Train (dashed) and held-out (solid) perplexity against the order n, one colour per model.

    Args:
        orders: the orders n on the x axis, e.g. ``[1, 2, 3, 4, 5]``.
        train: label -> perplexity on the training text, one value per order.
        heldout: label -> perplexity on held-out text, one value per order (same labels as
            ``train``; a label may be missing from either).
        ax: the axes to draw into; a new figure is made when None.
        title: the axes title.

    Returns:
        The axes, with a logarithmic y axis and a legend naming every line.

    Raises:
        ValueError: if a curve does not have one value per order.
    """
    if ax is None:
        ax = Figure(figsize=(6.0, 4.0), layout="constrained").subplots()
    labels = list(dict.fromkeys([*heldout, *train]))
    for index, label in enumerate(labels):
        color = f"C{index % 10}"
        for curves, style, kind in ((heldout, "-", "held-out"), (train, "--", "train")):
            if label not in curves:
                continue
            values = list(curves[label])
            if len(values) != len(orders):
                raise ValueError(
                    f"{kind} curve {label!r} has {len(values)} values for {len(orders)} orders"
                )
            ax.plot(orders, values, style, marker="o", color=color, label=f"{label}, {kind}")
    ax.set_yscale("log")
    ax.set_xticks(list(orders))
    ax.set_xlabel("order n of the model")
    ax.set_ylabel("perplexity (log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def _figure_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


class NGramExplorer(widgets.VBox):
    """A widget: choose an order and a smoothing method, type a context, see the next tokens.

    Build it with :func:`ngram_explorer`. The controls are public attributes (``order``,
    ``smoothing``, ``context``, ``top``); changing any of them redraws :attr:`figure` and the
    PNG shown in :attr:`image`. Outside a kernel the object still works (the tests drive it by
    setting the controls' ``value``).

    Attributes:
        models: (order, smoothing) -> fitted model.
        figure: the matplotlib figure of the current distribution.
        image: the image widget that shows ``figure``.
        message: a text line under the plot (e.g. which words of the context were unknown).
    """

    def __init__(
        self,
        models: Mapping[tuple[int, str], LanguageModel],
        *,
        context: str = "",
        tokenize: Callable[[str], list[str]] | None = None,
        top: int = 10,
        joiner: str = " ",
    ) -> None:
        if not models:
            raise ValueError("ngram_explorer needs at least one model: {(n, smoothing): model}")
        self.models = dict(models)
        self._tokenize = tokenize if tokenize is not None else str.split
        self._joiner = joiner
        orders = sorted({n for n, _ in self.models})
        methods = sorted({method for _, method in self.models})
        first_order, first_method = min(self.models)
        self.order = widgets.Dropdown(options=orders, value=first_order, description="n")
        self.smoothing = widgets.Dropdown(
            options=methods, value=first_method, description="smoothing"
        )
        self.context = widgets.Text(
            value=context, description="context", continuous_update=False,
            placeholder="type the beginning of a sentence",
        )
        self.top = widgets.IntSlider(value=top, min=3, max=25, description="top")
        self.figure = Figure(figsize=(6.0, 4.2), layout="constrained")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        for control in (self.order, self.smoothing, self.context, self.top):
            control.observe(self._on_change, names="value")
        controls = widgets.HBox([self.order, self.smoothing, self.top])
        super().__init__([controls, self.context, self.image, self.message])
        self.redraw()

    @property
    def model(self) -> LanguageModel | None:
        """The model for the chosen (order, smoothing), or None if that pair was not given."""
        return self.models.get((self.order.value, self.smoothing.value))

    def tokens(self) -> list[str]:
        """The context box's text, tokenized."""
        return list(self._tokenize(self.context.value))

    def _on_change(self, _change: dict) -> None:
        self.redraw()

    def redraw(self) -> Figure:
        """Redraw the figure for the current controls and return it."""
        self.figure.clear()
        ax = self.figure.subplots()
        model = self.model
        tokens = self.tokens()
        if model is None:
            ax.set_axis_off()
            ax.set_title("no model for this order and smoothing")
            self.message.value = (
                f"No model was given for n={self.order.value}, smoothing={self.smoothing.value}."
            )
        else:
            vocab = set(model.vocab)
            unknown = [t for t in tokens if t not in vocab]
            label = f"n={self.order.value}, {self.smoothing.value}"
            title = f"{label}\nafter: {_format_context(tokens, self._joiner)}"
            plot_next_word_distribution(
                model, tokens, self.top.value, ax, title=title, joiner=self._joiner
            )
            self.message.value = (
                "Not in the vocabulary: " + ", ".join(unknown) if unknown else ""
            )
        self.image.value = _figure_png(self.figure)
        return self.figure


def ngram_explorer(
    models: Mapping[tuple[int, str], LanguageModel],
    *,
    context: str = "",
    tokenize: Callable[[str], list[str]] | None = None,
    top: int = 10,
    joiner: str = " ",
) -> NGramExplorer:
    """An interactive next-token explorer over a set of fitted models.

    Args:
        models: ``(n, smoothing) -> fitted model``, e.g. ``{(2, "kneser_ney"): lm, ...}``.
        context: the initial text of the context box.
        tokenize: turns the typed text into tokens (default: split on whitespace; pass
            :func:`coursepkg.data.word_tokenize` for word models or ``list`` for characters).
        top: the initial number of bars.
        joiner: how tokens are joined in the plot title (``""`` for character models).

    Returns:
        The widget; display it as the last expression of a notebook cell.
    """
    return NGramExplorer(models, context=context, tokenize=tokenize, top=top, joiner=joiner)


# ------------------------------------------------------------------------ chapter 2: RNNs, LSTMs


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
    if ax is None:
        ax = Figure(figsize=(6.0, 4.0), layout="constrained").subplots()
    for index, (label, values) in enumerate(norms.items()):
        y = np.asarray(values, dtype=float)
        y = np.where(y > 0, y, np.nan)
        ax.plot(np.arange(len(y)), y, color=f"C{index % 10}", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("distance T - t (steps between the input and the loss)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


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
    if ax is None:
        ax = Figure(figsize=(6.0, 3.8), layout="constrained").subplots()
    references = dict(references or {})
    if set(references) - set(curves):
        raise ValueError(f"references without a curve: {sorted(set(references) - set(curves))}")
    for index, (label, values) in enumerate(curves.items()):
        values = list(values)
        if len(values) != len(distances):
            raise ValueError(
                f"curve {label!r} has {len(values)} values for {len(distances)} distances"
            )
        color = f"C{index % 10}"
        ax.plot(list(distances), values, marker="o", markersize=3, color=color, label=label)
        if label in references:
            ax.axhline(references[label], color=color, linestyle=":",
                       label=f"{label}, {reference_label}")
    if chance is not None:
        ax.axhline(chance, color="0.6", linewidth=0.8, label="chance")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("distance: steps from the only B to the end")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


_GATE_NAMES = {
    "i": "i: input gate",
    "f": "f: forget gate",
    "g": "g: candidate",
    "o": "o: output gate",
    "c": "c: cell state",
    "h": "h: hidden state",
}


def _token_label(token: str) -> str:
    """A visible tick label for a character or word: newline and space get a symbol."""
    return {"\n": "\u23ce", " ": "\u2423", "\t": "\u21e5"}.get(token, token)


def _as_matrix(values: Any) -> np.ndarray:
    """A (T, Hs) array from a tensor or array of shape (T, Hs) or (1, T, Hs)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    array = np.asarray(values, dtype=float)
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2:
        raise ValueError(f"expected a (T, Hs) array of states, got shape {array.shape}")
    return array


def _heatmap(ax: Axes, matrix: np.ndarray, key: str, units: Sequence[int]) -> Any:
    """Draw one quantity (T, Hs) of an RNN as units x time; returns the image for a colour bar."""
    rows = matrix[:, list(units)].T  # (units, T)
    if key in ("i", "f", "o"):
        style = dict(cmap="viridis", vmin=0.0, vmax=1.0)
    else:  # g, h in (-1, 1); c unbounded but symmetric around 0
        bound = 1.0 if key in ("g", "h") else max(float(np.abs(rows).max(initial=0.0)), 1e-6)
        style = dict(cmap="RdBu_r", vmin=-bound, vmax=bound)
    image = ax.imshow(rows, aspect="auto", interpolation="nearest", **style)
    ax.set_yticks(range(len(units)), labels=[str(u) for u in units], fontsize=6)
    ax.set_ylabel(_GATE_NAMES.get(key, key), fontsize=8)
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
    matrices = {k: _as_matrix(trace[k]) for k in keys}
    for key, matrix in matrices.items():
        if matrix.shape[0] != len(tokens):
            raise ValueError(
                f"{key!r} covers {matrix.shape[0]} steps but {len(tokens)} tokens were given"
            )
    hidden = next(iter(matrices.values())).shape[1]
    units = list(range(hidden)) if units is None else list(units)
    height = 0.9 + len(keys) * (0.4 + 0.07 * len(units))
    fig = Figure(figsize=(max(6.0, 0.16 * len(tokens) + 2.0), height), layout="constrained")
    axes = fig.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    for ax, key in zip(axes, keys, strict=True):
        image = _heatmap(ax, matrices[key], key, units)
        fig.colorbar(image, ax=ax, pad=0.01, fraction=0.03)
    axes[-1].set_xticks(range(len(tokens)), labels=[_token_label(t) for t in tokens],
                        fontsize=7)
    axes[-1].set_xlabel("input token (time step)")
    if title:
        fig.suptitle(title)
    return fig


def _moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """The mean of the last ``window`` values at every position (fewer at the start)."""
    y = np.asarray(values, dtype=float)
    if window <= 1 or len(y) == 0:
        return y
    cumsum = np.concatenate([[0.0], np.cumsum(y)])
    ends = np.arange(1, len(y) + 1)
    starts = np.maximum(0, ends - window)
    return (cumsum[ends] - cumsum[starts]) / (ends - starts)


def plot_loss_curves(
    histories: Mapping[str, Any],
    baselines: Mapping[str, float] | None = None,
    ax: Axes | None = None,
    *,
    smooth: int = 20,
    title: str = "Training a language model",
    ylabel: str = "loss (nats per token)",
) -> Axes:
    """Training and held-out loss against the step, with horizontal baselines.

    Args:
        histories: label -> a training history with ``steps``, ``train_loss``, ``val_steps``
            and ``val_loss`` (e.g. :class:`coursepkg.lm.TrainHistory`).
        baselines: label -> a loss drawn as a dashed horizontal line (e.g. an n-gram model's
            held-out loss).
        ax: the axes to draw into; a new figure is made when None.
        smooth: the training loss is drawn faintly as measured and solid as a moving average
            over this many steps.
        title: the axes title.
        ylabel: the y axis label.

    Returns:
        The axes. Per history: a faint raw line, a ``"<label>, train"`` line and, if it has
        held-out losses, a ``"<label>, held-out"`` line with markers; one line per baseline.
    """
    if ax is None:
        ax = Figure(figsize=(6.5, 4.0), layout="constrained").subplots()
    for index, (label, history) in enumerate(histories.items()):
        color = f"C{index % 10}"
        steps = list(history.steps)
        ax.plot(steps, list(history.train_loss), color=color, alpha=0.25, linewidth=0.8)
        ax.plot(steps, _moving_average(history.train_loss, smooth), color=color,
                label=f"{label}, train")
        if len(history.val_loss):
            ax.plot(list(history.val_steps), list(history.val_loss), color=color,
                    linestyle="--", marker="o", markersize=4, label=f"{label}, held-out")
    for index, (label, value) in enumerate((baselines or {}).items()):
        ax.axhline(value, color=f"C{(len(histories) + index) % 10}", linestyle=":",
                   label=f"{label}: {value:.3f}")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


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
    values = _as_matrix(matrix)
    if values.shape != (len(labels), len(labels)):
        raise ValueError(f"expected a {len(labels)} x {len(labels)} matrix, got {values.shape}")
    if ax is None:
        size = 1.2 + 0.45 * len(labels)
        ax = Figure(figsize=(size + 3.5, size), layout="constrained").subplots()
    ax.imshow(values, cmap="RdBu_r", vmin=-1.0, vmax=1.0)
    for row in range(len(labels)):
        for col in range(len(labels)):
            value = values[row, col]
            ax.text(col, row, f"{value:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if abs(value) > 0.6 else "black")
    ax.set_yticks(range(len(labels)), labels=[f"{i + 1}. {t}" for i, t in enumerate(labels)],
                  fontsize=8)
    ax.set_xticks(range(len(labels)), labels=[str(i + 1) for i in range(len(labels))],
                  fontsize=8)
    ax.set_title(title)
    return ax


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


class RNNStateExplorer(widgets.VBox):
    """A widget: type a text, move a slider along it, see the RNN's state and its prediction.

    Build it with :func:`rnn_state_explorer`. The top panel is a heatmap of one quantity (the
    hidden state h, or an LSTM's cell state or gates) for the ``n_units`` units that vary most
    over the text, with the current step framed; the bottom panel is the model's next-token
    distribution after the current step. The controls are public attributes (``text``,
    ``step``, ``quantity``); changing any of them redraws :attr:`figure` and :attr:`image`.

    Attributes:
        model: the recurrent language model.
        figure: the matplotlib figure of the current state.
        image: the image widget that shows ``figure``.
        message: a text line under the plot (e.g. characters the model does not know).
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
        self.model = model
        self.tokenizer = tokenizer
        self.n_units = n_units
        self.top = top
        self.tokens: list[str] = []
        self.states: dict[str, np.ndarray] = {}
        self.probs = np.zeros((0, 0))
        options = ["h", "c", "i", "f", "g", "o"] if callable(getattr(model.rnn, "trace", None)) \
            else ["h"]
        if quantity not in options:
            raise ValueError(f"quantity must be one of {options}, got {quantity!r}")
        self.text = widgets.Text(value=text, description="text", continuous_update=False,
                                 placeholder="type some text",
                                 layout=widgets.Layout(width="95%"))
        self.step = widgets.IntSlider(value=0, min=0, max=0, description="step")
        self.quantity = widgets.Dropdown(options=options, value=quantity, description="show")
        self.figure = Figure(figsize=(7.5, 5.6), layout="constrained")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        self._reading = False  # True while a new text moves the slider: redraw once, at the end
        self._read_text()
        self.step.value = self.step.max
        self.text.observe(self._on_text, names="value")
        self.step.observe(self._on_change, names="value")
        self.quantity.observe(self._on_change, names="value")
        super().__init__([self.text, widgets.HBox([self.step, self.quantity]), self.image,
                          self.message])
        self.redraw()

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
        self._reading = True
        try:
            self._read_text()
            self.step.value = self.step.max
        finally:
            self._reading = False
        self.redraw()

    def _on_change(self, _change: dict) -> None:
        if not self._reading:
            self.redraw()

    def units(self) -> list[int]:
        """The ``n_units`` units whose chosen quantity varies most over the text, by index."""
        matrix = self.states[self.quantity.value]  # (T, Hs)
        spread = matrix.std(axis=0) if len(matrix) > 1 else np.abs(matrix[0])
        order = np.argsort(-spread, kind="stable")[: self.n_units]
        return sorted(int(u) for u in order)

    def redraw(self) -> Figure:
        """Redraw the figure for the current controls and return it."""
        self.figure.clear()
        top_ax, bottom_ax = self.figure.subplots(
            2, 1, gridspec_kw={"height_ratios": [1.3, 1.0]}
        )
        if not self.tokens:
            for ax in (top_ax, bottom_ax):
                ax.set_axis_off()
            top_ax.set_title("type some text the model knows")
        else:
            t, key = self.step.value, self.quantity.value
            units = self.units()
            image = _heatmap(top_ax, self.states[key], key, units)
            self.figure.colorbar(image, ax=top_ax, pad=0.01, fraction=0.03)
            top_ax.add_patch(_step_frame(t, len(units)))
            top_ax.set_xticks(range(len(self.tokens)),
                              labels=[_token_label(c) for c in self.tokens], fontsize=7)
            top_ax.set_title(f"{_GATE_NAMES.get(key, key)} after each token; step {t}: "
                             f"{self.tokens[t]!r}", fontsize=9)
            probs = dict(zip(self.tokenizer.chars, self.probs[t].tolist(), strict=True))
            plot_next_word_distribution(
                _Distribution(probs), self.tokens[: t + 1], self.top, bottom_ax, joiner="",
                title=f"next token after: {_format_context(self.tokens[: t + 1], '')!r}",
            )
        self.image.value = _figure_png(self.figure)
        return self.figure


def _step_frame(t: int, rows: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((t - 0.5, -0.5), 1.0, rows, fill=False, edgecolor="black", linewidth=1.5)


def rnn_state_explorer(
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    text: str = "",
    quantity: str = "h",
    n_units: int = 16,
    top: int = 8,
) -> RNNStateExplorer:
    """An interactive view of a character-level recurrent language model reading a text.

    Args:
        model: a :class:`coursepkg.rnn.RNNLM` (with an LSTM, every gate can be shown).
        tokenizer: its :class:`coursepkg.data.CharTokenizer` (attributes ``chars``, ``encode``).
        text: the initial text; the slider starts at its last character.
        quantity: ``"h"``, or for an LSTM also ``"c", "i", "f", "g", "o"``.
        n_units: how many hidden units the heatmap shows (those that vary most over the text).
        top: how many next-token bars to draw.

    Returns:
        The widget; display it as the last expression of a notebook cell.
    """
    return RNNStateExplorer(model, tokenizer, text=text, quantity=quantity, n_units=n_units,
                            top=top)


# ------------------------------------------------------------------------ chapter 3: attention


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
        An :class:`IPython.display.Markdown` object whose ``data`` is a GitHub-style table;
        display it as the last expression of a cell. The rendered book parses it when the cell
        asks for the ``gfm`` Markdown format (cell metadata ``mystnb: markdown_format: gfm``).

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
    if ax is None:
        ax = Figure(figsize=(6.5, 3.8), layout="constrained").subplots()
    positions = list(range(len(buckets)))
    for index, (label, values) in enumerate(curves.items()):
        values = list(values)
        if len(values) != len(buckets):
            raise ValueError(f"curve {label!r} has {len(values)} values for {len(buckets)} buckets")
        ax.plot(positions, values, marker="o", color=f"C{index % 10}", label=label)
    labels = list(buckets)
    if counts is not None:
        if len(counts) != len(buckets):
            raise ValueError(f"{len(counts)} counts for {len(buckets)} buckets")
        labels = [f"{b}\n(n={n})" for b, n in zip(buckets, counts, strict=True)]
    ax.set_xticks(positions, labels=labels, fontsize=8)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


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
    fig = Figure(figsize=(4.2 * panels + 1.0, 3.6), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    names = list(dict.fromkeys([*spreads, *(peaks or {})]))
    for ax, curves, ylabel in zip(
        axes, (spreads, peaks or {}),
        ("standard deviation of the scores", "largest softmax weight"), strict=False,
    ):
        for label, values in curves.items():
            values = list(values)
            if len(values) != len(dims):
                raise ValueError(f"curve {label!r} has {len(values)} values for {len(dims)} widths")
            ax.plot(list(dims), values, marker="o", color=f"C{names.index(label) % 10}",
                    label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(dims), labels=[str(d) for d in dims])
        ax.set_xlabel("width D of queries and keys")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
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
    if ax is None:
        ax = Figure(figsize=(6.5, 3.8), layout="constrained").subplots()
    length = 0
    for index, (label, values) in enumerate(norms.items()):
        y = np.asarray(values, dtype=float)
        y = np.where(y > 0, y, np.nan)
        length = max(length, len(y))
        ax.plot(np.arange(1, len(y) + 1), y, marker="o", markersize=3, color=f"C{index % 10}",
                label=label)
    labels = [str(s) for s in range(1, length + 1)] if tokens is None else [
        _token_label(t) for t in tokens]
    ax.set_xticks(range(1, len(labels) + 1), labels=labels, fontsize=7)
    ax.set_xlabel("source position" if tokens is None else "source token")
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


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
    matrix = _as_matrix(weights)
    if matrix.shape != (len(target), len(source)):
        raise ValueError(
            f"expected {len(target)} x {len(source)} weights (target x source), got {matrix.shape}"
        )
    if ax is None:
        ax = Figure(figsize=(0.28 * len(source) + 1.5, 0.28 * len(target) + 1.2),
                    layout="constrained").subplots()
    ax.imshow(matrix, cmap="Greys", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    ax.set_xticks(range(len(source)), labels=[_token_label(t) for t in source], fontsize=8)
    ax.set_yticks(range(len(target)), labels=[_token_label(t) for t in target], fontsize=8)
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
    fig = Figure(figsize=(ncols * (0.22 * widest + 1.0), nrows * (0.22 * tallest + 1.0)),
                 layout="constrained")
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


class AttentionLookupExplorer(widgets.VBox):
    """A widget on the A/B lookup: scale the query, move the B, change the number of tokens.

    Build it with :func:`attention_lookup_explorer`. The left panel shows the attention weight
    of every token; the right panel shows, in the plane of the two coordinates, the attention
    output, the plain average of the tokens (a DAN) and the ideal answer ([0, 1] if there is a
    B, [1, 0] if not). The controls are public attributes (``scale``, ``b_position``,
    ``n_keys``, ``has_b``); changing any of them redraws :attr:`figure` and :attr:`image`.

    Attributes:
        figure: the matplotlib figure of the current lookup.
        image: the image widget that shows ``figure``.
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
        self.scale = widgets.FloatSlider(value=scale, min=0.0, max=12.0, step=0.5,
                                         description="query scale")
        self.n_keys = widgets.IntSlider(value=n_keys, min=1, max=max_keys, description="tokens")
        self.b_position = widgets.IntSlider(value=b_position, min=0, max=n_keys - 1,
                                            description="B position")
        self.has_b = widgets.Checkbox(value=True, description="the sequence has a B")
        self.figure = Figure(figsize=(8.5, 3.6), layout="constrained")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        self._resizing = False  # True while n_keys moves the B slider: redraw once, at the end
        self.n_keys.observe(self._on_n_keys, names="value")
        for control in (self.scale, self.b_position, self.has_b):
            control.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.scale, self.has_b]),
                          widgets.HBox([self.n_keys, self.b_position]), self.image, self.message])
        self.redraw()

    def _on_n_keys(self, _change: dict) -> None:
        self._resizing = True
        try:
            last = self.n_keys.value - 1
            if self.b_position.value > last:
                self.b_position.value = last  # before max shrinks, so the slider accepts it
            self.b_position.max = last
        finally:
            self._resizing = False
        self.redraw()

    def _on_change(self, _change: dict) -> None:
        if not self._resizing:
            self.redraw()

    def redraw(self) -> Figure:
        """Recompute the lookup for the current controls, redraw, and return the figure."""
        b_position = self.b_position.value if self.has_b.value else None
        self.key_vectors, self.weights, self.output = ab_attention(
            self.n_keys.value, b_position, self.scale.value
        )
        self.figure.clear()
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
        self.image.value = _figure_png(self.figure)
        return self.figure


def attention_lookup_explorer(
    *, n_keys: int = 4, b_position: int = 2, scale: float = 1.0, max_keys: int = 40
) -> AttentionLookupExplorer:
    """An interactive version of the A/B attention example.

    Args:
        n_keys: the initial number of tokens (A's and at most one B).
        b_position: the initial position of the B (0-based).
        scale: the initial query scale: the query is ``[0, scale]``.
        max_keys: the largest number of tokens the slider allows.

    Returns:
        The widget; display it as the last expression of a notebook cell.
    """
    return AttentionLookupExplorer(n_keys=n_keys, b_position=b_position, scale=scale,
                                   max_keys=max_keys)


# ------------------------------------------------------------------- chapter 4: self-attention

_NEG_INF_LABEL = "\u2212\u221e"  # "−∞"


def _square_panel(
    ax: Axes, matrix: np.ndarray, tokens: Sequence[str], kind: str, annotate: bool, title: str
) -> Any:
    """Draw one (T, T) matrix of scores or weights, queries as rows, keys as columns."""
    finite = np.isfinite(matrix)
    if kind == "weights":
        style = dict(cmap="Greys", vmin=0.0, vmax=1.0)
    else:
        bound = max(float(np.abs(matrix[finite]).max(initial=0.0)), 1e-6)
        style = dict(cmap="RdBu_r", vmin=-bound, vmax=bound)
    shown = np.ma.masked_array(np.where(finite, matrix, 0.0), mask=~finite)
    cmap = matplotlib.colormaps[style.pop("cmap")].with_extremes(bad="0.85")  # -inf: grey
    image = ax.imshow(shown, cmap=cmap, aspect="equal", interpolation="nearest", **style)
    if annotate:
        for row in range(matrix.shape[0]):
            for col in range(matrix.shape[1]):
                value = matrix[row, col]
                if not np.isfinite(value):
                    text, dark = (_NEG_INF_LABEL if value < 0 else f"{value}"), False
                else:
                    text = "0" if value == 0 and kind == "weights" else f"{value:.2f}"
                    level = value if kind == "weights" else abs(value) / style["vmax"]
                    dark = level > 0.6
                ax.text(col, row, text, ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
    labels = [_token_label(t) for t in tokens]
    ax.set_xticks(range(len(tokens)), labels=labels, fontsize=8, rotation=45 * (len(tokens) > 8))
    ax.set_yticks(range(len(tokens)), labels=labels, fontsize=8)
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
    fig = Figure(figsize=(len(panels) * (size + 0.8), size + 0.4), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, matrix, kind) in zip(axes, panels, strict=True):
        values = _as_matrix(matrix)
        if values.shape != (T, T):
            raise ValueError(f"panel {name!r}: expected {T} x {T} for {T} tokens, "
                             f"got {values.shape}")
        image = _square_panel(ax, values, tokens, kind, annotate, name)
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
        The figure, one axes per panel (unused grid cells removed), each with a legend.

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
    fig = Figure(figsize=(4.3 * ncols + 0.4, 3.4 * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    measured = list(dict.fromkeys(label for curves in panels.values() for label in curves
                                  if label not in references))
    for ax, (ylabel, curves) in zip(axes, panels.items(), strict=False):
        for label, values in curves.items():
            y = np.asarray(list(values), dtype=float)
            if len(y) != len(dims):
                raise ValueError(
                    f"curve {label!r} of {ylabel!r} has {len(y)} values for {len(dims)} widths"
                )
            if ylabel in log_y:
                y = np.where(y > 0, y, np.nan)
            if label in references:
                ax.plot(list(dims), y, linestyle="--", color="0.5", linewidth=1, label=label)
            else:
                ax.plot(list(dims), y, marker="o", markersize=4,
                        color=f"C{measured.index(label) % 10}", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(dims), labels=[str(d) for d in dims], fontsize=7)
        ax.minorticks_off()
        if ylabel in log_y:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    if title:
        fig.suptitle(title)
    return fig


def plot_timings(
    lengths: Sequence[int],
    times: Mapping[str, Sequence[float | None]],
    ax: Axes | None = None,
    *,
    slopes: Mapping[int, str] | None = None,
    ylabel: str = "time (s)",
    title: str = "Time against sequence length",
) -> Axes:
    """Measured times against the sequence length on log-log axes, with slope guides.

    Args:
        lengths: the sequence lengths n on the x axis.
        times: label -> one time per length; None (or a value that is not positive) where a
            model was not measured at that length.
        ax: the axes to draw into; a new figure is made when None.
        slopes: power p -> the label of a curve; a grey line proportional to n^p (dotted for
            p = 1, dash-dotted otherwise), labelled "∝ n^p", is drawn through that curve's last
            measured point (e.g. ``{1: "LSTM", 2: "attention"}``).
        ylabel: the y axis label.
        title: the axes title.

    Returns:
        The axes, both scales logarithmic, one line per curve and per slope guide, a legend.

    Raises:
        ValueError: if a curve does not have one value per length, or a slope names an
            unknown curve.
    """
    if ax is None:
        ax = Figure(figsize=(6.5, 4.2), layout="constrained").subplots()
    x = np.asarray(list(lengths), dtype=float)
    series = {}
    for index, (label, values) in enumerate(times.items()):
        values = list(values)
        if len(values) != len(x):
            raise ValueError(f"curve {label!r} has {len(values)} values for {len(x)} lengths")
        y = np.array([np.nan if v is None or v <= 0 else float(v) for v in values])
        series[label] = y
        ax.plot(x, y, marker="o", markersize=4, color=f"C{index % 10}", label=label)
    for power, label in (slopes or {}).items():
        if label not in series:
            raise ValueError(f"slope {power} refers to an unknown curve {label!r}")
        y = series[label]
        last = int(np.flatnonzero(np.isfinite(y))[-1])
        guide = y[last] * (x / x[last]) ** power
        name = "n" if power == 1 else f"n^{power}"
        ax.plot(x, guide, linestyle=":" if power == 1 else "-.", color="0.45", linewidth=1.2,
                label=f"$\\propto {name}$")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(x), labels=[str(int(n)) for n in x], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("sequence length n")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    return ax


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


class SelfAttentionExplorer(widgets.VBox):
    """A widget: type a sentence, switch the scaling and the causal mask, change d_k.

    Build it with :func:`self_attention_explorer`. The figure shows the scores and the weights
    of an untrained self-attention head (see :func:`random_self_attention`) over the words of
    the sentence. The controls are public attributes (``text``, ``scaled``, ``causal``,
    ``d_k``); changing any of them redraws :attr:`figure` and :attr:`image`.

    Attributes:
        figure: the matplotlib figure of the current matrices.
        image: the image widget that shows ``figure``.
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
        self.d_model = d_model
        self.seed = seed
        self.text = widgets.Text(value=text, description="sentence", continuous_update=False,
                                 layout=widgets.Layout(width="95%"))
        self.scaled = widgets.Checkbox(value=scaled, description="divide by sqrt(d_k)")
        self.causal = widgets.Checkbox(value=causal, description="causal mask")
        self.d_k = widgets.SelectionSlider(options=list(self.D_K_OPTIONS), value=d_k,
                                           description="d_k")
        self.figure = Figure(figsize=(9.0, 4.2), layout="constrained")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        for control in (self.text, self.scaled, self.causal, self.d_k):
            control.observe(self._on_change, names="value")
        super().__init__([self.text, widgets.HBox([self.scaled, self.causal, self.d_k]),
                          self.image, self.message])
        self.redraw()

    def _on_change(self, _change: dict) -> None:
        self.redraw()

    def redraw(self) -> Figure:
        """Recompute the matrices for the current controls, redraw, and return the figure."""
        self.words = self.text.value.split()
        self.figure.clear()
        if not self.words:
            self.scores = self.weights = torch.zeros(0, 0)
            ax = self.figure.subplots()
            ax.set_axis_off()
            ax.set_title("type a sentence")
            self.message.value = ""
        else:
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
                image = _square_panel(ax, matrix.numpy(), self.words, kind, annotate, name)
                self.figure.colorbar(image, ax=ax, pad=0.02, fraction=0.046, shrink=0.8)
            self.figure.suptitle(f"d_k = {self.d_k.value}" +
                                 (", causal mask" if self.causal.value else ""), fontsize=10)
            peak = self.weights.max(dim=-1).values.mean().item()
            entropy = -(self.weights * self.weights.clamp_min(1e-45).log()).sum(-1).mean().item()
            self.message.value = (f"largest weight of a row, on average: {peak:.3f}; "
                                  f"entropy of a row, on average: {entropy:.3f} nats")
        self.image.value = _figure_png(self.figure)
        return self.figure


def self_attention_explorer(
    *,
    text: str = "the cat sat on the mat",
    d_k: int = 16,
    scaled: bool = True,
    causal: bool = False,
    d_model: int = 32,
    seed: int = 0,
) -> SelfAttentionExplorer:
    """An interactive view of one untrained self-attention head over a sentence.

    Args:
        text: the initial sentence (split into words on whitespace).
        d_k: the initial width of queries and keys, a power of 2 from 1 to 1024.
        scaled: start with the scores divided by sqrt(d_k).
        causal: start with the causal mask.
        d_model: D, the width of the random word vectors.
        seed: changes the word vectors and the projections.

    Returns:
        The widget; display it as the last expression of a notebook cell.
    """
    return SelfAttentionExplorer(text=text, d_k=d_k, scaled=scaled, causal=causal,
                                 d_model=d_model, seed=seed)


# --------------------------------------------------------------- chapter 5: multi-head attention


def _tint(color: Any, amount: float) -> np.ndarray:
    """An RGBA colour mixed with white: amount 0 is white, 1 the colour itself."""
    rgba = np.array(matplotlib.colors.to_rgba(color))
    rgba[:3] = 1.0 - amount * (1.0 - rgba[:3])
    return rgba


def _numbered_matrix(ax: Axes, values: np.ndarray, heads: np.ndarray, title: str) -> None:
    """Draw an integer matrix cell by cell, each cell tinted with the colour of its head."""
    colours = np.stack([np.stack([_tint(f"C{h % 10}", 0.45) for h in row]) for row in heads])
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
    fig = Figure(figsize=(width, rows * (0.42 * T + 1.3) + 0.3), layout="constrained")
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
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    array = np.asarray(weights, dtype=float)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 3:
        raise ValueError(f"expected the weights of one layer as (H, T, T), got {array.shape}")
    return array


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
    fig = Figure(figsize=(len(shown) * size + 1.0, len(stacks) * (size + 0.3) + 0.4),
                 layout="constrained")
    axes = fig.subplots(len(stacks), len(shown), squeeze=False)
    image = None
    for row, (stack, name) in enumerate(zip(stacks, layer_names, strict=True)):
        for col, h in enumerate(shown):
            label = f"{name}, head {h + 1}" if name else f"head {h + 1}"
            image = _square_panel(axes[row, col], stack[h], tokens, "weights", annotate, label)
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
            f"most on {_token_label(tokens[top])!r} (key {top + 1}, {column[top]:.3f})")


AttentionMaps = Callable[[str], tuple[Sequence[str], Sequence[Any]]]


class MultiHeadExplorer(widgets.VBox):
    """A widget: type an input, pick a layer and a head, see where that head looks.

    Build it with :func:`multihead_explorer`. The model is hidden behind a function
    ``attention_maps(text) -> (tokens, weights)`` that runs it on the typed text and returns the
    tokens and, for each layer, the weights (H, T, T) of its heads; the function may raise
    ValueError for a text the model cannot read, and the widget shows the message. The controls
    are public attributes (``text``, ``layer``, ``head``); changing any of them redraws
    :attr:`figure` and :attr:`image`.

    Attributes:
        figure: the matplotlib figure of the current map(s).
        image: the image widget that shows ``figure``.
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
        self._maps = attention_maps
        tokens, layers = attention_maps(text)  # a bad initial text raises here
        n_layers, n_heads = len(layers), _head_stack(layers[0]).shape[0] if layers else 0
        if n_layers < 1 or n_heads < 1:
            raise ValueError("attention_maps must return the weights of at least one layer")
        if not 1 <= layer <= n_layers:
            raise ValueError(f"layer must be in 1 ... {n_layers}, got {layer}")
        if head != "all" and (isinstance(head, bool) or head not in range(1, n_heads + 1)):
            raise ValueError(f"head must be 'all' or in 1 ... {n_heads}, got {head!r}")
        self.n_layers, self.n_heads = n_layers, n_heads
        self.text = widgets.Text(value=text, description=description, continuous_update=False)
        self.layer = widgets.Dropdown(options=list(range(1, n_layers + 1)), value=layer,
                                      description="layer")
        self.head = widgets.Dropdown(options=["all", *range(1, n_heads + 1)], value=head,
                                     description="head")
        self.figure = Figure(figsize=(4.5, 4.0), layout="constrained")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        for control in (self.text, self.layer, self.head):
            control.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.text, self.layer, self.head]), self.image,
                          self.message])
        self.redraw()

    def _on_change(self, _change: dict) -> None:
        self.redraw()

    def redraw(self) -> Figure:
        """Run the model on the current text, redraw the chosen map(s), return the figure."""
        self.figure.clear()
        try:
            tokens, layers = self._maps(self.text.value)
            stacks = [_head_stack(w) for w in layers]
        except ValueError as error:
            self.tokens, self.weights = [], []
            ax = self.figure.subplots()
            ax.set_axis_off()
            ax.set_title("cannot read this input")
            self.message.value = f"<b>cannot read this input:</b> {_html_escape(str(error))}"
            self.image.value = _figure_png(self.figure)
            return self.figure
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
            image = _square_panel(ax, weights, self.tokens, "weights", T <= 12,
                                  f"layer {layer}, head {h + 1}")
            lines.append(f"layer {layer}, head {h + 1}: "
                         + _html_escape(_head_summary(weights, self.tokens)))
        self.figure.colorbar(image, ax=list(axes), pad=0.02, fraction=0.04, shrink=0.8)
        self.message.value = "<br>".join(lines)
        self.image.value = _figure_png(self.figure)
        return self.figure


def _html_escape(text: str) -> str:
    """Escape text for an HTML widget (``&``, ``<``, ``>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def multihead_explorer(
    attention_maps: AttentionMaps,
    *,
    text: str,
    layer: int = 1,
    head: int | str = "all",
    description: str = "input",
) -> MultiHeadExplorer:
    """An interactive view of the attention maps of a trained multi-head model.

    Args:
        attention_maps: ``text -> (tokens, weights)``: runs the model on the text and returns
            its T tokens and, for each layer, the weights (H, T, T) (or (1, H, T, T)) of its
            heads; it may raise ValueError for a text the model cannot read.
        text: the initial input.
        layer: the initial layer (1-based).
        head: the initial head (1-based), or ``"all"`` to draw every head of the layer.
        description: the label of the text box.

    Returns:
        The widget; display it as the last expression of a notebook cell.

    Raises:
        ValueError: if the initial text cannot be read, or the layer or head does not exist.
    """
    return MultiHeadExplorer(attention_maps, text=text, layer=layer, head=head,
                             description=description)


# ------------------------------------------------------------- chapter 6: positional encodings


def _as_table(values: Any, name: str) -> np.ndarray:
    """A non-empty 2-D float array from a tensor or an array."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    array = np.asarray(values, dtype=float)
    if array.ndim != 2 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-D table, got shape {array.shape}")
    return array


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
    values = _as_table(table, "table")
    if ax is None:
        ax = Figure(figsize=(7.0, 4.2), layout="constrained").subplots()
    bound = max(float(np.abs(values).max()), 1e-6)
    image = ax.imshow(values, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto",
                      interpolation="nearest")
    ax.figure.colorbar(image, ax=ax, pad=0.02, fraction=0.046)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return ax


_LINESTYLES = ("-", "--", ":", "-.")


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
    if ax is None:
        ax = Figure(figsize=(6.5, 3.8), layout="constrained").subplots()
    x = np.asarray(list(offsets), dtype=float)
    for index, (label, values) in enumerate(curves.items()):
        y = np.asarray(list(values), dtype=float)
        if len(y) != len(x):
            raise ValueError(f"curve {label!r} has {len(y)} values for {len(x)} offsets")
        ax.plot(x, y, color=f"C{index % 10}", linestyle=_LINESTYLES[index % len(_LINESTYLES)],
                linewidth=2.2 - 0.4 * (index % 4), label=label)
    if len(x) and x.min() <= 0 <= x.max():
        ax.axvline(0.0, color="0.6", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


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
    value. Positions at or beyond ``trained_length``, never seen in training, are shaded.

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
        The axes: one line per curve, then the chance line (if any), y from 0 to 1 (a little
        more with ``trained_length``, for its label), a legend to the right.

    Raises:
        ValueError: if a curve does not have one value per position.
    """
    if ax is None:
        ax = Figure(figsize=(8.5, 4.0), layout="constrained").subplots()
    x = np.asarray(list(positions), dtype=float)
    for index, (label, values) in enumerate(curves.items()):
        values = list(values)
        if len(values) != len(x):
            raise ValueError(f"curve {label!r} has {len(values)} values for {len(x)} positions")
        y = np.array([np.nan if v is None else float(v) for v in values])
        ax.plot(x, y, color=f"C{index % 10}", linestyle=_LINESTYLES[index % len(_LINESTYLES)],
                marker="o", markersize=2.5, linewidth=1.4, label=label)
    if chance is not None:
        ax.axhline(chance, color="0.4", linestyle=":", linewidth=1, label=f"chance: {chance:.3f}")
    top = 1.03
    if trained_length is not None and len(x):
        ax.axvspan(trained_length - 0.5, x.max() + 0.5, color="0.9", zorder=0)
        ax.text(trained_length, 1.06,
                f" positions \u2265 {trained_length}: longer than in training", fontsize=8,
                color="0.35", va="center")
        top = 1.12
    ax.set_ylim(-0.03, top)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
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
        for label, (vector, colour, alpha) in pairs.items():
            style = "-" if alpha == 1.0 else "--"
            ax.annotate("", xy=tuple(vector), xytext=(0.0, 0.0),
                        arrowprops=dict(arrowstyle="-|>", color=colour, alpha=alpha,
                                        linewidth=1.6 if alpha == 1.0 else 1.0, linestyle=style))
            ax.plot([], [], color=colour, alpha=alpha, linestyle=style, label=label)  # legend
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
    fig = Figure(figsize=(2.3 * n_pairs + 0.4, 3.6), layout="constrained")
    axes = fig.subplots(1, n_pairs, squeeze=False)[0]
    contributions = _draw_rope_pairs(axes, q, k, m, n, base, labels)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=4,
               fontsize=8)
    fig.suptitle(title if title is not None else
                 f"RoPE: {labels[0]} at m = {m}, {labels[1]} at n = {n}; "
                 f"score {contributions.sum():.3f}", fontsize=10)
    return fig


class RopeExplorer(widgets.VBox):
    """A widget: slide a query's position and its offset to a key, watch RoPE rotate the pairs.

    Build it with :func:`rope_explorer`. The top row draws every pair of the query at position
    m and of the key at position n = m - offset (see :func:`plot_rope_pairs`); the bottom panel
    draws, against the query's position, the score of the rotated pair at this offset (flat:
    it depends on the offset only) and, for comparison, the score of the same vectors with the
    sinusoidal table of width Dh added to them instead (``(q + PE[m]) · (k + PE[n])``), which
    changes with the positions. The controls are public attributes (``position``, ``offset``,
    ``base``); changing any of them redraws :attr:`figure` and :attr:`image`.

    Attributes:
        figure: the matplotlib figure.
        image: the image widget that shows ``figure``.
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
        self.q, self.k = _check_rope_pair(q, k)
        if base not in self.BASES:
            raise ValueError(f"base must be one of {self.BASES}, got {base}")
        if not 0 <= offset <= position <= max_position:
            raise ValueError(f"need 0 <= offset <= position <= max_position, got offset={offset}, "
                             f"position={position}, max_position={max_position}")
        self.labels = tuple(labels)
        self.max_position = max_position
        self.position = widgets.IntSlider(value=position, min=offset, max=max_position,
                                          description="position m")
        self.offset = widgets.IntSlider(value=offset, min=0, max=max_position,
                                        description="offset m - n")
        self.base = widgets.Dropdown(options=list(self.BASES), value=base, description="base")
        self.figure = Figure(figsize=(9.0, 6.0), layout="constrained")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        self._moving = False  # True while the offset moves the position slider: redraw once
        self.offset.observe(self._on_offset, names="value")
        for control in (self.position, self.base):
            control.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.position, self.offset, self.base]), self.image,
                          self.message])
        self.redraw()

    def _on_offset(self, _change: dict) -> None:
        self._moving = True
        try:
            if self.position.value < self.offset.value:
                self.position.value = self.offset.value  # the key stays at n >= 0
            self.position.min = self.offset.value
        finally:
            self._moving = False
        self.redraw()

    def _on_change(self, _change: dict) -> None:
        if not self._moving:
            self.redraw()

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

    def redraw(self) -> Figure:
        """Recompute the rotation for the current controls, redraw, and return the figure."""
        m, offset, base = self.position.value, self.offset.value, self.base.value
        n = m - offset
        n_pairs = self.q.shape[0] // 2
        self.figure.clear()
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
        ax.set_xlabel(f"query position m (key at n = m - {offset})")
        ax.set_ylabel("score q · k")
        ax.set_title(f"The score of the pair at offset {offset}, wherever it is", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        self.figure.suptitle(f"{self.labels[0]} at m = {m}, {self.labels[1]} at n = {n}, "
                             f"base {base:g}", fontsize=10)
        self.message.value = (
            f"{_html_escape(self.labels[0])} at m = {m}, {_html_escape(self.labels[1])} at "
            f"n = {n} (offset {offset}): RoPE score {self.score:.3f}, the same at every m for "
            f"this offset; with the sinusoidal table added instead: {self.added_score:.3f}"
        )
        self.image.value = _figure_png(self.figure)
        return self.figure


def rope_explorer(
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
) -> RopeExplorer:
    """An interactive view of rotary position embeddings on one query and one key.

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

    Returns:
        The widget; display it as the last expression of a notebook cell.

    Raises:
        ValueError: for vectors of different or odd widths, an unknown base, or positions
            outside 0 <= offset <= position <= max_position.
    """
    return RopeExplorer(q, k, labels=labels, position=position, offset=offset, base=base,
                        d_head=d_head, max_position=max_position, seed=seed)


# ------------------------------------------------------------- chapter 7: the full Transformer


def plot_gradients_by_layer(
    norms: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    title: str | None = None,
    ylabel: str = "gradient norm (log scale)",
) -> Figure:
    """Each layer's gradient norm, one panel per model, one line per moment of training.

    Args:
        norms: model label -> (moment label -> one norm per layer, the first layer first),
            e.g. ``{"post-norm": {"step 0": [...], "step 20": [...]}, "pre-norm": {...}}``.
            A moment has the same colour in every panel. Values that are not positive cannot
            be shown on a log axis and are left out.
        title: the figure title.
        ylabel: the y axis label (of the first panel).

    Returns:
        The figure, one axes per model with a shared logarithmic y axis, layers numbered
        from 1 on the x axis, and a legend in each panel.

    Raises:
        ValueError: if there is no model, a model has no moment, or the moments of a model
            do not all have the same number of layers.
    """
    if not norms:
        raise ValueError("plot_gradients_by_layer needs at least one model")
    moments: list[str] = []
    for model, curves in norms.items():
        if not curves:
            raise ValueError(f"model {model!r} has no curve")
        if len({len(values) for values in curves.values()}) != 1:
            raise ValueError(f"the curves of model {model!r} do not have the same number of "
                             "layers")
        moments += [moment for moment in curves if moment not in moments]
    fig = Figure(figsize=(4.2 * len(norms) + 0.6, 3.8), layout="constrained")
    axes = fig.subplots(1, len(norms), squeeze=False, sharey=True)[0]
    for ax, (model, curves) in zip(axes, norms.items(), strict=True):
        for moment, values in curves.items():
            y = np.asarray(values, dtype=float)
            y = np.where(y > 0, y, np.nan)
            layers = np.arange(1, len(y) + 1)
            ax.plot(layers, y, marker="o", markersize=3,
                    color=f"C{moments.index(moment) % 10}", label=moment)
        ax.set_yscale("log")
        ax.set_xlabel("layer (1 = next to the input)")
        ax.set_title(model)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(ylabel)
    if title:
        fig.suptitle(title)
    return fig


def plot_loss_against_time(
    histories: Mapping[str, Any],
    baselines: Mapping[str, float] | None = None,
    ax: Axes | None = None,
    *,
    smooth: int = 20,
    title: str = "Training language models for the same time",
    ylabel: str = "loss (nats per token)",
) -> Axes:
    """Training and held-out loss against the training time, with horizontal baselines.

    Models that take steps of different cost are compared at equal time: step ``s`` of a
    history that took ``seconds`` in ``n`` steps is drawn at ``s * seconds / n``, as if every
    step took the same time.

    Args:
        histories: label -> a training history with ``steps``, ``train_loss``, ``val_steps``,
            ``val_loss`` and ``seconds`` (e.g. :class:`coursepkg.lm.TrainHistory`).
        baselines: label -> a loss drawn as a dotted horizontal line.
        ax: the axes to draw into; a new figure is made when None.
        smooth: the training loss is drawn faintly as measured and solid as a moving average
            over this many steps.
        title: the axes title.
        ylabel: the y axis label.

    Returns:
        The axes. Per history: a faint raw line, a ``"<label>, train"`` line and, if it has
        held-out losses, a ``"<label>, held-out"`` line with markers; one line per baseline.

    Raises:
        ValueError: if a history has no steps or no positive duration.
    """
    if ax is None:
        ax = Figure(figsize=(6.5, 4.0), layout="constrained").subplots()
    for index, (label, history) in enumerate(histories.items()):
        steps = np.asarray(list(history.steps), dtype=float)
        if len(steps) == 0 or not history.seconds > 0:
            raise ValueError(f"history {label!r} needs at least one step and a positive time")
        per_step = history.seconds / steps[-1]
        color = f"C{index % 10}"
        ax.plot(steps * per_step, list(history.train_loss), color=color, alpha=0.25,
                linewidth=0.8)
        ax.plot(steps * per_step, _moving_average(history.train_loss, smooth), color=color,
                label=f"{label}, train")
        if len(history.val_loss):
            ax.plot(np.asarray(list(history.val_steps), dtype=float) * per_step,
                    list(history.val_loss), color=color, linestyle="--", marker="o",
                    markersize=4, label=f"{label}, held-out")
    for index, (label, value) in enumerate((baselines or {}).items()):
        ax.axhline(value, color=f"C{(len(histories) + index) % 10}", linestyle=":",
                   label=f"{label}: {value:.3f}")
    ax.set_xlabel("training time (s), each step counted at the run's mean step time")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


@torch.no_grad()
def next_token_distribution(
    model: torch.nn.Module,
    ids: Sequence[int] | torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    block_size: int | None = None,
) -> torch.Tensor:
    """The distribution that :func:`coursepkg.lm.generate` draws the next token from.

    The same steps as ``generate``: crop the context to its last ``block_size`` tokens, take
    the logits of the last position, divide them by the temperature, keep the ``top_k``
    largest (the others get probability 0), softmax. Temperature 0 is greedy decoding: all the
    probability on the most likely token.

    Args:
        model: any module with ``forward(idx (B, T)) -> logits (B, T, V)``.
        ids: (T,) the context's token ids, T >= 1.
        temperature: divides the logits (0: greedy).
        top_k: keep only the k most likely tokens (None: all).
        block_size: the longest context fed to the model (default: the model's
            ``block_size`` attribute if it has one, else the whole context).

    Returns:
        (V,) float probabilities summing to 1.

    Raises:
        ValueError: for an empty context, a negative temperature, or a top_k or block_size
            below 1.
    """
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() != 1 or ids.numel() < 1:
        raise ValueError(f"ids must be a non-empty 1-D sequence of token ids, got shape "
                         f"{tuple(ids.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if block_size is not None and (isinstance(block_size, bool) or block_size < 1):
        raise ValueError(f"block_size must be >= 1 or None, got {block_size}")
    if block_size is None:
        block_size = getattr(model, "block_size", None)
    context = ids if block_size is None else ids[-block_size:]
    was_training = model.training
    model.eval()
    logits = model(context[None])[:, -1]  # (1, V)
    model.train(was_training)
    if temperature == 0:
        return torch.nn.functional.one_hot(logits[0].argmax(), logits.shape[-1]).float()
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)[0]  # (V,)


def _entropy(probs: np.ndarray) -> float:
    """The entropy of a distribution, in nats."""
    positive = probs[probs > 0]
    return float(-(positive * np.log(positive)).sum())


def plot_sampling_distribution(
    chars: Sequence[str],
    probs: Any,
    base: Any = None,
    ax: Axes | None = None,
    *,
    top: int = 20,
    title: str | None = None,
) -> Axes:
    """A bar chart of a next-token distribution, over the most likely tokens.

    Args:
        chars: the V tokens (e.g. a :class:`coursepkg.data.CharTokenizer`'s ``chars``).
        probs: (V,) the distribution sampled from (after temperature and top-k).
        base: (V,) the model's own distribution (temperature 1, all tokens), drawn as grey
            outlines behind ``probs``; the tokens are ordered by it. None to draw ``probs``
            alone, ordered by itself.
        ax: the axes to draw into; a new figure is made when None.
        top: how many tokens to show (the most likely first).
        title: the axes title.

    Returns:
        The axes: the ``probs`` bars first in ``ax.patches`` (then the ``base`` bars), the
        tokens as x tick labels (newline and space shown as symbols).

    Raises:
        ValueError: if the distributions do not have one value per token, or top < 1.
    """
    probs = np.asarray(torch.as_tensor(probs, dtype=torch.float64).detach().cpu(), dtype=float)
    reference = probs if base is None else np.asarray(
        torch.as_tensor(base, dtype=torch.float64).detach().cpu(), dtype=float)
    if probs.shape != (len(chars),) or reference.shape != (len(chars),):
        raise ValueError(f"expected one probability per token ({len(chars)}), got shapes "
                         f"{probs.shape} and {reference.shape}")
    if top < 1:
        raise ValueError(f"top must be a positive number of tokens, got {top}")
    order = sorted(range(len(chars)), key=lambda i: (-reference[i], chars[i]))[:top]
    if ax is None:
        ax = Figure(figsize=(6.5, 3.6), layout="constrained").subplots()
    x = np.arange(len(order))
    ax.bar(x, probs[order], width=0.7, color="C0", label="sampled from")
    if base is not None:
        ax.bar(x, reference[order], width=0.7, fill=False, edgecolor="0.45", linewidth=1.0,
               label="the model (temperature 1)")
        ax.legend(fontsize=8)
    ax.set_xticks(x, labels=[_token_label(chars[i]) for i in order])
    ax.set_ylim(0.0, min(1.05, max(probs.max(), reference.max(), 0.01) * 1.15))
    ax.set_xlabel(f"next token (the {len(order)} most likely)")
    ax.set_ylabel("probability")
    if title:
        ax.set_title(title, fontsize=9)
    return ax


class SamplingExplorer(widgets.VBox):
    """A widget: type a prompt, set the temperature and top-k, see what the model samples.

    Build it with :func:`sampling_explorer`. The figure draws the model's next-token
    distribution after the prompt (grey outlines, temperature 1) and the distribution that
    :func:`coursepkg.lm.generate` samples from with the chosen temperature and top-k (blue);
    the message gives its entropy and a continuation sampled with these settings from a seeded
    generator. The controls are public attributes (``prompt``, ``temperature``, ``top_k``,
    ``seed``); changing any of them redraws :attr:`figure` and :attr:`image`. A top-k of 0
    keeps every token.

    Attributes:
        figure: the matplotlib figure.
        image: the image widget that shows ``figure``.
        message: the settings, the entropy and the sample, as HTML.
        summary: the settings and the entropy, as plain text ("" if the prompt cannot be read).
        probs: (V,) the distribution sampled from, or None if the prompt cannot be read.
        base: (V,) the model's distribution at temperature 1, or None.
        sample: the sampled continuation (without the prompt), or "".
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        prompt: str,
        temperature: float = 1.0,
        top_k: int = 0,
        length: int = 120,
        seed: int = 0,
        block_size: int | None = None,
        top: int = 20,
    ) -> None:
        if not 0.0 <= temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {temperature}")
        if not 0 <= top_k <= tokenizer.vocab_size:
            raise ValueError(f"top_k must be in 0 ... {tokenizer.vocab_size} (0: every token), "
                             f"got {top_k}")
        if length < 1:
            raise ValueError(f"length must be positive, got {length}")
        self.model, self.tokenizer = model, tokenizer
        self.length, self.block_size, self.top = length, block_size, top
        self.prompt = widgets.Textarea(value=prompt, description="prompt",
                                       continuous_update=False)
        self.temperature = widgets.FloatSlider(value=temperature, min=0.0, max=2.0, step=0.05,
                                               description="temperature",
                                               style={"description_width": "initial"})
        self.top_k = widgets.IntSlider(value=top_k, min=0, max=tokenizer.vocab_size,
                                       description="top-k")
        self.seed = widgets.BoundedIntText(value=seed, min=0, max=10**6, description="seed")
        self.figure = Figure(figsize=(6.5, 3.6), layout="constrained")
        self.image = widgets.Image(format="png")
        self.message = widgets.HTML()
        self.probs: np.ndarray | None = None
        self.base: np.ndarray | None = None
        self.sample = ""
        self.summary = ""
        for control in (self.prompt, self.temperature, self.top_k, self.seed):
            control.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.temperature, self.top_k, self.seed]), self.prompt,
                          self.image, self.message])
        self.redraw()

    def _on_change(self, _change: dict) -> None:
        self.redraw()

    def redraw(self) -> Figure:
        """Recompute both distributions and the sample, redraw, and return the figure."""
        self.figure.clear()
        ax = self.figure.subplots()
        temperature, top_k = self.temperature.value, self.top_k.value or None
        try:
            if not self.prompt.value:
                raise ValueError("type at least one character")
            ids = self.tokenizer.encode(self.prompt.value)
        except ValueError as error:
            self.probs, self.base, self.sample, self.summary = None, None, "", ""
            ax.set_axis_off()
            ax.set_title("cannot read this prompt")
            self.message.value = f"<b>cannot read this prompt:</b> {_html_escape(str(error))}"
            self.image.value = _figure_png(self.figure)
            return self.figure
        kwargs = dict(block_size=self.block_size)
        self.base = next_token_distribution(self.model, ids, **kwargs).double().numpy()
        self.probs = next_token_distribution(self.model, ids, temperature=temperature,
                                             top_k=top_k, **kwargs).double().numpy()
        generator = torch.Generator().manual_seed(self.seed.value)
        out = generate(self.model, torch.tensor([ids]), self.length, temperature=temperature,
                       top_k=top_k, generator=generator, block_size=self.block_size)
        self.sample = self.tokenizer.decode(out[0, len(ids):])
        setting = (f"temperature {temperature:g}" if temperature > 0 else "greedy (temperature 0)")
        setting += f", top-k {top_k}" if top_k else ", every token"
        tail = self.prompt.value[-30:].replace("\n", _token_label("\n"))
        plot_sampling_distribution(self.tokenizer.chars, self.probs, self.base, ax,
                                   top=self.top, title=f"after '{tail}': {setting}")
        possible = int((self.probs > 0).sum())
        self.summary = (f"{setting}: {possible} possible next tokens, entropy "
                        f"{_entropy(self.probs):.2f} nats (the model's own: "
                        f"{_entropy(self.base):.2f})")
        self.message.value = (
            f"{_html_escape(self.summary)}; a sample (seed {self.seed.value}):"
            f"<pre>{_html_escape(self.prompt.value + self.sample)}</pre>"
        )
        self.image.value = _figure_png(self.figure)
        return self.figure


def sampling_explorer(
    model: torch.nn.Module,
    tokenizer: Any,
    *,
    prompt: str,
    temperature: float = 1.0,
    top_k: int = 0,
    length: int = 120,
    seed: int = 0,
    block_size: int | None = None,
    top: int = 20,
) -> SamplingExplorer:
    """An interactive view of temperature and top-k sampling from a trained language model.

    Args:
        model: any module with ``forward(idx (B, T)) -> logits (B, T, V)``.
        tokenizer: turns the prompt into ids and back (``encode``, ``decode``, ``chars``,
            ``vocab_size``), e.g. a :class:`coursepkg.data.CharTokenizer`.
        prompt: the initial prompt.
        temperature: the initial temperature, in [0, 2] (0: greedy).
        top_k: the initial top-k (0: every token).
        length: how many tokens each sample adds to the prompt.
        seed: the initial seed of the sampling generator.
        block_size: the longest context fed to the model (default: the model's
            ``block_size`` attribute, as in :func:`coursepkg.lm.generate`).
        top: how many tokens the bar chart shows.

    Returns:
        The widget; display it as the last expression of a notebook cell.

    Raises:
        ValueError: for a temperature or top-k out of range, a length below 1, or an initial
            prompt the tokenizer cannot read.
    """
    if not prompt:
        raise ValueError("the prompt needs at least one character")
    tokenizer.encode(prompt)  # raises ValueError naming a character it cannot read
    explorer = SamplingExplorer(model, tokenizer, prompt=prompt, temperature=temperature,
                                top_k=top_k, length=length, seed=seed, block_size=block_size,
                                top=top)
    return explorer
