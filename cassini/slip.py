"""How late a held job may run before its phases meet another job's (slip tolerance).

A time-shift agent holds each job to slots ``epoch + shift + k * period``; a job that
runs late (its iteration took longer than the period) starts after its slot, so its
phases slide later against the other jobs' on the links they share.  Whether that hurts
depends on the room the shifts left between the phases: two VGG-11 jobs whose all-reduce
fills 30 % of each iteration have ~20 ms of idle link on either side of each other's
phase, two jobs that each fill half of a link have none.  The agent re-aligns a late job
(skips a slot, which costs most of a period) only when the slip eats that room; a
fixed tolerance either re-aligns jobs that had room to spare or lets full links collide.

The slip tolerance of a job on a link is the largest ``d`` (seconds) such that moving the
job by any offset in ``[-d, d]`` against the other held jobs on the link adds at most
``allowance`` of the link's capacity-time to the excess demand (the continuous score of
:func:`cassini.circle.continuous_score`).  The window is symmetric because every job can
be late: the relative slip of two jobs late by ``a`` and ``b`` lies in ``[-b, a]``, so two
jobs each within their tolerance of the symmetric window stay inside it.  Over several
links a job takes the smallest.  Jobs that run free on a link are left out: their phase
against the held jobs wanders anyway.  Each job is moved alone: with three or more held
jobs on a link slipping at once, the added excess can reach one allowance per slipping
job.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from cassini import schema
from cassini.circle import continuous_score, unified_period
from cassini.errors import InputError
from cassini.profile import JobProfile

#: Excess demand a slip may add, as a share of the link's capacity x period (10 %: 10 ms
#: of the link at capacity in a 100 ms period).  Measured on two VGG-11 DDP jobs (hook
#: profiles, 97.7 ms period): slips of 0-5, 5-10, 10-15 and 15-20 ms gave iterations of
#: 96.4, 96.7, 97.0 and 96.6 ms, while a re-alignment costs ~80 ms; the excess model
#: charges a small bucket that meets the other job's big one in full (5 ms here), which
#: the iterations did not show.
SLIP_ALLOWANCE = 0.1
#: The largest tolerance reported, as a share of the job's period (the same VGG-11 pair:
#: relative slips beyond 20 ms made iterations 2-13 ms longer, on both fabrics).
SLIP_LIMIT = 0.2
#: Offsets tried per period.
SLIP_STEPS = 400


def link_slip_tolerances_s(
    profiles: Sequence[JobProfile],
    capacity_bps: float,
    shifts_s: Mapping[str, float],
    *,
    allowance: float = SLIP_ALLOWANCE,
    limit: float = SLIP_LIMIT,
    steps: int = SLIP_STEPS,
) -> dict[str, float]:
    """Slip tolerance (seconds) of each job on one link.

    ``profiles`` are the held jobs on the link with ``iteration_time_s`` their held
    periods (seconds); ``shifts_s`` their time-shifts (seconds) on those periods.  A job
    alone on the link gets ``limit`` x its period (nothing to meet)."""
    schema.number(capacity_bps, "capacity_bps", positive=True)
    if not (math.isfinite(allowance) and allowance >= 0):
        raise InputError("allowance", f"must be a number >= 0, got {allowance!r}")
    if not (math.isfinite(limit) and 0 < limit < 0.5):
        raise InputError("limit", f"must be in (0, 0.5), got {limit!r}")
    if steps < 1:
        raise InputError("steps", f"must be >= 1, got {steps!r}")
    jobs = list(profiles)
    if len(jobs) < 2:
        return {j.job_id: limit * j.iteration_time_s for j in jobs}
    span = _span_s(jobs)
    budget = allowance * span * capacity_bps  # bits of extra excess a slip may add

    for job_id, shift in shifts_s.items():
        if not math.isfinite(shift):
            raise InputError(f"shifts_s.{job_id}", f"must be a finite number, got {shift!r}")
    # shifts within [0, period): continuous_score places edges from one period back
    period_of = {j.job_id: j.iteration_time_s for j in jobs}
    wrapped = {j: shifts_s.get(j, 0.0) % period for j, period in period_of.items()}

    def over(moved: str, by_s: float) -> float:
        at = dict(wrapped)
        at[moved] = (at[moved] + by_s) % period_of[moved]
        return (1.0 - continuous_score(jobs, capacity_bps, at, span)) * span * capacity_bps

    out = {}
    for job in jobs:
        base = over(job.job_id, 0.0)
        step = job.iteration_time_s / steps
        k_max = int(math.floor(limit * steps + 1e-9))
        k_ok = k_max
        for k in range(1, k_max + 1):
            if max(over(job.job_id, k * step), over(job.job_id, -k * step)) > base + budget:
                k_ok = k - 1
                break
        out[job.job_id] = k_ok * step
    return out


def slip_tolerances_s(
    capacities_bps: Mapping[str, float],
    paths: Mapping[str, Sequence[str]],
    profiles: Mapping[str, JobProfile],
    periods_s: Mapping[str, float],
    shifts_s: Mapping[str, float],
    **options: float,
) -> dict[str, float]:
    """Slip tolerance (seconds) of every held job (those in ``periods_s``, held to that
    period at ``shifts_s[job]`` seconds): the smallest of its links'
    (:func:`link_slip_tolerances_s`), over links it shares with other held jobs;
    ``limit`` x its period when it shares none.  ``paths[job]`` names a job's links,
    ``capacities_bps[link]`` their capacities; options go to
    :func:`link_slip_tolerances_s`."""
    limit = float(options.get("limit", SLIP_LIMIT))
    if not (math.isfinite(limit) and 0 < limit < 0.5):
        raise InputError("limit", f"must be in (0, 0.5), got {limit!r}")
    for j, period in periods_s.items():
        if j not in profiles:
            raise InputError(f"periods_s.{j}", "no profile for this job")
        if not (math.isfinite(period) and period >= profiles[j].iteration_time_s * (1 - 1e-9)):
            raise InputError(
                f"periods_s.{j}",
                f"must be at least the job's iteration time "
                f"({profiles[j].iteration_time_s!r} s), got {period!r}",
            )
    out = {j: limit * p for j, p in periods_s.items()}
    on: dict[str, list[str]] = {}
    for job in periods_s:
        for link in paths.get(job, ()):
            on.setdefault(link, []).append(job)
    for link, jobs in sorted(on.items()):
        if len(jobs) < 2:
            continue
        if link not in capacities_bps:
            raise InputError(f"paths.{jobs[0]}", f"unknown link {link!r}")
        held = [replace(profiles[j], iteration_time_s=periods_s[j]) for j in sorted(jobs)]
        shifts = {j: float(shifts_s.get(j, 0.0)) for j in jobs}
        for j, tol in link_slip_tolerances_s(held, capacities_bps[link], shifts, **options).items():
            out[j] = min(out[j], tol)
    return out


def _span_s(jobs: Sequence[JobProfile]) -> float:
    """A time over which every job repeats a whole number of times (seconds)."""
    periods = [j.iteration_time_s for j in jobs]
    first = periods[0]
    if all(abs(p - first) <= 1e-9 * first for p in periods):
        return first
    return float(np.round(unified_period(periods, resolution_s=1e-4).period_s, 12))
