"""Diagrams of the book's architectures, drawn by code: ``viz.diagram_<name>(...)``.

Every diagram function returns a :class:`~coursepkg.viz.diagrams.canvas.Diagram`: the matplotlib
figure and an alt text that describes it. Shown as the last expression of a notebook cell, a
diagram displays as SVG (crisp at any zoom); the page copies :attr:`Diagram.alt` into the cell's
``mystnb: image: alt:``. Where a diagram shows numbers, sizes or weights, the page passes the
chapter's real tensors, and the diagram computes what it shows from them with the package's own
functions, so the picture and the numbers cannot disagree.

- :mod:`~coursepkg.viz.diagrams.canvas`: the drawing vocabulary (the one :data:`PALETTE`, boxes,
  arrows, vectors as cells, matrices as grids, braces and frames, :func:`show_svg`).
- Chapter 1, :mod:`~coursepkg.viz.diagrams.ngrams`: :func:`diagram_ngram_counts`.
- Chapter 2, :mod:`~coursepkg.viz.diagrams.rnn`: :func:`diagram_rnn_unrolled`,
  :func:`diagram_lstm_cell`, :func:`diagram_rnn_layouts`.
- Chapter 3, :mod:`~coursepkg.viz.diagrams.attention`: :func:`diagram_encoder_decoder`,
  :func:`diagram_attention_step`.
- Chapter 4, :mod:`~coursepkg.viz.diagrams.self_attention`: :func:`diagram_self_attention`.
- Chapter 5, :mod:`~coursepkg.viz.diagrams.multihead`: :func:`diagram_heads`.
- Chapter 6, :mod:`~coursepkg.viz.diagrams.positional`: :func:`diagram_positions`.
- Chapter 7, :mod:`~coursepkg.viz.diagrams.transformer`: :func:`diagram_transformer_blocks`,
  :func:`diagram_encoder_decoder_transformer`, :func:`diagram_language_model`,
  :func:`diagram_kv_cache`.

Adding a diagram: draw it on a :class:`~coursepkg.viz.diagrams.canvas.Canvas` with the
vocabulary's elements and roles (a new kind of thing gets a role in :class:`Palette`, never a
colour typed into a diagram), return ``canvas.finish(alt)``, put it in its chapter's module,
export it here and from :mod:`coursepkg.viz`, and test it in ``tests/test_viz_diagrams.py``.
"""

from coursepkg.viz.diagrams.attention import diagram_attention_step, diagram_encoder_decoder
from coursepkg.viz.diagrams.canvas import PALETTE, Canvas, Diagram, Palette, show_svg
from coursepkg.viz.diagrams.multihead import diagram_heads
from coursepkg.viz.diagrams.ngrams import diagram_ngram_counts
from coursepkg.viz.diagrams.positional import diagram_positions
from coursepkg.viz.diagrams.rnn import diagram_lstm_cell, diagram_rnn_layouts, diagram_rnn_unrolled
from coursepkg.viz.diagrams.self_attention import diagram_self_attention
from coursepkg.viz.diagrams.transformer import (
    diagram_encoder_decoder_transformer,
    diagram_kv_cache,
    diagram_language_model,
    diagram_transformer_blocks,
)

__all__ = [
    "PALETTE",
    "Canvas",
    "Diagram",
    "Palette",
    "diagram_attention_step",
    "diagram_encoder_decoder",
    "diagram_encoder_decoder_transformer",
    "diagram_heads",
    "diagram_kv_cache",
    "diagram_language_model",
    "diagram_lstm_cell",
    "diagram_ngram_counts",
    "diagram_positions",
    "diagram_rnn_layouts",
    "diagram_rnn_unrolled",
    "diagram_self_attention",
    "diagram_transformer_blocks",
    "show_svg",
]
