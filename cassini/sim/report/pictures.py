"""The pictures of a run's report, as PNG files: per-link utilisation heat map, one
link's timeline of who sends when, per-job slowdown CDF, iteration-time and JCT CDFs
(``cdf.png``), GPU utilisation over time.  Each takes the schemes' results side by side
(one panel or line per scheme); legends stand beside the panels, never over the data."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from cassini.sim.engine import SimResult
from cassini.sim.report.recording import LinkTimeline
from cassini.sim.report.utilisation import Utilisation

#: Rows of the heat map (the busiest links); the rest are left out, not averaged in.
HEATMAP_LINKS = 30
#: Jobs named in a timeline's legend.
LEGEND_JOBS = 12


def _pyplot():  # noqa: ANN202 - matplotlib's module
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heatmap(util: Mapping[str, Utilisation], path: Path, title: str = "") -> Path:
    """Links x time, busiest links on top, one panel per scheme."""
    plt = _pyplot()
    n = len(util)
    rows = [min(HEATMAP_LINKS, len(u.links)) for u in util.values()]
    fig, axes = plt.subplots(
        n,
        1,
        figsize=(11, 1.0 + sum(max(r, 3) * 0.2 + 0.9 for r in rows)),
        squeeze=False,
        layout="constrained",
    )
    image = None
    for ax, (name, u), k in zip(axes[:, 0], util.items(), rows, strict=True):
        if k == 0:  # the panel still spans the run
            ax.set_title(f"{name}: no link carried traffic")
            idle = f"no traffic crossed any link in the run's {u.edges[-1]:.3g} s"
            ax.text(0.5, 0.5, idle, ha="center", transform=ax.transAxes)
            ax.set_xlim(u.edges[0], u.edges[-1])
            ax.set_yticks([])
            continue
        ax.set_title(f"{name}: utilisation of the {k} busiest links (of {len(u.links)} used)")
        image = ax.imshow(
            u.link_share[:k],
            aspect="auto",
            interpolation="nearest",
            cmap="magma",
            vmin=0.0,
            vmax=1.0,
            extent=(u.edges[0], u.edges[-1], k - 0.5, -0.5),
        )
        ax.set_yticks(range(k))
        ax.set_yticklabels(u.links[:k], fontsize=7)
        ax.set_ylabel("link")
    axes[-1, 0].set_xlabel("simulated time (s)")
    if image is not None:
        fig.colorbar(image, ax=axes[:, 0].tolist(), label="utilisation (carried / capacity)")
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _beside(ax, **kwargs) -> None:  # noqa: ANN001 - a matplotlib Axes
    """The axes' legend outside it, on the right: it covers no data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kwargs)


def _wrapped(text: str, width: int = 90) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def timeline(lines: Mapping[str, LinkTimeline | str], link: str, path: Path) -> Path:
    """Who sends when on ``link``: stacked rates per job over the window in which the
    link was most congested, one panel per scheme (a string: why there is none)."""
    plt = _pyplot()
    fig, axes = plt.subplots(
        len(lines), 1, figsize=(11, 2.8 * len(lines)), squeeze=False, layout="constrained"
    )
    drawn = []
    for ax, (name, tl) in zip(axes[:, 0], lines.items(), strict=True):
        if isinstance(tl, str) or not tl.steps:
            ax.set_title(f"{name}: {link}")
            why = tl if isinstance(tl, str) else "no traffic in the window"
            ax.text(0.5, 0.5, _wrapped(why), ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        t = np.array([[a, b] for a, b, _ in tl.steps]).ravel()
        stack = np.array([np.repeat([s.get(j, 0.0) for _, _, s in tl.steps], 2) for j in tl.jobs])
        ax.stackplot(t, stack / 1e9, labels=list(tl.jobs), alpha=0.9)
        ax.axhline(tl.capacity_bps / 1e9, color="k", ls="--", lw=1, label="capacity")
        ax.axvspan(0, tl.warmup_s, color="0.85", zorder=0, label="warm-up (not measured)")
        ax.set_xlim(t[0], t[-1])
        ax.set_ylabel("Gbit/s")
        drawn.append(ax)
        jobs = f"{len(tl.jobs)} job{'s' if len(tl.jobs) != 1 else ''}"
        ax.set_title(f"{name}: {link}, {jobs}, window from t = {tl.start_s:.1f} s")
        handles, labels = ax.get_legend_handles_labels()
        keep = [k for k, lab in enumerate(labels) if k < LEGEND_JOBS or lab in
                ("capacity", "warm-up (not measured)")]  # fmt: skip
        ax.legend([handles[k] for k in keep], [labels[k] for k in keep], fontsize=7,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # fmt: skip
    if drawn:
        drawn[-1].set_xlabel("seconds into the window")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


#: CDFs of at most this many points mark each point (a single job's is one point).
MARKED_POINTS = 30
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: Longer lines mark a point every this fraction of their drawn length.
MARK_EVERY = 0.1


def scheme_style(k: int) -> dict[str, str]:
    """The colour and marker of the ``k``-th scheme, the same in every picture of a
    run's report (lines and CDFs): ten colours and eight markers, so schemes ten apart
    share a colour but not a marker (no two alike below 40 schemes)."""
    return {"color": f"C{k % 10}", "marker": MARKERS[k % len(MARKERS)]}


def _spaced_marks(k: int) -> dict[str, object]:
    """Marks along a long line, each scheme's at its own offset (no two cover each
    other where lines coincide); hollow."""
    return {"markevery": (0.017 * (k % 6), MARK_EVERY), "markerfacecolor": "none"}


def cdf_steps(
    ax,  # noqa: ANN001 - a matplotlib Axes
    values: np.ndarray | list[float],
    k: int,
    label: str,
    weights: np.ndarray | None = None,
) -> None:
    """The empirical CDF of ``values`` (weighted by ``weights``) as steps rising from 0 at
    the smallest value, so that even one value draws a visible rise; with few values
    each is marked, more only now and then (hollow, in the scheme's colour and marker,
    :func:`scheme_style`: schemes that coincide show)."""
    x = np.asarray(values, float)
    style = scheme_style(k)
    if not len(x):
        ax.plot([], [], label=label, markerfacecolor="none", **style)
        return
    order = np.argsort(x, kind="stable")
    cum = np.cumsum(np.ones(len(x)) if weights is None else np.asarray(weights, float)[order])
    x, y = x[order], cum / cum[-1]
    marks = _spaced_marks(k)
    if len(x) <= MARKED_POINTS:
        marks = {"markevery": list(range(1, len(x) + 1)), "markerfacecolor": "none",
                 "markersize": 7 + 2 * (k % 3)}  # fmt: skip
    ax.step(np.r_[x[0], x], np.r_[0.0, y], where="post", label=label, **style, **marks)
    ax.set_ylim(-0.02, 1.04)


def slowdown_cdf(results: Mapping[str, SimResult], path: Path) -> Path:
    """CDF over jobs of each job's slowdown (mean iteration time / dedicated)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    for k, (name, r) in enumerate(results.items()):
        cdf_steps(ax, [j.slowdown for j in r.jobs], k, name)
    ax.set_xlabel("job slowdown (mean iteration time / dedicated)")
    ax.set_ylabel("CDF over jobs")
    ax.grid(alpha=0.3)
    _beside(ax)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_cdfs(results: Mapping[str, SimResult], out_dir: Path, title: str = "") -> list[Path]:
    """``cdf.png``: iteration-time (over dedicated) and JCT CDFs, one line per scheme,
    one legend beside both panels."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    for k, (name, r) in enumerate(results.items()):
        cdf_steps(ax1, r.normalised_samples, k, name, weights=r.iteration_weights)
        cdf_steps(ax2, [j.jct_s for j in r.jobs], k, name)
    ax1.set_xlabel("iteration time / dedicated iteration time")
    ax1.set_ylabel("CDF over iterations")
    ax2.set_xlabel("job completion time (s, log scale)")
    ax2.set_xscale("log")
    _plain_log_ticks(ax2)
    ax2.set_ylabel("CDF over jobs")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    _beside(ax2)
    fig.suptitle(title)
    path = out_dir / "cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


#: Steps of a log axis's labels within a decade, coarsest first: the first that puts
#: at least LOG_TICKS labels on the axis is used.
LOG_STEPS = (
    (1.0,),
    (1.0, 2.0, 5.0),
    (1.0, 2.0, 3.0, 5.0),
    (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0),
    (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0),
)
LOG_TICKS = 4


def log_ticks(lo: float, hi: float) -> list[float]:
    """Plain tick values between ``lo`` and ``hi`` (> 0) for a log axis: the coarsest
    steps of :data:`LOG_STEPS` that give at least ``LOG_TICKS``, else (a range too narrow
    for any) ``LOG_TICKS`` evenly spaced on the log axis, to the fewest significant
    digits that keep them apart."""
    for steps in LOG_STEPS:
        ticks = [
            step * 10.0**e
            for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for step in steps
            if lo <= step * 10.0**e <= hi
        ]
        if len(ticks) >= LOG_TICKS:
            return ticks
    inner = np.geomspace(lo, hi, LOG_TICKS + 2)[1:-1]
    for digits in range(2, 16):
        ticks = sorted({float(f"{v:.{digits}g}") for v in inner})
        if len(ticks) == LOG_TICKS:
            break
    return ticks


def _plain_log_ticks(ax) -> None:  # noqa: ANN001 - a matplotlib Axes
    """A log x axis labelled in plain numbers (1, 2, 5, 10, 20, ..., finer where the
    range is narrow: :func:`log_ticks`), no crowded ``3 x 10^1`` minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lo, hi = ax.get_xlim()
    ax.xaxis.set_major_locator(FixedLocator(log_ticks(lo, hi)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)


def gpu_utilisation(util: Mapping[str, Utilisation], path: Path) -> Path:
    """Effective (solid) and allocated (dashed) GPU utilisation per scheme, each in its
    colour and marker (:func:`scheme_style`); the legend beside the panel names each
    scheme once and the two line styles."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 3.8), layout="constrained")
    for k, (name, u) in enumerate(util.items()):
        mid = (u.edges[:-1] + u.edges[1:]) / 2
        style = scheme_style(k) | _spaced_marks(k)
        ax.plot(mid, 100 * u.gpu_effective, label=name, **style)
        ax.plot(mid, 100 * u.gpu_allocated, ls="--", lw=1, markersize=4, **style)
    styles = [Line2D([], [], color="0.3", label="computing"),
              Line2D([], [], color="0.3", ls="--", lw=1, label="allocated")]  # fmt: skip
    handles, _ = ax.get_legend_handles_labels()
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("% of the cluster's GPUs")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    _beside(ax, handles=[*handles, *styles], fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
