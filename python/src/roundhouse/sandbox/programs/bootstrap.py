"""The sandbox's supervisor: runs first in the sandboxed interpreter (started with -I -S, so nothing of the program's
runs before it).

It forks the program before it reads the job (so the program's memory never holds the nonce, the status descriptor or
the tests), gives it the code, the tests only once the code has run, and writes the nonce to the worker only when the
program said its tests ran to the end and exited 0. Kept free of the worker's imports: it runs in a bare interpreter.
The worker reads this file once, when roundhouse.sandbox is imported, and passes its text with ``-c``.

Usage: ``python -I -S -c <this file> JOB_FD STATUS_FD MODE SCRATCH_BYTES CWD TREE_JSON``.
"""

from __future__ import annotations

import ctypes
import json
import linecache
import os
import resource
import select
import signal
import sys
import time
import traceback
import types
from typing import Any

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 0x1, 0x2, 0x4, 0x8, 0x20, 0x1000
MS_REC, MS_PRIVATE, MNT_DETACH = 0x4000, 0x40000, 0x2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
CODE_RAN, TESTS_RAN = b"C", b"T"
libc = ctypes.CDLL(None, use_errno=True)
# What a private root shows of the host: {"binds": [path, ...], "links": [[link, target], ...]}.
Tree = dict[str, list[Any]]


def check(result: int, action: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{action}: {os.strerror(errno)}")


def limit(kind: int, value: int) -> None:
    hard = resource.getrlimit(kind)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


def exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def enter_namespaces(scratch_bytes: int, cwd: str, tree: Tree) -> None:
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


def mount_tmpfs(path: str, size: int, mode: int) -> None:
    options = f"size={size},mode={mode:o}".encode()
    check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), "mount a tmpfs at " + path)


def bind_read_only(source: str, target: str) -> None:
    check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), "bind " + source)
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    check(libc.mount(None, target.encode(), None, flags, None), "make " + source + " read-only")


def enter_private_root(scratch_bytes: int, tree: Tree) -> None:
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


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
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
    found: list[int] = []
    frontier = [root]
    while frontier:
        kids = children.get(frontier.pop(), [])
        found += kids
        frontier += kids
    return found


def end_descendants() -> None:
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


def send(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    os.write(fd, len(data).to_bytes(8, "big"))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int) -> dict[str, Any]:
    def exactly(count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            chunk = os.read(fd, count - len(data))
            if not chunk:
                raise EOFError("the supervisor closed the job pipe")
            data += chunk
        return bytes(data)

    message: dict[str, Any] = json.loads(exactly(int.from_bytes(exactly(8), "big")))
    return message


def keep_interpreter_reachable(prefix_fds: list[tuple[str, int]]) -> None:
    # Once the uid changes (or /tmp is replaced) the interpreter's own directories may be out of reach by path,
    # e.g. under a 0700 /root. Descriptors opened before still reach them through /proc/self/fd.
    def reachable(path: str) -> str:
        if os.access(path, os.R_OK | os.X_OK):
            return path
        for prefix, fd in prefix_fds:
            if path == prefix or path.startswith(prefix + "/"):
                return f"/proc/self/fd/{fd}{path[len(prefix) :]}"
        return path

    sys.path[:] = [reachable(path) for path in sys.path]
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            search[:] = [reachable(path) for path in search]
    sys.path_importer_cache.clear()


def run_source(namespace: dict[str, Any], source: str, filename: str) -> None:
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def program(job_read: int, report_write: int, prefix_fds: list[tuple[str, int]]) -> None:
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


def supervise(job_fd: int, status_fd: int, program_pid: int, job_write: int, report_read: int) -> int:
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


def main() -> None:
    job_arg, status_arg, mode, scratch_arg, cwd, tree = sys.argv[1:7]
    job_fd, status_fd, scratch_bytes = int(job_arg), int(status_arg), int(scratch_arg)
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

    def deadline(signum: int, frame: types.FrameType | None) -> None:
        end_descendants()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, deadline)
    os._exit(supervise(job_fd, status_fd, child, job_write, report_read))


if __name__ == "__main__":
    main()
