"""Chapter 2's diagrams: the Elman RNN unrolled, the LSTM cell, stacked and bidirectional RNNs.

- :func:`diagram_rnn_unrolled`: one cell per word, the same weights at every step, the state
  passed to the right; the inputs and states can be the chapter's real vectors.
- :func:`diagram_lstm_cell`: the LSTM step, its four gates and the cell path.
- :func:`diagram_rnn_layouts`: a stacked (two-layer) RNN beside a bidirectional one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coursepkg.rnn import LSTMGates
from coursepkg.viz import common
from coursepkg.viz.diagrams.canvas import MUTED, PALETTE, Canvas, Diagram

__all__ = ["diagram_lstm_cell", "diagram_rnn_layouts", "diagram_rnn_unrolled"]


def _vector(values: Any, n: int | None, what: str) -> tuple[Any, int]:
    """(values as an array or None, length)."""
    if values is None:
        if n is None or n < 1:
            raise ValueError(f"give {what} or its size")
        return None, n
    array = common.as_array(values, 2, what)
    return array, array.shape[1]


def diagram_rnn_unrolled(
    words: Sequence[str], *, inputs: Any = None, states: Any = None, input_size: int = 4,
    hidden_size: int = 6,
) -> Diagram:
    """The Elman RNN unrolled over a sentence: one copy of the cell per word, one set of weights.

    From the bottom: each word, its input vector x_t (a column of cells), the cell that computes
    h_t = tanh(W_ih x_t + W_hh h_{t-1} + b), and the new state h_t (a column of cells), which
    also goes right into the next step's cell; h_{-1} = 0 enters the first (positions count
    from 0, as in the book). A brace over the cells
    says that they are one cell with the same weights. With ``inputs`` and ``states`` (the
    chapter's real vectors, e.g. ``embed("brutus killed caesar")[0]`` and the ``out[0]`` of its
    ``ElmanRNN``), every cell of the columns is coloured by its value (red positive, blue
    negative); without them the columns are plain.

    Args:
        words: the tokens, in order (T of them).
        inputs: (T, I) the input vectors, or None.
        states: (T, Hs) the states h_0 ... h_{T-1} the RNN computed, or None.
        input_size: I, when ``inputs`` is None.
        hidden_size: Hs, when ``states`` is None.

    Returns:
        The diagram.

    Raises:
        ValueError: if ``inputs`` or ``states`` do not have one row per word.
    """
    words = list(words)
    T = len(words)
    x_values, n_in = _vector(inputs, input_size, "inputs (T, I)")
    h_values, Hs = _vector(states, hidden_size, "states (T, Hs)")
    for name, values in (("inputs", x_values), ("states", h_values)):
        if values is not None and values.shape[0] != T:
            raise ValueError(f"{name} has {values.shape[0]} rows for {T} words")
    cell = 0.42
    step = 5.2
    word_y = 1.9
    x_top = word_y + 1.4 + n_in * cell
    box_y = x_top + 1.7
    h_bottom = box_y + 1.5
    h_top = h_bottom + Hs * cell
    width = 4.0 + T * step + 1.0
    height = h_top + 4.2
    canvas = Canvas(width, height, title=f"The Elman RNN unrolled over {T} tokens")
    x_limits = h_limits = None
    if x_values is not None:
        bound = max(float(abs(x_values).max()), 1e-6)
        x_limits = (-bound, bound)
    if h_values is not None:
        h_limits = (-1.0, 1.0)  # tanh's range
    boxes = []
    for t, word in enumerate(words):
        cx = 4.0 + step * t + step / 2
        canvas.box(cx, word_y, 3.0, 0.95, word, role="token", size=10.5)
        canvas.cells(cx - cell / 2, word_y + 0.9, None if x_values is None else x_values[t],
                     n=n_in, role="embedding", vertical=True, cell=cell, limits=x_limits,
                     name=f"x_{t}")
        canvas.text(cx + cell / 2 + 0.2, word_y + 0.9 + n_in * cell / 2, f"$x_{{{t}}}$",
                    size=10, ha="left")
        canvas.arrow((cx, word_y + 0.48), (cx, word_y + 0.9), head=False, color=MUTED)
        box = canvas.box(cx, box_y, 2.9, 1.2, "tanh", role="recurrent", size=10.5)
        boxes.append(box)
        canvas.arrow((cx, x_top), box.bottom, label="$W_{ih}$", label_offset=(0.6, 0.0),
                     label_size=9)
        canvas.cells(cx - cell / 2, h_bottom, None if h_values is None else h_values[t], n=Hs,
                     role="state", vertical=True, cell=cell, limits=h_limits,
                     name=f"h_{t}")
        canvas.arrow(box.top, (cx, h_bottom))
        canvas.text(cx + cell / 2 + 0.2, h_bottom + Hs * cell / 2, f"$h_{{{t}}}$", size=10,
                    ha="left")
        if t + 1 < T:
            bend_x = cx + step / 2
            canvas.arrow((cx, h_top), (cx + step - 1.45, box_y),
                         via=[(cx, h_top + 0.45), (bend_x, h_top + 0.45), (bend_x, box_y)],
                         label="$W_{hh}$", label_pos=0.55, label_size=9)
    # h_{-1} = 0 enters the first cell (positions count from 0)
    h0 = canvas.cells(1.0, box_y - Hs * cell / 2, [0.0] * Hs, role="state", vertical=True,
                      cell=cell, limits=(-1.0, 1.0), name="h_init")
    canvas.text(1.0 + cell / 2, h0.rect.y1 + 0.35, "$h_{-1} = 0$", size=10)
    canvas.arrow(h0.rect.right, boxes[0].left, label="$W_{hh}$", label_size=9,
                 label_offset=(0.0, 0.4))
    brace_y = h_top + 0.8
    canvas.brace((boxes[0].x0, brace_y), (boxes[-1].x1, brace_y),
                 "one cell: the same $W_{ih}$, $W_{hh}$ and $b$ at every step", side="above",
                 depth=0.3, size=9.5)
    if x_limits is not None:
        image = next(im for im in canvas.ax.images if im.get_label() == "x_0")
        canvas.colour_bar(0.9, 0.75, image, length=2.6, thickness=0.25, label="inputs x",
                          fmt="{:.1f}")
    if h_limits is not None:
        image = next(im for im in canvas.ax.images if im.get_label() == "h_0")
        canvas.colour_bar(width - 3.9, 0.75, image, length=2.6, thickness=0.25,
                          label="states h", fmt="{:.0f}")
    alt = (f"The Elman RNN unrolled over the {T} tokens '{' '.join(words)}': under each token "
           f"its input vector x_t of {n_in} numbers enters a tanh cell, the cell outputs the state "
           f"h_t of {Hs} numbers, and each state also goes right into the next token's cell, "
           f"starting from h_{-1} = 0; every cell uses the same weights W_ih, W_hh and b.")
    if h_values is not None:
        alt += " The cells of the vectors are coloured by the values the RNN computed."
    return canvas.finish(alt)


def diagram_lstm_cell() -> Diagram:
    """One LSTM step: the four gates, the cell path along the top, and the hidden state.

    The inputs x_t and h_{t-1} feed the four gates (one matrix product computes them all, its
    rows in the order of :class:`coursepkg.rnn.LSTMGates`: i, f, g, o). Along the top runs the
    cell path: c_{t-1} is multiplied by the forget gate f_t, the input gate's share of the
    candidate, i_t ⊙ g_t, is added, and the result is c_t, with no weight matrix on the way.
    Below, tanh(c_t) times the output gate o_t is h_t, which leaves to the layer above and, with
    c_t, to the next step. A schematic: no tensor is drawn.

    Returns:
        The diagram.
    """
    order = LSTMGates._fields  # ("i", "f", "g", "o"): the package's gate order
    width, height = 28.0, 15.5
    canvas = Canvas(width, height, title="One LSTM step: four gates and the cell path")
    cell_y, gate_y, bus_y = 11.4, 5.2, 2.6
    xs = {"f": 6.6, "i": 10.4, "g": 14.6, "o": 18.8}
    x_plus, x_tanh, x_end = 12.5, 22.0, 25.4
    # the cell path
    canvas.curve([2.6, x_end - 0.4], [cell_y, cell_y], color=PALETTE.cell, linewidth=5.5,
                 zorder=1)
    canvas.text(1.4, cell_y, "$c_{t-1}$", size=11)
    canvas.arrow((x_end - 0.5, cell_y), (x_end + 0.3, cell_y))
    canvas.text(x_end + 1.1, cell_y, "$c_t$", size=11)
    forget = canvas.op(xs["f"], cell_y, "×", role="gate")
    plus = canvas.op(x_plus, cell_y, "+", role="cell")
    canvas.text((xs["f"] + x_plus) / 2, cell_y + 0.75, "the cell path: no weight matrix",
                size=8.5, color=MUTED, va="bottom")
    # gates
    labels = {"f": ("$f_t$", "forget, σ", "gate"), "i": ("$i_t$", "input, σ", "gate"),
              "g": ("$g_t$", "candidate, tanh", "cell"), "o": ("$o_t$", "output, σ", "gate")}
    gate_boxes = {}
    for name in order:
        label, shape, role = labels[name]
        gate_boxes[name] = canvas.box(xs[name], gate_y, 4.0 if name == "g" else 3.4, 1.6,
                                      label, role=role, shape=shape, size=11)
    # i ⊙ g, added to the cell
    times_ig = canvas.op(x_plus, gate_y + 2.7, "×", role="gate")
    canvas.arrow(gate_boxes["i"].top, times_ig.left, via=[(xs["i"], gate_y + 2.7)])
    canvas.arrow(gate_boxes["g"].top, times_ig.right, via=[(xs["g"], gate_y + 2.7)])
    canvas.arrow(times_ig.top, plus.bottom)
    canvas.arrow(gate_boxes["f"].top, forget.bottom)
    # output: o ⊙ tanh(c_t)
    tanh_c = canvas.op(x_tanh, cell_y - 2.6, "tanh", role="cell", r=0.72, size=8.5)
    canvas.arrow((x_tanh, cell_y), tanh_c.top)
    times_o = canvas.op(x_tanh, gate_y, "×", role="gate")
    canvas.arrow(tanh_c.bottom, times_o.top)
    canvas.arrow(gate_boxes["o"].right, times_o.left)
    # h_t leaves right (next step) and up (the layer above)
    split = x_end - 1.4
    canvas.arrow(times_o.right, (x_end + 0.3, gate_y))
    canvas.text(x_end + 1.1, gate_y, "$h_t$", size=11)
    canvas.arrow((split, gate_y), (split, height - 2.2))
    canvas.text(split - 0.2, height - 2.0, "$h_t$ to the layer above", size=9, va="bottom")
    # inputs: h_{t-1} and x_t on a bus under the gates
    canvas.text(1.4, bus_y, "$h_{t-1}$", size=11)
    canvas.curve([2.5, xs["o"]], [bus_y, bus_y], linewidth=1.4)
    canvas.text(4.3, 0.8, "$x_t$", size=11, ha="right")
    canvas.arrow((4.6, 0.8), (4.6, bus_y))
    for name in order:
        canvas.arrow((xs[name], bus_y), gate_boxes[name].bottom)
    canvas.text(xs["f"] - 0.6, bus_y - 0.55,
                "one matrix product computes the four gates (its rows in the order "
                + ", ".join(order) + ")", size=8.5, color=MUTED, va="top", ha="left")
    alt = ("An LSTM step. The inputs x_t and h_{t-1} feed four gates: the forget gate f_t, "
           "the input gate i_t and the output gate o_t (sigmoids) and the candidate g_t "
           "(tanh). Along the top, the cell path carries c_{t-1} through a multiplication by "
           "f_t and the addition of i_t times g_t to c_t, with no weight matrix on the way; "
           "tanh(c_t) times o_t gives h_t, which goes to the next step and to the layer "
           "above.")
    return canvas.finish(alt)



def diagram_rnn_layouts(words: Sequence[str], *, hidden_size: int | None = None) -> Diagram:
    """Two ways to arrange recurrent layers: stacked (left) and bidirectional (right).

    Left: two layers, the states of layer 1 are the inputs of layer 2 at the same step.
    Right: one RNN reads left to right and another, with its own weights, right to left, and
    the two states at each position are concatenated, [→h_t ; ←h_t]. Shapes are written as the
    package's modules return them.

    Args:
        words: the tokens (T of them; 3 to 5 fit).
        hidden_size: Hs, to write the output widths (None: written as Hs).

    Returns:
        The diagram.
    """
    words = list(words)
    T = len(words)
    hs = "Hs" if hidden_size is None else str(hidden_size)
    two_hs = "2·Hs" if hidden_size is None else str(2 * hidden_size)
    step = 2.8
    panel = T * step + 1.8
    width = 2 * panel + 2.6
    height = 13.4
    canvas = Canvas(width, height, title="Stacked and bidirectional recurrent layers")
    ys = (2.2, 4.9, 7.8, 10.4)  # tokens, first row of cells, second row, outputs
    for p, title in enumerate(["two layers, stacked", "bidirectional"]):
        left = 0.9 + p * (panel + 0.4)
        canvas.text(left + panel / 2, height - 1.9, title, size=10, weight="bold")
        xs = [left + 1.4 + step * t + step / 2 - 0.4 for t in range(T)]
        for t, word in enumerate(words):
            canvas.box(xs[t], ys[0], 2.1, 0.9, word, size=9.5)
        if p == 0:
            rows = []
            for layer, y in ((1, ys[1]), (2, ys[2])):
                row = [canvas.box(x, y, 1.8, 1.0, f"RNN {layer}", role="recurrent", size=8.5)
                       for x in xs]
                rows.append(row)
                canvas.arrow((row[0].x0 - 0.8, y), row[0].left, color=MUTED)
                for a, b in zip(row[:-1], row[1:], strict=True):
                    canvas.arrow(a.right, b.left)
            for t, x in enumerate(xs):
                canvas.arrow((x, ys[0] + 0.45), rows[0][t].bottom)
                canvas.arrow(rows[0][t].top, rows[1][t].bottom, label=f"$h^{{(1)}}_{t}$",
                             label_size=8, label_offset=(0.6, 0.0))
                canvas.arrow(rows[1][t].top, (x, ys[3] - 0.45))
                canvas.box(x, ys[3], 1.5, 0.9, f"$h^{{(2)}}_{t}$", role="state", size=9)
            caption = f"out: (B, T, {hs}), the top layer's states"
        else:
            fwd = [canvas.box(x - 0.5, ys[1], 1.5, 1.0, "→", role="recurrent", size=10)
                   for x in xs]
            bwd = [canvas.box(x + 0.5, ys[2], 1.5, 1.0, "←", role="recurrent", size=10,
                              fill="#fdf5d6") for x in xs]
            for a, b in zip(fwd[:-1], fwd[1:], strict=True):
                canvas.arrow(a.right, b.left)
            for a, b in zip(bwd[1:], bwd[:-1], strict=True):
                canvas.arrow(a.left, b.right)
            canvas.arrow((fwd[0].x0 - 0.7, ys[1]), fwd[0].left, color=MUTED)
            canvas.arrow((bwd[-1].x1 + 0.7, ys[2]), bwd[-1].right, color=MUTED)
            for t, x in enumerate(xs):
                canvas.arrow((x - 0.5, ys[0] + 0.45), fwd[t].bottom)
                canvas.arrow((x + 0.5, ys[0] + 0.45), bwd[t].bottom)
                canvas.box(x - 0.475, ys[3], 0.95, 0.9, "→", role="state", rounded=False,
                           size=9)
                canvas.box(x + 0.475, ys[3], 0.95, 0.9, "←", role="state", rounded=False,
                           size=9, fill="#fdf0b3")
                canvas.arrow(fwd[t].top, (x - 0.5, ys[3] - 0.45))
                canvas.arrow(bwd[t].top, (x + 0.5, ys[3] - 0.45))
            caption = (f"out: (B, T, {two_hs}), $[\\overrightarrow{{h}}_t ; "
                       f"\\overleftarrow{{h}}_t]$ at every t")
        canvas.text(left + panel / 2, 0.75, caption, size=8.5, color=MUTED)
    alt = (f"Two diagrams over the tokens '{' '.join(words)}'. Left, a stacked RNN: a first "
           "recurrent layer reads the tokens left to right, and a second layer reads the first "
           "layer's states, whose own states are the output. Right, a bidirectional RNN: one "
           "layer reads left to right, a second with its own weights reads right to left, and "
           "each position's output is the two states side by side.")
    return canvas.finish(alt)
