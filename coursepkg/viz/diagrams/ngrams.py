"""Chapter 1's diagram: the n-gram window sliding over a padded sentence, and the counts it makes.

- :func:`diagram_ngram_counts`: the padded sentence with the window at one position, and the
  count table (history x next word) filled by the windows up to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from coursepkg.ngram import ngrams, pad
from coursepkg.viz.diagrams.canvas import INK, MUTED, PALETTE, Canvas, Diagram, Rect

__all__ = ["diagram_ngram_counts"]


def _default_position(grams: list[tuple[str, ...]]) -> int:
    """The second occurrence of the first n-gram that repeats, else the last window."""
    seen: set[tuple[str, ...]] = set()
    for index, gram in enumerate(grams):
        if gram in seen:
            return index
        seen.add(gram)
    return len(grams) - 1


def _unique(items: Sequence) -> list:
    return list(dict.fromkeys(items))


def diagram_ngram_counts(
    sentence: Sequence[str], n: int, *, position: int | None = None
) -> Diagram:
    """The n-gram window over a padded sentence, and the count table the windows fill.

    The sentence is padded with :func:`coursepkg.ngram.pad` (n - 1 ``<s>`` and one ``</s>``) and
    cut into windows with :func:`coursepkg.ngram.ngrams`, the chapter's own functions, so the
    tokens, the windows and the counts drawn are exactly those a model fitted on this one
    sentence counts. The top row shows the padded sentence with the window at ``position``: its
    n - 1 history tokens and the token they predict (the next window dashed, one token to the
    right). Below, the table of counts c(history, word), one row per history and one column per
    next word in order of first appearance, holds the counts of the windows 0 ... ``position``;
    the cell the current window adds 1 to is outlined, and later windows' cells are still empty.

    Args:
        sentence: the words of one sentence (the chapter's ``["to", "be", "or", "not", "to",
            "be"]``).
        n: the order (2 for bigrams, 3 for trigrams); the table has n - 1 history tokens per
            row.
        position: the index of the window shown (0 is the first); default: the second
            occurrence of the first n-gram that occurs twice, or the last window.

    Returns:
        The diagram (figure and alt text).

    Raises:
        ValueError: for an empty sentence or a position outside the windows.
    """
    if len(sentence) == 0:
        raise ValueError("the sentence is empty")
    tokens = pad(sentence, n)
    grams = list(ngrams(tokens, n))
    position = _default_position(grams) if position is None else position
    if not 0 <= position < len(grams):
        raise ValueError(f"position must be in 0 .. {len(grams) - 1}, got {position}")
    histories = _unique(g[:-1] for g in grams)
    words = _unique(g[-1] for g in grams)
    counts = Counter(grams[: position + 1])
    table = np.full((len(histories), len(words)), np.nan)
    for gram, count in counts.items():
        table[histories.index(gram[:-1]), words.index(gram[-1])] = count
    current = grams[position]

    # -- layout: the token row on top, the table under it, a legend at the bottom
    token_w = max(2.3, 0.24 * max(len(t) for t in tokens) + 1.2)
    gap = 0.3
    row_w = len(tokens) * token_w + (len(tokens) - 1) * gap
    cell = 1.5
    history_w = max(2.4, 0.26 * max(len(" ".join(h)) for h in histories) + 1.0)
    table_w = history_w + len(words) * cell
    width = max(row_w, table_w + 3.0, 24.0) + 2.4
    height = 9.0 + len(histories) * cell
    canvas = Canvas(width, height, title=f"A window of {n} tokens slides over the padded sentence")

    top = height - 2.9
    x_start = (width - row_w) / 2
    centres = [x_start + token_w / 2 + i * (token_w + gap) for i in range(len(tokens))]
    for i, token in enumerate(tokens):
        role = "token"
        if position <= i < position + n:
            role = "output" if i == position + n - 1 else "state"
        canvas.box(centres[i], top, token_w, 1.1, token, role=role, size=11)
        canvas.text(centres[i], top + 1.0, str(i), size=8, color=MUTED)
    window = Rect(centres[position] - token_w / 2 - 0.15, top - 0.7,
                  (n - 1) * (token_w + gap) + token_w + 0.3, 1.4)
    canvas.highlight(window, pad=0.0)
    has_next = position + 1 < len(grams)
    if has_next:
        canvas.highlight(Rect(window.x0 + token_w + gap - 0.08, window.y0 - 0.1,
                              window.w + 0.16, window.h + 0.2), pad=0.0, linewidth=1.0,
                         dashed=True)
    entries = [("state", f"history: the {n - 1} token{'s' * (n > 2)} before")] * (n > 1)
    entries += [("output", "the token it predicts")]
    canvas.legend(None, 1.1, entries + [("next", "the next window")] * has_next, size=9)

    # -- the table
    table_top = top - 3.0
    x0 = (width - table_w) / 2 + history_w
    y0 = table_top - len(histories) * cell
    grid = canvas.grid(x0, y0, np.nan_to_num(table, nan=0.0), cell=cell, kind="counts",
                       limits=(0.0, max(2.0, float(np.nanmax(table)))),
                       col_labels=words, col_role="output", name="counts", label_size=9.5)
    for (r, c), value in np.ndenumerate(table):
        if not np.isnan(value):
            rect = grid.cell_rect(r, c)
            canvas.text(rect.cx, rect.cy, f"{int(value)}", size=11, weight="bold",
                        color="white" if value >= 0.75 * grid.image.get_clim()[1] else INK)
    for r, history in enumerate(histories):
        canvas.tag(x0 - 0.25, table_top - (r + 0.5) * cell, " ".join(history) or "(none)",
                   "state", ha="right", size=9.5)
    canvas.text(x0 - 0.3, table_top + 0.3, "history", size=8.5, color=MUTED, ha="right",
                va="bottom")
    canvas.text(x0 + len(words) * cell + 0.3, table_top + 0.3, "next word", size=8.5,
                color=MUTED, ha="left", va="bottom")
    target = grid.cell_rect(histories.index(current[:-1]), words.index(current[-1]))
    canvas.highlight(target, pad=0.04)
    lane_x = max(grid.rect.x1 + 1.5, window.x1 + 0.9)
    lane_y = table_top + 1.45
    canvas.arrow((window.cx, window.y0), (target.x1 + 0.05, target.cy),
                 via=[(window.cx, lane_y), (lane_x, lane_y), (lane_x, target.cy)],
                 color=PALETTE.highlight, zorder=6)
    canvas.text(lane_x + 0.25, target.cy, "+1", size=11, color=PALETTE.highlight, ha="left",
                weight="bold")
    canvas.text(x0 + len(words) * cell / 2 - history_w / 2, y0 - 0.35,
                f"counts of windows 0 to {position} (of {len(grams)}); an empty cell: not "
                "seen yet", size=8.5, color=MUTED, va="top")

    shown = " ".join(tokens)
    alt = (f"The padded sentence '{shown}' as a row of {len(tokens)} tokens, with a window of "
           f"{n} tokens framed at position {position} ('{' '.join(current)}'): the first "
           f"{n - 1} are the history, the last is the predicted word, and a dashed frame shows "
           f"the next window one token to the right. Below, the count table with one row per "
           f"history and one column per next word holds the counts of the first {position + 1} "
           f"windows, and an arrow adds 1 to the cell of '{' '.join(current)}'.")
    return canvas.finish(alt)
