"""The HTTP application of ``cassini serve`` (Starlette, served by uvicorn).

One Starlette ``Route`` per endpoint of :data:`cassini.service.contract.ENDPOINTS`, with
its methods (Starlette answers 405 and HEAD); the route reads the query options and the
JSON body (:mod:`cassini.service.reading`) and calls the operation's handler
(:mod:`cassini.service.handlers`).  Errors are raised and turned into the JSON error
answer by the app's ``exception_handlers``; the metrics middleware
(:class:`cassini.service.metrics.MetricsMiddleware`) counts, times and logs every request.
"""

from __future__ import annotations

import contextlib
import json
import re
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

import cassini
from cassini.errors import InputError
from cassini.service import contract, openapi
from cassini.service.config import ServiceConfig
from cassini.service.drain import DrainMiddleware
from cassini.service.errors import (
    InternalError,
    MethodNotAllowed,
    NotFound,
    ServiceError,
    from_input_error,
    json_bytes,
)
from cassini.service.handlers import Call
from cassini.service.metrics import MetricsMiddleware, record_of
from cassini.service.reading import JSON, drain, query_options, read_json
from cassini.service.service import Service


def version() -> str:
    """The installed package's version (``cassini.__version__``)."""
    return cassini.__version__


def create_app(
    config: ServiceConfig | None = None, *, log: Callable[[str], None] | None = None
) -> Starlette:
    """The ASGI app; ``app.state.service`` is its :class:`Service`."""
    service = Service(config or ServiceConfig(), log)
    service.openapi = openapi.document()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(
        routes=[_route(ep) for ep in contract.ENDPOINTS],
        middleware=[
            Middleware(
                MetricsMiddleware,
                metrics=service.metrics,
                log=None if service.config.quiet else service.log,
                on_write=service.audit_write,
            ),
            Middleware(DrainMiddleware, drain=service.drain),
        ],
        lifespan=lifespan,
        exception_handlers={
            HTTPException: _http_exception,
            ServiceError: _service_error,
            InputError: _input_error,
        },
    )
    # /healthz/ is not /healthz: a JSON 404 naming the endpoints, not a 307 redirect
    app.router.redirect_slashes = False
    app.state.service = service
    return app


class ExactRoute(Route):
    """A Route whose pattern must match the whole path: Starlette ends it in ``$``, which
    also matches before a final newline, so ``/v1/jobs/a%0A`` would name job ``a``."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        pattern = self.path_regex.pattern
        assert pattern.endswith("$")
        self.path_regex = re.compile(pattern[:-1] + r"\Z", self.path_regex.flags)


def _route(ep: contract.Endpoint) -> Route:
    async def endpoint(request: Request) -> Response:
        service: Service = request.app.state.service
        op = ep.operation(request.method)
        record = record_of(request)
        if op.write:
            record.write = True
            record.job_id = request.path_params.get("job_id")
            client = request.client.host if request.client else "-"
            # the name first: a write refused for its rate is audited with its token
            record.token_name = await service.guard.authenticate(
                request.headers.get("authorization")
            )
            service.guard.check_rate(record.token_name, client)
        options = query_options(request, op)
        body = await read_json(request, service.config) if op.body is not None else None
        if op.write and record.job_id is None and isinstance(body, dict):
            record.job_id = str(body.get("id")) if body.get("id") is not None else None
        deadline = record.started + service.config.timeout_s
        call = Call(request.method, dict(request.path_params), options, body, deadline,
                    request.headers)
        try:
            answer = await op.handler(service, call)
        except (ServiceError, InputError, ClientDisconnect):
            raise
        except Exception as e:
            service.log(f"cassini serve: internal error on {request.method} {request.url.path}:")
            service.log(traceback.format_exc().rstrip())
            raise InternalError(f"internal error: {type(e).__name__}") from None
        if isinstance(answer, Response):
            return answer
        status, payload = answer
        if isinstance(payload, bytes):
            return Response(payload, status_code=status, media_type=op.media_type)
        return Response(json_bytes(payload), status_code=status, media_type=JSON)

    return ExactRoute(ep.path, endpoint, methods=list(ep.methods()), name=ep.template)


async def _error_response(request: Request, err: ServiceError) -> Response:
    if err.reason:
        record_of(request).rejected = err.reason
    await drain(request)
    return Response(err.body(), status_code=err.status, headers=err.headers, media_type=JSON)


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return await _error_response(request, exc)


async def _input_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InputError)
    return await _error_response(request, from_input_error(exc))


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route matched) and 405 (a route matched the path, not the
    method) as our JSON error; Allow lists the methods in the table's order."""
    code = getattr(exc, "status_code", 500)
    route = request.scope.get("route")
    ep = next((e for e in contract.ENDPOINTS if e.path == getattr(route, "path", None)), None)
    err: ServiceError
    if code == 405 and ep is not None:
        allowed = ep.allowed_methods()
        err = MethodNotAllowed(
            f"{request.method} not allowed on {ep.template}; use {' or '.join(allowed)}",
            "method",
            headers={"Allow": ", ".join(allowed)},
        )
    elif code == 404:
        known = ", ".join(e.template for e in contract.ENDPOINTS)
        err = NotFound(f"no such endpoint {request.url.path!r} (endpoints: {known})", "path")
    else:  # pragma: no cover - Starlette raises no other HTTP error here
        err = InternalError(f"HTTP {code}")
    return await _error_response(request, err)


def write_openapi(path: str | Path) -> None:
    """Write the OpenAPI document (docs/openapi.json)."""
    Path(path).write_text(json.dumps(openapi.document(), indent=2) + "\n", encoding="utf-8")


__all__ = ["Service", "ServiceConfig", "create_app", "version", "write_openapi"]
