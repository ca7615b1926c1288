#!/usr/bin/env python3
"""Benchmark: MLTCP's cost on a bulk flow.  One iperf3 flow across a veth pair between two
network namespaces (HTB-shaped at --rate-mbps, or unshaped with 0), alternating kernel
`reno` and `mltcp_reno` for --rounds rounds in the same run; prints the throughput ratio
and the BPF run time per call of the mltcp_reno programs (kernel.bpf_stats_enabled).

    sudo python benchmarks/bench_mltcp_overhead.py [--rate-mbps 500] [--seconds 4] [--rounds 3]
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

from mltcp import loader  # noqa: E402

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


def iperf(cc: str, seconds: int) -> float:
    out = sh(
        "ip", "netns", "exec", A, "iperf3", "-c", "10.212.0.2", "-t", str(seconds), "-C", cc, "-J"
    )
    return json.loads(out)["end"]["sum_received"]["bits_per_second"]


def prog_stats() -> tuple[int, int]:
    progs = json.loads(sh("bpftool", "-j", "prog", "show"))
    ns = cnt = 0
    for p in progs:
        if p.get("name", "").startswith("mltcp_reno"):
            ns += p.get("run_time_ns", 0)
            cnt += p.get("run_cnt", 0)
    return ns, cnt


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate-mbps", type=int, default=500)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    loader.load("reno")
    teardown()
    server = None
    try:
        setup(args.rate_mbps)
        server = subprocess.Popen(
            ["ip", "netns", "exec", B, "iperf3", "-s"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
        results: dict[str, list[float]] = {"reno": [], "mltcp_reno": []}
        ns0, cnt0 = prog_stats()
        for _ in range(args.rounds):
            for cc in results:
                results[cc].append(iperf(cc, args.seconds))
        ns1, cnt1 = prog_stats()
    finally:
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("0")
        if server:
            server.kill()
        teardown()
    reno, ml = statistics.mean(results["reno"]), statistics.mean(results["mltcp_reno"])
    calls = cnt1 - cnt0
    print(
        f"link {'unshaped' if not args.rate_mbps else f'{args.rate_mbps} Mbit/s'}, "
        f"{args.rounds} rounds of {args.seconds} s"
    )
    print(
        f"reno       {reno / 1e6:8.1f} Mbit/s  (runs: "
        + ", ".join(f"{x / 1e6:.0f}" for x in results["reno"])
        + ")"
    )
    print(
        f"mltcp_reno {ml / 1e6:8.1f} Mbit/s  (runs: "
        + ", ".join(f"{x / 1e6:.0f}" for x in results["mltcp_reno"])
        + ")"
    )
    print(f"throughput ratio mltcp_reno / reno: {ml / reno:.3f}")
    if calls:
        print(f"BPF: {calls} calls, {(ns1 - ns0) / calls:.0f} ns per call on average")
    return 0


if __name__ == "__main__":
    sys.exit(main())
