"""The simulator's decisions in parts, one table per kind."""

from __future__ import annotations

from collections.abc import Mapping

from cassini.sim.parts.placement import PLACEMENTS
from cassini.sim.parts.queue import QUEUE_POLICIES
from cassini.sim.parts.routing import ROUTINGS
from cassini.sim.parts.sharing import SHARINGS
from cassini.sim.parts.timing import TIMINGS

#: Every kind with its table (names -> implementation), in the order names list them.
KINDS: dict[str, Mapping[str, object]] = {
    "queue": QUEUE_POLICIES,
    "placement": PLACEMENTS,
    "routing": ROUTINGS,
    "sharing": SHARINGS,
    "timing": TIMINGS,
}


def parts_by_kind() -> str:
    """One line per kind listing its parts, for error messages and ``--help``."""
    return "; ".join(f"{kind}: {', '.join(table)}" for kind, table in KINDS.items())
