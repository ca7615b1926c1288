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


def _fake_run(tmp_path, schemes, jobs=("a", "b"), period=0.1, n=20):
    """Worker logs and a results dict shaped like the runner's, for plotting tests."""
    res = {"schemes": {}}
    for k, name in enumerate(schemes):
        (tmp_path / name).mkdir()
        res["schemes"][name] = {"jobs": {}}
        for i, j in enumerate(jobs):
            slow = 1.0 + 0.1 * k + 0.05 * i
            recs = [
                {
                    "iter": t,
                    "start": t * period * slow,
                    "comm_start": (t + 0.5) * period * slow,
                    "end": (t + 1) * period * slow,
                    "bytes_sent": 1_000_000,
                }
                for t in range(n)
            ]
            (tmp_path / name / f"{j}-rank0.jsonl").write_text(
                "\n".join(json.dumps(r) for r in recs) + "\n"
            )
            res["schemes"][name]["jobs"][j] = {"iteration_times_s": [period * slow] * n}
    return res


def test_timeline_plot_takes_the_schemes_to_show(tmp_path):
    res = _fake_run(tmp_path, ["ideal", "dctcp_bpf", "mltcp_dctcp"])
    out = tmp_path / "t.png"
    link_interleaving.plot_timeline(tmp_path, res, out, "t", schemes=["dctcp_bpf", "mltcp_dctcp"])
    assert out.stat().st_size > 0
    with pytest.raises(ValueError, match="none of"):
        link_interleaving.plot_timeline(tmp_path, res, out, "t", schemes=["nope"])


def test_demo_rows_use_the_fastest_identical_job_as_ideal(tmp_path):
    from experiments import demo

    res = _fake_run(tmp_path, ["ideal", "base"])
    res["schemes"]["ideal"]["summary"] = {
        j: {"mean_s": v["iteration_times_s"][0], "p99_s": v["iteration_times_s"][0]}
        for j, v in res["schemes"]["ideal"]["jobs"].items()
    }
    rows = {r["scheme"]: r for r in demo.rows_of(res, "x", identical=True)}
    assert rows["ideal"]["mean_vs_ideal"] == pytest.approx(1.025)  # job b alone is 5 % slower
    assert rows["base"]["mean_vs_ideal"] == pytest.approx(1.125)


def test_repeated_runs_are_summarised_by_median_range_and_count():
    rows = [
        {"case": "ecn", "scheme": "m", "last_vs_ideal": v, "interleaved_at": at}
        for v, at in ((1.02, 11), (1.30, "never"), (1.05, 37))
    ] + [{"case": "ecn", "scheme": "model", "interleaved_at": 6}]
    s = {r["scheme"]: r for r in mltcp_convergence.summarise_repeats(rows)}
    assert s["m"]["last_median"] == pytest.approx(1.05)
    assert s["m"]["last_range"] == "1.02-1.30"
    assert s["m"]["interleaved"] == "2 of 3" and s["m"]["at_median"] == 24
    assert s["model"]["at_median"] == 6 and "last_median" not in s["model"]
