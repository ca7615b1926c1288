"""Test oracles of the simulator's network model: the original numpy event loop
(:func:`simulate_reference`) and exact max-min rates by progressive filling
(:func:`max_min_rates`), kept here so that the fast loops are checked against them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from cassini.errors import InputError
from cassini.sim.network.flows import FlowJob, NetworkResult, cycle_of
from cassini.sim.network.fluid import link_table
from cassini.sim.network.jitloop import MLTCP_STEPS
from cassini.sim.parts.sharing import mltcp_weight, shared_rates
from mltcp.policy import ONE, MltcpParams, ratio_q

_EPS = 1e-12
_WAIT, _GAP, _SEND = 0, 1, 2  # what a job is doing


def max_min_rates(
    demand_bps: Sequence[float],
    paths: Sequence[Sequence[int]],
    capacity_bps: Sequence[float],
) -> list[float]:
    """Max-min fair rates (bits/s) of flows capped at their demand (progressive filling).

    Parameters
    ----------
    demand_bps : each flow's cap in bits per second.
    paths : for each flow, the indices of the links it crosses.
    capacity_bps : each link's capacity in bits per second.

    Returns
    -------
    One rate per flow; on every link the rates sum to at most its capacity, and every
    flow is either at its demand or crosses a saturated link where no flow gets more.

    Example
    -------
    >>> max_min_rates([10, 10, 2], [[0], [0], [0]], [12])
    [5.0, 5.0, 2.0]
    """
    demand = np.asarray(demand_bps, float)
    crosses = np.zeros((len(demand), len(capacity_bps)), bool)
    for f, p in enumerate(paths):
        crosses[f, list(p)] = True
    return [float(r) for r in _max_min(demand, crosses, np.asarray(capacity_bps, float))]


def _water_fill(demand: np.ndarray, capacity: float) -> np.ndarray:
    """Max-min fair rates of flows sharing one link: everyone gets min(demand, level),
    the level filling the link exactly (closed form after a sort)."""
    d = np.sort(demand)
    k = len(d)
    before = np.concatenate([[0.0], np.cumsum(d)[:-1]])
    fits = before + d * (k - np.arange(k)) <= capacity
    if fits.all():
        return demand.astype(float)
    i = int(np.argmin(fits))
    return np.minimum(demand, (capacity - before[i]) / (k - i))


def _max_min(demand: np.ndarray, crosses: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Progressive filling: ``crosses[f, l]`` says flow f crosses link l.  Plain Python:
    the problems the simulator hands it are a few flows on a few links."""
    dem = demand.tolist()
    links_of: list[list[int]] = [[] for _ in dem]
    for f, link in zip(*(x.tolist() for x in np.nonzero(crosses)), strict=True):
        links_of[f].append(link)
    remaining = capacity.tolist()
    users = crosses.sum(axis=0).tolist()
    rate = [0.0] * len(dem)
    open_ = set(range(len(dem)))
    while open_:
        bound = {}
        for f in open_:
            b = dem[f]
            for link in links_of[f]:
                share = remaining[link] / users[link]
                if share < b:
                    b = share
            bound[f] = b
        low = min(bound.values())
        for f, b in bound.items():
            if b <= low * (1 + 1e-9) + _EPS:
                rate[f] = low
                open_.discard(f)
                for link in links_of[f]:
                    remaining[link] = max(0.0, remaining[link] - low)
                    users[link] -= 1
    return np.array(rate)


def simulate_reference(
    jobs: Sequence[FlowJob],
    capacity_bps: Mapping[str, float],
    *,
    horizon_s: float,
    warmup_s: float = 0.0,
    tolerance: float = 0.05,
    max_events: int = 2_000_000,
    mltcp: MltcpParams | None = None,
    on_step: Callable[[float, float, np.ndarray, np.ndarray], None] | None = None,
    progress: Callable[[float], float] | None = None,
) -> NetworkResult:
    """:func:`simulate` as first written: a numpy step per event.  The reference the
    fast loops are tested against (and timed against in
    ``benchmarks/bench_sim.py``)."""
    link_ids, index, caps = link_table(jobs, capacity_bps, horizon_s, warmup_s)
    cycles = [cycle_of(j.profile) for j in jobs]
    n, n_links = len(jobs), len(caps)
    width = max(1, max((len(c.bits) for c in cycles), default=1))
    gaps = np.zeros((n, width))
    bits = np.ones((n, width))
    peak = np.zeros((n, width))
    n_phases = np.array([len(c.bits) for c in cycles], int)
    for i, c in enumerate(cycles):
        gaps[i, : len(c.gaps_s)] = c.gaps_s
        bits[i, : len(c.bits)] = c.bits
        peak[i, : len(c.bits)] = c.rates_bps
    crosses = np.zeros((n, n_links), bool)
    for i, j in enumerate(jobs):
        crosses[i, [index[link] for link in j.path]] = True
    capacity = np.array(caps)
    rows = np.arange(n)
    classes = np.array([j.priority for j in jobs], int)
    shares = np.array([j.share for j in jobs], float)  # sharing rules' weights
    dynamic = mltcp is not None or progress is not None  # weights move as bytes go out
    general = dynamic or len(set(classes.tolist())) > 1 or bool((shares != 1).any())
    links_of = [[index[link] for link in j.path] for j in jobs]
    sent_before = np.zeros((n, width))  # bits sent in the cycle before each phase
    sent_before[:, 1:] = np.cumsum(bits * (peak > 0), axis=1)[:, :-1]
    per_iteration = np.array([sum(c.bits) for c in cycles])

    mode = np.full(n, _WAIT)  # what each job is doing
    until = np.array([max(0.0, j.anchor_s) for j in jobs])  # end of a wait, seconds
    remaining = np.zeros(n)  # seconds of compute (gap) or bits to send
    phase = np.zeros(n, int)  # index of the current phase in the cycle
    slot = [0] * n  # index of the current slot on the grid
    start_of = [math.nan] * n  # start of the current iteration, seconds
    times: list[list[float]] = [[] for _ in range(n)]
    busy: list[list[float]] = [[] for _ in range(n)]
    excess = np.zeros(n_links)
    carried = np.zeros(n_links)

    def begin_iteration(i: int, now: float) -> None:
        if start_of[i] >= warmup_s:
            times[i].append(now - start_of[i])
        start_of[i] = now
        mode[i], phase[i], remaining[i] = _GAP, 0, gaps[i, 0]

    def end_iteration(i: int, now: float) -> None:
        if start_of[i] >= warmup_s:
            busy[i].append(now - start_of[i])
        grid = jobs[i].grid_period_s
        if grid is None:
            begin_iteration(i, now)
            return
        slot[i] += 1
        due = jobs[i].anchor_s + slot[i] * grid
        if now > due + tolerance * grid:  # too late: re-align to the next slot
            slot[i] = math.ceil((now - jobs[i].anchor_s) / grid - 1e-9)
            due = jobs[i].anchor_s + slot[i] * grid
        if due > now + _EPS:
            mode[i], until[i] = _WAIT, due
        else:
            begin_iteration(i, now)

    # only links whose demand exceeds capacity can hold a flow below its demand, and the
    # same flows meet on them every period: solve each such meeting once
    seen: dict[bytes, np.ndarray] = {}
    t, events = 0.0, 0
    while t < horizon_s:
        events += 1
        if events > max_events:
            raise InputError("horizon_s", f"more than {max_events} events; shorten the window")
        sending = mode == _SEND
        active = np.flatnonzero(sending)
        demand = peak[active, phase[active]]
        on = crosses[active]
        over = demand @ on > capacity * (1 + 1e-9)
        got = demand
        step = math.inf
        if general and over.any():
            got, step = _general_rates(
                active,
                demand,
                on,
                over,
                capacity,
                phase,
                remaining,
                bits,
                sent_before,
                per_iteration,
                classes,
                links_of,
                shares,
                index_of_full=np.flatnonzero(over),
                mltcp=mltcp,
                progress=progress,
                seen=seen,
            )
        elif over.any():
            full = np.flatnonzero(over)
            meets = on[:, full]
            held = np.flatnonzero(meets.any(axis=1))
            got = demand.copy()
            if (meets[held].sum(axis=1) == 1).all():  # independent links: fill each
                column = meets[held].argmax(axis=1)
                for c, link in enumerate(full):
                    fs = held[column == c]
                    key = link.tobytes() + active[fs].tobytes() + phase[active[fs]].tobytes()
                    fair = seen.get(key)
                    if fair is None:
                        fair = seen[key] = _water_fill(demand[fs], capacity[link])
                    got[fs] = fair
            else:
                key = active[held].tobytes() + phase[active[held]].tobytes()
                fair = seen.get(key)
                if fair is None:
                    fair = seen[key] = _max_min(demand[held], meets[held], capacity[full])
                got[held] = fair
        waiting = mode == _WAIT
        left = remaining.copy()
        left[active] /= got
        left[waiting] = until[waiting] - t
        dt = max(0.0, min(horizon_s - t, float(left.min()) if n else math.inf, step))
        if on_step is not None and dt > 0:
            on_step(t, dt, active, got)
        lo, hi = max(t, warmup_s), min(t + dt, horizon_s)
        if hi > lo and len(active):
            excess += over * (hi - lo)
            carried += (got @ on) * (hi - lo)
        t += dt
        if t >= horizon_s:
            break
        gap = mode == _GAP
        remaining[gap] -= dt
        remaining[active] -= got * dt
        due = np.flatnonzero(
            (waiting & (until <= t + _EPS))
            | (gap & (remaining <= _EPS))
            | (sending & (remaining <= 1e-9 * bits[rows, phase]))
        )
        for i in due:
            if mode[i] == _WAIT:
                begin_iteration(i, t)
            elif mode[i] == _GAP:
                if n_phases[i]:
                    mode[i], remaining[i] = _SEND, bits[i, phase[i]]
                else:
                    end_iteration(i, t)
            elif phase[i] + 1 < n_phases[i]:
                phase[i] += 1
                mode[i], remaining[i] = _GAP, gaps[i, phase[i]]
            else:
                end_iteration(i, t)
    return NetworkResult(
        iteration_times_s={j.job_id: tuple(map(float, times[i])) for i, j in enumerate(jobs)},
        busy_s={j.job_id: tuple(map(float, busy[i])) for i, j in enumerate(jobs)},
        excess_s={link: float(excess[index[link]]) for link in link_ids},
        carried_bits={link: float(carried[index[link]]) for link in link_ids},
        window_s=horizon_s - warmup_s,
        events=events,
    )


def _general_rates(
    active: np.ndarray,
    demand: np.ndarray,
    on: np.ndarray,
    over: np.ndarray,
    capacity: np.ndarray,
    phase: np.ndarray,
    remaining: np.ndarray,
    bits: np.ndarray,
    sent_before: np.ndarray,
    per_iteration: np.ndarray,
    classes: np.ndarray,
    links_of: list[list[int]],
    shares: np.ndarray,
    *,
    index_of_full: np.ndarray,
    mltcp: MltcpParams | None,
    progress: Callable[[float], float] | None,
    seen: dict[bytes, np.ndarray],
) -> tuple[np.ndarray, float]:
    """Rates of the active flows under share weights (``shares``, per job), MLTCP's
    weights, progress weights (``progress`` at the fixed-point ratio of the iteration's
    bytes sent) and/or strict priority, and the longest step (s) before the weights must
    be re-solved (inf when they do not move)."""
    meets = on[:, index_of_full]
    held = np.flatnonzero(meets.any(axis=1))
    jobs = active[held]
    got = demand.copy()
    full_set = {int(x): k for k, x in enumerate(index_of_full)}
    paths = [[full_set[link] for link in links_of[i] if link in full_set] for i in jobs]
    if mltcp is None and progress is None:
        key = jobs.tobytes() + phase[jobs].tobytes()
        fair = seen.get(key)
        if fair is None:
            fair = seen[key] = np.array(
                shared_rates(
                    demand[held], paths, capacity[index_of_full], weights=shares[jobs],
                    classes=classes[jobs],
                )  # fmt: skip
            )
        got[held] = fair
        got[held] = np.maximum(got[held], _EPS)  # a starved class: no 0-division later
        return got, math.inf
    sent = sent_before[jobs, phase[jobs]] + bits[jobs, phase[jobs]] - remaining[jobs]
    weights = [
        float(w)
        * (1.0 if mltcp is None else mltcp_weight(float(s), float(b), mltcp))
        * (1.0 if progress is None else progress(ratio_q(int(s // 8), int(b // 8)) / ONE))
        for s, b, w in zip(sent, per_iteration[jobs], shares[jobs], strict=True)
    ]
    got[held] = shared_rates(
        demand[held], paths, capacity[index_of_full], weights=weights, classes=classes[jobs]
    )
    got[held] = np.maximum(got[held], _EPS)  # a starved class: no 0-division later
    step = float(np.min(per_iteration[jobs] / MLTCP_STEPS / got[held]))
    return got, step
