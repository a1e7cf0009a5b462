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
# A wrong split_heads or merge_heads also costs multi_head_attention, which calls them: its
# feedback says which part is wrong.
EXPECTED_05 = {
    "ada-views-without-transpose": (
        {"split_heads", "multi_head_attention"},
        ["mixes the heads with time", "The projections are right but the heads are split wrong"],
    ),
    "ben-views-a-transposed-tensor": (
        {"merge_heads", "multi_head_attention"},
        ["raised RuntimeError: view size is not compatible", ".contiguous().view"],
    ),
    "cy-scales-by-d-model": ({"multi_head_attention"}, ["not sqrt(d_model)"]),
    "dee-forgets-out-proj": ({"multi_head_attention"}, ["Apply the output projection W^O"]),
    "eve-torch-mask-convention": ({"multi_head_attention"}, ["True = NOT allowed"]),
}


# Three notebooks, since each defines multi_head_attention its own forbidden way. Chapter 4's
# scaled_dot_product_attention stays allowed in chapter 5 (the solution calls it).
CHAPTER_5_SHORTCUTS = {
    "torch-module": '''
import torch
from coursepkg.multihead import merge_heads


def split_heads(x, n_heads):  # allowed: unflatten and transpose
    return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)


def multi_head_attention(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                         out_proj_bias, n_heads, mask=None):
    D = query.shape[-1]
    module = torch.nn.MultiheadAttention(D, n_heads, bias=in_proj_bias is not None,
                                         batch_first=True).to(query.dtype)
    state = {"in_proj_weight": in_proj_weight, "out_proj.weight": out_proj_weight}
    if in_proj_bias is not None:
        state |= {"in_proj_bias": in_proj_bias, "out_proj.bias": out_proj_bias}
    module.load_state_dict(state)
    if mask is not None and mask.dim() == 3:
        mask = mask.unsqueeze(1)
    if mask is not None:
        B, T, S = query.shape[0], query.shape[1], key.shape[1]
        mask = ~mask.expand(B, n_heads, T, S).reshape(B * n_heads, T, S)
    with torch.no_grad():
        return module(query, key, value, attn_mask=mask, average_attn_weights=False)
''',
    "torch-fused": '''
import math
import torch
import torch.nn.functional as F


def merge_heads(x):  # allowed: torch.cat
    return torch.cat(x.unbind(1), dim=-1)


def multi_head_attention(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                         out_proj_bias, n_heads, mask=None):
    w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (None,) * 3
    B, T, D = query.shape

    def split(x):
        return x.view(x.shape[0], x.shape[1], n_heads, D // n_heads).transpose(1, 2)

    q, k, v = (split(F.linear(x, w, b)) for x, w, b in
               ((query, w_q, b_q), (key, w_k, b_k), (value, w_v, b_v)))
    if mask is not None and mask.dim() == 3:
        mask = mask.unsqueeze(1)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D // n_heads)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return F.linear(merge_heads(heads), out_proj_weight, out_proj_bias), scores.softmax(-1)
''',
    "torch-functional": '''
import torch.nn.functional as F


def multi_head_attention(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                         out_proj_bias, n_heads, mask=None):
    out, weights = F.multi_head_attention_forward(
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), query.shape[-1],
        n_heads, in_proj_weight, in_proj_bias, None, None, False, 0.0, out_proj_weight,
        out_proj_bias, training=False, average_attn_weights=False)
    return out.transpose(0, 1), weights
''',
}


def test_chapter_5_library_shortcuts_are_refused_task_by_task(tmp_path):
    for name, source in CHAPTER_5_SHORTCUTS.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(source)]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    rows = grade("05_multihead", [tmp_path / f"{name}.ipynb" for name in CHAPTER_5_SHORTCUTS],
                 tmp_path / "out", jobs=1, limits=Limits(timeout=20), progress=False,
                 secret=TEST_SECRET)
    tasks = {found.student: {t["func_name"]: t for t in record["tasks"]}
             for found, record in rows}
    for student, func_name, called in [
        ("torch-module", "merge_heads", "reference solution of task 5.2"),
        ("torch-module", "multi_head_attention", "torch.nn.MultiheadAttention"),
        ("torch-fused", "multi_head_attention",
         "torch.nn.functional.scaled_dot_product_attention"),
        ("torch-functional", "multi_head_attention",
         "torch.nn.functional.multi_head_attention_forward"),
    ]:
        task = tasks[student][func_name]
        assert task["status"] == "forbidden" and task["points"] == 0, (student, func_name)
        assert called in task["cases"][0]["message"], (student, func_name)
    assert tasks["torch-module"]["split_heads"]["status"] == "passed"
    assert tasks["torch-fused"]["merge_heads"]["status"] == "passed"
    assert tasks["torch-fused"]["split_heads"]["status"] == "missing"


# Chapter 6: student -> (the tasks the planted mistake costs, words their feedback must hold).
EXPECTED_06 = {
    "ada-swaps-sin-and-cos": ({"sinusoidal_table"}, ["Sine and cosine are swapped"]),
    "ben-rotates-halves": ({"apply_rope"}, ["Pair each feature with its NEIGHBOUR"]),
    "cy-counts-from-1": ({"apply_rope"}, ["Positions start at 0"]),
    "dee-offsets-i-minus-j": ({"relative_bias"}, ["Yours uses i - j"]),
    "eve-forgets-to-clip": ({"relative_bias"}, ["raised IndexError", "clip them to [-M, M]"]),
}


CHAPTER_6_SHORTCUTS = '''
import torch
from coursepkg.positional import RelativePositionBias
from coursepkg.positional import apply_rope as package_rope


def sinusoidal_table(T, d, dtype=torch.float32):  # allowed: plain torch
    angles = torch.outer(torch.arange(T, dtype=dtype),
                         10000.0 ** (-torch.arange(0, d, 2, dtype=dtype) / d))
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(T, d)


def apply_rope(x, positions=None):
    return package_rope(x, positions)


def relative_bias(table, T, S, max_distance):
    layer = RelativePositionBias(table.shape[0], max_distance).to(table.dtype)
    layer.load_state_dict({"bias": table})
    with torch.no_grad():
        return layer(T, S)
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
def test_demo_batch_grades_end_to_end(assignment, tmp_path):
    """`make grade-demo`: the solution gets full marks, the untouched exercise zero with "not
    attempted" (a debug task's untouched starter code: "failed"), each planted mistake loses
    points exactly where expected (exactly the points its entry gives, when it gives them),
    with feedback that names the mistake; the gradebook has one column per task."""
    expected = EXPECTED[assignment]
    assert set(expected) == set(PLANTED[assignment])
    write_demo(assignment, ROOT, tmp_path / "subs")
    rows = grade(assignment, [tmp_path / "subs"], tmp_path / "out", jobs=2,
                 limits=Limits(timeout=20), progress=False, secret=TEST_SECRET)
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
    gradebook = (tmp_path / "out" / "grades.csv").read_text().splitlines()
    assert gradebook[0].startswith(
        "student,file," + ",".join(f"{t.id} {t.func_name}" for t in tasks) + ","
    )
    zeros = ",".join("0" for _ in tasks)
    assert f"ed-untouched,ed-untouched.ipynb,{zeros},0,{total},{overall}" in gradebook
    full = ",".join(f"{m:g}" for m in maxima)
    assert f"sol-full-marks,sol-full-marks.ipynb,{full},{total},{total},passed" in gradebook
    # a capstone's scores reach Gradescope's leaderboard and the class report
    boards = [f"Task {t.id} {t.leaderboard[0]}" for t in tasks if t.leaderboard is not None]
    results = tmp_path / "out" / "results"
    solved = json.loads((results / "sol-full-marks.json").read_text())
    assert [entry["name"] for entry in solved.get("leaderboard", [])] == boards
    assert "leaderboard" not in json.loads((results / "ed-untouched.json").read_text())
    if boards:
        page = build_report(read_graded(tmp_path / "out"))
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
        feedback = (tmp_path / "out" / "feedback" / f"{student}.md").read_text()
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
    "06_positional": (
        CHAPTER_6_SHORTCUTS,
        [("apply_rope", "reference solution of task 6.2"),
         ("relative_bias", "coursepkg.positional")],
        "sinusoidal_table",
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
