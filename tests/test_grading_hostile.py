"""Issue 18: a class of hostile notebooks earns nothing it should not, leaves nothing behind.

Each numbered point of the issue has its notebooks here (built by small functions from the
course's solution notebooks); a batch per assignment is graded once per module with the test
secret, the way an instructor grades. Every batch also holds the honest solution (full marks) and
is checked for what the grader must never do: leave a file outside ``--out`` (in /tmp, /var/tmp,
/dev/shm, /run/lock or the grader's own temporary folder), change the course's files, or give a
``results.json`` whose tests do not add up.

Points 1 (hidden cases from the secret) and 4 (inputs are sacred) test, end to end, the checks'
side of the issue (``grading_cases`` and the task generators; ``student_output``'s copies).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import secrets
import tempfile
from pathlib import Path

import nbformat
import pytest
from checks_support import TEST_SECRET

from coursepkg.checks import get_task, tasks_for
from coursepkg.checks.core import load_extra_cases, write_secret
from coursepkg.checks.forbidden import forbidden_message
from coursepkg.grading.grader import grade
from coursepkg.grading.isolation import TEMP_DIRS
from coursepkg.grading.sandbox import Limits, can_isolate, task_seconds

ROOT = Path(__file__).resolve().parents[1]
LIMITS = Limits(timeout=15.0, memory_mb=1024)  # generous: the machine may be busy
SHORT = Limits(timeout=3.0, memory_mb=1024)  # for the notebooks that loop forever
# A name no other process uses: every file a hostile notebook leaves would carry it.
TOKEN = f"hostile-{secrets.token_hex(6)}"
# Course files a vandal tries to change (not edited by anyone while tests run).
COURSE_FILES = ("solutions/01_ngrams.ipynb", "coursepkg/grading/preload.py")
GIVES_0 = "the grader gives 0"
isolated = pytest.mark.skipif(not can_isolate(), reason="needs root on Linux (namespaces)")


# ----------------------------------------------------------------------------- notebook builders


def solution(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / f"{assignment}.ipynb", as_version=4)


def with_function(assignment: str, func_name: str, source: str) -> nbformat.NotebookNode:
    """The solution notebook with the cell defining ``func_name`` replaced by ``source``."""
    nb = solution(assignment)
    for cell in nb.cells:
        if cell.cell_type == "code" and f"def {func_name}(" in cell.source:
            cell.source = source
            return nb
    raise AssertionError(f"no cell defines {func_name} in {assignment}")


def solution_source(assignment: str, func_name: str) -> str:
    nb = solution(assignment)
    return next(c.source for c in nb.cells if f"def {func_name}(" in c.source)


def renamed(source: str, func_name: str, new_name: str) -> str:
    return source.replace(f"def {func_name}(", f"def {new_name}(", 1)


def memoriser_source() -> str:
    """count_ngrams from a table prepared at home: the answers to every input the student can
    make from what the package ships (the public cases, and the hidden generators run with
    seeds 0 to 29), keyed by the arguments' repr; anything else gets an empty dict."""
    task = get_task("1.1")
    inputs = [case.args for case in task.cases]
    inputs += [gen.make(random.Random(seed)) for gen in task.hidden for seed in range(30)]
    table = {}
    for args in inputs:
        built = task.build_args(args)
        table[repr(tuple(built))] = task.reference(*task.build_args(args))
    return f"TABLE = {table!r}\n\ndef count_ngrams(sentences, n):\n" \
        "    return dict(TABLE.get(repr((sentences, n)), {}))\n"


def secret_reader_source(secret_file: Path, tests_file: Path) -> str:
    """count_ngrams looks for the secret where a child could find it: the secret and tests
    files, its environment and command lines, and what its process was started with (every
    string in the locals of every frame above it and in the multiprocessing arguments, through
    containers and objects' attributes). It knows only the secret's
    SHA-256 (the secret itself in its source would be found in its own memory), and raises
    ValueError("nothing found") when it finds nothing: the public case's feedback shows it."""
    digests = {hashlib.sha256(TEST_SECRET).hexdigest(),
               hashlib.sha256(TEST_SECRET.hex().encode()).hexdigest()}
    return f'''
import hashlib, json, multiprocessing, os, re, sys
def _is_secret(data):
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    candidates = [data.strip()] + re.findall(rb"[0-9a-f]{{{2 * len(TEST_SECRET)}}}", data)
    return any(hashlib.sha256(c).hexdigest() in {digests!r} for c in candidates)
def _leaves(obj, depth, seen):
    # every string in obj, through containers and objects' attributes: no method of the
    # objects is called (the arguments of the child's other tasks are the package's objects,
    # whose code this task may not call)
    if type(obj) in (str, bytes):
        yield obj
        return
    if depth > 8 or id(obj) in seen:
        return
    seen.add(id(obj))
    if type(obj) in (list, tuple, set, frozenset):
        for item in obj:
            yield from _leaves(item, depth + 1, seen)
    elif type(obj) is dict:
        for key, value in obj.items():
            yield from _leaves(key, depth + 1, seen)
            yield from _leaves(value, depth + 1, seen)
    elif type(getattr(obj, "__dict__", None)) is dict:
        yield from _leaves(obj.__dict__, depth + 1, seen)
def count_ngrams(sentences, n):
    found = []
    if open({str(tests_file)!r}, "rb").read() if os.access({str(tests_file)!r}, os.R_OK) else b"":
        found.append("the tests file")
    for path in ({str(secret_file)!r}, "/proc/self/environ", "/proc/self/cmdline",
                 "/proc/%d/cmdline" % os.getppid(), "/proc/%d/environ" % os.getppid()):
        try:
            if _is_secret(open(path, "rb").read()):
                found.append(path)
        except OSError:
            pass
    process = multiprocessing.current_process()
    started = [sys.argv, dict(os.environ), getattr(process, "_args", ()),
               getattr(process, "_kwargs", {{}})]
    frame = sys._getframe(1)
    while frame is not None:
        started.append({{k: v for k, v in frame.f_locals.items() if k != "__builtins__"}})
        frame = frame.f_back
    if any(_is_secret(leaf) for leaf in _leaves(started, 0, set())):
        found.append("what the child was started with")
    if found:
        raise RuntimeError("found the secret in " + ", ".join(sorted(set(found))))
    raise ValueError("nothing found")
'''


def tmp_writer_source(assignment_solution: str) -> str:
    """An honest count_ngrams that also leaves its answers in every shared folder."""
    return assignment_solution + f'''
import os, tempfile
def _leave(text):
    for folder in {TEMP_DIRS!r} + (tempfile.gettempdir(), os.environ.get("HOME", ".")):
        try:
            with open(os.path.join(folder, {TOKEN!r} + "-answers"), "a") as f:
                f.write(text + "\\n")
        except OSError:
            pass
    try:
        os.close(tempfile.mkstemp(prefix={TOKEN!r})[0])
    except OSError:
        pass
_honest = count_ngrams
def count_ngrams(sentences, n):
    answer = _honest(sentences, n)
    _leave(repr((repr((sentences, n)), answer)))
    return answer
'''


TMP_READER = f'''
import ast, glob, time
_tables = {{}}
def count_ngrams(sentences, n):
    key = repr((sentences, n))
    for _ in range(20):  # the writer may still be running: wait for it, up to 2 s
        for path in glob.glob("/*/*{TOKEN}-answers") + glob.glob("/*/*/*{TOKEN}-answers"):
            for line in open(path):
                k, v = ast.literal_eval(line)
                _tables[k] = v
        if key in _tables:
            return _tables[key]
        time.sleep(0.1)
    return {{}}
'''


def vandal_source(assignment_solution: str) -> str:
    """The honest function, which first tries to change the course and leave a file in it."""
    targets = [str(ROOT / name) for name in COURSE_FILES]
    return assignment_solution + f'''
_honest_count = count_ngrams
def count_ngrams(sentences, n):
    for path in {targets!r}:
        try:
            with open(path, "a") as f:
                f.write("# vandalised\\n")
        except OSError:
            pass
    try:
        open({str(ROOT / (TOKEN + ".txt"))!r}, "w").write("was here")
    except OSError:
        pass
    return _honest_count(sentences, n)
'''


# ----------------------------------------------------------------------------- grading a batch


def course_state() -> dict[str, str]:
    return {name: hashlib.sha256((ROOT / name).read_bytes()).hexdigest() for name in COURSE_FILES}


def leftovers() -> list[str]:
    """Files a hostile notebook left in the shared folders (named with :data:`TOKEN`)."""
    return sorted(p for folder in TEMP_DIRS for p in glob.glob(f"{folder}/**/*{TOKEN}*",
                                                                recursive=True))


def instructor_files(base: Path) -> tuple[Path, Path]:
    """Where a batch's secret and extra tests file go (beside the submissions, not in them)."""
    return base / "instructor" / "secret", base / "instructor" / "extra_cases.py"


def grade_batch(
    base: Path, assignment: str, notebooks: dict, *, extra_cases: str = "", limits=LIMITS
):
    """Grade ``notebooks`` (student -> notebook) with the test secret; returns what to check."""
    subs, out = base / "subs", base / "out"
    subs.mkdir()
    (base / "instructor").mkdir()
    for student, nb in notebooks.items():
        nbformat.write(nb, subs / f"{student}.ipynb")
    secret_file, tests_file = instructor_files(base)
    write_secret(secret_file, TEST_SECRET)
    tests_file.write_text(extra_cases or "CASES = {}\n")

    own_tmp = base / "grader-tmp"  # the grader's own temporary folder, checked empty after
    own_tmp.mkdir()
    before, saved = course_state(), tempfile.tempdir
    tempfile.tempdir = str(own_tmp)
    try:
        notes: list[str] = []
        rows = grade(assignment, [subs], out, jobs=2, limits=limits, progress=False,
                     secret=TEST_SECRET, extra=load_extra_cases(tests_file),
                     private=[secret_file, tests_file], notes=notes)
    finally:
        tempfile.tempdir = saved
    return {
        "records": {found.student: record for found, record in rows},
        "out": out,
        "subs": subs,
        "files": (secret_file, tests_file),
        "course_before": before,
        "course_after": course_state(),
        "grader_tmp": sorted(p.name for p in own_tmp.iterdir() if p.name.startswith("coursepkg")),
        "notes": notes,
    }


def task(batch, student: str, task_id: str) -> dict:
    return next(t for t in batch["records"][student]["tasks"] if t["id"] == task_id)


def public_points(task_id: str) -> float:
    return float(sum(case.points for case in get_task(task_id).cases))


def check_leaves_nothing_and_adds_up(batch) -> None:
    """What every batch must satisfy, whatever its notebooks tried."""
    assert batch["course_after"] == batch["course_before"], "a course file changed"
    assert not (ROOT / f"{TOKEN}.txt").exists(), "a file was left in the course"
    assert batch["grader_tmp"] == [], "the grader's temporary folders were not removed"
    assert {p.name for p in batch["subs"].iterdir()} == {
        f"{s}.ipynb" for s in batch["records"]
    }, "something was written next to the submissions"
    if can_isolate():
        assert leftovers() == [], "a file outlived its child in a shared folder"
    for student, record in batch["records"].items():
        result = json.loads((batch["out"] / "results" / f"{student}.json").read_text())
        assert sum(t["max_score"] for t in result["tests"]) == pytest.approx(result["max_score"])
        assert sum(t["score"] for t in result["tests"]) == pytest.approx(result["score"])
        assert not [t for t in result["tests"] if t["status"] == "passed" and t["score"] == 0]
        for graded in record["tasks"]:
            assert graded["max_points"] == pytest.approx(
                sum(c["max_points"] for c in graded["cases"])
            )


# ----------------------------------------------------------------------------- chapter 1


EXTRA_CASES = '''
from coursepkg.checks import Case
CASES = {"1.1": [Case("the instructor's own: a four-word sentence", 2,
                      {"sentences": [["a", "rose", "is", "a"]], "n": 2})]}
'''


# 3: ways to switch the tripwire off, or to blind it, before calling the course's reference;
# each with the name its message gives. The notebook's code runs in the child, so each is tried
# where the tripwire lives (its class, the checker's functions, the profile hook itself).
_REFERENCE = "from coursepkg.checks.ch01_ngrams import count_ngrams as _reference\n"
TAMPERING = {
    # a decorator runs when the definition loads: it replaces the tripwire's methods
    "patches-its-class": (_REFERENCE + '''
import coursepkg.checks.forbidden as _fb
def _patch(f):
    _fb.Tripwire.__enter__ = lambda self: self
    _fb.Tripwire.__exit__ = lambda self, *exc: None
    _fb.Tripwire.forbidden_callable = lambda self, obj: None
    return f
@_patch
def count_ngrams(sentences, n):
    return _reference(sentences, n)
''', "the course's reference solution of task 1.1"),
    # setprofile called from C (map), which no profile hook sees
    "switches-it-off-from-c": (_REFERENCE + '''
import sys
def count_ngrams(sentences, n):
    list(map(sys.setprofile, [None]))
    return _reference(sentences, n)
''', "sys.setprofile"),
    # the tripwire's object, found on the heap, emptied
    "empties-it": (_REFERENCE + '''
import gc
def count_ngrams(sentences, n):
    for obj in gc.get_objects():
        if type(obj).__name__ == "Tripwire":
            obj.codes.clear(), obj.prefixes.clear(), obj.builtins.clear()
    return _reference(sentences, n)
''', "gc.get_objects"),
    # the checker's own function rewritten to call the reference from trusted code
    "rewrites-the-checker": (_REFERENCE + '''
import coursepkg.checks.core as _core
def count_ngrams(sentences, n):
    _core.call_student.__code__ = _core.student_output.__code__
    return _reference(sentences, n)
''', "object.__setattr__ (on the grader's own functions)"),
    # the reference called in another thread
    "in-a-thread": (_REFERENCE + '''
import threading
def count_ngrams(sentences, n):
    box = []
    worker = threading.Thread(target=lambda: box.append(_reference(sentences, n)))
    worker.start()
    worker.join()
    return box[0] if box else {}
''', "_thread.start_new_thread (a thread: the grader runs your code on one thread)"),
    # the worker's own switch to a later task's tripwire (chapter 1's child runs 1.1 before
    # 1.7, which allows the package's n-gram code), found in its frame and called early; then
    # the package's padding and windows, which 1.1 forbids
    "calls-the-switch": ('''
import sys
from coursepkg.ngram import ngrams, pad
def count_ngrams(sentences, n):
    frame = sys._getframe()
    while frame is not None and "advance" not in frame.f_locals:
        frame = frame.f_back
    frame.f_locals["advance"](len(frame.f_locals["order"]) - 1)
    counts = {}
    for sentence in sentences:
        for gram in ngrams(pad(sentence, n), n):
            counts[gram] = counts.get(gram, 0) + 1
    return counts
''', "sys.setprofile"),
    # memory written through ctypes
    "uses-ctypes": (_REFERENCE + '''
import ctypes
def count_ngrams(sentences, n):
    ctypes.memset(ctypes.addressof(ctypes.c_int(0)), 0, 4)
    return _reference(sentences, n)
''', "ctypes"),
}


@pytest.fixture(scope="module")
def batch01(tmp_path_factory):
    count = solution_source("01_ngrams", "count_ngrams")
    notebooks = {
        "honest": solution("01_ngrams"),
        # 1: a table of every answer the student can prepare at home
        "memoriser": with_function("01_ngrams", "count_ngrams", memoriser_source()),
        # 2: one leaves its answers in the shared folders, the other copies them
        "a-tmp-writer": with_function("01_ngrams", "count_ngrams", tmp_writer_source(count)),
        "z-tmp-reader": with_function("01_ngrams", "count_ngrams", TMP_READER),
        "vandal": with_function("01_ngrams", "count_ngrams", vandal_source(count)),
        # 4: pads the caller's sentences in place
        "pads-the-input": with_function("01_ngrams", "count_ngrams", '''
def count_ngrams(sentences, n):
    counts = {}
    for sentence in sentences:
        sentence[:0] = ["<s>"] * (n - 1)
        sentence.append("</s>")
        for i in range(len(sentence) - n + 1):
            gram = tuple(sentence[i:i + n])
            counts[gram] = counts.get(gram, 0) + 1
    return counts
'''),
        # a call that task 1.10 forbids runs when the notebook loads (a default value)
        "loads-with-a-forbidden-call": with_function(
            "01_ngrams", "count_ngrams", "import coursepkg.data as _data\n" + count.replace(
                "def count_ngrams(sentences, n):",
                "def count_ngrams(sentences, n, _words=_data.word_tokenize('to be')):", 1)),
        # 5: a forbidden call in task 1.4
        "calls-the-package": with_function("01_ngrams", "perplexity", '''
def perplexity(model, sentences):
    return model.perplexity(sentences)
'''),
        # 6: a syntax error (parser) in 1.2's cell, one only the compiler sees in 1.3's
        "syntax-error": with_function("01_ngrams", "mle_prob", solution_source(
            "01_ngrams", "mle_prob").replace("return ", "return (", 1)),
        "compile-error": with_function("01_ngrams", "add_k_prob", solution_source(
            "01_ngrams", "add_k_prob").replace("def add_k_prob(", "def add_k_prob(k, ", 1)),
    }
    notebooks |= {
        f"tamper-{name}": with_function("01_ngrams", "count_ngrams", source)
        for name, (source, _) in TAMPERING.items()
    }
    base = tmp_path_factory.mktemp("batch01")
    notebooks["secret-reader"] = with_function(
        "01_ngrams", "count_ngrams", secret_reader_source(*instructor_files(base))
    )
    return grade_batch(base, "01_ngrams", notebooks, extra_cases=EXTRA_CASES)


@pytest.fixture(scope="module")
def batch01_time(tmp_path_factory):
    """Notebooks that loop forever, graded with a short time limit."""
    count = solution_source("01_ngrams", "count_ngrams")
    notebooks = {
        "honest": solution("01_ngrams"),
        # one case loops forever (the first public one: a single three-word sentence, n = 1)
        "loops-once": with_function("01_ngrams", "count_ngrams", renamed(
            count, "count_ngrams", "_count") + '''
def count_ngrams(sentences, n):
    while n == 1 and len(sentences) == 1 and len(sentences[0]) == 3:
        pass
    return _count(sentences, n)
'''),
        # every case loops forever
        "loops-always": with_function("01_ngrams", "perplexity", '''
def perplexity(model, sentences):
    while True:
        pass
'''),
    }
    base = tmp_path_factory.mktemp("batch01time")
    return grade_batch(base, "01_ngrams", notebooks, limits=SHORT)


def test_01_honest_notebook_keeps_every_point(batch01):
    honest = batch01["records"]["honest"]
    assert all(t["status"] == "passed" and t["points"] == t["max_points"] for t in honest["tasks"])


def test_01_nothing_left_behind_and_results_add_up(batch01):
    check_leaves_nothing_and_adds_up(batch01)


def test_01_the_summary_says_which_tests_ran(batch01):
    assert batch01["notes"][0].startswith("tests: public and hidden tests (secret ")
    assert "1 extra case from --tests" in batch01["notes"][0]


def test_1_hidden_cases_come_from_the_secret_not_from_the_package(batch01):
    """A table of every answer one can prepare from the package earns the public points only:
    the hidden inputs are drawn from seeds derived from the secret."""
    memo = task(batch01, "memoriser", "1.1")
    by_case = {c["name"]: c for c in memo["cases"]}
    public = {case.name for case in get_task("1.1").cases}
    assert all(by_case[name]["status"] == "passed" for name in public)
    assert memo["points"] == public_points("1.1")
    hidden = [c for c in memo["cases"] if c["hidden"]]
    assert len(hidden) == len(get_task("1.1").hidden) + 1  # the generators, the extra case
    assert all(c["points"] == 0 for c in hidden)


def test_1_the_instructor_s_extra_cases_are_graded_and_hidden(batch01):
    honest = task(batch01, "honest", "1.1")
    extra = honest["cases"][-1]
    assert extra["name"] == "the instructor's own: a four-word sentence"
    assert extra["hidden"] and extra["max_points"] == 2 and extra["status"] == "passed"
    generated = sum(h.points for h in get_task("1.1").hidden)
    assert honest["max_points"] == public_points("1.1") + generated + 2


@isolated
def test_1_children_never_see_the_secret_or_the_tests_file(batch01):
    first = task(batch01, "secret-reader", "1.1")["cases"][0]
    assert first["status"] == "error" and "ValueError: nothing found" in first["message"], first


@isolated
def test_2_a_child_reads_nothing_another_left_in_the_shared_folders(batch01):
    assert task(batch01, "a-tmp-writer", "1.1")["status"] == "passed"
    copier = task(batch01, "z-tmp-reader", "1.1")
    assert copier["points"] == 0, copier


def test_2_the_tmp_folders_are_private_and_recorded(batch01):
    isolation = task(batch01, "honest", "1.1")["isolation"]
    assert isolation["tmp"] == ("tmpfs" if can_isolate() else "folder")
    log = [json.loads(line) for line in (batch01["out"] / "log.jsonl").read_text().splitlines()]
    assert {entry["isolation"]["tmp"] for entry in log} == {isolation["tmp"]}


def test_4_changing_the_caller_s_sentences_fails_the_cases(batch01):
    padded = task(batch01, "pads-the-input", "1.1")
    assert padded["points"] == 0
    public = next(c for c in padded["cases"] if not c["hidden"])
    assert "sentences" in public["message"] and GIVES_0 in public["message"].lower()


@pytest.mark.parametrize("name", list(TAMPERING))
def test_3_tampering_with_the_tripwire_is_itself_forbidden(batch01, name):
    """Each notebook calls the course's reference after trying to switch the tripwire off
    (or blind it): the task gets 0, the message names what it tried, the other tasks of the
    notebook keep their points."""
    graded = task(batch01, f"tamper-{name}", "1.1")
    assert graded["status"] == "forbidden" and graded["points"] == 0, graded["cases"][0]
    assert graded["cases"][0]["message"] == forbidden_message(TAMPERING[name][1])
    others = [t for t in batch01["records"][f"tamper-{name}"]["tasks"] if t["id"] != "1.1"]
    assert all(t["status"] == "passed" for t in others), name


def test_3_a_forbidden_call_while_loading_costs_the_tasks_that_forbid_it(batch01):
    """A child runs chapter 1's tasks strictest first, the notebook loaded under the first
    task's tripwire: a call that only task 1.10 forbids, made while the notebook loads, costs
    task 1.10 alone; the next child loads it under the next task's tripwire."""
    tasks = {t["id"]: t for t in batch01["records"]["loads-with-a-forbidden-call"]["tasks"]}
    assert tasks["1.10"]["status"] == "forbidden" and tasks["1.10"]["points"] == 0
    assert tasks["1.10"]["cases"][0]["message"] == forbidden_message("coursepkg.data")
    assert all(t["status"] == "passed" for i, t in tasks.items() if i != "1.10"), tasks


def test_5_forbidden_cases_keep_their_points_in_the_books(batch01):
    """The task is zeroed, but each case keeps its max points and says what was called."""
    called = task(batch01, "calls-the-package", "1.4")
    assert called["status"] == "forbidden" and called["points"] == 0
    assert called["max_points"] == task(batch01, "honest", "1.4")["max_points"]
    message = called["cases"][0]["message"]
    assert message.startswith("forbidden: you called ") and message.endswith("gives 0 for this.")
    assert all(c["status"] == "forbidden" and c["message"] == message for c in called["cases"])
    assert all(c["max_points"] > 0 for c in called["cases"])
    feedback = (batch01["out"] / "feedback" / "calls-the-package.md").read_text()
    section = feedback.split("## Task 1.4")[1].split("## Task")[0]  # up to the next task
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(lines) == len(called["cases"])
    assert all(line.startswith("- FORBIDDEN [0/") and "forbidden: you called" in line
               for line in lines)
    others = [t for t in batch01["records"]["calls-the-package"]["tasks"] if t["id"] != "1.4"]
    assert all(t["status"] == "passed" for t in others)


def test_6_a_syntax_error_is_reported_on_its_own_task_with_cell_and_line(batch01):
    for student, broken, reason in [
        ("syntax-error", "1.2", "was never closed"),
        ("compile-error", "1.3", "duplicate argument"),
    ]:
        record = batch01["records"][student]
        bad = task(batch01, student, broken)
        assert bad["status"] == "error" and bad["points"] == 0
        message = bad["cases"][0]["message"]
        assert "code cell " in message and " at line " in message and reason in message
        assert all(t["status"] == "passed" for t in record["tasks"] if t["id"] != broken), student


def test_6_a_case_that_times_out_fails_alone(batch01_time):
    check_leaves_nothing_and_adds_up(batch01_time)
    looped = task(batch01_time, "loops-once", "1.1")
    first, rest = looped["cases"][0], looped["cases"][1:]
    assert first["status"] == "timeout"
    assert all(c["status"] == "passed" for c in rest), rest
    assert looped["points"] == looped["max_points"] - first["max_points"]


def test_6_a_task_that_always_loops_costs_at_most_twice_the_timeout(batch01_time):
    looped = task(batch01_time, "loops-always", "1.4")
    assert {c["status"] for c in looped["cases"]} == {"timeout"}
    not_run = [c for c in looped["cases"] if c["message"].startswith("Not run")]
    spent = f"Not run: the task's earlier cases used all its {task_seconds(SHORT):g} s."
    assert not_run and all(c["message"] == spent for c in not_run)
    assert len(looped["cases"]) - len(not_run) <= 2
    others = [t for t in batch01_time["records"]["loops-always"]["tasks"] if t["id"] != "1.4"]
    assert all(t["status"] == "passed" for t in others)


# ----------------------------------------------------------------------------- chapters 2, 4, 7


SDPA_BY = {  # private routes to torch's attention kernels, each as the body of the function
    "math-alias": "out, weights = torch._scaled_dot_product_attention_math(q, k, v, mask)",
    "ops-alias": "out, weights = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, mask)",
    "through-map": "out, weights = list(map(torch._scaled_dot_product_attention_math, [q], [k], "
                   "[v], [mask]))[0]",
    "c-alias": "out = torch._C._nn.scaled_dot_product_attention(q, k, v, mask)\n"
               "    weights = out",
    "in-a-thread": "box = []\n    t = threading.Thread(target=lambda: box.append("
                   "torch._scaled_dot_product_attention_math(q, k, v, mask)))\n"
                   "    t.start(); t.join()\n    out, weights = box[0] if box else (q, q)",
}


def sdpa_notebook(body: str) -> nbformat.NotebookNode:
    """Chapter 4's causal head (task 4.3) computed by a private route to torch's attention."""
    return with_function("04_self_attention", "causal_self_attention", f'''
import threading
import torch
def causal_self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    {body}
    return out, weights
''')


@pytest.fixture(scope="module")
def batch04(tmp_path_factory):
    notebooks = {"honest": solution("04_self_attention")}
    notebooks |= {name: sdpa_notebook(body) for name, body in SDPA_BY.items()}
    notebooks["scales-w-q-in-place"] = with_function(
        "04_self_attention", "causal_self_attention", '''
import math
import torch
def causal_self_attention(x, w_q, w_k, w_v):
    w_q /= math.sqrt(w_q.shape[0])  # the scale folded into the caller's weights
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    T = x.shape[1]
    scores = (q @ k.transpose(-2, -1)).masked_fill(
        ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''')
    notebooks["pads-on-the-right-only"] = with_function(
        "04_self_attention", "local_mask", '''
import torch
def local_mask(keep, window):
    T = keep.shape[1]
    keep = torch.arange(T)[None, :] < keep.sum(dim=1, keepdim=True)  # a length per sequence
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    inside = (s <= t) & (s > t - window)
    return (inside & keep[:, None, :] & keep[:, :, None]) | (
        torch.eye(T, dtype=torch.bool) & ~keep[:, :, None])
''')
    return grade_batch(tmp_path_factory.mktemp("batch04"), "04_self_attention", notebooks)


def test_04_honest_notebook_keeps_every_point_and_nothing_is_left(batch04):
    honest = batch04["records"]["honest"]
    assert all(t["status"] == "passed" for t in honest["tasks"])
    check_leaves_nothing_and_adds_up(batch04)


@pytest.mark.parametrize("student", list(SDPA_BY))
def test_3_private_routes_to_a_forbidden_kernel_are_forbidden(batch04, student):
    graded = task(batch04, student, "4.3")
    assert graded["status"] == "forbidden" and graded["points"] == 0, graded["cases"][0]
    assert graded["max_points"] == task(batch04, "honest", "4.3")["max_points"]
    assert graded["cases"][0]["message"].startswith("forbidden: you called ")
    assert task(batch04, student, "4.1")["status"] == "passed"


def test_4_scaling_a_weight_in_place_fails_every_case(batch04):
    """w_q /= sqrt(d_k) gives the right answer, but it changes the caller's w_q: every case
    fails."""
    graded = task(batch04, "scales-w-q-in-place", "4.3")
    assert graded["points"] == 0
    assert all(GIVES_0 in c["message"].lower() for c in graded["cases"]), graded["cases"]
    assert all("input w_q " in c["message"] for c in graded["cases"] if not c["hidden"])


def test_7_what_the_text_promises_is_checked_by_a_public_case(batch04):
    """"padding anywhere": a mask built from lengths fails a public case, as the check cell
    shows."""
    graded = task(batch04, "pads-on-the-right-only", "4.2")
    public = [c for c in graded["cases"] if not c["hidden"]]
    assert [c for c in public if c["status"] != "passed"], public


def test_7_the_check_cell_and_the_grader_give_the_same_forbidden_message(batch04):
    from coursepkg.checks import run_task

    namespace: dict = {}
    exec(compile(  # noqa: S102 - the test's own code
        "import torch\ndef f(x, w_q, w_k, w_v):\n"
        "    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T\n"
        "    return torch._scaled_dot_product_attention_math(q, k, v, is_causal=True)\n",
        "<student>", "exec"), namespace)
    in_notebook = run_task("4.3", namespace["f"])
    assert in_notebook.points == 0
    graded = task(batch04, "math-alias", "4.3")
    assert in_notebook.cases[0].message == graded["cases"][0]["message"]
    assert in_notebook.cases[0].message.endswith("the grader gives 0 for this.")


@pytest.fixture(scope="module")
def batch02(tmp_path_factory):
    notebooks = {
        "honest": solution("02_rnn"),
        "gru-cell-by-vf": with_function("02_rnn", "gru_layer", '''
import torch
def gru_layer(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = torch._VF.gru_cell(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
        states.append(h)
    return torch.stack(states, dim=1), h
'''),
        "gru-cell-by-ops": with_function("02_rnn", "gru_layer", '''
import torch
def gru_layer(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = torch.ops.aten.gru_cell(x[:, t], h, weight_ih, weight_hh, bias_ih, bias_hh)
        states.append(h)
    return torch.stack(states, dim=1), h
'''),
        "reuses-h0": with_function("02_rnn", "gru_layer", '''
import torch
def gru_layer(x, h0, weight_ih, weight_hh, bias_ih, bias_hh):
    states = []
    for t in range(x.shape[1]):
        a_r, a_z, a_n = (x[:, t] @ weight_ih.T + bias_ih).chunk(3, dim=-1)
        b_r, b_z, b_n = (h0 @ weight_hh.T + bias_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(a_r + b_r), torch.sigmoid(a_z + b_z)
        n = torch.tanh(a_n + r * b_n)
        h0.copy_((1 - z) * n + z * h0)  # the state kept in h0 itself
        states.append(h0.clone())
    return torch.stack(states, dim=1), h0.clone()
'''),
    }
    return grade_batch(tmp_path_factory.mktemp("batch02"), "02_rnn", notebooks)


def test_02_honest_keeps_every_point_private_gru_routes_are_forbidden(batch02):
    assert all(t["status"] == "passed" for t in batch02["records"]["honest"]["tasks"])
    for student in ("gru-cell-by-vf", "gru-cell-by-ops"):
        graded = task(batch02, student, "2.2")
        assert graded["status"] == "forbidden" and graded["points"] == 0, student
    check_leaves_nothing_and_adds_up(batch02)


def test_4_overwriting_h0_fails_the_cases(batch02):
    graded = task(batch02, "reuses-h0", "2.2")
    assert graded["points"] == 0
    public = next(c for c in graded["cases"] if not c["hidden"])
    assert "h0" in public["message"] and GIVES_0 in public["message"].lower()


@pytest.fixture(scope="module")
def batch07(tmp_path_factory):
    sample = solution_source("07_transformer", "sample")
    notebooks = {
        "honest": solution("07_transformer"),
        "zeroes-the-prompt": with_function("07_transformer", "sample", renamed(
            sample, "sample", "_sample") + '''
def sample(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None, generator=None):
    out = _sample(model, idx, max_new_tokens, block_size, temperature, top_k, generator)
    idx.zero_()
    return out
'''),
    }
    return grade_batch(tmp_path_factory.mktemp("batch07"), "07_transformer", notebooks)


def test_4_zeroing_the_prompt_fails_the_cases(batch07):
    assert all(t["status"] == "passed" for t in batch07["records"]["honest"]["tasks"])
    graded = task(batch07, "zeroes-the-prompt", "7.4")
    assert graded["points"] == 0
    public = next(c for c in graded["cases"] if not c["hidden"])
    assert "idx" in public["message"] and GIVES_0 in public["message"].lower()
    check_leaves_nothing_and_adds_up(batch07)


# ----------------------------------------------------------------------------- 8: the command line


def run_cli(*args: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "coursepkg", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    return proc.returncode, proc.stdout, proc.stderr


def test_8_version():
    from coursepkg import __version__

    code, out, err = run_cli("--version")
    assert (code, out.strip(), err) == (0, f"coursepkg {__version__}", "")


def test_8_grade_help_lists_the_assignments():
    from coursepkg.course import CHAPTERS

    code, out, _ = run_cli("grade", "--help")
    assert code == 0
    assert all(f"  {chapter.stem} " in out for chapter in CHAPTERS)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: ["--out", str(tmp / "a-file")], "is a file, not a folder"),
        (lambda tmp: [str(tmp / "code.py")], "not a notebook: "),
        (lambda tmp: ["--secret", str(tmp / "no-secret")], "no secret file"),
        (lambda tmp: ["--secret", str(tmp / "a-file")], "the secret file"),
        (lambda tmp: ["--tests", str(tmp / "bad_cases.py")], "there is no task '9.9'"),
    ],
)
def test_8_usage_mistakes_are_one_line_errors(tmp_path, make, expected):
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "code.py").write_text("def count_ngrams(s, n):\n    return {}\n")
    (tmp_path / "bad_cases.py").write_text("CASES = {'9.9': []}\n")
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(solution("01_ngrams"), subs / "alice.ipynb")
    args = make(tmp_path)
    if "--out" not in args:
        args = [*args, "--out", str(tmp_path / "out")]
    if not any(a.endswith(".py") and "cases" not in a for a in args):
        args = [str(subs), *args]
    code, out, err = run_cli("grade", "01_ngrams", *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err and err.startswith("coursepkg: error: "), err


def test_8_a_new_secret_is_private_and_never_overwritten(tmp_path):
    target = tmp_path / "secret"
    code, out, _ = run_cli("secret", str(target))
    assert code == 0 and "keep it" in out.lower()
    assert target.stat().st_mode & 0o777 == 0o600
    first = target.read_bytes()
    code, _, err = run_cli("secret", str(target))
    assert code == 2 and "exists" in err and target.read_bytes() == first


def test_without_a_secret_the_grader_says_it_runs_public_tests_only(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(solution("01_ngrams"), subs / "alice.ipynb")
    code, out, _ = run_cli("grade", "01_ngrams", str(subs), "--out", str(tmp_path / "out"))
    assert code == 0 and "public tests only" in out
    log = json.loads((tmp_path / "out" / "log.jsonl").read_text().splitlines()[0])
    assert log["tests"].startswith("public tests only")
    result = json.loads((tmp_path / "out" / "results" / "alice.json").read_text())
    assert result["max_score"] == sum(public_points(t.id) for t in tasks_for("01_ngrams"))
    assert {t["visibility"] for t in result["tests"]} == {"visible"}
    assert os.listdir(tmp_path / "out" / "cache")
