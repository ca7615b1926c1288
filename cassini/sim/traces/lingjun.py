"""``lingjun``: Alibaba Lingjun GPU cluster dataset 2023 (alibaba/alibaba-lingjun-dataset-2023,
the Crux paper, SIGCOMM 2024)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path

from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.sim.jobspec import JobSpec
from cassini.sim.traces.common import (
    DURATION_NOTE,
    JobFields,
    ModelRule,
    Row,
    Skip,
    TraceRead,
    collect,
    finish,
    iterations_for,
    merge_hosts,
)
from cassini.sim.traces.files import csv_rows
from cassini.sim.traces.secondary import SecondaryRows

NAME = "lingjun"
SOURCE = "alibaba/alibaba-lingjun-dataset-2023: data/job.csv, data/worker.csv"
JOB_COLUMNS = ("job_name", "model", "gmt_job_submitted", "gmt_job_running", "gmt_job_finished")
WORKER_COLUMNS = ("job_name", "worker_name", "host_ip", "RES")
EXPECTED = "a Lingjun job.csv (header with " + ", ".join(JOB_COLUMNS) + ")"


def tables(path: Path) -> tuple[Path, Path]:
    job = path / "job.csv" if path.is_dir() else path
    return job, job.parent / "worker.csv"


def sniff(path: Path, head: str) -> bool:
    if path.is_dir():
        return (path / "job.csv").exists() and (path / "worker.csv").exists()
    return "gmt_job_submitted" in (head.splitlines() or [""])[0]


def worker_gpus(row: Row) -> int:
    raw = row.raw("RES")
    if not row.present("RES"):
        return 0
    try:
        res = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        raise row.error("RES", f"not a JSON object: {raw!r}") from None
    if not isinstance(res, dict):
        raise row.error("RES", f"not a JSON object: {raw!r}")
    for key, value in res.items():
        if str(key).endswith("/gpu"):
            try:
                n = float(value)
            except (TypeError, ValueError):
                raise row.error("RES", f"{key} not a number: {value!r}") from None
            if n < 0 or n != int(n):
                raise row.error("RES", f"{key} must be a whole number >= 0, got {value!r}")
            return int(n)
    return 0


#: per job: worker_name -> (host_ip, GPUs, the line it was first on)
Workers = dict[str, dict[str, tuple[str, int, int]]]


def read_workers(
    worker_path: Path, out: TraceRead, secondary: SecondaryRows
) -> tuple[Workers, int]:
    """Each GPU worker once by name, and how many rows repeated a worker exactly."""
    workers: Workers = {}
    repeated = 0

    def parse_worker(row: Row) -> None:
        nonlocal repeated
        gpus = worker_gpus(row)
        job = row.text("job_name")
        name = row.text("worker_name")
        if not gpus:
            return
        host = row.text("host_ip")
        mine = workers.setdefault(job, {})
        if name not in mine:
            mine[name] = (host, gpus, row.line)
            return
        first_host, first_gpus, line = mine[name]
        if (first_host, first_gpus) != (host, gpus):
            raise row.error(
                "worker_name",
                f"worker {name!r} repeats line {line} with another host_ip or GPUs "
                f"({host}:{gpus}, was {first_host}:{first_gpus})",
            )
        repeated += 1

    rows = csv_rows(
        worker_path,
        WORKER_COLUMNS,
        expected="a Lingjun worker.csv (header with " + ", ".join(WORKER_COLUMNS) + ")",
    )
    collect(rows, secondary.guard(parse_worker, WORKER_COLUMNS), out, strict=secondary.strict)
    return workers, repeated


def read(
    path: Path,
    library: Mapping[str, JobProfile],
    *,
    seed: int = 0,
    strict: bool = True,
    max_gpus: int | None = None,
) -> TraceRead:
    job_path, worker_path = tables(path)
    out = TraceRead(NAME, str(job_path), [])
    models = ModelRule(library, seed)
    # the job table first, so that a file in another format fails saying what was expected
    job_rows = csv_rows(job_path, JOB_COLUMNS, expected=EXPECTED, optional=("gmt_job_stopped",))
    first = next(job_rows, None)
    if not worker_path.exists():
        raise InputError(
            "trace", f"{worker_path}: missing; the Lingjun reader needs worker.csv beside job.csv"
        )
    secondary = SecondaryRows(strict=strict)
    workers, repeated = read_workers(worker_path, out, secondary)

    def parse_job(row: Row) -> JobSpec:
        secondary.check(row)
        job = row.text("job_name")
        arrival = row.time("gmt_job_submitted")
        if not row.present("gmt_job_running"):
            raise Skip("never ran (no gmt_job_running)")
        start = row.time("gmt_job_running")
        end_column = next(
            (c for c in ("gmt_job_finished", "gmt_job_stopped") if row.present(c)), None
        )
        if end_column is None:
            raise Skip("no gmt_job_finished nor gmt_job_stopped")
        run = row.time(end_column) - start
        mine = workers.get(job, {})
        if not mine:
            raise Skip("no GPU workers")
        if run <= 0:
            raise Skip("run time <= 0")
        hosts = merge_hosts([(host, gpus) for _, (host, gpus, _line) in sorted(mine.items())])
        name = row.raw("model") if row.present("model") else None
        model = models.choose(job, name)
        gpus = sum(g for _, g in hosts)
        iterations = iterations_for(run, library[model])
        return JobSpec(job, arrival, gpus, iterations, model, hosts, run_s=run)

    rows_again = itertools.chain([first] if first else [], job_rows)
    fields = JobFields("job_name", "gmt_job_submitted", "gmt_job_finished", "job_name")
    kept = collect(rows_again, parse_job, out, strict=strict, fields=fields, max_gpus=max_gpus)
    secondary.leftover(out)
    by_name = (
        "GPUs and placement: each GPU worker's host_ip with its RES GPUs (workers by name: "
        "a worker_name repeated with the same host_ip and GPUs counts once, repeated with "
        "another is a bad row)"
    )
    if repeated:
        by_name += f"; {repeated} repeated worker row{'s' if repeated > 1 else ''} counted once"
    out.notes += [
        by_name,
        "run time: gmt_job_finished (else gmt_job_stopped) minus gmt_job_running",
        DURATION_NOTE,
    ]
    return finish(out, kept, strict=strict, fields=fields, notes=models.notes)
