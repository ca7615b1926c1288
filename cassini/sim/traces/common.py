"""What every trace reader shares: rows that know their file, line and column; the error
that names them; the checks of every job; the model and length rules (from ``rules``)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cassini.errors import InputError
from cassini.sim.jobspec import JobSpec
from cassini.sim.traces.rules import DEFAULT_ITERATIONS as DEFAULT_ITERATIONS
from cassini.sim.traces.rules import DURATION_NOTE as DURATION_NOTE
from cassini.sim.traces.rules import ModelRule as ModelRule
from cassini.sim.traces.rules import iterations_for as iterations_for

#: Bounds on what a trace row may ask for (docs/sim_traces.md): more iterations than
#: this, or an arrival or run time longer than MAX_SECONDS (about 31.7 years), is a bad
#: row naming the field, not a job simulated with 300-digit times.
MAX_ITERATIONS = 10**9
MAX_SECONDS = 1e9


class BadRow(InputError):
    """A malformed cell: ``file:line:column: field: problem`` (line and column 1-based;
    for JSON the column is where the field's key, or the object, starts)."""

    def __init__(self, file: str, line: int, column: int, field: str, problem: str) -> None:
        super().__init__(field, problem)
        self.file, self.line, self.column = file, line, column
        self.args = (f"{file}:{line}:{column}: {field}: {problem}",)

    def __str__(self) -> str:
        return self.args[0]


class NotThisFormat(InputError):
    """The file is not in the format asked for; the message says what was expected."""


class Skip(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by a row parser for a well-formed row that is not a replayable job."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class TraceRead:
    """A trace as read: the jobs (sorted by arrival, arrivals from 0), rows rejected as
    malformed, rows skipped by a documented rule, and every assumption applied."""

    format: str
    path: str
    jobs: list[JobSpec]
    bad: list[BadRow] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "path": self.path,
            "jobs": len(self.jobs),
            "bad_rows": len(self.bad),
            "bad_row_examples": [str(b) for b in self.bad[:20]],
            "skipped": dict(self.skipped),
            "assumptions": list(self.notes),
        }


# -- rows -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One record with where it came from: ``cells`` by column name; ``columns`` gives
    each name's 1-based column (CSV) or ``(line, column)`` of its key (JSON)."""

    file: str
    line: int
    cells: Mapping[str, Any]
    columns: Mapping[str, int | tuple[int, int]]
    column: int = 1  # where the record starts (JSON objects)

    def error(self, name: str, problem: str) -> BadRow:
        where = self.columns.get(name, self.column)
        line, col = where if isinstance(where, tuple) else (self.line, where)
        return BadRow(self.file, line, col, name, problem)

    def raw(self, name: str) -> Any:
        """The cell as read (CSV cells come stripped of surrounding blanks)."""
        return self.cells.get(name)

    def present(self, name: str) -> bool:
        value = self.cells.get(name)
        if isinstance(value, str):
            return value.strip() not in _ABSENT
        return value is not None

    def text(self, name: str) -> str:
        if not self.present(name):
            raise self.error(name, "missing value")
        return str(self.raw(name))

    def number(
        self,
        name: str,
        *,
        positive: bool = False,
        non_negative: bool = False,
        maximum: float | None = None,
    ) -> float:
        value = self.raw(name)
        if not self.present(name):
            raise self.error(name, "missing value")
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise self.error(name, f"not a number: {value!r}") from None
        if isinstance(value, bool) or not math.isfinite(x):
            raise self.error(name, f"not a finite number: {value!r}")
        if positive and x <= 0:
            raise self.error(name, f"must be > 0, got {value!r}")
        if non_negative and x < 0:
            raise self.error(name, f"must be >= 0, got {value!r}")
        if maximum is not None and x > maximum:
            raise self.error(name, f"must be <= {short(maximum)}, got {value!r}")
        return x

    def count(self, name: str, *, positive: bool = False, maximum: float | None = None) -> int:
        x = self.number(name, non_negative=True, positive=positive, maximum=maximum)
        if x != int(x):
            raise self.error(name, f"must be a whole number, got {self.raw(name)!r}")
        return int(x)

    def time(self, name: str) -> float:
        """A timestamp (see :func:`parse_time`) in seconds since the epoch."""
        if not self.present(name):
            raise self.error(name, "missing value")
        value = self.raw(name)
        t = parse_time(value)
        if t is None:
            raise self.error(name, f"not a time: {value!r} (expected e.g. 2017-10-07 01:12:09)")
        return t


def short(x: float) -> str:
    """``1e9`` for 1e9 (not ``1e+09``); other numbers as ``%g``."""
    text = f"{x:g}"
    return text.replace("e+0", "e").replace("e+", "e")


_ABSENT = frozenset({"", "None", "NULL", "null", "NaN", "nan"})

TIME_FORMATS = ("%Y/%m/%d %H:%M:%S", "%Y/%m/%d %H:%M", "%Y-%m-%d %H:%M", "%m/%d/%Y %H:%M:%S")


def parse_time(value: Any) -> float | None:
    """ISO 8601 (``2017-10-07 01:12:09``, ``2023-03-01 00:18:22+08:00``) or
    ``2023/7/15 02:19``; naive times are taken as UTC (only differences matter).
    None when it does not parse."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        t = None
        for fmt in TIME_FORMATS:
            try:
                t = datetime.strptime(value, fmt)
                break
            except ValueError:
                continue
        if t is None:
            return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


@dataclass(frozen=True)
class JobFields:
    """A reader's fields that hold a job's id, its arrival, its length and its GPUs, for
    naming them in the rows :func:`collect` and :func:`finish` reject."""

    id: str
    arrival: str
    length: str
    gpus: str = "gpus"


def collect(
    rows: Iterator[Row | BadRow],
    parse: Callable[[Row], Any],
    out: TraceRead,
    *,
    strict: bool,
    fields: JobFields | None = None,
    max_gpus: int | None = None,
) -> list[tuple[Row, Any]]:
    """``parse`` every row; malformed ones raise (``strict``) or go to ``out.bad``;
    :class:`Skip` ones are counted in ``out.skipped``.

    ``rows`` may yield a :class:`BadRow` for a record that could not be read at all (a
    JSON line that does not parse, an array element that is not an object): it is a bad
    row on its own and the records after it are read.  An error *raised* by ``rows`` is
    the file's (it cannot be read on) and always propagates.  With ``fields``, a parsed
    :class:`JobSpec` whose id an earlier row already gave, with more than
    :data:`MAX_ITERATIONS` iterations, or (``max_gpus``: the cluster's GPUs) more GPUs
    than the cluster has, is a bad row too."""
    kept = []
    first_line: dict[str, int] = {}
    for row in rows:
        try:
            if isinstance(row, BadRow):
                raise row
            value = parse(row)
            if fields is not None and isinstance(value, JobSpec):
                check_job(row, value, fields, first_line, max_gpus)
            kept.append((row, value))
        except Skip as s:
            out.skipped[s.reason] += 1
        except BadRow as e:
            if strict:
                raise
            out.bad.append(e)
    return kept


def check_job(
    row: Row,
    job: JobSpec,
    fields: JobFields,
    first_line: dict[str, int],
    max_gpus: int | None = None,
) -> None:
    """BadRow for a job id seen before (``first_line``: id -> line, updated), more than
    :data:`MAX_ITERATIONS` iterations, or more than ``max_gpus`` GPUs."""
    if job.job_id in first_line:
        raise row.error(
            fields.id,
            f"duplicate job id {job.job_id!r} (first on line {first_line[job.job_id]})",
        )
    if job.iterations > MAX_ITERATIONS:
        raise row.error(
            fields.length,
            f"a run time of {job.iterations:.3g} iterations of {job.model}, more than "
            f"{short(MAX_ITERATIONS)}",
        )
    if max_gpus is not None and job.gpus > max_gpus:
        raise row.error(fields.gpus, f"{job.gpus} GPUs, the cluster has {max_gpus}")
    first_line[job.job_id] = row.line


def finish(
    out: TraceRead,
    kept: Sequence[tuple[Row, JobSpec]],
    *,
    strict: bool,
    fields: JobFields,
    from_zero: bool = True,
    notes: Callable[[Sequence[JobSpec]], list[str]] | None = None,
) -> TraceRead:
    """Sort by arrival, start arrivals at 0 (``from_zero``).  A job arriving more than
    :data:`MAX_SECONDS` before the median submission (a placeholder date), or of the
    rest more than that after the first, is a bad row naming ``fields.arrival``; ids were
    made unique by :func:`collect`.  ``notes(jobs)``: the lines that count the jobs kept
    (the model rule's, :meth:`ModelRule.notes`), added after the reader's own."""
    kept = _outliers(out, kept, strict=strict, fields=fields) if from_zero else list(kept)
    first = min((j.arrival_s for _, j in kept), default=0.0) if from_zero else 0.0
    jobs = []
    for row, j in kept:
        if j.arrival_s - first > MAX_SECONDS:
            since = " after the first submission" if from_zero else ""
            e = row.error(
                fields.arrival,
                f"arrives {j.arrival_s - first:.3g} s{since}, more than {short(MAX_SECONDS)} s "
                "(about 31.7 years)",
            )
            if strict:
                raise e
            out.bad.append(e)
            continue
        jobs.append(j)
    if notes is not None:
        out.notes += notes(jobs)
    if not jobs:
        why = ""
        if out.bad:  # say what was wrong, not only how often (the caller lists them later)
            shown = "; ".join(str(b) for b in out.bad[:3])
            more = f"; and {len(out.bad) - 3} more" if len(out.bad) > 3 else ""
            why = f"; {len(out.bad)} bad row{'s' if len(out.bad) != 1 else ''}: {shown}{more}"
        skipped = f"; skipped: {dict(out.skipped)}" if out.skipped else ""
        raise InputError("trace", f"{out.path}: no replayable jobs{why}{skipped}")
    jobs = sorted(
        (replace(j, arrival_s=j.arrival_s - first) for j in jobs),
        key=lambda j: (j.arrival_s, j.job_id),
    )
    if first:
        out.notes.append(f"arrivals: seconds after the first submission in the trace ({first:.0f})")
    seen: set[str] = set()
    for j in jobs:
        if j.job_id in seen:  # collect(fields=...) makes this unreachable
            raise InputError("job_id", f"{out.path}: duplicate job id {j.job_id!r}")
        seen.add(j.job_id)
    out.jobs = jobs
    return out


def _outliers(
    out: TraceRead, kept: Sequence[tuple[Row, JobSpec]], *, strict: bool, fields: JobFields
) -> list[tuple[Row, JobSpec]]:
    """``kept`` without the jobs submitted more than :data:`MAX_SECONDS` before the median
    submission, each a bad row (raised when ``strict``): one such date must not put every
    other row out of bounds."""
    if not kept:
        return []
    median = statistics.median(j.arrival_s for _, j in kept)
    rest = []
    for row, j in kept:
        if median - j.arrival_s > MAX_SECONDS:
            e = row.error(
                fields.arrival,
                f"arrives {median - j.arrival_s:.3g} s before the median submission, more "
                f"than {short(MAX_SECONDS)} s (about 31.7 years)",
            )
            if strict:
                raise e
            out.bad.append(e)
            continue
        rest.append((row, j))
    return rest


def merge_hosts(pairs: Sequence[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """Sum the GPUs of repeated hosts, keeping first-seen order."""
    total: dict[str, int] = {}
    for host, gpus in pairs:
        total[host] = total.get(host, 0) + gpus
    return tuple(total.items())
