"""Byte-pair encoding (BPE): where the tokens of a language model come from.

The course's models read characters or words. Characters make sequences long; words make the
vocabulary huge and still meet unknown words. BPE (Sennrich et al., 2016, in the byte-level
form of GPT-2) starts from the 256 byte values, so every string has an encoding, and learns
*merges*: it repeatedly finds the most frequent pair of adjacent tokens in the training text
and makes it a new token. Frequent words end up as one token, rare ones as a few pieces.

* :meth:`BPE.train` learns the merges from a text;
* :meth:`BPE.encode` turns a string into ids by applying the merges in the order they were
  learned; :meth:`BPE.decode` joins the tokens' bytes back into the string.

As in GPT-2, the text is first cut into chunks by a regular expression (:data:`SPLIT_PATTERN`:
a word with the space before it, a number, a run of punctuation, a run of spaces), and merges
never cross a chunk boundary, so no token spans the end of one word and the start of the next.

Token ids: 0-255 are the bytes; merge i (from 0) makes token 256 + i.
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

__all__ = ["BPE", "SPLIT_PATTERN"]

SPLIT_PATTERN = r"""'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
"""GPT-2's pre-tokenizer, written for Python's ``re``: an English contraction ('s 't 're 've 'm
'll 'd), then an optional space followed by letters, by digits, or by other symbols, then runs
of whitespace (a run before a word leaves its last space to the word). Every character of a
string belongs to exactly one chunk, so the chunks join back into the string."""


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids``, left to right, by ``new_id``."""
    a, b = pair
    out, i, n = [], 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _to_bytes(text: str) -> bytes:
    """UTF-8, lone surrogates included (``"surrogatepass"``), so every ``str`` has bytes."""
    return text.encode("utf-8", errors="surrogatepass")


class BPE:
    """A byte-level BPE tokenizer: the 256 bytes and a list of merges.

    Build one with :meth:`BPE.train` (or :meth:`BPE.load`); ``BPE(merges)`` rebuilds one from
    its merges. :meth:`encode` remembers the ids of the chunks it has met (the first 100,000
    distinct ones), as fast tokenizers do: a chunk's ids never change.

    Args:
        merges: the merged pairs in the order learned; pair i (a, b) makes token 256 + i, and
            a and b must be tokens that exist before it (below 256 + i).
        counts: for each merge, how many times it was applied to the training text (None
            when unknown).
        pattern: the regular expression that cuts text into chunks (:data:`SPLIT_PATTERN`).

    Attributes:
        merges: list of (a, b) pairs, in the order learned.
        counts: list of ints or None (see above).
        pattern: the chunking expression.
        vocab: list of bytes, the bytes of each token id.
    """

    def __init__(
        self,
        merges: Iterable[Sequence[int]] = (),
        counts: Iterable[int] | None = None,
        pattern: str = SPLIT_PATTERN,
    ) -> None:
        self.merges: list[tuple[int, int]] = []
        self.vocab: list[bytes] = [bytes([i]) for i in range(256)]
        for i, pair in enumerate(merges):
            pair = tuple(pair)
            if (len(pair) != 2 or not all(isinstance(t, int) and not isinstance(t, bool)
                                          for t in pair)
                    or not all(0 <= t < 256 + i for t in pair)):
                raise ValueError(f"merge {i} must be a pair of token ids below {256 + i} (the "
                                 f"tokens that exist before it), got {pair!r}")
            self.merges.append((pair[0], pair[1]))
            self.vocab.append(self.vocab[pair[0]] + self.vocab[pair[1]])
        self.counts: list[int] | None = None if counts is None else [int(c) for c in counts]
        if self.counts is not None and len(self.counts) != len(self.merges):
            raise ValueError(f"{len(self.counts)} counts for {len(self.merges)} merges")
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be a regular expression string, got {pattern!r}")
        self.pattern = pattern
        self._split = re.compile(pattern)
        self._ranks = {pair: 256 + i for i, pair in enumerate(self.merges)}
        self._chunk_ids: dict[str, list[int]] = {}  # a memo of _encode_chunk

    @property
    def vocab_size(self) -> int:
        """256 + the number of merges."""
        return 256 + len(self.merges)

    def __repr__(self) -> str:
        return f"BPE(vocab_size={self.vocab_size})"

    # ------------------------------------------------------------------------- training
    @classmethod
    def train(cls, text: str, vocab_size: int, *, pattern: str = SPLIT_PATTERN) -> BPE:
        """Learn ``vocab_size - 256`` merges from a text.

        Each merge takes the most frequent pair of adjacent tokens, counted over the whole
        text (within its chunks; overlapping occurrences count: "aaa" holds the pair (a, a)
        twice), and replaces its occurrences, left to right, by a new token. **Ties** go to
        the pair with the smallest first id, then the smallest second id, so training is
        deterministic. Training stops early if no pair is left (every chunk is one token);
        ``vocab_size`` then tells how many tokens there are.

        The counts are kept up to date incrementally: a merge changes only the chunks that
        contain its pair, and only the counts of the pairs around each replaced occurrence,
        so each merge costs time in proportion to the chunks it touches, not to the text (a
        heap, with outdated entries skipped, finds the next most frequent pair). Identical
        chunks are counted once, with their number of occurrences as a weight.

        Args:
            text: the training text.
            vocab_size: 256 + the number of merges (>= 256).
            pattern: the chunking expression (:data:`SPLIT_PATTERN`).

        Returns:
            The tokenizer; its ``counts`` say how many times each merge was applied to the
            text (each application shortens the encoded text by one token).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 256:
            raise ValueError(f"vocab_size must be an int >= 256 (the bytes), got {vocab_size!r}")
        chunks = Counter(re.findall(pattern, text))
        words = [list(_to_bytes(chunk)) for chunk in chunks]  # each distinct chunk's tokens
        weights = list(chunks.values())  # how often each occurs
        pair_counts: defaultdict[tuple[int, int], int] = defaultdict(int)
        where: defaultdict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> words
        for w, (ids, weight) in enumerate(zip(words, weights, strict=True)):
            for pair in zip(ids, ids[1:], strict=False):
                pair_counts[pair] += weight
                where[pair].add(w)  # (it may stay after the pair has left the word)
        heap = [(-count, pair) for pair, count in pair_counts.items()]
        heapq.heapify(heap)  # the most frequent first, then the smallest pair
        merges, counts = [], []
        while len(merges) < vocab_size - 256 and heap:
            negative, pair = heapq.heappop(heap)
            if pair_counts.get(pair, 0) != -negative:
                continue  # an outdated entry: the count has changed since it was pushed
            new_id = 256 + len(merges)
            applied, changed = 0, set()
            for w in where.pop(pair):
                ids, weight = words[w], weights[w]
                merged = _merge(ids, pair, new_id)
                if len(merged) == len(ids):
                    continue  # the pair had left this word
                applied += weight * (len(ids) - len(merged))
                delta: dict[tuple[int, int], int] = {}  # the change of each pair's count
                for p in zip(ids, ids[1:], strict=False):
                    delta[p] = delta.get(p, 0) - 1
                for p in zip(merged, merged[1:], strict=False):
                    delta[p] = delta.get(p, 0) + 1
                for p, d in delta.items():
                    if d:
                        pair_counts[p] += weight * d
                        changed.add(p)
                        if d > 0:
                            where[p].add(w)
                words[w] = merged
            del pair_counts[pair]
            for p in changed - {pair}:
                if pair_counts[p] > 0:
                    heapq.heappush(heap, (-pair_counts[p], p))
                else:
                    del pair_counts[p]
                    where.pop(p, None)
            merges.append(pair)
            counts.append(applied)
        return cls(merges, counts, pattern)

    # ------------------------------------------------------------------------- encoding
    def _encode_chunk(self, data: bytes) -> list[int]:
        """The ids of one chunk: apply the merges present, the earliest learned first."""
        ids = list(data)
        while len(ids) > 1:
            pair = min(zip(ids, ids[1:], strict=False),
                       key=lambda p: self._ranks.get(p, float("inf")))
            if pair not in self._ranks:
                break  # no merge applies any more
            ids = _merge(ids, pair, self._ranks[pair])
        return ids

    def encode(self, text: str) -> list[int]:
        """The token ids of a string.

        Each chunk's bytes are merged as training merged them: the merges in the order they
        were learned, each applied to all its occurrences, left to right (a merge only makes
        pairs that involve its new token, all learned later), so ``encode`` of the training
        text applies each merge exactly ``counts[i]`` times.

        Args:
            text: any string (lone surrogates too: their UTF-8 form is encoded).

        Returns:
            A list of ids in 0 .. vocab_size - 1.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        out: list[int] = []
        memo = self._chunk_ids
        for chunk in self._split.findall(text):
            ids = memo.get(chunk)
            if ids is None:
                ids = self._encode_chunk(_to_bytes(chunk))
                if len(memo) < 100_000:  # frequent chunks are met early
                    memo[chunk] = ids
            out.extend(ids)
        return out

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """The string of a sequence of ids: the tokens' bytes, joined, read as UTF-8.

        ``decode(encode(s)) == s`` for every string. Ids that cut a character's bytes apart
        (a sequence that ``encode`` did not produce) decode with U+FFFD in its place.

        Args:
            ids: token ids in 0 .. vocab_size - 1 (a list, or a 1-D tensor).

        Returns:
            The text.
        """
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode takes a 1-D tensor of ids, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        parts = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i!r} is not a token id in 0..{self.vocab_size - 1}")
            parts.append(self.vocab[i])
        data = b"".join(parts)
        try:
            return data.decode("utf-8", errors="surrogatepass")
        except UnicodeDecodeError:
            return data.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------------- files
    def save(self, path: str | Path) -> None:
        """Write the tokenizer to a small JSON file (its pattern, merges and counts)."""
        state = {"format": "coursepkg-bpe", "version": 1, "pattern": self.pattern,
                 "merges": [list(pair) for pair in self.merges], "counts": self.counts}
        Path(path).write_text(json.dumps(state, separators=(",", ":")) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> BPE:
        """Read a tokenizer written by :meth:`save`."""
        state = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(state, dict) or state.get("format") != "coursepkg-bpe":
            raise ValueError(f"{path} is not a BPE tokenizer written by BPE.save")
        return cls(state["merges"], state["counts"], state["pattern"])
