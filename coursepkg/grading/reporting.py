"""Reporting: the gradebook files and the terminal summary, from graded records.

- :func:`grades_csv`: ``grades.csv``, one row per submission (total, max, points per task,
  status, written answers, late columns: :func:`grades_header`), safe to open in a spreadsheet;
- :func:`final_total`: the score a student and the LMS see (raw points, then a late penalty);
- :func:`gradescope_json`: a submission's Gradescope ``results.json`` (a case with partial
  credit is a "failed" test with its score: only full marks are "passed");
- :func:`feedback_md`: a submission's ``feedback/<student>.md``: what passed, what failed and
  why (hidden tests never show data);
- :func:`summary_table`: the short table the command prints.

Every function here is pure (records in, text out) and deterministic; :func:`atomic_write`
writes a file whole or not at all.
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import os
import tempfile
from pathlib import Path

from coursepkg.checks.core import Task
from coursepkg.grading.submission import Found


def html_page(title: str, style: str, parts: list[str]) -> str:
    """One self-contained HTML page (the class report, the similarity page): ``title``, an
    inline ``style`` sheet, and the body's ``parts`` in order (empty ones left out)."""
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title, quote=True)}</title>",
        f"<style>{style}</style>",
        "</head>",
        "<body>",
        *[part for part in parts if part],
        "</body>",
        "</html>",
        "",
    ])

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


def remove_unfinished_writes(out: Path) -> None:
    """Delete the temporary files of writes that a killed run left (``.NAME.xxxxxx``)."""
    folders = (out, out / "results", out / "feedback", out / "cache", out / "cache" / "tasks",
               out / "manual")
    for folder in folders:
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
    """(points, max points) of a submission's record, with its written answers' marks when they
    were merged (``record["written"]``, see :mod:`.manual`; a pending mark counts 0)."""
    written = record.get("written") or []
    return (
        round(sum(t["points"] for t in record["tasks"])
              + sum(w["points"] or 0 for w in written), 6),
        round(sum(t["max_points"] for t in record["tasks"])
              + sum(w["max_points"] for w in written), 6),
    )


def final_total(record: dict) -> tuple[float, float, float]:
    """(final points, raw points, max points) of a submission: the one place the score a student
    and the LMS see is computed. Raw: the tasks' points (and the written answers' marks when
    merged, :func:`total`); final: raw after the late adjustment when a late policy attached
    ``record["late"]`` (:meth:`.late.LateSetup.entry`: ``penalty`` percent off), else raw."""
    raw, most = total(record)
    late = record.get("late")
    if not late:
        return raw, raw, most
    return round(raw * (1 - late["penalty"] / 100), 6), raw, most


def late_line(record: dict) -> str:
    """How lateness changed a submission's score, in one line ("" without a late policy):
    "submitted 1 day 3 h late; 2 slip days used; penalty 10%: 27 -> 24.3"."""
    late = record.get("late")
    if not late:
        return ""
    from coursepkg.grading.late import describe

    final, raw, _ = final_total(record)
    text = describe(late)
    return f"{text}: {_num(raw)} -> {_num(final)}" if late["penalty"] else f"{text}: {_num(raw)}"


def overall_status(record: dict) -> str:
    """passed, partial, failed, not attempted or unreadable."""
    if record["status"] == "unreadable":
        return "unreadable"
    got, most = total(record)
    if got >= most:
        return "passed"
    statuses = {t["status"] for t in record["tasks"]}
    if statuses == {"not attempted"} and not got:  # (got: written answers' marks)
        return "not attempted"
    return "partial" if got > 0 else "failed"


def grades_header(tasks: list[Task], written: list[str], late: bool) -> list[str]:
    """``grades.csv``'s columns, in this order (../shared/API.md: they start
    ``student,total,max``): ``student``, ``total`` (raw: the tasks' points, plus the written
    answers' marks once merged), ``max``, ``file``, one column per task (``ID func_name``),
    ``status``, one column per written question once its marks are merged (``ID written``), and
    with a late policy :data:`.late.COLUMNS` (``late_total`` is the final score). Readers go by
    column name (:mod:`.graded`)."""
    from coursepkg.grading.late import COLUMNS as LATE

    return (
        ["student", "total", "max", "file"] + [f"{t.id} {t.func_name}" for t in tasks]
        + ["status"] + [f"{qid} written" for qid in written] + (list(LATE) if late else [])
    )


def grades_csv(rows: list[tuple[Found, dict]], tasks: list[Task]) -> str:
    """The gradebook: one row per (submission, record), in the order given; its columns are
    :func:`grades_header`'s."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    # a column per written question once the marks are merged ("ID written"; empty: pending)
    written = [w["id"] for w in (rows[0][1].get("written") or [])] if rows else []
    late = bool(rows) and any(record.get("late") for _, record in rows)
    writer.writerow(grades_header(tasks, written, late))
    for found, record in rows:
        final, got, most = final_total(record)
        entry = record.get("late")
        writer.writerow(
            [spreadsheet_safe(found.student), _num(got), _num(most),
             spreadsheet_safe(found.path.name)]
            + [_num(t["points"]) for t in record["tasks"]]
            + [overall_status(record)]
            + ["" if w["points"] is None else _num(w["points"])
               for w in record.get("written") or []]
            + (_late_cells(entry, final) if late else [])
        )
    return buf.getvalue()


def _late_cells(entry: dict | None, final: float) -> list[str]:
    """The values of :data:`.late.COLUMNS` for one submission."""
    if not entry:  # (every row of a late grading has an entry)
        return ["", "", "", "", "", _num(final)]
    return [entry["submitted_at"], entry["deadline"], f"{entry['late_minutes']:d}",
            f"{entry['slip_days']:d}", f"{entry['penalty']:g}", _num(final)]


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
                    # a test that earned nothing never says "passed" (Gradescope shows it green)
                    "status": "passed"
                    if case["status"] == "passed" and case["points"] > 0
                    else "failed",
                    "output": f"{case['status']}{_time(case)}. {case['message']}".strip(),
                    "visibility": "after_published" if case["hidden"] else "visible",
                }
            )
    for written in record.get("written") or []:
        pending = written["points"] is None
        tests.append(
            {
                "name": f"Written answer {written['id']}",
                "score": 0.0 if pending else written["points"],
                "max_score": written["max_points"],
                "status": "passed"
                if not pending and 0 < written["max_points"] <= written["points"]
                else "failed",
                "output": "pending. Not graded yet." if pending
                else f"graded by hand. {written['comment']}".strip(),
                "visibility": "visible",
            }
        )
    final, got, most = final_total(record)
    result = {"score": final, "max_score": most, "tests": tests}
    board = leaderboard(record)
    if board:
        result["leaderboard"] = board
    output = []
    if record["status"] == "unreadable":
        output.append(f"Your notebook could not be read: {record['problem']}.")
    if record.get("late"):  # the score is the final one; the raw one is said here
        output.append(f"Raw score {_num(got)} / {_num(most)}; {late_line(record)}.")
    if output:
        result["output"] = " ".join(output)
    return json.dumps(result, indent=2, sort_keys=True) + "\n"


def leaderboard(record: dict) -> list[dict]:
    """Gradescope's ``leaderboard`` entries of a submission: for each task with a leaderboard
    metric (a capstone), the mean of its cases' scores (rounded to 4 decimals); a task none of
    whose cases was scored (not attempted, crashed, over time) has no entry."""
    entries = []
    for task in record["tasks"]:
        board = task.get("leaderboard")
        scores = [c["score"] for c in task["cases"] if type(c.get("score")) in (int, float)]
        if isinstance(board, dict) and scores:
            value = round(sum(scores) / len(scores), 4)
            entries.append({"name": f"Task {task['id']} {board['name']}", "value": value,
                            "order": board["order"]})
    return entries


def _time(case: dict) -> str:
    """`` (3.2 s)``: the time a case of a task with a time limit took, else "".

    Not for a case the student did not attempt: its time is the child's start-up, a
    measurement that says nothing and would make two gradings of the same folder differ."""
    seconds = case.get("seconds")
    if type(seconds) not in (int, float) or case["status"] == "not attempted":
        return ""
    return f" ({seconds:.1f} s)"


def feedback_md(found: Found, record: dict) -> str:
    """A submission's feedback page (Markdown)."""
    final, _, most = final_total(record)
    lines = [
        f"# Feedback for {found.student} ({found.path.name})",
        "",
        f"Score: {_num(final)} / {_num(most)}",
        "",
    ]
    if record.get("late"):
        lines += [f"Late policy: {late_line(record)}.", ""]
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
            text += _time(case)
            if case["message"]:
                text += f": {case['message']}"
            lines.append(text)
    for written in record.get("written") or []:
        if written["points"] is None:
            lines += ["", f"## Written answer {written['id']}: pending / "
                          f"{_num(written['max_points'])} (not graded yet)"]
            continue
        lines += ["", f"## Written answer {written['id']}: {_num(written['points'])} / "
                      f"{_num(written['max_points'])} (graded by hand)"]
        if written["comment"]:
            lines += ["", written["comment"]]
    return "\n".join(lines) + "\n"


def summary_table(rows: list[tuple[Found, dict]], notes: list[str] | tuple[str, ...] = ()) -> str:
    """A short plain-text table for the terminal: one line per submission, the counts, then
    ``notes`` (which tests ran, the isolation in force), one per line."""
    width = max([len(found.student) for found, _ in rows] + [7])
    lines = [f"{'student':<{width}}  {'score':>11}  status"]
    counts: dict[str, int] = {}
    for found, record in rows:
        got, _, most = final_total(record)  # after a late penalty
        status = overall_status(record)
        counts[status] = counts.get(status, 0) + 1
        lines.append(f"{found.student:<{width}}  {_num(got):>5} / {_num(most):<3}  {status}")
    lines.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    lines.extend(notes)
    return "\n".join(lines)
