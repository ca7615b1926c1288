"""Prerequisites and building the BPF objects of ``ebpf/`` (``make``, which takes the
variants' rules from :mod:`mltcp.variants`); the lines of a verifier log that say why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mltcp.pinned import PIN_DIR, MltcpError, require_host_sys

EBPF_DIR = Path(__file__).resolve().parent.parent.parent / "ebpf"


def check_prerequisites() -> None:
    """Root, the kernel's BTF, clang and bpftool, and the BPF file system mounted (mounted
    here if it is not)."""
    if os.geteuid() != 0:
        raise MltcpError("loading congestion controls needs root: run with sudo")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        raise MltcpError("no kernel BTF (/sys/kernel/btf/vmlinux): need CONFIG_DEBUG_INFO_BTF=y")
    for tool in ("clang", "bpftool"):
        if shutil.which(tool) is None:
            raise MltcpError(f"`{tool}` not found: run `make setup` (Debian: clang llvm bpftool)")
    require_host_sys()  # before mounting a BPF file system in another /sys
    if not os.path.ismount(PIN_DIR):
        subprocess.run(["mount", "-t", "bpf", "bpf", str(PIN_DIR)], check=True)


def build(name: str) -> Path:
    """Compile ``ebpf/NAME.bpf.o`` (and vmlinux.h from this kernel's BTF) if needed."""
    obj = EBPF_DIR / f"{name}.bpf.o"
    r = subprocess.run(
        ["make", "-s", "-C", str(EBPF_DIR), f"PYTHON={sys.executable}", obj.name],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise MltcpError(f"building {name} failed:\n{tail(r.stderr or r.stdout, 20)}")
    return obj


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``, its output captured as text (never raises for its exit status)."""
    return subprocess.run(cmd, capture_output=True, text=True)


def tail(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def verifier_lines(log: str) -> str:
    """The part of a libbpf/verifier log that says why (the last instructions and the
    error), not the whole dump."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    keep = [
        ln
        for ln in lines
        if re.search(r"invalid|unknown|not allowed|error|R\d|denied|failed|-E[A-Z]+", ln, re.I)
    ]
    return "\n".join((keep or lines)[-15:])
