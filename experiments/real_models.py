"""Experiment 4 — real training workloads: real architectures under PyTorch DDP.

Each job is a real model's DDP training (:mod:`testbed.models`: ResNet-50, VGG, BERT,
GPT-2 ...) with two workers, one per host, gloo over the emulated network.  What is real:
the DDP wrapper, its gradient buckets (DDP's own bucketing of the model's parameter
tensors, caps scaled with the tensors), the asynchronous all-reduce of real gradient
tensors overlapping the backward pass, TCP over shaped links.  What is replayed: each
layer's forward and backward time, slept from a calibration file
(``testbed/calibrations/<model>.json``; on this project's machines those are CPU
measurements scaled to the CASSINI paper's A100 iteration times, see their
``scale_note``), and the parameter tensors' sizes are scaled by ``scale`` = bottleneck
rate / ``nic_bps`` so a job's communication-to-compute ratio on the 200 Mbit/s
bottleneck is the real model's on a ``nic_bps`` NIC.

Cases (small default: the pair on fair and ecn; ``--full`` adds the trio and a
four-job leaf-spine run):

  pair-fair, pair-ecn  two jobs of the same model on the dumbbell
  trio-fair, trio-ecn  three jobs
  leafspine            four jobs, each across a spine, on a 2-leaf 2-spine fabric (fair)

Schemes, all in one run per case: ideal (each job alone), same start, random offsets,
CASSINI (profiles from the DDP comm hook in the ideal run, advice, the agent; it
declines to shift when the prediction says it does not pay), and on ``ecn`` MLTCP
(``mltcp_dctcp``, the same start).  Reported: mean and p99 iteration time over ideal,
and the mean over the last 20 iterations (MLTCP converges over the run).

    sudo .venv/bin/python -m experiments.real_models                  # pair, fair + ecn
    sudo .venv/bin/python -m experiments.real_models --full
    sudo .venv/bin/python -m experiments.real_models --model bert_base --nic-gbps 50
    sudo .venv/bin/python -m experiments.real_models --model bert_base --nic-gbps 50 \
        --iterations 60 --cases pair-ecn --mltcp-slope 1.6 --mltcp-intercept 0.2 \
        --mltcp-compare-cut --schemes baseline mltcp-exact mltcp-exact-cut

Writes results/real_models/results.json, cdf_<case>.png and timeline_<case>.png.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from typing import Any

from experiments.columns import MEAN_MS, MEAN_VS_IDEAL, NOTE, P99_VS_IDEAL, RELEASED, SCHEME, Column
from experiments.common import (
    BOTTLENECK_BPS,
    cassini_advice,
    dumbbell,
    mltcp_available,
    p99,
    progress,
    run_config,
)
from experiments.harness import Experiment, Run, UsageError, full, iterations, option
from experiments.plots import plot_cdf, plot_timeline
from mltcp.policy import MltcpParams
from testbed.model_names import MODEL_NAMES
from testbed.results import ExperimentResult, SchemeResult

DEFAULT_MODEL = "vgg11"
DEFAULT_NIC_GBPS = 140.0
TAIL = 20  # iterations the "last 20" column averages


def model_jobs(model: str, hosts: list[list[str]], iterations: int, nic_bps: float) -> list:
    """One ``kind: model`` job per host list, all of ``model``."""
    return [
        {
            "id": f"{model}-{chr(ord('a') + i)}",
            "kind": "model",
            "model": model,
            "hosts": h,
            "iterations": iterations,
            "nic_bps": nic_bps,
        }
        for i, h in enumerate(hosts)
    ]


def schemes_for(
    fabric: str, with_mltcp: bool, mltcp: MltcpParams | None = None, compare_cut: bool = False
) -> list[Any]:
    """The schemes of one case; on ``ecn`` MLTCP in both iteration modes, with ``mltcp``'s
    slope, intercept and cut scaling (default: the policy's), and with ``compare_cut`` an
    exact-mode run with the cut scaled too (``mltcp-exact-cut``)."""
    out: list[Any] = ["ideal", "baseline", "random", "cassini"]
    if with_mltcp and fabric == "ecn":
        p = mltcp or MltcpParams()
        rule = {
            "cc": "mltcp_dctcp",
            "slope": p.slope,
            "intercept": p.intercept,
            "scale_cut": p.scale_cut,
        }
        out.append({"scheme": "mltcp", "name": "mltcp-dctcp", **rule})
        out.append({"scheme": "mltcp", "name": "mltcp-exact", "mode": "exact", **rule})
        if compare_cut:
            cut = {**rule, "scale_cut": True}
            out.append({"scheme": "mltcp", "name": "mltcp-exact-cut", "mode": "exact", **cut})
    return out


def case_config(
    case: str,
    model: str,
    iterations: int,
    nic_bps: float,
    with_mltcp: bool,
    mltcp: MltcpParams | None = None,
    compare_cut: bool = False,
    only: list[str] | None = None,
    agent_slack: float | None = None,
) -> dict[str, Any]:
    """The testbed config of one case (see the module docstring); ``only``: run just
    these schemes (by name) besides ``ideal``, which every figure is relative to;
    ``agent_slack``: the agent's period slack (fraction; default: the runner's,
    :func:`cassini.predict.period_slack`)."""
    if case == "leafspine":
        topo = {
            "kind": "leaf_spine",
            "leaves": 2,
            "spines": 2,
            "hosts_per_leaf": 4,
            "host_bps": 400_000_000,
            "oversubscription": 4,  # uplinks of 4 x 400 / 4 / 2 spines = 200 Mbit/s
            "fabric": "fair",
        }
        hosts = [[f"h{i}", f"h{i + 4}"] for i in range(1, 5)]
        fabric = "fair"
    else:
        count = 2 if case.startswith("pair") else 3
        fabric = case.split("-")[1]
        topo = dumbbell(count, fabric)
        hosts = [[f"h{i}", f"h{i + count}"] for i in range(1, count + 1)]
    extra = {} if agent_slack is None else {"agent": {"slack": agent_slack}}
    return {
        **extra,
        "topology": topo,
        "jobs": model_jobs(model, hosts, iterations, nic_bps),
        "schemes": [
            s
            for s in schemes_for(fabric, with_mltcp, mltcp, compare_cut)
            if not only or _scheme_name(s) in ("ideal", *only)
        ],
        "cc": "dctcp_bpf" if fabric == "ecn" else "cubic",
        "seed": 1,
    }


def _scheme_name(scheme: Any) -> str:
    return scheme if isinstance(scheme, str) else scheme.get("name", scheme["scheme"])


def leader_advantage_ms(scheme: SchemeResult, min_offset_s: float = 0.002) -> float | None:
    """How much sooner the leading job's largest gradient bucket finishes its all-reduce
    than the other job's, in milliseconds, averaged over the iterations where the two
    overlapped (two-job cases; None otherwise).  The leader is the job whose largest
    bucket launched first, by at least ``min_offset_s``.  Under fair sharing this is about
    0 whatever the offset; MLTCP is meant to make it large (the job further through its
    bytes finishes first), which is what pushes the jobs apart."""
    if len(scheme.jobs) != 2:
        return None
    logs = [job.records() for job in scheme.jobs.values()]
    gaps = []
    for a, b in zip(*logs, strict=False):
        if not a.get("buckets") or not b.get("buckets"):
            continue
        (_, _, sa, ea), (_, _, sb, eb) = (max(x["buckets"], key=lambda q: q[1]) for x in (a, b))
        (s1, e1), (s2, e2) = sorted([(sa, ea), (sb, eb)])
        if s2 - s1 >= min_offset_s and s2 < e1:
            gaps.append((e2 - s2) - (e1 - s1))
    return 1e3 * statistics.mean(gaps) if gaps else None


def late_start_gap_ms(scheme: SchemeResult) -> float | None:
    """Median time (ms) from the end of a held job's iteration to the start of the next
    when the end came after the next one's slot (``start - drift_s``), so the agent had
    nothing to sleep: what the agent's decision exchange and the loop cost between
    iterations, which a late job needs to catch up.  None for schemes without such
    iterations."""
    gaps = []
    for job in scheme.jobs.values():
        if job.period_s is None:
            continue
        records = job.records()
        for prev, rec in zip(records, records[1:], strict=False):
            slot = rec["start"] - rec.get("drift_s", 0.0)
            if prev["end"] > slot and not rec.get("released"):
                gaps.append(rec["start"] - prev["end"])
    return 1e3 * statistics.median(gaps) if gaps else None


def summarise(res: ExperimentResult) -> list[dict[str, Any]]:
    """One row per scheme: mean, p99 and last-20 mean iteration time over ideal (every
    job's iterations together), re-alignments, released jobs and late-start gap of the
    agent."""
    ideal = res.ideal
    assert ideal is not None
    ideal_mean = statistics.mean(t for j in ideal.jobs.values() for t in j.iteration_times_s)
    ideal_p99 = p99([t for j in ideal.jobs.values() for t in j.iteration_times_s])
    rows = []
    for name, scheme in res.schemes.items():
        times = [t for j in scheme.jobs.values() for t in j.iteration_times_s]
        tail = [t for j in scheme.jobs.values() for t in j.iteration_times_s[-TAIL:]]
        held = [j for j in scheme.jobs.values() if j.period_s is not None]
        rows.append(
            {
                "scheme": name,
                "mean_ms": statistics.mean(times) * 1e3,
                "mean_vs_ideal": statistics.mean(times) / ideal_mean,
                "p99_vs_ideal": p99(times) / ideal_p99,
                "last20_vs_ideal": statistics.mean(tail) / ideal_mean,
                "held": f"{len(held)}/{len(scheme.jobs)}" if scheme.kind == "cassini" else "",
                "released": str(sum(bool(j.released) for j in held)) if held else "",
                "realigned": str(sum(j.realignments or 0 for j in held)) if held else "",
                "gap_ms": late_start_gap_ms(scheme) if held else None,
                "lead_ms": leader_advantage_ms(scheme) if name != "ideal" else None,
                "note": scheme.reused_note,
            }
        )
    return rows


COLUMNS = (
    SCHEME,
    MEAN_MS,
    MEAN_VS_IDEAL,
    P99_VS_IDEAL,
    Column("last20_vs_ideal", "last20/ideal", ".2f"),
    Column("held", "held"),
    RELEASED,  # a count as text, empty where no job is held
    Column("realigned", "realigned"),
    Column("gap_ms", "gap ms", ".1f"),
    Column("lead_ms", "lead ms", ".1f"),
    NOTE,
)
CASES = ("pair-fair", "pair-ecn", "trio-fair", "trio-ecn", "leafspine")
TIMELINE_SCHEMES = ("baseline", "cassini", "mltcp-dctcp", "mltcp-exact", "mltcp-exact-cut")


def iteration_counts(res: ExperimentResult) -> list[dict[str, Any]]:
    """Per MLTCP scheme and job: the optimizer steps the job took and what the kernel
    counted as iterations on its gradient flows (those carrying over half of its largest
    flow's bytes)."""
    rows = []
    for name, scheme in res.schemes.items():
        for job, counted in scheme.mltcp_flows.items():
            flows = counted["flows"]
            largest = flows[0]["bytes_acked"] if flows else 0
            data = [f["iterations"] for f in flows if f["bytes_acked"] > 0.5 * largest]
            rows.append(
                {
                    "scheme": name,
                    "job": job,
                    "mode": counted["mode"],
                    "steps": counted["steps"],
                    "counted": " ".join(str(n) for n in data),
                }
            )
    return rows


def advice_summary(res: ExperimentResult) -> dict[str, Any]:
    """What CASSINI predicted and decided for the case."""
    found = cassini_advice(res)
    if found is None:
        return {}
    cassini, best = found
    return {
        "score": best.get("score"),
        "time_shifts_s": cassini.advice.get("time_shifts_s"),
        "predicted_gain": best.get("predicted_gain"),
        "predicted_iteration_s": best.get("predicted_iteration_s"),
        "shift": best.get("shift"),
        "shift_reasons": best.get("shift_reasons"),
        "agent_period_s": {j: r.period_s for j, r in cassini.jobs.items()},
    }


def check(args: Any) -> None:
    """Refuse bad flags, naming them; sets ``args.cases`` (the default: the pair on fair
    and ecn, with ``--full`` every case) and ``args.mltcp_params``."""
    if args.agent_slack is not None and not 0 <= args.agent_slack < 1:
        raise UsageError(f"--agent-slack: a fraction in [0, 1), got {args.agent_slack}")
    names = [_scheme_name(s) for s in schemes_for("ecn", True, compare_cut=True)][1:]
    for name in args.schemes or ():
        if name not in names and name != "ideal":
            raise UsageError(f"--schemes: unknown scheme {name!r} (one of {', '.join(names)})")
    args.cases = args.cases or (list(CASES) if args.full else ["pair-fair", "pair-ecn"])
    for c in args.cases:
        if c not in CASES:
            raise UsageError(f"unknown case {c!r} (one of {', '.join(CASES)})")
    if args.iterations < TAIL + 5:
        raise UsageError(f"--iterations: at least {TAIL + 5}")
    if args.model not in MODEL_NAMES:
        raise UsageError(f"--model: one of {', '.join(MODEL_NAMES)}, got {args.model!r}")
    least = BOTTLENECK_BPS / 1e9  # the tensors are scaled by link / NIC, at most 1
    if not (math.isfinite(args.nic_gbps) and args.nic_gbps >= least):
        raise UsageError(
            f"--nic-gbps: at least {least:g} (the emulated {least:g} Gbit/s links stand for "
            f"the NIC), got {args.nic_gbps:g}"
        )
    try:
        args.mltcp_params = MltcpParams(
            slope=args.mltcp_slope,
            intercept=args.mltcp_intercept,
            scale_cut=args.mltcp_scale_cut,
        )
    except ValueError as e:
        raise UsageError(f"--mltcp-slope/--mltcp-intercept: {e}") from e
    _check_configs(args)


def _check_configs(args: Any) -> None:
    """Every case's testbed config, as the flags make it, read by the testbed (before
    root is asked for and anything runs)."""
    from testbed.run import ConfigError, load_config

    for case in args.cases:
        cfg = case_config(
            case, args.model, args.iterations, args.nic_gbps * 1e9, True, args.mltcp_params,
            args.mltcp_compare_cut, args.schemes, args.agent_slack,
        )  # fmt: skip
        try:
            load_config(cfg)
        except ConfigError as e:
            raise UsageError(
                f"case {case}: the flags make a config the testbed refuses: {e}"
            ) from None


def run_case(run: Run, report: dict[str, Any], case: str, with_mltcp: bool) -> None:
    """One case: its entry in the report (saved at once), its tables and plots."""
    args = run.args
    cfg = case_config(
        case,
        args.model,
        args.iterations,
        args.nic_gbps * 1e9,
        with_mltcp,
        args.mltcp_params,
        compare_cut=args.mltcp_compare_cut,
        only=args.schemes,
        agent_slack=args.agent_slack,
    )
    res = run_config(cfg, run.out / case, f"{case}: {args.model}, {len(cfg['schemes'])} schemes")
    rows = summarise(res)
    counts = iteration_counts(res)
    report["cases"][case] = {"rows": rows, "advice": advice_summary(res), "counts": counts}
    run.save(report)
    gain = report["cases"][case]["advice"].get("predicted_gain")
    jobs = len(cfg["jobs"])
    run.show(rows, COLUMNS, f"\n{case}  ({args.model} x{jobs}, predicted CASSINI gain {gain})")
    if counts:
        run.show(
            counts,
            [Column(k, k, "s" if k != "steps" else "d") for k in counts[0]],
            "MLTCP iterations counted by the kernel on each job's gradient flows:",
        )
    plot_cdf(res, run.out / f"cdf_{case}.png", case)
    shown = [n for n in TIMELINE_SCHEMES if n in res.schemes]
    if shown:
        plot_timeline(res, run.out / f"timeline_{case}.png", case, schemes=shown)


def run_all(run: Run) -> None:
    args = run.args
    with_mltcp, why = (False, "--no-mltcp") if args.no_mltcp else mltcp_available()
    if not with_mltcp:
        progress(f"MLTCP skipped: {why}")
    params = args.mltcp_params
    report: dict[str, Any] = {
        "model": args.model,
        "nic_bps": args.nic_gbps * 1e9,
        "iterations": args.iterations,
        "mltcp": {
            "slope": params.slope,
            "intercept": params.intercept,
            "scale_cut": params.scale_cut,
        },
        "agent_slack": args.agent_slack,
        "cases": {},
    }
    for case in args.cases:
        run_case(run, report, case, with_mltcp)
    print(f"\nresults: {run.results_path}  plots: {run.out}/*.png")


_RULE = MltcpParams()
EXPERIMENT = Experiment(
    "real_models",
    __doc__,
    run_all,
    options=(
        full("pair and trio on fair and ecn, leafspine"),
        option(
            "--cases",
            nargs="+",
            help=f"of {' '.join(CASES)} (default pair-fair pair-ecn, every case with --full)",
        ),
        option("--model", default=DEFAULT_MODEL, help=f"default {DEFAULT_MODEL}"),
        option(
            "--nic-gbps",
            type=float,
            default=DEFAULT_NIC_GBPS,
            help=f"the real NIC the bottleneck stands for (default {DEFAULT_NIC_GBPS:g} Gbit/s)",
        ),
        iterations(40),
        option("--no-mltcp", action="store_true", help="leave MLTCP out"),
        option(
            "--mltcp-slope",
            type=float,
            default=_RULE.slope,
            help=f"MLTCP's F = slope * ratio + intercept: the slope (default {_RULE.slope:g})",
        ),
        option(
            "--mltcp-intercept",
            type=float,
            default=_RULE.intercept,
            help=f"... and the intercept (default {_RULE.intercept:g})",
        ),
        option(
            "--mltcp-scale-cut",
            action=argparse.BooleanOptionalAction,
            default=_RULE.scale_cut,
            help="MLTCP also divides DCTCP's window cut by F (beyond the paper's rule; "
            f"default {'on' if _RULE.scale_cut else 'off'}, as mltcp.policy)",
        ),
        option(
            "--mltcp-compare-cut",
            action="store_true",
            help="add mltcp-exact-cut: exact mode with the cut scaled, beside the other MLTCP runs",
        ),
        option(
            "--schemes",
            nargs="+",
            metavar="NAME",
            help="run only these schemes (ideal always runs): baseline random cassini "
            "mltcp-dctcp mltcp-exact mltcp-exact-cut",
        ),
        option(
            "--agent-slack",
            type=float,
            default=None,
            metavar="FRACTION",
            help="the time-shift agent's period slack beyond the jobs' jitter (default: the "
            "runner's, cassini.predict.period_slack: 3 %%)",
        ),
    ),
    check=check,
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
