"""The testbed's DDP job on real GPU nodes: one torchrun per node, NCCL over TCP sockets
(InfiniBand off, so the congestion control under study carries the gradients), the chosen
congestion control set on each node first.  ``testbed launch`` prints the commands; with
``--run`` it runs them over ssh in parallel.

NCCL's socket transport opens its own TCP connections (per peer and communicator,
``NCCL_SOCKET_NTHREADS`` x ``NCCL_NSOCKS_PERTHREAD`` of them) and never sets a congestion
control.  With an MLTCP congestion control (``mltcp_*``, ``dctcp_bpf``) each node therefore
loads it in exact mode, makes a cgroup for the job, has ``mltcp select --cgroup --job`` give
that cgroup's sockets the congestion control (before their SYN; ECN negotiated per socket
for the DCTCP ones) and tie their ports to the job, moves the launching shell into the
cgroup, and starts torchrun there with ``MLTCP_JOB`` naming the job for the trainer's
iteration marks (``mltcp.mark_iteration``; the trainer needs bpf(2) rights: root or
CAP_BPF).  Any other congestion control is set host-wide with sysctl, as before.

``--priority P`` (0 highest .. 7) marks the job for switches with strict-priority queues,
as the emulated ``prio`` fabric does: the job's cgroup (MLTCP's, or one of its own) gets
the sock_ops program ``testbed/bpf/dscp_mark.bpf.c`` (``make -C ebpf`` builds it into
``ebpf/dscp_mark.bpf.o``) with the TOS byte of P's DSCP
(class selector CS(7-P), :func:`testbed.fabric.dscp_of`), so every NCCL socket carries it
from its SYN on.  The switches then map DSCP to traffic class (CSn -> TC n by default on
most datacenter switches) and serve the classes in strict priority; the priority of a job
without ``--priority`` follows the Crux rule (:func:`cassini.priority.crux_levels`).

The commands run in the directory ``ssh node cmd`` starts in (the login's home): they
assume a checkout of this repository there, its package importable (``-m
testbed.ddp_worker``) and ``ebpf/`` under it (``--priority`` builds and loads
``ebpf/dscp_mark.bpf.o`` by that relative path).
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import subprocess
import sys
import time

from cassini.errors import InputError
from mltcp import variants

PORTS = (1, 65535)  # --port: a TCP port for torchrun's rendezvous


def node_names(nodes: str) -> list[str]:
    """The hostnames of ``--nodes`` (comma-separated); InputError naming the flag when
    there are none."""
    names = [n.strip() for n in nodes.split(",") if n.strip()]
    if not names:
        raise InputError("--nodes", f"at least one hostname (comma-separated), got {nodes!r}")
    return names


def check_args(args: argparse.Namespace) -> None:
    """Refuse ``testbed launch`` flags that would fail on the nodes or mean something
    else, with an InputError naming the flag."""
    from testbed.host import known_congestion_control
    from testbed.model_names import MODEL_NAMES

    node_names(args.nodes)
    for flag, value in (("--gpus-per-node", args.gpus_per_node),
                        ("--iterations", args.iterations), ("--width", args.width),
                        ("--layers", args.layers)):  # fmt: skip
        if value < 1:
            raise InputError(flag, f"at least 1, got {value}")
    if not PORTS[0] <= args.port <= PORTS[1]:
        raise InputError("--port", f"a TCP port {PORTS[0]} .. {PORTS[1]}, got {args.port}")
    if args.model is not None and args.model not in MODEL_NAMES:
        raise InputError("--model", f"one of {', '.join(MODEL_NAMES)}, got {args.model!r}")
    if args.compute == "replay" and args.model is None:
        raise InputError("--compute", "replay needs --model (the MLP has no calibration)")
    if not (math.isfinite(args.scale) and 0 < args.scale <= 1):
        raise InputError("--scale", f"a share of the parameters in (0, 1], got {args.scale:g}")
    for flag, value in (("--shift-s", args.shift_s), ("--period-s", args.period_s)):
        if not (math.isfinite(value) and value >= 0):
            raise InputError(flag, f"seconds >= 0, got {value:g}")
    if args.period_s and args.shift_s >= args.period_s:
        raise InputError(
            "--shift-s", f"must be < --period-s ({args.period_s:g}), got {args.shift_s:g}"
        )
    known_congestion_control(args.cc, "--cc")


def launch_commands(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(node, shell command) for every node; the first node is the rendezvous master."""
    nodes = node_names(args.nodes)
    epoch = time.time() + 120 if args.period_s else 0.0  # shared start for the agent
    env = {
        "NCCL_IB_DISABLE": "1",
        "NCCL_NET": "Socket",
        "NCCL_DEBUG": "WARN",
        # NCCL's defaults, stated: the connections per peer the cgroup selection must catch
        "NCCL_SOCKET_NTHREADS": str(getattr(args, "nccl_socket_nthreads", None) or 1),
        "NCCL_NSOCKS_PERTHREAD": str(getattr(args, "nccl_nsocks_perthread", None) or 1),
    }
    if args.iface:
        env["NCCL_SOCKET_IFNAME"] = args.iface
    job = getattr(args, "job", None) or f"ddp-{nodes[0]}-{args.port}"
    if is_mltcp(args.cc):
        env["MLTCP_JOB"] = job
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
        if getattr(args, "model", None):  # a real architecture instead of the MLP
            worker += ["--model", args.model, "--scale", str(args.scale)]
            worker += ["--compute", args.compute]
        if is_mltcp(args.cc):
            cc = mltcp_setup(args.cc, job)
        else:
            cc = f"sudo sysctl -qw net.ipv4.tcp_congestion_control={shlex.quote(args.cc)}"
        priority = getattr(args, "priority", None)
        if priority is not None:
            cc = f"{cc} && {dscp_setup(priority, job, in_cgroup=is_mltcp(args.cc))}"
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        out.append((node, f"{cc} && {envs} {shlex.join(worker)}"))
    return out


def is_mltcp(cc: str) -> bool:
    """Is ``cc`` one of our congestion controls (loaded with ``mltcp load``)?"""
    return variants.by_cc(cc) is not None


def mltcp_setup(cc: str, job: str) -> str:
    """Shell commands for one node: load ``cc`` (exact mode), a cgroup v2 for ``job``, its
    sockets given ``cc`` and tied to ``job``, and this shell moved into it."""
    name = "mltcp-" + re.sub(r"[^A-Za-z0-9_.-]", "_", job)
    mltcp = 'sudo env PATH="$PATH" mltcp'
    q = shlex.quote
    return " && ".join(
        [
            f"CG=$(awk '$3==\"cgroup2\"{{print $2; exit}}' /proc/mounts)/{name}",
            'sudo mkdir -p "$CG"',
            f"{mltcp} load --variant {variants.by_cc(cc).name} --mode exact",
            f'{mltcp} select {q(cc)} --cgroup "$CG" --job {q(job)}',
            'echo $$ | sudo tee "$CG/cgroup.procs" >/dev/null',
        ]
    )


def dscp_setup(priority: int, job: str, in_cgroup: bool = False) -> str:
    """Shell commands for one node: every TCP socket of ``job``'s cgroup marked with
    ``priority``'s DSCP (a sock_ops program built from ``ebpf/``, its TOS byte in its
    map), and this shell in that cgroup.  ``in_cgroup``: the shell is already in the
    job's cgroup (``$CG``, MLTCP's)."""
    from testbed.fabric import tos_of

    tos = tos_of(priority)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", job)
    pin = f"/sys/fs/bpf/dscp-{name}"
    steps = [] if in_cgroup else [
        f"CG=$(awk '$3==\"cgroup2\"{{print $2; exit}}' /proc/mounts)/prio-{name}",
        'sudo mkdir -p "$CG"',
    ]  # fmt: skip
    steps += [
        "sudo make -s -C ebpf dscp_mark.bpf.o",
        f"sudo rm -rf {pin} {pin}-maps",
        f"sudo bpftool prog load ebpf/dscp_mark.bpf.o {pin} type sockops pinmaps {pin}-maps",
        f"sudo bpftool map update pinned {pin}-maps/dscp_tos key 0 0 0 0 value {tos} 0 0 0",
        f'sudo bpftool cgroup attach "$CG" sock_ops pinned {pin} multi',
    ]
    if not in_cgroup:
        steps.append('echo $$ | sudo tee "$CG/cgroup.procs" >/dev/null')
    return " && ".join(steps)


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


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.launch")
