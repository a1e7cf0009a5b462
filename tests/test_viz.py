"""Tests of coursepkg.viz: the plots draw what they claim and the widgets react."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets
import pytest
from matplotlib.axes import Axes

from coursepkg import viz
from coursepkg.ngram import NGramLM


class TableModel:
    """A stand-in language model: fixed next-token probabilities per last word."""

    def __init__(self, table: dict[str, dict[str, float]], default: dict[str, float]):
        self.table = table
        self.default = default
        self.vocab = sorted(default)
        self.calls: list[tuple[str, tuple]] = []

    def prob(self, word, context):
        self.calls.append((word, tuple(context)))
        row = self.table.get(context[-1], self.default) if context else self.default
        return row.get(word, 0.0)


UNIFORM = {"a": 0.25, "b": 0.25, "c": 0.25, "</s>": 0.25}
MODEL = TableModel({"a": {"a": 0.1, "b": 0.6, "c": 0.2, "</s>": 0.1}}, UNIFORM)

CORPUS = [["the", "cat", "sat"], ["the", "dog", "sat"], ["a", "cat", "ran"], ["the", "cat", "ran"]]


def bar_labels(ax: Axes) -> list[str]:
    return [tick.get_text() for tick in ax.get_yticklabels()]


def bar_widths(ax: Axes) -> list[float]:
    return [patch.get_width() for patch in ax.patches]


def test_next_word_distribution_sorts_by_probability_then_spelling():
    assert viz.next_word_distribution(MODEL, ["x", "a"], top=3) == [
        ("b", 0.6), ("c", 0.2), ("</s>", 0.1)
    ]
    # ties: alphabetical order of the tokens
    assert viz.next_word_distribution(MODEL, [], top=10) == [
        ("</s>", 0.25), ("a", 0.25), ("b", 0.25), ("c", 0.25)
    ]


def test_next_word_distribution_rejects_non_positive_top():
    with pytest.raises(ValueError, match="top"):
        viz.next_word_distribution(MODEL, [], top=0)


def test_plot_next_word_distribution_draws_one_labelled_bar_per_token():
    ax = viz.plot_next_word_distribution(MODEL, ("a",), top=3)
    assert isinstance(ax, Axes)
    assert bar_labels(ax) == ["b", "c", "</s>"]
    assert bar_widths(ax) == pytest.approx([0.6, 0.2, 0.1])
    assert ax.yaxis_inverted()  # most probable token on top
    assert "a" in ax.get_title()
    assert [t.get_text() for t in ax.texts] == ["0.600", "0.200", "0.100"]


def test_plot_next_word_distribution_draws_into_given_axes_and_titles_sentence_start():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    out = viz.plot_next_word_distribution(MODEL, (), top=2, ax=ax)
    assert out is ax
    assert len(ax.patches) == 2
    assert "sentence start" in ax.get_title()


def test_plot_next_word_distribution_with_a_real_ngram_model_sums_below_one():
    lm = NGramLM(2, smoothing="kneser_ney").fit(CORPUS)
    ax = viz.plot_next_word_distribution(lm, ["the"], top=len(lm.vocab))
    assert sorted(bar_labels(ax)) == sorted(lm.vocab)
    assert sum(bar_widths(ax)) == pytest.approx(1.0)
    assert bar_labels(ax)[0] == "cat"  # "the cat" is the most frequent continuation


def test_plot_perplexity_vs_n_draws_train_and_heldout_lines_per_model():
    orders = [1, 2, 3]
    train = {"add-k": [300.0, 80.0, 20.0], "KN": [310.0, 70.0, 15.0]}
    heldout = {"add-k": [320.0, 400.0, 900.0], "KN": [330.0, 200.0, 190.0]}
    ax = viz.plot_perplexity_vs_n(orders, train, heldout)
    labels = sorted(line.get_label() for line in ax.get_lines())
    assert labels == ["KN, held-out", "KN, train", "add-k, held-out", "add-k, train"]
    by_label = {line.get_label(): line for line in ax.get_lines()}
    assert list(by_label["add-k, held-out"].get_ydata()) == heldout["add-k"]
    assert list(by_label["KN, train"].get_xdata()) == orders
    assert by_label["KN, train"].get_linestyle() == "--"
    assert by_label["KN, held-out"].get_color() == by_label["KN, train"].get_color()
    assert ax.get_yscale() == "log"
    assert ax.get_legend() is not None


def test_plot_perplexity_vs_n_rejects_a_curve_of_the_wrong_length():
    with pytest.raises(ValueError, match="3 orders"):
        viz.plot_perplexity_vs_n([1, 2, 3], {"KN": [1.0, 2.0]}, {})


def tiny_models():
    return {
        (n, method): NGramLM(n, smoothing=method).fit(CORPUS)
        for n in (1, 2)
        for method in ("add_k", "kneser_ney")
    }


def test_explorer_builds_with_controls_and_an_image():
    explorer = viz.ngram_explorer(tiny_models(), context="the")
    assert list(explorer.order.options) == [1, 2]
    assert list(explorer.smoothing.options) == ["add_k", "kneser_ney"]
    assert bytes(explorer.image.value).startswith(b"\x89PNG")
    assert explorer.model is explorer.models[(1, "add_k")]
    assert explorer.tokens() == ["the"]


def test_explorer_redraws_when_each_control_changes():
    explorer = viz.ngram_explorer(tiny_models(), context="the", top=3)

    def state():
        ax = explorer.figure.axes[0]
        return ax.get_title(), bar_labels(ax), bytes(explorer.image.value)

    before = state()
    explorer.order.value = 2
    after_order = state()
    assert "n=2" in after_order[0] and after_order[2] != before[2]
    assert after_order[1][0] == "cat"  # the bigram model knows what follows "the"

    explorer.smoothing.value = "kneser_ney"
    assert "kneser_ney" in state()[0]

    explorer.context.value = "a"
    title, labels, _ = state()
    assert title.endswith("after: a")
    assert labels[0] == "cat"

    explorer.top.value = 5
    assert len(state()[1]) == 5
    assert len(explorer.figure.axes) == 1  # redraw replaces the plot, never stacks axes


def test_explorer_reports_unknown_words_and_missing_models():
    models = {(2, "kneser_ney"): NGramLM(2, smoothing="kneser_ney").fit(CORPUS),
              (1, "add_k"): NGramLM(1, smoothing="add_k").fit(CORPUS)}
    explorer = viz.ngram_explorer(models, context="the zebra")
    explorer.order.value = 2
    explorer.smoothing.value = "kneser_ney"
    assert "zebra" in explorer.message.value
    explorer.smoothing.value = "add_k"  # (2, "add_k") was not given
    assert explorer.model is None
    assert "No model" in explorer.message.value


def test_explorer_uses_the_given_tokenizer():
    explorer = viz.ngram_explorer(tiny_models(), context="ab", tokenize=list, joiner="")
    assert explorer.tokens() == ["a", "b"]


def test_explorer_needs_models():
    with pytest.raises(ValueError, match="at least one model"):
        viz.ngram_explorer({})


class CountingExplorer(viz.Explorer):
    """The smallest widget: a slider and a checkbox; the picture is one bar, the slider's."""

    def __init__(self):
        super().__init__(figsize=(3.0, 2.0))
        self.draws = 0
        self.height = widgets.IntSlider(value=2, min=0, max=10)
        self.limit = widgets.IntSlider(value=10, min=1, max=10)
        self.wide = widgets.Checkbox(value=False)
        self.limit.observe(self._on_limit, names="value")
        self._show([widgets.HBox([self.height, self.limit]), self.wide],
                   watch=[self.height, self.wide])

    def _on_limit(self, _change):
        with self._changing():
            if self.height.value > self.limit.value:
                self.height.value = self.limit.value
            self.height.max = self.limit.value

    def draw(self):
        self.draws += 1
        ax = self.figure.subplots()
        ax.bar([0], [self.height.value], width=0.9 if self.wide.value else 0.3)
        self.message.value = f"height {self.height.value}"


def test_explorer_base_lays_out_its_controls_and_draws_the_first_picture():
    explorer = CountingExplorer()
    assert explorer.draws == 1
    controls, wide, image, message = explorer.children
    assert controls.children == (explorer.height, explorer.limit) and wide is explorer.wide
    assert image is explorer.image and message is explorer.message
    assert bytes(image.value) == viz.common.figure_png(explorer.figure)  # shows the figure
    assert message.value == "height 2"


def test_explorer_base_redraws_the_same_figure_when_a_watched_control_changes():
    explorer = CountingExplorer()
    figure, before = explorer.figure, bytes(explorer.image.value)
    explorer.height.value = 7
    assert explorer.draws == 2 and explorer.figure is figure  # the static picture, redrawn
    assert explorer.figure.axes[0].patches[0].get_height() == 7
    assert len(explorer.figure.axes) == 1  # cleared, never stacked
    assert bytes(explorer.image.value) != before
    assert bytes(explorer.image.value) == viz.common.figure_png(explorer.figure)
    explorer.wide.value = True
    assert explorer.draws == 3 and explorer.message.value == "height 7"
    assert explorer.redraw() is figure and explorer.draws == 4


def test_explorer_base_redraws_once_when_a_control_moves_another():
    explorer = CountingExplorer()
    explorer.height.value = 8
    explorer.limit.value = 3  # moves height from 8 to 3, then shrinks its range
    assert explorer.draws == 3  # the first picture, height 8, then once for the limit
    assert explorer.height.value == 3 and explorer.message.value == "height 3"
    explorer.limit.value = 5  # height stays: one redraw all the same
    assert explorer.draws == 4


def test_explorer_base_needs_a_draw_method():
    class Blank(viz.Explorer):
        def __init__(self):
            super().__init__(figsize=(2.0, 2.0))
            self._show([], watch=[])

    with pytest.raises(NotImplementedError, match="Blank must implement draw"):
        Blank()


@pytest.mark.parametrize("name", ["ngram_explorer", "rnn_state_explorer",
                                  "attention_lookup_explorer", "self_attention_explorer",
                                  "multihead_explorer", "rope_explorer", "sampling_explorer"])
def test_every_widget_of_the_book_is_an_explorer(name):
    assert issubclass(getattr(viz, name), viz.Explorer)


# ------------------------------------------------------------------------ chapter 2


import numpy as np  # noqa: E402
import torch  # noqa: E402

from coursepkg.data import CharTokenizer  # noqa: E402
from coursepkg.lm import TrainHistory  # noqa: E402
from coursepkg.rnn import LSTM, RNNLM  # noqa: E402


def test_plot_gradient_norms_draws_one_log_line_per_model_and_skips_zeros():
    norms = {"RNN": [1.0, 0.1, 0.01, 0.0], "LSTM": torch.tensor([1.0, 0.9, 0.8, 0.7])}
    ax = viz.plot_gradient_norms(norms)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(lines) == ["LSTM", "RNN"]
    assert ax.get_yscale() == "log"
    assert list(lines["RNN"].get_xdata()) == [0, 1, 2, 3]
    y = np.asarray(lines["RNN"].get_ydata(), dtype=float)
    assert y[:3].tolist() == [1.0, 0.1, 0.01] and np.isnan(y[3])  # 0 cannot be drawn on a log axis
    assert np.allclose(lines["LSTM"].get_ydata(), [1.0, 0.9, 0.8, 0.7])
    assert "distance" in ax.get_xlabel()
    assert ax.get_legend() is not None


def test_plot_accuracy_vs_distance_draws_curves_references_and_chance():
    curves = {"RNN": [0.9, 0.6, 0.5], "LSTM": [1.0, 1.0, 0.99]}
    ax = viz.plot_accuracy_vs_distance([0, 1, 2], curves, references={"RNN": 0.4},
                                       reference_label="no B", ylabel="P(right)")
    by_label = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(by_label) == ["LSTM", "RNN", "RNN, no B", "chance"]
    assert list(by_label["LSTM"].get_ydata()) == [1.0, 1.0, 0.99]
    assert list(by_label["RNN, no B"].get_ydata()) == [0.4, 0.4]
    assert by_label["RNN, no B"].get_color() == by_label["RNN"].get_color()
    assert by_label["RNN, no B"].get_linestyle() == ":"
    assert list(by_label["chance"].get_ydata()) == [0.5, 0.5]
    assert ax.get_ylabel() == "P(right)"
    assert ax.get_ylim()[0] < 0 < 1 < ax.get_ylim()[1]


def test_plot_accuracy_vs_distance_without_chance_and_with_bad_input():
    ax = viz.plot_accuracy_vs_distance([0, 1], {"a": [1.0, 0.5]}, chance=None)
    assert [line.get_label() for line in ax.get_lines()] == ["a"]
    with pytest.raises(ValueError, match="2 distances"):
        viz.plot_accuracy_vs_distance([0, 1], {"a": [1.0]})
    with pytest.raises(ValueError, match="without a curve"):
        viz.plot_accuracy_vs_distance([0, 1], {"a": [1.0, 0.5]}, references={"b": 0.5})


def small_trace(T=5, Hs=3):
    torch.manual_seed(0)
    lstm = LSTM(2, Hs)
    return lstm.trace(torch.randn(1, T, 2))


def test_plot_lstm_gates_draws_one_heatmap_and_colour_bar_per_quantity():
    trace = small_trace()
    fig = viz.plot_lstm_gates(trace, list("ab\n c"), title="gates")
    assert len(fig.axes) == 12  # six heatmaps, six colour bars
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 6
    assert [ax.get_ylabel().split(":")[0] for ax in heatmaps] == ["i", "f", "g", "o", "c", "h"]
    first = heatmaps[0].images[0]
    assert first.get_array().shape == (3, 5)  # units x time
    assert np.allclose(first.get_array(), trace["i"][0].numpy().T)
    assert first.get_clim() == (0.0, 1.0)  # a gate lives in (0, 1)
    assert heatmaps[2].images[0].get_clim() == (-1.0, 1.0)  # g in (-1, 1)
    labels = [t.get_text() for t in heatmaps[-1].get_xticklabels()]
    assert labels == ["a", "b", "\u23ce", "\u2423", "c"]  # newline and space made visible
    assert fig._suptitle.get_text() == "gates"


def test_plot_lstm_gates_selects_keys_and_units_and_checks_lengths():
    trace = small_trace()
    fig = viz.plot_lstm_gates(trace, list("abcde"), keys=("f", "c"), units=[2, 0])
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 2
    assert np.allclose(heatmaps[1].images[0].get_array(), trace["c"][0].numpy()[:, [2, 0]].T)
    assert [t.get_text() for t in heatmaps[0].get_yticklabels()] == ["2", "0"]
    with pytest.raises(ValueError, match="5 steps but 4 tokens"):
        viz.plot_lstm_gates(trace, list("abcd"))
    with pytest.raises(ValueError, match="no \\['x'\\]"):
        viz.plot_lstm_gates(trace, list("abcde"), keys=("x",))


def test_plot_loss_curves_draws_train_heldout_and_baselines():
    history = TrainHistory(steps=[1, 2, 3, 4], train_loss=[4.0, 3.0, 2.0, 1.0],
                           val_steps=[2, 4], val_loss=[3.5, 1.5])
    no_val = TrainHistory(steps=[1, 2], train_loss=[2.0, 1.0])
    ax = viz.plot_loss_curves({"LSTM": history, "RNN": no_val}, {"6-gram": 1.457}, smooth=2)
    labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert labels == ["LSTM, train", "LSTM, held-out", "RNN, train",
                      "train: solid = centred mean of 3 steps, light = each step",
                      "6-gram: 1.457"]
    by_label = {line.get_label(): line for line in ax.get_lines()}
    smoothed = by_label["LSTM, train"]
    assert list(smoothed.get_ydata()) == [4.0, 3.0, 2.0, 1.0]  # a straight line is kept
    assert list(by_label["LSTM, held-out"].get_xdata()) == [2, 4]
    assert list(by_label["6-gram: 1.457"].get_ydata()) == [1.457, 1.457]
    assert len(ax.get_lines()) == 7  # plus one light raw training curve per model
    assert [t.get_text() for t in ax.get_legend().get_texts()] == labels
    raw = viz.plot_loss_curves({"LSTM": history}, smooth=1, heldout="held-out, first 9 tokens")
    assert [line.get_label() for line in raw.get_lines()] == [
        "LSTM, train", "LSTM, held-out, first 9 tokens"]  # no smoothing: the measured loss


def test_centred_mean_is_the_mean_of_a_centred_window_and_fits_a_line_at_the_ends():
    losses = np.random.default_rng(0).normal(size=30)
    smoothed = viz.centred_mean(losses, 6)  # h = 3: seven steps
    for t in range(3, 27):
        assert smoothed[t] == pytest.approx(losses[t - 3:t + 4].mean())
    first = np.polyfit(np.arange(7), losses[:7], 1)  # steps 0 ... 2: the first seven steps
    for t in range(3):
        assert smoothed[t] == pytest.approx(np.polyval(first, t))
    last = np.polyfit(np.arange(23, 30), losses[23:], 1)
    assert smoothed[29] == pytest.approx(np.polyval(last, 29))
    line = 5.0 - 0.25 * np.arange(40)
    assert np.allclose(viz.centred_mean(line, 20), line)  # no lag on a steady fall
    assert list(viz.centred_mean([3.0, 1.0], 20)) == [3.0, 1.0]
    assert list(viz.centred_mean(losses, 1)) == list(losses)


def test_the_smoothed_training_loss_at_a_step_depends_on_later_losses_not_only_earlier():
    losses = list(np.linspace(4.0, 1.0, 50))
    t = 20
    before = viz.centred_mean(losses, 10)[t]
    later = list(losses)
    later[t + 3] += 1.0  # a loss after step t, inside its window
    assert viz.centred_mean(later, 10)[t] > before
    far = list(losses)
    far[t + 6] += 1.0  # outside the window of h = 5
    assert viz.centred_mean(far, 10)[t] == pytest.approx(before)


def test_the_smoothed_training_curve_does_not_lag_above_the_held_out_points():
    # training and held-out losses on the same falling curve, the batches noisy around it
    steps = np.arange(1, 201)
    curve = 1.5 + 2.5 * np.exp(-steps / 40)
    noise = np.random.default_rng(1).normal(0.0, 0.03, len(steps))
    history = TrainHistory(steps=list(steps), train_loss=list(curve + noise),
                           val_steps=[50, 100, 150], val_loss=list(curve[[49, 99, 149]]))
    ax = viz.plot_loss_curves({"LSTM": history}, smooth=40)
    smoothed = ax.get_lines()[1].get_ydata()
    for step in history.val_steps:
        assert abs(smoothed[step - 1] - curve[step - 1]) < 0.04  # the curvature's share
    trailing = np.convolve(history.train_loss, np.ones(41) / 41, mode="valid")  # last 41 steps
    assert trailing[50 - 41] - curve[49] > 0.3  # what a past-only average would have drawn


def test_plot_similarity_matrix_annotates_every_cell():
    matrix = torch.tensor([[1.0, 0.25], [0.25, 1.0]])
    ax = viz.plot_similarity_matrix(matrix, ["first", "second"], title="cos")
    assert [t.get_text() for t in ax.texts] == ["1.00", "0.25", "0.25", "1.00"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1. first", "2. second"]
    assert ax.images[0].get_clim() == (-1.0, 1.0)
    assert ax.get_title() == "cos"
    with pytest.raises(ValueError, match="2 x 2"):
        viz.plot_similarity_matrix(torch.ones(3, 3), ["a", "b"])


def tiny_char_lm(cell="lstm"):
    tokenizer = CharTokenizer().fit("abc d\n")
    torch.manual_seed(0)
    return RNNLM(tokenizer.vocab_size, 4, 6, cell=cell), tokenizer


def test_rnn_lm_states_match_the_model():
    model, tokenizer = tiny_char_lm()
    ids = tokenizer.encode("abca")
    states, probs = viz.rnn_lm_states(model, ids)
    assert sorted(states) == ["c", "f", "g", "h", "i", "o"]
    assert states["h"].shape == (4, 6)
    assert probs.shape == (4, tokenizer.vocab_size)
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    with torch.no_grad():
        out, _ = model.rnn(model.embed(torch.tensor([ids])))
        expected = torch.softmax(model(torch.tensor([ids])), -1)[0]
    assert np.allclose(states["h"], out[0].numpy(), atol=1e-6)
    assert np.allclose(probs, expected.numpy(), atol=1e-6)
    elman, _ = tiny_char_lm("rnn")
    assert sorted(viz.rnn_lm_states(elman, ids)[0]) == ["h"]


def test_rnn_state_explorer_redraws_when_each_control_changes():
    model, tokenizer = tiny_char_lm()
    explorer = viz.rnn_state_explorer(model, tokenizer, text="abcab", n_units=4, top=3)
    assert explorer.step.max == 4 and explorer.step.value == 4  # starts at the last character
    assert list(explorer.quantity.options) == ["h", "c", "i", "f", "g", "o"]
    assert bytes(explorer.image.value).startswith(b"\x89PNG")

    def state():
        heatmap, bars = explorer.figure.axes[0], explorer.figure.axes[1]
        return (heatmap.get_title(), heatmap.get_ylabel(), [t.get_text() for t in
                bars.get_yticklabels()], bytes(explorer.image.value))

    before = state()
    assert "step 4: 'b'" in before[0]
    assert len(before[2]) == 3  # top next tokens
    explorer.step.value = 1
    after_step = state()
    assert "step 1: 'b'" in after_step[0] and after_step[3] != before[3]
    assert "'ab'" in explorer.figure.axes[1].get_title()
    explorer.quantity.value = "f"
    assert state()[1].startswith("f:")
    explorer.text.value = "dd"
    assert explorer.tokens == ["d", "d"]
    assert explorer.step.max == 1 and explorer.step.value == 1
    assert "step 1: 'd'" in state()[0]
    assert len(explorer.figure.axes) == 3  # heatmap, its colour bar and the bars; never stacked


def test_rnn_state_explorer_redraws_once_per_new_text(monkeypatch):
    model, tokenizer = tiny_char_lm()
    explorer = viz.rnn_state_explorer(model, tokenizer, text="abcab")
    explorer.step.value = 2
    calls = []
    original = viz.RNNStateExplorer.redraw
    monkeypatch.setattr(viz.RNNStateExplorer, "redraw",
                        lambda self: calls.append(self.step.value) or original(self))
    explorer.text.value = "ab"  # the slider moves from 2 to the new last step, 1
    assert calls == [1]


def test_rnn_state_explorer_selects_the_most_varying_units():
    model, tokenizer = tiny_char_lm()
    explorer = viz.rnn_state_explorer(model, tokenizer, text="abcabd", n_units=2)
    spread = explorer.states["h"].std(axis=0)
    assert explorer.units() == sorted(np.argsort(-spread)[:2].tolist())
    heatmap = explorer.figure.axes[0]
    assert heatmap.images[0].get_array().shape == (2, 6)


def test_rnn_state_explorer_reports_unknown_characters_and_empty_text():
    model, tokenizer = tiny_char_lm()
    explorer = viz.rnn_state_explorer(model, tokenizer, text="abzzq")
    assert explorer.tokens == ["a", "b"]
    assert "'q'" in explorer.message.value and "'z'" in explorer.message.value
    explorer.text.value = "zz"
    assert explorer.tokens == [] and explorer.step.max == 0
    assert "type some text" in explorer.figure.axes[0].get_title()


def test_rnn_state_explorer_for_an_elman_model_and_bad_arguments():
    model, tokenizer = tiny_char_lm("rnn")
    explorer = viz.rnn_state_explorer(model, tokenizer, text="ab")
    assert list(explorer.quantity.options) == ["h"]
    with pytest.raises(ValueError, match="quantity"):
        viz.rnn_state_explorer(model, tokenizer, text="ab", quantity="c")
    with pytest.raises(ValueError, match="positive"):
        viz.rnn_state_explorer(model, tokenizer, n_units=0)


# ------------------------------------------------------------------------ chapter 3

import math  # noqa: E402


def test_markdown_table_writes_a_github_table():
    table = viz.markdown_table(["token", "weight $a_s$"], [["A", "0.175"], ["B|C", 0.5]],
                               align="lr")
    assert table.data.splitlines() == [
        "| token | weight $a_s$ |",
        "|:--|--:|",
        "| A | 0.175 |",
        "| B\\|C | 0.5 |",  # a pipe inside a cell must not split it
    ]
    assert viz.markdown_table(["a", "b", "c"], []).data.splitlines()[1] == "|--:|--:|--:|"
    assert viz.markdown_table(["a"], [["x"]], align="c").data.splitlines()[1] == "|:-:|"


def test_markdown_table_rejects_ragged_rows_and_bad_alignment():
    with pytest.raises(ValueError, match="row 1 has 1 cells for 2 columns"):
        viz.markdown_table(["a", "b"], [["1", "2"], ["3"]])
    with pytest.raises(ValueError, match="align"):
        viz.markdown_table(["a", "b"], [], align="l")
    with pytest.raises(ValueError, match="align"):
        viz.markdown_table(["a", "b"], [], align="lx")


def test_plot_accuracy_by_length_draws_one_line_per_model_with_counts_in_the_ticks():
    ax = viz.plot_accuracy_by_length(["8-9", "10-13"], {"none": [0.5, 0.25], "attn": [1.0, 1.0]},
                                     counts=[3, 7], title="dates")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(lines) == ["attn", "none"]
    assert list(lines["none"].get_ydata()) == [0.5, 0.25]
    assert list(lines["none"].get_xdata()) == [0, 1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8-9\n(n=3)", "10-13\n(n=7)"]
    assert ax.get_ylim()[0] < 0 < 1 < ax.get_ylim()[1]
    assert ax.get_title() == "dates"
    plain = viz.plot_accuracy_by_length(["a", "b"], {"m": [1.0, 0.0]})
    assert [t.get_text() for t in plain.get_xticklabels()] == ["a", "b"]


def test_plot_accuracy_by_length_checks_lengths():
    with pytest.raises(ValueError, match="1 values for 2 buckets"):
        viz.plot_accuracy_by_length(["a", "b"], {"m": [1.0]})
    with pytest.raises(ValueError, match="1 counts for 2 buckets"):
        viz.plot_accuracy_by_length(["a", "b"], {"m": [1.0, 0.5]}, counts=[4])


def test_plot_score_spread_draws_spreads_and_peaks_in_matching_colours():
    dims = [2, 8, 32]
    spreads = {"dot": [1.4, 2.8, 5.7], "scaled dot": [1.0, 1.0, 1.0]}
    peaks = {"dot": [0.3, 0.5, 0.8], "scaled dot": [0.2, 0.2, 0.2]}
    fig = viz.plot_score_spread(dims, spreads, peaks, title="scores")
    left, right = fig.axes
    assert left.get_yscale() == "log" and left.get_xscale() == "log"
    assert right.get_yscale() == "linear" and right.get_ylim() == (0.0, 1.02)
    by_label = {line.get_label(): line for line in left.get_lines()}
    assert list(by_label["dot"].get_ydata()) == spreads["dot"]
    assert list(by_label["dot"].get_xdata()) == dims
    right_lines = {line.get_label(): line for line in right.get_lines()}
    assert list(right_lines["scaled dot"].get_ydata()) == peaks["scaled dot"]
    assert right_lines["dot"].get_color() == by_label["dot"].get_color()
    assert fig._suptitle.get_text() == "scores"
    assert len(viz.plot_score_spread(dims, spreads).axes) == 1
    with pytest.raises(ValueError, match="2 values for 3 widths"):
        viz.plot_score_spread(dims, {"dot": [1.0, 2.0]})


def test_plot_source_gradients_numbers_positions_from_one_and_skips_zeros():
    ax = viz.plot_source_gradients({"none": [1e-3, 1e-6, 0.0], "attn": torch.tensor([1e-4] * 3)})
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["attn"].get_xdata()) == [1, 2, 3]
    y = np.asarray(lines["none"].get_ydata(), dtype=float)
    assert y[:2].tolist() == [1e-3, 1e-6] and np.isnan(y[2])
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3"]
    assert ax.get_xlabel() == "source position"
    labelled = viz.plot_source_gradients({"m": [1.0, 2.0]}, tokens=["a", " "])
    assert [t.get_text() for t in labelled.get_xticklabels()] == ["a", "\u2423"]
    assert labelled.get_xlabel() == "source token"


def test_plot_attention_draws_the_weights_as_target_by_source():
    weights = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.5, 0.5]])
    ax = viz.plot_attention(weights, list("a b"), ["x", "</s>"], title="a b")
    image = ax.images[0]
    assert np.allclose(image.get_array(), weights.numpy())
    assert image.get_clim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "\u2423", "b"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "</s>"]
    assert ax.get_title() == "a b"
    with pytest.raises(ValueError, match="2 x 2 weights"):
        viz.plot_attention(weights, list("ab"), ["x", "y"])


def test_plot_alignments_draws_one_titled_panel_per_example():
    examples = [(np.eye(2), list("ab"), list("xy")),
                (np.full((1, 3), 1 / 3), list("cde"), ["z"]),
                (np.ones((1, 1)), ["f"], ["w"])]
    fig = viz.plot_alignments(examples, ncols=2, title="where")
    assert len(fig.axes) == 3  # the fourth cell of the 2 x 2 grid is removed
    assert [ax.get_title() for ax in fig.axes] == ["ab", "cde", "f"]
    assert np.allclose(fig.axes[1].images[0].get_array(), examples[1][0])
    assert fig._suptitle.get_text() == "where"
    with pytest.raises(ValueError, match="at least one"):
        viz.plot_alignments([])


def test_ab_attention_reproduces_the_lecture_example_exactly():
    keys, weights, output = viz.ab_attention(4, 2, 1.0)
    assert keys.tolist() == [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
    e = math.e
    assert torch.allclose(weights, torch.tensor([1, 1, e, 1], dtype=torch.float64) / (3 + e))
    assert torch.allclose(output, torch.tensor([3 / (3 + e), e / (3 + e)], dtype=torch.float64))
    _, sharp, near_b = viz.ab_attention(4, 2, 10.0)
    assert sharp[2] == pytest.approx(math.exp(10) / (3 + math.exp(10)))
    assert near_b[1] > 0.999
    _, uniform, all_a = viz.ab_attention(5, None, 10.0)
    assert torch.allclose(uniform, torch.full((5,), 0.2, dtype=torch.float64))
    assert all_a.tolist() == [1.0, 0.0]


def test_ab_attention_rejects_impossible_sequences():
    with pytest.raises(ValueError, match="n_keys"):
        viz.ab_attention(0, None, 1.0)
    with pytest.raises(ValueError, match="b_position"):
        viz.ab_attention(3, 3, 1.0)


def test_attention_lookup_explorer_starts_on_the_lecture_example():
    explorer = viz.attention_lookup_explorer()
    assert (explorer.n_keys.value, explorer.b_position.value, explorer.scale.value) == (4, 2, 1.0)
    assert explorer.b_position.max == 3
    assert bytes(explorer.image.value).startswith(b"\x89PNG")
    bars_ax, plane_ax = explorer.figure.axes
    assert [p.get_height() for p in bars_ax.patches] == pytest.approx(explorer.weights.tolist())
    assert [t.get_text() for t in bars_ax.get_xticklabels()] == ["A", "A", "B", "A"]
    assert [t.get_text() for t in bars_ax.texts] == ["0.175", "0.175", "0.475", "0.175"]
    legend = [t.get_text() for t in plane_ax.get_legend().get_texts()]
    assert legend == ["ideal answer", "average (DAN) [0.750, 0.250]", "attention [0.525, 0.475]"]
    assert "0.475" in explorer.message.value


def test_attention_lookup_explorer_redraws_when_each_control_changes():
    explorer = viz.attention_lookup_explorer()
    before = bytes(explorer.image.value)
    explorer.scale.value = 10.0
    assert explorer.weights[2] > 0.999
    assert "[0, 10]" in explorer.figure.axes[0].get_title()
    assert bytes(explorer.image.value) != before
    explorer.b_position.value = 0
    assert explorer.weights.argmax().item() == 0
    assert [t.get_text() for t in explorer.figure.axes[0].get_xticklabels()][0] == "B"
    explorer.has_b.value = False
    assert torch.allclose(explorer.weights, torch.full((4,), 0.25, dtype=torch.float64))
    assert "no B" in explorer.message.value
    explorer.n_keys.value = 20
    assert len(explorer.figure.axes[0].patches) == 20
    assert len(explorer.figure.axes[0].texts) == 0  # too many bars to label each
    assert len(explorer.figure.axes) == 2  # redraw replaces the panels, never stacks them


def test_attention_lookup_explorer_moves_the_b_into_a_shorter_sequence_with_one_redraw(
        monkeypatch):
    explorer = viz.attention_lookup_explorer(n_keys=8, b_position=7, scale=2.0)
    calls = []
    original = viz.AttentionLookupExplorer.redraw
    monkeypatch.setattr(viz.AttentionLookupExplorer, "redraw",
                        lambda self: calls.append(self.b_position.value) or original(self))
    explorer.n_keys.value = 3
    assert explorer.b_position.value == 2 and explorer.b_position.max == 2
    assert calls == [2]
    assert explorer.key_vectors[2].tolist() == [0.0, 1.0]


def test_attention_lookup_explorer_rejects_bad_starting_values():
    with pytest.raises(ValueError, match="n_keys"):
        viz.attention_lookup_explorer(n_keys=0)
    with pytest.raises(ValueError, match="b_position"):
        viz.attention_lookup_explorer(n_keys=3, b_position=3)


# ------------------------------------------------------------------------ chapter 4

NEG_INF = float("-inf")


def cell_texts(ax):
    return [t.get_text() for t in ax.texts]



def test_the_one_heatmap_scales_masks_and_writes_its_cells():
    ax = viz.common.new_figure(2.0, 2.0).subplots()
    matrix = np.array([[0.5, NEG_INF], [-2.0, 0.0]])
    image = viz.common.heatmap(ax, matrix, cells="{:.1f}")
    assert image.get_clim() == (-2.0, 2.0)  # symmetric around 0, over the finite values
    assert image.get_array().mask.tolist() == [[False, True], [False, False]]
    assert [t.get_text() for t in ax.texts] == ["0.5", "\u2212\u221e", "-2.0", "0.0"]
    colours = [t.get_color() for t in ax.texts]
    assert colours == ["black", "black", "white", "black"]  # white only on the dark blue
    grey = viz.common.new_figure(2.0, 1.0).subplots()
    viz.common.heatmap(grey, np.array([[0.0, 1.0]]), limits=(0.0, 1.0), cmap="Greys",
                       cells=lambda v: "zero" if v == 0 else f"{v:g}")
    assert [(t.get_text(), t.get_color()) for t in grey.texts] == [("zero", "black"),
                                                                   ("1", "white")]

def test_plot_attention_matrices_draws_scores_then_weights_with_masked_cells():
    scores = torch.tensor([[0.5, NEG_INF], [-2.0, 1.0]])
    weights = torch.tensor([[1.0, 0.0], [0.047, 0.953]])
    fig = viz.plot_attention_matrices(["I", "sleep"], scores={"scores": scores},
                                      weights={"weights": weights}, title="head")
    assert len(fig.axes) == 4  # two panels, each with its colour bar
    score_ax, weight_ax = fig.axes[0], fig.axes[1]
    assert [score_ax.get_title(), weight_ax.get_title()] == ["scores", "weights"]
    assert fig._suptitle.get_text() == "head"
    drawn = score_ax.images[0].get_array()
    assert drawn.mask.tolist() == [[False, True], [False, False]]  # -inf is masked, grey
    assert score_ax.images[0].get_clim() == (-2.0, 2.0)  # symmetric around 0
    assert cell_texts(score_ax) == ["0.50", "\u2212\u221e", "-2.00", "1.00"]
    assert weight_ax.images[0].get_clim() == (0.0, 1.0)
    assert cell_texts(weight_ax) == ["1.00", "0", "0.05", "0.95"]  # exact zeros: "0"
    assert [t.get_text() for t in weight_ax.get_yticklabels()] == ["I", "sleep"]
    assert [t.get_text() for t in weight_ax.get_xticklabels()] == ["I", "sleep"]
    bare = viz.plot_attention_matrices(["a"], weights={"w": np.ones((1, 1))}, annotate=False)
    assert len(bare.axes) == 2 and len(bare.axes[0].texts) == 0


def test_plot_attention_matrices_rejects_missing_and_misshapen_matrices():
    with pytest.raises(ValueError, match="at least one"):
        viz.plot_attention_matrices(["a", "b"])
    with pytest.raises(ValueError, match="expected 2 x 2 for 2 tokens"):
        viz.plot_attention_matrices(["a", "b"], weights={"w": np.ones((2, 3))})


def test_plot_against_width_draws_panels_with_shared_colours_and_references():
    dims = [1, 4, 16]
    fig = viz.plot_against_width(
        dims,
        {"variance": {"raw": [1.0, 4.0, 16.0], "scaled": [1.0, 1.0, 1.0], "d_k": dims},
         "largest": {"scaled": [0.2, 0.2, 0.2], "raw": [0.2, 0.5, 0.0]},
         "gradient": {"raw": [0.3, 0.1, 0.0]}},
        log_y=["variance", "gradient"], references=["d_k"], ncols=2, title="scaling",
    )
    assert len(fig.axes) == 3  # the fourth cell of the 2 x 2 grid is removed
    variance, largest, gradient = fig.axes
    assert [ax.get_ylabel() for ax in fig.axes] == ["variance", "largest", "gradient"]
    assert variance.get_yscale() == "log" and largest.get_yscale() == "linear"
    assert all(ax.get_xscale() == "log" for ax in fig.axes)
    lines = {line.get_label(): line for line in variance.get_lines()}
    assert list(lines["raw"].get_ydata()) == [1.0, 4.0, 16.0]
    assert lines["d_k"].get_linestyle() == "--" and lines["d_k"].get_marker() == "None"
    other = {line.get_label(): line for line in largest.get_lines()}
    assert other["raw"].get_color() == lines["raw"].get_color()  # same label, same colour
    assert other["scaled"].get_color() == lines["scaled"].get_color()
    assert other["raw"].get_ydata()[2] == 0.0  # kept on a linear axis
    assert np.isnan(gradient.get_lines()[0].get_ydata()[2])  # left out on a log axis
    assert fig._suptitle.get_text() == "scaling"


def test_plot_against_width_checks_its_input():
    with pytest.raises(ValueError, match="at least one panel"):
        viz.plot_against_width([1, 2], {})
    with pytest.raises(ValueError, match="1 values for 2 widths"):
        viz.plot_against_width([1, 2], {"p": {"c": [1.0]}})
    with pytest.raises(ValueError, match="do not exist"):
        viz.plot_against_width([1, 2], {"p": {"c": [1.0, 2.0]}}, log_y=["q"])


def test_plot_timings_draws_log_log_curves_and_slope_guides_through_the_last_point():
    times = {"attention": [1e-3, 2e-3, 8e-3, 3.2e-2], "lstm": [1e-2, 2e-2, 4e-2, None]}
    ax = viz.plot_timings([16, 32, 64, 128], times, slopes={1: "lstm", 2: "attention"},
                          title="cost")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert np.isnan(lines["lstm"].get_ydata()[3])  # not measured at n = 128
    linear, square = lines["$\\propto n$"], lines["$\\propto n^2$"]
    assert np.allclose(linear.get_ydata(), [1e-2, 2e-2, 4e-2, 8e-2])  # through (64, 0.04)
    assert np.allclose(square.get_ydata(), [5e-4, 2e-3, 8e-3, 3.2e-2])  # through (128, 0.032)
    assert linear.get_linestyle() != square.get_linestyle()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "64", "128"]
    assert ax.get_title() == "cost"


def test_plot_timings_checks_its_input():
    with pytest.raises(ValueError, match="1 values for 2 lengths"):
        viz.plot_timings([1, 2], {"a": [1.0]})
    with pytest.raises(ValueError, match="unknown curve"):
        viz.plot_timings([1, 2], {"a": [1.0, 2.0]}, slopes={2: "b"})


def test_word_vectors_give_a_word_the_same_vector_in_every_sentence():
    first = viz.word_vectors("I want to sleep".split(), 8)
    second = viz.word_vectors("Sleep to I want".split(), 8)
    assert first.shape == (4, 8) and first.dtype == torch.float32
    assert torch.equal(second, first[[3, 2, 0, 1]])  # "Sleep" is "sleep"
    assert torch.equal(viz.word_vectors(["to", "to"], 8)[0], first[2])
    assert not torch.equal(viz.word_vectors(["I"], 8, seed=1)[0], first[0])
    assert not torch.allclose(first[0], first[1])
    assert viz.word_vectors([], 3).shape == (0, 3)


def test_random_self_attention_scales_and_masks_as_the_formula_says():
    words = "the cat sat on the mat".split()
    scores, weights = viz.random_self_attention(words, 64)
    assert scores.shape == weights.shape == (6, 6)
    assert torch.allclose(weights, scores.softmax(dim=-1))
    assert torch.allclose(weights.sum(dim=-1), torch.ones(6))
    assert torch.equal(weights[0], weights[4])  # the two "the" are the same query
    raw, raw_weights = viz.random_self_attention(words, 64, scaled=False)
    assert torch.allclose(raw, scores * 8.0, atol=1e-5)  # sqrt(64) = 8
    assert torch.allclose(raw_weights, raw.softmax(dim=-1), atol=1e-6)
    assert raw_weights.max(dim=-1).values.mean() > weights.max(dim=-1).values.mean()
    masked, masked_weights = viz.random_self_attention(words, 64, causal=True)
    above = ~torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.isinf(masked[above]).all() and (masked[above] < 0).all()
    assert torch.equal(masked[~above], scores[~above])
    assert (masked_weights[above] == 0).all()
    assert torch.allclose(masked_weights.sum(dim=-1), torch.ones(6))


def test_random_self_attention_is_permutation_equivariant_and_seeded():
    words = "I want to sleep".split()
    order = [3, 2, 0, 1]  # "sleep to I want"
    _, weights = viz.random_self_attention(words, 16)
    _, shuffled = viz.random_self_attention([words[i] for i in order], 16)
    assert torch.allclose(shuffled, weights[order][:, order])
    _, other_seed = viz.random_self_attention(words, 16, seed=1)
    assert not torch.allclose(other_seed, weights)


def test_random_self_attention_has_unit_variance_scores_when_scaled():
    words = [f"w{i}" for i in range(60)]
    for d_k in (4, 256):
        scores, _ = viz.random_self_attention(words, d_k, d_model=64)
        raw, _ = viz.random_self_attention(words, d_k, scaled=False, d_model=64)
        assert 0.5 < scores.var().item() < 2.0
        assert 0.5 * d_k < raw.var().item() < 2.0 * d_k


def test_random_self_attention_rejects_empty_sentences_and_bad_widths():
    with pytest.raises(ValueError, match="at least one word"):
        viz.random_self_attention([], 4)
    with pytest.raises(ValueError, match="positive"):
        viz.random_self_attention(["a"], 0)


def test_self_attention_explorer_starts_scaled_without_a_mask():
    explorer = viz.self_attention_explorer()
    assert explorer.words == "the cat sat on the mat".split()
    assert (explorer.d_k.value, explorer.scaled.value, explorer.causal.value) == (16, True, False)
    assert bytes(explorer.image.value).startswith(b"\x89PNG")
    scores, weights = viz.random_self_attention(explorer.words, 16)
    assert torch.equal(explorer.scores, scores) and torch.equal(explorer.weights, weights)
    score_ax, weight_ax = explorer.figure.axes[0], explorer.figure.axes[1]
    assert "sqrt(d_k)" in score_ax.get_title()
    assert len(weight_ax.texts) == 36
    assert f"{weights.max(dim=-1).values.mean():.3f}" in explorer.message.value


def test_self_attention_explorer_redraws_when_each_control_changes():
    explorer = viz.self_attention_explorer()
    before = bytes(explorer.image.value)
    explorer.scaled.value = False
    assert "not divided" in explorer.figure.axes[0].get_title()
    assert bytes(explorer.image.value) != before
    explorer.d_k.value = 256
    assert explorer.weights.max(dim=-1).values.mean() > 0.9  # saturated
    explorer.causal.value = True
    assert (explorer.weights.triu(diagonal=1) == 0).all()
    assert "\u2212\u221e" in cell_texts(explorer.figure.axes[0])
    assert "causal" in explorer.figure._suptitle.get_text()
    explorer.text.value = "Sleep to I want"
    assert explorer.words == ["Sleep", "to", "I", "want"]
    assert explorer.weights.shape == (4, 4)
    assert len(explorer.figure.axes) == 4  # redraw replaces the panels, never stacks them
    explorer.text.value = "   "
    assert explorer.words == [] and explorer.figure.axes[0].get_title() == "type a sentence"
    assert explorer.message.value == ""


def test_self_attention_explorer_leaves_long_sentences_unannotated_and_rejects_bad_d_k():
    explorer = viz.self_attention_explorer(text=" ".join(["word"] * 11))
    assert len(explorer.figure.axes[1].texts) == 0
    with pytest.raises(ValueError, match="d_k must be one of"):
        viz.self_attention_explorer(d_k=3)


# ------------------------------------------------------------------------ chapter 5

from coursepkg.multihead import split_heads  # noqa: E402


def panel_numbers(ax):
    return [int(t.get_text()) for t in ax.texts]


def panel_colours(ax):
    return ax.images[0].get_array()[..., :3]  # (rows, cols, RGB)


def test_plot_head_split_shows_split_heads_and_the_wrong_reshape():
    fig = viz.plot_head_split(4, 6, 3, title="split")
    assert len(fig.axes) == 8  # x and 3 heads; a note and 3 wrong "heads"
    x_ax, *head_axes = fig.axes[:4]
    note, *wrong_axes = fig.axes[4:]
    assert panel_numbers(x_ax) == list(range(24))
    heads = split_heads(torch.arange(24).view(1, 4, 6), 3)[0]  # (H, T, Dh)
    for h, ax in enumerate(head_axes):
        assert panel_numbers(ax) == heads[h].flatten().tolist()
        assert f"head {h + 1}" in ax.get_title() and "(4, 2)" in ax.get_title()
        colours = panel_colours(ax)
        assert np.allclose(colours, colours[0, 0])  # one head, one colour
    assert panel_numbers(head_axes[0]) == [0, 1, 6, 7, 12, 13, 18, 19]
    # the same colour for head 2's columns in x and in head 2's panel
    assert np.allclose(panel_colours(x_ax)[0, 2], panel_colours(head_axes[1])[0, 0])
    assert not np.allclose(panel_colours(head_axes[0])[0, 0], panel_colours(head_axes[1])[0, 0])
    assert not note.axison and "without the transpose" in note.texts[0].get_text()
    assert panel_numbers(wrong_axes[0]) == list(range(8))  # the first 8 numbers, rows 0 and 1
    wrong = panel_colours(wrong_axes[0])
    assert not np.allclose(wrong[0, 0], wrong[1, 0])  # heads mixed in one "head"
    assert np.allclose(wrong[1, 0], panel_colours(head_axes[1])[0, 0])  # 2, 3 belong to head 2
    assert fig._suptitle.get_text() == "split"
    assert len(viz.plot_head_split(2, 4, 2, wrong=False).axes) == 3


def test_plot_head_split_rejects_impossible_sizes():
    with pytest.raises(ValueError, match="not divisible"):
        viz.plot_head_split(4, 6, 4)
    with pytest.raises(ValueError, match="positive"):
        viz.plot_head_split(0, 6, 3)


def _maps(T: int, H: int, seed: int) -> torch.Tensor:
    return torch.rand(H, T, T, generator=torch.Generator().manual_seed(seed)).softmax(dim=-1)


def test_plot_head_maps_draws_one_panel_per_head_with_a_shared_colour_bar():
    tokens = ["a", "*b", "c"]
    weights = _maps(3, 2, 0)
    fig = viz.plot_head_maps(tokens, weights[None], title="maps")  # (1, H, T, T) is accepted
    assert len(fig.axes) == 3  # two heads and one colour bar
    assert [ax.get_title() for ax in fig.axes[:2]] == ["head 1", "head 2"]
    for h in range(2):
        assert np.allclose(fig.axes[h].images[0].get_array(), weights[h].numpy())
        assert fig.axes[h].images[0].get_clim() == (0.0, 1.0)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == tokens
    assert fig.axes[2].get_ylabel() == "attention weight"
    assert fig._suptitle.get_text() == "maps"
    layers = [weights, _maps(3, 2, 1)]
    grid = viz.plot_head_maps(tokens, layers, annotate=False)
    assert [ax.get_title() for ax in grid.axes[:4]] == [
        "layer 1, head 1", "layer 1, head 2", "layer 2, head 1", "layer 2, head 2"]
    assert np.allclose(grid.axes[2].images[0].get_array(), layers[1][0].numpy())
    assert len(grid.axes[0].texts) == 0
    chosen = viz.plot_head_maps(tokens, layers, heads=[1], layer_names=["first", "second"])
    assert [ax.get_title() for ax in chosen.axes[:2]] == ["first, head 2", "second, head 2"]
    assert len(chosen.axes) == 3


def test_plot_head_maps_checks_its_input():
    with pytest.raises(ValueError, match="at least one layer"):
        viz.plot_head_maps(["a"], [])
    with pytest.raises(ValueError, match="layer 2 has 3 heads"):
        viz.plot_head_maps(["a", "b"], [_maps(2, 2, 0), _maps(2, 3, 0)])
    with pytest.raises(ValueError, match="expected 3 x 3 maps"):
        viz.plot_head_maps(["a", "b", "c"], _maps(2, 2, 0))
    with pytest.raises(ValueError, match="heads must be among 0 ... 1"):
        viz.plot_head_maps(["a", "b"], _maps(2, 2, 0), heads=[2])
    with pytest.raises(ValueError, match="2 layer names for 1 layers"):
        viz.plot_head_maps(["a", "b"], _maps(2, 2, 0), layer_names=["x", "y"])
    with pytest.raises(ValueError, match=r"\(H, T, T\)"):
        viz.plot_head_maps(["a", "b"], torch.ones(2, 2))


def fake_maps(text):
    """Two layers of two heads over the characters of text: layer 1 looks at the previous
    character (head 1; the first looks at itself) and spreads evenly (head 2); layer 2 looks at
    itself (head 1) and at the last character (head 2)."""
    if not text or "!" in text:
        raise ValueError("no characters, or a '!'")
    T = len(text)
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    last = torch.zeros(T, T)
    last[:, -1] = 1.0
    return list(text), [torch.stack([previous, torch.full((T, T), 1 / T)]),
                        torch.stack([torch.eye(T), last])]


def test_multihead_explorer_starts_with_every_head_of_the_chosen_layer():
    explorer = viz.multihead_explorer(fake_maps, text="abcde")
    assert (explorer.n_layers, explorer.n_heads) == (2, 2)
    assert explorer.layer.options == (1, 2) and explorer.head.options == ("all", 1, 2)
    assert (explorer.layer.value, explorer.head.value) == (1, "all")
    assert explorer.tokens == list("abcde")
    assert bytes(explorer.image.value).startswith(b"\x89PNG")
    assert len(explorer.figure.axes) == 3  # two heads and a colour bar
    assert [ax.get_title() for ax in explorer.figure.axes[:2]] == [
        "layer 1, head 1", "layer 1, head 2"]
    assert np.allclose(explorer.figure.axes[0].images[0].get_array(),
                       fake_maps("abcde")[1][0][0].numpy())
    lines = explorer.message.value.split("<br>")
    assert lines[0] == ("layer 1, head 1: on the previous token 1.000, on itself 0.200, "
                        "most on 'a' (key 1, 0.400)")
    assert lines[1].startswith("layer 1, head 2: on the previous token 0.200, on itself 0.200")


def test_multihead_explorer_redraws_when_each_control_changes():
    explorer = viz.multihead_explorer(fake_maps, text="abcde")
    before = bytes(explorer.image.value)
    explorer.layer.value = 2
    assert [ax.get_title() for ax in explorer.figure.axes[:2]] == [
        "layer 2, head 1", "layer 2, head 2"]
    assert "on itself 1.000" in explorer.message.value
    assert bytes(explorer.image.value) != before
    explorer.head.value = 2
    assert len(explorer.figure.axes) == 2  # one head and its colour bar: never stacked
    assert explorer.figure.axes[0].get_title() == "layer 2, head 2"
    assert explorer.message.value == ("layer 2, head 2: on the previous token 0.000, on itself "
                                      "0.200, most on 'e' (key 5, 1.000)")
    explorer.text.value = "xyz"
    assert explorer.tokens == list("xyz")
    assert explorer.figure.axes[0].images[0].get_array().shape == (3, 3)
    assert explorer.message.value.endswith("most on 'z' (key 3, 1.000)")


def test_multihead_explorer_shows_why_an_input_cannot_be_read():
    explorer = viz.multihead_explorer(fake_maps, text="abc", layer=2, head=1)
    explorer.text.value = "a!b"
    assert explorer.tokens == [] and explorer.weights == []
    assert len(explorer.figure.axes) == 1
    assert explorer.figure.axes[0].get_title() == "cannot read this input"
    assert explorer.message.value == "<b>cannot read this input:</b> no characters, or a '!'"
    explorer.text.value = "abcd"
    assert explorer.tokens == list("abcd")  # readable again
    assert explorer.figure.axes[0].get_title() == "layer 2, head 1"


def test_multihead_explorer_escapes_markup_in_messages():
    def maps(text):
        if text.startswith("bad"):
            raise ValueError(f"cannot read <{text}>")
        return fake_maps(text)

    explorer = viz.multihead_explorer(maps, text="ab<", layer=2, head=2)
    assert explorer.message.value.endswith("most on '&lt;' (key 3, 1.000)")
    explorer.text.value = "bad<i>"
    assert explorer.message.value.endswith("cannot read &lt;bad&lt;i&gt;&gt;")


def test_multihead_explorer_rejects_bad_starting_values():
    with pytest.raises(ValueError, match="no characters"):
        viz.multihead_explorer(fake_maps, text="")
    with pytest.raises(ValueError, match="layer must be in 1 ... 2"):
        viz.multihead_explorer(fake_maps, text="ab", layer=3)
    with pytest.raises(ValueError, match="head must be 'all' or in 1 ... 2"):
        viz.multihead_explorer(fake_maps, text="ab", head=0)
    with pytest.raises(ValueError, match="at least one layer"):
        viz.multihead_explorer(lambda text: (list(text), []), text="ab")


# ------------------------------------------------------------------------ chapter 6

from matplotlib.figure import Figure  # noqa: E402

from coursepkg.positional import apply_rope, sinusoidal_encoding  # noqa: E402


def test_plot_position_table_draws_the_table_on_a_symmetric_scale():
    table = sinusoidal_encoding(10, 6)
    ax = viz.plot_position_table(table, title="table")
    assert np.allclose(ax.images[0].get_array(), table.numpy())
    assert ax.images[0].get_clim() == pytest.approx((-1.0, 1.0))  # cos(0) = 1 is the largest
    assert len(ax.figure.axes) == 2  # the table and its colour bar
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("table", "dimension",
                                                                    "position p")
    lopsided = viz.plot_position_table(np.array([[0.5, -2.0], [0.0, 1.0]]))
    assert lopsided.images[0].get_clim() == pytest.approx((-2.0, 2.0))
    fig = Figure()
    ax = fig.subplots()
    assert viz.plot_position_table(table, ax) is ax


def test_plot_position_table_rejects_what_is_not_a_table():
    for bad in (np.ones(3), np.ones((0, 4)), torch.ones(2, 2, 2)):
        with pytest.raises(ValueError, match="non-empty 2-D table"):
            viz.plot_position_table(bad)


def test_plot_against_offset_draws_every_curve_in_its_own_style_and_a_line_at_zero():
    ax = viz.plot_against_offset([-1, 0, 1], {"a": [1.0, 2.0, 3.0], "b": [3.0, 2.0, 1.0]},
                                 title="dots", ylabel="dot product")
    a, b, zero = ax.lines
    assert list(a.get_ydata()) == [1.0, 2.0, 3.0] and list(b.get_xdata()) == [-1.0, 0.0, 1.0]
    assert a.get_linestyle() != b.get_linestyle()  # coinciding curves stay visible
    assert list(zero.get_xdata()) == [0.0, 0.0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("dots", "offset k",
                                                                    "dot product")
    assert len(viz.plot_against_offset([1, 2], {"a": [0.0, 1.0]}).lines) == 1  # no 0: no line


def test_plot_against_offset_checks_its_input():
    with pytest.raises(ValueError, match="at least one curve"):
        viz.plot_against_offset([0], {})
    with pytest.raises(ValueError, match="curve 'a' has 2 values for 3 offsets"):
        viz.plot_against_offset([0, 1, 2], {"a": [0.0, 1.0]})


def test_plot_accuracy_by_position_leaves_gaps_and_shades_unseen_positions():
    ax = viz.plot_accuracy_by_position(
        range(5, 9), {"learned": [1.0, 1.0, None, None], "rope": [1.0, 0.9, 0.5, 0.25]},
        trained_length=7, chance=1 / 16, title="echo")
    learned, rope, chance, learned_end = ax.lines
    assert np.array_equal(learned.get_ydata(), [1.0, 1.0, np.nan, np.nan], equal_nan=True)
    assert list(rope.get_ydata()) == [1.0, 0.9, 0.5, 0.25]
    assert list(chance.get_ydata()) == [0.0625, 0.0625]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["learned", "rope",
                                                                   "chance: 0.062"]
    (shade,) = ax.patches
    assert shade.get_x() == pytest.approx(6.5) and shade.get_width() == pytest.approx(2.0)
    assert "\u2265 7" in ax.texts[0].get_text()
    assert ax.get_ylim()[0] < 0 and ax.get_ylim()[1] > 1.05  # room for the label
    plain = viz.plot_accuracy_by_position([0, 1], {"a": [0.5, 0.75]})
    assert len(plain.lines) == 1 and not plain.patches and not plain.texts


def test_plot_accuracy_by_position_marks_the_last_point_of_a_model_that_stops_at_l():
    ax = viz.plot_accuracy_by_position(
        range(5, 9), {"learned": [1.0, 1.0, None, None], "rope": [1.0, 0.9, 0.5, 0.25],
                      "gappy": [0.5, None, 0.5, 0.5]}, trained_length=7)
    learned, _, _, learned_end = ax.lines  # a gap inside a curve is not an end
    assert list(learned_end.get_xdata()) == [6.0] and list(learned_end.get_ydata()) == [1.0]
    assert learned_end.get_marker() == "D" and learned_end.get_markersize() > 3 * 2.5
    assert learned_end.get_color() == learned.get_color() and learned_end.get_zorder() > 2
    note = ax.texts[1]
    assert note.get_text() == "learned: cannot run\nbeyond L = 7" and note.xy == (6.0, 1.0)
    assert len(ax.texts) == 2
    early = viz.plot_accuracy_by_position([0, 1, 2], {"a": [0.5, None, None]}, trained_length=3)
    assert early.texts[1].get_text() == "a: cannot run\nbeyond position 0"


def test_plot_accuracy_by_position_checks_lengths():
    with pytest.raises(ValueError, match="curve 'a' has 1 values for 2 positions"):
        viz.plot_accuracy_by_position([0, 1], {"a": [0.5]})


def _rotated(x, position):
    return apply_rope(x.to(torch.float64)[None], torch.tensor([position]))[0]  # (Dh,)


def _arrows(ax):
    return [np.array(text.xy) for text in ax.texts]  # q at 0, k at 0, q at m, k at n


def test_plot_rope_pairs_draws_every_pair_rotated_and_its_share_of_the_score():
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(6, generator=generator), torch.randn(6, generator=generator)
    fig = viz.plot_rope_pairs(q, k, 4, 1, labels=("dog", "I"))
    assert len(fig.axes) == 3  # one panel per pair
    q_m, k_n = _rotated(q, 4), _rotated(k, 1)
    shares = []
    for i, ax in enumerate(fig.axes):
        q0, k0, qm, kn = _arrows(ax)
        assert np.allclose(q0, q[2 * i:2 * i + 2].numpy(), atol=1e-6)
        assert np.allclose(k0, k[2 * i:2 * i + 2].numpy(), atol=1e-6)
        assert np.allclose(qm, q_m[2 * i:2 * i + 2].numpy(), atol=1e-6)
        assert np.allclose(kn, k_n[2 * i:2 * i + 2].numpy(), atol=1e-6)
        assert f"pair {i}" in ax.get_title()
        shares.append(float(ax.get_xlabel().removeprefix("contribution ")))
    score = (q_m @ k_n).item()
    assert sum(shares) == pytest.approx(score, abs=2e-3)
    assert f"score {score:.3f}" in fig._suptitle.get_text()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "dog, position 0", "I, position 0", "dog at m = 4", "I at n = 1"]
    shifted = viz.plot_rope_pairs(q, k, 9, 6)  # the same offset, 5 positions later
    assert [ax.get_xlabel() for ax in shifted.axes] == [ax.get_xlabel() for ax in fig.axes]
    assert not np.allclose(_arrows(shifted.axes[0])[2], _arrows(fig.axes[0])[2])


def test_plot_rope_pairs_rejects_vectors_that_do_not_pair_up():
    with pytest.raises(ValueError, match="same even width"):
        viz.plot_rope_pairs(torch.ones(3), torch.ones(3), 1, 0)
    with pytest.raises(ValueError, match="same even width"):
        viz.plot_rope_pairs(torch.ones(4), torch.ones(6), 1, 0)
    with pytest.raises(ValueError, match="same even width"):
        viz.plot_rope_pairs(torch.ones(2, 2), torch.ones(2, 2), 1, 0)


def _added_score(explorer, m, n, base=10000.0):
    table = sinusoidal_encoding(explorer.max_position + 1, len(explorer.q), base=base,
                                dtype=torch.float64)
    return ((explorer.q + table[m]) @ (explorer.k + table[n])).item()


def test_rope_explorer_starts_with_the_rotated_pair_and_both_scores():
    explorer = viz.rope_explorer()
    assert (explorer.position.value, explorer.offset.value, explorer.base.value) == (4, 3,
                                                                                     10000.0)
    assert explorer.position.min == 3 and explorer.position.max == 63
    assert explorer.q.shape == (8,) and explorer.q.dtype == torch.float64
    assert explorer.score == pytest.approx((_rotated(explorer.q, 4) @ _rotated(explorer.k, 1))
                                           .item())
    assert explorer.added_score == pytest.approx(_added_score(explorer, 4, 1))
    assert bytes(explorer.image.value).startswith(b"\x89PNG")
    pairs, scores = explorer.figure.axes[:4], explorer.figure.axes[4]
    assert len(explorer.figure.axes) == 5
    assert np.allclose(_arrows(pairs[1])[2], _rotated(explorer.q, 4)[2:4].numpy())
    rope, added, dots = scores.lines
    assert list(rope.get_xdata()) == list(range(3, 64))
    assert np.allclose(rope.get_ydata(), explorer.score)  # flat: the offset is fixed
    assert added.get_ydata()[4 - 3] == pytest.approx(explorer.added_score)
    assert list(dots.get_xdata()) == [4, 4]
    assert explorer.message.value == (
        f"query at m = 4, key at n = 1 (offset 3): RoPE score {explorer.score:.3f}, the same at "
        f"every m for this offset; with the sinusoidal table added instead: "
        f"{explorer.added_score:.3f}")


def test_rope_explorer_keeps_the_score_of_a_fixed_offset_and_redraws_on_every_control():
    explorer = viz.rope_explorer(seed=1)
    score, added, before = explorer.score, explorer.added_score, bytes(explorer.image.value)
    explorer.position.value = 20
    assert explorer.score == pytest.approx(score, abs=1e-9)
    assert explorer.added_score == pytest.approx(_added_score(explorer, 20, 17))
    assert explorer.added_score != pytest.approx(added)
    assert bytes(explorer.image.value) != before
    assert "m = 20" in explorer.figure._suptitle.get_text()
    explorer.offset.value = 4
    assert explorer.score == pytest.approx((_rotated(explorer.q, 20) @ _rotated(explorer.k, 16))
                                           .item())
    assert explorer.score != pytest.approx(score)
    explorer.base.value = 10.0
    q_20 = apply_rope(explorer.q[None], torch.tensor([20]), base=10.0)[0]
    k_16 = apply_rope(explorer.k[None], torch.tensor([16]), base=10.0)[0]
    assert explorer.score == pytest.approx((q_20 @ k_16).item())
    assert "base 10" in explorer.figure._suptitle.get_text()
    assert len(explorer.figure.axes) == 5  # redraw replaces the panels, never stacks them


def test_rope_explorer_moves_the_query_when_the_offset_passes_it_with_one_redraw(monkeypatch):
    explorer = viz.rope_explorer(position=4, offset=3)
    calls = []
    original = viz.RopeExplorer.redraw
    monkeypatch.setattr(viz.RopeExplorer, "redraw",
                        lambda self: calls.append(self.position.value) or original(self))
    explorer.offset.value = 10
    assert explorer.position.value == 10 and explorer.position.min == 10
    assert calls == [10]
    assert "key at n = 0" in explorer.message.value
    explorer.offset.value = 2  # a smaller offset leaves the query where it is
    assert explorer.position.value == 10 and explorer.position.min == 2
    assert "key at n = 8" in explorer.message.value


def test_rope_explorer_uses_given_vectors_and_labels_and_rejects_bad_starting_values():
    q, k = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    explorer = viz.rope_explorer(q, k, labels=("dog", "<I>"), position=2, offset=1)
    assert len(explorer.figure.axes) == 2  # one pair and the scores
    # [cos 2, sin 2] . [-sin 1, cos 1] = sin(2 - 1): the offset alone
    assert explorer.score == pytest.approx(math.sin(1.0))
    assert explorer.message.value.startswith("dog at m = 2, &lt;I&gt; at n = 1")
    with pytest.raises(ValueError, match="same even width"):
        viz.rope_explorer(torch.ones(3), torch.ones(3))
    with pytest.raises(ValueError, match="base must be one of"):
        viz.rope_explorer(base=42.0)
    with pytest.raises(ValueError, match="0 <= offset <= position <= max_position"):
        viz.rope_explorer(position=2, offset=3)
    with pytest.raises(ValueError, match="0 <= offset <= position <= max_position"):
        viz.rope_explorer(position=70, max_position=63)


# ------------------------------------------------------------------------ chapter 7

from types import SimpleNamespace  # noqa: E402

from coursepkg import lm  # noqa: E402


def test_plot_gradients_by_layer_draws_a_panel_per_model_and_a_colour_per_moment():
    norms = {"post-norm": {"step 0": [1.0, 0.5, 0.25], "step 5": [1e-3, 0.0, 1.0]},
             "pre-norm": {"step 5": [2.0, 2.0, 2.0], "step 0": [1.0, 1.0, 1.0]}}
    fig = viz.plot_gradients_by_layer(norms, title="depth")
    post, pre = fig.axes
    assert [ax.get_title() for ax in fig.axes] == ["post-norm", "pre-norm"]
    assert all(ax.get_yscale() == "log" for ax in fig.axes)
    assert post.get_shared_y_axes().joined(post, pre)
    first, fifth = post.lines
    assert list(first.get_xdata()) == [1, 2, 3] and list(first.get_ydata()) == [1.0, 0.5, 0.25]
    assert np.array_equal(fifth.get_ydata(), [1e-3, np.nan, 1.0], equal_nan=True)  # 0: left out
    colours = {ax.get_title(): {line.get_label(): line.get_color() for line in ax.lines}
               for ax in fig.axes}
    assert colours["post-norm"] == colours["pre-norm"]  # a moment keeps its colour
    assert colours["post-norm"]["step 0"] != colours["post-norm"]["step 5"]
    assert [t.get_text() for t in pre.get_legend().get_texts()] == ["step 5", "step 0"]
    assert post.get_ylabel() == "gradient norm (log scale)" and pre.get_ylabel() == ""
    assert fig._suptitle.get_text() == "depth"


def test_plot_gradients_by_layer_checks_its_input():
    with pytest.raises(ValueError, match="at least one model"):
        viz.plot_gradients_by_layer({})
    with pytest.raises(ValueError, match="model 'a' has no curve"):
        viz.plot_gradients_by_layer({"a": {}})
    with pytest.raises(ValueError, match="do not have the same number of layers"):
        viz.plot_gradients_by_layer({"a": {"step 0": [1.0], "step 1": [1.0, 2.0]}})


def _history(steps, seconds, val_steps=(), val_loss=()):
    return SimpleNamespace(steps=list(steps), train_loss=[3.0 - 0.1 * s for s in steps],
                           val_steps=list(val_steps), val_loss=list(val_loss), seconds=seconds)


def test_plot_loss_against_time_draws_each_step_at_its_share_of_the_time():
    slow = _history([1, 2, 3, 4], 8.0, val_steps=[2, 4], val_loss=[2.9, 2.7])
    fast = _history(range(1, 11), 5.0)
    ax = viz.plot_loss_against_time({"slow": slow, "fast": fast}, {"counts": 1.5}, smooth=1,
                                    title="same time")
    train, held_out, fast_train, baseline = ax.lines  # no smoothing: the measured losses
    assert list(train.get_xdata()) == [2.0, 4.0, 6.0, 8.0]
    assert list(train.get_ydata()) == pytest.approx(slow.train_loss)
    assert list(held_out.get_xdata()) == [4.0, 8.0] and list(held_out.get_ydata()) == [2.9, 2.7]
    assert list(fast_train.get_xdata()) == pytest.approx([0.5 * s for s in range(1, 11)])
    assert list(baseline.get_ydata()) == [1.5, 1.5]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "slow, train", "slow, held-out", "fast, train", "counts: 1.500"]
    assert ax.get_xlabel().startswith("training time (s)") and ax.get_title() == "same time"
    smoothed = viz.plot_loss_against_time({"h": TrainHistory([1], [2.0], seconds=1.0)})
    assert len(smoothed.lines) == 3  # light raw, smoothed, and the legend's note on the raw


def test_plot_loss_against_time_needs_steps_and_a_duration():
    with pytest.raises(ValueError, match="history 'h' needs at least one step"):
        viz.plot_loss_against_time({"h": _history([1, 2], 0.0)})
    with pytest.raises(ValueError, match="history 'h' needs at least one step"):
        viz.plot_loss_against_time({"h": _history([], 1.0)})



def test_plot_loss_and_final_scores_puts_each_evaluation_set_in_its_own_panel():
    lstm = _history([1, 2, 3, 4], 8.0, val_steps=[2, 4], val_loss=[2.9, 2.7])
    transformer = _history(range(1, 11), 5.0, val_steps=[10], val_loss=[2.5])
    scores = {"LSTM": 1.58, "6-gram": 1.457, "Transformer": 1.439}
    fig = viz.plot_loss_and_final_scores(
        {"LSTM": lstm, "Transformer": transformer}, scores, heldout="first 20,000 characters",
        scores_on="all test lines", smooth=2, ylim=(1.0, 3.0), title="long run")
    curves_ax, scores_ax = fig.axes
    assert curves_ax.get_title() == "During training (held-out: first 20,000 characters)"
    assert scores_ax.get_title() == "At the end, on all test lines"
    assert curves_ax.get_ylim() == (1.0, 3.0) and fig._suptitle.get_text() == "long run"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "LSTM, held-out: first 20,000 characters" in labels
    assert not any("all test lines" in label for label in labels)  # no score of the other set
    assert [t.get_text() for t in scores_ax.get_yticklabels()] == [
        "Transformer", "6-gram", "LSTM"]  # best first
    dots = {line.get_ydata()[0]: line for line in scores_ax.lines}
    assert dots[0].get_xdata()[0] == 1.439 and dots[2].get_xdata()[0] == 1.58
    colours = {line.get_label(): line.get_color() for line in curves_ax.lines}
    assert dots[0].get_color() == colours["Transformer, train"]
    assert dots[2].get_color() == colours["LSTM, train"]
    assert dots[1].get_marker() == "s"  # a score without a curve: a grey square
    assert [t.get_text() for t in scores_ax.texts] == ["1.439", "1.457", "1.580"]


def test_plot_loss_and_final_scores_needs_a_score():
    with pytest.raises(ValueError, match="at least one final score"):
        viz.plot_loss_and_final_scores({"h": _history([1], 1.0)}, {}, heldout="a", scores_on="b")

class BigramModel(torch.nn.Module):
    """A stand-in language model: the next token's logits depend on the last token only. It
    records the length of every context it is given."""

    def __init__(self, table, block_size=None):
        super().__init__()
        self.table = torch.nn.Parameter(torch.as_tensor(table, dtype=torch.float32))  # (V, V)
        if block_size is not None:
            self.block_size = block_size
        self.lengths = []

    def forward(self, idx):
        self.lengths.append(idx.shape[1])
        return self.table[idx]  # (B, T, V)


TABLE = [[0.5, 2.0, -1.0, 1.0], [1.5, 0.0, 1.0, -0.5], [0.0, 0.3, 0.6, 0.9],
         [2.5, -2.0, 0.5, 0.0]]


def test_next_token_distribution_applies_temperature_top_k_and_the_crop():
    model = BigramModel(TABLE, block_size=3)
    logits = torch.tensor(TABLE[1])  # the context ends with token 1
    ids = [0, 2, 3, 1]
    dist = viz.next_token_distribution(model, ids)
    assert torch.allclose(dist, logits.softmax(-1)) and model.lengths[-1] == 3  # cropped
    assert torch.allclose(viz.next_token_distribution(model, ids, temperature=0.5),
                          (logits / 0.5).softmax(-1))
    top2 = viz.next_token_distribution(model, ids, temperature=2.0, top_k=2)
    kept = (logits[[0, 2]] / 2.0).softmax(-1)  # 1.5 and 1.0 are the two largest
    assert torch.allclose(top2, torch.tensor([kept[0], 0.0, kept[1], 0.0]))
    assert viz.next_token_distribution(model, ids, temperature=0.0).tolist() == [1, 0, 0, 0]
    assert viz.next_token_distribution(model, ids, top_k=99).sum() == pytest.approx(1.0)
    viz.next_token_distribution(model, ids, block_size=2)
    assert model.lengths[-1] == 2
    uncropped = BigramModel(TABLE)
    viz.next_token_distribution(uncropped, ids)
    assert uncropped.lengths == [4] and uncropped.training  # its mode is restored
    with pytest.raises(ValueError, match="non-empty 1-D"):
        viz.next_token_distribution(model, [])
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        viz.next_token_distribution(model, ids, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k must be >= 1 or None"):
        viz.next_token_distribution(model, ids, top_k=0)
    with pytest.raises(ValueError, match="block_size must be >= 1 or None"):
        viz.next_token_distribution(model, ids, block_size=0)


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 3), (1.6, 2), (0.0, None)])
def test_next_token_distribution_is_what_generate_draws_from(temperature, top_k):
    model = BigramModel(TABLE, block_size=2)
    ids = torch.tensor([3, 0, 2])
    dist = viz.next_token_distribution(model, ids, temperature=temperature, top_k=top_k)
    for seed in range(8):
        drawn = lm.generate(model, ids[None], 1, temperature=temperature, top_k=top_k,
                            generator=torch.Generator().manual_seed(seed))[0, -1]
        ours = torch.multinomial(dist[None], 1, generator=torch.Generator().manual_seed(seed))
        assert drawn.item() == ours.item()



@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.5, 2), (0.0, 3)])
def test_next_token_distribution_is_lm_next_token_probs_of_the_last_logits(temperature, top_k):
    model = BigramModel(TABLE, block_size=2)
    ids = [3, 0, 2, 1]
    expected = lm.next_token_probs(model(torch.tensor([ids[-2:]]))[:, -1],
                                   temperature=temperature, top_k=top_k)[0]
    assert torch.equal(viz.next_token_distribution(model, ids, temperature=temperature,
                                                   top_k=top_k), expected)

def test_plot_sampling_distribution_orders_by_the_model_and_draws_both():
    chars = ["a", "b", "\n", " "]
    base, probs = [0.1, 0.4, 0.2, 0.3], [0.0, 0.6, 0.0, 0.4]
    ax = viz.plot_sampling_distribution(chars, probs, base, title="after 'x'")
    heights = [patch.get_height() for patch in ax.patches]
    assert heights[:4] == pytest.approx([0.6, 0.4, 0.0, 0.0])  # b, space, newline, a
    assert heights[4:] == pytest.approx([0.4, 0.3, 0.2, 0.1])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b", "\u2423", "\u23ce", "a"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "sampled from", "the model (temperature 1)"]
    assert ax.get_title() == "after 'x'" and "the 4 most likely" in ax.get_xlabel()
    alone = viz.plot_sampling_distribution(chars, torch.tensor(base), top=2)
    assert [patch.get_height() for patch in alone.patches] == pytest.approx([0.4, 0.3])
    assert alone.get_legend() is None


def test_plot_sampling_distribution_checks_its_input():
    with pytest.raises(ValueError, match="one probability per token"):
        viz.plot_sampling_distribution(["a", "b"], [1.0])
    with pytest.raises(ValueError, match="one probability per token"):
        viz.plot_sampling_distribution(["a", "b"], [0.5, 0.5], [1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="top must be a positive"):
        viz.plot_sampling_distribution(["a"], [1.0], top=0)


def _explorer(**kwargs):
    tokenizer = CharTokenizer("ab<\n")  # ids: "\n" 0, "<" 1, "a" 2, "b" 3
    model = BigramModel(TABLE, block_size=2)
    options = dict(prompt="ab", length=12, seed=3)
    options.update(kwargs)
    return viz.sampling_explorer(model, tokenizer, **options), model, tokenizer


def _expected_sample(model, tokenizer, prompt, temperature, top_k, seed, length=12):
    ids = torch.tensor([tokenizer.encode(prompt)])
    out = lm.generate(model, ids, length, temperature=temperature, top_k=top_k,
                      generator=torch.Generator().manual_seed(seed))
    return tokenizer.decode(out[0, ids.shape[1]:])


def test_sampling_explorer_shows_both_distributions_and_a_seeded_sample():
    explorer, model, tokenizer = _explorer()
    assert (explorer.temperature.value, explorer.top_k.value, explorer.seed.value) == (1.0, 0, 3)
    assert explorer.top_k.max == 4
    expected = torch.tensor(TABLE[3]).softmax(-1).double().numpy()  # after "b", id 3
    assert np.allclose(explorer.base, expected) and np.allclose(explorer.probs, expected)
    assert explorer.sample == _expected_sample(model, tokenizer, "ab", 1.0, None, 3)
    assert len(explorer.sample) == 12
    entropy = -(expected * np.log(expected)).sum()
    assert explorer.summary == (f"temperature 1, every token: 4 possible next tokens, entropy "
                                f"{entropy:.2f} nats (the model's own: {entropy:.2f})")
    assert explorer.message.value.startswith(explorer.summary + "; a sample (seed 3):<pre>ab")
    assert bytes(explorer.image.value).startswith(b"\x89PNG")
    (ax,) = explorer.figure.axes
    assert ax.get_title() == "after 'ab': temperature 1, every token"
    assert len(ax.patches) == 8  # the sampled distribution and the model's, 4 tokens each


def test_sampling_explorer_redraws_when_each_control_changes():
    explorer, model, tokenizer = _explorer()
    before = bytes(explorer.image.value)
    explorer.top_k.value = 2
    assert int((explorer.probs > 0).sum()) == 2
    assert explorer.summary.startswith("temperature 1, top-k 2: 2 possible next tokens")
    assert explorer.sample == _expected_sample(model, tokenizer, "ab", 1.0, 2, 3)
    assert bytes(explorer.image.value) != before
    explorer.temperature.value = 0.0
    assert explorer.probs.tolist() == [1.0, 0.0, 0.0, 0.0]  # after "b": "\n" is the argmax
    assert explorer.summary.startswith("greedy (temperature 0), top-k 2: 1 possible")
    assert explorer.sample == _expected_sample(model, tokenizer, "ab", 0.0, 2, 3)
    explorer.temperature.value = 0.5
    explorer.seed.value = 11
    assert explorer.sample == _expected_sample(model, tokenizer, "ab", 0.5, 2, 11)
    explorer.prompt.value = "ba"
    assert np.allclose(explorer.base, torch.tensor(TABLE[2]).softmax(-1).numpy())
    assert explorer.sample == _expected_sample(model, tokenizer, "ba", 0.5, 2, 11)
    assert len(explorer.figure.axes) == 1  # redraw replaces the panel, never stacks them


def test_sampling_explorer_reports_prompts_it_cannot_read_and_escapes_markup():
    explorer, model, tokenizer = _explorer(prompt="a<")
    assert "<pre>a&lt;" in explorer.message.value
    explorer.prompt.value = "az"
    assert explorer.probs is None and explorer.base is None
    assert explorer.sample == "" and explorer.summary == ""
    assert explorer.figure.axes[0].get_title() == "cannot read this prompt"
    assert explorer.message.value.startswith("<b>cannot read this prompt:</b> character 'z'")
    explorer.prompt.value = ""
    assert explorer.message.value.endswith("type at least one character")
    explorer.prompt.value = "b"
    assert explorer.probs is not None and explorer.figure.axes[0].get_title().startswith("after")


def test_sampling_explorer_rejects_bad_starting_values():
    with pytest.raises(ValueError, match=r"temperature must be in \[0, 2\]"):
        _explorer(temperature=2.5)
    with pytest.raises(ValueError, match=r"top_k must be in 0 \.\.\. 4"):
        _explorer(top_k=5)
    with pytest.raises(ValueError, match="length must be positive"):
        _explorer(length=0)
    with pytest.raises(ValueError, match="at least one character"):
        _explorer(prompt="")
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        _explorer(prompt="abc")
