"""Grading a batch of submissions: isolation per task, trusted judging, gradebook files.

Output folder layout (all files written atomically: a temporary file, then a rename):

- ``grades.csv``: one row per submission, points per task, total, max, status;
- ``results/<student>.json``: the Gradescope ``results.json`` schema;
- ``feedback/<student>.md``: what passed, what failed and why (hidden tests never show data);
- ``log.jsonl``: one line per graded submission (file, hash, status, isolation in force);
- ``cache/<sha256>.json``: the graded record of a notebook's content, so a rerun after an
  interruption skips what was already graded.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import os
import queue
import shutil
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from coursepkg import __version__
from coursepkg.checks.core import CaseResult, Task, exception_result, grade_output, tasks_for
from coursepkg.grading.sandbox import Limits, RawOutcome, can_isolate, run_in_child
from coursepkg.grading.submission import Submission, read_submission, student_id

# One unprivileged user per parallel slot, unique to this grader process (no /etc/passwd entry is
# needed): the clean-up kills every process of a slot's user, so two graders running at the same
# time on one machine must never share a user.
UID_BASE = 1 << 28
MAX_JOBS = 64


_GRADERS = itertools.count()


def slot_uids(jobs: int) -> list[int]:
    """User ids for the ``jobs`` parallel slots of a new grader, unused by any other live grader
    (of this process, by a counter; of other processes, by the process id)."""
    key = (os.getpid() % (1 << 16)) * 64 + next(_GRADERS) % 64
    return [UID_BASE + key * MAX_JOBS + slot for slot in range(jobs)]


@dataclass(frozen=True)
class Found:
    """A notebook to grade and the id it is graded under."""

    path: Path
    student: str


def find_submissions(paths: Iterable[Path], assignment: str) -> list[Found]:
    """Every ``.ipynb`` given directly or found (recursively) in a given folder, with unique ids.

    Checkpoint copies (``.ipynb_checkpoints``) are skipped. Two files that map to the same id
    get ``-2``, ``-3``... in path order, so ids are stable for the same folder.
    """
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(
                p for p in sorted(path.rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts
            )
        else:
            files.append(path)
    found, seen = [], {}
    for path in sorted(dict.fromkeys(files), key=lambda p: str(p)):
        base = student_id(path, assignment)
        seen[base] = seen.get(base, 0) + 1
        found.append(Found(path, base if seen[base] == 1 else f"{base}-{seen[base]}"))
    return found


_LIMIT_MESSAGES = {
    "timeout": "Time limit reached: look for an infinite loop or a very slow step.",
    "memory": "Memory limit reached: the function allocates far more than the task needs.",
}
# A task's status is the first of these that one of its cases has (else passed / failed / ...).
_TASK_STATUS_ORDER = ("forbidden", "missing", "unreadable", "timeout", "memory", "crashed", "error")


def _zero(case, status: str, text: str) -> CaseResult:
    """A case that earned nothing, with its status and message."""
    return CaseResult(case.name, 0.0, float(case.points), status, text, case.hidden)


def _case_from_raw(task: Task, index: int, outcome: RawOutcome, answered: dict) -> CaseResult:
    case = task.cases[index]
    message = answered.get(index)
    if message is None:  # the child never answered this case: how it ended says why
        if outcome.ended in _LIMIT_MESSAGES:
            return _zero(case, outcome.ended, _LIMIT_MESSAGES[outcome.ended])
        why = outcome.detail or "it ended before returning a result: os._exit()?"
        return _zero(case, "crashed", f"The process running your code died ({why}).")
    if "forbidden" in message:
        text = f"Calls {message['forbidden']}, which this task does not allow."
        return _zero(case, "forbidden", text)
    if message.get("exc") == "MemoryError":
        return _zero(case, "memory", _LIMIT_MESSAGES["memory"])
    if "exc" in message:
        return exception_result(task, case, str(message["exc"]), str(message.get("msg", "")))
    return grade_output(task, case, message.get("plain"))


def _task_status(statuses: set[str]) -> str:
    for status in ("passed", "not attempted"):
        if statuses == {status}:
            return status
    return next((s for s in _TASK_STATUS_ORDER if s in statuses), "failed")


def task_record(task: Task, outcome: RawOutcome) -> dict:
    """Turn a child's raw outcome into the task's graded record (judging happens here)."""
    if outcome.load_error is not None:
        exc = outcome.load_error["exc"]
        status = "memory" if exc == "MemoryError" else "error"
        text = f"Your notebook's definitions failed to load: raised {exc}."
        cases = [_zero(c, status, text) for c in task.cases]
    elif outcome.missing:
        text = f"{task.func_name} is not defined in the notebook (deleted or renamed?)."
        cases = [_zero(c, "missing", text) for c in task.cases]
    else:
        indices = range(len(task.cases))
        answered = {m["case"]: m for m in outcome.messages if m.get("case") in indices}
        cases = [_case_from_raw(task, i, outcome, answered) for i in indices]
    status = _task_status({c.status for c in cases})
    if status == "forbidden":  # a forbidden call anywhere costs the whole task
        cases = [_zero(c, c.status, c.message) for c in cases]
    return _task_dict(task, cases, status, outcome.isolation)


def _task_dict(task: Task, cases: list[CaseResult], status: str, isolation: dict) -> dict:
    return {
        "id": task.id,
        "func_name": task.func_name,
        "title": task.title,
        "points": round(sum(c.points for c in cases), 6),
        "max_points": task.max_points(),
        "status": status,
        "cases": [asdict(c) for c in cases],
        "isolation": isolation,
    }


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
    ) -> None:
        self.assignment = assignment
        self.tasks = tasks_for(assignment)
        if not self.tasks:
            raise ValueError(f"unknown assignment {assignment!r}")
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
        return f"{sub.sha256}-{self.assignment}-{__version__}"

    def grade_submission(self, sub: Submission) -> dict:
        """Grade one read submission (no files written): the record of its content."""
        if sub.problem is not None:
            return {
                "status": "unreadable",
                "problem": sub.problem,
                "notes": sub.notes,
                "tasks": [_unreadable_task(t, sub.problem) for t in self.tasks],
            }
        uid = self._uids.get()
        try:
            records = [self._run_task(sub, task, uid) for task in self.tasks]
        finally:
            self._uids.put(uid)
        return {"status": "graded", "problem": None, "notes": sub.notes, "tasks": records}

    def _run_task(self, sub: Submission, task: Task, uid: int | None) -> dict:
        workdir = Path(tempfile.mkdtemp(dir=self._tmp))
        try:
            if uid is not None:
                os.chown(workdir, uid, uid)
            request = {"code": sub.code, "task": task.id, "cases": list(range(len(task.cases)))}
            outcome = run_in_child(request, self.limits, str(workdir), self.hide, uid)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return task_record(task, outcome)


def _unreadable_task(task: Task, problem: str) -> dict:
    cases = [_zero(c, "unreadable", problem) for c in task.cases]
    return _task_dict(task, cases, "unreadable", {})


# ----------------------------------------------------------------------------- output files


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` so that ``path`` is either the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _remove_unfinished_writes(out: Path) -> None:
    """Delete the temporary files of writes that a killed run left (``.NAME.xxxxxx``)."""
    for folder in (out, out / "results", out / "feedback", out / "cache"):
        if folder.is_dir():
            for path in folder.glob(".*"):
                if path.is_file():
                    path.unlink(missing_ok=True)


def spreadsheet_safe(value: object) -> object:
    """Neutralise text a spreadsheet would run as a formula (a leading = + - @ tab or CR)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def total(record: dict) -> tuple[float, float]:
    return (
        round(sum(t["points"] for t in record["tasks"]), 6),
        round(sum(t["max_points"] for t in record["tasks"]), 6),
    )


def overall_status(record: dict) -> str:
    if record["status"] == "unreadable":
        return "unreadable"
    got, most = total(record)
    if got >= most:
        return "passed"
    statuses = {t["status"] for t in record["tasks"]}
    if statuses == {"not attempted"}:
        return "not attempted"
    return "partial" if got > 0 else "failed"


def grades_csv(rows: list[tuple[Found, dict]], tasks: list[Task]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        ["student", "file"] + [f"{t.id} {t.func_name}" for t in tasks] + ["total", "max", "status"]
    )
    for found, record in rows:
        got, most = total(record)
        writer.writerow(
            [spreadsheet_safe(found.student), spreadsheet_safe(found.path.name)]
            + [_num(t["points"]) for t in record["tasks"]]
            + [_num(got), _num(most), overall_status(record)]
        )
    return buf.getvalue()


def _num(x: float) -> str:
    return f"{x:g}"


def gradescope_json(record: dict) -> str:
    """The Gradescope results.json of one submission (hidden tests visible after publishing)."""
    tests = []
    for task in record["tasks"]:
        for number, case in enumerate(task["cases"], start=1):
            name = case["name"] if not case["hidden"] else f"hidden test {number}"
            tests.append(
                {
                    "name": f"Task {task['id']} {task['func_name']}: {name}",
                    "score": case["points"],
                    "max_score": case["max_points"],
                    "status": "passed" if case["status"] == "passed" else "failed",
                    "output": f"{case['status']}. {case['message']}".strip(),
                    "visibility": "after_published" if case["hidden"] else "visible",
                }
            )
    got, most = total(record)
    result = {"score": got, "max_score": most, "tests": tests}
    if record["status"] == "unreadable":
        result["output"] = f"Your notebook could not be read: {record['problem']}."
    return json.dumps(result, indent=2, sort_keys=True) + "\n"


def feedback_md(found: Found, record: dict) -> str:
    got, most = total(record)
    lines = [
        f"# Feedback for {found.student} ({found.path.name})",
        "",
        f"Score: {_num(got)} / {_num(most)}",
        "",
    ]
    if record["status"] == "unreadable":
        lines += [f"Your notebook could not be read: {record['problem']}.", ""]
    for note in record.get("notes") or []:
        lines.append(f"Note: {note}.")
    for task in record["tasks"]:
        lines += [
            "",
            f"## Task {task['id']} `{task['func_name']}`: {_num(task['points'])} / "
            f"{_num(task['max_points'])} ({task['status']})",
            "",
        ]
        for number, case in enumerate(task["cases"], start=1):
            name = f"hidden test {number}" if case["hidden"] else case["name"]
            mark = "PASS" if case["status"] == "passed" else case["status"].upper()
            text = f"- {mark} [{_num(case['points'])}/{_num(case['max_points'])}] {name}"
            if case["message"]:
                text += f": {case['message']}"
            lines.append(text)
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the batch


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
) -> list[tuple[Found, dict]]:
    """Grade every notebook under ``paths`` and write the gradebook files into ``out``.

    Resumable: a notebook whose content hash already has a record in ``out/cache`` is not run
    again. Deterministic: the same folder gives byte-identical ``grades.csv`` and ``results/``.

    Returns:
        (submission, record) pairs, sorted by student id.
    """
    from tqdm.auto import tqdm

    found = find_submissions(paths, assignment)
    hide = {p.path.resolve().parent for p in found}
    solutions = _course_solutions_dir()
    if solutions is not None:
        hide.add(solutions)
    out.mkdir(parents=True, exist_ok=True)
    grader = Grader(assignment, out, jobs=jobs, limits=limits, hide=hide)
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
        }
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps(line, sort_keys=True) + "\n")
        return record

    _remove_unfinished_writes(out)
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


def summary_table(rows: list[tuple[Found, dict]]) -> str:
    """A short plain-text table for the terminal: one line per submission, then the counts."""
    width = max([len(found.student) for found, _ in rows] + [7])
    lines = [f"{'student':<{width}}  {'score':>11}  status"]
    counts: dict[str, int] = {}
    for found, record in rows:
        got, most = total(record)
        status = overall_status(record)
        counts[status] = counts.get(status, 0) + 1
        lines.append(f"{found.student:<{width}}  {_num(got):>5} / {_num(most):<3}  {status}")
    lines.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    return "\n".join(lines)
