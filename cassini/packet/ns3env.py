"""Loading ns-3's Python bindings (the ``ns3`` wheel, through cppyy) once per process.

``from ns import ns`` loads every ns-3 module's headers and libraries into cppyy's
interpreter: 11-14 CPU seconds and 20-30 s of wall time on the 2-core development machine
(measured with ``/usr/bin/time``), about 630 MB of memory.  Everything that needs ns-3
calls :func:`load_ns`; the rest of :mod:`cassini.packet` imports without it.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from typing import Any

#: the one-line refusal where the wheel is missing
MISSING = "network: packet needs the [packet] extra: pip install 'netaware-ml[packet]'"


class PacketUnavailable(RuntimeError):
    """ns-3's bindings are not installed (the ``[packet]`` extra)."""


def available() -> bool:
    """Whether the ns-3 bindings are installed (without loading them)."""
    try:
        return importlib.util.find_spec("ns3.ns") is not None
    except (ImportError, ValueError):
        return False


@lru_cache(maxsize=1)
def load_ns() -> Any:
    """The ``ns`` namespace of ns-3's bindings (``ns.ns3`` classes, ``ns.Simulator``...);
    raises :class:`PacketUnavailable` with :data:`MISSING` where the wheel is absent."""
    if not available():
        raise PacketUnavailable(MISSING)
    try:
        from ns import ns  # type: ignore[import-not-found]
    except (ImportError, SystemExit) as e:  # the ns stub calls exit() on a missing ns3.ns
        raise PacketUnavailable(f"{MISSING} ({e})") from None
    return ns


def cppyy() -> Any:
    """The cppyy module the bindings run on (after :func:`load_ns`)."""
    load_ns()
    import cppyy as module  # type: ignore[import-not-found]

    return module
