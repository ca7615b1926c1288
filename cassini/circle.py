"""Geometric abstraction of CASSINI (NSDI 2024, §3, Table 1): jobs sharing a link are
rolled onto one circle whose perimeter is their unified period, discretised into ``|A|``
angles; the rotations that interleave their Up phases maximise the compatibility score

    score = 1 - sum_a Excess(demand_a) / (|A| * C),   Excess(d) = max(0, d - C).

Demand on each angle is the exact mean rate of every rotated job over that angle's arc
(bits/s), so a phase shorter than an arc still counts with its bytes.  A rotation by ``k``
angles is a time-shift of ``k * p / |A|`` seconds modulo the job's iteration time
(paper Eq. 5); shifting job ``j`` by ``t`` means its rate at ``x`` is ``rate_j((x-t) mod T_j)``.

Angles never leave this module: callers see seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import ModuleType

import numpy as np

from cassini import schema
from cassini.agent import MAX_PERIOD_S, MAX_RATE_BPS, MIN_PERIOD_S
from cassini.errors import InputError
from cassini.profile import _EPS as _PROFILE_EPS
from cassini.profile import JobProfile, Phase
from cassini.shared_cache import SharedCache

#: Largest exact search, in (combinations of rotations) x (angles); beyond it the
#: coordinate-descent heuristic runs.  4 jobs of one period at 5 degrees = 72**4 ~ 2.7e7.
EXACT_BUDGET = 3.0e7
#: Demand rows (one job on one circle) kept by :func:`demand_vectors` for reuse.
DEMAND_ROW_CACHE_SIZE = 8192
_DEMAND_ROWS: SharedCache[np.ndarray] = SharedCache(DEMAND_ROW_CACHE_SIZE)
#: The smallest link capacity (bits/s) :func:`compatibility_score` takes: below one bit
#: per second is no link (and its score's arithmetic overflows).
MIN_CAPACITY_BPS = 1.0


@dataclass(frozen=True)
class UnifiedPeriod:
    """The perimeter of the unified circle.

    ``period_s`` is a common multiple of the jobs' iteration times; job ``i`` repeats
    ``repeats[i]`` times around it, so the circle treats its iteration time as
    ``period_s / repeats[i]``.  ``max_relative_error`` is the largest relative difference
    between that and the real iteration time.  ``exact``: the circle is the LCM of the
    times on the resolution's grid *and* that grid errs by at most the tolerance; else the
    fallback's stretch, or a grid too coarse for a job (an iteration shorter than a few
    resolution steps: 0.4 ms at 1 ms is taken as 1 ms, an error of 1.5), which is reported
    as not exact (see :func:`unified_period`).
    """

    period_s: float
    repeats: tuple[int, ...]
    max_relative_error: float
    exact: bool

    def effective_iteration_times_s(self) -> tuple[float, ...]:
        return tuple(self.period_s / m for m in self.repeats)


def unified_period(
    iteration_times_s: Sequence[float],
    *,
    resolution_s: float = 1e-3,
    max_period_factor: int = 8,
    tolerance: float = 0.01,
) -> UnifiedPeriod:
    """Unified period of several jobs: the LCM of their iteration times quantised to
    ``resolution_s`` seconds (paper §3).

    Guard against blow-up: the LCM of nearly coprime times explodes (173 ms and 251 ms
    give 43.4 s, on which 72 angles cannot resolve either job).  The circle is capped at
    ``max_period_factor`` times the longest iteration (so every job keeps at least
    ``|A| / max_period_factor`` angles per iteration).  Above the cap the fallback
    *stretches* jobs: it picks a period ``P = m * T_j`` (some job, some whole ``m``) and
    gives every other job ``floor(P / T_i)`` iterations, so each effective iteration time
    is at least the real one and a time-shift agent can hold it by idling.  It takes the
    shortest ``P`` whose worst stretch is at most ``tolerance``, else the ``P`` with the
    least worst stretch.  The search is over at most ``jobs * max_period_factor * T_max /
    T_min`` periods: no hang, no large allocation.

    Raises
    ------
    InputError on an empty list, non-positive times or a non-positive resolution.

    Examples
    --------
    >>> unified_period([0.040, 0.060]).period_s
    0.12
    >>> u = unified_period([0.173, 0.251]); u.exact, u.repeats
    (False, (10, 7))
    """
    if len(iteration_times_s) == 0:
        raise InputError("jobs", "must not be empty")
    if not (resolution_s > 0 and math.isfinite(resolution_s)):
        raise InputError("resolution_s", f"must be > 0, got {resolution_s!r}")
    if not (isinstance(max_period_factor, int) and max_period_factor >= 1):
        raise InputError("max_period_factor", f"must be an integer >= 1, got {max_period_factor!r}")
    # plain floats: a handful of jobs, where numpy's per-call cost dominates (same
    # operations as the array version, tested equal)
    array = np.asarray(iteration_times_s, float)
    times = array.tolist()
    if not all(math.isfinite(t) and t > 0 for t in times):
        raise InputError("iteration_time_s", "must be finite and > 0")
    ticks = np.maximum(1, np.rint(array / resolution_s)).astype(np.int64).tolist()
    cap_ticks = max_period_factor * max(ticks)
    lcm = 1
    for t in ticks:
        lcm = math.lcm(lcm, t)
        if lcm > cap_ticks:
            break
    if lcm <= cap_ticks:
        period_s = lcm * resolution_s
        repeats = tuple(int(lcm // t) for t in ticks)
        exact = True
    else:
        period_s, repeats = _stretched_period(times, max_period_factor, tolerance)
        exact = False
    error = max(abs(period_s / float(r) - t) / t for r, t in zip(repeats, times, strict=True))
    return UnifiedPeriod(period_s, repeats, error, exact and error <= tolerance)


#: Candidate periods up to which :func:`_stretched_period` lists them in plain floats.
_PLAIN_PERIODS = 4096


def _stretched_period(
    times: list[float], max_period_factor: int, tolerance: float
) -> tuple[float, tuple[int, ...]]:
    """:func:`unified_period`'s fallback: among the periods ``m * T_j`` from the longest
    iteration up to ``max_period_factor`` times it, in increasing order, the first whose
    worst stretch ``P / (floor(P / T_i) * T_i) - 1`` is at most ``tolerance``, else the
    first with the least worst stretch; returns (period in seconds, repeats per job)."""
    longest = max(times)
    cap_s = max_period_factor * longest
    counts = [math.floor(cap_s / t) for t in times]
    t = np.array(times)
    if sum(counts) <= _PLAIN_PERIODS:
        periods = np.array(
            sorted(
                {
                    p
                    for ti, c in zip(times, counts, strict=True)
                    for k in range(1, c + 1)
                    if (p := ti * k) >= longest
                }
            )
        )
    else:  # as arrays: an astronomical count (absurd iteration times) raises MemoryError
        periods = np.concatenate(
            [ti * np.arange(1, c + 1) for ti, c in zip(t, counts, strict=True)]
        )
        periods = np.unique(periods[periods >= longest])
    reps = np.floor(periods[:, None] / t[None, :] + 1e-9)
    worst = np.max(periods[:, None] / (reps * t[None, :]) - 1.0, axis=1)
    within = np.flatnonzero(worst <= tolerance)
    best = int(within[0]) if within.size else int(worst.argmin())
    return float(periods[best]), tuple(int(r) for r in reps[best])


@dataclass(frozen=True, eq=False)
class LinkSolution:
    """The best rotations of the jobs on one link.

    ``time_shifts_s[job]`` is in [0, T_job) (paper Eq. 5), the first job in id order at 0;
    ``demand_bps`` is the summed demand on each of the ``|A|`` angles at those shifts,
    angle ``a`` covering [a, a+1) * period_s / |A| seconds; ``vectors`` holds each job's
    own demand per angle at shift 0 (rows in ``job_ids`` order).
    """

    score: float
    time_shifts_s: dict[str, float]
    unified: UnifiedPeriod
    capacity_bps: float
    demand_bps: np.ndarray
    method: str  # "exact" or "heuristic"
    job_ids: tuple[str, ...] = field(default=())
    vectors: np.ndarray | None = None

    def own_copy(self) -> LinkSolution:
        """This solution with a ``time_shifts_s`` of its own (the rest shared): what a
        caller may change without changing a solution kept for reuse."""
        return replace(self, time_shifts_s=dict(self.time_shifts_s))

    def rotations_of(
        self, job_id: str, shifts_s: np.ndarray, iteration_time_s: float
    ) -> np.ndarray:
        """The angles (rounded) at which time-shifts in real seconds put a job."""
        i = self.job_ids.index(job_id)
        t_eff = self.unified.period_s / self.unified.repeats[i]
        step = self.unified.period_s / self.n_angles
        angles = np.rint(np.asarray(shifts_s) * (t_eff / iteration_time_s / step))
        return angles.astype(np.int64) % self.n_angles

    @property
    def unified_period_s(self) -> float:
        return self.unified.period_s

    @property
    def n_angles(self) -> int:
        return int(self.demand_bps.size)


#: The finest angle step, degrees (3,600 angles).  Finer ones cost memory and time (the
#: rotation tables grow with the square of the angles: 0.001 degrees asked numpy for
#: 966 GiB) without changing a ranking.  One bound for the CLI, the service and sim
#: configs.
MIN_PRECISION_DEG = 0.1
MAX_PRECISION_DEG = 180.0


def n_angles(precision_deg: float) -> int:
    """Number of discrete angles ``|A|`` for a precision in degrees (5 -> 72); the
    precision must be in [:data:`MIN_PRECISION_DEG`, :data:`MAX_PRECISION_DEG`]."""
    if isinstance(precision_deg, bool) or not (
        isinstance(precision_deg, int | float) and math.isfinite(precision_deg)
    ):
        raise InputError("precision_deg", f"must be a number, got {precision_deg!r}")
    if not MIN_PRECISION_DEG <= precision_deg <= MAX_PRECISION_DEG:
        raise InputError(
            "precision_deg",
            f"must be in [{MIN_PRECISION_DEG:g}, {MAX_PRECISION_DEG:g}] degrees, "
            f"got {precision_deg:g}",
        )
    return max(2, int(round(360.0 / precision_deg)))


def excess(demand_bps: np.ndarray, capacity_bps: float) -> np.ndarray:
    """Paper Eq. 1: demand above capacity, elementwise (bits/s)."""
    return np.maximum(demand_bps - capacity_bps, 0.0)


def score_of_demand(demand_bps: np.ndarray, capacity_bps: float) -> float:
    """Paper Eq. 2 over the last axis: ``1 - sum Excess / (|A| C)``; 1 when nothing exceeds."""
    total = excess(demand_bps, capacity_bps).sum(axis=-1)
    return 1.0 - total / (demand_bps.shape[-1] * capacity_bps)


def demand_vectors(jobs: Sequence[JobProfile], unified: UnifiedPeriod, angles: int) -> np.ndarray:
    """Each job's mean rate (bits/s) on each angle of the unified circle, shape (jobs, |A|).

    A job is first stretched to its effective iteration time ``period_s / repeats`` (a
    no-op when the period is exact), so its pattern closes on the circle.
    """
    return np.vstack(
        [
            _demand_row(job, t_eff, angles, unified.period_s, 0.0)
            for job, t_eff in zip(jobs, unified.effective_iteration_times_s(), strict=True)
        ]
    )


def _demand_row(
    job: JobProfile, t_eff: float, angles: int, period_s: float, shift_s: float
) -> np.ndarray:
    """``_stretched_bin_average(job, t_eff, angles, period_s, shift_s)`` (bits/s per
    angle, read-only).  A row depends on the job's profile, the circle and the shift
    only, so rows are kept for reuse (:data:`DEMAND_ROW_CACHE_SIZE`): a job recurs in
    every link problem it shares on the same circle, and a candidate's check scores the
    same shifts again."""
    key = (job.iteration_time_s, job.phases, t_eff, angles, period_s, shift_s)
    row = _DEMAND_ROWS.get(key)
    if row is not None:
        return row
    edges = _edges(period_s, angles)
    row = _stretched_bin_average(job, t_eff, angles, period_s, shift_s, edges=edges)
    row.setflags(write=False)
    _DEMAND_ROWS.put(key, row)
    return row


@lru_cache(maxsize=64)
def _edges(period_s: float, angles: int) -> np.ndarray:
    """``np.linspace(0.0, period_s, angles + 1)`` (read-only, shared)."""
    edges = np.linspace(0.0, period_s, angles + 1)
    edges.setflags(write=False)
    return edges


def clear_demand_rows() -> None:
    """Forget the demand rows kept by :func:`_demand_row` (benchmarks time cold calls)."""
    _DEMAND_ROWS.clear()


def compatibility_score(
    jobs: Sequence[JobProfile],
    capacity_bps: float,
    *,
    precision_deg: float = 5.0,
    resolution_s: float = 1e-3,
    max_period_factor: int = 8,
    method: str = "auto",
    restarts: int = 8,
    seed: int = 0,
) -> LinkSolution:
    """Best rotations of the jobs sharing one link and their compatibility score.

    Parameters
    ----------
    jobs : the jobs on the link (order does not matter: they are sorted by id).
    capacity_bps : link capacity in bits/s, at least :data:`MIN_CAPACITY_BPS`.
    precision_deg : angle step; ``|A| = 360 / precision_deg`` (5 degrees -> 72 angles).
    resolution_s, max_period_factor : see :func:`unified_period`.
    method : ``"exact"`` searches every combination of rotations over the grid
        (vectorised; job 0 fixed, each other job over its distinct rotations);
        ``"heuristic"`` is coordinate descent from a greedy start and ``restarts``
        seeded random starts; ``"auto"`` is exact while the search costs at most
        :data:`EXACT_BUDGET` (typically up to 4 jobs at 5 degrees), else heuristic.

    Returns
    -------
    LinkSolution with the score (<= 1), one time-shift per job in seconds and the demand
    curve at the best rotations.

    Raises
    ------
    InputError for jobs that are not a sequence of :class:`JobProfile` (a mapping, a
    single profile, dicts), no jobs, duplicate ids, a capacity under 1 bit/s, a bad
    precision, ``restarts`` or ``seed`` not an integer >= 0, or
    a job the circle's arithmetic cannot hold (the bounds of :mod:`cassini.agent`): an
    iteration time outside [:data:`~cassini.agent.MIN_PERIOD_S`,
    :data:`~cassini.agent.MAX_PERIOD_S`] seconds (a microsecond to a week) or a phase
    faster than :data:`~cassini.agent.MAX_RATE_BPS`; the error names the job by its
    position in ``jobs`` (``jobs[1].iteration_time_s``) and its id.

    Examples
    --------
    A 40 ms and a 60 ms job on a 120 ms circle: a rotation interleaves their phases.

    >>> from cassini.profile import JobProfile, Phase
    >>> a = JobProfile("a", 0.040, [Phase(0.0, 0.010, 1e9)])
    >>> b = JobProfile("b", 0.060, [Phase(0.0, 0.010, 1e9)])
    >>> sol = compatibility_score([a, b], 1e9)
    >>> round(sol.score, 9), round(sol.unified_period_s, 9), sol.unified.repeats
    (1.0, 0.12, (3, 2))
    """
    jobs = _checked_jobs(jobs, capacity_bps, method)
    restarts = schema.integer(restarts, "restarts", minimum=0)
    seed = schema.integer(seed, "seed", minimum=0)
    ids = tuple(j.job_id for j in jobs)
    angles = n_angles(precision_deg)
    unified = unified_period(
        [j.iteration_time_s for j in jobs],
        resolution_s=resolution_s,
        max_period_factor=max_period_factor,
    )
    vectors = demand_vectors(jobs, unified, angles)
    rotations, used = _best_rotations(vectors, angles, capacity_bps, method, restarts, seed)
    demand = rotated_sum(vectors, rotations)
    return LinkSolution(
        score=float(score_of_demand(demand, capacity_bps)),
        time_shifts_s=_time_shifts(jobs, rotations, unified, angles),
        unified=unified,
        capacity_bps=float(capacity_bps),
        demand_bps=demand,
        method=used,
        job_ids=ids,
        vectors=vectors,
    )


def _checked_jobs(jobs: Sequence[JobProfile], capacity_bps: float, method: str) -> list[JobProfile]:
    """:func:`compatibility_score`'s inputs checked, each error naming its field; the jobs
    sorted by id."""
    schema.number(capacity_bps, "capacity_bps", positive=True)
    check_capacity(capacity_bps, "capacity_bps")
    if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Iterable):
        hint = " (pass its values)" if isinstance(jobs, Mapping) else ""
        raise InputError(
            "jobs",
            f"must be a sequence of cassini.profile.JobProfile, got {schema.kind_of(jobs)}{hint}",
        )
    jobs = list(jobs)
    if len(jobs) == 0:
        raise InputError("jobs", "must not be empty")
    for i, job in enumerate(jobs):
        if not isinstance(job, JobProfile):
            raise InputError(
                f"jobs[{i}]", f"must be a cassini.profile.JobProfile, got {schema.kind_of(job)}"
            )
        check_job_bounds(job, f"jobs[{i}]")
    if method not in ("auto", "exact", "heuristic"):
        raise InputError("method", f"must be auto, exact or heuristic, got {method!r}")
    jobs = sorted(jobs, key=lambda j: j.job_id)
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise InputError("jobs", "duplicate job ids on one link")
    return jobs


def check_capacity(capacity_bps: float, field: str) -> None:
    """InputError naming ``field`` for a capacity under :data:`MIN_CAPACITY_BPS`."""
    if capacity_bps < MIN_CAPACITY_BPS:
        raise InputError(
            field,
            f"must be at least {MIN_CAPACITY_BPS:g} bit/s (no link is slower), "
            f"got {capacity_bps:g}",
        )


def check_job_bounds(job: JobProfile, field: str) -> None:
    """InputError naming ``field`` unless the job's iteration time is within
    [:data:`~cassini.agent.MIN_PERIOD_S`, :data:`~cassini.agent.MAX_PERIOD_S`] seconds and
    no phase is faster than :data:`~cassini.agent.MAX_RATE_BPS` (the service's bounds:
    within them the circle's arithmetic stays finite)."""
    period = job.iteration_time_s
    if not MIN_PERIOD_S <= period <= MAX_PERIOD_S:
        raise InputError(
            f"{field}.iteration_time_s",
            f"job {job.job_id!r}: must be in [{MIN_PERIOD_S:g}, {MAX_PERIOD_S:g}] seconds "
            f"(a microsecond to a week), got {period:g}",
        )
    for k, phase in enumerate(job.phases):
        if phase.rate_bps > MAX_RATE_BPS:
            raise InputError(
                f"{field}.phases[{k}].rate_bps",
                f"job {job.job_id!r}: must be at most {MAX_RATE_BPS:g} bits/s, "
                f"got {phase.rate_bps:g}",
            )


def _best_rotations(
    vectors: np.ndarray, angles: int, capacity_bps: float, method: str, restarts: int, seed: int
) -> tuple[list[int], str]:
    """The rotations (angles per job) that score best, centred, and the search used:
    exhaustive when ``method`` asks or ``"auto"`` finds it within :data:`EXACT_BUDGET`,
    else coordinate descent."""
    # job 0 stays at rotation 0 (one rotation): only the others' periods are searched
    periods = [1] + [rotation_period(v) for v in vectors[1:]]
    mats = [_rotation_matrix(v, k) for v, k in zip(vectors, periods, strict=True)]
    search_size = math.prod(periods[1:]) * angles
    if method == "exact" or (method == "auto" and search_size <= EXACT_BUDGET):
        rotations, used = _exact(vectors, periods, capacity_bps, mats), "exact"
    else:
        rotations = _coordinate_descent(vectors, periods, capacity_bps, restarts, seed, mats)
        used = "heuristic"
    return _centre(vectors, periods, capacity_bps, rotations, mats=mats), used


def _time_shifts(
    jobs: Sequence[JobProfile], rotations: Sequence[int], unified: UnifiedPeriod, angles: int
) -> dict[str, float]:
    """Each job's rotation as a time-shift in seconds within its own iteration."""
    step_s = unified.period_s / angles
    # a rotation is a shift on the (possibly stretched) circle; map it back to real time
    # Python's % on floats is np.mod's
    return {
        j.job_id: float((k * step_s) % t_eff / t_eff * j.iteration_time_s) % j.iteration_time_s
        for j, k, t_eff in zip(jobs, rotations, unified.effective_iteration_times_s(), strict=True)
    }


def rotation_period(vector: np.ndarray) -> int:
    """Smallest ``s`` dividing ``len(vector)`` with ``roll(vector, s) == vector``: the number
    of distinct rotations of a job on the circle (|A| / repeats when that divides).  A
    pure function of the values, so kept for reuse by their bytes (a job's row recurs in
    every link problem it shares on the same circle)."""
    vector = np.asarray(vector, dtype=float)
    return _rotation_period(vector.tobytes())


@lru_cache(maxsize=8192)
def _rotation_period(data: bytes) -> int:
    """:func:`rotation_period` of the float64 vector whose bytes are ``data``."""
    vector = np.frombuffer(data, dtype=float)
    n = vector.size
    atol = 1e-9 * max(1.0, float(np.abs(vector).max()))
    # roll(v, s) == v  <=>  v[i] == v[i + s] for every i (indices mod n): every divisor
    # at once, each row comparing v[i + s] with v[i] for i < n - s (padded with v[0] - v[0])
    divisors, left, right = _divisor_pairs(n)
    if divisors.size:
        fits = (np.abs(vector[right] - vector[left]).max(axis=1) <= atol).nonzero()[0]
        if fits.size:
            return int(divisors[fits[0]])
    return n


@lru_cache(maxsize=64)
def _divisor_pairs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The divisors ``s < n`` of ``n`` and, per divisor, the index pairs ``(i, i + s)`` for
    ``i < n - s``, padded with ``(0, 0)`` to ``n`` columns (read-only, shared)."""
    divisors = np.array([d for d in range(1, n) if n % d == 0], dtype=np.int64)
    left = np.zeros((divisors.size, n), dtype=np.int64)
    right = np.zeros((divisors.size, n), dtype=np.int64)
    for row, d in enumerate(divisors.tolist()):
        left[row, : n - d] = np.arange(n - d)
        right[row, : n - d] = np.arange(d, n)
    for a in (divisors, left, right):
        a.setflags(write=False)
    return divisors, left, right


def roll(vector: np.ndarray, k: int) -> np.ndarray:
    """``np.roll`` for one 1-D vector, without its generic overhead (a hot path)."""
    k = int(k) % vector.size
    return np.concatenate((vector[-k:], vector[:-k])) if k else vector.copy()


def rotated_sum(vectors: np.ndarray, rotations: Sequence[int]) -> np.ndarray:
    """Total demand when row ``i`` is rotated forward by ``rotations[i]`` angles."""
    total = np.zeros(vectors.shape[1])
    for v, k in zip(vectors, rotations, strict=True):
        total += roll(v, k)
    return total


def _rotation_matrix(vector: np.ndarray, count: int) -> np.ndarray:
    """Rows ``k = 0..count-1`` hold ``roll(vector, k)``."""
    return vector[_rotation_index(vector.size, count)]


@lru_cache(maxsize=256)
def _rotation_index(n: int, count: int) -> np.ndarray:
    """``idx[k, a] = (a - k) mod n`` for ``k < count`` (read-only, shared)."""
    idx = (np.arange(n)[None, :] - np.arange(count)[:, None]) % n
    idx.setflags(write=False)
    return idx


def _exact(
    vectors: np.ndarray,
    periods: list[int],
    capacity: float,
    mats: Sequence[np.ndarray] | None = None,
    *,
    compiled: bool = True,
) -> list[int]:
    """Optimum over the grid by branch and bound; job 0 stays at rotation 0.

    Adding a job never lowers the excess, so the excess of a partial assignment bounds
    every completion from below: branches whose bound reaches the best complete value
    (first from the greedy-plus-descent heuristic) are cut.  The last two free jobs are
    evaluated together as one (s1, s2, |A|) array.  ``mats[i]`` is
    ``_rotation_matrix(vectors[i], periods[i])`` (computed when not given).  Bounds are
    summed compiled where numba is installed and ``compiled`` is True (the same values).
    """
    n = len(vectors)
    if n == 1:
        return [0]
    if mats is None:
        mats = [_rotation_matrix(vectors[i], periods[i]) for i in range(n)]
    free = sorted(range(1, n), key=lambda i: -float(vectors[i].sum()))  # big jobs bound best
    outer, inner = free[:-2], free[-2:]
    # an upper bound to prune with: greedy plus descent (pointless for a single free job)
    descend = n > 2
    start = _coordinate_descent(vectors, periods, capacity, 0, 0, mats, compiled=compiled) \
        if descend else [0] * n  # fmt: skip
    best = [
        float(excess(rotated_sum(vectors, start), capacity).sum()) if n > 2 else math.inf,
        start,
    ]
    tol = 1e-9 * capacity
    kernels = _kernels(vectors.shape[1]) if compiled else None

    def excess_sums(base: np.ndarray, i: int) -> np.ndarray:
        """``excess(base + mats[i], capacity).sum(axis=-1)``, compiled where it can be
        (the same values)."""
        if kernels is not None:
            return kernels.excess_rows(base, vectors[i], periods[i], capacity)
        return excess(base[None, :] + mats[i], capacity).sum(axis=-1)

    def leaves(base: np.ndarray, chosen: dict[int, int]) -> None:
        first = base[None, :] + mats[inner[0]]
        bound = excess_sums(base, inner[0])
        rows = (bound < best[0] - tol).nonzero()[0]
        if rows.size == 0:
            return
        if len(inner) == 1:
            k = int(rows[bound[rows].argmin()])
            best[0], best[1] = float(bound[k]), _assign(n, chosen, {inner[0]: k})
            return
        if kernels is not None:
            totals = np.vstack([excess_sums(first[r], inner[1]) for r in rows.tolist()])
        else:
            grid = first[rows][:, None, :] + mats[inner[1]][None, :, :]
            grid -= capacity
            np.maximum(grid, 0.0, out=grid)
            totals = grid.sum(axis=-1)
        flat = int(totals.argmin())
        r, k = np.unravel_index(flat, totals.shape)
        if totals[r, k] < best[0] - tol:
            best[0] = float(totals[r, k])
            best[1] = _assign(n, chosen, {inner[0]: int(rows[r]), inner[1]: int(k)})

    def branch(depth: int, base: np.ndarray, chosen: dict[int, int]) -> None:
        if depth == len(outer):
            leaves(base, chosen)
            return
        i = outer[depth]
        partial = base[None, :] + mats[i]
        bound = excess_sums(base, i)
        for k in bound.argsort(kind="stable"):
            if bound[k] >= best[0] - tol:
                break
            branch(depth + 1, partial[k], {**chosen, i: int(k)})

    branch(0, vectors[0].astype(float), {})
    return [int(k) for k in best[1]]


def _centre(
    vectors: np.ndarray,
    periods: list[int],
    capacity: float,
    rotations: list[int],
    margin: float = 0.15,
    sweeps: int = 3,
    *,
    mats: Sequence[np.ndarray] | None = None,
    compiled: bool = True,
) -> list[int]:
    """Among rotations with the same (optimal) excess, prefer the ones with the most room
    around each phase, so that jitter does not push interleaved phases into each other (a
    pair that scores 1 over a range of shifts gets the middle of the range, not its edge).

    A job moves to the rotation that keeps the excess unchanged and minimises the overlap
    of the demands blurred over +-``margin`` of the circle (their dot product: for a fixed
    total, the flattest combined demand), one job at a time.  ``mats[i]``, when given, is
    ``_rotation_matrix(vectors[i], periods[i])``.  The excess of each rotation is summed
    compiled where numba is installed and ``compiled`` is True (the same values)."""
    n, angles = len(vectors), vectors.shape[1]
    width = int(round(margin * angles))
    if n < 2 or width < 1:
        return rotations
    rot = list(rotations)
    total = rotated_sum(vectors, rot)
    tol = 1e-9 * capacity * angles
    kernels = _kernels(vectors.shape[1]) if compiled else None
    hard_mats: dict[int, np.ndarray] = {}
    soft: _Blur | None = None  # found when a job first has a choice (see below)
    for _ in range(sweeps):
        moved = False
        for i in range(1, n):
            if i not in hard_mats:
                hard_mats[i] = _rotation_matrix(vectors[i], periods[i]) if mats is None else mats[i]
            hard_m = hard_mats[i]
            rest = total - hard_m[rot[i]]
            if kernels is not None:  # the same values, bit for bit (tested)
                hard = kernels.excess_rows(rest, vectors[i], periods[i], capacity)
            else:
                hard = excess(rest[None, :] + hard_m, capacity).sum(axis=-1)
            worse = hard > hard[rot[i]] + tol
            if np.count_nonzero(worse) == worse.size - 1:
                # only the job's own rotation keeps the excess: it stays, whatever the
                # blur says.  No job has moved before one has a choice, so the blurred
                # totals found then are those of the starting rotations.
                continue
            if soft is None:
                soft = _Blur(vectors, periods, rot, width)
            soft_m = soft.matrix(i)
            soft_rest = soft.total - soft_m[rot[i]]
            penalty = soft_m @ soft_rest
            penalty[worse] = np.inf
            k = int(penalty.argmin())
            if penalty[k] < penalty[rot[i]] - soft.tiny:
                rot[i], moved = k, True
                total, soft.total = rest + hard_m[k], soft_rest + soft_m[k]
        if not moved:
            break
    return rot


class _Blur:
    """:func:`_centre`'s blurred demands: each job's vector averaged over ``2 * width + 1``
    angles, their total at the given rotations, the penalty tolerance and, per job, the
    rotation matrix of its blurred vector (built when first asked)."""

    def __init__(
        self, vectors: np.ndarray, periods: list[int], rotations: list[int], width: int
    ) -> None:
        angles = vectors.shape[1]
        spectrum = _blur_spectrum(angles, width)
        self.blurred = np.real(np.fft.ifft(np.fft.fft(vectors, axis=1) * spectrum))
        self.total = rotated_sum(self.blurred, rotations)
        self.tiny = 1e-9 * float(np.abs(self.blurred).max() ** 2) * angles
        self._periods = periods
        self._mats: dict[int, np.ndarray] = {}

    def matrix(self, i: int) -> np.ndarray:
        if i not in self._mats:
            self._mats[i] = _rotation_matrix(self.blurred[i], self._periods[i])
        return self._mats[i]


@lru_cache(maxsize=64)
def _blur_spectrum(angles: int, width: int) -> np.ndarray:
    """FFT of the box kernel averaging ``2 * width + 1`` angles (read-only, shared)."""
    kernel = np.zeros(angles)
    kernel[np.arange(-width, width + 1) % angles] = 1.0 / (2 * width + 1)
    spectrum = np.fft.fft(kernel)
    spectrum.setflags(write=False)
    return spectrum


def _assign(n: int, *parts: dict[int, int]) -> list[int]:
    rot = [0] * n
    for part in parts:
        for i, k in part.items():
            rot[i] = k
    return rot


def _coordinate_descent(
    vectors: np.ndarray,
    periods: list[int],
    capacity: float,
    restarts: int,
    seed: int,
    mats: Sequence[np.ndarray] | None = None,
    *,
    compiled: bool = True,
) -> list[int]:
    """Heuristic for many jobs: from a greedy start (jobs by decreasing bytes, each at its
    best rotation against those already placed) and ``restarts`` random starts, repeatedly
    move one job to its best rotation against all the others until no move helps.
    ``mats[i]``, when given, is ``_rotation_matrix(vectors[i], periods[i])``.  The
    descents run compiled (:mod:`cassini.circle_compiled`) where numba is installed and
    ``compiled`` is True, else in numpy; both give the same rotations."""
    n = len(vectors)
    kernels = _kernels(vectors.shape[1]) if compiled else None
    if kernels is not None:  # the same steps, bit for bit (tested)
        return _compiled_descent(kernels, vectors, periods, capacity, restarts, seed)
    if mats is None:
        mats = [_rotation_matrix(vectors[i], periods[i]) for i in range(n)]
    rng = np.random.default_rng(seed)

    def descend(rot: list[int]) -> tuple[float, list[int]]:
        total = rotated_sum(vectors, rot)
        current = float(excess(total, capacity).sum())
        for _ in range(100):
            improved = False
            for i in range(1, n):
                rest = total - mats[i][rot[i]]
                values = excess(rest[None, :] + mats[i], capacity).sum(axis=-1)
                k = int(values.argmin())
                if values[k] < current - 1e-9 * capacity:
                    rot[i], current, total, improved = k, float(values[k]), rest + mats[i][k], True
            if not improved:
                break
        return current, rot

    greedy = [0] * n
    placed = vectors[0].copy()
    for i in sorted(range(1, n), key=lambda i: -vectors[i].sum()):
        values = excess(placed[None, :] + mats[i], capacity).sum(axis=-1)
        greedy[i] = int(values.argmin())
        placed = placed + mats[i][greedy[i]]
    starts = [greedy] + [
        [0] + [int(rng.integers(periods[i])) for i in range(1, n)] for _ in range(restarts)
    ]
    results = [descend(list(s)) for s in starts]
    return min(results, key=lambda r: r[0])[1]


def _kernels(angles: int) -> ModuleType | None:
    """:mod:`cassini.circle_compiled` where numba is installed and its kernels handle a
    circle of ``angles`` angles, else None."""
    kernels = _compiled_module()
    return kernels if kernels is not None and kernels.supports(angles) else None


_COMPILED_ALLOWED = [True]


def allow_compiled(allowed: bool) -> None:
    """Whether this process's searches may run compiled (default: yes, where numba is
    installed).  The service's workers say no: importing numba costs ~1 s, which a fresh
    worker's first request would pay under its deadline, and the numpy versions give the
    same results bit for bit."""
    _COMPILED_ALLOWED[0] = bool(allowed)
    _compiled_module.cache_clear()


@lru_cache(maxsize=1)
def _compiled_module() -> ModuleType | None:
    """:mod:`cassini.circle_compiled` where numba is installed and :func:`allow_compiled`
    has not said no, else None; imported on the first search that uses it (importing numba
    takes about a second)."""
    if not _COMPILED_ALLOWED[0]:
        return None
    from cassini import circle_compiled

    return circle_compiled if circle_compiled.AVAILABLE else None


def warm_compiled() -> bool:
    """Load the compiled searches into this process (numba's import and its cached code,
    ~1 s; compiling them into numba's cache where it is cold) by solving one small link
    problem by each method (``make setup`` through :mod:`cassini.sim.jit_warmup`).  False
    where they cannot run here (no numba, or :func:`allow_compiled` said no)."""
    if _compiled_module() is None:
        return False
    jobs = [
        JobProfile(f"warm-{i}", 0.1 * (i + 1), (Phase(0.01 * i, 0.04, 4e10),)) for i in range(3)
    ]
    for method in ("exact", "heuristic"):
        compatibility_score(jobs, 5e10, method=method)
    return True


def _compiled_descent(
    kernels: ModuleType,
    vectors: np.ndarray,
    periods: list[int],
    capacity: float,
    restarts: int,
    seed: int,
) -> list[int]:
    """:func:`_coordinate_descent` with its greedy start and descents compiled: the
    greedy order and the random starts drawn here as there (numpy draws a broadcast
    array of bounds in the order of one draw at a time: tested)."""
    n = len(vectors)
    if n == 1:
        return [0]
    vec = np.ascontiguousarray(vectors, dtype=float)
    per = np.asarray(periods, dtype=np.int64)
    minus_bytes = (-vec.sum(axis=1)).tolist()  # each row's sum as vectors[i].sum()
    order = np.array(sorted(range(1, n), key=minus_bytes.__getitem__), dtype=np.int64)
    random_starts = np.zeros((restarts, n), dtype=np.int64)
    if restarts:
        # numpy draws a broadcast array of bounds as it draws one bound at a time (tested)
        rng = np.random.default_rng(seed)
        random_starts[:, 1:] = rng.integers(np.broadcast_to(per[1:], (restarts, n - 1)))
    rot = kernels.descend(vec, per, float(capacity), order, random_starts)
    return [int(k) for k in rot]


def score_at_shifts(
    jobs: Sequence[JobProfile],
    capacity_bps: float,
    time_shifts_s: dict[str, float],
    unified: UnifiedPeriod,
    angles: int,
) -> tuple[float, np.ndarray]:
    """Grid score (and demand curve) of arbitrary time-shifts, on the same circle and
    angles as :func:`compatibility_score` (so the two are directly comparable)."""
    demand = np.zeros(angles)
    for job, t_eff in zip(jobs, unified.effective_iteration_times_s(), strict=True):
        shift = time_shifts_s.get(job.job_id, 0.0) * t_eff / job.iteration_time_s
        demand += _demand_row(job, t_eff, angles, unified.period_s, shift)
    return float(score_of_demand(demand, capacity_bps)), demand


def continuous_score(
    jobs: Sequence[JobProfile],
    capacity_bps: float,
    time_shifts_s: dict[str, float],
    span_s: float,
) -> float:
    """Score of the given time-shifts in continuous time over [0, span_s), independent of
    any grid: rates are piecewise constant, so the demand is evaluated once between each
    pair of consecutive phase edges and the excess integrated exactly.  Use the unified
    period as the span."""
    cuts = [np.array([0.0, span_s])]
    for j in jobs:
        shift = time_shifts_s.get(j.job_id, 0.0)
        starts, ends, _ = j.intervals()
        base = np.concatenate([starts, ends]) + shift
        k = np.arange(-1, int(np.ceil(span_s / j.iteration_time_s)) + 1)
        points = (base[:, None] + k[None, :] * j.iteration_time_s).ravel()
        cuts.append(points[(points > 0) & (points < span_s)])
    edges = np.unique(np.concatenate(cuts))
    mids, widths = 0.5 * (edges[1:] + edges[:-1]), np.diff(edges)
    demand = sum(j.rate_at(mids, time_shifts_s.get(j.job_id, 0.0)) for j in jobs)
    over = float(excess(np.asarray(demand), capacity_bps) @ widths)
    return 1.0 - over / (span_s * capacity_bps)


def grid_error_bound(jobs: Sequence[JobProfile], solution: LinkSolution) -> float:
    """Upper bound on |grid score - continuous score| at the solution's shifts.

    Only angles with a phase edge strictly inside differ (elsewhere every rate is constant
    on the arc, and the mean of the excess equals the excess of the mean); on such an angle
    averaging changes the excess by at most the sum of the rates of the jobs with an edge
    inside it.  Valid for exact unified periods (``solution.unified.exact``).
    """
    angles, period = solution.n_angles, solution.unified_period_s
    step = period / angles
    by_id = {j.job_id: j for j in jobs}
    per_angle = np.zeros(angles)
    for job_id in solution.job_ids:
        job = by_id[job_id]
        starts, ends, rates = job.intervals()
        shift = solution.time_shifts_s[job_id]
        reps = int(round(period / job.iteration_time_s))
        k = np.arange(reps)[None, :] * job.iteration_time_s
        for edge_times, rate in ((starts, rates), (ends, rates)):
            t = np.mod(edge_times[:, None] + shift + k, period) / step
            inside = np.abs(t - np.rint(t)) > 1e-9
            weights = np.broadcast_to(rate[:, None], t.shape)[inside]
            np.add.at(per_angle, np.floor(t[inside]).astype(int) % angles, weights)
    return float(per_angle.sum() / (angles * solution.capacity_bps))


def _stretched(job: JobProfile, iteration_time_s: float) -> JobProfile:
    """The job with every time scaled to a new iteration time (rates unchanged)."""
    if abs(iteration_time_s - job.iteration_time_s) <= 1e-12 * job.iteration_time_s:
        return job
    f = iteration_time_s / job.iteration_time_s
    phases = [
        Phase(min(p.start_s * f, iteration_time_s * (1 - 1e-12)), p.duration_s * f, p.rate_bps)
        for p in job.phases
    ]
    return JobProfile(job.job_id, iteration_time_s, phases)


def _stretched_bin_average(
    job: JobProfile,
    iteration_time_s: float,
    n_bins: int,
    span_s: float,
    shift_s: float = 0.0,
    *,
    edges: np.ndarray | None = None,
) -> np.ndarray:
    """``_stretched(job, iteration_time_s).bin_average(n_bins, span_s, shift_s)`` (bits/s
    per bin), the same floating-point operations in the same order, without building the
    stretched profile (the hot path of every link problem; equal bit for bit, tested).
    ``edges``, when given, is ``np.linspace(0.0, span_s, n_bins + 1)`` (shared by the jobs
    of one circle).  A stretch that would make the profile invalid takes the slow path,
    which raises."""
    intervals = _stretched_intervals(job, iteration_time_s)
    if intervals is None:
        return _stretched(job, iteration_time_s).bin_average(n_bins, span_s, shift_s)
    starts, ends, rates, bits, period = intervals
    widths = ends - starts
    if edges is None:
        edges = np.linspace(0.0, span_s, n_bins + 1)

    def integral(t: np.ndarray) -> np.ndarray:  # JobProfile._periodic_integral
        whole = np.floor(t / period)
        u = t - whole * period
        return whole * bits + np.clip(u[..., None] - starts, 0.0, widths) @ rates

    cumulative = integral(edges - shift_s)
    if shift_s != 0.0:  # the integral at -0.0 is exactly 0.0: subtracting it is a no-op
        cumulative = cumulative - integral(np.array(-shift_s, float))
    return np.diff(cumulative) / (span_s / n_bins)


def _stretched_intervals(
    job: JobProfile, iteration_time_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float] | None:
    """(starts_s, ends_s, rates_bps, bits per iteration, iteration time s) of
    ``_stretched(job, iteration_time_s)``: its :meth:`JobProfile.intervals` and
    :attr:`JobProfile.bits_per_iteration`, computed as they are; None when the stretched
    profile would fail validation (a phase longer than the iteration, or overlapping the
    next one)."""
    period = job.iteration_time_s
    if abs(iteration_time_s - period) <= 1e-12 * period:
        return (*job.intervals(), job.bits_per_iteration, period)
    f = iteration_time_s / period
    period = iteration_time_s
    last = iteration_time_s * (1 - 1e-12)
    phases = [(min(p.start_s * f, last), p.duration_s * f, p.rate_bps) for p in job.phases]
    starts, ends, rates = [], [], []
    for i, (start, duration, rate) in enumerate(phases):
        end = start + duration
        if duration <= 0 or duration > period + _PROFILE_EPS:
            return None
        following = phases[(i + 1) % len(phases)][0] + (period if i + 1 == len(phases) else 0)
        if len(phases) > 1 and end > following + _PROFILE_EPS:
            return None
        if end <= period + _PROFILE_EPS:
            starts.append(start)
            ends.append(min(end, period))
            rates.append(rate)
        else:  # wraps: [start, T) and [0, end - T)
            starts += [start, 0.0]
            ends += [period, end - period]
            rates += [rate, rate]
    bits = float(sum(rate * duration for _, duration, rate in phases))
    return np.array(starts, float), np.array(ends, float), np.array(rates, float), bits, period
