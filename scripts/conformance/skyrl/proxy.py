#!/usr/bin/env python3
"""Loopback logging proxy: records every request/response between a Tinker client and a server as JSON lines.

    python proxy.py LISTEN_PORT UPSTREAM_URL LOGFILE

Listens on 127.0.0.1:LISTEN_PORT only; forwards to UPSTREAM_URL (e.g. http://127.0.0.1:8123). JSON bodies are logged
as JSON; protobuf bodies (forward_backward requests, ForwardBackwardOutput / SampleResponse results) are decoded with
the tinker SDK's own schema when `tinker` is importable (run it in the SDK venv), else logged as size + base64 prefix.
Every line: t, method, path, status, ms, req_headers (the Tinker-relevant ones), req, resp_content_type, resp.
"""

import base64
import http.client
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None
try:
    from google.protobuf import json_format
    from tinker.proto import tinker_public_pb2 as pb
except ImportError:  # pragma: no cover
    pb = None

LISTEN = int(sys.argv[1])
UP = urlparse(sys.argv[2])
LOG = open(sys.argv[3], "a")
LOCK = threading.Lock()
T0 = time.time()
KEEP = {
    "content-type",
    "content-encoding",
    "accept",
    "x-tinker-request-type",
    "x-tinker-request-iteration",
    "x-sdk-method",
    "x-sdk-version",
    "x-idempotency-key",
    "user-agent",
}
HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "host",
    "content-length",
}


def decode(body: bytes, content_type: str, path: str, request: bool, encoding: str | None = None):
    if not body:
        return None
    if encoding == "zstd" and zstandard is not None:
        body = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 30)
    if "protobuf" in (content_type or ""):
        if pb is not None:
            if request and path.endswith("/forward_backward"):
                msg = pb.ForwardBackwardRequest()
            elif not request:
                # Results: try ForwardBackwardOutput, then SampleResponse (the request-type header tells, but keep it
                # simple).
                for cls in (pb.ForwardBackwardOutput, pb.SampleResponse):
                    msg = cls()
                    try:
                        msg.ParseFromString(body)
                        d = json_format.MessageToDict(msg, preserving_proto_field_name=True)
                        if d:
                            return {"proto": cls.__name__, "msg": d, "bytes": len(body)}
                    except Exception:
                        continue
                msg = None
            else:
                msg = None
            if msg is not None:
                try:
                    msg.ParseFromString(body)
                    return {
                        "proto": type(msg).__name__,
                        "msg": json_format.MessageToDict(msg, preserving_proto_field_name=True),
                        "bytes": len(body),
                    }
                except Exception as e:
                    return {"proto_error": str(e), "bytes": len(body)}
        return {"bytes": len(body), "b64": base64.b64encode(body[:256]).decode()}
    try:
        return json.loads(body)
    except Exception:
        return {"text": body[:2000].decode("utf-8", "replace")}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def _proxy(self):
        t = time.time()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn = http.client.HTTPConnection(UP.hostname, UP.port, timeout=600)
        path = (UP.path.rstrip("/") + self.path) if UP.path not in ("", "/") else self.path
        try:
            conn.request(self.command, path, body=body or None, headers=headers)
            r = conn.getresponse()
            data = r.read()
            status, rheaders = r.status, r.getheaders()
        except Exception as e:
            data, status, rheaders = (
                json.dumps({"proxy_error": str(e)}).encode(),
                502,
                [("Content-Type", "application/json")],
            )
        finally:
            conn.close()
        self.send_response(status)
        ctype = ""
        for k, v in rheaders:
            if k.lower() in HOP:
                continue
            if k.lower() == "content-type":
                ctype = v
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        entry = {
            "t": round(t - T0, 3),
            "ms": round((time.time() - t) * 1000, 1),
            "method": self.command,
            "path": self.path,
            "status": status,
            "req_headers": {k.lower(): v for k, v in self.headers.items() if k.lower() in KEEP},
            "req": decode(
                body, self.headers.get("Content-Type", ""), self.path, True, self.headers.get("Content-Encoding")
            ),
            "resp_content_type": ctype,
            "resp": decode(data, ctype, self.path, False),
        }
        with LOCK:
            LOG.write(json.dumps(entry, default=str) + "\n")
            LOG.flush()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _proxy


if __name__ == "__main__":
    srv = ThreadingHTTPServer(("127.0.0.1", LISTEN), Handler)
    srv.daemon_threads = True
    print(json.dumps({"proxy": f"http://127.0.0.1:{LISTEN}", "upstream": sys.argv[2], "log": sys.argv[3]}), flush=True)
    srv.serve_forever()
