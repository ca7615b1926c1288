"""The time-shift agent (cassini.agent) and its PyTorch wrapper (cassini.torch): decisions
taken once per job, identical on every rank, graceful release, settings from env/URL."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.fake_http import JsonHandler, serving
from helpers.gloo_util import leave_process_group
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.agent import SlotDecision, TimeShiftAgent, replayed_realignments
from cassini.torch.timeshift import (
    ENV_EPOCH_S,
    ENV_JOB_ID,
    ENV_PERIOD_S,
    ENV_REFRESH,
    ENV_SHIFT,
    ENV_SHIFT_S,
    ENV_TOKEN_FILE,
    ENV_TOLERANCE_S,
    ENV_URL,
    ShiftSettings,
    TimeShift,
    TimeShiftError,
    settings_from_env,
    settings_from_url,
)


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt


def _job(n_ranks: int, offsets: list[float], **kw):
    """n ranks of one job, each with its own clock (offset seconds from rank 0's)."""
    clocks = [FakeClock(100.0 + off) for off in offsets[:n_ranks]]
    agents = [
        TimeShiftAgent(0.03, 0.1, epoch_s=100.0, clock=c, sleep=c.sleep, **kw) for c in clocks
    ]
    return clocks, agents


def _run_job(clocks, agents, durations):
    """Every rank runs the same iterations; rank 0 plans, the others follow."""
    decisions = []
    for d in durations:
        shared: list[SlotDecision] = []

        def broadcast(values, _shared=shared):
            if values is not None:
                _shared.append(SlotDecision.from_floats(values))
                return values
            return _shared[0].to_floats()

        for rank, agent in enumerate(agents):
            agent.step(rank == 0, broadcast)
        decisions.append(shared[0])
        for c in clocks:
            c.t += d
    return decisions


@settings(max_examples=60, deadline=None)
@given(
    durations=st.lists(st.floats(0.05, 0.25), min_size=5, max_size=40),
    offsets=st.lists(st.floats(-0.004, 0.004), min_size=3, max_size=3),
)
def test_every_rank_takes_the_planners_decisions(durations, offsets):
    clocks, agents = _job(3, [0.0, *offsets[1:]])
    _run_job(clocks, agents, durations)
    states = [(a.slot, a.realignments, a.released, a.iteration) for a in agents]
    assert all(s == states[0] for s in states)


def _run_job_ahead(clocks, agents, durations):
    """Ahead mode: rank 0's decision for iteration k+1 is posted at step k and taken by
    every rank at step k+1; returns each iteration's (slot, realigned) as rank 0 saw it."""
    mailbox: list[tuple[float, ...]] = []
    seen = []
    posts = [0] * len(agents)  # every rank must post as often as the planner (a collective)
    for d in durations:
        taken = mailbox.pop() if mailbox else None

        for rank, agent in enumerate(agents):

            def post(values, _rank=rank, _box=mailbox):
                posts[_rank] += 1
                if values is not None:
                    _box.append(tuple(values))

            agent.step_ahead(rank == 0, post, lambda t=taken: t)
        assert len(set(posts)) == 1, posts
        seen.append((agents[0].slot, agents[0].realignments, agents[0].released))
        for c in clocks:
            c.t += d
    return seen


@settings(max_examples=60, deadline=None)
@given(
    durations=st.lists(st.floats(0.05, 0.25), min_size=5, max_size=40),
    offsets=st.lists(st.floats(-0.004, 0.004), min_size=3, max_size=3),
)
def test_ahead_mode_takes_the_same_decisions_on_every_rank(durations, offsets):
    clocks, agents = _job(3, [0.0, *offsets[1:]])
    _run_job_ahead(clocks, agents, durations)
    states = [(a.slot, a.realignments, a.released, a.iteration) for a in agents]
    assert all(s == states[0] for s in states)


def test_ahead_mode_realigns_one_iteration_later_and_releases():
    """Iterations of 0.13 s against a 0.1 s period: the same verdicts as the synchronous
    agent, each applied at the next iteration, and the job is released in the end."""
    clocks, agents = _job(2, [0.0, 0.001])
    seen = _run_job_ahead(clocks, agents, [0.13] * 40)
    assert agents[0].released and agents[1].released
    assert agents[0].realignments == agents[0].max_realignments
    slots = [s for s, _, released in seen if not released]
    assert all(b > a for a, b in zip(slots, slots[1:], strict=False))
    skipped = [i for i in range(1, len(slots)) if slots[i] - slots[i - 1] > 1]
    assert skipped, "a late job must skip slots before it is released"
    # on time: the grid, no skips
    clocks, agents = _job(2, [0.0, -0.002])
    seen = _run_job_ahead(clocks, agents, [0.08] * 20)
    assert [s for s, _, _ in seen] == list(range(1, 21)) and agents[1].realignments == 0


def test_agent_holds_slots_and_realigns_on_drift():
    clock = FakeClock()
    agent = TimeShiftAgent(0.03, 0.1, epoch_s=100.0, clock=clock, sleep=clock.sleep)
    starts = []
    for _ in range(5):
        agent.step()
        starts.append(clock.t)
        clock.t += 0.08
    assert np.allclose(np.diff(starts), 0.1) and starts[0] == pytest.approx(100.03)
    clock.t += 0.03  # one late iteration (jitter): caught up without a skip
    agent.step()
    assert agent.realignments == 0
    clock.t = agent.slot_time(agent.slot) - 0.01  # back on time: the streak resets
    agent.step()
    for expected in (0, 0, 1):  # late by > 5 % three times in a row: skip
        clock.t = agent.slot_time(agent.slot) + 0.02
        agent.step()
        assert agent.realignments == expected
    assert not agent.released


def test_slip_tolerance_keeps_a_late_job_that_has_room():
    """Late by up to 15 % of a period and catching up slowly: the fixed 5 % re-aligns
    (a skip of most of a period), the advisor's slip tolerance (20 ms of a 100 ms period)
    lets the job catch up by itself; past the slip tolerance it re-aligns as before."""

    def run(**kw):
        clock = FakeClock()
        agent = TimeShiftAgent(0.0, 0.1, epoch_s=100.0, clock=clock, sleep=clock.sleep, **kw)
        for late in [0.0, 0.015, 0.015, 0.014, 0.013, 0.012, 0.01, 0.008, 0.005, 0.0]:
            clock.t = agent.slot_time(agent.slot) + late
            agent.step()
        return agent

    assert run().realignments == 1
    kept = run(slip_tolerance_s=0.02)
    assert kept.realignments == 0 and kept.tolerance_s == 0.02
    assert kept.status()["tolerance_s"] == 0.02
    assert run(slip_tolerance_s=0.001).tolerance_s == pytest.approx(0.005)  # the floor
    beyond = TimeShiftAgent(
        0.0, 0.1, epoch_s=100.0, slip_tolerance_s=0.02, clock=FakeClock(), sleep=lambda s: None
    )
    for _ in range(3):
        beyond.clock.t = beyond.slot_time(beyond.slot) + 0.03
        beyond.step()
    assert beyond.realignments == 1
    with pytest.raises(ValueError, match="slip_tolerance_s"):
        TimeShiftAgent(0.0, 0.1, 0.0, slip_tolerance_s=0.05)
    with pytest.raises(ValueError, match="slip_tolerance_s"):
        TimeShiftAgent(0.0, 0.1, 0.0, slip_tolerance_s=float("nan"))


def test_agent_releases_a_job_that_keeps_missing_its_slots():
    """A job whose iterations take 1.3 periods would skip a slot every few iterations;
    after max_realignments skips within the window it runs free instead."""
    clock = FakeClock()
    agent = TimeShiftAgent(0.0, 0.1, epoch_s=100.0, clock=clock, sleep=clock.sleep)
    starts = []
    for _ in range(40):
        agent.step()
        starts.append(clock.t)
        clock.t += 0.13
    assert agent.released and agent.realignments == agent.max_realignments
    assert "cannot hold" in agent.release_reason
    gaps = np.diff(starts)
    free = gaps[agent.realigned_at[-1] + 1 :]
    assert np.allclose(free, 0.13)  # runs free: no waiting, no more skips


def test_agent_keeps_a_job_that_realigns_rarely():
    clock = FakeClock()
    agent = TimeShiftAgent(0.0, 0.1, epoch_s=100.0, clock=clock, sleep=clock.sleep)
    for k in range(100):
        agent.step()
        clock.t += 0.3 if k % 30 == 0 else 0.08  # one long stall every 30 iterations
    assert agent.realignments >= 3 and not agent.released


def _late_start(start_late_s: float, **kw) -> TimeShiftAgent:
    """A job held to 0.1 s whose iterations take 0.09 s but for two of 0.2 s (each later
    than half a period: a re-alignment at once), started ``start_late_s`` after its
    epoch."""
    clock = FakeClock(1000.0 + start_late_s)
    agent = TimeShiftAgent(0.01, 0.1, 1000.0, clock=clock, sleep=clock.sleep, **kw)
    for i in range(15):
        agent.step()
        clock.t += 0.2 if i in (5, 10) else 0.09
    return agent


def test_a_late_start_is_no_realignment_and_spends_no_release_budget():
    """Starting 5 s after the epoch, the first decision skips 50 slots: the start-up
    catch-up, counted apart.  The job then misses two slots, as one started on its epoch
    does, and is not released for a third (the budget is 3 within 20 iterations)."""
    on_time, late = _late_start(0.0), _late_start(5.0)
    assert on_time.realignments == late.realignments == 2
    assert not late.released and late.release_reason is None
    assert on_time.startup_skipped_slots == 0 and late.startup_skipped_slots == 50
    assert late.status()["startup_skipped_slots"] == 50
    assert late.realigned_at == on_time.realigned_at
    # a budget of one: released at its first real miss, not by the late start
    one = _late_start(5.0, max_realignments=1)
    assert one.startup_skipped_slots == 50 and one.released and one.realigned_at == [6]


@pytest.mark.parametrize("mode", ["sync", "ahead"])
def test_every_rank_counts_a_late_start_as_a_startup_skip(mode):
    """Both modes, every rank: the first decision's skip is counted in
    startup_skipped_slots (the same on every rank), not as a re-alignment; afterwards
    the job holds consecutive slots."""
    clocks, agents = _job(3, [0.0, 0.001, -0.002])
    for c in clocks:
        c.t += 5.0
    if mode == "sync":
        _run_job(clocks, agents, [0.08] * 10)
    else:
        seen = _run_job_ahead(clocks, agents, [0.08] * 10)
        slots = [s for s, _, _ in seen]
        assert slots[1:] == list(range(slots[1], slots[1] + 9))
    for agent in agents:
        assert agent.realignments == 0 and not agent.released
        assert agent.startup_skipped_slots == agents[0].startup_skipped_slots >= 49


def test_timeshift_status_after_a_late_first_wait():
    """The reviewer's case: TimeShift.from_env on a job that starts after its epoch said
    realignments 1 after the first wait()."""
    clock = FakeClock(2_000_000_000.0)
    env = {ENV_SHIFT_S: "0.01", ENV_PERIOD_S: "0.1", ENV_EPOCH_S: repr(clock.t - 5.0)}
    shift = TimeShift.from_env(environ=env, clock=clock, sleep=clock.sleep)
    shift.wait()
    status = shift.status()
    assert status["realignments"] == 0 and status["startup_skipped_slots"] == 50


def test_agent_rejects_bad_parameters():
    with pytest.raises(ValueError, match="shift_s"):
        TimeShiftAgent(0.2, 0.1, 0.0)
    with pytest.raises(ValueError, match="period_s"):
        TimeShiftAgent(0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="epoch_s"):
        TimeShiftAgent(0.0, 0.1, float("nan"))


def test_settings_from_env_names_the_missing_variable():
    assert settings_from_env({}) is None
    with pytest.raises(TimeShiftError, match=ENV_EPOCH_S):
        settings_from_env({ENV_SHIFT_S: "0.01", ENV_PERIOD_S: "0.1"})
    with pytest.raises(TimeShiftError, match=ENV_PERIOD_S):
        settings_from_env({ENV_SHIFT_S: "0.01", ENV_EPOCH_S: "1e9"})
    with pytest.raises(TimeShiftError, match=f"{ENV_PERIOD_S}: not a number"):
        settings_from_env({ENV_SHIFT_S: "0", ENV_PERIOD_S: "x", ENV_EPOCH_S: "1"})
    with pytest.raises(TimeShiftError, match=ENV_SHIFT_S):
        settings_from_env({ENV_SHIFT_S: "0.2", ENV_PERIOD_S: "0.1", ENV_EPOCH_S: "1"})
    with pytest.raises(TimeShiftError, match="CASSINI_JOB_ID"):
        settings_from_env({"CASSINI_URL": "http://127.0.0.1:1"})
    ok = settings_from_env({ENV_SHIFT_S: "0.01", ENV_PERIOD_S: "0.1", ENV_EPOCH_S: "1e9"})
    assert ok == ShiftSettings(True, 0.01, 0.1, 1e9, source="env")
    off = settings_from_env({"CASSINI_SHIFT": "false", ENV_PERIOD_S: "0.1"})
    assert off is not None and not off.shift
    grid = {ENV_SHIFT_S: "0.01", ENV_PERIOD_S: "0.1", ENV_EPOCH_S: "1e9"}
    assert settings_from_env({**grid, ENV_TOLERANCE_S: "0.02"}).tolerance_s == 0.02
    with pytest.raises(TimeShiftError, match=f"{ENV_TOLERANCE_S}: not a number"):
        settings_from_env({**grid, ENV_TOLERANCE_S: "soon"})
    with pytest.raises(TimeShiftError, match=f"{ENV_TOLERANCE_S}: must be in"):
        settings_from_env({**grid, ENV_TOLERANCE_S: "0.06"})


NOW_S = 1_767_225_600.0
GRID = {ENV_SHIFT_S: "0.01", ENV_PERIOD_S: "0.1", ENV_EPOCH_S: repr(NOW_S - 60)}


@pytest.mark.parametrize(
    "over, variable, words",
    [
        ({ENV_EPOCH_S: repr(NOW_S * 1000)}, ENV_EPOCH_S, "seconds, not milliseconds"),
        ({ENV_EPOCH_S: "1e300"}, ENV_EPOCH_S, "must be < 1e+10"),
        ({ENV_EPOCH_S: "-1"}, ENV_EPOCH_S, "must be >= 0"),
        ({ENV_EPOCH_S: "-1e12"}, ENV_EPOCH_S, "must be >= 0"),
        ({ENV_PERIOD_S: "1e-12", ENV_SHIFT_S: "0"}, ENV_PERIOD_S, "1e-06"),
        ({ENV_PERIOD_S: "1e7"}, ENV_PERIOD_S, "604800"),
        ({ENV_EPOCH_S: repr(NOW_S + 2 * 86400)}, ENV_EPOCH_S, "ahead of the clock"),
        ({ENV_EPOCH_S: repr(NOW_S + 365 * 86400)}, ENV_EPOCH_S, "ahead of the clock"),
    ],
)
def test_settings_from_env_bounds_the_grid_as_the_service_does(over, variable, words):
    """The service's bounds (period_s >= 1e-6 s, 0 <= epoch_s < 1e10 UNIX seconds), and
    an epoch at most a day ahead of the clock: a millisecond epoch died in time.sleep
    (OverflowError), one a year ahead slept silently."""
    clock = FakeClock(NOW_S)
    with pytest.raises(TimeShiftError, match=variable) as e:
        TimeShift.from_env(environ={**GRID, **over}, clock=clock, sleep=clock.sleep)
    assert words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TimeShiftError, match=variable):
        settings_from_env({**GRID, **over}, now_s=NOW_S)


def test_settings_from_env_keeps_an_epoch_within_a_day():
    for epoch in (0.0, NOW_S - 86400 * 365, NOW_S + 3600, NOW_S + 86400 - 1):
        got = settings_from_env({**GRID, ENV_EPOCH_S: repr(epoch)}, now_s=NOW_S)
        assert got is not None and got.epoch_s == epoch
    from cassini.agent import MAX_PERIOD_S, MIN_PERIOD_S
    from cassini.service.models import MAX_TIME_S, MIN_TIME_S

    assert (MIN_PERIOD_S, MAX_PERIOD_S) == (MIN_TIME_S, MAX_TIME_S)  # the service's bounds


@pytest.mark.parametrize(
    "env, missing",
    [
        ({ENV_JOB_ID: "x"}, ENV_URL),
        ({ENV_TOLERANCE_S: "0.01"}, ENV_SHIFT_S),
        ({ENV_SHIFT: "1"}, ENV_SHIFT_S),
        ({ENV_SHIFT: "true", ENV_TOLERANCE_S: "0.01"}, ENV_PERIOD_S),
    ],
)
def test_partial_settings_name_what_is_missing(env, missing):
    """Set but incomplete is an error, not a job that silently runs free."""
    with pytest.raises(TimeShiftError, match=missing):
        settings_from_env(env)
    with pytest.raises(TimeShiftError, match=missing):
        TimeShift.from_env(environ=env)


@pytest.mark.parametrize("variable", [ENV_REFRESH, ENV_TOKEN_FILE])
@pytest.mark.parametrize("rest", [{}, GRID, {ENV_TOLERANCE_S: "0.01"}])
def test_service_only_settings_alone_name_what_they_need(variable, rest):
    """CASSINI_REFRESH_ITERATIONS and CASSINI_TOKEN_FILE steer only the service path:
    without CASSINI_URL and CASSINI_JOB_ID they are an error, not silently ignored."""
    env = {**rest, variable: "5"}
    with pytest.raises(TimeShiftError, match=f"^{variable}: ") as e:
        settings_from_env(env, now_s=NOW_S)
    assert ENV_URL in str(e.value) and ENV_JOB_ID in str(e.value)
    assert "\n" not in str(e.value)
    clock = FakeClock(NOW_S)
    with pytest.raises(TimeShiftError, match=f"^{variable}: "):
        TimeShift.from_env(environ=env, clock=clock, sleep=clock.sleep)
    off = settings_from_env({**env, ENV_SHIFT: "0"})  # an explicit "run free" still wins
    assert off is not None and not off.shift


@pytest.mark.parametrize("value", ["disabled", "n", "flase", "2", "y"])
def test_cassini_shift_refuses_unknown_spellings(value):
    with pytest.raises(TimeShiftError, match=f"{ENV_SHIFT}: must be one of") as e:
        settings_from_env({**GRID, ENV_SHIFT: value})
    assert "false" in str(e.value) and "true" in str(e.value) and repr(value) in str(e.value)
    with pytest.raises(TimeShiftError, match=ENV_SHIFT):  # before any fetch
        TimeShift.from_env(environ={ENV_URL: "http://127.0.0.1:1", ENV_JOB_ID: "x",
                                    ENV_SHIFT: value})


@pytest.mark.parametrize("value", ["1", "TRUE", "yes", " on "])
def test_cassini_shift_true_spellings_hold_the_grid(value):
    got = settings_from_env({**GRID, ENV_SHIFT: value})
    assert got is not None and got.shift and got.period_s == 0.1
    for off in ("0", "False", "no", "OFF "):
        got = settings_from_env({**GRID, ENV_SHIFT: off})
        assert got is not None and not got.shift


def test_timeshift_without_distributed_holds_slots():
    clock = FakeClock(100.0)
    shift = TimeShift(
        ShiftSettings(True, 0.02, 0.1, 100.0), clock=clock, sleep=clock.sleep
    )
    assert shift.enabled
    for _ in range(3):
        shift.wait()
        clock.t += 0.05
    assert clock.t == pytest.approx(100.02 + 0.2 + 0.05)
    assert TimeShift(None).wait() == 0.0 and not TimeShift(None).enabled


class _ShiftServer(JsonHandler):
    answers: dict = {}
    #: the 404 body: cassini serve's error object
    missing = {"error": {"code": 404, "field": "job_id", "message": "job 'nope': not found"}}

    def do_GET(self):  # noqa: N802 - http.server's name
        body = self.answers.get(self.path)
        if body is None:
            self.send_json(404, self.missing)
        else:
            self.send_json(200, body)


@pytest.fixture
def shift_server():
    with serving(_ShiftServer) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}", _ShiftServer.answers


def test_settings_from_url(shift_server):
    url, answers = shift_server
    answers["/v1/jobs/a/time_shift"] = {
        "job_id": "a", "shift": True, "shift_s": 0.01, "period_s": 0.1, "epoch_s": 5e8,
        "reason": None,
    }
    answers["/v1/jobs/b/time_shift"] = {
        "job_id": "b", "shift": False, "shift_s": 0.0, "period_s": 0.1, "epoch_s": 5e8,
        "reason": "shifting does not pay",
    }
    answers["/v1/jobs/c/time_shift"] = {
        "job_id": "c", "shift": True, "shift_s": 0.01, "period_s": 0.1, "epoch_s": 5e8,
        "reason": None, "tolerance_s": 0.02,
    }
    assert settings_from_url(url, "a") == ShiftSettings(True, 0.01, 0.1, 5e8, source="url")
    assert settings_from_url(url, "c").tolerance_s == 0.02
    answers["/v1/jobs/d/time_shift"] = {**answers["/v1/jobs/c/time_shift"], "tolerance_s": "x"}
    with pytest.raises(TimeShiftError, match="tolerance_s: not a number"):
        settings_from_url(url, "d")
    off = settings_from_url(url, "b")
    assert not off.shift and off.reason == "shifting does not pay"
    with pytest.raises(TimeShiftError, match="404") as e:
        settings_from_url(url, "nope")
    # one readable line, not the error object's Python repr
    assert str(e.value).endswith("answered 404: job_id: job 'nope': not found")
    assert "{" not in str(e.value) and "\n" not in str(e.value)
    env = {"CASSINI_URL": url, "CASSINI_JOB_ID": "a"}
    assert settings_from_env(env).shift_s == 0.01


def _two_rank_worker(rank: int, port: int, env: dict, out: str, start_s: float) -> None:
    """Four held steps on a virtual clock starting at ``start_s`` (sleeps advance it,
    nothing else does), so the slots do not depend on how loaded the machine is."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )
    now = [start_s]

    def sleep(seconds: float) -> None:
        now[0] += max(0.0, seconds)

    result: dict = {}
    try:
        shift = TimeShift.from_env(
            environ=env if rank == 0 else {}, clock=lambda: now[0], sleep=sleep
        )
        slots = []
        for _ in range(4):
            shift.wait()
            slots.append(shift.agent.slot)
        shift.close()
        result = {"settings": shift.settings.to_floats(), "slots": slots, **shift.status()}
    except TimeShiftError as e:
        result = {"error": str(e)}
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    leave_process_group()


def _spawn_two(env: dict, tmp_path, start_s: float = 0.0) -> list[dict]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "rank")
    mp.spawn(_two_rank_worker, args=(port, env, out, start_s), nprocs=2, join=True)
    return [json.loads(open(f"{out}.{r}").read()) for r in range(2)]


# recorded from this code (virtual clock: deterministic); a change is a behaviour change
SLOTS_AFTER_A_LATE_START = [4, 5, 6, 7]
REALIGNMENTS_AFTER_IT = 0  # the late start is the start-up catch-up, not a re-alignment
STARTUP_SKIPPED_SLOTS = 3  # slots 0-2 had passed when the job started


def test_from_env_resolves_on_rank_0_for_the_whole_job(tmp_path):
    epoch = 1000.0
    env = {
        ENV_SHIFT_S: "0.01",
        ENV_PERIOD_S: "0.05",
        ENV_EPOCH_S: repr(epoch),
        ENV_TOLERANCE_S: "0.004",
    }
    ranks = _spawn_two(env, tmp_path, start_s=epoch + 0.123)  # 2.5 periods after the epoch
    assert ranks[0]["settings"] == ranks[1]["settings"] == [1.0, 0.01, 0.05, epoch, 0.004]
    assert ranks[0]["tolerance_s"] == ranks[1]["tolerance_s"] == 0.004
    slots = ranks[0]["slots"]  # one re-alignment to a later slot, then consecutive ones
    assert ranks[1]["slots"] == slots == SLOTS_AFTER_A_LATE_START
    assert ranks[0]["realignments"] == ranks[1]["realignments"] == REALIGNMENTS_AFTER_IT
    assert ranks[0]["startup_skipped_slots"] == ranks[1]["startup_skipped_slots"]
    assert ranks[0]["startup_skipped_slots"] == STARTUP_SKIPPED_SLOTS
    bad = _spawn_two({ENV_SHIFT_S: "0.01", ENV_PERIOD_S: "0.05"}, tmp_path)
    assert ENV_EPOCH_S in bad[0]["error"] and "error" in bad[1]


@given(
    st.floats(0.01, 1.0),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=60),
)
def test_a_replay_whose_iterations_fit_their_period_never_realigns(period, fractions):
    """Iterations that never take longer than the period start on their slots."""
    assert replayed_realignments([period * f for f in fractions], period) == 0


def test_a_replay_counts_what_the_agent_does():
    """The replay is the agent's own decisions: iterations half a period too long
    re-align at once, and the third within its window releases the job (counted once,
    and nothing after it)."""
    assert replayed_realignments([0.16] * 10, 0.1) == 3
    # one long iteration among short ones is caught up from the slack: no re-alignment
    assert replayed_realignments([0.09] * 5 + [0.13] + [0.09] * 5, 0.1) == 0
    # late by more than the tolerance and not catching up within patience: re-aligned
    assert replayed_realignments([0.104] * 20, 0.1, patience=3) >= 1
    assert replayed_realignments([0.104] * 8, 0.1, drift_tolerance=0.4) == 0  # within it
