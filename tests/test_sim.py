"""cassini.sim: network model invariants, topology, workloads, schedulers, engine, CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest
from conftest import require
from helpers.sim_configs import TINY_CONFIG
from helpers.sim_oracle import max_min_rates
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.errors import InputError
from cassini.plugin import choose_placement
from cassini.profile import JobProfile, Phase
from cassini.sim.config import check_models, config_from_dict
from cassini.sim.engine import run
from cassini.sim.network.flows import FlowJob, cycle_of
from cassini.sim.network.fluid import simulate
from cassini.sim.report.sweep import run_sweep
from cassini.sim.schedulers import Scheduler, candidate_placements, decide
from cassini.sim.topology import Cluster
from cassini.sim.traces.ours import write as write_trace
from cassini.sim.workload import JobSpec, load_library, poisson_jobs, read_trace

LIBRARY = load_library()


def job(job_id: str, model: str) -> JobProfile:
    p = LIBRARY[model]
    return JobProfile(job_id, p.iteration_time_s, p.phases)


# -- network model ------------------------------------------------------------------------
@pytest.mark.parametrize("model", sorted(LIBRARY))
def test_cycle_keeps_every_bit_and_the_period(model: str) -> None:
    p = LIBRARY[model]
    c = cycle_of(p)
    assert sum(c.bits) == pytest.approx(p.bits_per_iteration, rel=1e-9)
    duration = sum(b / r for b, r in zip(c.bits, c.rates_bps, strict=True))
    assert sum(c.gaps_s) + duration == pytest.approx(p.iteration_time_s, rel=1e-9)


def test_cycle_of_a_wrapping_phase_starts_after_it() -> None:
    p = JobProfile("w", 0.3, [Phase(0.25, 0.1, 4e10)])  # runs to 0.05 s of the next one
    c = cycle_of(p)
    assert c.offset_s == pytest.approx(0.05)
    assert c.gaps_s == pytest.approx((0.2,))
    assert c.bits == pytest.approx((4e9,))


@pytest.mark.parametrize("model", sorted(LIBRARY))
def test_a_job_alone_sees_its_profile_iteration_time(model: str) -> None:
    p = job("a", model)
    r = simulate(
        [FlowJob("a", p, ("l",), anchor_s=0.013)], {"l": 5e10}, horizon_s=20 * 0.6, warmup_s=0.6
    )
    assert len(r.iteration_times_s["a"]) >= 10
    assert np.allclose(r.iteration_times_s["a"], p.iteration_time_s, rtol=1e-9)
    assert r.excess_s["l"] == 0.0


def test_max_min_example() -> None:
    assert max_min_rates([10, 10, 2], [[0], [0], [0]], [12]) == [5.0, 5.0, 2.0]
    assert max_min_rates([10, 10, 10], [[0], [0, 1], [1]], [12, 8]) == [8.0, 4.0, 4.0]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 3).flatmap(
        lambda n_links: st.tuples(
            st.lists(st.floats(1, 100), min_size=n_links, max_size=n_links),
            st.lists(
                st.tuples(
                    st.floats(0.5, 80),
                    st.sets(st.integers(0, n_links - 1), min_size=1),
                ),
                min_size=1,
                max_size=6,
            ),
        )
    )
)
def test_max_min_is_feasible_and_fair(problem) -> None:
    capacity, flows = problem
    demand = [d for d, _ in flows]
    paths = [sorted(p) for _, p in flows]
    rate = max_min_rates(demand, paths, capacity)
    load = defaultdict(float)
    for r, p in zip(rate, paths, strict=True):
        for link in p:
            load[link] += r
    for link, total in load.items():
        assert total <= capacity[link] * (1 + 1e-9)
    for f, (r, p) in enumerate(zip(rate, paths, strict=True)):
        assert 0 <= r <= demand[f] * (1 + 1e-9)
        if r < demand[f] * (1 - 1e-9):  # held back: some link of its path is full and
            assert any(  # nobody on it gets more
                load[link] >= capacity[link] * (1 - 1e-6)
                and all(rate[g] <= r * (1 + 1e-6) for g in range(len(rate)) if link in paths[g])
                for link in p
            )


def test_work_is_conserved_on_a_shared_link() -> None:
    a, b = job("a", "vgg16"), job("b", "bert")
    flows = [FlowJob("a", a, ("shared", "pa"), 0.0), FlowJob("b", b, ("shared", "pb"), 0.05)]
    caps = {"shared": 5e10, "pa": 1e11, "pb": 1e11}
    r = simulate(flows, caps, horizon_s=12.0)
    assert r.excess_s["shared"] > 0  # they do collide
    # the shared link carries exactly what the two jobs send, and is full while over-demanded
    assert r.carried_bits["shared"] == pytest.approx(r.carried_bits["pa"] + r.carried_bits["pb"])
    assert r.carried_bits["shared"] >= 5e10 * r.excess_s["shared"] * (1 - 1e-9)
    assert r.carried_bits["shared"] <= 5e10 * r.window_s
    # each job sends its profile's bits every iteration: nothing lost, nothing created
    for fid, p in (("a", a), ("b", b)):
        k = len(r.iteration_times_s[fid])  # iterations completed after the first start
        assert k * p.bits_per_iteration <= r.carried_bits[f"p{fid}"] + 1
        assert r.carried_bits[f"p{fid}"] <= (k + 2) * p.bits_per_iteration


def test_held_compatible_pair_keeps_dedicated_pace_and_same_start_does_not() -> None:
    # a compatible pair by construction (the library's entries are measured, and change):
    # each sends at 40 / 38 Gbit/s for under half of a 0.3 s iteration
    a = JobProfile("a", 0.3, (Phase(0.16, 0.14, 40e9),))
    b = JobProfile("b", 0.3, (Phase(0.17, 0.13, 38e9),))
    choice = choose_placement({"a": a, "b": b}, {"l": 5e10}, [{"a": ["l"], "b": ["l"]}])
    assert choice.score == pytest.approx(1.0)

    def flows(held: bool) -> list[FlowJob]:
        out = []
        for p in (a, b):
            shift = choice.time_shifts_s[p.job_id] if held else 0.0
            anchor = (shift + cycle_of(p).offset_s) % p.iteration_time_s
            out.append(FlowJob(p.job_id, p, ("l",), anchor, p.iteration_time_s if held else None))
        return out

    held = simulate(flows(True), {"l": 5e10}, horizon_s=9.0, warmup_s=1.5)
    free = simulate(flows(False), {"l": 5e10}, horizon_s=9.0, warmup_s=1.5)
    for p in (a, b):
        assert held.mean_iteration_time_s(p.job_id) == pytest.approx(p.iteration_time_s)
        assert free.mean_iteration_time_s(p.job_id) > 1.05 * p.iteration_time_s
    assert held.excess_s["l"] == 0.0 < free.excess_s["l"]


def test_simulate_rejects_bad_input() -> None:
    a = job("a", "vgg16")
    with pytest.raises(InputError, match="unknown link"):
        simulate([FlowJob("a", a, ("x",))], {"l": 1e9}, horizon_s=1)
    with pytest.raises(InputError, match="duplicate"):
        simulate([FlowJob("a", a, ()), FlowJob("a", a, ())], {}, horizon_s=1)
    with pytest.raises(InputError, match="horizon"):
        simulate([FlowJob("a", a, ())], {}, horizon_s=1, warmup_s=2)


# -- topology -----------------------------------------------------------------------------
def test_paths_in_two_and_three_tiers() -> None:
    c = Cluster(racks=4, servers_per_rack=2, gpus_per_server=4, oversubscription=2)
    assert c.gpus == 32 and c.links["tor0"] == pytest.approx(5e10)
    assert c.path([3]) == ()
    assert c.path([0, 1]) == ("srv0", "srv1")
    assert c.path([1, 2]) == ("srv1", "srv2", "tor0", "tor1")
    t = Cluster(racks=4, servers_per_rack=2, gpus_per_server=4, racks_per_pod=2)
    assert t.tiers == 3 and "pod1" in t.links
    assert t.path([0, 2]) == ("srv0", "srv2", "tor0", "tor1")  # same pod
    assert t.path([0, 7]) == ("srv0", "srv7", "tor0", "tor3", "pod0", "pod1")


def test_cluster_rejects_bad_shapes() -> None:
    with pytest.raises(InputError, match="racks_per_pod"):
        Cluster(racks=3, servers_per_rack=2, gpus_per_server=1, racks_per_pod=2)
    with pytest.raises(InputError, match="cluster.racks"):
        Cluster.from_dict({"racks": 0, "servers_per_rack": 1, "gpus_per_server": 1})
    with pytest.raises(InputError, match="cluster.speed"):
        Cluster.from_dict({"racks": 1, "servers_per_rack": 1, "gpus_per_server": 1, "speed": 1})


# -- workloads ----------------------------------------------------------------------------
def test_poisson_jobs_offer_the_requested_load() -> None:
    jobs = poisson_jobs(3000, 0.8, 256, LIBRARY, gpus={4: 1, 16: 1}, seed=3)
    work = sum(j.gpus * j.iterations * LIBRARY[j.model].iteration_time_s for j in jobs)
    span = jobs[-1].arrival_s - jobs[0].arrival_s
    assert work / (span * 256) == pytest.approx(0.8, rel=0.1)
    assert {j.model for j in jobs} == set(LIBRARY)


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_trace_round_trip(tmp_path, suffix: str) -> None:
    jobs = poisson_jobs(20, 0.9, 64, LIBRARY, gpus={2: 1, 8: 2}, seed=1)
    path = tmp_path / f"t{suffix}"
    write_trace(jobs, path)
    assert read_trace(path, LIBRARY) == jobs


def test_trace_durations_and_errors(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,arrival_s,gpus,duration_s,model\nx,5,4,30,vgg16\n")
    # 30 s on a dedicated network, in whole iterations of the library's vgg16
    iterations = math.ceil(30 / LIBRARY["vgg16"].iteration_time_s)
    # the job keeps the recorded run time it was counted from (a trace written out says 30 s)
    assert read_trace(path, LIBRARY) == [JobSpec("x", 5.0, 4, iterations, "vgg16", run_s=30.0)]


HEAD = "job_id,arrival_s,gpus,iterations,model\n"
ROW = '{"job_id": "x", "arrival_s": 0, "gpus": 2, "iterations": 3, "model": "bert"'
EXPECTED = "expected our trace"


@pytest.mark.parametrize(
    ("name", "body", "where", "field", "message"),
    [
        ("t.csv", HEAD + "x,0,2,10,nosuch\n", "t.csv:2:5", "model", "unknown model 'nosuch'"),
        ("t.csv", HEAD + "x,0,2,10,bert\nx,1,2,10,bert\n", "t.csv:3:1", "job_id",
         "duplicate job id 'x'"),
        ("t.csv", HEAD + "x,-1,2,10,bert\n", "t.csv:2:2", "arrival_s", "must be >= 0"),
        ("t.csv", "job_id,arrival_s,gpus,iterations,duration_s,model\nx,0,2,10,3,bert\n",
         "t.csv:2:5", "duration_s", "give exactly one of iterations and duration_s"),
        ("t.csv", HEAD + "x,0,2.5,10,bert\n", "t.csv:2:3", "gpus", "must be a whole number"),
        # a missing column, a non-numeric cell (in a later row too)
        ("t.csv", "job_id,arrival_s,iterations,model\nx,0,10,bert\n", None, "trace",
         "header lacks gpus"),
        ("t.csv", HEAD + "x,0,abc,10,bert\n", "t.csv:2:3", "gpus", "not a number: 'abc'"),
        ("t.csv", HEAD + "x,0,2,10,bert\ny,zero,2,10,bert\n", "t.csv:3:2", "arrival_s",
         "not a number: 'zero'"),
        ("t.json", "[" + ROW.replace('"gpus": 2', '"gpus": "two"') + "}]", "t.json:1:34",
         "gpus", "not a number: 'two'"),
        ("t.json", "[" + ROW + ', "colour": 1}]', "t.json:1:79", "colour", "unknown field"),
        # malformed JSON, empty files
        ("t.json", "[" + ROW, "t.json:1:77", "trace", "malformed JSON"),
        ("t.json", "", None, "trace", "empty file; " + EXPECTED),
        ("t.json", "[]", None, "trace", "no replayable jobs"),
        ("t.csv", "", None, "trace", "empty file; " + EXPECTED),
        ("t.csv", HEAD, None, "trace", "no replayable jobs"),
    ],
)  # fmt: skip
def test_trace_errors_name_the_row_and_field(tmp_path, name, body, where, field, message) -> None:
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(InputError) as e:
        read_trace(path, LIBRARY)
    assert e.value.field == field  # the whole field name, not a prefix or a substring
    # a bad row says file:line:column first; a bad file says the file
    prefix = f"{tmp_path}/{where}: {field}: " if where else f"{field}: {path}: "
    assert str(e.value).startswith(prefix), str(e.value)
    assert message in str(e.value)


# -- schedulers ---------------------------------------------------------------------------
def test_scheduler_names() -> None:
    assert Scheduler.parse("themis+cassini").placement == "cassini"
    assert Scheduler.parse("ideal").dedicated_network
    with pytest.raises(InputError, match="unknown scheduler"):
        Scheduler.parse("slurm")


def test_candidates_fit_the_free_gpus_and_are_distinct() -> None:
    c = Cluster(racks=4, servers_per_rack=4, gpus_per_server=8)
    rng = np.random.default_rng(0)
    free = rng.integers(0, 9, c.servers)
    for gpus in (3, 8, 20, 45):
        options = candidate_placements(c, free, gpus, 10, rng)
        assert options and len(options) <= 10
        assert len({tuple(sorted(o.items())) for o in options}) == len(options)
        for o in options:
            assert sum(o.values()) == gpus
            assert all(0 < g <= free[s] for s, g in o.items())
        first = options[0]
        assert len({c.rack_of(s) for s in first}) == min(
            len({c.rack_of(s) for s in o}) for o in options
        )
    assert candidate_placements(c, free, int(free.sum()) + 1, 10, rng) == []


def test_themis_serves_the_worst_treated_first_and_pollux_resizes() -> None:
    old = JobSpec("old", 0.0, 4, 100, "vgg16")
    new = JobSpec("new", 50.0, 4, 100, "vgg16")
    order = decide("themis", [new, old], 8, 60.0, {"vgg16": 0.3})
    assert [d.job.job_id for d in order] == ["old", "new"]
    alone = decide("pollux", [new], 64, 60.0, {"vgg16": 0.3})[0]
    assert alone.gpus == 8 and alone.iterations > 50  # twice the GPUs, fewer iterations
    short = decide("pollux", [old], 2, 60.0, {"vgg16": 0.3})[0]
    assert short.gpus == 2 and short.iterations == 200


# -- engine -------------------------------------------------------------------------------
SMALL = Cluster(racks=4, servers_per_rack=2, gpus_per_server=2, oversubscription=2)


@pytest.fixture(scope="module")
def small_jobs() -> list[JobSpec]:
    return poisson_jobs(
        40, 1.0, SMALL.gpus, LIBRARY, gpus={1: 1, 3: 1, 5: 1, 8: 1}, iterations=(50, 150), seed=2
    )


@pytest.mark.parametrize("scheduler", ["themis", "themis+cassini", "pollux+random", "ideal"])
def test_no_gpu_is_double_booked_and_every_job_finishes(small_jobs, scheduler: str) -> None:
    r = run(SMALL, small_jobs, LIBRARY, scheduler, n_candidates=5)
    assert sorted(j.job_id for j in r.jobs) == sorted(j.job_id for j in small_jobs)
    events = []
    for j in r.jobs:
        assert j.start_s >= j.arrival_s and j.finish_s > j.start_s
        assert j.mean_iteration_s >= j.dedicated_iteration_s * (1 - 1e-9)
        for server, gpus in j.placement:
            events += [(j.start_s, 1, server, gpus), (j.finish_s, 0, server, -gpus)]
    in_use = defaultdict(int)
    for _, _, server, gpus in sorted(events):  # releases sort before starts at a tie
        in_use[server] += gpus
        assert 0 <= in_use[server] <= SMALL.gpus_per_server


def test_ideal_and_a_lone_job_run_at_dedicated_speed(small_jobs) -> None:
    r = run(SMALL, small_jobs, LIBRARY, "ideal")
    assert all(j.slowdown == pytest.approx(1.0) for j in r.jobs)
    lone = [JobSpec("solo", 0.0, 8, 200, "vgg19")]
    r = run(SMALL, lone, LIBRARY, "themis+cassini")
    assert r.jobs[0].mean_iteration_s == pytest.approx(LIBRARY["vgg19"].iteration_time_s)
    assert r.jobs[0].jct_s == pytest.approx(200 * LIBRARY["vgg19"].iteration_time_s)


def test_contention_slows_jobs_and_shows_as_excess_demand(small_jobs) -> None:
    base = run(SMALL, small_jobs, LIBRARY, "themis+random", seed=1).summary()
    assert base["mean_slowdown"] > 1.0
    assert base["excess_demand_s_total"] > 0
    assert base["p99_slowdown"] >= base["mean_slowdown"]


# -- config, sweep, CLI -------------------------------------------------------------------
CONFIG = TINY_CONFIG


def test_config_errors_name_the_field() -> None:
    with pytest.raises(InputError, match="workload.poisson.gpus.64"):
        config_from_dict(
            CONFIG | {"workload": {"poisson": {"jobs": 1, "load": 1, "gpus": {"64": 1}}}}
        )
    with pytest.raises(InputError, match="sweep.speed"):
        config_from_dict(CONFIG | {"sweep": {"speed": [1]}})
    with pytest.raises(InputError, match="unknown scheduler"):
        config_from_dict(CONFIG | {"schedulers": ["themis+magic"]})
    with pytest.raises(InputError, match="exactly one"):
        config_from_dict(CONFIG | {"workload": {}})
    # a list or mapping where a name is wanted was hashed: TypeError, a traceback
    for field_name, value in (("routing", ["ecmp"]), ("network", {"a": 1})):
        with pytest.raises(InputError, match=f"{field_name}: must be one of .* got an"):
            config_from_dict(CONFIG | {field_name: value})
    with pytest.raises(InputError, match="bad_rows"):
        config_from_dict(CONFIG | {"workload": {"trace": "t.csv", "bad_rows": ["skip"]}})
    # checked when read, not when CASSINI is first consulted mid-run
    with pytest.raises(InputError, match=r"precision_deg: must be in \[0.1, 180\] degrees"):
        config_from_dict(CONFIG | {"precision_deg": 500})
    with pytest.raises(InputError, match="seed: must be an integer"):
        config_from_dict(CONFIG | {"seed": 1.5})
    # named with the config's field when read (they came from the workload's draw, later,
    # as "iterations:", "gpus:", "models:")
    poisson = CONFIG["workload"]["poisson"]
    for extra, where in (
        ({"iterations": [50, 20]}, "workload.poisson.iterations"),
        ({"gpus": {"1": 0}}, "workload.poisson.gpus"),
    ):
        with pytest.raises(InputError, match=where):
            config_from_dict(CONFIG | {"workload": {"poisson": poisson | extra}})
    # the library (with a config's profile files) is read with the file: read_config
    cfg = config_from_dict(
        CONFIG | {"workload": {"poisson": poisson | {"models": ["bert", "nope"]}}}
    )
    with pytest.raises(InputError, match=r"workload.poisson.models\[1\]: unknown model"):
        check_models(cfg)


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path) -> None:
    """YAML (and JSON) parsers keep the last of two equal keys: a config could say
    ``seed: 1`` and run with a later ``seed: 2`` unseen."""
    from cassini.sim.config import read_config

    path = tmp_path / "c.yaml"
    path.write_text("seed: 1\nname: a\nseed: 2\n")
    with pytest.raises(InputError, match=r"c.yaml: malformed YAML: duplicate key 'seed' \(line 3"):
        read_config(path)
    path = tmp_path / "c.json"
    path.write_text('{"seed": 1, "seed": 2}')
    with pytest.raises(InputError, match="c.json: malformed JSON: duplicate key 'seed'"):
        read_config(path)


def test_cli_refuses_an_output_it_cannot_write_before_simulating(tmp_path) -> None:
    """``--out`` naming a file (or a folder under one) failed with a traceback after the
    whole simulation; now exit 2 naming it, before."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(CONFIG | {"workload": {"poisson": {"jobs": 400, "load": 1.0,
                                                                  "gpus": {"8": 1}}}}))  # fmt: skip
    (tmp_path / "afile").write_text("")
    for command, out in (("run", "afile"), ("run", "afile/sub"), ("sweep", "afile")):
        done = subprocess.run(
            [sys.executable, "-m", "cassini.cli", "sim", command, str(cfg), "--out",
             str(tmp_path / out), "--quiet"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "afile" in done.stderr


def test_a_trace_with_no_good_row_says_what_was_wrong(tmp_path) -> None:
    (tmp_path / "t.csv").write_text("job_id,arrival_s,gpus,iterations,model\na,0,0,10,bert\n")
    done = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "sim", "trace", "convert", str(tmp_path / "t.csv"),
         "--out", str(tmp_path / "o.csv")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "1 bad row: " in done.stderr and "gpus: must be > 0" in done.stderr
    assert not (tmp_path / "o.csv").exists()


def test_sweep_in_a_process_pool() -> None:
    cfg = config_from_dict(CONFIG)
    rows, backend = run_sweep(cfg, backend="pool", workers=2)
    assert backend == "pool"
    assert sorted((r["load"], r["scheduler"]) for r in rows) == [
        (0.8, "themis"),
        (0.8, "themis+cassini"),
        (1.0, "themis"),
        (1.0, "themis+cassini"),
    ]
    assert all(r["jobs"] == 12 for r in rows)


def test_cli_run_writes_json_and_plot(tmp_path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(CONFIG))
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cassini.cli",
            "sim",
            "run",
            str(cfg),
            "--out",
            str(out),
            "--format",
            "json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr

    def refuse(token: str) -> None:  # Python's NaN / Infinity tokens are not JSON
        raise AssertionError(f"{token} in the output")

    summary = json.loads(done.stdout, parse_constant=refuse)
    assert set(summary["summaries"]) == {"themis", "themis+cassini"}
    assert "themis/themis+cassini" in summary["ratios"]
    data = json.loads((out / "results.json").read_text(), parse_constant=refuse)
    assert len(data["jobs"]["themis"]) == 12
    for record in data["jobs"]["themis"]:  # iteration time over the job's life
        times = [t for t, _ in record["timeline"]]
        assert times and times == sorted(times) and times[0] >= record["start_s"]
        assert all(
            it >= record["dedicated_iteration_s"] * (1 - 1e-9) for _, it in record["timeline"]
        )
    assert (out / "cdf.png").stat().st_size > 1000
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "cassini.cli",
            "sim",
            "run",
            str(tmp_path / "nope.yaml"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "cannot read" in bad.stderr


def test_summary_handles_weighted_quantiles() -> None:
    from cassini.sim.results import weighted_quantile

    v, w = np.array([1.0, 2.0, 10.0]), np.array([98.0, 1.0, 1.0])
    assert weighted_quantile(v, w, 0.5) == 1.0
    assert weighted_quantile(v, w, 0.99) == 2.0
    assert weighted_quantile(v, w, 1.0) == 10.0
    assert math.isnan(weighted_quantile(np.array([]), np.array([]), 0.5))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.1, 50), min_size=1, max_size=8), st.floats(1, 100))
def test_one_link_water_filling_matches_progressive_filling(demand, capacity) -> None:
    from helpers.sim_oracle import _water_fill

    fast = _water_fill(np.array(demand), capacity)
    slow = max_min_rates(demand, [[0]] * len(demand), [capacity])
    assert np.allclose(fast, slow, rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_sweep_on_ray_matches_the_process_pool() -> None:
    from cassini.sim.report.sweep import ray_available

    require(ray_available(), "Ray (make setup installs the [ray] extra)")
    cfg = config_from_dict(CONFIG)
    on_ray, backend = run_sweep(cfg, backend="ray")
    in_pool, _ = run_sweep(cfg, backend="pool", workers=1)
    assert backend == "ray"

    def key(rows):
        return sorted(
            (r["load"], r["scheduler"], r["mean_slowdown"], r["p99_slowdown"], r["mean_jct_s"])
            for r in rows
        )

    assert key(on_ray) == key(in_pool)  # same jobs, same seeds: the same answers
