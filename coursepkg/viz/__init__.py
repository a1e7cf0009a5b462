"""Plots and interactive demos used by the book: ``from coursepkg import viz; viz.<name>``.

Every function returns a matplotlib object or an ipywidgets widget and prints nothing, so the same
code serves the rendered book (static figures) and a live notebook (widgets). Figures are built
with :class:`matplotlib.figure.Figure` directly, not pyplot, so a widget never makes a notebook
show its figure twice. Diagrams are drawn from the chapter's real tensors, passed in by the page.

Where things are (each module's docstring lists its functions):

- :mod:`~coursepkg.viz.common`: what every plot shares: making and labelling axes, colours, the
  one :func:`~coursepkg.viz.common.heatmap`, token tick labels, PNG and HTML for widgets, and
  :func:`markdown_table` (the pages' tables).
- :mod:`~coursepkg.viz.explorer`: :class:`Explorer`, the base of the seven widgets.
- :mod:`~coursepkg.viz.diagrams`: the architectures drawn (``diagram_*``, one drawing vocabulary
  and one :data:`PALETTE`), each a :class:`Diagram` that a page shows as SVG with its alt text.
- :mod:`~coursepkg.viz.curves`: plots that several chapters share: training curves
  (:func:`plot_loss_curves`, :func:`plot_loss_against_time`, :func:`plot_loss_and_final_scores`)
  and timings (:func:`plot_timings`).
- One module per chapter, in book order; a chapter's plots and its widget live in its module,
  and a module imports only from earlier ones (and from ``common``, ``explorer``, ``curves``):
  :mod:`~coursepkg.viz.ngrams` (1), :mod:`~coursepkg.viz.rnn` (2),
  :mod:`~coursepkg.viz.attention` (3), :mod:`~coursepkg.viz.self_attention` (4),
  :mod:`~coursepkg.viz.multihead` (5), :mod:`~coursepkg.viz.positional` (6),
  :mod:`~coursepkg.viz.transformer` (7).

Adding a plot: put it in its chapter's module (or in ``curves`` if several chapters draw it),
draw into an ``ax`` it is given or one from :func:`~coursepkg.viz.common.axes_or_new`, build it
from the helpers of ``common``, add it to the module's ``__all__``, and import it here so that
the pages call it as ``viz.<name>``. Adding a widget: subclass :class:`Explorer` (see
:mod:`~coursepkg.viz.explorer`), give it a lowercase name for the pages (``rope_explorer =
RopeExplorer``), and name that factory in the chapter's entry of :data:`coursepkg.course.CHAPTERS`.
Test it in ``tests/test_viz.py``.
"""

from coursepkg.viz.attention import (
    AttentionLookupExplorer,
    ab_attention,
    attention_lookup_explorer,
    plot_accuracy_by_length,
    plot_alignments,
    plot_attention,
    plot_score_spread,
    plot_source_gradients,
)
from coursepkg.viz.common import markdown_table
from coursepkg.viz.curves import (
    centred_mean,
    plot_loss_against_time,
    plot_loss_and_final_scores,
    plot_loss_curves,
    plot_timings,
)
from coursepkg.viz.diagrams import (
    PALETTE,
    Diagram,
    diagram_attention_step,
    diagram_encoder_decoder,
    diagram_encoder_decoder_transformer,
    diagram_heads,
    diagram_kv_cache,
    diagram_language_model,
    diagram_lstm_cell,
    diagram_ngram_counts,
    diagram_positions,
    diagram_rnn_layouts,
    diagram_rnn_unrolled,
    diagram_self_attention,
    diagram_transformer_blocks,
    show_svg,
)
from coursepkg.viz.explorer import Explorer
from coursepkg.viz.multihead import (
    MultiHeadExplorer,
    multihead_explorer,
    plot_head_maps,
    plot_head_split,
)
from coursepkg.viz.ngrams import (
    LanguageModel,
    NGramExplorer,
    next_word_distribution,
    ngram_explorer,
    plot_next_word_distribution,
    plot_perplexity_vs_n,
)
from coursepkg.viz.positional import (
    RopeExplorer,
    plot_accuracy_by_position,
    plot_against_offset,
    plot_position_table,
    plot_rope_pairs,
    rope_explorer,
)
from coursepkg.viz.rnn import (
    RNNStateExplorer,
    plot_accuracy_vs_distance,
    plot_gradient_norms,
    plot_lstm_gates,
    plot_similarity_matrix,
    rnn_lm_states,
    rnn_state_explorer,
)
from coursepkg.viz.self_attention import (
    SelfAttentionExplorer,
    plot_against_width,
    plot_attention_matrices,
    random_self_attention,
    self_attention_explorer,
    word_vectors,
)
from coursepkg.viz.transformer import (
    SamplingExplorer,
    next_token_distribution,
    plot_gradients_by_layer,
    plot_sampling_distribution,
    sampling_explorer,
)

__all__ = [
    "PALETTE",
    "AttentionLookupExplorer",
    "Diagram",
    "Explorer",
    "LanguageModel",
    "MultiHeadExplorer",
    "NGramExplorer",
    "RNNStateExplorer",
    "RopeExplorer",
    "SamplingExplorer",
    "SelfAttentionExplorer",
    "ab_attention",
    "attention_lookup_explorer",
    "centred_mean",
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
    "plot_loss_and_final_scores",
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
    "show_svg",
    "word_vectors",
]
