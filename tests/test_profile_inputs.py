"""``cassini profile`` one step off the tested paths (review 55): pcapng captures, link
types other than Ethernet, bins finer than the packets' spacing, recorder logs whose
start lines match no bucket iteration or that carry no traffic, zero-length buckets, a
plot into a missing folder, options that do not apply to the source, loose addresses and
ambiguous model names.

Captures are written here byte by byte (classic pcap and pcapng headers by hand, the IP
packets by scapy), so each case says exactly what a capture holds."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import require_module
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini import measure
from cassini.cli import main
from cassini.errors import InputError
from cassini.measure import BucketRecord, fold_phases, pcap_packets, profile_from_buckets
from cassini.profile import unknown_model

require_module("scapy", "the testbed extra: reads and writes captures")

SRC, DST = "10.0.0.1", "10.0.0.2"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def error_line(err: str) -> str:
    """The one line of a refusal (asserting there is exactly one)."""
    assert err.count("\n") == 1, err
    return err.strip()


def ip_packet(payload: int, src: str = SRC) -> bytes:
    """An IPv4/TCP packet from ``src`` carrying ``payload`` bytes."""
    from scapy.layers.inet import IP, TCP
    from scapy.packet import Raw

    return bytes(IP(src=src, dst=DST) / TCP(sport=5000, dport=6000) / Raw(b"x" * payload))


# link-layer headers put before the IP packet, by link type
ETHERNET = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"
HEADERS = {
    0: struct.pack("<I", 2),  # NULL: AF_INET in the capturing host's order
    1: ETHERNET,
    12: b"",  # raw IP (DLT_RAW)
    101: b"",  # raw IP (LINKTYPE_RAW)
    108: struct.pack(">I", 2),  # LOOP: AF_INET in network order
    113: b"\x00\x04\x00\x01\x00\x06" + b"\x02" * 6 + b"\x00\x00\x08\x00",  # Linux cooked
    228: b"",  # IPv4
    276: b"\x08\x00\x00\x00" + struct.pack(">I", 2) + b"\x00\x01\x04\x06" + b"\x02" * 8,
}


def write_pcap(path: Path, packets, linktype: int = 1, *, nano: bool = False) -> None:
    """A classic capture: ``packets`` are (seconds, frame bytes)."""
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 262144, linktype)]
    for t, frame in packets:
        sec = int(t)
        frac = round((t - sec) * (1e9 if nano else 1e6))
        out.append(struct.pack("<IIII", sec, frac, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))


def _block(kind: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


def write_pcapng(path: Path, interfaces, packets) -> None:
    """A pcapng capture: ``interfaces`` are (link type, tsresol option byte or None: the
    default microseconds), ``packets`` (interface, seconds, frame bytes)."""
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    for link, tsresol in interfaces:
        opts = b""
        if tsresol is not None:
            opts = struct.pack("<HHB3x", 9, 1, tsresol) + struct.pack("<HH", 0, 0)
        out.append(_block(1, struct.pack("<HHI", link, 0, 262144) + opts))
    for interface, t, frame in packets:
        tsresol = interfaces[interface][1]
        units = 10 ** (tsresol if tsresol is not None else 6)
        ts = round(t * units)
        head = struct.pack("<IIIII", interface, ts >> 32, ts & 0xFFFFFFFF, len(frame), len(frame))
        out.append(_block(6, head + frame + b"\x00" * (-len(frame) % 4)))
    path.write_bytes(b"".join(out))


def bursts(period_s: float, iterations: int, burst: int, gap_s: float, t0: float = 1000.0):
    """Packet times: ``iterations`` iterations of ``period_s``, each opening with a burst
    of ``burst`` packets ``gap_s`` apart."""
    return [t0 + k * period_s + i * gap_s for k in range(iterations) for i in range(burst)]


# -- 1. pcapng ----------------------------------------------------------------------------
def test_pcapng_is_read_with_each_interfaces_link_type_and_time_resolution(tmp_path):
    """``tshark``/``dumpcap`` write pcapng: it crashed (``meta.sec``).  Each interface has
    its own link type and time resolution: here Ethernet in microseconds and SLL2 in
    nanoseconds."""
    frame = ip_packet(100)
    packets = [
        (0, 1000.25, ETHERNET + frame),
        (1, 1000.500000123, HEADERS[276] + frame),
        (1, 1000.75, HEADERS[276] + ip_packet(100, src="10.0.0.9")),
        (0, 5000.000001, ETHERNET + frame),
    ]
    path = tmp_path / "c.pcapng"
    write_pcapng(path, [(1, None), (276, 9)], packets)
    stamps, sizes = pcap_packets(path, SRC)
    assert stamps.tolist() == pytest.approx([1000.25, 1000.500000123, 5000.000001], abs=1e-9)
    assert sizes.tolist() == [len(frame)] * 3


def test_a_nanosecond_pcap_keeps_its_nanoseconds(tmp_path):
    path = tmp_path / "ns.pcap"
    write_pcap(path, [(1000.000000123, ETHERNET + ip_packet(10))], nano=True)
    stamps, _ = pcap_packets(path, SRC)
    assert stamps[0] == pytest.approx(1000.000000123, abs=1e-9)


def test_cassini_profile_reads_a_pcapng_capture_also_with_starts_log(tmp_path, capsys):
    period = 0.1
    frame = ETHERNET + ip_packet(1448)
    times = bursts(period, 12, 50, 1e-4)
    classic, ng = tmp_path / "c.pcap", tmp_path / "c.pcapng"
    write_pcap(classic, [(t, frame) for t in times])
    write_pcapng(ng, [(1, None)], [(0, t, frame) for t in times])
    outputs = []
    for path in (classic, ng):
        code, out, err = run(capsys, "profile", "--from", "pcap", str(path), "--src-ip", SRC)
        assert code == 0, err
        outputs.append(json.loads(out))
    assert outputs[0] == outputs[1]
    assert outputs[1]["iteration_time_s"] == pytest.approx(period, rel=0.01)
    log = tmp_path / "w.jsonl"
    log.write_text("".join(json.dumps({"start": 1000.0 + k * period}) + "\n" for k in range(12)))
    code, out, err = run(
        capsys, "profile", "--from", "pcap", str(ng), "--src-ip", SRC, "--starts-log", str(log)
    )
    assert code == 0, err
    assert json.loads(out)["iteration_time_s"] == pytest.approx(period)


# -- 2. link types ------------------------------------------------------------------------
@pytest.mark.parametrize("linktype", sorted(HEADERS))
def test_every_supported_link_type_finds_the_ipv4_packets(tmp_path, linktype):
    """``tcpdump -i any`` writes LINUX_SLL2 (276), a BSD loopback NULL (0): both were read
    as holding no IPv4 packets."""
    frame = ip_packet(200)
    path = tmp_path / "c.pcap"
    packets = [(1000.5, HEADERS[linktype] + frame), (1001.0, HEADERS[linktype] + frame)]
    write_pcap(path, packets, linktype)
    stamps, sizes = pcap_packets(path, SRC)
    assert stamps.tolist() == [1000.5, 1001.0] and sizes.tolist() == [len(frame)] * 2


def test_an_unsupported_link_type_is_named(tmp_path, capsys):
    path = tmp_path / "wifi.pcap"
    write_pcap(path, [(1000.0, b"\x00" * 24 + ip_packet(10))], 105)
    with pytest.raises(InputError, match=r"link type 105 \(IEEE802_11\) is not supported"):
        pcap_packets(path, SRC)
    code, _, err = run(capsys, "profile", "--from", "pcap", str(path), "--src-ip", SRC)
    line = error_line(err)
    assert code == 2 and str(path) in line and "link type 105" in line and "-i <interface>" in line
    ng = tmp_path / "wifi.pcapng"
    write_pcapng(ng, [(1, None), (147, None)], [(1, 1000.0, ip_packet(10))])
    with pytest.raises(InputError, match=r"link type 147 \(\w+\) is not supported"):
        pcap_packets(ng, SRC)


# -- 3. bins finer than the packets' spacing ------------------------------------------------
def fine_capture(path: Path) -> float:
    """12 iterations of 100 ms, each a 30 ms burst of 1448-byte payloads at 200 Mbit/s
    (a packet every 57.9 us); returns the period."""
    frame = ETHERNET + ip_packet(1448)
    gap = 1448 * 8 / 200e6
    write_pcap(path, [(t, frame) for t in bursts(0.1, 12, int(0.03 / gap), gap)])
    return 0.1


@pytest.mark.parametrize("dt", [2e-5, 4e-5, 1e-4, 1e-3])
def test_bins_finer_than_the_packets_spacing_find_the_iteration(tmp_path, dt):
    """At 20 us bins (a packet every third bin) the period locked onto the packet gap:
    5.79e-05 s for 100 ms iterations."""
    period = fine_capture(tmp_path / "c.pcap")
    profile = measure.profile_from_pcap("j", tmp_path / "c.pcap", SRC, dt)
    assert profile.iteration_time_s == pytest.approx(period, rel=0.01)
    assert profile.communication_share == pytest.approx(0.3, abs=0.02)


def test_cassini_profile_with_fine_bins(tmp_path, capsys):
    period = fine_capture(tmp_path / "c.pcap")
    code, out, err = run(
        capsys, "profile", "--from", "pcap", str(tmp_path / "c.pcap"), "--src-ip", SRC,
        "--dt-s", "2e-5",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["iteration_time_s"] == pytest.approx(period, rel=0.01)


# -- 7. --src-ip, and no period named by the flag ---------------------------------------------
@pytest.mark.parametrize("address", ["10.0.0", "10.1", "167772161", "10.0.0.1.5", "::1"])
def test_src_ip_must_be_a_dotted_quad(tmp_path, capsys, address):
    path = tmp_path / "c.pcap"
    write_pcap(path, [(1000.0, ETHERNET + ip_packet(10, src="10.0.0.0"))])
    with pytest.raises(InputError, match="src_ip"):
        pcap_packets(path, address)
    code, _, err = run(capsys, "profile", "--from", "pcap", str(path), "--src-ip", address)
    line = error_line(err)
    assert code == 2 and "--src-ip" in line and repr(address) in line


def test_no_period_names_the_capture_and_dt_s(tmp_path, capsys):
    fine_capture(tmp_path / "c.pcap")
    write_pcap(tmp_path / "one.pcap", [(1000.0, ETHERNET + ip_packet(10))])
    for name, dt in (("c.pcap", "0.5"), ("one.pcap", "0.001")):
        path = tmp_path / name
        code, _, err = run(capsys, "profile", "--from", "pcap", str(path), "--src-ip", SRC,
                           "--dt-s", dt)  # fmt: skip
        line = error_line(err)
        assert code == 2 and line.startswith(f"cassini: error: {path}: "), line
        assert f"--dt-s {dt} s" in line and "periodic" in line and "samples_bps" not in line


# -- 4, 8, 9. recorder logs ------------------------------------------------------------------
def recorder_lines(world: int, starts, buckets) -> str:
    """A recorder log: ``starts`` (iteration, start_s) lines and ``buckets`` (iteration,
    bytes, start_s, end_s) lines, one bucket each."""
    lines = [{"type": "meta", "world_size": world, "rank": 0}]
    lines += [{"type": "iteration", "iteration": k, "start_s": s} for k, s in starts]
    lines += [
        {"type": "bucket", "iteration": k, "bucket": 0, "bytes": b, "start_s": s, "end_s": e}
        for k, b, s, e in buckets
    ]
    return "".join(json.dumps(x) + "\n" for x in lines)


def test_start_lines_matching_no_bucket_iteration_say_so(tmp_path, capsys):
    """Start lines 10-14, buckets 0-4: it said "need at least 3 iterations with bucket
    records (2 after the 1 skipped), got 5"."""
    buckets = [(k, 10**6, 100.1 + 0.2 * k, 100.12 + 0.2 * k) for k in range(5)]
    starts = [(10 + k, 100.0 + 0.2 * k) for k in range(5)]
    path = tmp_path / "r.jsonl"
    path.write_text(recorder_lines(2, starts, buckets))
    code, _, err = run(capsys, "profile", "--from", "recorder", str(path))
    line = error_line(err)
    assert code == 2 and "no bucket iteration" in line and "`iteration` start line" in line
    assert "0-4" in line and "10-14" in line and "got 5" not in line
    records = [BucketRecord(k, 0, 10**6, s, e) for k, _, s, e in buckets]
    one = {k + 4: s for k, s in starts} | {1: 100.2}  # only iteration 1 has a start
    with pytest.raises(InputError, match="1 of the 4 bucket iterations"):
        profile_from_buckets("j", records, 2, one)


def test_a_recorder_log_without_traffic_is_refused_like_a_worker_log(tmp_path, capsys):
    """World size 1 (a ring all-reduce among one rank sends nothing) had given a profile
    with no phases, while a worker log that sends nothing is refused."""
    buckets = [(k, 10**6, 100.1 + 0.2 * k, 100.12 + 0.2 * k) for k in range(5)]
    path = tmp_path / "r.jsonl"
    path.write_text(recorder_lines(1, [(k, 100.0 + 0.2 * k) for k in range(5)], buckets))
    code, out, err = run(capsys, "profile", "--from", "recorder", str(path))
    line = error_line(err)
    assert code == 2 and out == "" and "never communicates" in line and "world" in line
    zero = tmp_path / "zero.jsonl"
    zero.write_text(recorder_lines(2, [], [(k, 0, s, e) for k, _, s, e in buckets]))
    code, _, err = run(capsys, "profile", "--from", "recorder", str(zero))
    assert code == 2 and "never communicates" in error_line(err)
    worker = tmp_path / "w.jsonl"
    worker.write_text(
        "".join(
            json.dumps({"start": k, "comm_start": k + 0.5, "end": k + 1, "bytes_sent": 0}) + "\n"
            for k in range(5)
        )
    )
    code, _, err = run(capsys, "profile", "--from", "worker-log", str(worker))
    assert code == 2 and "never communicates" in error_line(err)


def test_a_zero_length_bucket_gives_a_phase_the_service_accepts(tmp_path, capsys):
    """start_s == end_s became a phase of 2e-10 s at 6e16 bit/s, which the HTTP service
    refuses (duration_s >= 1e-06, rate_bps <= 1e15)."""
    from cassini.service import models

    buckets = [(k, 10**6, 100.1 + 0.2 * k, 100.1 + 0.2 * k) for k in range(5)]
    path = tmp_path / "r.jsonl"
    path.write_text(recorder_lines(4, [(k, 100.0 + 0.2 * k) for k in range(5)], buckets))
    code, out, err = run(capsys, "profile", "--from", "recorder", str(path))
    assert code == 0, err
    job = json.loads(out)
    models.validate(models.Job, job)
    (phase,) = job["phases"]
    assert phase["duration_s"] >= models.MIN_TIME_S and phase["rate_bps"] <= models.MAX_RATE_BPS
    assert phase["duration_s"] * phase["rate_bps"] == pytest.approx(8 * 1.5 * 10**6)


@settings(max_examples=80, deadline=None)
@given(
    period=st.floats(1e-5, 10.0),
    spans=st.lists(
        st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(1.0, 1e14)),
        min_size=1,
        max_size=6,
    ),
    gap=st.sampled_from([0.0, 1e-3]),
)
def test_folded_phases_stay_within_the_services_bounds(period, spans, gap):
    """Every phase at least the service's shortest time and at most its fastest rate,
    every bit kept, phases valid (no overlap), whatever the intervals."""
    from cassini.service import models

    intervals = [(a * period, (a + 0.1 * d) * period, bits) for a, d, bits in spans]
    total = sum(bits for _, _, bits in intervals)
    if total > models.MAX_RATE_BPS * period:
        with pytest.raises(InputError, match="bits/s"):
            fold_phases(intervals, period, gap)
        return
    phases = fold_phases(intervals, period, gap)
    assert sum(p.rate_bps * p.duration_s for p in phases) == pytest.approx(total, rel=1e-9)
    job = {"id": "j", "iteration_time_s": period, "phases": [p.to_dict() for p in phases]}
    models.validate(models.Job, job)
    from cassini.profile import JobProfile

    JobProfile.from_dict(job)


def test_a_period_under_the_services_shortest_is_refused():
    with pytest.raises(InputError, match="iteration"):
        fold_phases([(0.0, 1e-8, 100.0)], 5e-7)


# -- 5. --plot into a missing folder ----------------------------------------------------------
def recorder_log(tmp_path: Path) -> Path:
    buckets = [(k, 10**6, 100.1 + 0.2 * k, 100.12 + 0.2 * k) for k in range(5)]
    path = tmp_path / "r.jsonl"
    path.write_text(recorder_lines(2, [(k, 100.0 + 0.2 * k) for k in range(5)], buckets))
    return path


def test_plot_into_a_missing_folder_makes_it(tmp_path, capsys):
    require_module("matplotlib", "draws --plot")
    out, plot = tmp_path / "a" / "p.json", tmp_path / "b" / "c" / "p.png"
    code, _, err = run(capsys, "profile", "--from", "recorder", str(recorder_log(tmp_path)),
                       "--out", str(out), "--plot", str(plot))  # fmt: skip
    assert code == 0, err
    assert plot.stat().st_size > 0 and json.loads(out.read_text())["phases"]
    assert sorted(p.name for p in plot.parent.iterdir()) == ["p.png"]  # no partial file left


def test_a_plot_that_cannot_be_written_names_plot(tmp_path, capsys, monkeypatch):
    require_module("matplotlib", "draws --plot")
    from matplotlib.figure import Figure

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    out, plot = tmp_path / "p.json", tmp_path / "p.png"
    code, _, err = run(capsys, "profile", "--from", "recorder", str(recorder_log(tmp_path)),
                       "--out", str(out), "--plot", str(plot))  # fmt: skip
    line = error_line(err)
    assert code == 2 and line.startswith("cassini: error: --plot: ") and str(plot) in line
    assert not plot.exists() and not out.exists()


# -- 6. options that do not apply to the source ---------------------------------------------------
@pytest.mark.parametrize(
    ("source", "flags", "named"),
    [
        ("worker-log", ["--src-ip", "10.9.9.9"], "--src-ip"),
        ("worker-log", ["--starts-log", "X"], "--starts-log"),
        ("worker-log", ["--window", "5", "6"], "--window"),
        ("worker-log", ["--world-size", "99"], "--world-size"),
        ("worker-log", ["--dt-s", "0.002"], "--dt-s"),
        ("recorder", ["--src-ip", "10.9.9.9"], "--src-ip"),
        ("recorder", ["--window", "5", "6"], "--window"),
        ("recorder", ["--dt-s", "0.002"], "--dt-s"),
        ("pcap", ["--src-ip", SRC, "--world-size", "2"], "--world-size"),
        ("pcap", ["--src-ip", SRC, "--skip", "2"], "--skip"),
    ],
)
def test_options_that_do_not_apply_to_the_source_are_refused(
    tmp_path, capsys, source, flags, named
):
    path = tmp_path / "in"
    path.write_text("{}\n")
    code, out, err = run(capsys, "profile", "--from", source, str(path), *flags)
    line = error_line(err)
    assert code == 2 and out == "" and line.startswith(f"cassini: error: {named}: applies to ")
    assert "--from" in line


def test_options_that_apply_are_taken(tmp_path, capsys):
    log = recorder_log(tmp_path)
    code, _, err = run(capsys, "profile", "--from", "recorder", str(log), "--world-size", "4",
                       "--skip", "0")  # fmt: skip
    assert code == 0, err
    fine_capture(tmp_path / "c.pcap")
    starts = tmp_path / "w.jsonl"
    starts.write_text("".join(json.dumps({"start": 1000.0 + k / 10}) + "\n" for k in range(12)))
    argv = ["profile", "--from", "pcap", str(tmp_path / "c.pcap"), "--src-ip", SRC]
    code, _, err = run(capsys, *argv, "--starts-log", str(starts), "--skip", "2", "--dt-s", "0.002")
    assert code == 0, err


# -- 10. ambiguous model names -----------------------------------------------------------------
def test_an_ambiguous_model_name_lists_every_equally_close_id():
    ids = ["vgg11", "vgg16", "vgg19", "resnet50", "gpt2", "gpt3"]
    assert unknown_model("vgg", ids).endswith("; did you mean one of vgg11, vgg16, vgg19?")
    assert unknown_model("gpt", ids).endswith("; did you mean one of gpt2, gpt3?")
    assert unknown_model("resnet5", ids).endswith("; did you mean 'resnet50'?")
    assert "did you mean" not in unknown_model("bert", ids)
    assert unknown_model("vgg", []) == "unknown model 'vgg' (library: )"


def test_nic_bps_is_written_as_provenance_that_the_simulator_scales_from(tmp_path, capsys):
    """``cassini profile --nic-bps`` writes ``provenance.nic_bps``: ``cassini sim`` then
    scales the profile from the NIC it was measured on (without it, a warning says 50
    Gbit/s was assumed); ``cassini score`` reads the file as it is."""
    from cassini.nic_scale import measured_nic_bps
    from cassini.sim.workload import load_library, profile_warnings

    log = tmp_path / "w.jsonl"
    log.write_text("".join(
        json.dumps({"start": 10.0 + 0.1 * k, "comm_start": 10.06 + 0.1 * k,
                    "end": 10.09 + 0.1 * k, "bytes_sent": 1_000_000}) + "\n" for k in range(8)))
    out, bare = tmp_path / "p.json", tmp_path / "bare.json"
    for path, extra in ((out, ["--nic-bps", "1e10"]), (bare, [])):
        code = main(["profile", "--from", "worker-log", str(log), "--job-id", "w",
                     "--out", str(path), *extra])
        assert code == 0, capsys.readouterr().err
    written = json.loads(out.read_text())
    assert written["provenance"]["nic_bps"] == 1e10
    assert "provenance" not in json.loads(bare.read_text())
    assert measured_nic_bps(load_library([out])["w"]) == 1e10
    assert profile_warnings([out], "scale-to-nic") == []
    assert len(profile_warnings([bare], "scale-to-nic")) == 1
    with pytest.raises(SystemExit) as e:
        main(["profile", "--from", "worker-log", str(log), "--nic-bps", "0"])
    assert e.value.code == 2 and "--nic-bps" in capsys.readouterr().err


def test_a_truncated_capture_is_one_line_on_the_real_stderr(tmp_path):
    """scapy logs "Pcap: packet has been truncated" to stderr itself; in a terminal that
    was a second line beside ours (pytest's log capture hid it from the in-process file
    fuzzer, which failed only when an earlier test had left a logging handler on a closed
    stream).  Run as a process, so stderr is what a user sees."""
    import subprocess
    import sys

    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    packets = []
    for i in range(40):
        p = Ether() / IP(src=SRC, dst="10.0.0.2") / TCP() / (b"x" * 1000)
        p.time = 100.0 + 0.1 * (i // 10) + 0.001 * (i % 10)
        packets.append(p)
    whole = tmp_path / "whole.pcap"
    wrpcap(str(whole), packets)
    cut = tmp_path / "cut.pcap"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    done = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "profile", "--from", "pcap", str(cut),
         "--src-ip", SRC],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"cassini: error: {cut}: truncated capture: a packet holds 1042 of 1054 bytes"
    ]
