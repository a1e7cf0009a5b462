"""Every chapter's exercise set, checked the same way: the solution notebook holds each task's
function and check cell, stores full marks and no stderr; the generated exercise has each
stub (a debug task: its starter code instead) and starts with the Colab setup cell; the grader
can load both (the solution passes, the exercise is "not attempted", a debug task's starter
code "failed")."""

from pathlib import Path

import nbformat
import pytest

from coursepkg import checks
from coursepkg.grading.submission import read_submission

ROOT = Path(__file__).resolve().parents[1]

# assignment -> (the chapter title its introduction names, a line its explorations print)
CHAPTERS = {
    "01_ngrams": ("n-gram language models", None),
    "02_rnn": ("RNNs and LSTMs", None),
    "03_attention": ("*Attention*", "the marked token gets most of the weight: True"),
    "04_self_attention": ("*Self-attention*", "the same vectors, permuted: True"),
    "05_multihead": ("*Multi-head attention*",
                     "G = H: equal to the package's multi_head_attention: True"),
    "06_positional": ("*Positional encodings*",
                      "the RoPE score depends only on the offset m - n: True"),
    "07_transformer": ("*The full Transformer*",
                       "the same tokens as coursepkg.lm.generate: True"),
}


def test_every_assignment_with_tasks_is_listed_here():
    assert {task.assignment for task in checks.TASKS.values()} == set(CHAPTERS)


def code_of(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_every_task_has_a_region_a_stub_and_a_check_cell(assignment):
    solution_nb = nbformat.read(ROOT / "solutions" / f"{assignment}.ipynb", as_version=4)
    exercise_nb = nbformat.read(ROOT / "exercises" / f"{assignment}.ipynb", as_version=4)
    assert solution_nb.metadata["coursepkg"] == {"assignment": assignment}
    assert exercise_nb.metadata["coursepkg"] == {
        "assignment": assignment, "generated_from": f"solutions/{assignment}.ipynb"
    }
    solution, code = code_of(solution_nb), code_of(exercise_nb)
    tasks = checks.tasks_for(assignment)
    assert len(tasks) >= 3
    for task in tasks:
        assert f"def {task.func_name}(" in solution
        stub = f'raise NotImplementedError("Task {task.id}: write {task.func_name}")'
        assert (stub in code) == (task.kind != "debug"), task.id
        assert f'check("{task.id}", {task.func_name})' in code
    assert "BEGIN SOLUTION" not in code and "END SOLUTION" not in code
    assert "BEGIN STARTER" not in code and "END STARTER" not in code
    setup = exercise_nb.cells[1]
    assert setup.id == "coursepkg-colab-setup" and 'find_spec("coursepkg")' in setup.source
    assert CHAPTERS[assignment][0] in solution_nb.cells[0].source


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_the_solution_notebook_stores_full_marks_and_no_stderr(assignment):
    nb = nbformat.read(ROOT / "solutions" / f"{assignment}.ipynb", as_version=4)
    for task in checks.tasks_for(assignment):
        cell = next(c for c in nb.cells if c.source == f'check("{task.id}", {task.func_name})')
        text = "".join(output.get("text", "") for output in cell.outputs)
        points = f"{task.max_points(public_only=True):g}"
        assert text.startswith(f"Task {task.id} {task.func_name}: {points}/{points} points\n")
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert all(out.get("name") != "stderr" for out in outputs)
    printed = CHAPTERS[assignment][1]
    if printed is not None:
        assert printed in "".join(out.get("text", "") for out in outputs)


@pytest.mark.parametrize("assignment", CHAPTERS)
@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_the_grader_can_load_the_solution_and_the_exercise(assignment, folder):
    """The grader keeps imports, definitions and constant assignments of a notebook; our own
    notebooks must load cleanly, with nothing skipped."""
    sub = read_submission(ROOT / folder / f"{assignment}.ipynb", "x")
    assert sub.problem is None and sub.notes == []
    namespace: dict = {}
    exec(compile(sub.code, "submission.py", "exec"), namespace)  # noqa: S102 - our notebook
    for task in checks.tasks_for(assignment):
        result = checks.run_task(task.id, namespace[task.func_name])
        untouched = "failed" if task.kind == "debug" else "not attempted"
        assert result.status == ("passed" if folder == "solutions" else untouched)
