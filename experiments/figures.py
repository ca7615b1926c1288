"""Headline figures as values: the busy-host rule, a run set's summary, the text a figure
renders as, and the README's marked blocks.  Pure logic, no I/O (the runner and the CLI
are :mod:`experiments.headlines`; the host's load is sampled by
:mod:`experiments.host_load`).

A *run* is one execution of a headline's command, stored as a JSON object::

    {"run": 1, "date": "2026-11-27T21:00:00Z", "commit": "...", "dirty": false,
     "machine": {"cpu_model": "...", "cores": 2, "kernel": "..."},
     "load_before": {"load1": 0.3, "busy_fraction": 0.1, "cores": 2, "sample_s": 2.0},
     "load_after": {...}, "busy": false, "returncode": 0, "duration_s": 12.5,
     "values": {"metric": 1.23, ...}, "error": null}

A *figure* (``docs/figures/<id>.json``) is a run set: ``{"id", "runs": [...], "summary"}``.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BUSY_LOAD_PER_CORE = 0.5  # 1-minute load average per core above which the host is busy
BUSY_CPU_FRACTION = 0.25  # share of CPU time not idle over the sample above which it is busy
OPS = ("<=", ">=")


@dataclass(frozen=True)
class HostLoad:
    """The host's load at one moment: ``load1`` (1-minute load average, runnable tasks),
    ``busy_fraction`` (share of all CPUs' time not idle or in iowait over ``sample_s``
    seconds, 0..1) and ``cores`` (online CPUs)."""

    load1: float
    busy_fraction: float
    cores: int
    sample_s: float

    def __post_init__(self) -> None:
        if self.cores < 1:
            raise ValueError(f"cores must be >= 1, got {self.cores}")
        if not 0.0 <= self.busy_fraction <= 1.0:
            raise ValueError(f"busy_fraction must be in [0, 1], got {self.busy_fraction}")
        if self.load1 < 0:
            raise ValueError(f"load1 must be >= 0, got {self.load1}")

    @property
    def load_per_core(self) -> float:
        return self.load1 / self.cores

    def as_json(self) -> dict[str, float]:
        return {
            "load1": self.load1,
            "busy_fraction": self.busy_fraction,
            "cores": self.cores,
            "sample_s": self.sample_s,
            "load_per_core": self.load_per_core,
        }


def is_busy(load: HostLoad) -> bool:
    """Whether a run starting under ``load`` shares the host: the 1-minute load average
    above :data:`BUSY_LOAD_PER_CORE` per core, or the CPUs more than
    :data:`BUSY_CPU_FRACTION` busy over the short sample."""
    return load.load_per_core > BUSY_LOAD_PER_CORE or load.busy_fraction > BUSY_CPU_FRACTION


def only_our_residue(load: HostLoad) -> bool:
    """Whether the host looks busy only because the 1-minute average still remembers a run
    of ours that has ended: the CPUs are idle now, the average is not.  The runner waits
    (a bounded time) for the average to decay before it samples for the next repeat."""
    return load.busy_fraction <= BUSY_CPU_FRACTION and load.load_per_core > BUSY_LOAD_PER_CORE


@dataclass(frozen=True)
class Target:
    """A figure's target: ``metric`` ``op`` (``<=`` or ``>=``) ``value``."""

    metric: str
    op: str
    value: float

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"target op must be one of {OPS}, got {self.op!r}")

    def met(self, value: float) -> bool:
        return value <= self.value if self.op == "<=" else value >= self.value

    def text(self) -> str:
        return f"{'≤' if self.op == '<=' else '≥'} {number(self.value)}"


@dataclass(frozen=True)
class Spread:
    """Median and range of ``n`` values."""

    median: float
    low: float
    high: float
    n: int


def spread(values: Sequence[float]) -> Spread:
    """Median [min, max] of ``values`` (at least one)."""
    if not values:
        raise ValueError("no values to summarise")
    return Spread(statistics.median(values), min(values), max(values), len(values))


def usable(runs: Iterable[Mapping[str, Any]], allow_busy: bool) -> list[Mapping[str, Any]]:
    """The runs a figure may use: those that finished with values, and not on a busy host
    unless ``allow_busy``."""
    return [
        r
        for r in runs
        if r.get("returncode") == 0
        and not r.get("error")
        and r.get("values")
        and (allow_busy or not r.get("busy"))
    ]


def summarise(
    runs: Sequence[Mapping[str, Any]],
    metrics: Sequence[str],
    target: Target | None,
    allow_busy: bool,
) -> dict[str, Any] | None:
    """The summary of a run set: per metric median [min, max] over the usable runs, how many
    runs met the target, the date of the last usable run and its machine; ``busy_host`` when
    a busy run was used.  None when no run is usable."""
    used = usable(runs, allow_busy)
    if not used:
        return None
    per_metric = {}
    for name in metrics:
        values = [float(r["values"][name]) for r in used if r["values"].get(name) is not None]
        if values:
            s = spread(values)
            per_metric[name] = {"median": s.median, "min": s.low, "max": s.high, "n": s.n}
    last = used[-1]
    out: dict[str, Any] = {
        "n": len(used),
        "runs_total": len(runs),
        "busy_host": any(r.get("busy") for r in used),
        "date": last["date"],
        "machine": last.get("machine", {}),
        "commit": last.get("commit"),
        "dirty": last.get("dirty"),
        "metrics": per_metric,
    }
    if target is not None:
        hits = [
            target.met(float(r["values"][target.metric]))
            for r in used
            if r["values"].get(target.metric) is not None
        ]
        out["target"] = {
            "metric": target.metric,
            "op": target.op,
            "value": target.value,
            "met_runs": sum(hits),
            "of": len(hits),
        }
    return out


def number(v: float) -> str:
    """A figure as text: thousands without decimals, tens with one, the rest with three."""
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3f}"


@dataclass(frozen=True)
class MetricView:
    """How one metric reads in the README: ``label`` and ``unit`` (may be empty)."""

    name: str
    label: str
    unit: str


def figure_text(summary: Mapping[str, Any], metrics: Sequence[MetricView]) -> str:
    """``label median [min, max] unit; ... (median [min, max] of N, date[, busy host])`` and
    the target's count, e.g. ``target met in 3 of 3``."""
    parts = []
    for m in metrics:
        s = summary["metrics"].get(m.name)
        if s is None:
            continue
        unit = f" {m.unit}" if m.unit else ""
        parts.append(
            f"{m.label} {number(s['median'])} [{number(s['min'])}, {number(s['max'])}]{unit}"
        )
    date = str(summary["date"])[:10]
    label = ", busy host" if summary.get("busy_host") else ""
    text = f"{'; '.join(parts)} (median [min, max] of {summary['n']}, {date}{label})"
    t = summary.get("target")
    if t:
        text += f"; target met in {t['met_runs']} of {t['of']}"
    return text


def not_measured_text(rerun: str) -> str:
    return f"not yet re-measured (`{rerun}`)"


MARK = re.compile(r"<!-- headline:(?P<id>[\w.-]+) -->(?P<body>.*?)<!-- /headline:(?P=id) -->", re.S)
TABLE = re.compile(r"(<!-- headlines:table -->\n)(?P<body>.*?)(<!-- /headlines:table -->)", re.S)


def replace_marked(text: str, inline: Mapping[str, str], table: str | None) -> str:
    """``text`` with every ``<!-- headline:ID -->…<!-- /headline:ID -->`` body replaced by
    ``inline[ID]`` and the ``<!-- headlines:table -->`` block by ``table``; an ID without
    an entry raises ValueError naming it."""

    def one(m: re.Match[str]) -> str:
        key = m.group("id")
        if key not in inline:
            raise ValueError(f"README marker headline:{key}: no such headline")
        return f"<!-- headline:{key} -->{inline[key]}<!-- /headline:{key} -->"

    out = MARK.sub(one, text)
    if table is not None:
        out = TABLE.sub(lambda m: m.group(1) + table + m.group(3), out)
    return out


def marked_ids(text: str) -> list[str]:
    """The headline ids the text has inline markers for, in order."""
    return [m.group("id") for m in MARK.finditer(text)]


if __name__ == "__main__":
    from experiments import not_a_command

    not_a_command("experiments.figures", "run python -m experiments.headlines --help")
