"""Held-out nats per character against training seconds: n-gram, LSTM and Transformer LMs.

Run with ``.venv/bin/python benchmarks/bench_training.py`` (about 4 minutes on 2 cores;
``--quick`` for a smoke run). Writes ``benchmarks/results/training.json``. Options:
``--repeats`` (training runs per network, 3), ``--scale`` (multiply both networks' steps),
``--threads`` (1, as the book), ``--long MINUTES`` (below).

The data behind chapter 7's closing table, with the chapter's code and settings:
``data.shakespeare_lines()``, the last 10% held out, the first 3,000 held-out lines scored,
characters as tokens (the n-gram models predict ``</s>`` where the networks predict a newline).

* n-gram: interpolated Kneser-Ney models of order 2 to 6 fitted on all training lines; for each,
  the fitting (counting) time and the held-out nats per character. The 6-gram is the table's row;
  its fit is timed ``--repeats`` times (median), the others once.
* LSTM: chapter 2's ``RNNLM(V, 48, 192)``, 100 steps of 32 windows of 64 characters, AdamW at
  0.02 with 20 warm-up steps, evaluated in windows of 256.
* Transformer: chapter 7's ``TransformerLM(V, 64, d_model=64, n_heads=4, n_layers=2, pos="rope",
  fused=True)``, 300 steps of 16 windows of 64, AdamW at 0.01.

Both networks train with ``coursepkg.lm.train`` (its ``seconds`` exclude evaluations) from the
same seeds, so their losses are the same on every run and only the times vary: each is trained
``--repeats`` times and the median time reported. The curve of held-out loss (on the first 4,000
held-out characters, every 20 or 60 steps) is placed on the time axis at ``step / steps`` of the
run's training time (every step does the same work).

``--long MINUTES`` (``make bench-long``: 35 minutes, not part of ``make bench``) answers what the
book's seconds cannot: which model is best when each network gets MINUTES of training. The LSTM
(chapter 2's, as above) and a larger Transformer (``d_model=128``, 4 blocks, windows of 128, 32 per
step, AdamW at 3e-3 with 200 warm-up steps) train side by side, each in its own process on one
core; each first times 20 steps to choose how many steps fill the budget, so both learning-rate
schedules run to the end. The Kneser-Ney models of order 5 to 7 are fitted as above. Writes
``benchmarks/results/training-long.json`` and its digest into chapter 7, which shows its table.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import re
import statistics
import time

import benchlib
import torch
from benchlib import log

from coursepkg import data, lm
from coursepkg.ngram import EOS, NGramLM
from coursepkg.rnn import RNNLM
from coursepkg.transformer import TransformerLM


def n_parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())


def ngram_rows(train_lines, test_lines, orders, repeats) -> list[dict]:
    char_vocab = set(data.CharTokenizer().fit(data.shakespeare()).chars) | {EOS}
    train_chars = sum(len(line) + 1 for line in train_lines)
    rows = []
    for order in orders:
        times, model = [], None
        for _ in range(repeats if order == orders[-1] else 1):
            model, seconds = benchlib.timed(
                lambda o=order: NGramLM(o, smoothing="kneser_ney", vocab=char_vocab).fit(
                    map(list, train_lines)))
            times.append(seconds)
        nats = math.log(model.perplexity(map(list, test_lines)))
        counts = sum(len(model.ngram_counts(m)) for m in range(1, order + 1))
        rows.append({"model": f"Kneser-Ney {order}-gram", "order": order,
                     "seconds": benchlib.summary(times), "chars_seen": train_chars,
                     "parameters": counts, "nats": nats})
        log(f"  Kneser-Ney {order}-gram: {nats:.3f} nats/char, {counts:,} counts, fitted in "
            f"{statistics.median(times):.1f} s")
    return rows


def network_row(name, build, train_ids, test_ids, repeats, eval_block, **train_kwargs) -> dict:
    runs, histories, model = [], [], None
    for _ in range(repeats):
        torch.manual_seed(0)
        model = build()
        history = lm.train(model, train_ids, test_ids, progress=False, seed=0, **train_kwargs)
        runs.append(history.seconds)
        histories.append(history)
    nats = lm.evaluate(model, test_ids, block_size=eval_block)
    first = histories[0]
    seconds = statistics.median(runs)
    steps = train_kwargs["steps"]
    row = {
        "model": name, "seconds": benchlib.summary(runs), "chars_seen": first.tokens,
        "parameters": n_parameters(model), "nats": nats, "steps": steps,
        "curve": {"seconds": [seconds * s / steps for s in first.val_steps],
                  "steps": first.val_steps, "val_nats": first.val_loss},
        "train_loss": first.train_loss,
        "losses_identical_across_runs": all(h.train_loss == first.train_loss for h in histories),
    }
    log(f"  {name}: {nats:.3f} nats/char; {row['parameters']:,} parameters, "
        f"{first.tokens:,} characters in {seconds:.1f} s (median of {repeats}: "
        + ", ".join(f"{t:.1f}" for t in runs) + ")")
    return row


def load_split(quick: bool) -> dict:
    """Chapter 7's split: training lines, the first 3,000 held-out lines, and their token ids."""
    lines = data.shakespeare_lines()
    train_lines, heldout_lines = data.train_test_split(lines, 0.1)
    test_lines = heldout_lines[:3000]
    if quick:
        train_lines, test_lines = train_lines[:20_000], test_lines[:300]
    tokenizer = data.CharTokenizer().fit("\n".join(lines) + "\n")
    return {
        "train_lines": train_lines, "test_lines": test_lines,
        "train_ids": torch.tensor(tokenizer.encode("\n".join(train_lines) + "\n")),
        "test_ids": torch.tensor(tokenizer.encode("\n".join(test_lines) + "\n")),
        "V": tokenizer.vocab_size,
    }


LONG_MODELS = {
    "LSTM (chapter 2)": dict(
        build=lambda V: RNNLM(V, d_embed=48, d_hidden=192, cell="lstm"), eval_block=256,
        batch_size=32, block_size=64, lr=0.02, warmup=20),
    "Transformer (d_model 128, 4 blocks)": dict(
        build=lambda V: TransformerLM(V, 128, d_model=128, n_heads=4, n_layers=4, pos="rope",
                                      fused=True),
        eval_block=128, batch_size=32, block_size=128, lr=3e-3, warmup=200),
}


def long_worker(name: str, minutes: float, quick: bool) -> dict:
    """Train one of LONG_MODELS for about ``minutes`` on one thread (run in its own process)."""
    torch.set_num_threads(1)
    split = load_split(quick)
    spec = dict(LONG_MODELS[name])
    build, eval_block = spec.pop("build"), spec.pop("eval_block")
    V = split["V"]
    torch.manual_seed(0)
    probe = lm.train(build(V), split["train_ids"], steps=20, progress=False, seed=1,
                     **{**spec, "warmup": 0})
    steps = max(20, int(minutes * 60 / (probe.seconds / 20)))
    log(f"  {name}: {probe.seconds / 20 * 1e3:.0f} ms a step, so {steps:,} steps in "
        f"{minutes:g} minutes")
    row = network_row(name, lambda: build(V), split["train_ids"], split["test_ids"], 1,
                      eval_block, steps=steps, eval_every=max(1, steps // 20),
                      eval_tokens=20_000, **spec)
    row["budget_minutes"] = minutes
    return row


def long_main(args) -> None:
    minutes = 0.2 if args.quick else args.long
    split = load_split(args.quick)
    log(f"{len(split['train_ids']):,} training characters, {len(split['test_ids']):,} test "
        f"characters; each network trains {minutes:g} minutes on one core, side by side")
    torch.set_num_threads(1)
    orders = [2, 3] if args.quick else [5, 6, 7]
    rows = ngram_rows(split["train_lines"], split["test_lines"], orders, 1)
    start = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(LONG_MODELS)) as pool:
        pending = [pool.apply_async(long_worker, (name, minutes, args.quick))
                   for name in LONG_MODELS]
        rows += [job.get() for job in pending]
        pool.close()
        pool.join()
    log(f"  all done in {(time.perf_counter() - start) / 60:.1f} minutes")
    log("")
    print_rows(rows)
    path = benchlib.write_results("training-long", {
        "vocab": split["V"], "train_chars": len(split["train_ids"]),
        "test_chars": len(split["test_ids"]), "budget_minutes": minutes, "rows": rows}, args)
    if not args.quick:
        pin_in_chapter(path)


def pin_in_chapter(path) -> None:
    """Write the results file's digest into chapter 7's ``LONG_DIGEST = ...`` line.

    The page pins the run it was written for: a new run changes the page's code, so the book's
    execution cache re-runs it.
    """
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    page = benchlib.ROOT / "book" / "07_transformer.md"
    page.write_text(re.sub(r"(?m)^LONG_DIGEST = .*$", f"LONG_DIGEST = {digest!r}",
                           page.read_text()))
    log(f"{page.relative_to(benchlib.ROOT)} now shows the run {digest}: check its prose against "
        "the new numbers")


def print_rows(rows: list[dict]) -> None:
    benchlib.table(
        ["model", "parameters", "training time", "characters seen", "chars/s", "nats/char"],
        [[r["model"], f"{r['parameters']:,}", f"{r['seconds']['median']:.1f} s",
          f"{r['chars_seen']:,}", f"{r['chars_seen'] / r['seconds']['median']:,.0f}",
          f"{r['nats']:.3f}"] for r in rows],
    )


def main() -> None:
    parser = benchlib.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="training runs per network (3)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply both networks' steps (1 = chapter 7's budget)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1, as the book)")
    parser.add_argument("--long", type=float, metavar="MINUTES",
                        help="train each network about MINUTES on one core (make bench-long)")
    args = parser.parse_args()
    if args.long is not None:
        if args.long <= 0:
            parser.error(f"--long takes a positive number of minutes, not {args.long:g}")
        benchlib.warn_if_busy()
        long_main(args)
        return
    torch.set_num_threads(args.threads)
    benchlib.warn_if_busy()

    split = load_split(args.quick)
    train_lines, test_lines = split["train_lines"], split["test_lines"]
    train_ids, test_ids, V = split["train_ids"], split["test_ids"], split["V"]
    orders = [2, 3, 4, 5, 6]
    lstm_steps, tf_steps = round(100 * args.scale), round(300 * args.scale)
    if args.quick:
        orders, args.repeats, lstm_steps, tf_steps = [2, 3], 1, 10, 30
    log(f"{len(train_ids):,} training characters, {len(test_ids):,} test characters, V = {V}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")

    rows = ngram_rows(train_lines, test_lines, orders, args.repeats)
    rows.append(network_row(
        "LSTM (chapter 2)", lambda: RNNLM(V, d_embed=48, d_hidden=192, cell="lstm"),
        train_ids, test_ids, args.repeats, 256, steps=lstm_steps, batch_size=32, block_size=64,
        lr=0.02, warmup=min(20, lstm_steps // 2), eval_every=max(1, lstm_steps // 5),
        eval_tokens=4000,
    ))
    rows.append(network_row(
        "Transformer (chapter 7)",
        lambda: TransformerLM(V, 64, d_model=64, n_heads=4, n_layers=2, pos="rope", fused=True),
        train_ids, test_ids, args.repeats, 64, steps=tf_steps, batch_size=16, block_size=64,
        lr=0.01, warmup=min(20, tf_steps // 2), eval_every=max(1, tf_steps // 5),
        eval_tokens=4000,
    ))
    log("")
    print_rows(rows)
    benchlib.write_results("training", {"vocab": V, "train_chars": len(train_ids),
                                        "test_chars": len(test_ids), "rows": rows}, args)


if __name__ == "__main__":
    main()
