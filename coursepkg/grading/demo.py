"""A demo batch of submissions for trying the grader (``make grade-demo``).

The batch is built from the course's own notebooks: the solution (full marks), the untouched
exercise (0, "not attempted"), and copies of the solution with one planted mistake each, the
kind students make, so the gradebook shows partial credit and the feedback what it says.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

# assignment -> student id -> (function, wrong implementation replacing the solution's)
PLANTED: dict[str, dict[str, tuple[str, str]]] = {
    "01_ngrams": {
        "ada-forgets-eos": (
            "count_ngrams",
            """def count_ngrams(sentences, n):
    counts = {}
    for sentence in sentences:
        padded = ["<s>"] * (n - 1) + list(sentence)  # no "</s>"
        for i in range(len(padded) - n + 1):
            gram = tuple(padded[i:i + n])
            counts[gram] = counts.get(gram, 0) + 1
    return counts
""",
        ),
        "ben-joint-probability": (
            "mle_prob",
            """def mle_prob(counts, word, context):
    total = sum(counts.values())  # every n-gram, not only those after the context
    return counts.get(tuple(context) + (word,), 0) / total if total else 0.0
""",
        ),
        "cy-forgets-k-times-v": (
            "add_k_prob",
            """def add_k_prob(counts, vocab, word, context, k):
    context = tuple(context)
    total = sum(c for g, c in counts.items() if g[:-1] == context)
    return (counts.get(context + (word,), 0) + k) / (total + k)
""",
        ),
        "dee-log10-perplexity": (
            "perplexity",
            """import math


def perplexity(model, sentences):
    log_sum, count = 0.0, 0
    for sentence in sentences:
        padded = ["<s>"] * (model.n - 1) + list(sentence) + ["</s>"]
        for i in range(model.n - 1, len(padded)):
            context = tuple(padded[i - model.n + 1:i])
            log_sum += math.log10(model.prob(padded[i], context))
            count += 1
    return math.exp(-log_sum / count)
""",
        ),
    },
    "02_rnn": {
        # A wrong step also costs task 2.2, whose loop calls it: the feedback says so.
        "ada-forgets-the-bias": (
            "elman_step",
            """def elman_step(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh):
    return torch.tanh(x_t @ weight_ih.T + h_prev @ weight_hh.T)  # no bias_ih, no bias_hh
""",
        ),
        "ben-feeds-h0-every-step": (
            "run_rnn",
            """def run_rnn(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    states = []
    for t in range(x.shape[1]):
        h = elman_step(x[:, t], h0, weight_ih, weight_hh, bias_ih, bias_hh)  # always h0
        states.append(h)
    return torch.stack(states, dim=1), h
""",
        ),
        "cy-textbook-gate-order": (
            "lstm_step",
            """def lstm_step(x_t, state, weight_ih, weight_hh, bias_ih, bias_hh):
    h_prev, c_prev = state
    pre = x_t @ weight_ih.T + bias_ih + h_prev @ weight_hh.T + bias_hh
    i, f, o, g = pre.chunk(4, dim=-1)  # the textbook's order, not torch's i, f, g, o
    c_t = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_t), c_t
""",
        ),
        "dee-pools-the-padding": (
            "pool_outputs",
            """def pool_outputs(out, lengths, how):
    if how == "last":
        return out[:, -1]  # position T - 1, padding or not
    if how == "mean":
        return out.mean(dim=1)  # padding included
    return out.amax(dim=1)  # padding included
""",
        ),
    },
    "03_attention": {
        "ada-softmax-over-the-batch": (
            "attention_weights",
            """def attention_weights(query, keys, scale):
    scores = scale * (keys @ query.unsqueeze(-1)).squeeze(-1)
    return torch.softmax(scores, dim=0)  # over the batch, not over the keys
""",
        ),
        # A wrong masked_attention also costs task 3.4, whose step calls it: the feedback says so.
        "ben-masks-after-the-softmax": (
            "masked_attention",
            """def masked_attention(query, keys, values, mask, scale):
    scores = scale * (keys @ query.unsqueeze(-1)).squeeze(-1)
    weights = torch.softmax(scores, dim=-1) * mask  # masked afterwards, not renormalised
    context = (weights.unsqueeze(1) @ values).squeeze(1)
    return context, weights
""",
        ),
        "cy-forgets-tanh": (
            "additive_scores",
            """def additive_scores(query, keys, w_q, w_k, v, bias):
    hidden = (query @ w_q.T).unsqueeze(1) + keys @ w_k.T + bias
    return hidden @ v  # no tanh
""",
        ),
        "dee-forgets-the-context": (
            "decoder_step",
            """def decoder_step(embedding, state, encoder_states, mask, key_proj, lstm_params):
    h_prev, _ = state
    keys = encoder_states @ key_proj.T
    context, weights = masked_attention(h_prev, keys, encoder_states, mask,
                                        h_prev.shape[-1] ** -0.5)
    h_t, c_t = lstm_step(embedding, state, *lstm_params)  # the context is not fed
    return h_t, c_t, context, weights
""",
        ),
    },
    "04_self_attention": {
        "ada-forgets-sqrt-dk": (
            "qkv_scores",
            """def qkv_scores(x, w_q, w_k, w_v):
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    return q, k, v, q @ k.transpose(-2, -1)  # not divided by sqrt(d_k)
""",
        ),
        # A wrong attention also costs task 4.4, whose layer calls it: the feedback says so.
        "ben-softmax-over-the-queries": (
            "scaled_dot_product_attention",
            """def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2)  # over the queries, not the keys
    return weights @ v, weights
""",
        ),
        # A wrong causal mask also costs the causal cases of task 4.4.
        "cy-hides-the-diagonal": (
            "causal_mask",
            """def causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril(-1)  # strictly below: no token sees itself
""",
        ),
        "dee-minus-1e9": (
            "scaled_dot_product_attention",
            """def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  # a large number, not -inf
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
""",
        ),
        "eve-ignores-causal": (
            "self_attention",
            """def self_attention(x, w_q, w_k, w_v, causal=False):
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    return scaled_dot_product_attention(q, k, v)  # causal is never used
""",
        ),
    },
    "05_multihead": {
        # A wrong split or merge also costs task 5.3, whose layer calls them: the feedback says so.
        "ada-views-without-transpose": (
            "split_heads",
            """def split_heads(x, n_heads):
    B, T, D = x.shape
    return x.view(B, n_heads, T, D // n_heads)  # one step: heads mixed with time
""",
        ),
        "ben-views-a-transposed-tensor": (
            "merge_heads",
            """def merge_heads(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).view(B, T, H * Dh)  # view of a non-contiguous tensor
""",
        ),
        "cy-scales-by-d-model": (
            "multi_head_attention",
            """def multi_head_attention(query, key, value, in_proj_weight, in_proj_bias,
                         out_proj_weight, out_proj_bias, n_heads, mask=None):
    w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (None,) * 3
    q = split_heads(F.linear(query, w_q, b_q), n_heads)
    k = split_heads(F.linear(key, w_k, b_k), n_heads)
    v = split_heads(F.linear(value, w_v, b_v), n_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(query.shape[-1])  # sqrt(D), not sqrt(Dh)
    if mask is not None:
        scores = scores.masked_fill(~(mask.unsqueeze(1) if mask.dim() == 3 else mask),
                                    float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return F.linear(merge_heads(weights @ v), out_proj_weight, out_proj_bias), weights
""",
        ),
        "dee-forgets-out-proj": (
            "multi_head_attention",
            """def multi_head_attention(query, key, value, in_proj_weight, in_proj_bias,
                         out_proj_weight, out_proj_bias, n_heads, mask=None):
    w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (None,) * 3
    q = split_heads(F.linear(query, w_q, b_q), n_heads)
    k = split_heads(F.linear(key, w_k, b_k), n_heads)
    v = split_heads(F.linear(value, w_v, b_v), n_heads)
    if mask is not None and mask.dim() == 3:
        mask = mask.unsqueeze(1)
    heads, weights = scaled_dot_product_attention(q, k, v, mask)
    return merge_heads(heads), weights  # no output projection W^O
""",
        ),
        "eve-torch-mask-convention": (
            "multi_head_attention",
            """def multi_head_attention(query, key, value, in_proj_weight, in_proj_bias,
                         out_proj_weight, out_proj_bias, n_heads, mask=None):
    w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (None,) * 3
    q = split_heads(F.linear(query, w_q, b_q), n_heads)
    k = split_heads(F.linear(key, w_k, b_k), n_heads)
    v = split_heads(F.linear(value, w_v, b_v), n_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        if mask.dim() == 3:
            mask = mask.unsqueeze(1)
        scores = scores.masked_fill(mask, float("-inf"))  # nn.MultiheadAttention's convention
    weights = torch.softmax(scores, dim=-1)
    return F.linear(merge_heads(weights @ v), out_proj_weight, out_proj_bias), weights
""",
        ),
    },
    "06_positional": {
        "ada-swaps-sin-and-cos": (
            "sinusoidal_table",
            """def sinusoidal_table(T, d, dtype=torch.float32):
    p = torch.arange(T, dtype=dtype)[:, None]
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=dtype) / d)
    table = torch.zeros(T, d, dtype=dtype)
    table[:, 0::2] = torch.cos(p * w)  # cosines in the even columns
    table[:, 1::2] = torch.sin(p * w)
    return table
""",
        ),
        "ben-rotates-halves": (
            "apply_rope",
            """def apply_rope(x, positions=None):
    T, Dh = x.shape[-2], x.shape[-1]
    m = torch.arange(T, dtype=x.dtype) if positions is None else positions.to(x.dtype)
    freqs = torch.outer(m, 10000.0 ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh))
    emb = torch.cat([freqs, freqs], dim=-1)  # LLaMA's layout: feature i pairs with i + Dh/2
    first, second = x[..., : Dh // 2], x[..., Dh // 2 :]
    return x * emb.cos() + torch.cat([-second, first], dim=-1) * emb.sin()
""",
        ),
        "cy-counts-from-1": (
            "apply_rope",
            """def apply_rope(x, positions=None):
    T, Dh = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(1, T + 1)  # the first token at position 1
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh)
    angles = positions.to(x.dtype)[:, None] * theta
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([even * angles.cos() - odd * angles.sin(),
                           even * angles.sin() + odd * angles.cos()], dim=-1)
    return rotated.flatten(-2)
""",
        ),
        "dee-offsets-i-minus-j": (
            "relative_bias",
            """def relative_bias(table, T, S, max_distance):
    offsets = torch.arange(T)[:, None] - torch.arange(S)[None, :]  # i - j, not j - i
    return table[:, offsets.clamp(-max_distance, max_distance) + max_distance]
""",
        ),
        "eve-forgets-to-clip": (
            "relative_bias",
            """def relative_bias(table, T, S, max_distance):
    offsets = torch.arange(S)[None, :] - torch.arange(T)[:, None]
    return table[:, offsets + max_distance]  # never clipped to [-M, M]
""",
        ),
    },
    "07_transformer": {
        "ada-activation-after-the-output": (
            "feed_forward",
            """def feed_forward(x, w1, b1, w2, b2, activation="relu"):
    act = F.relu if activation == "relu" else F.gelu
    return act(F.linear(F.linear(x, w1, b1), w2, b2))  # the activation after both layers
""",
        ),
        "ben-forgets-the-ff-residual": (
            "encoder_block",
            """def encoder_block(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    if norm_first:
        h = norm1(x)
        x = x + self_attn(h, h, h, mask)[0]
        return ff(norm2(x))  # no residual around the feed-forward network
    x = norm1(x + self_attn(x, x, x, mask)[0])
    return norm2(ff(x))
""",
        ),
        "cy-always-post-norm": (
            "encoder_block",
            """def encoder_block(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
    x = norm1(x + self_attn(x, x, x, mask)[0])  # norm_first is never looked at
    return norm2(x + ff(x))
""",
        ),
        "dee-keys-from-the-decoder": (
            "decoder_block",
            """def decoder_block(x, memory, self_attn, cross_attn, ff, norm1, norm2, norm3,
                  memory_mask=None):
    T = x.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    h = norm1(x)
    x = x + self_attn(h, h, h, causal)[0]
    h = norm2(x)
    x = x + cross_attn(h, h, memory, memory_mask)[0]  # keys from the decoder
    return x + ff(norm3(x))
""",
        ),
        "eve-forgets-to-crop": (
            "sample",
            """def sample(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
           generator=None):
    for _ in range(max_new_tokens):
        logits = model(idx)[:, -1]  # the whole sequence, never cropped to block_size
        if temperature == 0:
            next_token = logits.argmax(dim=-1, keepdim=True)
        else:
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            next_token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
        idx = torch.cat([idx, next_token], dim=1)
    return idx
""",
        ),
        "fay-temperature-after-the-softmax": (
            "sample",
            """def sample(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
           generator=None):
    for _ in range(max_new_tokens):
        logits = model(idx[:, -block_size:])[:, -1]
        if temperature == 0:
            next_token = logits.argmax(dim=-1, keepdim=True)
        else:
            if top_k is not None:
                kth = torch.topk(logits, top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1) / temperature  # after the softmax
            next_token = torch.multinomial(probs, 1, generator=generator)
        idx = torch.cat([idx, next_token], dim=1)
    return idx
""",
        ),
    },
}


def _replace_function(nb: nbformat.NotebookNode, func_name: str, source: str) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code" and f"def {func_name}(" in cell.source:
            cell.source = source
            return
    raise ValueError(f"no code cell defines {func_name}() in the solution notebook")


def write_demo(assignment: str, course_root: Path, folder: Path) -> list[Path]:
    """Write the demo submissions of ``assignment`` into ``folder``; returns their paths.

    Args:
        assignment: an exercise set with planted mistakes (see :data:`PLANTED`).
        course_root: the course checkout (with solutions/ and exercises/).
        folder: where the notebooks go (created).
    """
    if assignment not in PLANTED:
        raise ValueError(f"no demo for {assignment!r}; demos exist for {', '.join(PLANTED)}")
    solution = course_root / "solutions" / f"{assignment}.ipynb"
    exercise = course_root / "exercises" / f"{assignment}.ipynb"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for student, source in [("sol-full-marks", solution), ("ed-untouched", exercise)]:
        target = folder / f"{student}.ipynb"
        target.write_bytes(source.read_bytes())
        written.append(target)
    for student, (func_name, wrong) in PLANTED[assignment].items():
        nb = nbformat.read(solution, as_version=4)
        _replace_function(nb, func_name, wrong)
        target = folder / f"{student}.ipynb"
        nbformat.write(nb, target)
        written.append(target)
    return written
