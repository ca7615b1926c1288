"""A common start for every worker of a run, however long each takes to get ready.

Each worker, once connected and warmed up, creates ``<its log>.ready`` and waits for the
runner's *go* file; the runner waits until every worker is ready, then writes the go file
with the epoch (wall clock, seconds) every job's offsets and slots count from.  Without
it a job whose workers start slowly (PyTorch imports, model builds on 2 cores) begins
seconds after the others and "same start" is not the same start.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testbed.workerspec import WorkerSpec

READY_SUFFIX = ".ready"
LEAD_S = 0.5  # seconds between the go file and the epoch


def worker_ready(spec: WorkerSpec, timeout_s: float = 600.0) -> float:
    """Say this worker is ready and wait for the go file; returns the epoch (seconds).
    A spec without ``start_gate`` uses its fixed ``epoch_s``."""
    gate = spec.start_gate
    if not gate:
        if spec.epoch_s is None:
            raise ValueError("a worker spec needs start_gate or epoch_s")
        return float(spec.epoch_s)
    Path(spec.out + READY_SUFFIX).touch()
    deadline = time.time() + timeout_s
    while not os.path.exists(gate):
        if time.time() > deadline:
            raise TimeoutError(f"no go file {gate} after {timeout_s:.0f} s")
        time.sleep(0.005)
    return float(json.loads(Path(gate).read_text())["epoch_s"])


def release_when_ready(
    logs: Sequence[Path],
    gate: Path,
    timeout_s: float,
    failed: Callable[[], bool] = lambda: False,
) -> float | None:
    """Wait until every worker log has its ready file, then write the go file (atomically);
    returns the epoch, or None on time-out or when ``failed()`` says a worker died."""
    deadline = time.time() + timeout_s
    while not all(Path(str(log) + READY_SUFFIX).exists() for log in logs):
        if time.time() > deadline or failed():
            return None
        time.sleep(0.01)
    epoch = time.time() + LEAD_S
    tmp = gate.with_suffix(".tmp")
    tmp.write_text(json.dumps({"epoch_s": epoch}))
    tmp.replace(gate)
    return epoch


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.startgate")
