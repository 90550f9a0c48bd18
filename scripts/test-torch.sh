#!/usr/bin/env bash
# The `@roundhouse.loss.torch` adapter's tests (python/tests_torch), outside `npm test`: CI does not install PyTorch
# (PyPI's Linux wheel brings about 3 GB of CUDA libraries; the SkyRL conformance venv that has it is 6.6 GB). They run
# with any Python that has torch and numpy: ROUNDHOUSE_TORCH_PYTHON, else the SkyRL venv (`npm run conformance:skyrl`
# makes it). The package itself is taken from the checkout (PYTHONPATH), so that Python needs no roundhouse install,
# nor pytest (the Python side's venv lends its own, `npm run python:install`).
set -euo pipefail
cd "$(dirname "$0")/../python"
python="${ROUNDHOUSE_TORCH_PYTHON:-../.roundhouse/venvs/skyrl/bin/python}"
[ -x "$python" ] || { echo "no Python with torch: set ROUNDHOUSE_TORCH_PYTHON (or run npm run conformance:skyrl once)"; exit 2; }
"$python" -c 'import torch, numpy; print(f"torch {torch.__version__}, numpy {numpy.__version__}")'
# pytest (pure Python) from the Python side's venv, when that Python has none of its own: linked into a folder of
# its own so nothing else of that venv is on the path.
tools=""
if ! "$python" -c 'import pytest' 2>/dev/null; then
  site=$(ls -d ../.roundhouse/venvs/python/lib/python3*/site-packages | head -1)
  tools=$(mktemp -d)
  trap 'rm -rf "$tools"' EXIT
  for p in pytest _pytest pluggy iniconfig py.py; do ln -s "$(cd "$site" && pwd)/$p" "$tools/$p"; done
fi
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="src${tools:+:$tools}" "$python" -m pytest tests_torch -q -p no:cacheprovider "$@"
