"""The pictures of a run's report, as PNG files: per-link utilisation heat map, one
link's timeline of who sends when, per-job slowdown CDF, GPU utilisation over time.
Each takes the schemes' results side by side (one panel or line per scheme)."""

from __future__ import annotations

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
        ax.set_title(f"{name}: utilisation of the {k} busiest links (of {len(u.links)} used)")
        if k == 0:
            ax.text(0.5, 0.5, "no traffic crossed any link", ha="center", transform=ax.transAxes)
            ax.set_yticks([])
            continue
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


def timeline(lines: Mapping[str, LinkTimeline | str], link: str, path: Path) -> Path:
    """Who sends when on ``link``: stacked rates per job over the window in which the
    link was most congested, one panel per scheme (a string: why there is none)."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(lines), 1, figsize=(11, 2.8 * len(lines)), squeeze=False)
    for ax, (name, tl) in zip(axes[:, 0], lines.items(), strict=True):
        if isinstance(tl, str) or not tl.steps:
            ax.set_title(f"{name}: {link}")
            why = tl if isinstance(tl, str) else "no traffic in the window"
            ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, transform=ax.transAxes)
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
        ax.set_title(f"{name}: {link}, {len(tl.jobs)} jobs, window from t = {tl.start_s:.1f} s")
        handles, labels = ax.get_legend_handles_labels()
        keep = [k for k, lab in enumerate(labels) if k < LEGEND_JOBS or lab in
                ("capacity", "warm-up (not measured)")]  # fmt: skip
        ax.legend([handles[k] for k in keep], [labels[k] for k in keep], fontsize=7,
                  loc="upper right", ncol=2)  # fmt: skip
    axes[-1, 0].set_xlabel("seconds into the window")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def slowdown_cdf(results: Mapping[str, SimResult], path: Path) -> Path:
    """CDF over jobs of each job's slowdown (mean iteration time / dedicated)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in results.items():
        x = np.sort([j.slowdown for j in r.jobs])
        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=name)
    ax.set_xlabel("job slowdown (mean iteration time / dedicated)")
    ax.set_ylabel("CDF over jobs")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def gpu_utilisation(util: Mapping[str, Utilisation], path: Path) -> Path:
    """Effective (solid) and allocated (dashed) GPU utilisation per scheme."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 3.8))
    for k, (name, u) in enumerate(util.items()):
        mid = (u.edges[:-1] + u.edges[1:]) / 2
        color = f"C{k}"
        ax.plot(mid, 100 * u.gpu_effective, color=color, label=f"{name}: computing")
        ax.plot(mid, 100 * u.gpu_allocated, color=color, ls="--", lw=1,
                label=f"{name}: allocated")  # fmt: skip
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("% of the cluster's GPUs")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
