"""``cassini sim``: run, sweep and export simulated cluster workloads.

Exit status: 0 on success, 2 on bad input (one line on stderr naming the field).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cassini.errors import InputError

DESCRIPTION = (
    "Trace-driven simulation of a GPU cluster: jobs arrive (Poisson or a trace), a "
    "Themis- or Pollux-like scheduler places them (optionally choosing among candidate "
    "placements with CASSINI), and a flow-level network model gives every job's iteration "
    "times; MLTCP, Crux priorities and paths, ECMP and defragmentation compose with it.  "
    "Reports mean/p99 iteration time, JCT, makespan, excess-demand time, GPU utilisation, "
    "migrations and ECMP collisions."
)

EPILOG = """\
schedulers: a queue policy + parts, e.g. themis, themis+cassini, themis+crux+mltcp,
  pollux+defrag+ecmp; ideal (dedicated network).  Parts by kind:
    queue: themis, pollux, fifo, las          placement: packed, random, cassini, defrag
    routing: single, ecmp, crux               sharing: maxmin, mltcp, priority
    timing: free, held     (cassini = placement cassini + held; crux = crux routing + priority)
config (YAML or JSON), see experiments/configs/sim_*.yaml:
  cluster:   {racks, servers_per_rack, gpus_per_server, server_link_bps, oversubscription,
              racks_per_pod (three-tier), pod_oversubscription, spines (ECMP paths)}
  routing: single|ecmp|crux   priority_levels: 8   mltcp: {slope, intercept, scale_cut}
  defrag: {migration_s: 9, cooldown_s: 300}
  workload:  {poisson: {jobs, load, gpus: {count: weight}, iterations: [lo, hi], models}}
             or {trace: file.csv}   (fields: job_id, arrival_s, gpus, iterations|duration_s,
                                     model; see cassini/sim/workload.py)
  schedulers: [themis, themis+cassini]    candidates: 10   seed: 0
  sweep:     {load: [...], seed: [...], scheduler: [...], oversubscription: [...]}

examples:
  cassini sim run experiments/configs/sim_paper.yaml --out results/sim
  cassini sim sweep experiments/configs/sim_paper.yaml --out results/sweep --workers 2
  cassini sim trace experiments/configs/sim_paper.yaml --out jobs.csv
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser(
        "sim",
        help="simulate a cluster: schedulers with and without CASSINI",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ssub = sim.add_subparsers(dest="sim_command", required=True, metavar="SUBCOMMAND")
    run = ssub.add_parser(
        "run",
        help="simulate every scheduler of CONFIG on the same jobs",
        description="Simulate every scheduler of CONFIG on the same jobs; write "
        "results.json and cdf.png under --out, print a table (or JSON with --format json).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sweep = ssub.add_parser(
        "sweep",
        help="run CONFIG's sweep grid in parallel (Ray if installed, else processes)",
        description="Run every point of CONFIG's sweep grid (all schedulers on the same "
        "jobs at each point) in parallel on Ray (local, or --address) or in a process "
        "pool; write sweep.json and sweep.png under --out.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    trace = ssub.add_parser(
        "trace",
        help="write the jobs CONFIG generates as a CSV/JSON trace",
        description="Write the jobs CONFIG's workload generates as a trace file (CSV, or "
        "JSON when the name ends in .json) that a config can replay with workload.trace.",
    )
    for p in (run, sweep, trace):
        p.add_argument("config", help="configuration file (YAML or JSON)")
        p.add_argument("--out", required=True, help="output directory (trace: file)")
    for p in (run, sweep):
        p.add_argument(
            "--format",
            choices=("table", "json"),
            default="table",
            help="stdout: table for people (default) or JSON summary",
        )
        p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    run.add_argument(
        "--scheduler",
        action="append",
        help="run only this scheduler (repeatable; default: the config's)",
    )
    sweep.add_argument(
        "--backend",
        choices=("auto", "ray", "pool"),
        default="auto",
        help="auto: Ray when installed (or --address given), else a pool",
    )
    sweep.add_argument("--address", help="Ray cluster address (default: a local Ray)")
    sweep.add_argument("--workers", type=int, help="pool processes (default: CPUs)")


def main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from cassini.sim import report, sweep
    from cassini.sim.config import read_config
    from cassini.sim.schedulers import Scheduler
    from cassini.sim.workload import write_trace

    try:
        cfg = read_config(args.config)
        out = Path(args.out)
        if args.sim_command == "trace":
            jobs = cfg.jobs(cfg.library())
            out.parent.mkdir(parents=True, exist_ok=True)
            write_trace(jobs, out)
            print(f"wrote {len(jobs)} jobs to {out}", file=sys.stderr)
            return 0
        if args.sim_command == "run":
            if args.scheduler:
                for s in args.scheduler:
                    Scheduler.parse(s)
                cfg = replace(cfg, schedulers=tuple(args.scheduler))
            progress = None if args.quiet else report.stderr_progress
            results = report.run_config(cfg, progress=progress)
            data = report.write_run(cfg, results, out)
            if args.format == "json":
                print(json.dumps({k: data[k] for k in ("summaries", "ratios")}, indent=1))
            else:
                print(report.table(data["summaries"]))
                print(f"results: {out / 'results.json'}, plot: {out / 'cdf.png'}")
            return 0

        def tick(done: int, total: int) -> None:
            if not args.quiet:
                print(f"  sweep: {done}/{total} points done", file=sys.stderr, flush=True)

        rows, backend = sweep.run_sweep(
            cfg,
            backend=args.backend,
            address=args.address,
            workers=args.workers,
            progress=tick,
        )
        data = sweep.write_sweep(cfg, rows, backend, out)
        if args.format == "json":
            print(json.dumps({k: data[k] for k in ("aggregate", "ratios", "backend")}, indent=1))
        else:
            print(sweep.sweep_table(data))
            print(f"backend: {backend}; results: {out / 'sweep.json'}, plot: {out / 'sweep.png'}")
        return 0
    except InputError as e:
        print(f"cassini sim: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"cassini sim: error: {e}", file=sys.stderr)
        return 1
