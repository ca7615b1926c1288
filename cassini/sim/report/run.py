"""Run a configuration and report: JSON for machines, a table, plots and ``report.html``
for people."""

from __future__ import annotations

import inspect
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cassini import files, outputs
from cassini.sim.config import SimConfig, check_recorded_hosts, run_warnings
from cassini.sim.engine import SimResult, run
from cassini.sim.report.html_report import EXCESS_LABEL, EXCESS_UNIT
from cassini.sim.report.page import Run, write_page, write_report
from cassini.sim.report.recording import NetworkRecorder
from cassini.sim.schedulers import Scheduler
from cassini.sim.topologies.servers import server_table
from cassini.sim.workload import JobSpec, poisson_jobs

RATIO_METRICS = (
    "mean_iteration_s",
    "p99_iteration_s",
    "mean_slowdown",
    "p99_slowdown",
    "mean_jct_s",
    "excess_demand_s_total",
)


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
    check_recorded_hosts(cfg, workload.jobs)
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


def ratios(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{"themis/themis+cassini": {metric: baseline / cassini}}`` for every pair present
    (> 1: CASSINI better).  A metric CASSINI brought to 0 while the baseline's is above 0
    (excess demand: CASSINI removed all of it) has no finite ratio: inf (``null`` in
    JSON), and the pair's ``cassini_zero`` maps it to the baseline's value (the report
    shows "0 of X").  Both 0: NaN (``null``), nothing to compare."""
    out: dict[str, dict[str, Any]] = {}
    for name, s in summaries.items():
        partner = f"{name}+cassini"
        if "+" in name or partner not in summaries:
            continue
        c = summaries[partner]
        pair: dict[str, Any] = {
            m: s[m] / c[m] if c[m] else (math.inf if s[m] > 0 else math.nan) for m in RATIO_METRICS
        }
        zero = {m: float(s[m]) for m in RATIO_METRICS if not c[m] and s[m] > 0}
        out[f"{name}/{partner}"] = pair | ({"cassini_zero": zero} if zero else {})
    return out


def routing_by_scheme(cfg: SimConfig, names: Sequence[str]) -> dict[str, str | None]:
    """The routing each scheme ran with: its own routing part, else the config's
    ``routing`` (None: a dedicated network, nothing routed)."""
    out: dict[str, str | None] = {}
    for name in names:
        scheduler = Scheduler.parse(name)
        own = scheduler.routing or cfg.options.routing
        out[name] = None if scheduler.dedicated_network else own
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


def config_name(path: Path | str | None) -> str | None:
    """How results.json and sweep.json name the config file: its absolute path (``-``,
    standard input, as it is; None when not given)."""
    if path is None or str(path) == files.STDIN:
        return None if path is None else files.STDIN
    return os.path.abspath(path)


def workload_settings(
    cfg: SimConfig, workload: Mapping[str, Any] | None = None, *, as_configured: bool = False
) -> dict[str, Any]:
    """The workload as results.json records it: ``workload`` (the summary of the one
    read), else the config's (its trace, or a drawn workload's parameters); a trace's
    paths absolute, a drawn workload's ``iterations`` range filled in.  With
    ``as_configured``, a trace's ``format`` and ``bad_rows`` rule as the config gives
    them (sweep.json: the config's form, not one read's summary)."""
    if workload is None:
        workload = {"trace": str(cfg.trace)} if cfg.trace else {"poisson": cfg.poisson}
        if cfg.trace and as_configured:
            workload |= {"format": cfg.trace_format, "bad_rows": cfg.bad_rows}
    paths = {k: os.path.abspath(workload[k]) for k in ("trace", "path")
             if isinstance(workload.get(k), str) and workload[k] != files.STDIN}  # fmt: skip
    workload = {**workload, **paths}
    drawn = workload.get("poisson")
    if isinstance(drawn, Mapping) and "iterations" not in drawn:  # the range it drew from
        default = inspect.signature(poisson_jobs).parameters["iterations"].default
        workload = {**workload, "poisson": {**drawn, "iterations": list(default)}}
    return dict(workload)


def results_json(
    cfg: SimConfig,
    results: Mapping[str, SimResult],
    workload: Mapping[str, Any] | None = None,
    config_path: Path | str | None = None,
    jobs: Sequence[JobSpec] | None = None,
) -> dict[str, Any]:
    """What ``results.json`` holds (every field: docs/sim_traces.md, "results.json");
    ``config_path``: the file the config was read from, made absolute (``config``: null
    when not given, ``-`` for standard input); ``jobs``: the run's, when read (the
    warnings need not read the workload again)."""
    summaries = {name: r.summary() for name, r in results.items()}
    return {
        "name": cfg.name,
        "config": config_name(config_path),
        "cluster": cfg.cluster.to_dict() | {"gpus": cfg.cluster.gpus},
        # server index (placements, srv<i> links) -> host name, rack, GPUs, links
        "servers": server_table(cfg.cluster),
        "workload": workload_settings(cfg, workload),
        "seed": cfg.seed,
        "candidates": cfg.candidates,
        # how the library's profiles met the server links (cassini.nic_scale)
        "profiles": cfg.options.profiles,
        # which network model ran and with what, defaults filled in; settings the config
        # gave that no scheduler of the run uses (ignored)
        "settings": cfg.settings(),
        # each scheme's routing: its own part, else the config's (None: dedicated network)
        "routing_by_scheme": routing_by_scheme(cfg, list(results)),
        "warnings": run_warnings(cfg, jobs),
        **({"packet": packet_settings(cfg)} if cfg.options.network == "packet" else {}),
        "summaries": summaries,
        "ratios": ratios(summaries),
        "excess_demand_s_per_link": {  # per physical link; null: not measured (packet)
            name: {link: s for link, s in sorted(r.excess_by_link().items()) if s > 0}
            if r.excess_measured
            else None
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


#: Where the bad rows are listed when the command's output keeps none of them.
CONVERT_LISTS = "cassini sim trace convert lists each"


def skipped_rows_line(
    summary: Mapping[str, Any], listed: str = "all in results.json"
) -> str | None:
    """One line for stderr on a trace's bad rows that ``bad_rows: skip`` left out: how
    many, the first two with their position and reason, then ``listed``: where the
    others are (results.json for ``run``)."""
    n = summary.get("bad_rows", 0)
    if not n:
        return None
    shown = "; ".join(summary.get("bad_row_examples", [])[:2])
    more = f"; and {n - 2} more" if n > 2 else ""
    rule = sum(summary.get("skipped", {}).values())
    by_rule = f" ({rule} more skipped by rule)" if rule else ""
    return (
        f"workload: skipped {n} bad row{'s' if n != 1 else ''} of "
        f"{summary.get('trace', summary.get('path'))} (bad_rows: skip){by_rule}: "
        f"{shown}{more}; {listed}"
    )


def _excess_cell(link_s: float) -> str:
    """The table's excess demand (link-seconds), or "-" where it is not measured (NaN:
    the packet level)."""
    return "-" if math.isnan(link_s) else f"{link_s:.1f}"


def _digits(value: float) -> str:
    """Three significant digits below 100 (0.00287, 12.3), whole numbers above."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    width = max([18, *map(len, summaries)])  # composed names grow long
    excess = len(EXCESS_LABEL)
    head = (
        f"{'scheduler':<{width}} {'mean it':>8} {'p99 it':>8} {'mean x':>7} {'p99 x':>7} "
        f"{'mean JCT':>9} {'makespan':>9} {EXCESS_LABEL:>{excess}} {'wall':>8}"
    )
    units = (  # each unit right-aligned under its column, as the values are
        f"{'':<{width}} {'(ms)':>8} {'(ms)':>8} {'(over dedicated)':>15} "
        f"{'(s)':>9} {'(s)':>9} {f'({EXCESS_UNIT})':>{excess}} {'(s)':>8}"
    )
    lines = [head, units]
    for name, s in summaries.items():
        lines.append(
            f"{name:<{width}} {s['mean_iteration_s'] * 1e3:>8.1f} "
            f"{s['p99_iteration_s'] * 1e3:>8.1f} "
            f"{s['mean_slowdown']:>7.3f} {s['p99_slowdown']:>7.3f} {s['mean_jct_s']:>9.1f} "
            f"{s['makespan_s']:>9.1f} {_excess_cell(s['excess_demand_s_total']):>{excess}} "
            f"{_digits(s['wall_s']):>8}"
        )
    for pair, r in ratios(summaries).items():
        lines.append(
            f"{pair}: mean iteration {r['mean_iteration_s']:.3f}x, p99 {r['p99_iteration_s']:.3f}x"
            f", mean JCT {r['mean_jct_s']:.3f}x (baseline / CASSINI; > 1 = CASSINI faster)"
        )
    return "\n".join(lines)


def write_run(
    cfg: SimConfig,
    results: Mapping[str, SimResult],
    out_dir: Path,
    *,
    run: Run | None = None,
    timeline_link: str | None = None,
    config_path: Path | str | None = None,
) -> dict[str, Any]:
    """Write ``results.json`` and ``cdf.png`` under ``out_dir`` — and, given ``run``, the
    report's pictures and ``report.html`` — and return the JSON.  Every file is written
    aside and moved in once all are (:func:`cassini.outputs.staged`): an interrupted
    write leaves ``out_dir`` as it was.  ``results.json`` is strict JSON (a ratio of
    nothing, a job without an intensity: ``null``); ``config_path``: the config's file,
    named in both."""
    from cassini.sim.report.pictures import plot_cdfs

    with outputs.staged(out_dir) as stage:
        workload, jobs = (run.workload.summary, run.workload.jobs) if run else (None, None)
        data = results_json(cfg, results, workload, config_path, jobs)
        if run is not None:
            data["report"] = write_report(cfg, run, data, stage, timeline_link)
        (stage / "results.json").write_text(outputs.json_text(data))
        plot_cdfs(results, stage, title=cfg.name)
        if run is not None:
            write_page(data, stage)
    return data


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
