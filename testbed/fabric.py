"""Fabric regimes at shared links, as tc commands on a link direction's egress interface.

- ``fifo``: HTB at the link rate over one ``pfifo`` of ``buffer_packets`` packets.  Flows
  sharing it are not forced to fair shares: with a bandwidth-delay product of about one
  packet, the flow that starts first keeps most of the queue.
- ``fair``: one HTB class per job with an equal guaranteed rate and the link rate as its
  ceiling, each over its own ``pfifo``; stands in for a datacenter fabric whose rate
  control has converged to fair shares (DCQCN/DCTCP).
- ``ecn``: the ``fifo`` queue plus a BPF classifier on the egress that keeps a virtual
  queue (bytes in minus link rate times elapsed time) and marks ECN CE above a threshold
  (bytes), DCTCP style.  Hosts must enable ECN (``net.ipv4.tcp_ecn=1``).

The command builders are pure (they return argv lists) so they are tested without root.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from testbed.topo import FabricSpec

MTU = 1500
ECN_SOURCE = Path(__file__).with_name("bpf") / "ecn_mark.bpf.c"
EBPF_DIR = Path(__file__).resolve().parent.parent / "ebpf"
ECN_PIN_DIR = Path("/sys/fs/bpf/testbed")


def _htb_root(dev: str, rate_bps: float, default_class: str) -> list[list[str]]:
    rate = f"{int(rate_bps)}bit"
    # a burst of a few packets keeps HTB's shaping tight at these rates
    burst = str(max(4 * MTU, int(rate_bps / 8 * 0.001)))
    return [
        [
            "tc",
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "handle",
            "1:",
            "htb",
            "default",
            default_class,
            "r2q",
            "1000",
        ],
        [
            "tc",
            "class",
            "add",
            "dev",
            dev,
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            rate,
            "ceil",
            rate,
            "burst",
            burst,
            "cburst",
            burst,
        ],
    ]


def fifo_commands(dev: str, rate_bps: float, buffer_packets: int) -> list[list[str]]:
    """One FIFO of ``buffer_packets`` shaped at ``rate_bps`` bits/s."""
    cmds = _htb_root(dev, rate_bps, "10")
    rate = f"{int(rate_bps)}bit"
    burst = str(max(4 * MTU, int(rate_bps / 8 * 0.001)))
    cmds += [
        [
            "tc",
            "class",
            "add",
            "dev",
            dev,
            "parent",
            "1:1",
            "classid",
            "1:10",
            "htb",
            "rate",
            rate,
            "ceil",
            rate,
            "burst",
            burst,
            "cburst",
            burst,
        ],
        [
            "tc",
            "qdisc",
            "add",
            "dev",
            dev,
            "parent",
            "1:10",
            "handle",
            "10:",
            "pfifo",
            "limit",
            str(buffer_packets),
        ],
    ]
    return cmds


def fair_commands(
    dev: str, rate_bps: float, buffer_packets: int, job_sources: Sequence[Sequence[str]]
) -> list[list[str]]:
    """An HTB class per job (its source IPs), each guaranteed an equal share of
    ``rate_bps`` and allowed up to all of it; unmatched packets (ACKs, ARP) share a small
    default class."""
    n = max(1, len(job_sources))
    reserve = 0.02 * rate_bps
    share = (rate_bps - reserve) / n
    burst = str(max(4 * MTU, int(rate_bps / 8 * 0.001)))
    cmds = _htb_root(dev, rate_bps, "ffff")
    classes = [("ffff", reserve, [])] + [
        (f"{10 + i:x}", share, list(srcs)) for i, srcs in enumerate(job_sources)
    ]
    for classid, guaranteed, sources in classes:
        cmds += [
            [
                "tc",
                "class",
                "add",
                "dev",
                dev,
                "parent",
                "1:1",
                "classid",
                f"1:{classid}",
                "htb",
                "rate",
                f"{int(guaranteed)}bit",
                "ceil",
                f"{int(rate_bps)}bit",
                "burst",
                burst,
                "cburst",
                burst,
                "prio",
                "0" if sources else "1",
            ],
            [
                "tc",
                "qdisc",
                "add",
                "dev",
                dev,
                "parent",
                f"1:{classid}",
                "handle",
                f"{classid}:",
                "pfifo",
                "limit",
                str(buffer_packets),
            ],
        ]
        for src in sources:
            cmds.append(
                [
                    "tc",
                    "filter",
                    "add",
                    "dev",
                    dev,
                    "parent",
                    "1:",
                    "protocol",
                    "ip",
                    "prio",
                    "1",
                    "u32",
                    "match",
                    "ip",
                    "src",
                    f"{src}/32",
                    "flowid",
                    f"1:{classid}",
                ]
            )
    return cmds


def ecn_commands(dev: str, pinned_prog: Path) -> list[list[str]]:
    """Attach the pinned virtual-queue ECN marker to ``dev``'s egress."""
    return [
        ["tc", "qdisc", "replace", "dev", dev, "clsact"],
        [
            "tc",
            "filter",
            "replace",
            "dev",
            dev,
            "egress",
            "prio",
            "1",
            "handle",
            "1",
            "bpf",
            "da",
            "pinned",
            str(pinned_prog),
        ],
    ]


def commands(
    spec: FabricSpec,
    dev: str,
    rate_bps: float,
    job_sources: Sequence[Sequence[str]] = (),
    pinned_prog: Path | None = None,
) -> list[list[str]]:
    """All tc commands that put ``spec`` on the egress of ``dev``."""
    if spec.kind == "fair":
        return fair_commands(dev, rate_bps, spec.buffer_packets, job_sources)
    cmds = fifo_commands(dev, rate_bps, spec.buffer_packets)
    if spec.kind == "ecn":
        if pinned_prog is None:
            raise ValueError("the ecn fabric needs the marker program (pinned_prog)")
        cmds += ecn_commands(dev, pinned_prog)
    return cmds


def shaper_commands(dev: str, rate_bps: float, buffer_packets: int = 1000) -> list[list[str]]:
    """A plain access-link shaper (HTB over a deep FIFO)."""
    return fifo_commands(dev, rate_bps, buffer_packets)


def run_commands(cmds: list[list[str]]) -> None:
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


class EcnMarker:
    """The virtual-queue ECN marker: built with clang, loaded and pinned once, configured
    per interface (rate, threshold) in a map keyed by ifindex."""

    def __init__(self, build_dir: Path) -> None:
        self.build_dir = build_dir
        self.obj = build_dir / "ecn_mark.bpf.o"
        self.prog = ECN_PIN_DIR / "ecn_mark"
        self.maps = ECN_PIN_DIR / "ecn_maps"

    def load(self) -> None:
        self.build_dir.mkdir(parents=True, exist_ok=True)
        # built by ebpf/Makefile (architecture detected there), into our build directory
        obj = str(self.obj.resolve())
        _run(["make", "-s", "-C", str(EBPF_DIR), f"ECN_OBJ={obj}", obj])
        self.unload()
        ECN_PIN_DIR.mkdir(parents=True, exist_ok=True)
        _run(
            [
                "bpftool",
                "prog",
                "load",
                str(self.obj),
                str(self.prog),
                "type",
                "classifier",
                "pinmaps",
                str(self.maps),
            ]
        )

    def configure(self, ifindex: int, rate_bps: float, threshold_bytes: int) -> None:
        key = _u32(ifindex)
        value = _u64(int(rate_bps)) + _u64(threshold_bytes)
        _run(
            [
                "bpftool",
                "map",
                "update",
                "pinned",
                str(self.maps / "ecn_config"),
                "key",
                *key,
                "value",
                *value,
            ]
        )

    def marks(self) -> dict[int, int]:
        """CE marks per ifindex so far."""
        import json

        out = _run(["bpftool", "-j", "map", "dump", "pinned", str(self.maps / "ecn_state")])
        result = {}
        for entry in json.loads(out or "[]"):
            formatted = entry.get("formatted", {})
            value = formatted.get("value", {})
            if formatted:
                result[int(formatted["key"])] = int(value.get("marks", 0))
        return result

    def unload(self) -> None:
        for p in (self.prog, self.maps):
            subprocess.run(["rm", "-rf", str(p)], check=False)


def _u32(x: int) -> list[str]:
    return [str(b) for b in x.to_bytes(4, "little")]


def _u64(x: int) -> list[str]:
    return [str(b) for b in x.to_bytes(8, "little")]


def _run(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {(r.stderr or r.stdout).strip()[-2000:]}")
    return r.stdout
