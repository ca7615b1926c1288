"""The simulator's progress bar: silent on short runs, then jobs, simulated time and an
ETA from the pace so far, and one final line."""

from __future__ import annotations

from cassini.profile import JobProfile
from cassini.sim.report.run import ProgressBar


def test_progress_bar_is_silent_at_first_then_shows_jobs_time_and_eta(capsys) -> None:
    bar = ProgressBar("themis", clock=lambda: 1234.0, after_s=3600.0)
    bar(10, 100)
    assert capsys.readouterr().err == ""  # under after_s: nothing
    bar.after_s, bar.every_s = 0.0, 0.0
    bar.start -= 10.0  # 10 s in, 25 % done: 30 s to go
    bar(25, 100)
    line = capsys.readouterr().err
    assert "25/100 jobs" in line and "sim      1234 s" in line
    assert "ETA    30 s" in line or "ETA    31 s" in line  # ~10 s elapsed
    bar(100, 100)
    final = capsys.readouterr().err
    assert "100/100 jobs" in final and final.endswith("ETA     0 s\n")


def test_stderr_progress_shows_the_simulated_time_the_engine_passes(capsys) -> None:
    """``cassini sim run``'s bar: the engine hands it the simulated time with each tick."""
    from cassini.sim.engine import Simulation
    from cassini.sim.report.run import stderr_progress
    from cassini.sim.topology import Cluster
    from cassini.sim.workload import JobSpec

    ticks: list[tuple[int, int, float]] = []
    library = {"m": JobProfile("m", 0.1, ())}
    jobs = [JobSpec(f"j{k}", 10.0 * k, 8, 20, "m") for k in range(3)]
    Simulation(Cluster(2, 1, 8), jobs, library, "themis", progress=lambda *a: ticks.append(a)).run()
    assert [t[:2] for t in ticks] == [(1, 3), (2, 3), (3, 3)]
    assert [t[2] for t in ticks] == sorted(t[2] for t in ticks) and ticks[-1][2] >= 20.0
    stderr_progress("themis", 3, 3, ticks[-1][2])  # final line always drawn once started
    bar = ProgressBar("themis", after_s=0.0, every_s=0.0)
    bar(1, 2, 1234.0)
    assert "sim      1234 s" in capsys.readouterr().err
