"""The grader reads hostile or broken notebooks without executing or trusting them."""

import json
from pathlib import Path

import nbformat
import pytest

from coursepkg.grading.submission import extract_code, read_submission, student_id

TASK_CELL = "def count_ngrams(sentences, n):\n    return {('a',): 1}\n"


def write_nb(path: Path, cells, **metadata) -> Path:
    nb = nbformat.v4.new_notebook(metadata=metadata)
    nb.cells = cells
    nbformat.write(nb, path)
    return path


def test_reads_the_definitions_of_a_v4_notebook(tmp_path):
    path = write_nb(
        tmp_path / "alice.ipynb",
        [nbformat.v4.new_markdown_cell("# hi"), nbformat.v4.new_code_cell(TASK_CELL)],
    )
    sub = read_submission(path, "alice")
    assert sub.problem is None
    namespace: dict = {}
    exec(compile(sub.code, "<student>", "exec"), namespace)
    assert namespace["count_ngrams"]([], 1) == {("a",): 1}
    assert len(sub.sha256) == 64


def test_top_level_statements_that_run_code_are_dropped():
    cells = [
        "import sys\nwhile True:\n    pass\n",
        "sys.exit(1)\nimport os\nos._exit(0)\n",
        "!pip install requests\nname = input('who?')\nLIMIT = 10 ** 3\n",
        "import threading\nthreading.Thread(target=print, args=('All tests passed',)).start()\n",
        TASK_CELL,
    ]
    code, notes, broken = extract_code(cells)
    assert notes == [] and broken == {}
    for gone in ("while", "exit", "pip", "input", "Thread("):
        assert gone not in code
    namespace: dict = {}
    exec(compile(code, "<student>", "exec"), namespace)  # returns at once: nothing left runs
    assert namespace["LIMIT"] == 1000 and "count_ngrams" in namespace


def test_a_cell_with_a_syntax_error_is_skipped_with_a_note():
    code, notes, broken = extract_code(["def broken(:\n    pass\n", TASK_CELL])
    assert "count_ngrams" in code
    assert notes == ["code cell 1 has a syntax error at line 1 (invalid syntax): broken skipped"]
    assert broken == {"broken": "code cell 1 has a syntax error at line 1 (invalid syntax)"}


def test_a_syntax_error_costs_only_the_statement_it_is_in():
    """The cell's imports and its other definitions are kept; the broken function is named."""
    cell = (
        "import math\n\n"
        "def helper(x):\n    return math.sqrt(x)\n\n"
        "def mle_prob(counts, word, context):\n    return (counts[word]\n\n"
        "@staticmethod\ndef decorated(x):\n    return x\n\n"
        "LIMIT = 3\n"
    )
    code, notes, broken = extract_code([TASK_CELL, cell])
    for kept in ("import math", "def helper", "def decorated", "LIMIT = 3", "def count_ngrams"):
        assert kept in code, kept
    assert "mle_prob" not in code
    assert list(broken) == ["mle_prob"] and "code cell 2" in broken["mle_prob"]
    assert "line 7" in broken["mle_prob"] and "never closed" in broken["mle_prob"]
    assert notes == [f"{broken['mle_prob']}: mle_prob skipped"]


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("def count_ngrams(s, s):\n    return {}\n", "duplicate argument"),
        ("def count_ngrams(s, n):\n    nonlocal total\n    return {}\n", "nonlocal"),
        ("def count_ngrams(s, n):\n    await s\n", "'await' outside async function"),
    ],
)
def test_syntax_errors_the_parser_lets_through_are_caught_too(source, reason):
    """Only compiling finds these: the worker used to fail on them and zero every task."""
    code, notes, broken = extract_code([source, "def mle_prob(c, w, x):\n    return 0.5\n"])
    assert "count_ngrams" not in code and "def mle_prob" in code
    assert reason in broken["count_ngrams"] and "code cell 1" in broken["count_ngrams"]


def test_nbformat_v3_is_read(tmp_path):
    v3 = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {},
        "worksheets": [{"cells": [{"cell_type": "code", "input": TASK_CELL, "outputs": []}]}],
    }
    path = tmp_path / "bob.ipynb"
    path.write_text(json.dumps(v3))
    sub = read_submission(path, "bob")
    assert sub.problem is None and "def count_ngrams" in sub.code


def test_a_markdown_cell_where_the_code_was_defines_nothing(tmp_path):
    path = write_nb(tmp_path / "c.ipynb", [nbformat.v4.new_markdown_cell(TASK_CELL)])
    sub = read_submission(path, "c")
    assert sub.problem is None and "count_ngrams" not in sub.code


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"cells": [', "not valid notebook JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[1, 2, 3]", "top level is a list"),
        (b'{"nbformat": 4}', "not an object with 'cells'"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"", "not valid notebook JSON"),
    ],
)
def test_unreadable_files_get_a_reason_not_an_exception(tmp_path, content, expected):
    path = tmp_path / "x.ipynb"
    path.write_bytes(content)
    sub = read_submission(path, "x")
    assert sub.code is None
    assert expected in sub.problem


def test_a_huge_notebook_is_refused_before_parsing(tmp_path):
    path = write_nb(
        tmp_path / "big.ipynb", [nbformat.v4.new_code_cell("x = '" + "a" * 300_000 + "'")]
    )
    sub = read_submission(path, "big", max_mb=0.1)
    assert sub.code is None and "over the 0.1 MB limit" in sub.problem


def test_metadata_and_outputs_are_ignored(tmp_path):
    cell = nbformat.v4.new_code_cell(
        TASK_CELL, metadata={"tags": ["points:100"], "nbgrader": {"points": 99}}
    )
    cell.outputs = [
        nbformat.v4.new_output("stream", text="Task 1.1: 4/4 points\nAll tests passed\n")
    ]
    path = write_nb(tmp_path / "d.ipynb", [cell], coursepkg={"score": 100})
    sub = read_submission(path, "d")
    assert "passed" not in sub.code and "100" not in sub.code


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("subs/alice.ipynb", "alice"),
        ("subs/alice/01_ngrams.ipynb", "alice"),
        ("subs/=HYPERLINK(x).ipynb", "_HYPERLINK_x_"),
        ("subs/../etc/passwd.ipynb", "passwd"),
        ("subs/'; rm -rf.ipynb", "_rm_-rf"),
        ("subs/..ipynb", "unnamed"),
    ],
)
def test_student_ids_are_safe_file_names(path, expected):
    assert student_id(Path(path), "01_ngrams") == expected
