"""A training job's per-iteration network demand.

A :class:`JobProfile` is periodic with period ``iteration_time_s`` (seconds); within one
iteration the job sends at ``rate_bps`` (bits per second) during each :class:`Phase`
("Up" phase) and at zero elsewhere.  A phase may wrap past the end of the iteration.

Time-shift convention, used everywhere in this package: shifting a job by ``t`` seconds
means its rate at time ``x`` is ``rate((x - t) mod T)``.
"""

from __future__ import annotations

import difflib
import json
import math
import numbers
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from cassini import schema
from cassini.errors import InputError

_EPS = 1e-12


@dataclass(frozen=True)
class Phase:
    """One communication phase: starts ``start_s`` seconds into the iteration, lasts
    ``duration_s`` seconds, and sends at ``rate_bps`` bits per second."""

    start_s: float
    duration_s: float
    rate_bps: float

    def __post_init__(self) -> None:
        for attr in ("start_s", "duration_s", "rate_bps"):
            value = getattr(self, attr)
            if _numpy_like(value):
                object.__setattr__(self, attr, float(value))

    @property
    def end_s(self) -> float:
        """End time in seconds; may exceed the iteration time for a wrapping phase."""
        return self.start_s + self.duration_s

    def to_dict(self) -> dict[str, float]:
        return {"start_s": self.start_s, "duration_s": self.duration_s, "rate_bps": self.rate_bps}

    @classmethod
    def from_dict(cls, obj: Any, field: str = "phase") -> Phase:
        obj = schema.require_object(obj, field)
        schema.check_fields(obj, field, ("start_s", "duration_s", "rate_bps"))
        return cls(
            start_s=schema.number(obj["start_s"], f"{field}.start_s", non_negative=True),
            duration_s=schema.number(obj["duration_s"], f"{field}.duration_s", positive=True),
            rate_bps=schema.number(obj["rate_bps"], f"{field}.rate_bps", non_negative=True),
        )


@dataclass(frozen=True)
class JobProfile:
    """A job's periodic bandwidth demand: ``iteration_time_s`` seconds per iteration and
    its communication phases.  Validated on construction (raises :class:`InputError`):
    ``job_id`` a string (an integer becomes one), ``phases`` a sequence of
    :class:`Phase` (:meth:`from_dict` reads JSON objects)."""

    job_id: str
    iteration_time_s: float
    phases: tuple[Phase, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "job_id", _checked_id(self.job_id))
        if _numpy_like(self.iteration_time_s):
            object.__setattr__(self, "iteration_time_s", float(self.iteration_time_s))
        object.__setattr__(self, "phases", _phase_tuple(self.phases))
        _validate(self)  # reports indices in the order given
        object.__setattr__(self, "phases", tuple(sorted(self.phases, key=lambda p: p.start_s)))

    # -- derived quantities -------------------------------------------------------------
    @property
    def bits_per_iteration(self) -> float:
        """Bits sent per iteration."""
        return float(sum(p.rate_bps * p.duration_s for p in self.phases))

    @property
    def bytes_per_iteration(self) -> float:
        """Bytes sent per iteration."""
        return self.bits_per_iteration / 8.0

    @property
    def communication_share(self) -> float:
        """Fraction of the iteration spent in communication phases, in [0, 1]."""
        return float(sum(p.duration_s for p in self.phases)) / self.iteration_time_s

    @property
    def peak_rate_bps(self) -> float:
        return max((p.rate_bps for p in self.phases), default=0.0)

    def intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Phases as non-wrapping intervals within [0, T): (starts_s, ends_s, rates_bps)."""
        starts, ends, rates = [], [], []
        period = self.iteration_time_s
        for p in self.phases:
            end = p.end_s
            if end <= period + _EPS:
                starts.append(p.start_s)
                ends.append(min(end, period))
                rates.append(p.rate_bps)
            else:  # wraps: [start, T) and [0, end - T)
                starts += [p.start_s, 0.0]
                ends += [period, end - period]
                rates += [p.rate_bps, p.rate_bps]
        return np.array(starts, float), np.array(ends, float), np.array(rates, float)

    def rate_at(self, times_s: np.ndarray | float, shift_s: float = 0.0) -> np.ndarray:
        """Rate (bits/s) at absolute times, the job being shifted by ``shift_s`` seconds."""
        u = np.mod(np.asarray(times_s, float) - shift_s, self.iteration_time_s)
        starts, ends, rates = self.intervals()
        inside = (u[..., None] >= starts) & (u[..., None] < ends)
        return inside.astype(float) @ rates

    def cumulative_bits(self, times_s: np.ndarray, shift_s: float = 0.0) -> np.ndarray:
        """Bits sent in [0, t) for each t >= 0 when the job is shifted by ``shift_s`` seconds
        (exact integral of the piecewise-constant rate)."""
        t = np.asarray(times_s, float)
        return self._periodic_integral(t - shift_s) - self._periodic_integral(
            np.array(-shift_s, float)
        )

    def bin_average(self, n_bins: int, span_s: float, shift_s: float = 0.0) -> np.ndarray:
        """Mean rate (bits/s) of the shifted job in each of ``n_bins`` equal bins of
        [0, span_s)."""
        edges = np.linspace(0.0, span_s, n_bins + 1)
        return np.diff(self.cumulative_bits(edges, shift_s)) / (span_s / n_bins)

    def _periodic_integral(self, t: np.ndarray) -> np.ndarray:
        period = self.iteration_time_s
        whole = np.floor(t / period)
        u = t - whole * period
        starts, ends, rates = self.intervals()
        within = np.clip(u[..., None] - starts, 0.0, ends - starts) @ rates
        return whole * self.bits_per_iteration + within

    # -- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.job_id,
            "iteration_time_s": self.iteration_time_s,
            "phases": [p.to_dict() for p in self.phases],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Any, field: str = "job") -> JobProfile:
        """Read ``{"id", "iteration_time_s", "phases": [...]}`` (and an optional
        ``provenance`` object saying where the numbers come from, which is not kept);
        unknown fields are errors."""
        obj = schema.require_object(obj, field)
        schema.check_fields(obj, field, ("id", "iteration_time_s", "phases"), ("provenance",))
        if "provenance" in obj:
            schema.require_object(obj["provenance"], f"{field}.provenance")
        job_id = schema.identifier(obj["id"], f"{field}.id")
        period = schema.number(obj["iteration_time_s"], f"{field}.iteration_time_s", positive=True)
        raw_phases = schema.array(obj["phases"], f"{field}.phases")
        phases = tuple(Phase.from_dict(p, f"{field}.phases[{i}]") for i, p in enumerate(raw_phases))
        try:
            return cls(job_id, period, phases)
        except InputError as e:
            raise InputError(schema.join(field, e.field), e.problem) from None

    @classmethod
    def from_json(cls, text: str) -> JobProfile:
        return cls.from_dict(json.loads(text))

    # -- measurement --------------------------------------------------------------------
    @classmethod
    def from_samples(
        cls,
        samples_bps: Sequence[float] | np.ndarray,
        dt_s: float,
        *,
        job_id: str = "job",
        iteration_time_s: float | None = None,
        threshold_bps: float | None = None,
        min_iterations: int = 2,
        conserve_bytes: bool = False,
    ) -> JobProfile:
        """Build a profile from a measured bandwidth time series of several iterations.

        Parameters
        ----------
        samples_bps : bandwidth in bits/s, one sample per ``dt_s`` seconds.
        dt_s : sample spacing in seconds.
        iteration_time_s : the iteration time if known, at least ``dt_s``; otherwise
            estimated from the autocorrelation of the series (see :func:`estimate_period`:
            five clean iterations are enough, four only for a short burst; noisy or
            jittery ones need more, ten or so).
        threshold_bps : a folded sample above it (bits/s, >= 0) belongs to a
            communication phase; default :func:`phase_threshold` of the folded series
            (robust to a few bins that capture timestamps crowd into a spike, unlike a
            fraction of the peak).
        min_iterations : the series must span at least this many iterations (>= 1).
        conserve_bytes : scale the phases' rates (by one factor) so that the profile moves
            every bit of the folded series, the bits in samples under the threshold (a
            burst's partly filled first and last bins, short gaps' stragglers) included;
            otherwise each phase keeps the mean rate of its own samples.

        Returns
        -------
        JobProfile whose phases are the runs of the folded (averaged over iterations)
        series above the threshold, each with its mean rate.  A constant rate (with
        ``iteration_time_s`` given) is one phase over the whole iteration at that rate; a
        series without traffic (all zeros) is a profile without phases.

        Raises
        ------
        InputError if the series is too short, empty, or has no periodic structure
        (a constant series without ``iteration_time_s``), or for a bad argument.
        """
        x = np.asarray(samples_bps, float).ravel()
        dt_s = schema.number(dt_s, "dt_s", positive=True)
        _checked_threshold(threshold_bps)
        min_iterations = schema.integer(min_iterations, "min_iterations", minimum=1)
        if x.size == 0 or not np.all(np.isfinite(x)):
            raise InputError("samples_bps", "must be a non-empty series of finite numbers")
        if np.any(x < 0):
            raise InputError("samples_bps", "rates must be >= 0")
        if iteration_time_s is None:
            iteration_time_s = estimate_period(x, dt_s)
        period = schema.number(iteration_time_s, "iteration_time_s", positive=True)
        if period < dt_s:
            raise InputError(
                "iteration_time_s",
                f"must be at least the sample spacing dt_s ({dt_s:g} s), got {period:g} s",
            )
        if x.size * dt_s < min_iterations * period - dt_s:
            raise InputError(
                "samples_bps",
                f"spans {x.size * dt_s:g} s, less than {min_iterations} iterations of {period:g} s",
            )
        return cls.from_folded(
            fold(x, dt_s, period),
            period,
            job_id=job_id,
            threshold_bps=threshold_bps,
            conserve_bytes=conserve_bytes,
        )

    @classmethod
    def from_folded(
        cls,
        folded_bps: Sequence[float] | np.ndarray,
        iteration_time_s: float,
        *,
        job_id: str = "job",
        threshold_bps: float | None = None,
        conserve_bytes: bool = False,
    ) -> JobProfile:
        """A profile from one iteration's mean rate (bits/s), ``folded_bps`` in equal bins
        spanning ``iteration_time_s`` from an iteration start; phases are the runs of bins
        above ``threshold_bps`` (see :meth:`from_samples` for it and ``conserve_bytes``).

        Examples
        --------
        >>> JobProfile.from_folded([0.0, 4e9, 4e9, 0.0], 0.1, job_id="a").phases
        (Phase(start_s=0.025, duration_s=0.05, rate_bps=4000000000.0),)
        >>> JobProfile.from_folded([5e9] * 4, 0.1).phases  # a constant rate: one phase
        (Phase(start_s=0.0, duration_s=0.1, rate_bps=5000000000.0),)
        """
        folded = np.asarray(folded_bps, float).ravel()
        if folded.size == 0 or not np.all(np.isfinite(folded)) or np.any(folded < 0):
            raise InputError("folded_bps", "must be a non-empty series of finite rates >= 0")
        period = schema.number(iteration_time_s, "iteration_time_s", positive=True)
        threshold_bps = _checked_threshold(threshold_bps)
        if threshold_bps is None:
            threshold_bps = phase_threshold(folded)
        phases = _phases_above(folded, period, threshold_bps)
        if conserve_bytes and phases:
            inside = sum(p.rate_bps * p.duration_s for p in phases)
            factor = float(folded.sum()) * period / folded.size / inside
            phases = tuple(Phase(p.start_s, p.duration_s, p.rate_bps * factor) for p in phases)
        return cls(job_id, period, phases)


def estimate_period(samples: np.ndarray, dt_s: float, *, min_lag_s: float | None = None) -> float:
    """Estimate the period (seconds) of a periodic series by autocorrelation.

    The series is smoothed by moving averages of 1, 2, 4, 8 and 16 samples, and at each
    width the correlogram's strongest peak and its 2nd to 4th submultiples are candidate
    periods; the candidate whose correlogram stands furthest out of the series' own noise
    at its multiples (:func:`_comb_z`: the mean autocorrelation there, in standard
    deviations) is the period.  A DDP job's iterations wander by several ms, so at 1 ms
    bins each correlogram peak is a broad hill of single-lag spikes, chance alignments of
    1-2 ms bursts: on a loaded host a spike at the 2nd multiple outgrew the period's hill
    (iterations of 62-75 ms read 130 ms) or no spike reached the 0.2 floor (iterations of
    62-99 ms).  A moving average sums a hill's mass into its height; a submultiple wins
    when the first hill is lower than a later one (a job whose slow iterations are
    followed by fast ones); scoring by the mean over the multiples prefers the
    fundamental, as a multiple has fewer multiples in the series and a part-period peak
    (two phases per iteration) has empty ones between.

    At each width and candidate: the strongest peak is the shortest lag whose (biased)
    autocorrelation is at least 80 % of the largest, so a multiple of the period is not
    chosen; the walk over its multiples 1, 2, 3, ... looks for each peak near the
    multiple of the period known so far, and the period becomes the sum of the peaks'
    positions over the sum of their multiples (the least-squares slope when a peak's
    spread grows with its multiple, as iteration jitter adds up), so the first lag's
    error is never multiplied past a peak.  A peak's position is the centroid of its
    upper half (a ResNet-50 capture's first hill had maxima at 60 and 63 ms for a 63 ms
    iteration).  The walk stops at the first multiple whose hill is under twice the
    noise (the jitter, added up, has flattened it); the peak must recur at the 2nd
    multiple within the first half of the series, so four periods are at the edge: five
    clean periods are enough, four pass the significance test below only for a short
    burst (one that fills 10 % to 60 % of the period needs 4.25 to 4.75), and noise and
    jitter need more, ten or so.
    Only peaks after the autocorrelation first turns negative count: a mean-free periodic
    series sums to zero over a period, so it decorrelates before its period, while a peak
    before that is structure inside a phase (e.g. a shaper releasing packets every timer
    tick), not the iteration.

    The series is periodic only if some width's strongest peak exceeds 0.2 and the best
    candidate's z passes the normal quantile for a chance of ``_FALSE_PERIOD_CHANCE``
    over every lag, width and submultiple searched (Bonferroni); otherwise
    :class:`InputError`.
    """
    x = np.asarray(samples, float) - float(np.mean(samples))
    if x.size < 8 or not np.dot(x, x) > 0:  # a constant's rounding residue squares to 0
        raise InputError("samples_bps", "has no periodic structure (constant or too short)")
    lo = max(2, int(math.ceil((min_lag_s or 0.0) / dt_s)))
    if x.size // 2 <= lo + 1:
        raise InputError("samples_bps", "too short to estimate an iteration time")
    best_z, best_period, searched = -math.inf, 0.0, 0
    for width in _WIDTHS:
        smooth = np.convolve(x, np.full(width, 1.0 / width), mode="valid")
        if smooth.size // 2 <= lo + 1:
            break
        searched += (smooth.size // 2 - lo) * _SUBMULTIPLES
        for z, period in _period_candidates(smooth, lo):
            if z > best_z:
                best_z, best_period = z, period
    if not best_z > NormalDist().inv_cdf(1.0 - _FALSE_PERIOD_CHANCE / searched):
        raise InputError("samples_bps", "has no periodic structure (no autocorrelation peak)")
    return best_period * dt_s


# moving-average widths (bins) tried by estimate_period, and the submultiples of each
# width's strongest peak tried as the period
_WIDTHS = (1, 2, 4, 8, 16)
_SUBMULTIPLES = 4
# chance that a series without periodic structure is called periodic (Bonferroni over
# every lag, width and submultiple searched; exact for Gaussian noise)
_FALSE_PERIOD_CHANCE = 1e-5


def _period_candidates(x: np.ndarray, lo: int) -> list[tuple[float, float]]:
    """``(z, period in lags)`` for the strongest correlogram peak of the mean-free series
    ``x`` and its 2nd to 4th submultiples, each period walked over its multiples; z is
    how far the correlogram's mean at those multiples stands above the series' own
    noise (:func:`_comb_z`).  Empty when no peak after the decorrelation reaches 0.2."""
    n = x.size
    ac, tapered = _correlogram(x)
    hi = n // 2
    window = ac[lo:hi]
    interior = (window[1:-1] >= window[:-2]) & (window[1:-1] >= window[2:])
    peaks = np.nonzero(interior)[0] + 1 + lo
    decorrelated = _decorrelation_lag(ac[:hi])
    peaks = peaks[peaks > decorrelated + 1] if decorrelated is not None else peaks[:0]
    if peaks.size == 0 or ac[peaks].max() <= 0.2:
        return []
    # peaks are chosen on the biased estimate (each lag's sum over all n): at long lags
    # the unbiased one averages few products and a jittery series' 3rd or 5th multiple
    # can outgrow the period's own peak (a 10-iteration DDP capture read as 3 periods)
    best = tapered[peaks].max()
    lag = int(peaks[np.argmax(tapered[peaks] >= 0.8 * best)])
    noise = _null_noise(ac, decorrelated)
    out = []
    for divisor in range(1, _SUBMULTIPLES + 1):
        guess = lag / divisor
        if guess < lo or guess <= decorrelated + 1:
            break
        walked = _walk_multiples(ac, noise, guess)
        if walked is not None:
            out.append((_comb_z(ac, noise, *walked), walked[0]))
    return out


def _walk_multiples(ac: np.ndarray, noise: np.ndarray, lag: float) -> tuple[float, int] | None:
    """The period (lags) from the peaks at the multiples of ``lag`` and how many
    multiples it rests on; None unless the peak recurs at the 2nd multiple inside the
    first half of the series (a lone peak is no evidence of a period: heavy-tailed noise
    puts one 7 sigma high at long lags).  See :func:`estimate_period`."""
    n = ac.size
    reachable = max(1, int((n - 1) // (2 * lag)))
    period, positions, multiples, walked = lag, 0.0, 0, 0
    for multiple in range(1, reachable + 1):
        position = _peak_centroid(ac, multiple * period, max(1, int(period // 4)))
        if multiple > 1 and np.interp(position, np.arange(n), ac) < 2 * noise[round(position)]:
            break  # the jitter added up over this many iterations has flattened the hill
        positions += position
        multiples += multiple
        walked = multiple
        period = positions / multiples
    if walked < 2:
        return None
    return period, walked


def _comb_z(ac: np.ndarray, noise: np.ndarray, period: float, multiples: int) -> float:
    """How many standard deviations the mean (unbiased) autocorrelation at the period's
    first ``multiples`` multiples stands above zero, for a series whose only structure
    is its short-range correlation (:func:`_null_noise`).  Read at the fitted multiples,
    not at each hill's top (the largest of the lags near it, which noise alone puts near
    2 sigma); multiples a period apart are independent under that null, so the mean's
    standard deviation is the root of their variances' sum over their count.  Averaging
    the multiples is what lets a jittery job pass: its hills are low (a 1 ms series of
    iterations of 62-99 ms peaked at 0.19), but there is one at every multiple."""
    lags = period * np.arange(1, multiples + 1)
    lags = lags[lags < ac.size - 1]
    if lags.size == 0:
        return -math.inf
    mean = float(np.mean(np.interp(lags, np.arange(ac.size), ac)))
    spread = math.sqrt(float(np.sum(noise[np.round(lags).astype(int)] ** 2))) / lags.size
    return mean / spread


def _correlogram(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Autocorrelation of a mean-free series at lags 0..n-1, normalised to 1 at lag 0:
    unbiased (each lag's mean of its n - k products) and biased (their sum over n)."""
    n = x.size
    spectrum = np.fft.rfft(x, 2 * n)
    raw = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
    unbiased = raw / (n - np.arange(n))
    return unbiased / unbiased[0], raw / raw[0]


def _decorrelation_lag(ac: np.ndarray) -> int | None:
    """The first lag (>= 1) at which the autocorrelation is <= 0, or None."""
    negative = np.nonzero(ac[1:] <= 0)[0]
    return int(negative[0]) + 1 if negative.size else None


def _null_noise(ac: np.ndarray, decorrelated: int) -> np.ndarray:
    """Standard deviation of the (unbiased) autocorrelation at each lag k of a series
    without periodic structure, only its own short-range correlation (the lags before
    ``decorrelated``): Bartlett's sqrt((1 + 2 sum r_j^2) / (n - k)); 1 / sqrt(n) for
    white noise."""
    n = ac.size
    short_range = 1.0 + 2.0 * float(np.sum(ac[1:decorrelated] ** 2))
    return np.sqrt(short_range / (n - np.arange(n)))


def _peak_centroid(ac: np.ndarray, guess: float, span: int) -> float:
    """Position (in lags) of the autocorrelation peak within ``span`` lags of ``guess``:
    the centroid of the window's values above half its maximum."""
    lo = max(1, int(round(guess)) - span)
    hi = min(ac.size - 1, int(round(guess)) + span + 1)
    window = ac[lo:hi]
    weights = np.clip(window - 0.5 * window.max(), 0.0, None)
    if not weights.sum() > 0:
        return guess
    return lo + float(np.dot(weights, np.arange(window.size)) / weights.sum())


def phase_threshold(samples: np.ndarray) -> float:
    """Default rate (bits/s) above which a folded sample belongs to a communication phase:
    half the median of the samples above the mean, i.e. half the typical rate while
    communicating.  Unlike a fraction of the peak, a few bins into which capture timestamps
    crowd a burst do not raise it.  A constant series (none above its mean) communicates
    all the time: half its value, so every sample is above it."""
    x = np.asarray(samples, float).ravel()
    if x.size == 0:
        return 0.0
    high = x[x > x.mean()]
    return 0.5 * float(np.median(x if high.size == 0 else high))


def fold(samples: np.ndarray, dt_s: float, period_s: float) -> np.ndarray:
    """Average a series over its iterations: returns round(period/dt) bins of one period."""
    n_bins = max(1, int(round(period_s / dt_s)))
    x = np.asarray(samples, float)
    # bin position counted in bins (not via a float modulo, which misplaces boundary samples)
    position = np.arange(x.size) * (dt_s * n_bins / period_s)
    idx = np.floor(position + 1e-6).astype(np.int64) % n_bins
    sums = np.bincount(idx, weights=x, minlength=n_bins)
    counts = np.bincount(idx, minlength=n_bins)
    return np.divide(sums, counts, out=np.zeros(n_bins), where=counts > 0)


def _phases_above(folded: np.ndarray, period_s: float, threshold: float) -> tuple[Phase, ...]:
    above = folded > threshold
    n = folded.size
    if not above.any():
        return ()
    bin_s = period_s / n
    if above.all():
        return (Phase(0.0, period_s, float(folded.mean())),)
    # rotate so the series starts below threshold; then runs never wrap in the rotated frame
    first_below = int(np.argmin(above))
    rolled = np.roll(above, -first_below)
    values = np.roll(folded, -first_below)
    edges = np.diff(np.concatenate(([0], rolled.astype(int), [0])))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    phases = []
    for s, e in zip(starts, ends, strict=True):
        start_s = ((s + first_below) % n) * bin_s
        phases.append(Phase(start_s, (e - s) * bin_s, float(values[s:e].mean())))
    return tuple(phases)


def _numpy_like(value: Any) -> bool:
    """A real number other than a plain int or float (a numpy scalar: ``np.float32``,
    ``np.int64``, also ``np.float64``, a float subclass), stored as a plain float; bools
    are not numbers."""
    return (
        type(value) not in (float, int)
        and isinstance(value, numbers.Real)
        and not isinstance(value, bool)
    )


def _checked_id(job_id: Any) -> str:
    """A job id as a string: an integer (not a bool) is turned into one, anything else is
    an InputError naming ``job_id`` (``str(None)`` made a job called "None")."""
    if isinstance(job_id, str):
        return job_id
    if isinstance(job_id, numbers.Integral) and not isinstance(job_id, bool):
        return str(job_id)
    raise InputError("job_id", f"must be a string, got {schema.kind_of(job_id)}")


def _phase_tuple(phases: Any) -> tuple[Phase, ...]:
    """``phases`` as a tuple of :class:`Phase`, or an InputError naming ``phases`` (not a
    sequence) or ``phases[i]`` (not a Phase: a dict or a tuple of numbers)."""
    if type(phases) not in (tuple, list) and (  # the common cases, without the ABCs
        isinstance(phases, str | bytes | Mapping) or not isinstance(phases, Iterable)
    ):
        raise InputError(
            "phases", f"must be a sequence of cassini.profile.Phase, got {schema.kind_of(phases)}"
        )
    out = tuple(phases)
    for i, p in enumerate(out):
        if type(p) is not Phase and not isinstance(p, Phase):
            hint = " (Phase.from_dict reads one)" if isinstance(p, Mapping) else ""
            raise InputError(
                f"phases[{i}]", f"must be a cassini.profile.Phase, got {schema.kind_of(p)}{hint}"
            )
    return out


def _checked_threshold(threshold_bps: Any) -> float | None:
    """``threshold_bps`` as a float (None: the default), a finite number >= 0."""
    if threshold_bps is None:
        return None
    return schema.number(threshold_bps, "threshold_bps", non_negative=True)


def _check_phase(p: Phase, period: float, field: str) -> None:
    if not p.start_s < period:
        raise InputError(
            f"{field}.start_s",
            f"must be inside the iteration [0, {period:g}) s, got {p.start_s:g}",
        )
    if p.duration_s > period + _EPS:
        raise InputError(
            f"{field}.duration_s",
            f"must not exceed the iteration time {period:g} s, got {p.duration_s:g}",
        )


def _validate(profile: JobProfile) -> None:
    period = profile.iteration_time_s
    if (
        isinstance(period, bool)
        or not isinstance(period, int | float)
        or not math.isfinite(period)
        or period <= 0
    ):
        raise InputError("iteration_time_s", f"must be a finite number > 0, got {period!r}")
    for i, p in enumerate(profile.phases):
        name = f"phases[{i}]"
        for attr in ("start_s", "duration_s", "rate_bps"):
            v = getattr(p, attr)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise InputError(f"{name}.{attr}", f"must be a finite number, got {v!r}")
        if p.start_s < 0:
            raise InputError(f"{name}.start_s", f"must be >= 0, got {p.start_s:g}")
        if p.duration_s <= 0:
            raise InputError(f"{name}.duration_s", f"must be > 0, got {p.duration_s:g}")
        if p.rate_bps < 0:
            raise InputError(f"{name}.rate_bps", f"must be >= 0, got {p.rate_bps:g}")
        _check_phase(p, period, name)
    order = sorted(range(len(profile.phases)), key=lambda k: profile.phases[k].start_s)
    for pos, i in enumerate(order):
        if len(order) < 2:
            break
        nxt = order[(pos + 1) % len(order)]
        p, q = profile.phases[i], profile.phases[nxt]
        nxt_start = q.start_s if pos + 1 < len(order) else q.start_s + period
        if p.end_s > nxt_start + _EPS:
            raise InputError(
                f"phases[{i}]",
                f"overlaps phases[{nxt}] (ends at {p.end_s:g} s, phases[{nxt}] starts at "
                f"{q.start_s:g} s)",
            )


def profiles_from_dicts(objs: Any, field: str = "jobs") -> list[JobProfile]:
    """Read a non-empty JSON array of jobs with unique ids."""
    items = schema.array(objs, field, non_empty=True)
    jobs = [JobProfile.from_dict(o, f"{field}[{i}]") for i, o in enumerate(items)]
    seen: dict[str, int] = {}
    for i, j in enumerate(jobs):
        if j.job_id in seen:
            raise InputError(f"{field}[{i}].id", f"duplicate job id {j.job_id!r}")
        seen[j.job_id] = i
    return jobs


def profile_map(jobs: Sequence[JobProfile] | Mapping[str, JobProfile]) -> dict[str, JobProfile]:
    """Jobs keyed by id, from a sequence or a mapping."""
    if isinstance(jobs, Mapping):
        return dict(jobs)
    return {j.job_id: j for j in jobs}


# -- model names ------------------------------------------------------------------------
def model_key(name: str) -> str:
    """A model name as matched against profile ids: lower case, letters and digits only
    (``ResNet-50`` -> ``resnet50``, ``VGG16`` -> ``vgg16``)."""
    return "".join(c for c in name.lower() if c.isalnum())


#: Other names of library profiles, as :func:`model_key`s: the testbed's model names
#: (``testbed.model_names``) where the profile measured from that model has another id.
MODEL_ALIASES = {"bertbase": "bert"}


def model_keys(ids: Collection[str]) -> dict[str, str]:
    """:func:`model_key` -> profile id, for the keys exactly one id has (a reader looking
    up many names builds it once)."""
    by_key: dict[str, list[str]] = {}
    for m in ids:
        by_key.setdefault(model_key(m), []).append(m)
    return {k: ms[0] for k, ms in by_key.items() if len(ms) == 1}


def match_model(
    name: str, ids: Collection[str], keys: Mapping[str, str] | None = None
) -> str | None:
    """The profile id ``name`` means: itself when it is one, else the one id with the same
    :func:`model_key` (case and punctuation ignored), else the id :data:`MODEL_ALIASES`
    gives (``bert_base`` -> ``bert``); None when none or several match.  ``keys``:
    :func:`model_keys` of ``ids``, when already built."""
    if name in ids:
        return name
    key = model_key(name)
    found = (model_keys(ids) if keys is None else keys).get(key)
    alias = MODEL_ALIASES.get(key)
    return found if found is not None or alias not in ids else alias


def unknown_model(name: str, ids: Collection[str]) -> str:
    """Why ``name`` names no profile: the library, and the closest ids when some are close
    (all that are equally close: ``did you mean one of vgg11, vgg16, vgg19?``)."""
    ids = sorted(ids)
    key = model_key(name)
    same = [m for m in ids if model_key(m) == key]
    if len(same) > 1:
        return f"model {name!r} is ambiguous: it matches {', '.join(same)} (give one exactly)"
    keys = {model_key(m): m for m in ids}
    close = difflib.get_close_matches(key, list(keys), n=len(keys)) if key and keys else []
    # every id as close as the closest ("vgg": vgg11, vgg16 and vgg19 alike), in order
    best = [k for k in close if _likeness(k, key) == _likeness(close[0], key)] if close else []
    if len(best) == 1:
        hint = f"; did you mean {keys[best[0]]!r}?"
    else:
        hint = f"; did you mean one of {', '.join(sorted(keys[k] for k in best))}?" if best else ""
    return f"unknown model {name!r} (library: {', '.join(ids)}){hint}"


def _likeness(candidate: str, key: str) -> float:
    """The similarity ``difflib.get_close_matches`` ranks ``candidate`` by for ``key``."""
    return difflib.SequenceMatcher(None, candidate, key).ratio()


def library_model(name: str, ids: Collection[str], field: str = "model") -> str:
    """The profile id ``name`` means (see :func:`match_model`); InputError naming ``field``
    otherwise, with the closest id when one is close (``did you mean 'vgg16'?``)."""
    found = match_model(name, ids)
    if found is None:
        raise InputError(field, unknown_model(name, ids))
    return found
