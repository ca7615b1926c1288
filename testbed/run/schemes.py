"""The schemes a run compares, one :class:`Scheme` class each, in the :data:`SCHEMES`
table by the name a config gives (the only place a new scheme is added; see
``docs/extending.md``).  Each runs on freshly built clusters and returns its typed
:class:`~testbed.results.SchemeResult`.

``ideal``     every job alone on the topology (its dedicated-network iteration time); the
              profiles, payload share and jitter it measures are CASSINI's inputs.
``baseline``  all jobs start together (plus any configured ``shift`` seconds).
``random``    jobs start at random offsets within an iteration.
``cassini``   profiles measured (from the ``ideal`` run, or a short profiling run), time-
              shifts from :func:`cassini.advisor.advise` on the configured placement,
              held by the time-shift agent.
``mltcp``     all jobs start together with an MLTCP congestion control (the fabric's
              ``mltcp_cc``: ``mltcp_dctcp`` on ``ecn``, ``mltcp_reno`` otherwise; see
              ``mltcp load``), with ``mode`` (idle/exact), ``slope``, ``intercept`` and
              ``scale_cut``.

Each scheme writes only in its own folder ``OUT/<name>`` (``ideal``: ``OUT/<name>/<job>/``
per job; CASSINI's profiling run: ``OUT/<name>/profiling/<job>/``), so no two share one.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from cassini.predict import period_slack
from cassini.profile import JobProfile
from mltcp.policy import MltcpOptions
from testbed.results import JobDirection, JobResult, SchemeResult
from testbed.run import planning, profiles
from testbed.run.config import RunConfig, SchemeSpec, estimated_period_s, with_iterations
from testbed.run.report import Progress
from testbed.run.session import Schedule, run_together


@dataclass
class RunState:
    """What the schemes of one run share: where results go, progress, the schemes done so
    far, and what the ``ideal`` (or a profiling) run measured for CASSINI."""

    cfg: RunConfig
    out: Path
    say: Progress
    step: str = ""  # "[n/N]" of the scheme running
    done: dict[str, SchemeResult] = field(default_factory=dict)
    profiles: dict[str, JobProfile] | None = None
    efficiency: float = 1.0  # payload bits per bit on the wire, measured alone
    jitter: float = 0.0  # the jobs' iteration-time jitter alone (cfg.agent_jitter's rule)

    def learn_from(self, alone: SchemeResult) -> None:
        """Take the profiles, payload share and jitter measured with each job alone
        (profiles given in the config win)."""
        self.profiles = {**alone.profiles, **self.cfg.profiles}
        self.efficiency = profiles.payload_efficiency(self.cfg, alone, self.say)
        # the agent's own slack beside the jitter (``auto``: period_slack's, 3 % at any load)
        slack = self.cfg.agent_slack if self.cfg.agent_slack is not None else period_slack(1.0)
        self.jitter = profiles.iteration_jitter(alone, self.cfg.agent_jitter, slack)


class Scheme(ABC):
    """How one scheme runs the configured jobs."""

    kind: ClassVar[str]  # the name a config gives (``schemes: [kind]``)
    runs_first: ClassVar[bool] = False  # before every other scheme (what they learn from)
    options: ClassVar[frozenset[str]] = frozenset()  # extra keys its config mapping takes

    def congestion_control(self, cfg: RunConfig, spec: SchemeSpec) -> str:
        """The hosts' congestion control: the scheme's ``cc``, else the run's."""
        return spec.cc or cfg.cc

    @abstractmethod
    def run(self, state: RunState, spec: SchemeSpec) -> SchemeResult:
        """Run the jobs as this scheme does; results and logs under ``state.out``."""


class Ideal(Scheme):
    kind = "ideal"
    runs_first = True

    def run(self, state: RunState, spec: SchemeSpec) -> SchemeResult:
        cc = self.congestion_control(state.cfg, spec)
        res = run_alone(state.cfg, spec, cc, state.out / spec.name, state.say)
        state.learn_from(res)
        return res


def run_alone(cfg: RunConfig, spec: SchemeSpec, cc: str, out: Path, say: Progress) -> SchemeResult:
    """Each job alone on the cluster, its logs in ``out/<job>/`` (``out``: the scheme's
    own folder, ``OUT/<name>``, so two schemes never share one); its profile measured
    from the chosen source (worker log, DDP bucket hook, or a capture on its rank 0's
    host)."""
    jobs: dict[str, JobResult] = {}
    measured: dict[str, JobProfile] = {}
    sources = set()
    link_bytes: dict[str, int] = {}
    for job in cfg.jobs:
        where = out / job.job_id
        source = profiles.profile_source(cfg, job)
        sources.add(source)
        pcap = where / "rank0.pcap" if source == "pcap" else None
        one = replace(cfg, jobs=(job,))
        part = run_together(one, spec, cc, where, Schedule({job.job_id: 0.0}), say, capture=pcap)
        jobs[job.job_id] = part.jobs[job.job_id]
        link_bytes.update({JobDirection(job.job_id, d): b for d, b in part.link_bytes.items()})
        measured[job.job_id] = profiles.measured_profile(cfg, job, jobs[job.job_id], source, pcap)
    return SchemeResult(
        name=spec.name,
        kind=spec.kind,
        cc=cc,
        fabric=cfg.topology.fabric.kind,
        jobs=jobs,
        link_bytes=link_bytes,
        profiles=measured,
        profile_source="+".join(sorted(sources)),
    )


def same_start(cfg: RunConfig) -> dict[str, float]:
    """Every job at 0 s, or at its configured ``shift`` (seconds)."""
    return {j.job_id: float(j.shift) if isinstance(j.shift, int | float) else 0.0 for j in cfg.jobs}


def random_offsets(cfg: RunConfig) -> dict[str, float]:
    """Every job at a random offset within its estimated iteration (the run's seed)."""
    rng = random.Random(cfg.seed)
    return {j.job_id: rng.uniform(0, estimated_period_s(cfg, j)) for j in cfg.jobs}


class Together(Scheme):
    """All jobs on one cluster, each starting at the offset ``offsets(cfg)`` gives it."""

    def __init__(self, kind: str, offsets: Callable[[RunConfig], dict[str, float]]) -> None:
        self.kind = kind
        self.offsets = offsets

    def run(self, state: RunState, spec: SchemeSpec) -> SchemeResult:
        cfg = state.cfg
        cc = self.congestion_control(cfg, spec)
        schedule = Schedule(self.offsets(cfg))
        return run_together(cfg, spec, cc, state.out / spec.name, schedule, state.say)


class Mltcp(Together):
    """All jobs starting together under the fabric's MLTCP congestion control, each job's
    sockets tied to it (a cgroup per job), in the scheme's iteration mode and rule."""

    kind = "mltcp"
    options = frozenset(MltcpOptions.FIELDS)

    def __init__(self) -> None:
        super().__init__(self.kind, same_start)

    def congestion_control(self, cfg: RunConfig, spec: SchemeSpec) -> str:
        return spec.cc or cfg.topology.fabric.regime.mltcp_cc

    def run(self, state: RunState, spec: SchemeSpec) -> SchemeResult:
        cfg = state.cfg
        cc = self.congestion_control(cfg, spec)
        schedule = Schedule(self.offsets(cfg))
        return run_together(
            cfg, spec, cc, state.out / spec.name, schedule, state.say, mltcp=spec.mltcp
        )


class Cassini(Scheme):
    """CASSINI's shifts on the profiles measured alone (a short profiling run when no
    ``ideal`` ran first), held by the time-shift agent; when it declines every shift the
    same-start run stands for it (unless ``agent.rerun_declined``)."""

    kind = "cassini"

    def run(self, state: RunState, spec: SchemeSpec) -> SchemeResult:
        cfg = state.cfg
        cc = self.congestion_control(cfg, spec)
        if state.profiles is None:
            state.say(
                f"{state.step} profiling each job alone ({cfg.profile_iterations} iterations)"
            )
            short = with_iterations(cfg, cfg.profile_iterations)
            profiling = state.out / spec.name / "profiling"  # in the scheme's own folder
            state.learn_from(run_alone(short, spec, cc, profiling, state.say))
        assert state.profiles is not None
        p = planning.plan(cfg, state.profiles, state.efficiency, state.jitter, state.say)
        advice = p.advice.to_dict()
        shifts, periods = p.schedule.offsets_s, p.schedule.periods_s
        same = planning.same_schedule(cfg, cc, shifts, periods, state.done)
        if same is not None:
            state.say(
                f"  cassini declined every shift: the jobs run as in {same.name!r}, not re-run"
            )
            return replace(
                same,
                name=spec.name,
                kind=spec.kind,
                advice=advice,
                profiles=state.profiles,
                measured_as=same.name,
            )
        res = run_together(cfg, spec, cc, state.out / spec.name, p.schedule, state.say)
        return replace(res, advice=advice, profiles=state.profiles)


SCHEMES: dict[str, Scheme] = {
    s.kind: s
    for s in (
        Ideal(),
        Together("baseline", same_start),
        Together("random", random_offsets),
        Cassini(),
        Mltcp(),
    )
}
"""Every scheme by the name a config gives (``schemes: [name]`` or ``{scheme: name}``)."""


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.schemes")
