"""The network model's event loop in plain Python floats, with steady-state skipping.

The groups the simulator hands :func:`cassini.sim.network.simulate` are small (a few
jobs on a few links), so numpy calls on 2-4-element arrays cost far more than the
arithmetic; this loop does the same steps as the reference loop
(:func:`cassini.sim.network.simulate_reference`) on lists, giving the same results up
to float rounding.

Steady-state skipping: the state of a group (what each job is doing, how far it is into
it, where its slot grid stands) is recorded whenever the first job starts an iteration.
When it matches an earlier record to within :data:`MATCH_TOL` of the time between the
two, the group has entered a cycle of period ``P``; every later stretch of ``P``
repeats it, so the loop jumps over whole cycles, adding each skipped cycle's iteration
times, excess-demand time and carried bits as recorded while simulating it (and replays
the one cycle that straddles the end of the warm-up step by step).  Pure logic: no I/O.
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
#: two recorded states match when every time and amount differs by at most this
#: fraction of the candidate cycle's period (times) or of the phase's bits (bits)
MATCH_TOL = 1e-9
#: how many earlier states each new one is compared with (cycles of up to this many
#: iterations of the first job are found)
HISTORY = 24


@dataclass
class LoopResult:
    """Raw output of :func:`run_events` (per job / per link lists, indices as given)."""

    times: list[list[float]]
    busy: list[list[float]]
    excess: list[float]
    carried: list[float]
    events: int
    skipped_s: float


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
    skip: bool = True,
) -> LoopResult:
    """Run the fluid model (see :func:`cassini.sim.network.simulate`) over jobs given as
    unrolled ``cycles``, link indices ``links_of``, link capacities ``caps`` (bits/s),
    ``anchors`` (s), slot-grid periods ``grids`` (s, None = free-running) and priority
    ``classes``.  ``skip`` turns steady-state skipping on (it is off while ``on_step``
    observes every step)."""
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
    skip = skip and on_step is None and n > 0

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
    # steady-state skipping: states at the first job's iteration starts, and what was
    # recorded since (to repeat it for skipped cycles)
    marks: list[tuple[float, tuple, int, int]] = []  # (t, state, log length, events)
    log: list[tuple] = []  # ("it"|"busy", job, start s, value s) | ("step", lo, hi, over, flow)
    skipped = 0.0
    look_for_cycle = skip

    def record_iteration(i: int, now: float) -> None:
        if start_of[i] >= warmup_s:
            times[i].append(now - start_of[i])
        if look_for_cycle:
            log.append(("it", i, start_of[i], now - start_of[i]))

    def begin_iteration(i: int, now: float) -> None:
        record_iteration(i, now)
        start_of[i] = now
        mode[i], phase[i], remaining[i] = _GAP, 0, gaps[i][0]

    def end_iteration(i: int, now: float) -> None:
        if start_of[i] >= warmup_s:
            busy[i].append(now - start_of[i])
        if look_for_cycle:
            log.append(("busy", i, start_of[i], now - start_of[i]))
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

    t, events = 0.0, 0
    rng = range(n)
    while t < horizon_s:
        events += 1
        if events > max_events:
            raise InputError("horizon_s", f"more than {max_events} events; shorten the window")
        active = [i for i in rng if mode[i] == _SEND]
        demand = [peak[i][phase[i]] for i in active]
        load: dict[int, float] = {}
        for k, i in enumerate(active):
            d = demand[k]
            for link in links_of[i]:
                load[link] = load.get(link, 0.0) + d
        over = [link for link, x in load.items() if x > over_cap[link]]
        got = demand
        step = math.inf
        if over:
            over.sort()
            full = {link: c for c, link in enumerate(over)}
            held = [k for k, i in enumerate(active) if any(x in full for x in links_of[i])]
            got = list(demand)
            if general:
                fl = [active[k] for k in held]
                paths = [[full[x] for x in links_of[i] if x in full] for i in fl]
                cap_full = [caps[x] for x in over]
                cls = [classes[i] for i in fl]
                if mltcp is None:
                    key = tuple((i, phase[i]) for i in fl)
                    fair = seen.get(key)
                    if fair is None:
                        fair = seen[key] = shared_rates(
                            [demand[k] for k in held], paths, cap_full, classes=cls
                        )
                    for k, r in zip(held, fair, strict=True):
                        got[k] = max(r, _EPS)  # a starved class: no 0-division later
                else:
                    weights = [
                        mltcp_weight(
                            sent_before[i][phase[i]] + bits[i][phase[i]] - remaining[i],
                            per_iteration[i],
                            mltcp,
                        )
                        for i in fl
                    ]
                    fair = shared_rates(
                        [demand[k] for k in held], paths, cap_full, weights=weights, classes=cls
                    )
                    for k, r in zip(held, fair, strict=True):
                        got[k] = r = max(r, _EPS)
                        s = per_iteration[active[k]] / MLTCP_STEPS / r
                        if s < step:
                            step = s
            else:
                meets = [[x for x in links_of[active[k]] if x in full] for k in held]
                if all(len(m) == 1 for m in meets):  # independent links: fill each
                    by_link: dict[int, list[int]] = {}
                    for k, m in zip(held, meets, strict=True):
                        by_link.setdefault(m[0], []).append(k)
                    for link, fs in by_link.items():
                        key = (link, *((active[k], phase[active[k]]) for k in fs))
                        fair = seen.get(key)
                        if fair is None:
                            fair = seen[key] = water_fill([demand[k] for k in fs], caps[link])
                        for k, r in zip(fs, fair, strict=True):
                            got[k] = r
                else:
                    key = tuple((active[k], phase[active[k]]) for k in held)
                    fair = seen.get(key)
                    if fair is None:
                        fair = seen[key] = shared_rates(
                            [demand[k] for k in held],
                            [[full[x] for x in m] for m in meets],
                            [caps[x] for x in over],
                        )
                    for k, r in zip(held, fair, strict=True):
                        got[k] = r
        dt = horizon_s - t
        for k, i in enumerate(active):
            x = remaining[i] / got[k]
            if x < dt:
                dt = x
        for i in rng:
            m = mode[i]
            if m == _WAIT:
                x = until[i] - t
                if x < dt:
                    dt = x
            elif m == _GAP and remaining[i] < dt:
                dt = remaining[i]
        if step < dt:
            dt = step
        if dt < 0.0:
            dt = 0.0
        if on_step is not None and dt > 0:
            on_step(t, dt, np.array(active, int), np.array(got, float))
        if active:
            if over:
                flow: dict[int, float] = {}
                for k, i in enumerate(active):
                    g = got[k]
                    for link in links_of[i]:
                        flow[link] = flow.get(link, 0.0) + g
            else:
                flow = load
            lo, hi = max(t, warmup_s), min(t + dt, horizon_s)
            if hi > lo:
                w = hi - lo
                for link in over:
                    excess[link] += w
                for link, x in flow.items():
                    carried[link] += x * w
            if look_for_cycle:
                log.append(("step", t, t + dt, over, flow))
        t += dt
        if t >= horizon_s:
            break
        for k, i in enumerate(active):
            remaining[i] -= got[k] * dt
        mark = False
        for i in rng:
            m = mode[i]
            if m == _WAIT:
                if until[i] <= t + _EPS:
                    begin_iteration(i, t)
                    mark = mark or i == 0
            elif m == _GAP:
                remaining[i] -= dt
                if remaining[i] <= _EPS:
                    if n_phases[i]:
                        mode[i], remaining[i] = _SEND, bits[i][phase[i]]
                    else:
                        end_iteration(i, t)
                        mark = mark or (i == 0 and mode[0] == _GAP)
            elif remaining[i] <= 1e-9 * bits[i][phase[i]]:
                if phase[i] + 1 < n_phases[i]:
                    phase[i] += 1
                    mode[i], remaining[i] = _GAP, gaps[i][phase[i]]
                else:
                    end_iteration(i, t)
                    mark = mark or (i == 0 and mode[0] == _GAP)
        if not (look_for_cycle and mark):
            continue
        state = _state(t, mode, until, remaining, phase, slot, anchors, grids, start_of)
        found = None
        for t0, s0, at, ev in reversed(marks):
            if _same(state, s0, t - t0, bits, phase):
                found = (t0, at, ev)
                break
        marks.append((t, state, len(log), events))
        del marks[:-HISTORY]
        if found is None:
            continue
        t0, at, ev = found
        period = t - t0
        if not period > 0:
            continue
        copies = math.floor((horizon_s - t) / period) - 1  # leave the end to the loop
        if copies < 1:
            look_for_cycle = False
            continue
        cycle = log[at:]
        for c in range(1, copies + 1):
            # copy c of [t0, t) lands on [t0 + c P, t + c P)
            _replay(cycle, c * period, warmup_s, horizon_s, times, busy, excess, carried)
        jump = copies * period
        t += jump
        skipped += jump
        for i in rng:
            if mode[i] == _WAIT:
                until[i] += jump
            if start_of[i] == start_of[i]:  # not nan
                start_of[i] += jump
            if grids[i] is not None:
                slot[i] += round(jump / grids[i])
        look_for_cycle = False
        log.clear()
    return LoopResult(times, busy, excess, carried, events, skipped)


def _state(t, mode, until, remaining, phase, slot, anchors, grids, start_of) -> tuple:
    """The group's state at ``t``, times relative to ``t``."""
    out = []
    for i in range(len(mode)):
        due = anchors[i] + slot[i] * grids[i] - t if grids[i] is not None else 0.0
        out.append(
            (
                mode[i],
                phase[i],
                remaining[i],
                until[i] - t if mode[i] == _WAIT else 0.0,
                due,
                t - start_of[i] if start_of[i] == start_of[i] else -1.0,
            )
        )
    return tuple(out)


def _same(a: tuple, b: tuple, period: float, bits: list[list[float]], phase: list[int]) -> bool:
    """Whether two states match (see :data:`MATCH_TOL`)."""
    tol_t = MATCH_TOL * period
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x[0] != y[0] or x[1] != y[1]:
            return False
        tol_r = MATCH_TOL * bits[i][phase[i]] if x[0] == _SEND else tol_t
        if abs(x[2] - y[2]) > tol_r:
            return False
        if abs(x[3] - y[3]) > tol_t or abs(x[4] - y[4]) > tol_t or abs(x[5] - y[5]) > tol_t:
            return False
    return True


def _replay(
    cycle: list[tuple],
    shift: float,
    warmup_s: float,
    horizon_s: float,
    times: list[list[float]],
    busy: list[list[float]],
    excess: list[float],
    carried: list[float],
) -> None:
    """Add what one cycle recorded, moved ``shift`` seconds later."""
    for entry in cycle:
        if entry[0] == "step":
            _, a, b, over, flow = entry
            lo, hi = max(a + shift, warmup_s), min(b + shift, horizon_s)
            if hi > lo:
                w = hi - lo
                for link in over:
                    excess[link] += w
                for link, x in flow.items():
                    carried[link] += x * w
        elif entry[2] + shift >= warmup_s:
            (times if entry[0] == "it" else busy)[entry[1]].append(entry[3])
