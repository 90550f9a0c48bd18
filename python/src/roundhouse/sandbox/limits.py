"""What a sandboxed run is given and gives back: the modes, the limits, the result."""

from __future__ import annotations

from dataclasses import dataclass

BUBBLEWRAP = "bubblewrap"
NAMESPACES = "namespaces"
RLIMITS_UNSAFE = "rlimits-unsafe"
MODES = (BUBBLEWRAP, NAMESPACES, RLIMITS_UNSAFE)
# What isolation() says, followed by the reason, when no mode can run here.
REFUSED = "refused"


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
class Limits:
    timeout: float
    memory_mb: int
    max_output_bytes: int
    max_processes: int

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb << 20
