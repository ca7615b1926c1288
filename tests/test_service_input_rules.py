"""The service's inputs read by the CLI's rules: a JSON body by the reader ``cassini
advise`` uses (a key given twice refused with the CLI's message, a UTF-8 byte-order mark
dropped); ``cassini cluster show`` names a file once, exits 2 on bad input only and says
what it prints; ``cassini cluster from-kube`` exits 1 when the API server cannot be
reached or answers an error; ``cassini serve`` refuses the ``--kube`` options without
``--kube``; a ``.json`` cluster file with ``NaN`` is told its value is not finite."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from helpers.kube_replay import ReplayApiServer
from helpers.service_util import call, error_of, ok_json, start

from cassini import api
from cassini.cli import main
from cassini.errors import InputError
from cassini.service.cluster import load_cluster_file

DATA = Path(__file__).resolve().parent / "data" / "kube"

# -- 1. a JSON body is read as 'cassini advise' reads its file -----------------------------


@pytest.fixture(scope="module")
def served():
    srv = start(max_body_bytes=100_000, timeout_s=60, workers=1)
    try:
        yield srv
    finally:
        srv.stop()


def score_text(duplicate: str) -> str:
    """The score example as JSON text, with ``duplicate`` (a key path) given twice."""
    text = json.dumps(api.example("score"))
    if duplicate == "capacity_bps":
        return text.replace('"capacity_bps":', '"capacity_bps": 1, "capacity_bps":', 1)
    return text.replace('"iteration_time_s":', '"iteration_time_s": 1, "iteration_time_s":', 1)


@pytest.mark.parametrize("key", ["capacity_bps", "iteration_time_s"])
@pytest.mark.parametrize("command", ["score", "advise"])
def test_a_key_given_twice_is_400_with_the_cli_message(served, tmp_path, capsys, key, command):
    """The CLI exits 2 on it; HTTP kept the last value and answered 200."""
    if command == "score":
        text = score_text(key)
    else:
        text = json.dumps(api.example("advise"))
        text = text.replace(f'"{key}":', f'"{key}": 1, "{key}":', 1)
    assert text.count(f'"{key}"') >= 2
    path = tmp_path / "req.json"
    path.write_text(text)
    assert main([command, str(path)]) == 2
    cli = capsys.readouterr().err
    assert cli == f"cassini: error: {path}: malformed JSON: duplicate key {key!r}\n"
    err = error_of(call(served.port, "POST", f"/v1/{command}", text.encode()))
    assert err["code"] == 400 and err["field"] == "body"
    assert err["message"] == f"malformed JSON: duplicate key {key!r}"
    assert cli.endswith(f": {err['message']}\n")


def test_a_key_given_twice_in_a_registered_job_is_400(served):
    body = b'{"id": "j", "id": "k", "nodes": [], "model": "bert"}'
    err = error_of(call(served.port, "POST", "/v1/jobs", body))
    assert err["code"] == 400 and err["message"] == "malformed JSON: duplicate key 'id'"


@pytest.mark.parametrize("command", ["score", "advise"])
def test_a_utf8_byte_order_mark_is_dropped_as_the_cli_drops_it(served, tmp_path, capsys, command):
    """The CLI reads a file with a BOM; HTTP answered 400 (json's 'Unexpected UTF-8 BOM')."""
    text = json.dumps(api.example(command))
    path = tmp_path / "req.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert main([command, str(path), "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    plain = ok_json(call(served.port, "POST", f"/v1/{command}", text.encode()))
    bom = ok_json(call(served.port, "POST", f"/v1/{command}", b"\xef\xbb\xbf" + text.encode()))
    assert bom == plain == json.loads(json.dumps(cli))


def test_nesting_too_deep_is_still_400(served):
    err = error_of(call(served.port, "POST", "/v1/score", b"[" * 100_000))
    assert err["code"] == 400 and err["field"] == "body"
    assert "nested too deeply" in err["message"]


def test_bytes_that_are_not_utf8_after_a_bom_name_their_offset_in_the_body(served):
    err = error_of(call(served.port, "POST", "/v1/score", b'\xef\xbb\xbf{"a": "\xff"}'))
    assert err["code"] == 400 and err["field"] == "body"
    assert err["message"] == "not UTF-8 at byte 10"


# -- 2. cluster show / from-kube -------------------------------------------------------------


def test_cluster_show_names_a_missing_file_once(tmp_path, capsys):
    path = tmp_path / "missing.yaml"
    assert main(["cluster", "show", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"cassini: error: {path}: cannot read: no such file\n"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("links: 3\nnodes: {}\n", "links: must be a JSON array"),
        ("links: [\n", "malformed YAML"),
        (
            "links: [{id: a, capacity_bps: " + "9" * 5000 + "}]\nnodes: {}\n",
            "malformed YAML: a number is too long (5000 digits; at most 4300)",
        ),
        ("[" * 50_000 + "\n", "nested too deeply"),
        ("epoch_s: 2001-02-30\nlinks: []\nnodes: {}\n", "malformed YAML: day is out of range"),
    ],
)
def test_cluster_show_bad_input_is_one_line_naming_the_file_once(tmp_path, capsys, text, problem):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main(["cluster", "show", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cassini: error: "), lines
    assert lines[0].count(str(path)) == 1 and problem in lines[0], lines[0]
    assert "sys.set_int_max_str_digits" not in lines[0]


def test_cluster_show_lets_a_bug_surface(tmp_path, monkeypatch):
    """Only bad input is exit 2; a bug in the drawing is a traceback, not 'bad input'."""
    import cassini.service.kube.render as render

    def broken(cluster):
        raise RuntimeError("a bug")

    monkeypatch.setattr(render, "draw", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["cluster", "show", str(DATA / "cluster-64.yaml")])

    import cassini.service.cluster as cluster

    def broken_read(obj):
        raise KeyError("a bug")

    monkeypatch.setattr(cluster, "read_cluster", broken_read)
    with pytest.raises(KeyError, match="a bug"):
        main(["cluster", "show", str(DATA / "cluster-64.yaml")])


def test_cluster_show_help_says_what_it_prints(capsys):
    with pytest.raises(SystemExit) as e:
        main(["cluster", "show", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    usage, _, rest = out.partition("\n\n")
    description = rest.split("\n\n")[0]
    assert usage.startswith("usage: cassini cluster show")
    assert not description.startswith("positional arguments"), out
    assert "cluster file" in description and "tier" in description, description


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_from_kube_exits_1_when_the_api_server_cannot_be_reached(tmp_path, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    assert main(["cluster", "from-kube", "--kubeconfig", str(kubeconfig)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cassini: error: cannot reach the API server")


def test_from_kube_exits_1_when_the_api_server_answers_an_error(tmp_path, capsys):
    with ReplayApiServer() as server:
        server.add_list("/api/v1/nodes", (403, {"kind": "Status", "code": 403}))
        rc = main(["cluster", "from-kube", "--kubeconfig", server.kubeconfig(tmp_path)])
    captured = capsys.readouterr()
    assert rc == 1 and captured.out == ""
    # the request named (since 2026-12; a Status without a message: the status alone)
    assert captured.err == ("cassini: error: GET /api/v1/nodes: 403 Forbidden (RBAC: "
                            "deploy/cassini-kube.yaml's ClusterRole lists what it needs)\n")


def test_from_kube_bad_flags_and_kubeconfig_stay_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["cluster", "from-kube", "--nic-bps", "-1"])
    assert e.value.code == 2
    bad = tmp_path / "kc.yaml"
    bad.write_text("- a\n")
    assert main(["cluster", "from-kube", "--kubeconfig", str(bad)]) == 2
    capsys.readouterr()


# -- 3. serve: the --kube options need --kube ------------------------------------------------


@pytest.mark.parametrize(
    "flag",
    [
        ["--nic-bps", "1e11"],
        ["--oversubscription", "2,4"],
        ["--topology-labels", "zone,rack"],
        ["--kueue-topology", "default"],
        ["--publish-network-topology", "default/cassini"],
        ["--kubeconfig", str(DATA / "cluster-64.yaml")],  # before the file is read
    ],
)
def test_serve_refuses_a_kube_option_without_kube(monkeypatch, capsys, flag):
    import cassini.service.cli as service_cli

    def not_started(*args, **kwargs):
        raise AssertionError("served with an option it ignores")

    monkeypatch.setattr(service_cli, "serve", not_started)
    assert main(["serve", "--state", ":memory:", "--port", "0", *flag]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"cassini: error: {flag[0]} needs --kube\n"


# -- 4. a .json cluster file: NaN is not finite ----------------------------------------------

NODES = '"nodes": {"g0": ["a"]}'


@pytest.mark.parametrize(
    "value, shown", [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf")]
)
def test_a_json_cluster_file_with_nan_says_not_finite(tmp_path, capsys, value, shown):
    """It said 'must be a number, got the string 'NaN'' (read as YAML); a .json sim
    config says 'must be finite, got nan'."""
    path = tmp_path / "c.json"
    path.write_text('{"links": [{"id": "a", "capacity_bps": ' + value + "}], " + NODES + "}\n")
    with pytest.raises(InputError) as e:
        load_cluster_file(path)
    assert str(e.value) == f"{path}: links[0].capacity_bps: must be finite, got {shown}"
    assert main(["cluster", "show", str(path)]) == 2
    assert capsys.readouterr().err == f"cassini: error: {e.value}\n"


def test_a_json_cluster_file_reads_json_numbers_as_json(tmp_path):
    """1e9 is a number in JSON (YAML 1.1 reads it as a string)."""
    path = tmp_path / "c.json"
    path.write_text('{"links": [{"id": "a", "capacity_bps": 1e9}], ' + NODES + "}\n")
    cluster, _ = load_cluster_file(path)
    assert cluster.links == {"a": 1e9}


def test_a_json_named_cluster_file_holding_yaml_still_reads(tmp_path):
    """JSON is YAML, and YAML in a .json file is read as YAML."""
    path = tmp_path / "c.json"
    path.write_text("links: [{id: a, capacity_bps: 1.0e+9}]\nnodes: {g0: [a]}\n")
    cluster, _ = load_cluster_file(path)
    assert cluster.links == {"a": 1e9}
