"""In-job timing: when a job may start each iteration."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cassini.errors import InputError

#: Drift the agent tolerates before re-aligning, as a fraction of the period (paper §5.7).
AGENT_TOLERANCE = 0.05
#: Largest group the agent tries to hold to its shifts; larger ones run free from their
#: shifts at once.  Measured: in a 700-job run of ``sim_1024.yaml`` no group of more than
#: three jobs ever kept its shifts (12 of ~900 held groups did, all of 2-3 jobs), and
#: simulating the attempt doubled the cost of every large group.
HELD_GROUP_LIMIT = 4


@dataclass(frozen=True)
class Timing:
    """A timing part.  ``held``: a job begins each iteration on its time-shift's slot
    grid (slots one dedicated iteration time apart), not as soon as the last one ended;
    ``tolerance``: how late (a fraction of the period) a held job may end an iteration
    and still begin the next at once, later than that it re-aligns to its next slot
    (:func:`cassini.sim.network.rates.next_slot`), and a group whose jobs are busier than
    ``1 + tolerance / 2`` periods is released to run free; ``group_limit``: the largest
    group held (jobs coupled by shared links), larger ones run free from their shifts."""

    held: bool = False
    tolerance: float = AGENT_TOLERANCE
    group_limit: int = HELD_GROUP_LIMIT

    def __post_init__(self) -> None:
        if not (0 <= self.tolerance < 1 and math.isfinite(self.tolerance)):
            raise InputError("timing", f"tolerance {self.tolerance} is not in [0, 1)")
        if self.group_limit < 1:
            raise InputError("timing", f"group_limit {self.group_limit} is not >= 1")

    @property
    def name(self) -> str:
        """The :data:`TIMINGS` name of this entry (the first equal one); InputError for
        a timing not in the table (a scheduler name could not say it)."""
        for name, entry in TIMINGS.items():
            if entry == self:
                return name
        raise InputError("timing", f"{self} is not an entry of TIMINGS: it has no name")


#: name -> timing.  A rule that holds jobs with another tolerance or group limit is one
#: entry here (docs/extending.md shows one).
TIMINGS: dict[str, Timing] = {"free": Timing(held=False), "held": Timing(held=True)}
