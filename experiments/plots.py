"""The experiments' figures: one way to open and save a figure (headless, PNG), and the
plots several experiments draw from a testbed run (iteration-time CDF, sending-rate
timeline).  Matplotlib is imported when a figure is drawn, not when an experiment is."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cassini.outputs import save_figure
from experiments.common import BOTTLENECK_BPS
from testbed.results import ExperimentResult


@contextmanager
def figure(path: Path, rows: int = 1, cols: int = 1, dpi: int = 100, **subplots: Any) -> Iterator:
    """``(fig, axes)`` from ``plt.subplots(rows, cols, **subplots)`` on the headless
    backend; on leaving the block it is laid out, saved to ``path`` at ``dpi``
    (:func:`cassini.outputs.save_figure`: whole or not at all) and closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, **subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        save_figure(fig, path, dpi)
    finally:
        plt.close(fig)


def plot_cdf(res: ExperimentResult, path: Path, title: str) -> None:
    """CDF of every job's iteration times, one line per scheme."""
    with figure(path, figsize=(6, 4)) as (_, ax):
        for name, scheme in res.schemes.items():
            times = sorted(t * 1e3 for j in scheme.jobs.values() for t in j.iteration_times_s)
            ax.plot(times, [(i + 1) / len(times) for i in range(len(times))], label=name)
        ax.set_xlabel("iteration time (ms)")
        ax.set_ylabel("CDF")
        ax.set_title(f"{title}: iteration times")
        ax.legend(fontsize=8)


def sending_rates(
    logs: dict[str, list[dict[str, Any]]], grid_s: Any, window_s: float
) -> list[Any]:
    """Each job's sending rate (Mbit/s) on ``grid_s`` (seconds from the first start in the
    second half of the run): the bytes of each communication phase spread over its
    duration, from the job's rank-0 records."""
    import numpy as np

    t0 = min(r["start"] for recs in logs.values() for r in recs[len(recs) // 2 :])
    stack = []
    for recs in logs.values():
        rate = np.zeros_like(grid_s)
        for r in recs:
            a, b = r["comm_start"] - t0, r["end"] - t0
            if b > 0 and a < window_s and b > a:
                rate[(grid_s >= a) & (grid_s < b)] = r["bytes_sent"] * 8 / (b - a) / 1e6
        stack.append(rate)
    return stack


def plot_timeline(
    res: ExperimentResult,
    path: Path,
    title: str,
    window_s: float = 1.0,
    schemes: list[str] | None = None,
) -> None:
    """Each job's sending rate over a window in the middle of the run, one panel per
    scheme (``schemes``, default the same-start baseline, CASSINI and MLTCP ones), from
    the rank-0 workers' logs: each communication phase drawn at its mean rate (its bytes
    over its duration), the jobs overlaid, not stacked (two phases that overlap for a
    millisecond each show their own mean, not a sum above the bottleneck that the
    logs cannot tell), on one rate scale for every panel."""
    import numpy as np

    wanted = schemes or ["baseline", "cassini", "mltcp-reno", "mltcp-dctcp"]
    shown = [s for s in wanted if s in res.schemes]
    if not shown:
        raise ValueError(f"none of {wanted} in this run (have {sorted(res.schemes)})")
    size = (8, 2.2 * len(shown))
    with figure(path, len(shown), 1, figsize=size, sharex=True, sharey=True) as (_, axes):
        axes = np.atleast_1d(axes)
        grid = np.arange(0, window_s, 0.001)
        for ax, name in zip(axes, shown, strict=True):
            logs = {j: r.records(0) for j, r in res.schemes[name].jobs.items()}
            for job, rate in zip(logs, sending_rates(logs, grid, window_s), strict=True):
                ax.fill_between(grid, rate, step="post", alpha=0.55, label=job)
            ax.axhline(BOTTLENECK_BPS / 1e6, color="k", lw=0.8, ls="--")
            ax.set_ylabel(f"{name}\nMbit/s")
        axes[0].set_ylim(0, 1.15 * BOTTLENECK_BPS / 1e6)
        axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        axes[0].set_title(
            f"{title}: each job's phases at their mean rate, bottleneck "
            f"{BOTTLENECK_BPS / 1e6:.0f} Mbit/s (dashed)"
        )
        axes[-1].set_xlabel("seconds (a window in the middle of the run)")


if __name__ == "__main__":
    from experiments import not_a_command

    not_a_command("experiments.plots")
