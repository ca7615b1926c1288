"""The engine and its parts on a general :class:`Topology`: a ``Cluster`` run and the
same run on the equivalent generated fabric agree exactly; irregular host tables run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cassini.sim.engine import SimResult, run
from cassini.sim.options import SimOptions
from cassini.sim.parts.placement import candidate_placements, racks_needed
from cassini.sim.topologies.clos import from_cluster, two_tier
from cassini.sim.topologies.hosts import read_host_table
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
