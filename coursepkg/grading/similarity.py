"""``coursepkg similarity GRADED_DIR``: which submissions of a graded class share their code, task
by task, with the released stub subtracted and what much of the class writes alike discounted.

How a pair of submissions is scored, for each task:

1. **The function as the grader sees it.** Each notebook that ``log.jsonl`` lists is read with
   :func:`.submission.read_submission` (imports, definitions and constant assignments only). The
   task's function is taken from it, with the helper functions it calls that the notebook
   defines (whatever their names).
2. **Normalised** (:func:`normalise`). Docstrings, comments, ``pass``, ``print(...)`` and other
   expression statements without effect, code after a ``return``, ``raise``, ``break`` or
   ``continue``, ``if False:`` blocks and assignments to names that are never read are dropped
   (an unread assignment whose value calls something keeps the call). The function's parameters
   become ``P0``, ``P1``... by position; every other local name becomes one placeholder, so
   neither renaming nor an extra variable shifts anything; numbers and strings become ``N`` and
   ``S``; imported names are resolved (``F.softmax`` is ``torch.nn.functional.softmax``);
   annotations are dropped, and ``x += y`` reads ``x = x + y``.
3. **Fingerprints.** Every subtree of the normalised syntax tree with at least
   :data:`MIN_NODES` nodes is hashed. A block of statements hashes as the *set* of its
   statements' hashes, so reordering statements changes only the blocks' own fingerprints.
4. **The stub subtracted.** The fingerprints of every definition in the exercise notebook as
   released (made from ``solutions/`` by :func:`coursepkg.authoring.make_exercise`: the stubs,
   a debug task's starter code, the given helpers) do not count. An untouched exercise has
   nothing left; kept starter code weighs nothing.
5. **Rarity.** A fingerprint that ``k`` of the ``n`` students who wrote the function have weighs
   ``(log(n / k) / log(n / 2)) ** 2``, clipped to [0, 1]: 1 when only two have it, 0 when all
   do. Code that much of the class writes the same way (the obvious solution of a short task,
   or the reference solution passed around) is weak evidence against any one pair.
6. **The score.** ``code = shared / min(size a, size b) * min(1, lines / MIN_STATEMENTS)``:
   ``shared`` is the summed weight of the fingerprints the two share and a size counts a
   function's fingerprints, so the first factor is the weighted share of the smaller function
   found in the other (dead code added to one side does not dilute it); ``lines`` is the summed
   weight of the shared fingerprints that are whole statements, so that one line of a short
   task, however alike, cannot score high. Identical failures on the same hidden cases (the same
   status and message in ``results/``, rarity-weighted in the same way) raise it:
   ``score = code + (1 - code) * HIDDEN_WEIGHT * failures``, ``failures`` the weighted share of
   the two students' hidden failures that they have in common. Without ``results/`` the score is
   the code score.

Pairs at or above :data:`THRESHOLD` are flagged. Apart from pairs, a submission whose function
equals, after the same normalisation but with its constants kept, the reference solution's
(``solutions/``) or a function the book shows (the ``:pyobject:`` of each ``literalinclude`` in
``book/*.md``; without the book, every function of the chapters' modules,
:data:`coursepkg.course.CHAPTERS`) is flagged, unless it has fewer than
:data:`FLAG_STATEMENTS` statements (a one-line answer equal to the reference is what every
correct student writes).

The page (:func:`build_page`) lists the top pairs of each task with the two functions side by
side (the shared statements marked), and the CSV (:func:`build_csv`) the same pairs with the
evidence, then the flags. Same folder, same bytes: hashes are BLAKE2 of the normalised text,
every list is sorted, and nothing depends on the time or the machine.
"""

from __future__ import annotations

import ast
import builtins
import copy
import csv
import hashlib
import html
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coursepkg.grading.graded import GradedError, read_graded
from coursepkg.grading.reporting import atomic_write, html_page, spreadsheet_safe
from coursepkg.grading.submission import extract_code, read_submission

__all__ = [
    "HIDDEN_WEIGHT",
    "MIN_NODES",
    "MIN_STATEMENTS",
    "THRESHOLD",
    "Code",
    "Flag",
    "Pair",
    "Similarity",
    "TaskPairs",
    "build_csv",
    "build_page",
    "normalise",
    "similarity",
    "write_similarity",
]

#: Subtrees smaller than this (a name, ``x.shape``) are not fingerprints.
MIN_NODES = 3
#: The shared statements (weighted by rarity) at which a pair's code score is no longer damped
#: for being small.
MIN_STATEMENTS = 4.0
#: A pair at or above this score is flagged.
THRESHOLD = 0.5
#: How much identical hidden failures can add (a share of what the code score leaves to 1).
HIDDEN_WEIGHT = 0.3
#: Pairs scoring less are not listed (they share only what nearly the whole class has).
MIN_LISTED = 0.001
#: Pairs per task listed by default (``--top``).
DEFAULT_TOP = 20
#: Pairs per task shown side by side.
SIDE_BY_SIDE = 3
#: A function with fewer statements is not compared with the course's code (a one-line answer
#: equal to the reference is what every correct student writes).
FLAG_STATEMENTS = 2
#: Of the top pairs, those scoring at least this are shown side by side.
SIDE_BY_SIDE_SCORE = THRESHOLD / 2
#: A shared statement is marked on the page when its fingerprint weighs at least this.
MARK_WEIGHT = 0.25

# Statuses of a hidden case that say nothing about a pair (passing, an untouched stub, no
# function, an unreadable notebook).
_NOT_EVIDENCE = frozenset({"passed", "not attempted", "missing", "unreadable"})
# Builtins without side effects: an unread assignment or an expression statement calling only
# these is dead code.
_PURE_CALLS = frozenset({
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "float", "frozenset", "hash",
    "int", "isinstance", "len", "list", "max", "min", "range", "repr", "reversed", "round",
    "set", "sorted", "str", "sum", "tuple", "type", "zip",
})
_TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_SKIPPED_FIELDS = frozenset({"ctx", "type_comment", "annotation", "returns", "type_params"})
_LITERALINCLUDE = re.compile(
    r"^(?:`{3,}|:{3,})\{literalinclude\}\s+(\S+)[ \t]*\n((?:[ \t]*:.*\n)*)", re.M)
_PYOBJECT = re.compile(r"^[ \t]*:pyobject:[ \t]*(\S+)", re.M)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


# ----------------------------------------------------------------------------- normalising


@dataclass(frozen=True)
class Scope:
    """What the global names of a module's functions mean.

    Attributes:
        imports: a name -> the dotted name it was imported as (``F`` -> ``torch.nn.functional``).
        defined: names the module defines itself (functions, classes, constants).
        fixed: names the assignment fixes (its task functions and what the exercise notebook
            defines): they keep their name. Any other name the module defines, or leaves
            undefined (a helper pasted without its module), reads ``H``; builtins keep theirs.
    """

    imports: Mapping[str, str]
    defined: frozenset[str]
    fixed: frozenset[str] = frozenset()


def _imported(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    names = {}
    for alias in node.names:
        if isinstance(node, ast.Import):
            if alias.asname:
                names[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                names[top] = top
        elif alias.name != "*":
            module = "." * node.level + (node.module or "")
            names[alias.asname or alias.name] = f"{module}.{alias.name}"
    return names


def module_scope(tree: ast.Module, fixed: Iterable[str] = ()) -> Scope:
    """The :class:`Scope` of a parsed module."""
    imports: dict[str, str] = {}
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports.update(_imported(node))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return Scope(imports, frozenset(defined - set(imports)), frozenset(fixed))


def _pure(expr: ast.AST) -> bool:
    """No call but to side-effect-free builtins, no yield, await or walrus."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Yield | ast.YieldFrom | ast.Await | ast.NamedExpr):
            return False
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _PURE_CALLS
        ):
            return False
    return True


def _inert(expr: ast.expr) -> bool:
    """An expression statement that changes nothing: a docstring, a constant, a print."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "print":
        return True
    return _pure(expr)


def _clean_block(statements: list[ast.stmt]) -> list[ast.stmt]:
    """A block without its dead statements (in place for the nested blocks)."""
    out: list[ast.stmt] = []
    for stmt in statements:
        if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and _inert(stmt.value)):
            continue
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
            continue
        if isinstance(stmt, ast.If | ast.While) and isinstance(stmt.test, ast.Constant):
            if isinstance(stmt, ast.If):
                out.extend(_clean_block(stmt.body if stmt.test.value else stmt.orelse))
                continue
            if not stmt.test.value:
                out.extend(_clean_block(stmt.orelse))
                continue
        for name in ("body", "orelse", "finalbody"):
            block = getattr(stmt, name, None)
            if isinstance(block, list):
                setattr(stmt, name, _clean_block(block))
        for part in getattr(stmt, "handlers", []) + getattr(stmt, "cases", []):
            part.body = _clean_block(part.body)
        out.append(stmt)
    for i, stmt in enumerate(out):
        if isinstance(stmt, _TERMINAL):
            return out[: i + 1]
    return out


def _assigned_names(stmt: ast.stmt) -> set[str] | None:
    """The names a plain assignment binds (None when it binds anything else)."""
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AugAssign | ast.AnnAssign) and stmt.value is not None:
        targets = [stmt.target]
    else:
        return None
    names: set[str] = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif not isinstance(node, ast.Tuple | ast.List | ast.Starred | ast.expr_context):
                return None
    return names


def _drop_unread_assignments(func: ast.AST) -> None:
    """Remove assignments to names never read anywhere in ``func`` (until none is left); one
    whose value calls something other than a pure builtin keeps the call as a statement."""
    changed = True
    while changed:
        changed = False
        read = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Load)}
        for node in ast.walk(func):
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if not isinstance(block, list) or not block or not isinstance(block[0], ast.stmt):
                    continue
                kept = []
                for stmt in block:
                    names = _assigned_names(stmt)
                    if names is None or names & read:
                        kept.append(stmt)
                        continue
                    changed = True
                    if not _pure(stmt.value):
                        kept.append(ast.copy_location(ast.Expr(stmt.value), stmt))
                setattr(node, name, kept)


def _local_names(func: ast.AST) -> set[str]:
    """Names bound inside ``func`` (assigned, loop and comprehension targets, nested
    definitions and their parameters, ``except ... as``), except declared globals."""
    names: set[str] = set()
    declared: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
            node is not func
        ):
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            declared.update(node.names)
    return names - declared


class _Hasher:
    """Hashes one cleaned definition bottom-up, collecting its fingerprints and the hash and
    lines of each statement in it."""

    def __init__(self, func: ast.AST, scope: Scope, *, constants: bool = False) -> None:
        self.constants = constants
        imports = dict(scope.imports)
        for node in ast.walk(func):
            if isinstance(node, ast.Import | ast.ImportFrom):
                imports.update(_imported(node))
        self.scope = Scope(imports, scope.defined, scope.fixed)
        self.top = func
        self.params: dict[str, str] = {}
        args = getattr(func, "args", None)
        if isinstance(args, ast.arguments):
            for i, arg in enumerate(args.posonlyargs + args.args):
                self.params[arg.arg] = f"P{i}"
            for arg in args.kwonlyargs:
                self.params[arg.arg] = f"K:{arg.arg}"
            if args.vararg:
                self.params[args.vararg.arg] = "P*"
            if args.kwarg:
                self.params[args.kwarg.arg] = "P**"
        self.locals = _local_names(func) - set(self.params) - set(imports)
        self.fingerprints: set[str] = set()
        self.spans: list[tuple[str, int, int]] = []

    def _make(self, label: str, children: list[str], size: int, node: ast.AST | None) -> tuple:
        digest = _digest(f"{label}({','.join(children)})")
        if size >= MIN_NODES:
            self.fingerprints.add(digest)
        if isinstance(node, ast.stmt) and node is not self.top:
            self.spans.append((digest, node.lineno, node.end_lineno or node.lineno))
        return digest, size

    def _leaf(self, label: str) -> tuple[str, int]:
        return _digest(label), 1

    def visit(self, node: ast.AST) -> tuple[str, int]:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        return method(node) if method is not None else self._generic(node)

    def block(self, statements: list[ast.stmt]) -> tuple[str, int]:
        """A block as the set of its statements: their order does not change its hash."""
        hashes, size = [], 0
        for stmt in statements:
            digest, n = self.visit(stmt)
            hashes.append(digest)
            size += n
        digest = _digest("{" + ",".join(sorted(hashes)) + "}")
        if size >= MIN_NODES and len(statements) > 1:
            self.fingerprints.add(digest)
        return digest, size

    def _generic(self, node: ast.AST, skip: Iterable[str] = ()) -> tuple[str, int]:
        label, children, size = [type(node).__name__], [], 1
        for name, value in ast.iter_fields(node):
            if name in _SKIPPED_FIELDS or name in skip:
                continue
            if isinstance(value, ast.operator | ast.unaryop | ast.boolop | ast.cmpop):
                label.append(type(value).__name__)
            elif isinstance(value, ast.AST):
                digest, n = self.visit(value)
                children.append(digest)
                size += n
            elif isinstance(value, list):
                if value and all(isinstance(v, ast.stmt) for v in value):
                    digest, n = self.block(value)
                    children.append(digest)
                    size += n
                    continue
                for item in value:
                    if isinstance(item, ast.cmpop):
                        label.append(type(item).__name__)
                    elif isinstance(item, ast.AST):
                        digest, n = self.visit(item)
                        children.append(digest)
                        size += n
                    elif item is None:
                        children.append("-")
                    else:
                        label.append(repr(item))
                label.append(f"{name}={len(value)}")
            elif value is None:
                children.append("-")
            else:
                label.append(f"{name}={value!r}")
        return self._make("|".join(label), children, size, node)

    # names and constants

    def _name_label(self, name: str) -> str:
        if name in self.params:
            return self.params[name]
        if name in self.locals:
            return "V"
        if name in self.scope.imports:
            return "G:" + self.scope.imports[name]
        if name in self.scope.fixed:
            return f"H:{name}"
        if name in self.scope.defined or not hasattr(builtins, name):
            return "H"  # the module's own, or a name it leaves undefined (a pasted helper's)
        return "G:" + name

    def _dotted(self, node: ast.AST) -> str | None:
        """``G:torch.nn.functional.softmax`` for an attribute chain on a global name."""
        if isinstance(node, ast.Name):
            label = self._name_label(node.id)
            return label if label.startswith("G:") else None
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def visit_Name(self, node: ast.Name) -> tuple[str, int]:
        return self._leaf(self._name_label(node.id))

    def visit_Attribute(self, node: ast.Attribute) -> tuple[str, int]:
        dotted = self._dotted(node)
        return self._leaf(dotted) if dotted is not None else self._generic(node)

    def visit_Constant(self, node: ast.Constant) -> tuple[str, int]:
        value = node.value
        if self.constants:
            return self._leaf(f"C:{value!r}")
        if value is None or value is Ellipsis or isinstance(value, bool):
            return self._leaf(f"C:{value!r}")
        return self._leaf("S" if isinstance(value, str | bytes) else "N")

    def visit_JoinedStr(self, node: ast.JoinedStr) -> tuple[str, int]:
        return self._generic(node) if self.constants else self._leaf("S")

    def visit_UnaryOp(self, node: ast.UnaryOp) -> tuple[str, int]:
        operand = node.operand
        if (not self.constants and isinstance(node.op, ast.USub | ast.UAdd)
                and isinstance(operand, ast.Constant) and not isinstance(operand.value, bool)
                and isinstance(operand.value, int | float | complex)):
            return self._leaf("N")
        return self._generic(node)

    # statements read the same way however they are written

    def visit_AugAssign(self, node: ast.AugAssign) -> tuple[str, int]:
        target = copy.deepcopy(node.target)
        for sub in ast.walk(target):
            if hasattr(sub, "ctx"):
                sub.ctx = ast.Load()
        value = ast.BinOp(left=target, op=node.op, right=node.value)
        return self.visit(ast.copy_location(ast.Assign(targets=[node.target], value=value), node))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> tuple[str, int]:
        return self.visit(ast.copy_location(ast.Assign(targets=[node.target], value=node.value),
                                            node))

    def visit_arg(self, node: ast.arg) -> tuple[str, int]:
        return self._leaf("arg")

    def visit_alias(self, node: ast.alias) -> tuple[str, int]:
        return self._leaf(f"alias:{node.name}")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> tuple[str, int]:
        return self._generic(node, skip=("name",))

    def visit_FunctionDef(self, node: ast.AST) -> tuple[str, int]:
        return self._generic(node, skip=("name",))

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef


@dataclass(frozen=True)
class Code:
    """One task's function in one notebook (or in the course), normalised.

    Attributes:
        root: the hash of the whole normalised function (its name and docstring left out).
        exact: the same with the constants kept: equal exact roots, the same function up to
            names, comments, docstrings, dead code and statement order.
        statements: how many statements the function has (dead ones left out).
        fingerprints: the hashes of its subtrees and of those of the helpers it calls.
        spans: (hash, first line, last line) of each statement, lines of :attr:`source`.
        source: the code shown: the function as the grader keeps it, then its helpers.
    """

    root: str
    exact: str
    statements: int
    fingerprints: frozenset[str]
    spans: tuple[tuple[str, int, int], ...]
    source: str


def _definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    """The last top-level definition of each name (the one a notebook run from the top keeps)."""
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = node
    return found


def _hash_definition(node: ast.stmt, scope: Scope) -> tuple[str, str, _Hasher]:
    """A definition's hash with constants abstracted and with them kept, and its hasher."""
    cleaned = copy.deepcopy(node)
    cleaned.body = _clean_block(cleaned.body)
    _drop_unread_assignments(cleaned)
    hasher = _Hasher(cleaned, scope)
    root, _ = hasher.visit(cleaned)
    exact, _ = _Hasher(cleaned, scope, constants=True).visit(cleaned)
    return root, exact, hasher


def _called_helpers(node: ast.stmt, definitions: Mapping[str, ast.stmt],
                    skip: frozenset[str]) -> list[str]:
    """The module's own definitions that ``node`` uses, directly or through each other, in the
    order first met (the task functions in ``skip`` excluded)."""
    order: list[str] = []
    todo = [node]
    while todo:
        current = todo.pop(0)
        local = _local_names(current)
        for sub in ast.walk(current):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                name = sub.id
                if (name in definitions and name not in local and name not in skip
                        and name not in order and definitions[name] is not node):
                    order.append(name)
                    todo.append(definitions[name])
    return order


def _segment(lines: list[str], node: ast.stmt) -> tuple[list[str], int]:
    """The source lines of a definition (decorators included) and its first line number."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return lines[first - 1: node.end_lineno], first


class _Module:
    """A module's source parsed once: its definitions and lines."""

    def __init__(self, code: str) -> None:
        self.tree = ast.parse(code)
        self.definitions = _definitions(self.tree)
        self.lines = code.splitlines()
        self.fixed: frozenset[str] | None = None
        self.scope = module_scope(self.tree)

    def with_fixed(self, fixed: frozenset[str]) -> _Module:
        if fixed != self.fixed:
            self.fixed = fixed
            self.scope = Scope(self.scope.imports, self.scope.defined, fixed)
        return self


def _parsed(code: str) -> _Module | None:
    try:
        return _Module(code)
    except (SyntaxError, ValueError, RecursionError):
        return None


def normalise(
    code: str, name: str, *, fixed: Iterable[str] = (), skip: Iterable[str] = ()
) -> Code | None:
    """The definition ``name`` of a module's source, normalised, with the module's own helpers
    that it calls.

    Args:
        code: a module's source (a submission's extracted code, a solution's, a package file).
        name: a top-level function or class (``"count_ngrams"``), or a method
            (``"NGramLM.prob"``).
        fixed: global names that keep their name (the assignment's task functions and what the
            exercise defines); the module's other definitions read as one placeholder.
        skip: definitions never folded in as helpers (the other task functions: they are
            tasks of their own).

    Returns:
        The :class:`Code`, or None when the module does not parse or does not define ``name``.
    """
    module = _parsed(code)
    return None if module is None else _normalise(module, name, frozenset(fixed), frozenset(skip))


def _normalise(module: _Module, name: str, fixed: frozenset[str], skip: frozenset[str],
               cache: dict | None = None) -> Code | None:
    """:func:`normalise` on a parsed module; ``cache`` keeps the result by what it depends on
    (the definitions' text and the names they may refer to), so that the many students who
    hand in the same function (the stub, above all) are normalised once."""
    definitions = module.definitions
    head, _, method = name.partition(".")
    node = definitions.get(head)
    if node is not None and method:
        node = next((n for n in getattr(node, "body", []) if isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == method), None)
    if node is None:
        return None
    scope = module.with_fixed(fixed).scope
    parts = [node] + [definitions[h] for h in ([] if method else
                                                _called_helpers(node, definitions, skip))]
    texts = [_segment(module.lines, part) for part in parts]
    key = (tuple("\n".join(text) for text, _ in texts), tuple(sorted(scope.imports.items())),
           frozenset(n for n in scope.defined if hasattr(builtins, n)), fixed)
    if cache is not None and key in cache:
        return cache[key]
    root = exact = ""
    fingerprints, spans, shown, statements = set(), [], [], 0
    for part, (text, first) in zip(parts, texts, strict=True):
        digest, whole, hasher = _hash_definition(part, scope)
        if not root:
            root, exact, statements = digest, whole, len(hasher.spans)
        if shown:
            shown.append("")
        offset = len(shown) - first + 1
        fingerprints |= hasher.fingerprints
        spans.extend((h, a + offset, b + offset) for h, a, b in hasher.spans)
        shown.extend(text)
    spans.sort(key=lambda span: (span[1], span[2], span[0]))
    code = Code(root, exact, statements, frozenset(fingerprints), tuple(spans),
                "\n".join(shown) + "\n")
    if cache is not None:
        cache[key] = code
    return code


# ----------------------------------------------------------------------------- the course's code


@dataclass(frozen=True)
class Known:
    """Code a submission may be equal to: the reference solution, or a function the book shows
    (:attr:`Code.exact` of it)."""

    label: str
    exact: str


@dataclass(frozen=True)
class Course:
    """What the course says about an assignment: the released code (stub fingerprints), the
    names the assignment fixes, the reference solution of each task, the book's functions."""

    stub: frozenset[str]
    fixed: frozenset[str]
    references: Mapping[str, Known]
    book: tuple[Known, ...]
    notes: tuple[str, ...]


def _notebook_code(nb) -> str:
    return extract_code([c.source for c in nb.cells if c.cell_type == "code"])[0]


def _book_functions(root: Path) -> list[tuple[str, Path, str]]:
    """(where it is shown, the module file, the object) for each ``:pyobject:`` of the book;
    without a book, every function and method of the chapters' modules."""
    shown = []
    book = root / "book"
    if book.is_dir():
        for page in sorted(book.glob("*.md")):
            text = page.read_text(encoding="utf-8")
            for match in _LITERALINCLUDE.finditer(text):
                target = (page.parent / match[1]).resolve()
                for obj in _PYOBJECT.findall(match[2]):
                    shown.append((f"book/{page.name}", target, obj))
        return shown
    from coursepkg.course import CHAPTERS

    package = Path(__file__).resolve().parents[1]
    for chapter in CHAPTERS:
        for module in chapter.modules:
            path = package / f"{module}.py"
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    shown.append((f"coursepkg.{module}", path, node.name))
                elif isinstance(node, ast.ClassDef):
                    shown.append((f"coursepkg.{module}", path, node.name))
    return shown


def course_code(assignment: str, root: Path, tasks: list) -> Course:
    """The course's side of an assignment, read from the checkout at ``root`` (its
    ``solutions/``, ``exercises/`` and ``book/``); what is missing is left out and noted."""
    from coursepkg.authoring import make_exercise, read_notebook

    fixed = {task.func_name for task in tasks}
    notes: list[str] = []
    solution_path = root / "solutions" / f"{assignment}.ipynb"
    exercise_path = root / "exercises" / f"{assignment}.ipynb"
    solution_code = exercise_code = None
    if solution_path.is_file():
        solution = read_notebook(solution_path)
        solution_code = _notebook_code(solution)
        exercise_code = _notebook_code(make_exercise(
            solution, source=f"solutions/{assignment}.ipynb", assignment=assignment))
    elif exercise_path.is_file():
        exercise_code = _notebook_code(read_notebook(exercise_path))
        notes.append(f"no solutions/{assignment}.ipynb: no submission is compared with the "
                     "reference solution")
    else:
        notes.append(f"no solutions/{assignment}.ipynb or exercises/{assignment}.ipynb: the "
                     "released stubs are not subtracted and nothing is compared with the "
                     "reference")
    stub: set[str] = set()
    exercise = None if exercise_code is None else _parsed(exercise_code)
    if exercise is not None:
        fixed |= set(exercise.definitions)
        everything = frozenset(exercise.definitions)
        for name in sorted(exercise.definitions):
            code = _normalise(exercise, name, frozenset(fixed), everything)
            stub |= code.fingerprints if code is not None else set()
    fixed = frozenset(fixed)
    references = {}
    solution = None if solution_code is None else _parsed(solution_code)
    for task in tasks if solution is not None else []:
        code = _normalise(solution, task.func_name, fixed, fixed)
        if code is not None:
            references[task.id] = Known(
                f"the reference solution (solutions/{assignment}.ipynb)", code.exact)
    book, modules = [], {}
    for where, path, obj in _book_functions(root):
        if path not in modules:
            modules[path] = _parsed(path.read_text(encoding="utf-8")) if path.is_file() else None
        module = modules[path]
        if module is None:
            continue
        names, node = [obj], module.definitions.get(obj)
        if isinstance(node, ast.ClassDef):  # a class shown whole: each of its methods
            names = [f"{obj}.{n.name}" for n in node.body
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        for name in names:
            code = _normalise(module, name, fixed, frozenset(module.definitions))
            if code is not None:
                dotted = path.stem if path.parent.name == "coursepkg" else path.name
                book.append(Known(f"coursepkg.{dotted}.{name}, shown in {where}", code.exact))
    if not book:
        notes.append("no book code found: no submission is compared with the book's functions")
    return Course(frozenset(stub), fixed, references, tuple(book), tuple(notes))


# ----------------------------------------------------------------------------- the class


@dataclass(frozen=True)
class Pair:
    """Two students' functions for one task, and why they look alike.

    Attributes:
        task: the task id.
        a, b: the two students (``a < b``).
        score: the pair's score, 0 to 1.
        code: the code score (before hidden failures).
        failures: the weighted share of hidden failures the two have in common, 0 to 1.
        shared: how many fingerprints they share (the stub's excluded).
        exclusive: of those, how many no other student has.
        smaller: how many fingerprints the smaller of the two functions has.
        statements: how many of the shared fingerprints are whole statements.
        same_failures: the hidden cases both failed with the same status and message.
    """

    task: str
    a: str
    b: str
    score: float
    code: float
    failures: float
    shared: int
    exclusive: int
    smaller: int
    statements: int
    same_failures: tuple[str, ...] = ()

    @property
    def flagged(self) -> bool:
        return self.score >= THRESHOLD

    @property
    def evidence(self) -> str:
        """One line: the code in common and the hidden failures in common."""
        text = (f"code {self.code:.3f}: {self.shared} of the {self.smaller} fingerprints of the "
                f"smaller function shared ({self.statements} whole statements), "
                f"{self.exclusive} by these two only")
        if self.same_failures:
            text += f"; the same failure on {', '.join(self.same_failures)}"
        return text


@dataclass(frozen=True)
class Flag:
    """A submission whose function equals, after normalisation, code the course gives."""

    task: str
    student: str
    equal_to: str


@dataclass
class TaskPairs:
    """One task across the class.

    Attributes:
        id, func_name: the task.
        written: the students whose function has something beyond the stub.
        untouched: the students whose function is the stub (or adds nothing to it).
        missing: the students whose notebook does not define the function.
        pairs: every pair scoring at least :data:`MIN_LISTED`, best first.
        codes: student -> the normalised function.
        weights: fingerprint -> its rarity weight in this class.
    """

    id: str
    func_name: str
    written: list[str]
    untouched: list[str]
    missing: list[str]
    pairs: list[Pair]
    codes: dict[str, Code] = field(repr=False)
    weights: dict[str, float] = field(repr=False)


@dataclass
class Similarity:
    """The similarity report of a graded folder."""

    folder: Path
    assignment: str
    students: list[str]
    tasks: list[TaskPairs]
    flags: list[Flag]
    notes: list[str]
    hidden_evidence: bool


def rarity(count: int, n: int) -> float:
    """The weight of a fingerprint (or failure) that ``count`` of ``n`` students have."""
    if n <= 2:
        return 1.0
    share = math.log(n / max(count, 1)) / math.log(n / 2)
    return min(1.0, max(0.0, share)) ** 2


def _weights(sets: Mapping[str, frozenset[str]], n: int) -> dict[str, float]:
    counts = Counter(f for items in sets.values() for f in items)
    return {f: rarity(c, n) for f, c in sorted(counts.items())}


def _weighted(items: Iterable[str], weights: Mapping[str, float]) -> float:
    return math.fsum(weights[f] for f in sorted(items))


def score_pairs(
    task_id: str,
    prints: Mapping[str, frozenset[str]],
    statements: Mapping[str, frozenset[str]],
    failures: Mapping[str, frozenset[tuple[str, str, str]]],
    class_size: int,
) -> tuple[list[Pair], dict[str, float]]:
    """Score every pair of students of one task.

    Args:
        task_id: the task.
        prints: student -> the fingerprints of their function, the stub's removed (only the
            students with something left).
        statements: student -> which of those fingerprints are whole statements.
        failures: student -> the hidden cases they failed, as (case, status, message).
        class_size: the students with results (the rarity of a failure is among them).

    Returns:
        The pairs scoring at least :data:`MIN_LISTED`, best first, and the fingerprints'
        weights.
    """
    weights = _weights(prints, len(prints))
    fail_weights = _weights(failures, class_size)
    counts = Counter(f for items in prints.values() for f in items)
    students = sorted(prints)
    # students who wrote the same function share its comparisons: one per pair of functions
    same = {}
    kind = {student: same.setdefault(prints[student], len(same)) for student in students}
    compared: dict[tuple[int, int], tuple] = {}
    pairs = []
    for i, a in enumerate(students):
        for b in students[i + 1:]:
            key = (kind[a], kind[b])
            if key not in compared:
                common = prints[a] & prints[b]
                shared = _weighted(common, weights)
                lines = _weighted(statements[a] & statements[b], weights)
                smaller = min(len(prints[a]), len(prints[b]))
                code = shared / smaller * min(1.0, lines / MIN_STATEMENTS) if smaller else 0.0
                compared[key] = (code, len(common), sum(counts[f] == 2 for f in common), smaller,
                                 len(statements[a] & statements[b]))
            code, n_common, exclusive, smaller, n_lines = compared[key]
            fa, fb = failures.get(a, frozenset()), failures.get(b, frozenset())
            union = _weighted(fa | fb, fail_weights)
            fail = _weighted(fa & fb, fail_weights) / union if union else 0.0
            score = round(code + (1 - code) * HIDDEN_WEIGHT * fail, 6)
            if score < MIN_LISTED:
                continue
            pairs.append(Pair(
                task_id, a, b, score, round(code, 6), round(fail, 6), n_common, exclusive,
                smaller, n_lines,
                tuple(sorted({case for case, _, _ in fa & fb}, key=_natural)),
            ))
    pairs.sort(key=lambda p: (-p.score, p.a, p.b))
    return pairs, weights


def _natural(text: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _read_log(folder: Path) -> dict[str, tuple[str, str]]:
    """student -> (the notebook's path, its sha256 or ""), from ``log.jsonl`` (the last line of
    each student)."""
    files: dict[str, tuple[str, str]] = {}
    for line in (folder / "log.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("student"), str) \
                and isinstance(entry.get("file"), str):
            sha = entry.get("sha256")
            files[entry["student"]] = (entry["file"], sha if isinstance(sha, str) else "")
    return files


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _locate(recorded: str, sha: str, folder: Path) -> Path | None:
    """Where a logged notebook is now: its recorded path as it is (absolute, or from the current
    folder), else that relative path from the graded folder or one of the folders above it (the
    folder ``coursepkg grade`` ran in), there only with the content the log records."""
    path = Path(recorded)
    if path.is_file() or path.is_absolute():
        return path if path.is_file() else None
    for base in (folder, *folder.resolve().parents):
        candidate = base / path
        if candidate.is_file() and (not sha or _sha256(candidate) == sha):
            return candidate
    return None


def _assignment(folder: Path, paths: Iterable[Path]) -> str:
    """The assignment: from grades.csv's task columns, else the notebooks' metadata."""
    from coursepkg.checks import TASKS
    from coursepkg.grading.validate import infer_assignment

    grades = folder / "grades.csv"
    if grades.is_file():
        header = next(csv.reader(grades.read_text(encoding="utf-8").splitlines()), [])
        found = {TASKS[c.split(" ")[0]].assignment for c in header if c.split(" ")[0] in TASKS}
        if len(found) == 1:
            return found.pop()
    found = {infer_assignment(path) for path in paths} - {None}
    if len(found) == 1:
        return found.pop()
    raise GradedError(
        f"cannot tell which assignment {folder} grades (" + (
            f"its notebooks say {', '.join(sorted(found))}" if found
            else "no grades.csv task columns or notebook metadata name one")
        + "): grade it again with 'coursepkg grade ASSIGNMENT ...'"
    )


def _hidden_failures(folder: Path, students: list[str]) -> tuple[dict, int] | None:
    """task id -> student -> the hidden cases failed as (case, status, message), and the number
    of students with results; None without grades.csv and results."""
    if not (folder / "grades.csv").is_file() or not (folder / "results").is_dir():
        return None
    graded = read_graded(folder)
    wanted = set(students)
    failures: dict[str, dict[str, frozenset]] = {}
    rows = [row for row in graded.students if row.student in wanted and row.cases]
    for row in rows:
        by_task: dict[str, set] = {}
        for case in row.cases:
            if case.hidden and case.status not in _NOT_EVIDENCE:
                by_task.setdefault(case.task, set()).add((case.name, case.status, case.message))
        for task_id, items in by_task.items():
            failures.setdefault(task_id, {})[row.student] = frozenset(items)
    return failures, len(rows)


def _course_root() -> Path:
    return Path(__file__).resolve().parents[2]


def similarity(folder: Path, *, root: Path | None = None) -> Similarity:
    """Read a graded folder's submissions and score every pair, task by task.

    Args:
        folder: the ``--out`` folder of ``coursepkg grade`` (its ``log.jsonl`` names the
            notebooks; ``grades.csv`` and ``results/``, when there, give the hidden failures).
        root: the course checkout (``solutions/``, ``exercises/``, ``book/``); default the one
            this package runs from.

    Raises:
        GradedError: not a graded folder, or none of its notebooks is where the log says.
    """
    from coursepkg.checks.core import tasks_for

    folder = Path(folder)
    if not folder.is_dir():
        raise GradedError(f"no such folder: {folder} (give the --out folder of 'coursepkg grade')")
    if not (folder / "log.jsonl").is_file():
        raise GradedError(f"{folder} is not a graded folder (no log.jsonl): give the --out folder "
                          "of 'coursepkg grade'")
    logged = _read_log(folder)
    if not logged:
        raise GradedError(f"{folder}/log.jsonl lists no submission: grade some first")
    if (folder / "grades.csv").is_file():
        graded = {row.student for row in read_graded(folder, details=False).students}
        logged = {s: f for s, f in logged.items() if s in graded} or logged
    located = {s: _locate(f, sha, folder) for s, (f, sha) in sorted(logged.items())}
    lost = sorted(s for s, path in located.items() if path is None)
    if len(lost) == len(located):
        first = logged[lost[0]][0]
        raise GradedError(
            f"no submissions found: none of the {len(lost)} notebooks {folder}/log.jsonl lists is "
            f"where it was graded (first: {first}); move them back, or grade them again from "
            "where they are now"
        )
    notes = []
    if lost:
        more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
        notes.append(f"not where log.jsonl says they were graded, so left out: "
                     f"{', '.join(lost[:10])}{more}")
    paths = {s: p for s, p in located.items() if p is not None}
    assignment = _assignment(folder, paths.values())
    tasks = tasks_for(assignment)
    course = course_code(assignment, root or _course_root(), tasks)
    notes.extend(course.notes)
    task_names = frozenset(task.func_name for task in tasks)

    sources: dict[str, str] = {}
    unreadable = []
    for student, path in paths.items():
        sub = read_submission(path, student)
        if sub.code is None:
            unreadable.append(student)
        else:
            sources[student] = sub.code
    if unreadable:
        more = f" and {len(unreadable) - 10} more" if len(unreadable) > 10 else ""
        notes.append(f"unreadable, so left out: {', '.join(unreadable[:10])}{more}")

    hidden = _hidden_failures(folder, sorted(sources))
    if hidden is None:
        notes.append("no grades.csv and results/: the hidden cases' failures are not used")
    failures, class_size = hidden or ({}, 0)

    results, flags = [], []
    modules = {student: _parsed(code) for student, code in sources.items()}
    cache: dict = {}
    for task in tasks:
        codes, prints, statements, untouched, missing = {}, {}, {}, [], []
        for student, module in modules.items():
            found = None if module is None else _normalise(
                module, task.func_name, course.fixed, task_names, cache)
            if found is None:
                missing.append(student)
                continue
            codes[student] = found
            left = found.fingerprints - course.stub
            if left:
                prints[student] = left
                statements[student] = frozenset(h for h, _, _ in found.spans) & left
            else:
                untouched.append(student)
            known = [course.references[task.id]] if task.id in course.references else []
            for other in known + list(course.book) if found.statements >= FLAG_STATEMENTS else []:
                if found.exact == other.exact:
                    flags.append(Flag(task.id, student, other.label))
        pairs, weights = score_pairs(task.id, prints, statements, failures.get(task.id, {}),
                                     class_size)
        results.append(TaskPairs(task.id, task.func_name, sorted(prints), untouched, missing,
                                 pairs, codes, weights))
    return Similarity(folder, assignment, sorted(sources), results, flags, notes,
                      hidden is not None)


# ----------------------------------------------------------------------------- the outputs


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 76rem; margin: 2rem auto; padding: 0 1rem;
       color: #1b1b1b; background: #fff; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem; } h3 { font-size: 1rem; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.92rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: left;
         vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.flag td { background: #fde8e4; }
.muted { color: #666; }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: 0.8rem; }
.side pre { margin: 0.3rem 0; padding: 0.5rem; background: #f6f6f6; overflow-x: auto;
            font-size: 0.8rem; line-height: 1.35; }
.same { background: #fff0a8; display: inline-block; min-width: 100%; }
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _table(head: list[str], rows: list[tuple[str, list[str]]], numeric: set[int]) -> str:
    """An HTML table; each row is (its class, its cells as escaped HTML)."""
    cls = [' class="n"' if i in numeric else "" for i in range(len(head))]
    cells = "".join(f"<th{c}>{h}</th>" for c, h in zip(cls, head, strict=True))
    lines = ["<table>", f"<tr>{cells}</tr>"]
    for row_class, cells in rows:
        attr = f' class="{row_class}"' if row_class else ""
        lines.append(f"<tr{attr}>" + "".join(
            f"<td{c}>{v}</td>" for c, v in zip(cls, cells, strict=True)) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def _marked(code: Code, shared: frozenset[str], weights: Mapping[str, float]) -> set[int]:
    """The lines of ``code`` whose statement is a rare enough shared fingerprint."""
    lines: set[int] = set()
    for digest, first, last in code.spans:
        if digest in shared and weights.get(digest, 0.0) >= MARK_WEIGHT:
            lines.update(range(first, last + 1))
    return lines


def _code_block(code: Code, marked: set[int]) -> str:
    out = []
    for number, line in enumerate(code.source.rstrip("\n").split("\n"), start=1):
        text = _esc(line) or " "
        out.append(f'<span class="same">{text}</span>' if number in marked else text)
    return "<pre>" + "\n".join(out) + "</pre>"


def _anchor(task_id: str, rank: int) -> str:
    return f"t{task_id.replace('.', '-')}-{rank}"


def _task_section(task: TaskPairs, top: int) -> str:
    parts = [f"<h2>Task {_esc(task.id)} <code>{_esc(task.func_name)}</code></h2>"]
    count = (f"{len(task.written)} wrote it; {len(task.untouched)} left the stub as released"
             + (f"; {len(task.missing)} do not define it" if task.missing else "") + ".")
    parts.append(f"<p>{count}</p>")
    listed = task.pairs[:top]
    if not listed:
        parts.append("<p>No two submissions share code beyond the stub and what nearly the whole "
                     "class writes.</p>")
        return "\n".join(parts)
    flagged = sum(p.flagged for p in task.pairs)
    parts.append(f"<p>{flagged} pair{'s' * (flagged != 1)} at or above {THRESHOLD:g}; the top "
                 f"{len(listed)} of {len(task.pairs)} scoring {MIN_LISTED:g} or more:</p>")
    shown = [p for p in listed[:SIDE_BY_SIDE] if p.score >= SIDE_BY_SIDE_SCORE]
    rows = []
    for rank, pair in enumerate(listed, start=1):
        name = f'<a href="#{_anchor(task.id, rank)}">{rank}</a>' if pair in shown else str(rank)
        rows.append(("flag" if pair.flagged else "", [
            name, _esc(pair.a), _esc(pair.b), f"{pair.score:.3f}", f"{pair.code:.3f}",
            f"{pair.failures:.2f}" if pair.same_failures else "", _esc(pair.evidence)]))
    parts.append(_table(["rank", "student", "student", "score", "code", "hidden", "evidence"],
                        rows, {0, 3, 4, 5}))
    for rank, pair in enumerate(shown, start=1):
        a, b = task.codes[pair.a], task.codes[pair.b]
        shared = a.fingerprints & b.fingerprints
        parts.append(f'<h3 id="{_anchor(task.id, rank)}">{rank}. {_esc(pair.a)} and '
                     f"{_esc(pair.b)}: {pair.score:.3f}</h3>")
        parts.append(f'<p class="muted">{_esc(pair.evidence)}.</p>')
        parts.append('<div class="side">'
                     f"<div><strong>{_esc(pair.a)}</strong>"
                     f"{_code_block(a, _marked(a, shared, task.weights))}</div>"
                     f"<div><strong>{_esc(pair.b)}</strong>"
                     f"{_code_block(b, _marked(b, shared, task.weights))}</div></div>")
    return "\n".join(parts)


def build_page(result: Similarity, top: int = DEFAULT_TOP) -> str:
    """The similarity page (HTML text): the submissions equal to the course's code; per task,
    the top ``top`` pairs, and those of the first :data:`SIDE_BY_SIDE` that score at least
    :data:`SIDE_BY_SIDE_SCORE` side by side."""
    title = f"Similar submissions: {result.assignment}"
    hidden = ("identical failures on the same hidden cases (results/) raise a pair's score"
              if result.hidden_evidence else "no results/ were read: code only")
    body = [
        f"<h1>{_esc(title)}</h1>",
        f"<p>{len(result.students)} submission{'s' * (len(result.students) != 1)} from "
        f"<code>{_esc(result.folder)}</code>. Each task's function is compared as the grader "
        "keeps it (the code shown), with comments, docstrings, dead code, names and constants "
        "abstracted away and statement order ignored; the released stub does not count, and "
        "code that much of the class shares counts less. A score at or above "
        f"{THRESHOLD:g} is flagged (a red row); {_esc(hidden)}. The top pairs scoring "
        f"{SIDE_BY_SIDE_SCORE:g} or more are shown side by side; marked lines are statements "
        "the two share and few others have. A high score is a reason to look, not a verdict.</p>",
    ]
    if result.notes:
        body.append("<ul>" + "".join(f"<li>{_esc(n)}</li>" for n in result.notes) + "</ul>")
    body.append("<h2>Equal to the course's code</h2>")
    body.append("<p>Functions equal to the reference solution or to a function the book shows, "
                "once names, comments, docstrings, dead code and statement order are set aside "
                f"(constants kept; functions of fewer than {FLAG_STATEMENTS} statements are not "
                "compared).</p>")
    if result.flags:
        func = {task.id: task.func_name for task in result.tasks}
        groups: dict[tuple[str, str], list[str]] = {}
        for flag in result.flags:
            groups.setdefault((flag.task, flag.equal_to), []).append(flag.student)
        body.append(_table(["task", "function", "equal, after normalisation, to", "students",
                            "who"], [
            ("", [_esc(task_id), f"<code>{_esc(func[task_id])}</code>", _esc(equal_to),
                  str(len(students)), _esc(", ".join(students))])
            for (task_id, equal_to), students in groups.items()], {3}))
    else:
        body.append("<p>No function is equal to the reference solution or to code the book "
                    "shows.</p>")
    body.extend(_task_section(task, top) for task in result.tasks)
    return html_page(title, _STYLE, body)


def build_csv(result: Similarity, top: int = DEFAULT_TOP) -> str:
    """The CSV: ``task,student_a,student_b,score,evidence``, the top ``top`` pairs of each task,
    then one row per flag (``student_b`` is ``[reference]`` or ``[book]``, score 1)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["task", "student_a", "student_b", "score", "evidence"])
    for task in result.tasks:
        for pair in task.pairs[:top]:
            writer.writerow([task.id, spreadsheet_safe(pair.a), spreadsheet_safe(pair.b),
                             f"{pair.score:.4f}", pair.evidence])
    for flag in result.flags:
        kind = "[reference]" if flag.equal_to.startswith("the reference") else "[book]"
        writer.writerow([flag.task, spreadsheet_safe(flag.student), kind, "1.0000",
                         f"equal after normalisation to {flag.equal_to}"])
    return buf.getvalue()


def write_similarity(
    folder: Path,
    out: Path | None = None,
    csv_out: Path | None = None,
    *,
    top: int = DEFAULT_TOP,
    root: Path | None = None,
) -> tuple[Similarity, Path, Path]:
    """Score a graded folder and write the page (default ``folder/similarity.html``) and the
    CSV (default ``folder/similarity.csv``); returns the result and the two paths.

    Raises:
        GradedError: see :func:`similarity`.
    """
    result = similarity(Path(folder), root=root)
    page = Path(out) if out is not None else Path(folder) / "similarity.html"
    table = Path(csv_out) if csv_out is not None else Path(folder) / "similarity.csv"
    atomic_write(page, build_page(result, top))
    atomic_write(table, build_csv(result, top))
    return result, page, table
