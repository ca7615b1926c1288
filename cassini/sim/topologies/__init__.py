"""Cluster fabrics as they are built: host tables (Lingjun ``topo.csv`` or ours) and
generated two-tier, three-tier, fat-tree and rail-optimised fabrics, all as one value
type, :class:`Topology`.  See docs/topologies.md."""

from cassini.sim.topologies.fabric import Link, Route, Switch, Topology
from cassini.sim.topologies.registry import BUILDERS, GENERATORS, build, is_topology_form

__all__ = [
    "BUILDERS",
    "GENERATORS",
    "Link",
    "Route",
    "Switch",
    "Topology",
    "build",
    "is_topology_form",
]
