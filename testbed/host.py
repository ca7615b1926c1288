"""The host a testbed runs on: its prerequisites, the congestion controls non-init
namespaces may select, bpffs, and waiting for the processes a run started."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
KERNEL_CCS = ("reno", "cubic", "bbr", "dctcp", "bic", "cdg", "highspeed", "htcp", "hybla",
              "illinois", "lp", "nv", "scalable", "vegas", "veno", "westwood", "yeah")  # fmt: skip
"""Linux's own TCP congestion controls (``reno`` built in, the others ``tcp_<name>``
modules); ours (``mltcp_*``, ``dctcp_bpf``) are :data:`mltcp.variants.CCS`."""


class TestbedError(RuntimeError):
    """A testbed prerequisite is missing or a setup step failed; the message says which."""

    __test__ = False  # not a pytest test class


def check_prerequisites() -> None:
    """Raise TestbedError naming what is missing (root, Mininet, tc, bridges)."""
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (network namespaces, tc, bridges)")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        raise TestbedError(
            "Mininet is not importable: run `make setup` (Debian's mininet)"
        ) from None
    for tool in ("tc", "ip", "mnexec", "ethtool"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            raise TestbedError(f"`{tool}` not found: run `make setup`")


def known_congestion_control(value: object, field: str) -> str:
    """``value`` if it names a congestion control a run may ask for (the kernel's, or ours
    loaded with ``mltcp load``), else an InputError naming ``field``; whether this host has
    it loaded is checked when the run starts (:func:`allow_congestion_control`)."""
    from cassini.errors import InputError
    from mltcp.variants import CCS

    if not isinstance(value, str) or value not in (*KERNEL_CCS, *CCS):
        raise InputError(
            field,
            f"must be a congestion control: the kernel's ({', '.join(KERNEL_CCS)}) or ours "
            f"({', '.join(CCS)}), got {value!r}",
        )
    return value


def allow_congestion_control(name: str) -> None:
    """Let non-init namespaces select ``name`` (written from the init namespace)."""
    available = AVAILABLE_CC.read_text().split()
    if name not in available:
        raise TestbedError(
            f"congestion control {name!r} is not available (have: {' '.join(available)}); "
            "for MLTCP variants run `mltcp load` first"
        )
    allowed = ALLOWED_CC.read_text().split()
    if name not in allowed:
        ALLOWED_CC.write_text(" ".join([*allowed, name]))


def ensure_bpffs() -> None:
    if not os.path.ismount("/sys/fs/bpf"):
        subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)


def wait_all(procs: Sequence[subprocess.Popen], timeout_s: float) -> list[int]:
    """Wait for every process; kill the rest after ``timeout_s``.  Returns exit codes."""
    deadline = time.time() + timeout_s
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.time())))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.host")
