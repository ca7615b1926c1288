"""Helpers for the ``cassini serve`` tests: real HTTP on a free loopback port."""

from __future__ import annotations

import atexit
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import cache
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cassini.service.app import ServiceConfig
from cassini.service.cli import ServiceThread

HALF = [{"start_s": 0.0, "duration_s": 0.05, "rate_bps": 1e9}]  # half of a 100 ms iteration
MOST = [{"start_s": 0.0, "duration_s": 0.09, "rate_bps": 1e9}]  # 90 % of it


def start(**kwargs: Any) -> ServiceThread:
    log = kwargs.pop("log", None)
    kwargs.setdefault("insecure_writes", True)  # these tests are not about who may write
    return ServiceThread(ServiceConfig(**kwargs), log=log).start()


def call(port, method, path, body=None, headers=None, content_type="application/json"):
    """(status, headers, body bytes) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        hdrs = dict(headers or {})
        if body is not None:
            if not isinstance(body, bytes):
                body = json.dumps(body).encode()
            if content_type:
                hdrs.setdefault("Content-Type", content_type)
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def ok_json(result, status=200):
    code, headers, body = result
    assert code == status, body
    assert headers["Content-Type"] == "application/json"
    return json.loads(body)


def error_of(result):
    status, headers, body = result
    assert headers["Content-Type"] == "application/json", body
    err = json.loads(body)["error"]
    assert err["code"] == status and err["message"]
    assert "Traceback" not in err["message"]
    return err


def metric(port, name, **labels):
    """Value of one sample in the server's /metrics (0.0 if absent)."""
    status, headers, body = call(port, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def pair(node: str) -> list[str]:
    """The two nodes under ``node``'s link in :func:`two_node_cluster` (``n1`` and ``n1b``
    send through ``l1``): a job on them crosses that link alone.  A job on one node crosses
    no link (it sends nothing over the network), so a job meant to load a link runs on
    both."""
    return [node, f"{node}b"]


def two_node_cluster(**extra: Any) -> dict[str, Any]:
    """Nodes n1 (link l1, where job ``half`` runs) and n2 (link l2, where ``most`` runs),
    plus n3 (link l3, idle); every link 1 Gb/s.  Each has a twin under its link (n1b, n2b,
    n3b, :func:`pair`), the second node of the jobs there."""
    cluster = {
        "links": [{"id": f"l{i}", "capacity_bps": 1e9} for i in (1, 2, 3)],
        "nodes": {n: [f"l{i}"] for i in (1, 2, 3) for n in pair(f"n{i}")},
        "jobs": [
            {"id": "half", "iteration_time_s": 0.1, "phases": HALF, "nodes": pair("n1")},
            {"id": "most", "iteration_time_s": 0.1, "phases": MOST, "nodes": pair("n2")},
        ],
    }
    cluster.update(extra)
    return cluster


@cache
def server_tmp() -> str:
    """A temporary folder for the servers this test process starts, removed when it exits:
    a server stopped by SIGKILL (the crash tests) cannot remove its forkserver's
    ``pymp-*`` folder, which would otherwise be left in /tmp."""
    path = tempfile.mkdtemp(prefix="cassini-test-servers-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def serve_process(*args: str) -> tuple[subprocess.Popen, int]:
    """``cassini serve --port 0 ARGS`` in a subprocess; (process, port) once it listens.
    Without ``--state``, state in memory; without ``--token-file``, open writes.  The
    lines it logged before listening are kept in ``process.startup_log``."""
    extra = [] if "--state" in args else ["--state", ":memory:"]
    if "--token-file" not in args and "--insecure-writes" not in args:
        extra.append("--insecure-writes")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", *extra, *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": server_tmp()},
    )
    deadline = time.monotonic() + 60
    proc.startup_log = []  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        proc.startup_log.append(line)  # type: ignore[attr-defined]
        if "listening on http://127.0.0.1:" in line:
            return proc, int(line.split("127.0.0.1:")[1].split()[0])
    proc.kill()
    raise AssertionError(f"cassini serve did not start: {proc.stderr.read()}")
