"""Run model-written Python and its tests where it cannot reach the worker.

A reward function calls ``run(code, tests)``. The code runs, then the tests run after it in the same program, in a
fresh interpreter (the worker's base interpreter with ``-I -S``: no site-packages, no ``PYTHON*`` variables) that
cannot see the worker's environment, files or network, under limits on time, memory, processes, file size and
output. ``passed`` is true only when the program ran its tests to the end and exited 0 in time, within its limits.

Two isolations; ``isolation()`` says which one this host gets (``ROUNDHOUSE_SANDBOX`` can force either):

``bubblewrap``
    ``bwrap`` puts the program in its own mount, pid, network, IPC and UTS namespaces. It sees read-only binds of
    ``/usr``, the ``/lib*`` and ``/bin`` links, ``/etc/ld.so.cache`` and the interpreter's own prefix (say
    ``/root/.pyenv/versions/3.11.7``; not the home directory around it), a fresh ``/proc`` and ``/dev``, and
    size-capped tmpfs at ``/tmp`` and ``/dev/shm``; its working directory is ``/tmp/sandbox`` on that tmpfs. There
    is no network interface but loopback. Killing bwrap takes the whole pid namespace down with it.

``rlimits``
    The fallback when bwrap is missing or cannot create namespaces: a fresh process in its own session, an empty
    environment and a fresh temporary working directory. When the worker is root it also gets its own network
    and mount namespace (no network; its own tmpfs ``/tmp``, ``/var/tmp`` and ``/dev/shm``) if the host allows
    ``unshare``, and nothing of the sort if it does not: then the program can use the network and read whatever
    the host leaves world-readable.

In both, a worker running as root runs each program as a uid of its own from a range far above real accounts,
which is what makes RLIMIT_NPROC bind (the kernel never applies it to root, nor to a uid that maps back to root
from a user namespace), keeps concurrent sandboxes out of each other's processes and files, and lets the fallback
kill every process the program left behind. A worker that is not root runs programs as itself: under bubblewrap
a user namespace keeps the process count per sandbox; in the fallback the count includes the worker's own
processes, and the program can read what the worker can, including ``/proc/<worker>/environ``.

Limits are per process (RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE), so a program may hold up to about
``max_processes * memory_mb`` at once, and in the fallback without namespaces it may fill the disk under its
working directory with many files until the timeout. Closing those needs cgroups, which this module does not use.

The program's completion is reported by the bootstrap on a pipe with a per-run nonce, so a program that exits 0
before its tests run (``sys.exit(0)``, ``os._exit(0)``) does not pass. Code that deliberately subverts its tests
from inside the same interpreter (an object whose ``__eq__`` is always true) is beyond any sandbox's reach.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SandboxResult", "SandboxUnavailableError", "isolation", "run"]

BUBBLEWRAP = "bubblewrap"
RLIMITS = "rlimits"

# The program's working directory whenever it has a private /tmp (always under bubblewrap).
_SANDBOX_CWD = "/tmp/sandbox"
_PATH = "/usr/local/bin:/usr/bin:/bin"
# Top-level system directories that are links into /usr on merged-/usr hosts and real directories elsewhere.
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# Sandbox uids: one per concurrent run, in a block picked at random per worker process so that workers in
# separate containers on one host (often all pid 1) do not share uids. Far above any account a system creates.
_PRIVATE_UID_BASE = 1 << 30
_UID_BLOCKS = 1 << 22
_SLOTS_PER_BLOCK = 256
_UID_BLOCK = secrets.randbelow(_UID_BLOCKS)
_NOBODY = 65534

# After the program exits, descendants still holding its output pipes get this long before they are killed.
_DRAIN_SECONDS = 0.5
# How often the supervisor looks at the clock and the process while no output arrives.
_POLL_SECONDS = 0.05
_EXIT_POLL_SECONDS = 0.002
_READ_BYTES = 1 << 16


class SandboxUnavailableError(RuntimeError):
    """The isolation ROUNDHOUSE_SANDBOX asks for cannot run on this host."""


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # exited 0 after running its tests to the end, not timed out, output within the limit
    exit_code: int | None  # None when run() killed it (timeout, output limit); 128+N when signal N ended it
    stdout: str  # truncated to the output limit (stdout and stderr share it)
    stderr: str
    timed_out: bool
    output_truncated: bool
    isolation: str  # "bubblewrap" or "rlimits"
    seconds: float


@dataclass(frozen=True)
class _Limits:
    timeout: float
    memory_mb: int
    max_output_bytes: int
    max_processes: int

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb << 20


# Small enough to start anywhere; one process so the probe can see that forking is refused.
_PROBE_LIMITS = _Limits(timeout=20.0, memory_mb=256, max_output_bytes=1 << 16, max_processes=1)
_FORK_PROBE = """
import os
try:
    child = os.fork()
except BlockingIOError:
    pass
else:
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    raise SystemExit("the process limit did not stop a fork")
"""


def isolation() -> str:
    """Which isolation run() uses on this host: "bubblewrap" when bwrap works and holds its limits, else "rlimits".

    ROUNDHOUSE_SANDBOX=rlimits forces the fallback; ROUNDHOUSE_SANDBOX=bubblewrap insists on bwrap and raises
    SandboxUnavailableError when it cannot be used. The probe behind it runs once per process.
    """
    requested = os.environ.get("ROUNDHOUSE_SANDBOX", "").strip().lower()
    if requested == RLIMITS:
        return RLIMITS
    if requested not in ("", BUBBLEWRAP):
        raise ValueError(f"ROUNDHOUSE_SANDBOX must be {BUBBLEWRAP!r} or {RLIMITS!r}, not {requested!r}")
    problem = _bubblewrap_problem()
    if problem is None:
        return BUBBLEWRAP
    if requested == BUBBLEWRAP:
        raise SandboxUnavailableError(f"ROUNDHOUSE_SANDBOX=bubblewrap, but {problem}")
    return RLIMITS


def run(
    code: str,
    tests: str = "",
    *,
    timeout: float = 10.0,
    memory_mb: int = 512,
    max_output_bytes: int = 1_000_000,
    max_processes: int = 32,
    python: str | None = None,
) -> SandboxResult:
    """Run untrusted `code`, then `tests` (Python source, usually assertions) in the same program, sandboxed.

    timeout is wall-clock seconds for the whole run; memory_mb caps each process's address space (and each file
    and each scratch tmpfs); max_output_bytes caps stdout and stderr together, past which the program is killed;
    max_processes caps the processes and threads it may have at once, itself included. `python` picks another
    interpreter; by default the worker's base interpreter (never a virtualenv's, whose packages would show).
    """
    if timeout <= 0 or memory_mb <= 0 or max_output_bytes < 0 or max_processes < 1:
        raise ValueError("timeout and memory_mb must be positive, max_output_bytes >= 0, max_processes >= 1")
    limits = _Limits(timeout, memory_mb, max_output_bytes, max_processes)
    mode = isolation()
    private_mounts = mode == RLIMITS and _fallback_has_namespaces()
    interpreter = (shutil.which(python) or python) if python else _base_python()
    return _execute(code, tests, limits, mode, interpreter, private_mounts=private_mounts)


# Runs first in the sandboxed interpreter (started with -I -S, so nothing of the program's runs before it). It reads
# the job from a descriptor, applies the limits, leaves root, then runs the code and the tests and reports that it
# got to the end. Kept free of the worker's imports: it runs in a bare interpreter.
_BOOTSTRAP = r"""
import ctypes, json, linecache, os, resource, sys, traceback, types

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
PR_SET_NO_NEW_PRIVS = 38
libc = ctypes.CDLL(None, use_errno=True)


def check(result, action):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{action}: {os.strerror(errno)}")


def limit(kind, value):
    hard = resource.getrlimit(kind)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


def make_private_mounts(job):
    # The fallback as root: no network, and scratch space of its own instead of the host's /tmp.
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare")
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    options = f"size={job['scratch_bytes']},mode=1777".encode()
    for scratch in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(scratch):
            check(libc.mount(b"tmpfs", scratch.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), "mount " + scratch)
    os.mkdir(job["cwd"], 0o700)
    if job["uid"] is not None:
        os.chown(job["cwd"], job["uid"], job["uid"])
    os.chdir(job["cwd"])


def keep_interpreter_reachable(prefix_fds):
    # Once the uid changes (or /tmp is replaced) the interpreter's own directories may be out of reach by path,
    # e.g. under a 0700 /root. Descriptors opened before still reach them through /proc/self/fd.
    def reachable(path):
        if os.access(path, os.R_OK | os.X_OK):
            return path
        for prefix, fd in prefix_fds:
            if path == prefix or path.startswith(prefix + "/"):
                return f"/proc/self/fd/{fd}{path[len(prefix):]}"
        return path

    sys.path[:] = [reachable(path) for path in sys.path]
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            search[:] = [reachable(path) for path in search]
    sys.path_importer_cache.clear()


def run_source(namespace, source, filename):
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def main():
    job_fd, status_fd = int(sys.argv[1]), int(sys.argv[2])
    os.set_inheritable(status_fd, False)
    with open(job_fd, "rb") as job_file:
        job = json.loads(job_file.read())
    prefixes = sorted({sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}, key=len, reverse=True)
    prefix_fds = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in prefixes if os.path.isdir(path)]
    if job["private_mounts"]:
        make_private_mounts(job)
    limit(resource.RLIMIT_CORE, 0)
    limit(resource.RLIMIT_CPU, job["cpu_seconds"])
    limit(resource.RLIMIT_AS, job["memory_bytes"])
    limit(resource.RLIMIT_FSIZE, job["file_bytes"])
    limit(resource.RLIMIT_NPROC, job["max_processes"])
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    if job["uid"] is not None:
        os.setgroups([])
        os.setgid(job["uid"])
        os.setuid(job["uid"])
    keep_interpreter_reachable(prefix_fds)

    code, tests, nonce = job["code"], job["tests"], job["nonce"]
    del job
    program = types.ModuleType("__main__")
    sys.modules["__main__"] = program
    sys.argv = ["solution.py"]
    try:
        run_source(program.__dict__, code, "solution.py")
        run_source(program.__dict__, tests, "tests.py")
    except SystemExit:
        raise
    except BaseException as error:
        trace = error.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename == main.__code__.co_filename:
            trace = trace.tb_next
        traceback.print_exception(type(error), error, trace)
        sys.exit(1)
    os.write(status_fd, nonce.encode())


main()
"""

# Run as root with the sandbox's uid: becomes that uid and kills every process it has, wherever they went.
_SWEEP = """
import os, signal, sys
uid = int(sys.argv[1])
os.setgroups([])
os.setgid(uid)
os.setuid(uid)
try:
    os.kill(-1, signal.SIGKILL)
except ProcessLookupError:
    pass
"""


def _execute(code: str, tests: str, limits: _Limits, mode: str, python: str, *, private_mounts: bool) -> SandboxResult:
    workdir = tempfile.mkdtemp(prefix="roundhouse-sandbox-")
    try:
        with _sandbox_uid() as uid:
            if uid is not None:
                os.chown(workdir, uid, uid)
            own_tmp = mode == BUBBLEWRAP or private_mounts
            env = {"PATH": _PATH, "LANG": "C.UTF-8", "HOME": _SANDBOX_CWD if own_tmp else workdir}
            argv = [python, "-I", "-S", "-c", _BOOTSTRAP]
            if mode == BUBBLEWRAP:
                argv = [*_bubblewrap_argv(python, env, limits, as_root=uid is not None), "--", *argv]
            job = {
                "code": code,
                "tests": tests,
                "nonce": secrets.token_hex(16),
                "cpu_seconds": math.ceil(limits.timeout) + 1,
                "memory_bytes": limits.memory_bytes,
                "file_bytes": limits.memory_bytes,
                "scratch_bytes": limits.memory_bytes,
                "max_processes": limits.max_processes,
                "uid": uid,
                "private_mounts": private_mounts,
                "cwd": _SANDBOX_CWD,
            }
            try:
                return _supervise(argv, job, env, workdir, limits, mode)
            finally:
                # Under bubblewrap the pid namespace is gone with bwrap; the fallback has to find the leftovers.
                if mode == RLIMITS and uid is not None and uid >= _PRIVATE_UID_BASE:
                    _kill_processes_of(uid, python)
    finally:
        _remove_tree(workdir)


def _supervise(
    argv: list[str], job: dict[str, object], env: dict[str, str], cwd: str, limits: _Limits, mode: str
) -> SandboxResult:
    # The job (code, tests, nonce) travels in a memfd rather than a file, so it never sits where the program can
    # read it back (the tests hold the expected answers).
    job_fd = os.memfd_create("roundhouse-sandbox-job")
    status_read, status_write = os.pipe()
    try:
        with open(job_fd, "wb", closefd=False) as job_file:
            job_file.write(json.dumps(job).encode())
        os.lseek(job_fd, 0, os.SEEK_SET)
        started = time.monotonic()
        with subprocess.Popen(
            [*argv, str(job_fd), str(status_write)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            pass_fds=(job_fd, status_write),
            start_new_session=True,
        ) as process:
            os.close(status_write)
            status_write = -1
            try:
                stdout, stderr, timed_out, truncated = _capture(
                    process, started + limits.timeout, limits.max_output_bytes
                )
            finally:
                exited = _has_exited(process)
                _kill_group(process)
                process.wait()
        seconds = time.monotonic() - started
        finished = _read_available(status_read) == str(job["nonce"]).encode()
    finally:
        os.close(job_fd)
        os.close(status_read)
        if status_write >= 0:
            os.close(status_write)

    exit_code = _exit_status(process.returncode) if exited else None
    stderr_text = stderr.decode("utf-8", errors="replace")
    if exit_code == 0 and not finished and not (timed_out or truncated):
        stderr_text += "\nroundhouse.sandbox: the program exited before its tests ran to the end\n"
    return SandboxResult(
        passed=exit_code == 0 and finished and not timed_out and not truncated,
        exit_code=exit_code,
        stdout=stdout.decode("utf-8", errors="replace"),
        stderr=stderr_text,
        timed_out=timed_out,
        output_truncated=truncated,
        isolation=mode,
        seconds=seconds,
    )


def _capture(process: subprocess.Popen[bytes], deadline: float, budget: int) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout and stderr as they come until the program has exited and let go of both, the deadline passes
    or the output runs over budget. Returns stdout, stderr, timed out, truncated."""
    assert process.stdout is not None and process.stderr is not None
    captured = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    room = budget
    timed_out = truncated = False
    drain_until: float | None = None
    with selectors.DefaultSelector() as selector:
        for fd in captured:
            selector.register(fd, selectors.EVENT_READ)
        while not truncated:
            now = time.monotonic()
            exited = drain_until is not None or _has_exited(process)
            if exited and not selector.get_map():
                break
            if exited and drain_until is None:
                # Descendants may still hold the pipes open; they get a moment, then die with the group.
                drain_until = now + _DRAIN_SECONDS
            end = deadline if drain_until is None else drain_until
            if now >= end:
                timed_out = not exited
                break
            if not selector.get_map():
                time.sleep(min(end - now, _EXIT_POLL_SECONDS))  # output closed: the exit is moments away
                continue
            for key, _ in selector.select(min(end - now, _POLL_SECONDS)):
                data = os.read(key.fd, _READ_BYTES)
                if not data:
                    selector.unregister(key.fd)
                    continue
                captured[key.fd] += data[:room]
                truncated = len(data) > room
                room -= min(room, len(data))
                if truncated:
                    break
    return bytes(captured[process.stdout.fileno()]), bytes(captured[process.stderr.fileno()]), timed_out, truncated


def _has_exited(process: subprocess.Popen[bytes]) -> bool:
    # WNOWAIT leaves the child a zombie, so its pid, and with it its process group, cannot be reused before the
    # group is killed.
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _exit_status(returncode: int) -> int:
    # bwrap reports a child killed by signal N as 128+N; the fallback reports it the same way.
    return 128 - returncode if returncode < 0 else returncode


def _read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = bytearray()
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            data += chunk
            if len(data) > 4096:  # far more than a nonce: the program wrote there
                break
    return bytes(data)


def _kill_processes_of(uid: int, python: str) -> None:
    subprocess.run(
        [python, "-I", "-S", "-c", _SWEEP, str(uid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": _PATH},
        timeout=30,
        check=False,
    )


def _remove_tree(path: str) -> None:
    try:
        shutil.rmtree(path)
    except OSError:
        # A worker that is not root may meet directories the program made unreadable; open them and retry.
        for root, dirs, _ in os.walk(path):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(root, name), 0o700)
        shutil.rmtree(path, ignore_errors=True)


def _bubblewrap_argv(python: str, env: dict[str, str], limits: _Limits, *, as_root: bool) -> list[str]:
    bwrap = shutil.which("bwrap") or "bwrap"
    argv = [bwrap, "--die-with-parent", "--new-session", "--clearenv"]
    argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if as_root:
        # No user namespace: in one, the sandbox's uid would map back to root outside, and the kernel never applies
        # RLIMIT_NPROC to root. The bootstrap keeps only the power to switch to its real, unprivileged uid.
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user", "--disable-userns"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    scratch = str(limits.memory_bytes)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", scratch, "--perms", "1777", "--tmpfs", "/tmp"]
    argv += ["--size", scratch, "--perms", "1777", "--tmpfs", "/dev/shm"]
    argv += ["--perms", "1777", "--dir", _SANDBOX_CWD, "--chdir", _SANDBOX_CWD]
    argv += ["--ro-bind", "/usr", "/usr", "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for top in _SYSTEM_DIRS:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for root in _interpreter_roots(python):
        argv += ["--ro-bind", root, root]
    return argv


@functools.lru_cache(maxsize=16)
def _interpreter_roots(python: str) -> tuple[str, ...]:
    """The directories `python` needs beyond /usr: its prefixes (a virtualenv's and its base's) and its own."""
    query = "import sys; print('\\n'.join({sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}))"
    answer = subprocess.run(
        [python, "-I", "-S", "-c", query], capture_output=True, text=True, env={"PATH": _PATH}, timeout=60, check=True
    )
    candidates = [*answer.stdout.split(), os.path.dirname(os.path.abspath(python))]
    roots: list[str] = []
    for path in sorted({os.path.normpath(path) for path in candidates}, key=len):
        if not any(path == root or path.startswith(root.rstrip("/") + "/") for root in ["/usr", *roots]):
            roots.append(path)
    return tuple(roots)


def _base_python() -> str:
    """The interpreter behind this one, outside any virtualenv."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for prefix in (sys.base_prefix, sys.base_exec_prefix):
        for name in (version, "python3"):
            candidate = os.path.join(prefix, "bin", name)
            if os.access(candidate, os.X_OK):
                return candidate
    return sys.executable


@functools.cache
def _bubblewrap_problem() -> str | None:
    """Why bubblewrap cannot sandbox here, or None when a probe ran and the process limit held."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (no bwrap on PATH)"
    probe = _execute(_FORK_PROBE, "", _PROBE_LIMITS, BUBBLEWRAP, _base_python(), private_mounts=False)
    if probe.passed:
        return None
    detail = (probe.stderr.strip() or probe.stdout.strip() or f"exit code {probe.exit_code}")[-400:]
    return f"bwrap could not start a sandbox that holds its limits: {detail}"


@functools.cache
def _fallback_has_namespaces() -> bool:
    """Whether the rlimits fallback can give the program no network and its own /tmp (needs root and unshare)."""
    if os.geteuid() != 0:
        return False
    return _execute("", "", _PROBE_LIMITS, RLIMITS, _base_python(), private_mounts=True).passed


@functools.cache
def _private_uids_mapped() -> bool:
    """Whether this (possibly namespaced) host can switch to the private uid range at all."""
    wanted_end = _PRIVATE_UID_BASE + _UID_BLOCKS * _SLOTS_PER_BLOCK
    try:
        with open("/proc/self/uid_map") as uid_map:
            lines = uid_map.read().splitlines()
    except OSError:
        return False
    for line in lines:
        inside, _, count = (int(field) for field in line.split())
        if inside <= _PRIVATE_UID_BASE and wanted_end <= inside + count:
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


_uid_slots = _UidSlots(_PRIVATE_UID_BASE + _UID_BLOCK * _SLOTS_PER_BLOCK, _SLOTS_PER_BLOCK)


@contextlib.contextmanager
def _sandbox_uid() -> Iterator[int | None]:
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
