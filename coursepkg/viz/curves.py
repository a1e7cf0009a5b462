"""Plots that several chapters share: training curves, final scores and timings.

- :func:`centred_mean`: the smoothing of every training curve of the book.
- :func:`plot_loss_curves`: training and held-out loss against the step (chapters 2, 5, 6).
- :func:`plot_loss_against_time`: the same against the training time, to compare models whose
  steps cost differently (chapter 7, the speed appendix).
- :func:`plot_loss_and_final_scores`: the training curves, and in a panel beside them the
  models' final losses on another evaluation text (chapter 7's long run).
- :func:`plot_timings`: measured times against the sequence length, log-log (chapter 4, chapter
  7, the speed appendix).

A training curve is drawn light as measured (one batch per step: noisy) and solid as a centred
moving average, which does not lag behind the losses as a trailing one does: on a falling curve, a
mean of the last k steps sits above the loss of the moment, and above held-out points measured at
the same step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from coursepkg.viz import common

__all__ = [
    "centred_mean", "plot_loss_against_time", "plot_loss_and_final_scores", "plot_loss_curves",
    "plot_timings",
]


def centred_mean(values: Sequence[float], window: int) -> np.ndarray:
    """A moving average centred on each position, with straight-line fits at the two ends.

    Position t gets the mean of the 2h + 1 values t - h ... t + h, where h = ``window // 2``.
    Within h of an end, where no such window fits, t gets the value at t of the least-squares
    line through the 2h + 1 values at that end (their mean would sit at their middle, pulled
    towards the inside of the curve: the lag that a trailing average has everywhere). In the
    middle, the line through a centred window and its mean are the same number, so this is one
    rule: a straight line is left unchanged everywhere, and a steadily falling loss is neither
    delayed nor lifted. (Savitzky and Golay's filter of degree 1.)

    Args:
        values: (N,) the values, e.g. one training loss per step.
        window: the width of the window, 2h + 1 steps with h = ``window // 2`` (so an even
            width is rounded up); 0 or 1 leaves the values as they are.

    Returns:
        (N,) float array.
    """
    y = np.asarray(values, dtype=float)
    half = window // 2
    if half < 1 or len(y) < 3:
        return y
    n = min(2 * half + 1, len(y))  # steps per window
    t = np.arange(len(y))
    first = np.clip(t - half, 0, len(y) - n)  # (N,) the window of step t: first ... first + n - 1
    cumsum = np.concatenate([[0.0], np.cumsum(y)])
    cumsum_sy = np.concatenate([[0.0], np.cumsum(np.arange(len(y)) * y)])
    sum_y = cumsum[first + n] - cumsum[first]  # (N,)
    # Fit y = a + b u by least squares, u = s - t the distance of step s from t, u = o ... o + n - 1
    # with o = first - t; the fit's value at t is a = (Σy Σu² - Σu Σuy) / (n Σu² - (Σu)²).
    o = (first - t).astype(float)
    sum_u = n * o + n * (n - 1) / 2
    sum_uu = n * o**2 + o * n * (n - 1) + (n - 1) * n * (2 * n - 1) / 6
    sum_uy = cumsum_sy[first + n] - cumsum_sy[first] - t * sum_y
    return (sum_y * sum_uu - sum_u * sum_uy) / (n * sum_uu - sum_u**2)


def _seconds_per_step(label: str, history: Any) -> float:
    steps = list(history.steps)
    if len(steps) == 0 or not history.seconds > 0:
        raise ValueError(f"history {label!r} needs at least one step and a positive time")
    return history.seconds / steps[-1]


def plot_loss_curves(
    histories: Mapping[str, Any],
    baselines: Mapping[str, float] | None = None,
    ax: Axes | None = None,
    *,
    smooth: int = 20,
    heldout: str = "held-out",
    against: str = "step",
    title: str = "Training a language model",
    ylabel: str = "loss (nats per token)",
) -> Axes:
    """Training and held-out loss against the step (or the time), with horizontal baselines.

    Args:
        histories: label -> a training history with ``steps``, ``train_loss``, ``val_steps``
            and ``val_loss`` (e.g. :class:`coursepkg.lm.TrainHistory`), and ``seconds`` to be
            drawn against the time.
        baselines: label -> a loss drawn as a dotted horizontal line (e.g. an n-gram model's
            held-out loss). Put only losses measured on the same text as the held-out points
            here; a score on another text belongs in another panel (see
            :func:`plot_loss_and_final_scores`).
        ax: the axes to draw into; a new figure is made when None.
        smooth: the width of the centred moving average (see :func:`centred_mean`) drawn solid
            over the light measured training loss; 0 or 1 draws the measured loss alone.
        heldout: what the held-out points were measured on, for the legend (e.g.
            ``"held-out, first 4,000 test characters"``).
        against: ``"step"``, or ``"time"`` to compare models whose steps cost differently at
            equal time: step ``s`` of a history that took ``seconds`` in ``n`` steps is drawn at
            ``s * seconds / n``, as if every step took the same time.
        title: the axes title.
        ylabel: the y axis label.

    Returns:
        The axes. Per history: (when smoothing) a light line of the measured training loss;
        a ``"<label>, train"`` line, smoothed; if it has held-out losses, a ``"<label>,
        <heldout>"`` line with markers. Then (when smoothing) one empty line whose legend entry
        says which training line is which (``"train: solid = centred mean of k steps, light =
        each step"``), and one line per baseline.

    Raises:
        ValueError: against the time, if a history has no steps or no positive duration.
    """
    if against not in ("step", "time"):
        raise ValueError(f"against must be 'step' or 'time', got {against!r}")
    ax = common.axes_or_new(ax, 6.5, 4.0)
    half = smooth // 2
    for index, (label, history) in enumerate(histories.items()):
        scale = 1.0 if against == "step" else _seconds_per_step(label, history)
        steps = np.asarray(list(history.steps), dtype=float) * scale
        losses = list(history.train_loss)
        tint = common.colour(index)
        if half >= 1:
            ax.plot(steps, losses, color=tint, alpha=0.25, linewidth=0.8)
        ax.plot(steps, centred_mean(losses, smooth), color=tint, label=f"{label}, train")
        if len(history.val_loss):
            ax.plot(np.asarray(list(history.val_steps), dtype=float) * scale,
                    list(history.val_loss), color=tint, linestyle="--", marker="o",
                    markersize=4, label=f"{label}, {heldout}")
    if half >= 1 and histories:  # a legend entry that says which training line is which
        ax.plot([], [], color="0.5", alpha=0.4, linewidth=0.8,
                label=f"train: solid = centred mean of {2 * half + 1} steps, light = each step")
    for index, (label, value) in enumerate((baselines or {}).items()):
        ax.axhline(value, color=common.colour(len(histories) + index), linestyle=":",
                   label=f"{label}: {value:.3f}")
    xlabel = ("training step" if against == "step"
              else "training time (s), each step counted at the run's mean step time")
    return common.finish(ax, xlabel=xlabel, ylabel=ylabel, title=title)


def plot_loss_against_time(
    histories: Mapping[str, Any],
    baselines: Mapping[str, float] | None = None,
    ax: Axes | None = None,
    *,
    title: str = "Training language models for the same time",
    **options: Any,
) -> Axes:
    """Training and held-out loss against the training time: :func:`plot_loss_curves` with
    ``against="time"``, which takes the same arguments (``smooth``, ``heldout``, ``ylabel``).

    Raises:
        ValueError: if a history has no steps or no positive duration.
    """
    return plot_loss_curves(histories, baselines, ax, against="time", title=title, **options)


def _plot_final_scores(
    ax: Axes, scores: Mapping[str, float], colours: Mapping[str, str], title: str, xlabel: str
) -> None:
    """One dot per model at its score (lower is better), the best at the top, each with its
    value written; a model with a colour (that of its training curves) is a star, the others
    are grey squares."""
    ranked = sorted(scores.items(), key=lambda item: item[1])
    for row, (label, value) in enumerate(ranked):
        ours = label in colours
        ax.plot([value], [row], linestyle="none", marker="*" if ours else "s",
                markersize=13 if ours else 7, color=colours.get(label, "0.45"))
        ax.annotate(f"{value:.3f}", (value, row), xytext=(9, 0), textcoords="offset points",
                    va="center", fontsize=8)
    low, high = ranked[0][1], ranked[-1][1]
    margin = max(high - low, 1e-3)
    ax.set_xlim(low - 0.15 * margin, high + 0.45 * margin)
    ax.set_ylim(len(ranked) - 0.5, -0.5)  # the best at the top
    ax.set_yticks(range(len(ranked)), labels=[label for label, _ in ranked], fontsize=8)
    common.finish(ax, xlabel=xlabel, title=title, legend=None)


def plot_loss_and_final_scores(
    histories: Mapping[str, Any],
    scores: Mapping[str, float],
    *,
    heldout: str,
    scores_on: str,
    smooth: int = 20,
    ylim: tuple[float, float] | None = None,
    title: str | None = None,
    ylabel: str = "loss (nats per token)",
) -> Figure:
    """Training curves against time, and beside them the final scores on another text.

    The held-out points of a training run are usually measured on a slice of the test text
    (every evaluation costs training time), the final scores on all of it; the two differ, so
    they get a panel each, whose titles say which text each measures.

    Args:
        histories: as for :func:`plot_loss_against_time`.
        scores: label -> final score on ``scores_on`` (the networks of ``histories`` and, e.g.,
            n-gram baselines); a label of ``histories`` keeps its curves' colour.
        heldout: the text of the held-out points (e.g. ``"first 20,000 test characters"``).
        scores_on: the text of the final scores (e.g. ``"all test lines"``).
        smooth: the width of the centred moving average of the training loss.
        ylim: the y range of the curves (e.g. to leave out the first steps' large losses).
        title: the figure title.
        ylabel: the loss's unit, the y label of the curves and the x label of the scores.

    Returns:
        The figure: the curves' axes (left), the scores' axes (right).
    """
    if not scores:
        raise ValueError("plot_loss_and_final_scores needs at least one final score")
    fig = common.new_figure(11.0, 5.0)
    curves_ax, scores_ax = fig.subplots(1, 2, width_ratios=[1.7, 1.0])
    plot_loss_against_time(histories, ax=curves_ax, smooth=smooth, heldout=f"held-out: {heldout}",
                           title=f"During training (held-out: {heldout})", ylabel=ylabel)
    curves_ax.get_legend().remove()  # one legend under both panels, out of the curves' way
    fig.legend(*curves_ax.get_legend_handles_labels(), loc="outside lower center", ncols=2,
               fontsize=7)
    if ylim is not None:
        curves_ax.set_ylim(*ylim)
    colours = {label: common.colour(index) for index, label in enumerate(histories)}
    _plot_final_scores(scores_ax, scores, colours, f"At the end, on {scores_on}", ylabel)
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
    ax = common.axes_or_new(ax, 6.5, 4.2)
    x = np.asarray(list(lengths), dtype=float)
    series = common.plot_curves(ax, x, times, "lengths", log_y=True, marker="o", markersize=4)
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
    ax.set_xticks(list(x), labels=[str(int(n)) for n in x], fontsize=7)
    ax.minorticks_off()
    return common.finish(ax, xlabel="sequence length n", ylabel=ylabel, title=title, legend=7)
