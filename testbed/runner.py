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

Output: ``DIR/results.json`` = ``{"schemes": {name: {"jobs": {job: {"iteration_times_s",
"bytes", ...}}, "summary": {job: {"mean_s", "p50_s", "p99_s"}}, ...}}, "config": ...}``.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cassini.advisor import Candidate, Link, advise
from testbed import measure
from testbed.net import Cluster, TestbedError, wait_all
from testbed.topo import Topology, from_config

SCHEME_KINDS = ("ideal", "baseline", "random", "cassini", "mltcp")
JOB_KINDS = ("synthetic", "ddp")
BASE_PORT = 6000


class ConfigError(ValueError):
    """An invalid runner config; the message names the field."""


@dataclass(frozen=True)
class JobSpec:
    """One training job: ``bytes`` all-reduced per iteration after ``compute_s`` seconds
    (synthetic), or a PyTorch DDP model of ``width`` (ddp)."""

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


@dataclass(frozen=True)
class SchemeSpec:
    name: str
    kind: str
    cc: str | None = None


@dataclass(frozen=True)
class RunConfig:
    topology: Topology
    jobs: tuple[JobSpec, ...]
    schemes: tuple[SchemeSpec, ...]
    cc: str = "cubic"
    seed: int = 0
    agent_slack: float = 0.03
    drift_tolerance: float = 0.05
    profile_iterations: int = 12
    profiles: dict[str, Any] = field(default_factory=dict)  # job id -> JobProfile (measured)
    profile_source: str = "log"  # "log" (worker timing) or "pcap" (capture on rank 0's host)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


def load_config(source: str | Path | dict[str, Any]) -> RunConfig:
    """Read and validate a YAML/JSON config (path or mapping); raises ConfigError."""
    if isinstance(source, dict):
        raw = source
    else:
        try:
            raw = yaml.safe_load(Path(source).read_text())
        except OSError as e:
            raise ConfigError(f"cannot read {source}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{source}: not valid YAML: {e}") from None
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
    if not isinstance(agent, dict) or set(agent) - {"slack", "drift_tolerance"}:
        raise ConfigError("agent: a mapping with slack and/or drift_tolerance")
    return RunConfig(
        topology=topo,
        jobs=jobs,
        schemes=schemes,
        cc=str(raw.get("cc", "dctcp_bpf" if topo.fabric.kind == "ecn" else "cubic")),
        seed=int(raw.get("seed", 0)),
        agent_slack=float(agent.get("slack", 0.03)),
        drift_tolerance=float(agent.get("drift_tolerance", 0.05)),
        profile_iterations=int(raw.get("profile_iterations", 12)),
        profiles=_profiles(raw.get("profiles"), {j.job_id for j in jobs}),
        profile_source=_choice(raw.get("profile_source", "log"), "profile_source", ("log", "pcap")),
        raw=raw,
    )


def _profiles(raw: Any, job_ids: set[str]) -> dict[str, Any]:
    """Measured profiles given in the config (``profiles: {job: JOB}``), for cassini."""
    if raw is None:
        return {}
    from cassini.errors import InputError
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
    where = f"jobs[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping")
    known = set(JobSpec.__dataclass_fields__) - {"job_id"} | {"id"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown field (allowed: {', '.join(sorted(known))})")
    for key in ("id", "hosts", "iterations"):
        if key not in raw:
            raise ConfigError(f"{where}.{key}: missing required field")
    kind = raw.get("kind", "synthetic")
    if kind not in JOB_KINDS:
        raise ConfigError(f"{where}.kind: must be one of {', '.join(JOB_KINDS)}, got {kind!r}")
    hosts = raw["hosts"]
    if not isinstance(hosts, list) or len(hosts) < 2:
        raise ConfigError(f"{where}.hosts: a list of at least 2 hosts")
    for h in hosts:
        if h not in topo.hosts:
            raise ConfigError(f"{where}.hosts: unknown host {h!r} (have {', '.join(topo.hosts)})")
    shift = raw.get("shift")
    if (
        shift is not None
        and shift != "auto"
        and not (isinstance(shift, int | float) and shift >= 0)
    ):
        raise ConfigError(f"{where}.shift: seconds >= 0 or 'auto', got {shift!r}")
    spec = JobSpec(
        job_id=str(raw["id"]),
        kind=kind,
        hosts=tuple(hosts),
        iterations=int(raw["iterations"]),
        compute_s=float(raw.get("compute_s", 0.05)),
        bytes=int(raw.get("bytes", 1_000_000)),
        shift=shift,
        jitter=float(raw.get("jitter", 0.0)),
        width=int(raw.get("width", 256)),
        layers=int(raw.get("layers", 3)),
        batch=int(raw.get("batch", 32)),
    )
    if spec.iterations < 3:
        raise ConfigError(f"{where}.iterations: at least 3, got {spec.iterations}")
    if spec.compute_s < 0 or spec.bytes < 1 or not 0 <= spec.jitter < 1:
        raise ConfigError(f"{where}: compute_s >= 0, bytes >= 1 and 0 <= jitter < 1")
    return spec


def _scheme(raw: Any, index: int) -> SchemeSpec:
    if isinstance(raw, str):
        raw = {"scheme": raw}
    if not isinstance(raw, dict) or "scheme" not in raw:
        raise ConfigError(f"schemes[{index}]: a scheme name or {{scheme:, name:, cc:}}")
    if set(raw) - {"scheme", "name", "cc"}:
        raise ConfigError(f"schemes[{index}]: allowed keys are scheme, name, cc")
    kind = raw["scheme"]
    if kind not in SCHEME_KINDS:
        raise ConfigError(
            f"schemes[{index}]: unknown scheme {kind!r} (one of {', '.join(SCHEME_KINDS)})"
        )
    return SchemeSpec(str(raw.get("name", kind)), kind, raw.get("cc"))


# -- running -----------------------------------------------------------------------------

Progress = Callable[[str], None]


def run_experiment(
    cfg: RunConfig, out_dir: Path | str, progress: Progress | None = None
) -> dict[str, Any]:
    """Run every scheme of ``cfg``; write and return the results."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    results: dict[str, Any] = {"schemes": {}, "config": cfg.raw}
    profiles: dict[str, Any] | None = dict(cfg.profiles) or None
    order = sorted(cfg.schemes, key=lambda s: 0 if s.kind == "ideal" else 1)
    for n, scheme in enumerate(order, 1):
        say(f"[{n}/{len(order)}] {scheme.name}: {scheme.kind} scheme")
        t0 = time.time()
        if scheme.kind == "ideal":
            res = _run_ideal(cfg, scheme, out, say)
            measured = res.pop("_profiles")
            profiles = {**measured, **cfg.profiles}
        elif scheme.kind == "cassini":
            if profiles is None:
                say(
                    f"[{n}/{len(order)}] profiling each job alone "
                    f"({cfg.profile_iterations} iterations)"
                )
                short = _with_iterations(cfg, cfg.profile_iterations)
                profiles = _run_ideal(short, scheme, out / "profiling", say)["_profiles"]
            res = _run_cassini(cfg, scheme, profiles, out, say)
        else:
            res = _run_together(cfg, scheme, out, say, _start_offsets(cfg, scheme))
        res["duration_s"] = time.time() - t0
        results["schemes"][scheme.name] = res
        (out / "results.json").write_text(json.dumps(results, indent=1))
    return results


def _cc(cfg: RunConfig, scheme: SchemeSpec) -> str:
    if scheme.cc:
        return scheme.cc
    if scheme.kind == "mltcp":
        return "mltcp_dctcp" if cfg.topology.fabric.kind == "ecn" else "mltcp_reno"
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
    slowest = min(link.capacity_bps for link in cfg.topology.links)
    n = len(job.hosts)
    return job.compute_s + 2 * (n - 1) / n * job.bytes * 8 / slowest


def _start_offsets(cfg: RunConfig, scheme: SchemeSpec) -> dict[str, float]:
    if scheme.kind == "random":
        rng = random.Random(cfg.seed)
        return {j.job_id: rng.uniform(0, _estimated_period(cfg, j)) for j in cfg.jobs}
    return {j.job_id: float(j.shift) if isinstance(j.shift, int | float) else 0.0 for j in cfg.jobs}


def _run_ideal(cfg: RunConfig, scheme: SchemeSpec, out: Path, say: Progress) -> dict[str, Any]:
    res: dict[str, Any] = {"cc": _cc(cfg, scheme), "jobs": {}, "summary": {}, "link_bytes": {}}
    profiles = {}
    for job in cfg.jobs:
        one = RunConfig(**{**cfg.__dict__, "jobs": (job,)})
        part = _run_together(
            one, scheme, out / f"ideal-{job.job_id}", say, {job.job_id: 0.0}, keep_logs=True
        )
        res["jobs"][job.job_id] = part["jobs"][job.job_id]
        res["summary"][job.job_id] = part["summary"][job.job_id]
        profiles[job.job_id] = part["_logs"][job.job_id]
    res["_profiles"] = {j: measure.profile_from_log(j, recs) for j, recs in profiles.items()}
    res["profiles"] = {j: p.to_dict() for j, p in res["_profiles"].items()}
    return res


def _run_cassini(
    cfg: RunConfig, scheme: SchemeSpec, profiles: dict[str, Any], out: Path, say: Progress
) -> dict[str, Any]:
    topo = cfg.topology
    links = [Link(d["id"], d["capacity_bps"]) for d in topo.advisor_links()]
    paths = {j.job_id: tuple(topo.ring_links(j.hosts)) for j in cfg.jobs}
    advice = advise(links, list(profiles.values()), [Candidate("configured", paths)], loops="score")
    shifts = dict(advice.time_shifts_s)
    for job in cfg.jobs:
        if isinstance(job.shift, int | float):
            shifts[job.job_id] = float(job.shift)
    periods = agent_periods(profiles, advice, cfg.agent_slack)
    for job in cfg.jobs:
        # the agent runs the job on a stretched clock: stretch its shift the same way
        if job.job_id in periods:
            t = profiles[job.job_id].iteration_time_s
            shifts[job.job_id] = shifts.get(job.job_id, 0.0) * periods[job.job_id] / t
    say("  cassini shifts: " + ", ".join(f"{j} {s * 1e3:.1f} ms" for j, s in shifts.items()))
    res = _run_together(cfg, scheme, out, say, shifts, periods)
    res["advice"] = advice.to_dict()
    res["agent_periods_s"] = periods
    return res


def agent_periods(profiles: dict[str, Any], advice: Any, slack: float) -> dict[str, float]:
    """Period (seconds) the time-shift agent holds each job to.

    A job's period is its circle's effective iteration time (its own, or the stretched one
    when the unified period is approximate), times ``1 + slack`` for jitter.  When the
    jobs on a shared link need it busy more than all the time (sum of communication time
    over iteration time above 1), no rotation interleaves them; their periods are then
    stretched by that factor, trading a known slowdown for no contention.
    """
    busy: dict[str, float] = {}
    for sol in advice.link_solutions.values():
        load = sum(
            sum(p.duration_s for p in profiles[j].phases) / profiles[j].iteration_time_s
            for j in sol.job_ids
        )
        for j in sol.job_ids:
            busy[j] = max(busy.get(j, 1.0), load)
    periods = {}
    for job_id, profile in profiles.items():
        if job_id not in busy:
            continue  # shares no link: nothing to interleave with, no agent
        effective = [
            sol.unified.period_s / sol.unified.repeats[sol.job_ids.index(job_id)]
            for sol in advice.link_solutions.values()
            if job_id in sol.job_ids
        ]
        base = max([profile.iteration_time_s, *effective])
        periods[job_id] = base * busy.get(job_id, 1.0) * (1 + slack)
    return periods


def _run_together(
    cfg: RunConfig,
    scheme: SchemeSpec,
    out: Path,
    say: Progress,
    offsets: dict[str, float],
    periods: dict[str, float] | None = None,
    keep_logs: bool = False,
    capture: Path | None = None,
) -> dict[str, Any]:
    topo = cfg.topology
    cc = _cc(cfg, scheme)
    _ensure_cc(cc)
    logs_dir = out if keep_logs else out / scheme.name
    logs_dir.mkdir(parents=True, exist_ok=True)
    fabric_dirs = [d for link in topo.bottlenecks() for d in link.directions()]
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(Cluster(topo, job_sources=[j.hosts for j in cfg.jobs], cc=cc))
        if capture is not None:
            stack.enter_context(measure.Capture(cluster, cfg.jobs[0].hosts[0], capture))
        before = cluster.tx_bytes(fabric_dirs)
        epoch = time.time() + 2.0 + 2.0 * any(j.kind == "ddp" for j in cfg.jobs)
        procs, rank0 = [], {}
        for k, job in enumerate(cfg.jobs):
            for rank, host in enumerate(job.hosts):
                log = logs_dir / f"{job.job_id}-rank{rank}.jsonl"
                spec = _worker_spec(cfg, job, k, rank, epoch, offsets, periods, log)
                spec_path = logs_dir / f"{job.job_id}-rank{rank}.spec.json"
                spec_path.write_text(json.dumps(spec))
                module = "testbed.worker" if job.kind == "synthetic" else "testbed.ddp_worker"
                procs.append(cluster.popen(host, [sys.executable, "-m", module, str(spec_path)]))
                if rank == 0:
                    rank0[job.job_id] = log
        timeout = 60 + 4 * max(
            (j.iterations + 2) * _estimated_period(cfg, j) + offsets.get(j.job_id, 0.0)
            for j in cfg.jobs
        )
        codes = _wait_with_progress(procs, rank0, cfg, scheme, timeout, say)
        after = cluster.tx_bytes(fabric_dirs)
        marks = cluster.ecn_marks()
    failed = [c for c in codes if c != 0]
    if failed:
        raise TestbedError(
            f"{scheme.name}: {len(failed)} worker(s) failed (exit codes {failed}); "
            f"logs in {logs_dir}"
        )
    res: dict[str, Any] = {
        "cc": cc,
        "fabric": topo.fabric.kind,
        "jobs": {},
        "summary": {},
        "link_bytes": {d: after[d] - before.get(d, 0) for d in after},
        "_logs": {},
    }
    if marks:
        res["ecn_marks"] = marks
    for job in cfg.jobs:
        records = measure.read_log(rank0[job.job_id])
        times = measure.iteration_times(records)
        sent = sum(
            r["bytes_sent"]
            for rank in range(len(job.hosts))
            for r in measure.read_log(logs_dir / f"{job.job_id}-rank{rank}.jsonl")
        )
        entry = {
            "iteration_times_s": times,
            "bytes": sent,
            "start_offset_s": offsets.get(job.job_id, 0.0),
            "comm_times_s": [r["end"] - r["comm_start"] for r in records],
        }
        if periods and job.job_id in periods:
            entry["realignments"] = records[-1].get("realignments", 0)
        res["jobs"][job.job_id] = entry
        res["summary"][job.job_id] = measure.summary(times)
        res["_logs"][job.job_id] = records
    if not keep_logs:
        res.pop("_logs")
    return res


def _worker_spec(
    cfg: RunConfig,
    job: JobSpec,
    index: int,
    rank: int,
    epoch: float,
    offsets: dict[str, float],
    periods: dict[str, float] | None,
    log: Path,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "job_id": job.job_id,
        "rank": rank,
        "addrs": [cfg.topology.ip(h) for h in job.hosts],
        "port": BASE_PORT + index,
        "compute_s": job.compute_s,
        "bytes": job.bytes,
        "iterations": job.iterations,
        "epoch_s": epoch,
        "shift_s": offsets.get(job.job_id, 0.0),
        "jitter": job.jitter,
        "seed": cfg.seed + index,
        "out": str(log),
        "width": job.width,
        "layers": job.layers,
        "batch": job.batch,
        "world_size": len(job.hosts),
        "iface": f"{job.hosts[rank]}-eth0",
    }
    if periods and job.job_id in periods:
        spec["period_s"] = periods[job.job_id]
        spec["shift_s"] = offsets.get(job.job_id, 0.0) % periods[job.job_id]
    return spec


def _wait_with_progress(
    procs: list,
    rank0: dict[str, Path],
    cfg: RunConfig,
    scheme: SchemeSpec,
    timeout: float,
    say: Progress,
) -> list[int]:
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


def format_table(results: dict[str, Any]) -> str:
    """Scheme x job: mean, p50, p99 iteration time (ms) and mean as a ratio to ideal."""
    schemes = results["schemes"]
    ideal = schemes.get("ideal", {}).get("summary", {})
    lines = [
        f"{'scheme':<14} {'job':<10} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs ideal':>9}"
    ]
    for name, res in schemes.items():
        for job, s in res["summary"].items():
            ratio = s["mean_s"] / ideal[job]["mean_s"] if job in ideal else math.nan
            lines.append(
                f"{name:<14} {job:<10} {s['mean_s'] * 1e3:>8.1f} {s['p50_s'] * 1e3:>8.1f} "
                f"{s['p99_s'] * 1e3:>8.1f} {ratio:>8.2f}x"
            )
    return "\n".join(lines)


def default_out_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="testbed-"))
