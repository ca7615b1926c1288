"""Experiment runner: one config, several schemes run one after another on the same jobs,
each on a freshly built cluster, compared in one results file.

Schemes
-------
``ideal``     every job alone on the topology (its dedicated-network iteration time).
``baseline``  all jobs start together (plus any configured ``shift`` seconds).
``random``    jobs start at random offsets within an iteration.
``cassini``   profiles measured (from the ``ideal`` run, or a short profiling run), time-
              shifts from :func:`cassini.advisor.advise` on the configured placement,
              held by the time-shift agent.
``mltcp``     all jobs start together with an MLTCP congestion control (``mltcp_dctcp``
              on the ``ecn`` fabric, ``mltcp_reno`` otherwise; see ``mltcp load``).
              A scheme given as a mapping takes ``name``, ``cc`` and, for ``mltcp``,
              ``mode`` (idle/exact), ``slope``, ``intercept`` and ``scale_cut``.

Job kinds: ``synthetic`` (sleep, then a TCP ring all-reduce of ``bytes``), ``ddp`` (a
small MLP under PyTorch DDP), ``model`` (a real architecture under PyTorch DDP: ResNet-50,
VGG, BERT, GPT-2 ..., compute replayed from a calibration file, gradients real; see
:mod:`testbed.replay`).

Returns a :class:`testbed.results.ExperimentResult`; ``DIR/results.json`` holds its
``to_dict()``: ``{"schemes": {name: {"jobs": {job: {"iteration_times_s", "bytes", "logs",
...}}, "summary": {job: {"mean_s", "p50_s", "p99_s"}}, ...}}, "config": ...}``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from cassini import measure, schema
from cassini.advisor import Candidate, Link, advise, held_time_shifts
from cassini.errors import InputError
from cassini.predict import period_slack
from cassini.slip import slip_tolerances_s
from testbed import mltcp_jobs, startgate
from testbed.capture import Capture
from testbed.iterations import read_log
from testbed.net import EmulatedCluster, TestbedError, wait_all
from testbed.results import ExperimentResult, JobResult, SchemeResult
from testbed.topo import Topology, from_config

SCHEME_KINDS = ("ideal", "baseline", "random", "cassini", "mltcp")
JOB_KINDS = ("synthetic", "ddp", "model")
PROFILE_SOURCES = ("auto", "log", "hook", "pcap")
BASE_PORT = 6000
DEFAULT_NIC_BPS = 50e9  # a real NIC of the CASSINI testbed (50 Gbit/s)


class ConfigError(InputError):
    """An invalid runner config; the message names the field."""

    def __init__(self, field: str, problem: str | None = None) -> None:
        if problem is None:  # a whole message "field: problem" (or no field at all)
            field, _, problem = field.partition(": ") if ": " in field else ("", "", field)
        super().__init__(field, problem)


@dataclass(frozen=True)
class JobSpec:
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


@dataclass(frozen=True)
class SchemeSpec:
    name: str
    kind: str
    cc: str | None = None
    mode: str = "idle"  # mltcp: iteration boundaries by idle gaps or exact marks
    slope: float | None = None  # mltcp: F = slope * ratio + intercept (None: loaded value)
    intercept: float | None = None
    scale_cut: bool | None = None  # mltcp_dctcp: the window cut divided by F (None: loaded)


@dataclass(frozen=True)
class RunConfig:
    topology: Topology
    jobs: tuple[JobSpec, ...]
    schemes: tuple[SchemeSpec, ...]
    cc: str = "cubic"
    seed: int = 0
    agent_slack: float | None = None  # None: cassini.predict.period_slack of the load
    drift_tolerance: float = 0.05
    rerun_declined: bool = False  # run CASSINI again when it declines every shift
    profile_iterations: int = 12
    profiles: dict[str, Any] = field(default_factory=dict)  # job id -> JobProfile (measured)
    profile_source: str = "auto"  # log (worker timing), hook (DDP buckets), pcap, auto
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


def load_config(source: str | Path | dict[str, Any]) -> RunConfig:
    """Read and validate a YAML/JSON config (path or mapping); raises ConfigError."""
    if isinstance(source, dict):
        raw = source
    else:
        try:
            raw = yaml.safe_load(Path(source).read_text())
        except OSError as e:
            raise ConfigError(str(source), f"cannot read: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise ConfigError(str(source), f"not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError("config must be a mapping with topology, jobs and schemes")
    allowed = {
        "topology",
        "jobs",
        "schemes",
        "cc",
        "seed",
        "agent",
        "profile_iterations",
        "profiles",
        "profile_source",
    }
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{key}: unknown field (allowed: {', '.join(sorted(allowed))})")
    for key in ("topology", "jobs", "schemes"):
        if key not in raw:
            raise ConfigError(f"{key}: missing required field")
    try:
        topo = from_config(dict(raw["topology"]))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"topology: {e}") from None
    jobs = tuple(_job(j, i, topo) for i, j in enumerate(_list(raw["jobs"], "jobs")))
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ConfigError("jobs: duplicate job ids")
    used: dict[str, str] = {}
    for j in jobs:
        for h in j.hosts:
            if h in used:
                raise ConfigError(f"jobs.{j.job_id}.hosts: {h} already runs job {used[h]}")
            used[h] = j.job_id
    schemes = tuple(_scheme(s, i) for i, s in enumerate(_list(raw["schemes"], "schemes")))
    names = [s.name for s in schemes]
    if len(set(names)) != len(names):
        raise ConfigError("schemes: duplicate scheme names (give each a name:)")
    agent = raw.get("agent") or {}
    if not isinstance(agent, dict) or set(agent) - {"slack", "drift_tolerance", "rerun_declined"}:
        raise ConfigError("agent: a mapping with slack, drift_tolerance and/or rerun_declined")
    rerun = agent.get("rerun_declined", False)
    if not isinstance(rerun, bool):
        raise ConfigError("agent.rerun_declined", f"true or false, got {rerun!r}")
    return RunConfig(
        topology=topo,
        jobs=jobs,
        schemes=schemes,
        cc=str(raw.get("cc", topo.fabric.regime.default_cc)),
        seed=int(raw.get("seed", 0)),
        agent_slack=_slack(agent.get("slack", "auto")),
        drift_tolerance=float(agent.get("drift_tolerance", 0.05)),
        rerun_declined=rerun,
        profile_iterations=int(raw.get("profile_iterations", 12)),
        profiles=_profiles(raw.get("profiles"), {j.job_id for j in jobs}),
        profile_source=_choice(
            raw.get("profile_source", "auto"), "profile_source", PROFILE_SOURCES
        ),
        raw=raw,
    )


def _slack(raw: Any) -> float | None:
    if raw == "auto":
        return None
    return schema.number(raw, "agent.slack", non_negative=True)


def _profiles(raw: Any, job_ids: set[str]) -> dict[str, Any]:
    """Measured profiles given in the config (``profiles: {job: JOB}``), for cassini."""
    if raw is None:
        return {}
    from cassini.profile import JobProfile

    if not isinstance(raw, dict):
        raise ConfigError("profiles: a mapping of job id to profile")
    out = {}
    for job, obj in raw.items():
        if job not in job_ids:
            raise ConfigError(f"profiles.{job}: no such job")
        try:
            out[job] = JobProfile.from_dict(obj, f"profiles.{job}")
        except InputError as e:
            raise ConfigError(str(e)) from None
    return out


def _choice(value: Any, name: str, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ConfigError(f"{name}: one of {', '.join(options)}, got {value!r}")
    return value


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{name}: must be a non-empty list")
    return value


def _job(raw: Any, index: int, topo: Topology) -> JobSpec:
    """One job of the config, read strictly with :mod:`cassini.schema` (errors name the
    field, e.g. ``jobs[1].scale: must be > 0, got 0``)."""
    where = f"jobs[{index}]"
    known = set(JobSpec.__dataclass_fields__) - {"job_id"}
    try:
        obj = schema.require_object(raw, where)
        schema.check_fields(obj, where, ("id", "hosts", "iterations"), known - {"hosts"})
        kind = obj.get("kind", "synthetic")
        if kind not in JOB_KINDS:
            raise ConfigError(f"{where}.kind", f"one of {', '.join(JOB_KINDS)}, got {kind!r}")
        hosts = schema.array(obj["hosts"], f"{where}.hosts")
        if len(hosts) < 2:
            raise ConfigError(f"{where}.hosts", "a list of at least 2 hosts")
        for h in hosts:
            if h not in topo.hosts:
                raise ConfigError(
                    f"{where}.hosts", f"unknown host {h!r} (have {', '.join(topo.hosts)})"
                )
        shift = obj.get("shift")
        if shift is not None and shift != "auto":
            shift = schema.number(shift, f"{where}.shift", non_negative=True)
        iterations = schema.number(obj["iterations"], f"{where}.iterations", positive=True)
        if iterations != int(iterations) or iterations < 3:
            raise ConfigError(f"{where}.iterations", f"an integer >= 3, got {iterations:g}")

        def num(name: str, default: float, **bounds: bool) -> float:
            return schema.number(obj.get(name, default), f"{where}.{name}", **bounds)

        jitter = num("jitter", 0.0, non_negative=True)
        if jitter >= 1:
            raise ConfigError(f"{where}.jitter", f"must be < 1, got {jitter:g}")
        spec = JobSpec(
            job_id=schema.identifier(obj["id"], f"{where}.id"),
            kind=kind,
            hosts=tuple(hosts),
            iterations=int(iterations),
            compute_s=num("compute_s", 0.05, non_negative=True),
            bytes=int(num("bytes", 1_000_000, positive=True)),
            shift=shift,
            jitter=jitter,
            width=int(num("width", 256, positive=True)),
            layers=int(num("layers", 3, positive=True)),
            batch=int(num("batch", 32, positive=True)),
            clock_offset_s=schema.number(obj.get("clock_offset_s", 0.0), f"{where}.clock_offset_s"),
        )
        if kind == "model":
            spec = _model_job(obj, where, spec, topo)
        elif set(obj) & {"model", "compute", "calibration", "scale", "nic_bps"}:
            extra = sorted(set(obj) & {"model", "compute", "calibration", "scale", "nic_bps"})
            raise ConfigError(f"{where}.{extra[0]}", "only for kind: model")
    except InputError as e:
        raise ConfigError(e.field, e.problem) from None
    return spec


def _model_job(obj: dict[str, Any], where: str, spec: JobSpec, topo: Topology) -> JobSpec:
    """The fields of a ``kind: model`` job: a known architecture, a readable calibration,
    and a parameter scale (default: the job's slowest link over ``nic_bps``, so its
    communication-to-compute ratio is the real model's at that NIC rate)."""
    from testbed import calibration as cal_mod
    from testbed.models import MODEL_NAMES

    model = obj.get("model")
    if model not in MODEL_NAMES:
        raise ConfigError(f"{where}.model", f"one of {', '.join(MODEL_NAMES)}, got {model!r}")
    compute = obj.get("compute", "replay")
    if compute not in ("replay", "cpu"):
        raise ConfigError(f"{where}.compute", f"replay or cpu, got {compute!r}")
    path = obj.get("calibration")
    if path is not None and not isinstance(path, str):
        raise ConfigError(f"{where}.calibration", "a calibration file path")
    path = path or str(cal_mod.default_calibration_path(model))
    try:
        cal = cal_mod.load_calibration(path)
    except cal_mod.CalibrationError as e:
        raise ConfigError(f"{where}.calibration", f"{path}: {e}") from None
    except OSError as e:
        raise ConfigError(f"{where}.calibration", f"cannot read {path}: {e.strerror}") from None
    if cal.model != model:
        raise ConfigError(f"{where}.calibration", f"{path} calibrates {cal.model}, not {model}")
    nic = obj.get("nic_bps", DEFAULT_NIC_BPS)
    nic = schema.number(nic, f"{where}.nic_bps", positive=True)
    capacity = topo.link_capacity()
    slowest = min(capacity[d] for d in topo.ring_links(spec.hosts))
    scale = schema.number(obj.get("scale", slowest / nic), f"{where}.scale", positive=True)
    if scale > 1:
        raise ConfigError(f"{where}.scale", f"at most 1 (a share of the parameters), got {scale:g}")
    batch = obj.get("batch", cal.batch)
    return JobSpec(
        **{
            **spec.__dict__,
            "model": model,
            "compute": compute,
            "calibration": path,
            "scale": scale,
            "nic_bps": nic,
            "batch": int(schema.number(batch, f"{where}.batch", positive=True)),
        }
    )


def _scheme(raw: Any, index: int) -> SchemeSpec:
    if isinstance(raw, str):
        raw = {"scheme": raw}
    if not isinstance(raw, dict) or "scheme" not in raw:
        raise ConfigError(f"schemes[{index}]: a scheme name or {{scheme:, name:, cc:}}")
    allowed = ("scheme", "name", "cc", "mode", "slope", "intercept", "scale_cut")
    if set(raw) - set(allowed):
        raise ConfigError(f"schemes[{index}]: allowed keys are {', '.join(allowed)}")
    kind = raw["scheme"]
    if kind not in SCHEME_KINDS:
        raise ConfigError(
            f"schemes[{index}]: unknown scheme {kind!r} (one of {', '.join(SCHEME_KINDS)})"
        )
    mode = raw.get("mode", "idle")
    if mode not in ("idle", "exact") or (kind != "mltcp" and "mode" in raw):
        raise ConfigError(f"schemes[{index}].mode", f"idle or exact, for mltcp only, got {mode!r}")
    rule: dict[str, Any] = {}
    for key in ("slope", "intercept", "scale_cut"):
        if key in raw:
            if kind != "mltcp":
                raise ConfigError(f"schemes[{index}].{key}", "for mltcp only")
            field_name = f"schemes[{index}].{key}"
            if key != "scale_cut":
                rule[key] = schema.number(raw[key], field_name)
            elif isinstance(raw[key], bool):
                rule[key] = raw[key]
            else:
                raise ConfigError(field_name, f"true or false, got {raw[key]!r}")
    if rule:
        from mltcp.policy import MltcpParams

        try:
            MltcpParams(**rule)
        except ValueError as e:
            raise ConfigError(f"schemes[{index}]", str(e)) from None
    return SchemeSpec(str(raw.get("name", kind)), kind, raw.get("cc"), mode, **rule)


# -- running -----------------------------------------------------------------------------

Progress = Callable[[str], None]


def run_experiment(
    cfg: RunConfig, out_dir: Path | str, progress: Progress | None = None
) -> ExperimentResult:
    """Run every scheme of ``cfg`` (``ideal`` first); write ``results.json`` after each."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    schemes: dict[str, SchemeResult] = {}
    profiles: dict[str, Any] | None = dict(cfg.profiles) or None
    efficiency = 1.0  # payload bits per bit on the wire, measured in the ideal run
    jitter = 0.0  # the jobs' iteration-time jitter alone (2 sigma / mean), ideal run
    order = sorted(cfg.schemes, key=lambda s: 0 if s.kind == "ideal" else 1)
    for n, scheme in enumerate(order, 1):
        say(f"[{n}/{len(order)}] {scheme.name}: {scheme.kind} scheme")
        t0 = time.time()
        if scheme.kind == "ideal":
            res = _run_ideal(cfg, scheme, out, say)
            profiles = {**res.profiles, **cfg.profiles}
            efficiency, jitter = payload_efficiency(cfg, res), iteration_jitter(res)
        elif scheme.kind == "cassini":
            if profiles is None:
                say(
                    f"[{n}/{len(order)}] profiling each job alone "
                    f"({cfg.profile_iterations} iterations)"
                )
                short = _with_iterations(cfg, cfg.profile_iterations)
                alone = _run_ideal(short, scheme, out / "profiling", say)
                profiles, efficiency = dict(alone.profiles), payload_efficiency(cfg, alone)
                jitter = iteration_jitter(alone)
            res = _run_cassini(cfg, scheme, profiles, efficiency, jitter, out, say, schemes)
        else:
            offsets = _start_offsets(cfg, scheme)
            res = _run_together(cfg, scheme, out / scheme.name, offsets, progress=say)
        schemes[scheme.name] = replace(res, duration_s=time.time() - t0)
        ExperimentResult(schemes, cfg.raw).write(out / "results.json")
    return ExperimentResult(schemes, cfg.raw)


def _cc(cfg: RunConfig, scheme: SchemeSpec) -> str:
    if scheme.cc:
        return scheme.cc
    if scheme.kind == "mltcp":
        return cfg.topology.fabric.regime.mltcp_cc
    return cfg.cc


def _ensure_cc(cc: str) -> None:
    """Load our BPF congestion controls on demand (MLTCP variants, dctcp_bpf)."""
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    if cc in available:
        return
    if cc.startswith("mltcp_") or cc == "dctcp_bpf":
        try:
            from mltcp import loader
        except ImportError as e:
            raise TestbedError(f"{cc} needs the mltcp package: {e}") from None
        loader.load(variant="all")
        return
    raise TestbedError(f"congestion control {cc!r} is not available (have {' '.join(available)})")


def _with_iterations(cfg: RunConfig, iterations: int) -> RunConfig:
    jobs = tuple(
        JobSpec(**{**j.__dict__, "iterations": min(j.iterations, iterations)}) for j in cfg.jobs
    )
    return RunConfig(**{**cfg.__dict__, "jobs": jobs})


def _estimated_period(cfg: RunConfig, job: JobSpec) -> float:
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


def _start_offsets(cfg: RunConfig, scheme: SchemeSpec) -> dict[str, float]:
    if scheme.kind == "random":
        rng = random.Random(cfg.seed)
        return {j.job_id: rng.uniform(0, _estimated_period(cfg, j)) for j in cfg.jobs}
    return {j.job_id: float(j.shift) if isinstance(j.shift, int | float) else 0.0 for j in cfg.jobs}


def _profile_source(cfg: RunConfig, job: JobSpec) -> str:
    if cfg.profile_source != "auto":
        return cfg.profile_source
    return "log" if job.kind == "synthetic" else "hook"


def _run_ideal(cfg: RunConfig, scheme: SchemeSpec, out: Path, say: Progress) -> SchemeResult:
    """Each job alone on the cluster; its profile measured from the chosen source (worker
    log, DDP bucket hook, or a capture on its rank 0's host)."""
    jobs: dict[str, JobResult] = {}
    profiles = {}
    sources = set()
    link_bytes: dict[str, int] = {}
    for job in cfg.jobs:
        one = RunConfig(**{**cfg.__dict__, "jobs": (job,)})
        where = out / f"ideal-{job.job_id}"
        source = _profile_source(cfg, job)
        sources.add(source)
        pcap = where / "rank0.pcap" if source == "pcap" else None
        part = _run_together(one, scheme, where, {job.job_id: 0.0}, capture=pcap, progress=say)
        jobs[job.job_id] = part.jobs[job.job_id]
        link_bytes.update({f"{job.job_id}:{d}": b for d, b in part.link_bytes.items()})
        profiles[job.job_id] = _measured_profile(cfg, job, part.jobs[job.job_id], source, pcap)
    return SchemeResult(
        name=scheme.name,
        kind=scheme.kind,
        cc=_cc(cfg, scheme),
        fabric=cfg.topology.fabric.kind,
        jobs=jobs,
        link_bytes=link_bytes,
        profiles=profiles,
        profile_source="+".join(sorted(sources)),
    )


def _measured_profile(
    cfg: RunConfig, job: JobSpec, result: JobResult, source: str, pcap: Path | None
) -> Any:
    """The job's profile: from its rank 0's timing log (one phase), its DDP bucket
    records (one phase per bucket all-reduce), or the capture on rank 0's host."""
    records = result.records(0)
    if source == "log" or (source == "hook" and job.kind == "synthetic"):
        return measure.profile_from_log(job.job_id, records)
    if source == "hook":
        return _profile_from_buckets(job.job_id, records, len(job.hosts))
    ip = cfg.topology.ip(job.hosts[0])
    # the capture gives the shape and the bytes, over whole iterations after the first
    # (warm-up): set-up, model broadcast and idle time before them would dilute the rates;
    # each iteration is folded from its own start in the worker's log (a fold at one
    # period slid a job's phase 16 ms earlier over 20 iterations, and the advice put the
    # other job's phase on top of where it really was; the autocorrelation alone once
    # took 3 periods on a DDP job's bursty capture)
    if len(records) < 3:
        raise InputError("profile_source", f"pcap: job {job.job_id} needs >= 3 iterations")
    starts = [r["start"] for r in records[1:]]
    return measure.profile_from_pcap(job.job_id, pcap, ip, iteration_starts_s=starts)


def _profile_from_buckets(job_id: str, records: list[dict[str, Any]], world_size: int) -> Any:
    """A DDP job's multi-phase profile from the bucket all-reduces its worker logged
    (``buckets: [[index, bytes, start, end], ...]`` per iteration)."""
    from cassini.measure import BucketRecord, profile_from_buckets

    buckets = [
        BucketRecord(r["iter"], b, nbytes, start, end)
        for r in records
        for b, nbytes, start, end in r.get("buckets", [])
    ]
    starts = {r["iter"]: r["start"] for r in records}
    return profile_from_buckets(job_id, buckets, world_size, starts)


def payload_efficiency(cfg: RunConfig, ideal: SchemeResult) -> float:
    """Payload bits the jobs moved per bit their shared links carried in the ideal run
    (TCP/IP and Ethernet headers, ACKs): the median over jobs that cross a shared link,
    1.0 when none does.  Profiles' rates are payload rates, so the advisor is given each
    link's capacity times this share.

    A ring all-reduce's ranks send equal shares, and each hop's bytes cross every
    measured link direction on its path once: a job's expected payload on them is
    ``crossings * bytes / ranks`` (on the dumbbell each hop crosses one direction, on a
    leaf-spine two: leaf to spine and spine to leaf)."""
    shares = []
    for job in cfg.jobs:
        if job.job_id not in ideal.jobs:
            continue
        measured = {k.split(":", 1)[1]: b for k, b in ideal.link_bytes.items()
                    if k.startswith(f"{job.job_id}:")}  # fmt: skip
        crossings = sum(1 for d in cfg.topology.ring_links(job.hosts) if d in measured)
        wire = sum(measured.values())
        if wire > 0 and crossings:
            payload = crossings * ideal.jobs[job.job_id].bytes / len(job.hosts)
            shares.append(payload / wire)
    return min(1.0, max(0.5, statistics.median(shares))) if shares else 1.0


def iteration_jitter(ideal: SchemeResult) -> float:
    """The largest relative jitter of a job's iteration time alone: 2 standard deviations
    over the mean (0 with fewer than 3 iterations)."""
    out = 0.0
    for job in ideal.jobs.values():
        times = job.iteration_times_s[1:]
        if len(times) >= 3:
            out = max(out, 2 * statistics.stdev(times) / statistics.mean(times))
    return out


def _run_cassini(
    cfg: RunConfig,
    scheme: SchemeSpec,
    profiles: dict[str, Any],
    efficiency: float,
    jitter: float,
    out: Path,
    say: Progress,
    done: dict[str, SchemeResult] | None = None,
) -> SchemeResult:
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
        agent_slack=slack + jitter,  # the prediction holds jobs to the agent's period
    )
    shifts = dict(advice.time_shifts_s)
    for job in cfg.jobs:
        if isinstance(job.shift, int | float):
            shifts[job.job_id] = float(job.shift)
    periods = agent_periods(profiles, advice, slack + jitter)
    on_period = held_time_shifts(links, paths, profiles, periods)
    for job in cfg.jobs:
        if isinstance(job.shift, int | float):
            continue
        if job.job_id in periods:
            shifts[job.job_id] = on_period[job.job_id]
        else:
            shifts[job.job_id] = 0.0  # not shifted: it starts with the others, as advised
    capacities = {link.link_id: link.capacity_bps for link in links}
    tolerances = slip_tolerances_s(
        capacities, paths, profiles, periods, {j: shifts.get(j, 0.0) for j in periods}
    )
    held = (
        ", ".join(
            f"{j} {shifts.get(j, 0.0) * 1e3:.1f} ms (slip tolerance {tolerances[j] * 1e3:.1f} ms)"
            for j in periods
        )
        or "none"
    )
    say(f"  cassini shifts: {held}")
    same = _same_schedule(cfg, scheme, shifts, periods, done or {})
    if same is not None:
        say(f"  cassini declined every shift: the jobs run as in {same.name!r}, not re-run")
        return replace(
            same,
            name=scheme.name,
            kind=scheme.kind,
            advice=advice.to_dict(),
            profiles=profiles,
            measured_as=same.name,
        )
    res = _run_together(
        cfg, scheme, out / scheme.name, shifts, periods, progress=say, tolerances=tolerances
    )
    return replace(res, advice=advice.to_dict(), profiles=profiles)


def _same_schedule(
    cfg: RunConfig,
    scheme: SchemeSpec,
    shifts: dict[str, float],
    periods: dict[str, float],
    done: dict[str, SchemeResult],
) -> SchemeResult | None:
    """The same-start result of this run when CASSINI declined every shift (no job held,
    every job starting at 0 s on the same congestion control): then CASSINI's schedule
    *is* that scheme's, and running it again would only measure the testbed's run-to-run
    noise (up to 30 % here).  None when CASSINI shifts anything, when no such scheme ran
    yet, or when the config asks for ``agent.rerun_declined``."""
    if cfg.rerun_declined or periods or any(shifts.get(j.job_id, 0.0) for j in cfg.jobs):
        return None
    cc = _cc(cfg, scheme)
    for res in done.values():
        if res.kind == "baseline" and res.cc == cc and res.measured_as is None:
            return res
    return None


def max_link_load(
    links: list[Link], paths: dict[str, tuple[str, ...]], profiles: dict[str, Any]
) -> float:
    """The largest share of a link that the bytes of the jobs crossing it need
    (:func:`cassini.predict.link_load`, at most 1: beyond, the periods are stretched),
    over links two or more jobs share; 0 when none is shared."""
    from cassini.predict import link_load

    worst = 0.0
    for link in links:
        on = [profiles[j] for j, p in paths.items() if link.link_id in p and j in profiles]
        if len(on) > 1:
            worst = max(worst, min(1.0, link_load(on, link.capacity_bps)))
    return worst


def agent_periods(profiles: dict[str, Any], advice: Any, slack: float) -> dict[str, float]:
    """Period (seconds) the time-shift agent holds each job to
    (:func:`cassini.predict.agent_periods_s`: the circle's iteration time, stretched by
    what the links' bytes require, times ``1 + slack``); jobs that share no link, or that
    the advice says not to shift (shifting does not pay), are left out and run free."""
    from cassini.predict import agent_periods_s

    best = advice.candidates[0] if advice.candidates else None
    prediction = getattr(best, "prediction", None)
    shift = dict(prediction.shift) if prediction is not None else None
    return agent_periods_s(profiles, advice.link_solutions.values(), slack=slack, shift=shift)


def _run_together(
    cfg: RunConfig,
    scheme: SchemeSpec,
    logs_dir: Path,
    offsets: dict[str, float],
    periods: dict[str, float] | None = None,
    capture: Path | None = None,
    progress: Progress | None = None,
    tolerances: dict[str, float] | None = None,
) -> SchemeResult:
    """All of ``cfg``'s jobs on one freshly built cluster, each starting at its offset
    (seconds after a common epoch) or held to ``periods`` by the agent, which re-aligns a
    held job once it runs later than ``tolerances[job]`` (seconds; default 5 % of its
    period)."""
    topo = cfg.topology
    cc = _cc(cfg, scheme)
    _ensure_cc(cc)
    logs_dir.mkdir(parents=True, exist_ok=True)
    fabric_dirs = [d for link in topo.bottlenecks() for d in link.directions()]
    logs = {
        j.job_id: tuple(logs_dir / f"{j.job_id}-rank{r}.jsonl" for r in range(len(j.hosts)))
        for j in cfg.jobs
    }
    for paths in logs.values():  # leftovers of an earlier run in this directory
        for path in paths:
            Path(str(path) + startgate.READY_SUFFIX).unlink(missing_ok=True)
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            EmulatedCluster(topo, job_sources=[j.hosts for j in cfg.jobs], cc=cc)
        )
        tags: dict[str, str] = {}
        cgroups: dict[str, Path] = {}
        marks_fd: int | None = None
        if scheme.kind == "mltcp":  # each job's sockets tied to it, however they are opened
            run_id = f"{os.getpid()}.{time.time():.3f}"
            tags = {j.job_id: f"{j.job_id}@{run_id}" for j in cfg.jobs}
            cgroups = stack.enter_context(
                mltcp_jobs.job_cgroups(
                    cc, tags, scheme.mode, scheme.slope, scheme.intercept, scheme.scale_cut
                )
            )
            marks_fd = mltcp_jobs.marks_fd() if scheme.mode == "exact" else None
            if marks_fd is not None:
                stack.callback(os.close, marks_fd)
        if capture is not None:
            stack.enter_context(Capture(cluster, cfg.jobs[0].hosts[0], capture))
        slow_start = 2.0 * any(j.kind != "synthetic" for j in cfg.jobs)
        procs = []
        for k, job in enumerate(cfg.jobs):
            for rank, host in enumerate(job.hosts):
                log = logs[job.job_id][rank]
                spec = _worker_spec(cfg, job, k, rank, offsets, periods, log, tolerances)
                # the epoch is the go file's, written once every worker is ready
                spec["start_gate"] = str(logs_dir / "go.json")
                if scheme.kind == "mltcp" and scheme.mode == "exact":
                    spec["mltcp_job"] = tags[job.job_id]  # workers mark every iteration
                    spec["mltcp_marks_fd"] = marks_fd  # inherited: hosts have their own /sys
                spec_path = log.with_suffix(".spec.json")
                spec_path.write_text(json.dumps(spec))
                module = "testbed.worker" if job.kind == "synthetic" else "testbed.ddp_worker"
                # the worker's own output goes to a file next to its log: a pipe nobody
                # reads would block it once full
                output = stack.enter_context(open(log.with_suffix(".out"), "w"))
                argv = [sys.executable, "-m", module, str(spec_path)]
                procs.append(
                    cluster.popen(
                        host,
                        argv,
                        pass_fds=(marks_fd,) if spec.get("mltcp_marks_fd") else (),
                        stdout=output,
                        stderr=subprocess.STDOUT,
                    )
                )
                if cgroups:  # from here, before it opens a socket (imports take seconds)
                    mltcp_jobs.join(cgroups[job.job_id], procs[-1].pid)
        timeout = (
            60
            + slow_start * 10
            + 4
            * max(
                (j.iterations + 2) * _estimated_period(cfg, j) + offsets.get(j.job_id, 0.0)
                for j in cfg.jobs
            )
        )
        every_log = [path for paths in logs.values() for path in paths]
        gate = logs_dir / "go.json"
        gate.unlink(missing_ok=True)
        start_timeout = 120 + 60 * sum(j.kind != "synthetic" for j in cfg.jobs)
        if (
            startgate.release_when_ready(
                every_log, gate, start_timeout, lambda: any(p.poll() is not None for p in procs)
            )
            is None
        ):
            for p in procs:
                p.kill()
            raise TestbedError(
                f"{scheme.name}: workers not ready after {start_timeout} s or one died; "
                f"worker output (*.out) in {logs_dir}"
            )
        # counted from here: the workers' connection set-up and warm-up are behind them
        before = cluster.tx_bytes(fabric_dirs)
        rank0 = {j: paths[0] for j, paths in logs.items()}
        codes = _wait_with_progress(procs, rank0, cfg, timeout, progress)
        after = cluster.tx_bytes(fabric_dirs)
        marks = cluster.ecn_marks()
        flows = {j: mltcp_jobs.job_flows(tag) for j, tag in tags.items()}
    failed = [c for c in codes if c != 0]
    if failed:
        raise TestbedError(
            f"{scheme.name}: {len(failed)} worker(s) failed (exit codes {failed}); "
            f"logs and worker output (*.out) in {logs_dir}"
        )
    jobs = {}
    for job in cfg.jobs:
        records = read_log(logs[job.job_id][0])
        sent = sum(r["bytes_sent"] for path in logs[job.job_id] for r in read_log(path))
        held = bool(periods and job.job_id in periods)
        jobs[job.job_id] = JobResult(
            job_id=job.job_id,
            iteration_times_s=tuple(measure.iteration_times(records)),
            bytes=sent,
            logs=logs[job.job_id],
            start_offset_s=offsets.get(job.job_id, 0.0),
            comm_times_s=tuple(r["end"] - r["comm_start"] for r in records),
            realignments=records[-1].get("realignments", 0) if held else None,
            released=records[-1].get("released", False) if held else None,
            period_s=periods[job.job_id] if held else None,
            tolerance_s=(tolerances or {}).get(job.job_id) if held else None,
        )
    return SchemeResult(
        name=scheme.name,
        kind=scheme.kind,
        cc=cc,
        fabric=topo.fabric.kind,
        jobs=jobs,
        link_bytes={d: after[d] - before.get(d, 0) for d in after},
        ecn_marks=marks or {},
        mltcp_flows={
            j: {"mode": scheme.mode, "steps": _marked_steps(cfg, j), "flows": f}
            for j, f in flows.items()
        },
    )


def _marked_steps(cfg: RunConfig, job_id: str) -> int:
    """Iteration ends a job's workers mark in MLTCP's exact mode: every optimizer step of
    a DDP job (its two warm-up steps included), every timed iteration of a synthetic one."""
    job = next(j for j in cfg.jobs if j.job_id == job_id)
    return job.iterations + (2 if job.kind != "synthetic" else 0)


def _worker_spec(
    cfg: RunConfig,
    job: JobSpec,
    index: int,
    rank: int,
    offsets: dict[str, float],
    periods: dict[str, float] | None,
    log: Path,
    tolerances: dict[str, float] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "job_id": job.job_id,
        "rank": rank,
        "addrs": [cfg.topology.ip(h) for h in job.hosts],
        "port": BASE_PORT + index,
        "compute_s": job.compute_s,
        "bytes": job.bytes,
        "iterations": job.iterations,
        "shift_s": offsets.get(job.job_id, 0.0),
        "jitter": job.jitter,
        "seed": cfg.seed + index,
        "out": str(log),
        "width": job.width,
        "layers": job.layers,
        "batch": job.batch,
        "world_size": len(job.hosts),
        "iface": f"{job.hosts[rank]}-eth0",
        "kind": job.kind,
        "clock_offset_s": job.clock_offset_s,
    }
    if job.kind == "model":
        spec.update(
            model=job.model,
            compute=job.compute,
            calibration=str(Path(job.calibration).resolve()),
            scale=job.scale,
        )
    if periods and job.job_id in periods:
        spec["period_s"] = periods[job.job_id]
        spec["shift_s"] = offsets.get(job.job_id, 0.0) % periods[job.job_id]
        if tolerances and job.job_id in tolerances:
            spec["tolerance_s"] = tolerances[job.job_id]
    return spec


def _wait_with_progress(
    procs: list,
    rank0: dict[str, Path],
    cfg: RunConfig,
    timeout: float,
    say: Progress | None,
) -> list[int]:
    say = say or (lambda msg: None)
    deadline = time.time() + timeout
    total = {j.job_id: j.iterations for j in cfg.jobs}
    last_line = 0.0
    tty = sys.stderr.isatty()
    while any(p.poll() is None for p in procs):
        if time.time() > deadline:
            break
        done = {j: _count_lines(path) for j, path in rank0.items()}
        if any(p.poll() not in (None, 0) for p in procs):
            break  # a worker died: stop the rest now, not at the deadline
        line = "  " + " ".join(f"{j} {done[j]}/{total[j]}" for j in done)
        if tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif time.time() - last_line > 5:
            say(line)
            last_line = time.time()
        time.sleep(0.25)
    if tty:
        print(file=sys.stderr)
    return wait_all(procs, max(1.0, deadline - time.time()))


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def format_table(results: ExperimentResult) -> str:
    """Scheme x job: mean, p50, p99 iteration time (ms) and mean as a ratio to ideal."""
    ideal = results.ideal
    lines = [
        f"{'scheme':<14} {'job':<10} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs ideal':>9}"
    ]
    for name, res in results.schemes.items():
        ratios = res.ratios(ideal) if ideal else {}
        for job, s in res.summary.items():
            lines.append(
                f"{name:<14} {job:<10} {s['mean_s'] * 1e3:>8.1f} {s['p50_s'] * 1e3:>8.1f} "
                f"{s['p99_s'] * 1e3:>8.1f} {ratios.get(job, math.nan):>8.2f}x"
            )
    return "\n".join(lines)


def default_out_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="testbed-"))
