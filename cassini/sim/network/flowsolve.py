"""The continuous model's re-solves: which links flipped full or free, and the rates of
the sets of sending flows a change reaches (:mod:`cassini.sim.network.rates`).  Pure
logic: no I/O.
"""

from __future__ import annotations

import math

from cassini.sim.network.rates import _SEND, _crosses, _jit
from cassini.sim.network.rates import _solve_set as _solve_window_set

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
def _resolve_all(t, label, over_cap, link_state, ctx):
    """The state was changed from outside: every link's flag, every set's rates.
    Returns the last label used."""
    net, flow, solver, rule, reweight, steps = ctx
    mode, demand, got, over = flow[0], flow[6], flow[8], flow[9]
    flow_sets, scratch = solver
    comp = flow_sets[0]
    load = link_state[0]
    for x in range(over_cap.shape[0]):
        now_over = load[x] > over_cap[x]
        _flip(x, now_over, t, link_state)
    label += 1
    first = label  # sets of this step get labels from here on
    for s in range(mode.shape[0]):
        if mode[s] != _SEND or comp[s] >= first:
            continue
        if _crosses(s, net, over):
            label += 1
            _solve_set(s, label, rule, net, flow, flow_sets, scratch, reweight, steps)
        else:
            comp[s] = label
            got[s] = demand[s]
    return label


@_jit
def _resolve_eager(t, label, n_changed, marks, over_cap, link_state, ctx):
    """MLTCP re-solved at every event: the changed flows' links flip, then every set.
    Returns (the last label used, the longest step (s) before weights are due)."""
    net, flow, solver, rule, reweight, steps = ctx
    link_ptr, link_idx = net[0], net[1]
    mode, demand, got, over, per_iteration = flow[0], flow[6], flow[8], flow[9], flow[5]
    flow_sets, scratch = solver
    comp, flows = flow_sets
    changed, in_changed = marks
    load = link_state[0]
    for c in range(n_changed):
        i = changed[c]
        in_changed[i] = False
        for p in range(link_ptr[i], link_ptr[i + 1]):
            x = link_idx[p]
            now_over = load[x] > over_cap[x]
            _flip(x, now_over, t, link_state)
    label += 1
    first = label
    step = math.inf
    for s in range(mode.shape[0]):
        if mode[s] != _SEND or comp[s] >= first:
            continue
        if not _crosses(s, net, over):
            got[s] = demand[s]
            continue
        label += 1
        k = _solve_set(s, label, rule, net, flow, flow_sets, scratch, reweight, steps)
        for a in range(k):
            i = flows[a]
            s_step = per_iteration[i] / steps / got[i]
            if s_step < step:
                step = s_step
    return label, step


@_jit
def _reach_of(t, n_changed, marks, reach, over_cap, link_state, net):
    """Flip the changed flows' links and list in ``reach[0]`` those that are or were
    full (a change passes on through them).  Returns how many."""
    link_ptr, link_idx = net[0], net[1]
    changed = marks[0]
    reach_links, in_reach = reach
    load, over = link_state[0], link_state[2]
    n_reach = 0
    for c in range(n_changed):
        i = changed[c]
        for p in range(link_ptr[i], link_ptr[i + 1]):
            x = link_idx[p]
            now_over = load[x] > over_cap[x]
            if (over[x] or now_over) and not in_reach[x]:
                in_reach[x] = True
                reach_links[n_reach] = x
                n_reach += 1
            _flip(x, now_over, t, link_state)
    return n_reach


@_jit
def _resolve_changed(t, label, n_changed, marks, reach, over_cap, link_state, ctx):
    """Rates after flows started or stopped: the set of each flow that started (nearest
    first), then the sets a change reaches through links that are or were full.
    Returns the last label used."""
    net, flow, solver, rule, reweight, steps = ctx
    link_jobs_ptr, link_jobs = net[2], net[3]
    mode, demand, got, over = flow[0], flow[6], flow[8], flow[9]
    flow_sets, scratch = solver
    comp = flow_sets[0]
    changed, in_changed = marks
    n_reach = _reach_of(t, n_changed, marks, reach, over_cap, link_state, net)
    label += 1
    first = label  # each set its own label: a cut set's outside is every other
    for c in range(n_changed):  # a flow that started: its set, nearest first
        i = changed[c]
        in_changed[i] = False
        if mode[i] == _SEND and comp[i] < first and _crosses(i, net, over):
            label += 1
            _solve_set(i, label, rule, net, flow, flow_sets, scratch, reweight, steps)
    for r in range(n_reach):
        x = reach[0][r]
        reach[1][x] = False
        for q in range(link_jobs_ptr[x], link_jobs_ptr[x + 1]):
            s = link_jobs[q]
            if mode[s] != _SEND or comp[s] >= first:
                continue
            if _crosses(s, net, over):
                label += 1
                k = _solve_set(s, label, rule, net, flow, flow_sets, scratch, reweight, steps)
                if k >= LOCAL_SET_FLOWS and over[x]:
                    break  # a cut set took x's nearest flows; the rest keep rates
            else:
                comp[s] = label
                got[s] = demand[s]
    return label
