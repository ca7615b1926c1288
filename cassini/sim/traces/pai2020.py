"""``pai2020``: Alibaba PAI GPU trace 2020 (alibaba/clusterdata ``cluster-trace-gpu-v2020``,
NSDI 2022 "MLaaS in the Wild")."""

from __future__ import annotations

import math
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

NAME = "pai2020"
SOURCE = "alibaba/clusterdata: cluster-trace-gpu-v2020/data (pai_job_table, pai_task_table)"
JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = (
    "job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu",
    "plan_mem", "plan_gpu", "gpu_type",
)  # fmt: skip
INSTANCE_COLUMNS = (
    "job_name", "task_name", "inst_name", "worker_name", "inst_id", "status", "start_time",
    "end_time", "machine",
)  # fmt: skip
EXPECTED = "PAI 2020 tables (headerless pai_job_table.csv: " + ",".join(JOB_COLUMNS) + ")"


def tables(path: Path) -> tuple[Path, Path, Path]:
    folder = path if path.is_dir() else path.parent
    job = folder / "pai_job_table.csv" if path.is_dir() else path
    return job, folder / "pai_task_table.csv", folder / "pai_instance_table.csv"


def sniff(path: Path, head: str) -> bool:
    if path.is_dir():
        return (path / "pai_job_table.csv").exists()
    return path.name.startswith("pai_job_table")


def missing_task_table(task_path: Path, job_path: Path) -> InputError:
    """The error for a job table without its task table (a gzip'd one named)."""
    gz = task_path.with_name(task_path.name + ".gz")
    hint = f" (found {gz.name}: decompress it first: gunzip {gz})" if gz.exists() else ""
    return InputError(
        "trace",
        f"{task_path}: missing; the PAI reader needs pai_task_table.csv beside "
        f"{job_path.name}{hint}",
    )


def read(
    path: Path,
    library: Mapping[str, JobProfile],
    *,
    seed: int = 0,
    strict: bool = True,
    max_gpus: int | None = None,
) -> TraceRead:
    job_path, task_path, instance_path = tables(path)
    # the job table's first row says whether this is PAI at all (NotThisFormat if not)
    next(csv_rows(job_path, JOB_COLUMNS, expected=EXPECTED, header=False), None)
    if not task_path.exists():
        raise missing_task_table(task_path, job_path)
    out = TraceRead(NAME, str(job_path), [])
    models = ModelRule(library, seed)
    # tasks: per job, GPUs and the span of its GPU tasks; per (job, task), GPUs/instance
    per_instance: dict[tuple[str, str], int] = {}
    gpu_tasks: dict[str, list[tuple[int, float | None, float | None]]] = {}

    def parse_task(row: Row) -> None:
        job = row.text("job_name")
        gpu = row.number("plan_gpu", non_negative=True) if row.present("plan_gpu") else 0.0
        inst = row.number("inst_num", non_negative=True)
        if inst != int(inst):
            raise row.error("inst_num", f"must be a whole number, got {row.raw('inst_num')!r}")
        start = row.number("start_time") if row.present("start_time") else None
        end = row.number("end_time") if row.present("end_time") else None
        if gpu <= 0 or inst == 0:  # no GPU task: it holds no GPUs
            return
        each = math.ceil(gpu / 100 - 1e-9)
        per_instance[(job, row.text("task_name"))] = each
        gpu_tasks.setdefault(job, []).append((int(inst) * each, start, end))

    task_rows = csv_rows(task_path, TASK_COLUMNS, expected="pai_task_table.csv", header=False)
    collect(task_rows, parse_task, out, strict=strict)

    placed: dict[str, list[tuple[str, int]]] = {}
    if instance_path.exists():

        def parse_instance(row: Row) -> None:
            key = (row.text("job_name"), row.text("task_name"))
            if key in per_instance and row.present("machine"):
                placed.setdefault(key[0], []).append((row.text("machine"), per_instance[key]))

        rows = csv_rows(
            instance_path, INSTANCE_COLUMNS, expected="pai_instance_table.csv", header=False
        )
        collect(rows, parse_instance, out, strict=strict)

    def parse_job(row: Row) -> JobSpec:
        job = row.text("job_name")
        arrival = row.number("start_time")
        tasks = gpu_tasks.get(job)
        if not tasks:
            raise Skip("no GPU task")
        if any(s is None or e is None for _, s, e in tasks):
            raise Skip("a GPU task has no start_time or end_time")
        run = max(e for _, _, e in tasks) - min(s for _, s, _ in tasks)  # type: ignore[type-var]
        if run <= 0:
            raise Skip("run time <= 0")
        hosts = merge_hosts(placed.get(job, ()))
        gpus = sum(g for g, _start, _end in tasks) if not hosts else sum(g for _, g in hosts)
        model = models.choose(job)
        return JobSpec(job, arrival, gpus, iterations_for(run, library[model]), model, hosts)

    job_rows = csv_rows(job_path, JOB_COLUMNS, expected=EXPECTED, header=False)
    fields = JobFields("job_name", "start_time", "end_time", "job_name")
    kept = collect(job_rows, parse_job, out, strict=strict, fields=fields, max_gpus=max_gpus)
    out.notes += [
        "GPUs: ceil(plan_gpu / 100) whole GPUs per instance, times inst_num, summed over tasks",
        "run time: latest GPU-task end_time minus earliest GPU-task start_time",
        (
            "placement: pai_instance_table machines"
            if placed
            else "placement: none recorded (no pai_instance_table.csv beside the job table)"
        ),
        DURATION_NOTE,
        *models.notes(),
    ]
    return finish(out, kept, strict=strict, fields=fields)
