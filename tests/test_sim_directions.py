"""A switch-to-switch link is one resource per direction: two jobs that cross a link in
opposite directions do not share it (full duplex), on fabrics where a ring's way out and
way back take different equal-cost paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cassini import cli
from cassini.sim.topologies.clos import three_tier, two_tier
from cassini.sim.topologies.fabric import physical_link

CLUSTER = (
    "cluster: {generate: three-tier, racks: 4, servers_per_rack: 2, racks_per_pod: 2, "
    "gpus_per_server: 1, aggs_per_pod: 2, cores: 2, oversubscription: 1}\n"
)
TRACE_HEAD = (
    "job_id,arrival_s,gpus,model,iterations,hosts\n"
    "d,0,6,vgg16,1,hA:1;hB:1;hM:1;hN:1;hC:1;hD:1\n"  # names the hosts, in rack order
)


def _slowdowns(tmp_path: Path, rows: str, capsys) -> dict[str, float]:
    tmp_path.mkdir()
    (tmp_path / "t.csv").write_text(TRACE_HEAD + rows)
    config = tmp_path / "c.yaml"
    config.write_text(CLUSTER + "workload: {trace: t.csv, format: csv}\n"
                      "schedulers: [recorded+ecmp]\n")  # fmt: skip
    out = tmp_path / "out"
    assert cli.main(["sim", "run", str(config), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    data = json.loads((out / "results.json").read_text())
    (jobs,) = data["jobs"].values()
    return {j["job_id"]: j["slowdown"] for j in jobs if j["job_id"] != "d"}


def test_opposite_directions_do_not_share_a_link(tmp_path, capsys):
    """ECMP (seed 0) puts x1 out over tor0-agg0 and back over tor0-agg1, x2 the other way
    round: every direction of every link carries one job, so neither slows down; x4 (on
    x2's servers, hashed onto x1's path) does share, and both slow down."""
    apart = _slowdowns(tmp_path / "apart", "x1,100,2,vgg16,200,hA:1;hC:1\n"
                       "x2,100,2,vgg16,200,hB:1;hD:1\n", capsys)  # fmt: skip
    assert apart == pytest.approx({"x1": 1.0, "x2": 1.0})
    same = _slowdowns(tmp_path / "same", "x1,100,2,vgg16,200,hA:1;hC:1\n"
                      "x4,100,2,vgg16,200,hB:1;hD:1\n", capsys)  # fmt: skip
    assert min(same.values()) > 1.2


def test_paths_are_directed_and_a_ring_on_one_path_uses_both_directions():
    topo = three_tier(4, 2, 2, 1, 100e9, 1.0, aggs_per_pod=2, cores=2)
    out, back = topo.paths(0, 2), topo.paths(2, 0)
    assert {physical_link(link) for p in out for link in p} == {
        physical_link(link) for p in back for link in p
    }
    for path in out:  # from a ToR: up to the top, then down
        directions = [link.rsplit(":", 1)[1] for link in path]
        assert directions == sorted(directions, key=["up", "down"].index)
        assert directions.count("up") == directions.count("down")
    # every direction is a resource at the link's physical capacity
    for link in topo.fabric_links:
        if not link.lower.startswith("host"):
            assert topo.links[f"{link.id}:up"] == topo.links[f"{link.id}:down"] == link.bps
            assert link.id not in topo.links
    # a two-tier ring takes one spine for every hop: each link it touches, both ways
    flat = two_tier(3, 2, 8, 50e9, 2.0, spines=2)
    used = flat.path([0, 2, 4], route=lambda s, d, alts: 1)
    switch_links = {physical_link(link) for link in used if not link.startswith("srv")}
    assert {f"{link}:{d}" for link in switch_links for d in ("up", "down")} <= set(used)


def test_collisions_count_only_traffic_in_the_directions_a_path_crosses():
    """A link busy only the other way is no collision (its directions are separate)."""
    from cassini.sim.parts.routing import collisions, uplinks

    topo = three_tier(4, 2, 2, 1, 100e9, 1.0, aggs_per_pod=2, cores=2)
    racks = [0, 2]
    for k in range(8):
        one_way = [d for d in uplinks(topo, racks, k)
                   if sum(physical_link(x) == physical_link(d)
                          for x in uplinks(topo, racks, k)) == 1]  # fmt: skip
        if one_way:
            break
    link = one_way[0]
    other = physical_link(link) + (":down" if link.endswith(":up") else ":up")
    assert collisions(topo, racks, k, {other: 5.0}) == 0  # only the other direction is busy
    assert collisions(topo, racks, k, {link: 5.0}) == 1  # its own direction: a collision
