"""In-job timing: when a job may start each iteration.

* ``free`` — free-running: the next iteration starts when the previous one ends,
  phased by the job's start time.
* ``held`` — CASSINI's agent: iteration ``k`` starts at ``shift + k * T`` (T the
  dedicated iteration time), re-aligning when more than 5 % late; a group that cannot
  keep the pace, or is larger than the engine's ``HELD_GROUP_LIMIT``, is released to run
  free from its shifts.  Shifts come from the ``cassini`` placement (the ``cassini``
  name part sets both).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """A timing part: ``held`` jobs keep their time-shifts' slot grid."""

    held: bool


#: name -> timing
TIMINGS: dict[str, Timing] = {"free": Timing(held=False), "held": Timing(held=True)}
