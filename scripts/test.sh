#!/usr/bin/env bash
# The whole suite in two phases (make test runs this after setup and ruff):
#   1. every test that needs neither root nor a quiet host, spread over the cores
#      (pytest-xdist, one worker per core unless TEST_WORKERS says otherwise);
#   2. the root/kernel tests (emulated networks, BPF) and the tests that assert wall-clock
#      times, one at a time with nothing else running: CPU load beside a testbed run is
#      noise in what it measures.
# Extra arguments go to both phases (e.g. -x, -k NAME, a test path); a phase that selects
# no test (pytest's exit 5) is not a failure.  Exit status: the first phase's failure,
# else the second's.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

status() { [ "$1" -eq 5 ] && echo 0 || echo "$1"; }

echo "test: phase 1 of 2: not root, not timing, ${TEST_WORKERS:-auto} workers"
"$PY" -m pytest -n "${TEST_WORKERS:-auto}" --dist worksteal -m "not root and not timing" "$@"
first=$(status $?)
echo "test: phase 2 of 2: root and timing tests, one at a time"
"$PY" -m pytest -p no:xdist -m "root or timing" "$@"
second=$(status $?)
[ "$first" -ne 0 ] && exit "$first"
exit "$second"
