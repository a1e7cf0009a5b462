"""The untrusted half of the grader: the main of an isolated child.

Everything in this module may be tampered with by the student's code (it runs in the same
process), which is why nothing here decides a score: the child only sends back plain outputs,
exception names and tripwire hits, and the trusted process judges them (:mod:`.judging`).

The child isolates itself first (:mod:`.isolation`), loads the submission's kept code, says
so, then runs the cases it was sent one by one inside the forbidden-call tripwire
(:mod:`coursepkg.checks.forbidden`), sending one message per case. A case arrives as its index
and its JSON ``args`` only: hidden cases are made from the instructor's secret in the trusted
process, which the child never sees.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
from dataclasses import asdict

from coursepkg.checks.core import TASKS, Case, exception_name, get_task, student_output
from coursepkg.checks.forbidden import Tripwire
from coursepkg.grading.isolation import enter_isolation


def _load(code: str, namespace: dict, send) -> bool:
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
    """Entry point of the child process (see :func:`coursepkg.grading.sandbox.run_in_child`).

    ``request_json``: {"code": module source, "task": task id,
    "cases": [{"index": i, "args": {...}}, ...]}.
    """

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
        request = json.loads(request_json)
        _register(request)
        isolation = enter_isolation(limits, workdir, hide, uid)
        send({"kind": "isolation", "value": asdict(isolation)})
        task = get_task(request["task"])
        tripwire = Tripwire(task)
        namespace: dict = {"__name__": "__submission__", "__builtins__": __builtins__}
        with open("submission.py", "w") as f:
            f.write(request["code"])
        if not _load(request["code"], namespace, send):
            return
        func = namespace.get(task.func_name)
        if not callable(func):
            send({"kind": "missing"})
            return
        send({"kind": "loaded"})
        alias = tripwire.forbidden_callable(func)
        if alias is not None:
            for case in request["cases"]:
                send({"kind": "case", "case": case["index"], "forbidden": alias})
            return
        for case in request["cases"]:
            message: dict = {"kind": "case", "case": case["index"]}
            try:
                with tripwire:
                    message["plain"] = student_output(task, Case("", 0, case["args"]), func)
            except BaseException as exc:  # noqa: BLE001 - even SystemExit is the student's
                message.pop("plain", None)
                message["exc"] = _memory_or(exc)
                message["msg"] = str(exc)[:300]
            if tripwire.hit is not None:
                message = {"kind": "case", "case": case["index"], "forbidden": tripwire.hit}
            send(message)
    finally:
        try:
            sender.send_bytes(b'{"kind": "done"}')
        finally:
            os._exit(0)  # no atexit handlers, no waiting for the submission's threads


def _register(request: dict) -> None:
    """Import the module of a task that ``coursepkg.checks`` does not register (a test's own
    task), before isolation and before any student code: the request is the parent's."""
    module = request.get("module")
    if request["task"] not in TASKS and module:
        importlib.import_module(module)


def _memory_or(exc: BaseException) -> str:
    """MemoryError, also for torch's allocation failures (a RuntimeError); else the class name."""
    if isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and "allocate" in str(exc).lower()
    ):
        return "MemoryError"
    return exception_name(exc)
