"""experiments.sim_fidelity without root: its scenarios parse, and a testbed result is
modelled with the scenario's mechanisms (priority classes, ECMP paths) reaching the
simulator.  The testbed run itself is `sudo ... -m experiments.sim_fidelity`."""

import json
from dataclasses import replace

import pytest

from cassini.profile import JobProfile
from experiments import common
from experiments import sim_fidelity as sf
from testbed.results import ExperimentResult, JobResult, SchemeResult
from testbed.run import load_config


def fake_result(raw, iteration_s, logs=None, rate_factor=1.0):
    """A result shaped like the runner's: profiles as the jobs' definitions imply (their
    rates times ``rate_factor``), each job's iterations (``iteration_s[job]``) in the
    baseline, its ranks' logs ``logs[job]`` (paths; none by default)."""
    cfg = load_config(raw)
    profiles = {
        j: JobProfile(j, p.iteration_time_s, [replace(x, rate_bps=x.rate_bps * rate_factor)
                                              for x in p.phases])
        for j, p in common.nominal_profiles(cfg).items()
    }  # fmt: skip
    logs = logs or {}
    ideal = {j: JobResult(j, (p.iteration_time_s,) * 9, 0, ()) for j, p in profiles.items()}
    base = {j: JobResult(j, (t,) * 9, 0, tuple(logs.get(j, ()))) for j, t in iteration_s.items()}
    fabric = cfg.topology.fabric.kind
    return ExperimentResult(
        {
            "ideal": SchemeResult("ideal", "ideal", "cubic", fabric, ideal, profiles=profiles),
            "baseline": SchemeResult("baseline", "baseline", "cubic", fabric, base),
        },
        raw,
    )


def test_every_scenario_is_a_valid_testbed_config():
    for sc in sf.SCENARIOS:
        cfg = load_config(sc.config(10))
        assert set(sc.compared) <= {s.name for s in cfg.schemes}
        assert "ideal" in {s.name for s in cfg.schemes}


def test_the_hashed_case_collides_and_the_path_case_spreads():
    hashed = load_config(sf.BY_NAME["ecmp hashed"].config(10)).topology
    path = load_config(sf.BY_NAME["ecmp path"].config(10)).topology
    a, b = sf.ECMP_JOBS
    assert set(hashed.ring_links(a)) & set(hashed.ring_links(b))
    assert not set(path.ring_links(a)) & set(path.ring_links(b))


def test_priority_classes_reach_the_simulator():
    raw = sf.BY_NAME["priority pair"].config(10)
    rows = sf.fidelity_rows(
        "priority pair", ("baseline",), fake_result(raw, {"j1": 0.1, "j2": 0.1})
    )
    sim = {r["job"]: r["sim_iteration_s"] for r in rows}
    # same start: max-min sharing would stretch both to 1.5x; under priority the high
    # job (0) keeps its dedicated pace and the low one sends in the high one's gaps
    alone = common.nominal_profiles(load_config(raw))["j1"].iteration_time_s
    assert sim["j1"] == pytest.approx(alone, rel=0.01)
    assert sim["j2"] >= sim["j1"] * 0.99
    assert {r["ratio"] for r in rows} == {sim["j1"] / 0.1, sim["j2"] / 0.1}


def test_ecmp_paths_reach_the_simulator():
    sims = {}
    for name in ("ecmp hashed", "ecmp path"):
        raw = sf.BY_NAME[name].config(10)
        rows = sf.fidelity_rows(name, ("baseline",), fake_result(raw, {"j1": 0.1, "j2": 0.1}))
        sims[name] = max(r["sim_iteration_s"] for r in rows)
    alone = common.nominal_profiles(load_config(sf.BY_NAME["ecmp path"].config(10)))
    assert sims["ecmp path"] == pytest.approx(alone["j1"].iteration_time_s, rel=0.01)
    assert sims["ecmp hashed"] > 1.2 * sims["ecmp path"]  # sharing one uplink


def test_summary_gives_median_range_and_the_target():
    rows = [{"scenario": "s", "scheme": "b", "job": "j", "ratio": r} for r in (0.95, 1.12, 1.01)]
    (one,) = sf.summary(rows)
    assert (one["median_ratio"], one["min_ratio"], one["max_ratio"]) == (1.01, 0.95, 1.12)
    assert one["runs"] == 3 and one["within_target"] is False


def test_bad_flags_are_refused(capsys):
    for argv in (["--iterations", "5"], ["--runs", "0"], ["--scenarios", "nope"]):
        with pytest.raises(SystemExit) as e:
            sf.main(argv)
        assert e.value.code == 2


@pytest.mark.slow
@pytest.mark.same_worker("ns-3")
def test_the_packet_column_runs_the_scenario_in_ns3():
    """Issue 33 §2, the testbed loop closed at packet level: the two-50 % pair from its
    definition, 4 iterations, in ns-3 beside the fluid model.  Same start: the two jobs'
    phases collide on the 200 Mbit/s bottleneck, so both run slower than alone; CASSINI:
    its planned shifts and periods reach ns-3, both jobs keep to the agent's period (a
    held job cannot run faster than its period) and beat the same start."""
    from conftest import require

    from cassini.packet import ns3env

    require(ns3env.available(), "ns-3 bindings (the [packet] extra; run make setup)")
    rows = {(r["scheme"], r["job"]): r for r in sf.model_rows(sf.BY_NAME["two-50% pair"], 4)}
    assert set(rows) == {(s, j) for s in ("baseline", "cassini") for j in ("j1", "j2")}
    for job in ("j1", "j2"):
        same, held = rows[("baseline", job)], rows[("cassini", job)]
        assert same["packet_iteration_s"] > 1.2 * same["alone_s"]
        assert held["held_period_s"] > held["alone_s"]
        assert held["packet_iteration_s"] >= held["held_period_s"] * (1 - 1e-6)
        assert held["packet_iteration_s"] < same["packet_iteration_s"]
        for r in (same, held):
            assert r["fluid_packet_ratio"] == pytest.approx(
                r["fluid_iteration_s"] / r["packet_iteration_s"]
            )


@pytest.mark.parametrize("scenario", sf.SCENARIOS, ids=lambda s: s.name)
def test_every_scenario_is_modelled_from_its_definition(scenario):
    """``--models-only``'s fluid side for every scenario (the MLTCP pair raised
    AttributeError: it read the scheme's MLTCP fields from before MltcpOptions)."""
    rows = sf.model_rows(scenario, 6, packet=False)
    cfg = load_config(scenario.config(6))
    assert len(rows) == len(scenario.compared) * len(cfg.jobs)
    for row in rows:
        assert row["fluid_iteration_s"] >= row["alone_s"] * (1 - 1e-9)


def write_logs(folder, starts_s):
    """Two ranks' logs per job: iteration 0 at 0, iteration 1 at ``starts_s[job]`` plus
    the rank's 1 ms; returns each job's log paths (rank 0 first)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for job, start in starts_s.items():
        out[job] = []
        for rank in (0, 1):
            path = folder / f"{job}-rank{rank}.jsonl"
            records = [
                {"iter": 0, "start": 100.0},
                {"iter": 1, "start": 100.0 + start + rank * 1e-3},
            ]
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
            out[job].append(path)
    return out


def test_startup_offsets_are_the_second_iterations_start_after_the_earliest_job(tmp_path):
    logs = write_logs(tmp_path / "baseline", {"j1": 0.2, "j2": 0.225})
    raw = sf.BY_NAME["two-50% pair"].config(10)
    scheme = fake_result(raw, {"j1": 0.1, "j2": 0.1}, logs).schemes["baseline"]
    offsets = common.startup_offsets(scheme)
    assert offsets == {"j1": 0.0, "j2": pytest.approx(0.025)}
    # logs moved with their run folder: found under base/<scheme>/ by name
    moved = {j: [tmp_path / "elsewhere" / p.name for p in ps] for j, ps in logs.items()}
    scheme = fake_result(raw, {"j1": 0.1, "j2": 0.1}, moved).schemes["baseline"]
    assert common.startup_offsets(scheme) is None
    assert common.startup_offsets(scheme, base=tmp_path) == offsets
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"iter": 0, "start": 1.0}) + "\n")
    scheme = fake_result(raw, {"j1": 0.1, "j2": 0.1}, {"j1": [short], "j2": [short]})
    assert common.startup_offsets(scheme.schemes["baseline"]) is None


def test_the_measured_rule_starts_the_model_where_start_up_left_the_jobs(tmp_path):
    """Two 50 % jobs that start together stay in lock-step in the fluid model (each
    phase shared, twice as long); a measured 25 ms offset after start-up shortens each
    shared phase by it, and a measured offset of 0 is the configured same start."""
    raw = sf.BY_NAME["two-50% pair"].config(10)
    profile = common.nominal_profiles(load_config(raw))["j1"]
    compute, comm = profile.phases[0].start_s, profile.phases[0].duration_s
    rows = {}
    for label, offsets in (("together", {"j1": 0.0, "j2": 0.0}),
                           ("apart", {"j1": 0.0, "j2": 0.025})):  # fmt: skip
        logs = write_logs(tmp_path / label / "baseline", offsets)
        res = fake_result(raw, {"j1": 0.1, "j2": 0.1}, logs)
        for fluid in sf.FLUID_RULES:
            rows[label, fluid] = {
                r["job"]: r
                for r in sf.fidelity_rows("two-50% pair", ("baseline",), res, fluid=fluid)
            }
    locked = compute + 2 * comm
    for job in ("j1", "j2"):
        assert rows["together", "nominal"][job]["sim_iteration_s"] == pytest.approx(
            locked, rel=1e-3
        )
        assert rows["together", "measured"][job]["sim_iteration_s"] == pytest.approx(
            locked, rel=1e-3
        )
        assert rows["apart", "nominal"][job]["sim_iteration_s"] == pytest.approx(locked, rel=1e-3)
        apart = rows["apart", "measured"][job]
        assert apart["sim_iteration_s"] == pytest.approx(locked - 0.025, rel=0.01)
        assert apart["fluid"] == "measured" and apart["capacity_factor"] == 1.0
    assert rows["apart", "measured"]["j2"]["startup_offset_s"] == pytest.approx(0.025)
    assert rows["apart", "nominal"]["j2"]["startup_offset_s"] is None


def test_the_measured_rule_caps_shared_links_at_the_payload_rate_alone():
    """Profiles measured at 90 % of the link: two jobs sharing it under max-min carry at
    most that together (each shared phase 1/0.9 longer than at the wire rate); under
    strict priority the wire rate stays (the low class fills what the high flow leaves)."""
    for name, factor in (("two-50% pair", 0.9), ("priority pair", 1.0)):
        raw = sf.BY_NAME[name].config(10)
        res = fake_result(raw, {"j1": 0.1, "j2": 0.1}, rate_factor=0.9)
        rows = {f: sf.fidelity_rows(name, ("baseline",), res, fluid=f) for f in sf.FLUID_RULES}
        assert [r["capacity_factor"] for r in rows["measured"]] == pytest.approx([factor] * 2)
        assert {r["capacity_factor"] for r in rows["nominal"]} == {1.0}
        slower = [m["sim_iteration_s"] / n["sim_iteration_s"]
                  for m, n in zip(rows["measured"], rows["nominal"], strict=True)]  # fmt: skip
        if factor < 1:
            assert min(slower) > 1.02
        else:
            assert slower == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="fluid"):
        sf.fidelity_rows(name, ("baseline",), res, fluid="fitted")


def test_saved_runs_are_modelled_again_without_a_testbed(tmp_path, capsys):
    """``--from DIR``: the rows of runs saved under DIR (two runs of one scenario in the
    headline's layout), no root needed; an empty folder and ``--models-only`` refused."""
    raw = sf.BY_NAME["two-50% pair"].config(10)
    for k in (1, 2):
        where = tmp_path / "saved" / f"run{k}" / "run1" / sf.scenario_folder("two-50% pair")
        logs = write_logs(where / "baseline", {"j1": 0.0, "j2": 0.01 * k})
        where.mkdir(parents=True, exist_ok=True)
        fake_result(raw, {"j1": 0.1, "j2": 0.1}, logs).write(where / "results.json")
    out = tmp_path / "out"
    argv = ["--from", str(tmp_path / "saved"), "--no-packet", "--fluid", "measured"]
    assert sf.main([*argv, "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    assert [(r["run"], r["job"]) for r in report["rows"]] == [
        (1, "j1"), (1, "j2"), (2, "j1"), (2, "j2")
    ]  # fmt: skip
    assert report["rows"][3]["startup_offset_s"] == pytest.approx(0.02)
    assert report["fluid"] == "measured" and report["summary"][0]["runs"] == 2
    for argv in (["--from", str(tmp_path / "out")],
                 ["--from", str(tmp_path / "saved"), "--models-only"]):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            sf.main(argv)
        assert e.value.code == 2
    assert "--from" in capsys.readouterr().err
