"""A held pair on the testbed, one job released by hand (its file on the run's release
board): the other must run free within 3 iterations, as the simulator releases a held
group together.  Needs root (Mininet); CI=true turns a missing prerequisite into a
failure."""

from __future__ import annotations

import threading
import time

import pytest
from helpers.pairs import dumbbell_pair

from testbed import releaseboard
from testbed.iterations import read_log
from testbed.run import load_config
from testbed.run.config import SchemeSpec
from testbed.run.session import Schedule, run_together

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("testbed_host")]

PERIOD_S = 0.1  # each job's iteration takes ~50 ms alone: held, it waits ~half of it
ITERATIONS = 30
RELEASE_AFTER = 10  # job a's rank 0 has logged this many iterations when it is released


def _config() -> dict:
    job = {"kind": "synthetic", "compute_s": 0.03, "bytes": 300_000, "iterations": ITERATIONS}
    return dumbbell_pair(job)


def _release_a_by_hand(log, board, done: dict, stop: threading.Event) -> None:
    """Once job a's rank 0 logged RELEASE_AFTER iterations, put a on the board."""
    while not stop.is_set():
        if log.exists() and len(log.read_text().splitlines()) >= RELEASE_AFTER:
            done["at"] = time.time()
            releaseboard.announce(board, "a", "released by hand (test)")
            return
        time.sleep(0.005)


def test_releasing_one_job_of_a_held_pair_frees_the_other_within_3_iterations(tmp_path):
    cfg = load_config(_config())
    schedule = Schedule({"a": 0.0, "b": PERIOD_S / 2}, {"a": PERIOD_S, "b": PERIOD_S})
    logs = tmp_path / "held"
    done: dict = {}
    stop = threading.Event()
    board = releaseboard.board_for(logs / "go.json")
    hand = threading.Thread(
        target=_release_a_by_hand, args=(logs / "a-rank0.jsonl", board, done, stop)
    )
    hand.start()
    try:
        res = run_together(cfg, SchemeSpec("held", "baseline"), "cubic", logs, schedule)
    finally:
        stop.set()
        hand.join()
    assert "at" in done, "job a never logged enough iterations to be released"
    released_at = done["at"]
    for job in ("a", "b"):
        assert res.jobs[job].released is True, job
    b = read_log(logs / "b-rank0.jsonl")
    assert not b[0]["released"]  # held before the release
    # b's first iteration to start after a was put on the board, and its first free one
    first_after = next(r["iter"] for r in b if r["start"] >= released_at)
    freed = next(r["iter"] for r in b if r["released"])
    print(f"b: released at iteration {freed}, {freed - first_after} after a's release")
    assert freed - first_after <= 3
    assert first_after - 1 > 0 and not b[first_after - 1]["released"]  # not before it
    # free from then on: no wait for a slot between an iteration's end and the next start
    held_gaps = [b[k]["start"] - b[k - 1]["end"] for k in range(2, first_after)]
    free_gaps = [b[k]["start"] - b[k - 1]["end"] for k in range(freed + 1, len(b))]
    print(f"b waits between iterations: held median {sorted(held_gaps)[len(held_gaps) // 2]:.3f}"
          f" s, free max {max(free_gaps):.3f} s")
    assert sorted(held_gaps)[len(held_gaps) // 2] > 0.02  # held: waits for its slot
    assert max(free_gaps) < 0.01  # free: starts at once
    reason = releaseboard.reason(board, "a")
    assert reason == "released by hand (test)"
    assert releaseboard.reason(board, "b") is None  # b was released with its group: no report
