"""Checks shared by the topology builders; errors name the parameter."""

from __future__ import annotations

import math
from typing import Any

from cassini.errors import InputError


def check_int(name: str, value: Any, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (bools are not integers)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(name, f"must be an integer >= {minimum}, got {value!r}")
    return value


def check_positive(name: str, value: Any) -> float:
    """A finite number > 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise InputError(name, f"must be a finite number > 0, got {value!r}")
    return float(value)
