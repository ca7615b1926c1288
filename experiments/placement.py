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

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from cassini.advisor import Candidate, Link, advise
from experiments.common import out_dir, progress, require_root, run_config, table, write_json
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


def candidates(n: int, hosts: list[str], seed: int) -> list[dict[str, list[str]]]:
    """The scheduler's offers: first the spread placement (job i on h_i and h_{i+4}),
    then random pairings."""
    half = len(hosts) // 2
    out = [{j["id"]: [hosts[i], hosts[i + half]] for i, j in enumerate(JOBS)}]
    rng = random.Random(seed)
    while len(out) < n:
        order = hosts[:]
        rng.shuffle(order)
        cand = {j["id"]: order[2 * i : 2 * i + 2] for i, j in enumerate(JOBS)}
        if cand not in out:
            out.append(cand)
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=25)
    ap.add_argument("--fabric", default="fair", choices=("fair", "ecn", "fifo"))
    ap.add_argument("--no-ddp", action="store_true", help="synthetic jobs only")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    require_root()
    out = out_dir("placement", args.out)
    topo = from_config(dict(TOPOLOGY))
    offers = candidates(args.candidates, list(topo.hosts), args.seed)
    ddp = not args.no_ddp
    first, rand = offers[0], offers[1 + random.Random(args.seed).randrange(len(offers) - 1)]

    ideal = run_config(
        config(first, ["ideal"], args.iterations, ddp, args.fabric),
        out / "ideal",
        "ideal: every job alone (profiles)",
    )
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

    runs = {
        "first": run_config(
            config(first, ["baseline"], args.iterations, ddp, args.fabric),
            out / "first",
            "first candidate (scheduler's choice)",
        ),
        "random": run_config(
            config(rand, ["baseline"], args.iterations, ddp, args.fabric),
            out / "random",
            "random candidate",
        ),
        "cassini": run_config(
            config(best, ["cassini"], args.iterations, ddp, args.fabric)
            | {"profile_iterations": 8},
            out / "cassini",
            "cassini: best candidate with time-shifts",
        ),
    }
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
    per_scheme = {}
    for scheme in ("ideal", "first", "random", "cassini"):
        sel = [r for r in rows if r["scheme"] == scheme]
        per_scheme[scheme] = {
            k: statistics.mean(r[k] for r in sel) for k in ("mean_vs_ideal", "p99_vs_ideal")
        }
    write_json(
        out / "results.json",
        {
            "rows": rows,
            "per_scheme": per_scheme,
            "advice": advice.to_dict(),
            "placements": {"first": first, "random": rand, "cassini": best},
        },
    )
    print(
        table(
            rows,
            [
                ("scheme", "scheme", "s"),
                ("job", "job", "s"),
                ("mean_ms", "mean ms", ".1f"),
                ("p99_ms", "p99 ms", ".1f"),
                ("mean_vs_ideal", "mean/ideal", ".2f"),
                ("p99_vs_ideal", "p99/ideal", ".2f"),
            ],
        )
    )
    print()
    for scheme, v in per_scheme.items():
        print(
            f"{scheme:<8} mean {v['mean_vs_ideal']:.2f}x  p99 {v['p99_vs_ideal']:.2f}x  "
            "(average over jobs, vs ideal)"
        )
    plot(rows, out / "placement.png")
    print(f"results: {out / 'results.json'}  plot: {out / 'placement.png'}")
    return 0


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schemes = ["ideal", "first", "random", "cassini"]
    jobs = sorted({r["job"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, title in ((axes[0], "mean_ms", "mean"), (axes[1], "p99_ms", "p99")):
        width = 0.8 / len(schemes)
        for k, scheme in enumerate(schemes):
            vals = [
                next((r[key] for r in rows if r["scheme"] == scheme and r["job"] == j), 0)
                for j in jobs
            ]
            ax.bar([i + k * width for i in range(len(jobs))], vals, width, label=scheme)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(jobs))], jobs)
        ax.set_ylabel(f"{title} iteration time (ms)")
        ax.set_title(f"{title} per job")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
