"""The checks of chapter 7 (coursepkg.checks.ch07_transformer): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do.
"""

from __future__ import annotations

import copy
import json
import math
import re

import pytest
import torch
import torch.nn.functional as F
from checks_support import Chapter, all_cases, check_output, hidden_cases, run_task
from torch import nn

from coursepkg import checks, lm
from coursepkg import transformer as tf
from coursepkg.checks import ch07_transformer as ch07
from coursepkg.multihead import MultiHeadAttention
from coursepkg.self_attention import causal_mask

TASK_IDS = ("7.1", "7.2", "7.3", "7.4", "7.5", "7.6", "7.7")
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------
# Correct implementations written differently from the references
# ---------------------------------------------------------------------------------------------


def feed_forward(x, w1, b1, w2, b2, activation="relu"):
    """The notebook's solution."""
    act = F.relu if activation == "relu" else F.gelu
    return F.linear(act(F.linear(x, w1, b1)), w2, b2)


def ff_matmul_erf(x, w1, b1, w2, b2, activation="relu"):
    """Matrix products with the transposed weights; the GELU written with erf."""
    h = x @ w1.T + b1
    if activation == "relu":
        h = torch.clamp(h, min=0)
    else:
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    return h @ w2.T + b2


def ff_einsum_float64(x, w1, b1, w2, b2, activation="relu"):
    """einsum in float64, cast back at the end."""
    d = [t.double() for t in (x, w1, b1, w2, b2)]
    h = torch.einsum("...d,fd->...f", d[0], d[1]) + d[2]
    h = nn.ReLU()(h) if activation == "relu" else nn.GELU()(h)
    return (torch.einsum("...f,df->...d", h, d[3]) + d[4]).to(x.dtype)


def encoder_block(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    """The notebook's solution."""
    if norm_first:
        h = norm1(x)
        x = x + self_attn(h, h, h, mask)[0]
        return x + ff(norm2(x))
    x = norm1(x + self_attn(x, x, x, mask)[0])
    return norm2(x + ff(x))


def _layer_norm(norm, x):
    """A LayerNorm written out: mean and biased variance over the last dim."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _attention_by_hand(attn, query, key, value, mask=None):
    """chapter 5's multi-head forward, from the module's weights."""
    w_q, w_k, w_v = attn.in_proj_weight.chunk(3)
    b_q, b_k, b_v = attn.in_proj_bias.chunk(3)
    B, T, D = query.shape
    H = attn.n_heads
    q = F.linear(query, w_q, b_q).view(B, T, H, D // H).transpose(1, 2)
    k = F.linear(key, w_k, b_k).view(B, key.shape[1], H, D // H).transpose(1, 2)
    v = F.linear(value, w_v, b_v).view(B, key.shape[1], H, D // H).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)
    if mask is not None:
        if mask.dim() == 3:
            mask = mask.unsqueeze(1)
        scores = scores.masked_fill(~mask, NEG_INF)
    heads = torch.softmax(scores, dim=-1) @ v  # (B, H, T, Dh)
    return attn.out_proj(heads.transpose(1, 2).reshape(B, T, D))


def block_by_hand(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    """Norms and attention written out; one loop over the two sublayers."""
    sublayers = [(lambda h: _attention_by_hand(self_attn, h, h, h, mask), norm1), (ff, norm2)]
    for f, norm in sublayers:
        if norm_first:
            x = x + f(_layer_norm(norm, x))
        else:
            x = _layer_norm(norm, x + f(x))
    return x


def block_functional(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    """F.layer_norm with the norms' parameters, a residual helper."""

    def ln(norm, h):
        return F.layer_norm(h, norm.normalized_shape, norm.weight, norm.bias, norm.eps)

    def residual(h, f, norm):
        return h + f(ln(norm, h)) if norm_first else ln(norm, h + f(h))

    x = residual(x, lambda h: self_attn(query=h, key=h, value=h, mask=mask)[0], norm1)
    return residual(x, ff, norm2)








def sample(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
           generator=None):
    """The notebook's solution."""
    for _ in range(max_new_tokens):
        context = idx[:, -block_size:]  # (B, <= block_size)
        logits = model(context)[:, -1]  # (B, V): the last position predicts the next token
        if temperature == 0:
            next_token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, top_k).values[:, -1:]  # (B, 1)
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)  # (B, V)
            next_token = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        idx = torch.cat([idx, next_token], dim=1)
    return idx


def sample_powered_probs(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
                         generator=None):
    """softmax first, then probs ** (1 / temperature), top-k by sorting the probabilities,
    unnormalised weights for multinomial; no_grad and eval mode."""
    model.eval()
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(idx if idx.shape[1] <= block_size else idx[:, -block_size:])
            last = logits[:, logits.shape[1] - 1, :]
            if temperature == 0:
                choice = torch.argmax(last, dim=1).unsqueeze(1)
            else:
                weights = F.softmax(last, dim=1) ** (1.0 / temperature)
                if top_k is not None:
                    order = weights.sort(dim=1, descending=True).values
                    weights = torch.where(weights >= order[:, top_k - 1:top_k], weights, 0.0)
                choice = torch.multinomial(weights, num_samples=1, generator=generator)
            idx = torch.cat((idx, choice), dim=1)
    return idx


def sample_row_by_row(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
                      generator=None):
    """One sequence at a time through the draws (the rows draw in order, as a batch would),
    top-k before the temperature, the new tokens collected in a list."""
    seq = idx.clone()
    for _ in range(max_new_tokens):
        logits = model(seq[:, max(0, seq.shape[1] - block_size):])[:, -1].detach()
        column = []
        for row in logits:
            if top_k is not None:
                row = row.clone()
                row[row < row.topk(top_k).values.min()] = NEG_INF
            if temperature == 0:
                column.append(int(row.argmax()))
            else:
                probs = (row / temperature).softmax(dim=0)
                column.append(int(torch.multinomial(probs, 1, generator=generator)))
        seq = torch.cat([seq, torch.tensor(column)[:, None]], dim=1)
    return seq


def attention_step(x_t, w_q, w_k, w_v, cache_k, cache_v):
    """The notebook's solution."""
    q = F.linear(x_t, w_q)  # (B, Dk)
    keys = torch.cat([cache_k, F.linear(x_t, w_k)[:, None]], dim=1)
    values = torch.cat([cache_v, F.linear(x_t, w_v)[:, None]], dim=1)
    scores = (keys @ q[:, :, None])[:, :, 0] / math.sqrt(q.shape[-1])
    return (torch.softmax(scores, dim=-1)[:, None, :] @ values)[:, 0], keys, values


def step_by_full_recomputation(x_t, w_q, w_k, w_v, cache_k, cache_v):
    """Correct, written differently: the whole row of causal attention, the new position last,
    through F.scaled_dot_product_attention's math written out with a log-sum-exp."""
    keys = torch.cat([cache_k, (x_t @ w_k.T).unsqueeze(1)], dim=1)
    values = torch.cat([cache_v, (x_t @ w_v.T).unsqueeze(1)], dim=1)
    scores = torch.einsum("bd,bpd->bp", x_t @ w_q.T, keys) / w_q.shape[0] ** 0.5
    weights = (scores - torch.logsumexp(scores, dim=-1, keepdim=True)).exp()
    return torch.einsum("bp,bpd->bd", weights, values), keys, values


def step_float64_loops(x_t, w_q, w_k, w_v, cache_k, cache_v):
    """Correct: one sequence at a time, in float64, cast back."""
    outs, all_k, all_v = [], [], []
    for b in range(x_t.shape[0]):
        x = x_t[b].double()
        k = torch.cat([cache_k[b].double(), (w_k.double() @ x)[None]])
        v = torch.cat([cache_v[b].double(), (w_v.double() @ x)[None]])
        a = torch.softmax(k @ (w_q.double() @ x) / math.sqrt(k.shape[-1]), dim=0)
        outs.append(a @ v)
        all_k.append(k)
        all_v.append(v)
    dtype = x_t.dtype
    return (torch.stack(outs).to(dtype), torch.stack(all_k).to(dtype),
            torch.stack(all_v).to(dtype))


# 7.5: every training of this file is kept per process (seed counts on the first call only),
# so that the generic tests, which call each function on many cases, train each one once.
_TRAINED = {}


def _once(name, train):
    def trained(train_ids, config, seed):
        if name not in _TRAINED:
            _TRAINED[name] = train(train_ids, config, seed)
        return copy.deepcopy(_TRAINED[name])

    trained.__name__ = name
    return trained


def _adam_big_batches(train_ids, config, seed):
    """Correct, written differently: plain Adam at a constant 3e-3 after a warm-up, 32 windows
    per step, 200 steps, no clipping; returns the state_dict."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = tf.TransformerLM(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=6e-3)
    T = config.block_size
    for step in range(200):
        optimizer.param_groups[0]["lr"] = 6e-3 * min(1.0, (step + 1) / 10)
        starts = torch.randint(0, len(train_ids) - T - 1, (32,), generator=gen)
        x = torch.stack([train_ids[s:s + T] for s in starts.tolist()])
        y = torch.stack([train_ids[s + 1:s + T + 1] for s in starts.tolist()])
        loss = F.cross_entropy(model(x).transpose(1, 2), y)
        model.zero_grad()
        loss.backward()
        optimizer.step()
    return model.state_dict()


train_with_adam_and_big_batches = _once("train_with_adam_and_big_batches", _adam_big_batches)


def parameters_by_formula():
    """Correct: 12 D^2 + 13 D per block (F = 4 D), then the embedding, final norm and head."""
    config = ch07.capstone_config()
    D, V, L = config.d_model, config.vocab_size, config.n_layers
    return L * (12 * D * D + 13 * D) + 2 * V * D + 2 * D + V


def uniform_nats_from_a_flat_model():
    """Correct: the cross-entropy of all-zero logits."""
    V = ch07.capstone_config().vocab_size
    return F.cross_entropy(torch.zeros(1, V), torch.tensor([0])).item()


CORRECT = {
    "7.1": [ch07.feed_forward, feed_forward, ff_matmul_erf, ff_einsum_float64],
    "7.2": [ch07.encoder_block, encoder_block, block_by_hand, block_functional],
    "7.3": [ch07.attention_step, attention_step, step_by_full_recomputation,
            step_float64_loops],
    "7.4": [ch07.sample, sample, sample_powered_probs, sample_row_by_row],
    "7.5": [ch07.train_transformer_lm, train_with_adam_and_big_batches],
    "7.6": [checks.get_task("7.6").reference, parameters_by_formula],
    "7.7": [checks.get_task("7.7").reference, uniform_nats_from_a_flat_model],
}


# ---------------------------------------------------------------------------------------------
# Plausible wrong implementations, each with the hint it must get
# ---------------------------------------------------------------------------------------------


def _named(func, name):
    func.__name__ = name
    return func


def _ff_with(*, where="between", act=None, bias=True, residual=False):
    """A student's feed-forward network with one mistake switched on (defaults: right)."""

    def ff(x, w1, b1, w2, b2, activation="relu"):
        f = act or (F.relu if activation == "relu" else F.gelu)
        h = f(x) if where == "before" else x
        h = F.linear(h, w1, b1 if bias else None)
        if where == "between":
            h = f(h)
        out = F.linear(h, w2, b2)
        if where == "after":
            out = f(out)
        return x + out if residual else out

    return ff


ff_no_activation = _named(_ff_with(where="none"), "ff_no_activation")
ff_activation_after = _named(_ff_with(where="after"), "ff_activation_after")
ff_activation_before = _named(_ff_with(where="before"), "ff_activation_before")
ff_always_relu = _named(_ff_with(act=F.relu), "ff_always_relu")


def ff_gelu_tanh(x, w1, b1, w2, b2, activation="relu"):
    """GPT-2's code: the tanh approximation of the GELU."""
    h = F.linear(x, w1, b1)
    h = F.relu(h) if activation == "relu" else F.gelu(h, approximate="tanh")
    return F.linear(h, w2, b2)

ff_no_first_bias = _named(_ff_with(bias=False), "ff_no_first_bias")
ff_with_residual = _named(_ff_with(residual=True), "ff_with_residual")


def ff_not_transposed(x, w1, b1, w2, b2, activation="relu"):
    h = F.relu(x @ w1 + b1) if activation == "relu" else F.gelu(x @ w1 + b1)
    return h @ w2 + b2


def ff_hidden_only(x, w1, b1, w2, b2, activation="relu"):
    return F.relu(F.linear(x, w1, b1))


def _encoder_with(*, norm_first=None, residual=(True, True), norm="asked", norms=(0, 1),
                  use_mask=True, parallel=False, normalised_residual=False):
    """A student's encoder block with one mistake switched on (defaults: right)."""

    def block(x, self_attn, ff, norm1, norm2, norm_first_=False, mask=None):
        pre = norm_first_ if norm_first is None else norm_first
        pair = (norm1, norm2)
        n1, n2 = pair[norms[0]], pair[norms[1]]
        m = mask if use_mask else None

        def attend(h):
            return self_attn(h, h, h, m)[0]

        def sub(inp, f, n, res, source):
            if norm == "never":
                return inp * res + f(source)
            if norm == "twice":
                return n(inp * res + f(n(source)))
            if pre:
                h = n(source)
                return (h if normalised_residual else inp) * res + f(h)
            return n(inp * res + f(source))

        h = sub(x, attend, n1, residual[0], x)
        return sub(h, ff, n2, residual[1], x if parallel else h)

    return block


block_always_post = _named(_encoder_with(norm_first=False), "block_always_post")
block_always_pre = _named(_encoder_with(norm_first=True), "block_always_pre")
block_no_attention_residual = _named(_encoder_with(residual=(False, True)),
                                     "block_no_attention_residual")
block_no_ff_residual = _named(_encoder_with(residual=(True, False)), "block_no_ff_residual")
block_no_residuals = _named(_encoder_with(residual=(False, False)), "block_no_residuals")
block_never_normalises = _named(_encoder_with(norm="never"), "block_never_normalises")
block_normalises_twice = _named(_encoder_with(norm="twice"), "block_normalises_twice")
block_norms_swapped = _named(_encoder_with(norms=(1, 0)), "block_norms_swapped")
block_one_norm = _named(_encoder_with(norms=(0, 0)), "block_one_norm")
block_ignores_mask = _named(_encoder_with(use_mask=False), "block_ignores_mask")
block_parallel = _named(_encoder_with(parallel=True), "block_parallel")
block_normalised_residual = _named(_encoder_with(normalised_residual=True),
                                   "block_normalised_residual")


def block_pre_norm_overwrites_x(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    """The pre-norm branch written as x = norm1(x); x = x + attn(x): the residual carries the
    normalised x."""
    if norm_first:
        x = norm1(x)
        x = x + self_attn(x, x, x, mask)[0]
        x = norm2(x)
        return x + ff(x)
    x = norm1(x + self_attn(x, x, x, mask)[0])
    return norm2(x + ff(x))


def block_norm_inside(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    """x + norm(f(x)) for both variants."""
    x = x + norm1(self_attn(x, x, x, mask)[0])
    return x + norm2(ff(x))


def block_forgets_out(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    x = norm1(x + self_attn(x, x, x, mask))  # the pair (out, weights)
    return norm2(x + ff(x))


def block_returns_weights(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    return self_attn(x, x, x, mask)[1]










def _sample_with(*, crop="last", position=-1, temper="divide", keep="right", greedy=False,
                 append=True, softmax_dim=-1, only_new=False):
    """A student's sampling loop with one mistake switched on (defaults: right)."""

    def run(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
            generator=None):
        seq, new = idx, []
        for _ in range(max_new_tokens):
            context = {"last": seq[:, -block_size:], "none": seq, "first": seq[:, :block_size],
                       "short": seq[:, -(block_size - 1):]}[crop]
            logits = model(context)[:, position]
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                if temper == "divide":
                    logits = logits / temperature
                elif temper == "multiply":
                    logits = logits * temperature
                if top_k is not None and keep != "none":
                    kth = torch.topk(logits, top_k).values[:, -1:]
                    if keep == "<=":
                        logits = logits.masked_fill(logits <= kth, NEG_INF)
                    else:
                        logits = logits.masked_fill(logits < kth, NEG_INF)
                probs = torch.softmax(logits, dim=softmax_dim)
                if temper == "after":
                    probs = probs / temperature
                if greedy:
                    nxt = probs.argmax(dim=-1, keepdim=True)
                else:
                    nxt = torch.multinomial(probs, 1, generator=generator)
            new.append(nxt)
            if append:
                seq = torch.cat([seq, nxt], dim=1)
        out = torch.cat(new, dim=1)
        return out if only_new else torch.cat([idx, out], dim=1)

    return run


sample_not_cropped = _named(_sample_with(crop="none"), "sample_not_cropped")
sample_crops_the_start = _named(_sample_with(crop="first"), "sample_crops_the_start")
sample_crop_one_short = _named(_sample_with(crop="short"), "sample_crop_one_short")
sample_temperature_after_softmax = _named(_sample_with(temper="after"),
                                          "sample_temperature_after_softmax")
sample_temperature_multiplied = _named(_sample_with(temper="multiply"),
                                       "sample_temperature_multiplied")
sample_first_position = _named(_sample_with(position=0), "sample_first_position")
sample_ignores_top_k = _named(_sample_with(keep="none"), "sample_ignores_top_k")
sample_top_k_strict = _named(_sample_with(keep="<="), "sample_top_k_strict")
sample_greedy = _named(_sample_with(greedy=True), "sample_greedy")
sample_never_appends = _named(_sample_with(append=False), "sample_never_appends")
sample_softmax_over_batch = _named(_sample_with(softmax_dim=0), "sample_softmax_over_batch")
sample_only_new = _named(_sample_with(only_new=True), "sample_only_new")


def sample_top_k_subset(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
                        generator=None):
    """Draws among the k kept probabilities and maps back through topk's indices."""
    for _ in range(max_new_tokens):
        logits = model(idx[:, -block_size:])[:, -1]
        if temperature == 0:
            nxt = logits.argmax(dim=-1, keepdim=True)
        elif top_k is None:
            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1,
                                    generator=generator)
        else:
            values, indices = torch.topk(logits / temperature, top_k)
            pick = torch.multinomial(torch.softmax(values, -1), 1, generator=generator)
            nxt = indices.gather(-1, pick)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def sample_divides_by_zero(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
                           generator=None):
    """No special case for temperature 0."""
    for _ in range(max_new_tokens):
        logits = model(idx[:, -block_size:])[:, -1] / temperature
        if top_k is not None:
            kth = torch.topk(logits, top_k).values[:, -1:]
            logits = logits.masked_fill(logits < kth, NEG_INF)
        nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def starter_encoder_block(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    """The exercise's starter code of the debug task 7.2 (three planted bugs)."""
    if norm_first:
        h = norm1(x)
        x = x + self_attn(h, h, h)[0]
        h = norm2(x)
        return h + ff(h)
    y = norm1(x + self_attn(x, x, x, mask)[0])
    return norm2(y + ff(x))


def _mistaken_step(x_t, w_q, w_k, w_v, cache_k, cache_v, *, scale=None, append="end",
                   self_included=True, roles="qkv", axis=-1):
    """One cache step with a knob turned to a known mistake (the grader's tripwire refuses
    calls into the checks, so the test's wrong implementations are written here)."""
    weights = {"q": w_q, "k": w_k}
    q, k, v = x_t @ weights[roles[0]].T, x_t @ weights[roles[1]].T, x_t @ w_v.T
    pair = [(cache_k, k[:, None]), (cache_v, v[:, None])]
    keys, values = (torch.cat(p if append == "end" else p[::-1], dim=1) for p in pair)
    read_k, read_v = (keys, values) if self_included else (cache_k, cache_v)
    scores = torch.einsum("bd,bpd->bp", q, read_k) / math.sqrt(
        w_q.shape[0] if scale is None else scale)
    out = torch.einsum("bp,bpd->bd", torch.softmax(scores, dim=axis), read_v)
    return out, keys, values


def _step_with(**how):
    def step(*args):
        return _mistaken_step(*args, **how)

    return step


step_unscaled = _named(_step_with(scale=1.0), "step_unscaled")


def step_scaled_by_dv(x_t, w_q, w_k, w_v, cache_k, cache_v):
    return _mistaken_step(x_t, w_q, w_k, w_v, cache_k, cache_v, scale=float(w_v.shape[0]))


step_prepends = _named(_step_with(append="start"), "step_prepends")
step_query_and_key_swapped = _named(_step_with(roles="kq"), "step_query_and_key_swapped")
step_softmax_over_batch = _named(_step_with(axis=0), "step_softmax_over_batch")


def step_cache_only(x_t, w_q, w_k, w_v, cache_k, cache_v):
    """Appends the new key and value, but attends over the old cache only."""
    return _mistaken_step(x_t, w_q, w_k, w_v, cache_k, cache_v, self_included=False)


def step_forgets_to_append(x_t, w_q, w_k, w_v, cache_k, cache_v):
    """Attends over the cache only and hands it on unchanged."""
    out, _, _ = _mistaken_step(x_t, w_q, w_k, w_v, cache_k, cache_v, self_included=False)
    return out, cache_k, cache_v


def untrained(train_ids, config, seed):
    torch.manual_seed(seed)
    return tf.TransformerLM(config)


def _short_training(train_ids, config, seed, *, steps, shift=1):
    """Adam at 1e-2 on 16 windows; targets ``shift`` positions after the inputs."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = tf.TransformerLM(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    T = config.block_size
    for _ in range(steps):
        starts = torch.randint(0, len(train_ids) - T - 1, (16,), generator=gen).tolist()
        x = torch.stack([train_ids[s:s + T] for s in starts])
        y = torch.stack([train_ids[s + shift:s + shift + T] for s in starts])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


targets_not_shifted = _once("targets_not_shifted", lambda ids, config, seed: _short_training(
    ids, config, seed, steps=40, shift=0))
trained_on_shuffled_text = _once("trained_on_shuffled_text", lambda ids, config, seed: (
    _short_training(ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(1))],
                    config, seed, steps=80)))
too_few_steps = _once("too_few_steps", lambda ids, config, seed: _short_training(
    ids, config, seed, steps=60))

QUESTION_HINT_76 = checks.get_task("7.6").judge(0, 1, {}).hint
QUESTION_HINT_77 = checks.get_task("7.7").judge(0, 1, {}).hint


def parameters_without_biases():
    config = ch07.capstone_config()
    D, V, L = config.d_model, config.vocab_size, config.n_layers
    return L * 12 * D * D + 2 * V * D


def parameters_of_one_block():
    config = ch07.capstone_config()
    D, V = config.d_model, config.vocab_size
    return 12 * D * D + 13 * D + 2 * V * D + 2 * D + V


def parameters_with_tied_head():
    config = ch07.capstone_config()
    D, V, L = config.d_model, config.vocab_size, config.n_layers
    return L * (12 * D * D + 13 * D) + V * D + 2 * D + V


def uniform_bits():
    return math.log2(ch07.capstone_config().vocab_size)


def uniform_perplexity():
    return float(ch07.capstone_config().vocab_size)


def uniform_over_the_alphabet():
    return math.log(26)


RUNTIME_HINTS = {task_id: checks.get_task(task_id).error_hints.get("RuntimeError")
                 for task_id in TASK_IDS}

WRONG = {
    "7.1": [
        (ff_no_activation, ch07.HINT_FF_NO_ACTIVATION),
        (ff_activation_after, ch07.HINT_FF_ACTIVATION_AFTER),
        (ff_activation_before, ch07.HINT_FF_ACTIVATION_BEFORE),
        (ff_always_relu, ch07.HINT_FF_WRONG_ACTIVATION),
        (ff_gelu_tanh, ch07.HINT_FF_GELU_TANH),
        (ff_no_first_bias, ch07.HINT_FF_BIAS),
        (ff_with_residual, ch07.HINT_FF_RESIDUAL),
        (ff_not_transposed, ch07.HINT_FF_NOT_TRANSPOSED),
        (ff_hidden_only, ch07.HINT_FF_HIDDEN),
    ],
    "7.2": [
        (block_always_post, ch07.HINT_POST_FOR_PRE),
        (block_always_pre, ch07.HINT_PRE_FOR_POST),
        (block_no_attention_residual, f"{ch07.PREFIX_ATTN_ONLY} {ch07.HINT_NO_RESIDUAL}"),
        (block_no_ff_residual, f"{ch07.PREFIX_FF_ONLY} {ch07.HINT_NO_RESIDUAL}"),
        (block_no_residuals, ch07.HINT_NO_RESIDUAL),
        (block_never_normalises, ch07.HINT_NO_NORM),
        (block_normalises_twice, ch07.HINT_NORM_TWICE),
        (block_norm_inside, ch07.HINT_NORM_INSIDE),
        (block_norms_swapped, ch07.HINT_NORMS_SWAPPED),
        (block_one_norm, ch07.HINT_ONE_NORM),
        (block_ignores_mask, ch07.HINT_MASK_NOT_PASSED),
        (block_parallel, ch07.HINT_FF_READS_INPUT),
        (block_normalised_residual, ch07.HINT_RESIDUAL_NORMALISED),
        (block_pre_norm_overwrites_x, ch07.HINT_RESIDUAL_NORMALISED),
        (block_forgets_out, "self_attn returns a pair (out, weights)"),
        (block_returns_weights, ch07.HINT_BLOCK_WEIGHTS),
    ],
    "7.3": [
        (step_unscaled, ch07.HINT_STEP_NO_SCALE),
        (step_scaled_by_dv, ch07.HINT_STEP_WRONG_SCALE),
        (step_prepends, ch07.HINT_STEP_PREPENDED),
        (step_query_and_key_swapped, ch07.HINT_STEP_PROJECTIONS),
        (step_softmax_over_batch, ch07.HINT_STEP_SOFTMAX_AXIS),
        (step_cache_only, ch07.HINT_STEP_CACHE_ONLY),
        (step_forgets_to_append, ch07.HINT_STEP_CACHE_ONLY),
    ],
    "7.4": [
        (sample_not_cropped, ch07.HINT_NOT_CROPPED),
        (sample_crops_the_start, ch07.HINT_CROP_FIRST),
        (sample_crop_one_short, ch07.HINT_CROP_OFF_BY_ONE),
        (sample_temperature_after_softmax, ch07.HINT_TEMPERATURE_NO_EFFECT),
        (sample_temperature_multiplied, ch07.HINT_TEMPERATURE_MULTIPLIED),
        (sample_first_position, ch07.HINT_FIRST_POSITION),
        (sample_ignores_top_k, ch07.HINT_NO_TOP_K),
        (sample_top_k_strict, ch07.HINT_TOP_K_OFF_BY_ONE),
        (sample_greedy, ch07.HINT_GREEDY),
        (sample_never_appends, ch07.HINT_NOT_APPENDED),
        (sample_softmax_over_batch, ch07.HINT_SOFTMAX_BATCH),
        (sample_only_new, ch07.HINT_ONLY_NEW),
        (sample_top_k_subset, ch07.HINT_TOP_K_SUBSET),
        (sample_divides_by_zero, "at temperature 0 take the argmax"),
    ],
    "7.5": [
        (untrained, ch07.HINT_CAPSTONE_FAR),
        (targets_not_shifted, ch07.HINT_CAPSTONE_WORSE_THAN_UNIFORM),
        (trained_on_shuffled_text, ch07.HINT_CAPSTONE_FAR),
        (too_few_steps, ch07.HINT_CAPSTONE_PARTIAL),
    ],
    "7.6": [
        (parameters_without_biases, ch07.HINT_Q_PARAMETERS_BIASES),
        (parameters_of_one_block, ch07.HINT_Q_PARAMETERS_ONE_BLOCK),
        (parameters_with_tied_head, ch07.HINT_Q_PARAMETERS_TIED),
        (lambda: 1000, QUESTION_HINT_76),
    ],
    "7.7": [
        (uniform_bits, ch07.HINT_Q_UNIFORM_BITS),
        (uniform_perplexity, ch07.HINT_Q_UNIFORM_PERPLEXITY),
        (uniform_over_the_alphabet, ch07.HINT_Q_UNIFORM_ALPHABET),
        (lambda: 1.0, QUESTION_HINT_77),
    ],
}

def stub(*args):
    raise NotImplementedError("Task 7.1: write feed_forward")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="07_transformer",
    tasks={"7.1": ("feed_forward", 3, 8), "7.2": ("encoder_block", 4, 10),
           "7.3": ("attention_step", 5, 10), "7.4": ("sample", 5, 12),
           "7.5": ("train_transformer_lm", 6, 18), "7.6": ("capstone_parameters", 2, 2),
           "7.7": ("uniform_nats", 2, 2)},
    hints=ch07,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=1,
    min_hidden=1,
    public_points=(2, 6),
    forbidden=("coursepkg.lm",),
    package="coursepkg.lm",
    not_finite_hint=ch07.HINT_NOT_FINITE,
    failure_reports=(
        ("7.2", block_ignores_mask, "Task 7.2 encoder_block: 2/4 points",
         ("  FAIL  [0/1] pre-norm with a causal mask (T, T): a GPT block: "
          + ch07.HINT_MASK_NOT_PASSED,)),
        ("7.2", starter_encoder_block, "Task 7.2 encoder_block: 0/4 points", ()),
        ("7.3", step_unscaled, "Task 7.3 attention_step: 1/5 points",
         ("  FAIL  [0/2] 2 sequences, a cache of 4 positions (the projections of a prefix): "
          + ch07.HINT_STEP_NO_SCALE,)),
        ("7.4", sample_temperature_multiplied, "Task 7.4 sample: 2/5 points",
         (ch07.HINT_TEMPERATURE_MULTIPLIED,)),
    ),
    # chapter 5's MultiHeadAttention is what the blocks are given; 7.4 calls a TransformerLM
    allowed=("coursepkg.multihead",),
    typed=("7.1", "7.2", "7.3", "7.4"),
    seeded=("7.1", "7.2", "7.3", "7.4", "7.5"),
    scalar_inputs=("7.6", "7.7"),
    exact_results=("7.4", "7.5", "7.6", "7.7"),
    more_hints=frozenset(ch07.ENCODER_HINTS) | set(ch07.SAMPLE_HINTS),
    # a wrong source of keys, values or queries crashes where the lengths differ: the error's
    # hint says where each comes from
    crashes_excused=True,
    wrong_types=(
        ("7.1", lambda *a: feed_forward(*a).tolist(),
         "expected the output as a torch.Tensor, got list"),
        ("7.2", lambda x, attn, *rest: attn(x, x, x), "got tuple"),
        ("7.3", lambda *a: attention_step(*a)[0], "expected a tuple of 3 (out, keys, values)"),
        ("7.5", lambda *a: [1, 2], "expected the trained model or its state_dict(), got list"),
        ("7.4", lambda *a: sample(*a).tolist(), "expected the token ids as a torch.Tensor"),
        ("7.4", lambda *a: sample(*a).float(), "got dtype torch.float32"),
    ),
    hidden_type_hints={"7.4": "Return one tensor of token ids, (B, T + max_new_tokens)."},
    forged={
        "7.2": lambda good: [{**good, "shape": [80]}, {**good, "dtype": None}],
        "7.4": lambda good: [
            {**good, "shape": [4, 5]}, {**good, "tokens": ["1"] * 20},
            {**good, "tokens": [1.0] * 20}, {**good, "extra": 1},
            {**good, "tokens": good["tokens"][:-1]}, {**good, "tokens": [True] * 20},
            {"shape": [2, 10], "data": good["tokens"]},
        ],
    },
    forbidden_calls={lm.generate: "coursepkg.lm", ch07.encoder_block: None, ch07.sample: None},
    allowed_calls=(MultiHeadAttention.forward, causal_mask, F.linear, F.relu, F.gelu,
                   F.layer_norm, nn.LayerNorm.forward, nn.Sequential.forward, torch.Tensor.tril,
                   torch.einsum, torch.multinomial, torch.topk, torch.softmax,
                   torch.Tensor.masked_fill, torch.cat),
)


def _inputs(task_id, case):
    return checks.get_task(task_id).build_args(case.args)


# ---------------------------------------------------------------------------------------------
# The registry and the cases
# ---------------------------------------------------------------------------------------------


def test_the_edge_cases_are_there():
    def hidden(task_id):
        return [case.args for case in hidden_cases(checks.get_task(task_id))]

    assert any(math.prod(a["lead"]) == 1 for a in hidden("7.1"))
    assert any(a["F"] < a["D"] for a in hidden("7.1"))
    assert any(len(a["lead"]) == 3 for a in hidden("7.1"))
    assert any(a["T"] == 1 for a in hidden("7.2"))
    assert any(a["H"] == 1 for a in hidden("7.2"))
    assert any(a["B"] == 1 for a in hidden("7.2"))
    assert {a["norm_first"] for a in hidden("7.2")} == {False, True}
    steps = hidden("7.3")
    assert {a["P"] for a in steps} >= {0, 1} and any(a["P"] >= 20 for a in steps)
    assert any(a["dtype"] == "float64" for a in steps)
    samples = hidden("7.4")
    assert any(a["block_size"] == 1 for a in samples)
    assert any(a["top_k"] == 1 for a in samples) and any(a["top_k"] == a["V"] for a in samples)
    assert any(a["B"] == 1 and a["T"] == 1 for a in samples)
    assert {a["pos"] for a in samples} == {"learned", "sinusoidal", "rope"}
    assert any(a["temperature"] == 0 for a in samples)


def test_the_public_cases_let_the_mistakes_show():
    """Both variants of the block, masks and no masks; a cache step with an empty cache, a
    prefix's cache and any cache, widths that differ; every public sample grows past
    block_size, most with a temperature other than 1 and
    some with top-k, on a model that refuses long contexts and on one that reads them."""
    blocks = [c.args for c in checks.get_task("7.2").public_cases]
    assert {a["norm_first"] for a in blocks} == {False, True}
    assert {a["mask"] is None for a in blocks} == {False, True}
    assert {a["activation"] for a in blocks} == {"relu", "gelu"}
    steps = [c.args for c in checks.get_task("7.3").public_cases]
    assert {a["P"] == 0 for a in steps} == {False, True}
    assert {a["prefix"] for a in steps} == {False, True}
    assert all(len({a["D"], a["Dk"], a["Dv"]}) == 3 for a in steps)
    samples = [c.args for c in checks.get_task("7.4").public_cases]
    assert all(a["T"] + a["new"] > a["block_size"] + 1 for a in samples)
    assert any(a["T"] > a["block_size"] for a in samples)
    assert sum(a["temperature"] not in (0.0, 1.0) for a in samples) >= 3
    assert sum(a["top_k"] is not None for a in samples) >= 2
    assert {a["pos"] for a in samples} == {"learned", "sinusoidal"}
    assert any(a["temperature"] == 0 for a in samples)
    assert any(c.args["F"] == c.args["D"] for c in checks.get_task("7.1").public_cases)


def test_inputs_are_reproducible_and_fresh():
    for task_id in ("7.2",):
        task = checks.get_task(task_id)
        case = task.cases[1]
        first, second = task.build_args(case.args), task.build_args(case.args)
        for a, b in zip(first, second, strict=True):
            if isinstance(a, nn.Module):
                assert a is not b
                for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(),
                                             strict=True):
                    assert torch.equal(p, q) and p is not q, name
            elif isinstance(a, torch.Tensor):
                assert torch.equal(a, b) and a is not b
    task = checks.get_task("7.4")
    first, second = task.build_args(task.cases[0].args), task.build_args(task.cases[0].args)
    assert torch.equal(first[1], second[1]) and first[0] is not second[0]
    assert first[-1] is not second[-1]
    assert torch.equal(torch.rand(5, generator=first[-1]), torch.rand(5, generator=second[-1]))


def test_the_norms_and_sublayers_are_distinct_and_seeded():
    """Every norm has its own affine parameters (so swapping two shows) and nothing keeps
    torch's initialisation (zero biases would hide a missing one)."""
    x, self_attn, ff, norm1, norm2, _, _ = _inputs("7.2", checks.get_task("7.2").cases[0])
    assert not torch.allclose(norm1.weight, norm2.weight)
    assert not torch.allclose(norm1.bias, torch.zeros_like(norm1.bias))
    assert self_attn.in_proj_bias.abs().min() > 0 and ff[0].bias.abs().min() > 0
    assert isinstance(self_attn, MultiHeadAttention) and isinstance(ff[1], nn.ReLU)
    assert not self_attn.training
    model = _inputs("7.4", checks.get_task("7.4").cases[0])[0]
    assert isinstance(model, tf.TransformerLM) and model.pos == "learned"
    with torch.no_grad():
        logits = model(_inputs("7.4", checks.get_task("7.4").cases[0])[1])
    assert 0.5 < float(logits.std()) < 4  # neither flat nor one-hot distributions


def test_references_agree_with_torch():
    """7.2's reference equals torch's layer holding the same weights (post-norm and pre-norm;
    torch's masks are True = NOT allowed); 7.3's torch's attention over the cache and the new
    position; 7.1's the formula; 7.4's a hand loop."""
    for case in all_cases(checks.get_task("7.2")):
        x, self_attn, ff, norm1, norm2, norm_first, mask = _inputs(
            "7.2", type(case)(case.name, 1, {**case.args, "dtype": "float64"}))
        D, H = x.shape[-1], self_attn.n_heads
        torch.manual_seed(0)
        ref = nn.TransformerEncoderLayer(D, H, ff[0].out_features, dropout=0.0,
                                         activation=case.args["activation"],
                                         batch_first=True, norm_first=norm_first).double()
        state = {"self_attn.in_proj_weight": self_attn.in_proj_weight,
                 "self_attn.in_proj_bias": self_attn.in_proj_bias,
                 "self_attn.out_proj.weight": self_attn.out_proj.weight,
                 "self_attn.out_proj.bias": self_attn.out_proj.bias,
                 "linear1.weight": ff[0].weight, "linear1.bias": ff[0].bias,
                 "linear2.weight": ff[2].weight, "linear2.bias": ff[2].bias,
                 "norm1.weight": norm1.weight, "norm1.bias": norm1.bias,
                 "norm2.weight": norm2.weight, "norm2.bias": norm2.bias}
        ref.load_state_dict(state)
        ref.train()  # dropout 0; train mode keeps torch off its fused fast path
        torch_mask = None
        if mask is not None:
            B, T = x.shape[:2]
            full = (mask.unsqueeze(1) if mask.dim() == 3 else mask).expand(B, H, T, T)
            torch_mask = ~full.reshape(B * H, T, T)
        with torch.no_grad():
            expected = ref(x, src_mask=torch_mask)
        torch.testing.assert_close(ch07.encoder_block(x, self_attn, ff, norm1, norm2,
                                                      norm_first, mask), expected)
    for case in all_cases(checks.get_task("7.3")):  # one step = the last row of attention
        x_t, w_q, w_k, w_v, cache_k, cache_v = _inputs("7.3", case)
        out, keys, values = ch07.attention_step(x_t, w_q, w_k, w_v, cache_k, cache_v)
        q = (x_t @ w_q.T)[:, None, :]  # (B, 1, Dk)
        expected = F.scaled_dot_product_attention(q, keys, values)[:, 0]
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(keys[:, :-1], cache_k)
        torch.testing.assert_close(values[:, -1], x_t @ w_v.T)
    for case in all_cases(checks.get_task("7.1")):
        x, w1, b1, w2, b2, activation = _inputs("7.1", case)
        act = {"relu": torch.relu, "gelu": F.gelu}[activation]
        torch.testing.assert_close(ch07.feed_forward(x, w1, b1, w2, b2, activation),
                                   act(x @ w1.T + b1) @ w2.T + b2)
    for case in all_cases(checks.get_task("7.4")):
        assert torch.equal(ch07.sample(*_inputs("7.4", case)), sample(*_inputs("7.4", case)))


# ---------------------------------------------------------------------------------------------
# Correct implementations: full marks
# ---------------------------------------------------------------------------------------------


def test_the_sampler_is_checked_against_the_package():
    """The reference is coursepkg.lm.generate: the same draws whatever the model's mode."""
    task = checks.get_task("7.4")
    for case in all_cases(task):
        model, idx, n, block_size, temperature, top_k, draws = _inputs("7.4", case)
        model.train()
        got = lm.generate(model, idx, n, temperature=temperature, top_k=top_k,
                          generator=draws, block_size=block_size)
        assert model.training
        assert torch.equal(got, ch07.sample(*_inputs("7.4", case)))
        assert got.shape == (case.args["B"], case.args["T"] + n)


# ---------------------------------------------------------------------------------------------
# Wrong implementations: lose points and get the hint that names their mistake
# ---------------------------------------------------------------------------------------------


def test_the_variant_mistakes_show_in_every_case():
    """A block wired as the other variant loses exactly the cases of the variant it ignores;
    forgetting a residual, a norm or the causal mask costs every case it can."""
    task = checks.get_task("7.2")
    for func, pre in ((block_always_post, True), (block_always_pre, False)):
        result = run_task("7.2", func, hidden=True)
        assert [c.status == "passed" for c in result.cases] == [
            case.args["norm_first"] != pre for case in all_cases(task)]
    for func in (block_no_attention_residual, block_no_ff_residual, block_never_normalises,
                 block_norms_swapped):
        assert run_task("7.2", func, hidden=True).points == 0, func.__name__
    result = run_task("7.3", step_unscaled, hidden=True)  # one key: its weight is 1 anyway
    assert [c.status == "passed" for c in result.cases] == [
        case.args["P"] == 0 for case in all_cases(checks.get_task("7.3"))]
    assert run_task("7.3", step_query_and_key_swapped, hidden=True).points == 0


def test_the_residual_of_the_normalised_input_is_a_pre_norm_mistake_only():
    result = run_task("7.2", block_pre_norm_overwrites_x, hidden=True)
    task = checks.get_task("7.2")
    assert [c.status == "passed" for c in result.cases] == [
        not case.args["norm_first"] for case in all_cases(task)]
    for case in result.cases:
        assert case.status == "passed" or case.message.startswith(
            ch07.HINT_RESIDUAL_NORMALISED)


def test_the_mask_mistakes_show_only_where_there_is_a_mask():
    for task_id, func, key in (("7.2", block_ignores_mask, "mask"),):
        result = run_task(task_id, func, hidden=True)
        task = checks.get_task(task_id)
        assert [c.status == "passed" for c in result.cases] == [
            case.args[key] is None for case in all_cases(task)], func.__name__




def test_a_step_over_the_cache_only_is_named():
    """Attending over the old cache only: an empty cache gives NaN or nothing; a cache of P
    positions gives the hint that the new position attends to itself too."""
    result = run_task("7.3", step_cache_only, hidden=True)
    for case in result.cases:
        if case.status != "passed":
            assert ch07.HINT_STEP_CACHE_ONLY in case.message or "NaN" in case.message or (
                case.message.startswith(ch07.HINT_STEP_GENERIC)), case.message


def test_an_uncropped_context_fails_loudly_or_is_named():
    """With learned positions the model refuses more than block_size tokens (an error whose
    hint says to crop); with sinusoidal positions it runs and the tokens name the mistake."""
    task = checks.get_task("7.4")
    result = run_task("7.4", sample_not_cropped, hidden=True)
    for case, res in zip(all_cases(task), result.cases, strict=True):
        grows = case.args["T"] + case.args["new"] - 1 > case.args["block_size"]
        if not grows:
            assert res.status == "passed", case.name
        elif case.args["pos"] == "learned":
            assert res.status == "error", case.name
            assert "Crop the context before each call" in res.message
        else:
            assert res.status == "failed", case.name
            assert res.message.startswith(ch07.HINT_NOT_CROPPED), case.name


def _shows_only_where_it_matters(result, matters, name):
    """A sampling mistake passes every case where it does not matter; it fails every public
    case where it does, and the hidden ones where it does as a whole (a hidden case's draws,
    from the secret, may happen to give the same tokens with and without the mistake)."""
    hidden_relevant = []
    for case, res in zip(all_cases(checks.get_task("7.4")), result.cases, strict=True):
        relevant = bool(matters(case.args))
        if not relevant:
            assert res.status == "passed", (name, case.name)
        elif case.hidden:
            hidden_relevant.append(res.status != "passed")
        else:
            assert res.status != "passed", (name, case.name)
    assert not hidden_relevant or any(hidden_relevant), name


def test_the_temperature_mistakes_show_only_where_the_temperature_matters():
    task = checks.get_task("7.4")
    for func in (sample_temperature_after_softmax, sample_temperature_multiplied):
        _shows_only_where_it_matters(
            run_task("7.4", func, hidden=True),
            lambda args: args["temperature"] not in (0.0, 1.0) and args["top_k"] != 1,
            func.__name__)
    result = run_task("7.4", sample_divides_by_zero, hidden=True)
    for case, res in zip(all_cases(task), result.cases, strict=True):
        assert (res.status == "error") == (case.args["temperature"] == 0), case.name


def test_the_top_k_mistakes_show_only_where_top_k_matters():
    _shows_only_where_it_matters(
        run_task("7.4", sample_ignores_top_k, hidden=True),
        lambda args: args["top_k"] not in (None, args["V"]) and args["temperature"],
        "sample_ignores_top_k")


def test_greedy_decoding_is_right_only_at_temperature_0_or_top_k_1():
    _shows_only_where_it_matters(
        run_task("7.4", sample_greedy, hidden=True),
        lambda args: not (args["temperature"] == 0 or args["top_k"] == 1), "sample_greedy")


def test_public_failures_show_the_specifics():
    result = run_task("7.1", ff_no_activation)
    detail = result.cases[0].message.removeprefix(ch07.HINT_FF_NO_ACTIVATION).strip()
    assert detail.startswith("out[") and "expected" in detail and "values differ)." in detail
    result = run_task("7.4", sample_first_position)
    message = result.cases[0].message
    assert message.startswith(ch07.HINT_FIRST_POSITION)
    assert "Sequence " in message and "new tokens differ)." in message
    result = run_task("7.4", sample_only_new)
    assert result.cases[0].message.endswith(
        "Expected token ids of shape (2, 10), got (2, 8).")
    result = run_task("7.1", ff_hidden_only)
    assert result.cases[0].message.endswith("Expected out of shape (2, 5, 6), got (2, 5, 12).")


def test_dtype_mismatch_is_named_in_the_float64_case():
    def float32_output(*args):
        return feed_forward(*args).float()

    result = run_task("7.1", float32_output, hidden=True)
    failed = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in failed] == ["hidden: float64, GELU"]
    assert failed[0].message == ch07.HINT_DTYPE


def test_a_crash_on_an_edge_case_costs_only_that_case():
    def no_empty_cache(x_t, w_q, w_k, w_v, cache_k, cache_v):
        if cache_k.shape[1] == 0:
            raise IndexError("index 0 is out of bounds")
        return attention_step(x_t, w_q, w_k, w_v, cache_k, cache_v)

    result = run_task("7.3", no_empty_cache, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == ["an empty cache: the first position",
                                           "hidden: an empty cache"]
    assert bad[1].status == "error" and bad[1].message.startswith("raised IndexError.")


def test_exceptions_become_errors_with_hints():
    result = run_task("7.2", block_forgets_out)
    assert {case.status for case in result.cases} == {"error"}
    assert result.cases[0].message.startswith("raised TypeError")
    assert "self_attn(h, h, h, mask)[0]" in result.cases[0].message
    result = run_task("7.4", sample_divides_by_zero)
    errors = [case for case in result.cases if case.status == "error"]
    assert len(errors) == 1 and "raised RuntimeError" in errors[0].message
    result = run_task("7.1", ff_not_transposed)
    assert result.cases[0].status == "error" and "w1 (F, D)" in result.cases[0].message
    assert result.cases[2].message.startswith(ch07.HINT_FF_NOT_TRANSPOSED)
    assert all("\n" not in case.message for case in result.cases)


def test_a_changed_prompt_is_named():
    def shifted(*args):
        out = sample(*args).clone()
        out[:, 0] = (out[:, 0] + 1) % 10
        return out

    result = run_task("7.4", shifted)
    assert result.points == 0
    assert all(case.message.startswith(ch07.HINT_PROMPT_CHANGED) for case in result.cases)


def test_a_tensor_that_requires_grad_or_is_a_view_is_fine():
    def as_view(*args):
        out, keys, values = attention_step(*args)
        return torch.cat([out, out], dim=-1)[..., : out.shape[-1]], keys, values

    def int32_tokens(*args):
        return sample(*args).int()

    assert run_task("7.3", as_view, hidden=True).status == "passed"
    assert run_task("7.4", int32_tokens, hidden=True).status == "passed"
    result = checks.student_output(checks.get_task("7.2"), checks.get_task("7.2").cases[0],
                                   encoder_block)
    assert result["shape"] == [2, 5, 8]


@pytest.mark.parametrize("task_id", ("7.1", "7.2", "7.3"))
def test_the_blocks_may_not_use_the_packages_or_torchs_layers(task_id):
    from coursepkg.checks.forbidden import Tripwire

    task = checks.get_task(task_id)
    for name in ("coursepkg.transformer", "torch.nn.TransformerEncoderLayer",
                 "torch.nn.TransformerDecoderLayer", "torch.nn.Transformer"):
        assert name in task.forbidden
    tripwire = Tripwire(task)
    assert "coursepkg.transformer" in tripwire.prefixes
    for forbidden in (tf.FeedForward.forward, tf.TransformerEncoderLayer.forward,
                      tf.TransformerDecoderLayer.forward, nn.TransformerEncoderLayer.forward,
                      nn.TransformerDecoderLayer.forward,
                      nn.Transformer.generate_square_subsequent_mask):
        assert tripwire.forbidden_callable(forbidden) is not None, forbidden


def test_the_sampler_may_call_the_model():
    from coursepkg.checks.forbidden import Tripwire

    assert Tripwire(checks.get_task("7.4")).forbidden_callable(tf.TransformerLM.forward) is None


def test_the_student_may_call_the_modules_it_is_given():
    """The blocks get chapter 5's MultiHeadAttention, torch's Sequential and LayerNorms, and
    7.4 a coursepkg.transformer.TransformerLM: the tripwire lets the student's function call
    them, and refuses the package's layers and sampler. (The grader builds the arguments
    inside the tripwire too, from the trusted checks; the demo grading tests cover that.)"""

    def package_sampler(model, idx, n, block_size, temperature=1.0, top_k=None,
                        generator=None):
        return lm.generate(model, idx, n, temperature=temperature, top_k=top_k,
                           generator=generator, block_size=block_size)

    def package_attention(x_t, w_q, w_k, w_v, cache_k, cache_v):
        keys = torch.cat([cache_k, (x_t @ w_k.T)[:, None]], dim=1)
        values = torch.cat([cache_v, (x_t @ w_v.T)[:, None]], dim=1)
        out = F.scaled_dot_product_attention((x_t @ w_q.T)[:, None], keys, values)[:, 0]
        return out, keys, values

    def package_block(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
        layer = tf.TransformerEncoderLayer(x.shape[-1], self_attn.n_heads, ff[0].out_features,
                                           norm_first=norm_first)
        return layer(x, mask)

    for task_id, func, shortcut, called in (
        ("7.2", block_functional, package_block, "coursepkg.transformer"),
        ("7.3", attention_step, package_attention,
         "torch.nn.functional.scaled_dot_product_attention"),
        ("7.4", sample, package_sampler, "coursepkg.lm"),
    ):
        task = checks.get_task(task_id)
        case = task.cases[1]
        result = checks.evaluate_case(task, case, func, tripwire=checks.tripwire_for(task))
        assert result.status == "passed", task_id
        # the float mask fails later: the call was made anyway
        result = checks.evaluate_case(task, case, shortcut, tripwire=checks.tripwire_for(task))
        assert result.status == "failed", task_id
        assert result.message.startswith(f"forbidden: you called {called},"), result.message


# ---------------------------------------------------------------------------------------------
# check(): prints a deterministic report, never raises
# ---------------------------------------------------------------------------------------------


def test_check_a_function_that_raises(capsys):
    out = check_output(capsys, "7.4", sample_not_cropped)
    assert "ERROR [0/1]" in out and "raised ValueError: a learned positional embedding" in out


# ---------------------------------------------------------------------------------------------
# 7.5: the capstone's target, bands, held-out data and budget
# ---------------------------------------------------------------------------------------------


def test_the_reference_training_meets_the_target_on_three_seeds():
    """fit_transformer_lm (the instructor's training, about 5 s of CPU on one thread, a twelfth
    of the budget on an idle machine) reaches full marks on 3 seeds and 3 held-out stretches;
    the same model untrained is far from any band."""
    _, train_ids = ch07.char_train_split()
    config = ch07.capstone_config()
    for seed in (0, 1, 2):
        held_out = ch07.capstone_held_out({"seed": seed, "_heldout": 500 + seed})
        model = ch07.fit_transformer_lm(train_ids, config, seed)
        nats = ch07.held_out_nats(model.state_dict(), held_out)
        assert nats <= ch07.CAPSTONE_BANDS[0][0] - 0.05, (seed, nats)
    assert ch07.held_out_nats(untrained(train_ids, config, 0).state_dict(), held_out) > 4.0


def test_the_capstone_s_data_the_student_gets_and_the_grader_keeps():
    """The student gets a copy of the training ids (never the held-out seed); the held-out text
    is a stretch of the test split, the same for the same seed, another for another."""
    task = checks.get_task("7.5")
    case = task.cases[0]
    train_ids, config, seed = task.build_args(checks.student_args(case.args))
    assert seed == case.args["seed"] and config == ch07.capstone_config()
    assert train_ids is not ch07.char_train_split()[1]
    assert torch.equal(train_ids, ch07.char_train_split()[1])
    first, again = ch07.capstone_held_out(case.args), ch07.capstone_held_out(case.args)
    other = ch07.capstone_held_out({**case.args, "_heldout": case.args["_heldout"] + 1})
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert len(first) == ch07.CAPSTONE_HELD_OUT + 1
    test_ids = ch07.char_test_ids()
    start = int((test_ids.unfold(0, len(first), 1) == first).all(dim=1).nonzero()[0])
    assert torch.equal(test_ids[start:start + len(first)], first)
    assert "_heldout" not in checks.student_args(case.args)
    assert task.time_limit == ch07.CAPSTONE_TIME_LIMIT and task.kind == "train"
    assert task.private_files and task.private_files[0].endswith("texts")


def test_the_capstone_s_bands_and_its_score_in_the_message():
    """A partial band earns its fraction; a public case's message gives the score in a form a
    class report can parse, a hidden case's the hint alone."""
    task = checks.get_task("7.5")
    public = task.cases[0]
    plain = json.loads(json.dumps(checks.student_output(task, public, too_few_steps)))
    result = checks.grade_output(task, public, plain)
    assert result.status in ("partial", "failed")
    score = re.search(r"held-out (\d\.\d{3}) nats/char \(1 of the points at <= ", result.message)
    assert score, result.message
    fraction = next((f for limit, f in ch07.CAPSTONE_BANDS if float(score[1]) <= limit), 0.0)
    assert result.points == pytest.approx(fraction * public.points, abs=0.01)
    hidden = checks.grade_output(task, checks.Case("hidden: x", 1, public.args, hidden=True),
                                 plain)
    assert hidden.message in (ch07.HINT_CAPSTONE_PARTIAL, ch07.HINT_CAPSTONE_FAR)


def test_the_warm_up_forgets_the_corpus():
    """The fork server's warm-up keeps the training ids and empties the corpus's caches, so no
    child inherits the test split's text."""
    ch07.char_train_split()
    ch07.data.shakespeare()
    checks.get_task("7.5").warm()
    assert ch07.char_train_split.cache_info().currsize == 1
    assert ch07.data.shakespeare.cache_info().currsize == 0


def test_the_chapter_s_shares_of_points():
    """Formula tasks at most a third of the points; an extension, a train, a debug task and
    questions; no task's reference is a function whose body the chapter page shows (7.2's is
    the package's layer, but the task is a debug task whose starter the student fixes)."""
    shares = checks.points_by_kind("07_transformer")
    total = sum(shares.values())
    assert shares["formula"] <= total / 3
    assert all(shares[kind] > 0 for kind in ("extension", "train", "debug", "question"))
    assert shares["train"] >= shares["formula"] / 2
