"""The ``coursepkg`` command line (also ``python -m coursepkg``).

Subcommands:

- ``coursepkg author``: regenerate ``exercises/`` from ``solutions/`` (see `coursepkg.authoring`);
  ``--check`` only reports stale exercise notebooks (exit 1 if any);
  ``--execute-solutions`` first re-runs the solution notebooks in place to store real outputs.
- ``coursepkg grade ASSIGNMENT SUBMISSION... --out DIR [--secret FILE] [--tests PATH]
  [--manual POINTS.csv]``: grade notebooks (see `coursepkg.grading`; the written answers'
  marks merged from ``--manual``); ``coursepkg grade-demo`` grades a generated demo batch.
- ``coursepkg secret FILE``: write a new instructor's secret (the hidden cases come from it).
- ``coursepkg validate NOTEBOOK``: a student's notebook graded the grader's way on the public
  cases (exit 1 if one fails); ``coursepkg report DIR``: the class report page of a graded folder;
  ``coursepkg export {canvas,moodle} DIR``: its grades in an LMS's import format;
  ``coursepkg regrade DIR --task ID``: one task graded again for the whole folder.
- ``coursepkg grade ... --shard I/N|auto``: one shard of the class (`coursepkg.grading.shards`);
  ``coursepkg merge DIR... --out DIR``: the shards' folders as one unsharded run's.
  ``coursepkg grade ... --deadline ISO --late-policy FILE [--extensions CSV] [--submitted FILE]``:
  the penalty in the feedback, results and exports, late columns in grades.csv beside the raw
  total, pooled slip days (`coursepkg.grading.late`).
- ``coursepkg --version``.

Exit codes: 0 success; 1 the work found a problem (stale exercises, a solution notebook that
fails to run); 2 a usage or authoring mistake, reported as one line on stderr.

To add a subcommand, write ``_add_<name>_parser(subparsers)`` that sets ``func`` (a handler
``(args) -> int``) with ``set_defaults`` and call it in `build_parser`.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import textwrap
import threading
from pathlib import Path

PROG = "coursepkg"


class UsageError(Exception):
    """A user mistake: printed as one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage dump) and raise `UsageError`."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _author(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg author``."""
    from coursepkg import authoring

    solutions, exercises = Path(args.solutions), Path(args.exercises)
    if args.check and args.execute_solutions:
        raise UsageError("--check and --execute-solutions cannot be combined")
    if not solutions.is_dir():
        raise UsageError(
            f"no solutions directory {str(solutions)!r}; run from the course root or pass "
            "--solutions DIR"
        )
    if not authoring.solution_notebooks(solutions):
        raise UsageError(f"no notebooks (*.ipynb) in {str(solutions)!r}")

    try:
        if args.execute_solutions:
            for path in authoring.execute_solutions(solutions, timeout=args.timeout):
                print(f"executed {path}")
        changes = authoring.build_exercises(solutions, exercises, check=args.check)
    except authoring.AuthoringError as error:
        raise UsageError(str(error)) from None
    except authoring.ExecutionError as error:
        print(f"{PROG} author: {error}", file=sys.stderr)
        return 1

    n = len(authoring.solution_notebooks(solutions))
    if args.check:
        if changes:
            stale = ", ".join(f"{c.path} ({c.reason})" for c in changes)
            print(
                f"{PROG} author: {exercises}/ is stale: {stale}. Run '{PROG} author' to "
                "regenerate it.",
                file=sys.stderr,
            )
            return 1
        print(f"{exercises}/ is up to date ({n} notebook{'s' * (n != 1)}).")
        return 0
    for change in changes:
        verb = "removed" if change.reason == "no solution notebook" else "wrote"
        print(f"{verb} {change.path} ({change.reason})")
    if not changes:
        print(f"{exercises}/ was already up to date ({n} notebook{'s' * (n != 1)}).")
    return 0


def _add_author_parser(subparsers) -> None:
    """Register ``coursepkg author``."""
    parser = subparsers.add_parser(
        "author",
        help="generate exercises/ from solutions/",
        description=(
            "Write exercises/NAME.ipynb for every solutions/NAME.ipynb: solution regions "
            "(### BEGIN SOLUTION ... ### END SOLUTION) become stubs raising NotImplementedError, "
            "cells tagged 'instructor' are dropped and outputs cleared."
        ),
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 listing the exercise notebooks that are stale",
    )
    parser.add_argument(
        "--solutions", default="solutions", metavar="DIR", help="solution notebooks (solutions)"
    )
    parser.add_argument(
        "--exercises", default="exercises", metavar="DIR", help="generated notebooks (exercises)"
    )
    parser.add_argument(
        "--execute-solutions",
        action="store_true",
        help="first re-execute the solution notebooks in place, storing their outputs",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=300,
        metavar="SECONDS",
        help="per-cell time limit for --execute-solutions (300)",
    )
    parser.set_defaults(func=_author)


def _a_folder(path: Path, option: str) -> Path:
    """``path`` for an output folder option; a one-line error when it is an existing file."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path}: is a file, not a folder")
    return path


def _secret_and_tests(args: argparse.Namespace) -> tuple[bytes | None, dict, list[Path]]:
    """The secret and the extra cases the options name, and the files to hide from children."""
    from coursepkg.checks.core import load_extra_cases, load_secret

    secret, extra, private = None, {}, []
    try:
        if args.secret is not None:
            secret = load_secret(args.secret)
            private.append(Path(args.secret))
        if args.tests is not None:
            extra = load_extra_cases(args.tests)
            private.append(Path(args.tests))
    except ValueError as error:
        raise UsageError(str(error)) from None
    return secret, extra, private


def _grade(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg grade``."""
    from coursepkg.checks import TASKS
    from coursepkg.grading import grader, reporting
    from coursepkg.grading.sandbox import Limits

    known = sorted({task.assignment for task in TASKS.values()})
    if args.assignment not in known:
        raise UsageError(f"unknown assignment {args.assignment!r}; known: {', '.join(known)}")
    if args.gradescope:
        paths, out = (
            [Path(args.gradescope_submission)],
            Path(args.out or "/autograder/results/work"),
        )
    else:
        if not args.submissions or args.out is None:
            raise UsageError("give SUBMISSION... and --out DIR (or --gradescope)")
        paths, out = [Path(p) for p in args.submissions], Path(args.out)
    _a_folder(out, "--out")
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    others = [str(p) for p in paths if p.is_file() and p.suffix != ".ipynb"]
    if others:
        raise UsageError(f"not a notebook: {', '.join(others)} (give .ipynb files or folders)")
    if not grader.find_submissions(paths, args.assignment):
        raise UsageError(f"no notebooks (*.ipynb) in {', '.join(map(str, paths))}")
    if not 1 <= args.jobs <= grader.MAX_JOBS or args.timeout <= 0 or args.memory < 64:
        raise UsageError(
            f"--jobs must be 1..{grader.MAX_JOBS}, --timeout > 0 and --memory >= 64 (MB)"
        )
    secret, extra, private = _secret_and_tests(args)
    shard = _shard(args)
    late = _late(args, paths)
    limits = Limits(timeout=args.timeout, memory_mb=args.memory)
    notes: list[str] = []
    if args.manual is not None and not Path(args.manual).is_file():
        raise UsageError(f"--manual {args.manual}: no such file")
    try:
        rows = grader.grade(
            args.assignment, paths, out, jobs=args.jobs, limits=limits, secret=secret,
            extra=extra, private=private, notes=notes, secret_file=args.secret,
            tests_file=args.tests, shard=shard, late=late,
            manual=Path(args.manual) if args.manual else None,
        )
    except grader.ManualError as error:
        raise UsageError(str(error)) from None
    except grader.LateError as error:  # a bad slip-day ledger (read once the class is graded)
        raise UsageError(str(error)) from None
    print(reporting.summary_table(rows, notes))
    if args.gradescope:
        # One student per Gradescope run: the notebook named after the assignment, else the first.
        named = [row for row in rows if row[0].path.name == f"{args.assignment}.ipynb"]
        _, record = (named or rows)[0]
        target = Path(args.gradescope_results)
        reporting.atomic_write(target, reporting.gradescope_json(record))
        print(f"wrote {target}")
    elif shard is not None:
        print(f"wrote {out}/: shard {shard} ({len(rows)} of the class): grades.csv, results/, "
              "feedback/, log.jsonl, shard.json (combine the shards with 'coursepkg merge')")
    else:
        print(f"wrote {out}/: grades.csv, results/, feedback/, log.jsonl")
    return 0


def _late(args: argparse.Namespace, paths: list[Path]):
    """The late policy of ``coursepkg grade`` (a `coursepkg.grading.late.LateSetup`), or None.

    The submission times: ``--submitted``, else ``submissions.csv`` in a SUBMISSION folder, else
    Gradescope's ``submission_metadata.json`` beside or in it."""
    from coursepkg.grading.late import LateError, LateSetup

    if args.deadline is None and args.late_policy is None:
        if args.extensions or args.submitted:
            raise UsageError("--extensions and --submitted need --deadline and --late-policy")
        return None
    if args.deadline is None or args.late_policy is None:
        raise UsageError("--deadline and --late-policy go together")
    times = Path(args.submitted) if args.submitted else None
    if times is None:
        folders = [p if p.is_dir() else p.parent for p in paths]
        candidates = [f / "submissions.csv" for f in folders]
        candidates += [f / "submission_metadata.json" for f in folders]
        candidates += [f.parent / "submission_metadata.json" for f in folders]
        times = next((c for c in candidates if c.is_file()), None)
        if times is None:
            raise UsageError(
                "--late-policy needs the submission times: --submitted FILE (a CSV "
                "student,submitted_at or Gradescope's submission_metadata.json), or a "
                "submissions.csv in the submissions folder"
            )
    for option, value in (("--late-policy", args.late_policy), ("--submitted", times),
                          ("--extensions", args.extensions)):
        if value is not None and not Path(value).is_file():
            raise UsageError(f"{option} {value}: no such file")
    try:
        return LateSetup.load(
            args.deadline, Path(args.late_policy), times=times,
            extensions=Path(args.extensions) if args.extensions else None,
        )
    except LateError as error:
        raise UsageError(str(error)) from None


def _shard(args: argparse.Namespace):
    """The ``--shard`` of ``coursepkg grade`` (a `coursepkg.grading.shards.Shard`), or None."""
    from coursepkg.grading.shards import Shard, ShardError

    if args.shard is None:
        return None
    if args.gradescope:
        raise UsageError("--shard and --gradescope cannot be combined (Gradescope grades one "
                         "student per run)")
    try:
        return Shard.parse(args.shard)
    except ShardError as error:
        raise UsageError(str(error)) from None


def _merge(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg merge``."""
    from coursepkg.grading.shards import MergeError, merge

    try:
        merged = merge([Path(d) for d in args.shards], Path(args.out))
    except MergeError as error:
        raise UsageError(str(error)) from None
    n = len(merged.students)
    print(f"merged {merged.shards} shard{'s' * (merged.shards != 1)} of {merged.assignment} "
          f"({n} student{'s' * (n != 1)}) into {args.out}/: grades.csv, results/, feedback/, "
          "log.jsonl")
    return 0


def _add_merge_parser(subparsers) -> None:
    """Register ``coursepkg merge``."""
    parser = subparsers.add_parser(
        "merge",
        help="combine the folders of 'coursepkg grade --shard I/N' into one graded folder",
        description=textwrap.fill((
            "Combine the output folders of shards 1..N of one grading ('coursepkg grade ... "
            "--shard I/N --out DIR') into the grades.csv, results/, feedback/, manual/ (the "
            "written answers' sheets and points.csv) and log.jsonl that one unsharded run "
            "writes, byte for byte (log.jsonl: each student's last line, sorted by student, as "
            "a run sorts its own). Refuses, with exit code 2, a folder that is not a shard or "
            "is unfinished, missing or repeated shards, a student in two shards, mixed "
            "assignments, grader versions or tests, written answers anonymised with different "
            "keys (shards graded without one --secret) or marked in two shards."
        ), 79),
    )
    parser.add_argument("shards", metavar="DIR", nargs="+", help="the shards' --out folders")
    parser.add_argument("--out", required=True, metavar="DIR", help="the merged folder (new)")
    parser.set_defaults(func=_merge)


def _grade_demo(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg grade-demo``: build a demo batch, then grade it with a demo secret
    kept in the batch's folder (made on the first run)."""
    from coursepkg.checks.core import load_secret, write_secret
    from coursepkg.grading import demo, grader, reporting

    root = Path(__file__).resolve().parents[1]
    if not (root / "solutions").is_dir():
        raise UsageError("grade-demo needs the course checkout (solutions/ and exercises/)")
    folder = _a_folder(Path(args.dir), "--dir")
    try:
        demo.write_demo(args.assignment, root, folder / "submissions")
    except ValueError as error:
        raise UsageError(str(error)) from None
    secret_file = folder / "secret"
    secret = load_secret(secret_file) if secret_file.is_file() else write_secret(secret_file)
    notes: list[str] = []
    rows = grader.grade(
        args.assignment, [folder / "submissions"], folder / "graded", secret=secret,
        private=[secret_file], notes=notes, secret_file=secret_file,
    )
    print(reporting.summary_table(rows, notes))
    print(
        f"submissions in {folder}/submissions; grades.csv, feedback/ ... in {folder}/graded; "
        f"the demo secret is {secret_file}"
    )
    return 0


def _secret(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg secret``."""
    from coursepkg.checks.core import write_secret

    try:
        write_secret(args.file)
    except (ValueError, OSError) as error:
        raise UsageError(str(error)) from None
    print(
        f"wrote a new secret to {args.file} (readable by you only). Keep it private and keep it: "
        "the hidden tests are made from it (coursepkg grade ... --secret FILE)."
    )
    return 0


def _assignments_text() -> str:
    """The assignments, one per line, for ``grade --help`` (from the course's chapter list)."""
    from coursepkg.course import CHAPTERS

    lines = ["assignments:"]
    lines += [f"  {chapter.stem:<20} {chapter.title}" for chapter in CHAPTERS]
    return "\n".join(lines)


def _add_grade_parser(subparsers) -> None:
    """Register ``coursepkg grade``."""
    parser = subparsers.add_parser(
        "grade",
        help="grade submitted notebooks of one assignment",
        description=(
            "Grade notebooks (files, or folders searched recursively) for ASSIGNMENT. Each task "
            "runs in an isolated, limited process; results are judged in this process. The "
            "student id is the file name without .ipynb, or the folder's name when the file is "
            "named after the assignment (alice/01_ngrams.ipynb -> alice). Hidden tests run only "
            "with --secret."
        ),
        epilog=_assignments_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("assignment", metavar="ASSIGNMENT", help="exercise set, e.g. 01_ngrams")
    parser.add_argument("submissions", metavar="SUBMISSION", nargs="*", help="notebooks or folders")
    parser.add_argument("--out", metavar="DIR", help="where grades.csv, results/, feedback/ go")
    parser.add_argument("--jobs", type=int, default=2, help="submissions graded at once (2)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        metavar="S",
        help="seconds per case (20; a train task's cases get the larger of this and their own "
        "time limit); a task gets at most twice that in all (a train task: one per case, plus "
        "one)",
    )
    parser.add_argument(
        "--memory", type=int, default=2048, metavar="MB", help="memory per task in MB (2048)"
    )
    parser.add_argument(
        "--secret",
        metavar="FILE",
        help="the instructor's secret the hidden tests are made from (see 'coursepkg secret')",
    )
    parser.add_argument(
        "--tests",
        metavar="PATH",
        help="a private Python file of extra cases: CASES = {task id: [Case(...), ...]}",
    )
    parser.add_argument(
        "--deadline",
        metavar="ISO-8601",
        help="the deadline, with its UTC offset (2026-03-29T23:59+02:00), for --late-policy",
    )
    parser.add_argument(
        "--late-policy",
        metavar="FILE",
        help="a TOML or JSON late policy (penalty per day or hour, cap, grace, pooled slip days "
        "and their ledger): the feedback, results and exports get the score after the penalty; "
        "grades.csv keeps the raw total and adds late columns (late_total: the final score)",
    )
    parser.add_argument(
        "--extensions",
        metavar="CSV",
        help="student,deadline: new deadlines for some students (with --late-policy)",
    )
    parser.add_argument(
        "--submitted",
        metavar="FILE",
        help="the submission times: a CSV student,submitted_at or Gradescope's "
        "submission_metadata.json (default: submissions.csv in the submissions folder)",
    )
    parser.add_argument(
        "--shard",
        metavar="I/N|auto",
        help="grade only shard I of N (1..N) of the class, by a hash of the student id, and "
        "record it in DIR/shard.json (combine with 'coursepkg merge'); auto: I from "
        "JOB_COMPLETION_INDEX (Kubernetes, N from COURSEPKG_SHARDS) or SLURM_ARRAY_TASK_ID "
        "(N from SLURM_ARRAY_TASK_COUNT)",
    )
    parser.add_argument(
        "--manual",
        metavar="POINTS.csv",
        help="the marks of the written answers (DIR/manual/points.csv filled in: question, "
        "anonymous_id, points, comment) to merge into totals, feedback and results; without "
        "it the written answers' sheets are written to DIR/manual/ and do not count yet",
    )
    parser.add_argument(
        "--gradescope",
        action="store_true",
        help="grade /autograder/submission, write /autograder/results/results.json",
    )
    parser.add_argument(
        "--gradescope-submission", default="/autograder/submission", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--gradescope-results", default="/autograder/results/results.json", help=argparse.SUPPRESS
    )
    parser.set_defaults(func=_grade)

    demo = subparsers.add_parser(
        "grade-demo",
        help="grade a generated demo batch (solution, untouched exercise, planted mistakes)",
    )
    demo.add_argument("assignment", nargs="?", default="01_ngrams", metavar="ASSIGNMENT")
    demo.add_argument("--dir", default="grade-demo", help="folder for the batch and its grades")
    demo.set_defaults(func=_grade_demo)

    secret = subparsers.add_parser(
        "secret",
        help="write a new instructor's secret (the hidden tests are made from it)",
        description=(
            "Write 32 random bytes (one line of hex) to FILE, readable by you only. Pass it to "
            "'coursepkg grade --secret FILE'; keep it private (never in what students get) and "
            "keep it: the same secret gives the same hidden tests. An existing file is never "
            "overwritten."
        ),
    )
    secret.add_argument("file", metavar="FILE", help="the new secret file")
    secret.set_defaults(func=_secret)


def _validate(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg validate``."""
    from coursepkg.checks import TASKS
    from coursepkg.grading import validate

    path = Path(args.notebook)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    if path.suffix != ".ipynb":
        raise UsageError(f"not a notebook: {path} (give the .ipynb file saved by Jupyter)")
    known = sorted({task.assignment for task in TASKS.values()})
    assignment = args.assignment or validate.infer_assignment(path)
    if assignment is None:
        raise UsageError(
            f"cannot tell which exercise set {path.name} is: pass --assignment (one of "
            f"{', '.join(known)})"
        )
    if assignment not in known:
        raise UsageError(f"unknown assignment {assignment!r}; known: {', '.join(known)}")
    record = validate.validate(path, assignment)
    print("\n".join(validate.report_lines(record, path, assignment)))
    return 0 if validate.all_passed(record) else 1


def _add_validate_parser(subparsers) -> None:
    """Register ``coursepkg validate``."""
    parser = subparsers.add_parser(
        "validate",
        help="check a notebook the way the grader will, before handing it in",
        description=textwrap.fill((
            "Grade NOTEBOOK on the public tests exactly as 'coursepkg grade' does: only its "
            "imports, functions, classes and constant assignments are kept, and each task runs "
            "in a fresh, isolated process with the forbidden-call and input checks. Prints one "
            "line per task (points and the grader's status) and every case that did not pass. "
            "Exit code: 0 every public test passes, 1 one does not (or the notebook cannot be "
            "graded), 2 a usage mistake. Hidden tests run only when your instructor grades."
        ), 79),
        epilog=_assignments_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("notebook", metavar="NOTEBOOK", help="your exercise notebook (.ipynb)")
    parser.add_argument(
        "--assignment",
        metavar="STEM",
        help="the exercise set, e.g. 01_ngrams (default: from the notebook's metadata or name)",
    )
    parser.set_defaults(func=_validate)


def _report(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg report``."""
    from coursepkg.grading.graded import GradedError
    from coursepkg.grading.report import write_report

    out = Path(args.out) if args.out else None
    if out is not None and out.is_dir():
        raise UsageError(f"--out {out}: is a folder; give a file name such as report.html")
    try:
        target = write_report(Path(args.graded), out)
    except GradedError as error:
        raise UsageError(str(error)) from None
    print(f"wrote {target}")
    return 0


def _add_report_parser(subparsers) -> None:
    """Register ``coursepkg report``."""
    parser = subparsers.add_parser(
        "report",
        help="write the class report (one offline HTML page) of a graded folder",
        description=(
            "Read GRADED_DIR (the --out folder of 'coursepkg grade': grades.csv, results/, "
            "feedback/, log.jsonl) and write one self-contained HTML page: histograms of the "
            "total and of each task, status counts, the pass rate of each public and hidden "
            "case, the most common failure messages per task, and the leaderboard when the "
            "results carry a capstone metric. The same folder gives the same bytes."
        ),
    )
    parser.add_argument("graded", metavar="GRADED_DIR", help="the folder 'coursepkg grade' wrote")
    parser.add_argument("--out", metavar="FILE.html", help="the page (GRADED_DIR/report.html)")
    parser.set_defaults(func=_report)


def _export(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg export``."""
    from coursepkg.grading import export
    from coursepkg.grading.graded import GradedError, read_graded
    from coursepkg.grading.reporting import atomic_write

    out = Path(args.out)
    if out.is_dir():
        raise UsageError(f"--out {out}: is a folder; give a file name such as grades-canvas.csv")
    if args.lms == "moodle" and args.assignment_id:
        raise UsageError("--assignment-id is for Canvas; Moodle maps the column to a grade item")
    if args.lms == "canvas" and args.match:
        raise UsageError("--match is for Moodle; Canvas matches on the ID and SIS columns")
    try:
        graded = read_graded(Path(args.graded), details=False)
        roster = export.read_roster(Path(args.roster))
        if args.lms == "canvas":
            result = export.canvas_csv(
                graded, roster, args.assignment_name, args.assignment_id, roster_path=args.roster
            )
        else:
            result = export.moodle_csv(
                graded, roster, args.assignment_name, args.match or "email",
                roster_path=args.roster,
            )
    except (GradedError, export.RosterError) as error:
        raise UsageError(str(error)) from None
    atomic_write(out, result.text)
    print(f"wrote {out}: {len(result.exported)} grade{'s' * (len(result.exported) != 1)} "
          f"for {args.lms.capitalize()}")
    if result.no_submission:
        print(f"{PROG} export: no submission from {', '.join(result.no_submission)} (their "
              "cells are empty, not 0)", file=sys.stderr)
    if result.not_in_roster:
        print(f"{PROG} export: not in the roster, so not exported: "
              f"{', '.join(result.not_in_roster)} (add them to {args.roster} with their LMS "
              "identity and export again)", file=sys.stderr)
        return 1
    return 0


def _roster_text() -> str:
    """The roster's columns, for ``export --help``."""
    from coursepkg.grading.export import ROSTER_COLUMNS

    lines = ["roster (a CSV file with a header; 'student' required, the rest as your LMS needs):"]
    lines += [f"  {name:<13} {text}" for name, text in ROSTER_COLUMNS.items()]
    lines += [
        "Canvas needs canvas_id, sis_user_id or sis_login_id on every row (copy them from "
        "Canvas's",
        "Gradebook export); Moodle needs the --match column (email by default).",
        "Exit code: 0 exported; 1 some graded students are not in the roster (the file is "
        "written",
        "without them; they are listed); 2 a usage mistake or a bad folder or roster.",
    ]
    return "\n".join(lines)


def _add_export_parser(subparsers) -> None:
    """Register ``coursepkg export``."""
    parser = subparsers.add_parser(
        "export",
        help="write the grades of a graded folder in Canvas's or Moodle's import format",
        description=textwrap.fill((
            "Write the totals of GRADED_DIR (its grades.csv) as a CSV file that Canvas "
            "(Grades > Import) or Moodle (Grades > Import > CSV file) imports, one row per "
            "roster student in the roster's order. A roster student without a submission gets "
            "an empty cell (not 0) and is listed on stderr; a graded student the roster does "
            "not list is listed and left out."
        ), 79),
        epilog=_roster_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("lms", choices=["canvas", "moodle"], help="the LMS's format")
    parser.add_argument("graded", metavar="GRADED_DIR", help="the folder 'coursepkg grade' wrote")
    parser.add_argument("--roster", required=True, metavar="ROSTER.csv",
                        help="grader ids -> LMS identities (columns below)")
    parser.add_argument("--assignment-name", required=True, metavar="NAME",
                        help="the assignment's name in the LMS (the grade column's header)")
    parser.add_argument("--out", required=True, metavar="FILE.csv", help="the file to write")
    parser.add_argument(
        "--assignment-id",
        metavar="ID",
        help="Canvas: the assignment's id (in its URL); the column becomes 'NAME (ID)', so "
        "Canvas updates that assignment",
    )
    parser.add_argument(
        "--match",
        choices=sorted(("email", "idnumber", "username")),
        help="Moodle: the user field to match on (email)",
    )
    parser.set_defaults(func=_export)


def _regrade(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg regrade``."""
    from coursepkg.grading import grader
    from coursepkg.grading.regrade import RegradeError, regrade

    if args.jobs is not None and not 1 <= args.jobs <= grader.MAX_JOBS:
        raise UsageError(f"--jobs must be 1..{grader.MAX_JOBS}")
    for option, value in (("--secret", args.secret), ("--tests", args.tests)):
        if value is not None and not Path(value).is_file():
            raise UsageError(f"{option} {value}: no such file")
    try:
        done = regrade(
            Path(args.graded), args.task,
            secret_file=Path(args.secret) if args.secret else None,
            tests_file=Path(args.tests) if args.tests else None,
            jobs=args.jobs, progress=True,
        )
    except RegradeError as error:
        raise UsageError(str(error)) from None
    n = len(done.rows)
    print(
        f"task {done.task} ran again for {len(done.ran)} of {n} submission{'s' * (n != 1)} "
        "(not for unreadable notebooks); every other task's result came from the cache"
    )
    for change in done.changes:
        print(f"  {change.student}: {change.before:g} -> {change.after:g} ({change.why})")
    moved = len(done.changes)
    print(f"points moved for {moved} student{'s' * (moved != 1)}; wrote {args.graded}/: "
          "grades.csv, results/, feedback/, changes.csv")
    print("\n".join(done.notes))
    return 0


def _add_regrade_parser(subparsers) -> None:
    """Register ``coursepkg regrade``."""
    parser = subparsers.add_parser(
        "regrade",
        help="grade one task again for a whole graded folder (after changing its cases)",
        description=textwrap.fill((
            "Run task ID again for every submission GRADED_DIR was graded from (its run.json "
            "names them; each must be unchanged), with the task's current checks and cases; "
            "every other task's result comes from the folder's cache. Rewrites grades.csv, "
            "results/ and feedback/ (each file atomically; a rerun finishes an interrupted "
            "regrade) and writes changes.csv: the students whose points on the task moved "
            "(student, task, before, after, why). The secret and the extra tests file are "
            "those the folder was graded with, unless given again."
        ), 79),
    )
    parser.add_argument("graded", metavar="GRADED_DIR", help="the folder 'coursepkg grade' wrote")
    parser.add_argument("--task", required=True, metavar="ID", help="the task to grade again")
    parser.add_argument(
        "--secret", metavar="FILE",
        help="the secret the folder was graded with (default: the file it was read from)",
    )
    parser.add_argument(
        "--tests", metavar="PATH",
        help="the extra cases file, edited (default: the one the folder was graded with)",
    )
    parser.add_argument("--jobs", type=int, help="submissions graded at once (as graded)")
    parser.set_defaults(func=_regrade)


def _similarity(args: argparse.Namespace) -> int:
    """Handler of ``coursepkg similarity``."""
    from coursepkg.grading.graded import GradedError
    from coursepkg.grading.similarity import THRESHOLD, write_similarity

    out = Path(args.out) if args.out else None
    table = Path(args.csv) if args.csv else None
    for path, option, example in ((out, "--out", "similarity.html"),
                                  (table, "--csv", "similarity.csv")):
        if path is not None and path.is_dir():
            raise UsageError(f"{option} {path}: is a folder; give a file name such as {example}")
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    try:
        result, page, table = write_similarity(Path(args.graded), out, table, top=args.top)
    except GradedError as error:
        raise UsageError(str(error)) from None
    flagged = sum(p.flagged for task in result.tasks for p in task.pairs)
    print(f"wrote {page} and {table}: {flagged} pair{'s' * (flagged != 1)} at or above "
          f"{THRESHOLD:g}, {len(result.flags)} function{'s' * (len(result.flags) != 1)} equal "
          "to the reference solution or to the book's code")
    for note in result.notes:
        print(f"{PROG} similarity: {note}", file=sys.stderr)
    return 0


def _add_similarity_parser(subparsers) -> None:
    """Register ``coursepkg similarity``."""
    parser = subparsers.add_parser(
        "similarity",
        help="rank pairs of submissions of a graded folder by how alike their code is",
        description=textwrap.fill((
            "For each task of GRADED_DIR (the notebooks its log.jsonl lists), score every pair "
            "of students by the code their functions share once comments, docstrings, dead "
            "code, names and constants are abstracted and statement order ignored; the released "
            "stub does not count, code much of the class shares counts less, and identical "
            "failures on the same hidden cases (results/) raise a pair's score. Also lists the "
            "functions equal to the reference solution or to code the book shows. Writes an "
            "offline HTML page (the top pairs side by side) and a CSV (task, student_a, "
            "student_b, score, evidence); the same folder gives the same bytes."
        ), 79),
    )
    parser.add_argument("graded", metavar="GRADED_DIR", help="the folder 'coursepkg grade' wrote")
    parser.add_argument("--out", metavar="FILE.html",
                        help="the page (GRADED_DIR/similarity.html)")
    parser.add_argument("--csv", metavar="FILE.csv", help="the pairs (GRADED_DIR/similarity.csv)")
    parser.add_argument("--top", type=int, default=20, metavar="K",
                        help="pairs listed per task (20)")
    parser.set_defaults(func=_similarity)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    from coursepkg import __version__

    parser = _Parser(prog=PROG, description="Tools of the course 'From n-grams to Transformers'.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_author_parser(subparsers)
    _add_grade_parser(subparsers)
    _add_validate_parser(subparsers)
    _add_report_parser(subparsers)
    _add_export_parser(subparsers)
    _add_regrade_parser(subparsers)
    _add_merge_parser(subparsers)
    _add_similarity_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        The exit code: 0 success, 1 a problem found, 2 a usage or authoring mistake.
    """
    parser = build_parser()
    with _terminate_as_interrupt():
        try:
            args, unknown = parser.parse_known_args(argv)
            if args.command is None:
                parser.print_help(sys.stderr)
                return 2
            if unknown:
                raise UsageError(
                    f"unrecognized arguments: {' '.join(unknown)} "
                    f"(see '{PROG} {args.command} --help')"
                )
            return args.func(args)
        except UsageError as error:
            print(f"{PROG}: error: {error}", file=sys.stderr)
            return 2
        except SystemExit as exit_:  # --help and --version
            return exit_.code if isinstance(exit_.code, int) else 0
        except KeyboardInterrupt as stop:
            how, code = ("terminated (SIGTERM)", 128 + signal.SIGTERM) if isinstance(
                stop, _Terminated) else ("interrupted", 130)
            print(f"{PROG}: {how}; finished work is kept (run the same command to go on)",
                  file=sys.stderr)
            return code


class _Terminated(KeyboardInterrupt):
    """SIGTERM, as a scheduler sends it (Kubernetes, Slurm) before killing the process."""


@contextlib.contextmanager
def _terminate_as_interrupt():
    """While a command runs, SIGTERM unwinds it like Ctrl-C: the grader kills its children and
    removes its temporary folder, where the default action would end the process at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame):  # noqa: ANN001, ARG001 - a signal handler's signature
        raise _Terminated

    before = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


if __name__ == "__main__":
    sys.exit(main())
