"""Chapter 7's diagrams: the block, the encoder-decoder, the language model, a cached step.

- :func:`diagram_transformer_blocks`: a post-norm and a pre-norm block side by side.
- :func:`diagram_encoder_decoder_transformer`: the encoder and decoder stacks joined by
  cross-attention.
- :func:`diagram_language_model`: a decoder-only language model from tokens to logits.
- :func:`diagram_kv_cache`: one step of cached decoding: the new token's query against the
  cached keys and values.
"""

from __future__ import annotations

from collections.abc import Sequence

from coursepkg.self_attention import causal_mask
from coursepkg.viz import common
from coursepkg.viz.diagrams.canvas import INK, MUTED, PALETTE, Canvas, Diagram, Rect

__all__ = [
    "diagram_encoder_decoder_transformer", "diagram_kv_cache", "diagram_language_model",
    "diagram_transformer_blocks",
]

STREAM = "#8c8c8c"  # the residual stream


def _tag(canvas: Canvas, x: float, y: float, letter: str, role: str) -> None:
    """A small letter on its role's colour (Q, K, V on the lines into an attention box)."""
    canvas.tag(x, y, letter, role, size=8.5, weight="bold")


def _block_column(canvas: Canvas, cx: float, y0: float, pre_norm: bool,
                  sublayers: Sequence[tuple[str, str, str]]) -> float:
    """One block drawn bottom to top from (cx, y0): the main path in the middle, the residual
    stream (thick grey) through the branch points, the bypasses and the additions (and, in
    post-norm, the LayerNorms). ``sublayers``: (label, shape note, role) of each sublayer.
    Returns the y where the block's output leaves."""
    step, box_w, box_h = 1.55, 6.2, 1.25
    bypass_x = cx - box_w / 2 - 1.0
    kinds = []
    for label, note, role in sublayers:
        kinds.append(("branch", None, None))
        if pre_norm:
            kinds += [("box", ("LayerNorm", None), "norm"), ("box", (label, note), role),
                      ("add", None, None)]
        else:
            kinds += [("box", (label, note), role), ("add", None, None),
                      ("box", ("LayerNorm", None), "norm")]
    y = y0
    previous: tuple[str, float, float] = ("start", y0, y0)  # kind, y of its top, y of centre
    branch_y = y0
    on_stream = True  # is the main path at this point the residual stream?
    for kind, content, role in kinds:
        y += step if kind != "branch" else step * 0.55
        if kind == "branch":
            canvas.curve([cx, cx], [previous[1], y], color=STREAM if on_stream else INK,
                          linewidth=3.0 if on_stream else 1.2, zorder=1)
            canvas.ax.plot([cx], [y], marker="o", markersize=5, color=STREAM, zorder=3)
            branch_y = y
            previous = ("branch", y, y)
            on_stream = False  # what goes up from here is the sublayer's copy
            continue
        if kind == "add":
            plus = canvas.op(cx, y, "+", r=0.36, size=10)
            canvas.arrow((cx, previous[1]), plus.bottom, linewidth=1.2)
            canvas.arrow((cx, branch_y), plus.left,
                         via=[(bypass_x, branch_y), (bypass_x, y)], color=STREAM,
                         linewidth=3.0)
            previous = ("add", plus.y1, y)
            on_stream = True
            continue
        label, note = content
        rect = canvas.box(cx, y, box_w, box_h, label, role=role, shape=note, size=9.5)
        if on_stream:
            canvas.arrow((cx, previous[1]), rect.bottom, color=STREAM, linewidth=3.0)
        else:
            canvas.arrow((cx, previous[1]), rect.bottom, linewidth=1.2)
        previous = ("box", rect.y1, y)
    top = previous[1] + 1.0
    canvas.arrow((cx, previous[1]), (cx, top), color=STREAM, linewidth=3.0)
    return top


def diagram_transformer_blocks(
    *, d_model: int | None = None, n_heads: int | None = None, d_ff: int | None = None
) -> Diagram:
    """A Transformer block in post-norm (left) and pre-norm (right), side by side.

    Each column reads bottom to top: the residual stream (thick grey) runs up the left side,
    and each sublayer, multi-head self-attention and then the feed-forward network, adds its
    output to it. Post-norm (the original paper, ``norm_first=False``) normalises the stream
    after each addition, so the stream itself passes through two LayerNorms per block; pre-norm
    (GPT-2, ``norm_first=True``) normalises only the copy that enters each sublayer, and the
    stream is a plain sum (one last LayerNorm follows the final block). A schematic: the sizes,
    when given, are written in the boxes.

    Args:
        d_model: D, written as the stream's width (None: not written).
        n_heads: H, written in the attention boxes.
        d_ff: F, written in the feed-forward boxes.

    Returns:
        The diagram.
    """
    sublayers = [("multi-head attention", f"H = {n_heads}" if n_heads else None, "attention"),
                 ("feed-forward", f"D → {d_ff} → D" if d_ff else None, "feedforward")]
    width, height = 28.0, 18.6
    canvas = Canvas(width, height, title="A Transformer block: where the LayerNorm goes")
    for cx, pre, title, formula, note, note_at in (
            (8.4, False, "post-norm (the 2017 paper)", "x ← LN(x + sublayer(x))",
             "← the residual stream\npasses through\ntwo LayerNorms", (11.8, 10.6, "left")),
            (21.4, True, "pre-norm (GPT-2)", "x ← x + sublayer(LN(x))",
             "the residual stream →\nis never normalised:\na plain sum", (16.9, 5.0, "right"))):
        canvas.text(cx, height - 2.0, title, size=10.5, weight="bold")
        canvas.text(cx, height - 2.8, formula, size=9, color=MUTED)
        canvas.text(cx, 0.8, "x" + (f": (B, T, {d_model})" if d_model else ""), size=9.5)
        end = _block_column(canvas, cx, 1.3, pre, sublayers)
        canvas.text(cx, end + 0.2, "to the next block", size=8.5, color=MUTED, va="bottom")
        canvas.text(note_at[0], note_at[1], note, size=8.5, color=STREAM, ha=note_at[2])
    alt = ("Two Transformer blocks side by side, read from the bottom. Left, post-norm: "
           "multi-head attention, add the residual, LayerNorm, then the feed-forward network, "
           "add, LayerNorm, so the residual stream itself passes through two normalisations. "
           "Right, pre-norm: LayerNorm, attention, add, then LayerNorm, feed-forward, add, so "
           "only the copies entering the sublayers are normalised and the stream is a plain "
           "sum.")
    return canvas.finish(alt)


def _stack(canvas: Canvas, cx: float, y: float, items: Sequence[tuple[str, str]],
           *, box_w: float = 6.0, box_h: float = 1.0, step: float = 1.45,
           residual_x: float | None = None, size: float = 9) -> list[Rect]:
    """Boxes (label, role) from y upwards, joined by arrows; an "add & norm" box gets a grey
    residual arrow from the input of the sublayer under it (bypassing on the ``residual_x``
    side). Returns the boxes."""
    boxes: list[Rect] = []
    sublayer_input_y = y - step / 2
    for label, role in items:
        rect = canvas.box(cx, y, box_w, box_h, label, role=role, size=size)
        if boxes:
            canvas.arrow(boxes[-1].top, rect.bottom)
        if label == "add & norm" and residual_x is not None:
            canvas.arrow((cx, sublayer_input_y), rect.left if residual_x < cx else rect.right,
                         via=[(residual_x, sublayer_input_y), (residual_x, y)], color=STREAM,
                         linewidth=1.6)
            sublayer_input_y = rect.y1 + (step - box_h) / 2
        boxes.append(rect)
        y += step
    return boxes


def diagram_encoder_decoder_transformer(*, n_layers: int | None = None) -> Diagram:
    """The encoder-decoder Transformer: two stacks joined by cross-attention.

    Left, the encoder: the source tokens' embeddings (scaled by √D) plus sinusoidal positions,
    then N blocks of self-attention without a causal mask and a feed-forward network, each
    sublayer followed by "add & norm" (the residual addition and a LayerNorm, post-norm as in
    the 2017 paper). Its output, the memory, goes to every decoder block. Right, the decoder:
    the target shifted right by one (``<s>`` first), N blocks of masked self-attention,
    cross-attention whose queries come from the decoder (Q) and whose keys and values come from
    the memory (K, V), and a feed-forward network; then a linear layer to the logits. A
    schematic (``coursepkg.transformer.Transformer``).

    Args:
        n_layers: N, written on the frames ("N×" when None).

    Returns:
        The diagram.
    """
    times = f"× {n_layers}" if n_layers else "× N"
    width, height = 28.0, 20.4
    canvas = Canvas(width, height, title="The encoder-decoder Transformer")
    enc_x, dec_x = 7.6, 19.4
    step = 1.6
    # inputs
    for cx, tokens in ((enc_x, "source tokens"), (dec_x, "target, shifted right: <s> y₁ y₂ …")):
        canvas.box(cx, 1.1, 8.4, 0.9, tokens, role="token", size=8.5)
        emb = canvas.box(cx, 2.7, 5.6, 1.0, "embedding × √D", role="embedding", size=9)
        canvas.arrow((cx, 1.55), emb.bottom)
        plus = canvas.op(cx, 4.1, "+", r=0.34, size=10)
        canvas.arrow(emb.top, plus.bottom)
        side = -1 if cx < width / 2 else 1
        pos = canvas.box(cx + side * 4.3, 4.1, 2.6, 0.9, "positions", role="position", size=8.5)
        canvas.arrow(pos.right if side < 0 else pos.left, plus.left if side < 0 else plus.right)
    enc = _stack(canvas, enc_x, 6.0, [("self-attention (no mask)", "attention"),
                                      ("add & norm", "norm"), ("feed-forward", "feedforward"),
                                      ("add & norm", "norm")], step=step,
                 residual_x=enc_x + 3.6, size=8.5)
    canvas.arrow((enc_x, 4.44), enc[0].bottom)
    dec = _stack(canvas, dec_x, 6.0, [("masked self-attention", "attention"),
                                      ("add & norm", "norm"), ("cross-attention", "attention"),
                                      ("add & norm", "norm"), ("feed-forward", "feedforward"),
                                      ("add & norm", "norm")], step=step,
                 residual_x=dec_x + 3.6)
    canvas.arrow((dec_x, 4.44), dec[0].bottom)
    enc_frame = canvas.frame(enc[0].union(enc[-1]).union(Rect(enc_x + 3.6, enc[0].y0, 0.1, 0.1)),
                             pad=0.45)
    dec_frame = canvas.frame(dec[0].union(dec[-1]).union(Rect(dec_x + 3.6, dec[0].y0, 0.1, 0.1)),
                             pad=0.45)
    canvas.text(enc_frame.x0 - 0.25, enc_frame.cy, f"encoder\nlayer {times}", size=9.5,
                weight="bold", ha="right")
    canvas.text(dec_frame.x1 + 0.25, dec_frame.cy, f"decoder\nlayer {times}", size=9.5,
                weight="bold", ha="left")
    memory = canvas.box(enc_x, enc_frame.y1 + 1.3, 5.0, 1.0, "memory (B, S, D)", role="output",
                        size=9)
    canvas.arrow(enc[-1].top, memory.bottom)
    # memory -> cross-attention: keys and values; queries from the decoder
    cross = dec[2]
    lane_x = (enc_x + dec_x) / 2 + 0.4
    canvas.arrow(memory.right, cross.left, via=[(lane_x, memory.cy), (lane_x, cross.cy)],
                 linewidth=1.6)
    _tag(canvas, lane_x - 0.5, cross.cy + 0.65, "K", "key")
    _tag(canvas, lane_x + 0.5, cross.cy + 0.65, "V", "value")
    _tag(canvas, dec_x - 0.6, cross.y0 - 0.31, "Q", "query")
    canvas.text(lane_x - 0.25, memory.cy - 0.3, "to every\ndecoder layer", size=8,
                color=MUTED, va="top", ha="right")
    # the head
    linear = canvas.box(dec_x, dec[-1].cy + step + 1.0, 6.6, 1.0, "linear → logits (B, T, V)",
                        role="output", size=9)
    canvas.arrow(dec[-1].top, linear.bottom)
    canvas.arrow(linear.top, (dec_x, linear.y1 + 0.8))
    canvas.text(dec_x, linear.y1 + 0.95, "next-token probabilities (softmax)", size=8.5,
                color=MUTED, va="bottom")
    layers = "1 layer" if n_layers == 1 else f"{n_layers or 'N'} layers"
    alt = ("The encoder-decoder Transformer. Left, the encoder: source token embeddings plus "
           f"positions go through {layers} of unmasked "
           "self-attention and a feed-forward network, each followed by add and norm, giving the "
           "memory. Right, the decoder: the target shifted right goes through blocks of masked "
           "self-attention, cross-attention and a feed-forward network, then a linear layer to "
           "the logits. An arrow carries the memory into every cross-attention as its keys and "
           "values, while the queries come from the decoder.")
    return canvas.finish(alt)


def diagram_language_model(
    tokens: Sequence[str], *, d_model: int, n_layers: int, vocab_size: int,
    pos: str = "rope",
) -> Diagram:
    """A decoder-only language model, from tokens to logits, at every position at once.

    From the bottom: the T tokens and their ids (B, T); the embeddings (B, T, D) (with the
    positions added, or passed to attention as a rotation or a bias, depending on ``pos``); N
    causal blocks, whose mask, :func:`coursepkg.self_attention.causal_mask` (T), is drawn in the
    block: each position reads itself and the positions before it; a final LayerNorm and a
    linear layer give V logits per position (B, T, V); and the token each position is trained
    to predict, the next one.

    Args:
        tokens: the T input tokens (characters of the chapter's text, e.g. ``list("KING")``).
        d_model: D, the model width.
        n_layers: N, the number of blocks.
        vocab_size: V.
        pos: the position kind of ``TransformerLM`` (``"learned"``, ``"sinusoidal"``,
            ``"rope"``, ``"relative"`` or ``"none"``), written where positions enter.

    Returns:
        The diagram.
    """
    tokens = list(tokens)
    T = len(tokens)
    if T < 2:
        raise ValueError("give at least two tokens")
    pitch = min(2.6, 15.0 / T)
    x0 = 2.0
    xs = [x0 + pitch * (t + 0.5) for t in range(T)]
    right = x0 + pitch * T
    width = max(28.0, right + 9.5)
    height = 16.2
    canvas = Canvas(width, height, title="A Transformer language model, from tokens to logits")
    y_tok, y_emb, y_block, y_logit, y_next = 1.2, 3.3, 6.9, 10.6, 12.9
    block_h = 3.2
    shapes = [(y_tok, "tokens → ids (B, T)"),
              (y_emb, f"embeddings (B, T, {d_model})\n" + {
                  "learned": "+ learned positions", "sinusoidal": "+ sinusoidal positions",
                  "rope": "positions: RoPE in attention",
                  "relative": "positions: a bias in attention", "none": "no positions"}[pos]),
              (y_block, f"{n_layers} causal blocks (B, T, {d_model})"),
              (y_logit, f"LayerNorm, linear:\nlogits (B, T, {vocab_size})"),
              (y_next, "trained to predict\nthe next token")]
    for y, text in shapes:
        canvas.text(right + 0.9, y, text, size=8.5, color=MUTED, ha="left")
    block = canvas.box((x0 + right) / 2, y_block, right - x0 + 0.4, block_h, "", role="attention")
    canvas.text(block.x0 + 0.35, block.y1 - 0.35, f"{n_layers} × (causal self-attention, "
                "feed-forward)", size=8.5, ha="left", va="top")
    mask = causal_mask(T)
    mcell = min(0.45, (block_h - 1.1) / T)
    canvas.grid(block.x1 - 0.3 - T * mcell, block.y0 + 0.3, mask, cell=mcell, kind="mask",
                name="causal mask")
    canvas.text(block.x1 - 0.4 - T * mcell, block.y0 + 0.3 + T * mcell / 2, "mask:",
                size=8, color=MUTED, ha="right")
    for t, (x, token) in enumerate(zip(xs, tokens, strict=True)):
        canvas.box(x, y_tok, pitch - 0.35, 0.9, common.token_label(token), size=10)
        emb = canvas.cells(x - 0.8, y_emb - 0.2, n=4, role="embedding", cell=0.4)
        canvas.arrow((x, y_tok + 0.45), (x, emb.rect.y0), linewidth=1.0)
        canvas.arrow((x, emb.rect.y1), (x, block.y0), linewidth=1.0)
        logit = canvas.cells(x - 0.8, y_logit - 0.2, n=4, role="output", cell=0.4)
        canvas.arrow((x, block.y1), (x, logit.rect.y0), linewidth=1.0)
        target = tokens[t + 1] if t + 1 < T else "?"
        canvas.box(x, y_next, pitch - 0.35, 0.9, common.token_label(target),
                   role="output" if t + 1 < T else "token", dashed=t + 1 == T, size=10)
        canvas.arrow((x, logit.rect.y1), (x, y_next - 0.45), linewidth=1.0)
    alt = (f"A Transformer language model over the {T} tokens '{''.join(tokens)}'. Each token "
           f"becomes an id and an embedding of width {d_model}; {n_layers} causal blocks, whose "
           "lower-triangular mask is drawn inside them, let every position read itself and the "
           f"positions before it; a final LayerNorm and a linear layer give {vocab_size} logits "
           "per position, and each position is trained to predict the token after it, the "
           "last one the next, unknown token.")
    return canvas.finish(alt)


def diagram_kv_cache(tokens: Sequence[str], *, d_model: int | None = None) -> Diagram:
    """One step of cached decoding in a self-attention layer: the new token against the past.

    The cache holds, for the P tokens already read, what the layer's self-attention reads as
    keys and values: the layer's inputs at positions 0 .. P-1 (``coursepkg.transformer.KVCache``
    keeps these (B, P, D) inputs). The new token's input is appended (P + 1 rows); the key and
    value projections turn all of them into K and V, and only the new position computes a
    query, so the step's scores are one row (1 × (P + 1)), its weights one softmax, and its
    output one vector. Shapes only: no tensor is drawn.

    Args:
        tokens: the tokens read so far, the last one being the new token (P + 1 of them).
        d_model: D, written in the shapes (None: written as D).

    Returns:
        The diagram.
    """
    tokens = list(tokens)
    if len(tokens) < 2:
        raise ValueError("give the cached tokens and the new one (at least two tokens)")
    P = len(tokens) - 1
    D = "D" if d_model is None else str(d_model)
    row_h, cell = 0.62, 0.5
    n_cells = 4
    width, height = 28.0, 6.0 + (P + 1) * row_h + 2.4
    canvas = Canvas(width, height, title=f"Cached decoding: step {P}, one new token")
    top = height - 2.9
    if P + 1 > 12:
        raise ValueError(f"draw at most 12 tokens, got {P + 1}")
    x_tok, x_in, x_kv, x_out = 3.6, 4.4, 14.0, 21.2

    def row_y(i: int) -> float:
        return top - (i + 1) * row_h

    canvas.text(x_in + n_cells * cell / 2, top + 0.2, f"layer inputs (B, {P} + 1, {D})",
                size=8.5, color=MUTED, va="bottom")
    rows = []
    for i, token in enumerate(tokens):
        y = row_y(i)
        canvas.text(x_tok, y + cell / 2, common.token_label(token), size=9.5, ha="right")
        rows.append(canvas.cells(x_in, y, n=n_cells, role="embedding" if i == P else "norm",
                                 cell=cell, name=f"input_{i}"))
    cache_rect = rows[0].rect.union(rows[P - 1].rect)
    canvas.frame(cache_rect, "", pad=0.18)
    canvas.text(cache_rect.x1 + 0.45, cache_rect.cy, f"the cache:\n{P} positions", size=8.5,
                color=MUTED, ha="left")
    canvas.highlight(rows[P].rect, pad=0.1)
    canvas.text(rows[P].rect.x1 + 0.3, rows[P].rect.cy, "new", size=8.5,
                color=PALETTE.highlight, ha="left")
    # projections: K and V for all rows, Q for the new one
    k_rows = [canvas.cells(x_kv, row_y(i), n=n_cells, role="key", cell=cell, name=f"k_{i}")
              for i in range(P + 1)]
    v_rows = [canvas.cells(x_kv + n_cells * cell + 0.8, row_y(i), n=n_cells, role="value",
                           cell=cell, name=f"v_{i}") for i in range(P + 1)]
    canvas.text(k_rows[0].rect.cx, top + 0.2, "K", size=9, va="bottom", weight="bold")
    canvas.text(v_rows[0].rect.cx, top + 0.2, "V", size=9, va="bottom", weight="bold")
    all_rows = rows[0].rect.union(rows[P].rect)
    canvas.arrow((all_rows.x1 + 3.6, all_rows.cy), (k_rows[0].rect.x0 - 0.3, all_rows.cy),
                 label="$W^K$, $W^V$", label_offset=(0.0, 0.45), label_size=9)
    q_y = row_y(P) - 2.0
    q = canvas.cells(x_kv, q_y, n=n_cells, role="query", cell=cell, name="q_new")
    canvas.arrow((rows[P].rect.cx, rows[P].rect.y0), q.rect.left,
                 via=[(rows[P].rect.cx, q.rect.cy)], label="$W^Q$: the new position only",
                 label_pos=0.7, label_offset=(0.0, 0.4), label_size=9)
    canvas.text(q.rect.x1 + 0.3, q.rect.cy, "q", size=9, weight="bold", ha="left")
    # scores and output
    scores = canvas.cells(x_out, q_y, n=P + 1, role="output", cell=cell, name="scores")
    canvas.arrow((q.rect.x1 + 0.8, q.rect.cy), scores.rect.left, label="$q K^\\top$",
                 label_offset=(0.0, 0.4), label_size=9)
    canvas.text(scores.rect.cx, scores.rect.y0 - 0.2, f"1 × {P + 1} scores → softmax",
                size=8.5, color=MUTED, va="top")
    out = canvas.cells(x_out + 0.5 * (P + 1 - n_cells) * cell, q_y + 2.2, n=n_cells,
                       role="value", cell=cell, name="output")
    canvas.arrow(scores.rect.top, out.rect.bottom, label="× V", label_offset=(0.6, 0.0),
                 label_size=9)
    canvas.text(out.rect.cx, out.rect.y1 + 0.2, f"output of the new\nposition (B, 1, {D})",
                size=8.5, color=MUTED, va="bottom")
    canvas.text(width / 2, 0.75, "the package's KVCache keeps these inputs and projects "
                "them again at every step", size=8.5, color=MUTED)
    alt = (f"One step of cached decoding after '{''.join(tokens[:-1])}', reading the new token "
           f"'{tokens[-1]}'. The cache holds the layer's inputs at the {P} earlier positions; "
           "the new token's input is appended, the key and value projections give one key and "
           f"one value per position, {P + 1} of each, and only the new position computes a "
           f"query, whose {P + 1} scores against the keys become one softmax and one weighted "
           "sum of the values: the output of the new position.")
    return canvas.finish(alt)
