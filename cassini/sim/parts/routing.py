"""Routing: which equal-cost path each job's traffic takes over a two-tier fabric whose
ToR uplinks are split over ``cluster.spines`` spines (see :class:`~cassini.sim.topology.
Cluster`).  A job is one flow in the network model, so it takes one spine: its traffic
leaves and enters every rack it spans over that spine's uplink (``tor<r>s<k>``).

Entries of :data:`ROUTINGS`:

* ``single`` — one path per rack: the ToR's uplinks act as one link of their summed
  capacity (``tor<r>``), i.e. perfect load balancing (packet spraying); today's model.
* ``ecmp`` — the spine is a seeded hash of the job's id (the 5-tuple hash of a real
  switch, fixed per flow); a hash onto an uplink that already carries traffic while
  another uplink of the same ToR is idle is a *collision* (counted).
* ``crux`` — Crux's path selection: jobs in descending GPU intensity each take the
  least-loaded spine (load = summed peak demand of the jobs already routed, on the
  job's most-loaded uplink, then their sum); the engine re-routes every running
  cross-rack job in that order whenever the set of cross-rack jobs changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cassini.sim.topology import Cluster


def ecmp_spine(job_id: str, seed: int, spines: int) -> int:
    """The spine a seeded ECMP hash sends ``job_id``'s flow to (0 .. spines-1); the same
    for the same (seed, job id) in every process (no Python ``hash``)."""
    digest = hashlib.blake2b(f"{seed}:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % spines


def uplinks(cluster: Cluster, racks: Sequence[int], spine: int) -> list[str]:
    return [cluster.uplink(r, spine) for r in racks]


def path_load(
    cluster: Cluster, racks: Sequence[int], spine: int, load: Mapping[str, float]
) -> tuple[float, float]:
    """(most-loaded uplink, summed load) of the path over ``spine``, bits/s."""
    values = [load.get(link, 0.0) for link in uplinks(cluster, racks, spine)]
    return (max(values, default=0.0), sum(values))


def least_loaded_spine(cluster: Cluster, racks: Sequence[int], load: Mapping[str, float]) -> int:
    """The spine whose uplinks on ``racks`` are least loaded (max, then sum, then index)."""
    return min(range(cluster.spines), key=lambda k: (*path_load(cluster, racks, k, load), k))


def collisions(
    cluster: Cluster, racks: Sequence[int], spine: int, load: Mapping[str, float]
) -> int:
    """Uplinks of ``racks`` where ``spine`` already carries traffic while another
    spine of the same ToR carries none."""
    n = 0
    for r in racks:
        if load.get(cluster.uplink(r, spine), 0.0) > 0 and any(
            load.get(cluster.uplink(r, k), 0.0) <= 0 for k in range(cluster.spines) if k != spine
        ):
            n += 1
    return n


def crux_paths(
    cluster: Cluster,
    jobs: Sequence[tuple[str, Sequence[int], float]],
    load: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """Crux's path selection: ``jobs`` as (job id, racks, peak demand bits/s) in
    descending intensity; each takes the least-loaded spine given the jobs before it
    (and the background ``load``); returns job id -> spine."""
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
    """A routing part: ``spine(cluster, job_id, racks, seed, load)`` picks the spine of a
    new job (None = the aggregate uplink); ``reroutes`` asks the engine to re-route
    every cross-rack job (in descending intensity) when their set changes."""

    spine: Callable[[Cluster, str, Sequence[int], int, Mapping[str, float]], int | None]
    reroutes: bool = False


#: name -> routing.  Add one: a spine function and an entry here.
ROUTINGS: dict[str, Routing] = {
    "single": Routing(lambda cluster, job_id, racks, seed, load: None),
    "ecmp": Routing(
        lambda cluster, job_id, racks, seed, load: ecmp_spine(job_id, seed, cluster.spines)
    ),
    "crux": Routing(
        lambda cluster, job_id, racks, seed, load: least_loaded_spine(cluster, racks, load),
        reroutes=True,
    ),
}
