"""Validate the flow-level network model (cassini.sim.network) against the testbed.

Runs experiment 1's compatible pair (or, with --set trio, its partially compatible trio)
on the ``fair`` fabric (one HTB class per job: max-min fair sharing, what the model
assumes) with three schemes: each job alone (dedicated), same start (free-running
baseline) and CASSINI's time-shifts held by the agent.  Then it gives the model the
same jobs: the profiles the testbed measured in the dedicated run (the ones CASSINI's
advice used), the same paths and link capacities, the same start offsets, the agent's
periods and drift tolerance, and the same number of iterations.  It compares, per job
and scheme, the mean iteration time and the slowdown (scheme / dedicated), measured vs
modelled.

    sudo .venv/bin/python -m experiments.sim_validation            # pair, 30 iterations
    sudo .venv/bin/python -m experiments.sim_validation --quick    # pair, 12 iterations
    .venv/bin/python -m experiments.sim_validation --results PATH  # re-model a run, no root
        (PATH: a finished run's results.json, e.g. results/sim_validation/pair-fair/results.json)

Two model variants, neither fitted to the shared runs:
  model          the links' nominal capacities (bits/s on the wire, as the testbed's
                 HTB shapes them);
  model_goodput  every capacity scaled by the best rate a job reached alone over its
                 bottleneck (the profiles' rates are payload bits/s measured end to end:
                 headers, ACKs and each phase's start-up are in them), so capacities
                 and rates share a unit.

Two comparisons: closed loop (the model starts the jobs at the run's offsets and runs on
its own), and the phase replay (every measured iteration replayed as a one-shot model
job whose communication starts when the testbed's did: the network's sharing alone,
whatever the phases did; free-running jobs random-walk apart on the testbed, which a
model started once cannot follow).

Writes results/sim_validation/validation.json and validation.png, and the testbed's own
results under results/sim_validation/<set>-fair/; prints the table: mean iteration
times over the whole run and over its second half (start-up transients left out, as
experiment 1's "2nd half" column), and slowdowns; the note names the iterations a held
job ran off its slot (re-aligned, or started later than the agent's tolerance), which
the model, holding every job to its slot, does not have.
Errors are (model - measured) / measured.  Every network namespace the run creates is
removed on exit, on errors and on SIGTERM/SIGHUP (testbed.net.EmulatedCluster).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cassini.profile import JobProfile
from cassini.sim.network.flows import FlowJob
from cassini.sim.network.fluid import simulate
from experiments.columns import JOB, NOTE, SCHEME, Column
from experiments.common import (
    JOB_SETS,
    flow_jobs,
    goodput_factor,
    job_set_config,
    model_iteration_times,
    only_job,
    progress,
    run_config,
)
from experiments.harness import Experiment, Run, UsageError, earlier_results, iterations, option
from experiments.plots import figure
from testbed.results import ExperimentResult, SchemeResult
from testbed.run import RunConfig, load_config

SCHEMES = ("ideal", "baseline", "cassini")
VARIANTS = ("model", "model_goodput")
DEFAULT_ITERATIONS = 30
QUICK_ITERATIONS = 12
MIN_ITERATIONS = 5  # the dedicated run profiles all but the first iteration
ONE_SHOT_PERIOD_S = 1e6  # phase replay: a slot grid whose second slot no run reaches


def scenario(job_set: str, iterations: int) -> dict[str, Any]:
    """Experiment 1's job set on the ``fair`` fabric: dedicated, same start, CASSINI."""
    return job_set_config(job_set, "fair", iterations, list(SCHEMES))


def validate(results: ExperimentResult) -> dict[str, Any]:
    """Model a finished testbed run (the runner's result) and compare."""
    cfg = load_config(dict(results.config))
    schemes = results.schemes
    if "ideal" not in schemes:
        raise ValueError("the run needs the ideal scheme (it measures the profiles)")
    profiles = dict(schemes["ideal"].profiles)
    capacity = cfg.topology.link_capacity()
    factor = goodput_factor(cfg, profiles)
    caps = {
        "model": capacity,
        "model_goodput": {link: c * factor for link, c in capacity.items()},
    }
    ran = [name for name in SCHEMES if name in schemes]
    modelled: dict[str, dict[str, dict[str, list[float]]]] = {v: {} for v in VARIANTS}
    inputs: dict[str, list[dict[str, Any]]] = {}
    for name in ran:
        groups = model_groups(cfg, profiles, name, schemes[name])
        inputs[name] = [_job_dict(fj) for group in groups for fj in group]
        iterations = 1 + min(len(j.iteration_times_s) for j in schemes[name].jobs.values())
        for variant in VARIANTS:
            times: dict[str, list[float]] = {}
            for group in groups:
                times.update(
                    model_iteration_times(group, caps[variant], iterations, cfg.drift_tolerance)
                )
            modelled[variant][name] = times
    replayed = {
        variant: {name: phase_replay(cfg, profiles, schemes[name], caps[variant]) for name in ran}
        for variant in VARIANTS
    }
    rows = compare_rows(results, ran, modelled, replayed)
    cassini = schemes.get("cassini")
    return {
        "scenario": dict(results.config),
        "profiles": {j: p.to_dict() for j, p in profiles.items()},
        "capacity_bps": capacity,
        "goodput_factor": factor,
        "drift_tolerance": cfg.drift_tolerance,
        "model_inputs": inputs,
        "measured_iteration_times_s": {
            name: {j: list(v.iteration_times_s) for j, v in schemes[name].jobs.items()}
            for name in ran
        },
        "modelled_iteration_times_s": modelled,
        "replayed_comm_times_s": replayed,
        "realignments": {j: v.realignments for j, v in cassini.jobs.items()} if cassini else {},
        "rows": rows,
        "summary": error_summary(rows),
    }


def model_groups(
    cfg: RunConfig, profiles: dict[str, JobProfile], name: str, scheme: SchemeResult
) -> list[list[FlowJob]]:
    """The model's runs for one scheme: each job alone for ``ideal``, else all the jobs
    together from the scheme's start offsets, held ones on the agent's periods."""
    if name == "ideal":  # each job alone
        return [flow_jobs(only_job(cfg, j.job_id), profiles, {j.job_id: 0.0}) for j in cfg.jobs]
    periods = {j: r.period_s for j, r in scheme.jobs.items() if r.period_s is not None}
    starts = {j: r.start_offset_s for j, r in scheme.jobs.items()}
    return [flow_jobs(cfg, profiles, starts, periods)]


def phase_replay(
    cfg: RunConfig,
    profiles: dict[str, JobProfile],
    scheme: SchemeResult,
    capacity_bps: dict[str, float],
) -> dict[str, list[tuple[float, float]]]:
    """The network model given the phases the testbed had: every iteration of every job
    (the first, start-up, left out) is a one-shot model job whose communication starts
    when rank 0's did on the testbed.  Per job, per iteration: (modelled, measured)
    communication time, seconds.  Empty when the run's worker logs are gone.

    The closed-loop comparison (:func:`model_groups`) starts the jobs once and lets the
    model run; where the testbed's phases drift (free-running jobs random-walk apart, a
    held job re-aligns), it compares different phases.  The replay checks the sharing
    alone."""
    logs = {j: v.records() for j, v in scheme.jobs.items() if v.logs and v.logs[0].exists()}
    if len(logs) < len(scheme.jobs):
        return {}
    origin = min(records[0]["comm_start"] for records in logs.values())
    hosts = {job.job_id: job.hosts for job in cfg.jobs}
    shots = []  # (job, its compute lead s, the one-shot, measured communication s)
    for job_id, records in logs.items():
        profile = profiles[job_id]
        lead = profile.phases[0].start_s if profile.phases else 0.0
        path = tuple(cfg.topology.ring_links(hosts[job_id]))
        for k, record in enumerate(records[1:], 1):
            anchor = record["comm_start"] - origin - lead
            # one iteration: the next slot of a grid this long is past the horizon
            shot = FlowJob(f"{job_id}#{k}", profile, path, anchor, ONE_SHOT_PERIOD_S)
            shots.append((job_id, lead, shot, record["end"] - record["comm_start"]))
    if not shots:
        return {}
    longest = max(p.iteration_time_s for p in profiles.values())
    horizon = max(shot.anchor_s for _, _, shot, _ in shots) + 10 * longest
    res = simulate([shot for _, _, shot, _ in shots], capacity_bps, horizon_s=horizon)
    out: dict[str, list[tuple[float, float]]] = {j: [] for j in logs}
    for job_id, lead, shot, measured in shots:
        busy = res.busy_s[shot.job_id]
        if not busy:
            raise RuntimeError(f"{shot.job_id}: the replay did not finish in {horizon:.1f} s")
        out[job_id].append((busy[0] - lead, measured))
    return out


def compare_rows(
    results: ExperimentResult,
    ran: list[str],
    modelled: dict[str, dict[str, dict[str, list[float]]]],
    replayed: dict[str, dict[str, dict[str, list[tuple[float, float]]]]] | None = None,
) -> list[dict[str, Any]]:
    """Per scheme and job: measured and modelled mean iteration time (whole run and second
    half), slowdown over each job alone, each variant's relative errors, and where the
    phase replay ran, mean communication time measured and replayed."""
    schemes = results.schemes
    rows = []
    ideal_measured = {j: _mean(v.iteration_times_s) for j, v in schemes["ideal"].jobs.items()}
    for name in ran:
        for job, entry in schemes[name].jobs.items():
            measured = _mean(entry.iteration_times_s)
            steady = _mean(_second_half(entry.iteration_times_s))
            notes = [schemes[name].reused_note] if schemes[name].reused_note else []
            if entry.off_slot:
                notes.append(_off_slot_note(entry.off_slot, len(entry.iteration_times_s)))
            row: dict[str, Any] = {
                "scheme": name,
                "job": job,
                "measured_ms": measured * 1e3,
                "measured_steady_ms": steady * 1e3,
                "off_slot": list(entry.off_slot),
                "measured_slowdown": measured / ideal_measured[job],
                "note": "; ".join(notes),
            }
            for variant in VARIANTS:
                times = modelled[variant][name][job]
                model = _mean(times)
                model_steady = _mean(_second_half(times))
                row[f"{variant}_steady_ms"] = model_steady * 1e3
                row[f"{variant}_steady_error"] = (model_steady - steady) / steady
                slowdown = model / _mean(modelled[variant]["ideal"][job])
                row[f"{variant}_ms"] = model * 1e3
                row[f"{variant}_error"] = (model - measured) / measured
                row[f"{variant}_slowdown"] = slowdown
                row[f"{variant}_slowdown_error"] = (slowdown - row["measured_slowdown"]) / row[
                    "measured_slowdown"
                ]
                pairs = ((replayed or {}).get(variant, {}).get(name) or {}).get(job)
                if pairs:
                    comm = _mean([m for _, m in pairs])
                    replay = _mean([r for r, _ in pairs])
                    row["measured_comm_ms"] = comm * 1e3
                    row[f"{variant}_replay_comm_ms"] = replay * 1e3
                    row[f"{variant}_replay_error"] = (replay - comm) / comm
            rows.append(row)
    return rows


def error_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per model variant, over the shared schemes' rows: mean and max |error| of the mean
    iteration time, mean |error| of the slowdown and of the second half's mean."""
    shared = [r for r in rows if r["scheme"] != "ideal"]
    return {
        variant: {
            "mean_abs_error": statistics.mean(abs(r[f"{variant}_error"]) for r in shared),
            "max_abs_error": max(abs(r[f"{variant}_error"]) for r in shared),
            "mean_abs_slowdown_error": statistics.mean(
                abs(r[f"{variant}_slowdown_error"]) for r in shared
            ),
            "mean_abs_steady_error": statistics.mean(
                abs(r[f"{variant}_steady_error"]) for r in shared
            ),
            **_replay_summary(
                [r[f"{variant}_replay_error"] for r in shared if f"{variant}_replay_error" in r]
            ),
        }
        for variant in VARIANTS
        if shared
    }


def _replay_summary(errors: list[float]) -> dict[str, float]:
    if not errors:
        return {}
    return {
        "mean_abs_replay_error": statistics.mean(abs(e) for e in errors),
        "max_abs_replay_error": max(abs(e) for e in errors),
    }


def _second_half(times: Sequence[float]) -> list[float]:
    """The second half of a run's iteration times (start-up transients left out), as
    experiment 1's "2nd half" column counts."""
    return list(times)[len(times) // 2 :]


def _off_slot_note(off_slot: Sequence[int], count: int, shown: int = 6) -> str:
    """The note for a held job's off-slot iterations, e.g. ``off its slot in 3 of 29
    iterations (3, 4, 5)``: the first ``shown`` named."""
    named = ", ".join(map(str, off_slot[:shown])) + (", ..." if len(off_slot) > shown else "")
    return f"off its slot in {len(off_slot)} of {count} iterations ({named})"


def _mean(times: Sequence[float]) -> float:
    return float(statistics.mean(times)) if times else math.nan


def _job_dict(job: FlowJob) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "path": list(job.path),
        "anchor_s": job.anchor_s,
        "grid_period_s": job.grid_period_s,
        "iteration_time_s": job.profile.iteration_time_s,
    }


COLUMNS = (
    SCHEME,
    JOB,
    Column("measured_ms", "measured ms", ".1f"),
    Column("model_ms", "model ms", ".1f"),
    Column("model_error_pct", "err %", "+.1f"),
    Column("model_goodput_ms", "goodput-model ms", ".1f"),
    Column("model_goodput_error_pct", "err %", "+.1f"),
    Column("measured_steady_ms", "2nd half: measured", ".1f"),
    Column("model_steady_ms", "model", ".1f"),
    Column("model_steady_error_pct", "err %", "+.1f"),
    Column("measured_comm_ms", "comm: measured", ".1f"),
    Column("model_replay_comm_ms", "replayed", ".1f"),
    Column("model_replay_error_pct", "err %", "+.1f"),
    Column("model_goodput_replay_comm_ms", "goodput-replayed", ".1f"),
    Column("model_goodput_replay_error_pct", "err %", "+.1f"),
    Column("measured_slowdown", "measured x", ".3f"),
    Column("model_slowdown", "model x", ".3f"),
    Column("model_goodput_slowdown", "goodput-model x", ".3f"),
    NOTE,
)


def shown_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as the table shows them: errors in per cent."""
    return [
        {
            **r,
            "model_error_pct": 100 * r["model_error"],
            "model_goodput_error_pct": 100 * r["model_goodput_error"],
            "model_steady_error_pct": 100 * r["model_steady_error"],
            **{
                f"{v}_replay_error_pct": 100 * r[f"{v}_replay_error"]
                for v in VARIANTS
                if f"{v}_replay_error" in r
            },
        }
        for r in rows
    ]


def plot(report: dict[str, Any], path: Path) -> None:
    import numpy as np

    rows = report["rows"]
    labels = [f"{r['scheme']}\n{r['job']}" for r in rows]
    x = np.arange(len(rows))
    width = 0.27
    replayed = [r for r in rows if "measured_comm_ms" in r]
    panels = 3 if replayed else 2
    with figure(path, 1, panels, figsize=(5.5 * panels, 3.8)) as (fig, axes):
        series = [("measured", "testbed"), ("model", "model"), ("model_goodput", "goodput model")]
        for k, (key, label) in enumerate(series):
            axes[0].bar(x + (k - 1) * width, [r[f"{key}_ms"] for r in rows], width, label=label)
            axes[1].bar(
                x + (k - 1) * width, [r[f"{key}_slowdown"] for r in rows], width, label=label
            )
        if replayed:
            at = np.arange(len(replayed))
            replay = [("measured_comm_ms", "testbed")] + [
                (f"{v}_replay_comm_ms", f"{v.replace('_', ' ')}, replayed") for v in VARIANTS
            ]
            for k, (key, label) in enumerate(replay):
                axes[2].bar(at + (k - 1) * width, [r[key] for r in replayed], width, label=label)
            axes[2].set_ylabel("mean communication time (ms)")
            axes[2].set_title("phase replay: the testbed's phases", fontsize=9)
            axes[2].set_xticks(at, [f"{r['scheme']}\n{r['job']}" for r in replayed], fontsize=8)
            axes[2].legend(fontsize=8, loc="lower right")
        axes[0].set_ylabel("mean iteration time (ms)")
        axes[1].set_ylabel("slowdown (scheme / dedicated)")
        axes[1].axhline(1.0, color="k", lw=0.8, ls="--")
        for ax in axes[:2]:
            ax.set_xticks(x, labels, fontsize=8)
        axes[0].legend(fontsize=8)
        fabric = report["scenario"]["topology"]["fabric"]
        fig.suptitle(
            f"flow-level model vs testbed ({len(report['profiles'])} jobs, {fabric} fabric)"
        )


def chosen_iterations(args: Any) -> int:
    """``--iterations`` as given (0 too, which :func:`check` refuses), else the default
    for ``--quick`` or not."""
    if args.iterations is not None:
        return int(args.iterations)
    return QUICK_ITERATIONS if args.quick else DEFAULT_ITERATIONS


def check(args: Any) -> None:
    """Refuse ``--iterations`` below :data:`MIN_ITERATIONS` and a ``--results`` file that
    is no finished testbed run (exit status 2, before ``--out`` is made)."""
    count = chosen_iterations(args)
    if count < MIN_ITERATIONS:
        raise UsageError(
            f"--iterations: at least {MIN_ITERATIONS}, got {count} "
            "(the dedicated run profiles all but the first)"
        )
    if args.results is not None:
        read_results(args.results)


def read_results(path: str | Path) -> ExperimentResult:
    """A finished testbed run's ``results.json`` at ``path`` (``--results``), with the
    ideal scheme and a config the testbed loads; anything else is a :class:`UsageError`
    naming ``--results`` and the file."""
    raw = earlier_results(path, "--results", "schemes", "a testbed run's results.json")
    where = f"--results: {path}"
    try:
        results = ExperimentResult.from_dict(raw, Path(path).absolute().parent)  # its logs
        cfg = load_config(dict(results.config))
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # InputError too
        raise UsageError(f"{where}: not a testbed run's results.json ({_problem(e)})") from None
    ideal = results.schemes.get("ideal")
    if ideal is None:
        raise UsageError(f"{where}: the run has no ideal scheme (it measures the profiles)")
    lacking = [job.job_id for job in cfg.jobs if job.job_id not in ideal.profiles]
    if lacking:
        raise UsageError(f"{where}: the ideal scheme has no profile of {', '.join(lacking)}")
    return results


def _problem(e: Exception) -> str:
    """One line for what a results file lacks: a missing key is named as such."""
    if isinstance(e, KeyError):
        return f"no {e.args[0]!r} field"
    return " ".join(str(e).split()) or type(e).__name__


def run_validation(run: Run) -> None:
    args = run.args
    iterations = chosen_iterations(args)
    t0 = time.time()
    if args.results is not None:
        results = read_results(args.results)
        source = str(args.results)
    else:
        where = run.out / f"{args.set}-fair"
        results = run_config(
            scenario(args.set, iterations),
            where,
            f"{args.set} on fair: {', '.join(SCHEMES)}, {iterations} iterations",
        )
        source = str(where / "results.json")
    testbed_s = time.time() - t0
    t1 = time.time()
    report = validate(results)
    report["model_s"] = time.time() - t1
    report["testbed_s"] = testbed_s if not args.results else None
    report["testbed_results"] = source
    run.save(report)
    plot(report, run.out / "validation.png")
    title = f"\n{args.set if not args.results else source}: measured vs modelled (fair fabric)"
    run.show(shown_rows(report["rows"]), COLUMNS, title)
    for variant, s in report["summary"].items():
        print(
            f"{variant}: shared schemes |error| mean {100 * s['mean_abs_error']:.1f} %, "
            f"max {100 * s['max_abs_error']:.1f} %; slowdown |error| mean "
            f"{100 * s['mean_abs_slowdown_error']:.1f} %; second half |error| mean "
            f"{100 * s['mean_abs_steady_error']:.1f} %"
            + (
                f"; phase replay |error| mean {100 * s['mean_abs_replay_error']:.1f} %, "
                f"max {100 * s['max_abs_replay_error']:.1f} %"
                if "mean_abs_replay_error" in s
                else "; phase replay: no worker logs"
            )
        )
    print(
        f"goodput factor {report['goodput_factor']:.3f}; CASSINI re-alignments "
        f"{report['realignments']}"
    )
    progress(f"testbed {testbed_s:.0f} s, model {report['model_s']:.2f} s")
    print(f"results: {run.results_path}  plot: {run.out / 'validation.png'}")


EXPERIMENT = Experiment(
    "sim_validation",
    __doc__,
    run_validation,
    options=(
        option(
            "--set", default="pair", choices=sorted(JOB_SETS), help="job set (default %(default)s)"
        ),
        iterations(
            None,
            f"iterations per job and scheme, at least {MIN_ITERATIONS} "
            f"(default {DEFAULT_ITERATIONS}, {QUICK_ITERATIONS} with --quick)",
        ),
        option(
            "--quick", action="store_true", help=f"{QUICK_ITERATIONS} iterations (a shorter run)"
        ),
        option(
            "--results",
            default=None,
            metavar="PATH",
            help="model this finished testbed run (its results.json) instead of running one; "
            "needs no root",
        ),
    ),
    check=check,
    needs_root=lambda args: args.results is None,
    results_name="validation.json",
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
