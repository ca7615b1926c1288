"""``pai2020``: Alibaba PAI GPU trace 2020 (alibaba/clusterdata ``cluster-trace-gpu-v2020``,
NSDI 2022 "MLaaS in the Wild")."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.schema import counted
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


def read_tasks(
    task_path: Path, out: TraceRead, secondary: SecondaryRows
) -> tuple[dict[tuple[str, str], int], dict[str, list[tuple[int, float | None, float | None]]]]:
    """The task table: GPUs per instance of each GPU task (job, task), and per job its
    GPU tasks' (GPUs, start_time, end_time)."""
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

    rows = csv_rows(task_path, TASK_COLUMNS, expected="pai_task_table.csv", header=False)
    collect(rows, secondary.guard(parse_task, TASK_COLUMNS), out, strict=secondary.strict)
    return per_instance, gpu_tasks


#: per job: (task_name, inst_name) -> (start_time, machine) of the instance's last attempt
Instances = dict[str, dict[tuple[str, str], tuple[float, str | None]]]


def read_instances(
    instance_path: Path,
    per_instance: Mapping[tuple[str, str], int],
    out: TraceRead,
    secondary: SecondaryRows,
) -> Instances:
    """The instance table's GPU-task instances, each once: a retried instance (its
    inst_name on several rows, one per worker_name) is its last attempt, the latest
    start_time (the later row on a tie); an attempt without a machine keeps none."""
    placed: Instances = {}

    def parse_instance(row: Row) -> None:
        job, task = row.text("job_name"), row.text("task_name")
        if (job, task) not in per_instance:
            return
        inst = row.text("inst_name")
        start = row.number("start_time") if row.present("start_time") else -math.inf
        machine = row.text("machine") if row.present("machine") else None
        mine = placed.setdefault(job, {})
        if (task, inst) not in mine or start >= mine[(task, inst)][0]:
            mine[(task, inst)] = (start, machine)

    rows = csv_rows(
        instance_path, INSTANCE_COLUMNS, expected="pai_instance_table.csv", header=False
    )
    collect(rows, secondary.guard(parse_instance, INSTANCE_COLUMNS), out, strict=secondary.strict)
    return placed


def placement(
    job: str,
    gpus: int,
    instances: Mapping[tuple[str, str], tuple[float, str | None]],
    per_instance: Mapping[tuple[str, str], int],
) -> tuple[tuple[tuple[str, int], ...], str | None]:
    """The job's hosts from its instances, or none and why when they disagree with the
    task table's ``gpus`` (an instance without a machine, other GPUs in all)."""
    pairs = [(m, per_instance[(job, task)]) for (task, _), (_, m) in instances.items() if m]
    unplaced = sum(1 for _, m in instances.values() if not m)
    found = sum(g for _, g in pairs)
    if not unplaced and found == gpus:
        return merge_hosts(pairs), None
    why = f"{job}: task table {counted(gpus, 'GPU')}, instances {counted(found, 'GPU')} on machines"
    return (), why + (f", {counted(unplaced, 'instance')} without a machine" if unplaced else "")


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
    secondary = SecondaryRows(strict=strict)
    per_instance, gpu_tasks = read_tasks(task_path, out, secondary)
    placed: Instances | None = None
    if instance_path.exists():
        placed = read_instances(instance_path, per_instance, out, secondary)
    unplaced: dict[str, str] = {}  # job -> how its instance rows disagree with its tasks

    def parse_job(row: Row) -> JobSpec:
        secondary.check(row)
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
        gpus = sum(g for g, _start, _end in tasks)
        hosts: tuple[tuple[str, int], ...] = ()
        if placed is not None and job in placed:
            hosts, why = placement(job, gpus, placed[job], per_instance)
            if why:
                unplaced[job] = why
        model = models.choose(job)
        iterations = iterations_for(run, library[model])
        return JobSpec(job, arrival, gpus, iterations, model, hosts, run_s=run)

    job_rows = csv_rows(job_path, JOB_COLUMNS, expected=EXPECTED, header=False)
    fields = JobFields("job_name", "start_time", "end_time", "job_name")
    kept = collect(job_rows, parse_job, out, strict=strict, fields=fields, max_gpus=max_gpus)
    secondary.leftover(out)
    out.notes += [
        "GPUs: from pai_task_table alone: ceil(plan_gpu / 100) whole GPUs per instance, "
        "times inst_num, summed over GPU tasks",
        "run time: latest GPU-task end_time minus earliest GPU-task start_time",
    ]

    def notes(jobs: Sequence[JobSpec]) -> list[str]:  # over the jobs finish keeps
        return [placement_note(placed, jobs, unplaced), DURATION_NOTE, *models.notes(jobs)]

    return finish(out, kept, strict=strict, fields=fields, notes=notes)


def placement_note(
    placed: Instances | None, jobs: Sequence[JobSpec], unplaced: Mapping[str, str]
) -> str:
    """The placement rule as applied, naming the jobs kept without their instances'."""
    if placed is None:
        return "placement: none recorded (no pai_instance_table.csv beside the job table)"
    with_hosts = sum(1 for j in jobs if j.hosts)
    note = (
        f"placement: pai_instance_table machines ({with_hosts} of {len(jobs)} jobs), each "
        "GPU-task instance once: a retried instance (its inst_name on several rows) is its "
        "last attempt (latest start_time); a job whose instances miss a machine or give "
        "other GPUs than its task table keeps the task table's GPUs and no placement"
    )
    differ = [unplaced[j.job_id] for j in jobs if j.job_id in unplaced]
    if differ:
        more = f"; and {len(differ) - 5} more" if len(differ) > 5 else ""
        jobs = f"{len(differ)} such job{'s' if len(differ) > 1 else ''}"
        note += f": {jobs} ({'; '.join(differ[:5])}{more})"
    return note
