"""What a simulation reports: one :class:`JobRecord` per finished job and the run's
:class:`SimResult` with its summary statistics."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cassini.sim.topologies.fabric import physical_link


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
    #: job id -> ``(since s, links)``: every path the run routed the job on, from when
    #: (for the report; not in results.json)
    routes: Mapping[str, tuple[tuple[float, tuple[str, ...]], ...]] = field(default_factory=dict)

    @property
    def excess_measured(self) -> bool:
        """Whether the network model measured excess demand: the packet model does not
        (NaN on every link), and the summary's excess fields are then NaN/None (null)."""
        return not any(math.isnan(s) for s in self.excess_s.values())

    def excess_by_link(self) -> dict[str, float]:
        """Excess-demand seconds per physical link, as the summary counts them: a switch
        link whose two directions are two resources of the network model (a generated or
        host-table fabric's ``tor3-agg1:up`` and ``:down``) counts once, under its link id,
        with the seconds of its more congested direction; a resource that is a whole
        duplex link (a server's ``srv<i>``, the uniform form's ``tor<r>``, ``pod<p>``)
        counts as it is.  A ring job puts the same rate on both directions of every
        switch link it crosses on one path, so the same congestion gives the same
        link-seconds on ``generate: two-tier`` as on the uniform form."""
        out: dict[str, float] = {}
        for resource, s in self.excess_s.items():
            link = physical_link(resource)
            out[link] = s if link not in out else max(out[link], s)
        return out

    def summary(self) -> dict[str, Any]:
        """Mean and p99 iteration time (absolute s, and over dedicated), JCT, makespan,
        excess-demand time per physical link (:meth:`excess_by_link`), GPU utilisation
        (compute GPU-seconds over allocated GPU-seconds, Crux's metric), worst job,
        lowest-priority decile, migrations, ECMP collisions."""
        jct = np.array([j.jct_s for j in self.jobs])
        excess = np.array(list(self.excess_by_link().values()) or [0.0])
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
            "links_with_excess": int((excess > 0).sum()) if self.excess_measured else None,
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
