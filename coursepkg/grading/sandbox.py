"""Running a submission's function in an isolated, limited process.

The trusted grader process never runs student code. For each (submission, task) it asks a
pre-started server process (multiprocessing's forkserver, with torch and coursepkg already
imported, so a child starts in milliseconds) to fork a fresh child. The child:

1. starts a new session (its own process group, so the whole tree can be killed);
2. where the platform allows (running as root on Linux): enters new network and mount namespaces
   (no network; the submissions folder, the output folder and the course's solutions hidden
   under empty tmpfs mounts) and drops to an unprivileged user;
3. sets resource limits: address space, CPU time, file size, number of processes, no core dumps;
4. reads nothing from stdin and sends stdout/stderr to /dev/null, in a private working directory;
5. loads the extracted code (definitions only, see :mod:`.submission`), then runs the task's cases
   one by one, sending each case's plain output back as JSON bytes (never pickle).

The parent enforces a wall-clock timeout per task and kills the child's whole process group (and,
when it dropped privileges, every process of the child's user) when it expires. The comparison
with the expected values happens back in the trusted process
(:func:`coursepkg.checks.core.grade_output`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import threading
import time
import types
from dataclasses import asdict, dataclass, field

_PRELOAD = ["coursepkg.grading.preload", "numpy", "coursepkg.checks", "coursepkg.grading.worker"]
_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
NOBODY = 65534

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_BIND = 0x1000
MNT_DETACH = 2


@dataclass(frozen=True)
class Limits:
    """Per-task limits.

    Attributes:
        timeout: wall-clock seconds for one task (all its cases).
        memory_mb: address space the child may add on top of the preloaded interpreter.
        file_mb: largest file the child may write.
        nproc: processes the child's user may have (enforced only after dropping to that user).
    """

    timeout: float = 20.0
    memory_mb: int = 2048
    file_mb: int = 8
    nproc: int = 64


@dataclass
class Isolation:
    """Which isolation was in force in a child (recorded in the grader's log)."""

    network: bool = False
    filesystem: bool = False
    user: bool = False
    limits: list[str] = field(default_factory=list)


@dataclass
class RawOutcome:
    """What came back from one task's child.

    Attributes:
        messages: one dict per case the child finished: {"case": i, "plain": value} or
            {"case": i, "exc": name, "msg": text} or {"case": i, "forbidden": name}.
        load_error: set when the submission's code could not even be loaded ("exc" style dict).
        missing: True when the task's function is not defined.
        ended: "ok", "timeout", "memory" or "crashed" (how the child ended).
        detail: a short human explanation of a bad ending (signal name, ...).
        isolation: the isolation the child reported.
    """

    messages: list[dict] = field(default_factory=list)
    load_error: dict | None = None
    missing: bool = False
    ended: str = "ok"
    detail: str = ""
    isolation: dict = field(default_factory=dict)


_context = None


def _get_context():
    """The forkserver context, started once per grader process with the heavy imports done."""
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
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


def can_isolate() -> bool:
    """True when children can get their own namespaces and user (root on Linux)."""
    return sys.platform.startswith("linux") and os.geteuid() == 0


def run_in_child(
    request: dict, limits: Limits, workdir: str, hide: list[str], uid: int | None
) -> RawOutcome:
    """Run one task of one submission in a fresh child and collect what it sends back.

    Args:
        request: {"code": module source, "task": task id, "cases": [case indices]}.
        limits: the resource limits.
        workdir: the child's private working directory (must exist, owned by ``uid``).
        hide: directories to hide from the child (mounted over with an empty tmpfs).
        uid: the unprivileged user to become, or None to stay (no isolation possible).

    Returns:
        The raw outcome; the caller turns it into case results.
    """
    from coursepkg.grading import worker

    ctx = _get_context()
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=worker.child_main,
        args=(sender, json.dumps(request), asdict(limits), workdir, list(hide), uid),
        daemon=True,
    )
    with _bare_main():
        process.start()
    sender.close()
    outcome = RawOutcome()
    said_done = False
    deadline = time.monotonic() + limits.timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                outcome.ended, outcome.detail = "timeout", f"no answer within {limits.timeout:g} s"
                break
            if not receiver.poll(min(remaining, 0.5)):
                if not process.is_alive() and not receiver.poll(0):
                    break
                continue
            try:
                raw = receiver.recv_bytes(_MAX_MESSAGE_BYTES)
            except (EOFError, OSError):
                break  # the child is gone (or sent more than we accept)
            if not _take(outcome, raw):
                said_done = True
                break
    finally:
        _kill_tree(process, uid)
        receiver.close()
    # A child that said it was done ends itself at once, but our SIGKILL may come first: then
    # its exit status tells nothing about the submission.
    if outcome.ended == "ok" and not said_done:
        outcome.ended, outcome.detail = _classify_exit(process.exitcode)
    return outcome


def _take(outcome: RawOutcome, raw: bytes) -> bool:
    """Record one message; False when the child said it is done."""
    try:
        message = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return True  # garbage: ignore it, the case stays unanswered
    if not isinstance(message, dict):
        return True
    kind = message.get("kind")
    if kind == "isolation" and isinstance(message.get("value"), dict):
        outcome.isolation = message["value"]
    elif kind == "load_error":
        outcome.load_error = {"exc": str(message.get("exc")), "msg": str(message.get("msg"))}
    elif kind == "missing":
        outcome.missing = True
    elif kind == "case" and isinstance(message.get("case"), int):
        outcome.messages.append(message)
    elif kind == "done":
        return False
    return True


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


# ----------------------------------------------------------------------------- the child's half


def enter_isolation(limits: dict, workdir: str, hide: list[str], uid: int | None) -> Isolation:
    """Called first thing in the child: namespaces, user, limits, stdio, working directory."""
    iso = Isolation()
    os.setsid()
    if uid is not None and can_isolate():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) == 0:
            iso.network = True
        if (
            libc.unshare(CLONE_NEWNS) == 0
            and libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
        ):
            hidden = 0
            for path in hide:
                if (
                    os.path.isdir(path)
                    and libc.mount(b"tmpfs", path.encode(), b"tmpfs", 0, b"size=16k,mode=000") == 0
                ):
                    hidden += 1
            iso.filesystem = hidden == len([p for p in hide if os.path.isdir(p)])
            for path in _python_paths():
                _expose(libc, path, workdir)
    os.chdir(workdir)
    _set_limits(limits, iso)
    # Drop to the unprivileged user only if it can still import Python (else stay, and say so).
    if uid is not None and can_isolate() and all(map(_open_to_others, _python_paths())):
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        except OSError:  # e.g. a container that maps few user ids: stay, and say so
            pass
        iso.user = os.getuid() == uid
        if iso.user:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))
                iso.limits.append("nproc")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.environ["MPLBACKEND"] = "Agg"
    os.environ["HOME"] = workdir
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big write fails instead of killing
    return iso


def _python_paths() -> list[str]:
    """The folders the interpreter imports from (they must stay reachable for the child)."""
    paths = dict.fromkeys([sys.base_prefix, sys.prefix, *sys.path])
    return [path for path in paths if path and os.path.isdir(path)]


def _open_to_others(path: str) -> bool:
    """True when a user with no special rights can reach ``path`` (every folder on the way)."""
    current = "/"
    for name in ["", *os.path.realpath(path).split(os.sep)[1:]]:
        current = os.path.join(current, name)
        if not os.stat(current).st_mode & 0o001:
            return False
    return True


def _expose(libc, path: str, workdir: str) -> None:
    """Make ``path`` reachable by other users in this mount namespace.

    When an ancestor is closed to others (``/root`` with mode 700 holding the interpreter), an
    unprivileged child could not import the standard library. The ancestor is covered with an
    empty tmpfs that others may traverse, and only the one entry on the way to ``path`` is
    bind-mounted back: the rest of the closed folder stays hidden.
    """
    parts = os.path.realpath(path).split(os.sep)[1:]
    current = "/"
    for name in parts:
        if not os.stat(current).st_mode & 0o001:
            inner = os.path.join(current, name)
            stage = tempfile.mkdtemp(dir=workdir)
            if libc.mount(inner.encode(), stage.encode(), None, MS_BIND | MS_REC, None) != 0:
                return
            if libc.mount(b"tmpfs", current.encode(), b"tmpfs", 0, b"size=16k,mode=711") != 0:
                return
            os.mkdir(inner)  # every entry on the way to a folder is a folder
            libc.mount(stage.encode(), inner.encode(), None, MS_BIND | MS_REC, None)
            libc.umount2(stage.encode(), MNT_DETACH)
            os.rmdir(stage)
            _expose(libc, path, workdir)  # a deeper folder may be closed too
            return
        current = os.path.join(current, name)


def _vm_size_bytes() -> int:
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _set_limits(limits: dict, iso: Isolation) -> None:
    budget = int(limits["memory_mb"]) * 1024 * 1024
    cpu = int(limits["timeout"]) + 2
    wanted = [
        ("memory", resource.RLIMIT_AS, _vm_size_bytes() + budget),
        ("cpu", resource.RLIMIT_CPU, cpu),
        ("file size", resource.RLIMIT_FSIZE, int(limits["file_mb"]) * 1024 * 1024),
        ("core", resource.RLIMIT_CORE, 0),
    ]
    for name, which, value in wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (value, value))
            iso.limits.append(name)
