"""What the benchmark scripts share: timing, medians, the machine's description, the results file.

Not a benchmark itself. Every ``bench_*.py`` script of this folder imports it (they run as
``.venv/bin/python benchmarks/bench_x.py``, so this folder is on ``sys.path``) and ends with
:func:`write_results`, which stores its numbers in ``benchmarks/results/<name>.json`` together
with :func:`machine` (CPU model, cores, torch version, date, load average). A ``--quick`` run
writes ``<name>.quick.json`` instead, which git ignores: only full runs are published.

Timing rules used everywhere: a measured function runs once untimed (warm-up), then
``repeats`` times; the median is reported (with the minimum and every run in the JSON). When
two implementations are compared, their runs alternate in the same process
(:func:`interleaved`), so that a change in the machine's load affects both alike.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the options every script has (``--quick``, ``--out``)."""
    p = argparse.ArgumentParser(
        description=(doc or "").strip().splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: small sizes, few repeats; writes <name>.quick.json (not published)",
    )
    p.add_argument(
        "--out", default=str(RESULTS), help="the results folder (default: benchmarks/results)"
    )
    return p


def log(message: str = "") -> None:
    print(message, flush=True)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``(fn(), seconds)``."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def summary(times: list[float]) -> dict[str, Any]:
    """Median, minimum and every run (seconds)."""
    return {"median": statistics.median(times), "min": min(times), "runs": times}


def median_time(fn: Callable[[], Any], repeats: int, *, warmup: int = 1) -> dict[str, Any]:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times: :func:`summary` of those."""
    for _ in range(warmup):
        fn()
    return summary([timed(fn)[1] for _ in range(repeats)])


def interleaved(
    fns: dict[str, Callable[[], Any]], repeats: int, *, warmup: int = 1
) -> dict[str, dict[str, Any]]:
    """Time several functions in alternation (a, b, a, b, ...): name -> :func:`summary`."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn)[1])
    return {name: summary(t) for name, t in times.items()}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    """The checkout's commit, with ``+changes`` when tracked files differ from it."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=False,
        )
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=False,
        )
    except OSError:
        return None
    commit = out.stdout.strip()
    return (commit + ("+changes" if changed.stdout.strip() else "")) or None


def machine() -> dict[str, Any]:
    """Where and when the numbers were taken."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "commit": _git_commit(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        info["torch"] = None
    return info


def busy_cores(seconds: float = 1.0) -> float | None:
    """How many cores other processes kept busy over the next ``seconds`` (Linux), else None.

    Unlike the load average, which still counts the previous benchmark for a minute after it
    ended, this samples the processor's counters now.
    """
    def ticks() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle

    try:
        total0, idle0 = ticks()
        time.sleep(seconds)
        total1, idle1 = ticks()
    except (OSError, ValueError, IndexError):
        return None
    elapsed = total1 - total0
    if elapsed <= 0:
        return None
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / elapsed)


def warn_if_busy() -> None:
    """Say so when the machine is not idle: such numbers are not worth publishing."""
    busy = busy_cores()
    if busy is None and hasattr(os, "getloadavg"):
        busy = os.getloadavg()[0]
    if busy is not None and busy > 0.5:
        log(f"warning: other processes keep {busy:.1f} cores busy before starting: the timings "
            "are only meaningful on an otherwise idle machine")


def write_results(name: str, results: dict[str, Any], args: argparse.Namespace) -> Path:
    """Write ``{"benchmark", "quick", "machine", "argv", "results"}`` to the results folder."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (f"{name}.quick.json" if args.quick else f"{name}.json")
    payload = {
        "benchmark": name,
        "quick": bool(args.quick),
        "machine": machine(),
        "argv": sys.argv[1:],
        "options": {k: v for k, v in vars(args).items() if k != "out"},
        "results": results,
    }
    path.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")
    log(f"\nwrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def table(header: list[str], rows: list[list[Any]]) -> None:
    """Print a plain text table, the first column left-aligned and the others right-aligned."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for k, row in enumerate(cells):
        log("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        if k == 0:
            log("  " + "  ".join("-" * w for w in widths))
