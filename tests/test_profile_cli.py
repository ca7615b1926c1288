"""``cassini profile``: recorder log, worker log or pcap -> the JOB JSON of ``cassini advise``.

``tests/data/ddp_recorder_mlp512.jsonl`` is a real recorder log: rank 0 of a 2-rank gloo
DDP job on loopback (MLP 512 x 5 layers, batch 768, bucket_cap_mb 0.9, 30 iterations,
``CommHookRecorder.write_jsonl``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import testbed.measure
from cassini import measure
from cassini.cli import main
from cassini.profile import JobProfile

DATA = Path(__file__).parent / "data"
RECORDER_LOG = DATA / "ddp_recorder_mlp512.jsonl"


def run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def layout_bytes(path: Path) -> tuple[int, int]:
    """(world size, bytes of the most common bucket layout), read independently."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    world = next(x["world_size"] for x in lines if x.get("type") == "meta")
    per_iter: dict[int, list[int]] = {}
    for x in lines:
        if x.get("type") == "bucket":
            per_iter.setdefault(x["iteration"], []).append(x["bytes"])
    common = Counter(tuple(sorted(v)) for v in per_iter.values()).most_common(1)[0][0]
    return world, sum(common)


def test_recorder_log_to_profile_json_plot_and_advise(tmp_path, capsys):
    out_json, png = tmp_path / "p.json", tmp_path / "p.png"
    code, out, err = run(
        [
            "profile",
            "--from",
            "recorder",
            str(RECORDER_LOG),
            "--job-id",
            "mlp",
            "--out",
            str(out_json),
            "--plot",
            str(png),
        ],
        capsys,
    )
    assert code == 0 and out == "" and err == ""
    profile = JobProfile.from_dict(json.loads(out_json.read_text()))
    world, grad_bytes = layout_bytes(RECORDER_LOG)
    assert profile.job_id == "mlp"
    assert profile.bytes_per_iteration == pytest.approx(2 * (world - 1) / world * grad_bytes)
    assert len(profile.phases) >= 2  # DDP-shaped: several bursts
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the output is a JOB of an advise request
    request = {
        "links": [{"id": "l", "capacity_bps": 1e10}],
        "jobs": [json.loads(out_json.read_text()), {**profile.to_dict(), "id": "other"}],
        "candidates": [{"id": "c", "paths": {"mlp": ["l"], "other": ["l"]}}],
    }
    req = tmp_path / "req.json"
    req.write_text(json.dumps(request))
    code, out, _ = run(["advise", str(req)], capsys)
    assert code == 0 and json.loads(out)["best"] == "c"


def test_recorder_world_size_option_overrides_the_log(capsys):
    code, out, _ = run(
        ["profile", "--from", "recorder", str(RECORDER_LOG), "--world-size", "4"], capsys
    )
    assert code == 0
    _, grad_bytes = layout_bytes(RECORDER_LOG)
    assert JobProfile.from_dict(json.loads(out)).bytes_per_iteration == pytest.approx(
        2 * 3 / 4 * grad_bytes
    )


def test_worker_log_to_profile(tmp_path, capsys):
    period, compute, sent = 0.1, 0.06, 500_000
    log = tmp_path / "w.jsonl"
    log.write_text(
        "".join(
            json.dumps(
                {
                    "iter": k,
                    "start": k * period,
                    "comm_start": k * period + compute,
                    "end": (k + 1) * period,
                    "bytes_sent": sent,
                }
            )
            + "\n"
            for k in range(10)
        )
    )
    code, out, _ = run(["profile", "--from", "worker-log", str(log)], capsys)
    assert code == 0
    p = JobProfile.from_dict(json.loads(out))
    assert p.iteration_time_s == pytest.approx(period)
    assert p.phases[0].start_s == pytest.approx(compute)
    assert p.bytes_per_iteration == pytest.approx(sent)


def write_pcap(path: Path, period: float, iterations: int) -> None:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import PcapWriter

    w = PcapWriter(str(path))
    for k in range(iterations):
        for i in range(200):
            pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.3") / TCP() / (b"x" * 1446)
            pkt.time = 1000.0 + k * period + i * 1e-4
            w.write(pkt)
    w.close()


def test_pcap_to_profile(tmp_path, capsys):
    pytest.importorskip("scapy")
    period = 0.137
    pcap = tmp_path / "x.pcap"
    write_pcap(pcap, period, 10)
    code, out, _ = run(
        ["profile", "--from", "pcap", str(pcap), "--src-ip", "10.0.0.1", "--job-id", "h1"],
        capsys,
    )
    assert code == 0
    p = JobProfile.from_dict(json.loads(out))
    assert p.job_id == "h1" and p.iteration_time_s == pytest.approx(period, rel=0.02)
    assert p.bytes_per_iteration == pytest.approx(200 * 1446, rel=0.02)  # payload, all of it
    window = ["--window", str(1000.0 + 2 * period), str(1000.0 + 8 * period)]
    code, out, _ = run(
        ["profile", "--from", "pcap", str(pcap), "--src-ip", "10.0.0.1", *window], capsys
    )
    assert code == 0
    w = JobProfile.from_dict(json.loads(out))
    assert w.iteration_time_s == pytest.approx(period, rel=0.02)
    assert w.bytes_per_iteration == pytest.approx(200 * 1446, rel=0.02)
    code, _, err = run(["profile", "--from", "pcap", str(pcap), "--src-ip", "10.0.0.7"], capsys)
    assert code == 2 and err.startswith("cassini: error: src_ip:") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("source", "content", "extra", "field"),
    [
        (
            "recorder",
            '{"type": "bucket", "iteration": 0, "bucket": 0, "bytes": 1, '
            '"start_s": 0, "end_s": 1}\n',
            [],
            "world_size",
        ),
        (
            "recorder",
            '{"type": "meta", "world_size": 2}\n{"type": "bucket", "iteration": 0}\n',
            [],
            "log[1].bucket",
        ),
        ("recorder", '{"type": "meta", "world_size": 0}\n', [], "log[0].world_size"),
        ("recorder", '{"type": "meta", "world_size": 2}\n', [], "records"),
        ("recorder", '{"type": "meta", "world_size": 2}\nnot json\n', [], "log line 2"),
        ("worker-log", '{"start": 0, "comm_start": 0.1, "bytes_sent": 5}\n', [], "log[0].end"),
        ("worker-log", '{"start": 0, "comm_start": 0.1, "end": 0.2, "bytes_sent": 5}\n', [], "log"),
        ("pcap", "", [], "src_ip"),
        ("pcap", "not a capture", ["--src-ip", "10.0.0.1"], "pcap"),
        ("pcap", "", ["--src-ip", "10.0.0.999"], "src_ip"),
        ("recorder", None, [], "log"),
        ("worker-log", "{}\n", ["--skip", "-1"], "skip"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(
    tmp_path, capsys, source, content, extra, field
):
    path = tmp_path / "in"
    if content is not None:
        path.write_text(content)
    code, out, err = run(["profile", "--from", source, str(path), *extra], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"cassini: error: {field}") and err.count("\n") == 1, err


def test_testbed_measure_is_the_cassini_implementation():
    for name in ("profile_from_log", "profile_from_pcap", "pcap_series", "iteration_times"):
        assert getattr(testbed.measure, name) is getattr(measure, name)
