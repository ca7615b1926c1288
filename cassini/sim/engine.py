"""Discrete-event simulation of a GPU cluster running training jobs.

Events are arrivals and completions.  At every event the scheduler places queued jobs
(:mod:`cassini.sim.schedulers`); then the network model (:mod:`cassini.sim.network`)
re-evaluates every group of jobs connected through shared links whose membership or
time-shifts changed, giving each job its iteration time until the next change.
Between events jobs progress at those iteration times.

Network modes: *free-running* jobs (the baseline schedulers; a job's iterations are
phased by its start time) or jobs *held to time-shifts* (``+cassini``): each job's
iteration ``k`` starts at ``shift + k * T`` where T is its dedicated iteration time,
re-aligning when more than 5 % late (the paper's agent); a group that cannot keep that
pace, or has more than :data:`HELD_GROUP_LIMIT` jobs, is released to run free from its
shifts.  ``ideal`` skips the network.

Only links whose jobs' summed peak demand exceeds their capacity can slow anyone, so
groups are formed over those links only (exact, and it keeps groups small).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cassini.plugin import choose_placement
from cassini.profile import JobProfile
from cassini.sim.network import FlowJob, NetworkResult, cycle_of, simulate
from cassini.sim.recorded import host_servers, recorded_options
from cassini.sim.schedulers import Scheduler, candidate_placements, decide
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec

#: Drift the agent tolerates before re-aligning, as a fraction of the period (paper §5.7).
AGENT_TOLERANCE = 0.05
#: Largest group the agent tries to hold to its shifts; larger ones run free from their
#: shifts at once.  Measured: in a 700-job run of ``sim_1024.yaml`` no group of more than
#: three jobs ever kept its shifts (12 of ~900 held groups did, all of 2-3 jobs), and
#: simulating the attempt doubled the cost of every large group.
HELD_GROUP_LIMIT = 4


@dataclass(frozen=True)
class NetworkWindow:
    """How long the network model looks at a group of jobs: ``warmup_periods`` then
    ``measure_periods`` of the group's longest iteration time."""

    warmup_periods: float = 2.0
    measure_periods: float = 4.0


@dataclass
class _Running:
    spec: JobSpec
    profile: JobProfile
    placement: dict[int, int]
    path: tuple[str, ...]
    start_s: float
    iterations: int
    shift_s: float = 0.0
    done: float = 0.0  # iterations completed (fractional)
    iteration_time_s: float = math.nan
    samples: tuple[float, ...] = ()
    #: iterations run at each distinct sample set, for the iteration-time distribution
    history: list[tuple[tuple[float, ...], float]] = field(default_factory=list)
    #: (time s, mean iteration time s) from each change of the job's network state on
    timeline: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class JobRecord:
    """One finished job: times in seconds, ``slowdown`` = mean iteration time over its
    dedicated iteration time."""

    job_id: str
    model: str
    gpus: int
    servers: int
    racks: int
    iterations: int
    arrival_s: float
    start_s: float
    finish_s: float
    dedicated_iteration_s: float
    mean_iteration_s: float
    slowdown: float
    shift_s: float
    placement: tuple[tuple[int, int], ...]  # (server, GPUs) pairs
    timeline: tuple[tuple[float, float], ...] = ()  # (time s, mean iteration time s)

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.arrival_s


@dataclass(frozen=True)
class SimResult:
    """A simulation's outcome.  ``iteration_samples`` / ``iteration_weights``: the
    iteration-time distribution over every iteration of every job (seconds, weight in
    iterations); ``normalised_samples`` the same over each job's dedicated time."""

    scheduler: str
    jobs: tuple[JobRecord, ...]
    iteration_samples: np.ndarray
    normalised_samples: np.ndarray
    iteration_weights: np.ndarray
    excess_s: dict[str, float]
    makespan_s: float
    wall_s: float
    network_evaluations: int
    network_events: int
    placements_advised: int

    def summary(self) -> dict[str, Any]:
        """Mean and p99 iteration time (absolute s, and over dedicated), JCT, makespan,
        excess-demand time per link."""
        jct = np.array([j.jct_s for j in self.jobs])
        excess = np.array(list(self.excess_s.values()) or [0.0])
        return {
            "scheduler": self.scheduler,
            "jobs": len(self.jobs),
            "mean_iteration_s": weighted_mean(self.iteration_samples, self.iteration_weights),
            "p99_iteration_s": weighted_quantile(
                self.iteration_samples, self.iteration_weights, 0.99
            ),
            "mean_slowdown": weighted_mean(self.normalised_samples, self.iteration_weights),
            "p99_slowdown": weighted_quantile(
                self.normalised_samples, self.iteration_weights, 0.99
            ),
            "mean_jct_s": float(jct.mean()),
            "p99_jct_s": float(np.quantile(jct, 0.99)),
            "makespan_s": self.makespan_s,
            "excess_demand_s_total": float(excess.sum()),
            "excess_demand_s_max_link": float(excess.max()),
            "links_with_excess": int((excess > 0).sum()),
            "wall_s": self.wall_s,
            "network_evaluations": self.network_evaluations,
            "network_events": self.network_events,
            "placements_advised": self.placements_advised,
        }


def weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
    return float(np.average(values, weights=weights)) if len(values) else math.nan


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Smallest value whose cumulative weight reaches ``q`` of the total."""
    if not len(values):
        return math.nan
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, q * cum[-1] - 1e-9)])


class Simulation:
    """One run of ``scheduler`` over ``jobs`` on ``cluster``.

    Parameters
    ----------
    cluster : the topology.
    jobs : arrivals (any order).
    library : job profiles by model id.
    scheduler : e.g. ``"themis+cassini"`` (see :mod:`cassini.sim.schedulers`).
    n_candidates : placements the policy proposes per job (paper: up to 10).
    seed : seeds the random placements.
    window : how long the network model looks at each group of jobs.
    precision_deg : CASSINI's angle step.
    progress : called as ``progress(finished, total)`` now and then.
    recorder : optional observer of the network model (for reports), e.g.
        :class:`cassini.sim.recording.NetworkRecorder`: gets
        ``window(now_s, flows, horizon_s, warmup_s, result)`` after every evaluation.
    """

    def __init__(
        self,
        cluster: Cluster,
        jobs: Sequence[JobSpec],
        library: Mapping[str, JobProfile],
        scheduler: str,
        *,
        n_candidates: int = 10,
        seed: int = 0,
        window: NetworkWindow = NetworkWindow(),
        precision_deg: float = 5.0,
        progress: Callable[[int, int], None] | None = None,
        recorder: Any = None,
    ) -> None:
        self.cluster = cluster
        self.jobs = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
        self.library = dict(library)
        self.scheduler = Scheduler.parse(scheduler)
        self.n_candidates = n_candidates
        self.rng = np.random.default_rng(seed)
        self.window = window
        self.precision_deg = precision_deg
        self.progress = progress
        self.recorder = recorder
        for j in self.jobs:
            if j.model not in self.library:
                raise ValueError(f"job {j.job_id}: unknown model {j.model!r}")
            if j.gpus > cluster.gpus:
                raise ValueError(f"job {j.job_id}: {j.gpus} GPUs, cluster has {cluster.gpus}")
        self.dedicated = {m: p.iteration_time_s for m, p in self.library.items()}
        recorded = self.scheduler.policy == "recorded"  # the trace's own hosts
        self.host_server = host_servers(self.jobs, cluster) if recorded else None
        self.free = np.full(cluster.servers, cluster.gpus_per_server, int)
        self.running: dict[str, _Running] = {}
        self.on_link: dict[str, set[str]] = {}
        self.peak_on_link: dict[str, float] = {}  # summed peak demand, bits/s
        self.queue: list[JobSpec] = []
        self.records: list[JobRecord] = []
        self.excess: dict[str, float] = {}
        self.excess_rate: dict[frozenset[str], dict[str, float]] = {}
        self.now = 0.0
        self.evaluations = 0
        self.network_events = 0
        self.advised = 0
        self._history: dict[str, tuple[list[tuple[tuple[float, ...], float]], float]] = {}

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> SimResult:
        wall = time.perf_counter()
        arrivals = list(reversed(self.jobs))
        total = len(self.jobs)
        while arrivals or self.running or self.queue:
            t_arrival = arrivals[-1].arrival_s if arrivals else math.inf
            t_finish, finishing = self._next_finish()
            t = min(t_arrival, t_finish)
            if math.isinf(t):  # queued jobs that can never fit (checked in __init__)
                raise RuntimeError("deadlock: queued jobs but nothing running or arriving")
            self._advance(t)
            changed: set[str] = set()
            if t_finish <= t:
                changed |= self._finish(finishing) | set(finishing)
            while arrivals and arrivals[-1].arrival_s <= t:
                self.queue.append(arrivals.pop())
            changed |= self._schedule()
            self._evaluate(changed)
            if self.progress and (t_finish <= t):
                self.progress(len(self.records), total)
        samples, norm, weights = self._distribution()
        first = min(j.arrival_s for j in self.jobs)
        return SimResult(
            scheduler=self.scheduler.name,
            jobs=tuple(self.records),
            iteration_samples=samples,
            normalised_samples=norm,
            iteration_weights=weights,
            excess_s=dict(self.excess),
            makespan_s=max(r.finish_s for r in self.records) - first,
            wall_s=time.perf_counter() - wall,
            network_evaluations=self.evaluations,
            network_events=self.network_events,
            placements_advised=self.advised,
        )

    def _next_finish(self) -> tuple[float, list[str]]:
        best, who = math.inf, []
        for job_id, r in self.running.items():
            t = self.now + max(0.0, r.iterations - r.done) * r.iteration_time_s
            if t < best - 1e-9:
                best, who = t, [job_id]
            elif abs(t - best) <= 1e-9:
                who.append(job_id)
        return best, who

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt > 0:
            for r in self.running.values():
                n = dt / r.iteration_time_s
                r.done += n
                if r.history and r.history[-1][0] is r.samples:
                    r.history[-1] = (r.samples, r.history[-1][1] + n)
                else:
                    r.history.append((r.samples, n))
                    r.timeline.append((self.now, r.iteration_time_s))
            for rates in self.excess_rate.values():
                for link, fraction in rates.items():
                    self.excess[link] = self.excess.get(link, 0.0) + fraction * dt
        self.now = t

    def _finish(self, job_ids: list[str]) -> set[str]:
        neighbours: set[str] = set()
        for job_id in job_ids:
            r = self.running.pop(job_id)
            for s, g in r.placement.items():
                self.free[s] += g
            for link in r.path:
                self.on_link[link].discard(job_id)
                self.peak_on_link[link] -= r.profile.peak_rate_bps
                neighbours |= self.on_link[link]
            racks = {self.cluster.rack_of(s) for s in r.placement}
            mean_it = (self.now - r.start_s) / r.iterations
            self.records.append(
                JobRecord(
                    job_id=job_id,
                    model=r.spec.model,
                    gpus=sum(r.placement.values()),
                    servers=len(r.placement),
                    racks=len(racks),
                    iterations=r.iterations,
                    arrival_s=r.spec.arrival_s,
                    start_s=r.start_s,
                    finish_s=self.now,
                    dedicated_iteration_s=r.profile.iteration_time_s,
                    mean_iteration_s=mean_it,
                    slowdown=mean_it / r.profile.iteration_time_s,
                    shift_s=r.shift_s,
                    placement=tuple(sorted(r.placement.items())),
                    timeline=tuple(r.timeline),
                )
            )
            self._history[job_id] = (r.history, r.profile.iteration_time_s)
        return neighbours - set(job_ids)

    # -- scheduling -----------------------------------------------------------------------
    def _schedule(self) -> set[str]:
        if not self.queue:
            return set()
        changed: set[str] = set()
        decisions = decide(
            self.scheduler.policy, self.queue, int(self.free.sum()), self.now, self.dedicated
        )
        for d in decisions:
            if self.host_server is not None:
                options = recorded_options(d.job, self.host_server, self.free)
            else:
                options = candidate_placements(
                    self.cluster, self.free, d.gpus, self.n_candidates, self.rng
                )
            if not options:
                continue
            profile = _as_job(self.library[d.job.model], d.job.job_id)
            placement, shifts = self._choose(d.job.job_id, profile, options)
            for s, g in placement.items():
                self.free[s] -= g
            path = self.cluster.path(placement)
            r = _Running(d.job, profile, placement, path, self.now, d.iterations)
            r.shift_s = shifts.pop(d.job.job_id, 0.0)
            self.running[d.job.job_id] = r
            for link in path:
                self.on_link.setdefault(link, set()).add(d.job.job_id)
                self.peak_on_link[link] = self.peak_on_link.get(link, 0.0) + profile.peak_rate_bps
            # shifts matter only to the jobs now coupled with the new one; the others
            # (on links of candidates not taken) keep theirs
            group = self._component({d.job.job_id})
            for job_id, s in shifts.items():
                if job_id in group:
                    self.running[job_id].shift_s = s
            changed |= {d.job.job_id} | (set(shifts) & group)
            self.queue.remove(d.job)
        return changed

    def _choose(
        self, job_id: str, profile: JobProfile, options: list[dict[int, int]]
    ) -> tuple[dict[int, int], dict[str, float]]:
        """Pick a placement; return it with the time-shifts to apply (job -> s)."""
        mode = self.scheduler.placement
        if self.scheduler.dedicated_network or mode == "first":
            return options[0], {}
        if mode == "random":
            return options[int(self.rng.integers(len(options)))], {}
        # only links that could congest with the new job on them matter
        peak = profile.peak_rate_bps
        paths = [
            [link for link in self.cluster.path(p) if self._coupling(link, peak)] for p in options
        ]
        seeds = {j for path in paths for link in path for j in self.on_link.get(link, ())}
        group = self._component(seeds)
        if not group:
            return options[0], {}
        if len(group) > HELD_GROUP_LIMIT:
            # a group this large will not be held to shifts anyway (see _held): advise on
            # the links the new job may share only, with the jobs on them
            group = seeds
            near = {link for path in paths for link in path}
        else:
            near = None
        jobs = {j: self.running[j].profile for j in group} | {job_id: profile}
        base = {
            j: [
                link
                for link in self.running[j].path
                if self._coupling(link) and (near is None or link in near)
            ]
            for j in group
        }
        candidates = [base | {job_id: path} for path in paths]
        links = {
            link: self.cluster.links[link] for c in candidates for p in c.values() for link in p
        }
        if not links:
            return options[0], {}
        self.advised += 1
        choice = choose_placement(
            jobs, links, candidates, precision_deg=self.precision_deg, repair=False
        )
        index = choice.index if choice.index is not None else 0
        shifts = dict(choice.time_shifts_s) if choice.score is not None else {}
        return options[index], shifts

    def _coupling(self, link: str, extra_bps: float = 0.0) -> bool:
        """Whether the jobs on ``link`` (plus one more peaking at ``extra_bps``) can ever
        want more than its capacity; a link that cannot never slows a flow, so it couples
        nobody."""
        peak = self.peak_on_link.get(link, 0.0) + extra_bps
        return peak > self.cluster.links[link] * (1 + 1e-9)

    def _component(self, seeds: set[str]) -> set[str]:
        """Running jobs connected to ``seeds`` through links that can congest."""
        seen, todo = set(), list(seeds)
        while todo:
            j = todo.pop()
            if j in seen or j not in self.running:
                continue
            seen.add(j)
            for link in self.running[j].path:
                if self._coupling(link):
                    todo.extend(self.on_link[link] - seen)
        return seen

    # -- network --------------------------------------------------------------------------
    def _evaluate(self, changed: set[str]) -> None:
        """Re-run the network model for every group that holds a changed job."""
        todo = {j for j in changed if j in self.running}
        for group_key in [g for g in self.excess_rate if g & changed]:
            del self.excess_rate[group_key]
        while todo:
            group = self._component({todo.pop()})
            todo -= group
            self._evaluate_group(sorted(group))

    def _evaluate_group(self, group: list[str]) -> None:
        runs = [self.running[j] for j in group]
        shared = any(self._coupling(link) for r in runs for link in r.path)
        if self.scheduler.dedicated_network or not shared:
            for r in runs:
                r.iteration_time_s = r.profile.iteration_time_s
                r.samples = (r.profile.iteration_time_s,)
            return
        if self.scheduler.placement == "cassini":
            result = self._held(runs)
        else:
            result = self._network(runs, held=False)
        for r in runs:
            times = result.iteration_times_s[r.spec.job_id]
            r.samples = tuple(times) if times else (r.profile.iteration_time_s,)
            r.iteration_time_s = float(np.mean(r.samples))
        window = result.window_s
        self.excess_rate[frozenset(group)] = {
            link: s / window for link, s in result.excess_s.items() if s > 0
        }

    def _held(self, runs: list[_Running]) -> NetworkResult:
        """Jobs held to their time-shifts by the agent.  A group that cannot keep the
        shifts at its dedicated pace (some job busier than its period plus half the
        tolerance) would re-align over and over; the agent then releases it to run free
        from its shifted start.  (Stretching every period by a common factor instead was
        tried: it lost to releasing in 255 of 256 groups of a 300-job run.)"""
        if len(runs) > HELD_GROUP_LIMIT:
            return self._network(runs, held=False, from_shifts=True)
        result = self._network(runs, held=True)
        need = max(
            float(np.mean(b)) / r.profile.iteration_time_s
            for r in runs
            if (b := result.busy_s[r.spec.job_id])
        )
        if need <= 1 + AGENT_TOLERANCE / 2:
            return result
        return self._network(runs, held=False, from_shifts=True)

    def _network(
        self, runs: list[_Running], *, held: bool, from_shifts: bool = False
    ) -> NetworkResult:
        """Simulate the group: held to the shifts, or free-running phased by start time
        or by the shifts."""
        longest = max(r.profile.iteration_time_s for r in runs)
        warmup = self.window.warmup_periods * longest
        horizon = warmup + self.window.measure_periods * longest
        flows = []
        for r in runs:
            period = r.profile.iteration_time_s
            offset = cycle_of(r.profile).offset_s
            if held:
                grid = period
                anchor = (r.shift_s + offset - self.now) % period
            else:
                grid = None
                phase = r.shift_s if from_shifts else r.start_s
                anchor = (phase + offset - self.now) % period
            path = tuple(link for link in r.path if self._coupling(link))
            flows.append(FlowJob(r.spec.job_id, r.profile, path, anchor, grid))
        result = simulate(
            flows,
            self.cluster.links,
            horizon_s=horizon,
            warmup_s=warmup,
            tolerance=AGENT_TOLERANCE,
        )
        self.evaluations += 1
        if self.recorder is not None:
            self.recorder.window(self.now, tuple(flows), horizon, warmup, result)
        self.network_events += result.events
        return result

    # -- results --------------------------------------------------------------------------
    def _distribution(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        values, norm, weights = [], [], []
        for history, dedicated in self._history.values():
            for samples, n in history:
                if not samples or n <= 0:
                    continue
                w = n / len(samples)
                values.extend(samples)
                norm.extend(s / dedicated for s in samples)
                weights.extend([w] * len(samples))
        return np.array(values), np.array(norm), np.array(weights)


def _as_job(profile: JobProfile, job_id: str) -> JobProfile:
    return JobProfile(job_id, profile.iteration_time_s, profile.phases)


def run(
    cluster: Cluster,
    jobs: Sequence[JobSpec],
    library: Mapping[str, JobProfile],
    scheduler: str,
    **kwargs: Any,
) -> SimResult:
    """Simulate ``jobs`` on ``cluster`` under ``scheduler``; see :class:`Simulation`."""
    return Simulation(cluster, jobs, library, scheduler, **kwargs).run()
