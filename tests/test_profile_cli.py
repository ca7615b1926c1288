"""``cassini profile``: recorder log, worker log or pcap -> the JOB JSON of ``cassini advise``.

``tests/data/ddp_recorder_mlp512.jsonl`` is a real recorder log: rank 0 of a 2-rank gloo
DDP job on loopback (MLP 512 x 5 layers, batch 768, bucket_cap_mb 0.9, 30 iterations,
``CommHookRecorder.write_jsonl``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import require_module
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini import measure
from cassini.cli import main
from cassini.errors import InputError
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
    require_module("scapy", "the testbed extra")
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
    # named by its flag (review mends: "src_ip: --src-ip ..." named it twice)
    assert code == 2 and err.startswith("cassini: error: --src-ip:") and err.count("\n") == 1


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
        ("recorder", '{"type": "meta", "world_size": 2}\nnot json\n', [], "{path}: log line 2"),
        # a key given twice is refused as the CLI's JSON reader refuses it (it was kept)
        (
            "recorder",
            '{"type": "meta", "world_size": 2}\n'
            '{"type": "meta", "world_size": 3, "world_size": 2}\n',
            [],
            "{path}: log line 2: malformed JSON: duplicate key 'world_size'",
        ),
        (
            "worker-log",
            '{"start": 0, "comm_start": 0.1, "end": 0.2, "bytes_sent": 5, "start": 1}\n',
            [],
            "{path}: log line 1: malformed JSON: duplicate key 'start'",
        ),
        # an integer Python will not convert, nesting json will not follow: one line
        ("worker-log", '{"start": ' + "9" * 5000 + "}\n", [], "{path}: log line 1: malformed JSON"),
        ("worker-log", "[" * 100_000 + "\n", [], "{path}: log line 1: malformed JSON: nested"),
        ("worker-log", '{"start": 0, "comm_start": 0.1, "bytes_sent": 5}\n', [], "log[0].end"),
        ("worker-log", '{"start": 0, "comm_start": 0.1, "end": 0.2, "bytes_sent": 5}\n', [], "log"),
        ("pcap", "", [], "--src-ip"),
        ("pcap", "not a capture", ["--src-ip", "10.0.0.1"], "{path}: not a pcap"),
        ("pcap", "", ["--src-ip", "10.0.0.999"], "--src-ip"),
        ("recorder", None, [], "{path}: cannot read"),
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
    field = field.format(path=path)  # a file's own problems (cassini.files) name the file
    assert err.startswith(f"cassini: error: {field}") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("content", "where", "problem"),
    [
        # a key given twice: refused as the CLI's JSON reader refuses it (the last was kept)
        (
            '{"type": "meta", "world_size": 2}\n{"type": "meta", "world_size": 3, '
            '"world_size": 2}\n',
            "log line 2",
            "malformed JSON: duplicate key 'world_size'",
        ),
        ('{"a": {"b": 1, "b": 2}}\n', "log line 1", "malformed JSON: duplicate key 'b'"),
        # an integer Python will not convert, nesting json will not follow (a traceback)
        ('{"start": ' + "9" * 5000 + "}\n", "log line 1", "malformed JSON"),
        ("{}\n" + "[" * 100_000 + "\n", "log line 2", "malformed JSON: nested too deeply"),
    ],
)
def test_read_jsonl_refuses_what_the_cli_json_reader_refuses(tmp_path, content, where, problem):
    path = tmp_path / "log.jsonl"
    path.write_text(content)
    with pytest.raises(InputError) as e:
        measure.read_jsonl(path)
    assert str(e.value).startswith(f"{path}: {where}: {problem}"), str(e.value)


def drifting_iterations(lengths_s, offset_s, burst_s, gap_s=1e-4, size=1446):
    """Packet stamps and sizes of iterations of the given lengths (s), each sending a
    burst from ``offset_s`` to ``offset_s + burst_s`` after its own start, plus the
    starts (one more than iterations)."""
    starts = 1000.0 + np.concatenate(([0.0], np.cumsum(lengths_s)))
    per = int(round(burst_s / gap_s))
    stamps = np.concatenate([s + offset_s + np.arange(per) * gap_s for s in starts[:-1]])
    return stamps, np.full(stamps.size, float(size)), starts


@settings(max_examples=40, deadline=None)
@given(
    drift=st.floats(-0.002, 0.002),
    jitter=st.lists(st.floats(-0.003, 0.003), min_size=20, max_size=20),
    offset=st.floats(0.0, 0.04),
)
def test_fold_by_iteration_keeps_a_phase_where_it_is_in_each_iteration(drift, jitter, offset):
    """Iterations of 100 ms drifting by up to 2 ms each (+- 3 ms jitter), a 50 ms burst
    ``offset`` after each start: folded from each iteration's own start the profile has
    one phase there, of the burst's length, with every byte."""
    lengths = [0.1 + drift * k / 20 + j for k, j in enumerate(jitter)]
    stamps, sizes, starts = drifting_iterations(lengths, offset, 0.05)
    folded, period = measure.fold_by_iteration(stamps, sizes, starts, 0.001)
    assert period == pytest.approx(float(np.median(np.diff(starts))))
    p = JobProfile.from_folded(folded, period, conserve_bytes=True)
    assert len(p.phases) == 1
    assert p.phases[0].start_s == pytest.approx(offset, abs=0.0011)
    assert p.phases[0].duration_s == pytest.approx(0.05, abs=0.0021)
    assert p.bytes_per_iteration == pytest.approx(sizes.sum() / 20)


def test_fold_at_one_period_slides_a_drifting_phase_and_by_iteration_does_not():
    """The experiment-4 failure: iterations growing from 100 to 104 ms, a 50 ms burst
    45 ms after each start.  The fold at the median period moves the burst's bytes away
    from 45 ms; the fold from each iteration's start keeps them there."""
    lengths = list(np.linspace(0.100, 0.104, 21))
    stamps, sizes, starts = drifting_iterations(lengths, 0.045, 0.05)
    period = float(np.median(lengths))
    series, first = measure.series_from_packets(stamps, sizes, 0.001, (starts[0], starts[-1]))
    one_period = measure.profile_from_series(
        "a", series, first, 0.001, starts[0], iteration_time_s=period, conserve_bytes=True
    )
    folded, _ = measure.fold_by_iteration(stamps, sizes, starts, 0.001)
    by_iteration = JobProfile.from_folded(folded, period, conserve_bytes=True)

    def bits_in_burst(p):  # bits the profile sends in [45, 95) ms
        return (
            sum(
                ph.rate_bps
                * max(0.0, min(ph.start_s + ph.duration_s, 0.095) - max(ph.start_s, 0.045))
                for ph in p.phases
            )
            / p.bits_per_iteration
        )

    assert bits_in_burst(by_iteration) > 0.97
    assert by_iteration.phases[0].start_s == pytest.approx(0.045, abs=0.0011)
    # the fold at one period slid the burst 8 ms earlier (its bits leaking out of place)
    assert abs(one_period.phases[0].start_s - 0.045) > 0.005
    assert bits_in_burst(one_period) < 0.9


def test_pcap_folded_from_the_worker_logs_starts(tmp_path, capsys):
    require_module("scapy", "the testbed extra")
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import PcapWriter

    lengths = list(np.linspace(0.100, 0.104, 12))
    stamps, _, starts = drifting_iterations(lengths, 0.045, 0.05, gap_s=5e-4)
    w = PcapWriter(str(tmp_path / "x.pcap"))
    for t in stamps:
        pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.3") / TCP() / (b"x" * 1446)
        pkt.time = float(t)
        w.write(pkt)
    w.close()
    log = tmp_path / "rank0.jsonl"
    log.write_text(
        "".join(json.dumps({"iter": k, "start": s}) + "\n" for k, s in enumerate(starts))
    )
    argv = ["profile", "--from", "pcap", str(tmp_path / "x.pcap"), "--src-ip", "10.0.0.1"]
    code, out, _ = run([*argv, "--starts-log", str(log)], capsys)
    assert code == 0
    p = JobProfile.from_dict(json.loads(out))
    assert len(p.phases) == 1
    assert p.phases[0].start_s == pytest.approx(0.045, abs=0.0011)  # within a bin
    assert p.iteration_time_s == pytest.approx(float(np.median(lengths[1:])))
    assert p.bytes_per_iteration == pytest.approx(100 * 1446)
    code, out, err = run([*argv, "--starts-log", str(log), "--window", "0", "1"], capsys)
    assert code == 2 and err.startswith("cassini: error: window:")
    log.write_text('{"iter": 0, "start": 1}\n{"iter": 1}\n')
    code, out, err = run([*argv, "--starts-log", str(log)], capsys)
    assert code == 2 and err.startswith("cassini: error: starts_log[1].start:")
    # a recorder log: its iteration lines are the starts; bucket lines may omit "type"
    rec = tmp_path / "rec.jsonl"
    lines = [{"type": "meta", "world_size": 2}]
    for k, s in enumerate(starts):
        lines.append({"type": "iteration", "iteration": k, "start_s": s})
        lines.append({"iteration": k, "bucket": 0, "bytes": 1, "start_s": s, "end_s": s})
    rec.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out, _ = run([*argv, "--starts-log", str(rec)], capsys)
    assert (
        code == 0 and JobProfile.from_dict(json.loads(out)).iteration_time_s == p.iteration_time_s
    )
    rec.write_text('{"type": "meta", "world_size": 2}\n{"type": "Iteration", "start_s": 1}\n')
    code, out, err = run([*argv, "--starts-log", str(rec)], capsys)
    assert code == 2 and err.startswith("cassini: error: starts_log[1].type:")
    rec.write_text('{"start": 1}\n{"start": 2}\n')
    code, out, err = run([*argv, "--starts-log", str(rec)], capsys)
    assert code == 2 and "need at least 3 iteration starts, got 2" in err


@pytest.mark.parametrize(
    ("starts", "field"),
    [
        ([1000.0], "iteration_starts_s"),
        ([1000.1, 1000.0], "iteration_starts_s[1]"),
        ([1000.0, "x"], "iteration_starts_s[1]"),
        ([0.0, 1.0], "packets"),
    ],
)
def test_fold_by_iteration_names_bad_starts(starts, field):
    stamps, sizes, _ = drifting_iterations([0.1, 0.1], 0.0, 0.05)
    with pytest.raises(InputError) as e:
        measure.fold_by_iteration(stamps, sizes, starts, 0.001)
    assert e.value.field == field


def test_fold_by_iteration_takes_starts_by_iteration_index():
    """A recorder's starts come as {iteration: start}: the same fold as the list."""
    stamps, sizes, starts = drifting_iterations([0.1, 0.102, 0.099, 0.101], 0.03, 0.05)
    by_index = {k + 5: s for k, s in reversed(list(enumerate(starts)))}
    listed = measure.fold_by_iteration(stamps, sizes, list(starts), 0.001)
    mapped = measure.fold_by_iteration(stamps, sizes, by_index, 0.001)
    assert mapped[1] == listed[1] and np.array_equal(mapped[0], listed[0])


def worker_log(path: Path, **change: float) -> Path:
    """Six iterations of a 0.1 s job sending 5 MB from 0.06 s; ``change`` sets a field in
    every record (``end_delta`` moves each ``end`` by that much)."""
    delta = change.pop("end_delta", 0.0)
    recs = [
        {
            "start": k * 0.1,
            "comm_start": k * 0.1 + 0.06,
            "end": (k + 1) * 0.1 + delta,
            "bytes_sent": 5e6,
        }
        | change
        for k in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"end_delta": -0.11}, "log[0].end: -0.01 is before comm_start 0.06"),
        ({"bytes_sent": 0}, "log.bytes_sent: no bytes were sent"),
        ({"bytes_sent": -1}, "log[0].bytes_sent: must be >= 0"),
    ],
    ids=["end-before-comm-start", "no-bytes", "negative-bytes"],
)
def test_impossible_worker_log_timings_are_errors(tmp_path, capsys, change, message):
    """They gave exit 0 and ``"phases": []``: a job that never communicates."""
    log = worker_log(tmp_path / "w.jsonl", **change)
    code, out, err = run(["profile", "--from", "worker-log", str(log)], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"cassini: error: {message}") and err.count("\n") == 1, err


def test_comm_start_before_start_is_an_error(tmp_path):
    recs = [{"start": 0.0, "comm_start": -0.5, "end": 0.1, "bytes_sent": 1}]
    with pytest.raises(InputError, match=r"log\[0\].comm_start: -0.5 is before start 0$"):
        measure.profile_from_log("a", recs)


def test_too_few_iterations_says_so_plainly(tmp_path, capsys):
    log = tmp_path / "w.jsonl"
    log.write_text("".join(worker_log(tmp_path / "all.jsonl").read_text().splitlines(True)[:2]))
    code, _, err = run(["profile", "--from", "worker-log", str(log)], capsys)
    assert code == 2 and "job job" not in err  # was "log: job job: need at least 3 ..."
    assert err == (
        "cassini: error: log: need at least 3 iteration records to profile "
        "(1 warm-up left out, then 2), got 2\n"
    )
