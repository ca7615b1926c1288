"""The k-ary fat-tree (Al-Fares et al., SIGCOMM 2008): k pods of k/2 edge (ToR) and k/2
aggregation switches, (k/2)^2 core switches, k/2 hosts under every edge switch, every link
``server_link_bps``; k^3/4 hosts, no oversubscription."""

from __future__ import annotations

from typing import Any

from cassini.errors import InputError
from cassini.sim.topologies.fabric import FabricBuilder, Topology
from cassini.sim.topologies.params import check_int, check_positive


def fat_tree(k: int, gpus_per_server: int = 8, server_link_bps: float = 50e9) -> Topology:
    """A k-ary fat-tree (k even, >= 2)."""
    check_int("k", k, minimum=2)
    if k % 2:
        raise InputError("k", f"must be even, got {k}")
    check_int("gpus_per_server", gpus_per_server)
    bps = check_positive("server_link_bps", server_link_bps)
    half = k // 2
    b = FabricBuilder(("tor", "agg", "core"))
    cores = [b.switch("core") for _ in range(half * half)]
    for p in range(k):
        aggs = [b.switch("agg", f"pod{p}-agg{a}") for a in range(half)]
        for a, agg in enumerate(aggs):
            for c in cores[a * half : (a + 1) * half]:
                b.link(agg, c, bps)
        for e in range(half):
            tor = b.switch("tor", f"pod{p}-edge{e}")
            for agg in aggs:
                b.link(tor, agg, bps)
            hosts = [(f"p{p}e{e}h{h}", gpus_per_server) for h in range(half)]
            b.rack(hosts, (tor,), p, bps)
    source: dict[str, Any] = {
        "generate": "fat-tree",
        "k": k,
        "gpus_per_server": gpus_per_server,
        "server_link_bps": bps,
    }
    return b.build("fat-tree", source)
