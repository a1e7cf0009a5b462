"""`make grade-demo`: the generated batch grades as an instructor would expect."""

from pathlib import Path

import nbformat
import pytest
from checks_support import TEST_SECRET

from coursepkg.checks import tasks_for
from coursepkg.grading.demo import PLANTED, write_demo
from coursepkg.grading.grader import grade
from coursepkg.grading.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]

# Chapter 1: student -> (the tasks the planted mistake costs, words their feedback must hold).
EXPECTED_01 = {
    "ada-forgets-eos": ({"count_ngrams"}, ["'</s>'"]),
    "ben-joint-probability": ({"mle_prob"}, ["joint"]),
    "cy-forgets-k-times-v": ({"add_k_prob"}, ["k * |V|"]),
    "dee-log10-perplexity": ({"perplexity"}, ["base of the logarithm"]),
}


# Chapter 2: student -> (the tasks the planted mistake costs, words their feedback must hold).
# A wrong elman_step also costs run_rnn, which calls it; the feedback of run_rnn says so.
EXPECTED_02 = {
    "ada-forgets-the-bias": (
        {"elman_step", "run_rnn"}, ["Add the biases", "The loop is right but the step is not"]
    ),
    "ben-feeds-h0-every-step": ({"run_rnn"}, ["instead of passing h0 to every step"]),
    "cy-textbook-gate-order": ({"lstm_step"}, ["torch's order i, f, g, o"]),
    "dee-pools-the-padding": (
        {"pool_outputs"}, ["not T - 1", "Padding is included in your mean",
                           "Padding is included in your max"]
    ),
}


CHAPTER_2_SHORTCUTS = '''
import torch
from coursepkg.rnn import elman_step


def run_rnn(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    model = torch.nn.RNN(x.shape[-1], h0.shape[-1], batch_first=True).to(x.dtype)
    with torch.no_grad():
        for name, value in zip(["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"],
                               [weight_ih, weight_hh, bias_ih, bias_hh]):
            getattr(model, name).copy_(value)
        out, h_n = model(x, h0[None])
    return out, h_n[0]


def lstm_step(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch._VF.lstm_cell(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh)


def pool_outputs(out, lengths, how):  # allowed: tensor methods such as split
    rows = []
    for row, n in zip(out.split(1), lengths.tolist()):
        real = row[0, :n]
        rows.append({"last": real[-1], "mean": real.mean(0), "max": real.amax(0)}[how])
    return torch.stack(rows)
'''


# Chapter 3: student -> (the tasks the planted mistake costs, words their feedback must hold).
# A wrong masked_attention also costs decoder_step, which calls it; the feedback of the step
# says so. The grader's ast use is serialised now, so two jobs are safe.
EXPECTED_03 = {
    "ada-softmax-over-the-batch": ({"attention_weights"}, ["normalises over the batch (dim=0)"]),
    "ben-masks-after-the-softmax": (
        {"masked_attention", "decoder_step"},
        ["Mask BEFORE the softmax", "The step is wired right but the attention in it is not"],
    ),
    "cy-forgets-tanh": ({"additive_scores"}, ["Apply tanh to the sum"]),
    "dee-forgets-the-context": (
        {"decoder_step"}, ["raised RuntimeError", "torch.cat([embedding, context], dim=-1)"]
    ),
}


CHAPTER_3_SHORTCUTS = '''
import torch
import torch.nn.functional as F
from coursepkg.attention import additive_scores as package_scores


def attention_weights(query, keys, scale):  # allowed: torch.softmax and einsum
    return torch.einsum("bsd,bd->bs", keys, query).mul(scale).softmax(dim=-1)


def masked_attention(query, keys, values, mask, scale):
    context = F.scaled_dot_product_attention(query[:, None], keys, values,
                                             attn_mask=mask[:, None], scale=scale)[:, 0]
    return context, attention_weights(query, keys, scale)


def additive_scores(query, keys, w_q, w_k, v, bias):
    return package_scores(query, keys, w_q, w_k, v, bias)


def decoder_step(embedding, state, encoder_states, mask, key_proj, lstm_params):
    h_prev, c_prev = state
    keys = encoder_states @ key_proj.T
    scores = (keys @ h_prev[:, :, None])[..., 0] / h_prev.shape[-1] ** 0.5
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    context = (weights[:, None] @ encoder_states)[:, 0]
    x_t = torch.cat([embedding, context], dim=-1)
    h_t, c_t = torch.lstm_cell(x_t, (h_prev, c_prev), *lstm_params)
    return h_t, c_t, context, weights
'''


# Chapter 4: student -> (the tasks the planted mistake costs, words their feedback must hold).
# A wrong attention or causal mask also costs self_attention, which calls them: its feedback
# says which part is wrong.
EXPECTED_04 = {
    "ada-forgets-sqrt-dk": ({"qkv_scores"}, ["Divide the scores by sqrt(d_k)"]),
    "ben-softmax-over-the-queries": (
        {"scaled_dot_product_attention", "self_attention"},
        ["normalises over the queries (dim=-2)", "The projections are right but the attention"],
    ),
    "cy-hides-the-diagonal": (
        {"causal_mask", "self_attention"},
        ["A position may attend to itself", "wired right but its causal mask is not"],
    ),
    "dee-minus-1e9": ({"scaled_dot_product_attention"}, ["not a large finite number"]),
    "eve-ignores-causal": ({"self_attention"}, ["With causal=True"]),
}


CHAPTER_4_SHORTCUTS = '''
import torch
import torch.nn.functional as F
from coursepkg.self_attention import SelfAttention


def qkv_scores(x, w_q, w_k, w_v):  # allowed: F.linear and einsum
    q, k, v = F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)
    return q, k, v, torch.einsum("btd,bsd->bts", q, k) / q.shape[-1] ** 0.5


def scaled_dot_product_attention(q, k, v, mask=None):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return out, scores.softmax(dim=-1)


def causal_mask(T):
    return torch.nn.Transformer.generate_square_subsequent_mask(T) == 0


def self_attention(x, w_q, w_k, w_v, causal=False):
    layer = SelfAttention(x.shape[-1], w_q.shape[0], w_v.shape[0], causal=causal).to(x.dtype)
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
    "dee-keys-from-the-decoder": ({"decoder_block"}, ["BOTH the keys and the values"]),
    "eve-forgets-to-crop": (
        {"sample"}, ["raised ValueError", "Crop the context to the last block_size tokens"]
    ),
    "fay-temperature-after-the-softmax": ({"sample"}, ["The temperature changes nothing"]),
}


# The blocks may call the chapter 5 attention they are given, and the sampler the model it is
# given (a coursepkg.transformer.TransformerLM), but not the package's layers or sampler.
CHAPTER_7_SHORTCUTS = '''
import torch
from coursepkg.lm import generate
from coursepkg.self_attention import causal_mask
from coursepkg.transformer import FeedForward


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


def decoder_block(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3,
                  memory_mask=None):  # allowed: chapter 4's causal_mask, the given modules
    h = norm1(x)
    x = x + self_attn(h, h, h, causal_mask(x.shape[1]))[0]
    h = norm2(x)
    x = x + cross_attn(h, memory, memory, memory_mask)[0]
    return x + ff(norm3(x))


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
    attempted", each planted mistake loses points exactly where expected, with feedback that
    names the mistake; the gradebook has one column per task."""
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
    assert {t["status"] for t in records["ed-untouched"]["tasks"]} == {"not attempted"}
    assert sum(t["points"] for t in records["ed-untouched"]["tasks"]) == 0
    gradebook = (tmp_path / "out" / "grades.csv").read_text().splitlines()
    assert gradebook[0].startswith(
        "student,file," + ",".join(f"{t.id} {t.func_name}" for t in tasks) + ","
    )
    zeros = ",".join("0" for _ in tasks)
    assert f"ed-untouched,ed-untouched.ipynb,{zeros},0,{total},not attempted" in gradebook
    full = ",".join(f"{m:g}" for m in maxima)
    assert f"sol-full-marks,sol-full-marks.ipynb,{full},{total},{total},passed" in gradebook
    for student, (costs, words) in expected.items():
        for task in records[student]["tasks"]:
            if task["func_name"] in costs:
                assert 0 <= task["points"] < task["max_points"], (student, task["func_name"])
                assert task["status"] in ("partial", "failed", "error"), (student, task)
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
        [("elman_step", "reference solution of task 2.1"), ("run_rnn", "torch.nn.RNN"),
         ("lstm_step", "torch.lstm_cell")],
        "pool_outputs",
    ),
    "03_attention": (
        CHAPTER_3_SHORTCUTS,
        [("masked_attention", "torch.nn.functional.scaled_dot_product_attention"),
         ("additive_scores", "reference solution of task 3.3"),
         ("decoder_step", "torch.lstm_cell")],
        "attention_weights",
    ),
    "04_self_attention": (
        CHAPTER_4_SHORTCUTS,
        [("scaled_dot_product_attention", "torch.nn.functional.scaled_dot_product_attention"),
         ("causal_mask", "torch.nn.Transformer.generate_square_subsequent_mask"),
         ("self_attention", "coursepkg.self_attention")],
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
         ("sample", "coursepkg.lm")],
        "decoder_block",
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
