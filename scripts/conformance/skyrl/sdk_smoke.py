#!/usr/bin/env python3
"""Drive SkyRL's Tinker-API server with the OFFICIAL tinker SDK (0.38.0), case by case, and record what works.

    python sdk_smoke.py --url http://127.0.0.1:8124 --model /tmp/tiny-qwen3 [--out results.json] [--steps 3]

Run it in a venv with `tinker==0.38.0` (NOT the SkyRL venv, which pins the SDK it serves, 0.25.0). Point --url at
the server, or at proxy.py in front of it to capture the wire. --model is the base model name the server was started
with (SkyRL's `--base-model`, a local folder: `get_server_capabilities` reports it as is).

Every case prints one line `PASS|FAIL|HANG name seconds detail` and the run ends with a JSON summary (also --out).
A FAIL is a finding, not a bug in this script: the exit code is 0 unless the basic create/train loop itself fails.
"""

import argparse
import concurrent.futures as cf
import json
import os
import sys
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tinker
from tinker import types

RESULTS: list[dict] = []
POOL = cf.ThreadPoolExecutor(max_workers=4)


def case(name: str, fn, timeout: float = 180.0, expect_fail: bool = False):
    """Run fn() with a deadline; record PASS/FAIL/HANG, the value (or error) and the time."""
    t = time.monotonic()
    fut = POOL.submit(fn)
    try:
        value = fut.result(timeout=timeout)
        status, detail = "PASS", value
    except cf.TimeoutError:
        status, detail, value = "HANG", f"no result within {timeout}s", None
    except BaseException as e:
        status, value = "FAIL", None
        detail = f"{type(e).__module__}.{type(e).__name__}: {e}"
        body = getattr(e, "body", None)
        if body is not None:
            detail += f" | body={body!r}"
        resp = getattr(e, "response", None)
        if resp is not None and hasattr(resp, "status_code"):
            detail += f" | http={resp.status_code}"
    dt = round(time.monotonic() - t, 3)
    shown = json.dumps(detail, default=str)
    print(
        f"{status:4} {name:55} {dt:8.3f}s {'(expected) ' if expect_fail and status != 'PASS' else ''}{shown[:400]}",
        flush=True,
    )
    RESULTS.append(
        {
            "case": name,
            "status": status,
            "seconds": dt,
            "expected_fail": expect_fail,
            "detail": json.loads(json.dumps(detail, default=str)),
        }
    )
    return value


def datum(tokens: list[int], weights: list[float] | None = None, **extra) -> types.Datum:
    inp, tgt = tokens[:-1], tokens[1:]
    inputs = {
        "target_tokens": types.TensorData(data=tgt, dtype="int64", shape=[len(tgt)]),
        "weights": types.TensorData(data=weights or [1.0] * len(tgt), dtype="float32", shape=[len(tgt)]),
    }
    for k, v in extra.items():
        inputs[k] = types.TensorData(data=v, dtype="float32", shape=[len(v)])
    return types.Datum(model_input=types.ModelInput.from_ints(inp), loss_fn_inputs=inputs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rank", type=int, default=8)
    args = ap.parse_args()
    t_all = time.monotonic()
    print(f"tinker SDK {tinker.__version__} -> {args.url}", flush=True)

    sc = case("ServiceClient()", lambda: tinker.ServiceClient(base_url=args.url, api_key="tml-skyrl-conformance"))
    if sc is None:
        return 1
    case("get_server_capabilities", lambda: sc.get_server_capabilities().model_dump())
    tc = case(
        "create_lora_training_client(rank, seed, user_metadata)",
        lambda: sc.create_lora_training_client(
            base_model=args.model,
            rank=args.rank,
            seed=0,
            user_metadata={"roundhouse_owner": "smoke", "roundhouse_base_model": args.model},
        ).result(),
        timeout=300,
    )
    if tc is None:
        return 1
    model_id = tc.model_id
    case("training_client.model_id form", lambda: model_id)
    tok = case("training_client.get_tokenizer (offline, local folder)", lambda: type(tc.get_tokenizer()).__name__)
    tokenizer = tc.get_tokenizer() if tok else None
    text = "<|im_start|>user\nHello there, how are you?<|im_end|>\n<|im_start|>assistant\nFine, thanks.<|im_end|>"
    ids = tokenizer.encode(text) if tokenizer else list(range(5, 40))
    data = [datum(ids), datum([*ids[: len(ids) // 2], 2], None)]

    # ── the training loop: per-op latency (submit → result) ──
    fb_times, opt_times, losses = [], [], []
    for step in range(args.steps):

        def fb():
            t = time.monotonic()
            out = tc.forward_backward(data, "cross_entropy").result()
            fb_times.append(time.monotonic() - t)
            lps = [o["logprobs"].tolist() for o in out.loss_fn_outputs]
            loss = -sum(
                sum(lp * w for lp, w in zip(row, d.loss_fn_inputs["weights"].tolist(), strict=False))
                for row, d in zip(lps, data, strict=False)
            )
            losses.append(loss)
            return {
                "metrics": out.metrics,
                "loss_fn_output_type": out.loss_fn_output_type,
                "outputs_fields": [sorted(o.keys()) for o in out.loss_fn_outputs],
                "n_logprobs": [len(x) for x in lps],
                "loss_from_logprobs": loss,
            }

        def opt():
            t = time.monotonic()
            out = tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
            opt_times.append(time.monotonic() - t)
            return out.model_dump()

        r = case(f"forward_backward cross_entropy #{step + 1}", fb, timeout=300)
        if r is None and step == 0:
            return 1
        case(f"optim_step #{step + 1}", opt, timeout=300)

    case(
        "forward (forward_only) cross_entropy", lambda: tc.forward(data, "cross_entropy").result().metrics, timeout=300
    )
    n0 = len(ids) - 1
    rl = [datum(ids, None, logprobs=[-1.0] * n0, advantages=[0.5] * n0)]
    case(
        "forward_backward importance_sampling",
        lambda: tc.forward_backward(rl, "importance_sampling").result().metrics,
        timeout=300,
    )
    case(
        "forward_backward ppo (clip thresholds)",
        lambda: (
            tc.forward_backward(rl, "ppo", loss_fn_config={"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
            .result()
            .metrics
        ),
        timeout=300,
    )
    case(
        "optim_step after RL losses",
        lambda: tc.optim_step(types.AdamParams(learning_rate=1e-3)).result().model_dump(),
        timeout=300,
    )

    # ── checkpoints ──
    saved = case("save_state('smoke_step3')", lambda: tc.save_state("smoke_step3").result().model_dump(), timeout=300)
    path = saved["path"] if saved else None
    case(
        "save_state('bad.name-v1.2') (a '.' in the name)",
        lambda: tc.save_state("bad.name-v1.2").result().model_dump(),
        timeout=120,
        expect_fail=True,
    )
    case(
        "load_state(path) on a model that already trained",
        lambda: tc.load_state(path).result().model_dump(),
        timeout=120,
        expect_fail=True,
    )
    if path:
        case(
            "create_training_client_from_state(path)",
            lambda: sc.create_training_client_from_state(path).result().model_id,
            timeout=180,
            expect_fail=True,
        )
        case(
            "create_training_client_from_state_with_optimizer(path)",
            lambda: sc.create_training_client_from_state_with_optimizer(path).result().model_id,
            timeout=180,
            expect_fail=True,
        )

        def sdk025_style():
            fresh = sc.create_lora_training_client(base_model=args.model, rank=args.rank).result()
            fresh.load_state_with_optimizer(path).result()
            out = fresh.forward_backward(data, "cross_entropy").result()
            fresh.optim_step(types.AdamParams(learning_rate=1e-2)).result()
            lps = [o["logprobs"].tolist() for o in out.loss_fn_outputs]
            loss = -sum(sum(row) for row in lps)
            return {
                "model_id": fresh.model_id,
                "loss_after_load": loss,
                "loss_last_trained": losses[-1] if losses else None,
            }

        case("create_lora_training_client + load_state_with_optimizer as 1st op (0.25 way)", sdk025_style, timeout=300)

    sampler_path = None
    sw = case(
        "save_weights_for_sampler('smoke_sampler')",
        lambda: tc.save_weights_for_sampler("smoke_sampler").result().model_dump(),
        timeout=300,
    )
    if sw:
        sampler_path = sw.get("path")
    prompt = types.ModelInput.from_ints(ids[:12])
    params = types.SamplingParams(max_tokens=8, temperature=1.0, seed=1)
    if sampler_path:
        scl = case(
            "create_sampling_client(model_path=<sampler path>)",
            lambda: sc.create_sampling_client(model_path=sampler_path),
            timeout=120,
        )
        if scl is not None:
            case(
                "sample (named sampler path, 2 samples, prompt logprobs)",
                lambda: [
                    (s.tokens, s.stop_reason)
                    for s in scl.sample(prompt, num_samples=2, sampling_params=params, include_prompt_logprobs=True)
                    .result(timeout=240)
                    .sequences
                ],
                timeout=300,
                expect_fail=True,
            )
    scl2 = case(
        "save_weights_and_get_sampling_client() (ephemeral)",
        lambda: tc.save_weights_and_get_sampling_client().result(),
        timeout=300,
    )
    if scl2 is not None:
        case(
            "sample (ephemeral sampling session)",
            lambda: [s.tokens for s in scl2.sample(prompt, 1, params).result(timeout=240).sequences],
            timeout=300,
            expect_fail=True,
        )
        case(
            "compute_logprobs",
            lambda: scl2.compute_logprobs(prompt).result(timeout=240)[:4],
            timeout=300,
            expect_fail=True,
        )
    scl3 = case(
        "create_sampling_client(base_model=...)", lambda: sc.create_sampling_client(base_model=args.model), timeout=120
    )
    if scl3 is not None:
        case(
            "sample (base model)",
            lambda: [s.tokens for s in scl3.sample(prompt, 1, params).result(timeout=240).sequences],
            timeout=300,
            expect_fail=True,
        )

    # ── REST ──
    rest = case("create_rest_client", lambda: sc.create_rest_client())
    if rest is not None:
        case("rest.list_training_runs", lambda: rest.list_training_runs(limit=50).result().model_dump(), timeout=60)
        case(
            "rest.get_training_run(model_id)", lambda: rest.get_training_run(model_id).result().model_dump(), timeout=60
        )
        case(
            "rest.list_checkpoints(model_id)", lambda: rest.list_checkpoints(model_id).result().model_dump(), timeout=60
        )
        if sampler_path:
            case(
                "rest.delete_checkpoint_from_tinker_path(<sampler path as returned>)",
                lambda: rest.delete_checkpoint_from_tinker_path(sampler_path).result(),
                timeout=60,
                expect_fail=True,
            )
            case(
                "rest.delete_checkpoint(model_id, 'sampler_weights/smoke_sampler')",
                lambda: rest.delete_checkpoint(model_id, "sampler_weights/smoke_sampler").result(),
                timeout=60,
            )
        if path:
            case(
                "rest.delete_checkpoint_from_tinker_path(<training path>)",
                lambda: rest.delete_checkpoint_from_tinker_path(path).result(),
                timeout=60,
            )
        sid = (
            sc.holder.get_session_id()
            if hasattr(sc.holder, "get_session_id")
            else getattr(sc.holder, "_session_id", None)
        )
        case("session id (create_session)", lambda: sid)
        case(
            "rest.get_session(session_id)",
            lambda: rest.get_session(sid).result().model_dump(),
            timeout=60,
            expect_fail=True,
        )
        case(
            "rest.search_sessions",
            lambda: rest.search_sessions(types.SessionSearchRequest(limit=5)).result().model_dump(),
            timeout=60,
            expect_fail=True,
        )

    # ── a failed future ──
    case(
        "create_lora_training_client(rank=64 > server max 32): failed future",
        lambda: sc.create_lora_training_client(base_model=args.model, rank=64).result().model_id,
        timeout=180,
        expect_fail=True,
    )
    case(
        "create_lora_training_client(base_model='Qwen/Qwen3-8B') (not served)",
        lambda: sc.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8).result().model_id,
        timeout=180,
        expect_fail=True,
    )

    case(
        "ServiceClient.close('success') (sessions/{id}/finish)",
        lambda: sc.close("success", detail="smoke done").result(),
        timeout=120,
        expect_fail=True,
    )

    def pct(xs):
        return {
            "n": len(xs),
            "first": round(xs[0], 3) if xs else None,
            "rest_mean": round(sum(xs[1:]) / max(1, len(xs) - 1), 3) if len(xs) > 1 else None,
        }

    summary = {
        "sdk": tinker.__version__,
        "url": args.url,
        "model": args.model,
        "model_id": model_id,
        "forward_backward_seconds": pct(fb_times),
        "optim_step_seconds": pct(opt_times),
        "losses_from_logprobs": [round(x, 4) for x in losses],
        "total_seconds": round(time.monotonic() - t_all, 1),
        "cases": RESULTS,
        "counts": {s: sum(1 for r in RESULTS if r["status"] == s) for s in ("PASS", "FAIL", "HANG")},
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "cases"}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1, default=str)
    sys.stdout.flush()
    os._exit(0)  # SDK background threads (heartbeat, telemetry) and any hung case thread must not keep us alive


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        os._exit(2)
