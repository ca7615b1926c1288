"""Shared plumbing for the experiments: the job sets several of them run, the testbed
configs several of them build (experiment 1's job sets on a dumbbell, the filling jobs of
experiment 2), running a config (a typed :class:`testbed.results.ExperimentResult`),
results under ``results/<name>/``, tables, progress.  The command line, results file and
tables of an experiment come from :mod:`experiments.harness`, its figures from
:mod:`experiments.plots`.

Every experiment runs as a module from the repository root, e.g.
``sudo .venv/bin/python -m experiments.link_interleaving``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cassini.outputs import json_text, replaced
from cassini.profile import JobProfile, Phase
from cassini.sim.network.flows import FlowJob, cycle_of
from cassini.sim.network.fluid import simulate
from mltcp.policy import MltcpParams
from testbed import say_on_stderr
from testbed.iterations import read_log
from testbed.results import ExperimentResult, SchemeResult
from testbed.run.config import RunConfig

RESULTS = Path(__file__).resolve().parent.parent / "results"
#: iterations of each job left out of an "after start-up" figure (the demo's part 1,
#: cassini_repeats' ratios): a held job's first slots are where it re-aligns, one ~190 ms
#: iteration when it does
STARTUP = 5
BOTTLENECK_BPS = 200_000_000  # the dumbbell's shared link
ACCESS_BPS = 1_000_000_000  # every host's own link


@dataclass(frozen=True)
class JobSet:
    """``count`` identical synthetic jobs of two workers: ``compute_s`` seconds of compute,
    then a ring all-reduce of ``bytes`` per iteration (each worker sends ``bytes``)."""

    name: str
    count: int
    compute_s: float
    bytes: int

    @property
    def comm_s(self) -> float:
        """One communication phase alone at the bottleneck rate, payload only (seconds)."""
        return self.bytes * 8 / BOTTLENECK_BPS

    @property
    def share(self) -> float:
        """Each job's communication share of its iteration at the bottleneck rate."""
        return self.comm_s / (self.compute_s + self.comm_s)

    def jobs(
        self, iterations: int, ids: str | list[str] | None = None, **extra: Any
    ) -> list[dict[str, Any]]:
        """Testbed job entries on a dumbbell of ``count`` pairs: job i on h(i+1) and
        h(i+1+count); ``ids`` name the jobs (default j1, j2, ...); ``extra`` adds fields."""
        names = list(ids) if ids is not None else [f"j{i + 1}" for i in range(self.count)]
        if len(names) < self.count:
            raise ValueError(f"{self.name}: {self.count} jobs, {len(names)} ids")
        return [
            {
                "id": names[i],
                "hosts": [f"h{i + 1}", f"h{i + 1 + self.count}"],
                "compute_s": self.compute_s,
                "bytes": self.bytes,
                "iterations": iterations,
                **extra,
            }
            for i in range(self.count)
        ]


def equal_shares(count: int, iteration_s: float = 0.1) -> JobSet:
    """``count`` jobs of ``iteration_s`` seconds alone, each communicating 1/count of it at
    the bottleneck rate: together they fill the link exactly."""
    share = 1.0 / count
    return JobSet(
        f"{count} x {share:.0%}",
        count,
        iteration_s * (1 - share),
        int(iteration_s * share * BOTTLENECK_BPS / 8),
    )


# experiment 1's compatible pair: 40 % share each, they fit side by side (score 1)
PAIR = JobSet("pair", 2, 0.06, 1_000_000)
# experiment 1's trio: 50 % share each, three cannot all fit (partially compatible, ~0.6)
TRIO = JobSet("trio", 3, 0.05, 1_250_000)
# two jobs at 50 % share: they fill the link exactly (experiments 2 and 5, and
# configs/fair_two_jobs.yaml and configs/mltcp_ecn_two_jobs.yaml)
HALF_PAIR = equal_shares(2)
JOB_SETS = {s.name: s for s in (PAIR, TRIO)}  # experiment 1's sets, by name


def dumbbell(
    pairs: int, fabric: str, buffer_packets: int = 100, ecn_threshold_bytes: int = 30_000
) -> dict[str, Any]:
    """The testbed topology most experiments share: ``pairs`` host pairs across one
    ``BOTTLENECK_BPS`` link of the given fabric."""
    return {
        "kind": "dumbbell",
        "pairs": pairs,
        "bottleneck_bps": BOTTLENECK_BPS,
        "access_bps": ACCESS_BPS,
        "fabric": fabric,
        "buffer_packets": buffer_packets,
        "ecn_threshold_bytes": ecn_threshold_bytes,
    }


def mltcp_available() -> tuple[bool, str]:
    """Whether the MLTCP congestion controls can be used here, and why not."""
    try:
        from mltcp import admin
    except ImportError as e:
        return False, f"mltcp package not importable ({e})"
    try:
        admin.check_prerequisites()
    except Exception as e:  # noqa: BLE001 - report any reason
        return False, str(e)
    return True, ""


def job_set_config(job_set: str, fabric: str, iterations: int, schemes: list) -> dict:
    """Experiment 1's named job set (``pair`` or ``trio``) on the dumbbell's ``fabric``."""
    jobs = JOB_SETS[job_set]
    return {
        "topology": dumbbell(jobs.count, fabric, buffer_packets=100),
        "jobs": jobs.jobs(iterations),
        "schemes": schemes,
        "cc": "dctcp_bpf" if fabric == "ecn" and mltcp_available()[0] else "cubic",
        "seed": 1,
    }


NOMINAL_COMM_S = HALF_PAIR.comm_s  # one 2-host ring all-reduce, payload only
FILLING_IDS = "abcdef"  # the filling jobs' ids


def filling(jobs: int, comm_s: float) -> JobSet:
    """``jobs`` identical jobs sending the 50 % pair's bytes per iteration, with
    ``jobs - 1`` phases of ``comm_s`` seconds of compute: each communicates 1/jobs of its
    iteration (for two jobs at the nominal rate: :data:`HALF_PAIR`)."""
    return JobSet(f"{jobs} x 1/{jobs}", jobs, round((jobs - 1) * comm_s, 4), HALF_PAIR.bytes)


def filling_config(
    fabric: str,
    base_cc: str,
    mltcp_cc: str,
    iterations: int,
    jobs: int = 2,
    comm_s: float | None = None,
) -> dict[str, Any]:
    """Experiment 2's run: ``jobs`` identical synthetic jobs starting together, each
    communicating 1/jobs of its iteration (50 % for two, 33 % for three): together they
    fill the bottleneck; ideal, ``base_cc`` and MLTCP's ``mltcp_cc``.  ``comm_s`` is one
    communication phase alone on the link (seconds; see :func:`calibrate_comm_s`), by
    default the payload's time at the bottleneck rate."""
    return {
        "topology": dumbbell(jobs, fabric, buffer_packets=1000),
        "jobs": filling(jobs, comm_s or NOMINAL_COMM_S).jobs(iterations, FILLING_IDS),
        "schemes": [
            "ideal",
            {"scheme": "baseline", "name": base_cc, "cc": base_cc},
            {"scheme": "mltcp", "name": mltcp_cc, "cc": mltcp_cc},
        ],
        "cc": base_cc,
    }


def calibrate_comm_s(fabric: str, cc: str, where: Path) -> float:
    """Measure one job's communication phase alone on the link (median, seconds).  Headers
    and the window's ramp make it 5-30 % longer than the payload at line rate, and a share
    above 1/jobs leaves no interleaved schedule to find, so the compute phases are sized
    from this measurement, not from the nominal rate."""
    cfg = filling_config(fabric, cc, cc, 8, 1)
    cfg["schemes"] = ["ideal"]
    res = run_config(cfg, where, f"calibrating: one job alone on {fabric} with {cc}")
    return float(res.schemes["ideal"].profiles["a"].phases[0].duration_s)


def p99(times: list[float]) -> float:
    """99th percentile by nearest rank (a measured iteration time, not an interpolation)."""
    ordered = sorted(times)
    return ordered[max(0, int(round(0.99 * len(ordered))) - 1)]


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def require_root() -> None:
    if os.geteuid() != 0:
        raise SystemExit("this experiment runs Mininet: it needs root")


def run_config(cfg: dict[str, Any], where: Path, label: str) -> ExperimentResult:
    """Run one testbed config under ``where`` and return its results (also in
    ``where/results.json``), quietly: of the runner's progress only :func:`headline`'s
    lines reach stderr."""
    from testbed.run import load_config, run_experiment

    progress(f"{label} ...")
    return run_experiment(load_config(cfg), where, progress=headline)


def headline(msg: str) -> None:
    """The quiet progress of :func:`run_config`: the runner's unindented lines on stderr,
    its indented detail dropped.  Unindented are each scheme's first line (``[2/3]
    baseline: baseline scheme``: which scheme the iteration counters under it count) and
    the notice that this run loaded MLTCP and left it loaded
    (:data:`testbed.run.session.MLTCP_LEFT_LOADED`, said once, by the run that loads it);
    indented are the planner's lines and, without a terminal, the counters."""
    if not msg.startswith(" "):
        say_on_stderr(msg)


def cassini_advice(res: ExperimentResult) -> tuple[SchemeResult, dict[str, Any]] | None:
    """The run's CASSINI scheme and its advice's best candidate (a dict as the advisor
    writes it); None when no CASSINI scheme ran with advice."""
    cassini = next((s for s in res.schemes.values() if s.kind == "cassini"), None)
    if cassini is None or not cassini.advice:
        return None
    return cassini, (cassini.advice.get("candidates") or [{}])[0]


def write_json(path: Path, data: Any) -> None:
    """``data`` as strict JSON at ``path``: every non-finite float (NaN, ±infinity: a
    ratio of nothing, e.g. after start-up in a run shorter than its start-up) written as
    ``null``, numpy numbers as plain ones (:func:`cassini.outputs.json_text`); Python's
    ``NaN`` / ``Infinity`` tokens are not JSON and strict parsers refuse them.  Every
    experiment's JSON goes through it (``Run.save`` included).  Written whole
    (:func:`cassini.outputs.replaced`): an interrupt leaves the file as it was."""
    text = json_text(data) + "\n"
    with replaced(path) as tmp:
        tmp.write_text(text)


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    """Rows as a fixed-width table; columns are (key, header, format)."""

    def cell(v: Any, fmt: str) -> str:
        if v is None:
            return ""
        return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else str(v)

    body = [[cell(row.get(key, ""), fmt) for key, _, fmt in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, (_, h, _) in enumerate(columns)]
    lines = ["  ".join(h.ljust(w) for (_, h, _), w in zip(columns, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)


# -- the fluid model of a testbed config (cassini.sim.network), for model-vs-testbed checks


def nominal_profiles(cfg: RunConfig) -> dict[str, JobProfile]:
    """What each job's definition implies on a dedicated network: ``compute_s`` seconds of
    compute, then the bytes the worker's ring all-reduce sends (``2 (n - 1)`` chunks of
    ``bytes // n``) at the slowest link of its ring.  The testbed measures the real
    profiles in its dedicated run; these are for checks without one."""
    topo = cfg.topology
    capacity = topo.link_capacity()
    out = {}
    for job in cfg.jobs:
        n = len(job.hosts)
        bits = 2 * (n - 1) * max(1, job.bytes // n) * 8.0
        rate = min(capacity[link] for link in topo.ring_links(job.hosts))
        comm = bits / rate
        out[job.job_id] = JobProfile(
            job.job_id, job.compute_s + comm, [Phase(job.compute_s, comm, rate)]
        )
    return out


def anchors(
    profiles: dict[str, JobProfile],
    starts_s: dict[str, float],
    periods_s: dict[str, float] | None = None,
) -> dict[str, float]:
    """The model's ``anchor_s`` of each job whose first iteration (profile time 0) starts
    ``starts_s[job]`` seconds after the common epoch.

    The model's cycle starts where the profile's last phase ends
    (``cycle_of(p).offset_s``) and opens with ``gaps_s[0]`` seconds of compute before the
    phase that starts ``a0`` seconds into the profile; that phase starts ``start + a0``
    on the testbed, so the cycle starts at ``start + a0 - gaps_s[0]`` (``start + offset
    - T`` for one phase that ends before the iteration does).  A held job
    (``periods_s[job]``, the agent's period) starts at ``shift mod period`` as the worker
    does, and its anchor is reduced modulo the period (the grid repeats).  When a
    free-running job's anchor would be negative, every anchor is delayed by the same
    amount (a common delay changes nothing)."""
    periods_s = periods_s or {}
    raw = {}
    for job, profile in profiles.items():
        start = starts_s.get(job, 0.0)
        period = periods_s.get(job)
        if period:
            start %= period
        cycle = cycle_of(profile)
        first_phase = (cycle.offset_s + cycle.gaps_s[0]) % cycle.iteration_time_s  # a0
        raw[job] = start + first_phase - cycle.gaps_s[0]
    lead = max(0.0, -min((x for j, x in raw.items() if not periods_s.get(j)), default=0.0))
    return {
        job: (x + lead) % periods_s[job] if periods_s.get(job) else x + lead
        for job, x in raw.items()
    }


def flow_jobs(
    cfg: RunConfig,
    profiles: dict[str, JobProfile],
    starts_s: dict[str, float],
    periods_s: dict[str, float] | None = None,
    priorities: dict[str, int] | None = None,
) -> list[FlowJob]:
    """The model's jobs for the testbed's ``cfg``: each job's profile along the links of
    its ring all-reduce, free-running unless ``periods_s`` holds it to the agent's grid,
    in its strict-priority class ``priorities[job]`` (0 highest; default all 0)."""
    periods_s = periods_s or {}
    priorities = priorities or {}
    at = anchors({j.job_id: profiles[j.job_id] for j in cfg.jobs}, starts_s, periods_s)
    return [
        FlowJob(
            job.job_id,
            profiles[job.job_id],
            tuple(cfg.topology.ring_links(job.hosts)),
            at[job.job_id],
            periods_s.get(job.job_id),
            priorities.get(job.job_id, 0),
        )
        for job in cfg.jobs
    ]


def model_iteration_times(
    jobs: list[FlowJob],
    capacity_bps: dict[str, float],
    iterations: int,
    tolerance: float,
    mltcp: MltcpParams | None = None,
    after_startup: bool = False,
) -> dict[str, list[float]]:
    """Each job's first ``iterations`` iterations in the model, as the testbed counts
    them: ``iterations - 1`` intervals between iteration ends, the first iteration
    (start-up, initial shift) left out; ``mltcp``: links shared by MLTCP's weights.
    ``after_startup``: the jobs are anchored where the testbed measured their second
    iteration to start (:func:`startup_offsets`), so the model's first interval is
    already the testbed's first counted one."""
    longest = max(j.grid_period_s or j.profile.iteration_time_s for j in jobs)
    horizon = max(j.anchor_s for j in jobs) + (iterations + 2) * longest * max(2, len(jobs))
    res = simulate(jobs, capacity_bps, horizon_s=horizon, tolerance=tolerance, mltcp=mltcp)
    first = 0 if after_startup else 1
    out = {}
    for job in jobs:
        # interval k is between cycle starts k and k+1; cycle k+1 starts when
        # iteration k's last bit is sent (or at its slot): unless the anchor is already
        # past the start-up, drop the interval from the anchor
        times = list(res.iteration_times_s[job.job_id])[first : first + iterations - 1]
        if len(times) < iterations - 1:
            raise RuntimeError(f"{job.job_id}: model ran {len(times)} iterations in {horizon} s")
        out[job.job_id] = times
    return out


def startup_offsets(scheme: SchemeResult, base: Path | None = None) -> dict[str, float] | None:
    """When each job of a free-running testbed run started its second iteration (the
    first the testbed counts), seconds after the earliest job did: the mean over the
    job's ranks of their logs' ``start`` (one host clock).  What start-up left of a
    "same start" (a few ms, or tens when one job's first phase lost packets).  None when
    a job's logs are missing or hold fewer than two iterations.  ``base``: the run's
    folder, where logs written under another path are looked up
    (``base/<scheme>/<log name>``)."""
    starts = {}
    for job, result in scheme.jobs.items():
        times = []
        for log in result.logs:
            path = log if log.exists() or base is None else base / scheme.name / log.name
            if not path.exists():
                return None
            records = read_log(path)
            if len(records) < 2 or "start" not in records[1]:
                return None
            times.append(float(records[1]["start"]))
        if not times:
            return None
        starts[job] = sum(times) / len(times)
    earliest = min(starts.values(), default=0.0)
    return {job: t - earliest for job, t in starts.items()}


def goodput_factor(cfg: RunConfig, profiles: dict[str, JobProfile]) -> float:
    """Best payload rate a job reached alone over the slowest link of its ring, as a
    fraction of that link's capacity (at most 1)."""
    capacity = cfg.topology.link_capacity()
    best = 0.0
    for job in cfg.jobs:
        slowest = min(capacity[link] for link in cfg.topology.ring_links(job.hosts))
        best = max(best, profiles[job.job_id].peak_rate_bps / slowest)
    return min(1.0, best) if best > 0 else 1.0


def only_job(cfg: RunConfig, job_id: str) -> RunConfig:
    """``cfg`` with only the job ``job_id``."""
    return RunConfig(**{**cfg.__dict__, "jobs": tuple(j for j in cfg.jobs if j.job_id == job_id)})


if __name__ == "__main__":
    from experiments import not_a_command

    not_a_command("experiments.common")
