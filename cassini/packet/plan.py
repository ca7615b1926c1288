"""What the packet-level run builds, worked out without ns-3 (pure logic, no I/O): the
fabric's nodes and links at packet-level rates, every job's ring hops with the route
each takes, and the routing entries that pin those routes.

* Nodes: ``host<i>`` for server i and the topology's switch ids; links are the
  topology's (host links and switch-to-switch links), each full duplex at
  ``bps / scale`` bits/s.
* A job on servers s_0 < s_1 < ... (the ring visits them rack by rack, as the fluid
  model's ring does) has hops s_k -> s_{k+1 mod n}; a hop between racks takes
  alternative ``k mod n`` of the n equal-cost ToR-to-ToR paths
  (:meth:`Topology.tor_paths`), k the job's path index from the fluid model's routing
  (``single``: 0; ``ecmp``: the same seeded hash, :func:`ecmp_spine`; ``crux``: Crux's
  least-loaded choice), so both models route every flow the same way.
* Addresses: host i owns ``20.<i/256>.<i%256>.0/24``; ``.1`` is its own, ``.2 + slot``
  one per job on it (its ``slot``-th job, in job order), so that every hop has a
  destination address of its own and per-hop /32 routes can pin it to its path.  Each
  switch has a /24 route per host along a fixed shortest path (the *tree*, for ACKs and
  whatever no /32 pins), and the /32 routes of the hops that cross it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from cassini.errors import InputError
from cassini.sim.parts.routing import crux_paths, ecmp_spine, path_count
from cassini.sim.topologies.clos import from_cluster
from cassini.sim.topologies.fabric import Topology, physical_link
from cassini.sim.topology import Cluster

#: the largest cluster run at packet level (issue 33)
MAX_HOSTS = 128
ROUTINGS = ("single", "ecmp", "crux")


def as_topology(cluster: Cluster | Topology) -> Topology:
    """The fabric of a uniform :class:`Cluster` (two-tier with its spines, or
    three-tier), or ``cluster`` itself; refuses clusters over :data:`MAX_HOSTS` hosts
    and rail-optimised fabrics (several planes)."""
    topo = cluster
    if isinstance(cluster, Cluster):
        topo = from_cluster(cluster)
    if topo.servers > MAX_HOSTS:
        raise InputError(
            "cluster",
            f"too large for packet level ({topo.servers} hosts, at most {MAX_HOSTS}): "
            "use network: windows or continuous",
        )
    if topo.planes != 1:
        raise InputError("cluster", f"{topo.planes} planes (rail-optimised): not at packet level")
    return topo


def host_address(server: int, slot: int | None = None) -> int:
    """Host ``server``'s own address (``slot`` None) or its ``slot``-th job's, as a
    32-bit integer."""
    if not 0 <= server < 65536:
        raise InputError("servers", f"server index {server} out of range")
    last = 1 if slot is None else 2 + slot
    if not 0 < last < 255:
        raise InputError("jobs", f"more than 252 jobs on server {server}")
    return (20 << 24) | (server << 8) | last


def dotted(address: int) -> str:
    return ".".join(str((address >> s) & 255) for s in (24, 16, 8, 0))


@dataclass(frozen=True)
class Hop:
    """One ring hop of a job: ``src`` -> ``dst`` (server indices), its ``nodes`` in
    order (``host<src>`` ... ``host<dst>``), the ``links`` between them and the
    destination ``address`` (32-bit) that its routes pin."""

    job_id: str
    src: int
    dst: int
    nodes: tuple[str, ...]
    links: tuple[str, ...]
    address: int


@dataclass(frozen=True)
class PacketPlan:
    """The fabric at packet-level rates and every job's hops; ``scale``: link rates (and
    the bytes each phase sends) are divided by it, times kept."""

    topology: Topology
    scale: float
    hops: Mapping[str, tuple[Hop, ...]]
    path_index: Mapping[str, int]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(f"host{i}" for i in range(self.topology.servers)) + tuple(
            s.id for s in self.topology.switches
        )

    @cached_property
    def link_bps(self) -> dict[str, float]:
        """Every link id with its packet-level rate (bits/s, each direction)."""
        return {link.id: link.bps / self.scale for link in self.topology.fabric_links}

    @cached_property
    def link_ends(self) -> dict[str, tuple[str, str]]:
        return {link.id: (link.lower, link.upper) for link in self.topology.fabric_links}

    @cached_property
    def tree(self) -> dict[tuple[str, str], str]:
        """(switch, destination ToR) -> the link the switch sends on along a fixed
        shortest path (the neighbour nearest the ToR, lowest id first)."""
        g = self.topology.graph
        out: dict[tuple[str, str], str] = {}
        for tor in {t[0] for t in self.topology.rack_tors}:
            dist = nx.single_source_shortest_path_length(g, tor)
            for sw in g.nodes:
                if sw == tor or sw not in dist:
                    continue
                nxt = min(n for n in g.neighbors(sw) if dist.get(n) == dist[sw] - 1)
                out[(sw, tor)] = g.edges[sw, nxt]["id"]
        return out

    def host_routes(self) -> list[tuple[str, int, str]]:
        """The tree's entries: (switch, host server index, link to send on) for every
        host not directly under the switch."""
        topo = self.topology
        out = []
        for (sw, tor), link in sorted(self.tree.items()):
            rack = next(r for r, t in enumerate(topo.rack_tors) if t[0] == tor)
            out += [(sw, s, link) for s in topo.racks[rack]]
        return out

    def pinned_routes(self) -> list[tuple[str, int, str]]:
        """(switch, destination address, link to send on) for every switch a hop
        crosses before its last ToR (whose subnet route reaches the host)."""
        out = []
        for hops in self.hops.values():
            for hop in hops:
                for node, link in zip(hop.nodes[1:-2], hop.links[1:-1], strict=True):
                    out.append((node, hop.address, link))
        return out


def ring_hops(
    topo: Topology, job_id: str, servers: Sequence[int], path_index: int, slots: Mapping[int, int]
) -> tuple[Hop, ...]:
    """The hops of ``job_id``'s ring over ``servers`` taking path ``path_index``;
    ``slots``: the job's address slot on each of its servers."""
    ring = sorted(set(servers))
    if len(ring) < 2:
        return ()
    ends = {link.id: (link.lower, link.upper) for link in topo.fabric_links}
    out = []
    for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
        ta, tb = topo.rack_tors[topo.rack_of(a)][0], topo.rack_tors[topo.rack_of(b)][0]
        options = topo.tor_paths(ta, tb)
        middle = options[path_index % len(options)]
        nodes, node = [f"host{a}", ta], ta
        middle = tuple(physical_link(d) for d in middle)  # ns-3 routes on the links
        for link in middle:
            lo, up = ends[link]
            node = up if node == lo else lo
            nodes.append(node)
        nodes.append(f"host{b}")
        links = (topo.host_links[a][0], *middle, topo.host_links[b][0])
        out.append(Hop(job_id, a, b, tuple(nodes), links, host_address(b, slots[b])))
    return tuple(out)


def plan(
    cluster: Cluster | Topology,
    placements: Mapping[str, Sequence[int]],
    *,
    scale: float,
    routing: str = "single",
    seed: int = 0,
    peaks_bps: Mapping[str, float] | None = None,
    path_index: Mapping[str, int] | None = None,
) -> PacketPlan:
    """The packet-level plan of jobs (id -> servers, in job order) on ``cluster``.

    ``routing`` picks each job's path index as the fluid model does: ``single`` 0,
    ``ecmp`` the seeded hash of the job id, ``crux`` the least-loaded choice in
    descending ``peaks_bps`` (the jobs' intensity order); ``path_index`` given (job id ->
    index, e.g. the simulator's own choice for each running job) overrides ``routing``.
    ``scale`` > 0 divides every link's rate."""
    if not scale > 0:
        raise InputError("scale", f"must be > 0, got {scale!r}")
    if routing not in ROUTINGS:
        raise InputError("routing", f"must be one of {', '.join(ROUTINGS)}, got {routing!r}")
    topo = as_topology(cluster)
    racks = {j: sorted({topo.rack_of(s) for s in set(sv)}) for j, sv in placements.items()}
    for j, sv in placements.items():
        for s in sv:
            if not 0 <= s < topo.servers:
                raise InputError(f"jobs.{j}", f"no server {s} (cluster has {topo.servers})")
    if path_index is not None:
        index = {j: int(path_index.get(j, 0)) for j in placements}
    elif routing == "ecmp":
        index = {j: ecmp_spine(j, seed, path_count(topo, racks[j])) for j in placements}
    elif routing == "crux":
        peaks = peaks_bps or {}
        order = sorted(placements, key=lambda j: -peaks.get(j, 0.0))
        index = crux_paths(topo, [(j, racks[j], peaks.get(j, 0.0)) for j in order])
    else:
        index = dict.fromkeys(placements, 0)
    taken: dict[int, int] = {}
    hops = {}
    for j, sv in placements.items():
        slots = {}
        for s in sorted(set(sv)):
            slots[s] = taken.get(s, 0)
            taken[s] = slots[s] + 1
        hops[j] = ring_hops(topo, j, sv, index[j], slots)
    return PacketPlan(topo, float(scale), hops, index)
