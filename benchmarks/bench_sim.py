"""Benchmark: whole simulations (issue 22 §3 targets on this 2-core machine).

``experiments/configs/sim_1024.yaml`` (1,000 jobs, 1,024 GPUs, measured library):
target <= 20 s for themis and themis+cassini (issue 22 §3).
``experiments/configs/sim_16k.yaml`` (10,000 jobs, 16,384 GPUs): target <= 480 s (8 min)
for themis+cassini (the README's sim_16k headline), every other mechanism within 2x of
it.  Any other config has no target of its own: 20 s applies unless ``--target`` gives
one, and the output says which target applies and where it comes from.
Each scheduler's wall and CPU time is printed with its ratio to the
target, to ``ideal`` (the same scheduling work without a network model) and, with
``--reference``, to the same run through the original numpy network loop
(``simulate_reference`` in ``tests/helpers/sim_oracle.py``, the window model's only:
``--reference`` with ``network: continuous`` or any model but ``windows`` exits 2, as
that model has no reference loop to swap in) measured in
the same process (``ref/cpu``: the reference run's CPU time over this one's, CPU time
because wall time swings with other users of the machine); and the network model's
events per second and simulated seconds of network windows.  A
progress bar with ETA runs on stderr.  First every kernel is loaded and every scheduler
runs once, untimed, on the first 30 jobs, so that no timed run pays for loading or
compiling the kernels it uses.

    .venv/bin/python benchmarks/bench_sim.py [--config C] [--jobs N] \\
        [--schedulers ideal,themis,...] [--reference] [--target S]

Columns (times in seconds):
  wall s, cpu s   wall-clock and CPU seconds of the run
  /target         wall s ÷ the target (1.00 or less meets it)
  /ideal          wall s ÷ the ``ideal`` scheduler's wall s (the network model's cost;
                  "-" when ideal is not among the schedulers)
  ref/cpu         with --reference: the reference (numpy) run's CPU s ÷ this compiled
                  run's CPU s, higher is better ("-" without --reference)
  groups, events  network model evaluations (group re-evaluations) and events
  ev/s            network events per wall second
  sim s           simulated seconds of network windows
  mean x, p99 x   mean and 99th-percentile slowdown over a dedicated network
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

from cassini.advisor import clear_link_cache
from cassini.errors import InputError
from cassini.files import positive_float, positive_int
from cassini.sim import engine
from cassini.sim.config import check_schedulers, read_config
from cassini.sim.network import windows
from cassini.sim.report.run import ProgressBar

CONFIG = Path(__file__).resolve().parent.parent / "experiments/configs/sim_1024.yaml"
#: wall-seconds target per config (file stem), and where each comes from
TARGETS_S = {"sim_1024": 20.0, "sim_16k": 480.0}
TARGET_SOURCES = {
    "sim_1024": "issue 22 §3 target for sim_1024",
    "sim_16k": "README headline sim_16k: 8 min",
}
#: the target of a config without one of its own
DEFAULT_TARGET_S = 20.0
DEFAULT_SCHEDULERS = "ideal,themis,themis+cassini"
WARM_UP_JOBS = 30
#: the network model whose loop ``--reference`` swaps for the reference (``timed``)
REFERENCE_NETWORK = "windows"


def timed(cfg, jobs, library, name: str, *, reference: bool = False, quiet: bool = False) -> dict:
    """One simulation: wall and CPU seconds and the network model's counters
    (``quiet``: no progress bar); ``reference`` only on the windows model (the one whose
    loop it swaps)."""
    if reference and cfg.options.network != REFERENCE_NETWORK:
        raise ValueError(f"reference run on network {cfg.options.network}: no reference loop")
    clear_link_cache()
    sim = engine.Simulation(
        cfg.cluster,
        jobs,
        library,
        name,
        n_candidates=cfg.candidates,
        seed=cfg.seed,
        options=cfg.options,
    )
    label = name + (" (ref)" if reference else "")
    if not quiet:
        sim.progress = ProgressBar(label, clock=lambda: sim.now)
    wall, cpu = time.perf_counter(), time.process_time()
    if reference:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from helpers.sim_oracle import simulate_reference

        with mock.patch.object(windows, "simulate", simulate_reference):
            result = sim.run()
    else:
        result = sim.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    s = result.summary()
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "network_evaluations": s["network_evaluations"],
        "network_events": s["network_events"],
        "events_per_s": s["network_events"] / wall if wall > 0 else 0.0,
        "network_window_s": result.network_window_s,
        "placements_advised": s["placements_advised"],
        "mean_slowdown": s["mean_slowdown"],
        "p99_slowdown": s["p99_slowdown"],
    }


def warm_up(cfg, jobs, library, names, *, reference: bool = False) -> None:
    """Load every compiled kernel (:func:`cassini.sim.jit_warmup.warm`), then run every
    scheduler once, untimed, on the first :data:`WARM_UP_JOBS` jobs: the kernels (the
    network loop, the advisor's searches) are loaded from numba's cache, or compiled,
    here and not inside the first timed run.
    Without it the first scheduler that uses the network model paid ~0.4 s more than
    the others on a warm cache (tens of seconds on a cold one)."""
    from cassini.sim.jit_warmup import warm

    warm()  # every kernel of both network models and the advisor (a short run may miss some)
    few = jobs[:WARM_UP_JOBS]
    for name in names:
        timed(cfg, few, library, name, quiet=True)
        if reference and name != "ideal":
            timed(cfg, few, library, name, reference=True, quiet=True)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config",
        default=str(CONFIG),
        help="simulation config (default experiments/configs/sim_1024.yaml)",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        help="override the number of jobs of the config's poisson workload, >= 1",
    )
    parser.add_argument(
        "--load",
        type=positive_float,
        help="override the offered load of the config's poisson workload (mean fraction "
        "of the GPUs busy), above 0",
    )
    parser.add_argument(
        "--schedulers",
        default=DEFAULT_SCHEDULERS,
        help=f"comma-separated, each once (default {DEFAULT_SCHEDULERS}; not the config's)",
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also run each scheduler through the original numpy network loop (ref/cpu); "
        "the windows network model only (the continuous model has no reference loop)",
    )
    parser.add_argument(
        "--network",
        choices=("windows", "continuous"),
        help="override the config's network model (windows: per-change group windows; "
        "continuous: one flow state stepped through time)",
    )
    parser.add_argument(
        "--target",
        type=positive_float,
        help="target wall seconds per scheduler, above 0 (default: sim_1024 20 s, "
        f"sim_16k 480 s, any other config {DEFAULT_TARGET_S:g} s)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def target_for(config: str, given: float | None) -> tuple[float, str]:
    """(target seconds, where it comes from) for ``config`` and ``--target``."""
    if given is not None:
        return given, "--target"
    stem = Path(config).stem
    if stem in TARGETS_S:
        return TARGETS_S[stem], TARGET_SOURCES[stem]
    return DEFAULT_TARGET_S, f"default: config {stem} has no target of its own"


def reference_problem(args: argparse.Namespace, config_network: str) -> str | None:
    """Why ``--reference`` cannot run on the network model in use (``--network``, else
    the config's), or None: only the window model's loop has a reference to swap in, and
    on another model the "reference" run would time the compiled run a second time."""
    network = args.network or config_network
    if not args.reference or network == REFERENCE_NETWORK:
        return None
    where = "--network" if args.network else f"config {args.config}"
    return (
        f"argument --reference: network model {network} ({where}) has no reference loop; "
        f"only {REFERENCE_NETWORK} has one (give --network {REFERENCE_NETWORK} or drop "
        "--reference)"
    )


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    names = args.schedulers.split(",")
    try:
        check_schedulers(tuple(names), "--schedulers")
    except InputError as e:
        ap.error(f"argument {e}")
    try:
        cfg = read_config(args.config)
    except InputError as e:
        ap.error(f"argument --config: {e}")
    problem = reference_problem(args, cfg.options.network)
    if problem:
        ap.error(problem)
    if cfg.poisson is None and (args.jobs is not None or args.load is not None):
        flag = "--jobs" if args.jobs is not None else "--load"
        ap.error(f"argument {flag}: config {args.config} has no poisson workload to override")
    try:
        run(args, cfg, names)
    except InputError as e:
        ap.error(str(e))


def run(args: argparse.Namespace, cfg, names: list[str]) -> None:
    poisson = dict(cfg.poisson or {})
    if args.jobs is not None:
        poisson["jobs"] = args.jobs
    if args.load is not None:
        poisson["load"] = args.load
    cfg = replace(cfg, poisson=poisson)
    if args.network:
        cfg = replace(cfg, options=replace(cfg.options, network=args.network))
    target, target_source = target_for(args.config, args.target)
    library = cfg.library()
    jobs = cfg.jobs(library)
    rows = {}
    warm_up(cfg, jobs, library, names, reference=args.reference)
    for name in names:
        rows[name] = timed(cfg, jobs, library, name)
        if args.reference and name != "ideal":
            rows[name]["reference"] = timed(cfg, jobs, library, name, reference=True)
    base = rows.get("ideal", {}).get("wall_s")
    out = {
        "config": args.config,
        "jobs": len(jobs),
        "gpus": cfg.cluster.gpus,
        "load": poisson.get("load"),
        "network": cfg.options.network,
        "target_s": target,
        "target_source": target_source,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(
        f"{len(jobs)} jobs on {cfg.cluster.gpus} GPUs, load {poisson.get('load')}, "
        f"network model: {cfg.options.network}; target {target:g} s ({target_source})"
    )
    print(
        f"{'scheduler':<22} {'wall s':>7} {'cpu s':>7} {'/target':>7} {'/ideal':>7} "
        f"{'ref/cpu':>7} {'groups':>6} {'events':>9} {'ev/s':>7} {'sim s':>7} "
        f"{'mean x':>6} {'p99 x':>6}"
    )
    for name, r in rows.items():
        ref = r.get("reference")
        for label, row in [(name, r)] + ([(name + " (ref)", ref)] if ref else []):
            rel = f"{row['wall_s'] / base:7.1f}" if base else f"{'-':>7}"
            vs = f"{ref['cpu_s'] / row['cpu_s']:5.1f}x" if ref and row is r else f"{'-':>6}"
            print(
                f"{label:<22} {row['wall_s']:>7.1f} {row['cpu_s']:>7.1f} "
                f"{row['wall_s'] / target:>7.2f} {rel} {vs:>7} {row['network_evaluations']:>6} "
                f"{row['network_events']:>9} {row['events_per_s']:>7.0f} "
                f"{row['network_window_s']:>7.0f} {row['mean_slowdown']:>6.3f} "
                f"{row['p99_slowdown']:>6.3f}"
            )
    slow = [n for n, r in rows.items() if r["wall_s"] > target]
    print(
        f"target {target:g} s ({target_source}): "
        + ("met" if not slow else f"over: {', '.join(slow)}")
    )


if __name__ == "__main__":
    sys.exit(main())
