"""Running jobs (``/v1/jobs``), their time-shifts (``/v1/jobs/{id}/time_shift``), and the
cluster file (``--cluster``, re-read on SIGHUP), over real HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse

import pytest
import yaml
from helpers.service_util import (
    HALF,
    call,
    error_of,
    metric,
    ok_json,
    pair,
    serve_process,
    start,
    two_node_cluster,
)

from cassini.service.cluster import library

EPOCH_S = 1_767_225_600.0


def cluster_doc():
    doc = two_node_cluster(epoch_s=EPOCH_S)
    doc["jobs"] += [
        {"id": "a", "iteration_time_s": 0.1, "phases": HALF, "nodes": pair("n3")},
        {"id": "b", "iteration_time_s": 0.1, "phases": HALF, "nodes": pair("n3")},
    ]
    return doc


@pytest.fixture()
def served(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster_doc()))
    srv = start(cluster_file=str(path), workers=1, quiet=True)
    try:
        yield srv
    finally:
        srv.stop()


def shift_of(srv, job_id):
    path = f"/v1/jobs/{urllib.parse.quote(job_id, safe='')}/time_shift"
    out = ok_json(call(srv.port, "GET", path))
    assert set(out) == {
        "job_id", "shift", "shift_s", "period_s", "epoch_s", "reason", "tolerance_s", "released"
    }  # fmt: skip
    assert out["job_id"] == job_id
    return out


def test_jobs_sharing_a_link_get_interleaving_shifts(served):
    a, b = shift_of(served, "a"), shift_of(served, "b")
    for s in (a, b):
        assert s["shift"] is True and s["reason"] is None
        assert s["period_s"] == 0.1 and s["epoch_s"] == EPOCH_S
        assert 0.0 <= s["shift_s"] < s["period_s"]
    # two half-iteration jobs on one link: their sending halves alternate
    gap = (a["shift_s"] - b["shift_s"]) % 0.1
    assert gap == pytest.approx(0.05, abs=0.003)
    # how late each may run before the agent re-aligns it: a full link leaves little room
    for s in (a, b):
        assert 0.0 < s["tolerance_s"] < 0.25 * s["period_s"]


def test_job_alone_on_its_links_runs_free(served):
    s = shift_of(served, "half")
    assert s["shift"] is False and s["shift_s"] == 0.0
    assert s["period_s"] == 0.1 and s["epoch_s"] == EPOCH_S
    assert "shares no link" in s["reason"]
    assert s["tolerance_s"] is None


def test_unknown_job_time_shift_is_404(served):
    err = error_of(call(served.port, "GET", "/v1/jobs/ghost/time_shift"))
    assert err["code"] == 404 and err["field"] == "job_id"
    err = error_of(
        call(served.port, "PUT", "/v1/jobs/ghost/time_shift", {"shift_s": 0, "period_s": 1})
    )
    assert err["code"] == 404


def test_registry_round_trip(served):
    port = served.port
    job = {"id": "ns/train-1", "model": "vgg16", "nodes": ["n1", "n2"]}
    created = ok_json(call(port, "POST", "/v1/jobs", job), 201)
    vgg = library()["vgg16"]
    assert created["id"] == "ns/train-1" and created["nodes"] == ["n1", "n2"]
    assert created["model"] == "vgg16" and created["iteration_time_s"] == vgg.iteration_time_s
    quoted = urllib.parse.quote("ns/train-1", safe="")
    assert ok_json(call(port, "GET", f"/v1/jobs/{quoted}")) == created
    listed = ok_json(call(port, "GET", "/v1/jobs"))["jobs"]
    assert [j["id"] for j in listed] == sorted(["half", "most", "a", "b", "ns/train-1"])
    # registering it again replaces it: 200
    job2 = {"id": "ns/train-1", "iteration_time_s": 0.1, "phases": HALF, "nodes": pair("n1")}
    assert ok_json(call(port, "POST", "/v1/jobs", job2))["nodes"] == pair("n1")
    # it shares l1 with "half", and they interleave: both now get shifts
    assert shift_of(served, "ns/train-1")["shift"] is True
    assert shift_of(served, "half")["shift"] is True
    removed = ok_json(call(port, "DELETE", f"/v1/jobs/{quoted}"))
    assert removed["id"] == "ns/train-1"
    assert error_of(call(port, "GET", f"/v1/jobs/{quoted}"))["code"] == 404
    assert error_of(call(port, "DELETE", f"/v1/jobs/{quoted}"))["code"] == 404
    assert shift_of(served, "half")["shift"] is False  # alone again


def test_a_shift_the_advisor_predicts_no_gain_for_is_not_applied(served):
    # vgg16 sends 40 Gb/s for half of its iteration on l1's 1 Gb/s: the link is saturated
    # whatever the shifts, and the advisor's prediction declines them (with its reason)
    job = {"id": "big", "model": "vgg16", "nodes": pair("n1")}
    ok_json(call(served.port, "POST", "/v1/jobs", job), 201)
    s = shift_of(served, "big")
    assert s["shift"] is False and s["shift_s"] == 0.0 and s["reason"]
    assert s["period_s"] == library()["vgg16"].iteration_time_s


def test_registering_with_an_own_profile(served):
    job = {"id": "own", "iteration_time_s": 0.2, "phases": HALF, "nodes": pair("n2")}
    out = ok_json(call(served.port, "POST", "/v1/jobs", job), 201)
    assert out["iteration_time_s"] == 0.2 and "model" not in out
    s = shift_of(served, "own")
    # it shares l2 with "most" (90 % of every 100 ms), whom shifting cannot help: with
    # its only partner free, holding "own" would interleave with nothing
    assert s["shift"] is False and s["period_s"] == 0.2 and s["shift_s"] == 0.0
    assert "nothing to interleave with" in s["reason"], s
    assert shift_of(served, "most")["shift"] is False


@pytest.mark.parametrize(
    "job, field, status",
    [
        ({"model": "vgg16", "nodes": ["n1"]}, "id", 400),
        # /v1/jobs/x/time_shift is job x's time-shift: such a job could not be read back
        ({"id": "x/time_shift", "model": "vgg16", "nodes": []}, "id", 400),
        ({"id": "x", "model": "vgg16", "nodes": ["nowhere"]}, "nodes[0]", 422),
        ({"id": "x", "model": "vgg16", "nodes": ["n1", "n1"]}, "nodes", 400),
        ({"id": "x", "model": "nope", "nodes": []}, "model", 422),
        ({"id": "x", "nodes": []}, "iteration_time_s", 400),
        ({"id": "x", "model": "vgg16", "iteration_time_s": 1, "nodes": []}, "model", 400),
        (
            {"id": "x", "iteration_time_s": 0.1, "phases": [{"start_s": 0}]},
            "phases[0].duration_s",
            400,
        ),
        (
            {"id": "x", "iteration_time_s": 0.1,
             "phases": [{"start_s": 0.05, "duration_s": 0.2, "rate_bps": 1}]},
            "phases[0].duration_s",
            422,
        ),
        ({"id": "x", "model": "vgg16", "colour": "red"}, "colour", 400),
        ([], "body", 400),
    ],
)
def test_bad_job_is_refused_naming_the_field(served, job, field, status):
    """400: the body breaks the schema (/openapi.json); 422: it follows the schema but
    names a node or model the service does not have, or a phase longer than its
    iteration."""
    err = error_of(call(served.port, "POST", "/v1/jobs", job))
    assert err["code"] == status and err["field"] == field, err


@pytest.mark.parametrize(
    "job_id, words",
    [
        ("half\n", "control characters"),  # DELETE /v1/jobs/half%0A deleted job "half"
        ("a\x00b", "control characters"),
        ("tab\there", "control characters"),
        ("c1\x85", "control characters"),
        ("x" * 254, "at most 253 characters"),  # 70,000 registered, never read back
    ],
)
def test_a_job_id_the_routes_cannot_name_is_refused(served, job_id, words):
    err = error_of(call(served.port, "POST", "/v1/jobs", {"id": job_id, "model": "vgg16"}))
    assert err["code"] == 400 and err["field"] == "id" and words in err["message"], err
    assert job_id not in [j["id"] for j in ok_json(call(served.port, "GET", "/v1/jobs"))["jobs"]]


def test_the_longest_job_id_is_read_and_deleted(served):
    job_id = "é/" * 126 + "x"  # 253 characters, 2,026 bytes percent-encoded
    ok_json(call(served.port, "POST", "/v1/jobs", {"id": job_id, "model": "vgg16"}), 201)
    path = f"/v1/jobs/{urllib.parse.quote(job_id, safe='')}"
    assert ok_json(call(served.port, "GET", path))["id"] == job_id
    assert shift_of(served, job_id)["job_id"] == job_id
    assert ok_json(call(served.port, "DELETE", path))["id"] == job_id


@pytest.mark.parametrize(
    "method, path",
    [
        ("DELETE", "/v1/jobs/half%0A"),
        ("GET", "/v1/jobs/half%0A"),
        ("GET", "/v1/jobs/half/time_shift%0A"),
        ("PUT", "/v1/jobs/half/time_shift%0A"),  # job "half/time_shift\n": no PUT (405)
        ("GET", "/v1/jobs/half%0A/time_shift"),
    ],
)
def test_a_path_ending_in_a_newline_names_no_other_job(served, method, path):
    """Starlette's route pattern ends in ``$``, which matches before a final newline:
    ``DELETE /v1/jobs/half%0A`` deleted job ``half``.  The routes match exactly now."""
    before = shift_of(served, "half")
    body = {"shift_s": 0.05, "period_s": 0.1} if method == "PUT" else None
    err = error_of(call(served.port, method, path, body))
    assert err["code"] == (405 if method == "PUT" else 404), err
    assert ok_json(call(served.port, "GET", "/v1/jobs/half"))["id"] == "half"
    assert shift_of(served, "half") == before


def test_a_slow_job_does_not_break_the_others_time_shifts(served):
    """A 100 s job beside 0.1 s ones: the link simulation ran out of events and every
    GET .../time_shift was a 500 "RuntimeError: link simulation did not converge"."""
    slow = {
        "id": "slow",
        "iteration_time_s": 100.0,
        "nodes": pair("n3"),
        "phases": [{"start_s": 0.0, "duration_s": 1.0, "rate_bps": 1e9}],
    }
    ok_json(call(served.port, "POST", "/v1/jobs", slow), 201)
    for job_id in ("a", "b", "slow", "half"):
        s = shift_of(served, job_id)
        assert s["period_s"] >= (100.0 if job_id == "slow" else 0.1), s


def test_a_released_job_runs_free_at_its_iteration_time(served):
    """The release was stored and answered with period_s 1.0, whatever the job's period."""
    body = {"shift": False, "reason": "missed its slot"}
    out = ok_json(call(served.port, "PUT", "/v1/jobs/a/time_shift", body))
    assert out["shift"] is False and out["period_s"] == 0.1, out
    assert shift_of(served, "a")["period_s"] == 0.1


@pytest.mark.parametrize("wanted", ["{etag}", "W/{etag}", '"other", W/{etag}', "*"])
def test_if_none_match_compares_weakly_and_takes_a_star(served, wanted):
    """RFC 9110, 13.1.2: If-None-Match uses the weak comparison (W/"x" matches "x"), and
    ``*`` matches any current answer."""
    path = "/v1/jobs/a/time_shift"
    status, headers, _ = call(served.port, "GET", path)
    etag = headers["ETag"]
    status, headers, body = call(
        served.port, "GET", path, headers={"If-None-Match": wanted.format(etag=etag)}
    )
    assert status == 304 and body == b"" and headers["ETag"] == etag
    status, _, _ = call(served.port, "GET", path, headers={"If-None-Match": 'W/"other"'})
    assert status == 200


def test_put_time_shift_sets_it_until_the_job_is_registered_again(served):
    port = served.port
    out = ok_json(call(port, "PUT", "/v1/jobs/a/time_shift", {"shift_s": 0.03, "period_s": 0.12}))
    assert out == {
        "job_id": "a",
        "shift": True,
        "shift_s": 0.03,
        "period_s": 0.12,
        "epoch_s": EPOCH_S,
        "reason": None,
        "tolerance_s": None,  # an explicit shift: the agent's default tolerance
        "released": False,
    }
    assert shift_of(served, "a") == out
    body = {"shift_s": 0.01, "period_s": 0.1, "epoch_s": 1000.0}
    assert ok_json(call(port, "PUT", "/v1/jobs/half/time_shift", body))["epoch_s"] == 1000.0
    # a job registered again loses its explicit shift
    job = {"id": "a", "iteration_time_s": 0.1, "phases": HALF, "nodes": pair("n3")}
    ok_json(call(port, "POST", "/v1/jobs", job))
    assert shift_of(served, "a")["period_s"] == 0.1


def test_a_released_job_releases_its_held_group(served):
    """A job that reports its release (PUT shift false) is answered ``released``, and so
    is its partner on the shared link, which runs free with it; a job sharing no link
    with them keeps its answer."""
    port = served.port
    assert shift_of(served, "b")["shift"] is True and shift_of(served, "b")["released"] is False
    half_before = shift_of(served, "half")
    body = {"shift": False, "reason": "the job released itself: missed its slot 3 times"}
    out = ok_json(call(port, "PUT", "/v1/jobs/a/time_shift", body))
    assert out["shift"] is False and out["released"] is True
    b = shift_of(served, "b")
    assert b["shift"] is False and b["released"] is True
    assert "released with its group: a runs free" in b["reason"]
    assert "missed its slot" in b["reason"]
    assert shift_of(served, "half") == half_before
    # a held shift again for a: the group is held again
    ok_json(call(port, "PUT", "/v1/jobs/a/time_shift", {"shift_s": 0.0, "period_s": 0.1}))
    assert shift_of(served, "b")["shift"] is True


def test_the_agent_reports_its_own_release_with_its_token(tmp_path):
    """cassini.torch's ShiftSource PUTs the release with the token file's bearer token;
    without the token the service refuses it (and the job keeps running, the error kept)."""
    from cassini.torch.timeshift import ShiftSource

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster_doc()))
    tokens = tmp_path / "tokens"
    tokens.write_text("# the scheduler's and the jobs' tokens\n" + "t" * 32 + " jobs\n")
    srv = start(cluster_file=str(path), workers=1, quiet=True, insecure_writes=False,
                token_file=str(tokens))
    try:
        url = f"http://127.0.0.1:{srv.port}"
        anonymous = ShiftSource(url, "a")
        anonymous.report("missed its slot 3 times")
        assert anonymous.report_error is not None and "401" in anonymous.report_error
        assert shift_of(srv, "b")["released"] is False
        source = ShiftSource(url, "a", token_file=str(tokens))
        source.report("missed its slot 3 times")
        assert source.report_error is None
        b = ShiftSource(url, "b").first()
        assert b.shift is False and "a runs free" in (b.reason or "")
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "body, field, status",
    [
        ({"shift_s": 0.2, "period_s": 0.1}, "shift_s", 422),  # shift_s < period_s: in words
        ({"shift_s": -0.1, "period_s": 0.1}, "shift_s", 400),
        ({"shift_s": 0.0, "period_s": 0}, "period_s", 400),
        ({"shift_s": 0.0}, "period_s", 400),
        ({"shift_s": 0.0, "period_s": 1, "epoch_s": "now"}, "epoch_s", 400),
        ({"shift_s": 0.0, "period_s": 1, "extra": 1}, "extra", 400),
        ({"shift": False, "epoch_s": 1.0}, "epoch_s", 400),  # a release has no slots
        ({"shift_s": 0.01, "period_s": 0.07, "epoch_s": 1e300}, "epoch_s", 400),
        ({"shift_s": 0.01, "period_s": 0.07, "epoch_s": 1e10}, "epoch_s", 400),
        ({"shift_s": 0.01, "period_s": 0.07, "epoch_s": EPOCH_S * 1000}, "epoch_s", 400),
        ({"shift_s": 0.01, "period_s": 0.07, "epoch_s": -1.0}, "epoch_s", 400),
    ],
)
def test_bad_put_time_shift_is_refused(served, body, field, status):
    err = error_of(call(served.port, "PUT", "/v1/jobs/a/time_shift", body))
    assert err["code"] == status and err["field"] == field


def test_an_epoch_in_milliseconds_is_refused_saying_so(served):
    """UNIX seconds below 1e10: a millisecond epoch (or 1e300) was answered 200 and held
    the job asleep (or crashed its agent's sleep)."""
    body = {"shift_s": 0.01, "period_s": 0.07, "epoch_s": 1767225600000}
    err = error_of(call(served.port, "PUT", "/v1/jobs/a/time_shift", body))
    assert err["field"] == "epoch_s" and "seconds, not milliseconds" in err["message"]
    body["epoch_s"] = 9_999_999_999.0  # just below the bound, but centuries ahead: 422
    err = error_of(call(served.port, "PUT", "/v1/jobs/a/time_shift", body))
    assert err["code"] == 422 and err["field"] == "epoch_s" and "ahead" in err["message"]
    body["epoch_s"] = round(time.time()) + 3600.0  # within a day of the clock: kept
    assert ok_json(call(served.port, "PUT", "/v1/jobs/a/time_shift", body))["epoch_s"] == (
        body["epoch_s"]
    )
    from cassini.errors import InputError
    from cassini.service.cluster import read_cluster

    with pytest.raises(InputError, match="epoch_s: .*seconds, not milliseconds"):
        read_cluster({**two_node_cluster(), "epoch_s": EPOCH_S * 1000})


def test_help_and_readme_name_every_time_shift_field():
    """``cassini serve --help`` and the README list the answer's fields (tolerance_s and
    released were missing)."""
    from pathlib import Path

    from cassini.service.models import TimeShift
    from cassini.service.options import EPILOG

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    listed = readme[readme.index("/v1/jobs/{id}/time_shift` →"):][:200]
    for name in TimeShift.model_fields:
        assert f'"{name}"' in EPILOG, name
        assert f'"{name}"' in listed, name


def test_job_routes_answer_405_with_allow(served):
    status, headers, _ = call(served.port, "PATCH", "/v1/jobs/a")
    assert status == 405 and headers["Allow"] == "GET, DELETE, HEAD"
    status, headers, _ = call(served.port, "POST", "/v1/jobs/a/time_shift", b"{}")
    assert status == 405 and headers["Allow"] == "GET, PUT, HEAD"


def test_without_cluster_jobs_need_no_nodes():
    srv = start(workers=1, quiet=True)
    try:
        ok_json(call(srv.port, "POST", "/v1/jobs", {"id": "j", "model": "bert"}), 201)
        s = shift_of(srv, "j")
        assert s["shift"] is False and s["period_s"] == library()["bert"].iteration_time_s
        assert abs(s["epoch_s"] - time.time()) < 3600  # the server's start time
        err = error_of(
            call(srv.port, "POST", "/v1/jobs", {"id": "k", "model": "bert", "nodes": ["n1"]})
        )
        assert err["field"] == "nodes[0]"
    finally:
        srv.stop()


def test_a_model_is_named_as_loosely_as_elsewhere_and_a_typo_gets_a_suggestion():
    srv = start(workers=1, quiet=True)
    try:
        ok_json(call(srv.port, "POST", "/v1/jobs", {"id": "j", "model": "BERT"}), 201)
        assert shift_of(srv, "j")["period_s"] == library()["bert"].iteration_time_s
        err = error_of(call(srv.port, "POST", "/v1/jobs", {"id": "k", "model": "bertt"}))
        assert err["field"] == "model" and "did you mean 'bert'?" in err["message"]
    finally:
        srv.stop()


# -- the cluster file and SIGHUP -------------------------------------------------------------


def test_sighup_reloads_the_cluster_file(tmp_path):
    path = tmp_path / "cluster.json"
    doc = two_node_cluster()
    path.write_text(json.dumps(doc))
    proc, port = serve_process("--cluster", str(path), "--workers", "1", "--quiet")
    try:
        ids = lambda: [j["id"] for j in ok_json(call(port, "GET", "/v1/jobs"))["jobs"]]  # noqa: E731
        assert ids() == ["half", "most"]
        ok_json(
            call(port, "POST", "/v1/jobs", {"id": "api", "model": "bert", "nodes": ["n3"]}), 201
        )
        # the file gains a job on n1 and loses "most"
        new = {"id": "new", "iteration_time_s": 0.1, "phases": HALF, "nodes": pair("n1")}
        doc["jobs"] = [doc["jobs"][0], new]
        path.write_text(json.dumps(doc))
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while ids() != ["api", "half", "new"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ids() == ["api", "half", "new"]  # jobs registered over HTTP are kept
        assert shift_of_port(port, "new")["shift"] is True  # shares l1 with "half"
        assert metric(port, "cassini_cluster_reloads_total", result="ok") == 1
        # a broken file is refused; the service keeps the previous cluster
        path.write_text("links: [")
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while (
            metric(port, "cassini_cluster_reloads_total", result="error") < 1
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert metric(port, "cassini_cluster_reloads_total", result="error") == 1
        assert ids() == ["api", "half", "new"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "keeping the previous cluster" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def shift_of_port(port, job_id):
    return ok_json(call(port, "GET", f"/v1/jobs/{job_id}/time_shift"))


@pytest.mark.parametrize(
    "content, words",
    [
        ("links: [", "c.yaml:1:9: malformed YAML: expected the node content"),
        ("links: []\nnodes: {n1: [nope]}\n", "nodes.n1[0]"),
        ("links: []\nnodes: {}\njobs: [{id: j, model: bert, nodes: [n9]}]\n", "jobs[0].nodes[0]"),
        ("links: [{id: l, capacity_bps: 50e9}]\nnodes: {}\n", "links[0].capacity_bps"),
        ("links: []\nnodes: {}\njobs: [{id: a/time_shift, model: bert, nodes: []}]\n",
         "jobs[0].id"),
        # the rule of POST /v1/jobs (cluster.unroutable): no control character, <= 253
        ('links: []\nnodes: {}\njobs: [{id: a, model: bert}, {id: "b\\n", model: bert}]\n',
         "jobs[1].id: must not contain control characters"),
        (f"links: []\nnodes: {{}}\njobs: [{{id: {'x' * 254}, model: bert}}]\n",
         "jobs[0].id: must be at most 253 characters"),
    ],
)
def test_bad_cluster_file_exits_2_with_one_line(tmp_path, content, words):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    r = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--cluster", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("cassini: error: --cluster") and words in lines[0]
    )
