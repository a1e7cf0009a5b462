"""Grading a batch of submissions: one isolated child per task, judging and reporting here.

Output folder layout (all files written atomically: a temporary file, then a rename):

- ``grades.csv``: one row per submission, points per task, total, max, status;
- ``results/<student>.json``: the Gradescope ``results.json`` schema;
- ``feedback/<student>.md``: what passed, what failed and why (hidden tests never show data);
- ``log.jsonl``: one line per graded submission (file, hash, status, isolation in force);
- ``cache/<sha256>-...json``: the graded record of a notebook's content, so a rerun after an
  interruption skips what was already graded. The name also holds the package's version, the
  grader's (:data:`GRADER_VERSION`) and a digest of the cases graded on (the secret's hidden
  cases and the instructor's extra ones): a change of any of them grades again.

Hidden cases exist only with the instructor's secret (``--secret FILE``): they are made here, in
the trusted process, and each child receives only the arguments of the cases it runs (without
their keys that start with "_", held back for the judge). Without a secret the grader runs the
public cases only, and says so in the log and the summary.

A task with a ``time_limit`` (a train task) gets a per-case clock of the larger of that limit
and ``--timeout``, a task clock of its cases' limits together, and its cases' times measured
(:mod:`.judging`). A task's ``private_files`` are hidden from its children (with namespaces).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import queue
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

import coursepkg
from coursepkg import __version__
from coursepkg.checks.core import (
    REGISTERED_BY,
    Case,
    Task,
    grading_cases,
    secret_digest,
    student_args,
    tasks_for,
)
from coursepkg.grading import worker
from coursepkg.grading.judging import task_record, unreadable_task
from coursepkg.grading.reporting import (
    atomic_write,
    feedback_md,
    grades_csv,
    gradescope_json,
    overall_status,
    remove_unfinished_writes,
    summary_table,
    total,
)
from coursepkg.grading.sandbox import Limits, can_isolate, run_cases
from coursepkg.grading.submission import Found, Submission, find_submissions, read_submission

__all__ = [
    "MAX_JOBS",
    "Found",
    "Grader",
    "atomic_write",
    "find_submissions",
    "grade",
    "gradescope_json",
    "slot_uids",
    "summary_table",
]

# One unprivileged user per parallel slot, unique to this grader process (no /etc/passwd entry is
# needed): the clean-up kills every process of a slot's user, so two graders running at the same
# time on one machine must never share a user.
UID_BASE = 1 << 28
MAX_JOBS = 64
#: Bumped when the grader records something else for the same notebook and cases (new statuses,
#: messages, time rules), so that cached records of an older grader are not reused.
GRADER_VERSION = 3


_GRADERS = itertools.count()


def slot_uids(jobs: int) -> list[int]:
    """User ids for the ``jobs`` parallel slots of a new grader, unused by any other live grader
    (of this process, by a counter; of other processes, by the process id)."""
    key = (os.getpid() % (1 << 16)) * 64 + next(_GRADERS) % 64
    return [UID_BASE + key * MAX_JOBS + slot for slot in range(jobs)]


class Grader:
    """Grades submissions of one assignment; see :func:`grade` for the command-line flow."""

    def __init__(
        self,
        assignment: str,
        out: Path,
        *,
        jobs: int = 2,
        limits: Limits | None = None,
        hide: Iterable[Path] = (),
        secret: bytes | None = None,
        extra: Mapping[str, Sequence[Case]] | None = None,
    ) -> None:
        self.assignment = assignment
        self.tasks = tasks_for(assignment)
        if not self.tasks:
            raise ValueError(f"unknown assignment {assignment!r}")
        extra = extra or {}
        self.secret = secret
        self.extra = sum(len(extra.get(task.id, ())) for task in self.tasks)
        self.cases = {
            task.id: grading_cases(task, secret, tuple(extra.get(task.id, ())))
            for task in self.tasks
        }
        self.cases_digest = _cases_digest(self.cases, secret)
        self.out = out
        self.jobs = min(max(1, jobs), MAX_JOBS)
        self.limits = limits or Limits()
        self.hide = sorted({str(Path(p).resolve()) for p in hide} | {str(out.resolve())})
        self.isolate = can_isolate()
        self._uids: queue.Queue = queue.Queue()
        for uid in slot_uids(self.jobs):
            self._uids.put(uid if self.isolate else None)
        self._tmp = Path(tempfile.mkdtemp(prefix="coursepkg-grade-"))
        os.chmod(self._tmp, 0o711)

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def cache_key(self, sub: Submission) -> str:
        return (
            f"{sub.sha256}-{self.assignment}-{__version__}-g{GRADER_VERSION}-{self.cases_digest}"
        )

    @property
    def tests(self) -> str:
        """Which tests run, in words (the log and the summary say it)."""
        if self.secret is None:
            text = "public tests only (no --secret: no hidden tests)"
        else:
            text = f"public and hidden tests (secret {secret_digest(self.secret)[:8]})"
        if self.extra:
            text += f", and {self.extra} extra case{'s' * (self.extra != 1)} from --tests"
        return text

    def notes(self) -> list[str]:
        """What an instructor should know about this run (printed under the summary)."""
        notes = [f"tests: {self.tests}"]
        private = [task.id for task in self.tasks if task.private_files]
        if private and not self.isolate:
            notes.append(
                f"private files of task{'s' * (len(private) > 1)} {', '.join(private)} stay "
                "readable to children (not root: no namespaces to hide them)"
            )
        if not self.isolate:
            notes.append(
                "isolation: limits only (not root on Linux: no namespaces, so no private /tmp; "
                "each task's TMPDIR is a folder removed after it, and children run as this "
                "user" + (", who can read the secret file" if self.secret else "") + ")"
            )
        return notes

    def grade_submission(self, sub: Submission) -> dict:
        """Grade one read submission (no files written): the record of its content."""
        if sub.problem is not None:
            return {
                "status": "unreadable",
                "problem": sub.problem,
                "notes": sub.notes,
                "tasks": [
                    unreadable_task(t, self.cases[t.id], sub.problem) for t in self.tasks
                ],
            }
        uid = self._uids.get()
        try:
            records = [self._run_task(sub, task, uid) for task in self.tasks]
        finally:
            self._uids.put(uid)
        return {"status": "graded", "problem": None, "notes": sub.notes, "tasks": records}

    def _run_task(self, sub: Submission, task: Task, uid: int | None) -> dict:
        cases = self.cases[task.id]
        workdir = Path(tempfile.mkdtemp(dir=self._tmp))
        try:
            if uid is not None:
                os.chown(workdir, uid, uid)
            request = {
                "code": sub.code,
                "task": task.id,
                "module": task_module(task),
                "cases": [
                    {"index": i, "args": student_args(case.args)} for i, case in enumerate(cases)
                ],
            }
            hide = self.hide + private_paths(task)
            outcome = run_cases(
                worker.child_main, request, task_limits(task, self.limits, len(cases)),
                str(workdir), hide, uid,
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return task_record(task, cases, outcome, syntax_error=sub.broken.get(task.func_name))


def task_limits(task: Task, limits: Limits, cases: int) -> Limits:
    """The limits of one task's children: ``limits``, and for a task with a ``time_limit`` a
    per-case clock of the larger of it and ``limits.timeout``, and a task clock long enough for
    every case to use its limit (plus one clock for loading)."""
    if task.time_limit is None:
        return limits
    per_case = max(limits.timeout, task.time_limit)
    whole = max(2 * per_case, (cases + 1) * per_case)
    return replace(limits, timeout=per_case, task_timeout=whole)


def private_paths(task: Task) -> list[str]:
    """A task's ``private_files`` as absolute paths (relative ones are under the package)."""
    root = Path(coursepkg.__file__).resolve().parent
    return sorted(str((root / path).resolve()) for path in task.private_files)


def task_module(task: Task) -> str:
    """The module that registered a task: a child imports it when the task is not registered
    by ``coursepkg.checks`` (a test's or an instructor's own tasks)."""
    return REGISTERED_BY.get(task.id, "")


# ----------------------------------------------------------------------------- the batch


def _cases_digest(cases: Mapping[str, Sequence[Case]], secret: bytes | None) -> str:
    """16 hex digits that change with the secret and with any case graded on."""
    data = {
        "secret": None if secret is None else secret_digest(secret),
        "cases": {
            task_id: [[c.name, c.points, c.args, c.hidden] for c in task_cases]
            for task_id, task_cases in cases.items()
        },
    }
    text = json.dumps(data, sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _course_solutions_dir() -> Path | None:
    """The course's solutions/ folder when coursepkg runs from a checkout (hidden from children)."""
    candidate = Path(__file__).resolve().parents[2] / "solutions"
    return candidate if candidate.is_dir() else None


def _valid_cached(record: object, tasks: list[Task]) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("tasks"), list)
        and [t.get("id") for t in record["tasks"] if isinstance(t, dict)] == [t.id for t in tasks]
    )


def grade(
    assignment: str,
    paths: list[Path],
    out: Path,
    *,
    jobs: int = 2,
    limits: Limits | None = None,
    progress: bool = True,
    secret: bytes | None = None,
    extra: Mapping[str, Sequence[Case]] | None = None,
    private: Iterable[Path] = (),
    notes: list[str] | None = None,
) -> list[tuple[Found, dict]]:
    """Grade every notebook under ``paths`` and write the gradebook files into ``out``.

    Resumable: a notebook whose content hash already has a record in ``out/cache`` is not run
    again. Deterministic: the same folder gives byte-identical ``grades.csv`` and ``results/``.

    Args:
        assignment: the exercise set (``"01_ngrams"``).
        paths: notebooks, or folders searched for them.
        out: the output folder.
        jobs: submissions graded at once.
        limits: the children's limits.
        progress: show a progress bar.
        secret: the instructor's secret (hidden cases); None runs the public cases only.
        extra: the instructor's extra cases per task id (``load_extra_cases``).
        private: files or folders the children must not see besides the submissions, the
            output and the course's solutions (the secret file, the extra tests file).
        notes: if given, receives what the summary should add (:meth:`Grader.notes`).

    Returns:
        (submission, record) pairs, sorted by student id.
    """
    from tqdm.auto import tqdm

    found = find_submissions(paths, assignment)
    hide = {p.path.resolve().parent for p in found} | {Path(p).resolve() for p in private}
    solutions = _course_solutions_dir()
    if solutions is not None:
        hide.add(solutions)
    out.mkdir(parents=True, exist_ok=True)
    grader = Grader(
        assignment, out, jobs=jobs, limits=limits, hide=hide, secret=secret, extra=extra
    )
    if notes is not None:
        notes.extend(grader.notes())
    log_path = out / "log.jsonl"

    def one(item: Found) -> dict:
        sub = read_submission(item.path, item.student)
        cache_file = out / "cache" / f"{grader.cache_key(sub)}.json"
        record, cached = None, False
        if sub.sha256 and cache_file.is_file():
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(cache_file.read_text(encoding="utf-8"))
            cached = _valid_cached(record, grader.tasks)
        if not cached:
            record = grader.grade_submission(sub)
            if sub.sha256:
                atomic_write(cache_file, json.dumps(record, sort_keys=True) + "\n")
        atomic_write(out / "results" / f"{item.student}.json", gradescope_json(record))
        atomic_write(out / "feedback" / f"{item.student}.md", feedback_md(item, record))
        got, most = total(record)
        isolation = next((t["isolation"] for t in record["tasks"] if t.get("isolation")), {})
        line = {
            "student": item.student,
            "file": str(item.path),
            "sha256": sub.sha256,
            "status": overall_status(record),
            "score": got,
            "max": most,
            "cached": cached,
            "isolation": isolation,
            "tests": grader.tests,
        }
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps(line, sort_keys=True) + "\n")
        return record

    remove_unfinished_writes(out)
    pool = ThreadPoolExecutor(max_workers=grader.jobs)
    try:
        futures = [pool.submit(one, item) for item in found]
        bar = tqdm(
            total=len(found), desc=f"grading {assignment}", unit="notebook", disable=not progress
        )
        with bar:
            for _ in as_completed(futures):
                bar.update()
        records = [future.result() for future in futures]
    except BaseException:
        # Ctrl-C: start nothing new; what is running finishes (or times out) and is cached.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        grader.close()
    rows = sorted(zip(found, records, strict=True), key=lambda row: row[0].student)
    atomic_write(out / "grades.csv", grades_csv(rows, grader.tasks))
    return rows
