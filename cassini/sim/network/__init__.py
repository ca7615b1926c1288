"""The simulator's network models, behind one seam: :class:`NetworkModel` is what the
engine calls, :data:`NETWORKS` names each model (``options.network`` picks one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

from cassini.sim.network.continuous import ContinuousNetwork
from cassini.sim.network.flows import Cycle, FlowJob, NetworkResult, cycle_of
from cassini.sim.network.packet import PacketNetwork
from cassini.sim.network.windows import WindowNetwork

if TYPE_CHECKING:
    from cassini.sim.state import ClusterState, RunningJob

#: the seam's value types, also importable from here (``cassini.packet`` reads cycle_of)
__all__ = [
    "NETWORKS",
    "Cycle",
    "FlowJob",
    "NetworkModel",
    "NetworkResult",
    "cycle_of",
]


class NetworkModel(Protocol):
    """How jobs sharing links pace each other, as the engine sees it.  Times are
    absolute simulated seconds; ``changed`` are job ids."""

    events: int  # fluid events stepped so far
    evaluations: int  # windows simulated so far (0 for a model without windows)

    @property
    def window_s(self) -> float:
        """Simulated seconds the model stepped through."""
        ...

    def start(self, r: RunningJob) -> None:
        """A job was placed at the engine's ``now``."""

    def shift_group(self, job_id: str) -> set[str]:
        """The jobs whose time-shifts the placement of ``job_id`` may set."""
        ...

    def next_finish(self) -> tuple[float, list[str]]:
        """The next finish the model knows of now, and who finishes then."""
        ...

    def advance(self, t: float) -> tuple[float, list[str]]:
        """Progress up to ``t``, or to an earlier time where a job ended: that time and
        the jobs that ended there."""
        ...

    def update(self, changed: set[str]) -> None:
        """Bring the model in line after ``changed`` jobs arrived, finished, moved or
        changed shifts."""

    def done(self, r: RunningJob) -> float:
        """Iterations ``r`` has completed by now."""
        ...

    def current_iteration_s(self, r: RunningJob) -> float:
        """The iteration time (s) ``r`` runs at now, from the model's own state (what
        the defragmenter weighs a move by)."""
        ...

    def stalled(self, r: RunningJob) -> None:
        """``r`` was given a migration stall to sit out."""

    def finish(self, job_id: str) -> None:
        """A job ends now (still among the running)."""

    def excess_s(self) -> dict[str, float]:
        """Seconds of demand over capacity, per link, so far."""
        ...

    def distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Iteration times (s, and over dedicated) the model measured itself, each of
        weight 1, beside those in the jobs' histories."""
        ...


#: name (``options.network``) -> the model's constructor over a simulation
NETWORKS: dict[str, Callable[[ClusterState], NetworkModel]] = {
    "windows": WindowNetwork,
    "continuous": ContinuousNetwork,
    "packet": PacketNetwork,
}
