"""``cassini serve`` moved to the :mod:`cassini.service` package; this module keeps the
names the CLI uses (:data:`DESCRIPTION`, :data:`EPILOG`, :func:`add_arguments`,
:func:`serve_command`) without importing the HTTP stack."""

from __future__ import annotations

from cassini.service.cli import (
    DEFAULT_HOST,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    DESCRIPTION,
    EPILOG,
    ServiceThread,
    add_arguments,
    serve,
    serve_command,
)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT_S",
    "DESCRIPTION",
    "EPILOG",
    "ServiceThread",
    "add_arguments",
    "serve",
    "serve_command",
]
