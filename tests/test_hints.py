"""No hint gives the solution away: a hint teaches the idea behind a mistake, never the
reference solution's code.

Every hint a task can show (the ``HINT_*`` and ``PREFIX_*`` texts its chapter's checks module
holds, the task's error hints and the default ones) is compared with every line of the
solutions' code (between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` in solutions/*.ipynb),
both normalised: comments dropped, spaces removed, quotes made alike, a leading ``return``
dropped. A hint that holds a whole solution line fails, unless the exercise notebook of its
chapter shows that line already (its text, or the code it gives): a hint may repeat what the
task says (``if mask is not None:``, the pair ``(context, weights)``), never what it leaves to
the student. Lines too short to give anything away (``h = h0``, ``states = []``) are not
compared.
"""

from __future__ import annotations

import importlib
import re
import tokenize
from functools import cache
from io import StringIO
from pathlib import Path

import nbformat
import pytest

from coursepkg import checks, course
from coursepkg.checks import core

ROOT = Path(__file__).resolve().parents[1]

#: A solution line shorter than this, once normalised, gives nothing away.
SHORTEST = 12


def normalised(text: str) -> str:
    """``text`` without white space, with one kind of quote and without a leading ``return``."""
    text = re.sub(r"\s+", "", text).replace('"', "'")
    return text.removeprefix("return")


def code_line(line: str) -> str:
    """A line of code without its comment."""
    try:
        tokens = list(tokenize.generate_tokens(StringIO(line).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return line
    comments = [token for token in tokens if token.type == tokenize.COMMENT]
    return line[: comments[0].start[1]] if comments else line


@cache
def notebook_parts(stem: str) -> tuple[tuple[str, ...], str]:
    """A solution notebook's solution lines (normalised, long enough to matter) and everything
    else it shows (normalised): its text and the code outside the solution regions."""
    notebook = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    solution, shown = [], []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            shown.append(cell.source)
            continue
        inside = False
        for line in cell.source.splitlines():
            if "### BEGIN SOLUTION" in line:
                inside = True
            elif "### END SOLUTION" in line:
                inside = False
            elif inside:
                text = normalised(code_line(line))
                if len(text) >= SHORTEST:
                    solution.append(text)
            else:
                shown.append(line)
    return tuple(dict.fromkeys(solution)), normalised("\n".join(shown))


def solution_lines() -> dict[str, str]:
    """Every solution line (normalised) -> its notebook."""
    return {line: stem for chapter in course.CHAPTERS
            for stem in [chapter.stem] for line in notebook_parts(stem)[0]}


def chapter_hints(chapter: course.Chapter) -> dict[str, str]:
    """Every hint a task of ``chapter`` can show -> where it is defined."""
    module = importlib.import_module(chapter.checks_module)
    found = {value: f"{chapter.stem}: {name}" for name, value in vars(module).items()
             if name.startswith(("HINT_", "PREFIX_")) and isinstance(value, str)}
    for task in checks.tasks_for(chapter.stem):
        for exc_name, value in task.error_hints.items():
            found.setdefault(value, f"{chapter.stem}: task {task.id}'s {exc_name} hint")
    for exc_name, value in core._DEFAULT_ERROR_HINTS.items():
        found.setdefault(value, f"{chapter.stem}: the default {exc_name} hint")
    return found


HINTS = [(chapter.stem, text, where) for chapter in course.CHAPTERS
         for text, where in chapter_hints(chapter).items()]


def test_the_solutions_and_the_hints_are_found():
    lines = solution_lines()
    assert len(lines) > 60 and len(HINTS) > 300
    assert normalised("scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])") in lines
    assert normalised("return torch.ones(T, T, dtype=torch.bool).tril()") in lines
    assert "ifmaskisnotNone:" in notebook_parts("04_self_attention")[1]  # the text says so


@pytest.mark.parametrize(("stem", "text", "where"), HINTS, ids=[where for *_, where in HINTS])
def test_no_hint_contains_a_line_of_a_solution(stem, text, where):
    hint, shown = normalised(text), notebook_parts(stem)[1]
    found = [(line, source) for line, source in solution_lines().items()
             if line in hint and line not in shown]
    assert not found, f"{where} gives away {found}"


def test_the_comparison_catches_what_it_should():
    lines = solution_lines()
    for leaked in ("weights = torch.softmax(scores, dim=-1); return weights @ v, weights",
                   "Build it as torch.ones(T, T, dtype=torch.bool).tril().",
                   "logits = logits.masked_fill(logits < kth, float('-inf'))"):
        assert any(line in normalised(leaked) for line in lines), leaked
    assert not any(line in normalised("Divide the scores by sqrt(d_k).") for line in lines)
