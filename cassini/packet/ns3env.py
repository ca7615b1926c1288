"""Loading ns-3's Python bindings (the ``ns3`` wheel, through cppyy) once per process.

The wheel's own ``from ns import ns`` includes the headers of all of its ~50 modules (LTE,
Wi-Fi, mesh...) into cppyy's interpreter: 11-14 CPU seconds and ~630 MB.  The packet
backend needs eight of them, so :func:`load_ns` includes and loads only those
(:data:`MODULES`, each after the modules it links against): ~2.3 s and ~280 MB on the
2-core development machine.  It sets up what the wheel's loader does that the backend relies on
(``Ptr`` as a smart pointer) and nothing else (the wheel's ``Time`` comparison helpers are
not defined).  Everything that needs ns-3 calls :func:`load_ns`; the rest of
:mod:`cassini.packet` imports without it.

The wheel's loader also gives ``Node`` a Python ``__del__`` that keeps every Node proxy
alive in a list, for a Node Python itself made (``ns.Node()``, which Python would delete
under ns-3's feet).  The backend makes none: its nodes come from ``NodeContainer.Create``
as ``Ptr<Node>`` (the proxy holds a reference), and a plain ``Node`` proxy is only ever a
view through one (``ptr.GetObject``), which Python does not own and never deletes.  So no
``__del__`` is set: it ran Python code at every such view's deletion, where a Ctrl-C
landing in it was printed as "Exception ignored" and lost (the run went on), and it kept
every view, pointing at nodes ns-3 had since destroyed, for the life of the process.

``ns3/nstime.h`` defines a static ``g_timeInitHelper`` in every translation unit whose
constructor calls ``Time::StaticInit`` (in ``libns3.*-core``); cling runs it when the
header is included, and where the core library is not loaded yet it prints
``[runStaticInitializersOnce]: Failed to materialize symbols: ... g_timeInitHelper ...``
twice on stderr (harmless, but noise: the wheel's loader prints it).  :func:`load_ns`
loads the core library before it includes a header, so nothing is printed.
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


#: the ns-3 modules the packet backend includes and loads, each after the modules its
#: library links against (``tests/test_packet_plan.py`` holds the order to the libraries)
MODULES = (
    "core", "stats", "network", "bridge", "traffic-control", "internet", "point-to-point",
    "applications",
)  # fmt: skip


@lru_cache(maxsize=1)
def load_ns() -> Any:
    """The ``ns3`` namespace of ns-3's bindings with :data:`MODULES` loaded (``ns.Simulator``,
    ``ns.PointToPointHelper``...); raises :class:`PacketUnavailable` with :data:`MISSING`
    where the wheel is missing or incomplete."""
    if not available():
        raise PacketUnavailable(MISSING)
    try:
        import cppyy as module  # type: ignore[import-not-found]
        import libcppyy  # type: ignore[import-not-found]
    except ImportError as e:
        raise PacketUnavailable(f"{MISSING} ({e})") from None
    libraries = {name: module_library(name) for name in MODULES}
    missing = [name for name, path in libraries.items() if path is None]
    if missing:
        raise PacketUnavailable(f"{MISSING} (no library for {', '.join(missing)})")
    libcppyy.AddSmartPtrType("Ptr")
    include = libraries["core"].parent.parent / "include"  # type: ignore[union-attr]
    module.add_include_path(str(include))
    module.load_library(str(libraries["core"]))  # before any header: see the docstring
    for name in MODULES:
        module.include(f"ns3/{name}-module.h")
    for path in libraries.values():
        module.load_library(str(path))
    return module.gbl.ns3  # no Node.__del__ (see the module's docstring)


def module_library(name: str) -> Path | None:
    """ns-3's library of module ``name`` in the wheel (``ns3/lib*/libns3.*-NAME.so``), None
    where the wheel has none."""
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for found in sorted(Path(root).glob(f"lib*/libns3.*-{name}.so")):
            return found
    return None


def cppyy() -> Any:
    """The cppyy module the bindings run on (after :func:`load_ns`)."""
    load_ns()
    import cppyy as module  # type: ignore[import-not-found]

    return module
