"""The continuous model's flow state of the jobs that share links that can congest, stepped
through simulated time once and changed in place as jobs come, go, move or change pacing."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from cassini.sim.network import rates
from cassini.sim.network.flows import Cycle
from cassini.sim.network.flowstep import (
    _IDLE,
    FINISHED,
    SLOW,
    Advanced,
    _advance,
    cycle_position,
    link_jobs,
    position_of,
)
from cassini.sim.network.jitloop import MLTCP_STEPS
from cassini.sim.network.rates import _GAP, _SEND, _WAIT
from cassini.sim.parts.sharing import progress_table
from cassini.sim.parts.timing import AGENT_TOLERANCE
from mltcp.policy import MltcpParams

AVAILABLE = rates.AVAILABLE


class FlowState:
    """The continuous network state of the jobs that share links that can congest:
    ``links`` capacity per link (bits/s); ``mltcp`` share full links by MLTCP's weights
    (None: max-min), times ``progress`` (a flow's weight factor by the fraction of its
    iteration's bytes sent); ``classes`` whether jobs carry strict priority classes; ``weighted``
    whether jobs' share weights may differ from 1 (:meth:`add`'s ``share``); the rest as
    in ``docs/internals.md`` (the continuous model's flow state)."""

    def __init__(
        self,
        links: dict[str, float],
        *,
        mltcp: MltcpParams | None = None,
        classes: bool = False,
        weighted: bool = False,
        tolerance: float = AGENT_TOLERANCE,
        mltcp_steps: int = MLTCP_STEPS,
        mltcp_every_event: bool = False,
        max_events: int = 1_000_000,
        progress: Callable[[float], float] | None = None,
    ) -> None:
        if not AVAILABLE:
            raise RuntimeError("the continuous network model needs numba (the [sim] extra)")
        self.link_ids = list(links)
        self.index = {link: x for x, link in enumerate(self.link_ids)}
        self.caps = np.array([links[x] for x in self.link_ids], float)
        n_links = len(self.link_ids)
        self.link_state = (
            np.zeros(n_links),
            np.zeros(n_links, np.int64),
            np.zeros(n_links, np.bool_),
            np.zeros(n_links),
            np.zeros(n_links),
        )
        self.rule = rates.kernel_rule(progress_table(mltcp, progress), classes or weighted)
        self.tolerance = tolerance
        self.mltcp_steps = float(mltcp_steps)
        self.mltcp_every_event = mltcp_every_event
        self.max_events = max_events
        self.t = 0.0
        self.events = 0
        self.slot_of: dict[str, int] = {}
        self.job_of: dict[int, str] = {}
        self.cycles: dict[str, Cycle] = {}
        self.base: dict[str, float] = {}  # iterations done before the slot's count began
        self._free: list[int] = []
        self._n = 0  # slots in use or freed (high-water mark)
        self._alloc(64, 1, 1)
        self._dirty = self._rebuild = True

    # -- storage --------------------------------------------------------------------------
    def _alloc(self, n: int, width: int, path: int) -> None:
        """(Re)allocate room for ``n`` slots, ``width`` phases, paths of ``path`` links,
        keeping what is there."""
        old = getattr(self, "ints", None)
        ints = tuple(np.zeros(n, np.int64) for _ in range(7))
        ints[0][:] = _IDLE
        floats = tuple(np.zeros(n) for _ in range(13))
        floats[4][:] = np.nan  # start_of
        floats[10][:] = np.nan  # last_busy
        floats[11][:] = -np.inf  # reweight: remaining bits at which MLTCP's F is due
        floats[3][:] = np.nan  # grid
        floats[7][:] = 1.0  # weight
        floats[12][:] = 1.0  # share: the weight under the sharing rules, before MLTCP's F
        tables = (np.zeros((n, width)), np.ones((n, width)), np.zeros((n, width)))
        sent_before = np.zeros((n, width))
        links2d = np.full((n, path), -1, np.int64)
        uid = np.full(n, -1, np.int64)
        if old is not None:
            m = len(old[0])
            for a, b in zip(ints, self.ints, strict=True):
                a[:m] = b
            for a, b in zip(floats, self.floats, strict=True):
                a[:m] = b
            w = self.gaps.shape[1]
            for a, b in zip(tables, (self.gaps, self.bits, self.peak), strict=True):
                a[:m, :w] = b
            sent_before[:m, :w] = self.sent_before
            links2d[:m, : self.links2d.shape[1]] = self.links2d
            uid[:m] = self.uid
        self.ints, self.floats = ints, floats
        self.gaps, self.bits, self.peak = tables
        self.sent_before = sent_before
        self.links2d = links2d
        self.uid = uid

    def _slot(self, cycle: Cycle, n_links: int) -> int:
        n, width = len(self.ints[0]), self.gaps.shape[1]
        path = self.links2d.shape[1]
        if not self._free and self._n >= n or len(cycle.bits) > width or n_links > path:
            self._alloc(
                max(n, 2 * self._n if self._n >= n else n),
                max(width, len(cycle.bits)),
                max(path, n_links),
            )
        if self._free:
            return self._free.pop()
        self._n += 1
        return self._n - 1

    # -- changes from outside -------------------------------------------------------------
    def __contains__(self, job_id: str) -> bool:
        return job_id in self.slot_of

    def add(
        self,
        job_id: str,
        cycle: Cycle,
        links: list[str],
        *,
        done: float,
        iterations: int,
        pos_s: float,
        stall_s: float = 0.0,
        grid_s: float | None = None,
        anchor_s: float = 0.0,
        priority: int = 0,
        share: float = 1.0,
        uid: int = -1,
    ) -> None:
        """Take a job in at the state's time: ``done`` iterations behind it, ``pos_s``
        seconds into its current cycle at dedicated pace (or stalled ``stall_s`` seconds
        first, then from a cycle's start); held to slots ``anchor_s + k * grid_s``
        (absolute seconds) unless ``grid_s`` is None; ``share`` is its weight in weighted
        sharing (> 0; the state needs ``weighted`` for one other than 1); ``uid`` tags its
        cycles in :class:`Advanced`."""
        if not cycle.bits:
            raise ValueError(f"job {job_id}: a job without communication has no flow")
        if share != 1.0 and not self.rule[2]:
            raise ValueError(f"job {job_id}: share {share} in a state made without weighted")
        i = self._slot(cycle, len(links))
        mode, phase, n_phases, slot, count, target, classes = self.ints
        until, remaining, anchor, grid, start_of, demand, got, weight, per_it, tail = self.floats[
            :10
        ]
        w = len(cycle.bits)
        self.gaps[i, :] = 0.0
        self.bits[i, :] = 1.0
        self.peak[i, :] = 0.0
        self.sent_before[i, :] = 0.0
        self.gaps[i, :w] = cycle.gaps_s
        self.bits[i, :w] = cycle.bits
        self.peak[i, :w] = cycle.rates_bps
        self.sent_before[i, :w] = np.concatenate([[0.0], np.cumsum(cycle.bits)[:-1]])
        n_phases[i] = w
        per_it[i] = float(sum(cycle.bits))
        self.links2d[i, :] = -1
        self.links2d[i, : len(links)] = [self.index[x] for x in links]
        classes[i] = priority
        count[i] = 0
        period = cycle.iteration_time_s
        pos_s %= period
        if stall_s > 0:
            m, p, rest = _WAIT, 0, 0.0
            until[i] = self.t + stall_s
            start_of[i] = np.nan
            pos_s = 0.0
        else:
            m, p, rest = cycle_position(cycle, pos_s)
            start_of[i] = self.t - pos_s
        base = done - pos_s / period
        # cycles end after each iteration's last phase: the job ends with the compute
        # after its last cycle
        target[i] = max(1, math.ceil(iterations - base - 1e-9) - 1)
        tail[i] = max(0.0, (iterations - base - target[i]) * period)
        self.uid[i] = uid
        mode[i], phase[i], remaining[i] = m, p, rest
        self.floats[10][i] = np.nan  # no held cycle waiting to be reported
        self.floats[11][i] = -np.inf  # MLTCP's weight: computed when it first sends
        demand[i] = got[i] = 0.0
        weight[i] = self.floats[12][i] = share
        self.slot_of[job_id], self.job_of[i] = i, job_id
        self.cycles[job_id] = cycle
        self.base[job_id] = base
        self.set_grid(job_id, grid_s, anchor_s)
        if m == _SEND:
            self._load(i, +cycle.rates_bps[p])
        self._dirty = self._rebuild = True

    def _load(self, i: int, d: float) -> None:
        """Put (``d`` > 0) or take the sending slot ``i``'s demand on its links."""
        demand, got = self.floats[5], self.floats[6]
        load, members = self.link_state[0], self.link_state[1]
        for x in self.links2d[i]:
            if x < 0:
                break
            members[x] += 1 if d > 0 else -1
            load[x] = load[x] + d if members[x] > 0 else 0.0
        demand[i] = got[i] = d if d > 0 else 0.0

    def progress(self, job_id: str) -> tuple[float, float]:
        """``(done, position)``: iterations done (the current cycle counted by its
        position at dedicated pace) and seconds into the current cycle."""
        i = self.slot_of[job_id]
        cycle = self.cycles[job_id]
        pos = position_of(cycle, self.ints[0][i], self.ints[1][i], self.floats[1][i])
        return self.base[job_id] + self.ints[4][i] + pos / cycle.iteration_time_s, pos

    def remove(self, job_id: str) -> tuple[float, float, float]:
        """Take a job out; returns ``(done, position, stall)`` — :meth:`progress`'s
        figures and the seconds of a migration stall still to sit out — for it to go on
        at dedicated pace."""
        i = self.slot_of[job_id]
        done, pos = self.progress(job_id)
        stall = 0.0
        if self.ints[0][i] == _WAIT and self.floats[4][i] != self.floats[4][i]:
            stall = max(0.0, self.floats[0][i] - self.t)  # stalled, not waiting for a slot
        if self.ints[0][i] == _SEND:
            self._load(i, -self.floats[5][i])
        self.ints[0][i] = _IDLE
        self._free_slot(job_id)
        return done, pos, stall

    def _free_slot(self, job_id: str) -> None:
        """Forget an idle job (taken out, or ended its last cycle): its slot is free."""
        i = self.slot_of.pop(job_id)
        del self.job_of[i], self.cycles[job_id], self.base[job_id]
        self.links2d[i, :] = -1
        self.floats[4][i] = self.floats[10][i] = np.nan
        self._free.append(i)
        self._dirty = self._rebuild = True

    def set_links(self, job_id: str, links: list[str]) -> None:
        i = self.slot_of[job_id]
        new = [self.index[x] for x in links]
        old = [int(x) for x in self.links2d[i] if x >= 0]
        if new == old:
            return
        sending = self.ints[0][i] == _SEND
        d = self.floats[5][i]
        if sending:
            self._load(i, -d)
        if len(new) > self.links2d.shape[1]:
            self._alloc(len(self.ints[0]), self.gaps.shape[1], len(new))
        self.links2d[i, :] = -1
        self.links2d[i, : len(new)] = new
        if sending:
            self._load(i, d)
        self._dirty = self._rebuild = True

    def set_grid(self, job_id: str, grid_s: float | None, anchor_s: float = 0.0) -> None:
        """Hold a job to slots ``anchor_s + k * grid_s`` (None: free-running); its slot
        count starts from the slot its current cycle began in."""
        i = self.slot_of[job_id]
        grid, anchor, start_of = self.floats[3], self.floats[2], self.floats[4]
        if grid_s is None:
            grid[i] = np.nan
            return
        grid[i], anchor[i] = grid_s, anchor_s
        if start_of[i] == start_of[i]:
            began = start_of[i]
        else:  # stalled or waiting: its next cycle begins when the wait ends
            began = self.floats[0][i] if self.ints[0][i] == _WAIT else self.t
        self.ints[3][i] = round((began - anchor_s) / grid_s)
        self._dirty = True

    def held(self, job_id: str) -> bool:
        g = self.floats[3][self.slot_of[job_id]]
        return g == g

    def set_class(self, job_id: str, priority: int) -> None:
        i = self.slot_of[job_id]
        if self.ints[6][i] != priority:
            self.ints[6][i] = priority
            self._dirty = True

    def stall(self, job_id: str, stall_s: float) -> None:
        """The job stops (a migration) for ``stall_s`` seconds, then starts a new cycle;
        the cycle it was in is lost."""
        i = self.slot_of[job_id]
        if self.ints[0][i] == _SEND:
            self._load(i, -self.floats[5][i])
        self.ints[0][i] = _WAIT
        self.ints[1][i] = 0
        self.floats[0][i] = self.t + stall_s
        self.floats[4][i] = self.floats[10][i] = np.nan
        self._dirty = True

    # -- stepping -------------------------------------------------------------------------
    def advance(self, t_goal: float) -> Advanced:
        """Step to ``t_goal`` (absolute seconds; may be inf when some job will finish),
        stopping early where a job ends its last cycle (it leaves the state), a held
        job overran its period (``slow``) or the report buffer fills (call again)."""
        if t_goal < self.t:
            raise ValueError(f"advance to {t_goal} s: the state is at {self.t} s")
        if not self.slot_of:
            self.t = t_goal if math.isfinite(t_goal) else self.t
            empty = np.zeros(0)
            return Advanced(self.t, (), np.zeros(0, np.int64), empty, empty, 0)
        if self._rebuild:  # (True from the start)
            self._csr = link_jobs(self.links2d, len(self.caps))
            self._rebuild = False
        room = max(4096, 4 * len(self.ints[0]))
        out_job = np.zeros(room, np.int64)
        out_time = np.zeros(room)
        out_busy = np.zeros(room)
        tables = (self.gaps, self.bits, self.peak, self.sent_before, self.links2d, self.caps)
        knobs = (
            self.mltcp_steps,
            self.mltcp_every_event,
            self.tolerance,
            self.max_events,
            self._dirty,
        )
        out = (out_job, out_time, out_busy)
        t, events, why, written, pending = _advance(
            self.t, float(t_goal), self.ints, self.floats, tables, self.link_state, self._csr,
            self.rule, knobs, out, self._n
        )  # fmt: skip
        self._dirty = bool(pending)
        self.t = float(t)
        self.events += int(events)
        uid = self.uid[out_job[:written]]
        finished: list[str] = []
        if why == FINISHED:
            mode = self.ints[0]
            finished = [j for j, i in self.slot_of.items() if mode[i] == _IDLE]
            for j in finished:
                self._free_slot(j)
            self._dirty = self._rebuild = True
        return Advanced(
            self.t,
            tuple(sorted(finished)),
            uid,
            out_time[:written].copy(),
            out_busy[:written].copy(),
            int(events),
            why == SLOW,
        )

    def positions(self) -> np.ndarray:
        """Seconds into its current cycle at dedicated pace, per slot (what
        :func:`position_of` gives, for every slot at once; NaN for free slots)."""
        mode, phase = self.ints[0], self.ints[1]
        remaining = self.floats[1]
        with np.errstate(divide="ignore", invalid="ignore"):
            send = np.where(self.peak > 0, self.bits / self.peak, 0.0)
        starts = np.cumsum(self.gaps + send, axis=1) - (self.gaps + send)
        rows = np.arange(len(mode))
        gap = self.gaps[rows, phase]
        at = starts[rows, phase]
        pos = np.where(
            mode == _GAP,
            at + np.maximum(0.0, gap - remaining),
            at
            + gap
            + np.maximum(0.0, self.bits[rows, phase] - remaining)
            / np.where(self.peak[rows, phase] > 0, self.peak[rows, phase], 1.0),
        )
        pos = np.where(mode == _WAIT, 0.0, pos)
        return np.where(mode == _IDLE, np.nan, pos)

    def excess_s(self) -> dict[str, float]:
        """Seconds each link spent with summed demand above capacity, so far."""
        excess = self.link_state[4]
        return {self.link_ids[x]: float(excess[x]) for x in np.flatnonzero(excess > 0)}


def load_kernels(cycles: list[Cycle]) -> None:
    """Run ``cycles`` on one link so numba loads the kernels (``kernels.load_kernels``),
    by the methods as defined here: a wrapper put on the class later sees no such state."""
    state = object.__new__(FlowState)
    _OWN[0](state, {"link": 1e10})
    for k, cycle in enumerate(cycles):
        _OWN[1](state, f"warm-{k}", cycle, ["link"], done=0.0, iterations=2, pos_s=0.0)
    _OWN[2](state, math.inf)


_OWN = (FlowState.__init__, FlowState.add, FlowState.advance)
