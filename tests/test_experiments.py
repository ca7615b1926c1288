"""Every experiment's configs parse with the runner, and experiment 1 runs end to end
(tiny) on the emulated cluster."""

import json
import os
import shutil

import numpy as np
import pytest
from conftest import require

from experiments import link_interleaving, mltcp_convergence, placement, regimes
from mltcp.policy import MltcpParams
from testbed.runner import load_config
from testbed.topo import from_config


@pytest.mark.parametrize("job_set", ["pair", "trio"])
@pytest.mark.parametrize("fabric", ["fair", "ecn", "fifo"])
def test_link_interleaving_configs(job_set, fabric):
    schemes = link_interleaving.schemes_for(fabric, with_mltcp=True)
    cfg = load_config(link_interleaving.experiment_config(job_set, fabric, 10, schemes))
    assert len(cfg.jobs) == link_interleaving.JOB_SETS[job_set][2]
    assert {s.name for s in cfg.schemes} >= {"ideal", "baseline", "random", "cassini"}
    assert ("mltcp-dctcp" in {s.name for s in cfg.schemes}) == (fabric == "ecn")


def test_regimes_grid_configs():
    for full in (False, True):
        for case in regimes.grid(full):
            cfg = load_config(
                regimes.regime_config(
                    case["fabric"], case["buffer"], case["cc"], case["jobs"], case["jitter"], 10
                )
            )
            assert cfg.topology.fabric.kind == case["fabric"]
            assert len(cfg.jobs) == case["jobs"]


def test_placement_candidates_and_configs():
    topo = from_config(dict(placement.TOPOLOGY))
    offers = placement.candidates(6, list(topo.hosts), seed=1)
    assert len(offers) == 6 and len({json.dumps(o, sort_keys=True) for o in offers}) == 6
    for offer in offers:
        hosts = [h for pair in offer.values() for h in pair]
        assert sorted(hosts) == sorted(topo.hosts)  # every host used once
        cfg = load_config(placement.config(offer, ["ideal", "baseline"], 5, True, "fair"))
        assert {j.kind for j in cfg.jobs} == {"synthetic", "ddp"}


def test_mltcp_convergence_config_and_model_sweep():
    cfg = load_config(mltcp_convergence.config("ecn", "dctcp_bpf", "mltcp_dctcp", 10))
    assert [s.cc for s in cfg.schemes] == [None, "dctcp_bpf", "mltcp_dctcp"]
    for fabric, base, ml, n in mltcp_convergence.CASES.values():
        cfg = load_config(mltcp_convergence.config(fabric, base, ml, 10, n, comm_s=0.06))
        assert len(cfg.jobs) == n and cfg.topology.fabric.kind == fabric
        # each job communicates 1/n of its iteration: together they fill the link
        assert all(j.compute_s == pytest.approx((n - 1) * 0.06) for j in cfg.jobs)
    pair = mltcp_convergence.model_run([0.0, 0.0005], 0.05, 0.05, 20, MltcpParams(), "mltcp")
    assert pair["offsets"][0] == pytest.approx(0.01, abs=1e-3)
    assert pair["interleaved_at"] is not None and pair["offsets"][-1] > 0.95
    trio = mltcp_convergence.model_run([0.0, 0.001, 0.002], 0.1, 0.05, 20, MltcpParams(), "fair")
    assert "offsets" not in trio and trio["overlap"][0] > 0.9  # fair sharing stays overlapped
    sweep = mltcp_convergence.sweep(iterations=20)
    k = np.array(sweep["iterations_to_interleave"])
    assert k.shape == (6, 3, 3)
    # a steeper slope never interleaves later (intercept 0.5, offset 0.1)
    column = [x for x in k[:, 1, 1] if x >= 0]
    assert column == sorted(column, reverse=True)
    assert mltcp_convergence.interleaved_at([0.9, 0.5, 0.1, 0.1, 0.05]) == 2
    assert mltcp_convergence.interleaved_at([0.9, 0.9]) is None


@pytest.mark.root
def test_experiment_1_tiny_run(tmp_path):
    require(os.geteuid() == 0, "root")
    require(shutil.which("mnexec") is not None, "mnexec (run make setup)")
    code = link_interleaving.main(
        [
            "--sets",
            "pair",
            "--fabrics",
            "fair",
            "--iterations",
            "6",
            "--no-mltcp",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "results.json").read_text())
    rows = {r["scheme"]: r for r in report["runs"]["pair-fair"]["rows"]}
    assert set(rows) == {"ideal", "baseline", "random", "cassini"}
    assert rows["ideal"]["mean_vs_ideal"] == pytest.approx(1.0)
    assert (tmp_path / "cdf_pair-fair.png").exists()
    assert (tmp_path / "timeline_pair-fair.png").exists()
