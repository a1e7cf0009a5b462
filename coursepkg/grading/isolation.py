"""The child's half of the isolation: what a grading child does to itself before any student code.

:func:`enter_isolation` is the first call of every child (see :mod:`.worker`). In order:

1. a new session (its own process group, so the parent can kill the whole tree);
2. where the platform allows (root on Linux): new network and mount namespaces: no network; the
   folders the parent names (submissions, output, the course's solutions, the instructor's
   secret and tests files) hidden under empty mounts; a fresh, size-capped tmpfs on ``/tmp``,
   ``/var/tmp``, ``/dev/shm`` and ``/run/lock`` of its own (every folder anyone may write to),
   and System V IPC of its own, all gone with the child: a submission can neither read what
   another left there nor leave anything behind; then it drops to an unprivileged user of its
   own;
3. resource limits: address space, CPU time, file size, number of processes, no core dumps;
4. stdin, stdout and stderr on /dev/null, ``HOME`` and ``TMPDIR`` in its private folders.

Without namespaces (not root) the child's temporary folder is a per-child folder under the
grader's own temporary folder, which the parent removes after the task; :class:`Isolation`
records which of the two was in force (the grader's log says so).

The parent's half (forking, timeouts, killing) is :mod:`.sandbox`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import tempfile
from dataclasses import dataclass, field

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_BIND = 0x1000
MNT_DETACH = 2

#: The folders anyone may write to, of which each child gets a private, empty copy (a file left
#: in any of them would outlive the child: a channel between submissions).
TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")


@dataclass(frozen=True)
class Limits:
    """Per-task limits.

    Attributes:
        timeout: wall-clock seconds for one case of a task (see
            :func:`coursepkg.grading.sandbox.task_deadline` for a task's total).
        memory_mb: address space the child may add on top of the preloaded interpreter.
        file_mb: largest file the child may write.
        nproc: processes the child's user may have (enforced only after dropping to that user).
        tmp_mb: size of each private temporary folder (``/tmp``, ``/var/tmp``, ``/dev/shm``...).
        task_timeout: wall-clock seconds for a whole task, all its cases (None: twice
            ``timeout``; see :func:`coursepkg.grading.sandbox.task_seconds`). The grader sets it
            for a task with a ``time_limit`` (a train task), whose cases each may take that long.
    """

    timeout: float = 20.0
    memory_mb: int = 2048
    file_mb: int = 8
    nproc: int = 64
    tmp_mb: int = 64
    task_timeout: float | None = None


@dataclass
class Isolation:
    """Which isolation was in force in a child (recorded in the grader's log).

    Attributes:
        network: no network (a network namespace of its own).
        filesystem: the submissions, output and instructor's folders hidden.
        user: runs as an unprivileged user of its own.
        limits: the resource limits set (``"memory"``, ``"cpu"``, ...).
        tmp: ``"tmpfs"``: private, size-capped /tmp, /var/tmp, /dev/shm (and /run/lock), gone
            with the child (``"partial tmpfs"`` when only some could be replaced);
            ``"folder"``: no namespaces, so ``TMPDIR`` points to a per-child folder that the
            parent removes, and the machine's shared /tmp stays visible to the child.
    """

    network: bool = False
    filesystem: bool = False
    user: bool = False
    limits: list[str] = field(default_factory=list)
    tmp: str = "folder"


def can_isolate() -> bool:
    """True when children can get their own namespaces and user (root on Linux)."""
    return sys.platform.startswith("linux") and os.geteuid() == 0


def enter_isolation(limits: dict, workdir: str, hide: list[str], uid: int | None) -> Isolation:
    """Called first thing in the child: namespaces, user, limits, stdio, working directory.

    Args:
        limits: :class:`Limits` as a dict.
        workdir: the child's private folder (created by the parent, owned by ``uid``); with
            a private /tmp the child works in ``/tmp/work`` instead.
        hide: folders to cover with an empty tmpfs, files to cover with /dev/null.
        uid: the unprivileged user to become, or None to stay.
    """
    iso = Isolation()
    os.setsid()
    home, tmpdir = workdir, os.path.join(workdir, "tmp")
    if uid is not None and can_isolate():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) == 0:
            iso.network = True
        libc.unshare(CLONE_NEWIPC)  # System V shared memory and queues of its own, too
        if (
            libc.unshare(CLONE_NEWNS) == 0
            and libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
        ):
            present = [path for path in hide if os.path.exists(path)]
            iso.filesystem = sum(_hide(libc, path) for path in present) == len(present)
            for path in _python_paths():
                _expose(libc, path, workdir)
            if _private_temp(libc, uid, int(limits.get("tmp_mb", 64)), iso):
                home, tmpdir = "/tmp/work", "/tmp"
    os.chdir(home)
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
    os.environ["HOME"] = home
    os.environ["TMPDIR"] = tmpdir
    with contextlib.suppress(OSError):
        os.makedirs(tmpdir, exist_ok=True)  # as the child's user, in a folder it owns
    tempfile.tempdir = None  # tempfile caches its folder: let it read TMPDIR again
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big write fails instead of killing
    return iso


def _private_temp(libc, uid: int, size_mb: int, iso: Isolation) -> bool:
    """Mount a fresh, size-capped tmpfs on each of :data:`TEMP_DIRS`; True if /tmp got one.

    The child then works in ``/tmp/work``, inside its new /tmp: the folder the parent made for
    it lies under the grader's own temporary folder, which the new /tmp may cover. A folder the
    interpreter imports from that lies in one of them (a checkout in /tmp) is mounted back.
    """
    present = [p for p in TEMP_DIRS if os.path.isdir(p) and not os.path.islink(p)]
    inside = [
        path
        for path in _python_paths()
        if any(_within(os.path.realpath(path), os.path.realpath(t)) for t in present)
    ]
    handles = {path: os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in inside}
    try:
        options = f"size={size_mb}m,nr_inodes=4096,mode=1777".encode()
        mounted = [
            p for p in present if libc.mount(b"tmpfs", p.encode(), b"tmpfs", 0, options) == 0
        ]
        if "/tmp" not in mounted:
            return False
        for path, fd in handles.items():
            target = os.path.realpath(path)
            os.makedirs(target, mode=0o755, exist_ok=True)
            source = f"/proc/self/fd/{fd}".encode()  # with what was hidden in it still hidden
            libc.mount(source, target.encode(), None, MS_BIND | MS_REC, None)
    finally:
        for fd in handles.values():
            os.close(fd)
    os.mkdir("/tmp/work", 0o700)
    os.chown("/tmp/work", uid, uid)
    iso.tmp = "tmpfs" if mounted == present else "partial tmpfs"
    return True


def _within(path: str, folder: str) -> bool:
    """True when ``path`` lies strictly inside ``folder``."""
    return path.startswith(folder.rstrip("/") + "/")


def _hide(libc, path: str) -> bool:
    """Cover a folder with an empty tmpfs nobody may enter, a file with /dev/null."""
    if os.path.isdir(path):
        return libc.mount(b"tmpfs", path.encode(), b"tmpfs", 0, b"size=16k,mode=000") == 0
    return libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None) == 0


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
    # CPU seconds of the child, all its cases: a case's wall-clock limit, or a task's when set
    cpu = int(max(limits["timeout"], limits.get("task_timeout") or 0)) + 2
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
