"""``coursepkg export {canvas,moodle} GRADED_DIR``: the class's totals in a file the LMS imports.

The grades come from the graded folder's ``grades.csv``, read by column name: the final score
(``late_total`` when the folder was graded with a late policy, else ``total``; its ``max`` is
the points possible); a roster maps the grader's student ids to the LMS's identities.

Canvas, Gradebook > Import (Canvas Instructor Guide, "How do I import grades in the Gradebook?",
https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807,
and the file Canvas's own Gradebook export writes): a CSV whose header is ``Student, ID,
SIS User ID, SIS Login ID, Section``, then one column per assignment; Canvas finds the student by
``ID`` (its user id) or the SIS ids, the name being for people; an assignment column named
``NAME (12345)`` updates the assignment whose id is 12345, another name creates a new assignment;
a second row whose first cell is ``Points Possible`` gives the assignment's points.

Moodle, Grades > Import > CSV file (MoodleDocs, "Grade import", https://docs.moodle.org/en/Grade_import):
any CSV with a header; on the preview page "Map from" names the column that identifies the user
and "Map to" the user field it holds (``useremail``, ``useridnumber`` or ``username``), and the
grade column is mapped to a grade item (whose maximum is set in Moodle). The file here has the
identifier column, named as Moodle's own export names it (``Email address``, ``ID number``,
``Username``), and the grade column named NAME.

Both: a roster student without a submission gets an empty cell, never 0 (the LMS leaves the grade
alone; a missing notebook is the instructor's call), and is listed; a graded submission whose id
is not in the roster is listed and not exported. Text cells are neutralised for spreadsheets the
way ``grades.csv`` is (:func:`coursepkg.grading.reporting.spreadsheet_safe`).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from coursepkg.grading.graded import Graded
from coursepkg.grading.reporting import spreadsheet_safe

__all__ = [
    "CANVAS_COLUMNS",
    "MOODLE_FIELDS",
    "ROSTER_COLUMNS",
    "Export",
    "RosterError",
    "canvas_csv",
    "moodle_csv",
    "read_roster",
]

#: The roster's columns: ``student`` is required; the others as the LMS needs them.
ROSTER_COLUMNS = {
    "student": "the grader's student id (grades.csv's first column)",
    "name": "the student's name (Canvas's Student column; not matched on)",
    "canvas_id": "Canvas's user id (its ID column)",
    "sis_user_id": "Canvas's SIS User ID",
    "sis_login_id": "Canvas's SIS Login ID",
    "section": "Canvas's section name",
    "email": "Moodle's email address (--match email)",
    "idnumber": "Moodle's ID number (--match idnumber)",
    "username": "Moodle's username (--match username)",
}
#: Canvas's header, and the roster column each comes from.
CANVAS_COLUMNS = {
    "Student": "name",
    "ID": "canvas_id",
    "SIS User ID": "sis_user_id",
    "SIS Login ID": "sis_login_id",
    "Section": "section",
}
#: Moodle's user fields it can match on: roster column -> the header Moodle's export uses.
MOODLE_FIELDS = {"email": "Email address", "idnumber": "ID number", "username": "Username"}
_CANVAS_IDS = ("canvas_id", "sis_user_id", "sis_login_id")


class RosterError(ValueError):
    """A roster that cannot be used: the text says what is wrong and how to fix it."""


@dataclass
class Export:
    """An export: the file's text and who was (not) in it.

    Attributes:
        text: the CSV.
        exported: the roster's students with a grade in the file.
        no_submission: the roster's students without a submission (empty cells).
        not_in_roster: graded students the roster does not list (not in the file).
    """

    text: str
    exported: list[str]
    no_submission: list[str]
    not_in_roster: list[str]


def read_roster(path: Path) -> list[dict[str, str]]:
    """The roster's rows (column name -> stripped value), in the file's order.

    Raises:
        RosterError: no such file, no ``student`` column, an unknown column, an empty or repeated
            student id.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise RosterError(f"no roster file {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RosterError(
            f"cannot read the roster {path} ({error}); save it as UTF-8 CSV"
        ) from None
    reader = csv.DictReader(io.StringIO(text))
    header = [name.strip().lower() for name in reader.fieldnames or []]
    if "student" not in header:
        raise RosterError(
            f"the roster {path} has no 'student' column: its first line must name the columns, "
            "one of them 'student' (the grader's ids; see 'coursepkg export --help')"
        )
    unknown = [name for name in header if name not in ROSTER_COLUMNS]
    if unknown:
        raise RosterError(
            f"the roster {path} has unknown column{'s' * (len(unknown) > 1)} "
            f"{', '.join(map(repr, unknown))}; known: {', '.join(ROSTER_COLUMNS)}"
        )
    rows, seen = [], set()
    for number, raw in enumerate(reader, start=2):
        row = {name.strip().lower(): (value or "").strip()
               for name, value in raw.items() if name is not None}
        if not any(row.values()):
            continue
        student = row.get("student", "")
        if not student:
            raise RosterError(f"{path}, line {number}: the 'student' cell is empty")
        if student in seen:
            raise RosterError(f"{path}, line {number}: student {student!r} is listed twice")
        seen.add(student)
        rows.append(row)
    if not rows:
        raise RosterError(f"the roster {path} lists no students")
    return rows


def _unique(roster: list[dict[str, str]], column: str, path: str) -> None:
    values = [row[column] for row in roster if row.get(column)]
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise RosterError(
            f"the roster {path}: {column} {', '.join(map(repr, repeated))} belongs to more than "
            "one student"
        )


def _num(x: float) -> str:
    return f"{x:g}"


def _split(graded: Graded, roster: list[dict[str, str]]):
    """(grades by student id, roster ids without a submission, graded ids not in the roster)."""
    grades = {row.student: row.final for row in graded.students}  # after a late penalty
    listed = {row["student"] for row in roster}
    missing = [row["student"] for row in roster if row["student"] not in grades]
    extra = sorted(student for student in grades if student not in listed)
    return grades, missing, extra


def canvas_csv(
    graded: Graded,
    roster: list[dict[str, str]],
    assignment_name: str,
    assignment_id: str | None = None,
    *,
    roster_path: str = "roster",
) -> Export:
    """The Canvas gradebook import file of a graded folder.

    Args:
        graded: the graded folder (``read_graded(..., details=False)`` is enough).
        roster: :func:`read_roster`'s rows; each needs canvas_id, sis_user_id or sis_login_id.
        assignment_name: the assignment's name in Canvas.
        assignment_id: Canvas's id of the assignment: the column is named ``NAME (ID)`` so that
            Canvas updates that assignment (without it, Canvas matches the name or creates one).
        roster_path: the roster's file name, for error messages.
    """
    unnamed = [row["student"] for row in roster if not any(row.get(c) for c in _CANVAS_IDS)]
    if unnamed:
        raise RosterError(
            f"the roster {roster_path} gives no Canvas identity for {', '.join(unnamed)}: fill "
            "canvas_id, sis_user_id or sis_login_id (from Canvas's Gradebook export)"
        )
    for column in _CANVAS_IDS:
        _unique(roster, column, roster_path)
    grades, missing, extra = _split(graded, roster)
    column = f"{assignment_name} ({assignment_id})" if assignment_id else assignment_name
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*CANVAS_COLUMNS, spreadsheet_safe(column)])
    most = max((row.max for row in graded.students), default=0.0)
    writer.writerow(["Points Possible", "", "", "", "", _num(most)])
    for row in roster:
        grade = grades.get(row["student"])
        writer.writerow(
            [spreadsheet_safe(row.get(source, "")) for source in CANVAS_COLUMNS.values()]
            + ["" if grade is None else _num(grade)]
        )
    exported = [row["student"] for row in roster if row["student"] in grades]
    return Export(buf.getvalue(), exported, missing, extra)


def moodle_csv(
    graded: Graded,
    roster: list[dict[str, str]],
    assignment_name: str,
    match: str = "email",
    *,
    roster_path: str = "roster",
) -> Export:
    """The Moodle grade import file of a graded folder.

    Args:
        graded: the graded folder (``read_graded(..., details=False)`` is enough).
        roster: :func:`read_roster`'s rows; each needs the ``match`` column.
        assignment_name: the grade column's name (map it to the grade item in Moodle).
        match: the user field Moodle matches on: "email", "idnumber" or "username".
        roster_path: the roster's file name, for error messages.
    """
    if match not in MOODLE_FIELDS:
        raise RosterError(f"cannot match on {match!r}; choose one of {', '.join(MOODLE_FIELDS)}")
    unnamed = [row["student"] for row in roster if not row.get(match)]
    if unnamed:
        raise RosterError(
            f"the roster {roster_path} has no {match} for {', '.join(unnamed)}: fill its "
            f"'{match}' column (or choose another with --match)"
        )
    _unique(roster, match, roster_path)
    grades, missing, extra = _split(graded, roster)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([MOODLE_FIELDS[match], spreadsheet_safe(assignment_name)])
    for row in roster:
        grade = grades.get(row["student"])
        writer.writerow([spreadsheet_safe(row[match]), "" if grade is None else _num(grade)])
    exported = [row["student"] for row in roster if row["student"] in grades]
    return Export(buf.getvalue(), exported, missing, extra)
