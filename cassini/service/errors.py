"""Error answers of ``cassini serve``: every status code the service sends is written once,
here, as a subclass of :class:`ServiceError`; the app turns any of them into
``{"error": {"code", "field", "message"}}``."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from cassini.errors import InputError


class ServiceError(Exception):
    """An error answer: ``status`` (class attribute), a message, the field to blame (or
    None), extra headers, and the label of the rejected-requests counter when a limit hit."""

    status: ClassVar[int] = 500
    reason: ClassVar[str | None] = None  # cassini_http_requests_rejected_total label
    when: ClassVar[str] = ""  # for the OpenAPI document and docs/service.md

    def __init__(
        self, message: str, field: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.headers = dict(headers or {})

    def body(self) -> bytes:
        error = {"code": self.status, "field": self.field, "message": self.message}
        return json_bytes({"error": error})


class BadRequest(ServiceError):
    status = 400
    when = "malformed JSON, schema error naming the field, bad query option or path parameter"


class Unprocessable(ServiceError):
    status = 422
    when = (
        "the body follows the schema but breaks a rule it states in words: a phase beyond "
        "its iteration or overlapping another, shift_s not below period_s, duplicate ids, "
        "an unknown node, library model, job or link; the field is named"
    )


class NotFound(ServiceError):
    status = 404
    when = "unknown path, or unknown job id"


class MethodNotAllowed(ServiceError):
    status = 405
    when = "method not accepted by the path; the Allow header lists those that are"


class Unauthorized(ServiceError):
    status = 401
    reason = "unauthenticated"
    when = "a write without a valid bearer token (Authorization: Bearer TOKEN)"

    def __init__(self, message: str, field: str | None = "Authorization") -> None:
        super().__init__(message, field, headers={"WWW-Authenticate": 'Bearer realm="cassini"'})


class Forbidden(ServiceError):
    status = 403
    reason = "writes_disabled"
    when = "a write to a service started without --token-file or --insecure-writes"


class RequestTimeout(ServiceError):
    status = 408
    when = "the body did not arrive within the read time limit"


class PayloadTooLarge(ServiceError):
    status = 413
    reason = "body_too_large"
    when = "body over --max-body-bytes"


class UnsupportedMediaType(ServiceError):
    status = 415
    when = "POST/PUT without Content-Type: application/json (UTF-8)"


class TooManyRequests(ServiceError):
    status = 429
    reason = "rate_limited"
    when = (
        "over the per-client write rate (--write-rate; Retry-After says when), or the "
        "registry holds --max-jobs jobs"
    )


class TooManyJobs(TooManyRequests):
    reason = "too_many_jobs"


class InternalError(ServiceError):
    status = 500
    when = "internal error (logged with its traceback), or a worker process died"


class Overloaded(ServiceError):
    status = 503
    reason = "overloaded"
    when = (
        "no worker became free within --timeout-s, or the service is shutting down "
        "(draining); Retry-After: 1"
    )


class ShuttingDown(Overloaded):
    reason = "draining"
    when = (
        "the service is shutting down (draining after SIGTERM/SIGINT): the request was not "
        "served; retry after Retry-After (1 s), once the service is back; Connection: close"
    )


class ComputeTimeout(ServiceError):
    status = 504
    reason = "timeout"
    when = "the computation ran past --timeout-s; its worker process was killed and replaced"


#: Every error the service answers with, by status code (OpenAPI, docs, tests).
ERRORS: dict[int, type[ServiceError]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        RequestTimeout,
        PayloadTooLarge,
        UnsupportedMediaType,
        Unprocessable,
        TooManyRequests,
        InternalError,
        Overloaded,
        ComputeTimeout,
    )
}
#: Labels of ``cassini_http_requests_rejected_total``.
REJECT_REASONS: tuple[str, ...] = tuple(
    c.reason for c in (*ERRORS.values(), TooManyJobs, ShuttingDown) if c.reason
)


def from_input_error(e: InputError, prefix: str = "") -> Unprocessable:
    """A domain reader's refusal of a body that passed its model (the schema) as a 422;
    the JSON readers name the whole document "input" (or ""), which over HTTP is the
    body."""
    field = e.field
    if field in ("", "input"):
        field = prefix or "body"
    elif prefix:
        field = f"{prefix}.{field}"
    return Unprocessable(e.problem, field)


def json_bytes(obj: Any) -> bytes:
    """Compact JSON with a trailing newline, as every answer is written."""
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")
