"""Reading trace files into located rows: CSV (streamed) and JSON (an array, or one object
a line), each :class:`~cassini.sim.traces.common.Row` knowing its file, line and column."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from cassini.errors import InputError
from cassini.schema import kind_of
from cassini.sim.traces.common import BadRow, NotThisFormat, Row

GZIP_MAGIC = b"\x1f\x8b"


def check_not_gzip(path: Path) -> None:
    """InputError for a gzip-compressed file (its first two bytes), which would
    otherwise read as binary or malformed text: say to decompress it."""
    try:
        with path.open("rb") as f:
            magic = f.read(2)
    except OSError:
        return  # the caller's own open says why
    if magic == GZIP_MAGIC:
        raise InputError("trace", f"{path}: gzip-compressed: decompress it first (gunzip {path})")


def read_text(path: Path) -> str:
    check_not_gzip(path)
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
) -> Iterator[Row | BadRow]:
    """Rows of a CSV file as :class:`Row` objects.

    ``columns`` must all be in the header (any order, other columns ignored), else
    :class:`NotThisFormat` saying ``expected``.  ``header=False`` for headerless tables
    (PAI's): then ``columns`` is the full column list, in order; a first row equal to it
    is taken as a header all the same.  ``others=False``: a column outside ``columns``
    and ``optional`` is a bad header cell.  A row the CSV parser rejects is yielded as
    a :class:`BadRow` (see :func:`~cassini.sim.traces.common.collect`)."""
    name = str(path)
    check_not_gzip(path)
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
) -> Iterator[Row | BadRow]:
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
        except UnicodeDecodeError as e:  # the text cannot be read on from here
            raise BadRow(name, start, 1, "row", f"malformed CSV: {e}") from None
        except csv.Error as e:
            # the reader starts afresh on the next line: this row is bad, the rest are read
            yield BadRow(name, start, 1, "row", f"malformed CSV: {e}")
            if reader.line_num < start:  # nothing consumed: do not loop on it
                return
            continue
        if not values or all(not v.strip() for v in values):
            continue
        row = make(values, start)
        if len(values) < len(names):
            missing = [c for c in names[len(values) :] if c in wanted]
            if missing:
                row = Row(name, start, row.cells, {**cols, missing[0]: len(values) + 1})
        yield row


def json_records(path: Path, *, expected: str) -> Iterator[Row | BadRow]:
    """Objects of a JSON array (or of a file with one JSON object per line) with the
    line and column of each object and of each of its top-level keys.

    A record that is not an object (``null``, ``42``), or a line of a JSON-lines file
    that does not parse, is yielded as a :class:`BadRow` and the records after it are
    read.  An array is one JSON document: if it does not parse, that is one BadRow
    *raised* (file, line and column of the fault), before any record is yielded."""
    text = read_text(path)
    name = str(path)
    i = _skip_ws(text, 0)
    if i >= len(text):
        raise NotThisFormat("trace", f"{name}: empty file; expected {expected}")
    lines = _LineIndex(text)
    if text[i] == "[":
        records = _array(text, i, name, expected, lines)
    elif text[i] == "{":
        records = _object_lines(text, i, name, expected, lines)
    else:
        raise NotThisFormat("trace", f"{name}: not JSON; expected {expected}")
    for item in records:
        if isinstance(item, BadRow):
            yield item
            continue
        obj, start, end = item
        line, col = lines.at(start)
        if not isinstance(obj, dict):
            yield BadRow(name, line, col, "trace", f"expected a JSON object, got {kind_of(obj)}")
            continue
        keys = {}
        for key in obj:
            at = text.find(json.dumps(key), start, end)
            keys[key] = lines.at(at) if at >= 0 else (line, col)
        yield Row(name, line, obj, keys, column=col)


_DECODER = json.JSONDecoder()


def _decode(text: str, i: int) -> tuple[Any, int]:
    """One JSON value at ``i``; JSONDecodeError (with a position) for any failure."""
    try:
        return _DECODER.raw_decode(text, i)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as e:  # 4300+ digit integers, deep nesting
        raise json.JSONDecodeError(str(e) or type(e).__name__, text, i) from None


def _array(
    text: str, i: int, name: str, expected: str, lines: _LineIndex
) -> list[tuple[Any, int, int]]:
    """The elements of the array at ``i`` with their spans, all parsed before any is
    returned: a fault anywhere raises one BadRow and nothing is read."""

    def broken(at: int, msg: str) -> BadRow:
        line, col = lines.at(at)
        return BadRow(
            name, line, col, "trace",
            f"malformed JSON: {msg} (the file is one JSON array, which does not parse: "
            "nothing was read)",
        )  # fmt: skip

    items = []
    i = _skip_ws(text, i + 1)
    if i < len(text) and text[i] == "]":
        i += 1
    else:
        while True:
            try:
                obj, end = _decode(text, i)
            except json.JSONDecodeError as e:
                if not items and e.pos == i:
                    raise NotThisFormat("trace", f"{name}: not JSON; expected {expected}") from None
                raise broken(e.pos, e.msg) from None
            items.append((obj, i, end))
            i = _skip_ws(text, end)
            if i >= len(text):
                raise broken(i, "unterminated array: expecting ',' or ']'")
            if text[i] == "]":
                i += 1
                break
            if text[i] != ",":
                raise broken(i, "Expecting ',' delimiter")
            i = _skip_ws(text, i + 1)
    i = _skip_ws(text, i)
    if i < len(text):
        raise broken(i, "Extra data after the array")
    return items


def _object_lines(
    text: str, i: int, name: str, expected: str, lines: _LineIndex
) -> Iterator[tuple[Any, int, int] | BadRow]:
    """Objects one after another (JSON lines, or pretty-printed objects in a row).  One
    that does not parse is a BadRow; reading goes on at the next line that starts with
    ``{`` in its first column."""
    first = True
    while i < len(text):
        try:
            obj, end = _decode(text, i)
        except json.JSONDecodeError as e:
            if first and e.pos == i:
                raise NotThisFormat("trace", f"{name}: not JSON; expected {expected}") from None
            yield _broken_record(name, lines, i, e)
            first = False
            i = _next_record(text, i)
            continue
        first = False
        yield obj, i, end
        i = _skip_ws(text, end)


def _broken_record(name: str, lines: _LineIndex, start: int, e: json.JSONDecodeError) -> BadRow:
    """The BadRow for a record starting at ``start`` that does not parse: on the record's
    first line (at the fault when it is on that line, else where the record starts, the
    fault's line and column in the message: a truncated record runs into the next ones)."""
    line, col = lines.at(start)
    at_line, at_col = lines.at(e.pos)
    if at_line == line:
        return BadRow(name, line, at_col, "trace", f"malformed JSON: {e.msg}")
    where = f"line {at_line}, column {at_col}"
    problem = f"malformed JSON: {e.msg} (at {where}, in the record that starts here)"
    return BadRow(name, line, col, "trace", problem)


def _next_record(text: str, i: int) -> int:
    """Where the record after a broken one starting at ``i`` may start: the next line
    beginning with ``{`` (nested objects of pretty-printed records are indented)."""
    at = text.find("\n{", i)
    return len(text) if at < 0 else at + 1


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
