"""Every experiment's configs parse with the runner, the experiments share their job
sets and read the runner's typed results, they run as modules, and experiment 1 runs end
to end (tiny) on the emulated cluster."""

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import require

from cassini.advisor import NO_SHARED_LINK
from experiments import common, link_interleaving, mltcp_convergence, placement, regimes
from experiments import sim_validation as sv
from mltcp.policy import MltcpOptions, MltcpParams
from testbed.results import ExperimentResult, JobResult, SchemeResult
from testbed.run import load_config
from testbed.topo import from_config

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.py"))


@pytest.mark.parametrize("job_set", ["pair", "trio"])
@pytest.mark.parametrize("fabric", ["fair", "ecn", "fifo"])
def test_link_interleaving_configs(job_set, fabric):
    schemes = link_interleaving.schemes_for(fabric, with_mltcp=True)
    cfg = load_config(link_interleaving.experiment_config(job_set, fabric, 10, schemes))
    assert len(cfg.jobs) == common.JOB_SETS[job_set].count
    assert {s.name for s in cfg.schemes} >= {"ideal", "baseline", "random", "cassini"}
    assert ("mltcp-dctcp" in {s.name for s in cfg.schemes}) == (fabric == "ecn")


def _jobs(cfg):
    """(compute_s, bytes) of every job of a parsed config."""
    return [(j.compute_s, j.bytes) for j in cfg.jobs]


def test_job_sets_are_defined_once_and_shared():
    pair, trio, half = common.PAIR, common.TRIO, common.HALF_PAIR
    assert (pair.count, pair.share) == (2, pytest.approx(0.4))
    assert (trio.count, trio.share) == (3, pytest.approx(0.5))
    assert (half.count, half.share) == (2, pytest.approx(0.5))
    # experiment 1, the demo and the model validation run the same pair and trio
    for s in (pair, trio):
        for raw in (
            link_interleaving.experiment_config(s.name, "fair", 5, ["ideal"]),
            sv.scenario(s.name, 5),
        ):
            assert _jobs(load_config(raw)) == [(s.compute_s, s.bytes)] * s.count
    # experiments 2 and 5 and the two-job acceptance configs run the 50 % pair
    regime = load_config(regimes.regime_config("fair", 100, "cubic", 2, 0.0, 5))
    mltcp = load_config(mltcp_convergence.config("ecn", "dctcp_bpf", "mltcp_dctcp", 5))
    assert _jobs(regime) == _jobs(mltcp) == [(half.compute_s, half.bytes)] * 2
    for name in ("fair_two_jobs.yaml", "mltcp_ecn_two_jobs.yaml"):
        path = ROOT / "experiments" / "configs" / name
        assert yaml.safe_load(path.read_text())["topology"]["bottleneck_bps"] == (
            common.BOTTLENECK_BPS
        )
        assert _jobs(load_config(str(path))) == [(half.compute_s, half.bytes)] * 2, name
    # three jobs that fill the link: a third each, by iteration time or by bytes
    assert common.equal_shares(3).share == pytest.approx(1 / 3, rel=1e-5)
    assert mltcp_convergence.filling(3, half.comm_s).share == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="3 jobs, 2 ids"):
        trio.jobs(5, "ab")


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiments_import_as_modules_and_read_logs_from_the_results(path):
    source = path.read_text()
    assert "sys.path" not in source  # run as `python -m experiments.x`
    assert "-rank" not in source  # log paths come from JobResult.logs, not rebuilt


#: not experiments themselves: helpers, and the headline runner (tests/test_headlines.py)
SUPPORT = {
    "__init__", "common", "harness", "columns", "plots", "figures", "host_load", "headlines",
    "fidelity_packet",  # sim_fidelity's packet column
}  # fmt: skip
EXPERIMENT_NAMES = [p.stem for p in EXPERIMENTS if p.stem not in SUPPORT]


@pytest.mark.parametrize("name", EXPERIMENT_NAMES)
def test_every_experiment_is_on_the_harness_and_imports_no_other(name):
    import importlib

    from experiments.harness import Experiment

    module = importlib.import_module(f"experiments.{name}")
    assert isinstance(module.EXPERIMENT, Experiment) and module.EXPERIMENT.name == name
    assert module.main == module.EXPERIMENT.main
    source = (ROOT / "experiments" / f"{name}.py").read_text()
    for other in EXPERIMENT_NAMES:
        assert f"experiments.{other} import" not in source, other
        assert f"from experiments import {other}" not in source, other


#: every experiment's ``--help`` as ``python -m`` runs it (runpy, ``__main__``), all in one
#: fresh interpreter: one process each cost ~0.9 CPU seconds apiece, mostly imports
HELP_OF_EVERY_EXPERIMENT = """
import contextlib, io, json, runpy, sys
out = {}
for name in sys.argv[1:]:
    sys.argv = [f"experiments/{name}.py", "--help"]
    text, code = io.StringIO(), None
    with contextlib.redirect_stdout(text):
        try:
            runpy.run_module(f"experiments.{name}", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code
    out[name] = (code, text.getvalue())
sys.stdout.write(json.dumps(out))
"""


@pytest.fixture(scope="module")
def help_of_every_experiment() -> dict[str, tuple]:
    r = subprocess.run(
        [sys.executable, "-c", HELP_OF_EVERY_EXPERIMENT, *EXPERIMENT_NAMES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("module", EXPERIMENT_NAMES)
def test_experiment_runs_as_a_module(module, help_of_every_experiment):
    code, text = help_of_every_experiment[module]
    assert code in (0, None), text
    assert f"-m experiments.{module}" in text  # the docstring's commands


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


@pytest.mark.parametrize(
    "module, argv, named",
    [
        ("clock_offset", ["--iterations", "0"], "--iterations: at least 3, got 0"),
        ("clock_offset", ["--offsets-ms", "0", "nan"], "--offsets-ms: finite numbers only"),
        ("placement", ["--iterations", "0"], "--iterations: at least 3"),
        ("placement", ["--candidates", "0"], "--candidates: 2 .. 100, got 0"),
        ("placement", ["--candidates", "1"], "--candidates"),
        ("placement", ["--candidates", "-2"], "--candidates"),
        ("placement", ["--candidates", "100000"], "--candidates"),
        ("regimes", ["--iterations", "0"], "--iterations: at least 3"),
        ("profile_library", ["--iterations", "0"], "--iterations: at least 3"),
        ("link_interleaving", ["--fabrics", "bogus"], "--fabrics"),
        ("link_interleaving", ["--fabrics", ","], "--fabrics"),
        ("link_interleaving", ["--iterations", "0"], "--iterations: at least 3"),
        # an empty selection ran nothing, printed a results path and exited 0
        ("link_interleaving", ["--sets", "", "--no-mltcp"], "--sets: "),
        ("link_interleaving", ["--sets", ",", "--no-mltcp"], "--sets: "),
        ("link_interleaving", ["--sets", "quartet"], "--sets: unknown job set 'quartet'"),
        ("link_interleaving", ["--fabrics", ""], "--fabrics: "),
        ("link_interleaving", ["--sets", "pair,pair"], "--sets: comma-separated, each once"),
        ("link_interleaving", ["--fabrics", "fair,fair"], "--fabrics: comma-separated, each"),
        ("real_models", ["--model", "bogus"], "--model: one of resnet50"),
        ("real_models", ["--nic-gbps", "0"], "--nic-gbps: at least 0.2"),
        ("real_models", ["--nic-gbps", "-1"], "--nic-gbps"),
        ("real_models", ["--nic-gbps", "0.001"], "--nic-gbps"),
    ],
)
def test_experiments_refuse_bad_flags_before_running(
    module, argv, named, tmp_path, capsys, monkeypatch
):
    """Each was accepted, then crashed (as root, after starting) with a ConfigError
    traceback, a ValueError or an endless loop until 2026-12."""
    import importlib

    def no_run() -> None:  # flags the check let through never reach a run here, root or not
        raise SystemExit("the check let the flags through")

    monkeypatch.setattr("experiments.harness.require_root", no_run)
    experiment = importlib.import_module(f"experiments.{module}")
    with pytest.raises(SystemExit) as exit_:
        experiment.main([*argv, "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_placement_candidates_stop_when_no_new_placement_is_left(monkeypatch):
    monkeypatch.setattr(placement, "JOBS", placement.JOBS[:1])  # 2 hosts: 2 placements
    assert len(placement.candidates(2, ["h1", "h2"], seed=1)) == 2
    with pytest.raises(ValueError, match="only 2 distinct placements"):
        placement.candidates(3, ["h1", "h2"], seed=1)


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


@pytest.fixture(scope="module")
def pair_on_fair(tmp_path_factory) -> Path:
    """Experiment 1's pair on the fair fabric, 20 iterations, without MLTCP: one testbed run
    (~20 s) that both the experiment's test and the model's validation read."""
    require(os.geteuid() == 0, "root")
    require(shutil.which("mnexec") is not None, "mnexec (run make setup)")
    out = tmp_path_factory.mktemp("pair_on_fair")
    argv = ["--sets", "pair", "--fabrics", "fair", "--iterations", "20", "--no-mltcp"]
    assert link_interleaving.main([*argv, "--out", str(out)]) == 0
    return out


@pytest.mark.root
def test_experiment_1_tiny_run(pair_on_fair):
    tmp_path = pair_on_fair
    report = json.loads((tmp_path / "results.json").read_text())
    rows = {r["scheme"]: r for r in report["runs"]["pair-fair"]["rows"]}
    assert set(rows) == {"ideal", "baseline", "random", "cassini"}
    assert rows["ideal"]["mean_vs_ideal"] == pytest.approx(1.0)
    print({k: (round(r["mean_vs_ideal"], 3), r["note"]) for k, r in rows.items()})
    # 20 iterations (12 before the run was shared with the model's validation), not 6:
    # CASSINI's held period takes 2 standard deviations of the iterations alone as jitter
    # slack, and with 6 (4 counted) one host hiccup made it 23 % (j1 alone 102-108 ms but
    # one 129.6 ms: period 135 ms, CASSINI 1.24x; a fresh clone, 2026-11-26).  Measured with
    # 12 (8 runs, 2026-11-26): same start 1.25-1.41x, CASSINI 1.05-1.07x (README, 30
    # iterations: 1.21-1.36x and 1.03-1.04x); the overlapped pair costs at most ~1.4x here,
    # so 1.6 leaves the noise of a short run
    base = rows["baseline"]
    run = ExperimentResult.read(tmp_path / "pair-fair" / "results.json")
    # The same start costs >= 1.15x only while the free-running pair stays aligned: on
    # ``fair`` their offset is neutral and random-walks, and one quiet fresh clone
    # (2026-11-28) drifted apart and ran at 1.059x.  So the claim is held where the run's
    # measured communication starts stayed within a quarter of a communication phase.
    drift = same_start_drift(run)
    print("same start: mean |offset| / comm phase", round(drift, 3))
    assert base["note"] == "" and 0.95 <= base["mean_vs_ideal"] <= 1.6
    if drift <= 0.25:
        assert base["mean_vs_ideal"] >= 1.15
    cassini = rows["cassini"]
    if cassini["note"]:  # declined every shift: the table says so, the run is the baseline's
        assert cassini["note"] == "declined: baseline's run, not re-run"
        assert cassini["mean_ms"] == base["mean_ms"] and cassini["p99_ms"] == base["p99_ms"]
    else:
        # Held.  What the agent does, whatever the host: every iteration on its slot runs at
        # the period it was given (within 5 %), and most are on their slot (the misses are
        # counted: CI, 2026-11-27, 1.29x over all iterations with a 209 ms p99 from late
        # wake-ups).  What the grid costs depends on the ideal run it was measured from: the
        # held period is the iteration + 3 % + 2 standard deviations of it, so a noisy ideal
        # run makes a slow grid (a quiet fresh clone, 2026-11-28: ideal j1 110.6 ms with a
        # hiccup, period 141 ms = 1.30x ideal, CASSINI 1.30x against the same start's 1.26x).
        # Making that rule pay for noise only when it happens is an open issue (31 §3,
        # docs/known_problems.md); here the claim is held where the grid is not inflated.
        ideal_mean = cassini["mean_ms"] / cassini["mean_vs_ideal"] / 1e3
        periods = [j.period_s or math.inf for j in run.schemes["cassini"].jobs.values()]
        grid = sum(periods) / len(periods) / ideal_mean  # the held period x ideal (inf: one free)
        print("cassini off slot", cassini["off_slot"], "on slot/ideal",
              cassini["on_slot_vs_ideal"], "period/ideal", grid)  # fmt: skip
        assert cassini["on_slot_vs_ideal"] <= grid * 1.05  # (no bound when one job runs free)
        assert cassini["off_slot"] < 19  # of 2 x 19 intervals: most held
        if grid <= 1.15:
            assert cassini["on_slot_vs_ideal"] <= 1.2
            if drift <= 0.25:
                assert cassini["mean_vs_ideal"] < base["mean_vs_ideal"]
    assert report["runs"]["pair-fair"]["score"] == pytest.approx(1.0, abs=0.01)  # compatible
    assert (tmp_path / "cdf_pair-fair.png").exists()
    assert (tmp_path / "timeline_pair-fair.png").exists()


def same_start_drift(run: ExperimentResult) -> float:
    """How far apart the baseline's two free-running jobs communicated: the mean over
    iterations (the first dropped) of |j2's communication start - j1's|, as a fraction of
    j1's communication phase alone (the ideal run's median, seconds / seconds)."""
    alone = run.schemes["ideal"].jobs["j1"].records(0)
    comm_s = sorted(r["end"] - r["comm_start"] for r in alone)[len(alone) // 2]
    base = run.schemes["baseline"].jobs
    pairs = list(zip(base["j1"].records(0), base["j2"].records(0), strict=False))[1:]
    return sum(abs(b["comm_start"] - a["comm_start"]) for a, b in pairs) / len(pairs) / comm_s


def test_same_start_drift_reads_the_offsets(tmp_path):
    def log(name, starts, comm_s=0.04):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"iter": i, "start": t - 0.06, "comm_start": t,
                                            "end": t + comm_s}) + "\n"
                                for i, t in enumerate(starts)))  # fmt: skip
        return path

    def job(name, starts):
        return JobResult(name, (0.1,) * len(starts), 0, (log(name, starts),))

    ticks = [0.1 * i for i in range(5)]
    run = ExperimentResult({
        "ideal": SchemeResult("ideal", "ideal", "cubic", "fair", {"j1": job("i1", ticks)}),
        "baseline": SchemeResult("baseline", "baseline", "cubic", "fair", {
            "j1": job("b1", ticks), "j2": job("b2", [t - 0.01 for t in ticks])}),
    }, {})  # fmt: skip
    assert same_start_drift(run) == pytest.approx(0.25)


@pytest.mark.root
@pytest.mark.slow
def test_tiny_testbed_run_is_modelled(pair_on_fair, tmp_path):
    """The simulator's model of experiment 1's pair (experiments.sim_validation) against
    the testbed run the experiment's test reads.  20 iterations: past CASSINI's start-up
    (phases that meet, drift past the tolerance, a re-alignment: up to ~6 iterations; CI's
    6-iteration run of 2026-11-26 re-aligned inside its second half, -19.4 %)."""
    path = pair_on_fair / "pair-fair" / "results.json"
    assert sv.main(["--results", str(path), "--out", str(tmp_path)]) == 0
    run = ExperimentResult.read(path)
    report = json.loads((tmp_path / "validation.json").read_text())
    rows = {(r["scheme"], r["job"]): r for r in report["rows"]}
    assert len(rows) == 6
    # alone, the model runs at the measured profile: the same iteration time to a few %
    # (8 %: the profile is the run's typical iteration, the mean carries the host's
    # hiccups; a quiet fresh clone, 2026-11-28: 5.2 %, its second half 8.3 %)
    assert abs(rows[("ideal", "j1")]["model_error"]) < 0.08
    for key, r in sorted(rows.items()):
        print(key, {k: round(r[k], 3) for k in ("model_error", "model_goodput_replay_error",
                                                   "measured_slowdown", "model_slowdown")},
              r["note"])  # fmt: skip
    # Given the phases the testbed had, the model shares the link as the testbed did.
    # Measured (2026-11-26, 11 runs of 6 or 20 iterations, one beside the whole suite, per
    # job): the goodput model -5.5 to +9.2 % (same start -3.3 to +9.2, CASSINI -5.5 to
    # +7.8), the nominal model -10.4 to +5.8 % (it takes link capacity as payload rate).
    # Since then one job of a same-start pair -13.5 % in CI (its pair -10.6 %, the 4 rows
    # 9.8 % on average) and +15.0/+19.3 % beside helpers' work: the goodput factor is
    # taken from the ideal run, whose efficiency on a 1-packet FIFO moves with the host
    # (0.67-0.88), and two contending flows do not lose the same share.  So: each row
    # within 20 %, the four within 12 % on average.
    replay = [rows[(s, j)]["model_goodput_replay_error"]
              for s in ("baseline", "cassini") for j in ("j1", "j2")]  # fmt: skip
    assert max(abs(e) for e in replay) < 0.2, replay
    assert sum(abs(e) for e in replay) / len(replay) < 0.12, replay
    # Closed loop (the model starts the jobs once and runs): held jobs, once past the
    # start-up, run as modelled: over the second half -0.9 to +0.5 % (7 runs of 20).  No
    # such check for the same start: free-running jobs random-walk apart on the testbed
    # (3 of 11 runs of 20 iterations drifted towards interleaving, 1.09-1.20x against the
    # model's lock-step 1.31-1.33x), which a jitter-free fluid started once cannot follow.
    # That holds where the agent did hold them: a job that ran off its slot in the second
    # half (a phase stretched by a loss burst on the 1-packet FIFO made the pair's phases
    # meet, and it re-aligned) is not the model's held job.  12 quiet runs of 20 iterations
    # (2026-11-28): 10 held through the second half, -1.2 to +0.6 %; the 2 that were not
    # were -9.6/-16.7 % and -18.0/-9.9 % over their means, -5.4/-12.0 and -7.4/-4.5 % over
    # their on-slot iterations alone (the ones just after a re-alignment are still slow).
    for job in ("j1", "j2"):
        half = len(run.schemes["cassini"].jobs[job].iteration_times_s) // 2
        late = [i for i in rows[("cassini", job)]["off_slot"] if i >= half]
        if late:
            print(job, "off its slot in the second half at", late, "(steady error not held)")
        else:
            assert abs(rows[("cassini", job)]["model_steady_error"]) < 0.12, job
    # and the model sees the contention the testbed measured: same start 1.33-1.42x
    # measured, 1.21-1.29x modelled; held apart (when CASSINI did not decline) less of it
    model = {s: sum(rows[(s, j)]["model_slowdown"] for j in ("j1", "j2")) / 2
             for s in ("baseline", "cassini")}  # fmt: skip
    assert model["baseline"] > 1.1
    if not rows[("cassini", "j1")]["note"].startswith("declined"):
        assert model["cassini"] < model["baseline"]


def _fake_run(tmp_path, schemes, jobs=("a", "b"), period=0.1, n=20):
    """Worker logs and a result shaped like the runner's, for plotting tests.  The logs
    are named unlike the runner's: the experiments must find them through the result."""
    out = {}
    for k, name in enumerate(schemes):
        results = {}
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
            log = tmp_path / f"{name}.{j}.log"
            log.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
            results[j] = JobResult(j, (period * slow,) * n, 1_000_000 * n, (log,))
        kind = "ideal" if name == "ideal" else "baseline"
        out[name] = SchemeResult(name, kind, "cubic", "fair", results)
    return ExperimentResult(out, {})


def test_timeline_plot_takes_the_schemes_to_show(tmp_path):
    res = _fake_run(tmp_path, ["ideal", "dctcp_bpf", "mltcp_dctcp"])
    out = tmp_path / "t.png"
    link_interleaving.plot_timeline(res, out, "t", schemes=["dctcp_bpf", "mltcp_dctcp"])
    assert out.stat().st_size > 0
    with pytest.raises(ValueError, match="none of"):
        link_interleaving.plot_timeline(res, out, "t", schemes=["nope"])


def test_link_interleaving_rows_and_cdf_from_the_result(tmp_path):
    res = _fake_run(tmp_path, ["ideal", "baseline"])
    rows = {r["scheme"]: r for r in link_interleaving.summarise(res)}
    assert rows["ideal"]["mean_vs_ideal"] == pytest.approx(1.0)
    # together 1.1x and 1.15x of 100 ms; alone 100 and 105 ms
    assert rows["baseline"]["mean_vs_ideal"] == pytest.approx(0.1125 / 0.1025)
    assert rows["baseline"]["p99_ms"] == pytest.approx(115.0)
    link_interleaving.plot_cdf(res, tmp_path / "cdf.png", "t")
    assert (tmp_path / "cdf.png").stat().st_size > 0


def test_demo_rows_use_the_fastest_identical_job_as_ideal(tmp_path):
    from experiments import demo

    res = _fake_run(tmp_path, ["ideal", "base"])
    rows = {r["scheme"]: r for r in demo.rows_of(res, "x", identical=True)}
    assert rows["ideal"]["mean_vs_ideal"] == pytest.approx(1.0)  # the faster job, its own reference
    assert rows["base"]["mean_vs_ideal"] == pytest.approx(1.125)
    assert rows["base"]["cc"] == "cubic"


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


def test_real_models_mltcp_rule_reaches_both_mltcp_schemes():
    from experiments import real_models

    rule = MltcpParams(slope=1.6, intercept=0.2, scale_cut=False)
    cfg = load_config(real_models.case_config("pair-ecn", "bert_base", 25, 50e9, True, rule))
    mltcp = [s for s in cfg.schemes if s.kind == "mltcp"]
    assert {s.name for s in mltcp} == {"mltcp-dctcp", "mltcp-exact"}
    assert all((s.mltcp.slope, s.mltcp.intercept) == (1.6, 0.2) for s in mltcp)
    assert {s.mltcp.mode for s in mltcp} == {"idle", "exact"}
    default = load_config(real_models.case_config("pair-ecn", "vgg11", 25, 140e9, True))
    assert all(
        (s.mltcp.slope, s.mltcp.intercept) == (MltcpParams().slope, MltcpParams().intercept)
        for s in default.schemes
        if s.kind == "mltcp"
    )
    fair = load_config(real_models.case_config("pair-fair", "vgg11", 25, 140e9, True, rule))
    assert not any(s.kind == "mltcp" for s in fair.schemes)
    assert not any(s.mltcp.scale_cut for s in cfg.schemes)  # the paper's rule when asked for
    defaults = [s.mltcp.scale_cut for s in default.schemes if s.kind == "mltcp"]
    assert defaults and all(cut == MltcpParams().scale_cut for cut in defaults)
    cut = MltcpParams(slope=1.6, intercept=0.2, scale_cut=True)
    cfg = load_config(real_models.case_config("pair-ecn", "bert_base", 25, 50e9, True, cut))
    assert [s.mltcp.scale_cut for s in cfg.schemes if s.kind == "mltcp"] == [True, True]


def test_real_models_compares_the_scaled_cut_and_runs_only_the_schemes_asked():
    from experiments import real_models

    rule = MltcpParams(slope=1.6, intercept=0.2, scale_cut=False)
    only = ["baseline", "mltcp-exact", "mltcp-exact-cut"]
    cfg = load_config(
        real_models.case_config(
            "pair-ecn", "bert_base", 25, 50e9, True, rule, compare_cut=True, only=only
        )
    )
    assert [s.name for s in cfg.schemes] == ["ideal", *only]
    assert [s.mltcp.scale_cut for s in cfg.schemes[2:]] == [False, True]
    held = load_config(
        real_models.case_config("pair-ecn", "vgg11", 25, 140e9, False, agent_slack=0.03)
    )
    assert held.agent_slack == 0.03 and cfg.agent_slack is None
    exact = MltcpOptions("exact", 1.6, 0.2)
    assert all(replace(s.mltcp, scale_cut=None) == exact for s in cfg.schemes[2:])


@pytest.mark.parametrize(
    "args, named",
    [
        (["--schemes", "mltcp-turbo"], ["--schemes", "mltcp-turbo"]),
        (["--mltcp-intercept", "0"], ["--mltcp-intercept", "intercept"]),
        (["--agent-slack", "1.5"], ["--agent-slack", "fraction"]),
    ],
)
def test_real_models_refuses_bad_flags_naming_them(args, named):
    r = subprocess.run(
        [sys.executable, "-m", "experiments.real_models", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and all(word in r.stderr for word in named)


def test_leader_advantage_is_the_followers_extra_largest_bucket_time(tmp_path):
    from experiments import real_models

    def job(name, launches_s, durations_s):
        recs = [
            {"iter": k, "buckets": [[0, 10, t - 0.01, t - 0.005], [1, 1000, t, t + d]]}
            for k, (t, d) in enumerate(zip(launches_s, durations_s, strict=True))
        ]
        log = tmp_path / f"{name}.log"
        log.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        return JobResult(name, (0.1,) * len(recs), 0, (log,))

    # iteration 0: a leads by 10 ms, 30 vs 40 ms; 1: b leads by 5 ms, 35 vs 45 ms;
    # 2: 1 ms apart (no leader); 3: b starts after a's bucket ended (no overlap)
    a = job("a", [0.0, 1.005, 2.0, 3.0], [0.030, 0.045, 0.030, 0.020])
    b = job("b", [0.010, 1.0, 2.001, 3.05], [0.040, 0.035, 0.030, 0.020])
    scheme = SchemeResult("m", "mltcp", "mltcp_dctcp", "ecn", {"a": a, "b": b})
    assert real_models.leader_advantage_ms(scheme) == pytest.approx(10.0)
    trio = SchemeResult("m", "mltcp", "mltcp_dctcp", "ecn", {"a": a, "b": b, "c": a})
    assert real_models.leader_advantage_ms(trio) is None
    assert common.table([{"x": None, "y": 1.234}], [("x", "x", ".1f"), ("y", "y", ".1f")]) == (
        "x  y  \n   1.2"
    )


def test_cassini_repeats_row_reports_whole_run_and_after_startup(monkeypatch, tmp_path):
    """One repeat's row: CASSINI and same start over ideal, their ratio over the whole run
    (the target) and without the first STARTUP iterations, and what the agent did."""
    from experiments import cassini_repeats

    def scheme(name, times_ms, **job):
        jobs = {j: JobResult(j, tuple(t / 1e3 for t in times_ms), 0, (), **job) for j in ("a", "b")}
        return SchemeResult(name, name, "reno", "fair", jobs)

    startup = [200.0] * cassini_repeats.STARTUP
    result = ExperimentResult(
        {
            "ideal": scheme("ideal", [100.0] * 20),
            "baseline": scheme("baseline", [140.0] * 5 + [110.0] * 15),
            "cassini": scheme(
                "cassini", startup + [115.0] * 15, period_s=0.115, released=False, realignments=1
            ),
        },
        {},
    )
    monkeypatch.setattr(cassini_repeats, "run_config", lambda cfg, where, label: result)
    row = cassini_repeats.one_run({"jobs": []}, tmp_path, "test")
    whole = (5 * 200 + 15 * 115) / (5 * 140 + 15 * 110)
    assert row["cassini_vs_baseline"] == pytest.approx(whole)
    assert row["after_startup_cassini_vs_baseline"] == pytest.approx(115 / 110)
    assert row["held"] == 2 and row["released"] == 0 and row["realignments"] == 2
    assert row["declined"] is False


REPEATED = {
    "topology": {"kind": "dumbbell", "pairs": 2, "bottleneck_bps": 200_000_000,
                 "fabric": "fair"},
    "jobs": [{"id": "a", "hosts": ["h1", "h3"], "iterations": 10},
             {"id": "b", "hosts": ["h2", "h4"], "iterations": 10}],
    "schemes": ["baseline"],
}  # fmt: skip


@pytest.mark.parametrize(
    "change, argv, named",
    [
        ({"seed": "abc"}, [], "seed: must be an integer"),
        ({"jobs": [{**REPEATED["jobs"][0], "hosts": ["h1", "h9"]}]}, [], "unknown host 'h9'"),
        ({"topology": {**REPEATED["topology"], "fabric": "bogus"}}, [], "topology.fabric"),
        ({}, ["--iterations", "0"], "--iterations: at least 3, got 0"),
        ({}, ["--iterations", "2"], "--iterations: at least 3, got 2"),
    ],
)
def test_cassini_repeats_checks_the_whole_config_before_running(
    change, argv, named, monkeypatch, tmp_path, capsys
):
    """Bad fields passed the check and crashed in the first run; --iterations 0 was
    ignored (until 2026-12)."""
    from experiments import cassini_repeats

    config = tmp_path / "pair.yaml"
    config.write_text(yaml.safe_dump({**REPEATED, **change}))
    monkeypatch.setattr(cassini_repeats, "one_run", lambda *a: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exit_:
        cassini_repeats.main([str(config), *argv, "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_cassini_repeats_applies_the_iterations_given(tmp_path):
    from experiments import cassini_repeats
    from experiments.harness import UsageError

    config = tmp_path / "pair.yaml"
    config.write_text(yaml.safe_dump(REPEATED))
    args = cassini_repeats.EXPERIMENT.parser().parse_args([str(config), "--iterations", "4"])
    assert {j["iterations"] for j in cassini_repeats.read_config(args)["jobs"]} == {4}
    args.iterations = 0
    with pytest.raises(UsageError, match="--iterations"):
        cassini_repeats.check(args)


def test_cassini_repeats_alternates_the_jitter_rules_within_each_run(monkeypatch, tmp_path):
    from experiments import cassini_repeats

    seen = []

    def one_run(raw, where, label):
        rule = raw["agent"]["jitter"]
        seen.append((rule, where.name))
        held = {"stdev": 1.12, "robust": 1.05, "none": 1.2}[rule] + 0.01 * len(seen)
        return {"baseline_vs_ideal": 1.3, "cassini_vs_ideal": held,
                "cassini_vs_baseline": held / 1.3, "after_startup_cassini_vs_baseline": 1.0,
                "declined": False, "held": 2, "released": 0, "realignments": 0}  # fmt: skip

    config = tmp_path / "pair.yaml"
    config.write_text(yaml.safe_dump(REPEATED))
    monkeypatch.setattr(cassini_repeats, "one_run", one_run)
    argv = [str(config), "--runs", "2", "--jitter", "both", "--out", str(tmp_path / "o")]
    assert cassini_repeats.main(argv) == 0
    assert seen == [("stdev", "run1-stdev"), ("robust", "run1-robust"),
                    ("stdev", "run2-stdev"), ("robust", "run2-robust")]  # fmt: skip
    report = json.loads((tmp_path / "o" / "pair.json").read_text())
    summary = report["by_jitter"]
    assert summary["stdev"]["runs"] == summary["robust"]["runs"] == 2
    assert summary["robust"]["worst_cassini_vs_ideal"] == pytest.approx(1.05 + 0.04)
    assert summary["stdev"]["median_cassini_vs_ideal"] == pytest.approx(1.12 + 0.02)
    # a list alternates its rules in its order; a rule unknown or named twice is refused
    # before anything runs
    seen.clear()
    argv[argv.index("both")] = "none,stdev"
    assert cassini_repeats.main(argv) == 0
    assert [rule for rule, _ in seen] == ["none", "stdev", "none", "stdev"]
    seen.clear()
    for bad in ("stdev,iqr", "none,none", ""):
        argv[5] = bad
        with pytest.raises(SystemExit) as exit_:
            cassini_repeats.main(argv)
        assert exit_.value.code == 2 and seen == []


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot read: no such file"), ("", "empty file"),
     ("a: [1,\n", "malformed YAML: expected the node content, but found '<stream end>'"),
     ("[1, 2]\n", "a testbed config is a mapping with a jobs list")],
)  # fmt: skip
def test_cassini_repeats_refuses_a_bad_config_file_in_one_line(tmp_path, capsys, content, problem):
    """A newcomer's missing or broken config: exit 2 naming the file, not a traceback
    (a missing file raised FileNotFoundError until 2026-11-28)."""
    from experiments import cassini_repeats

    config = tmp_path / "pair.yaml"
    if content is not None:
        config.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        cassini_repeats.main([str(config), "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    where = f"{config}:2:1" if "YAML" in problem else str(config)  # cassini.files.read_data
    assert err.endswith(f"error: config: {where}: {problem}"), err
    assert not (tmp_path / "o").exists()


def test_late_start_gap_counts_only_held_iterations_that_started_late(tmp_path):
    from experiments import real_models

    recs = [
        {"iter": 0, "start": 0.0, "end": 0.09, "drift_s": 0.0},
        {"iter": 1, "start": 0.1, "end": 0.21, "drift_s": 0.0},  # slept: not counted
        {"iter": 2, "start": 0.213, "end": 0.31, "drift_s": 0.013},  # 3 ms after the end
        {"iter": 3, "start": 0.311, "end": 0.39, "drift_s": 0.011},  # 1 ms
        {"iter": 4, "start": 0.402, "end": 0.5, "drift_s": 0.002},  # overslept: not counted
        {"iter": 5, "start": 0.505, "end": 0.6, "drift_s": 0.02, "released": True},
    ]
    log = tmp_path / "a.log"
    log.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    held = JobResult("a", (0.1,) * 6, 0, (log,), period_s=0.1)
    scheme = SchemeResult("c", "cassini", "cubic", "fair", {"a": held})
    assert real_models.late_start_gap_ms(scheme) == pytest.approx(2.0)
    free = SchemeResult("b", "baseline", "cubic", "fair", {"a": replace(held, period_s=None)})
    assert real_models.late_start_gap_ms(free) is None


def _declined_run(tmp_path):
    """A run whose CASSINI row is the baseline's run, copied as the runner copies it."""
    res = _fake_run(tmp_path, ["ideal", "baseline"])
    base = res.schemes["baseline"]
    cassini = replace(base, name="cassini", kind="cassini", measured_as="baseline")
    return ExperimentResult({**res.schemes, "cassini": cassini}, {})


def test_every_table_showing_a_copied_cassini_row_says_declined(tmp_path):
    from experiments import common, demo, real_models
    from testbed.run import format_table

    res = _declined_run(tmp_path)
    note = "declined: baseline's run, not re-run"
    assert res.schemes["cassini"].reused_note == note
    assert res.schemes["baseline"].reused_note == ""
    tables = {
        "experiment 1": common.table(link_interleaving.summarise(res), link_interleaving.COLUMNS),
        "testbed run": format_table(res),
        "demo": common.table(demo.rows_of(res, "x"), [("scheme", "s", "s"), ("note", "n", "s")]),
        "real models": common.table(real_models.summarise(res), real_models.COLUMNS),
    }
    for name, text in tables.items():
        lines = [line for line in text.splitlines() if line.startswith("cassini")]
        assert lines and all(note in line for line in lines), (name, text)
        assert not any(note in line for line in text.splitlines() if "cassini" not in line), name
    # the copied row is still written to results.json as such
    assert SchemeResult.from_dict("c", res.schemes["cassini"].to_dict()).measured_as == "baseline"


def test_mltcp_is_unavailable_unless_the_prerequisite_check_passes(monkeypatch):
    from mltcp import admin

    def missing() -> None:
        raise RuntimeError("bpftool not found")

    monkeypatch.setattr(admin, "check_prerequisites", missing)
    assert link_interleaving.mltcp_available() == (False, "bpftool not found")
    monkeypatch.setattr(admin, "check_prerequisites", lambda: None)
    assert link_interleaving.mltcp_available() == (True, "")


def test_sim_fidelity_models_mltcp_with_the_rule_the_testbed_ran(monkeypatch):
    """The scheme's own slope, intercept and scale_cut over the kernel's loaded ones."""
    from experiments import sim_fidelity
    from mltcp import admin

    loaded = MltcpParams(slope=3.0, intercept=1.5, scale_cut=False)
    monkeypatch.setattr(admin, "get_params", lambda: loaded)
    assert sim_fidelity.mltcp_params(MltcpOptions()) == loaded
    chosen = MltcpOptions(slope=1.0, scale_cut=True)
    assert sim_fidelity.mltcp_params(chosen) == MltcpParams(1.0, 1.5, scale_cut=True)

    def unloaded():
        raise OSError("no config map")

    monkeypatch.setattr(admin, "get_params", unloaded)
    assert sim_fidelity.mltcp_params(MltcpOptions()) == MltcpParams()


def test_the_demo_says_in_one_line_when_and_why_cassini_declined(tmp_path):
    from experiments import demo

    res = _declined_run(tmp_path)
    reasons = {"a": "predicted gain +1.0% is under 2%: ...", "b": "predicted gain +0.5% ..."}
    advice = {"candidates": [{"shift": {"a": False, "b": False}, "shift_reasons": reasons}]}
    cassini = replace(res.schemes["cassini"], advice=advice)
    line = demo.cassini_declined(ExperimentResult({**res.schemes, "cassini": cassini}, {}))
    assert line is not None and "\n" not in line
    assert line.startswith("CASSINI declined to shift a, b (its row is baseline's run): ")
    assert reasons["a"] in line and reasons["b"] in line
    # shifting every job that shares a link, with a third job alone on its links: silent
    alone = {"a": True, "b": True, "c": False}
    advice = {"candidates": [{"shift": alone, "shift_reasons": {"c": NO_SHARED_LINK}}]}
    shifted = replace(cassini, advice=advice, measured_as=None)
    assert demo.cassini_declined(ExperimentResult({"cassini": shifted}, {})) is None
    # one job declined while the other is held: named, with its reason
    advice = {"candidates": [{"shift": {"a": True, "b": False}, "shift_reasons": reasons}]}
    one = replace(shifted, advice=advice)
    line = demo.cassini_declined(ExperimentResult({"cassini": one}, {}))
    assert line == f"CASSINI declined to shift b: b: {reasons['b']}"


def _strict(text: str):
    """``text`` parsed as strict JSON: Python's NaN / Infinity tokens refused."""

    def refuse(token: str) -> None:
        raise AssertionError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_experiment_json_is_strict_json(tmp_path):
    """cassini_repeats wrote ``"after_startup_cassini_vs_baseline": NaN`` (a run shorter
    than its start-up), which strict parsers (jq, browsers) refuse; cluster_scale's writer
    let NaN through too."""
    from experiments import cluster_scale

    data = {"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": {"d": np.float64("nan")}}
    common.write_json(tmp_path / "r.json", data)
    assert _strict((tmp_path / "r.json").read_text()) == {"a": None, "b": [None, None, 1.5],
                                                          "c": {"d": None}}  # fmt: skip
    cluster_scale._write({"rows": {"x": {"mean_speedup": math.nan}}}, tmp_path)
    assert _strict((tmp_path / "results.json").read_text())["rows"]["x"]["mean_speedup"] is None


def _repeat_row(cassini_vs_baseline: float, declined: bool) -> dict:
    return {"baseline_vs_ideal": 1.3, "cassini_vs_ideal": 1.3 * cassini_vs_baseline,
            "cassini_vs_baseline": cassini_vs_baseline,
            "after_startup_cassini_vs_baseline": cassini_vs_baseline, "declined": declined,
            "held": 0 if declined else 2, "released": 0, "realignments": 0}  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "met"),
    [([(0.8, False), (0.9, False)], True), ([(0.8, False), (1.0, True)], False),
     ([(1.0, True)], False), ([(0.8, False), (1.05, False)], False)],
    ids=["measured", "one-declined", "all-declined", "slower"],
)  # fmt: skip
def test_cassini_repeats_never_counts_a_declined_run_as_meeting_the_target(
    rows, met, monkeypatch, tmp_path, capsys
):
    """A declined run is the same start's run copied (ratio 1 by construction): it
    measured nothing, and "target met" was reported on runs CASSINI never ran."""
    from experiments import cassini_repeats

    given = iter(rows)
    monkeypatch.setattr(cassini_repeats, "one_run", lambda *a: _repeat_row(*next(given)))
    config = tmp_path / "pair.yaml"
    config.write_text(yaml.safe_dump(REPEATED))
    argv = [str(config), "--runs", str(len(rows)), "--out", str(tmp_path / "o")]
    assert cassini_repeats.main(argv) == 0
    report = json.loads((tmp_path / "o" / "pair.json").read_text())
    declined = sum(d for _, d in rows)
    assert report["met"] is met and report["declined_runs"] == declined
    assert [r["met"] for r in report["runs"]] == [not d and x <= 1.02 for x, d in rows]
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert verdict.endswith(": met") if met else "NOT met" in verdict, verdict
    if declined:
        assert f"CASSINI declined {declined} of {len(rows)} runs" in verdict, verdict


def test_cassini_repeats_refuses_jobs_that_share_no_link_in_one_line(
    tmp_path, monkeypatch, capsys
):
    """One job (or jobs on disjoint hosts) shares no link: CASSINI declined every run
    ("shares no link") and the report said "target met"."""
    from experiments import cassini_repeats

    monkeypatch.setattr(cassini_repeats, "one_run", lambda *a: pytest.fail("ran"))
    for jobs in (REPEATED["jobs"][:1],
                 [{"id": "a", "hosts": ["h1", "h2"], "iterations": 10},
                  {"id": "b", "hosts": ["h3", "h4"], "iterations": 10}]):  # fmt: skip
        config = tmp_path / "lone.yaml"
        config.write_text(yaml.safe_dump({**REPEATED, "jobs": jobs}))
        with pytest.raises(SystemExit) as exit_:
            cassini_repeats.main([str(config), "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "Traceback" not in err
        line = err.strip().splitlines()[-1]
        assert f"error: config: {config}: no two jobs share a link" in line, line
    assert not (tmp_path / "o").exists()


def test_cassini_repeats_says_it_runs_its_own_schemes(tmp_path, monkeypatch, capsys):
    """The config's ``schemes:`` (a typo included) was ignored without a word: --help says
    so, and a run whose config names other schemes says which it ignores."""
    from experiments import cassini_repeats

    with pytest.raises(SystemExit):
        cassini_repeats.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "the config's schemes are ignored" in help_text, help_text
    monkeypatch.setattr(cassini_repeats, "one_run", lambda *a: _repeat_row(0.8, False))
    config = tmp_path / "pair.yaml"
    argv = [str(config), "--runs", "1", "--out", str(tmp_path / "o")]
    note = "config's schemes ['baselin', 'cassini'] ignored: each run runs ideal, baseline, cassini"
    cases = ((["baselin", "cassini"], True), (["cassini", "ideal", "baseline"], False))
    for schemes, said in cases:
        config.write_text(yaml.safe_dump({**REPEATED, "schemes": schemes}))
        assert cassini_repeats.main(argv) == 0
        err = capsys.readouterr().err
        assert (note in err) is said, err
