"""Fluid vs packet level (issue 33, section 2): the same jobs, the same placements and the
same profiles in the fluid simulator (``cassini.sim``) and in ns-3 (``cassini.packet``).

Each scenario is a cluster and 8-30 jobs that all arrive at time 0 and fit at once (the
packet runner places every job at once and schedules nothing).  Per scheme:

1. the fluid simulator runs the scheme (placement, routing, sharing, CASSINI shifts);
2. the packet runner replays that run's placements (its servers per job), its routing and
   its shifts, under the scheme's mechanism in ns-3:

   ==============  =====================================  ==========================
   scheme          packet mechanism (``--sharing``)       routing
   ==============  =====================================  ==========================
   themis          ``maxmin`` (FqCoDel per-flow queues)   the scenario's
   themis+cassini  ``maxmin``, every job held to its      the scenario's
                   fluid shift and period (held slots)
   themis+mltcp    ``mltcp`` (DCTCP + MLTCP in ns-3)      the scenario's
   themis+crux     ``priority`` (the fluid run's Crux     crux
                   levels as DSCP bands)
   themis+defrag   ``maxmin`` (no migration happens:      the scenario's
                   all jobs start at 0, none is queued)
   ==============  =====================================  ==========================

   ``ideal`` (dedicated network) runs every job alone on the fabric at packet level, one
   ns-3 run per job, ``maxmin``.

Profiles, both sides the same: the library's, under ``--profiles`` (default
``scale-to-nic``, the simulator's default; ``as-measured`` the alternative), through the
one rule both models use (:func:`cassini.sim.engine.job_profile`: the fluid engine
applies it to each job on its servers, the packet side applies it to the same job on the
same servers).  At packet level every ring hop is paced to its phase's rate, as the
fluid model caps the phase's flows at it.  (Before 2026-11-28 this experiment built its
own line-rate rule, ``nic_scaled``: every phase at the full server link rate, which the
packet level then sent at line rate regardless.)

Per scheme and job: ratio = fluid / packet mean iteration time.  Per scheme: mean
slowdown (mean iteration over the scaled profile's period) in each model and their
ratio; the schemes ranked by mean slowdown in each model.  Targets: every scheme's mean
slowdown within 10 %, 90 % of jobs within 20 %, the same ranking.

    .venv/bin/python -m experiments.sim_vs_packet                  # quick: 2 scenarios
    .venv/bin/python -m experiments.sim_vs_packet --full           # all scenarios
    .venv/bin/python -m experiments.sim_vs_packet --scenarios fat-tree-k4 --iterations 20

Writes ``results.json`` (after every scheme) and ``scatter_<scenario>.png`` (per job,
fluid vs packet) under ``--out`` (default ``results/sim_vs_packet``).  A run into an
existing ``--out`` replaces its results: ``results.json`` then lists this run's scenarios
only, and the ``scatter_*.png`` of an earlier run are removed when this run first writes
its ``results.json``.  Needs the ``[packet]`` extra (ns-3), not root.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cassini.nic_scale import DEFAULT_PROFILE_RULE, PROFILE_RULES
from cassini.profile import JobProfile
from cassini.sim.topologies import Topology
from cassini.sim.topologies.fat_tree import fat_tree
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec
from experiments.columns import Column
from experiments.common import progress
from experiments.harness import Experiment, Run, UsageError, full, iterations, option, positive

SCHEME_TOL = 0.10  # |fluid / packet - 1| of a scheme's mean slowdown
JOB_TOL = 0.20  # |fluid / packet - 1| of a job's mean iteration time ...
JOB_SHARE = 0.90  # ... for at least this share of jobs
#: a ranking difference smaller than this (relative) in either model is a tie
TIE = 0.01

#: scheme -> (packet sharing, routing override or None for the scenario's, held)
PACKET_SCHEMES: dict[str, tuple[str, str | None, bool]] = {
    "ideal": ("maxmin", None, False),  # each job alone: one ns-3 run per job
    "themis": ("maxmin", None, False),
    "themis+cassini": ("maxmin", None, True),
    "themis+mltcp": ("mltcp", None, False),
    "themis+crux": ("priority", "crux", False),
    "themis+defrag": ("maxmin", None, False),
}
SCHEMES = tuple(PACKET_SCHEMES)
MODELS = ("vgg16", "vgg11", "resnet50", "bert", "gpt2", "wideresnet101")


# -- pure parts -----------------------------------------------------------------------------
def ratio(fluid: float, packet: float) -> float:
    """fluid / packet (nan where packet is not positive)."""
    return fluid / packet if packet > 0 else math.nan


def ranking(values: Mapping[str, float]) -> list[str]:
    """Scheme names, lowest value (best) first; ties broken by name."""
    return sorted(values, key=lambda k: (values[k], k))


def discordant_pairs(
    fluid: Mapping[str, float], packet: Mapping[str, float], tie: float = TIE
) -> list[tuple[str, str]]:
    """Scheme pairs the two models order differently, each model separating them by more
    than ``tie`` (relative); a pair either model calls a tie is not counted."""
    names = sorted(set(fluid) & set(packet))
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            df = _signed(fluid[a], fluid[b], tie)
            dp = _signed(packet[a], packet[b], tie)
            if df and dp and df != dp:
                out.append((a, b))
    return out


def _signed(a: float, b: float, tie: float) -> int:
    """-1 if a is below b by more than ``tie`` (relative to the larger), 1 if above, 0."""
    if abs(a - b) <= tie * max(abs(a), abs(b)):
        return 0
    return -1 if a < b else 1


def verdict(scheme_ratios: Mapping[str, float], job_ratios: Sequence[float], discordant: int
            ) -> dict[str, Any]:
    """The three targets of issue 33 section 2 for one scenario."""
    worst = max((abs(r - 1) for r in scheme_ratios.values()), default=math.nan)
    within = [abs(r - 1) <= JOB_TOL for r in job_ratios if not math.isnan(r)]
    share = sum(within) / len(within) if within else math.nan
    return {
        "worst_scheme_error": worst,
        "schemes_within_10pc": bool(worst <= SCHEME_TOL),
        "jobs_within_20pc_share": share,
        "jobs_target_met": bool(share >= JOB_SHARE),
        "discordant_pairs": discordant,
        "same_ranking": discordant == 0,
    }


# -- scenarios ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    """A cluster, its routing, and ``jobs`` jobs drawn with GPU counts ``gpus``."""

    name: str
    cluster: Callable[[], Cluster | Topology]
    routing: str
    jobs: int
    gpus: tuple[int, ...]
    quick: bool = False
    note: str = ""


SCENARIOS = (
    Scenario(
        "two-tier-32",
        lambda: Cluster(16, 2, 4, 50e9, 2.0, spines=4),
        "ecmp",
        10,
        (8, 16, 32),
        note="16 racks x 2 servers x 4 GPUs, 2:1, 4 spines, ECMP",
    ),
    Scenario(
        "two-tier-32-shared",
        lambda: Cluster(8, 4, 4, 50e9, 2.0, spines=4),
        "ecmp",
        12,
        (6, 10),
        quick=True,
        note="8 racks x 4 servers x 4 GPUs, 2:1, 4 spines, ECMP; jobs split servers",
    ),
    Scenario("fat-tree-k4", lambda: fat_tree(4, gpus_per_server=2), "ecmp", 8, (4, 8),
             quick=True, note="16 hosts x 2 GPUs, ECMP"),
    Scenario("two-tier-64-4to1", lambda: Cluster(16, 4, 4, 50e9, 4.0, spines=2), "ecmp", 16,
             (8, 16, 32), note="16 racks x 4 servers x 4 GPUs, 4:1, 2 spines, ECMP"),
    Scenario("three-tier", lambda: Cluster(8, 4, 4, 50e9, 2.0, racks_per_pod=4), "single", 12,
             (8, 16, 32), note="8 racks x 4 servers x 4 GPUs, 2 pods, 2:1 (even racks)"),
    Scenario("three-tier-uneven", lambda: _host_table("uneven_three_tier.csv"), "single", 12,
             (8, 12, 20), note="host table: 2 pods, racks of 6/2/4/3 and 5/2/3/7 servers x 4 "
             "GPUs, 2:1 at ToRs and pods"),
    Scenario("priority-heavy", lambda: Cluster(8, 4, 2, 50e9, 4.0, spines=2), "ecmp", 16,
             (4, 8), note="16 small jobs on 32 hosts x 2 GPUs, 4:1, 2 spines"),
    Scenario("two-tier-128", lambda: Cluster(16, 8, 4, 50e9, 2.0, spines=4), "ecmp", 20,
             (16, 32, 64), note="16 racks x 8 servers x 4 GPUs, 2:1, 4 spines, ECMP"),
)


def _host_table(name: str) -> Topology:
    """A host table of ``experiments/configs`` as a fabric."""
    from cassini.sim.topologies.hosts import read_host_table

    return read_host_table(Path(__file__).resolve().parent / "configs" / name)


def job_specs(scenario: Scenario, iterations: int, total_gpus: int, seed: int) -> list[JobSpec]:
    """The scenario's jobs, all arriving at 0, models and GPU counts drawn with ``seed``;
    their GPUs together at most ``total_gpus`` (counts halved until they fit)."""
    rng = np.random.default_rng(seed)
    gpus = [int(rng.choice(scenario.gpus)) for _ in range(scenario.jobs)]
    while sum(gpus) > total_gpus:
        i = int(np.argmax(gpus))
        if gpus[i] <= min(scenario.gpus):
            raise ValueError(f"{scenario.name}: {scenario.jobs} jobs do not fit")
        gpus[i] = max(min(scenario.gpus), gpus[i] // 2)
    models = [str(rng.choice(MODELS)) for _ in range(scenario.jobs)]
    return [
        JobSpec(f"j{i:02d}", 0.0, g, iterations, m)
        for i, (g, m) in enumerate(zip(gpus, models, strict=True))
    ]


def server_link_bps(cluster: Cluster | Topology) -> float:
    """The one server link rate of the cluster (bits/s); ValueError when they differ."""
    from cassini.packet.plan import as_topology

    topo = as_topology(cluster)
    rates = {topo.link_bps[links[0]] for links in topo.host_links}
    if len(rates) != 1:
        raise ValueError(f"server links differ: {sorted(rates)}")
    return rates.pop()


# -- runs -----------------------------------------------------------------------------------
def packet_jobs(
    specs: list,
    records: dict[str, Any],
    library: Mapping[str, JobProfile],
    cluster: Cluster | Topology,
    rule: str,
    held: bool,
) -> list:
    """The packet backend's jobs: each on the servers the fluid run placed it on, with
    the library profile under ``rule`` on those servers (the engine's own
    :func:`cassini.sim.engine.job_profile`), held to CASSINI's grid (``held``; a
    one-server job has no network to hold for)."""
    from cassini.packet.jobs import PacketJob
    from cassini.sim.engine import job_profile

    out = []
    for s in specs:
        record = records[s.job_id]
        servers = tuple(sorted(srv for srv, _ in record.placement))
        profile = job_profile(library[s.model], cluster, servers, rule, s.job_id)
        shift = record.shift_s if held and len(record.placement) > 1 else None
        out.append(PacketJob(s.job_id, servers, profile, s.iterations, 0.0, shift))
    return out


def run_scenario(
    run: Run, scenario: Scenario, report: dict[str, Any], save: Callable[[], Any]
) -> dict[str, Any]:
    """Fluid then packet for every scheme of ``scenario``; rows into ``report``, saved
    by ``save`` after every scheme (default ``run.save(report)``)."""
    from cassini.packet.jobs import simulate
    from cassini.sim.engine import run as fluid_run
    from cassini.sim.options import SimOptions
    from cassini.sim.workload import load_library

    args = run.args
    cluster = scenario.cluster()
    link = server_link_bps(cluster)
    specs = job_specs(scenario, args.iterations, cluster.gpus, args.seed)
    library = load_library()
    out: dict[str, Any] = {
        "note": scenario.note,
        "routing": scenario.routing,
        "server_link_bps": link,
        "scale": args.scale,
        "profiles": args.profiles,
        "jobs": [s.to_dict() for s in specs],
        "schemes": {},
    }
    report["scenarios"][scenario.name] = out
    options = SimOptions(routing=scenario.routing, profiles=args.profiles)
    schemes = [s for s in args.schemes.split(",") if s]
    for scheme in schemes:
        t0 = time.process_time()
        res = fluid_run(cluster, specs, library, scheme, seed=args.seed, options=options)
        fluid_cpu = time.process_time() - t0
        records = {j.job_id: j for j in res.jobs}
        queued = sorted(j for j, r in records.items() if r.start_s > 1e-9)
        entry: dict[str, Any] = {"fluid_cpu_s": round(fluid_cpu, 3), "queued": queued,
                                 "jobs": {}}
        out["schemes"][scheme] = entry
        sharing, routing, held = PACKET_SCHEMES[scheme]
        migrated = sorted(j for j, r in records.items() if r.migrations)
        entry["migrated"] = migrated
        pjobs = packet_jobs(specs, records, library, cluster, args.profiles, held)
        progress(f"{scenario.name} {scheme}: packet ({sharing})")
        t0 = time.process_time()
        kw: dict[str, Any] = {"sharing": sharing, "routing": routing or scenario.routing,
                              "seed": args.seed, "scale": args.scale}
        if sharing == "priority":  # the fluid run's own Crux levels (max-k-cut included)
            kw["levels"] = {j: r.priority_level for j, r in records.items()}
        if scheme == "ideal":  # a dedicated network: every job alone on the fabric
            results = [simulate(cluster, [pj], **kw)[1][0] for pj in pjobs]
        else:
            _, results = simulate(cluster, pjobs, **kw)
        entry["packet_cpu_s"] = round(time.process_time() - t0, 3)
        entry["packet_sharing"] = sharing
        for pr in results:
            r = records[pr.job_id]
            entry["jobs"][pr.job_id] = {
                "servers": list(pr.servers),
                "fluid_s": r.mean_iteration_s,
                "packet_s": pr.mean_iteration_s,
                "dedicated_s": r.dedicated_iteration_s,
                "ratio": ratio(r.mean_iteration_s, pr.mean_iteration_s),
                "finished": pr.finished,
            }
        save()
    summarise(out)
    save()
    return out


def summarise(out: dict[str, Any]) -> None:
    """Per scheme mean slowdowns and their ratio, rankings and the verdict, into ``out``."""
    fluid_sd: dict[str, float] = {}
    packet_sd: dict[str, float] = {}
    job_ratios: list[float] = []
    for scheme, entry in out["schemes"].items():
        jobs = entry["jobs"].values()
        fluid_sd[scheme] = statistics.fmean(j["fluid_s"] / j["dedicated_s"] for j in jobs)
        if "packet_cpu_s" in entry:
            packet_sd[scheme] = statistics.fmean(j["packet_s"] / j["dedicated_s"] for j in jobs)
            entry["packet_mean_slowdown"] = packet_sd[scheme]
            entry["slowdown_ratio"] = ratio(fluid_sd[scheme], packet_sd[scheme])
            job_ratios += [j["ratio"] for j in jobs]
        entry["fluid_mean_slowdown"] = fluid_sd[scheme]
    compared = {k: fluid_sd[k] for k in packet_sd}
    pairs = discordant_pairs(compared, packet_sd)
    out["ranking_fluid"] = ranking(compared)
    out["ranking_packet"] = ranking(packet_sd)
    out["discordant"] = [list(p) for p in pairs]
    out["same_order_exact"] = out["ranking_fluid"] == out["ranking_packet"]
    out["verdict"] = verdict(
        {k: ratio(compared[k], packet_sd[k]) for k in packet_sd}, job_ratios, len(pairs)
    )


def plot(out: dict[str, Any], path: Path, title: str) -> None:
    """Per job, fluid vs packet mean iteration time (ms), one colour per scheme."""
    from experiments.plots import figure

    with figure(path, figsize=(5.5, 5)) as (_, ax):
        lo, hi = math.inf, 0.0
        for scheme, entry in out["schemes"].items():
            pts = [(j["packet_s"] * 1e3, j["fluid_s"] * 1e3) for j in entry["jobs"].values()
                   if "packet_s" in j]
            if not pts:
                continue
            x, y = zip(*pts, strict=True)
            ax.scatter(x, y, s=14, label=scheme, alpha=0.8)
            lo, hi = min(lo, *x, *y), max(hi, *x, *y)
        if hi > 0:
            ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
            ax.plot([lo, hi], [lo * 1.2, hi * 1.2], "k:", lw=0.6)
            ax.plot([lo, hi], [lo / 1.2, hi / 1.2], "k:", lw=0.6)
        ax.set_xlabel("packet level (ns-3), mean iteration ms")
        ax.set_ylabel("fluid model, mean iteration ms")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)


ROWS = (
    Column("scheme", "scheme"),
    Column("fluid", "fluid slowdown", ".3f"),
    Column("packet", "packet slowdown", ".3f"),
    Column("ratio", "fluid/packet", ".3f"),
    Column("jobs20", "jobs within 20 %", ".2f"),
    Column("cpu", "packet CPU s", ".1f"),
)


def run_experiment(run: Run) -> int:
    args = run.args
    chosen = [s for s in SCENARIOS if s.quick or args.full]
    if args.scenarios:
        wanted = args.scenarios.split(",")
        chosen = [s for s in SCENARIOS if s.name in wanted]
    report: dict[str, Any] = {
        "rule": f"profiles {args.profiles} (cassini.sim.engine.job_profile) in both models; "
        "packet-level ring hops paced to each phase's rate",
        "profiles": args.profiles,
        "placement": "the fluid run's placement, replayed at packet level",
        "scale": args.scale,
        "iterations": args.iterations,
        "seed": args.seed,
        "scenarios": {},
    }
    save = saver(run, report)
    for scenario in chosen:
        progress(f"{scenario.name}: {scenario.note}")
        out = run_scenario(run, scenario, report, save)
        plot(out, run.out / f"scatter_{scenario.name}.png", f"{scenario.name}: {scenario.note}")
        rows = []
        for scheme, e in out["schemes"].items():
            jr = [j["ratio"] for j in e["jobs"].values() if "ratio" in j]
            rows.append({
                "scheme": scheme,
                "fluid": e["fluid_mean_slowdown"],
                "packet": e.get("packet_mean_slowdown", math.nan),
                "ratio": e.get("slowdown_ratio", math.nan),
                "jobs20": (sum(abs(r - 1) <= JOB_TOL for r in jr) / len(jr)) if jr else math.nan,
                "cpu": e.get("packet_cpu_s", math.nan),
            })
        run.show(rows, ROWS, title=f"{scenario.name} ({scenario.note})")
        print(verdict_text(out))
    return 0


def saver(run: Run, report: dict[str, Any]) -> Callable[[], None]:
    """``run.save(report)``; the first time, the ``scatter_*.png`` an earlier run left in
    ``run.out`` are removed too (the results.json now written does not describe them)."""
    earlier = sorted(run.out.glob("scatter_*.png"))

    def save() -> None:
        run.save(report)
        while earlier:
            earlier.pop().unlink(missing_ok=True)

    return save


def verdict_text(out: Mapping[str, Any]) -> str:
    """A scenario's verdict and rankings (``summarise``'s) as lines of text."""
    v = out["verdict"]

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    return "\n".join([
        f"verdict: schemes' mean slowdown within {SCHEME_TOL:.0%}: "
        f"{met(v['schemes_within_10pc'])} (worst error {v['worst_scheme_error']:.1%})",
        f"         jobs' mean iteration within {JOB_TOL:.0%}: {met(v['jobs_target_met'])} "
        f"({v['jobs_within_20pc_share']:.0%} of jobs, target {JOB_SHARE:.0%})",
        f"         same ranking: {met(v['same_ranking'])} "
        f"({v['discordant_pairs']} discordant pairs)",
        f"ranking fluid:  {', '.join(out['ranking_fluid'])}",
        f"ranking packet: {', '.join(out['ranking_packet'])}",
    ])


def check(args: Any) -> None:
    if args.iterations < 2:
        raise UsageError("--iterations: at least 2")
    positive(args.scale, "--scale")
    unknown = [s for s in args.schemes.split(",") if s and s not in SCHEMES]
    if unknown:
        raise UsageError(f"--schemes: unknown {unknown}; known: {', '.join(SCHEMES)}")
    names = {s.name for s in SCENARIOS}
    bad = [s for s in (args.scenarios or "").split(",") if s and s not in names]
    if bad:
        raise UsageError(f"--scenarios: unknown {bad}; known: {', '.join(sorted(names))}")


EXPERIMENT = Experiment(
    "sim_vs_packet",
    __doc__,
    run_experiment,
    options=(
        full("all eight scenarios (up to 128 hosts, 20 jobs)"),
        iterations(5, "iterations per job (default 5)"),
        option("--scale", type=float, default=500.0,
               help="packet level: link rates and phase bytes divided by this factor, above 0 "
               "(default 500)"),
        option("--schemes", default=",".join(SCHEMES),
               help="comma-separated schemes (default %(default)s)"),
        option("--scenarios", default=None,
               help="comma-separated scenario names (default: the quick ones, every one "
               "with --full)"),
        option("--seed", type=int, default=0,
               help="job draw, ECMP hash and placement seed (default %(default)s)"),
        option("--profiles", default=DEFAULT_PROFILE_RULE, choices=PROFILE_RULES,
               help="how profiles meet the server links, both models (default scale-to-nic)"),
    ),
    check=check,
    needs_root=False,
)
main = EXPERIMENT.main

if __name__ == "__main__":
    raise SystemExit(main())
