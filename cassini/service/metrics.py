"""What the service counts and logs: its Prometheus metrics (:class:`Metrics`) and the
ASGI middleware that observes every HTTP request once (:class:`MetricsMiddleware`) with
a typed per-request record (:class:`RequestRecord`, ``request.state.record``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from starlette.requests import ClientDisconnect, Request

from cassini.service.errors import REJECT_REASONS

#: The classic Prometheus text format, which every Prometheus reads.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The service's Prometheus metrics, in a registry of their own (one per app)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "cassini_http_requests",
            "HTTP requests answered, by endpoint and status code (499: the client went away).",
            ["endpoint", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "cassini_http_request_duration_seconds",
            "Seconds from a request's arrival until its answer is ready, by endpoint.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.in_flight = Gauge(
            "cassini_http_requests_in_flight", "Requests read and not yet answered.", registry=r
        )
        self.rejected = Counter(
            "cassini_http_requests_rejected",
            "Requests refused by a limit or a guard: body_too_large (413, over "
            "--max-body-bytes), timeout (504, computation ran past --timeout-s), overloaded "
            "(503, no worker free within --timeout-s), draining (503, shutting down), "
            "unauthenticated (401), writes_disabled (403), rate_limited (429, over "
            "--write-rate), too_many_jobs (429, --max-jobs).",
            ["reason"],
            registry=r,
        )
        self.worker_restarts = Counter(
            "cassini_worker_restarts",
            "Worker processes replaced after a timeout or a crash.",
            registry=r,
        )
        self.writes = Counter(
            "cassini_writes",
            "Writes under /v1/jobs (POST, PUT, DELETE), by outcome (accepted: 2xx; refused) "
            "and status code; each is a line of the audit log.",
            ["outcome", "code"],
            registry=r,
        )
        self.reloads = Counter(
            "cassini_cluster_reloads",
            "Cluster file reloads (SIGHUP), by result (ok, error).",
            ["result"],
            registry=r,
        )
        self.unusable_jobs = Gauge(
            "cassini_jobs_unusable",
            "Registered jobs kept in the state file but left out of every computation (a "
            "node left the cluster, or the stored row no longer reads); /healthz lists them.",
            registry=r,
        )
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for result in ("ok", "error"):
            self.reloads.labels(result)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class RequestRecord:
    """One HTTP request as the middleware and the handlers share it: when it arrived
    (:func:`time.monotonic` seconds), the limit it hit (a ``rejected`` label), whether its
    body was read, and the answer's status and size (bytes)."""

    started: float = field(default_factory=time.monotonic)
    rejected: str | None = None
    body_read: bool = False
    status: int = 499
    size: int = 0
    answered: bool = False
    write: bool = False  # a write under /v1/jobs: audited
    token_name: str | None = None
    job_id: str | None = None


def record_of(request: Request) -> RequestRecord:
    """The request's record (a fresh one outside the middleware, e.g. in unit tests)."""
    record = getattr(request.state, "record", None)
    if record is None:
        record = request.state.record = RequestRecord()
    return record


def record_of_scope(scope: dict) -> RequestRecord | None:
    """The record the middleware put in an ASGI scope, if any."""
    return scope.get("state", {}).get("record")


def endpoint_label(scope: dict) -> str:
    """The route's name, its path as the OpenAPI document writes it (``other`` when no
    route matched)."""
    route = scope.get("route")
    return getattr(route, "name", None) or "other"


class MetricsMiddleware:
    """Counts, times and logs every HTTP request once.  The count is taken when the
    answer's head goes out (a client that has its answer finds it in the next scrape); a
    client that went away before an answer counts as 499."""

    def __init__(
        self,
        app: Any,
        metrics: Metrics,
        log: Callable[[str], None] | None,
        on_write: Callable[[dict, RequestRecord], None] | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.log = log  # None: no access log
        self.on_write = on_write  # called once per answered write (the audit)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord()
        scope.setdefault("state", {})["record"] = record
        metrics = self.metrics
        metrics.in_flight.inc()

        async def observe(message: dict) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                self._count(scope, record)
            elif message["type"] == "http.response.body":
                record.size += len(message.get("body", b""))
                if not message.get("more_body", False):
                    self._log_line(scope, record)  # before the client has it
            await send(message)

        try:
            await self.app(scope, receive, observe)
        except ClientDisconnect:
            pass  # nobody to answer
        finally:
            if not record.answered:  # the client went away before an answer
                record.status = 499
                self._count(scope, record)
                self._log_line(scope, record)

    def _count(self, scope: dict, record: RequestRecord) -> None:
        endpoint = endpoint_label(scope)
        self.metrics.requests.labels(endpoint, str(record.status)).inc()
        self.metrics.latency.labels(endpoint).observe(time.monotonic() - record.started)
        if record.rejected:
            self.metrics.rejected.labels(record.rejected).inc()
        self.metrics.in_flight.dec()
        record.answered = True
        if record.write and self.on_write is not None:
            self.on_write(scope, record)

    def _log_line(self, scope: dict, record: RequestRecord) -> None:
        if self.log is None:
            return
        client = scope.get("client") or ("-", 0)
        query = scope.get("query_string", b"").decode("latin-1")
        target = scope.get("path", "") + (f"?{query}" if query else "")
        line = f"{scope['method']} {target} HTTP/{scope.get('http_version', '1.1')}"
        stamp = formatdate(usegmt=True)
        self.log(
            f'{client[0]} - [{stamp}] "{line}" {record.status} {record.size} '
            f"{(time.monotonic() - record.started) * 1e3:.1f}ms"
        )
