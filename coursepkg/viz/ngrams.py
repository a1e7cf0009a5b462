"""Chapter 1 (n-gram language models): next-word distributions, perplexity against the order.

- :func:`next_word_distribution` and :func:`plot_next_word_distribution`: the most probable next
  tokens of a language model after a context, as a bar chart.
- :func:`plot_perplexity_vs_n`: train and held-out perplexity against the order n.
- :class:`NGramExplorer` (``ngram_explorer``): a widget to choose an order and a smoothing method,
  type a context and watch the next-word distribution change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import ipywidgets as widgets
from matplotlib.axes import Axes

from coursepkg.viz import common
from coursepkg.viz.explorer import Explorer

__all__ = [
    "LanguageModel", "NGramExplorer", "format_context", "next_word_distribution",
    "ngram_explorer", "plot_next_word_distribution", "plot_perplexity_vs_n",
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


def format_context(context: Sequence[str], joiner: str) -> str:
    """A context for a title: its tokens joined, the last 40 characters at most."""
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
    ax = common.axes_or_new(ax, 5.5, 0.32 * len(pairs) + 1.2)
    words = [repr(word) if word.isspace() or not word else word for word, _ in pairs]
    probs = [p for _, p in pairs]
    positions = range(len(pairs))
    bars = ax.barh(positions, probs, color="tab:blue")
    ax.set_yticks(list(positions), labels=words)
    ax.invert_yaxis()
    ax.bar_label(bars, labels=[f"{p:.3f}" for p in probs], padding=3, fontsize=8)
    ax.set_xlim(0, max(max(probs, default=0.0) * 1.25, 1e-3))
    if title is None:
        title = f"after: {format_context(context, joiner)}"
    return common.finish(ax, xlabel="probability of the next token", title=title, grid=None,
                         legend=None)


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
    ax = common.axes_or_new(ax, 6.0, 4.0)
    labels = list(dict.fromkeys([*heldout, *train]))
    for index, label in enumerate(labels):
        for curves, style, kind in ((heldout, "-", "held-out"), (train, "--", "train")):
            if label not in curves:
                continue
            values = list(curves[label])
            if len(values) != len(orders):
                raise ValueError(
                    f"{kind} curve {label!r} has {len(values)} values for {len(orders)} orders"
                )
            ax.plot(orders, values, style, marker="o", color=common.colour(index),
                    label=f"{label}, {kind}")
    ax.set_yscale("log")
    ax.set_xticks(list(orders))
    return common.finish(ax, xlabel="order n of the model", ylabel="perplexity (log scale)",
                         title=title, grid="both")


class NGramExplorer(Explorer):
    """A widget: choose an order and a smoothing method, type a context, see the next tokens.

    Build it with ``ngram_explorer`` (this class). The controls are public attributes
    (``order``, ``smoothing``, ``context``, ``top``); changing any of them redraws
    :attr:`figure` and the PNG shown in :attr:`image` (see :class:`Explorer`).

    Args:
        models: ``(n, smoothing) -> fitted model``, e.g. ``{(2, "kneser_ney"): lm, ...}``.
        context: the initial text of the context box.
        tokenize: turns the typed text into tokens (default: split on whitespace; pass
            :func:`coursepkg.data.word_tokenize` for word models or ``list`` for characters).
        top: the initial number of bars.
        joiner: how tokens are joined in the plot title (``""`` for character models).

    Attributes:
        models: (order, smoothing) -> fitted model.
        message: which words of the context were unknown, or that no model was given.
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
        super().__init__(figsize=(6.0, 4.2))
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
        self._show([widgets.HBox([self.order, self.smoothing, self.top]), self.context],
                   watch=[self.order, self.smoothing, self.context, self.top])

    @property
    def model(self) -> LanguageModel | None:
        """The model for the chosen (order, smoothing), or None if that pair was not given."""
        return self.models.get((self.order.value, self.smoothing.value))

    def tokens(self) -> list[str]:
        """The context box's text, tokenized."""
        return list(self._tokenize(self.context.value))

    def draw(self) -> None:
        model, tokens = self.model, self.tokens()
        if model is None:
            self._nothing_to_show(
                "no model for this order and smoothing",
                f"No model was given for n={self.order.value}, smoothing={self.smoothing.value}.",
            )
            return
        vocab = set(model.vocab)
        unknown = [t for t in tokens if t not in vocab]
        label = f"n={self.order.value}, {self.smoothing.value}"
        title = f"{label}\nafter: {format_context(tokens, self._joiner)}"
        plot_next_word_distribution(model, tokens, self.top.value, self.figure.subplots(),
                                    title=title, joiner=self._joiner)
        self.message.value = "Not in the vocabulary: " + ", ".join(unknown) if unknown else ""


ngram_explorer = NGramExplorer
"""The book's name for :class:`NGramExplorer`: ``viz.ngram_explorer(models, context=...)``."""
