"""The sections of a simulation config, each read strictly: ``profiles``, ``sweep``, the
mechanisms' settings, a drawn workload, and the scheduler names (every error names its
field; :mod:`cassini.sim.config` reads the whole file with them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cassini import schema
from cassini.circle import n_angles
from cassini.errors import InputError
from cassini.nic_scale import DEFAULT_PROFILE_RULE, PROFILE_RULES
from cassini.sim.options import NETWORK_MODELS, SimOptions
from cassini.sim.parts.routing import ROUTINGS
from cassini.sim.schedulers import Scheduler
from cassini.sim.topologies import Topology
from cassini.sim.topology import Cluster
from mltcp.policy import MltcpParams

SWEEP_AXES = ("load", "seed", "scheduler", "oversubscription")


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


def parse_profiles(raw: Any) -> tuple[str, list[Any]]:
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


def parse_sweep(obj: Any) -> dict[str, tuple[Any, ...]]:
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
                parse_count(v, f, minimum=0)
            else:
                schema.number(v, f, positive=True, non_negative=True)
            if axis != "scheduler" and v in sweep[axis][:k]:  # 2 "runs" of one
                first = f"sweep.{axis}[{sweep[axis].index(v)}]"
                raise InputError(f, f"{v!r} repeats {first}; give each value once")
        if axis == "scheduler":
            check_schedulers(sweep[axis], f"sweep.{axis}")
    return sweep


def parse_options(obj: Mapping[str, Any]) -> SimOptions:
    """The mechanisms' settings: routing, priority_levels, mltcp, defrag."""
    routing = schema.choice(obj.get("routing", "single"), "routing", ROUTINGS)
    levels = parse_count(obj.get("priority_levels", 8), "priority_levels")
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


def parse_poisson(obj: Any, cluster: Cluster | Topology) -> dict[str, Any]:
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
        "jobs": parse_count(obj["jobs"], f"{f}.jobs"),
        "load": schema.number(obj["load"], f"{f}.load", positive=True),
        "gpus": gpus,
    }
    if "iterations" in obj:
        lo_hi = schema.array(obj["iterations"], f"{f}.iterations")
        if len(lo_hi) != 2:
            raise InputError(f"{f}.iterations", "must be [low, high]")
        out["iterations"] = tuple(parse_count(x, f"{f}.iterations") for x in lo_hi)
        if out["iterations"][0] > out["iterations"][1]:
            raise InputError(f"{f}.iterations", f"must be [low, high], got {lo_hi}")
    if "models" in obj:
        models = schema.array(obj["models"], f"{f}.models", non_empty=True)
        out["models"] = [schema.identifier(m, f"{f}.models[{i}]") for i, m in enumerate(models)]
    return out


def parse_count(value: Any, field_name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(field_name, f"must be an integer >= {minimum}, got {value!r}")
    return value


def parse_precision(value: Any) -> float:
    """``precision_deg``: the advisor's angle step, checked when the config is read (the
    advisor's own check came only once CASSINI was first consulted, mid-run)."""
    value = schema.number(value, "precision_deg", positive=True)
    n_angles(value)  # the advisor's check: [0.1, 180]
    return value
