"""What the simulator's parts and network models may read of a running simulation: the
running jobs (:class:`RunningJob`) and the :class:`ClusterState` view over them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from cassini.profile import JobProfile
from cassini.sim.options import SimOptions
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec


@dataclass
class RunningJob:
    """A running job as the engine keeps it (times in seconds; mutable)."""

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


class ClusterState(Protocol):
    """The engine as its parts and network models see it: read these, never write
    them (the one exception, :meth:`set_levels`, is the engine's own step)."""

    now: float  # simulated time, seconds
    cluster: Cluster | Topology
    running: Mapping[str, RunningJob]
    on_link: Mapping[str, set[str]]  # link -> ids of the running jobs on it
    options: SimOptions
    scheduler: Any  # cassini.sim.schedulers.Scheduler (its flags: priority, held, mltcp)
    window: Any  # cassini.sim.network.windows.NetworkWindow
    recorder: Any  # a cassini.sim.report.recording.NetworkRecorder, or None
    rng: np.random.Generator
    precision_deg: float

    def coupling(self, link: str, extra_bps: float = 0.0) -> bool:
        """Whether the jobs on ``link`` (plus one more peaking at ``extra_bps`` bits/s)
        can want more than its capacity."""
        ...

    def component(self, seeds: set[str], limit: int | None = None) -> set[str]:
        """Running jobs connected to ``seeds`` through links that can congest."""
        ...

    def route_candidate(self, job_id: str, placement: Mapping[int, int]) -> tuple[str, ...]:
        """The path a job would take on ``placement``."""
        ...

    def set_levels(self, runs: list[RunningJob]) -> None:
        """Give a group its Crux priority classes (``level``)."""
