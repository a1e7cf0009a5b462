"""`make grade-demo`: the generated batch grades as an instructor would expect."""

from pathlib import Path

from coursepkg.grading.demo import PLANTED, write_demo
from coursepkg.grading.grader import grade
from coursepkg.grading.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]

HINTS = {  # a word of the feedback each planted mistake must get
    "ada-forgets-eos": "'</s>'",
    "ben-joint-probability": "joint",
    "cy-forgets-k-times-v": "k * |V|",
    "dee-log10-perplexity": "base of the logarithm",
}


def test_demo_batch_solution_full_untouched_zero_mistakes_partial(tmp_path):
    write_demo("01_ngrams", ROOT, tmp_path / "subs")
    rows = grade(
        "01_ngrams",
        [tmp_path / "subs"],
        tmp_path / "out",
        limits=Limits(timeout=10),
        progress=False,
    )
    records = {found.student: record for found, record in rows}
    assert set(records) == {"sol-full-marks", "ed-untouched", *PLANTED["01_ngrams"]}
    assert all(t["status"] == "passed" for t in records["sol-full-marks"]["tasks"])
    assert {t["status"] for t in records["ed-untouched"]["tasks"]} == {"not attempted"}
    for student, (func_name, _) in PLANTED["01_ngrams"].items():
        for task in records[student]["tasks"]:
            if task["func_name"] == func_name:
                assert task["points"] < task["max_points"], student
            else:
                assert task["status"] == "passed", (student, task["func_name"])
        feedback = (tmp_path / "out" / "feedback" / f"{student}.md").read_text()
        assert HINTS[student] in feedback, student
