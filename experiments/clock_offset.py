"""How far apart may two jobs' clocks be?  CASSINI's slots assume every host agrees on
wall-clock time; this injects an error into one job's clock (its agent reads
``time.time() + offset``) and measures what is left of the gain.

Experiment 1's compatible pair (40 % communication each) on the dumbbell's ``fair``
fabric; per offset one run of ideal, same start and CASSINI (the same-start row is the
ceiling of what a bad clock can cost: it does not use the clock at all).

    sudo .venv/bin/python -m experiments.clock_offset                      # 0 2 5 10 20 ms
    sudo .venv/bin/python -m experiments.clock_offset --offsets-ms 0 10 --iterations 30

Writes results/clock_offset/results.json and offset.png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from experiments.common import (
    PAIR,
    dumbbell,
    out_dir,
    require_root,
    run_config,
    table,
    write_json,
)


def offset_config(offset_s: float, iterations: int) -> dict[str, Any]:
    jobs = PAIR.jobs(iterations, ids=["a", "b"])
    jobs[1]["clock_offset_s"] = offset_s
    return {
        "topology": dumbbell(PAIR.count, "fair"),
        "jobs": jobs,
        "schemes": ["ideal", "baseline", "cassini"],
        "seed": 1,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--offsets-ms", type=float, nargs="+", default=[0, 2, 5, 10, 20])
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    require_root()
    out = out_dir("clock_offset", args.out)
    rows = []
    for ms in args.offsets_ms:
        res = run_config(offset_config(ms / 1e3, args.iterations), out / f"{ms:g}ms",
                         f"clock offset {ms:g} ms")
        ideal, baseline = res.schemes["ideal"], res.schemes["baseline"]
        cassini = res.schemes["cassini"]
        period = next((j.period_s for j in cassini.jobs.values() if j.period_s), None)
        rows.append(
            {
                "offset_ms": ms,
                "offset_of_period": ms / 1e3 / period if period else float("nan"),
                "baseline_vs_ideal": statistics.mean(baseline.ratios(ideal).values()),
                "cassini_vs_ideal": statistics.mean(cassini.ratios(ideal).values()),
                "realignments": sum(j.realignments or 0 for j in cassini.jobs.values()),
                "released": sum(bool(j.released) for j in cassini.jobs.values()),
                "note": cassini.reused_note,
            }
        )
        write_json(out / "results.json", {"pair": PAIR.name, "rows": rows})
    print(
        table(
            rows,
            [
                ("offset_ms", "offset ms", "g"),
                ("offset_of_period", "of period", ".3f"),
                ("baseline_vs_ideal", "same start/ideal", ".2f"),
                ("cassini_vs_ideal", "CASSINI/ideal", ".2f"),
                ("realignments", "realigned", "d"),
                ("released", "released", "d"),
                ("note", "note", "s"),
            ],
        )
    )
    plot(rows, out / "offset.png")
    return 0


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    x = [r["offset_ms"] for r in rows]
    ax.plot(x, [r["cassini_vs_ideal"] for r in rows], "o-", label="CASSINI")
    ax.plot(x, [r["baseline_vs_ideal"] for r in rows], "s--", label="same start")
    ax.set_xlabel("clock offset between the two jobs (ms)")
    ax.set_ylabel("mean iteration / ideal")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
