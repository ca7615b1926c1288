"""Testbed logic that needs no root: topologies, fabric commands, config, agent, launcher,
measurement from logs and from a pcap written here."""

import argparse
import statistics
from dataclasses import replace

import pytest

from cassini.measure import pcap_series, profile_from_log
from mltcp.policy import MltcpOptions
from testbed import fabric
from testbed.iterations import off_slot, summary
from testbed.launch import launch_commands
from testbed.results import ExperimentResult, JobResult, SchemeResult
from testbed.run import ConfigError, format_table, load_config
from testbed.topo import FabricSpec, dumbbell, from_config, leaf_spine


def test_dumbbell_names_paths_and_advisor_links():
    t = dumbbell(2, 200e6, 1e9)
    assert t.hosts == ("h1", "h2", "h3", "h4")
    assert t.attach["h1"] == "tbs1" and t.attach["h3"] == "tbs2"
    assert t.path("h1", "h3") == ["h1->tbs1", "tbs1->tbs2", "tbs2->h3"]
    assert t.ring_links(["h1", "h3"]) == [
        "h1->tbs1",
        "tbs1->tbs2",
        "tbs2->h3",
        "h3->tbs2",
        "tbs2->tbs1",
        "tbs1->h1",
    ]
    caps = {link["id"]: link["capacity_bps"] for link in t.advisor_links()}
    assert caps["tbs1->tbs2"] == 200e6 and caps["h1->tbs1"] == 1e9
    assert t.ip("h3") == "10.0.0.3"


def test_leaf_spine_routes_deterministically_and_oversubscribes():
    t = leaf_spine(leaves=2, spines=2, hosts_per_leaf=2, host_bps=1e9, oversubscription=2)
    caps = t.link_capacity()
    assert caps["tbl1->tbp1"] == pytest.approx(2 * 1e9 / 2 / 2)
    # traffic to host i on another leaf crosses spine i mod 2
    assert t.path("h1", "h3") == ["h1->tbl1", "tbl1->tbp1", "tbp1->tbl2", "tbl2->h3"]
    assert t.path("h1", "h4") == ["h1->tbl1", "tbl1->tbp2", "tbp2->tbl2", "tbl2->h4"]
    assert t.path("h1", "h2") == ["h1->tbl1", "tbl1->h2"]


def test_fabric_specs_and_commands():
    with pytest.raises(ValueError, match="fabric"):
        FabricSpec("red")
    fifo = fabric.commands(FabricSpec("fifo", buffer_packets=20), "tbs1-eth3", 200e6)
    assert any("pfifo" in c and "20" in c for c in fifo)
    fair = fabric.commands(
        FabricSpec("fair"), "tbs1-eth3", 200e6, [["10.0.0.1", "10.0.0.3"], ["10.0.0.2"]]
    )
    classes = [c for c in fair if c[:2] == ["tc", "class"] and "1:1" in c[c.index("parent") + 1]]
    # one class per job plus the default class, each allowed the full link rate
    assert len(classes) == 3
    assert all(c[c.index("ceil") + 1] == "200000000bit" for c in classes)
    filters = [c for c in fair if c[:2] == ["tc", "filter"]]
    assert len(filters) == 3 and any("10.0.0.3/32" in c for c in filters)
    with pytest.raises(ValueError, match="marker"):
        fabric.commands(FabricSpec("ecn"), "x", 1e8)


EXAMPLE = {
    "topology": {
        "kind": "dumbbell",
        "pairs": 2,
        "bottleneck_bps": 200000000,
        "access_bps": 1000000000,
        "fabric": "fair",
    },
    "jobs": [
        {
            "id": "a",
            "kind": "synthetic",
            "hosts": ["h1", "h3"],
            "compute_s": 0.05,
            "bytes": 1250000,
            "iterations": 40,
        },
        {
            "id": "b",
            "kind": "synthetic",
            "hosts": ["h2", "h4"],
            "compute_s": 0.05,
            "bytes": 1250000,
            "iterations": 40,
        },
    ],
    "schemes": ["baseline", "cassini", "ideal"],
}


def test_issue_example_config_parses():
    cfg = load_config(EXAMPLE)
    assert cfg.topology.fabric.kind == "fair"
    assert [s.kind for s in cfg.schemes] == ["baseline", "cassini", "ideal"]
    assert cfg.jobs[1].hosts == ("h2", "h4") and cfg.cc == "cubic"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"color": 1}, "color: unknown field"),
        ({"jobs": []}, "jobs: must be a non-empty list"),
        ({"schemes": ["fastest"]}, "unknown scheme"),
        ({"topology": {"kind": "ring"}}, "topology.kind"),
        ({"topology": {**EXAMPLE["topology"], "fabric": "red"}}, "fabric"),
    ],
)
def test_bad_configs(change, message):
    with pytest.raises(ConfigError, match=message):
        load_config({**EXAMPLE, **change})


def test_bad_jobs():
    bad_host = {**EXAMPLE, "jobs": [{**EXAMPLE["jobs"][0], "hosts": ["h1", "h9"]}]}
    with pytest.raises(ConfigError, match="unknown host 'h9'"):
        load_config(bad_host)
    shared = {
        **EXAMPLE,
        "jobs": [EXAMPLE["jobs"][0], {**EXAMPLE["jobs"][1], "hosts": ["h1", "h4"]}],
    }
    with pytest.raises(ConfigError, match="already runs job a"):
        load_config(shared)
    with pytest.raises(ConfigError, match="shift"):
        load_config({**EXAMPLE, "jobs": [{**EXAMPLE["jobs"][0], "shift": -1}]})


def _topology(**change):
    return {**EXAMPLE, "topology": {**EXAMPLE["topology"], **change}}


LEAF_SPINE = {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2}


@pytest.mark.parametrize(
    "config, field, problem",
    [
        # not numbers: tracebacks (ValueError, InputError) until 2026-12
        ({**EXAMPLE, "seed": "abc"}, "seed", "must be an integer, got the string 'abc'"),
        ({**EXAMPLE, "profile_iterations": "many"}, "profile_iterations", "must be an integer"),
        ({**EXAMPLE, "agent": {"drift_tolerance": "big"}}, "agent.drift_tolerance", "number"),
        ({**EXAMPLE, "agent": {"slack": "lots"}}, "agent.slack", "must be a number"),
        ({**EXAMPLE, "schemes": [{"scheme": "mltcp", "slope": "steep"}]}, "schemes[0].slope",
         "must be a number"),
        # accepted, then meant something else or failed later
        ({**EXAMPLE, "seed": 1.9}, "seed", "must be an integer, got 1.9"),
        ({**EXAMPLE, "profile_iterations": -5}, "profile_iterations", "must be >= 3"),
        ({**EXAMPLE, "agent": {"drift_tolerance": -3}}, "agent.drift_tolerance", "> 0"),
        ({**EXAMPLE, "cc": "nonsense_cc"}, "cc", "must be a congestion control"),
        ({**EXAMPLE, "schemes": [{"scheme": "baseline", "cc": 42}]}, "schemes[0].cc",
         "must be a congestion control"),
        (_topology(bottleneck_bps=float("inf")), "topology.bottleneck_bps", "finite"),
        ({**EXAMPLE, "topology": {**LEAF_SPINE, "oversubscription": float("inf")}},
         "topology.oversubscription", "finite"),
        ({**EXAMPLE, "topology": {**LEAF_SPINE, "routing": "hash", "ecmp_seed": 10**23}},
         "topology.ecmp_seed", "must be <= 9223372036854775807"),
        # unclear: a doubled "topology: topology:" prefix and no field
        (_topology(bottleneck_bps="2e8"), "topology.bottleneck_bps",
         "must be a number, got the string '2e8' (YAML reads 2e8 as a string: write "
         "2.0e+08 or 200000000, unquoted)"),
        (_topology(pairs="2"), "topology.pairs", "must be an integer, got the string '2'"),
        ({**EXAMPLE, "topology": {**LEAF_SPINE, "leaves": 2.5}}, "topology.leaves",
         "must be an integer, got 2.5"),
        (_topology(colour=1), "topology.colour", "unknown field"),
        (_topology(routing="hash"), "topology.routing", "for kind: leaf_spine only"),
        (_topology(buffer_packets="lots"), "topology.buffer_packets", "must be an integer"),
        (_topology(fabric=["fair"]), "topology.fabric", "must be one of fifo, fair"),
        ({**EXAMPLE, "jobs": [{**EXAMPLE["jobs"][0], "hosts": ["h1", "h1"]}]}, "jobs[0].hosts",
         "h1 appears twice in the job"),
    ],
)  # fmt: skip
def test_bad_fields_are_config_errors_naming_them(config, field, problem):
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert err.value.field == field and problem in err.value.problem
    assert not str(err.value).startswith("topology: topology")


@pytest.mark.parametrize(
    "config, field",
    [
        ({**EXAMPLE, "jobs": [{**EXAMPLE["jobs"][0], "iterations": 1_000_000_000}]},
         "jobs[0].iterations"),
        ({**EXAMPLE, "jobs": [{**EXAMPLE["jobs"][0], "iterations": 1.0e9}]},
         "jobs[0].iterations"),
        ({**EXAMPLE, "profile_iterations": 10**12}, "profile_iterations"),
    ],
)  # fmt: skip
def test_iterations_have_an_upper_bound(config, field):
    """A typo (1.0e+9) ran for days until 2026-12: at most 1,000,000, named."""
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert err.value.field == field and "must be <= 1000000, got " in err.value.problem
    most = {**EXAMPLE, "jobs": [{**EXAMPLE["jobs"][0], "iterations": 1_000_000}],
            "profile_iterations": 1_000_000}  # fmt: skip
    cfg = load_config(most)
    assert cfg.jobs[0].iterations == 1_000_000 and cfg.profile_iterations == 1_000_000


@pytest.mark.parametrize(
    "name, problem",
    [
        (42, "must be a name (a string), got the number 42"),
        (1.5, "must be a name (a string), got the number 1.5"),
        (True, "must be a name (a string), got a boolean"),
        (None, "must be a name (a string), got null"),
        (["a"], "must be a name (a string), got an array"),
        ("", "must not be empty"),
        ("a/b", "must not contain '/' (it names a directory)"),
        ("..", "must not be '..'"),
        ("tab\there", "must not contain '\\t'"),
    ],
)
def test_a_scheme_name_must_be_a_name(name, problem):
    """``name: 42`` became the scheme "42" (str()) until 2026-12; a path, or nothing."""
    config = {**EXAMPLE, "schemes": [{"scheme": "baseline", "name": name}]}
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert err.value.field == "schemes[0].name" and problem in err.value.problem
    ok = load_config({**EXAMPLE, "schemes": [{"scheme": "baseline", "name": "base 2"}]})
    assert ok.schemes[0].name == "base 2"


def test_a_scheme_kind_that_is_not_a_string_is_a_config_error():
    """``scheme: [baseline]`` raised TypeError (unhashable) until 2026-12."""
    with pytest.raises(ConfigError, match=r"schemes\[0\]: unknown scheme \['baseline'\]"):
        load_config({**EXAMPLE, "schemes": [{"scheme": ["baseline"]}]})


@pytest.mark.parametrize("field", ["bytes", "width", "layers", "batch"])
def test_whole_number_job_fields_are_not_truncated(field):
    with pytest.raises(ConfigError, match=rf"jobs\[0\]\.{field}: must be an integer, got 0.5"):
        load_config({**EXAMPLE, "jobs": [{**EXAMPLE["jobs"][0], field: 0.5}]})
    cfg = load_config({**EXAMPLE, "jobs": [{**EXAMPLE["jobs"][0], field: 4.0}]})
    assert getattr(cfg.jobs[0], field) == 4


def test_known_congestion_controls_and_numbers_pass():
    cfg = load_config(
        {**EXAMPLE, "cc": "bbr", "seed": 3, "agent": {"drift_tolerance": 0.1, "slack": 0.02},
         "schemes": [{"scheme": "mltcp", "cc": "mltcp_cubic", "slope": 1.5}]}
    )  # fmt: skip
    assert (cfg.cc, cfg.seed, cfg.drift_tolerance, cfg.agent_slack) == ("bbr", 3, 0.1, 0.02)
    assert cfg.schemes[0].cc == "mltcp_cubic"


def test_testbed_run_reports_a_bad_number_in_one_line(tmp_path):
    import subprocess
    import sys

    for extra in ("seed: abc", "agent: {slack: lots}", "topology: {kind: dumbbell, pairs: 2, "
                  "bottleneck_bps: 2e8}"):  # fmt: skip
        path = tmp_path / "bad.yaml"
        text = "jobs: [{id: a, hosts: [h1, h3], iterations: 10}]\nschemes: [baseline]\n"
        if not extra.startswith("topology"):
            text += "topology: {kind: dumbbell, pairs: 2, bottleneck_bps: 200000000}\n"
        path.write_text(text + extra + "\n")
        r = subprocess.run(
            [sys.executable, "-m", "testbed.cli", "run", str(path)], capture_output=True, text=True
        )
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "config error" in r.stderr and "Traceback" not in r.stderr


def test_ecn_fabric_defaults_to_dctcp():
    cfg = load_config({**EXAMPLE, "topology": {**EXAMPLE["topology"], "fabric": "ecn"}})
    assert cfg.cc == "dctcp_bpf"


def test_launch_dry_run_commands():
    args = argparse.Namespace(
        nodes="gpu1,gpu2",
        gpus_per_node=4,
        iterations=50,
        width=512,
        layers=2,
        cc="reno",
        iface="eth1",
        port=29500,
        shift_s=0.0,
        period_s=0.0,
        out="log.jsonl",
    )
    cmds = launch_commands(args)
    assert [n for n, _ in cmds] == ["gpu1", "gpu2"]
    node, cmd = cmds[1]
    assert "net.ipv4.tcp_congestion_control=reno" in cmd
    assert "NCCL_IB_DISABLE=1" in cmd and "NCCL_SOCKET_IFNAME=eth1" in cmd
    assert "--node_rank=1" in cmd and "--master_addr=gpu1" in cmd and "--nproc_per_node=4" in cmd


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--model", "bogus"], "--model: one of resnet50"),
        (["--gpus-per-node", "0"], "--gpus-per-node: at least 1, got 0"),
        (["--iterations", "-5"], "--iterations: at least 1, got -5"),
        (["--port", "99999"], "--port: a TCP port 1 .. 65535, got 99999"),
        (["--shift-s", "5", "--period-s", "1"], "--shift-s: must be < --period-s (1), got 5"),
        (["--cc", "mltcp_bogus"], "--cc: must be a congestion control"),
        (["--compute", "replay"], "--compute: replay needs --model"),
        (["--nodes", ","], "--nodes: at least one hostname"),
    ],
)
def test_launch_refuses_bad_flags_in_one_line(argv, named, capsys):
    """Printed (or run over ssh) as given until 2026-12; --nodes , exited 1."""
    from testbed import cli

    assert cli.main(["launch", "--nodes", "gpu1,gpu2", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"testbed launch: error: {named}")
    assert len(captured.err.strip().splitlines()) == 1 and captured.out == ""


def test_run_help_names_every_job_field_and_the_default_kind(capsys):
    from testbed import cli

    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "clock_offset_s" in text and "kind (synthetic (default) |" in text
    assert "write 2.0e+8 or 200000000" in text


def test_launch_dry_run_of_a_model_defaults_to_real_compute(capsys):
    from testbed import cli

    assert cli.main(["launch", "--nodes", "gpu1,gpu2", "--model", "resnet50"]) == 0
    assert "--compute cpu" in capsys.readouterr().out


def test_profile_from_log_and_table():
    recs = [
        {
            "iter": k,
            "start": k * 0.1,
            "comm_start": k * 0.1 + 0.06,
            "end": k * 0.1 + 0.1,
            "bytes_sent": 500_000,
        }
        for k in range(10)
    ]
    p = profile_from_log("a", recs)
    assert p.iteration_time_s == pytest.approx(0.1)
    assert p.phases[0].start_s == pytest.approx(0.06)
    assert p.phases[0].rate_bps == pytest.approx(500_000 * 8 / 0.04)
    assert summary([0.1, 0.2])["mean_s"] == pytest.approx(0.15)
    results = ExperimentResult(
        {
            name: SchemeResult(name, name, "cubic", "fair", {"a": JobResult("a", times, 0, ())})
            for name, times in (("ideal", (0.1, 0.1)), ("baseline", (0.15, 0.15)))
        },
        {},
    )
    table = format_table(results)
    assert "1.50x" in table and "1.00x" in table
    # what results.json holds reads back the same
    assert format_table(ExperimentResult.from_dict(results.to_dict())) == table


def test_run_command_prints_the_typed_result(tmp_path, monkeypatch, capsys):
    import json

    from testbed import cli, run

    raw = {
        "topology": {"kind": "dumbbell", "pairs": 1, "bottleneck_bps": 1e8, "access_bps": 1e9},
        "jobs": [{"id": "a", "hosts": ["h1", "h2"], "iterations": 3}],
        "schemes": ["ideal"],
    }
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(raw))
    log = tmp_path / "ideal-a" / "a-rank0.jsonl"
    job = JobResult("a", (0.1, 0.1), 2_000_000, (log,))
    result = ExperimentResult(
        {"ideal": SchemeResult("ideal", "ideal", "cubic", "fifo", {"a": job})}, raw
    )
    seen = []

    def fake_run(cfg, out, progress=None):
        seen.append((cfg.jobs[0].job_id, out))
        return result

    monkeypatch.setattr(run, "run_experiment", fake_run)
    assert cli.main(["run", str(path), "--out", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(result.to_dict()))
    assert printed["schemes"]["ideal"]["jobs"]["a"]["logs"] == [str(log)]
    assert seen == [("a", tmp_path)]
    assert cli.main(["run", str(path), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1.00x" in out and f"results: {tmp_path / 'results.json'}" in out


def test_pcap_series_from_a_written_capture(tmp_path):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import PcapWriter

    path = tmp_path / "x.pcap"
    w = PcapWriter(str(path))
    # 0.137 s iterations: 20 ms bursts of 1500-byte packets every 0.1 ms, 10 iterations
    for k in range(10):
        for i in range(200):
            pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.3") / TCP() / (b"x" * 1446)
            pkt.time = 1000.0 + k * 0.137 + i * 1e-4
            w.write(pkt)
    other = Ether() / IP(src="10.0.0.9", dst="10.0.0.3") / TCP()
    other.time = 1000.05
    w.write(other)
    w.close()
    series, start = pcap_series(path, "10.0.0.1", dt_s=0.001)
    assert start == pytest.approx(1000.0)
    assert series.sum() * 0.001 == pytest.approx(10 * 200 * (20 + 20 + 1446) * 8)  # IP length
    from cassini.profile import JobProfile

    profile = JobProfile.from_samples(series, 0.001)
    assert profile.iteration_time_s == pytest.approx(0.137, rel=0.02)
    with pytest.raises(ValueError, match="no IPv4 packets"):
        pcap_series(path, "10.0.0.7")
    # payload: IP and TCP headers left out (what the application sent)
    payload, _ = pcap_series(path, "10.0.0.1", dt_s=0.001, payload=True)
    assert payload.sum() * 0.001 == pytest.approx(10 * 200 * 1446 * 8)
    # a window keeps its packets only, and the series starts at the window's start
    two = (1000.137, 1000.411)
    window, start = pcap_series(path, "10.0.0.1", 0.001, payload=True, window_s=two)
    assert start == 1000.137 and window.size == 274
    assert window.sum() * 0.001 == pytest.approx(2 * 200 * 1446 * 8)
    with pytest.raises(ValueError, match="window_s"):
        pcap_series(path, "10.0.0.1", window_s=(1000.2, 1000.1))
    with pytest.raises(ValueError, match="no packets in the window"):
        pcap_series(path, "10.0.0.1", window_s=(999.0, 999.5))


def test_from_config_errors():
    with pytest.raises(ValueError, match="topology"):
        from_config({"kind": "dumbbell", "pairs": 2, "bottleneck_bps": 1e8, "colour": 1})


def test_worker_reads_the_sending_sockets_congestion_state():
    import socket

    from testbed.worker import tcp_state

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    try:
        c.sendall(bytes(200_000))
        got = 0
        while got < 200_000:
            got += len(peer.recv(65536))
        st = tcp_state(c)
        assert {"ca_state", "cwnd", "ssthresh", "rtt_us", "total_retrans"} <= set(st)
        # Linux 6.7 and later also count retransmission timeouts (none on loopback here)
        assert set(st) - {"ca_state", "cwnd", "ssthresh", "rtt_us", "total_retrans"} in (
            set(), {"total_rto", "total_rto_time_ms"})  # fmt: skip
        assert st.get("total_rto", 0) == 0 and st.get("total_rto_time_ms", 0) == 0
        assert st["cwnd"] >= 1 and 0 <= st["ca_state"] <= 4 and st["ssthresh"] >= 2
    finally:
        for s in (c, peer, srv):
            s.close()


MODEL_JOB = {
    "id": "a",
    "kind": "model",
    "model": "resnet50",
    "hosts": ["h1", "h3"],
    "iterations": 30,
}


def test_model_job_config_and_its_defaults():
    cfg = load_config({**EXAMPLE, "jobs": [MODEL_JOB]})
    job = cfg.jobs[0]
    assert job.model == "resnet50" and job.compute == "replay"
    assert job.calibration.endswith("resnet50.json")
    # the bottleneck (200 Mbit/s) stands for a 50 Gbit/s NIC: parameters scaled to match
    assert job.nic_bps == 50e9 and job.scale == pytest.approx(200e6 / 50e9)
    explicit = load_config({**EXAMPLE, "jobs": [{**MODEL_JOB, "scale": 0.01, "batch": 8}]})
    assert explicit.jobs[0].scale == 0.01 and explicit.jobs[0].batch == 8


@pytest.mark.parametrize(
    "change, field",
    [
        ({"model": "alexnet"}, "jobs[0].model"),
        ({"compute": "gpu"}, "jobs[0].compute"),
        ({"calibration": "/nonexistent.json"}, "jobs[0].calibration"),
        ({"scale": 0}, "jobs[0].scale"),
        ({"scale": 2}, "jobs[0].scale"),
        ({"nic_bps": -1}, "jobs[0].nic_bps"),
        ({"iterations": 2.5}, "jobs[0].iterations"),
        ({"kind": "synthetic"}, "jobs[0].model"),  # model fields only for kind: model
    ],
)
def test_bad_model_jobs_name_the_field(change, field):
    with pytest.raises(ConfigError) as err:
        load_config({**EXAMPLE, "jobs": [{**MODEL_JOB, **change}]})
    assert err.value.field == field


def test_a_calibration_of_another_model_is_refused(tmp_path):
    from testbed.calibration import default_calibration_path

    other = str(default_calibration_path("vgg16"))
    with pytest.raises(ConfigError, match="calibrates vgg16, not resnet50"):
        load_config({**EXAMPLE, "jobs": [{**MODEL_JOB, "calibration": other}]})


def test_testbed_run_exits_2_naming_the_field(tmp_path):
    import subprocess
    import sys

    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**EXAMPLE, "jobs": [{**MODEL_JOB, "model": "alexnet"}]}))
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(path)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "jobs[0].model" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_declined_cassini_stands_for_the_same_start_run_only_when_nothing_is_shifted():
    from testbed.run.planning import same_schedule
    from testbed.run.schemes import SCHEMES

    cfg = load_config(EXAMPLE)
    cassini = next(s for s in cfg.schemes if s.kind == "cassini")
    cc = SCHEMES[cassini.kind].congestion_control(cfg, cassini)
    same = SchemeResult("baseline", "baseline", cfg.cc, "fair", {})
    other_cc = SchemeResult("base-reno", "baseline", "reno", "fair", {})
    done = {"base-reno": other_cc, "baseline": same}
    zero = {j.job_id: 0.0 for j in cfg.jobs}
    assert same_schedule(cfg, cc, zero, {}, done) is same
    # any shift or any job held to a period: CASSINI's own run
    assert same_schedule(cfg, cc, {**zero, "b": 0.01}, {}, done) is None
    assert same_schedule(cfg, cc, zero, {"a": 0.1}, done) is None
    # no same-start run on this congestion control yet
    assert same_schedule(cfg, cc, zero, {}, {"base-reno": other_cc}) is None


def test_held_jobs_shifts_are_solved_on_the_period_they_are_held_to():
    from cassini.advisor import Link, held_time_shifts
    from cassini.profile import JobProfile, Phase

    # line-rate phases of 40 ms (a) and 30 ms (b) per 80 ms, held to 100 ms: b's phase
    # must land in a's 60 ms of silence on the 100 ms circle
    a = JobProfile("a", 0.08, (Phase(0.03, 0.04, 1e9),))
    b = JobProfile("b", 0.08, (Phase(0.01, 0.03, 1e9),))
    paths = {"a": ("l",), "b": ("l",)}
    held = {"a": 0.1, "b": 0.1}
    shifts = held_time_shifts([Link("l", 1e9)], paths, {"a": a, "b": b}, held)
    assert set(shifts) == {"a", "b"} and all(0 <= v < 0.1 for v in shifts.values())

    def busy(start_s: float, length_s: float) -> set[int]:  # 0.5 ms cells of the circle
        return {
            int(round((start_s + k * 5e-4) % 0.1 / 5e-4)) % 200 for k in range(int(length_s / 5e-4))
        }

    on_a = busy(shifts["a"] + 0.03, 0.04)
    on_b = busy(shifts["b"] + 0.01, 0.03)
    assert len(on_a & on_b) <= 4, sorted(on_a & on_b)  # the solver's 5-degree grid
    assert held_time_shifts([Link("l", 1e9)], paths, {"a": a, "b": b}, {}) == {}


def test_mltcp_scheme_takes_slope_and_intercept_and_only_it():
    schemes = [{"scheme": "mltcp", "name": "k6", "mode": "exact", "slope": 1.5, "intercept": 0.25}]
    cfg = load_config({**EXAMPLE, "schemes": schemes})
    s = cfg.schemes[0]
    assert (s.kind, s.mltcp) == ("mltcp", MltcpOptions("exact", 1.5, 0.25))
    assert load_config({**EXAMPLE, "schemes": ["mltcp"]}).schemes[0].mltcp == MltcpOptions()
    with pytest.raises(ConfigError, match=r"schemes\[0\].slope.*mltcp only"):
        load_config({**EXAMPLE, "schemes": [{"scheme": "cassini", "slope": 1.0}]})
    with pytest.raises(ConfigError, match="intercept must be > 0"):
        load_config({**EXAMPLE, "schemes": [{"scheme": "mltcp", "intercept": 0}]})
    from cassini.errors import InputError  # ConfigError's base: exit 2, field named

    with pytest.raises(InputError, match=r"schemes\[0\].slope"):
        load_config({**EXAMPLE, "schemes": [{"scheme": "mltcp", "slope": "steep"}]})
    cut = load_config({**EXAMPLE, "schemes": [{"scheme": "mltcp", "scale_cut": True}]})
    assert cut.schemes[0].mltcp.scale_cut is True and s.mltcp.scale_cut is None
    with pytest.raises(InputError, match=r"schemes\[0\].scale_cut.*true or false"):
        load_config({**EXAMPLE, "schemes": [{"scheme": "mltcp", "scale_cut": "yes"}]})
    with pytest.raises(ConfigError, match=r"schemes\[0\].scale_cut.*mltcp only"):
        load_config({**EXAMPLE, "schemes": [{"scheme": "baseline", "scale_cut": True}]})


def test_agent_slack_is_auto_by_default_and_the_load_it_follows():
    from cassini.advisor import Link
    from cassini.errors import InputError
    from cassini.profile import JobProfile, Phase
    from testbed.run.planning import max_link_load

    assert load_config(EXAMPLE).agent_slack is None  # auto
    assert load_config({**EXAMPLE, "agent": {"slack": 0.05}}).agent_slack == 0.05
    with pytest.raises(InputError, match="agent.slack"):
        load_config({**EXAMPLE, "agent": {"slack": -0.01}})
    a = JobProfile("a", 0.1, (Phase(0.0, 0.04, 1e9),))  # 40 % of a 1 Gbit/s link
    b = replace(a, job_id="b")
    paths = {"a": ("l", "m"), "b": ("l",)}
    links = [Link("l", 1e9), Link("m", 1e9)]
    assert max_link_load(links, paths, {"a": a, "b": b}) == pytest.approx(0.8)
    assert max_link_load(links, {"a": ("m",), "b": ("l",)}, {"a": a, "b": b}) == 0.0
    assert max_link_load([Link("l", 0.5e9)], paths, {"a": a, "b": b}) == 1.0  # capped


def test_jitter_rules_read_a_hiccup_differently():
    """``agent.jitter``: the standard deviation pays a single hiccup in every slot, the
    median absolute deviation does not; both read normal spread alike."""
    from cassini.errors import InputError
    from testbed.run.profiles import iteration_jitter

    def ideal(times):
        return SchemeResult("ideal", "ideal", "cubic", "fair", {"a": JobResult("a", times, 0, ())})

    steady = (0.2,) + tuple(0.105 + 0.001 * (i % 7 - 3) for i in range(21))  # +-3 ms
    hiccup = steady[:10] + (0.160,) + steady[11:]  # one 160 ms iteration
    for rule in ("stdev", "robust"):  # normal spread: 2 sigma of +-3 ms, 4-6 % of 105 ms
        assert 0.03 < iteration_jitter(ideal(steady), rule) < 0.06
        assert iteration_jitter(ideal((0.1, 0.1, 0.1)), rule) == 0.0  # too few counted
    assert iteration_jitter(ideal(hiccup), "stdev") > 4 * iteration_jitter(ideal(steady), "stdev")
    assert iteration_jitter(ideal(hiccup), "robust") == pytest.approx(
        iteration_jitter(ideal(steady), "robust"), rel=0.1
    )
    assert iteration_jitter(ideal(hiccup), "none") == 0.0  # the agent's slack alone
    assert load_config(EXAMPLE).agent_jitter == "stdev"
    assert load_config({**EXAMPLE, "agent": {"jitter": "robust"}}).agent_jitter == "robust"
    with pytest.raises(InputError, match="agent.jitter"):
        load_config({**EXAMPLE, "agent": {"jitter": "iqr"}})


def test_the_trimmed_rule_forgives_hiccups_the_agent_absorbs_and_pays_for_the_rest():
    """``agent.jitter: trimmed``: the normal spread as ``stdev`` reads it; a lone hiccup
    left out (the agent absorbs it); hiccups back to back that would make the agent
    re-align paid for, as far as the replay needs (never beyond ``stdev``)."""
    from cassini.agent import replayed_realignments
    from testbed.run.profiles import iteration_jitter, without_outliers

    def ideal(times):
        return SchemeResult("ideal", "ideal", "cubic", "fair", {"a": JobResult("a", times, 0, ())})

    steady = (0.2,) + tuple(0.105 + 0.001 * (i % 7 - 3) for i in range(21))  # +-3 ms
    assert iteration_jitter(ideal(steady), "trimmed") == iteration_jitter(ideal(steady), "stdev")
    hiccup = steady[:10] + (0.160,) + steady[11:]  # one 160 ms iteration
    assert without_outliers(hiccup[1:]) == list(steady[1:10] + steady[11:])
    assert iteration_jitter(ideal(hiccup), "trimmed") < 0.06 < iteration_jitter(ideal(hiccup))
    # three 125 ms iterations in a row: at the agent's 3 % plus the spread of the rest
    # (< 4 %) the agent would re-align...
    burst = steady[:8] + (0.125,) * 3 + steady[11:]
    base = statistics.median(burst[1:])  # the profile's iteration time
    assert 2 * statistics.stdev(without_outliers(burst[1:])) / base < 0.04
    assert replayed_realignments(burst[1:], base * 1.07) > 0
    # ...so the rule pays for that burst, though the outliers are left out of its spread
    trimmed = iteration_jitter(ideal(burst), "trimmed", slack=0.03)
    assert 0.04 < trimmed < iteration_jitter(ideal(burst), "stdev")
    assert replayed_realignments(burst[1:], base * (1.03 + trimmed)) == 0
    assert load_config({**EXAMPLE, "agent": {"jitter": "trimmed"}}).agent_jitter == "trimmed"


def test_the_room_rule_pays_only_the_jitter_a_stretched_period_does_not_leave_idle():
    """``agent.jitter: room``: two jobs whose bytes need 105 % of the bottleneck are held
    to 1.05x their iteration; a 5 % jitter is then idle time they already have (the
    period is the stretch and the agent's 3 % alone), an 8 % one pays its last 3 %;
    ``stdev`` pays the whole jitter on top of the stretch."""
    from cassini.predict import jitter_beyond_room
    from cassini.profile import JobProfile, Phase
    from testbed.run.planning import plan

    # 52.5 ms at the 200 Mbit/s bottleneck's line rate per 100 ms iteration, each
    profiles = {j: JobProfile(j, 0.1, (Phase(0.04, 0.0525, 2e8),)) for j in ("a", "b")}
    periods = {}
    for rule, jitter in (("stdev", 0.05), ("room", 0.05), ("room", 0.08)):
        cfg = load_config({**EXAMPLE, "agent": {"jitter": rule}})
        said: list[str] = []
        schedule = plan(cfg, profiles, 1.0, jitter, said.append).schedule
        periods[rule, jitter] = schedule.periods_s
        assert any(rule != "room" or "jitter paid beyond" in line for line in said)
    for j in ("a", "b"):
        assert periods["stdev", 0.05][j] == pytest.approx(0.105 * 1.08)
        assert periods["room", 0.05][j] == pytest.approx(0.105 * 1.03)
        assert periods["room", 0.08][j] == pytest.approx(0.105 * 1.06)
    assert jitter_beyond_room(0.05, 0.1, 0.1) == 0.05  # no room: the whole jitter
    assert jitter_beyond_room(0.05, 0.09, 0.1) == 0.05  # held shorter: no room either
    assert jitter_beyond_room(0.0, 0.2, 0.1) == 0.0
    assert load_config({**EXAMPLE, "agent": {"jitter": "room"}}).agent_jitter == "room"


def test_payload_efficiency_counts_each_link_direction_a_hop_crosses():
    from testbed.run.profiles import payload_efficiency

    def ideal_of(cfg, wire_per_direction):
        jobs, link_bytes = {}, {}
        for j in cfg.jobs:
            jobs[j.job_id] = JobResult(j.job_id, (0.1,), 1_000_000, ())  # both ranks' payload
            fabric = [d for link in cfg.topology.bottlenecks() for d in link.directions()]
            for d in cfg.topology.ring_links(j.hosts):
                if d in fabric:
                    link_bytes[f"{j.job_id}:{d}"] = wire_per_direction
        return SchemeResult("ideal", "ideal", "cubic", "fair", jobs, link_bytes)

    # each rank's 500,000 payload bytes take 550,000 on the wire (headers, ACKs)
    dumbbell = load_config(EXAMPLE)
    assert payload_efficiency(dumbbell, ideal_of(dumbbell, 550_000)) == pytest.approx(1 / 1.1)
    spread = {
        "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2},
        "jobs": [
            {"id": "a", "hosts": ["h1", "h3"], "compute_s": 0.05, "bytes": 1000, "iterations": 5}
        ],
        "schemes": ["ideal"],
    }
    cfg = load_config(spread)
    crossed = [d for d in cfg.topology.ring_links(("h1", "h3")) if "tbp" in d]
    assert len(crossed) == 4  # leaf->spine and spine->leaf, both ways: not half as efficient
    assert payload_efficiency(cfg, ideal_of(cfg, 550_000)) == pytest.approx(1 / 1.1)


@pytest.mark.parametrize(
    ("wire", "measured", "used"),
    [(400_000, 1.25, 1.0), (1_250_000, 0.4, 0.5), (550_000, None, None)],
)
def test_payload_efficiency_reports_its_clamp_when_it_bites(wire, measured, used):
    from testbed.run.profiles import payload_efficiency

    cfg = load_config(EXAMPLE)
    jobs = {j.job_id: JobResult(j.job_id, (0.1,), 1_000_000, ()) for j in cfg.jobs}
    fabric = {d for link in cfg.topology.bottlenecks() for d in link.directions()}
    link_bytes = {f"{j.job_id}:{d}": wire for j in cfg.jobs
                  for d in cfg.topology.ring_links(j.hosts) if d in fabric}  # fmt: skip
    said: list[str] = []
    got = payload_efficiency(cfg, SchemeResult("ideal", "ideal", "cubic", "fair", jobs, link_bytes),
                             said.append)  # fmt: skip
    if measured is None:  # 1/1.1: within 0.5-1.0, nothing to report
        assert got == pytest.approx(1 / 1.1) and said == []
    else:
        assert got == used
        assert said == [f"  payload efficiency measured {measured:.3f}, clamped to {used:.1f}"]


class FakeHost:
    """The parts of the host that testbed.net.cleanup touches: links, state files, pids."""

    def __init__(self, monkeypatch, tmp_path, links, alive_pids):
        from testbed import net

        self.links, self.alive, self.deleted, self.killed = list(links), set(alive_pids), [], []
        monkeypatch.setattr(net, "STATE_DIR", tmp_path)
        monkeypatch.setattr(net, "_links", lambda: list(self.links))
        monkeypatch.setattr(net, "_alive", lambda pid: pid in self.alive)
        monkeypatch.setattr(net.os, "kill", lambda pid, sig: self.killed.append(pid))
        monkeypatch.setattr(net.cgroups, "cgroup2_mounts", lambda: [])  # not the host's

        def run(cmd, **kwargs):
            if cmd[:3] == ["ip", "link", "del"]:
                self.deleted.append(cmd[3])
                self.links.remove(cmd[3])
            elif cmd[:2] == ["rm", "-rf"]:
                self.deleted.append(cmd[2])

        monkeypatch.setattr(net.subprocess, "run", run)
        self.dir = tmp_path

    def run_state(self, pid, switches, host_pids=()):
        import json

        (self.dir / f"run-{pid}.json").write_text(
            json.dumps({"pid": pid, "switches": switches, "host_pids": list(host_pids)})
        )


LIVE = ["tbs1", "tbs1-eth1", "tbs1-eth2", "tbs2", "tbs2-eth1"]  # a live run's bridges, ports


def test_cleanup_of_one_run_deletes_only_what_its_state_recorded(monkeypatch, tmp_path):
    from testbed import fabric, net

    host = FakeHost(monkeypatch, tmp_path, [*LIVE, "tbl1", "tbl1-eth1", "eth0"], {100, 200, 201})
    host.run_state(100, ["tbs1", "tbs2"], host_pids=[201])  # alive: another run
    host.run_state(200, ["tbl1"], host_pids=[202])  # this process's run (its Cluster.stop)
    removed = net.cleanup(quiet=True, only_pid=200)
    assert host.deleted == ["tbl1", "tbl1-eth1"]  # not the live run's tbs*, no ECN pins
    assert host.links == [*LIVE, "eth0"] and host.killed == []
    assert removed == ["link tbl1", "link tbl1-eth1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-100.json"]
    # the command (no only_pid): dead runs and unclaimed tb* links go; live runs stay,
    # and so do the ECN pins they may be using
    host.links += ["tbx9-eth0"]  # recorded by no state file: a crashed run's
    host.run_state(300, ["tbq1"], host_pids=[201])  # dead run, its shell still alive
    net.cleanup(quiet=True)
    assert host.deleted[2:] == ["tbx9-eth0"] and host.killed == [201]
    assert str(fabric.ECN_PIN_DIR) not in host.deleted
    assert host.links == [*LIVE, "eth0"]
    # once no run is alive, everything of ours goes, the pins too
    host.alive.clear()
    net.cleanup(quiet=True)
    assert host.links == ["eth0"] and host.deleted[-1] == str(fabric.ECN_PIN_DIR)
    assert list(tmp_path.iterdir()) == []


def test_off_slot_names_the_iterations_a_held_job_did_not_run_on_its_slot():
    records = [
        {"end": 0.1, "drift_s": 0.0, "realignments": 0},
        {"end": 0.2, "drift_s": 0.001, "realignments": 0},  # on time: interval 0
        {"end": 0.3, "drift_s": 0.03, "realignments": 0},  # later than 20 ms: interval 1
        {"end": 0.5, "drift_s": 0.0, "realignments": 1},  # skipped a slot: interval 2
        {"end": 0.6, "drift_s": 0.0, "realignments": 1},
    ]
    assert off_slot(records, 0.02) == (1, 2)
    assert off_slot(records, None) == (2,)  # no tolerance known: re-alignments only
    assert off_slot(records[:1], 0.02) == ()
    job = JobResult("a", (0.1, 0.1, 0.2, 0.1), 0, (), off_slot=(1, 2))
    assert JobResult.from_dict("a", job.to_dict()) == job


def test_a_host_hiccup_does_not_stretch_a_log_profile():
    """The compatible pair's j2 profiled on a CI-like run: iterations 104-109 ms but for
    one of 147 ms and three slow ones after it; its mean (112 ms) made the advice score
    the pair 0.85 and decline, its median is the job's pace."""
    times = [0.106, 0.105, 0.107, 0.109, 0.107, 0.103, 0.105, 0.147, 0.116, 0.113, 0.111]
    ends = [0.2 + sum(times[:k]) for k in range(len(times) + 1)]
    comm = [0.052, 0.043, 0.044, 0.047, 0.045, 0.044, 0.046, 0.044, 0.065, 0.05, 0.048, 0.047]
    recs = [
        {"iter": k, "start": e - 0.06 - c, "comm_start": e - c, "end": e, "bytes_sent": 1000}
        for k, (e, c) in enumerate(zip(ends, comm, strict=True))
    ]
    p = profile_from_log("j2", recs)  # the first record (start-up) left out
    assert p.iteration_time_s == pytest.approx(statistics.median(times[1:]))
    assert p.iteration_time_s < statistics.mean(times[1:]) - 0.003
    assert p.phases[0].duration_s == pytest.approx(statistics.median(comm[1:]))
    assert p.phases[0].start_s == pytest.approx(0.06)


@pytest.mark.parametrize("under", [False, True], ids=["a-file", "under-a-file"])
def test_testbed_run_refuses_an_out_it_cannot_write_before_anything_runs(
    under, tmp_path, monkeypatch, capsys
):
    """``--out`` naming a file (or a folder under one) loaded the config, then died in
    ``out.mkdir`` with a FileExistsError / NotADirectoryError traceback, exit status 1."""
    import json

    from testbed import cli, run

    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(EXAMPLE))
    afile = tmp_path / "afile"
    afile.write_text("")
    out = afile / "sub" if under else afile
    monkeypatch.setattr(run, "load_config", lambda *a: pytest.fail("the config was loaded"))
    monkeypatch.setattr(run, "run_experiment", lambda *a, **k: pytest.fail("it ran"))
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"--out: {out}" in err and "a file" in err, err


def test_run_experiment_refuses_an_out_it_cannot_write_naming_it(tmp_path):
    """The library call (the experiments' ``run_config``) named no path either: mkdir's
    FileExistsError."""
    from cassini.errors import InputError
    from testbed.run import run_experiment

    afile = tmp_path / "afile"
    afile.write_text("")
    for out in (afile, afile / "sub"):
        with pytest.raises(InputError, match="a file"):
            run_experiment(load_config(EXAMPLE), out, progress=lambda m: None)


VEGAS = {**EXAMPLE, "schemes": ["baseline", {"scheme": "baseline", "name": "vegas", "cc": "vegas"}]}


def test_every_schemes_congestion_control_is_checked_before_the_first_scheme_runs(
    tmp_path, monkeypatch
):
    """A control the kernel lacks (``cc: vegas``) was found when its scheme started, after
    the earlier schemes ran: results.json held them and nothing said it was cut short."""
    from testbed.net import TestbedError
    from testbed.run import experiment
    from testbed.run.schemes import SCHEMES

    cfg = load_config(VEGAS)
    with pytest.raises(TestbedError, match=r"scheme 'vegas'.*'vegas' is not available"):
        experiment.check_congestion_controls(cfg, available=("reno", "cubic"))
    experiment.check_congestion_controls(cfg, available=("reno", "cubic", "vegas"))
    # ours (mltcp_*, dctcp_bpf) are loaded on demand: not missing while the kernel lacks them
    mltcp = {"scheme": "mltcp", "cc": "mltcp_reno"}
    ours = load_config({**EXAMPLE, "schemes": ["baseline", mltcp]})
    experiment.check_congestion_controls(ours, available=("reno", "cubic"))
    # the run itself checks before its first scheme: nothing runs, nothing is written
    monkeypatch.setattr(experiment, "available_congestion_controls", lambda: ("reno", "cubic"))
    monkeypatch.setattr(SCHEMES["baseline"], "run", lambda *a: pytest.fail("a scheme ran"))
    with pytest.raises(TestbedError, match="'vegas'"):
        experiment.run_experiment(cfg, tmp_path / "o", progress=lambda m: None)
    assert not (tmp_path / "o" / "results.json").exists()


def test_results_json_is_strict_json(tmp_path):
    """A job without iterations summarised as NaN, written as the bare token ``NaN``."""
    import json

    empty = JobResult("a", (), 0, ())
    res = ExperimentResult({"baseline": SchemeResult("baseline", "baseline", "cubic", "fair",
                                                     {"a": empty})}, {})  # fmt: skip
    res.write(tmp_path / "results.json")

    def refuse(token: str) -> None:
        raise AssertionError(f"not JSON: {token}")

    data = json.loads((tmp_path / "results.json").read_text(), parse_constant=refuse)
    assert data["schemes"]["baseline"]["summary"]["a"]["mean_s"] is None


def test_loading_our_control_without_root_is_the_testbeds_one_line_error(monkeypatch):
    """``run_experiment`` loads our controls before the first scheme; a MltcpError there
    (not root, say) escaped testbed run as a traceback."""
    from mltcp import admin
    from mltcp.pinned import MltcpError
    from testbed.net import TestbedError
    from testbed.run import session

    def refuse(**_kwargs):
        raise MltcpError("mltcp load needs root")

    monkeypatch.setattr(session, "available_congestion_controls", lambda: ("cubic", "reno"))
    monkeypatch.setattr(admin, "load", refuse)
    with pytest.raises(TestbedError, match="'mltcp_reno': mltcp load needs root"):
        session.ensure_cc("mltcp_reno")
    session.ensure_cc("cubic")  # the kernel's own: nothing loaded
