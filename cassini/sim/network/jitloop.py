"""The network model's event loop compiled with numba: the steps of
:func:`cassini.sim.network.flowloop.run_events` on numpy arrays.

The simulator's groups are up to a few dozen free-running jobs whose phases never line
up the same way twice, so a whole run is about a million events, each re-solving the
rates of the flows that meet on full links.  In plain Python an event costs ~100 us;
compiled it costs ~1 us.

Per event: when a flow started or stopped (or always, under MLTCP, whose weights change
as bytes go out), every sending flow gets its demand, the links whose summed demand
exceeds capacity are marked full, the sending flows that cross full links are split into
sets connected through full links, and each set gets weighted max-min fair rates on its
full links by progressive filling, class by class (strict priority, class 0 first).
Without MLTCP or priority classes the weights are 1 (plain max-min fair); with priority
classes or MLTCP a starved flow keeps 1e-12 bits/s so no division is by zero.

The first call compiles the loop (a few seconds) and caches the machine code in
``__pycache__`` for later processes.  Pure logic: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from cassini.sim.network.flowloop import LoopResult
from mltcp.policy import FLAG_SCALE_CUT, ONE, SHIFT, U32_MAX, MltcpParams

try:  # numba is in the [sim] extra; cassini.sim.network falls back to the Python loop
    from numba import njit
except ImportError:  # pragma: no cover - exercised where numba is absent
    njit = None

_EPS = 1e-12
_WAIT, _GAP, _SEND = 0, 1, 2
#: results of the compiled loop that are not event counts
_TOO_MANY_EVENTS, _OUT_OF_ROOM = -1, -2

AVAILABLE = njit is not None


def _identity(f):
    return f


_jit = njit(cache=True, nogil=True) if AVAILABLE else _identity


@_jit
def _component(
    s, mode, link_ptr, link_idx, link_jobs_ptr, link_jobs, over, comp, label, flows, limit
):
    """Label ``label`` on the sending jobs connected to job ``s`` through full links,
    breadth first (the nearest first), at most ``limit`` of them; they go into
    ``flows``, in index order.  Returns how many."""
    comp[s] = label
    flows[0] = s
    head, tail = 0, 1
    while head < tail and tail < limit:
        i = flows[head]
        head += 1
        for p in range(link_ptr[i], link_ptr[i + 1]):
            x = link_idx[p]
            if not over[x]:
                continue
            for q in range(link_jobs_ptr[x], link_jobs_ptr[x + 1]):
                j = link_jobs[q]
                if mode[j] == _SEND and comp[j] != label and tail < limit:
                    comp[j] = label
                    flows[tail] = j
                    tail += 1
    for a in range(1, tail):  # insertion sort: the sets are small
        v = flows[a]
        b = a - 1
        while b >= 0 and flows[b] > v:
            flows[b + 1] = flows[b]
            b -= 1
        flows[b + 1] = v
    return tail


@_jit
def _fill(flows, k, general, net, flow, scratch, label, comp, limit):
    """Rates of the connected ``flows[:k]`` on their full links: weighted progressive
    filling, class by class (lowest number first), into ``got`` (in ``flow``).  A set
    of ``limit`` flows may have been cut (:func:`_component`): it shares what the sending
    flows outside it (not labelled ``label`` in ``comp``) leave of each link at their
    current rates; a whole set has none outside."""
    link_ptr, link_idx, link_jobs_ptr, link_jobs, caps, classes = net
    mode, _, _, _, _, _, demand, weight, got, over = flow
    cut = k >= limit
    fixed, tight, rem, wload, n_open, level_of, links = scratch
    n_l = 0
    for a in range(k):
        i = flows[a]
        for p in range(link_ptr[i], link_ptr[i + 1]):
            x = link_idx[p]
            if over[x] and rem[x] != -1.0:
                rem[x] = -1.0  # marks x as listed
                links[n_l] = x
                n_l += 1
    for b in range(n_l):
        x = links[b]
        r = caps[x]
        if cut:  # flows outside keep their rates
            for q in range(link_jobs_ptr[x], link_jobs_ptr[x + 1]):
                j = link_jobs[q]
                if mode[j] == _SEND and comp[j] != label:
                    r -= got[j]
        rem[x] = r if r > 0.0 else 0.0
    level = -1
    while True:
        nxt = -1
        for a in range(k):
            c = classes[flows[a]]
            if c > level and (nxt < 0 or c < nxt):
                nxt = c
        if nxt < 0:
            break
        level = nxt
        for b in range(n_l):
            wload[links[b]] = 0.0
            n_open[links[b]] = 0
        left = 0
        for a in range(k):
            i = flows[a]
            if classes[i] != level:
                continue
            fixed[i] = False
            left += 1
            for p in range(link_ptr[i], link_ptr[i + 1]):
                x = link_idx[p]
                if over[x]:
                    wload[x] += weight[i]
                    n_open[x] += 1
        while left > 0:
            low = math.inf
            for b in range(n_l):
                x = links[b]
                if n_open[x] > 0:
                    lv = rem[x] / wload[x]
                    level_of[x] = lv
                    if lv < low:
                        low = lv
                else:
                    level_of[x] = math.inf
            for a in range(k):
                i = flows[a]
                if classes[i] == level and not fixed[i]:
                    b_i = demand[i] / weight[i]
                    if b_i < low:
                        low = b_i
            limit = low * (1 + 1e-9) + _EPS
            for a in range(k):
                i = flows[a]
                if classes[i] != level or fixed[i]:
                    continue
                hit = demand[i] / weight[i] <= limit
                if not hit:
                    for p in range(link_ptr[i], link_ptr[i + 1]):
                        x = link_idx[p]
                        if over[x] and level_of[x] <= limit:
                            hit = True
                            break
                tight[i] = hit
            for a in range(k):
                i = flows[a]
                if classes[i] != level or fixed[i] or not tight[i]:
                    continue
                fixed[i] = True
                left -= 1
                r = low * weight[i]
                got[i] = max(r, _EPS) if general or cut else r
                for p in range(link_ptr[i], link_ptr[i + 1]):
                    x = link_idx[p]
                    if over[x]:
                        v = rem[x] - r
                        rem[x] = v if v > 0.0 else 0.0
                        wload[x] -= weight[i]
                        n_open[x] -= 1
    for b in range(n_l):
        rem[links[b]] = 0.0


@_jit
def _mltcp_weight(done_bits, per_iteration, slope_q, intercept_q, scale_cut):
    """MLTCP's share weight (:func:`cassini.sim.parts.sharing.mltcp_weight`, the
    kernel's fixed-point rule on bytes)."""
    sent_q = int(math.floor(done_bits / 8.0))
    per_q = int(math.floor(per_iteration / 8.0))
    if per_q == 0:
        ratio = 0
    elif sent_q >= per_q:
        ratio = ONE
    else:
        ratio = (sent_q << SHIFT) // per_q
    f = ((intercept_q + ((slope_q * ratio) >> SHIFT)) & U32_MAX) / ONE
    return f * f if scale_cut else f


@_jit
def _crosses(s, net, over):
    """Whether job ``s`` crosses a full link."""
    link_ptr, link_idx = net[0], net[1]
    for p in range(link_ptr[s], link_ptr[s + 1]):  # noqa: SIM110 (numba: no generators)
        if over[link_idx[p]]:
            return True
    return False


@_jit
def _solve_set(s, label, rule, net, flow, flow_sets, scratch, limit=-1):
    """Rates of the set of sending flows connected to job ``s`` through full links
    (labelled ``label``; left in ``flow_sets[1][:k]``; cut at ``limit`` flows nearest
    ``s`` when ``limit`` > 0), weighted by MLTCP's F when ``rule`` says so.  Returns
    ``k``, the set's size."""
    if limit <= 0:
        limit = flow[0].shape[0] + 1  # never cut
    use_mltcp, slope_q, intercept_q, scale_cut, general = rule
    link_ptr, link_idx, link_jobs_ptr, link_jobs, caps, classes = net
    mode, phase, remaining, sent_before, bits, per_iteration, demand, weight, got, over = flow
    comp, flows = flow_sets
    k = _component(
        s, mode, link_ptr, link_idx, link_jobs_ptr, link_jobs, over, comp, label, flows, limit
    )
    if use_mltcp:
        for a in range(k):
            i = flows[a]
            weight[i] = _mltcp_weight(
                sent_before[i, phase[i]] + bits[i, phase[i]] - remaining[i],
                per_iteration[i],
                slope_q,
                intercept_q,
                scale_cut,
            )
    _fill(flows, k, general, net, flow, scratch, label, comp, limit)
    return k


@_jit
def _mark(i, in_changed, changed, n_changed):
    """Put flow ``i`` on the list of flows that started or stopped since the last
    solve (once); returns the list's new length."""
    if not in_changed[i]:
        in_changed[i] = True
        changed[n_changed] = i
        n_changed += 1
    return n_changed


@_jit
def _join(i, d, link_ptr, link_idx, members, load):
    """Flow ``i`` starts sending: its demand ``d`` (bits/s) joins each of its links."""
    for p in range(link_ptr[i], link_ptr[i + 1]):
        x = link_idx[p]
        members[x] += 1
        load[x] += d


@_jit
def _leave(i, d, link_ptr, link_idx, members, load):
    """Flow ``i`` stops sending: its demand ``d`` leaves its links (a link left with
    no sender carries exactly 0)."""
    for p in range(link_ptr[i], link_ptr[i + 1]):
        x = link_idx[p]
        members[x] -= 1
        load[x] = load[x] - d if members[x] > 0 else 0.0


@_jit
def _loop(
    gaps,
    bits,
    peak,
    n_phases,
    sent_before,
    per_iteration,
    link_ptr,
    link_idx,
    link_jobs_ptr,
    link_jobs,
    caps,
    anchors,
    grids,
    classes,
    general,
    use_mltcp,
    slope_q,
    intercept_q,
    scale_cut,
    mltcp_steps,
    horizon_s,
    warmup_s,
    tolerance,
    max_events,
    times,
    n_times,
    busy,
    n_busy,
    excess,
    carried,
):
    """The event loop (see the module docstring).  Jobs' phases are rows of ``gaps``,
    ``bits`` and ``peak`` (s, bits, bits/s); each job's links are
    ``link_idx[link_ptr[i]:link_ptr[i + 1]]`` and each link's jobs
    ``link_jobs[link_jobs_ptr[x]:link_jobs_ptr[x + 1]]``; ``grids`` holds NaN for a
    free-running job.  Fills ``times``/``busy`` (per job, the first ``n_times``/``n_busy``
    entries), ``excess`` and ``carried``.  Returns the number of events, or
    ``_TOO_MANY_EVENTS`` / ``_OUT_OF_ROOM`` (more iterations than ``times`` holds).

    Without MLTCP, rates change only when a flow starts or stops, and only for the flows
    it reaches through links that are (or were) full: only those sets are re-solved
    (with MLTCP every set is, every event)."""
    n = gaps.shape[0]
    n_links = caps.shape[0]
    room = times.shape[1]
    over_cap = caps * (1 + 1e-9)
    mode = np.zeros(n, np.int64)
    until = np.maximum(anchors, 0.0)
    remaining = np.zeros(n)
    phase = np.zeros(n, np.int64)
    slot = np.zeros(n, np.int64)
    start_of = np.full(n, np.nan)
    demand = np.zeros(n)
    got = np.zeros(n)
    sent = np.zeros(n)
    weight = np.ones(n)
    load = np.zeros(n_links)
    members = np.zeros(n_links, np.int64)
    over = np.zeros(n_links, np.bool_)
    # scratch for the rate solver
    comp = np.full(n, -1, np.int64)
    flows = np.zeros(n, np.int64)
    fixed = np.zeros(n, np.bool_)
    tight = np.zeros(n, np.bool_)
    changed = np.zeros(n, np.int64)  # jobs that started or stopped sending since the last solve
    in_changed = np.zeros(n, np.bool_)
    n_changed = 0
    reach = np.zeros(n_links, np.int64)  # changed links that are or were full
    in_reach = np.zeros(n_links, np.bool_)
    rem = np.zeros(n_links)
    wload = np.zeros(n_links)
    n_open = np.zeros(n_links, np.int64)
    level_of = np.zeros(n_links)
    links = np.zeros(n_links, np.int64)
    net = (link_ptr, link_idx, link_jobs_ptr, link_jobs, caps, classes)
    flow = (mode, phase, remaining, sent_before, bits, per_iteration, demand, weight, got, over)
    flow_sets = (comp, flows)
    scratch = (fixed, tight, rem, wload, n_open, level_of, links)
    rule = (use_mltcp, slope_q, intercept_q, scale_cut, general)
    label = 0
    t = 0.0
    events = 0
    while t < horizon_s:
        events += 1
        if events > max_events:
            return _TOO_MANY_EVENTS
        step = math.inf
        if use_mltcp:  # weights change as bytes go out: every set, every event
            for c in range(n_changed):
                i = changed[c]
                in_changed[i] = False
                for p in range(link_ptr[i], link_ptr[i + 1]):
                    x = link_idx[p]
                    over[x] = load[x] > over_cap[x]
            n_changed = 0
            for i in range(n):
                if mode[i] == _SEND:
                    got[i] = demand[i]
            label += 1
            for s in range(n):
                if mode[s] != _SEND or comp[s] == label or not _crosses(s, net, over):
                    continue
                k = _solve_set(s, label, rule, net, flow, flow_sets, scratch)
                for a in range(k):
                    i = flows[a]
                    s_step = per_iteration[i] / mltcp_steps / got[i]
                    if s_step < step:
                        step = s_step
        elif n_changed > 0:
            # only links of the flows that started or stopped change state, and only
            # those that are or were full pass a change on: every flow whose rate can
            # change is in the set, through full links, of a sending flow on one of them
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
            n_changed = 0
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
        dt = horizon_s - t
        any_sending = False
        for i in range(n):
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
        if any_sending:
            lo = max(t, warmup_s)
            hi = min(t + dt, horizon_s)
            if hi > lo:
                w = hi - lo
                for x in range(n_links):
                    if over[x]:
                        excess[x] += w
                for i in range(n):
                    if mode[i] == _SEND:
                        sent[i] += got[i] * w
        t += dt
        if t >= horizon_s:
            break
        for i in range(n):
            m = mode[i]
            begin = False
            end = False
            if m == _WAIT:
                begin = until[i] <= t + _EPS
            elif m == _GAP:
                remaining[i] -= dt
                if remaining[i] <= _EPS:
                    if n_phases[i] > 0:  # start sending the current phase
                        mode[i] = _SEND
                        remaining[i] = bits[i, phase[i]]
                        d = peak[i, phase[i]]
                        demand[i] = d
                        got[i] = d
                        _join(i, d, link_ptr, link_idx, members, load)
                        n_changed = _mark(i, in_changed, changed, n_changed)
                    else:
                        end = True
            else:
                remaining[i] -= got[i] * dt
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
                if start_of[i] >= warmup_s:
                    if n_busy[i] >= room:
                        return _OUT_OF_ROOM
                    busy[i, n_busy[i]] = t - start_of[i]
                    n_busy[i] += 1
                grid = grids[i]
                if grid != grid:  # free-running
                    begin = True
                else:
                    slot[i] += 1
                    due = anchors[i] + slot[i] * grid
                    if t > due + tolerance * grid:  # too late: re-align to the next slot
                        slot[i] = math.ceil((t - anchors[i]) / grid - 1e-9)
                        due = anchors[i] + slot[i] * grid
                    if due > t + _EPS:
                        mode[i] = _WAIT
                        until[i] = due
                    else:
                        begin = True
            if begin:
                if start_of[i] >= warmup_s:
                    if n_times[i] >= room:
                        return _OUT_OF_ROOM
                    times[i, n_times[i]] = t - start_of[i]
                    n_times[i] += 1
                start_of[i] = t
                mode[i] = _GAP
                phase[i] = 0
                remaining[i] = gaps[i, 0]
    for i in range(n):
        for p in range(link_ptr[i], link_ptr[i + 1]):
            carried[link_idx[p]] += sent[i]
    return events


def run_events_compiled(
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
    mltcp_steps: int,
):
    """:func:`cassini.sim.network.flowloop.run_events`'s inputs and result
    (:class:`cassini.sim.network.flowloop.LoopResult`), stepped by the compiled
    loop.  Returns None when ``max_events`` is exceeded."""
    n = len(cycles)
    width = max(1, max((len(c.bits) for c in cycles), default=1))
    gaps = np.zeros((n, width))
    bits = np.ones((n, width))
    peak = np.zeros((n, width))
    n_phases = np.zeros(n, np.int64)
    sent_before = np.zeros((n, width))
    per_iteration = np.zeros(n)
    shortest = math.inf
    for i, c in enumerate(cycles):
        gaps[i, : len(c.gaps_s)] = c.gaps_s
        bits[i, : len(c.bits)] = c.bits
        peak[i, : len(c.bits)] = c.rates_bps
        n_phases[i] = len(c.bits)
        sent_before[i, : len(c.bits)] = np.concatenate([[0.0], np.cumsum(c.bits)[:-1]])[
            : len(c.bits)
        ]
        per_iteration[i] = float(sum(c.bits))
        shortest = min(shortest, c.iteration_time_s)
    n_links = len(caps)
    link_ptr = np.zeros(n + 1, np.int64)
    for i, p in enumerate(links_of):
        link_ptr[i + 1] = link_ptr[i] + len(p)
    link_idx = np.array([x for p in links_of for x in p], np.int64)
    on_link: list[list[int]] = [[] for _ in range(n_links)]
    for i, p in enumerate(links_of):
        for x in p:
            on_link[x].append(i)
    link_jobs_ptr = np.zeros(n_links + 1, np.int64)
    for x, js in enumerate(on_link):
        link_jobs_ptr[x + 1] = link_jobs_ptr[x] + len(js)
    link_jobs = np.array([i for js in on_link for i in js], np.int64)
    slope_q, intercept_q, _, _, flags = mltcp.fixed() if mltcp is not None else (0, ONE, 0, 0, 0)
    general = mltcp is not None or len(set(classes)) > 1
    # iterations take at least the shortest dedicated iteration time: room for them all,
    # grown if a degenerate profile needs more
    room = int(min(horizon_s / max(shortest, 1e-6), 1e6)) + 4 if n else 1
    while True:
        times = np.zeros((n, room))
        busy = np.zeros((n, room))
        n_times = np.zeros(n, np.int64)
        n_busy = np.zeros(n, np.int64)
        excess = np.zeros(n_links)
        carried = np.zeros(n_links)
        events = _loop(
            gaps,
            bits,
            peak,
            n_phases,
            sent_before,
            per_iteration,
            link_ptr,
            link_idx,
            link_jobs_ptr,
            link_jobs,
            np.asarray(caps, float),
            np.asarray(anchors, float),
            np.array([math.nan if g is None else g for g in grids], float),
            np.asarray(classes, np.int64),
            general,
            mltcp is not None,
            slope_q,
            intercept_q,
            bool(flags & FLAG_SCALE_CUT),
            float(mltcp_steps),
            float(horizon_s),
            float(warmup_s),
            float(tolerance),
            int(max_events),
            times,
            n_times,
            busy,
            n_busy,
            excess,
            carried,
        )
        if events != _OUT_OF_ROOM:
            break
        room *= 4
    if events == _TOO_MANY_EVENTS:
        return None
    return LoopResult(
        [times[i, : n_times[i]].tolist() for i in range(n)],
        [busy[i, : n_busy[i]].tolist() for i in range(n)],
        excess.tolist(),
        carried.tolist(),
        int(events),
    )
