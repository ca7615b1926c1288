"""MLTCP's privileged side: build, register, parameterise, select (namespaces, the host,
cgroups), inspect and unload the congestion controls.  Needs root and runs ``make``,
``bpftool``, ``ip`` and ``ss``; a training process needs none of it (see
:mod:`mltcp.marks`).

- :mod:`~mltcp.admin.build`: prerequisites, ``make`` in ``ebpf/``;
- :mod:`~mltcp.admin.register`: ``load``, ``unload``, moving sockets to their base;
- :mod:`~mltcp.admin.params`: the rule's parameters in the config map;
- :mod:`~mltcp.admin.cgroup`: ``select``, and forgetting cgroups (``forget_cgroup`` for a
  caller about to remove one);
- :mod:`~mltcp.admin.netns`: named network namespaces and the control each selects, and
  every namespace of the host (named or not);
- :mod:`~mltcp.admin.status`: ``status`` and ``problems``;
- :mod:`~mltcp.admin.state`: what ``load``/``select`` changed, for ``unload``.
"""

from mltcp.admin.build import EBPF_DIR, build, check_prerequisites
from mltcp.admin.cgroup import SELECT_PROG, forget_cgroup, forget_removed_cgroups, select
from mltcp.admin.params import get_params, set_params
from mltcp.admin.register import (
    load,
    orphans,
    sockets_by_netns,
    sockets_using,
    sources,
    switch_sockets,
    unload,
)
from mltcp.admin.state import STATE, LoaderState, read_state
from mltcp.admin.status import problems, repair_log, status

__all__ = [
    "EBPF_DIR",
    "SELECT_PROG",
    "STATE",
    "LoaderState",
    "build",
    "check_prerequisites",
    "forget_cgroup",
    "forget_removed_cgroups",
    "get_params",
    "load",
    "orphans",
    "problems",
    "read_state",
    "repair_log",
    "select",
    "set_params",
    "sockets_by_netns",
    "sockets_using",
    "sources",
    "status",
    "switch_sockets",
    "unload",
]
