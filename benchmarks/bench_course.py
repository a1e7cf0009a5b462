"""How long the course itself takes: a clean book build, a cached rebuild, and the test suite.

Run with ``.venv/bin/python benchmarks/bench_course.py`` (about 12 minutes on 2 cores, most of it
the clean build executing every chapter, and the unit tests; ``--quick`` builds a two-page book
and runs one test file). Writes ``benchmarks/results/course.json``. Options: ``--with-nbval``
(also time the notebook tests of ``make nbval``), ``--skip-book``, ``--skip-tests``.

Every command runs as a new process with the venv's tools, as ``make`` runs it, and is timed
once (each takes minutes, and the clean build cannot be repeated without redoing it):

* clean book build: ``jupyter-book build . --warningiserror --keep-going`` into an empty
  temporary folder (``--path-output``; the checkout's ``_build`` is never touched), so every
  chapter's cells execute;
* cached rebuild: the same build again with ``--all`` into the same folder: every page is read
  and written again, every cell's outputs come from the execution cache;
* unchanged rebuild: the same build once more without ``--all`` (what ``make book`` costs when
  nothing changed);
* tests: ``ruff check`` (``make lint``) and the unit tests of ``make unit``; with
  ``--with-nbval`` also ``make nbval``'s two pytest runs over the notebooks. A failing test run
  is timed all the same (its exit code is in the JSON and a warning is printed); a failing
  book build stops the script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib
from benchlib import ROOT, log

BIN = Path(sys.executable).parent
QUICK_TOC = """format: jb-book
root: book/preface
chapters:
  - file: book/notation
"""


def run_timed(label: str, cmd: list, check: bool = True) -> dict:
    env = dict(os.environ, PYTHONHASHSEED="0", MPLBACKEND="Agg",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    log(f"{label}: {' '.join(map(str, cmd))}")
    start = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - start
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
    log(f"  {seconds:.1f} s (exit {proc.returncode})")
    if proc.returncode != 0 and not check:
        log(f"  warning: it failed; the time is that of a failing run:\n{tail}")
    if check and proc.returncode != 0:
        sys.exit(f"{label} failed ({proc.returncode}):\n"
                 + "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:]))
    return {"command": " ".join(map(str, cmd)), "seconds": seconds,
            "returncode": proc.returncode, "tail": tail}


def book_times(quick: bool) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-book-"))
    try:
        build = [BIN / "jupyter-book", "build", ".", "--path-output", out]
        if quick:
            toc = out / "_toc_quick.yml"
            toc.write_text(QUICK_TOC)
            build += ["--toc", toc]  # a two-page book: warnings about the other pages expected
        else:
            build += ["--warningiserror", "--keep-going"]
        return {
            "clean": run_timed("clean book build", build),
            "cached_all": run_timed("rebuild from the execution cache (--all)", build + ["--all"]),
            "unchanged": run_timed("rebuild, nothing changed", build),
            "pages": len(list((out / "_build" / "html").rglob("*.html"))),
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_times(quick: bool, nbval: bool) -> dict:
    pytest = BIN / "pytest"
    unit = [pytest, "-q", "tests", "--ignore=tests/test_built_book.py",
            "--ignore=tests/test_browser.py"]
    if quick:
        unit = [pytest, "-q", "tests/test_ngram.py"]
    result = {
        "lint": run_timed("lint", [BIN / "ruff", "check", "coursepkg", "tests", "benchmarks",
                                   "book"], check=False),
        "unit": run_timed("unit tests", unit, check=False),
    }
    if nbval and not quick:
        result["nbval_solutions"] = run_timed(
            "nbval (solutions)", [pytest, "-q", "-p", "no:randomly", "--nbval", "solutions",
                                  "--nbval-sanitize-with", "tests/nbval_sanitize.cfg"],
            check=False)
        result["nbval_exercises"] = run_timed(
            "nbval (exercises)", [pytest, "-q", "--nbval-lax", "exercises"], check=False)
    for entry in result.values():
        entry["summary"] = entry.pop("tail").splitlines()[-1] if entry.get("tail") else ""
    return result


def main() -> None:
    parser = benchlib.parser(__doc__)
    parser.add_argument("--with-nbval", action="store_true", help="also time make nbval")
    parser.add_argument("--skip-book", action="store_true", help="do not time the book builds")
    parser.add_argument("--skip-tests", action="store_true", help="do not time the tests")
    args = parser.parse_args()
    benchlib.warn_if_busy()
    results: dict = {}
    if not args.skip_book:
        results["book"] = book_times(args.quick)
    if not args.skip_tests:
        results["tests"] = test_times(args.quick, args.with_nbval)
    log("")
    rows = []
    if "book" in results:
        book = results["book"]
        rows += [["clean book build (every cell executed)", f"{book['clean']['seconds']:.1f} s"],
                 ["rebuild from the execution cache (--all)",
                  f"{book['cached_all']['seconds']:.1f} s"],
                 ["rebuild, nothing changed", f"{book['unchanged']['seconds']:.1f} s"]]
    for name, entry in results.get("tests", {}).items():
        rows.append([f"{name}: {entry['summary']}", f"{entry['seconds']:.1f} s"])
    benchlib.table(["what", "time"], rows)
    benchlib.write_results("course", results, args)


if __name__ == "__main__":
    main()
