"""The network model's event loop in plain Python floats.

The groups the simulator hands :func:`cassini.sim.network.simulate` are small (a few
jobs on a few links), so numpy calls on 2-4-element arrays cost far more than the
arithmetic; this loop does the same steps as the reference loop
(``simulate_reference`` (``tests/helpers/sim_oracle.py``)) on lists, giving the same results up
to float rounding.  It serves observers (``on_step``, for reports) and machines without
numba; :mod:`cassini.sim.network.jitloop` is the compiled loop the simulator runs otherwise.
Pure logic: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from cassini.errors import InputError
from cassini.sim.parts.sharing import mltcp_weight, shared_rates
from mltcp.policy import MltcpParams

_EPS = 1e-12
_WAIT, _GAP, _SEND = 0, 1, 2
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


def water_fill(demand: Sequence[float], capacity: float) -> list[float]:
    """Max-min fair rates (bits/s) of flows sharing one link of ``capacity`` bits/s:
    everyone gets min(demand, level), the level filling the link exactly."""
    d = sorted(demand)
    k = len(d)
    before = 0.0
    for i, x in enumerate(d):
        if before + x * (k - i) > capacity:
            level = (capacity - before) / (k - i)
            return [min(x, level) for x in demand]
        before += x
    return [float(x) for x in demand]


def max_min_links(
    demand: Sequence[float], paths: Sequence[Sequence[int]], capacity: Sequence[float]
) -> list[float]:
    """Max-min fair rates (bits/s) of flows capped at their ``demand`` crossing the links
    ``paths`` (indices into ``capacity``, bits/s): progressive filling as
    :func:`cassini.sim.parts.sharing.shared_rates` does it unweighted, each round
    finding the lowest level from the links' fair shares and the smallest open demand
    (the same rates up to float rounding, fewer operations per round)."""
    n = len(demand)
    rem = list(capacity)
    users = [0] * len(rem)
    on: list[list[int]] = [[] for _ in rem]
    for f, p in enumerate(paths):
        for x in p:
            users[x] += 1
            on[x].append(f)
    links = [x for x in range(len(rem)) if users[x]]
    order = sorted(range(n), key=demand.__getitem__)
    rate = [0.0] * n
    fixed = [False] * n
    ptr, left = 0, n
    while left:
        low = math.inf
        for x in links:
            if users[x]:
                share = rem[x] / users[x]
                if share < low:
                    low = share
        while fixed[order[ptr]]:
            ptr += 1
        if demand[order[ptr]] < low:
            low = demand[order[ptr]]
        limit = low * (1 + 1e-9) + _EPS
        fix = []
        for x in links:
            if users[x] and rem[x] / users[x] <= limit:
                fix.extend(f for f in on[x] if not fixed[f])
        for f in order[ptr:]:
            if demand[f] > limit:
                break
            fix.append(f)
        for f in fix:
            if fixed[f]:
                continue
            fixed[f] = True
            rate[f] = low
            left -= 1
            for x in paths[f]:
                r = rem[x] - low
                rem[x] = r if r > 0.0 else 0.0
                users[x] -= 1
    return rate


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
    n, n_links = len(cycles), len(caps)
    gaps = [list(c.gaps_s) for c in cycles]
    n_phases = [len(c.bits) for c in cycles]
    bits = [list(c.bits) if c.bits else [1.0] for c in cycles]
    peak = [list(c.rates_bps) if c.bits else [0.0] for c in cycles]
    sent_before = []
    for c in cycles:
        acc, row = 0.0, []
        for b in c.bits:
            row.append(acc)
            acc += b
        sent_before.append(row or [0.0])
    per_iteration = [float(sum(c.bits)) for c in cycles]
    general = mltcp is not None or len(set(classes)) > 1
    over_cap = [c * (1 + 1e-9) for c in caps]

    mode = [_WAIT] * n
    until = [max(0.0, a) for a in anchors]
    remaining = [0.0] * n
    phase = [0] * n
    slot = [0] * n
    start_of = [math.nan] * n
    times: list[list[float]] = [[] for _ in range(n)]
    busy: list[list[float]] = [[] for _ in range(n)]
    excess = [0.0] * n_links
    carried = [0.0] * n_links
    seen: dict[tuple, list[float]] = {}

    def begin_iteration(i: int, now: float) -> None:
        if start_of[i] >= warmup_s:
            times[i].append(now - start_of[i])
        start_of[i] = now
        mode[i], phase[i], remaining[i] = _GAP, 0, gaps[i][0]

    def end_iteration(i: int, now: float) -> None:
        if start_of[i] >= warmup_s:
            busy[i].append(now - start_of[i])
        grid = grids[i]
        if grid is None:
            begin_iteration(i, now)
            return
        slot[i] += 1
        due = anchors[i] + slot[i] * grid
        if now > due + tolerance * grid:  # too late: re-align to the next slot
            slot[i] = math.ceil((now - anchors[i]) / grid - 1e-9)
            due = anchors[i] + slot[i] * grid
        if due > now + _EPS:
            mode[i], until[i] = _WAIT, due
        else:
            begin_iteration(i, now)

    # rates, kept per job and per link; without MLTCP they change only when a flow
    # starts or stops, and only within the flows it meets through full links
    members: list[set[int]] = [set() for _ in range(n_links)]  # sending jobs per link
    demand = [0.0] * n  # bits/s wanted by each sending job
    got = [0.0] * n  # bits/s each sending job gets
    load = [0.0] * n_links  # bits/s wanted on each link
    sent = [0.0] * n  # bits each job sent inside the window (carried bits add these up)
    over: set[int] = set()  # links whose demand exceeds their capacity
    sending: set[int] = set()
    changed: list[int] = []  # jobs that started or stopped sending since the last solve

    def start_sending(i: int) -> None:
        mode[i], remaining[i] = _SEND, bits[i][phase[i]]
        demand[i] = got[i] = d = peak[i][phase[i]]
        for link in links_of[i]:
            members[link].add(i)
            load[link] += d
        sending.add(i)
        changed.append(i)

    def stop_sending(i: int) -> None:
        d = demand[i]
        got[i] = demand[i] = 0.0
        for link in links_of[i]:
            members[link].discard(i)
            load[link] = load[link] - d if members[link] else 0.0
        sending.discard(i)
        changed.append(i)

    def solve(flows: list[int], links: list[int], weights: list[float] | None) -> None:
        """Rates of ``flows`` (one connected set) meeting on the full ``links``."""
        col = {link: c for c, link in enumerate(links)}
        paths = [[col[x] for x in links_of[i] if x in col] for i in flows]
        cls = [classes[i] for i in flows]
        dem = [demand[i] for i in flows]
        if weights is not None:
            fair = shared_rates(dem, paths, [caps[x] for x in links], weights=weights, classes=cls)
        else:
            key = tuple((i, phase[i]) for i in flows)
            fair = seen.get(key)
            if fair is None:
                if not general and len(links) == 1:
                    fair = water_fill(dem, caps[links[0]])
                elif not general:
                    fair = max_min_links(dem, paths, [caps[x] for x in links])
                else:
                    fair = shared_rates(dem, paths, [caps[x] for x in links], classes=cls)
                seen[key] = fair
        for i, r in zip(flows, fair, strict=True):
            got[i] = max(r, _EPS) if general else r  # a starved class: no 0-division

    def components(start: set[int]) -> list[tuple[list[int], list[int]]]:
        """The sending jobs of ``start`` that cross a full link, split into sets
        connected through full links, each with its full links (sorted)."""
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

    def resolve() -> None:
        """Bring loads, full links and rates up to date after ``changed``."""
        touched = {x for i in changed for x in links_of[i]}
        reach: set[int] = set()  # links a rate change can travel through
        for x in touched:
            if x in over:
                reach.add(x)
            if load[x] > over_cap[x]:
                over.add(x)
                reach.add(x)
            else:
                over.discard(x)
        hit = {i for i in changed if mode[i] == _SEND}
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
            got[i] = demand[i]
        for flows, links in components(hit):
            solve(flows, links, None)
        changed.clear()

    def resolve_mltcp() -> float:
        """Every rate under MLTCP weights (they change as bytes go out); the longest
        step (s) before they must be solved again."""
        if changed:
            touched = {x for i in changed for x in links_of[i]}
            for x in touched:
                if load[x] > over_cap[x]:
                    over.add(x)
                else:
                    over.discard(x)
            changed.clear()
        step = math.inf
        for i in sending:
            got[i] = demand[i]
        for flows, links in components(sending):
            weights = [
                mltcp_weight(
                    sent_before[i][phase[i]] + bits[i][phase[i]] - remaining[i],
                    per_iteration[i],
                    mltcp,
                )
                for i in flows
            ]
            solve(flows, links, weights)
            for i in flows:
                s = per_iteration[i] / MLTCP_STEPS / got[i]
                if s < step:
                    step = s
        return step

    t, events = 0.0, 0
    rng = range(n)
    while t < horizon_s:
        events += 1
        if events > max_events:
            raise InputError("horizon_s", f"more than {max_events} events; shorten the window")
        step = math.inf
        if mltcp is not None:
            step = resolve_mltcp()
        elif changed:
            resolve()
        dt = horizon_s - t
        for i in rng:
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
        if on_step is not None and dt > 0:
            active = [i for i in rng if mode[i] == _SEND]
            on_step(t, dt, np.array(active, int), np.array([got[i] for i in active], float))
        if sending:
            lo, hi = max(t, warmup_s), min(t + dt, horizon_s)
            if hi > lo:
                w = hi - lo
                for x in over:
                    excess[x] += w
                for i in sending:
                    sent[i] += got[i] * w
        t += dt
        if t >= horizon_s:
            break
        for i in rng:
            m = mode[i]
            if m == _WAIT:
                if until[i] <= t + _EPS:
                    begin_iteration(i, t)
            elif m == _GAP:
                remaining[i] -= dt
                if remaining[i] <= _EPS:
                    if n_phases[i]:
                        start_sending(i)
                    else:
                        end_iteration(i, t)
            else:
                remaining[i] -= got[i] * dt
                if remaining[i] <= 1e-9 * bits[i][phase[i]]:
                    stop_sending(i)
                    if phase[i] + 1 < n_phases[i]:
                        phase[i] += 1
                        mode[i], remaining[i] = _GAP, gaps[i][phase[i]]
                    else:
                        end_iteration(i, t)
    for i in rng:
        for x in links_of[i]:
            carried[x] += sent[i]
    return LoopResult(times, busy, excess, carried, events)
