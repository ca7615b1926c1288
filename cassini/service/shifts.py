"""The running jobs' time-shifts (runs in the service's worker processes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx

from cassini.advisor import NO_SHARED_LINK, Candidate, Link, advise, held_time_shifts
from cassini.service.scoring import State
from cassini.slip import slip_tolerances_s


@dataclass(frozen=True)
class JobShift:
    """A running job's time-shift: ``shift`` False means run free (``reason`` says why; on a
    shifted job ``reason`` is None, or the caveat that its interleaving drifts);
    ``shift_s`` in [0, ``period_s``) seconds; ``tolerance_s`` how late (seconds) a shifted
    job may run before its agent re-aligns it (:mod:`cassini.slip`); ``epoch_s`` the UNIX
    time its slots count from (None: the service's epoch)."""

    job_id: str
    shift: bool
    shift_s: float
    period_s: float
    reason: str | None
    tolerance_s: float | None = None
    epoch_s: float | None = None
    released: bool = False  # runs free because it (or its held group) was released

    def to_dict(self, default_epoch_s: float) -> dict[str, Any]:
        """The ``TimeShift`` answer: slot k starts at ``epoch_s + shift_s + k * period_s``."""
        epoch = self.epoch_s if self.epoch_s is not None else default_epoch_s
        return {
            "released": bool(self.released),
            "job_id": self.job_id,
            "shift": bool(self.shift),
            "shift_s": float(self.shift_s),
            "period_s": float(self.period_s),
            "epoch_s": float(epoch),
            "reason": self.reason,
            "tolerance_s": None if self.tolerance_s is None else float(self.tolerance_s),
        }


def compute_shifts(state: State, precision_deg: float = 5.0) -> dict[str, JobShift]:
    """Time-shifts of the running jobs that share links: the advisor on one candidate, the
    current placement (``loops="score"``, so a loopy placement still gets its best shifts).
    A job sharing no link, or one the advisor's prediction marks ``shift: false``, runs
    free; a shifted job's period is the advisor's ``agent_period_s`` when it gives one
    (never below the iteration time), else its iteration time."""
    out: dict[str, JobShift] = {}
    paths = {}
    for jid, job in state.jobs.items():
        links = state.job_links(job)
        if links:
            paths[jid] = links
    on: dict[str, int] = {}
    for links in paths.values():
        for lid in links:
            on[lid] = on.get(lid, 0) + 1
    sharing = {j for j, links in paths.items() if any(on[lid] > 1 for lid in links)}
    if sharing:
        used = {lid for j in sharing for lid in paths[j]}
        links = [Link(lid, state.cluster.links[lid]) for lid in sorted(used)]
        profiles = [state.jobs[j].profile for j in sorted(sharing)]
        cand = Candidate("current", {j: paths[j] for j in sorted(sharing)})
        advice = advise(links, profiles, [cand], precision_deg, loops="score", workers=1)
        result = advice.candidates[0]
    else:
        result = None
    # the advisor's prediction, when it makes one: per job, does shifting pay, and the
    # period the agent holds a shifted job to
    prediction = getattr(result, "prediction", None)
    on_period: dict[str, float] = {}
    if result is not None and result.status == "ok" and prediction is not None:
        held_at = {
            j: max(state.jobs[j].profile.iteration_time_s, float(p))
            for j, p in prediction.agent_period_s.items()
        }
        if any(p > state.jobs[j].profile.iteration_time_s * (1 + 1e-9) for j, p in held_at.items()):
            # held longer than they iterate: solve the shifts on those periods
            on_period = held_time_shifts(
                links, cand.paths, {j: state.jobs[j].profile for j in sorted(sharing)}, held_at,
                precision_deg,
            )  # fmt: skip
    for jid, job in state.jobs.items():
        period = job.profile.iteration_time_s
        if jid not in paths:
            out[jid] = JobShift(jid, False, 0.0, period, why_no_links(state, job.nodes))
            continue
        if jid not in sharing:
            out[jid] = JobShift(jid, False, 0.0, period, NO_SHARED_LINK)
            continue
        assert result is not None
        if result.status != "ok":
            out[jid] = JobShift(jid, False, 0.0, period, result.reason or "placement rejected")
            continue
        if prediction is not None and prediction.shift.get(jid) is False:
            why = prediction.reasons.get(jid) or "the advisor predicts no gain from shifting"
            out[jid] = JobShift(jid, False, 0.0, period, str(why))
            continue
        held = period
        if prediction is not None and jid in prediction.agent_period_s:
            held = max(period, float(prediction.agent_period_s[jid]))
        shift = float(on_period.get(jid, result.time_shifts_s.get(jid, 0.0))) % held
        caveat = prediction.drifts.get(jid) if prediction is not None else None
        out[jid] = JobShift(jid, True, shift, held, caveat)
    shifted = {j: s for j, s in out.items() if s.shift}
    if shifted:
        capacities = {lid: state.cluster.links[lid] for j in shifted for lid in paths[j]}
        tolerances = slip_tolerances_s(
            capacities,
            {j: paths[j] for j in shifted},
            {j: state.jobs[j].profile for j in shifted},
            {j: s.period_s for j, s in shifted.items()},
            {j: s.shift_s for j, s in shifted.items()},
        )
        for j, s in shifted.items():
            out[j] = replace(s, tolerance_s=tolerances[j])
    return out


def why_no_links(state: State, nodes: tuple[str, ...]) -> str:
    """Why a job on ``nodes`` crosses no link (:meth:`State.job_links` is empty)."""
    known = [n for n in nodes if n in state.cluster.nodes]
    if not known:
        return "runs on no node of the cluster"
    if not any(state.cluster.nodes[n] for n in known):
        return "its nodes have no links: it shares no link"
    return "runs on one node: it sends nothing over the network"


_groups_cache: dict[str, Any] = {}  # the held groups of the latest state seen


def held_groups(state: State) -> dict[str, frozenset[str]]:
    """Each job that shares a link: the jobs of its group (itself included), those joined
    to it by shared links, directly or through other jobs (what the simulator releases
    together)."""
    graph = nx.Graph()
    for jid, job in state.jobs.items():
        for lid in state.job_links(job):
            graph.add_edge(("job", jid), ("link", lid))
    out: dict[str, frozenset[str]] = {}
    for component in nx.connected_components(graph):
        jobs = frozenset(name for kind, name in component if kind == "job")
        if len(jobs) > 1:
            out.update(dict.fromkeys(jobs, jobs))
    return out


def answered_shift(shift: JobShift, state: State, explicit: Mapping[str, JobShift]) -> JobShift:
    """The time-shift a job is answered: a job released by PUT (``shift: false``) is
    ``released``; so is every job of its held group, which runs free with it (the
    reason names the released partner)."""
    own = explicit.get(shift.job_id)
    if own is not None and not own.shift:
        return replace(shift, released=True)
    if all(e.shift for e in explicit.values()):
        return shift  # nothing released: no group to look at
    if _groups_cache.get("state") is not state:  # the registry keeps one until a change
        _groups_cache.clear()
        _groups_cache.update(state=state, groups=held_groups(state))
    group = _groups_cache["groups"].get(shift.job_id, frozenset())
    partners = sorted(
        j for j in group if j != shift.job_id and j in explicit and not explicit[j].shift
    )
    if not partners:
        return shift
    why = explicit[partners[0]].reason or "released"
    return replace(
        shift,
        shift=False,
        shift_s=0.0,
        released=True,
        tolerance_s=None,
        reason=f"released with its group: {partners[0]} runs free ({why})",
    )
