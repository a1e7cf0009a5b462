"""Time a class graded unsharded against the same class in 2 local shards, and project the wall
time on W workers (issues 20 and 25).

Run with ``.venv/bin/python benchmarks/bench_shards.py`` (chapter 1, 200 submissions: about 15
minutes on 2 idle cores) or ``--n 2000`` (issue 25's class: about 65 minutes). Issue 20's
number, 50 complete submissions of chapter 7 graded with ``--jobs 2`` (the capstone's training
included), is ``--assignment 07_transformer --n 50 --complete --no-shards``.

Writes ``benchmarks/results/shards[-ASSIGNMENT][-complete][-N].json``: the assignment when it is
not 01_ngrams, ``-complete`` with ``--complete``, N when it is not 200 (``shards.json`` for the
default run, ``shards-2000.json`` for ``--n 2000``,
``shards-07_transformer-complete-50.json`` for issue 20's); a ``--quick`` run writes the same
name with ``.quick.json`` (ignored by git). Options: ``--n`` submissions (200),
``--assignment`` (01_ngrams), ``--complete`` (every notebook a complete submission: the
solution), ``--no-shards`` (only the unsharded grading and the projection), ``--workers`` for
the projection (1 2 4 8 16 32 64), ``--keep DIR`` (keep the batch and the graded folders),
``--resume DIR`` (go on in the folder of a run that stopped: a ``--keep`` folder, or the
temporary ``bench-shards-*`` folder a killed run leaves behind; the steps it timed, which
``timings.json`` there records, are not run again), ``--quick`` (a smoke run: 12 submissions,
4 with ``--complete``).

What it does:

1. The batch: the chapter's demo batch (:func:`coursepkg.grading.demo.write_demo`: the solution,
   the untouched exercise, one planted mistake per student) repeated to N notebooks, or with
   ``--complete`` N copies of the solution notebook (every task done, the train tasks trained by
   the grader), each made unique by a markdown cell with its student's id, so the grader's
   per-content cache never hits.
2. ``coursepkg grade`` of one notebook (a new process: its start-up, the forkserver importing
   torch, one submission), then of the whole batch with ``--jobs 2``: the per-submission cost of
   a 2-core worker is (whole - one) / (N - 1).
3. The same batch as 2 shards, ``--shard 1/2`` and ``--shard 2/2`` with ``--jobs 1`` each, two
   processes at the same time on this machine's 2 cores, then ``coursepkg merge``; its
   ``grades.csv`` must equal the unsharded one byte for byte (points only: the feedback also
   gives train tasks' times, which differ between any two gradings). Skipped with
   ``--no-shards``.
4. The projection: a class of N (and of 2,000) on W workers of 2 cores each, each grading
   ceil(N / W) notebooks: the one-notebook run (start-up and a notebook, a little pessimistic)
   + ceil(N / W) * per-submission + the merge (measured here, scaled to the class: it copies
   files, so it grows with N, not W; 0 with ``--no-shards``, which does not measure it). The
   scheduler's own overhead (pulling the image, starting pods) is not in it.

The two local shards cannot beat the unsharded run on the same 2 cores (the same work, plus a
second start-up): they show what sharding costs, and the projection what it buys.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib
import nbformat

ROOT = Path(__file__).resolve().parents[1]
COURSE = [sys.executable, "-m", "coursepkg"]
SECRET = "62656e63682d7368617264732d7365637265742d3031"  # a fixed test secret (hex)


def build_batch(assignment: str, n: int, folder: Path, *, complete: bool = False) -> list[Path]:
    """N unique notebooks made from the demo batch's variants, in turn (``complete``: from the
    solution notebook alone)."""
    from coursepkg.grading.demo import write_demo

    if complete:
        variants = [ROOT / "solutions" / f"{assignment}.ipynb"]
    else:
        variants = write_demo(assignment, ROOT, folder / "variants")
    made = []
    for i in range(n):
        source = variants[i % len(variants)]
        nb = nbformat.read(source, as_version=4)
        student = f"s{i:05d}-{'complete' if complete else source.stem}"
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"Submitted by {student}."))
        path = folder / "batch" / f"{student}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        made.append(path)
    return made


def run(args: list[str]) -> float:
    """Run the command line; its wall time in seconds (exit on failure)."""
    start = time.perf_counter()
    proc = subprocess.run([*COURSE, *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"coursepkg {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def shards_at_once(assignment: str, batch: Path, work: Path, secret: Path, count: int) -> float:
    """Grade ``count`` shards as processes at the same time (``--jobs 1`` each): wall seconds."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [*COURSE, "grade", assignment, str(batch), "--out", str(work / f"shard-{i}"),
             "--shard", f"{i}/{count}", "--jobs", "1", "--secret", str(secret)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )
        for i in range(1, count + 1)
    ]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"a shard failed:\n{err[-3000:]}")
    return time.perf_counter() - start


def full_marks(out: Path) -> tuple[int, list[str]]:
    """How many rows of ``out/grades.csv`` have every point, and the students of the others."""
    with (out / "grades.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    short = [row["student"] for row in rows
             if abs(float(row["total"]) - float(row["max"])) > 1e-6]
    return len(rows) - len(short), short


def projection(n: int, startup: float, per_submission: float, merge: float,
               workers: list[int]) -> list[dict]:
    """Projected wall seconds of a class of ``n`` on each number of 2-core workers."""
    rows = []
    for w in workers:
        each = math.ceil(n / w)
        rows.append({"workers": w, "submissions_per_worker": each,
                     "wall_seconds": startup + each * per_submission + merge})
    return rows


DEFAULT_ASSIGNMENT, DEFAULT_N = "01_ngrams", 200
TIMINGS = "timings.json"  # the wall seconds of each step done, in the work folder


def results_name(assignment: str, n: int, complete: bool) -> str:
    """``shards[-ASSIGNMENT][-complete][-N]``: each run its own file, chapter 1's default
    ``shards``."""
    return "-".join(
        ["shards"]
        + ([assignment] if assignment != DEFAULT_ASSIGNMENT else [])
        + (["complete"] if complete else [])
        + ([str(n)] if n != DEFAULT_N else [])
    )


def main() -> None:
    parser = benchlib.parser(__doc__)
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="submissions in the batch (200)")
    parser.add_argument("--assignment", default=DEFAULT_ASSIGNMENT,
                        help="the exercise set (01_ngrams)")
    parser.add_argument("--complete", action="store_true",
                        help="every notebook a complete submission (the solution), not the demo "
                             "batch's variants")
    parser.add_argument("--no-shards", action="store_true",
                        help="grade the class unsharded only (no 2-shard run, no merge)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64],
                        help="worker counts for the projection")
    parser.add_argument("--keep", metavar="DIR", help="keep the batch and graded folders in DIR")
    parser.add_argument("--resume", metavar="DIR",
                        help="go on in the folder of a run that stopped (kept by --keep, or a "
                             "killed run's bench-shards-* folder): its timed steps are not re-run")
    args = parser.parse_args()
    name = results_name(args.assignment, args.n, args.complete)
    if args.quick:
        args.n = 4 if args.complete else 12
    benchlib.warn_if_busy()
    done: dict[str, float] = {}
    if args.resume:
        work = Path(args.resume).resolve()
        try:
            done = json.loads((work / TIMINGS).read_text())
        except (OSError, ValueError):
            sys.exit(f"--resume {work}: no readable {TIMINGS} there (a folder of this script's)")
        args.keep = str(work)  # what is resumed is kept
        benchlib.log(f"resuming in {work}: already timed {', '.join(done) or 'nothing'}")
    elif args.keep:
        work = Path(args.keep).resolve()
        if work.exists():
            sys.exit(f"--keep {work}: choose a folder that does not exist yet")
        work.mkdir(parents=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    try:
        secret = work / "secret"
        if not args.resume:
            secret.write_text(SECRET + "\n")
            build_batch(args.assignment, args.n, work, complete=args.complete)
        batch = work / "batch"
        notebooks = sorted(batch.glob("*.ipynb"))
        if len(notebooks) != args.n:
            sys.exit(f"{batch} has {len(notebooks)} notebooks, not --n {args.n}")
        what = "complete submissions" if args.complete else "notebooks (the demo batch's variants)"
        benchlib.log(f"batch: {args.n} {what} of {args.assignment} in {batch}")

        def step(name: str, args_: list[str]) -> float:
            """Time ``coursepkg ARGS`` once (or take the time a resumed run recorded)."""
            if name not in done:
                shutil.rmtree(work / name, ignore_errors=True)  # a step that was cut short
                done[name] = run([*args_, "--out", str(work / name)])
                (work / TIMINGS).write_text(json.dumps(done, indent=1) + "\n")
            return done[name]

        one = step("one", ["grade", args.assignment, str(notebooks[0]), "--jobs", "2",
                           "--secret", str(secret)])
        benchlib.log(f"one notebook, a new process: {one:.1f} s")
        whole = step("unsharded", ["grade", args.assignment, str(batch), "--jobs", "2",
                                   "--secret", str(secret)])
        per_submission = (whole - one) / max(1, args.n - 1)
        benchlib.log(f"unsharded, --jobs 2: {whole:.1f} s ({whole / args.n:.2f} s per submission;"
                     f" {per_submission:.3f} s after start-up)")
        full = full_marks(work / "unsharded") if args.complete else None
        if full is not None:
            benchlib.log(f"full marks: {full[0]}/{args.n} submissions")
            if full[0] != args.n:  # a capstone over its time budget: the machine is too busy
                benchlib.log(f"warning: complete submissions without full marks (over a time "
                             f"limit on a busy machine?): {', '.join(full[1])}")
        sharded = merge = same = None
        if not args.no_shards:
            for i in (1, 2):
                shutil.rmtree(work / f"shard-{i}", ignore_errors=True)
            sharded = shards_at_once(args.assignment, batch, work, secret, 2)
            merge = run(["merge", str(work / "shard-1"), str(work / "shard-2"),
                         "--out", str(work / "merged")])
            same = (work / "merged" / "grades.csv").read_bytes() == (
                work / "unsharded" / "grades.csv").read_bytes()
            benchlib.log(f"2 shards at once, --jobs 1 each: {sharded:.1f} s, merge {merge:.2f} s;"
                         f" grades.csv {'identical' if same else 'DIFFERENT'}")
            if not same:
                sys.exit("the merged grades.csv differs from the unsharded one")

        sizes = sorted({args.n, 2000})
        projected = {str(n): projection(n, one, per_submission, (merge or 0.0) * n / args.n,
                                        args.workers)
                     for n in sizes}
        for n in sizes:
            benchlib.log(f"\nprojected wall time, {n} submissions on W workers of 2 cores:")
            benchlib.table(["workers", "notebooks each", "wall"],
                           [[r["workers"], r["submissions_per_worker"],
                             f"{r['wall_seconds'] / 60:.1f} min"] for r in projected[str(n)]])
        results = {
            "assignment": args.assignment,
            "submissions": args.n,
            "batch": "complete" if args.complete else "demo",
            "full_marks": None if full is None else full[0],
            "one_notebook_seconds": one,
            "unsharded_jobs2_seconds": whole,
            "unsharded_wall_per_submission_seconds": whole / args.n,
            "per_submission_seconds_2_cores": per_submission,
            "two_shards_at_once_seconds": sharded,
            "merge_seconds": merge,
            "merged_grades_identical": same,
            "projected": projected,
            "resumed": bool(args.resume),
        }
        benchlib.write_results(name, results, args)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
