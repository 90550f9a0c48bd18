#!/usr/bin/env python3
"""Per-operation latency of SkyRL's Tinker-API server (JAX on CPU), submit → result, over raw HTTP as client.ts does.

    python bench.py --url http://127.0.0.1:8123 --model /tmp/tiny-qwen3 [--steps 10] [--batch 8] [--seq 64]

Run in the tinker 0.38 venv (protobuf schema). Reports the first call of each kind (it pays JAX's compile for that
shape) apart from the warm mean / p50 / max of the rest, as one JSON line.
"""

import argparse
import json
import statistics
import time

import httpx
import numpy as np
from tinker.proto import tinker_public_pb2 as pb


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--rank", type=int, default=8)
    args = ap.parse_args()
    c = httpx.Client(base_url=args.url.rstrip("/") + "/api/v1", timeout=600)

    def post(path, body):
        r = c.post(path, json=body)
        r.raise_for_status()
        return r.json()

    def wait(rid):
        while True:
            r = c.post("/retrieve_future", json={"request_id": rid, "allow_metadata_only": False})
            if r.status_code == 408:
                continue
            r.raise_for_status()
            return r

    def timed(submit):
        t = time.monotonic()
        rid = submit()["request_id"]
        wait(rid)
        return time.monotonic() - t

    sid = post("/create_session", {"tags": [], "user_metadata": {}, "sdk_version": "0.38.0", "type": "create_session"})[
        "session_id"
    ]
    times: dict[str, list[float]] = {}
    mid_box = {}

    def create():
        f = post(
            "/create_model",
            {
                "session_id": sid,
                "base_model": args.model,
                "lora_config": {"rank": args.rank, "seed": 0},
                "type": "create_model",
            },
        )
        mid_box["id"] = f["model_id"]
        return f

    times["create_model"] = [timed(create)]
    mid = mid_box["id"]
    rng = np.random.default_rng(0)
    seq = [0]

    def fb_body():
        seq[0] += 1
        data = []
        for _ in range(args.batch):
            toks = rng.integers(3, 4000, args.seq + 1)
            data.append(
                pb.Datum(
                    model_input=[
                        pb.Chunk(encoded_text=pb.EncodedTextChunk(tokens=toks[:-1].astype(np.int32).tobytes()))
                    ],
                    loss_fn_inputs={
                        "target_tokens": pb.Tensor(
                            dense=toks[1:].astype(np.int64).tobytes(), dtype=pb.DTYPE_INT64, shape=[args.seq]
                        ),
                        "weights": pb.Tensor(
                            dense=np.ones(args.seq, np.float32).tobytes(), dtype=pb.DTYPE_FLOAT32, shape=[args.seq]
                        ),
                    },
                )
            )
        return pb.ForwardBackwardRequest(
            model_id=mid, seq_id=seq[0], data=data, loss_fn="cross_entropy"
        ).SerializeToString()

    def fb():
        r = c.post("/forward_backward", content=fb_body(), headers={"content-type": "application/x-protobuf"})
        r.raise_for_status()
        return r.json()

    def opt():
        seq[0] += 1
        return post(
            "/optim_step",
            {"model_id": mid, "seq_id": seq[0], "adam_params": {"learning_rate": 1e-3}, "type": "optim_step"},
        )

    for _ in range(args.steps):
        times.setdefault("forward_backward", []).append(timed(fb))
        times.setdefault("optim_step", []).append(timed(opt))
    for i in range(3):
        seq[0] += 1
        times.setdefault("save_weights", []).append(
            timed(lambda i=i: post("/save_weights", {"model_id": mid, "path": f"bench_{i}", "seq_id": seq[0]}))
        )
    for i in range(3):
        seq[0] += 1
        times.setdefault("save_weights_for_sampler(named)", []).append(
            timed(
                lambda i=i: post(
                    "/save_weights_for_sampler", {"model_id": mid, "path": f"bench_s{i}", "seq_id": seq[0]}
                )
            )
        )
    ss = post(
        "/create_sampling_session",
        {"session_id": sid, "sampling_session_seq_id": 0, "model_path": f"tinker://{mid}/bench_s2"},
    )["sampling_session_id"]
    for i in range(4):
        times.setdefault("asample(4 samples, 16 tokens)", []).append(
            timed(
                lambda i=i: post(
                    "/asample",
                    {
                        "num_samples": 4,
                        "sampling_session_id": ss,
                        "seq_id": i,
                        "prompt": {"chunks": [{"type": "encoded_text", "tokens": list(range(10, 30))}]},
                        "sampling_params": {"max_tokens": 16, "temperature": 1.0, "seed": i},
                    },
                )
            )
        )
    seq[0] += 1
    times["load_weights(new model, 1st op)"] = []
    for _ in range(2):
        f = post("/create_model", {"session_id": sid, "base_model": args.model, "lora_config": {"rank": args.rank}})
        wait(f["request_id"])
        times["load_weights(new model, 1st op)"].append(
            timed(
                lambda f=f: post(
                    "/load_weights",
                    {"model_id": f["model_id"], "path": f"tinker://{mid}/weights/bench_2", "optimizer": True},
                )
            )
        )

    def summary(xs):
        warm = xs[1:]
        return {
            "n": len(xs),
            "first_s": round(xs[0], 3),
            "warm_mean_s": round(statistics.mean(warm), 3) if warm else None,
            "warm_p50_s": round(statistics.median(warm), 3) if warm else None,
            "warm_max_s": round(max(warm), 3) if warm else None,
        }

    print(
        json.dumps(
            {"batch": args.batch, "seq": args.seq, "rank": args.rank, "ops": {k: summary(v) for k, v in times.items()}},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
