"""Checks for the exercise notebooks, and the test bank of the instructor's grader.

In a notebook::

    from coursepkg.checks import check
    check("1.1", count_ngrams)   # prints one line per public test; never raises

The grader uses the same tasks: :func:`student_output` runs the student's function on one case
(in an isolated worker), :func:`grade_output` judges the plain result in the trusted process,
and :func:`run_task` does both in one process.

Tasks register themselves when their chapter module is imported; every chapter module is
imported here, so :data:`TASKS` is complete after ``import coursepkg.checks``.
"""

from coursepkg.checks import (
    ch01_ngrams,  # noqa: F401 - registers the chapter 1 tasks
    ch02_rnn,  # noqa: F401 - registers the chapter 2 tasks
    ch03_attention,  # noqa: F401 - registers the chapter 3 tasks
    ch04_self_attention,  # noqa: F401 - registers the chapter 4 tasks
    ch05_multihead,  # noqa: F401 - registers the chapter 5 tasks
    ch06_positional,  # noqa: F401 - registers the chapter 6 tasks
    ch07_transformer,  # noqa: F401 - registers the chapter 7 tasks
)
from coursepkg.checks.core import (
    STATUSES,
    TASKS,
    Case,
    CaseResult,
    CheckerBug,
    CheckError,
    ForbiddenCallError,
    Task,
    TaskResult,
    Verdict,
    check,
    close,
    evaluate_case,
    exception_name,
    exception_result,
    format_task_result,
    get_task,
    grade_output,
    plain_problem,
    run_task,
    student_output,
    task_by_func_name,
    tasks_for,
)

__all__ = [
    "STATUSES",
    "TASKS",
    "Case",
    "CaseResult",
    "CheckError",
    "CheckerBug",
    "ForbiddenCallError",
    "Task",
    "TaskResult",
    "Verdict",
    "check",
    "close",
    "evaluate_case",
    "exception_name",
    "exception_result",
    "format_task_result",
    "get_task",
    "grade_output",
    "plain_problem",
    "run_task",
    "student_output",
    "task_by_func_name",
    "tasks_for",
]
