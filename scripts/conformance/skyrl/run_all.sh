#!/usr/bin/env bash
# Groundwork for issue #30: build the tiny Qwen3, start SkyRL 0.4.0's Tinker API on loopback, and drive it with the
# official tinker SDK 0.38.0 (sdk_smoke.py), with client.ts-shaped raw requests (wire_probe.py) and a latency bench,
# every request captured by proxy.py. Prints the figures; leaves everything under $WORK.
#
#   bash scripts/conformance/skyrl/run_all.sh [WORK=/tmp/skyrl-conformance] [PORT=8131]
#
# Venvs (made if missing; Python 3.12 from pyenv):
#   $SKYRL_VENV  (default /tmp/skyrl-venv):    pip install 'skyrl[tinker,jax]==0.4.0' aiohttp transformers  (~6.6 GB)
#   $TINKER_VENV (default /tmp/tinker038-venv): pip install tinker==0.38.0 transformers                     (~340 MB)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${1:-${WORK:-/tmp/skyrl-conformance}}"
PORT="${2:-${PORT:-8131}}"
PROXY_PORT=$((PORT + 1))
PY312="${PY312:-/root/.pyenv/versions/3.12.1/bin/python}"
SKYRL_VENV="${SKYRL_VENV:-/tmp/skyrl-venv}"
TINKER_VENV="${TINKER_VENV:-/tmp/tinker038-venv}"
mkdir -p "$WORK"
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

if [ ! -x "$SKYRL_VENV/bin/python" ] || ! "$SKYRL_VENV/bin/python" -c 'import skyrl.tinker.api' 2>/dev/null; then
  t=$(now); "$PY312" -m venv "$SKYRL_VENV"
  "$SKYRL_VENV/bin/pip" install -q 'skyrl[tinker,jax]==0.4.0' aiohttp transformers
  echo "install skyrl venv: $(since "$t") s, $(du -sh "$SKYRL_VENV" | cut -f1)"
fi
if [ ! -x "$TINKER_VENV/bin/python" ] || ! "$TINKER_VENV/bin/python" -c 'import tinker' 2>/dev/null; then
  t=$(now); "$PY312" -m venv "$TINKER_VENV"
  "$TINKER_VENV/bin/pip" install -q tinker==0.38.0 transformers
  echo "install tinker venv: $(since "$t") s, $(du -sh "$TINKER_VENV" | cut -f1)"
fi

MODEL="$WORK/tiny-qwen3"
t=$(now)
[ -f "$MODEL/model.safetensors" ] || "$SKYRL_VENV/bin/python" "$HERE/make_tiny_qwen3.py" "$MODEL" 2>/dev/null
echo "model: $(since "$t") s"

SERVER="$WORK/server"
rm -rf "$SERVER"
cleanup() {
  [ -f "$SERVER/server.pid" ] && kill -TERM -- "-$(cat "$SERVER/server.pid")" 2>/dev/null || true
  [ -n "${PROXY_PID:-}" ] && kill "$PROXY_PID" 2>/dev/null || true
}
trap cleanup EXIT
"$SKYRL_VENV/bin/python" "$HERE/serve.py" --model "$MODEL" --port "$PORT" --workdir "$SERVER" \
  --session-timeout-sec 15 --session-cleanup-interval-sec 3 | tee "$WORK/serve.json" | cut -c1-200
"$TINKER_VENV/bin/python" "$HERE/proxy.py" "$PROXY_PORT" "http://127.0.0.1:$PORT" "$WORK/wire.jsonl" >"$WORK/proxy.out" 2>&1 &
PROXY_PID=$!
sleep 1
URL="http://127.0.0.1:$PROXY_PORT"
echo "== sdk_smoke (tinker 0.38.0) =="
"$TINKER_VENV/bin/python" "$HERE/sdk_smoke.py" --url "$URL" --model "$MODEL" --out "$WORK/smoke.json" 2>"$WORK/smoke.err" | cut -c1-220
echo "== wire_probe (client.ts requests) =="
"$TINKER_VENV/bin/python" "$HERE/wire_probe.py" --url "$URL" --model "$MODEL" --expiry-wait 25 --out "$WORK/probe.json" | cut -c1-220
echo "== bench (direct, no proxy) =="
"$TINKER_VENV/bin/python" "$HERE/bench.py" --url "http://127.0.0.1:$PORT" --model "$MODEL" | tee "$WORK/bench.json"
echo "captured: $WORK/wire.jsonl ($(wc -l <"$WORK/wire.jsonl") exchanges); server log: $SERVER/server.log"
