"""Where a simulation's CPU time goes, by part (issue 31 §2): CASSINI's advice (its link
problems and their searches, the candidates' evaluation), the network groups' windows
(held or free) and the rest, as ``time.process_time`` seconds of one run.

    .venv/bin/python benchmarks/cassini_split.py [--config experiments/configs/sim_1024.yaml] \\
        [--scheduler themis+cassini] [--jobs N]

Each part is timed by a wrapper around its function (a call inside a call of the same
part is counted once); parts nest (the searches are inside the link problems, which are
inside the advice), so the rows do not add up.  The wrappers cost a few percent.
The compiled kernels the run calls (the network model's, CASSINI's searches, Crux's cut)
are loaded, or compiled where numba's cache is cold, before the wrappers go in and the
clock starts: that loading solves small link problems of its own, which would otherwise
count as the run's link problems (a child row larger than its parent).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cassini import advisor, circle
from cassini.errors import InputError
from cassini.files import positive_int
from cassini.sim import engine
from cassini.sim.config import check_schedulers, read_config
from cassini.sim.network import kernels, windows
from cassini.sim.parts import placement

CONFIG = Path(__file__).resolve().parent.parent / "experiments/configs/sim_1024.yaml"

#: (owner, attribute, label) of every timed part, outermost first
PARTS: list[tuple[Any, str, str]] = [
    (placement, "cassini", "advice: placement.cassini (all of it)"),
    (advisor, "advise", "advice: advisor.advise"),
    (advisor, "_solve_all", "advice: link problems (advisor._solve_all)"),
    (circle, "compatibility_score", "advice: link problems solved (compatibility_score)"),
    (circle, "_coordinate_descent", "  search: coordinate descent"),
    (circle, "_centre", "  search: centring"),
    (circle, "_exact", "  search: exact (branch and bound)"),
    (circle, "unified_period", "  unified period"),
    (circle, "demand_vectors", "  demand vectors"),
    (advisor, "_evaluate", "advice: candidates evaluated (affinity graph, Algorithm 1)"),
    (windows.WindowNetwork, "update", "network: groups re-evaluated (WindowNetwork.update)"),
    (windows.WindowNetwork, "_held", "network: held groups (WindowNetwork._held)"),
    (windows, "simulate", "network: windows simulated (fluid.simulate)"),
]


def timed_parts() -> tuple[dict[str, float], Counter]:
    """Wrap every part of :data:`PARTS` in place; returns the seconds and call counts
    they fill."""
    seconds: dict[str, float] = defaultdict(float)
    calls: Counter = Counter()
    depth: Counter = Counter()

    def wrapped(f: Callable, label: str) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if depth[label]:
                return f(*args, **kwargs)
            depth[label] += 1
            start = time.process_time()
            try:
                return f(*args, **kwargs)
            finally:
                seconds[label] += time.process_time() - start
                calls[label] += 1
                depth[label] -= 1

        return timed

    for owner, name, label in PARTS:
        setattr(owner, name, wrapped(getattr(owner, name), label))
    placement.PLACEMENTS["cassini"] = placement.cassini
    placement.advise = advisor.advise
    advisor.compatibility_score = circle.compatibility_score
    return seconds, calls


def split(cfg, jobs, library, scheduler: str) -> tuple[float, dict, Counter, Any]:
    """One run of ``scheduler``, its parts timed: (CPU seconds of the whole run, seconds
    and calls per part, the run's result).  The kernels are loaded first, untimed and
    before the wrappers go in (``Simulation.run`` would load them inside the timed run,
    through the very functions timed as link problems)."""
    kernels.load_kernels(cfg.options.network, advisor=True)
    seconds, calls = timed_parts()
    advisor.clear_link_cache()
    sim = engine.Simulation(
        cfg.cluster,
        jobs,
        library,
        scheduler,
        n_candidates=cfg.candidates,
        seed=cfg.seed,
        options=cfg.options,
    )
    start = time.process_time()
    result = sim.run()
    return time.process_time() - start, seconds, calls, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config",
        default=str(CONFIG),
        help="simulation config (default experiments/configs/sim_1024.yaml)",
    )
    parser.add_argument(
        "--scheduler", default="themis+cassini", help="the scheduler run (default themis+cassini)"
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        help="override the number of jobs of the config's poisson workload, >= 1",
    )
    args = parser.parse_args(argv)
    try:
        check_schedulers((args.scheduler,), "--scheduler")
    except InputError as e:
        parser.error(f"argument --scheduler: {e.problem}")
    try:
        cfg = read_config(args.config)
    except InputError as e:
        parser.error(f"argument --config: {e}")
    if args.jobs is not None:
        if cfg.poisson is None:
            parser.error(f"argument --jobs: config {args.config} has no poisson workload")
        cfg = replace(cfg, poisson={**cfg.poisson, "jobs": args.jobs})
    try:
        library = cfg.library()
        jobs = cfg.jobs(library)
    except InputError as e:
        parser.error(f"argument --config: {e}")
    total, seconds, calls, result = split(cfg, jobs, library, args.scheduler)
    print(f"{args.scheduler} on {Path(args.config).name}: {total:.2f} s CPU")
    for _, _, label in PARTS:
        if calls[label]:
            share = 100 * seconds[label] / total
            print(f"{seconds[label]:8.2f} s {share:5.1f} %  {calls[label]:6d} calls  {label}")
    s = result.summary()
    print(f"mean / p99 slowdown {s['mean_slowdown']:.4f} / {s['p99_slowdown']:.4f}")


if __name__ == "__main__":
    main()
