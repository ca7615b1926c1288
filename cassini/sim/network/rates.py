"""The one rates kernel of the compiled network models: which sending flows meet on full
links, and their weighted max-min fair rates by progressive filling, class by class."""

from __future__ import annotations

import math

import numpy as np

from cassini import kernel_cache
from mltcp.policy import ONE, SHIFT

try:  # numba is in the [sim] extra; without it these run as plain Python
    from numba import njit
except ImportError:  # pragma: no cover - exercised where numba is absent
    njit = None

_EPS = 1e-12
#: a job's modes: waiting for its start or slot, computing (a gap), sending a phase
_WAIT, _GAP, _SEND = 0, 1, 2

AVAILABLE = njit is not None


def _identity(f):
    return f


if AVAILABLE:  # drop cached code another changed source made stale
    kernel_cache.ensure_fresh()
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
def _list_full_links(flows, k, cut, label, comp, net, flow, rem, links):
    """List in ``links`` the full links of the connected ``flows[:k]`` and set each
    one's capacity left (bits/s) in ``rem``: all of it, or for a ``cut`` set what the
    sending flows outside it (not labelled ``label``) leave at their current rates.
    Returns how many links."""
    link_ptr, link_idx, link_jobs_ptr, link_jobs, caps = net[0], net[1], net[2], net[3], net[4]
    mode, got, over = flow[0], flow[8], flow[9]
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
    return n_l


@_jit
def _next_class(flows, k, classes, level):
    """The lowest priority class above ``level`` among ``flows[:k]`` (-1: none)."""
    nxt = -1
    for a in range(k):
        c = classes[flows[a]]
        if c > level and (nxt < 0 or c < nxt):
            nxt = c
    return nxt


@_jit
def _open_class(flows, k, level, n_l, net, flow, scratch):
    """Start filling class ``level``: its flows open, each full link's summed weight
    and open flows counted.  Returns how many flows are open."""
    link_ptr, link_idx, classes = net[0], net[1], net[5]
    weight, over = flow[7], flow[9]
    fixed, _, _, wload, n_open, _, links = scratch
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
    return left


@_jit
def _fill(flows, k, general, net, flow, scratch, label, comp, limit):
    """Rates of the connected ``flows[:k]`` on their full links: weighted progressive
    filling, class by class (lowest number first), into ``got`` (in ``flow``).  A set
    of ``limit`` flows may have been cut (:func:`_component`): it shares what the sending
    flows outside it (not labelled ``label``) leave of each link at their current rates;
    a whole set has none outside.  Each round finds the lowest level (a full link's
    share per unit weight, or an open flow's demand over its weight) and fixes the flows
    that reach it."""
    link_ptr, link_idx, classes = net[0], net[1], net[5]
    demand, weight, got, over = flow[6], flow[7], flow[8], flow[9]
    fixed, tight, rem, wload, n_open, level_of, links = scratch
    cut = k >= limit
    floor = general or cut  # a starved flow keeps 1e-12 bits/s: no 0-division
    n_l = _list_full_links(flows, k, cut, label, comp, net, flow, rem, links)
    level = _next_class(flows, k, classes, -1)
    while level >= 0:
        left = _open_class(flows, k, level, n_l, net, flow, scratch)
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
            bound = low * (1 + 1e-9) + _EPS
            for a in range(k):
                i = flows[a]
                if classes[i] != level or fixed[i]:
                    continue
                hit = demand[i] / weight[i] <= bound
                if not hit:
                    for p in range(link_ptr[i], link_ptr[i + 1]):
                        x = link_idx[p]
                        if over[x] and level_of[x] <= bound:
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
                got[i] = max(r, _EPS) if floor else r
                for p in range(link_ptr[i], link_ptr[i + 1]):
                    x = link_idx[p]
                    if over[x]:
                        v = rem[x] - r
                        rem[x] = v if v > 0.0 else 0.0
                        wload[x] -= weight[i]
                        n_open[x] -= 1
        level = _next_class(flows, k, classes, level)
    for b in range(n_l):
        rem[links[b]] = 0.0


def kernel_rule(table: np.ndarray | None, general: bool) -> tuple[bool, np.ndarray, bool]:
    """The kernels' ``rule``: (flows weighted by progress, their weights' table
    (:func:`cassini.sim.parts.sharing.progress_table`; a placeholder without one), the
    general form of the fill), general whenever weights move or ``general`` says so
    (priority classes, shares other than 1)."""
    if table is None:
        return False, np.ones(1), general
    return True, table, True


@_jit
def _progress_weight(done_bits, per_iteration, table):
    """A flow's weight factor off its sharing rule's progress table
    (:func:`cassini.sim.parts.sharing.progress_table`) at MLTCP's fixed-point ratio of
    its iteration's bits sent, on bytes, exactly as the kernel programs compute it."""
    sent_q = int(math.floor(done_bits / 8.0))
    per_q = int(math.floor(per_iteration / 8.0))
    if per_q == 0 or sent_q <= 0:
        ratio = 0
    elif sent_q >= per_q:
        ratio = ONE
    else:
        ratio = (sent_q << SHIFT) // per_q
    return table[ratio]


@_jit
def _crosses(s, net, over):
    """Whether job ``s`` crosses a full link."""
    link_ptr, link_idx = net[0], net[1]
    for p in range(link_ptr[s], link_ptr[s + 1]):  # noqa: SIM110 (numba: no generators)
        if over[link_idx[p]]:
            return True
    return False


@_jit
def _scratch(n, n_links):
    """The rate solver's work arrays: ``(flow_sets, scratch)`` for :func:`_solve_set`
    (``n`` flows, ``n_links`` links)."""
    flow_sets = (np.full(n, -1, np.int64), np.zeros(n, np.int64))
    scratch = (
        np.zeros(n, np.bool_),
        np.zeros(n, np.bool_),
        np.zeros(n_links),
        np.zeros(n_links),
        np.zeros(n_links, np.int64),
        np.zeros(n_links),
        np.zeros(n_links, np.int64),
    )
    return flow_sets, scratch


@_jit
def _solve_set(s, label, rule, net, flow, flow_sets, scratch, limit=-1):
    """Rates of the set of sending flows connected to job ``s`` through full links
    (labelled ``label``; left in ``flow_sets[1][:k]``; cut at ``limit`` flows nearest
    ``s`` when ``limit`` > 0), weighted by each job's share (``net[6]``, its sharing
    rules' weight) times its progress weight when ``rule`` = (progress-weighted, the
    progress table, general form) says so.  Returns ``k``, the set's size."""
    if limit <= 0:
        limit = flow[0].shape[0] + 1  # never cut
    use_progress, table, general = rule
    link_ptr, link_idx, link_jobs_ptr, link_jobs, shares = net[0], net[1], net[2], net[3], net[6]
    mode, phase, remaining, sent_before, bits, per_iteration, demand, weight, got, over = flow
    comp, flows = flow_sets
    k = _component(
        s, mode, link_ptr, link_idx, link_jobs_ptr, link_jobs, over, comp, label, flows, limit
    )
    if use_progress:
        for a in range(k):
            i = flows[a]
            weight[i] = shares[i] * _progress_weight(
                sent_before[i, phase[i]] + bits[i, phase[i]] - remaining[i],
                per_iteration[i],
                table,
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
def next_slot(t, anchor, slot, grid, tolerance):
    """The slot rule of a held job (:class:`~cassini.sim.parts.timing.Timing`): it
    began slot ``slot`` of the grid ``anchor + k * grid`` (seconds) and ended that
    iteration at ``t`` (s).  Returns the slot it begins next and that slot's start (s):
    the next one, or, when ``t`` is more than ``tolerance`` periods past that slot's
    start, the first slot not yet begun (it re-aligns)."""
    slot += 1
    due = anchor + slot * grid
    if t > due + tolerance * grid:  # too late: re-align to the next slot
        slot = math.ceil((t - anchor) / grid - 1e-9)
        due = anchor + slot * grid
    return slot, due
