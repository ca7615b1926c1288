"""The window model's one event loop, compiled with numba where it is installed (~1 us an
event) and plain Python on the same numpy arrays where it is not; its rates come from
:mod:`cassini.sim.network.rates`.  Pure logic: no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from cassini.sim.network.flows import LoopResult, csr_links, pack_cycles
from cassini.sim.network.rates import (
    _EPS,
    _GAP,
    _SEND,
    _WAIT,
    AVAILABLE,
    _crosses,
    _jit,
    _join,
    _leave,
    _mark,
    _scratch,
    _solve_set,
    kernel_rule,
    next_slot,
)
from cassini.sim.parts.sharing import progress_table
from mltcp.policy import MltcpParams

#: results of the loop that are not event counts
_TOO_MANY_EVENTS, _OUT_OF_ROOM = -1, -2
#: under MLTCP sharing, rates are re-solved at least this many times per iteration's
#: bytes of every flow on a full link (F changes as the bytes go out)
MLTCP_STEPS = 20

__all__ = ["AVAILABLE", "MLTCP_STEPS", "run_events"]


@_jit
def _resolve_progress(n_changed, label, mltcp_steps, links, marks, net, flow, solver, rule):
    """Under progress weights (MLTCP) every set, every event (weights move as bytes go
    out), after the full-link flags of the ``n_changed`` flows that started or stopped
    are brought up to date.  Returns (label, the longest step (s) before weights are due)."""
    link_ptr, link_idx = net[0], net[1]
    mode, demand, got, over, per_iteration = flow[0], flow[6], flow[8], flow[9], flow[5]
    load, over_cap = links[0], links[2]
    changed, in_changed = marks
    flow_sets, scratch = solver
    comp, flows = flow_sets
    for c in range(n_changed):
        i = changed[c]
        in_changed[i] = False
        for p in range(link_ptr[i], link_ptr[i + 1]):
            x = link_idx[p]
            over[x] = load[x] > over_cap[x]
    n = mode.shape[0]
    for i in range(n):
        if mode[i] == _SEND:
            got[i] = demand[i]
    label += 1
    step = math.inf
    for s in range(n):
        if mode[s] != _SEND or comp[s] == label or not _crosses(s, net, over):
            continue
        k = _solve_set(s, label, rule, net, flow, flow_sets, scratch)
        for a in range(k):
            i = flows[a]
            s_step = per_iteration[i] / mltcp_steps / got[i]
            if s_step < step:
                step = s_step
    return label, step


@_jit
def _resolve_changed(n_changed, label, links, marks, net, flow, solver, rule):
    """Rates after the ``n_changed`` flows that started or stopped: only their links
    change state, and only those that are or were full pass a change on, so every flow
    whose rate can change is in the set, through full links, of a sending flow on one
    of them.  Returns the last label used."""
    link_ptr, link_idx, link_jobs_ptr, link_jobs = net[0], net[1], net[2], net[3]
    mode, demand, got, over = flow[0], flow[6], flow[8], flow[9]
    load, _, over_cap, reach, in_reach = links
    changed, in_changed = marks
    flow_sets, scratch = solver
    comp = flow_sets[0]
    n_reach = 0
    for c in range(n_changed):
        i = changed[c]
        for p in range(link_ptr[i], link_ptr[i + 1]):
            x = link_idx[p]
            now_over = load[x] > over_cap[x]
            if (over[x] or now_over) and not in_reach[x]:
                in_reach[x] = True
                reach[n_reach] = x
                n_reach += 1
            over[x] = now_over
    for c in range(n_changed):
        in_changed[changed[c]] = False
    label += 1
    for r in range(n_reach):
        x = reach[r]
        in_reach[x] = False
        for q in range(link_jobs_ptr[x], link_jobs_ptr[x + 1]):
            s = link_jobs[q]
            if mode[s] != _SEND or comp[s] == label:
                continue
            if _crosses(s, net, over):
                _solve_set(s, label, rule, net, flow, flow_sets, scratch)
            else:
                comp[s] = label
                got[s] = demand[s]
    return label


@_jit
def _next_dt(t, horizon_s, step, mode, remaining, got, until):
    """Seconds to the next event (a phase or gap ending, a slot reached, the horizon,
    or ``step``), and whether any job is sending."""
    dt = horizon_s - t
    any_sending = False
    for i in range(mode.shape[0]):
        m = mode[i]
        if m == _SEND:
            x_dt = remaining[i] / got[i]
            any_sending = True
        elif m == _WAIT:
            x_dt = until[i] - t
        else:
            x_dt = remaining[i]
        if x_dt < dt:
            dt = x_dt
    if step < dt:
        dt = step
    if dt < 0.0:
        dt = 0.0
    return dt, any_sending


@_jit
def _account(t, dt, warmup_s, horizon_s, mode, got, over, excess, sent):
    """Count the part of ``[t, t + dt)`` inside the window: seconds over capacity per
    full link (``excess``) and bits each sending job sent (``sent``)."""
    lo = max(t, warmup_s)
    hi = min(t + dt, horizon_s)
    if hi > lo:
        w = hi - lo
        for x in range(over.shape[0]):
            if over[x]:
                excess[x] += w
        for i in range(mode.shape[0]):
            if mode[i] == _SEND:
                sent[i] += got[i] * w


@_jit
def _record(i, value, rows, counts):
    """Append ``value`` to job ``i``'s row; False when the row is full."""
    if counts[i] >= rows.shape[1]:
        return False
    rows[i, counts[i]] = value
    counts[i] += 1
    return True


@_jit
def _trace(t, dt, mode, got, steps, n_steps):
    """Append the step from ``t`` for ``dt`` seconds to ``steps`` (start, length, each
    job's rate or NaN); False when ``steps`` is full."""
    k = n_steps[0]
    if k >= steps.shape[0]:
        return False
    steps[k, 0] = t
    steps[k, 1] = dt
    for i in range(mode.shape[0]):
        steps[k, 2 + i] = got[i] if mode[i] == _SEND else math.nan
    n_steps[0] = k + 1
    return True


@_jit
def _end_iteration(i, t, warmup_s, tolerance, anchors, grids, pace, busy, n_busy):
    """Job ``i`` sent its last phase at ``t``: its busy time is recorded, and it waits
    for its next slot (a held job) or begins again.  Returns 1 to begin now, 0 to wait,
    ``_OUT_OF_ROOM`` when ``busy`` is full."""
    until, slot, start_of, mode = pace
    if start_of[i] >= warmup_s and not _record(i, t - start_of[i], busy, n_busy):
        return _OUT_OF_ROOM
    grid = grids[i]
    if grid != grid:  # free-running
        return 1
    slot[i], due = next_slot(t, anchors[i], slot[i], grid, tolerance)
    if due > t + _EPS:
        mode[i] = _WAIT
        until[i] = due
        return 0
    return 1


@_jit
def _start_send(i, n_changed, cycle, net, flow, links, marks):
    """Job ``i``'s gap ended: its current phase's flow starts at its peak demand.
    Returns the count of changed flows."""
    bits, peak = cycle[1], cycle[2]
    mode, phase, remaining, demand, got = flow[0], flow[1], flow[2], flow[6], flow[8]
    mode[i] = _SEND
    remaining[i] = bits[i, phase[i]]
    d = peak[i, phase[i]]
    demand[i] = d
    got[i] = d
    _join(i, d, net[0], net[1], links[1], links[0])
    return _mark(i, marks[1], marks[0], n_changed)


@_jit
def _stop_send(i, n_changed, cycle, net, flow, links, marks):
    """Job ``i`` sent its phase: its flow leaves its links and it moves to its next
    gap.  Returns (the count of changed flows, whether its iteration ended)."""
    gaps, n_phases = cycle[0], cycle[3]
    mode, phase, remaining, demand, got = flow[0], flow[1], flow[2], flow[6], flow[8]
    d = demand[i]
    got[i] = 0.0
    demand[i] = 0.0
    _leave(i, d, net[0], net[1], links[1], links[0])
    n_changed = _mark(i, marks[1], marks[0], n_changed)
    if phase[i] + 1 < n_phases[i]:
        phase[i] += 1
        mode[i] = _GAP
        remaining[i] = gaps[i, phase[i]]
        return n_changed, False
    return n_changed, True


@_jit
def _state(n, n_links, anchors, caps, sent_before, bits, per_iteration, shares):
    """The loop's state as its steps take it: ``(flow, pace, links, marks, sent)``."""
    mode = np.zeros(n, np.int64)
    flow = (
        mode,
        np.zeros(n, np.int64),
        np.zeros(n),
        sent_before,
        bits,
        per_iteration,
        np.zeros(n),
        shares.copy(),
        np.zeros(n),
        np.zeros(n_links, np.bool_),
    )
    until = np.maximum(anchors, 0.0)
    pace = (until, np.zeros(n, np.int64), np.full(n, np.nan), mode)
    links = (
        np.zeros(n_links),
        np.zeros(n_links, np.int64),
        caps * (1 + 1e-9),
        np.zeros(n_links, np.int64),  # changed links that are or were full
        np.zeros(n_links, np.bool_),
    )
    marks = (np.zeros(n, np.int64), np.zeros(n, np.bool_))  # flows started or stopped
    return flow, pace, links, marks, np.zeros(n)


@_jit
def _loop(
    gaps, bits, peak, n_phases, sent_before, per_iteration,
    link_ptr, link_idx, link_jobs_ptr, link_jobs, caps, classes, shares,
    anchors, grids, use_progress, table, general,
    mltcp_steps, horizon_s, warmup_s, tolerance, max_events,
    times, n_times, busy, n_busy, excess, carried, steps, n_steps,
):  # fmt: skip
    """The event loop over jobs' phases as rows (s, bits, bits/s) and links in CSR form
    (a grid NaN: free-running); fills ``times``, ``busy``, ``excess``, ``carried``, and
    ``steps`` unless it has no rows.  Returns the number of events, or
    ``_TOO_MANY_EVENTS`` / ``_OUT_OF_ROOM``."""
    cycle = (gaps, bits, peak, n_phases)
    net = (link_ptr, link_idx, link_jobs_ptr, link_jobs, caps, classes, shares)
    rule = (use_progress, table, general)
    n, n_links = gaps.shape[0], caps.shape[0]
    flow, pace, links, marks, sent = _state(
        n, n_links, anchors, caps, sent_before, bits, per_iteration, shares
    )
    mode, phase, remaining, got, over = flow[0], flow[1], flow[2], flow[8], flow[9]
    until, start_of = pace[0], pace[2]
    solver = _scratch(n, n_links)
    n_changed, label, t, events = 0, 0, 0.0, 0
    while t < horizon_s:
        events += 1
        if events > max_events:
            return _TOO_MANY_EVENTS
        step = math.inf
        if use_progress:
            label, step = _resolve_progress(
                n_changed, label, mltcp_steps, links, marks, net, flow, solver, rule
            )
            n_changed = 0
        elif n_changed > 0:
            label = _resolve_changed(n_changed, label, links, marks, net, flow, solver, rule)
            n_changed = 0
        dt, any_sending = _next_dt(t, horizon_s, step, mode, remaining, got, until)
        if steps.shape[0] and dt > 0 and not _trace(t, dt, mode, got, steps, n_steps):
            return _OUT_OF_ROOM
        if any_sending:
            _account(t, dt, warmup_s, horizon_s, mode, got, over, excess, sent)
        t += dt
        if t >= horizon_s:
            break
        for i in range(n):  # the common steps inline, the transitions called
            m = mode[i]
            begin = 0
            end = False
            if m == _WAIT:
                begin = 1 if until[i] <= t + _EPS else 0
            elif m == _GAP:
                remaining[i] -= dt
                if remaining[i] <= _EPS:
                    if n_phases[i] > 0:  # start sending the current phase
                        n_changed = _start_send(i, n_changed, cycle, net, flow, links, marks)
                    else:
                        end = True
            else:
                remaining[i] -= got[i] * dt
                if remaining[i] <= 1e-9 * bits[i, phase[i]]:  # stop sending
                    n_changed, end = _stop_send(i, n_changed, cycle, net, flow, links, marks)
            if end:
                begin = _end_iteration(
                    i, t, warmup_s, tolerance, anchors, grids, pace, busy, n_busy
                )
                if begin == _OUT_OF_ROOM:
                    return _OUT_OF_ROOM
            if begin == 1:
                if start_of[i] >= warmup_s and not _record(i, t - start_of[i], times, n_times):
                    return _OUT_OF_ROOM
                start_of[i] = t
                mode[i] = _GAP
                phase[i] = 0
                remaining[i] = gaps[i, 0]
    for i in range(n):
        for p in range(link_ptr[i], link_ptr[i + 1]):
            carried[link_idx[p]] += sent[i]
    return events


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
    mltcp_steps: int = MLTCP_STEPS,
    record_steps: bool = False,
    shares: Sequence[float] | None = None,
    progress: Callable[[float], float] | None = None,
) -> LoopResult | None:
    """Run the fluid model (see :func:`cassini.sim.network.fluid.simulate`) over jobs
    given as unrolled ``cycles``, link indices ``links_of``, link capacities ``caps``
    (bits/s), ``anchors`` (s), slot-grid periods ``grids`` (s, None = free-running),
    priority ``classes``, share weights ``shares`` (> 0, None: all 1) and progress weights
    (MLTCP's F, times ``progress``); with ``record_steps``, every step too.  None when
    ``max_events`` is exceeded."""
    n, n_links = len(cycles), len(caps)
    cycle, shortest = pack_cycles(cycles)
    shares = np.ones(n) if shares is None else np.asarray(shares, float)
    net = (*csr_links(links_of, n_links), np.asarray(caps, float), np.asarray(classes, np.int64))
    grid_s = np.array([math.nan if g is None else g for g in grids], float)
    net, pacing = (*net, shares), (np.asarray(anchors, float), grid_s)
    general = len(set(classes)) > 1 or bool(np.any(shares != 1.0))
    rule = kernel_rule(progress_table(mltcp, progress), general)
    window = (float(mltcp_steps), float(horizon_s), float(warmup_s), float(tolerance))
    window = (*window, int(max_events))
    # room for every iteration at the shortest dedicated time, grown if one needs more
    room = int(min(horizon_s / max(shortest, 1e-6), 1e6)) + 4 if n else 1
    step_room = room * max(n, 1) * (2 * cycle[0].shape[1] + 2 + mltcp_steps) if record_steps else 0
    while True:
        times, busy = np.zeros((n, room)), np.zeros((n, room))
        n_times, n_busy = np.zeros(n, np.int64), np.zeros(n, np.int64)
        out = (times, n_times, busy, n_busy, np.zeros(n_links), np.zeros(n_links))
        steps, n_steps = np.zeros((step_room, n + 2)), np.zeros(1, np.int64)
        events = _loop(*cycle, *net, *pacing, *rule, *window, *out, steps, n_steps)
        if events != _OUT_OF_ROOM:
            break
        room *= 4
        step_room *= 4
    if events == _TOO_MANY_EVENTS:
        return None
    return LoopResult(
        [times[i, : n_times[i]].tolist() for i in range(n)],
        [busy[i, : n_busy[i]].tolist() for i in range(n)],
        out[4].tolist(),
        out[5].tolist(),
        int(events),
        steps[: n_steps[0]].copy() if record_steps else None,
    )
