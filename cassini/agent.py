"""Time-shift agent (CASSINI §4.2): holds a job's iterations on a shared clock.

Iteration ``k`` of a job with shift ``t`` and period ``T`` starts at
``epoch + t + k * T`` (seconds, wall clock, which every host of the cluster must agree on
to well within the drift tolerance, see ``docs/agent.md``).  Before each iteration the
agent sleeps until that slot.

Decisions are taken once per job: one rank (the *planner*) calls :meth:`TimeShiftAgent.plan`
and hands the :class:`SlotDecision` to every other rank, which call
:meth:`TimeShiftAgent.follow`; then every rank sleeps until the same start time.  A rank
that decided on its own could skip a slot the others do not skip and leave them waiting a
whole period inside the collective.  :meth:`TimeShiftAgent.step` does both halves given a
``broadcast`` function (the testbed's synthetic worker passes its ring);
:meth:`TimeShiftAgent.step_ahead` exchanges each decision one iteration ahead, so no rank
waits for a message between iterations (``cassini.torch`` posts an asynchronous
``torch.distributed.broadcast``).

Drift.  A job that stays late by more than its tolerance without catching up for
``patience`` iterations is *re-aligned*: it skips to the next slot it can still make,
which restores its offset against the other jobs.  The tolerance is ``drift_tolerance *
T``, or the advisor's ``slip_tolerance_s`` when that is larger: how late the job may run
before its phases meet another job's (:mod:`cassini.slip`; ~20 ms for two VGG-11 jobs in a
98 ms period, where a fixed 5 % re-aligned jobs that had room to spare).  A job that is
late but catching up fast enough to be back within the tolerance in ``patience``
iterations is left alone, and so is one late iteration (jitter); a job later than half a
period skips at once.

Start-up.  A job that starts after its epoch (or on a new grid) is behind slot 0 by
however long it took to get going.  When its first decision skips (the rules above), it
goes to the first slot it can still make without counting a re-alignment
(``startup_skipped_slots`` says how many slots it passed), so the release budget below
counts only slots missed while the job runs.

Graceful degradation.  A job that cannot hold its period keeps missing slots, and each
skip costs nearly a whole period.  After ``max_realignments`` re-alignments within
``window`` iterations the agent *releases* the job: from then on it runs free (no
waiting, no skips), as if it had no time-shift, and says why (``release_reason``).
Releasing costs at most what the shift was meant to save; holding a job that cannot keep
pace costs a skipped period every few iterations.

Group release.  The simulator releases a held group together: a job held to a slot
against a partner that now runs free waits for nothing.  :meth:`TimeShiftAgent.request_release`
asks the planner to release the job at its next decision (a ``by_partner`` release, which
every rank adopts like its own); :class:`GroupRelease` says when: once a partner (or the
job itself, released by hand) is on the caller's list of released jobs, and once, when the
job released itself, that the caller must report it.  The caller does the I/O: the
``cassini serve`` registry (``cassini.torch``) or the testbed's release board
(``testbed.releaseboard``).

Pure: the clock and sleep are injectable; no I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

#: Bounds of a slot grid, the same as ``cassini serve``'s schema (``period_s``,
#: ``epoch_s``): a period from a microsecond to a week, an epoch in UNIX seconds below
#: 1e10 (the year 2286; an epoch in milliseconds, ~1.8e12 today, is past it).
MIN_PERIOD_S = 1e-6
MAX_PERIOD_S = 7 * 86400.0
MAX_EPOCH_S = 1e10
#: The fastest rate (bits/s) a job's phase may send, the service's schema's bound too
#: (1 Pb/s: no NIC is near it, and the unified circle's arithmetic stays finite).
MAX_RATE_BPS = 1e15
#: How far ahead of the clock (seconds) an epoch may be: a later one would hold the job
#: asleep until then, which no scheduler means (``cassini.torch`` and the service refuse it).
MAX_EPOCH_AHEAD_S = 86400.0


def epoch_problem(epoch_s: float) -> str | None:
    """What is wrong with ``epoch_s`` as the UNIX time (seconds) slot 0 counts from, or
    None: it must be finite, >= 0 and below :data:`MAX_EPOCH_S`."""
    if not math.isfinite(epoch_s):
        return f"must be a finite number of UNIX seconds, got {epoch_s!r}"
    if epoch_s < 0:
        return f"must be >= 0 (UNIX seconds), got {epoch_s!r}"
    if epoch_s >= MAX_EPOCH_S:
        hint = " (seconds, not milliseconds)" if epoch_s < 1000 * MAX_EPOCH_S else ""
        return f"must be < {MAX_EPOCH_S:g} UNIX seconds{hint}, got {epoch_s!r}"
    return None


@dataclass(frozen=True)
class SlotDecision:
    """The planner's decision for one iteration: start at ``target_s`` (wall clock,
    seconds), which is slot ``slot``; ``realigned`` when that skipped slots; ``released``
    when the job runs free from now on (then ``target_s`` is the planner's now);
    ``by_partner`` when that release was asked for from outside (its group was released),
    not decided on the job's own lateness."""

    target_s: float
    slot: int
    realigned: bool = False
    released: bool = False
    by_partner: bool = False

    def to_floats(self) -> tuple[float, float, float, float]:
        """Four floats, for a collective that moves one float64 tensor (released: 0 no,
        1 on its own lateness, 2 with its group)."""
        released = 0.0 if not self.released else (2.0 if self.by_partner else 1.0)
        return (self.target_s, float(self.slot), float(self.realigned), released)

    @classmethod
    def from_floats(cls, values: Sequence[float]) -> SlotDecision:
        target, slot, realigned, released = (float(v) for v in values)
        return cls(target, int(round(slot)), realigned > 0.5, released > 0.5, released > 1.5)


Broadcast = Callable[[tuple[float, ...] | None], Sequence[float]]
"""Sends the planner's floats to every rank of the job; each rank gets them back (the
planner passes its floats, the others pass None)."""
Post = Callable[[tuple[float, ...] | None], None]
"""Starts sending the planner's floats to every rank (ahead mode); does not block."""
Take = Callable[[], Sequence[float] | None]
"""The floats posted at the previous step, waiting for them if needed; None before any."""


@dataclass
class TimeShiftAgent:
    """Aligns iteration starts to ``epoch_s + shift_s + k * period_s`` (seconds).

    ``clock`` and ``sleep`` are injectable for tests.
    """

    shift_s: float
    period_s: float
    epoch_s: float
    drift_tolerance: float = 0.05
    slip_tolerance_s: float | None = None
    patience: int = 3
    max_realignments: int = 3
    window: int = 20
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    realignments: int = 0
    startup_skipped_slots: int = 0
    released: bool = False
    release_reason: str | None = None
    released_by_partner: bool = False
    pending_release: str | None = None
    slot: int = 0
    iteration: int = 0
    late_streak: int = 0
    last_late_s: float = 0.0
    realigned_at: list[int] = field(default_factory=list)
    drifts_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise ValueError(f"period_s must be > 0, got {self.period_s!r}")
        if not 0 <= self.shift_s < self.period_s + 1e-12:
            raise ValueError(f"shift_s must be in [0, period_s), got {self.shift_s!r}")
        if not math.isfinite(self.epoch_s):
            raise ValueError(f"epoch_s must be a finite wall-clock time, got {self.epoch_s!r}")
        if not 0 < self.drift_tolerance < 1:
            raise ValueError(f"drift_tolerance must be in (0, 1), got {self.drift_tolerance!r}")
        slip = self.slip_tolerance_s
        if slip is not None and not (math.isfinite(slip) and 0 <= slip < 0.5 * self.period_s):
            raise ValueError(f"slip_tolerance_s must be in [0, period_s / 2), got {slip!r}")
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience!r}")
        if self.max_realignments < 1 or self.window < 1:
            raise ValueError("max_realignments and window must be >= 1")

    @property
    def tolerance_s(self) -> float:
        """How late (seconds) an iteration may start before it counts as late."""
        fixed = self.drift_tolerance * self.period_s
        return fixed if self.slip_tolerance_s is None else max(fixed, self.slip_tolerance_s)

    def slot_time(self, k: int) -> float:
        """Wall-clock start (seconds) of slot ``k``."""
        return self.epoch_s + self.shift_s + k * self.period_s

    # -- the planner -------------------------------------------------------------------
    def request_release(self, reason: str) -> None:
        """Release the job at the planner's next decision, because its group was released
        (``reason`` says by whom); every rank adopts it with that decision.  Planner only;
        a no-op once released or asked."""
        if not self.released and self.pending_release is None:
            self.pending_release = reason

    def plan(self) -> SlotDecision:
        """Decide the next iteration's start (planner rank only), and apply it."""
        now = self.clock()
        if self.released:
            decision = SlotDecision(now, self.slot, released=True)
        elif self.pending_release is not None:
            decision = SlotDecision(now, self.slot, released=True, by_partner=True)
        else:
            decision = self._decide(now)
        self._apply(decision)
        return decision

    def _decide(self, now: float) -> SlotDecision:
        """The slot for an iteration ready at ``now``; updates the planner's lateness."""
        target = self.slot_time(self.slot)
        verdict = self._judge(now - target, self.iteration)
        if verdict == "hold":
            return SlotDecision(target, self.slot)
        slot = math.ceil((now - self.epoch_s - self.shift_s) / self.period_s)
        if self._starting():  # the start-up catch-up: not a re-alignment
            return SlotDecision(self.slot_time(slot), slot)
        if verdict == "release":
            return SlotDecision(now, self.slot, realigned=True, released=True)
        return SlotDecision(self.slot_time(slot), slot, realigned=True)

    def _starting(self) -> bool:
        """True at the job's first decision: a skip then is the start-up catch-up (the job
        started after its slot, no drift of its own), neither a re-alignment nor a
        release; the lateness it carried is forgotten (it goes to a slot it can make)."""
        if self.iteration > 0:
            return False
        self.late_streak = 0
        self.last_late_s = 0.0
        return True

    def _judge(self, late: float, applies_to: int) -> str:
        """The verdict on an iteration ``late`` seconds after its slot: ``hold``,
        ``realign`` or ``release`` (of iteration ``applies_to``, which the window counts
        back from); updates the planner's lateness streak."""
        tolerance = self.tolerance_s
        gain = self.last_late_s - late  # seconds caught up since the last iteration
        if late <= tolerance:
            self.late_streak = 0
        elif gain <= 1e-6 * self.period_s or late - tolerance > self.patience * gain:
            self.late_streak += 1  # late, and at this pace not back within tolerance in time
        # otherwise catching up fast enough (the period's slack is working): no count
        self.last_late_s = late
        if self.late_streak < self.patience and late <= 0.5 * self.period_s:
            return "hold"
        self.late_streak = 0
        recent = [i for i in self.realigned_at if i > applies_to - self.window]
        return "release" if len(recent) + 1 >= self.max_realignments else "realign"

    # -- every rank --------------------------------------------------------------------
    def follow(self, decision: SlotDecision) -> None:
        """Adopt the planner's decision (every rank but the planner)."""
        self._apply(decision)

    def _apply(self, decision: SlotDecision) -> None:
        self._record(decision)
        self.slot = decision.slot + 1
        self.iteration += 1

    def _record(self, decision: SlotDecision) -> None:
        """Count a re-alignment or release the decision carries, or the slots its start-up
        catch-up passed (every rank, both modes: ``self.slot`` is the slot the job would
        take next without a skip)."""
        if not (decision.realigned or decision.released) and decision.slot > self.slot:
            self.startup_skipped_slots += decision.slot - self.slot
        if decision.released and not self.released:
            self.released = True
            self.released_by_partner = decision.by_partner
            recent = [i for i in self.realigned_at if i > self.iteration - self.window]
            if decision.by_partner:
                self.release_reason = self.pending_release or "released with its group"
            else:
                self.release_reason = (
                    f"missed its slot {len(recent) + 1} times within {self.window} "
                    f"iterations: cannot hold a {self.period_s * 1e3:.3g} ms period"
                )
        if decision.realigned:
            self.realignments += 1
            self.realigned_at.append(self.iteration)

    def wait_until(self, target_s: float) -> float:
        """Sleep until ``target_s``; returns the drift (seconds late, >= 0)."""
        wait = target_s - self.clock()
        if wait > 0:
            self.sleep(wait)
        drift = max(0.0, self.clock() - target_s)
        self.drifts_s.append(drift)
        return drift

    def step(self, is_planner: bool = True, broadcast: Broadcast | None = None) -> float:
        """One iteration's job-wide decision and wait; returns the drift (seconds).

        Without ``broadcast`` the caller is the job's only rank.
        """
        if broadcast is None:
            return self.wait_until(self.plan().target_s)
        if is_planner:
            decision = self.plan()
            broadcast(decision.to_floats())
        else:
            decision = SlotDecision.from_floats(broadcast(None))
            self.follow(decision)
        return 0.0 if decision.released else self.wait_until(decision.target_s)

    def step_ahead(
        self, is_planner: bool, post: Post, take: Take, first: Broadcast | None = None
    ) -> float:
        """One iteration with the job-wide decision exchanged an iteration *ahead*, so that
        no rank waits for a message between its iterations; returns the drift (seconds).

        ``take()`` returns the floats posted at the previous step (None at the first);
        ``post(values)`` starts sending the next iteration's decision (the planner passes
        its floats, the others None) and must not block: ``cassini.torch`` posts an
        asynchronous ``broadcast`` and waits for it an iteration later, when it has long
        arrived.  A synchronous exchange costs a round trip every iteration, across the
        links the job shares, behind the other jobs' bursts: 2-4 ms of every late
        iteration of two VGG-11 DDP jobs on the testbed, 3 % of the period that was meant
        to let a late job catch up.  The price is that a re-alignment or release decided
        on an iteration's lateness applies to the iteration after it.  ``first``, when
        given, exchanges the first iteration's decision synchronously (:meth:`step`), so a
        job that starts long after the epoch begins on a slot.
        """
        if self.iteration == 0 and first is not None:
            return self.step(is_planner, first)
        values = take()
        target = None
        if values is not None:
            decision = SlotDecision.from_floats(values)
            self._adopt(decision)
            target = decision.target_s  # the planner's: every rank waits for the same time
        if self.released:
            self.iteration += 1
            return 0.0
        current = self.slot
        if target is None:
            target = self.slot_time(current)
        if is_planner:
            post(self._decide_next(current, self.clock() - target).to_floats())
        else:
            post(None)
        self.slot = current + 1  # as after step(): the next slot, unless a decision moves it
        self.iteration += 1
        return self.wait_until(target)

    def _decide_next(self, current: int, late: float) -> SlotDecision:
        """The slot after ``current``, from this iteration's lateness (planner, ahead
        mode)."""
        if self.pending_release is not None:
            nxt = current + 1
            return SlotDecision(self.slot_time(nxt), nxt, released=True, by_partner=True)
        verdict = self._judge(late, self.iteration + 1)
        nxt = current + 1
        if verdict == "hold":
            return SlotDecision(self.slot_time(nxt), nxt)
        # still this late at the next slot: the first slot after it that it can make
        skip = nxt + max(1, math.ceil(late / self.period_s))
        if self._starting():  # the start-up catch-up: not a re-alignment
            return SlotDecision(self.slot_time(skip), skip)
        if verdict == "release":
            return SlotDecision(self.slot_time(nxt), nxt, realigned=True, released=True)
        return SlotDecision(self.slot_time(skip), skip, realigned=True)

    def _adopt(self, decision: SlotDecision) -> None:
        """Every rank, ahead mode: this iteration's slot from the decision posted at the
        previous step."""
        self._record(decision)
        self.slot = decision.slot

    def status(self) -> dict[str, object]:
        """What the agent did so far (JSON-ready)."""
        return {
            "period_s": self.period_s,
            "shift_s": self.shift_s,
            "tolerance_s": self.tolerance_s,
            "iterations": self.iteration,
            "realignments": self.realignments,
            "startup_skipped_slots": self.startup_skipped_slots,
            "released": self.released,
            "released_by_partner": self.released_by_partner,
            "release_reason": self.release_reason,
        }


@dataclass
class GroupRelease:
    """One held job's part in releasing its group together (pure; planner rank only).

    ``partners``: the jobs held in the same group (sharing a link with it, or with a job
    that does).  Each iteration the caller hands :meth:`check` the jobs it knows to be
    released (from the service's registry or the testbed's release board); a partner
    among them, or the job itself (released by hand), makes the agent release at its next
    decision.  :meth:`report_due` is True once, after the job released *itself* (its own
    lateness), so the caller tells the others; a job released with its group need not.
    """

    job_id: str
    partners: frozenset[str]
    reported: bool = False

    def check(self, agent: TimeShiftAgent, released_jobs: Iterable[str]) -> str | None:
        """The job that releases this one (a partner, or itself by hand), asking ``agent``
        to release; None when none is released or the agent already runs free."""
        if agent.released or agent.pending_release is not None:
            return None
        released = set(released_jobs)
        if self.job_id in released and not self.reported:
            agent.request_release(f"{self.job_id} released by hand")
            return self.job_id
        for partner in sorted(self.partners & released):
            agent.request_release(f"released with its group: partner {partner} runs free")
            return partner
        return None

    def report_due(self, agent: TimeShiftAgent) -> bool:
        """True once, when the job released itself and the others were not told yet."""
        if agent.released and not agent.released_by_partner and not self.reported:
            self.reported = True
            return True
        return False


def replayed_realignments(durations_s: Sequence[float], period_s: float, **options: float) -> int:
    """How often an agent holding a job to ``period_s`` (seconds) would re-align it (a
    release counting as one) if its iterations took ``durations_s`` (seconds each, from
    start to done, in order): the agent's own decisions (:meth:`TimeShiftAgent.plan`) on
    an injected clock, each iteration starting at its slot or when the last one ended
    (the first on its epoch: no start-up catch-up, every skip is a re-alignment).
    ``options``: the agent's ``drift_tolerance``, ``patience``, ``max_realignments`` and
    ``window``."""
    now = [0.0]
    agent = TimeShiftAgent(
        0.0, period_s, 0.0, clock=lambda: now[0], sleep=lambda _s: None, **options
    )
    for duration in durations_s:
        if agent.released:
            break
        now[0] = max(now[0], agent.plan().target_s) + duration
    return agent.realignments
