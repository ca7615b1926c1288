"""``cassini serve --state``: the service always starts again on a state file it wrote.
A job registered by library model survives a restart; a job whose node left the cluster,
or a row that no longer reads, is kept, reported (``/healthz``, ``/metrics``, the log) and
answered ``shift: false`` with the reason; only a file that is not ours is refused."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.service_util import call, error_of, metric, ok_json, serve_process

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "deploy" / "cluster-example.yaml"


def stop(proc: subprocess.Popen, how: str = "kill") -> str:
    """Stop the server (``kill``: SIGKILL; ``term``: SIGTERM); its whole log."""
    proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
    proc.wait(20)
    rest = proc.stderr.read()
    proc.stderr.close()
    return "".join(proc.startup_log) + rest


def serve(cluster: Path, state: Path, *extra: str):
    return serve_process("--cluster", str(cluster), "--state", str(state), "--workers", "1",
                         *extra)


def test_a_job_registered_by_model_name_survives_a_restart(tmp_path):
    """The finding: the row held the model *and* its resolved phases, and the reader
    refused that, so the next start exited 2."""
    cluster = tmp_path / "cluster.yaml"
    shutil.copy(EXAMPLE, cluster)
    state = tmp_path / "s.db"
    body = {"id": "bert-a", "nodes": ["gpu-0-0", "gpu-1-1"], "model": "bert"}
    proc, port = serve(cluster, state, "--quiet")
    try:
        registered = ok_json(call(port, "POST", "/v1/jobs", body), 201)
        assert registered["model"] == "bert" and registered["phases"]
        before = {p: ok_json(call(port, "GET", p)) for p in
                  ("/v1/jobs", "/v1/jobs/bert-a", "/v1/jobs/bert-a/time_shift")}
    finally:
        stop(proc)
    for how in ("kill", "term"):
        proc, port = serve(cluster, state, "--quiet")
        try:
            for path, answer in before.items():
                assert ok_json(call(port, "GET", path)) == answer, path
        finally:
            stop(proc, how)


def _without_node(cluster: dict, node: str) -> dict:
    out = dict(cluster)
    out["nodes"] = {n: links for n, links in cluster["nodes"].items() if n != node}
    out["jobs"] = [j for j in cluster.get("jobs", []) if node not in j["nodes"]]
    return out


def test_a_job_whose_node_left_is_kept_reported_and_runs_free(tmp_path):
    original = yaml.safe_load(EXAMPLE.read_text())
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(original))
    state = tmp_path / "s.db"
    proc, port = serve(cluster, state, "--quiet")
    try:
        ok_json(call(port, "POST", "/v1/jobs",
                     {"id": "bert-a", "nodes": ["gpu-0-0", "gpu-1-1"], "model": "bert"}), 201)
        put = {"shift_s": 0.01, "period_s": 0.2}
        held = ok_json(call(port, "PUT", "/v1/jobs/bert-a/time_shift", put))
        assert held["shift"] is True
        jobs = ok_json(call(port, "GET", "/v1/jobs"))
    finally:
        stop(proc)
    cluster.write_text(yaml.safe_dump(_without_node(original, "gpu-1-1")))
    proc, port = serve(cluster, state)  # not quiet: the log names the job
    try:
        health = ok_json(call(port, "GET", "/healthz"))
        assert health["status"] == "ok"
        assert health["unusable_jobs"] == [
            {"id": "bert-a", "reason": "node gpu-1-1 no longer in the cluster"}
        ]
        assert metric(port, "cassini_jobs_unusable") == 1.0
        listed = ok_json(call(port, "GET", "/v1/jobs"))
        assert [j for j in listed["jobs"] if j["id"] == "bert-a"] == [
            j for j in jobs["jobs"] if j["id"] == "bert-a"
        ]  # never dropped
        shift = ok_json(call(port, "GET", "/v1/jobs/bert-a/time_shift"))
        assert shift["shift"] is False
        assert "gpu-1-1 no longer in the cluster" in shift["reason"]
    finally:
        log = stop(proc)
    assert "job bert-a: kept in the state file, not used: node gpu-1-1" in log
    with sqlite3.connect(state) as db:  # still in the file, with its explicit shift
        assert [r[0] for r in db.execute("SELECT id FROM jobs")] == ["bert-a"]
        assert [r[0] for r in db.execute("SELECT job_id FROM shifts")] == ["bert-a"]
    cluster.write_text(yaml.safe_dump(original))  # the node is back: so is the job's shift
    proc, port = serve(cluster, state, "--quiet")
    try:
        assert ok_json(call(port, "GET", "/healthz"))["unusable_jobs"] == []
        assert ok_json(call(port, "GET", "/v1/jobs/bert-a/time_shift")) == held
    finally:
        stop(proc)


def test_a_row_that_no_longer_reads_is_kept_reported_and_removable(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    shutil.copy(EXAMPLE, cluster)
    state = tmp_path / "s.db"
    proc, port = serve(cluster, state, "--quiet")
    stop(proc)  # made the file
    row = {"id": "odd", "nodes": ["gpu-0-0"], "iteration_time_s": 0.25, "phases": "?"}
    with sqlite3.connect(state) as db:
        db.execute("INSERT INTO jobs (id, body) VALUES (?, ?)", ("odd", json.dumps(row)))
    proc, port = serve(cluster, state, "--quiet")
    try:
        (entry,) = ok_json(call(port, "GET", "/healthz"))["unusable_jobs"]
        assert entry["id"] == "odd" and "stored row unreadable: phases" in entry["reason"]
        shift = ok_json(call(port, "GET", "/v1/jobs/odd/time_shift"))
        assert shift["shift"] is False and shift["period_s"] == 0.25
        assert "stored row unreadable" in shift["reason"]
        removed = ok_json(call(port, "DELETE", "/v1/jobs/odd"))
        assert removed == {"id": "odd", "nodes": [], "iteration_time_s": 0.25, "phases": []}
        assert ok_json(call(port, "GET", "/healthz"))["unusable_jobs"] == []
    finally:
        stop(proc)
    with sqlite3.connect(state) as db:
        assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0


def store_legacy_row(state, job_id: str) -> dict:
    """A job row written straight into the state file, as a server before today's id
    rules could have stored it; returns the row."""
    row = {"id": job_id, "nodes": ["gpu-0-0"], "iteration_time_s": 0.25,
           "phases": [{"start_s": 0.0, "duration_s": 0.1, "rate_bps": 1e9}]}  # fmt: skip
    with sqlite3.connect(state) as db:
        db.execute("INSERT INTO jobs (id, body) VALUES (?, ?)", (row["id"], json.dumps(row)))
    return row


def test_a_stored_job_named_like_a_time_shift_path_still_reads(tmp_path):
    """New jobs may not end in /time_shift (their path would be another job's time-shift);
    a row stored before that rule is read and used as before, not dropped."""
    cluster = tmp_path / "cluster.yaml"
    shutil.copy(EXAMPLE, cluster)
    state = tmp_path / "s.db"
    proc, port = serve(cluster, state, "--quiet")
    try:
        refused = error_of(call(port, "POST", "/v1/jobs", {"id": "a/time_shift",
                                                           "model": "bert", "nodes": []}))
        assert refused["code"] == 400 and refused["field"] == "id", refused
    finally:
        stop(proc)
    row = store_legacy_row(state, "old/time_shift")
    proc, port = serve(cluster, state, "--quiet")
    try:
        assert ok_json(call(port, "GET", "/healthz"))["unusable_jobs"] == []
        assert row["id"] in [j["id"] for j in ok_json(call(port, "GET", "/v1/jobs"))["jobs"]]
    finally:
        stop(proc)


def test_a_stored_job_id_with_a_newline_still_reads_and_is_named_exactly(tmp_path):
    """New ids may not hold control characters (a path ending in %0A named the job
    without it); a row stored before that rule is read, and its own path names it."""
    cluster = tmp_path / "cluster.yaml"
    shutil.copy(EXAMPLE, cluster)
    state = tmp_path / "s.db"
    proc, port = serve(cluster, state, "--quiet")
    stop(proc)  # made the file
    store_legacy_row(state, "bert-b\n")
    proc, port = serve(cluster, state, "--quiet")
    try:
        assert ok_json(call(port, "GET", "/healthz"))["unusable_jobs"] == []
        assert ok_json(call(port, "DELETE", "/v1/jobs/bert-b%0A"))["id"] == "bert-b\n"
        assert ok_json(call(port, "GET", "/v1/jobs/bert-b"))["id"] == "bert-b"  # the file's
    finally:
        stop(proc)


def refused_state_line(state) -> str:
    """``cassini serve --state STATE`` exits 2 with one line: that line."""
    r = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--insecure-writes",
         "--state", str(state)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize("value", ["soon", "nan", "-1"])
def test_a_state_file_whose_epoch_is_not_a_number_exits_2(tmp_path, value):
    """It was a ValueError traceback and exit 1."""
    state = tmp_path / "s.db"
    proc, _ = serve(EXAMPLE, state, "--quiet")
    stop(proc)  # made the file
    with sqlite3.connect(state) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'epoch_s'", (value,))
    line = refused_state_line(state)
    assert str(state) in line and "meta.epoch_s" in line and repr(value) in line


@pytest.mark.parametrize("version", [0, 1])
def test_a_database_of_another_program_exits_2_and_is_left_alone(tmp_path, version):
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        db.execute(f"PRAGMA user_version = {version}")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    line = refused_state_line(path)
    assert str(path) in line and "not a cassini state file" in line and "invoices" in line
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
