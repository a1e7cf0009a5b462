"""How often the course's own training loops fall short on the train tasks' hidden cases.

Run with ``.venv/bin/python benchmarks/bench_train_margins.py`` (about 10 minutes on 2 cores;
``--quick`` for a smoke run). Writes ``benchmarks/results/train-margins.json``.

A train task's hidden case trains on data drawn from the instructor's secret and measures the
result on held-out data drawn from it too; the grade follows bands of that measure (chapter 5's
two-marker task: full marks from 0.95 held-out accuracy). An honest training loop must get full
marks on *every* such draw, not on most: a loop that fails one draw in thirty costs one student
in thirty points they earned. The tests and the solution notebooks check each task on a few fixed
secrets; this script draws many (``--n``, secrets ``"margins 0"``, ``"margins 1"``...; the
capstone, task 7.5, whose training takes several seconds, ``--capstone-n`` of them) and runs the
task's reference on each hidden case, in this process, on one thread, as the grader's child does
(the capstone's training itself, :func:`~coursepkg.checks.ch07_transformer.fit_transformer_lm`:
its reference keeps the first model it trains in a process, whatever the seed).

Reported per task: the cases run, how many got less than full marks, the lowest fraction of the
points, the measure's worst value and the seconds per training. It found two references that an
unlucky draw defeated: task 5.3's model first had two heads, and its reference fell short on 10
of 300 draws (both heads on the same marker, held-out accuracy about 0.53; training twice as
long, or twice as wide, did not help), on none of the same 300 with four heads; task 2.3's
reference trained 200 steps and stayed at chance on 3 of 100 draws, on none of 203 with 400.
"""

from __future__ import annotations

import hashlib
import time

import benchlib
import torch
from benchlib import log

from coursepkg.checks import tasks_for
from coursepkg.checks.ch07_transformer import fit_transformer_lm
from coursepkg.checks.core import evaluate_case, grading_cases
from coursepkg.course import CHAPTERS

CAPSTONE = "7.5"
#: What trains each hidden case when it is not the task's reference.
TRAINING = {CAPSTONE: fit_transformer_lm}


def secret(index: int) -> bytes:
    return hashlib.sha256(f"margins {index}".encode()).digest()


def margins(task, n: int) -> dict:  # noqa: ANN001 - a registered Task
    """The reference of ``task`` on the hidden cases of ``n`` secrets."""
    fractions, scores, seconds, short = [], [], [], []
    for index in range(n):
        for case in grading_cases(task, secret(index)):
            if not case.hidden:
                continue
            start = time.perf_counter()
            result = evaluate_case(task, case, TRAINING.get(task.id, task.reference))
            seconds.append(time.perf_counter() - start)
            fraction = result.points / result.max_points
            fractions.append(fraction)
            scores.append(result.score)
            if fraction < 1:
                short.append({"secret": index, "case": case.name, "fraction": fraction,
                              "score": result.score})
    return {
        "task": task.id,
        "function": task.func_name,
        "secrets": n,
        "cases": len(fractions),
        "below_full": len(short),
        "lowest_fraction": min(fractions),
        "scores": {"min": min(scores), "max": max(scores)},
        "seconds_per_case": sum(seconds) / len(seconds),
        "short": short,
    }


def main() -> None:
    parser = benchlib.parser(__doc__)
    parser.add_argument("--n", type=int, default=100, help="secrets per task (100)")
    parser.add_argument("--capstone-n", type=int, default=20,
                        help=f"secrets for task {CAPSTONE}, the capstone (20)")
    parser.add_argument("--tasks", nargs="+", help="only these task ids")
    args = parser.parse_args()
    if args.quick:
        args.n, args.capstone_n = 3, 1
    benchlib.warn_if_busy()
    torch.set_num_threads(1)
    tasks = [task for chapter in CHAPTERS for task in tasks_for(chapter.stem)
             if task.kind == "train" and (not args.tasks or task.id in args.tasks)]
    rows = []
    for task in tasks:
        n = args.capstone_n if task.id == CAPSTONE else args.n
        log(f"task {task.id} {task.func_name}: {n} secrets")
        rows.append(margins(task, n))
    benchlib.table(
        ["task", "function", "hidden cases", "below full marks", "lowest fraction",
         "worst measure", "s per training"],
        [[r["task"], r["function"], r["cases"], r["below_full"], f"{r['lowest_fraction']:g}",
          f"{r['scores']['min']:.4g}..{r['scores']['max']:.4g}", f"{r['seconds_per_case']:.2f}"]
         for r in rows],
    )
    benchlib.write_results("train-margins", {"tasks": rows}, args)


if __name__ == "__main__":
    main()
