import itertools
import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cassini.circle import (
    compatibility_score,
    continuous_score,
    grid_error_bound,
    n_angles,
    score_at_shifts,
    unified_period,
)
from cassini.errors import InputError
from cassini.profile import JobProfile, Phase

GBPS = 1e9


def test_paper_40ms_60ms_jobs_reach_score_one():
    # CASSINI Fig. 5: a 40 ms and a 60 ms job on a 120 ms unified circle.  Together
    # their Up phases fit in gcd(40, 60) = 20 ms, so a rotation interleaves them fully.
    a = JobProfile("j1", 0.040, [Phase(0.0, 0.010, GBPS)])
    b = JobProfile("j2", 0.060, [Phase(0.0, 0.010, GBPS)])
    same_start, _ = score_at_shifts([a, b], GBPS, {}, unified_period([0.04, 0.06]), n_angles(5))
    assert same_start < 1.0
    sol = compatibility_score([a, b], GBPS)
    assert sol.unified_period_s == pytest.approx(0.120)
    assert sol.unified.repeats == (3, 2)
    assert sol.n_angles == 72
    assert sol.score == pytest.approx(1.0)
    assert continuous_score([a, b], GBPS, sol.time_shifts_s, 0.120) == pytest.approx(1.0)
    assert sol.time_shifts_s["j1"] == 0.0
    assert 0.0 <= sol.time_shifts_s["j2"] < 0.060
    assert sol.demand_bps.max() <= GBPS * (1 + 1e-12)


def test_incompatible_jobs_score_below_one_and_can_go_negative():
    full = [JobProfile(f"j{i}", 0.1, [Phase(0.0, 0.099, 3 * GBPS)]) for i in range(3)]
    sol = compatibility_score(full, GBPS)
    assert sol.score < 0  # demand of 9 Gb/s on a 1 Gb/s link nearly all the time


@pytest.mark.timing
def test_unified_period_exact_and_fallback():
    assert unified_period([0.040, 0.060]).period_s == pytest.approx(0.12)
    assert unified_period([0.0404, 0.0596]).period_s == pytest.approx(0.12)  # 1 ms ticks
    start = time.perf_counter()
    u = unified_period([0.1731, 0.2519, 0.0977])  # exact LCM is ~10^6 ticks
    # the guard, not a speed target: 200 calls on this 2-core machine with other developers'
    # tests running (2026-11-26) took median < 0.1 ms, max 38 ms; enumerating the exact LCM
    # would take minutes.  1 s is 26x the slowest measured call.
    assert time.perf_counter() - start < 1.0
    assert not u.exact
    assert u.period_s <= 8 * 0.2519 + 1e-9
    real = np.array([0.1731, 0.2519, 0.0977])
    effective = np.array(u.effective_iteration_times_s())
    assert np.all(effective >= real * (1 - 1e-12))  # jobs are stretched, never shortened
    assert u.max_relative_error == pytest.approx(np.max(effective / real - 1))
    assert u.max_relative_error < 0.05


def test_fallback_prefers_shortest_period_within_tolerance():
    u = unified_period([0.173, 0.251], tolerance=0.02)
    assert u.max_relative_error <= 0.02
    u_tight = unified_period([0.173, 0.251], tolerance=0.001)
    assert u_tight.max_relative_error >= u.max_relative_error


@pytest.mark.parametrize("bad", [0, -5, 400, math.nan])
def test_bad_precision(bad):
    with pytest.raises(InputError, match="precision_deg"):
        n_angles(bad)


def test_bad_capacity_and_empty():
    job = JobProfile("a", 0.1, [Phase(0.0, 0.05, GBPS)])
    with pytest.raises(InputError, match="capacity_bps"):
        compatibility_score([job], 0.0)
    with pytest.raises(InputError, match="jobs"):
        compatibility_score([], GBPS)


@st.composite
def link_jobs(draw, max_jobs=3, periods=(0.02, 0.03, 0.04, 0.06, 0.12)):
    n = draw(st.integers(1, max_jobs))
    jobs = []
    for i in range(n):
        period = draw(st.sampled_from(periods))
        phases, cursor = [], 0.0
        for _ in range(draw(st.integers(0, 2))):
            start = cursor + draw(st.floats(0.0, 0.3)) * period
            duration = draw(st.floats(0.02, 0.4)) * period
            if start + duration >= period:
                break
            phases.append(Phase(start, duration, draw(st.floats(1e8, 2e9))))
            cursor = start + duration
        jobs.append(JobProfile(f"j{i}", period, phases))
    return jobs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=link_jobs(), capacity=st.floats(5e8, 3e9), data=st.data())
def test_score_properties(jobs, capacity, data):
    sol = compatibility_score(jobs, capacity)
    assert sol.score <= 1.0 + 1e-12
    # permuting the jobs changes nothing
    perm = data.draw(st.permutations(jobs))
    assert compatibility_score(perm, capacity).score == pytest.approx(sol.score, abs=1e-12)
    # shifts are in [0, T) and, evaluated in continuous time, reproduce the grid score
    for j in jobs:
        assert 0.0 <= sol.time_shifts_s[j.job_id] < j.iteration_time_s
    fine = continuous_score(jobs, capacity, sol.time_shifts_s, sol.unified_period_s)
    assert abs(fine - sol.score) <= grid_error_bound(jobs, sol) + 1e-9
    # no rotation on the grid beats the optimum: spot-check random shifts
    step = sol.unified_period_s / sol.n_angles
    shifts = {j.job_id: data.draw(st.integers(0, 71)) * step for j in jobs}
    other, _ = score_at_shifts(
        sorted(jobs, key=lambda j: j.job_id), capacity, shifts, sol.unified, sol.n_angles
    )
    assert other <= sol.score + 1e-9


def test_exact_vs_heuristic_gap_on_small_instances():
    rng = np.random.default_rng(7)
    gaps = []
    for _ in range(40):
        jobs = []
        for i in range(int(rng.integers(3, 5))):
            period = float(rng.choice([0.05, 0.1, 0.2]))
            start = float(rng.uniform(0, 0.5)) * period
            duration = float(rng.uniform(0.15, 0.45)) * period
            jobs.append(
                JobProfile(f"j{i}", period, [Phase(start, duration, rng.uniform(3e8, 1e9))])
            )
        exact = compatibility_score(jobs, GBPS, method="exact")
        heuristic = compatibility_score(jobs, GBPS, method="heuristic")
        assert exact.method == "exact" and heuristic.method == "heuristic"
        assert heuristic.score <= exact.score + 1e-9  # exact is the grid optimum
        gaps.append(exact.score - heuristic.score)
    print(f"heuristic gap: mean {np.mean(gaps):.4f} max {np.max(gaps):.4f}")
    # README ("How it goes beyond the paper"): mean < 0.001, max 0.012 on 3-4-job instances;
    # this seed measures mean 0.0001, max 0.0025 (deterministic: seeded rng, seeded restarts)
    assert np.mean(gaps) < 0.001
    assert np.max(gaps) <= 0.012


def brute_force(jobs: list[JobProfile], capacity: float, precision_deg: float) -> float:
    """Best grid score by trying every rotation of every job but the first
    (``itertools.product``), scored independently by :func:`score_at_shifts`."""
    jobs = sorted(jobs, key=lambda j: j.job_id)
    unified = unified_period([j.iteration_time_s for j in jobs])
    angles = n_angles(precision_deg)
    step = unified.period_s / angles
    rotations = [range(angles // m) for m in unified.repeats[1:]]  # distinct rotations each
    best = -math.inf
    for ks in itertools.product(*rotations):
        shifts = {j.job_id: k * step for j, k in zip(jobs[1:], ks, strict=True)}
        best = max(best, score_at_shifts(jobs, capacity, shifts, unified, angles)[0])
    return best


@pytest.mark.parametrize("n_jobs", [2, 3])
def test_exact_score_equals_an_exhaustive_search(n_jobs):
    rng = np.random.default_rng(11 + n_jobs)
    for _ in range(12):
        jobs = []
        for i in range(n_jobs):
            period = float(rng.choice([0.04, 0.06, 0.12]))
            start = float(rng.uniform(0, 0.5)) * period
            duration = float(rng.uniform(0.15, 0.5)) * period  # contended: the scores vary
            phase = Phase(start, duration, rng.uniform(6e8, 2e9))
            jobs.append(JobProfile(f"j{i}", period, [phase]))
        exact = compatibility_score(jobs, GBPS, precision_deg=10, method="exact")
        assert exact.method == "exact"
        assert exact.score == pytest.approx(brute_force(jobs, GBPS, 10), abs=1e-12)
        # the reported shifts achieve the reported score
        shifted, _ = score_at_shifts(
            sorted(jobs, key=lambda j: j.job_id), GBPS, exact.time_shifts_s, exact.unified, 36
        )
        assert shifted == pytest.approx(exact.score, abs=1e-12)


def test_auto_uses_heuristic_for_many_jobs():
    jobs = [JobProfile(f"j{i}", 0.1, [Phase(0.0, 0.01, 6e8)]) for i in range(8)]
    sol = compatibility_score(jobs, GBPS)
    assert sol.method == "heuristic"
    assert sol.score == pytest.approx(1.0)  # 8 x 10 ms phases, each > C/2, interleave in 100 ms


def test_a_grid_too_coarse_for_a_job_is_not_reported_exact():
    """A 0.4 ms iteration on the 1 ms grid is taken as 1 ms (error 1.5): the answer said
    ``period_exact: true`` beside ``period_error`` 1.5 (999 for 1 us); a 12.5 ms one is
    taken as 12 ms (4 %, over the 1 % tolerance)."""
    coarse = unified_period([0.0004, 0.2])
    assert coarse.max_relative_error == pytest.approx(1.5)
    assert not coarse.exact
    assert not unified_period([0.0125, 0.2]).exact
    fine = unified_period([0.040, 0.060])
    assert fine.exact and fine.max_relative_error == 0.0
