"""Written answers graded by hand: the grading sheets, the points file, and merging the points.

A question graded by hand is a markdown cell of the solution notebook tagged ``written``, with
``metadata["written"] = {"id": "1.W1", "points": 2}``: its text is the model answer, and the
markdown cell before it is the question (:mod:`coursepkg.authoring`; the exercise keeps the
cell, tag and metadata, with a one-line placeholder the student replaces).

``coursepkg grade`` reads each submission's answers (the cells carrying that metadata, never
executed) and writes, in ``OUT/manual/``:

- ``<QUESTION>.html``: one offline, self-contained page per question: the question, the model
  answer, then the answers under anonymous ids, identical answers (after whitespace
  normalisation) grouped, the groups in a random order that is the same on every run;
- ``points.csv``: ``question,anonymous_id,points,comment``, one row per answer in the sheets'
  order, points empty. An existing ``points.csv`` is never overwritten (it may hold marks):
  rows for answers it lacks are appended.

``coursepkg merge`` merges the shards' sheets (:func:`plan_merge`) from the anonymised answers
each grading keeps in :data:`ANSWERS_FILE`: the merged ``manual/`` is the one an unsharded
grading writes, byte for byte, when the shards share the key (``--secret``); marks already in
the shards' ``points.csv`` are carried over, and two shards marking one student are refused.

Anonymous ids are an HMAC of the student id, keyed from the instructor's secret or, without one,
from a random salt kept in ``OUT/manual-salt`` (made on the first grading): the same folder
gives the same ids, and a sheet shows no student id.

``coursepkg grade ... --manual points.csv`` merges the marks (:func:`read_points` refuses a
mistake, one line naming the row): each record gets ``"written"`` entries, which
:mod:`.reporting` turns into a ``grades.csv`` column per question, counted in the total and the
max, a feedback section with the comment, and a Gradescope test. A row with empty points is
pending: it counts 0 of its max, and the gradebook cell is empty. Without ``--manual`` the
gradebook is the autograder's alone: written questions have no column and do not count in the
max (so nothing downstream changes until the marks are merged), and the summary says how many
answers await hand grading.
"""

from __future__ import annotations

import csv
import hmac
import html
import io
import json
import math
import os
import random
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from coursepkg.authoring import WRITTEN_PLACEHOLDER, AuthoringError, written_meta
from coursepkg.grading.reporting import atomic_write, html_page
from coursepkg.grading.submission import MAX_NOTEBOOK_MB

__all__ = [
    "POINTS_HEADER",
    "ManualError",
    "Marking",
    "MergedSheets",
    "Question",
    "anonymous_ids",
    "attach",
    "manual_key",
    "plan_merge",
    "prepare",
    "questions_for",
    "read_answers",
    "read_points",
    "write_manual",
]

POINTS_HEADER = ["question", "anonymous_id", "points", "comment"]
SALT_FILE = "manual-salt"
#: The anonymised answers behind the sheets (the key's id, each question's order seed, and
#: question -> anonymous id -> answer), kept with the cache: what :func:`merge_manual` merges.
ANSWERS_FILE = "cache/written.json"


class ManualError(ValueError):
    """A points file that cannot be merged: one line naming the row and the problem."""


@dataclass(frozen=True)
class Question:
    """A question graded by hand: its id, points, text and model answer."""

    id: str
    points: float
    text: str
    model: str


def _source(cell: Mapping) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def questions_in(nb: Mapping, where: str = "the notebook") -> list[Question]:
    """The written questions of a solution notebook (a dict of nbformat 4 JSON), in order."""
    questions, prompt = [], ""
    for index, cell in enumerate(nb.get("cells", [])):
        meta = written_meta(cell, f"{where}, cell {index + 1}")
        if meta is not None:
            questions.append(Question(meta["id"], float(meta["points"]), prompt.strip(),
                                      _source(cell).strip()))
        elif cell.get("cell_type") == "markdown":
            prompt = _source(cell)
    return questions


def questions_for(assignment: str, solutions: Path | None = None) -> list[Question]:
    """The written questions of an assignment, from the course's ``solutions/`` (none when the
    grader does not run from the course's checkout or the notebook has none)."""
    if solutions is None:
        solutions = Path(__file__).resolve().parents[2] / "solutions"
    path = solutions / f"{assignment}.ipynb"
    if not path.is_file():
        return []
    try:
        return questions_in(json.loads(path.read_text(encoding="utf-8")), str(path))
    except (OSError, ValueError, AuthoringError):
        return []


def read_answers(path: Path) -> dict[str, str]:
    """Question id -> a submission's answer (stripped; "" for none or the placeholder). The
    notebook is read as JSON, never run; an unreadable one has no answers."""
    try:
        if path.stat().st_size > MAX_NOTEBOOK_MB * 2**20:
            return {}
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    answers: dict[str, list[str]] = {}
    cells = nb.get("cells") if isinstance(nb, dict) else None
    for cell in cells if isinstance(cells, list) else []:
        meta = cell.get("metadata", {}).get("written") if isinstance(cell, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("id"), str):
            text = _source(cell).strip()
            if text and text != WRITTEN_PLACEHOLDER:
                answers.setdefault(meta["id"], []).append(text)
    return {qid: "\n\n".join(parts) for qid, parts in answers.items()}


def manual_key(out: Path, secret: bytes | None, *, create: bool = True) -> bytes:
    """The key of the anonymous ids: from the secret, else the folder's salt (made if missing
    and ``create``)."""
    if secret is not None:
        return hmac.new(secret, b"coursepkg written answers: anonymous ids", "sha256").digest()
    salt = out / SALT_FILE
    if not salt.is_file():
        if not create:
            return b""
        atomic_write(salt, secrets.token_hex(32) + "\n")
        os.chmod(salt, 0o600)
    return bytes.fromhex(salt.read_text(encoding="utf-8").strip())


def anonymous_ids(key: bytes, students: Sequence[str]) -> dict[str, str]:
    """Student id -> anonymous id (``A`` and 10 hex digits of an HMAC of the student id)."""
    ids = {s: "A" + hmac.new(key, s.encode("utf-8"), "sha256").hexdigest()[:10] for s in students}
    if len(set(ids.values())) != len(ids):  # 40 bits: never with a class, but never silently
        raise ManualError("two students got the same anonymous id: grade into a new --out")
    return ids


def _normal(text: str) -> str:
    return " ".join(text.split())


def question_seed(key: bytes, question_id: str) -> str:
    """The seed (hex) of a question's sheet order: an HMAC of its id under the ids' key (it
    tells nothing of the key, so :data:`ANSWERS_FILE` may keep it for :func:`merge_manual`)."""
    return hmac.new(key, question_id.encode("utf-8"), "sha256").hexdigest()[:16]


def key_id(key: bytes) -> str:
    """16 hex digits naming the ids' key (two folders with one key give the same ids)."""
    return hmac.new(key, b"coursepkg written answers: key id", "sha256").hexdigest()[:16]


def _groups(seed: str, answers: Mapping[str, str]) -> list[list[str]]:
    """Anonymous ids of the non-empty answers, identical ones (whitespace aside) grouped, the
    groups in a random order fixed by the question's ``seed`` (:func:`question_seed`)."""
    by_text: dict[str, list[str]] = {}
    for anon, text in answers.items():
        if text:
            by_text.setdefault(_normal(text), []).append(anon)
    groups = [sorted(ids) for _, ids in sorted(by_text.items())]
    random.Random(int(seed, 16)).shuffle(groups)
    return groups


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem;
       line-height: 1.45; color: #1a1a1a; background: #fff; }
.text { white-space: pre-wrap; border-left: 4px solid #bbb; padding: .4rem .8rem;
        background: #f6f6f6; }
.model { border-left-color: #2a7a2a; }
section { border-top: 1px solid #ddd; margin-top: 1.2rem; }
.ids { font-family: ui-monospace, monospace; }
"""


def sheet_html(question: Question, seed: str, answers: Mapping[str, str]) -> str:
    """The grading sheet of one question (``answers``: anonymous id -> answer text; ``seed``:
    :func:`question_seed`), a page of :func:`.reporting.html_page`."""
    esc = html.escape
    groups = _groups(seed, answers)
    blank = sorted(anon for anon, text in answers.items() if not text)
    answered = sum(len(g) for g in groups)
    parts = [
        f"<h1>Question {esc(question.id)} ({question.points:g} point"
        f"{'s' * (question.points != 1)})</h1>",
        f'<div class="text">{esc(question.text)}</div>',
        "<h2>Model answer</h2>",
        f'<div class="text model">{esc(question.model)}</div>',
        f"<p>{answered} answer{'s' * (answered != 1)} in {len(groups)} group"
        f"{'s' * (len(groups) != 1)} (identical answers, whitespace aside, are shown once); "
        f"{len(blank)} without an answer. Put the points and a comment for each anonymous id "
        "in points.csv.</p>",
    ]
    for number, ids in enumerate(groups, start=1):
        text = answers[ids[0]]
        many = f" ({len(ids)} identical answers)" if len(ids) > 1 else ""
        parts += [
            f'<section id="group-{number}"><h3>Answer {number}{many}</h3>',
            f'<p class="ids">{esc(", ".join(ids))}</p>',
            f'<div class="text">{esc(text)}</div></section>',
        ]
    if blank:
        parts += ['<section id="no-answer"><h3>No answer</h3>',
                  f'<p class="ids">{esc(", ".join(blank))}</p></section>']
    return html_page(f"Question {question.id}: written answers", _STYLE, parts)


def _points_rows(question: Question, seed: str, answers: Mapping[str, str]) -> list[list[str]]:
    ordered = [anon for ids in _groups(seed, answers) for anon in ids]
    ordered += sorted(anon for anon, text in answers.items() if not text)
    return [[question.id, anon, "", ""] for anon in ordered]


def write_manual(
    out: Path,
    questions: Sequence[Question],
    answers: Mapping[str, Mapping[str, str]],
    key: bytes,
    anon: Mapping[str, str],
) -> int:
    """Write ``out/manual/``: a sheet per question and ``points.csv`` (new rows appended to an
    existing one, never overwritten), and :data:`ANSWERS_FILE`. ``answers``: student ->
    question id -> answer.

    Returns:
        How many non-empty answers there are in all.
    """
    data = {
        "key": key_id(key),
        "seeds": {q.id: question_seed(key, q.id) for q in questions},
        "answers": {q.id: {anon[s]: answers.get(s, {}).get(q.id, "") for s in anon}
                    for q in questions},
    }
    write_sheets(out, questions, data)
    return sum(1 for by_anon in data["answers"].values() for text in by_anon.values() if text)


def write_sheets(out: Path, questions: Sequence[Question], data: Mapping,
                 marks: Mapping[tuple[str, str], list[str]] | None = None) -> None:
    """Write ``out/manual/`` and ``out/``:data:`ANSWERS_FILE` from ``data`` (``"key"``: its
    :func:`key_id`; ``"seeds"``: question id -> :func:`question_seed`; ``"answers"``: question
    id -> anonymous id -> answer). ``marks``: (question, anonymous id) -> the points and comment
    cells to put in a new ``points.csv`` (a merge's, :func:`merge_manual`)."""
    folder = out / "manual"
    rows: list[list[str]] = []
    for question in questions:
        by_anon = data["answers"].get(question.id, {})
        seed = data["seeds"][question.id]
        atomic_write(folder / f"{question.id}.html", sheet_html(question, seed, by_anon))
        rows += _points_rows(question, seed, by_anon)
    for row in rows:
        row[2:] = (marks or {}).get((row[0], row[1]), row[2:])
    canonical = {
        "key": data["key"], "seeds": dict(sorted(data["seeds"].items())),
        "answers": {q: dict(sorted(a.items())) for q, a in sorted(data["answers"].items())},
    }
    atomic_write(out / ANSWERS_FILE, json.dumps(canonical, indent=1, sort_keys=True) + "\n")
    points = folder / "points.csv"
    if points.is_file() and points.stat().st_size:
        try:
            old = list(csv.reader(points.read_text(encoding="utf-8").splitlines()))
        except (OSError, UnicodeDecodeError, csv.Error):
            return  # the instructor's file, unreadable: left as it is (--manual says why)
        have = {(row[0], row[1]) for row in old[1:] if len(row) >= 2}
        rows = old + [row for row in rows if (row[0], row[1]) not in have]
        if len(rows) == len(old):
            return
    else:
        rows = [POINTS_HEADER, *rows]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    atomic_write(points, buf.getvalue())


@dataclass
class MergedSheets:
    """What :func:`plan_merge` found in the shards: written by :meth:`write`."""

    questions: list[Question]
    data: dict
    marks: dict[tuple[str, str], list[str]]
    salt: str | None

    def write(self, out: Path) -> None:
        write_sheets(out, self.questions, self.data, self.marks)
        if self.salt is not None:
            atomic_write(out / SALT_FILE, self.salt)
            os.chmod(out / SALT_FILE, 0o600)


def plan_merge(assignment: str, folders: Sequence[Path]) -> MergedSheets | None:
    """The written answers' sheets of shards merged (``coursepkg merge``): the union of their
    anonymised answers (:data:`ANSWERS_FILE`), in the order an unsharded grading gives them,
    and the marks already in their ``manual/points.csv``; None when no shard has any.

    Raises:
        ManualError: one line naming the problem and the fix: shards anonymised with different
            keys (no ``--secret``: each made its own salt), a shard without the answers file,
            two shards with answers or marks for one anonymous id.
    """
    found: list[tuple[Path, dict]] = []
    for folder in folders:
        path = Path(folder) / ANSWERS_FILE
        if not path.is_file():
            if (Path(folder) / "manual").is_dir():  # sheets, but not the answers they came from
                raise ManualError(
                    f"{folder} has written answers' sheets (manual/) but no {ANSWERS_FILE}: it "
                    "was graded by an older coursepkg; run its grade command again, then merge"
                )
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not all(isinstance(data.get(k), dict) for k in ("seeds", "answers")):
                raise ValueError
        except (OSError, ValueError, AttributeError):
            raise ManualError(f"{path} is damaged: run the shard's grade command again") from None
        found.append((Path(folder), data))
    if not found:
        return None
    if len(found) != len(folders):
        lacking = next(f for f in folders if not (Path(f) / ANSWERS_FILE).is_file())
        raise ManualError(
            f"{lacking} has no {ANSWERS_FILE} (the written answers' sheets) while other shards "
            "do: run its grade command again with this coursepkg"
        )
    first, base = found[0]
    for folder, data in found[1:]:
        if data.get("key") != base.get("key") or data["seeds"] != base["seeds"]:
            raise ManualError(
                f"{first} and {folder} anonymised the written answers with different keys "
                "(graded without --secret, each shard made its own manual-salt): grade every "
                "shard with the same --secret FILE, then merge"
            )
    known = {q.id: q for q in questions_for(assignment)}
    unknown = sorted(set(base["seeds"]) - set(known))
    if unknown:
        raise ManualError(
            f"the shards' written questions {', '.join(unknown)} are not {assignment}'s now: "
            "grade the shards again"
        )
    answers: dict[str, dict[str, str]] = {qid: {} for qid in base["seeds"]}
    owner: dict[str, Path] = {}
    for folder, data in found:
        for qid, by_anon in data["answers"].items():
            for anon_id, text in by_anon.items():
                if owner.setdefault(anon_id, folder) != folder:
                    raise ManualError(
                        f"{owner[anon_id]} and {folder} both have written answers of "
                        f"{anon_id}: a student graded in two shards; grade the shards again"
                    )
                answers.setdefault(qid, {})[anon_id] = str(text)
    marks: dict[tuple[str, str], list[str]] = {}
    marked_in: dict[str, Path] = {}  # anonymous id -> the shard whose points.csv marks it
    for folder, _ in found:
        points = folder / "manual" / "points.csv"
        try:
            rows = list(csv.reader(points.read_text(encoding="utf-8-sig").splitlines()))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        for row in rows[1:]:
            cells = (row + ["", "", "", ""])[:4]
            if not (cells[2].strip() or cells[3].strip()):
                continue
            if marked_in.setdefault(cells[1], folder) != folder:
                raise ManualError(
                    f"{marked_in[cells[1]]}/manual/points.csv and {folder}/manual/points.csv "
                    f"both have marks for {cells[1]}: keep them in one shard's file, then merge "
                    "again"
                )
            marks[cells[0], cells[1]] = cells[2:]
    salt = None
    if (first / SALT_FILE).is_file():
        salt = (first / SALT_FILE).read_text(encoding="utf-8")
    data = {"key": base.get("key"), "seeds": base["seeds"], "answers": answers}
    questions = [known[qid] for qid in known if qid in base["seeds"]]
    return MergedSheets(questions, data, marks, salt)


def read_points(
    path: Path, questions: Sequence[Question], anon: Mapping[str, str]
) -> dict[str, dict[str, tuple[float | None, str]]]:
    """The instructor's marks: student -> question id -> (points or None if pending, comment).

    Raises:
        ManualError: one line naming the row and the problem: no such file, a header without
            the four columns, an unknown question or anonymous id, a second row for the same
            answer, points that are not a number, negative, or above the question's maximum.
    """
    path = Path(path)
    try:
        rows = list(csv.reader(path.read_text(encoding="utf-8-sig").splitlines()))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ManualError(f"cannot read the points file {path} ({error})") from None
    if not rows or [c.strip() for c in rows[0][:4]] != POINTS_HEADER:
        raise ManualError(
            f"{path}: the first line must be {','.join(POINTS_HEADER)} (start from the "
            "manual/points.csv that coursepkg grade wrote)"
        )
    by_id = {q.id: q for q in questions}
    student_of = {a: s for s, a in anon.items()}
    marks: dict[str, dict[str, tuple[float | None, str]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{path}, line {number}"
        qid, anon_id, points, comment = ([c.strip() for c in row[:3]] + [""] * 3)[:3] + [
            row[3] if len(row) > 3 else ""]
        if qid not in by_id:
            known = ", ".join(by_id) or "none"
            raise ManualError(f"{where}: unknown question {qid!r} (this assignment's: {known})")
        if anon_id not in student_of:
            raise ManualError(
                f"{where}: unknown anonymous id {anon_id!r} (not one of this folder's "
                "submissions: copy the ids from its manual/points.csv)"
            )
        if (qid, anon_id) in seen:
            raise ManualError(f"{where}: a second row for {qid} {anon_id} (the first is on line "
                              f"{seen[qid, anon_id]})")
        seen[qid, anon_id] = number
        value = None
        if points:
            try:
                value = float(points)
            except ValueError:
                raise ManualError(f"{where}: points {points!r} is not a number") from None
            if not math.isfinite(value) or value < 0:
                raise ManualError(f"{where}: points {points!r} must be a number >= 0")
            if value > by_id[qid].points + 1e-9:
                raise ManualError(f"{where}: {value:g} points for {qid}, whose maximum is "
                                  f"{by_id[qid].points:g}")
        marks.setdefault(student_of[anon_id], {})[qid] = (value, comment.strip())
    return marks


def attach(
    record: dict, questions: Sequence[Question], marks: Mapping[str, tuple[float | None, str]]
) -> dict:
    """A copy of a submission's record with its ``"written"`` entries (marks: question id ->
    (points or None, comment); a question without a mark is pending)."""
    written = []
    for question in questions:
        points, comment = marks.get(question.id, (None, ""))
        written.append({"id": question.id, "points": points, "max_points": question.points,
                        "comment": comment})
    return {**record, "written": written}


@dataclass
class Marking:
    """The written questions of one grading, their anonymous ids and the merged marks (None:
    no ``--manual``); :func:`prepare` makes it, :func:`.grader.grade` and :mod:`.regrade` use it.
    """

    questions: list[Question]
    key: bytes
    anon: dict[str, str]
    marks: dict[str, dict[str, tuple[float | None, str]]] | None
    points_file: Path | None = None

    def show(self, student: str, record: dict) -> dict:
        """The record as published: with its ``"written"`` marks when they were merged."""
        if self.marks is None:
            return record
        return attach(record, self.questions, self.marks.get(student, {}))

    def finish(self, out: Path, rows: Sequence[tuple], notes: list[str] | None) -> None:
        """Write the sheets and ``points.csv`` for the graded ``rows``, and say in ``notes``
        how many answers await hand grading (or were merged)."""
        answers = {found.student: read_answers(found.path) for found, _ in rows}
        anon = {found.student: self.anon[found.student] for found, _ in rows}
        count = write_manual(out, self.questions, answers, self.key, anon)
        if notes is None:
            return
        ids = ", ".join(q.id for q in self.questions)
        if self.marks is None:
            notes.append(
                f"written answers: {count} answer{'s' * (count != 1)} to question"
                f"{'s' * (len(self.questions) > 1)} {ids} await hand grading (not in grades.csv "
                f"yet): read {out}/manual/*.html, fill in {out}/manual/points.csv, then grade "
                "again with --manual POINTS.csv"
            )
        else:
            marked = sum(
                1 for student in anon for qid, (points, _) in self.marks.get(student, {}).items()
                if points is not None
            )
            pending = len(anon) * len(self.questions) - marked
            notes.append(
                f"written answers: {marked} marks merged from {self.points_file}"
                + (f", {pending} pending (counted 0)" if pending else "")
            )

    def run_info(self) -> dict:
        """What ``run.json`` keeps of it."""
        return {
            "written": [q.id for q in self.questions],
            "manual": None if self.points_file is None else str(self.points_file.resolve()),
        }


def prepare(
    assignment: str,
    out: Path,
    students: Sequence[str],
    secret: bytes | None,
    points_file: Path | None,
    *,
    create: bool = True,
) -> Marking | None:
    """The marking of a grading of ``students`` (None: the assignment has no written question).

    Raises:
        ManualError: ``points_file`` given for an assignment without written questions, or a
            mistake in it (:func:`read_points`).
    """
    questions = questions_for(assignment)
    if not questions:
        if points_file is not None:
            raise ManualError(f"--manual: {assignment} has no written questions")
        return None
    key = manual_key(out, secret, create=create)
    if not key:
        raise ManualError(f"{out} has no {SALT_FILE} (it was graded without written answers)")
    anon = anonymous_ids(key, students)
    marks = None if points_file is None else read_points(points_file, questions, anon)
    return Marking(questions, key, anon, marks, points_file)
