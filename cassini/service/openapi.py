"""The OpenAPI 3.1 document of the service (``GET /openapi.json``, ``docs/openapi.json``),
built from the endpoint table (:data:`cassini.service.contract.ENDPOINTS`) and the
component schemas here."""

from __future__ import annotations

from typing import Any

import cassini
from cassini.service.contract import ENDPOINTS, QUERY_OPTIONS, Endpoint, Operation
from cassini.service.errors import ERRORS

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
            "released": {
                "type": "boolean",
                "description": "true: released by PUT (shift false), the job's own or a job "
                "of its held group (jobs joined by shared links); it runs free",
            },
            "tolerance_s": {
                "type": ["number", "null"],
                "minimum": 0,
                "description": "seconds an iteration may start late before the agent "
                "re-aligns the job (the advisor's slip tolerance; null: the agent's default)",
            },
        },
        ["job_id", "shift", "shift_s", "period_s", "epoch_s", "reason", "released"],
    ),
    "TimeShiftPut": {
        **_obj(
            {
                "shift": {
                    "type": "boolean",
                    "description": "false: release the job to run free (then give no "
                    "shift_s/period_s/epoch_s); default true",
                },
                "shift_s": _NONNEG,
                "period_s": _POS,
                "epoch_s": _NONNEG,
                "reason": {"type": "string", "description": "why it is released"},
            },
            [],
        ),
        "anyOf": [
            {"required": ["shift_s", "period_s"]},
            {"required": ["shift"], "properties": {"shift": {"const": False}}},
        ],
    },
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
    "Health": _obj(
        {
            "status": {"type": "string"},
            "version": {"type": "string"},
            "unusable_jobs": {
                "type": "array",
                "description": "registered jobs kept in the state file but not used (a node "
                "left the cluster, or the stored row no longer reads); each answers "
                "shift: false with the reason",
                "items": _obj({"id": _ID, "reason": {"type": "string"}}, ["id", "reason"]),
            },
        },
        ["status"],
    ),
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


def _responses(op: Operation) -> dict[str, Any]:
    schema = (
        _ref(op.answer)
        if op.answer
        else {"type": "string" if "text" in op.media_type else "object"}
    )
    content = {op.media_type: {"schema": schema}}
    responses: dict[str, Any] = {str(op.status): {"description": "success", "content": content}}
    for code in op.also:
        if code == 304:
            responses["304"] = {"description": "not modified: If-None-Match names the ETag"}
        else:
            responses[str(code)] = {"description": "success", "content": content}
    for code in op.errors:
        responses[str(code)] = {
            "description": ERRORS[code].when,
            "content": {"application/json": {"schema": _ref("Error")}},
        }
    return responses


def _operation(op: Operation) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": op.handler.__name__,
        "summary": op.summary,
        "responses": _responses(op),
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
    if op.write:
        operation["security"] = [{"bearer": []}]
    return operation


def document(endpoints: tuple[Endpoint, ...] = ENDPOINTS) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service."""
    paths: dict[str, Any] = {}
    for ep in endpoints:
        item: dict[str, Any] = {}
        if "{job_id" in ep.path:
            item["parameters"] = [
                {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ]
        for op in ep.operations:
            item[op.method.lower()] = _operation(op)
        paths[ep.template] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cassini serve",
            "version": cassini.__version__,
            "description": "CASSINI placement advisor as a service: advise/score, running "
            "jobs and their time-shifts, and a kube-scheduler extender. Units: seconds, "
            "bits per second. Writes (POST/PUT/DELETE under /v1/jobs) need a bearer token "
            "from the service's --token-file.",
        },
        "servers": [{"url": "http://127.0.0.1:8080"}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
