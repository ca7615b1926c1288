"""A scheduler author's review of the profile and circle API (review 66): a constant rate
with a given iteration time is one phase, from_samples' arguments are checked and its
docstring says how many iterations the estimate needs, numpy scalars are numbers, the
modules' examples run, compatibility_score refuses what its arithmetic cannot hold, and
the demand rows' cache is safe to share between threads."""

from __future__ import annotations

import doctest
import threading
import time
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini import circle, profile
from cassini.agent import MAX_PERIOD_S, MAX_RATE_BPS, MIN_PERIOD_S
from cassini.circle import compatibility_score, score_at_shifts, unified_period
from cassini.errors import InputError
from cassini.profile import JobProfile, Phase, estimate_period, phase_threshold

DT = 1e-3


def _iterations(n: int) -> np.ndarray:
    """``n`` clean 100 ms iterations at 1 ms: 60 ms idle, 30 ms at 20 Gbit/s, 10 ms idle."""
    one = np.r_[np.zeros(60), np.full(30, 20e9), np.zeros(10)]
    return np.tile(one, n)


# -- 1: a constant rate with a given iteration time ------------------------------------
def test_constant_rate_with_a_given_iteration_time_is_one_whole_phase() -> None:
    flat = JobProfile.from_samples(np.full(3000, 5e9), DT, job_id="flat", iteration_time_s=0.1)
    assert flat.phases == (Phase(0.0, 0.1, 5e9),)
    assert flat.bits_per_iteration == pytest.approx(5e8)
    # without the iteration time there is nothing to estimate it from
    with pytest.raises(InputError, match="constant"):
        JobProfile.from_samples(np.full(3000, 5e9), DT)


@settings(max_examples=60, deadline=None)
@given(value=st.floats(1e-3, 1e13), bins=st.integers(1, 400))
def test_a_constant_folded_series_is_one_phase_at_its_rate(value: float, bins: int) -> None:
    """Whatever the rounding of the series' mean (above or below the value)."""
    got = JobProfile.from_folded(np.full(bins, value), 0.1)
    assert len(got.phases) == 1
    (phase,) = got.phases
    assert (phase.start_s, phase.duration_s) == (0.0, 0.1)
    assert phase.rate_bps == pytest.approx(value, rel=1e-12)
    assert phase_threshold(np.full(bins, value)) == pytest.approx(value / 2, rel=1e-12)


def test_no_traffic_with_a_given_iteration_time_is_a_profile_without_phases() -> None:
    """As from_samples documents: an all-zero series is a job that sends nothing."""
    quiet = JobProfile.from_samples(np.zeros(3000), DT, iteration_time_s=0.1)
    assert quiet.phases == () and quiet.bits_per_iteration == 0.0
    assert "without phases" in (JobProfile.from_samples.__doc__ or "")


# -- 2: from_samples' arguments and how many iterations it needs -------------------------
def test_the_docstring_says_how_many_clean_iterations_the_estimate_needs() -> None:
    """Four clean iterations are refused, five are enough, and the docstrings say so."""
    with pytest.raises(InputError, match="no autocorrelation peak"):
        JobProfile.from_samples(_iterations(4), DT)
    assert JobProfile.from_samples(_iterations(5), DT).iteration_time_s == pytest.approx(
        0.1, rel=0.01
    )
    for doc in (JobProfile.from_samples.__doc__, estimate_period.__doc__):
        text = " ".join((doc or "").split()).lower()
        assert "five" in text and "needs at least four" not in text


@pytest.mark.parametrize("iteration_time_s", [1e-4, 0.9e-3])
def test_an_iteration_shorter_than_a_sample_is_refused(iteration_time_s: float) -> None:
    with pytest.raises(InputError) as e:
        JobProfile.from_samples(_iterations(10), DT, iteration_time_s=iteration_time_s)
    assert e.value.field == "iteration_time_s" and "dt_s" in e.value.problem
    # one sample per iteration is still a (coarse) profile
    JobProfile.from_samples(np.full(30, 1e9), DT, iteration_time_s=DT)


@pytest.mark.parametrize("threshold", [-5.0, float("nan"), float("inf"), "1e9", True])
def test_a_bad_threshold_is_refused(threshold) -> None:
    with pytest.raises(InputError) as e:
        JobProfile.from_samples(_iterations(10), DT, threshold_bps=threshold)
    assert e.value.field == "threshold_bps"
    with pytest.raises(InputError) as e:
        JobProfile.from_folded(_iterations(1), 0.1, threshold_bps=threshold)
    assert e.value.field == "threshold_bps"


def test_a_threshold_of_zero_or_a_numpy_number_is_taken() -> None:
    got = JobProfile.from_samples(
        _iterations(10), DT, iteration_time_s=0.1, threshold_bps=np.float32(0.0)
    )
    assert [(p.start_s, p.duration_s) for p in got.phases] == [
        (pytest.approx(0.06), pytest.approx(0.03))
    ]


@pytest.mark.parametrize("min_iterations", [0, -1, 1.5, True, "2"])
def test_a_bad_min_iterations_is_refused(min_iterations) -> None:
    with pytest.raises(InputError) as e:
        JobProfile.from_samples(_iterations(10), DT, min_iterations=min_iterations)
    assert e.value.field == "min_iterations"


def test_one_iteration_is_enough_when_asked() -> None:
    got = JobProfile.from_samples(_iterations(1), DT, iteration_time_s=0.1, min_iterations=1)
    assert len(got.phases) == 1


# -- 3: numpy scalars --------------------------------------------------------------------
def test_numpy_scalars_are_numbers_stored_as_plain_floats() -> None:
    job = JobProfile("a", np.float32(0.1), [Phase(np.int64(0), np.float32(0.05), np.float32(1e9))])
    assert type(job.iteration_time_s) is float
    assert job.iteration_time_s == float(np.float32(0.1))
    (phase,) = job.phases
    assert all(type(v) is float for v in (phase.start_s, phase.duration_s, phase.rate_bps))
    assert phase == Phase(0.0, float(np.float32(0.05)), 1e9)
    # np.float64 (a float subclass, accepted before) is stored plain too
    wide = JobProfile("b", np.float64(0.1), [Phase(np.float64(0.0), 0.05, np.float64(1e9))])
    assert type(wide.iteration_time_s) is float and type(wide.phases[0].rate_bps) is float


def test_plain_numbers_are_kept_as_they_are() -> None:
    """Equality, hashes and JSON of profiles of plain floats (and ints) are unchanged."""
    plain = JobProfile("a", 0.1, [Phase(0.0, 0.05, 1e9)])
    numpy = JobProfile("a", np.float64(0.1), [Phase(np.float64(0.0), 0.05, np.float32(1e9))])
    assert plain == numpy and hash(plain) == hash(numpy)
    assert plain.to_json() == numpy.to_json()
    whole = JobProfile("c", 1, [Phase(0, 1, 10**9)])
    assert type(whole.iteration_time_s) is int and type(whole.phases[0].rate_bps) is int
    assert whole.to_json() == (
        '{"id": "c", "iteration_time_s": 1, "phases": '
        '[{"start_s": 0, "duration_s": 1, "rate_bps": 1000000000}]}'
    )


@pytest.mark.parametrize("bad", [np.bool_(True), True, "0.1", np.float32("nan")])
def test_what_is_no_number_is_still_refused(bad) -> None:
    with pytest.raises(InputError) as e:
        JobProfile("a", bad)
    assert e.value.field == "iteration_time_s"
    with pytest.raises(InputError) as e:
        JobProfile("a", 0.1, [Phase(0.0, 0.05, bad)])
    assert e.value.field == "phases[0].rate_bps"


# -- 4: the modules' examples --------------------------------------------------------------
@pytest.mark.parametrize("module", [circle, profile])
def test_the_modules_examples_run(module) -> None:
    result = doctest.testmod(module, verbose=False)
    assert result.attempted > 0 and result.failed == 0


# -- 5: what compatibility_score's arithmetic cannot hold ---------------------------------
def _half(job_id: str, period_s: float = 0.1, rate_bps: float = 1e9) -> JobProfile:
    return JobProfile(job_id, period_s, [Phase(0.0, period_s / 2, rate_bps)])


@pytest.mark.parametrize("period_s", [1e300, 1e7, MAX_PERIOD_S * 1.01, 1e-7])
def test_an_iteration_time_out_of_bounds_is_refused(period_s: float) -> None:
    with pytest.raises(InputError) as e:
        compatibility_score([_half("a"), _half("b", period_s)], 1e9)
    assert e.value.field == "jobs[1].iteration_time_s" and "'b'" in e.value.problem


@pytest.mark.parametrize("capacity", [1e-300, 0.5])
def test_a_capacity_under_one_bit_per_second_is_refused(capacity: float) -> None:
    with pytest.raises(InputError) as e:
        compatibility_score([_half("a"), _half("b")], capacity)
    assert e.value.field == "capacity_bps"


def test_a_rate_past_the_bound_is_refused() -> None:
    with pytest.raises(InputError) as e:
        compatibility_score([_half("a"), _half("b", rate_bps=MAX_RATE_BPS * 10)], 1e9)
    assert e.value.field == "jobs[1].phases[0].rate_bps"


def test_the_bounds_themselves_are_scored() -> None:
    for jobs, capacity in (
        ([_half("a", MAX_PERIOD_S), _half("b", MAX_PERIOD_S)], 1e9),
        ([_half("a", MIN_PERIOD_S), _half("b", MIN_PERIOD_S)], 1e9),
        ([_half("a", rate_bps=MAX_RATE_BPS), _half("b", rate_bps=MAX_RATE_BPS)], 1.0),
    ):
        sol = compatibility_score(jobs, capacity)
        assert np.isfinite(sol.score) and np.all(np.isfinite(sol.demand_bps))


# -- 6: the demand rows shared between threads ----------------------------------------------
class _YieldingRows(OrderedDict):
    """The demand rows, letting other threads run between a lookup and what follows it
    (as the interpreter may at any bytecode)."""

    def get(self, key, default=None):
        row = super().get(key, default)
        time.sleep(0.0002)
        return row


def test_the_demand_rows_are_shared_safely_between_threads(monkeypatch) -> None:
    """Four threads, a cache of one row: without a lock one thread's lookup finds a row
    that another evicts before it is moved to the end (KeyError)."""
    monkeypatch.setattr(circle._DEMAND_ROWS, "size", 1)
    monkeypatch.setattr(circle._DEMAND_ROWS, "items", _YieldingRows())
    unified = unified_period([0.1])
    jobs = [JobProfile(f"j{i}", 0.1, [Phase(0.01 * i, 0.02, 1e9)]) for i in range(4)]
    expected = [score_at_shifts([j], 5e8, {}, unified, 72)[0] for j in jobs]
    errors: list[str] = []
    wrong: list[int] = []

    def work(i: int) -> None:
        try:
            for _ in range(150):
                if score_at_shifts([jobs[i]], 5e8, {}, unified, 72)[0] != expected[i]:
                    wrong.append(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert not wrong
    assert len(circle._DEMAND_ROWS) <= 1
