"""``cassini serve --state``: what was acknowledged survives ``kill -9`` (real server
processes, real HTTP on loopback), the epoch is kept, and a file the service cannot use
is refused with exit status 2 and left as it was."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from helpers.service_util import HALF, call, ok_json, pair, serve_process, two_node_cluster

from cassini.service.store import SCHEMA_VERSION

TOKEN = "s3cret-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"# writers\n{TOKEN} scheduler\n")
    return str(path)


def kill9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stderr.close()


def job(job_id: str, nodes: list[str] | None = None) -> dict:
    return {"id": job_id, "iteration_time_s": 0.1, "phases": HALF, "nodes": nodes or []}


def test_acknowledged_writes_and_the_epoch_survive_kill_9(tmp_path, token_file):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(two_node_cluster()))  # no epoch_s: the state file keeps one
    state = str(tmp_path / "state.sqlite")
    args = ("--state", state, "--token-file", token_file, "--cluster", str(cluster),
            "--workers", "1", "--quiet")
    proc, port = serve_process(*args)
    try:
        ok_json(call(port, "POST", "/v1/jobs", job("a", pair("n1")), headers=AUTH), 201)
        ok_json(call(port, "POST", "/v1/jobs", job("b", pair("n3")), headers=AUTH), 201)
        ok_json(call(port, "POST", "/v1/jobs", job("c", pair("n3")), headers=AUTH), 201)
        released = ok_json(call(port, "PUT", "/v1/jobs/c/time_shift",
                                {"shift": False, "reason": "drained"}, headers=AUTH))
        put = {"shift_s": 0.02, "period_s": 0.1}
        set_b = ok_json(call(port, "PUT", "/v1/jobs/b/time_shift", put, headers=AUTH))
        ok_json(call(port, "DELETE", "/v1/jobs/most", headers=AUTH))  # a file job: comes back
        computed = ok_json(call(port, "GET", "/v1/jobs/a/time_shift"))
        assert computed["shift"] is True  # shares l1 with "half"
        jobs_before = ok_json(call(port, "GET", "/v1/jobs"))["jobs"]
    finally:
        kill9(proc)
    time.sleep(1.0)  # a later start time: an epoch taken from it would differ
    proc, port = serve_process(*args)
    try:
        jobs_after = ok_json(call(port, "GET", "/v1/jobs"))["jobs"]
        ids = [j["id"] for j in jobs_after]
        assert ids == ["a", "b", "c", "half", "most"]  # the cluster file's "most" is back
        assert [j for j in jobs_after if j["id"] != "most"] == jobs_before
        assert ok_json(call(port, "GET", "/v1/jobs/b/time_shift")) == set_b
        assert ok_json(call(port, "GET", "/v1/jobs/c/time_shift")) == released
        assert released["shift"] is False and released["reason"] == "drained"
        assert ok_json(call(port, "GET", "/v1/jobs/a/time_shift")) == computed
        assert computed["epoch_s"] == set_b["epoch_s"]
    finally:
        kill9(proc)
    with sqlite3.connect(state) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _writer(port: int, i: int, stop: threading.Event, acked: list, sent: list) -> None:
    """POST a new job, then PUT its shift, until ``stop``; records what was answered 2xx
    and the last request sent (which may be in flight when the server dies)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    k = 0
    try:
        while not stop.is_set():
            jid = f"w{i}-{k}"
            shift = {"shift_s": round(0.001 * (k % 90), 3), "period_s": 0.1}
            for method, path, body in (
                ("POST", "/v1/jobs", job(jid)),
                ("PUT", f"/v1/jobs/{jid}/time_shift", shift),
            ):
                sent.append((method, jid, body))
                conn.request(method, path, json.dumps(body),
                             {**AUTH, "Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if 200 <= resp.status < 300:
                    acked.append((method, jid, body))
                else:
                    raise AssertionError(f"{method} {path}: {resp.status}")
            k += 1
    except (OSError, http.client.HTTPException):
        return  # the server was killed
    finally:
        conn.close()


@pytest.mark.slow
def test_kill_9_under_8_writers_keeps_exactly_the_answered_writes(tmp_path, token_file):
    state = str(tmp_path / "state.sqlite")
    args = ("--state", state, "--token-file", token_file, "--workers", "1", "--quiet",
            "--write-rate", "0")
    proc, port = serve_process(*args)
    stop = threading.Event()
    acked: list[list] = [[] for _ in range(8)]
    sent: list[list] = [[] for _ in range(8)]
    threads = [
        threading.Thread(target=_writer, args=(port, i, stop, acked[i], sent[i]))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    time.sleep(10.0)
    proc.send_signal(signal.SIGKILL)  # while they write
    proc.wait(10)
    proc.stderr.close()
    stop.set()
    for t in threads:
        t.join(20)
    assert sum(map(len, acked)) > 100, "the writers hardly wrote"
    with sqlite3.connect(state) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        jobs = {j: json.loads(b) for j, b in db.execute("SELECT id, body FROM jobs")}
        shifts = {
            j: (s, p) for j, s, p in db.execute("SELECT job_id, shift_s, period_s FROM shifts")
        }
    for i in range(8):
        # at most the last request sent was in flight: committed or not, unanswered
        in_flight = sent[i][len(acked[i]):]
        assert len(in_flight) <= 1
        for method, jid, body in acked[i]:
            if method == "POST":
                assert jobs[jid]["iteration_time_s"] == body["iteration_time_s"]
                assert jobs[jid]["phases"] == body["phases"]
            else:
                assert shifts[jid] == (body["shift_s"], body["period_s"])
        mine = {j for j in jobs if j.startswith(f"w{i}-")}
        answered_jobs = {jid for m, jid, _ in acked[i] if m == "POST"}
        assert mine - answered_jobs <= {jid for m, jid, _ in in_flight if m == "POST"}
        mine_shifts = {j for j in shifts if j.startswith(f"w{i}-")}
        answered_shifts = {jid for m, jid, _ in acked[i] if m == "PUT"}
        assert mine_shifts - answered_shifts <= {jid for m, jid, _ in in_flight if m == "PUT"}
    # and the service opens it again, with every job in it
    proc, port = serve_process(*args)
    try:
        assert len(ok_json(call(port, "GET", "/v1/jobs"))["jobs"]) == len(jobs)
    finally:
        kill9(proc)


def _serve_exit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--insecure-writes",
         *args],
        capture_output=True, text=True, timeout=60,
    )


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_that_is_not_a_database_exits_2_and_is_left_alone(tmp_path):
    path = tmp_path / "state.sqlite"
    path.write_bytes(os.urandom(8192))
    before = _digest(path)
    r = _serve_exit("--state", str(path))
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("cassini: error: --state") and str(path) in line
    assert "not a usable SQLite database" in line
    assert _digest(path) == before


def test_a_damaged_database_exits_2_and_is_left_alone(tmp_path):
    path = tmp_path / "state.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE filler (x TEXT)")
        db.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,)] * 200)
    data = bytearray(path.read_bytes())
    data[4096: 4096 + 12] = b"\x63" + b"\xff" * 11  # the second page's b-tree header
    path.write_bytes(bytes(data))
    before = _digest(path)
    r = _serve_exit("--state", str(path))
    assert r.returncode == 2, r.stderr
    assert str(path) in r.stderr and "cassini: error: --state" in r.stderr
    assert _digest(path) == before


def test_a_newer_schema_exits_2_and_is_left_alone(tmp_path):
    path = tmp_path / "state.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = _digest(path)
    r = _serve_exit("--state", str(path))
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert str(path) in line and f"schema version {SCHEMA_VERSION + 1} is newer" in line
    assert _digest(path) == before


def test_an_older_schema_is_migrated(tmp_path):
    path = tmp_path / "state.sqlite"
    sqlite3.connect(path).close()  # version 0: an empty database
    proc, port = serve_process("--state", str(path), "--workers", "1", "--quiet")
    try:
        ok_json(call(port, "POST", "/v1/jobs", job("m")), 201)
    finally:
        kill9(proc)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert [r[0] for r in db.execute("SELECT id FROM jobs")] == ["m"]


def test_a_state_file_in_a_missing_folder_makes_the_folder(tmp_path):
    """``--state`` makes its file's parent folders (its --help says so)."""
    path = tmp_path / "not" / "yet" / "state.sqlite"
    proc, port = serve_process("--state", str(path), "--workers", "1", "--quiet")
    try:
        ok_json(call(port, "POST", "/v1/jobs", job("kept")), 201)
    finally:
        kill9(proc)
    with sqlite3.connect(path) as db:
        assert [r[0] for r in db.execute("SELECT id FROM jobs")] == ["kept"]


def test_memory_state_forgets_on_restart():
    proc, port = serve_process("--state", ":memory:", "--workers", "1", "--quiet")
    try:
        ok_json(call(port, "POST", "/v1/jobs", job("gone")), 201)
    finally:
        kill9(proc)
    proc, port = serve_process("--state", ":memory:", "--workers", "1", "--quiet")
    try:
        assert ok_json(call(port, "GET", "/v1/jobs"))["jobs"] == []
    finally:
        kill9(proc)


def test_a_state_file_in_use_by_another_process_is_refused(tmp_path):
    """One file, one process (docs/service.md): a second service on the same --state file
    would keep a registry the first never reads, so it is refused with one line; once the
    first lets go, the file opens again."""
    import textwrap

    from cassini.service.store import StateError, Store

    path = tmp_path / "state.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from cassini.service.store import Store
            s = Store({str(path)!r}, default_epoch_s=1.0)
            print("open", flush=True)
            sys.stdin.readline()
            s.close()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(StateError, match="in use by another cassini serve"):
            Store(str(path), default_epoch_s=2.0)
    finally:
        holder.communicate("\n", timeout=30)
    store = Store(str(path), default_epoch_s=2.0)
    try:
        assert store.epoch_s == 1.0  # the file the first process made, read back
    finally:
        store.close()
