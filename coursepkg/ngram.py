"""n-gram language models: count, normalise, smooth.

An n-gram model predicts each token from the ``n - 1`` tokens before it. A sentence
``w_0 ... w_{m-1}`` (positions count from 0) is padded with ``n - 1`` start symbols ``<s>``
and one end symbol ``</s>``; the model predicts every word and the final ``</s>`` (never
``<s>``), so

    P(w_0 ... w_{m-1}) = prod_{i=0}^{m} P(w_i | w_{i-n+1} ... w_{i-1}),   w_m = </s>.

Three estimators share one set of counts:

* ``"mle"``: the count ratio c(u, w) / c(u) (zero for an unseen history u);
* ``"add_k"``: (c(u, w) + k) / (c(u) + k |V|) (add-one / Laplace when k = 1);
* ``"kneser_ney"``: interpolated Kneser-Ney with absolute discount d, following the
  recursion of NLTK 3.10's ``KneserNeyInterpolated`` (see :class:`NGramLM`).

Everything is plain dictionaries and :class:`collections.Counter`: a word trigram
model of all of Shakespeare fits in a few seconds.
"""

from __future__ import annotations

import contextlib
import gc
import math
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

BOS = "<s>"
"""The start-of-sentence padding symbol (a context token, never predicted)."""

EOS = "</s>"
"""The end-of-sentence symbol (predicted once at the end of every sentence)."""

SMOOTHINGS = ("mle", "add_k", "kneser_ney")


def pad(sentence: Sequence[str], n: int) -> list[str]:
    """Pad a sentence for an n-gram model.

    Args:
        sentence: the words of one sentence, e.g. ``["the", "cat"]``.
        n: the model order (1 for unigrams, 2 for bigrams, ...).

    Returns:
        ``n - 1`` copies of ``"<s>"``, the words, then one ``"</s>"``:
        ``pad(["the", "cat"], 3) == ["<s>", "<s>", "the", "cat", "</s>"]``.
    """
    _check_order(n)
    if isinstance(sentence, str):
        raise ValueError(
            f"a sentence must be a list of words, got the string {sentence[:30]!r}: "
            "split it into words first (e.g. with coursepkg.data.word_tokenize)"
        )
    return [BOS] * (n - 1) + list(sentence) + [EOS]


def ngrams(tokens: Sequence[str], n: int) -> Iterator[tuple[str, ...]]:
    """Every window of ``n`` consecutive tokens, left to right.

    Args:
        tokens: a token sequence (usually a padded sentence).
        n: the window length.

    Returns:
        An iterator of tuples: ``list(ngrams(["a", "b", "c"], 2)) == [("a", "b"), ("b", "c")]``.
        Fewer than ``n`` tokens give no n-grams.
    """
    _check_order(n)
    tokens = list(tokens)
    return zip(*(tokens[i:] for i in range(n)), strict=False)


def _check_order(n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int (1 = unigram, 2 = bigram, ...), got {n!r}")


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector.

    Counting creates millions of small tuples, which can hold no reference cycles; without
    the pause, the collector re-scans them again and again and fitting takes ~2x longer.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _group(counts: Counter) -> dict[tuple[str, ...], dict[str, int]]:
    """Turn {ngram: count} into {context: {word: count}}, skipping n-grams ending in <s>."""
    table: dict[tuple[str, ...], dict[str, int]] = {}
    for gram, c in counts.items():
        word = gram[-1]
        if word == BOS:
            continue
        followers = table.get(gram[:-1])
        if followers is None:
            table[gram[:-1]] = followers = {}
        followers[word] = c
    return table


class NGramLM:
    """An n-gram language model with MLE, add-k or interpolated Kneser-Ney estimates.

    Fitting counts, for every order ``m = 1 .. n``, the m-grams that end at a predicted
    token (a word or ``"</s>"``) of the padded sentences ``(n-1) * <s> + words + </s>``.
    Lower orders are counted from the same padded sentences, so every m-gram counted
    (m < n) is preceded by some token and its continuation count is at least one.

    Estimates, for a history ``u`` of the last ``n - 1`` tokens and ``w`` in ``vocab`` (the
    book's notation):

    * ``mle``: ``c(u, w) / c(u)``; ``0.0`` when ``u`` was never seen.
    * ``add_k``: ``(c(u, w) + k) / (c(u) + k * |V|)``.
    * ``kneser_ney``: interpolated Kneser-Ney, recursively from the top order down::

          P_m(w | u) = max(c_m(u, w) - d, 0) / c_m(u)  +  lambda(u) * P_{m-1}(w | u'),
          lambda(u) = d * N1+(u .) / c_m(u)

      where ``u'`` drops the oldest token of ``u``; ``c_n`` are raw counts at the top
      order and, below it, continuation counts ``c_m(u, w) = N1+(. u w)`` (how many
      distinct tokens precede ``u w``); ``N1+(u .)`` is the number of distinct words
      seen after ``u``; ``lambda(u)`` (``lam`` in the code) is the probability the
      discount frees, given to the lower order. A history never seen at its order is
      skipped (its first term is 0 and ``lambda(u) = 1``; NLTK's ``alpha = 0, gamma = 1``).
      The unigram level is ``N1+(. w) / N1+(. .)`` (raw counts ``c(w) / N`` when
      ``n == 1``). This is exactly NLTK 3.10's ``KneserNeyInterpolated`` fed the same
      n-grams.

      One extension: if some ``vocab`` word has count zero at the unigram level (only
      possible with an explicit ``vocab=`` holding words absent from training), the unigram
      level is itself discounted and interpolated with the uniform distribution,
      ``max(c(w) - d, 0) / N + d * N1+(.) / N / |V|``, so every vocab word gets a
      positive probability and each distribution still sums to one. With the default
      vocabulary every word has a positive count, and the model equals NLTK's (NLTK
      itself fails with ``ZeroDivisionError`` for ``n == 1``, which has no bigrams).

    Args:
        n: the order (1 = unigram, 2 = bigram, 3 = trigram, ...).
        smoothing: ``"mle"``, ``"add_k"`` or ``"kneser_ney"``.
        k: the pseudo-count of add-k smoothing (``k > 0``; 1 is Laplace).
        discount: the absolute discount ``d`` of Kneser-Ney, ``0 <= d <= 1``.
        vocab: optional explicit prediction vocabulary; must contain ``"</s>"`` and
            not ``"<s>"``, and every training word. Default: every training word plus
            ``"</s>"``. Extra words give add-k (and Kneser-Ney, see above) more outcomes.

    Attributes:
        vocab: sorted tuple of the words a prediction ranges over (set by ``fit``).

    Example:
        >>> lm = NGramLM(2, "add_k", k=1.0).fit([["a", "b"], ["a"]])
        >>> lm.vocab
        ('</s>', 'a', 'b')
        >>> round(lm.prob("b", ["a"]), 4)  # (1 + 1) / (2 + 3)
        0.4
    """

    def __init__(
        self,
        n: int,
        smoothing: str = "mle",
        k: float = 1.0,
        discount: float = 0.75,
        vocab: Iterable[str] | None = None,
    ) -> None:
        _check_order(n)
        if smoothing not in SMOOTHINGS:
            raise ValueError(f"smoothing must be one of {SMOOTHINGS}, got {smoothing!r}")
        if isinstance(k, bool) or not isinstance(k, int | float) or not k > 0 or k == math.inf:
            raise ValueError(f"k must be a positive finite number (1.0 = add-one), got {k!r}")
        if (
            isinstance(discount, bool)
            or not isinstance(discount, int | float)
            or not 0 <= discount <= 1
        ):
            raise ValueError(f"discount must be a number with 0 <= discount <= 1, got {discount!r}")
        self.n = n
        self.smoothing = smoothing
        self.k = float(k)
        self.discount = float(discount)
        self._explicit_vocab = None if vocab is None else _check_vocab(vocab)
        self.vocab: tuple[str, ...] = ()
        self._vocab_set: frozenset[str] = frozenset()
        self._fitted = False

    def __repr__(self) -> str:
        extra = {"mle": "", "add_k": f", k={self.k}", "kneser_ney": f", discount={self.discount}"}
        return f"NGramLM(n={self.n}, smoothing={self.smoothing!r}{extra[self.smoothing]})"

    # ------------------------------------------------------------------ fitting
    def fit(self, sentences: Iterable[Sequence[str]]) -> NGramLM:
        """Count the n-grams of every order 1..n in ``sentences`` (replacing earlier counts).

        Args:
            sentences: an iterable of sentences, each a list of word strings. The words
                may not be ``"<s>"`` or ``"</s>"`` (the model adds them).

        Returns:
            ``self``, so ``NGramLM(2).fit(data)`` works.
        """
        if isinstance(sentences, str):
            raise ValueError("fit expects a list of sentences (lists of words), got a string")
        with _gc_paused():
            self._fit(sentences)
        return self

    def _fit(self, sentences: Iterable[Sequence[str]]) -> None:
        n = self.n
        # One stream of padded sentences. Every window of m <= n tokens that ends at a
        # predicted token lies inside one sentence (each sentence starts with n - 1 <s>),
        # so the m-grams to count are the windows of the stream not ending in <s>.
        stream: list[str] = []
        n_sentences = 0
        for sentence in sentences:
            stream += pad(sentence, n)
            n_sentences += 1
        if n_sentences == 0:
            raise ValueError("fit needs at least one sentence")
        for symbol, expected in ((BOS, (n - 1) * n_sentences), (EOS, n_sentences)):
            if stream.count(symbol) != expected:
                raise ValueError(
                    f"a training sentence contains {symbol!r}: pass bare words, fit pads them"
                )
        self._counts: dict[int, dict[tuple[str, ...], dict[str, int]]] = {}
        self._continuations: dict[int, dict[tuple[str, ...], dict[str, int]]] = {}
        for m in range(n, 0, -1):
            windows = Counter(zip(*(stream[i:] for i in range(m)), strict=False))
            self._counts[m] = _group(windows)
            if m > 1:  # N1+(. u w): the distinct m-grams (x, u, w), counted by (u, w)
                self._continuations[m - 1] = _group(Counter(g[1:] for g in windows))
        del stream, windows
        words = set(self._counts[1][()])
        if self._explicit_vocab is None:
            vocab = words
        else:
            vocab = self._explicit_vocab
            missing = sorted(words - vocab)
            if missing:
                raise ValueError(
                    f"{len(missing)} training word(s) are not in vocab, e.g. {missing[:5]}: "
                    "add them to vocab or replace them by an unknown-word token before fitting"
                )
        self.vocab = tuple(sorted(vocab))
        self._vocab_set = frozenset(vocab)
        self._totals = {m: {h: sum(f.values()) for h, f in table.items()}
                        for m, table in self._counts.items()}
        self._cont_totals = {m: {h: sum(f.values()) for h, f in table.items()}
                             for m, table in self._continuations.items()}
        self._fitted = True
        self._base = self._unigram_distribution()

    def _unigram_distribution(self) -> dict[str, float]:
        """Kneser-Ney's unigram level P_1(w) for every vocab word (see the class doc)."""
        table = self._counts[1] if self.n == 1 else self._continuations[1]
        followers = table.get((), {})
        total = sum(followers.values())
        if all(followers.get(w, 0) > 0 for w in self.vocab):
            return {w: followers[w] / total for w in self.vocab}
        d, v = self.discount, len(self.vocab)
        lam = d * len(followers) / total
        return {w: max(followers.get(w, 0) - d, 0.0) / total + lam / v for w in self.vocab}

    # ------------------------------------------------------------------ counts
    def _require_fitted(self) -> None:
        if not self._fitted:
            raise RuntimeError("this NGramLM is not fitted yet: call .fit(sentences) first")

    def count(self, ngram: Sequence[str]) -> int:
        """The raw count of an m-gram (1 <= m <= n) ending at a predicted token."""
        self._require_fitted()
        ngram = tuple(ngram)
        if not 1 <= len(ngram) <= self.n:
            raise ValueError(f"ngram must have 1 to {self.n} tokens, got {len(ngram)}")
        return self._counts[len(ngram)].get(ngram[:-1], {}).get(ngram[-1], 0)

    def continuation_count(self, ngram: Sequence[str]) -> int:
        """N1+(. ngram): how many distinct tokens precede ``ngram`` (1 <= len < n)."""
        self._require_fitted()
        ngram = tuple(ngram)
        if not 1 <= len(ngram) < self.n:
            raise ValueError(f"ngram must have 1 to {self.n - 1} tokens, got {len(ngram)}")
        return self._continuations[len(ngram)].get(ngram[:-1], {}).get(ngram[-1], 0)

    def ngram_counts(self, order: int | None = None) -> Counter:
        """All counted m-grams of one order (default ``n``) as a Counter of tuples."""
        self._require_fitted()
        m = self.n if order is None else order
        if m not in self._counts:
            raise ValueError(f"order must be in 1..{self.n}, got {order!r}")
        return Counter({h + (w,): c for h, f in self._counts[m].items() for w, c in f.items()})

    # ------------------------------------------------------------------ probabilities
    def _history(self, context: Sequence[str]) -> tuple[str, ...]:
        """The last n - 1 tokens of ``context``, left-padded with ``<s>``."""
        if isinstance(context, str):
            raise ValueError(
                f"context must be a sequence of words such as ('of', 'the'), got the string "
                f"{context[:30]!r}"
            )
        context = tuple(context)
        m = self.n - 1
        if m == 0:
            return ()
        context = context[-m:]
        return (BOS,) * (m - len(context)) + context

    def prob(self, word: str, context: Sequence[str]) -> float:
        """P(word | context).

        Args:
            word: the predicted token (a word or ``"</s>"``).
            context: the preceding tokens, a tuple or list; only the last ``n - 1`` are
                used and a shorter context is left-padded with ``"<s>"``, so
                ``prob("the", ())`` in a trigram model is the probability that a sentence
                starts with "the".

        Returns:
            The probability; ``0.0`` for a word outside ``vocab`` (and, for ``mle``, for
            any word after a history never seen in training).
        """
        self._require_fitted()
        if not isinstance(word, str):
            raise ValueError(f"word must be a str, got {type(word).__name__}")
        history = self._history(context)
        if word not in self._vocab_set:
            return 0.0
        if self.smoothing == "kneser_ney":
            return self._kn_prob(word, history)
        followers = self._counts[self.n].get(history)
        if self.smoothing == "mle":
            return followers.get(word, 0) / self._totals[self.n][history] if followers else 0.0
        total = self._totals[self.n][history] if followers else 0
        c = followers.get(word, 0) if followers else 0
        return (c + self.k) / (total + self.k * len(self.vocab))

    def _kn_prob(self, word: str, history: tuple[str, ...]) -> float:
        """Interpolated Kneser-Ney, built from the unigram level up to order n."""
        d = self.discount
        p = self._base[word]
        for m in range(2, self.n + 1):
            followers, total = self._kn_level(m, history)
            if not followers:
                continue  # unseen history: defer to the lower order (lambda = 1)
            discounted = max(followers.get(word, 0) - d, 0.0) / total
            lam = d * len(followers) / total  # lambda(u): the probability the discount frees
            p = discounted + lam * p
        return p

    def _kn_level(self, m: int, history: tuple[str, ...]) -> tuple[dict | None, int | None]:
        """The followers of the last m-1 words of ``history`` at order m, and their total:
        raw counts at the top order, continuation counts below it."""
        u = history[len(history) - (m - 1) :]
        if m == self.n:
            return self._counts[m].get(u), self._totals[m].get(u)
        return self._continuations[m].get(u), self._cont_totals[m].get(u)

    def logprob(self, word: str, context: Sequence[str]) -> float:
        """Natural log of :meth:`prob`; ``-inf`` where the probability is 0."""
        p = self.prob(word, context)
        return math.log(p) if p > 0 else -math.inf

    def distribution(self, context: Sequence[str]) -> dict[str, float]:
        """P(w | context) for every ``w`` in ``vocab``, as a dict in ``vocab`` order.

        Equal to ``{w: self.prob(w, context) for w in self.vocab}`` but computed in one
        pass over the vocabulary per order.
        """
        self._require_fitted()
        history = self._history(context)
        if self.smoothing != "kneser_ney":
            followers = self._counts[self.n].get(history, {})
            total = self._totals[self.n].get(history, 0)
            if self.smoothing == "mle":
                return {w: followers.get(w, 0) / total if total else 0.0 for w in self.vocab}
            denominator = total + self.k * len(self.vocab)
            return {w: (followers.get(w, 0) + self.k) / denominator for w in self.vocab}
        # Unrolled recursion, top order first: P = sum_m scale_m * discounted_m(w) + scale * P_1(w),
        # where scale_m is the product of the lambdas of the orders above m.
        d, scale = self.discount, 1.0
        extra: dict[str, float] = {}
        for m in range(self.n, 1, -1):
            followers, total = self._kn_level(m, history)
            if not followers:
                continue
            for w, c in followers.items():
                extra[w] = extra.get(w, 0.0) + scale * max(c - d, 0.0) / total
            scale *= d * len(followers) / total
        probs = {w: scale * p for w, p in self._base.items()}
        for w, e in extra.items():
            probs[w] += e
        return probs

    def perplexity(self, sentences: Iterable[Sequence[str]]) -> float:
        """exp of the mean negative log-probability per predicted token.

        Every word and one ``"</s>"`` per sentence are predicted (``"<s>"`` never is),
        each from its ``(n - 1)``-token history in the padded sentence.

        Returns:
            The perplexity; ``inf`` if some predicted token has probability 0.
        """
        self._require_fitted()
        if isinstance(sentences, str):
            raise ValueError("perplexity expects a list of sentences (lists of words), got a str")
        total, count = 0.0, 0
        for sentence in sentences:
            toks = pad(sentence, self.n)
            for i in range(self.n - 1, len(toks)):
                p = self.prob(toks[i], toks[i - self.n + 1:i])
                if p <= 0.0:
                    return math.inf
                total += math.log(p)
                count += 1
        if count == 0:
            raise ValueError("perplexity needs at least one sentence")
        return math.exp(-total / count)

    def generate(
        self,
        max_tokens: int,
        *,
        context: Sequence[str] = (),
        seed: int | random.Random,
    ) -> list[str]:
        """Sample words one at a time until ``"</s>"`` or ``max_tokens`` words.

        Args:
            max_tokens: the largest number of words returned.
            context: words the sentence starts with (not returned); ``()`` starts a
                new sentence.
            seed: an int seed or a ``random.Random``; the same seed gives the same words.

        Returns:
            The sampled words, without the final ``"</s>"``.
        """
        self._require_fitted()
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
        rng = seed if isinstance(seed, random.Random) else random.Random(seed)
        self._history(context)  # validates the context
        history = list(context)
        out: list[str] = []
        while len(out) < max_tokens:
            dist = self.distribution(history)
            weights = list(dist.values())
            if not sum(weights) > 0:
                raise ValueError(
                    f"the context {tuple(history[-(self.n - 1):])} was never seen in training, "
                    "so the MLE model has no distribution for it: use add_k or kneser_ney"
                )
            word = rng.choices(list(dist), weights=weights)[0]
            if word == EOS:
                break
            out.append(word)
            history.append(word)
        return out


def _check_vocab(vocab: Iterable[str]) -> frozenset[str]:
    if isinstance(vocab, str):
        raise ValueError("vocab must be a collection of words, got a single string")
    words = frozenset(vocab)
    if not all(isinstance(w, str) for w in words):
        raise ValueError("vocab must contain only str words")
    if EOS not in words:
        raise ValueError(f"vocab must contain {EOS!r} (every sentence ends with it)")
    if BOS in words:
        raise ValueError(f"vocab must not contain {BOS!r}: it is context padding, never predicted")
    return words
