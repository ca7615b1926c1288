"""The window model's event loop in plain Python floats (the same steps and results as
:mod:`cassini.sim.network.jitloop`, up to float rounding), for ``on_step`` observers and
machines without numba.  Pure logic: no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from cassini.errors import InputError
from cassini.sim.network.rates import _EPS, _GAP, _SEND, _WAIT, max_min_links, water_fill
from cassini.sim.parts.sharing import mltcp_weight, shared_rates
from mltcp.policy import MltcpParams

#: under MLTCP sharing, rates are re-solved at least this many times per iteration's
#: bytes of every flow on a full link (F changes as the bytes go out)
MLTCP_STEPS = 20


@dataclass
class LoopResult:
    """Raw output of :func:`run_events` (per job / per link lists, indices as given)."""

    times: list[list[float]]
    busy: list[list[float]]
    excess: list[float]
    carried: list[float]
    events: int


def run_events(
    cycles: Sequence,
    links_of: Sequence[Sequence[int]],
    caps: Sequence[float],
    anchors: Sequence[float],
    grids: Sequence[float | None],
    classes: Sequence[int],
    *,
    horizon_s: float,
    warmup_s: float,
    tolerance: float,
    max_events: int,
    mltcp: MltcpParams | None,
    on_step: Callable[[float, float, np.ndarray, np.ndarray], None] | None,
) -> LoopResult:
    """Run the fluid model (see :func:`cassini.sim.network.simulate`) over jobs given as
    unrolled ``cycles``, link indices ``links_of``, link capacities ``caps`` (bits/s),
    ``anchors`` (s), slot-grid periods ``grids`` (s, None = free-running) and priority
    ``classes``."""
    loop = _Loop(cycles, links_of, caps, anchors, grids, classes, warmup_s, tolerance, mltcp)
    return loop.run(horizon_s, max_events, on_step)


class _Loop:
    """The loop's state: per job its mode, phase and pacing, per link its senders and
    load, and the rates; each step of an event is a method."""

    def __init__(
        self,
        cycles: Sequence,
        links_of: Sequence[Sequence[int]],
        caps: Sequence[float],
        anchors: Sequence[float],
        grids: Sequence[float | None],
        classes: Sequence[int],
        warmup_s: float,
        tolerance: float,
        mltcp: MltcpParams | None,
    ) -> None:
        n, n_links = len(cycles), len(caps)
        self.links_of, self.caps, self.classes = links_of, caps, classes
        self.anchors, self.grids = anchors, grids
        self.warmup_s, self.tolerance, self.mltcp = warmup_s, tolerance, mltcp
        self.gaps = [list(c.gaps_s) for c in cycles]
        self.n_phases = [len(c.bits) for c in cycles]
        self.bits = [list(c.bits) if c.bits else [1.0] for c in cycles]
        self.peak = [list(c.rates_bps) if c.bits else [0.0] for c in cycles]
        self.sent_before = []
        for c in cycles:
            acc, row = 0.0, []
            for b in c.bits:
                row.append(acc)
                acc += b
            self.sent_before.append(row or [0.0])
        self.per_iteration = [float(sum(c.bits)) for c in cycles]
        self.general = mltcp is not None or len(set(classes)) > 1
        self.over_cap = [c * (1 + 1e-9) for c in caps]
        self.mode = [_WAIT] * n
        self.until = [max(0.0, a) for a in anchors]
        self.remaining = [0.0] * n
        self.phase = [0] * n
        self.slot = [0] * n
        self.start_of = [math.nan] * n
        self.times: list[list[float]] = [[] for _ in range(n)]
        self.busy: list[list[float]] = [[] for _ in range(n)]
        self.excess = [0.0] * n_links
        self.seen: dict[tuple, list[float]] = {}
        # rates, kept per job and per link; without MLTCP they change only when a flow
        # starts or stops, and only within the flows it meets through full links
        self.members: list[set[int]] = [set() for _ in range(n_links)]  # senders per link
        self.demand = [0.0] * n  # bits/s wanted by each sending job
        self.got = [0.0] * n  # bits/s each sending job gets
        self.load = [0.0] * n_links  # bits/s wanted on each link
        self.sent = [0.0] * n  # bits each job sent inside the window
        self.over: set[int] = set()  # links whose demand exceeds their capacity
        self.sending: set[int] = set()
        self.changed: list[int] = []  # jobs that started or stopped since the last solve

    def begin_iteration(self, i: int, now: float) -> None:
        if self.start_of[i] >= self.warmup_s:
            self.times[i].append(now - self.start_of[i])
        self.start_of[i] = now
        self.mode[i], self.phase[i], self.remaining[i] = _GAP, 0, self.gaps[i][0]

    def end_iteration(self, i: int, now: float) -> None:
        if self.start_of[i] >= self.warmup_s:
            self.busy[i].append(now - self.start_of[i])
        grid = self.grids[i]
        if grid is None:
            self.begin_iteration(i, now)
            return
        anchors, slot = self.anchors, self.slot
        slot[i] += 1
        due = anchors[i] + slot[i] * grid
        if now > due + self.tolerance * grid:  # too late: re-align to the next slot
            slot[i] = math.ceil((now - anchors[i]) / grid - 1e-9)
            due = anchors[i] + slot[i] * grid
        if due > now + _EPS:
            self.mode[i], self.until[i] = _WAIT, due
        else:
            self.begin_iteration(i, now)

    def start_sending(self, i: int) -> None:
        phase = self.phase[i]
        self.mode[i], self.remaining[i] = _SEND, self.bits[i][phase]
        self.demand[i] = self.got[i] = d = self.peak[i][phase]
        for link in self.links_of[i]:
            self.members[link].add(i)
            self.load[link] += d
        self.sending.add(i)
        self.changed.append(i)

    def stop_sending(self, i: int) -> None:
        d = self.demand[i]
        self.got[i] = self.demand[i] = 0.0
        load, members = self.load, self.members
        for link in self.links_of[i]:
            members[link].discard(i)
            load[link] = load[link] - d if members[link] else 0.0
        self.sending.discard(i)
        self.changed.append(i)

    def solve(self, flows: list[int], links: list[int], weights: list[float] | None) -> None:
        """Rates of ``flows`` (one connected set) meeting on the full ``links``."""
        col = {link: c for c, link in enumerate(links)}
        paths = [[col[x] for x in self.links_of[i] if x in col] for i in flows]
        cls = [self.classes[i] for i in flows]
        dem = [self.demand[i] for i in flows]
        caps = self.caps
        general = self.general
        if weights is not None:
            fair = shared_rates(dem, paths, [caps[x] for x in links], weights=weights, classes=cls)
        else:
            key = tuple((i, self.phase[i]) for i in flows)
            fair = self.seen.get(key)
            if fair is None:
                if not general and len(links) == 1:
                    fair = water_fill(dem, caps[links[0]])
                elif not general:
                    fair = max_min_links(dem, paths, [caps[x] for x in links])
                else:
                    fair = shared_rates(dem, paths, [caps[x] for x in links], classes=cls)
                self.seen[key] = fair
        got = self.got
        for i, r in zip(flows, fair, strict=True):
            got[i] = max(r, _EPS) if general else r  # a starved class: no 0-division

    def components(self, start: set[int]) -> list[tuple[list[int], list[int]]]:
        """The sending jobs of ``start`` that cross a full link, split into sets
        connected through full links, each with its full links (sorted)."""
        over, links_of, members = self.over, self.links_of, self.members
        out, done = [], set()
        for s in sorted(start):
            if s in done or not any(x in over for x in links_of[s]):
                continue
            flows, links, todo = [], set(), [s]
            done.add(s)
            while todo:
                i = todo.pop()
                flows.append(i)
                for x in links_of[i]:
                    if x in over and x not in links:
                        links.add(x)
                        for j in members[x]:
                            if j not in done:
                                done.add(j)
                                todo.append(j)
            out.append((sorted(flows), sorted(links)))
        return out

    def resolve(self) -> None:
        """Bring loads, full links and rates up to date after ``changed``."""
        over, links_of, members = self.over, self.links_of, self.members
        touched = {x for i in self.changed for x in links_of[i]}
        reach: set[int] = set()  # links a rate change can travel through
        for x in touched:
            if x in over:
                reach.add(x)
            if self.load[x] > self.over_cap[x]:
                over.add(x)
                reach.add(x)
            else:
                over.discard(x)
        hit = {i for i in self.changed if self.mode[i] == _SEND}
        todo = list(reach)
        while todo:
            x = todo.pop()
            for i in members[x]:
                if i not in hit:
                    hit.add(i)
                    for y in links_of[i]:
                        if y in over and y not in reach:
                            reach.add(y)
                            todo.append(y)
        for i in hit:
            self.got[i] = self.demand[i]
        for flows, links in self.components(hit):
            self.solve(flows, links, None)
        self.changed.clear()

    def resolve_mltcp(self) -> float:
        """Every rate under MLTCP weights (they change as bytes go out); the longest
        step (s) before they must be solved again."""
        if self.changed:
            touched = {x for i in self.changed for x in self.links_of[i]}
            for x in touched:
                if self.load[x] > self.over_cap[x]:
                    self.over.add(x)
                else:
                    self.over.discard(x)
            self.changed.clear()
        step = math.inf
        got, phase = self.got, self.phase
        for i in self.sending:
            got[i] = self.demand[i]
        for flows, links in self.components(self.sending):
            weights = [
                mltcp_weight(
                    self.sent_before[i][phase[i]] + self.bits[i][phase[i]] - self.remaining[i],
                    self.per_iteration[i],
                    self.mltcp,
                )
                for i in flows
            ]
            self.solve(flows, links, weights)
            for i in flows:
                s = self.per_iteration[i] / MLTCP_STEPS / got[i]
                if s < step:
                    step = s
        return step

    def next_dt(self, t: float, horizon_s: float, step: float) -> float:
        """Seconds to the next event (a phase or gap ending, a slot reached, ``step``
        or the horizon)."""
        mode, remaining, got, until = self.mode, self.remaining, self.got, self.until
        dt = horizon_s - t
        for i in range(len(mode)):
            m = mode[i]
            if m == _SEND:
                x = remaining[i] / got[i]
            elif m == _WAIT:
                x = until[i] - t
            else:
                x = remaining[i]
            if x < dt:
                dt = x
        if step < dt:
            dt = step
        if dt < 0.0:
            dt = 0.0
        return dt

    def account(self, t: float, dt: float, horizon_s: float) -> None:
        """Count the part of ``[t, t + dt)`` inside the window: seconds over capacity
        per full link, bits sent per sending job."""
        lo, hi = max(t, self.warmup_s), min(t + dt, horizon_s)
        if hi > lo:
            w = hi - lo
            for x in self.over:
                self.excess[x] += w
            sent, got = self.sent, self.got
            for i in self.sending:
                sent[i] += got[i] * w

    def step_jobs(self, t: float, dt: float) -> None:
        """Move every job on by ``dt`` to ``t``: gaps and phases run down, phases start
        and stop, iterations end and begin."""
        mode, remaining, got, bits = self.mode, self.remaining, self.got, self.bits
        phase, n_phases = self.phase, self.n_phases
        for i in range(len(mode)):
            m = mode[i]
            if m == _WAIT:
                if self.until[i] <= t + _EPS:
                    self.begin_iteration(i, t)
            elif m == _GAP:
                remaining[i] -= dt
                if remaining[i] <= _EPS:
                    if n_phases[i]:
                        self.start_sending(i)
                    else:
                        self.end_iteration(i, t)
            else:
                remaining[i] -= got[i] * dt
                if remaining[i] <= 1e-9 * bits[i][phase[i]]:
                    self.stop_sending(i)
                    if phase[i] + 1 < n_phases[i]:
                        phase[i] += 1
                        mode[i], remaining[i] = _GAP, self.gaps[i][phase[i]]
                    else:
                        self.end_iteration(i, t)

    def run(
        self,
        horizon_s: float,
        max_events: int,
        on_step: Callable[[float, float, np.ndarray, np.ndarray], None] | None,
    ) -> LoopResult:
        """Step events until ``horizon_s``; the jobs' iteration and busy times, each
        link's excess seconds and carried bits."""
        t, events = 0.0, 0
        while t < horizon_s:
            events += 1
            if events > max_events:
                raise InputError("horizon_s", f"more than {max_events} events; shorten the window")
            step = math.inf
            if self.mltcp is not None:
                step = self.resolve_mltcp()
            elif self.changed:
                self.resolve()
            dt = self.next_dt(t, horizon_s, step)
            if on_step is not None and dt > 0:
                active = [i for i in range(len(self.mode)) if self.mode[i] == _SEND]
                rates = np.array([self.got[i] for i in active], float)
                on_step(t, dt, np.array(active, int), rates)
            if self.sending:
                self.account(t, dt, horizon_s)
            t += dt
            if t >= horizon_s:
                break
            self.step_jobs(t, dt)
        carried = [0.0] * len(self.caps)
        for i, links in enumerate(self.links_of):
            for x in links:
                carried[x] += self.sent[i]
        return LoopResult(self.times, self.busy, self.excess, carried, events)
