"""Compatibility: the names ``mltcp.loader`` had before MLTCP was split by privilege.  New
code imports what a training process needs from :mod:`mltcp.marks` (or ``mltcp``) and
the root-only commands from :mod:`mltcp.admin`; the variants are in :mod:`mltcp.variants`.
"""

from __future__ import annotations

from mltcp import variants
from mltcp.admin import (
    EBPF_DIR,
    SELECT_PROG,
    STATE,
    build,
    check_prerequisites,
    get_params,
    load,
    problems,
    repair_log,
    select,
    set_params,
    sockets_using,
    sources,
    status,
    switch_sockets,
    unload,
)
from mltcp.bpfmap import LayoutMismatch, PinnedMap
from mltcp.marks import assign_port, job_key, mark_iteration, open_marks, use_marks_fd
from mltcp.pinned import (
    MAPS,
    PIN_DIR,
    SHARED_MAPS,
    SYSCTL,
    MltcpError,
    allowed,
    available,
)

VARIANTS = {v.name: v.cc for v in variants.VARIANTS}  # --variant name: congestion control

__all__ = [
    "EBPF_DIR",
    "MAPS",
    "PIN_DIR",
    "SELECT_PROG",
    "SHARED_MAPS",
    "STATE",
    "SYSCTL",
    "VARIANTS",
    "LayoutMismatch",
    "MltcpError",
    "PinnedMap",
    "allowed",
    "assign_port",
    "available",
    "build",
    "check_prerequisites",
    "get_params",
    "job_key",
    "load",
    "mark_iteration",
    "open_marks",
    "problems",
    "repair_log",
    "select",
    "set_params",
    "sockets_using",
    "sources",
    "status",
    "switch_sockets",
    "unload",
    "use_marks_fd",
]
