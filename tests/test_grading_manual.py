"""Written answers graded by hand (issue 24, item 5): authoring keeps the answer cell empty,
`coursepkg grade` writes one anonymous sheet per question and a points file, and
`coursepkg grade --manual points.csv` merges the marks into totals, gradebook, feedback,
Gradescope results and exports, refusing every mistake in one line.

The batch is chapter 1 with every task an untouched stub (nothing is timed): what differs from
notebook to notebook is the answers to questions 1.W1 and 1.W2.
"""

import copy
import csv
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from checks_support import TEST_SECRET

from coursepkg import authoring
from coursepkg.__main__ import main
from coursepkg.checks import tasks_for
from coursepkg.checks.core import write_secret
from coursepkg.grading import manual

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS_WITH_QUESTIONS = ["01_ngrams", "02_rnn", "03_attention", "04_self_attention",
                           "05_multihead", "06_positional", "07_transformer"]

W1 = "The perplexity falls: rare words become one frequent token.\nNot a better model."
# student -> answers; ids that no page may show (none is a substring of the pages' own words)
ANSWERS = {
    "s-ana-4711": {"1.W1": W1, "1.W2": "The gradient is softmax minus the frequencies."},
    "s-bob-4712": {"1.W1": "  The perplexity   falls: rare words become one\n frequent token. "
                           "Not a better model.  ", "1.W2": "It is the MLE."},
    "s-cid-4713": {"1.W1": "It rises, <script>alert(1)</script> & the model is worse."},
    "s-dot-4714": {},
}


def notebook(answers: dict[str, str]) -> nbformat.NotebookNode:
    """Chapter 1's exercise cut down to its stubs and its written cells, answered."""
    exercise = nbformat.read(ROOT / "exercises" / "01_ngrams.ipynb", as_version=4)
    stubs = "".join(
        f"def {task.func_name}(*args):\n    raise NotImplementedError('Task {task.id}')\n"
        for task in tasks_for("01_ngrams")
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(stubs)]
    for cell in exercise.cells:
        if "written" in cell.metadata:
            cell = copy.deepcopy(cell)
            cell.source = answers.get(cell.metadata["written"]["id"], cell.source)
            nb.cells.append(cell)
    return nb


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def points_rows(out: Path) -> list[dict]:
    return list(csv.DictReader((out / "manual" / "points.csv").open()))


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Path:
    subs = tmp_path_factory.mktemp("subs")
    for student, answers in ANSWERS.items():
        nbformat.write(notebook(answers), subs / f"{student}.ipynb")
    return subs


@pytest.fixture(scope="module")
def graded(batch, tmp_path_factory) -> tuple[Path, str]:
    """The batch graded without a secret and without marks; and what the command printed."""
    out = tmp_path_factory.mktemp("graded") / "out"
    assert main(["grade", "01_ngrams", str(batch), "--out", str(out), "--timeout", "10"]) == 0
    return out


# ------------------------------------------------------------------------------ authoring


def solution_with(metadata: dict, source: str = "The model answer.") -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("**Question.** Why?"),
                nbformat.v4.new_markdown_cell(source, metadata=metadata)]
    return nb


def test_authoring_turns_the_model_answer_into_an_empty_answer_cell():
    meta = {"tags": ["written"], "written": {"id": "0.W1", "points": 2}}
    exercise = authoring.make_exercise(solution_with(meta), assignment="00_x", tasks={})
    question, answer = exercise.cells[2], exercise.cells[3]
    assert question.source == "**Question.** Why?"
    assert answer.cell_type == "markdown" and answer.source == authoring.WRITTEN_PLACEHOLDER
    assert answer.metadata["tags"] == ["written"] and answer.metadata["written"] == meta["written"]
    again = authoring.make_exercise(exercise, assignment="00_x", tasks={})
    assert authoring.notebook_bytes(again) == authoring.notebook_bytes(exercise)


@pytest.mark.parametrize(
    "metadata",
    [
        {"tags": ["written"]},
        {"tags": ["written"], "written": {"id": "0.W1"}},
        {"tags": ["written"], "written": {"id": "0.W1", "points": 0}},
        {"tags": ["written"], "written": {"id": "../x", "points": 1}},
        {"tags": ["written"], "written": {"id": "0.W1", "points": "2"}},
    ],
)
def test_a_written_cell_without_an_id_and_points_is_an_authoring_error(metadata):
    with pytest.raises(authoring.AuthoringError, match="needs metadata written"):
        authoring.make_exercise(solution_with(metadata), assignment="00_x", tasks={})


def test_a_written_id_is_used_once():
    nb = solution_with({"tags": ["written"], "written": {"id": "0.1", "points": 1}})
    with pytest.raises(authoring.AuthoringError, match="already taken"):
        authoring.make_exercise(nb, assignment="00_x", tasks={"f": "0.1"})


@pytest.mark.parametrize("stem", CHAPTERS_WITH_QUESTIONS)
def test_the_chapters_ask_written_questions_and_the_exercises_leave_them_empty(stem):
    questions = manual.questions_for(stem)
    assert 1 <= len(questions) <= 2
    for question in questions:
        assert question.text.startswith(f"**Question {question.id} (written, ")
        assert len(question.model) > 200 and question.points in (1, 2)
    exercise = json.loads((ROOT / "exercises" / f"{stem}.ipynb").read_text())
    cells = [c for c in exercise["cells"] if "written" in c["metadata"]]
    assert [c["metadata"]["written"]["id"] for c in cells] == [q.id for q in questions]
    assert all("".join(c["source"]) == authoring.WRITTEN_PLACEHOLDER for c in cells)


# ------------------------------------------------------------------------------ the sheets


def test_each_question_gets_an_anonymous_sheet_with_identical_answers_grouped(graded):
    sheet = (graded / "manual" / "1.W1.html").read_text()
    rows = points_rows(graded)
    anon = {r["anonymous_id"] for r in rows}
    assert len(anon) == 4 and all(a.startswith("A") and len(a) == 11 for a in anon)
    points = (graded / "manual" / "points.csv").read_text()
    for student in ANSWERS:
        assert student not in sheet and student not in points
    # ana's and bob's answers differ only in whitespace: one group holding both ids
    assert sheet.count("(2 identical answers)") == 1
    assert "3 answers in 2 groups" in sheet and "1 without an answer" in sheet
    assert "<script>" not in sheet and "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in sheet
    assert "Question 1.W1 (2 points)" in sheet and "Model answer" in sheet
    assert "http" not in sheet.replace("http-equiv", "")  # nothing from other hosts
    w2 = (graded / "manual" / "1.W2.html").read_text()
    assert "2 answers in 2 groups" in w2 and "2 without an answer" in w2
    assert [r["question"] for r in rows] == ["1.W1"] * 4 + ["1.W2"] * 4
    assert all(r["points"] == "" and r["comment"] == "" for r in rows)


def test_the_gradebook_stays_the_autograders_until_the_marks_are_merged(graded, capsys, batch):
    header = (graded / "grades.csv").read_text().splitlines()[0]
    assert "written" not in header
    code, out, _ = run(capsys, "grade", "01_ngrams", batch, "--out", graded, "--timeout", "10")
    assert code == 0
    assert "written answers: 5 answers to questions 1.W1, 1.W2 await hand grading" in out


def test_the_sheets_are_reproducible(graded, batch, tmp_path):
    before = {p.name: p.read_bytes() for p in (graded / "manual").iterdir()}
    assert main(["grade", "01_ngrams", str(batch), "--out", str(graded)]) == 0
    assert {p.name: p.read_bytes() for p in (graded / "manual").iterdir()} == before
    # with a secret the anonymous ids come from it: another folder, the same bytes
    secret = tmp_path / "secret"
    write_secret(secret, TEST_SECRET)
    pages = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["grade", "01_ngrams", str(batch), "--out", str(out), "--secret",
                     str(secret)]) == 0
        assert not (out / manual.SALT_FILE).exists()
        pages.append({p.name: p.read_bytes() for p in (out / "manual").iterdir()})
    assert pages[0] == pages[1]


def test_an_existing_points_file_is_never_overwritten(graded, batch, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(graded, out)
    rows = (out / "manual" / "points.csv").read_text().splitlines()
    first = rows[1].split(",")
    rows[1] = ",".join([first[0], first[1], "1", "kept"])
    del rows[-1]  # an answer's row the instructor deleted comes back, at the end
    (out / "manual" / "points.csv").write_text("\n".join(rows) + "\n")
    assert main(["grade", "01_ngrams", str(batch), "--out", str(out)]) == 0
    now = (out / "manual" / "points.csv").read_text().splitlines()
    assert now[:-1] == rows and now[1].endswith(",1,kept") and len(now) == 9


# ------------------------------------------------------------------------------ merging


def marked(graded: Path, tmp_path: Path) -> Path:
    """The points file filled in: 1.W1 from its sheet's groups, 1.W2 half pending."""
    rows = points_rows(graded)
    for row in rows:
        if row["question"] == "1.W1":
            row["points"], row["comment"] = "2", "=Right: one frequent token."
        elif rows.index(row) % 2:
            row["points"] = "0.5"
    path = tmp_path / "points.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=manual.POINTS_HEADER, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_merged_marks_reach_totals_gradebook_feedback_results_and_exports(
    graded, batch, tmp_path, capsys
):
    out = tmp_path / "out"
    shutil.copytree(graded, out)
    before = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open())}
    points = marked(graded, tmp_path)
    code, printed, _ = run(capsys, "grade", "01_ngrams", batch, "--out", out, "--manual", points)
    assert code == 0 and "written answers: 6 marks merged" in printed
    assert "2 pending (counted 0)" in printed
    rows = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open())}
    header = (out / "grades.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["student", "total", "max"]
    assert header[-3:] == ["status", "1.W1 written", "1.W2 written"]
    anon = manual.anonymous_ids(manual.manual_key(out, None), list(ANSWERS))
    w2 = {r["anonymous_id"]: r["points"] for r in csv.DictReader(points.open())
          if r["question"] == "1.W2"}
    for student, row in rows.items():
        assert row["1.W1 written"] == "2"
        assert row["1.W2 written"] == w2[anon[student]]
        got = float(before[student]["total"]) + 2 + float(w2[anon[student]] or 0)
        assert float(row["total"]) == got
        assert float(row["max"]) == float(before[student]["max"]) + 3
        assert row["status"] == "partial"
        feedback = (out / "feedback" / f"{student}.md").read_text()
        assert "## Written answer 1.W1: 2 / 2 (graded by hand)\n\n=Right: one frequent" in feedback
        result = json.loads((out / "results" / f"{student}.json").read_text())
        tests = {t["name"]: t for t in result["tests"]}
        assert tests["Written answer 1.W1"]["score"] == 2
        assert tests["Written answer 1.W1"]["output"].startswith("graded by hand. =Right")
        assert result["score"] == got and result["max_score"] == float(row["max"])
        if w2[anon[student]] == "":
            assert "## Written answer 1.W2: pending / 1 (not graded yet)" in feedback
            assert tests["Written answer 1.W2"]["output"] == "pending. Not graded yet."
    # the report and the exports read the merged gradebook
    assert main(["report", str(out)]) == 0
    roster = tmp_path / "roster.csv"
    roster.write_text("student,canvas_id\n" + "".join(f"{s},{i}\n" for i, s in enumerate(ANSWERS)))
    code, _, _ = run(capsys, "export", "canvas", out, "--roster", roster, "--assignment-name",
                     "Chapter 1", "--out", tmp_path / "canvas.csv")
    assert code == 0
    exported = (tmp_path / "canvas.csv").read_text()
    assert f",{rows['s-ana-4711']['total']}\n" in exported.replace('"', "")
    # a regrade keeps the marks
    assert main(["regrade", str(out), "--task", "1.2"]) == 0
    assert (out / "grades.csv").read_text().splitlines()[0].split(",") == header
    assert {r["student"]: r for r in csv.DictReader((out / "grades.csv").open())} == rows


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda rows: rows[1].__setitem__(2, "3"), "line 2: 3 points for 1.W1, whose maximum is 2"),
        (lambda rows: rows[1].__setitem__(2, "-1"), "line 2: points '-1' must be a number >= 0"),
        (lambda rows: rows[1].__setitem__(2, "two"), "line 2: points 'two' is not a number"),
        (lambda rows: rows[1].__setitem__(2, "nan"), "line 2: points 'nan' must be a number"),
        (lambda rows: rows[2].__setitem__(0, "1.W9"), "line 3: unknown question '1.W9'"),
        (lambda rows: rows[2].__setitem__(1, "Adeadbeef00"),
         "line 3: unknown anonymous id 'Adeadbeef00'"),
        (lambda rows: rows.append(list(rows[1])), "line 10: a second row for 1.W1"),
        (lambda rows: rows[0].__setitem__(2, "score"), "the first line must be question,"),
    ],
)
def test_mistakes_in_the_points_file_are_refused_in_one_line(graded, batch, tmp_path, capsys,
                                                             edit, words):
    out = tmp_path / "out"
    shutil.copytree(graded, out)
    rows = list(csv.reader((graded / "manual" / "points.csv").open()))
    edit(rows)
    points = tmp_path / "points.csv"
    with points.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code, _, err = run(capsys, "grade", "01_ngrams", batch, "--out", out, "--manual", points)
    assert code == 2 and words in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_marks_for_an_assignment_without_written_questions_are_refused(tmp_path, capsys,
                                                                       monkeypatch):
    # every chapter has written questions: an assignment without them is made up here
    monkeypatch.setattr(manual, "questions_for", lambda assignment, solutions=None: [])
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(nb, tmp_path / "a.ipynb")
    (tmp_path / "points.csv").write_text("question,anonymous_id,points,comment\n")
    code, _, err = run(capsys, "grade", "05_multihead", tmp_path / "a.ipynb", "--out",
                       tmp_path / "out", "--manual", tmp_path / "points.csv")
    assert code == 2 and "05_multihead has no written questions" in err


# ------------------------------------------------------------------------------ shards


def shard_folders(batch: Path, tmp_path: Path, secret: Path | None) -> tuple[dict, Path]:
    """The batch graded unsharded and as 3 shards (1: cid; 2: bob, dot; 3: ana: the identical
    answers of ana and bob fall in two shards), the shards from the unsharded run's cache."""
    key = ["--secret", str(secret)] if secret else []
    whole = tmp_path / "whole"
    assert main(["grade", "01_ngrams", str(batch), "--out", str(whole), *key]) == 0
    shards = {}
    for i in (1, 2, 3):
        shards[i] = tmp_path / f"shard-{i}"
        shutil.copytree(whole / "cache", shards[i] / "cache")
        assert main(["grade", "01_ngrams", str(batch), "--out", str(shards[i]), "--shard",
                     f"{i}/3", *key]) == 0
    return shards, whole


def folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_merged_shards_sheets_equal_an_unsharded_run_s(batch, tmp_path, capsys):
    from coursepkg.grading.shards import merge

    secret = tmp_path / "secret"
    write_secret(secret, TEST_SECRET)
    shards, whole = shard_folders(batch, tmp_path, secret)
    assert [len(json.loads((shards[i] / "shard.json").read_text())["students"])
            for i in (1, 2, 3)] == [1, 2, 1]
    merged = tmp_path / "merged"
    merge([shards[3], shards[1], shards[2]], merged)
    expected = folder_files(whole / "manual")
    assert folder_files(merged / "manual") == expected
    assert "(2 identical answers)" in expected["1.W1.html"].decode()  # ana's and bob's
    assert (merged / manual.ANSWERS_FILE).read_bytes() == (whole / manual.ANSWERS_FILE).read_bytes()
    assert (merged / "grades.csv").read_bytes() == (whole / "grades.csv").read_bytes()
    for name in ("results", "feedback"):
        assert folder_files(merged / name) == folder_files(whole / name)

    # marks made in a shard's points.csv are carried over; a student marked in two is refused
    rows = list(csv.reader((shards[2] / "manual" / "points.csv").open()))
    rows[1][2:] = ["1.5", "partly"]
    with (shards[2] / "manual" / "points.csv").open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    again = tmp_path / "again"
    merge(list(shards.values()), again)
    merged_rows = list(csv.reader((again / "manual" / "points.csv").open()))
    assert [rows[1][0], rows[1][1], "1.5", "partly"] in merged_rows
    assert len(merged_rows) == len(list(csv.reader((whole / "manual" / "points.csv").open())))
    other = list(csv.reader((shards[3] / "manual" / "points.csv").open()))
    other.append([rows[1][0], rows[1][1], "2", ""])
    with (shards[3] / "manual" / "points.csv").open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(other)
    capsys.readouterr()
    code, _, err = run(capsys, "merge", *shards.values(), "--out", tmp_path / "third")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"both have marks for {rows[1][1]}: keep them in one shard's file" in err
    assert not (tmp_path / "third").exists()


def test_shards_anonymised_with_different_keys_are_refused(batch, tmp_path, capsys):
    shards, _ = shard_folders(batch, tmp_path, None)  # no --secret: a salt per shard
    capsys.readouterr()
    code, _, err = run(capsys, "merge", *shards.values(), "--out", tmp_path / "merged")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "anonymised the written answers with different keys" in err
    assert "grade every shard with the same --secret FILE" in err


def test_shards_from_an_older_coursepkg_without_the_answers_file_are_refused(
    batch, tmp_path, capsys
):
    # an older coursepkg wrote manual/ but not the answers the sheets came from: merging them
    # must not drop the sheets silently
    secret = tmp_path / "secret"
    write_secret(secret, TEST_SECRET)
    shards, _ = shard_folders(batch, tmp_path, secret)
    for folder in shards.values():
        (folder / manual.ANSWERS_FILE).unlink()
    capsys.readouterr()
    code, _, err = run(capsys, "merge", *shards.values(), "--out", tmp_path / "merged")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"manual/) but no {manual.ANSWERS_FILE}" in err
    assert "graded by an older coursepkg; run its grade command again" in err
    assert not (tmp_path / "merged").exists()
