"""Placements: which of the candidate placements a job takes, and whether running jobs
are later migrated to de-fragment the cluster."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from cassini.advisor import Candidate, Link, advise
from cassini.profile import JobProfile
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster

if TYPE_CHECKING:
    from cassini.sim.state import ClusterState

#: what the placements run on: the uniform cluster or a general fabric
Fabric = Cluster | Topology


@dataclass(frozen=True)
class Choice:
    """A placement's answer: the chosen ``placement`` (server -> GPUs), time-shifts
    (job id -> seconds) and whether CASSINI's advisor was asked (the engine counts)."""

    placement: dict[int, int]
    shifts: dict[str, float] = field(default_factory=dict)
    advised: bool = False


Placement = Callable[["ClusterState", JobProfile, list[dict[int, int]]], Choice]


def candidate_placements(
    cluster: Fabric,
    free: np.ndarray,
    gpus: int,
    n_candidates: int,
    rng: np.random.Generator,
) -> list[dict[int, int]]:
    """Up to ``n_candidates`` distinct placements ``{server: gpus}`` of ``gpus`` GPUs on
    the free GPUs ``free`` (one count per server); empty when they do not fit.  Racks
    are ``cluster.rack_servers`` (ranges of server indices, of any size).

    The first is packed (one server if one has room; else the racks with the most free
    GPUs first, inside a rack the fullest servers first); then packings that start from
    other racks; then random picks of servers with free GPUs."""
    if gpus > int(free.sum()):
        return []
    fit = np.flatnonzero(free >= gpus)
    if len(fit):  # fits on one server: best fit, no network at all
        best = fit[np.argmin(free[fit])]
        return [{int(best): gpus}]
    racks = cluster.rack_servers
    rack_free = rack_sums(racks, free)
    rack_order = [int(r) for r in np.argsort(-rack_free, kind="stable") if rack_free[r] > 0]
    out: list[dict[int, int]] = []
    seen: set[tuple[tuple[int, int], ...]] = set()

    def add(placement: dict[int, int] | None) -> None:
        if placement is None:
            return
        key = tuple(sorted(placement.items()))
        if key not in seen:
            seen.add(key)
            out.append(placement)

    for first in rack_order:
        if len(out) >= n_candidates:
            return out
        add(_pack(free, racks, [first] + [r for r in rack_order if r != first], gpus))
    servers = np.flatnonzero(free > 0)
    for _ in range(4 * n_candidates):
        if len(out) >= n_candidates:
            break
        placement, need = {}, gpus
        for s in rng.permutation(servers):
            take = int(min(free[s], need))
            placement[int(s)] = take
            need -= take
            if need == 0:
                break
        add(placement)
    return out


def rack_sums(racks: Sequence[range], values: np.ndarray) -> np.ndarray:
    """``values`` (one per server) summed over each rack (``racks``: contiguous ranges
    of server indices in order, as ``rack_servers`` gives them)."""
    return np.add.reduceat(values, [r.start for r in racks])


def _pack(
    free: np.ndarray, rack_servers: Sequence[range], racks: list[int], gpus: int
) -> dict[int, int] | None:
    placement, need = {}, gpus
    for r in racks:
        for s in sorted(rack_servers[r], key=lambda s: (-free[s], s)):
            if need == 0:
                return placement
            take = int(min(free[s], need))
            if take:
                placement[s] = take
                need -= take
    return placement if need == 0 else None


# -- defragmentation ----------------------------------------------------------------------
def racks_needed(cluster: Fabric, gpus: int) -> int:
    """Fewest racks that can hold ``gpus`` GPUs (the largest racks first)."""
    return int(np.searchsorted(_rack_capacity(cluster), gpus)) + 1


@lru_cache(maxsize=8)
def _rack_capacity(cluster: Fabric) -> np.ndarray:
    """GPUs in the largest racks, summed (the first k racks for each k); computed once
    per cluster (the defragmenter asks for every running job at every event).  A
    :class:`Cluster` hashes by its few sizes, a :class:`Topology` by identity; the
    cache keeps the last few alive, not every cluster a sweep built."""
    gpus = rack_sums(cluster.rack_servers, np.asarray(cluster.gpus_per_host))
    out = np.cumsum(np.sort(gpus)[::-1])
    out.flags.writeable = False  # shared by every caller
    return out


def is_compact(cluster: Fabric, placement: dict[int, int]) -> bool:
    """Whether ``placement`` spans no more racks than its GPUs need (no move can bring
    it into fewer)."""
    racks = len({cluster.rack_of(s) for s in placement})
    return racks <= racks_needed(cluster, sum(placement.values()))


def defrag_move(
    cluster: Fabric, free: np.ndarray, placement: dict[int, int]
) -> tuple[dict[int, int], int] | None:
    """MonkeyTree-style move of one running job: with its own GPUs given back, the packed
    placement over the racks with the most free GPUs; returned with the number of
    workers (GPUs) that change server, when it spans fewer racks than ``placement``
    does; None when no move brings the job into fewer racks."""
    if is_compact(cluster, placement):
        return None
    racks_now = len({cluster.rack_of(s) for s in placement})
    gpus = sum(placement.values())
    freed = free.copy()
    for s, g in placement.items():
        freed[s] += g
    racks = cluster.rack_servers
    rack_free = rack_sums(racks, freed)
    own = np.zeros(len(racks), int)
    for s, g in placement.items():
        own[cluster.rack_of(s)] += g
    # most free GPUs first; among equals the racks the job is already on (fewer moves)
    order = [int(r) for r in np.lexsort((-own, -rack_free)) if rack_free[r] > 0]
    new = _pack(freed, racks, order, gpus)
    if new is None or len({cluster.rack_of(s) for s in new}) >= racks_now:
        return None
    moved = sum(max(0, g - placement.get(s, 0)) for s, g in new.items())
    return new, moved


# -- the table ----------------------------------------------------------------------------
def packed(sim: ClusterState, job: JobProfile, options: list[dict[int, int]]) -> Choice:
    return Choice(options[0])


def random(sim: ClusterState, job: JobProfile, options: list[dict[int, int]]) -> Choice:
    return Choice(options[int(sim.rng.integers(len(options)))])


def cassini(sim: ClusterState, job: JobProfile, options: list[dict[int, int]]) -> Choice:
    """CASSINI's choice among the candidates, on the links that could congest."""
    job_id, profile = job.job_id, job
    peak = profile.peak_rate_bps
    paths = [
        [link for link in sim.route_candidate(job_id, p) if sim.coupling(link, peak)]
        for p in options
    ]
    seeds = {j for path in paths for link in path for j in sim.on_link.get(link, ())}
    limit = sim.scheduler.timing.group_limit
    group = sim.component(seeds, limit=limit)  # all of it when small
    if not group:
        return Choice(options[0])
    near: set[str] | None = None
    if len(group) > limit:
        # a group this large will not be held to shifts anyway: advise on the links the
        # new job may share only, with the jobs on them
        group = seeds
        near = {link for path in paths for link in path}
    jobs: dict[str, Any] = {j: sim.running[j].profile for j in group} | {job_id: profile}
    base = {
        j: tuple(
            link
            for link in sim.running[j].path
            if sim.coupling(link) and (near is None or link in near)
        )
        for j in group
    }
    # a candidate whose paths equal an earlier one's scores the same and ranks after it
    # (ties keep the scheduler's order): only the first of each is asked about
    first_of: dict[tuple[str, ...], int] = {}
    for i, path in enumerate(paths):
        first_of.setdefault(tuple(path), i)
    candidates = [Candidate(str(i), base | {job_id: path}) for path, i in first_of.items()]
    links = {link for c in candidates for p in c.paths.values() for link in p}
    if not links:
        return Choice(options[0])
    capacity = sim.cluster.links
    advice = advise(  # the advisor itself: the sim's inputs need none of the plugin's checks
        [Link(link, capacity[link]) for link in sorted(links)],
        jobs,
        candidates,
        sim.precision_deg,
        loops="score",
        workers=1,
        repair=False,
        predict="none",  # predictions are not used here: not computed
    )
    if advice.best is None:  # every candidate rejected: never with loops="score"
        return Choice(options[0], {}, advised=True)
    return Choice(options[int(advice.best)], dict(advice.time_shifts_s), advised=True)


#: name -> placement.  ``defrag`` places packed; the engine migrates (see defrag_move).
PLACEMENTS: dict[str, Placement] = {
    "packed": packed,
    "random": random,
    "cassini": cassini,
    "defrag": packed,
}
#: old names still accepted
PLACEMENT_ALIASES = {"first": "packed"}
