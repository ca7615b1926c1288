"""Fabric regimes at shared links: each a :class:`Fabric` class in the :data:`FABRICS`
table, which is the only place a new regime is added (``docs/extending.md``).

- ``fifo``: HTB at the link rate over one ``pfifo`` of ``buffer_packets`` packets.  Flows
  sharing it are not forced to fair shares: with a bandwidth-delay product of about one
  packet, the flow that starts first keeps most of the queue.
- ``fair``: one HTB class per job with an equal guaranteed rate and the link rate as its
  ceiling, each over its own ``pfifo``; stands in for a datacenter fabric whose rate
  control has converged to fair shares (DCQCN/DCTCP).
- ``ecn``: the ``fifo`` queue plus a BPF classifier on the egress that keeps a virtual
  queue (bytes in minus link rate times elapsed time) and marks ECN CE above a threshold
  (bytes), DCTCP style.  Hosts ask for ECN (``net.ipv4.tcp_ecn=1``).
- ``prio``: strict priority (the kernel has no ``prio`` or ``ets`` qdisc): an HTB class per
  priority 0 (highest) .. 7, the highest at the full link rate and the lower ones
  guaranteed almost nothing, borrowing what is left in priority order (HTB lends spare
  rate to the lowest ``prio`` first).  Packets are classified on the DS field; each job's
  workers run in a cgroup whose sock_ops program (``bpf/dscp_mark.bpf.c``) sets its
  class's DSCP on every socket (:func:`dscp_of`), so unmodified training jobs work.

The command builders are pure (they return argv lists) so they are tested without root.
"""

from __future__ import annotations

import os
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Protocol

MTU = 1500
ECN_SOURCE = Path(__file__).with_name("bpf") / "ecn_mark.bpf.c"
EBPF_DIR = Path(__file__).resolve().parent.parent / "ebpf"
DSCP_SOURCE = Path(__file__).with_name("bpf") / "dscp_mark.bpf.c"
ECN_PIN_DIR = Path("/sys/fs/bpf/testbed")
PRIORITY_LEVELS = 8  # classes of the prio fabric: 0 (highest) .. 7 (best effort, DSCP 0)
LOW_CLASS_SHARE = 0.001  # the rate a lower prio class is guaranteed (share of the link)


class QueueSettings(Protocol):
    """The configured sizes a regime reads (``testbed.topo.FabricSpec`` has them)."""

    buffer_packets: int  # packets per queue
    ecn_threshold_bytes: int  # the marker's virtual-queue threshold


class Fabric(ABC):
    """A queueing regime at the shared links: the tc commands it puts on a link
    direction's egress, the hosts' ECN setting, the congestion controls a run on it
    defaults to, and whether it needs the ECN marker program loaded."""

    name: ClassVar[str]
    host_ecn: ClassVar[int] = 2  # net.ipv4.tcp_ecn on the hosts: 1 ask for ECN, 2 accept it
    default_cc: ClassVar[str] = "cubic"  # a run's congestion control unless it names one
    mltcp_cc: ClassVar[str] = "mltcp_reno"  # the ``mltcp`` scheme's unless it names one
    needs_marker: ClassVar[bool] = False  # the ECN marker is loaded and configured per port
    marks_dscp: ClassVar[bool] = False  # each job's sockets carry its priority's DSCP

    @abstractmethod
    def commands(
        self,
        spec: QueueSettings,
        dev: str,
        rate_bps: float,
        job_sources: Sequence[Sequence[str]] = (),
        pinned_prog: Path | None = None,
    ) -> list[list[str]]:
        """tc commands that put this regime on ``dev``'s egress at ``rate_bps`` bits/s
        (``job_sources``: each job's source IPs; ``pinned_prog``: the loaded marker)."""


class FifoFabric(Fabric):
    name = "fifo"

    def commands(self, spec, dev, rate_bps, job_sources=(), pinned_prog=None):
        return fifo_commands(dev, rate_bps, spec.buffer_packets)


class FairFabric(Fabric):
    name = "fair"

    def commands(self, spec, dev, rate_bps, job_sources=(), pinned_prog=None):
        return fair_commands(dev, rate_bps, spec.buffer_packets, job_sources)


class EcnFabric(Fabric):
    name = "ecn"
    host_ecn = 1
    default_cc = "dctcp_bpf"
    mltcp_cc = "mltcp_dctcp"
    needs_marker = True

    def commands(self, spec, dev, rate_bps, job_sources=(), pinned_prog=None):
        if pinned_prog is None:
            raise ValueError("the ecn fabric needs the marker program (pinned_prog)")
        return fifo_commands(dev, rate_bps, spec.buffer_packets) + ecn_commands(dev, pinned_prog)


class PrioFabric(Fabric):
    name = "prio"
    marks_dscp = True

    def commands(self, spec, dev, rate_bps, job_sources=(), pinned_prog=None):
        return prio_commands(dev, rate_bps, spec.buffer_packets)


FABRICS: dict[str, Fabric] = {
    f.name: f for f in (FifoFabric(), FairFabric(), EcnFabric(), PrioFabric())
}
"""Every fabric regime by the name a config gives (``topology.fabric``)."""


def _burst(rate_bps: float) -> str:
    """A burst of a few packets (bytes): keeps HTB's shaping tight at these rates."""
    return str(max(4 * MTU, int(rate_bps / 8 * 0.001)))


def _htb_root(dev: str, rate_bps: float, default_class: str) -> list[list[str]]:
    rate, burst = f"{int(rate_bps)}bit", _burst(rate_bps)
    return [
        f"tc qdisc replace dev {dev} root handle 1: htb default {default_class} r2q 1000".split(),
        f"tc class add dev {dev} parent 1: classid 1:1 htb rate {rate} ceil {rate} "
        f"burst {burst} cburst {burst}".split(),
    ]


def fifo_commands(dev: str, rate_bps: float, buffer_packets: int) -> list[list[str]]:
    """One FIFO of ``buffer_packets`` shaped at ``rate_bps`` bits/s."""
    rate, burst = f"{int(rate_bps)}bit", _burst(rate_bps)
    return _htb_root(dev, rate_bps, "10") + [
        f"tc class add dev {dev} parent 1:1 classid 1:10 htb rate {rate} ceil {rate} "
        f"burst {burst} cburst {burst}".split(),
        f"tc qdisc add dev {dev} parent 1:10 handle 10: pfifo limit {buffer_packets}".split(),
    ]


def fair_commands(
    dev: str, rate_bps: float, buffer_packets: int, job_sources: Sequence[Sequence[str]]
) -> list[list[str]]:
    """An HTB class per job (its source IPs), each guaranteed an equal share of
    ``rate_bps`` and allowed up to all of it; unmatched packets (ACKs, ARP) share a small
    default class."""
    n = max(1, len(job_sources))
    reserve = 0.02 * rate_bps
    share = (rate_bps - reserve) / n
    burst, ceil = _burst(rate_bps), f"{int(rate_bps)}bit"
    cmds = _htb_root(dev, rate_bps, "ffff")
    classes = [("ffff", reserve, [])] + [
        (f"{10 + i:x}", share, list(srcs)) for i, srcs in enumerate(job_sources)
    ]
    for classid, guaranteed, sources in classes:
        prio = "0" if sources else "1"
        cmds += [
            f"tc class add dev {dev} parent 1:1 classid 1:{classid} htb "
            f"rate {int(guaranteed)}bit ceil {ceil} burst {burst} cburst {burst} "
            f"prio {prio}".split(),
            f"tc qdisc add dev {dev} parent 1:{classid} handle {classid}: pfifo "
            f"limit {buffer_packets}".split(),
        ]
        cmds += [
            f"tc filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip src "
            f"{src}/32 flowid 1:{classid}".split()
            for src in sources
        ]
    return cmds


def dscp_of(priority: int) -> int:
    """The DSCP of priority class ``priority`` (0 highest .. 7): the class selectors
    CS7 .. CS0 (``8 * (7 - priority)``), which real switches map to traffic classes 7 .. 0
    by default; priority 7 is DSCP 0, best effort."""
    if not 0 <= priority < PRIORITY_LEVELS:
        raise ValueError(f"priority must be 0..{PRIORITY_LEVELS - 1}, got {priority!r}")
    return 8 * (PRIORITY_LEVELS - 1 - priority)


def tos_of(priority: int) -> int:
    """The IP TOS byte carrying ``priority``'s DSCP (ECN bits zero)."""
    return dscp_of(priority) << 2


def prio_commands(dev: str, rate_bps: float, buffer_packets: int) -> list[list[str]]:
    """Strict priority at ``rate_bps`` bits/s: HTB class ``1:2p`` with ``prio p`` for each
    priority p, matched on the DS field (TOS byte ``tos_of(p)``); priority 0 is guaranteed
    the full rate, the others ``LOW_CLASS_SHARE`` of it and borrow the rest in priority
    order; unmarked packets go to priority 7 (DSCP 0)."""
    burst, ceil = _burst(rate_bps), f"{int(rate_bps)}bit"
    low = max(8_000, int(LOW_CLASS_SHARE * rate_bps))
    cmds = _htb_root(dev, rate_bps, f"{0x20 + PRIORITY_LEVELS - 1:x}")
    for p in range(PRIORITY_LEVELS):
        classid = f"{0x20 + p:x}"
        rate = int(rate_bps) if p == 0 else low
        cmds += [
            f"tc class add dev {dev} parent 1:1 classid 1:{classid} htb rate {rate}bit "
            f"ceil {ceil} burst {burst} cburst {burst} prio {p}".split(),
            f"tc qdisc add dev {dev} parent 1:{classid} handle {classid}: pfifo "
            f"limit {buffer_packets}".split(),
        ]
        if p < PRIORITY_LEVELS - 1:
            cmds.append(
                f"tc filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dsfield "
                f"{tos_of(p):#04x} 0xfc flowid 1:{classid}".split()
            )
    return cmds


def ecn_commands(dev: str, pinned_prog: Path) -> list[list[str]]:
    """Attach the pinned virtual-queue ECN marker to ``dev``'s egress."""
    return [
        ["tc", "qdisc", "replace", "dev", dev, "clsact"],
        [
            *f"tc filter replace dev {dev} egress prio 1 handle 1 bpf da pinned".split(),
            str(pinned_prog),
        ],  # fmt: skip
    ]


def commands(
    spec: QueueSettings,
    dev: str,
    rate_bps: float,
    job_sources: Sequence[Sequence[str]] = (),
    pinned_prog: Path | None = None,
) -> list[list[str]]:
    """All tc commands that put ``spec`` on the egress of ``dev``."""
    return FABRICS[spec.kind].commands(spec, dev, rate_bps, job_sources, pinned_prog)


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


class DscpMarker:
    """The ``prio`` fabric's DSCP marker: a cgroup sock_ops program built with clang,
    loaded once per priority class (its TOS byte in the instance's map) and attached to
    the cgroups of that class's jobs; :meth:`unload` detaches and unpins all."""

    def __init__(self, build_dir: Path) -> None:
        self.build_dir = build_dir
        self.obj = build_dir / "dscp_mark.bpf.o"
        self.tag = f"dscp-{os.getpid()}"
        self.loaded: dict[int, Path] = {}  # priority -> pinned program
        self.attached: list[tuple[Path, Path]] = []  # (cgroup, program)

    def build(self) -> None:
        self.build_dir.mkdir(parents=True, exist_ok=True)
        obj = str(self.obj.resolve())
        _run(["make", "-s", "-C", str(EBPF_DIR), f"DSCP_OBJ={obj}", obj])

    def program(self, priority: int) -> Path:
        """The pinned program marking ``priority``'s DSCP (loaded on first use)."""
        if priority not in self.loaded:
            if not self.obj.exists():
                self.build()
            ECN_PIN_DIR.mkdir(parents=True, exist_ok=True)
            prog = ECN_PIN_DIR / f"{self.tag}-{priority}"
            maps = ECN_PIN_DIR / f"{self.tag}-{priority}-maps"
            _run(["bpftool", "prog", "load", str(self.obj), str(prog), "type", "sockops",
                  "pinmaps", str(maps)])  # fmt: skip
            _run(["bpftool", "map", "update", "pinned", str(maps / "dscp_tos"),
                  "key", *_u32(0), "value", *_u32(tos_of(priority))])  # fmt: skip
            self.loaded[priority] = prog
        return self.loaded[priority]

    def attach(self, cgroup: Path, priority: int) -> None:
        """Mark every TCP socket opened in ``cgroup`` (a cgroup v2 directory) from now on
        with ``priority``'s DSCP (beside other sock_ops programs there, e.g. MLTCP's)."""
        prog = self.program(priority)
        _run(["bpftool", "cgroup", "attach", str(cgroup), "sock_ops", "pinned", str(prog),
              "multi"])  # fmt: skip
        self.attached.append((cgroup, prog))

    def unload(self) -> None:
        for cgroup, prog in self.attached:
            subprocess.run(["bpftool", "cgroup", "detach", str(cgroup), "sock_ops", "pinned",
                            str(prog)], capture_output=True)  # fmt: skip
        self.attached.clear()
        for prog in self.loaded.values():
            subprocess.run(["rm", "-rf", str(prog), f"{prog}-maps"], check=False)
        self.loaded.clear()


def _u32(x: int) -> list[str]:
    return [str(b) for b in x.to_bytes(4, "little")]


def _u64(x: int) -> list[str]:
    return [str(b) for b in x.to_bytes(8, "little")]


def _run(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {(r.stderr or r.stdout).strip()[-2000:]}")
    return r.stdout


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.fabric")
