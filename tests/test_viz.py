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
