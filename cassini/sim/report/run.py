"""Run a configuration and report: JSON for machines, a table, plots and ``report.html``
for people."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cassini import outputs
from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.sim.config import SimConfig, Workload, unused_settings
from cassini.sim.engine import SimResult, run
from cassini.sim.report.recording import NetworkRecorder
from cassini.sim.schedulers import Scheduler

RATIO_METRICS = (
    "mean_iteration_s",
    "p99_iteration_s",
    "mean_slowdown",
    "p99_slowdown",
    "mean_jct_s",
    "excess_demand_s_total",
)


@dataclass
class Run:
    """Every scheme's result on the same jobs, with what the report needs besides."""

    results: dict[str, SimResult]
    workload: Workload
    library: dict[str, JobProfile]
    recorders: dict[str, NetworkRecorder] = field(default_factory=dict)


def simulate_config(
    cfg: SimConfig,
    *,
    progress: Callable[[str, int, int, float], None] | None = None,
    record: bool = False,
) -> Run:
    """Simulate every scheduler of ``cfg`` on the same jobs; ``record`` keeps the network
    windows that the report's link timeline replays.  ``progress(name, done, total,
    now_s)``: jobs finished of the scheduler ``name`` and simulated seconds reached."""
    library = cfg.library()
    workload = cfg.read_workload(library)
    out = Run({}, workload, library)
    for name in cfg.schedulers:
        tick = (
            (lambda done, total, now, name=name: progress(name, done, total, now))
            if progress
            else None
        )
        recorder = out.recorders.setdefault(name, NetworkRecorder()) if record else None
        out.results[name] = run(
            cfg.cluster,
            workload.jobs,
            library,
            name,
            n_candidates=cfg.candidates,
            seed=cfg.seed,
            precision_deg=cfg.precision_deg,
            progress=tick,
            recorder=recorder,
            options=cfg.options,
        )
    return out


def run_config(
    cfg: SimConfig, *, progress: Callable[[str, int, int, float], None] | None = None
) -> dict[str, SimResult]:
    """Simulate every scheduler of ``cfg`` on the same jobs."""
    return simulate_config(cfg, progress=progress).results


def ratios(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{"themis/themis+cassini": {metric: baseline / cassini}}`` for every pair present."""
    out = {}
    for name, s in summaries.items():
        partner = f"{name}+cassini"
        if "+" in name or partner not in summaries:
            continue
        c = summaries[partner]
        out[f"{name}/{partner}"] = {m: (s[m] / c[m] if c[m] else math.nan) for m in RATIO_METRICS}
    return out


def packet_settings(cfg: SimConfig) -> dict[str, Any]:
    """How a ``network: packet`` run scaled the cluster down for ns-3: link rates and
    phase bytes divided by ``scale``, compute times kept (the fastest server link's rate at
    packet level)."""
    from cassini.packet.plan import as_topology
    from cassini.sim.network.packet import fastest_server_link_bps, packet_scale

    topology = as_topology(cfg.cluster)
    scale = packet_scale(topology)
    return {"scale": scale, "fastest_server_link_bps": fastest_server_link_bps(topology) / scale,
            "rule": "link rates and phase bytes divided by scale, compute times kept"}


def results_json(
    cfg: SimConfig,
    results: Mapping[str, SimResult],
    workload: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    summaries = {name: r.summary() for name, r in results.items()}
    if workload is None:
        workload = {"trace": str(cfg.trace)} if cfg.trace else {"poisson": cfg.poisson}
    return {
        "name": cfg.name,
        "cluster": cfg.cluster.to_dict() | {"gpus": cfg.cluster.gpus},
        "workload": dict(workload),
        "seed": cfg.seed,
        "candidates": cfg.candidates,
        # how the library's profiles met the server links (cassini.nic_scale)
        "profiles": cfg.options.profiles,
        # which network model ran and with what, defaults filled in; settings the config
        # gave that no scheduler of the run uses (ignored)
        "settings": cfg.settings(),
        "warnings": unused_settings(cfg),
        **({"packet": packet_settings(cfg)} if cfg.options.network == "packet" else {}),
        "summaries": summaries,
        "ratios": ratios(summaries),
        "excess_demand_s_per_link": {
            name: {link: s for link, s in sorted(r.excess_s.items()) if s > 0}
            for name, r in results.items()
        },
        "jobs": {
            name: [
                {k: getattr(j, k) for k in j.__dataclass_fields__} | {"jct_s": j.jct_s}
                for j in r.jobs
            ]
            for name, r in results.items()
        },
    }


def table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    width = max([18, *map(len, summaries)])  # composed names grow long
    head = (
        f"{'scheduler':<{width}} {'mean it':>8} {'p99 it':>8} {'mean x':>7} {'p99 x':>7} "
        f"{'mean JCT':>9} {'makespan':>9} {'excess':>8} {'wall':>6}"
    )
    units = (  # each unit right-aligned under its column, as the values are
        f"{'':<{width}} {'(ms)':>8} {'(ms)':>8} {'(over dedicated)':>15} "
        f"{'(s)':>9} {'(s)':>9} {'(s)':>8} {'(s)':>6}"
    )
    lines = [head, units]
    for name, s in summaries.items():
        lines.append(
            f"{name:<{width}} {s['mean_iteration_s'] * 1e3:>8.1f} "
            f"{s['p99_iteration_s'] * 1e3:>8.1f} "
            f"{s['mean_slowdown']:>7.3f} {s['p99_slowdown']:>7.3f} {s['mean_jct_s']:>9.1f} "
            f"{s['makespan_s']:>9.1f} {s['excess_demand_s_total']:>8.1f} {s['wall_s']:>6.1f}"
        )
    for pair, r in ratios(summaries).items():
        lines.append(
            f"{pair}: mean iteration {r['mean_iteration_s']:.3f}x, p99 {r['p99_iteration_s']:.3f}x"
            f", mean JCT {r['mean_jct_s']:.3f}x (baseline / CASSINI; > 1 = CASSINI faster)"
        )
    return "\n".join(lines)


def plot_cdfs(results: Mapping[str, SimResult], out_dir: Path, title: str = "") -> list[Path]:
    """Iteration-time (over dedicated) and JCT CDFs, one line per scheduler."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in results.items():
        order = np.argsort(r.normalised_samples, kind="stable")
        if len(order):
            cum = np.cumsum(r.iteration_weights[order])
            ax1.plot(r.normalised_samples[order], cum / cum[-1], label=name)
        jct = np.sort([j.jct_s for j in r.jobs])
        ax2.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=name)
    ax1.set_xlabel("iteration time / dedicated iteration time")
    ax1.set_ylabel("CDF over iterations")
    ax2.set_xlabel("job completion time (s)")
    ax2.set_xscale("log")
    ax2.set_ylabel("CDF over jobs")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path = out_dir / "cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def write_run(
    cfg: SimConfig,
    results: Mapping[str, SimResult],
    out_dir: Path,
    *,
    run: Run | None = None,
    timeline_link: str | None = None,
) -> dict[str, Any]:
    """Write ``results.json`` and ``cdf.png`` under ``out_dir`` — and, given ``run``, the
    report's pictures and ``report.html`` — and return the JSON.  Every file is written
    aside and moved in once all are (:func:`cassini.outputs.staged`): an interrupted
    write leaves ``out_dir`` as it was.  ``results.json`` is strict JSON (a ratio of
    nothing, a job without an intensity: ``null``)."""
    with outputs.staged(out_dir) as stage:
        data = results_json(cfg, results, run.workload.summary if run else None)
        if run is not None:
            data["report"] = write_report(cfg, run, data, stage, timeline_link)
        (stage / "results.json").write_text(outputs.json_text(data))
        plot_cdfs(results, stage, title=cfg.name)
        if run is not None:
            _html(cfg, data, stage)
    return data


#: Rows of each scheme's busiest-links table in the report.
BUSIEST_LINKS = 10


def most_congested_link(cfg: SimConfig, run: Run) -> str | None:
    """The link with the most excess demand summed over the schemes; without any, the
    busiest link (highest mean utilisation) of the first scheme that used one."""
    excess: dict[str, float] = {}
    for r in run.results.values():
        for link, s in r.excess_s.items():
            excess[link] = excess.get(link, 0.0) + s
    if any(v > 0 for v in excess.values()):
        return max(sorted(excess), key=lambda link: excess[link])
    return None


def write_report(
    cfg: SimConfig, run: Run, data: Mapping[str, Any], out_dir: Path, timeline_link: str | None
) -> dict[str, Any]:
    """The pictures; returns what ``report.html`` will show besides results.json."""
    from cassini.sim.recorded import mapping_rule
    from cassini.sim.report import pictures
    from cassini.sim.report.recording import link_timeline
    from cassini.sim.report.utilisation import utilisation

    if timeline_link is not None and timeline_link not in cfg.cluster.links:
        fabric = [lk for lk in cfg.cluster.links if not lk.startswith("srv")][:2]
        raise InputError(
            "--timeline-link",
            f"no link {timeline_link!r} (srv<i> is server i's link; switch links are "
            f"named like {', '.join(fabric) or 'tor<r>'})",
        )
    end = max((j.finish_s for r in run.results.values() for j in r.jobs), default=1.0)
    util = {
        name: utilisation(r, cfg.cluster, run.library, end_s=end) for name, r in run.results.items()
    }
    link = timeline_link or most_congested_link(cfg, run)
    how = "given with --timeline-link" if timeline_link else "the most congested"
    if link is None:  # nothing congested: the busiest link
        link = next((u.links[0] for u in util.values() if u.links), None)
        how = "the busiest (no link was ever congested)"
    files = [
        (pictures.heatmap(util, out_dir / "link_heatmap.png", cfg.name),
         "Per-link utilisation over time, the busiest links on top (ideal: the demand a "
         "dedicated network would carry; colours stop at 1)"),
        (pictures.slowdown_cdf(run.results, out_dir / "slowdown_cdf.png"),
         "Per-job slowdown (mean iteration time over dedicated), CDF per scheme"),
        (pictures.gpu_utilisation(util, out_dir / "gpu_utilisation.png"),
         "GPU utilisation over time: computing (solid) and allocated (dashed)"),
    ]  # fmt: skip
    if link is not None:
        lines: dict[str, Any] = {}
        for name, rec in run.recorders.items():
            scheduler = Scheduler.parse(name)
            tolerance = scheduler.timing.tolerance
            tl = link_timeline(rec.windows, link, cfg.cluster.links, tolerance=tolerance)
            if scheduler.dedicated_network:
                tl = f"{name} runs every job on a dedicated network: no network model to draw"
            elif tl is None:
                tl = (
                    f"no network window crossed {link} under {name}: its jobs' summed peak "
                    "demand never exceeded its capacity, so it never slowed anyone"
                )
            lines[name] = tl
        path = pictures.timeline(lines, link, out_dir / "link_timeline.png")
        files.insert(1, (path, f"Who sends when on link {link} ({how}), in the network "
                               "window where it was most congested"))  # fmt: skip
    files.append((out_dir / "cdf.png", "Iteration time over dedicated, and JCT: CDFs"))
    busiest = {
        name: [
            {
                "link": lk,
                "capacity_gbps": cfg.cluster.links[lk] / 1e9,
                "mean_utilisation": mean,
                "peak_utilisation": peak,
                "excess_s": run.results[name].excess_s.get(lk, 0.0),
            }
            for lk, mean, peak in u.busiest(BUSIEST_LINKS)
        ]
        for name, u in util.items()
    }
    notes = []
    if any(name.startswith("recorded") for name in run.results):
        notes.append(mapping_rule(cfg.cluster))
    return {
        "timeline_link": link,
        "timeline_link_chosen": how,
        "pictures": [[p.name, caption] for p, caption in files],
        "busiest_links": busiest,
        "notes": notes,
    }


def _html(cfg: SimConfig, data: Mapping[str, Any], out_dir: Path) -> Path:
    from cassini.sim.report import html_report

    rep = data["report"]
    pictures = [(out_dir / name, caption) for name, caption in rep["pictures"]]
    notes = [f"timeline link: {rep['timeline_link']} ({rep['timeline_link_chosen']})"]
    return html_report.write(
        out_dir / "report.html", data, pictures, rep["busiest_links"], notes + rep["notes"]
    )


class ProgressBar:
    """A one-line progress bar on stderr: jobs done of total, the simulated time reached
    (when ``clock`` gives it, seconds) and an ETA from the pace so far.  Silent for the
    first ``after_s`` seconds of wall time (short runs print nothing); redrawn at most
    every ``every_s`` seconds; a final line at the end."""

    def __init__(
        self,
        name: str,
        clock: Callable[[], float] | None = None,
        *,
        after_s: float = 2.0,
        every_s: float = 0.5,
        width: int = 24,
    ) -> None:
        self.name, self.clock = name, clock
        self.after_s, self.every_s, self.width = after_s, every_s, width
        self.start = time.perf_counter()
        self.shown = -math.inf
        self.drawn = False

    def line(self, done: int, total: int, now_s: float | None = None) -> str:
        """The bar's text for ``done`` of ``total`` jobs at simulated time ``now_s``
        (default: ``clock()``, when given)."""
        elapsed = time.perf_counter() - self.start
        frac = done / total if total else 1.0
        filled = int(round(frac * self.width))
        eta = elapsed * (1 - frac) / frac if frac > 0 else math.inf
        eta_text = f"{eta:5.0f} s" if math.isfinite(eta) else "    ? s"
        if now_s is None and self.clock is not None:
            now_s = self.clock()
        sim = f" sim {now_s:9.0f} s" if now_s is not None else ""
        return (
            f"  {self.name:<16} [{'#' * filled}{'.' * (self.width - filled)}] "
            f"{done}/{total} jobs{sim}  {elapsed:5.0f} s, ETA {eta_text}"
        )

    def __call__(self, done: int, total: int, now_s: float | None = None) -> None:
        now = time.perf_counter()
        final = done >= total
        if now - self.start < self.after_s and not (final and self.drawn):
            return
        if not final and now - self.shown < self.every_s:
            return
        self.shown, self.drawn = now, True
        end = "\n" if final else ""
        print(f"\r{self.line(done, total, now_s)}", end=end, file=sys.stderr, flush=True)


_bars: dict[str, ProgressBar] = {}


def stderr_progress(name: str, done: int, total: int, now_s: float | None = None) -> None:
    """Progress of the scheduler ``name`` (jobs done of total, simulated seconds
    reached) as a :class:`ProgressBar` on stderr."""
    bar = _bars.get(name)
    if bar is None or done == 0:
        bar = _bars[name] = ProgressBar(name)
    bar(done, total, now_s)
    if done >= total:
        _bars.pop(name, None)
