"""``csv``: this project's own trace, CSV with a header or a JSON array of objects."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cassini import outputs
from cassini.profile import JobProfile, match_model, model_keys, unknown_model
from cassini.sim.jobspec import JobSpec
from cassini.sim.traces.common import (
    MAX_ITERATIONS,
    MAX_SECONDS,
    JobFields,
    Row,
    TraceRead,
    collect,
    finish,
    iterations_for,
    short,
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
    path: Path,
    library: Mapping[str, JobProfile],
    *,
    seed: int = 0,
    strict: bool = True,
    max_gpus: int | None = None,
) -> TraceRead:
    out = TraceRead(NAME, str(path), [])
    if path.suffix.lower() == ".json":
        rows = json_records(path, expected=EXPECTED)
    else:
        rows = csv_rows(path, REQUIRED, expected=EXPECTED, optional=OPTIONAL, others=False)
    fields = JobFields("job_id", "arrival_s", "iterations")
    keys = model_keys(library)  # once, not per row

    def parse(row: Row) -> JobSpec:
        allowed = set(REQUIRED) | set(OPTIONAL)
        extra = [c for c in row.cells if c not in allowed]
        if extra:
            raise row.error(extra[0], f"unknown field (allowed: {', '.join(sorted(allowed))})")
        job_id = row.text("job_id")
        name = row.text("model")
        model = match_model(name, library, keys)  # case and punctuation ignored, as everywhere
        if model is None:
            raise row.error("model", unknown_model(name, library))
        arrival = row.number("arrival_s", non_negative=True, maximum=MAX_SECONDS)
        gpus = row.count("gpus", positive=True)
        given = [c for c in ("iterations", "duration_s") if row.present(c)]
        if len(given) != 1:
            raise row.error(
                given[-1] if given else "iterations",
                "give exactly one of iterations and duration_s",
            )
        run: float | None = None
        if given[0] == "iterations":
            iterations = row.count("iterations", positive=True, maximum=MAX_ITERATIONS)
        else:
            run = row.number("duration_s", positive=True, maximum=MAX_SECONDS)
            iterations = iterations_for(run, library[model])
            if iterations > MAX_ITERATIONS:
                raise row.error(
                    "duration_s",
                    f"{run:g} s is {iterations:.3g} iterations of {model}, more than "
                    f"{short(MAX_ITERATIONS)}",
                )
        hosts = parse_hosts(row)
        if hosts and sum(g for _, g in hosts) != gpus:
            raise row.error("hosts", f"hosts hold {sum(g for _, g in hosts)} GPUs, gpus is {gpus}")
        return JobSpec(job_id, arrival, gpus, iterations, model, hosts, run_s=run)

    kept = collect(rows, parse, out, strict=strict, fields=fields, max_gpus=max_gpus)
    return finish(out, kept, strict=strict, fields=fields, from_zero=False)


def write(jobs: Sequence[JobSpec], path: Path) -> None:
    """Write ``jobs`` as our trace: a JSON array for ``.json``, else CSV (the caller checks
    the suffix: :func:`cassini.sim.workload.check_trace_suffix`); never half-written.

    A job whose iterations were counted from a recorded run time is written as that
    ``duration_s``: read on any cluster, it runs the trace's run time on that cluster's
    links, as the published trace read directly does (its iterations hold only for the
    profile they were counted in).  Other jobs (the trace gave a count, or it was drawn)
    as ``iterations``.  ``hosts`` is written only when a job has recorded hosts."""
    rows = [_record(j) for j in jobs]
    names = ["job_id", "arrival_s", "gpus", "iterations", "duration_s", "model", "hosts"]
    if not any("duration_s" in r for r in rows):
        names.remove("duration_s")
    if not any(j.hosts for j in jobs):
        names.remove("hosts")
        for r in rows:
            del r["hosts"]
    with outputs.replaced(Path(path)) as tmp:
        if Path(path).suffix.lower() == ".json":
            tmp.write_text(json.dumps(rows, indent=1))
            return
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=names)
            writer.writeheader()
            for r in rows:
                writer.writerow(r | ({"hosts": format_hosts(r["hosts"])} if "hosts" in r else {}))


def _record(job: JobSpec) -> dict[str, Any]:
    run = job.run_s
    length = {"iterations": job.iterations} if run is None else {"duration_s": run}
    return {
        "job_id": job.job_id, "arrival_s": job.arrival_s, "gpus": job.gpus, **length,
        "model": job.model, "hosts": [[h, g] for h, g in job.hosts],
    }  # fmt: skip


def format_hosts(hosts: Sequence[Sequence[Any]]) -> str:
    """``[["m1", 8], ["m2", 4]]`` -> ``"m1:8;m2:4"`` (the CSV trace's ``hosts`` cell)."""
    return ";".join(f"{h}:{g}" for h, g in hosts)
