"""A running emulated cluster: Mininet hosts, Linux bridges, HTB-shaped access links and
the fabric regime on shared links.  Everything it creates is torn down on exit, on
exceptions and on signals; a crashed run's leftovers go with :func:`cleanup`.

Switches (bridges) live in the init network namespace, so the fabric's qdiscs and the
link byte counters (read with pyroute2) are on the switch ports; hosts are Mininet
namespaces whose congestion control is set per host.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed import cgroups, hostlock
from testbed import fabric as fab
from testbed.host import (
    TestbedError,
    allow_congestion_control,
    check_prerequisites,
    ensure_bpffs,
)
from testbed.host import wait_all as wait_all  # re-exported: testbed.net.wait_all
from testbed.topo import LinkDirection, TestbedTopology

STATE_DIR = Path("/run/testbed")


class EmulatedCluster:
    """Context manager: ``with EmulatedCluster(topo, job_sources) as c: c.popen("h1", [...])``.

    Parameters
    ----------
    topo : the topology and its fabric regime.
    job_sources : for the ``fair`` fabric, each job's hosts (one HTB class per job).
    cc : congestion control of every host (namespace sysctl).
    rto_min_s : minimum TCP retransmission timeout on the hosts' routes (seconds).
    build_dir : where the ECN marker is compiled.
    """

    def __init__(
        self,
        topo: TestbedTopology,
        job_sources: Sequence[Sequence[str]] = (),
        cc: str = "cubic",
        build_dir: Path | str = "build",
        rto_min_s: float = 0.002,
    ) -> None:
        self.topo = topo
        self.job_sources = [list(h) for h in job_sources]
        self.cc = cc
        self.rto_min_s = rto_min_s
        self.build_dir = Path(build_dir)
        self.net: Any = None
        self.marker: fab.EcnMarker | None = None
        self.fabric_ports: dict[LinkDirection, str] = {}  # direction -> egress interface
        self.ports: dict[LinkDirection, str] = {}  # direction -> egress interface (all links)
        self._state_file = STATE_DIR / f"run-{os.getpid()}.json"
        self._old_handlers: dict[int, Any] = {}
        self._locked = False  # holds the host lock (testbed.hostlock) while it runs
        self._procs: list[subprocess.Popen] = []  # started by popen(): killed by stop()

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> EmulatedCluster:
        self._install_signal_handlers()
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        check_prerequisites()
        if not self._locked:  # fixed names: one cluster (or root test) on the host at a time
            hostlock.acquire(f"testbed cluster {'/'.join(self.topo.switches)}")
            self._locked = True
        left = leftovers()  # we hold the host lock: no other run's, a crashed run's
        if left:  # before anything is made or recorded: stop() must not touch them either
            shown = " ".join(left[:4]) + (" ..." if len(left) > 4 else "")
            raise TestbedError(f"leftovers of an earlier run ({shown}): run 'sudo testbed cleanup'")
        from mininet.link import Link, TCLink
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.nodelib import LinuxBridge

        setLogLevel("critical")  # TCLink's HTB quantum warnings are not errors
        allow_congestion_control(self.cc)
        net = Mininet(switch=LinuxBridge, controller=None, autoSetMacs=True, build=False)
        self.net = net
        for h in self.topo.hosts:
            net.addHost(h, ip=self.topo.ip(h) + "/8")
        for s in self.topo.switches:
            net.addSwitch(s, stp=False)
        made = []
        for link in self.topo.links:
            cls = Link if link.fabric else TCLink
            opts = {} if link.fabric else {"bw": link.capacity_bps / 1e6}
            made.append((link, net.addLink(link.a, link.b, cls=cls, **opts)))
        self._record_state()
        net.build()
        net.start()
        for link, mlink in made:
            forward, backward = link.directions()
            self.ports[forward] = mlink.intf1.name
            self.ports[backward] = mlink.intf2.name
        if self.topo.kind == "leaf_spine":
            self._static_forwarding()
        self._setup_hosts()
        self._setup_fabric()
        self._record_state()

    def stop(self) -> None:
        for proc in self._procs:  # a worker outlives its host's shell otherwise
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._procs.clear()
        try:
            if self.net is not None:
                _drop_busy_shells(self.net)
                self.net.stop()
        finally:
            self.net = None
            if self.marker:
                self.marker.unload()
                self.marker = None
            cleanup(quiet=True, only_pid=os.getpid())
            self._restore_signal_handlers()
            if self._locked:
                self._locked = False
                hostlock.release()

    # -- setup --------------------------------------------------------------------------
    def _setup_hosts(self) -> None:
        ecn = self.topo.fabric.regime.host_ecn
        for h in self.topo.hosts:
            node = self.net.get(h)
            out = node.cmd(
                f"sysctl -qw net.ipv4.tcp_congestion_control={self.cc} "
                f"net.ipv4.tcp_ecn={ecn} net.ipv4.tcp_no_metrics_save=1 "
                # keep the window across compute phases, as ML hosts are tuned to
                f"net.ipv4.tcp_slow_start_after_idle=0 && echo ok"
            )
            if "ok" not in out:
                raise TestbedError(f"{h}: cannot select congestion control {self.cc}: {out}")
            for intf in node.intfList():
                node.cmd(f"ethtool -K {intf.name} tso off gso off gro off 2>/dev/null")
            # datacenter hosts run a small minimum RTO; Linux's 200 ms default turns every
            # tail drop into a stall longer than an iteration
            intf = node.defaultIntf()
            node.cmd(
                f"ip route replace 10.0.0.0/8 dev {intf.name} proto kernel scope link "
                f"src {self.topo.ip(h)} rto_min {int(self.rto_min_s * 1000)}ms"
            )
        for s in self.topo.switches:
            for intf in self.net.get(s).intfList():
                if intf.name != "lo":
                    subprocess.run(
                        ["ethtool", "-K", intf.name, "tso", "off", "gso", "off", "gro", "off"],
                        capture_output=True,
                    )

    def _static_forwarding(self) -> None:
        """Deterministic routing on Linux bridges: with several spines the bridges form L2
        loops, so inter-switch ports neither flood nor learn, hosts get static ARP, and
        every switch on a path gets a static FDB entry for the destination's MAC."""
        switches = set(self.topo.switches)
        for link in self.topo.links:
            if link.a in switches and link.b in switches:
                for direction in link.directions():
                    _bridge(
                        [
                            "link",
                            "set",
                            "dev",
                            self.ports[direction],
                            "learning",
                            "off",
                            "flood",
                            "off",
                            "mcast_flood",
                            "off",
                            "bcast_flood",
                            "off",
                        ]
                    )
        self.net.staticArp()
        macs = {h: self.net.get(h).MAC() for h in self.topo.hosts}
        entries: dict[tuple[str, str], str] = {}
        for src in self.topo.hosts:
            for dst in self.topo.hosts:
                if src == dst:
                    continue
                hops = [*self.topo.switch_path(src, dst), dst]
                for here, nxt in zip(hops, hops[1:], strict=False):
                    entries[(here, dst)] = self.ports[LinkDirection(here, nxt)]
        for (_, dst), port in sorted(entries.items()):
            _bridge(["fdb", "replace", macs[dst], "dev", port, "master", "static"])

    def _setup_fabric(self) -> None:
        spec = self.topo.fabric
        pinned = None
        if spec.regime.needs_marker:
            ensure_bpffs()
            self.marker = fab.EcnMarker(self.build_dir)
            self.marker.load()
            pinned = self.marker.prog
        sources = [[self.topo.ip(h) for h in hosts] for hosts in self.job_sources]
        for link in self.topo.bottlenecks():
            for direction in link.directions():
                dev = self.ports[direction]
                self.fabric_ports[direction] = dev
                fab.run_commands(fab.commands(spec, dev, link.capacity_bps, sources, pinned))
                if self.marker:
                    self.marker.configure(
                        _ifindex(dev), link.capacity_bps, spec.ecn_threshold_bytes
                    )

    # -- use ----------------------------------------------------------------------------
    def host(self, name: str) -> Any:
        return self.net.get(name)

    def popen(self, host: str, args: list[str], **kwargs: Any) -> subprocess.Popen:
        """Start a process inside ``host``'s namespace."""
        proc = self.net.get(host).popen(args, **kwargs)
        self._procs.append(proc)
        self._record_state()  # a crash of this process leaves it to cleanup()
        return proc

    def tx_bytes(
        self, directions: Sequence[LinkDirection] | None = None
    ) -> dict[LinkDirection, int]:
        """Bytes sent so far on each link direction (egress counters, via pyroute2)."""
        from pyroute2 import IPRoute

        wanted = list(directions or self.ports)
        out = {}
        with IPRoute() as ipr:
            for d in wanted:
                dev = self.ports[d]
                idx = ipr.link_lookup(ifname=dev)
                if not idx:
                    continue
                msg = ipr.get_links(idx[0])[0]
                stats = msg.get_attr("IFLA_STATS64")
                out[d] = int(stats["tx_bytes"])
        return out

    def ecn_marks(self) -> dict[LinkDirection, int]:
        if not self.marker:
            return {}
        by_index = self.marker.marks()
        return {d: by_index.get(_ifindex(dev), 0) for d, dev in self.fabric_ports.items()}

    # -- bookkeeping --------------------------------------------------------------------
    def _record_state(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        pids = []
        if self.net is not None:
            pids = [n.pid for n in self.net.hosts if getattr(n, "pid", None)]
        pids += [p.pid for p in self._procs if p.poll() is None]  # workers in the hosts
        state = {"pid": os.getpid(), "switches": list(self.topo.switches), "host_pids": pids}
        self._state_file.write_text(json.dumps(state))

    def _install_signal_handlers(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        for sig in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ValueError):  # not the main thread
                self._old_handlers[sig] = signal.signal(sig, handler)

    def _restore_signal_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()


def _drop_busy_shells(net: Any) -> None:
    """Kill and drop every node's shell whose command a Ctrl-C cut off: Mininet waits for
    each command it sends (bring-up sends many), and such a shell still "waits", so
    ``net.stop()`` died asserting before it sent the next one.  (Waiting for it to answer
    could hang on its terminal.)  Mininet then skips the dropped shell's commands;
    :func:`cleanup` removes its switch's bridge and ports, a host's namespace goes with
    its shell."""
    for node in (*net.hosts, *net.switches):
        shell = getattr(node, "shell", None)
        if shell is None or not getattr(node, "waiting", False):
            continue
        with contextlib.suppress(OSError):  # Mininet starts each shell in its own session
            os.killpg(shell.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            shell.wait(timeout=5)
        node.waiting = False
        node.cleanup()  # closes its terminal; no shell: Mininet skips its commands


def _bridge(args: list[str]) -> None:
    r = subprocess.run(["bridge", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise TestbedError(f"bridge {' '.join(args)}: {r.stderr.strip()}")


def _ifindex(dev: str) -> int:
    return int(Path(f"/sys/class/net/{dev}/ifindex").read_text())


def cleanup(quiet: bool = False, only_pid: int | None = None) -> list[str]:
    """Remove what testbed runs left behind: their host shells, their bridges and the
    bridges' ports, the ECN marker's pins.  Only what a run's state file recorded goes
    (its switches: the bridge and its ``<switch>-eth<n>`` ports).  Runs whose process is
    alive are left alone (except ``only_pid``, the caller's own, and then nothing else is
    touched).  Without ``only_pid``, ``tb*`` links that no live run recorded (a crashed
    run whose state file is gone) go too, the jobs' cgroups (MLTCP's, the prio fabric's:
    :func:`testbed.cgroups.remove_leftovers`) of runs no longer alive, and the ECN pins
    once no run is alive.  Returns what was removed."""
    removed: list[str] = []
    doomed: list[str] = []  # switches of the runs cleaned up
    alive: list[str] = []  # switches of the runs left alone
    states = sorted(STATE_DIR.glob("run-*.json")) if STATE_DIR.exists() else []
    for path in states:
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        owner = state.get("pid")
        if owner != only_pid and owner != os.getpid() and _alive(owner):
            alive += state.get("switches", [])
            continue
        if only_pid is not None and owner != only_pid:
            continue
        for pid in state.get("host_pids", []):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
                removed.append(f"host shell {pid}")
        doomed += state.get("switches", [])
        path.unlink(missing_ok=True)
    for name in _links():
        if _owned(name, alive):
            continue
        if _owned(name, doomed) or (only_pid is None and name.startswith("tb")):
            subprocess.run(["ip", "link", "del", name], capture_output=True)
            removed.append(f"link {name}")
    if only_pid is None:  # the jobs' cgroups of runs that are gone (their programs with them)
        removed += cgroups.remove_leftovers(_alive)
    if only_pid is None and not alive:
        subprocess.run(["rm", "-rf", str(fab.ECN_PIN_DIR)], check=False)
    if not quiet:
        for r in removed:
            print(f"removed {r}", file=sys.stderr)
    return removed


def leftovers() -> list[str]:
    """Our interfaces and bridges still present (empty after a clean teardown)."""
    return [n for n in _links() if n.startswith("tb")]


def _owned(link: str, switches: Sequence[str]) -> bool:
    """Whether ``link`` is one of ``switches`` or one of their ports (Mininet names a
    node's interfaces ``<node>-eth<n>``)."""
    return any(link == s or link.startswith(f"{s}-") for s in switches)


def _links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            names.append(parts[1].strip().split("@")[0])
    return names


def _alive(pid: Any) -> bool:
    """Whether process ``pid`` runs: not gone, and not a zombie (a run killed a moment
    ago, not yet reaped, is dead: its leftovers are cleanup's)."""
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # the state follows the command's name in parentheses: "pid (name) Z ..."
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:1]
    except FileNotFoundError:  # gone meanwhile
        return False
    except OSError:
        return True
    return state != ["Z"]


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.net")
