"""Strict readers for JSON objects: unknown fields, wrong types and bad numbers are errors.

Every reader takes the field path of the object it reads so that an error names exactly
where the problem is (``candidates[2].paths.j7[1]``).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cassini.errors import InputError

#: Control characters (C0, DEL, C1): invisible in logs and in directory listings, so no
#: id, name or path of ours may hold one.
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def require_object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(field or "input", f"must be a JSON object, got {kind_of(value)}")
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
    minimum: float | None = None,
    above: float | None = None,
    below: float | None = None,
) -> float:
    """A finite number (bools are not numbers; numpy's are), optionally > 0
    (``positive``), >= 0 (``non_negative``), >= ``minimum``, > ``above`` and < ``below``.
    A string that reads as a number gets a hint (YAML 1.1 reads ``2e8`` as a string)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(field, not_a_number(value, "a number"))
    try:
        value = float(value)
    except OverflowError:
        raise InputError(field, "must be finite, got an integer too large for a float") from None
    if not math.isfinite(value):
        raise InputError(field, f"must be finite, got {value}")
    if positive:
        above = 0.0 if above is None else max(above, 0.0)
    if non_negative:
        minimum = 0.0 if minimum is None else max(minimum, 0.0)
    if above is not None and value <= above:
        raise InputError(field, f"must be > {above:g}, got {shown_against(value, above)}")
    if minimum is not None and value < minimum:
        raise InputError(field, f"must be >= {minimum:g}, got {shown_against(value, minimum)}")
    if below is not None and value >= below:
        raise InputError(field, f"must be < {below:g}, got {shown_against(value, below)}")
    return value


def shown_against(value: float, bound: float) -> str:
    """``value`` as an error message shows it beside ``bound``: ``%g``, or in full where
    ``%g`` would read as the bound itself (0.9999999 against a minimum of 1 is not "1")."""
    shown = f"{value:g}"
    return repr(value) if shown == f"{bound:g}" and value != bound else shown


def integer(
    value: Any, field: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """A whole number (``4`` or ``4.0``, not ``4.5``; bools are not numbers) in ``minimum
    .. maximum`` where given; strings get :func:`number`'s hint."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(field, not_a_number(value, "an integer"))
    if not isinstance(value, numbers.Integral):
        value = float(value)
        if not (math.isfinite(value) and value.is_integer()):
            raise InputError(field, f"must be an integer, got {value!r}")
    out = int(value)
    if minimum is not None and out < minimum:
        raise InputError(field, f"must be >= {minimum}, got {shown_value(out)}")
    if maximum is not None and out > maximum:
        raise InputError(field, f"must be <= {maximum}, got {shown_value(out)}")
    return out


def not_a_number(value: Any, what: str) -> str:
    """``must be <what>, got ...``, with a hint where a string reads as a number."""
    problem = f"must be {what}, got {kind_of(value)}"
    if isinstance(value, str):
        try:
            parsed = float(value)
        except ValueError:
            parsed = math.nan
        if "e" in value.lower() and math.isfinite(parsed):
            # YAML 1.1 reads a float only with a dot and a signed exponent
            plain = f" or {int(parsed)}" if parsed.is_integer() else ""
            problem += f" (YAML reads {value} as a string: write {parsed:.1e}{plain}, unquoted)"
        elif math.isfinite(parsed):
            problem += " (a quoted number is a string: write it without quotes)"
    return problem


def identifier(value: Any, field: str) -> str:
    """A non-empty string id (integers are accepted and turned into strings)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InputError(field, f"must be a string id, got {kind_of(value)}")
    value = str(value)
    if not value:
        raise InputError(field, "must not be empty")
    return value


def choice(value: Any, field: str, options: Iterable[str]) -> str:
    """One of ``options`` (strings), named by ``field`` when it is not (a list or a
    mapping included: they were hashed and crashed)."""
    names = tuple(options)
    if not isinstance(value, str) or value not in names:
        raise InputError(field, f"must be one of {', '.join(names)}, got {kind_of(value)}")
    return value


def array(value: Any, field: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise InputError(field, f"must be a JSON array, got {kind_of(value)}")
    if non_empty and not value:
        raise InputError(field, "must not be empty")
    return value


def join(field: str, name: str) -> str:
    return f"{field}.{name}" if field else name


#: The most characters of a value an error message repeats: a longer value is cut there
#: and its length given, so that a 3,000-digit number, or a whole file read as one string
#: (a CSV where a config was expected), is not printed whole.
SHOWN_CHARS = 60


def shown_value(value: Any) -> str:
    """``repr(value)`` as an error message repeats it: whole up to :data:`SHOWN_CHARS`
    characters (of a string: of the string itself), else its first ones then ``...
    (N characters)``; an integer too long for Python to write out is named by its size."""
    if isinstance(value, str):
        if len(value) <= SHOWN_CHARS:
            return repr(value)
        return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"
    try:
        text = repr(value)
    except ValueError:  # past sys.get_int_max_str_digits(): repr refuses
        return f"(about {int(value.bit_length() * math.log10(2)) + 1} digits, too long to write)"
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def kind_of(value: Any) -> str:
    """How an error message names a value that is not what a field wants (a long number
    or string cut by :func:`shown_value`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {shown_value(value)}"
    if isinstance(value, str):
        return f"the string {shown_value(value)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


class Reader:
    """Typed access to the fields of one JSON object read from a file; every error is an
    :class:`InputError` naming the field's path (``where`` joined with the key), e.g.
    ``layers[2].backward_s: must be >= 0, got -0.1``.  Numbers are finite and >= 0 unless
    said otherwise."""

    def __init__(self, obj: Any, where: str = "") -> None:
        self.obj = require_object(obj, where)
        self.where = where

    def field(self, key: str) -> str:
        """The path of ``key`` in the error messages."""
        return join(self.where, key)

    def _get(self, key: str, optional: bool) -> Any:
        if key not in self.obj:
            if optional:
                return None
            raise InputError(self.field(key), "missing")
        return self.obj[key]

    def string(self, key: str) -> str:
        v = self._get(key, False)
        if not isinstance(v, str):
            raise InputError(self.field(key), f"a string, got {shown_value(v)}")
        return v

    def choice(self, key: str, options: Iterable[str]) -> str:
        options = tuple(options)
        v = self.string(key)
        if v not in options:
            problem = f"one of {', '.join(options)}, got {shown_value(v)}"
            raise InputError(self.field(key), problem)
        return v

    def number(self, key: str, *, positive: bool = False, optional: bool = False) -> Any:
        """A finite number >= 0 (> 0 with ``positive``) as a float; None when ``optional``
        and absent (or null)."""
        v = self._get(key, optional)
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InputError(self.field(key), f"a finite number, got {shown_value(v)}")
        if positive and v <= 0:
            raise InputError(self.field(key), f"must be > 0, got {shown_value(v)}")
        if v < 0:
            raise InputError(self.field(key), f"must be >= 0, got {shown_value(v)}")
        return float(v)

    def integer(
        self, key: str, minimum: int = 0, optional: bool = False, default: int | None = None
    ) -> Any:
        """An integer >= ``minimum``; ``default`` when absent, or None when ``optional``."""
        if default is not None and key not in self.obj:
            return default
        v = self._get(key, optional)
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(self.field(key), f"an integer, got {shown_value(v)}")
        if v < minimum:
            raise InputError(self.field(key), f"must be >= {minimum}, got {shown_value(v)}")
        return v

    def int_list(self, key: str, minimum: int) -> list[int]:
        """A non-empty list of integers, each >= ``minimum``."""
        v = self._get(key, False)
        if not isinstance(v, list) or not v:
            raise InputError(self.field(key), "a non-empty list of integers")
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
                raise InputError(
                    f"{self.field(key)}[{i}]", f"an integer >= {minimum}, got {shown_value(x)}"
                )
        return v

    def objects(self, key: str, what: str) -> list[Reader]:
        """A non-empty list of objects, each as a Reader at ``key[i]``."""
        v = self._get(key, False)
        if not isinstance(v, list) or not v:
            raise InputError(self.field(key), f"a non-empty list of {what}")
        return [Reader(x, f"{self.field(key)}[{i}]") for i, x in enumerate(v)]

    def mapping(self, key: str, default: Mapping[str, Any]) -> dict[str, Any]:
        """A free-form object (``default`` when absent)."""
        v = self.obj.get(key, default)
        if not isinstance(v, Mapping):
            raise InputError(self.field(key), "an object")
        return dict(v)

    def no_other_fields(self, known: Iterable[str]) -> None:
        """Raise naming the first field (alphabetically) that is not ``known``."""
        unknown = sorted(set(self.obj) - set(known))
        if unknown:
            raise InputError(self.field(unknown[0]), "unknown field")


def counted(n: int, noun: str) -> str:
    """``1 node``, ``2 nodes``, ``2 shared switches``: the one pluralising helper of our
    messages (the kube modules, the trace readers' notes)."""
    return f"{n} {noun}{'' if n == 1 else 'es' if noun.endswith('ch') else 's'}"
