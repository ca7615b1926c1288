"""Loop repair before/after, in one process: ``cassini.refine.refine_shifts`` of two trees
on bench_advisor.py's candidates (1,024 and 16,384 GPUs), CPU ms per candidate, every
output required bit-identical to the before tree's.

    .venv/bin/python benchmarks/refine_before_after.py BEFORE_TREE [AFTER_TREE] [--rounds 3]

A tree is a checkout of this repository: its ``cassini/refine.py`` is loaded.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_advisor as bench  # noqa: E402

from cassini import advisor, affinity  # noqa: E402
from cassini.files import positive_int  # noqa: E402


def load(tree: Path, name: str) -> ModuleType:
    """``cassini/refine.py`` of ``tree`` as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, tree / "cassini" / "refine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(scale: int) -> tuple[list[tuple], dict]:
    """(graph, link solutions, Algorithm 1's shifts) per candidate of bench_advisor's
    cluster at ``scale`` x 1,024 GPUs, and the job profiles."""
    racks = bench.RACKS * scale
    rng = np.random.default_rng(1)
    profiles, gpus = bench.fitting(*bench.jobs(240 * scale, rng), racks)
    cands = [bench.candidate(f"c{i}", profiles, gpus, rng, racks) for i in range(10)]
    jobs = {p.job_id: p for p in profiles}
    link_map = advisor._link_map(bench.links(racks))
    solutions = advisor._link_solutions(cands, link_map, jobs, 5.0, 1e-3, 1)
    out = []
    for cand in cands:
        sols = solutions[cand.candidate_id]
        graph = affinity.affinity_graph(cand.paths, sols)
        start = affinity.time_shifts(graph, sols, jobs, repair=False).time_shifts_s
        out.append((graph, sols, start))
    return out, jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("before", type=Path, metavar="BEFORE_TREE", help="the tree before")
    ap.add_argument(
        "after",
        type=Path,
        nargs="?",
        default=Path("."),
        metavar="AFTER_TREE",
        help="the tree after (default: the current folder)",
    )
    ap.add_argument(
        "--rounds",
        type=positive_int,
        default=3,
        help="alternations of the trees, >= 1 (the median is printed; default 3)",
    )
    args = ap.parse_args(argv)
    for metavar, tree in (("BEFORE_TREE", args.before), ("AFTER_TREE", args.after)):
        if not (tree / "cassini" / "refine.py").is_file():
            ap.error(f"argument {metavar}: {tree}: no cassini/refine.py there (not a tree)")
    trees = {name: load(tree, f"refine_{name}") for name, tree in
             (("before", args.before), ("after", args.after))}  # fmt: skip
    for scale in (1, 16):
        work, jobs = cases(scale)
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            outputs = {}
            for name, module in trees.items():
                t = time.process_time()
                outputs[name] = [module.refine_shifts(g, s, jobs, start) for g, s, start in work]
                cpu[name].append(1e3 * (time.process_time() - t) / len(work))
            hexed = {k: [{j: x.hex() for j, x in o.items()} for o in v] for k, v in outputs.items()}
            assert hexed["before"] == hexed["after"], "the trees' shifts differ"
        line = ", ".join(
            f"{k} {statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]" for k, v in cpu.items()
        )
        print(f"{1024 * scale} GPUs: CPU ms per candidate {line}; shifts bit-identical")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
