"""What a run's report needs beyond the results: the network model's windows, and which
job sends when on one link."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from cassini.sim.network.flows import FlowJob, NetworkResult
from cassini.sim.network.fluid import simulate
from cassini.sim.parts.timing import AGENT_TOLERANCE
from mltcp.policy import MltcpParams


@dataclass(frozen=True)
class Window:
    """One evaluation: at simulated time ``now_s`` (s) the group ``flows`` was simulated
    for ``horizon_s`` seconds, the first ``warmup_s`` not measured; ``excess_s``: per
    link, seconds of demand above capacity in the measured part."""

    now_s: float
    flows: tuple[FlowJob, ...]
    horizon_s: float
    warmup_s: float
    excess_s: Mapping[str, float]
    mltcp: MltcpParams | None = None  # the sharing the window ran under (None: max-min)
    progress: Callable[[float], float] | None = None  # ... and its progress weights


@dataclass
class NetworkRecorder:
    """Collects every network window of one simulation (pass as ``recorder=``)."""

    windows: list[Window] = field(default_factory=list)

    def window(
        self,
        now_s: float,
        flows: tuple[FlowJob, ...],
        horizon_s: float,
        warmup_s: float,
        result: NetworkResult,
        mltcp: MltcpParams | None = None,
        *,
        progress: Callable[[float], float] | None = None,
    ) -> None:
        excess = {link: s for link, s in result.excess_s.items() if s > 0}
        window = Window(now_s, flows, horizon_s, warmup_s, excess, mltcp, progress)
        self.windows.append(window)


@dataclass(frozen=True)
class LinkTimeline:
    """Rates on ``link`` (capacity ``capacity_bps``) during one window starting at
    simulated time ``start_s``: ``steps`` are ``(t0 s, t1 s, {job: bits/s})`` relative
    to ``start_s``; ``jobs`` every job that crossed the link in the window."""

    link: str
    capacity_bps: float
    start_s: float
    warmup_s: float
    jobs: tuple[str, ...]
    steps: tuple[tuple[float, float, dict[str, float]], ...]


def link_timeline(
    windows: Sequence[Window],
    link: str,
    capacity_bps: Mapping[str, float],
    *,
    tolerance: float = AGENT_TOLERANCE,
) -> LinkTimeline | None:
    """Replay the window in which ``link`` was most congested (most excess demand, then
    most jobs on it, then the earliest) and return who sent when on it; None when no
    window had a flow on the link (a link that can never congest is never simulated)."""
    best, best_key = None, None
    for w in windows:
        crossing = sum(link in f.path for f in w.flows)
        if not crossing:
            continue
        key = (w.excess_s.get(link, 0.0), crossing, -w.now_s)
        if best_key is None or key > best_key:
            best, best_key = w, key
    if best is None:
        return None
    on_link = np.array([link in f.path for f in best.flows])
    ids = [f.job_id for f in best.flows]
    steps: list[tuple[float, float, dict[str, float]]] = []

    def observe(t: float, dt: float, sending: np.ndarray, rates: np.ndarray) -> None:
        mine = {ids[i]: float(r) for i, r in zip(sending, rates, strict=True) if on_link[i]}
        steps.append((t, t + dt, mine))

    simulate(
        best.flows,
        capacity_bps,
        horizon_s=best.horizon_s,
        warmup_s=best.warmup_s,
        tolerance=tolerance,
        mltcp=best.mltcp,
        on_step=observe,
        progress=best.progress,
    )
    return LinkTimeline(
        link=link,
        capacity_bps=float(capacity_bps[link]),
        start_s=best.now_s,
        warmup_s=best.warmup_s,
        jobs=tuple(i for i, on in zip(ids, on_link, strict=True) if on),
        steps=tuple(steps),
    )
