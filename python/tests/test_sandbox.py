"""roundhouse.sandbox holds hostile programs: each test runs under bubblewrap and under the forced rlimits fallback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roundhouse import sandbox
from roundhouse.sandbox import SandboxUnavailableError, isolation, run

REPO = Path(__file__).resolve().parents[2]


def bubblewrap_works_here() -> bool:
    """Whether bwrap can make namespaces on this host at all, judged without the module under test."""
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True, check=False)
    return probe.returncode == 0


BUBBLEWRAP_WORKS = bubblewrap_works_here()


@pytest.fixture(
    params=[
        pytest.param(
            "bubblewrap",
            marks=pytest.mark.skipif(not BUBBLEWRAP_WORKS, reason="bwrap is missing or cannot create namespaces here"),
        ),
        "rlimits",
    ]
)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", request.param)
    return request.param


def fallback_is_bare(mode: str) -> bool:
    """The rlimits fallback without root or unshare: it shares the host's network and /tmp (see the module doc)."""
    return mode == "rlimits" and not sandbox._fallback_has_namespaces()


def test_isolation_is_bubblewrap_wherever_bwrap_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROUNDHOUSE_SANDBOX", raising=False)
    chosen = isolation()
    print(f"sandbox isolation: {chosen}")
    assert chosen == ("bubblewrap" if BUBBLEWRAP_WORKS else "rlimits")
    assert run("pass").isolation == chosen


def test_rlimits_can_be_forced_and_bubblewrap_demanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", "rlimits")
    assert isolation() == "rlimits"
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", "bubblewrap")
    if BUBBLEWRAP_WORKS:
        assert isolation() == "bubblewrap"
    else:
        with pytest.raises(SandboxUnavailableError):
            isolation()
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", "docker")
    with pytest.raises(ValueError, match="ROUNDHOUSE_SANDBOX"):
        isolation()


def test_correct_code_passes_its_tests(mode: str) -> None:
    result = run("def add(a, b):\n    return a + b\nprint('ready')", "assert add(2, 3) == 5")
    assert result.passed, result.stderr
    assert (result.exit_code, result.stdout, result.isolation) == (0, "ready\n", mode)


def test_a_failing_assertion_fails_with_its_traceback(mode: str) -> None:
    result = run("def add(a, b):\n    return a - b", "assert add(2, 3) == 5, 'add is wrong'")
    assert not result.passed
    assert result.exit_code == 1
    assert "AssertionError: add is wrong" in result.stderr
    assert 'File "tests.py", line 1' in result.stderr


def test_exiting_zero_before_the_tests_run_does_not_pass(mode: str) -> None:
    for escape in ("import sys\nsys.exit(0)", "import os\nos._exit(0)"):
        result = run(escape, "assert False")
        assert result.exit_code == 0
        assert not result.passed


@pytest.mark.parametrize(
    "bomb",
    [
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "import subprocess, sys\nchildren = []\nwhile True:\n    try:\n        children.append(subprocess.Popen("
        "[sys.executable, '-c', 'import time; time.sleep(60)']))\n    except OSError:\n        pass",
    ],
    ids=["os.fork", "subprocess"],
)
def test_a_fork_bomb_is_contained_and_the_next_run_is_unharmed(mode: str, bomb: str) -> None:
    started = time.monotonic()
    result = run(bomb, timeout=2)
    assert not result.passed
    assert result.timed_out
    assert time.monotonic() - started < 2 + 3

    after = run("import os\nchild = os.fork()\nif child == 0:\n    os._exit(0)\nos.waitpid(child, 0)", "assert True")
    assert after.passed, after.stderr


def test_an_infinite_loop_times_out(mode: str) -> None:
    result = run("while True:\n    pass", timeout=1)
    assert result.timed_out
    assert not result.passed
    assert result.exit_code is None
    assert result.seconds < 1 + 2


def test_the_workers_environment_is_invisible(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"secret-{uuid.uuid4()}"
    monkeypatch.setenv("ROUNDHOUSE_TEST_SECRET", secret)
    code = f"""
import os
print(dict(os.environ))
for path in ("/proc/{os.getpid()}/environ", "/proc/1/environ", "/proc/self/environ"):
    try:
        print(path, open(path, "rb").read())
    except OSError as error:
        print(path, "refused:", error)
"""
    result = run(code)
    assert result.passed, result.stderr
    assert "PATH" in result.stdout
    assert "ROUNDHOUSE_TEST_SECRET" not in result.stdout
    assert secret not in result.stdout + result.stderr


def test_the_workers_files_are_out_of_reach(mode: str, tmp_path: Path) -> None:
    secret = f"secret-{uuid.uuid4()}"
    secret_file = tmp_path / "worker-key.txt"
    secret_file.write_text(secret)
    code = f"""
import json, os
seen = {{}}
for path in ({str(secret_file)!r}, "/root", {str(REPO)!r}):
    try:
        seen[path] = os.listdir(path) if os.path.isdir(path) else open(path).read()
    except OSError as error:
        seen[path] = "refused: " + type(error).__name__
print(json.dumps(seen))
"""
    result = run(code)
    assert result.passed, result.stderr
    assert secret not in result.stdout + result.stderr
    seen = json.loads(result.stdout)
    assert seen[str(secret_file)].startswith("refused")
    # Under bubblewrap /root holds nothing but the path down to the interpreter's own prefix.
    interpreter_path = (
        {Path(sys.base_prefix).relative_to("/root").parts[0]} if sys.base_prefix.startswith("/root/") else set()
    )
    if isinstance(seen["/root"], list):
        assert set(seen["/root"]) & set(os.listdir("/root")) <= interpreter_path
    if mode == "bubblewrap":
        assert seen[str(REPO)].startswith("refused")
    # The rlimits fallback can still list the world-readable repository: no mount namespace hides it.


def test_no_network_reaches_the_worker(mode: str) -> None:
    if fallback_is_bare(mode):
        pytest.skip("this host's rlimits fallback cannot unshare the network")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"""
import socket
with socket.create_connection(("127.0.0.1", {port}), timeout=2) as connection:
    connection.sendall(b"hello")
print("connected")
"""
        result = run(code, "assert True")
        assert not result.passed
        assert "connected" not in result.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_writes_outside_its_directory_never_reach_the_host(mode: str, tmp_path: Path) -> None:
    if fallback_is_bare(mode):
        pytest.skip("this host's rlimits fallback cannot unshare mounts, so it shares the host's /tmp")
    outside = tmp_path / "escaped.txt"
    host_tmp = Path("/tmp") / f"roundhouse-escape-{uuid.uuid4()}.txt"
    code = f"""
for path in ({str(outside)!r}, {str(host_tmp)!r}, "escaped-here.txt"):
    try:
        with open(path, "w") as handle:
            handle.write("escaped")
        print("wrote", path)
    except OSError as error:
        print("refused", path, error)
"""
    try:
        result = run(code)
        assert result.passed, result.stderr
        assert "wrote escaped-here.txt" in result.stdout  # its own directory is writable
        assert not outside.exists()
        assert not host_tmp.exists()
    finally:
        host_tmp.unlink(missing_ok=True)


def test_gigabytes_of_output_are_cut_off(mode: str) -> None:
    limit = 1_000_000
    result = run("while True:\n    print('x' * 1_000_000)", max_output_bytes=limit, timeout=10)
    assert result.output_truncated
    assert not result.passed
    assert result.exit_code is None
    assert len(result.stdout) + len(result.stderr) <= limit
    assert result.seconds < 3


def test_a_memory_hog_fails(mode: str) -> None:
    result = run("block = bytearray(4 * 1024**3)\nprint(len(block))", "assert True", memory_mb=512)
    assert not result.passed
    assert "MemoryError" in result.stderr


def test_the_working_directory_is_removed_even_when_the_program_locks_it(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = "import os\nos.makedirs('locked/inner')\nopen('locked/inner/f', 'w').write('x')\nos.chmod('locked', 0)"
    result = run(code)
    assert result.passed, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_concurrent_runs_do_not_disturb_each_other(mode: str) -> None:
    code = """
import os, time
children = []
for _ in range(4):
    child = os.fork()
    if child == 0:
        time.sleep(0.3)
        os._exit(0)
    children.append(child)
for child in children:
    os.waitpid(child, 0)
"""
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda _: run(code, "assert True", max_processes=8), range(6)))
    assert all(result.passed for result in results), [result.stderr for result in results]
