"""Checks for the exercise notebooks, and the test bank of the instructor's grader.

In a notebook::

    from coursepkg.checks import check, exploring
    check("1.1", count_ngrams)   # prints one line per public test; never raises
    with exploring("1.1", "to count the bigrams of the corpus"):   # survives a stub or a crash
        print(count_ngrams(corpus, 2)[("<s>", "the")])

A chapter's checks module declares its tasks (:class:`Task`, with a ``kind``: formula,
extension, train, debug or question; :func:`question` builds a question task) and registers
them; see :mod:`~coursepkg.checks.core` for the kinds, partial credit (:func:`banded`) and
train tasks' time limits and held-out data, and :mod:`~coursepkg.checks.tensors` for weights
returned as a ``state_dict`` (:func:`~coursepkg.checks.tensors.state_dict_plain`) and whole train
tasks (:func:`~coursepkg.checks.tensors.train_task`). Worked examples of each kind:
``tests/framework_examples.py``.

The grader uses the same tasks: :func:`grading_cases` makes a task's cases (the public ones, and
the hidden ones from the instructor's secret), :func:`student_output` runs the student's function
on one case (in an isolated worker), :func:`grade_output` judges the plain result in the trusted
process, and :func:`run_task` does both in one process.

Tasks register themselves when their chapter module is imported. The chapter modules are the
``checks_module`` of every chapter of :data:`coursepkg.course.CHAPTERS`, all imported here, so
:data:`TASKS` is complete after ``import coursepkg.checks``; a chapter listed there without its
checks module fails this import.

What the chapters share lives in modules of its own: :mod:`~coursepkg.checks.core` (tasks,
cases, hidden cases from the instructor's secret, evaluation), :mod:`~coursepkg.checks.tensors`
(tensor cases and verdicts), :mod:`~coursepkg.checks.masks` (boolean masks as plain lists),
:mod:`~coursepkg.checks.attention_mistakes` (the known mistakes of attention and of causal
masks, each with its hint) and :mod:`~coursepkg.checks.forbidden` (the forbidden-call tripwire
of the grader and of the check cells). No chapter module imports another.
"""

import importlib

from coursepkg.checks.core import (
    KINDS,
    STATUSES,
    TASKS,
    Args,
    Case,
    CaseResult,
    CheckerBug,
    CheckError,
    ForbiddenCallError,
    HiddenCase,
    InputChangedError,
    Task,
    TaskResult,
    Verdict,
    banded,
    check,
    close,
    evaluate_case,
    exception_name,
    exception_result,
    exploring,
    forbidden_result,
    format_task_result,
    get_task,
    grade_output,
    grading_cases,
    load_extra_cases,
    load_secret,
    new_secret,
    plain_problem,
    points_by_kind,
    question,
    run_task,
    secret_digest,
    secret_text,
    student_args,
    student_output,
    task_by_func_name,
    tasks_for,
    tripwire_for,
    write_secret,
)
from coursepkg.course import CHAPTERS

for _chapter in CHAPTERS:
    importlib.import_module(_chapter.checks_module)  # registers the chapter's tasks
del _chapter

__all__ = [
    "KINDS",
    "STATUSES",
    "TASKS",
    "Args",
    "Case",
    "CaseResult",
    "CheckError",
    "CheckerBug",
    "ForbiddenCallError",
    "HiddenCase",
    "InputChangedError",
    "Task",
    "TaskResult",
    "Verdict",
    "banded",
    "check",
    "close",
    "evaluate_case",
    "exception_name",
    "exception_result",
    "exploring",
    "forbidden_result",
    "format_task_result",
    "get_task",
    "grade_output",
    "grading_cases",
    "load_extra_cases",
    "load_secret",
    "new_secret",
    "plain_problem",
    "points_by_kind",
    "question",
    "run_task",
    "secret_digest",
    "secret_text",
    "student_args",
    "student_output",
    "task_by_func_name",
    "tasks_for",
    "tripwire_for",
    "write_secret",
]
