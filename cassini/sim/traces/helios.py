"""``helios``: SenseTime Helios ``cluster_log.csv`` (S-Lab-System-Group/HeliosData, SC 2021)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from cassini.sim.traces.secondary import require_columns

NAME = "helios"
SOURCE = "S-Lab-System-Group/HeliosData: data/<cluster>/cluster_log.csv"
COLUMNS = (
    "job_id", "vc", "gpu_num", "node_num", "state", "submit_time", "start_time", "end_time",
    "duration",
)  # fmt: skip
EXPECTED = "a Helios cluster_log.csv (header: " + ",".join(COLUMNS) + ", ...)"


def sniff(path: Path, head: str) -> bool:
    cols = [c.strip() for c in (head.splitlines() or [""])[0].split(",")]
    return all(c in cols for c in COLUMNS) and "gpu_time" not in cols


def read_job_log(
    path: Path,
    library: Mapping[str, JobProfile],
    *,
    name: str,
    columns: Sequence[str],
    expected: str,
    seed: int,
    strict: bool,
    model_column: str | None = None,
    max_gpus: int | None = None,
) -> TraceRead:
    """Shared by Helios and Acme (same Slurm-derived job log): one job per row."""
    out = TraceRead(name, str(path), [])
    models = ModelRule(library, seed)
    rows = csv_rows(path, columns, expected=expected)
    fields = JobFields("job_id", "submit_time", "duration", "gpu_num")

    def parse(row: Row) -> JobSpec:
        require_columns(row, columns)  # a line cut short is a bad row, not a skipped one
        job_id = row.text("job_id")
        gpus = row.count("gpu_num")
        arrival = row.time("submit_time")
        if gpus == 0:
            raise Skip("no GPUs (gpu_num 0)")
        if row.present("duration"):
            run = row.number("duration", maximum=MAX_SECONDS)
        elif not row.present("start_time"):
            raise Skip("never started (no start_time nor duration)")
        elif row.present("end_time"):
            run = row.time("end_time") - row.time("start_time")
        else:
            raise Skip("no duration and no end_time")
        if run <= 0:
            raise Skip("run time <= 0")
        model = models.choose(job_id, row.raw(model_column) if model_column else None)
        return JobSpec(job_id, arrival, gpus, iterations_for(run, library[model]), model, run_s=run)

    kept = collect(rows, parse, out, strict=strict, fields=fields, max_gpus=max_gpus)
    out.notes += [
        "run time: the duration column (end_time - start_time when empty); all final "
        "states; skipped: gpu_num 0, never started (no start_time nor duration)",
        DURATION_NOTE,
    ]
    return finish(out, kept, strict=strict, fields=fields, notes=models.notes)


def read(
    path: Path,
    library: Mapping[str, JobProfile],
    *,
    seed: int = 0,
    strict: bool = True,
    max_gpus: int | None = None,
) -> TraceRead:
    return read_job_log(
        path,
        library,
        name=NAME,
        columns=COLUMNS,
        expected=EXPECTED,
        seed=seed,
        strict=strict,
        max_gpus=max_gpus,
    )
