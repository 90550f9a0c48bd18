"""moto's S3 server (what ``python -m moto.server`` runs), with S3's conditional writes made atomic.

S3 decides a PUT's ``If-None-Match: *`` or ``If-Match`` atomically: of racing writers one succeeds and the others get
412 (or 409). moto's threaded server looks the key up and then writes it, so two racing creates could both succeed
(seen under load by test/workflows/artifacts-s3.test.ts: two of three ``create`` calls won). Here a request that
carries a condition is taken one at a time; every other request stays concurrent.

Usage: ``python s3_server.py <host> <port>``.
"""

import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

CONDITIONS = ("HTTP_IF_NONE_MATCH", "HTTP_IF_MATCH")


def main(host: str, port: int) -> None:
    os.environ.setdefault("MOTO_PORT", str(port))  # as moto's own entry point does
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def conditional_writes_atomic(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not any(name in environ for name in CONDITIONS):
            return app(environ, start_response)
        with one_at_a_time:
            # The body is read inside the lock: the check and the write both happen before the next condition is seen.
            return list(app(environ, start_response))

    run_simple(host, port, conditional_writes_atomic, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
