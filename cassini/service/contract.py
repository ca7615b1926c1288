"""The service's contract in one place: every endpoint, the methods and query options it
takes, and the OpenAPI 3.1 document built from the same table (``GET /openapi.json``,
``docs/openapi.json``).  The app routes from :data:`ENDPOINTS`, so the document and the
served routes cannot drift apart; the JSON readers that validate bodies are those of
:mod:`cassini.api`, :mod:`cassini.service.cluster` and :mod:`cassini.service.k8s`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cassini import schema
from cassini.circle import n_angles
from cassini.errors import InputError
from cassini.service.errors import ERRORS, BadRequest


@dataclass(frozen=True)
class QueryOption:
    """A query option: its reader (raises :class:`BadRequest` naming ``query.NAME``) and
    its OpenAPI schema."""

    name: str
    read: Callable[[str, str], Any]
    schema: dict[str, Any]
    description: str


def _precision(value: str, field: str) -> float:
    try:
        number = float(value)
        n_angles(number)
    except (ValueError, InputError):
        raise BadRequest(f"must be a number in (0, 180] degrees, got {value!r}", field) from None
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
            {"type": "number", "exclusiveMinimum": 0, "maximum": 180, "default": 5},
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
    """One method of an endpoint: the handler's name, its query options, the request body
    schema (a component name, None: no body), the success status and answer schema."""

    method: str
    handler: str
    summary: str
    query: tuple[str, ...] = ()
    body: str | None = None
    status: int = 200
    answer: str | None = None
    media_type: str = "application/json"
    errors: tuple[int, ...] = (400, 404, 405, 500)
    also: tuple[int, ...] = ()  # other success statuses


@dataclass(frozen=True)
class Endpoint:
    """A path and its operations; ``{job_id}`` is a path parameter (any characters)."""

    path: str
    operations: tuple[Operation, ...]

    def allowed_methods(self) -> tuple[str, ...]:
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
        """The path as the OpenAPI document writes it."""
        return self.path.replace(":path}", "}")


BODY_ERRORS = (400, 404, 405, 408, 413, 415, 500)
COMPUTE_ERRORS = BODY_ERRORS + (503, 504)

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "/v1/advise",
        (
            Operation(
                "POST",
                "advise",
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
                "score",
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
            Operation("GET", "jobs", "The running jobs", answer="JobList"),
            Operation(
                "POST",
                "jobs",
                "Register a running job with its nodes (201), or replace one (200)",
                body="RunningJob",
                status=201,
                also=(200,),
                answer="RunningJob",
                errors=BODY_ERRORS,
            ),
        ),
    ),
    Endpoint(
        "/v1/jobs/{job_id:path}/time_shift",
        (
            Operation(
                "GET",
                "time_shift",
                "The job's time-shift: slot k starts at epoch_s + shift_s + k * period_s",
                answer="TimeShift",
                errors=(400, 404, 405, 500, 503, 504),
            ),
            Operation(
                "PUT",
                "time_shift",
                "Set the job's time-shift explicitly (kept until the job is removed or "
                "registered again)",
                body="TimeShiftPut",
                answer="TimeShift",
                errors=BODY_ERRORS,
            ),
        ),
    ),
    Endpoint(
        "/v1/jobs/{job_id:path}",
        (
            Operation("GET", "job", "One running job", answer="RunningJob"),
            Operation("DELETE", "job", "Remove a running job", answer="RunningJob"),
        ),
    ),
    Endpoint(
        "/k8s/v1/prioritize",
        (
            Operation(
                "POST",
                "prioritize",
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
                "filter",
                "kube-scheduler extender filter verb: drops nodes below --min-score",
                body="ExtenderArgs",
                answer="ExtenderFilterResult",
                errors=COMPUTE_ERRORS,
            ),
        ),
    ),
    Endpoint(
        "/healthz",
        (Operation("GET", "health", "Liveness", answer="Health", errors=(400, 405)),),
    ),
    Endpoint(
        "/metrics",
        (
            Operation(
                "GET",
                "metrics",
                "Prometheus metrics (text format 0.0.4)",
                media_type="text/plain; version=0.0.4; charset=utf-8",
                errors=(400, 405),
            ),
        ),
    ),
    Endpoint(
        "/openapi.json",
        (Operation("GET", "openapi", "This document", errors=(400, 405)),),
    ),
)


def read_time_shift_put(obj: Any, default_epoch_s: float) -> tuple[float, float, float]:
    """``{"shift_s", "period_s", "epoch_s"?}`` -> (shift_s, period_s, epoch_s), seconds;
    ``shift_s`` in [0, ``period_s``)."""
    obj = schema.require_object(obj, "")
    schema.check_fields(obj, "", ("shift_s", "period_s"), ("epoch_s",))
    period = schema.number(obj["period_s"], "period_s", positive=True)
    shift = schema.number(obj["shift_s"], "shift_s", non_negative=True)
    if shift >= period:
        raise InputError("shift_s", f"must be in [0, period_s = {period:g}), got {shift:g}")
    epoch = default_epoch_s
    if obj.get("epoch_s") is not None:
        epoch = schema.number(obj["epoch_s"], "epoch_s", non_negative=True)
    assert math.isfinite(epoch)
    return shift, period, epoch


# -- OpenAPI --------------------------------------------------------------------------------

_NUM = {"type": "number"}
_POS = {"type": "number", "exclusiveMinimum": 0}
_NONNEG = {"type": "number", "minimum": 0}
_ID = {"type": "string", "minLength": 1}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Any], required: list[str], extra: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    if not extra:
        out["additionalProperties"] = False
    return out


SCHEMAS: dict[str, Any] = {
    "Phase": _obj(
        {
            "start_s": {**_NONNEG, "description": "seconds into the iteration"},
            "duration_s": {**_POS, "description": "seconds"},
            "rate_bps": {**_NONNEG, "description": "bits per second"},
        },
        ["start_s", "duration_s", "rate_bps"],
    ),
    "Job": _obj(
        {
            "id": _ID,
            "iteration_time_s": {**_POS, "description": "seconds per iteration"},
            "phases": {"type": "array", "items": _ref("Phase")},
        },
        ["id", "iteration_time_s", "phases"],
    ),
    "Link": _obj({"id": _ID, "capacity_bps": _POS}, ["id", "capacity_bps"]),
    "AdviseRequest": _obj(
        {
            "links": {"type": "array", "minItems": 1, "items": _ref("Link")},
            "jobs": {"type": "array", "items": _ref("Job")},
            "candidates": {
                "type": "array",
                "minItems": 1,
                "items": _obj(
                    {
                        "id": _ID,
                        "paths": {
                            "type": "object",
                            "description": "job id -> ids of the links its traffic crosses",
                            "additionalProperties": {"type": "array", "items": _ID},
                        },
                    },
                    ["id", "paths"],
                ),
            },
        },
        ["links", "jobs", "candidates"],
    ),
    "CandidateResult": _obj(
        {
            "id": {"type": "string"},
            "status": {"type": "string", "enum": ["ok", "rejected"]},
            "score": {"type": ["number", "null"]},
            "min_link_score": {"type": ["number", "null"]},
            "link_scores": {"type": "object", "additionalProperties": _NUM},
            "time_shifts_s": {"type": "object", "additionalProperties": _NUM},
            "loops": {"type": "integer"},
            "loop_loss": _NUM,
            "reason": {"type": ["string", "null"]},
        },
        ["id", "status", "score", "time_shifts_s", "reason"],
        extra=True,
    ),
    "Advice": _obj(
        {
            "best": {"type": ["string", "null"]},
            "time_shifts_s": {"type": "object", "additionalProperties": _NUM},
            "precision_deg": _NUM,
            "aggregate": {"type": "string"},
            "loops": {"type": "string"},
            "candidates": {"type": "array", "items": _ref("CandidateResult")},
        },
        ["best", "time_shifts_s", "candidates"],
        extra=True,
    ),
    "ScoreRequest": _obj(
        {"capacity_bps": _POS, "jobs": {"type": "array", "items": _ref("Job")}},
        ["capacity_bps", "jobs"],
    ),
    "ScoreAnswer": _obj(
        {
            "score": _NUM,
            "time_shifts_s": {"type": "object", "additionalProperties": _NUM},
            "unified_period_s": _NUM,
            "period_exact": {"type": "boolean"},
            "period_error": _NUM,
            "n_angles": {"type": "integer"},
            "method": {"type": "string"},
            "demand_bps": {"type": "array", "items": _NUM},
        },
        ["score", "time_shifts_s", "unified_period_s"],
        extra=True,
    ),
    "RunningJob": _obj(
        {
            "id": _ID,
            "nodes": {"type": "array", "items": _ID, "description": "nodes of --cluster"},
            "model": {"type": "string", "description": "a profile library id"},
            "iteration_time_s": _POS,
            "phases": {"type": "array", "items": _ref("Phase")},
        },
        ["id"],
    ),
    "JobList": _obj({"jobs": {"type": "array", "items": _ref("RunningJob")}}, ["jobs"]),
    "TimeShift": _obj(
        {
            "job_id": {"type": "string"},
            "shift": {"type": "boolean", "description": "false: run free (reason says why)"},
            "shift_s": {**_NONNEG, "description": "seconds in [0, period_s)"},
            "period_s": {**_POS, "description": "seconds; the job's iteration time"},
            "epoch_s": {**_NONNEG, "description": "UNIX seconds slot 0 counts from"},
            "reason": {"type": ["string", "null"]},
            "tolerance_s": {
                "type": ["number", "null"],
                "minimum": 0,
                "description": "seconds an iteration may start late before the agent "
                "re-aligns the job (the advisor's slip tolerance; null: the agent's default)",
            },
        },
        ["job_id", "shift", "shift_s", "period_s", "epoch_s", "reason"],
    ),
    "TimeShiftPut": _obj(
        {"shift_s": _NONNEG, "period_s": _POS, "epoch_s": _NONNEG}, ["shift_s", "period_s"]
    ),
    "ExtenderArgs": {
        "type": "object",
        "description": "k8s.io/kube-scheduler/extender/v1 ExtenderArgs; field names match "
        "case-insensitively (Go's decoder); Nodes when the extender is not nodeCacheCapable, "
        "NodeNames when it is",
        "properties": {
            "Pod": {"type": "object", "description": "the v1.Pod being scheduled"},
            "Nodes": {
                "type": ["object", "null"],
                "properties": {"items": {"type": "array", "items": {"type": "object"}}},
            },
            "NodeNames": {"type": ["array", "null"], "items": {"type": "string"}},
        },
        "required": ["Pod"],
    },
    "HostPriorityList": {
        "type": "array",
        "items": _obj(
            {"Host": {"type": "string"}, "Score": {"type": "integer", "minimum": 0, "maximum": 10}},
            ["Host", "Score"],
        ),
    },
    "ExtenderFilterResult": _obj(
        {
            "Nodes": {"type": ["object", "null"]},
            "NodeNames": {"type": ["array", "null"], "items": {"type": "string"}},
            "FailedNodes": {"type": "object", "additionalProperties": {"type": "string"}},
            "FailedAndUnresolvableNodes": {
                "type": "object",
                "additionalProperties": {"type": "string"},
            },
            "Error": {"type": "string"},
        },
        ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"],
    ),
    "Health": _obj({"status": {"type": "string"}, "version": {"type": "string"}}, ["status"]),
    "Error": _obj(
        {
            "error": _obj(
                {
                    "code": {"type": "integer"},
                    "field": {
                        "type": ["string", "null"],
                        "description": "JSON path into the body, query.NAME, a header or "
                        "path parameter; null when no single field is to blame",
                    },
                    "message": {"type": "string"},
                },
                ["code", "field", "message"],
            )
        },
        ["error"],
    ),
}


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service."""
    from cassini.service.app import version

    paths: dict[str, Any] = {}
    for ep in ENDPOINTS:
        item: dict[str, Any] = {}
        if "{job_id" in ep.path:
            item["parameters"] = [
                {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ]
        for op in ep.operations:
            content: dict[str, Any] = (
                {op.media_type: {"schema": _ref(op.answer)}}
                if op.answer
                else {op.media_type: {"schema": {"type": "string" if "text" in op.media_type
                                                  else "object"}}}
            )
            responses: dict[str, Any] = {
                str(op.status): {"description": "success", "content": content}
            }
            for code in op.also:
                responses[str(code)] = {"description": "success", "content": content}
            for code in op.errors:
                responses[str(code)] = {
                    "description": ERRORS[code].when,
                    "content": {"application/json": {"schema": _ref("Error")}},
                }
            operation: dict[str, Any] = {
                "operationId": f"{op.handler}_{op.method.lower()}",
                "summary": op.summary,
                "responses": responses,
            }
            if op.query:
                operation["parameters"] = [
                    {
                        "name": name,
                        "in": "query",
                        "required": False,
                        "description": QUERY_OPTIONS[name].description,
                        "schema": QUERY_OPTIONS[name].schema,
                    }
                    for name in op.query
                ]
            if op.body:
                operation["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": _ref(op.body)}},
                }
            item[op.method.lower()] = operation
        paths[ep.template] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cassini serve",
            "version": version(),
            "description": "CASSINI placement advisor as a service: advise/score, running "
            "jobs and their time-shifts, and a kube-scheduler extender. Units: seconds, "
            "bits per second.",
        },
        "servers": [{"url": "http://127.0.0.1:8080"}],
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }
