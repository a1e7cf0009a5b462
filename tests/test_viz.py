"""Tests of coursepkg.viz: the plots draw what they claim and the n-gram explorer reacts."""

import matplotlib

matplotlib.use("Agg")

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
    assert labels == ["LSTM, train", "LSTM, held-out", "RNN, train", "6-gram: 1.457"]
    by_label = {line.get_label(): line for line in ax.get_lines()}
    assert list(by_label["LSTM, train"].get_ydata()) == [4.0, 3.5, 2.5, 1.5]  # moving average
    assert list(by_label["LSTM, held-out"].get_xdata()) == [2, 4]
    assert list(by_label["6-gram: 1.457"].get_ydata()) == [1.457, 1.457]
    assert len(ax.get_lines()) == 6  # plus one faint raw training curve per model


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
