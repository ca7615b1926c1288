"""`make demo`: compact experiments 1 and 2 (about a minute) and one table.

1. CASSINI: the compatible pair on a `fair` bottleneck — same start vs CASSINI's shifts.
2. MLTCP: the 50 % pair starting together on an `ecn` bottleneck — dctcp_bpf vs
   mltcp_dctcp.
Each against the jobs alone (ideal), measured in the same run, on the same iterations of
every scheme: part 1 leaves out each job's start-up (where a held job re-aligns), part 2
counts only the last iterations (MLTCP's steady state); the table's first column says how
many.

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
    STARTUP,
    calibrate_comm_s,
    cassini_advice,
    filling_config,
    job_set_config,
    p99,
    progress,
    run_config,
)
from experiments.harness import Experiment, Run
from experiments.plots import plot_cdf, plot_timeline
from testbed.results import ExperimentResult

DURATION = "about a minute"  # a whole run here (51 and 59 s on 2026-11-29); README says so
ITERATIONS_1 = 25
ITERATIONS_2 = 45  # MLTCP needs a few to a few tens of iterations to interleave
LAST_2 = 15  # the steady state it reaches, as a ratio to ideal
SHOWN = {"baseline": "same start"}  # scheme names as the table prints them
LEGEND = (
    "ideal: each job alone (part 2: the faster job; the two are identical); same start: "
    "the jobs start together, unshifted; mean/ideal, p99/ideal: the row's over ideal's, "
    f"on the same iterations (after {STARTUP}: each job's first {STARTUP} left out, its "
    f"start-up; last {LAST_2}: of {ITERATIONS_2 - 1})"
)


def rows_of(
    res: ExperimentResult, experiment: str, skip_first: int = 0, identical: bool = False
) -> list[dict[str, Any]]:
    """Scheme rows: each scheme's iterations after every job's first ``skip_first``,
    pooled, and their mean and p99 over the ideal row's (the same iterations of the jobs
    alone; its own ratios read 1).  ``identical`` jobs share one ideal: the faster job
    alone (lower median), the ideal row's only job, so one job's slow run alone cannot
    flatter the others."""
    ideal = res.schemes["ideal"]
    alone = [j.iteration_times_s[skip_first:] for j in ideal.jobs.values()]
    if identical:
        alone = [min(alone, key=statistics.median)]
    reference = sorted(t for times in alone for t in times)
    ideal_mean, ideal_p99 = statistics.mean(reference), p99(reference)
    out = []
    for name, scheme in res.schemes.items():
        times = (
            reference
            if scheme is ideal
            else sorted(t for j in scheme.jobs.values() for t in j.iteration_times_s[skip_first:])
        )
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


def show_table(run: Run, rows: list[dict[str, Any]]) -> None:
    """``rows`` as the demo prints them: the baseline as ``same start``, the note column
    only when a row has a note, the legend line under the table."""
    shown = [{**r, "scheme": SHOWN.get(r["scheme"], r["scheme"])} for r in rows]
    noted = any(r.get("note") for r in rows)
    run.show(shown, [c for c in COLUMNS if c is not NOTE or noted])
    print(LEGEND)


def run_demo(run: Run) -> None:
    out = run.out
    progress(f"demo: experiments 1 (CASSINI) and 2 (MLTCP) on the emulated cluster, {DURATION}")
    cfg1 = job_set_config(PAIR.name, "fair", ITERATIONS_1, ["ideal", "baseline", "cassini"])
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
    rows = rows_of(res1, f"1 cassini (fair), after {STARTUP}", STARTUP) + rows_of(
        res2, f"2 mltcp (ecn), last {LAST_2}", ITERATIONS_2 - 1 - LAST_2, identical=True
    )
    declined = cassini_declined(res1)
    run.save({"rows": rows, "cassini_declined": declined})
    print()
    show_table(run, rows)
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
