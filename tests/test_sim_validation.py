"""experiments/sim_validation.py: the testbed scenario's jobs become the right model
FlowJobs (profiles, paths, anchors, grids), and a finished run is compared end to end."""

import json
from dataclasses import replace

import pytest

from cassini.profile import JobProfile, Phase
from cassini.sim.network.flows import cycle_of
from cassini.sim.network.fluid import simulate
from experiments import common
from experiments import sim_validation as sv
from experiments.common import table
from testbed.results import ExperimentResult, JobResult, SchemeResult
from testbed.run import load_config

BOTTLENECK = "tbs1->tbs2"


@pytest.fixture
def pair():
    return load_config(sv.scenario("pair", 10))


def test_scenario_is_experiment_1_on_the_fair_fabric(pair):
    assert pair.topology.fabric.kind == "fair"
    assert [s.name for s in pair.schemes] == ["ideal", "baseline", "cassini"]
    assert len(pair.jobs) == 2


def test_nominal_profile_follows_the_job_definition(pair):
    # 60 ms compute, then 2 x 500 kB from each worker at the 200 Mbit/s bottleneck
    for job in pair.jobs:
        p = common.nominal_profiles(pair)[job.job_id]
        assert p.iteration_time_s == pytest.approx(0.1)
        (phase,) = p.phases
        assert phase.start_s == pytest.approx(0.06)
        assert phase.duration_s == pytest.approx(0.04)
        assert phase.rate_bps == pytest.approx(200e6)


def test_flow_jobs_cross_the_ring_links(pair):
    jobs = common.flow_jobs(pair, common.nominal_profiles(pair), {})
    for fj in jobs:
        assert BOTTLENECK in fj.path and "tbs2->tbs1" in fj.path  # both ring directions
        assert fj.grid_period_s is None
    assert {fj.path[0] for fj in jobs} == {"h1->tbs1", "h2->tbs1"}


# a measured-looking profile: 1.2 ms of per-iteration overhead after the phase
MEASURED = JobProfile("j1", 0.1032, [Phase(0.0605, 0.0415, 1.93e8)])


@pytest.mark.parametrize("profile", ["nominal", "measured"])
@pytest.mark.parametrize("held", [False, True])
def test_a_job_alone_runs_at_its_profile_or_agent_period(pair, profile, held):
    only = common.only_job(pair, "j1")
    profiles = common.nominal_profiles(pair) if profile == "nominal" else {"j1": MEASURED}
    t = profiles["j1"].iteration_time_s
    periods = {"j1": 1.03 * t} if held else None
    jobs = common.flow_jobs(only, profiles, {"j1": 0.037}, periods)
    times = common.model_iteration_times(jobs, pair.topology.link_capacity(), 10, 0.05)["j1"]
    assert len(times) == 9  # as the testbed counts: intervals between ends, first left out
    assert times == pytest.approx([1.03 * t if held else t] * 9, rel=1e-9)


@pytest.mark.parametrize("profile", [MEASURED, JobProfile("j1", 0.1, [Phase(0.06, 0.04, 2e8)])])
@pytest.mark.parametrize("start", [0.0, 0.02, 0.09, 0.25])
def test_anchor_puts_the_phase_where_the_testbed_starts_it(profile, start):
    # the testbed starts iteration 0 (profile time 0) at `start` (a held worker at start mod
    # period); the model's first phase must begin start + phase.start_s later
    cycle = cycle_of(profile)
    phase = profile.phases[0].start_s
    free = common.anchors({"j1": profile}, {"j1": start})["j1"]
    lead = max(0.0, cycle.gaps_s[0] - phase - start)  # the delay that keeps the anchor >= 0
    assert free >= 0
    assert free + cycle.gaps_s[0] == pytest.approx(start + phase + lead)
    period = 1.05 * profile.iteration_time_s
    held = common.anchors({"j1": profile}, {"j1": start}, {"j1": period})["j1"]
    assert 0 <= held < period
    off = (held + cycle.gaps_s[0] - (start % period + phase)) % period
    assert min(off, period - off) == pytest.approx(0.0, abs=1e-12)


def test_free_running_anchors_keep_the_offsets_between_jobs():
    a = JobProfile("a", 0.1032, [Phase(0.0605, 0.0415, 1.93e8)])
    b = JobProfile("b", 0.1040, [Phase(0.0600, 0.0420, 1.90e8)])
    at = common.anchors({"a": a, "b": b}, {"a": 0.0, "b": 0.013})
    assert min(at.values()) >= 0
    # phase starts (anchor + first gap) differ as the testbed's do: 13 ms + 0.5 ms - 0 ms
    start_a = at["a"] + cycle_of(a).gaps_s[0]
    start_b = at["b"] + cycle_of(b).gaps_s[0]
    assert start_b - start_a == pytest.approx(0.013 + 0.0600 - 0.0605)


def test_cassini_shifts_interleave_the_pair_and_same_start_does_not(pair):
    profiles = common.nominal_profiles(pair)
    capacity = pair.topology.link_capacity()
    period = 0.1 * 1.03
    held = common.flow_jobs(pair, profiles, {"j1": 0.0, "j2": 0.05}, {"j1": period, "j2": period})
    res = simulate(held, capacity, horizon_s=3.0, warmup_s=0.5)
    assert res.excess_s[BOTTLENECK] == pytest.approx(0.0, abs=1e-9)
    times = common.model_iteration_times(held, capacity, 10, 0.05)
    assert all(t == pytest.approx([period] * 9) for t in times.values())
    # same start, free-running: fully overlapped, each phase at half the link
    free = common.flow_jobs(pair, profiles, {"j1": 0.0, "j2": 0.0})
    times = common.model_iteration_times(free, capacity, 10, 0.05)
    assert all(t == pytest.approx([0.06 + 0.08] * 9) for t in times.values())
    # a shift of less than the communication time overlaps on the grid too
    close = common.flow_jobs(pair, profiles, {"j1": 0.0, "j2": 0.01}, {"j1": period, "j2": period})
    assert simulate(close, capacity, horizon_s=1.0).excess_s[BOTTLENECK] > 0


def _fake_results(cfg_raw):
    """A runner result whose measurements are exactly what the model predicts for the
    nominal profiles; CASSINI holds both jobs to a 103 ms period."""
    cfg = load_config(cfg_raw)
    profiles = common.nominal_profiles(cfg)
    n = 9
    period = 0.103

    def jobs(seconds, offsets=None, period_s=None):
        return {
            j: JobResult(
                j,
                (seconds,) * n,
                0,
                (),
                start_offset_s=(offsets or {}).get(j, 0.0),
                realignments=0 if period_s else None,
                period_s=period_s,
            )
            for j in profiles
        }

    def scheme(name, kind, jobs, **kw):
        return SchemeResult(name, kind, "cubic", "fair", jobs, **kw)

    return ExperimentResult(
        {
            "ideal": scheme("ideal", "ideal", jobs(0.1), profiles=profiles, profile_source="log"),
            "baseline": scheme("baseline", "baseline", jobs(0.14)),
            "cassini": scheme("cassini", "cassini", jobs(period, {"j2": 0.0515}, period)),
        },
        cfg_raw,
    )


def test_validate_compares_every_scheme_and_job():
    report = sv.validate(_fake_results(sv.scenario("pair", 10)))
    rows = {(r["scheme"], r["job"]): r for r in report["rows"]}
    assert set(rows) == {(s, j) for s in ("ideal", "baseline", "cassini") for j in ("j1", "j2")}
    for r in rows.values():
        assert r["model_error"] == pytest.approx(0.0, abs=1e-9)
        assert r["model_slowdown"] == pytest.approx(r["measured_slowdown"])
    assert rows[("baseline", "j1")]["measured_slowdown"] == pytest.approx(1.4)
    assert report["goodput_factor"] == pytest.approx(1.0)
    assert report["summary"]["model"]["max_abs_error"] == pytest.approx(0.0, abs=1e-9)
    held = {d["job_id"]: d for d in report["model_inputs"]["cassini"]}
    assert held["j1"]["grid_period_s"] == pytest.approx(0.103)
    json.dumps(report)  # written as JSON as it is


def test_goodput_variant_scales_capacity_by_the_best_rate_alone():
    raw = sv.scenario("pair", 10)
    res = _fake_results(raw)
    ideal = res.schemes["ideal"]
    # 180 Mbit/s payload: 8 Mbit take 44.4 ms
    slower = {
        j: JobProfile(j, 0.06 + 0.04 / 0.9, [Phase(0.06, 0.04 / 0.9, 0.9 * p.phases[0].rate_bps)])
        for j, p in ideal.profiles.items()
    }
    res = ExperimentResult({**res.schemes, "ideal": replace(ideal, profiles=slower)}, raw)
    report = sv.validate(res)
    assert report["goodput_factor"] == pytest.approx(0.9)
    rows = {(r["scheme"], r["job"]): r for r in report["rows"]}
    base = rows[("baseline", "j1")]
    # nominal capacity: 100 Mbit/s each -> 80 ms; goodput capacity: 90 each -> 88.9 ms
    assert base["model_ms"] == pytest.approx(140.0)
    assert base["model_goodput_ms"] == pytest.approx(60 + 80 / 0.9)


def test_main_models_a_finished_run_without_root(tmp_path, capsys):
    path = tmp_path / "results.json"
    _fake_results(sv.scenario("pair", 10)).write(path)
    assert sv.main(["--results", str(path), "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "validation.json").read_text())
    assert len(report["rows"]) == 6
    held = {d["job_id"]: d for d in report["model_inputs"]["cassini"]}
    assert held["j2"]["grid_period_s"] == pytest.approx(0.103)  # read back from results.json
    assert report["realignments"] == {"j1": 0, "j2": 0}
    assert (tmp_path / "out" / "validation.png").stat().st_size > 0
    assert "measured ms" in capsys.readouterr().out


def test_the_iterations_a_held_job_ran_off_its_slot_are_named_and_counted():
    res = _fake_results(sv.scenario("pair", 10))
    held = res.schemes["cassini"]
    late = held.jobs["j2"]
    times = list(late.iteration_times_s)
    times[6] += 0.08  # re-aligned: waited most of a period for its next slot
    late = replace(late, iteration_times_s=tuple(times), realignments=1, off_slot=(6,))
    jobs = {**held.jobs, "j2": late}
    report = sv.validate(
        ExperimentResult({**res.schemes, "cassini": replace(held, jobs=jobs)}, res.config)
    )
    rows = {(r["scheme"], r["job"]): r for r in report["rows"]}
    row = rows[("cassini", "j2")]
    assert row["off_slot"] == [6]
    assert row["note"] == "off its slot in 1 of 9 iterations (6)"
    # the model holds the job to its slot: the skip is an error in both columns
    assert row["model_error"] < -0.05
    assert row["model_steady_error"] < -0.1
    assert rows[("cassini", "j1")]["off_slot"] == [] and not rows[("cassini", "j1")]["note"]
    assert sv._off_slot_note(tuple(range(8)), 20) == (
        "off its slot in 8 of 20 iterations (0, 1, 2, 3, 4, 5, ...)"
    )


def _logged(tmp_path, job, comm_starts_s, comm_s):
    """A worker log whose iterations communicate from ``comm_starts_s`` for ``comm_s``."""
    path = tmp_path / f"{job}.jsonl"
    records = [
        {"iter": k, "start": t - 0.06, "comm_start": t, "end": t + comm_s, "bytes_sent": 0}
        for k, t in enumerate(comm_starts_s)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return JobResult(job, (0.14,) * (len(records) - 1), 0, (path,))


@pytest.mark.parametrize(
    ("offset_s", "comm_s"),
    [
        (0.0, {"j1": 0.08, "j2": 0.08}),  # lock-step: each at half the link
        (0.05, {"j1": 0.04, "j2": 0.04}),  # apart: each alone
        # j1 alone for 20 ms (half its bits), then both at half: 60 ms each
        (0.02, {"j1": 0.06, "j2": 0.06}),
    ],
)
def test_phase_replay_shares_the_link_from_the_phases_the_testbed_had(tmp_path, offset_s, comm_s):
    res = _fake_results(sv.scenario("pair", 10))
    cfg = load_config(res.config)
    profiles = dict(res.schemes["ideal"].profiles)  # 40 ms alone at the link's rate
    starts = [0.2 * k for k in range(8)]
    jobs = {
        "j1": _logged(tmp_path, "j1", starts, comm_s["j1"]),
        "j2": _logged(tmp_path, "j2", [t + offset_s for t in starts], comm_s["j2"]),
    }
    shared = replace(res.schemes["baseline"], jobs=jobs)
    replay = sv.phase_replay(cfg, profiles, shared, cfg.topology.link_capacity())
    for job, pairs in replay.items():
        assert len(pairs) == 7  # the first iteration (start-up) left out
        for modelled, measured in pairs:
            assert measured == pytest.approx(comm_s[job])
            assert modelled == pytest.approx(comm_s[job], rel=1e-6), job
    report = sv.validate(ExperimentResult({**res.schemes, "baseline": shared}, res.config))
    row = {(r["scheme"], r["job"]): r for r in report["rows"]}[("baseline", "j1")]
    assert row["model_replay_error"] == pytest.approx(0.0, abs=1e-6)
    assert row["measured_comm_ms"] == pytest.approx(1e3 * comm_s["j1"])
    assert report["summary"]["model"]["max_abs_replay_error"] == pytest.approx(0.0, abs=1e-6)
    # a scheme without worker logs (re-modelled elsewhere) has no replay, and says so
    assert (
        "model_replay_error"
        not in {(r["scheme"], r["job"]): r for r in report["rows"]}[("cassini", "j1")]
    )


def test_a_declined_cassini_row_says_so_in_the_table():
    res = _fake_results(sv.scenario("pair", 10))
    base = res.schemes["baseline"]
    copied = replace(base, name="cassini", kind="cassini", measured_as="baseline")
    report = sv.validate(ExperimentResult({**res.schemes, "cassini": copied}, res.config))
    # the table run.show prints (experiments.harness)
    text = table(sv.shown_rows(report["rows"]), list(sv.COLUMNS)).splitlines()
    assert [line for line in text if "declined" in line] == [
        line for line in text if line.startswith("cassini")
    ]
    assert sum("declined: baseline's run" in line for line in text) == 2  # j1 and j2
