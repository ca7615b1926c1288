"""A stand-in for the Kubernetes API server on 127.0.0.1 that replays recorded API JSON,
for tests that drive the real ``kubernetes`` client (no API server can be installed here).

- ``GET <collection>`` answers the next scripted list body (the last one again when the
  script runs out; a ``(status, body)`` tuple answers that status);
- ``GET <collection>?watch=1`` answers the next scripted watch stream, chunked, one JSON
  event per line as the API server writes them (``ADDED``/``MODIFIED``/``DELETED``/
  ``BOOKMARK``/``ERROR``); a :class:`threading.Event` in a script holds the stream there
  until the test sets it; with no script left the stream stays open, without events,
  until the ``timeoutSeconds`` the client asked for or :meth:`ReplayApiServer.close`;
- ``GET``/``PUT``/``POST`` of single objects keep them in :attr:`ReplayApiServer.objects`.

Every request is logged in :attr:`ReplayApiServer.requests` (method, path, query).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "replay-token"


def gone(message: str = "too old resource version: 1 (2048)") -> dict[str, Any]:
    """The ERROR event the API server sends when a watch's resourceVersion is too old."""
    return {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                        "status": "Failure", "message": message,
                                        "reason": "Expired", "code": 410}}


def bookmark(kind: str, api_version: str, rv: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                                           "metadata": {"resourceVersion": rv}}}


def event(kind: str, obj: dict[str, Any], rv: str | None = None) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    if rv is not None:
        obj.setdefault("metadata", {})["resourceVersion"] = rv
    return {"type": kind, "object": obj}


class ReplayApiServer:
    """The replaying server; ``with ReplayApiServer() as api: api.kubeconfig(dir)``."""

    def __init__(self) -> None:
        self.lists: dict[str, deque[Any]] = {}
        self.watches: dict[str, deque[list[Any]]] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.closing = threading.Event()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server._handle(self, "GET")

            def do_PUT(self) -> None:  # noqa: N802
                server._handle(self, "PUT")

            def do_POST(self) -> None:  # noqa: N802
                server._handle(self, "POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # scripting
    def add_list(self, path: str, body: dict[str, Any]) -> None:
        self.lists.setdefault(path, deque()).append(body)

    def add_watch(self, path: str, events: list[Any]) -> None:
        self.watches.setdefault(path, deque()).append(events)

    def kubeconfig(self, directory: Path) -> str:
        path = Path(directory) / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "replay",
            "clusters": [{"name": "replay", "cluster": {"server": self.url}}],
            "users": [{"name": "replay", "user": {"token": TOKEN}}],
            "contexts": [{"name": "replay", "context": {"cluster": "replay", "user": "replay"}}],
        }))
        return str(path)

    def seen(self, path: str, **query: str) -> list[dict[str, list[str]]]:
        """The queries of the requests to ``path`` that had every ``query`` item."""
        with self.lock:
            return [q for _, p, q in self.requests if p == path
                    and all(q.get(k) == [v] for k, v in query.items())]

    # serving
    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        with self.lock:
            self.requests.append((method, parts.path, query))
        if h.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._json(h, 401, _status(401, "Unauthorized", "no or wrong token"))
        if method == "GET" and query.get("watch") in (["true"], ["1"], ["True"]):
            return self._watch(h, parts.path, query)
        if method == "GET" and parts.path in self.lists:
            with self.lock:
                bodies = self.lists[parts.path]
                body = bodies.popleft() if len(bodies) > 1 else bodies[0]
            if isinstance(body, tuple):  # (status code, body): an error answer
                return self._json(h, *body)
            return self._json(h, 200, body)
        if method == "GET" and parts.path in self.objects:
            return self._json(h, 200, self.objects[parts.path])
        if method in ("PUT", "POST"):
            n = int(h.headers.get("Content-Length") or 0)
            obj = json.loads(h.rfile.read(n))
            path = parts.path
            if method == "POST":
                path = f"{path}/{obj['metadata']['name']}"
            elif path not in self.objects:
                return self._json(h, 404, _status(404, "NotFound", f"{path} not found"))
            old_rv = (self.objects.get(path, {}).get("metadata") or {}).get("resourceVersion")
            sent_rv = obj["metadata"].get("resourceVersion")
            if method == "PUT" and sent_rv is not None and sent_rv != old_rv:
                return self._json(h, 409, _status(409, "Conflict", "the object has been modified"))
            obj["metadata"]["resourceVersion"] = str(int(old_rv or 0) + 1)
            self.objects[path] = obj
            return self._json(h, 201 if method == "POST" else 200, obj)
        return self._json(h, 404, _status(404, "NotFound", f"the server could not find {h.path}"))

    def _json(self, h: BaseHTTPRequestHandler, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _watch(self, h: BaseHTTPRequestHandler, path: str, query: dict[str, list[str]]) -> None:
        with self.lock:
            scripts = self.watches.get(path)
            script = scripts.popleft() if scripts else None
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        try:
            for item in script or []:
                if isinstance(item, threading.Event):
                    while not item.wait(0.05):
                        if self.closing.is_set():
                            return
                    continue
                line = (json.dumps(item) + "\n").encode()
                h.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                h.wfile.flush()
            if script is None:  # nothing scripted: an idle watch until its timeout
                limit = float((query.get("timeoutSeconds") or ["5"])[0])
                self.closing.wait(min(limit, 5.0))
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        h.close_connection = True

    def __enter__(self) -> ReplayApiServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def serve_kube(api: ReplayApiServer, tmp_path: Path, lines: list[str], links: Any = None) -> Any:
    """``cassini serve --kube`` in a thread against the replayed ``api``: short watches
    and backoff, its log lines appended to ``lines`` (``links``: the LinkOptions)."""
    from cassini.service.kube.sync import KubeOptions
    from cassini.service.kube.topology import LinkOptions
    from cassini.service.kube.watch import Backoff
    from helpers.service_util import start

    opts = KubeOptions(kubeconfig=api.kubeconfig(tmp_path), watch_timeout_s=5,
                       links=links or LinkOptions(), backoff=Backoff(first_s=0.05, max_s=1.0))
    return start(kube=opts, workers=1, quiet=True, log=lines.append)


def until(check: Any, what: str, timeout_s: float = 20.0) -> None:
    """Wait (polling every 20 ms) until ``check()``; AssertionError naming ``what`` after
    ``timeout_s``."""
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def serve_main(argv: list[str], deadline_s: float = 30.0) -> int:
    """``cassini serve ARGV`` run as the CLI runs it, in this process; its exit status.
    A SIGTERM after ``deadline_s`` stops a server that would otherwise serve forever
    (what these tests guard against), and the test then fails on the status."""
    import os
    import signal

    from cassini.cli import main

    timer = threading.Timer(deadline_s, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        return main(["serve", *argv])
    finally:
        timer.cancel()
