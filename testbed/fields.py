"""Names read from a testbed config's fields (strings a directory may be called), or an
:class:`~cassini.errors.InputError` naming the field (``testbed.run.load`` turns it into a
``ConfigError``).  Numbers are read by :func:`cassini.schema.number` and
:func:`cassini.schema.integer` (finite, of the right kind and in range; a number YAML 1.1
reads as a string, ``2e8``, gets a hint)."""

from __future__ import annotations

from typing import Any

from cassini.errors import InputError
from cassini.schema import CONTROL_CHARS, kind_of

RUN_FILES = ("results.json",)
"""What a run writes in its output folder itself, beside the schemes' folders: no scheme
may be called so (its folder would take the file's place)."""


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


def scheme_name(value: Any, field: str) -> str:
    """A scheme's name: a :func:`name` that is not one of the run's own files
    (:data:`RUN_FILES`: ``OUT/results.json`` is the run's, ``OUT/<name>`` the scheme's)."""
    value = name(value, field)
    if value in RUN_FILES:
        raise InputError(
            field, f"must not be {value!r} (the run writes that file in its output folder)"
        )
    return value


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.fields")
