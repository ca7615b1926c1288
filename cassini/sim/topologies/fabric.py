"""A GPU cluster's fabric as built: hosts in racks of any size under ToR switches, up to
three switch tiers, per-link capacities, and the equal-cost paths between racks."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx

from cassini.errors import InputError

#: ``route(src_tor, dst_tor, alternatives) -> index`` picks one of the equal-cost paths
#: (each a tuple of directed link ids) for a ring hop between two ToRs (switch ids).
Route = Callable[[str, str, tuple[tuple[str, ...], ...]], int]
#: A switch-to-switch link is two resources of the network model, one per direction:
#: ``<link id>:up`` (from its lower switch) and ``<link id>:down``.  A server's link is
#: one (every job on a server both sends and receives on it).
UP, DOWN = ":up", ":down"


def directed(link_id: str, up: bool) -> str:
    """The id of ``link_id``'s direction: up (from its lower end) or down."""
    return link_id + (UP if up else DOWN)


def physical_link(resource_id: str) -> str:
    """The link id a resource id names (a switch link's direction, or a server link)."""
    for suffix in (UP, DOWN):
        if resource_id.endswith(suffix):
            return resource_id[: -len(suffix)]
    return resource_id


@dataclass(frozen=True)
class Switch:
    """A switch: ``id`` (``tor3``), ``tier`` (``tor``, ``agg``, ``core`` or ``spine``) and
    ``name`` as the source calls it (a host table's full path, ``G6/P10/S14``)."""

    id: str
    tier: str
    name: str


@dataclass(frozen=True)
class Link:
    """A full-duplex link between ``lower`` and ``upper`` (switch ids, or ``host<i>`` for
    server i) of ``bps`` bits/s in each direction."""

    id: str
    lower: str
    upper: str
    bps: float


@dataclass(frozen=True, eq=False)
class Topology:
    """A cluster fabric; see the module docstring for the model.  Build one with the
    generators and readers in :mod:`cassini.sim.topologies`, not by hand."""

    kind: str
    hosts: tuple[str, ...]
    gpus_per_host: tuple[int, ...]
    racks: tuple[tuple[int, ...], ...]
    rack_pods: tuple[int, ...]
    tiers: tuple[str, ...]
    switches: tuple[Switch, ...]
    rack_tors: tuple[tuple[str, ...], ...]
    host_links: tuple[tuple[str, ...], ...]
    fabric_links: tuple[Link, ...]
    source: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.hosts)
        if n == 0:
            raise InputError("hosts", "a topology needs at least one host")
        if len(set(self.hosts)) != n:
            dup = next(h for h, c in Counter(self.hosts).items() if c > 1)
            raise InputError("hosts", f"host {dup!r} appears twice")
        if len(self.gpus_per_host) != n or any(g < 1 for g in self.gpus_per_host):
            raise InputError("gpus_per_host", "needs one count >= 1 per host")
        if [s for r in self.racks for s in r] != list(range(n)):
            raise InputError("racks", "must hold servers 0..n-1 in order, each once")
        if any(not r for r in self.racks):
            raise InputError("racks", "a rack must hold at least one server")
        if len(self.rack_pods) != len(self.racks) or len(self.rack_tors) != len(self.racks):
            raise InputError("racks", "needs one pod and one ToR per plane for every rack")
        planes = len(self.rack_tors[0])
        if planes < 1 or any(len(t) != planes for t in self.rack_tors):
            raise InputError("rack_tors", "every rack needs one ToR in each plane")
        if len(self.host_links) != n or any(len(h) != planes for h in self.host_links):
            raise InputError("host_links", "every server needs one link in each plane")
        ids = [link.id for link in self.fabric_links]
        if len(set(ids)) != len(ids):
            dup = next(i for i, c in Counter(ids).items() if c > 1)
            raise InputError("links", f"link {dup!r} appears twice")
        known = {s.id for s in self.switches}
        if len(known) != len(self.switches):
            raise InputError("switches", "switch ids must be unique")
        for link in self.fabric_links:
            if not link.bps > 0:
                raise InputError(f"links.{link.id}", f"capacity must be > 0, got {link.bps}")
            if link.upper not in known or not (
                link.lower in known or link.lower.startswith("host")
            ):
                raise InputError(f"links.{link.id}", "joins an unknown switch")

    # -- sizes ----------------------------------------------------------------------------
    @property
    def servers(self) -> int:
        return len(self.hosts)

    @property
    def gpus(self) -> int:
        return sum(self.gpus_per_host)

    @property
    def gpus_per_server(self) -> int:
        """The GPUs of every server; InputError when servers differ (then use
        ``gpus_per_host``)."""
        counts = set(self.gpus_per_host)
        if len(counts) != 1:
            raise InputError(
                "gpus_per_server",
                f"servers have different GPU counts ({sorted(counts)}); use gpus_per_host",
            )
        return counts.pop()

    @property
    def servers_per_rack(self) -> int:
        """The servers of every rack; InputError when racks differ in size."""
        sizes = {len(r) for r in self.racks}
        if len(sizes) != 1:
            raise InputError("servers_per_rack", f"racks have different sizes ({sorted(sizes)})")
        return sizes.pop()

    @property
    def planes(self) -> int:
        """Links per server (1, or the rail count of a rail-optimised fabric)."""
        return len(self.rack_tors[0])

    @property
    def pods(self) -> int:
        return max(self.rack_pods) + 1

    @cached_property
    def _rack_of(self) -> tuple[int, ...]:
        return tuple(r for r, members in enumerate(self.racks) for _ in members)

    def rack_of(self, server: int) -> int:
        return self._rack_of[server]

    def pod_of(self, server: int) -> int:
        return self.rack_pods[self._rack_of[server]]

    def host_index(self, name: str) -> int:
        """The server index of host ``name`` (as the source names it)."""
        try:
            return self._host_index[name]
        except KeyError:
            raise InputError("host", f"no host {name!r} in this topology") from None

    @cached_property
    def _host_index(self) -> dict[str, int]:
        return {h: i for i, h in enumerate(self.hosts)}

    # -- switches and links ---------------------------------------------------------------
    @cached_property
    def links(self) -> dict[str, float]:
        """Every link id with its capacity as the simulator's network model sees it, in
        bits/s of a job's full rate: the physical capacity (``fabric_links``, each
        direction) times ``planes``.  Every job puts ``1 / planes`` of its rate on each
        link of its route (:meth:`path_shares`), so a link of C bits/s is, for all of
        them alike, a link of ``C * planes`` carrying their full rates; with one plane
        these are the physical capacities.  A switch-to-switch link appears once per
        direction (:func:`directed`), a server's link once."""
        return {
            rid: float(link.bps) * self.planes
            for link in self.fabric_links
            for rid in self._resource_ids(link)
        }

    def _resource_ids(self, link: Link) -> tuple[str, ...]:
        if link.lower in self.graph:  # between two switches: one resource per direction
            return directed(link.id, True), directed(link.id, False)
        return (link.id,)

    @cached_property
    def link_bps(self) -> dict[str, float]:
        """Every link id, and every direction's id of a switch-to-switch link, with its
        physical capacity in bits/s (each direction)."""
        out = {link.id: float(link.bps) for link in self.fabric_links}
        for link in self.fabric_links:
            out |= dict.fromkeys(self._resource_ids(link), float(link.bps))
        return out

    @property
    def rack_servers(self) -> tuple[range, ...]:
        """Every rack's servers as a range of indices (racks are contiguous)."""
        return tuple(range(r[0], r[-1] + 1) for r in self.racks)

    def switches_in(self, tier: str) -> tuple[Switch, ...]:
        return tuple(s for s in self.switches if s.tier == tier)

    @cached_property
    def uplink_bps(self) -> dict[str, float]:
        """Summed uplink capacity of every switch (bits/s); 0 for the top tier."""
        out = {s.id: 0.0 for s in self.switches}
        for link in self.fabric_links:
            if link.lower in out:
                out[link.lower] += link.bps
        return out

    @cached_property
    def downlink_bps(self) -> dict[str, float]:
        """Summed capacity of every switch's links to the tier below (bits/s)."""
        out = {s.id: 0.0 for s in self.switches}
        for link in self.fabric_links:
            out[link.upper] += link.bps
        return out

    def oversubscription(self, switch: str) -> float | None:
        """Downlink over uplink capacity of ``switch``; None for the top tier."""
        up = self.uplink_bps[switch]
        return self.downlink_bps[switch] / up if up else None

    @cached_property
    def graph(self) -> nx.Graph:
        """The switches (nodes, with ``tier``) and the links between them (edges, with
        ``id`` and ``bps``); server links are not in it."""
        g = nx.Graph()
        for s in self.switches:
            g.add_node(s.id, tier=s.tier)
        for link in self.fabric_links:
            if link.lower in g:
                g.add_edge(link.lower, link.upper, id=link.id, bps=link.bps, lower=link.lower)
        return g

    @cached_property
    def _paths(self) -> dict[tuple[str, str], tuple[tuple[str, ...], ...]]:
        return {}

    def paths(self, src_rack: int, dst_rack: int, plane: int = 0) -> tuple[tuple[str, ...], ...]:
        """The equal-cost (fewest-hop) paths from ``src_rack``'s ToR to ``dst_rack``'s in
        ``plane``, each as the directed link ids it crosses (:func:`directed`), in the
        order of their link ids; ``((),)`` within one rack."""
        return self.tor_paths(self.rack_tors[src_rack][plane], self.rack_tors[dst_rack][plane])

    def tor_paths(self, src: str, dst: str) -> tuple[tuple[str, ...], ...]:
        """The equal-cost paths between two switches (ids), as in :meth:`paths`."""
        key = (src, dst)
        if key not in self._paths:
            if src == dst:
                self._paths[key] = ((),)
            else:
                g = self.graph
                try:
                    routes = nx.all_shortest_paths(g, src, dst)
                    hops = [
                        [(g.edges[a, b]["id"], g.edges[a, b]["lower"] == a)
                         for a, b in itertools.pairwise(nodes)]
                        for nodes in routes
                    ]  # fmt: skip
                except nx.NetworkXNoPath:
                    raise InputError("topology", f"no path from {src} to {dst}") from None
                hops.sort(key=lambda path: [link for link, _ in path])
                self._paths[key] = tuple(tuple(directed(*h) for h in path) for path in hops)
        return self._paths[key]

    def path_shares(self, servers: Iterable[int], route: Route | None = None) -> dict[str, float]:
        """Each link a ring job on ``servers`` (indices) crosses, with the share of the
        job's rate it carries (``1 / planes``); empty for one server."""
        used = sorted(set(servers))
        for s in used:
            if not 0 <= s < self.servers:
                raise InputError("servers", f"no server {s} (cluster has {self.servers})")
        if len(used) < 2:
            return {}
        share = 1.0 / self.planes
        out = {link: share for s in used for link in self.host_links[s]}
        racks = sorted({self._rack_of[s] for s in used}, key=lambda r: (self.rack_pods[r], r))
        if len(racks) > 1:
            for plane in range(self.planes):
                for a, b in zip(racks, racks[1:] + racks[:1], strict=True):
                    src, dst = self.rack_tors[a][plane], self.rack_tors[b][plane]
                    options = self.tor_paths(src, dst)
                    pick = 0 if route is None else route(src, dst, options)
                    out |= {link: share for link in options[pick]}
        return out

    def path(self, servers: Iterable[int], route: Route | None = None) -> tuple[str, ...]:
        """Links a job's ring crosses when it runs on ``servers`` (server indices)."""
        return tuple(self.path_shares(servers, route))

    # -- summaries and JSON ---------------------------------------------------------------
    def rack_sizes(self) -> Counter[int]:
        """How many racks hold each number of servers."""
        return Counter(len(r) for r in self.racks)

    def repeated_tor_names(self) -> dict[str, int]:
        """Source ToR names (last part of the path) used by more than one ToR."""
        short = Counter(s.name.rsplit("/", 1)[-1] for s in self.switches_in("tor"))
        return {name: c for name, c in sorted(short.items()) if c > 1}

    def to_dict(self) -> dict[str, Any]:
        """The configuration form that rebuilds this topology (``cluster:`` in a config)."""
        return dict(self.source)


class FabricBuilder:
    """Collects hosts, racks, switches and links, then makes a :class:`Topology`."""

    def __init__(self, tiers: tuple[str, ...], planes: int = 1) -> None:
        self.tiers = tiers
        self.planes = planes
        self.hosts: list[str] = []
        self.gpus: list[int] = []
        self.racks: list[tuple[int, ...]] = []
        self.rack_pods: list[int] = []
        self.rack_tors: list[tuple[str, ...]] = []
        self.host_links: list[tuple[str, ...]] = []
        self.switches: dict[str, Switch] = {}
        self.links: list[Link] = []
        self.counts: defaultdict[str, int] = defaultdict(int)

    def switch(self, tier: str, name: str | None = None) -> str:
        """Add a switch of ``tier``; returns its id (``<tier><n>``)."""
        sid = f"{tier}{self.counts[tier]}"
        self.counts[tier] += 1
        self.switches[sid] = Switch(sid, tier, name if name is not None else sid)
        return sid

    def link(self, lower: str, upper: str, bps: float) -> str:
        lid = f"{lower}-{upper}"
        self.links.append(Link(lid, lower, upper, float(bps)))
        return lid

    def rack(
        self,
        hosts: Iterable[tuple[str, int]],
        tors: tuple[str, ...],
        pod: int,
        host_bps: float | Iterable[float],
    ) -> int:
        """Add a rack of ``(name, gpus)`` hosts, each linked to every ToR in ``tors`` (one
        per plane) at ``host_bps`` (one value, or one per host); returns its index."""
        members = list(hosts)
        speeds = (
            [float(host_bps)] * len(members)
            if isinstance(host_bps, int | float)
            else [float(b) for b in host_bps]
        )
        first = len(self.hosts)
        for k, ((name, gpus), bps) in enumerate(zip(members, speeds, strict=True)):
            i = first + k
            self.hosts.append(name)
            self.gpus.append(gpus)
            ids = []
            for p, tor in enumerate(tors):
                lid = f"srv{i}" if len(tors) == 1 else f"srv{i}.{p}"
                self.links.append(Link(lid, f"host{i}", tor, bps))
                ids.append(lid)
            self.host_links.append(tuple(ids))
        self.racks.append(tuple(range(first, len(self.hosts))))
        self.rack_pods.append(pod)
        self.rack_tors.append(tuple(tors))
        return len(self.racks) - 1

    def build(self, kind: str, source: Mapping[str, Any]) -> Topology:
        order = {t: k for k, t in enumerate(self.tiers)}
        return Topology(
            kind=kind,
            hosts=tuple(self.hosts),
            gpus_per_host=tuple(self.gpus),
            racks=tuple(self.racks),
            rack_pods=tuple(self.rack_pods),
            tiers=self.tiers,
            switches=tuple(sorted(self.switches.values(), key=lambda s: order[s.tier])),
            rack_tors=tuple(self.rack_tors),
            host_links=tuple(self.host_links),
            fabric_links=tuple(self.links),
            source=dict(source),
        )
