"""The HTTP application of ``cassini serve`` (Starlette, served by uvicorn).

Every request goes through one path: :class:`Endpoint` (the table in
:mod:`cassini.service.contract`) says which methods and query options a path takes;
:func:`_handle` checks the method (405), the query options (400), reads and parses the
JSON body (415, 413, 408, 400), calls the handler, and turns any
:class:`~cassini.service.errors.ServiceError` or :class:`~cassini.errors.InputError` into
the JSON error answer.  Computations run in the worker pool (:mod:`cassini.service.pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from email.utils import formatdate
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from cassini import schema
from cassini.circle import n_angles
from cassini.errors import InputError
from cassini.service import contract, k8s
from cassini.service.cluster import (
    Cluster,
    JobShift,
    RunningJob,
    State,
    check_nodes,
    load_cluster_file,
    read_job,
)
from cassini.service.errors import (
    REJECT_REASONS,
    BadRequest,
    ComputeTimeout,
    InternalError,
    MethodNotAllowed,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    RequestTimeout,
    ServiceError,
    UnsupportedMediaType,
    from_input_error,
    json_bytes,
)
from cassini.service.pool import PoolBusy, PoolTimeout, WorkerCrashed, WorkerPool, default_workers

JSON = "application/json"
#: The classic Prometheus text format, which every Prometheus reads.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: A refused body at most this large is read and discarded before the answer, so that a
#: client sending the whole body first reads the answer instead of a connection reset.
DRAIN_LIMIT_BYTES = 16 << 20


def version() -> str:
    try:
        return metadata.version("netaware-ml")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class ServiceConfig:
    """Options of the service: body limit (bytes), time limits (seconds), workers, the
    cluster file, the filter's minimum compatibility score in [0, 1], precision of the
    extender's and the time-shifts' computations (degrees)."""

    max_body_bytes: int = 1 << 20
    timeout_s: float = 30.0
    read_timeout_s: float = 30.0
    workers: int | None = None
    cluster_file: str | None = None
    min_score: float = 0.0
    precision_deg: float = 5.0
    quiet: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.max_body_bytes, int) and self.max_body_bytes > 0):
            raise ValueError(f"max_body_bytes must be an int > 0, got {self.max_body_bytes!r}")
        for name in ("timeout_s", "read_timeout_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"min_score must be in [0, 1], got {self.min_score!r}")
        n_angles(self.precision_deg)


# -- metrics --------------------------------------------------------------------------------


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
        self.reloads = Counter(
            "cassini_cluster_reloads",
            "Cluster file reloads (SIGHUP), by result (ok, error).",
            ["result"],
            registry=r,
        )
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for result in ("ok", "error"):
            self.reloads.labels(result)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


# -- the registry of running jobs -----------------------------------------------------------


class Registry:
    """The cluster (from ``--cluster``) and the running jobs: those of the cluster file and
    those registered over HTTP (kept across reloads; an id in both: the HTTP one), with
    the time-shifts set by PUT.  :meth:`state` is the snapshot the workers compute on."""

    def __init__(self, cluster: Cluster, file_jobs: list[RunningJob], start_s: float) -> None:
        self.cluster = cluster
        self.file_jobs = {j.job_id: j for j in file_jobs}
        self.api_jobs: dict[str, RunningJob] = {}
        self.explicit: dict[str, tuple[float, float, float]] = {}  # id -> shift, period, epoch
        self.start_s = start_s
        self._version = 0
        self._state: State | None = None

    @property
    def epoch_s(self) -> float:
        """UNIX seconds every job's slots count from: the cluster file's ``epoch_s``, else
        the server's start time."""
        return self.cluster.epoch_s if self.cluster.epoch_s is not None else self.start_s

    def jobs(self) -> dict[str, RunningJob]:
        return self.file_jobs | self.api_jobs

    def state(self) -> State:
        if self._state is None:
            self._version += 1
            self._state = State(self._version, self.cluster, self.jobs())
        return self._state

    def _changed(self) -> None:
        self._state = None

    def put(self, job: RunningJob) -> bool:
        """Register (or replace) a job; True if it is new."""
        new = job.job_id not in self.jobs()
        self.api_jobs[job.job_id] = job
        self.explicit.pop(job.job_id, None)
        self._changed()
        return new

    def delete(self, job_id: str) -> RunningJob:
        job = self.api_jobs.pop(job_id, None) or self.file_jobs.pop(job_id, None)
        if job is None:
            raise NotFound(f"no running job {job_id!r}", "job_id")
        self.explicit.pop(job_id, None)
        self._changed()
        return job

    def replace_file(self, cluster: Cluster, file_jobs: list[RunningJob]) -> None:
        self.cluster = cluster
        self.file_jobs = {j.job_id: j for j in file_jobs}
        self.explicit = {j: v for j, v in self.explicit.items() if j in self.jobs()}
        self._changed()


# -- the application ------------------------------------------------------------------------


class Service:
    """State shared by the requests of one app: config, metrics, registry, worker pool."""

    def __init__(self, config: ServiceConfig, log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.version = version()
        self.metrics = Metrics()
        self._log = log or _stderr
        self.start_s = time.time()
        cluster, jobs = (
            load_cluster_file(config.cluster_file) if config.cluster_file else (Cluster(), [])
        )
        self.registry = Registry(cluster, jobs, self.start_s)
        self.pool: WorkerPool | None = None
        self._shifts: tuple[int, dict[str, JobShift]] | None = None
        self._shift_task: tuple[int, asyncio.Task] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.on_started: Callable[[], None] | None = None

    def log(self, line: str) -> None:
        self._log(line)

    # lifespan
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.pool = WorkerPool(
            self.config.workers or default_workers(), on_restart=self.metrics.worker_restarts.inc
        )
        if self.on_started is not None:
            self.on_started()

    async def stop(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def reload(self) -> bool:
        """Re-read the cluster file (SIGHUP); on error keep the current cluster and log."""
        path = self.config.cluster_file
        if path is None:
            self.log("cassini serve: SIGHUP: no --cluster file to reload")
            return False
        try:
            cluster, jobs = load_cluster_file(path)
            for job in self.registry.api_jobs.values():
                unknown = [n for n in job.nodes if n not in cluster.nodes]
                if unknown:
                    self.log(f"cassini serve: job {job.job_id}: nodes no longer in the "
                             f"cluster (ignored): {', '.join(unknown)}")
        except InputError as e:
            self.metrics.reloads.labels("error").inc()
            self.log(f"cassini serve: SIGHUP: {path}: {e}; keeping the previous cluster")
            return False
        self.registry.replace_file(cluster, jobs)
        self.metrics.reloads.labels("ok").inc()
        state = self.registry.state()
        self.log(
            f"cassini serve: reloaded {path}: {len(cluster.links)} links, "
            f"{len(cluster.nodes)} nodes, {len(state.jobs)} running jobs"
        )
        return True

    async def compute(
        self, deadline: float, kind: str, payload: Any, state: State | None = None
    ) -> Any:
        """Run one task in the worker pool; errors become service errors."""
        assert self.pool is not None
        limit = self.config.timeout_s
        try:
            reply = await self.pool.run((kind, payload), deadline, state)
        except PoolBusy:
            raise Overloaded(
                f"busy: no worker free within the {limit:g} s limit; retry later",
                headers={"Retry-After": "1"},
            ) from None
        except PoolTimeout:
            raise ComputeTimeout(
                f"computation took longer than the {limit:g} s limit and was stopped; try a "
                "coarser precision_deg or fewer candidates"
            ) from None
        except WorkerCrashed:
            raise InternalError("the worker process died while computing") from None
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "input":
            raise from_input_error(InputError(reply[1], reply[2]))
        self.log(f"cassini serve: internal error in a worker: {reply[1]}")
        self.log(reply[2].rstrip())
        raise InternalError(f"internal error: {reply[1]}")

    async def shifts(self, deadline: float) -> tuple[State, dict[str, JobShift]]:
        """The running jobs' computed time-shifts for the current state (computed once per
        state version, by one worker, whoever asks)."""
        state = self.registry.state()
        if self._shifts is not None and self._shifts[0] == state.version:
            return state, self._shifts[1]
        if self._shift_task is None or self._shift_task[0] != state.version:
            task = asyncio.ensure_future(
                self.compute(deadline, "shifts", (self.config.precision_deg,), state)
            )
            self._shift_task = (state.version, task)
        task = self._shift_task[1]
        try:
            result = await asyncio.shield(task)
        finally:
            if task.done() and self._shift_task is not None and self._shift_task[1] is task:
                self._shift_task = None
        self._shifts = (state.version, result)
        return state, result


@dataclass(frozen=True)
class Call:
    """One request as a handler sees it: method, path parameters, validated query options,
    the parsed JSON body (None when none) and the deadline (:func:`time.monotonic`)."""

    method: str
    params: dict[str, str]
    options: dict[str, Any]
    body: Any
    deadline: float


Handler = Callable[[Service, Call], Awaitable[tuple[int, Any]]]


def create_app(
    config: ServiceConfig | None = None, *, log: Callable[[str], None] | None = None
) -> Starlette:
    """The ASGI app; ``app.state.service`` is its :class:`Service`."""
    service = Service(config or ServiceConfig(), log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    # an ASGI endpoint (not a function) takes every method: _handle answers 405 itself
    routes = [
        Route(ep.path, _AsgiEndpoint(_endpoint(service, ep)), methods=None, name=ep.path)
        for ep in contract.ENDPOINTS
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _not_found},
    )
    app.state.service = service
    return _Observed(app, service)


class _Observed:
    """ASGI wrapper: counts, times and logs every HTTP request once."""

    def __init__(self, app: Starlette, service: Service) -> None:
        self.app = app
        self.service = service
        self.state = app.state

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        scope["cassini.started"] = started
        metrics = self.service.metrics
        metrics.in_flight.inc()
        status, size, sent = 499, 0, False

        async def observe(message: dict) -> None:
            nonlocal status, size, sent
            if message["type"] == "http.response.start":
                status = message["status"]
                elapsed = time.monotonic() - started
                endpoint = scope.get("cassini.endpoint", "other")
                # counted before the answer goes out: a client that has its answer finds it
                # in the next scrape
                metrics.requests.labels(endpoint, str(status)).inc()
                metrics.latency.labels(endpoint).observe(elapsed)
                rejected = scope.get("cassini.rejected")
                if rejected:
                    metrics.rejected.labels(rejected).inc()
                metrics.in_flight.dec()
                sent = True
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
                if not message.get("more_body", False):
                    self._log_line(scope, status, size, started)  # before the client has it
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            if not sent:  # the client went away before an answer
                metrics.requests.labels(scope.get("cassini.endpoint", "other"), "499").inc()
                metrics.in_flight.dec()
                self._log_line(scope, status, size, started)

    def _log_line(self, scope: dict, status: int, size: int, started: float) -> None:
        if self.service.config.quiet:
            return
        client = scope.get("client") or ("-", 0)
        query = scope.get("query_string", b"").decode("latin-1")
        target = scope.get("path", "") + (f"?{query}" if query else "")
        line = f"{scope['method']} {target} HTTP/{scope.get('http_version', '1.1')}"
        stamp = formatdate(usegmt=True)
        self.service.log(
            f'{client[0]} - [{stamp}] "{line}" {status} {size} '
            f"{(time.monotonic() - started) * 1e3:.1f}ms"
        )


async def _not_found(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route matched) as our JSON error."""
    code = getattr(exc, "status_code", 404)
    if code == 404:
        known = ", ".join(ep.template for ep in contract.ENDPOINTS)
        err: ServiceError = NotFound(
            f"no such endpoint {request.url.path!r} (endpoints: {known})", "path"
        )
    else:  # pragma: no cover - routes accept every method and answer 405 themselves
        err = InternalError(f"HTTP {code}")
    return _error_response(err)


class _AsgiEndpoint:
    def __init__(self, endpoint: Callable[[Request], Awaitable[Response]]) -> None:
        self.endpoint = endpoint

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        request = Request(scope, receive, send)
        try:
            response = await self.endpoint(request)
        except ClientDisconnect:
            return  # nobody to answer
        await response(scope, receive, send)


def _error_response(err: ServiceError) -> Response:
    return Response(err.body(), status_code=err.status, headers=err.headers, media_type=JSON)


def _endpoint(service: Service, ep: contract.Endpoint) -> Callable:
    async def endpoint(request: Request) -> Response:
        request.scope["cassini.endpoint"] = ep.path
        try:
            return await _handle(service, ep, request)
        except ServiceError as err:
            if err.reason:
                request.scope["cassini.rejected"] = err.reason
            await _drain(request)
            return _error_response(err)
        except InputError as e:
            return _error_response(from_input_error(e))
        except ClientDisconnect:
            raise
        except Exception as e:
            service.log(f"cassini serve: internal error on {request.method} {request.url.path}:")
            service.log(traceback.format_exc().rstrip())
            return _error_response(InternalError(f"internal error: {type(e).__name__}"))

    return endpoint


async def _handle(service: Service, ep: contract.Endpoint, request: Request) -> Response:
    method = request.method
    allowed = ep.allowed_methods()
    if method not in allowed:
        raise MethodNotAllowed(
            f"{method} not allowed on {ep.path}; use {' or '.join(allowed)}",
            "method",
            headers={"Allow": ", ".join(allowed)},
        )
    op = ep.operation(method)
    options = _options(request, op)
    body = None
    if op.body is not None:
        body = await _read_json(service, request)
    started = request.scope.get("cassini.started", time.monotonic())
    deadline = started + service.config.timeout_s
    handler: Handler = HANDLERS[op.handler]
    call = Call(method, dict(request.path_params), options, body, deadline)
    status, payload = await handler(service, call)
    if method == "HEAD":
        return Response(b"", status_code=status, media_type=op.media_type)
    if isinstance(payload, bytes):
        return Response(payload, status_code=status, media_type=op.media_type)
    return Response(json_bytes(payload), status_code=status, media_type=JSON)


def _options(request: Request, op: contract.Operation) -> dict[str, Any]:
    query = request.scope.get("query_string", b"").decode("latin-1")
    if query and not op.query:
        raise BadRequest(f"{request.url.path} takes no query parameters, got {query!r}", "query")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
    except ValueError as e:  # pragma: no cover - parse_qsl is lenient
        raise BadRequest(f"bad query string: {e}", "query") from None
    out: dict[str, Any] = {}
    for name, value in pairs:
        field = f"query.{name}"
        if name not in op.query:
            raise BadRequest(f"unknown option (allowed: {', '.join(op.query)})", field)
        if name in out:
            raise BadRequest("given more than once", field)
        out[name] = contract.QUERY_OPTIONS[name].read(value, field)
    return out


async def _read_json(service: Service, request: Request) -> Any:
    content_type = request.headers.get("content-type")
    if content_type is None:
        raise UnsupportedMediaType(
            "Content-Type header required: application/json", "Content-Type"
        )
    media, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset":
            charset = value.strip().strip('"').lower()
    if media.strip().lower() != JSON or charset not in (None, "utf-8", "utf8"):
        raise UnsupportedMediaType(
            f"Content-Type must be application/json (UTF-8), got {content_type!r}",
            "Content-Type",
        )
    limit = service.config.max_body_bytes
    length = request.headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit():
            raise BadRequest(f"bad Content-Length {length!r}", "Content-Length")
        if int(length) > limit:
            raise PayloadTooLarge(
                f"body of {int(length)} bytes is over the limit of {limit}", "body"
            )

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body of more than {limit} bytes is over the limit", "body")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        data = await asyncio.wait_for(read(), service.config.read_timeout_s)
    except TimeoutError:
        raise RequestTimeout(
            f"body not received within {service.config.read_timeout_s:g} s", "body"
        ) from None
    request.scope["cassini.body_read"] = True
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(f"not UTF-8 at byte {e.start}", "body") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRequest(
            f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", "body"
        ) from None
    except RecursionError:
        raise BadRequest("nested too deeply", "body") from None


async def _drain(request: Request) -> None:
    """Read and discard the body of a refused request (when not too large)."""
    if request.scope.get("cassini.body_read") or request.method in ("GET", "HEAD"):
        return
    request.scope["cassini.body_read"] = True
    length = request.headers.get("content-length", "")
    if not length.isdigit() or int(length) > DRAIN_LIMIT_BYTES:
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1.0):
            async for _ in request.stream():
                pass


# -- handlers -------------------------------------------------------------------------------


async def _health(service: Service, call: Call) -> tuple[int, Any]:
    return 200, {"status": "ok", "version": service.version}


async def _metrics(service: Service, call: Call) -> tuple[int, Any]:
    return 200, service.metrics.exposition()


async def _openapi(service: Service, call: Call) -> tuple[int, Any]:
    return 200, contract.openapi()


async def _advise(service: Service, call: Call) -> tuple[int, Any]:
    from cassini import api

    links, jobs, candidates = api.read_advise_request(call.body)
    options = {
        "precision_deg": call.options.get("precision_deg", 5.0),
        "aggregate": call.options.get("aggregate", "mean"),
        "loops": call.options.get("loops", "reject"),
    }
    return 200, await service.compute(call.deadline, "advise", (links, jobs, candidates, options))


async def _score(service: Service, call: Call) -> tuple[int, Any]:
    from cassini.profile import profiles_from_dicts

    obj = schema.require_object(call.body, "")
    schema.check_fields(obj, "", ("capacity_bps", "jobs"))
    schema.number(obj["capacity_bps"], "capacity_bps", positive=True)
    profiles_from_dicts(obj["jobs"], "jobs")
    options = {"precision_deg": call.options.get("precision_deg", 5.0)}
    return 200, await service.compute(call.deadline, "score", (obj, options))


async def _jobs(service: Service, call: Call) -> tuple[int, Any]:
    if call.method == "POST":
        job = read_job(call.body)
        check_nodes(service.registry.cluster, job, "")
        new = service.registry.put(job)
        return (201 if new else 200), job.to_dict()
    jobs = service.registry.jobs()
    return 200, {"jobs": [jobs[j].to_dict() for j in sorted(jobs)]}


async def _job(service: Service, call: Call) -> tuple[int, Any]:
    job_id = call.params["job_id"]
    if call.method == "DELETE":
        return 200, service.registry.delete(job_id).to_dict()
    job = service.registry.jobs().get(job_id)
    if job is None:
        raise NotFound(f"no running job {job_id!r}", "job_id")
    return 200, job.to_dict()


async def _time_shift(service: Service, call: Call) -> tuple[int, Any]:
    job_id = call.params["job_id"]
    registry = service.registry
    job = registry.jobs().get(job_id)
    if job is None:
        raise NotFound(f"no running job {job_id!r} (register it with POST /v1/jobs)", "job_id")
    if call.method == "PUT":
        shift_s, period_s, epoch_s = contract.read_time_shift_put(call.body, registry.epoch_s)
        registry.explicit[job_id] = (shift_s, period_s, epoch_s)
        return 200, _shift_json(job_id, True, shift_s, period_s, epoch_s, None)
    if job_id in registry.explicit:
        shift_s, period_s, epoch_s = registry.explicit[job_id]
        return 200, _shift_json(job_id, True, shift_s, period_s, epoch_s, None)
    _, shifts = await service.shifts(call.deadline)
    s = shifts.get(job_id)
    if s is None:  # registered after the computation started; not yet in its result
        s = JobShift(job_id, False, 0.0, job.profile.iteration_time_s, "not computed yet; retry")
    return 200, _shift_json(
        job_id, s.shift, s.shift_s, s.period_s, registry.epoch_s, s.reason, s.tolerance_s
    )


def _shift_json(
    job_id: str,
    shift: bool,
    shift_s: float,
    period_s: float,
    epoch_s: float,
    reason: str | None,
    tolerance_s: float | None = None,
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "shift": bool(shift),
        "shift_s": float(shift_s),
        "period_s": float(period_s),
        "epoch_s": float(epoch_s),
        "reason": reason,
        "tolerance_s": None if tolerance_s is None else float(tolerance_s),
    }


async def _extender(service: Service, call: Call, verb: str) -> tuple[int, Any]:
    args = k8s.read_extender_args(call.body)
    registry = service.registry
    pod = k8s.pod_profile(args, registry.jobs())
    names = args.node_names
    if pod is None or not registry.cluster.nodes:
        scores = [(n, None, k8s.NEUTRAL_SCORE, None, ()) for n in names]
    else:
        state = registry.state()
        payload = (pod, names, service.config.precision_deg)
        answer = await service.compute(call.deadline, verb, payload, state)
        if verb == "prioritize":
            return 200, answer  # JSON bytes of the HostPriorityList
        scores = answer
    if verb == "prioritize":
        return 200, k8s.priority_list(scores)
    return 200, k8s.filter_result(args, scores, service.config.min_score)


async def _prioritize(service: Service, call: Call) -> tuple[int, Any]:
    return await _extender(service, call, "prioritize")


async def _filter(service: Service, call: Call) -> tuple[int, Any]:
    return await _extender(service, call, "filter")


HANDLERS: dict[str, Handler] = {
    "health": _health,
    "metrics": _metrics,
    "openapi": _openapi,
    "advise": _advise,
    "score": _score,
    "jobs": _jobs,
    "job": _job,
    "time_shift": _time_shift,
    "prioritize": _prioritize,
    "filter": _filter,
}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def write_openapi(path: str | Path) -> None:
    """Write the OpenAPI document (docs/openapi.json)."""
    Path(path).write_text(json.dumps(contract.openapi(), indent=2) + "\n", encoding="utf-8")


__all__ = ["ServiceConfig", "Service", "create_app", "replace", "version", "write_openapi"]
