"""ECMP on the real leaf-spine testbed: the bytes of each flow cross the spine the seeded
hash picks.  Needs root; in CI (CI=true) a missing prerequisite fails instead of skipping."""

import pytest

from testbed.run import load_config, run_experiment
from testbed.topo import LinkDirection

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("testbed_host")]


def config(seed):
    job = {"kind": "synthetic", "compute_s": 0.02, "bytes": 500_000, "iterations": 6}
    return {
        "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2,
                     "host_bps": 400e6, "fabric": "fair", "routing": "hash", "ecmp_seed": seed},
        "jobs": [{"id": "a", "hosts": ["h1", "h3"], **job},
                 {"id": "b", "hosts": ["h2", "h4"], **job}],
        "schemes": ["baseline"],
    }  # fmt: skip


@pytest.mark.parametrize("seed", [1, 3])  # 1: both jobs on tbp2; 3: one per spine
def test_flows_cross_the_spines_the_seeded_hash_picks(tmp_path, seed):
    cfg = load_config(config(seed))
    topo = cfg.topology
    res = run_experiment(cfg, tmp_path, progress=lambda m: None)
    carried = {LinkDirection.parse(d): b for d, b in res.schemes["baseline"].link_bytes.items()}
    expected = {d for j in cfg.jobs for d in topo.ring_links(j.hosts) if d in carried}
    # each rank sends 500 kB per iteration: the hashed uplinks and downlinks carry them,
    # the spines' other links next to nothing
    for d in expected:
        assert carried[d] > 5 * 500_000, (d, carried)
    others = sum(b for d, b in carried.items() if d not in expected)
    assert others < 0.01 * sum(carried.values()), carried
    print(f"seed {seed}: spines {sorted({d.dst for d in expected if d.dst in topo.spines})}")
