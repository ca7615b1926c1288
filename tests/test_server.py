"""``cassini serve``: the service on 127.0.0.1 (free port) in a thread, real HTTP."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers.pinned import (
    ADVISE_MIN_2DEG_RANKING,
    ADVISE_MIN_2DEG_SHIFTS_S,
    SCORE_2DEG,
    assert_advice,
    assert_score,
)
from helpers.service_util import call as _call
from helpers.service_util import error_of, start
from helpers.service_util import metric as _metric

from cassini import api
from cassini.service.app import version
from cassini.service.cli import listen

MAX_BODY = 100_000


@pytest.fixture(scope="module")
def served():
    lines: list[str] = []
    srv = start(max_body_bytes=MAX_BODY, timeout_s=60, workers=2, log=lines.append)
    srv.log_lines = lines
    try:
        yield srv
    finally:
        srv.stop()


def call(srv, *args, **kwargs):
    return _call(srv.port, *args, **kwargs)


def metric(srv, name, **labels):
    return _metric(srv.port, name, **labels)


def normalised(obj):
    return json.loads(json.dumps(obj))


def triangle_request():
    """Three jobs pairwise on three links: a loop no shifts can satisfy."""
    job = {
        "iteration_time_s": 0.1,
        "phases": [{"start_s": 0.0, "duration_s": 0.05, "rate_bps": 1e9}],
    }
    return {
        "links": [{"id": f"l{i}", "capacity_bps": 1e9} for i in (1, 2, 3)],
        "jobs": [{"id": j, **job} for j in ("a", "b", "c")],
        "candidates": [
            {"id": "tri", "paths": {"a": ["l1", "l3"], "b": ["l1", "l2"], "c": ["l2", "l3"]}}
        ],
    }


def slow_score_request():
    """Eight jobs with different iteration times at 0.1 degrees: seconds of work."""
    jobs = [
        {
            "id": f"j{i}",
            "iteration_time_s": 0.1 + 0.013 * i,
            "phases": [{"start_s": 0.0, "duration_s": 0.03 + 0.001 * i, "rate_bps": 1e9}],
        }
        for i in range(8)
    ]
    return {"capacity_bps": 1e9, "jobs": jobs}


# -- the endpoints ------------------------------------------------------------------------


def test_healthz(served):
    status, headers, body = call(served, "GET", "/healthz")
    assert status == 200 and headers["Content-Type"] == "application/json"
    out = json.loads(body)
    assert out["status"] == "ok" and out["version"] == version()
    status, _, body = call(served, "HEAD", "/healthz")
    assert status == 200 and body == b""


def test_advise_round_trip_equals_api(served):
    request = api.example("advise")
    status, _, body = call(served, "POST", "/v1/advise", request)
    assert status == 200
    assert json.loads(body) == normalised(api.advise_request(request).to_dict())
    assert_advice(json.loads(body))


def test_advise_options_from_query(served):
    request = api.example("advise")
    path = "/v1/advise?aggregate=min&precision_deg=2&loops=score"
    status, _, body = call(served, "POST", path, request)
    assert status == 200
    expected = api.advise_request(request, aggregate="min", precision_deg=2, loops="score")
    out = json.loads(body)
    assert out == normalised(expected.to_dict())
    assert (out["aggregate"], out["precision_deg"], out["loops"]) == ("min", 2.0, "score")
    assert_advice(out, ADVISE_MIN_2DEG_RANKING, ADVISE_MIN_2DEG_SHIFTS_S)


def test_score_round_trip_equals_api(served):
    request = api.example("score")
    status, _, body = call(served, "POST", "/v1/score?precision_deg=2", request)
    assert status == 200
    assert json.loads(body) == normalised(api.score_request(request, precision_deg=2))
    assert_score(json.loads(body), SCORE_2DEG)


def test_all_candidates_rejected_is_200_with_best_null(served):
    status, _, body = call(served, "POST", "/v1/advise", triangle_request())
    assert status == 200
    out = json.loads(body)
    assert out["best"] is None and out["time_shifts_s"] == {}
    assert [c["status"] for c in out["candidates"]] == ["rejected"]


# -- errors ---------------------------------------------------------------------------------


def test_malformed_json_is_400(served):
    err = error_of(call(served, "POST", "/v1/advise", b'{"links": [', None))
    assert err["field"] == "body" and "malformed JSON" in err["message"]
    err = error_of(call(served, "POST", "/v1/score", b"\xff\xfe", None))
    assert err["field"] == "body" and "UTF-8" in err["message"]


def test_an_integer_too_long_to_read_is_400_naming_the_body(served):
    """Python refuses to convert an integer literal of more than 4300 digits (a
    ValueError, not a JSONDecodeError): it was a plain-text 500, counted as 499."""
    before = metric(served, "cassini_http_requests_total", endpoint="/v1/score", code="400")
    body = b'{"capacity_bps": ' + b"1" * 5000 + b', "jobs": []}'
    err = error_of(call(served, "POST", "/v1/score", body))
    assert err["code"] == 400 and err["field"] == "body" and "digits" in err["message"]
    after = metric(served, "cassini_http_requests_total", endpoint="/v1/score", code="400")
    assert after == before + 1


def test_advice_stands_when_a_prediction_does_not_converge(served):
    """A 3,600 s job beside a 10 ms one: the link simulation gives up (it was a 500
    "RuntimeError"); the advice keeps its shifts and scores, without a prediction, and
    the candidate's reason says why."""
    slow = {"start_s": 0.0, "duration_s": 1.0, "rate_bps": 1e9}
    fast = {"start_s": 0.0, "duration_s": 0.005, "rate_bps": 1e9}
    request = {
        "links": [{"id": "l", "capacity_bps": 1e9}],
        "jobs": [
            {"id": "slow", "iteration_time_s": 3600.0, "phases": [slow]},
            {"id": "fast", "iteration_time_s": 0.01, "phases": [fast]},
        ],
        "candidates": [{"id": "c", "paths": {"slow": ["l"], "fast": ["l"]}}],
    }
    status, _, body = call(served, "POST", "/v1/advise", request)
    assert status == 200, body
    out = json.loads(body)
    assert out["best"] == "c" and set(out["time_shifts_s"]) == {"slow", "fast"}
    (cand,) = out["candidates"]
    assert cand["score"] is not None and "predicted_gain" not in cand
    assert cand["reason"].startswith("no prediction: link simulation did not finish")


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r.update(colour="blue"), "colour"),
        (lambda r: r["jobs"][0].update(colour="blue"), "jobs[0].colour"),
        (lambda r: r["links"][0].update(capacity_bps=-1), "links[0].capacity_bps"),
        (
            lambda r: r["candidates"][0]["paths"].update(ghost=["tor1-up"]),
            "candidates[0].paths.ghost",
        ),
    ],
)
def test_schema_errors_are_refused_naming_the_field(served, mutate, field):
    """400 for a body that breaks the schema, 422 for a path naming a job the request does
    not have (the schema allows any key there)."""
    request = api.example("advise")
    mutate(request)
    status, headers, body = call(served, "POST", "/v1/advise", request)
    assert status == (422 if field.endswith("ghost") else 400)
    err = error_of((status, headers, body))
    assert err["field"] == field, err


def test_score_needs_a_job_as_the_cli_does(served):
    """No jobs on a link is almost surely a mistake in the request: a 400 naming jobs in
    the CLI's words (the service answered score 1 where ``cassini score`` exits 2)."""
    err = error_of(call(served, "POST", "/v1/score", {"capacity_bps": 1e9, "jobs": []}))
    assert err["code"] == 400 and err["field"] == "jobs"
    assert err["message"] == "must not be empty"


def test_advise_needs_a_job(served):
    """Placing no job has nothing to rank: the schema says minItems 1 (400, not 422)."""
    request = api.example("advise")
    request["jobs"] = []
    err = error_of(call(served, "POST", "/v1/advise", request))
    assert err["code"] == 400 and err["field"] == "jobs"


def test_top_level_not_an_object_is_400(served):
    err = error_of(call(served, "POST", "/v1/score", [1, 2]))
    assert err["field"] == "body"


@pytest.mark.parametrize(
    "query, field",
    [
        ("precision_deg=abc", "query.precision_deg"),
        ("precision_deg=0", "query.precision_deg"),
        ("precision_deg=nan", "query.precision_deg"),
        ("aggregate=max", "query.aggregate"),
        ("loops=maybe", "query.loops"),
        ("aggregate=min&aggregate=mean", "query.aggregate"),
        ("workers=8", "query.workers"),
    ],
)
def test_bad_query_options_are_400(served, query, field):
    err = error_of(call(served, "POST", f"/v1/advise?{query}", api.example("advise")))
    assert err["field"] == field


def test_score_takes_only_precision(served):
    err = error_of(call(served, "POST", "/v1/score?aggregate=min", api.example("score")))
    assert err["field"] == "query.aggregate"


def test_body_over_limit_is_413(served):
    before = metric(served, "cassini_http_requests_rejected_total", reason="body_too_large")
    body = b" " * (MAX_BODY + 1)
    status, headers, raw = call(served, "POST", "/v1/advise", body)
    assert status == 413
    err = error_of((status, headers, raw))
    assert str(MAX_BODY) in err["message"]
    after = metric(served, "cassini_http_requests_rejected_total", reason="body_too_large")
    assert after == before + 1


def test_unknown_path_is_404(served):
    err = error_of(call(served, "GET", "/v2/advise"))
    assert err["code"] == 404 and "/v1/advise" in err["message"]


@pytest.mark.parametrize("path", ["/healthz/", "/v1/jobs/", "/v1/advise/", "/healthz%0A"])
def test_a_path_with_a_trailing_slash_or_newline_is_a_json_404(served, path):
    """Not Starlette's 307 redirect to the path without the slash, and not the path
    without the newline (``$`` matches before a final newline; the routes end in ``\\Z``)."""
    err = error_of(call(served, "GET", path))
    assert err["code"] == 404 and err["field"] == "path", err


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("GET", "/v1/advise", "POST"),
        ("PUT", "/v1/score", "POST"),
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/metrics", "GET, HEAD"),
    ],
)
def test_wrong_method_is_405_with_allow(served, method, path, allow):
    status, headers, body = call(served, method, path, b"{}" if method == "POST" else None)
    assert status == 405 and headers["Allow"] == allow
    assert error_of((status, headers, body))["field"] == "method"


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/json; charset=latin-1"])
def test_wrong_content_type_is_415(served, content_type):
    status, headers, body = call(
        served, "POST", "/v1/score", api.example("score"), content_type=content_type
    )
    assert status == 415
    assert error_of((status, headers, body))["field"] == "Content-Type"


def test_json_with_charset_is_accepted(served):
    ct = "application/json; charset=utf-8"
    status, _, _ = call(served, "POST", "/v1/score", api.example("score"), content_type=ct)
    assert status == 200


def test_chunked_body_is_accepted(served):
    body = json.dumps(api.example("score")).encode()
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    try:
        conn.putrequest("POST", "/v1/score")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for k in range(0, len(body), 50):
            piece = body[k : k + 50]
            conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        conn.send(b"0\r\n\r\n")
        resp = conn.getresponse()
        status, out = resp.status, json.loads(resp.read())
    finally:
        conn.close()
    assert status == 200 and out == normalised(api.score_request(api.example("score")))
    assert_score(out)


def test_chunked_body_over_limit_is_413(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    try:
        conn.putrequest("POST", "/v1/score")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        piece = b" " * 10_000
        for _ in range(MAX_BODY // len(piece) + 2):
            conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        conn.send(b"0\r\n\r\n")
        resp = conn.getresponse()
        status, headers, body = resp.status, resp.headers, resp.read()
    finally:
        conn.close()
    assert status == 413
    assert error_of((status, headers, body))["field"] == "body"


def test_keep_alive_carries_several_requests(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    try:
        ports = set()
        for _ in range(5):
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.getheader("Connection", "") != "close"
            resp.read()
            ports.add(conn.sock.getsockname()[1])
        assert len(ports) == 1  # one TCP connection for all five
    finally:
        conn.close()


def test_unknown_method_is_refused_and_the_service_stays_up(served):
    # uvicorn's HTTP parser (httptools) refuses a method it does not know before routing
    status, _, body = call(served, "BREW", "/healthz")
    assert status in (400, 405) and b"Traceback" not in body
    assert call(served, "GET", "/healthz")[0] == 200


def test_malformed_request_line_is_400_and_the_service_stays_up(served):
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as s:
        s.sendall(b"GARBAGE\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 400")
    assert b"Traceback" not in data
    assert call(served, "GET", "/healthz")[0] == 200


# -- metrics and logs ---------------------------------------------------------------------


def test_metrics_count_requests_by_endpoint_and_code(served):
    ok = ("cassini_http_requests_total", {"endpoint": "/healthz", "code": "200"})
    bad = ("cassini_http_requests_total", {"endpoint": "/v1/score", "code": "400"})
    hist = ("cassini_http_request_duration_seconds_count", {"endpoint": "/healthz"})
    before = [metric(served, name, **labels) for name, labels in (ok, bad, hist)]
    for _ in range(3):
        assert call(served, "GET", "/healthz")[0] == 200
    assert call(served, "POST", "/v1/score", b"nope")[0] == 400
    after = [metric(served, name, **labels) for name, labels in (ok, bad, hist)]
    assert after == [before[0] + 3, before[1] + 1, before[2] + 3]
    # the request reading /metrics is itself in flight
    assert metric(served, "cassini_http_requests_in_flight") == 1.0
    status, _, body = call(served, "GET", "/metrics")
    text = body.decode()
    for name in (
        "cassini_http_requests_total",
        "cassini_http_request_duration_seconds",
        "cassini_http_requests_in_flight",
        "cassini_http_requests_rejected_total",
    ):
        assert f"# HELP {name.removesuffix('_total')}" in text
        assert f"# TYPE {name.removesuffix('_total')}" in text


def test_one_log_line_per_request(served):
    call(served, "GET", "/healthz?probe=1")
    mine = [line for line in served.log_lines if "/healthz?probe=1" in line]
    assert len(mine) == 1 and '"GET /healthz?probe=1 HTTP/1.1" 400' in mine[0]
    assert mine[0].startswith("127.0.0.1 - [") and mine[0].endswith("ms")


# -- time limit ---------------------------------------------------------------------------


@pytest.fixture()
def one_worker():
    srv = start(timeout_s=0.5, workers=1, quiet=True)
    try:
        yield srv
    finally:
        srv.stop()


def test_timeout_is_504_and_the_worker_is_replaced(one_worker):
    srv = one_worker
    t0 = time.monotonic()
    status, headers, body = call(srv, "POST", "/v1/score?precision_deg=0.1", slow_score_request())
    elapsed = time.monotonic() - t0
    assert status == 504 and 0.4 < elapsed < 5
    assert "0.5 s" in error_of((status, headers, body))["message"]
    assert metric(srv, "cassini_http_requests_rejected_total", reason="timeout") == 1
    assert metric(srv, "cassini_worker_restarts_total") == 1
    # the killed worker was replaced: the only worker answers the next request
    request = api.example("score")
    status, _, body = call(srv, "POST", "/v1/score", request)
    assert status == 200 and json.loads(body) == normalised(api.score_request(request))
    assert_score(json.loads(body))


def test_no_free_worker_within_the_limit_is_503(one_worker):
    srv = one_worker
    pool, loop = srv.service.pool, srv.service.loop
    # occupy the only worker, in the server's event loop
    held = asyncio.run_coroutine_threadsafe(pool._idle.get(), loop).result(10)
    try:
        status, headers, body = call(srv, "POST", "/v1/score", api.example("score"))
    finally:
        loop.call_soon_threadsafe(pool._idle.put_nowait, held)
    assert status == 503 and headers["Retry-After"] == "1"
    error_of((status, headers, body))
    assert metric(srv, "cassini_http_requests_rejected_total", reason="overloaded") == 1
    assert call(srv, "POST", "/v1/score", api.example("score"))[0] == 200


# -- command line -------------------------------------------------------------------------


def test_serve_help_explains_endpoints():
    r = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0
    for text in (
        "/v1/advise",
        "/v1/score",
        "/k8s/v1/prioritize",
        "/v1/jobs/{id}/time_shift",
        "/openapi.json",
        "--cluster",
        "SIGHUP",
        "curl",
        "--max-body-bytes",
    ):
        assert text in r.stdout
    words = " ".join(r.stdout.split())  # argparse wraps a flag's help where it likes
    assert "its parent folder is made if missing" in words  # --state's (store._connect)


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--timeout-s", "0", "--timeout-s"),
        # --workers 100000 forked until the machine refused, then a traceback
        ("--workers", "100000", "1..64"),
    ],
)
def test_serve_rejects_bad_flags(flag, value, says):
    r = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "serve", flag, value],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and flag in r.stderr and says in r.stderr
    assert "Traceback" not in r.stderr


def test_serve_on_a_busy_port_exits_1():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError):
            listen("127.0.0.1", port)
        r = subprocess.run(
            [sys.executable, "-m", "cassini.cli", "serve", "--port", str(port), "--workers", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 1 and "cannot listen" in r.stderr, r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_serves_and_stops_gracefully_on_signal(sig):
    proc = subprocess.Popen(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--workers", "1"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stderr.readline()
        assert "listening on http://127.0.0.1:" in line, line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 0
        rest = proc.stderr.read()
        assert '"GET /healthz HTTP/1.1" 200' in rest and "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
