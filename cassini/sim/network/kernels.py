"""Loads the compiled kernels a simulation calls into this process before its clock starts,
each by a tiny problem outside any simulation (``python -m cassini.sim.jit_warmup``
compiles them all into numba's cache)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

#: the kernel groups :func:`load_kernels` loaded in this process
_LOADED: set[str] = set()


def load_kernels(network: str | None, *, advisor: bool = False) -> None:
    """Load, once per process, the compiled kernels a simulation calls (from numba's
    cache; compiled where it is cold): those of the ``network`` model (``windows``'
    fluid window, ``continuous``' flow state; another name or None has none) and, with
    ``advisor``, CASSINI's searches and Crux's cut.  Each is called on a tiny problem of
    its own, with no effect on any simulation; the engine calls this before a run's
    clock starts, so the first scheduler's ``wall_s`` does not carry the loading."""
    from cassini.sim.network.rates import AVAILABLE

    if not AVAILABLE:
        return
    wanted = ({network} & {"windows", "continuous"}) | ({"advisor"} if advisor else set())
    for part in sorted(wanted - _LOADED):
        _LOADED.add(part)
        _LOADERS[part]()


def load_network(network: str) -> None:
    """Two library profiles sharing one link through one fluid model's kernels
    (``windows`` or ``continuous``)."""
    from cassini.sim.network.flows import FlowJob, cycle_of
    from cassini.sim.workload import load_library

    library = load_library()
    profiles = [library[m] for m in sorted(library) if library[m].phases][:2]
    if network == "continuous":
        from cassini.sim.network.flowstate import load_kernels as load_state

        load_state([cycle_of(p) for p in profiles])
        return
    from cassini.sim.network.fluid import simulate

    jobs = [FlowJob(f"warm-{k}", p, ("link",), 0.0) for k, p in enumerate(profiles)]
    simulate(jobs, {"link": 1e10}, horizon_s=2 * max(p.iteration_time_s for p in profiles))


def load_advisor() -> None:
    """Crux's level cut and the advisor's link searches."""
    _load_priority_cut()
    _load_link_search()


def _load_link_search() -> None:
    """The advisor's compiled searches (``cassini.circle_compiled``): a small cluster's
    links rarely hold enough jobs for the descent."""
    from cassini.circle import warm_compiled

    warm_compiled()


def _load_priority_cut() -> None:
    """Crux's level cut compiles only past k jobs in one contention group: five jobs in a
    ring of contention edges, cut into two levels."""
    import numpy as np

    from cassini.priority import max_k_cut_levels

    names = [f"j{i}" for i in range(5)]
    edges = {(names[i], names[(i + 1) % 5]): float(i + 1) for i in range(5)}
    priority = {n: float(i) for i, n in enumerate(names)}
    max_k_cut_levels(priority, edges, 2, np.random.default_rng(0), orders=2)


_LOADERS: dict[str, Callable[[], None]] = {
    "windows": partial(load_network, "windows"),
    "continuous": partial(load_network, "continuous"),
    "advisor": load_advisor,
}
