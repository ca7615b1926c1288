"""Before/after check of a simulator refactor: same results, same speed (issue 32).

Runs ``cassini sim run experiments/configs/sim_1024.yaml`` (every scheduler it lists),
the same cluster under the continuous network model with ``sim_16k.yaml``'s schedulers
on its first 400 jobs (``sim_1024_continuous``), and ``python -m
experiments.cluster_scale`` (small) once per tree, and with ``--only sim_16k``
``sim_16k.yaml`` under themis+cassini, alternating the
trees ``--rounds`` times in one invocation so that both see the same machine load.
Each run is a subprocess with its tree first on ``PYTHONPATH``; its CPU seconds are the
child's user + system time.  Before the first round each tree is warmed up, untimed:
numba caches the compiled kernels beside each tree's sources, so a fresh tree's first
run would otherwise pay their compilation (tens of CPU seconds) and look slower than a
tree whose cache is warm.  The warm-up is ``python -m cassini.sim.jit_warmup`` in a tree
that has it, else one untimed run of every selected run.  ``results.json`` of each
run is stored with every ``wall_s`` field (wall time varies) and the config's path
masked, and compared byte for byte.

    .venv/bin/python benchmarks/sim_before_after.py --tree before=/tmp/simcore-base \\
        --tree after=. --out /tmp/simcore-ba [--rounds 3] [--only sim_1024]

Every tree and flag is checked before anything is written.  When a run fails, its last
lines of stderr are printed with a line naming the run and the tree, the scratch folder
``OUT/work`` is removed (and ``OUT`` itself when this invocation created it), and the
exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cassini.files import positive_int

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
#: what a tree needs for each run (paths inside it); sim_1024_continuous's config is
#: written from this checkout's configs
NEEDS = {
    "sim_1024": ("cassini", "experiments/configs/sim_1024.yaml"),
    "sim_1024_continuous": ("cassini",),
    "cluster_scale": ("cassini", "experiments/cluster_scale.py"),
    "sim_16k": ("cassini", "experiments/configs/sim_16k.yaml"),
}
#: lines of a failed run's stderr printed
TAIL_LINES = 20


class RunFailed(Exception):
    """A run's child process exited non-zero; ``tail`` is the end of its stderr; the
    run's name, tree label and tree are filled in by the caller that knows them."""

    def __init__(self, returncode: int, tail: str) -> None:
        super().__init__(f"exit status {returncode}")
        self.returncode = returncode
        self.tail = tail
        self.name = self.label = ""
        self.tree: Path | None = None


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


#: fields that differ between trees whatever the code does: wall time, and the config
#: file's absolute path (each tree runs its own copy)
MASKED_FIELDS = frozenset({"wall_s", "config"})


def masked(value: Any) -> Any:
    """``value`` with every field of :data:`MASKED_FIELDS` replaced by ``"masked"``."""
    if isinstance(value, dict):
        return {k: "masked" if k in MASKED_FIELDS else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def run_argv(name: str, work: Path, continuous: Path | None) -> list[str]:
    """The child's arguments (after the interpreter) for run ``name`` writing to ``work``."""
    return [*(a.format(continuous=continuous) for a in RUNS[name]), "--out", str(work)]


def run_once(
    tree: Path, name: str, out: Path, work: Path, continuous: Path | None
) -> dict[str, float]:
    """One run of ``name`` from ``tree`` in ``work`` (the same folder for every tree, as
    results.json records the command line); its masked results.json written under
    ``out``; wall and CPU seconds returned."""
    work.mkdir(parents=True, exist_ok=True)
    seconds = run_child(tree, run_argv(name, work, continuous))
    data = masked(json.loads((work / "results.json").read_text()))
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return seconds


#: the module that compiles (or loads) every simulator kernel into a tree's numba cache
WARM_MODULE = "cassini.sim.jit_warmup"


def warm_up(tree: Path, names: list[str], work: Path, continuous: Path | None) -> str:
    """Load or compile ``tree``'s kernels into its numba cache, untimed, so that no timed
    run pays for them; says how.  ``python -m cassini.sim.jit_warmup`` where the tree has
    it, else one run of each of ``names`` (in ``work``, results thrown away)."""
    if (tree / (WARM_MODULE.replace(".", "/") + ".py")).is_file():
        steps = [(f"warm-up (python -m {WARM_MODULE})", work, ["-m", WARM_MODULE])]
        how = f"python -m {WARM_MODULE}"
    else:
        steps = [(f"{n} (warm-up)", work / n, run_argv(n, work / n, continuous)) for n in names]
        how = f"no {WARM_MODULE} in this tree: one run of each of {', '.join(names)}"
    for step, folder, argv in steps:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            run_child(tree, argv)
        except RunFailed as e:
            e.name = step
            raise
    return how


def run_child(tree: Path, argv: list[str]) -> dict[str, float]:
    """``python ARGV`` from ``tree`` (first on ``PYTHONPATH``), stdout dropped; its wall
    and CPU seconds; :class:`RunFailed` when it exits non-zero."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MPLBACKEND": "Agg"}
    # the child's stderr goes to a file (not a pipe: nothing to read while it runs),
    # read back only when it fails
    with tempfile.TemporaryFile("w+", errors="replace") as stderr:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter()
        child = subprocess.run(
            [sys.executable, *argv],
            cwd=tree,
            env=env,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        wall = time.perf_counter() - wall
        if child.returncode != 0:
            stderr.seek(0)
            tail = "\n".join(stderr.read().splitlines()[-TAIL_LINES:])
            raise RunFailed(child.returncode, tail)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}, {max(xs):.2f}]"


def tree_arg(text: str) -> tuple[str, Path]:
    """argparse ``type`` of ``--tree``: ``LABEL=PATH``, PATH a folder with ``cassini/``."""
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"must be LABEL=PATH, got {text!r}")
    where = Path(path).resolve()
    if not where.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory")
    if not (where / "cassini").is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a tree of this repository (no cassini/)")
    return label, where


def out_arg(text: str) -> Path:
    """argparse ``type`` of ``--out``: a folder, or a name not taken yet."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: exists and is not a directory")
    return path


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tree",
        action="append",
        required=True,
        type=tree_arg,
        help="LABEL=PATH: a checkout to run (repeat the flag, one label per tree); the "
        "first tree's results are the ones the others' are compared with",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=out_arg,
        help="output directory (created; an existing one is written into)",
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="timed alternations of the trees, >= 1, after one untimed warm-up per tree "
        "(default 1)",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated runs of {', '.join(RUNS)}, each once (default: all but "
        f"{', '.join(sorted(OPT_IN))})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser_ = parser()
    args = parser_.parse_args(argv)
    trees: dict[str, Path] = {}
    for label, tree in args.tree:
        if label in trees:
            parser_.error(f"argument --tree: label {label!r} given twice; give each tree once")
        trees[label] = tree
    names = args.only.split(",") if args.only is not None else [n for n in RUNS if n not in OPT_IN]
    if "" in names:
        parser_.error(
            f"argument --only: an empty run name in {args.only!r}; give comma-separated "
            f"runs of {', '.join(RUNS)}, without empty items"
        )
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        parser_.error(
            f"argument --only: unknown run(s) {', '.join(unknown)}; runs: {', '.join(RUNS)}"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        parser_.error(f"argument --only: {', '.join(repeated)} named twice; name each run once")
    for label, tree in trees.items():
        for name in names:
            missing = [need for need in NEEDS[name] if not (tree / need).exists()]
            if missing:
                parser_.error(
                    f"argument --tree: {label}={tree}: no {', '.join(missing)} "
                    f"(needed by run {name})"
                )
    created = not args.out.exists()
    try:
        return compare(args, trees, names)
    except RunFailed as e:
        # the scratch folder, and the output folder when this invocation made it
        shutil.rmtree(args.out if created else args.out / "work", ignore_errors=True)
        if e.tail:
            print(e.tail, file=sys.stderr)
        print(
            f"{parser_.prog}: error: run {e.name} of tree {e.label} ({e.tree}) failed "
            f"with exit status {e.returncode}; its last stderr lines are above",
            file=sys.stderr,
        )
        return 1


def compare(args: argparse.Namespace, trees: dict[str, Path], names: list[str]) -> int:
    """Every run of ``names`` from every tree, ``args.rounds`` times; the comparison."""
    times: dict[str, dict[str, list[dict[str, float]]]] = {
        n: {label: [] for label in trees} for n in names
    }
    args.out.mkdir(parents=True, exist_ok=True)
    continuous = continuous_config(args.out) if "sim_1024_continuous" in names else None
    for label, tree in trees.items():
        try:
            how = warm_up(tree, names, args.out / "work" / "warm-up" / label, continuous)
        except RunFailed as e:
            e.label, e.tree = label, tree
            raise
        print(f"warm-up {label} (untimed, kernels compiled or loaded): {how}")
    for r in range(args.rounds):
        for name in names:
            for label, tree in trees.items():
                out = args.out / label / name
                try:
                    t = run_once(tree, name, out, args.out / "work" / name, continuous)
                except RunFailed as e:
                    e.name, e.label, e.tree = name, label, tree
                    raise
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
