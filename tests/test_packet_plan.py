"""The packet-level plan (no ns-3 needed): ring hops cross exactly the links the fluid
model's ring does over the same path index, ECMP picks the fluid model's hash, per-hop
addresses are unique, the routing tables reach every host without loops, and clusters
over 128 hosts or without the wheel are refused with a clear message."""

import pytest
from conftest import require

from cassini.errors import InputError
from cassini.packet import ns3env
from cassini.packet.plan import MAX_HOSTS, as_topology, plan
from cassini.sim.parts.routing import ROUTINGS, route_path
from cassini.sim.topologies.clos import three_tier, two_tier
from cassini.sim.topologies.fabric import physical_link
from cassini.sim.topologies.fat_tree import fat_tree
from cassini.sim.topology import Cluster

FABRICS = {
    "fat-tree": fat_tree(4),
    "two-tier-4-spines": two_tier(4, 8, 8, spines=4),
    "three-tier": three_tier(8, 4, 4, 8, aggs_per_pod=2, cores=2),
}
JOBS = {"a": [0, 2, 5, 11], "b": [1, 8], "c": [3, 4, 12, 13, 15], "d": [6], "e": [0, 7, 14]}


@pytest.mark.parametrize("name", FABRICS)
@pytest.mark.parametrize("routing", ["single", "ecmp", "crux"])
def test_hops_cross_the_fluid_models_links(name, routing):
    topo = FABRICS[name]
    p = plan(topo, JOBS, scale=50, routing=routing, seed=3, peaks_bps={"a": 4e10, "c": 3e10})
    for job, servers in JOBS.items():
        crossed = {link for hop in p.hops[job] for link in hop.links}
        directed = route_path(topo, servers, p.path_index[job])
        assert crossed == {physical_link(link) for link in directed}
        for hop in p.hops[job]:  # a connected walk from host to host
            assert hop.nodes[0] == f"host{hop.src}" and hop.nodes[-1] == f"host{hop.dst}"
            for a, b, link in zip(hop.nodes[:-1], hop.nodes[1:], hop.links, strict=True):
                assert set(p.link_ends[link]) == {a, b}
    if routing == "ecmp":
        for job, servers in JOBS.items():
            racks = sorted({topo.rack_of(s) for s in servers})
            want = ROUTINGS["ecmp"].spine(topo, job, racks, 3, {})
            assert p.path_index[job] == want
    assert len(p.hops["d"]) == 0  # one server: no traffic
    assert len(p.hops["c"]) == 5


def test_rates_are_scaled_by_one_factor():
    topo = FABRICS["two-tier-4-spines"]
    p = plan(topo, JOBS, scale=40, routing="single")
    for link in topo.fabric_links:
        assert p.link_bps[link.id] == pytest.approx(link.bps / 40)


@pytest.mark.parametrize("name", FABRICS)
def test_routes_reach_every_address_without_loops(name):
    """Following the /32 (hop) routes, then the /24 (tree) routes, from every switch
    reaches the destination host, and each hop's packets follow its planned path."""
    topo = FABRICS[name]
    p = plan(topo, JOBS, scale=50, routing="ecmp", seed=1)
    tree = {(sw, server): link for sw, server, link in p.host_routes()}
    pinned = {(sw, addr): link for sw, addr, link in p.pinned_routes()}
    addresses = [h.address for hops in p.hops.values() for h in hops]
    assert len(set(addresses)) == len(addresses)
    under = {tors[0]: rack for rack, tors in enumerate(topo.rack_tors)}

    def walk(start: str, server: int, address: int) -> list[str]:
        node, seen = start, [start]
        while not (node in under and server in topo.racks[under[node]]):
            link = pinned.get((node, address)) or tree[(node, server)]
            lo, up = p.link_ends[link]
            node = up if node == lo else lo
            assert node not in seen, f"loop at {node}"
            seen.append(node)
        return seen

    for hops in p.hops.values():
        for hop in hops:
            assert walk(hop.nodes[1], hop.dst, hop.address) == list(hop.nodes[1:-1])
    for sw in topo.switches:
        for server in range(topo.servers):
            walk(sw.id, server, -1)


def test_clusters_over_128_hosts_are_refused():
    as_topology(Cluster(racks=16, servers_per_rack=8, gpus_per_server=8))  # 128: fine
    with pytest.raises(InputError, match=r"too large for packet level \(136 hosts, at most 128\)"):
        as_topology(Cluster(racks=17, servers_per_rack=8, gpus_per_server=8))
    assert MAX_HOSTS == 128


def test_uniform_cluster_becomes_its_fabric():
    topo = as_topology(Cluster(racks=4, servers_per_rack=4, gpus_per_server=8, spines=2))
    assert topo.kind == "two-tier" and len(topo.switches_in("spine")) == 2


def test_missing_wheel_is_refused_with_the_extra_named(monkeypatch):
    monkeypatch.setattr(ns3env, "available", lambda: False)
    ns3env.load_ns.cache_clear()
    try:
        with pytest.raises(ns3env.PacketUnavailable) as e:
            ns3env.load_ns()
        assert str(e.value) == (
            "network: packet needs the [packet] extra: pip install 'netaware-ml[packet]'"
        )
    finally:
        ns3env.load_ns.cache_clear()


def test_placement_takes_trace_hosts_else_packs_and_refuses_what_does_not_fit():
    from cassini.packet.run import place
    from cassini.sim.workload import JobSpec

    topo = fat_tree(4)  # 16 hosts of 8 GPUs, 2 per rack
    specs = [
        JobSpec("t", 0.0, 16, 5, "vgg16", (("p1e0h0", 8), ("p2e0h1", 8))),
        JobSpec("p", 1.0, 24, 5, "vgg16"),
    ]
    servers = place(topo, specs)
    assert servers["t"] == (4, 9)
    assert len(servers["p"]) == 3 and not set(servers["p"]) & {4, 9}
    assert len({topo.rack_of(s) for s in servers["p"]}) == 2  # packed: fewest racks
    with pytest.raises(InputError, match=r"jobs\.big: 200 GPUs do not fit"):
        place(topo, [*specs, JobSpec("big", 2.0, 200, 5, "vgg16")])


REFUSED = """cluster: {racks: RACKS, servers_per_rack: 8, gpus_per_server: 8}
workload: {trace: trace.csv}
schedulers: [themis]
network: packet
"""


@pytest.mark.parametrize(
    ("racks", "wheel", "field", "message"),
    [
        (17, True, "cluster", "too large for packet level (136 hosts, at most 128)"),
        (2, False, "network", "needs the [packet] extra"),
    ],
)
def test_simulator_refuses_what_packet_level_cannot_run(
    tmp_path, capsys, monkeypatch, racks, wheel, field, message
):
    """``network: packet`` in a simulator config: a cluster over 128 hosts, or no ns-3
    wheel, exits 2 naming the field (before any ns-3 is loaded)."""
    from cassini.cli import main

    monkeypatch.setattr(ns3env, "available", lambda: wheel)
    (tmp_path / "trace.csv").write_text("job_id,arrival_s,gpus,iterations,model\na,0,16,2,vgg16\n")
    (tmp_path / "cfg.yaml").write_text(REFUSED.replace("RACKS", str(racks)))
    assert main(["sim", "run", str(tmp_path / "cfg.yaml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert field in err and message in err


def test_ns3_modules_come_after_the_libraries_they_link_against():
    """:data:`ns3env.MODULES` is what ``load_ns`` includes and loads, in order: each
    module's library names (its ELF ``NEEDED`` entries) only ns-3 modules of the table
    that come before it."""
    import re

    require(ns3env.available(), "ns-3 bindings (the [packet] extra; run make setup)")
    for i, name in enumerate(ns3env.MODULES):
        path = ns3env.module_library(name)
        assert path is not None, name
        needed = set(re.findall(rb"\x00libns3\.[\d.]+-([a-z0-9-]+)\.so\x00", path.read_bytes()))
        needed = {n.decode() for n in needed} - {name}
        assert needed <= set(ns3env.MODULES[:i]), (name, needed - set(ns3env.MODULES[:i]))
