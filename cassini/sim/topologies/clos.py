"""Generated Clos fabrics with uniform racks: two-tier (ToRs under N spines) and three-tier
(racks in pods; each pod's aggregation switches under the core switches)."""

from __future__ import annotations

from typing import Any

from cassini.errors import InputError
from cassini.sim.topologies.fabric import FabricBuilder, Topology
from cassini.sim.topologies.params import check_int, check_positive
from cassini.sim.topology import POD_SPINES, Cluster


def two_tier(
    racks: int,
    servers_per_rack: int,
    gpus_per_server: int,
    server_link_bps: float = 50e9,
    oversubscription: float = 2.0,
    spines: int = 1,
) -> Topology:
    """``racks`` ToRs, each linked to every one of ``spines`` spines (ECMP has ``spines``
    paths between two racks)."""
    for name, v in (
        ("racks", racks),
        ("servers_per_rack", servers_per_rack),
        ("gpus_per_server", gpus_per_server),
        ("spines", spines),
    ):
        check_int(name, v)
    check_positive("server_link_bps", server_link_bps)
    check_positive("oversubscription", oversubscription)
    b = FabricBuilder(("tor", "spine"))
    spine_ids = [b.switch("spine") for _ in range(spines)]
    uplink = servers_per_rack * server_link_bps / oversubscription / spines
    for r in range(racks):
        tor = b.switch("tor")
        for s in spine_ids:
            b.link(tor, s, uplink)
        hosts = [(f"r{r}h{k}", gpus_per_server) for k in range(servers_per_rack)]
        b.rack(hosts, (tor,), 0, server_link_bps)
    source: dict[str, Any] = {
        "generate": "two-tier",
        "racks": racks,
        "servers_per_rack": servers_per_rack,
        "gpus_per_server": gpus_per_server,
        "server_link_bps": server_link_bps,
        "oversubscription": oversubscription,
        "spines": spines,
    }
    return b.build("two-tier", source)


def three_tier(
    racks: int,
    servers_per_rack: int,
    racks_per_pod: int,
    gpus_per_server: int,
    server_link_bps: float = 50e9,
    oversubscription: float = 2.0,
    pod_oversubscription: float = 1.0,
    aggs_per_pod: int = 1,
    cores: int = 1,
) -> Topology:
    """``racks / racks_per_pod`` pods; each ToR linked to every aggregation switch of its
    pod, each aggregation switch to every core switch."""
    for name, v in (
        ("racks", racks),
        ("servers_per_rack", servers_per_rack),
        ("racks_per_pod", racks_per_pod),
        ("gpus_per_server", gpus_per_server),
        ("aggs_per_pod", aggs_per_pod),
        ("cores", cores),
    ):
        check_int(name, v)
    if racks % racks_per_pod:
        raise InputError("racks_per_pod", f"must divide racks ({racks}), got {racks_per_pod}")
    for name, x in (
        ("server_link_bps", server_link_bps),
        ("oversubscription", oversubscription),
        ("pod_oversubscription", pod_oversubscription),
    ):
        check_positive(name, x)
    b = FabricBuilder(("tor", "agg", "core"))
    core_ids = [b.switch("core") for _ in range(cores)]
    tor_up = servers_per_rack * server_link_bps / oversubscription
    agg_up = racks_per_pod * tor_up / pod_oversubscription / aggs_per_pod
    for p in range(racks // racks_per_pod):
        aggs = [b.switch("agg", f"pod{p}-agg{a}") for a in range(aggs_per_pod)]
        for a in aggs:
            for c in core_ids:
                b.link(a, c, agg_up / cores)
        for k in range(racks_per_pod):
            r = p * racks_per_pod + k
            tor = b.switch("tor", f"pod{p}-tor{k}")
            for a in aggs:
                b.link(tor, a, tor_up / aggs_per_pod)
            hosts = [(f"r{r}h{j}", gpus_per_server) for j in range(servers_per_rack)]
            b.rack(hosts, (tor,), p, server_link_bps)
    source: dict[str, Any] = {
        "generate": "three-tier",
        "racks": racks,
        "servers_per_rack": servers_per_rack,
        "racks_per_pod": racks_per_pod,
        "gpus_per_server": gpus_per_server,
        "server_link_bps": server_link_bps,
        "oversubscription": oversubscription,
        "pod_oversubscription": pod_oversubscription,
        "aggs_per_pod": aggs_per_pod,
        "cores": cores,
    }
    return b.build("three-tier", source)


def from_cluster(cluster: Cluster, *, spines: int | None = None) -> Topology:
    """The generated fabric equivalent to a uniform :class:`Cluster` (``spines`` spines,
    the cluster's own by default, or one aggregation switch per pod under one core):
    same racks, same links per ring job, same capacities.  A cluster with pods and more
    than one spine has no such equivalent: InputError names ``spines`` (a
    :class:`Cluster` refuses them already, :data:`cassini.sim.topology.POD_SPINES`)."""
    spines = cluster.spines if spines is None else spines
    if cluster.racks_per_pod is not None and spines > 1:
        raise InputError("spines", POD_SPINES.format(spines=spines))
    common = {
        "racks": cluster.racks,
        "servers_per_rack": cluster.servers_per_rack,
        "gpus_per_server": cluster.gpus_per_server,
        "server_link_bps": cluster.server_link_bps,
        "oversubscription": cluster.oversubscription,
    }
    if cluster.racks_per_pod is None:
        return two_tier(**common, spines=spines)
    return three_tier(
        **common,
        racks_per_pod=cluster.racks_per_pod,
        pod_oversubscription=cluster.pod_oversubscription,
    )
