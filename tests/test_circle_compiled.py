"""The compiled searches (cassini.circle_compiled) give the numpy versions' rotations
bit for bit, and their excess sums are numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import require

from cassini import circle, circle_compiled
from cassini.profile import JobProfile, Phase

require(circle_compiled.AVAILABLE, "numba (the [sim] extra)")


@pytest.mark.parametrize("angles", [8, 9, 15, 16, 17, 36, 72, 90, 127, 128])
def test_excess_rows_are_numpys(angles: int) -> None:
    """Every rotation's excess summed as numpy sums it (its pairwise blocks), to the bit."""
    rng = np.random.default_rng(angles)
    for scale in (1.0, 1e10):
        base = rng.random(angles) * scale
        vector = rng.random(angles) * scale
        vector[rng.random(angles) < 0.5] = 0.0
        count = int(rng.integers(1, angles + 1))
        mats = circle._rotation_matrix(vector, count)
        expected = circle.excess(base[None, :] + mats, scale).sum(axis=-1)
        got = circle_compiled.excess_rows(base, vector, count, scale)
        assert got.tobytes() == expected.tobytes()


def test_other_circles_run_in_numpy() -> None:
    assert circle_compiled.supports(72)
    assert not circle_compiled.supports(7) and not circle_compiled.supports(129)
    assert circle._kernels(144) is None


def _random_problem(rng: np.random.Generator) -> tuple[np.ndarray, list[int], float]:
    """Demand vectors of 2-14 jobs with one to three phases each on a circle of 6-144
    angles, some repeating (fewer distinct rotations), and a capacity that some angles
    exceed."""
    n, angles = int(rng.integers(2, 15)), int(rng.choice([6, 36, 72, 90, 144]))
    rows = []
    for _ in range(n):
        row = np.zeros(angles)
        repeats = int(rng.choice([1, 1, 2, 3, 4]))
        width = angles // repeats
        for _ in range(int(rng.integers(1, 4))):
            start = int(rng.integers(width))
            length = int(rng.integers(1, max(2, width // 2)))
            row[start : start + length] += rng.uniform(1e9, 5e10)
        rows.append(np.tile(row[:width], repeats)[:angles] if angles % repeats == 0 else row)
    vectors = np.vstack(rows)
    periods = [1] + [circle.rotation_period(v) for v in vectors[1:]]
    capacity = float(rng.uniform(0.3, 1.0) * vectors.sum(axis=0).max())
    return vectors, periods, capacity


@pytest.mark.parametrize("seed", range(40))
def test_descent_gives_the_numpy_rotations(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors, periods, capacity = _random_problem(rng)
    for restarts in (0, 8):
        numpy_rot = circle._coordinate_descent(
            vectors, periods, capacity, restarts, seed, compiled=False
        )
        compiled_rot = circle._coordinate_descent(vectors, periods, capacity, restarts, seed)
        assert compiled_rot == numpy_rot


def test_descents_that_reach_no_excess_give_the_numpy_rotations() -> None:
    """The compiled descent stops a start once its excess is within the tolerance of
    zero, and the starts once one ends at zero: the same rotations as numpy's full
    search, on problems roomy enough that many reach zero (and some only from a later
    start)."""
    reached_zero = 0
    for seed in range(60):
        rng = np.random.default_rng(1000 + seed)
        vectors, periods, _ = _random_problem(rng)
        capacity = float(rng.uniform(0.5, 1.05) * vectors.sum(axis=0).max())
        for restarts in (0, 8):
            numpy_rot = circle._coordinate_descent(
                vectors, periods, capacity, restarts, seed, compiled=False
            )
            compiled_rot = circle._coordinate_descent(vectors, periods, capacity, restarts, seed)
            assert compiled_rot == numpy_rot, (seed, restarts)
        total = circle.rotated_sum(vectors, numpy_rot)
        reached_zero += float(circle.excess(total, capacity).sum()) == 0.0
    assert 10 <= reached_zero < 60  # both kinds of problem were searched


def test_link_problems_of_real_profiles_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole compatibility scores of many jobs (heuristic search, then centring): the
    same shifts, score and demand with the compiled kernels as with numpy alone."""
    rng = np.random.default_rng(3)
    for trial in range(10):
        jobs = [
            JobProfile(
                f"j{i}",
                float(rng.choice([0.1, 0.12, 0.15, 0.2, 0.3])),
                [Phase(float(rng.uniform(0, 0.05)), float(rng.uniform(0.01, 0.04)), 2e10)],
            )
            for i in range(int(rng.integers(5, 12)))
        ]
        fast = circle.compatibility_score(jobs, 5e10)
        with monkeypatch.context() as patch:
            patch.setattr(circle, "_kernels", lambda angles: None)
            slow = circle.compatibility_score(jobs, 5e10)
        assert fast.method == slow.method == "heuristic"
        assert fast.time_shifts_s == slow.time_shifts_s, trial
        assert fast.score == slow.score
        assert np.array_equal(fast.demand_bps, slow.demand_bps)


@pytest.mark.parametrize("seed", range(10))
def test_centring_gives_the_numpy_rotations(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    vectors, periods, capacity = _random_problem(rng)
    start = circle._coordinate_descent(vectors, periods, capacity, 2, seed)
    numpy_rot = circle._centre(vectors, periods, capacity, start, compiled=False)
    assert circle._centre(vectors, periods, capacity, start) == numpy_rot


@pytest.mark.parametrize("seed", range(12))
def test_exact_search_gives_the_numpy_rotations(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    vectors, periods, capacity = _random_problem(rng)
    vectors, periods = vectors[:4], periods[:4]  # small enough to search exhaustively
    numpy_rot = circle._exact(vectors, periods, capacity, compiled=False)
    assert circle._exact(vectors, periods, capacity) == numpy_rot


def test_a_process_that_disallows_compiled_searches_gets_the_same_answers() -> None:
    """The service's workers call ``allow_compiled(False)`` (no numba import under a
    request's deadline): the numpy searches answer, with the same rotations and score."""
    jobs = [JobProfile(f"j{i}", 0.1 * (i + 1), (Phase(0.01 * i, 0.04, 4e10),)) for i in range(4)]
    compiled = circle.compatibility_score(jobs, 5e10, method="heuristic")
    try:
        circle.allow_compiled(False)
        assert circle._compiled_module() is None and not circle.warm_compiled()
        plain = circle.compatibility_score(jobs, 5e10, method="heuristic")
    finally:
        circle.allow_compiled(True)
    assert circle._compiled_module() is circle_compiled
    assert plain.time_shifts_s == compiled.time_shifts_s and plain.score == compiled.score
