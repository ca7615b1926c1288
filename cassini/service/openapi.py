"""The OpenAPI 3.1 document of the service (``GET /openapi.json``, ``docs/openapi.json``),
built from the endpoint table (:data:`cassini.service.contract.ENDPOINTS`: paths, methods,
HEAD with each GET, query options, statuses, headers, security) and the component schemas
generated from the request and answer models (:mod:`cassini.service.models`), which also
validate the requests; here only what neither says: the links between operations and the
document's frame."""

from __future__ import annotations

from typing import Any

import cassini
from cassini.service.contract import (
    DRAINING,
    ENDPOINTS,
    ERROR_HEADERS,
    HEADERS,
    QUERY_OPTIONS,
    Endpoint,
    Operation,
)
from cassini.service.errors import ERRORS, ServiceError, ShuttingDown
from cassini.service.handlers import NotReady
from cassini.service.models import component_schemas


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


#: OpenAPI links (what a model cannot say): a registered job's id leads to its routes, so
#: that a client (and schemathesis's stateful phase) can follow POST /v1/jobs with them.
_JOB_LINKS: dict[str, dict[str, Any]] = {
    name: {"operationId": op, "parameters": {"job_id": "$response.body#/id"}}
    for name, op in (
        ("GetJob", "get_job"),
        ("DeleteJob", "delete_job"),
        ("GetTimeShift", "get_time_shift"),
        ("PutTimeShift", "put_time_shift"),
    )
}
_LINKS: dict[str, dict[str, Any]] = {"register_job": _JOB_LINKS}
#: Error answers an operation gives for a reason of its own, besides the status's usual
#: one (operationId -> status -> the error class whose ``when`` says it).
_OWN_ERRORS: dict[str, dict[int, type[ServiceError]]] = {"readiness": {503: NotReady}}


def _headers(names: tuple[str, ...]) -> dict[str, Any]:
    """The ``headers`` of a response that sends ``names`` (:data:`contract.HEADERS`)."""
    return {
        name: {
            "description": HEADERS[name].description,
            "required": HEADERS[name].required,
            "schema": HEADERS[name].schema,
        }
        for name in names
    }


def _responses(op: Operation) -> dict[str, Any]:
    schema = (
        _ref(op.answer)
        if op.answer
        else {"type": "string" if "text" in op.media_type else "object"}
    )
    content = {op.media_type: {"schema": schema}}
    success: dict[str, Any] = {"description": "success", "content": content}
    if op.headers:
        success["headers"] = _headers(op.headers)
    links = _LINKS.get(op.handler.__name__)
    if links:
        success["links"] = links
    responses: dict[str, Any] = {str(op.status): success}
    for code in op.also:
        if code == 304:
            responses["304"] = {"description": "not modified: If-None-Match names the ETag"}
            if op.headers:
                responses["304"]["headers"] = _headers(op.headers)
        else:
            responses[str(code)] = success
    # every operation answers DRAINING while the server drains (contract.DRAINING)
    codes = op.errors if DRAINING in op.errors else (*op.errors, DRAINING)
    for code in codes:
        error: type[ServiceError] = ERRORS[code]
        if error.status == ShuttingDown.status and 504 not in op.errors:
            error = ShuttingDown  # no computation to wait for: only a draining server
        own = _OWN_ERRORS.get(op.handler.__name__, {}).get(code)
        responses[str(code)] = {
            "description": f"{own.when}; or {error.when}" if own else error.when,
            "content": {"application/json": {"schema": _ref("Error")}},
        }
        if code in ERROR_HEADERS:
            responses[str(code)]["headers"] = _headers(ERROR_HEADERS[code])
    return responses


def _operation(op: Operation) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": op.handler.__name__,
        "summary": op.summary,
        "responses": _responses(op),
    }
    parameters = [
        {
            "name": name,
            "in": "query",
            "required": False,
            "description": QUERY_OPTIONS[name].description,
            "schema": QUERY_OPTIONS[name].schema,
        }
        for name in op.query
    ]
    parameters += [{"name": name, "in": "header", **_headers((name,))[name]} for name in op.reads]
    if parameters:
        operation["parameters"] = parameters
    if op.body:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(op.body)}},
        }
    if op.write:
        operation["security"] = [{"bearer": []}]
    return operation


def _head(get: dict[str, Any]) -> dict[str, Any]:
    """The HEAD operation of a GET one (the server answers HEAD wherever it answers GET):
    the same parameters, statuses and headers, no body."""
    responses = {
        code: {k: v for k, v in answer.items() if k not in ("content", "links")}
        for code, answer in get["responses"].items()
    }
    return {
        **get,
        "operationId": f"head_{get['operationId']}",
        "summary": f"Headers of GET, no body: {get['summary']}",
        "responses": responses,
    }


def document(endpoints: tuple[Endpoint, ...] = ENDPOINTS) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the service."""
    paths: dict[str, Any] = {}
    for ep in endpoints:
        item: dict[str, Any] = {}
        if "{job_id" in ep.path:
            item["parameters"] = [
                {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
            ]
        for method in ep.allowed_methods():  # the methods its route answers, HEAD with GET
            op = ep.operation(method)
            item[method.lower()] = (
                _operation(op) if op.method == method else _head(_operation(op))
            )
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
            "schemas": component_schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
