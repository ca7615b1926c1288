"""``tiresias``: Tiresias simulator job traces (SymbioticLab/Tiresias, NSDI 2019), also
used by Blox-era simulators."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cassini.profile import JobProfile
from cassini.sim.jobspec import JobSpec
from cassini.sim.traces.common import (
    DURATION_NOTE,
    MAX_SECONDS,
    JobFields,
    ModelRule,
    Row,
    Skip,
    TraceRead,
    collect,
    finish,
    iterations_for,
)
from cassini.sim.traces.files import csv_rows

NAME = "tiresias"
SOURCE = "SymbioticLab/Tiresias: simulator/<n>_job.csv"
COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval")
EXPECTED = "a Tiresias job CSV (header: " + ",".join(COLUMNS) + ")"


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
    models = ModelRule(library, seed)
    rows = csv_rows(path, COLUMNS, expected=EXPECTED)

    def parse(row: Row) -> JobSpec:
        job_id = row.text("job_id")
        gpus = row.count("num_gpu")
        arrival = row.number("submit_time", non_negative=True)
        row.count("iterations")
        name = row.text("model_name")
        run = row.number("duration", maximum=MAX_SECONDS)
        if gpus == 0:
            raise Skip("no GPUs (num_gpu 0)")
        if run <= 0:
            raise Skip("duration <= 0")
        model = models.choose(job_id, name)
        return JobSpec(job_id, arrival, gpus, iterations_for(run, library[model]), model, run_s=run)

    fields = JobFields("job_id", "submit_time", "duration", "num_gpu")
    kept = collect(rows, parse, out, strict=strict, fields=fields, max_gpus=max_gpus)
    out.notes.append(DURATION_NOTE)
    return finish(out, kept, strict=strict, fields=fields, notes=models.notes)
