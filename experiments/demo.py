"""`make demo`: compact experiments 1 and 2 (a few minutes) and one table.

1. CASSINI: the compatible pair on a `fair` bottleneck — same start vs CASSINI's shifts.
2. MLTCP: the 50 % pair starting together on an `ecn` bottleneck — dctcp_bpf vs
   mltcp_dctcp.
Each against the jobs alone (ideal), measured in the same run.

    sudo .venv/bin/python -m experiments.demo
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from cassini.advisor import NO_SHARED_LINK
from experiments.columns import NOTE, SCHEME, TIMES_VS_IDEAL, Column
from experiments.common import (
    PAIR,
    calibrate_comm_s,
    cassini_advice,
    filling_config,
    job_set_config,
    p99,
    run_config,
)
from experiments.harness import Experiment, Run
from experiments.plots import plot_cdf, plot_timeline
from testbed.results import ExperimentResult

ITERATIONS_2 = 45  # MLTCP needs a few to a few tens of iterations to interleave
LAST_2 = 15  # the steady state it reaches, as a ratio to ideal


def rows_of(
    res: ExperimentResult, experiment: str, skip_first: int = 0, identical: bool = False
) -> list[dict[str, Any]]:
    """Scheme rows against ideal.  ``identical`` jobs share one ideal: the fastest job's
    median alone (as experiment 2 does), so one job's slow run alone cannot flatter the
    others."""
    ideal = res.schemes["ideal"]
    ideal_mean = statistics.mean(s["mean_s"] for s in ideal.summary.values())
    ideal_p99 = statistics.mean(s["p99_s"] for s in ideal.summary.values())
    if identical:
        fastest = min((j.iteration_times_s for j in ideal.jobs.values()), key=statistics.median)
        ideal_mean = statistics.median(fastest)
        ideal_p99 = p99(list(fastest))
    out = []
    for name, scheme in res.schemes.items():
        times = sorted(t for j in scheme.jobs.values() for t in j.iteration_times_s[skip_first:])
        tail = p99(times)
        mean = statistics.mean(times)
        out.append(
            {
                "experiment": experiment,
                "scheme": name,
                "cc": scheme.cc,
                "mean_ms": mean * 1e3,
                "p99_ms": tail * 1e3,
                "mean_vs_ideal": mean / ideal_mean,
                "p99_vs_ideal": tail / ideal_p99,
                "note": scheme.reused_note,
            }
        )
    return out


def cassini_declined(res: ExperimentResult) -> str | None:
    """One line saying which jobs CASSINI declined to shift in ``res`` and why (its
    advice's reasons), and whether its row is another scheme's run; None when it shifted
    every job that shares a link (or did not run)."""
    found = cassini_advice(res)
    if found is None:
        return None
    cassini, best = found
    reasons = best.get("shift_reasons") or {}
    declined = [
        j for j, shifted in sorted((best.get("shift") or {}).items())
        if not shifted and reasons.get(j) != NO_SHARED_LINK
    ]  # fmt: skip
    if not declined and cassini.measured_as is None:
        return None
    row = f" (its row is {cassini.measured_as}'s run)" if cassini.measured_as else ""
    why = "; ".join(f"{j}: {reasons.get(j, 'no reason given')}" for j in declined)
    return f"CASSINI declined to shift {', '.join(declined) or 'any job'}{row}: {why or '-'}"


COLUMNS = (
    Column("experiment", "experiment"),
    SCHEME,
    Column("cc", "cc"),
    *TIMES_VS_IDEAL,
    NOTE,
)


def run_demo(run: Run) -> None:
    out = run.out
    cfg1 = job_set_config(PAIR.name, "fair", 25, ["ideal", "baseline", "cassini"])
    res1 = run_config(cfg1, out / "cassini", "1/2 CASSINI: two jobs, fair fabric")
    plot_timeline(res1, out / "cassini_timeline.png", "CASSINI, fair fabric")
    plot_cdf(res1, out / "cassini_cdf.png", "CASSINI, fair fabric")
    comm_s = calibrate_comm_s("ecn", "dctcp_bpf", out / "ecn" / "calibration")
    cfg2 = filling_config("ecn", "dctcp_bpf", "mltcp_dctcp", ITERATIONS_2, 2, comm_s)
    res2 = run_config(cfg2, out / "ecn", "2/2 MLTCP: two jobs starting together, ecn fabric")
    plot_timeline(
        res2,
        out / "mltcp_timeline.png",
        "MLTCP, ecn fabric",
        schemes=["dctcp_bpf", "mltcp_dctcp"],
    )
    rows = rows_of(res1, "1 cassini (fair)") + rows_of(
        res2, f"2 mltcp (ecn), last {LAST_2}", ITERATIONS_2 - 1 - LAST_2, identical=True
    )
    declined = cassini_declined(res1)
    run.save({"rows": rows, "cassini_declined": declined})
    print()
    run.show(rows, COLUMNS)
    if declined:
        print(f"\n{declined}")
    print(
        f"\nplots: {out / 'cassini_timeline.png'}  {out / 'cassini_cdf.png'}  "
        f"{out / 'mltcp_timeline.png'}"
    )
    print(f"results: {run.results_path}")


EXPERIMENT = Experiment("demo", __doc__, run_demo)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
