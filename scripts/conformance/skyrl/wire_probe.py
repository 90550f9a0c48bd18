#!/usr/bin/env python3
"""Probe SkyRL's Tinker-API server with the requests Roundhouse's TypeScript client (providers/tinker/client.ts) sends,
plus the edges the SDK smoke does not reach (unload, seq reuse, unknown futures, session expiry).

    python wire_probe.py --url http://127.0.0.1:8124 --model /tmp/tiny-qwen3 [--expiry-wait 0] [--out probe.json]

Run it in the tinker 0.38 venv (it encodes forward_backward bodies with the SDK's own protobuf schema) and, to
capture bodies, through proxy.py. --expiry-wait N (> the server's --session-timeout-sec + cleanup interval) adds the
heartbeat-expiry probe: a session left without heartbeats for N s, then its model is used.

Each probe prints `name  HTTP-status  body` (bodies cut to 300 chars); the JSON (--out) keeps them whole.
The recording client and the protobuf bodies are in wire_probe_api.py beside it.
"""

import argparse
import json
import sys
import threading
import time

from tinker.proto import tinker_public_pb2 as pb
from wire_probe_api import OUT, Api, fb_body


def probe_heartbeat_expiry(api: Api, model: str, wait: float, toks: list[int], heartbeated_model: str) -> None:
    """Heartbeat expiry: SkyRL expires sessions whose LAST heartbeat is older than --session-timeout-sec; a session
    that never sent one has last_heartbeat_at NULL and is never expired. So: A never beats, B beats once, then both
    wait `wait` s in silence and their models are used; last, a model of the main (heartbeated) session."""
    ids = {}
    for label, beats in (("A (never heartbeats)", 0), ("B (one heartbeat, then silence)", 1)):
        _, s2 = api.call(
            f"create_session {label}",
            "POST",
            "/create_session",
            {"tags": [], "user_metadata": {}, "sdk_version": "0.38.0", "type": "create_session"},
        )
        _, fe = api.call(
            f"create_model in {label}",
            "POST",
            "/create_model",
            {
                "session_id": s2["session_id"],
                "base_model": model,
                "lora_config": {"rank": 8},
                "type": "create_model",
            },
        )
        api.result("retrieve_future CreateModel", fe["request_id"], "CreateModel")
        for _ in range(beats):
            api.call(
                f"session_heartbeat {label}",
                "POST",
                "/session_heartbeat",
                {"session_id": s2["session_id"], "type": "session_heartbeat"},
            )
        ids[label] = (s2["session_id"], fe["model_id"])
    print(f"waiting {wait}s without heartbeats…", flush=True)
    time.sleep(wait)
    for label, (s_id, m_id) in ids.items():
        api.call(f"get_info after the wait, {label}", "POST", "/get_info", {"model_id": m_id, "type": "get_info"})
        _, fx = api.call(
            f"forward_backward after the wait, {label}", "POST", "/forward_backward", raw=fb_body(m_id, 1, toks)
        )
        if isinstance(fx, dict) and "request_id" in fx:
            api.result(f"retrieve_future after the wait, {label}", fx["request_id"], "ForwardBackward")
        api.call(
            f"session_heartbeat after the wait, {label}",
            "POST",
            "/session_heartbeat",
            {"session_id": s_id, "type": "session_heartbeat"},
        )
        _, fe2 = api.call(
            f"create_model after the wait, {label}",
            "POST",
            "/create_model",
            {"session_id": s_id, "base_model": model, "lora_config": {"rank": 8}, "type": "create_model"},
        )
        if isinstance(fe2, dict) and "request_id" in fe2:
            api.result(f"retrieve_future CreateModel after the wait, {label}", fe2["request_id"], "CreateModel")
    api.call(
        "get_info of a model in the heartbeated session",
        "POST",
        "/get_info",
        {"model_id": heartbeated_model, "type": "get_info"},
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--expiry-wait", type=float, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()
    api = Api(args.url)
    toks = list(range(10, 40))

    # ── provisioning as client.ts does it ──
    meta = {"roundhouse_owner": "rh-probe-owner", "roundhouse_base_model": args.model}
    _, s = api.call(
        "create_session (client.ts body, display_name)",
        "POST",
        "/create_session",
        {
            "tags": ["roundhouse"],
            "user_metadata": meta,
            "sdk_version": "0.38.0",
            "display_name": "rh-probe-owner",
            "type": "create_session",
        },
    )
    sid = s["session_id"]
    stop = threading.Event()

    def beat():
        while not stop.wait(5):
            api.call(
                "heartbeat", "POST", "/session_heartbeat", {"session_id": sid, "type": "session_heartbeat"}, show=False
            )

    threading.Thread(target=beat, daemon=True).start()
    api.call(
        "sessions/search by user_metadata",
        "POST",
        "/sessions/search",
        {"user_metadata": meta, "statuses": [{"type": "active"}], "limit": 1},
    )
    api.call("GET sessions/{id}", "GET", f"/sessions/{sid}")
    api.call(
        "session_heartbeat (known session)",
        "POST",
        "/session_heartbeat",
        {"session_id": sid, "type": "session_heartbeat"},
    )
    api.call(
        "session_heartbeat (unknown session)",
        "POST",
        "/session_heartbeat",
        {"session_id": "session_nope", "type": "session_heartbeat"},
    )

    # ── create_model as client.ts sends it (model_seq_id, user_metadata, optimizer_config) ──
    _, f = api.call(
        "create_model (client.ts body)",
        "POST",
        "/create_model",
        {
            "session_id": sid,
            "model_seq_id": 0,
            "base_model": args.model,
            "lora_config": {"rank": 8, "seed": 1, "train_unembed": True, "train_mlp": True, "train_attn": True},
            "user_metadata": {"roundhouse_owner": "rh-probe-owner", "display_name": "probe"},
            "optimizer_config": {"type": "adamw"},
            "type": "create_model",
        },
    )
    mid = f["model_id"]
    api.result("retrieve_future CreateModel", f["request_id"], "CreateModel")
    api.call(
        "the id client.ts computes (<session>:train:0): get_info",
        "POST",
        "/get_info",
        {"model_id": f"{sid}:train:0", "type": "get_info"},
    )
    api.call(
        "create_model resent, same session/model_seq_id (dedupe?)",
        "POST",
        "/create_model",
        {
            "session_id": sid,
            "model_seq_id": 0,
            "base_model": args.model,
            "lora_config": {"rank": 8, "seed": 1},
            "type": "create_model",
        },
    )
    api.call(
        "create_model, unknown session",
        "POST",
        "/create_model",
        {"session_id": "session_nope", "base_model": args.model, "lora_config": {"rank": 8}},
    )
    api.call("get_info (returned id)", "POST", "/get_info", {"model_id": mid, "type": "get_info"})

    # ── operations, seq ids as client.ts numbers them (create = 0) ──
    _, f1 = api.call("forward_backward seq 1 (protobuf)", "POST", "/forward_backward", raw=fb_body(mid, 1, toks))
    api.result("retrieve_future ForwardBackward (metrics? loss:sum?)", f1["request_id"], "ForwardBackward")
    _, _f1b = api.call(
        "forward_backward seq 1 resent, same body (dedupe)", "POST", "/forward_backward", raw=fb_body(mid, 1, toks)
    )
    api.call(
        "forward_backward seq 1 resent, other body (409?)", "POST", "/forward_backward", raw=fb_body(mid, 1, toks[:-3])
    )
    w0 = [1.0] * 10 + [0.0] * 19
    _, fw = api.call(
        "forward_backward seq 2, weights 0 on the tail", "POST", "/forward_backward", raw=fb_body(mid, 2, toks, w0)
    )
    api.result("retrieve_future (elementwise_loss masked?)", fw["request_id"], "ForwardBackward")
    adam = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0, "grad_clip_norm": 0}
    _, fo = api.call(
        "optim_step seq 3 (client.ts body, grad_clip_norm)",
        "POST",
        "/optim_step",
        {"model_id": mid, "seq_id": 3, "adam_params": adam, "type": "optim_step"},
    )
    api.result("retrieve_future OptimStep", fo["request_id"], "OptimStep")
    api.call(
        "optim_step seq 3 resent, other body (409?)",
        "POST",
        "/optim_step",
        {"model_id": mid, "seq_id": 3, "adam_params": {**adam, "learning_rate": 5e-3}, "type": "optim_step"},
    )

    # ── checkpoint names: client.ts checkpointName() keeps '.', SkyRL wants ^[A-Za-z0-9_-]+$ ──
    api.call(
        "save_weights name with '.' (tickets-v1.2-…)",
        "POST",
        "/save_weights",
        {"model_id": mid, "path": "tickets-v1.2-ab12cd34-st1", "seq_id": 4, "type": "save_weights"},
    )
    _, fs = api.call(
        "save_weights portable name",
        "POST",
        "/save_weights",
        {"model_id": mid, "path": "tickets-v1_2-ab12cd34-st1", "seq_id": 4, "type": "save_weights"},
    )
    _, saved = api.result("retrieve_future SaveWeights", fs["request_id"], "SaveWeights")
    train_path = saved["path"]
    api.call(
        "save_weights same name again (409?)",
        "POST",
        "/save_weights",
        {"model_id": mid, "path": "tickets-v1_2-ab12cd34-st1", "seq_id": 5, "type": "save_weights"},
    )
    _, fsw = api.call(
        "save_weights_for_sampler named (client.ts body)",
        "POST",
        "/save_weights_for_sampler",
        {
            "model_id": mid,
            "path": "tickets-v1_2-sampler-st1",
            "seq_id": 6,
            "kind": "snapshot",
            "type": "save_weights_for_sampler",
        },
    )
    _, sw = api.result("retrieve_future SaveWeightsForSampler (path form)", fsw["request_id"], "SaveWeightsForSampler")
    sampler_path = sw["path"]
    _, cs = api.call(
        "create_sampling_session on the returned path",
        "POST",
        "/create_sampling_session",
        {
            "session_id": sid,
            "sampling_session_seq_id": 0,
            "model_path": sampler_path,
            "type": "create_sampling_session",
        },
    )
    _, fsa = api.call(
        "asample on it (client.ts body)",
        "POST",
        "/asample",
        {
            "num_samples": 2,
            "sampling_params": {"max_tokens": 4, "temperature": 1, "top_k": -1, "top_p": 1, "seed": 3},
            "prompt_logprobs": False,
            "topk_prompt_logprobs": 0,
            "type": "sample",
            "sampling_session_id": cs["sampling_session_id"],
            "seq_id": 0,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": toks[:8]}]},
        },
    )
    api.result("retrieve_future Sample", fsa["request_id"], "Sample")
    _, fsync = api.call(
        "save_weights_for_sampler unnamed (weights sync)",
        "POST",
        "/save_weights_for_sampler",
        {
            "model_id": mid,
            "seq_id": 7,
            "sampling_session_seq_id": 1,
            "kind": "snapshot",
            "type": "save_weights_for_sampler",
        },
    )
    _, sync = api.result("retrieve_future (sampling_session_id?)", fsync["request_id"], "SaveWeightsForSampler")
    api.call("GET samplers/{id} of the sync", "GET", f"/samplers/{sync.get('sampling_session_id')}")
    api.call("GET training_runs/{model}/checkpoints", "GET", f"/training_runs/{mid}/checkpoints")
    api.call("GET models/{model}/checkpoints", "GET", f"/models/{mid}/checkpoints")
    api.call("weights_info (training path)", "POST", "/weights_info", {"tinker_path": train_path})
    api.call("GET training_runs (user_metadata?)", "GET", "/training_runs", params={"limit": 100})
    api.call("GET training_runs/{model}", "GET", f"/training_runs/{mid}")
    api.call("GET training_runs/<unknown>", "GET", "/training_runs/model_nope")

    # ── load_weights: session-addressed (SDK 0.38 / client.ts) vs first op of a new model (SDK 0.25) ──
    api.call(
        "load_weights session-addressed (client.ts openSession)",
        "POST",
        "/load_weights",
        {
            "session_id": sid,
            "model_seq_id": 1,
            "path": train_path,
            "optimizer": True,
            "user_metadata": {},
            "type": "load_weights",
        },
    )
    _, f2 = api.call(
        "create_model (for a load)",
        "POST",
        "/create_model",
        {
            "session_id": sid,
            "model_seq_id": 1,
            "base_model": args.model,
            "lora_config": {"rank": 8},
            "type": "create_model",
        },
    )
    api.result("retrieve_future CreateModel", f2["request_id"], "CreateModel")
    _, fl = api.call(
        "load_weights model_id-addressed, 1st op, seq_id 1",
        "POST",
        "/load_weights",
        {"model_id": f2["model_id"], "seq_id": 1, "path": train_path, "optimizer": True, "type": "load_weights"},
    )
    api.result("retrieve_future LoadWeights", fl["request_id"], "LoadWeights")
    api.call(
        "load_weights again on it (2nd op)",
        "POST",
        "/load_weights",
        {"model_id": f2["model_id"], "seq_id": 2, "path": train_path, "optimizer": True, "type": "load_weights"},
    )
    _, f3 = api.call(
        "create_model (load into a different rank)",
        "POST",
        "/create_model",
        {
            "session_id": sid,
            "model_seq_id": 2,
            "base_model": args.model,
            "lora_config": {"rank": 4},
            "type": "create_model",
        },
    )
    api.result("retrieve_future CreateModel", f3["request_id"], "CreateModel")
    _, fl3 = api.call(
        "load_weights rank-8 checkpoint into rank-4 model",
        "POST",
        "/load_weights",
        {"model_id": f3["model_id"], "seq_id": 1, "path": train_path, "optimizer": False, "type": "load_weights"},
    )
    if isinstance(fl3, dict) and "request_id" in fl3:
        api.result("retrieve_future LoadWeights (rank mismatch)", fl3["request_id"], "LoadWeights")
    api.call(
        "load_weights path without /weights/",
        "POST",
        "/load_weights",
        {"model_id": f3["model_id"], "seq_id": 1, "path": sampler_path, "optimizer": False},
    )

    # ── deletes: the forms client.ts builds, and the sampler path as SkyRL returns it ──
    name = sampler_path.rsplit("/", 1)[1]
    api.call("DELETE …/checkpoints/<bare name> (no kind)", "DELETE", f"/training_runs/{mid}/checkpoints/{name}")
    api.call(
        "DELETE …/checkpoints/sampler_weights/<name>",
        "DELETE",
        f"/training_runs/{mid}/checkpoints/sampler_weights/{name}",
    )
    api.call("DELETE the same again (404?)", "DELETE", f"/training_runs/{mid}/checkpoints/sampler_weights/{name}")
    tname = train_path.rsplit("/", 1)[1]
    api.call("DELETE …/checkpoints/weights/<name>", "DELETE", f"/training_runs/{mid}/checkpoints/weights/{tname}")
    api.call("DELETE name with '.'", "DELETE", f"/training_runs/{mid}/checkpoints/weights/a.b")

    # ── futures ──
    api.call(
        "retrieve_future unknown id", "POST", "/retrieve_future", {"request_id": "999999", "allow_metadata_only": False}
    )
    api.call(
        "retrieve_future non-numeric id",
        "POST",
        "/retrieve_future",
        {"request_id": "req-abc", "allow_metadata_only": False},
    )
    _, fr = api.call(
        "create_model rank 64 (> max_lora_rank)",
        "POST",
        "/create_model",
        {
            "session_id": sid,
            "model_seq_id": 3,
            "base_model": args.model,
            "lora_config": {"rank": 64},
            "type": "create_model",
        },
    )
    api.result("retrieve_future of the failed create", fr["request_id"], "CreateModel")
    api.call("forward_backward JSON body (not protobuf)", "POST", "/forward_backward", {"model_id": mid, "seq_id": 8})
    api.call(
        "forward_backward loss_fn 'dro' (unknown)",
        "POST",
        "/forward_backward",
        raw=pb.ForwardBackwardRequest(model_id=mid, seq_id=8, data=[], loss_fn="dro").SerializeToString(),
    )

    # ── unload ──
    _, fu = api.call(
        "unload_model (client.ts body)", "POST", "/unload_model", {"model_id": mid, "type": "unload_model"}
    )
    api.result("retrieve_future UnloadModel", fu["request_id"], "UnloadModel")
    api.call("get_info after unload (status?)", "POST", "/get_info", {"model_id": mid, "type": "get_info"})
    _, fa = api.call("forward_backward after unload (submit)", "POST", "/forward_backward", raw=fb_body(mid, 9, toks))
    if isinstance(fa, dict) and "request_id" in fa:
        api.result("retrieve_future after unload", fa["request_id"], "ForwardBackward")
    _, fu2 = api.call("unload_model again", "POST", "/unload_model", {"model_id": mid, "type": "unload_model"})
    if isinstance(fu2, dict) and "request_id" in fu2:
        api.result("retrieve_future unload again", fu2["request_id"], "UnloadModel")
    api.call("unload_model unknown", "POST", "/unload_model", {"model_id": "model_nope", "type": "unload_model"})
    api.call("sessions/{id}/finish", "POST", f"/sessions/{sid}/finish", {"reason": {"type": "success"}, "detail": None})

    if args.expiry_wait > 0:
        probe_heartbeat_expiry(api, args.model, args.expiry_wait, toks, f2["model_id"])

    stop.set()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(OUT, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
