"""Reading a request: its query options (checked against the operation's) and its JSON
body (Content-Type, size limit, read time limit, UTF-8, JSON by the CLI's reader), each
problem a :class:`~cassini.service.errors.ServiceError` naming the field; and draining
the body of a refused request."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
from typing import Any

from starlette.requests import Request

from cassini import files
from cassini.service.config import ServiceConfig
from cassini.service.contract import QUERY_OPTIONS, Operation
from cassini.service.errors import (
    BadRequest,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
)
from cassini.service.metrics import record_of

JSON = "application/json"
#: A refused body at most this large is read and discarded before the answer, so that a
#: client sending the whole body first reads the answer instead of a connection reset.
DRAIN_LIMIT_BYTES = 16 << 20


def query_options(request: Request, op: Operation) -> dict[str, Any]:
    """The operation's query options, read and checked (400 naming ``query.NAME``)."""
    query = request.url.query
    if query and not op.query:
        raise BadRequest(f"{request.url.path} takes no query parameters, got {query!r}", "query")
    out: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        field = f"query.{name}"
        if name not in op.query:
            raise BadRequest(f"unknown option (allowed: {', '.join(op.query)})", field)
        if name in out:
            raise BadRequest("given more than once", field)
        out[name] = QUERY_OPTIONS[name].read(value, field)
    return out


def _check_content_type(request: Request) -> None:
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


async def _read_bytes(request: Request, limit: int, timeout_s: float) -> bytes:
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
        return await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        raise RequestTimeout(f"body not received within {timeout_s:g} s", "body") from None


async def read_json(request: Request, config: ServiceConfig) -> Any:
    """The request's JSON body (any JSON value), within the config's limits, read as
    ``cassini advise`` reads its file: a leading UTF-8 byte-order mark is dropped and a
    key given twice in one object is refused (:func:`cassini.files.loads_json`, with the
    CLI's message ``malformed JSON: duplicate key 'K'``)."""
    _check_content_type(request)
    data = await _read_bytes(request, config.max_body_bytes, config.read_timeout_s)
    record_of(request).body_read = True
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(f"not UTF-8 at byte {bom + e.start}", "body") from None
    try:
        return files.loads_json(text)
    except json.JSONDecodeError as e:
        raise BadRequest(
            f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", "body"
        ) from None
    except ValueError as e:  # DuplicateKey, TooDeep, NumberTooLong (the reader turns
        # Python's integer conversion error into it), or any other: as 'cassini advise'
        # prints it (files.parse_json)
        raise BadRequest(f"malformed JSON: {e}", "body") from None


async def drain(request: Request) -> None:
    """Read and discard the body of a refused request (when not too large)."""
    record = record_of(request)
    if record.body_read or request.method in ("GET", "HEAD"):
        return
    record.body_read = True
    length = request.headers.get("content-length", "")
    if not length.isdigit() or int(length) > DRAIN_LIMIT_BYTES:
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1.0):
            async for _ in request.stream():
                pass
