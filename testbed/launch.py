"""The testbed's DDP job on real GPU nodes: one torchrun per node, NCCL over TCP sockets
(InfiniBand off, so the congestion control under study carries the gradients), the chosen
congestion control set on each node first.  ``testbed launch`` prints the commands; with
``--run`` it runs them over ssh in parallel.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time


def launch_commands(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(node, shell command) for every node; the first node is the rendezvous master."""
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()]
    if not nodes:
        raise SystemExit("testbed launch: --nodes needs at least one hostname")
    epoch = time.time() + 120 if args.period_s else 0.0  # shared start for the agent
    env = {"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket", "NCCL_DEBUG": "WARN"}
    if args.iface:
        env["NCCL_SOCKET_IFNAME"] = args.iface
    out = []
    for rank, node in enumerate(nodes):
        worker = [
            "torchrun",
            f"--nnodes={len(nodes)}",
            f"--node_rank={rank}",
            f"--nproc_per_node={args.gpus_per_node}",
            f"--master_addr={nodes[0]}",
            f"--master_port={args.port}",
            "-m",
            "testbed.ddp_worker",
            "--torchrun",
            "--iterations",
            str(args.iterations),
            "--width",
            str(args.width),
            "--layers",
            str(args.layers),
            "--shift-s",
            str(args.shift_s),
            "--period-s",
            str(args.period_s),
            "--epoch-s",
            f"{epoch:.3f}",
            "--out",
            args.out,
        ]
        cc = f"sudo sysctl -qw net.ipv4.tcp_congestion_control={shlex.quote(args.cc)}"
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        out.append((node, f"{cc} && {envs} {shlex.join(worker)}"))
    return out


def run_commands(cmds: list[tuple[str, str]]) -> int:
    """Run each command on its node over ssh, in parallel; returns the worst exit code."""
    procs = [(node, subprocess.Popen(["ssh", node, cmd])) for node, cmd in cmds]
    worst = 0
    for node, p in procs:
        code = p.wait()
        if code:
            print(f"testbed launch: {node} exited with {code}", file=sys.stderr)
        worst = max(worst, code)
    return worst
