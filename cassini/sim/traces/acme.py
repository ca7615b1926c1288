"""``acme``: Shanghai AI Lab Acme ``trace_seren.csv`` / ``trace_kalos.csv``
(InternLM/AcmeTrace, NSDI 2024)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cassini.profile import JobProfile
from cassini.sim.traces.common import TraceRead
from cassini.sim.traces.helios import read_job_log

NAME = "acme"
SOURCE = "InternLM/AcmeTrace: data/job_trace/trace_seren.csv, trace_kalos.csv"
COLUMNS = (
    "job_id", "node_num", "gpu_num", "type", "state", "submit_time", "start_time",
    "end_time", "duration", "gpu_time",
)  # fmt: skip
EXPECTED = "an Acme trace_seren.csv/trace_kalos.csv (header: " + ",".join(COLUMNS) + ", ...)"


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
