"""Numbers and names read from a testbed config's fields: finite, of the right kind and in
range (names: strings a directory may be called), or an
:class:`~cassini.errors.InputError` naming the field (``testbed.run.load`` turns it into a
``ConfigError``).  A number YAML 1.1 reads as a string (``2e8``) gets a hint."""

from __future__ import annotations

import math
from typing import Any

from cassini.errors import InputError
from cassini.schema import CONTROL_CHARS, kind_of


def _not_a_number(value: Any, field: str, what: str) -> InputError:
    problem = f"must be {what}, got {kind_of(value)}"
    if isinstance(value, str):
        try:
            parsed = float(value)
        except ValueError:
            parsed = math.nan
        if "e" in value.lower() and math.isfinite(parsed):
            # YAML 1.1 reads a float only with a dot and a signed exponent
            plain = f" or {int(parsed)}" if parsed.is_integer() else ""
            problem += f" (YAML reads {value} as a string: write {parsed:.1e}{plain})"
        elif math.isfinite(parsed):
            problem += " (a quoted number is a string: write it without quotes)"
    return InputError(field, problem)


def number(
    value: Any,
    field: str,
    *,
    minimum: float | None = None,
    above: float | None = None,
    below: float | None = None,
) -> float:
    """``value`` as a finite float, >= ``minimum``, > ``above`` and < ``below`` where
    given (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _not_a_number(value, field, "a number")
    try:
        out = float(value)
    except OverflowError:
        raise InputError(field, "must be a finite number, got a too large integer") from None
    if not math.isfinite(out):
        raise InputError(field, f"must be a finite number, got {out}")
    if minimum is not None and out < minimum:
        raise InputError(field, f"must be >= {minimum:g}, got {out:g}")
    if above is not None and out <= above:
        raise InputError(field, f"must be > {above:g}, got {out:g}")
    if below is not None and out >= below:
        raise InputError(field, f"must be < {below:g}, got {out:g}")
    return out


def integer(
    value: Any, field: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` as a whole number (``4`` or ``4.0``, not ``4.5``) in ``minimum ..
    maximum`` where given (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _not_a_number(value, field, "an integer")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise InputError(field, f"must be an integer, got {value!r}")
    out = int(value)
    if minimum is not None and out < minimum:
        raise InputError(field, f"must be >= {minimum}, got {out}")
    if maximum is not None and out > maximum:
        shown = out if len(str(out)) <= 30 else "a larger integer"
        raise InputError(field, f"must be <= {maximum}, got {shown}")
    return out




def name(value: Any, field: str) -> str:
    """``value`` as a name that is also a directory's (a scheme's results go to
    ``OUT/<name>``): a non-empty string, not ``.`` or ``..``, without ``/`` or control
    characters (a number is not a name: ``name: 42`` is refused, not turned into "42")."""
    if not isinstance(value, str):
        raise InputError(field, f"must be a name (a string), got {kind_of(value)}")
    if not value.strip():
        raise InputError(field, "must not be empty")
    bad = "/" if "/" in value else (m.group() if (m := CONTROL_CHARS.search(value)) else None)
    if bad is not None:
        raise InputError(field, f"must not contain {bad!r} (it names a directory), got {value!r}")
    if value in (".", ".."):
        raise InputError(field, f"must not be {value!r} (it names a directory)")
    return value
