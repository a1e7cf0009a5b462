"""`coursepkg export {canvas,moodle}`: the class's totals in the files the LMSs import.

Golden files: tests/golden/export_canvas.csv and export_moodle.csv are the exports of the made-up
class of graded_support.py with ROSTER below (eve has no submission: an empty cell; zed is
graded but not in the roster: left out; dan's name is a spreadsheet formula: neutralised).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from graded_support import demo_graded, write_graded

from coursepkg.__main__ import main
from coursepkg.grading.export import RosterError, canvas_csv, moodle_csv, read_roster
from coursepkg.grading.graded import read_graded

GOLDEN = Path(__file__).resolve().parent / "golden"
ROSTER = """student,name,canvas_id,sis_user_id,sis_login_id,section,email
ada,"Lovelace, Ada",101,S-0101,ada.l,Tuesday lab,ada@example.edu
ben,"Okafor, Ben",102,S-0102,ben.o,Tuesday lab,ben@example.edu
cy,"Tan, Cy",103,,,Thursday lab,cy@example.edu
dan,"=HYPERLINK(""http://x.example"",""Dan"")",104,S-0104,dan.k,-Thursday,dan@example.edu
eve,"Moreau, Eve",105,S-0105,eve.m,Thursday lab,eve@example.edu
"""


@pytest.fixture()
def folders(tmp_path) -> tuple[Path, Path]:
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    return write_graded(tmp_path / "graded"), tmp_path / "roster.csv"


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_canvas_matches_its_golden_file(folders):
    graded, roster = folders
    result = canvas_csv(read_graded(graded, details=False), read_roster(roster),
                        "Week 9: tagging", "4321")
    assert result.text == (GOLDEN / "export_canvas.csv").read_text(encoding="utf-8")
    assert (result.exported, result.no_submission, result.not_in_roster) == (
        ["ada", "ben", "cy", "dan"], ["eve"], ["zed"])


def test_moodle_matches_its_golden_file(folders):
    graded, roster = folders
    result = moodle_csv(read_graded(graded, details=False), read_roster(roster), "Week 9: tagging")
    assert result.text == (GOLDEN / "export_moodle.csv").read_text(encoding="utf-8")
    assert (result.no_submission, result.not_in_roster) == (["eve"], ["zed"])


def test_canvas_rows_the_way_canvas_reads_them(folders):
    graded, roster = folders
    text = canvas_csv(read_graded(graded, details=False), read_roster(roster), "Week 9").text
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Week 9"]
    assert rows[1] == ["Points Possible", "", "", "", "", "10"]
    by_id = {row[1]: row for row in rows[2:]}
    assert by_id["101"][-1] == "10" and by_id["103"][-1] == "0"  # cy submitted nothing useful
    assert by_id["105"][-1] == ""  # eve submitted nothing at all: empty, not 0
    assert by_id["104"][0].startswith("'=") and by_id["104"][4] == "'-Thursday"


def test_the_command_writes_the_file_lists_who_is_missing_and_exits_1_for_the_unlisted(
    folders, tmp_path, capsys
):
    graded, roster = folders
    out = tmp_path / "canvas.csv"
    code, stdout, err = run_main(capsys, "export", "canvas", str(graded), "--roster", str(roster),
                                 "--assignment-name", "Week 9: tagging", "--assignment-id",
                                 "4321", "--out", str(out))
    assert code == 1
    assert out.read_text() == (GOLDEN / "export_canvas.csv").read_text()
    assert stdout.strip() == f"wrote {out}: 4 grades for Canvas"
    assert "no submission from eve (their cells are empty, not 0)" in err
    assert "not in the roster, so not exported: zed" in err
    with roster.open("a") as f:
        f.write("zed,Zed,106,,,,zed@example.edu\n")
    code, _, err = run_main(capsys, "export", "moodle", str(graded), "--roster", str(roster),
                            "--assignment-name", "Week 9", "--out", str(out))
    assert code == 0 and "not in the roster" not in err
    assert out.read_text().splitlines()[-1] == "zed@example.edu,4"


@pytest.mark.parametrize(
    ("roster", "extra", "expected"),
    [
        ("name,email\nAda,ada@x\n", [], "has no 'student' column"),
        ("student,mail\nada,ada@x\n", [], "unknown column 'mail'"),
        ("student,email\nada,a@x\nada,b@x\n", [], "student 'ada' is listed twice"),
        ("student,email\nada,\n", [], "has no email for ada"),
        ("student,email\nada,a@x\nben,a@x\n", [], "email 'a@x' belongs to more than one"),
        ("student,email\n", [], "lists no students"),
        ("student,email\nada,a@x\n", ["--match", "idnumber"], "has no idnumber for ada"),
        ("student,email\nada,a@x\n", ["--assignment-id", "3"], "--assignment-id is for Canvas"),
    ],
)
def test_bad_rosters_are_one_line_errors_exit_2(folders, tmp_path, capsys, roster, extra,
                                                expected):
    graded, path = folders
    path.write_text(roster, encoding="utf-8")
    out = tmp_path / "moodle.csv"
    code, _, err = run_main(capsys, "export", "moodle", str(graded), "--roster", str(path),
                            "--assignment-name", "W", "--out", str(out), *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert expected in err and err.startswith("coursepkg: error: "), err
    assert not out.exists()


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda g, r, t: [str(t / "nowhere"), "--roster", str(r)], "no such folder"),
        (lambda g, r, t: [str(t), "--roster", str(r)], "is not a graded folder"),
        (lambda g, r, t: [str(g), "--roster", str(t / "none.csv")], "no roster file"),
        (lambda g, r, t: [str(g), "--roster", str(r), "--match", "email"], "--match is for Moodle"),
        (lambda g, r, t: [str(g)], "the following arguments are required: --roster"),
    ],
)
def test_bad_folders_and_options_are_one_line_errors_exit_2(folders, tmp_path, capsys, make,
                                                            expected):
    graded, roster = folders
    args = [*make(graded, roster, tmp_path), "--assignment-name", "W", "--out",
            str(tmp_path / "x.csv")]
    code, _, err = run_main(capsys, "export", "canvas", *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err


def test_a_canvas_row_needs_a_canvas_identity(folders):
    graded, roster = folders
    rows = read_roster(roster)
    rows[2].update(canvas_id="", sis_user_id="", sis_login_id="")
    with pytest.raises(RosterError, match="no Canvas identity for cy: fill canvas_id"):
        canvas_csv(read_graded(graded, details=False), rows, "W")


def test_the_help_documents_the_roster(capsys):
    code, out, _ = run_main(capsys, "export", "--help")
    assert code == 0
    for column in ("student", "canvas_id", "sis_user_id", "sis_login_id", "section", "email",
                   "idnumber", "username"):
        assert f"\n  {column} " in out


def test_the_demo_batch_exports_end_to_end(tmp_path_factory, tmp_path, capsys):
    graded = demo_graded(tmp_path_factory)
    grades = {row.student: row.total for row in read_graded(graded, details=False).students}
    roster = tmp_path / "roster.csv"
    lines = ["student,email"] + [f"{s},{s}@example.edu" for s in sorted(grades)]
    roster.write_text("\n".join([*lines, "no-show,no-show@example.edu"]) + "\n")
    out = tmp_path / "moodle.csv"
    code, _, err = run_main(capsys, "export", "moodle", str(graded), "--roster", str(roster),
                            "--assignment-name", "Attention", "--out", str(out))
    assert code == 0 and "no submission from no-show" in err
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["Email address", "Attention"]
    assert {r[0].split("@")[0]: r[1] for r in rows[1:]} == {
        **{s: f"{g:g}" for s, g in grades.items()}, "no-show": ""}
    assert grades["sol-full-marks"] > 0 and grades["ed-untouched"] == 0


def test_the_gradebook_is_read_by_column_name(folders):
    """Readers go by column name, never position: the same gradebook with its columns in
    another order reads the same (and a late policy's late_total is what is exported)."""
    graded, roster = folders
    before = read_graded(graded, details=False).students
    rows = list(csv.reader(io.StringIO((graded / "grades.csv").read_text())))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([row[::-1] for row in rows])
    (graded / "grades.csv").write_text(buf.getvalue())
    assert read_graded(graded, details=False).students == before
    late = [rows[0] + ["submitted_at", "deadline", "late_minutes", "slip_days",
                       "penalty_percent", "late_total"]]
    late += [row + ["", "2026-03-20T22:59:00Z", "0", "0", "50", "0.5"] for row in rows[1:]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(late)
    (graded / "grades.csv").write_text(buf.getvalue())
    students = read_graded(graded, details=False).students
    assert [(s.total, s.final) for s in students] == [(s.total, 0.5) for s in before]
    text = moodle_csv(read_graded(graded, details=False), read_roster(roster), "Week 9").text
    assert "ada@example.edu,0.5\n" in text
