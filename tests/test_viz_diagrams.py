"""Tests of coursepkg.viz's diagrams: each one builds from the package, draws the numbers it is
given (or computes them with the package's own functions), shares the one palette, and reads
the same on the book's light and dark pages."""

import io
import math
import re

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgba
from matplotlib.text import Text
from PIL import Image
from torch import nn

from coursepkg import viz
from coursepkg.multihead import MultiHeadAttention, merge_heads, split_heads
from coursepkg.ngram import NGramLM
from coursepkg.positional import apply_rope
from coursepkg.rnn import ElmanRNN
from coursepkg.self_attention import SelfAttention, causal_mask
from coursepkg.viz.diagrams.canvas import MUTED, PANEL, darker

SENTENCE = "to be or not to be".split()


# ---------------------------------------------------------------------- the chapters' examples


def rnn_example():
    """Chapter 2: 'brutus killed caesar' through an untrained ElmanRNN(4, 6)."""
    words = ["brutus", "killed", "caesar"]
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(3, 4, generator=generator)
    torch.manual_seed(0)
    with torch.no_grad():
        states, _ = ElmanRNN(4, 6)(inputs[None])
    return words, inputs, states[0]


def self_attention_example():
    """Chapter 4: 'I want to sleep', a causal head with d_k = 4 and d_v = 2."""
    words = "I want to sleep".split()
    x = viz.word_vectors(words, 8)[None]  # (1, T, D)
    torch.manual_seed(0)
    head = SelfAttention(8, d_k=4, d_v=2, causal=True)
    with torch.no_grad():
        for linear in (head.w_q, head.w_k, head.w_v):
            nn.init.normal_(linear.weight, std=8 ** -0.5)
        q, k, v = head.w_q(x)[0], head.w_k(x)[0], head.w_v(x)[0]
        _, weights = head(x)  # (1, T, T)
    return words, x[0], q, k, v, weights[0]


def multihead_example():
    """Chapter 5: B = 1, T = 5, D = 12, H = 3, the projections of a MultiHeadAttention."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(1, 5, 12)
    w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.chunk(3)
    with torch.no_grad():
        q, k, v = (x @ w.T + b for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
        _, weights = mha(x, x, x)  # (1, H, T, T)
    return q, k, v, weights[0]


def rope_example():
    """Chapter 6: the query of 'dog' and the key of 'I', width 8."""
    generator = torch.Generator().manual_seed(1)
    w_q = torch.randn(8, 8, generator=generator) / math.sqrt(8)
    w_k = torch.randn(8, 8, generator=generator) / math.sqrt(8)
    return viz.word_vectors(["dog"], 8)[0] @ w_q.T, viz.word_vectors(["I"], 8)[0] @ w_k.T


ATTENTION_WEIGHTS = torch.softmax(torch.tensor([0.0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 5, 1]), 0)


def build(name):
    if name == "ngram_counts":
        return viz.diagram_ngram_counts(SENTENCE, 2)
    if name == "rnn_unrolled":
        words, inputs, states = rnn_example()
        return viz.diagram_rnn_unrolled(words, inputs=inputs, states=states)
    if name == "lstm_cell":
        return viz.diagram_lstm_cell()
    if name == "rnn_layouts":
        return viz.diagram_rnn_layouts(["I", "want", "to", "sleep"], hidden_size=3)
    if name == "encoder_decoder":
        return viz.diagram_encoder_decoder(list("5.mar.21"), list("2021-03-05"))
    if name == "attention_step":
        return viz.diagram_attention_step(list("March 5, 2021"), list("2021-03-05"), 3,
                                          ATTENTION_WEIGHTS, context=torch.randn(6))
    if name == "self_attention":
        words, x, q, k, v, _ = self_attention_example()
        return viz.diagram_self_attention(words, q, k, v, x=x, mask=causal_mask(4))
    if name == "heads":
        q, k, v, _ = multihead_example()
        return viz.diagram_heads(q, k, v, 3)
    if name == "positions":
        return viz.diagram_positions(*rope_example())
    if name == "transformer_blocks":
        return viz.diagram_transformer_blocks(d_model=32, n_heads=4, d_ff=128)
    if name == "encoder_decoder_transformer":
        return viz.diagram_encoder_decoder_transformer(n_layers=1)
    if name == "language_model":
        return viz.diagram_language_model(list("KING HE"), d_model=64, n_layers=2, vocab_size=65)
    if name == "kv_cache":
        return viz.diagram_kv_cache(list("KING"), d_model=64)
    raise KeyError(name)


NAMES = ["ngram_counts", "rnn_unrolled", "lstm_cell", "rnn_layouts", "encoder_decoder",
         "attention_step", "self_attention", "heads", "positions", "transformer_blocks",
         "encoder_decoder_transformer", "language_model", "kv_cache"]


@pytest.fixture(scope="module")
def diagrams():
    return {name: build(name) for name in NAMES}


# ---------------------------------------------------------------------- helpers


def texts(diagram):
    return [t.get_text() for t in diagram.figure.findobj(Text) if t.get_text()]


def image(diagram, label):
    found = [im for im in diagram.figure.axes[0].images if im.get_label() == label]
    assert len(found) == 1, f"one image labelled {label!r}, found {len(found)}"
    return found[0]


def drawn(diagram, label):
    """The values an image was drawn from (masked cells as -inf)."""
    array = image(diagram, label).get_array()
    return np.ma.filled(array.astype(float), -np.inf)


def patches(diagram, gid):
    return [p for p in diagram.figure.axes[0].patches if p.get_gid() == gid]


def luminance(rgba):
    return 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2]


def contrast(a, b):
    """The WCAG contrast ratio of two colours."""
    def relative(c):
        channels = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4
                    for x in to_rgba(c)[:3]]
        return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]

    high, low = sorted([relative(a), relative(b)], reverse=True)
    return (high + 0.05) / (low + 0.05)


def on_background(diagram, rgb):
    png = Image.open(io.BytesIO(diagram.png(dpi=30))).convert("RGBA")
    base = Image.new("RGBA", png.size, (*rgb, 255))
    base.alpha_composite(png)
    return np.asarray(base.convert("RGB"), dtype=int)


# ---------------------------------------------------------------------- every diagram


@pytest.mark.parametrize("name", NAMES)
def test_every_diagram_builds_with_an_alt_text_that_describes_it(diagrams, name):
    diagram = diagrams[name]
    assert isinstance(diagram, viz.Diagram)
    words = diagram.alt.split()
    assert len(words) >= 8, diagram.alt
    assert "/" not in diagram.alt.split()[0] and not diagram.alt.endswith((".png", ".svg"))
    assert repr(diagram).startswith("Diagram(alt=")


@pytest.mark.parametrize("name", NAMES)
def test_every_diagram_fits_the_books_width_with_legible_text(diagrams, name):
    fig = diagrams[name].figure
    width, height = fig.get_size_inches()
    assert width <= 7.5 and height <= 6.0, (width, height)  # the text column is ~7.3 in
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text()]
    assert min(sizes) >= 7, f"text smaller than 7 pt: {min(sizes)}"
    renderer = FigureCanvasAgg(fig).get_renderer()
    box = fig.bbox
    for text in fig.findobj(Text):
        if text.get_text() and text.get_visible():
            extent = text.get_window_extent(renderer)
            assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, \
                f"{text.get_text()!r} leaves the figure"


@pytest.mark.parametrize("name", NAMES)
def test_every_diagram_reads_the_same_on_a_light_and_a_dark_page(diagrams, name):
    diagram = diagrams[name]
    light = on_background(diagram, (255, 255, 255))
    dark = on_background(diagram, (18, 18, 18))  # the dark theme's #121212
    h, w, _ = light.shape
    inner = (slice(h // 10, h - h // 10), slice(w // 10, w - w // 10))
    # the panel is opaque: the drawing does not depend on the page behind it...
    assert np.array_equal(light[inner], dark[inner])
    # ...and the figure is transparent around it (the page shows at the corners)
    assert light[0, 0].tolist() == [255, 255, 255] and dark[0, 0].tolist() == [18, 18, 18]
    assert luminance(light[inner].reshape(-1, 3).mean(0) / 255) > 0.75  # a light panel


@pytest.mark.parametrize("name", NAMES)
def test_text_on_the_panel_has_enough_contrast(diagrams, name):
    for text in diagrams[name].figure.findobj(Text):
        colour = text.get_color()
        if text.get_text() and to_hex(colour) != "#ffffff":  # white only on dark cells
            assert contrast(colour, PANEL) >= 3.0, (text.get_text(), to_hex(colour))
    assert contrast(MUTED, PANEL) >= 4.5


def test_a_diagram_shows_as_the_same_svg_every_time(diagrams):
    diagram = diagrams["lstm_cell"]
    svg = diagram._repr_svg_()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert svg == diagram.svg(), "the same drawing gives the same bytes (the cache can hit)"
    assert not re.search(r"""(?:href|src)\s*=\s*["'](?:https?:)?//""", svg)  # nothing fetched
    shown = viz.show_svg(diagram.figure)
    assert shown.data.count("<svg") == 1


# ---------------------------------------------------------------------- the palette


def test_the_palette_gives_every_role_its_own_colour():
    colours = [viz.PALETTE.role(role) for role in viz.PALETTE.roles()]
    assert len(set(colours)) == len(colours)
    with pytest.raises(ValueError, match="unknown role 'queries'.*query"):
        viz.PALETTE.role("queries")
    assert viz.PALETTE.head(7) == viz.PALETTE.head(1)


@pytest.mark.parametrize("name", ["attention_step", "self_attention", "heads",
                                  "encoder_decoder_transformer", "kv_cache"])
def test_queries_keys_and_values_have_the_same_colours_in_every_chapter(diagrams, name):
    found = 0
    for role in ("query", "key", "value"):
        fill = to_hex(viz.PALETTE.role(role))
        outline = to_hex(darker(viz.PALETTE.role(role)))
        for patch in patches(diagrams[name], role):
            found += role == "query"
            assert fill == to_hex(patch.get_facecolor()) or \
                outline == to_hex(patch.get_edgecolor()), (role, patch)
    assert found, f"the {name} diagram draws a query"


# ---------------------------------------------------------------------- chapter 1


def test_ngram_counts_are_the_models_counts_of_the_windows_so_far():
    diagram = viz.diagram_ngram_counts(SENTENCE, 2, position=6)  # every window
    counts = NGramLM(2, smoothing="mle").fit([SENTENCE]).ngram_counts(2)
    table = drawn(diagram, "counts")
    histories = ["<s>", "to", "be", "or", "not"]
    words = ["to", "be", "or", "not", "</s>"]
    assert table.shape == (5, 5)
    for r, history in enumerate(histories):
        for c, word in enumerate(words):
            assert table[r, c] == counts.get((history, word), 0), (history, word)
    image_ = image(diagram, "counts")
    assert luminance(image_.to_rgba(2.0)) < luminance(image_.to_rgba(1.0)) < 0.9


def test_ngram_window_defaults_to_the_second_occurrence_of_a_repeated_ngram(diagrams):
    diagram = diagrams["ngram_counts"]
    shown = texts(diagram)
    for token in ["<s>", "</s>", "to", "be", "+1", "history", "next word"]:
        assert token in shown, token
    assert "counts of windows 0 to 5 (of 7); an empty cell: not seen yet" in shown
    assert drawn(diagram, "counts")[1, 1] == 2  # "to be", counted twice by window 5
    assert "'to be'" in diagram.alt
    with pytest.raises(ValueError, match="position"):
        viz.diagram_ngram_counts(SENTENCE, 2, position=7)
    with pytest.raises(ValueError, match="empty"):
        viz.diagram_ngram_counts([], 2)


# ---------------------------------------------------------------------- chapter 2


def test_rnn_unrolled_colours_every_state_by_the_rnns_values(diagrams):
    words, inputs, states = rnn_example()
    diagram = diagrams["rnn_unrolled"]
    for t in range(3):
        np.testing.assert_allclose(drawn(diagram, f"h_{t}")[:, 0], states[t].numpy(),
                                   rtol=1e-6)
        np.testing.assert_allclose(drawn(diagram, f"x_{t}")[:, 0], inputs[t].numpy(),
                                   rtol=1e-6)
    assert image(diagram, "h_0").get_clim() == (-1.0, 1.0)  # tanh's range
    shown = texts(diagram)
    assert set(words) <= set(shown) and "$h_{-1} = 0$" in shown
    assert "one cell: the same $W_{ih}$, $W_{hh}$ and $b$ at every step" in shown
    with pytest.raises(ValueError, match="states has 2 rows for 3 words"):
        viz.diagram_rnn_unrolled(words, states=states[:2])


def test_lstm_cell_draws_the_four_gates_in_the_packages_order(diagrams):
    shown = texts(diagrams["lstm_cell"])
    for label in ["$f_t$", "$i_t$", "$g_t$", "$o_t$", "$c_{t-1}$", "$c_t$", "$h_{t-1}$",
                  "$x_t$", "$h_t$", "forget, σ", "candidate, tanh"]:
        assert label in shown, label
    assert any(text.endswith("in the order i, f, g, o)") for text in shown)
    assert len(patches(diagrams["lstm_cell"], "gate")) >= 5  # three σ gates and two ×


def test_rnn_layouts_show_both_directions_and_the_concatenated_width(diagrams):
    shown = texts(diagrams["rnn_layouts"])
    assert shown.count("→") >= 8 and shown.count("←") >= 8  # 4 cells and 4 halves each
    assert any("(B, T, 6)" in text for text in shown)  # 2 * hidden_size
    assert "RNN 2" in shown and "sleep" in shown


# ---------------------------------------------------------------------- chapter 3


def test_encoder_decoder_feeds_the_same_summary_to_every_step(diagrams):
    diagram = diagrams["encoder_decoder"]
    shown = texts(diagram)
    assert "the bottleneck: one vector" in shown and "<s>" in shown and "…" in shown
    assert len(patches(diagram, "highlight")) == 1
    # the summary (6 cells) and one copy of 3 cells beside each of the 6 decoder steps
    assert len(patches(diagram, "state")) == 6 + 6 * 3


def test_attention_step_draws_the_weights_it_is_given(diagrams):
    diagram = diagrams["attention_step"]
    weights = drawn(diagram, "weights")
    assert weights.shape == (1, 13)
    np.testing.assert_allclose(weights[0], ATTENTION_WEIGHTS.numpy(), rtol=1e-6)
    colours = image(diagram, "weights")
    order = np.argsort(weights[0])
    shade = [luminance(colours.to_rgba(weights[0, i])) for i in order]
    assert shade == sorted(shade, reverse=True), "a larger weight is darker"
    shown = texts(diagram)
    assert "0.87" in shown and "writes 1" in shown and "reads 2 (written: 202)" in shown
    assert "'1'" in diagram.alt and "outlined, on the source character '2'" in diagram.alt
    with pytest.raises(ValueError, match="12 values for 13 source tokens"):
        viz.diagram_attention_step(list("March 5, 2021"), list("2021"), 0, torch.ones(12))


# ---------------------------------------------------------------------- chapter 4


def test_self_attention_grids_are_the_heads_own_scores_weights_and_mask(diagrams):
    words, _, q, k, v, weights = self_attention_example()
    diagram = diagrams["self_attention"]
    np.testing.assert_allclose(drawn(diagram, "scores"), (q @ k.T / 2).numpy(), rtol=1e-5)
    np.testing.assert_allclose(drawn(diagram, "weights"), weights.numpy(), atol=1e-6)
    mask = drawn(diagram, "mask")
    assert np.array_equal(np.isinf(mask), ~causal_mask(4).numpy())
    np.testing.assert_allclose(drawn(diagram, "outputs"), (weights @ v).numpy(), atol=1e-6)
    for t in range(4):
        np.testing.assert_allclose(drawn(diagram, f"query_{t}")[0], q[t].numpy(), rtol=1e-6)
    shown = texts(diagram)
    assert shown.count("sleep") >= 4  # the table's row and the grids' labels
    assert shown.count("−∞") == 6 and "1.00" in shown
    assert "A causal mask" in diagram.alt
    unmasked = viz.diagram_self_attention(words, q, k, v)
    assert all(im.get_label() != "mask" for im in unmasked.figure.axes[0].images)
    with pytest.raises(ValueError, match="expected q, k"):
        viz.diagram_self_attention(words[:3], q, k, v)


# ---------------------------------------------------------------------- chapter 5


def test_heads_are_split_attended_and_merged_with_the_modules_numbers(diagrams):
    q, k, v, weights = multihead_example()
    diagram = diagrams["heads"]
    q_heads = split_heads(q, 3)[0]  # (H, T, Dh)
    for h in range(3):
        np.testing.assert_allclose(drawn(diagram, f"weights_{h}"), weights[h].numpy(),
                                   atol=1e-6)
        np.testing.assert_allclose(drawn(diagram, f"q_head_{h}"), q_heads[h].numpy(),
                                   rtol=1e-6)
        np.testing.assert_allclose(drawn(diagram, f"Q_{h}"), q[0, :, 4 * h:4 * h + 4].numpy(),
                                   rtol=1e-6)
        frames = patches(diagram, f"head_{h}")
        assert frames and all(to_hex(p.get_edgecolor()) == viz.PALETTE.head(h) for p in frames)
    out_heads = torch.stack([drawn_tensor(diagram, f"out_head_{h}") for h in range(3)])
    merged = torch.cat([drawn_tensor(diagram, f"merged_{h}") for h in range(3)], dim=1)
    torch.testing.assert_close(merged, merge_heads(out_heads[None])[0])
    shown = texts(diagram)
    for label in ["view", "transpose (1, 2)", "reshape", "(B, T, D)", "(B, T, H, Dh)",
                  "(B, H, T, Dh)"]:
        assert label in shown, label
    with pytest.raises(ValueError, match="divisor"):
        viz.diagram_heads(q, k, v, 5)


def drawn_tensor(diagram, label):
    return torch.as_tensor(drawn(diagram, label), dtype=torch.float64)


# ---------------------------------------------------------------------- chapter 6


def test_rope_pairs_keep_their_angle_for_the_same_offset(diagrams):
    q, k = rope_example()
    shown = texts(diagrams["positions"])
    scores = [t for t in shown if "pair's score" in t]
    assert len(scores) == 3
    assert scores[0] == scores[1] != scores[2]  # (4, 1) and (6, 3) against (4, 2)
    rotated = [apply_rope(x[None], torch.tensor([p]))[0, :2] for x, p in ((q, 4), (k, 1))]
    assert f"{float(rotated[0] @ rotated[1]):.2f}" in scores[0]
    assert "dog at 4, I at 1: m − n = 3" in shown and "rotated (RoPE)" in shown
    assert len(patches(diagrams["positions"], "position")) == 4  # p_m, p_n, R(mθ), R(nθ)
    with pytest.raises(ValueError, match="pair"):
        viz.diagram_positions(q, k, pair=4)


# ---------------------------------------------------------------------- chapter 7


def test_blocks_put_the_layer_norms_where_each_variant_does(diagrams):
    diagram = diagrams["transformer_blocks"]
    shown = texts(diagram)
    assert shown.count("LayerNorm") == 4 and shown.count("multi-head attention") == 2
    assert "post-norm (the 2017 paper)" in shown and "pre-norm (GPT-2)" in shown
    assert "H = 4" in shown and "D → 128 → D" in shown
    boxes = [(p.get_gid(), p.get_y()) for p in diagram.figure.axes[0].patches
             if p.get_gid() in ("norm", "attention") and p.get_x() > 14]
    first = min(boxes, key=lambda item: item[1])
    assert first[0] == "norm", "pre-norm normalises before attention"
    # the notes between the columns point to the column they describe
    notes = {t.get_text(): t.get_position()[0] for t in diagram.figure.findobj(Text)
             if "residual stream" in t.get_text()}
    post, pre = (next(x for text, x in notes.items() if words in text)
                 for words in ("two LayerNorms", "never normalised"))
    assert "← the residual stream" in "".join(notes) and "the residual stream →" in "".join(notes)
    assert post < pre


def test_encoder_decoder_transformer_takes_keys_and_values_from_the_memory(diagrams):
    diagram = diagrams["encoder_decoder_transformer"]
    shown = texts(diagram)
    for label in ["cross-attention", "masked self-attention", "self-attention (no mask)",
                  "memory (B, S, D)", "K", "V", "Q", "encoder\nlayer × 1"]:
        assert label in shown, label
    assert shown.count("add & norm") == 5
    assert "through 1 layer of unmasked" in diagram.alt, diagram.alt
    assert "through N layers" in viz.diagram_encoder_decoder_transformer().alt


def test_language_model_draws_the_packages_causal_mask_and_the_shifted_targets(diagrams):
    diagram = diagrams["language_model"]
    mask = drawn(diagram, "causal mask")
    assert np.array_equal(np.isinf(mask), ~causal_mask(7).numpy())
    shown = texts(diagram)
    assert "?" in shown and "logits (B, T, 65)" in "".join(shown)
    assert "embeddings (B, T, 64)\npositions: RoPE in attention" in shown


def test_kv_cache_step_has_one_query_against_every_key(diagrams):
    diagram = diagrams["kv_cache"]
    assert len(patches(diagram, "key")) == 4 * 4 and len(patches(diagram, "value")) >= 4 * 4
    assert len(patches(diagram, "query")) == 4  # one query of 4 cells
    shown = texts(diagram)
    assert "1 × 4 scores → softmax" in shown and "the cache:\n3 positions" in shown
    with pytest.raises(ValueError, match="at least two"):
        viz.diagram_kv_cache(["K"])
