"""How cost grows with sequence length: self-attention's n^2, and RNN vs Transformer training.

Run with ``.venv/bin/python benchmarks/bench_scaling.py`` (about 3 minutes on 2 cores;
``--quick`` for a smoke run). Writes ``benchmarks/results/scaling.json``. Options:
``--threads`` (torch threads, 1 as in the book), ``--max-length``, ``--repeats``.

1. Self-attention against the sequence length n: the forward and backward time and the peak
   memory of the course's ``scaled_dot_product_attention`` (which builds the (n, n) score and
   weight matrices) and of torch's fused ``F.scaled_dot_product_attention`` (which never stores
   them), causal, at chapter 7's head shape (B, H, n, Dh) = (1, 4, n, 16), n = 64 .. 4,096.
   Times are medians of ``--repeats`` alternated runs. The peak memory is measured in a fresh
   process per (implementation, n) (this script, re-run with a hidden option): after one warm-up
   pass, the kernel's peak-RSS counter is reset (``/proc/self/clear_refs``), one more forward and
   backward pass runs, and the peak is ``VmHWM`` minus the resident size just before it (glibc's
   mmap threshold is pinned, so freed buffers leave the process). Linux only; elsewhere the
   memory column is empty. For scale, the JSON also gives the size of one (B, H, n, n) float32
   matrix.
2. Training throughput against the window length, chapter 7's experiment: a training step
   (forward, cross-entropy, backward, AdamW) on 2,048 characters cut into windows of n = 16 ..
   1,024, for chapter 2's ``RNNLM`` (the course's LSTM, a Python loop), the same model with
   ``nn.LSTM`` (a compiled loop), and chapter 7's ``TransformerLM`` (RoPE, fused attention).
   Characters per second of the median step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import benchlib
import torch
import torch.nn.functional as F
from benchlib import log
from torch import nn

from coursepkg.rnn import RNNLM
from coursepkg.self_attention import causal_mask, scaled_dot_product_attention
from coursepkg.transformer import TransformerLM

HEADS, D_HEAD = 4, 16
VOCAB = 84  # the corpus's characters (chapter 7's V)
TOKENS_PER_BATCH = 2048
LM_CONFIG = dict(d_model=64, n_heads=4, n_layers=2, pos="rope")


def attention_pass(impl: str, n: int):
    """A closure: one causal forward and backward pass of ``impl`` at length n."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, n, D_HEAD, generator=g, requires_grad=True)
               for _ in range(3))
    mask = causal_mask(n) if impl == "ours" else None

    def run():
        for x in (q, k, v):
            x.grad = None
        if impl == "ours":
            out, _ = scaled_dot_product_attention(q, k, v, mask)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
    return run


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measure_memory_child(impl: str, n: int) -> None:
    """In a fresh process: print the peak extra resident memory (bytes) of one pass."""
    torch.set_num_threads(1)
    run = attention_pass(impl, n)
    run()  # warm-up
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kb("VmRSS")
    run()
    print(json.dumps({"peak_bytes": (_status_kb("VmHWM") - before) * 1024}))


def peak_memory(impl: str, n: int) -> int | None:
    if not Path("/proc/self/clear_refs").exists():
        return None
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, __file__, "--memory-child", impl, str(n)],
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        log(f"  memory measurement failed for {impl} n={n}: {proc.stderr.strip()[-300:]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])["peak_bytes"]


def attention_scaling(lengths: list[int], repeats: int) -> dict:
    rows = []
    for n in lengths:
        times = benchlib.interleaved({"ours": attention_pass("ours", n),
                                      "torch_fused": attention_pass("torch", n)},
                                     repeats if n <= 1024 else max(3, repeats // 2))
        memory = {impl: peak_memory(impl, n) for impl in ("ours", "torch")}
        row = {"n": n, "ours_s": times["ours"], "torch_fused_s": times["torch_fused"],
               "ours_peak_bytes": memory["ours"], "torch_fused_peak_bytes": memory["torch"],
               "weights_matrix_bytes": HEADS * n * n * 4}
        rows.append(row)

    def mb(b):
        return "-" if b is None else f"{b / 2**20:.1f} MB"

    benchlib.table(
        ["n", "ours", "torch fused", "ours/torch", "peak ours", "peak torch", "one (B,H,n,n)"],
        [[r["n"], f"{1e3 * r['ours_s']['median']:.2f} ms",
          f"{1e3 * r['torch_fused_s']['median']:.2f} ms",
          f"{r['ours_s']['median'] / r['torch_fused_s']['median']:.2f}x",
          mb(r["ours_peak_bytes"]), mb(r["torch_fused_peak_bytes"]),
          mb(r["weights_matrix_bytes"])] for r in rows],
    )
    return {"shape": f"(1, {HEADS}, n, {D_HEAD}) causal", "rows": rows}


class TorchLSTMLM(nn.Module):
    """Chapter 2's RNNLM with torch's compiled nn.LSTM in place of the course's loop."""

    def __init__(self, vocab: int, d_embed: int, d_hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_embed)
        self.rnn = nn.LSTM(d_embed, d_hidden, batch_first=True)
        self.head = nn.Linear(d_hidden, vocab)

    def forward(self, idx):
        return self.head(self.rnn(self.embed(idx))[0])


def throughput(lengths: list[int], repeats: int) -> dict:
    builders = {
        "LSTM (coursepkg, chapter 2)": lambda T: RNNLM(VOCAB, d_embed=48, d_hidden=192),
        "LSTM (nn.LSTM)": lambda T: TorchLSTMLM(VOCAB, 48, 192),
        "Transformer (chapter 7, fused)": lambda T: TransformerLM(VOCAB, T, **LM_CONFIG,
                                                                  fused=True),
    }
    result = {name: [] for name in builders}
    for T in lengths:
        x = torch.randint(0, VOCAB, (TOKENS_PER_BATCH // T, T),
                          generator=torch.Generator().manual_seed(0))
        fns = {}
        for name, build in builders.items():
            torch.manual_seed(0)
            model = build(T)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

            def step(model=model, optimizer=optimizer, x=x):
                loss = F.cross_entropy(model(x).reshape(-1, VOCAB), x.reshape(-1))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            fns[name] = step
        times = benchlib.interleaved(fns, repeats)
        for name in builders:
            result[name].append({"T": T, "step_s": times[name],
                                 "chars_per_s": TOKENS_PER_BATCH / times[name]["median"]})
    benchlib.table(["window", "windows", *builders],
                   [[T, TOKENS_PER_BATCH // T,
                     *(f"{result[name][i]['chars_per_s']:,.0f} chars/s" for name in builders)]
                    for i, T in enumerate(lengths)])
    return {"tokens_per_batch": TOKENS_PER_BATCH, "lengths": lengths, "models": result}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--memory-child":
        measure_memory_child(sys.argv[2], int(sys.argv[3]))
        return
    parser = benchlib.parser(__doc__)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1, as the book)")
    parser.add_argument("--max-length", type=int, default=4096,
                        help="the longest sequence for self-attention (4096)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each (7)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    benchlib.warn_if_busy()
    attention_lengths = [n for n in (64, 128, 256, 512, 1024, 2048, 4096) if n <= args.max_length]
    lm_lengths = [16, 64, 256, 1024]
    if args.quick:
        attention_lengths, lm_lengths, args.repeats = [64, 128, 256], [16, 64], 2
    log(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    log(f"\nself-attention, forward and backward, (B, H, n, Dh) = (1, {HEADS}, n, {D_HEAD}), "
        "causal:")
    attention = attention_scaling(attention_lengths, args.repeats)
    log(f"\ntraining throughput, {TOKENS_PER_BATCH:,} characters per step cut into windows of n:")
    train = throughput(lm_lengths, args.repeats)
    benchlib.write_results("scaling", {"threads": args.threads, "attention": attention,
                                       "training_throughput": train}, args)


if __name__ == "__main__":
    main()
