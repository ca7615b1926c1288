"""Simulation configuration files (YAML or JSON), read strictly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cassini import schema
from cassini.errors import InputError
from cassini.profile import JobProfile, library_model
from cassini.sim.config_sections import (
    check_schedulers,
    parse_count,
    parse_options,
    parse_poisson,
    parse_precision,
    parse_profiles,
    parse_sweep,
)
from cassini.sim.options import SimOptions
from cassini.sim.recorded import host_servers, recorded_warnings
from cassini.sim.schedulers import Scheduler
from cassini.sim.topologies import Topology, is_topology_form
from cassini.sim.topologies import build as build_topology
from cassini.sim.topology import SINGLE_ROUTING_SPINES, Cluster
from cassini.sim.workload import (
    JobSpec,
    library_on_cluster,
    load_library,
    poisson_jobs,
    profile_warnings,
)

BAD_ROWS = ("error", "skip")


@dataclass(frozen=True)
class Workload:
    """The jobs of a run and where they came from: ``summary`` is JSON for the report
    (a trace's format, bad and skipped rows, every assumption its reader applied)."""

    jobs: list[JobSpec]
    summary: dict[str, Any]


@dataclass(frozen=True)
class SimConfig:
    """A parsed configuration; ``poisson`` or ``trace`` says where jobs come from."""

    cluster: Cluster | Topology
    schedulers: tuple[str, ...]
    poisson: Mapping[str, Any] | None = None
    trace: Path | None = None
    trace_format: str | None = None
    bad_rows: str = "error"
    profiles: tuple[Path, ...] = ()
    candidates: int = 10
    seed: int = 0
    precision_deg: float = 5.0
    name: str = "sim"
    sweep: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    options: SimOptions = field(default_factory=SimOptions)
    #: the keys the config file set (top level, and ``cluster.spines``): the settings
    #: :func:`run_warnings` may say no scheduler of the run uses
    given: frozenset[str] = frozenset()
    #: the file the config was read from, as its errors name it (None: not read from a
    #: file); the run's own checks of it (:func:`check_recorded_hosts`) name it too
    file: str | None = field(default=None, compare=False)

    def settings(self) -> dict[str, Any]:
        """The run's network settings, defaults filled in (``results.json``'s
        ``settings``): network model, routing, priority levels, MLTCP, defrag and
        CASSINI's angle step."""
        return self.options.to_dict() | {"precision_deg": self.precision_deg}

    def library(self) -> dict[str, JobProfile]:
        return load_library(self.profiles)

    def jobs(self, library: Mapping[str, JobProfile]) -> list[JobSpec]:
        return self.read_workload(library).jobs

    def read_workload(self, library: Mapping[str, JobProfile]) -> Workload:
        """The jobs, from the trace (any format of :mod:`cassini.sim.traces`) or drawn.
        A trace's run times and a Poisson ``load`` are counted in the profiles as jobs
        run them on the cluster under ``profiles:`` (:func:`library_on_cluster`: on its
        server links), as the docs define them on a dedicated network."""
        library = library_on_cluster(library, self.cluster, self.options.profiles)
        if self.trace is not None:
            from cassini.sim.traces import read

            got = read(
                self.trace,
                library,
                format=self.trace_format,
                seed=self.seed,
                strict=self.bad_rows == "error",
                max_gpus=self.cluster.gpus,  # a larger job is a bad row (file:line)
            )
            return Workload(got.jobs, {"trace": str(self.trace), **got.summary()})
        p = dict(self.poisson or {})
        jobs = poisson_jobs(
            p["jobs"],
            p["load"],
            self.cluster.gpus,
            library,
            gpus=p["gpus"],
            iterations=tuple(p.get("iterations", (200, 1000))),
            models=p.get("models"),
            seed=self.seed,
        )
        return Workload(jobs, {"poisson": self.poisson})

    def variant(self, **axes: Any) -> SimConfig:
        """This configuration with sweep axes (load, seed, scheduler, oversubscription)
        set to the given values."""
        out = self
        if "load" in axes:
            if out.poisson is None:
                raise InputError("sweep.load", "needs a poisson workload")
            out = replace(out, poisson={**out.poisson, "load": axes["load"]})
        if "seed" in axes:
            out = replace(out, seed=int(axes["seed"]))
        if "scheduler" in axes:
            out = replace(out, schedulers=(axes["scheduler"],))
        if "oversubscription" in axes:
            over = float(axes["oversubscription"])
            if isinstance(out.cluster, Topology):
                source = {**out.cluster.source, "oversubscription": over}
                c = build_topology(source, "cluster", Path("."))
            else:
                c = replace(out.cluster, oversubscription=over)
            out = replace(out, cluster=c)
        return out


def read_config(path: Path | str) -> SimConfig:
    """Read a YAML/JSON configuration; InputError names the first bad field."""
    from cassini import files

    path = Path(path)
    obj = files.read_data(path)
    try:
        cfg = check_models(config_from_dict(obj, base=path.parent))
    except InputError as e:
        raise e.in_file(path) from None
    return replace(cfg, file=str(path))


def check_recorded_hosts(cfg: SimConfig, jobs: Sequence[JobSpec]) -> None:
    """When a scheduler of ``cfg`` replays recorded placement, the engine's own check
    that ``jobs``' hosts fit the cluster (:func:`~cassini.sim.recorded.host_servers`),
    before any scheduler runs; its InputError names the config's file, as every other
    error of the config does."""
    if not any(Scheduler.parse(n).policy == "recorded" for n in cfg.schedulers):
        return
    try:
        host_servers(jobs, cfg.cluster)
    except InputError as e:
        raise (e.in_file(cfg.file) if cfg.file else e) from None


def config_from_dict(obj: Any, base: Path = Path(".")) -> SimConfig:
    obj = schema.require_object(obj, "config")
    schema.check_fields(
        obj,
        "",
        ("cluster", "workload", "schedulers"),
        (
            "name",
            "profiles",
            "candidates",
            "seed",
            "precision_deg",
            "sweep",
            "routing",
            "priority_levels",
            "mltcp",
            "defrag",
            "network",
        ),
    )
    if is_topology_form(obj["cluster"]):
        cluster = build_topology(obj["cluster"], "cluster", base)
    else:
        cluster = Cluster.from_dict(obj["cluster"], "cluster")
    schedulers = tuple(
        schema.identifier(s, f"schedulers[{i}]")
        for i, s in enumerate(schema.array(obj["schedulers"], "schedulers", non_empty=True))
    )
    check_schedulers(schedulers, "schedulers")
    workload = schema.require_object(obj["workload"], "workload")
    schema.check_fields(workload, "workload", (), ("poisson", "trace", "format", "bad_rows"))
    if ("poisson" in workload) == ("trace" in workload):
        raise InputError("workload", "give exactly one of poisson and trace")
    poisson, trace, trace_format, bad_rows = None, None, None, "error"
    if "trace" in workload:
        from cassini.sim.traces import READERS

        trace = base / schema.identifier(workload["trace"], "workload.trace")
        if "format" in workload:
            trace_format = schema.identifier(workload["format"], "workload.format")
            if trace_format not in READERS:
                raise InputError(
                    "workload.format",
                    f"unknown trace format {trace_format!r} (one of {', '.join(READERS)})",
                )
        bad_rows = schema.choice(workload.get("bad_rows", "error"), "workload.bad_rows", BAD_ROWS)
    elif "format" in workload or "bad_rows" in workload:
        raise InputError("workload.format", "only with a trace")
    else:
        poisson = parse_poisson(workload["poisson"], cluster)
    profile_rule, profile_files = parse_profiles(obj.get("profiles", []))
    profiles = tuple(
        base / schema.identifier(p, f"profiles[{i}]") for i, p in enumerate(profile_files)
    )
    sweep = parse_sweep(obj.get("sweep", {}))
    cfg = SimConfig(
        cluster=cluster,
        schedulers=schedulers,
        poisson=poisson,
        trace=trace,
        trace_format=trace_format,
        bad_rows=bad_rows,
        profiles=profiles,
        candidates=parse_count(obj.get("candidates", 10), "candidates"),
        seed=parse_count(obj.get("seed", 0), "seed", minimum=0),
        precision_deg=parse_precision(obj.get("precision_deg", 5.0)),
        name=str(obj.get("name", "sim")),
        sweep=sweep,
        options=replace(parse_options(obj), profiles=profile_rule),
        given=frozenset(obj) | {f"cluster.{k}" for k in obj["cluster"] if k == "spines"},
    )
    return cfg


def run_warnings(cfg: SimConfig, jobs: Sequence[JobSpec] | None = None) -> list[str]:
    """The run's warnings (``results.json``'s ``warnings``, stderr), a line each: a setting
    no scheduler of the run (or the sweep's scheduler axis) uses, ignored; an extra profile
    taken as measured at 50 Gbit/s (``profile_warnings``); a recorded trace's hosts
    (``recorded_warnings``, on ``jobs`` when the run read them, else read again)."""
    run = [Scheduler.parse(n) for n in cfg.sweep.get("scheduler") or cfg.schedulers]
    uses = {
        "routing": (
            any(s.routing is None and not s.dedicated_network for s in run),
            "every scheduler of this run names its own routing part (single, ecmp, crux) "
            "or is ideal",
        ),
        "priority_levels": (
            any(s.priority for s in run),
            "no scheduler of this run uses priority classes (crux, priority)",
        ),
        "mltcp": (any(s.mltcp for s in run), "no scheduler of this run uses MLTCP (mltcp)"),
        "defrag": (any(s.defrag for s in run), "no scheduler of this run migrates jobs (defrag)"),
        "precision_deg": (
            any(s.placement == "cassini" for s in run),
            "no scheduler of this run consults CASSINI (cassini)",
        ),
        "cluster.spines": _spines_use(cfg, run),
    }
    unused = [
        f"{k}: {why}; ignored" for k, (use, why) in uses.items() if k in cfg.given and not use
    ]
    read = (lambda: jobs) if jobs is not None else lambda: cfg.read_workload(cfg.library()).jobs
    hosts = recorded_warnings(cfg.cluster, run, read)
    return unused + profile_warnings(cfg.profiles, cfg.options.profiles) + hosts


def _spines_use(cfg: SimConfig, run: Sequence[Scheduler]) -> tuple[bool, str]:
    """Whether the run uses ``cluster.spines``, and why not: a one-rack cluster sends
    nothing through spines; on the uniform form only a scheduler routing per spine
    (ecmp, crux: its own part, else the config's ``routing``) uses more than one."""
    racks = cfg.cluster.racks
    if (racks if isinstance(racks, int) else len(racks)) <= 1:
        return False, "a one-rack cluster sends no traffic through spines"
    if isinstance(cfg.cluster, Cluster) and cfg.cluster.spines > 1:
        routes = {s.routing or cfg.options.routing for s in run if not s.dedicated_network}
        which = ", which no scheduler of this run uses"
        why = SINGLE_ROUTING_SPINES.format(spines=cfg.cluster.spines, which=which)
        return bool(routes - {"single"}), why
    return True, ""


def check_models(cfg: SimConfig) -> SimConfig:
    """The drawn workload's ``models`` are in the library (its profile files read):
    named with their field when the config file is read, not later by the draw.  A name
    that differs from a profile id only in case and punctuation (``VGG16``, ``vgg-16``)
    means that profile, as in traces; returns the config with the ids."""
    if cfg.poisson is None or "models" not in cfg.poisson:
        return cfg
    library = cfg.library()
    models = [
        library_model(model, library, f"workload.poisson.models[{i}]")
        for i, model in enumerate(cfg.poisson["models"])
    ]
    return replace(cfg, poisson={**cfg.poisson, "models": models})
