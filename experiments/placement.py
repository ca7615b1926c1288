"""Experiment 3 — placement on a shared fabric (CASSINI §5).

A two-tier leaf-spine (2 leaves, 2 spines, 4 hosts per leaf, 2:1 oversubscribed) in
Mininet runs four jobs of two workers: three synthetic jobs of different iteration times
and communication shares, and one PyTorch DDP job.  A scheduler offers N candidate
placements (job -> host pairs).  In the same run:

  first   — the scheduler's first candidate (spread: every job crosses the spines);
  random  — a candidate drawn at random;
  cassini — the candidate `cassini.advisor` ranks best, with its time-shifts (agent);
  ideal   — every job alone.

Profiles come from the ideal run (each job alone), as a deployment would measure them.

    sudo .venv/bin/python -m experiments.placement [--candidates 8] [--iterations 25] [--no-ddp]

Writes results/placement/results.json and placement.png; prints mean and p99 per job per
scheme.
"""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path
from typing import Any

from cassini.advisor import Candidate, Link, advise
from experiments.columns import JOB, SCHEME, TIMES_VS_IDEAL
from experiments.common import progress, run_config
from experiments.harness import Experiment, Run, UsageError, at_least, iterations, option
from experiments.plots import figure
from testbed.results import ExperimentResult
from testbed.topo import from_config

TOPOLOGY = {
    "kind": "leaf_spine",
    "leaves": 2,
    "spines": 2,
    "hosts_per_leaf": 4,
    "host_bps": 400_000_000,
    "oversubscription": 2,
    "fabric": "fair",
}
JOBS = [
    {"id": "s1", "compute_s": 0.06, "bytes": 1_000_000},
    {"id": "s2", "compute_s": 0.05, "bytes": 1_250_000},
    {"id": "s3", "compute_s": 0.08, "bytes": 900_000},
    {"id": "ddp", "kind": "ddp", "compute_s": 0.04, "width": 320, "layers": 3},
]


MAX_CANDIDATES = 100  # offers the advisor ranks at most (--candidates)
DRAWS_PER_CANDIDATE = 100  # random pairings drawn per offer before giving up


def candidates(n: int, hosts: list[str], seed: int) -> list[dict[str, list[str]]]:
    """The scheduler's ``n`` distinct offers: first the spread placement (job i on h_i
    and h_{i+4}), then random pairings; ValueError when ``n * DRAWS_PER_CANDIDATE``
    draws do not find ``n`` distinct ones."""
    half = len(hosts) // 2
    out = [{j["id"]: [hosts[i], hosts[i + half]] for i, j in enumerate(JOBS)}]
    rng = random.Random(seed)
    for _ in range(n * DRAWS_PER_CANDIDATE):
        if len(out) >= n:
            break
        order = hosts[:]
        rng.shuffle(order)
        cand = {j["id"]: order[2 * i : 2 * i + 2] for i, j in enumerate(JOBS)}
        if cand not in out:
            out.append(cand)
    if len(out) < n:
        raise ValueError(
            f"only {len(out)} distinct placements found in {n * DRAWS_PER_CANDIDATE} draws, "
            f"not {n}"
        )
    return out


def config(
    placement: dict[str, list[str]], schemes: list, iterations: int, ddp: bool, fabric: str
) -> dict[str, Any]:
    jobs = [
        {**j, "hosts": placement[j["id"]], "iterations": iterations}
        for j in JOBS
        if ddp or j.get("kind") != "ddp"
    ]
    return {"topology": {**TOPOLOGY, "fabric": fabric}, "jobs": jobs, "schemes": schemes, "seed": 3}


COLUMNS = (SCHEME, JOB, *TIMES_VS_IDEAL)
SCHEMES = ("ideal", "first", "random", "cassini")


def advise_placement(
    ideal: ExperimentResult, topo: Any, offers: list[dict[str, list[str]]]
) -> tuple[Any, dict[str, list[str]]]:
    """The advisor on the scheduler's offers, with the profiles the ideal run measured:
    its advice and the placement it ranks best."""
    profiles = list(ideal.schemes["ideal"].profiles.values())
    links = [Link(d["id"], d["capacity_bps"]) for d in topo.advisor_links()]
    cands = [
        Candidate(
            f"c{i}",
            {
                j: tuple(topo.ring_links(h))
                for j, h in c.items()
                if j in {p.job_id for p in profiles}
            },
        )
        for i, c in enumerate(offers)
    ]
    advice = advise(links, profiles, cands, loops="score")
    best = offers[int(advice.best[1:])]
    progress(
        f"advisor: best {advice.best} (score {advice.candidates[0].score:.2f}); "
        f"first c0 {next(c.score for c in advice.candidates if c.candidate_id == 'c0'):.2f}"
    )
    return advice, best


def job_rows(ideal: ExperimentResult, runs: dict[str, ExperimentResult]) -> list[dict[str, Any]]:
    """Per scheme and job: mean and p99 iteration time, and both over the job alone."""
    ideal_summary = ideal.schemes["ideal"].summary
    rows = []
    for scheme, res in [("ideal", ideal), *runs.items()]:
        summary = next(iter(res.schemes.values())).summary
        for job, s in summary.items():
            rows.append(
                {
                    "scheme": scheme,
                    "job": job,
                    "mean_ms": s["mean_s"] * 1e3,
                    "p99_ms": s["p99_s"] * 1e3,
                    "mean_vs_ideal": s["mean_s"] / ideal_summary[job]["mean_s"],
                    "p99_vs_ideal": s["p99_s"] / ideal_summary[job]["p99_s"],
                }
            )
    return rows


def run_placements(run: Run) -> None:
    args = run.args
    out = run.out
    topo = from_config(dict(TOPOLOGY))
    offers = candidates(args.candidates, list(topo.hosts), args.seed)
    ddp = not args.no_ddp
    first, rand = offers[0], offers[1 + random.Random(args.seed).randrange(len(offers) - 1)]

    def placed(placement: dict[str, list[str]], schemes: list) -> dict[str, Any]:
        return config(placement, schemes, args.iterations, ddp, args.fabric)

    ideal = run_config(
        placed(first, ["ideal"]), out / "ideal", "ideal: every job alone (profiles)"
    )
    advice, best = advise_placement(ideal, topo, offers)
    runs = {
        "first": run_config(
            placed(first, ["baseline"]), out / "first", "first candidate (scheduler's choice)"
        ),
        "random": run_config(placed(rand, ["baseline"]), out / "random", "random candidate"),
        "cassini": run_config(
            placed(best, ["cassini"]) | {"profile_iterations": 8},
            out / "cassini",
            "cassini: best candidate with time-shifts",
        ),
    }
    rows = job_rows(ideal, runs)
    per_scheme = {}
    for scheme in SCHEMES:
        sel = [r for r in rows if r["scheme"] == scheme]
        per_scheme[scheme] = {
            k: statistics.mean(r[k] for r in sel) for k in ("mean_vs_ideal", "p99_vs_ideal")
        }
    run.save(
        {
            "rows": rows,
            "per_scheme": per_scheme,
            "advice": advice.to_dict(),
            "placements": {"first": first, "random": rand, "cassini": best},
        }
    )
    run.show(rows, COLUMNS)
    print()
    for scheme, v in per_scheme.items():
        print(
            f"{scheme:<8} mean {v['mean_vs_ideal']:.2f}x  p99 {v['p99_vs_ideal']:.2f}x  "
            "(average over jobs, vs ideal)"
        )
    plot(rows, out / "placement.png")
    print(f"results: {run.results_path}  plot: {out / 'placement.png'}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    jobs = sorted({r["job"] for r in rows})
    with figure(path, 1, 2, figsize=(10, 3.6)) as (_, axes):
        for ax, key, title in ((axes[0], "mean_ms", "mean"), (axes[1], "p99_ms", "p99")):
            width = 0.8 / len(SCHEMES)
            for k, scheme in enumerate(SCHEMES):
                vals = [
                    next((r[key] for r in rows if r["scheme"] == scheme and r["job"] == j), 0)
                    for j in jobs
                ]
                ax.bar([i + k * width for i in range(len(jobs))], vals, width, label=scheme)
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(jobs))], jobs)
            ax.set_ylabel(f"{title} iteration time (ms)")
            ax.set_title(f"{title} per job")
        axes[0].legend(fontsize=8)


def check(args: Any) -> None:
    if not 2 <= args.candidates <= MAX_CANDIDATES:
        raise UsageError(f"--candidates: 2 .. {MAX_CANDIDATES}, got {args.candidates}")
    at_least(args.iterations, "--iterations")


EXPERIMENT = Experiment(
    "placement",
    __doc__,
    run_placements,
    options=(
        option(
            "--candidates",
            type=int,
            default=8,
            help=f"placements the scheduler offers, 2 .. {MAX_CANDIDATES} (default %(default)s)",
        ),
        iterations(25),
        option(
            "--fabric",
            default="fair",
            choices=("fair", "ecn", "fifo"),
            help="the fabric's sharing (default %(default)s)",
        ),
        option("--no-ddp", action="store_true", help="synthetic jobs only"),
        option(
            "--seed", type=int, default=7, help="random seed of the offers (default %(default)s)"
        ),
    ),
    check=check,
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
