"""Compile the simulator's numba kernels once into numba's on-disk cache (``__pycache__``
beside the sources), so the first simulation a user or a test runs does not pay ~50 s of
compilation: ``python -m cassini.sim.jit_warmup`` (``make setup`` runs it)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial

#: schedulers whose parts reach every compiled path: max-min, priority classes (crux),
#: progress weights (mltcp; every progress rule takes its path), held slot grids (cassini)
SCHEDULERS = ("themis", "themis+cassini", "themis+crux", "themis+crux+mltcp", "themis+mltcp")
NETWORKS = ("windows", "continuous")


def warm() -> float:
    """Run every part in this process; returns the seconds it took (0.0 without numba).

    The parts simulate a 32-GPU cluster with 24 short jobs through both fluid network
    models under every sharing and timing rule the kernels specialise on (max-min,
    strict priority, progress weights off MLTCP's table, held slot grids), Crux's level
    cut and the advisor's link searches once; the results are thrown away.
    :func:`warm_parallel` runs the three parts in parallel processes."""
    return float(sum(warm_parallel(1).values()))


def _warm_network(network: str) -> None:
    """The tiny simulations through one fluid network model, under every scheduler of
    :data:`SCHEDULERS`."""
    from cassini.sim.engine import run
    from cassini.sim.options import SimOptions
    from cassini.sim.topology import Cluster
    from cassini.sim.workload import load_library, poisson_jobs

    library = load_library()
    cluster = Cluster(racks=4, servers_per_rack=2, gpus_per_server=4, oversubscription=4)
    jobs = poisson_jobs(24, 0.9, cluster.gpus, library, gpus={4: 1, 8: 1, 12: 1}, seed=3)
    for scheduler in SCHEDULERS:
        run(cluster, jobs, library, scheduler, options=SimOptions(network=network), seed=1)


def _warm_advisor() -> None:
    """Crux's level cut and the advisor's link searches."""
    from cassini.sim.network.kernels import load_advisor

    load_advisor()


#: the independent parts (each about 10-20 CPU seconds on the 2-core development machine);
#: each compiles its own kernels, and numba writes each cache file atomically
PARTS: dict[str, Callable[[], None]] = {
    **{network: partial(_warm_network, network) for network in NETWORKS},
    "advisor": _warm_advisor,
}


def _timed(name: str) -> float:
    started = time.perf_counter()
    PARTS[name]()
    return time.perf_counter() - started


def warm_parallel(workers: int | None = None) -> dict[str, float]:
    """Run the parts in up to ``workers`` processes (default: one per core); returns each
    part's seconds (empty without numba)."""
    from cassini.sim.network.rates import AVAILABLE

    if not AVAILABLE:
        return {}
    workers = max(1, min(len(PARTS), workers or os.cpu_count() or 1))
    if workers == 1:
        return {name: _timed(name) for name in PARTS}
    with ProcessPoolExecutor(workers) as pool:
        return dict(zip(PARTS, pool.map(_timed, PARTS), strict=True))


def main() -> int:
    started = time.perf_counter()
    parts = warm_parallel()
    if not parts:
        print("jit_warmup: numba is not installed; nothing to compile", file=sys.stderr)
        return 0
    seconds = time.perf_counter() - started
    each = ", ".join(f"{name} {s:.1f} s" for name, s in parts.items())
    print(f"jit_warmup: simulator kernels compiled and cached in {seconds:.1f} s ({each})",
          file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
