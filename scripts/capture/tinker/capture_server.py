"""Tiny Tinker capture/emulator server (127.0.0.1 only) used to record the
wire traffic of the official tinker 0.38.0 SDK.

Usage: python capture_server.py PORT LOGFILE [FLAGS_JSON]
FLAGS_JSON is returned verbatim from /api/v1/client/config.
"""

import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import zstandard
from google.protobuf import json_format
from tinker.proto import tinker_public_pb2 as pb

PORT = int(sys.argv[1])
LOG = open(sys.argv[2], "w")
FLAGS = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
LOCK = threading.Lock()
COND = threading.Condition(LOCK)
T0 = time.time()

sessions = {}  # session_id -> dict
models = {}  # model_id -> dict(base_model, rank, last_seq)
futures = {}  # request_id -> dict(kind, payload(bytes|dict), polls, proto)
samplers = {}  # sampling_session_id -> dict(base_model, model_path, clients)
poll_queues = {}  # (ssid, clone) -> list[(cursor, completion)]
cursor_ctr = [0]
checkpoints = {}  # tinker_path -> dict
FAILED410 = []


def log(entry):
    entry["t"] = round(time.time() - T0, 3)
    with LOCK:
        LOG.write(json.dumps(entry) + "\n")
        LOG.flush()


KEEP_HEADERS = {
    "x-api-key",
    "x-idempotency-key",
    "content-type",
    "content-encoding",
    "accept",
    "x-tinker-request-iteration",
    "x-tinker-request-type",
    "x-tinker-create-promise-roundtrip-time",
    "x-tinker-sampling-backpressure",
    "x-stainless-retry-count",
    "x-stainless-read-timeout",
    "x-sdk-method",
    "x-sdk-version",
    "user-agent",
    "x-stainless-async",
    "x-stainless-package-version",
    "x-stainless-os",
    "x-stainless-arch",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
}


def new_future(kind, payload, proto=False, fail=None):
    rid = f"req-{uuid.uuid4().hex[:8]}"
    with LOCK:
        futures[rid] = {"kind": kind, "payload": payload, "proto": proto, "polls": 0, "fail": fail}
    return rid


def fwdbwd_output(req: pb.ForwardBackwardRequest) -> bytes:
    out = pb.ForwardBackwardOutput()
    out.loss_fn_output_type = "tinker.losses:ArrayRecord"
    rec = out.loss_fn_outputs.add()
    rec.type_tag = "ArrayRecord"
    rec.num_datums = len(req.data)
    lp = rec.fields["logprobs"]
    lp.dtype = pb.DTYPE_FLOAT32
    data = b""
    offsets = [0]
    total = 0.0
    for d in req.data:
        tt = d.loss_fn_inputs["target_tokens"]
        n = int(tt.shape[0]) if tt.shape else len(tt.dense) // 8
        arr = np.full(n, -0.5, dtype=np.float32)
        data += arr.tobytes()
        offsets.append(len(data))
        w = d.loss_fn_inputs.get("weights")
        total += float(n) * 0.5 if w is None else 0.5 * float(np.frombuffer(w.dense, dtype=np.float32).sum())
    lp.data = data
    lp.offsets = np.asarray(offsets, dtype=np.int64).tobytes()
    out.metrics["loss:sum"] = total
    return out.SerializeToString()


def sample_output(req: dict) -> bytes:
    out = pb.SampleResponse()
    n = req.get("num_samples", 1)
    mt = req["sampling_params"].get("max_tokens") or 4
    for i in range(n):
        s = out.sequences.add()
        s.stop_reason = pb.STOP_REASON_LENGTH
        s.tokens = np.arange(100 + i, 100 + i + mt, dtype=np.int32).tobytes()
        s.logprobs = np.full(mt, -1.25, dtype=np.float32).tobytes()
    if req.get("prompt_logprobs"):
        plen = sum(len(c["tokens"]) for c in req["prompt"]["chunks"])
        arr = np.full(plen, -2.0, dtype=np.float32)
        arr[0] = np.nan
        out.prompt_logprobs = arr.tobytes()
    return out.SerializeToString()


def push_completion(ssid, clone, rid, size):
    with COND:
        cursor_ctr[0] += 1
        poll_queues.setdefault((ssid, clone), []).append(
            (cursor_ctr[0], {"state": "finished", "request_id": rid, "response_payload_uncompressed_size": size})
        )
        COND.notify_all()


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _send(self, code, obj=None, raw=None, ctype="application/json", extra=None):
        body = raw if raw is not None else (b"" if obj is None else json.dumps(obj).encode())
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        return body

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def handle_any(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        hdrs = {k.lower(): v for k, v in self.headers.items() if k.lower() in KEEP_HEADERS}
        path = self.path
        entry = {"method": method, "path": path, "headers": hdrs}
        body = None
        if self.headers.get("Content-Type", "").startswith("application/x-protobuf"):
            data = raw
            if self.headers.get("Content-Encoding") == "zstd":
                data = zstandard.ZstdDecompressor().decompress(raw)
                entry["zstd_bytes"] = len(raw)
            msg = pb.ForwardBackwardRequest()
            msg.ParseFromString(data)
            body = msg
            d = json_format.MessageToDict(msg, preserving_proto_field_name=True)
            entry["proto_ForwardBackwardRequest"] = d
            entry["proto_bytes"] = len(data)
        elif raw:
            try:
                body = json.loads(raw)
            except Exception:
                body = raw.decode(errors="replace")
            entry["body"] = body
        try:
            code, resp, rraw, ctype, extra = self.route(method, path, body, hdrs)
        except Exception as e:  # pragma: no cover
            import traceback

            traceback.print_exc()
            code, resp, rraw, ctype, extra = 500, {"detail": str(e)}, None, "application/json", None
        self._send(code, resp, rraw, ctype, extra)
        entry["status"] = code
        if rraw is not None:
            entry["resp_proto_bytes"] = len(rraw)
        else:
            entry["resp"] = resp
        log(entry)

    # ------------------------------------------------------------------ routes
    def route(self, method, path, body, hdrs):
        J = "application/json"
        p = path.split("?")[0]
        if p.startswith("/services/tinker-prod"):
            p = p[len("/services/tinker-prod") :]
        if p == "/api/v1/client/config":
            return 200, FLAGS, None, J, None
        if p == "/api/v1/client/dynamic_config" and FLAGS.get("_x_no_dynamic_config"):
            return 404, {"detail": "Not Found"}, None, J, None
        if p == "/api/v1/client/dynamic_config":
            return 200, {"refresh_interval_sec": 300}, None, J, None
        if p == "/api/v1/healthz":
            return 200, {"status": "ok"}, None, J, None
        if p == "/api/v1/get_server_capabilities":
            return (
                200,
                {
                    "supported_models": [
                        {
                            "model_name": "Qwen/Qwen3-8B",
                            "max_context_length": 32768,
                            "trainable": True,
                            "sampleable": True,
                        }
                    ]
                },
                None,
                J,
                None,
            )
        if p == "/api/v1/telemetry":
            return 200, {"status": "accepted"}, None, J, None
        if p == "/api/v1/create_session":
            sid = str(uuid.uuid4())
            sessions[sid] = {"body": body}
            return 200, {"type": "create_session", "session_id": sid}, None, J, None
        if p == "/api/v1/session_heartbeat":
            return 200, {"type": "session_heartbeat"}, None, J, None
        if p.startswith("/api/v1/sessions/") and p.endswith("/finish"):
            return 200, {}, None, J, None
        if p == "/api/v1/create_model":
            mid = f"{body['session_id']}:train:{body['model_seq_id']}"
            models[mid] = {"base_model": body["base_model"], "rank": body["lora_config"]["rank"]}
            rid = new_future("CreateModel", {"model_id": mid, "type": "create_model"})
            return 200, {"request_id": rid, "model_id": mid}, None, J, None
        if p == "/api/v1/get_info":
            mid = body["model_id"]
            m = models[mid]
            return (
                200,
                {
                    "type": "get_info",
                    "model_id": mid,
                    "model_data": {
                        "arch": "qwen3",
                        "model_name": m["base_model"],
                        "tokenizer_id": FLAGS.get("_x_tokenizer_dir", m["base_model"]),
                    },
                    "is_lora": True,
                    "lora_rank": m["rank"],
                    "model_name": m["base_model"],
                },
                None,
                J,
                None,
            )
        if p == "/api/v1/forward_backward":
            if body.loss_fn == "dro":
                rid = new_future(
                    "ForwardBackward",
                    None,
                    fail={"error": "loss_fn dro not supported by capture server", "category": "user"},
                )
            else:
                rid = new_future("ForwardBackward", fwdbwd_output(body), proto=True)
            return 200, {"request_id": rid, "model_id": body.model_id}, None, J, None
        if p == "/api/v1/optim_step":
            rid = new_future("OptimStep", {"metrics": {}})
            return 200, {"request_id": rid, "model_id": body["model_id"]}, None, J, None
        if p == "/api/v1/save_weights":
            path_ = f"tinker://{body['model_id']}/weights/{body['path']}"
            checkpoints[path_] = {"model_id": body["model_id"]}
            rid = new_future("SaveWeights", {"path": path_, "type": "save_weights"})
            return 200, {"request_id": rid, "model_id": body["model_id"]}, None, J, None
        if p == "/api/v1/save_weights_for_sampler":
            mid = body["model_id"]
            if body.get("path"):
                res = {"path": f"tinker://{mid}/sampler_weights/{body['path']}", "type": "save_weights_for_sampler"}
            else:
                sess = mid.split(":train:")[0]
                ssid = f"{sess}:sample:{body['sampling_session_seq_id']}"
                samplers[ssid] = {
                    "base_model": models[mid]["base_model"],
                    "model_path": f"tinker://{mid}/sampler_weights/ephemeral_{body['seq_id']}",
                    "clients": 1,
                }
                res = {"sampling_session_id": ssid, "type": "save_weights_for_sampler"}
            rid = new_future("SaveWeightsForSampler", res)
            return 200, {"request_id": rid, "model_id": mid}, None, J, None
        if p == "/api/v1/load_weights":
            if "session_id" in body:
                mid = f"{body['session_id']}:train:{body['model_seq_id']}"
                src = body["path"][len("tinker://") :].split("/")[0]
                models[mid] = dict(models.get(src, {"base_model": "Qwen/Qwen3-8B", "rank": 8}))
            else:
                mid = body["model_id"]
            rid = new_future("LoadWeights", {"path": body["path"], "model_id": mid, "type": "load_weights"})
            return 200, {"request_id": rid, "model_id": mid}, None, J, None
        if p == "/api/v1/create_sampling_session":
            ssid = f"{body['session_id']}:sample:{body['sampling_session_seq_id']}"
            base = body.get("base_model")
            if base is None and body.get("model_path"):
                src = body["model_path"][len("tinker://") :].split("/")[0]
                base = models.get(src, {}).get("base_model", "Qwen/Qwen3-8B")
            samplers[ssid] = {"base_model": base, "model_path": body.get("model_path"), "clients": 1}
            return 200, {"type": "create_sampling_session", "sampling_session_id": ssid}, None, J, None
        if p == "/api/v1/join_sampling_session":
            s = samplers[body["sampling_session_id"]]
            c = s["clients"]
            s["clients"] += 1
            return 200, {"type": "join_sampling_session", "client_counter": c}, None, J, None
        if p.startswith("/api/v1/samplers/"):
            ssid = p[len("/api/v1/samplers/") :]
            s = samplers[ssid]
            return (
                200,
                {"sampler_id": ssid, "base_model": s["base_model"], "model_path": s["model_path"]},
                None,
                J,
                None,
            )
        if p == "/api/v1/asample":
            payload = sample_output(body)
            rid = new_future("Sample", payload, proto=True)
            seq_ids = [f"{body['sampling_session_id']}:{body['seq_id']}:{i}" for i in range(body.get("num_samples", 1))]
            if FLAGS.get("sample_use_retrieve_futures"):
                clone = body["seq_id"] // 1_000_000_000
                threading.Timer(0.2, push_completion, (body["sampling_session_id"], clone, rid, len(payload))).start()
            if FLAGS.get("_x_no_seq_ids"):
                return 200, {"request_id": rid}, None, J, None
            return 200, {"request_id": rid, "sample_sequence_ids": seq_ids}, None, J, None
        if p == "/api/v1/retrieve_future":
            rid = body["request_id"]
            f = futures.get(rid)
            if f is None:
                return 404, {"detail": "unknown request"}, None, J, None
            f["polls"] += 1
            # Run 2: the first Sample future answers 410 once (promise expired).
            if FLAGS.get("_x_410_first_sample") and f["kind"] == "Sample" and not FAILED410:
                FAILED410.append(rid)
                return 410, {"detail": "promise expired"}, None, J, None
            # First poll of every future: long-poll "still pending" as 408.
            if f["polls"] == 1:
                time.sleep(0.05)
                return 408, {"type": "try_again", "request_id": rid, "queue_state": "active"}, None, J, None
            # Second poll of an OptimStep: 200 try_again (the noisy variant).
            if f["kind"] == "OptimStep" and f["polls"] == 2:
                return 200, {"type": "try_again", "request_id": rid, "queue_state": "active"}, None, J, None
            if f["fail"]:
                return 200, f["fail"], None, J, None
            if f["proto"]:
                # Exercise the metadata-only path once per fwd/bwd future.
                if body.get("allow_metadata_only") and f["kind"] == "ForwardBackward":
                    return (
                        200,
                        {"status": "complete_metadata", "response_payload_size": len(f["payload"])},
                        None,
                        J,
                        None,
                    )
                return 200, None, f["payload"], "application/x-protobuf", None
            return 200, f["payload"], None, J, None
        if p == "/api/v1/retrieve_futures":
            t = body["target"]
            key = (t["sampling_session_id"], t.get("cloned_sampler_id", 0))
            prev = body.get("prev_cursor", 0)
            timeout = body.get("timeout")
            deadline = time.time() + (5.0 if timeout is None else min(timeout, 5.0))
            with COND:
                q = poll_queues.setdefault(key, [])
                q[:] = [x for x in q if x[0] > prev]  # trim acknowledged events
                while not q and time.time() < deadline:
                    COND.wait(timeout=max(0.0, deadline - time.time()))
                comps = [c for _, c in q]
                cur = q[-1][0] if q else prev
            return 200, {"completions": comps, "cursor": cur}, None, J, None
        if p.startswith("/api/v1/training_runs/") and p.endswith("/checkpoints") and method == "GET":
            run = p.split("/")[4]
            cps = [
                {
                    "checkpoint_id": k.split("/", 3)[3],
                    "checkpoint_type": "training" if "/weights/" in k else "sampler",
                    "time": "2026-01-01T00:00:00Z",
                    "tinker_path": k,
                }
                for k in checkpoints
                if k.startswith(f"tinker://{run}/")
            ]
            return 200, {"checkpoints": cps}, None, J, None
        if p == "/api/v1/weights_info":
            return (
                200,
                {
                    "base_model": "Qwen/Qwen3-8B",
                    "is_lora": True,
                    "lora_rank": 8,
                    "train_unembed": True,
                    "train_mlp": True,
                    "train_attn": True,
                },
                None,
                J,
                None,
            )
        return 404, {"detail": f"no route {method} {p}"}, None, J, None


if __name__ == "__main__":
    srv = ThreadingHTTPServer(("127.0.0.1", PORT), H)
    srv.daemon_threads = True
    print("listening", PORT, flush=True)
    srv.serve_forever()
