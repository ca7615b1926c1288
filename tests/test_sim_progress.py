"""The simulator's progress bar: silent on short runs, then jobs, simulated time and an
ETA from the pace so far, and one final line."""

from __future__ import annotations

from cassini.sim.report import ProgressBar


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
