"""``cassini serve``: the advisor as an HTTP JSON service.

Endpoints (request and response bodies are the JSON of ``cassini advise`` / ``score``,
see :mod:`cassini.api`):

``POST /v1/advise[?precision_deg=5&aggregate=mean&loops=reject]``  rank placements
``POST /v1/score[?precision_deg=5]``                               score one link
``GET  /healthz``                                                  ``{"status": "ok", ...}``
``GET  /metrics``                                                  Prometheus text format

Every error is JSON: ``{"error": {"code": 400, "field": "jobs[0].id", "message": ...}}``
(``field`` is null when no single field is to blame).  Status codes: 400 bad JSON, schema
or query option; 404 unknown path; 405 wrong method (with ``Allow``); 408 body not sent
in time; 411 no Content-Length; 413 body over ``max_body_bytes``; 415 Content-Type not
``application/json``; 500 internal error; 503 no worker became free within
``timeout_s``; 504 the computation ran past ``timeout_s``.  An advise request whose
candidates were all rejected is still a 200, with ``"best": null``.

Computations run in a pool of worker processes (``workers`` of them, started by the
``forkserver`` method where available).  A request holds one worker; ``timeout_s`` bounds
the time from arrival to answer.  When it runs out while the request waits for a free
worker the answer is 503; when it runs out while a worker computes, the answer is 504 and
that worker process is killed (a runaway request cannot keep a CPU busy) and replaced
before the next request uses it.  Each connection carries one request (the server answers
with ``Connection: close``), so a graceful shutdown waits only for requests in flight.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from cassini import api
from cassini.circle import n_angles
from cassini.errors import InputError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_TIMEOUT_S = 30.0
#: Seconds a client may take to send its request line, headers and body.
DEFAULT_READ_TIMEOUT_S = 30.0
#: A body over the limit but at most this large is read and discarded before the 413, so
#: that the client (which usually sends the whole body first) sees the answer instead of
#: a connection reset; a larger one is not read at all.
DRAIN_LIMIT_BYTES = 16 << 20

#: path -> methods it answers (HEAD goes with GET).
ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/advise": ("POST",),
    "/v1/score": ("POST",),
    "/healthz": ("GET", "HEAD"),
    "/metrics": ("GET", "HEAD"),
}
#: endpoint -> allowed query options.
QUERY_OPTIONS: dict[str, tuple[str, ...]] = {
    "/v1/advise": ("precision_deg", "aggregate", "loops"),
    "/v1/score": ("precision_deg",),
}
#: The classic Prometheus text format, which every Prometheus reads (the metric names
#: here are plain ASCII, so prometheus_client's output is valid in it).
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def version() -> str:
    try:
        return metadata.version("netaware-ml")
    except metadata.PackageNotFoundError:
        return "unknown"


# -- errors ---------------------------------------------------------------------------------


class HTTPError(Exception):
    """An error answer: status ``code``, a message, optionally the field to blame."""

    def __init__(
        self,
        code: int,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
        rejected: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.field = field
        self.headers = headers or {}
        self.rejected = rejected  # label of the rejected-requests counter, if a limit hit

    def body(self) -> bytes:
        error = {"code": self.code, "field": self.field, "message": self.message}
        return _json_bytes({"error": error})


def _input_error(e: InputError) -> HTTPError:
    # the JSON readers name the whole document "input" (or ""); over HTTP it is the body
    field = "body" if e.field in ("", "input") else e.field
    return HTTPError(400, e.problem, field)


# -- metrics --------------------------------------------------------------------------------


class Metrics:
    """The service's Prometheus metrics, in a registry of their own (one per server)."""

    REJECT_REASONS = ("body_too_large", "timeout", "overloaded")

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "cassini_http_requests",
            "HTTP requests answered, by endpoint and status code.",
            ["endpoint", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "cassini_http_request_duration_seconds",
            "Seconds from reading a request's first line until its answer is ready, by endpoint.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.in_flight = Gauge(
            "cassini_http_requests_in_flight",
            "Requests read and not yet answered.",
            registry=r,
        )
        self.rejected = Counter(
            "cassini_http_requests_rejected",
            "Requests refused by a limit: body_too_large (413, over --max-body-bytes), "
            "timeout (504, computation ran past --timeout-s), overloaded (503, no worker "
            "free within --timeout-s).",
            ["reason"],
            registry=r,
        )
        self.worker_restarts = Counter(
            "cassini_worker_restarts",
            "Worker processes replaced after a timeout or a crash.",
            registry=r,
        )
        for reason in self.REJECT_REASONS:
            self.rejected.labels(reason)

    def observe(self, endpoint: str, code: int, seconds: float, rejected: str | None) -> None:
        self.requests.labels(endpoint, str(code)).inc()
        self.latency.labels(endpoint).observe(seconds)
        if rejected:
            self.rejected.labels(rejected).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


# -- worker processes -----------------------------------------------------------------------


def compute(kind: str, text: str, options: dict[str, Any]) -> bytes:
    """Answer one request (runs in a worker process): the response as JSON bytes."""
    obj = api.parse_json(text)
    if kind == "score":
        response = api.score_request(obj, **options)
    elif kind == "advise":
        # workers=1: the service's parallelism is its pool of processes, one per request
        response = api.advise_request(obj, workers=1, **options).to_dict()
    else:
        raise ValueError(f"unknown request kind {kind!r}")
    return _json_bytes(response)


def _worker_main(conn: Any) -> None:
    # Ctrl-C in a terminal (or a service manager's SIGTERM) reaches the whole process
    # group; the parent lets requests in flight finish, then stops its workers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            reply: tuple = ("ok", compute(*task))
        except InputError as e:
            reply = ("input", e.field, e.problem)
        except RecursionError:
            reply = ("input", "body", "nested too deeply")
        except Exception as e:  # reported to the client as a 500, logged by the parent
            reply = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


class ComputeTimeout(Exception):
    """The computation ran past its deadline; its worker was killed."""


class Overloaded(Exception):
    """No worker became free before the deadline."""


class WorkerCrashed(Exception):
    """The worker process died while computing."""


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self.proc: Any = None
        self.conn: Any = None

    def ensure_started(self) -> bool:
        """Start the process if it is not running; True if it had died on its own."""
        if self.proc is not None and self.proc.is_alive():
            return False
        died = self.proc is not None
        self.kill()
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker_main, args=(child,), name="cassini-serve-worker", daemon=True
        )
        proc.start()
        child.close()
        self.proc, self.conn = proc, parent
        return died

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def stop(self, grace_s: float = 2.0) -> None:
        if self.proc is not None and self.proc.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.proc.join(grace_s)
        self.kill()


class WorkerPool:
    """``n`` long-lived worker processes; a request holds one while it computes.

    :meth:`run` waits at most ``timeout_s`` in all: for a free worker (else
    :class:`Overloaded`) and then for its answer (else :class:`ComputeTimeout`, and the
    worker is killed and replaced before it is used again).
    """

    def __init__(self, n: int, *, on_restart: Callable[[], None] | None = None) -> None:
        if n < 1:
            raise ValueError(f"workers must be >= 1, got {n}")
        methods = multiprocessing.get_all_start_methods()
        method = "forkserver" if "forkserver" in methods else "spawn"
        ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            # workers fork from a server that has imported the advisor once
            ctx.set_forkserver_preload(["cassini.server"])
        self.start_method = method
        self._on_restart = on_restart
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all = [_Worker(ctx) for _ in range(n)]
        for w in self._all:
            w.ensure_started()
            self._idle.put(w)

    @property
    def size(self) -> int:
        return len(self._all)

    def run(self, task: tuple, timeout_s: float) -> tuple:
        """Send ``task`` to a free worker; its reply tuple (see :func:`_worker_main`)."""
        deadline = time.monotonic() + timeout_s
        try:
            worker = self._idle.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            raise Overloaded from None
        try:
            if worker.ensure_started() and self._on_restart:
                self._on_restart()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Overloaded
            try:
                worker.conn.send(task)
                if not worker.conn.poll(remaining):
                    self._replace(worker)
                    raise ComputeTimeout
                return worker.conn.recv()
            except (EOFError, OSError):
                self._replace(worker)
                raise WorkerCrashed from None
        finally:
            self._idle.put(worker)

    def _replace(self, worker: _Worker) -> None:
        """Kill a worker; it restarts when next taken from the idle queue."""
        worker.kill()
        if self._on_restart:
            self._on_restart()

    def close(self) -> None:
        for w in self._all:
            w.stop()


# -- HTTP -----------------------------------------------------------------------------------


class CassiniServer(ThreadingHTTPServer):
    """A :class:`ThreadingHTTPServer` that answers the advisor's endpoints.

    ``server_close()`` waits for the requests in flight, then stops the worker pool.
    """

    daemon_threads = False  # server_close() joins the request threads: graceful shutdown
    block_on_close = True
    request_queue_size = 128  # listen backlog

    def __init__(
        self,
        address: tuple[str, int],
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workers: int | None = None,
        quiet: bool = False,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if not (isinstance(max_body_bytes, int) and max_body_bytes > 0):
            raise ValueError(f"max_body_bytes must be an int > 0, got {max_body_bytes!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.max_body_bytes = max_body_bytes
        self.timeout_s = float(timeout_s)
        self.quiet = quiet
        self.read_timeout_s = read_timeout_s
        self.version = version()
        self.metrics = Metrics()
        self._log = log or _stderr
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, CassiniHandler)  # binds and listens
        try:
            self.pool = WorkerPool(
                workers or default_workers(), on_restart=self.metrics.worker_restarts.inc
            )
        except BaseException:
            self.socket.close()
            raise

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host = self.server_address[0]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    def log(self, line: str) -> None:
        self._log(line)

    def server_close(self) -> None:
        super().server_close()
        pool = getattr(self, "pool", None)  # None when binding failed
        if pool is not None:
            pool.close()


def make_server(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    workers: int | None = None,
    quiet: bool = False,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    log: Callable[[str], None] | None = None,
) -> CassiniServer:
    """A bound, not yet serving, :class:`CassiniServer` with its workers started.

    Parameters
    ----------
    host, port : where to listen; port 0 picks a free port (read it from ``.port``).
    max_body_bytes : larger request bodies get 413.
    timeout_s : time limit of a request from arrival to answer (503 / 504 past it).
    workers : worker processes, i.e. computations at once (default: min(4, CPUs)).
    quiet : no per-request log line.
    read_timeout_s : socket timeout while reading a request (408 past it).
    log : where log lines go (default: standard error).

    Run it with ``serve_forever()`` (e.g. in a thread); stop it with ``shutdown()`` then
    ``server_close()``, which waits for requests in flight and stops the workers.

    The workers start with multiprocessing's ``forkserver`` method (``spawn`` where there
    is none), which imports the main module in each worker: a script that calls this
    must keep its top level behind ``if __name__ == "__main__":``.
    """
    return CassiniServer(
        (host, port),
        max_body_bytes=max_body_bytes,
        timeout_s=timeout_s,
        workers=workers,
        quiet=quiet,
        read_timeout_s=read_timeout_s,
        log=log,
    )


class CassiniHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CassiniServer

    # -- plumbing -----------------------------------------------------------------------
    def setup(self) -> None:
        self.timeout = self.server.read_timeout_s
        super().setup()
        self.server_version = f"cassini/{self.server.version}"
        self._started = time.monotonic()
        self._answered = False
        self._in_flight = False
        self._body_consumed = False

    def parse_request(self) -> bool:
        self._started = time.monotonic()
        return super().parse_request()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # one line per request is written by _record, with the latency

    def log_message(self, format: str, *args: Any) -> None:
        when = self.log_date_time_string()
        self.server.log(f"{self.address_string()} - [{when}] {format % args}")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors the base class detects itself (bad request line, unsupported method,
        header too long, ...), answered in JSON like every other error."""
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            # the request line did not parse: answer with a status line and headers
            # anyway (an HTTP/0.9 answer would be the bare body)
            self.request_version = "HTTP/1.0"
        self._answer_error(HTTPError(code, message or HTTPStatus(code).phrase))

    def handle_expect_100(self) -> bool:
        try:
            self._precheck()
        except HTTPError as e:
            self._answer_error(e)
            return False
        return super().handle_expect_100()

    def __getattr__(self, name: str) -> Any:
        # every method (do_GET, do_POST, do_BREW, ...) is routed here, so that a method an
        # endpoint does not take is a 405 naming the ones it does, not the base class's 501
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    # -- answering ----------------------------------------------------------------------
    def _endpoint(self) -> str:
        path = urlsplit(getattr(self, "path", "") or "").path
        return path if path in ROUTES else "other"

    def _send(self, code: int, body: bytes, content_type: str, headers: dict[str, str]) -> None:
        self.close_connection = True
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if getattr(self, "command", None) != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _answer(
        self,
        code: int,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        rejected: str | None = None,
    ) -> None:
        if self._answered:
            return
        self._answered = True
        # accounted before sending: a client that has its answer finds it in /metrics
        self._record(code, len(body), rejected)
        with contextlib.suppress(OSError):  # the client went away
            self._send(code, body, content_type, headers or {})

    def _answer_error(self, e: HTTPError) -> None:
        self._answer(e.code, e.body(), headers=e.headers, rejected=e.rejected)

    def _record(self, code: int, size: int, rejected: str | None) -> None:
        seconds = time.monotonic() - self._started
        metrics = self.server.metrics
        metrics.observe(self._endpoint(), code, seconds, rejected)
        if self._in_flight:
            self._in_flight = False
            metrics.in_flight.dec()
        if not self.server.quiet:
            line = getattr(self, "requestline", "") or "-"
            self.log_message('"%s" %d %d %.1fms', line, code, size, seconds * 1e3)

    def _dispatch(self) -> None:
        self._in_flight = True
        self.server.metrics.in_flight.inc()
        try:
            code, body, content_type = self._route()
            self._answer(code, body, content_type)
        except HTTPError as e:
            self._drain()
            self._answer_error(e)
        except Exception as e:
            self.server.log(f"cassini serve: internal error on {self.requestline!r}:")
            self.server.log(traceback.format_exc().rstrip())
            self._drain()
            self._answer_error(HTTPError(500, f"internal error: {type(e).__name__}"))
        finally:
            if self._in_flight:  # not answered (cannot happen unless answering failed)
                self._in_flight = False
                self.server.metrics.in_flight.dec()

    # -- routing ------------------------------------------------------------------------
    def _precheck(self) -> tuple[str, int]:
        """Checks that need no body: path, method, Content-Length and -Type.
        Returns (path, body length)."""
        path = urlsplit(self.path).path
        methods = ROUTES.get(path)
        if methods is None:
            known = ", ".join(ROUTES)
            raise HTTPError(404, f"no such endpoint {path!r} (endpoints: {known})", "path")
        if self.command not in methods:
            raise HTTPError(
                405,
                f"{self.command} not allowed on {path}; use {' or '.join(methods)}",
                "method",
                headers={"Allow": ", ".join(methods)},
            )
        if self.command != "POST":
            return path, 0
        if self.headers.get("Transfer-Encoding") is not None:
            raise HTTPError(
                411, "send the body with a Content-Length (chunked bodies are not supported)"
            )
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            raise HTTPError(411, "Content-Length header required", "Content-Length")
        if len(set(lengths)) > 1 or not lengths[0].strip().isdigit():
            raise HTTPError(400, f"bad Content-Length {lengths!r}", "Content-Length")
        length = int(lengths[0])
        if length > self.server.max_body_bytes:
            raise HTTPError(
                413,
                f"body of {length} bytes is over the limit of {self.server.max_body_bytes}",
                "body",
                rejected="body_too_large",
            )
        content_type = self.headers.get("Content-Type")
        if content_type is None:
            raise HTTPError(415, "Content-Type header required: application/json", "Content-Type")
        charset = self.headers.get_content_charset()
        if self.headers.get_content_type() != "application/json" or charset not in (
            None,
            "utf-8",
            "utf8",
        ):
            raise HTTPError(
                415,
                f"Content-Type must be application/json (UTF-8), got {content_type!r}",
                "Content-Type",
            )
        return path, length

    def _route(self) -> tuple[int, bytes, str]:
        path, length = self._precheck()
        if path == "/healthz":
            self._no_query(path)
            return (
                200,
                _json_bytes({"status": "ok", "version": self.server.version}),
                ("application/json"),
            )
        if path == "/metrics":
            self._no_query(path)
            return 200, self.server.metrics.exposition(), METRICS_CONTENT_TYPE
        options = self._options(path)
        text = self._read_body(length)
        try:
            api.parse_json(text)  # a malformed body costs no worker
        except InputError as e:
            raise _input_error(e) from None
        except RecursionError:
            raise HTTPError(400, "nested too deeply", "body") from None
        return 200, self._compute(path.rsplit("/", 1)[1], text, options), "application/json"

    def _no_query(self, path: str) -> None:
        query = urlsplit(self.path).query
        if query:
            raise HTTPError(400, f"{path} takes no query parameters, got {query!r}", "query")

    def _options(self, path: str) -> dict[str, Any]:
        allowed = QUERY_OPTIONS[path]
        try:
            raw = parse_qs(urlsplit(self.path).query, keep_blank_values=True, strict_parsing=False)
        except ValueError as e:
            raise HTTPError(400, f"bad query string: {e}", "query") from None
        options: dict[str, Any] = {}
        for name, values in raw.items():
            field = f"query.{name}"
            if name not in allowed:
                raise HTTPError(400, f"unknown option (allowed: {', '.join(allowed)})", field)
            if len(values) > 1:
                raise HTTPError(400, "given more than once", field)
            value = values[0]
            if name == "precision_deg":
                try:
                    number = float(value)
                    n_angles(number)
                except ValueError:
                    raise HTTPError(
                        400, f"must be a number in (0, 180] degrees, got {value!r}", field
                    ) from None
                options[name] = number
            elif name == "aggregate":
                if value not in ("mean", "min"):
                    raise HTTPError(400, f"must be 'mean' or 'min', got {value!r}", field)
                options[name] = value
            elif name == "loops":
                if value not in ("reject", "score"):
                    raise HTTPError(400, f"must be 'reject' or 'score', got {value!r}", field)
                options[name] = value
        return options

    def _read_body(self, length: int) -> str:
        self._body_consumed = True
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            raise HTTPError(
                408, f"body not received within {self.server.read_timeout_s:g} s", "body"
            ) from None
        if len(data) < length:
            raise HTTPError(400, f"body ended after {len(data)} of {length} bytes", "body")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise HTTPError(400, f"not UTF-8 at byte {e.start}", "body") from None

    def _drain(self) -> None:
        """Read and discard the body of a refused request (when not too large) so that
        the client reads the answer instead of having its upload reset."""
        if self._body_consumed:
            return
        self._body_consumed = True
        try:
            left = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            return
        if left > DRAIN_LIMIT_BYTES or self.headers.get("Transfer-Encoding") is not None:
            return
        try:
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    return
                left -= len(chunk)
        except OSError:
            return

    def _compute(self, kind: str, text: str, options: dict[str, Any]) -> bytes:
        server = self.server
        remaining = server.timeout_s - (time.monotonic() - self._started)
        try:
            reply = server.pool.run((kind, text, options), max(0.0, remaining))
        except Overloaded:
            raise HTTPError(
                503,
                f"busy: no worker free within the {server.timeout_s:g} s limit; retry later",
                headers={"Retry-After": "1"},
                rejected="overloaded",
            ) from None
        except ComputeTimeout:
            raise HTTPError(
                504,
                f"computation took longer than the {server.timeout_s:g} s limit and was "
                "stopped; try a coarser precision_deg or fewer candidates",
                rejected="timeout",
            ) from None
        except WorkerCrashed:
            raise HTTPError(500, "the worker process died while computing") from None
        status = reply[0]
        if status == "ok":
            return reply[1]
        if status == "input":
            raise _input_error(InputError(reply[1], reply[2]))
        server.log(f"cassini serve: internal error on {self.requestline!r}: {reply[1]}")
        server.log(reply[2].rstrip())
        raise HTTPError(500, f"internal error: {reply[1]}")


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj) + "\n").encode("utf-8")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# -- command line ---------------------------------------------------------------------------

DESCRIPTION = "serve the advisor over HTTP (JSON in, JSON out)"

EPILOG = """\
endpoints:
  POST /v1/advise   body as 'cassini advise' reads; answer as it prints (JSON).
                    query options: precision_deg (default 5), aggregate=mean|min,
                    loops=reject|score (defaults as the CLI's).  All candidates
                    rejected is still 200, with "best": null.
  POST /v1/score    body as 'cassini score' reads; query option: precision_deg.
  GET  /healthz     {"status": "ok", "version": ...}
  GET  /metrics     Prometheus text: requests by endpoint and code, latency
                    histogram, in-flight requests, requests rejected by a limit.
POST bodies need Content-Type: application/json and a Content-Length.
errors are JSON {"error": {"code", "field", "message"}}: 400 bad JSON, schema or
option; 404 unknown path; 405 wrong method; 411 no Content-Length; 413 body over
--max-body-bytes; 415 wrong Content-Type; 503 no worker free within --timeout-s;
504 computation over --timeout-s (its worker process is killed and replaced).

example:
  cassini serve --port 8080 &
  python -c 'import json, cassini.api as a; print(json.dumps(a.example("advise")))' \\
    > request.json
  curl -sS -H 'Content-Type: application/json' --data-binary @request.json \\
    'http://127.0.0.1:8080/v1/advise?aggregate=min&precision_deg=2'
  curl -sS http://127.0.0.1:8080/metrics

stops gracefully on SIGINT or SIGTERM: no new connections, requests in flight finish.
exit status: 0 after a graceful stop, 1 if it cannot listen, 2 on bad options.
"""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535, got {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``cassini serve`` options."""
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; 0.0.0.0 exposes it to the "
        "network, which has no authentication)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one, printed at start)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help=f"larger request bodies get 413 (default {DEFAULT_MAX_BODY_BYTES} = 1 MiB)",
    )
    parser.add_argument(
        "--timeout-s",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"time limit per request, waiting for a worker included (default "
        f"{DEFAULT_TIMEOUT_S:g}); past it 503 (still waiting) or 504 (computing)",
    )
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="worker processes = requests computed at once (default: min(4, CPUs))",
    )
    parser.add_argument("--quiet", action="store_true", help="no log line per request")


def serve_command(args: argparse.Namespace) -> int:
    """Run ``cassini serve`` with parsed options until SIGINT or SIGTERM."""
    return serve(
        args.host,
        args.port,
        max_body_bytes=args.max_body_bytes,
        timeout_s=args.timeout_s,
        workers=args.workers,
        quiet=args.quiet,
    )


def serve(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    workers: int | None = None,
    quiet: bool = False,
) -> int:
    """Serve until SIGINT or SIGTERM, then stop gracefully; the exit status.

    Must run in the main thread (it installs signal handlers)."""
    try:
        server = make_server(
            host,
            port,
            max_body_bytes=max_body_bytes,
            timeout_s=timeout_s,
            workers=workers,
            quiet=quiet,
        )
    except OSError as e:
        print(f"cassini: error: cannot listen on {host}:{port}: {e.strerror or e}", file=sys.stderr)
        return 1
    stop = threading.Event()  # set by SIGINT / SIGTERM
    received: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="cassini-serve"
    )
    thread.start()
    _stderr(
        f"cassini serve: listening on {server.url} (workers {server.pool.size}, "
        f"{server.pool.start_method}; timeout {server.timeout_s:g} s; "
        f"max body {server.max_body_bytes} bytes)"
    )
    try:
        while not stop.wait(0.2):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)  # a second Ctrl-C stops at once
        name = signal.Signals(received[0]).name if received else "exit"
        _stderr(f"cassini serve: {name}: stopping; waiting for requests in flight")
        server.shutdown()
        server.server_close()
        thread.join()
        _stderr("cassini serve: stopped")
    return 0
