"""Checks shared by the topology builders; errors name the parameter."""

from __future__ import annotations

from typing import Any

from cassini import schema
from cassini.errors import InputError


def check_int(name: str, value: Any, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (bools are not integers)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(name, f"must be an integer >= {minimum}, got {value!r}")
    return value


def check_positive(name: str, value: Any) -> float:
    """A finite number > 0, checked as the plain ``cluster:`` form checks one
    (:func:`cassini.schema.number`: a string such as YAML's ``5e10`` gets a hint)."""
    return schema.number(value, name, positive=True)
