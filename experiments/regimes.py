"""Experiment 5 — regimes: where does interleaving emerge with no help?

Two (or three) synthetic jobs start together on one dumbbell bottleneck under each fabric
regime.  For every regime it measures, in the same run, each job alone (ideal) and the
jobs together (baseline), and reports the baseline's slowdown in the first and last
iterations plus how much the jobs' communication phases still overlap at the end
(0 = interleaved by themselves, 1 = fully overlapped).

    sudo .venv/bin/python -m experiments.regimes         # small: fifo 20/1000 packets, fair, ecn
    sudo .venv/bin/python -m experiments.regimes --full  # + cubic/reno/bbr, jitter, 3 jobs at 33 %

Writes results/regimes/results.json and regimes.png; prints the table.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from experiments.columns import Column
from experiments.common import HALF_PAIR, dumbbell, equal_shares, run_config
from experiments.harness import Experiment, Run, at_least, full, iterations
from experiments.plots import figure
from testbed.iterations import comm_overlap
from testbed.results import ExperimentResult

COLUMNS = (
    Column("regime", "regime"),
    Column("ratio_first5", "first5 x", ".2f"),
    Column("ratio_last10", "last10 x", ".2f"),
    Column("overlap_first5", "ovl first", ".2f"),
    Column("overlap_last10", "ovl last", ".2f"),
    Column("interleaved_by_itself", "self-interl", ""),
)


def regime_config(
    fabric: str, buffer: int, cc: str, jobs: int, jitter: float, iterations: int
) -> dict:
    """``jobs`` jobs of 100 ms alone, each communicating 1/jobs of it at the bottleneck
    rate (two jobs: the 50 % pair), starting together under the given fabric and CC."""
    job_set = HALF_PAIR if jobs == 2 else equal_shares(jobs)
    return {
        "topology": dumbbell(jobs, fabric, buffer_packets=buffer),
        "jobs": job_set.jobs(iterations, "abcdefgh", jitter=jitter),
        "schemes": ["ideal", "baseline"],
        "cc": cc,
    }


def grid(full: bool) -> list[dict]:
    cases = [
        {"fabric": "fifo", "buffer": 20, "cc": "cubic"},
        {"fabric": "fifo", "buffer": 1000, "cc": "cubic"},
        {"fabric": "fair", "buffer": 100, "cc": "cubic"},
        {"fabric": "ecn", "buffer": 1000, "cc": "cubic"},
    ]
    if full:
        cases += [
            {"fabric": "fifo", "buffer": 100, "cc": "reno"},
            {"fabric": "fifo", "buffer": 100, "cc": "bbr"},
            {"fabric": "fifo", "buffer": 100, "cc": "cubic", "jitter": 0.2},
            {"fabric": "fair", "buffer": 100, "cc": "cubic", "jitter": 0.2},
            {"fabric": "fifo", "buffer": 100, "cc": "cubic", "jobs": 3},
            {"fabric": "fair", "buffer": 100, "cc": "cubic", "jobs": 3},
        ]
    return [{"jobs": 2, "jitter": 0.0, **c} for c in cases]


def label_of(case: dict[str, Any]) -> str:
    """A regime's name, e.g. ``fifo-20p-cubic-2jobs`` (``-jitter`` with jitter)."""
    return (
        f"{case['fabric']}-{case['buffer']}p-{case['cc']}-{case['jobs']}jobs"
        f"{'-jitter' if case['jitter'] else ''}"
    )


def regime_row(label: str, case: dict[str, Any], res: ExperimentResult) -> dict[str, Any]:
    """The baseline's slowdown over ideal and its communication overlap, first iterations
    against last."""
    ideal = res.schemes["ideal"].summary
    base = res.schemes["baseline"].jobs
    overlap = comm_overlap({j: v.records(0) for j, v in base.items()})
    ratios_first = [
        statistics.mean(v.iteration_times_s[:5]) / ideal[j]["mean_s"] for j, v in base.items()
    ]
    ratios_last = [
        statistics.mean(v.iteration_times_s[-10:]) / ideal[j]["mean_s"] for j, v in base.items()
    ]
    return {
        "regime": label,
        **case,
        "ratio_first5": statistics.mean(ratios_first),
        "ratio_last10": statistics.mean(ratios_last),
        "overlap_first5": statistics.mean(overlap[:5]),
        "overlap_last10": statistics.mean(overlap[-10:]),
        "overlap_per_iteration": overlap,
        "interleaved_by_itself": statistics.mean(overlap[-10:]) < 0.2,
    }


def run_regimes(run: Run) -> None:
    args = run.args
    rows = []
    cases = grid(args.full)
    for n, case in enumerate(cases, 1):
        label = label_of(case)
        cfg = regime_config(
            case["fabric"],
            case["buffer"],
            case["cc"],
            case["jobs"],
            case["jitter"],
            args.iterations,
        )
        res = run_config(cfg, run.out / label, f"[{n}/{len(cases)}] {label}")
        rows.append(regime_row(label, case, res))
        run.save({"rows": rows, "iterations": args.iterations})
    run.show(rows, COLUMNS)
    plot(rows, run.out / "regimes.png")
    print(f"results: {run.results_path}  plot: {run.out / 'regimes.png'}")


def plot(rows: list[dict], path: Path) -> None:
    with figure(path, 1, 2, dpi=110, figsize=(11, 4)) as (_, (ax1, ax2)):
        for row in rows:
            ax1.plot(row["overlap_per_iteration"], label=row["regime"])
        ax1.set_xlabel("iteration")
        ax1.set_ylabel("communication overlap (fraction)")
        ax1.set_title("same-start jobs: overlap per iteration")
        ax1.legend(fontsize=7)
        names = [r["regime"] for r in rows]
        x = range(len(rows))
        ax2.bar([i - 0.2 for i in x], [r["ratio_first5"] for r in rows], 0.4, label="first 5")
        ax2.bar([i + 0.2 for i in x], [r["ratio_last10"] for r in rows], 0.4, label="last 10")
        ax2.axhline(1.0, color="k", lw=0.8)
        ax2.set_xticks(list(x), names, rotation=30, ha="right", fontsize=7)
        ax2.set_ylabel("iteration time / ideal")
        ax2.set_title("baseline slowdown")
        ax2.legend()


def check(args: Any) -> None:
    at_least(args.iterations, "--iterations")


EXPERIMENT = Experiment(
    "regimes",
    __doc__,
    run_regimes,
    options=(full("the larger sweep"), iterations(30)),
    check=check,
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
