"""Measuring jobs in the testbed: worker logs, iteration statistics, and packet captures
(tcpdump on a host's interface).

Turning a log or a capture into a profile is :mod:`cassini.measure` (one implementation,
also behind ``cassini profile``); its functions are re-exported here: capture -> bytes per
time bin -> bandwidth series (bits/s) -> :meth:`cassini.profile.JobProfile.from_samples`,
or, given the worker's iteration starts (what the runner does), capture -> every packet
at its time since its iteration's start (:func:`fold_by_iteration`) ->
:meth:`cassini.profile.JobProfile.from_folded`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cassini.measure import (
    fold_by_iteration,
    iteration_times,
    pcap_packets,
    pcap_series,
    profile_from_log,
    profile_from_pcap,
    profile_from_series,
    series_from_packets,
)

__all__ = [
    "Capture",
    "comm_overlap",
    "fold_by_iteration",
    "iteration_times",
    "pcap_packets",
    "pcap_series",
    "profile_from_log",
    "profile_from_pcap",
    "profile_from_series",
    "read_log",
    "series_from_packets",
    "summary",
]


def read_log(path: Path | str) -> list[dict[str, Any]]:
    """A worker's JSON-lines log."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


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


class Capture:
    """tcpdump on a host's interface while the block runs (headers only, written to
    ``pcap``).  ``with Capture(cluster, "h1", path): ...``"""

    def __init__(self, cluster: Any, host: str, pcap: Path | str, snaplen: int = 96) -> None:
        self.cluster, self.host, self.pcap, self.snaplen = cluster, host, Path(pcap), snaplen
        self.proc: Any = None

    def __enter__(self) -> Capture:
        import time

        intf = f"{self.host}-eth0"
        self.proc = self.cluster.popen(
            self.host,
            [
                "tcpdump",
                "-i",
                intf,
                "-w",
                str(self.pcap),
                "-s",
                str(self.snaplen),
                "-B",
                "16384",  # KiB: the kernel's capture buffer, so bursts are not dropped
                "-U",
                "-n",
                "ip",
            ],
        )
        time.sleep(1.0)  # tcpdump needs a moment before it captures
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - never leave tcpdump behind
                self.proc.kill()


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
