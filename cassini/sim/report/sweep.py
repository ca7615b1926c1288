"""Run a grid of simulations in parallel: on Ray when it is installed (a local Ray
instance, or the cluster at ``address``), else in a local process pool."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from cassini import outputs
from cassini.sim.config import SimConfig, unused_settings
from cassini.sim.report.run import ratios, run_config

BACKENDS = ("auto", "ray", "pool")
#: Summary fields aggregated over seeds.
METRICS = (
    "mean_slowdown",
    "p99_slowdown",
    "mean_iteration_s",
    "p99_iteration_s",
    "mean_jct_s",
    "excess_demand_s_total",
    "wall_s",
)


def grid(cfg: SimConfig) -> list[dict[str, Any]]:
    """Every combination of the sweep axes' values (one empty point without a sweep)."""
    axes = sorted(cfg.sweep)
    return [
        dict(zip(axes, values, strict=True))
        for values in itertools.product(*(cfg.sweep[a] for a in axes))
    ]


def run_point(cfg: SimConfig, point: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Simulate one grid point; one row per scheduler with the point's axes."""
    results = run_config(cfg.variant(**point))
    return [dict(point) | {"scheduler": name} | r.summary() for name, r in results.items()]


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def run_sweep(
    cfg: SimConfig,
    *,
    backend: str = "auto",
    address: str | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """Run every grid point; return the rows and the backend used ("ray" or "pool")."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    points = grid(cfg)
    for p in points:  # a point the config cannot take (e.g. a host table's own uplink
        cfg.variant(**p)  # speeds and an oversubscription axis) fails here, not in a worker
    use_ray = backend == "ray" or (backend == "auto" and (address or ray_available()))
    if use_ray:
        rows = _on_ray(cfg, points, address, progress)
        return rows, "ray"
    workers = workers or min(len(points), os.cpu_count() or 1)
    rows: list[dict[str, Any]] = []
    if workers <= 1:
        for k, p in enumerate(points):
            rows += run_point(cfg, p)
            if progress:
                progress(k + 1, len(points))
        return rows, "pool"
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_point, cfg, p) for p in points]
        for k, _ in enumerate(as_completed(futures)):
            if progress:
                progress(k + 1, len(points))
        for f in futures:  # grid order, whatever finished first
            rows += f.result()
    return rows, "pool"


def _on_ray(
    cfg: SimConfig,
    points: Sequence[Mapping[str, Any]],
    address: str | None,
    progress: Callable[[int, int], None] | None,
) -> list[dict[str, Any]]:
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            "Ray is not installed: pip install 'netaware-ml[ray]', or use --backend pool"
        ) from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(run_point)
        refs = [remote.remote(cfg, p) for p in points]
        pending, done = list(refs), 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done += len(ready)
            if progress:
                progress(done, len(points))
        rows: list[dict[str, Any]] = []
        for r in ray.get(refs):
            rows += r
        return rows
    finally:
        if started:
            ray.shutdown()


def aggregate(rows: Sequence[Mapping[str, Any]], by: Sequence[str]) -> list[dict[str, Any]]:
    """Mean (and min/max) of each metric over the rows that share ``by`` (e.g. over
    seeds), plus baseline/CASSINI ratios per group."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in by), []).append(r)
    out = []
    for key, members in groups.items():
        row: dict[str, Any] = dict(zip(by, key, strict=True)) | {"runs": len(members)}
        for m in METRICS:
            values = [float(x[m]) for x in members if not math.isnan(float(x[m]))]
            row[m] = float(np.mean(values)) if values else math.nan
            row[f"{m}_range"] = [min(values), max(values)] if values else None
        out.append(row)
    return out


def sweep_ratios(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> list[dict[str, Any]]:
    """Baseline/CASSINI ratios at every grid point (scheduler pairs run on the same jobs)."""
    points: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        points.setdefault(tuple(r.get(a) for a in axes), {})[r["scheduler"]] = r
    out = []
    for key, by_name in points.items():
        for pair, values in ratios(by_name).items():
            out.append(dict(zip(axes, key, strict=True)) | {"pair": pair} | values)
    return out


def write_sweep(
    cfg: SimConfig, rows: list[dict[str, Any]], backend: str, out_dir: Path
) -> dict[str, Any]:
    """Write ``sweep.json`` and ``sweep.png``; return the JSON."""
    axes = [a for a in sorted(cfg.sweep) if a != "scheduler"]
    by = [a for a in axes if a != "seed"] + ["scheduler"]
    data = {
        "name": cfg.name,
        "backend": backend,
        "axes": {a: list(v) for a, v in cfg.sweep.items()},
        "profiles": cfg.options.profiles,
        "settings": cfg.settings(),  # every point's (the axes change none of them)
        "warnings": unused_settings(cfg),
        "rows": rows,
        "aggregate": aggregate(rows, by),
        "ratios": sweep_ratios(rows, axes),
    }
    with outputs.staged(out_dir) as stage:  # nothing half-written (cassini.outputs)
        (stage / "sweep.json").write_text(outputs.json_text(data))
        _plot(data, by, stage / "sweep.png")
    return data


def sweep_table(data: Mapping[str, Any]) -> str:
    agg = data["aggregate"]
    by = [k for k in agg[0] if k not in METRICS and k != "runs" and not k.endswith("_range")]
    lines = [
        " ".join(f"{k:>16}" for k in by) + f" {'runs':>4} {'mean x':>7} {'p99 x':>7} "
        f"{'mean JCT s':>10}"
    ]
    for row in agg:
        lines.append(
            " ".join(f"{row[k]!s:>16}" for k in by)
            + f" {row['runs']:>4} {row['mean_slowdown']:>7.3f} {row['p99_slowdown']:>7.3f}"
            f" {row['mean_jct_s']:>10.1f}"
        )
    for r in data["ratios"]:
        point = ", ".join(f"{k}={v}" for k, v in r.items() if k in data["axes"])
        lines.append(
            f"{r['pair']} [{point}]: mean iteration {r['mean_iteration_s']:.3f}x, "
            f"p99 {r['p99_iteration_s']:.3f}x"
        )
    return "\n".join(lines)


def _plot(data: Mapping[str, Any], by: Sequence[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = data["aggregate"]
    x_axis = next((a for a in by if a != "scheduler"), None)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric in zip(axes, ("mean_slowdown", "p99_slowdown"), strict=True):
        for name in dict.fromkeys(r["scheduler"] for r in agg):
            rows = [r for r in agg if r["scheduler"] == name]
            if x_axis:
                rows.sort(key=lambda r: r[x_axis])
                xs = [r[x_axis] for r in rows]
            else:
                xs = [0] * len(rows)
            ys = [r[metric] for r in rows]
            lo = [y - r[f"{metric}_range"][0] for y, r in zip(ys, rows, strict=True)]
            hi = [r[f"{metric}_range"][1] - y for y, r in zip(ys, rows, strict=True)]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=name)
        ax.set_xlabel(x_axis or "")
        ax.set_ylabel(metric.replace("_", " ") + " (over dedicated)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{data['name']} (mean over seeds, bars: range)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
