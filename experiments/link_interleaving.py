"""Experiment 1 — link interleaving (CASSINI §2.2, Table 2).

Jobs share one dumbbell bottleneck.  Two job sets (experiments.common):
  pair  — two jobs at ~40 % communication share: fully compatible (score 1);
  trio  — three jobs at ~50 % share: partially compatible (score ~0.6).
Schemes, in the same run: same start (baseline), random start offsets, CASSINI shifts
(held by the agent), MLTCP (reno and, on ecn, dctcp variants; skipped with the reason when
the kernel programs cannot be loaded) and each job alone (ideal).

    sudo .venv/bin/python -m experiments.link_interleaving          # fair fabric, small
    sudo .venv/bin/python -m experiments.link_interleaving --full   # fair, ecn and fifo
    sudo .venv/bin/python -m experiments.link_interleaving --sets pair --fabrics fair \
        --iterations 10

Writes results/link_interleaving/results.json, cdf_<set>_<fabric>.png and
timeline_<set>_<fabric>.png; prints scheme x (mean, p99, ratio to ideal) per job set.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from experiments.common import (
    BOTTLENECK_BPS,
    JOB_SETS,
    dumbbell,
    out_dir,
    p99,
    progress,
    require_root,
    run_config,
    table,
    write_json,
)
from testbed.results import ExperimentResult


def mltcp_available() -> tuple[bool, str]:
    """Whether the MLTCP congestion controls can be used here, and why not."""
    try:
        from mltcp import loader
    except ImportError as e:
        return False, f"mltcp package not importable ({e})"
    check = getattr(loader, "check_prerequisites", None)
    if check is None:  # nothing to vouch for the kernel side: not known to work
        return False, "mltcp.loader has no check_prerequisites: availability unknown"
    try:
        check()
    except Exception as e:  # noqa: BLE001 - report any reason
        return False, str(e)
    return True, ""


def experiment_config(job_set: str, fabric: str, iterations: int, schemes: list) -> dict:
    """The named job set (``pair`` or ``trio``) on the dumbbell's ``fabric``."""
    jobs = JOB_SETS[job_set]
    return {
        "topology": dumbbell(jobs.count, fabric, buffer_packets=100),
        "jobs": jobs.jobs(iterations),
        "schemes": schemes,
        "cc": "dctcp_bpf" if fabric == "ecn" and mltcp_available()[0] else "cubic",
        "seed": 1,
    }


def schemes_for(fabric: str, with_mltcp: bool) -> list:
    out: list[Any] = ["ideal", "baseline", "random", "cassini"]
    if with_mltcp:
        out.append({"scheme": "mltcp", "name": "mltcp-reno", "cc": "mltcp_reno"})
        out.append({"scheme": "mltcp", "name": "mltcp-cubic", "cc": "mltcp_cubic"})
        if fabric == "ecn":
            out.append({"scheme": "mltcp", "name": "mltcp-dctcp", "cc": "mltcp_dctcp"})
    return out


def summarise(res: ExperimentResult) -> list[dict[str, Any]]:
    """One row per scheme: mean and p99 over every job's iterations, as ratios to the
    jobs alone, and the second half's mean (start-up transients excluded) to ideal."""
    ideal = res.schemes["ideal"].summary
    ideal_mean = statistics.mean(s["mean_s"] for s in ideal.values())
    ideal_p99 = statistics.mean(s["p99_s"] for s in ideal.values())
    rows = []
    for name, scheme in res.schemes.items():
        per_job = [j.iteration_times_s for j in scheme.jobs.values()]
        times = [t for job in per_job for t in job]
        steady = [t for job in per_job for t in job[len(job) // 2 :]]
        mean = statistics.mean(times)
        tail = p99(times)
        rows.append(
            {
                "scheme": name,
                "mean_ms": mean * 1e3,
                "p99_ms": tail * 1e3,
                "mean_vs_ideal": mean / ideal_mean,
                "p99_vs_ideal": tail / ideal_p99,
                "steady_vs_ideal": statistics.mean(steady) / ideal_mean,
                "note": scheme.reused_note,  # "declined: ..." when CASSINI's row is a copy
            }
        )
    return rows


COLUMNS = [
    ("scheme", "scheme", "s"),
    ("mean_ms", "mean ms", ".1f"),
    ("p99_ms", "p99 ms", ".1f"),
    ("mean_vs_ideal", "mean/ideal", ".2f"),
    ("p99_vs_ideal", "p99/ideal", ".2f"),
    ("steady_vs_ideal", "2nd half/ideal", ".2f"),
    ("note", "note", "s"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--full", action="store_true", help="fair, ecn and fifo fabrics")
    ap.add_argument("--sets", default="pair,trio", help="job sets: pair, trio")
    ap.add_argument("--fabrics", default=None, help="comma-separated fabrics (default fair)")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--no-mltcp", action="store_true", help="leave the MLTCP schemes out")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    for s in sets:
        if s not in JOB_SETS:
            ap.error(f"unknown job set {s!r} (pair, trio)")
    fabrics = (args.fabrics or ("fair,ecn,fifo" if args.full else "fair")).split(",")
    require_root()
    with_mltcp, why = (False, "--no-mltcp") if args.no_mltcp else mltcp_available()
    if not with_mltcp:
        progress(f"MLTCP schemes skipped: {why}")
    out = out_dir("link_interleaving", args.out)
    report: dict[str, Any] = {"runs": {}, "mltcp": with_mltcp, "mltcp_skipped_because": why}
    for job_set in sets:
        for fabric in fabrics:
            key = f"{job_set}-{fabric}"
            cfg = experiment_config(
                job_set, fabric, args.iterations, schemes_for(fabric, with_mltcp)
            )
            res = run_config(cfg, out / key, f"{key}: {len(cfg['schemes'])} schemes")
            rows = summarise(res)
            advice = res.schemes["cassini"].advice
            if advice is None:
                raise RuntimeError(f"{key}: the cassini scheme carries no advice")
            best = advice["candidates"][0]
            report["runs"][key] = {
                "rows": rows,
                "score": best["score"],
                "shifts_s": advice["time_shifts_s"],
            }
            write_json(out / "results.json", report)
            print(f"\n{key}  (fabric {fabric}, CASSINI score {best['score']:.2f})")
            print(table(rows, COLUMNS))
            plot_cdf(res, out / f"cdf_{key}.png", key)
            plot_timeline(res, out / f"timeline_{key}.png", key)
    print(f"\nresults: {out / 'results.json'}  plots: {out}/*.png")
    return 0


def plot_cdf(res: ExperimentResult, path: Path, title: str) -> None:
    """CDF of every job's iteration times, one line per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, scheme in res.schemes.items():
        times = sorted(t * 1e3 for j in scheme.jobs.values() for t in j.iteration_times_s)
        ax.plot(times, [(i + 1) / len(times) for i in range(len(times))], label=name)
    ax.set_xlabel("iteration time (ms)")
    ax.set_ylabel("CDF")
    ax.set_title(f"{title}: iteration times")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_timeline(
    res: ExperimentResult,
    path: Path,
    title: str,
    window_s: float = 1.0,
    schemes: list[str] | None = None,
) -> None:
    """Each job's sending rate over a window in the middle of the run, one panel per
    scheme (``schemes``, default the same-start baseline, CASSINI and MLTCP ones), from
    the rank-0 workers' logs: bytes of each communication phase spread over its duration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    wanted = schemes or ["baseline", "cassini", "mltcp-reno", "mltcp-dctcp"]
    shown = [s for s in wanted if s in res.schemes]
    if not shown:
        raise ValueError(f"none of {wanted} in this run (have {sorted(res.schemes)})")
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 2.2 * len(shown)), sharex=True)
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, shown, strict=True):
        logs = {j: r.records(0) for j, r in res.schemes[name].jobs.items()}
        t0 = min(r["start"] for recs in logs.values() for r in recs[len(recs) // 2 :])
        grid = np.arange(0, window_s, 0.001)
        stack = []
        for recs in logs.values():
            rate = np.zeros_like(grid)
            for r in recs:
                a, b = r["comm_start"] - t0, r["end"] - t0
                if b > 0 and a < window_s and b > a:
                    rate[(grid >= a) & (grid < b)] = r["bytes_sent"] * 8 / (b - a) / 1e6
            stack.append(rate)
        ax.stackplot(grid, stack, labels=list(logs), alpha=0.8)
        ax.axhline(BOTTLENECK_BPS / 1e6, color="k", lw=0.8, ls="--")
        ax.set_ylabel(f"{name}\nMbit/s")
    axes[0].legend(fontsize=7, loc="upper right")
    axes[0].set_title(
        f"{title}: per-job sending rate, bottleneck {BOTTLENECK_BPS / 1e6:.0f} Mbit/s"
    )
    axes[-1].set_xlabel("seconds (a window in the middle of the run)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
