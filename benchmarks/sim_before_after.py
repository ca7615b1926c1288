"""Before/after check of a simulator refactor: same results, same speed (issue 32).

Runs ``cassini sim run experiments/configs/sim_1024.yaml`` (every scheduler it lists),
the same cluster under the continuous network model with ``sim_16k.yaml``'s schedulers
on its first 400 jobs (``sim_1024_continuous``), and ``python -m
experiments.cluster_scale`` (small) once per tree, and with ``--only sim_16k``
``sim_16k.yaml`` under themis+cassini, alternating the
trees ``--rounds`` times in one invocation so that both see the same machine load.
Each run is a subprocess with its tree first on ``PYTHONPATH``; its CPU seconds are the
child's user + system time.  ``results.json`` of each run is stored with every
``wall_s`` field masked (wall time varies) and compared byte for byte.

    .venv/bin/python benchmarks/sim_before_after.py --tree before=/tmp/simcore-base \\
        --tree after=. --out /tmp/simcore-ba [--rounds 3] [--only sim_1024]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLI = "from cassini.cli import entry; entry()"
RUNS = {
    "sim_1024": ["-c", CLI, "sim", "run", "experiments/configs/sim_1024.yaml", "--quiet"],
    "sim_1024_continuous": ["-c", CLI, "sim", "run", "{continuous}", "--quiet"],
    "cluster_scale": ["-m", "experiments.cluster_scale"],
    "sim_16k": [
        "-c", CLI, "sim", "run", "experiments/configs/sim_16k.yaml",
        "--scheduler", "themis+cassini", "--quiet",
    ],
}  # fmt: skip
#: runs only named with ``--only`` (sim_16k takes ~7 minutes per tree on 2 cores)
OPT_IN = frozenset({"sim_16k"})


def continuous_config(out: Path) -> Path:
    """sim_1024.yaml on 400 jobs with ``network: continuous`` and sim_16k.yaml's
    schedulers, written under ``out``."""
    import yaml

    configs = Path(__file__).resolve().parent.parent / "experiments/configs"
    cfg = yaml.safe_load((configs / "sim_1024.yaml").read_text())
    cfg["workload"]["poisson"]["jobs"] = 400
    cfg["schedulers"] = yaml.safe_load((configs / "sim_16k.yaml").read_text())["schedulers"]
    cfg["network"] = "continuous"
    path = out / "sim_1024_continuous.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def masked(value: Any) -> Any:
    """``value`` with every ``wall_s`` field replaced by ``"masked"``."""
    if isinstance(value, dict):
        return {k: "masked" if k == "wall_s" else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def run_once(tree: Path, name: str, out: Path, work: Path, continuous: Path) -> dict[str, float]:
    """One run of ``name`` from ``tree`` in ``work`` (the same folder for every tree, as
    results.json records the command line); its masked results.json written under
    ``out``; wall and CPU seconds returned."""
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "MPLBACKEND": "Agg"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            *(a.format(continuous=continuous) for a in RUNS[name]),
            "--out",
            str(work),
        ],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    data = masked(json.loads((work / "results.json").read_text()))
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return {"wall_s": wall, "cpu_s": cpu}


def summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}, {max(xs):.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="LABEL=PATH")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of the trees")
    parser.add_argument(
        "--only",
        help=f"comma-separated runs of {', '.join(RUNS)} (default: all but "
        f"{', '.join(sorted(OPT_IN))})",
    )
    args = parser.parse_args(argv)
    trees = {t.split("=", 1)[0]: Path(t.split("=", 1)[1]).resolve() for t in args.tree}
    names = args.only.split(",") if args.only else [n for n in RUNS if n not in OPT_IN]
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; runs: {', '.join(RUNS)}")
    times: dict[str, dict[str, list[dict[str, float]]]] = {
        n: {label: [] for label in trees} for n in names
    }
    continuous = continuous_config(args.out)
    for r in range(args.rounds):
        for name in names:
            for label, tree in trees.items():
                out = args.out / label / name
                t = run_once(tree, name, out, args.out / "work" / name, continuous)
                times[name][label].append(t)
                print(f"round {r} {name} {label}: wall {t['wall_s']:.2f} s, cpu {t['cpu_s']:.2f} s")
    (args.out / "times.json").write_text(json.dumps(times, indent=1) + "\n")
    first = next(iter(trees))
    for name in names:
        for label in trees:
            ts = times[name][label]
            same = (args.out / label / name / "results.json").read_bytes() == (
                args.out / first / name / "results.json"
            ).read_bytes()
            print(
                f"{name:<14} {label:<8} cpu {summary([t['cpu_s'] for t in ts])} s, "
                f"wall {summary([t['wall_s'] for t in ts])} s; results "
                + ("identical" if same else f"DIFFER from {first}")
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
