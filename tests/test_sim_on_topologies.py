"""The engine and its parts on a general :class:`Topology`: a ``Cluster`` run and the
same run on the equivalent generated fabric agree exactly; irregular host tables run."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini import cli
from cassini.sim.engine import SimResult, run
from cassini.sim.options import SimOptions
from cassini.sim.parts.placement import candidate_placements, defrag_move, racks_needed
from cassini.sim.parts.routing import (
    collisions,
    crux_paths,
    path_count,
    path_load,
    route_path,
    uplinks,
)
from cassini.sim.report import sweep
from cassini.sim.report.utilisation import link_weights, utilisation
from cassini.sim.topologies.clos import from_cluster, three_tier, two_tier
from cassini.sim.topologies.fabric import physical_link
from cassini.sim.topologies.fat_tree import fat_tree
from cassini.sim.topologies.hosts import read_host_table
from cassini.sim.topologies.rail import rail_optimised
from cassini.sim.topology import Cluster
from cassini.sim.workload import load_library, poisson_jobs

LIBRARY = load_library()
DATA = Path(__file__).parent / "data" / "topologies"


def outcome(result: SimResult) -> list[tuple]:
    """What must match between two runs: every job's placement, start and finish."""
    return sorted((j.job_id, j.placement, j.start_s, j.finish_s) for j in result.jobs)


def uniform_jobs(gpus: int, n: int = 40, seed: int = 5):
    return poisson_jobs(n, 0.9, gpus, LIBRARY, gpus={4: 1, 8: 2, 24: 1, 40: 1}, seed=seed)


@pytest.mark.parametrize("scheduler", ["themis", "themis+cassini"])
@pytest.mark.parametrize("pods", [None, 2])
def test_cluster_and_its_generated_fabric_run_identically(scheduler: str, pods) -> None:
    c = Cluster(racks=4, servers_per_rack=4, gpus_per_server=4, racks_per_pod=pods)
    jobs = uniform_jobs(c.gpus)
    a = run(c, jobs, LIBRARY, scheduler, seed=2)
    b = run(from_cluster(c), jobs, LIBRARY, scheduler, seed=2)
    assert any(j.racks > 1 for j in a.jobs)  # the network mattered
    assert outcome(a) == outcome(b)
    assert a.summary()["mean_slowdown"] == b.summary()["mean_slowdown"]


@pytest.mark.parametrize("scheduler", ["themis+ecmp", "themis+crux", "themis+cassini+ecmp"])
def test_spine_routing_on_cluster_and_two_tier_fabric_agree(scheduler: str) -> None:
    c = Cluster(racks=6, servers_per_rack=4, gpus_per_server=4, spines=4)
    topo = two_tier(6, 4, 4, c.server_link_bps, c.oversubscription, spines=4)
    jobs = uniform_jobs(c.gpus, n=50, seed=3)
    a = run(c, jobs, LIBRARY, scheduler, seed=3)
    b = run(topo, jobs, LIBRARY, scheduler, seed=3)
    assert outcome(a) == outcome(b)
    assert a.collisions == b.collisions
    if "ecmp" in scheduler:
        assert a.collisions > 0


def test_placement_packs_irregular_racks() -> None:
    topo = read_host_table(DATA / "hosts_irregular.csv")
    free = np.array(topo.gpus_per_host, int)
    # rack sizes and GPUs differ: the packed candidate fills the fullest rack first
    options = candidate_placements(topo, free, 20, 5, np.random.default_rng(0))
    first = options[0]
    assert sum(first.values()) == 20
    assert len({topo.rack_of(s) for s in first}) == racks_needed(topo, 20)
    for option in options:
        assert sum(option.values()) == 20
        assert all(0 < g <= free[s] for s, g in option.items())
    assert candidate_placements(topo, free, int(free.sum()) + 1, 5, np.random.default_rng(0)) == []


@pytest.mark.parametrize("scheduler", ["themis", "themis+cassini"])
@pytest.mark.parametrize(
    "table, kwargs",
    [("lingjun_irregular.csv", {"gpus_per_server": 8}), ("hosts_irregular.csv", {})],
)
def test_irregular_host_tables_run(scheduler: str, table: str, kwargs: dict) -> None:
    """Racks of 2-5 hosts (Lingjun header), or of different sizes with 4- and 8-GPU
    hosts (ours): every job runs, on GPUs its hosts have."""
    topo = read_host_table(DATA / table, **kwargs)
    jobs = poisson_jobs(30, 0.9, topo.gpus, LIBRARY, gpus={4: 1, 8: 1, 16: 1, 24: 1}, seed=1)
    result = run(topo, jobs, LIBRARY, scheduler, seed=1, options=SimOptions())
    assert len(result.jobs) == len(jobs)
    per_host = np.array(topo.gpus_per_host)
    for j in result.jobs:
        assert sum(g for _, g in j.placement) == j.gpus
        assert all(g <= per_host[s] for s, g in j.placement)
    assert any(j.racks > 1 for j in result.jobs)
    s = result.summary()
    assert np.isfinite(s["mean_slowdown"]) and s["mean_slowdown"] >= 1 - 1e-9


def test_path_index_picks_one_alternative_of_every_hop() -> None:
    topo = fat_tree(4)
    racks = [0, 1, 2]  # two racks of pod 0, one of pod 1
    assert path_count(topo, racks) == 4  # the inter-pod hops have k*k/4 paths
    assert path_count(topo, [0]) == 1
    seen = set()
    for k in range(4):
        path = route_path(topo, [0, 2, 4], k)
        up = uplinks(topo, racks, k)
        assert set(up) <= set(path) and set(path) - set(up) == {"srv0", "srv2", "srv4"}
        for a, b in [(0, 1), (1, 2), (2, 0)]:
            options = topo.paths(a, b)
            assert set(options[k % len(options)]) <= set(up)
        seen.add(frozenset(up))
    assert len(seen) == 4
    assert route_path(topo, [0, 2, 4], None) == route_path(topo, [0, 2, 4], 0)


def test_collisions_on_a_fabric_count_busy_uplinks_with_an_idle_sibling() -> None:
    c = Cluster(racks=3, servers_per_rack=2, gpus_per_server=1, spines=2)
    topo = two_tier(3, 2, 1, spines=2)
    cluster_load = {"tor0s0": 5.0, "tor1s0": 5.0, "tor1s1": 5.0}
    fabric_load = {f"{link}:{d}": 5.0 for link in ("tor0-spine0", "tor1-spine0", "tor1-spine1")
                   for d in ("up", "down")}  # fmt: skip
    for k in range(2):
        expected = collisions(c, [0, 1, 2], k, cluster_load)
        assert collisions(topo, [0, 1, 2], k, fabric_load) == expected
    assert collisions(topo, [0, 1, 2], 0, fabric_load) == 1


@settings(max_examples=80, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.sets(st.integers(0, 7), min_size=2, max_size=4), st.floats(1, 100)),
        min_size=1,
        max_size=10,
    ),
)
def test_crux_on_a_fat_tree_never_takes_a_more_loaded_path(jobs) -> None:
    topo = fat_tree(4)
    named = [(f"j{i}", sorted(racks), peak) for i, (racks, peak) in enumerate(jobs)]
    chosen = crux_paths(topo, named)
    current: dict[str, float] = {}
    for job_id, racks, peak in named:
        k = chosen[job_id]
        for other in range(path_count(topo, racks)):
            assert path_load(topo, racks, k, current) <= path_load(topo, racks, other, current)
        for link in uplinks(topo, racks, k):
            current[link] = current.get(link, 0.0) + peak


@pytest.mark.parametrize("scheduler", ["themis+ecmp", "themis+crux"])
def test_multipath_routing_runs_on_a_fat_tree(scheduler: str) -> None:
    topo = fat_tree(4, gpus_per_server=4)
    jobs = uniform_jobs(topo.gpus, n=30, seed=4)
    result = run(topo, jobs, LIBRARY, scheduler, seed=4)
    assert len(result.jobs) == len(jobs)
    assert any(j.racks > 1 for j in result.jobs)
    if scheduler == "themis+ecmp":
        again = run(topo, jobs, LIBRARY, scheduler, seed=4)
        assert outcome(again) == outcome(result) and again.collisions == result.collisions


def test_cli_runs_a_host_table_config(tmp_path: Path) -> None:
    shutil.copy(DATA / "lingjun_irregular.csv", tmp_path / "topo.csv")
    config = {
        "cluster": {"hosts": "topo.csv", "gpus_per_server": 8, "server_link_bps": 2e11},
        "workload": {"poisson": {"jobs": 8, "load": 0.8, "gpus": {16: 1, 24: 1}}},
        "schedulers": ["themis", "themis+cassini"],
    }
    (tmp_path / "sim.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    assert cli.main(["sim", "run", str(tmp_path / "sim.json"), "--out", str(out), "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["cluster"]["gpus"] == 128
    topo = read_host_table(tmp_path / "topo.csv", gpus_per_server=8)
    for name in ("themis", "themis+cassini"):
        records = results["jobs"][name]
        assert len(records) == 8
        assert any(r["racks"] > 1 for r in records)
        for r in records:
            assert r["racks"] == len({topo.rack_of(s) for s, _ in r["placement"]})
    assert (out / "report.html").exists()


def test_utilisation_spreads_a_job_over_its_equal_cost_paths() -> None:
    topo = two_tier(2, 2, 4, spines=4)
    weights = link_weights(topo, [0, 2])
    assert weights["srv0"] == weights["srv2"] == pytest.approx(1.0)
    for k, d in itertools.product(range(4), ("up", "down")):  # both ways: a two-rack ring
        assert weights[f"tor0-spine{k}:{d}"] == weights[f"tor1-spine{k}:{d}"] == pytest.approx(0.25)
    # the same per-capacity view as the Cluster's summed uplinks
    c = Cluster(racks=4, servers_per_rack=4, gpus_per_server=4)
    jobs = uniform_jobs(c.gpus, n=20)
    a = utilisation(run(c, jobs, LIBRARY, "themis", seed=2), c, LIBRARY)
    t = from_cluster(c)
    b = utilisation(run(t, jobs, LIBRARY, "themis", seed=2), t, LIBRARY)
    per_link = dict(zip(map(physical_link, b.links), b.link_share.sum(axis=1), strict=False))
    for link, total in zip(b.links, b.link_share.sum(axis=1), strict=True):
        assert total == pytest.approx(per_link[physical_link(link)])  # each way the same
    assert sorted(a.link_share.sum(axis=1)) == pytest.approx(sorted(per_link.values()))
    assert np.array_equal(a.gpu_allocated, b.gpu_allocated)


@pytest.mark.parametrize(
    "topo",
    [
        rail_optimised(groups=2, servers_per_group=6, gpus_per_server=4),
        three_tier(4, 4, 2, 4, aggs_per_pod=2, cores=2),
    ],
    ids=["rail-optimised", "three-tier-2x2"],
)
@pytest.mark.parametrize("scheduler", ["themis+cassini", "themis+defrag", "themis+crux"])
def test_generated_fabrics_run(topo, scheduler: str) -> None:
    jobs = uniform_jobs(topo.gpus, n=30, seed=6)
    result = run(topo, jobs, LIBRARY, scheduler, seed=6)
    assert len(result.jobs) == len(jobs)
    assert any(j.racks > 1 for j in result.jobs)
    assert all(j.slowdown >= 1 - 1e-9 for j in result.jobs)


def test_defrag_moves_on_irregular_racks() -> None:
    topo = read_host_table(DATA / "lingjun_irregular.csv", gpus_per_server=8)
    free = np.array(topo.gpus_per_host, int)
    # a 16-GPU job spread over three racks while one 5-host rack is empty
    big = max(range(len(topo.racks)), key=lambda r: len(topo.racks[r]))
    others = [r for r in range(len(topo.racks)) if r != big]
    spread = {topo.racks[r][0]: 8 for r in others[:2]}
    for s, g in spread.items():
        free[s] -= g
    assert racks_needed(topo, 16) == 1
    move = defrag_move(topo, free, spread)
    assert move is not None
    new, moved = move
    assert sum(new.values()) == 16 and len({topo.rack_of(s) for s in new}) == 1
    assert moved == 16


def test_sweep_over_a_host_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oversubscription axis rebuilds a host table; one whose file gives its uplink
    speeds cannot take it, and the sweep exits 2 naming the field before any run."""
    for name in ("lingjun_irregular.csv", "hosts_irregular.csv"):
        shutil.copy(DATA / name, tmp_path / name)
    base = {
        "workload": {"poisson": {"jobs": 6, "load": 0.8, "gpus": {12: 1, 20: 1}}},
        "schedulers": ["themis"],
        "sweep": {"oversubscription": [1, 4]},
    }
    good = base | {"cluster": {"hosts": "lingjun_irregular.csv", "gpus_per_server": 8}}
    (tmp_path / "good.json").write_text(json.dumps(good))
    args = ["--out", str(tmp_path / "out"), "--workers", "1", "--backend", "pool"]
    assert cli.main(["sim", "sweep", str(tmp_path / "good.json"), *args]) == 0
    rows = json.loads((tmp_path / "out" / "sweep.json").read_text())["rows"]
    slow = {r["oversubscription"]: r["mean_slowdown"] for r in rows}
    assert slow[4] > slow[1]  # thinner uplinks: the axis reached the fabric
    bad = base | {"cluster": {"hosts": "hosts_irregular.csv"}}
    (tmp_path / "bad.json").write_text(json.dumps(bad))

    def no_run(*_: object) -> None:
        raise AssertionError("a grid point ran")

    monkeypatch.setattr(sweep, "run_point", no_run)  # Ray workers would fail far away
    assert cli.main(["sim", "sweep", str(tmp_path / "bad.json"), *args]) == 2
    assert "bad.json: sweep.oversubscription" in capsys.readouterr().err
