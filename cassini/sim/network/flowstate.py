"""The network model run continuously: one flow state for every job that shares a link
that can congest, stepped forward in simulated time and changed in place as jobs come,
go, move or change pacing.

The window model (:func:`cassini.sim.network.simulate`) re-simulates a group of jobs
from phases set by their start times for several of its longest iterations at every
change of the group; with thousands of jobs one group can hold hundreds of them and
change several times a second, so the same seconds are simulated many times over.  Here
each simulated second is stepped through once: the engine asks :meth:`FlowState.advance`
to reach its next arrival or analytic finish, and the state stops early when a job
completes its last iteration.  Jobs keep their phases across changes, MLTCP its bytes
counted, held jobs their slot grids.

Per event the same rules as :mod:`cassini.sim.network.jitloop`: rates change only when a flow
starts or stops (or always under MLTCP, whose weights move as bytes go out), and only
the sets of sending flows connected through full links that a change reaches are
re-solved, by weighted progressive filling class by class.  Excess demand per link
(seconds with summed demand above capacity) is accounted lazily, when a link's state
flips.  Times are absolute simulated seconds; rates bits/s; sizes bits.  Pure logic:
no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cassini.sim.network import rates
from cassini.sim.network.flows import Cycle
from cassini.sim.network.rates import _crosses, _jit, _join, _leave, _mark
from cassini.sim.network.rates import _solve_set as _solve_window_set
from mltcp.policy import FLAG_SCALE_CUT, ONE, MltcpParams

_EPS = 1e-12
_IDLE, _WAIT, _GAP, _SEND = -1, 0, 1, 2
#: why :meth:`FlowState.advance` returned
REACHED, FINISHED, FULL, SLOW = 0, 1, 2, 3

AVAILABLE = rates.AVAILABLE


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


#: the most sending flows re-solved together: a set connected through full links that
#: is larger is re-solved around the change only (:func:`cassini.sim.network.rates._component`)
LOCAL_SET_FLOWS = 16


@_jit
def _flip(x, now_over, t, link_state):
    """Link ``x`` is (``now_over``) or is no longer over capacity from time ``t``: its
    excess-demand seconds are counted when the spell ends."""
    over, over_since, excess = link_state[2], link_state[3], link_state[4]
    if now_over != over[x]:
        if now_over:
            over_since[x] = t
        else:
            excess[x] += t - over_since[x]
        over[x] = now_over


@_jit
def _solve_set(s, label, rule, net, flow, flow_sets, scratch, reweight, steps):
    """Rates of the set of sending flows connected to job ``s`` through full links, cut
    at the :data:`LOCAL_SET_FLOWS` nearest ``s`` (:func:`cassini.sim.network.rates._solve_set`),
    labelled ``label`` and left in ``flow_sets[1][:k]``; under MLTCP each member's F is
    due again once it has sent ``1 / steps`` of its iteration's bits more (its
    ``remaining`` bits then are ``reweight``).  Returns ``k``."""
    k = _solve_window_set(s, label, rule, net, flow, flow_sets, scratch, LOCAL_SET_FLOWS)
    if rule[0]:
        remaining, per_iteration, flows = flow[2], flow[5], flow_sets[1]
        for a in range(k):
            i = flows[a]
            reweight[i] = remaining[i] - per_iteration[i] / steps
    return k


@_jit
def _advance(
    state_t,
    t_goal,
    ints,
    floats,
    gaps,
    bits,
    peak,
    sent_before,
    links2d,
    caps,
    link_state,
    link_jobs_ptr,
    link_jobs,
    rule,
    mltcp_steps,
    mltcp_every_event,
    tolerance,
    resolve_all,
    max_events,
    out_job,
    out_time,
    out_busy,
    n_used,
):
    """Step the flow state from ``state_t`` to ``t_goal`` (absolute seconds), stopping
    early at the end of a job's last cycle or when ``out_*`` is full.  Per-slot integer
    state ``ints`` = (mode, phase, n_phases, slot, count, target, classes) and float
    state ``floats`` = (until, remaining, anchor, grid, start_of, demand, got, weight,
    per_iteration, tail, last_busy, reweight); per link ``link_state`` = (load, members, over,
    over_since, excess).
    Each completed cycle writes (slot, cycle seconds, busy seconds) to ``out_*``.  A job
    ends ``tail`` seconds after its ``target``-th cycle (the compute after its last
    phase).
    Returns (t reached, events, why, cycles written, whether flows started or stopped
    at ``t`` without their sets re-solved yet: the next call must re-solve)."""
    mode, phase, n_phases, slot, count, target, classes = ints
    until, remaining, anchor, grid, start_of, demand, got, weight, per_iteration, tail = floats[:10]
    last_busy, reweight = floats[10], floats[11]
    load, members, over, over_since, excess = link_state
    use_mltcp = rule[0]
    eager = use_mltcp and mltcp_every_event  # every set re-solved at every event
    lazy = use_mltcp and not mltcp_every_event  # a set when a flow's weight is due
    n = n_used  # slots beyond the high-water mark are free
    width = links2d.shape[1]
    n_links = caps.shape[0]
    room = out_job.shape[0]
    over_cap = caps * (1 + 1e-9)
    # the compiled solver's views: CSR of job -> links from the padded table
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
    net = (link_ptr, link_idx, link_jobs_ptr, link_jobs, caps, classes)
    flow = (mode, phase, remaining, sent_before, bits, per_iteration, demand, weight, got, over)
    comp = np.full(n, -1, np.int64)
    flows = np.zeros(n, np.int64)
    flow_sets = (comp, flows)
    fixed = np.zeros(n, np.bool_)
    tight = np.zeros(n, np.bool_)
    rem = np.zeros(n_links)
    wload = np.zeros(n_links)
    n_open = np.zeros(n_links, np.int64)
    level_of = np.zeros(n_links)
    links = np.zeros(n_links, np.int64)
    scratch = (fixed, tight, rem, wload, n_open, level_of, links)
    changed = np.zeros(n, np.int64)
    in_changed = np.zeros(n, np.bool_)
    n_changed = 0
    reach = np.zeros(n_links, np.int64)
    in_reach = np.zeros(n_links, np.bool_)
    label = 0
    t = state_t
    events = 0
    written = 0
    why = 0
    if resolve_all:  # the state was changed from outside: every link, every set
        for x in range(n_links):
            now_over = load[x] > over_cap[x]
            _flip(x, now_over, t, link_state)
        label += 1
        first = label  # sets of this step get labels from here on
        for s in range(n):
            if mode[s] != _SEND or comp[s] >= first:
                continue
            if _crosses(s, net, over):
                label += 1
                _solve_set(s, label, rule, net, flow, flow_sets, scratch, reweight, mltcp_steps)
            else:
                comp[s] = label
                got[s] = demand[s]
    while t < t_goal and events < max_events:
        events += 1
        step = math.inf
        if eager:
            for c in range(n_changed):
                i = changed[c]
                in_changed[i] = False
                for p in range(link_ptr[i], link_ptr[i + 1]):
                    x = link_idx[p]
                    now_over = load[x] > over_cap[x]
                    _flip(x, now_over, t, link_state)
            n_changed = 0
            label += 1
            first = label
            for s in range(n):
                if mode[s] != _SEND or comp[s] >= first:
                    continue
                if not _crosses(s, net, over):
                    got[s] = demand[s]
                    continue
                label += 1
                k = _solve_set(s, label, rule, net, flow, flow_sets, scratch, reweight, mltcp_steps)
                for a in range(k):
                    i = flows[a]
                    s_step = per_iteration[i] / mltcp_steps / got[i]
                    if s_step < step:
                        step = s_step
        elif n_changed > 0:
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
                    _flip(x, now_over, t, link_state)
            label += 1
            first = label  # each set its own label: a cut set's outside is every other
            for c in range(n_changed):  # a flow that started: its set, nearest first
                i = changed[c]
                in_changed[i] = False
                if mode[i] == _SEND and comp[i] < first and _crosses(i, net, over):
                    label += 1
                    _solve_set(i, label, rule, net, flow, flow_sets, scratch, reweight, mltcp_steps)
            n_changed = 0
            for r in range(n_reach):
                x = reach[r]
                in_reach[x] = False
                for q in range(link_jobs_ptr[x], link_jobs_ptr[x + 1]):
                    s = link_jobs[q]
                    if mode[s] != _SEND or comp[s] >= first:
                        continue
                    if _crosses(s, net, over):
                        label += 1
                        k = _solve_set(
                            s, label, rule, net, flow, flow_sets, scratch, reweight, mltcp_steps
                        )
                        if k >= LOCAL_SET_FLOWS and over[x]:
                            break  # a cut set took x's nearest flows; the rest keep rates
                    else:
                        comp[s] = label
                        got[s] = demand[s]
        dt = t_goal - t
        for i in range(n):
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
        if t + dt >= t_goal:
            dt = t_goal - t
            t = t_goal
        else:
            t += dt
        for i in range(n):
            m = mode[i]
            if m == _IDLE:
                continue
            begin = False
            end = False
            if m == _WAIT:
                begin = until[i] <= t + _EPS
            elif m == _GAP:
                remaining[i] -= dt
                if remaining[i] <= _EPS:
                    mode[i] = _SEND
                    remaining[i] = bits[i, phase[i]]
                    d = peak[i, phase[i]]
                    demand[i] = d
                    got[i] = d
                    _join(i, d, link_ptr, link_idx, members, load)
                    n_changed = _mark(i, in_changed, changed, n_changed)
            else:
                remaining[i] -= got[i] * dt
                if lazy and remaining[i] <= reweight[i] + 1e-9 * bits[i, phase[i]]:
                    reweight[i] = -math.inf  # its weight is due: re-solve its set
                    n_changed = _mark(i, in_changed, changed, n_changed)
                if remaining[i] <= 1e-9 * bits[i, phase[i]]:  # stop sending
                    d = demand[i]
                    got[i] = 0.0
                    demand[i] = 0.0
                    _leave(i, d, link_ptr, link_idx, members, load)
                    n_changed = _mark(i, in_changed, changed, n_changed)
                    if phase[i] + 1 < n_phases[i]:
                        phase[i] += 1
                        mode[i] = _GAP
                        remaining[i] = gaps[i, phase[i]]
                    else:
                        end = True
            if end:
                count[i] += 1
                g = grid[i]
                busy = t - start_of[i]  # NaN for a cycle not seen from its start
                if count[i] >= target[i] or g != g:  # last or free-running: ends here
                    if busy == busy:
                        out_job[written] = i
                        out_time[written] = busy
                        out_busy[written] = busy
                        written += 1
                    if count[i] >= target[i]:  # the compute after the last cycle, then done
                        mode[i] = _WAIT
                        until[i] = t + tail[i]
                        continue
                    begin = True
                else:  # held: the cycle ends when the next slot begins
                    last_busy[i] = busy
                    if busy > g * (1 + tolerance / 2) and why == REACHED:
                        why = SLOW  # cannot keep its slots: the caller decides
                    slot[i] += 1
                    due = anchor[i] + slot[i] * g
                    if t > due + tolerance * g:  # too late: re-align to the next slot
                        slot[i] = math.ceil((t - anchor[i]) / g - 1e-9)
                        due = anchor[i] + slot[i] * g
                    if due > t + _EPS:
                        mode[i] = _WAIT
                        until[i] = due
                    else:
                        begin = True
            if begin and count[i] >= target[i]:
                mode[i] = _IDLE
                why = FINISHED
                continue
            if begin:
                if last_busy[i] == last_busy[i]:  # a held cycle, reported at its end
                    out_job[written] = i
                    out_time[written] = t - start_of[i]
                    out_busy[written] = last_busy[i]
                    written += 1
                    last_busy[i] = math.nan
                start_of[i] = t
                mode[i] = _GAP
                phase[i] = 0
                remaining[i] = gaps[i, 0]
        if why != REACHED:
            break
        if written + n > room:
            why = FULL
            break
    for x in range(n_links):  # excess up to now, so the caller can read it
        if over[x]:
            excess[x] += t - over_since[x]
            over_since[x] = t
    return t, events, why, written, n_changed > 0


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


class FlowState:
    """The continuous network state of the jobs that share links that can congest.

    ``links``: capacity per link (bits/s), in a fixed order; ``mltcp``: share full links
    by MLTCP's weights (None: max-min); ``classes``: whether jobs carry strict priority
    classes; ``tolerance``: a held job later than this share of its grid period waits
    for its next slot.  Under MLTCP a set is re-solved, with every member's F computed
    afresh, when a flow in it starts or stops or has sent ``1 / mltcp_steps`` of its
    iteration's bits since its F was last computed; ``mltcp_every_event`` re-solves
    every set at every event instead, as the window loop does: the same steps as it on
    sets within :data:`LOCAL_SET_FLOWS` (the tests' reference), but cut sets solved one
    after another against the others' previous rates drift (+3.7 % mean cycle time
    on a recorded 16k state), and it costs ~5x more."""

    def __init__(
        self,
        links: dict[str, float],
        *,
        mltcp: MltcpParams | None = None,
        classes: bool = False,
        tolerance: float = 0.05,
        mltcp_steps: int = 20,
        mltcp_every_event: bool = False,
        max_events: int = 1_000_000,
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
        slope_q, intercept_q, _, _, flags = mltcp.fixed() if mltcp else (0, ONE, 0, 0, 0)
        self.rule = (
            mltcp is not None,
            slope_q,
            intercept_q,
            bool(flags & FLAG_SCALE_CUT),
            mltcp is not None or classes,
        )
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
        floats = tuple(np.zeros(n) for _ in range(12))
        floats[4][:] = np.nan  # start_of
        floats[10][:] = np.nan  # last_busy
        floats[11][:] = -np.inf  # reweight: remaining bits at which MLTCP's F is due
        floats[3][:] = np.nan  # grid
        floats[7][:] = 1.0  # weight
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
        uid: int = -1,
    ) -> None:
        """Take a job in at the state's time: ``done`` iterations behind it, ``pos_s``
        seconds into its current cycle at dedicated pace (or stalled ``stall_s`` seconds
        first, then from a cycle's start); held to slots ``anchor_s + k * grid_s``
        (absolute seconds) unless ``grid_s`` is None; ``uid`` tags its cycles in
        :class:`Advanced`."""
        if not cycle.bits:
            raise ValueError(f"job {job_id}: a job without communication has no flow")
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
        weight[i] = 1.0
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
    def _link_jobs(self) -> tuple[np.ndarray, np.ndarray]:
        n, width = len(self.ints[0]), self.links2d.shape[1]
        flat = self.links2d.ravel()
        valid = flat >= 0
        jobs = np.repeat(np.arange(n, dtype=np.int64), width)[valid]
        order = np.argsort(flat[valid], kind="stable")
        counts = np.bincount(flat[valid], minlength=len(self.caps))
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return ptr, jobs[order]

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
            self._csr = self._link_jobs()
            self._rebuild = False
        room = max(4096, 4 * len(self.ints[0]))
        out_job = np.zeros(room, np.int64)
        out_time = np.zeros(room)
        out_busy = np.zeros(room)
        t, events, why, written, pending = _advance(
            self.t,
            float(t_goal),
            self.ints,
            self.floats,
            self.gaps,
            self.bits,
            self.peak,
            self.sent_before,
            self.links2d,
            self.caps,
            self.link_state,
            self._csr[0],
            self._csr[1],
            self.rule,
            self.mltcp_steps,
            self.mltcp_every_event,
            self.tolerance,
            self._dirty,
            self.max_events,
            out_job,
            out_time,
            out_busy,
            self._n,
        )
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
