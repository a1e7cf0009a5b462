"""Shared pytest set-up, and how `make unit` spreads the tests over the cores."""

import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _pytest.nodeid import NodeId

from coursepkg.course import CHAPTERS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The course's test models are tiny: one intra-op thread runs them faster than two, and
    far faster when other processes share the CPU (torch's default is one thread per core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def seeded_secrets(request, monkeypatch):
    """``run_task(..., hidden=True)`` without a secret draws a fresh one: in the tests, the
    draws come from a generator seeded with the test's id, so that every run of a test checks
    the same hidden cases (a train task's score depends on its data; a failure must come back
    when the test runs again). The train tasks' scores over many secrets are measured in
    benchmarks/bench_train_margins.py."""
    from coursepkg.checks import core

    draws = random.Random(f"secrets of {request.node.nodeid}")
    monkeypatch.setattr(core, "new_secret", lambda: draws.randbytes(core.SECRET_BYTES))


@pytest.fixture
def short_tmpdir():
    """A folder of the test's own, for the TMPDIR of a grader run killed with SIGKILL (which
    cannot remove its temporary folders): a short path under the system's temporary folder,
    since multiprocessing's fork-server socket in it must stay within AF_UNIX's 107 bytes;
    removed after the test."""
    folder = Path(tempfile.mkdtemp(prefix="grader-kill-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class DemoGrading:
    """A chapter's demo batch (``make grade-demo``'s notebooks) graded with the tests' secret."""

    subs: Path
    out: Path
    rows: list


@pytest.fixture(scope="session")
def demo_gradings(tmp_path_factory):
    """``graded(assignment)``: the chapter's demo batch graded once per process (with
    ``--jobs 2``, the tests' secret and a 20 s case limit). test_grading_demo checks the
    grading; test_grading_shards seeds its shards' caches from it, so that a chapter's batch
    (chapter 7 trains a Transformer per complete submission) is graded once. Both files' tests
    of a chapter are one xdist group (below), so they share it."""
    from checks_support import TEST_SECRET

    from coursepkg.grading.demo import write_demo
    from coursepkg.grading.grader import grade
    from coursepkg.grading.sandbox import Limits

    made: dict[str, DemoGrading] = {}

    def graded(assignment: str) -> DemoGrading:
        if assignment not in made:
            root = tmp_path_factory.mktemp(f"demo-{assignment}")
            write_demo(assignment, ROOT, root / "subs")
            rows = grade(assignment, [root / "subs"], root / "out", jobs=2,
                         limits=Limits(timeout=20), progress=False, secret=TEST_SECRET)
            made[assignment] = DemoGrading(root / "subs", root / "out", rows)
        return made[assignment]

    return graded


# `make unit` runs pytest-xdist with `--dist loadgroup --no-loadscope-reorder`: each group of
# tests runs whole on one worker, so a module fixture its tests share is built once, and groups
# are handed out in the order of the collection. A group is a test file, except in the files
# below, each two to six minutes of one core (2026-11-27): there a group is the chapter a test
# grades (its `assignment` parameter, or the file's default chapter) with the module fixtures it
# uses, and a test that shares neither is a group of its own, so that no worker ends the run
# alone with a whole file. These files go first, longest first, and in them the later chapters
# (chapter 7 trains a Transformer per submission: 2.5 minutes of demo batch), so that the long
# groups start while there is other work to balance them. The demo and shard files' tests of a
# chapter are one group: they share its graded demo batch (demo_gradings).
SPLIT = {
    "test_grading_demo.py": None,
    "test_grading_shards.py": "01_ngrams",  # its tests without a chapter use chapter 1's batch
    "test_checks_common.py": None,
    "test_grading_hostile.py": None,
    "test_grading_sandbox.py": None,
}
LONG_FIRST = [*SPLIT]
JOINED = {"test_grading_demo.py", "test_grading_shards.py"}  # one group per chapter for both


def chapter_of(item: pytest.Item) -> str | None:
    params = getattr(item, "callspec", None)
    return params.params.get("assignment") if params else None


def group_of(item: pytest.Item) -> str:
    """The xdist group of a test: its file, or in a SPLIT file its chapter and module fixtures."""
    file = item.path.name
    if file not in SPLIT:
        return file
    chapter = chapter_of(item)
    shared = [name for name in item.fixturenames
              if any(d.scope == "module" and d.baseid.endswith(file)
                     for d in item._fixtureinfo.name2fixturedefs.get(name, ()))]
    if chapter is None and not shared:
        return item.nodeid  # shares nothing: a group of its own
    if file in JOINED:  # the chapter's demo grading is what they share
        return "::".join(["demo-and-shards", chapter or SPLIT[file] or "-"])
    return "::".join([file, chapter or SPLIT[file] or "-", *sorted(shared)])


def order(item: pytest.Item) -> tuple[int, int]:
    """The SPLIT files first, in their order, and in them the later chapters first."""
    file = item.path.name
    rank = LONG_FIRST.index(file) if file in LONG_FIRST else len(LONG_FIRST)
    stems = [chapter.stem for chapter in CHAPTERS]
    chapter = chapter_of(item)
    return rank, -(stems.index(chapter) if chapter in stems else -1)


def name_group(item: pytest.Item, group: str) -> None:
    """Append ``@group`` to the test's node id, as pytest-xdist's worker does for an
    ``xdist_group`` mark and its scheduler reads back. xdist 3.8 still writes the old
    ``_nodeid`` field, which pytest 9.2's structured node ids ignore, so its groups are silently
    lost (pytest-dev/pytest-xdist#1386, fix pending in #1388): this does it for it, only when
    the id has no group yet."""
    if "@" not in item.nodeid.rpartition("]")[2]:
        item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=order)  # stable: the collection's order within each rank
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group_of(item)))
        if getattr(config.option, "loadgroup", False):  # a worker of --dist loadgroup
            name_group(item, "_".join(sorted(
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group"))))
