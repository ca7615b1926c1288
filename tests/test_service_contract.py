"""The HTTP contract: schemathesis against a live ``cassini serve`` (loopback, a writer
token), every operation of its ``/openapi.json`` through the examples, coverage, fuzzing
and stateful phases with the conformance checks; any mismatch between the document and
the server fails the test.  docs/testing.md says how to run it longer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import pytest
from conftest import require_module
from helpers.service_util import HALF, serve_process

#: Fixed seed and cases per operation and phase (about 1 200 requests, 30-60 s here);
#: CASSINI_CONTRACT_EXAMPLES / CASSINI_CONTRACT_SEED run it longer or elsewhere.
MAX_EXAMPLES = int(os.environ.get("CASSINI_CONTRACT_EXAMPLES", "30"))
SEED = int(os.environ.get("CASSINI_CONTRACT_SEED", "1"))
#: Limit of the schemathesis run, seconds: room for slower machines at the default count,
#: and more for a longer run.
RUN_LIMIT_S = max(600, 6 * MAX_EXAMPLES)
TOKEN = "contract-test-token-0123456789abcdef"
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "positive_data_acceptance",
    "negative_data_rejection",
)
PHASES = ("examples", "coverage", "fuzzing", "stateful")
#: 422: the body follows the schema but breaks a rule it states in words (a phase longer
#: than its iteration, an unknown node or model): valid data by the schema, refused by
#: the domain, and said so.  503/504: the documented answers of a computation past
#: --timeout-s (the coverage phase asks for the finest precision on the largest example);
#: a 500 still fails.
CONFIG = """\
[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "503", "504"]
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "304", "404", "422", "503", "504"]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contract")
    cluster = tmp / "cluster.json"
    cluster.write_text(json.dumps({
        "links": [{"id": "l1", "capacity_bps": 1e9}, {"id": "l2", "capacity_bps": 1e9}],
        "nodes": {"n1": ["l1"], "n2": ["l2"]},
        "jobs": [{"id": "half", "iteration_time_s": 0.1, "phases": HALF, "nodes": ["n1"]}],
    }))
    tokens = tmp / "tokens"
    tokens.write_text(f"{TOKEN} schemathesis\n")
    proc, port = serve_process(
        "--cluster", str(cluster), "--token-file", str(tokens), "--workers", "1", "--quiet",
        "--write-rate", "0", "--timeout-s", "5", "--audit-log", str(tmp / "audit.log"),
    )
    # keep reading its standard error: a full pipe would block the server mid-run
    log = tmp / "server.log"
    drain = threading.Thread(target=_copy_lines, args=(proc.stderr, log), daemon=True)
    drain.start()
    try:
        yield port, tmp
    finally:
        proc.terminate()  # requests in flight finish first, each under --timeout-s
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            drain.join(timeout=10)


def _copy_lines(stream, path) -> None:
    with open(path, "a", encoding="utf-8") as out:
        for line in stream:
            out.write(line)


def schemathesis_run(port: int, workdir, *extra: str) -> subprocess.CompletedProcess:
    """``st run`` on the server's document; its output and exit status."""
    config = workdir / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
        f"http://127.0.0.1:{port}/openapi.json",
        "--phases", ",".join(PHASES),
        "--checks", ",".join(CHECKS),
        "--seed", str(SEED),
        "--max-examples", str(MAX_EXAMPLES),
        "--workers", "1",
        "--request-timeout", "20",
        "--header", f"Authorization: Bearer {TOKEN}",
        *extra,
    ]
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=RUN_LIMIT_S)


@pytest.mark.slow
@pytest.mark.timeout(RUN_LIMIT_S + 120)
def test_the_server_keeps_its_openapi_contract(server):
    require_module("schemathesis")
    port, workdir = server
    run = schemathesis_run(port, workdir)
    out = run.stdout + run.stderr
    failures = out[out.find("FAILURES"):] if "FAILURES" in out else out[-6000:]
    assert run.returncode == 0, f"schemathesis found contract mismatches:\n{failures}"
    # every phase ran (none skipped as a whole) and the run generated real cases
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅\s+{phase}\b", out), f"phase {phase} did not pass:\n{out[-3000:]}"
    generated = re.search(r"(\d+) generated, (\d+) passed", out)
    assert generated, out[-3000:]
    assert int(generated.group(1)) == int(generated.group(2)) >= 10 * MAX_EXAMPLES
    links = re.search(r"API Links:\s+(\d+) covered", out)
    assert links and int(links.group(1)) > 0, "the stateful phase followed no link"
