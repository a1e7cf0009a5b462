"""`coursepkg validate`: a student's notebook gets the grader's own verdict on the public cases.

The notebooks below pass their check cells in Jupyter (where every cell has run) but not the
grader's way: a function that relies on a value a cell computed, one that reads input(), a
function renamed after its check ran, a syntax error in a task's cell, and a call of the
reference solution (forbidden).
The batch is graded once, as an instructor would (with a secret, so hidden cases too), and
each notebook validated: validate's cases must be grade's public cases, word for word.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from checks_support import TEST_SECRET

from coursepkg.__main__ import main
from coursepkg.checks import tasks_for
from coursepkg.grading.grader import grade
from coursepkg.grading.sandbox import Limits
from coursepkg.grading.validate import all_passed, infer_assignment, report_lines, validate

ROOT = Path(__file__).resolve().parents[1]
# A chapter whose exercise set is stable; the notebooks below are made from its solution
# notebook by edits that work for any task (they wrap or rename the task's function).
ASSIGNMENT = "05_multihead"
FIRST, SECOND = (task.func_name for task in tasks_for(ASSIGNMENT)[:2])
FIRST_ID, SECOND_ID = (task.id for task in tasks_for(ASSIGNMENT)[:2])
LIMITS = Limits(timeout=15.0, memory_mb=1024)  # generous: the machine may be busy


def solution() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / f"{ASSIGNMENT}.ipynb", as_version=4)


def defining_cell(nb: nbformat.NotebookNode, func_name: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.cell_type == "code" and f"def {func_name}(" in c.source)


def edited(func_name: str, edit) -> nbformat.NotebookNode:
    """The solution with ``edit(source)`` applied to the cell that defines ``func_name``."""
    nb = solution()
    cell = defining_cell(nb, func_name)
    cell.source = edit(cell.source)
    return nb


def renamed(source: str, func_name: str, new_name: str) -> str:
    return source.replace(f"def {func_name}(", f"def {new_name}(", 1)


def wrapped(body: str, prelude: str = ""):
    """An edit: the solution's function renamed ``_solution``, and FIRST a wrapper that runs
    ``body`` (which calls ``_solution``), after top-level ``prelude``."""
    return lambda source: (
        renamed(source, FIRST, "_solution") + f"\n\n{prelude}\n\ndef {FIRST}(*args, **kwargs):\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
    )


NOTEBOOKS = {
    "honest": solution,
    # a cell computes a value the function uses: the grader drops the call, so it is undefined
    "top-level-state": lambda: edited(FIRST, wrapped(
        "return IMPLEMENTATION(*args, **kwargs)",
        prelude="def _pick():\n    return _solution\n\n\nIMPLEMENTATION = _pick()",
    )),
    # reads the keyboard: the grader's process has no one typing
    "asks-input": lambda: edited(FIRST, wrapped(
        'input("press Enter to go on ")\nreturn _solution(*args, **kwargs)'
    )),
    # renamed after its check cell ran (the kernel still knows the old name)
    "renamed": lambda: edited(FIRST, lambda s: renamed(s, FIRST, f"{FIRST}_v2")),
    # a syntax error in the cell of the second task (the kernel kept an older definition)
    "syntax-error": lambda: edited(SECOND, lambda s: s.replace("return ", "return (", 1)),
    # the course's reference solution: forbidden in every task
    "forbidden": lambda: edited(FIRST, wrapped(
        "from coursepkg.checks import get_task\n"
        f"return get_task({FIRST_ID!r}).reference(*args, **kwargs)"
    )),
}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """The notebooks, graded as an instructor does and validated one by one."""
    folder = tmp_path_factory.mktemp("validate")
    subs = folder / "subs"
    subs.mkdir()
    for name, make in NOTEBOOKS.items():
        nbformat.write(make(), subs / f"{name}.ipynb")
    rows = grade(ASSIGNMENT, [subs], folder / "graded", jobs=2, limits=LIMITS,
                 secret=TEST_SECRET, progress=False)
    graded = {found.student: record for found, record in rows}
    validated = {name: validate(subs / f"{name}.ipynb", ASSIGNMENT, limits=LIMITS)
                 for name in NOTEBOOKS}
    return {"subs": subs, "graded": graded, "validated": validated}


def public_view(record: dict) -> list[tuple]:
    """Each task's public cases as (task, case, status, points, message)."""
    return [
        (task["id"], case["name"], case["status"], case["points"], case["message"])
        for task in record["tasks"]
        for case in task["cases"]
        if not case["hidden"]
    ]


def task_status(record: dict, task_id: str) -> str:
    return next(t["status"] for t in record["tasks"] if t["id"] == task_id)


@pytest.mark.parametrize("name", list(NOTEBOOKS))
def test_validate_gives_the_public_cases_the_grader_s_verdict(batch, name):
    validated, graded = batch["validated"][name], batch["graded"][name]
    assert public_view(validated) == public_view(graded)
    assert not any(case["hidden"] for task in validated["tasks"] for case in task["cases"])


@pytest.mark.parametrize(
    ("name", "broken", "status", "words"),
    [
        ("top-level-state", FIRST, "error", "NameError"),
        ("asks-input", FIRST, "error", "EOFError"),
        ("renamed", FIRST, "missing", "not defined"),
        ("syntax-error", SECOND, "error", "was never closed"),
        ("forbidden", FIRST, "forbidden", "forbidden: you called"),
    ],
)
def test_what_passes_in_jupyter_but_not_in_the_grader_fails_validate(
    batch, name, broken, status, words
):
    record = batch["validated"][name]
    task_id = FIRST_ID if broken == FIRST else SECOND_ID
    assert not all_passed(record)
    assert task_status(record, task_id) == status == task_status(batch["graded"][name], task_id)
    text = "\n".join(report_lines(record, batch["subs"] / f"{name}.ipynb", ASSIGNMENT))
    assert f" {status}\n" in text and words in text, text
    assert "every public test passes" not in text
    assert any(line.startswith("not yet: task") and task_id in line for line in text.splitlines())
    # the tasks whose cells do not call the broken function keep their points
    nb = solution()
    others = [t for t in record["tasks"] if t["id"] != task_id
              and f"{broken}(" not in defining_cell(nb, t["func_name"]).source]
    assert others and all(t["status"] == "passed" for t in others), name


def test_the_honest_notebook_passes_and_says_so(batch):
    record = batch["validated"]["honest"]
    assert all_passed(record)
    lines = report_lines(record, batch["subs"] / "honest.ipynb", ASSIGNMENT)
    assert [line.split()[-1] for line in lines[1:-2]] == ["passed"] * len(record["tasks"])
    assert lines[-1].startswith("every public test passes")


def test_partial_credit_is_listed_case_by_case_and_shared_messages_once():
    def case(name, points, status, message=""):
        return {"name": name, "points": points, "max_points": 1.0, "status": status,
                "message": message, "hidden": False, "seconds": None}

    task = {"id": "9.1", "func_name": "train_tagger", "points": 1.5, "max_points": 4.0,
            "status": "partial", "cases": [
                case("seed 0", 1.0, "passed"),
                case("seed 1", 0.5, "partial", "Accuracy 0.88: 0.85 or more earns half."),
                case("seed 2", 0.0, "failed", "Accuracy 0.5: train longer."),
                case("seed 3", 0.0, "failed", "Accuracy 0.5: train longer."),
            ]}
    record = {"status": "graded", "problem": None, "notes": [], "tasks": [task]}
    lines = report_lines(record, Path("ada.ipynb"), "09_tags")
    assert not all_passed(record)
    assert lines[1:] == [
        "  9.1 train_tagger      1.5 / 4  partial",
        "      PARTIAL [0.5/1] seed 1: Accuracy 0.88: 0.85 or more earns half.",
        "      FAILED [0/2] 2 cases: Accuracy 0.5: train longer.",
        "public tests: 1.5 / 4 points",
        "not yet: task 9.1.",
    ]


def test_the_assignment_comes_from_the_metadata_or_the_name(tmp_path):
    exercise = ROOT / "exercises" / f"{ASSIGNMENT}.ipynb"
    copy = tmp_path / "my work.ipynb"
    copy.write_bytes(exercise.read_bytes())
    assert infer_assignment(copy) == ASSIGNMENT
    nb = nbformat.read(exercise, as_version=4)
    nb.metadata.pop("coursepkg")
    nbformat.write(nb, tmp_path / "anything.ipynb")
    nbformat.write(nb, tmp_path / f"{ASSIGNMENT}.ipynb")
    assert infer_assignment(tmp_path / "anything.ipynb") is None
    assert infer_assignment(tmp_path / f"{ASSIGNMENT}.ipynb") == ASSIGNMENT


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """The command line, run in this process: (exit code, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_exits_1_with_one_line_per_task(batch, capsys):
    code, out, err = run_main(capsys, "validate", str(batch["subs"] / "syntax-error.ipynb"),
                              "--assignment", ASSIGNMENT)
    assert code == 1, (out, err)
    lines = out.splitlines()
    assert lines[1].startswith("note: code cell ") and "was never closed" in lines[1]
    assert lines[2].split()[:2] == [FIRST_ID, FIRST] and lines[2].endswith(" passed")
    assert any(line.startswith(f"  {SECOND_ID} {SECOND} ") and line.endswith(" error")
               for line in lines)


def test_an_unreadable_notebook_cannot_be_graded_exit_1(tmp_path, capsys):
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [', encoding="utf-8")
    code, out, _ = run_main(capsys, "validate", str(broken), "--assignment", ASSIGNMENT)
    assert code == 1 and "cannot read this notebook" in out and "truncated or corrupt" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["no-such.ipynb"], "no such file"),
        (["code.py"], "not a notebook: "),
        (["plain.ipynb"], "cannot tell which exercise set"),
        (["plain.ipynb", "--assignment", "99_nothing"], "unknown assignment"),
        ([], "the following arguments are required"),
    ],
)
def test_usage_mistakes_are_one_line_errors_exit_2(tmp_path, capsys, args, expected):
    (tmp_path / "code.py").write_text("def f():\n    return 1\n")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "plain.ipynb")
    paths = [str(tmp_path / a) if a.endswith((".ipynb", ".py")) else a for a in args]
    code, out, err = run_main(capsys, "validate", *paths)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err and err.startswith("coursepkg: error: "), err


def test_help_explains_the_exit_codes(capsys):
    code, out, _ = run_main(capsys, "validate", "--help")
    assert code == 0 and "Exit code: 0 every public test passes, 1" in " ".join(out.split())
