"""Chapter 3's diagrams: the encoder-decoder with its bottleneck, and one step of attention.

- :func:`diagram_encoder_decoder`: the encoder reads the source, one summary vector stands
  for it, and the decoder receives that same vector at every step.
- :func:`diagram_attention_step`: one decoder step with attention: its query, the encoder's
  states as keys and values, the step's real weights over the source, and the context vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from coursepkg.viz import common
from coursepkg.viz.diagrams.canvas import MUTED, PALETTE, Canvas, Diagram, weight_text

__all__ = ["diagram_attention_step", "diagram_encoder_decoder"]

BOS, EOS = "<s>", "</s>"
VALUE_LINE = "#3d8a3a"  # the value colour, darker: lines that carry values


def _shown(tokens: Sequence[str], limit: int) -> tuple[list[str], bool]:
    """The first ``limit`` tokens, and whether some were left out."""
    tokens = list(tokens)
    return tokens[:limit], len(tokens) > limit


def diagram_encoder_decoder(
    source: Sequence[str], target: Sequence[str], *, max_steps: int = 6
) -> Diagram:
    """The encoder-decoder without attention: the whole source squeezed into one vector.

    The encoder (one box per source token, as chapter 3's bidirectional LSTM) reads the source;
    its summary, the left-to-right state after the last token and the right-to-left state at
    the first (``Seq2Seq.encode``'s ``summary``), is drawn once, outlined as the bottleneck,
    and then again beside every decoder step, the same vector each time. The decoder reads
    ``<s>`` and then each target token, and writes the next one (``</s>`` at the end).

    Args:
        source: the source tokens (characters of a date, e.g. ``list("5.mar.21")``).
        target: the target tokens (``list("2021-03-05")``).
        max_steps: the decoder steps drawn; later ones are left as "…".

    Returns:
        The diagram.
    """
    source, target = list(source), list(target)
    if not source or not target:
        raise ValueError("source and target must not be empty")
    outputs, cut = _shown([*target, EOS], max_steps)
    inputs = [BOS, *target][: len(outputs)]
    pitch, box_w = 1.4, 1.15
    enc_x0 = 1.8
    enc_xs = [enc_x0 + i * pitch for i in range(len(source))]
    dec_x0 = enc_xs[-1] + 4.3
    dec_xs = [dec_x0 + i * 2.0 for i in range(len(outputs))]
    width = dec_xs[-1] + (3.0 if cut else 2.0)
    height = 10.6
    canvas = Canvas(width, height, title="An encoder-decoder without attention: one vector "
                                         "for the whole source")
    tok_y, box_y, out_y, sum_y = 2.1, 4.4, 7.6, 7.4
    enc_boxes = []
    for x, token in zip(enc_xs, source, strict=True):
        canvas.box(x, tok_y, box_w, 0.9, common.token_label(token), size=10)
        enc_boxes.append(canvas.box(x, box_y, box_w, 1.0, "", role="recurrent"))
        canvas.arrow((x, tok_y + 0.45), (x, box_y - 0.5))
    for a, b in zip(enc_boxes[:-1], enc_boxes[1:], strict=True):
        canvas.curve([a.x1, b.x0], [box_y, box_y])
    # the summary: [→h after the last token ; ←h at the first]
    summary = canvas.cells(enc_xs[-1] - 0.6, sum_y, n=6, role="state", cell=0.5)
    canvas.highlight(summary.rect, pad=0.1)
    canvas.text(summary.rect.cx, sum_y + 0.95, "the bottleneck: one vector", size=9.5,
                color=PALETTE.highlight, weight="bold", va="bottom")
    canvas.arrow(enc_boxes[-1].top, summary.cells[1].bottom, via=[])
    canvas.arrow(enc_boxes[0].top, summary.cells[4].bottom,
                 via=[(enc_xs[0], 6.3), (summary.cells[4].cx, 6.3)], color=MUTED)
    canvas.text(enc_xs[0] + 0.2, 6.42, "←h at the first token", size=8, color=MUTED,
                ha="left", va="bottom")
    canvas.text(enc_xs[-1] - 0.25, 5.55, "→h after the last", size=8, color=MUTED, ha="right")
    # the decoder: the same summary beside every step
    dec_boxes = []
    for x, token_in, token_out in zip(dec_xs, inputs, outputs, strict=True):
        canvas.box(x, tok_y, box_w + 0.3, 0.9, common.token_label(token_in), size=10)
        box = canvas.box(x, box_y, box_w + 0.3, 1.0, "", role="recurrent")
        dec_boxes.append(box)
        canvas.arrow((x, tok_y + 0.45), (x, box_y - 0.5))
        canvas.arrow(box.top, (x, out_y - 0.45))
        canvas.box(x, out_y, box_w + 0.3, 0.9, common.token_label(token_out), role="output",
                   size=10)
        copy = canvas.cells(x - 1.45, box_y + 1.0, n=3, role="state", cell=0.32)
        canvas.arrow(copy.rect.bottom, (box.x0 + 0.15, box.y1 - 0.02), color=MUTED,
                     linewidth=1.0)
    for a, b in zip(dec_boxes[:-1], dec_boxes[1:], strict=True):
        canvas.arrow(a.right, b.left)
    if cut:
        canvas.text(dec_boxes[-1].x1 + 0.5, box_y, "…", size=14)
    canvas.arrow(summary.rect.right, dec_boxes[0].left, via=[(dec_x0 - 1.9, summary.rect.cy),
                                                             (dec_x0 - 1.9, box_y)])
    canvas.text((dec_xs[0] + dec_xs[-1]) / 2, 0.75,
                "decoder: the same summary (small copies) at every step", size=9, color=MUTED)
    canvas.text((enc_xs[0] + enc_xs[-1]) / 2, 0.75, "encoder: reads the source both ways",
                size=9, color=MUTED)
    alt = (f"An encoder-decoder without attention on '{''.join(source)}' to "
           f"'{''.join(target)}': the encoder reads the {len(source)} source characters, its "
           "states are squeezed into one summary vector, outlined as the bottleneck, and the "
           "decoder starts from it and receives the same summary again at every step while it "
           "writes the target one character at a time.")
    return canvas.finish(alt)


def diagram_attention_step(
    source: Sequence[str], target: Sequence[str], step: int, weights: Any, *,
    context: Any = None, query: Any = None,
) -> Diagram:
    """One decoder step with attention, drawn with the step's real weights.

    From the bottom: the source tokens, the encoder's states h̄_s (each one both a key, blue,
    and a value, green), the weights a_{t,s} of this step as a row of cells (white 0 to black
    1, each written), and lines from every state to the weighted sum, as thick as its weight,
    which gives the context vector ctx_t (green: it is made of values). On the right, the
    decoder: its previous state h_{t-1} is the query (orange) compared with every key, and the
    step reads y_{t-1} and ctx_t and writes y_t.

    Args:
        source: the source tokens (e.g. ``list("March 5, 2021")``).
        target: the tokens the decoder wrote (``list("2021-03-05")``).
        step: t, the step drawn (0 writes the first token, reading ``<s>``).
        weights: (S,) the weights of that step over the source (a row of the ``weights``
            that ``Seq2Seq.translate`` returns: ``weights[b, t, :S]``).
        context: (Dv,) the context vector of that step, to colour its cells by value (None:
            plain cells).
        query: (Dq,) the query h_{t-1}, to colour its cells by value (None: plain cells).

    Returns:
        The diagram.

    Raises:
        ValueError: if ``weights`` does not have one value per source token or ``step`` is
            outside the target.
    """
    source, target = list(source), list(target)
    a = common.as_array(weights, 1, "weights (S,)")
    if a.shape[0] != len(source):
        raise ValueError(f"weights has {a.shape[0]} values for {len(source)} source tokens")
    if not 0 <= step <= len(target):
        raise ValueError(f"step must be in 0 .. {len(target)}, got {step}")
    written = [*target, EOS]
    S = len(source)
    pitch = 1.15
    left = 6.6
    xs = [left + pitch * s + pitch / 2 for s in range(S)]
    row_right = left + S * pitch
    dec_x = row_right + 4.4
    width = dec_x + 3.6
    height = 14.4
    canvas = Canvas(width, height, title=f"Attention at decoder step t = {step}: where to "
                                         "look in the source")
    tok_y, state_y, weight_y, sum_y, ctx_y = 1.4, 3.2, 5.2, 8.4, 10.2
    labels = [(tok_y, "source"), (state_y, "keys = values:\nencoder states $\\bar h_s$"),
              (weight_y + 0.55, "weights $a_{t,s}$:\nsoftmax of the scores"),
              (ctx_y + 0.25, "context $\\mathrm{ctx}_t$")]
    for y, label in labels:
        canvas.text(left - 0.4, y, label, size=8.5, color=MUTED, ha="right")
    for x, token in zip(xs, source, strict=True):
        canvas.box(x, tok_y, pitch - 0.15, 0.85, common.token_label(token), size=9.5)
        canvas.box(x - 0.24, state_y, 0.48, 0.9, "", role="key", rounded=False, linewidth=0.7)
        canvas.box(x + 0.24, state_y, 0.48, 0.9, "", role="value", rounded=False,
                   linewidth=0.7)
        canvas.arrow((x, tok_y + 0.43), (x, state_y - 0.45), color=MUTED, linewidth=0.9)
    weight_row = canvas.grid(left, weight_y, a[None, :], cell=pitch, kind="weights",
                             numbers=weight_text, name="weights", size=7.5)
    # lines from each value, as thick as its weight, to the sum
    sum_x = (left + row_right) / 2
    canvas.op(sum_x, sum_y, "Σ", role="value", r=0.5, size=12)
    for x, w in zip(xs, a, strict=True):
        canvas.curve([x, sum_x], [weight_y + pitch, sum_y - 0.5], color=VALUE_LINE,
                     linewidth=0.3 + 6.0 * float(w), zorder=1)
    canvas.text(sum_x - 0.8, sum_y, "$\\mathrm{ctx}_t = \\sum_s a_{t,s}\\, \\bar h_s$",
                size=9.5, ha="right")
    ctx = canvas.cells(sum_x - 1.5, ctx_y, context, n=6, role="value", cell=0.5,
                       name="context")
    canvas.arrow((sum_x, sum_y + 0.5), (sum_x, ctx_y))
    # the decoder step: reads ctx_t and the previous token, writes the next
    dec = canvas.box(dec_x, ctx_y + 0.25, 4.4, 1.3, f"decoder step {step}", role="recurrent",
                     size=9.5)
    canvas.arrow(ctx.rect.right, dec.left)
    canvas.box(dec_x, ctx_y + 2.35, 2.6, 0.9, f"writes {common.token_label(written[step])}",
               role="output", size=9.5)
    canvas.arrow(dec.top, (dec_x, ctx_y + 1.9))
    previous = BOS if step == 0 else target[step - 1]
    done = "".join(target[:step])
    canvas.text(dec_x, dec.y0 - 0.2, f"reads {common.token_label(previous)}"
                + (f" (written: {done})" if done else ""), size=8.5, color=MUTED, va="top")
    # the query: the decoder's state before this step, scored against every key
    q = canvas.cells(dec_x - 1.5, weight_y + 0.3, query, n=6, role="query", cell=0.5,
                     name="query")
    canvas.text(q.rect.cx, q.rect.y0 - 0.2, "query: the decoder's\nstate $h_{t-1}$", size=8.5,
                va="top")
    lane = row_right + 1.0
    canvas.arrow(q.rect.left, (row_right + 0.1, state_y),
                 via=[(lane, q.rect.cy), (lane, state_y)], label="score every key",
                 label_size=8, label_pos=0.62, label_offset=(0.0, 0.0))
    best = int(np.argmax(a))
    canvas.highlight(weight_row.cell_rect(0, best), pad=0.03, linewidth=1.8)
    alt = (f"One step of the decoder with attention, for the source '{''.join(source)}'. Each "
           "source character has an encoder state that serves as its key and its value; the "
           f"decoder's previous state is the query, its scores against the {S} keys become "
           f"{S} weights that sum to one, drawn as a row of grey cells with their values, and "
           "the context vector is the sum of the values weighted by them, which the decoder "
           f"reads to write '{written[step]}'. The largest weight is outlined, on the source "
           f"character '{source[best]}'.")
    return canvas.finish(alt)
