"""What a sandbox sees of the host and which uid it runs as."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

from .limits import Limits

# The program's working directory whenever it has a private /tmp (bubblewrap and namespaces).
SANDBOX_CWD = "/tmp/sandbox"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Top-level system directories that are links into /usr on merged-/usr hosts and real directories elsewhere.
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# Sandbox uids: one per concurrent run, in a block picked at random per worker process so that workers in
# separate containers on one host (often all pid 1) do not share uids. Far above any account a system creates.
PRIVATE_UID_BASE = 1 << 30
_UID_BLOCKS = 1 << 22
_SLOTS_PER_BLOCK = 256
_UID_BLOCK = secrets.randbelow(_UID_BLOCKS)
_NOBODY = 65534


def bubblewrap_argv(python: str, env: dict[str, str], limits: Limits, *, as_root: bool) -> list[str]:
    bwrap = shutil.which("bwrap") or "bwrap"
    argv = [bwrap, "--die-with-parent", "--new-session", "--clearenv"]
    argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if as_root:
        # No user namespace: in one, the sandbox's uid would map back to root outside, and the kernel never applies
        # RLIMIT_NPROC to root. The bootstrap keeps only the power to switch to its real, unprivileged uid.
        # CAP_KILL lets the supervisor end the program's processes, which run under that other uid.
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    else:
        argv += ["--unshare-user", "--disable-userns"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    scratch = str(limits.memory_bytes)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", scratch, "--perms", "1777", "--tmpfs", "/tmp"]
    argv += ["--size", scratch, "--perms", "1777", "--tmpfs", "/dev/shm"]
    argv += ["--perms", "1777", "--dir", SANDBOX_CWD, "--chdir", SANDBOX_CWD]
    tree = visible_tree(python)
    for path in tree["binds"]:
        argv += ["--ro-bind", path, path]
    for link, target in tree["links"]:
        argv += ["--symlink", target, link]
    return argv


def visible_tree(python: str) -> dict[str, list[Any]]:
    """What a sandbox with a root of its own sees of the host, read-only: /usr, the system directories (links into
    /usr on merged-/usr hosts), the dynamic linker's cache and the interpreter's own directories."""
    binds = ["/usr", *(["/etc/ld.so.cache"] if os.path.isfile("/etc/ld.so.cache") else [])]
    links = []
    for top in _SYSTEM_DIRS:
        if os.path.islink(top):
            links.append([top, os.readlink(top)])
        elif os.path.isdir(top):
            binds.append(top)
    return {"binds": [*binds, *_interpreter_roots(python)], "links": links}


@functools.lru_cache(maxsize=16)
def _interpreter_roots(python: str) -> tuple[str, ...]:
    """The directories `python` needs beyond /usr: its prefixes (a virtualenv's and its base's) and its own."""
    query = "import sys; print('\\n'.join({sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}))"
    answer = subprocess.run(
        [python, "-I", "-S", "-c", query],
        capture_output=True,
        text=True,
        env={"PATH": SANDBOX_PATH},
        timeout=60,
        check=True,
    )
    candidates = [*answer.stdout.split(), os.path.dirname(os.path.abspath(python))]
    roots: list[str] = []
    for path in sorted({os.path.normpath(path) for path in candidates}, key=len):
        if not any(path == root or path.startswith(root.rstrip("/") + "/") for root in ["/usr", *roots]):
            roots.append(path)
    return tuple(roots)


def base_python() -> str:
    """The interpreter behind this one, outside any virtualenv."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for prefix in (sys.base_prefix, sys.base_exec_prefix):
        for name in (version, "python3"):
            candidate = os.path.join(prefix, "bin", name)
            if os.access(candidate, os.X_OK):
                return candidate
    return sys.executable


@functools.cache
def _private_uids_mapped() -> bool:
    """Whether this (possibly namespaced) host can switch to the private uid range at all."""
    wanted_end = PRIVATE_UID_BASE + _UID_BLOCKS * _SLOTS_PER_BLOCK
    try:
        with open("/proc/self/uid_map") as uid_map:
            lines = uid_map.read().splitlines()
    except OSError:
        return False
    for line in lines:
        inside, _, count = (int(field) for field in line.split())
        if inside <= PRIVATE_UID_BASE and wanted_end <= inside + count:
            return True
    return False


class _UidSlots:
    """Private uids for concurrent sandboxes, handed out round-robin. A killed program's processes die asynchronously
    and count against their uid's process limit until they are gone; a uid comes back only after every other slot
    has been used, long after that."""

    def __init__(self, first_uid: int, count: int) -> None:
        self._first_uid = first_uid
        self._count = count
        self._busy: set[int] = set()
        self._next = 0
        self._changed = threading.Condition()

    def acquire(self) -> int:
        with self._changed:
            self._changed.wait_for(lambda: len(self._busy) < self._count)
            while self._next % self._count in self._busy:
                self._next += 1
            slot = self._next % self._count
            self._next += 1
            self._busy.add(slot)
            return self._first_uid + slot

    def release(self, uid: int) -> None:
        with self._changed:
            self._busy.discard(uid - self._first_uid)
            self._changed.notify()


_uid_slots = _UidSlots(PRIVATE_UID_BASE + _UID_BLOCK * _SLOTS_PER_BLOCK, _SLOTS_PER_BLOCK)


@contextlib.contextmanager
def sandbox_uid() -> Iterator[int | None]:
    """The uid to run one sandbox as: a private one while it runs when the worker is root, else None (its own)."""
    if os.geteuid() != 0:
        yield None
        return
    if not _private_uids_mapped():
        yield _NOBODY  # shared between sandboxes: a user namespace without room for the private range
        return
    uid = _uid_slots.acquire()
    try:
        yield uid
    finally:
        _uid_slots.release(uid)
