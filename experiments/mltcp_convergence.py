"""Experiment 2 — MLTCP convergence (MLTCP, HotNets 2024: the offset map).

Identical synthetic jobs start together (the worst case) on one bottleneck: two jobs with
a 50 % communication share, or three with 33 %.  Per iteration it records the offset
between the jobs' communication phases (x, as a fraction of a phase; two jobs) or the
overlap of job a's phase with the others (three jobs), and the iteration times, for the
base congestion control and for MLTCP, and draws the reference model's prediction
(x' = x + k x (1-x)/(1+kx), from the fluid model started at the measured first offsets)
on the same axes.  A model sweep over slope, intercept and start offsets maps the
iterations needed to interleave; the summary it prints is the count at MLTCP's default
parameters (``mltcp.policy.MltcpParams``) from a 10 % start offset, as results.json's
``sweep.defaults`` records it.  The model's policy is the one the parameters and the
control call for (``mltcp.model.policy_of``: with the default ``scale_cut``, ``mltcp_dctcp``
shares as F**2, ``mltcp-scale-cut``); the sweep models the ecn case's control
(``sweep.cc``, ``sweep.policy``), each run's model the control and parameters it ran with
(``model.policy``).

Units in results.json (its ``units`` and ``sweep.units`` say the same): ``offsets`` are
fractions of a communication phase (0..1), no time unit, both the measured and modelled
per-iteration offsets of a run and the sweep's start offsets; ``overlap`` is the fraction
of job a's phase the others overlap; ``iterations_to_interleave`` counts iterations, -1
meaning never interleaved within the iterations modelled; ``interleaved_at`` is an
iteration (from 0), null for never.

Cases: ecn (dctcp_bpf vs mltcp_dctcp, 2 jobs), ecn-trio (same, 3 jobs), fifo-reno (reno
vs mltcp_reno), fifo-cubic (cubic vs mltcp_cubic).  On `fifo` the baselines interleave
by themselves (first-mover advantage of a one-packet BDP; see experiments/regimes.py).

    sudo .venv/bin/python -m experiments.mltcp_convergence         # ecn, 30 iterations
    sudo .venv/bin/python -m experiments.mltcp_convergence --full  # every case, 60 iterations
    sudo .venv/bin/python -m experiments.mltcp_convergence --cases ecn-trio fifo-cubic
    .venv/bin/python -m experiments.mltcp_convergence --model-only # the sweep alone, no root

Writes results/mltcp_convergence/results.json, convergence.png and sweep.png.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from experiments.columns import MEAN_VS_IDEAL, SCHEME, Column
from experiments.common import (
    FILLING_IDS,
    calibrate_comm_s,
    filling,
    filling_config,
    progress,
    run_config,
)
from experiments.harness import Experiment, Run, UsageError, full, iterations, option
from experiments.plots import figure
from mltcp.model import policy_of, simulate, two_job_offsets
from mltcp.policy import MltcpParams
from testbed.iterations import comm_overlap
from testbed.results import ExperimentResult

# experiment 2's setup, under this experiment's names (it lives in experiments.common
# because the demo runs it too)
config = filling_config
calibrate = calibrate_comm_s
JOBS = FILLING_IDS
__all__ = ["calibrate", "config", "filling", "CASES"]

# (name, fabric, base congestion control, MLTCP variant, jobs)
CASES = {
    "ecn": ("ecn", "dctcp_bpf", "mltcp_dctcp", 2),
    "ecn-trio": ("ecn", "dctcp_bpf", "mltcp_dctcp", 3),
    "fifo-reno": ("fifo", "reno", "mltcp_reno", 2),
    "fifo-cubic": ("fifo", "cubic", "mltcp_cubic", 2),
}
CASE_AND_SCHEME = (Column("case", "case"), SCHEME)  # what names a row
RUN_COLUMNS = (
    *CASE_AND_SCHEME,
    MEAN_VS_IDEAL,
    Column("ideal_ms", "ideal ms", ".1f"),
    Column("last_ms", "last third ms", ".1f"),
    Column("last_vs_ideal", "last third/ideal", ".2f"),
    Column("interleaved_at", "interleaved at iteration", ""),
)
REPEAT_COLUMNS = (
    *CASE_AND_SCHEME,
    Column("last_median", "last third/ideal, median", ".2f"),
    Column("last_range", "range"),
    Column("interleaved", "interleaved (runs)"),
    Column("at_median", "at iteration, median", ""),
)


def summarise_repeats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case and scheme over repeated runs: median and range of the last third's ratio
    to ideal, how many runs interleaved and the median iteration at which they did."""
    out = []
    keys = list(dict.fromkeys((r["case"], r["scheme"]) for r in rows))
    for case, scheme in keys:
        mine = [r for r in rows if r["case"] == case and r["scheme"] == scheme]
        ats = [r["interleaved_at"] for r in mine if r["interleaved_at"] != "never"]
        lasts = [r["last_vs_ideal"] for r in mine if "last_vs_ideal" in r]
        row: dict[str, Any] = {
            "case": case,
            "scheme": scheme,
            "interleaved": f"{len(ats)} of {len(mine)}",
            "at_median": statistics.median(ats) if ats else "never",
        }
        if lasts:
            row["last_median"] = statistics.median(lasts)
            row["last_range"] = f"{min(lasts):.2f}-{max(lasts):.2f}"
        out.append(row)
    return out


def interleaved_at(overlap: list[float], threshold: float = 0.2, hold: int = 3) -> int | None:
    for k in range(len(overlap) - hold + 1):
        if all(o < threshold for o in overlap[k : k + hold]):
            return k
    return None


def measured_offsets(logs: dict[str, list[dict]], comm_s: float) -> list[float]:
    """Two jobs: per iteration, |difference of communication starts| / phase length."""
    a, b = logs["a"], logs["b"]
    return [
        min(1.0, abs(y["comm_start"] - x["comm_start"]) / comm_s)
        for x, y in zip(a, b, strict=False)
    ]


def model_run(
    first_comm_starts: list[float],
    compute_s: float,
    comm_s: float,
    iterations: int,
    params: MltcpParams,
    policy: str,
) -> dict[str, Any]:
    """The fluid model from the measured first communication starts: predicted offsets
    (two jobs), overlap of job a's phase with the others, iterations to interleave."""
    n = len(first_comm_starts)
    t0 = min(first_comm_starts)
    r = simulate(
        np.full((1, n), compute_s),
        np.full((1, n), comm_s),
        np.array([[t - t0 for t in first_comm_starts]]),
        iterations,
        policy,
        params.slope,
        params.intercept,
    )
    starts = r.comm_starts_s[0]  # jobs x iterations
    ends = np.concatenate([starts[:, 1:] - compute_s, np.full((n, 1), np.nan)], axis=1)
    ends[:, -1] = starts[:, -1] + r.iteration_times_s[0, :, -1] - compute_s
    # the same overlap measure as for the testbed's logs
    overlap = comm_overlap(
        {
            j: [{"comm_start": a, "end": b} for a, b in zip(starts[j], ends[j], strict=True)]
            for j in range(n)
        }
    )
    out: dict[str, Any] = {"overlap": overlap, "interleaved_at": interleaved_at(overlap)}
    if n == 2:
        period = compute_s + comm_s
        out["offsets"] = two_job_offsets(r, comm_s / period, period)[0].tolist()
    return out


SUMMARY_OFFSET = 0.1  # the start offset the printed summary reads (a fraction of a phase)
SWEEP_UNITS = {
    "slopes": "dimensionless (F = slope * ratio + intercept)",
    "intercepts": "dimensionless",
    "offsets": "start offset between the two jobs' communication phases, a fraction of a "
    "phase (0..1)",
    "iterations_to_interleave": "iterations, indexed [slope][intercept][offset]; -1: never "
    "interleaved within the iterations modelled",
}
RUN_UNITS = {
    "offsets": "per iteration, |difference of the two jobs' communication starts| as a "
    "fraction of a communication phase (0..1)",
    "overlap": "per iteration, the fraction of job a's communication phase the others overlap "
    "(0..1)",
    "interleaved_at": "the first iteration (from 0) of 3 in a row with overlap < 0.2; null "
    '("never" in rows): never',
    "iteration_times_s": "seconds",
}


SWEEP_CC = CASES["ecn"][2]  # the control the sweep models: the default case's MLTCP


def sweep(iterations: int = 30, cc: str = SWEEP_CC) -> dict[str, Any]:
    """Model: iterations to interleave over slope x intercept (MLTCP's defaults, from
    :class:`~mltcp.policy.MltcpParams`, among them), for three start offsets, under the
    policy control ``cc`` calls for with the defaults (``policy``); ``defaults``: the
    defaults and their count from a :data:`SUMMARY_OFFSET` start offset."""
    default = MltcpParams()
    policy = policy_of(cc, default)
    slopes = np.array(sorted({0.25, 0.5, 1.0, 1.5, 2.0, 3.0, default.slope}))
    intercepts = np.array(sorted({0.25, 0.5, 1.0, default.intercept}))
    offsets = np.array(sorted({0.02, SUMMARY_OFFSET, 0.3}))
    grid = np.array(np.meshgrid(slopes, intercepts, offsets, indexing="ij")).reshape(3, -1).T
    m = len(grid)
    r = simulate(
        np.full((m, 2), 0.05),
        np.full((m, 2), 0.05),
        np.stack([np.zeros(m), grid[:, 2] * 0.05], axis=1),
        iterations,
        policy,
        grid[:, 0],
        grid[:, 1],
    )
    k = r.iterations_to_interleave().reshape(len(slopes), len(intercepts), len(offsets))
    at = (
        slopes.tolist().index(default.slope),
        intercepts.tolist().index(default.intercept),
        offsets.tolist().index(SUMMARY_OFFSET),
    )
    return {
        "units": SWEEP_UNITS,
        "cc": cc,
        "policy": policy,
        "slopes": slopes.tolist(),
        "intercepts": intercepts.tolist(),
        "offsets": offsets.tolist(),
        "configs": m,
        "iterations_to_interleave": k.tolist(),
        "defaults": {
            "slope": default.slope,
            "intercept": default.intercept,
            "offset": SUMMARY_OFFSET,
            "iterations_to_interleave": int(k[at]),
        },
    }


def sweep_summary(s: dict[str, Any]) -> str:
    """The sweep's line on stdout: the count at MLTCP's defaults (as ``s["defaults"]``
    records it) and, at the default intercept, by slope; -1 reads "never"."""
    d = s["defaults"]
    k = np.array(s["iterations_to_interleave"])
    j, o = s["intercepts"].index(d["intercept"]), s["offsets"].index(d["offset"])
    said = lambda n: "never" if n < 0 else str(n)  # noqa: E731
    by_slope = ", ".join(f"slope {sl:g}: {said(k[i, j, o])}" for i, sl in enumerate(s["slopes"]))
    return (
        f"model sweep ({s['configs']} configurations, {s['cc']} modelled as policy "
        f"{s['policy']}): iterations to interleave from a "
        f"{d['offset'] * 100:g} % offset (of a phase) at MLTCP's defaults (slope {d['slope']:g}, "
        f"intercept {d['intercept']:g}): {said(d['iterations_to_interleave'])}; at intercept "
        f"{d['intercept']:g}, {by_slope}"
    )


def measure_case(run: Run, case: str, rep: int, params: MltcpParams) -> tuple[dict, list]:
    """Repeat ``rep`` (from 0) of one case on the testbed: calibrate, run ideal, base and
    MLTCP, and model MLTCP from the measured start; the case's report entry and its rows."""
    fabric, base, ml, n = CASES[case]
    where = run.out / case_key(case, rep, run.args.repeat)
    measured_comm = calibrate(fabric, base, where / "calibration")
    res = run_config(
        config(fabric, base, ml, run.args.iterations, n, measured_comm),
        where,
        f"{case}: {n} jobs, {base} vs {ml}",
    )
    entry = ideal_entry(res, fabric, n, run.args.iterations)
    rows = [{"case": case, **scheme_entry(res, name, entry)} for name in (base, ml)]
    logs = {j: res.schemes[ml].jobs[j].records(0) for j in JOBS[:n]}
    entry["model"], policy = model_of_run(logs, ml, entry, run.args.iterations, params)
    at_m = entry["model"]["interleaved_at"]
    rows.append(
        {
            "case": case,
            "run": rep + 1,
            "scheme": f"model ({policy})",
            "interleaved_at": "never" if at_m is None else at_m,
        }
    )
    return entry, rows


def case_key(case: str, rep: int, repeats: int) -> str:
    """The case's name in the report and its folder: with repeats, ``<case>-<run>``."""
    return case if repeats == 1 else f"{case}-{rep + 1}"


def ideal_entry(res: ExperimentResult, fabric: str, n: int, iterations: int) -> dict[str, Any]:
    """A case's report entry from its ideal run: the phase lengths of job a alone and the
    one ideal iteration time the identical jobs share (seconds)."""
    # phase lengths of job a alone: medians, so a few slow iterations do not skew
    # the model (see the README's known problems)
    alone = res.schemes["ideal"].jobs["a"].records(0)
    # the jobs are identical, so one ideal serves all: the fastest job's median
    # alone (a job that ran slower alone hit a fault of its own, e.g. the
    # window fault described in the README; it is reported, not hidden)
    alone_medians = {
        j: statistics.median(v.iteration_times_s) for j, v in res.schemes["ideal"].jobs.items()
    }
    return {
        "ideal_s": min(alone_medians.values()),
        "ideal_medians_s": alone_medians,
        "fabric": fabric,
        "jobs": n,
        "comm_s": statistics.median(r["end"] - r["comm_start"] for r in alone),
        "compute_s": statistics.median(r["comm_start"] - r["start"] for r in alone),
        "last_n": max(5, iterations // 3),
        "schemes": {},
    }


def scheme_entry(res: ExperimentResult, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Scheme ``name``'s overlap, offsets and iteration times into the case's ``entry``;
    its table row (without the case)."""
    scheme = res.schemes[name]
    jobs = JOBS[: entry["jobs"]]
    ideal, last_n = entry["ideal_s"], entry["last_n"]
    logs = {j: scheme.jobs[j].records(0) for j in jobs}
    overlap = comm_overlap(logs)
    per_job = {j: list(scheme.jobs[j].iteration_times_s) for j in jobs}
    times = [t for j in jobs for t in per_job[j]]
    last = [t for j in jobs for t in per_job[j][-last_n:]]
    at = interleaved_at(overlap)
    measured = {"overlap": overlap, "interleaved_at": at, "iteration_times_s": per_job}
    if len(jobs) == 2:
        measured["offsets"] = measured_offsets(logs, entry["comm_s"])
    entry["schemes"][name] = measured
    return {
        "scheme": name,
        "mean_vs_ideal": statistics.mean(times) / ideal,
        "last_vs_ideal": statistics.mean(last) / ideal,
        "last_ms": statistics.mean(last) * 1e3,
        "ideal_ms": ideal * 1e3,
        "last_n": last_n,
        "interleaved_at": "never" if at is None else at,
    }


def model_of_run(
    logs: dict[str, list[dict]],
    mltcp_cc: str,
    entry: dict[str, Any],
    iterations: int,
    params: MltcpParams,
) -> tuple[dict[str, Any], str]:
    """The fluid model started where the MLTCP run's jobs started (``logs``: their
    rank-0 records), under the policy ``mltcp_cc`` with ``params`` calls for
    (:func:`~mltcp.model.policy_of`); its prediction (naming the policy) and the policy."""
    comm_s = entry["comm_s"]
    first = [recs[0]["comm_start"] for recs in logs.values()]
    if max(first) - min(first) < 0.005 * comm_s:
        # x = 0 is the model's fixed point: start it 1 % of a phase apart
        first = [first[0] + 0.01 * comm_s * i for i in range(len(first))]
    policy = policy_of(mltcp_cc, params)
    model = model_run(first, entry["compute_s"], comm_s, iterations, params, policy)
    return {"policy": policy, **model}, policy


def measure(run: Run, report: dict[str, Any]) -> None:
    """Every case asked for, ``--repeat`` times, on the testbed, into ``report``; tables and
    the convergence plot."""
    from mltcp import admin

    args = run.args
    admin.load("all")
    params = admin.get_params()
    names = args.cases or (list(CASES) if args.full else ["ecn"])
    rows = []
    for rep in range(args.repeat):
        for case in names:
            entry, case_rows = measure_case(run, case, rep, params)
            rows += case_rows
            report["runs"][case_key(case, rep, args.repeat)] = entry
            run.save(report)
    run.show(rows, RUN_COLUMNS)
    report["rows"] = rows
    if args.repeat > 1:
        report["summary"] = summarise_repeats(rows)
        run.show(report["summary"], REPEAT_COLUMNS, f"\nover {args.repeat} runs:")
    first = [case_key(c, 0, args.repeat) for c in names]
    plot_runs({k: report["runs"][k] for k in first}, run.out / "convergence.png")


def run_all(run: Run) -> None:
    progress("model sweep (slope x intercept x start offset)")
    report: dict[str, Any] = {"units": RUN_UNITS, "sweep": sweep(), "runs": {}}
    plot_sweep(report["sweep"], run.out / "sweep.png")
    if not run.args.model_only:
        measure(run, report)
    run.save(report)
    print(sweep_summary(report["sweep"]))
    print(f"results: {run.results_path}  plots: {run.out}/*.png")


def check(args: Any) -> None:
    if args.iterations is None:
        args.iterations = 60 if args.full else 30
    if args.iterations < 6:
        raise UsageError("--iterations must be at least 6")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")


def plot_runs(runs: dict[str, Any], path: Path) -> None:
    with figure(path, len(runs), 2, figsize=(11, 3.4 * len(runs)), squeeze=False) as (_, axes):
        for row, (case, run) in enumerate(runs.items()):
            ax_x, ax_t = axes[row]
            key = "offsets" if run["jobs"] == 2 else "overlap"
            for name, s in run["schemes"].items():
                ax_x.plot(s[key], marker="o", ms=3, label=f"{name} (measured)")
                ax_t.plot([t * 1e3 for t in s["iteration_times_s"]["a"]], label=name)
            if "model" in run:
                ax_x.plot(run["model"][key], "k--", label=f"model ({run['model']['policy']})")
            ax_x.set_ylabel(
                "offset x (fraction of a comm phase)" if key == "offsets" else "overlap of job a"
            )
            ax_x.set_xlabel("iteration")
            ax_x.set_title(
                f"{case} ({run['jobs']} jobs): {'offset' if key == 'offsets' else 'overlap'}"
            )
            ax_x.legend(fontsize=7)
            ax_t.set_ylabel("iteration time, job a (ms)")
            ax_t.set_xlabel("iteration")
            ax_t.set_title(f"{case}: iteration time")
            ax_t.legend(fontsize=7)


def plot_sweep(s: dict[str, Any], path: Path) -> None:
    """Iterations to interleave per (slope, intercept), one panel per start offset, on
    one colour scale; a grey cell never interleaved within the iterations modelled."""
    k = np.array(s["iterations_to_interleave"], float)
    never = k < 0
    k[never] = np.nan
    n = len(s["offsets"])
    finite = k[np.isfinite(k)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    import matplotlib

    # a copy (with_extremes), grey where it never interleaves
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.85")
    ratios = {"width_ratios": [1.0] * n + [0.06]}  # the last column: the shared colour bar
    with figure(path, 1, n + 1, figsize=(4 * n + 1, 3.4), gridspec_kw=ratios) as (fig, axes):
        for i, (ax, x0) in enumerate(zip(axes[:n], s["offsets"], strict=True)):
            im = ax.imshow(k[:, :, i].T, origin="lower", aspect="auto", cmap=cmap,
                           vmin=vmin, vmax=vmax)  # fmt: skip
            ax.set_xticks(range(len(s["slopes"])), s["slopes"])
            ax.set_yticks(range(len(s["intercepts"])), s["intercepts"])
            ax.set_xlabel("slope")
            ax.set_ylabel("intercept")
            ax.set_title(f"start offset {x0}")
        fig.colorbar(im, cax=axes[n], label="iterations to interleave")
        if never.any():
            fig.suptitle("grey: never interleaved within the iterations modelled", fontsize=9)


EXPERIMENT = Experiment(
    "mltcp_convergence",
    __doc__,
    run_all,
    options=(
        full("every case, 60 iterations (default: ecn, 30)"),
        option(
            "--cases",
            nargs="+",
            choices=list(CASES),
            help="run these cases (default ecn, every case with --full)",
        ),
        option(
            "--repeat", type=int, default=1, help="run every case N times and summarise (default 1)"
        ),
        iterations(None, "iterations per job and scheme, at least 6 (default 30, 60 with --full)"),
        option("--model-only", action="store_true", help="only the model sweep"),
    ),
    check=check,
    needs_root=lambda args: not args.model_only,
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
