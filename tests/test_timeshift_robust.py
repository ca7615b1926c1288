"""cassini.torch.TimeShift when something around the job goes wrong: a forward pre-hook
that must leave the inputs alone, a service that is slow, hung or answers an epoch days
ahead, settings that change mid-run (status keeps the whole run), rank 0's reason to run
free on every rank, a token file that cannot be read, a period of a microsecond.

The single-process tests run on a virtual clock (sleeps advance it); the slow service is
a stand-in whose re-read blocks in real time, as a hung HTTP request does."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import urllib.error

import pytest
from conftest import LazyModule
from helpers.gloo_util import leave_process_group
from helpers.service_util import HALF, call, error_of, ok_json, start

from cassini.torch.timeshift import (
    ENV_JOB_ID,
    ENV_SHIFT,
    ENV_TOKEN_FILE,
    ENV_URL,
    ShiftSettings,
    ShiftSource,
    TimeShift,
    TimeShiftError,
    settings_from_env,
)

torch = LazyModule("torch")

NOW_S = 1_767_225_600.0
HANG_S = 2.0  # how long the hung stand-in blocks before it gives up (real seconds)


class FakeClock:
    def __init__(self, t: float = NOW_S) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += max(0.0, dt)


class _Answers:
    """A source answering its list in order, then nothing new (a 304)."""

    report_error: str | None = None

    def __init__(self, *answers: ShiftSettings | None) -> None:
        self.answers = list(answers)
        self.errors = 0
        self.polls = 0

    def poll(self) -> ShiftSettings | None:
        self.polls += 1
        return self.answers.pop(0) if self.answers else None


class _HungSource(_Answers):
    """A source whose re-read blocks until ``go`` is set (at most HANG_S real seconds,
    then it fails, as a timed-out fetch does)."""

    def __init__(self, *answers: ShiftSettings | None) -> None:
        super().__init__(*answers)
        self.go = threading.Event()
        self.started = 0  # re-reads begun

    def poll(self) -> ShiftSettings | None:
        self.started += 1
        if not self.go.wait(HANG_S):
            self.polls += 1
            self.errors += 1
            return None
        return super().poll()


def _phase_error(t: float, epoch: float, shift: float, period: float) -> float:
    d = (t - epoch - shift) % period
    return min(d, period - d)


# -- 1: attach() ----------------------------------------------------------------------


@pytest.mark.parametrize("held", [False, True])
def test_attach_leaves_the_forward_inputs_alone(held):
    """The pre-hook returned wait()'s drift, which replaced the forward's inputs:
    ``linear(): argument 'input' must be Tensor, not float`` on every forward pass."""
    clock = FakeClock()
    if held:
        shift = TimeShift(ShiftSettings(True, 0.02, 0.1, NOW_S), clock=clock, sleep=clock.sleep)
    else:
        shift = TimeShift.from_env(environ={})  # no CASSINI_ variable: runs free
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    expected = torch.nn.functional.linear(x, model.weight, model.bias)
    handle = shift.attach(model)
    for _ in range(3):
        assert torch.equal(model(x), expected)
        clock.t += 0.03
    if held:
        assert shift.agent is not None and shift.agent.iteration == 3  # it did wait
        assert _phase_error(clock.t - 0.03, NOW_S, 0.02, 0.1) < 1e-6
    handle.remove()
    model(x)
    assert shift.agent is None or shift.agent.iteration == 3  # detached


# -- 2: a slow or hung service ----------------------------------------------------------


def test_a_hung_re_read_holds_no_iteration_up_and_its_late_answer_is_taken():
    """The re-read ran inside wait() and blocked the iteration for as long as the
    service took; now it runs in the background, the job keeps its slots meanwhile, and
    the answer, once it arrives, is taken at the next refresh iteration."""
    clock = FakeClock()
    held = ShiftSettings(True, 0.02, 0.1, NOW_S)
    new = ShiftSettings(True, 0.07, 0.1, NOW_S, source="url")
    source = _HungSource(new)
    shift = TimeShift(held, source=source, refresh_every=2, clock=clock, sleep=clock.sleep)
    drifts, took = [], []
    for _ in range(12):
        t0 = time.monotonic()
        drifts.append(shift.wait())
        took.append(time.monotonic() - t0)
        clock.t += 0.03
    assert max(took) < 0.5, took  # never the HANG_S the re-read blocks for
    assert drifts == [0.0] * 12  # every iteration on its slot
    status = shift.status()
    assert status["realignments"] == 0 and not status["released"]
    assert shift.changes == 0 and shift.settings == held
    assert status["refresh_late"] >= 4 and status["refresh_errors"] == 0
    assert source.started == 1  # one re-read at a time, none piled up behind the hung one
    source.go.set()
    for _ in range(2):  # the 13th call is a refresh iteration
        shift.wait()
        clock.t += 0.03
    assert shift.changes == 1 and shift.settings == new
    assert _phase_error(clock.t - 0.03, NOW_S, 0.07, 0.1) < 1e-6  # on the new grid


class _SlowService(_Answers):
    """A service that takes ``delay_s`` real seconds to answer each re-read."""

    def __init__(self, delay_s: float, *answers: ShiftSettings | None) -> None:
        super().__init__(*answers)
        self.delay_s = delay_s

    def poll(self) -> ShiftSettings | None:
        time.sleep(self.delay_s)
        return super().poll()


# timing: real clock.  A 600 ms re-read inside wait() made each of three refresh
# iterations 6 periods late (a re-alignment each, the third a release).  In the
# background, the job's starts need only stay within the 40 ms tolerance of a 100 ms
# period (a loaded host wakes a sleeper some ms late; 3 such starts in a row to count).
@pytest.mark.timing
def test_a_slow_service_does_not_release_a_healthy_job():
    held = ShiftSettings(True, 0.0, 0.1, time.time() - 0.05, tolerance_s=0.04)
    new = ShiftSettings(True, 0.05, 0.1, held.epoch_s, 0.04, source="url")
    source = _SlowService(0.6, new)
    shift = TimeShift(held, source=source, refresh_every=2)
    for _ in range(18):
        shift.wait()
        time.sleep(0.02)  # the step's work
    status = shift.status()
    assert not status["released"] and status["realignments"] == 0, status
    assert status.get("release_reason") is None
    assert shift.changes == 1 and shift.settings == new  # the late answer was taken
    assert status["refresh_late"] >= 2


def _hanging_opener(go: threading.Event):
    def opener(request, timeout):
        go.wait(HANG_S)
        raise urllib.error.URLError("timed out")

    return opener


def test_a_release_report_to_a_hung_service_holds_no_iteration_up():
    """The job's own release report (a PUT) blocked rank 0, and with it every rank, for
    as long as the service took; now it goes in the background and close() waits for it."""
    go = threading.Event()
    source = ShiftSource("http://127.0.0.1:1", "j", timeout_s=HANG_S, opener=_hanging_opener(go))
    clock = FakeClock()
    shift = TimeShift(ShiftSettings(True, 0.02, 0.1, NOW_S), source=source,
                      clock=clock, sleep=clock.sleep)
    took = []
    for _ in range(30):
        t0 = time.monotonic()
        shift.wait()
        took.append(time.monotonic() - t0)
        clock.t += 0.16  # cannot hold a 100 ms period: released
    assert shift.agent is not None and shift.agent.released
    assert max(took) < 0.5, took
    go.set()
    shift.close()
    assert shift.status()["release_report_error"] == "<urlopen error timed out>"


def test_a_failed_re_read_is_counted_and_keeps_the_grid():
    def refusing(request, timeout):
        raise urllib.error.URLError("connection refused")

    source = ShiftSource("http://127.0.0.1:1", "j", opener=refusing)
    clock = FakeClock()
    held = ShiftSettings(True, 0.02, 0.1, NOW_S)
    shift = TimeShift(held, source=source, refresh_every=2, clock=clock, sleep=clock.sleep)
    drifts = []
    for _ in range(7):
        drifts.append(shift.wait())
        clock.t += 0.03
    status = shift.status()
    assert drifts == [0.0] * 7 and shift.settings == held and status["realignments"] == 0
    assert status["refresh_errors"] == 3
    assert "cannot fetch" in status["refresh_error"] and "connection refused" in (
        status["refresh_error"]
    )


def test_a_broken_answer_is_a_counted_failure_not_a_dead_thread():
    """http.client's errors (a body cut short) are not OSErrors: they ended the re-read
    and report threads with a traceback, and status() said nothing."""

    def cut_short(request, timeout):
        raise http.client.IncompleteRead(b"{")

    source = ShiftSource("http://127.0.0.1:1", "j", opener=cut_short)
    clock = FakeClock()
    held = ShiftSettings(True, 0.02, 0.1, NOW_S)
    shift = TimeShift(held, source=source, refresh_every=2, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        shift.wait()
        clock.t += 0.03
    status = shift.status()
    assert status["refresh_errors"] >= 2 and "IncompleteRead" in status["refresh_error"]
    source.report("test")
    assert "IncompleteRead" in source.report_error


# -- 3: an epoch days ahead -------------------------------------------------------------


def test_an_epoch_days_ahead_read_at_a_refresh_is_refused(capsys):
    """At start-up such an epoch is a one-line error; read at a refresh it was taken and
    the job slept silently until then."""
    clock = FakeClock()
    held = ShiftSettings(True, 0.02, 0.1, NOW_S - 10)
    far = ShiftSettings(True, 0.02, 0.1, NOW_S + 2 * 86400, source="url")
    farther = ShiftSettings(True, 0.03, 0.1, NOW_S + 3 * 86400, source="url")
    source = _Answers(far, None, farther)
    shift = TimeShift(held, source=source, refresh_every=2, clock=clock, sleep=clock.sleep)
    for _ in range(9):
        shift.wait()
        clock.t += 0.03
    assert source.polls >= 3
    assert clock.t - NOW_S < 2.0  # held to its grid, not asleep for days
    assert shift.settings == held and shift.changes == 0 and shift.enabled
    refused = shift.status()["refresh_refused"]
    assert "epoch_s" in refused and "3.0 days ahead" in refused and "\n" not in refused
    err = capsys.readouterr().err
    assert err.count("cassini.torch:") == 1 and "2.0 days ahead" in err  # warned once
    assert "kept the current grid" in err


def test_a_refusal_is_forgotten_once_an_answer_is_taken():
    clock = FakeClock()
    held = ShiftSettings(True, 0.02, 0.1, NOW_S - 10)
    far = ShiftSettings(True, 0.02, 0.1, NOW_S + 2 * 86400, source="url")
    near = ShiftSettings(True, 0.03, 0.1, NOW_S, source="url")
    shift = TimeShift(held, source=_Answers(far, near), refresh_every=2, clock=clock,
                      sleep=clock.sleep)  # fmt: skip
    for _ in range(9):
        shift.wait()
        clock.t += 0.03
    assert shift.settings == near and "refresh_refused" not in shift.status()


@pytest.fixture
def served():
    srv = start(workers=1, quiet=True)
    try:
        job = {"id": "j", "iteration_time_s": 0.1, "phases": HALF}
        ok_json(call(srv.port, "POST", "/v1/jobs", job), 201)
        yield srv
    finally:
        srv.stop()


def test_the_service_refuses_an_epoch_more_than_a_day_ahead(served):
    """The agent refuses such an epoch (at start-up and at a refresh): the service now
    says so when it is PUT, a 422 naming epoch_s, instead of storing it."""
    path = "/v1/jobs/j/time_shift"
    for days in (1.01, 2, 365):
        body = {"shift_s": 0.01, "period_s": 0.1, "epoch_s": time.time() + days * 86400}
        err = error_of(call(served.port, "PUT", path, body))
        assert err["code"] == 422 and err["field"] == "epoch_s", err
        assert "ahead of the service's clock" in err["message"]
    for epoch in (time.time() + 3600, time.time() + 86400 - 60, 1000.0):
        body = {"shift_s": 0.01, "period_s": 0.1, "epoch_s": epoch}
        assert ok_json(call(served.port, "PUT", path, body))["epoch_s"] == epoch


# -- 5: status across a change of settings ----------------------------------------------


class _Channel(_Answers):
    """The stand-in source as the job's release channel too, refusing the report."""

    job_id = "j"
    partners: frozenset[str] = frozenset()
    report_error: str | None = None

    def released(self) -> tuple[str, ...]:
        return ()

    def report(self, reason: str) -> None:
        self.report_error = f"answered 503: {reason[:10]}"


def test_status_counts_the_whole_run_across_changes():
    """A refresh replaced the agent and status() forgot everything before it."""
    clock = FakeClock(NOW_S + 0.25)  # starts 2.5 periods after the epoch
    held = ShiftSettings(True, 0.02, 0.1, NOW_S)
    source = _Channel()
    shift = TimeShift(held, source=source, channel=source, refresh_every=4,
                      clock=clock, sleep=clock.sleep)
    for _ in range(8):  # 160 ms of work in a 100 ms period: re-aligned, then released
        shift.wait()
        clock.t += 0.16
    first = shift.agent
    assert first is not None and first.released and first.realignments >= 2
    assert first.startup_skipped_slots > 0
    source.answers.append(ShiftSettings(True, 0.05, 0.2, NOW_S, source="url"))
    for _ in range(8):  # read at the 12th call; work that fits the new 200 ms period
        shift.wait()
        clock.t += 0.05
    shift.close()
    second = shift.agent
    assert second is not first and second is not None and not second.released
    status = shift.status()
    assert status["changes"] == 1
    assert status["iterations"] == 16 == first.iteration + second.iteration
    assert status["realignments"] == first.realignments + second.realignments
    assert status["startup_skipped_slots"] == first.startup_skipped_slots  # the first grid's
    assert "missed its slot" in status["release_reason"]  # the last release, kept
    assert status["release_report_error"].startswith("answered 503")
    assert not status["released"] and status["enabled"]


# -- 6: the token file, a microsecond period --------------------------------------------


def test_an_unreadable_token_file_is_an_error_at_start_up(tmp_path):
    """It was accepted and failed only when the job released itself (the report)."""
    comments = tmp_path / "comments"
    comments.write_text("# no token here\n\n")
    for path, words in [
        (tmp_path / "missing", "cannot read"),
        (tmp_path, "cannot read"),  # a directory
        (comments, "holds no token"),
    ]:
        env = {ENV_URL: "http://127.0.0.1:1", ENV_JOB_ID: "j", ENV_TOKEN_FILE: str(path)}
        for read in (TimeShift.from_env, settings_from_env):
            with pytest.raises(TimeShiftError, match=f"^{ENV_TOKEN_FILE}: ") as e:
                read(environ=env)
            assert words in str(e.value) and str(path) in str(e.value)
            assert "\n" not in str(e.value)


def test_a_microsecond_period_release_names_its_period():
    """'cannot hold a 0.0 ms period' for a 1 us period."""
    clock = FakeClock()
    shift = TimeShift(ShiftSettings(True, 0.0, 1e-6, NOW_S), clock=clock, sleep=clock.sleep)
    for _ in range(30):
        shift.wait()
        clock.t += 1e-5
    reason = shift.status()["release_reason"]
    assert reason.endswith("cannot hold a 0.001 ms period"), reason
    slow = TimeShift(ShiftSettings(True, 0.0, 0.1, NOW_S), clock=clock, sleep=clock.sleep)
    for _ in range(30):
        slow.wait()
        clock.t += 0.16
    assert slow.status()["release_reason"].endswith("cannot hold a 100 ms period")


# -- 1 and 4 on two ranks (gloo, loopback) ----------------------------------------------


def _two_ranks(rank: int, port: int, out: str) -> None:
    """Each part's outcome, or its error, on a virtual clock."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    clock = FakeClock()
    result: dict = {}
    try:  # 4: CASSINI_SHIFT=off on rank 0 (the other ranks' environments do not count)
        off = TimeShift.from_env(environ={ENV_SHIFT: "off"} if rank == 0 else {})
        result["off"] = off.status()
    except Exception as e:  # noqa: BLE001 - reported by the test
        result["off"] = repr(e)
    try:  # 4: the service's release, read at a refresh, with its reason
        release = ShiftSettings(False, reason="maintenance window", source="url")
        shift = TimeShift(ShiftSettings(True, 0.01, 0.05, NOW_S),
                          source=_Answers(release) if rank == 0 else None, refresh_every=2,
                          clock=clock, sleep=clock.sleep)
        for _ in range(4):
            shift.wait()
        shift.close()
        result["refresh"] = shift.status()
    except Exception as e:  # noqa: BLE001
        result["refresh"] = repr(e)
    try:  # 1: attach() to the DDP model
        shift = TimeShift(ShiftSettings(True, 0.01, 0.05, NOW_S), clock=clock, sleep=clock.sleep)
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(4, 2))
        shift.attach(model)
        for _ in range(3):
            model(torch.ones(3, 4)).sum().backward()
        shift.close()
        result["attach"] = {"iterations": shift.agent.iteration,
                            "grad": model.module.weight.grad.tolist()}
    except Exception as e:  # noqa: BLE001
        result["attach"] = repr(e)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    leave_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path_factory.mktemp("ranks") / "rank")
    mp.spawn(_two_ranks, args=(port, out), nprocs=2, join=True)
    return [json.loads(open(f"{out}.{r}").read()) for r in range(2)]


def test_attach_under_ddp_on_two_ranks(two_ranks):
    for rank in two_ranks:
        assert isinstance(rank["attach"], dict), rank["attach"]
        assert rank["attach"]["iterations"] == 3
    assert two_ranks[0]["attach"]["grad"] == two_ranks[1]["attach"]["grad"]


def test_every_rank_keeps_rank_0s_reason_to_run_free(two_ranks):
    """Every rank but 0 said "rank 0 runs this job free", whatever the reason."""
    for rank in two_ranks:
        assert isinstance(rank["off"], dict), rank["off"]
        assert rank["off"]["reason"] == f"{ENV_SHIFT}=off" and not rank["off"]["enabled"]
        assert isinstance(rank["refresh"], dict), rank["refresh"]
        assert rank["refresh"]["reason"] == "maintenance window"
        assert not rank["refresh"]["enabled"] and rank["refresh"]["changes"] == 1
