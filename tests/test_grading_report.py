"""`coursepkg report`: the class report, one offline HTML page read from a graded folder."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from graded_support import CLASS, DEMO_ASSIGNMENT, demo_graded, write_graded

from coursepkg.__main__ import main
from coursepkg.grading.graded import GradedError, read_graded
from coursepkg.grading.report import build_report, first_sentence, write_report


@pytest.fixture()
def made_up(tmp_path) -> Path:
    return write_graded(tmp_path / "graded")


def section(page: str, title: str) -> str:
    """The HTML from the heading ``title`` to the next h2."""
    start = page.index(f"<h2>{title}</h2>")
    end = page.find("<h2>", start + 1)
    return page[start:end if end > 0 else None]


def table_rows(html: str) -> list[list[str]]:
    """The cells (tags removed) of every row of the tables in ``html``."""
    return [[re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", html, re.S)]


def test_the_graded_folder_is_read_back_with_the_grader_s_words(made_up):
    graded = read_graded(made_up)
    assert graded.tasks == [("9.1", "count_words"), ("9.2", "train_tagger")]
    assert [row.student for row in graded.students] == list(CLASS)
    ben = graded.students[1]
    assert (ben.total, ben.max, ben.status) == (4, 10, "partial")
    assert ben.task_status == {"9.1": "partial", "9.2": "partial"}
    assert [(c.name, c.hidden, c.status) for c in ben.cases if c.task == "9.1"] == [
        ("one sentence", False, "passed"), ("two sentences", False, "passed"),
        ("hidden test 3", True, "failed"), ("hidden test 4", True, "failed")]
    assert ben.cases[-1].message == "Accuracy 0.88: 0.85 or more earns half."
    assert graded.task_max("9.1") == 6 and graded.task_max("9.2") == 4
    assert ben.leaderboard == [{"name": "accuracy", "value": 0.88, "order": "desc"}]


def test_the_page_counts_statuses_rates_and_messages(made_up):
    page = build_report(read_graded(made_up))
    assert "<p>Submissions: 1 passed, 3 partial, 1 not attempted.</p>" in page
    rows = table_rows(section(page, "Status counts"))
    assert rows[0] == ["task", "function", "max", "passed", "partial", "error", "timeout",
                       "not attempted", "public cases passed", "hidden cases passed"]
    # 9.1: ada passed, ben and dan partial, zed error, cy not attempted; public 5 of 10 passed
    assert rows[1] == ["9.1", "count_words", "6", "1", "2", "1", "", "1", "50%", "20%"]
    assert rows[2] == ["9.2", "train_tagger", "4", "2", "1", "", "1", "1", "40%", "-"]
    rates = {(r[0], r[1]): r[3] for r in table_rows(section(page, "Pass rate per case"))[1:]}
    assert rates[("9.1", "two sentences")] == "3 / 5" and rates[("9.1", "hidden test 3")] == "1 / 5"
    failures = section(page, "Most common failure messages")
    rows = table_rows(failures[:failures.index("<h3>9.2")])
    # one mistake, two students, two different data details: counted once, by first sentence
    assert rows[1] == ["2", "failed", "Count &#x27;&lt;/s&gt;&#x27; too."]
    assert len(rows) == 4  # header, the mistake, zed's error, cy's not attempted


def test_the_leaderboard_ranks_the_capstone_metric_and_is_absent_without_one(tmp_path, made_up):
    page = build_report(read_graded(made_up))
    board = table_rows(section(page, "Leaderboard"))
    assert board == [["rank", "student", "accuracy"], ["1", "ada", "0.97"], ["2", "zed", "0.93"],
                     ["3", "ben", "0.88"]]
    plain = build_report(read_graded(write_graded(tmp_path / "plain", leaderboard=False)))
    assert "Leaderboard" not in plain


def test_the_page_is_self_contained_and_escapes_what_students_wrote(made_up):
    page = build_report(read_graded(made_up))
    assert "<script" not in page and "alert(&#x27;x&#x27;)" in page
    # only references inside the page (SVG's xlink:href="#m1", url(#clip1))
    assert not re.search(r"""(src|href)=["'](?!#)|<link|@import|url\((?!#)""", page)
    assert page.count("<svg") == 2 and "font-face" not in page


def test_same_folder_same_bytes(made_up, tmp_path):
    first = write_report(made_up).read_bytes()
    copy = shutil.copytree(made_up, tmp_path / "copy" / made_up.name)
    (copy / "report.html").unlink()
    second = write_report(copy, tmp_path / "again.html").read_bytes()
    assert first.replace(str(made_up).encode(), b"X") == second.replace(str(copy).encode(), b"X")
    assert write_report(made_up).read_bytes() == first


def test_first_sentence_drops_one_case_s_data():
    assert first_sentence("Count '</s>' too. counts[('a',)]: expected 2, got 1.") == \
        "Count '</s>' too."
    assert first_sentence("raised ValueError: math domain error. math.log got 0") == \
        "raised ValueError: math domain error."


def test_the_demo_batch_s_report_end_to_end(tmp_path_factory, capsys):
    graded = demo_graded(tmp_path_factory)
    out = graded.parent / "class.html"
    assert main(["report", str(graded), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    page = out.read_text(encoding="utf-8")
    assert f"<h1>Class report: {DEMO_ASSIGNMENT}</h1>" in page
    assert "1 passed" in page and "1 failed" in page  # the untouched debug task fails
    students = read_graded(graded).students
    rates = table_rows(section(page, "Pass rate per case"))[1:]
    assert {r[3].split(" / ")[1] for r in rates} == {str(len(students))}
    assert any(r[2] == "hidden" for r in rates) and any(r[2] == "public" for r in rates)
    assert "Leaderboard" not in page  # no chapter records a metric yet


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: [str(tmp / "nowhere")], "no such folder"),
        (lambda tmp: [str(tmp)], "is not a graded folder (no grades.csv)"),
        (lambda tmp: [str(tmp / "bad")], "does not look like the grader's"),
        (lambda tmp: [str(tmp / "graded"), "--out", str(tmp)], "is a folder"),
        (lambda tmp: [str(tmp / "empty")], "has no submissions: nothing to report"),
    ],
)
def test_bad_folders_are_one_line_errors_exit_2(tmp_path, capsys, make, expected):
    write_graded(tmp_path / "graded")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "grades.csv").write_text("name,points\nada,3\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "grades.csv").write_text("student,file,1.1 f,total,max,status\n")
    code = main(["report", *make(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err


def test_a_missing_results_file_names_the_fix(made_up):
    (made_up / "results" / "ben.json").unlink()
    with pytest.raises(GradedError, match=r"ben.json is missing or damaged: grade again"):
        read_graded(made_up)


def test_make_grade_demo_also_writes_the_report():
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ngrade-demo:", 1)[1].split("\n\n", 1)[0]
    assert "coursepkg grade-demo $(ASSIGNMENT) --dir grade-demo" in recipe
    assert recipe.index("coursepkg report grade-demo/graded") > recipe.index("grade-demo $(")
