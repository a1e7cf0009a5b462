"""Chapter 7 (the full Transformer): gradients by layer, and what sampling draws from.

- :func:`plot_gradients_by_layer`: every layer's gradient norm at several moments of training,
  one panel per model (post-norm and pre-norm stacks).
- :func:`next_token_distribution`, :func:`plot_sampling_distribution` and
  :class:`SamplingExplorer` (``sampling_explorer``): the distribution
  :func:`coursepkg.lm.generate` samples from after a prompt (its sampler,
  :func:`coursepkg.lm.next_token_probs`), with a temperature and a top-k, and a widget to
  change both and read a sample.

The chapter's training curves are :func:`coursepkg.viz.curves.plot_loss_against_time` and
:func:`coursepkg.viz.curves.plot_loss_and_final_scores`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from coursepkg.lm import generate, next_token_probs
from coursepkg.viz import common
from coursepkg.viz.explorer import Explorer

__all__ = [
    "SamplingExplorer", "next_token_distribution", "plot_gradients_by_layer",
    "plot_sampling_distribution", "sampling_explorer",
]


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
    colours = {moment: common.colour(index) for index, moment in enumerate(moments)}
    fig = common.new_figure(4.2 * len(norms) + 0.6, 3.8)
    axes = fig.subplots(1, len(norms), squeeze=False, sharey=True)[0]
    for ax, (model, curves) in zip(axes, norms.items(), strict=True):
        n_layers = len(next(iter(curves.values())))
        common.plot_curves(ax, np.arange(1, n_layers + 1), curves, "layers", log_y=True,
                           colours=colours, marker="o", markersize=3)
        common.finish(ax, xlabel="layer (1 = next to the input)", title=model)
    axes[0].set_ylabel(ylabel)
    if title:
        fig.suptitle(title)
    return fig


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

    ``generate``'s steps for one context: crop it to its last ``block_size`` tokens, take the
    logits of the last position, and hand them to its sampler
    :func:`coursepkg.lm.next_token_probs` (temperature, then top-k, then softmax; temperature
    0 puts all the probability on the most likely token).

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
            below 1 (the sampler checks the temperature and top_k).
    """
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() != 1 or ids.numel() < 1:
        raise ValueError(f"ids must be a non-empty 1-D sequence of token ids, got shape "
                         f"{tuple(ids.shape)}")
    if block_size is not None and (isinstance(block_size, bool) or block_size < 1):
        raise ValueError(f"block_size must be >= 1 or None, got {block_size}")
    if block_size is None:
        block_size = getattr(model, "block_size", None)
    context = ids if block_size is None else ids[-block_size:]
    was_training = model.training
    model.eval()
    logits = model(context[None])[:, -1]  # (1, V)
    model.train(was_training)
    return next_token_probs(logits, temperature=temperature, top_k=top_k)[0]  # (V,)


def _entropy(probs: np.ndarray) -> float:
    """The entropy of a distribution, in nats."""
    positive = probs[probs > 0]
    return float(-(positive * np.log(positive)).sum())


def _as_probs(values: Any) -> np.ndarray:
    return np.asarray(torch.as_tensor(values, dtype=torch.float64).detach().cpu(), dtype=float)


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
    probs = _as_probs(probs)
    reference = probs if base is None else _as_probs(base)
    if probs.shape != (len(chars),) or reference.shape != (len(chars),):
        raise ValueError(f"expected one probability per token ({len(chars)}), got shapes "
                         f"{probs.shape} and {reference.shape}")
    if top < 1:
        raise ValueError(f"top must be a positive number of tokens, got {top}")
    order = sorted(range(len(chars)), key=lambda i: (-reference[i], chars[i]))[:top]
    ax = common.axes_or_new(ax, 6.5, 3.6)
    x = np.arange(len(order))
    ax.bar(x, probs[order], width=0.7, color="C0", label="sampled from")
    if base is not None:
        ax.bar(x, reference[order], width=0.7, fill=False, edgecolor="0.45", linewidth=1.0,
               label="the model (temperature 1)")
        ax.legend(fontsize=8)
    common.token_ticks(ax, "x", [chars[i] for i in order], fontsize=10)
    ax.set_ylim(0.0, min(1.05, max(probs.max(), reference.max(), 0.01) * 1.15))
    if title:
        ax.set_title(title, fontsize=9)
    return common.finish(ax, xlabel=f"next token (the {len(order)} most likely)",
                         ylabel="probability", grid=None, legend=None)


class SamplingExplorer(Explorer):
    """A widget: type a prompt, set the temperature and top-k, see what the model samples.

    Build it with ``sampling_explorer`` (this class). The figure draws the model's next-token
    distribution after the prompt (grey outlines, temperature 1) and the distribution that
    :func:`coursepkg.lm.generate` samples from with the chosen temperature and top-k (blue);
    the message gives its entropy and a continuation sampled with these settings from a seeded
    generator. The controls are public attributes (``prompt``, ``temperature``, ``top_k``,
    ``seed``); changing any of them redraws :attr:`figure` and :attr:`image` (see
    :class:`Explorer`). A top-k of 0 keeps every token.

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

    Raises:
        ValueError: for a temperature or top-k out of range, a length below 1, or an initial
            prompt the tokenizer cannot read.

    Attributes:
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
        if not prompt:
            raise ValueError("the prompt needs at least one character")
        tokenizer.encode(prompt)  # raises ValueError naming a character it cannot read
        super().__init__(figsize=(6.5, 3.6))
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
        self.probs: np.ndarray | None = None
        self.base: np.ndarray | None = None
        self.sample = ""
        self.summary = ""
        self._show([widgets.HBox([self.temperature, self.top_k, self.seed]), self.prompt],
                   watch=[self.prompt, self.temperature, self.top_k, self.seed])

    def draw(self) -> None:
        temperature, top_k = self.temperature.value, self.top_k.value or None
        try:
            if not self.prompt.value:
                raise ValueError("type at least one character")
            ids = self.tokenizer.encode(self.prompt.value)
        except ValueError as error:
            self.probs, self.base, self.sample, self.summary = None, None, "", ""
            why = common.html_escape(str(error))
            self._nothing_to_show("cannot read this prompt",
                                  f"<b>cannot read this prompt:</b> {why}")
            return
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
        tail = self.prompt.value[-30:].replace("\n", common.token_label("\n"))
        plot_sampling_distribution(self.tokenizer.chars, self.probs, self.base,
                                   self.figure.subplots(), top=self.top,
                                   title=f"after '{tail}': {setting}")
        possible = int((self.probs > 0).sum())
        self.summary = (f"{setting}: {possible} possible next tokens, entropy "
                        f"{_entropy(self.probs):.2f} nats (the model's own: "
                        f"{_entropy(self.base):.2f})")
        self.message.value = (
            f"{common.html_escape(self.summary)}; a sample (seed {self.seed.value}):"
            f"<pre>{common.html_escape(self.prompt.value + self.sample)}</pre>"
        )


sampling_explorer = SamplingExplorer
"""The book's name for :class:`SamplingExplorer`: ``viz.sampling_explorer(model, tok, ...)``."""
