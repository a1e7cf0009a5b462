"""The course's chapters, in one place, and the run settings every chapter page reads.

:data:`CHAPTERS` is the one list of the course's chapters: the book's pages, the exercise
sets (assignment stems), the checks modules and the package modules the pages show. Authoring,
the checks, the grader, the tests and the built-book tests read it; a chapter added here is
picked up everywhere, or fails loudly where something of it is missing (see "Adding a chapter"
in the README).

:func:`page_setup` is the first call of every chapter page. It fixes the number of torch
threads and returns the seed of the page's experiments, both overridable from the environment
so that a rebuild can check that the prose holds on "another processor":

* ``COURSE_SEED=1`` shifts every seed of the page's experiments by 1;
* ``OMP_NUM_THREADS=2`` runs the page on two threads (the pages' defaults are in their calls).

``make book-variant SEED=1 THREADS=1`` rebuilds the book that way, into a fresh folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHAPTERS", "Chapter", "benchmark_results", "chapter", "page_setup"]


@dataclass(frozen=True)
class Chapter:
    """One chapter of the course.

    Attributes:
        number: 1 to 7, the lecture order.
        stem: ``"01_ngrams"``: the page ``book/<stem>.md``, the notebooks
            ``solutions/<stem>.ipynb`` and ``exercises/<stem>.ipynb``, and the assignment id
            of the checks and the grader.
        title: the page's title.
        modules: the package modules (``coursepkg.<name>``) whose code the page shows.
        widget: the ``viz`` factory of the page's interactive demo.
    """

    number: int
    stem: str
    title: str
    modules: tuple[str, ...]
    widget: str

    @property
    def page(self) -> str:
        """The page's path from the course root: ``book/01_ngrams.md``."""
        return f"book/{self.stem}.md"

    @property
    def checks_module(self) -> str:
        """The module that registers the exercise set's tasks."""
        return f"coursepkg.checks.ch{self.stem}"


CHAPTERS: tuple[Chapter, ...] = (
    Chapter(1, "01_ngrams", "n-gram language models", ("ngram", "feedforward"), "ngram_explorer"),
    Chapter(2, "02_rnn", "RNNs and LSTMs", ("rnn",), "rnn_state_explorer"),
    Chapter(3, "03_attention", "Attention", ("attention",), "attention_lookup_explorer"),
    Chapter(4, "04_self_attention", "Self-attention", ("self_attention",),
            "self_attention_explorer"),
    Chapter(5, "05_multihead", "Multi-head attention", ("multihead",), "multihead_explorer"),
    Chapter(6, "06_positional", "Positional encodings", ("positional",), "rope_explorer"),
    Chapter(7, "07_transformer", "The full Transformer", ("transformer",), "sampling_explorer"),
)


#: The package's teaching modules in book order: each may import only the ones before it (and the
#: support modules), never a later chapter's. The chapters' own modules come first, then what the
#: last chapters add around them.
TEACHING_MODULES: tuple[str, ...] = (
    *(name for ch in CHAPTERS for name in ch.modules), "lm", "tokenize",
)
#: Modules any teaching module may import: the data, and the model-free beam search.
SUPPORT_MODULES: tuple[str, ...] = ("data", "decoding", "course")


def chapter(stem: str) -> Chapter:
    """The chapter whose stem (assignment id) is ``stem``; a ValueError naming them otherwise."""
    for ch in CHAPTERS:
        if ch.stem == stem:
            return ch
    known = ", ".join(ch.stem for ch in CHAPTERS)
    raise ValueError(f"there is no chapter {stem!r}; the chapters are: {known}")


def page_setup(*, threads: int | None = None) -> int:
    """Fix a page's torch threads and return the seed offset of its experiments.

    Args:
        threads: the page's number of torch threads (None: torch's default). The environment's
            ``OMP_NUM_THREADS``, when set, takes precedence.

    Returns:
        ``COURSE_SEED`` from the environment (0 when unset): add it to every seed the page uses.
    """
    import torch

    wanted = os.environ.get("OMP_NUM_THREADS") or threads
    if wanted is not None:
        try:
            count = int(wanted)
        except ValueError:
            raise ValueError(f"OMP_NUM_THREADS must be a whole number, got {wanted!r}") from None
        if count < 1:
            raise ValueError(f"the number of threads must be at least 1, got {count}")
        torch.set_num_threads(count)
    raw = os.environ.get("COURSE_SEED", "0")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"COURSE_SEED must be a whole number, got {raw!r}") from None


#: The published benchmark results, ``benchmarks/bench_<name>.py``'s ``<name>.json``.
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
# make bench runs the grader benchmark with --lean (grader-lean.json); a complete run writes
# grader.json, which is preferred when it exists.
_ALTERNATES = {"grader": ("grader", "grader-lean")}


def benchmark_results(name: str, folder: Path | None = None) -> dict | None:
    """The published results of ``benchmarks/bench_<name>.py`` (the file's whole JSON), or None.

    Args:
        name: ``"ngram"``, ``"layers"``, ``"training"``, ``"scaling"``, ``"grader"``, ``"course"``.
        folder: where the results are (default: the checkout's ``benchmarks/results``).

    Returns:
        The parsed file, or None when the benchmark has not been published (never run, or only
        as a ``--quick`` smoke run).
    """
    folder = RESULTS if folder is None else Path(folder)
    for stem in _ALTERNATES.get(name, (name,)):
        path = folder / f"{stem}.json"
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
    return None
