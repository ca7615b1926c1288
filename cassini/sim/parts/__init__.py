"""The simulator's decisions in parts, one table per kind.

=============  ====================================  ==========================================
kind           table (module)                        entries
=============  ====================================  ==========================================
queue          :data:`queue.QUEUE_POLICIES`          themis, pollux, fifo, las, recorded
placement      :data:`placement.PLACEMENTS`          packed (alias first), random, cassini, defrag
routing        :data:`routing.ROUTINGS`              single, ecmp, crux
sharing        :data:`sharing.SHARINGS`              maxmin, mltcp, priority
timing         :data:`timing.TIMINGS`                free, held
=============  ====================================  ==========================================

A scheduler's name is its parts joined by ``+``, the queue policy first:
``themis+cassini``, ``themis+crux+mltcp``, ``pollux+ecmp``...  Two names stand for
several parts, as the systems they come from do: ``cassini`` = cassini placement + held
timing; ``crux`` = crux routing + priority sharing.  Parsing lives in
:mod:`cassini.sim.schedulers`; adding a part is one module-level function plus one table
entry (see ``docs/extending.md``).
"""

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
