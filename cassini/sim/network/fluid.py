"""Flow-level network model: each job's iteration time when jobs share links."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from cassini.errors import InputError
from cassini.sim.network import jitloop
from cassini.sim.network.flows import FlowJob, NetworkResult, cycle_of
from cassini.sim.parts.timing import AGENT_TOLERANCE
from mltcp.policy import MltcpParams

_EPS = 1e-12


def simulate(
    jobs: Sequence[FlowJob],
    capacity_bps: Mapping[str, float],
    *,
    horizon_s: float,
    warmup_s: float = 0.0,
    tolerance: float = AGENT_TOLERANCE,
    max_events: int = 2_000_000,
    mltcp: MltcpParams | None = None,
    on_step: Callable[[float, float, np.ndarray, np.ndarray], None] | None = None,
    progress: Callable[[float], float] | None = None,
) -> NetworkResult:
    """Run the fluid model of ``jobs`` sharing links until ``horizon_s`` seconds.

    Parameters
    ----------
    jobs : the jobs, each with its path and pacing (see :class:`FlowJob`).
    capacity_bps : capacity of every link a path names, bits per second.
    horizon_s : length of the simulated window, seconds.
    warmup_s : iterations starting before this are not reported, nor is excess demand
        or carried traffic before it.
    tolerance : a job on a slot grid that is later than ``tolerance`` of its grid period
        waits for its next slot (the agent's re-alignment); within it, it starts late.
    max_events : guard against runaway simulations.
    mltcp : share full links by MLTCP's weights with these parameters (None: max-min).
        Jobs' ``priority`` classes, when they differ, are served strictly per link.
    progress : a flow's weight factor (> 0) by ``x``, the fraction of its iteration's
        bytes sent (read at MLTCP's fixed-point ratio), times MLTCP's F under ``mltcp``;
        a sharing rule's ``progress`` (:class:`cassini.sim.parts.sharing.Sharing`).
    on_step : optional observer, called as ``on_step(t, dt, sending, rates_bps)`` for
        every step of the whole window, in order, once the loop has run: the indices
        (into ``jobs``) of the jobs sending from ``t`` for ``dt`` seconds and their
        rates.  For reports; None costs nothing.

    Returns
    -------
    NetworkResult

    Raises
    ------
    InputError for a path naming an unknown link, a duplicate job id, or a bad window.

    The event loop is :func:`cassini.sim.network.jitloop.run_events` (compiled with
    numba where it is installed, else plain Python); ``simulate_reference`` in
    ``tests/helpers/sim_oracle.py`` is the original numpy loop, kept as its reference.
    """
    link_ids, index, caps = link_table(jobs, capacity_bps, horizon_s, warmup_s)
    args = (
        [cycle_of(j.profile) for j in jobs],
        [[index[link] for link in j.path] for j in jobs],
        caps,
        [j.anchor_s for j in jobs],
        [j.grid_period_s for j in jobs],
        [j.priority for j in jobs],
    )
    kw = dict(
        horizon_s=horizon_s,
        warmup_s=warmup_s,
        tolerance=tolerance,
        max_events=max_events,
        mltcp=mltcp,
        progress=progress,
    )
    shares = [j.share for j in jobs]
    out = jitloop.run_events(*args, **kw, record_steps=on_step is not None, shares=shares)
    if out is None:
        raise InputError("horizon_s", f"more than {max_events} events; shorten the window")
    if on_step is not None:
        replay_steps(out.steps, on_step)
    return NetworkResult(
        iteration_times_s={j.job_id: tuple(out.times[i]) for i, j in enumerate(jobs)},
        busy_s={j.job_id: tuple(out.busy[i]) for i, j in enumerate(jobs)},
        excess_s={link: float(out.excess[index[link]]) for link in link_ids},
        carried_bits={link: float(out.carried[index[link]]) for link in link_ids},
        window_s=horizon_s - warmup_s,
        events=out.events,
    )


def replay_steps(
    steps: np.ndarray, on_step: Callable[[float, float, np.ndarray, np.ndarray], None]
) -> None:
    """Call ``on_step(t, dt, sending, rates_bps)`` for each row of the loop's ``steps``
    (start s, length s, each job's rate or NaN when it is not sending)."""
    for row in steps:
        rates = row[2:]
        sending = np.flatnonzero(~np.isnan(rates))
        on_step(float(row[0]), float(row[1]), sending, rates[sending])


def link_table(
    jobs: Sequence[FlowJob], capacity_bps: Mapping[str, float], horizon_s: float, warmup_s: float
) -> tuple[list[str], dict[str, int], list[float]]:
    """Check the inputs; the links the paths name (sorted), their indices and
    capacities (bits/s)."""
    if not (horizon_s > 0 and 0 <= warmup_s < horizon_s):
        raise InputError(
            "horizon_s", f"need 0 <= warmup_s < horizon_s, got {warmup_s}, {horizon_s}"
        )
    link_ids = sorted({link for j in jobs for link in j.path})
    index = {link: i for i, link in enumerate(link_ids)}
    for link in link_ids:
        if link not in capacity_bps:
            raise InputError("path", f"unknown link {link!r}")
    caps = [float(capacity_bps[link]) for link in link_ids]
    if len({j.job_id for j in jobs}) != len(jobs):
        raise InputError("jobs", "duplicate job id")
    return link_ids, index, caps
