"""Shared plumbing for the experiments: the job sets several of them run, testbed configs
on a dumbbell, running a config (a typed :class:`testbed.results.ExperimentResult`),
results and plots under ``results/<name>/``, tables, progress.

Every experiment runs as a module from the repository root, e.g.
``sudo .venv/bin/python -m experiments.link_interleaving``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.results import ExperimentResult

RESULTS = Path(__file__).resolve().parent.parent / "results"
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


def out_dir(name: str, override: str | None = None) -> Path:
    """``results/<name>`` (or ``override``), created."""
    path = Path(override) if override else RESULTS / name
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    """Run one testbed config (quietly) under ``where`` and return its results (also in
    ``where/results.json``)."""
    from testbed.runner import load_config, run_experiment

    progress(f"{label} ...")
    return run_experiment(load_config(cfg), where, progress=lambda m: None)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, default=float))


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
