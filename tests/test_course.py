"""The chapter manifest (coursepkg/course.py) agrees with everything that has a chapter in it:
a chapter added to the manifest without its page, notebooks, checks or tests fails here, loudly,
and so does a page or an exercise set that the manifest does not know."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
import torch
import yaml

from coursepkg import checks, course

ROOT = Path(__file__).resolve().parents[1]
each_chapter = pytest.mark.parametrize("ch", course.CHAPTERS, ids=lambda ch: ch.stem)


def test_chapters_are_numbered_in_lecture_order_with_unique_stems():
    assert [ch.number for ch in course.CHAPTERS] == list(range(1, len(course.CHAPTERS) + 1))
    assert [ch.stem[:2] for ch in course.CHAPTERS] == [f"{ch.number:02d}" for ch in
                                                       course.CHAPTERS]
    assert len({ch.stem for ch in course.CHAPTERS}) == len(course.CHAPTERS)


def test_the_table_of_contents_lists_the_manifests_chapters_in_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    part = next(p for p in toc["parts"] if p["caption"] == "Chapters")
    assert [entry["file"] for entry in part["chapters"]] == [
        ch.page.removesuffix(".md") for ch in course.CHAPTERS]


def test_every_numbered_page_and_exercise_set_is_in_the_manifest():
    stems = {ch.stem for ch in course.CHAPTERS}
    numbered = re.compile(r"^\d\d_")
    for folder, pattern in (("book", "*.md"), ("solutions", "*.ipynb"), ("exercises", "*.ipynb")):
        found = {p.stem for p in (ROOT / folder).glob(pattern) if numbered.match(p.stem)}
        assert found == stems, f"{folder}/ and the manifest disagree: {found ^ stems}"
    assert {task.assignment for task in checks.TASKS.values()} == stems


@each_chapter
def test_a_chapter_has_its_page_notebooks_checks_tests_modules_and_widget(ch):
    page = (ROOT / ch.page).read_text(encoding="utf-8")
    assert re.search(rf"^# {re.escape(ch.title)}$", page, flags=re.MULTILINE), ch.title
    assert f"viz.{ch.widget}(" in page, f"{ch.page} should show its widget viz.{ch.widget}"
    for folder in ("solutions", "exercises"):
        assert (ROOT / folder / f"{ch.stem}.ipynb").is_file()
    module = importlib.import_module(ch.checks_module)
    assert module.ASSIGNMENT == ch.stem
    assert checks.tasks_for(ch.stem), f"{ch.checks_module} registers no task"
    assert (ROOT / "tests" / f"test_checks_{ch.stem[:2]}.py").is_file()
    for name in ch.modules:
        importlib.import_module(f"coursepkg.{name}")
    from coursepkg import viz

    assert callable(getattr(viz, ch.widget))


def test_chapter_by_stem_and_a_clear_error_for_an_unknown_one():
    assert course.chapter("04_self_attention").number == 4
    with pytest.raises(ValueError, match="01_ngrams, 02_rnn"):
        course.chapter("08_mamba")


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_page_setup_returns_the_seed_shift_and_sets_the_threads(monkeypatch, threads):
    monkeypatch.delenv("COURSE_SEED", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert course.page_setup(threads=1) == 0 and torch.get_num_threads() == 1
    monkeypatch.setenv("COURSE_SEED", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert course.page_setup(threads=1) == 2 and torch.get_num_threads() == 2, (
        "the environment overrides the page's own thread count")


@pytest.mark.parametrize("name, value, message", [
    ("COURSE_SEED", "one", "COURSE_SEED must be a whole number, got 'one'"),
    ("OMP_NUM_THREADS", "many", "OMP_NUM_THREADS must be a whole number"),
    ("OMP_NUM_THREADS", "0", "at least 1"),
])
def test_page_setup_refuses_bad_settings_with_the_fix(monkeypatch, threads, name, value, message):
    monkeypatch.delenv("COURSE_SEED", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        course.page_setup()


def test_benchmark_results_reads_published_files_and_prefers_the_complete_grader_run(tmp_path):
    assert course.benchmark_results("ngram", tmp_path) is None
    (tmp_path / "grader-lean.json").write_text('{"results": {"lean": true}}')
    assert course.benchmark_results("grader", tmp_path)["results"]["lean"] is True
    (tmp_path / "grader.json").write_text('{"results": {"lean": false}}')
    assert course.benchmark_results("grader", tmp_path)["results"]["lean"] is False


@pytest.mark.parametrize("module", course.TEACHING_MODULES)
def test_teaching_modules_import_only_backward_in_the_book(module):
    """A chapter's module imports nothing of a later chapter (multihead knows nothing of
    positional: chapter 6's encodings reach attention as values at call time), and nothing of
    the checks, the grader, the plots or the authoring tools."""
    path = ROOT / "coursepkg" / f"{module}.py"
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    imported = {name.split(".")[1] for name in names if name.startswith("coursepkg.")}
    earlier = set(course.TEACHING_MODULES[:course.TEACHING_MODULES.index(module)])
    assert imported <= earlier | set(course.SUPPORT_MODULES), (
        f"{module} imports {sorted(imported - earlier - set(course.SUPPORT_MODULES))}")


def test_every_module_of_the_package_has_a_place():
    """A new module is a teaching module (in book order), a support module or a subsystem."""
    subsystems = {"__init__", "__main__", "authoring", "checks", "grading", "viz"}
    found = {p.stem for p in (ROOT / "coursepkg").iterdir()
             if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").is_file())}
    assert found == set(course.TEACHING_MODULES) | set(course.SUPPORT_MODULES) | subsystems
