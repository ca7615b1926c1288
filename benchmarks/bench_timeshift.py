"""What the time-shift agent costs a training step: two ranks (gloo, loopback) run a
100 ms step held by ``cassini.torch.TimeShift``; per iteration the time ``wait()`` spends
beyond sleeping for its slot (planning on rank 0, the exchange of its decision, waking
up) is the agent's cost, against the step in the same run.  Target: under 1 % of a
100 ms step.  Both exchanges are measured in one run, one after the other: ``ahead``
(``cassini.torch``'s default: the decision posted on an asynchronous broadcast an
iteration ahead) and ``sync`` (a broadcast every step before anyone starts).

    .venv/bin/python benchmarks/bench_timeshift.py [--iterations 100] [--step-ms 100] [--json]

The first 5 iterations of each exchange are start-up and left out of the figures, so
``--iterations`` must be at least 6.  Printed per rank and exchange: the median and p99
of the cost in microseconds and as a percentage of the step.  The p99 is numpy's
``percentile`` (linear interpolation, as ``bench_service.py``), never below the median;
with 100 costs or fewer (``--iterations`` 105 or fewer, the default 100 included) it is
an interpolation between the two largest costs, not a tail of the distribution.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time

import numpy as np

from cassini.files import positive_float


def _rank(rank: int, port: int, args: argparse.Namespace, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    costs = {mode: _costs(args, ahead=mode == "ahead") for mode in MODES}
    with open(f"{out}.{rank}", "w") as f:
        json.dump(costs, f)
    # results on disk, then leave without the interpreter's teardown: under load gloo may
    # abort a rank there (SIGABRT) after its work is done, which fails mp.spawn's join
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


MODES = ("ahead", "sync")
#: iterations at the start of each exchange left out of the figures (start-up)
START_UP = 5


def _costs(args: argparse.Namespace, ahead: bool) -> list[float]:
    """Seconds ``wait()`` spent beyond sleeping, per iteration after start-up."""
    import torch.distributed as dist

    from cassini.torch.timeshift import ShiftSettings, TimeShift

    dist.barrier()
    slept: list[float] = []

    def sleep(dt: float) -> None:
        t0 = time.perf_counter()
        time.sleep(dt)
        slept.append(time.perf_counter() - t0)

    period = args.step_ms / 1e3 * 1.05
    grid = [time.time() + 1.0]
    dist.broadcast_object_list(grid, src=0)  # one epoch for both ranks
    epoch = grid[0]
    shift = TimeShift(ShiftSettings(True, 0.0, period, epoch), ahead=ahead, sleep=sleep)
    costs = []
    for _ in range(args.iterations):
        before = len(slept)
        t0 = time.perf_counter()
        shift.wait()
        spent = time.perf_counter() - t0
        costs.append(spent - sum(slept[before:]))
        time.sleep(args.step_ms / 1e3)  # the training step
    shift.close()
    return costs[START_UP:]  # after start-up


def iterations(text: str) -> int:
    """argparse ``type`` of ``--iterations``: more than the start-up iterations dropped."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value <= START_UP:
        raise argparse.ArgumentTypeError(
            f"must be at least {START_UP + 1} (the first {START_UP} are start-up and left "
            f"out), got {value}"
        )
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--iterations",
        type=iterations,
        default=100,
        help=f"training steps per exchange, at least {START_UP + 1}; the first {START_UP} "
        "(start-up) are left out (default 100)",
    )
    ap.add_argument(
        "--step-ms",
        type=positive_float,
        default=100.0,
        help="length of the simulated training step in milliseconds, above 0 (default 100)",
    )
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    return ap


def cost_figures(costs: list[float], step_s: float) -> dict[str, float]:
    """Median and p99 of ``costs`` (seconds), also as a percentage of a ``step_s`` step;
    the p99 by :func:`numpy.percentile` (linear), so it is never below the median."""
    med = float(np.median(costs))
    p99 = float(np.percentile(costs, 99))
    return {
        "median_s": med,
        "p99_s": p99,
        "median_pct_of_step": med / step_s * 100,
        "p99_pct_of_step": p99 / step_s * 100,
    }


def _spawn(port: int, args: argparse.Namespace, out: str) -> None:
    """Both ranks, to the end: each writes its costs to ``out.RANK``."""
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(port, args, out), nprocs=2, join=True)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the ranks' result files live in a folder removed at the end, also on failure
    with tempfile.TemporaryDirectory(prefix="bench_timeshift-") as tmp:
        out = os.path.join(tmp, "costs")
        _spawn(port, args, out)
        by_rank = {}
        for rank in (0, 1):
            with open(f"{out}.{rank}") as f:
                by_rank[rank] = json.load(f)
    step_s = args.step_ms / 1e3
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for rank in (0, 1):
        by_mode = by_rank[rank]
        for mode in MODES:
            row = cost_figures(by_mode[mode], step_s)
            med, p99 = row["median_s"], row["p99_s"]
            figures.setdefault(mode, {})[f"rank{rank}"] = row
            if not args.json:
                print(
                    f"rank {rank} {mode:5s}: agent cost per iteration median {med * 1e6:.0f} us, "
                    f"p99 {p99 * 1e6:.0f} us = {med / step_s * 100:.2f} % / "
                    f"{p99 / step_s * 100:.2f} % of a {args.step_ms:g} ms step"
                )
    if args.json:
        print(json.dumps({"step_s": step_s, "iterations": args.iterations, "modes": figures}))


if __name__ == "__main__":
    main()
