"""The checks of chapter 7 (coursepkg.checks.ch07_transformer): their tables and their own tests.

``CHAPTER`` hands the tests every chapter's checks must pass (test_checks_common.py) the
implementations that must get full marks and those that must lose points with the hint naming
their mistake; the tests here are what only this chapter's checks do.
"""

from __future__ import annotations

import json
import math

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

TASK_IDS = ("7.1", "7.2", "7.3", "7.4")
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


def decoder_block(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3, memory_mask=None):
    """The notebook's solution."""
    T = x.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): True on and below
    h = norm1(x)
    x = x + self_attn(h, h, h, causal)[0]
    h = norm2(x)
    x = x + cross_attn(h, memory, memory, memory_mask)[0]
    return x + ff(norm3(x))


def decoder_by_hand(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3,
                    memory_mask=None):
    """Norms and attention written out; the causal mask from comparing positions."""
    T = x.shape[1]
    positions = torch.arange(T)
    causal = positions[None, :] <= positions[:, None]  # key s <= query t
    h = _layer_norm(norm1, x)
    x = x + _attention_by_hand(self_attn, h, h, h, causal)
    h = _layer_norm(norm2, x)
    x = x + _attention_by_hand(cross_attn, h, memory, memory, memory_mask)
    return x + ff(_layer_norm(norm3, x))


def decoder_package_mask(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3,
                         memory_mask=None):
    """Chapter 4's causal_mask; a loop over three (sublayer, norm) pairs."""
    mask = causal_mask(x.shape[1])
    sublayers = [
        (lambda h: self_attn(h, h, h, mask)[0], norm1),
        (lambda h: cross_attn(h, memory, memory, memory_mask)[0], norm2),
        (ff, norm3),
    ]
    for f, norm in sublayers:
        x = x + f(norm(x))
    return x


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


CORRECT = {
    "7.1": [ch07.feed_forward, feed_forward, ff_matmul_erf, ff_einsum_float64],
    "7.2": [ch07.encoder_block, encoder_block, block_by_hand, block_functional],
    "7.3": [ch07.decoder_block, decoder_block, decoder_by_hand, decoder_package_mask],
    "7.4": [ch07.sample, sample, sample_powered_probs, sample_row_by_row],
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


def _decoder_with(*, causal="right", sources="dmm", norm_memory=False, use_memory_mask=True,
                  cross_first=False, swap_modules=False, residual=(True, True, True),
                  post=False, norms=(0, 1, 2)):
    """A student's decoder block with one mistake switched on (defaults: right)."""

    def block(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3, memory_mask=None):
        T = x.shape[1]
        ones = torch.ones(T, T, dtype=torch.bool)
        mask = {"right": ones.tril(), "none": None, "strict": ones.tril(-1),
                "torch": ones.triu(1)}[causal]
        sa, ca = (cross_attn, self_attn) if swap_modules else (self_attn, cross_attn)
        n = [(norm1, norm2, norm3)[i] for i in norms]

        def attend_self(h):
            return sa(h, h, h, mask)[0]

        def attend_cross(h):
            mem = n[1](memory) if norm_memory else memory
            q, k, v = (h if s == "d" else mem for s in sources)
            return ca(q, k, v, memory_mask if use_memory_mask else None)[0]

        steps = [(attend_self, 0), (attend_cross, 1), (ff, 2)]
        if cross_first:
            steps[:2] = steps[1::-1]
        for f, i in steps:
            if post:
                x = n[i](x + f(x))
            else:
                x = x * residual[i] + f(n[i](x))
        return x

    return block


decoder_not_causal = _named(_decoder_with(causal="none"), "decoder_not_causal")
decoder_hides_the_diagonal = _named(_decoder_with(causal="strict"), "decoder_hides_the_diagonal")
decoder_torch_mask = _named(_decoder_with(causal="torch"), "decoder_torch_mask")
decoder_kv_from_decoder = _named(_decoder_with(sources="ddd"), "decoder_kv_from_decoder")
decoder_values_from_decoder = _named(_decoder_with(sources="dmd"), "decoder_values_from_decoder")
decoder_queries_from_memory = _named(_decoder_with(sources="mdd"), "decoder_queries_from_memory")
decoder_normalises_memory = _named(_decoder_with(norm_memory=True), "decoder_normalises_memory")
decoder_ignores_memory_mask = _named(_decoder_with(use_memory_mask=False),
                                     "decoder_ignores_memory_mask")
decoder_cross_first = _named(_decoder_with(cross_first=True), "decoder_cross_first")
decoder_modules_swapped = _named(_decoder_with(swap_modules=True), "decoder_modules_swapped")
decoder_no_cross_residual = _named(_decoder_with(residual=(True, False, True)),
                                   "decoder_no_cross_residual")
decoder_no_self_residual = _named(_decoder_with(residual=(False, True, True)),
                                  "decoder_no_self_residual")
decoder_post_norm = _named(_decoder_with(post=True), "decoder_post_norm")
decoder_norms_shifted = _named(_decoder_with(norms=(1, 2, 0)), "decoder_norms_shifted")


def decoder_torch_square_mask(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3,
                              memory_mask=None):
    """torch's float mask (-inf above the diagonal, what nn.Transformer's
    generate_square_subsequent_mask returns, built here by hand) passed as it is."""
    T = x.shape[1]
    mask = torch.full((T, T), float("-inf")).triu(1)
    h = norm1(x)
    x = x + self_attn(h, h, h, mask)[0]
    h = norm2(x)
    x = x + cross_attn(h, memory, memory, memory_mask)[0]
    return x + ff(norm3(x))


def decoder_square_subsequent_mask(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3,
                                   memory_mask=None):
    """torch's helper called for the mask: forbidden in the task."""
    mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
    return decoder_torch_square_mask(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3,
                                     memory_mask) + 0 * mask.sum()


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
        (decoder_not_causal, ch07.HINT_NO_CAUSAL),
        (decoder_hides_the_diagonal, ch07.HINT_CAUSAL_DIAGONAL),
        (decoder_torch_mask, ch07.HINT_CAUSAL_INVERTED),
        (decoder_torch_square_mask, "True = may attend"),
        (decoder_kv_from_decoder, ch07.HINT_KV_FROM_DECODER),
        (decoder_values_from_decoder, ch07.HINT_KV_FROM_DECODER),
        (decoder_queries_from_memory, ch07.HINT_QUERIES_FROM_MEMORY),
        (decoder_normalises_memory, ch07.HINT_MEMORY_NORMALISED),
        (decoder_ignores_memory_mask, ch07.HINT_MEMORY_MASK_IGNORED),
        (decoder_cross_first, ch07.HINT_CROSS_FIRST),
        (decoder_modules_swapped, ch07.HINT_ATTN_MODULES_SWAPPED),
        (decoder_no_cross_residual, ch07.HINT_DEC_NO_RESIDUAL_CROSS),
        (decoder_no_self_residual, ch07.HINT_DEC_NO_RESIDUAL_SELF),
        (decoder_post_norm, ch07.HINT_DEC_POST_NORM),
        (decoder_norms_shifted, ch07.HINT_DEC_NORMS_ORDER),
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
}

def stub(*args):
    raise NotImplementedError("Task 7.1: write feed_forward")


# ---------------------------------------------------------------------------------------------
# The chapter's tables, for the tests every chapter's checks must pass (test_checks_common.py)
# ---------------------------------------------------------------------------------------------

CHAPTER = Chapter(
    assignment="07_transformer",
    tasks={"7.1": ("feed_forward", 3, 8), "7.2": ("encoder_block", 4, 10),
           "7.3": ("decoder_block", 4, 10), "7.4": ("sample", 5, 12)},
    hints=ch07,
    correct=CORRECT,
    wrong=WRONG,
    stub=stub,
    min_public=3,
    min_hidden=5,
    public_points=(3, 5),
    forbidden=("coursepkg.lm", "coursepkg.checks"),
    package="coursepkg.lm",
    not_finite_hint=ch07.HINT_NOT_FINITE,
    failure_reports=(
        ("7.2", block_ignores_mask, "Task 7.2 encoder_block: 2/4 points",
         ("  FAIL  [0/1] pre-norm with a causal mask (T, T): a GPT block: "
          + ch07.HINT_MASK_NOT_PASSED,)),
        ("7.3", decoder_not_causal, "Task 7.3 decoder_block: 0/4 points", ()),
        ("7.4", sample_temperature_multiplied, "Task 7.4 sample: 2/5 points",
         (ch07.HINT_TEMPERATURE_MULTIPLIED,)),
    ),
    # chapter 5's MultiHeadAttention is what the blocks are given; 7.4 calls a TransformerLM
    allowed=("coursepkg.multihead",),
    exact_results=("7.4",),
    more_hints=frozenset(ch07.ENCODER_HINTS) | set(ch07.DECODER_HINTS) | set(ch07.SAMPLE_HINTS),
    # a wrong source of keys, values or queries crashes where the lengths differ: the error's
    # hint says where each comes from
    crashes_excused=True,
    wrong_types=(
        ("7.1", lambda *a: feed_forward(*a).tolist(),
         "expected the output as a torch.Tensor, got list"),
        ("7.2", lambda x, attn, *rest: attn(x, x, x), "got tuple"),
        ("7.3", lambda *a: None, "expected the block's output as a torch.Tensor, got NoneType"),
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
    for task_id in ("7.2", "7.3"):
        assert any(a["T"] == 1 for a in hidden(task_id))
        assert any(a["H"] == 1 for a in hidden(task_id))
        assert any(a["B"] == 1 for a in hidden(task_id))
    assert {a["norm_first"] for a in hidden("7.2")} == {False, True}
    assert any(a["S"] == 1 for a in hidden("7.3"))
    samples = hidden("7.4")
    assert any(a["block_size"] == 1 for a in samples)
    assert any(a["top_k"] == 1 for a in samples) and any(a["top_k"] == a["V"] for a in samples)
    assert any(a["B"] == 1 and a["T"] == 1 for a in samples)
    assert {a["pos"] for a in samples} == {"learned", "sinusoidal", "rope"}
    assert any(a["temperature"] == 0 for a in samples)


def test_the_public_cases_let_the_mistakes_show():
    """Both variants of the block, masks and no masks; T = S in exactly one public decoder
    case; every public sample grows past block_size, most with a temperature other than 1 and
    some with top-k, on a model that refuses long contexts and on one that reads them."""
    blocks = [c.args for c in checks.get_task("7.2").public_cases]
    assert {a["norm_first"] for a in blocks} == {False, True}
    assert {a["mask"] is None for a in blocks} == {False, True}
    assert {a["activation"] for a in blocks} == {"relu", "gelu"}
    decoders = [c.args for c in checks.get_task("7.3").public_cases]
    assert sum(a["T"] == a["S"] for a in decoders) == 1
    assert {a["memory_mask"] is None for a in decoders} == {False, True}
    assert any(a["T"] == a["S"] and a["memory_mask"] is not None for a in decoders)
    samples = [c.args for c in checks.get_task("7.4").public_cases]
    assert all(a["T"] + a["new"] > a["block_size"] + 1 for a in samples)
    assert any(a["T"] > a["block_size"] for a in samples)
    assert sum(a["temperature"] not in (0.0, 1.0) for a in samples) >= 3
    assert sum(a["top_k"] is not None for a in samples) >= 2
    assert {a["pos"] for a in samples} == {"learned", "sinusoidal"}
    assert any(a["temperature"] == 0 for a in samples)
    assert any(c.args["F"] == c.args["D"] for c in checks.get_task("7.1").public_cases)


def test_inputs_are_reproducible_and_fresh():
    for task_id in ("7.2", "7.3"):
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
    """7.2 and 7.3's references equal torch's layers holding the same weights (post-norm and
    pre-norm; torch's masks are True = NOT allowed); 7.1's the formula; 7.4's a hand loop."""
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
    for case in all_cases(checks.get_task("7.3")):
        args = _inputs("7.3", type(case)(case.name, 1, {**case.args, "dtype": "float64"}))
        x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3, memory_mask = args
        D, H = x.shape[-1], self_attn.n_heads
        torch.manual_seed(0)
        ref = nn.TransformerDecoderLayer(D, H, ff[0].out_features, dropout=0.0,
                                         activation=case.args["activation"],
                                         batch_first=True, norm_first=True).double()
        state = {"linear1.weight": ff[0].weight, "linear1.bias": ff[0].bias,
                 "linear2.weight": ff[2].weight, "linear2.bias": ff[2].bias}
        for prefix, module in (("self_attn", self_attn), ("multihead_attn", cross_attn),
                               ("norm1", norm1), ("norm2", norm2), ("norm3", norm3)):
            state |= {f"{prefix}.{k}": v for k, v in module.state_dict().items()}
        ref.load_state_dict(state)
        ref.train()
        T = x.shape[1]
        padding = None if memory_mask is None else ~memory_mask[:, 0, 0, :]  # (B, S)
        with torch.no_grad():
            expected = ref(x, memory, tgt_mask=~torch.ones(T, T, dtype=torch.bool).tril(),
                           memory_key_padding_mask=padding)
        torch.testing.assert_close(ch07.decoder_block(*args), expected)
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
    result = run_task("7.3", decoder_not_causal, hidden=True)
    passed = {c.name for c in result.cases if c.status == "passed"}
    assert passed == {"hidden: one target position"}
    for func in (decoder_kv_from_decoder, decoder_normalises_memory, decoder_post_norm):
        assert run_task("7.3", func).points == 0, func.__name__


def test_the_residual_of_the_normalised_input_is_a_pre_norm_mistake_only():
    result = run_task("7.2", block_pre_norm_overwrites_x, hidden=True)
    task = checks.get_task("7.2")
    assert [c.status == "passed" for c in result.cases] == [
        not case.args["norm_first"] for case in all_cases(task)]
    for case in result.cases:
        assert case.status == "passed" or case.message.startswith(
            ch07.HINT_RESIDUAL_NORMALISED)


def test_the_mask_mistakes_show_only_where_there_is_a_mask():
    for task_id, func, key in (("7.2", block_ignores_mask, "mask"),
                               ("7.3", decoder_ignores_memory_mask, "memory_mask")):
        result = run_task(task_id, func, hidden=True)
        task = checks.get_task(task_id)
        assert [c.status == "passed" for c in result.cases] == [
            case.args[key] is None for case in all_cases(task)], func.__name__


def test_the_decoder_sources_are_named_where_the_shapes_let_them_run():
    """Keys and values from the decoder run where there is no memory mask (or T = S) and are
    named; values alone from the decoder, or queries from memory, need T = S and otherwise
    crash with a hint saying where keys, values and queries come from."""
    task = checks.get_task("7.3")
    result = run_task("7.3", decoder_kv_from_decoder)
    for case, res in zip(task.public_cases, result.cases, strict=True):
        if case.args["memory_mask"] is None or case.args["T"] == case.args["S"]:
            assert res.message.startswith(ch07.HINT_KV_FROM_DECODER), case.name
        else:
            assert res.status == "error" and "raised ValueError" in res.message
    for func, hint in ((decoder_values_from_decoder, ch07.HINT_KV_FROM_DECODER),
                       (decoder_queries_from_memory, ch07.HINT_QUERIES_FROM_MEMORY)):
        result = run_task("7.3", func)
        for case, res in zip(task.public_cases, result.cases, strict=True):
            if case.args["T"] == case.args["S"]:
                assert res.message.startswith(hint), (func.__name__, case.name)
            else:
                assert res.status == "error", (func.__name__, case.name)
                assert "both come from memory" in res.message or "from the decoder" in res.message


def test_the_hidden_diagonal_gives_nan_and_is_named():
    task = checks.get_task("7.3")
    case = task.cases[0]
    plain = checks.student_output(task, case, decoder_hides_the_diagonal)
    assert any(math.isnan(v) for v in plain["data"])
    result = checks.grade_output(task, case, json.loads(json.dumps(plain)))
    assert result.message.startswith(ch07.HINT_CAUSAL_DIAGONAL)


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
    def no_single_source(x, memory, *rest):
        if memory.shape[1] == 1:
            raise IndexError("index 1 is out of bounds")
        return decoder_block(x, memory, *rest)

    result = run_task("7.3", no_single_source, hidden=True)
    bad = [case for case in result.cases if case.status != "passed"]
    assert [case.name for case in bad] == ["hidden: one source position"]
    assert bad[0].status == "error" and bad[0].message.startswith("raised IndexError.")


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
        out = decoder_block(*args)
        return torch.cat([out, out], dim=-1)[..., : out.shape[-1]]

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

    def package_block(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
        layer = tf.TransformerEncoderLayer(x.shape[-1], self_attn.n_heads, ff[0].out_features,
                                           norm_first=norm_first)
        return layer(x, mask)

    for task_id, func, shortcut, called in (
        ("7.2", block_functional, package_block, "coursepkg.transformer"),
        ("7.3", decoder_package_mask, decoder_square_subsequent_mask, "torch.nn.Transformer"),
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
