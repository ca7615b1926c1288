"""Compile the simulator's numba kernels once and leave them in numba's on-disk cache
(``__pycache__`` beside the sources), so the first simulation a user or a test runs does
not pay ~40 s of compilation: ``python -m cassini.sim.jit_warmup`` (``make setup`` runs it).

It simulates a 32-GPU cluster with 24 short jobs through both fluid network models under
every sharing and timing rule the kernels specialise on (max-min, strict priority, MLTCP
weights, held slot grids), Crux's level cut and the advisor's link searches once; the
results are thrown away.  Without numba it does nothing."""

from __future__ import annotations

import sys
import time

#: schedulers whose parts reach every compiled path: max-min, priority classes (crux),
#: MLTCP weights, held slot grids (cassini)
SCHEDULERS = ("themis", "themis+cassini", "themis+crux", "themis+crux+mltcp", "themis+mltcp")
NETWORKS = ("windows", "continuous")


def warm() -> float:
    """Run the tiny simulations; returns the seconds it took (0.0 without numba)."""
    from cassini.sim.network.rates import AVAILABLE

    if not AVAILABLE:
        return 0.0
    from cassini.sim.engine import run
    from cassini.sim.options import SimOptions
    from cassini.sim.topology import Cluster
    from cassini.sim.workload import load_library, poisson_jobs

    started = time.perf_counter()
    library = load_library()
    cluster = Cluster(racks=4, servers_per_rack=2, gpus_per_server=4, oversubscription=4)
    jobs = poisson_jobs(24, 0.9, cluster.gpus, library, gpus={4: 1, 8: 1, 12: 1}, seed=3)
    for network in NETWORKS:
        for scheduler in SCHEDULERS:
            run(cluster, jobs, library, scheduler, options=SimOptions(network=network), seed=1)
    _warm_priority_cut()
    _warm_link_search()
    return time.perf_counter() - started


def _warm_link_search() -> None:
    """The advisor's compiled searches (``cassini.circle_compiled``): a small cluster's
    links rarely hold enough jobs for the descent."""
    from cassini.circle import warm_compiled

    warm_compiled()


def _warm_priority_cut() -> None:
    """Crux's level cut compiles only past k jobs in one contention group: five jobs in a
    ring of contention edges, cut into two levels."""
    import numpy as np

    from cassini.priority import max_k_cut_levels

    names = [f"j{i}" for i in range(5)]
    edges = {(names[i], names[(i + 1) % 5]): float(i + 1) for i in range(5)}
    priority = {n: float(i) for i, n in enumerate(names)}
    max_k_cut_levels(priority, edges, 2, np.random.default_rng(0), orders=2)


def main() -> int:
    seconds = warm()
    print(f"jit_warmup: simulator kernels compiled and cached in {seconds:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
