"""``pollux``: Pollux/AdaptDL simulator workloads (petuum/adaptdl, OSDI 2021)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cassini.profile import JobProfile
from cassini.sim.jobspec import JobSpec
from cassini.sim.traces.common import (
    DEFAULT_ITERATIONS,
    JobFields,
    ModelRule,
    Row,
    Skip,
    TraceRead,
    collect,
    finish,
)
from cassini.sim.traces.files import csv_rows

NAME = "pollux"
SOURCE = "petuum/adaptdl: simulator/workloads/workload-<n>.csv"
COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
EXPECTED = "a Pollux workload CSV (header: " + ",".join(COLUMNS) + ")"
ALIASES = {"imagenet": "resnet50", "bert": "bert"}


def sniff(path: Path, head: str) -> bool:
    cols = [c.strip() for c in (head.splitlines() or [""])[0].split(",")]
    return all(c in cols for c in COLUMNS)


def read(
    path: Path,
    library: Mapping[str, JobProfile],
    *,
    seed: int = 0,
    strict: bool = True,
    max_gpus: int | None = None,
) -> TraceRead:
    out = TraceRead(NAME, str(path), [])
    models = ModelRule(library, seed, ALIASES)
    rows = csv_rows(path, COLUMNS, expected=EXPECTED)

    def parse(row: Row) -> JobSpec:
        job_id = row.text("name")
        arrival = row.number("time", non_negative=True)
        app = row.text("application")
        gpus = row.count("num_replicas")
        row.count("batch_size")  # checked, not used
        if gpus == 0:
            raise Skip("no GPUs (num_replicas 0)")
        model = models.choose(job_id, app)
        return JobSpec(job_id, arrival, gpus, models.draw(job_id), model)

    fields = JobFields("name", "time", "name", "num_replicas")
    kept = collect(rows, parse, out, strict=strict, fields=fields, max_gpus=max_gpus)
    lo, hi = DEFAULT_ITERATIONS
    out.notes += [
        f"iterations: drawn uniformly in [{lo}, {hi}] by sha256('{seed}:<job id>:iterations') "
        "(the workload gives no length)",
    ]
    return finish(out, kept, strict=strict, fields=fields, notes=models.notes)
