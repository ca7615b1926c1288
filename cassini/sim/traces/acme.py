"""``acme``: Shanghai AI Lab Acme ``trace_seren.csv`` / ``trace_kalos.csv``
(InternLM/AcmeTrace, NSDI 2024).

Source: https://github.com/InternLM/AcmeTrace, ``data/job_trace/``; the README gives
both headers.  Seren::

    job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time

Kalos adds ``mem_per_pod_GB``, ``shared_mem_per_pod``, ``fail_time`` and ``stop_time``.

Columns used: ``job_id``; ``gpu_num``; ``submit_time`` (arrival, with its zone:
``2023-03-01 00:18:22+08:00``); ``duration`` (run time in seconds; when empty,
``end_time - start_time``).  Required in the header as well, to tell the format apart:
``node_num``, ``type``, ``state``, ``start_time``, ``end_time``, ``gpu_time``.

Assumptions (as :mod:`.helios`, whose reading code this shares):

* Every final state is replayed for its recorded run time.
* Skipped (counted): ``gpu_num`` 0 (CPU jobs), run time <= 0, neither ``duration`` nor
  ``end_time``.
* ``type`` (Pretrain, SFT, Evaluation, Debug, ...) is a workload class, not a model:
  the seeded rule of :class:`~.common.ModelRule` picks one.
* ``node_num`` is not a placement (Acme publishes per-node counters, not job hosts).
"""

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
    path: Path, library: Mapping[str, JobProfile], *, seed: int = 0, strict: bool = True
) -> TraceRead:
    return read_job_log(
        path, library, name=NAME, columns=COLUMNS, expected=EXPECTED, seed=seed, strict=strict
    )
