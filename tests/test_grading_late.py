"""The late policy (`coursepkg grade ... --deadline ISO --late-policy FILE`): penalties per day
or hour with a cap and a grace period, extensions, pooled slip days booked in a ledger, time
zones and daylight-saving changes; and the grader's columns, which a rerun recomputes from the
cache without running any notebook."""

import csv
import io
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from checks_support import TEST_SECRET
from hypothesis import given, settings
from hypothesis import strategies as st

from coursepkg.__main__ import main
from coursepkg.grading.graded import read_graded
from coursepkg.grading.late import (
    COLUMNS,
    LateError,
    LatePolicy,
    LateSetup,
    decide,
    load_policy,
    parse_time,
    penalty_percent,
    read_ledger,
)
from coursepkg.grading.shards import merge

ROOT = Path(__file__).resolve().parents[1]
H = timedelta(hours=1)
DEADLINE = "2026-03-20T23:59:00+01:00"
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata",
         "America/Santiago"]
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True)

lateness = st.integers(min_value=-10 * 24 * 60, max_value=20 * 24 * 60).map(
    lambda m: timedelta(minutes=m))
policies = st.builds(
    LatePolicy,
    per=st.sampled_from(["day", "hour"]),
    percent=st.floats(0, 100),
    cap=st.floats(0, 100),
    grace=st.integers(0, 120).map(lambda m: timedelta(minutes=m)),
)


def test_a_day_started_is_a_day_charged_up_to_the_cap():
    policy = LatePolicy(per="day", percent=10, cap=50, grace=timedelta(minutes=15))
    deadline = parse_time(DEADLINE)
    for late, penalty in [(-H, 0), (timedelta(minutes=14), 0), (timedelta(minutes=16), 10),
                          (24 * H, 10), (24 * H + timedelta(seconds=1), 20), (30 * 24 * H, 50)]:
        decision = decide(40.0, deadline + late, deadline, 0, policy)
        assert decision.penalty == penalty, late
        assert decision.late_total == pytest.approx(40 * (1 - penalty / 100))
    hourly = LatePolicy(per="hour", percent=2, cap=100)
    assert penalty_percent(timedelta(minutes=61), hourly) == 4


@SETTINGS
@given(policies, lateness, lateness)
def test_the_penalty_is_monotone_in_lateness_and_bounded_by_the_cap(policy, a, b):
    a, b = sorted((a, b))
    deadline = parse_time(DEADLINE)
    first = decide(10.0, deadline + a, deadline, 0, policy)
    second = decide(10.0, deadline + b, deadline, 0, policy)
    assert 0 <= first.penalty <= second.penalty <= policy.cap
    assert second.late_total <= first.late_total <= 10.0
    assert second.late_total >= 10.0 * (1 - policy.cap / 100) - 1e-6


@SETTINGS
@given(policies, lateness, lateness, st.integers(0, 5))
def test_slip_days_keep_the_penalty_monotone_and_are_never_over_spent(policy, a, b, available):
    a, b = sorted((a, b))
    deadline = parse_time(DEADLINE)
    first = decide(10.0, deadline + a, deadline, available, policy)
    second = decide(10.0, deadline + b, deadline, available, policy)
    assert 0 <= first.slip_days <= available and 0 <= second.slip_days <= available
    assert first.penalty <= second.penalty <= policy.cap
    if second.slip_days * 24 * H >= b:  # covered: no penalty
        assert second.penalty == 0


@SETTINGS
@given(st.sampled_from(ZONES), st.sampled_from(ZONES),
       st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1),
                    timezones=st.just(UTC)),
       st.integers(-3 * 24 * 3600, 3 * 24 * 3600))
def test_lateness_is_absolute_time_whatever_the_zones(zone_a, zone_b, deadline, seconds):
    """The same instants written in other zones give the same lateness (and penalty)."""
    submitted = deadline + timedelta(seconds=seconds)
    policy = LatePolicy(per="hour", percent=1, cap=100)
    here = decide(5.0, submitted, deadline, 0, policy)
    there = decide(5.0, submitted.astimezone(ZoneInfo(zone_a)),
                   deadline.astimezone(ZoneInfo(zone_b)), 0, policy)
    assert here == there
    assert here.late == max(timedelta(seconds=seconds), timedelta(0))
    written = parse_time(submitted.astimezone(ZoneInfo(zone_a)).isoformat())
    assert written == submitted


@SETTINGS
@given(st.sampled_from(ZONES),
       st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1)))
def test_naive_local_times_are_read_in_the_policy_s_zone_or_refused(zone, naive):
    text = naive.isoformat()
    with pytest.raises(LateError, match="no UTC offset"):
        parse_time(text)
    try:
        moment = parse_time(text, zone)
    except LateError as error:  # the clocks skip it
        assert "does not exist" in str(error)
        assert naive.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC).astimezone(
            ZoneInfo(zone)).replace(tzinfo=None) != naive
        return
    assert moment.tzinfo == UTC
    assert moment.astimezone(ZoneInfo(zone)).replace(tzinfo=None) == naive


def test_daylight_saving_edges():
    paris = "Europe/Paris"  # 2026-03-29 02:00 -> 03:00; 2026-10-25 03:00 -> 02:00
    deadline = parse_time("2026-03-29T01:30", paris)
    assert decide(1.0, parse_time("2026-03-29T03:30", paris), deadline, 0,
                  LatePolicy()).late == H  # two hours on the clock, one in time
    with pytest.raises(LateError, match="does not exist in Europe/Paris"):
        parse_time("2026-03-29T02:30", paris)
    first = parse_time("2026-10-25T02:30", paris)  # ambiguous: the first of the two
    assert first == parse_time("2026-10-25T02:30+02:00")
    late = decide(1.0, parse_time("2026-10-25T02:15+01:00"), first, 0, LatePolicy()).late
    assert late == timedelta(minutes=45)  # earlier on the clock, later in time
    assert parse_time("2026-03-20T22:59:00Z") == parse_time(DEADLINE)


def write_policy(folder: Path, **settings) -> Path:
    lines = [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    path = folder / "late.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_policy_file_is_checked(tmp_path):
    path = write_policy(tmp_path, per="day", percent=10, cap=50, grace_minutes=15, slip_days=2,
                        ledger="slips.csv", timezone="Europe/Paris")
    policy = load_policy(path)
    assert policy == LatePolicy("day", 10.0, 50.0, timedelta(minutes=15), 2, tmp_path /
                                "slips.csv", "Europe/Paris")
    (tmp_path / "late.json").write_text(json.dumps({"per": "hour", "percent": 1}))
    assert load_policy(tmp_path / "late.json").per == "hour"
    for values, message in [({"per": "week"}, "give \"day\" or \"hour\""),
                            ({"percent": 120}, "between 0 and 100"),
                            ({"slip_days": 2}, "needs a ledger"),
                            ({"slip_days": -1, "ledger": "x.csv"}, "must not be negative"),
                            ({"timezone": "Mars/Olympus"}, "unknown time zone"),
                            ({"penalty": 3}, "unknown setting penalty"),
                            ({"percent": "ten"}, "must be a number")]:
        with pytest.raises(LateError, match=message):
            load_policy(write_policy(tmp_path, **values))


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["ada", "ben", "cy"]),
                          st.sampled_from(["01", "02", "03", "04"]),
                          st.integers(0, 5 * 24 * 60)), min_size=1, max_size=12),
       st.integers(0, 4))
def test_slip_days_are_booked_once_and_never_go_negative(tmp_path_factory, gradings, allowance):
    """Grade assignments in any order, any number of times: the ledger never books more than
    the allowance per student, never a negative day, and grading again books nothing new."""
    folder = tmp_path_factory.mktemp("ledger")
    policy = LatePolicy(percent=10, slip_days=allowance, ledger=folder / "slips.csv")
    deadline = parse_time(DEADLINE)
    for student, assignment, minutes in gradings:
        times = {student: deadline + timedelta(minutes=minutes)}
        setup = LateSetup(policy, deadline, {}, times)
        decisions = setup.apply(assignment, {student: 10.0})
        before = (folder / "slips.csv").read_bytes() if (folder / "slips.csv").exists() else b""
        assert setup.apply(assignment, {student: 10.0}) == decisions  # idempotent
        after = (folder / "slips.csv").read_bytes() if (folder / "slips.csv").exists() else b""
        assert after == before
        rows = read_ledger(folder / "slips.csv")
        assert all(days > 0 for _, _, days in rows)
        for name in {s for s, _, _ in rows}:
            assert sum(d for s, _, d in rows if s == name) <= allowance
        assert len({(s, a) for s, a, _ in rows}) == len(rows)


# ----------------------------------------------------------------------------- with the grader


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """Three copies of chapter 1's solution, their times, a policy with 2 slip days, a ledger
    where cy already spent one on an earlier assignment."""
    folder = tmp_path_factory.mktemp("late")
    subs = folder / "subs"
    subs.mkdir()
    for student in ("ada", "ben", "cy"):
        shutil.copy(ROOT / "solutions" / "01_ngrams.ipynb", subs / f"{student}.ipynb")
    deadline = parse_time(DEADLINE)
    times = {"ada": deadline - H, "ben": deadline + 26 * H, "cy": deadline + 49 * H}
    (subs / "submissions.csv").write_text(
        "student,submitted_at\n" + "".join(f"{s},{t.isoformat()}\n" for s, t in times.items()))
    (folder / "slips.csv").write_text("student,assignment,slip_days\ncy,00_intro,1\n")
    policy = write_policy(folder, per="day", percent=10, cap=50, grace_minutes=15, slip_days=2,
                          ledger="slips.csv")
    (folder / "secret").write_text(TEST_SECRET.hex() + "\n")
    return {"folder": folder, "subs": subs, "policy": policy, "deadline": deadline}


def grade_late(course, out: Path, *extra: str) -> int:
    return main(["grade", "01_ngrams", str(course["subs"]), "--out", str(out), "--secret",
                 str(course["folder"] / "secret"), "--deadline", DEADLINE, "--late-policy",
                 str(course["policy"]), *extra])


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    return {row["student"]: row for row in csv.DictReader(io.StringIO(
        (out / "grades.csv").read_text()))}


def last_run_cached(out: Path, n: int) -> bool:
    lines = (out / "log.jsonl").read_text().splitlines()[-n:]
    return all(json.loads(line)["cached"] for line in lines)


def test_the_gradebook_keeps_the_raw_total_beside_the_late_one(course, capsys):
    out = course["folder"] / "graded"
    assert grade_late(course, out) == 0
    assert "late policy: 2 late submissions, 3 slip days spent" in capsys.readouterr().out
    header = (out / "grades.csv").read_text().splitlines()[0].split(",")
    assert header[:4] == ["student", "total", "max", "file"]
    assert header[-len(COLUMNS) - 1:] == ["status", *COLUMNS]
    rows = gradebook(out)
    full = rows["ada"]["total"]
    assert float(full) > 0 and all(r["total"] == full for r in rows.values())  # raw: unchanged
    assert (rows["ada"]["late_minutes"], rows["ada"]["slip_days"], rows["ada"]["late_total"]) == (
        "0", "0", full)
    # ben: 26 h late, 2 slip days cover it
    assert (rows["ben"]["slip_days"], rows["ben"]["penalty_percent"]) == ("2", "0")
    assert rows["ben"]["late_total"] == full and rows["ben"]["late_minutes"] == str(26 * 60)
    # cy: 49 h late, 1 slip day left (one spent on 00_intro): 25 h charged, 2 days, 20 %
    assert (rows["cy"]["slip_days"], rows["cy"]["penalty_percent"]) == ("1", "20")
    assert float(rows["cy"]["late_total"]) == pytest.approx(float(full) * 0.8)
    assert rows["cy"]["submitted_at"] == "2026-03-22T23:59:00Z"
    assert rows["cy"]["deadline"] == "2026-03-20T22:59:00Z"
    ledger = (course["folder"] / "slips.csv").read_text()
    assert ledger == ("student,assignment,slip_days\nben,01_ngrams,2\ncy,00_intro,1\n"
                      "cy,01_ngrams,1\n")
    graded = read_graded(out)  # what the report and the exports read
    assert [s.student for s in graded.students] == ["ada", "ben", "cy"]
    assert graded.students[2].total == float(full)
    assert graded.students[2].final == pytest.approx(float(full) * 0.8)

    # Again: nothing runs (the cache), nothing is booked twice, the same bytes.
    before = (out / "grades.csv").read_bytes()
    assert grade_late(course, out) == 0
    assert last_run_cached(out, 3)
    assert (out / "grades.csv").read_bytes() == before
    assert (course["folder"] / "slips.csv").read_text() == ledger


def test_an_extension_recomputes_the_totals_without_running_a_notebook(course, tmp_path):
    out = course["folder"] / "graded"
    if not (out / "grades.csv").is_file():
        assert grade_late(course, out) == 0
    extensions = tmp_path / "extensions.csv"
    new = (course["deadline"] + 3 * 24 * H).astimezone(ZoneInfo("America/New_York"))
    extensions.write_text(f"student,deadline\ncy,{new.isoformat()}\n")
    assert grade_late(course, out, "--extensions", str(extensions)) == 0
    assert last_run_cached(out, 3)
    rows = gradebook(out)
    assert (rows["cy"]["slip_days"], rows["cy"]["penalty_percent"]) == ("0", "0")
    assert rows["cy"]["late_total"] == rows["cy"]["total"] and rows["cy"]["late_minutes"] == "0"
    assert rows["cy"]["deadline"] == "2026-03-23T22:59:00Z"
    assert (course["folder"] / "slips.csv").read_text() == (
        "student,assignment,slip_days\nben,01_ngrams,2\ncy,00_intro,1\n")
    assert grade_late(course, out) == 0  # the extension withdrawn: cy pays again
    assert gradebook(out)["cy"]["penalty_percent"] == "20"


def test_shards_with_a_late_policy_merge_to_the_unsharded_gradebook(course, tmp_path):
    out = course["folder"] / "graded"
    if not (out / "grades.csv").is_file():
        assert grade_late(course, out) == 0
    ledger_before = (course["folder"] / "slips.csv").read_bytes()
    for i in (1, 2):
        shutil.copytree(out / "cache", tmp_path / f"s{i}" / "cache")
        assert grade_late(course, tmp_path / f"s{i}", "--shard", f"{i}/2") == 0
    merge([tmp_path / "s1", tmp_path / "s2"], tmp_path / "merged")
    assert (tmp_path / "merged" / "grades.csv").read_bytes() == (out / "grades.csv").read_bytes()
    assert (course["folder"] / "slips.csv").read_bytes() == ledger_before


def test_gradescope_s_metadata_gives_the_time(course, tmp_path):
    metadata = tmp_path / "submission_metadata.json"
    late = (course["deadline"] + 2 * H).astimezone(ZoneInfo("America/Los_Angeles"))
    metadata.write_text(json.dumps({"id": 1, "created_at": late.isoformat(), "users": [
        {"email": "ada@example.edu", "id": 7, "name": "Ada"}]}))
    setup = LateSetup.load(DEADLINE, course["policy"], times=metadata)
    assert setup.submitted("anyone") == course["deadline"] + 2 * H


def test_mistakes_are_one_line_errors(course, tmp_path, capsys):
    out = tmp_path / "out"
    subs = str(course["subs"])
    cases = [
        (["--deadline", DEADLINE], "--deadline and --late-policy go together"),
        (["--late-policy", str(course["policy"])], "--deadline and --late-policy go together"),
        (["--extensions", "x.csv"], "need --deadline and --late-policy"),
        (["--deadline", "2026-03-20T23:59", "--late-policy", str(course["policy"])],
         "no UTC offset"),
        (["--deadline", "next friday", "--late-policy", str(course["policy"])],
         "not an ISO 8601 time"),
        (["--deadline", DEADLINE, "--late-policy", str(tmp_path / "none.toml")],
         "no such file"),
    ]
    for options, message in cases:
        assert main(["grade", "01_ngrams", subs, "--out", str(out), *options]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (options, err)
    bad = tmp_path / "times.csv"
    bad.write_text("student,submitted_at\nada,yesterday\n")
    assert main(["grade", "01_ngrams", subs, "--out", str(out), "--deadline", DEADLINE,
                 "--late-policy", str(course["policy"]), "--submitted", str(bad)]) == 2
    assert "times.csv, line 2: 'yesterday' is not an ISO 8601 time" in capsys.readouterr().err
    assert not out.exists()


def test_the_readme_s_policy_is_valid(tmp_path):
    import re

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```toml\n(.*?)```", readme, re.S)[1]
    (tmp_path / "late.toml").write_text(block)
    policy = load_policy(tmp_path / "late.toml")
    assert policy.slip_days and policy.ledger == tmp_path / "slip-days.csv" and policy.timezone


def late_copy(course, out: Path) -> Path:
    """Chapter 1's late class graded into ``out`` (from the module's cache when it has one)."""
    cache = course["folder"] / "graded" / "cache"
    if cache.is_dir():
        shutil.copytree(cache, out / "cache")
    assert grade_late(course, out) == 0
    return out


def test_the_student_the_lms_and_the_report_see_the_penalty(course, tmp_path, capsys):
    out = late_copy(course, tmp_path / "graded")
    capsys.readouterr()
    rows = gradebook(out)
    full, final = rows["cy"]["total"], rows["cy"]["late_total"]
    assert float(final) == pytest.approx(float(full) * 0.8)
    feedback = (out / "feedback" / "cy.md").read_text()
    line = (f"Late policy: submitted 2 days 1 h late; 1 slip day used; penalty 20%: {full} -> "
            f"{final}.")
    assert f"Score: {final} / {rows['cy']['max']}\n\n{line}\n" in feedback
    assert "Late policy: submitted 1 day 2 h late; 2 slip days used; no penalty: " in (
        out / "feedback" / "ben.md").read_text()
    ada = (out / "feedback" / "ada.md").read_text()
    assert "Late policy: submitted on time; no penalty: " in ada
    result = json.loads((out / "results" / "cy.json").read_text())
    assert result["score"] == float(final)  # what Gradescope shows
    said = line.removeprefix("Late policy: ")
    assert result["output"] == f"Raw score {full} / {rows['cy']['max']}; {said}"
    roster = tmp_path / "roster.csv"
    roster.write_text("student,email\nada,a@x.edu\nben,b@x.edu\ncy,c@x.edu\n")
    assert main(["export", "moodle", str(out), "--roster", str(roster), "--assignment-name",
                 "Ch1", "--out", str(tmp_path / "moodle.csv")]) == 0
    assert f"c@x.edu,{final}\n" in (tmp_path / "moodle.csv").read_text()
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "after late penalties" in page and "<h2>Late submissions</h2>" in page
    assert f"<td>cy</td><td>2 days 1 h</td><td class=\"n\">1</td><td class=\"n\">20%</td>" \
           f"<td class=\"n\">{full}</td><td class=\"n\">{final}</td>" in page


def published_scores(out: Path) -> dict[str, tuple]:
    """Each student's results score and output, and the feedback's score and late lines."""
    found = {}
    for student in ("ada", "ben", "cy"):
        result = json.loads((out / "results" / f"{student}.json").read_text())
        feedback = (out / "feedback" / f"{student}.md").read_text().splitlines()[:5]
        found[student] = (result["score"], result.get("output"), feedback)
    return found


def test_a_regrade_keeps_the_late_columns_and_books_nothing_twice(course, tmp_path, capsys):
    out = late_copy(course, tmp_path / "graded")
    run = json.loads((out / "run.json").read_text())
    assert run["late"]["deadline"] == "2026-03-20T22:59:00Z"
    assert run["late"]["submitted"]["cy"] == "2026-03-22T23:59:00Z"
    assert run["late"]["policy_text"] == Path(course["policy"]).read_text()
    ledger = course["folder"] / "slips.csv"
    before = (out / "grades.csv").read_bytes()
    published = published_scores(out)
    ledger_before = ledger.read_bytes()
    assert main(["regrade", str(out), "--task", "1.2"]) == 0
    assert (out / "grades.csv").read_bytes() == before
    assert published_scores(out) == published  # (a timed case's seconds may move: not compared)
    assert ledger.read_bytes() == ledger_before
    # the policy file may change later: the regrade applies the one the folder was graded with
    policy = Path(course["policy"])
    text = policy.read_text()
    try:
        policy.write_text(text.replace("percent = 10", "percent = 30"))
        assert main(["regrade", str(out), "--task", "1.3"]) == 0
        assert (out / "grades.csv").read_bytes() == before
    finally:
        policy.write_text(text)


def test_without_a_late_policy_every_output_is_as_before():
    """The made-up class's outputs without a late policy are the bytes the grader wrote before
    the penalty reached the feedback and results (tests/golden/made_up_class, from that grader;
    grades.csv in the header order of API.md); with a late entry only the score lines move."""
    from graded_support import CLASS, TASKS

    from coursepkg.grading.reporting import feedback_md, grades_csv, gradescope_json
    from coursepkg.grading.submission import Found

    golden = ROOT / "tests" / "golden" / "made_up_class"
    rows = []
    for student, (tasks, _) in CLASS.items():
        record = {"status": "graded", "problem": None, "notes": [], "tasks": tasks}
        found = Found(Path(f"{student}.ipynb"), student)
        rows.append((found, record))
        assert gradescope_json(record) == (golden / f"{student}.json").read_text(), student
        assert feedback_md(found, record) == (golden / f"{student}.md").read_text(), student
    assert grades_csv(rows, TASKS) == (golden / "grades.csv").read_text()

    entry = {"submitted_at": "2026-03-22T01:00:00Z", "deadline": "2026-03-20T23:00:00Z",
             "late_minutes": 26 * 60, "slip_days": 1, "penalty": 10.0, "grace_minutes": 0.0}
    late = [(found, {**record, "late": entry}) for found, record in rows]
    lines = grades_csv(late, TASKS).splitlines()
    assert lines[0] == (golden / "grades.csv").read_text().splitlines()[0] + "," + ",".join(
        COLUMNS)
    assert lines[1].endswith(",2026-03-22T01:00:00Z,2026-03-20T23:00:00Z,1560,1,10,9")  # ada
    found, record = late[0]
    result = json.loads(gradescope_json(record))
    old = json.loads((golden / "ada.json").read_text())
    assert result.pop("score") == 9 and result.pop("output") == (
        "Raw score 10 / 10; submitted 1 day 2 h late; 1 slip day used; penalty 10%: 10 -> 9.")
    del old["score"]
    assert result == old
    text = feedback_md(found, record)
    assert text.replace("Score: 9 / 10\n\nLate policy: submitted 1 day 2 h late; 1 slip day "
                        "used; penalty 10%: 10 -> 9.\n", "Score: 10 / 10\n") == (
        golden / "ada.md").read_text()
