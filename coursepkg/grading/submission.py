"""Reading a submitted notebook without trusting it.

Everything here runs in the grader's trusted process and never executes the
submission. A notebook that cannot be read becomes a :class:`Submission` with a
``problem`` (status "unreadable" in the gradebook), never an exception.

What the grader keeps of a notebook is its code cells, and of those only the
top-level statements a graded function can depend on (:func:`extract_code`):
imports, function and class definitions, and assignments of constant
expressions. Calls, loops, prints, check cells, shell commands and magics are
dropped, so a stray ``sys.exit()``, an infinite loop or a training run at the
top level of a cell costs nothing. Metadata, tags, outputs and anything the
notebook prints are ignored: scores come only from calling the graded
functions.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MAX_NOTEBOOK_MB = 20.0

_MAGIC_LINE = re.compile(r"^(\s*)([!%?]|.*\?\s*$)")
_ALLOWED_VALUE_NODES = (
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.UnaryOp,
    ast.BinOp,
    ast.unaryop,
    ast.operator,
    ast.Lambda,
)


@dataclass
class Submission:
    """One submitted notebook as the grader sees it.

    Attributes:
        path: where it was read from.
        student: the student id (see :func:`student_id`).
        sha256: hash of the file's bytes (the resume key).
        code: the extracted module source, or None when the notebook is unreadable.
        problem: why the notebook could not be read (None when it could).
        notes: things the student should know (syntax errors, what they made the grader skip).
        broken: function (or class) name -> where its definition has a syntax error.
    """

    path: Path
    student: str
    sha256: str
    code: str | None = None
    problem: str | None = None
    notes: list[str] = field(default_factory=list)
    broken: dict[str, str] = field(default_factory=dict)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_submission(path: Path, student: str, *, max_mb: float = MAX_NOTEBOOK_MB) -> Submission:
    """Read and extract a notebook; never raises for a bad notebook.

    Args:
        path: the notebook file.
        student: the id it is graded under.
        max_mb: notebooks larger than this are not parsed (outputs can make them huge).

    Returns:
        A Submission with ``code`` set, or with ``problem`` saying what is wrong and how to
        fix it.
    """
    try:
        sha = _hash_file(path)
        size = path.stat().st_size
    except OSError as exc:
        return Submission(path, student, "", problem=f"could not open the file ({exc.strerror})")
    sub = Submission(path, student, sha)
    if size > max_mb * 1024 * 1024:
        sub.problem = (
            f"the notebook is {size / 2**20:.1f} MB, over the {max_mb:g} MB limit: "
            "clear its outputs (Edit > Clear Outputs of All Cells), save and resubmit"
        )
        return sub
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        sub.problem = (
            f"the file is not UTF-8 text (bad byte at offset {exc.start}): "
            "resubmit the .ipynb file saved by Jupyter"
        )
        return sub
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        sub.problem = (
            f"the file is not valid notebook JSON (line {exc.lineno}, column {exc.colno}): "
            "it is truncated or corrupt; resubmit the .ipynb file saved by Jupyter"
        )
        return sub
    except RecursionError:
        sub.problem = "the file's JSON is nested too deeply to be a notebook"
        return sub
    cells = _code_cells(nb)
    if cells is None:
        sub.problem = (
            f"the file is JSON but not a notebook (its top level is a {type(nb).__name__}, "
            "not an object with 'cells'): resubmit the .ipynb file saved by Jupyter"
        )
        return sub
    sub.code, sub.notes, sub.broken = extract_code(cells)
    return sub


def _code_cells(nb: object) -> list[str] | None:
    """The source of each code cell, for nbformat 4 and 3; None if ``nb`` is no notebook."""
    if not isinstance(nb, dict):
        return None
    if isinstance(nb.get("cells"), list):  # nbformat 4
        raw_cells, key = nb["cells"], "source"
    elif isinstance(nb.get("worksheets"), list):  # nbformat 3
        raw_cells = [
            c
            for ws in nb["worksheets"]
            if isinstance(ws, dict) and isinstance(ws.get("cells"), list)
            for c in ws["cells"]
        ]
        key = "input"
    else:
        return None
    sources = []
    for cell in raw_cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get(key, "")
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        if isinstance(src, str):
            sources.append(src)
    return sources


def _strip_ipython(source: str) -> str | None:
    """Replace shell commands, magics and help lines by ``pass``; None for a cell magic."""
    if source.lstrip().startswith("%%"):
        return None
    lines = []
    for line in source.splitlines():
        match = _MAGIC_LINE.match(line)
        lines.append(f"{match.group(1)}pass" if match and line.strip() else line)
    return "\n".join(lines)


def _is_constant_expression(node: ast.AST) -> bool:
    """Literals, names, attributes, arithmetic and lambdas: nothing that calls or loops."""
    if isinstance(node, ast.Lambda):
        return True
    if not isinstance(node, _ALLOWED_VALUE_NODES):
        return False
    return all(_is_constant_expression(child) for child in ast.iter_child_nodes(node))


def _keep(node: ast.stmt) -> bool:
    if isinstance(
        node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    ):
        return True
    if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
        return _is_constant_expression(node.value)
    return False


# CPython 3.11's ast module is not thread-safe: two threads parsing at once (grading with
# --jobs 2) can raise "SystemError: AST constructor recursion depth mismatch".
_AST_LOCK = threading.Lock()


# Where a top-level statement may begin, when a cell that does not parse is cut into pieces:
# a line at column 0 that is not a comment, a closing bracket or the next clause of a statement.
_STATEMENT_START = re.compile(r"^(?!(?:else|elif|except|finally)\b)[A-Za-z_@]")
_DEFINES = re.compile(r"^(?:async\s+def|def|class)\s+(\w+)", re.MULTILINE)


@dataclass(frozen=True)
class _SyntaxProblem:
    """A piece of a cell that is not valid Python: where, why, and what it defines."""

    line: int | None
    message: str
    names: tuple[str, ...]


def _syntax_problem(exc: BaseException, offset: int, text: str) -> _SyntaxProblem:
    line = getattr(exc, "lineno", None)
    message = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
    return _SyntaxProblem(
        None if line is None else line + offset, message, tuple(_DEFINES.findall(text))
    )


def _statements(source: str) -> tuple[list[ast.stmt], list[_SyntaxProblem]]:
    """The top-level statements of a cell, and its syntax problems.

    A cell that does not parse is cut where top-level statements may begin, and each piece that
    parses is kept: a syntax error costs only the statement it is in (and the task whose
    function that is), not the cell's imports or its other definitions.
    """
    try:
        with _AST_LOCK:
            return ast.parse(source).body, []
    except (SyntaxError, ValueError) as whole:
        lines = source.splitlines(keepends=True)
        starts = [
            i
            for i, line in enumerate(lines)
            if _STATEMENT_START.match(line) and not (i and lines[i - 1].startswith("@"))
        ]
        bounds = sorted({0, *starts, len(lines)})
        body: list[ast.stmt] = []
        problems: list[_SyntaxProblem] = []
        for begin, end in zip(bounds, bounds[1:], strict=False):
            text = "".join(lines[begin:end])
            try:
                with _AST_LOCK:
                    tree = ast.parse(text)
            except (SyntaxError, ValueError) as exc:
                problems.append(_syntax_problem(exc, begin, text))
                continue
            ast.increment_lineno(tree, begin)
            body.extend(tree.body)
        if not problems:  # the pieces parse but the whole does not: give up on the cell
            return [], [_syntax_problem(whole, 0, source)]
        return body, problems


def _compiles(node: ast.stmt) -> _SyntaxProblem | None:
    """None when a kept statement compiles; else its problem (errors the parser lets through:
    a duplicate argument, ``nonlocal`` with nothing to bind, ``await`` outside async...)."""
    try:
        with _AST_LOCK:
            compile(ast.Module(body=[node], type_ignores=[]), "<cell>", "exec")
    except (SyntaxError, ValueError) as exc:
        name = getattr(node, "name", None)
        problem = _syntax_problem(exc, 0, "")
        return _SyntaxProblem(problem.line, problem.message, (name,) if name else ())
    return None


def extract_code(cells: list[str]) -> tuple[str, list[str], dict[str, str]]:
    """The module a submission's graded functions run in.

    Args:
        cells: the source of each code cell, in notebook order.

    Returns:
        (source, notes, broken): the kept statements of every cell, in order; notes for the
        student (syntax errors, and what was skipped because of them); and, for each function
        or class whose definition has a syntax error, where it is (``"code cell 6 has a syntax
        error at line 20 ('(' was never closed)"``), so that its task can say so.
    """
    kept: list[str] = []
    notes: list[str] = []
    broken: dict[str, str] = {}
    for number, cell in enumerate(cells, start=1):
        source = _strip_ipython(cell)
        if source is None:
            continue
        statements, problems = _statements(source)
        body = []
        for node in statements:
            if not _keep(node):
                continue
            problem = _compiles(node)
            if problem is None:
                body.append(node)
            else:
                problems.append(problem)
        for problem in problems:
            where = f" at line {problem.line}" if problem.line else ""
            text = f"code cell {number} has a syntax error{where} ({problem.message})"
            skipped = ", ".join(problem.names) or "the statement there"
            notes.append(f"{text}: {skipped} skipped")
            for name in problem.names:
                broken.setdefault(name, text)
        if body:
            with _AST_LOCK:
                kept.append(ast.unparse(ast.Module(body=body, type_ignores=[])))
    return "\n\n".join(kept) + "\n", notes, broken


_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def student_id(path: Path, assignment: str) -> str:
    """The id a notebook is graded under.

    The file name without ``.ipynb``; when that name is the assignment's own
    (``alice/01_ngrams.ipynb``, the layout of an LMS download with one folder per student), the
    folder's name instead. Characters other than letters, digits, ``.``, ``_`` and ``-`` become
    ``_``, and a leading ``.`` or ``-`` is dropped, so the id is safe as a file name and in a
    spreadsheet.
    """
    name = path.stem
    if name in (assignment, f"{assignment}-checkpoint") and path.parent.name:
        name = path.parent.name
    clean = _ID_CHARS.sub("_", name).lstrip(".-") or "unnamed"
    return clean[:100]


@dataclass(frozen=True)
class Found:
    """A notebook to grade and the id it is graded under."""

    path: Path
    student: str


def find_submissions(paths: Iterable[Path], assignment: str) -> list[Found]:
    """Every ``.ipynb`` given directly or found (recursively) in a given folder, with unique ids.

    Checkpoint copies (``.ipynb_checkpoints``) are skipped. Two files that map to the same id
    get ``-2``, ``-3``... in path order, so ids are stable for the same folder.
    """
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(
                p for p in sorted(path.rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts
            )
        else:
            files.append(path)
    found, seen = [], {}
    for path in sorted(dict.fromkeys(files), key=lambda p: str(p)):
        base = student_id(path, assignment)
        seen[base] = seen.get(base, 0) + 1
        found.append(Found(path, base if seen[base] == 1 else f"{base}-{seen[base]}"))
    return found
