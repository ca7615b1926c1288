"""The continuous model's per-job bookkeeping of the segment in progress (a mixin of
:class:`~cassini.sim.network.continuous.ContinuousNetwork`): the cycles it reported, its
timeline points and the iteration time a job runs at now."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cassini.sim.network.flowstate import FlowState
    from cassini.sim.state import ClusterState, RunningJob


class Segments:
    """A job's segment runs from its last timeline point (``_mark``) to the next change
    of its network state; ``_sum``/``_n`` are the cycles reported in it, ``_since`` the
    (time s, iterations done, stall s) it began with in the flow state."""

    sim: ClusterState
    flow: FlowState
    uid: dict[str, int]
    job_of_uid: list[str]
    dedicated: list[float]
    _sum: list[float]
    _n: list[int]
    _mark: dict[str, float]
    _since: dict[str, tuple[float, float, float]]

    def register(self, job_id: str, dedicated_s: float) -> int:
        if job_id not in self.uid:
            self.uid[job_id] = len(self.dedicated)
            self.job_of_uid.append(job_id)
            self.dedicated.append(dedicated_s)
            self._sum.append(0.0)
            self._n.append(0)
        return self.uid[job_id]

    def opened(self, job_id: str, stall_s: float) -> None:
        """A job in the flow state begins a segment now (after its path, grid and any
        migration stall of ``stall_s`` seconds were set)."""
        self._since[job_id] = (self.sim.now, self.flow.progress(job_id)[0], stall_s)

    def current_iteration_s(self, r: RunningJob) -> float:
        """The iteration time (s) ``r`` runs at now: its dedicated one outside the flow
        state; in it, the seconds per iteration of its segment in progress (the time
        since the segment began, less a migration stall it began with, over the
        iterations progressed since, counted by position at dedicated pace).  Before any
        progress in the segment: the last segment's mean, or the dedicated time."""
        job_id = r.spec.job_id
        dedicated = r.profile.iteration_time_s
        if job_id not in self.flow or job_id not in self._since:
            return dedicated
        t0, done0, stall = self._since[job_id]
        run = self.sim.now - t0 - stall
        n = self.flow.progress(job_id)[0] - done0
        if run > 0 and n > 1e-9:
            return float(run / n)
        return r.iteration_time_s if math.isfinite(r.iteration_time_s) else dedicated

    def point(self, job_id: str, *, stays: bool = False) -> None:
        """Close the job's timeline segment since its last point with its mean cycle
        time there (the iteration time it ran at).  A first segment in which no cycle
        ended goes on while the job ``stays`` in the flow state (its timeline starts at
        its start); when it leaves the state, it is closed at
        :meth:`current_iteration_s`.  After a first point, a segment without a cycle
        is the last point's part."""
        sim = self.sim
        r = sim.running[job_id]
        u = self.uid[job_id]
        mark = self._mark.get(job_id, r.start_s)
        if self._n[u]:
            mean = self._sum[u] / self._n[u]
            r.iteration_time_s = mean
            r.timeline.append((mark, mean))
            self._sum[u], self._n[u] = 0.0, 0
        elif not r.timeline:
            if stays or not sim.now > mark:
                return  # the segment goes on (or nothing ran in it yet)
            r.timeline.append((mark, float(self.current_iteration_s(r))))
        self._mark[job_id] = sim.now
