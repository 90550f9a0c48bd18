"""roundhouse.sandbox holds hostile programs in every mode that can contain them, and refuses where none can.

As root (CI): each program runs under bubblewrap, namespaces and rlimits-unsafe (forced by ROUNDHOUSE_SANDBOX). As an
unprivileged user made here: under bubblewrap, and without bwrap on PATH, where run() must refuse unless
rlimits-unsafe is asked for.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sandbox_programs as programs

from roundhouse.sandbox import SandboxUnavailableError, isolation, run
from roundhouse.store import LocalStore

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ROOT = os.geteuid() == 0


def bubblewrap_works_here() -> bool:
    """Whether bwrap can make namespaces on this host at all, judged without the module under test."""
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True, check=False)
    return probe.returncode == 0


BUBBLEWRAP_WORKS = bubblewrap_works_here()


# The modes that contain a program, each where this host can give it.
CONTAINING_MODES = [
    pytest.param(
        "bubblewrap",
        marks=pytest.mark.skipif(not BUBBLEWRAP_WORKS, reason="bwrap is missing or cannot create namespaces here"),
    ),
    pytest.param("namespaces", marks=pytest.mark.skipif(not ROOT, reason="the namespaces mode needs a root worker")),
]


@pytest.fixture(params=[*CONTAINING_MODES, "rlimits-unsafe"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", request.param)
    return str(request.param)


@pytest.fixture(params=CONTAINING_MODES)
def contained_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The modes with a mount namespace of their own (rlimits-unsafe shares the host's files)."""
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", request.param)
    return str(request.param)


def processes_with(marker: str) -> list[str]:
    """Every process on the host whose command line holds the marker."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(name)
    return found


def daemon_marker() -> str:
    """A sleep duration no other process on the host has: the daemon's command line."""
    return f"{random.randint(600, 900)}.{random.randrange(10**9):09d}"


@pytest.fixture
def worker_with_secret() -> Iterator[tuple[int, str]]:
    """A process of the worker's uid with a secret in its environment, as the worker's API keys are."""
    secret = f"secret-{uuid.uuid4()}"
    holder = subprocess.Popen(
        ["/bin/sleep", "60"], env={"PATH": "/usr/bin:/bin", "ROUNDHOUSE_TEST_SECRET": secret}, stdin=subprocess.DEVNULL
    )
    try:
        yield holder.pid, secret
    finally:
        holder.kill()
        holder.wait()


def test_isolation_names_the_strongest_mode_and_unsafe_runs_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROUNDHOUSE_SANDBOX", raising=False)
    chosen = isolation()
    print(f"sandbox isolation: {chosen}")
    expected = "bubblewrap" if BUBBLEWRAP_WORKS else "namespaces" if ROOT else "refused"
    assert chosen.split(":")[0] == expected
    if expected != "refused":
        assert run("pass").isolation == chosen
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", "rlimits-unsafe")
    assert isolation() == "rlimits-unsafe"
    assert run("pass").isolation == "rlimits-unsafe"
    for unknown in ("rlimits", "docker"):
        monkeypatch.setenv("ROUNDHOUSE_SANDBOX", unknown)
        assert isolation().startswith(f"refused: ROUNDHOUSE_SANDBOX='{unknown}' is not a mode")
        with pytest.raises(SandboxUnavailableError, match="refuses to run the program"):
            run("pass")


def test_python_m_roundhouse_sandbox_prints_the_mode_or_the_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", "rlimits-unsafe")
    said = subprocess.run([sys.executable, "-m", "roundhouse", "sandbox"], capture_output=True, text=True, check=True)
    assert said.stdout.strip() == "sandbox isolation: rlimits-unsafe"
    monkeypatch.setenv("ROUNDHOUSE_SANDBOX", "docker")
    refused = subprocess.run([sys.executable, "-m", "roundhouse", "sandbox"], capture_output=True, text=True)
    assert refused.returncode == 1
    assert refused.stdout.startswith("sandbox isolation: refused: ROUNDHOUSE_SANDBOX='docker' is not a mode")


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
    "walk",
    [programs.FRAME_WALK, programs.TRACEBACK_WALK, programs.GC_WALK, programs.SUPERVISOR_MEMORY],
    ids=["frames", "traceback", "gc", "supervisor-memory"],
)
def test_walking_frames_or_the_heap_finds_neither_the_tests_nor_a_way_to_pass(mode: str, walk: str) -> None:
    answer = f"answer-{uuid.uuid4()}"
    result = run(walk, f"assert solve() == {answer!r}")
    assert result.exit_code == 0
    assert answer not in result.stdout + result.stderr  # the tests were not in its memory while its code ran
    assert not result.passed  # nor was the nonce, nor the worker's status pipe


@pytest.mark.parametrize("program", ["left-behind", "at-the-deadline"])
def test_a_setsid_daemon_dies_with_the_run(mode: str, program: str) -> None:
    marker = daemon_marker()
    source = programs.DAEMON_LEFT_BEHIND if program == "left-behind" else programs.DAEMON_THEN_HANG
    # Left behind: time enough to exit on its own under load; at the deadline: killed while its daemon runs.
    result = run(programs.fill(source, MARKER=marker), timeout=10 if program == "left-behind" else 1.2)
    assert result.timed_out == (program == "at-the-deadline"), result.stderr
    assert processes_with(marker) == []


@pytest.mark.parametrize(
    "bomb",
    [
        programs.FORK_BOMB,
        "import subprocess, sys\nchildren = []\nwhile True:\n    try:\n        children.append(subprocess.Popen("
        "[sys.executable, '-c', 'import time; time.sleep(60)']))\n    except OSError:\n        pass",
    ],
    ids=["os.fork", "subprocess"],
)
def test_a_fork_bomb_is_contained_and_the_next_run_is_unharmed(mode: str, bomb: str) -> None:
    started = time.monotonic()
    result = run(bomb, timeout=1)
    assert not result.passed
    assert result.timed_out
    assert time.monotonic() - started < 1 + 4

    after = run("import os\nchild = os.fork()\nif child == 0:\n    os._exit(0)\nos.waitpid(child, 0)", "assert True")
    assert after.passed, after.stderr


def test_an_infinite_loop_times_out(mode: str) -> None:
    result = run("while True:\n    pass", timeout=1)
    assert result.timed_out
    assert not result.passed
    assert result.exit_code is None
    assert result.seconds < 1 + 3


def test_the_workers_environment_is_out_of_reach(mode: str, worker_with_secret: tuple[int, str]) -> None:
    if not ROOT and mode == "rlimits-unsafe":
        pytest.skip("rlimits-unsafe as the worker's own uid reads its environment (the unprivileged tests show it)")
    holder, secret = worker_with_secret
    result = run(programs.fill(programs.READ_WORKER_ENVIRON, WORKER_PID=holder))
    assert result.passed, result.stderr
    assert "PATH" in result.stdout
    assert secret not in result.stdout + result.stderr


def test_the_artifact_store_writes_nothing_world_readable(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    LocalStore().write(str(store / "campaign" / "round-1" / "test-answers.json"), b"{}")
    for path in [store / "campaign", store / "campaign" / "round-1"]:
        assert path.stat().st_mode & 0o777 & ~0o750 == 0, oct(path.stat().st_mode)
    written = store / "campaign" / "round-1" / "test-answers.json"
    assert written.stat().st_mode & 0o777 & ~0o640 == 0, oct(written.stat().st_mode)


def test_the_artifact_store_is_out_of_reach(mode: str) -> None:
    if not ROOT:
        pytest.skip("a sandbox of a non-root worker runs as the worker's uid: only a mount namespace hides the store")
    # Outside /tmp (which the namespaced modes replace), under a world-readable directory, as a real store would be.
    (REPO / ".roundhouse").mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="store-", dir=REPO / ".roundhouse"))
    try:
        base.chmod(0o755)
        answers = base / "campaign" / "test-answers.json"
        LocalStore().write(str(answers), b"the expected answers")
        result = run(programs.fill(programs.READ_STORE_FILE, STORE_FILE=answers))
        assert result.passed, result.stderr
        assert result.stdout.startswith("refused:"), result.stdout
    finally:
        shutil.rmtree(base)


def test_the_workers_files_are_out_of_reach(mode: str, tmp_path: Path) -> None:
    if not ROOT and mode == "rlimits-unsafe":
        pytest.skip("rlimits-unsafe as the worker's own uid reads the worker's files")
    secret = f"secret-{uuid.uuid4()}"
    secret_file = tmp_path / "worker-key.txt"
    secret_file.write_text(secret)
    secret_file.chmod(0o600)
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
    if mode != "rlimits-unsafe":
        assert seen[str(REPO)].startswith("refused")  # a root of its own: only /usr and the interpreter are mounted
    # rlimits-unsafe still lists the world-readable repository: nothing hides the host's tree.


def test_no_network_reaches_the_worker(mode: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        result = run(programs.fill(programs.CONNECT, PORT=listener.getsockname()[1]), "assert True")
        if mode == "rlimits-unsafe":  # what makes it unsafe: it is the host's network
            assert result.passed, result.stderr
            return
        assert not result.passed
        assert "connected" not in result.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_writes_outside_its_directory_never_reach_the_host(contained_mode: str, tmp_path: Path) -> None:
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
    assert result.seconds < 4


def test_a_memory_hog_fails(mode: str) -> None:
    result = run(programs.MEMORY_HOG, "assert True", memory_mb=512)
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


# --- as an unprivileged user ---------------------------------------------------------------------------------

UNPRIVILEGED_USER = "roundhouse-sandbox"


@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], Path]]:
    """The command prefix that runs as an unprivileged user made here, and a directory that user can read."""
    if not ROOT:
        pytest.skip("the tests already run unprivileged: the mode tests above are the unprivileged case")
    system_python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system_python is None:
        pytest.skip("no system python3 for the unprivileged user (the worker's interpreter is under /root)")
    try:
        pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        # Not checked: a test run beside this one may make the user first; getpwnam below says if neither did.
        useradd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", UNPRIVILEGED_USER]
        subprocess.run(useradd, capture_output=True, check=False)
    user = pwd.getpwnam(UNPRIVILEGED_USER)
    home = Path(tempfile.mkdtemp(prefix="roundhouse-unprivileged-"))
    home.chmod(0o755)
    shutil.copytree(REPO / "python" / "src" / "roundhouse" / "sandbox", home / "sandbox")
    shutil.copy(HERE / "sandbox_driver.py", home / "sandbox_driver.py")
    setpriv = [
        shutil.which("setpriv") or "/usr/bin/setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={grp.getgrgid(user.pw_gid).gr_gid}",
        "--clear-groups",
    ]
    yield [*setpriv, "--", system_python, str(home / "sandbox_driver.py")], home
    shutil.rmtree(home)


def bubblewrap_works_for(as_user: list[str]) -> bool:
    """Whether bwrap can make namespaces as that user (unprivileged user namespaces), judged without the module."""
    probe = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"]
    return subprocess.run([*as_user, *probe], capture_output=True, cwd="/", check=False).returncode == 0


def drive(command: list[str], cwd: Path, env: dict[str, str], cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    job = {
        "cases": [{"name": name, "tests": "", "timeout": 3, "memory_mb": 512, **case} for name, case in cases.items()]
    }
    done = subprocess.run(command, input=json.dumps(job), capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def hostile_cases(marker: str, answer: str, port: int) -> dict[str, dict[str, Any]]:
    return {
        "environ": {"code": programs.READ_WORKER_ENVIRON},
        "files": {"code": programs.READ_WORKER_FILE},
        "network": {"code": programs.fill(programs.CONNECT, PORT=port), "tests": "assert True"},
        "daemon": {"code": programs.fill(programs.DAEMON_THEN_HANG, MARKER=marker), "timeout": 1.2},
        "frames": {"code": programs.FRAME_WALK, "tests": f"assert solve() == {answer!r}"},
        "gc": {"code": programs.GC_WALK, "tests": f"assert solve() == {answer!r}"},
        "supervisor": {"code": programs.SUPERVISOR_MEMORY, "tests": f"assert solve() == {answer!r}"},
        "fork bomb": {"code": programs.FORK_BOMB, "timeout": 1},
        "memory": {"code": programs.MEMORY_HOG, "tests": "assert True"},
        "correct": {"code": "def add(a, b):\n    return a + b", "tests": "assert add(2, 3) == 5"},
    }


def unprivileged_env(path: str, secret: str, **extra: str) -> dict[str, str]:
    return {"PATH": path, "LANG": "C.UTF-8", "ROUNDHOUSE_TEST_SECRET": secret, **extra}


@pytest.mark.skipif(not BUBBLEWRAP_WORKS, reason="bwrap is missing or cannot create namespaces here")
def test_unprivileged_under_bubblewrap_every_hostile_program_is_contained(
    unprivileged: tuple[list[str], Path],
) -> None:
    command, home = unprivileged
    secret, marker, answer = f"secret-{uuid.uuid4()}", daemon_marker(), f"answer-{uuid.uuid4()}"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        said = drive(
            command,
            home,
            unprivileged_env(os.environ["PATH"], secret),
            hostile_cases(marker, answer, listener.getsockname()[1]),
        )
        with pytest.raises(BlockingIOError):
            listener.accept()
    results = said["results"]
    if not bubblewrap_works_for(command[:-2]):
        # A host without unprivileged user namespaces: the only correct answer is to refuse.
        assert said["isolation"].startswith("refused: no mode that contains a program runs here")
        assert all("refused" in result for result in results.values())
        return
    assert said["isolation"] == "bubblewrap"
    assert {result["isolation"] for result in results.values()} == {"bubblewrap"}
    assert secret not in results["environ"]["stdout"] and results["environ"]["passed"]
    assert results["files"]["stdout"].startswith("refused:"), results["files"]["stdout"]
    assert "connected" not in results["network"]["stdout"] and not results["network"]["passed"]
    assert results["daemon"]["timed_out"] and processes_with(marker) == []
    for walk in ("frames", "gc", "supervisor"):
        assert answer not in results[walk]["stdout"] and not results[walk]["passed"]
    assert "memory refused" in results["supervisor"]["stdout"], results["supervisor"]["stdout"]
    assert results["fork bomb"]["timed_out"] and not results["fork bomb"]["passed"]
    assert "MemoryError" in results["memory"]["stderr"] and not results["memory"]["passed"]
    assert results["correct"]["passed"], results["correct"]["stderr"]


def test_unprivileged_without_bubblewrap_run_refuses_unless_rlimits_unsafe_is_asked(
    unprivileged: tuple[list[str], Path],
) -> None:
    command, home = unprivileged
    no_bwrap = home / "bin-without-bwrap"
    no_bwrap.mkdir(exist_ok=True)
    secret, marker, answer = f"secret-{uuid.uuid4()}", daemon_marker(), f"answer-{uuid.uuid4()}"
    cases = hostile_cases(marker, answer, 9)

    refused = drive(command, home, unprivileged_env(str(no_bwrap), secret), cases)
    assert refused["isolation"].startswith("refused: no mode that contains a program runs here")
    assert "bwrap is not installed" in refused["isolation"] and "the worker is not root" in refused["isolation"]
    assert all("ROUNDHOUSE_SANDBOX=rlimits-unsafe" in result["refused"] for result in refused["results"].values())

    unsafe = drive(command, home, unprivileged_env(str(no_bwrap), secret, ROUNDHOUSE_SANDBOX="rlimits-unsafe"), cases)
    results = unsafe["results"]
    assert {result["isolation"] for result in results.values()} == {"rlimits-unsafe"}
    # What "unsafe" means here: the worker's own environment and files show.
    assert secret in results["environ"]["stdout"]
    assert results["files"]["stdout"] == f"read: {secret}\n"
    # What it still holds: the process tree, the nonce and tests, forks, memory.
    assert results["daemon"]["timed_out"] and processes_with(marker) == []
    for walk in ("frames", "gc", "supervisor"):
        assert answer not in results[walk]["stdout"] and not results[walk]["passed"]
    assert "memory refused" in results["supervisor"]["stdout"], results["supervisor"]["stdout"]
    assert results["fork bomb"]["timed_out"] and not results["fork bomb"]["passed"]
    assert "MemoryError" in results["memory"]["stderr"] and not results["memory"]["passed"]
    assert results["correct"]["passed"], results["correct"]["stderr"]
