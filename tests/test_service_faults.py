"""Faults: a worker killed mid-request, a client that disconnects mid-body, and a fuzzer of
malformed requests (hypothesis) against a ``cassini serve`` process: it stays up, its
memory does not grow, and no answer carries a traceback.

The fuzzer runs ``CASSINI_FUZZ_EXAMPLES`` examples (default 2,000, about 20 s here);
``CASSINI_FUZZ_EXAMPLES=10000`` is the issue's figure (see docs/service.md)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from helpers.pinned import assert_score
from helpers.service_util import (
    call,
    error_of,
    metric,
    ok_json,
    serve_process,
    start,
    two_node_cluster,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cassini import api

FUZZ_EXAMPLES = int(os.environ.get("CASSINI_FUZZ_EXAMPLES", "2000"))


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


def test_worker_killed_mid_request_answers_5xx_then_200s():
    srv = start(workers=1, timeout_s=120, quiet=True)
    try:
        pool = srv.service.pool
        result: dict = {}

        def slow():
            result["r"] = call(
                srv.port, "POST", "/v1/score?precision_deg=0.1", slow_score_request()
            )

        t = threading.Thread(target=slow)
        t.start()
        deadline = time.monotonic() + 30
        while pool._idle.qsize() != 0 and time.monotonic() < deadline:  # the worker is taken
            time.sleep(0.01)
        time.sleep(0.2)  # the task is in the worker
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGKILL)
        t.join(60)
        status, headers, body = result["r"]
        assert 500 <= status < 600
        err = error_of((status, headers, body))
        assert "worker process died" in err["message"]
        assert metric(srv.port, "cassini_worker_restarts_total") == 1
        request = api.example("score")
        for _ in range(3):
            out = ok_json(call(srv.port, "POST", "/v1/score", request))
            assert out == json.loads(json.dumps(api.score_request(request)))
            assert_score(out)
        assert pool.pids() != [pid]
    finally:
        srv.stop()


def test_client_disconnecting_mid_body_leaves_the_service_well():
    srv = start(workers=1, quiet=True)
    try:
        port = srv.port
        before = metric(port, "cassini_http_requests_total", endpoint="/v1/advise", code="499")
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(
                    b"POST /v1/advise HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 100000\r\n\r\n" + b'{"links": [' * 10
                )
                time.sleep(0.05)
        deadline = time.monotonic() + 10
        while (
            metric(port, "cassini_http_requests_total", endpoint="/v1/advise", code="499")
            < before + 3
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert metric(port, "cassini_http_requests_total", endpoint="/v1/advise", code="499") == (
            before + 3
        )
        # the metrics request itself is the only one in flight
        assert metric(port, "cassini_http_requests_in_flight") == 1.0
        request = api.example("advise")
        assert call(port, "POST", "/v1/advise", request)[0] == 200
    finally:
        srv.stop()


# -- fuzzer ---------------------------------------------------------------------------------

PATHS = [
    "/v1/advise",
    "/v1/score",
    "/v1/jobs",
    "/v1/jobs/half",
    "/v1/jobs/half/time_shift",
    "/v1/jobs/%2F%2E%2E/time_shift",
    "/k8s/v1/prioritize",
    "/k8s/v1/filter",
    "/healthz",
    "/metrics",
    "/openapi.json",
    "/v1/advise?precision_deg=-1",
    "/v1/advise?aggregate=max&loops=",
    "/v1/score?precision_deg=90",
    "/k8s/v1/prioritize?x=1",
    "/v2",
    "/" + "a" * 300,
]

json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


def _mutate(doc, draw_value, path_choice):
    """Replace one value somewhere in ``doc`` (a JSON document) by ``draw_value``."""
    if not isinstance(doc, dict | list) or path_choice == 0:
        return draw_value
    keys = list(doc) if isinstance(doc, dict) else list(range(len(doc)))
    if not keys:
        return draw_value
    k = keys[path_choice % len(keys)]
    doc[k] = _mutate(doc[k], draw_value, path_choice // 3)
    return doc


VALID = [
    api.example("advise"),
    api.example("score"),
    {"id": "f", "model": "bert", "nodes": ["n1"]},
    {"shift_s": 0.01, "period_s": 0.1},
    {
        "Pod": {"metadata": {"name": "p", "annotations": {"cassini.io/model": "vgg16"}}},
        "NodeNames": ["n1", "n2", "n3"],
    },
]


@st.composite
def bodies(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return json.dumps(draw(json_value)).encode()
    doc = json.loads(json.dumps(draw(st.sampled_from(VALID))))
    doc = _mutate(doc, draw(json_value), draw(st.integers(0, 200)))
    text = json.dumps(doc)
    if kind == 3 and text:  # cut it short
        text = text[: draw(st.integers(0, len(text) - 1))]
    return text.encode()


ROUTED = [
    ("POST", "/v1/advise"),
    ("POST", "/v1/advise?precision_deg=-1"),
    ("POST", "/v1/advise?aggregate=max&loops="),
    ("POST", "/v1/score"),
    ("POST", "/v1/score?precision_deg=90"),
    ("POST", "/v1/jobs"),
    ("PUT", "/v1/jobs/half/time_shift"),
    ("GET", "/v1/jobs/%2F%2E%2E/time_shift"),
    ("POST", "/k8s/v1/prioritize"),
    ("POST", "/k8s/v1/filter"),
    ("POST", "/k8s/v1/prioritize?x=1"),
]
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "text/plain",
    None,
    "application/json; charset=latin-1",
]
any_route = st.tuples(
    st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
    st.sampled_from(PATHS),
)
requests_ = st.tuples(
    st.sampled_from(ROUTED) | any_route,  # mostly a method the path takes
    st.sampled_from(CONTENT_TYPES[:2]) | st.sampled_from(CONTENT_TYPES),
    bodies(),
)


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_fuzzed_requests_never_break_the_service(tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(two_node_cluster()))
    proc, port = serve_process(
        "--cluster", str(cluster), "--workers", "2", "--quiet", "--timeout-s", "5"
    )
    conn = [http.client.HTTPConnection("127.0.0.1", port, timeout=30)]
    seen: dict[int, int] = {}
    rss: list[int] = []
    count = [0]

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(requests_)
    def one(req):
        (method, path), content_type, body = req
        headers = {"Content-Type": content_type} if content_type else {}
        try:
            conn[0].request(
                method, path, body=body if method not in ("GET", "HEAD") else None, headers=headers
            )
            resp = conn[0].getresponse()
            status, raw, ctype = resp.status, resp.read(), resp.getheader("Content-Type", "")
        except (http.client.HTTPException, OSError):
            conn[0].close()  # the server closed the connection (allowed); a new one
            conn[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            status, raw, ctype = None, b"", ""
        if status is not None:
            seen[status] = seen.get(status, 0) + 1
            assert status != 500, raw
            assert b"Traceback" not in raw and b'File "' not in raw
            if status >= 400 and method != "HEAD":
                assert ctype == "application/json", (status, raw)
                assert json.loads(raw)["error"]["code"] == status
        count[0] += 1
        if count[0] == min(200, FUZZ_EXAMPLES // 5):
            rss.append(_rss_bytes(proc.pid))

    try:
        one()
        rss.append(_rss_bytes(proc.pid))
        assert proc.poll() is None, "the service died"
        assert call(port, "GET", "/healthz")[0] == 200
        # after warm-up, memory stays put (a leak per request would show over thousands)
        assert rss[-1] - rss[0] < 16 << 20, rss
        assert seen.get(400, 0) > 0 and sum(seen.values()) >= FUZZ_EXAMPLES * 0.9
        print(f"fuzz: {count[0]} requests, statuses {dict(sorted(seen.items()))}, RSS {rss}")
    finally:
        conn[0].close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)  # requests in flight (each under --timeout-s) finish first
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stderr.close()


def test_a_problem_too_large_to_compute_is_400_not_500():
    # found by the fuzzer: an absurd iteration time makes the unified period astronomical;
    # the request schema now bounds iteration times to a week, so it is a schema error
    # naming the field (it was a 400 naming the body from the worker's OverflowError)
    srv = start(workers=1, quiet=True, timeout_s=10)
    try:
        request = api.example("score")
        request["jobs"][1]["iteration_time_s"] = 916648213209816.0
        err = error_of(call(srv.port, "POST", "/v1/score?precision_deg=90", request))
        assert err["code"] == 400 and err["field"] == "jobs[1].iteration_time_s"
        assert "<= 604800" in err["message"], err
        assert call(srv.port, "GET", "/healthz")[0] == 200
    finally:
        srv.stop()


def test_body_sent_too_slowly_is_408_and_the_service_stays_up():
    srv = start(workers=1, quiet=True, read_timeout_s=0.5)
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(
                b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n{"
            )
            data = b""
            while chunk := s.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data and data.rstrip().endswith(b"}"):
                    break
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408")
        assert json.loads(body)["error"]["field"] == "body"
        assert call(srv.port, "GET", "/healthz")[0] == 200
    finally:
        srv.stop()
