"""Hostile programs for roundhouse.sandbox, shared by the worker-as-root tests and the unprivileged-user driver.

Each is Python source with placeholders the runner fills: WORKER_PID (a process holding a planted secret in its
environment), SECRET_FILE (a file of the worker's, 0600, holding that secret), STORE_FILE (a file the artifact store
wrote), MARKER (unique per run), PORT (a listening socket). The unprivileged driver gets them as text.
"""

from __future__ import annotations

# Prints what it could read of the worker's environment; the runner looks for the secret in the output.
READ_WORKER_ENVIRON = """
import os
for path in ("/proc/WORKER_PID/environ", "/proc/1/environ", "/proc/self/environ"):
    try:
        print(path, open(path, "rb").read())
    except OSError as error:
        print(path, "refused:", type(error).__name__)
print(dict(os.environ))
"""

READ_WORKER_FILE = """
try:
    print("read:", open("SECRET_FILE").read())
except OSError as error:
    print("refused:", type(error).__name__)
"""

READ_STORE_FILE = """
try:
    print("read:", open("STORE_FILE").read())
except OSError as error:
    print("refused:", type(error).__name__)
"""

CONNECT = """
import socket
with socket.create_connection(("127.0.0.1", PORT), timeout=2) as connection:
    connection.sendall(b"hello")
print("connected")
"""

# A daemon: fork, setsid, fork again, the grandchild becomes a long sleep whose command line holds the marker.
_DAEMONIZE = """
import os, time
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "MARKER"])
    os._exit(0)
os.waitpid(child, 0)
time.sleep(0.3)
"""
DAEMON_LEFT_BEHIND = _DAEMONIZE + "print('daemon started')\n"
DAEMON_THEN_HANG = _DAEMONIZE + "while True:\n    time.sleep(1)\n"

# Frame walking (and its traceback and gc variants): collect every string the bootstrap's frames or the heap hold,
# print those that look like tests or a nonce (the runner looks for the tests' expected answer), then try to mark
# itself passed: every 32-hex string written to every descriptor, then exit 0 without running the tests.
_FORGE = """
import os, re
strings = set()
seen = set()
def collect(value, depth=0):
    if isinstance(value, str):
        strings.add(value)
        return
    if isinstance(value, (bytes, bytearray)):
        strings.add(bytes(value).decode("latin-1"))
        return
    if depth > 6 or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, dict):
        for key, item in list(value.items()):
            collect(key, depth + 1)
            collect(item, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in list(value):
            collect(item, depth + 1)
FIND
nonces = {match for text in strings for match in re.findall(r"[0-9a-f]{32}", text)}
print("\\n".join(sorted(text for text in strings if "assert" in text)))
print("\\n".join(sorted(nonces)))
import sys
sys.stdout.flush()
for fd in range(3, 64):
    for nonce in nonces:
        try:
            os.write(fd, nonce.encode())
        except OSError:
            break
os._exit(0)
"""
FRAME_WALK = _FORGE.replace(
    "FIND",
    """
import sys
frame = sys._getframe()
while frame is not None:
    collect(frame.f_locals)
    collect(frame.f_globals)
    frame = frame.f_back
""",
)
TRACEBACK_WALK = _FORGE.replace(
    "FIND",
    """
import sys
try:
    raise RuntimeError
except RuntimeError as error:
    frame = error.__traceback__.tb_frame
while frame is not None:
    collect(frame.f_locals)
    frame = frame.f_back
""",
)
GC_WALK = _FORGE.replace(
    "FIND",
    """
import gc
for found in gc.get_objects():
    collect(found)
""",
)

# The supervisor's side: read its memory through /proc for the nonce and the tests, then write every 32-hex string
# found into each of its descriptors (reopened through /proc/<pid>/fd), then exit 0 without running the tests.
SUPERVISOR_MEMORY = r"""
import os, re, sys
supervisor = os.getppid()
nonces = set()
try:
    with open(f"/proc/{supervisor}/maps") as maps, open(f"/proc/{supervisor}/mem", "rb", 0) as memory:
        for line in maps.read().splitlines():
            span, permissions = line.split()[:2]
            start, end = (int(edge, 16) for edge in span.split("-"))
            if not permissions.startswith("r") or end - start > 64 << 20:
                continue
            try:
                memory.seek(start)
                chunk = memory.read(end - start)
            except (OSError, OverflowError, ValueError):
                continue
            nonces.update(found.decode() for found in re.findall(rb"[0-9a-f]{32}", chunk))
            for tests in re.findall(rb"assert solve\(\) == '[^']*'", chunk):
                print("found the tests:", tests.decode())
    print("read the supervisor's memory")
except OSError as error:
    print("memory refused:", type(error).__name__)
try:
    descriptors = os.listdir(f"/proc/{supervisor}/fd")
except OSError as error:
    descriptors = []
    print("descriptors refused:", type(error).__name__)
for name in descriptors:
    try:
        fd = os.open(f"/proc/{supervisor}/fd/{name}", os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        continue
    for nonce in nonces:
        try:
            os.write(fd, nonce.encode())
        except OSError:
            break
sys.stdout.flush()
os._exit(0)
"""

FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
MEMORY_HOG = "block = bytearray(4 * 1024**3)\nprint(len(block))"


def fill(code: str, **values: object) -> str:
    for name, value in values.items():
        code = code.replace(name, str(value))
    return code
