"""Graded folders for the report and export tests.

:func:`write_graded` writes a small, made-up class the way ``coursepkg grade`` writes its output
folder (with the grader's own ``grades_csv``, ``gradescope_json`` and ``feedback_md``), so the
tests do not depend on any chapter's tasks; :func:`demo_graded` grades a real demo batch once per
test session (the batch ``make grade-demo`` makes) for the end-to-end tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from checks_support import TEST_SECRET

from coursepkg.grading.demo import write_demo
from coursepkg.grading.grader import grade
from coursepkg.grading.reporting import feedback_md, grades_csv, gradescope_json
from coursepkg.grading.sandbox import Limits
from coursepkg.grading.submission import Found

ROOT = Path(__file__).resolve().parents[1]
DEMO_ASSIGNMENT = "05_multihead"
TASKS = [SimpleNamespace(id="9.1", func_name="count_words"),
         SimpleNamespace(id="9.2", func_name="train_tagger")]


def case(name: str, points: float, max_points: float, status: str, message: str = "",
         hidden: bool = False) -> dict:
    return {"name": name, "points": points, "max_points": max_points, "status": status,
            "message": message, "hidden": hidden, "seconds": None}


def task(index: int, status: str, cases: list[dict]) -> dict:
    return {"id": TASKS[index].id, "func_name": TASKS[index].func_name, "title": "",
            "points": sum(c["points"] for c in cases),
            "max_points": float(sum(c["max_points"] for c in cases)),
            "status": status, "cases": cases, "isolation": {}}


def count_words(statuses: list[str], message: str = "") -> dict:
    """Task 9.1: two public cases (1 point each) and two hidden ones (2 points each)."""
    names = [("one sentence", 1, False), ("two sentences", 1, False),
             ("hidden test 3", 2, True), ("hidden test 4", 2, True)]
    cases = [case(n, p if s == "passed" else 0, p, s, "" if s == "passed" else message, h)
             for (n, p, h), s in zip(names, statuses, strict=True)]
    got = sum(c["points"] for c in cases)
    status = ("passed" if got == 6 else statuses[0] if len(set(statuses)) == 1
              else "partial" if got else "failed")
    return task(0, status, cases)


def train_tagger(status: str, points: float, message: str = "") -> dict:
    """Task 9.2: one public case of 4 points (partial credit in bands)."""
    return task(1, status, [case("held-out accuracy", points, 4, status, message)])


#: student -> (task records, the capstone metric or None)
CLASS = {
    "ada": ([count_words(["passed"] * 4), train_tagger("passed", 4)], 0.97),
    "ben": ([count_words(["passed", "passed", "failed", "failed"],
                         "Count '</s>' too. counts[('a',)]: expected 2, got 1."),
             train_tagger("partial", 2, "Accuracy 0.88: 0.85 or more earns half.")], 0.88),
    "cy": ([count_words(["not attempted"] * 4, "The function still raises NotImplementedError."),
            train_tagger("not attempted", 0, "The function still raises NotImplementedError.")],
           None),
    "dan": ([count_words(["failed", "passed", "failed", "failed"],
                         "Count '</s>' too. counts[('b',)]: expected 1, got 0."),
             train_tagger("timeout", 0, "Time limit reached: look for an infinite loop.")], None),
    "zed": ([count_words(["error"] * 4, "raised RuntimeError: <script>alert('x')</script>"),
             train_tagger("passed", 4)], 0.93),
}


def write_graded(folder: Path, *, leaderboard: bool = True) -> Path:
    """Write the made-up class's graded folder into ``folder``; returns it.

    With ``leaderboard``, the results of the students with a metric carry Gradescope's
    ``leaderboard`` entry, as a capstone task records it."""
    rows = []
    for student, (tasks, metric) in CLASS.items():
        record = {"status": "graded", "problem": None, "notes": [], "tasks": tasks}
        found = Found(Path(f"{student}.ipynb"), student)
        rows.append((found, record))
        result = json.loads(gradescope_json(record))
        if leaderboard and metric is not None:
            result["leaderboard"] = [{"name": "accuracy", "value": metric, "order": "desc"}]
        (folder / "results").mkdir(parents=True, exist_ok=True)
        (folder / "feedback").mkdir(parents=True, exist_ok=True)
        (folder / "results" / f"{student}.json").write_text(json.dumps(result, indent=2))
        (folder / "feedback" / f"{student}.md").write_text(feedback_md(found, record))
    (folder / "grades.csv").write_text(grades_csv(rows, TASKS))
    (folder / "log.jsonl").write_text(json.dumps({"tests": "public and hidden tests"}) + "\n")
    return folder


_DEMO: dict[str, Path] = {}


def demo_graded(tmp_path_factory) -> Path:
    """The graded folder of the demo batch of :data:`DEMO_ASSIGNMENT` (graded once a session,
    with the tests' secret, so with hidden cases)."""
    if "graded" not in _DEMO:
        folder = tmp_path_factory.mktemp("demo")
        write_demo(DEMO_ASSIGNMENT, ROOT, folder / "submissions")
        grade(DEMO_ASSIGNMENT, [folder / "submissions"], folder / "graded", jobs=2,
              limits=Limits(timeout=15.0, memory_mb=1024), secret=TEST_SECRET, progress=False)
        _DEMO["graded"] = folder / "graded"
    return _DEMO["graded"]
