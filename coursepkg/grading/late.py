"""Late submissions: penalties, a cap, a grace period, extensions and pooled slip days
(``coursepkg grade ... --deadline ISO-8601 --late-policy FILE``).

The policy is a small TOML (or JSON) file, the same for the whole course::

    per = "day"            # the penalty is charged per started "day" or "hour" late
    percent = 10           # percent of the raw total per started unit
    cap = 50               # at most this many percent are taken off (100: down to 0)
    grace_minutes = 15     # up to this late counts as on time
    slip_days = 3          # pooled slip days per student for the whole course (0: none)
    ledger = "slip-days.csv"   # where they are booked (relative to this file)
    timezone = "Europe/Paris"  # the zone of times written without an offset (else refused)

How a submission's penalty is decided (:func:`decide`):

1. ``late`` = submission time - deadline (the student's extension's new deadline if the
   extensions CSV names one, else ``--deadline``), in absolute time: every time is turned into
   UTC first, so a daylight-saving change between the deadline and the submission counts for
   what it is (an hour gained or lost on the clock is not an hour of lateness).
2. Up to ``grace_minutes`` late is on time. Beyond it, lateness counts from the deadline.
3. Slip days: each covers 24 hours of lateness; a late submission spends as many as it needs,
   at most what the student has left (the allowance minus what the ledger books for the
   student's other assignments).
4. What slip days do not cover is charged ``percent`` per started ``per`` (a day: 24 hours),
   at most ``cap`` percent: ``late_total = total * (1 - penalty / 100)``.

The ledger (CSV ``student,assignment,slip_days``, one row per student and assignment that spent
slip days, sorted) is the instructor's file. Grading an assignment rewrites only its own rows for
the students graded, the same way each time: running the grader again (a changed extension, a
resumed run) never spends slip days twice, and shards of one assignment, which grade disjoint
students, may update it at the same time (a lock file serialises the writes). An assignment's
slip days are decided given what the other assignments already booked.

Submission times come from a CSV ``student,submitted_at`` or from Gradescope's
``submission_metadata.json`` (its ``created_at``, for every notebook of the run: Gradescope runs
one submission at a time). The extensions CSV is ``student,deadline``. Times are ISO 8601 with
an offset (``2026-03-29T23:59:00+02:00``, ``...Z``); a time without one is read in the policy's
``timezone`` (a time the clocks skip there is refused, an ambiguous one is the first of the two)
or refused when the policy names none.

Where the penalty shows (:func:`.reporting.final_total` computes the final score, the raw
total after the penalty, in one place): ``grades.csv`` keeps the raw ``total`` and adds
:data:`COLUMNS` at the end: ``submitted_at`` and ``deadline`` (UTC), ``late_minutes``,
``slip_days``, ``penalty_percent`` and ``late_total`` (the final score); the feedback and the
Gradescope output say in one line how lateness changed the score (:func:`describe`); the
Gradescope ``score``, the LMS exports and the class report's final scores are after the
penalty. ``run.json`` records the set-up (:meth:`LateSetup.run_info`: the policy's text, the
deadline, the extensions and the submission times), so ``coursepkg regrade`` applies it again
(booking the same slip days: nothing twice).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "COLUMNS",
    "Decision",
    "LateError",
    "LatePolicy",
    "LateSetup",
    "decide",
    "describe",
    "load_policy",
    "parse_time",
    "penalty_percent",
]

COLUMNS = ("submitted_at", "deadline", "late_minutes", "slip_days", "penalty_percent",
           "late_total")
UNITS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}
DAY = timedelta(days=1)
LEDGER_COLUMNS = ["student", "assignment", "slip_days"]


class LateError(ValueError):
    """A policy, a time, an extensions or times file, or a ledger that cannot be used (one line)."""


@dataclass(frozen=True)
class LatePolicy:
    """The course's late policy (see the module's docstring for each field)."""

    per: str = "day"
    percent: float = 10.0
    cap: float = 100.0
    grace: timedelta = timedelta(0)
    slip_days: int = 0
    ledger: Path | None = None
    timezone: str | None = None

    def __post_init__(self) -> None:
        if self.per not in UNITS:
            raise LateError(f"late policy: per = {self.per!r}: give \"day\" or \"hour\"")
        if not (0 <= self.percent <= 100 and 0 <= self.cap <= 100):
            raise LateError("late policy: percent and cap must be between 0 and 100")
        if self.grace < timedelta(0) or self.slip_days < 0:
            raise LateError("late policy: grace_minutes and slip_days must not be negative")
        if self.slip_days and self.ledger is None:
            raise LateError("late policy: slip_days needs a ledger file (ledger = \"...csv\")")
        if self.timezone is not None:
            _zone(self.timezone)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise LateError(f"unknown time zone {name!r} (an IANA name such as Europe/Paris)") from None


_KEYS = {"per", "percent", "cap", "grace_minutes", "slip_days", "ledger", "timezone"}


def load_policy(path: Path) -> LatePolicy:
    """Read a policy file (``.toml``, else JSON); the ledger's path is relative to it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise LateError(f"cannot read the late policy {path} ({error.strerror})") from None
    return policy_from_text(text, path)


def policy_from_text(text: str, path: Path) -> LatePolicy:
    """A policy from the text of its file ``path`` (TOML unless it ends in .json)."""
    path = Path(path)
    try:
        data = tomllib.loads(text) if path.suffix != ".json" else json.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as error:
        raise LateError(f"the late policy {path} is not valid {path.suffix[1:] or 'TOML'} "
                        f"({error})") from None
    if not isinstance(data, dict):
        raise LateError(f"the late policy {path} must be a table of settings")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise LateError(f"the late policy {path}: unknown setting {', '.join(unknown)} (known: "
                        f"{', '.join(sorted(_KEYS))})")
    numbers = ("percent", "cap", "grace_minutes", "slip_days")
    for key in numbers:
        if key in data and (isinstance(data[key], bool) or
                            not isinstance(data[key], int | float)):
            raise LateError(f"the late policy {path}: {key} must be a number")
    if "slip_days" in data and data["slip_days"] != int(data["slip_days"]):
        raise LateError(f"the late policy {path}: slip_days must be a whole number")
    ledger = data.get("ledger")
    return LatePolicy(
        per=str(data.get("per", "day")),
        percent=float(data.get("percent", 10.0)),
        cap=float(data.get("cap", 100.0)),
        grace=timedelta(minutes=float(data.get("grace_minutes", 0))),
        slip_days=int(data.get("slip_days", 0)),
        ledger=None if ledger is None else (path.parent / str(ledger)),
        timezone=None if data.get("timezone") is None else str(data["timezone"]),
    )


def parse_time(text: str, timezone: str | None = None) -> datetime:
    """An ISO 8601 time as an aware UTC datetime.

    Raises:
        LateError: not ISO 8601; no offset and no ``timezone``; a local time the clocks skip.
    """
    value = str(text).strip()
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise LateError(f"{value!r} is not an ISO 8601 time (such as 2026-03-29T23:59:00+02:00)"
                        ) from None
    if parsed.tzinfo is None:
        if timezone is None:
            raise LateError(
                f"{value!r} has no UTC offset: write one (+02:00, Z) or set timezone in the "
                "late policy"
            )
        zone = _zone(timezone)
        local = parsed.replace(tzinfo=zone, fold=0)
        back = local.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
        if back != parsed:
            raise LateError(f"{value} does not exist in {timezone} (the clocks skip it)")
        parsed = local
    return parsed.astimezone(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def penalty_percent(late: timedelta, policy: LatePolicy) -> float:
    """The percent taken off for ``late`` (after grace and slip days): ``percent`` per started
    unit, at most ``cap``; 0 for no lateness."""
    if late <= timedelta(0):
        return 0.0
    units = math.ceil(late / UNITS[policy.per])
    return min(policy.cap, units * policy.percent)


@dataclass(frozen=True)
class Decision:
    """What the policy decided for one submission."""

    late: timedelta
    slip_days: int
    penalty: float
    late_total: float


def decide(total: float, submitted: datetime | None, deadline: datetime, available: int,
           policy: LatePolicy) -> Decision:
    """The late penalty of one submission.

    Args:
        total: its raw total.
        submitted: its time (aware); None (unknown) is on time.
        deadline: its deadline (aware; the extension's when the student has one).
        available: slip days the student has left for this assignment.
        policy: the policy.
    """
    late = timedelta(0) if submitted is None else (
        submitted.astimezone(UTC) - deadline.astimezone(UTC))
    if late <= policy.grace:
        return Decision(max(late, timedelta(0)), 0, 0.0, total)
    spent = min(math.ceil(late / DAY), max(0, available))
    penalty = penalty_percent(late - spent * DAY, policy)
    return Decision(late, spent, penalty, round(total * (1 - penalty / 100), 6))


# ----------------------------------------------------------------------------- the files


def _csv_rows(path: Path, columns: tuple[str, str], what: str) -> list[tuple[int, str, str]]:
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as error:
        raise LateError(f"cannot read the {what} {path} ({error.strerror})") from None
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or any(c not in reader.fieldnames for c in columns):
        raise LateError(f"the {what} {path} needs the columns {', '.join(columns)}")
    return [(n, (row[columns[0]] or "").strip(), (row[columns[1]] or "").strip())
            for n, row in enumerate(reader, start=2)]


def read_extensions(path: Path, timezone: str | None) -> dict[str, datetime]:
    """Student -> new deadline, from a CSV ``student,deadline``."""
    found: dict[str, datetime] = {}
    for line, student, when in _csv_rows(path, ("student", "deadline"), "extensions file"):
        if not student:
            continue
        try:
            found[student] = parse_time(when, timezone)
        except LateError as error:
            raise LateError(f"{path}, line {line}: {error}") from None
    return found


def read_times(path: Path, timezone: str | None) -> tuple[dict[str, datetime], datetime | None]:
    """Submission times: (student -> time, from a CSV ``student,submitted_at``) or (nothing,
    the time of every notebook, from Gradescope's ``submission_metadata.json``)."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            created = data["created_at"]
        except (OSError, ValueError, KeyError, TypeError):
            raise LateError(f"{path} is not Gradescope's submission_metadata.json (no "
                            "created_at)") from None
        return {}, parse_time(str(created), timezone)
    found: dict[str, datetime] = {}
    for line, student, when in _csv_rows(path, ("student", "submitted_at"), "submission times"):
        if not student:
            continue
        try:
            found[student] = parse_time(when, timezone)
        except LateError as error:
            raise LateError(f"{path}, line {line}: {error}") from None
    return found, None


def read_ledger(path: Path) -> list[tuple[str, str, int]]:
    """The ledger's rows (student, assignment, slip days); none when the file does not exist."""
    if not Path(path).is_file():
        return []
    rows = []
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as error:
        raise LateError(f"cannot read the slip-day ledger {path} ({error.strerror})") from None
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or any(c not in reader.fieldnames for c in LEDGER_COLUMNS):
        raise LateError(f"the slip-day ledger {path} needs the columns "
                        f"{', '.join(LEDGER_COLUMNS)}")
    for line, row in enumerate(reader, start=2):
        value = (row["slip_days"] or "").strip()
        if not value.isdigit():
            raise LateError(f"{path}, line {line}: slip_days {value!r} is not a whole number "
                            ">= 0")
        rows.append(((row["student"] or "").strip(), (row["assignment"] or "").strip(),
                     int(value)))
    return rows


def ledger_text(rows: Iterable[tuple[str, str, int]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(LEDGER_COLUMNS)
    for row in sorted(rows):
        writer.writerow(row)
    return buf.getvalue()


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive lock on ``path``.lock (POSIX; elsewhere no lock)."""
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class LateSetup:
    """Everything ``--deadline`` and ``--late-policy`` (and the files they bring) say."""

    policy: LatePolicy
    deadline: datetime
    extensions: Mapping[str, datetime]
    times: Mapping[str, datetime]
    every_time: datetime | None = None
    policy_file: str | None = None
    policy_text: str = ""

    @classmethod
    def load(cls, deadline: str, policy: Path, *, extensions: Path | None = None,
             times: Path | None = None) -> LateSetup:
        rules = load_policy(policy)
        when = parse_time(deadline, rules.timezone)
        ext = read_extensions(extensions, rules.timezone) if extensions else {}
        found, every = read_times(times, rules.timezone) if times else ({}, None)
        text = Path(policy).read_text(encoding="utf-8")
        return cls(rules, when, ext, found, every, str(policy), text)

    def submitted(self, student: str) -> datetime | None:
        return self.every_time if self.every_time is not None else self.times.get(student)

    def decisions(self, assignment: str, students: Iterable[str]) -> dict[str, Decision]:
        """Decide each student's lateness, slip days and penalty (its ``late_total`` is of a raw
        total of 0: :func:`.reporting.final_total` applies ``penalty`` to the real one), given
        the slip days the ledger books for the students' other assignments. Nothing is written
        (:meth:`book` does)."""
        spent = self._spent_elsewhere(assignment)
        return {s: self._decide(s, 0.0, self.policy.slip_days - spent.get(s, 0))
                for s in students}

    def _spent_elsewhere(self, assignment: str) -> dict[str, int]:
        spent: dict[str, int] = {}
        if self.policy.ledger is None or not self.policy.slip_days:
            return spent
        for student, other, days in read_ledger(self.policy.ledger):
            if other != assignment:
                spent[student] = spent.get(student, 0) + days
        return spent

    def book(self, assignment: str, decisions: Mapping[str, Decision]) -> None:
        """Book the slip days spent in the ledger: this assignment's rows of these students are
        replaced (so booking the same decisions again changes nothing), under a lock."""
        if self.policy.ledger is None or not self.policy.slip_days:
            return
        with _locked(self.policy.ledger):
            rows = read_ledger(self.policy.ledger)
            kept = [r for r in rows if not (r[1] == assignment and r[0] in decisions)]
            booked = [(s, assignment, d.slip_days) for s, d in decisions.items() if d.slip_days]
            text = ledger_text(kept + booked)
            old = (self.policy.ledger.read_text(encoding="utf-8")
                   if self.policy.ledger.is_file() else None)
            if text != old:
                from coursepkg.grading.reporting import atomic_write

                atomic_write(self.policy.ledger, text)

    def apply(self, assignment: str, totals: Mapping[str, float]) -> dict[str, Decision]:
        """Decide every student's penalty on these raw totals and book the slip days spent
        (:meth:`decisions` then :meth:`book`, under the ledger's lock)."""
        if self.policy.ledger is None or not self.policy.slip_days:
            return {s: self._decide(s, t, 0) for s, t in totals.items()}
        with _locked(self.policy.ledger):
            spent = self._spent_elsewhere(assignment)
            decisions = {s: self._decide(s, t, self.policy.slip_days - spent.get(s, 0))
                         for s, t in totals.items()}
        self.book(assignment, decisions)
        return decisions

    def entry(self, student: str, decision: Decision) -> dict:
        """What a submission's record carries (``record["late"]``): the times (UTC, ISO), the
        minutes late, slip days, penalty percent and the policy's grace."""
        submitted = self.submitted(student)
        return {
            "submitted_at": "" if submitted is None else _iso(submitted),
            "deadline": _iso(self.extensions.get(student, self.deadline)),
            "late_minutes": math.floor(decision.late.total_seconds() / 60),
            "slip_days": decision.slip_days,
            "penalty": decision.penalty,
            "grace_minutes": self.policy.grace.total_seconds() / 60,
        }

    def notes(self, decisions: Mapping[str, Decision]) -> list[str]:
        """What the grading's summary says of the late policy."""
        late = [s for s, d in decisions.items() if d.late > self.policy.grace]
        spent = sum(d.slip_days for d in decisions.values())
        text = (f"late policy: {len(late)} late submission{'s' * (len(late) != 1)}, "
                f"{spent} slip day{'s' * (spent != 1)} spent")
        if self.policy.ledger is not None and self.policy.slip_days:
            text += f" (booked in {self.policy.ledger})"
        notes = [text]
        missing = self.missing(decisions)
        if missing:
            notes.append(f"late policy: no submission time for {', '.join(missing)} (on time)")
        return notes

    def run_info(self, students: Iterable[str]) -> dict:
        """What ``run.json`` keeps to apply the policy again (:meth:`from_run_info`): the policy
        file's path, text and sha256, the deadline, the extensions and the submission times of
        ``students`` (UTC)."""
        wanted = sorted(set(students))
        return {
            "policy_file": str(Path(self.policy_file).resolve()) if self.policy_file else None,
            "policy_text": self.policy_text,
            "policy_sha256": hashlib.sha256(self.policy_text.encode("utf-8")).hexdigest(),
            "deadline": _iso(self.deadline),
            "extensions": {s: _iso(self.extensions[s]) for s in wanted if s in self.extensions},
            "submitted": {s: _iso(t) for s in wanted if (t := self.submitted(s)) is not None},
        }

    @classmethod
    def from_run_info(cls, info: Mapping) -> LateSetup:
        """The set-up :meth:`run_info` recorded (the policy from its recorded text, its ledger
        relative to the recorded path, as when it was graded)."""
        try:
            path = Path(info["policy_file"])
            rules = policy_from_text(str(info["policy_text"]), path)
            ext = {s: parse_time(t) for s, t in dict(info["extensions"]).items()}
            times = {s: parse_time(t) for s, t in dict(info["submitted"]).items()}
            deadline = parse_time(str(info["deadline"]))
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, LateError):
                raise
            raise LateError("run.json's late set-up is damaged: grade again with --deadline "
                            "and --late-policy") from None
        return cls(rules, deadline, ext, times, None, str(path), str(info["policy_text"]))

    def _decide(self, student: str, total: float, available: int) -> Decision:
        deadline = self.extensions.get(student, self.deadline)
        return decide(total, self.submitted(student), deadline, available, self.policy)

    def missing(self, students: Iterable[str]) -> list[str]:
        """The students without a submission time (graded as on time)."""
        return sorted(s for s in students if self.submitted(s) is None)


def duration(minutes: int) -> str:
    """Minutes in words: "45 min", "2 h 5 min", "1 day 3 h" (days and hours only past a day)."""
    days, rest = divmod(max(0, int(minutes)), 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} day{'s' * (days != 1)}" + (f" {hours} h" if hours else "")
    if hours:
        return f"{hours} h" + (f" {mins} min" if mins else "")
    return f"{mins} min"


def describe(entry: Mapping) -> str:
    """A record's late entry (:meth:`LateSetup.entry`) in words, without the scores:
    "submitted 1 day 3 h late; 2 slip days used; penalty 10%"."""
    if not entry["submitted_at"]:
        return "no submission time on record, counted as on time; no penalty"
    minutes = entry["late_minutes"]
    if minutes <= 0:
        return "submitted on time; no penalty"
    if minutes <= entry.get("grace_minutes", 0) and not entry["penalty"] and not entry[
            "slip_days"]:
        return f"submitted {duration(minutes)} late, within the grace period; no penalty"
    days = entry["slip_days"]
    text = f"submitted {duration(minutes)} late"
    if days:
        text += f"; {days} slip day{'s' * (days != 1)} used"
    return text + (f"; penalty {entry['penalty']:g}%" if entry["penalty"] else "; no penalty")
