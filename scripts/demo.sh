#!/usr/bin/env bash
# The one-command showcase: compact experiments 1 (CASSINI) and 2 (MLTCP) on the emulated
# cluster.  Without root or kernel support it says what is missing and runs the placement
# advisor's example instead.
set -uo pipefail
cd "$(dirname "$0")/.."
missing=()
[ "$(id -u)" -eq 0 ] || missing+=("root")
for tool in mnexec tc bpftool clang ethtool tcpdump; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ -e /sys/kernel/btf/vmlinux ] || missing+=("kernel BTF (/sys/kernel/btf/vmlinux)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "demo: the emulated-cluster experiments need: ${missing[*]}" >&2
  echo "demo: running the placement advisor's example instead" >&2
  exec .venv/bin/cassini advise --example --format table
fi
.venv/bin/python -m experiments.demo
