"""``csv``: this project's own trace, CSV with a header or a JSON array of objects."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cassini.profile import JobProfile
from cassini.sim.jobspec import JobSpec
from cassini.sim.traces.common import (
    Row,
    TraceRead,
    collect,
    finish,
    iterations_for,
)
from cassini.sim.traces.files import csv_rows, json_records

NAME = "csv"
SOURCE = "this project (cassini sim trace / trace convert)"
REQUIRED = ("job_id", "arrival_s", "gpus", "model")
OPTIONAL = ("iterations", "duration_s", "hosts")
EXPECTED = (
    "our trace (CSV header or JSON objects with job_id, arrival_s, gpus, model and "
    "iterations or duration_s; optional hosts)"
)


def sniff(path: Path, head: str) -> bool:
    first = head.splitlines()[0] if head else ""
    if path.suffix.lower() == ".json":
        return '"arrival_s"' in head
    cols = [c.strip() for c in first.split(",")]
    return all(c in cols for c in REQUIRED)


def parse_hosts(row: Row, name: str = "hosts") -> tuple[tuple[str, int], ...]:
    """``m1:8;m2:4`` (CSV) or ``[["m1", 8], ["m2", 4]]`` (JSON) -> pairs."""
    value = row.raw(name)
    if not row.present(name):
        return ()
    if isinstance(value, str):
        items = [part.rpartition(":") for part in value.split(";") if part.strip()]
        pairs = [(h.strip(), g.strip()) for h, sep, g in items if sep]
        if len(pairs) != len(items):
            raise row.error(name, f"expected host:gpus;host:gpus, got {value!r}")
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [(str(h), g) for h, g in value]
    else:
        raise row.error(name, f"expected [[host, gpus], ...], got {value!r}")
    out = []
    for host, gpus in pairs:
        try:
            n = int(gpus)
        except (TypeError, ValueError):
            raise row.error(name, f"GPUs of host {host!r} not a whole number: {gpus!r}") from None
        if not host or n < 1 or str(n) != str(gpus).strip():
            raise row.error(name, f"bad host entry {host!r}:{gpus!r}")
        out.append((host, n))
    return tuple(out)


def read(
    path: Path, library: Mapping[str, JobProfile], *, seed: int = 0, strict: bool = True
) -> TraceRead:
    out = TraceRead(NAME, str(path), [])
    if path.suffix.lower() == ".json":
        rows = json_records(path, expected=EXPECTED)
    else:
        rows = csv_rows(path, REQUIRED, expected=EXPECTED, optional=OPTIONAL, others=False)
    seen: set[str] = set()

    def parse(row: Row) -> JobSpec:
        allowed = set(REQUIRED) | set(OPTIONAL)
        extra = [c for c in row.cells if c not in allowed]
        if extra:
            raise row.error(extra[0], f"unknown field (allowed: {', '.join(sorted(allowed))})")
        job_id = row.text("job_id")
        if job_id in seen:
            raise row.error("job_id", f"duplicate job id {job_id!r}")
        model = row.text("model")
        if model not in library:
            known = ", ".join(sorted(library))
            raise row.error("model", f"unknown model {model!r} (library: {known})")
        arrival = row.number("arrival_s", non_negative=True)
        gpus = row.count("gpus", positive=True)
        given = [c for c in ("iterations", "duration_s") if row.present(c)]
        if len(given) != 1:
            raise row.error(
                given[-1] if given else "iterations",
                "give exactly one of iterations and duration_s",
            )
        if given[0] == "iterations":
            iterations = row.count("iterations", positive=True)
        else:
            iterations = iterations_for(row.number("duration_s", positive=True), library[model])
        hosts = parse_hosts(row)
        if hosts and sum(g for _, g in hosts) != gpus:
            raise row.error("hosts", f"hosts hold {sum(g for _, g in hosts)} GPUs, gpus is {gpus}")
        seen.add(job_id)
        return JobSpec(job_id, arrival, gpus, iterations, model, hosts)

    jobs = [job for _, job in collect(rows, parse, out, strict=strict)]
    return finish(out, jobs, from_zero=False)
