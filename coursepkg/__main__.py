"""The ``coursepkg`` command line (also ``python -m coursepkg``).

Subcommands:

- ``coursepkg author``: regenerate ``exercises/`` from ``solutions/`` (see `coursepkg.authoring`);
  ``--check`` only reports stale exercise notebooks (exit 1 if any);
  ``--execute-solutions`` first re-runs the solution notebooks in place to store real outputs.
- ``coursepkg grade ASSIGNMENT SUBMISSION... --out DIR [--secret FILE] [--tests PATH]``: grade
  notebooks (see `coursepkg.grading`); ``coursepkg grade-demo`` grades a generated demo batch.
- ``coursepkg secret FILE``: write a new instructor's secret (the hidden cases come from it).
- ``coursepkg --version``.

Exit codes: 0 success; 1 the work found a problem (stale exercises, a solution notebook that
fails to run); 2 a usage or authoring mistake, reported as one line on stderr.

To add a subcommand, write ``_add_<name>_parser(subparsers)`` that sets ``func`` (a handler
``(args) -> int``) with ``set_defaults`` and call it in `build_parser`.
"""

from __future__ import annotations

import argparse
import sys
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
    limits = Limits(timeout=args.timeout, memory_mb=args.memory)
    notes: list[str] = []
    rows = grader.grade(
        args.assignment, paths, out, jobs=args.jobs, limits=limits, secret=secret, extra=extra,
        private=private, notes=notes,
    )
    print(reporting.summary_table(rows, notes))
    if args.gradescope:
        # One student per Gradescope run: the notebook named after the assignment, else the first.
        named = [row for row in rows if row[0].path.name == f"{args.assignment}.ipynb"]
        _, record = (named or rows)[0]
        target = Path(args.gradescope_results)
        reporting.atomic_write(target, reporting.gradescope_json(record))
        print(f"wrote {target}")
    else:
        print(f"wrote {out}/: grades.csv, results/, feedback/, log.jsonl")
    return 0


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
        private=[secret_file], notes=notes,
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
        help="seconds per case (20); a task gets at most twice that in all",
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    from coursepkg import __version__

    parser = _Parser(prog=PROG, description="Tools of the course 'From n-grams to Transformers'.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_author_parser(subparsers)
    _add_grade_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: the arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        The exit code: 0 success, 1 a problem found, 2 a usage or authoring mistake.
    """
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        if unknown:
            raise UsageError(
                f"unrecognized arguments: {' '.join(unknown)} (see '{PROG} {args.command} --help')"
            )
        return args.func(args)
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except SystemExit as exit_:  # --help and --version
        return exit_.code if isinstance(exit_.code, int) else 0
    except KeyboardInterrupt:
        message = "interrupted; finished work is kept (run the same command to go on)"
        print(f"{PROG}: {message}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
