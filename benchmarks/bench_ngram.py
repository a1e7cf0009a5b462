"""Time fitting (and scoring with) our Kneser-Ney trigram model against NLTK 3.10's.

Run with ``.venv/bin/python benchmarks/bench_ngram.py`` (about a minute on 2 cores).

Both models see exactly the same n-grams: NLTK is fed the n-grams our ``fit`` counts
(all orders 1..3, ending at predicted tokens, from ``<s> <s> words </s>``), so its
probabilities equal ours (checked on the scored queries). NLTK fits on a subset of the
corpus, as its Kneser-Ney scores cost a scan over all contexts per query; our model is
timed on the same subset and on the whole corpus.
"""

from __future__ import annotations

import argparse
import random
import time

from nltk.lm import KneserNeyInterpolated, Vocabulary

from coursepkg.data import sentences, shakespeare
from coursepkg.ngram import BOS, EOS, NGramLM, ngrams, pad


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def nltk_fit(corpus: list[list[str]], n: int) -> KneserNeyInterpolated:
    """NLTK's model fed the same n-grams as ours (building them is part of the timing)."""
    words = {w for s in corpus for w in s}
    model = KneserNeyInterpolated(n, discount=0.75, vocabulary=Vocabulary([*words, BOS, EOS]))
    model.fit(
        [g for m in range(1, n + 1) for g in ngrams(pad(s, n)[n - m:], m)] for s in corpus
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=20_000, help="sentences for NLTK")
    parser.add_argument("--queries", type=int, default=30, help="KN scores to time")
    parser.add_argument("--repeats", type=int, default=3, help="fits of our model (best)")
    args = parser.parse_args()
    n = 3

    corpus, t_tok = timed(lambda: sentences(shakespeare()))
    n_tokens = sum(len(s) + 1 for s in corpus)
    print(f"corpus: {len(corpus)} sentences, {n_tokens} predicted tokens "
          f"(tokenized in {t_tok:.2f} s)")

    subset = corpus[: args.subset]
    sub_tokens = sum(len(s) + 1 for s in subset)
    ours_sub = min(timed(lambda: NGramLM(n, "kneser_ney").fit(subset))[1]
                   for _ in range(args.repeats))
    theirs, nltk_sub = timed(lambda: nltk_fit(subset, n))
    print(f"\nfit a word trigram KN model on {len(subset)} sentences ({sub_tokens} tokens):")
    print(f"  ours  {ours_sub:8.2f} s  (best of {args.repeats})")
    print(f"  NLTK  {nltk_sub:8.2f} s")
    print(f"  NLTK / ours = {nltk_sub / ours_sub:.1f}x")

    full = [timed(lambda: NGramLM(n, "kneser_ney").fit(corpus)) for _ in range(args.repeats)]
    ours, ours_full = full[0][0], min(t for _, t in full)
    print(f"\nfit ours on the whole corpus ({n_tokens} tokens): {ours_full:.2f} s "
          f"(best of {args.repeats}); |V| = {len(ours.vocab)}")

    ours_subset_model = NGramLM(n, "kneser_ney").fit(subset)
    rng = random.Random(0)
    queries = []
    for sentence in rng.sample(subset, args.queries):
        toks = pad(sentence, n)
        i = rng.randrange(n - 1, len(toks))
        queries.append((toks[i], tuple(toks[i - n + 1:i])))
    ours_scores, t_ours = timed(lambda: [ours_subset_model.prob(w, c) for w, c in queries])
    nltk_scores, t_nltk = timed(lambda: [theirs.score(w, list(c)) for w, c in queries])
    worst = max(abs(a - b) for a, b in zip(ours_scores, nltk_scores, strict=True))
    print(f"\nscore {len(queries)} (word, context) pairs on the subset models:")
    print(f"  ours  {t_ours * 1e6 / len(queries):10.1f} us per query")
    print(f"  NLTK  {t_nltk * 1e6 / len(queries):10.1f} us per query "
          f"({t_nltk / max(t_ours, 1e-9):.0f}x)")
    print(f"  largest |ours - NLTK| = {worst:.2e}")


if __name__ == "__main__":
    main()
