"""`coursepkg regrade DIR --task ID`: after one task's cases change, only that task runs again,
the gradebook equals a fresh grading with the new cases, and changes.csv lists exactly the
students whose points moved.

The batch is small and built here (chapter 1; task 1.1 written three ways, task 1.2 right or
missing, every other task an untouched stub, so nothing is timed); the instructor's change is an
extra case of task 1.1 in a ``--tests`` file that is edited between the grading and the regrade.
"""

import csv
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from checks_support import TEST_SECRET

from coursepkg.__main__ import main
from coursepkg.checks import tasks_for
from coursepkg.checks.core import secret_digest, write_secret
from coursepkg.grading.regrade import load_run

COUNT_RIGHT = """
from collections import Counter
def count_ngrams(sentences, n):
    counts = Counter()
    for sentence in sentences:
        padded = ["<s>"] * (n - 1) + list(sentence) + ["</s>"]
        for i in range(len(padded) - n + 1):
            counts[tuple(padded[i:i + n])] += 1
    return dict(counts)
"""
# Right on the public cases (all of them have n <= 3), wrong from n = 4 on: the extra case of
# the edited tests file catches it.
COUNT_UP_TO_3 = COUNT_RIGHT.replace("padded = [", "padded = [] if n > 3 else [")
COUNT_NO_EOS = COUNT_RIGHT.replace(' + ["</s>"]', "")
MLE_RIGHT = """
def mle_prob(counts, word, context):
    context = tuple(context)
    n = len(context) + 1
    ngrams = {g: c for g, c in counts.items() if len(g) == n}
    below = sum(c for g, c in ngrams.items() if g[:-1] == context)
    return ngrams.get(context + (word,), 0) / below if below else 0.0
"""

STUDENTS = {
    "ana": COUNT_RIGHT + MLE_RIGHT,
    "bo": COUNT_RIGHT,
    "cid": COUNT_UP_TO_3 + MLE_RIGHT,
    "dot": COUNT_NO_EOS + MLE_RIGHT,
    "eli": "",
}

TESTS_BEFORE = """
from coursepkg.checks import Case
CASES = {"1.1": [Case("trigrams of one long sentence", 1,
                      {"sentences": [["a", "b", "a", "b", "a"]], "n": 3})]}
"""
# The instructor edits the case: 4-grams, worth 2 points.
TESTS_AFTER = """
from coursepkg.checks import Case
CASES = {"1.1": [Case("4-grams of one long sentence", 2,
                      {"sentences": [["a", "b", "a", "b", "a"]], "n": 4})]}
"""


def notebook(code: str) -> nbformat.NotebookNode:
    defined = {line.split("(")[0][4:] for line in code.splitlines() if line.startswith("def ")}
    stubs = "".join(
        f"def {task.func_name}(*args):\n    raise NotImplementedError('Task {task.id}')\n"
        for task in tasks_for("01_ngrams") if task.func_name not in defined
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code), nbformat.v4.new_code_cell(stubs)]
    return nb


def published(out: Path) -> dict[str, bytes]:
    """The gradebook files a regrade rewrites (not the log, the cache or run.json)."""
    files = {"grades.csv": (out / "grades.csv").read_bytes()}
    for folder in ("results", "feedback"):
        for path in sorted((out / folder).iterdir()):
            files[f"{folder}/{path.name}"] = path.read_bytes()
    return files


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """A batch graded with TESTS_BEFORE, its tests file then edited to TESTS_AFTER and task 1.1
    regraded; and the same batch graded afresh with TESTS_AFTER."""
    root = tmp_path_factory.mktemp("week")
    subs = root / "subs"
    subs.mkdir()
    for student, code in STUDENTS.items():
        nbformat.write(notebook(code), subs / f"{student}.ipynb")
    secret = root / "secret"
    write_secret(secret, TEST_SECRET)
    tests = root / "extra_tests.py"
    tests.write_text(TESTS_BEFORE)
    out = root / "graded"
    grade = ["grade", "01_ngrams", str(subs), "--secret", str(secret), "--timeout", "10"]
    assert main([*grade, "--tests", str(tests), "--out", str(out)]) == 0
    before = published(out)
    run_before = load_run(out)
    tests.write_text(TESTS_AFTER)
    assert main(["regrade", str(out), "--task", "1.1"]) == 0
    fresh_tests = root / "fresh_tests.py"
    fresh_tests.write_text(TESTS_AFTER)
    fresh = root / "fresh"
    assert main([*grade, "--tests", str(fresh_tests), "--out", str(fresh)]) == 0
    return {"out": out, "fresh": fresh, "before": before, "run_before": run_before,
            "tests": tests, "secret": secret, "subs": subs}


def test_the_regraded_gradebook_equals_a_fresh_grading_with_the_new_case(week):
    assert published(week["out"]) == published(week["fresh"])
    assert published(week["out"]) != week["before"]


def test_changes_csv_lists_exactly_the_students_whose_points_moved(week):
    rows = list(csv.DictReader((week["out"] / "changes.csv").open()))
    assert [row["student"] for row in rows] == ["ana", "bo", "cid"]
    assert {row["task"] for row in rows} == {"1.1"}
    ana, bo, cid = rows
    # ana and bo pass both versions of the case (1 point, then 2): +1
    assert float(ana["after"]) - float(ana["before"]) == 1 and ana["why"] == "passed"
    assert float(bo["after"]) - float(bo["before"]) == 1
    # cid passed the trigram case and fails the 4-gram one: -1, and why says what failed
    assert float(cid["after"]) - float(cid["before"]) == -1
    assert cid["why"].startswith("partial: Pad each sentence")
    # dot fails both versions (0.5 of the public points either way), eli attempts nothing


def test_only_the_regraded_task_ran_and_the_rest_came_from_the_cache(week):
    log = [json.loads(line) for line in (week["out"] / "log.jsonl").read_text().splitlines()]
    regrade = [line for line in log if line.get("regrade") == "1.1"]
    assert sorted(line["student"] for line in regrade) == sorted(STUDENTS)
    assert all(line["ran"] == ["1.1"] for line in regrade)
    run = load_run(week["out"])
    before = week["run_before"]["task_keys"]
    assert run["task_keys"]["1.1"] != before["1.1"]
    assert {k: v for k, v in run["task_keys"].items() if k != "1.1"} == {
        k: v for k, v in before.items() if k != "1.1"}
    assert run["secret"] == secret_digest(TEST_SECRET)  # its digest, never the secret
    assert TEST_SECRET.hex() not in json.dumps(run) and TEST_SECRET.decode() not in json.dumps(run)


def test_a_second_regrade_runs_the_task_again_and_moves_nothing(week, tmp_path, capsys):
    """The cases have not changed, but the task's judge might have: it runs again."""
    out = tmp_path / "graded"
    shutil.copytree(week["out"], out)
    assert main(["regrade", str(out), "--task", "1.1"]) == 0
    printed = capsys.readouterr().out
    assert "task 1.1 ran again for 5 of 5 submissions" in printed
    assert "points moved for 0 students" in printed
    assert (out / "changes.csv").read_text() == "student,task,before,after,why\n"
    assert published(out) == published(week["out"])
    assert not (out / "regrade-pending.json").exists()


def test_an_interrupted_regrade_reports_against_the_gradebook_before_it(week, tmp_path, capsys):
    out = tmp_path / "graded"
    shutil.copytree(week["out"], out)
    # killed after saving "before" (here: all at 0) and regrading some notebooks
    before = {student: 0.0 for student in STUDENTS}
    (out / "regrade-pending.json").write_text(json.dumps({"task": "1.2", "before": before}))
    assert main(["regrade", str(out), "--task", "1.1"]) == 2
    assert "a regrade of task 1.2 in" in capsys.readouterr().err
    (out / "regrade-pending.json").write_text(json.dumps({"task": "1.1", "before": before}))
    assert main(["regrade", str(out), "--task", "1.1"]) == 0
    rows = list(csv.DictReader((out / "changes.csv").open()))
    assert [row["student"] for row in rows] == ["ana", "bo", "cid"]  # dot and eli scored 0
    assert all(row["before"] == "0" for row in rows)
    assert published(out) == published(week["out"])
    assert not (out / "regrade-pending.json").exists()


@pytest.mark.parametrize(
    ("make", "args", "words"),
    [
        (None, ["--task", "9.9"], "no task '9.9' in 01_ngrams; its tasks: 1.1, 1.2,"),
        (None, ["--task", "1.1", "--secret", "SECRET2"], "is not the one"),
        ("no_run", ["--task", "1.1"], "has no readable run.json"),
        ("not_graded", ["--task", "1.1"], "is not a graded folder (no grades.csv)"),
        ("moved", ["--task", "1.1"], "moved or changed since"),
        ("edited", ["--task", "1.1"], "bo ("),
    ],
)
def test_mistakes_are_one_line_errors_exit_2(week, tmp_path, capsys, make, args, words):
    out = tmp_path / "graded"
    shutil.copytree(week["out"], out)
    write_secret(tmp_path / "SECRET2")
    args = [str(tmp_path / a) if a == "SECRET2" else a for a in args]
    if make == "no_run":
        (out / "run.json").unlink()
    elif make == "not_graded":
        (out / "grades.csv").unlink()
    elif make in ("moved", "edited"):
        subs = tmp_path / "subs"
        shutil.copytree(week["subs"], subs)
        run = json.loads((out / "run.json").read_text())
        for entry in run["submissions"]:
            entry["path"] = str(subs / Path(entry["path"]).name)
        (out / "run.json").write_text(json.dumps(run))
        if make == "moved":
            (subs / "ana.ipynb").unlink()
        else:
            nb = nbformat.read(subs / "bo.ipynb", as_version=4)
            nb.cells.append(nbformat.v4.new_code_cell("x = 1"))
            nbformat.write(nb, subs / "bo.ipynb")
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    assert main(["regrade", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_grading_the_regraded_folder_again_runs_nothing_and_changes_nothing(week, tmp_path):
    out = tmp_path / "graded"
    shutil.copytree(week["out"], out)
    log_lines = len((out / "log.jsonl").read_text().splitlines())
    assert main(["grade", "01_ngrams", str(week["subs"]), "--out", str(out), "--secret",
                 str(week["secret"]), "--tests", str(week["tests"])]) == 0
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert all(line["cached"] for line in log[log_lines:]) and len(log) == log_lines + 5
    assert published(out) == published(week["out"])
