"""The continuous network model (``network: continuous``): its flow state steps a group
exactly as the window loop does when started alike, keeps going across calls, puts a
job's end where its iterations end, and the engine built on it finishes every job
without any running faster than its dedicated pace."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from conftest import require_module
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cassini.errors import InputError
from cassini.profile import JobProfile, Phase
from cassini.sim import engine
from cassini.sim.config import config_from_dict
from cassini.sim.network.continuous import nearest_level
from cassini.sim.network.flows import cycle_of
from cassini.sim.network.flowsolve import LOCAL_SET_FLOWS
from cassini.sim.network.flowstate import FlowState
from cassini.sim.network.flowstep import cycle_position, position_of
from cassini.sim.network.fluid import simulate
from cassini.sim.options import SimOptions
from cassini.sim.report.recording import NetworkRecorder, link_timeline
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec
from mltcp.policy import MltcpParams
from tests.test_sim_fastloop import CAPS, groups, profiles

require_module("numba", "the [sim] extra: the continuous model is compiled")


def started_like_a_window(jobs, mltcp, progress=None) -> FlowState:
    """A flow state whose jobs begin their first cycles at the window's anchors."""
    state = FlowState(
        dict(CAPS),
        mltcp=mltcp,
        progress=progress,
        classes=len({j.priority for j in jobs}) > 1,
        weighted=any(j.share != 1.0 for j in jobs),
        mltcp_every_event=True,  # the window loop's steps
    )
    for k, j in enumerate(jobs):
        state.add(
            j.job_id,
            cycle_of(j.profile),
            list(j.path),
            done=0.0,
            iterations=10**9,
            pos_s=0.0,
            stall_s=j.anchor_s,
            grid_s=j.grid_period_s,
            anchor_s=j.anchor_s,
            priority=j.priority,
            share=j.share,
            uid=k,
        )
    return state


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), periods=st.integers(3, 12))
def test_flow_state_steps_a_group_as_the_window_loop_does(group, periods) -> None:
    jobs, rule = group
    jobs = [j for j in jobs if j.profile.phases]  # pure compute never enters the state
    assume(jobs)
    longest = max(j.profile.iteration_time_s for j in jobs)
    horizon = (periods + 0.3137) * longest
    window = simulate(jobs, CAPS, horizon_s=horizon, warmup_s=0.0, **rule.kw)
    state = started_like_a_window(jobs, **rule.kw)
    state_anchored = [j.anchor_s > 0 for j in jobs]
    times: dict[int, list[float]] = {}
    busy: dict[int, list[float]] = {}
    while state.t < horizon:  # a held job that overruns its period stops the stepping
        adv = state.advance(horizon)
        assert not adv.finished
        for u, (c, b) in adv.cycles().items():
            times.setdefault(u, []).extend(c)
            busy.setdefault(u, []).extend(b)
    for k, j in enumerate(jobs):
        ref = window.iteration_times_s[j.job_id]
        assert times.get(k, []) == pytest.approx(ref, rel=1e-9, abs=1e-12), state_anchored[k]
        # the window reports a busy time when the cycle ends, the state when the next
        # begins: a held job waiting for its slot at the horizon has one fewer here
        ref_busy = window.busy_s[j.job_id][: len(busy.get(k, []))]
        assert len(window.busy_s[j.job_id]) - len(ref_busy) <= 1
        assert busy.get(k, []) == pytest.approx(ref_busy, rel=1e-9, abs=1e-12)
    excess = state.excess_s()
    for link, s in window.excess_s.items():
        assert excess.get(link, 0.0) == pytest.approx(s, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), cuts=st.lists(st.floats(0.01, 0.99), min_size=1, max_size=4))
def test_stepping_in_parts_changes_nothing_for_free_running_jobs(group, cuts) -> None:
    # (not under MLTCP: its weights are re-solved at every step, and a stop is a step)
    jobs, mltcp = group[0], None
    jobs = [replace(j, grid_period_s=None) for j in jobs if j.profile.phases]
    assume(jobs)
    horizon = 6 * max(j.profile.iteration_time_s for j in jobs)
    whole = started_like_a_window(jobs, mltcp)
    one = whole.advance(horizon).cycles()
    parts = started_like_a_window(jobs, mltcp)
    got: dict[int, list[float]] = {}
    for t in [*sorted(c * horizon for c in cuts), horizon]:
        for u, (times, _) in parts.advance(max(t, parts.t)).cycles().items():
            got.setdefault(u, []).extend(times)
    assert set(got) == set(one)
    for u, (times, _) in one.items():
        assert got[u] == pytest.approx(list(times), rel=1e-6, abs=1e-9)


@given(profile=profiles("j"), at=st.floats(0.0, 0.999))
def test_cycle_position_and_position_of_are_inverse(profile, at) -> None:
    cycle = cycle_of(profile)
    if not cycle.bits:
        return
    pos = at * cycle.iteration_time_s
    assert position_of(cycle, *cycle_position(cycle, pos)) == pytest.approx(pos, abs=1e-12)


@pytest.mark.parametrize("offset_iterations", [0.0, 0.25, 0.9])
def test_a_job_alone_ends_after_its_iterations_at_dedicated_pace(offset_iterations) -> None:
    profile = JobProfile("a", 0.5, (Phase(0.1, 0.15, 1e9), Phase(0.3, 0.1, 2e9)))
    cycle = cycle_of(profile)
    state = FlowState({"l": 4e9})
    state.t = 10.0
    period = profile.iteration_time_s
    # a job started at 10 s - offset, so far at dedicated pace
    done = offset_iterations
    pos = (done * period - cycle.offset_s) % period
    state.add("a", cycle, ["l"], done=done, iterations=7, pos_s=pos, uid=0)
    adv = state.advance(math.inf)
    assert adv.finished == ("a",)
    assert adv.t_s == pytest.approx(10.0 + (7 - done) * period, abs=1e-9)
    assert "a" not in state


def test_removing_and_adding_back_keeps_the_progress() -> None:
    profile = JobProfile("a", 0.4, (Phase(0.05, 0.2, 1e9),))
    cycle = cycle_of(profile)
    state = FlowState({"l": 4e9})
    state.add("a", cycle, ["l"], done=0.0, iterations=50, pos_s=0.0, uid=0)
    state.advance(1.3)
    done, pos, stall = state.remove("a")
    assert stall == 0.0
    assert done == pytest.approx(1.3 / 0.4, abs=1e-9)
    state.t = 2.0  # 0.7 s later at dedicated pace
    state.add("a", cycle, ["l"], done=done + 0.7 / 0.4, iterations=50, pos_s=pos + 0.7, uid=0)
    adv = state.advance(math.inf)
    assert adv.t_s == pytest.approx(50 * 0.4, abs=1e-9)


def test_two_jobs_on_one_link_share_it_and_count_excess() -> None:
    profile = JobProfile("p", 1.0, (Phase(0.0, 0.5, 1e9),))
    state = FlowState({"l": 1e9})
    for k, j in enumerate(("a", "b")):
        state.add(j, cycle_of(profile), ["l"], done=0.0, iterations=3, pos_s=0.5, uid=k)
    adv = state.advance(math.inf)
    # both start an iteration by sending 0.5 Gbit at once, at 0.5 Gbps: 1.5 s each
    assert adv.finished == ("a", "b")
    assert adv.t_s == pytest.approx(3 * 1.5, abs=1e-9)
    assert state.excess_s()["l"] == pytest.approx(3 * 1.0, abs=1e-9)


def small_run(network: str, scheduler: str) -> engine.SimResult:
    cluster = Cluster(racks=2, servers_per_rack=2, gpus_per_server=4, server_link_bps=1e10)
    profile = JobProfile("m", 0.2, (Phase(0.05, 0.1, 8e9),))
    jobs = [JobSpec(f"j{k}", 0.37 * k, 4 + 2 * (k % 3), 200 + 50 * k, "m") for k in range(8)]
    # the profile is made for these 10 Gbit/s links: as-measured, not scaled to the NIC
    options = SimOptions(network=network, profiles="as-measured")
    return engine.run(cluster, jobs, {"m": profile}, scheduler, options=options, seed=3)


@pytest.mark.parametrize(
    "scheduler", ["themis", "themis+cassini", "themis+mltcp", "themis+crux", "themis+defrag"]
)
def test_engine_on_the_continuous_model_finishes_every_job_no_faster_than_dedicated(
    scheduler,
) -> None:
    result = small_run("continuous", scheduler)
    assert len(result.jobs) == 8
    for job in result.jobs:
        assert job.slowdown >= 1 - 1e-6, job
        assert job.finish_s > job.start_s >= job.arrival_s
    assert result.network_events > 0
    windows = small_run("windows", scheduler)
    # the same placements and the same contention, measured two ways: close, not equal
    s, w = result.summary(), windows.summary()
    assert s["mean_slowdown"] == pytest.approx(w["mean_slowdown"], rel=0.15)
    if w["excess_demand_s_total"] > 0:
        assert s["excess_demand_s_total"] > 0


def test_config_names_the_network_model_and_rejects_others() -> None:
    base = {
        "cluster": {
            "racks": 2,
            "servers_per_rack": 2,
            "gpus_per_server": 4,
            "server_link_bps": 1e10,
        },
        "workload": {"poisson": {"jobs": 4, "load": 0.5, "gpus": {4: 1}}},
        "schedulers": ["themis"],
    }
    assert config_from_dict(base).options.network == "windows"
    assert config_from_dict(base | {"network": "continuous"}).options.network == "continuous"
    with pytest.raises(InputError, match="network"):
        config_from_dict(base | {"network": "fluid"})


def test_sets_larger_than_the_cut_keep_every_link_within_capacity() -> None:
    """Sets of more than LOCAL_SET_FLOWS flows are re-solved around each change only;
    the rates stay feasible: no full link carries more than its capacity."""
    rng = np.random.default_rng(7)
    caps = {f"l{x}": 1e10 for x in range(12)}
    state = FlowState(caps)
    for k in range(3 * LOCAL_SET_FLOWS):
        period = float(rng.choice([0.05, 0.08, 0.13]))
        start = float(rng.uniform(0, 0.5)) * period
        profile = JobProfile(f"j{k}", period, (Phase(start, 0.4 * period, 8e9),))
        links = sorted({f"l{x}" for x in rng.choice(12, size=2)})
        state.add(
            f"j{k}",
            cycle_of(profile),
            links,
            done=0.0,
            iterations=10**6,
            pos_s=float(rng.uniform(0, period)),
            uid=k,
        )
    got, mode = state.floats[6], state.ints[0]
    checked = 0
    for step in range(200):
        state.advance(state.t + 0.0037)
        if state._dirty:  # flows started at the stop, rates due at the next step
            continue
        checked += 1
        load = dict.fromkeys(caps, 0.0)
        for i in state.slot_of.values():
            if mode[i] == 2:
                for x in state.links2d[i]:
                    if x >= 0:
                        load[state.link_ids[x]] += got[i]
        for link, bps in load.items():
            assert bps <= caps[link] * (1 + 1e-6), (step, link, bps)
    assert checked > 150


def test_mltcp_weights_due_by_bytes_match_weights_at_every_event() -> None:
    """MLTCP's F re-computed when a flow has sent 1/20 of its iteration (the default)
    gives the iteration times of F re-computed at every event, within 2 %."""
    profiles = [
        JobProfile("a", 0.1, (Phase(0.0, 0.05, 8e9),)),
        JobProfile("b", 0.13, (Phase(0.02, 0.06, 8e9),)),
        JobProfile("c", 0.07, (Phase(0.01, 0.03, 1e10),)),
    ]
    means = []
    for every_event in (True, False):
        state = FlowState({"l": 1.2e10}, mltcp=MltcpParams(), mltcp_every_event=every_event)
        for k, p in enumerate(profiles):
            state.add(
                p.job_id, cycle_of(p), ["l"], done=0.0, iterations=10**6, pos_s=0.013 * k, uid=k
            )
        times: dict[int, list[float]] = {}
        while state.t < 20.0:
            for u, (c, _) in state.advance(20.0).cycles().items():
                times.setdefault(u, []).extend(c)
        means.append([float(np.mean(times[k][50:])) for k in range(3)])
    assert means[1] == pytest.approx(means[0], rel=0.02)


def test_the_report_replays_a_window_of_the_continuous_run() -> None:
    cluster = Cluster(racks=2, servers_per_rack=2, gpus_per_server=4, server_link_bps=1e10)
    profile = JobProfile("m", 0.2, (Phase(0.05, 0.1, 8e9),))
    jobs = [JobSpec(f"j{k}", 0.37 * k, 4 + 2 * (k % 3), 200 + 50 * k, "m") for k in range(8)]
    recorder = NetworkRecorder()
    result = engine.run(
        cluster,
        jobs,
        {"m": profile},
        "themis",
        options=SimOptions(network="continuous", profiles="as-measured"),  # made for 10 Gbit/s
        seed=3,
        recorder=recorder,
    )
    assert recorder.windows
    busiest = max(result.excess_s, key=result.excess_s.get)
    timeline = link_timeline(recorder.windows, busiest, cluster.links)
    assert timeline is not None and timeline.steps
    # someone sends on the link, never above its capacity
    peak = max(sum(rates.values()) for _, _, rates in timeline.steps)
    assert 0 < peak <= cluster.links[busiest] * (1 + 1e-9)


def test_a_new_job_takes_the_level_of_the_job_nearest_in_priority() -> None:
    known = [(1.0, 7), (2.0, 5), (4.0, 2), (9.0, 0)]
    assert nearest_level(known, 0.1) == 7
    assert nearest_level(known, 2.9) == 5
    assert nearest_level(known, 3.1) == 2
    assert nearest_level(known, 3.0) == 2  # a tie: the higher priority
    assert nearest_level(known, 100.0) == 0
