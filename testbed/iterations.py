"""The workers' per-iteration records: reading a worker's JSON-lines log, the statistics
of iteration times, and how much of a job's communication overlapped another job's.

Turning a log or a capture into a profile is :mod:`cassini.measure` (one implementation,
also behind ``cassini profile``); a capture on a host is :class:`testbed.capture.Capture`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def read_log(path: Path | str) -> list[dict[str, Any]]:
    """A worker's JSON-lines log."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def off_slot(records: Sequence[dict[str, Any]], tolerance_s: float | None) -> tuple[int, ...]:
    """Indices into the job's iteration times (``cassini.measure.iteration_times``: interval
    ``i`` ends iteration ``i + 1``) of the iterations a held job did not run on its slot:
    it re-aligned before them (skipped to a later slot), or started later than the agent's
    drift tolerance (seconds; None: re-alignments only).  A model that holds every job to
    its slot does not see these; they come from the host (a late wake-up, a slow step)."""
    out = []
    for i in range(1, len(records)):
        realigned = records[i].get("realignments", 0) > records[i - 1].get("realignments", 0)
        late = tolerance_s is not None and records[i].get("drift_s", 0.0) > tolerance_s
        if realigned or late:
            out.append(i - 1)
    return tuple(out)


def summary(times: Sequence[float]) -> dict[str, float]:
    """Mean, median and 99th percentile (seconds)."""
    if not times:
        return {"mean_s": float("nan"), "p50_s": float("nan"), "p99_s": float("nan")}
    x = np.asarray(times, float)
    return {
        "mean_s": float(x.mean()),
        "p50_s": float(np.percentile(x, 50)),
        "p99_s": float(np.percentile(x, 99)),
    }


def comm_overlap(records: dict[str, Sequence[dict[str, Any]]]) -> list[float]:
    """Per iteration of the first job: the fraction of its communication phase during
    which another job was communicating too (0 = perfectly interleaved, 1 = fully
    overlapped)."""
    jobs = list(records)
    first, others = records[jobs[0]], [records[j] for j in jobs[1:]]
    out = []
    for r in first:
        a0, a1 = r["comm_start"], r["end"]
        if a1 <= a0:
            out.append(0.0)
            continue
        covered = 0.0
        for other in others:
            for q in other:
                covered += max(0.0, min(a1, q["end"]) - max(a0, q["comm_start"]))
        out.append(min(1.0, covered / (a1 - a0)))
    return out


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.iterations")
