"""Discrete-event simulation of a GPU cluster running training jobs: arrivals, queue,
placement, routing and finishes, with the network model behind one seam
(:mod:`cassini.sim.network`); ``docs/internals.md`` ("The engine") tells its rules."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from cassini.errors import InputError
from cassini.nic_scale import on_link
from cassini.profile import JobProfile, unknown_model
from cassini.sim.network import NETWORKS, NetworkModel
from cassini.sim.network.kernels import load_kernels
from cassini.sim.network.windows import DEFAULT_WINDOW, NetworkWindow
from cassini.sim.options import SimOptions
from cassini.sim.parts import priority as crux
from cassini.sim.parts.placement import PLACEMENTS, Choice, defrag_move, is_compact
from cassini.sim.parts.routing import ROUTINGS
from cassini.sim.recorded import host_servers, recorded_options
from cassini.sim.results import JobRecord, SimResult
from cassini.sim.routes import Routes, compute_s
from cassini.sim.schedulers import Scheduler, candidate_placements, decide
from cassini.sim.state import RunningJob
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec, cluster_link_bps, server_link_bps


class Simulation(Routes):
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
        :class:`cassini.sim.report.recording.NetworkRecorder`: gets
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
        window: NetworkWindow = DEFAULT_WINDOW,
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
            if j.model not in self.library:  # the readers give library ids: say which is near
                raise InputError(f"jobs.{j.job_id}.model", unknown_model(j.model, self.library))
            if j.gpus > cluster.gpus:
                raise InputError(
                    f"jobs.{j.job_id}.gpus", f"{j.gpus} GPUs, the cluster has {cluster.gpus}"
                )
        slowest = cluster_link_bps(cluster)
        self.dedicated = {
            m: self._on_links(p, slowest).iteration_time_s for m, p in self.library.items()
        }
        recorded = self.scheduler.policy == "recorded"  # the trace's own hosts
        self.host_server = host_servers(self.jobs, cluster) if recorded else None
        self.free = np.array(cluster.gpus_per_host, int)  # free GPUs per server
        self.running: dict[str, RunningJob] = {}
        self.on_link: dict[str, set[str]] = {}
        self.routes: dict[str, list[tuple[float, tuple[str, ...]]]] = {}  # see _link
        self.peak_on_link: dict[str, float] = {}  # summed peak demand, bits/s
        self.queue: list[JobSpec] = []
        self.records: list[JobRecord] = []
        self.now = 0.0
        self.advised = 0
        self.collisions = 0
        self.priority_cut = {"total": 0.0, "max_k_cut": 0.0, "bands": 0.0}
        self._cross_rack: frozenset[str] = frozenset()
        #: the network model (``options.network``; ``ideal`` runs the window model,
        #: which gives every job its dedicated pace, or at packet level each job alone)
        network = options.network
        if self.scheduler.dedicated_network and network != "packet":
            network = "windows"
        self.net: NetworkModel = NETWORKS[network](self)
        self._kernels = None if self.scheduler.dedicated_network else network
        self._history: dict[str, tuple[list[tuple[tuple[float, ...], float]], float]] = {}

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> SimResult:
        sched = self.scheduler  # the kernels it calls load before the clock starts (wall_s)
        load_kernels(self._kernels, advisor=sched.placement == "cassini" or sched.priority)
        wall = time.perf_counter()
        arrivals = list(reversed(self.jobs))
        total = len(self.jobs)
        while arrivals or self.running or self.queue:
            t_arrival = arrivals[-1].arrival_s if arrivals else math.inf
            t_finish, finishing = self.net.next_finish()
            t = min(t_arrival, t_finish)
            t, ended = self.net.advance(t)  # may stop where a job in the model ends
            finishing = (finishing if t_finish <= t else []) + ended
            if math.isinf(t):  # queued jobs that can never fit (checked in __init__)
                raise RuntimeError("deadlock: queued jobs but nothing running or arriving")
            self.now = t
            changed: set[str] = set()
            if finishing:
                changed |= self._finish(finishing) | set(finishing)
            while arrivals and arrivals[-1].arrival_s <= t:
                self.queue.append(arrivals.pop())
            changed |= self._schedule()
            self.net.update(changed)
            if self.progress and finishing:
                self.progress(len(self.records), total, self.now)
        samples, norm, weights = self._distribution()
        first = min(j.arrival_s for j in self.jobs)
        return SimResult(
            scheduler=self.scheduler.name,
            jobs=tuple(self.records),
            iteration_samples=samples,
            normalised_samples=norm,
            iteration_weights=weights,
            excess_s=self.net.excess_s(),
            makespan_s=max(r.finish_s for r in self.records) - first,
            wall_s=time.perf_counter() - wall,
            network_evaluations=self.net.evaluations,
            network_events=self.net.events,
            placements_advised=self.advised,
            cluster_gpus=self.cluster.gpus,
            collisions=self.collisions,
            priority_cut=dict(self.priority_cut) if self.scheduler.priority else {},
            network_window_s=self.net.window_s,
            routes={j: tuple(paths) for j, paths in self.routes.items()},
        )

    def _finish(self, job_ids: list[str]) -> set[str]:
        neighbours: set[str] = set()
        for job_id in job_ids:
            self.net.finish(job_id)
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
                    compute_gpu_s=sum(r.placement.values()) * r.iterations * compute_s(r.profile),
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
            candidates = {s for o in options for s in o}
            profile = self._job_profile(d.job, candidates)
            if self.scheduler.dedicated_network:
                choice = Choice(options[0])
            else:
                choice = choose(self, profile, options)
                self.advised += choice.advised
            placement, shifts = choice.placement, dict(choice.shifts)
            if self._slowest_link(placement) != self._slowest_link(candidates):
                profile = self._job_profile(d.job, placement)  # on its own server links
            for s, g in placement.items():
                self.free[s] -= g
            r = RunningJob(d.job, profile, placement, (), self.now, d.iterations)
            r.level = self.scheduler.sharing.level_of(d.job)  # Crux's come with the network
            r.shift_s = shifts.pop(d.job.job_id, 0.0)
            self.net.start(r)
            self._route(d.job.job_id, r, count=not self.scheduler.dedicated_network)
            self.running[d.job.job_id] = r
            self._link(d.job.job_id, r)
            # shifts matter only to the jobs now coupled with the new one; the others
            # (on links of candidates not taken) keep theirs
            group = self.net.shift_group(d.job.job_id)
            for job_id, s in shifts.items():
                if job_id in group:
                    self.running[job_id].shift_s = s
            changed |= {d.job.job_id} | (set(shifts) & group)
            self.queue.remove(d.job)
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
            if r.compact:
                continue
            pace = self.net.current_iteration_s(r)  # seconds, as the network model runs it
            if not pace > r.profile.iteration_time_s:
                continue  # nothing to gain: no move can pay back
            move = defrag_move(self.cluster, self.free, r.placement)
            if move is None:
                continue
            new, _ = move
            workers = sum(1 for s in new if s not in r.placement)
            charge = self.options.migration_s * workers
            # a move must pay back: the time the job would save at its dedicated pace
            done = self.net.done(r)
            saving = (r.iterations - done) * (pace - r.profile.iteration_time_s)
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
            self.net.stalled(r)  # its finish may move by the stall
            r.migration_s += charge
            r.migrations += 1
            r.migrated_at = self.now
        return changed

    # -- network ------------------------------------------------------------------------
    def _link(self, job_id: str, r: RunningJob) -> None:
        """Put ``r`` on its path's links, and note that path from now on (every placement,
        move and re-route comes here): the report loads the links each job was routed on."""
        super()._link(job_id, r)
        self.routes.setdefault(job_id, []).append((self.now, r.path))

    def set_levels(self, runs: list[RunningJob]) -> None:
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
        times, over = self.net.distribution()  # every cycle the flow state ran, weight 1
        return (
            np.concatenate([np.array(values), times]),
            np.concatenate([np.array(norm), over]),
            np.concatenate([np.array(weights), np.ones(len(times))]),
        )

    def _job_profile(self, job: JobSpec, servers: Iterable[int]) -> JobProfile:
        """``job``'s library profile under ``options.profiles``, on the slowest server
        link among ``servers`` (:func:`job_profile`)."""
        return job_profile(
            self.library[job.model], self.cluster, servers, self.options.profiles, job.job_id
        )

    def _slowest_link(self, servers: Iterable[int]) -> float:
        """The slowest server link (bits/s) among ``servers``."""
        return min(server_link_bps(self.cluster, s) for s in servers)

    def _on_links(self, profile: JobProfile, link_bps: float) -> JobProfile:
        """``profile`` on a ``link_bps`` (bits/s) server link under ``options.profiles``."""
        return on_link(profile, link_bps, self.options.profiles)


def job_profile(
    profile: JobProfile,
    cluster: Cluster | Topology,
    servers: Iterable[int],
    rule: str,
    job_id: str | None = None,
) -> JobProfile:
    """A library ``profile`` for a job on ``servers``: :func:`cassini.nic_scale.on_link`
    under ``rule`` on the slowest of their server links (bits/s,
    :func:`server_link_bps`), renamed ``job_id`` when given.  The fluid engine and the
    packet level both take a job's profile from here."""
    link = min(server_link_bps(cluster, s) for s in servers)
    scaled = on_link(profile, link, rule)
    return scaled if job_id is None else _as_job(scaled, job_id)


def _as_job(profile: JobProfile, job_id: str) -> JobProfile:
    return JobProfile(job_id, profile.iteration_time_s, profile.phases)


def run(
    cluster: Cluster | Topology,
    jobs: Sequence[JobSpec],
    library: Mapping[str, JobProfile],
    scheduler: str,
    **kwargs: Any,
) -> SimResult:
    """Simulate ``jobs`` on ``cluster`` under ``scheduler``; see :class:`Simulation`."""
    return Simulation(cluster, jobs, library, scheduler, **kwargs).run()
