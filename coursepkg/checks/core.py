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

**Kinds of task** (:attr:`Task.kind`, one of :data:`KINDS`; :func:`points_by_kind` sums a set's
points per kind):

* ``"formula"``: translate the chapter's math into code, judged against the reference;
* ``"extension"``: an idea the book stops short of, its reference kept with the checks;
* ``"debug"``: the exercise notebook shows a buggy body (a starter block, see
  :mod:`coursepkg.authoring`) that the student fixes; judged on behaviour like any task, so the
  untouched starter code fails its cases (it does not raise NotImplementedError); its hints
  describe the symptom and the idea of the fix, never the fixed line;
* ``"train"``: the student trains a course model and returns its weights; the task has a
  ``time_limit`` (seconds per case, measured by the check cell and by the grader) and an
  ``expected`` hook that computes what the judge needs (held-out data) from the case's args
  without running a training; the judge scores the returned weights on that data and awards
  a band of the points (:func:`banded`); the weights cross the process boundary as plain data
  (:func:`coursepkg.checks.tensors.state_dict_plain`);
  :func:`coursepkg.checks.tensors.train_task` builds the whole task;
* ``"question"``: a zero-argument function returning a number or a choice, its key computed
  from coursepkg at check time (:func:`question` builds the whole task).

A worked example of each new kind, written as a chapter's checks module writes its tasks, is
``tests/framework_examples.py`` (a train task, a debug task, two questions), and
``tests/test_checks_framework.py`` proves them (right, wrong, too slow; in the check cell and in
the grader).

**Partial credit.** A judge may award a fraction of a case (:attr:`Verdict.fraction`): the case
then earns that fraction of its points with the status ``"partial"`` (:data:`STATUSES`).

**Arguments the student's function never sees.** Keys of a case's ``args`` that start with
``"_"`` (``"_heldout"``: the seed of a train task's held-out data) are for the trusted half
only: :func:`student_args` drops them before ``build_args``, and the grader never sends them
to its worker. The expected hook and the judge see them all.

**Exploration cells.** :func:`exploring` wraps a notebook cell that calls the student's
functions, so the untouched notebook still runs from top to bottom.
"""

from __future__ import annotations

import builtins
import copy
import functools
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
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
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
    "KINDS",
    "STATUSES",
    "TASKS",
    "Task",
    "TaskResult",
    "Verdict",
    "a_type",
    "banded",
    "check",
    "close",
    "draw_seed",
    "draw_sizes",
    "evaluate_case",
    "exception_name",
    "exploring",
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
    "points_by_kind",
    "question",
    "register",
    "run_task",
    "secret_digest",
    "secret_text",
    "student_args",
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

#: The statuses of one case: ``"partial"`` earned a fraction of its points (a judge's
#: :attr:`Verdict.fraction`, strictly between 0 and 1).
STATUSES = ("passed", "partial", "failed", "error", "not attempted")

#: The kinds of task (:attr:`Task.kind`); see the module's docstring.
KINDS = ("formula", "extension", "train", "debug", "question")


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
        ok: Whether the answer is right (full marks for the case).
        hint: A teaching message that names the mistake and the fix with NO data values (safe
            for hidden cases), e.g. ``"every sentence needs one '</s>' at its end."``.
        detail: The specifics (expected 0.5, got 0.25; the missing n-gram ...), shown only for
            public cases.
        fraction: Partial credit for an answer that is not right (``ok=False``): the share of
            the case's points it earns, from 0 to below 1 (None: 0). :func:`banded` makes it
            from a score and thresholds. A right answer always earns 1.
        score: The measure a train task's judge scored (held-out accuracy, nats per char...),
            set by :func:`banded`; a task with a :attr:`Task.leaderboard` ranks students by it.
    """

    ok: bool
    hint: str = ""
    detail: str = ""
    fraction: float | None = None
    score: float | None = None

    def __post_init__(self) -> None:
        if self.fraction is None:
            return
        value = self.fraction
        if (type(value) not in (int, float) or math.isnan(value) or not 0 <= value < 1
                or self.ok):
            raise CheckerBug(f"Verdict.fraction must be a number in [0, 1) with ok=False, got "
                             f"{value!r} (ok={self.ok}); a right answer is Verdict(True)")

    @property
    def credit(self) -> float:
        """The share of the case's points the answer earns: 1.0 when ok, else the fraction."""
        return 1.0 if self.ok else float(self.fraction or 0.0)


def banded(score: float, bands: Sequence[tuple[float, float]], *, metric: str = "accuracy",
           higher_is_better: bool = True, hint: str = "") -> Verdict:
    """The verdict on a measured ``score`` (a train task's held-out accuracy, nats per char...).

    Args:
        score: the measure of the student's result (from the trusted process).
        bands: ``(threshold, fraction)`` pairs, best first: ``((0.95, 1.0), (0.85, 0.5))``
            gives full marks from 0.95, half from 0.85, nothing below. The first threshold's
            fraction must be 1.0. With ``higher_is_better=False`` a score passes a threshold
            when it is at most it (a loss).
        metric: the measure's name, in the messages.
        hint: what a result below full marks should look at (the idea, never the answer); a
            default one says how far the score is from the target.

    Returns:
        ``Verdict(True)`` in the first band; a partial (or 0) verdict whose detail gives the
        score and the bands (the student's own score on held-out data reveals none of it).
    """
    if not bands or bands[0][1] != 1.0:
        raise CheckerBug("banded(): the first band must be worth the full points (1.0)")
    better = (lambda a, b: a >= b) if higher_is_better else (lambda a, b: a <= b)
    word = ">=" if higher_is_better else "<="
    table = ", ".join(f"{fraction:g} of the points at {word} {threshold:g}"
                      for threshold, fraction in bands)
    if type(score) not in (int, float) or not math.isfinite(score):
        return Verdict(False, hint or f"The model's {metric} could not be measured: are its "
                       "weights finite?", f"{metric}: {score!r}.")
    detail = f"{metric} {score:.4g} on held-out data ({table})."
    for threshold, fraction in bands:
        if better(score, threshold):
            if fraction >= 1:
                return Verdict(True, score=float(score))
            return Verdict(False, hint or f"Partial credit: the {metric} is short of the target "
                           f"{word} {bands[0][0]:g}; train longer or better.", detail, fraction,
                           score=float(score))
    return Verdict(False, hint or f"The {metric} is far from the target {word} {bands[0][0]:g}: "
                   "is the model trained on the data it was given?", detail, 0.0,
                   score=float(score))


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
        kind: What the task asks (one of :data:`KINDS`): ``"formula"`` (the default),
            ``"extension"``, ``"train"``, ``"debug"``, ``"question"``.
        time_limit: Seconds one case may take (a train task's budget), or None. The check cell
            runs the call (the function and ``to_plain``) on one torch thread, as the grader
            does, measures it and fails a case that takes longer (more than the limit fails),
            printing the time beside the budget; the grader measures the same from its
            trusted process and gives it the status "timeout" (and stops a case at the larger
            of this limit and its ``--timeout``).
        expected: ``expected(args) -> plain``, what the judge gets as ``expected_plain``
            instead of ``to_plain(reference(*build_args(args)))``: a train task's held-out
            data (drawn from the case's args, its ``"_"`` keys included), so that grading never
            runs the reference's training. Runs in the trusted process only; None: the
            reference's answer.
        private_files: Paths (relative to the ``coursepkg`` package, or absolute) the grader
            hides from its worker (a corpus's test split); the worker gets the training data
            from ``build_args``, so the loader it calls must be warmed in the fork server
            (:attr:`warm`). Hidden only where the grader has namespaces (root on Linux); the
            grader's notes say when they stay readable.
        warm: A zero-argument function the grader's fork server calls once before it forks
            (it loads and caches what ``build_args`` needs from :attr:`private_files`).
        leaderboard: ``(metric, lower_is_better)`` for a task whose scores the class report
            ranks (a capstone): each submission's entry is the mean of the judge's
            :attr:`Verdict.score` over the task's cases (Gradescope's ``leaderboard``); None:
            no leaderboard.
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
    kind: str = "formula"
    time_limit: float | None = None
    expected: Callable[[dict], object] | None = None
    private_files: tuple[str, ...] = ()
    warm: Callable[[], None] | None = None
    leaderboard: tuple[str, bool] | None = None

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
        points: Points earned (``max_points`` if passed, the judge's fraction of it if
            partial, else 0).
        max_points: What the case is worth.
        status: One of :data:`STATUSES` (the grader adds its own: "timeout", "forbidden"...).
        message: One line of feedback ("" when passed). For hidden cases it holds only hints.
        hidden: Whether the case is hidden.
        seconds: How long the case took, measured for tasks with a ``time_limit`` (else None).
        score: The judge's measure of the answer (:attr:`Verdict.score`), or None.
    """

    name: str
    points: float
    max_points: float
    status: str
    message: str
    hidden: bool
    seconds: float | None = None
    score: float | None = None


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
#: The module that registered each task (the grader's worker imports it when the task is not
#: one of ``coursepkg.checks``'s chapters: a test's or an instructor's own tasks).
REGISTERED_BY: dict[str, str] = {}


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
    if task.kind not in KINDS:
        raise ValueError(f"task {task.id!r}: kind {task.kind!r} is not one of {KINDS}")
    if task.time_limit is not None and not task.time_limit > 0:
        raise ValueError(f"task {task.id!r}: time_limit must be a positive number of seconds")
    TASKS[task.id] = task
    REGISTERED_BY[task.id] = sys._getframe(1).f_globals.get("__name__", "")
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


def points_by_kind(assignment: str) -> dict[str, float]:
    """The points of an assignment's tasks per kind (every kind of :data:`KINDS`, 0 for none),
    counted as graded with a secret: public and hidden cases."""
    points = dict.fromkeys(KINDS, 0.0)
    for task in tasks_for(assignment):
        points[task.kind] += task.max_points()
    return points


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
        _expected_plain(task, case.args)
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


def student_args(args: dict) -> dict:
    """The part of a case's ``args`` the student's function is built from: every key but those
    starting with ``"_"`` (held back for the trusted half: see the module's docstring)."""
    return {key: value for key, value in args.items() if not key.startswith("_")}


def _expected_plain(task: Task, args: dict) -> object:
    """What the judge compares with: the task's ``expected`` hook, else the reference's answer."""
    if task.expected is not None:
        return task.expected(args)
    return task.to_plain(task.reference(*task.build_args(student_args(args))))


def student_output(task: Task, case: Case, func: Callable) -> object:
    """The untrusted half: call ``func`` on the case's arguments and return ``to_plain`` of it.

    The function gets the freshly built arguments; a private copy of them (aliasing kept: when
    ``q is k is v`` the copies are one tensor too) is compared with them after the call, and a
    function that changed one raises :class:`InputChangedError`, whatever it returned.

    Exceptions raised by ``func`` (and :class:`CheckError` from ``to_plain``) propagate to the
    caller, who reports them with :func:`exception_name` / :func:`exception_result`. A failure
    to build or copy the arguments is a :class:`CheckerBug`.
    """
    return call_student(task, func, *case_arguments(task, case))


def case_arguments(task: Task, case: Case) -> tuple[tuple, tuple]:
    """The arguments of a case for the student's function, and a private copy of them (see
    :func:`student_output`); raises :class:`CheckerBug` when they cannot be built."""
    try:
        args = task.build_args(student_args(case.args))
        return args, _private_copy(args)
    except Exception as exc:
        raise CheckerBug(f"task {task.id}: cannot build the arguments of {case.name!r}") from exc


def call_student(task: Task, func: Callable, args: tuple, kept: tuple) -> object:
    """Call ``func`` on ``args`` (built by :func:`case_arguments`, with its copy ``kept``),
    check that no argument changed, and return ``to_plain`` of the value (see
    :func:`student_output`)."""
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
    expected = _expected_plain(task, case.args)
    try:
        verdict = task.judge(plain, expected, case.args)
    except CheckerBug:
        raise
    except Exception:  # a forged or malformed plain value
        verdict = Verdict(False, "The returned value does not have the expected form.")
    credit = verdict.credit
    if credit >= 1:
        result = _result(case, "passed", "")
    else:
        hint = verdict.hint or "The result is not the expected one: re-read the task's definition."
        status = "partial" if credit > 0 else "failed"
        result = _result(case, status, hint if case.hidden else _join(hint, verdict.detail),
                         credit)
    if type(verdict.score) in (int, float) and math.isfinite(verdict.score):
        result = replace(result, score=float(verdict.score))
    return result


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
    if task.time_limit is not None:
        warm_training()
    start = time.perf_counter()
    try:
        with _one_thread(task.time_limit is not None):
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
        return _timed(task, exception_result(task, case, exception_name(exc), str(exc)),
                      time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if getattr(tripwire, "hit", None) is not None:
        return forbidden_result(case, tripwire.hit)
    if task.time_limit is not None and seconds > task.time_limit:
        return _timed(task, _result(case, "failed", over_time_message(seconds, task.time_limit)),
                      seconds)
    return _timed(task, grade_output(task, case, plain), seconds)


class _one_thread:  # noqa: N801 - a context manager
    """torch on one thread inside the block (when ``on``), as in the grader's children: a
    timed case is measured as the grader measures it."""

    def __init__(self, on: bool) -> None:
        self.on, self.threads = on, None

    def __enter__(self) -> None:
        torch = sys.modules.get("torch")
        if self.on and torch is not None:
            self.threads = torch.get_num_threads()
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self.threads is not None:
            sys.modules["torch"].set_num_threads(self.threads)


@functools.cache
def warm_training() -> None:
    """Pay once, before a timed case, what a process's first optimiser step costs: torch
    imports its compiler stack then (seconds on a busy machine), which no training loop should
    be charged for. The grader's fork server does it too (:mod:`coursepkg.grading.warm`)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.zeros(1, 1)).sum().backward()
        optimizer.step()


def over_time_message(seconds: float, limit: float) -> str:
    """What a case that took longer than its task's ``time_limit`` says (check cell and grader:
    the same rule, more than the limit fails)."""
    return (f"Over the time budget: {seconds:.1f} s for a budget of {limit:g} s; the grader "
            "gives 0 for this case. Train for fewer steps or with larger batches.")


def _timed(task: Task, result: CaseResult, seconds: float) -> CaseResult:
    """``result`` with its time recorded when the task has a time limit."""
    if task.time_limit is None:
        return result
    return replace(result, seconds=round(seconds, 3))


def tripwire_for(task: Task) -> Tripwire:
    """The grader's forbidden-call tripwire for ``task`` (a context manager; ``.hit`` names
    the forbidden call it saw, ``.forbidden_callable(obj)`` whether ``obj`` itself is one)."""
    return Tripwire(task)


def forbidden_result(case: Case, name: str) -> CaseResult:
    """The result of a case whose function called the forbidden ``name``: failed, 0 points of
    the case's, with the grader's own message (``"forbidden: you called X ..."``)."""
    return _result(case, "failed", forbidden_message(name))


def _result(case: Case, status: str, message: str, fraction: float = 0.0) -> CaseResult:
    if status == "passed":
        points = float(case.points)
    elif status == "partial":
        points = round(float(case.points) * fraction, 6)
    else:
        points = 0.0
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

_LABELS = {"passed": "PASS", "partial": "PART", "failed": "FAIL", "error": "ERROR",
           "not attempted": "TODO"}


def _pts(x: float) -> str:
    return f"{x:g}"


def format_task_result(result: TaskResult, *, has_hidden: bool = False,
                       time_limit: float | None = None) -> str:
    """The report :func:`check` prints (ASCII, no trailing newline; deterministic but for the
    measured time of a task with a ``time_limit``, printed as ``(1.3 s of 10 s budget)``,
    which nbval's sanitizer masks)."""
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
        if case.seconds is not None and time_limit is not None:
            line += f" ({case.seconds:.1f} s of {time_limit:g} s budget)"
        lines.append(f"{line}: {case.message}" if case.message else line)
    if has_hidden:
        lines.append("  (The grader also runs hidden tests on this task.)")
    return "\n".join(lines)


def check(task_id: str, func: object) -> None:
    """Run the public tests of task ``task_id`` on ``func`` and print a short report.

    Meant for the check cells of exercise notebooks: it never raises (a stub, None, a crash, a
    wrong return type all become lines of the report), except for KeyboardInterrupt. Like the
    grader, it fails a case whose function calls forbidden code or changes its inputs, and says
    that the grader gives 0 for it. The notebook's global random state (Python's, torch's)
    is left as it was, whatever the function seeds or draws.

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
        with _random_state_kept():
            result = run_task(task_id, func)
        report = format_task_result(result, has_hidden=bool(task.hidden),
                                    time_limit=task.time_limit)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - check() must never raise into the notebook
        report = (
            f"Task {task.id} {task.func_name}: the checker itself failed "
            f"({type(exc).__name__}: {_one_line(str(exc))}). Please tell your instructor."
        )
    print(report)


class _random_state_kept:  # noqa: N801 - a context manager
    """The global random generators (Python's, and torch's CPU one when torch is loaded) as
    they were before the block: a check cell leaves the notebook's random state alone, even
    when the student's function seeds it (a train task's ``torch.manual_seed(seed)``)."""

    def __enter__(self) -> None:
        torch = sys.modules.get("torch")
        self.python = random.getstate()
        self.torch = None if torch is None else torch.random.get_rng_state()

    def __exit__(self, *exc: object) -> None:
        random.setstate(self.python)
        if self.torch is not None:
            sys.modules["torch"].random.set_rng_state(self.torch)


# --------------------------------------------------------------------------------------------
# Question tasks
# --------------------------------------------------------------------------------------------

#: The forms of answer a question takes (:func:`question`) and how its messages name them.
ANSWER_FORMS = {
    "number": "a number (an int or a float)",
    "int": "a whole number (an int)",
    "choice": "one of the choices, as a string",
}

_QUESTION_HINT = "Not the expected answer: re-read the question and the experiment it asks about."

#: The default relative tolerance of a ``"number"`` answer: a key read off a printout rounded
#: to four significant digits passes.
QUESTION_TOLERANCE = 1e-3


def question(id: str, assignment: str, func_name: str, title: str, key: Callable[[], object],
             points: float = 1, *, kind_of_answer: str = "number",
             tolerance: float = QUESTION_TOLERANCE, choices: Sequence[str] | None = None,
             hint: str = "",
             wrong_answers: Callable[[], Mapping[object, str]] | None = None) -> Task:
    """A question task (kind ``"question"``), to :func:`register` like any task.

    The student writes a function of no argument, ``def uniform_perplexity(): return 50``,
    that returns the answer; the task has one public case and no hidden ones. The key is never
    stored: ``key()`` computes it from coursepkg (``lambda: float(len(vocab))``) the first
    time the task is checked in a process, and keeps it (``task.reference.cache_clear()``
    forgets it); so a change in the package that changes the answer changes the verdict,
    never a stale key. The messages say what form of answer is expected, never the key.

    What the student's function may call: anything but the key. The reference and the
    ``key`` it wraps are forbidden like any task's reference (a function that returns
    ``get_task(id).reference()`` or ``key()`` gets 0, in the check cell and in the grader),
    but the package is not: a question asks about the chapter's experiments, and running the
    chapter's code to find the answer is a fair way to answer it. A chapter that wants more
    forbidden gives the task its names (``dataclasses.replace(task, forbidden=...)``).

    Args:
        id, assignment, func_name, title: as in :class:`Task`.
        key: computes the right answer: a number, an int, or one of ``choices``.
        points: what the question is worth (a few points at most).
        kind_of_answer: ``"number"`` (right within ``tolerance``, relative, or 1e-9
            absolute), ``"int"`` (exact) or ``"choice"`` (one of ``choices``, exact).
        tolerance: the relative tolerance of a ``"number"`` answer.
        choices: the possible answers of a ``"choice"`` question (strings, shown to students).
        hint: what a wrong answer is told: the idea to look at, never the answer.
        wrong_answers: known wrong answers, each with its own hint (the mistake behind it),
            computed like the key, from the package (``lambda: {V ** 2: "...", ...}``); an
            answer equal to one of them (same type, and within ``tolerance`` for a number) is
            told that hint instead of ``hint``.
    """
    if kind_of_answer not in ANSWER_FORMS:
        raise ValueError(f"question {id}: kind_of_answer must be one of {tuple(ANSWER_FORMS)}")
    if (kind_of_answer == "choice") != (choices is not None):
        raise ValueError(f"question {id}: choices go with kind_of_answer='choice', and only")
    options = tuple(choices or ())
    form = ANSWER_FORMS[kind_of_answer]
    if options:
        form += " among " + ", ".join(repr(option) for option in options)

    reference = _cached(key)

    def to_plain(value: object) -> object:
        if kind_of_answer == "choice":
            if type(value) is not str or value not in options:
                what = repr(value) if type(value) is str else a_type(value)
                raise CheckError(f"expected {form}, got {what}")
            return value
        if kind_of_answer == "int":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise CheckError(f"expected {form}, got {a_type(value)}")
            return int(value)
        try:
            number = to_plain_float(value)
        except CheckError:
            raise CheckError(f"expected {form}, got {a_type(value)}") from None
        if not math.isfinite(number):
            raise CheckError(f"expected {form}, got a value that is not finite")
        return number

    def same(got: object, answer: object) -> bool:
        if kind_of_answer == "number":
            return type(got) in (int, float) and not isinstance(got, bool) and math.isclose(
                float(got), float(answer), rel_tol=tolerance, abs_tol=ABS_TOL)
        return type(got) is type(answer) and got == answer

    def judge(got: object, expected: object, args: dict) -> Verdict:
        if same(got, expected):
            return Verdict(True)
        for answer, its_hint in (wrong_answers() if wrong_answers else {}).items():
            if same(got, answer):
                return Verdict(False, its_hint)
        return Verdict(False, hint or _QUESTION_HINT)

    return Task(
        id=id, assignment=assignment, func_name=func_name, title=title,
        cases=(Case("the answer", points, {}),),
        build_args=lambda args: (),
        reference=reference, to_plain=to_plain, judge=judge,
        error_hints={"CheckError": f"Return {form}."},
        kind="question",
    )


def _cached(func: Callable[[], object]) -> Callable[[], object]:
    """``func`` computed once per process (``.cache_clear()`` forgets the value), as a
    question's reference: a Python function, so that the tripwire sees every call of it, one
    the cache answers too (``functools.cache`` answers from C, where no profile hook looks),
    and its ``__wrapped__`` is the key, which the tripwire forbids with it."""
    kept: list[object] = []

    def reference() -> object:
        if not kept:
            kept.append(func())
        return kept[0]

    reference.cache_clear = kept.clear
    reference.__wrapped__ = func
    return reference


# --------------------------------------------------------------------------------------------
# Exploration cells
# --------------------------------------------------------------------------------------------


class exploring:  # noqa: N801 - used like a function: `with exploring("4.2"):`
    """A context manager for a notebook cell that explores the student's function of a task.

    ::

        with exploring("4.2", "to compare it with torch's"):
            out, weights = scaled_dot_product_attention(q, k, v)
            print((out - torch_out).abs().max())

    Any exception from the block is swallowed and the cell prints one line instead:
    ``"Write scaled_dot_product_attention (task 4.2) to compare it with torch's."`` when the
    function is still a stub (NotImplementedError), else ``"scaled_dot_product_attention
    raised ValueError: <message>; run the check cell of task 4.2 above for a hint."``. So the
    untouched notebook runs top to bottom, and a wrong attempt does not stop it.
    KeyboardInterrupt passes (the notebook can still be interrupted).

    Args:
        task_id: the task whose function the block calls.
        purpose: what the cell does with it, continuing "Write <func> (task <id>) ...".
    """

    def __init__(self, task_id: str, purpose: str = "") -> None:
        self.task_id = task_id
        self.purpose = purpose

    def __enter__(self) -> exploring:
        return self

    def __exit__(self, kind, exc, traceback) -> bool:  # noqa: ANN001
        if exc is None or isinstance(exc, KeyboardInterrupt):
            return False
        task = TASKS.get(self.task_id)
        func = task.func_name if task is not None else "the function"
        if isinstance(exc, NotImplementedError):
            purpose = f" {self.purpose.strip()}" if self.purpose.strip() else ""
            print(f"Write {func} (task {self.task_id}){purpose.rstrip('.')}.")
        else:
            said = _one_line(str(exc)).rstrip(".")
            shown = f"{exception_name(exc)}: {said}" if said else exception_name(exc)
            print(f"{func} raised {shown}; run the check cell of task {self.task_id} above for "
                  "a hint.")
        return True
