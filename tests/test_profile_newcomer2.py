"""``cassini profile`` review of 2026-11-29: VLAN-tagged captures (F1), the profile
``cassini profile --nic-bps`` writes (with ``provenance``) as a running job of a cluster
file and of ``POST /v1/jobs`` (F2), and a worker log whose medians add up to more than
its period (F3)."""

from __future__ import annotations

import json
import struct

import pytest
import yaml
from conftest import require_module
from helpers.service_util import HALF, call, error_of, ok_json, pair, start, two_node_cluster

from cassini import measure
from cassini.cli import main
from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.service.cluster import load_cluster_file, read_cluster, read_job

# -- F1: VLAN tags ------------------------------------------------------------------------
# Captures are written with test_profile_inputs' writer (link headers by hand, the IP
# packets by scapy); scapy is needed only here (it reads captures too), so F2 and F3 run
# without it.
SRC = "10.0.0.1"
ETHERNET = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"  # untagged, ethertype IPv4
MACS = ETHERNET[:12]
#: 10 iterations of 100 ms, each opening with a 2 ms burst of 20 packets
TIMES = [1000.0 + k * 0.1 + i * 1e-4 for k in range(10) for i in range(20)]


@pytest.fixture()
def pcaps():
    """test_profile_inputs (its capture writer and packets), scapy required."""
    require_module("scapy", "the testbed extra: reads and writes captures")
    import test_profile_inputs

    assert test_profile_inputs.ETHERNET == ETHERNET and test_profile_inputs.SRC == SRC
    return test_profile_inputs


def tag(ethertype: int, vlan: int) -> bytes:
    """A 4-byte VLAN tag of type ``ethertype`` (its TCI: VLAN ``vlan``, priority 0)."""
    return struct.pack("!HH", ethertype, vlan)


def tagged(ip: bytes, *tags: bytes) -> bytes:
    """An Ethernet frame carrying the IPv4 packet ``ip`` behind ``tags`` (outermost first)."""
    return MACS + b"".join(tags) + b"\x08\x00" + ip


def capture(pcaps, path, frame_of, linktype=1):
    """A capture at ``path`` of 1400-byte packets from SRC at TIMES, packet i in the frame
    ``frame_of(i, ip)``."""
    ip = pcaps.ip_packet(1400)
    pcaps.write_pcap(path, [(t, frame_of(i, ip)) for i, t in enumerate(TIMES)], linktype)
    return path


def untagged(i, ip):
    return ETHERNET + ip


@pytest.mark.parametrize(
    "tags",
    [
        (tag(0x8100, 100),),  # 802.1Q
        (tag(0x88A8, 7), tag(0x8100, 100)),  # 802.1ad QinQ: service tag, then customer tag
        (tag(0x9100, 7), tag(0x8100, 100)),  # the older QinQ ethertype
        (tag(0x8100, 7), tag(0x8100, 100), tag(0x8100, 5)),  # three stacked
    ],
)
def test_vlan_tagged_frames_are_read_as_untagged_ones(pcaps, tmp_path, tags):
    plain = capture(pcaps, tmp_path / "plain.pcap", untagged)
    vlan = capture(pcaps, tmp_path / "vlan.pcap", lambda i, ip: tagged(ip, *tags))
    mixed = capture(
        pcaps, tmp_path / "mix.pcap", lambda i, ip: tagged(ip, *tags) if i % 2 else ETHERNET + ip
    )
    want_t, want_size = measure.pcap_packets(plain, SRC, payload=True)
    assert len(want_t) == len(TIMES)
    want = measure.profile_from_pcap("j", plain, SRC)
    for path in (vlan, mixed):  # all tagged: had no packets; every other: half the rate
        t, size = measure.pcap_packets(path, SRC, payload=True)
        assert t.tolist() == want_t.tolist() and size.tolist() == want_size.tolist()
        assert measure.profile_from_pcap("j", path, SRC) == want


def test_a_linux_cooked_capture_with_vlan_tags_is_read_too(pcaps, tmp_path):
    sll = pcaps.HEADERS[113]
    head, ethertype = sll[:-2], sll[-2:]
    assert ethertype == b"\x08\x00"

    def frame(i, ip):
        return head + tag(0x8100, 100) + ethertype + ip if i % 2 else sll + ip

    path = capture(pcaps, tmp_path / "sll_vlan.pcap", frame, linktype=113)
    _, sizes = measure.pcap_packets(path, SRC)
    assert len(sizes) == len(TIMES) and set(sizes.tolist()) == {1400 + 40}


def test_a_tagged_frame_that_is_not_ipv4_is_still_skipped(pcaps, tmp_path):
    # a tagged ARP frame beside each tagged IP one: its payload is no IPv4 packet
    arp = MACS + tag(0x8100, 100) + b"\x08\x06" + b"\x00\x01\x08\x00\x06\x04" + bytes(22)
    path = capture(
        pcaps, tmp_path / "arp.pcap", lambda i, ip: arp if i % 2 else tagged(ip, tag(0x8100, 1))
    )
    t, _ = measure.pcap_packets(path, SRC)
    assert len(t) == len(TIMES) // 2


def test_cassini_profile_reads_an_all_tagged_capture(pcaps, tmp_path, capsys):
    plain = capture(pcaps, tmp_path / "plain.pcap", untagged)
    vlan = capture(pcaps, tmp_path / "vlan.pcap", lambda i, ip: tagged(ip, tag(0x8100, 100)))
    outs = []
    for path in (plain, vlan):
        assert main(["profile", "--from", "pcap", str(path), "--src-ip", SRC]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1] and outs[1]["phases"]


# -- F2: provenance in a running job ------------------------------------------------------


def profile_with_provenance(tmp_path, capsys) -> dict:
    """What ``cassini profile --nic-bps`` writes for a small worker log."""
    log = tmp_path / "w.jsonl"
    lines = [
        {"iter": k, "start": 0.1 * k, "comm_start": 0.1 * k + 0.06, "end": 0.1 * (k + 1),
         "bytes_sent": 1_000_000}
        for k in range(6)
    ]  # fmt: skip
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "mine.json"
    argv = ["profile", "--from", "worker-log", str(log), "--job-id", "mine", "--nic-bps", "50e9"]
    assert main([*argv, "--out", str(out)]) == 0
    capsys.readouterr()
    job = json.loads(out.read_text())
    assert isinstance(job["provenance"], dict)  # what the readers below must accept
    return job


def test_a_profile_with_provenance_is_a_running_job_of_a_cluster_file(tmp_path, capsys):
    job = profile_with_provenance(tmp_path, capsys)
    doc = two_node_cluster()
    doc["jobs"].append(dict(job, nodes=pair("n3")))
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    _, jobs = load_cluster_file(path)
    mine = next(j for j in jobs if j.job_id == "mine")
    assert mine.profile == JobProfile.from_dict(job)  # read as every JOB reader reads it
    assert "provenance" not in mine.to_dict()  # read, not kept
    assert main(["cluster", "show", str(path)]) == 0


@pytest.mark.parametrize("bad", [None, "cpu", [1], 3])
def test_provenance_must_be_an_object_in_a_running_job_as_in_a_job(bad):
    job = {"id": "j", "iteration_time_s": 0.1, "phases": HALF, "provenance": bad}
    with pytest.raises(InputError) as own:
        JobProfile.from_dict(job)
    assert own.value.field == "job.provenance"
    doc = two_node_cluster()
    doc["jobs"].append(dict(job, nodes=pair("n3")))
    with pytest.raises(InputError) as running:
        read_cluster(doc)
    assert running.value.field == "jobs[2].provenance"
    assert "object" in running.value.problem


def test_a_library_job_may_carry_provenance_too():
    job = read_job({"id": "b", "model": "bert", "nodes": [], "provenance": {"source": "x"}})
    assert job.model == "bert"


def test_post_v1_jobs_takes_the_profile_cassini_profile_wrote(tmp_path, capsys):
    job = profile_with_provenance(tmp_path, capsys)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(two_node_cluster()))
    srv = start(cluster_file=str(path), workers=1, quiet=True)
    try:
        body = dict(job, nodes=pair("n3"))
        out = ok_json(call(srv.port, "POST", "/v1/jobs", body), 201)
        assert out["id"] == "mine" and "provenance" not in out
        assert out["phases"] == job["phases"]
        err = error_of(call(srv.port, "POST", "/v1/jobs", dict(body, provenance="cpu")))
        assert err["code"] == 400 and err["field"] == "provenance"
    finally:
        srv.stop()


# -- F3: a worker log whose medians overrun the period ------------------------------------


def alternating_log(n: int = 10) -> list[dict]:
    """Iterations alternating 100 and 120 ms, each computing 60 % of it first."""
    lines, t = [], 1000.0
    for k in range(n):
        period = 0.1 if k % 2 == 0 else 0.12
        lines.append({"iter": k, "start": t, "comm_start": t + 0.6 * period,
                      "end": t + period, "bytes_sent": 5_000_000})  # fmt: skip
        t += period
    return lines


def test_a_worker_log_phase_ends_by_the_iteration_end():
    profile = measure.profile_from_log("w", alternating_log())
    (phase,) = profile.phases
    period = profile.iteration_time_s
    assert period == pytest.approx(0.11)
    assert phase.duration_s == pytest.approx(0.048)  # the median communication time kept
    assert phase.start_s + phase.duration_s <= period + 1e-12  # did end at 0.120
    assert phase.start_s == pytest.approx(0.062)
    assert phase.rate_bps * phase.duration_s == pytest.approx(5_000_000 * 8)


def test_a_worker_log_phase_that_fits_still_starts_after_the_median_compute():
    lines = [
        {"iter": k, "start": 0.1 * k, "comm_start": 0.1 * k + 0.05, "end": 0.1 * k + 0.09,
         "bytes_sent": 1_000_000}
        for k in range(6)
    ]  # fmt: skip
    (phase,) = measure.profile_from_log("w", lines).phases
    assert phase.start_s == pytest.approx(0.05) and phase.duration_s == pytest.approx(0.04)
