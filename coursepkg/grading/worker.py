"""The untrusted half of the grader: the main of an isolated child.

Everything in this module may be tampered with by the student's code (it runs in the same
process), which is why nothing here decides a score: the child only sends back plain outputs,
exception names and tripwire hits, and the trusted process judges them (:mod:`.judging`).

The child isolates itself first (:mod:`.isolation`) and says so. Then, before any line of the
submission runs, it builds every case's arguments (:func:`_build`: the checker's work, at full
speed) and arms the forbidden-call tripwire for the rest of its life
(:meth:`coursepkg.checks.forbidden.Tripwire.seal`: a forbidden call, or an attempt to switch
the tripwire off, ends the child after one message). It loads the submission's kept code once,
says so, and runs its tasks in turn, strictest first: between two groups of tasks that forbid
different things, the worker's main (and nothing else) switches the hook to the next group's,
which forbids no more. One message when a task starts and one per case. A case arrives as its
index and its JSON ``args`` only: hidden cases are made from the instructor's secret in the
trusted process, which the child never sees.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import random
from dataclasses import asdict

import numpy as np
import torch

from coursepkg.checks.core import (
    TASKS,
    Case,
    Task,
    call_student,
    case_arguments,
    exception_name,
    get_task,
)
from coursepkg.checks.forbidden import prepared
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
    """Entry point of the child process (see :func:`coursepkg.grading.sandbox.run_tasks`).

    ``request_json``: {"code": module source, "tasks": [{"task": task id, "module": its
    registering module, "stage": the ids of its group of tasks (those that forbid the same
    things), "cases": [{"index": i, "args": {...}}, ...]}, ...]}; a group's tasks come
    together, and each group forbids no more than the one before it (``grader.task_chains``).
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
        tasks = [get_task(spec["task"]) for spec in request["tasks"]]
        built = [_build(task, spec["cases"]) for task, spec in zip(tasks, request["tasks"],
                                                                     strict=True)]
        # A task's stage: the group of tasks whose tripwire it runs under, strictest first.
        stages = [tuple(spec["stage"]) for spec in request["tasks"]]
        order = list(dict.fromkeys(stages))
        wires = [prepared([get_task(each) for each in stage]) for stage in order]
        # Armed before the submission's first line runs, for good: a hit ends this process.
        verify, advance = wires[0].seal(sender.fileno(), *wires[1:])
        current = 0
        namespace: dict = {"__name__": "__submission__", "__builtins__": __builtins__}
        with open("submission.py", "w") as f:
            f.write(request["code"])
        if not _load(request["code"], namespace, send):
            return
        send({"kind": "loaded"})
        for task, stage, spec, cases in zip(tasks, stages, request["tasks"], built,
                                             strict=True):
            if order.index(stage) != current:  # the next group's tripwire, which forbids less
                current = order.index(stage)
                advance(current)
            send({"kind": "task", "task": task.id})
            func = namespace.get(task.func_name)
            if not callable(func):
                send({"kind": "missing"})
                continue
            call = _called_from_submission(func)
            for case, arguments in zip(spec["cases"], cases, strict=True):
                message: dict = {"kind": "case", "case": case["index"]}
                try:
                    if isinstance(arguments, BaseException):
                        raise arguments
                    args, kept, generators = arguments
                    _set_generators(generators)
                    message["plain"] = call_student(task, call, args, kept)
                except BaseException as exc:  # noqa: BLE001 - even SystemExit is the student's
                    message.pop("plain", None)
                    message["exc"] = _memory_or(exc)
                    message["msg"] = str(exc)[:300]
                verify()
                send(message)
    finally:
        try:
            sender.send_bytes(b'{"kind": "done"}')
        finally:
            os._exit(0)  # no atexit handlers, no waiting for the submission's threads


def _build(task: Task, cases: list[dict]) -> list:
    """Each case's arguments, their private copy and the random generators' state right after
    building them (or the :class:`~coursepkg.checks.core.CheckerBug` raised), made before the
    tripwire is armed: the checker's work then runs at full speed (under the tripwire's hook it
    took about six times as long, and most of a formula task's time), and no student code runs
    during it. Each case starts from the generators' state its building left, as when built just
    before it."""
    built: list = []
    for case in cases:
        try:
            args, kept = case_arguments(task, Case("", 0, case["args"]))
            built.append((args, kept, _generators()))
        except Exception as exc:  # noqa: BLE001 - reported on the case
            built.append(exc)
    return built


def _generators() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _set_generators(state: tuple) -> None:
    torch.set_rng_state(state[0])
    random.setstate(state[1])
    np.random.set_state(state[2])


def _called_from_submission(func):  # noqa: ANN001, ANN202
    """``func`` behind a caller of the submission's own: the tripwire trusts calls made by the
    checker's code, so a graded function that *is* forbidden code (``count_ngrams =
    the_reference``, a partial of it, a forbidden builtin) must be called from code that is
    not the checker's to be seen. Its signature stays ``func``'s (``__wrapped__``), so that
    messages name the function's own arguments."""
    namespace = {"__name__": "__submission__", "func": func}
    exec(_CALL, namespace)  # noqa: S102 - our own two lines
    call = namespace["call"]
    call.__wrapped__ = func
    return call


_CALL = compile("def call(*args):\n    return func(*args)\n", "submission.py", "exec")


def _register(request: dict) -> None:
    """Import the module of each task that ``coursepkg.checks`` does not register (a test's
    own task), before isolation and before any student code: the request is the parent's."""
    for spec in request["tasks"]:
        module = spec.get("module")
        if spec["task"] not in TASKS and module:
            importlib.import_module(module)


def _memory_or(exc: BaseException) -> str:
    """MemoryError, also for torch's allocation failures (a RuntimeError); else the class name."""
    if isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and "allocate" in str(exc).lower()
    ):
        return "MemoryError"
    return exception_name(exc)
