"""cassini.sim.topologies: host tables, generators, ECMP paths, config forms, `topo show`."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini import cli
from cassini.errors import InputError
from cassini.sim.config import config_from_dict, read_config
from cassini.sim.topologies import GENERATORS, Topology, build
from cassini.sim.topologies.clos import from_cluster, three_tier, two_tier
from cassini.sim.topologies.fabric import physical_link
from cassini.sim.topologies.fat_tree import fat_tree
from cassini.sim.topologies.hosts import read_host_table
from cassini.sim.topologies.rail import rail_optimised
from cassini.sim.topology import Cluster

DATA = Path(__file__).parent / "data" / "topologies"
LINGJUN = DATA / "lingjun_irregular.csv"
OURS = DATA / "hosts_irregular.csv"


def links_between(topo: Topology, lower_tier: str, upper_tier: str) -> dict[str, float]:
    tier = {s.id: s.tier for s in topo.switches}
    return {
        link.id: link.bps
        for link in topo.fabric_links
        if tier.get(link.lower, "host") == lower_tier and tier[link.upper] == upper_tier
    }


def tor_named(topo: Topology, name: str) -> str:
    (sid,) = [s.id for s in topo.switches_in("tor") if s.name == name]
    return sid


# -- host tables --------------------------------------------------------------------------
def test_lingjun_header_irregular_racks_and_repeated_tor_names() -> None:
    topo = read_host_table(LINGJUN, gpus_per_server=8, server_link_bps=100e9)
    assert topo.kind == "lingjun"
    assert topo.tiers == ("tor", "agg", "core")
    assert (topo.servers, topo.gpus) == (16, 128)
    # S1 appears under G1/P1, G1/P2 and G1/P3: three different racks
    names = sorted(s.name for s in topo.switches_in("tor"))
    assert names == ["G1/P1/S1", "G1/P1/S2", "G1/P2/S1", "G1/P2/S3", "G1/P3/S1"]
    assert sorted(s.name for s in topo.switches_in("agg")) == ["G1/P1", "G1/P2", "G1/P3"]
    assert [s.name for s in topo.switches_in("core")] == ["G1"]
    sizes = {topo.switches_in("tor")[r].name: len(m) for r, m in enumerate(topo.racks)}
    assert sizes == {"G1/P1/S1": 3, "G1/P1/S2": 2, "G1/P2/S1": 5, "G1/P2/S3": 4, "G1/P3/S1": 2}
    assert topo.repeated_tor_names() == {"S1": 3}
    # every host sits in the rack its row names
    for host, rack in (("h01", "G1/P1/S1"), ("h08", "G1/P2/S1"), ("h16", "G1/P3/S1")):
        r = topo.rack_of(topo.host_index(host))
        assert topo.switches_in("tor")[r].name == rack
    assert topo.pods == 3 and topo.pod_of(topo.host_index("h15")) != topo.pod_of(0)


def test_lingjun_link_counts_and_capacities() -> None:
    bps, over = 100e9, 2.0
    topo = read_host_table(LINGJUN, gpus_per_server=8, server_link_bps=bps, oversubscription=over)
    host = links_between(topo, "host", "tor")
    tor = links_between(topo, "tor", "agg")
    agg = links_between(topo, "agg", "core")
    assert (len(host), len(tor), len(agg)) == (16, 5, 3)
    assert len(topo.fabric_links) == 24 and set(host.values()) == {bps}
    assert len(topo.links) == 16 + 2 * 8  # a switch link is a resource per direction
    up = {name: topo.uplink_bps[tor_named(topo, name)] for name in ("G1/P1/S1", "G1/P2/S1")}
    assert up == {"G1/P1/S1": 3 * bps / over, "G1/P2/S1": 5 * bps / over}
    aggs = {s.name: topo.uplink_bps[s.id] for s in topo.switches_in("agg")}
    # pod_oversubscription 1: an aggregation switch's uplink is its ToRs' uplinks
    assert aggs == {"G1/P1": 5 * bps / over, "G1/P2": 9 * bps / over, "G1/P3": 2 * bps / over}
    assert all(topo.oversubscription(s.id) == pytest.approx(over) for s in topo.switches_in("tor"))


def test_lingjun_paths_cross_the_tiers_they_must() -> None:
    topo = read_host_table(LINGJUN, gpus_per_server=8)
    h = topo.host_index
    same_rack = topo.path([h("h01"), h("h02")])
    assert set(same_rack) == {"srv0", "srv1"}
    a, b = tor_named(topo, "G1/P1/S1"), tor_named(topo, "G1/P2/S1")
    cross_pod = set(topo.path([h("h01"), h("h06")]))
    # a two-rack ring on the only path: every link in both directions
    for link in (f"{a}-agg0", f"{b}-agg1", "agg0-core0", "agg1-core0"):
        assert {f"{link}:up", f"{link}:down"} <= cross_pod
    alternatives = topo.paths(topo.rack_of(h("h01")), topo.rack_of(h("h15")))
    assert alternatives == (
        (f"{a}-agg0:up", "agg0-core0:up", "agg2-core0:down",
         f"{tor_named(topo, 'G1/P3/S1')}-agg2:down"),
    )  # fmt: skip


def test_our_header_per_tier_speeds_and_gpus() -> None:
    topo = read_host_table(OURS)
    assert topo.kind == "hosts"
    assert (topo.servers, topo.gpus) == (7, 3 * 8 + 2 * 4 + 2 * 8)
    assert [len(r) for r in topo.racks] == [3, 2, 2]
    t1, t2, t1b = (tor_named(topo, n) for n in ("c1/p1/t1", "c1/p1/t2", "c1/p2/t1"))
    assert topo.links[topo.host_links[topo.host_index("b1")][0]] == 2e11
    assert (topo.uplink_bps[t1], topo.uplink_bps[t2], topo.uplink_bps[t1b]) == (8e11, 4e11, 4e11)
    assert topo.oversubscription(t1) == pytest.approx(3 * 4e11 / 8e11)
    assert topo.oversubscription(t1b) == pytest.approx(2.0)
    assert {s.name: topo.uplink_bps[s.id] for s in topo.switches_in("agg")} == {
        "c1/p1": 1.2e12,
        "c1/p2": 4e11,
    }
    with pytest.raises(InputError, match="different GPU counts"):
        _ = topo.gpus_per_server
    with pytest.raises(InputError, match="different sizes"):
        _ = topo.servers_per_rack


def test_a_two_tier_host_table_without_agg(tmp_path: Path) -> None:
    f = tmp_path / "two.csv"
    f.write_text("host,tor\nx,A\ny,A\nz,B\n")
    topo = read_host_table(f, gpus_per_server=2, server_link_bps=10e9, oversubscription=1)
    assert topo.tiers == ("tor", "spine")
    assert sorted(links_between(topo, "tor", "spine").values()) == [10e9, 20e9]


BAD_ROWS = [
    ("ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh2,G1,P1\n", 3, 4, "ASW: missing"),
    ("ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh2,G1,,S1\n", 3, 3, "PSW: empty"),
    ("ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh1,G1,P2,S1\n", 3, 1, "already on line 2"),
    ("ip,DSW,PSW,ASW\nh1,G1,P1,S1,x\n", 2, 5, "extra cell"),
    ("ip,DSW,PSW,TOR\nh1,G1,P1,S1\n", 1, 4, "'TOR' is not one of them"),
    ("host,tor,rack\nh1,A,1\n", 1, 3, "unknown column 'rack'"),
    ("host,tor,host_bps\nh1,A,1e11\n\nh2,A,fast\n", 4, 3, "not a number"),
    ("host,tor,host_bps\nh1,A,-1\n", 2, 3, "must be > 0"),
    ("host,tor,gpus\nh1,A,2.5\n", 2, 3, "whole number"),
    ("host,tor,tor_uplink_bps\nh1,A,1e11\nh2,A,2e11\n", 3, 3, "differs from 1e+11 on line 2"),
    ("host,tor\n", 2, 1, "no hosts"),
    ("ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh2,G2,P2,S1\n", 3, 2, "one core switch"),
]


@pytest.mark.parametrize(("text", "line", "column", "problem"), BAD_ROWS)
def test_bad_rows_name_file_line_and_column(
    tmp_path: Path, text: str, line: int, column: int, problem: str
) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(text)
    gpus = {} if "gpus" in text.splitlines()[0].split(",") else {"gpus_per_server": 8}
    with pytest.raises(InputError) as e:
        read_host_table(f, **gpus)
    assert e.value.field == f"{f}:{line}:{column}"
    assert problem in e.value.problem


def test_a_parameter_and_its_column_cannot_both_be_given() -> None:
    with pytest.raises(InputError) as e:
        read_host_table(OURS, server_link_bps=1e11)
    assert e.value.field == "server_link_bps" and "host_bps" in e.value.problem
    with pytest.raises(InputError, match="no gpus column"):
        read_host_table(LINGJUN)


# -- generators ---------------------------------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(st.integers(1, 7).map(lambda h: 2 * h))
def test_fat_tree_counts_paths_and_radix(k: int) -> None:
    topo = fat_tree(k, gpus_per_server=8, server_link_bps=100e9)
    half = k // 2
    assert topo.servers == k**3 // 4 and topo.gpus == 8 * k**3 // 4
    counts = {t: len(topo.switches_in(t)) for t in topo.tiers}
    assert counts == {"tor": k * half, "agg": k * half, "core": half * half}
    assert len(topo.fabric_links) == 3 * k**3 // 4
    assert len(topo.links) == k**3 // 4 + 2 * (k**3 // 2)  # switch links once per direction
    assert all(len(r) == half for r in topo.racks) and topo.pods == k
    # every switch uses all k ports (cores: k pods below; others: k/2 below + k/2 above)
    ports = Counter()
    for link in topo.fabric_links:
        ports[link.upper] += 1
        ports[link.lower] += 1
    assert {ports[s.id] for s in topo.switches} == {k}
    # full bisection: no switch oversubscribed
    assert {topo.oversubscription(s.id) for s in topo.switches if s.tier != "core"} == {1.0}
    last = len(topo.racks) - 1
    if half > 1:  # two racks of pod 0
        assert len(topo.paths(0, 1)) == half
    assert len(topo.paths(0, last)) == half * half
    for p in topo.paths(0, last):
        assert len(p) == 4 and len(set(p)) == 4


@settings(max_examples=15, deadline=None)
@given(
    racks=st.integers(1, 6),
    spr=st.integers(1, 5),
    spines=st.integers(1, 4),
    over=st.sampled_from([1.0, 2.0, 4.0]),
)
def test_two_tier_counts_and_ecmp_paths(racks: int, spr: int, spines: int, over: float) -> None:
    bps = 50e9
    topo = two_tier(racks, spr, 8, bps, over, spines=spines)
    assert (topo.servers, topo.gpus, len(topo.switches_in("spine"))) == (
        racks * spr,
        racks * spr * 8,
        spines,
    )
    up = links_between(topo, "tor", "spine")
    assert len(up) == racks * spines
    assert all(v == pytest.approx(spr * bps / over / spines) for v in up.values())
    if racks > 1:
        alternatives = topo.paths(0, racks - 1)
        assert len(alternatives) == spines
        assert len({p[0].split("-")[1] for p in alternatives}) == spines  # distinct spines
        # a route callback picks the spine of every ring hop
        last = topo.servers - 1
        route = topo.path([0, last], route=lambda s, d, alts: len(alts) - 1)
        chosen = {physical_link(link) for link in route}
        assert {f"tor0-spine{spines - 1}", f"tor{racks - 1}-spine{spines - 1}"} <= chosen
        assert not any(link.endswith("-spine0") for link in chosen) or spines == 1


def test_three_tier_counts() -> None:
    topo = three_tier(8, 4, 4, 8, 100e9, 2.0, pod_oversubscription=2.0, aggs_per_pod=2, cores=3)
    assert {t: len(topo.switches_in(t)) for t in topo.tiers} == {"tor": 8, "agg": 4, "core": 3}
    assert len(links_between(topo, "tor", "agg")) == 8 * 2
    assert len(links_between(topo, "agg", "core")) == 4 * 3
    pod_up = sum(topo.uplink_bps[s.id] for s in topo.switches_in("agg")[:2])
    assert pod_up == pytest.approx(4 * (4 * 100e9 / 2.0) / 2.0)
    assert len(topo.paths(0, 1)) == 2  # same pod: via either aggregation switch
    assert len(topo.paths(0, 7)) == 2 * 3 * 2  # up via 2 aggs x 3 cores x down via 2 aggs


def test_rail_optimised_puts_each_gpu_on_its_own_rail() -> None:
    topo = rail_optimised(groups=3, servers_per_group=4, gpus_per_server=8, server_link_bps=400e9)
    assert topo.planes == 8 and topo.servers == 12 and topo.gpus == 96
    assert len(topo.switches_in("tor")) == 3 * 8
    for s in range(topo.servers):
        tors = {
            next(link.upper for link in topo.fabric_links if link.id == lid)
            for lid in topo.host_links[s]
        }
        assert len(tors) == 8  # eight NICs, eight different rail ToRs
    shares = topo.path_shares([0, 5])  # servers in groups 0 and 1
    assert sum(v for k, v in shares.items() if k.startswith("srv0.")) == pytest.approx(1.0)
    rails = {k for k in shares if "-spine" in k}
    assert len({physical_link(k) for k in rails}) == 2 * 8  # each rail's ToR uplink, both groups
    assert len(rails) == 2 * 2 * 8  # in both directions
    assert set(shares.values()) == {1 / 8}
    # the engine compares full job rates with `links`: physical capacity x 8 planes
    assert topo.links["srv0.3"] == 8 * topo.link_bps["srv0.3"] == 8 * 400e9
    assert topo.rack_servers == (range(0, 4), range(4, 8), range(8, 12))


# -- the uniform Cluster, rebuilt as a generated fabric ------------------------------------
def _cluster_link(link: str) -> str:
    """Our link id -> Cluster's (srv<i>, tor<r>, pod<p>)."""
    if link.startswith("srv"):
        return link
    lower, upper = link.split("-")
    if lower.startswith("tor"):
        return lower
    return "pod" + lower.removeprefix("agg")


@settings(max_examples=40, deadline=None)
@given(
    racks_per_pod=st.sampled_from([None, 1, 2, 3]),
    pods=st.integers(1, 3),
    spr=st.integers(1, 4),
    data=st.data(),
)
def test_one_spine_fabrics_route_like_the_uniform_cluster(
    racks_per_pod: int | None, pods: int, spr: int, data: st.DataObject
) -> None:
    racks = pods * (racks_per_pod or 2)
    cluster = Cluster(racks, spr, 4, 50e9, 2.0, racks_per_pod, pod_oversubscription=1.5)
    topo = from_cluster(cluster)
    servers = data.draw(st.sets(st.integers(0, cluster.servers - 1), min_size=1, max_size=8))
    ours = topo.path(servers)
    physical = {physical_link(link) for link in ours}
    # one spine: the ring crosses every switch link it touches in both directions, which
    # is what the Cluster's one resource per uplink stands for
    assert len(ours) == len(physical) + sum(1 for link in physical if not link.startswith("srv"))
    mapped = {_cluster_link(link) for link in physical}
    assert len(mapped) == len(physical)
    assert mapped == set(cluster.path(servers))
    for link in ours:
        assert topo.links[link] == pytest.approx(cluster.links[_cluster_link(physical_link(link))])
    for s in servers:
        assert (topo.rack_of(s), topo.pod_of(s)) == (cluster.rack_of(s), cluster.pod_of(s))


# -- configuration ------------------------------------------------------------------------
BASE_CONFIG = {
    "workload": {"poisson": {"jobs": 3, "load": 0.5, "gpus": {8: 1}}},
    "schedulers": ["themis"],
}


def test_config_hosts_path_is_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "fabric").mkdir()
    shutil.copy(LINGJUN, tmp_path / "fabric" / "topo.csv")
    (tmp_path / "sim.json").write_text(
        json.dumps(
            BASE_CONFIG
            | {
                "cluster": {
                    "hosts": "fabric/topo.csv",
                    "gpus_per_server": 8,
                    "server_link_bps": 2e11,
                    "oversubscription": 4,
                }
            }
        )
    )
    cfg = read_config(tmp_path / "sim.json")
    assert isinstance(cfg.cluster, Topology) and cfg.cluster.gpus == 128
    assert set(links_between(cfg.cluster, "host", "tor").values()) == {2e11}
    wider = cfg.variant(oversubscription=1.0).cluster
    tor = tor_named(wider, "G1/P2/S1")
    assert wider.uplink_bps[tor] == pytest.approx(5 * 2e11) and cfg.cluster.uplink_bps[
        tor
    ] == pytest.approx(5 * 2e11 / 4)


def test_config_generated_forms_and_todays_form() -> None:
    cfg = config_from_dict(BASE_CONFIG | {"cluster": {"generate": "fat-tree", "k": 4}})
    assert isinstance(cfg.cluster, Topology) and cfg.cluster.servers == 16
    assert cfg.cluster.to_dict()["generate"] == "fat-tree"
    assert build(cfg.cluster.to_dict()).servers == 16
    old = config_from_dict(
        BASE_CONFIG | {"cluster": {"racks": 2, "servers_per_rack": 2, "gpus_per_server": 8}}
    )
    assert isinstance(old.cluster, Cluster)
    for name in GENERATORS:
        assert name in json.dumps(sorted(GENERATORS))


@pytest.mark.parametrize(
    ("cluster", "field"),
    [
        ({"generate": "torus", "k": 4}, "cluster.generate"),
        ({"generate": "fat-tree", "k": 3}, "cluster.k"),
        ({"generate": "fat-tree", "k": 4, "spines": 2}, "cluster.spines"),
        ({"generate": "two-tier", "racks": 2}, "cluster.servers_per_rack"),
        ({"hosts": "x.csv", "generate": "fat-tree"}, "cluster"),
        ({"hosts": "missing.csv", "gpus_per_server": 8}, "cluster.hosts"),
    ],
)
def test_config_errors_name_the_field(cluster: dict, field: str) -> None:
    with pytest.raises(InputError) as e:
        config_from_dict(BASE_CONFIG | {"cluster": cluster})
    assert e.value.field == field


# -- cassini sim topo show -----------------------------------------------------------------
def test_topo_show_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sim", "topo", "show", str(LINGJUN)]) == 0
    out = capsys.readouterr().out
    assert "hosts: 16" in out and "GPUs: 128" in out
    assert "switches: tor 5, agg 3, core 1" in out
    assert "racks of different sizes: 2-5 hosts" in out
    assert "ToR names repeated under different parents: S1 x3" in out
    assert "gpus_per_server 8 assumed" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("tor")]
    assert [r[1] for r in rows] == ["G1/P1/S1", "G1/P1/S2", "G1/P2/S1", "G1/P2/S3", "G1/P3/S1"]
    assert {r[-1] for r in rows} == {"2.00"}


def test_topo_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sim", "topo", "show", str(OURS), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["hosts"], s["gpus"], s["racks"]) == (7, 48, 3)
    assert s["switches"] == {"tor": 3, "agg": 2, "core": 1}
    assert s["links"]["host-tor"] == {"count": 7, "bps": {"2e+11": 2, "4e+11": 5}}
    over = {t["name"]: t["oversubscription"] for t in s["tors"]}
    assert over == pytest.approx({"c1/p1/t1": 1.5, "c1/p1/t2": 1.0, "c1/p2/t1": 2.0})
    assert any("different GPU counts" in x for x in s["irregular"])
    assert any("oversubscription differs" in x for x in s["irregular"])


def test_topo_show_uniform_generated_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("cluster: {generate: rail-optimised, groups: 2, servers_per_group: 4}\n")
    assert cli.main(["sim", "topo", "show", str(f), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["irregular"] == [] and s["planes"] == 8 and s["switches"] == {"tor": 16, "spine": 1}


def test_topo_show_bad_row_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "topo.csv"
    f.write_text("ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh2,G1,P1\n")
    assert cli.main(["sim", "topo", "show", str(f)]) == 2
    assert f"{f}:3:4: ASW: missing" in capsys.readouterr().err


def test_sim_run_on_a_generated_topology(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.json"
    workload = {"poisson": {"jobs": 4, "load": 0.8, "gpus": {24: 1}}}
    cluster = {"generate": "fat-tree", "k": 4}
    f.write_text(json.dumps(BASE_CONFIG | {"cluster": cluster, "workload": workload}))
    assert cli.main(["sim", "run", str(f), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["cluster"]["generate"] == "fat-tree" and results["cluster"]["gpus"] == 128
    assert len(results["jobs"]["themis"]) == 4
    assert cli.main(["sim", "trace", str(f), "--out", str(tmp_path / "jobs.csv")]) == 0
