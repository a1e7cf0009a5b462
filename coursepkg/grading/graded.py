"""Reading a graded folder (the ``--out`` of ``coursepkg grade``) back, for the class report and
the LMS exports.

Only the grader's published outputs are read, never its cache or its internals:

- ``grades.csv``, read by column name (:func:`coursepkg.grading.reporting.grades_header`): the
  students, total, max, file, their points per task and overall status; once the written
  answers' marks are merged (``--manual``), a column ``ID written`` per question graded by hand
  (empty while pending); with a late policy, its columns (``late_total``: the final score);
- ``results/<student>.json`` (Gradescope's schema): one test per case, with its score, its max,
  "visible" or "after_published" (hidden), and an ``output`` that starts with the grader's status
  word for the case (``"partial. ..."``, ``"timeout (3.1 s). ..."``), then its message; and, when
  a task records a capstone metric, Gradescope's top-level ``leaderboard`` list
  (``[{"name": "perplexity", "value": 41.2, "order": "asc"}]``);
- ``feedback/<student>.md``: each task's status word, in its heading
  (``## Task 1.1 `count_ngrams`: 2 / 3 (partial)``).

Every problem with the folder is a :class:`GradedError` whose text names the problem and the fix
in one line.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CaseRow", "Graded", "GradedError", "StudentRow", "read_graded"]

_OUTPUT = re.compile(
    r"(?P<status>[a-z]+(?: [a-z]+)*)(?: \([0-9.]+ s\))?\.(?: (?P<message>.*))?", re.S
)
_HEADING = re.compile(r"^## Task (?P<id>\S+) `[^`]*`: \S+ / \S+ \((?P<status>[a-z ]+)\)$", re.M)
_FORMULA_PREFIX = ("'=", "'+", "'-", "'@", "'\t", "'\r")


class GradedError(ValueError):
    """A graded folder that cannot be read: the text says what is wrong and how to fix it."""


@dataclass(frozen=True)
class CaseRow:
    """One case of one task for one student, as ``results/<student>.json`` shows it."""

    task: str
    name: str
    hidden: bool
    status: str
    message: str
    points: float
    max_points: float


@dataclass
class StudentRow:
    """One row of ``grades.csv`` and what the student's results and feedback add to it.

    Attributes:
        student: the grader's student id.
        file: the notebook's file name.
        points: task id -> points.
        total: points in all.
        max: the most points possible.
        status: the overall status (passed, partial, failed, not attempted, unreadable).
        task_status: task id -> the grader's status word for the task (from the feedback).
        cases: every case of every task (empty when only ``grades.csv`` was read).
        leaderboard: the capstone metrics the results record (Gradescope's ``leaderboard``).
        written: question id -> the points of a written answer graded by hand (None: pending);
            empty when no marks were merged.
        final: the score the student and the LMS get: ``late_total`` with a late policy, else
            ``total`` (raw).
        late: the late columns (:data:`coursepkg.grading.late.COLUMNS` -> cell), empty without
            a late policy.
    """

    student: str
    file: str
    points: dict[str, float]
    total: float
    max: float
    status: str
    task_status: dict[str, str] = field(default_factory=dict)
    cases: list[CaseRow] = field(default_factory=list)
    leaderboard: list[dict] = field(default_factory=list)
    written: dict[str, float | None] = field(default_factory=dict)
    final: float | None = None
    late: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.final is None:
            self.final = self.total


@dataclass
class Graded:
    """A graded folder: its tasks (id, function name) in order, one row per student, and the
    ids of the written questions whose marks were merged (in ``grades.csv``'s order)."""

    folder: Path
    tasks: list[tuple[str, str]]
    students: list[StudentRow]
    written: list[str] = field(default_factory=list)

    def task_max(self, task_id: str) -> float:
        """The most points a task gives (from the cases' max points; 0 without results)."""
        for row in self.students:
            cases = [c for c in row.cases if c.task == task_id]
            if cases:
                return round(sum(c.max_points for c in cases), 6)
        return 0.0


def _unsafe(text: str) -> str:
    """Undo :func:`coursepkg.grading.reporting.spreadsheet_safe` on a cell read back."""
    return text[1:] if text.startswith(_FORMULA_PREFIX) else text


def _number(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise GradedError(
            f"{where}: {text!r} is not a number; grades.csv was edited or is damaged: grade "
            "again (coursepkg grade ... --out) to rewrite it"
        ) from None


def read_graded(folder: Path, *, details: bool = True) -> Graded:
    """Read a graded folder.

    Args:
        folder: the ``--out`` folder of ``coursepkg grade``.
        details: also read ``results/`` and ``feedback/`` (the cases, the tasks' statuses, the
            leaderboard); False reads ``grades.csv`` only.

    Raises:
        GradedError: the folder is missing, not a graded folder, or its files are damaged.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise GradedError(f"no such folder: {folder} (give the --out folder of 'coursepkg grade')")
    grades = folder / "grades.csv"
    if not grades.is_file():
        raise GradedError(
            f"{folder} is not a graded folder (no grades.csv): give the --out folder of "
            "'coursepkg grade'"
        )
    try:
        rows = list(csv.reader(grades.read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise GradedError(f"cannot read {grades} ({error}): grade again to rewrite it") from None
    header = rows[0] if rows else []
    from coursepkg.grading.late import COLUMNS as LATE  # a late policy's columns

    fixed = ("student", "total", "max", "file", "status")
    if any(name not in header for name in fixed) or len(set(header)) != len(header):
        raise GradedError(
            f"{grades} does not look like the grader's (its header must name student, total, "
            "max, file and status): give the --out folder of 'coursepkg grade'"
        )
    col = {name: i for i, name in enumerate(header)}
    late = all(name in col for name in LATE)
    others = [name for name in header if name not in fixed and name not in LATE]
    written_cols = [name for name in others if name.endswith(" written")]
    written = [c[: -len(" written")] for c in written_cols]
    task_cols = [name for name in others if not name.endswith(" written")]
    tasks = [(*column.split(" ", 1), "")[:2] for column in task_cols]
    students = []
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        where = f"{grades}, line {number}"
        if len(row) != len(header):
            raise GradedError(
                f"{where} has {len(row)} cells, not {len(header)}: grade again to rewrite it"
            )
        total = _number(row[col["total"]], where)
        students.append(
            StudentRow(
                student=_unsafe(row[col["student"]]),
                file=_unsafe(row[col["file"]]),
                points={t[0]: _number(row[col[c]], where)
                        for t, c in zip(tasks, task_cols, strict=True)},
                total=total,
                max=_number(row[col["max"]], where),
                status=row[col["status"]],
                written={
                    qid: None if row[col[c]] == "" else _number(row[col[c]], where)
                    for qid, c in zip(written, written_cols, strict=True)
                },
                final=_number(row[col["late_total"]], where) if late else total,
                late={name: row[col[name]] for name in LATE} if late else {},
            )
        )
    graded = Graded(folder, tasks, students, written)
    if details:
        for student in students:
            _read_details(graded, student)
    return graded


def _read_details(graded: Graded, row: StudentRow) -> None:
    """Fill a student's cases, leaderboard and tasks' statuses from results/ and feedback/."""
    path = graded.folder / "results" / f"{row.student}.json"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        tests = result["tests"]
    except (OSError, ValueError, KeyError, TypeError):
        raise GradedError(
            f"{path} is missing or damaged: grade again (coursepkg grade ... --out "
            f"{graded.folder}) to rewrite it"
        ) from None
    prefixes = [(task_id, f"Task {task_id} {func}: ") for task_id, func in graded.tasks]
    for test in tests:
        name = str(test.get("name", ""))
        task_id, prefix = next(((t, p) for t, p in prefixes if name.startswith(p)), (None, ""))
        if task_id is None:
            continue
        match = _OUTPUT.fullmatch(str(test.get("output", "")))
        if match:
            status, message = match["status"], match["message"] or ""
        else:
            status, message = str(test.get("status", "failed")), str(test.get("output", ""))
        row.cases.append(
            CaseRow(
                task=task_id,
                name=name[len(prefix):],
                hidden=test.get("visibility") == "after_published",
                status=status,
                message=message.strip(),
                points=float(test.get("score", 0.0)),
                max_points=float(test.get("max_score", 0.0)),
            )
        )
    board = result.get("leaderboard")
    if isinstance(board, list):
        row.leaderboard = [
            entry for entry in board
            if isinstance(entry, dict) and isinstance(entry.get("name"), str)
            and type(entry.get("value")) in (int, float)
        ]
    feedback = graded.folder / "feedback" / f"{row.student}.md"
    text = feedback.read_text(encoding="utf-8") if feedback.is_file() else ""
    row.task_status = {m["id"]: m["status"] for m in _HEADING.finditer(text)}
    for task_id, _ in graded.tasks:  # no feedback: the status the points say
        if task_id not in row.task_status:
            cases = [c for c in row.cases if c.task == task_id]
            most = sum(c.max_points for c in cases)
            got = row.points.get(task_id, 0.0)
            row.task_status[task_id] = (
                "passed" if cases and got >= most else "partial" if got > 0 else "failed"
            )
