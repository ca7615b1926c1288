"""Routing: which equal-cost path each job's traffic takes.  A job is one flow in the
network model, so it takes one *path index* k ("spine") for all of its traffic:"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from cassini.sim.topologies.fabric import UP, Route, Topology, directed, physical_link
from cassini.sim.topology import Cluster

#: what routing runs on: the uniform cluster or a general fabric
Fabric = Cluster | Topology


def ecmp_spine(job_id: str, seed: int, spines: int) -> int:
    """The spine a seeded ECMP hash sends ``job_id``'s flow to (0 .. spines-1); the same
    for the same (seed, job id) in every process (no Python ``hash``)."""
    digest = hashlib.blake2b(f"{seed}:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % spines


def _ring_hops(topo: Topology, racks: Sequence[int]) -> list[tuple[str, str]]:
    """The (source ToR, destination ToR) hops of a ring over ``racks``, every plane, in
    the order :meth:`Topology.path_shares` visits them."""
    order = sorted(set(racks), key=lambda r: (topo.rack_pods[r], r))
    if len(order) < 2:
        return []
    return [
        (topo.rack_tors[a][p], topo.rack_tors[b][p])
        for p in range(topo.planes)
        for a, b in zip(order, order[1:] + order[:1], strict=True)
    ]


def topology_route(k: int) -> Route:
    """The ``route`` callback that takes alternative ``k mod n`` of every hop's n paths."""
    return lambda src, dst, options: k % len(options)


def path_count(cluster: Fabric, racks: Sequence[int]) -> int:
    """How many path indices a job spanning ``racks`` can choose from (the spines of a
    ``Cluster``; the most alternatives of any ring hop on a ``Topology``)."""
    if isinstance(cluster, Cluster):
        return cluster.spines
    hops = _ring_hops(cluster, racks)
    return max((len(cluster.tor_paths(a, b)) for a, b in hops), default=1)


def route_path(cluster: Fabric, servers: Iterable[int], spine: int | None) -> tuple[str, ...]:
    """Links a job on ``servers`` crosses over path index ``spine`` (None: the ToRs'
    whole uplinks on a ``Cluster``, the first path of every hop on a ``Topology``)."""
    if isinstance(cluster, Cluster):
        return cluster.path(servers, spine)
    return cluster.path(servers, None if spine is None else topology_route(spine))


def uplinks(cluster: Fabric, racks: Sequence[int], spine: int) -> list[str]:
    """The switch-to-switch links of a job spanning ``racks`` over path index ``spine``."""
    if isinstance(cluster, Cluster):
        return [cluster.uplink(r, spine) for r in racks]
    out: dict[str, None] = {}
    for a, b in _ring_hops(cluster, racks):
        options = cluster.tor_paths(a, b)
        out |= dict.fromkeys(options[spine % len(options)])
    return list(out)


def path_load(
    cluster: Fabric, racks: Sequence[int], spine: int, load: Mapping[str, float]
) -> tuple[float, float]:
    """(most-loaded uplink, summed load) of the path over ``spine``, bits/s."""
    values = [load.get(link, 0.0) for link in uplinks(cluster, racks, spine)]
    return (max(values, default=0.0), sum(values))


def least_loaded_spine(cluster: Fabric, racks: Sequence[int], load: Mapping[str, float]) -> int:
    """The path index whose uplinks on ``racks`` are least loaded (max, then sum, then
    index)."""
    return min(
        range(path_count(cluster, racks)),
        key=lambda k: (*path_load(cluster, racks, k, load), k),
    )


@lru_cache(maxsize=8)
def _lower_switch(topo: Topology) -> dict[str, str]:
    return {link.id: link.lower for link in topo.fabric_links}


def collisions(cluster: Fabric, racks: Sequence[int], spine: int, load: Mapping[str, float]) -> int:
    """Uplinks of the path over ``spine`` that already carry traffic while another
    uplink of the same switch (to another of the job's alternatives) carries none."""
    if isinstance(cluster, Cluster):
        return sum(
            1
            for r in racks
            if load.get(cluster.uplink(r, spine), 0.0) > 0
            and any(
                load.get(cluster.uplink(r, k), 0.0) <= 0
                for k in range(cluster.spines)
                if k != spine
            )
        )
    # per physical link, in the directions the job's path crosses it (each direction is
    # its own resource): busy where those directions carry traffic, a sibling (another
    # link of the same lower switch on an alternative) idle in those directions
    lower = _lower_switch(cluster)

    def crossed(k: int) -> dict[str, set[bool]]:
        out: dict[str, set[bool]] = {}
        for d in uplinks(cluster, racks, k):
            out.setdefault(physical_link(d), set()).add(d.endswith(UP))
        return out

    def carried(link: str, ups: set[bool]) -> float:
        return max(load.get(directed(link, up), 0.0) for up in ups)

    siblings: dict[str, set[str]] = {}
    for k in range(path_count(cluster, racks)):
        for link in crossed(k):
            siblings.setdefault(lower[link], set()).add(link)
    return sum(
        1
        for link, ups in crossed(spine).items()
        if carried(link, ups) > 0
        and any(carried(o, ups) <= 0 for o in siblings[lower[link]] if o != link)
    )


def crux_paths(
    cluster: Fabric,
    jobs: Sequence[tuple[str, Sequence[int], float]],
    load: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """Crux's path selection: ``jobs`` as (job id, racks, peak demand bits/s) in
    descending intensity; each takes the least-loaded path index given the jobs before
    it (and the background ``load``); returns job id -> path index."""
    current = dict(load or {})
    out = {}
    for job_id, racks, peak in jobs:
        k = least_loaded_spine(cluster, racks, current)
        out[job_id] = k
        for link in uplinks(cluster, racks, k):
            current[link] = current.get(link, 0.0) + peak
    return out


@dataclass(frozen=True)
class Routing:
    """A routing part: ``spine(cluster, job_id, racks, seed, load)`` picks the path index
    of a new job (None = the aggregate uplink, or the first paths); ``reroutes`` asks
    the engine to re-route every cross-rack job (in descending intensity) when their
    set changes."""

    spine: Callable[[Fabric, str, Sequence[int], int, Mapping[str, float]], int | None]
    reroutes: bool = False


#: name -> routing.  Add one: a spine function and an entry here.
ROUTINGS: dict[str, Routing] = {
    "single": Routing(lambda cluster, job_id, racks, seed, load: None),
    "ecmp": Routing(
        lambda cluster, job_id, racks, seed, load: ecmp_spine(
            job_id, seed, path_count(cluster, racks)
        )
    ),
    "crux": Routing(
        lambda cluster, job_id, racks, seed, load: least_loaded_spine(cluster, racks, load),
        reroutes=True,
    ),
}
