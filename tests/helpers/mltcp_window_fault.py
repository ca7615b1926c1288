#!/usr/bin/env python3
"""Investigation of the ~10^9 window fault (issue 13, README "Known problems"); root.

One pair of namespaces, the client's egress an HTB FIFO at 200 Mbit/s with the testbed's
virtual-queue ECN marker (testbed/bpf/ecn_mark.bpf.c, K = 30 kB), two flows bursting
1.25 MB with 50 ms gaps (the `ecn` case of experiments/mltcp_convergence.py, smaller).

    sudo python tests/helpers/mltcp_window_fault.py check-marker    # capture; checksums, fields
    sudo python tests/helpers/mltcp_window_fault.py count --runs 20 --seconds 3 \\
        --cc reno mltcp_reno --ecn 1 3 [--trace]             # runs with a fault, per case

``count`` counts, per run, the window writes that take snd_cwnd, snd_ssthresh or
prior_cwnd from a sane value (<= 2^20) to a huge one, seen by bpftrace fentry/fexit
probes (ebpf/mltcp_fault_trace.bpf.c, loaded with libbpf: bpftrace cannot read tracefs
here) on tcp_ack, tcp_enter_cwr, tcp_enter_recovery, tcp_enter_loss, tcp_cwnd_reduction,
tcp_undo_cwnd_reduction, tcp_fastretrans_alert, tcp_try_undo_*, tcp_slow_start,
tcp_cong_avoid_ai, tcp_in_ack_event, tcp_process_tlp_ack, tcp_try_to_open and
tcp_rcv_established (tcp_init_cwnd_reduction and tcp_end_cwnd_reduction are inlined on
this kernel: their writes show in their callers), and for our congestion controls the
repairs mltcp_guard counted.
"""

from __future__ import annotations

import argparse
import json
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers, conftest
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository

from helpers.mltcp_flows import Pair, finish, sh  # noqa: E402
from mltcp import admin, pinned  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PIN = Path("/sys/fs/bpf/wf_ecn_mark")
PIN_MAPS = Path("/sys/fs/bpf/wf_ecn_maps")
RATE = 200_000_000
K_BYTES = 30_000
SANE = 1 << 20
FUNCS = [  # the order of the probes in ebpf/mltcp_fault_trace.bpf.c
    "tcp_ack",
    "tcp_enter_cwr",
    "tcp_enter_recovery",
    "tcp_enter_loss",
    "tcp_cwnd_reduction",
    "tcp_undo_cwnd_reduction",
    "tcp_fastretrans_alert",
    "tcp_try_undo_recovery",
    "tcp_try_undo_loss",
    "tcp_slow_start",
    "tcp_cong_avoid_ai",
    "tcp_in_ack_event",
    "tcp_process_tlp_ack",
    "tcp_try_to_open",
    "tcp_rcv_established",
]
EVENT_FIELDS = [
    "func", "port", "cwnd0", "cwnd1", "ss0", "ss1", "prior0", "prior1", "packets_out",
    "prr_delivered", "prr_out", "snd_una", "snd_nxt", "high_seq", "ecn_flags", "delivered",
    "arg1", "arg2", "ca_state", "pad",
]  # fmt: skip
TRACE_PINS = [Path("/sys/fs/bpf/mltcp_trace_events"), Path("/sys/fs/bpf/mltcp_trace_count")]


def trace_child() -> None:
    """Load ebpf/mltcp_fault_trace.bpf.o with libbpf, attach every probe, hold the links
    until stdin closes (bpftrace cannot run here: tracefs is not readable)."""
    import ctypes  # noqa: PLC0415

    lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
    lib.bpf_object__open_file.restype = ctypes.c_void_p
    lib.bpf_object__open_file.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.bpf_object__load.argtypes = [ctypes.c_void_p]
    lib.bpf_object__next_program.restype = ctypes.c_void_p
    lib.bpf_object__next_program.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.bpf_program__attach.restype = ctypes.c_void_p
    lib.bpf_program__attach.argtypes = [ctypes.c_void_p]
    obj_path = ROOT / "ebpf" / "mltcp_fault_trace.bpf.o"
    obj = lib.bpf_object__open_file(str(obj_path).encode(), None)
    if not obj or lib.bpf_object__load(obj) != 0:
        raise SystemExit(f"loading {obj_path} failed: errno {ctypes.get_errno()}")
    links, prog = [], None
    while True:
        prog = lib.bpf_object__next_program(obj, prog)
        if not prog:
            break
        link = lib.bpf_program__attach(prog)
        if not link:
            raise SystemExit(f"attach failed: errno {ctypes.get_errno()}")
        links.append(link)
    print(f"attached {len(links)}", flush=True)
    sys.stdin.read()


class Tracer:
    def __init__(self) -> None:
        sh("make", "-s", "-C", str(ROOT / "ebpf"), "mltcp_fault_trace.bpf.o")
        for pin in TRACE_PINS:
            pin.unlink(missing_ok=True)
        self.p = subprocess.Popen(
            [sys.executable, __file__, "trace-child"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = self.p.stdout.readline()
        if not line.startswith("attached"):
            raise RuntimeError(f"tracer: {line}")
        self.seen = 0

    def _count(self) -> tuple[int, int]:
        from mltcp.bpfmap import PinnedMap  # noqa: PLC0415

        with PinnedMap(str(TRACE_PINS[1]), 4, 8) as m:
            return tuple(
                int.from_bytes(m.lookup(i.to_bytes(4, "little")), "little") for i in (0, 1)
            )

    def calls(self) -> int:
        return self._count()[1]

    def new_events(self) -> list[dict]:
        from mltcp.bpfmap import PinnedMap  # noqa: PLC0415

        n = min(self._count()[0], 4096)
        out = []
        with PinnedMap(str(TRACE_PINS[0]), 4, 4 * len(EVENT_FIELDS)) as m:
            for i in range(self.seen, n):
                raw = m.lookup(i.to_bytes(4, "little"))
                values = struct.unpack(f"<{len(EVENT_FIELDS)}I", raw)
                e = dict(zip(EVENT_FIELDS, values, strict=True))
                e["func"] = FUNCS[e["func"]]
                out.append(e)
        self.seen = n
        return out

    def stop(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=10)
        for pin in TRACE_PINS:
            pin.unlink(missing_ok=True)


def attach_marker(pair: Pair) -> None:
    obj = Path(tempfile.mkdtemp(prefix="mltcp13-")) / "ecn_mark.bpf.o"
    sh("make", "-s", "-C", str(ROOT / "ebpf"), f"ECN_OBJ={obj}", str(obj))
    subprocess.run(["rm", "-rf", str(PIN), str(PIN_MAPS)])
    sh("bpftool", "prog", "load", str(obj), str(PIN), "type", "classifier", "pinmaps",
       str(PIN_MAPS))  # fmt: skip
    ns = ["nsenter", f"--net=/run/netns/{pair.a}"]  # `ip netns exec` hides /sys/fs/bpf
    sh(*ns, "tc", "qdisc", "replace", "dev", pair.va, "clsact")
    sh(*ns, "tc", "filter", "replace", "dev", pair.va, "egress", "prio", "1", "handle", "1",
       "bpf", "da", "pinned", str(PIN))  # fmt: skip
    ifindex = json.loads(sh("ip", "-n", pair.a, "-j", "link", "show", pair.va))[0]["ifindex"]
    key = [str(b) for b in ifindex.to_bytes(4, "little")]
    value = [str(b) for b in RATE.to_bytes(8, "little") + K_BYTES.to_bytes(8, "little")]
    sh("bpftool", "map", "update", "pinned", str(PIN_MAPS / "ecn_config"), "key", *key,
       "value", *value)  # fmt: skip


def detach_marker() -> None:
    subprocess.run(["rm", "-rf", str(PIN), str(PIN_MAPS)])


def marks() -> int:
    out = json.loads(sh("bpftool", "-j", "map", "dump", "pinned", str(PIN_MAPS / "ecn_state")))
    return sum(int(e["formatted"]["value"]["marks"]) for e in out if "formatted" in e)


class WindowPoll:
    """Samples `ss -tin` in the client's namespace every 50 ms: the largest cwnd and
    ssthresh (not "infinite") each port showed.  Catches a huge window the kernel's own
    congestion controls leave in place; ours repair it on the next ACK (see repairs())."""

    def __init__(self, ns: str) -> None:
        import threading  # noqa: PLC0415

        self.ns = ns
        self.max: dict[int, tuple[int, int]] = {}
        self.stop_flag = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        import re  # noqa: PLC0415

        while not self.stop_flag.is_set():
            out = sh("nsenter", f"--net=/run/netns/{self.ns}", "ss", "-tinH", check=False)
            port = None
            for line in out.splitlines():
                m = re.match(r"\S+\s+\d+\s+\d+\s+\S+:(\d+)\s", line)
                if m:
                    port = int(m.group(1))
                    continue
                cw = re.search(r"\bcwnd:(\d+)", line)
                ss = re.search(r"\bssthresh:(\d+)", line)
                if port and cw:
                    c0, s0 = self.max.get(port, (0, 0))
                    s1 = int(ss.group(1)) if ss else 0
                    self.max[port] = (max(c0, int(cw.group(1))), max(s0, s1))
            time.sleep(0.05)

    def huge(self) -> list[tuple[int, int, int]]:
        return [(p, c, s) for p, (c, s) in self.max.items() if c > SANE or s > SANE]

    def stop(self) -> None:
        self.stop_flag.set()
        self.t.join()


KERNEL_TEXT_SSTHRESH = range(0x80000000, 0xC0000000)  # the low half of a kernel text address


def repairs_since(before: int) -> list[dict]:
    """The sockets mltcp_guard logged since the repair count was `before` (the log keeps
    the last 64), each as found, before its window was put back."""
    status = admin.status()
    n = status.get("window_repairs", 0) - before
    return status.get("repair_log", [])[-n:] if n > 0 else []


def is_known_kernel_fault(repair: dict) -> bool:
    """A repair with the known kernel fault's signature (README, Known problems): an
    snd_ssthresh that is the low half of a kernel text address (0x8xxxxxxx; KASLR moves
    it), stored when the socket entered CWR (ECN) or Recovery (loss)."""
    return repair["snd_ssthresh"] in KERNEL_TEXT_SSTHRESH


def repairs() -> int:
    try:
        return admin.status().get("window_repairs", 0)
    except pinned.MltcpError:
        return 0


def check_marker(tmp: Path) -> dict:
    from scapy.all import IP, TCP, rdpcap  # noqa: PLC0415

    with Pair("mltw_ck", 218, rate_bps=RATE, buffer_packets=1000) as pair:
        attach_marker(pair)
        # complete checksums in software, so the capture shows what the stack wrote
        sh("ip", "netns", "exec", pair.a, "ethtool", "-K", pair.va, "tx", "off")
        sh("ip", "netns", "exec", pair.b, "ethtool", "-K", pair.vb, "tx", "off")
        pair.sysctl("net.ipv4.tcp_ecn=1")
        pcap = tmp / "ecn.pcap"
        dump = subprocess.Popen(
            ["ip", "netns", "exec", pair.b, "tcpdump", "-i", pair.vb, "-s", "0", "-c", "4000",
             "-w", str(pcap), "tcp"],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)
        pair.start_server(tmp, 7431)
        p = pair.start_clients(tmp, 7431, 2, 1_250_000, 2.0, 0.05, 24000, cc="reno")
        finish(p, tmp, 30, pair)
        time.sleep(0.5)
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=10)
        n_marks = marks()
        detach_marker()
    counts = dict.fromkeys(
        ["packets", "ce", "ect", "bad_ip_csum", "bad_tcp_csum", "bad_fields", "ce_acks",
         "tcp_csum_checked", "ce_tcp_csum_checked"], 0,
    )  # fmt: skip
    for pkt in rdpcap(str(pcap)):
        if IP not in pkt or TCP not in pkt:
            continue
        ip = pkt[IP]
        counts["packets"] += 1
        ecn = ip.tos & 3
        counts["ce"] += ecn == 3
        counts["ect"] += ecn in (1, 2)
        wire_ip, wire_tcp = ip.chksum, pkt[TCP].chksum
        fresh = IP(bytes(ip))
        del fresh.chksum
        fresh[TCP].chksum = None
        rebuilt = IP(bytes(fresh))
        counts["bad_ip_csum"] += rebuilt.chksum != wire_ip
        # whole packets (tx checksum offload off on both ends): every checksum is final
        if len(bytes(ip)) == ip.len:
            counts["tcp_csum_checked"] += 1
            counts["bad_tcp_csum"] += rebuilt[TCP].chksum != wire_tcp
            counts["ce_tcp_csum_checked"] += ecn == 3
        counts["bad_fields"] += ip.version != 4 or ip.ihl != 5 or ip.ttl != 64 or ip.tos >> 2 != 0
        counts["ce_acks"] += ecn == 3 and ip.len - 20 - pkt[TCP].dataofs * 4 == 0
    counts["marker_marks"] = n_marks
    return counts


def count(tmp: Path, ccs: list[str], ecn_modes: list[int], runs: int, seconds: float,
          trace: bool) -> dict:  # fmt: skip
    admin.unload(force=True)  # registered programs of an older build would be kept
    admin.load("all")
    plain = "bpf_reno_plain" in ccs
    if plain:  # the kernel's Reno through BPF and nothing else
        sh("make", "-s", "-C", str(ROOT / "ebpf"), "bpf_reno_plain.bpf.o")
        subprocess.run(["bpftool", "struct_ops", "unregister", "name", "bpf_reno_plain"],
                       capture_output=True)  # fmt: skip
        sh("bpftool", "struct_ops", "register", str(ROOT / "ebpf" / "bpf_reno_plain.bpf.o"))
        allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
        allowed.write_text(allowed.read_text().strip() + " bpf_reno_plain")
    results: dict = {}
    tracer = None
    if trace:
        try:
            tracer = Tracer()
        except Exception as e:  # noqa: BLE001 - counts without the trace are still counts
            print(f"trace unavailable, counting repairs only: {e}", flush=True)
    try:
        with Pair("mltw_ct", 219, rate_bps=RATE, buffer_packets=1000) as pair:
            attach_marker(pair)
            pair.start_server(tmp, 7432)
            port = 25000
            for mode in ecn_modes:
                try:
                    pair.sysctl(f"net.ipv4.tcp_ecn={mode}")
                except RuntimeError as e:
                    print(f"tcp_ecn={mode}: refused by this kernel ({e})", flush=True)
                    results[f"tcp_ecn={mode}"] = f"refused: {e}"
                    continue
                for cc in ccs:
                    rows = []
                    for _ in range(runs):
                        r0, m0 = repairs(), marks()
                        poll = WindowPoll(pair.a)
                        p = pair.start_clients(tmp, 7432, 2, 1_250_000, seconds, 0.05, port,
                                               cc=cc)  # fmt: skip
                        out = finish(p, tmp, 60, pair)
                        poll.stop()
                        port += 2
                        time.sleep(0.2)
                        huge = tracer.new_events() if tracer else []
                        rows.append({
                            "iterations": [f["iterations"] for f in out["flows"]],
                            "repairs": repairs() - r0,
                            "ce_marks": marks() - m0,
                            "huge_writes": huge,
                            "huge_seen_by_ss": poll.huge(),
                            "repair_log": (
                                admin.status().get("repair_log", [])[-(repairs() - r0):]
                                if repairs() > r0 else []
                            ),
                        })  # fmt: skip
                    faulty = sum(
                        1 for r in rows
                        if r["repairs"] or r["huge_writes"] or r["huge_seen_by_ss"]
                    )  # fmt: skip
                    results[f"{cc} tcp_ecn={mode}"] = {"runs": rows, "runs_with_fault": faulty}
                    print(f"{cc:12s} tcp_ecn={mode}: {faulty} of {runs} runs with a fault; "
                          f"repairs {sum(r['repairs'] for r in rows)}, huge in ss "
                          f"{sum(len(r['huge_seen_by_ss']) for r in rows)}, huge writes "
                          f"{sum(len(r['huge_writes']) for r in rows)}, CE marks "
                          f"{sum(r['ce_marks'] for r in rows)}", flush=True)  # fmt: skip
            detach_marker()
    finally:
        detach_marker()
        if tracer:
            tracer.stop()
        if plain:
            allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
            allowed.write_text(" ".join(c for c in allowed.read_text().split()
                                        if c != "bpf_reno_plain"))  # fmt: skip
            subprocess.run(["bpftool", "struct_ops", "unregister", "name", "bpf_reno_plain"],
                           capture_output=True)  # fmt: skip
    return results


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check-marker")
    sub.add_parser("trace-child")
    c = sub.add_parser("count")
    c.add_argument("--runs", type=int, default=20)
    c.add_argument("--seconds", type=float, default=3.0)
    c.add_argument("--cc", nargs="+", default=["reno", "mltcp_reno"])
    c.add_argument("--ecn", nargs="+", type=int, default=[1, 3])
    c.add_argument("--trace", action="store_true")
    ap.add_argument("--out", default="/tmp/mltcp_window_fault.json")
    args = ap.parse_args()
    if args.cmd == "trace-child":
        trace_child()
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="mltcp13-"))
    if args.cmd == "check-marker":
        res = check_marker(tmp)
        print(json.dumps(res))
    else:
        res = count(tmp, args.cc, args.ecn, args.runs, args.seconds, args.trace)
    Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
