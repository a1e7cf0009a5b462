"""Forward + backward time of the course's layers against torch's own, at the chapters' shapes.

Run with ``.venv/bin/python benchmarks/bench_layers.py`` (about a minute on 2 cores; ``--quick``
for a smoke run). Writes ``benchmarks/results/layers.json``. Options: ``--threads`` (torch
threads, 1 as in the chapters), ``--repeats``.

Each row times one forward and backward pass (``out.sum().backward()``, float32, training mode,
dropout 0) of a ``coursepkg`` layer and of its torch counterpart on the same input, after
copying the weights so both compute the same function (checked: the largest difference of the
outputs is in the JSON). Runs alternate between the two in this process; the median of
``--repeats`` runs of each is reported, and the ratio ours / torch's (above 1: ours is slower).

* ``LSTM`` vs ``nn.LSTM``: chapter 2's character LSTM, a batch of 32 windows of 64 steps,
  48 inputs, 192 hidden units (ours is a Python loop over the 64 steps; torch's is compiled).
* ``scaled_dot_product_attention`` vs ``F.scaled_dot_product_attention``: chapter 7's language
  model, (B, H, T, Dh) = (16, 4, 64, 16) with the causal mask; and chapter 4's single head,
  (1, 1, 256, 64) without a mask.
* ``MultiHeadAttention`` (``forward`` and ``fused_forward``) vs ``nn.MultiheadAttention``:
  chapter 7's D = 64, H = 4 on 16 windows of 64 with the causal mask; chapter 5's D = 512, H = 8
  on one sequence of 128.
* ``TransformerEncoderLayer`` (plain and fused) vs ``nn.TransformerEncoderLayer``: chapter 7's
  block, pre-norm, GELU, D = 64, H = 4, F = 256, 16 windows of 64, causal.
* A ``TransformerLM`` training step (forward, cross-entropy, backward, gradient clipping, AdamW)
  against the same model built from torch's modules (``nn.Embedding``, a learned position table,
  ``nn.TransformerEncoderLayer`` blocks with ``is_causal=True``, ``nn.LayerNorm``,
  ``nn.Linear``): chapter 7's configuration with learned positions (torch has no RoPE), 2 blocks,
  D = 64, H = 4, 16 windows of 64 characters, the corpus's vocabulary. Ours is timed plain,
  fused, and with chapter 7's RoPE. The issue's target: ours fused within 1.2x of torch's.

Then ``torch.profiler`` records a few training steps of the torch-built model and of ours (fused,
with learned positions and with RoPE) and lists the operators that take the most time in each
(self CPU time), to show where a gap comes from.
"""

from __future__ import annotations

import math

import benchlib
import torch
import torch.nn.functional as F
from benchlib import log
from torch import nn

from coursepkg.multihead import MultiHeadAttention
from coursepkg.rnn import LSTM
from coursepkg.self_attention import causal_mask, scaled_dot_product_attention
from coursepkg.transformer import TransformerEncoderLayer, TransformerLM

VOCAB = 85  # about the corpus's number of distinct characters (the exact V hardly matters)


def fwd_bwd(fn, *inputs):
    """A closure running ``fn(*inputs)`` forward and backward (gradients cleared first)."""
    def run():
        for x in inputs:
            x.grad = None
        out = fn(*inputs)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
    return run


def leaf(*shape):
    return torch.randn(*shape, requires_grad=True)


def compare(name: str, shape: str, fns: dict, repeats: int, check: float | None) -> dict:
    """Time the closures in ``fns`` (the first is torch's) in alternation."""
    times = benchlib.interleaved(fns, repeats, warmup=2)
    reference = next(iter(fns))
    row = {"layer": name, "shape": shape, "times": times, "max_abs_diff": check,
           "ratios": {k: times[k]["median"] / times[reference]["median"] for k in fns
                      if k != reference}}
    cells = ", ".join(f"{k} {1e3 * t['median']:.2f} ms" for k, t in times.items())
    ratios = ", ".join(f"{k} {r:.2f}x" for k, r in row["ratios"].items())
    log(f"{name} {shape}: {cells}; ours / torch: {ratios}")
    return row


def max_diff(a, b) -> float:
    a = a[0] if isinstance(a, tuple) else a
    b = b[0] if isinstance(b, tuple) else b
    return (a - b).abs().max().item()


def lstm_row(repeats: int) -> dict:
    torch.manual_seed(0)
    theirs = nn.LSTM(48, 192, batch_first=True)
    mine = LSTM(48, 192)
    mine.load_state_dict(theirs.state_dict())
    x = leaf(32, 64, 48)
    with torch.no_grad():
        diff = max_diff(mine(x), theirs(x))
    return compare("LSTM", "B=32 T=64 I=48 Hs=192",
                   {"torch": fwd_bwd(theirs, x), "ours": fwd_bwd(mine, x)}, repeats, diff)


def sdpa_rows(repeats: int) -> list[dict]:
    rows = []
    for (B, H, T, Dh), causal in (((16, 4, 64, 16), True), ((1, 1, 256, 64), False)):
        torch.manual_seed(0)
        q, k, v = leaf(B, H, T, Dh), leaf(B, H, T, Dh), leaf(B, H, T, Dh)
        mask = causal_mask(T) if causal else None

        def theirs(q, k, v, causal=causal):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def mine(q, k, v, mask=mask):
            return scaled_dot_product_attention(q, k, v, mask)

        with torch.no_grad():
            diff = max_diff(mine(q, k, v), theirs(q, k, v))
        rows.append(compare("scaled_dot_product_attention",
                            f"B={B} H={H} T={T} Dh={Dh}{' causal' if causal else ''}",
                            {"torch": fwd_bwd(theirs, q, k, v), "ours": fwd_bwd(mine, q, k, v)},
                            repeats, diff))
    return rows


def mha_rows(repeats: int) -> list[dict]:
    rows = []
    for B, T, D, H, causal in ((16, 64, 64, 4, True), (1, 128, 512, 8, False)):
        torch.manual_seed(0)
        theirs = nn.MultiheadAttention(D, H, batch_first=True)
        plain = MultiHeadAttention.from_torch(theirs)
        x = leaf(B, T, D)
        mask = causal_mask(T) if causal else None
        torch_mask = None if mask is None else ~mask  # torch: True = may NOT attend

        def run_theirs(x, m=theirs, tm=torch_mask, causal=causal):
            return m(x, x, x, attn_mask=tm, need_weights=False, is_causal=causal)[0]

        def run_plain(x, m=plain, mask=mask):
            return m(x, x, x, mask)[0]

        def run_fused(x, m=plain, mask=mask):
            return m.fused_forward(x, x, x, mask)

        with torch.no_grad():
            diff = max(max_diff(run_plain(x), run_theirs(x)), max_diff(run_fused(x), run_theirs(x)))
        rows.append(compare("MultiHeadAttention",
                            f"B={B} T={T} D={D} H={H}{' causal' if causal else ''}",
                            {"torch": fwd_bwd(run_theirs, x), "ours": fwd_bwd(run_plain, x),
                             "ours_fused": fwd_bwd(run_fused, x)}, repeats, diff))
    return rows


def encoder_row(repeats: int) -> dict:
    B, T, D, H, Fw = 16, 64, 64, 4, 256
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(D, H, Fw, dropout=0.0, activation="gelu",
                                        batch_first=True, norm_first=True)
    plain = TransformerEncoderLayer.from_torch(theirs)
    fused = TransformerEncoderLayer.from_torch(theirs)
    fused.fused = True  # the layer calls its attention's fused_forward
    x = leaf(B, T, D)
    mask = causal_mask(T)

    def run_theirs(x):
        return theirs(x, src_mask=~mask, is_causal=True)

    def run_plain(x):
        return plain(x, mask)

    def run_fused(x):
        return fused(x, mask)

    with torch.no_grad():
        diff = max(max_diff(run_plain(x), run_theirs(x)), max_diff(run_fused(x), run_theirs(x)))
    return compare("TransformerEncoderLayer", f"B={B} T={T} D={D} H={H} F={Fw} pre-norm causal",
                   {"torch": fwd_bwd(run_theirs, x), "ours": fwd_bwd(run_plain, x),
                    "ours_fused": fwd_bwd(run_fused, x)}, repeats, diff)


class TorchLM(nn.Module):
    """Chapter 7's TransformerLM (learned positions, pre-norm, GELU) built from torch's modules,
    with the parameter names of ``coursepkg.transformer.TransformerLM`` where they can be."""

    def __init__(self, vocab: int, block: int, d_model: int, n_heads: int, n_layers: int):
        super().__init__()
        self.d_model = d_model
        self.token_embed = nn.Embedding(vocab, d_model)
        self.positions = nn.Parameter(torch.zeros(block, d_model))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.token_embed(idx) * math.sqrt(self.d_model) + self.positions[:T]  # (B, T, D)
        mask = nn.Transformer.generate_square_subsequent_mask(T)  # (T, T) float, -inf above
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))  # (B, T, V)

    def course_state_dict(self) -> dict:
        """Our state dict names for these weights."""
        state = {}
        for name, value in self.state_dict().items():
            name = name.replace("positions", "positions.weight")
            name = name.replace(".linear1.", ".ff.linear1.").replace(".linear2.", ".ff.linear2.")
            state[name] = value
        return state


def train_step(model, x, y, optimizer):
    def run():
        logits = model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return run


def lm_row(repeats: int, profile_steps: int) -> dict:
    B, T, D, H, L = 16, 64, 64, 4, 2
    torch.manual_seed(0)
    theirs = TorchLM(VOCAB, T, D, H, L)
    models = {"torch": theirs}
    for name, kwargs in (("ours", {}), ("ours_fused", {"fused": True})):
        m = TransformerLM(VOCAB, T, D, H, L, pos="learned", **kwargs)
        m.load_state_dict(theirs.course_state_dict())
        models[name] = m
    torch.manual_seed(0)
    models["ours_fused_rope"] = TransformerLM(VOCAB, T, D, H, L, pos="rope", fused=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (B, T), generator=g)
    y = torch.randint(0, VOCAB, (B, T), generator=g)
    with torch.no_grad():
        diff = max(max_diff(models[k](x), theirs(x)) for k in ("ours", "ours_fused"))
    fns = {name: train_step(m, x, y, torch.optim.AdamW(m.parameters(), lr=1e-4))
           for name, m in models.items()}
    row = compare("TransformerLM training step",
                  f"V={VOCAB} B={B} T={T} D={D} H={H} L={L} learned positions", fns, repeats, diff)
    row["target"] = {"max_ratio": 1.2, "ratio": row["ratios"]["ours_fused"],
                     "met": row["ratios"]["ours_fused"] <= 1.2}
    row["profile"] = {name: profile(fns[name], profile_steps)
                      for name in ("torch", "ours_fused", "ours_fused_rope")}
    for name, ops in row["profile"].items():
        log(f"\n  where the time goes, {name} ({profile_steps} steps, self CPU time):")
        benchlib.table(["operator", "calls/step", "ms/step", "share"],
                       [[o["op"], f"{o['calls_per_step']:g}", f"{o['ms_per_step']:.3f}",
                         f"{o['share']:.0%}"] for o in ops["top"]])
        log(f"  total {ops['total_ms_per_step']:.2f} ms/step, {ops['ops_per_step']:.0f} operator "
            "calls per step")
    return row


def profile(fn, steps: int, top: int = 12) -> dict:
    """The operators that take the most self CPU time over ``steps`` calls of ``fn``."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    fn()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {
        "total_ms_per_step": total / 1e3 / steps,
        "ops_per_step": sum(e.count for e in events) / steps,
        "top": [{"op": e.key, "calls_per_step": e.count / steps,
                 "ms_per_step": e.self_cpu_time_total / 1e3 / steps,
                 "share": e.self_cpu_time_total / total} for e in rows],
    }


def main() -> None:
    parser = benchlib.parser(__doc__)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1, as the book)")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs of each (30)")
    parser.add_argument("--profile-steps", type=int, default=20, help="profiled steps (20)")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.profile_steps = 3, 2
    torch.set_num_threads(args.threads)
    benchlib.warn_if_busy()
    log(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), float32, "
        f"median of {args.repeats} alternated runs\n")
    rows = [lstm_row(args.repeats), *sdpa_rows(args.repeats), *mha_rows(args.repeats),
            encoder_row(args.repeats), lm_row(args.repeats, args.profile_steps)]
    lm = rows[-1]
    log(f"\nTransformerLM training step, ours (fused) / torch-built: {lm['target']['ratio']:.2f}x "
        f"(target <= 1.2x: {'met' if lm['target']['met'] else 'missed'})")
    benchlib.write_results("layers", {"threads": args.threads, "rows": rows}, args)


if __name__ == "__main__":
    main()
