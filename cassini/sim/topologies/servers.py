"""Which server is which: the table from a server's index (as placements and ``srv<i>``
links name it) to its host name, rack, pod, GPUs and links, for ``results.json``, the
report and ``cassini sim topo show --json``; and the server link a host name stands for."""

from __future__ import annotations

from typing import Any

from cassini.errors import InputError
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster


def server_table(cluster: Cluster | Topology) -> list[dict[str, Any]]:
    """One entry per server, in index order: ``index``; ``host``, its name as the host
    table or generator names it (None on the uniform ``racks``/``servers_per_rack`` form,
    which names no hosts); ``rack`` and ``pod`` (indices); ``tors``, its rack's ToR
    switches (one per plane) by name; ``gpus``; ``links``, its link ids (``srv<i>``, or
    ``srv<i>.<rail>`` on a rail-optimised fabric, one per NIC); ``link_bps``, each link's
    capacity in bits/s (one NIC's, as ``topo show`` lists it)."""
    if isinstance(cluster, Cluster):
        return [
            {"index": i, "host": None, "rack": cluster.rack_of(i), "pod": cluster.pod_of(i),
             "tors": [f"tor{cluster.rack_of(i)}"], "gpus": cluster.gpus_per_server,
             "links": [f"srv{i}"], "link_bps": float(cluster.server_link_bps)}
            for i in range(cluster.servers)
        ]  # fmt: skip
    names = {s.id: s.name for s in cluster.switches}
    out = []
    for i, host in enumerate(cluster.hosts):
        rack = cluster.rack_of(i)
        links = list(cluster.host_links[i])
        out.append(
            {"index": i, "host": host, "rack": rack, "pod": cluster.rack_pods[rack],
             "tors": [names[t] for t in cluster.rack_tors[rack]],
             "gpus": cluster.gpus_per_host[i], "links": links,
             "link_bps": cluster.link_bps[links[0]]}
        )  # fmt: skip
    return out


def host_link(cluster: Cluster | Topology, name: str, field: str) -> str | None:
    """The server link that host ``name`` stands for (``srv<i>``), None when no host has
    that name; InputError (``field``) when the host has several links (one per rail):
    the message lists them."""
    if not isinstance(cluster, Topology) or name not in cluster.hosts:
        return None
    i = cluster.host_index(name)
    links = cluster.host_links[i]
    if len(links) > 1:
        raise InputError(
            field,
            f"host {name!r} is server {i}, with one link per rail: give one of "
            f"{', '.join(links)}",
        )
    return links[0]
