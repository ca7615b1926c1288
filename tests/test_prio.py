"""The ``prio`` fabric without root: its tc commands, the DSCP of each class, a job's
``priority`` in a config, and the Crux rule the testbed shares with the simulator."""

import numpy as np
import pytest
from conftest import require_module
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.priority import crux_levels
from cassini.sim.parts import priority as sim_priority
from testbed.fabric import FABRICS, PRIORITY_LEVELS, dscp_of, prio_commands, tos_of
from testbed.launch import dscp_setup
from testbed.run.load import ConfigError, load_config
from testbed.run.priorities import job_levels


def config(*jobs, fabric="prio"):
    return {
        "topology": {"kind": "dumbbell", "pairs": 3, "bottleneck_bps": 100e6, "fabric": fabric},
        "jobs": list(jobs),
        "schemes": ["baseline"],
    }


def job(name, hosts, **extra):
    return {"id": name, "hosts": hosts, "iterations": 10, **extra}


def test_class_selectors_from_highest_to_best_effort():
    assert [dscp_of(p) for p in range(PRIORITY_LEVELS)] == [56, 48, 40, 32, 24, 16, 8, 0]
    assert tos_of(0) == 0xE0
    with pytest.raises(ValueError, match="priority"):
        dscp_of(8)


def test_prio_commands_are_strict_priority_classes_matched_on_the_ds_field():
    cmds = [" ".join(c) for c in prio_commands("tbs1-eth3", 100e6, 50)]
    classes = [c for c in cmds if c.startswith("tc class add") and "parent 1:1 " in c]
    assert len(classes) == PRIORITY_LEVELS
    for p, c in enumerate(classes):
        assert c.endswith(f"prio {p}")
        # the highest class is guaranteed the link; the others borrow what it leaves
        assert ("rate 100000000bit" in c) == (p == 0)
        assert "ceil 100000000bit" in c
    filters = [c for c in cmds if "dsfield" in c]
    assert [f.split("dsfield ")[1].split()[0] for f in filters] == [
        f"{tos_of(p):#04x}" for p in range(PRIORITY_LEVELS - 1)
    ]
    assert "default 27" in cmds[0]  # unmarked packets: best effort, the lowest class
    assert FABRICS["prio"].marks_dscp and not FABRICS["fair"].marks_dscp


def test_a_jobs_priority_is_read_and_checked():
    cfg = load_config(config(job("a", ["h1", "h4"], priority=0), job("b", ["h2", "h5"])))
    assert [j.priority for j in cfg.jobs] == [0, None]
    for bad in (8, -1, "high", True, 1.5):
        with pytest.raises(ConfigError, match=r"jobs\[0\]\.priority"):
            load_config(config(job("a", ["h1", "h4"], priority=bad)))


def test_without_priority_the_crux_rule_ranks_the_more_intense_job_higher():
    # intensity = GPUs x compute / communication time: b computes 4x as long per bit
    cfg = load_config(
        config(
            job("a", ["h1", "h4"], compute_s=0.05, bytes=1_000_000),
            job("b", ["h2", "h5"], compute_s=0.20, bytes=1_000_000),
        )
    )
    assert job_levels(cfg) == {"b": 0, "a": 1}
    given_ = load_config(
        config(
            job("a", ["h1", "h4"], compute_s=0.05, priority=0),
            job("b", ["h2", "h5"], compute_s=0.2),
        )
    )
    assert job_levels(given_)["a"] == 0


def test_the_simulator_calls_the_same_rule():
    assert sim_priority.crux_levels is crux_levels


@settings(deadline=None)  # the first call may compile the cut programme (numba)
@given(
    st.lists(st.floats(0.01, 100.0), min_size=1, max_size=12),
    st.integers(1, 8),
    st.integers(0, 2**16),
)
def test_crux_levels_stay_in_range_and_respect_intensity_order(values, k, seed):
    intensities = {f"j{i}": v for i, v in enumerate(values)}
    shared = {j: {"link"} for j in intensities}  # all on one link: a full contention graph
    levels, prio, edges = crux_levels(intensities, shared, k, np.random.default_rng(seed))
    assert set(levels.values()) <= set(range(k))
    assert len(edges) == len(values) * (len(values) - 1) // 2
    for u in intensities:
        for v in intensities:
            if prio[u] > prio[v]:
                assert levels[u] <= levels[v]


def test_launch_marks_the_jobs_cgroup_with_its_dscp():
    cmd = dscp_setup(2, "job1")
    assert f"value {tos_of(2)} 0 0 0" in cmd
    assert 'bpftool cgroup attach "$CG" sock_ops' in cmd
    assert cmd.endswith('tee "$CG/cgroup.procs" >/dev/null')
    assert "mkdir" not in dscp_setup(2, "job1", in_cgroup=True)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 30),
    k=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_compiled_cut_programme_is_the_numpy_one(n, k, seed) -> None:
    from cassini import priority

    require_module("numba", "the [sim] extra: the compiled cut programme")
    rng = np.random.default_rng(seed)
    a = np.triu(rng.choice([0.0, 1.0, 2.5], size=(n, n)) * rng.random((n, n)), 1)
    within = priority._segment_costs(a)
    cost, choices = priority._cut_programme(within, k)
    cost_c, choices_c = priority._cut_programme_compiled(within, k)
    assert np.array_equal(cost, cost_c)
    assert np.array_equal(choices, choices_c)


@settings(max_examples=60, deadline=None)
@given(
    links=st.lists(st.sets(st.sampled_from("abcdef"), max_size=3), min_size=1, max_size=12),
    seed=st.integers(0, 2**16),
)
def test_contention_edges_join_exactly_the_jobs_that_share_a_link(links, seed) -> None:
    rng = np.random.default_rng(seed)
    shared = {f"j{i}": s for i, s in enumerate(links)}
    intensities = {j: float(rng.uniform(0.1, 10)) for j in shared}
    _, prio, edges = crux_levels(intensities, shared, 4, rng)
    ids = list(intensities)
    expected = [(u, v) for a, u in enumerate(ids) for v in ids[a + 1 :] if shared[u] & shared[v]]
    assert list(edges) == expected
    assert all(edges[(u, v)] == min(prio[u], prio[v]) for u, v in expected)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 25), seed=st.integers(0, 2**16))
def test_compiled_segment_costs_are_the_numpy_ones(n, seed) -> None:
    from cassini import priority

    require_module("numba", "the [sim] extra: the compiled segment costs")
    rng = np.random.default_rng(seed)
    a = np.triu(rng.random((n, n)) * 3.7, 1)
    assert np.array_equal(priority._segment_costs(a), priority._segment_costs_compiled(a))


def test_crux_levels_do_not_depend_on_string_hashing() -> None:
    """The random topological orders walk neighbours in priority order, so the levels are
    the same in every process (Python salts string hashes per process)."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from cassini.priority import crux_levels\n"
        "rng = np.random.default_rng(1)\n"
        "links = [set(rng.choice(list('abcdefghijklmnop'), size=3)) for _ in range(60)]\n"
        "inten = {f'job{i}': float(rng.uniform(0.1, 10)) for i in range(60)}\n"
        "shared = {f'job{i}': s for i, s in enumerate(links)}\n"
        "print(sorted(crux_levels(inten, shared, 8, np.random.default_rng(5))[0].items()))\n"
    )
    outs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outs.add(run.stdout)
    assert len(outs) == 1
