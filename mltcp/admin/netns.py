"""Named network namespaces (``ip netns``, under ``/run/netns``) and the congestion control
each one selects (its own ``net.ipv4.tcp_congestion_control``): ``select --netns`` writes
it, ``unload`` puts it back and ``status`` reports one still selecting a control of ours
that is not loaded."""

from __future__ import annotations

from pathlib import Path

from mltcp.admin.build import run
from mltcp.pinned import MltcpError

NETNS_DIR = Path("/run/netns")  # where `ip netns add` mounts a named namespace
_SYSCTL = "net.ipv4.tcp_congestion_control"


def names() -> list[str]:
    """The named network namespaces, sorted."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except OSError:  # none created yet
        return []


def selected(ns: str) -> str | None:
    """The congestion control namespace ``ns`` selects, or None if it cannot be read
    (removed meanwhile)."""
    r = run(["ip", "netns", "exec", ns, "sysctl", "-n", _SYSCTL])
    if r.returncode != 0:
        return None
    return r.stdout.strip() or None


def select(ns: str, cc: str) -> None:
    """Make ``cc`` the congestion control of namespace ``ns``."""
    r = run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{_SYSCTL}={cc}"])
    if r.returncode != 0:
        raise MltcpError(f"cannot select {cc} in netns {ns}: {r.stderr.strip()}")
