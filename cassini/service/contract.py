"""The service's contract in one table, :data:`ENDPOINTS`: every path, its methods, the
function that answers each (:mod:`cassini.service.handlers`), its query options, body and
answer schemas.  The app makes one Starlette ``Route`` per endpoint from it and the
OpenAPI document (:mod:`cassini.service.openapi`) is built from it, so the document and
the served routes cannot drift apart.  Adding a route is one entry here plus its handler
(docs/extending.md)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.convertors import Convertor, register_url_convertor

from cassini.circle import MAX_PRECISION_DEG, MIN_PRECISION_DEG, n_angles
from cassini.errors import InputError
from cassini.service import handlers
from cassini.service.errors import BadRequest


class JobIdConvertor(Convertor):
    """A job id in a path: any characters (slashes and newlines too), except that a path
    ending in ``/time_shift`` is the time-shift endpoint's, so the job route leaves it
    (and its wrong methods get 405 there, not 404 for a job named ``x/time_shift``).
    ``\\Z``, not ``$``: ``$`` also matches before a final newline (the app's routes end
    in ``\\Z`` too, :class:`cassini.service.app.ExactRoute`)."""

    regex = r"(?s:(?!.*/time_shift\Z).+)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class JobIdPrefixConvertor(JobIdConvertor):
    """The job id before ``/time_shift``: any characters, newlines included."""

    regex = r"(?s:.+)"


register_url_convertor("job_id", JobIdConvertor())
register_url_convertor("job_id_prefix", JobIdPrefixConvertor())


@dataclass(frozen=True)
class QueryOption:
    """A query option: its reader (raises :class:`BadRequest` naming ``query.NAME``) and
    its OpenAPI schema."""

    name: str
    read: Callable[[str, str], Any]
    schema: dict[str, Any]
    description: str


def _precision(value: str, field: str) -> float:
    """The advisor's bound (:data:`cassini.circle.MIN_PRECISION_DEG` to 180 degrees)."""
    try:
        number = float(value)
        n_angles(number)
    except (ValueError, InputError):
        raise BadRequest(
            f"must be a number in [{MIN_PRECISION_DEG:g}, {MAX_PRECISION_DEG:g}] degrees, "
            f"got {value!r}",
            field,
        ) from None
    return number


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def read(value: str, field: str) -> str:
        if value not in allowed:
            raise BadRequest(f"must be {' or '.join(map(repr, allowed))}, got {value!r}", field)
        return value

    return read


QUERY_OPTIONS: dict[str, QueryOption] = {
    o.name: o
    for o in (
        QueryOption(
            "precision_deg",
            _precision,
            {
                "type": "number",
                "minimum": MIN_PRECISION_DEG,
                "maximum": MAX_PRECISION_DEG,
                "default": 5,
            },
            "angle step of the unified circle in degrees (5 = 72 angles)",
        ),
        QueryOption(
            "aggregate",
            _choice("mean", "min"),
            {"type": "string", "enum": ["mean", "min"], "default": "mean"},
            "rank by the mean link score (paper) or the worst link",
        ),
        QueryOption(
            "loops",
            _choice("reject", "score"),
            {"type": "string", "enum": ["reject", "score"], "default": "reject"},
            "reject candidates whose loops cost score after repair, or rank them by it",
        ),
    )
}


@dataclass(frozen=True)
class Operation:
    """One method of an endpoint: the function that answers it, its query options, the
    request body schema (a component name, None: no body), the success status and answer
    schema, and the error statuses it documents."""

    method: str
    handler: handlers.Handler
    summary: str
    query: tuple[str, ...] = ()
    body: str | None = None
    status: int = 200
    answer: str | None = None
    media_type: str = "application/json"
    errors: tuple[int, ...] = (400, 404, 405, 500)  # and DRAINING: every operation
    also: tuple[int, ...] = ()  # other success statuses
    write: bool = False  # changes the registry: needs a bearer token, audited, rate-limited
    headers: tuple[str, ...] = ()  # sent with its success answers (and 304): HEADERS
    reads: tuple[str, ...] = ()  # request headers it reads (besides Authorization): HEADERS


@dataclass(frozen=True)
class Endpoint:
    """A path and its operations; ``{job_id}`` is a path parameter."""

    path: str
    operations: tuple[Operation, ...]

    def methods(self) -> tuple[str, ...]:
        """The methods of its operations, in the table's order."""
        return tuple(op.method for op in self.operations)

    def allowed_methods(self) -> tuple[str, ...]:
        """Its methods and HEAD with GET (as Starlette routes them): ``Allow`` on a 405,
        and the operations of the OpenAPI document."""
        methods = [op.method for op in self.operations]
        if "GET" in methods:
            methods.append("HEAD")
        return tuple(methods)

    def operation(self, method: str) -> Operation:
        for op in self.operations:
            if op.method == ("GET" if method == "HEAD" else method):
                return op
        raise KeyError(method)

    @property
    def template(self) -> str:
        """The path as the OpenAPI document writes it (no convertors)."""
        return re.sub(r"\{(\w+):\w+\}", r"{\1}", self.path)


#: Every operation answers 503 while the server drains (SIGTERM: :mod:`cassini.service.drain`
#: answers every request that arrives meanwhile), so the document adds it to each
#: operation's ``errors``; an operation that computes (504 too) also gets it when no worker
#: becomes free in time.
DRAINING = 503
BODY_ERRORS = (400, 404, 405, 408, 413, 415, 422, 500)
COMPUTE_ERRORS = BODY_ERRORS + (DRAINING, 504)
WRITE_ERRORS = (401, 403, 429)


@dataclass(frozen=True)
class Header:
    """A header the service sends (or reads), as the OpenAPI document declares it;
    ``required``: on every answer it is declared on."""

    description: str
    schema: dict[str, Any]
    required: bool = True


_TEXT: dict[str, Any] = {"type": "string"}
HEADERS: dict[str, Header] = {
    "Allow": Header("the methods the path accepts (HEAD with GET)", _TEXT),
    "WWW-Authenticate": Header('Bearer realm="cassini"', _TEXT),
    "Retry-After": Header(
        "seconds to wait before retrying: over --write-rate (not for --max-jobs), no free "
        "worker, or draining (not GET /readyz's not-ready 503)",
        {"type": "integer", "minimum": 1},
        required=False,
    ),
    "Connection": Header("close: the service is draining", _TEXT, required=False),
    "ETag": Header("the answer's version (a digest of its body)", _TEXT),
    "Cache-Control": Header("no-cache: revalidate with If-None-Match", _TEXT),
    "If-None-Match": Header(
        "ETags (weak comparison) or *: 304 with no body while one matches", _TEXT,
        required=False,
    ),
}
#: Headers an error answer sends, by status (errors.py's classes, app.py's 405, drain.py).
ERROR_HEADERS: dict[int, tuple[str, ...]] = {
    401: ("WWW-Authenticate",),
    405: ("Allow",),
    429: ("Retry-After",),
    503: ("Retry-After", "Connection"),
}

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "/v1/advise",
        (
            Operation(
                "POST",
                handlers.advise,
                "Rank candidate placements; the best with one time-shift per job "
                "(all candidates rejected is a 200 with best: null)",
                ("precision_deg", "aggregate", "loops"),
                "AdviseRequest",
                answer="Advice",
                errors=COMPUTE_ERRORS,
            ),
        ),
    ),
    Endpoint(
        "/v1/score",
        (
            Operation(
                "POST",
                handlers.score,
                "Compatibility score and time-shifts of jobs sharing one link",
                ("precision_deg",),
                "ScoreRequest",
                answer="ScoreAnswer",
                errors=COMPUTE_ERRORS,
            ),
        ),
    ),
    Endpoint(
        "/v1/jobs",
        (
            Operation("GET", handlers.list_jobs, "The running jobs", answer="JobList"),
            Operation(
                "POST",
                handlers.register_job,
                "Register a running job with its nodes (201), or replace one (200)",
                body="JobRegistration",
                status=201,
                also=(200,),
                answer="RunningJob",
                errors=BODY_ERRORS + WRITE_ERRORS,
                write=True,
            ),
        ),
    ),
    Endpoint(
        "/v1/jobs/{job_id:job_id_prefix}/time_shift",
        (
            Operation(
                "GET",
                handlers.get_time_shift,
                "The job's time-shift: slot k starts at epoch_s + shift_s + k * period_s; "
                "ETag names its version (If-None-Match: 304 when unchanged)",
                answer="TimeShift",
                errors=(400, 404, 405, 500, DRAINING, 504),  # busy: no free worker
                also=(304,),
                headers=("ETag", "Cache-Control"),
                reads=("If-None-Match",),
            ),
            Operation(
                "PUT",
                handlers.put_time_shift,
                "Set the job's time-shift explicitly, or release it to run free (kept "
                "until the job is removed or registered again)",
                body="TimeShiftPut",
                answer="TimeShift",
                errors=BODY_ERRORS + WRITE_ERRORS,
                write=True,
            ),
        ),
    ),
    Endpoint(
        "/v1/jobs/{job_id:job_id}",
        (
            Operation("GET", handlers.get_job, "One running job", answer="RunningJob"),
            Operation(
                "DELETE",
                handlers.delete_job,
                "Remove a running job",
                answer="RunningJob",
                errors=(400, 404, 405, 500) + WRITE_ERRORS,
                write=True,
            ),
        ),
    ),
    Endpoint(
        "/k8s/v1/prioritize",
        (
            Operation(
                "POST",
                handlers.prioritize,
                "kube-scheduler extender prioritize verb: 0..10 per node",
                body="ExtenderArgs",
                answer="HostPriorityList",
                errors=COMPUTE_ERRORS,
            ),
        ),
    ),
    Endpoint(
        "/k8s/v1/filter",
        (
            Operation(
                "POST",
                handlers.filter_nodes,
                "kube-scheduler extender filter verb: drops nodes below --min-score",
                body="ExtenderArgs",
                answer="ExtenderFilterResult",
                errors=COMPUTE_ERRORS,
            ),
        ),
    ),
    Endpoint(
        "/healthz",
        (Operation("GET", handlers.health, "Liveness", answer="Health", errors=(400, 405)),),
    ),
    Endpoint(
        "/readyz",
        (
            Operation(
                "GET",
                handlers.readiness,
                "Readiness: 200 once the service can answer from its cluster (under --kube: "
                "after its first model from the API server; 503 with the reason before)",
                answer="Health",
                errors=(400, 405, DRAINING),
            ),
        ),
    ),
    Endpoint(
        "/metrics",
        (
            Operation(
                "GET",
                handlers.metrics,
                "Prometheus metrics (text format 0.0.4)",
                media_type="text/plain; version=0.0.4; charset=utf-8",
                errors=(400, 405),
            ),
        ),
    ),
    Endpoint(
        "/openapi.json",
        (Operation("GET", handlers.openapi_document, "This document", errors=(400, 405)),),
    ),
)
