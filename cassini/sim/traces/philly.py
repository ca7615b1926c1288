"""``philly``: Microsoft Philly ``cluster_job_log`` (msr-fiddle/philly-traces, ATC 2019)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

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
    parse_time,
)
from cassini.sim.traces.files import json_records

NAME = "philly"
SOURCE = "msr-fiddle/philly-traces: trace-data.tar.gz, cluster_job_log"
EXPECTED = (
    "a Philly cluster_job_log (JSON objects with jobid, submitted_time and attempts "
    "[{start_time, end_time, detail [{ip, gpus}]}])"
)


def sniff(path: Path, head: str) -> bool:
    return '"jobid"' in head and '"attempts"' in head


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
    rows = json_records(path, expected=EXPECTED)
    fields = JobFields("jobid", "submitted_time", "attempts", "attempts")

    def parse(row: Row) -> JobSpec:
        for name in ("jobid", "submitted_time", "attempts"):
            if name not in row.cells:
                raise row.error(name, "missing field; " + EXPECTED)
        job_id = row.text("jobid")
        arrival = row.time("submitted_time")
        attempts = row.raw("attempts")
        if attempts is None:
            attempts = []
        if not isinstance(attempts, list):
            raise row.error("attempts", f"must be an array, got {type(attempts).__name__}")
        if not attempts:
            raise Skip("no attempts")
        last_end = attempts[-1].get("end_time") if isinstance(attempts[-1], dict) else None
        if last_end in (None, "None", ""):
            raise Skip("still running (last attempt has no end_time)")
        chosen = None
        for k, attempt in enumerate(attempts):
            if not isinstance(attempt, dict):
                raise row.error("attempts", f"attempt {k} is not an object")
            start, end = attempt.get("start_time"), attempt.get("end_time")
            if start in (None, "None", "") or end in (None, "None", ""):
                continue
            t0, t1 = parse_time(start), parse_time(end)
            if t0 is None or t1 is None:
                bad = start if t0 is None else end
                raise row.error("attempts", f"attempt {k}: not a time: {bad!r}")
            detail = attempt.get("detail", [])
            if not isinstance(detail, list):
                raise row.error("attempts", f"attempt {k}: detail must be an array")
            pairs = []
            for d in detail:
                if not (isinstance(d, dict) and isinstance(d.get("gpus"), list) and d.get("ip")):
                    raise row.error("attempts", f"attempt {k}: detail entries need ip and gpus[]")
                if d["gpus"]:
                    pairs.append((str(d["ip"]), len(d["gpus"])))
            chosen = (t0, t1, merge_hosts(pairs))
        if chosen is None:
            raise Skip("no attempt with both start_time and end_time")
        t0, t1, hosts = chosen
        gpus = sum(g for _, g in hosts)
        if gpus == 0:
            raise Skip("no GPUs")
        if t1 <= t0:
            raise Skip("run time <= 0")
        model = models.choose(job_id)
        iterations = iterations_for(t1 - t0, library[model])
        return JobSpec(job_id, arrival, gpus, iterations, model, hosts, run_s=t1 - t0)

    kept = collect(rows, parse, out, strict=strict, fields=fields, max_gpus=max_gpus)
    out.notes += [
        "run time and machines: the last attempt with both start_time and end_time",
        DURATION_NOTE,
    ]
    return finish(out, kept, strict=strict, fields=fields, notes=models.notes)
