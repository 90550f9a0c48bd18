"""The probe that decides whether a mode contains a program on this host, run in the sandbox as its program.

It checks that the namespaces are real: no network interface but loopback, and a /proc that shows only the sandbox's
processes; and, run with a limit of one process, that forking is refused.
"""

from __future__ import annotations

import os
import socket


def main() -> None:
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


if __name__ == "__main__":
    main()
