#!/usr/bin/env python3
"""Experiment 2 — MLTCP convergence (MLTCP, HotNets 2024: the offset map).

Two synthetic jobs (50 % communication share) start together on one bottleneck.  Per
iteration it records the offset between their communication phases (x, as a fraction of
a phase) and their iteration times, for the base congestion control and for MLTCP, and
draws the reference model's predicted offsets (x' = x + k x (1-x)/(1+kx), from the
fluid model with the measured phase lengths) on the same axes.  A model sweep over slope,
intercept and start offsets maps the iterations needed to interleave.

    sudo python experiments/mltcp_convergence.py              # ecn fabric: dctcp vs mltcp_dctcp
    sudo python experiments/mltcp_convergence.py --full       # + fifo: reno vs mltcp_reno, slopes
    python experiments/mltcp_convergence.py --model-only      # the sweep alone, no root

Writes results/mltcp_convergence/results.json, convergence.png and sweep.png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import out_dir, progress, require_root, run_config, table, write_json  # noqa: E402
from mltcp.model import simulate, two_job_offsets  # noqa: E402
from mltcp.policy import MltcpParams  # noqa: E402
from testbed.measure import comm_overlap, read_log  # noqa: E402

BOTTLENECK = 200_000_000


def config(fabric: str, base_cc: str, mltcp_cc: str, iterations: int) -> dict[str, Any]:
    job = {"compute_s": 0.05, "bytes": 1_250_000, "iterations": iterations}
    return {
        "topology": {
            "kind": "dumbbell",
            "pairs": 2,
            "bottleneck_bps": BOTTLENECK,
            "access_bps": 1_000_000_000,
            "fabric": fabric,
            "buffer_packets": 1000,
            "ecn_threshold_bytes": 30_000,
        },
        "jobs": [
            {"id": "a", "hosts": ["h1", "h3"], **job},
            {"id": "b", "hosts": ["h2", "h4"], **job},
        ],
        "schemes": [
            "ideal",
            {"scheme": "baseline", "name": base_cc, "cc": base_cc},
            {"scheme": "mltcp", "name": mltcp_cc, "cc": mltcp_cc},
        ],
        "cc": base_cc,
    }


def interleaved_at(overlap: list[float], threshold: float = 0.2, hold: int = 3) -> int | None:
    for k in range(len(overlap) - hold + 1):
        if all(o < threshold for o in overlap[k : k + hold]):
            return k
    return None


def measured_offsets(logs: dict[str, list[dict]], comm_s: float) -> list[float]:
    a, b = logs["a"], logs["b"]
    return [
        min(1.0, abs(y["comm_start"] - x["comm_start"]) / comm_s)
        for x, y in zip(a, b, strict=False)
    ]


def model_curve(
    x0: float, compute_s: float, comm_s: float, iterations: int, params: MltcpParams
) -> list[float]:
    start = np.array([[0.0, x0 * comm_s]])
    r = simulate(
        np.full((1, 2), compute_s),
        np.full((1, 2), comm_s),
        start,
        iterations,
        "mltcp",
        params.slope,
        params.intercept,
    )
    return two_job_offsets(r, comm_s / (compute_s + comm_s), compute_s + comm_s)[0].tolist()


def sweep(iterations: int = 30) -> dict[str, Any]:
    """Model: iterations to interleave over slope x intercept, for three start offsets."""
    slopes = np.array([0.25, 0.5, 1.0, 1.5, 2.0, 3.0])
    intercepts = np.array([0.25, 0.5, 1.0])
    offsets = np.array([0.02, 0.1, 0.3])
    grid = np.array(np.meshgrid(slopes, intercepts, offsets, indexing="ij")).reshape(3, -1).T
    m = len(grid)
    r = simulate(
        np.full((m, 2), 0.05),
        np.full((m, 2), 0.05),
        np.stack([np.zeros(m), grid[:, 2] * 0.05], axis=1),
        iterations,
        "mltcp",
        grid[:, 0],
        grid[:, 1],
    )
    k = r.iterations_to_interleave()
    return {
        "slopes": slopes.tolist(),
        "intercepts": intercepts.tolist(),
        "offsets": offsets.tolist(),
        "configs": m,
        "iterations_to_interleave": k.reshape(len(slopes), len(intercepts), len(offsets)).tolist(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--model-only", action="store_true", help="only the model sweep")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = out_dir("mltcp_convergence", args.out)
    progress("model sweep (slope x intercept x start offset)")
    report: dict[str, Any] = {"sweep": sweep(), "runs": {}}
    plot_sweep(report["sweep"], out / "sweep.png")
    if not args.model_only:
        require_root()
        from mltcp import loader

        loader.load("all")
        params = loader.get_params()
        cases = [("ecn", "dctcp_bpf", "mltcp_dctcp")]
        if args.full:
            cases.append(("fifo", "reno", "mltcp_reno"))
        rows = []
        for fabric, base, ml in cases:
            res = run_config(
                config(fabric, base, ml, args.iterations), out / fabric, f"{fabric}: {base} vs {ml}"
            )
            profile = res["schemes"]["ideal"]["profiles"]["a"]
            comm_s = profile["phases"][0]["duration_s"]
            compute_s = profile["phases"][0]["start_s"]
            ideal = statistics.mean(
                s["mean_s"] for s in res["schemes"]["ideal"]["summary"].values()
            )
            run: dict[str, Any] = {"comm_s": comm_s, "compute_s": compute_s, "schemes": {}}
            for name in (base, ml):
                logs = {j: read_log(out / fabric / name / f"{j}-rank0.jsonl") for j in ("a", "b")}
                overlap = comm_overlap(logs)
                offsets = measured_offsets(logs, comm_s)
                times = [
                    t
                    for j in ("a", "b")
                    for t in res["schemes"][name]["jobs"][j]["iteration_times_s"]
                ]
                last = [
                    t
                    for j in ("a", "b")
                    for t in res["schemes"][name]["jobs"][j]["iteration_times_s"][-10:]
                ]
                at = interleaved_at(overlap)
                run["schemes"][name] = {
                    "offsets": offsets,
                    "overlap": overlap,
                    "interleaved_at": at,
                    "iteration_times_s": {
                        j: res["schemes"][name]["jobs"][j]["iteration_times_s"] for j in ("a", "b")
                    },
                }
                rows.append(
                    {
                        "fabric": fabric,
                        "scheme": name,
                        "mean_vs_ideal": statistics.mean(times) / ideal,
                        "last10_vs_ideal": statistics.mean(last) / ideal,
                        "interleaved_at": "never" if at is None else at,
                    }
                )
            first = next((x for x in run["schemes"][ml]["offsets"] if x > 0.005), 0.01)
            run["model_offsets"] = model_curve(first, compute_s, comm_s, args.iterations, params)
            report["runs"][fabric] = run
            write_json(out / "results.json", report)
        print(
            table(
                rows,
                [
                    ("fabric", "fabric", "s"),
                    ("scheme", "scheme", "s"),
                    ("mean_vs_ideal", "mean/ideal", ".2f"),
                    ("last10_vs_ideal", "last 10/ideal", ".2f"),
                    ("interleaved_at", "interleaved at iteration", ""),
                ],
            )
        )
        report["rows"] = rows
        plot_runs(report["runs"], out / "convergence.png")
    write_json(out / "results.json", report)
    s = report["sweep"]
    k = np.array(s["iterations_to_interleave"])
    print(
        f"model sweep ({s['configs']} configurations): iterations to interleave from a 10 % "
        f"offset, intercept 0.5: "
        + ", ".join(f"slope {sl}: {k[i, 1, 1]}" for i, sl in enumerate(s["slopes"]))
    )
    print(f"results: {out / 'results.json'}  plots: {out}/*.png")
    return 0


def plot_runs(runs: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 2, figsize=(11, 3.6 * len(runs)), squeeze=False)
    for row, (fabric, run) in enumerate(runs.items()):
        ax_x, ax_t = axes[row]
        for name, s in run["schemes"].items():
            ax_x.plot(s["offsets"], marker="o", ms=3, label=f"{name} (measured)")
            ax_t.plot([t * 1e3 for t in s["iteration_times_s"]["a"]], label=name)
        ax_x.plot(run["model_offsets"], "k--", label="model (MLTCP)")
        ax_x.set_ylabel("offset x (fraction of a comm phase)")
        ax_x.set_xlabel("iteration")
        ax_x.set_title(f"{fabric}: offset between the jobs")
        ax_x.legend(fontsize=7)
        ax_t.set_ylabel("iteration time, job a (ms)")
        ax_t.set_xlabel("iteration")
        ax_t.set_title(f"{fabric}: iteration time")
        ax_t.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_sweep(s: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = np.array(s["iterations_to_interleave"], float)
    k[k < 0] = np.nan
    fig, axes = plt.subplots(1, len(s["offsets"]), figsize=(4 * len(s["offsets"]), 3.2))
    for i, (ax, x0) in enumerate(zip(axes, s["offsets"], strict=True)):
        im = ax.imshow(k[:, :, i].T, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(s["slopes"])), s["slopes"])
        ax.set_yticks(range(len(s["intercepts"])), s["intercepts"])
        ax.set_xlabel("slope")
        ax.set_ylabel("intercept")
        ax.set_title(f"start offset {x0}")
        fig.colorbar(im, ax=ax, label="iterations to interleave")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
