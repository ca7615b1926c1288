"""ECMP on the leaf-spine testbed topology without root: the seeded hash, path selection,
and the config's routing field."""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testbed.run.load import ConfigError, load_config
from testbed.topo import ecmp_spine, flows_of, from_config, leaf_spine, select_paths


def topo_cfg(**extra):
    return {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2,
            "host_bps": 400e6, "fabric": "fair", **extra}  # fmt: skip


@given(st.integers(-(2**31), 2**31), st.integers(1, 8))
def test_the_hash_is_a_function_of_seed_and_flow(seed, spines):
    a = ecmp_spine(seed, "tbl1", "10.0.0.3", spines)
    assert 0 <= a < spines
    assert a == ecmp_spine(seed, "tbl1", "10.0.0.3", spines)


def test_the_seed_changes_where_flows_go_and_spreads_them():
    flows = [(f"tbl{leaf}", f"10.0.{leaf}.{d}") for leaf in (1, 2) for d in range(1, 51)]
    picks = {seed: [ecmp_spine(seed, *f, 2) for f in flows] for seed in range(8)}
    assert len({tuple(p) for p in picks.values()}) == 8  # every seed its own placement
    for p in picks.values():  # a fair coin per flow: 100 flows, far from all on one spine
        assert 30 <= sum(p) <= 70


def test_hashed_paths_follow_the_hash_and_cross_one_spine():
    topo = from_config(topo_cfg(routing="hash", ecmp_seed=7))
    for src, dst in (("h1", "h3"), ("h4", "h2")):
        leaf = topo.attach[src]
        spine = topo.spines[ecmp_spine(7, leaf, topo.ip(dst), 2)]
        assert topo.switch_path(src, dst) == [leaf, spine, topo.attach[dst]]
    assert topo.switch_path("h1", "h2") == ["tbl1"]  # same leaf: no spine


def colliding(topo, jobs):
    """Whether every job's first flow crosses the same spine."""
    return len({topo.switch_path(*j)[1] for j in jobs}) == 1


def test_path_selection_spreads_two_jobs_that_the_hash_collides():
    hashed = from_config(topo_cfg(routing="hash"))
    jobs = [("h1", "h3"), ("h2", "h4")]
    seed = next(s for s in range(100) if colliding(replace(hashed, ecmp_seed=s), jobs))
    collided = from_config(topo_cfg(routing="hash", ecmp_seed=seed))
    assert collided.switch_path("h1", "h3")[1] == collided.switch_path("h2", "h4")[1]
    spread = select_paths(from_config(topo_cfg(routing="path")), jobs)
    for a, b in ((0, 1), (1, 0)):  # both directions of the rings apart
        assert (
            spread.switch_path(jobs[0][a], jobs[0][b])[1]
            != spread.switch_path(jobs[1][a], jobs[1][b])[1]
        )


def test_config_selects_paths_for_its_jobs():
    cfg = load_config({
        "topology": topo_cfg(routing="path"),
        "jobs": [{"id": "a", "hosts": ["h1", "h3"], "iterations": 5},
                 {"id": "b", "hosts": ["h2", "h4"], "iterations": 5}],
        "schemes": ["baseline"],
    })  # fmt: skip
    topo = cfg.topology
    assert set(topo.spine_choice) == {
        ("tbl1", "h3"),
        ("tbl2", "h1"),
        ("tbl1", "h4"),
        ("tbl2", "h2"),
    }
    links_a = set(topo.ring_links(("h1", "h3")))
    links_b = set(topo.ring_links(("h2", "h4")))
    assert not links_a & links_b


def test_routing_is_checked():
    with pytest.raises(ValueError, match="routing"):
        from_config(topo_cfg(routing="random"))
    with pytest.raises(ConfigError, match="topology"):
        load_config({"topology": {"kind": "dumbbell", "pairs": 1, "bottleneck_bps": 1e8,
                                  "routing": "hash"}, "jobs": [], "schemes": []})  # fmt: skip


def test_flows_of_a_ring_cross_leaves_only():
    topo = leaf_spine(2, 2, 2)
    assert flows_of(topo, ["h1", "h2", "h3"]) == [("tbl1", "h3"), ("tbl2", "h1")]
