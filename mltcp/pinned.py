"""MLTCP's pinned BPF maps and the kernel's lists of congestion controls, as both a
training process (:mod:`mltcp.marks`) and the admin commands (:mod:`mltcp.admin`) open
them.  Importing this needs no root and it starts no process: opening a pin is one
bpf(2) call (:mod:`mltcp.bpfmap`).

The maps are pinned by name under ``/sys/fs/bpf``; their keys and values are defined once
in ``ebpf/mltcp_maps.h`` and described for Python by :mod:`mltcp.layout`, and every map is
checked against the sizes the kernel reports when it is opened.
"""

from __future__ import annotations

import os
from pathlib import Path

from mltcp import layout, variants
from mltcp.bpfmap import LayoutMismatch, PinnedMap

PIN_DIR = Path("/sys/fs/bpf")
SYSCTL = Path("/proc/sys/net/ipv4")
MAPS = {  # name: (key size, value size) in bytes, from the one definition
    name: (key.size, value.size) for name, (key, value) in layout.MAPS.items()
}
SHARED_MAPS = [m for m in MAPS if m != "mltcp_cgroup_cfg"]  # pinned by every variant
PROC = Path("/proc")  # PROC/PID/ns/mnt: each process's mount namespace
NOT_HOST_SYS = (
    "this process runs in another mount namespace than the host's, without its /sys "
    "(`ip netns exec` mounts one of its own): run mltcp in the host's mount namespace "
    "(`nsenter --net=/run/netns/NAME mltcp ...` keeps it)"
)


class MltcpError(RuntimeError):
    """A clear, one-line problem with what to do about it."""


class MltcpUsageError(MltcpError):
    """A command run where it cannot do what it says (outside the host's mount or network
    namespace): ``mltcp`` exits 2 for it, as for a bad argument."""

    exit_status = 2


def namespace_ident(path: Path) -> tuple[int, int] | None:
    """The namespace a file refers to (nsfs device and inode: ``/proc/PID/ns/net``, a
    named netns, ``/proc/PID/ns/mnt``), None if it is gone or cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def init_namespace(proc: Path, kind: str) -> tuple[int, int] | None:
    """:func:`namespace_ident` of init's namespace of ``kind`` (``net``, ``mnt``) under
    ``proc``: pid 1's, or kthreadd's (pid 2, always in init's) where pid 1's cannot be
    read."""
    return namespace_ident(proc / "1" / "ns" / kind) or namespace_ident(proc / "2" / "ns" / kind)


def host_sys_hidden() -> bool:
    """Does this process not see the host's /sys: it runs in another mount namespace than
    init's (kthreadd's where init's cannot be read) and the BPF file system is not mounted
    at :data:`PIN_DIR` there (``ip netns exec`` mounts a /sys of its own, without the BPF
    pins and the cgroup hierarchies; ``nsenter --net`` keeps the host's)?  False when it
    cannot tell."""
    if os.path.ismount(PIN_DIR):
        return False
    here = namespace_ident(PROC / "self" / "ns" / "mnt")
    init = init_namespace(PROC, "mnt")
    return None not in (here, init) and here != init


def require_host_sys() -> None:
    """:class:`MltcpUsageError` (:data:`NOT_HOST_SYS`) where :func:`host_sys_hidden`:
    load, unload and select must not mount a BPF file system, write sysctls or forget
    cgroups in a /sys of their own."""
    if host_sys_hidden():
        raise MltcpUsageError(NOT_HOST_SYS)


def available() -> list[str]:
    """Congestion controls the kernel has (built in or registered)."""
    return (SYSCTL / "tcp_available_congestion_control").read_text().split()


def allowed() -> list[str]:
    """Congestion controls an unprivileged process (or a network namespace) may choose."""
    return (SYSCTL / "tcp_allowed_congestion_control").read_text().split()


def loaded() -> list[str]:
    """Our congestion controls registered now, in the table's order."""
    have = set(available())
    return [cc for cc in variants.CCS if cc in have]


def open_map(name: str) -> PinnedMap:
    """The pinned map ``name`` (see :data:`MAPS`), its sizes checked; a missing pin or one
    of another layout is an :class:`MltcpError` saying what to do."""
    path = PIN_DIR / name
    if not path.exists():
        if host_sys_hidden():  # not missing: out of this process's sight
            raise MltcpUsageError(f"{PIN_DIR} is not the host's here: {NOT_HOST_SYS}")
        if loaded():
            raise MltcpError(
                f"{path} is missing (removed by hand?): run `mltcp unload --force` and load again"
            )
        raise MltcpError("MLTCP is not loaded: run `mltcp load` first")
    try:
        return PinnedMap(str(path), *MAPS[name])
    except LayoutMismatch as e:
        raise MltcpError(
            f"{e}: it was made by another version of mltcp; run `mltcp unload --force` "
            "and load again"
        ) from None
