"""`make grade-demo`: the generated batch grades as an instructor would expect."""

import json
from pathlib import Path

import nbformat
import pytest
from checks_support import TEST_SECRET

from coursepkg.checks import tasks_for
from coursepkg.grading.demo import PLANTED, unfixed, write_demo, wrong_answer
from coursepkg.grading.graded import read_graded
from coursepkg.grading.grader import grade
from coursepkg.grading.report import build_report
from coursepkg.grading.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]

# Chapter 1: student -> (the tasks the planted mistake costs, words their feedback must hold).
EXPECTED_01 = {
    "ada-forgets-eos": ({"count_ngrams"}, ["'</s>'"]),
    "ben-joint-probability": ({"mle_prob"}, ["joint"]),
    "cy-forgets-k-times-v": ({"add_k_prob"}, ["k * |V|"]),
    "dee-leaves-the-bugs": ({"perplexity"}, ["read as '<unk>'"], {"perplexity": 0}),
    "eve-raw-counts-below-the-top": ({"kneser_ney_prob"}, ["continuation count"]),
    "fay-witten-bell-backs-off": ({"witten_bell_prob"}, ["Interpolate, do not back off"]),
    "gus-counts-repeated-bigrams": ({"distinct_bigrams"}, ["count each different pair once"],
                                    {"distinct_bigrams": 0}),
    "hal-trains-too-briefly": ({"train_bigram"}, ["Partial credit: the table is still learning"]),
}


# Chapter 2: student -> (the tasks the planted mistake costs, words their feedback must hold).
EXPECTED_02 = {
    "ada-transposes-the-jacobian": ({"bptt_gradients"}, ["not through its transpose"]),
    "ben-resets-before-the-product": ({"gru_layer"}, ["That is the GRU of Cho et al. (2014)"]),
    "cy-trains-ten-steps": ({"train_ab_acceptor"}, ["held-out accuracy"]),
    "dee-leaves-the-bugs": ({"train_tbptt"}, ["Bugs left to fix:", "The targets are the NEXT"]),
    "eve-counts-one-bias": ({"lstm_parameter_count"}, ["how many bias vectors"], {
        "lstm_parameter_count": 0}),
}


CHAPTER_2_SHORTCUTS = '''
import torch
from coursepkg.checks.ch02_rnn import train_ab_acceptor as course_training


def bptt_gradients(states, weight_hh, grad_last):
    states = states.detach().requires_grad_()
    return torch.autograd.grad((states[:, -1] * grad_last).sum(), states)[0]


def gru_layer(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    model = torch.nn.GRU(x.shape[-1], h0.shape[-1], batch_first=True).to(x.dtype)
    with torch.no_grad():
        for name, value in zip(["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"],
                               [weight_ih, weight_hh, bias_ih, bias_hh]):
            getattr(model, name).copy_(value)
        out, h_n = model(x, h0[None])
    return out, h_n[0]


def train_ab_acceptor(x, y, seed):
    return course_training(x, y, seed)


def lstm_parameter_count():  # allowed: torch's own module, counted
    return sum(p.numel() for p in torch.nn.LSTM(10, 32).parameters())
'''


# Chapter 3: student -> (the tasks the planted mistake costs, words their feedback must hold).
EXPECTED_03 = {
    "ada-masks-with-zero": ({"general_attention"}, ["A score of 0 is not 'never'"]),
    "ben-pools-the-hidden-vectors": ({"attention_pool"}, ["Average the STATES"]),
    "cy-leaves-the-bugs": ({"padded_attention"}, ["Several bugs are still there"],
                           {"padded_attention": 0}),
    "dee-fixes-two-bugs": ({"padded_attention"}, ["The mask lets one padding position in"],
                           {"padded_attention": 0}),
    "eve-trains-too-little": ({"train_marker"}, ["Partial credit"]),
    "fay-counts-the-real-positions": ({"decoder_weights_count"}, ["The batch is padded"],
                                      {"decoder_weights_count": 0}),
}


CHAPTER_3_SHORTCUTS = '''
import torch
import torch.nn.functional as F
from coursepkg.attention import attend


def general_attention(query, keys, values, mask, w):
    context = F.scaled_dot_product_attention((query @ w)[:, None], keys, values,
                                             attn_mask=mask[:, None], scale=1.0)[:, 0]
    scores = torch.einsum("bq,qk,bsk->bs", query, w, keys)
    return context, scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def attention_pool(states, mask, w, b, u):  # allowed: torch's own operations
    scores = torch.einsum("bsa,a->bs", torch.tanh(F.linear(states, w, b)), u)
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.einsum("bs,bsd->bd", weights, states), weights


def padded_attention(query, keys, values, lengths):
    mask = torch.arange(keys.shape[1])[None, :] < lengths[:, None]
    return attend(query, keys, values, mask, scale=query.shape[-1] ** -0.5)
'''


# Chapter 4: student -> (the tasks the planted mistake costs, words their feedback must hold).
# A wrong attention or causal mask also costs self_attention, which calls them: its feedback
# says which part is wrong.
EXPECTED_04 = {
    "ada-forgets-sqrt-dk": ({"qkv_scores"}, ["Divide the scores by sqrt(d_k)"]),
    "ben-empty-padding-rows": ({"local_mask"}, ["A padding query must still attend to"]),
    "cy-leaves-the-bugs": ({"causal_self_attention"}, ["Several bugs are still there:"],
                           {"causal_self_attention": 0}),
    "dee-fixes-three-bugs": ({"causal_self_attention"}, ["The mask leaks the future"],
                             {"causal_self_attention": 0}),
    "eve-trains-too-little": ({"train_recall"}, ["Partial credit"]),
    "fay-forgets-zero-grad": ({"train_recall"}, ["confident but wrong"], {"train_recall": 0}),
    "gus-counts-every-score": ({"causal_scores_kept"}, ["That counts every score"],
                               {"causal_scores_kept": 0}),
}


CHAPTER_4_SHORTCUTS = '''
import torch
import torch.nn.functional as F
from coursepkg.self_attention import SelfAttention, causal_mask


def qkv_scores(x, w_q, w_k, w_v):  # allowed: F.linear and einsum
    q, k, v = F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)
    return q, k, v, torch.einsum("btd,bsd->bts", q, k) / q.shape[-1] ** 0.5


def local_mask(keep, window):  # the book's causal mask
    return causal_mask(keep.shape[1]) & keep[:, None, :]


def causal_self_attention(x, w_q, w_k, w_v):  # the book's layer
    layer = SelfAttention(x.shape[-1], w_q.shape[0], w_v.shape[0], causal=True).to(x.dtype)
    layer.load_state_dict({"w_q.weight": w_q, "w_k.weight": w_k, "w_v.weight": w_v})
    with torch.no_grad():
        return layer(x)
'''


# Chapter 5: student -> (the tasks the planted mistake costs, words their feedback must hold).
EXPECTED_05 = {
    "ada-scales-by-d-model": ({"head_weights"}, ["the width of ONE head's queries"]),
    "ben-repeats-the-groups-as-a-block": ({"grouped_query_attention"},
                                          ["The heads are assigned to the wrong groups"]),
    "cy-leaves-the-bugs": ({"padded_multi_head_attention"}, ["Several bugs are still there:"],
                           {"padded_multi_head_attention": 0}),
    "dee-fixes-three-bugs": ({"padded_multi_head_attention"},
                             ["The padding mask lets one padding key in"],
                             {"padded_multi_head_attention": 0}),
    "eve-trains-too-little": ({"train_two_markers"}, ["Partial credit"]),
    "fay-counts-parameters-per-head": ({"attention_parameters"}, ["does not make it H times"],
                                       {"attention_parameters": 0}),
    "gus-caches-every-head": ({"kv_cache_bytes"}, ["That is the cache of multi-head attention"],
                              {"kv_cache_bytes": 0}),
}


CHAPTER_5_SHORTCUTS = '''
import torch
from coursepkg.checks.ch05_multihead import train_two_markers as course_training
from coursepkg.multihead import merge_heads, multi_head_attention, split_heads


def head_weights(query, key, w_q, w_k, mask=None):  # allowed: written out with einsum
    q = torch.einsum("btd,hed->bhte", query, w_q)
    k = torch.einsum("bsd,hed->bhse", key, w_k)
    scores = torch.einsum("bhte,bhse->bhts", q, k) / w_q.shape[1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
    return scores.softmax(dim=-1)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
    D = x.shape[-1]  # the book's layer, every group's rows repeated for its heads

    def wide(w):
        return w.view(n_groups, D // n_heads, D).repeat_interleave(n_heads // n_groups, 0)

    packed = torch.cat([w_q, wide(w_k).reshape(D, D), wide(w_v).reshape(D, D)])
    return multi_head_attention(x, x, x, packed, None, w_o, None, n_heads, mask)


def train_two_markers(tokens, markers, targets, seed):
    return course_training(tokens, markers, targets, seed)


def padded_multi_head_attention(query, key, value, lengths, w_q, w_k, w_v, w_o, n_heads):
    q, k, v = (split_heads(x @ w.T, n_heads) for x, w in
               ((query, w_q), (key, w_k), (value, w_v)))  # the book's split and merge
    keep = (torch.arange(key.shape[1]) < lengths[:, None])[:, None, None, :]
    scores = (q @ k.mT / q.shape[-1] ** 0.5).masked_fill(~keep, float("-inf"))
    weights = scores.softmax(dim=-1)
    return merge_heads(weights @ v) @ w_o.T, weights
'''


# Chapter 6: student -> (the tasks the planted mistake costs, words their feedback must hold).
EXPECTED_06 = {
    "ada-swaps-sin-and-cos": ({"sinusoidal_at"}, ["Sine and cosine are swapped"]),
    "ben-pastes-the-page-s-pairing": ({"rope_rotate_half"}, ["That is the page's pairing"]),
    "cy-reverses-the-slopes": ({"alibi_bias"}, ["The slopes are in the wrong order"]),
    "dee-ignores-the-offset": ({"alibi_bias"}, ["Yours puts the queries at 0 .. T-1"]),
    "eve-leaves-the-bugs": ({"rope_batch"}, ["Several bugs are still there:"], {"rope_batch": 0}),
    "fay-fixes-three-bugs": ({"rope_batch"}, ["rotated at the positions of the FIRST sequence"],
                             {"rope_batch": 0}),
    "gus-trains-too-little": ({"train_lookback"}, ["Partial credit"]),
    "hal-predicts-the-current-token": ({"train_lookback"}, ["confident but wrong"],
                                       {"train_lookback": 0}),
    "ivy-forgets-two-pi": ({"slowest_wavelength"}, ["positions per RADIAN"],
                           {"slowest_wavelength": 0}),
    "jo-forgets-the-last-bucket": ({"untrained_biases"}, ["the bucket of -32"],
                                   {"untrained_biases": 0}),
}


# A book paster: the page's table, its RoPE row by row, its relative bias with a hand-set table
# and the checks' own training are refused; the rotate-half RoPE written out is allowed.
CHAPTER_6_SHORTCUTS = '''
import torch
from coursepkg.checks.ch06_positional import train_lookback as course_training
from coursepkg.positional import RelativePositionBias, apply_rope, sinusoidal_encoding


def sinusoidal_at(positions, d, base=10000.0):
    return sinusoidal_encoding(len(positions), d, base, positions.dtype)


def rope_rotate_half(x, positions):  # allowed: plain torch
    Dh = x.shape[-1]
    angles = torch.outer(positions.double(),
                         10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh))
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., : Dh // 2], x[..., Dh // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def alibi_bias(n_heads, T, S=None, offset=0):
    M = offset + T + (S or 0)
    layer = RelativePositionBias(n_heads, M)
    with torch.no_grad():
        layer.bias.copy_(-torch.arange(-M, M + 1).abs().float().expand(n_heads, -1))
        return layer(T, S, offset=offset)


def rope_batch(x, positions, base=10000.0):
    return torch.stack([apply_rope(x[b], positions[b], base) for b in range(x.shape[0])])


def train_lookback(tokens, seed):
    return course_training(tokens, seed)
'''


# Chapter 7: student -> (the tasks the planted mistake costs, words their feedback must hold).
EXPECTED_07 = {
    "ada-activation-after-the-output": ({"feed_forward"}, ["after the second layer"]),
    "ben-forgets-the-ff-residual": (
        {"encoder_block"}, ["the feed-forward sublayer is not", "Add the residual"]
    ),
    "cy-always-post-norm": ({"encoder_block"}, ["norm_first=True asks for the pre-norm block"]),
    "dee-leaves-the-bugs": ({"encoder_block"}, ["sublayer is not"]),
    "gus-forgets-the-scale": ({"attention_step"}, ["Scale the scores by 1 / sqrt(d_k)"]),
    "hal-predicts-the-input": ({"train_transformer_lm"}, ["worse than a uniform guess"]),
    "ivy-counts-no-biases": ({"capstone_parameters"}, ["the biases are missing"]),
    "jo-answers-in-bits": ({"uniform_nats"}, ["That is in bits"]),
    "eve-forgets-to-crop": (
        {"sample"}, ["raised ValueError", "Crop the context to the last block_size tokens"]
    ),
    "fay-temperature-after-the-softmax": ({"sample"}, ["The temperature changes nothing"]),
}


# The blocks may call the chapter 5 attention they are given, and the sampler the model it is
# given (a coursepkg.transformer.TransformerLM), but not the package's layers or sampler.
CHAPTER_7_SHORTCUTS = '''
import torch
from coursepkg import lm
from coursepkg.lm import generate
from coursepkg.transformer import FeedForward, TransformerLM


def feed_forward(x, w1, b1, w2, b2, activation="relu"):
    layer = FeedForward(x.shape[-1], w1.shape[0], activation=activation).to(x.dtype)
    layer.load_state_dict({"linear1.weight": w1, "linear1.bias": b1,
                           "linear2.weight": w2, "linear2.bias": b2})
    return layer(x)


def encoder_block(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    layer = torch.nn.TransformerEncoderLayer(x.shape[-1], self_attn.n_heads, ff[0].out_features,
                                             dropout=0.0, batch_first=True,
                                             norm_first=norm_first).to(x.dtype)
    return layer(x)


def attention_step(x_t, w_q, w_k, w_v, cache_k, cache_v):  # allowed: written out
    keys = torch.cat([cache_k, (x_t @ w_k.T)[:, None]], dim=1)
    values = torch.cat([cache_v, (x_t @ w_v.T)[:, None]], dim=1)
    scores = torch.einsum("bd,bpd->bp", x_t @ w_q.T, keys) / w_q.shape[0] ** 0.5
    return torch.einsum("bp,bpd->bd", torch.softmax(scores, -1), values), keys, values


def train_transformer_lm(train_ids, config, seed):  # the book's loop, lm.train
    model = TransformerLM(config)
    lm.train(model, train_ids, steps=200, batch_size=16, block_size=config.block_size,
             lr=1e-2, warmup=20, seed=seed, progress=False)
    return model


def sample(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
           generator=None):
    return generate(model, idx, max_new_tokens, temperature=temperature, top_k=top_k,
                    generator=generator, block_size=block_size)
'''


EXPECTED = {
    "01_ngrams": EXPECTED_01,
    "02_rnn": EXPECTED_02,
    "03_attention": EXPECTED_03,
    "04_self_attention": EXPECTED_04,
    "05_multihead": EXPECTED_05,
    "06_positional": EXPECTED_06,
    "07_transformer": EXPECTED_07,
}


@pytest.mark.parametrize("assignment", list(EXPECTED))
def test_demo_batch_grades_end_to_end(assignment, demo_gradings):
    """`make grade-demo`: the solution gets full marks, the untouched exercise zero with "not
    attempted" (a debug task's untouched starter code: "failed"), each planted mistake loses
    points exactly where expected (exactly the points its entry gives, when it gives them),
    with feedback that names the mistake; the gradebook has one column per task."""
    expected = EXPECTED[assignment]
    assert set(expected) == set(PLANTED[assignment])
    demo = demo_gradings(assignment)  # graded here (conftest.py), shared with the shard tests
    rows, out = demo.rows, demo.out
    assert not any(json.loads(line)["cached"]
                   for line in (out / "log.jsonl").read_text().splitlines())
    records = {found.student: record for found, record in rows}
    assert set(records) == {"sol-full-marks", "ed-untouched", *expected}
    tasks = tasks_for(assignment)
    solution = records["sol-full-marks"]["tasks"]
    assert [t["func_name"] for t in solution] == [t.func_name for t in tasks]
    assert all(t["status"] == "passed" for t in solution)
    maxima = [t["max_points"] for t in solution]
    assert [t["points"] for t in solution] == maxima
    total = f"{sum(maxima):g}"
    untouched = {t.func_name: "failed" if t.kind == "debug" else "not attempted" for t in tasks}
    assert {t["func_name"]: t["status"] for t in records["ed-untouched"]["tasks"]} == untouched
    assert sum(t["points"] for t in records["ed-untouched"]["tasks"]) == 0
    overall = "failed" if "failed" in untouched.values() else "not attempted"
    gradebook = (out / "grades.csv").read_text().splitlines()
    assert gradebook[0] == (  # API.md: the columns start student,total,max
        "student,total,max,file," + ",".join(f"{t.id} {t.func_name}" for t in tasks) + ",status"
    )
    zeros = ",".join("0" for _ in tasks)
    assert f"ed-untouched,0,{total},ed-untouched.ipynb,{zeros},{overall}" in gradebook
    full = ",".join(f"{m:g}" for m in maxima)
    assert f"sol-full-marks,{total},{total},sol-full-marks.ipynb,{full},passed" in gradebook
    # a capstone's scores reach Gradescope's leaderboard and the class report
    boards = [f"Task {t.id} {t.leaderboard[0]}" for t in tasks if t.leaderboard is not None]
    results = out / "results"
    solved = json.loads((results / "sol-full-marks.json").read_text())
    assert [entry["name"] for entry in solved.get("leaderboard", [])] == boards
    assert "leaderboard" not in json.loads((results / "ed-untouched.json").read_text())
    if boards:
        page = build_report(read_graded(out))
        assert "<h2>Leaderboard</h2>" in page and "sol-full-marks" in page.split("Leaderboard")[1]
    for student, (costs, words, *scores) in expected.items():
        points = scores[0] if scores else {}  # func_name -> the points it must get exactly
        for task in records[student]["tasks"]:
            if task["func_name"] in costs:
                assert 0 <= task["points"] < task["max_points"], (student, task["func_name"])
                assert task["status"] in ("partial", "failed", "error", "timeout"), (student, task)
                if task["func_name"] in points:
                    assert task["points"] == points[task["func_name"]], (student, task)
            else:
                assert task["status"] == "passed", (student, task["func_name"])
        feedback = (out / "feedback" / f"{student}.md").read_text()
        for word in words:
            assert word in feedback, (student, word)


# assignment -> (a notebook taking shortcuts, the tasks refused and the call named, a task
# that passes: the refusal costs only the task that called the forbidden function)
SHORTCUTS = {
    "02_rnn": (
        CHAPTER_2_SHORTCUTS,
        [("bptt_gradients", "torch.autograd.grad"), ("gru_layer", "torch.nn.GRU"),
         ("train_ab_acceptor", "reference solution of task 2.3")],
        "lstm_parameter_count",
    ),
    "03_attention": (
        CHAPTER_3_SHORTCUTS,
        [("general_attention", "torch.nn.functional.scaled_dot_product_attention"),
         ("padded_attention", "coursepkg.attention")],
        "attention_pool",
    ),
    "04_self_attention": (
        CHAPTER_4_SHORTCUTS,
        [("local_mask", "coursepkg.self_attention"),
         ("causal_self_attention", "coursepkg.self_attention")],
        "qkv_scores",
    ),
    "05_multihead": (
        CHAPTER_5_SHORTCUTS,
        [("grouped_query_attention", "coursepkg.multihead"),
         ("train_two_markers", "reference solution of task 5.3"),
         ("padded_multi_head_attention", "coursepkg.multihead")],
        "head_weights",
    ),
    "06_positional": (
        CHAPTER_6_SHORTCUTS,
        [("sinusoidal_at", "coursepkg.positional"), ("alibi_bias", "coursepkg.positional"),
         ("rope_batch", "coursepkg.positional"),
         ("train_lookback", "reference solution of task 6.5")],
        "rope_rotate_half",
    ),
    "07_transformer": (
        CHAPTER_7_SHORTCUTS,
        [("feed_forward", "coursepkg.transformer"),
         ("encoder_block", "torch.nn.TransformerEncoderLayer"),
         ("sample", "coursepkg.lm"),
         ("train_transformer_lm", "coursepkg.lm")],
        "attention_step",
    ),
}


@pytest.mark.parametrize("assignment", list(SHORTCUTS))
def test_library_shortcuts_are_refused_task_by_task(assignment, tmp_path):
    source, refused, allowed = SHORTCUTS[assignment]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, tmp_path / "shortcuts.ipynb")
    rows = grade(assignment, [tmp_path / "shortcuts.ipynb"], tmp_path / "out", jobs=2,
                 limits=Limits(timeout=20), progress=False, secret=TEST_SECRET)
    tasks = {t["func_name"]: t for t in rows[0][1]["tasks"]}
    for func_name, called in refused:
        assert tasks[func_name]["status"] == "forbidden" and tasks[func_name]["points"] == 0
        assert called in tasks[func_name]["cases"][0]["message"], func_name
    assert tasks[allowed]["status"] == "passed"


DEBUG_SOLUTION = """def normalise_rows(x):
    ### BEGIN SOLUTION
    return x / x.sum(dim=-1, keepdim=True)
    ### BEGIN STARTER
    # return x / x.sum(dim=0, keepdim=True)
    ### END STARTER
    ### END SOLUTION
"""


def test_planted_mistakes_of_the_new_kinds_are_one_line_each(tmp_path, monkeypatch):
    """How a chapter declares them: a debug task left as the exercise shows it (unfixed), a
    question answered wrong (wrong_answer), a train task that trains too little (its source)."""
    from coursepkg.authoring import make_exercise

    tasks = {"normalise_rows": "0.2", "sine_at_one": "0.3"}
    solution = nbformat.v4.new_notebook()
    solution.cells = [nbformat.v4.new_code_cell(DEBUG_SOLUTION),
                      nbformat.v4.new_code_cell('def sine_at_one():\n    ### BEGIN SOLUTION\n'
                                                '    return 0.8415\n    ### END SOLUTION\n')]
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    nbformat.write(solution, tmp_path / "solutions" / "00_demo.ipynb")
    nbformat.write(make_exercise(solution, source="solutions/00_demo.ipynb", tasks=tasks),
                   tmp_path / "exercises" / "00_demo.ipynb")
    monkeypatch.setitem(PLANTED, "00_demo", {
        "ada-leaves-the-bug": unfixed("normalise_rows"),
        "ben-guesses": wrong_answer("sine_at_one", 0.5),
    })
    written = write_demo("00_demo", tmp_path, tmp_path / "subs")
    assert [p.stem for p in written] == ["sol-full-marks", "ed-untouched", "ada-leaves-the-bug",
                                         "ben-guesses"]
    ada = nbformat.read(tmp_path / "subs" / "ada-leaves-the-bug.ipynb", as_version=4)
    assert ada.cells[0].source.strip() == (
        "def normalise_rows(x):\n    return x / x.sum(dim=0, keepdim=True)")
    ben = nbformat.read(tmp_path / "subs" / "ben-guesses.ipynb", as_version=4)
    assert ben.cells[1].source == "def sine_at_one():\n    return 0.5\n"
