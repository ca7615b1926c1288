"""Many TCP flows between two network namespaces for the MLTCP kernel tests: a pair of
namespaces joined by a veth (optionally an HTB-shaped FIFO bottleneck from
testbed.fabric), a server that answers every framed message with one byte, and a client
that runs N flows from one event loop, each sending a message, waiting for the answer
(every byte acked), optionally marking the iteration for its job (exact mode), for a fixed
time.  The client writes per flow: local port, iterations done, the longest iteration,
the time of its last completed iteration and its congestion control at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import require, run_name

ROOT = Path(__file__).resolve().parents[2]

SERVER = textwrap.dedent("""
    import selectors, socket, sys
    host, port = sys.argv[1], int(sys.argv[2])
    sel = selectors.DefaultSelector()
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port)); ls.listen(1024); ls.setblocking(False)
    sel.register(ls, selectors.EVENT_READ, None)
    print("ready", ls.getsockname()[1], flush=True)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                c, _ = ls.accept(); c.setblocking(False)
                sel.register(c, selectors.EVENT_READ, {"buf": b"", "need": None, "got": 0})
                continue
            c, st = key.fileobj, key.data
            try:
                data = c.recv(1 << 20)
            except BlockingIOError:
                continue
            except ConnectionError:
                data = b""
            if not data:
                sel.unregister(c); c.close(); continue
            while data:
                if st["need"] is None:
                    st["buf"] += data; data = b""
                    if len(st["buf"]) < 4:
                        break
                    st["need"] = int.from_bytes(st["buf"][:4], "big")
                    data = st["buf"][4:]; st["buf"] = b""; st["got"] = 0
                    if st["need"] == 0:
                        break
                take = min(len(data), st["need"] - st["got"])
                st["got"] += take; data = data[take:]
                if st["got"] == st["need"]:
                    c.send(b"k"); st["need"] = None
""")

CLIENT = textwrap.dedent("""
    import json, selectors, socket, sys, time
    (host, port, n, size, duration, gap, base, cc, mark, out) = sys.argv[1:11]
    port, n, size, base = int(port), int(n), int(size), int(base)
    duration, gap, mark = float(duration), float(gap), int(mark)
    job0 = int(sys.argv[11]) if len(sys.argv) > 11 else 1
    if mark:
        import mltcp
    sel = selectors.DefaultSelector()
    flows = []
    for i in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if cc != "-":
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        s.bind(("", base + i)); s.connect((host, port)); s.setblocking(False)
        f = {"s": s, "lport": base + i, "job": job0 + i, "iterations": 0, "max_s": 0.0,
             "last_done": 0.0, "out": b"", "start": 0.0, "next": 0.0, "waiting": False}
        flows.append(f)
        sel.register(s, selectors.EVENT_READ, f)
    msg = size.to_bytes(4, "big") + bytes(size)
    print("connected", flush=True)
    t0 = time.monotonic(); end = t0 + duration
    def kick(f, now):
        f["out"] = msg; f["start"] = now; f["waiting"] = True
        sel.modify(f["s"], selectors.EVENT_READ | selectors.EVENT_WRITE, f)
    for f in flows:
        kick(f, t0)
    while True:
        now = time.monotonic()
        # after the end no new iteration starts; the ones under way finish
        active = [f for f in flows if f["waiting"] or (f["next"] < end and now < end)]
        if not active:
            break
        for f in flows:
            if not f["waiting"] and f["next"] <= now < end:
                kick(f, now)
        for key, ev in sel.select(timeout=0.005):
            f = key.data
            if ev & selectors.EVENT_WRITE and f["out"]:
                try:
                    sent = f["s"].send(f["out"])
                    f["out"] = f["out"][sent:]
                except BlockingIOError:
                    pass
                if not f["out"]:
                    sel.modify(f["s"], selectors.EVENT_READ, f)
            if ev & selectors.EVENT_READ:
                if f["s"].recv(1) == b"k":
                    now = time.monotonic()
                    f["iterations"] += 1; f["waiting"] = False
                    f["max_s"] = max(f["max_s"], now - f["start"]); f["last_done"] = now - t0
                    if mark:
                        mltcp.mark_iteration(f["job"])
                    f["next"] = now + gap
                    if f["next"] >= end:
                        f["next"] = float("inf")
    time.sleep(max(gap, 0.02))
    for f in flows:   # one last transmission after the gap ends the last iteration
        f["s"].setblocking(True); f["s"].sendall((0).to_bytes(4, "big"))
    time.sleep(0.1)
    rows = [{"lport": f["lport"], "job": f["job"], "iterations": f["iterations"],
             "max_s": f["max_s"], "last_done_s": f["last_done"],
             "cc": f["s"].getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
                   .rstrip(b"\\0").decode()} for f in flows]
    json.dump({"t0": time.time() - (time.monotonic() - t0), "flows": rows}, open(out, "w"))
    for f in flows:
        f["s"].close()
""")


def take_mltcp() -> None:
    """A clean MLTCP start that moves nobody's sockets: unload what an aborted run left
    (never with ``force``).  If sockets still use it, it is someone else's: through
    ``require`` the test skips (fails under CI) instead of breaking their flows."""
    from mltcp import admin, pinned

    try:
        admin.unload()
    except pinned.MltcpError as e:
        require(False, f"MLTCP not in use by anyone else on this host ({e})")


def sh(*cmd: str, check: bool = True) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


class Pair:
    """Namespaces ``a`` (client, 10.x.0.1) and ``b`` (server, 10.x.0.2); with ``rate_bps``
    the client's egress is a FIFO of ``buffer_packets`` shaped at that rate.

    With ``router=True`` the two are joined through a third namespace ``r`` instead
    (a 10.x.0.0/24 — r — 10.x.1.0/24 b) and the shaped FIFO is r's port towards b: the
    bottleneck is in the network, as a switch's would be.  Needed when many flows share
    it: a FIFO on the sender's own interface drops locally, and Linux treats a local drop
    as local congestion (the zero-window probe timer every 0.5 s, counted in
    ``icsk_probes_out``), so a flow that finds the queue full 15 times in a row
    (``tcp_retries2``) is aborted with ETIMEDOUT without having retransmitted anything."""

    def __init__(
        self,
        prefix: str,
        subnet: int,
        rate_bps: float = 0,
        buffer_packets: int = 100,
        router: bool = False,
    ):
        # this run's own namespaces (conftest.run_name): never another suite's, and
        # conftest's after-test check finds any left behind
        self.a, self.b, self.r = (run_name(f"{prefix}_{x}") for x in "abr")
        self.va, self.vb = f"{prefix[:8]}va", f"{prefix[:8]}vb"
        self.ra, self.rb = f"{prefix[:8]}ra", f"{prefix[:8]}rb"
        self.router = router
        self.ip_a = f"10.{subnet}.0.1"
        self.ip_b = f"10.{subnet}.1.2" if router else f"10.{subnet}.0.2"
        self.subnet = subnet
        self.rate_bps, self.buffer_packets = rate_bps, buffer_packets
        self.server: subprocess.Popen | None = None

    def __enter__(self) -> Pair:
        self.close()
        try:
            if self.router:
                self._routed()
            else:
                self._direct()
        except BaseException:
            self.close()
            raise
        return self

    def _shape(self, ns: str, dev: str) -> None:
        from testbed.fabric import fifo_commands

        sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off",
           check=False)  # fmt: skip
        for cmd in fifo_commands(dev, self.rate_bps, self.buffer_packets):
            sh("ip", "netns", "exec", ns, *cmd)

    @staticmethod
    def _up(ns: str, dev: str, cidr: str) -> None:
        sh("ip", "-n", ns, "addr", "add", cidr, "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")

    def _direct(self) -> None:
        sh("ip", "netns", "add", self.a)
        sh("ip", "netns", "add", self.b)
        sh("ip", "link", "add", self.va, "netns", self.a, "type", "veth", "peer", self.vb,
           "netns", self.b)  # fmt: skip
        self._up(self.a, self.va, f"{self.ip_a}/24")
        self._up(self.b, self.vb, f"{self.ip_b}/24")
        if self.rate_bps:
            self._shape(self.a, self.va)

    def _routed(self) -> None:
        for ns in (self.a, self.r, self.b):
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", self.va, "netns", self.a, "type", "veth", "peer", self.ra,
           "netns", self.r)  # fmt: skip
        sh("ip", "link", "add", self.vb, "netns", self.b, "type", "veth", "peer", self.rb,
           "netns", self.r)  # fmt: skip
        net_a, net_b = f"10.{self.subnet}.0", f"10.{self.subnet}.1"
        self._up(self.a, self.va, f"{self.ip_a}/24")
        self._up(self.r, self.ra, f"{net_a}.254/24")
        self._up(self.r, self.rb, f"{net_b}.254/24")
        self._up(self.b, self.vb, f"{self.ip_b}/24")
        sh("ip", "-n", self.a, "route", "add", "default", "via", f"{net_a}.254")
        sh("ip", "-n", self.b, "route", "add", "default", "via", f"{net_b}.254")
        sh("ip", "netns", "exec", self.r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sh("ip", "netns", "exec", self.r, "ethtool", "-K", self.ra, "gro", "off", check=False)
        if self.rate_bps:
            self._shape(self.r, self.rb)

    def sysctl(self, setting: str) -> None:
        for ns in (self.a, self.b):
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", setting)

    def close(self) -> None:
        if self.server:
            self.server.kill()
            self.server.wait()
            self.server = None
        for ns in (self.a, self.b, self.r):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_server(self, tmp: Path, port: int = 0) -> int:
        """The server in namespace B on ``port`` (0: an ephemeral one); returns the port."""
        (tmp / "server.py").write_text(SERVER)
        self.server = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.b}", sys.executable, str(tmp / "server.py"),
             self.ip_b, str(port)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        ready, bound = self.server.stdout.readline().split()
        assert ready == "ready"
        return int(bound)

    def start_clients(
        self,
        tmp: Path,
        port: int,
        flows: int,
        size: int,
        duration_s: float,
        gap_s: float,
        base_port: int,
        cc: str = "-",
        mark: bool = False,
        job0: int = 1,
    ) -> subprocess.Popen:
        """The client process, once every flow is connected."""
        (tmp / "client.py").write_text(CLIENT)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        p = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.a}", sys.executable, str(tmp / "client.py"),
             self.ip_b, str(port), str(flows), str(size), str(duration_s), str(gap_s),
             str(base_port), cc, str(int(mark)), str(tmp / "flows.json"), str(job0)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        line = p.stdout.readline().strip()
        if line != "connected":
            p.kill()
            raise AssertionError(f"client did not connect: {line} {p.stderr.read()}")
        return p


def finish(p: subprocess.Popen, tmp: Path, timeout_s: float, pair: Pair | None = None) -> dict:
    try:
        _, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        ss = sh("ip", "netns", "exec", pair.a, "ss", "-tin", check=False) if pair else ""
        p.kill()
        raise AssertionError(f"client did not finish: a flow stalled\n{ss[:4000]}") from None
    assert p.returncode == 0, err
    return json.loads((tmp / "flows.json").read_text())


def wait_until(cond, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()
