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

import argparse
import statistics
import sys
from pathlib import Path

from experiments.common import (
    HALF_PAIR,
    dumbbell,
    equal_shares,
    out_dir,
    require_root,
    run_config,
    table,
    write_json,
)
from testbed.iterations import comm_overlap


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--full", action="store_true", help="the larger sweep")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--out", default=None, help="output folder (default results/regimes)")
    args = ap.parse_args(argv)
    require_root()
    out = out_dir("regimes", args.out)
    rows = []
    cases = grid(args.full)
    for n, case in enumerate(cases, 1):
        label = (
            f"{case['fabric']}-{case['buffer']}p-{case['cc']}-{case['jobs']}jobs"
            f"{'-jitter' if case['jitter'] else ''}"
        )
        cfg = regime_config(
            case["fabric"],
            case["buffer"],
            case["cc"],
            case["jobs"],
            case["jitter"],
            args.iterations,
        )
        res = run_config(cfg, out / label, f"[{n}/{len(cases)}] {label}")
        ideal = res.schemes["ideal"].summary
        base = res.schemes["baseline"].jobs
        overlap = comm_overlap({j: v.records(0) for j, v in base.items()})
        ratios_first = [
            statistics.mean(v.iteration_times_s[:5]) / ideal[j]["mean_s"] for j, v in base.items()
        ]
        ratios_last = [
            statistics.mean(v.iteration_times_s[-10:]) / ideal[j]["mean_s"] for j, v in base.items()
        ]
        rows.append(
            {
                "regime": label,
                **case,
                "ratio_first5": statistics.mean(ratios_first),
                "ratio_last10": statistics.mean(ratios_last),
                "overlap_first5": statistics.mean(overlap[:5]),
                "overlap_last10": statistics.mean(overlap[-10:]),
                "overlap_per_iteration": overlap,
                "interleaved_by_itself": statistics.mean(overlap[-10:]) < 0.2,
            }
        )
        write_json(out / "results.json", {"rows": rows, "iterations": args.iterations})
    print(
        table(
            rows,
            [
                ("regime", "regime", "s"),
                ("ratio_first5", "first5 x", ".2f"),
                ("ratio_last10", "last10 x", ".2f"),
                ("overlap_first5", "ovl first", ".2f"),
                ("overlap_last10", "ovl last", ".2f"),
                ("interleaved_by_itself", "self-interl", ""),
            ],
        )
    )
    plot(rows, out / "regimes.png")
    print(f"results: {out / 'results.json'}  plot: {out / 'regimes.png'}")
    return 0


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
