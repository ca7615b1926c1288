#!/usr/bin/env bash
# The one-command showcase.  Until the testbed experiments land, it runs the placement
# advisor on the built-in example cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/cassini advise --example --format table
