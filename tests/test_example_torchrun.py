"""A plain training script (examples/train_with_timeshift.py) under torchrun, two ranks
with gloo on loopback, takes its time-shift from a real ``cassini serve`` and holds every
step to it (issue 11 acceptance)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.service_util import call, ok_json, start

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def rank_failures(stderr: str) -> str:
    """What the ranks themselves said (``[rankN]:`` lines, C++ ``terminate``/``what()``,
    Python errors), then torchrun's summary: its tail alone names only the signal."""
    said = [
        line
        for line in stderr.splitlines()
        if line.startswith("[rank") or "terminate called" in line or "what()" in line
        or "Error" in line or "Exception" in line
    ]
    return "\n".join(said[-40:]) + "\n--- torchrun's tail ---\n" + stderr[-1500:]


def run_example(env: dict[str, str], steps: int) -> dict:
    """The example under torchrun (2 ranks, gloo, loopback); rank 0's JSON line."""
    script = ROOT / "examples" / "train_with_timeshift.py"
    r = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(script), "--steps", str(steps)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=ROOT,
    )
    assert r.returncode == 0, rank_failures(r.stderr)
    return json.loads(next(line for line in r.stdout.splitlines() if line.startswith("{")))


@pytest.mark.timing
def test_script_under_torchrun_follows_the_served_shift():
    srv = start(workers=1, quiet=True)
    try:
        # the scheduler registers the job, then sets the shift its advice chose
        ok_json(call(srv.port, "POST", "/v1/jobs", {"id": "demo", "model": "bert"}), 201)
        epoch = time.time()
        shift = {"shift_s": 0.02, "period_s": 0.2, "epoch_s": epoch}
        ok_json(call(srv.port, "PUT", "/v1/jobs/demo/time_shift", shift))
        url = f"http://127.0.0.1:{srv.port}"
        out = run_example({**os.environ, "CASSINI_URL": url, "CASSINI_JOB_ID": "demo"}, 10)
    finally:
        srv.stop()
    assert out["agent"]["enabled"] and out["agent"]["source"] == "url"
    assert out["agent"]["period_s"] == 0.2 and not out["agent"]["released"]
    starts = np.array(out["starts_s"])
    # every step starts on its slot, epoch + shift + k * period (a loaded 2-core machine
    # may wake a sleeper late by some ms; starts at random would be up to 100 ms off)
    phase = (starts - epoch - 0.02) % 0.2
    late = np.minimum(phase, 0.2 - phase)
    gaps = np.diff(starts[1:])
    print(f"late max {late.max() * 1e3:.1f} ms, gap error {np.abs(gaps - 0.2).max() * 1e3:.1f} ms")
    # measured (4 runs, this 2-core machine shared with other developers' tests,
    # 2026-11-26): late at most 1.6, 5.9, 6.0, 3.5 ms; gap error at most 1.4-5.2 ms.
    # 30 ms is 5x the worst of them and well under random starts' 100 ms.
    assert np.all(late < 0.03), late
    assert np.allclose(gaps, 0.2, atol=0.03)


@pytest.mark.slow
def test_script_without_cassini_variables_runs_free():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASSINI_")}
    assert run_example(env, 3)["agent"] == {"enabled": False, "iterations": 3}  # every step
