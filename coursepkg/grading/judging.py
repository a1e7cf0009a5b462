"""Judging in the trusted process: from what a child sent back to a task's graded record.

Nothing here runs student code. A child's answer for a case is a plain JSON value, an exception
name, or a tripwire hit (:class:`~coursepkg.grading.sandbox.RawOutcome`); the verdict comes from
the task's own judge and reference (:func:`coursepkg.checks.core.grade_output`), run here.
A record is plain data (it goes into the grader's cache as JSON): the task's id, name, points,
the max points of the cases it was graded on, a status, and one result per case.

A case's status is one of :data:`coursepkg.checks.core.STATUSES` ("partial": the judge awarded
a fraction of its points) or one of the grader's own: "timeout", "memory", "crashed",
"forbidden", "missing", "unreadable". A task with a ``time_limit`` has each case's time
measured here, in the trusted process, between the child's messages (the child cannot forge
it): a case that took longer than the limit gets "timeout" and 0, as the check cell fails it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace

from coursepkg.checks.core import (
    Case,
    CaseResult,
    Task,
    exception_result,
    grade_output,
    over_time_message,
)
from coursepkg.checks.forbidden import forbidden_message
from coursepkg.grading.sandbox import RawOutcome

LIMIT_MESSAGES = {
    "timeout": "Time limit reached: look for an infinite loop or a very slow step.",
    "memory": "Memory limit reached: the function allocates far more than the task needs.",
}
# A task's status is the first of these that one of its cases has (else passed / failed / ...).
_TASK_STATUS_ORDER = ("forbidden", "missing", "unreadable", "timeout", "memory", "crashed", "error")


def zero(case: Case, status: str, text: str) -> CaseResult:
    """A case that earned nothing, with its status and message."""
    return CaseResult(case.name, 0.0, float(case.points), status, text, case.hidden)


def _ended_result(case: Case, ended: str, detail: str) -> CaseResult:
    if detail.startswith("not run"):  # the task's time was spent before this case's turn
        return zero(case, ended, f"{detail[0].upper()}{detail[1:]}.")
    if ended in LIMIT_MESSAGES:
        return zero(case, ended, LIMIT_MESSAGES[ended])
    why = detail or "it ended before returning a result: os._exit()?"
    return zero(case, "crashed", f"The process running your code died ({why}).")


def _case_from_raw(case: Case, message: dict | None, outcome: RawOutcome, task: Task) -> CaseResult:
    result = _judged(case, message, outcome, task)
    seconds = None if message is None else message.get("seconds")
    if task.time_limit is None or type(seconds) not in (int, float):
        return result
    if seconds > task.time_limit and result.status not in ("forbidden", "memory"):
        result = zero(case, "timeout", over_time_message(seconds, task.time_limit))
    return replace(result, seconds=round(float(seconds), 3))


def _judged(case: Case, message: dict | None, outcome: RawOutcome, task: Task) -> CaseResult:
    if message is None:  # the child never answered this case: how it ended says why
        return _ended_result(case, outcome.ended, outcome.detail)
    if "ended" in message:  # the case during which its child ran out of time or died
        return _ended_result(case, str(message["ended"]), str(message.get("detail", "")))
    if "forbidden" in message:
        return zero(case, "forbidden", forbidden_message(str(message["forbidden"])))
    if message.get("exc") == "MemoryError":
        return zero(case, "memory", LIMIT_MESSAGES["memory"])
    if "exc" in message:
        return exception_result(task, case, str(message["exc"]), str(message.get("msg", "")))
    return grade_output(task, case, message.get("plain"))


def _task_status(results: Sequence[CaseResult]) -> str:
    """passed (every case), not attempted (every case), the first of the grader's statuses a
    case has (forbidden, missing, ... error), else partial (some points) or failed (none)."""
    statuses = {c.status for c in results}
    for status in ("passed", "not attempted"):
        if statuses == {status}:
            return status
    found = next((s for s in _TASK_STATUS_ORDER if s in statuses), None)
    if found is not None:
        return found
    return "partial" if sum(c.points for c in results) > 0 else "failed"


def task_record(
    task: Task, cases: Sequence[Case], outcome: RawOutcome, *, syntax_error: str | None = None
) -> dict:
    """Turn the raw outcome of ``task``'s children into its graded record.

    Args:
        task: the task.
        cases: the cases it was graded on, in order (the child's case ``i`` is ``cases[i]``).
        outcome: what came back.
        syntax_error: where the definition of the task's function has a syntax error, if it
            has one (:attr:`coursepkg.grading.submission.Submission.broken`).
    """
    if outcome.load_error is not None:
        exc = outcome.load_error["exc"]
        status = "memory" if exc == "MemoryError" else "error"
        text = f"Your notebook's definitions failed to load: raised {exc}."
        results = [zero(c, status, text) for c in cases]
    elif outcome.missing and syntax_error is not None:
        text = f"{task.func_name} is not defined: {syntax_error}. Fix it, run the cell, resubmit."
        results = [zero(c, "error", text) for c in cases]
    elif outcome.missing:
        text = f"{task.func_name} is not defined in the notebook (deleted or renamed?)."
        results = [zero(c, "missing", text) for c in cases]
    else:
        answered = {m["case"]: m for m in outcome.messages if m.get("case") in range(len(cases))}
        results = [
            _case_from_raw(case, answered.get(i), outcome, task) for i, case in enumerate(cases)
        ]
    status = _task_status(results)
    if status == "forbidden":  # a forbidden call anywhere costs the whole task, every case
        called = next(c.message for c in results if c.status == "forbidden")
        results = [zero(case, "forbidden", called) for case in cases]
    return task_dict(task, cases, results, status, outcome.isolation)


def unreadable_task(task: Task, cases: Sequence[Case], problem: str) -> dict:
    """The record of a task of a notebook that could not be read."""
    results = [zero(c, "unreadable", problem) for c in cases]
    return task_dict(task, cases, results, "unreadable", {})


def task_dict(
    task: Task, cases: Sequence[Case], results: list[CaseResult], status: str, isolation: dict
) -> dict:
    """A task's record: plain data (with the task's leaderboard metric, if it has one)."""
    record = {
        "id": task.id,
        "func_name": task.func_name,
        "title": task.title,
        "points": round(sum(c.points for c in results), 6),
        "max_points": float(sum(case.points for case in cases)),
        "status": status,
        "cases": [asdict(c) for c in results],
        "isolation": isolation,
    }
    if task.leaderboard is not None:
        metric, lower_is_better = task.leaderboard
        record["leaderboard"] = {"name": metric, "order": "asc" if lower_is_better else "desc"}
    return record
