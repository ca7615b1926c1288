"""What every trace reader shares: rows that know their file, line and column; the error
that names them; the seeded model rule; durations turned into iterations."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.sim.jobspec import JobSpec

#: Iterations drawn for a job whose trace records neither a duration nor a count
#: (Pollux): uniform in this inclusive range, as the CASSINI paper's workloads.
DEFAULT_ITERATIONS = (200, 1000)


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

    def number(self, name: str, *, positive: bool = False, non_negative: bool = False) -> float:
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
        return x

    def count(self, name: str, *, positive: bool = False) -> int:
        x = self.number(name, non_negative=True, positive=positive)
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


def collect(
    rows: Iterator[Row],
    parse: Callable[[Row], Any],
    out: TraceRead,
    *,
    strict: bool,
) -> list[tuple[Row, Any]]:
    """``parse`` every row; malformed ones raise (``strict``) or go to ``out.bad``;
    :class:`Skip` ones are counted in ``out.skipped``."""
    kept = []
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return kept
        except BadRow as e:  # the file itself is broken here: no row to go on from
            if strict:
                raise
            out.bad.append(e)
            return kept
        try:
            kept.append((row, parse(row)))
        except Skip as s:
            out.skipped[s.reason] += 1
        except BadRow as e:
            if strict:
                raise
            out.bad.append(e)


# -- models and iterations ------------------------------------------------------------------
def _key(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


class ModelRule:
    """Which library profile a job trains.

    A name the trace gives is matched to a profile id ignoring case and punctuation
    (``GPT-2`` -> ``gpt2``), then through the reader's alias table.  Otherwise — no name,
    or one the library lacks — the **seeded rule**: the library's ids sorted, index
    ``sha256("<seed>:<job id>") mod count``; the same job gets the same model for the same
    seed and library, whatever else is in the trace."""

    def __init__(
        self,
        library: Mapping[str, JobProfile],
        seed: int,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self.library = library
        self.seed = seed
        self.ids = sorted(library)
        self.by_key = {_key(m): m for m in self.ids}
        self.aliases = {_key(k): v for k, v in (aliases or {}).items() if v in library}
        self.used: Counter[str] = Counter()  # how: named, alias, seeded
        self.unmatched: Counter[str] = Counter()

    def choose(self, job_id: str, name: str | None = None) -> str:
        if name:
            key = _key(name)
            if key in self.by_key:
                self.used["named"] += 1
                return self.by_key[key]
            if key in self.aliases:
                self.used["alias"] += 1
                return self.aliases[key]
            self.unmatched[name] += 1
        self.used["seeded"] += 1
        digest = hashlib.sha256(f"{self.seed}:{job_id}".encode()).digest()
        return self.ids[int.from_bytes(digest[:8], "big") % len(self.ids)]

    def draw(self, job_id: str, low_high: tuple[int, int] = DEFAULT_ITERATIONS) -> int:
        """Iterations for a job whose trace gives none: uniform in ``low_high`` from the
        same seeded hash (salted)."""
        lo, hi = low_high
        digest = hashlib.sha256(f"{self.seed}:{job_id}:iterations".encode()).digest()
        return lo + int.from_bytes(digest[:8], "big") % (hi - lo + 1)

    def notes(self) -> list[str]:
        out = []
        if self.used["named"] or self.used["alias"]:
            out.append(
                f"model: {self.used['named']} jobs by the trace's model name, "
                f"{self.used['alias']} through the reader's alias table"
            )
        if self.used["seeded"]:
            out.append(
                f"model: {self.used['seeded']} jobs by the seeded rule (library ids sorted, "
                f"index sha256('{self.seed}:<job id>') mod {len(self.ids)}; "
                f"library: {', '.join(self.ids)})"
            )
        if self.unmatched:
            names = ", ".join(f"{n} ({c})" for n, c in self.unmatched.most_common(8))
            out.append(f"model names not in the library (seeded rule used): {names}")
        return out


def iterations_for(duration_s: float, profile: JobProfile) -> int:
    """Whole iterations that take ``duration_s`` at the profile's dedicated pace (>= 1)."""
    return max(1, math.ceil(duration_s / profile.iteration_time_s - 1e-9))


DURATION_NOTE = (
    "iterations: the recorded run time (s) over the chosen profile's dedicated iteration "
    "time, rounded up: the trace's run time, which included whatever contention that "
    "cluster had, is taken as the run time on a dedicated network"
)


def finish(out: TraceRead, jobs: list[JobSpec], *, from_zero: bool = True) -> TraceRead:
    """Sort by arrival, start arrivals at 0 (``from_zero``), check ids are unique."""
    if not jobs:
        why = ""
        if out.bad:  # say what was wrong, not only how often (the caller lists them later)
            shown = "; ".join(str(b) for b in out.bad[:3])
            more = f"; and {len(out.bad) - 3} more" if len(out.bad) > 3 else ""
            why = f"; {len(out.bad)} bad row{'s' if len(out.bad) != 1 else ''}: {shown}{more}"
        skipped = f"; skipped: {dict(out.skipped)}" if out.skipped else ""
        raise InputError("trace", f"{out.path}: no replayable jobs{why}{skipped}")
    first = min(j.arrival_s for j in jobs) if from_zero else 0.0
    jobs = sorted(
        (replace(j, arrival_s=j.arrival_s - first) for j in jobs),
        key=lambda j: (j.arrival_s, j.job_id),
    )
    if first:
        out.notes.append(f"arrivals: seconds after the first submission in the trace ({first:.0f})")
    seen: set[str] = set()
    for j in jobs:
        if j.job_id in seen:
            raise InputError("job_id", f"{out.path}: duplicate job id {j.job_id!r}")
        seen.add(j.job_id)
    out.jobs = jobs
    return out


def merge_hosts(pairs: Sequence[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """Sum the GPUs of repeated hosts, keeping first-seen order."""
    total: dict[str, int] = {}
    for host, gpus in pairs:
        total[host] = total.get(host, 0) + gpus
    return tuple(total.items())
