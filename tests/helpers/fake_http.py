"""A stand-in HTTP server for tests (a ``cassini serve``, a Kubernetes API): a handler
base that answers JSON and logs nothing, and a context that runs it on a free port of
127.0.0.1 in a thread."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """Write a handler's ``do_GET``/``do_POST`` with :meth:`send_json`."""

    def send_json(self, code: int, body: Any) -> None:
        """``body`` (JSON-able, or bytes sent as they are) with status ``code``."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """``handler`` served on 127.0.0.1 (``server.server_address[1]``: its port) until the
    block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
