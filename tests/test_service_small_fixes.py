"""Small fixes in the file reader and ``cassini serve`` / ``cassini cluster``:

1. a bad byte after a UTF-8 byte-order mark is named at its offset in the file;
2. a request body's JSON ValueError is labelled by what it is (not always "an integer");
3. ``serve --publish-interval-s`` needs ``--kube`` and ``--publish-network-topology``;
4. the ``cassini.io/profile`` annotation is read by the service's JSON reader;
5. ``cluster from-kube --out`` is checked before the API server is asked;
6. the serve and from-kube flags are checked by cassini.files' argparse types."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from helpers.kube_replay import ReplayApiServer
from starlette.requests import Request

from cassini import files
from cassini.cli import build_parser, main
from cassini.errors import InputError
from cassini.service import reading
from cassini.service.config import ServiceConfig
from cassini.service.errors import BadRequest
from cassini.service.k8s import ExtenderArgs, pod_profile

DATA = Path(__file__).resolve().parent / "data" / "kube"
BOM = b"\xef\xbb\xbf"

# -- 1. decode_text: offsets in the data as given --------------------------------------------


@pytest.mark.parametrize(
    "data, byte, offset",
    [
        (b"ab\xffcd", 0xFF, 2),
        (BOM + b"ab\xffcd", 0xFF, 5),  # said 'byte 0xbf at offset 2' (the BOM's last byte)
        (BOM + b"\xff", 0xFF, 3),  # said 'byte 0xef at offset 0'
        (b"\xef\xbb", 0xEF, 0),  # two bytes of a mark: decoded to '' without an error
    ],
)
def test_a_bad_byte_is_named_at_its_offset_in_the_data(data, byte, offset):
    with pytest.raises(InputError) as e:
        files.decode_text(data, "f.yaml")
    assert str(e.value) == (
        f"f.yaml: binary file, expected UTF-8 text (byte 0x{byte:02x} at offset {offset})"
    )


def test_a_bad_byte_after_a_bom_in_a_file_names_its_offset(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(BOM + b"links: [\xc3\x28]\n")
    with pytest.raises(InputError, match=r"byte 0xc3 at offset 11\)$"):
        files.read_text(path)


def test_a_bom_is_still_dropped_and_a_head_may_end_mid_character():
    assert files.decode_text(BOM + "é".encode(), "f") == "é"
    assert files.decode_text(BOM + b"a\xc3", "f", whole=False) == "a"


# -- 2. a request body's ValueError, labelled by what it is ------------------------------------


def body_request(body: bytes) -> Request:
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {"type": "http", "method": "POST", "path": "/v1/score", "headers": headers}
    return Request(scope, receive)


def read_error(body: bytes) -> BadRequest:
    with pytest.raises(BadRequest) as e:
        asyncio.run(reading.read_json(body_request(body), ServiceConfig()))
    assert e.value.field == "body"
    return e.value


def test_a_plain_value_error_of_the_reader_is_not_called_a_long_integer(monkeypatch):
    """Any ValueError that was not a DuplicateKey, TooDeep or NumberTooLong was answered
    'holds an integer of more than 4300 digits'."""

    def other(text):
        raise ValueError("something else entirely")

    monkeypatch.setattr(reading.files, "loads_json", other)
    err = read_error(b"{}")
    assert err.message == "malformed JSON: something else entirely"


@pytest.mark.parametrize(
    "body, message",
    [
        (b'{"a": ' + b"1" * 5000 + b"}", "malformed JSON: a number is too long (5000 digits"),
        (b'{"a": 1, "a": 2}', "malformed JSON: duplicate key 'a'"),
        (b"[" * 100_000, "malformed JSON: nested too deeply"),
    ],
)
def test_the_readers_own_errors_keep_their_words(body, message):
    assert read_error(body).message.startswith(message)


# -- 3. --publish-interval-s needs --kube and --publish-network-topology ---------------------


def test_serve_refuses_publish_interval_without_kube(monkeypatch, capsys):
    """It was served, the interval silently ignored."""
    import cassini.service.cli as service_cli

    def not_started(*args, **kwargs):
        raise AssertionError("served with an option it ignores")

    monkeypatch.setattr(service_cli, "serve", not_started)
    args = ["serve", "--state", ":memory:", "--port", "0", "--publish-interval-s", "5"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "cassini: error: --publish-interval-s needs --kube\n"


def test_publish_interval_with_kube_needs_a_network_topology(tmp_path, capsys):
    from cassini.service.cli import _kube_options

    with ReplayApiServer() as api:
        kubeconfig = api.kubeconfig(tmp_path)
    args = build_parser().parse_args(
        ["serve", "--kube", "--kubeconfig", kubeconfig, "--publish-interval-s", "5"]
    )
    assert _kube_options(args) == 2
    err = capsys.readouterr().err
    assert err == "cassini: error: --publish-interval-s needs --publish-network-topology\n"
    plain = build_parser().parse_args(["serve", "--kube", "--kubeconfig", kubeconfig])
    assert _kube_options(plain).publish_interval_s == 30.0  # the default, not given


def test_serve_without_publish_interval_still_serves(monkeypatch):
    import cassini.service.cli as service_cli

    served = []
    monkeypatch.setattr(service_cli, "serve", lambda *a, **k: served.append(a) or 0)
    assert main(["serve", "--state", ":memory:", "--port", "0"]) == 0
    assert len(served) == 1


# -- 4. the profile annotation, read by the service's JSON reader ----------------------------

FIELD = 'Pod.metadata.annotations["cassini.io/profile"]'
PHASE = '{"start_s": 0.0, "duration_s": 0.05, "rate_bps": 1e9}'


def annotated(text: str) -> ExtenderArgs:
    return ExtenderArgs("pod-1", {"cassini.io/profile": text}, ("n1",), None)


def test_a_key_given_twice_in_the_profile_annotation_is_refused():
    """json.loads kept the last value: the pod was scored as a 0.1 s job."""
    text = '{"iteration_time_s": 5, "iteration_time_s": 0.1, "phases": [' + PHASE + "]}"
    with pytest.raises(InputError) as e:
        pod_profile(annotated(text), {})
    assert str(e.value) == f"{FIELD}: malformed JSON: duplicate key 'iteration_time_s'"


def test_a_bom_before_the_profile_annotation_is_dropped_as_for_a_body():
    text = '\ufeff{"iteration_time_s": 0.1, "phases": [' + PHASE + "]}"
    profile = pod_profile(annotated(text), {})
    assert profile is not None and profile.iteration_time_s == 0.1
    assert profile.job_id == "pod-1"


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"iteration_time_s": ' + "1" * 5000 + "}", "malformed JSON: a number is too long"),
        ("[" * 100_000, "malformed JSON: nested too deeply"),
        ('{"iteration_time_s": ', "malformed JSON at column 22: Expecting value"),
        ('{"iteration_time_s": NaN, "phases": []}', "must be finite, got nan"),
    ],
)
def test_the_profile_annotation_errors_name_it(text, problem):
    with pytest.raises(InputError) as e:
        pod_profile(annotated(text), {})
    assert e.value.field.startswith(FIELD) and problem in e.value.problem, e.value


# -- 5. from-kube --out: checked before the API server is asked ------------------------------


def replay() -> ReplayApiServer:
    server = ReplayApiServer()
    for path, name in [
        ("/api/v1/nodes", "nodes-64.json"),
        ("/api/v1/pods", "pods.json"),
        ("/apis/kueue.x-k8s.io/v1beta1/topologies", "kueue-topologies.json"),
    ]:
        server.add_list(path, json.loads((DATA / name).read_text()))
    return server


def from_kube(tmp_path: Path, out: Path) -> tuple[int, list]:
    with replay() as server:
        rc = main(
            ["cluster", "from-kube", "--kubeconfig", server.kubeconfig(tmp_path), "--out", str(out)]
        )
    return rc, server.requests


@pytest.mark.parametrize("where", ["under a file", "a folder"])
def test_an_out_that_cannot_be_written_is_refused_before_the_api_server(tmp_path, capsys, where):
    """The model was built from the API server first, and the write failed after."""
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "c.yaml" if where == "under a file" else tmp_path
    rc, requests = from_kube(tmp_path, out)
    captured = capsys.readouterr()
    assert rc == 2 and requests == [] and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cassini: error: --out {out}: "), lines


def test_out_in_a_missing_folder_is_made_as_for_every_command(tmp_path, capsys):
    """As ``cassini profile --out`` and ``sim trace --out``: it had failed after the
    API server was read (``No such file or directory``)."""
    out = tmp_path / "new" / "cluster.yaml"
    rc, requests = from_kube(tmp_path, out)
    assert rc == 0 and requests, capsys.readouterr().err
    assert out.read_text().startswith("#")


def test_a_failure_while_writing_is_one_line_and_leaves_the_old_file(
    tmp_path, capsys, monkeypatch
):
    from cassini import outputs

    out = tmp_path / "cluster.yaml"
    out.write_text("old\n")

    write_text = outputs.Path.write_text

    def full(self, *args, **kwargs):  # the disk fills while the new file is written
        if ".partial-" in self.name:
            raise OSError(28, "No space left on device")
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(outputs.Path, "write_text", full)
    rc, _ = from_kube(tmp_path, out)
    monkeypatch.undo()
    lines = capsys.readouterr().err.splitlines()
    errors = [line for line in lines if line.startswith("cassini: error:")]
    assert rc == 2
    assert errors == [f"cassini: error: --out {out}: cannot write: No space left on device"]
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []


# -- 6. the flags, checked by cassini.files' argparse types ----------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["serve", "--workers", "65"], "--workers: must be an integer in 1..64, got 65"),
        (["serve", "--port", "70000"], "--port: must be an integer in 0..65535, got 70000"),
        (["serve", "--max-jobs", "0"], "--max-jobs: must be an integer >= 1, got 0"),
        (["serve", "--timeout-s", "inf"], "--timeout-s: must be a finite number above 0, got inf"),
        (["serve", "--precision-deg", "x"], "--precision-deg: must be a number above 0, got 'x'"),
        (["serve", "--min-score", "2"], "--min-score: must be in [0, 1], got 2"),
        (["serve", "--write-rate", "-1"], "--write-rate: must be a finite number >= 0, got -1"),
        (
            ["cluster", "from-kube", "--nic-bps", "-1"],
            "--nic-bps: must be a finite number above 0, got -1",
        ),
    ],
)
def test_flags_are_refused_in_the_words_of_cassini_files(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_serve_and_from_kube_use_the_files_types():
    """The same check in two places drifts: these flags use cassini.files' own."""
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices  # noqa: SLF001
    serve = {a.dest: a.type for a in sub["serve"]._actions}  # noqa: SLF001
    assert serve["max_body_bytes"] is files.positive_int
    assert serve["max_jobs"] is files.positive_int
    assert serve["timeout_s"] is files.positive_float
    assert serve["publish_interval_s"] is files.positive_float
    from_kube_parser = sub["cluster"]._subparsers._group_actions[0].choices["from-kube"]  # noqa: SLF001
    kube = {a.dest: a.type for a in from_kube_parser._actions}  # noqa: SLF001
    assert kube["nic_bps"] is files.positive_float


@pytest.mark.parametrize("shift", ["false", 0, 1, None, [True]])
def test_a_put_shift_that_is_not_a_boolean_names_both_choices(shift):
    """``shift`` picks the model (hold: true, release: false); a value of another type
    said "must be True" (Python's spelling, and false is valid too)."""
    from cassini.service.errors import BadRequest
    from cassini.service.handlers import read_time_shift_put

    with pytest.raises(BadRequest) as e:  # a wrong type: 400, as every other
        read_time_shift_put({"shift": shift}, "j1", default_epoch_s=0.0, iteration_time_s=0.1)
    assert e.value.field == "shift"
    assert "must be true (hold) or false (release)" in e.value.message
    assert "True" not in e.value.message
