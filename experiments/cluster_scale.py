"""Cluster scale: what each mechanism buys on one fabric, alone and combined (issue 20).

Every scheme runs the same jobs on the same cluster in the simulator (``cassini.sim``):
ideal (dedicated network), Themis, and Themis with CASSINI, MLTCP, Crux (priorities +
paths), MonkeyTree-style defragmentation, each alone and in combinations.  The fabric is
two-tier with every ToR's uplink split over 4 spines and ECMP routing (``routing:
ecmp``); ``themis+single`` is the same with perfect load balancing, for the cost of ECMP
collisions.  Jobs: Poisson arrivals at 0.9 load drawing models from the measured
profile library (the testbed-measured entries of ``cassini/data/profiles.json``), or a
trace file (``--trace``, any format ``cassini sim`` reads).

    .venv/bin/python -m experiments.cluster_scale                 # small: 2 x 256 GPUs, ~6 s
    .venv/bin/python -m experiments.cluster_scale --full   # 1,024 GPUs 2:1, 2,048 GPUs 4:1
    .venv/bin/python -m experiments.cluster_scale --full --jobs 300 --schemes themis,themis+crux

Writes ``results.json`` (after every scheme, so a cut-off run keeps what finished),
``slowdown_cdf.png`` and ``gpu_utilisation.png`` under ``--out`` (default
``results/cluster_scale``) and prints one table per cluster.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cassini.errors import InputError
from cassini.outputs import save_figure
from cassini.profile import JobProfile
from cassini.sim.config import check_schedulers
from cassini.sim.engine import SimResult
from cassini.sim.engine import run as simulate_run
from cassini.sim.options import SimOptions
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec, load_library, poisson_jobs, read_trace
from experiments.common import write_json
from experiments.harness import (
    Experiment,
    Run,
    UsageError,
    at_least,
    earlier_results,
    full,
    option,
    positive,
)

#: (label, scheduler name) rows, in the table's order
SCHEMES: tuple[tuple[str, str], ...] = (
    ("ideal (dedicated network)", "ideal"),
    ("Themis", "themis"),
    ("Themis, no ECMP (perfect balance)", "themis+single"),
    ("Themis + CASSINI", "themis+cassini"),
    ("Themis + MLTCP", "themis+mltcp"),
    ("Themis + Crux", "themis+crux"),
    ("Themis + defrag", "themis+defrag"),
    ("Themis + Crux + CASSINI", "themis+crux+cassini"),
    ("Themis + CASSINI + MLTCP", "themis+cassini+mltcp"),
    ("Themis + Crux + MLTCP", "themis+crux+mltcp"),
    ("Themis + Crux + defrag", "themis+crux+defrag"),
)


@dataclass(frozen=True)
class Setup:
    """One cluster and its workload."""

    name: str
    cluster: Cluster
    jobs: int
    gpus: Mapping[int, float]
    #: hours-long jobs are what defragmentation's ~9 s per worker is paid against; the
    #: engine's cost grows with jobs, not iterations
    iterations: tuple[int, int] = (1000, 10000)


SMALL = (
    Setup(
        "256 GPUs, 2:1, 4 spines",
        Cluster(racks=8, servers_per_rack=8, gpus_per_server=4, oversubscription=2, spines=4),
        jobs=300,
        gpus={4: 1, 8: 1, 16: 1, 24: 1, 32: 1, 48: 1},
    ),
    Setup(
        "256 GPUs, 4:1, 4 spines",
        Cluster(racks=8, servers_per_rack=16, gpus_per_server=2, oversubscription=4, spines=4),
        jobs=300,
        gpus={4: 1, 8: 1, 16: 1, 24: 1, 32: 1, 48: 1},
    ),
)
FULL = (
    Setup(
        "1,024 GPUs, 2:1, 4 spines",
        Cluster(racks=16, servers_per_rack=8, gpus_per_server=8, oversubscription=2, spines=4),
        jobs=1000,
        gpus={2: 1, 4: 1, 8: 1, 12: 1, 16: 1, 24: 1, 32: 1, 48: 1, 64: 1},
    ),
    Setup(
        "2,048 GPUs, 4:1, 4 spines",
        Cluster(racks=32, servers_per_rack=16, gpus_per_server=4, oversubscription=4, spines=4),
        jobs=1000,
        gpus={4: 1, 8: 1, 16: 1, 32: 1, 48: 1, 64: 1, 96: 1, 128: 1},
    ),
)


def measured_library() -> dict[str, JobProfile]:
    """The library entries measured on the testbed (provenance says so)."""
    import importlib.resources

    raw = json.loads(
        importlib.resources.files("cassini").joinpath("data/profiles.json").read_text()
    )
    measured = {
        e["id"]
        for e in raw
        if str(e.get("provenance", {}).get("source", "")).startswith("measured")
    }
    return {k: v for k, v in load_library().items() if k in measured}


def workload(
    setup: Setup, library: Mapping[str, JobProfile], args: argparse.Namespace
) -> list[JobSpec]:
    if args.trace:
        jobs = read_trace(args.trace, library)
        return [j for j in jobs if j.gpus <= setup.cluster.gpus][: args.jobs or None]
    return poisson_jobs(
        args.jobs or setup.jobs,
        args.load,
        setup.cluster.gpus,
        library,
        gpus=setup.gpus,
        iterations=setup.iterations,
        seed=args.seed,
    )


def row(result: SimResult, baseline: SimResult | None) -> dict[str, Any]:
    """The table's columns for one scheme; throughput loss of the lowest-priority decile
    is against Themis on the same jobs when ``baseline`` is given."""
    s = result.summary()
    low = s["lowest_priority_decile"] or {}
    loss_vs_themis = math.nan
    if baseline is not None and low:
        base = {j.job_id: j for j in baseline.jobs}
        mine = {j.job_id: j for j in result.jobs}
        ids = [j for j in low["job_ids"] if j in base]
        if ids:
            loss_vs_themis = 1.0 - float(
                np.mean([base[j].mean_iteration_s / mine[j].mean_iteration_s for j in ids])
            )
    return {
        "mean_slowdown": s["mean_slowdown"],
        "p99_slowdown": s["p99_slowdown"],
        "mean_jct_s": s["mean_jct_s"],
        "makespan_s": s["makespan_s"],
        "gpu_utilisation": s["gpu_utilisation"],
        "worst_job_slowdown": s["worst_job_slowdown"],
        "low_decile_slowdown": low.get("mean_slowdown", math.nan),
        "low_decile_loss_vs_themis": loss_vs_themis,
        "migrations": s["migrations"],
        "migration_s_total": s["migration_s_total"],
        "advisor_calls": s["placements_advised"],
        "link_excess_s": s["excess_demand_s_total"],
        "ecmp_collisions": s["ecmp_collisions"],
        "priority_cut_fraction": s["priority_cut_fraction"],
        "wall_s": s["wall_s"],
    }


#: (mechanism, scheme, what the paper reports); compared against Themis on the same jobs
PAPERS = (
    ("CASSINI", "themis+cassini", "1.6x mean / 2.5x p99 iteration time (24 A100 servers)"),
    ("MLTCP", "themis+mltcp", "2x mean / 4x p99 iteration time"),
    ("Crux", "themis+crux", "+4-23 % GPU utilisation (trace sim); JCT up to -33 % (testbed)"),
    ("MonkeyTree", "themis+defrag", "-14 % mean JCT (1,024 GPUs, 4:1)"),
)


def versus_themis(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Each scheme against Themis on the same jobs: Themis' mean and p99 slowdown over
    the scheme's (> 1 = faster, the papers' "Nx"), GPU utilisation gain and mean JCT
    change (fractions)."""
    base = rows.get("themis")
    if base is None:
        return {}
    return {
        name: {
            "mean_speedup": base["mean_slowdown"] / r["mean_slowdown"],
            "p99_speedup": base["p99_slowdown"] / r["p99_slowdown"],
            "gpu_utilisation_gain": r["gpu_utilisation"] / base["gpu_utilisation"] - 1,
            "mean_jct_change": r["mean_jct_s"] / base["mean_jct_s"] - 1,
        }
        for name, r in rows.items()
        if name != "themis"
    }


def papers_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """The papers' headline numbers beside ours (vs Themis on the same jobs)."""
    vs = versus_themis(rows)
    lines = [
        f"{'mechanism':<11} {'mean x':>7} {'p99 x':>7} {'GPU util':>9} {'mean JCT':>9}  paper",
    ]
    for label, name, paper in PAPERS:
        if name in vs:
            v = vs[name]
            lines.append(
                f"{label:<11} {v['mean_speedup']:>7.3f} {v['p99_speedup']:>7.3f} "
                f"{v['gpu_utilisation_gain']:>+9.1%} {v['mean_jct_change']:>+9.1%}  {paper}"
            )
    return "\n".join(lines)


def _percent(value: float) -> str:
    """``value`` as a percentage, "-" where it is not a number (ideal's loss
    against Themis has no Themis decile of its own)."""
    return "-" if value is None or math.isnan(value) else f"{value:.1%}"


def table(rows: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> str:
    head = (
        f"{'scheme':<34} {'mean x':>7} {'p99 x':>7} {'JCT s':>8} {'mkspan s':>9} {'GPU util':>8} "
        f"{'worst x':>8} {'low10 x':>8} {'low10 loss':>10} {'migr':>5} {'advice':>6} "
        f"{'excess l·s':>10} {'collis':>6} {'wall s':>7}"
    )
    lines = [head]
    for name, r in rows.items():
        lines.append(
            f"{labels.get(name, name):<34} {r['mean_slowdown']:>7.3f} {r['p99_slowdown']:>7.3f} "
            f"{r['mean_jct_s']:>8.0f} {r['makespan_s']:>9.0f} {r['gpu_utilisation']:>8.3f} "
            f"{r['worst_job_slowdown']:>8.2f} {r['low_decile_slowdown']:>8.3f} "
            f"{_percent(r['low_decile_loss_vs_themis']):>10} {r['migrations']:>5} "
            f"{r['advisor_calls']:>6} "
            f"{r['link_excess_s']:>10.0f} {r['ecmp_collisions']:>6} {r['wall_s']:>7.1f}"
        )
    return "\n".join(lines)


def plot(
    results: Mapping[str, Mapping[str, SimResult]], labels: Mapping[str, str], out: Path
) -> list[Path]:
    """Slowdown CDF per scheme (one panel per cluster) and GPU utilisation per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.5), squeeze=False)
    colours = [*plt.get_cmap("tab10").colors, "black", "olive"]
    for ax, (setup, by_scheme) in zip(axes[0], results.items(), strict=True):
        ax.set_prop_cycle(color=colours)
        bottom = 1.0
        for name, r in by_scheme.items():
            order = np.argsort(r.normalised_samples, kind="stable")
            if len(order):
                cum = np.cumsum(r.iteration_weights[order]) / r.iteration_weights.sum()
                x = r.normalised_samples[order]
                ax.step(x, cum, where="post", label=labels.get(name, name))
                bottom = min(bottom, float(cum[np.searchsorted(x, 1.0 + 1e-9) - 1]))
        ax.set_ylim(max(0.0, bottom - 0.05), 1.005)  # most iterations run at dedicated speed
        ax.set_xlabel("iteration time / dedicated iteration time")
        ax.set_ylabel("CDF over iterations")
        ax.set_title(setup)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    cdf = out / "slowdown_cdf.png"
    save_figure(fig, cdf, 110)
    plt.close(fig)

    fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.5), squeeze=False)
    for ax, (setup, by_scheme) in zip(axes[0], results.items(), strict=True):
        names = list(by_scheme)
        util = [by_scheme[k].summary()["gpu_utilisation"] for k in names]
        ax.barh([labels.get(k, k) for k in names], util)
        ax.invert_yaxis()
        ax.set_xlabel("GPU utilisation (compute GPU-s / allocated GPU-s)")
        ax.set_title(setup)
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    bars = out / "gpu_utilisation.png"
    save_figure(fig, bars, 110)
    plt.close(fig)
    return [cdf, bars]


OPTIONS = (
    full("1,024 GPUs 2:1 and 2,048 GPUs 4:1 (slow)"),
    option(
        "--setup",
        type=int,
        action="append",
        help="run only this setup (0, 1; repeatable; default: every setup)",
    ),
    option("--schemes", help="comma-separated scheduler names (default: all rows)"),
    option("--jobs", type=int, help="override the number of jobs (default: the setup's)"),
    option("--load", type=float, default=0.9, help="Poisson load (default %(default)s)"),
    option("--trace", help="a trace file instead of Poisson arrivals"),
    option(
        "--routing",
        default="ecmp",
        choices=("single", "ecmp", "crux"),
        help="how flows take paths (default %(default)s)",
    ),
    option(
        "--priority-levels",
        type=int,
        default=8,
        help="hardware queues for Crux, at least 1 (default %(default)s)",
    ),
    option(
        "--seed",
        type=int,
        default=1,
        help="random seed of the arrivals and the run (default %(default)s)",
    ),
    option(
        "--summarise",
        metavar="RESULTS_JSON",
        nargs="+",
        help="print the tables of earlier runs; of several (seeds), the median and range "
        "(a seed given twice and rows some runs lack are named on stderr)",
    ),
)


def run_scale(run: Run) -> int:
    """Every scheme on every setup's jobs; tables, results.json and plots under run.out."""
    args = run.args
    if args.summarise:
        if len(args.summarise) == 1:
            return summarise(Path(args.summarise[0]))
        return summarise_seeds([Path(p) for p in args.summarise])
    labels = dict((name, label) for label, name in SCHEMES)
    names = scheme_names(args)
    out = run.out
    library = measured_library()
    # the published figures used the library as measured (50 Gbit/s links: scale-to-nic
    # would be the identity there); said explicitly since SimOptions' default is scale-to-nic
    options = SimOptions(
        routing=args.routing, priority_levels=args.priority_levels, profiles="as-measured"
    )
    results: dict[str, dict[str, SimResult]] = {}
    data: dict[str, Any] = {
        "command": " ".join(
            [
                sys.executable.split("/")[-1],
                "-m",
                "experiments.cluster_scale",
                *run.argv,
            ]
        ),
        "models": sorted(library),
        "load": None if args.trace else args.load,
        "trace": args.trace,
        "routing": args.routing,
        "priority_levels": args.priority_levels,
        "seed": args.seed,
        "setups": {},
    }
    setups = FULL if args.full else SMALL
    for setup in [setups[i] for i in args.setup] if args.setup else setups:
        jobs = workload(setup, library, args)
        results[setup.name] = {}
        entry = data["setups"][setup.name] = {
            "cluster": setup.cluster.to_dict() | {"gpus": setup.cluster.gpus},
            "jobs": len(jobs),
            "rows": {},
        }
        print(f"== {setup.name}: {len(jobs)} jobs", file=sys.stderr, flush=True)
        for name in names:
            start = time.perf_counter()
            r = simulate_run(setup.cluster, jobs, library, name, seed=args.seed, options=options)
            results[setup.name][name] = r
            entry["rows"][name] = row(r, results[setup.name].get("themis"))
            print(f"   {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            entry["versus_themis"] = versus_themis(entry["rows"])
            _write(data, out)
        print(f"\n{setup.name}, {len(jobs)} jobs, {_arrivals(data)}, routing {args.routing}")
        print(table(entry["rows"], labels))
        print("\nagainst Themis on the same jobs (x = Themis / scheme; > 1 = faster):")
        print(papers_table(entry["rows"]))
    paths = plot(results, labels, out)
    print(f"\nresults: {out / 'results.json'}; plots: {', '.join(map(str, paths))}")
    return 0


def _arrivals(data: Mapping[str, Any]) -> str:
    """Where a run's jobs came from, for a table's title: ``load 0.9`` (Poisson
    arrivals) or ``trace NAME`` (a trace file has no configured load)."""
    if data.get("trace"):
        return f"trace {Path(data['trace']).name}"
    return f"load {data['load']}"


def summarise(path: Path) -> int:
    """Print the tables of a results.json (also one a cut-off run left)."""
    data = read_summary(path)
    labels = dict((name, label) for label, name in SCHEMES)
    for setup, entry in data["setups"].items():
        rows = _read_rows(entry)
        print(f"\n{setup}, {entry['jobs']} jobs, {_arrivals(data)}, routing {data['routing']}")
        print(table(rows, labels))
        print("\nagainst Themis on the same jobs (x = Themis / scheme; > 1 = faster):")
        print(papers_table(rows))
    return 0


def _read_rows(entry: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A setup's rows as results.json holds them, null (a number that is not one: NaN,
    infinity) read back as NaN."""
    return {
        n: {k: (math.nan if v is None else v) for k, v in r.items()}
        for n, r in entry["rows"].items()
    }


def summarise_seeds(paths: Sequence[Path]) -> int:
    """Median [min-max] over runs (e.g. seeds) of each mechanism against Themis.  A
    setup missing from a run is summarised over the runs that have it; a mechanism (or
    Themis) missing from one of those is left out of the setup's table; both are named
    in one warning line, as is a seed given by several runs."""
    runs = [read_summary(p) for p in paths]
    _warn_repeated_seeds(paths, runs)
    missing: list[str] = []
    for setup in dict.fromkeys(s for r in runs for s in r["setups"]):
        have = [(p, r) for p, r in zip(paths, runs, strict=True) if setup in r["setups"]]
        missing += [
            f"{p} lacks the setup {setup!r} (its table is over the other runs)"
            for p, r in zip(paths, runs, strict=True)
            if setup not in r["setups"]
        ]
        rows = [_read_rows(r["setups"][setup]) for _, r in have]
        missing += _missing_mechanisms(setup, [p for p, _ in have], rows)
        seeds = ", ".join(str(r["seed"]) for _, r in have)
        runs_word = "runs" if len(have) > 1 else "run"
        print(f"\n{setup}: {len(have)} {runs_word} (seed{'s' if len(have) > 1 else ''} {seeds})")
        print(f"{'mechanism':<11} {'mean x':>19} {'p99 x':>19} {'GPU util':>22} {'mean JCT':>24}")
        for label, name, _ in PAPERS:
            vs = [versus_themis(r).get(name) for r in rows]
            if not any(v is None for v in vs):
                print(_range_line(label, vs))
    if missing:
        print(
            f"--summarise: warning: rows missing from some runs: {'; '.join(missing)}",
            file=sys.stderr,
        )
    return 0


def _missing_mechanisms(
    setup: str, paths: Sequence[Path], rows: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Per run lacking some: which of Themis and the mechanisms any run of ``setup`` has
    it lacks (those mechanisms are left out of the setup's table)."""
    wanted = ["themis"] + [name for _, name, _ in PAPERS if any(name in r for r in rows)]
    said = []
    for path, r in zip(paths, rows, strict=True):
        lacking = [name for name in wanted if name not in r]
        if lacking:
            what = ", ".join(
                "themis (every mechanism's baseline)" if n == "themis" else n for n in lacking
            )
            said.append(f"{path} lacks {setup!r}: {what} (left out of its table)")
    return said


def _range_line(label: str, vs: Sequence[Mapping[str, float]]) -> str:
    """One mechanism's median [min, max] over runs, column by column."""
    cells = []
    for key, fmt in (
        ("mean_speedup", "{:.3f}"),
        ("p99_speedup", "{:.3f}"),
        ("gpu_utilisation_gain", "{:+.1%}"),
        ("mean_jct_change", "{:+.1%}"),
    ):
        values = [v[key] for v in vs]
        med, lo, hi = (fmt.format(x) for x in (np.median(values), min(values), max(values)))
        cells.append(f"{med} [{lo}, {hi}]")
    return f"{label:<11} {cells[0]:>19} {cells[1]:>19} {cells[2]:>22} {cells[3]:>24}"


def _warn_repeated_seeds(paths: Sequence[Path], runs: Sequence[Mapping[str, Any]]) -> None:
    """One warning line when several runs have the same seed (their range is then over
    fewer seeds than runs)."""
    by_seed: dict[Any, list[str]] = {}
    for path, r in zip(paths, runs, strict=True):
        by_seed.setdefault(r["seed"], []).append(str(path))
    repeated = {seed: ps for seed, ps in by_seed.items() if len(ps) > 1}
    if repeated:
        said = "; ".join(f"seed {seed}: {', '.join(ps)}" for seed, ps in repeated.items())
        print(
            f"--summarise: warning: the same seed in several runs ({said}): the ranges "
            f"are over {len(by_seed)} seed{'s' if len(by_seed) > 1 else ''}, not {len(runs)}",
            file=sys.stderr,
        )


#: the fields of a row the tables read
ROW_FIELDS = (
    *("mean_slowdown", "p99_slowdown", "mean_jct_s", "makespan_s", "gpu_utilisation"),
    *("worst_job_slowdown", "low_decile_slowdown", "low_decile_loss_vs_themis"),
    *("migrations", "advisor_calls", "link_excess_s", "ecmp_collisions", "wall_s"),
)


def read_summary(path: str | Path) -> dict[str, Any]:
    """An earlier run's ``results.json`` for ``--summarise``; a file that is missing,
    empty, not JSON or not this experiment's is a :class:`UsageError` naming
    ``--summarise`` and the file."""
    data = earlier_results(path, "--summarise", "setups", "a cluster_scale results.json")
    where = f"--summarise: {path}"
    for field in ("load", "routing", "seed"):
        if field not in data:
            raise UsageError(f"{where}: no {field!r} field")
    for setup, entry in data["setups"].items():
        _check_setup(where, setup, entry)
    return data


def _check_setup(where: str, setup: str, entry: Any) -> None:
    """Refuse a setup of a ``--summarise`` file whose rows the tables cannot read."""
    if (
        not isinstance(entry, dict)
        or "jobs" not in entry
        or not isinstance(entry.get("rows"), dict)
    ):
        raise UsageError(f"{where}: setups[{setup!r}]: no 'jobs' and 'rows' object")
    for name, r in entry["rows"].items():
        at = f"{where}: setups[{setup!r}].rows[{name!r}]"
        if not isinstance(r, dict):
            raise UsageError(f"{at}: not an object")
        for field in ROW_FIELDS:
            if field not in r:
                raise UsageError(f"{at}: no {field!r} field")
            value = r[field]
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise UsageError(f"{at}.{field}: a number or null, got {value!r}")


def _write(data: Mapping[str, Any], out: Path) -> None:
    """``results.json`` as strict JSON (:func:`experiments.common.write_json`: NaN and
    infinities as null), replaced whole."""
    write_json(out / "results.json", dict(data))


def check(args: argparse.Namespace) -> None:
    """Refuse a --summarise file that is no results.json of this experiment, a --setup
    that names no setup, and counts and loads no run can take (exit status 2, before
    anything runs)."""
    for path in args.summarise or ():
        read_summary(path)
    at_least(args.priority_levels, "--priority-levels", 1)
    at_least(args.jobs, "--jobs", 1)
    positive(args.load, "--load")
    setups = FULL if args.full else SMALL
    for i in args.setup or ():
        if not 0 <= i < len(setups):
            raise UsageError(f"--setup {i}: there are setups 0..{len(setups) - 1}")
    if args.schemes:  # every name, before the first scheme runs (a typo ran those before it)
        try:
            check_schedulers(tuple(scheme_names(args)), "--schemes")
        except InputError as e:
            raise UsageError(str(e)) from None


def scheme_names(args: argparse.Namespace) -> list[str]:
    """The scheduler names ``--schemes`` gives (default: every row of :data:`SCHEMES`)."""
    if not args.schemes:
        return [name for _, name in SCHEMES]
    return [name.strip() for name in args.schemes.split(",")]


EXPERIMENT = Experiment(
    "cluster_scale", __doc__, run_scale, options=OPTIONS, check=check, needs_root=False
)
main = EXPERIMENT.main

if __name__ == "__main__":
    sys.exit(main())
