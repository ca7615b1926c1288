"""Rail-optimised fabrics, the layout of current GPU clusters: each of a server's GPUs has
its own NIC, and NIC g of every server in a group (a "rack" of the model) is linked to the
group's rail-g ToR; every rail ToR is linked to every spine."""

from __future__ import annotations

from typing import Any

from cassini.sim.topologies.fabric import FabricBuilder, Topology
from cassini.sim.topologies.params import check_int, check_positive


def rail_optimised(
    groups: int,
    servers_per_group: int,
    gpus_per_server: int = 8,
    server_link_bps: float = 400e9,
    oversubscription: float = 1.0,
    spines: int = 1,
) -> Topology:
    """``groups`` groups of ``servers_per_group`` servers, ``gpus_per_server`` rails."""
    for name, v in (
        ("groups", groups),
        ("servers_per_group", servers_per_group),
        ("gpus_per_server", gpus_per_server),
        ("spines", spines),
    ):
        check_int(name, v)
    bps = check_positive("server_link_bps", server_link_bps)
    check_positive("oversubscription", oversubscription)
    rails = gpus_per_server
    b = FabricBuilder(("tor", "spine"), planes=rails)
    spine_ids = [b.switch("spine") for _ in range(spines)]
    uplink = servers_per_group * bps / oversubscription / spines
    for g in range(groups):
        tors = tuple(b.switch("tor", f"group{g}-rail{r}") for r in range(rails))
        for tor in tors:
            for s in spine_ids:
                b.link(tor, s, uplink)
        hosts = [(f"g{g}h{k}", gpus_per_server) for k in range(servers_per_group)]
        b.rack(hosts, tors, 0, bps)
    source: dict[str, Any] = {
        "generate": "rail-optimised",
        "groups": groups,
        "servers_per_group": servers_per_group,
        "gpus_per_server": gpus_per_server,
        "server_link_bps": bps,
        "oversubscription": oversubscription,
        "spines": spines,
    }
    return b.build("rail-optimised", source)
