"""The grader survives hostile submissions: each notebook here is built by the test itself.

One batch is graded once (module fixture) with short limits; each test reads its row.
"""

import csv
import json
import os
from pathlib import Path

import nbformat
import pytest
from checks_support import TEST_SECRET

from coursepkg.checks import get_task, tasks_for
from coursepkg.checks.core import grading_cases, write_secret
from coursepkg.grading.grader import grade
from coursepkg.grading.sandbox import Limits, can_isolate

ROOT = Path(__file__).resolve().parents[1]

GOOD_COUNT = """
from collections import Counter
def count_ngrams(sentences, n):
    counts = Counter()
    for sentence in sentences:
        padded = ["<s>"] * (n - 1) + list(sentence) + ["</s>"]
        for i in range(len(padded) - n + 1):
            counts[tuple(padded[i:i + n])] += 1
    return dict(counts)
"""

HOSTILE = {
    "good": GOOD_COUNT,
    "loop": "def count_ngrams(s, n):\n    while True:\n        pass\n",
    "stubborn": (
        "import signal\n"
        "def count_ngrams(s, n):\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    while True:\n"
        "        try:\n"
        "            pass\n"
        "        except KeyboardInterrupt:\n"
        "            pass\n"
    ),
    "sysexit": "import sys\nsys.exit(1)\ndef count_ngrams(s, n):\n    sys.exit(0)\n",
    "osexit": "import os\ndef count_ngrams(s, n):\n    os._exit(0)\n",
    "segfault": (
        "import os, signal\ndef count_ngrams(s, n):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    ),
    "membomb": "def count_ngrams(s, n):\n    return bytearray(50 * 2**30)\n",
    "forkbomb": (
        "import os\ndef count_ngrams(s, n):\n    while True:\n        try:\n"
        "            os.fork()\n        except OSError:\n            pass\n"
    ),
    "printer": "def count_ngrams(s, n):\n    while True:\n        print('x' * 65536)\n",
    "alwayseq": (
        "class Yes(dict):\n    def __eq__(self, other):\n        return True\n"
        "def count_ngrams(s, n):\n    return Yes()\n"
    ),
    "thread": (
        "import threading, time\n"
        "def count_ngrams(s, n):\n"
        "    threading.Thread(target=lambda: [print('All tests passed') or time.sleep(0.01)"
        " for _ in iter(int, 1)], daemon=False).start()\n"
        "    return {}\n"
    ),
    "patcher": (
        "import builtins, torch\n"
        "torch.allclose = lambda *a, **k: True\n"
        "def count_ngrams(s, n):\n"
        "    builtins.sum = lambda *a: 0\n"
        "    torch.testing.assert_close = lambda *a, **k: None\n"
        "    return {}\n"
    ),
    "reference": "from coursepkg.checks.ch01_ngrams import count_ngrams\n",
    "library": (
        "from coursepkg.ngram import ngrams, pad\n"
        "from collections import Counter\n"
        "def count_ngrams(s, n):\n"
        "    return dict(Counter(g for x in s for g in ngrams(pad(x, n), n)))\n"
    ),
    "renamed": "def count_ngram(s, n):\n    return {}\n",
    # a constant assignment that needs a dropped call's result is skipped, the rest is graded
    "badconst": (
        "import torch\nrnn = torch.nn.RNN(2, 3)\nparams = (rnn.weight_ih_l0, rnn.bias_ih_l0)\n"
        "SCALE: float = undefined_name * 2\n" + GOOD_COUNT
    ),
    "badimport": "import not_a_module_of_this_course\n" + GOOD_COUNT,  # skipped likewise
    "needsconst": (
        "import torch\nrnn = torch.nn.RNN(2, 3)\nparams = (rnn.weight_ih_l0,)\n"
        "def count_ngrams(s, n):\n    return dict(params)\n"
    ),
    "stdin": "def count_ngrams(s, n):\n    return {('a',): int(input('n? '))}\n",
    "network": (
        "import urllib.request\ndef count_ngrams(s, n):\n"
        "    return urllib.request.urlopen('http://127.0.0.1:9', timeout=1).read()\n"
    ),
}


# Every other task of the set, as an untouched stub: a hostile 1.1 must cost only task 1.1.
OTHER_STUBS = "".join(
    f"def {task.func_name}(*args):\n    raise NotImplementedError('Task {task.id}')\n"
    for task in tasks_for("01_ngrams") if task.id != "1.1"
)


def notebook(code: str, **metadata) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(metadata=metadata)
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Submission"),
        nbformat.v4.new_code_cell("!pip install requests\nname = input()"),
        nbformat.v4.new_code_cell(code),
        nbformat.v4.new_code_cell("check('1.1', count_ngrams)"),
        nbformat.v4.new_code_cell(OTHER_STUBS),
    ]
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    subs = tmp_path_factory.mktemp("subs")
    for name, code in HOSTILE.items():
        nbformat.write(notebook(code), subs / f"{name}.ipynb")
    # the untouched exercise and the solution notebook of the course
    (subs / "untouched.ipynb").write_bytes((ROOT / "exercises" / "01_ngrams.ipynb").read_bytes())
    (subs / "solution.ipynb").write_bytes((ROOT / "solutions" / "01_ngrams.ipynb").read_bytes())
    # a forged results file and edited metadata: must change nothing
    forged = notebook("def count_ngrams(s, n):\n    return {}\n", coursepkg={"score": 100})
    forged.cells[2].metadata["tags"] = ["points:100"]
    forged.cells[2].outputs = [nbformat.v4.new_output("stream", text="4/4 points\n")]
    nbformat.write(forged, subs / "forged.ipynb")
    out = tmp_path_factory.mktemp("out")
    # writing a fake gradebook into the output folder, reading another submission
    writer = (
        "def count_ngrams(s, n):\n"
        f"    open({str(out / 'grades.csv')!r}, 'w').write('student,total\\nwriter,30\\n')\n"
        "    open('grades.csv', 'w').write('forged')\n"
        "    return {}\n"
    )
    reader = (
        f"def count_ngrams(s, n):\n    return eval(open({str(subs / 'solution.ipynb')!r}).read())\n"
    )
    nbformat.write(notebook(writer), subs / "writer.ipynb")
    nbformat.write(notebook(reader), subs / "reader.ipynb")
    # nbformat 3, an edited kernelspec, a 200 MB notebook
    v3 = nbformat.v3.new_notebook()
    v3.worksheets = [
        nbformat.v3.new_worksheet(cells=[nbformat.v3.new_code_cell(GOOD_COUNT + OTHER_STUBS)])
    ]
    (subs / "oldformat.ipynb").write_text(nbformat.v3.writes_json(v3))
    nbformat.write(
        notebook(GOOD_COUNT, kernelspec={"name": "bash", "display_name": "x"}),
        subs / "kernel.ipynb",
    )
    huge = notebook(GOOD_COUNT)
    huge.cells[2].outputs = [nbformat.v4.new_output("stream", text="x" * 200_000_000)]
    nbformat.write(huge, subs / "huge.ipynb")
    markdown = notebook("")
    markdown.cells[2] = nbformat.v4.new_markdown_cell(GOOD_COUNT)  # the code typed into markdown
    nbformat.write(markdown, subs / "markdown.ipynb")
    nbformat.write(notebook(GOOD_COUNT), subs / "o'neil \"q\".ipynb")
    (subs / "=HYPERLINK(evil).ipynb").write_text("{not json")
    (subs / "truncated.ipynb").write_text(nbformat.writes(notebook(GOOD_COUNT))[:200])
    (subs / "listy.ipynb").write_text("[1, 2]")
    (subs / "latin1.ipynb").write_bytes(b'{"cells": "\xe9"}')
    limits = Limits(timeout=4.0, memory_mb=1024)
    rows = grade("01_ngrams", [subs], out, jobs=2, limits=limits, progress=False)
    return subs, out, {found.student: record for found, record in rows}, limits


def task(records, student, task_id="1.1"):
    return next(t for t in records[student]["tasks"] if t["id"] == task_id)


def test_the_solution_gets_full_marks_and_the_exercise_zero(graded):
    _, _, records, _ = graded
    assert all(t["status"] == "passed" for t in records["solution"]["tasks"])
    # the untouched exercise: stubs are not attempted; a debug task's buggy starter code fails
    kinds = {task.id: task.kind for task in tasks_for("01_ngrams")}
    for t in records["untouched"]["tasks"]:
        assert t["status"] == ("failed" if kinds[t["id"]] == "debug" else "not attempted"), t
    assert sum(t["points"] for t in records["untouched"]["tasks"]) == 0


@pytest.mark.parametrize(
    ("student", "status"),
    [
        ("good", "passed"),
        ("loop", "timeout"),
        ("stubborn", "timeout"),
        ("sysexit", "error"),
        ("osexit", "crashed"),
        ("segfault", "crashed"),
        ("membomb", "memory"),
        ("forkbomb", "timeout"),
        ("printer", "timeout"),
        ("alwayseq", "failed"),
        ("thread", "forbidden"),  # the grader runs the code on one thread
        ("patcher", "failed"),
        ("reference", "forbidden"),
        ("library", "forbidden"),
        ("renamed", "missing"),
        ("badconst", "passed"),
        ("badimport", "passed"),
        ("needsconst", "error"),
        ("network", "error"),
        ("stdin", "error"),
        ("writer", "error"),
        ("reader", "error"),
        ("oldformat", "passed"),
        ("kernel", "passed"),
        ("markdown", "missing"),
        ("o_neil_q_", "passed"),
        ("forged", "failed"),
    ],
)
def test_each_hostile_task_gets_its_status_and_no_credit(graded, student, status):
    _, _, records, _ = graded
    result = task(records, student)
    assert result["status"] == status, result
    if status != "passed":
        assert result["points"] == 0
    # a failure costs only the task it affects: the other tasks are stubs, not attempted
    others = {t["status"] for t in records[student]["tasks"] if t["id"] != "1.1"}
    assert others == {"not attempted"}


@pytest.mark.parametrize("student", ["_HYPERLINK_evil_", "truncated", "listy", "latin1", "huge"])
def test_unreadable_files_are_reported_not_fatal(graded, student):
    _, _, records, _ = graded
    assert records[student]["status"] == "unreadable"
    assert all(t["points"] == 0 for t in records[student]["tasks"])


def test_the_gradebook_files(graded):
    _, out, records, _ = graded
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert [r["student"] for r in rows] == sorted(records)
    solution = next(r for r in rows if r["student"] == "solution")
    assert solution["total"] == solution["max"] and solution["status"] == "passed"
    evil = next(r for r in rows if r["student"] == "_HYPERLINK_evil_")
    assert evil["file"].startswith("'=")  # neutralised for spreadsheets
    for student in records:
        result = json.loads((out / "results" / f"{student}.json").read_text())
        assert {"score", "max_score", "tests"} <= result.keys()
        assert all(
            {"name", "score", "max_score", "status", "output", "visibility"} <= t.keys()
            for t in result["tests"]
        )
        assert (out / "feedback" / f"{student}.md").is_file()
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert len(log) == len(records)


def test_isolation_in_force_is_recorded(graded):
    _, _, records, _ = graded
    isolation = task(records, "good")["isolation"]
    assert {"memory", "cpu", "file size"} <= set(isolation["limits"])
    if can_isolate():
        assert isolation["network"] and isolation["filesystem"] and isolation["user"]
        assert isolation["tmp"] == "tmpfs"


def test_regrading_is_cached_and_byte_identical(graded, tmp_path):
    subs, out, _, limits = graded
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    grade("01_ngrams", [subs], out, jobs=2, limits=limits, progress=False)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert all(entry["cached"] for entry in log[len(log) // 2 :])
    for rel, data in before.items():
        if rel.parts[0] in ("results", "grades.csv") or rel.name == "grades.csv":
            assert (out / rel).read_bytes() == data, rel


def test_nothing_is_written_outside_out(graded):
    subs, _, _, _ = graded
    names = {p.name for p in subs.iterdir()}
    assert all(n.endswith(".ipynb") for n in names), names


def test_cli_grades_a_folder_and_reports_usage_mistakes(tmp_path, capsys):
    from coursepkg.__main__ import main

    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "subs" / "alice" / "01_ngrams.ipynb").write_bytes(
        (ROOT / "solutions" / "01_ngrams.ipynb").read_bytes()
    )
    out = tmp_path / "out"
    assert main(["grade", "01_ngrams", str(tmp_path / "subs"), "--out", str(out)]) == 0
    assert "alice" in capsys.readouterr().out
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert rows[0]["student"] == "alice" and rows[0]["total"] == rows[0]["max"]
    assert main(["grade", "99_nothing", str(tmp_path), "--out", str(out)]) == 2
    assert "unknown assignment '99_nothing'" in capsys.readouterr().err
    assert main(["grade", "01_ngrams", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_a_killed_run_resumes_to_the_same_gradebook(tmp_path, short_tmpdir):
    import signal
    import subprocess
    import sys
    import time

    subs = tmp_path / "subs"
    subs.mkdir()
    for i in range(4):
        nbformat.write(notebook(GOOD_COUNT), subs / f"good{i}.ipynb")
    nbformat.write(notebook(HOSTILE["loop"]), subs / "slow.ipynb")

    def command(out):
        return [
            sys.executable,
            "-m",
            "coursepkg",
            "grade",
            "01_ngrams",
            str(subs),
            "--out",
            str(out),
            "--jobs",
            "1",
            "--timeout",
            "3",
        ]

    out = tmp_path / "out"
    # A SIGKILLed grader cannot remove its temporary folders: they go into one of the test's own.
    run = subprocess.Popen(
        command(out), start_new_session=True, stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(short_tmpdir)},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((out / "cache").glob("*.json"))) < 2:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)  # SIGKILL mid-batch: no clean-up code runs
    run.wait()
    assert not (out / "grades.csv").exists()
    assert 2 <= len(list((out / "cache").glob("*.json"))) < 5

    subprocess.run(command(out), check=True, capture_output=True)
    clean = tmp_path / "clean"
    subprocess.run(command(clean), check=True, capture_output=True)
    assert (out / "grades.csv").read_bytes() == (clean / "grades.csv").read_bytes()
    for result in (clean / "results").iterdir():
        assert (out / "results" / result.name).read_bytes() == result.read_bytes()
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert any(entry["cached"] for entry in log)
    leftovers = [p for p in out.rglob(".*") if p.is_file()]
    assert leftovers == []


def test_sigterm_stops_a_run_cleanly_and_it_resumes(tmp_path):
    """SIGTERM (a scheduler's stop: Kubernetes, Slurm) unwinds like Ctrl-C: nothing new starts,
    the exit code is 143 with one line; the same command then finishes the class."""
    import signal
    import subprocess
    import sys
    import time

    subs = tmp_path / "subs"
    subs.mkdir()
    for i in range(6):
        nbformat.write(notebook(GOOD_COUNT), subs / f"good{i}.ipynb")
    nbformat.write(notebook(HOSTILE["loop"]), subs / "a-slow.ipynb")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "coursepkg", "grade", "01_ngrams", str(subs), "--out",
               str(out), "--jobs", "1", "--timeout", "3"]
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((out / "cache").glob("*.json"))) < 1:
        time.sleep(0.05)  # a notebook is graded: the run is under way
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == (
        "coursepkg: terminated (SIGTERM); finished work is kept (run the same command to go on)")
    assert "Traceback" not in err
    assert not (out / "grades.csv").exists()
    subprocess.run(command, check=True, capture_output=True)
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert [row["student"] for row in rows] == ["a-slow", *(f"good{i}" for i in range(6))]
    column = next(name for name in rows[0] if name.endswith(" count_ngrams"))
    assert rows[0][column] == "0" and len({row[column] for row in rows[1:]}) == 1
    assert float(rows[1][column]) > 0  # every good count_ngrams has its points


def test_a_long_tmpdir_does_not_stop_the_fork_server(tmp_path):
    """multiprocessing puts the fork server's socket under TMPDIR; with a TMPDIR whose socket
    path is over AF_UNIX's 107 bytes the grader used to end in a traceback ("AF_UNIX path too
    long"). It now puts its sockets in a short folder and grades as usual, and the TMPDIR stays
    as the user set it for everything else (the children's limits, their own files)."""
    import subprocess
    import sys

    deep = tmp_path / ("a-long-temporary-folder-" * 4)
    deep.mkdir()
    assert len(str(deep)) + len("/pymp-XXXXXXXX/listener-XXXXXXXX") > 107
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(notebook(GOOD_COUNT), subs / "good.ipynb")
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "coursepkg", "grade", "01_ngrams", str(subs), "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(deep)},
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    rows = list(csv.DictReader((out / "grades.csv").open()))
    column = next(name for name in rows[0] if name.endswith(" count_ngrams"))
    assert float(rows[0][column]) > 0
    assert list(deep.iterdir()) == []  # the grader's own temporary folder is removed


def test_gradescope_mode_writes_results_json(tmp_path, capsys):
    from coursepkg.__main__ import main

    submission = tmp_path / "autograder" / "submission"
    submission.mkdir(parents=True)
    (submission / "01_ngrams.ipynb").write_bytes(
        (ROOT / "solutions" / "01_ngrams.ipynb").read_bytes()
    )
    results = tmp_path / "autograder" / "results" / "results.json"
    secret = tmp_path / "autograder" / "source" / "secret"
    secret.parent.mkdir(parents=True)
    write_secret(secret, TEST_SECRET)
    code = main(
        [
            "grade",
            "01_ngrams",
            "--secret",
            str(secret),
            "--gradescope",
            "--gradescope-submission",
            str(submission),
            "--gradescope-results",
            str(results),
            "--out",
            str(tmp_path / "work"),
        ]
    )
    assert code == 0
    result = json.loads(results.read_text())
    most = sum(c.points for t in tasks_for("01_ngrams") for c in grading_cases(t, TEST_SECRET))
    assert result["score"] == result["max_score"] == most
    visibilities = {t["visibility"] for t in result["tests"]}
    assert visibilities == {"visible", "after_published"}


def one_case(code: str, task_id: str = "1.1") -> dict:
    """A request for the first public case of a task."""
    args = get_task(task_id).cases[0].args
    return {"code": code, "task": task_id, "cases": [{"index": 0, "args": args}]}


def test_without_privileges_the_limits_still_hold(tmp_path):
    """What runs when the grader is not root: no namespaces or user, but limits and timeout,
    and a temporary folder of its own."""
    from coursepkg.grading.sandbox import run_in_child
    from coursepkg.grading.worker import child_main

    request = one_case(HOSTILE["membomb"])
    outcome = run_in_child(
        child_main, request, Limits(timeout=5, memory_mb=512), str(tmp_path), [], None
    )
    assert outcome.isolation["user"] is False and outcome.isolation["network"] is False
    assert outcome.isolation["tmp"] == "folder"
    assert "memory" in outcome.isolation["limits"]
    assert outcome.messages[0]["exc"] == "MemoryError"
    outcome = run_in_child(
        child_main, one_case(HOSTILE["loop"]), Limits(timeout=1.5), str(tmp_path), [], None
    )
    assert outcome.ended == "timeout" and outcome.messages == []


def test_two_graders_at_once_do_not_disturb_each_other(tmp_path):
    """Each grader's children run as users of its own: one's clean-up never kills the other's."""
    import subprocess
    import sys

    subs = tmp_path / "subs"
    subs.mkdir()
    for i in range(3):
        nbformat.write(notebook(GOOD_COUNT), subs / f"good{i}.ipynb")
    nbformat.write(notebook(HOSTILE["forkbomb"]), subs / "bomb.ipynb")
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coursepkg",
                "grade",
                "01_ngrams",
                str(subs),
                "--out",
                str(tmp_path / f"out{k}"),
                "--timeout",
                "3",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for k in range(2)
    ]
    assert [run.wait(timeout=120) for run in runs] == [0, 0]
    for k in range(2):
        rows = {r["student"]: r for r in csv.DictReader((tmp_path / f"out{k}/grades.csv").open())}
        public = f"{sum(case.points for case in get_task('1.1').cases):g}"  # no --secret
        assert [rows[f"good{i}"]["1.1 count_ngrams"] for i in range(3)] == [public] * 3
        assert rows["bomb"]["1.1 count_ngrams"] == "0"


def test_the_callers_main_script_is_not_run_again_in_children(tmp_path):
    """multiprocessing would re-run the calling script in the server and each child."""
    import subprocess
    import sys

    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(notebook(GOOD_COUNT), subs / "good.ipynb")
    marker = tmp_path / "runs.txt"
    script = tmp_path / "grade_it.py"
    script.write_text(
        f"open({str(marker)!r}, 'a').write('ran\\n')\n"
        "from pathlib import Path\n"
        "from coursepkg.grading.grader import grade\n"
        f"rows = grade('01_ngrams', [Path({str(subs)!r})], Path({str(tmp_path / 'out')!r}),"
        " progress=False)\n"
        "assert rows[0][1]['tasks'][0]['status'] == 'passed', rows\n"
    )
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True, timeout=120)
    assert marker.read_text() == "ran\n"


FORK_AFTER_TENSOR_WORK = """
import os
import coursepkg.grading.preload
import torch
(torch.randn(300, 300) @ torch.randn(300, 300)).sum()  # like a checks module at import
pid = os.fork()
if pid == 0:
    (torch.randn(300, 300) @ torch.randn(300, 300)).sum()
    os._exit(0)
print(os.waitpid(pid, 0)[1])
"""


def test_a_fork_after_tensor_work_in_the_server_does_not_hang():
    """Tensor work in the fork server used to start torch's thread pool there; every child
    then waited forever on threads it did not have. The server now imports
    coursepkg.grading.preload first, which keeps torch on one thread."""
    import subprocess
    import sys

    from coursepkg.grading import sandbox

    assert sandbox._PRELOAD[0] == "coursepkg.grading.preload"
    result = subprocess.run(
        [sys.executable, "-c", FORK_AFTER_TENSOR_WORK], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "0", result.stderr


ESCAPING_DAEMON = """
import os, time
def count_ngrams(sentences, n):
    started, ready = os.pipe()
    if os.fork() == 0:          # a grandchild in a session of its own, outliving the child
        os.setsid()
        if os.fork() == 0:
            os.write(ready, b"!")
            time.sleep(600)
        os._exit(0)
    os.read(started, 1)         # return only once the daemon has left the child's group
    return {}
"""


@pytest.mark.skipif(not can_isolate(), reason="needs root on Linux (children run as own users)")
def test_no_process_of_a_child_outlives_its_task(tmp_path):
    """A daemon that left the child's process group is found by its user and killed; after a
    well-behaved child there is nothing to kill (and no fork of the grader is spent on it)."""
    from coursepkg.grading import sandbox
    from coursepkg.grading.grader import slot_uids
    from coursepkg.grading.worker import child_main

    (uid,) = slot_uids(1)
    request = one_case(ESCAPING_DAEMON)
    workdir = tmp_path / "work"
    workdir.mkdir()
    import os

    os.chown(workdir, uid, uid)
    killed = []
    real = sandbox._kill_user
    sandbox._kill_user = lambda u: (killed.append(sandbox._runs_as(u)), real(u))
    try:
        outcome = sandbox.run_in_child(
            child_main, request, Limits(timeout=20), str(workdir), [], uid
        )
        assert outcome.ended == "ok" and outcome.isolation["user"]
        assert killed == [True], "the daemon should still be alive when the clean-up starts"
        assert not sandbox._runs_as(uid), "a process of the child's user survived the task"
        request["code"] = GOOD_COUNT
        sandbox.run_in_child(child_main, request, Limits(timeout=20), str(workdir), [], uid)
        assert killed[1:] == [False] and not sandbox._runs_as(uid)
    finally:
        sandbox._kill_user = real
