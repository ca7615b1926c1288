"""Graceful stop (SIGTERM): the requests in flight finish, a request that arrives meanwhile
gets 503 (``Connection: close``, ``Retry-After: 1``) so its client retries once the service
is back (the service runs as one replica: docs/service.md), then the server stops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from cassini.service.errors import ShuttingDown
from cassini.service.metrics import record_of_scope


class Drain:
    """Requests in flight, and whether the service is draining."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0

    async def until_idle(self, grace_s: float) -> bool:
        """Wait until no request is in flight (True) or ``grace_s`` seconds passed."""
        deadline = time.monotonic() + grace_s
        while self.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.in_flight == 0


class DrainMiddleware:
    """Counts requests in flight; while draining, answers new ones 503 at once."""

    def __init__(self, app: Callable, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            err = ShuttingDown("shutting down: retry after Retry-After seconds, once the "
                               "service is back", None,
                               headers={"Retry-After": "1", "Connection": "close"})
            record = record_of_scope(scope)
            if record is not None:
                record.rejected = err.reason
            body = err.body()
            headers = [(b"content-type", b"application/json"),
                       (b"content-length", str(len(body)).encode())]
            headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
            await send({"type": "http.response.start", "status": err.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        self.drain.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.drain.in_flight -= 1
