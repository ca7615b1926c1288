"""cassini.torch as a newcomer meets it: attach() on a model that is also evaluated, a
mistyped CASSINI_URL, a service that is down, hung or does not know the job yet at
start-up, CASSINI_* variables that were silently ignored, and status() counters.

One process each (no process group: the start-up broadcasts are checked as the floats
and text rank 0 sends), a virtual clock, and a stand-in for ``cassini serve`` on
127.0.0.1 in a thread."""

from __future__ import annotations

import socket
import time

import pytest
from conftest import LazyModule
from helpers.fake_http import JsonHandler, serving
from test_timeshift_robust import FakeClock

from cassini.torch import timeshift
from cassini.torch.timeshift import (
    ENV_EPOCH_S,
    ENV_JOB_ID,
    ENV_PERIOD_S,
    ENV_REFRESH,
    ENV_SHIFT,
    ENV_SHIFT_S,
    ENV_TOLERANCE_S,
    ENV_URL,
    ShiftSettings,
    TimeShift,
    TimeShiftError,
    settings_from_env,
)

torch = LazyModule("torch")

NOW_S = 1_767_225_600.0
GRID = {
    "job_id": "j",
    "shift": True,
    "shift_s": 0.02,
    "period_s": 0.1,
    "epoch_s": NOW_S - 3600,
    "tolerance_s": 0.01,
    "reason": None,
}


def _phase_error(t: float, epoch: float, shift: float, period: float) -> float:
    d = (t - epoch - shift) % period
    return min(d, period - d)


# -- a stand-in for cassini serve -------------------------------------------------------


class _Handler(JsonHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_json(*self.server.answer)  # type: ignore[attr-defined]


@pytest.fixture
def service():
    """(server, url): ``server.answer = (code, JSON-able body or bytes)``; 404 at first."""
    with serving(_Handler) as server:
        server.answer = (404, {"error": {"code": 404, "field": "job_id", "message": "not found"}})
        yield server, f"http://127.0.0.1:{server.server_address[1]}"


def _env(url: str, **more: str) -> dict[str, str]:
    return {ENV_URL: url, ENV_JOB_ID: "j", **more}


# -- 1: attach() waits for training forwards only -----------------------------------------


def test_attach_waits_only_before_training_forwards():
    """Every forward waited, evaluation ones included: a validation forward on rank 0 alone
    made it post one decision broadcast more than the others (gloo deadlocked), and on
    every rank each evaluation forward cost a slot and counted as an iteration."""
    clock = FakeClock()
    shift = TimeShift(ShiftSettings(True, 0.02, 0.1, NOW_S), clock=clock, sleep=clock.sleep)
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    shift.attach(model)
    model(x).sum().backward()  # a training step: waits
    clock.t += 0.03
    waited_until = clock.t
    with torch.no_grad():
        model(x)
    with torch.inference_mode():
        model(x)
    model.eval()
    model(x)
    model.train()
    assert clock.t == waited_until  # no evaluation forward slept
    assert shift.agent is not None and shift.agent.iteration == 1
    model(x).sum().backward()
    assert shift.agent.iteration == 2 and shift.status()["iterations"] == 2
    assert _phase_error(clock.t, NOW_S, 0.02, 0.1) < 1e-6  # the second step on its slot


# -- 2: a malformed CASSINI_URL --------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["not a url", "http://[::1", "ftp://host/", "http://", "http://h:port/", "http://a b/"]
)
def test_a_malformed_url_is_an_error_naming_cassini_url(url):
    """'not a url' and 'http://[::1' raised urllib's bare ValueError (unknown url type,
    Invalid IPv6 URL), which named no variable and was no TimeShiftError."""
    env = _env(url)
    for read in (settings_from_env, TimeShift.from_env):
        with pytest.raises(TimeShiftError, match=f"^{ENV_URL}: ") as e:
            read(environ=env)
        assert "\n" not in str(e.value) and repr(url) in str(e.value)
    with pytest.raises(TimeShiftError, match=f"^{ENV_URL}: "):
        timeshift.fetch_settings(url, "j", None)


class _Wire:
    """Rank 0's start-up broadcasts, recorded, then replayed to another rank."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list = []
        self.mp = monkeypatch
        monkeypatch.setattr(timeshift, "_broadcast", self._send)
        monkeypatch.setattr(timeshift, "_broadcast_text", self._send)

    def _send(self, values, group, *size):
        self.sent.append(values)
        return values

    def receive(self):
        queue = list(self.sent)
        take = lambda *_args: queue.pop(0)  # noqa: E731
        self.mp.setattr(timeshift, "_broadcast", take)
        self.mp.setattr(timeshift, "_broadcast_text", take)
        return timeshift._receive_settings(None)


def test_any_failure_of_rank_0_reaches_the_other_ranks(monkeypatch):
    """Only a TimeShiftError was forwarded: any other exception on rank 0 left the other
    ranks waiting for a broadcast that never came."""

    def broken(env, now_s=None):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(timeshift, "_resolve", broken)
    wire = _Wire(monkeypatch)
    with pytest.raises(RuntimeError, match="disk on fire"):  # rank 0: its own exception
        timeshift._send_settings({}, NOW_S, None)
    assert wire.sent, "rank 0 sent nothing: the other ranks wait forever"
    with pytest.raises(TimeShiftError) as e:
        wire.receive()
    assert str(e.value) == "rank 0: RuntimeError: disk on fire second line"


def test_a_malformed_url_on_rank_0_reaches_the_other_ranks(monkeypatch):
    wire = _Wire(monkeypatch)
    with pytest.raises(TimeShiftError, match=f"^{ENV_URL}: "):
        timeshift._send_settings(_env("http://[::1"), NOW_S, None)
    with pytest.raises(TimeShiftError, match=f"^{ENV_URL}: .*'http://\\[::1'"):
        wire.receive()


# -- 3: a service that cannot answer at start-up ----------------------------------------


def _run_until_held(shift: TimeShift, clock: FakeClock, limit_s: float = 3.0) -> int:
    """wait() until the job is held (the re-read runs in a thread, on the real clock);
    returns the number of steps taken."""
    deadline = time.monotonic() + limit_s
    steps = 0
    while not shift.enabled and time.monotonic() < deadline:
        shift.wait()
        steps += 1
        clock.t += 0.03
        time.sleep(0.002)
    return steps


def test_a_job_the_service_does_not_know_yet_runs_free_then_takes_its_shift(service, capsys):
    """A 404 at start-up (the job not registered yet) killed the whole training job with
    a TimeShiftError; now it runs free, says so once on stderr, and its refreshes take
    the shift once the service answers one."""
    server, url = service
    clock = FakeClock()
    shift = TimeShift.from_env(
        environ=_env(url, **{ENV_REFRESH: "2"}), clock=clock, sleep=clock.sleep
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"cassini.torch: {ENV_URL}: ")
    assert "answered 404" in err and "runs free" in err and "every 2 iterations" in err
    assert not shift.enabled and "answered 404" in shift.status()["reason"]
    for _ in range(5):
        assert shift.wait() == 0.0
        clock.t += 0.03
    server.answer = (200, GRID)
    steps = _run_until_held(shift, clock)
    assert shift.enabled, shift.status()
    assert shift.settings == ShiftSettings(True, 0.02, 0.1, NOW_S - 3600, 0.01, source="url")
    assert _phase_error(clock.t - 0.03, NOW_S - 3600, 0.02, 0.1) < 1e-6  # on its slot
    status = shift.status()
    assert status["changes"] == 1 and status["iterations"] == 5 + steps
    assert capsys.readouterr().err == ""  # warned once


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("how", ["down", "hung", "503"])
def test_a_service_down_or_hung_at_start_up_lets_the_job_run_free(
    how, service, monkeypatch, capsys
):
    server, url = service
    monkeypatch.setattr(timeshift, "FETCH_TIMEOUT_S", 0.3, raising=False)
    listener = None
    if how == "down":
        url = f"http://127.0.0.1:{_dead_port()}"
    elif how == "hung":  # accepts connections (the kernel's backlog), never answers
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    else:
        server.answer = (503, {"error": {"code": 503, "message": "draining"}})
    try:
        t0 = time.monotonic()
        shift = TimeShift.from_env(environ=_env(url), clock=FakeClock())
        assert time.monotonic() - t0 < 2.0
    finally:
        if listener is not None:
            listener.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{ENV_URL}: " in err and "runs free" in err
    assert not shift.enabled and shift.refresh_every == 50 and shift.source is not None


def test_rank_0_sends_a_free_start_and_the_refresh_interval_to_the_other_ranks(monkeypatch):
    """The other ranks run free with rank 0's reason and re-read at the same iterations
    (they take part in every refresh broadcast), instead of dying with rank 0's error."""
    wire = _Wire(monkeypatch)
    url = f"http://127.0.0.1:{_dead_port()}"
    settings, source, refresh = timeshift._send_settings(
        _env(url, **{ENV_REFRESH: "7"}), NOW_S, None)  # fmt: skip
    assert not settings.shift and source is not None and refresh == 7
    peer, peer_refresh = wire.receive()
    assert not peer.shift and peer_refresh == 7 and peer.reason == settings.reason
    assert "cannot fetch" in peer.reason


@pytest.mark.parametrize(
    "answer, words",
    [
        ((200, b"{not json"), "answer is not JSON"),
        ((200, {**GRID, "period_s": -1}), "period_s"),
        ((200, {"job_id": "j"}), "'shift'"),
        ((400, {"error": {"code": 400, "field": "job_id", "message": "bad id"}}), "answered 400"),
    ],
)
def test_a_malformed_answer_at_start_up_is_still_an_error(service, answer, words):
    server, url = service
    server.answer = answer
    with pytest.raises(TimeShiftError, match=f"^{ENV_URL}: ") as e:
        TimeShift.from_env(environ=_env(url), clock=FakeClock())
    assert words in str(e.value)


# -- 4: every CASSINI_ variable set is checked ------------------------------------------


@pytest.mark.parametrize(
    "more, variable",
    [
        ({ENV_TOLERANCE_S: "garbage"}, ENV_TOLERANCE_S),
        ({ENV_TOLERANCE_S: "nan"}, ENV_TOLERANCE_S),
        ({ENV_TOLERANCE_S: "-0.01"}, ENV_TOLERANCE_S),
        ({ENV_TOLERANCE_S: "0.06"}, ENV_TOLERANCE_S),  # half the served period or more
        ({ENV_SHIFT_S: "0.01"}, f"{ENV_SHIFT_S}, {ENV_URL}: both set"),
        ({ENV_PERIOD_S: "0.1", ENV_EPOCH_S: "1e9"}, f"{ENV_PERIOD_S}, {ENV_EPOCH_S}, {ENV_URL}"),
        ({ENV_EPOCH_S: "x"}, ENV_EPOCH_S),
    ],
)
def test_variables_beside_cassini_url_are_not_ignored(service, more, variable):
    """With CASSINI_URL, CASSINI_TOLERANCE_S and the three numbers were ignored, even
    malformed (CASSINI_TOLERANCE_S=garbage was accepted)."""
    server, url = service
    server.answer = (200, GRID)
    for read in (settings_from_env, TimeShift.from_env):
        with pytest.raises(TimeShiftError, match=f"^{variable}") as e:
            read(environ=_env(url, **more))
        assert "\n" not in str(e.value)


def test_cassini_tolerance_s_overrides_the_served_tolerance(service):
    """The service's PUT has no tolerance field: CASSINI_TOLERANCE_S is the job's way to
    set one, at start-up and at every refresh."""
    server, url = service
    server.answer = (200, GRID)
    env = _env(url, **{ENV_TOLERANCE_S: "0.03", ENV_REFRESH: "2"})
    assert settings_from_env(env).tolerance_s == 0.03
    clock = FakeClock()
    shift = TimeShift.from_env(environ=env, clock=clock, sleep=clock.sleep)
    assert shift.settings.tolerance_s == 0.03 and shift.status()["tolerance_s"] == 0.03
    server.answer = (200, {**GRID, "shift_s": 0.05})
    for _ in range(40):
        shift.wait()
        clock.t += 0.03
        if shift.changes:
            break
        time.sleep(0.005)
    assert shift.settings.shift_s == 0.05 and shift.settings.tolerance_s == 0.03
    assert shift.settings == timeshift.ShiftSource(url, "j", tolerance_s=0.03).first()


@pytest.mark.parametrize(
    "more, variable",
    [
        ({ENV_PERIOD_S: "garbage"}, ENV_PERIOD_S),
        ({ENV_TOLERANCE_S: "soon"}, ENV_TOLERANCE_S),
        ({ENV_URL: "not a url", ENV_JOB_ID: "j"}, ENV_URL),
        ({ENV_REFRESH: "often", ENV_URL: "http://127.0.0.1:1", ENV_JOB_ID: "j"}, ENV_REFRESH),
    ],
)
def test_variables_are_checked_when_the_job_runs_free(more, variable):
    """CASSINI_SHIFT=off returned before any other variable was read."""
    env = {ENV_SHIFT: "off", **more}
    for read in (settings_from_env, TimeShift.from_env):
        with pytest.raises(TimeShiftError, match=f"^{variable}: "):
            read(environ=env)


# -- 5: status() counters ----------------------------------------------------------------


class _Answers:
    """A source answering its list in order, then nothing new."""

    errors = 0

    def __init__(self, *answers: ShiftSettings | None) -> None:
        self.answers = list(answers)

    def poll(self) -> ShiftSettings | None:
        return self.answers.pop(0) if self.answers else None


def test_startup_skipped_slots_is_the_first_grids_only():
    """An epoch an hour old: the first grid's start-up passes every slot since it (36,000
    of 100 ms); a second grid on the same epoch added them again (72,000)."""
    clock = FakeClock()
    epoch = NOW_S - 3600
    new = ShiftSettings(True, 0.05, 0.1, epoch, source="url")
    shift = TimeShift(
        ShiftSettings(True, 0.02, 0.1, epoch),
        source=_Answers(None, new),
        refresh_every=2,
        clock=clock,
        sleep=clock.sleep,
    )
    for _ in range(8):
        shift.wait()
        clock.t += 0.03
    status = shift.status()
    assert shift.changes == 1 and status["realignments"] == 0, status
    assert 36_000 <= status["startup_skipped_slots"] <= 36_001, status


def test_iterations_count_every_step_whatever_the_state():
    """Steps run free between a release by the service and a new grid were not counted
    (30 steps said 29), nor were a job's steps that never held a grid."""
    clock = FakeClock()
    free = ShiftSettings(False, reason="maintenance", source="url")
    held = ShiftSettings(True, 0.02, 0.1, NOW_S, source="url")
    shift = TimeShift(
        ShiftSettings(True, 0.01, 0.1, NOW_S),
        source=_Answers(free, None, held),
        refresh_every=3,
        clock=clock,
        sleep=clock.sleep,
    )
    states = []
    for _ in range(30):
        shift.wait()
        states.append(shift.enabled)
        clock.t += 0.03
    assert False in states and states[-1] and shift.changes == 2  # held, free, held again
    assert shift.status()["iterations"] == 30
    alone = TimeShift(None)
    for _ in range(4):
        alone.wait()
    assert alone.status() == {"enabled": False, "iterations": 4}
