"""Runs roundhouse.sandbox as the user it is started as (the tests start it as an unprivileged one) and prints JSON.

Input on stdin: {"cases": [{"name", "code", "tests", "timeout", "memory_mb"}]}. Output: {"isolation": ...,
"pid": ..., "results": {name: {...SandboxResult fields} | {"refused": message}}}. Imports the sandbox package from its
own directory (a copy of roundhouse/sandbox/), so it needs nothing but the system interpreter.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sandbox  # a copy of roundhouse/sandbox/ beside this file


def main() -> None:
    job = json.load(sys.stdin)
    # One of the worker's own files (0600), holding its secret, as a key file would.
    secret_file = os.path.join(tempfile.mkdtemp(), "worker-key.txt")
    with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as key:
        key.write(os.environ.get("ROUNDHOUSE_TEST_SECRET", ""))
    results: dict[str, object] = {}
    for case in job["cases"]:
        code = case["code"].replace("WORKER_PID", str(os.getpid())).replace("SECRET_FILE", secret_file)
        try:
            result = sandbox.run(code, case["tests"], timeout=case["timeout"], memory_mb=case["memory_mb"])
        except sandbox.SandboxUnavailableError as error:
            results[case["name"]] = {"refused": str(error)}
            continue
        results[case["name"]] = dataclasses.asdict(result)
    shutil.rmtree(os.path.dirname(secret_file))
    print(json.dumps({"isolation": sandbox.isolation(), "pid": os.getpid(), "results": results}))


if __name__ == "__main__":
    main()
