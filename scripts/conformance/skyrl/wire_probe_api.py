"""The HTTP side of wire_probe.py: one client that records every call (OUT), and the protobuf bodies and replies
Roundhouse's TypeScript client exchanges with a Tinker-API server (encoded with the tinker 0.38 SDK's own schema).
"""

import json
import time

import httpx
import numpy as np
from google.protobuf import json_format
from tinker.proto import tinker_public_pb2 as pb

OUT: list[dict] = []


class Api:
    def __init__(self, url: str):
        self.c = httpx.Client(base_url=url.rstrip("/") + "/api/v1", timeout=400, headers={"x-api-key": "tml-probe"})

    def call(self, name: str, method: str, path: str, body=None, raw: bytes | None = None, show=True, **kw):
        t = time.monotonic()
        if raw is not None:
            r = self.c.request(method, path, content=raw, headers={"content-type": "application/x-protobuf"})
        else:
            r = self.c.request(method, path, json=body, **kw)
        ms = round((time.monotonic() - t) * 1000, 1)
        ctype = r.headers.get("content-type", "")
        if "protobuf" in ctype:
            parsed = {"proto_bytes": len(r.content)}
            for cls in (pb.ForwardBackwardOutput, pb.SampleResponse):
                try:
                    m = cls()
                    m.ParseFromString(r.content)
                    parsed = {"proto": cls.__name__, **decode_proto(m)}
                    break
                except Exception:
                    continue
        else:
            try:
                parsed = r.json() if r.content else None
            except Exception:
                parsed = {"text": r.text[:2000]}
        entry = {
            "name": name,
            "method": method,
            "path": path,
            "request": body if raw is None else "<protobuf>",
            "status": r.status_code,
            "ms": ms,
            "content_type": ctype,
            "response": parsed,
        }
        OUT.append(entry)
        if show:
            print(f"{name:60} {r.status_code} {ms:8.1f}ms {json.dumps(parsed, default=str)[:300]}", flush=True)
        return r.status_code, parsed

    def result(self, name: str, request_id: str, rtype: str):
        return self.call(
            name,
            "POST",
            "/retrieve_future",
            {"request_id": request_id, "allow_metadata_only": False},
            headers={"x-tinker-request-type": rtype},
        )


def decode_proto(m) -> dict:
    d = json_format.MessageToDict(m, preserving_proto_field_name=True)
    if isinstance(m, pb.ForwardBackwardOutput):
        outs = []
        for rec in m.loss_fn_outputs:
            for name, bt in rec.fields.items():
                vals = np.frombuffer(bt.data, dtype=np.float32)
                offs = np.frombuffer(bt.offsets, dtype=np.int64) // 4
                outs.append({name: [vals[offs[i] : offs[i + 1]].round(4).tolist() for i in range(len(offs) - 1)]})
        return {"metrics": dict(m.metrics), "loss_fn_output_type": m.loss_fn_output_type, "fields": outs}
    if isinstance(m, pb.SampleResponse):
        return {
            "sequences": [
                {"tokens": np.frombuffer(s.tokens, np.int32).tolist(), "stop_reason": pb.StopReason.Name(s.stop_reason)}
                for s in m.sequences
            ]
        }
    return d


def fb_body(
    model_id: str, seq: int, tokens: list[int], weights: list[float] | None = None, forward_only=False
) -> bytes:
    inp, tgt = tokens[:-1], tokens[1:]
    w = weights or [1.0] * len(tgt)
    datum = pb.Datum(
        model_input=[pb.Chunk(encoded_text=pb.EncodedTextChunk(tokens=np.asarray(inp, np.int32).tobytes()))],
        loss_fn_inputs={
            "target_tokens": pb.Tensor(
                dense=np.asarray(tgt, np.int64).tobytes(), dtype=pb.DTYPE_INT64, shape=[len(tgt)]
            ),
            "weights": pb.Tensor(dense=np.asarray(w, np.float32).tobytes(), dtype=pb.DTYPE_FLOAT32, shape=[len(tgt)]),
        },
    )
    return pb.ForwardBackwardRequest(
        model_id=model_id, seq_id=seq, data=[datum], loss_fn="cross_entropy", forward_only=forward_only
    ).SerializeToString()
