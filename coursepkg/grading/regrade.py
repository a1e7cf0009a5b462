"""Grading one task again for a whole graded folder (``coursepkg regrade DIR --task ID``).

After the instructor changes a task's checks or cases (the chapter's checks module, the extra
tests file of ``--tests``), :func:`regrade` runs that task again for every submission the folder
was graded from, always (a change of a judge or a hint leaves the cases, and so the cache keys,
as they were), and only that task: every other task's record is read from the task cache
(``cache/tasks/``, keyed by each task's own cases, see :class:`.grader.Grader`) under the keys
``run.json`` keeps. Then it rewrites, each file atomically (:func:`.reporting.atomic_write`),
``results/``, ``feedback/``, then ``grades.csv``, then ``changes.csv`` (the students whose points
on the task moved: student, task, before, after, why), and last ``run.json`` with the task's new
key. The points before are saved first (:data:`PENDING`, removed at the end): an interrupted
regrade leaves every file either old or new, and running it again finishes it and reports the
changes against the gradebook as it was before the first attempt.

What the folder was graded with comes from ``run.json``: the submissions (each must still have
the hash it was graded with), the jobs and limits, the secret's file (its digest must match:
another secret would change the hidden cases of the task), the extra tests file, the written
answers' marks, and the late set-up (``"late"``, :meth:`.late.LateSetup.run_info`: the policy's
text, the deadline, the extensions and the submission times), applied again so that
``grades.csv`` keeps its late columns and the feedback and results their final scores; the
slip days are decided as the grading decided them, so the ledger's rows stay as they are. Each
problem is a :class:`RegradeError`, one line naming it and the fix.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from coursepkg.checks.core import load_extra_cases, load_secret, secret_digest, tasks_for
from coursepkg.grading.grader import Grader, _course_solutions_dir, published
from coursepkg.grading.late import LateError, LateSetup
from coursepkg.grading.manual import ManualError, Marking, prepare
from coursepkg.grading.reporting import (
    atomic_write,
    feedback_md,
    grades_csv,
    gradescope_json,
    overall_status,
    remove_unfinished_writes,
    spreadsheet_safe,
    total,
)
from coursepkg.grading.sandbox import Limits
from coursepkg.grading.submission import Found, Submission, read_submission

__all__ = ["Change", "RegradeError", "Regraded", "load_run", "regrade"]

CHANGES_HEADER = ["student", "task", "before", "after", "why"]
#: The "before" of a regrade under way (removed when it is done): a rerun after an interruption
#: reports the changes against the gradebook as it was before the first attempt.
PENDING = "regrade-pending.json"


class RegradeError(ValueError):
    """A folder that cannot be regraded: the text names the problem and the fix in one line."""


@dataclass(frozen=True)
class Change:
    """A student whose points on the regraded task moved."""

    student: str
    task: str
    before: float
    after: float
    why: str


@dataclass
class Regraded:
    """What a regrade did.

    Attributes:
        task: the task graded again.
        rows: (submission, record) pairs, sorted by student id, as ``grades.csv`` lists them.
        changes: the students whose points on the task moved.
        ran: the students for whom the task ran again (all but the unreadable notebooks).
        notes: what the instructor should know (other tasks whose cases changed too).
    """

    task: str
    rows: list[tuple[Found, dict]]
    changes: list[Change]
    ran: list[str]
    notes: list[str] = field(default_factory=list)


def load_run(folder: Path) -> dict:
    """The ``run.json`` of a graded folder.

    Raises:
        RegradeError: no folder, not a graded folder, or one graded by an older grader.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise RegradeError(f"no such folder: {folder} (give the --out folder of 'coursepkg grade')")
    if not (folder / "grades.csv").is_file():
        raise RegradeError(
            f"{folder} is not a graded folder (no grades.csv): give the --out folder of "
            "'coursepkg grade'"
        )
    try:
        run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        run = None
    keys = ("assignment", "submissions", "task_keys", "limits", "jobs")
    if not isinstance(run, dict) or any(key not in run for key in keys):
        raise RegradeError(
            f"{folder} has no readable run.json (graded by an older coursepkg, or damaged): "
            "grade it again with 'coursepkg grade ... --out' (cached results are reused)"
        )
    return run


def _secret(run: dict, folder: Path, secret_file: Path | None) -> tuple[bytes | None, Path | None]:
    """The secret to regrade with: the one the folder was graded with, or a clear refusal."""
    digest = run.get("secret")
    if digest is None:
        if secret_file is not None:
            raise RegradeError(
                f"{folder} was graded without a secret (public tests only): regrade without "
                "--secret, or grade again with it"
            )
        return None, None
    path = secret_file or (Path(run["secret_file"]) if run.get("secret_file") else None)
    if path is None or not Path(path).is_file():
        where = f" ({path} is gone)" if path is not None else ""
        raise RegradeError(
            f"{folder} was graded with a secret (digest {digest[:8]}){where}: pass it with "
            "--secret FILE"
        )
    try:
        secret = load_secret(path)
    except ValueError as error:
        raise RegradeError(str(error)) from None
    if secret_digest(secret) != digest:
        raise RegradeError(
            f"the secret in {path} (digest {secret_digest(secret)[:8]}) is not the one {folder} "
            f"was graded with (digest {digest[:8]}): pass that one with --secret FILE"
        )
    return secret, Path(path)


def _extra(run: dict, tests_file: Path | None) -> tuple[dict, Path | None]:
    """The extra cases to regrade with: ``--tests``, else the file the folder was graded with."""
    path = tests_file or (Path(run["tests_file"]) if run.get("tests_file") else None)
    if path is None:
        return {}, None
    if not Path(path).is_file():
        raise RegradeError(
            f"the extra tests file {path} the folder was graded with is gone: pass --tests PATH"
        )
    try:
        return load_extra_cases(path), Path(path)
    except ValueError as error:
        raise RegradeError(str(error)) from None


def _submissions(run: dict, folder: Path) -> list[tuple[Found, Submission]]:
    """The submissions the folder was graded from, read again; each must be unchanged."""
    read, moved = [], []
    for entry in run["submissions"]:
        found = Found(Path(entry["path"]), entry["student"])
        if not found.path.is_file():
            moved.append(f"{found.student} ({found.path} is gone)")
            continue
        sub = read_submission(found.path, found.student)
        if sub.sha256 != entry.get("sha256"):
            moved.append(f"{found.student} ({found.path} changed)")
        read.append((found, sub))
    if moved:
        raise RegradeError(
            f"submissions moved or changed since {folder} was graded: {', '.join(moved)}; "
            "regrade grades the same notebooks: grade again ('coursepkg grade ... --out') instead"
        )
    return read


def _why(task: dict) -> str:
    """The new status of a task, and its first failing case's message."""
    for case in task["cases"]:
        if case["status"] != "passed" and case["message"]:
            return f"{task['status']}: {case['message']}"
    return task["status"]


def changes_csv(changes: Sequence[Change]) -> str:
    """``changes.csv``: one row per student whose points moved (spreadsheet-safe)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CHANGES_HEADER)
    for change in changes:
        writer.writerow([
            spreadsheet_safe(change.student), change.task, f"{change.before:g}",
            f"{change.after:g}", spreadsheet_safe(change.why),
        ])
    return buf.getvalue()


def regrade(
    folder: Path,
    task_id: str,
    *,
    secret_file: Path | None = None,
    tests_file: Path | None = None,
    jobs: int | None = None,
    progress: bool = False,
) -> Regraded:
    """Grade task ``task_id`` again for every submission of a graded folder; see the module.

    Args:
        folder: the ``--out`` folder of ``coursepkg grade``.
        task_id: the task to grade again (``"1.2"``).
        secret_file: the instructor's secret (default: the file the folder was graded with).
        tests_file: the extra cases (default: the file the folder was graded with, if any).
        jobs: submissions graded at once (default: as graded).
        progress: show a progress bar.

    Raises:
        RegradeError: the folder, the task, the secret, the tests or the submissions do not fit.
    """
    folder = Path(folder)
    run = load_run(folder)
    ids = [task.id for task in tasks_for(run["assignment"])]
    if task_id not in ids:
        raise RegradeError(
            f"no task {task_id!r} in {run['assignment']}; its tasks: {', '.join(ids) or 'none'}"
        )
    secret, secret_path = _secret(run, folder, secret_file)
    extra, tests_path = _extra(run, tests_file)
    limits = Limits(**run["limits"])
    read = _submissions(run, folder)
    hide = {found.path.resolve().parent for found, _ in read}
    hide |= {p.resolve() for p in (secret_path, tests_path) if p is not None}
    solutions = _course_solutions_dir()
    if solutions is not None:
        hide.add(solutions)
    manual = Path(run["manual"]) if run.get("manual") else None
    if manual is not None and not manual.is_file():
        raise RegradeError(
            f"the written answers' marks {manual} that {folder} was graded with are gone: put "
            "them back, or grade again with --manual"
        )
    try:
        marking = prepare(run["assignment"], folder, [f.student for f, _ in read], secret,
                          manual, create=False)
    except ManualError as error:
        raise RegradeError(str(error)) from None
    late = None
    if run.get("late"):  # the late policy it was graded with, applied again (run.json)
        try:
            late = LateSetup.from_run_info(run["late"])
            decisions = late.decisions(run["assignment"], [f.student for f, _ in read])
        except LateError as error:
            raise RegradeError(str(error)) from None
        late = (late, decisions)
    grader = Grader(
        run["assignment"], folder, jobs=jobs or run["jobs"], limits=limits, hide=hide,
        secret=secret, extra=extra,
    )
    try:
        return _regrade(grader, run, task_id, read, tests_path, marking, progress, late)
    finally:
        grader.close()


def _regrade(
    grader: Grader,
    run: dict,
    task_id: str,
    read: list[tuple[Found, Submission]],
    tests_path: Path | None,
    marking: Marking | None,
    progress: bool,
    late: tuple[LateSetup, dict] | None = None,
) -> Regraded:
    """:func:`regrade` once its inputs are checked."""
    from tqdm.auto import tqdm

    folder = grader.out
    ids = [task.id for task in grader.tasks]
    old_keys = run["task_keys"]
    if sorted(old_keys) != sorted(ids):
        raise RegradeError(
            f"the tasks of {grader.assignment} changed since {folder} was graded: grade again "
            "('coursepkg grade ... --out')"
        )
    # An interrupted regrade of this task is finished with the "before" it saved; one of
    # another task must be finished first (some of its records may be new already).
    pending_file = folder / PENDING
    pending = None
    with contextlib.suppress(OSError, ValueError):
        pending = json.loads(pending_file.read_text(encoding="utf-8"))
    if isinstance(pending, dict) and pending.get("task") not in (None, task_id):
        raise RegradeError(
            f"a regrade of task {pending['task']} in {folder} was interrupted: finish it first "
            f"(coursepkg regrade {folder} --task {pending['task']})"
        )
    # Every other task's record must be in the cache before anything runs.
    old: dict[str, dict] = {}
    for found, sub in read:
        if sub.problem is not None:
            continue
        old[found.student] = grader.cached_tasks(sub, old_keys)
        missing = [t for t in ids if t not in old[found.student]]
        if missing:
            raise RegradeError(
                f"{folder}/cache/tasks has no record of task {', '.join(missing)} for "
                f"{found.student}: grade again ('coursepkg grade ... --out') instead"
            )
    if isinstance(pending, dict) and isinstance(pending.get("before"), dict):
        before = {s: float(p) for s, p in pending["before"].items()}
    else:
        before = {s: tasks[task_id]["points"] for s, tasks in old.items()}
        atomic_write(pending_file, json.dumps({"task": task_id, "before": before}) + "\n")
    remove_unfinished_writes(folder)
    ran: list[str] = []
    # the record of the whole notebook under the current cases may be cached only when every
    # other task's record was graded on the current cases too
    consistent = all(old_keys[t] == grader.task_keys[t] for t in ids if t != task_id)

    def one(found: Found, sub: Submission) -> dict:
        if sub.problem is not None:
            return published(found.student, grader.grade_submission(sub), marking, late)
        reuse = {t: r for t, r in old[found.student].items() if t != task_id}
        record = grader.grade_submission(sub, reuse)  # runs the task: its checks may be new
        ran.append(found.student)
        grader.cache_tasks(sub, record, only=[task_id], overwrite=True)
        whole = folder / "cache" / f"{grader.cache_key(sub)}.json"
        if consistent:
            atomic_write(whole, json.dumps(record, sort_keys=True) + "\n")
        else:
            whole.unlink(missing_ok=True)
        return published(found.student, record, marking, late)

    pool = ThreadPoolExecutor(max_workers=grader.jobs)
    try:
        futures = [pool.submit(one, found, sub) for found, sub in read]
        bar = tqdm(total=len(futures), desc=f"regrading {task_id}", unit="notebook",
                   disable=not progress)
        with bar:
            records = []
            for future in futures:
                records.append(future.result())
                bar.update()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)

    rows = sorted(
        ((found, record) for (found, _), record in zip(read, records, strict=True)),
        key=lambda row: row[0].student,
    )
    changes = []
    subs = {found.student: sub for found, sub in read}
    for found, record in rows:
        new = next(t for t in record["tasks"] if t["id"] == task_id)
        was = before.get(found.student, 0.0)
        if round(was, 6) != round(new["points"], 6):
            changes.append(Change(found.student, task_id, was, new["points"], _why(new)))
    for found, record in rows:
        atomic_write(folder / "results" / f"{found.student}.json", gradescope_json(record))
        atomic_write(folder / "feedback" / f"{found.student}.md", feedback_md(found, record))
    atomic_write(folder / "grades.csv", grades_csv(rows, grader.tasks))
    atomic_write(folder / "changes.csv", changes_csv(changes))
    if late is not None:  # the same decisions as the grading's: the ledger's rows stay
        late[0].book(grader.assignment, late[1])
    with open(folder / "log.jsonl", "a", encoding="utf-8") as log:
        for found, record in rows:
            got, most = total(record)
            line = {
                "student": found.student,
                "file": str(found.path),
                "sha256": subs[found.student].sha256,
                "regrade": task_id,
                "ran": [task_id] if found.student in ran else [],
                "status": overall_status(record),
                "score": got,
                "max": most,
                "tests": grader.tests,
            }
            log.write(json.dumps(line, sort_keys=True) + "\n")
    stale = [t for t in ids if t != task_id and old_keys[t] != grader.task_keys[t]]
    notes = [f"tests: {grader.tests}"]
    if stale:
        notes.append(
            f"task{'s' * (len(stale) > 1)} {', '.join(stale)} would be graded on other cases "
            "now (the checks, --tests or coursepkg's version changed): their results are kept; "
            "regrade them with --task to apply the new cases"
        )
    run = dict(run)
    run["task_keys"] = {**old_keys, task_id: grader.task_keys[task_id]}
    if tests_path is not None:
        run["tests_file"] = str(tests_path.resolve())
        run["extra_cases"] = grader.extra
    run["regrades"] = [*run.get("regrades", []), {"task": task_id, "changes": len(changes)}]
    atomic_write(folder / "run.json", json.dumps(run, indent=1, sort_keys=True) + "\n")
    pending_file.unlink(missing_ok=True)
    if (folder / "report.html").is_file():  # the class report of the old grades: rewrite it
        from coursepkg.grading.report import write_report

        write_report(folder, None)
    return Regraded(task_id, rows, changes, sorted(ran), notes)
