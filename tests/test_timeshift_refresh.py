"""A running job learns of a changed time-shift: the service's answer carries an ETag
(304 to a conditional GET when unchanged), and ``cassini.torch`` re-reads it every N
iterations; on a real 2-rank gloo job on loopback, a shift changed over HTTP moves both
ranks to the new grid within N + 1 iterations, at the same iteration."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest
from conftest import LazyModule
from helpers.gloo_util import leave_process_group
from helpers.service_util import HALF, call, ok_json, start

torch = LazyModule("torch")

PERIOD_S = 0.2
OLD_SHIFT_S, NEW_SHIFT_S = 0.0, 0.1  # the two grids are half a period apart
REFRESH = 5
ITERATIONS = 50
TOLERANCE_S = 0.04  # a start this close to its slot is on that grid (a busy CPU wakes late)


@pytest.fixture
def served():
    srv = start(workers=1, quiet=True)
    try:
        job = {"id": "j", "iteration_time_s": PERIOD_S, "phases": HALF}
        ok_json(call(srv.port, "POST", "/v1/jobs", job), 201)
        put = {"shift_s": OLD_SHIFT_S, "period_s": PERIOD_S}
        ok_json(call(srv.port, "PUT", "/v1/jobs/j/time_shift", put))
        yield srv
    finally:
        srv.stop()


def test_time_shift_answers_carry_an_etag(served):
    port = served.port
    status, headers, body = call(port, "GET", "/v1/jobs/j/time_shift")
    etag = headers["ETag"]
    assert status == 200 and etag.startswith('"') and json.loads(body)["shift_s"] == OLD_SHIFT_S
    status, headers, body = call(port, "GET", "/v1/jobs/j/time_shift",
                                 headers={"If-None-Match": etag})
    assert status == 304 and body == b"" and headers["ETag"] == etag
    ok_json(call(port, "PUT", "/v1/jobs/j/time_shift",
                 {"shift_s": NEW_SHIFT_S, "period_s": PERIOD_S}))
    status, headers, body = call(port, "GET", "/v1/jobs/j/time_shift",
                                 headers={"If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag
    assert json.loads(body)["shift_s"] == NEW_SHIFT_S
    # a release: run free
    released = ok_json(call(port, "PUT", "/v1/jobs/j/time_shift", {"shift": False}))
    assert released["shift"] is False and released["reason"] == "released by PUT"


def _rank(rank: int, port: int, env: dict, out: str) -> None:
    import torch.distributed as dist

    from cassini.torch import TimeShift

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    shift = TimeShift.from_env(environ=env if rank == 0 else {})
    starts = []
    for i in range(ITERATIONS):
        shift.wait()
        starts.append(time.time())
        dist.all_reduce(torch.ones(4))  # the job's ranks stay in step, as in training
        if rank == 0:
            with open(f"{out}.progress.tmp", "w") as f:
                f.write(str(i + 1))
            os.replace(f"{out}.progress.tmp", f"{out}.progress")  # whole, never half-written
    shift.close()
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"starts": starts, **shift.status()}, f)
    leave_process_group()


def _phase_error(t: float, epoch: float, shift: float) -> float:
    """Seconds from ``t`` to the nearest slot of the grid (epoch + shift + k * period)."""
    d = (t - epoch - shift) % PERIOD_S
    return min(d, PERIOD_S - d)


# timing: every start within TOLERANCE_S (40 ms) of a 200 ms period's slot, in real time.
# 2026-11-28: beside phase 1's load it passed in 3 fresh clones and failed in the fourth
# (15:50 UTC: after 5 iterations on the new grid the starts fell 3-97 ms off both grids,
# 10 of 15 on it); alone on the quiet host it passed 3 of 3 right after.  A starved
# sleeper is not what this test is about, so it runs with the timing tests, one at a time.
@pytest.mark.slow
@pytest.mark.timing
def test_both_ranks_move_to_a_changed_shift_within_n_plus_1_iterations(served, tmp_path):
    import torch.multiprocessing as mp

    epoch = ok_json(call(served.port, "GET", "/v1/jobs/j/time_shift"))["epoch_s"]
    env = {"CASSINI_URL": served.url, "CASSINI_JOB_ID": "j",
           "CASSINI_REFRESH_ITERATIONS": str(REFRESH)}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "rank")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            mp.spawn(_rank, args=(port, env, out), nprocs=2, join=True)
        except BaseException as e:  # reported below
            errors.append(e)

    job = threading.Thread(target=run)
    job.start()
    deadline = time.monotonic() + 60
    progress = tmp_path / "rank.progress"
    while time.monotonic() < deadline and job.is_alive():
        # read once (rank 0 replaces the file every iteration)
        text = progress.read_text().strip() if progress.exists() else ""
        if text and int(text) >= 20:
            break
        time.sleep(0.02)
    changed_at = time.time()
    ok_json(call(served.port, "PUT", "/v1/jobs/j/time_shift",
                 {"shift_s": NEW_SHIFT_S, "period_s": PERIOD_S}))
    job.join(90)
    assert not errors, errors
    ranks = [json.loads((tmp_path / f"rank.{r}").read_text()) for r in range(2)]
    switched = []
    for r in ranks:
        starts = r["starts"]
        first_after = next(i for i, t in enumerate(starts) if t > changed_at)
        assert first_after >= 15, "the change came before the job had settled"
        errors_old = [round(_phase_error(t, epoch, OLD_SHIFT_S), 4) for t in starts]
        errors_new = [round(_phase_error(t, epoch, NEW_SHIFT_S), 4) for t in starts]
        detail = f"first after the change {first_after}; from the old grid {errors_old}"
        before = errors_old[first_after - 10: first_after - 1]
        assert sum(e < TOLERANCE_S for e in before) >= 8, detail
        on_new = [e < TOLERANCE_S for e in errors_new]
        switch = next((i for i in range(first_after, len(starts)) if on_new[i]), None)
        assert switch is not None and switch <= first_after + REFRESH + 1, detail
        after = on_new[switch: switch + 15]
        assert len(after) == 15 and sum(after) >= 14, detail
        assert r["changes"] == 1
        switched.append(switch)
    assert switched[0] == switched[1]  # every rank at the same iteration


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class _Source:
    """A ShiftSource whose answers the test sets."""

    def __init__(self) -> None:
        self.next = None
        self.errors = 0

    def poll(self):
        answer, self.next = self.next, None
        return answer


def test_a_release_read_at_a_refresh_lets_the_job_run_free():
    from cassini.torch.timeshift import ShiftSettings, TimeShift

    clock, source = _Clock(1000.0), _Source()
    held = ShiftSettings(True, 0.03, PERIOD_S, 0.0)
    shift = TimeShift(held, source=source, refresh_every=3, clock=clock, sleep=clock.sleep)
    for _ in range(4):
        shift.wait()
        clock.t += 0.01  # the step's work
    assert shift.enabled and shift.agent.iteration == 4
    source.next = ShiftSettings(False, reason="released by PUT", source="url")
    for _ in range(3):  # read at the 7th call
        shift.wait()
    assert not shift.enabled and shift.changes == 1
    t = clock.t
    assert shift.wait() == 0.0 and clock.t == t  # runs free: no waiting
    source.next = ShiftSettings(True, 0.05, PERIOD_S, 0.0)
    for _ in range(3):
        shift.wait()
    assert shift.enabled and shift.settings.shift_s == 0.05 and shift.changes == 2
    assert _phase_error(clock.t, 0.0, 0.05) < 1e-6  # on the new grid
