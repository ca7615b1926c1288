"""What the ``ideal`` runs measure for CASSINI: each job's profile (from its worker's
timing log, its DDP bucket all-reduces, or a capture on its rank 0's host), the payload
share of the wire bytes, and the jobs' own iteration-time jitter."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cassini import measure
from cassini.agent import replayed_realignments
from cassini.errors import InputError
from cassini.profile import JobProfile
from testbed.results import JobDirection, JobResult, SchemeResult
from testbed.run.config import RunConfig, TestbedJob


def profile_source(cfg: RunConfig, job: TestbedJob) -> str:
    """Where ``job``'s profile comes from: the config's choice, or on ``auto`` the log of
    a synthetic job and the bucket hook of a DDP one."""
    if cfg.profile_source != "auto":
        return cfg.profile_source
    return "log" if job.kind == "synthetic" else "hook"


def measured_profile(
    cfg: RunConfig, job: TestbedJob, result: JobResult, source: str, pcap: Path | None
) -> JobProfile:
    """The job's profile: from its rank 0's timing log (one phase), its DDP bucket
    records (one phase per bucket all-reduce), or the capture on rank 0's host."""
    records = result.records(0)
    if source == "log" or (source == "hook" and job.kind == "synthetic"):
        return measure.profile_from_log(job.job_id, records)
    if source == "hook":
        return ddp_bucket_profile(job.job_id, records, len(job.hosts))
    ip = cfg.topology.ip(job.hosts[0])
    # the capture gives the shape and the bytes, over whole iterations after the first
    # (warm-up): set-up, model broadcast and idle time before them would dilute the rates;
    # each iteration is folded from its own start in the worker's log (a fold at one
    # period slid a job's phase 16 ms earlier over 20 iterations, and the advice put the
    # other job's phase on top of where it really was; the autocorrelation alone once
    # took 3 periods on a DDP job's bursty capture)
    if len(records) < 3:
        raise InputError("profile_source", f"pcap: job {job.job_id} needs >= 3 iterations")
    starts = [r["start"] for r in records[1:]]
    return measure.profile_from_pcap(job.job_id, pcap, ip, iteration_starts_s=starts)


def ddp_bucket_profile(job_id: str, records: list[dict[str, Any]], world_size: int) -> Any:
    """A DDP job's multi-phase profile from the bucket all-reduces its worker logged
    (``buckets: [[index, bytes, start, end], ...]`` per iteration)."""
    buckets = [
        measure.BucketRecord(r["iter"], b, nbytes, start, end)
        for r in records
        for b, nbytes, start, end in r.get("buckets", [])
    ]
    starts = {r["iter"]: r["start"] for r in records}
    return measure.profile_from_buckets(job_id, buckets, world_size, starts)


def payload_efficiency(
    cfg: RunConfig, ideal: SchemeResult, report: Callable[[str], None] | None = None
) -> float:
    """Payload bits the jobs moved per bit their shared links carried in the ideal run
    (TCP/IP and Ethernet headers, ACKs): the median over jobs that cross a shared link,
    1.0 when none does.  Profiles' rates are payload rates, so the advisor is given each
    link's capacity times this share.

    A ring all-reduce's ranks send equal shares, and each hop's bytes cross every
    measured link direction on its path once: a job's expected payload on them is
    ``crossings * bytes / ranks`` (on the dumbbell each hop crosses one direction, on a
    leaf-spine two: leaf to spine and spine to leaf).  The ideal run's ``link_bytes`` are
    keyed by :class:`~testbed.results.JobDirection`.

    The median is clamped to 0.5-1.0; when the clamp bites (a measurement outside what
    headers can do), ``report`` is told the measured and the used value."""
    per_job: dict[str, dict[str, int]] = {}
    for key, nbytes in ideal.link_bytes.items():
        key = JobDirection.parse(key)
        per_job.setdefault(key.job_id, {})[key.direction] = nbytes
    shares = []
    for job in cfg.jobs:
        if job.job_id not in ideal.jobs:
            continue
        measured = per_job.get(job.job_id, {})
        crossings = sum(1 for d in cfg.topology.ring_links(job.hosts) if d in measured)
        wire = sum(measured.values())
        if wire > 0 and crossings:
            payload = crossings * ideal.jobs[job.job_id].bytes / len(job.hosts)
            shares.append(payload / wire)
    if not shares:
        return 1.0
    measured = statistics.median(shares)
    used = min(1.0, max(0.5, measured))
    if used != measured and report is not None:
        report(f"  payload efficiency measured {measured:.3f}, clamped to {used:.1f}")
    return used


#: How :func:`iteration_jitter` reads a job's spread (``agent.jitter`` in a testbed
#: config): ``stdev`` (the default) from the standard deviation, which one 130 ms hiccup
#: among 105 ms iterations turns into a 23 % slack paid in every iteration; ``robust``
#: from the median absolute deviation, which a few hiccups hardly move, so the grid pays
#: for noise only in the iterations it happens in (one late iteration is absorbed by the
#: agent, a long one costs a re-alignment) -- but a job whose spread is really wide (real
#: compute on shared cores) then misses slots: an interquartile-range rule was reverted
#: for that on 2026-11-25 (docs/results.md).  ``trimmed``: the standard deviation of the
#: iterations without their outliers (beyond the median + :data:`OUTLIER_SIGMAS` robust
#: standard deviations, at most :data:`MOST_OUTLIERS` of them: more is the job's real
#: spread), raised where needed until the agent, replaying the job's measured iterations
#: (outliers included) in their order, would never re-align it: the hiccups the agent
#: absorbs cost nothing, a spread that would make it miss slots is paid for.  ``none``: no
#: jitter slack, the agent's slack alone (a late iteration left to be caught up from that
#: slack; it re-aligned 3-8x as often as ``stdev`` on the compatible pair,
#: docs/results.md 7b).  ``room``: ``stdev``'s jitter, paid only where the held period
#: does not already leave the job that much idle time (a link the bytes more than fill
#: stretches the circle; :func:`cassini.predict.jitter_beyond_room`, applied per job by
#: :func:`testbed.run.planning.plan`): two 50 % jobs held to 1.05x their iteration for
#: their bytes do not pay their 5 % jitter again on top of it.
#: Kept selectable to measure them against each other in one run.
JITTER_RULES = ("stdev", "robust", "trimmed", "none", "room")
OUTLIER_SIGMAS = 4.0
MOST_OUTLIERS = 0.2  # of the iterations
REPLAY_STEP = 0.0025  # the replay's steps of slack, fraction of the period


def iteration_jitter(ideal: SchemeResult, rule: str = "stdev", slack: float = 0.03) -> float:
    """The largest relative jitter of a job's iteration time alone (0 with fewer than 3
    iterations, the first left out): 2 standard deviations over the mean (``stdev``),
    2 x 1.4826 x the median absolute deviation over the median (``robust``: the same for
    normal noise, blind to a few outliers), 2 standard deviations without the outliers
    over their mean or, when larger, the least the agent replaying the iterations never
    re-aligns on with ``slack`` (the agent's own) beside it (``trimmed``); 0 under
    ``none``."""
    if rule not in JITTER_RULES:
        raise ValueError(f"jitter rule must be one of {JITTER_RULES}, got {rule!r}")
    out = 0.0
    if rule == "none":
        return out
    for job in ideal.jobs.values():
        times = job.iteration_times_s[1:]
        if len(times) < 3:
            continue
        spread = 2 * statistics.stdev(times) / statistics.mean(times)
        if rule in ("stdev", "room"):  # room: the same jitter, paid beyond the room
            out = max(out, spread)
        elif rule == "trimmed":
            bulk = without_outliers(times)
            trimmed = 2 * statistics.stdev(bulk) / statistics.mean(bulk)
            out = max(out, trimmed, replay_jitter(times, slack, spread))
        else:
            mid = statistics.median(times)
            mad = statistics.median(abs(t - mid) for t in times)
            out = max(out, 2 * 1.4826 * mad / mid)
    return out


def without_outliers(times_s: Sequence[float]) -> list[float]:
    """``times_s`` without the values above the median by more than
    :data:`OUTLIER_SIGMAS` robust standard deviations (1.4826 x the median absolute
    deviation); all of them when that would leave out more than :data:`MOST_OUTLIERS`."""
    mid = statistics.median(times_s)
    sigma = 1.4826 * statistics.median(abs(t - mid) for t in times_s)
    kept = [t for t in times_s if t <= mid + OUTLIER_SIGMAS * sigma]
    return kept if len(times_s) - len(kept) <= MOST_OUTLIERS * len(times_s) else list(times_s)


def replay_jitter(times_s: Sequence[float], slack: float, most: float) -> float:
    """The least jitter slack ``j`` (a multiple of :data:`REPLAY_STEP`, at most ``most``)
    such that an agent holding iterations that took ``times_s`` (seconds, in order) to
    ``median(times_s) x (1 + slack + j)`` -- the held period, the profile's iteration time
    being the median -- would never re-align; ``most`` when none is."""
    base = statistics.median(times_s)
    for k in range(math.ceil(most / REPLAY_STEP)):
        jitter = k * REPLAY_STEP
        if replayed_realignments(times_s, base * (1.0 + slack + jitter)) == 0:
            return jitter
    return most


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.profiles")
