"""Discrete-event simulation of a GPU cluster running training jobs.

Events are arrivals and completions.  At every event the scheduler places queued jobs
(:mod:`cassini.sim.schedulers`); then the network model (:mod:`cassini.sim.network`)
re-evaluates every group of jobs connected through shared links whose membership or
time-shifts changed, giving each job its iteration time until the next change.
Between events jobs progress at those iteration times.

The scheduler is composed of parts (:mod:`cassini.sim.parts`): a queue policy, a
placement (optionally with MonkeyTree-style defragmentation), a routing over the
spines, a link-sharing rule (max-min, MLTCP-weighted, strict priority) and an in-job
timing.  Timing: *free-running* jobs (a job's iterations are
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

from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.sim.continuous import ContinuousNetwork
from cassini.sim.network import FlowJob, NetworkResult, cycle_of, simulate
from cassini.sim.options import SimOptions
from cassini.sim.parts import priority as crux
from cassini.sim.parts.placement import PLACEMENTS, defrag_move, is_compact
from cassini.sim.parts.routing import ROUTINGS, collisions, crux_paths, route_path
from cassini.sim.recorded import host_servers, recorded_options
from cassini.sim.schedulers import Scheduler, candidate_placements, decide
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec

#: Drift the agent tolerates before re-aligning, as a fraction of the period (paper §5.7).
AGENT_TOLERANCE = 0.05
#: Largest group the agent tries to hold to its shifts; larger ones run free from their
#: shifts at once.  Measured: in a 700-job run of ``sim_1024.yaml`` no group of more than
#: three jobs ever kept its shifts (12 of ~900 held groups did, all of 2-3 jobs), and
#: simulating the attempt doubled the cost of every large group.
HELD_GROUP_LIMIT = 4
#: Warm-up of a group under MLTCP sharing, in periods of its longest job: every
#: evaluation starts from phases set by start times (or shifts), and MLTCP takes several
#: iterations to interleave jobs (mltcp.policy.iterations_to_interleave: ~5-10 at k = 2).
MLTCP_WARMUP_PERIODS = 12.0
#: Times a free-running group's network window is stretched when some job completed no
#: iteration in it (see ``Simulation._network``); each stretch at least doubles it.
WINDOW_STRETCHES = 8


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
    spine: int | None = None
    intensity: float = math.inf  # Crux's GPU intensity (see parts.priority)
    level: int = 0  # priority class (0 = highest)
    stall_s: float = 0.0  # migration time left to sit out, seconds
    migrations: int = 0
    migration_s: float = 0.0  # total stall charged for migrations, seconds
    migrated_at: float = -math.inf
    samples: tuple[float, ...] = ()
    #: continuous network model: when the job's cycle position was 0 (absolute s), for
    #: a job running at dedicated pace outside the flow state
    origin_s: float = 0.0
    #: continuous model, held jobs: its group could not keep its slots (runs free)
    released: bool = False
    #: on as few racks as its GPUs need (None: not yet known; for defragmentation)
    compact: bool | None = None
    #: continuous model, at dedicated pace: ``done`` and ``stall_s`` are as of this time
    since_s: float = 0.0
    finish_version: int = 0
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
    compute_gpu_s: float = 0.0  # GPU-seconds of compute (outside communication phases)
    intensity: float = math.inf  # Crux's GPU intensity on its placement
    priority_level: int = 0  # last priority class (0 = highest) under priority sharing
    migrations: int = 0
    migration_s: float = 0.0  # seconds stalled for migrations

    @property
    def allocated_gpu_s(self) -> float:
        """GPU-seconds the job held its GPUs (start to finish)."""
        return self.gpus * (self.finish_s - self.start_s)

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
    cluster_gpus: int = 0
    collisions: int = 0
    #: priority sharing: summed contention-edge weight, and the part cut by each rule
    priority_cut: Mapping[str, float] = field(default_factory=dict)
    #: network model: simulated seconds of all windows
    network_window_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        """Mean and p99 iteration time (absolute s, and over dedicated), JCT, makespan,
        excess-demand time per link, GPU utilisation (compute GPU-seconds over allocated
        GPU-seconds, Crux's metric), worst job, lowest-priority decile, migrations,
        ECMP collisions."""
        jct = np.array([j.jct_s for j in self.jobs])
        excess = np.array(list(self.excess_s.values()) or [0.0])
        compute = sum(j.compute_gpu_s for j in self.jobs)
        allocated = sum(j.allocated_gpu_s for j in self.jobs)
        cut = dict(self.priority_cut)
        total_cut = cut.pop("total", 0.0)
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
            "gpu_utilisation": compute / allocated if allocated > 0 else math.nan,
            "cluster_gpu_utilisation": (
                compute / (self.cluster_gpus * self.makespan_s)
                if self.cluster_gpus and self.makespan_s > 0
                else math.nan
            ),
            "worst_job_slowdown": max((j.slowdown for j in self.jobs), default=math.nan),
            "lowest_priority_decile": lowest_priority_decile(self.jobs),
            "migrations": sum(j.migrations for j in self.jobs),
            "migration_s_total": sum(j.migration_s for j in self.jobs),
            "ecmp_collisions": self.collisions,
            "priority_cut_fraction": (
                {rule: w / total_cut for rule, w in cut.items()} if total_cut > 0 else None
            ),
        }


def lowest_priority_decile(jobs: Sequence[JobRecord]) -> dict[str, float] | None:
    """The tenth of the networked jobs (finite intensity) with the lowest Crux intensity
    (the lowest priority under Crux; the same ranking for every scheduler): how many,
    their mean slowdown and throughput loss (1 - dedicated / mean iteration time)."""
    ranked = sorted((j for j in jobs if math.isfinite(j.intensity)), key=lambda j: j.intensity)
    if not ranked:
        return None
    tail = ranked[: max(1, len(ranked) // 10)]
    slowdown = float(np.mean([j.slowdown for j in tail]))
    return {
        "jobs": len(tail),
        "mean_slowdown": slowdown,
        "throughput_loss": 1.0 - float(np.mean([1.0 / j.slowdown for j in tail])),
        "job_ids": [j.job_id for j in tail],
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
    options : the mechanisms' run-wide settings (routing, priority levels, MLTCP
        parameters, migration cost).
    n_candidates : placements the policy proposes per job (paper: up to 10).
    seed : seeds the random placements.
    window : how long the network model looks at each group of jobs.
    precision_deg : CASSINI's angle step.
    progress : called as ``progress(finished, total, now_s)`` now and then (jobs
        finished, jobs in the run, simulated seconds reached).
    recorder : optional observer of the network model (for reports), e.g.
        :class:`cassini.sim.recording.NetworkRecorder`: gets
        ``window(now_s, flows, horizon_s, warmup_s, result, mltcp)`` after every evaluation.
    """

    def __init__(
        self,
        cluster: Cluster | Topology,
        jobs: Sequence[JobSpec],
        library: Mapping[str, JobProfile],
        scheduler: str,
        *,
        n_candidates: int = 10,
        seed: int = 0,
        window: NetworkWindow = NetworkWindow(),
        precision_deg: float = 5.0,
        progress: Callable[[int, int, float], None] | None = None,
        options: SimOptions | None = None,
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
        self.options = options = options or SimOptions()
        self.routing = ROUTINGS[self.scheduler.routing or options.routing]
        self.seed = seed
        self.priority_rng = np.random.default_rng([seed, 1])
        for j in self.jobs:  # InputError: `cassini sim` exits 2 naming the job's field
            if j.model not in self.library:
                raise InputError(f"jobs.{j.job_id}.model", f"unknown model {j.model!r}")
            if j.gpus > cluster.gpus:
                raise InputError(
                    f"jobs.{j.job_id}.gpus", f"{j.gpus} GPUs, the cluster has {cluster.gpus}"
                )
        self.dedicated = {m: p.iteration_time_s for m, p in self.library.items()}
        recorded = self.scheduler.policy == "recorded"  # the trace's own hosts
        self.host_server = host_servers(self.jobs, cluster) if recorded else None
        self.free = np.array(cluster.gpus_per_host, int)  # free GPUs per server
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
        self.collisions = 0
        self.priority_cut = {"total": 0.0, "max_k_cut": 0.0, "bands": 0.0}
        self._cross_rack: frozenset[str] = frozenset()
        #: the continuous network model (``options.network == "continuous"``), else None
        self.net: ContinuousNetwork | None = None
        if options.network == "continuous" and not self.scheduler.dedicated_network:
            self.net = ContinuousNetwork(self, AGENT_TOLERANCE, HELD_GROUP_LIMIT)
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
            ended: list[str] = []
            if self.net is not None and self.net.flow.slot_of:
                adv = self.net.advance(self, t)  # may stop where a flow job ends
                self.network_events += adv.events
                t, ended = adv.t_s, list(adv.finished)
            finishing = (finishing if t_finish <= t else []) + ended
            if math.isinf(t):  # queued jobs that can never fit (checked in __init__)
                raise RuntimeError("deadlock: queued jobs but nothing running or arriving")
            self._advance(t)
            changed: set[str] = set()
            if finishing:
                changed |= self._finish(finishing) | set(finishing)
            while arrivals and arrivals[-1].arrival_s <= t:
                self.queue.append(arrivals.pop())
            changed |= self._schedule()
            if self.net is not None:
                self.net.update(self, changed)
            else:
                self._evaluate(changed)
            if self.progress and finishing:
                self.progress(len(self.records), total, self.now)
        if self.net is not None:
            self.excess = self.net.flow.excess_s()
            self.network_window_s = self.net.flow.t
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
            cluster_gpus=self.cluster.gpus,
            collisions=self.collisions,
            priority_cut=dict(self.priority_cut) if self.scheduler.priority else {},
            network_window_s=self.network_window_s,
        )

    def _next_finish(self) -> tuple[float, list[str]]:
        """The next finish of a job at a known pace (every job but those in the
        continuous flow state, which says itself when they end)."""
        if self.net is not None:
            return self.net.next_finish(self)
        best, who = math.inf, []
        for job_id, r in self.running.items():
            t = self.now + r.stall_s + max(0.0, r.iterations - r.done) * r.iteration_time_s
            if t < best - 1e-9:
                best, who = t, [job_id]
            elif abs(t - best) <= 1e-9:
                who.append(job_id)
        return best, who

    def _advance(self, t: float) -> None:
        if self.net is not None:  # progress lives in the flow state or is a line
            self.now = t
            return
        dt = t - self.now
        if dt > 0:
            for r in self.running.values():
                run = dt
                if r.stall_s > 0:  # sitting out a migration
                    stalled = min(r.stall_s, dt)
                    r.stall_s -= stalled
                    run -= stalled
                    if run <= 0:
                        continue
                n = run / r.iteration_time_s
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
            if self.net is not None:
                if job_id not in self.net:
                    self.net.materialize(self, self.running[job_id])
                self.net.finish(self, job_id)
            r = self.running.pop(job_id)
            for s, g in r.placement.items():
                self.free[s] += g
            neighbours |= self._unlink(job_id, r)
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
                    compute_gpu_s=sum(r.placement.values()) * r.iterations * _compute_s(r.profile),
                    intensity=r.intensity,
                    priority_level=r.level,
                    migrations=r.migrations,
                    migration_s=r.migration_s,
                )
            )
            self._history[job_id] = (r.history, r.profile.iteration_time_s)
        return neighbours - set(job_ids)

    # -- scheduling -----------------------------------------------------------------------
    def _schedule(self) -> set[str]:
        changed: set[str] = set()
        if self.scheduler.defrag:
            changed |= self._defragment()
        if self.queue:
            changed |= self._place_queued()
        if self.routing.reroutes:
            changed |= self._reroute()
        return changed

    def _place_queued(self) -> set[str]:
        changed: set[str] = set()
        decisions = decide(
            self.scheduler.policy, self.queue, int(self.free.sum()), self.now, self.dedicated
        )
        choose = PLACEMENTS[
            self.scheduler.placement if self.scheduler.placement != "first" else "packed"
        ]
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
            if self.scheduler.dedicated_network:
                placement, shifts = options[0], {}
            else:
                placement, shifts = choose(self, d.job.job_id, profile, options)
            for s, g in placement.items():
                self.free[s] -= g
            r = _Running(d.job, profile, placement, (), self.now, d.iterations)
            r.shift_s = shifts.pop(d.job.job_id, 0.0)
            if self.net is not None:
                r.origin_s = self.net.origin(self, r)
                r.since_s = self.now
            self._route(d.job.job_id, r, count=not self.scheduler.dedicated_network)
            self.running[d.job.job_id] = r
            self._link(d.job.job_id, r)
            # shifts matter only to the jobs now coupled with the new one; the others
            # (on links of candidates not taken) keep theirs
            if self.net is None:
                group = self.component({d.job.job_id})
            else:  # continuous: only a held (small) group's grids read the shifts
                group = self.component({d.job.job_id}, limit=HELD_GROUP_LIMIT)
                if len(group) > HELD_GROUP_LIMIT:
                    group = {d.job.job_id}
            for job_id, s in shifts.items():
                if job_id in group:
                    self.running[job_id].shift_s = s
            changed |= {d.job.job_id} | (set(shifts) & group)
            self.queue.remove(d.job)
        return changed

    # -- routing --------------------------------------------------------------------------
    def _racks(self, placement: Mapping[int, int]) -> list[int]:
        return sorted({self.cluster.rack_of(s) for s in placement})

    def route_candidate(self, job_id: str, placement: Mapping[int, int]) -> tuple[str, ...]:
        """The path a job would take on ``placement`` under this run's routing."""
        racks = self._racks(placement)
        spine = None
        if len(racks) > 1:
            spine = self.routing.spine(self.cluster, job_id, racks, self.seed, self.peak_on_link)
        return route_path(self.cluster, placement, spine)

    def _route(self, job_id: str, r: _Running, *, count: bool = False) -> None:
        """Give ``r`` its path (not yet on the links) and its Crux intensity."""
        racks = self._racks(r.placement)
        r.spine = None
        if len(racks) > 1:
            r.spine = self.routing.spine(self.cluster, job_id, racks, self.seed, self.peak_on_link)
            if count and r.spine is not None:
                self.collisions += collisions(self.cluster, racks, r.spine, self.peak_on_link)
        r.path = route_path(self.cluster, r.placement, r.spine)
        links = self.cluster.links
        r.intensity = crux.intensity(
            sum(r.placement.values()),
            _compute_s(r.profile),
            r.profile.bits_per_iteration,
            min((links[link] for link in r.path), default=0.0),
        )

    def _link(self, job_id: str, r: _Running) -> None:
        for link in r.path:
            self.on_link.setdefault(link, set()).add(job_id)
            self.peak_on_link[link] = self.peak_on_link.get(link, 0.0) + r.profile.peak_rate_bps

    def _unlink(self, job_id: str, r: _Running) -> set[str]:
        """Take ``r`` off its links; return the jobs left on them."""
        neighbours: set[str] = set()
        for link in r.path:
            self.on_link[link].discard(job_id)
            self.peak_on_link[link] -= r.profile.peak_rate_bps
            neighbours |= self.on_link[link]
        return neighbours

    def _reroute(self) -> set[str]:
        """Crux's path selection over every running cross-rack job, in descending
        intensity, when the set of cross-rack jobs changed."""
        cross = frozenset(j for j, r in self.running.items() if r.spine is not None)
        if cross == self._cross_rack:
            return set()
        self._cross_rack = cross
        order = sorted(cross, key=lambda j: (-self.running[j].intensity, j))
        background = dict(self.peak_on_link)
        for j in order:  # route from scratch: only the single-rack traffic stays
            r = self.running[j]
            for link in r.path:
                background[link] -= r.profile.peak_rate_bps
        spines = crux_paths(
            self.cluster,
            [
                (j, self._racks(self.running[j].placement), self.running[j].profile.peak_rate_bps)
                for j in order
            ],
            background,
        )
        changed: set[str] = set()
        for j, k in spines.items():
            r = self.running[j]
            if k == r.spine:
                continue
            changed |= self._unlink(j, r) | {j}
            r.spine = k
            r.path = route_path(self.cluster, r.placement, k)
            self._link(j, r)
        return changed

    # -- defragmentation ------------------------------------------------------------------
    def _defragment(self) -> set[str]:
        """MonkeyTree-style: move each running job spread over more racks than it needs
        into fewer when the free GPUs allow, unless it moved within the cooldown or the
        move cannot pay back (the time it would save running at its dedicated pace for
        its remaining iterations is less than the stall); the job stalls
        ``migration_s`` per moved worker (server)."""
        changed: set[str] = set()
        for job_id in sorted(self.running, key=lambda j: (-len(self.running[j].placement), j)):
            r = self.running[job_id]
            if self.now - r.migrated_at < self.options.cooldown_s:
                continue
            if r.compact is None:  # on as few racks as it can be: never moves
                r.compact = is_compact(self.cluster, r.placement)
            if r.compact or not r.iteration_time_s > r.profile.iteration_time_s:
                continue  # nothing to gain: no move, or none that can pay back
            move = defrag_move(self.cluster, self.free, r.placement)
            if move is None:
                continue
            new, _ = move
            workers = sum(1 for s in new if s not in r.placement)
            charge = self.options.migration_s * workers
            # a move must pay back: the time the job would save at its dedicated pace
            if self.net is not None and job_id in self.net:
                done = self.net.flow.progress(job_id)[0]
            else:
                if self.net is not None:
                    self.net.materialize(self, r)
                done = r.done
            saving = (r.iterations - done) * (r.iteration_time_s - r.profile.iteration_time_s)
            if not saving > charge:
                continue
            for s, g in r.placement.items():
                self.free[s] += g
            for s, g in new.items():
                self.free[s] -= g
            changed |= self._unlink(job_id, r) | {job_id}
            r.placement = new
            r.compact = None
            self._route(job_id, r)
            self._link(job_id, r)
            r.stall_s += charge
            if self.net is not None and job_id not in self.net:
                self.net.schedule_finish(self, r)  # its finish moves by the stall
            r.migration_s += charge
            r.migrations += 1
            r.migrated_at = self.now
        return changed

    def coupling(self, link: str, extra_bps: float = 0.0) -> bool:
        """Whether the jobs on ``link`` (plus one more peaking at ``extra_bps``) can ever
        want more than its capacity; a link that cannot never slows a flow, so it couples
        nobody."""
        peak = self.peak_on_link.get(link, 0.0) + extra_bps
        return peak > self.cluster.links[link] * (1 + 1e-9)

    def component(self, seeds: set[str], limit: int | None = None) -> set[str]:
        """Running jobs connected to ``seeds`` through links that can congest; with
        ``limit``, the search stops once it holds more than ``limit`` jobs (a result of
        at most ``limit`` jobs is then the whole group)."""
        seen: set[str] = set()
        todo = list(seeds)
        coupled: dict[str, bool] = {}
        while todo:
            j = todo.pop()
            if j in seen or j not in self.running:
                continue
            seen.add(j)
            if limit is not None and len(seen) > limit:
                break
            for link in self.running[j].path:
                c = coupled.get(link)
                if c is None:
                    c = coupled[link] = self.coupling(link)
                if c:
                    todo.extend(self.on_link[link] - seen)
        return seen

    # -- network --------------------------------------------------------------------------
    #: simulated seconds of all network windows so far
    network_window_s: float = 0.0

    def _evaluate(self, changed: set[str]) -> None:
        """Re-run the network model for every group that holds a changed job."""
        todo = {j for j in changed if j in self.running}
        for group_key in [g for g in self.excess_rate if g & changed]:
            del self.excess_rate[group_key]
        while todo:
            group = self.component({todo.pop()})
            todo -= group
            self._evaluate_group(sorted(group))

    def _evaluate_group(self, group: list[str]) -> None:
        runs = [self.running[j] for j in group]
        shared = any(self.coupling(link) for r in runs for link in r.path)
        if self.scheduler.dedicated_network or not shared:
            for r in runs:
                r.iteration_time_s = r.profile.iteration_time_s
                r.samples = (r.profile.iteration_time_s,)
            return
        if self.scheduler.priority:
            self._levels(runs)
        result = self._held(runs) if self.scheduler.held else self._network(runs, held=False)
        for r in runs:
            times = result.iteration_times_s[r.spec.job_id]
            r.samples = tuple(times) if times else (r.profile.iteration_time_s,)
            r.iteration_time_s = float(np.mean(r.samples))
        window = result.window_s
        self.excess_rate[frozenset(group)] = {
            link: s / window for link, s in result.excess_s.items() if s > 0
        }

    def _levels(self, runs: list[_Running]) -> None:
        """Crux priorities for a group: intensity, compressed to K levels by the max-K-cut
        over the group's contention graph; the simple band rule's cut is kept beside it."""
        ids = [r.spec.job_id for r in runs]
        intensities = {j: self.running[j].intensity for j in ids}
        on = {j: {link for link in self.running[j].path if self.coupling(link)} for j in ids}
        k = self.options.priority_levels
        levels, prio, edges = crux.crux_levels(intensities, on, k, self.priority_rng)
        order = sorted(ids, key=lambda j: (-prio[j], j))
        self.priority_cut["total"] += sum(edges.values())
        self.priority_cut["max_k_cut"] += crux.cut_weight(levels, edges)
        self.priority_cut["bands"] += crux.cut_weight(crux.band_levels(order, k), edges)
        for r in runs:
            r.level = levels[r.spec.job_id]

    def _held(self, runs: list[_Running]) -> NetworkResult:
        """Jobs held to their time-shifts by the agent.  A group that cannot keep the
        shifts at its dedicated pace (some job busier than its period plus half the
        tolerance) would re-align over and over; the agent then releases it to run free
        from its shifted start.  (Stretching every period by a common factor instead was
        tried: it lost to releasing in 255 of 256 groups of a 300-job run.)"""
        if len(runs) > HELD_GROUP_LIMIT:
            return self._network(runs, held=False, from_shifts=True)
        result = self._network(runs, held=True)
        busy = [result.busy_s[r.spec.job_id] for r in runs]
        # a job with no busy record finished no iteration within the measured window,
        # several of its periods: it cannot keep its slots either
        if all(busy):
            need = max(
                float(np.mean(b)) / r.profile.iteration_time_s
                for r, b in zip(runs, busy, strict=True)
            )
            if need <= 1 + AGENT_TOLERANCE / 2:
                return result
        return self._network(runs, held=False, from_shifts=True)

    def _network(
        self, runs: list[_Running], *, held: bool, from_shifts: bool = False
    ) -> NetworkResult:
        """Simulate the group: held to the shifts, or free-running phased by start time
        or by the shifts.

        The window is counted in periods of the group's longest dedicated iteration.  A
        job can be slowed past that whole window (its own path thinner than its demand,
        e.g. one ECMP spine's share of an oversubscribed uplink, or many jobs sharing):
        free-running, the window is then stretched to the longest iteration the group's
        links allow (:func:`_stretched_iteration_s`), doubling beyond that, until every
        job completes one.  Held, a job without a whole iteration is left to
        :meth:`_held`, which releases its group."""
        longest = max(r.profile.iteration_time_s for r in runs)
        result = self._window(runs, longest, held=held, from_shifts=from_shifts)
        if held:
            return result
        stretched = max(_stretched_iteration_s(r, self) for r in runs)
        for _ in range(WINDOW_STRETCHES):
            if all(result.iteration_times_s[r.spec.job_id] for r in runs):
                break
            longest = max(2 * longest, stretched)
            result = self._window(runs, longest, held=False, from_shifts=from_shifts)
        return result

    def _window(
        self, runs: list[_Running], longest: float, *, held: bool, from_shifts: bool
    ) -> NetworkResult:
        """One network window over the group, its warm-up and measured parts counted in
        periods of ``longest`` seconds."""
        periods = self.window.warmup_periods
        if self.scheduler.mltcp:  # let MLTCP re-converge from the start-time phases
            periods = max(periods, MLTCP_WARMUP_PERIODS)
        warmup = periods * longest
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
            path = tuple(link for link in r.path if self.coupling(link))
            level = r.level if self.scheduler.priority else 0
            flows.append(FlowJob(r.spec.job_id, r.profile, path, anchor, grid, level))
        mltcp = self.options.mltcp if self.scheduler.mltcp else None
        result = simulate(
            flows,
            self.cluster.links,
            horizon_s=horizon,
            warmup_s=warmup,
            tolerance=AGENT_TOLERANCE,
            mltcp=mltcp,
        )
        self.evaluations += 1
        if self.recorder is not None:
            self.recorder.window(self.now, tuple(flows), horizon, warmup, result, mltcp)
        self.network_events += result.events
        self.network_window_s += horizon
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
        if self.net is None:
            return np.array(values), np.array(norm), np.array(weights)
        times, over = self.net.distribution()  # every cycle the flow state ran, weight 1
        return (
            np.concatenate([np.array(values), times]),
            np.concatenate([np.array(norm), over]),
            np.concatenate([np.array(weights), np.ones(len(times))]),
        )


def _as_job(profile: JobProfile, job_id: str) -> JobProfile:
    return JobProfile(job_id, profile.iteration_time_s, profile.phases)


def _stretched_iteration_s(r: _Running, sim: Simulation) -> float:
    """Longest iteration (s) max-min sharing can give ``r``: each phase sends at no less
    than its own rate or an equal share of each link of its path that can congest
    (capacity over the jobs on it), whichever is lower."""
    share = min(
        (sim.cluster.links[link] / len(sim.on_link[link]) for link in r.path if sim.coupling(link)),
        default=math.inf,
    )
    return r.profile.iteration_time_s + r.profile.bits_per_iteration / share


def _compute_s(profile: JobProfile) -> float:
    """Seconds per iteration outside communication phases (the GPU's compute)."""
    return float(sum(cycle_of(profile).gaps_s))


def run(
    cluster: Cluster | Topology,
    jobs: Sequence[JobSpec],
    library: Mapping[str, JobProfile],
    scheduler: str,
    **kwargs: Any,
) -> SimResult:
    """Simulate ``jobs`` on ``cluster`` under ``scheduler``; see :class:`Simulation`."""
    return Simulation(cluster, jobs, library, scheduler, **kwargs).run()
