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

import statistics
import sys
from pathlib import Path
from typing import Any

from experiments.columns import (
    CASSINI_VS_IDEAL,
    NOTE,
    REALIGNED,
    RELEASED,
    SAME_START_VS_IDEAL,
    Column,
)
from experiments.common import PAIR, dumbbell, run_config
from experiments.harness import Experiment, Run, at_least, finite, iterations, option
from experiments.plots import figure
from testbed.results import ExperimentResult

COLUMNS = (
    Column("offset_ms", "offset ms", "g"),
    Column("offset_of_period", "of period", ".3f"),
    SAME_START_VS_IDEAL,
    CASSINI_VS_IDEAL,
    REALIGNED,
    RELEASED,
    NOTE,
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


def offset_row(ms: float, res: ExperimentResult) -> dict[str, Any]:
    """One offset's run: same start and CASSINI over ideal, and what the agent did."""
    ideal, baseline = res.schemes["ideal"], res.schemes["baseline"]
    cassini = res.schemes["cassini"]
    period = next((j.period_s for j in cassini.jobs.values() if j.period_s), None)
    return {
        "offset_ms": ms,
        "offset_of_period": ms / 1e3 / period if period else float("nan"),
        "baseline_vs_ideal": statistics.mean(baseline.ratios(ideal).values()),
        "cassini_vs_ideal": statistics.mean(cassini.ratios(ideal).values()),
        "realignments": sum(j.realignments or 0 for j in cassini.jobs.values()),
        "released": sum(bool(j.released) for j in cassini.jobs.values()),
        "note": cassini.reused_note,
    }


def run_offsets(run: Run) -> None:
    rows = []
    for ms in run.args.offsets_ms:
        res = run_config(
            offset_config(ms / 1e3, run.args.iterations),
            run.out / f"{ms:g}ms",
            f"clock offset {ms:g} ms",
        )
        rows.append(offset_row(ms, res))
        run.save({"pair": PAIR.name, "rows": rows})
    run.show(rows, COLUMNS)
    plot(rows, run.out / "offset.png")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    with figure(path, figsize=(5, 3.2)) as (_, ax):
        x = [r["offset_ms"] for r in rows]
        ax.plot(x, [r["cassini_vs_ideal"] for r in rows], "o-", label="CASSINI")
        ax.plot(x, [r["baseline_vs_ideal"] for r in rows], "s--", label="same start")
        ax.set_xlabel("clock offset between the two jobs (ms)")
        ax.set_ylabel("mean iteration / ideal")
        ax.legend()


def check(args: Any) -> None:
    at_least(args.iterations, "--iterations")
    finite(args.offsets_ms, "--offsets-ms")


EXPERIMENT = Experiment(
    "clock_offset",
    __doc__,
    run_offsets,
    options=(
        option(
            "--offsets-ms",
            type=float,
            nargs="+",
            default=[0, 2, 5, 10, 20],
            metavar="MS",
            help="the jobs' clock offsets to run, milliseconds (default 0 2 5 10 20)",
        ),
        iterations(30),
    ),
    check=check,
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
