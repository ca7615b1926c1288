"""MLTCP's pinned BPF maps and the kernel's lists of congestion controls, as both a
training process (:mod:`mltcp.marks`) and the admin commands (:mod:`mltcp.admin`) open
them.  Importing this needs no root and it starts no process: opening a pin is one
bpf(2) call (:mod:`mltcp.bpfmap`).

The maps are pinned by name under ``/sys/fs/bpf``; their keys and values are defined once
in ``ebpf/mltcp_maps.h`` and described for Python by :mod:`mltcp.layout`, and every map is
checked against the sizes the kernel reports when it is opened.
"""

from __future__ import annotations

from pathlib import Path

from mltcp import layout, variants
from mltcp.bpfmap import LayoutMismatch, PinnedMap

PIN_DIR = Path("/sys/fs/bpf")
SYSCTL = Path("/proc/sys/net/ipv4")
MAPS = {  # name: (key size, value size) in bytes, from the one definition
    name: (key.size, value.size) for name, (key, value) in layout.MAPS.items()
}
SHARED_MAPS = [m for m in MAPS if m != "mltcp_cgroup_cfg"]  # pinned by every variant


class MltcpError(RuntimeError):
    """A clear, one-line problem with what to do about it."""


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
