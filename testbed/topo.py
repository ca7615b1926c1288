"""Cluster topologies as plain descriptions: hosts, switches, links with capacities (bits/s)
and a deterministic route between any two hosts, so the advisor and the testbed speak
about the same links.

Links are full duplex; each direction is its own advisor link, a :class:`LinkDirection`
whose text ``a->b`` is the advisor's link id and the key in results files.  Switch
names start with ``tb`` so that ``testbed cleanup`` can tell our bridges and interfaces
from anyone else's.

- :func:`dumbbell` — ``pairs`` host pairs: ``h1..hn`` on switch ``tbs1``, ``hn+1..h2n`` on
  ``tbs2``, one bottleneck ``tbs1 <-> tbs2``.
- :func:`leaf_spine` — ``leaves`` leaf switches ``tbl1..``, ``spines`` spine switches
  ``tbp1..``, ``hosts_per_leaf`` hosts on each leaf; uplink capacity set by the
  oversubscription.  ``routing`` picks the spine a flow to another leaf crosses:
  ``fixed`` (to host ``h<i>``: spine ``tbp{(i - 1) mod spines + 1}``), ``hash`` (ECMP: a keyed
  hash of the flow, seeded by ``ecmp_seed``, as a switch's 5-tuple hash; :func:`ecmp_spine`)
  or ``path`` (path selection: each job's flows placed on the least-loaded spine,
  :func:`select_paths`, applied when the config's jobs are known).  Linux bridges forward
  by destination MAC, so a flow here is (source leaf, destination host): every switch
  entry is one static forwarding entry and every path is known to the advisor.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cassini.errors import InputError
from cassini.schema import integer, number
from testbed.fabric import FABRICS, Fabric


class LinkDirection(str):
    """One direction of a full-duplex link, from node ``src`` to node ``dst``.  It is its
    text ``"src->dst"`` (so it serves as the advisor's link id and a JSON key as is) and
    knows its ends; :meth:`parse` reads the text back."""

    __slots__ = ()
    ARROW = "->"

    def __new__(cls, src: str, dst: str) -> LinkDirection:
        if cls.ARROW in src or cls.ARROW in dst:
            raise ValueError(f"node names must not contain {cls.ARROW!r}: {src!r}, {dst!r}")
        return super().__new__(cls, f"{src}{cls.ARROW}{dst}")

    def __getnewargs__(self) -> tuple[str, str]:  # copy and pickle rebuild from the ends
        return (self.src, self.dst)

    @property
    def src(self) -> str:
        return self.partition(self.ARROW)[0]

    @property
    def dst(self) -> str:
        return self.partition(self.ARROW)[2]

    @classmethod
    def parse(cls, text: str) -> LinkDirection:
        src, arrow, dst = text.partition(cls.ARROW)
        if not (src and arrow and dst):
            raise ValueError(f"a link direction is 'src->dst', got {text!r}")
        return cls(src, dst)


@dataclass(frozen=True)
class LinkSpec:
    """A full-duplex link between nodes ``a`` and ``b`` at ``capacity_bps`` each way.
    ``fabric`` links get the fabric's queueing discipline; the others are plain HTB."""

    a: str
    b: str
    capacity_bps: float
    fabric: bool = False

    def directions(self) -> tuple[LinkDirection, LinkDirection]:
        return (LinkDirection(self.a, self.b), LinkDirection(self.b, self.a))


@dataclass(frozen=True)
class FabricSpec:
    """Queueing at shared links: ``kind`` names a regime of :data:`testbed.fabric.FABRICS`
    (``fifo``: one queue of ``buffer_packets``; ``fair``: an HTB class per job, equal
    guaranteed rate, link rate as ceiling; ``ecn``: a FIFO whose egress marks CE when a
    virtual queue exceeds ``ecn_threshold_bytes``)."""

    kind: str = "fifo"
    buffer_packets: int = 100
    ecn_threshold_bytes: int = 30_000

    def __post_init__(self) -> None:
        if self.kind not in FABRICS:
            raise ValueError(f"fabric must be one of {', '.join(FABRICS)}, got {self.kind!r}")
        if self.buffer_packets < 1:
            raise ValueError(f"buffer_packets must be >= 1, got {self.buffer_packets}")
        if self.ecn_threshold_bytes < 1500:
            raise ValueError(f"ecn_threshold_bytes must be >= 1500, got {self.ecn_threshold_bytes}")

    @property
    def regime(self) -> Fabric:
        """The regime's behaviour: its tc commands, host ECN setting, default controls."""
        return FABRICS[self.kind]


@dataclass(frozen=True)
class TestbedTopology:
    """Hosts, switches, links and routing of an emulated cluster."""

    kind: str
    hosts: tuple[str, ...]
    switches: tuple[str, ...]
    links: tuple[LinkSpec, ...]
    attach: dict[str, str]  # host -> its switch
    fabric: FabricSpec = field(default_factory=FabricSpec)
    spines: tuple[str, ...] = ()
    routing: str = "fixed"  # leaf_spine: fixed | hash (ECMP) | path (path selection)
    ecmp_seed: int = 0  # the ECMP hash's key
    spine_choice: Mapping[tuple[str, str], str] = field(default_factory=dict)
    # (source leaf, destination host) -> spine, set by select_paths

    def __post_init__(self) -> None:
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}, got {self.routing!r}")

    def spine_for(self, leaf: str, dst: str) -> str:
        """The spine that traffic from ``leaf`` to host ``dst`` (on another leaf) crosses."""
        if (leaf, dst) in self.spine_choice:
            return self.spine_choice[(leaf, dst)]
        if self.routing == "hash":
            return self.spines[ecmp_spine(self.ecmp_seed, leaf, self.ip(dst), len(self.spines))]
        return self.spines[self.host_index(dst) % len(self.spines)]

    def host_index(self, host: str) -> int:
        return self.hosts.index(host)

    def ip(self, host: str) -> str:
        """Mininet's default addressing: h<i> gets 10.0.0.<i>."""
        return f"10.0.0.{self.host_index(host) + 1}"

    def switch_path(self, src: str, dst: str) -> list[str]:
        """Switches from ``src``'s switch to ``dst``'s switch (deterministic)."""
        a, b = self.attach[src], self.attach[dst]
        if a == b:
            return [a]
        if self.kind == "leaf_spine":
            return [a, self.spine_for(a, dst), b]
        return [a, b]

    def path(self, src: str, dst: str) -> list[LinkDirection]:
        """Link directions from host ``src`` to host ``dst``."""
        nodes = [src, *self.switch_path(src, dst), dst]
        return [LinkDirection(u, v) for u, v in zip(nodes, nodes[1:], strict=False)]

    def ring_links(self, hosts: Sequence[str]) -> list[LinkDirection]:
        """Links crossed by a ring all-reduce over ``hosts`` (each sends to the next)."""
        out: list[LinkDirection] = []
        for i, h in enumerate(hosts):
            nxt = hosts[(i + 1) % len(hosts)]
            if nxt != h:
                out += [x for x in self.path(h, nxt) if x not in out]
        return out

    def link_capacity(self) -> dict[LinkDirection, float]:
        return {d: link.capacity_bps for link in self.links for d in link.directions()}

    def advisor_links(self) -> list[dict[str, Any]]:
        """Links in the ``cassini advise`` format."""
        return [{"id": str(d), "capacity_bps": c} for d, c in self.link_capacity().items()]

    def bottlenecks(self) -> list[LinkSpec]:
        return [link for link in self.links if link.fabric]


ROUTINGS = ("fixed", "hash", "path")


def ecmp_spine(seed: int, leaf: str, dst_ip: str, spines: int) -> int:
    """The spine index (0 .. spines-1) ECMP hashes the flow from ``leaf`` to ``dst_ip``
    onto: a BLAKE2b hash keyed by ``seed``, as switches key their 5-tuple hash."""
    key = seed.to_bytes(8, "little", signed=True)
    digest = hashlib.blake2b(f"{leaf}|{dst_ip}".encode(), key=key, digest_size=8).digest()
    return int.from_bytes(digest, "little") % spines


def flows_of(topo: TestbedTopology, hosts: Sequence[str]) -> list[tuple[str, str]]:
    """The (source leaf, destination host) flows of a ring all-reduce over ``hosts`` that
    cross a spine."""
    out = []
    for i, h in enumerate(hosts):
        nxt = hosts[(i + 1) % len(hosts)]
        if nxt != h and topo.attach[h] != topo.attach[nxt]:
            out.append((topo.attach[h], nxt))
    return out


def select_paths(topo: TestbedTopology, jobs: Sequence[Sequence[str]]) -> TestbedTopology:
    """Path selection: every flow of each job's ring (``jobs``: each job's hosts, in
    order) on the spine whose uplink from the flow's leaf carries the fewest flows so far
    (ties: the first spine); returns ``topo`` with those choices."""
    if topo.kind != "leaf_spine":
        return topo
    load: dict[LinkDirection, int] = {}  # flows placed on each uplink and downlink
    choice: dict[tuple[str, str], str] = {}
    for hosts in jobs:
        for leaf, dst in flows_of(topo, hosts):
            if (leaf, dst) in choice:
                continue
            down = topo.attach[dst]

            def flows_on(sp: str, leaf: str = leaf, down: str = down) -> int:
                return load.get(LinkDirection(leaf, sp), 0) + load.get(LinkDirection(sp, down), 0)

            spine = min(topo.spines, key=flows_on)
            choice[(leaf, dst)] = spine
            for d in (LinkDirection(leaf, spine), LinkDirection(spine, down)):
                load[d] = load.get(d, 0) + 1
    return replace(topo, spine_choice=choice)


def dumbbell(
    pairs: int,
    bottleneck_bps: float,
    access_bps: float = 1e9,
    fabric: FabricSpec | None = None,
) -> TestbedTopology:
    """``pairs`` left hosts and ``pairs`` right hosts across one bottleneck."""
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    _positive(bottleneck_bps=bottleneck_bps, access_bps=access_bps)
    hosts = tuple(f"h{i}" for i in range(1, 2 * pairs + 1))
    attach = {h: ("tbs1" if i < pairs else "tbs2") for i, h in enumerate(hosts)}
    links = [LinkSpec(h, attach[h], access_bps) for h in hosts]
    links.append(LinkSpec("tbs1", "tbs2", bottleneck_bps, fabric=True))
    return TestbedTopology(
        "dumbbell", hosts, ("tbs1", "tbs2"), tuple(links), attach, fabric or FabricSpec()
    )


def leaf_spine(
    leaves: int,
    spines: int,
    hosts_per_leaf: int,
    host_bps: float = 1e9,
    oversubscription: float = 2.0,
    fabric: FabricSpec | None = None,
    routing: str = "fixed",
    ecmp_seed: int = 0,
) -> TestbedTopology:
    """Two-tier leaf-spine: each leaf's uplinks carry ``hosts_per_leaf * host_bps /
    oversubscription`` in all, split evenly over the spines."""
    if leaves < 2 or spines < 1 or hosts_per_leaf < 1:
        raise ValueError("need leaves >= 2, spines >= 1, hosts_per_leaf >= 1")
    _positive(host_bps=host_bps, oversubscription=oversubscription)
    if not SEED_RANGE[0] <= ecmp_seed <= SEED_RANGE[1]:
        raise ValueError(
            f"ecmp_seed must be in {SEED_RANGE[0]} .. {SEED_RANGE[1]}, got {ecmp_seed}"
        )
    hosts = tuple(f"h{i}" for i in range(1, leaves * hosts_per_leaf + 1))
    leaf_names = tuple(f"tbl{i}" for i in range(1, leaves + 1))
    spine_names = tuple(f"tbp{i}" for i in range(1, spines + 1))
    attach = {h: leaf_names[i // hosts_per_leaf] for i, h in enumerate(hosts)}
    uplink = hosts_per_leaf * host_bps / oversubscription / spines
    if uplink < 1:
        raise ValueError(
            f"oversubscription {oversubscription:g} leaves uplinks of {uplink:g} bit/s"
        )
    links = [LinkSpec(h, attach[h], host_bps) for h in hosts]
    links += [LinkSpec(lf, sp, uplink, fabric=True) for lf in leaf_names for sp in spine_names]
    return TestbedTopology(
        "leaf_spine",
        hosts,
        leaf_names + spine_names,
        tuple(links),
        attach,
        fabric or FabricSpec(),
        spine_names,
        routing,
        int(ecmp_seed),
    )


TOPOLOGY_FIELDS = {
    "dumbbell": ("pairs", "bottleneck_bps", "access_bps"),
    "leaf_spine": ("leaves", "spines", "hosts_per_leaf", "host_bps", "oversubscription",
                   "routing", "ecmp_seed"),
}  # fmt: skip
"""Each topology kind's own keys in a config's ``topology:`` mapping (besides ``kind``
and the fabric's ``fabric``, ``buffer_packets`` and ``ecn_threshold_bytes``)."""
FABRIC_FIELDS = ("fabric", "buffer_packets", "ecn_threshold_bytes")
SEED_RANGE = (-(2**63), 2**63 - 1)  # ecmp_seed: the ECMP hash's key is 8 bytes, signed


def from_config(cfg: dict[str, Any]) -> TestbedTopology:
    """Build from the runner's ``topology:`` mapping (see ``testbed run --help``); a bad
    field raises :class:`~cassini.errors.InputError` naming it (``topology.pairs``)."""
    cfg = dict(cfg)
    kind = cfg.pop("kind", None)
    if not isinstance(kind, str) or kind not in TOPOLOGY_FIELDS:
        raise InputError("topology.kind", f"must be dumbbell or leaf_spine, got {kind!r}")
    allowed = (*TOPOLOGY_FIELDS[kind], *FABRIC_FIELDS)
    for key in cfg:
        if key in TOPOLOGY_FIELDS["leaf_spine"] and key not in allowed:
            raise InputError(f"topology.{key}", "for kind: leaf_spine only")
        if key not in allowed:
            raise InputError(
                f"topology.{key}", f"unknown field (allowed: kind, {', '.join(allowed)})"
            )
    fabric = cfg.pop("fabric", "fifo")
    if not isinstance(fabric, str) or fabric not in FABRICS:
        raise InputError("topology.fabric", f"must be one of {', '.join(FABRICS)}, got {fabric!r}")
    spec = FabricSpec(
        kind=fabric,
        buffer_packets=integer(
            cfg.pop("buffer_packets", 100), "topology.buffer_packets", minimum=1
        ),
        ecn_threshold_bytes=integer(
            cfg.pop("ecn_threshold_bytes", 30_000), "topology.ecn_threshold_bytes", minimum=1500
        ),
    )

    def bps(key: str, default: float | None = None) -> float:
        if key not in cfg and default is None:
            raise InputError(f"topology.{key}", "missing required field")
        return number(cfg.get(key, default), f"topology.{key}", minimum=1)  # bits/s

    def count(key: str, minimum: int) -> int:
        if key not in cfg:
            raise InputError(f"topology.{key}", "missing required field")
        return integer(cfg[key], f"topology.{key}", minimum=minimum)

    if kind == "dumbbell":
        return dumbbell(
            count("pairs", 1), bps("bottleneck_bps"), bps("access_bps", 1e9), fabric=spec
        )
    routing = cfg.get("routing", "fixed")
    if not isinstance(routing, str) or routing not in ROUTINGS:
        raise InputError(
            "topology.routing", f"must be one of {', '.join(ROUTINGS)}, got {routing!r}"
        )
    low, high = SEED_RANGE
    return leaf_spine(
        count("leaves", 2),
        count("spines", 1),
        count("hosts_per_leaf", 1),
        bps("host_bps", 1e9),
        number(cfg.get("oversubscription", 2.0), "topology.oversubscription", above=0),
        fabric=spec,
        routing=routing,
        ecmp_seed=integer(cfg.get("ecmp_seed", 0), "topology.ecmp_seed", minimum=low, maximum=high),
    )


def _positive(**values: float) -> None:
    for name, v in values.items():
        if not 0 < v < math.inf:
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.topo")
