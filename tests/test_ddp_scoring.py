"""Scoring DDP-shaped profiles (several short bursts below line rate) on the grid, held to
the exact continuous score on measured profiles.

The profiles come from real recorder logs (``tests/data/ddp_recorder_mlp*.jsonl``: rank 0
of 2-rank gloo DDP jobs on loopback, MLPs of 512 x 5 and 448 x 6 layers, batch 768), each
time-scaled to a whole millisecond iteration so the unified period is exact (the grid
error bound holds for exact periods).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cassini.circle import compatibility_score, continuous_score, grid_error_bound
from cassini.measure import bucket_records_from_dicts, profile_from_buckets, read_jsonl
from cassini.profile import JobProfile, Phase

DATA = Path(__file__).parent / "data"
RESOLUTION_S = 1e-3


def measured(name: str, job_id: str, iteration_time_s: float | None = None) -> JobProfile:
    log = bucket_records_from_dicts(read_jsonl(DATA / f"ddp_recorder_{name}.jsonl"))
    p = profile_from_buckets(job_id, log.records, log.world_size, log.iteration_starts_s, skip=2)
    target = iteration_time_s or round(p.iteration_time_s / RESOLUTION_S) * RESOLUTION_S
    f = target / p.iteration_time_s
    return JobProfile(
        job_id, target, [Phase(q.start_s * f, q.duration_s * f, q.rate_bps) for q in p.phases]
    )


def bursts() -> JobProfile:
    return measured("mlp512", "a")


def cases() -> list[tuple[list[JobProfile], float, float]]:
    a = bursts()
    b = JobProfile("b", a.iteration_time_s, a.phases)
    long_phase = measured("mlp448", "c", a.iteration_time_s)
    half = measured("mlp512", "d", a.iteration_time_s / 2)
    peak = a.peak_rate_bps
    return [
        ([a, b], 1.2 * peak, 5.0),
        ([a, b], 1.6 * peak, 2.0),
        ([a, long_phase], 1.1 * peak, 5.0),
        ([a, b, half], 1.5 * peak, 5.0),
        ([a, b, long_phase], 2.0 * peak, 5.0),
    ]


def test_fixture_profiles_are_ddp_shaped():
    a = bursts()
    assert len(a.phases) >= 3
    assert a.communication_share < 0.5  # short bursts between backward-pass compute
    assert len({round(p.rate_bps, -6) for p in a.phases}) > 1  # bursts differ in rate


@pytest.mark.parametrize("index", range(len(cases())))
def test_grid_score_within_its_bound_of_the_continuous_score(index):
    jobs, capacity, precision = cases()[index]
    assert all(p.rate_bps < capacity for j in jobs for p in j.phases)  # below line rate
    sol = compatibility_score(jobs, capacity, precision_deg=precision, resolution_s=RESOLUTION_S)
    assert sol.unified.exact
    exact = continuous_score(jobs, capacity, sol.time_shifts_s, sol.unified_period_s)
    bound = grid_error_bound(jobs, sol)
    # averaging a rate over an angle never raises its excess: grid >= continuous
    assert exact - 1e-9 <= sol.score <= exact + bound + 1e-9


@pytest.mark.parametrize("index", [0, 1, 2])
def test_grid_shifts_are_near_the_continuous_optimum(index):
    """For a pair, sweep the second job's shift finely in continuous time.  The grid's
    choice g satisfies cont(g) >= best - L * step / 2 - bound(g): the grid optimum beats the
    grid rotation nearest the continuous optimum s*, whose grid score is at least its
    continuous score, which is within L * step / 2 of cont(s*) (moving a job by d changes
    the excess only within d after its phase edges, by at most the phase's rate)."""
    jobs, capacity, precision = cases()[index]
    sol = compatibility_score(jobs, capacity, precision_deg=precision, resolution_s=RESOLUTION_S)
    period = sol.unified_period_s
    first, second = sorted(jobs, key=lambda j: j.job_id)
    base = sol.time_shifts_s[first.job_id]
    sweep = np.linspace(0.0, second.iteration_time_s, 1500, endpoint=False)
    best = max(
        continuous_score(jobs, capacity, {first.job_id: base, second.job_id: float(s)}, period)
        for s in sweep
    )
    chosen = continuous_score(jobs, capacity, sol.time_shifts_s, period)
    step = period / sol.n_angles
    reps = period / second.iteration_time_s
    lipschitz = reps * sum(2 * p.rate_bps for p in second.phases) / (period * capacity)
    assert chosen >= best - lipschitz * step / 2 - grid_error_bound(jobs, sol) - 1e-9
