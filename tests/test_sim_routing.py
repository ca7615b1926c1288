"""ECMP hashing, collisions and Crux's path selection over several spines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.errors import InputError
from cassini.sim.engine import run
from cassini.sim.options import SimOptions
from cassini.sim.parts.routing import (
    collisions,
    crux_paths,
    ecmp_spine,
    path_load,
)
from cassini.sim.topology import Cluster
from cassini.sim.workload import load_library, poisson_jobs

LIBRARY = load_library()


def test_spines_split_the_uplink_and_name_paths() -> None:
    c = Cluster(racks=4, servers_per_rack=8, gpus_per_server=8, oversubscription=2, spines=4)
    assert c.links["tor1s3"] == pytest.approx(c.tor_uplink_bps / 4)
    assert c.links["tor1"] == pytest.approx(c.tor_uplink_bps)
    assert c.path([0, 8], spine=2) == ("srv0", "srv8", "tor0s2", "tor1s2")
    assert c.path([0, 8]) == ("srv0", "srv8", "tor0", "tor1")
    assert Cluster.from_dict(c.to_dict()) == c
    with pytest.raises(InputError, match="cluster.spines"):
        Cluster.from_dict({"racks": 2, "servers_per_rack": 2, "gpus_per_server": 1, "spines": 0})


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**31), job=st.text(min_size=1, max_size=12), spines=st.integers(1, 16))
def test_ecmp_hash_is_deterministic_per_seed(seed, job, spines) -> None:
    k = ecmp_spine(job, seed, spines)
    assert 0 <= k < spines and k == ecmp_spine(job, seed, spines)


def test_ecmp_hash_depends_on_the_seed_and_spreads() -> None:
    a = [ecmp_spine(f"j{i}", 0, 4) for i in range(400)]
    b = [ecmp_spine(f"j{i}", 1, 4) for i in range(400)]
    assert a != b
    assert all(60 < a.count(k) < 140 for k in range(4))


def test_collisions_count_busy_uplinks_with_an_idle_alternative() -> None:
    c = Cluster(racks=3, servers_per_rack=2, gpus_per_server=1, spines=2)
    load = {"tor0s0": 5.0, "tor1s0": 5.0, "tor1s1": 5.0}
    assert collisions(c, [0, 1, 2], 0, load) == 1  # rack 0 only: rack 1 has no idle spine
    assert collisions(c, [0, 1, 2], 1, load) == 0


def _run(name: str, seed: int = 3):
    c = Cluster(racks=8, servers_per_rack=4, gpus_per_server=4, spines=4)
    jobs = poisson_jobs(60, 0.9, c.gpus, LIBRARY, gpus={8: 1, 24: 1, 40: 1}, seed=seed)
    return run(c, jobs, LIBRARY, name, seed=seed, options=SimOptions(routing="ecmp"))


def test_ecmp_runs_are_deterministic_per_seed_and_count_collisions() -> None:
    a, b = _run("themis"), _run("themis")
    assert a.collisions == b.collisions > 0
    assert [j.finish_s for j in a.jobs] == [j.finish_s for j in b.jobs]
    assert a.summary()["ecmp_collisions"] == a.collisions
    assert _run("themis+single").collisions == 0  # one aggregate path: nothing to collide


@settings(max_examples=150, deadline=None)
@given(
    spines=st.integers(2, 5),
    jobs=st.lists(
        st.tuples(st.sets(st.integers(0, 5), min_size=2, max_size=4), st.floats(1, 100)),
        min_size=1,
        max_size=12,
    ),
    background=st.dictionaries(st.integers(0, 29), st.floats(0, 100), max_size=10),
)
def test_crux_path_selection_never_takes_a_more_loaded_path(spines, jobs, background) -> None:
    """Replaying the choices in order, each job's spine is no more loaded (most-loaded
    uplink, then sum) than any spine it skipped."""
    c = Cluster(racks=6, servers_per_rack=1, gpus_per_server=1, spines=spines)
    load = {c.uplink(i // spines, i % spines): v for i, v in background.items() if i < 6 * spines}
    named = [(f"j{i}", sorted(racks), peak) for i, (racks, peak) in enumerate(jobs)]
    chosen = crux_paths(c, named, load)
    current = dict(load)
    for job_id, racks, peak in named:
        k = chosen[job_id]
        for other in range(spines):
            assert path_load(c, racks, k, current) <= path_load(c, racks, other, current)
        for r in racks:
            link = c.uplink(r, k)
            current[link] = current.get(link, 0.0) + peak


def test_crux_routing_avoids_collisions_that_ecmp_has() -> None:
    ecmp, crux = _run("themis+ecmp"), _run("themis+crux")
    assert crux.collisions < ecmp.collisions
    assert np.isfinite(crux.summary()["mean_slowdown"])
