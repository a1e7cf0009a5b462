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

**Public and hidden cases.** A task's public cases are plain :class:`Case` data in the package,
written as rows of named fields (:class:`Args`). Its hidden cases are not stored anywhere: the
package keeps only their generators (:class:`HiddenCase`), and :func:`grading_cases` makes their
inputs from the instructor's secret (:func:`load_secret`), in the trusted process, at grading
time. Without the secret nobody, the student included, can tell what the hidden inputs are. An
instructor may add cases of their own from a private file (:func:`load_extra_cases`).

**What every case checks besides the answer.** :func:`student_output` keeps a private copy of
the inputs it hands the function and fails the case if the function changed them
(:class:`InputChangedError`); the check cells run every case inside the same forbidden-call
tripwire as the grader's isolated worker (:mod:`coursepkg.checks.forbidden`), so a notebook
hears "the grader gives 0 for this" before the grader gives it.
"""

from __future__ import annotations

import builtins
import copy
import hashlib
import hmac
import inspect
import json
import math
import numbers
import os
import random
import re
import runpy
import secrets
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from coursepkg.checks.forbidden import Tripwire, forbidden_message

__all__ = [
    "Args",
    "Case",
    "CaseResult",
    "CheckError",
    "CheckerBug",
    "ForbiddenCallError",
    "HiddenCase",
    "InputChangedError",
    "STATUSES",
    "TASKS",
    "Task",
    "TaskResult",
    "Verdict",
    "a_type",
    "check",
    "close",
    "draw_seed",
    "draw_sizes",
    "evaluate_case",
    "exception_name",
    "exception_result",
    "forbidden_result",
    "format_task_result",
    "get_task",
    "grade_output",
    "grading_cases",
    "hidden",
    "load_extra_cases",
    "load_secret",
    "new_secret",
    "plain_problem",
    "register",
    "run_task",
    "secret_digest",
    "secret_text",
    "student_output",
    "task_by_func_name",
    "tasks_for",
    "to_plain_float",
    "tripwire_for",
    "write_secret",
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


class InputChangedError(CheckError):
    """The student's function changed one of its inputs in place (``q /= d``, ``h0.copy_(h)``,
    ``sentence.append("</s>")``): the case fails, whatever the function returned. The message
    names the changed argument by the function's own parameter name."""


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
        hidden: Hidden cases are made only at grading time (:func:`grading_cases`, from a
            :class:`HiddenCase` and the instructor's secret, or an instructor's extra case);
            their feedback never reveals ``args`` or expected values.
    """

    name: str
    points: float
    args: dict
    hidden: bool = False


@dataclass(frozen=True)
class Args:
    """A case's arguments as named fields: one row of a task's table of cases.

    Each task with tensors declares a frozen dataclass of its case fields (a seed, sizes, a
    dtype name...) deriving from this one; a public case is ``Sizes(seed=401, B=2, T=5).case(
    "2 sequences of 5 vectors")``, and a hidden case's generator returns a row drawn from its
    random generator (:func:`hidden`). The fields become the JSON ``args`` of the case (tuples as
    lists), which ``Task.build_args`` reads by name.
    """

    def plain(self) -> dict:
        """The row as JSON ``args``: ``{field name: value}``, tuples turned into lists."""
        return {f.name: _as_json(getattr(self, f.name)) for f in fields(self)}

    def case(self, name: str, points: float = 1) -> Case:
        """A public case of this row, worth ``points``."""
        return Case(name, points, self.plain())


def _as_json(value: object) -> object:
    if isinstance(value, tuple | list):
        return [_as_json(item) for item in value]
    return value


@dataclass(frozen=True)
class HiddenCase:
    """The generator of one hidden case: its name and points are public, its inputs are not.

    Attributes:
        name: Shown in feedback; it says what the case is about (``"hidden: float64"``,
            ``"hidden: one position"``) and never gives its data away.
        points: What the case is worth.
        make: ``make(rng) -> args``: the case's JSON ``args``, every seed, word and value drawn
            from ``rng`` (a :class:`random.Random` seeded from the instructor's secret by
            :func:`grading_cases`), the sizes and edge case fixed by what the case is there to
            catch.
    """

    name: str
    points: float
    make: Callable[[random.Random], dict]


def hidden(name: str, draw: Callable[[random.Random], Args], points: float = 1) -> HiddenCase:
    """A :class:`HiddenCase` whose args are the row ``draw(rng)`` returns."""
    return HiddenCase(name, points, lambda rng: draw(rng).plain())


def draw_seed(rng: random.Random) -> int:
    """A seed for a hidden case's tensors, drawn from ``rng``; public cases' seeds are below
    100000, so a hidden case never shares one."""
    return rng.randrange(100_000, 2**31)


def draw_sizes(rng: random.Random, count: int, low: int, high: int) -> list[int]:
    """``count`` different sizes from ``low`` to ``high`` drawn from ``rng``: sizes that differ
    make the usual mistakes (the wrong square root, a missing transposition) show."""
    return rng.sample(range(low, high + 1), count)


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
        cases: The public cases, in report order (:attr:`public_cases` is another name for them).
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
        hidden: The generators of the hidden cases, in report order (after the public ones).
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
    hidden: tuple[HiddenCase, ...] = ()

    @property
    def public_cases(self) -> tuple[Case, ...]:
        """The cases the notebook's ``check`` runs (all of :attr:`cases`)."""
        return self.cases

    def max_points(self, *, public_only: bool = False) -> float:
        """Total points of the public cases (``public_only=True``), or of the public and the
        hidden cases: what the task is worth when it is graded with a secret."""
        hidden = 0.0 if public_only else sum(case.points for case in self.hidden)
        return float(sum(case.points for case in self.cases) + hidden)


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
    """Add ``task`` to :data:`TASKS` (ids and function names must be unique per assignment,
    case names unique per task; public cases are not hidden, hidden ones say so)."""
    if task.id in TASKS:
        raise ValueError(f"task {task.id!r} is registered twice")
    if task_by_func_name(task.func_name, task.assignment) is not None:
        raise ValueError(f"function {task.func_name!r} has two tasks in {task.assignment!r}")
    names = [case.name for case in task.cases] + [case.name for case in task.hidden]
    if len(set(names)) != len(names):
        raise ValueError(f"task {task.id!r} has two cases of the same name")
    if any(case.hidden for case in task.cases):
        raise ValueError(f"task {task.id!r}: hidden cases are generators (Task.hidden)")
    if not all(case.name.startswith("hidden:") for case in task.hidden):
        raise ValueError(f"task {task.id!r}: a hidden case's name starts with 'hidden:'")
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
# Hidden cases: made from the instructor's secret, at grading time, in the trusted process
# --------------------------------------------------------------------------------------------

#: The secret's size when :func:`new_secret` makes one, and the least :func:`load_secret` accepts.
SECRET_BYTES = 32
MIN_SECRET_BYTES = 16


def new_secret() -> bytes:
    """A fresh instructor's secret: 32 random bytes from the operating system."""
    return secrets.token_bytes(SECRET_BYTES)


def secret_text(secret: bytes) -> str:
    """The secret file's contents, the one format :func:`load_secret` reads: one line of hex."""
    return secret.hex() + "\n"


def write_secret(path: str | os.PathLike, secret: bytes | None = None) -> bytes:
    """Write a new secret (or ``secret``) to a new file that only its owner may read (0600).

    Raises:
        ValueError: the file exists (a secret is never overwritten: the hidden cases of past
            gradings depend on it), or the secret is shorter than 16 bytes.
    """
    secret = new_secret() if secret is None else bytes(secret)
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"a secret has at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ValueError(f"{path} exists already: a secret is never overwritten") from None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secret_text(secret))
    return secret


def load_secret(path: str | os.PathLike) -> bytes:
    """The secret in the file ``path`` (written by :func:`write_secret`).

    Raises:
        ValueError: one line saying what is wrong: no such file, not readable, empty, not hex,
            or shorter than 16 bytes.
    """
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise ValueError(f"no secret file {path} (make one with `coursepkg secret FILE`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the secret file {path}: {type(exc).__name__}") from None
    if not text:
        raise ValueError(f"the secret file {path} is empty")
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"the secret file {path} does not hold one line of hex digits") from None
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the secret in {path} is too short: {len(secret)} bytes, at least "
                         f"{MIN_SECRET_BYTES}")
    return secret


def secret_digest(secret: bytes) -> str:
    """A digest of the secret that reveals nothing of it (SHA-256, hex): for cache keys."""
    return hashlib.sha256(b"coursepkg secret digest\0" + secret).hexdigest()


def _case_seed(secret: bytes, task: Task, index: int) -> int:
    """The seed of hidden case ``index`` of ``task``: the first 8 bytes (big endian) of
    HMAC-SHA256(secret, "assignment/task id/index")."""
    message = f"{task.assignment}/{task.id}/{index}".encode()
    return int.from_bytes(hmac.new(secret, message, hashlib.sha256).digest()[:8], "big")


def grading_cases(task: Task, secret: bytes | None, extra: Sequence[Case] = ()) -> tuple[Case, ...]:
    """The cases a task is graded on: the public ones, then (with a secret) one hidden case per
    generator of ``task.hidden``, then ``extra`` (an instructor's own, :func:`load_extra_cases`).

    The same secret always gives the same cases; without it there are no hidden ones.

    Raises:
        CheckerBug: a generator made args that are not plain JSON.
    """
    cases = list(task.cases)
    if secret is not None:
        for index, generator in enumerate(task.hidden):
            args = generator.make(random.Random(_case_seed(secret, task, index)))
            if plain_problem(args) is not None or type(args) is not dict:
                raise CheckerBug(f"task {task.id}: {generator.name!r} made args that are not "
                                 "plain JSON")
            cases.append(Case(generator.name, generator.points, args, hidden=True))
    cases.extend(extra)
    return tuple(cases)


def load_extra_cases(path: str | os.PathLike) -> dict[str, tuple[Case, ...]]:
    """The instructor's extra cases, from a private Python file.

    The file defines ``CASES = {"1.1": [Case("name", 1, {...args...}), ...], ...}`` (``from
    coursepkg.checks import Case``), in the case format of each task (its public cases show
    it). The cases are hidden (feedback names them but never shows their data) unless the file
    sets ``HIDDEN = False``. The file is the instructor's: it runs in the trusted process only.

    Returns:
        task id -> its extra cases, in the file's order.

    Raises:
        ValueError: one line naming the problem: the file does not run, no ``CASES`` dict, an
            unknown task id, something that is not a :class:`Case`, a name already taken in the
            task, points that are not a positive number, args that are not plain JSON or that
            the task cannot build its arguments from.
    """
    where = Path(path)
    if not where.is_file():
        raise ValueError(f"no tests file {where}")
    try:
        namespace = runpy.run_path(str(where), run_name="coursepkg_extra_cases")
    except BaseException as exc:  # noqa: BLE001 - the file may raise anything, SystemExit too
        raise ValueError(f"the tests file {where} does not run: {type(exc).__name__}: "
                         f"{_one_line(str(exc), 120)}") from None
    table = namespace.get("CASES")
    hide = namespace.get("HIDDEN", True)
    if type(table) is not dict:
        raise ValueError(f"the tests file {where} must define CASES = {{task id: [Case(...), "
                         "...]}}")
    if type(hide) is not bool:
        raise ValueError(f"{where}: HIDDEN must be True or False")
    loaded: dict[str, tuple[Case, ...]] = {}
    for task_id, entries in table.items():
        if task_id not in TASKS:
            raise ValueError(f"{where}: there is no task {task_id!r}")
        if not isinstance(entries, list | tuple):
            raise ValueError(f"{where}: CASES[{task_id!r}] must be a list of Case")
        task = TASKS[task_id]
        names = {case.name for case in task.cases} | {case.name for case in task.hidden}
        cases = []
        for n, case in enumerate(entries):
            cases.append(_extra_case(task, case, f"{where}: CASES[{task_id!r}][{n}]", names,
                                     hide))
            names.add(case.name)
        loaded[task_id] = tuple(cases)
    return loaded


def _extra_case(task: Task, case: object, where: str, names: set[str], hide: bool) -> Case:
    """One extra case, validated (see :func:`load_extra_cases`)."""
    if not isinstance(case, Case):
        raise ValueError(f"{where} is {a_type(case)}, not a Case")
    if type(case.name) is not str or not case.name.strip() or case.name in names:
        raise ValueError(f"{where}: the name {case.name!r} is empty or taken in task {task.id}")
    points = case.points
    if type(points) not in (int, float) or not math.isfinite(points) or points <= 0:
        raise ValueError(f"{where}: points must be a positive number, got {points!r}")
    problem = plain_problem(case.args) if type(case.args) is dict else a_type(case.args)
    if problem is not None:
        raise ValueError(f"{where}: args must be a dict of plain JSON data, got {problem}")
    if json.loads(json.dumps(case.args)) != case.args:
        raise ValueError(f"{where}: args do not survive JSON (a NaN?)")
    try:
        task.to_plain(task.reference(*task.build_args(case.args)))
    except Exception as exc:
        raise ValueError(f"{where}: task {task.id} cannot use these args ({type(exc).__name__}: "
                         f"{_one_line(str(exc), 120)}); its public cases show their form") from None
    return Case(case.name, float(points), case.args, hidden=hide)


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

    The function gets the freshly built arguments; a private copy of them (aliasing kept: when
    ``q is k is v`` the copies are one tensor too) is compared with them after the call, and a
    function that changed one raises :class:`InputChangedError`, whatever it returned.

    Exceptions raised by ``func`` (and :class:`CheckError` from ``to_plain``) propagate to the
    caller, who reports them with :func:`exception_name` / :func:`exception_result`. A failure
    to build or copy the arguments is a :class:`CheckerBug`.
    """
    try:
        args = task.build_args(case.args)
        kept = _private_copy(args)
    except Exception as exc:
        raise CheckerBug(f"task {task.id}: cannot build the arguments of {case.name!r}") from exc
    value = func(*args)
    for position, (now, before) in enumerate(zip(args, kept, strict=True)):
        part = _changed_part(now, before)
        if part is not None:
            raise InputChangedError(_changed_message(_argument_name(func, position) + part))
    return task.to_plain(value)


def _private_copy(args: tuple) -> tuple:
    """A deep copy of the arguments (objects shared between them stay shared); random
    generators are not copied: drawing from the one given is what a sampling task must do."""
    torch = sys.modules.get("torch")
    memo: dict = {}
    stack = list(args)
    while stack:
        item = stack.pop()
        if torch is not None and isinstance(item, torch.Generator):
            memo[id(item)] = item
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return copy.deepcopy(args, memo)


def _changed_part(now: object, before: object) -> str | None:
    """None if ``now`` still equals its copy ``before``, else the path of the first part that
    changed, relative to it: ``""`` (the object itself), ``"[1]"``, ``".ff.0.weight"``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(now, torch.Generator):
        return None
    if torch is not None and isinstance(now, torch.Tensor):
        return None if _same_tensor(torch, now, before) else ""
    if torch is not None and isinstance(now, torch.nn.Module):
        return _changed_module(now, before)
    if type(now) is not type(before):
        return ""
    if isinstance(now, list | tuple):
        if len(now) != len(before):
            return ""
        for n, (a, b) in enumerate(zip(now, before, strict=True)):
            part = _changed_part(a, b)
            if part is not None:
                return f"[{n}]{part}"
        return None
    if isinstance(now, dict):
        if list(now) != list(before):
            return ""
        for key in now:
            part = _changed_part(now[key], before[key])
            if part is not None:
                return f"[{key!r}]{part}"
        return None
    if isinstance(now, float) and math.isnan(now) and math.isnan(before):
        return None
    if isinstance(now, str | bytes | numbers.Number | bool) or now is None:
        return None if now == before else ""
    if hasattr(now, "__dict__"):  # an object (chapter 1's model): its attributes
        now_vars, kept_vars = vars(now), vars(before)
        if list(now_vars) != list(kept_vars):
            return ""
        for key, value in now_vars.items():
            part = _changed_part(value, kept_vars[key])
            if part is not None:
                return f".{key}{part}"
        return None
    return None if now == before else ""


def _same_tensor(torch, now, before) -> bool:  # noqa: ANN001 - torch is the module
    if now.shape != before.shape or now.dtype != before.dtype:
        return False
    if now.is_floating_point() or now.is_complex():
        same = (now == before) | (now.isnan() & before.isnan())
        return bool(same.all())
    return torch.equal(now, before)


def _changed_module(now, before) -> str | None:  # noqa: ANN001 - torch modules
    """The first parameter, buffer or submodule of a module that changed, as ``".name"``."""
    kinds = [(name, type(module)) for name, module in now.named_modules()]
    if kinds != [(name, type(module)) for name, module in before.named_modules()]:
        return ""
    state, kept = now.state_dict(keep_vars=True), before.state_dict(keep_vars=True)
    if list(state) != list(kept):
        return ""
    for name, tensor in state.items():
        if _changed_part(tensor.detach(), kept[name].detach()) is not None:
            return f".{name}"
    return None


def _argument_name(func: Callable, position: int) -> str:
    """The function's own name for its positional argument ``position`` (``"q"``), or
    ``"argument 3"`` when its signature does not say."""
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    for n, parameter in enumerate(parameters):
        if parameter.kind == parameter.VAR_POSITIONAL:
            return f"{parameter.name}[{position - n}]"
        if n == position and parameter.kind in (parameter.POSITIONAL_ONLY,
                                                parameter.POSITIONAL_OR_KEYWORD):
            return parameter.name
    return f"argument {position + 1}"


def _changed_message(name: str) -> str:
    return (
        f"your function changed its input {name} in place (x /= d, x.copy_(...), x[i] = ..., "
        "a list's append...): leave the caller's inputs as they were and compute new tensors or "
        "lists instead. The grader gives 0 for this"
    )


#: What a hidden case says of a changed input (the public tests name it).
_HIDDEN_INPUT_CHANGED = (
    "The function changed one of its inputs in place: compute new tensors or lists instead of "
    "changing the caller's (the public tests name the input). The grader gives 0 for this."
)


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
    if exc_name == InputChangedError.__name__:
        said = _one_line(message, 300).rstrip(".")
        text = _HIDDEN_INPUT_CHANGED if case.hidden else said[:1].upper() + said[1:] + "."
        return _result(case, "failed", text)
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


def evaluate_case(task: Task, case: Case, func: Callable, *, tripwire: object = None,
                  ) -> CaseResult:
    """Run one case in this process: :func:`student_output`, then :func:`grade_output`.

    With a ``tripwire`` (:func:`tripwire_for`), the student's half runs inside it, and a call
    to forbidden code fails the case as the grader fails it (:func:`forbidden_result`).

    Never raises for anything the student's function does, except KeyboardInterrupt (so a
    notebook can still be interrupted) and :class:`CheckerBug`.
    """
    try:
        if tripwire is None:
            plain = student_output(task, case, func)
        else:
            with tripwire:
                plain = student_output(task, case, func)
    except (KeyboardInterrupt, CheckerBug):
        raise
    except BaseException as exc:  # noqa: BLE001 - student code may raise anything, even SystemExit
        if getattr(tripwire, "hit", None) is not None:
            return forbidden_result(case, tripwire.hit)
        return exception_result(task, case, exception_name(exc), str(exc))
    if getattr(tripwire, "hit", None) is not None:
        return forbidden_result(case, tripwire.hit)
    return grade_output(task, case, plain)


def tripwire_for(task: Task) -> Tripwire:
    """The grader's forbidden-call tripwire for ``task`` (a context manager; ``.hit`` names
    the forbidden call it saw, ``.forbidden_callable(obj)`` whether ``obj`` itself is one)."""
    return Tripwire(task)


def forbidden_result(case: Case, name: str) -> CaseResult:
    """The result of a case whose function called the forbidden ``name``: failed, 0 points of
    the case's, with the grader's own message (``"forbidden: you called X ..."``)."""
    return _result(case, "failed", forbidden_message(name))


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


def run_task(task_id: str, func: object, *, secret: bytes | None = None,
             extra: Sequence[Case] = (), tripwire: bool = True,
             hidden: bool = False) -> TaskResult:
    """Run a task's cases in this process: the public ones, and with the instructor's
    ``secret`` the hidden ones, then ``extra`` (see :func:`grading_cases`).

    ``hidden=True`` without a secret runs hidden cases made from a fresh random secret: a
    self-check of an instructor's solutions on hidden cases like the grader's (the cases differ
    from run to run, their names and points do not).

    Every case runs inside the grader's forbidden-call tripwire (``tripwire=False``: not; for
    the course's own references, which the tripwire refuses by design), and a function that is
    itself forbidden fails every case. Does not print. ``func`` that is None or not callable
    gives "not attempted" on every case.
    """
    task = get_task(task_id)
    if hidden and secret is None:
        secret = new_secret()
    cases = grading_cases(task, secret, extra)
    if not callable(func):
        what = "None" if func is None else f"{a_type(func)}, not a function"
        message = (
            f"expected your function {task.func_name}, got {what}. "
            "Run the cell that defines it, then check again."
        )
        results = tuple(_result(case, "not attempted", message) for case in cases)
        return TaskResult(task.id, task.func_name, 0.0, _total(results), "not attempted",
                          results, message)
    wire = tripwire_for(task) if tripwire else None
    alias = None if wire is None else wire.forbidden_callable(func)
    if alias is not None:
        results = tuple(forbidden_result(case, alias) for case in cases)
    else:
        results = tuple(evaluate_case(task, case, func, tripwire=wire) for case in cases)
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
    wrong return type all become lines of the report), except for KeyboardInterrupt. Like the
    grader, it fails a case whose function calls forbidden code or changes its inputs, and says
    that the grader gives 0 for it.

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
        report = format_task_result(result, has_hidden=bool(task.hidden))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - check() must never raise into the notebook
        report = (
            f"Task {task.id} {task.func_name}: the checker itself failed "
            f"({type(exc).__name__}: {_one_line(str(exc))}). Please tell your instructor."
        )
    print(report)
