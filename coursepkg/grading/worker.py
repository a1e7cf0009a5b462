"""The untrusted half of the grader: what runs inside an isolated child.

Everything in this module may be tampered with by the student's code (it runs in the same
process), which is why nothing here decides a score: the child only sends back plain outputs,
exception names and tripwire hits, and the trusted process judges them.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
import threading
import types
from dataclasses import asdict

from coursepkg.checks.core import Task, exception_name, get_task, student_output
from coursepkg.grading.sandbox import enter_isolation

# Calls that would let a submission switch the tripwire off.
_ALWAYS_FORBIDDEN = ("sys.setprofile", "threading.setprofile", "sys.settrace")
# The checker's own modules: they call the student's function and build its arguments.
_TRUSTED = ("coursepkg.checks", "coursepkg.grading")


def _resolve(dotted: str) -> object | None:
    """The object a dotted name points at (``torch.nn.functional.softmax``), or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


class Tripwire:
    """Notices calls to forbidden code while the student's function runs.

    A profile hook (``sys.setprofile``) sees every Python call and every call of a C function,
    including calls through aliases, ``getattr`` or saved references. A call is a violation when
    the callee is forbidden (a forbidden dotted name is a prefix: ``coursepkg.ngram`` forbids the
    whole module, ``torch.nn.functional.softmax`` one function, a class all its methods) and the
    caller is neither forbidden code itself (calls inside a forbidden library are its own
    business) nor the course's checker (which builds a task's arguments and may use the package).
    The task's reference solution is always forbidden, and so is switching the hook off.
    """

    def __init__(self, task: Task) -> None:
        self.prefixes: list[str] = []
        self.codes: dict[object, str] = {}
        self.builtins: dict[int, str] = {}
        self.hit: str | None = None
        for name in (*task.forbidden, *_ALWAYS_FORBIDDEN):
            # A library that is not loaded yet is not imported here (nltk costs 0.25 s a task):
            # the submission can only reach it by importing it, which the prefix check sees.
            loaded = name.split(".")[0] in sys.modules
            obj = _resolve(name) if loaded else None
            if obj is None or isinstance(obj, types.ModuleType):
                self.prefixes.append(name)
            else:
                self._add(name, obj)
        self._add(f"the course's reference solution of task {task.id}", task.reference)

    def _add(self, name: str, obj: object) -> None:
        if obj is None:
            return
        if isinstance(obj, type):
            for member in vars(obj).values():
                self._add(name, getattr(member, "__func__", member))
            return
        code = getattr(obj, "__code__", None)
        if code is not None:
            self.codes[code] = name
        elif callable(obj):
            self.builtins[id(obj)] = name

    def forbidden_callable(self, obj: object) -> str | None:
        """The forbidden name ``obj`` is (seen through partials, bound methods and wrappers)."""
        for _ in range(20):
            inner = getattr(obj, "func", None) or getattr(obj, "__func__", None)
            inner = inner or getattr(obj, "__wrapped__", None)
            if inner is None or inner is obj:
                break
            obj = inner
        code = getattr(obj, "__code__", None)
        if code is not None and code in self.codes:
            return self.codes[code]
        globals_ = getattr(obj, "__globals__", None)
        module = globals_.get("__name__") if isinstance(globals_, dict) else None
        return (
            self.builtins.get(id(obj))
            or self._module_hit(module)
            or self._module_hit(getattr(obj, "__module__", None))
        )

    def _module_hit(self, module: object) -> str | None:
        if not isinstance(module, str):
            return None
        for prefix in self.prefixes:
            if module == prefix or module.startswith(prefix + "."):
                return prefix
        return None

    def _forbidden_python(self, frame) -> str | None:  # noqa: ANN001
        return self.codes.get(frame.f_code) or self._module_hit(frame.f_globals.get("__name__"))

    def _trusted_caller(self, caller) -> bool:  # noqa: ANN001
        if caller is None:
            return True
        module = caller.f_globals.get("__name__", "")
        if module.startswith(_TRUSTED):
            return True
        return self._forbidden_python(caller) is not None

    def _hook(self, frame, event, arg):  # noqa: ANN001 - the profiler's signature
        if self.hit is not None:
            return
        if event == "call":
            name = self._forbidden_python(frame)
            if name is not None and not self._trusted_caller(frame.f_back):
                self.hit = name
        elif event == "c_call" and frame.f_code is not _EXIT_CODE:
            name = self.builtins.get(id(arg)) or self._module_hit(getattr(arg, "__module__", None))
            if name is not None and not self._trusted_caller(frame):
                self.hit = name

    def __enter__(self) -> Tripwire:
        self.hit = None
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        hook = sys.getprofile()
        sys.setprofile(None)
        threading.setprofile(None)
        if self.hit is None and getattr(hook, "__self__", None) is not self:
            self.hit = "sys.setprofile"


_EXIT_CODE = Tripwire.__exit__.__code__  # the tripwire's own setprofile(None) is no violation


def _load(code: str, namespace: dict, tripwire: Tripwire, send) -> bool:
    """Run the kept statements one by one; False (after reporting) if the code cannot load.

    A constant assignment that fails (``params = (rnn.weight_ih_l0, ...)`` where ``rnn`` came
    from a call the grader dropped) or an import that fails (a plotting library the grader
    lacks) is skipped: a function that needs the name fails on its own cases, the others are
    still graded. A failing definition stops loading.
    """
    try:
        tree = compile(code, "submission.py", "exec", flags=ast.PyCF_ONLY_AST)
        for node in tree.body:
            statement = compile(ast.Module(body=[node], type_ignores=[]), "submission.py", "exec")
            try:
                with tripwire:
                    exec(statement, namespace)  # noqa: S102
            except Exception:
                if isinstance(node, ast.Assign | ast.AnnAssign | ast.Import | ast.ImportFrom):
                    continue
                raise
    except BaseException as exc:  # noqa: BLE001 - anything at all may come out of it
        send({"kind": "load_error", "exc": exception_name(exc), "msg": str(exc)[:300]})
        return False
    return True


def child_main(sender, request_json: str, limits: dict, workdir: str, hide: list, uid) -> None:
    """Entry point of the child process (see :func:`coursepkg.grading.sandbox.run_in_child`)."""

    def send(message: dict) -> None:
        try:
            data = json.dumps(message, allow_nan=True).encode("utf-8")
        except (TypeError, ValueError, RecursionError):
            data = json.dumps(
                {
                    "kind": "case",
                    "case": message.get("case"),
                    "exc": "CheckError",
                    "msg": "the returned value could not be sent back",
                }
            ).encode()
        sender.send_bytes(data)

    try:
        isolation = enter_isolation(limits, workdir, hide, uid)
        send({"kind": "isolation", "value": asdict(isolation)})
        request = json.loads(request_json)
        task = get_task(request["task"])
        tripwire = Tripwire(task)
        namespace: dict = {"__name__": "__submission__", "__builtins__": __builtins__}
        with open("submission.py", "w") as f:
            f.write(request["code"])
        if not _load(request["code"], namespace, tripwire, send):
            return
        func = namespace.get(task.func_name)
        if not callable(func):
            send({"kind": "missing"})
            return
        alias = tripwire.forbidden_callable(func)
        if alias is not None:
            for index in request["cases"]:
                send({"kind": "case", "case": index, "forbidden": alias})
            return
        for index in request["cases"]:
            case = task.cases[index]
            message: dict = {"kind": "case", "case": index}
            try:
                with tripwire:
                    message["plain"] = student_output(task, case, func)
            except BaseException as exc:  # noqa: BLE001 - even SystemExit is the student's
                message.pop("plain", None)
                message["exc"] = _memory_or(exc)
                message["msg"] = str(exc)[:300]
            if tripwire.hit is not None:
                message = {"kind": "case", "case": index, "forbidden": tripwire.hit}
            send(message)
    finally:
        try:
            sender.send_bytes(b'{"kind": "done"}')
        finally:
            os._exit(0)  # no atexit handlers, no waiting for the submission's threads


def _memory_or(exc: BaseException) -> str:
    """MemoryError, also for torch's allocation failures (a RuntimeError); else the class name."""
    if isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and "allocate" in str(exc).lower()
    ):
        return "MemoryError"
    return exception_name(exc)
