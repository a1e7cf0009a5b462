"""Grading a class in shards (``coursepkg grade ... --shard I/N``) and merging them back
(``coursepkg merge DIR... --out DIR``).

A class is cut into N disjoint parts by a stable hash of the student id: student ``s`` belongs
to shard ``int(sha256(s), 16) % N + 1``. Shards are numbered 1..N (as Playwright's and Jest's
``--shard 1/4``); ``--shard auto`` takes the index from the scheduler, whose own numbers start
at 0 (a Kubernetes Indexed Job's ``JOB_COMPLETION_INDEX``) or at the array's first task (a
Slurm job array's ``SLURM_ARRAY_TASK_ID``), and adds what makes it 1-based. Adding or removing
a submission moves no other student to another shard.

Each shard's output folder is an ordinary graded folder for its own students (``grades.csv``,
``results/``, ``feedback/``, ``log.jsonl``, ``cache/``) plus ``shard.json``, what it is:

.. code-block:: json

    {"assignment": "01_ngrams", "shard": 2, "shards": 4, "package": "0.2.0", "grader": 3,
     "cases": "<digest of the secret's hidden cases and the extra cases>",
     "tests": "public and hidden tests (secret 1a2b3c4d)", "finished": true,
     "students": ["ada", "cy"]}

It is written when the shard starts (``"finished": false``) and again when its ``grades.csv``
is written (``true``), so an interrupted shard is told apart from a finished one; running the
same command again finishes it (graded notebooks come from the cache).

:func:`merge` combines the folders of shards 1..N into the files an unsharded run writes, byte
for byte: ``grades.csv`` (rows sorted by student), ``results/``, ``feedback/``, and
``log.jsonl``: the last line each shard logged for each of its students, sorted by student.
A grading run sorts the lines it appends to ``log.jsonl`` by student once it finishes (see
:func:`sort_log_lines`), so the log of one unsharded run and the merged log are the same bytes
when the notebooks were graded afresh (or from the cache) in both: a line says whether its
record came from the cache. The written answers' sheets (``manual/``, see
:func:`.manual.plan_merge`) are merged into the ones an unsharded run writes (the shards must
share the anonymous ids' key: ``--secret``), with the marks the shards' ``points.csv`` hold.
``cache/`` is merged too, so the merged folder can be graded again
cheaply (a new late policy or extension: nothing runs). The merge refuses, naming the problem:
a folder that is not a shard, an unfinished shard, mixed assignments, mixed grader versions or
tests, missing or repeated shards, students in two shards, and written answers the shards
anonymised differently or marked twice.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from coursepkg.grading.manual import ManualError, plan_merge
from coursepkg.grading.reporting import atomic_write

__all__ = [
    "MergeError",
    "Shard",
    "ShardError",
    "merge",
    "read_manifest",
    "shard_of",
    "sort_log_lines",
    "write_manifest",
]

MANIFEST = "shard.json"
MERGED = "merged.json"


class ShardError(ValueError):
    """A ``--shard`` value (or the scheduler's variables behind ``auto``) that cannot be used."""


class MergeError(ValueError):
    """Shard folders that cannot be merged: the text names the problem in one line."""


def shard_of(student: str, shards: int) -> int:
    """The shard (1..``shards``) a student id belongs to: sha256 of its UTF-8 bytes, mod N."""
    digest = hashlib.sha256(student.encode("utf-8")).hexdigest()
    return int(digest, 16) % shards + 1


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1 <= index <= count)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ShardError(f"shard {self.index}/{self.count}: I must be 1..N")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, student: str) -> bool:
        return shard_of(student, self.count) == self.index

    @classmethod
    def parse(cls, text: str, environ: Mapping[str, str] | None = None) -> Shard:
        """``"I/N"`` (1 <= I <= N), or ``"auto"``: from a Kubernetes Indexed Job
        (``JOB_COMPLETION_INDEX`` + 1 of ``COURSEPKG_SHARDS``, which the Job sets to its
        ``completions``) or a Slurm job array (``SLURM_ARRAY_TASK_ID`` - ``SLURM_ARRAY_TASK_MIN``
        + 1 of ``SLURM_ARRAY_TASK_COUNT``; ``COURSEPKG_SHARDS`` overrides the count)."""
        env = os.environ if environ is None else environ
        if text == "auto":
            return cls._from_scheduler(env)
        index, slash, count = text.partition("/")
        if not (slash and index.isdigit() and count.isdigit()):
            raise ShardError(f"--shard {text!r}: give I/N (1/4 ... 4/4: from 1) or auto")
        if int(count) < 1 or not 1 <= int(index) <= int(count):
            raise ShardError(f"--shard {text}: I must be 1..N and N at least 1")
        return cls(int(index), int(count))

    @classmethod
    def _from_scheduler(cls, env: Mapping[str, str]) -> Shard:
        def number(name: str) -> int:
            value = env.get(name, "")
            if not value.strip().isdigit():
                raise ShardError(f"--shard auto: {name}={value!r} is not a whole number")
            return int(value)

        if "JOB_COMPLETION_INDEX" in env:
            if "COURSEPKG_SHARDS" not in env:
                raise ShardError(
                    "--shard auto: JOB_COMPLETION_INDEX is set but COURSEPKG_SHARDS is not: set "
                    "it in the Job's env to the Job's completions (see the README's recipe)"
                )
            index, count, where = number("JOB_COMPLETION_INDEX") + 1, number("COURSEPKG_SHARDS"), (
                "JOB_COMPLETION_INDEX + 1")
        elif "SLURM_ARRAY_TASK_ID" in env:
            first = number("SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in env else 0
            if env.get("SLURM_ARRAY_TASK_STEP", "1") != "1":
                raise ShardError("--shard auto: the Slurm array must have step 1 (--array=0-N)")
            if "COURSEPKG_SHARDS" in env:
                count = number("COURSEPKG_SHARDS")
            elif "SLURM_ARRAY_TASK_COUNT" in env:
                count = number("SLURM_ARRAY_TASK_COUNT")
            else:
                raise ShardError(
                    "--shard auto: SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT "
                    "nor COURSEPKG_SHARDS says how many shards there are"
                )
            index = number("SLURM_ARRAY_TASK_ID") - first + 1
            where = "SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN + 1"
        else:
            raise ShardError(
                "--shard auto: neither JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) nor "
                "SLURM_ARRAY_TASK_ID (a Slurm job array) is set; give --shard I/N"
            )
        if count < 1 or not 1 <= index <= count:
            raise ShardError(f"--shard auto: shard {index} ({where}) of {count} is not 1..N")
        return cls(index, count)


def write_manifest(
    out: Path,
    shard: Shard,
    *,
    assignment: str,
    package: str,
    grader: int,
    cases: str,
    tests: str,
    students: Sequence[str],
    finished: bool,
) -> None:
    """Write ``out/shard.json`` (see the module's docstring)."""
    data = {
        "assignment": assignment,
        "shard": shard.index,
        "shards": shard.count,
        "package": package,
        "grader": grader,
        "cases": cases,
        "tests": tests,
        "finished": finished,
        "students": sorted(students),
    }
    atomic_write(out / MANIFEST, json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_manifest(folder: Path) -> dict:
    """A shard folder's ``shard.json``; a :class:`MergeError` when there is none or it is bad."""
    path = Path(folder) / MANIFEST
    if not Path(folder).is_dir():
        raise MergeError(f"no such folder: {folder}")
    if not path.is_file():
        raise MergeError(
            f"{folder} is not a shard (no {MANIFEST}): give the --out folders of "
            "'coursepkg grade ... --shard I/N'"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        keys = ("assignment", "shard", "shards", "package", "grader", "cases", "students")
        if not isinstance(data, dict) or any(k not in data for k in keys):
            raise ValueError
        if not isinstance(data["students"], list):
            raise ValueError
    except (OSError, ValueError):
        raise MergeError(f"{path} is damaged: run the shard's grade command again") from None
    return data


def sort_log_lines(log: Path, start: int) -> None:
    """Sort the lines a run appended to ``log`` (from byte ``start``) by student, stably: the
    log of a run no longer depends on which notebook finished first."""
    if not log.is_file():
        return
    data = log.read_bytes()
    head, tail = data[:start], data[start:]
    lines = tail.decode("utf-8").splitlines(keepends=True)
    lines.sort(key=_log_student)
    atomic_write(log, head.decode("utf-8") + "".join(lines))


def _log_student(line: str) -> str:
    try:
        return str(json.loads(line).get("student", ""))
    except (ValueError, AttributeError):
        return ""


@dataclass(frozen=True)
class Merged:
    """What :func:`merge` wrote: the assignment, the number of shards and the students."""

    assignment: str
    shards: int
    students: list[str]


def _check_shards(folders: Sequence[Path], manifests: list[dict]) -> None:
    """Refuse shards that do not make one whole class of one grading, naming the problem."""
    first, where = manifests[0], folders[0]
    for folder, data in zip(folders, manifests, strict=True):
        if not data.get("finished"):
            raise MergeError(
                f"{folder} is an unfinished shard (shard {data['shard']}/{data['shards']} was "
                "interrupted): run its grade command again, then merge"
            )
        for key, what in (
            ("assignment", "mixed assignments"),
            ("package", "mixed grader versions (coursepkg)"),
            ("grader", "mixed grader versions"),
            ("cases", "mixed tests (another --secret or --tests)"),
            ("shards", "mixed shard counts"),
        ):
            if data[key] != first[key]:
                raise MergeError(
                    f"{what}: {where} has {key} {first[key]!r}, {folder} has {data[key]!r}"
                )
    count = first["shards"]
    seen: dict[int, Path] = {}
    for folder, data in zip(folders, manifests, strict=True):
        if data["shard"] in seen:
            raise MergeError(
                f"overlapping shards: {seen[data['shard']]} and {folder} are both shard "
                f"{data['shard']}/{count}"
            )
        seen[data["shard"]] = folder
    missing = [str(i) for i in range(1, count + 1) if i not in seen]
    if missing:
        raise MergeError(
            f"missing shard{'s' * (len(missing) > 1)} {', '.join(missing)} of {count}: give "
            f"every shard's folder (1..{count})"
        )
    owner: dict[str, Path] = {}
    for folder, data in zip(folders, manifests, strict=True):
        for student in data["students"]:
            if student in owner:
                raise MergeError(
                    f"overlapping shards: {owner[student]} and {folder} both graded {student!r}"
                )
            owner[student] = folder


def _grades_rows(folder: Path, students: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """A shard's grades.csv: its header and its rows by student (all its students, no other)."""
    path = folder / "grades.csv"
    try:
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    except (OSError, UnicodeDecodeError, csv.Error):
        raise MergeError(f"{path} is missing or damaged: run the shard again") from None
    if not rows:
        raise MergeError(f"{path} is empty: run the shard again")
    by_student = {row[0]: row for row in rows[1:] if row}
    if sorted(by_student) != sorted(students):
        raise MergeError(
            f"{path} does not list the students {folder / MANIFEST} names: run the shard again"
        )
    return rows[0], by_student


def _log_lines(folder: Path) -> dict[str, str]:
    """The last line a shard's log.jsonl holds for each student."""
    last: dict[str, str] = {}
    path = folder / "log.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            student = _log_student(line)
            if student:
                last[student] = line if line.endswith("\n") else line + "\n"
    return last


def merge(folders: Sequence[Path], out: Path) -> Merged:
    """Merge the output folders of shards 1..N of one grading into ``out``.

    Args:
        folders: the ``--out`` folders of ``coursepkg grade ... --shard I/N``, in any order.
        out: a new (or empty) folder, or the ``out`` of an earlier merge (rewritten).

    Returns:
        What was merged.

    Raises:
        MergeError: the folders are not the complete, finished shards of one grading, or
            ``out`` is a folder of something else; the text names the problem.
    """
    folders = [Path(f) for f in folders]
    if not folders:
        raise MergeError("give the shard folders to merge")
    out = Path(out)
    resolved = {f.resolve() for f in folders}
    if out.resolve() in resolved:
        raise MergeError(f"--out {out} is one of the shards: give a new folder")
    if out.exists() and not out.is_dir():
        raise MergeError(f"--out {out}: is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MERGED).is_file():
        raise MergeError(f"--out {out} is not empty (nor an earlier merge): give a new folder")
    manifests = [read_manifest(f) for f in folders]
    _check_shards(folders, manifests)
    try:  # the written answers' sheets, checked before anything is written
        sheets = plan_merge(manifests[0]["assignment"], folders)
    except ManualError as error:
        raise MergeError(str(error)) from None

    header: list[str] | None = None
    rows: dict[str, list[str]] = {}
    logs: dict[str, str] = {}
    for folder, data in zip(folders, manifests, strict=True):
        students = [str(s) for s in data["students"]]
        head, by_student = _grades_rows(folder, students)
        if header is None:
            header = head
        elif head != header:
            raise MergeError(f"mixed gradebooks: {folder}/grades.csv has other columns")
        rows.update(by_student)
        shard_log = _log_lines(folder)
        for student in students:
            for kind, suffix in (("results", ".json"), ("feedback", ".md")):
                if not (folder / kind / f"{student}{suffix}").is_file():
                    raise MergeError(
                        f"{folder}/{kind}/{student}{suffix} is missing: run the shard again"
                    )
            if student in shard_log:
                logs[student] = shard_log[student]

    students = sorted(rows)
    for kind in ("results", "feedback"):
        if (out / kind).is_dir():  # an earlier merge: its files of students no longer here go
            shutil.rmtree(out / kind)
    for folder, data in zip(folders, manifests, strict=True):
        for student in data["students"]:
            for kind, suffix in (("results", ".json"), ("feedback", ".md")):
                source = folder / kind / f"{student}{suffix}"
                atomic_write(out / kind / source.name, source.read_text(encoding="utf-8"))
        _copy_cache(folder / "cache", out / "cache")
    if sheets is not None:
        sheets.write(out)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for student in students:
        writer.writerow(rows[student])
    atomic_write(out / "grades.csv", buf.getvalue())
    atomic_write(out / "log.jsonl", "".join(logs[s] for s in students if s in logs))
    _merge_run_info(folders, out)
    first = manifests[0]
    summary = {
        "assignment": first["assignment"],
        "shards": first["shards"],
        "package": first["package"],
        "grader": first["grader"],
        "folders": [str(f) for f in sorted(folders, key=lambda f: str(f))],
        "students": len(students),
    }
    atomic_write(out / MERGED, json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return Merged(first["assignment"], first["shards"], students)


def _merge_run_info(folders: Sequence[Path], out: Path) -> None:
    """``run.json`` of the whole class when every shard wrote one (``coursepkg regrade`` reads
    it): the first shard's, with every shard's submissions, sorted by student."""
    infos = []
    for folder in folders:
        try:
            infos.append(json.loads((folder / "run.json").read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return
    if not all(isinstance(i, dict) and isinstance(i.get("submissions"), list) for i in infos):
        return
    merged = dict(infos[0])
    subs = [s for info in infos for s in info["submissions"] if isinstance(s, dict)]
    merged["submissions"] = sorted(subs, key=lambda s: str(s.get("student", "")))
    lates = [info.get("late") for info in infos]
    if all(isinstance(late, dict) for late in lates):  # each shard's students' times
        merged["late"] = dict(lates[0])
        for key in ("extensions", "submitted"):
            union = {k: v for late in lates for k, v in dict(late.get(key) or {}).items()}
            merged["late"][key] = dict(sorted(union.items()))
    atomic_write(out / "run.json", json.dumps(merged, indent=1, sort_keys=True) + "\n")


def _copy_cache(source: Path, target: Path) -> None:
    """Copy the graded records a shard cached (content-addressed: a name present is the same
    record), so that grading the merged folder again runs nothing."""
    if not source.is_dir():
        return
    for path in sorted(source.rglob("*.json")):  # cache/ and cache/tasks/
        if path.name.startswith("."):
            continue
        copy = target / path.relative_to(source)
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
