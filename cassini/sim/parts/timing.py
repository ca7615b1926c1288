"""In-job timing: when a job may start each iteration."""

from __future__ import annotations

from dataclasses import dataclass

#: Drift the agent tolerates before re-aligning, as a fraction of the period (paper §5.7).
AGENT_TOLERANCE = 0.05
#: Largest group the agent tries to hold to its shifts; larger ones run free from their
#: shifts at once.  Measured: in a 700-job run of ``sim_1024.yaml`` no group of more than
#: three jobs ever kept its shifts (12 of ~900 held groups did, all of 2-3 jobs), and
#: simulating the attempt doubled the cost of every large group.
HELD_GROUP_LIMIT = 4


@dataclass(frozen=True)
class Timing:
    """A timing part: ``held`` jobs keep their time-shifts' slot grid."""

    held: bool


#: name -> timing
TIMINGS: dict[str, Timing] = {"free": Timing(held=False), "held": Timing(held=True)}
