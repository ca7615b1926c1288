"""What a run shows while and after it runs: progress lines, the workers' completed
iterations, and the scheme x job table of iteration times against ``ideal``."""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from testbed.host import wait_all
from testbed.results import ExperimentResult

Progress = Callable[[str], None]
"""Takes one progress line (the runner prints them on stderr)."""


def wait_with_progress(
    procs: Sequence[subprocess.Popen],
    rank0_logs: Mapping[str, Path],
    iterations: Mapping[str, int],
    timeout_s: float,
    say: Progress | None,
) -> list[int]:
    """Wait for every worker (killing the rest after ``timeout_s`` or once one fails),
    showing each job's completed iterations (its rank 0's log lines) of ``iterations``;
    returns the exit codes."""
    say = say or (lambda msg: None)
    deadline = time.time() + timeout_s
    last_line, said = 0.0, ""
    tty = sys.stderr.isatty()
    while any(p.poll() is None for p in procs):
        if time.time() > deadline:
            break
        if any(p.poll() not in (None, 0) for p in procs):
            break  # a worker died: stop the rest now, not at the deadline
        line = _progress_line(rank0_logs, iterations)
        if tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif time.time() - last_line > 5:
            say(line)
            last_line, said = time.time(), line
        time.sleep(0.25)
    codes = wait_all(procs, max(1.0, deadline - time.time()))
    # every job's final count, however short the scheme was (a line every 5 s missed it)
    line = _progress_line(rank0_logs, iterations)
    if tty:
        print("\r" + line, file=sys.stderr, flush=True)
    elif line != said:
        say(line)
    return codes


def _progress_line(rank0_logs: Mapping[str, Path], iterations: Mapping[str, int]) -> str:
    """Each job's completed iterations (its rank 0's log lines) of ``iterations``."""
    return "  " + " ".join(
        f"{j} {_count_lines(path)}/{iterations[j]}" for j, path in rank0_logs.items()
    )


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


NO_IDEAL = "vs ideal: - (no ideal run: add the ideal scheme to the config's schemes)"


def format_table(results: ExperimentResult) -> str:
    """Scheme x job: mean, p50, p99 iteration time (ms) and mean as a ratio to ideal
    ("-" where there is none: no ideal run, said under the table, or no iterations)."""
    ideal = results.ideal
    lines = [
        f"{'scheme':<14} {'job':<10} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs ideal':>9}"
    ]
    for name, res in results.schemes.items():
        ratios = res.ratios(ideal) if ideal else {}
        for job, s in res.summary.items():
            ratio = ratios.get(job, math.nan)
            vs_ideal = "-" if math.isnan(ratio) else f"{ratio:.2f}x"
            lines.append(
                f"{name:<14} {job:<10} {s['mean_s'] * 1e3:>8.1f} {s['p50_s'] * 1e3:>8.1f} "
                f"{s['p99_s'] * 1e3:>8.1f} {vs_ideal:>9}"
                + (f"  {res.reused_note}" if res.reused_note else "")
            )
    if ideal is None:
        lines.append(NO_IDEAL)
    return "\n".join(lines)


def default_out_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="testbed-"))


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.report")
