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

import statistics
import sys
from typing import Any

from experiments.columns import NOTE, SCHEME, TIMES_VS_IDEAL, Column
from experiments.common import (
    JOB_SETS,
    mltcp_available,
    p99,
    progress,
    run_config,
)
from experiments.common import job_set_config as experiment_config
from experiments.harness import Experiment, Run, UsageError, at_least, full, iterations, option
from experiments.plots import plot_cdf, plot_timeline
from testbed.fabric import FABRICS
from testbed.results import ExperimentResult

COLUMNS = (
    SCHEME,
    *TIMES_VS_IDEAL,
    Column("steady_vs_ideal", "2nd half/ideal", ".2f"),
    Column("on_slot_vs_ideal", "on slot/ideal", ".2f"),
    Column("off_slot", "off slot", "d"),
    NOTE,
)


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
    jobs alone; the second half's mean (start-up transients excluded) to ideal; for held
    jobs, how many iterations ran off their slot (the host woke a worker late, or the agent
    re-aligned) and the mean of the others to ideal (the held grid's own cost)."""
    ideal = res.schemes["ideal"].summary
    ideal_mean = statistics.mean(s["mean_s"] for s in ideal.values())
    ideal_p99 = statistics.mean(s["p99_s"] for s in ideal.values())
    rows = []
    for name, scheme in res.schemes.items():
        per_job = [j.iteration_times_s for j in scheme.jobs.values()]
        times = [t for job in per_job for t in job]
        steady = [t for job in per_job for t in job[len(job) // 2 :]]
        missed = [set(j.off_slot) for j in scheme.jobs.values()]
        on_slot = [
            t
            for job, off in zip(per_job, missed, strict=True)
            for i, t in enumerate(job)
            if i not in off
        ]
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
                "on_slot_vs_ideal": statistics.mean(on_slot or times) / ideal_mean,
                "off_slot": sum(len(off) for off in missed),
                "note": scheme.reused_note,  # "declined: ..." when CASSINI's row is a copy
            }
        )
    return rows


def job_sets(args: Any) -> list[str]:
    """The job sets ``--sets`` names."""
    return [s.strip() for s in args.sets.split(",") if s.strip()]


def fabrics_of(args: Any) -> list[str]:
    """The fabrics ``--fabrics`` names (default fair; with ``--full`` fair, ecn, fifo)."""
    spec = ("fair,ecn,fifo" if args.full else "fair") if args.fabrics is None else args.fabrics
    return [f.strip() for f in spec.split(",") if f.strip()]


def check(args: Any) -> None:
    """Refuse a job set or fabric that is not one, an empty selection (``--sets ""`` or
    ``--sets ,`` ran nothing and exited 0) and a name given twice."""
    sets = job_sets(args)
    names = ", ".join(JOB_SETS)
    for s in sets:
        if s not in JOB_SETS:
            raise UsageError(f"--sets: unknown job set {s!r} ({names})")
    if not sets or len(set(sets)) != len(sets):
        raise UsageError(f"--sets: comma-separated, each once, of {names}, got {args.sets!r}")
    fabrics = fabrics_of(args)
    bad = [f for f in fabrics if f not in FABRICS]
    if bad or not fabrics or len(set(fabrics)) != len(fabrics):
        raise UsageError(
            f"--fabrics: comma-separated, each once, of {', '.join(FABRICS)}, "
            f"got {args.fabrics!r}"
        )
    at_least(args.iterations, "--iterations")


def run_case(run: Run, report: dict[str, Any], job_set: str, fabric: str, with_mltcp: bool) -> None:
    """One job set on one fabric: its entry in the report (saved at once), its table and
    its plots."""
    key = f"{job_set}-{fabric}"
    cfg = experiment_config(job_set, fabric, run.args.iterations, schemes_for(fabric, with_mltcp))
    res = run_config(cfg, run.out / key, f"{key}: {len(cfg['schemes'])} schemes")
    rows = summarise(res)
    advice = res.schemes["cassini"].advice
    if advice is None:
        raise RuntimeError(f"{key}: the cassini scheme carries no advice")
    best = advice["candidates"][0]
    shifts = advice["time_shifts_s"]
    report["runs"][key] = {"rows": rows, "score": best["score"], "shifts_s": shifts}
    run.save(report)
    run.show(rows, COLUMNS, f"\n{key}  (fabric {fabric}, CASSINI score {best['score']:.2f})")
    plot_cdf(res, run.out / f"cdf_{key}.png", key)
    plot_timeline(res, run.out / f"timeline_{key}.png", key)


def run_all(run: Run) -> None:
    args = run.args
    fabrics = fabrics_of(args)
    with_mltcp, why = (False, "--no-mltcp") if args.no_mltcp else mltcp_available()
    if not with_mltcp:
        progress(f"MLTCP schemes skipped: {why}")
    report: dict[str, Any] = {"runs": {}, "mltcp": with_mltcp, "mltcp_skipped_because": why}
    for job_set in job_sets(args):
        for fabric in fabrics:
            run_case(run, report, job_set, fabric, with_mltcp)
    print(f"\nresults: {run.results_path}  plots: {run.out}/*.png")


EXPERIMENT = Experiment(
    "link_interleaving",
    __doc__,
    run_all,
    options=(
        full("fair, ecn and fifo fabrics"),
        option(
            "--sets",
            default="pair,trio",
            help="comma-separated job sets: pair, trio (default %(default)s)",
        ),
        option("--fabrics", default=None, help="comma-separated fabrics (default fair)"),
        iterations(30),
        option("--no-mltcp", action="store_true", help="leave the MLTCP schemes out"),
    ),
    check=check,
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
