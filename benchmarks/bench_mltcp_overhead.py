#!/usr/bin/env python3
"""Benchmark: MLTCP's cost on bulk flows.  --flows iperf3 flows (default 100, one process)
across a veth pair between two network namespaces (HTB-shaped at --rate-mbps, or
unshaped with 0), each congestion control in turn for --rounds rounds in the same run:
the kernel's `reno` and `cubic`, our `mltcp_reno`, `mltcp_cubic`, `dctcp_bpf` and
`mltcp_dctcp`.  Prints each one's throughput, the ratios mltcp_reno/reno,
mltcp_cubic/cubic, dctcp_bpf/reno and mltcp_dctcp/dctcp_bpf (target >= 0.97), and the BPF
run time per call of each BPF congestion control's programs (kernel.bpf_stats_enabled).

    sudo .venv/bin/python benchmarks/bench_mltcp_overhead.py [--flows 100] [--rate-mbps 500]
        [--seconds 4] [--rounds 3] [--json]

Needs root (network namespaces, BPF); the flags are checked before anything is set up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cassini.files import non_negative_int, positive_int  # noqa: E402
from mltcp import admin  # noqa: E402

A, B = "mlt_bench_a", "mlt_bench_b"


def sh(*cmd: str, check: bool = True) -> str:
    return subprocess.run(cmd, check=check, capture_output=True, text=True).stdout


def setup(rate_mbps: int) -> None:
    sh("ip", "netns", "add", A)
    sh("ip", "netns", "add", B)
    sh("ip", "link", "add", "mltb_a", "netns", A, "type", "veth", "peer", "mltb_b", "netns", B)
    for ns, dev, ip in ((A, "mltb_a", "10.212.0.1/24"), (B, "mltb_b", "10.212.0.2/24")):
        sh("ip", "-n", ns, "addr", "add", ip, "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", check=False)
    if rate_mbps:
        sh(
            "ip",
            "netns",
            "exec",
            A,
            "tc",
            "qdisc",
            "add",
            "dev",
            "mltb_a",
            "root",
            "handle",
            "1:",
            "htb",
            "default",
            "1",
        )
        sh(
            "ip",
            "netns",
            "exec",
            A,
            "tc",
            "class",
            "add",
            "dev",
            "mltb_a",
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            f"{rate_mbps}mbit",
            "ceil",
            f"{rate_mbps}mbit",
        )


def teardown() -> None:
    subprocess.run(["ip", "netns", "del", A], capture_output=True)
    subprocess.run(["ip", "netns", "del", B], capture_output=True)


CCS = ["reno", "mltcp_reno", "cubic", "mltcp_cubic", "dctcp_bpf", "mltcp_dctcp"]
RATIOS = [  # (ours, reference)
    ("mltcp_reno", "reno"),
    ("mltcp_cubic", "cubic"),
    ("dctcp_bpf", "reno"),
    ("mltcp_dctcp", "dctcp_bpf"),
]


def iperf(cc: str, seconds: int, flows: int) -> float:
    out = sh(
        "ip", "netns", "exec", A, "iperf3", "-c", "10.212.0.2", "-t", str(seconds),
        "-P", str(flows), "-C", cc, "-J",
    )  # fmt: skip
    return json.loads(out)["end"]["sum_received"]["bits_per_second"]


def prog_stats(prefix: str) -> tuple[int, int]:
    """(run time ns, calls) summed over the programs whose name starts with ``prefix``
    (program names are cut at 15 characters: mltcp_reno_cong, dctcp_bpf_init, ...)."""
    progs = json.loads(sh("bpftool", "-j", "prog", "show"))
    ns = cnt = 0
    for p in progs:
        if p.get("type") == "struct_ops" and p.get("name", "").startswith(prefix[:15]):
            ns += p.get("run_time_ns", 0)
            cnt += p.get("run_cnt", 0)
    return ns, cnt


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--flows",
        type=positive_int,
        default=100,
        help="parallel iperf3 flows (one iperf3 process), >= 1 (default 100)",
    )
    ap.add_argument(
        "--rate-mbps",
        type=non_negative_int,
        default=500,
        help="HTB rate of the link in Mbit/s, 0 for an unshaped link (default 500)",
    )
    ap.add_argument(
        "--seconds",
        type=positive_int,
        default=4,
        help="seconds of each iperf3 run, >= 1 (default 4)",
    )
    ap.add_argument(
        "--rounds",
        type=positive_int,
        default=3,
        help="rounds over every congestion control, >= 1 (the mean is reported; default 3)",
    )
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)  # every flag checked before any network setup
    admin.load("all")
    teardown()
    server = None
    results: dict[str, list[float]] = {cc: [] for cc in CCS}
    bpf: dict[str, list[int]] = {cc: [0, 0] for cc in CCS if cc not in ("reno", "cubic")}
    try:
        setup(args.rate_mbps)
        server = subprocess.Popen(
            ["ip", "netns", "exec", B, "iperf3", "-s"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
        for _ in range(args.rounds):
            for cc in CCS:
                before = prog_stats(cc) if cc in bpf else (0, 0)
                results[cc].append(iperf(cc, args.seconds, args.flows))
                if cc in bpf:
                    after = prog_stats(cc)
                    bpf[cc][0] += after[0] - before[0]
                    bpf[cc][1] += after[1] - before[1]
    finally:
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("0")
        if server:
            server.kill()
        teardown()
    mean = {cc: statistics.mean(v) for cc, v in results.items()}
    link = "unshaped" if not args.rate_mbps else f"{args.rate_mbps} Mbit/s"
    print(f"link {link}, {args.flows} flows, {args.rounds} rounds of {args.seconds} s per CC")
    for cc in CCS:
        runs = ", ".join(f"{x / 1e6:.0f}" for x in results[cc])
        per_call = f"  {bpf[cc][0] / bpf[cc][1]:6.0f} ns/call" if bpf.get(cc, [0, 0])[1] else ""
        print(f"{cc:12s} {mean[cc] / 1e6:8.1f} Mbit/s{per_call}  (runs: {runs})")
    for ours, ref in RATIOS:
        print(f"throughput ratio {ours} / {ref}: {mean[ours] / mean[ref]:.3f}")
    if args.json:
        report = {
            "flows": args.flows,
            "rate_mbps": args.rate_mbps,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "runs_bps": results,
            "ns_per_call": {cc: (v[0] / v[1] if v[1] else None) for cc, v in bpf.items()},
            "ratios": {f"{o}/{r}": mean[o] / mean[r] for o, r in RATIOS},
        }
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
