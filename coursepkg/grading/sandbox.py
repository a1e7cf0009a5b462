"""Running one task of a submission in isolated, limited children: the parent's side.

The trusted grader process never runs student code. For each (submission, task) it asks a
pre-started server process (multiprocessing's forkserver, with torch and coursepkg already
imported, so a child starts in milliseconds) to fork a fresh child, which isolates itself
(:mod:`.isolation`) and runs the cases (:mod:`.worker`, passed in as the child's entry point:
this module does not know what the child does). The child sends plain JSON bytes back, never
pickle.

Time is isolated per case. Each case may take ``Limits.timeout`` seconds (the clock restarts
each time the child reports: started, submission loaded, each case answered); a task as a whole
at most :func:`task_seconds` (twice that). A case that runs out of time, or whose child dies, fails
alone: the child's whole process group (and, when it dropped privileges, every process of its
user) is killed and the task's remaining cases run in a fresh child. Once the task's time is
spent, its remaining cases are not run and fail as timed out, so a task whose every case loops
forever costs at most twice the timeout, not one timeout per case.

The comparison with the expected values happens back in the trusted process
(:mod:`.judging`).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from coursepkg.course import CHAPTERS
from coursepkg.grading.isolation import Limits, can_isolate

__all__ = ["Limits", "RawOutcome", "can_isolate", "run_cases", "run_in_child", "task_seconds"]

# Imported once by the fork server, so that no child pays for them: torch (first, on one
# thread), the checks, and the package modules the notebooks import (coursepkg.data alone costs
# a child 0.2 s).
_PRELOAD = [
    "coursepkg.grading.preload",
    "numpy",
    "coursepkg.checks",
    "coursepkg.data",
    *(f"coursepkg.{module}" for chapter in CHAPTERS for module in chapter.modules),
]
_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
NOBODY = 65534


def task_seconds(limits: Limits) -> float:
    """The most wall-clock time one task may take, all its cases and children together:
    ``limits.task_timeout`` when set, else twice the per-case timeout."""
    return limits.task_timeout if limits.task_timeout is not None else 2 * limits.timeout


@dataclass
class RawOutcome:
    """What came back from one task's child (or children).

    Attributes:
        messages: one dict per case that has an outcome: what the child sent,
            {"case": i, "plain": value} or {"case": i, "exc": name, "msg": text} or
            {"case": i, "forbidden": name}; or, for a case during which the child ran out of
            time or died, {"case": i, "ended": "timeout" | "crashed", "detail": text}. An
            answered case also has "seconds": the wall-clock time from the child's previous
            message (loaded, or the previous case) to this one, measured here, in the parent.
        load_error: set when the submission's code could not even be loaded ("exc" style dict).
        missing: True when the task's function is not defined.
        loaded: True once the child said the submission's code is loaded.
        ended: "ok", "timeout", "memory" or "crashed" (how the last child ended).
        detail: a short human explanation of a bad ending (signal name, ...).
        isolation: the isolation the (first) child reported.
        children: how many children ran the task.
        deadline: when the task's time runs out (``time.monotonic()``), counted from the start
            of its first child.
    """

    messages: list[dict] = field(default_factory=list)
    load_error: dict | None = None
    missing: bool = False
    loaded: bool = False
    ended: str = "ok"
    detail: str = ""
    isolation: dict = field(default_factory=dict)
    children: int = 0
    deadline: float | None = None


_context = None
# AF_UNIX socket paths have at most 107 bytes; multiprocessing puts the fork server's socket at
# TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX (32 bytes after TMPDIR).
_SOCKET_PATH_MAX = 107
_SOCKET_NAME_LEN = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def process_folder() -> str:
    """This process's own temporary folder, removed when it exits: multiprocessing's ``pymp-*``.

    The fork server's socket lives there, and AF_UNIX socket paths have at most 107 bytes: with
    a long ``TMPDIR`` (a CI job's or pytest's folders) the server could not start ("AF_UNIX
    path too long"). When the folder's path would be too long, it is made in the first of /tmp,
    /var/tmp and /dev/shm that is writable instead (and removed at exit all the same).

    torch's compiler cache (``TORCHINDUCTOR_CACHE_DIR``, which the first optimiser step of the
    grader and of its fork server creates, by default ``TMPDIR/torchinductor_<user>``) goes there
    too, unless the user chose one: a grading leaves no folder behind.
    """
    from multiprocessing import process, util

    config = process.current_process()._config
    if config.get("tempdir") is None:
        base = tempfile.gettempdir()
        if len(os.fsencode(base)) + _SOCKET_NAME_LEN >= _SOCKET_PATH_MAX - 1:
            short = ("/tmp", "/var/tmp", "/dev/shm")
            base = next((b for b in short if os.access(b, os.W_OK | os.X_OK)), base)
        folder = tempfile.mkdtemp(prefix="pymp-", dir=base)
        util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)
        config["tempdir"] = folder
    folder = util.get_temp_dir()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(folder, "torchinductor"))
    return folder


def _get_context(entry_module: str):
    """The forkserver context, started once per grader process with the heavy imports done."""
    global _context
    if _context is None:
        process_folder()
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(
            [*_PRELOAD, entry_module, "coursepkg.grading.warm", "coursepkg.grading.frozen"]
        )
        _context = ctx
    return _context


_start_lock = threading.Lock()


@contextlib.contextmanager
def _bare_main():
    """Start a child without multiprocessing re-running the caller's main script in it.

    multiprocessing prepares each forkserver child by importing the parent's ``__main__`` file
    again (a script that imports nbformat costs 1.7 s a task that way, and its top-level code
    would run as the child's user). The worker needs nothing from ``__main__``, so an empty
    module stands in for it while the child (and the server, on first use) is started.
    """
    with _start_lock:
        real = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = real


def run_cases(
    entry: Callable, request: dict, limits: Limits, workdir: str, hide: list[str], uid: int | None
) -> RawOutcome:
    """Run every case of one task, in as many fresh children as time-outs and crashes need.

    Args:
        entry: the child's main, ``entry(sender, request_json, limits, workdir, hide, uid)``
            (:func:`coursepkg.grading.worker.child_main`).
        request: {"code": module source, "task": task id, "cases": [{"index": i, "args": {...}},
            ...]}.
        limits: the resource limits (``timeout`` is per case; see :func:`task_seconds`).
        workdir: the child's private working directory (must exist, owned by ``uid``).
        hide: folders and files to hide from the child (covered by an empty mount).
        uid: the unprivileged user to become, or None to stay (no isolation possible).

    Returns:
        The raw outcome of all cases; the caller judges it.
    """
    total = RawOutcome()
    deadline = None  # the task's clock starts with its first child (not with the fork server)
    remaining = list(request["cases"])
    while remaining:
        outcome = run_in_child(
            entry, {**request, "cases": remaining}, limits, workdir, hide, uid, deadline=deadline
        )
        deadline = total.deadline = outcome.deadline
        total.children += 1
        total.isolation = total.isolation or outcome.isolation
        total.messages.extend(outcome.messages)
        total.load_error, total.missing = outcome.load_error, outcome.missing
        total.loaded, total.ended, total.detail = outcome.loaded, outcome.ended, outcome.detail
        if not outcome.loaded or outcome.ended == "ok":
            break  # nothing ran (the failure is the whole submission's), or all went well
        answered = {m["case"] for m in outcome.messages}
        left = [case for case in remaining if case["index"] not in answered]
        if not left:
            break
        # The first unanswered case is the one the child was running: it fails alone.
        total.messages.append(_ended(left[0]["index"], outcome.ended, outcome.detail))
        remaining = left[1:]
        if remaining and (deadline is None or time.monotonic() >= deadline - 0.05):
            why = f"not run: the task's earlier cases used all its {task_seconds(limits):g} s"
            total.messages.extend(_ended(case["index"], "timeout", why) for case in remaining)
            break
    return total


def _ended(index: int, ended: str, detail: str) -> dict:
    return {"kind": "case", "case": index, "ended": ended, "detail": detail}


def run_in_child(
    entry: Callable,
    request: dict,
    limits: Limits,
    workdir: str,
    hide: list[str],
    uid: int | None,
    *,
    deadline: float | None = None,
) -> RawOutcome:
    """Run cases of one task in one fresh child and collect what it sends back.

    The child has ``limits.timeout`` seconds for each step: to start and isolate itself, to
    load the submission, then to answer each case; and never beyond ``deadline`` (a
    ``time.monotonic()`` value; when None, :func:`task_seconds` from the child's start, which
    the outcome's ``deadline`` gives back). When time is up or the child is gone, it is killed
    with every process it started. Arguments as in :func:`run_cases`.
    """
    ctx = _get_context(entry.__module__)
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=entry,
        args=(sender, json.dumps(request), asdict(limits), workdir, list(hide), uid),
        daemon=True,
    )
    with _bare_main():
        process.start()  # on first use, this also starts the fork server (seconds)
    sender.close()
    outcome = RawOutcome()
    said_done = False
    last = deadline if deadline is not None else time.monotonic() + task_seconds(limits)
    outcome.deadline = last
    step = time.monotonic()
    window = min(step + limits.timeout, last)
    try:
        while True:
            remaining = window - time.monotonic()
            if remaining <= 0:
                outcome.ended = "timeout"
                outcome.detail = f"no answer within {limits.timeout:g} s"
                break
            if not receiver.poll(min(remaining, 0.5)):
                if not process.is_alive() and not receiver.poll(0):
                    break
                continue
            try:
                raw = receiver.recv_bytes(_MAX_MESSAGE_BYTES)
            except (EOFError, OSError):
                break  # the child is gone (or sent more than we accept)
            kind = _take(outcome, raw, time.monotonic() - step)
            if kind == "done":
                said_done = True
                break
            if kind in ("isolation", "loaded", "case"):  # the clock restarts for the next step
                step = time.monotonic()
                window = min(step + limits.timeout, last)
    finally:
        _kill_tree(process, uid)
        receiver.close()
    # A child that said it was done ends itself at once, but our SIGKILL may come first: then
    # its exit status tells nothing about the submission.
    if outcome.ended == "ok" and not said_done:
        outcome.ended, outcome.detail = _classify_exit(process.exitcode)
        if outcome.ended == "ok":  # gone without a word: the submission ended its process
            outcome.ended = "crashed"
            outcome.detail = "it ended before returning a result: os._exit()?"
    return outcome


def _take(outcome: RawOutcome, raw: bytes, seconds: float) -> str | None:
    """Record one message; returns its kind ("done" when the child said it is done).
    ``seconds``: the time since the child's previous message, recorded with a case's answer."""
    try:
        message = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None  # garbage: ignore it, the case stays unanswered
    if not isinstance(message, dict):
        return None
    kind = message.get("kind")
    if kind == "isolation" and isinstance(message.get("value"), dict):
        outcome.isolation = message["value"]
    elif kind == "load_error":
        outcome.load_error = {"exc": str(message.get("exc")), "msg": str(message.get("msg"))}
    elif kind == "missing":
        outcome.missing = True
    elif kind == "loaded":
        outcome.loaded = True
    elif kind == "case" and isinstance(message.get("case"), int) and "ended" not in message:
        message["seconds"] = round(seconds, 3)  # the parent's clock, whatever the child said
        outcome.messages.append(message)
    elif kind != "done":
        return None
    return kind


def _classify_exit(exitcode: int | None) -> tuple[str, str]:
    if exitcode in (0, None):
        return "ok", ""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if -exitcode == signal.SIGXCPU:
            return "timeout", "CPU time limit reached"
        return "crashed", f"the process was killed by {name}"
    return "crashed", f"the process exited with code {exitcode}"


def _kill_tree(process, uid: int | None) -> None:
    """Kill the child, its process group and, when it runs as its own user, every process of it."""
    pid = process.pid
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        process.kill()
    process.join(5)
    if uid is not None and uid != os.geteuid():
        _kill_user(uid)


def _runs_as(uid: int) -> bool:
    """True when a live process has ``uid`` as its real or effective user (or when unknown).

    Reads ``/proc/<pid>/status``: the owner of ``/proc/<pid>`` itself is root for a process that
    changed its user (it is no longer dumpable), so it cannot tell. Zombies do not count: they
    run nothing, and they stay until their new parent reaps them.
    """
    try:
        entries = [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return True
    for pid in entries:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"State:") and line.split()[1] in (b"Z", b"X"):
                        break
                    if line.startswith(b"Uid:"):
                        if uid in map(int, line.split()[1:3]):
                            return True
                        break
        except (OSError, ValueError, IndexError):
            continue  # the process ended meanwhile
    return False


def _kill_user(uid: int) -> None:
    """kill(-1, SIGKILL) as ``uid``: ends every process of that user (escaped fork bombs).

    Forking this (large) process costs about 20 ms, so it is done only while a process of that
    user is left: after a well-behaved child, which leaves none, the check is all it costs.
    """
    for _ in range(3):
        if not _runs_as(uid):
            return
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in a short-lived child
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
