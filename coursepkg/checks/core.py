"""The checking framework: tasks, cases, verdicts, and one evaluation path.

A :class:`Task` is one exercise function (``count_ngrams``). It owns its test :class:`Case`\\ s,
a trusted ``reference`` implementation, and a ``judge`` that compares a student's answer with the
reference answer and recognises known mistakes. The same path serves two callers:

* the student-facing :func:`check` in an exercise notebook (public cases only, prints a report);
* the instructor's grader, which runs the *student half* (:func:`student_output`) in an isolated
  worker process and the *trusted half* (:func:`grade_output`) in its own process.

Everything that crosses that process boundary is plain JSON data: a case's ``args`` (inputs) and
the value returned by :func:`student_output` (made by the task's ``to_plain``). The student's
function never sees the expected value, and the trusted half never calls student code.

Feedback has two layers. :attr:`Verdict.hint` names the mistake and the fix with no data values,
so it is safe to show for hidden cases. :attr:`Verdict.detail` has the specifics (expected this,
got that) and is shown for public cases only.
"""

from __future__ import annotations

import builtins
import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "Case",
    "CaseResult",
    "CheckError",
    "CheckerBug",
    "ForbiddenCallError",
    "STATUSES",
    "TASKS",
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
    "register",
    "run_task",
    "student_output",
    "task_by_func_name",
    "tasks_for",
    "to_plain_float",
    "a_type",
]

#: Relative and absolute tolerance of every float comparison.
REL_TOL = 1e-6
ABS_TOL = 1e-9

#: The statuses of one case.
STATUSES = ("passed", "failed", "error", "not attempted")


class CheckError(Exception):
    """A student's answer has the wrong form (raised by ``to_plain``); the case fails.

    The message is written by the checks, names types only (never data values), and says what
    was expected: ``"expected a dict mapping n-gram tuples to counts, got list"``.
    """


class ForbiddenCallError(CheckError):
    """The student's function called something the task forbids (e.g. ``model.perplexity``)."""


class CheckerBug(RuntimeError):
    """The checks themselves failed (not the student's code): a bug to report to the instructor."""


# --------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One test of a task.

    Attributes:
        name: Shown to students, e.g. ``"bigrams of two short sentences"``. Hidden cases' names
            must not give their data away.
        points: What the case is worth.
        args: JSON-able inputs only (str, int, float, bool, None, lists, dicts with str keys):
            the grader sends them to a worker process. ``Task.build_args`` turns them into the
            function's positional arguments.
        hidden: Hidden variants are run only by the grader; their feedback never reveals
            ``args`` or expected values.
    """

    name: str
    points: float
    args: dict
    hidden: bool = False


@dataclass(frozen=True)
class Verdict:
    """A judge's decision on one answer.

    Attributes:
        ok: Whether the answer is right.
        hint: A teaching message that names the mistake and the fix with NO data values (safe
            for hidden cases), e.g. ``"every sentence needs one '</s>' at its end."``.
        detail: The specifics (expected 0.5, got 0.25; the missing n-gram ...), shown only for
            public cases.
    """

    ok: bool
    hint: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Task:
    """One exercise function and its tests.

    Attributes:
        id: ``"1.1"``.
        assignment: The exercise set, ``"01_ngrams"``.
        func_name: The name of the function students write, ``"count_ngrams"``.
        title: A short description.
        cases: Public and hidden cases, in report order.
        build_args: JSON ``args`` -> positional arguments for the function. Builds fresh objects
            on every call, so a function that mutates its inputs cannot affect other calls.
        reference: The correct implementation.
        to_plain: Return value -> JSON-able plain value; raises :class:`CheckError` when the value
            has the wrong type.
        judge: ``(got_plain, expected_plain, args) -> Verdict``; recognises known mistakes by
            recomputing them from ``args``. Pure: no printing, no state.
        forbidden: Dotted names the function may not call; a name also forbids everything under
            it (``"nltk"`` forbids ``nltk.util.ngrams``). Enforced by the grader.
        error_hints: Exception type name -> teaching hint, used when the function raises.
    """

    id: str
    assignment: str
    func_name: str
    title: str
    cases: tuple[Case, ...]
    build_args: Callable[[dict], tuple]
    reference: Callable
    to_plain: Callable[[object], object]
    judge: Callable[[object, object, dict], Verdict]
    forbidden: tuple[str, ...] = ()
    error_hints: Mapping[str, str] = field(default_factory=dict)

    @property
    def public_cases(self) -> tuple[Case, ...]:
        """The cases the notebook's ``check`` runs."""
        return tuple(case for case in self.cases if not case.hidden)

    @property
    def hidden_cases(self) -> tuple[Case, ...]:
        """The cases only the grader runs."""
        return tuple(case for case in self.cases if case.hidden)

    def max_points(self, *, public_only: bool = False) -> float:
        """Total points of the public cases (``public_only=True``) or of all cases."""
        cases = self.public_cases if public_only else self.cases
        return float(sum(case.points for case in cases))


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case.

    Attributes:
        name: The case's name.
        points: Points earned (``max_points`` if passed, else 0).
        max_points: What the case is worth.
        status: One of ``"passed"``, ``"failed"``, ``"error"``, ``"not attempted"``.
        message: One line of feedback ("" when passed). For hidden cases it holds only hints.
        hidden: Whether the case is hidden.
    """

    name: str
    points: float
    max_points: float
    status: str
    message: str
    hidden: bool


@dataclass(frozen=True)
class TaskResult:
    """The outcome of one task.

    Attributes:
        id: The task id.
        func_name: The function's name.
        points: Points earned.
        max_points: Points possible over the cases that ran.
        status: ``"passed"`` (full marks), ``"partial"`` (some points), ``"failed"`` (no points),
            or ``"not attempted"`` (every case still raises NotImplementedError, or no function).
        cases: One result per case that ran.
        message: A task-level message (e.g. "got None instead of a function"), else "".
    """

    id: str
    func_name: str
    points: float
    max_points: float
    status: str
    cases: tuple[CaseResult, ...]
    message: str = ""


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

#: Every task, keyed by id ("1.1"), in registration order.
TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add ``task`` to :data:`TASKS` (ids and function names must be unique per assignment)."""
    if task.id in TASKS:
        raise ValueError(f"task {task.id!r} is registered twice")
    if task_by_func_name(task.func_name, task.assignment) is not None:
        raise ValueError(f"function {task.func_name!r} has two tasks in {task.assignment!r}")
    TASKS[task.id] = task
    return task


def get_task(task_id: str) -> Task:
    """The task with id ``task_id``; KeyError naming the known ids otherwise."""
    try:
        return TASKS[task_id]
    except (KeyError, TypeError):
        known = ", ".join(TASKS)
        raise KeyError(f"there is no task {task_id!r}; the tasks are: {known}") from None


def tasks_for(assignment: str) -> list[Task]:
    """The tasks of one assignment (``"01_ngrams"``), in id order."""
    found = [task for task in TASKS.values() if task.assignment == assignment]
    return sorted(found, key=lambda task: tuple(int(part) for part in task.id.split(".")))


def task_by_func_name(func_name: str, assignment: str | None = None) -> Task | None:
    """The task whose function is called ``func_name`` (in ``assignment`` if given), or None."""
    for task in TASKS.values():
        if task.func_name == func_name and assignment in (None, task.assignment):
            return task
    return None


# --------------------------------------------------------------------------------------------
# Plain values and comparisons
# --------------------------------------------------------------------------------------------


def plain_problem(value: object) -> str | None:
    """None if ``value`` is plain JSON data, else a description of the first offending part.

    Plain means exactly the types ``None``, ``bool``, ``int``, ``float``, ``str``, ``list``, and
    ``dict`` with ``str`` keys, nested (subclasses are rejected, so an object with an odd
    ``__eq__`` cannot slip through). NaN and infinities are allowed (Python's json writes them);
    the judges never accept them by accident.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if item is None or kind in (bool, int, float, str):
            continue
        if kind is list:
            stack.extend(item)
        elif kind is dict:
            for key, sub in item.items():
                if type(key) is not str:
                    return f"a dict with {a_type(key)} key"
                stack.append(sub)
        else:
            return a_type(item)
    return None


def close(got: object, expected: float) -> bool:
    """Whether a plain number ``got`` equals ``expected`` within rel 1e-6 / abs 1e-9.

    NaN never matches; an infinity matches only the same infinity; bools are not numbers here.
    """
    if type(got) not in (int, float) or isinstance(got, bool):
        return False
    got = float(got)
    if math.isnan(got) or math.isnan(expected):
        return False
    if math.isinf(got) or math.isinf(expected):
        return got == expected
    return math.isclose(got, expected, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def to_plain_float(value: object) -> float:
    """A returned number -> float (Python, NumPy or 0-d torch scalars); CheckError otherwise."""
    if isinstance(value, bool):
        raise CheckError("expected a float, got bool")
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (list, tuple, dict, str)):
        try:
            scalar = item()
        except Exception:  # e.g. a tensor with several elements
            scalar = None
        if isinstance(scalar, numbers.Real) and not isinstance(scalar, bool):
            return float(scalar)
    raise CheckError(f"expected a float, got {type(value).__name__}")


def a_type(value: object) -> str:
    """``"a list"``, ``"an int"``: the type of ``value`` with its article, for messages."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def fmt_number(x: object) -> str:
    """A short, deterministic rendering of a number for detail messages."""
    if type(x) is float:
        return f"{x:.6g}"
    return repr(x)


# --------------------------------------------------------------------------------------------
# Evaluation: the student half, the trusted half, and the two together
# --------------------------------------------------------------------------------------------

_DEFAULT_ERROR_HINTS = {
    "ZeroDivisionError": "You divided by a count that is 0: handle that case before dividing.",
    "KeyError": "A dictionary lookup failed: use d.get(key, 0) for keys that may be missing.",
    "IndexError": "An index ran past the end of a sequence: check your loop bounds.",
    "TypeError": "An operation got a value of the wrong type: check what you pass and return "
    "(tuples of words, lists of sentences, numbers).",
    "ValueError": "A function got an argument it cannot use: check the values you pass it.",
    "AttributeError": "You used an attribute or method the object does not have: check its type.",
    "RecursionError": "Your function recurses without end: write it with a loop.",
    "NameError": "A name is not defined: did you run the cells above, and spell it right?",
}

_UNKNOWN_ERROR_HINT = "Call your function on a public test's inputs to see where it fails."

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _one_line(text: str, limit: int = 200) -> str:
    """Collapse whitespace, hide object addresses (nbval compares output), cap the length."""
    text = _ADDRESS.sub("", " ".join(str(text).split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _join(*parts: str) -> str:
    return " ".join(part.strip() for part in parts if part and part.strip())


def student_output(task: Task, case: Case, func: Callable) -> object:
    """The untrusted half: call ``func`` on the case's arguments and return ``to_plain`` of it.

    Exceptions raised by ``func`` (and :class:`CheckError` from ``to_plain``) propagate to the
    caller, who reports them with :func:`exception_name` / :func:`exception_result`. A failure
    to build the arguments is a :class:`CheckerBug`.
    """
    try:
        args = task.build_args(case.args)
    except Exception as exc:
        raise CheckerBug(f"task {task.id}: cannot build the arguments of {case.name!r}") from exc
    return task.to_plain(func(*args))


def grade_output(task: Task, case: Case, plain: object) -> CaseResult:
    """The trusted half: judge a plain value returned by :func:`student_output`.

    Validates that ``plain`` is made only of plain JSON types (anything else fails), computes the
    expected value with the reference, and asks the judge.
    """
    problem = plain_problem(plain)
    if problem is not None:
        return _result(case, "failed", f"returned {problem}, which is not a plain value.")
    expected = task.to_plain(task.reference(*task.build_args(case.args)))
    try:
        verdict = task.judge(plain, expected, case.args)
    except Exception:  # a forged or malformed plain value
        verdict = Verdict(False, "The returned value does not have the expected form.")
    if verdict.ok:
        return _result(case, "passed", "")
    hint = verdict.hint or "The result is not the expected one: re-read the task's definition."
    return _result(case, "failed", hint if case.hidden else _join(hint, verdict.detail))


def exception_name(exc: BaseException) -> str:
    """The name :func:`exception_result` classifies: subclasses of NotImplementedError count
    as ``"NotImplementedError"``; others keep their own class name."""
    if isinstance(exc, NotImplementedError):
        return "NotImplementedError"
    return type(exc).__name__


def exception_result(task: Task, case: Case, exc_name: str, message: str) -> CaseResult:
    """The result of a case whose student half raised ``exc_name(message)``.

    NotImplementedError -> "not attempted"; :class:`CheckError` (wrong return type) and
    :class:`ForbiddenCallError` -> "failed"; anything else -> "error" with a one-line
    ``"raised KeyError: ..."`` and a hint. Hidden cases never show the exception's message
    (it may contain the case's data), only the name of a built-in exception type and the hint.
    """
    if exc_name == "NotImplementedError":
        return _result(case, "not attempted", "The function still raises NotImplementedError.")
    if exc_name in (CheckError.__name__, ForbiddenCallError.__name__):
        hint = task.error_hints.get(exc_name, "")
        if case.hidden:
            text = hint or "The function returned a value of the wrong type (see the public tests)."
        else:
            prefix = "Wrong return type: " if exc_name == CheckError.__name__ else ""
            said = _one_line(message).rstrip(".")
            said = prefix + said if prefix else said[:1].upper() + said[1:]
            text = _join(said + ".", hint)
        return _result(case, "failed", text)
    hint = (
        task.error_hints.get(exc_name)
        or _DEFAULT_ERROR_HINTS.get(exc_name)
        or _UNKNOWN_ERROR_HINT
    )
    if case.hidden:  # the type only; a class of the student's own could be named after the data
        shown = exc_name if isinstance(getattr(builtins, exc_name, None), type) else "an exception"
    else:
        said = _one_line(message).rstrip(".")  # torch's messages end with one already
        shown = f"{exc_name}: {said}" if said else exc_name
    return _result(case, "error", _join(f"raised {shown}.", hint))


def evaluate_case(task: Task, case: Case, func: Callable) -> CaseResult:
    """Run one case in this process: :func:`student_output`, then :func:`grade_output`.

    Never raises for anything the student's function does, except KeyboardInterrupt (so a
    notebook can still be interrupted) and :class:`CheckerBug`.
    """
    try:
        plain = student_output(task, case, func)
    except (KeyboardInterrupt, CheckerBug):
        raise
    except BaseException as exc:  # noqa: BLE001 - student code may raise anything, even SystemExit
        return exception_result(task, case, exception_name(exc), str(exc))
    return grade_output(task, case, plain)


def _result(case: Case, status: str, message: str) -> CaseResult:
    points = float(case.points) if status == "passed" else 0.0
    return CaseResult(case.name, points, float(case.points), status, message, case.hidden)


def _task_status(cases: Iterable[CaseResult]) -> str:
    cases = list(cases)
    points = sum(case.points for case in cases)
    if cases and all(case.status == "not attempted" for case in cases):
        return "not attempted"
    if points >= sum(case.max_points for case in cases):
        return "passed"
    return "partial" if points > 0 else "failed"


def run_task(task_id: str, func: object, *, hidden: bool = False) -> TaskResult:
    """Run a task's public cases (and its hidden ones when ``hidden=True``) in this process.

    Does not print. ``func`` that is None or not callable gives "not attempted" on every case.
    """
    task = get_task(task_id)
    cases = task.cases if hidden else task.public_cases
    if not callable(func):
        what = "None" if func is None else f"{a_type(func)}, not a function"
        message = (
            f"expected your function {task.func_name}, got {what}. "
            "Run the cell that defines it, then check again."
        )
        results = tuple(_result(case, "not attempted", message) for case in cases)
        return TaskResult(task.id, task.func_name, 0.0, _total(results), "not attempted",
                          results, message)
    results = tuple(evaluate_case(task, case, func) for case in cases)
    points = float(sum(result.points for result in results))
    return TaskResult(task.id, task.func_name, points, _total(results), _task_status(results),
                      results)


def _total(results: Iterable[CaseResult]) -> float:
    return float(sum(result.max_points for result in results))


# --------------------------------------------------------------------------------------------
# The student-facing report
# --------------------------------------------------------------------------------------------

_LABELS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "not attempted": "TODO"}


def _pts(x: float) -> str:
    return f"{x:g}"


def format_task_result(result: TaskResult, *, has_hidden: bool = False) -> str:
    """The report :func:`check` prints (ASCII, deterministic, no trailing newline)."""
    head = f"Task {result.id} {result.func_name}"
    total = f"{_pts(result.points)}/{_pts(result.max_points)} points"
    if result.status == "not attempted":
        reason = result.message or (
            "the function still raises NotImplementedError. Replace the stub with your code."
        )
        return f"{head}: not attempted ({total}): {reason}"
    lines = [f"{head}: {total}"]
    for case in result.cases:
        label = _LABELS.get(case.status, case.status.upper())
        line = f"  {label:<5} [{_pts(case.points)}/{_pts(case.max_points)}] {case.name}"
        lines.append(f"{line}: {case.message}" if case.message else line)
    if has_hidden:
        lines.append("  (The grader also runs hidden tests on this task.)")
    return "\n".join(lines)


def check(task_id: str, func: object) -> None:
    """Run the public tests of task ``task_id`` on ``func`` and print a short report.

    Meant for the check cells of exercise notebooks: it never raises (a stub, None, a crash, a
    wrong return type all become lines of the report), except for KeyboardInterrupt.

    Args:
        task_id: The task, e.g. ``"1.1"``.
        func: The student's function.
    """
    try:
        task = get_task(task_id)
    except KeyError:
        known = ", ".join(TASKS) or "none"
        print(f"check(): there is no task {task_id!r}. The tasks are: {known}.")
        return
    try:
        result = run_task(task_id, func)
        report = format_task_result(result, has_hidden=bool(task.hidden_cases))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - check() must never raise into the notebook
        report = (
            f"Task {task.id} {task.func_name}: the checker itself failed "
            f"({type(exc).__name__}: {_one_line(str(exc))}). Please tell your instructor."
        )
    print(report)
