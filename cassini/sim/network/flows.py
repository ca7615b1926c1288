"""What the network models are handed and what they give back: a job's traffic as a
cycle of compute gaps and sends (:class:`Cycle`), a job in a window (:class:`FlowJob`),
a window's measurements (:class:`NetworkResult`) and the event loop's raw output
(:class:`LoopResult`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cassini.errors import InputError
from cassini.profile import JobProfile

_EPS = 1e-12


@dataclass(frozen=True)
class Cycle:
    """A profile unrolled as one cycle that starts right after its last phase:
    ``gaps_s[i]`` seconds of compute, then ``bits[i]`` bits sent at up to
    ``rates_bps[i]`` bits/s, for each phase ``i``.  ``offset_s`` is where the cycle
    starts within the profile's iteration (seconds)."""

    gaps_s: tuple[float, ...]
    bits: tuple[float, ...]
    rates_bps: tuple[float, ...]
    offset_s: float
    iteration_time_s: float


@lru_cache(maxsize=4096)
def cycle_of(profile: JobProfile) -> Cycle:
    """Unroll ``profile`` into a :class:`Cycle`.  Touching or overlapping phases merge
    into one that sends their bits at its average rate; a profile without phases gives
    a cycle of pure compute."""
    period = profile.iteration_time_s
    starts, ends, _ = profile.intervals()
    if len(starts) == 0:
        return Cycle((period,), (), (), 0.0, period)
    edges = np.unique(np.concatenate([[0.0, period], starts, ends]))
    level = profile.rate_at((edges[:-1] + edges[1:]) / 2)
    segs: list[list[float]] = []  # [start s, end s, bits]
    for a, b, r in zip(edges[:-1], edges[1:], level, strict=True):
        if r <= 0:
            continue
        if segs and abs(segs[-1][1] - a) < _EPS:
            segs[-1][1:] = [b, segs[-1][2] + r * (b - a)]
        else:
            segs.append([a, b, r * (b - a)])
    if len(segs) > 1 and segs[0][0] < _EPS and abs(segs[-1][1] - period) < _EPS:
        first = segs.pop(0)  # a phase through the end of the iteration goes on at 0
        segs[-1] = [segs[-1][0], first[1] + period, segs[-1][2] + first[2]]
    offset = segs[-1][1] % period
    gaps, bits, rates = [], [], []
    cursor = offset
    for a, b, n_bits in segs:
        gaps.append(float((a - cursor) % period))
        bits.append(float(n_bits))
        rates.append(float(n_bits / (b - a)))
        cursor = b % period
    return Cycle(tuple(gaps), tuple(bits), tuple(rates), float(offset), float(period))


@dataclass(frozen=True)
class FlowJob:
    """One job in the network model.

    ``path`` names the links its traffic crosses; ``anchor_s`` is when its first
    iteration (cycle) starts, seconds from the start of the window; ``grid_period_s``
    None means free-running, otherwise the slot grid's period in seconds; ``priority``
    is its class under strict priority sharing (0 first); ``share`` its weight in
    weighted max-min sharing (> 0; its scheduler's sharing rules give it, 1 by default)."""

    job_id: str
    profile: JobProfile
    path: tuple[str, ...]
    anchor_s: float = 0.0
    grid_period_s: float | None = None
    priority: int = 0
    share: float = 1.0

    def __post_init__(self) -> None:
        if not (self.share > 0 and math.isfinite(self.share)):
            raise InputError("share", f"job {self.job_id!r}: share {self.share!r} must be > 0")


@dataclass(frozen=True)
class NetworkResult:
    """What :func:`simulate` measured in ``[warmup_s, horizon_s)``.

    ``iteration_times_s``: per job, the time between consecutive iteration starts (s).
    ``busy_s``: per job, the time from each iteration's start to its last bit (s), which
    leaves out waiting for a slot.
    ``excess_s``: per link, seconds during which the summed demand of the flows on it
    exceeded its capacity.  ``carried_bits``: per link, bits carried in the window.
    ``events``: events stepped through.
    """

    iteration_times_s: dict[str, tuple[float, ...]]
    busy_s: dict[str, tuple[float, ...]]
    excess_s: dict[str, float]
    carried_bits: dict[str, float]
    window_s: float
    events: int

    def mean_iteration_time_s(self, job_id: str) -> float:
        times = self.iteration_times_s[job_id]
        return float(np.mean(times)) if times else math.nan


def pack_cycles(cycles: Sequence) -> tuple:
    """Jobs' unrolled cycles as arrays, one row per job: ``(gaps, bits, peak,
    n_phases, sent_before, per_iteration)`` (s, bits, bits/s, count, bits, bits) and
    the shortest dedicated iteration (s)."""
    n = len(cycles)
    width = max(1, max((len(c.bits) for c in cycles), default=1))
    gaps = np.zeros((n, width))
    bits = np.ones((n, width))
    peak = np.zeros((n, width))
    n_phases = np.zeros(n, np.int64)
    sent_before = np.zeros((n, width))
    per_iteration = np.zeros(n)
    shortest = math.inf
    for i, c in enumerate(cycles):
        gaps[i, : len(c.gaps_s)] = c.gaps_s
        bits[i, : len(c.bits)] = c.bits
        peak[i, : len(c.bits)] = c.rates_bps
        n_phases[i] = len(c.bits)
        sent_before[i, : len(c.bits)] = np.concatenate([[0.0], np.cumsum(c.bits)[:-1]])[
            : len(c.bits)
        ]
        per_iteration[i] = float(sum(c.bits))
        shortest = min(shortest, c.iteration_time_s)
    return (gaps, bits, peak, n_phases, sent_before, per_iteration), shortest


def csr_links(links_of: Sequence[Sequence[int]], n_links: int) -> tuple[np.ndarray, ...]:
    """Each job's links and each link's jobs in CSR form: ``(link_ptr, link_idx,
    link_jobs_ptr, link_jobs)``."""
    n = len(links_of)
    link_ptr = np.zeros(n + 1, np.int64)
    for i, p in enumerate(links_of):
        link_ptr[i + 1] = link_ptr[i] + len(p)
    link_idx = np.array([x for p in links_of for x in p], np.int64)
    on_link: list[list[int]] = [[] for _ in range(n_links)]
    for i, p in enumerate(links_of):
        for x in p:
            on_link[x].append(i)
    link_jobs_ptr = np.zeros(n_links + 1, np.int64)
    for x, js in enumerate(on_link):
        link_jobs_ptr[x + 1] = link_jobs_ptr[x] + len(js)
    link_jobs = np.array([i for js in on_link for i in js], np.int64)
    return link_ptr, link_idx, link_jobs_ptr, link_jobs


@dataclass
class LoopResult:
    """Raw output of :func:`run_events` (per job / per link lists, indices as given).
    ``steps``, when asked for, has one row per step of the whole window: its start (s),
    its length (s), then each job's rate (bits/s; NaN: not sending)."""

    times: list[list[float]]
    busy: list[list[float]]
    excess: list[float]
    carried: list[float]
    events: int
    steps: np.ndarray | None = None
