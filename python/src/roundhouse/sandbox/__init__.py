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

import functools
import os
import shutil

from .host import base_python
from .limits import (
    BUBBLEWRAP,
    MODES,
    NAMESPACES,
    REFUSED,
    RLIMITS_UNSAFE,
    Limits,
    SandboxResult,
    SandboxUnavailableError,
)
from .programs import source
from .runner import execute

__all__ = [
    "BUBBLEWRAP",
    "MODES",
    "NAMESPACES",
    "REFUSED",
    "RLIMITS_UNSAFE",
    "SandboxResult",
    "SandboxUnavailableError",
    "isolation",
    "run",
]

# Small enough to start anywhere; one process so the probe (programs/containment_probe.py) sees forking refused.
_PROBE_LIMITS = Limits(timeout=20.0, memory_mb=256, max_output_bytes=1 << 16, max_processes=1)
_CONTAINMENT_PROBE = source("containment_probe")


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
    limits = Limits(timeout, memory_mb, max_output_bytes, max_processes)
    interpreter = (shutil.which(python) or python) if python else base_python()
    return execute(code, tests, limits, mode, interpreter)


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
    probe = execute(_CONTAINMENT_PROBE, "", _PROBE_LIMITS, mode, base_python())
    if probe.passed:
        return None
    detail = (probe.stderr.strip() or probe.stdout.strip() or f"exit code {probe.exit_code}")[-400:]
    return f"{failure}: {detail}"
