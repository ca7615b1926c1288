"""Real-architecture DDP jobs on the emulated cluster (issue 10): two ResNet-50 jobs of
two workers each, compute replayed from the shipped calibration, real gradient buckets
all-reduced by DDP with gloo across the dumbbell.  Needs root; in CI (CI=true) a missing
prerequisite fails instead of skipping."""


import numpy as np
import pytest
from conftest import require
from helpers.pairs import dumbbell_pair

from testbed.calibration import load_calibration
from testbed.run import load_config, run_experiment
from testbed.run.profiles import ddp_bucket_profile

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("testbed_host")]


def resnet_pair(iterations: int = 5) -> dict:
    job = {"kind": "model", "model": "resnet50", "iterations": iterations, "nic_bps": 50e9}
    return dumbbell_pair(job)


def test_resnet50_replay_jobs_all_reduce_real_buckets(tmp_path):
    # torch: imported here, not at collection
    from testbed.replay import expected_bucket_count, scaled_gradient_bytes

    cfg = load_config(resnet_pair())
    res = run_experiment(cfg, tmp_path, progress=lambda m: None)
    spec = cfg.jobs[0]
    assert spec.scale == pytest.approx(200e6 / 50e9)
    cal = load_calibration(spec.calibration)
    gradient = scaled_gradient_bytes(cal, spec.scale)
    buckets = expected_bucket_count(cal, spec.scale)
    base = res.schemes["baseline"]
    for job in ("a", "b"):
        for rank in (0, 1):
            records = base.jobs[job].records(rank)
            assert len(records) == 5
            for r in records:
                assert len(r["buckets"]) == buckets  # DDP's own bucketing, rebuilt
                reduced = sum(nbytes for _, nbytes, _, _ in r["buckets"])
                assert reduced == pytest.approx(gradient, rel=0.02)
                # a ring all-reduce over 2 workers sends 2 (n - 1) / n of the gradients
                assert r["bytes_sent"] == pytest.approx(reduced, rel=0.02)
                # the all-reduce overlaps the backward pass: it starts before the step ends
                assert r["comm_start"] < r["end"]
    # what the two jobs sent crossed the bottleneck: every byte, plus headers and ACKs
    payload = sum(j.bytes for j in base.jobs.values())
    wire = sum(base.link_bytes.values())
    assert payload <= wire <= 1.15 * payload


def one_resnet_job_on_mltcp(tmp_path, mode: str, iterations: int):
    """One ResNet-50 DDP job alone on ``ecn`` under MLTCP in ``mode``: the run, the
    kernel's per-flow counts for the job, and its gradient flows (each rank sends to the
    other: the flows of at least half the largest one's bytes, two or more)."""
    from mltcp import admin

    try:
        admin.check_prerequisites()
    except Exception as e:  # noqa: BLE001 - any missing piece
        require(False, f"MLTCP prerequisites: {e}")
    cfg = resnet_pair(iterations=iterations)
    cfg["topology"]["fabric"] = "ecn"
    cfg["jobs"] = cfg["jobs"][:1]
    cfg["schemes"] = [{"scheme": "mltcp", "name": mode, "mode": mode}]
    res = run_experiment(load_config(cfg), tmp_path, progress=lambda m: None)
    counted = res.schemes[mode].mltcp_flows["a"]
    assert counted["mode"] == mode and counted["steps"] == iterations + 2
    largest = counted["flows"][0]["bytes_acked"]
    data = [f for f in counted["flows"] if f["bytes_acked"] > 0.5 * largest]
    assert len(data) >= 2
    return res, counted, data


def test_mltcp_exact_mode_counts_every_ddp_iteration(tmp_path):
    """gloo opens its own sockets: the job's cgroup catches them, ties them to the job,
    and the optimizer hook's marks end each iteration exactly (issue 10 §4)."""
    _, counted, data = one_resnet_job_on_mltcp(tmp_path, "exact", 8)
    assert all(f["iterations"] == counted["steps"] for f in data), counted["flows"]


def test_mltcp_idle_mode_counts_each_ddp_step_once(tmp_path):
    """Without the training loop's help (idle mode): ResNet-50's flows send each step in
    two bursts with a silence longer than idle_ms between them (the last bucket waits for
    the end of the backward pass); the kernel no longer splits a step: it counts one
    iteration per step, of one step's bytes, or per two steps once its estimate has spanned
    two (the rule's known limit) (issue 21 §4; before, about two per step, each of one
    burst's bytes)."""
    res, counted, data = one_resnet_job_on_mltcp(tmp_path, "idle", 12)
    # never split: traffic outside the steps (DDP's first broadcast of the parameters, the
    # process group's set-up and final barrier) may count as up to three more (a
    # fresh-clone `make test` counted 15 and 17 for 14 steps; splitting gave ~28)
    assert all(f["iterations"] <= counted["steps"] + 3 for f in data), data
    per_step = res.schemes["idle"].jobs["a"].records()[-1]["bytes_sent"]  # gradient bytes
    # each counted iteration is one step's bytes, or -- the rule's known limit
    # (docs/mltcp_defaults.md) -- a whole number of steps' once the estimate has spanned
    # several steps and stays so (fresh-clone runs: 8 counted of 823,704 bytes for 14
    # steps of 411,852; on 2026-11-28, 6 counted of 1,235,556 bytes for 14 steps of
    # 408,972, three steps' worth) (within 15 %: the last count may take in traffic after
    # the last step -- a fresh-clone run on a loaded machine counted 451,396 bytes for a
    # 408,972-byte step)
    for f in data:
        steps_per = f["last_iteration_bytes"] / per_step
        assert round(steps_per) >= 1, (f, per_step)
        assert steps_per == pytest.approx(round(steps_per), rel=0.15), (f, per_step)
        assert f["iterations"] >= counted["steps"] // round(steps_per), (f, per_step)


def within(spans, grid_s: np.ndarray, period_s: float, margin_s: float) -> np.ndarray:
    """Which points of ``grid_s`` (seconds on the circle) lie inside ``spans`` (phases),
    each widened by ``margin_s`` seconds on both sides."""
    inside = np.zeros(grid_s.size, bool)
    for sp in spans:
        inside |= (grid_s - (sp.start_s - margin_s)) % period_s < sp.duration_s + 2 * margin_s
    return inside


def bits_within(profile, spans, margin_s: float) -> float:
    """Share of ``profile``'s bits per iteration sent inside ``spans`` (phases of the same
    circle), each widened by ``margin_s`` seconds on both sides."""
    period = profile.iteration_time_s
    grid = np.arange(0.0, period, 1e-4)
    rate = np.zeros(grid.size)
    for ph in profile.phases:
        rate[(grid - ph.start_s) % period < ph.duration_s] += ph.rate_bps
    return float(rate[within(spans, grid, period, margin_s)].sum() / rate.sum())


def covered_share(spans, period_s: float, margin_s: float) -> float:
    """Share of the circle that ``spans``, each widened by ``margin_s``, cover."""
    return float(within(spans, np.arange(0.0, period_s, 1e-4), period_s, margin_s).mean())


def test_hook_and_pcap_profiles_of_one_run_agree(tmp_path):
    """Issue 11 §2: one ResNet-50 job alone (the ideal run) with ``profile_source: pcap``:
    the runner's profile comes from the capture on rank 0's host, and the DDP bucket
    records of the same run give the hook's profile.  They must agree on the bytes per
    iteration (within 5 %) and on the iteration time (within 2 %).  The runner folds the
    capture at the worker's period; the capture's own period, from its autocorrelation
    alone, is held to 3 % of the median to mean iteration over the same window (iteration-to-
    iteration jitter of 1-5 ms on a 62 ms iteration blurs the correlogram's peaks; one CI
    run read 8 % short before the estimator walked the multiples one by one, see
    test_profile).  Not to the hook's period: that is the median interval, and a jittery
    run's slow tail puts the mean above it (2 % in one run here, 3.8 % between the two)."""
    from cassini.measure import profile_from_pcap

    cfg = resnet_pair(iterations=20)
    cfg["jobs"] = cfg["jobs"][:1]
    cfg["schemes"] = ["ideal"]
    cfg["profile_source"] = "pcap"
    loaded = load_config(cfg)
    res = run_experiment(loaded, tmp_path, progress=lambda m: None)
    ideal = res.schemes["ideal"]
    assert ideal.profile_source == "pcap"
    pcap = ideal.profiles["a"]
    records = ideal.jobs["a"].records(0)
    hook = ddp_bucket_profile("a", records, 2)
    assert pcap.bytes_per_iteration == pytest.approx(hook.bytes_per_iteration, rel=0.05)
    assert pcap.iteration_time_s == pytest.approx(hook.iteration_time_s, rel=0.02)
    # and on where the bytes go in the iteration (the runner folds every iteration from its
    # own start): nearly all the capture's bits fall within the hook's bucket all-reduces
    assert bits_within(pcap, hook.phases, margin_s=0.003) > 0.9
    # which says something only while the hook's widened spans leave part of the circle out
    assert covered_share(hook.phases, hook.iteration_time_s, margin_s=0.003) < 0.8
    # the capture's own period (autocorrelation over the measured iterations' window)
    captured = sorted(tmp_path.rglob("rank0.pcap"))
    assert len(captured) == 1
    window = (records[1]["start"], records[-1]["start"])
    alone = profile_from_pcap("a", captured[0], loaded.topology.ip("h1"), window_s=window)
    window_mean_s = (window[1] - window[0]) / (len(records) - 2)
    # Between the window's median and mean iteration (3 % either side): a host hiccup
    # lengthens a few iterations, which moves the mean but hardly the correlogram's peak
    # (a quiet fresh clone, 2026-11-28: two iterations of 80 and 98 ms among 62-73 ms ones,
    # mean 67.8 ms, median 64.5 ms, the capture's period 63.2 ms)
    starts = [r["start"] for r in records[1:]]
    window_median_s = float(np.median(np.diff(starts)))
    low, high = sorted((window_mean_s, window_median_s))
    assert 0.97 * low <= alone.iteration_time_s <= 1.03 * high, (low, high)
    assert alone.bytes_per_iteration == pytest.approx(hook.bytes_per_iteration, rel=0.05)
