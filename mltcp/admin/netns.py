"""Network namespaces: the named ones (``ip netns``, under ``/run/netns``) and the congestion
control each one selects (its own ``net.ipv4.tcp_congestion_control``): ``select --netns``
writes it, ``unload`` puts it back and ``status`` reports one still selecting a control of
ours that is not loaded.  And every namespace on the host, named or not (:func:`every`):
those of ``unshare -n`` and of Mininet's hosts have no name, yet their sockets can use our
controls, so ``unload`` counts and moves sockets in each."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from mltcp.admin.build import run
from mltcp.pinned import MltcpError, init_namespace, namespace_ident

NETNS_DIR = Path("/run/netns")  # where `ip netns add` mounts a named namespace
PROC = Path("/proc")  # each process's namespace: PROC/PID/ns/net
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


@dataclass(frozen=True)
class Namespace:
    """One network namespace of the host.  ``label``: how messages name it (its
    ``ip netns`` name, ``init`` for the host's own, else ``pid N``, its lowest process);
    ``paths``: files that refer to it (``/run/netns/NAME``, ``/proc/PID/ns/net``), tried in
    turn, since a process may exit meanwhile; ``here``: the one this process runs in."""

    label: str
    paths: tuple[str, ...]
    here: bool = False


def every() -> list[Namespace]:
    """Every network namespace reachable through ``/run/netns`` or a process
    (``/proc/PID/ns/net``), each once, this process's own first.  (One held only by a
    bind mount elsewhere or an open descriptor is not found: ``status`` reports what it
    leaves behind, see :func:`mltcp.admin.register.orphans`.)"""
    here = namespace_ident(PROC / "self" / "ns" / "net")
    # the init namespace: init's, or (init's hidden, in a sandbox) kthreadd's, pid 2
    init = init_namespace(PROC, "net")
    labels: dict[tuple[int, int], str] = {}
    paths: dict[tuple[int, int], list[str]] = {}
    for name in names():
        if (key := namespace_ident(NETNS_DIR / name)) is not None:
            labels.setdefault(key, name)
            paths.setdefault(key, []).append(str(NETNS_DIR / name))
    pids = sorted(int(p.name) for p in PROC.iterdir() if p.name.isdigit())
    for pid in pids:
        path = PROC / str(pid) / "ns" / "net"
        if (key := namespace_ident(path)) is None:  # exited meanwhile, or a zombie
            continue
        labels.setdefault(key, "init" if key == init else f"pid {pid}")
        found = paths.setdefault(key, [])
        if len(found) < 3:  # a few alternatives are enough
            found.append(str(path))
    if here is not None and here not in labels:  # no process listed: a /proc of another pid ns
        labels[here], paths[here] = "init" if here == init else "this one", [str(PROC / "self")]
    out = [Namespace(labels[k], tuple(paths[k]), here=k == here) for k in labels]
    return sorted(out, key=lambda ns: not ns.here)


def run_in(ns: Namespace, cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in namespace ``ns`` (``nsenter --net``: only the network namespace
    changes, so the BPF pins under /sys/fs/bpf stay visible, unlike ``ip netns exec``)."""
    if ns.here:
        return run(cmd)
    r = None
    for path in ns.paths:
        r = run(["nsenter", f"--net={path}", *cmd])
        if r.returncode == 0:
            break
    assert r is not None, "a namespace has at least one path"
    return r
