"""What advice costs: the period a link's bytes require, and each job's predicted
iteration time with its time-shift and without, from the profiles alone.

Fluid model of one link (:func:`simulate_link`).  A job's phases are what it sends in
each iteration: phase ``k`` becomes ready ``start_s`` after the iteration starts (compute
is not slowed by the network) and carries ``rate_bps * duration_s`` bits at no more than
``rate_bps`` (what it reached on a dedicated link).  A job sends one phase at a time (one
communication stream): a phase waits for the job's previous one.  The iteration ends the
dedicated tail (iteration time minus the last phase's end) after its last phase is sent,
or at its dedicated length, whichever is later.  The next iteration starts then
(free-running, "same start": every job starts at 0) or at its slot ``shift_s + k *
period_s`` if that is later (held by the time-shift agent).  Phases sending at the same
time share the capacity max-min fairly (or proportionally to their rates).  A job's
predicted iteration time is the mean interval between iteration starts after a warm-up,
and over several links the largest.

Pure: no I/O, deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cassini import schema
from cassini.circle import LinkSolution
from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.shared_cache import SharedCache

#: Predictions kept for reuse (the same link, jobs and slots recur across calls).
CACHE_SIZE = 8192
_CACHE: SharedCache[LinkRun] = SharedCache(CACHE_SIZE)


#: The most events one link simulation takes (:func:`simulate_link`): jobs whose
#: iteration times differ by orders of magnitude make the fast ones run thousands of
#: iterations while the slow one runs its few (a 100 s job beside 0.2 s ones: 88,000
#: events, about a second); past this the simulation gives up (:class:`NotConverged`).
MAX_EVENTS = 250_000


class NotConverged(RuntimeError):
    """A link simulation did not finish within its event limit (:data:`MAX_EVENTS`): no
    prediction for those jobs.  The message says why."""


@dataclass(frozen=True)
class Slot:
    """Where the time-shift agent holds a job: iteration ``k`` starts no earlier than
    ``shift_s + k * period_s`` seconds.  Checked on construction: ``shift_s`` finite and
    >= 0, ``period_s`` finite and > 0 (raises :class:`InputError`)."""

    shift_s: float
    period_s: float

    def __post_init__(self) -> None:
        # NaN fails both comparisons; bools and strings are not seconds
        shift, period = self.shift_s, self.period_s
        if not (type(shift) is float and 0.0 <= shift < math.inf):
            schema.number(shift, "shift_s", non_negative=True)
        if not (type(period) is float and 0.0 < period < math.inf):
            schema.number(period, "period_s", positive=True)


@dataclass(frozen=True)
class LinkRun:
    """One link simulated: per job the mean iteration time (s) after the warm-up, the
    iterations completed, the bits sent (integrated rate) and the bits of the phases
    completed; ``peak_rate_bps`` is the largest total rate the link carried."""

    iteration_times_s: dict[str, float]
    iterations: dict[str, int]
    bits_sent: dict[str, float]
    bits_completed: dict[str, float]
    horizon_s: float
    peak_rate_bps: float


LINE_RATE_SHARE = 0.9
"""A phase sending at this share of a link's capacity or more runs at line rate: it holds
the link for its whole duration (:func:`link_time_s`)."""


def link_time_s(profile: JobProfile, capacity_bps: float) -> float:
    """Seconds of a link's time one iteration of the job needs: each phase's bits at the
    link's capacity, except that a phase at line rate (:data:`LINE_RATE_SHARE` of the
    capacity or more) takes at least its measured duration.  Such a phase moves its
    bytes as fast as the job can move them and no other job's phase fits beside it; what
    it takes beyond its bits at capacity is the job's own pauses (a ring all-reduce's
    steps, acknowledgements), too short for another phase.  Two synthetic jobs whose
    1.25 MB phases need 54.9 ms at a 182 Mbit/s payload rate ran them in 56-57 ms alone;
    held to a period with room for 2 x 54.9 ms, they touched, ran 70-110 ms and were
    released in 4 of 10 runs.  A slower phase (DDP buckets that the backward pass paces)
    counts only its bits: it can share."""
    schema.number(capacity_bps, "capacity_bps", positive=True)
    total = 0.0
    for p in profile.phases:
        at_capacity = p.rate_bps * p.duration_s / capacity_bps
        line_rate = p.rate_bps >= LINE_RATE_SHARE * capacity_bps
        total += max(at_capacity, p.duration_s) if line_rate else at_capacity
    return total


def link_load(profiles: Iterable[JobProfile], capacity_bps: float) -> float:
    """Fraction of the link the jobs need: ``sum_j link_time_s(j) / iteration_time_j``
    (:func:`link_time_s`: their bits at the capacity, phases at line rate for their
    durations; above 1: no rotation can fit them)."""
    schema.number(capacity_bps, "capacity_bps", positive=True)
    return float(sum(link_time_s(p, capacity_bps) / p.iteration_time_s for p in profiles))


def bytes_stretch(profiles: Iterable[JobProfile], capacity_bps: float) -> float:
    """The factor by which the jobs sharing a link must lengthen their periods so that
    their bytes fit: ``max(1, link_load)`` (1 unless the bytes need more than the link).
    The bytes count, not how long the phases last: DDP's phases span most of an
    iteration below line rate and may overlap freely; only a phase at line rate counts
    its duration, which is how long its bytes take (:func:`link_time_s`)."""
    return max(1.0, link_load(profiles, capacity_bps))


def period_slack(link_load: float, low: float = 0.03, high: float = 0.03) -> float:
    """Slack (fraction of the period) an agent's period needs beyond the jobs' jitter, on a
    link whose jobs' bytes need ``link_load`` of it (:func:`link_load`, after any stretch):
    ``low`` below 80 % load, ``high`` from 95 %, linear in between; 3 % at any load by
    default.

    Why 3 % at every load: on a link the bytes (nearly) fill, phases sit back to back and
    a late one overlaps its neighbour (two synthetic 50 % jobs at 1 %: both jobs released
    in 4 of 5 runs).  With free time on the circle a late phase lands in a gap, but the
    slack is also what lets a late job catch up, and held jobs that share a cluster run a
    little longer than alone (a VGG-11 DDP pair at 72 % load: 3-4 %), so 1 % there left
    no room to catch up (0-4 re-alignments per run against 0-1 at 3 %).  The runs are in
    ``docs/results.md``, section 3."""
    if not math.isfinite(link_load) or link_load < 0:
        raise InputError("link_load", f"must be a finite number >= 0, got {link_load!r}")
    if link_load <= 0.8:
        return low
    if link_load >= 0.95:
        return high
    return low + (high - low) * (link_load - 0.8) / 0.15


MAX_PROPAGATED_STRETCH = 0.25
"""How much longer than its own links ask (fraction) a job may be held so that the jobs
it shares links with agree on one circle (:func:`held_periods_s`)."""


def requested_periods_s(
    profiles: Mapping[str, JobProfile], link_solutions: Iterable[LinkSolution]
) -> dict[str, float]:
    """What each job's own links ask of its held period (seconds, before slack): the
    longest ``P / repeats`` over its links, ``P`` the link's circle stretched by its
    :func:`bytes_stretch`, never under the job's own stretched iteration time.  The
    first pass of :func:`held_periods_s`.  A link with one job (the advisor's link that
    a job crosses alone above its capacity) asks nothing: there is nothing to interleave
    with, so no agent holds the job for it.

    Raises InputError naming ``profiles`` unless it is a mapping job id -> profile, or
    ``link_solutions[i]`` for a job of a link that ``profiles`` lacks."""
    sols = list(link_solutions)
    _check_profiles(profiles, sols)
    return _requested(profiles, sols)


def _requested(
    profiles: Mapping[str, JobProfile], link_solutions: Iterable[LinkSolution]
) -> dict[str, float]:
    """:func:`requested_periods_s` of checked arguments."""
    period: dict[str, float] = {}
    for sol in link_solutions:
        if len(sol.job_ids) < 2:
            continue
        stretch = bytes_stretch((profiles[j] for j in sol.job_ids), sol.capacity_bps)
        reps = sol.unified.repeats
        need = max(
            [sol.unified.period_s]
            + [profiles[j].iteration_time_s * reps[k] for k, j in enumerate(sol.job_ids)]
        )
        for k, j in enumerate(sol.job_ids):
            # ``need / reps[k]`` can round a hair below the job's own iteration time
            # (x * r / r != x in floating point): never hold a job under its own period.
            own = profiles[j].iteration_time_s * stretch
            period[j] = max(period.get(j, 0.0), need * stretch / reps[k], own)
    return period


def _check_profiles(
    profiles: Mapping[str, JobProfile], link_solutions: Sequence[LinkSolution] = ()
) -> None:
    """InputError naming ``profiles`` unless it is a mapping (job id -> profile), or
    ``link_solutions[i]`` for a job of a shared link (2+ jobs) that it lacks."""
    if not isinstance(profiles, Mapping):
        raise InputError(
            "profiles", f"must be a mapping job id -> JobProfile, got {schema.kind_of(profiles)}"
        )
    for i, sol in enumerate(link_solutions):
        if len(sol.job_ids) > 1:
            for j in sol.job_ids:
                if j not in profiles:
                    raise InputError(f"link_solutions[{i}]", f"job {j!r} is not in profiles")


def held_periods_s(
    profiles: Mapping[str, JobProfile], link_solutions: Iterable[LinkSolution]
) -> dict[str, float]:
    """Period (seconds, before slack) the agent holds each job that shares a link to.

    Jobs that share a link must be held to periods in the exact ratio of the link's
    unified circle (``P / repeats``), or their offsets drift apart by the difference
    every iteration (90.0 ms against 90.2 ms: 8 ms in 40 iterations).  So on each link
    ``P`` is the longest of ``iteration_time * repeats`` over its jobs (the unified
    period when that is longer), stretched by the link's :func:`bytes_stretch`; a job's
    period is the longest ``P / repeats`` over its links, and links are revisited until
    the jobs they share agree (bounded: a job on links whose repeats disagree takes the
    longest and may drift on the others).  Where links form a loop whose repeats disagree
    no common period exists and every revisit would stretch the loop further (periods of
    10^5 s on a 1,024-GPU simulation); so a revisit may raise a job's period by at most
    :data:`MAX_PROPAGATED_STRETCH` over what its own links ask, and past that the job keeps
    its period and drifts on the link that asked for more (:func:`drifting_links` names
    those links; the advice gives their held jobs a reason).  Links with one job are
    ignored (:func:`requested_periods_s`): a job on such links only is not held."""
    given = list(link_solutions)
    _check_profiles(profiles, given)
    sols = [sol for sol in given if len(sol.job_ids) > 1]
    period = _requested(profiles, sols)
    ceiling = {j: p * (1 + MAX_PROPAGATED_STRETCH) for j, p in period.items()}
    for _ in range(4 * len(sols) + 1):
        changed = False
        for sol in sols:
            reps = sol.unified.repeats
            circle = max(period[j] * reps[k] for k, j in enumerate(sol.job_ids))
            for k, j in enumerate(sol.job_ids):
                if period[j] * (1 + 1e-12) < circle / reps[k] <= ceiling[j]:
                    period[j], changed = circle / reps[k], True
        if not changed:
            break
    return period


#: Relative difference under which two held jobs' ``period * repeats`` on a link count as
#: the same circle (:func:`drifting_links`): float noise, not drift.
COMMENSURATE_RTOL = 1e-9


def drifting_links(
    link_solutions: Mapping[str, LinkSolution], held: Mapping[str, float]
) -> dict[str, tuple[str, ...]]:
    """The links whose held jobs drift against each other: link id -> its jobs in
    ``held`` (job id -> held period, seconds; slack or not, as long as it is the same
    factor for all), for every link with 2+ of them whose ``period * repeats`` differ by
    more than :data:`COMMENSURATE_RTOL` (relative), that is whose periods are not in the
    ratio of the link's unified circle.  :func:`held_periods_s` leaves them so where the
    stretch that would make them commensurate exceeds :data:`MAX_PROPAGATED_STRETCH`;
    their slots then slide against each other every iteration.  Jobs not in ``held``
    (run free) are left out."""
    out: dict[str, tuple[str, ...]] = {}
    for link, sol in link_solutions.items():
        reps = sol.unified.repeats
        circles = {j: held[j] * reps[k] for k, j in enumerate(sol.job_ids) if j in held}
        if len(circles) > 1 and max(circles.values()) > min(circles.values()) * (
            1.0 + COMMENSURATE_RTOL
        ):
            out[link] = tuple(circles)
    return out


def agent_period_s(
    job_id: str,
    profiles: Mapping[str, JobProfile],
    link_solutions: Iterable[LinkSolution],
    *,
    slack: float = 0.0,
) -> float | None:
    """Period (seconds) the time-shift agent holds a job to, or None when the job shares
    none of the links (nothing to interleave with: no agent): its
    :func:`held_periods_s` (the link's unified circle, common to the jobs that share it,
    stretched by the largest :func:`bytes_stretch` of its links) times ``1 + slack`` for
    jitter.  Raises InputError for a ``slack`` that is not a finite number >= 0, and as
    :func:`requested_periods_s` does.
    """
    schema.number(slack, "slack", non_negative=True)
    period = held_periods_s(profiles, link_solutions).get(job_id)
    return None if period is None else period * (1.0 + slack)


def agent_periods_s(
    profiles: Mapping[str, JobProfile],
    link_solutions: Iterable[LinkSolution],
    *,
    slack: float = 0.0,
    shift: Mapping[str, bool] | None = None,
) -> dict[str, float]:
    """:func:`agent_period_s` of every job that shares a link, leaving out the jobs the
    advice does not shift (``shift[job]`` false: they run free)."""
    schema.number(slack, "slack", non_negative=True)
    held = held_periods_s(profiles, link_solutions)
    return {
        j: period * (1.0 + slack)
        for j, period in held.items()
        if j in profiles and (shift is None or shift.get(j, False))
    }


def jitter_beyond_room(jitter: float, held_period_s: float, iteration_time_s: float) -> float:
    """The part of a job's jitter (fraction of its period) that its held period does not
    already leave it as idle time: ``max(0, jitter - (held_period_s / iteration_time_s -
    1))``.  A job held to a period longer than its own iteration (a link its jobs' bytes
    more than fill stretches the circle; commensurate periods round it up) idles for the
    difference in every iteration, and an iteration late by less than that still ends
    before its next slot: its slack for jitter need only cover the rest.  Where the held
    period is the iteration time (a link with free time) this is ``jitter`` itself."""
    schema.number(jitter, "jitter", non_negative=True)
    schema.number(held_period_s, "held_period_s", positive=True)
    schema.number(iteration_time_s, "iteration_time_s", positive=True)
    return max(0.0, jitter - max(0.0, held_period_s / iteration_time_s - 1.0))


def simulate_link(
    profiles: Sequence[JobProfile],
    capacity_bps: float,
    slots: Mapping[str, Slot | None] | None = None,
    *,
    iterations: int = 6,
    warmup: int = 1,
    sharing: str = "max-min",
) -> LinkRun:
    """Fluid simulation of the jobs sharing one link (see the module docstring) until
    every job has completed ``iterations`` iterations; a job without a slot runs free from
    time 0.  Iteration times are means over the iterations after the first ``warmup``.

    Returns a :class:`LinkRun` of its own (runs are kept for reuse: changing the one
    returned changes no later prediction).

    Raises InputError for a bad capacity, iteration count or sharing rule, or a job id
    given twice."""
    run = _link_run(profiles, capacity_bps, slots, iterations, warmup, sharing)
    return LinkRun(
        iteration_times_s=dict(run.iteration_times_s),
        iterations=dict(run.iterations),
        bits_sent=dict(run.bits_sent),
        bits_completed=dict(run.bits_completed),
        horizon_s=run.horizon_s,
        peak_rate_bps=run.peak_rate_bps,
    )


def _link_run(
    profiles: Sequence[JobProfile],
    capacity_bps: float,
    slots: Mapping[str, Slot | None] | None,
    iterations: int = 6,
    warmup: int = 1,
    sharing: str = "max-min",
) -> LinkRun:
    """:func:`simulate_link`'s run as kept for reuse: shared, read it only."""
    schema.number(capacity_bps, "capacity_bps", positive=True)
    if not (isinstance(iterations, int) and isinstance(warmup, int) and 0 <= warmup < iterations):
        raise InputError("iterations", f"need 0 <= warmup < iterations, got {warmup}, {iterations}")
    if sharing not in ("max-min", "proportional"):
        raise InputError("sharing", f"must be max-min or proportional, got {sharing!r}")
    slots = slots or {}
    key = (
        capacity_bps,
        iterations,
        warmup,
        sharing,
        tuple((p.job_id, p.iteration_time_s, p.phases, slots.get(p.job_id)) for p in profiles),
    )
    known = _CACHE.get(key)
    if known is not None:
        return known
    _check_unique(profiles)
    if sum(p.peak_rate_bps for p in profiles) <= capacity_bps:
        run = _uncontended(profiles, slots, iterations)
    else:
        run = _simulate(profiles, capacity_bps, slots, iterations, warmup, sharing)
    _CACHE.put(key, run)
    return run


def _check_unique(profiles: Sequence[JobProfile]) -> None:
    """InputError naming ``profiles[i]`` for a job id given twice (its runs would merge)."""
    seen: set[str] = set()
    for i, p in enumerate(profiles):
        if p.job_id in seen:
            raise InputError(f"profiles[{i}]", f"duplicate job id {p.job_id!r}")
        seen.add(p.job_id)


def clear_cache() -> None:
    """Forget the link simulations kept from earlier calls."""
    _CACHE.clear()


def predict_iteration_times(
    profiles: Mapping[str, JobProfile],
    links: Mapping[str, tuple[float, Sequence[str]]],
    slots: Mapping[str, Slot | None] | None = None,
    **kwargs: object,
) -> dict[str, float]:
    """Each job's predicted iteration time (s): the largest over the links given
    (``links[link] = (capacity_bps, job ids)``, each simulated on its own by
    :func:`simulate_link`); a job on none of them keeps its own iteration time, or its
    slot period when held to a longer one.  A link may carry one job: the advisor
    passes the links one job crosses alone at a peak rate above the capacity, where the
    job alone is slowed (4e9 bits per iteration at 1e10 bit/s take 0.4 s).  Raises
    InputError naming ``profiles`` unless it is a mapping, or ``links['id']`` for a job
    that ``profiles`` lacks, and as :func:`simulate_link` does."""
    _check_profiles(profiles)
    slots = slots or {}
    out = {}
    for job_id, p in profiles.items():
        slot = slots.get(job_id)
        out[job_id] = max(p.iteration_time_s, slot.period_s if slot else 0.0)
    for link, (capacity, job_ids) in links.items():
        try:
            on_link = [profiles[j] for j in job_ids]
        except KeyError as e:
            raise InputError(f"links[{link!r}]", f"job {e.args[0]!r} is not in profiles") from None
        run = _link_run(on_link, capacity, slots, **kwargs)
        for j, t in run.iteration_times_s.items():
            out[j] = max(out[j], t)
    return out


class _Job:
    """Mutable state of one job in the simulation."""

    __slots__ = (
        "id",
        "offsets",
        "bits",
        "caps",
        "period",
        "tail",
        "slot",
        "starts",
        "k",
        "start",
        "wait",
        "rem",
        "sent",
        "done",
    )

    def __init__(self, profile: JobProfile, slot: Slot | None) -> None:
        phases = [p for p in profile.phases if p.rate_bps * p.duration_s > 0]
        self.id = profile.job_id
        self.offsets = [p.start_s for p in phases]
        self.bits = [p.rate_bps * p.duration_s for p in phases]
        self.caps = [p.rate_bps for p in phases]
        self.period = profile.iteration_time_s
        self.tail = profile.iteration_time_s - phases[-1].end_s
        self.slot = slot
        self.start = slot.shift_s if slot else 0.0
        self.starts = [self.start]
        self.k = 0
        self.wait = self.start + self.offsets[0]
        self.rem = -1.0  # < 0: waiting for ``wait``; else bits left of phase k
        self.sent = 0.0
        self.done = 0.0

    def finish(self, t: float) -> None:
        """Phase k is sent at time t: on to the next phase (maybe of the next iteration)."""
        self.done += self.bits[self.k]
        self.rem = -1.0
        self.k += 1
        if self.k < len(self.bits):
            self.wait = max(self.start + self.offsets[self.k], t)
            return
        end = max(self.start + self.period, t + self.tail)
        if self.slot is not None:
            end = max(end, self.slot.shift_s + len(self.starts) * self.slot.period_s)
        self.start = end
        self.starts.append(end)
        self.k = 0
        self.wait = max(end + self.offsets[0], t)


def _share(caps: list[float], capacity: float, sharing: str) -> list[float]:
    """Rates (bits/s) of phases with rate caps sharing a link."""
    total = sum(caps)
    if total <= capacity:
        return caps
    if sharing == "proportional":
        return [c * capacity / total for c in caps]
    rates = [0.0] * len(caps)
    left, n = capacity, len(caps)
    for rank, i in enumerate(sorted(range(n), key=caps.__getitem__)):
        rates[i] = min(caps[i], left / (n - rank))
        left -= rates[i]
    return rates


def _uncontended(
    profiles: Sequence[JobProfile], slots: Mapping[str, Slot | None], iterations: int
) -> LinkRun:
    """The closed form when every phase can send at its own rate at once (the peak rates
    fit in the link): each iteration lasts its dedicated time, held jobs wait for their
    slots."""
    times, sent, horizon = {}, {}, 0.0
    for p in profiles:
        slot = slots.get(p.job_id)
        times[p.job_id] = max(p.iteration_time_s, slot.period_s if slot else 0.0)
        first = slot.shift_s if slot else 0.0
        horizon = max(horizon, first + iterations * times[p.job_id])
        sent[p.job_id] = iterations * p.bits_per_iteration
    return LinkRun(
        iteration_times_s=times,
        iterations=dict.fromkeys(times, iterations),
        bits_sent=sent,
        bits_completed=dict(sent),
        horizon_s=horizon,
        peak_rate_bps=float(sum(p.peak_rate_bps for p in profiles)),
    )


def _simulate(
    profiles: Sequence[JobProfile],
    capacity: float,
    slots: Mapping[str, Slot | None],
    iterations: int,
    warmup: int,
    sharing: str,
) -> LinkRun:
    senders = [
        _Job(p, slots.get(p.job_id)) for p in profiles if p.bits_per_iteration > 0 and p.phases
    ]
    times: dict[str, float] = {}
    for p in profiles:  # silent jobs: their own (or their slot's) period
        slot = slots.get(p.job_id)
        times[p.job_id] = max(p.iteration_time_s, slot.period_s if slot else 0.0)
    eps = 1e-12 * max([p.iteration_time_s for p in profiles] + [1e-9])
    t, peak = 0.0, 0.0
    # a job runs about longest / its own period iterations while the slowest runs its own
    longest = max([times[j.id] for j in senders] + [0.0])
    needed = sum(
        (iterations * math.ceil(longest / times[j.id]) + 2) * (len(j.bits) + 1) for j in senders
    )
    limit = min(MAX_EVENTS, 64 * needed + 64)
    for _ in range(limit):
        if all(len(j.starts) > iterations for j in senders):
            break
        active = [j for j in senders if j.rem >= 0.0]
        rates = _share([j.caps[j.k] for j in active], capacity, sharing) if active else []
        peak = max(peak, sum(rates))
        t_next = math.inf
        for j, r in zip(active, rates, strict=True):
            t_next = min(t_next, t + j.rem / r)
        for j in senders:
            if j.rem < 0.0:
                t_next = min(t_next, j.wait)
        dt = max(0.0, t_next - t)
        t = t_next
        for j, r in zip(active, rates, strict=True):
            moved = min(j.rem, r * dt)
            j.rem -= moved
            j.sent += moved
            if j.rem <= 1e-9 * j.bits[j.k] or j.rem <= r * eps:
                j.sent += j.rem
                j.finish(t)
        for j in senders:
            if j.rem < 0.0 and j.wait <= t + eps:
                j.rem = j.bits[j.k]
    else:
        spread = [times[j.id] for j in senders]
        raise NotConverged(
            f"link simulation did not finish within {limit} events (iteration times "
            f"{min(spread):g} s to {max(spread):g} s)"
        )
    done = {}
    for j in senders:
        gaps = np.diff(np.asarray(j.starts[: iterations + 1]))[warmup:]
        # a held job that fell behind catches up with its slots (gaps under the period)
        # but cannot run faster than them in the long run
        times[j.id] = max(float(gaps.mean()), j.slot.period_s if j.slot else 0.0)
        done[j.id] = j.done
    return LinkRun(
        iteration_times_s=times,
        iterations={j.id: len(j.starts) - 1 for j in senders},
        bits_sent={j.id: j.sent for j in senders},
        bits_completed=done,
        horizon_s=t,
        peak_rate_bps=peak,
    )
