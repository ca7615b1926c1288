"""In-job timing: when a job may start each iteration.

* ``free`` — free-running: the next iteration starts when the previous one ends,
  phased by the job's start time.
* ``held`` — CASSINI's agent: iteration ``k`` starts at ``shift + k * T`` (T the
  dedicated iteration time), re-aligning when more than 5 % late; a group that cannot
  keep the pace, or is larger than :data:`HELD_GROUP_LIMIT`, is released to run
  free from its shifts.  Shifts come from the ``cassini`` placement (the ``cassini``
  name part sets both).
"""

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
