"""Benchmark: one simulation of 1,000 jobs on a 1,024-GPU cluster (target: < 2 minutes).

Runs ``experiments/configs/sim_1024.yaml`` (16 racks x 8 servers x 8 GPUs, Poisson at
90 % load) under each scheduler and prints its wall time, the ratio to the 120 s target
and the ratio to ``ideal`` measured in the same run (the same scheduling work without any
network model), so the cost of the network model and of CASSINI's advice stand out.

    .venv/bin/python benchmarks/bench_sim.py [--jobs 1000] [--schedulers ideal,themis,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from cassini.advisor import clear_link_cache
from cassini.sim.config import read_config
from cassini.sim.engine import run

TARGET_S = 120.0
CONFIG = Path(__file__).resolve().parent.parent / "experiments/configs/sim_1024.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(CONFIG), help="simulation config")
    parser.add_argument("--jobs", type=int, help="override the number of jobs")
    parser.add_argument("--load", type=float, help="override the load")
    parser.add_argument(
        "--schedulers", default="ideal,themis,themis+cassini", help="comma-separated"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    cfg = read_config(args.config)
    poisson = dict(cfg.poisson or {})
    if args.jobs:
        poisson["jobs"] = args.jobs
    if args.load:
        poisson["load"] = args.load
    cfg = replace(cfg, poisson=poisson)
    library = cfg.library()
    jobs = cfg.jobs(library)
    rows = {}
    for name in args.schedulers.split(","):
        clear_link_cache()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = run(cfg.cluster, jobs, library, name, n_candidates=cfg.candidates, seed=cfg.seed)
        wall = time.perf_counter() - start
        s = result.summary()
        rows[name] = {
            "wall_s": wall,
            "network_evaluations": s["network_evaluations"],
            "network_events": s["network_events"],
            "placements_advised": s["placements_advised"],
            "mean_slowdown": s["mean_slowdown"],
            "p99_slowdown": s["p99_slowdown"],
        }
    base = rows.get("ideal", {}).get("wall_s")
    out = {
        "jobs": len(jobs),
        "gpus": cfg.cluster.gpus,
        "load": poisson.get("load"),
        "target_s": TARGET_S,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{len(jobs)} jobs on {cfg.cluster.gpus} GPUs, load {poisson.get('load')}")
    print(
        f"{'scheduler':<16} {'wall s':>8} {'/target':>8} {'/ideal':>8} {'groups':>7} "
        f"{'events':>9} {'advised':>8} {'mean x':>7} {'p99 x':>7}"
    )
    for name, r in rows.items():
        rel = f"{r['wall_s'] / base:8.1f}" if base else f"{'-':>8}"
        print(
            f"{name:<16} {r['wall_s']:>8.1f} {r['wall_s'] / TARGET_S:>8.2f} {rel} "
            f"{r['network_evaluations']:>7} {r['network_events']:>9} "
            f"{r['placements_advised']:>8} {r['mean_slowdown']:>7.3f} {r['p99_slowdown']:>7.3f}"
        )
    slow = [n for n, r in rows.items() if r["wall_s"] > TARGET_S]
    print("target met by every scheduler" if not slow else f"over target: {', '.join(slow)}")


if __name__ == "__main__":
    main()
