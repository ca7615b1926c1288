"""A testbed run's configuration as typed values: the topology and its fabric, the jobs
(:class:`TestbedJob`), the schemes (:class:`SchemeSpec`) and the options of CASSINI's
agent, in one :class:`RunConfig`.  Reading and checking a config file is
:mod:`testbed.run.load`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from cassini.errors import InputError
from mltcp.policy import MltcpOptions
from testbed.topo import TestbedTopology

WORKER_MODULES = {"synthetic": "testbed.worker", "ddp": "testbed.ddp_worker",
                  "model": "testbed.ddp_worker"}  # fmt: skip
"""The process each job kind's ranks run."""
JOB_KINDS = tuple(WORKER_MODULES)
PROFILE_SOURCES = ("auto", "log", "hook", "pcap")
MIN_ITERATIONS = 3  # a job's (and a profiling run's) fewest iterations
MAX_ITERATIONS = 1_000_000  # and most: a typo (1e9) would otherwise run for days
DEFAULT_NIC_BPS = 50e9  # a real NIC of the CASSINI testbed (50 Gbit/s)
SCHEME_OPTIONS = MltcpOptions.FIELDS
"""Keys a scheme mapping may give beyond scheme, name and cc, where its class takes them
(:attr:`testbed.run.schemes.Scheme.options`)."""


class ConfigError(InputError):
    """An invalid runner config; the message names the field."""

    def __init__(self, field: str, problem: str | None = None) -> None:
        if problem is None:  # a whole message "field: problem" (or no field at all)
            field, _, problem = field.partition(": ") if ": " in field else ("", "", field)
        super().__init__(field, problem)


@dataclass(frozen=True)
class TestbedJob:
    """One training job: ``bytes`` all-reduced per iteration after ``compute_s`` seconds
    (synthetic), a PyTorch DDP MLP of ``width`` (ddp), or a real architecture ``model``
    under DDP (model): compute replayed from ``calibration`` (or real on the CPU), its
    parameters scaled by ``scale``."""

    job_id: str
    kind: str
    hosts: tuple[str, ...]
    iterations: int
    compute_s: float = 0.05
    bytes: int = 1_000_000
    shift: float | str | None = None  # seconds, or "auto" (cassini decides)
    jitter: float = 0.0
    width: int = 256
    layers: int = 3
    batch: int = 32
    model: str | None = None
    compute: str = "replay"  # model: "replay" (calibrated) or "cpu" (real, small batch)
    calibration: str | None = None  # model: calibration file (default: the shipped one)
    scale: float = 1.0  # model: parameter sizes x scale (bucket structure kept)
    nic_bps: float | None = None  # model: the real NIC rate the emulated link stands for
    clock_offset_s: float = 0.0  # the job's hosts' clock error (seconds), injected
    priority: int | None = None  # prio fabric: 0 (highest) .. 7; None: Crux's rule decides


@dataclass(frozen=True)
class SchemeSpec:
    """One scheme of a run: its ``name``, its ``kind`` (a key of
    :data:`testbed.run.schemes.SCHEMES`), the congestion control ``cc`` it asks for (None:
    the scheme's default) and, for ``mltcp``, how MLTCP runs (:class:`MltcpOptions`)."""

    name: str
    kind: str
    cc: str | None = None
    mltcp: MltcpOptions = MltcpOptions()


@dataclass(frozen=True)
class RunConfig:
    topology: TestbedTopology
    jobs: tuple[TestbedJob, ...]
    schemes: tuple[SchemeSpec, ...]
    cc: str = "cubic"
    seed: int = 0
    agent_slack: float | None = None  # None: cassini.predict.period_slack of the load
    drift_tolerance: float = 0.05
    agent_jitter: str = "stdev"  # how the held period's jitter slack is read (JITTER_RULES)
    rerun_declined: bool = False  # run CASSINI again when it declines every shift
    profile_iterations: int = 12
    profiles: dict[str, Any] = field(default_factory=dict)  # job id -> JobProfile (measured)
    profile_source: str = "auto"  # log (worker timing), hook (DDP buckets), pcap, auto
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


def with_iterations(cfg: RunConfig, iterations: int) -> RunConfig:
    """``cfg`` with every job cut to at most ``iterations`` (a short profiling run)."""
    jobs = tuple(replace(j, iterations=min(j.iterations, iterations)) for j in cfg.jobs)
    return replace(cfg, jobs=jobs)


def estimated_period_s(cfg: RunConfig, job: TestbedJob) -> float:
    """A generous guess of the job's iteration time (seconds), for time-outs and offsets."""
    slowest = min(link.capacity_bps for link in cfg.topology.links)
    n = len(job.hosts)
    if job.kind == "model":
        from testbed.calibration import load_calibration
        from testbed.replay import scaled_gradient_bytes

        cal = load_calibration(job.calibration)
        compute = cal.replay_iteration_s if job.compute == "replay" else 30 * cal.iteration_s
        nbytes = scaled_gradient_bytes(cal, job.scale)
        return compute + 2 * (n - 1) / n * nbytes * 8 / slowest
    return job.compute_s + 2 * (n - 1) / n * job.bytes * 8 / slowest


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.config")
