"""Composed scheduler names, the parts tables, Crux's max-K-cut, and the metrics in
every results.json."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.errors import InputError
from cassini.sim.parts import KINDS
from cassini.sim.parts.priority import band_levels, cut_weight, max_k_cut_levels
from cassini.sim.schedulers import Scheduler

NAMED = [
    "themis",
    "pollux",
    "ideal",
    "themis+cassini",
    "themis+random",
    "pollux+cassini",
    "themis+mltcp",
    "themis+crux",
    "themis+crux+cassini",
    "themis+cassini+mltcp",
    "themis+defrag",
    "pollux+crux",
    "fifo+ecmp",
    "las+crux+mltcp+defrag",
]
TOKENS = [
    "cassini", "crux", "random", "defrag", "ecmp", "mltcp", "priority", "held", "free", "single",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMED)
def test_named_schedulers_round_trip(name) -> None:
    s = Scheduler.parse(name)
    again = Scheduler.parse(s.canonical)
    assert again == Scheduler(again.name, **{k: getattr(s, k) for k in vars(s) if k != "name"})


@settings(max_examples=200, deadline=None)
@given(
    policy=st.sampled_from(sorted(KINDS["queue"])),
    tokens=st.lists(st.sampled_from(TOKENS), max_size=4, unique=True),
)
def test_any_composition_round_trips_or_names_the_conflict(policy, tokens) -> None:
    name = "+".join([policy, *tokens])
    try:
        s = Scheduler.parse(name)
    except InputError as e:  # two parts of one kind, or a part a bundle already gives
        assert "give at most one" in e.problem or (
            "twice (bundle" in e.problem and "give each part once" in e.problem
        )
        return
    again = Scheduler.parse(s.canonical)
    assert {k: getattr(again, k) for k in vars(s) if k != "name"} == {
        k: getattr(s, k) for k in vars(s) if k != "name"
    }
    assert Scheduler.parse("+".join([policy, *reversed(tokens)])).canonical == s.canonical


def test_bundles_stand_for_their_parts() -> None:
    s = Scheduler.parse("themis+crux+cassini+mltcp")
    assert (s.routing, s.priority, s.placement, s.held, s.mltcp) == (
        "crux",
        True,
        "cassini",
        True,
        True,
    )
    assert Scheduler.parse("themis+cassini").placement == "cassini"  # today's names
    assert Scheduler.parse("pollux+first").placement == "first"


def test_a_new_table_entry_is_a_new_part(monkeypatch) -> None:
    """docs/extending.md's example: one function, one table entry."""
    from cassini.sim.engine import run
    from cassini.sim.parts import queue
    from cassini.sim.topology import Cluster
    from cassini.sim.workload import load_library, poisson_jobs

    def sjf(q, free_gpus, now_s, iteration_time_s):
        ranked = sorted(q, key=lambda j: (j.iterations * iteration_time_s[j.model], j.arrival_s))
        return [queue.Decision(j, j.gpus, j.iterations) for j in ranked]

    monkeypatch.setitem(queue.QUEUE_POLICIES, "sjf", sjf)
    s = Scheduler.parse("sjf+crux+mltcp")
    assert (s.policy, s.routing, s.mltcp) == ("sjf", "crux", True)
    lib = load_library()
    c = Cluster(racks=2, servers_per_rack=2, gpus_per_server=2)
    jobs = poisson_jobs(10, 2.0, c.gpus, lib, gpus={2: 1, 6: 1}, iterations=(10, 50), seed=0)
    assert len(run(c, jobs, lib, "sjf+cassini").jobs) == 10
    with pytest.raises(InputError, match="queue: themis, pollux, fifo, las, recorded, sjf"):
        Scheduler.parse("sjf+nosuch")


def test_unknown_part_lists_every_part_by_kind() -> None:
    with pytest.raises(InputError) as e:
        Scheduler.parse("themis+turbo")
    assert "'turbo'" in e.value.problem
    for kind, table in KINDS.items():
        assert f"{kind}: {', '.join(table)}" in e.value.problem
    with pytest.raises(InputError, match="'slurm'"):
        Scheduler.parse("slurm+cassini")
    with pytest.raises(InputError, match="2 placement parts"):
        Scheduler.parse("themis+cassini+random")


def _config(tmp_path, schedulers, **extra):
    body = {
        "cluster": {"racks": 4, "servers_per_rack": 2, "gpus_per_server": 4, "spines": 2},
        "workload": {
            "poisson": {"jobs": 12, "load": 0.9, "gpus": {4: 1, 12: 1}, "iterations": [50, 100]}
        },
        "schedulers": schedulers,
        "seed": 1,
    } | extra
    path = tmp_path / "c.json"
    path.write_text(json.dumps(body))
    return path


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "cassini.cli", "sim", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_scheduler_exits_2_naming_the_part(tmp_path) -> None:
    p = _cli("run", _config(tmp_path, ["themis+warp"]), "--out", tmp_path / "o", "--quiet")
    assert p.returncode == 2
    assert "'warp'" in p.stderr and "routing: single, ecmp, crux" in p.stderr
    p = _cli(
        "run",
        _config(tmp_path, ["themis"]),
        "--out",
        tmp_path / "o",
        "--quiet",
        "--scheduler",
        "pollux+nosuch",
    )
    assert p.returncode == 2 and "'nosuch'" in p.stderr
    p = _cli("run", _config(tmp_path, ["themis"], routing="warp"), "--out", tmp_path / "o")
    assert p.returncode == 2 and "routing" in p.stderr


def test_every_results_json_carries_the_metrics_per_scheduler(tmp_path) -> None:
    names = ["ideal", "themis", "themis+crux", "themis+cassini+mltcp", "themis+defrag"]
    out = tmp_path / "o"
    p = _cli("run", _config(tmp_path, names, routing="ecmp"), "--out", out, "--quiet")
    assert p.returncode == 0, p.stderr
    data = json.loads((out / "results.json").read_text())
    assert list(data["summaries"]) == names
    for name, s in data["summaries"].items():
        assert 0 < s["gpu_utilisation"] <= 1, name
        for key in (
            "migrations",
            "ecmp_collisions",
            "excess_demand_s_total",
            "worst_job_slowdown",
            "lowest_priority_decile",
            "placements_advised",
        ):
            assert key in s, (name, key)
    assert (
        data["summaries"]["ideal"]["gpu_utilisation"]
        >= max(s["gpu_utilisation"] for s in data["summaries"].values()) - 1e-9
    )


# -- Crux's max-K-cut ---------------------------------------------------------------------
def _brute_force_within(order, edges, k):
    """Least within-level weight over every cut of ``order`` into <= k contiguous levels."""
    n, best = len(order), np.inf
    for cuts in itertools.chain.from_iterable(
        itertools.combinations(range(1, n), m) for m in range(k)
    ):
        bounds = [0, *cuts, n]
        level = {}
        for lv, (a, b) in enumerate(itertools.pairwise(bounds)):
            for j in order[a:b]:
                level[j] = lv
        best = min(best, sum(w for (u, v), w in edges.items() if level[u] == level[v]))
    return best


@settings(max_examples=80, deadline=None)
@given(
    prio=st.lists(st.floats(0.1, 100), min_size=2, max_size=8),
    density=st.floats(0.2, 1.0),
    k=st.integers(2, 4),
    seed=st.integers(0, 1000),
)
def test_max_k_cut_is_optimal_on_the_priority_order_and_beats_bands(prio, density, k, seed):
    rng = np.random.default_rng(seed)
    jobs = {f"j{i}": p for i, p in enumerate(prio)}
    ids = sorted(jobs)
    edges = {
        (u, v): min(jobs[u], jobs[v])
        for a, u in enumerate(ids)
        for v in ids[a + 1 :]
        if rng.random() < density
    }
    levels = max_k_cut_levels(jobs, edges, k, rng)
    assert set(levels.values()) <= set(range(k))
    order = sorted(jobs, key=lambda j: (-jobs[j], j))
    total = sum(edges.values())
    # at least as good as the best cut of the plain priority order (one of the orders)
    assert cut_weight(levels, edges) >= total - _brute_force_within(order, edges, k) - 1e-9
    assert cut_weight(levels, edges) >= cut_weight(band_levels(order, k), edges) - 1e-9
    # contending jobs keep their priority order across levels
    for u, v in edges:
        if jobs[u] > jobs[v]:
            assert levels[u] <= levels[v]
