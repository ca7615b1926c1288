"""Reading a testbed run's config once where it enters (YAML, JSON or a mapping, through
:mod:`cassini.schema`; every error is a :class:`~testbed.run.config.ConfigError` naming
the field): jobs of the kinds in ``WORKER_MODULES``, schemes of the ``SCHEMES`` table,
fabrics of the ``FABRICS`` table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cassini import files, schema
from cassini.errors import InputError
from mltcp.policy import MltcpOptions, MltcpParams
from testbed import fields
from testbed.host import known_congestion_control
from testbed.model_names import MODEL_NAMES
from testbed.run.config import (
    DEFAULT_NIC_BPS,
    JOB_KINDS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    PROFILE_SOURCES,
    SCHEME_OPTIONS,
    ConfigError,
    RunConfig,
    SchemeSpec,
    TestbedJob,
)
from testbed.run.profiles import JITTER_RULES
from testbed.run.schemes import SCHEMES
from testbed.topo import TestbedTopology, from_config


def load_config(source: str | Path | dict[str, Any]) -> RunConfig:
    """Read and validate a YAML/JSON config (path or mapping); raises ConfigError."""
    if isinstance(source, dict):
        raw = source
    else:
        try:
            raw = files.parse_yaml(files.read_text(source), str(source))
        except InputError as e:
            raise ConfigError(e.field, e.problem) from None
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
    if not isinstance(raw["topology"], dict):
        raise ConfigError("topology", "a mapping with kind and its fields")
    try:
        topo = from_config(raw["topology"])
    except InputError as e:  # names its field (topology.pairs)
        raise ConfigError(e.field, e.problem) from None
    except (ValueError, TypeError) as e:
        raise ConfigError("topology", str(e)) from None
    jobs = tuple(_job(j, i, topo) for i, j in enumerate(_list(raw["jobs"], "jobs")))
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ConfigError("jobs: duplicate job ids")
    used: dict[str, str] = {}
    for i, j in enumerate(jobs):
        for h in j.hosts:
            if h in used:
                raise ConfigError(f"jobs[{i}].hosts", f"{h} already runs job {used[h]}")
            used[h] = j.job_id
    if topo.routing == "path":  # path selection: the jobs' flows spread over the spines
        from testbed.topo import select_paths

        topo = select_paths(topo, [j.hosts for j in jobs])
    schemes = tuple(_scheme(s, i) for i, s in enumerate(_list(raw["schemes"], "schemes")))
    names = [s.name for s in schemes]
    if len(set(names)) != len(names):
        raise ConfigError("schemes: duplicate scheme names (give each a name:)")
    return RunConfig(
        topology=topo,
        jobs=jobs,
        schemes=schemes,
        cc=_cc(raw.get("cc", topo.fabric.regime.default_cc), "cc"),
        seed=_field(schema.integer, raw.get("seed", 0), "seed", minimum=0, maximum=SEED_MAX),
        **_agent(raw.get("agent") or {}),
        profile_iterations=_field(
            schema.integer,
            raw.get("profile_iterations", 12),
            "profile_iterations",
            minimum=MIN_ITERATIONS,
            maximum=MAX_ITERATIONS,
        ),
        profiles=_profiles(raw.get("profiles"), {j.job_id for j in jobs}),
        profile_source=_choice(
            raw.get("profile_source", "auto"), "profile_source", PROFILE_SOURCES
        ),
        raw=raw,
    )


def _agent(agent: Any) -> dict[str, Any]:
    """The ``agent:`` mapping's fields, as :class:`RunConfig` keywords."""
    if not isinstance(agent, dict) or set(agent) - {
        "slack", "drift_tolerance", "rerun_declined", "jitter"
    }:
        raise ConfigError(
            "agent: a mapping with slack, drift_tolerance, jitter and/or rerun_declined"
        )
    rerun = agent.get("rerun_declined", False)
    if not isinstance(rerun, bool):
        raise ConfigError("agent.rerun_declined", f"true or false, got {rerun!r}")
    return {
        "agent_slack": _slack(agent.get("slack", "auto")),
        "drift_tolerance": _field(
            schema.number,
            agent.get("drift_tolerance", 0.05),
            "agent.drift_tolerance",
            above=0,
            below=1,
        ),
        "agent_jitter": _choice(agent.get("jitter", "stdev"), "agent.jitter", JITTER_RULES),
        "rerun_declined": rerun,
    }


SEED_MAX = 2**63 - 1  # seed: numpy's generators take no negative seed, torch's 64 bits


def _field(read: Callable[..., Any], value: Any, name: str, **bounds: Any) -> Any:
    """``read`` (:func:`cassini.schema.number` or ``integer``) of config field ``name``;
    a ConfigError naming the field when it is not a number within ``bounds``."""
    try:
        return read(value, name, **bounds)
    except InputError as e:
        raise ConfigError(e.field, e.problem) from None


def _cc(value: Any, name: str) -> str:
    """A congestion control the testbed knows (:func:`testbed.host.known_congestion_control`)."""
    try:
        return known_congestion_control(value, name)
    except InputError as e:
        raise ConfigError(e.field, e.problem) from None


def _slack(raw: Any) -> float | None:
    if raw == "auto":
        return None
    return _field(schema.number, raw, "agent.slack", minimum=0)


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


def _job(raw: Any, index: int, topo: TestbedTopology) -> TestbedJob:
    """One job of the config, read strictly with :mod:`cassini.schema` (errors name the
    field, e.g. ``jobs[1].scale: must be > 0, got 0``)."""
    where = f"jobs[{index}]"
    known = set(TestbedJob.__dataclass_fields__) - {"job_id"}
    try:
        obj = schema.require_object(raw, where)
        schema.check_fields(obj, where, ("id", "hosts", "iterations"), known - {"hosts"})
        kind = obj.get("kind", "synthetic")
        if kind not in JOB_KINDS:
            raise ConfigError(f"{where}.kind", f"one of {', '.join(JOB_KINDS)}, got {kind!r}")
        hosts = schema.array(obj["hosts"], f"{where}.hosts")
        if len(hosts) < 2:
            raise ConfigError(f"{where}.hosts", "a list of at least 2 hosts")
        twice = next((h for i, h in enumerate(hosts) if h in hosts[:i]), None)
        if twice is not None:
            raise ConfigError(f"{where}.hosts", f"{twice} appears twice in the job")
        for h in hosts:
            if h not in topo.hosts:
                raise ConfigError(
                    f"{where}.hosts", f"unknown host {h!r} (have {', '.join(topo.hosts)})"
                )
        shift = obj.get("shift")
        if shift is not None and shift != "auto":
            shift = schema.number(shift, f"{where}.shift", non_negative=True)
        iterations = schema.integer(
            obj["iterations"], f"{where}.iterations", minimum=MIN_ITERATIONS,
            maximum=MAX_ITERATIONS,
        )

        def num(name: str, default: float, **bounds: bool) -> float:
            return schema.number(obj.get(name, default), f"{where}.{name}", **bounds)

        def whole(name: str, default: int) -> int:
            return schema.integer(obj.get(name, default), f"{where}.{name}", minimum=1)

        jitter = num("jitter", 0.0, non_negative=True)
        if jitter >= 1:
            raise ConfigError(f"{where}.jitter", f"must be < 1, got {jitter:g}")
        spec = TestbedJob(
            job_id=schema.identifier(obj["id"], f"{where}.id"),
            kind=kind,
            hosts=tuple(hosts),
            iterations=iterations,
            compute_s=num("compute_s", 0.05, non_negative=True),
            bytes=whole("bytes", 1_000_000),
            shift=shift,
            jitter=jitter,
            width=whole("width", 256),
            layers=whole("layers", 3),
            batch=whole("batch", 32),
            clock_offset_s=schema.number(obj.get("clock_offset_s", 0.0), f"{where}.clock_offset_s"),
            priority=_priority(obj.get("priority"), f"{where}.priority"),
        )
        if kind == "model":
            spec = _model_job(obj, where, spec, topo)
        elif set(obj) & {"model", "compute", "calibration", "scale", "nic_bps"}:
            extra = sorted(set(obj) & {"model", "compute", "calibration", "scale", "nic_bps"})
            raise ConfigError(f"{where}.{extra[0]}", "only for kind: model")
    except InputError as e:
        raise ConfigError(e.field, e.problem) from None
    return spec


def _priority(raw: Any, where: str) -> int | None:
    """A job's priority class on the ``prio`` fabric: 0 (highest) .. 7, or None."""
    from testbed.fabric import PRIORITY_LEVELS

    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < PRIORITY_LEVELS:
        raise ConfigError(where, f"an integer 0 (highest) .. {PRIORITY_LEVELS - 1}, got {raw!r}")
    return raw


def _model_job(
    obj: dict[str, Any], where: str, spec: TestbedJob, topo: TestbedTopology
) -> TestbedJob:
    """The fields of a ``kind: model`` job: a known architecture, a readable calibration,
    and a parameter scale (default: the job's slowest link over ``nic_bps``, so its
    communication-to-compute ratio is the real model's at that NIC rate)."""
    from cassini.nic_scale import nic_factor
    from testbed import calibration as cal_mod

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
    except InputError as e:
        raise ConfigError(f"{where}.calibration", str(e.in_file(path))) from None
    if cal.model != model:
        raise ConfigError(f"{where}.calibration", f"{path} calibrates {cal.model}, not {model}")
    nic = obj.get("nic_bps", DEFAULT_NIC_BPS)
    nic = schema.number(nic, f"{where}.nic_bps", positive=True)
    capacity = topo.link_capacity()
    slowest = min(capacity[d] for d in topo.ring_links(spec.hosts))
    # the rule the simulator's ``profiles: scale-to-nic`` reads the other way
    default_scale = nic_factor(slowest, nic)
    scale = schema.number(obj.get("scale", default_scale), f"{where}.scale", positive=True)
    if scale > 1:
        raise ConfigError(f"{where}.scale", f"at most 1 (a share of the parameters), got {scale:g}")
    batch = obj.get("batch", cal.batch)
    return replace(
        spec,
        model=model,
        compute=compute,
        calibration=path,
        scale=scale,
        nic_bps=nic,
        batch=_field(schema.integer, batch, f"{where}.batch", minimum=1),
    )


def _scheme(raw: Any, index: int) -> SchemeSpec:
    if isinstance(raw, str):
        raw = {"scheme": raw}
    if not isinstance(raw, dict) or "scheme" not in raw:
        raise ConfigError(f"schemes[{index}]: a scheme name or {{scheme:, name:, cc:}}")
    allowed = ("scheme", "name", "cc", *SCHEME_OPTIONS)
    if set(raw) - set(allowed):
        raise ConfigError(f"schemes[{index}]: allowed keys are {', '.join(allowed)}")
    kind = raw["scheme"]
    if not isinstance(kind, str) or kind not in SCHEMES:  # a list: not hashable
        raise ConfigError(
            f"schemes[{index}]: unknown scheme {kind!r} (one of {', '.join(SCHEMES)})"
        )
    takes = SCHEMES[kind].options

    def only_for(key: str) -> str:
        return "for " + ", ".join(k for k, s in SCHEMES.items() if key in s.options) + " only"

    options = _mltcp_options(raw, f"schemes[{index}]", takes, only_for)
    cc = raw.get("cc")
    if cc is not None:
        cc = _cc(cc, f"schemes[{index}].cc")
    name = _field(fields.scheme_name, raw.get("name", kind), f"schemes[{index}].name")
    return SchemeSpec(name, kind, cc, options)


def _mltcp_options(
    raw: dict[str, Any], where: str, takes: frozenset[str], only_for: Callable[[str], str]
) -> MltcpOptions:
    """The scheme's ``mode``, ``slope``, ``intercept`` and ``scale_cut`` (each only where
    its scheme ``takes`` it) as :class:`MltcpOptions`; errors name the field."""
    mode = raw.get("mode", "idle")
    if mode not in ("idle", "exact") or ("mode" in raw and "mode" not in takes):
        raise ConfigError(f"{where}.mode", f"idle or exact, {only_for('mode')}, got {mode!r}")
    rule: dict[str, Any] = {}
    for key in MltcpOptions.RULE:
        if key in raw:
            field_name = f"{where}.{key}"
            if key not in takes:
                raise ConfigError(field_name, only_for(key))
            if key != "scale_cut":
                rule[key] = _field(schema.number, raw[key], field_name)
            elif isinstance(raw[key], bool):
                rule[key] = raw[key]
            else:
                raise ConfigError(field_name, f"true or false, got {raw[key]!r}")
    options = MltcpOptions(mode, **rule)
    try:
        options.over(MltcpParams())
    except ValueError as e:
        raise ConfigError(where, str(e)) from None
    return options


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.load")
