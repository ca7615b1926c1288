"""Strict readers for JSON objects: unknown fields, wrong types and bad numbers are errors.

Every reader takes the field path of the object it reads so that an error names exactly
where the problem is (``candidates[2].paths.j7[1]``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from cassini.errors import InputError


def require_object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(field or "input", f"must be a JSON object, got {_kind(value)}")
    return value


def check_fields(
    obj: Mapping[str, Any], field: str, required: Iterable[str], optional: Iterable[str] = ()
) -> None:
    """Raise on a missing required field or on any field not listed."""
    required = list(required)
    allowed = set(required) | set(optional)
    for name in obj:
        if name not in allowed:
            raise InputError(
                join(field, str(name)), f"unknown field (allowed: {', '.join(sorted(allowed))})"
            )
    for name in required:
        if name not in obj:
            raise InputError(join(field, name), "missing required field")


def number(
    value: Any,
    field: str,
    *,
    positive: bool = False,
    non_negative: bool = False,
) -> float:
    """A finite JSON number (bools are not numbers), optionally > 0 or >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(field, f"must be a number, got {_kind(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise InputError(field, f"must be finite, got {value}")
    if positive and value <= 0:
        raise InputError(field, f"must be > 0, got {value:g}")
    if non_negative and value < 0:
        raise InputError(field, f"must be >= 0, got {value:g}")
    return value


def identifier(value: Any, field: str) -> str:
    """A non-empty string id (integers are accepted and turned into strings)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InputError(field, f"must be a string id, got {_kind(value)}")
    value = str(value)
    if not value:
        raise InputError(field, "must not be empty")
    return value


def array(value: Any, field: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise InputError(field, f"must be a JSON array, got {_kind(value)}")
    if non_empty and not value:
        raise InputError(field, "must not be empty")
    return value


def join(field: str, name: str) -> str:
    return f"{field}.{name}" if field else name


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
