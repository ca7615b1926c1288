#!/usr/bin/env bash
# The whole suite in two phases (make test runs this after setup and ruff):
#   1. every test that needs neither root nor a quiet host, spread over the cores
#      (pytest-xdist, one worker per core plus one unless TEST_WORKERS says otherwise);
#   2. the root/kernel tests (emulated networks, BPF) and the tests that assert wall-clock
#      times, one at a time with nothing else running: CPU load beside a testbed run is
#      noise in what it measures.  Phase 1 beside phase 2 at idle CPU and I/O priority
#      (chrt --idle, ionice -c 3) was tried (2026-11-28): 390 s for both instead of ~545,
#      but phase 2 ran 304 s instead of ~250 (the pair advice test 36 s against 16 s) and a
#      phase-1 test that follows a served shift starved and failed.  Not used.
# Extra arguments go to both phases (e.g. -x, -k NAME, a test path); a phase that selects
# no test (pytest's exit 5) is not a failure.  Exit status: the first phase's failure,
# else the second's.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
# Bytecode caches on for the run, even where the machine sets PYTHONDONTWRITEBYTECODE:
# without them every pytest process rewrote the asserts of all ~100 test modules again
# (~10 s of each one's collection) and every process the tests start compiled this
# repository's modules again.  The caches go to __pycache__ folders, which git ignores.
unset PYTHONDONTWRITEBYTECODE
# One worker more than the cores: the tests wait on servers and subprocesses.  In a warm
# tree phase 1 took 277 s with 3 workers against 298 s with 2 on this 2-core machine, but
# fresh clones took 299-307 s with 3 against 296 s with 2 (2026-11-28): no clear gain.
WORKERS=${TEST_WORKERS:-$(( $(nproc) + 1 ))}

status() { [ "$1" -eq 5 ] && echo 0 || echo "$1"; }

# Waits (at most 30 s) until both CPUs were under 25 % busy over one second, and says how
# busy they were: phase 1's last processes (servers, Ray, process pools) exiting are noise
# for phase 2's first testbed run.  /proc/stat's cpu line: user nice system idle iowait
# irq softirq steal.
settle() {
  local pct=100 a b c d e f g h a2 b2 c2 d2 e2 f2 g2 h2 busy idle
  for _ in $(seq 30); do
    read -r _ a b c d e f g h _ < /proc/stat
    sleep 1
    read -r _ a2 b2 c2 d2 e2 f2 g2 h2 _ < /proc/stat
    busy=$(( (a2 + b2 + c2 + f2 + g2 + h2) - (a + b + c + f + g + h) ))
    idle=$(( (d2 + e2) - (d + e) ))
    pct=$(( 100 * busy / (busy + idle + 1) ))
    [ "$pct" -lt 25 ] && break
  done
  echo "test: the CPUs were $pct % busy over the last second before phase 2"
}

echo "test: phase 1 of 2: not root, not timing, $WORKERS workers"
started=$SECONDS
"$PY" -m pytest -n "$WORKERS" --dist worksteal -m "not root and not timing" "$@"
first=$(status $?)
echo "test: phase 1 took $(( SECONDS - started )) s"
[ -r /proc/stat ] && settle
echo "test: phase 2 of 2: root and timing tests, one at a time"
started=$SECONDS
"$PY" -m pytest -p no:xdist -m "root or timing" "$@"
second=$(status $?)
echo "test: phase 2 took $(( SECONDS - started )) s"
[ "$first" -ne 0 ] && exit "$first"
exit "$second"
