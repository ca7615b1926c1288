"""Measuring jobs: iteration statistics from worker logs, and a job's bandwidth profile
from a packet capture (tcpdump on the host's interface, parsed with scapy).

Capture -> bytes per time bin -> bandwidth series (bits/s) ->
:meth:`cassini.profile.JobProfile.from_samples` (iteration time by autocorrelation,
communication phases by threshold).
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cassini.profile import JobProfile, Phase


def read_log(path: Path | str) -> list[dict[str, Any]]:
    """A worker's JSON-lines log."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def iteration_times(records: Sequence[dict[str, Any]]) -> list[float]:
    """Seconds between successive iteration ends (the first iteration, which includes the
    start-up and any initial shift, has no predecessor and is left out)."""
    ends = [r["end"] for r in records]
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


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


def profile_from_log(job_id: str, records: Sequence[dict[str, Any]], skip: int = 1) -> JobProfile:
    """A job's profile from its timing log (one worker): iteration time = mean interval
    between iteration ends; one communication phase starting after the mean compute time,
    lasting the mean communication time, at the rate that moves the bytes in that time."""
    recs = list(records)[skip:]
    if len(recs) < 2:
        raise ValueError(f"job {job_id}: need at least {skip + 2} iterations to profile")
    period = float(np.mean(iteration_times(recs)))
    compute = float(np.mean([r["comm_start"] - r["start"] for r in recs]))
    comm = float(np.mean([r["end"] - r["comm_start"] for r in recs]))
    sent = float(np.mean([r["bytes_sent"] for r in recs]))
    comm = min(comm, period * 0.999)
    start = min(compute, period * 0.999)
    phases = [Phase(start, comm, sent * 8 / comm)] if sent > 0 and comm > 0 else []
    return JobProfile(job_id, period, phases)


def pcap_series(pcap: Path | str, src_ip: str, dt_s: float = 0.001) -> tuple[np.ndarray, float]:
    """Bits per second sent by ``src_ip`` in each ``dt_s`` bin of a capture; returns the
    series and the capture's first timestamp (seconds).  Parses with scapy's raw reader
    (IP total length of every IPv4 packet from ``src_ip``)."""
    from scapy.utils import RawPcapReader

    want = socket.inet_aton(src_ip)
    stamps, sizes = [], []
    reader = RawPcapReader(str(pcap))
    link = getattr(reader, "linktype", 1)
    offset = 14 if link == 1 else 16 if link == 113 else 0  # Ethernet, Linux cooked
    for data, meta in reader:
        ip = data[offset:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[12:16] != want:
            continue
        stamps.append(meta.sec + meta.usec * 1e-6)
        sizes.append(struct.unpack("!H", ip[2:4])[0])
    reader.close()
    if not stamps:
        raise ValueError(f"no IPv4 packets from {src_ip} in {pcap}")
    t = np.asarray(stamps)
    start = float(t.min())
    bins = ((t - start) / dt_s).astype(np.int64)
    series = np.bincount(bins, weights=np.asarray(sizes, float) * 8) / dt_s
    return series, start


def profile_from_pcap(
    job_id: str,
    pcap: Path | str,
    src_ip: str,
    dt_s: float = 0.001,
    origin_s: float | None = None,
    **kwargs: Any,
) -> JobProfile:
    """The job's profile as seen on the wire from one of its hosts.

    ``origin_s`` (wall clock, seconds) is an iteration start, e.g. from the worker log:
    the profile is rotated so that its time 0 is an iteration start, as the time-shift
    agent counts; otherwise time 0 is wherever the capture began."""
    series, start = pcap_series(pcap, src_ip, dt_s)
    profile = JobProfile.from_samples(series, dt_s, job_id=job_id, **kwargs)
    if origin_s is None:
        return profile
    period = profile.iteration_time_s
    offset = (origin_s - start) % period
    phases = [
        Phase((p.start_s - offset) % period, p.duration_s, p.rate_bps) for p in profile.phases
    ]
    return JobProfile(job_id, period, phases)


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
