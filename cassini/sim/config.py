"""Simulation configuration files (YAML or JSON), read strictly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cassini import schema
from cassini.circle import n_angles
from cassini.errors import InputError
from cassini.nic_scale import DEFAULT_PROFILE_RULE, PROFILE_RULES
from cassini.profile import JobProfile, library_model
from cassini.sim.options import NETWORK_MODELS, SimOptions
from cassini.sim.parts.routing import ROUTINGS
from cassini.sim.recorded import recorded_warnings
from cassini.sim.schedulers import Scheduler
from cassini.sim.topologies import Topology, is_topology_form
from cassini.sim.topologies import build as build_topology
from cassini.sim.topology import Cluster
from cassini.sim.workload import (
    JobSpec,
    library_on_cluster,
    load_library,
    poisson_jobs,
    profile_warnings,
)
from mltcp.policy import MltcpParams

SWEEP_AXES = ("load", "seed", "scheduler", "oversubscription")
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
    return cfg


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
        poisson = _poisson(workload["poisson"], cluster)
    profile_rule, profile_files = _profiles(obj.get("profiles", []))
    profiles = tuple(
        base / schema.identifier(p, f"profiles[{i}]") for i, p in enumerate(profile_files)
    )
    sweep = _sweep(obj.get("sweep", {}))
    cfg = SimConfig(
        cluster=cluster,
        schedulers=schedulers,
        poisson=poisson,
        trace=trace,
        trace_format=trace_format,
        bad_rows=bad_rows,
        profiles=profiles,
        candidates=_count(obj.get("candidates", 10), "candidates"),
        seed=_count(obj.get("seed", 0), "seed", minimum=0),
        precision_deg=_precision(obj.get("precision_deg", 5.0)),
        name=str(obj.get("name", "sim")),
        sweep=sweep,
        options=replace(_options(obj), profiles=profile_rule),
        given=frozenset(obj) | {f"cluster.{k}" for k in obj["cluster"] if k == "spines"},
    )
    return cfg


def check_schedulers(names: tuple[str, ...], field_name: str) -> None:
    """Every name parses and none repeats an earlier one (results are keyed by name: a
    second ``themis`` ran again and replaced the first); InputError names
    ``field_name[i]``."""
    for i, name in enumerate(names):
        where = f"{field_name}[{i}]"
        if name in names[:i]:
            raise InputError(
                where,
                f"{name!r} repeats {field_name}[{names.index(name)}]; name each scheduler once",
            )
        try:
            Scheduler.parse(name)
        except InputError as e:
            raise InputError(where, e.problem) from None


def run_warnings(cfg: SimConfig, jobs: Sequence[JobSpec] | None = None) -> list[str]:
    """The run's warnings (``results.json``'s ``warnings``, stderr), a line each: a setting
    no scheduler of the run (or the sweep's scheduler axis) uses, ignored; an extra profile
    taken as measured at 50 Gbit/s (``profile_warnings``); a recorded trace's hosts
    (``recorded_warnings``, on ``jobs`` when the run read them, else read again)."""
    run = [Scheduler.parse(n) for n in cfg.sweep.get("scheduler") or cfg.schedulers]
    racks = cfg.cluster.racks
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
        "cluster.spines": (
            (racks if isinstance(racks, int) else len(racks)) > 1,
            "a one-rack cluster sends no traffic through spines",
        ),
    }
    unused = [
        f"{k}: {why}; ignored" for k, (use, why) in uses.items() if k in cfg.given and not use
    ]
    read = (lambda: jobs) if jobs is not None else lambda: cfg.read_workload(cfg.library()).jobs
    hosts = recorded_warnings(cfg.cluster, run, read)
    return unused + profile_warnings(cfg.profiles, cfg.options.profiles) + hosts


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


def _profiles(raw: Any) -> tuple[str, list[Any]]:
    """The ``profiles:`` key: a rule name, a list of extra profile files, or
    ``{rule:, files:}``; returns (rule, files).  The rule defaults to scale-to-nic."""
    rule, files = DEFAULT_PROFILE_RULE, raw
    if isinstance(raw, str):
        rule, files = raw, []
    elif isinstance(raw, Mapping):
        schema.check_fields(raw, "profiles", (), ("rule", "files"))
        rule, files = raw.get("rule", DEFAULT_PROFILE_RULE), raw.get("files", [])
    if not isinstance(rule, str) or rule not in PROFILE_RULES:
        raise InputError(
            "profiles",
            f"must be one of {', '.join(PROFILE_RULES)}, a list of profile files, or "
            f"{{rule:, files:}}; got {rule!r}",
        )
    return rule, schema.array(files, "profiles")


def _sweep(obj: Any) -> dict[str, tuple[Any, ...]]:
    """The ``sweep:`` grid: axis -> values, each value checked."""
    sweep = {}
    for axis, values in schema.require_object(obj, "sweep").items():
        if axis not in SWEEP_AXES:
            raise InputError(f"sweep.{axis}", f"unknown axis (allowed: {', '.join(SWEEP_AXES)})")
        sweep[axis] = tuple(schema.array(values, f"sweep.{axis}", non_empty=True))
        for k, v in enumerate(sweep[axis]):
            f = f"sweep.{axis}[{k}]"
            if axis == "scheduler":
                schema.identifier(v, f)
            elif axis == "seed":  # as the top-level seed: int(1.9) ran seed 1 labelled 1.9
                _count(v, f, minimum=0)
            else:
                schema.number(v, f, positive=True, non_negative=True)
            if axis != "scheduler" and v in sweep[axis][:k]:  # 2 "runs" of one
                first = f"sweep.{axis}[{sweep[axis].index(v)}]"
                raise InputError(f, f"{v!r} repeats {first}; give each value once")
        if axis == "scheduler":
            check_schedulers(sweep[axis], f"sweep.{axis}")
    return sweep


def _options(obj: Mapping[str, Any]) -> SimOptions:
    """The mechanisms' settings: routing, priority_levels, mltcp, defrag."""
    routing = schema.choice(obj.get("routing", "single"), "routing", ROUTINGS)
    levels = _count(obj.get("priority_levels", 8), "priority_levels")
    m = schema.require_object(obj.get("mltcp", {}), "mltcp")
    schema.check_fields(m, "mltcp", (), ("slope", "intercept", "scale_cut"))
    try:
        mltcp = MltcpParams(**m)
    except (TypeError, ValueError) as e:
        raise InputError("mltcp", str(e)) from None
    d = schema.require_object(obj.get("defrag", {}), "defrag")
    schema.check_fields(d, "defrag", (), ("migration_s", "cooldown_s"))
    defaults = SimOptions()
    network = schema.choice(obj.get("network", defaults.network), "network", NETWORK_MODELS)
    return SimOptions(
        network=network,
        routing=routing,
        priority_levels=levels,
        mltcp=mltcp,
        migration_s=schema.number(
            d.get("migration_s", defaults.migration_s), "defrag.migration_s", non_negative=True
        ),
        cooldown_s=schema.number(
            d.get("cooldown_s", defaults.cooldown_s), "defrag.cooldown_s", non_negative=True
        ),
    )


def _poisson(obj: Any, cluster: Cluster | Topology) -> dict[str, Any]:
    f = "workload.poisson"
    obj = schema.require_object(obj, f)
    schema.check_fields(obj, f, ("jobs", "load", "gpus"), ("iterations", "models"))
    gpus_raw = schema.require_object(obj["gpus"], f"{f}.gpus")
    gpus = {}
    for k, w in gpus_raw.items():
        try:
            g = int(k)
        except ValueError:
            raise InputError(f"{f}.gpus.{k}", "keys must be GPU counts") from None
        if g < 1 or g > cluster.gpus:
            raise InputError(f"{f}.gpus.{k}", f"must be 1..{cluster.gpus} GPUs")
        gpus[g] = schema.number(w, f"{f}.gpus.{k}", non_negative=True)
    if not gpus or sum(gpus.values()) <= 0:
        raise InputError(f"{f}.gpus", "needs at least one GPU count with a weight above 0")
    out: dict[str, Any] = {
        "jobs": _count(obj["jobs"], f"{f}.jobs"),
        "load": schema.number(obj["load"], f"{f}.load", positive=True),
        "gpus": gpus,
    }
    if "iterations" in obj:
        lo_hi = schema.array(obj["iterations"], f"{f}.iterations")
        if len(lo_hi) != 2:
            raise InputError(f"{f}.iterations", "must be [low, high]")
        out["iterations"] = tuple(_count(x, f"{f}.iterations") for x in lo_hi)
        if out["iterations"][0] > out["iterations"][1]:
            raise InputError(f"{f}.iterations", f"must be [low, high], got {lo_hi}")
    if "models" in obj:
        models = schema.array(obj["models"], f"{f}.models", non_empty=True)
        out["models"] = [schema.identifier(m, f"{f}.models[{i}]") for i, m in enumerate(models)]
    return out


def _count(value: Any, field_name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(field_name, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _precision(value: Any) -> float:
    """``precision_deg``: the advisor's angle step, checked when the config is read (the
    advisor's own check came only once CASSINI was first consulted, mid-run)."""
    value = schema.number(value, "precision_deg", positive=True)
    n_angles(value)  # the advisor's check: [0.1, 180]
    return value
