"""Time-shift agent (CASSINI §4.2): holds a job's iterations on a shared clock.

Iteration ``k`` of a job with shift ``t`` and period ``T`` should start at
``epoch + t + k * T`` (seconds, wall clock, shared by every namespace).  Before each
iteration the agent sleeps until that slot.  A job that drifts, i.e. stays late by more
than ``drift_tolerance * T`` without catching up for ``patience`` iterations, is
re-aligned: it skips to the next slot it can still make, so its offset against the other
jobs is restored; re-alignments are counted.  A job that is late but catching up fast
enough to be back within the tolerance in ``patience`` iterations (as the period's slack
allows after a few slow start-up iterations) is left alone, and so is one late iteration
(jitter): a skip costs nearly a whole period, catching up a few ms.  A job later than
half a period skips at once (the next slot is nearer than catching up).  Works for any
job that calls :meth:`TimeShiftAgent.before_iteration` at the top of its loop (the
synthetic worker, and the PyTorch hook around the training step).

All workers of one job must take the same decision, or a worker that skips a slot leaves
the others waiting a whole period inside the collective: one worker :meth:`plan` s the
slot and the others receive its start time and only :meth:`wait_until` it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class TimeShiftAgent:
    """Aligns iteration starts to ``epoch_s + shift_s + k * period_s`` (seconds).

    ``clock`` and ``sleep`` are injectable for tests.
    """

    shift_s: float
    period_s: float
    epoch_s: float
    drift_tolerance: float = 0.05
    patience: int = 3
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    realignments: int = 0
    late_streak: int = 0
    last_late_s: float = 0.0
    slot: int = 0
    drifts_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"period_s must be > 0, got {self.period_s!r}")
        if not 0 <= self.shift_s < self.period_s + 1e-12:
            raise ValueError(f"shift_s must be in [0, period_s), got {self.shift_s!r}")
        if not 0 < self.drift_tolerance < 1:
            raise ValueError(f"drift_tolerance must be in (0, 1), got {self.drift_tolerance!r}")
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience!r}")

    def slot_time(self, k: int) -> float:
        return self.epoch_s + self.shift_s + k * self.period_s

    def plan(self) -> float:
        """Start time (wall clock, seconds) of the next iteration: its slot, or, when the
        job is later than the tolerance, the first slot still ahead (a re-alignment)."""
        now = self.clock()
        target = self.slot_time(self.slot)
        late = now - target
        tolerance = self.drift_tolerance * self.period_s
        gain = self.last_late_s - late  # seconds caught up since the last iteration
        if late <= tolerance:
            self.late_streak = 0
        elif gain <= 1e-6 * self.period_s or late - tolerance > self.patience * gain:
            # late, and at this pace not back within tolerance in `patience` iterations
            self.late_streak += 1
        # otherwise catching up fast enough (the period's slack is working): no count
        self.last_late_s = late
        if self.late_streak >= self.patience or late > 0.5 * self.period_s:
            self.slot = math.ceil((now - self.epoch_s - self.shift_s) / self.period_s)
            target = self.slot_time(self.slot)
            self.realignments += 1
            self.late_streak = 0
        self.slot += 1
        return target

    def wait_until(self, target: float) -> float:
        """Sleep until ``target``; returns the drift (seconds late, >= 0)."""
        wait = target - self.clock()
        if wait > 0:
            self.sleep(wait)
        drift = max(0.0, self.clock() - target)
        self.drifts_s.append(drift)
        return drift

    def before_iteration(self) -> float:
        """Plan and wait for the next slot (a job with one worker); returns the drift."""
        return self.wait_until(self.plan())
