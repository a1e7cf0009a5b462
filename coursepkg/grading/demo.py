"""A demo batch of submissions for trying the grader (``make grade-demo``).

The batch is built from the course's own notebooks: the solution (full marks), the untouched
exercise (0, "not attempted"; a debug task's untouched starter code "failed"), and copies of
the solution with one planted mistake each, the kind students make, so the gradebook shows
partial credit and the feedback what it says.

A chapter declares its planted mistakes in :data:`PLANTED`: student id -> ``(function, the
source of a wrong implementation)``, the source replacing the solution's cell that defines the
function. For the newer kinds of task:

- a debug task left unfixed: :func:`unfixed` (the exercise's starter code for that cell);
- a wrong answer to a question: :func:`wrong_answer` (``def f(): return <value>``);
- a train task that trains too little: :func:`adam_training` with too few steps (its held-out
  score lands in a lower band: the test's expected entry can give its exact points), or with
  another slip (no ``zero_grad``, the answers not shifted).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

#: Stands for the exercise's starter code of a debug task's function (see :func:`unfixed`).
UNFIXED = "<the exercise's starter code>"


def unfixed(func_name: str) -> tuple[str, str]:
    """A planted mistake: the debug task ``func_name`` left as the exercise shows it."""
    return func_name, UNFIXED


def wrong_answer(func_name: str, value: object) -> tuple[str, str]:
    """A planted mistake: the question ``func_name`` answered ``value``."""
    return func_name, f"def {func_name}():\n    return {value!r}\n"


def adam_training(func_name: str, args: str, model: str, lr: float, steps: int,
                  step: tuple[str, ...], *, note: str = "far too few steps",
                  zero_grad: bool = True) -> tuple[str, str]:
    """A planted mistake in a train task: the notebook's Adam loop, written as a student would.

    Args:
        func_name, args: the function and its parameters (``"tokens, targets, seed"``).
        model: the expression that builds the course model (``"MarkerModel()"``).
        lr, steps: Adam's learning rate and the number of steps (too few, for a short training).
        step: the lines of one step (without indentation), the last one computing ``loss``.
        note: the comment on the loop's line ("" for none).
        zero_grad: False leaves out ``optimizer.zero_grad()``: the gradients add up.
    """
    body = [f"        {line}" for line in step]
    backward = "        loss.backward()"
    if zero_grad:
        body.append("        optimizer.zero_grad()")
    else:
        backward += "  # the gradients add up from step to step"
    comment = f"  # {note}" if note else ""
    source = "\n".join([
        f"def {func_name}({args}):",
        "    torch.manual_seed(seed)",
        f"    model = {model}",
        f"    optimizer = torch.optim.Adam(model.parameters(), lr={lr})",
        f"    for step in range({steps}):{comment}",
        *body,
        backward,
        "        optimizer.step()",
        "    return model",
        "",
    ])
    return func_name, source


#: One step of chapters 3 and 4's classifiers in a student's loop: a minibatch of 64, its loss.
MINIBATCH_OF_64 = (
    "rows = torch.randint(0, len(targets), (64,))",
    "loss = F.cross_entropy(model(tokens[rows]), targets[rows])",
)

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
        "dee-leaves-the-bugs": unfixed("perplexity"),
        "eve-raw-counts-below-the-top": (
            "kneser_ney_prob",
            """from collections import Counter


def kneser_ney_prob(counts, word, context, discount):
    n = len(next(iter(counts)))
    p = None
    for m in range(1, n + 1):
        seen = Counter()  # raw counts at every order, no continuation counts
        for gram, c in counts.items():
            if gram[n - m:-1] == tuple(context)[len(context) - m + 1:]:
                seen[gram[-1]] += c
        total = sum(seen.values())
        if m == 1:
            p = seen[word] / total
        elif total:
            p = max(seen[word] - discount, 0) / total + discount * len(seen) / total * p
    return p
""",
        ),
        "fay-witten-bell-backs-off": (
            "witten_bell_prob",
            """from collections import Counter


def witten_bell_prob(counts, word, context):
    n = len(next(iter(counts)))
    p = None
    for m in range(1, n + 1):
        seen = Counter()
        for gram, c in counts.items():
            if gram[n - m:-1] == tuple(context)[len(context) - m + 1:]:
                seen[gram[-1]] += c
        total, types = sum(seen.values()), len(seen)
        if m == 1:
            p = seen[word] / total
        elif total:  # backs off: a seen word gets nothing from the lower order
            p = seen[word] / (total + types) if seen[word] else types * p / (total + types)
    return p
""",
        ),
        "gus-counts-repeated-bigrams": wrong_answer("distinct_bigrams", 12),
        "hal-trains-too-briefly": (
            "train_bigram",
            """import torch
from torch import nn


def train_bigram(x, vocab_size, seed):
    torch.manual_seed(seed)
    table = nn.Embedding(vocab_size, vocab_size)
    optimizer = torch.optim.Adam(table.parameters(), lr=0.5)
    for step in range(8):  # far too few steps
        loss = nn.functional.cross_entropy(table(x[:, :-1].flatten()), x[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return table
""",
        ),
    },
    "02_rnn": {
        "ada-transposes-the-jacobian": (
            "bptt_gradients",
            """def bptt_gradients(states, weight_hh, grad_last):
    grads = [grad_last]
    for t in range(states.shape[1] - 1, 0, -1):
        grads.insert(0, (grads[0] * (1 - states[:, t] ** 2)) @ weight_hh.T)  # transposed
    return torch.stack(grads, dim=1)
""",
        ),
        "ben-resets-before-the-product": (
            "gru_layer",
            """def gru_layer(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    Hs = h0.shape[1]
    h, states = h0, []
    for t in range(x.shape[1]):
        a_r, a_z, a_n = (x[:, t] @ weight_ih.T + bias_ih).chunk(3, dim=-1)
        b_r, b_z, _ = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
        n = torch.tanh(a_n + (r * h) @ weight_hh[2 * Hs:].T + bias_hh[2 * Hs:])  # Cho's GRU
        h = (1 - z) * n + z * h
        states.append(h)
    return torch.stack(states, dim=1), h
""",
        ),
        # Trains too little: a held-out accuracy far below the target (a low band or none).
        "cy-trains-ten-steps": adam_training(
            "train_ab_acceptor", "x, y, seed", "ABAcceptor()", lr=0.02, steps=10,
            step=("loss = F.cross_entropy(model(x[:64]), y[:64])",)),
        "dee-leaves-the-bugs": unfixed("train_tbptt"),
        "eve-counts-one-bias": wrong_answer("lstm_parameter_count", 5504),
    },
    "03_attention": {
        "ada-masks-with-zero": (
            "general_attention",
            """def general_attention(query, keys, values, mask, w):
    scores = ((keys @ w.T) @ query.unsqueeze(-1)).squeeze(-1)
    weights = torch.softmax(scores.masked_fill(~mask, 0.0), dim=-1)  # 0 is not -inf
    return (weights.unsqueeze(1) @ values).squeeze(1), weights
""",
        ),
        "ben-pools-the-hidden-vectors": (
            "attention_pool",
            """def attention_pool(states, mask, w, b, u):
    hidden = torch.tanh(states @ w.T + b)
    weights = torch.softmax((hidden @ u).masked_fill(~mask, float("-inf")), dim=-1)
    return (weights.unsqueeze(1) @ hidden).squeeze(1), weights  # the u_s, not the states
""",
        ),
        "cy-leaves-the-bugs": unfixed("padded_attention"),
        "dee-fixes-two-bugs": (
            "padded_attention",
            """def padded_attention(query, keys, values, lengths):
    S = keys.shape[1]
    mask = torch.arange(S)[None, :] <= lengths[:, None]  # still one padding position in
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(query.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights
""",
        ),
        # Trains too little: its held-out accuracy lands in a lower band.
        "eve-trains-too-little": adam_training(
            "train_marker", "tokens, targets, seed", "MarkerModel()", lr=0.03, steps=6,
            step=MINIBATCH_OF_64),
        "fay-counts-the-real-positions": wrong_answer("decoder_weights_count", 11 * (8 + 21)),
    },
    "04_self_attention": {
        "ada-forgets-sqrt-dk": (
            "qkv_scores",
            """def qkv_scores(x, w_q, w_k, w_v):
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    return q, k, v, q @ k.transpose(-2, -1)  # not divided by sqrt(d_k)
""",
        ),
        "ben-empty-padding-rows": (
            "local_mask",
            """def local_mask(keep, window):
    T = keep.shape[1]
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    inside = (s <= t) & (s > t - window)
    return inside & keep[:, None, :] & keep[:, :, None]  # padding queries see nothing
""",
        ),
        "cy-leaves-the-bugs": unfixed("causal_self_attention"),
        "dee-fixes-three-bugs": (
            "causal_self_attention",
            """def causal_self_attention(x, w_q, w_k, w_v):
    T = x.shape[1]
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(1), float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # the mask still leaks the next token
    return weights @ v, weights
""",
        ),
        # Trains too little: its held-out accuracy lands in a lower band.
        "eve-trains-too-little": adam_training(
            "train_recall", "tokens, targets, seed", "RecallModel()", lr=0.01, steps=20,
            step=MINIBATCH_OF_64),
        "fay-forgets-zero-grad": adam_training(
            "train_recall", "tokens, targets, seed", "RecallModel()", lr=0.01, steps=200,
            step=MINIBATCH_OF_64, note="", zero_grad=False),
        "gus-counts-every-score": wrong_answer("causal_scores_kept", 144),
    },
    "05_multihead": {
        "ada-scales-by-d-model": (
            "head_weights",
            """def head_weights(query, key, w_q, w_k, mask=None):
    q = query[:, None] @ w_q.transpose(-2, -1)
    k = key[:, None] @ w_k.transpose(-2, -1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(query.shape[-1])  # sqrt(D), not sqrt(Dh)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1)
""",
        ),
        "ben-repeats-the-groups-as-a-block": (
            "grouped_query_attention",
            """def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_groups, mask=None):
    B, T, D = x.shape
    Dh = D // n_heads
    q = (x @ w_q.T).view(B, T, n_heads, Dh).transpose(1, 2)
    k = (x @ w_k.T).view(B, T, n_groups, Dh).transpose(1, 2)
    v = (x @ w_v.T).view(B, T, n_groups, Dh).transpose(1, 2)
    k = k.repeat(1, n_heads // n_groups, 1, 1)  # heads g, g + G, ... share group g
    v = v.repeat(1, n_heads // n_groups, 1, 1)
    if mask is not None and mask.dim() == 3:
        mask = mask.unsqueeze(1)
    heads, weights = scaled_dot_product_attention(q, k, v, mask)
    return heads.transpose(1, 2).reshape(B, T, D) @ w_o.T, weights
""",
        ),
        "cy-leaves-the-bugs": unfixed("padded_multi_head_attention"),
        "dee-fixes-three-bugs": (
            "padded_multi_head_attention",
            """def padded_multi_head_attention(query, key, value, lengths, w_q, w_k, w_v, w_o,
                                n_heads):
    B, T, D = query.shape
    S = key.shape[1]
    Dh = D // n_heads

    def heads(x):
        return x.view(B, x.shape[1], n_heads, Dh).transpose(1, 2)

    q, k, v = heads(query @ w_q.T), heads(key @ w_k.T), heads(value @ w_v.T)
    scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)
    keep = torch.arange(S) <= lengths[:, None]  # still lets one padding key in
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(B, T, D)
    return out @ w_o.T, weights
""",
        ),
        # Trains too little: its held-out accuracy lands in a lower band.
        "eve-trains-too-little": adam_training(
            "train_two_markers", "tokens, markers, targets, seed", "TwoMarkerModel()", lr=0.03,
            steps=25, step=(
                "rows = torch.randint(0, len(targets), (128,))",
                "logits = model(tokens[rows], markers[rows])",
                "loss = F.cross_entropy(logits.flatten(0, 1), targets[rows].flatten())",
            )),
        "fay-counts-parameters-per-head": wrong_answer("attention_parameters", 8 * 16640),
        "gus-caches-every-head": wrong_answer("kv_cache_bytes", 2 * 12 * 64 * 4),
    },
    "06_positional": {
        "ada-swaps-sin-and-cos": (
            "sinusoidal_at",
            """def sinusoidal_at(positions, d, base=10000.0):
    w = base ** (-torch.arange(0, d, 2, dtype=positions.dtype) / d)
    angles = positions[:, None] * w
    return torch.stack([angles.cos(), angles.sin()], dim=-1).reshape(len(positions), d)
""",
        ),
        "ben-pastes-the-page-s-pairing": (
            "rope_rotate_half",
            """def rope_rotate_half(x, positions):
    Dh = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    angles = positions.to(torch.float64)[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # the page's neighbours, not the two halves
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
""",
        ),
        "cy-reverses-the-slopes": (
            "alibi_bias",
            """def alibi_bias(n_heads, T, S=None, offset=0):
    n = 2 ** int(math.log2(n_heads))
    slopes = [2 ** (-8 * h / n) for h in range(1, n + 1)]
    slopes += [2 ** (-8 * h / (2 * n)) for h in range(1, 2 * n + 1, 2)][: n_heads - n]
    slopes = slopes[::-1]  # the gentlest slope first
    S = offset + T if S is None else S
    distance = (torch.arange(offset, offset + T)[:, None] - torch.arange(S)[None, :]).abs()
    return -torch.tensor(slopes)[:, None, None] * distance
""",
        ),
        "dee-ignores-the-offset": (
            "alibi_bias",
            """def alibi_bias(n_heads, T, S=None, offset=0):
    n = 2 ** int(math.log2(n_heads))
    slopes = [2 ** (-8 * h / n) for h in range(1, n + 1)]
    slopes += [2 ** (-8 * h / (2 * n)) for h in range(1, 2 * n + 1, 2)][: n_heads - n]
    S = offset + T if S is None else S
    distance = (torch.arange(T)[:, None] - torch.arange(S)[None, :]).abs()  # queries at 0..T-1
    return -torch.tensor(slopes)[:, None, None] * distance
""",
        ),
        "eve-leaves-the-bugs": unfixed("rope_batch"),
        "fay-fixes-three-bugs": (
            "rope_batch",
            """def rope_batch(x, positions, base=10000.0):
    Dh = x.shape[-1]
    theta = base ** (-torch.arange(0, Dh, 2, dtype=x.dtype) / Dh)
    angles = positions[0].to(x.dtype)[:, None] * theta  # still the first sequence's positions
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)
""",
        ),
        # Trains too little: its held-out accuracy lands in a lower band.
        "gus-trains-too-little": adam_training(
            "train_lookback", "tokens, seed", "LookbackModel()", lr=0.01, steps=12, step=(
                "batch = tokens[torch.randint(0, len(tokens), (32,))]",
                "logits = model(batch)[:, 3:]",
                "loss = F.cross_entropy(logits.reshape(-1, 10), batch[:, :-3].reshape(-1))",
            )),
        "hal-predicts-the-current-token": adam_training(
            "train_lookback", "tokens, seed", "LookbackModel()", lr=0.01, steps=200, note="",
            step=(
                "batch = tokens[torch.randint(0, len(tokens), (32,))]",
                "loss = F.cross_entropy(model(batch).reshape(-1, 10), batch.reshape(-1))"
                "  # not shifted",
            )),
        "ivy-forgets-two-pi": wrong_answer("slowest_wavelength", 10000 ** (62 / 64)),
        "jo-forgets-the-last-bucket": wrong_answer("untrained_biases", 32),
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
        "dee-leaves-the-bugs": unfixed("encoder_block"),
        "gus-forgets-the-scale": (
            "attention_step",
            """def attention_step(x_t, w_q, w_k, w_v, cache_k, cache_v):
    keys = torch.cat([cache_k, (x_t @ w_k.T)[:, None]], dim=1)
    values = torch.cat([cache_v, (x_t @ w_v.T)[:, None]], dim=1)
    scores = torch.einsum("bd,bpd->bp", x_t @ w_q.T, keys)  # never divided by sqrt(d_k)
    return torch.einsum("bp,bpd->bd", torch.softmax(scores, dim=-1), values), keys, values
""",
        ),
        "hal-predicts-the-input": (
            "train_transformer_lm",
            """def train_transformer_lm(train_ids, config, seed):
    torch.manual_seed(seed)
    model = TransformerLM(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    T = config.block_size
    for _ in range(40):
        starts = torch.randint(len(train_ids) - T, (16,)).tolist()
        x = torch.stack([train_ids[s:s + T] for s in starts])
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())  # targets not shifted
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model
""",
        ),
        "ivy-counts-no-biases": wrong_answer("capstone_parameters", 63360),
        "jo-answers-in-bits": wrong_answer("uniform_nats", 6.392317422778761),
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


def _defining_cell(nb: nbformat.NotebookNode, func_name: str) -> str:
    """The source of the code cell that defines ``func_name``."""
    for cell in nb.cells:
        if cell.cell_type == "code" and f"def {func_name}(" in cell.source:
            return cell.source
    raise ValueError(f"no code cell defines {func_name}() in the exercise notebook")


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
        if wrong == UNFIXED:
            wrong = _defining_cell(nbformat.read(exercise, as_version=4), func_name)
        _replace_function(nb, func_name, wrong)
        target = folder / f"{student}.ipynb"
        nbformat.write(nb, target)
        written.append(target)
    return written
