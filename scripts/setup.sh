#!/usr/bin/env bash
# Idempotent setup: Debian packages, a .venv that can import Debian's mininet module,
# and an editable install of the project with its dev extras.  A second run takes seconds.
# chromium: headless, for the browser test of the simulator's report.html.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(mininet bridge-utils clang llvm libbpf-dev bpftool iperf3 iputils-ping tcpdump iproute2 ethtool chromium)
PYTHON=${PYTHON:-python3}

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
      echo "setup: installing Debian packages: ${missing[*]}"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
      echo "setup: WARNING: not root, cannot install Debian packages: ${missing[*]}" >&2
      echo "setup: the placement advisor works without them; testbed and MLTCP tests will not." >&2
    fi
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
  # a current pip: it installs the extras below in ~47 s where Python 3.11's bundled pip
  # 23.2 took ~78 s (the same packages; measured twice each on 2026-11-28)
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 \
    | grep -v "is neither a file nor a directory" || true
fi

# Debian's mininet is a pure-Python package in the system dist-packages; expose only it
# (not the rest of Debian's Python packages) to the venv through a symlink.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d /usr/lib/python3/dist-packages/mininet ] && [ ! -e "$site/mininet" ]; then
  ln -s /usr/lib/python3/dist-packages/mininet "$site/mininet"
fi

stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$0" -nt "$stamp" ]; then
  echo "setup: installing the project (editable) with the dev, testbed, sim, ray, kube and packet extras"
  # In two steps, so that the numba warm-up (below) overlaps the second: first the project
  # with the [sim] extra, what the warm-up needs (~12 s); then the other extras' packages
  # (~35 s), held by a constraints file to the versions the first step installed.
  # --no-compile: pip compiles every file of every package one at a time (~75 s of a fresh
  # ~150 s install on a 2-core host), and compiling all of site-packages in parallel
  # afterwards still took 73 CPU seconds; the import check below compiles and caches what
  # is used (~7 CPU seconds), and later imports cache the rest as they meet it.
  pip_install() {
    .venv/bin/pip install -q --disable-pip-version-check --no-compile "$@" 2>&1 \
      | grep -v "is neither a file nor a directory" || true
  }
  pip_install -e '.[sim]'
  # numba's kernels compiled once into its on-disk cache (~50 CPU seconds, in parallel
  # processes): else each test worker and each first `cassini sim` run compiles them again.
  # Bytecode caches are written from here on even where the machine sets
  # PYTHONDONTWRITEBYTECODE.
  unset PYTHONDONTWRITEBYTECODE
  .venv/bin/python -m cassini.sim.jit_warmup &
  warmup=$!
  .venv/bin/pip freeze --exclude-editable > .venv/constraints.txt
  .venv/bin/python -c '
import sys, tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
print("\n".join(r for name in sys.argv[1:] for r in extras[name]))' \
    dev testbed ray kube packet > .venv/extras.txt
  pip_install -c .venv/constraints.txt -r .venv/extras.txt
  .venv/bin/python -c 'import cassini, numpy, networkx, yaml, starlette, uvicorn, httptools, uvloop, prometheus_client, torch, scapy, pyroute2, transformers, matplotlib, numba, ray, openapi_spec_validator, hypothesis, xdist, kubernetes, pydantic, schemathesis, ns3'
  wait "$warmup" || echo "setup: WARNING: the simulator's numba warm-up failed (first runs compile)" >&2
  touch "$stamp"
fi
echo "setup: ready in ${SECONDS} s (.venv/bin/cassini, .venv/bin/mltcp, .venv/bin/testbed)"
