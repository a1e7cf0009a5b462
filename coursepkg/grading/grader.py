"""Grading a batch of submissions: isolated children run the tasks, judging and reporting here.

Output folder layout (all files written atomically: a temporary file, then a rename):

- ``grades.csv``: one row per submission: student, total, max, file, points per task, status
  (then the written answers and the late columns: :func:`.reporting.grades_header`);
- ``results/<student>.json``: the Gradescope ``results.json`` schema;
- ``feedback/<student>.md``: what passed, what failed and why (hidden tests never show data);
- ``log.jsonl``: one line per graded submission (file, hash, status, isolation in force);
  a run's lines are sorted by student once it finishes (:func:`.shards.sort_log_lines`);
- ``shard.json`` (with ``--shard I/N``): which shard of which grading the folder holds;
- ``cache/<sha256>-...json``: the graded record of a notebook's content, so a rerun after an
  interruption skips what was already graded. The name also holds the package's version, the
  grader's (:data:`GRADER_VERSION`) and a digest of the cases graded on (the secret's hidden
  cases and the instructor's extra ones): a change of any of them grades again;
- ``cache/tasks/<sha256>-<task id>-...json``: the record of one task of a notebook's content,
  keyed by that task's cases only (:attr:`Grader.task_keys`): when one task's cases change, the
  other tasks' records are served from here and only that task runs again (``coursepkg
  regrade``, :mod:`.regrade`, relies on it);
- ``run.json``: what this grading ran (:func:`run_info`): the assignment, the submissions and
  their hashes, the jobs and limits, the secret's digest (never the secret) and the path of its
  file, the extra tests file, and each task's cache key.

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
from coursepkg.checks.forbidden import Tripwire
from coursepkg.grading import worker
from coursepkg.grading.judging import task_record, unreadable_task
from coursepkg.grading.late import LateError, LateSetup
from coursepkg.grading.manual import ManualError, Marking
from coursepkg.grading.manual import prepare as prepare_marking
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
from coursepkg.grading.sandbox import Limits, TaskRun, can_isolate, process_folder, run_tasks
from coursepkg.grading.shards import Shard, sort_log_lines, write_manifest
from coursepkg.grading.submission import Found, Submission, find_submissions, read_submission

__all__ = [
    "MAX_JOBS",
    "Found",
    "Grader",
    "LateError",
    "ManualError",
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
GRADER_VERSION = 5


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
        process_folder()  # before any torch work: its compiler cache goes there
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
        self.task_keys = {
            task.id: f"{task.id}-{__version__}-g{GRADER_VERSION}-"
            + _cases_digest({task.id: self.cases[task.id]}, secret)
            for task in self.tasks
        }
        self.chains = task_chains(self.tasks)
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

    def task_cache_file(self, sub: Submission, task_id: str, key: str | None = None) -> Path:
        """Where the record of one task of ``sub`` is cached (``key``: a task key of another
        grading, as ``run.json`` keeps it; default this grader's)."""
        return self.out / "cache" / "tasks" / f"{sub.sha256}-{key or self.task_keys[task_id]}.json"

    def cached_tasks(self, sub: Submission, keys: Mapping[str, str] | None = None) -> dict:
        """Task id -> the cached record of that task of ``sub`` (under ``keys``, default this
        grader's), for the tasks that have one."""
        found: dict[str, dict] = {}
        if not sub.sha256:
            return found
        for task in self.tasks:
            key = (keys or self.task_keys).get(task.id)
            if key is None:
                continue
            with contextlib.suppress(OSError, ValueError):
                path = self.task_cache_file(sub, task.id, key)
                record = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(record, dict) and record.get("id") == task.id:
                    found[task.id] = record
        return found

    def cache_tasks(
        self, sub: Submission, record: dict, only: Iterable[str] | None = None,
        overwrite: bool = False,
    ) -> None:
        """Write each task's record of ``sub`` (of the tasks in ``only``, default all: only
        records graded on this grader's cases may go under its keys) to the task cache, over
        an existing one with ``overwrite``."""
        if not sub.sha256 or record["status"] != "graded":
            return
        wanted = None if only is None else set(only)
        for task in record["tasks"]:
            if wanted is not None and task["id"] not in wanted:
                continue
            path = self.task_cache_file(sub, task["id"])
            if overwrite or not path.is_file():
                atomic_write(path, json.dumps(task, sort_keys=True) + "\n")

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

    def grade_submission(self, sub: Submission, reuse: Mapping[str, dict] | None = None) -> dict:
        """Grade one read submission (no files written): the record of its content. Tasks in
        ``reuse`` (task id -> a cached record of that task) are not run again."""
        reuse = reuse or {}
        if sub.problem is not None:
            return {
                "status": "unreadable",
                "problem": sub.problem,
                "notes": sub.notes,
                "tasks": [
                    unreadable_task(t, self.cases[t.id], sub.problem) for t in self.tasks
                ],
            }
        if all(task.id in reuse for task in self.tasks):
            records = [reuse[task.id] for task in self.tasks]
            return {"status": "graded", "problem": None, "notes": sub.notes, "tasks": records}
        done = dict(reuse)
        uid = self._uids.get()
        try:
            for chain in self.chains:
                stages = [[t for t in group if t.id not in reuse] for group in chain]
                if any(stages):
                    done.update(self._run_chain(sub, chain, stages, uid))
        finally:
            self._uids.put(uid)
        records = [done[task.id] for task in self.tasks]
        return {"status": "graded", "problem": None, "notes": sub.notes, "tasks": records}

    def _run_chain(self, sub: Submission, chain: list[list[Task]], stages: list[list[Task]],
                   uid: int | None) -> dict[str, dict]:
        """Run the ``stages`` (the tasks to run of each group of a chain of :func:`task_chains`)
        in as few children as possible (one, unless a case times out, crashes or calls
        forbidden code): task id -> its record."""
        tasks = [task for stage in stages for task in stage]
        workdir = Path(tempfile.mkdtemp(dir=self._tmp))
        try:
            if uid is not None:
                os.chown(workdir, uid, uid)
            runs = [
                TaskRun(
                    task.id,
                    [{"index": i, "args": student_args(case.args)}
                     for i, case in enumerate(self.cases[task.id])],
                    task_limits(task, self.limits, len(self.cases[task.id])),
                    task_module(task),
                    tuple(t.id for t in group),
                )
                for group, stage in zip(chain, stages, strict=True) for task in stage
            ]
            hide = self.hide + sorted({path for task in tasks for path in private_paths(task)})
            outcomes = run_tasks(worker.child_main, sub.code, runs, str(workdir), hide, uid)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return {
            task.id: task_record(task, self.cases[task.id], outcome,
                                 syntax_error=sub.broken.get(task.func_name))
            for task, outcome in zip(tasks, outcomes, strict=True)
        }


def task_groups(tasks: Sequence[Task]) -> list[list[Task]]:
    """The tasks that forbid the same things and have the same private files, in order: one
    tripwire serves a group (the grader's fork server prepares one per group). Chapter 1's ten
    tasks make four groups."""
    groups: dict[tuple, list[Task]] = {}
    for task in tasks:
        groups.setdefault((tuple(sorted(task.forbidden)), tuple(private_paths(task))),
                          []).append(task)
    return list(groups.values())


def task_chains(tasks: Sequence[Task]) -> list[list[list[Task]]]:
    """The groups of :func:`task_groups` that one child may run, one after the other: chains of
    groups, strictest first, each group forbidding no more than the one before it (the same
    operators, the same private files: :meth:`~coursepkg.checks.forbidden.Tripwire.covers`).

    A child runs a chain's groups in that order, its tripwire switched between them
    (:mod:`.worker`): whatever the submission computed before a switch, it computed under a
    tripwire that forbade at least as much as the one after it. Chapter 1's four groups make
    one chain; a group that forbids attention kernels and one that does not, two.
    """
    groups = task_groups(tasks)
    wires = [Tripwire(*group) for group in groups]
    private = [private_paths(group[0]) for group in groups]
    covers = [[i != j and a.covers(b) for j, b in enumerate(wires)] for i, a in enumerate(wires)]
    order = sorted(range(len(groups)), key=lambda i: -sum(covers[i]))  # stable: ties in order
    chains: list[list[int]] = []
    for i in order:
        chain = next((c for c in chains if private[c[-1]] == private[i] and covers[c[-1]][i]),
                     None)
        if chain is None:
            chains.append([i])
        else:
            chain.append(i)
    return [[groups[i] for i in chain] for chain in chains]


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
    secret_file: Path | None = None,
    tests_file: Path | None = None,
    shard: Shard | None = None,
    manual: Path | None = None,
    late: LateSetup | None = None,
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
        secret_file, tests_file: where the secret and the extra cases were read from, for
            ``run.json`` (``coursepkg regrade`` reads them again from there by default).
        shard: grade only the students of this shard (:mod:`.shards`; ids come from every
            notebook under ``paths``) and record it in ``out/shard.json``.
        late: a late policy (:mod:`.late`): each record gets its ``"late"`` entry, so the
            feedback, the results' score and ``grades.csv``'s late columns are after the penalty
            (the raw total stays in ``grades.csv``); the slip days spent are booked in its
            ledger, and ``run.json`` records the set-up (``"late"``) for ``coursepkg regrade``.
        manual: the instructor's marks of the written answers (``points.csv``, see
            :mod:`.manual`), merged into the totals, feedback and results; the written
            answers' sheets go to ``out/manual/`` whether or not it is given.

    Raises:
        ManualError: a mistake in ``manual``, before anything is graded.

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
    marking = prepare_marking(assignment, out, [f.student for f in found], secret, manual)
    grader = Grader(
        assignment, out, jobs=jobs, limits=limits, hide=hide, secret=secret, extra=extra
    )
    if notes is not None:
        notes.extend(grader.notes())
    log_path = out / "log.jsonl"
    if shard is not None:
        found = [item for item in found if shard.owns(item.student)]
        _write_shard(out, shard, grader, found, finished=False)
    # the late policy's decisions (lateness, slip days, penalty) need no grading: made first,
    # attached to each record as it is published, booked in the ledger at the end
    decisions = late.decisions(assignment, [f.student for f in found]) if late else {}
    log_start = log_path.stat().st_size if log_path.is_file() else 0
    hashes: dict[str, str] = {}

    def one(item: Found) -> dict:
        sub = read_submission(item.path, item.student)
        hashes[item.student] = sub.sha256
        cache_file = out / "cache" / f"{grader.cache_key(sub)}.json"
        record, cached = None, False
        if sub.sha256 and cache_file.is_file():
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(cache_file.read_text(encoding="utf-8"))
            cached = _valid_cached(record, grader.tasks)
        if not cached:
            record = grader.grade_submission(sub, grader.cached_tasks(sub))
            if sub.sha256:
                atomic_write(cache_file, json.dumps(record, sort_keys=True) + "\n")
        grader.cache_tasks(sub, record)
        record = published(item.student, record, marking, (late, decisions) if late else None)
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
    sort_log_lines(log_path, log_start)
    if marking is not None:
        marking.finish(out, rows, notes)
    if late is not None:  # the slip days spent, booked in the ledger
        late.book(assignment, decisions)
        if notes is not None:
            notes.extend(late.notes(decisions))
    info = run_info(grader, rows, paths, hashes, secret_file=secret_file, tests_file=tests_file)
    info.update(marking.run_info() if marking is not None else {"written": [], "manual": None})
    if late is not None:  # what coursepkg regrade needs to apply the policy again
        info["late"] = late.run_info(decisions)
    atomic_write(out / "run.json", json.dumps(info, indent=1, sort_keys=True) + "\n")
    if shard is not None:
        _write_shard(out, shard, grader, found, finished=True)
    return rows


def published(
    student: str,
    record: dict,
    marking: Marking | None = None,
    late: tuple[LateSetup, dict] | None = None,
) -> dict:
    """A graded record as the outputs show it: with the instructor's marks of the written
    answers (``marking``) and the late policy's entry (``late``: the set-up and its decisions by
    student). Used by grading and by ``coursepkg regrade``."""
    if marking is not None:
        record = marking.show(student, record)
    if late is not None:
        setup, decisions = late
        record = {**record, "late": setup.entry(student, decisions[student])}
    return record


def _write_shard(out: Path, shard: Shard, grader: Grader, found: list[Found], finished: bool):
    """``out/shard.json``: which shard of which grading ``out`` holds (:mod:`.shards`)."""
    write_manifest(
        out, shard, assignment=grader.assignment, package=__version__, grader=GRADER_VERSION,
        cases=grader.cases_digest, tests=grader.tests, students=[f.student for f in found],
        finished=finished,
    )


def run_info(
    grader: Grader,
    rows: Sequence[tuple[Found, dict]],
    paths: Sequence[Path],
    hashes: Mapping[str, str],
    *,
    secret_file: Path | None = None,
    tests_file: Path | None = None,
) -> dict:
    """What a grading ran, for ``run.json`` (never the secret itself: its digest); ``hashes``:
    student -> the sha256 of the notebook graded."""
    return {
        "assignment": grader.assignment,
        "version": __version__,
        "grader_version": GRADER_VERSION,
        "paths": [str(Path(p).resolve()) for p in paths],
        "submissions": [
            {"student": found.student, "path": str(found.path.resolve()),
             "sha256": hashes.get(found.student, "")}
            for found, _ in rows
        ],
        "jobs": grader.jobs,
        "limits": {
            name: getattr(grader.limits, name)
            for name in ("timeout", "memory_mb", "file_mb", "nproc", "tmp_mb", "task_timeout")
        },
        "secret": None if grader.secret is None else secret_digest(grader.secret),
        "secret_file": None if secret_file is None else str(Path(secret_file).resolve()),
        "tests_file": None if tests_file is None else str(Path(tests_file).resolve()),
        "extra_cases": grader.extra,
        "task_keys": dict(grader.task_keys),
    }
