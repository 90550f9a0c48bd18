"""Run model-written Python and its tests where it cannot reach the worker, or refuse.

A reward function calls ``run(code, tests)``. The code runs, then the tests run after it in the same program, in a
fresh interpreter (the worker's base interpreter with ``-I -S``: no site-packages, no ``PYTHON*`` variables), under
limits on time, memory, processes, file size and output. ``passed`` is true only when the program ran its tests to
the end and exited 0 in time, within its limits.

Modes; ``isolation()`` names the one ``run()`` uses on this host (``ROUNDHOUSE_SANDBOX`` can pick one), or says why
none can run (then ``run()`` raises ``SandboxUnavailableError``):

``bubblewrap``
    ``bwrap`` puts the program in its own mount, pid, network, IPC and UTS namespaces. It sees read-only binds of
    ``/usr``, the ``/lib*`` and ``/bin`` links, ``/etc/ld.so.cache`` and the interpreter's own prefix (not the home
    directory around it), a fresh ``/proc`` and ``/dev``, and size-capped tmpfs at ``/tmp`` and ``/dev/shm``; its
    working directory is ``/tmp/sandbox`` on that tmpfs. No network interface but loopback.

``namespaces``
    A root worker without a working bwrap: the bootstrap itself unshares mount, pid, network, IPC and UTS
    namespaces and pivots into a root of its own that holds what bubblewrap's does: read-only binds of ``/usr``, the
    system directories, ``/etc/ld.so.cache`` and the interpreter's prefixes, a fresh ``/proc`` (the sandbox's own
    processes only), ``/dev/null``, ``zero``, ``full``, ``random`` and ``urandom``, and size-capped tmpfs at ``/tmp``
    and ``/dev/shm``. No network interface but loopback.

``rlimits-unsafe``
    Only when asked (``ROUNDHOUSE_SANDBOX=rlimits-unsafe``): resource limits, an empty environment and a fresh
    working directory, nothing more. The program has the network and reads whatever the worker's uid can (as root:
    what is world-readable; as another user: the worker's own files and ``/proc/<worker>/environ``).

A worker that is not root without a working bwrap, or root where ``unshare`` is refused, gets no mode: ``run()``
refuses. In every mode a worker running as root runs each program as a uid of its own from a range far above real
accounts, which makes RLIMIT_NPROC bind and keeps concurrent sandboxes out of each other's processes and files.

The whole process tree dies when run() returns, in every mode: under bubblewrap and namespaces with the pid
namespace (its init dies with the worker's child); under rlimits-unsafe the program's supervisor is a child
subreaper that kills every descendant (double-forked, ``setsid`` ones too) when the program exits or the deadline
passes, and as root every process of the sandbox's uid is killed after. Only under rlimits-unsafe as a non-root
worker can a program kill that supervisor (same uid) first and leave processes behind.

Completion is reported from outside the program's process. Inside the sandbox a supervisor (the bootstrap) holds
the per-run nonce and the status pipe to the worker; it is not dumpable (no ptrace, no ``/proc/<pid>/mem``) and,
for a root worker, of another uid. The program runs in a child forked before the supervisor reads the job, so its
memory never held the nonce, the status descriptor or the tests: walking frames, tracebacks or ``gc.get_objects()``
finds none of them. The supervisor sends the tests only after the program's code has run and reports
completion only when the child said the tests ran to the end and exited 0. What stays open: the program controls
its own interpreter, so code that deliberately subverts its tests there (an ``__eq__`` that is always true,
patching ``exec`` or the builtins before the tests arrive, or speaking the child's side of the handshake itself
and skipping the tests) is beyond any sandbox's reach; ``passed`` is the tests' verdict only for a program that
does not attack them.

Limits are per process (RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE), so a program may hold up to about
``max_processes * memory_mb`` at once. Closing that needs cgroups, which this module does not use.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import secrets
import select
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
from typing import Any

__all__ = ["SandboxResult", "SandboxUnavailableError", "isolation", "run"]

BUBBLEWRAP = "bubblewrap"
NAMESPACES = "namespaces"
RLIMITS_UNSAFE = "rlimits-unsafe"
MODES = (BUBBLEWRAP, NAMESPACES, RLIMITS_UNSAFE)
# What isolation() says, followed by the reason, when no mode can run here.
REFUSED = "refused"

# The program's working directory whenever it has a private /tmp (bubblewrap and namespaces).
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
# Under rlimits-unsafe the supervisor gets this long after the deadline to kill the program's descendants.
_SUPERVISOR_GRACE_SECONDS = 2.0
# How often the supervisor looks at the clock and the process while no output arrives.
_POLL_SECONDS = 0.05
_EXIT_POLL_SECONDS = 0.002
_READ_BYTES = 1 << 16


class SandboxUnavailableError(RuntimeError):
    """No mode that contains a program can run on this host (or ROUNDHOUSE_SANDBOX names one that cannot), and
    rlimits-unsafe was not asked for: run() refuses rather than run the program uncontained."""


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # exited 0 after running its tests to the end, not timed out, output within the limit
    exit_code: int | None  # None when run() killed it (timeout, output limit); 128+N when signal N ended it
    stdout: str  # truncated to the output limit (stdout and stderr share it)
    stderr: str
    timed_out: bool
    output_truncated: bool
    isolation: str  # the mode that ran: "bubblewrap", "namespaces" or "rlimits-unsafe"
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


# Small enough to start anywhere; one process so the probe can see that forking is refused. It also checks that the
# namespaces are real: no network interface but loopback, and a /proc that shows only the sandbox's processes.
_PROBE_LIMITS = _Limits(timeout=20.0, memory_mb=256, max_output_bytes=1 << 16, max_processes=1)
_CONTAINMENT_PROBE = """
import os, socket
interfaces = sorted(name for _, name in socket.if_nameindex())
if interfaces not in ([], ["lo"]):
    raise SystemExit(f"network interfaces besides loopback: {interfaces}")
processes = [name for name in os.listdir("/proc") if name.isdigit()]
if len(processes) > 4:
    raise SystemExit(f"/proc shows {len(processes)} processes: not a pid namespace of its own")
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
    """The mode run() uses on this host ("bubblewrap", "namespaces" or "rlimits-unsafe"), or "refused: <why>" when
    none can run. Unset ROUNDHOUSE_SANDBOX takes bubblewrap, else namespaces; "bubblewrap" or "namespaces" insists
    on that one; "rlimits-unsafe" is the only way to the unsafe mode. The probes behind it run once per process."""
    mode, refusal = _choose_mode()
    return mode if mode is not None else f"{REFUSED}: {refusal}"


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
    Raises SandboxUnavailableError when no mode can contain the program here (see isolation()).
    """
    if timeout <= 0 or memory_mb <= 0 or max_output_bytes < 0 or max_processes < 1:
        raise ValueError("timeout and memory_mb must be positive, max_output_bytes >= 0, max_processes >= 1")
    mode, refusal = _choose_mode()
    if mode is None:
        raise SandboxUnavailableError(f"roundhouse.sandbox refuses to run the program: {refusal}")
    limits = _Limits(timeout, memory_mb, max_output_bytes, max_processes)
    interpreter = (shutil.which(python) or python) if python else _base_python()
    return _execute(code, tests, limits, mode, interpreter)


def _choose_mode() -> tuple[str | None, str]:
    """The mode to run, or None and why none can."""
    requested = os.environ.get("ROUNDHOUSE_SANDBOX", "").strip().lower()
    if requested == RLIMITS_UNSAFE:
        return RLIMITS_UNSAFE, ""
    if requested not in ("", BUBBLEWRAP, NAMESPACES):
        return None, f"ROUNDHOUSE_SANDBOX={requested!r} is not a mode (one of {', '.join(MODES)}, or unset)"
    problems = []
    for mode, problem_of in ((BUBBLEWRAP, _bubblewrap_problem), (NAMESPACES, _namespaces_problem)):
        if requested in ("", mode):
            problem = problem_of()
            if problem is None:
                return mode, ""
            problems.append(f"{mode}: {problem}")
    return None, (
        f"no mode that contains a program runs here ({'; '.join(problems)}); "
        f"ROUNDHOUSE_SANDBOX={RLIMITS_UNSAFE} runs it under resource limits alone, with the network and every file "
        "the worker's uid can read"
    )


# Runs first in the sandboxed interpreter (started with -I -S, so nothing of the program's runs before it). It is
# the program's supervisor: it forks the program before it reads the job (so the program's memory never holds the
# nonce, the status descriptor or the tests), gives it the code, the tests only once the code has run, and writes the
# nonce to the worker only when the program said its tests ran to the end and exited 0. Kept free of the worker's
# imports: it runs in a bare interpreter.
_BOOTSTRAP = r"""
import ctypes, json, linecache, os, resource, select, signal, sys, time, traceback, types

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 0x1, 0x2, 0x4, 0x8, 0x20, 0x1000
MS_REC, MS_PRIVATE, MNT_DETACH = 0x4000, 0x40000, 0x2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
CODE_RAN, TESTS_RAN = b"C", b"T"
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


def exit_code(status):
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def enter_namespaces(scratch_bytes, cwd, tree):
    # "namespaces": this process stays outside and exits as the inside did; its child is the namespace's init, which
    # dies with it (parent-death signal), and the kernel kills every process of the namespace with its init.
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    init = os.fork()
    if init:
        os._exit(exit_code(os.waitpid(init, 0)[1]))
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "set the parent-death signal")
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    enter_private_root(scratch_bytes, tree)
    os.mkdir(cwd)
    os.chmod(cwd, 0o1777)
    os.chdir(cwd)


def mount_tmpfs(path, size, mode):
    options = f"size={size},mode={mode:o}".encode()
    check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), "mount a tmpfs at " + path)


def bind_read_only(source, target):
    check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), "bind " + source)
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    check(libc.mount(None, target.encode(), None, flags, None), "make " + source + " read-only")


def enter_private_root(scratch_bytes, tree):
    # A root of its own, as bubblewrap gives: the host's tree is out of sight but for read-only /usr, the system
    # directories and the interpreter; a fresh /proc (this pid namespace's processes only), a few devices, tmpfs.
    new_root = "/tmp"
    mount_tmpfs(new_root, 1 << 20, 0o755)
    for path in tree["binds"]:
        target = new_root + path
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "w").close()
        bind_read_only(path, target)
    for link, target in tree["links"]:
        os.symlink(target, new_root + link)
    os.makedirs(new_root + "/dev/shm")
    for device in ("null", "zero", "full", "random", "urandom"):
        target = f"{new_root}/dev/{device}"
        open(target, "w").close()
        check(libc.mount(f"/dev/{device}".encode(), target.encode(), None, MS_BIND, None), "bind /dev/" + device)
    os.mkdir(new_root + "/proc")
    proc_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    check(libc.mount(b"proc", (new_root + "/proc").encode(), b"proc", proc_flags, None), "mount a fresh /proc")
    for scratch in ("/tmp", "/dev/shm"):
        os.makedirs(new_root + scratch, exist_ok=True)
        mount_tmpfs(new_root + scratch, scratch_bytes, 0o1777)
    os.mkdir(new_root + "/.old-root")
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: no syscall number known for {os.uname().machine}")
    check(libc.syscall(number, new_root.encode(), (new_root + "/.old-root").encode()), "pivot_root")
    os.chdir("/")
    check(libc.umount2(b"/.old-root", MNT_DETACH), "detach the host's tree")
    os.rmdir("/.old-root")
    check(libc.mount(None, b"/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None), "make the root read-only")


def descendants(root):
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read()
        except OSError:
            continue
        parent = int(fields[fields.rindex(b")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(name))
    found, frontier = [], [root]
    while frontier:
        kids = children.get(frontier.pop(), [])
        found += kids
        frontier += kids
    return found


def end_descendants():
    # A child subreaper: orphans (double-forked, setsid) come back to it, so its descendants are all there is.
    for _ in range(1000):
        alive = descendants(os.getpid())
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.002)


def send(fd, message):
    data = json.dumps(message).encode()
    os.write(fd, len(data).to_bytes(8, "big"))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd):
    def exactly(count):
        data = bytearray()
        while len(data) < count:
            chunk = os.read(fd, count - len(data))
            if not chunk:
                raise EOFError("the supervisor closed the job pipe")
            data += chunk
        return bytes(data)

    return json.loads(exactly(int.from_bytes(exactly(8), "big")))


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


def program(job_read, report_write, prefix_fds):
    # The child: limits, its own uid, then the code; the tests arrive only after the code ran.
    setup = receive(job_read)
    limit(resource.RLIMIT_CORE, 0)
    limit(resource.RLIMIT_CPU, setup["cpu_seconds"])
    limit(resource.RLIMIT_AS, setup["memory_bytes"])
    limit(resource.RLIMIT_FSIZE, setup["file_bytes"])
    limit(resource.RLIMIT_NPROC, setup["max_processes"])
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    if setup["uid"] is not None:
        os.setgroups([])
        os.setgid(setup["uid"])
        os.setuid(setup["uid"])
    keep_interpreter_reachable(prefix_fds)
    code = setup.pop("code")
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    sys.argv = ["solution.py"]
    try:
        run_source(main_module.__dict__, code, "solution.py")
        os.write(report_write, CODE_RAN)
        run_source(main_module.__dict__, receive(job_read)["tests"], "tests.py")
    except SystemExit:
        raise
    except BaseException as error:
        trace = error.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename == program.__code__.co_filename:
            trace = trace.tb_next
        traceback.print_exception(type(error), error, trace)
        sys.exit(1)
    os.write(report_write, TESTS_RAN)


def supervise(job_fd, status_fd, program_pid, job_write, report_read):
    with open(job_fd, "rb") as job_file:
        job = json.loads(job_file.read())
    program_keys = ("code", "uid", "cpu_seconds", "memory_bytes", "file_bytes", "max_processes")
    send(job_write, {key: job[key] for key in program_keys})
    reports = bytearray()
    tests_sent = False
    exited = os.pidfd_open(program_pid)
    watching = [report_read, exited]
    while exited in watching:
        for fd in select.select(watching, [], [])[0]:
            if fd == exited:
                watching.remove(exited)
                os.set_blocking(report_read, False)
            try:
                data = os.read(report_read, 64)
            except BlockingIOError:
                continue
            if not data:
                if report_read in watching:
                    watching.remove(report_read)
                continue
            reports += data
            if bytes(reports) == CODE_RAN and not tests_sent:
                tests_sent = True
                try:
                    send(job_write, {"tests": job["tests"]})
                except BrokenPipeError:
                    pass
    status = os.waitpid(program_pid, 0)[1]
    end_descendants()
    code = exit_code(status)
    if code == 0 and bytes(reports) == CODE_RAN + TESTS_RAN:
        os.write(status_fd, job["nonce"].encode())
    return code


def main():
    job_fd, status_fd, mode, scratch_bytes, cwd, tree = sys.argv[1:7]
    job_fd, status_fd, scratch_bytes = int(job_fd), int(status_fd), int(scratch_bytes)
    for fd in (job_fd, status_fd):
        os.set_inheritable(fd, False)
    if mode == "namespaces":
        enter_namespaces(scratch_bytes, cwd, json.loads(tree))
    # Not dumpable: the program (same uid when the worker is not root) can neither ptrace this process nor read its
    # memory through /proc.
    check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "make the supervisor undumpable")
    check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "become a child subreaper")
    prefixes = sorted({sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}, key=len, reverse=True)
    prefix_fds = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in prefixes if os.path.isdir(path)]
    job_read, job_write = os.pipe()
    report_read, report_write = os.pipe()
    child = os.fork()
    if child == 0:
        for fd in (job_fd, status_fd, job_write, report_read):
            os.close(fd)
        check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "make the program dumpable")
        program(job_read, report_write, prefix_fds)
        sys.exit(0)
    os.close(job_read)
    os.close(report_write)

    def deadline(signum, frame):
        end_descendants()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, deadline)
    os._exit(supervise(job_fd, status_fd, child, job_write, report_read))


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


def _execute(code: str, tests: str, limits: _Limits, mode: str, python: str) -> SandboxResult:
    workdir = tempfile.mkdtemp(prefix="roundhouse-sandbox-")
    try:
        with _sandbox_uid() as uid:
            if uid is not None:
                os.chown(workdir, uid, uid)
            own_tmp = mode != RLIMITS_UNSAFE
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
                # A worker that is not root shares its uid with the supervisor, which counts against the limit.
                "max_processes": limits.max_processes + (1 if uid is None else 0),
                "uid": uid,
            }
            tree = _visible_tree(python) if mode == NAMESPACES else {}
            tail = [mode, str(limits.memory_bytes), _SANDBOX_CWD, json.dumps(tree)]
            try:
                return _supervise(argv, tail, job, env, workdir, limits, mode)
            finally:
                # Namespaced modes lose every process with their pid namespace; rlimits-unsafe as root sweeps the uid.
                if mode == RLIMITS_UNSAFE and uid is not None and uid >= _PRIVATE_UID_BASE:
                    _kill_processes_of(uid, python)
    finally:
        _remove_tree(workdir)


def _supervise(
    argv: list[str], tail: list[str], job: dict[str, object], env: dict[str, str], cwd: str, limits: _Limits, mode: str
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
            [*argv, str(job_fd), str(status_write), *tail],
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
                if not exited and mode == RLIMITS_UNSAFE:
                    _let_supervisor_end_descendants(process)
                inits = _namespace_inits(process) if mode != RLIMITS_UNSAFE else []
                _kill_group(process)
                process.wait()
                _wait_for_exit(inits)
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


def _namespace_inits(process: subprocess.Popen[bytes]) -> list[int]:
    """pidfds of the process's children: a pid namespace's init (bwrap's, or the namespaces mode's)."""
    inits = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read()
            if int(fields[fields.rindex(b")") + 2 :].split()[1]) == process.pid:
                inits.append(os.pidfd_open(int(name)))
        except (OSError, ValueError):
            continue
    return inits


def _wait_for_exit(pidfds: list[int]) -> None:
    """Waits until each process has exited. For a pid namespace's init that is after every process in the namespace
    is gone: the kernel kills them and reaps them before it lets the init exit."""
    try:
        until = time.monotonic() + _SUPERVISOR_GRACE_SECONDS
        for pidfd in pidfds:
            select.select([pidfd], [], [], max(0.0, until - time.monotonic()))
    finally:
        for pidfd in pidfds:
            os.close(pidfd)


def _let_supervisor_end_descendants(process: subprocess.Popen[bytes]) -> None:
    """Without a pid namespace only the in-sandbox supervisor (a child subreaper) knows every descendant: SIGTERM
    has it kill them all and exit."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    until = time.monotonic() + _SUPERVISOR_GRACE_SECONDS
    while time.monotonic() < until and not _has_exited(process):
        time.sleep(_EXIT_POLL_SECONDS * 5)


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
    argv += ["--perms", "1777", "--dir", _SANDBOX_CWD, "--chdir", _SANDBOX_CWD]
    tree = _visible_tree(python)
    for path in tree["binds"]:
        argv += ["--ro-bind", path, path]
    for link, target in tree["links"]:
        argv += ["--symlink", target, link]
    return argv


def _visible_tree(python: str) -> dict[str, list[Any]]:
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
    """Why bubblewrap cannot sandbox here, or None when a probe ran contained and the process limit held."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (no bwrap on PATH)"
    return _probe_problem(BUBBLEWRAP, "bwrap could not start a sandbox that contains a program")


@functools.cache
def _namespaces_problem() -> str | None:
    """Why the bootstrap cannot make its own namespaces here (it needs root and unshare), or None."""
    if os.geteuid() != 0:
        return f"the worker is not root (uid {os.geteuid()}), and only root can make the namespaces without bwrap"
    return _probe_problem(NAMESPACES, "unshare could not make namespaces that contain a program")


def _probe_problem(mode: str, failure: str) -> str | None:
    probe = _execute(_CONTAINMENT_PROBE, "", _PROBE_LIMITS, mode, _base_python())
    if probe.passed:
        return None
    detail = (probe.stderr.strip() or probe.stdout.strip() or f"exit code {probe.exit_code}")[-400:]
    return f"{failure}: {detail}"


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
