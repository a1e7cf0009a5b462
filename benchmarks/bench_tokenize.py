"""BPE training and encoding against Hugging Face ``tokenizers``; the key/value cache's speed-up.

Run with ``.venv/bin/python benchmarks/bench_tokenize.py`` (about 3 minutes on 2 cores, most of
it generating 1,024 tokens without a cache; ``--quick`` for a smoke run). Writes
``benchmarks/results/tokenize.json``.

**Tokenizers.** The data is chapter 2's split of the corpus: the training lines joined by
newlines (about 4.5 MB), and the held-out lines for encoding. ``coursepkg.tokenize.BPE.train``
(pure Python, one core, incremental pair counts) is timed at vocabulary sizes 512, 1,024 and
4,096, alternating with the BPE trainer of Hugging Face's ``tokenizers`` (Rust, using every core;
set ``RAYON_NUM_THREADS=1`` for one) configured the same way: GPT-2's byte-level pre-tokenizer,
the 256 bytes as the initial alphabet, no special tokens, no minimum frequency. Then each encodes
the held-out lines, one call per line (ours from a fresh tokenizer, so its per-chunk memo starts
empty; theirs with ``encode_batch``, which uses every core). The ratios
are ours / theirs (above 1: ours is slower). The JSON also says how many of the learned tokens
the two share (the pre-tokenizers' regular expressions differ slightly: ``re`` has no ``\\p{L}``,
and ties may be broken differently) and whether their encodings have the same length.

``tokenizers`` is not a course dependency: with the lock's pins it would bring the Hugging Face
Hub client and its Xet storage binary (huggingface_hub, hf-xet, httpx2, httpcore2, truststore,
about 35 MB with tokenizers itself). It imports and trains without them, so install it alone:
``.venv/bin/pip install --no-deps tokenizers==0.23.3``. Without it, the script times ours only.

**The cache.** ``lm.generate`` with and without ``use_cache`` on a chapter-7-sized
``TransformerLM`` (D = 64, H = 4, 2 blocks, RoPE, fused attention, the corpus's characters,
random weights: speed does not depend on them), one thread, a one-token prompt, 256 and 1,024
new tokens (``--lengths``). The window (``block_size``) holds the whole sequence, as the cache
only helps within the window (beyond it both recompute the window at every step: a row with
chapter 7's window of 64 shows it). Reported: tokens per second with and without the cache and
their ratio, whether both produced the same tokens, and the cumulative time against the number
of generated tokens (a step without the cache grows with the length and the length squared; a
cached step grows with the length only, from the key and value projections of the cached
inputs, see ``coursepkg.transformer.KVCache``).
"""

from __future__ import annotations

import json
import time

import benchlib
import torch
from benchlib import log
from torch import nn

from coursepkg import data, lm
from coursepkg.tokenize import BPE
from coursepkg.transformer import TransformerLM

try:
    import tokenizers  # noqa: F401  (optional: see the docstring)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError:
    tokenizers = None


# ----------------------------------------------------------------------------- tokenizers
def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's map from the printable characters of a byte-level vocabulary to the bytes."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
                 + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def train_theirs(text: str, vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], min_frequency=0)
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def their_tokens(tok: Tokenizer) -> set[bytes]:
    to_byte = gpt2_byte_decoder()
    return {bytes(to_byte[c] for c in token) for token in tok.get_vocab()}


def tokenizer_rows(train_text: str, held_out: list[str], sizes: list[int], repeats: int
                   ) -> list[dict]:
    rows = []
    text = "".join(held_out)
    mb = len(text.encode()) / 1e6
    for vocab_size in sizes:
        fns = {"ours": lambda v=vocab_size: BPE.train(train_text, v)}
        if tokenizers is not None:
            fns["tokenizers"] = lambda v=vocab_size: train_theirs(train_text, v)
        train_times = benchlib.interleaved(fns, repeats, warmup=0)
        ours = BPE.train(train_text, vocab_size)

        def encode_ours(merges=ours.merges):
            bpe = BPE(merges)  # a fresh memo each time
            return [bpe.encode(line) for line in held_out]

        encode_fns = {"ours": encode_ours}
        if tokenizers is not None:
            theirs = train_theirs(train_text, vocab_size)
            encode_fns["tokenizers"] = lambda t=theirs: [e.ids for e in t.encode_batch(held_out)]
        encode_times = benchlib.interleaved(encode_fns, repeats)
        ids = [i for line in encode_ours() for i in line]
        assert ours.decode(ids) == text
        row = {
            "vocab_size": vocab_size,
            "train_seconds": train_times,
            "encode_seconds": encode_times,
            "encode_mb_per_second": {k: mb / v["median"] for k, v in encode_times.items()},
            "held_out_bytes": len(text.encode()),
            "held_out_tokens": {"ours": len(ids)},
        }
        if tokenizers is not None:
            shared = their_tokens(theirs) & set(ours.vocab)
            row["held_out_tokens"]["tokenizers"] = sum(map(len, encode_fns["tokenizers"]()))
            row["shared_tokens"] = len(shared)
            row["train_ratio"] = (train_times["ours"]["median"]
                                  / train_times["tokenizers"]["median"])
            row["encode_ratio"] = (encode_times["ours"]["median"]
                                   / encode_times["tokenizers"]["median"])
        rows.append(row)
        log(f"  vocabulary {vocab_size:,}: trained in {train_times['ours']['median']:.2f} s"
            + (f" (tokenizers {train_times['tokenizers']['median']:.2f} s, "
               f"{row['train_ratio']:.1f}x)" if tokenizers is not None else "")
            + f"; encodes {row['encode_mb_per_second']['ours']:.2f} MB/s"
            + (f" (tokenizers {row['encode_mb_per_second']['tokenizers']:.2f} MB/s, "
               f"{row['encode_ratio']:.1f}x); {row['shared_tokens']:,} of {vocab_size:,} tokens "
               "shared" if tokenizers is not None else ""))
    return rows


# ----------------------------------------------------------------------------- the cache
class Clock(nn.Module):
    """The language model, noting when each call (a generated token) returned."""

    def __init__(self, model: nn.Module, block_size: int) -> None:
        super().__init__()
        self.model = model
        self.block_size = block_size
        self.stamps: list[float] = []

    def forward(self, idx):
        out = self.model(idx)
        self.stamps.append(time.perf_counter())
        return out

    def decode_step(self, idx, cache=None):
        out = self.model.decode_step(idx, cache)
        self.stamps.append(time.perf_counter())
        return out


def cache_rows(vocab_size: int, lengths: list[int], repeats: int) -> list[dict]:
    torch.manual_seed(0)
    longest = max(lengths)
    model = TransformerLM(vocab_size, longest + 1, d_model=64, n_heads=4, n_layers=2,
                          pos="rope", fused=True).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    rows = []
    for window, new in [(longest + 1, n) for n in lengths] + [(64, longest)]:
        outs: dict[bool, torch.Tensor] = {}
        traces: dict[bool, list[float]] = {}

        def run(use_cache, window=window, new=new, outs=outs, traces=traces):
            clock = Clock(model, window)
            started = time.perf_counter()
            outs[use_cache] = lm.generate(clock, prompt, new, temperature=0,
                                          use_cache=use_cache)
            traces[use_cache] = [t - started for t in clock.stamps]

        times = benchlib.interleaved({"cache": lambda: run(True), "no cache": lambda: run(False)},
                                     repeats, warmup=1 if new <= 256 else 0)
        every = max(1, new // 32)
        row = {
            "window": window,
            "new_tokens": new,
            "seconds": times,
            "tokens_per_second": {k: new / v["median"] for k, v in times.items()},
            "speedup": times["no cache"]["median"] / times["cache"]["median"],
            "same_tokens": bool(torch.equal(outs[True], outs[False])),
            "cumulative_seconds": {  # at 1, every, 2 every, ... generated tokens (last run)
                "tokens": list(range(every, new + 1, every)),
                "cache": traces[True][every - 1 :: every],
                "no cache": traces[False][every - 1 :: every],
            },
        }
        rows.append(row)
        log(f"  {new:,} tokens, window {window:,}: {row['tokens_per_second']['cache']:,.0f} "
            f"tokens/s with the cache, {row['tokens_per_second']['no cache']:,.0f} without: "
            f"{row['speedup']:.1f}x (same tokens: {row['same_tokens']})")
    return rows


def main() -> None:
    parser = benchlib.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (3)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 4096],
                        help="BPE vocabulary sizes (512 1024 4096)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024],
                        help="generated tokens for the cache (256 1024)")
    args = parser.parse_args()
    lines = data.shakespeare_lines()
    train_lines, held_out_lines = data.train_test_split(lines, 0.1)
    if args.quick:
        args.repeats, args.sizes, args.lengths = 1, [512], [64, 256]
        train_lines = train_lines[: len(train_lines) // 10]
    train_text = "\n".join(train_lines) + "\n"
    held_out = [line + "\n" for line in held_out_lines]
    benchlib.warn_if_busy()
    if tokenizers is None:
        log("tokenizers is not installed: timing ours alone (.venv/bin/pip install --no-deps "
            "tokenizers==0.23.3 to compare)")
    log(f"BPE on {len(train_text.encode()) / 1e6:.1f} MB of training text, encoding "
        f"{len(''.join(held_out).encode()) / 1e6:.2f} MB line by line; median of {args.repeats} "
        "alternated runs")
    bpe_rows = tokenizer_rows(train_text, held_out, args.sizes, args.repeats)
    torch.set_num_threads(1)
    log(f"\nGeneration, torch {torch.__version__}, 1 thread, float32")
    vocab_size = data.CharTokenizer().fit(data.shakespeare()).vocab_size
    generation = cache_rows(vocab_size, args.lengths, args.repeats)
    results = {
        "tokenizers_version": None if tokenizers is None else tokenizers.__version__,
        "train_megabytes": len(train_text.encode()) / 1e6,
        "bpe": bpe_rows,
        "generation": generation,
    }
    benchlib.write_results("tokenize", results, args)
    log("speed-up of the cache: " + json.dumps(
        {f"{r['new_tokens']} tokens, window {r['window']}": round(r["speedup"], 1)
         for r in generation}))


if __name__ == "__main__":
    main()
