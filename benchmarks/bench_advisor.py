#!/usr/bin/env python3
"""Benchmark: score 10 candidate placements of a synthetic 1,024-GPU two-tier cluster, and
of the same structure x16 (16,384 GPUs) in the same run.

Cluster: 16 racks x 8 servers x 8 GPUs (``scale`` times the racks and jobs); every server
has one NIC (up and down link) to its ToR, every ToR an uplink and a downlink to the spine
layer with 2:1 oversubscription.
Jobs: drawn from the shipped profile library (cassini/data/profiles.json) with iteration
times jittered by +-15 % (as measured ones are, so most unified periods are not exact
LCMs) and GPU counts of 1-16.  A candidate places the jobs in a random order, each on the
free GPUs of consecutive servers from a random start (schedulers pack jobs); a job spanning
servers crosses their NICs and, across racks, the ToR links.

Prints milliseconds per candidate (wall time, and CPU time of this process and its pool
workers) and per shared link for the whole advisor (link scoring, affinity graph, loop
repair, ranking), serial (one process) and with its automatic parallelism, against a
baseline measured in the same run: scoring every shared link of every candidate on its
own (no de-duplication, no time-shifts).

    .venv/bin/python benchmarks/bench_advisor.py [--jobs 240] [--candidates 10] [--precision-deg 5]
                                       [--scales 1 16] [--repeat 3]

Each row is timed ``--repeat`` times in turn (rows interleaved, every call cold); the
median is printed with the range (fastest-slowest), so one slow timing on a shared
machine does not make the figure.

``--scales 1 16`` (the default) runs 1,024 GPUs and 16,384 GPUs (256 racks, 16x the jobs)
one after the other and prints the time per candidate of each and their ratio (target:
16x the GPUs costs at most 15x the time, the README's advisor_16k_scaling headline).
Sizes are given in ascending order; the scaling summary compares the largest to the
smallest.

Columns: ``ms/candidate`` is the median wall time per candidate (``range``: fastest-slowest
of the timings), ``CPU ms/cand.`` its CPU time, ``ms/shared link`` the wall time per
shared link ("-" when no link is shared), and ``speed vs baseline`` the baseline's time
divided by the row's (above 1x: faster than scoring every shared link on its own; "-"
when no link is shared, as the baseline then scores nothing).
``jobs per shared link`` counts the shared links by how many jobs cross them, over all
the candidates together (JSON ``jobs_per_shared_link``), while ``shared links per
candidate`` is a mean per candidate.
Progress goes to stderr, one line per stage; stdout carries only the figures (``--json``).
``--json`` prints one JSON object (the figures of one cluster size) when ``--scales``
gives one size, and a JSON list of such objects, in ``--scales`` order, when it gives
several.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter
from importlib import resources

import numpy as np

from cassini.advisor import Candidate, Link, _scored_links, advise, clear_link_cache
from cassini.circle import MAX_PRECISION_DEG, MIN_PRECISION_DEG, compatibility_score
from cassini.files import non_negative_int, positive_int
from cassini.profile import JobProfile, Phase

RACKS, SERVERS_PER_RACK, GPUS_PER_SERVER = 16, 8, 8
NIC_BPS = 100e9
UPLINK_BPS = SERVERS_PER_RACK * NIC_BPS / 2  # 2:1 oversubscribed


def links(racks: int = RACKS) -> list[Link]:
    out = []
    for r in range(racks):
        out += [Link(f"tor{r}-up", UPLINK_BPS), Link(f"tor{r}-down", UPLINK_BPS)]
        for s in range(SERVERS_PER_RACK):
            out += [Link(f"srv{r}.{s}-up", NIC_BPS), Link(f"srv{r}.{s}-down", NIC_BPS)]
    return out


def jobs(n: int, rng: np.random.Generator) -> tuple[list[JobProfile], list[int]]:
    library = json.loads(resources.files("cassini").joinpath("data/profiles.json").read_text())
    profiles, gpus = [], []
    for i in range(n):
        base = JobProfile.from_dict(library[rng.integers(len(library))])
        f = rng.uniform(0.85, 1.15)
        phases = [Phase(p.start_s * f, p.duration_s * f, p.rate_bps * 2) for p in base.phases]
        profiles.append(JobProfile(f"{base.job_id}-{i}", base.iteration_time_s * f, phases))
        gpus.append(int(rng.choice([1, 2, 2, 4, 4, 4, 8, 8, 16])))
    return profiles, gpus


def fitting(
    profiles: list[JobProfile], gpus: list[int], racks: int = RACKS
) -> tuple[list[JobProfile], list[int]]:
    """The jobs, in order, that fit in the GPUs of ``racks`` racks (a job that does not
    fit is left out and later ones still tried), with their GPU counts."""
    room = racks * SERVERS_PER_RACK * GPUS_PER_SERVER
    total, kept, counts = 0, [], []
    for p, g in zip(profiles, gpus, strict=True):
        if total + g <= room:
            kept.append(p)
            counts.append(g)
            total += g
    return kept, counts


def candidate(cid: str, profiles, gpus, rng: np.random.Generator, racks: int = RACKS) -> Candidate:
    servers = [(r, s) for r in range(racks) for s in range(SERVERS_PER_RACK)]
    free = dict.fromkeys(servers, GPUS_PER_SERVER)
    paths = {}
    for i in rng.permutation(len(profiles)):
        job, need = profiles[i], gpus[i]
        start = int(rng.integers(len(servers)))
        chosen = []
        for k in range(len(servers)):
            server = servers[(start + k) % len(servers)]
            if need <= 0:
                break
            take = min(need, free[server])
            if take:
                free[server] -= take
                need -= take
                chosen.append(server)
        if len(chosen) < 2:
            continue  # single-server job: no network traffic
        path = []
        for r, s in chosen:
            path += [f"srv{r}.{s}-up", f"srv{r}.{s}-down"]
        racks = sorted({r for r, _ in chosen})
        if len(racks) > 1:
            for r in racks:
                path += [f"tor{r}-up", f"tor{r}-down"]
        paths[job.job_id] = tuple(path)
    return Candidate(cid, paths)


def run(
    scale: int, n_jobs: int, n_cands: int, precision_deg: float, seed: int, repeat: int = 1
) -> dict:
    """One cluster size: ``scale`` x 16 racks, ``scale`` x ``n_jobs`` jobs drawn; each row
    timed ``repeat`` times (cold: no link solved by an earlier call), the median kept."""
    racks = RACKS * scale
    gpus_total = racks * SERVERS_PER_RACK * GPUS_PER_SERVER
    progress(f"{gpus_total:,} GPUs: drawing {n_jobs * scale} jobs and {n_cands} candidate(s)")
    rng = np.random.default_rng(seed)
    profiles, gpus = fitting(*jobs(n_jobs * scale, rng), racks)
    cands = [candidate(f"c{i}", profiles, gpus, rng, racks) for i in range(n_cands)]
    all_links = links(racks)
    by_id = {p.job_id: p for p in profiles}
    cap = {link.link_id: link.capacity_bps for link in all_links}
    shared = [_scored_links(c, cap, by_id) for c in cands]  # the links advise() scores
    n_shared = sum(len(s) for s in shared)
    sizes = Counter(len(js) for s in shared for js in s.values())

    progress(f"{gpus_total:,} GPUs: {n_shared} shared link(s); warm-up")
    advise(all_links, profiles, cands[:1], precision_deg, workers=1)  # warm-up
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    accepted = {}

    def baseline() -> None:
        """Every shared link of every candidate scored on its own (no de-duplication)."""
        for s in shared:
            for link, js in s.items():
                compatibility_score([by_id[j] for j in js], cap[link], precision_deg=precision_deg)

    for r in range(repeat):
        progress(f"{gpus_total:,} GPUs: timing {r + 1}/{repeat}")
        for label, workers, loops in (
            ("serial, reject", 1, "reject"),
            ("serial, score", 1, "score"),
            ("auto, score", None, "score"),
            ("links only, no dedup", None, None),
        ):
            clear_link_cache()  # time cold calls: no link solved by an earlier run
            start, start_cpu = time.perf_counter(), _cpu_s()
            if loops is None:
                baseline()
            else:
                advice = advise(
                    all_links, profiles, cands, precision_deg, loops=loops, workers=workers
                )
                accepted[loops] = sum(c.status == "ok" for c in advice.candidates)
            walls.setdefault(label, []).append(time.perf_counter() - start)
            cpus.setdefault(label, []).append(_cpu_s() - start_cpu)
    results = {k: statistics.median(v) for k, v in walls.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}

    ok = [c for c in advice.candidates if c.status == "ok"]
    loops = [c.loops for c in advice.candidates]
    return {
        "gpus": gpus_total,
        "gpus_used": sum(gpus),
        "jobs": len(profiles),
        "candidates": len(cands),
        "shared_links_per_candidate": n_shared / len(cands),
        "jobs_per_shared_link": dict(sorted(sizes.items())),
        "loops_per_candidate": sum(loops) / len(loops),
        "accepted_candidates": accepted,
        "best": advice.best,
        "best_score": ok[0].score if ok else None,
        "ms_per_candidate": {k: 1e3 * v / len(cands) for k, v in results.items()},
        "ms_per_candidate_runs": {k: [1e3 * t / len(cands) for t in v] for k, v in walls.items()},
        "cpu_ms_per_candidate": {k: 1e3 * v / len(cands) for k, v in cpu.items()},
        # no shared link (few jobs, or none spanning servers): no time per shared link
        "ms_per_shared_link": {
            k: (1e3 * v / n_shared if n_shared else None) for k, v in results.items()
        },
    }


def progress(text: str) -> None:
    """One progress line on stderr (stdout carries only the figures: ``--json``)."""
    print(f"bench_advisor: {text}", file=sys.stderr, flush=True)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the process pool's workers):
    less sensitive than wall time to other work on a shared machine."""
    children = os.times()
    return time.process_time() + children.children_user + children.children_system


def report(f: dict) -> None:
    acc = f["accepted_candidates"]
    n = f["candidates"]
    print(
        f"cluster: {f['gpus']} GPUs, {f['jobs']} jobs using {f['gpus_used']} GPUs, "
        f"{n} candidates, {f['shared_links_per_candidate']:.0f} shared links per candidate"
    )
    if not f["shared_links_per_candidate"]:
        print("no link is shared by two jobs: nothing for the advisor to score")
    print(f"jobs per shared link, over all {n} candidates: {f['jobs_per_shared_link']}")
    print(
        f"independent loops per candidate: {f['loops_per_candidate']:.1f}; "
        f"accepted: {acc['reject']}/{n} with --loops reject, {acc['score']}/{n} with --loops score"
    )
    best = f"{f['best_score']:.3f}" if f["best_score"] is not None else "-"
    print(f"best {f['best']} (mean achieved score {best})")
    runs = len(next(iter(f["ms_per_candidate_runs"].values())))
    print(f"median of {runs} timing(s); range: fastest-slowest wall time")
    print("speed vs baseline = baseline's time ÷ the row's (above 1x: faster than the baseline)")
    print(
        f"{'run':<20} {'ms/candidate':>13} {'range':>15} {'CPU ms/cand.':>13} "
        f"{'ms/shared link':>15} {'speed vs baseline':>18}"
    )
    base = f["ms_per_candidate"]["links only, no dedup"]
    # no shared link: the baseline scored nothing, and no row is faster or slower than it
    compared = bool(f["shared_links_per_candidate"])
    for k, v in f["ms_per_candidate"].items():
        spread = f["ms_per_candidate_runs"][k]
        per_link = f["ms_per_shared_link"][k]
        per_link_text = f"{per_link:>15.3f}" if per_link is not None else f"{'-':>15}"
        speed = f"{base / v:>17.2f}x" if compared and v > 0 else f"{'-':>18}"
        print(
            f"{k:<20} {v:>13.1f} {f'{min(spread):.1f}-{max(spread):.1f}':>15} "
            f"{f['cpu_ms_per_candidate'][k]:>13.1f} {per_link_text} {speed}"
        )


def precision(text: str) -> float:
    """argparse ``type`` of ``--precision-deg``: degrees in the advisor's bounds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of degrees, got {text!r}") from None
    if not (math.isfinite(value) and MIN_PRECISION_DEG <= value <= MAX_PRECISION_DEG):
        raise argparse.ArgumentTypeError(
            f"must be in [{MIN_PRECISION_DEG:g}, {MAX_PRECISION_DEG:g}] degrees, got {text}"
        )
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--jobs",
        type=positive_int,
        default=240,
        help="jobs drawn per 1,024 GPUs, >= 1 (those fitting are kept; default 240)",
    )
    ap.add_argument(
        "--candidates",
        type=positive_int,
        default=10,
        help="candidate placements scored per cluster size, >= 1 (default 10)",
    )
    ap.add_argument(
        "--precision-deg",
        type=precision,
        default=5.0,
        help=f"the advisor's angle step in degrees, {MIN_PRECISION_DEG:g}-"
        f"{MAX_PRECISION_DEG:g} (5 degrees: 72 angles; default 5)",
    )
    ap.add_argument(
        "--seed",
        type=non_negative_int,
        default=1,
        help="random seed of the jobs and candidates, >= 0 (default 1)",
    )
    ap.add_argument(
        "--scales",
        type=positive_int,
        nargs="+",
        default=[1, 16],
        help="cluster sizes in ascending order, x 1,024 GPUs (default: 1 16)",
    )
    ap.add_argument(
        "--repeat",
        type=positive_int,
        default=3,
        help="timings of each row, >= 1 (the median is reported, with the range; default 3)",
    )
    ap.add_argument(
        "--json",
        action="store_true",
        help="print the figures as JSON: one object for a single cluster size, a list of "
        "objects (one per size, ascending) for several sizes",
    )
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if any(b <= a for a, b in zip(args.scales, args.scales[1:], strict=False)):
        ap.error(
            "argument --scales: give the sizes in ascending order, each once "
            f"(got {' '.join(map(str, args.scales))})"
        )
    figures = [
        run(scale, args.jobs, args.candidates, args.precision_deg, args.seed, args.repeat)
        for scale in args.scales
    ]
    if args.json:
        print(json.dumps(figures if len(figures) > 1 else figures[0], indent=2))
        return
    for f in figures:
        report(f)
        print()
    if len(figures) > 1:
        small, large = figures[0], figures[-1]  # --scales ascend: the smallest, the largest
        print(
            f"scaling {small['gpus']} -> {large['gpus']} GPUs (x{large['gpus'] // small['gpus']}):"
        )
        for k in small["ms_per_candidate"]:
            ratio = _times(large["ms_per_candidate"][k], small["ms_per_candidate"][k])
            cpu = _times(large["cpu_ms_per_candidate"][k], small["cpu_ms_per_candidate"][k])
            print(f"  {k:<20} time per candidate {ratio} (CPU time {cpu})")
        if (small["gpus"], large["gpus"]) == (1024, 16384):
            print(
                "target (README headline advisor_16k_scaling): serial, reject at most x15 "
                "(16x the GPUs)"
            )


def _times(a: float, b: float) -> str:
    """``a`` ÷ ``b`` as ``x1.5``, or ``x-`` when ``b`` is no time at all."""
    return f"x{a / b:.1f}" if b > 0 else "x-"


if __name__ == "__main__":
    main()
