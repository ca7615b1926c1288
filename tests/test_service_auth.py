"""Who may write to ``cassini serve``: bearer tokens from --token-file, writes refused
without one unless --insecure-writes, the per-client write rate and --max-jobs (429),
the audit log and its counters; tokens never in a log."""

from __future__ import annotations

import json
import signal

import pytest
from helpers.service_util import HALF, call, error_of, metric, ok_json, serve_process, start

from cassini.errors import InputError
from cassini.service.auth import RateLimiter, read_token_file

TOKEN_A = "token-of-the-scheduler-0123456789"
TOKEN_B = "token-of-the-operator-9876543210"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def job(job_id: str) -> dict:
    return {"id": job_id, "iteration_time_s": 0.1, "phases": HALF}


@pytest.fixture
def secured(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN_A} scheduler\n\n# ops\n{TOKEN_B} operator\n")
    audit = tmp_path / "audit.jsonl"
    lines: list[str] = []
    srv = start(token_file=str(tokens), audit_log=str(audit), workers=1, max_jobs=3,
                write_rate_per_s=2.0, log=lines.append)
    try:
        yield srv, audit, lines
    finally:
        srv.stop()


def test_writes_need_a_known_bearer_token(secured):
    srv, audit, lines = secured
    for headers in ({}, bearer("wrong-token-wrong-token-wrong"), {"Authorization": TOKEN_A}):
        status, hdrs, body = call(srv.port, "POST", "/v1/jobs", job("x"), headers=headers)
        assert status == 401 and hdrs["WWW-Authenticate"].startswith("Bearer")
        assert error_of((status, hdrs, body))["field"] == "Authorization"
    assert call(srv.port, "GET", "/v1/jobs/x")[0] == 404  # nothing was written
    ok_json(call(srv.port, "POST", "/v1/jobs", job("x"), headers=bearer(TOKEN_A)), 201)
    put = {"shift_s": 0.01, "period_s": 0.1}
    assert call(srv.port, "PUT", "/v1/jobs/x/time_shift", put)[0] == 401
    ok_json(call(srv.port, "PUT", "/v1/jobs/x/time_shift", put, headers=bearer(TOKEN_B)))
    assert call(srv.port, "DELETE", "/v1/jobs/x")[0] == 401
    # reads a training job needs stay open
    assert ok_json(call(srv.port, "GET", "/v1/jobs/x/time_shift"))["shift_s"] == 0.01
    assert call(srv.port, "GET", "/healthz")[0] == 200
    assert call(srv.port, "GET", "/openapi.json")[0] == 200
    prio = {"Pod": {"metadata": {"annotations": {"cassini.io/model": "bert"}}}, "NodeNames": []}
    assert call(srv.port, "POST", "/k8s/v1/prioritize", prio)[0] == 200
    ok_json(call(srv.port, "DELETE", "/v1/jobs/x", headers=bearer(TOKEN_B)))

    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    # a refused POST's body is not read: its job is not known
    assert [(e["method"], e["token"], e["outcome"], e["status"], e["job"]) for e in entries] == [
        ("POST", None, "refused", 401, None),
        ("POST", None, "refused", 401, None),
        ("POST", None, "refused", 401, None),
        ("POST", "scheduler", "accepted", 201, "x"),
        ("PUT", None, "refused", 401, "x"),
        ("PUT", "operator", "accepted", 200, "x"),
        ("DELETE", None, "refused", 401, "x"),
        ("DELETE", "operator", "accepted", 200, "x"),
    ]
    assert all(e["client"] == "127.0.0.1" and e["time"].endswith("Z") for e in entries)
    assert metric(srv.port, "cassini_writes_total", outcome="refused", code="401") == 5
    assert metric(srv.port, "cassini_writes_total", outcome="accepted", code="201") == 1
    assert metric(srv.port, "cassini_http_requests_rejected_total", reason="unauthenticated") == 5
    everything = audit.read_text() + "\n".join(lines)
    assert TOKEN_A not in everything and TOKEN_B not in everything


def test_write_rate_and_max_jobs_answer_429_json(secured):
    srv, _, _ = secured
    auth = bearer(TOKEN_A)
    # burst of 2 * 2/s = 4 writes, then 429 with Retry-After
    statuses = [call(srv.port, "POST", "/v1/jobs", job(f"r{i}"), headers=auth)[0]
                for i in range(3)]
    assert statuses == [201, 201, 201]
    status, headers, body = call(srv.port, "POST", "/v1/jobs", job("r3"), headers=auth)
    assert status == 429, body  # 4th write: the registry holds --max-jobs 3
    assert error_of((status, headers, body))["field"] == "id"
    status, headers, body = call(srv.port, "POST", "/v1/jobs", job("r0"), headers=auth)
    assert status == 429 and int(headers["Retry-After"]) >= 1  # 5th: over the rate
    assert "write rate" in error_of((status, headers, body))["message"]
    # another token has its own budget; replacing a job is not a new one
    ok_json(call(srv.port, "POST", "/v1/jobs", job("r0"), headers=bearer(TOKEN_B)), 200)
    assert metric(srv.port, "cassini_http_requests_rejected_total", reason="rate_limited") == 1
    assert metric(srv.port, "cassini_http_requests_rejected_total", reason="too_many_jobs") == 1


def test_a_write_over_the_rate_is_audited_with_its_token(secured):
    """The 429 was raised before the token's name reached the request's record: the
    audit said "token": null for a valid token."""
    srv, audit, _ = secured
    auth = bearer(TOKEN_A)
    statuses = [call(srv.port, "DELETE", "/v1/jobs/ghost", headers=auth)[0] for _ in range(5)]
    assert statuses[:4] == [404] * 4 and statuses[4] == 429, statuses
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(e["token"], e["status"]) for e in entries] == [("scheduler", 404)] * 4 + [
        ("scheduler", 429)
    ]


def test_rate_limiter_refills_at_its_rate():
    now = [0.0]
    limiter = RateLimiter(2.0, 4.0, clock=lambda: now[0])
    assert [limiter.take("c") for _ in range(4)] == [0.0] * 4
    assert limiter.take("c") == pytest.approx(0.5)
    assert limiter.take("other") == 0.0
    now[0] = 0.5
    assert limiter.take("c") == 0.0 and limiter.take("c") > 0
    assert RateLimiter(0.0, 1.0).take("c") == 0.0  # 0: no limit


def test_token_file_errors_name_the_line_not_the_token(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN_A} a\nabc123 b\n")
    with pytest.raises(InputError, match="line 2") as e:
        read_token_file(path)
    assert "abc123" not in str(e.value)
    path.write_text(f"{TOKEN_A} a\n{TOKEN_B} a\n")
    with pytest.raises(InputError, match="given twice"):
        read_token_file(path)
    path.write_text("# nothing\n")
    with pytest.raises(InputError, match="no token"):
        read_token_file(path)


def _start_lines(*args: str) -> str:
    proc, port = serve_process(*args)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        return proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()


def test_without_a_token_file_writes_are_refused_and_the_service_says_so(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN_A} a\n")
    srv = start(insecure_writes=False, workers=1, quiet=True)
    try:
        status, headers, body = call(srv.port, "POST", "/v1/jobs", job("x"))
        assert status == 403 and error_of((status, headers, body))["message"].startswith(
            "writes are disabled")
        assert call(srv.port, "GET", "/v1/jobs")[0] == 200
    finally:
        srv.stop()
    proc, port = serve_process("--token-file", str(tokens), "--workers", "1")
    try:
        assert call(port, "POST", "/v1/jobs", job("x"))[0] == 401
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    # what each mode says at start (serve_process adds --state :memory:)
    assert "writes OPEN TO ANYONE" in _start_lines("--insecure-writes", "--workers", "1")
    assert "writes need a bearer token (1 in" in _start_lines(
        "--token-file", str(tokens), "--workers", "1")


def test_a_bad_token_file_exits_2_naming_the_file_and_line(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN_A} a\nabc123 b\n")
    r = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--state", ":memory:",
         "--token-file", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"cassini: error: --token-file {path}") and "line 2" in line
    assert "abc123" not in line and TOKEN_A not in line
