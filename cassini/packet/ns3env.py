"""Loading ns-3's Python bindings (the ``ns3`` wheel, through cppyy) once per process.

``from ns import ns`` loads every ns-3 module's headers and libraries into cppyy's
interpreter: 11-14 CPU seconds and 20-30 s of wall time on the 2-core development machine
(measured with ``/usr/bin/time``), about 630 MB of memory.  Everything that needs ns-3
calls :func:`load_ns`; the rest of :mod:`cassini.packet` imports without it.

The wheel includes every module's headers *before* it loads the libraries.
``ns3/nstime.h`` defines a static ``g_timeInitHelper`` in every translation unit whose
constructor calls ``Time::StaticInit`` (in ``libns3.*-core``); cling runs it when the
header is included, cannot find the symbol yet, and prints ``[runStaticInitializersOnce]:
Failed to materialize symbols: ... g_timeInitHelper ...`` twice on stderr (harmless: the
library's own units initialise ``Time`` when it loads).  :func:`load_ns` loads the core
library first (:func:`_preload_core`), so the initialiser finds its symbol and nothing
is printed.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
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
    _preload_core()
    try:
        from ns import ns  # type: ignore[import-not-found]
    except (ImportError, SystemExit) as e:  # the ns stub calls exit() on a missing ns3.ns
        raise PacketUnavailable(f"{MISSING} ({e})") from None
    return ns


def core_library() -> Path | None:
    """ns-3's core library in the wheel (``ns3/lib*/libns3.*-core*.so``), None where the
    wheel's layout has none."""
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for found in sorted(Path(root).glob("lib*/libns3*-core*.so")):
            return found
    return None


def _preload_core() -> None:
    """Load ns-3's core library into cppyy before the wheel includes its headers, so the
    headers' static ``Time`` initialisers resolve (see the module docstring)."""
    lib = core_library()
    if lib is None:
        return
    import cppyy as module  # type: ignore[import-not-found]

    module.load_library(str(lib))


def cppyy() -> Any:
    """The cppyy module the bindings run on (after :func:`load_ns`)."""
    load_ns()
    import cppyy as module  # type: ignore[import-not-found]

    return module
