"""CASSINI's plan for a testbed run: advice on the configured placement from the measured
profiles, each job's start shift on the period the time-shift agent holds it to, and the
slip each may take before it re-aligns (pure: no cluster, no root)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cassini.advisor import Advice, Candidate, Link, advise, held_time_shifts
from cassini.predict import agent_periods_s, jitter_beyond_room, link_load, period_slack
from cassini.profile import JobProfile
from cassini.slip import slip_tolerances_s
from testbed.results import SchemeResult
from testbed.run.config import RunConfig
from testbed.run.report import Progress
from testbed.run.session import Schedule


@dataclass(frozen=True)
class CassiniPlan:
    """The advice and the schedule it gives the jobs (held jobs' periods, tolerances)."""

    advice: Advice
    schedule: Schedule


def plan(
    cfg: RunConfig,
    profiles: Mapping[str, JobProfile],
    efficiency: float,
    jitter: float,
    say: Progress,
) -> CassiniPlan:
    """Advice on the configured placement (links at their payload capacity: capacity x
    ``efficiency``); each job held to its shift by the agent with a period slack of the
    configured ``agent.slack`` plus the jobs' measured ``jitter`` (a full link has no
    room for a late phase), or left free where the advisor says shifting does not pay."""
    topo = cfg.topology
    links = [Link(d["id"], d["capacity_bps"] * efficiency) for d in topo.advisor_links()]
    paths = {j.job_id: tuple(topo.ring_links(j.hosts)) for j in cfg.jobs}
    slack = cfg.agent_slack
    if slack is None:  # auto: from how full the fullest shared link is
        slack = period_slack(max_link_load(links, paths, profiles))
    say(f"  agent slack {slack:.1%} + jitter {jitter:.1%}")
    advice = advise(
        links,
        list(profiles.values()),
        [Candidate("configured", paths)],
        loops="score",
        # the prediction holds jobs to the agent's period (under ``room`` the whole
        # jitter still: the advice's gains are those of the longer period, a lower bound)
        agent_slack=slack + jitter,
    )
    if cfg.agent_jitter == "room":  # each job pays the jitter its held period lacks
        held_s = agent_periods(profiles, advice, 0.0)
        periods = {
            j: p * (1.0 + slack + jitter_beyond_room(jitter, p, profiles[j].iteration_time_s))
            for j, p in held_s.items()
        }
        paid = ", ".join(f"{j} {periods[j] / p - 1 - slack:.1%}" for j, p in held_s.items())
        say(f"  jitter paid beyond each held period's room: {paid or 'none'}")
    else:
        periods = agent_periods(profiles, advice, slack + jitter)
    on_period = held_time_shifts(links, paths, profiles, periods)
    shifts = {}
    for job in cfg.jobs:
        if isinstance(job.shift, int | float):  # configured: kept
            shifts[job.job_id] = float(job.shift)
        elif job.job_id in periods:
            shifts[job.job_id] = on_period[job.job_id]
        else:
            shifts[job.job_id] = 0.0  # not shifted: it starts with the others, as advised
    capacities = {link.link_id: link.capacity_bps for link in links}
    tolerances = slip_tolerances_s(
        capacities, paths, profiles, periods, {j: shifts.get(j, 0.0) for j in periods}
    )
    held = ", ".join(
        f"{j} {shifts.get(j, 0.0) * 1e3:.1f} ms (slip tolerance {tolerances[j] * 1e3:.1f} ms)"
        for j in periods
    )
    say(f"  cassini shifts: {held or 'none'}")
    return CassiniPlan(advice, Schedule(shifts, periods, tolerances))


def same_schedule(
    cfg: RunConfig,
    cc: str,
    shifts: Mapping[str, float],
    periods: Mapping[str, float],
    done: Mapping[str, SchemeResult],
) -> SchemeResult | None:
    """The same-start result of this run when CASSINI declined every shift (no job held,
    every job starting at 0 s on the same congestion control ``cc``): then CASSINI's
    schedule *is* that scheme's, and running it again would only measure the testbed's
    run-to-run noise (up to 30 % here).  None when CASSINI shifts anything, when no such
    scheme ran yet, or when the config asks for ``agent.rerun_declined``."""
    if cfg.rerun_declined or periods or any(shifts.get(j.job_id, 0.0) for j in cfg.jobs):
        return None
    for res in done.values():
        if res.kind == "baseline" and res.cc == cc and res.measured_as is None:
            return res
    return None


def max_link_load(
    links: list[Link], paths: Mapping[str, tuple[str, ...]], profiles: Mapping[str, Any]
) -> float:
    """The largest share of a link that the bytes of the jobs crossing it need
    (:func:`cassini.predict.link_load`, at most 1: beyond, the periods are stretched),
    over links two or more jobs share; 0 when none is shared."""
    worst = 0.0
    for link in links:
        on = [profiles[j] for j, p in paths.items() if link.link_id in p and j in profiles]
        if len(on) > 1:
            worst = max(worst, min(1.0, link_load(on, link.capacity_bps)))
    return worst


def agent_periods(profiles: Mapping[str, Any], advice: Any, slack: float) -> dict[str, float]:
    """Period (seconds) the time-shift agent holds each job to
    (:func:`cassini.predict.agent_periods_s`: the circle's iteration time, stretched by
    what the links' bytes require, times ``1 + slack``); jobs that share no link, or that
    the advice says not to shift (shifting does not pay), are left out and run free."""
    best = advice.candidates[0] if advice.candidates else None
    prediction = getattr(best, "prediction", None)
    shift = dict(prediction.shift) if prediction is not None else None
    return agent_periods_s(profiles, advice.link_solutions.values(), slack=slack, shift=shift)


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.planning")
