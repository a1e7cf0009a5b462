"""``coursepkg validate NOTEBOOK``: the grader's own verdict on the public cases, before handing in.

A check cell runs the student's function in the notebook's kernel, where everything the notebook
has run is there. The grader does not run the notebook: it keeps only imports, definitions and
constant assignments (:mod:`.submission`), and calls each function in a fresh, isolated child. So
a notebook can pass every check cell and still lose points: a function that relies on a variable
a cell computed (``VOCAB = sorted(...)``), one that calls ``input()``, a function renamed after
its check ran, a syntax error left in another cell.

:func:`validate` runs exactly what ``coursepkg grade`` runs (:func:`coursepkg.grading.grader.grade`:
the same reading of the notebook, the same sandbox, forbidden-call tripwire and input checks, the
same judging), without a secret, so on the public cases only, into a temporary folder it removes.
A notebook therefore gets from ``validate`` the status ``grade`` gives its public cases.
:func:`report_lines` prints one line per task (points and the grader's status word) and, under it,
each case that did not pass with the grader's message (cases with the same message share a
line); :func:`all_passed` is the exit code's test.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from coursepkg.checks.core import tasks_for
from coursepkg.grading import grader
from coursepkg.grading.reporting import total
from coursepkg.grading.sandbox import Limits

__all__ = ["all_passed", "infer_assignment", "report_lines", "validate"]


def infer_assignment(path: Path) -> str | None:
    """The assignment a notebook belongs to: its ``coursepkg.assignment`` metadata (the exercise
    notebooks carry it), else its file name when that is an assignment's; None if neither."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        stem = meta.get("coursepkg", {}).get("assignment")
    except (OSError, ValueError, AttributeError):
        stem = None
    for candidate in (stem, path.stem):
        if isinstance(candidate, str) and tasks_for(candidate):
            return candidate
    return None


def validate(path: Path, assignment: str, *, limits: Limits | None = None) -> dict:
    """Grade one notebook on the public cases, the grader's way; returns the grader's record.

    Args:
        path: the notebook.
        assignment: its exercise set (``"01_ngrams"``).
        limits: the children's limits (the grader's defaults when None).

    Returns:
        The record ``coursepkg grade`` keeps for the notebook (``status`` "graded" or
        "unreadable", ``problem``, ``notes``, and one dict per task with its ``points``,
        ``max_points``, ``status`` and ``cases``).
    """
    with tempfile.TemporaryDirectory(prefix="coursepkg-validate-") as tmp:
        rows = grader.grade(
            assignment, [path], Path(tmp) / "graded", jobs=1, limits=limits, progress=False
        )
    return rows[0][1]


def all_passed(record: dict) -> bool:
    """True when the notebook was read and every task passed every public case."""
    return record["status"] == "graded" and all(t["status"] == "passed" for t in record["tasks"])


def _num(x: float) -> str:
    return f"{x:g}"


def _failing_lines(cases: list[dict]) -> list[str]:
    """One line per failing case, or per message that several failing cases share."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for case in cases:
        if case["status"] != "passed":
            groups.setdefault((case["status"], case["message"]), []).append(case)
    lines = []
    for (status, message), group in groups.items():
        points = sum(c["points"] for c in group), sum(c["max_points"] for c in group)
        name = group[0]["name"] if len(group) == 1 else f"{len(group)} cases"
        lines.append(f"      {status.upper()} [{_num(points[0])}/{_num(points[1])}] {name}: "
                     f"{message}")
    return lines


def report_lines(record: dict, path: Path, assignment: str) -> list[str]:
    """What ``coursepkg validate`` prints: a heading, one line per task, the cases to fix, the
    total and what to do next."""
    lines = [f"{path.name} ({assignment}): the grader's public tests (hidden tests run at grading)"]
    if record["status"] == "unreadable":
        lines.append(f"the grader cannot read this notebook: {record['problem']}.")
        return lines
    lines += [f"note: {note}" for note in record.get("notes") or []]
    width = max(len(f"{t['id']} {t['func_name']}") for t in record["tasks"])
    for task in record["tasks"]:
        name = f"{task['id']} {task['func_name']}"
        score = f"{_num(task['points'])} / {_num(task['max_points'])}"
        lines.append(f"  {name:<{width}}  {score:>11}  {task['status']}")
        if task["status"] in ("passed", "not attempted"):
            continue
        lines += _failing_lines(task["cases"])
    got, most = total(record)
    todo = [t["id"] for t in record["tasks"] if t["status"] != "passed"]
    lines.append(f"public tests: {_num(got)} / {_num(most)} points")
    if not todo:
        lines.append("every public test passes the way the grader runs it.")
        return lines
    lines.append(f"not yet: task{'s' * (len(todo) > 1)} {', '.join(todo)}.")
    if any(t["status"] in ("error", "missing") for t in record["tasks"]):
        lines.append(
            "The grader keeps only your imports, functions, classes and constant assignments, "
            "and runs each function in a fresh process: a function that needs a variable a cell "
            "computed, reads input() or was renamed fails here even when its check cell passes."
        )
    return lines
