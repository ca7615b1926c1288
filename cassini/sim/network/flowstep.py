"""The continuous model's compiled step: :func:`_advance` moves a
:class:`~cassini.sim.network.flowstate.FlowState`'s arrays from one time to another,
event by event, with rates from :mod:`cassini.sim.network.rates`.  Pure logic: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cassini.sim.network.flows import Cycle
from cassini.sim.network.flowsolve import _resolve_all, _resolve_changed, _resolve_eager
from cassini.sim.network.rates import (
    _EPS,
    _GAP,
    _SEND,
    _WAIT,
    _jit,
    _join,
    _leave,
    _mark,
    _scratch,
    next_slot,
)

#: a slot no job holds
_IDLE = -1
#: why :func:`_advance` returned
REACHED, FINISHED, FULL, SLOW = 0, 1, 2, 3


def cycle_position(cycle: Cycle, pos_s: float) -> tuple[int, int, float]:
    """Where a job running at its dedicated pace is ``pos_s`` seconds into its cycle:
    ``(mode, phase, remaining)`` — in a gap (remaining seconds) or sending (remaining
    bits at the phase's peak rate)."""
    pos = pos_s % cycle.iteration_time_s
    for p, (gap, bits, rate) in enumerate(
        zip(cycle.gaps_s, cycle.bits, cycle.rates_bps, strict=True)
    ):
        if pos < gap:
            return _GAP, p, gap - pos
        pos -= gap
        send = bits / rate
        if pos < send:
            return _SEND, p, bits - pos * rate
        pos -= send
    return _GAP, 0, cycle.gaps_s[0]  # rounding at the very end: the next cycle's start


def position_of(cycle: Cycle, mode: int, phase: int, remaining: float) -> float:
    """Seconds into the cycle at dedicated pace (the inverse of :func:`cycle_position`);
    a job waiting for its slot is at 0."""
    if mode == _WAIT:
        return 0.0
    pos = 0.0
    for p in range(phase):
        pos += cycle.gaps_s[p] + cycle.bits[p] / cycle.rates_bps[p]
    if mode == _GAP:
        return pos + max(0.0, cycle.gaps_s[phase] - remaining)
    bits, rate = cycle.bits[phase], cycle.rates_bps[phase]
    return pos + cycle.gaps_s[phase] + max(0.0, bits - remaining) / rate


@dataclass(frozen=True)
class Advanced:
    """What one :meth:`FlowState.advance` did: ``t_s`` reached, ``finished`` the jobs
    that ended there, and for every cycle that ended on the way its job's ``uid``, its
    length ``cycle_s`` and the part spent computing and sending ``busy_s`` (seconds);
    ``events`` stepped; ``slow``: it stopped where a held job's cycle overran its
    period by more than half the tolerance."""

    t_s: float
    finished: tuple[str, ...]
    uid: np.ndarray
    cycle_s: np.ndarray
    busy_s: np.ndarray
    events: int
    slow: bool = False

    def cycles(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per uid, its (cycle s, busy s) arrays."""
        order = np.argsort(self.uid, kind="stable")
        uid, times, busy = self.uid[order], self.cycle_s[order], self.busy_s[order]
        cuts = np.flatnonzero(np.diff(uid)) + 1
        return {
            int(u[0]): (a, b)
            for u, a, b in zip(
                np.split(uid, cuts), np.split(times, cuts), np.split(busy, cuts), strict=True
            )
            if len(u)
        }


def link_jobs(links2d: np.ndarray, n_links: int) -> tuple[np.ndarray, np.ndarray]:
    """Each link's jobs in CSR form (``link_jobs_ptr``, ``link_jobs``) from the padded
    job -> links table ``links2d`` (-1 past a job's last link)."""
    n, width = links2d.shape
    flat = links2d.ravel()
    valid = flat >= 0
    jobs = np.repeat(np.arange(n, dtype=np.int64), width)[valid]
    order = np.argsort(flat[valid], kind="stable")
    counts = np.bincount(flat[valid], minlength=n_links)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return ptr, jobs[order]


@_jit
def _csr(links2d, n):
    """The solver's CSR of job -> links (``link_ptr``, ``link_idx``) from the padded
    table ``links2d`` (-1 past a job's last link), for the first ``n`` slots."""
    width = links2d.shape[1]
    link_ptr = np.zeros(n + 1, np.int64)
    for i in range(n):
        k = 0
        while k < width and links2d[i, k] >= 0:
            k += 1
        link_ptr[i + 1] = link_ptr[i] + k
    link_idx = np.zeros(max(1, link_ptr[n]), np.int64)
    for i in range(n):
        for k in range(link_ptr[i + 1] - link_ptr[i]):
            link_idx[link_ptr[i] + k] = links2d[i, k]
    return link_ptr, link_idx


@_jit
def _next_dt(t, t_goal, step, lazy, mode, remaining, got, until, reweight):
    """Seconds to the next event: a phase or gap ending, a slot or finish reached, an
    MLTCP weight due (``lazy``), ``step``, or ``t_goal``."""
    dt = t_goal - t
    for i in range(mode.shape[0]):
        m = mode[i]
        if m == _SEND:
            x_dt = remaining[i] / got[i]
            if lazy and remaining[i] > reweight[i]:
                r_dt = (remaining[i] - reweight[i]) / got[i]
                if r_dt < x_dt:
                    x_dt = r_dt
        elif m == _WAIT:
            x_dt = until[i] - t
        elif m == _GAP:
            x_dt = remaining[i]
        else:
            continue
        if x_dt < dt:
            dt = x_dt
    if step < dt:
        dt = step
    if dt < 0.0:
        dt = 0.0
    return dt


@_jit
def _start_phase(i, n_changed, arrays, marks, link_state, net):
    """Job ``i``'s gap ended: its phase's flow starts (joins its links at its peak
    demand).  Returns the count of changed flows."""
    bits, peak, ints, floats = arrays[1], arrays[2], arrays[3], arrays[4]
    mode, phase = ints[0], ints[1]
    remaining, demand, got = floats[1], floats[5], floats[6]
    mode[i] = _SEND
    remaining[i] = bits[i, phase[i]]
    d = peak[i, phase[i]]
    demand[i] = d
    got[i] = d
    _join(i, d, net[0], net[1], link_state[1], link_state[0])
    return _mark(i, marks[1], marks[0], n_changed)


@_jit
def _stop_phase(i, n_changed, arrays, marks, link_state, net):
    """Job ``i`` sent its phase: its flow leaves its links and it moves to its next
    gap.  Returns (the count of changed flows, whether its cycle ended)."""
    gaps, ints, floats = arrays[0], arrays[3], arrays[4]
    mode, phase, n_phases = ints[0], ints[1], ints[2]
    remaining, demand, got = floats[1], floats[5], floats[6]
    d = demand[i]
    got[i] = 0.0
    demand[i] = 0.0
    _leave(i, d, net[0], net[1], link_state[1], link_state[0])
    n_changed = _mark(i, marks[1], marks[0], n_changed)
    if phase[i] + 1 < n_phases[i]:
        phase[i] += 1
        mode[i] = _GAP
        remaining[i] = gaps[i, phase[i]]
        return n_changed, False
    return n_changed, True


@_jit
def _emit(written, i, cycle_s, busy_s, out):
    """Write one completed cycle to ``out``; returns the count written."""
    out[0][written] = i
    out[1][written] = cycle_s
    out[2][written] = busy_s
    return written + 1


@_jit
def _end_cycle(i, t, tolerance, written, why, ints, floats, out):
    """Job ``i``'s cycle ended at ``t``: the last one leaves its tail of compute, a
    free-running one begins again, a held one waits for its next slot (a ``SLOW`` one
    is flagged).  Returns (whether it begins now, cycles written, why)."""
    mode, slot, count, target = ints[0], ints[3], ints[4], ints[5]
    until, anchor, grid, start_of, tail, last_busy = (
        floats[0],
        floats[2],
        floats[3],
        floats[4],
        floats[9],
        floats[10],
    )
    count[i] += 1
    g = grid[i]
    busy = t - start_of[i]  # NaN for a cycle not seen from its start
    if count[i] >= target[i] or g != g:  # last or free-running: ends here
        if busy == busy:
            written = _emit(written, i, busy, busy, out)
        if count[i] >= target[i]:  # the compute after the last cycle, then done
            mode[i] = _WAIT
            until[i] = t + tail[i]
            return False, written, why
        return True, written, why
    last_busy[i] = busy  # held: the cycle ends when the next slot begins
    if busy > g * (1 + tolerance / 2) and why == REACHED:
        why = SLOW  # cannot keep its slots: the caller decides
    slot[i], due = next_slot(t, anchor[i], slot[i], g, tolerance)
    if due > t + _EPS:
        mode[i] = _WAIT
        until[i] = due
        return False, written, why
    return True, written, why


@_jit
def _begin_cycle(i, t, written, gaps, ints, floats, out):
    """Job ``i`` begins a cycle at ``t`` (a held cycle is reported now, at its end).
    Returns the count of cycles written."""
    mode, phase = ints[0], ints[1]
    remaining, start_of, last_busy = floats[1], floats[4], floats[10]
    if last_busy[i] == last_busy[i]:
        written = _emit(written, i, t - start_of[i], last_busy[i], out)
        last_busy[i] = math.nan
    start_of[i] = t
    mode[i] = _GAP
    phase[i] = 0
    remaining[i] = gaps[i, 0]
    return written


@_jit
def _settle(t, link_state):
    """Count the excess seconds of links still over capacity up to ``t``, so the
    caller can read them."""
    over, over_since, excess = link_state[2], link_state[3], link_state[4]
    for x in range(over.shape[0]):
        if over[x]:
            excess[x] += t - over_since[x]
            over_since[x] = t


@_jit
def _advance(state_t, t_goal, ints, floats, tables, link_state, link_jobs, rule, knobs, out, n):
    """Step the flow state from ``state_t`` to ``t_goal`` (absolute seconds) over its
    first ``n`` slots, stopping early at the end of a job's last cycle or when ``out`` =
    (job, cycle seconds, busy seconds) is full.  ``ints`` = (mode, phase, n_phases,
    slot, count, target, classes), ``floats`` = (until, remaining, anchor, grid,
    start_of, demand, got, weight, per_iteration, tail, last_busy, reweight, share), ``tables``
    = (gaps, bits, peak, sent_before, links2d, caps), ``link_state`` = (load, members,
    over, over_since, excess), ``knobs`` = (mltcp_steps, every_event, tolerance,
    max_events, resolve_all).  Returns (t reached, events, why, cycles written, whether
    the next call must re-solve).  The per-job step is inline: a call per job per event
    cost the continuous run ~1.8x its time."""
    gaps, bits, peak, sent_before, links2d, caps = tables
    mltcp_steps, every_event, tolerance, max_events, resolve_all = knobs
    mode, phase, count, target = ints[0], ints[1], ints[4], ints[5]
    until, remaining, demand, got = floats[0], floats[1], floats[5], floats[6]
    per_iteration, reweight = floats[8], floats[11]
    eager, lazy = rule[0] and every_event, rule[0] and not every_event
    over_cap = caps * (1 + 1e-9)
    net = (*_csr(links2d, n), link_jobs[0], link_jobs[1], caps, ints[6], floats[12])
    flow = (mode, phase, remaining, sent_before, bits, per_iteration, demand, floats[7], got)
    flow = (*flow, link_state[2])
    ctx = (net, flow, _scratch(n, caps.shape[0]), rule, reweight, mltcp_steps)
    marks = (np.zeros(n, np.int64), np.zeros(n, np.bool_))
    reach = (np.zeros(caps.shape[0], np.int64), np.zeros(caps.shape[0], np.bool_))
    arrays = (gaps, bits, peak, ints, floats)
    label, t, events, written, why, n_changed = 0, state_t, 0, 0, REACHED, 0
    if resolve_all:  # the state was changed from outside: every link, every set
        label = _resolve_all(t, label, over_cap, link_state, ctx)
    while t < t_goal and events < max_events:
        events += 1
        step = math.inf
        if eager:
            label, step = _resolve_eager(t, label, n_changed, marks, over_cap, link_state, ctx)
            n_changed = 0
        elif n_changed > 0:
            label = _resolve_changed(t, label, n_changed, marks, reach, over_cap, link_state, ctx)
            n_changed = 0
        dt = _next_dt(t, t_goal, step, lazy, mode, remaining, got, until, reweight)
        t, dt = (t_goal, t_goal - t) if t + dt >= t_goal else (t + dt, dt)
        for i in range(n):  # the common steps inline, the transitions called
            m = mode[i]
            if m == _IDLE:
                continue
            begin = end = False
            if m == _WAIT:
                begin = until[i] <= t + _EPS
            elif m == _GAP:
                remaining[i] -= dt
                if remaining[i] <= _EPS:
                    n_changed = _start_phase(i, n_changed, arrays, marks, link_state, net)
            else:
                remaining[i] -= got[i] * dt
                if lazy and remaining[i] <= reweight[i] + 1e-9 * bits[i, phase[i]]:
                    reweight[i] = -math.inf  # its weight is due: re-solve its set
                    n_changed = _mark(i, marks[1], marks[0], n_changed)
                if remaining[i] <= 1e-9 * bits[i, phase[i]]:
                    n_changed, end = _stop_phase(i, n_changed, arrays, marks, link_state, net)
            if end:
                begin, written, why = _end_cycle(i, t, tolerance, written, why, ints, floats, out)
            if begin and count[i] >= target[i]:
                mode[i] = _IDLE
                why = FINISHED
            elif begin:
                written = _begin_cycle(i, t, written, gaps, ints, floats, out)
        if why != REACHED:
            break
        if written + n > out[0].shape[0]:
            why = FULL
            break
    _settle(t, link_state)
    return t, events, why, written, n_changed > 0
