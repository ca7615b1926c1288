"""Run a grid of simulations in parallel: on Ray when it is installed (a local Ray
instance, or the cluster at ``address``), else in a local process pool.  ``workers``
bounds the points run at once on either: pool processes (never more than the points),
or Ray tasks in flight (Ray keeps its own CPUs)."""

from __future__ import annotations

import itertools
import logging
import math
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from cassini import outputs
from cassini.advisor import pool_size
from cassini.errors import InputError
from cassini.sim import topologies
from cassini.sim.config import SimConfig, run_warnings
from cassini.sim.recorded import host_servers
from cassini.sim.report.run import (
    CONVERT_LISTS,
    config_name,
    ratios,
    run_config,
    skipped_rows_line,
    workload_settings,
)
from cassini.sim.schedulers import Scheduler
from cassini.sim.topologies.hosts import ColumnConflict

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


def point_config(cfg: SimConfig, point: Mapping[str, Any]) -> SimConfig:
    """``cfg`` at the grid point ``point``; an axis value the cluster cannot take (an
    oversubscription on a generator without one, or on a host table whose file gives
    the ToR uplinks) is an InputError naming the axis, ``sweep.<axis>``."""
    try:
        return cfg.variant(**point)
    except ColumnConflict as e:
        raise e.given_as("sweep.oversubscription") from None
    except InputError as e:
        if "oversubscription" not in point or not e.field.startswith("cluster"):
            raise
        if isinstance(cfg.cluster, topologies.Topology):
            try:  # the cluster fails without the axis too (a generator a Ray worker lacks)
                topologies.build(cfg.cluster.source, "cluster", Path("."))
            except InputError:
                raise e from None
        kind = getattr(cfg.cluster, "kind", "racks/servers_per_rack")
        raise InputError(
            "sweep.oversubscription",
            f"the cluster ({kind}) cannot take this axis: {e.field}: {e.problem}",
        ) from None


def run_point(cfg: SimConfig, point: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Simulate one grid point; one row per scheduler with the point's axes."""
    results = run_config(point_config(cfg, point))
    return [dict(point) | {"scheduler": name} | r.summary() for name, r in results.items()]


def sweep_skipped_rows(cfg: SimConfig) -> list[str]:
    """:func:`~cassini.sim.report.run.skipped_rows_line` for each distinct trace the
    sweep's points read with ``bad_rows: skip``, once each: the axes (seed among them)
    change which model a row gets, never which rows are bad.  sweep.json keeps no rows,
    so the line points to ``trace convert``, which lists every one.  Every distinct trace
    is read here, before any point runs: one that cannot be read, or whose hosts the
    recorded scheduler cannot place on the first point's cluster, is an InputError now,
    not in every worker after Ray or the pool started (a cluster axis's other clusters
    are checked by their points)."""
    lines: dict[tuple[Any, ...], str | None] = {}
    names = cfg.sweep.get("scheduler") or cfg.schedulers
    recorded = any(Scheduler.parse(n).policy == "recorded" for n in names)
    for point in grid(cfg):
        v = point_config(cfg, point)
        key = (v.trace, v.trace_format)
        if v.trace is None or key in lines:
            continue
        workload = v.read_workload(v.library())
        if recorded:  # the engine's own check of the trace's hosts on the cluster
            host_servers(workload.jobs, v.cluster)
        lines[key] = skipped_rows_line(workload.summary, listed=CONVERT_LISTS)
    return [line for line in lines.values() if line]


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
    ray_logs: bool = False,
) -> tuple[list[dict[str, Any]], str]:
    """Run every grid point; return the rows and the backend used ("ray" or "pool").
    On Ray, its own log lines below errors (a local instance started, token
    authentication set up) are shown only with ``ray_logs``: ``progress`` and the
    backend returned say what a sweep needs to say.  ``workers``: points run at once
    (default: the CPUs in a pool, Ray's own CPUs on Ray), see the module docstring."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    points = grid(cfg)
    for p in points:  # a point the config cannot take (e.g. a host table's own uplink
        point_config(cfg, p)  # speeds and an oversubscription axis) fails here, not in a worker
    use_ray = backend == "ray" or (backend == "auto" and (address or ray_available()))
    if use_ray:
        rows = _on_ray(cfg, points, address, progress, ray_logs=ray_logs, workers=workers)
        return rows, "ray"
    workers = pool_size(workers or os.cpu_count() or 1, len(points))  # 30 for 9 points: 9
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
    *,
    ray_logs: bool = False,
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """The rows of every point, run as Ray tasks; with ``workers``, at most that many at
    once (Ray itself is started, or joined, with its own CPUs: ``num_cpus`` is refused
    when ``ray.init()`` joins a cluster already running on the host)."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            "Ray is not installed: pip install 'netaware-ml[ray]', or use --backend pool"
        ) from None
    at_once = pool_size(workers, len(points)) if workers else len(points)
    started = not ray.is_initialized()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:  # an init that installed its handler and then failed: handlers restored too
        if started:
            level = logging.INFO if ray_logs else logging.ERROR  # Ray's "ray" logger
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level=level)  # fmt: skip
        remote = ray.remote(run_point)
        queue, refs, pending, done = list(points), [], [], 0
        while queue or pending:
            while queue and len(pending) < at_once:
                refs.append(remote.remote(cfg, queue.pop(0)))
                pending.append(refs[-1])
            ready, pending = ray.wait(pending, num_returns=1)
            _ray_get(ray, ready)  # a failed point's error now, not after every point ran
            done += len(ready)
            if progress:
                progress(done, len(points))
        rows: list[dict[str, Any]] = []
        for r in _ray_get(ray, refs):
            rows += r
        return rows
    finally:
        if started:
            ray.shutdown()
            # ray.init installs a SIGTERM handler of its own and leaves it after shutdown:
            # the caller's process gets its own handlers back (None: one not set from
            # Python, which signal.signal cannot take back)
            if threading.current_thread() is threading.main_thread():
                for s, handler in handlers.items():
                    if handler is not None:
                        signal.signal(s, handler)


def _ray_get(ray: Any, refs: list[Any]) -> list[Any]:
    """``ray.get(refs)``, a point's failure raised as the error the point raised (as the
    pool raises it: an InputError is one line), not as Ray's task error, whose message
    is Ray's coloured traceback; the task error stays chained for a bug's traceback."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, Exception):
            raise e.cause from e
        raise


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
    cfg: SimConfig,
    rows: list[dict[str, Any]],
    backend: str,
    out_dir: Path,
    config_path: Path | str | None = None,
) -> dict[str, Any]:
    """Write ``sweep.json`` and ``sweep.png``; return the JSON.  Beside the rows it
    records what reproduces them: the config file (``config_path``, absolute), the base
    ``seed`` (a point without a seed axis runs with it), the ``schedulers``, ``cluster``
    and ``workload`` as the config gives them (before the axes change them)."""
    axes = [a for a in sorted(cfg.sweep) if a != "scheduler"]
    by = [a for a in axes if a != "seed"] + ["scheduler"]
    data = {
        "name": cfg.name,
        "config": config_name(config_path),
        "seed": cfg.seed,
        "candidates": cfg.candidates,
        "schedulers": list(cfg.schedulers),
        "cluster": cfg.cluster.to_dict() | {"gpus": cfg.cluster.gpus},
        "workload": workload_settings(cfg, as_configured=True),
        "backend": backend,
        "axes": {a: list(v) for a, v in cfg.sweep.items()},
        "profiles": cfg.options.profiles,
        "settings": cfg.settings(),  # every point's (the axes change none of them)
        "warnings": run_warnings(cfg),
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
        at = f" [{point}]" if point else ""  # only schedulers swept: one point, unnamed
        lines.append(
            f"{r['pair']}{at}: mean iteration {r['mean_iteration_s']:.3f}x, "
            f"p99 {r['p99_iteration_s']:.3f}x"
        )
    return "\n".join(lines)


def _value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, int | float) and not isinstance(v, bool) else str(v)


def _series(
    agg: Sequence[Mapping[str, Any]], by: Sequence[str]
) -> tuple[str | None, dict[str, list[Mapping[str, Any]]]]:
    """The x axis (the non-seed axis with the most values; None: only seeds or nothing
    swept) and the aggregated rows of each line, sorted along x: one line per scheme
    and per value of every other axis, labelled "themis, oversubscription 4"."""
    axes = [a for a in by if a != "scheduler"]
    counts = {a: len({r[a] for r in agg}) for a in axes}
    x_axis = max(axes, key=lambda a: counts[a]) if axes else None
    rest = [a for a in axes if a != x_axis]
    lines: dict[str, list[Mapping[str, Any]]] = {}
    for r in agg:
        label = ", ".join([str(r["scheduler"]), *(f"{a} {_value(r[a])}" for a in rest)])
        lines.setdefault(label, []).append(r)
    if x_axis:
        for rows in lines.values():
            rows.sort(key=lambda r: r[x_axis])
    return x_axis, lines


def _errors(rows: Sequence[Mapping[str, Any]], metric: str) -> list[list[float]]:
    """Below and above each mean: its range over seeds (0 where there is none)."""
    spans = [r.get(f"{metric}_range") or [r[metric], r[metric]] for r in rows]
    return [[r[metric] - lo for r, (lo, _) in zip(rows, spans, strict=True)],
            [hi - r[metric] for r, (_, hi) in zip(rows, spans, strict=True)]]  # fmt: skip


def _plot(data: Mapping[str, Any], by: Sequence[str], path: Path) -> None:
    """Mean and p99 slowdown: along the swept x axis, a line per scheme and per value of
    each other axis; without one (only seeds swept) a point per scheme.  Bars: the
    range over seeds; one legend beside both panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_axis, lines = _series(data["aggregate"], by)
    schemes = list(dict.fromkeys(r["scheduler"] for r in data["aggregate"]))
    rest = [a for a in by if a not in ("scheduler", x_axis)]
    combos = list(dict.fromkeys(tuple(rows[0][a] for a in rest) for rows in lines.values()))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    for ax, metric in zip(axes, ("mean_slowdown", "p99_slowdown"), strict=True):
        for label, rows in lines.items():
            scheme = schemes.index(rows[0]["scheduler"])
            # colour and marker size: the scheme (hollow: points that coincide show);
            # marker and dashes: the other axes' values
            k = combos.index(tuple(rows[0][a] for a in rest))
            style = {"color": f"C{scheme % 10}", "capsize": 3, "label": label,
                     "marker": "osD^v"[k % 5], "ls": ("-", "--", ":", "-.")[k % 4],
                     "markerfacecolor": "none", "markersize": 5 + 2 * (scheme % 4)}  # fmt: skip
            xs = [r[x_axis] for r in rows] if x_axis else [scheme] * len(rows)
            if not x_axis:  # a point per scheme, named under it
                style |= {"ls": "none", "markersize": 8, "markerfacecolor": style["color"]}
            ax.errorbar(xs, [r[metric] for r in rows], yerr=_errors(rows, metric), **style)
        if x_axis:
            ax.set_xlabel(x_axis)
        else:
            ax.set_xticks(range(len(schemes)), schemes, rotation=15 if len(schemes) > 3 else 0)
            ax.set_xlim(-0.5, len(schemes) - 0.5)
            ax.set_xlabel("scheme")
        ax.set_ylabel(metric.replace("_", " ") + " (over dedicated)")
        ax.grid(alpha=0.3)
    if x_axis:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    fig.suptitle(f"{data['name']}: {_description(data, x_axis, rest)}", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _description(data: Mapping[str, Any], x_axis: str | None, rest: Sequence[str]) -> str:
    """What the picture's axes and lines are, and what each point averages."""
    seeds = data["axes"].get("seed")
    if seeds and len(seeds) > 1:
        over = f"mean over seeds {', '.join(map(_value, seeds))} (bars: min to max)"
    else:
        seed = _value(seeds[0]) if seeds else _value(data["seed"])
        over = f"one run per point (seed {seed})"
    if x_axis is None:
        return f"each scheme, {over}"
    lines = " and ".join(["scheme", *rest])
    return f"x: {x_axis}; one line per {lines}; {over}"
