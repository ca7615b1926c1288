"""Reading trace files into located rows: CSV (streamed) and JSON (an array, or one object
a line), each :class:`~cassini.sim.traces.common.Row` knowing its file, line and column."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from cassini.errors import InputError
from cassini.sim.traces.common import BadRow, NotThisFormat, Row


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise InputError("trace", f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise NotThisFormat("trace", f"{path}: not a text file") from None


def csv_rows(
    path: Path,
    columns: Sequence[str],
    *,
    expected: str,
    header: bool = True,
    optional: Sequence[str] = (),
    others: bool = True,
) -> Iterator[Row]:
    """Rows of a CSV file as :class:`Row` objects.

    ``columns`` must all be in the header (any order, other columns ignored), else
    :class:`NotThisFormat` saying ``expected``.  ``header=False`` for headerless tables
    (PAI's): then ``columns`` is the full column list, in order; a first row equal to it
    is taken as a header all the same.  ``others=False``: a column outside ``columns``
    and ``optional`` is a bad header cell."""
    name = str(path)
    try:
        f = path.open(encoding="utf-8-sig", newline="")
    except OSError as e:
        raise InputError("trace", f"cannot read {path}: {e.strerror}") from None
    with f:
        yield from _csv_rows(f, name, columns, expected, header, optional, others)


def _csv_rows(
    f: TextIO,
    name: str,
    columns: Sequence[str],
    expected: str,
    header: bool,
    optional: Sequence[str],
    others: bool,
) -> Iterator[Row]:
    reader = csv.reader(f)  # streamed: PAI's instance table has millions of rows
    try:
        first = next(reader)
    except StopIteration:
        raise NotThisFormat("trace", f"{name}: empty file; expected {expected}") from None
    except (csv.Error, UnicodeDecodeError) as e:
        raise NotThisFormat("trace", f"{name}: not CSV ({e}); expected {expected}") from None
    if header or [c.strip() for c in first] == list(columns):
        names = [c.strip() for c in first]
        missing = [c for c in columns if c not in names]
        if missing:
            raise NotThisFormat(
                "trace",
                f"{name}: not {expected}: header lacks {', '.join(missing)} "
                f"(found: {', '.join(names[:12])}{' ...' if len(names) > 12 else ''})",
            )
        pending: list[list[str]] = []
        allowed = set(columns) | set(optional)
        unknown = [(k + 1, c) for k, c in enumerate(names) if c not in allowed]
        if unknown and not others:
            k, c = unknown[0]
            raise BadRow(name, 1, k, c, f"unknown column (allowed: {', '.join(sorted(allowed))})")
    else:
        names = list(columns)
        if len(first) != len(names):
            raise NotThisFormat(
                "trace",
                f"{name}: not {expected}: {len(first)} columns in line 1, expected "
                f"{len(names)} ({', '.join(names)})",
            )
        pending = [first]
    index = {c: i + 1 for i, c in enumerate(names)}
    line = 1 if pending else reader.line_num
    wanted = set(columns) | set(optional)
    cols = {c: i for c, i in index.items() if c in wanted}

    def make(values: list[str], at: int) -> Row:
        cells = {c: values[i - 1].strip() for c, i in cols.items() if i - 1 < len(values)}
        return Row(name, at, cells, cols)

    for values in pending:
        yield make(values, line)
    while True:
        start = reader.line_num + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as e:
            raise BadRow(name, start, 1, "row", f"malformed CSV: {e}") from None
        if not values or all(not v.strip() for v in values):
            continue
        row = make(values, start)
        if len(values) < len(names):
            missing = [c for c in names[len(values) :] if c in wanted]
            if missing:
                row = Row(name, start, row.cells, {**cols, missing[0]: len(values) + 1})
        yield row


def json_records(path: Path, *, expected: str) -> Iterator[Row]:
    """Objects of a JSON array (or of a file with one JSON object per line) with the
    line and column of each object and of each of its top-level keys."""
    text = read_text(path)
    name = str(path)
    decoder = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if i >= len(text):
        raise NotThisFormat("trace", f"{name}: empty file; expected {expected}")
    array = text[i] == "["
    if array:
        i = _skip_ws(text, i + 1)
    elif text[i] != "{":
        raise NotThisFormat("trace", f"{name}: not JSON; expected {expected}")
    lines = _LineIndex(text)
    first = True
    while i < len(text):
        if array and text[i] == "]":
            return
        if not first and array:
            if text[i] != ",":
                line, col = lines.at(i)
                raise BadRow(name, line, col, "trace", "expected ',' between objects")
            i = _skip_ws(text, i + 1)
        first = False
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            if i == _skip_ws(text, 0) + (1 if array else 0) and e.pos == i:
                raise NotThisFormat("trace", f"{name}: not JSON; expected {expected}") from None
            line, col = lines.at(e.pos)
            raise BadRow(name, line, col, "trace", f"malformed JSON: {e.msg}") from None
        line, col = lines.at(i)
        if not isinstance(obj, dict):
            raise BadRow(name, line, col, "trace", "expected a JSON object")
        keys = {}
        for key in obj:
            at = text.find(json.dumps(key), i, end)
            keys[key] = lines.at(at) if at >= 0 else (line, col)
        yield Row(name, line, obj, keys, column=col)
        i = _skip_ws(text, end)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


class _LineIndex:
    """1-based (line, column) of a character offset."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def at(self, offset: int) -> tuple[int, int]:
        import bisect

        k = bisect.bisect_right(self.starts, offset) - 1
        return k + 1, offset - self.starts[k] + 1
