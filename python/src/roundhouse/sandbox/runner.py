"""One sandboxed run: the supervisor started in its mode, its output captured within the limits, its processes ended."""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import select
import selectors
import shutil
import signal
import subprocess
import tempfile
import time

from .host import PRIVATE_UID_BASE, SANDBOX_CWD, SANDBOX_PATH, bubblewrap_argv, sandbox_uid, visible_tree
from .limits import BUBBLEWRAP, NAMESPACES, RLIMITS_UNSAFE, Limits, SandboxResult
from .programs import source

# After the program exits, descendants still holding its output pipes get this long before they are killed.
_DRAIN_SECONDS = 0.5
# Under rlimits-unsafe the supervisor gets this long after the deadline to kill the program's descendants.
_SUPERVISOR_GRACE_SECONDS = 2.0
# How often the supervisor looks at the clock and the process while no output arrives.
_POLL_SECONDS = 0.05
_EXIT_POLL_SECONDS = 0.002
_READ_BYTES = 1 << 16
# Read once, at import: the supervisor that runs first in every sandbox, and the sweep of a root worker's sandbox uid.
BOOTSTRAP = source("bootstrap")
_SWEEP = source("sweep_uid")


def execute(code: str, tests: str, limits: Limits, mode: str, python: str) -> SandboxResult:
    workdir = tempfile.mkdtemp(prefix="roundhouse-sandbox-")
    try:
        with sandbox_uid() as uid:
            if uid is not None:
                os.chown(workdir, uid, uid)
            own_tmp = mode != RLIMITS_UNSAFE
            env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "HOME": SANDBOX_CWD if own_tmp else workdir}
            argv = [python, "-I", "-S", "-c", BOOTSTRAP]
            if mode == BUBBLEWRAP:
                argv = [*bubblewrap_argv(python, env, limits, as_root=uid is not None), "--", *argv]
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
            tree = visible_tree(python) if mode == NAMESPACES else {}
            tail = [mode, str(limits.memory_bytes), SANDBOX_CWD, json.dumps(tree)]
            try:
                return _supervise(argv, tail, job, env, workdir, limits, mode)
            finally:
                # Namespaced modes lose every process with their pid namespace; rlimits-unsafe as root sweeps the uid.
                if mode == RLIMITS_UNSAFE and uid is not None and uid >= PRIVATE_UID_BASE:
                    _kill_processes_of(uid, python)
    finally:
        _remove_tree(workdir)


def _supervise(
    argv: list[str], tail: list[str], job: dict[str, object], env: dict[str, str], cwd: str, limits: Limits, mode: str
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
        env={"PATH": SANDBOX_PATH},
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
