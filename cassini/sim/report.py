"""Run a configuration and report: JSON for machines, a table and CDF plots for people.

``ratios`` compares every scheduler ``X`` with ``X+cassini`` run on the same jobs:
baseline over CASSINI for mean and p99 iteration time (> 1 means CASSINI is faster),
as the paper reports them.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cassini.sim.config import SimConfig
from cassini.sim.engine import SimResult, run

RATIO_METRICS = (
    "mean_iteration_s",
    "p99_iteration_s",
    "mean_slowdown",
    "p99_slowdown",
    "mean_jct_s",
    "excess_demand_s_total",
)


def run_config(
    cfg: SimConfig, *, progress: Callable[[str, int, int], None] | None = None
) -> dict[str, SimResult]:
    """Simulate every scheduler of ``cfg`` on the same jobs."""
    library = cfg.library()
    jobs = cfg.jobs(library)
    out = {}
    for name in cfg.schedulers:
        tick = (lambda done, total, name=name: progress(name, done, total)) if progress else None
        out[name] = run(
            cfg.cluster,
            jobs,
            library,
            name,
            n_candidates=cfg.candidates,
            seed=cfg.seed,
            precision_deg=cfg.precision_deg,
            progress=tick,
            options=cfg.options,
        )
    return out


def ratios(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{"themis/themis+cassini": {metric: baseline / cassini}}`` for every pair present."""
    out = {}
    for name, s in summaries.items():
        partner = f"{name}+cassini"
        if "+" in name or partner not in summaries:
            continue
        c = summaries[partner]
        out[f"{name}/{partner}"] = {m: (s[m] / c[m] if c[m] else math.nan) for m in RATIO_METRICS}
    return out


def results_json(cfg: SimConfig, results: Mapping[str, SimResult]) -> dict[str, Any]:
    summaries = {name: r.summary() for name, r in results.items()}
    return {
        "name": cfg.name,
        "cluster": cfg.cluster.to_dict() | {"gpus": cfg.cluster.gpus},
        "workload": {"trace": str(cfg.trace)} if cfg.trace else {"poisson": cfg.poisson},
        "seed": cfg.seed,
        "candidates": cfg.candidates,
        "summaries": summaries,
        "ratios": ratios(summaries),
        "excess_demand_s_per_link": {
            name: {link: s for link, s in sorted(r.excess_s.items()) if s > 0}
            for name, r in results.items()
        },
        "jobs": {
            name: [
                {k: getattr(j, k) for k in j.__dataclass_fields__} | {"jct_s": j.jct_s}
                for j in r.jobs
            ]
            for name, r in results.items()
        },
    }


def table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    width = max([18, *map(len, summaries)])  # composed names grow long
    head = (
        f"{'scheduler':<{width}} {'mean it':>8} {'p99 it':>8} {'mean x':>7} {'p99 x':>7} "
        f"{'mean JCT':>9} {'makespan':>9} {'excess':>8} {'wall':>6}"
    )
    units = "(ms)     (ms)   (over dedicated)   (s)       (s)     (s)     (s)"
    lines = [head, " " * (width + 1) + units]
    for name, s in summaries.items():
        lines.append(
            f"{name:<{width}} {s['mean_iteration_s'] * 1e3:>8.1f} "
            f"{s['p99_iteration_s'] * 1e3:>8.1f} "
            f"{s['mean_slowdown']:>7.3f} {s['p99_slowdown']:>7.3f} {s['mean_jct_s']:>9.1f} "
            f"{s['makespan_s']:>9.1f} {s['excess_demand_s_total']:>8.1f} {s['wall_s']:>6.1f}"
        )
    for pair, r in ratios(summaries).items():
        lines.append(
            f"{pair}: mean iteration {r['mean_iteration_s']:.3f}x, p99 {r['p99_iteration_s']:.3f}x"
            f", mean JCT {r['mean_jct_s']:.3f}x (baseline / CASSINI; > 1 = CASSINI faster)"
        )
    return "\n".join(lines)


def plot_cdfs(results: Mapping[str, SimResult], out_dir: Path, title: str = "") -> list[Path]:
    """Iteration-time (over dedicated) and JCT CDFs, one line per scheduler."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in results.items():
        order = np.argsort(r.normalised_samples, kind="stable")
        if len(order):
            cum = np.cumsum(r.iteration_weights[order])
            ax1.plot(r.normalised_samples[order], cum / cum[-1], label=name)
        jct = np.sort([j.jct_s for j in r.jobs])
        ax2.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=name)
    ax1.set_xlabel("iteration time / dedicated iteration time")
    ax1.set_ylabel("CDF over iterations")
    ax2.set_xlabel("job completion time (s)")
    ax2.set_xscale("log")
    ax2.set_ylabel("CDF over jobs")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path = out_dir / "cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def write_run(cfg: SimConfig, results: Mapping[str, SimResult], out_dir: Path) -> dict[str, Any]:
    """Write ``results.json`` and ``cdf.png`` under ``out_dir``; return the JSON."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = results_json(cfg, results)
    tmp = out_dir / "results.json.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(out_dir / "results.json")
    plot_cdfs(results, out_dir, title=cfg.name)
    return data


def stderr_progress(name: str, done: int, total: int) -> None:
    step = max(1, total // 10)
    if done % step == 0 or done == total:
        print(f"  {name}: {done}/{total} jobs finished", file=sys.stderr, flush=True)
