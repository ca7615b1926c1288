"""The continuous model's steps handed to the report's recorder as windows (a mixin of
:class:`~cassini.sim.network.continuous.ContinuousNetwork`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cassini.sim.network.flows import FlowJob

if TYPE_CHECKING:
    from cassini.sim.network.flowstate import FlowState
    from cassini.sim.state import ClusterState


@dataclass(frozen=True)
class _Measured:
    """What a recorder reads of a step: excess demand seconds per link."""

    excess_s: dict[str, float]


class StepWindows:
    """Keeps, per link, the most excess demand of one step so far (``_best``)."""

    sim: ClusterState
    flow: FlowState
    _best: np.ndarray

    def _before_step(self) -> tuple | None:
        """With a recorder: the state before a step (time, excess so far, positions)."""
        sim = self.sim
        if sim.recorder is None:
            return None
        return self.flow.t, self.flow.link_state[4].copy(), self.flow.positions()

    def _record(self, before: tuple) -> None:
        """Hand the recorder the step just taken as a window when some link had more
        excess demand in it than in any step before (the report replays, per link, the
        window where it was most congested).  Each job starts the window at its position
        at the step's start: its current cycle is replayed from the next one's start
        (the window model cannot start a job mid-cycle); the replay covers at most the
        window model's horizon."""
        sim = self.sim
        t0, excess0, pos = before
        delta = self.flow.link_state[4] - excess0
        better = delta > self._best * (1 + 1e-9)
        if not better.any() or self.flow.t <= t0:
            return
        self._best = np.maximum(self._best, delta)
        flows = []
        for job_id, i in self.flow.slot_of.items():
            r = sim.running.get(job_id)
            if r is None or not math.isfinite(pos[i]):
                continue
            period = r.profile.iteration_time_s
            grid = float(self.flow.floats[3][i])
            links = [self.flow.link_ids[x] for x in self.flow.links2d[i] if x >= 0]
            flows.append(
                FlowJob(
                    job_id,
                    r.profile,
                    tuple(links),
                    (period - pos[i]) % period,
                    grid if math.isfinite(grid) else None,
                    int(self.flow.ints[6][i]),
                    float(self.flow.floats[12][i]),
                )
            )
        if not flows:
            return
        longest = max(f.profile.iteration_time_s for f in flows)
        horizon = min(self.flow.t - t0, sim.window.measure_periods * longest + longest)
        excess = {self.flow.link_ids[x]: float(delta[x]) for x in np.flatnonzero(delta > 0)}
        mltcp = sim.options.mltcp if sim.scheduler.mltcp else None
        progress = sim.scheduler.sharing.progress_weight()
        sim.recorder.window(
            t0, tuple(flows), horizon, 0.0, _Measured(excess), mltcp, progress=progress
        )
