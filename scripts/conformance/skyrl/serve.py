#!/usr/bin/env python3
"""Start SkyRL 0.4.0's Tinker-API server (`skyrl.tinker.api`, JAX backend on CPU) on 127.0.0.1 for a local model folder.

SkyRL's API process re-launches its engine as `uv run <the API's own uv-run flags> --extra tinker --extra jax -m
skyrl.tinker.engine …`: it reads the flags from its PARENT's command line (`_get_parent_uv_run_args` in
skyrl/tinker/api.py), and refuses to start unless that parent looks like `… uv run … -m skyrl.tinker.api`. We have
no uv (and want no resolver run). A stand-in `uv` on PATH does both jobs: it drops everything up to `-m` / `python` /
`--` and runs the venv's Python on the rest, as a child (not exec: the API must see the stand-in as its parent).

    python serve.py --model /tmp/tiny-qwen3 --port 8123 --workdir /tmp/skyrl-run
        [--venv /tmp/skyrl-venv] [--session-timeout-sec 300] [--session-cleanup-interval-sec 60]
        [--backend-config '{"max_lora_adapters":8}'] [--ready-timeout 600] [--foreground]

Prints one JSON line `{"ready": true, "url": …, "pid": …, "startup_seconds": …}` when `GET /api/v1/healthz` answers
AND the engine has loaded the model (the log says "Starting background engine"; the first create_model still pays JIT).
Without --foreground it then exits and leaves the server running (its process group id is the pid printed; stop it
with `kill -TERM -<pid>`); with --foreground it waits and stops the server on Ctrl-C / SIGTERM.
Server output goes to <workdir>/server.log; the database is <workdir>/tinker.db; checkpoints <workdir>/checkpoints.
"""

import argparse
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

UV_STANDIN = """#!/bin/bash
# Stand-in for `uv run …` (SkyRL's Tinker API insists on being started under uv): skip the uv flags, run the venv's Python.
while [ $# -gt 0 ] && [ "$1" != -m ] && [ "$1" != python ] && [ "$1" != -- ]; do shift; done; [ "$1" = -- ] && shift; [ "$1" = python ] && shift; "{python}" "$@"; exit $?
"""

DEFAULT_BACKEND_CONFIG = {
    # SkyRL's own defaults for adapters (32 slots, slot 0 reserved: 31 live models; a create past that fails its future
    # with HTTP 400 "Maximum number of LoRA adapters (32) reached") and rank (32, the SDK's default LoRA rank).
    "max_lora_adapters": 32,
    "max_lora_rank": 32,
    "train_micro_batch_size": 16,
    "sample_max_num_sequences": 16,
}


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="local model folder (config.json, *.safetensors, tokenizer)")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--venv", default=os.environ.get("SKYRL_VENV", "/tmp/skyrl-venv"))
    ap.add_argument("--session-timeout-sec", type=int, default=300)
    ap.add_argument("--session-cleanup-interval-sec", type=int, default=60)
    ap.add_argument("--backend-config", default=None, help="JSON merged over the defaults")
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--foreground", action="store_true")
    args = ap.parse_args()

    t0 = time.monotonic()
    work = Path(args.workdir).resolve()
    (work / "bin").mkdir(parents=True, exist_ok=True)
    (work / "checkpoints").mkdir(exist_ok=True)
    python = str(Path(args.venv).resolve() / "bin" / "python")
    uv = work / "bin" / "uv"
    uv.write_text(UV_STANDIN.replace("{python}", python))
    uv.chmod(uv.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    backend_config = dict(DEFAULT_BACKEND_CONFIG)
    if args.backend_config:
        backend_config.update(json.loads(args.backend_config))
    env = dict(os.environ)
    env.update(
        PATH=f"{work / 'bin'}:{Path(args.venv).resolve() / 'bin'}:{env.get('PATH', '')}",
        JAX_PLATFORMS="cpu",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("VIRTUAL_ENV", None)
    cmd = [
        str(uv),
        "run",
        "-m",
        "skyrl.tinker.api",
        "--host",
        "127.0.0.1",  # loopback only (SkyRL's default is 0.0.0.0)
        "--port",
        str(args.port),
        "--base-model",
        str(Path(args.model).resolve()),
        "--backend",
        "jax",
        "--backend-config",
        json.dumps(backend_config),
        "--checkpoints-base",
        str(work / "checkpoints"),
        "--database-url",
        f"sqlite:///{work / 'tinker.db'}",
        "--session-timeout-sec",
        str(args.session_timeout_sec),
        "--session-cleanup-interval-sec",
        str(args.session_cleanup_interval_sec),
    ]
    log_path = work / "server.log"
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=str(work),
        start_new_session=True,
    )
    (work / "server.pid").write_text(str(proc.pid))
    url = f"http://127.0.0.1:{args.port}"

    def stop(*_):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    deadline = t0 + args.ready_timeout
    health_at = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(json.dumps({"ready": False, "exit_code": proc.returncode, "log": str(log_path)}), flush=True)
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            return 1
        if health_at is None and healthy(url):
            health_at = time.monotonic()
        # The engine logs this once the base model is loaded and its loop runs.
        if health_at is not None and "Starting background engine" in log_path.read_text(errors="replace"):
            break
        time.sleep(0.25)
    else:
        print(json.dumps({"ready": False, "timeout": args.ready_timeout, "log": str(log_path)}), flush=True)
        stop()
        return 1

    print(
        json.dumps(
            {
                "ready": True,
                "url": url,
                "pid": proc.pid,
                "pgid": proc.pid,
                "healthz_seconds": round(health_at - t0, 2),
                "startup_seconds": round(time.monotonic() - t0, 2),
                "log": str(log_path),
                "cmd": " ".join(cmd),
            }
        ),
        flush=True,
    )
    if not args.foreground:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: (stop(), sys.exit(0)))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        stop()
        return 0


if __name__ == "__main__":
    sys.exit(main())
