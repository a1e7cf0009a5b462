"""A demo batch of submissions for trying the grader (``make grade-demo``).

The batch is built from the course's own notebooks: the solution (full marks), the untouched
exercise (0, "not attempted"), and copies of the solution with one planted mistake each, the
kind students make, so the gradebook shows partial credit and the feedback what it says.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

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
        "dee-log10-perplexity": (
            "perplexity",
            """import math


def perplexity(model, sentences):
    log_sum, count = 0.0, 0
    for sentence in sentences:
        padded = ["<s>"] * (model.n - 1) + list(sentence) + ["</s>"]
        for i in range(model.n - 1, len(padded)):
            context = tuple(padded[i - model.n + 1:i])
            log_sum += math.log10(model.prob(padded[i], context))
            count += 1
    return math.exp(-log_sum / count)
""",
        ),
    }
}


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
        _replace_function(nb, func_name, wrong)
        target = folder / f"{student}.ipynb"
        nbformat.write(nb, target)
        written.append(target)
    return written
