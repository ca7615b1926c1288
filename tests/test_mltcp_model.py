import numpy as np
import pytest

from mltcp.model import simulate, two_job_offsets
from mltcp.policy import convergence_map


def two_jobs(x0, comm=0.05, compute=0.05):
    x0 = np.asarray(x0, float)
    m = len(x0)
    return (
        np.full((m, 2), compute),
        np.full((m, 2), comm),
        np.stack([np.zeros(m), x0 * comm], axis=1),
    )


def test_fluid_model_reproduces_the_convergence_map():
    x0 = [0.05, 0.1, 0.2]
    r = simulate(*two_jobs(x0), iterations=8, policy="mltcp", slope=1.0, intercept=0.5)
    measured = two_job_offsets(r, 0.5, 0.1)
    for i, x in enumerate(x0):
        predicted = [x]
        for _ in range(5):
            predicted.append(convergence_map(predicted[-1], 2.0))
        assert measured[i, :6] == pytest.approx(predicted, abs=0.02)


def test_fair_sharing_keeps_same_start_jobs_overlapped():
    r = simulate(*two_jobs([0.0, 0.1]), iterations=10, policy="fair")
    assert np.all(r.iterations_to_interleave() == -1)
    assert r.overlap[0, -1] == pytest.approx(1.0, abs=0.01)
    # fair sharing halves each job's rate: iteration = compute + 2 x comm
    assert np.nanmean(r.iteration_times_s[0, :, 2:]) == pytest.approx(0.15, rel=0.02)


def test_mltcp_interleaves_and_reaches_the_ideal_iteration_time():
    r = simulate(*two_jobs([0.05]), iterations=20, policy="mltcp", slope=1.0, intercept=0.5)
    k = r.iterations_to_interleave()[0]
    assert 0 < k < 12
    assert np.nanmean(r.iteration_times_s[0, :, -5:]) == pytest.approx(0.1, rel=0.02)


def test_stronger_slope_interleaves_sooner_and_cubic_variant_runs():
    slopes = np.array([0.25, 1.0, 3.0])
    comp, comm, start = two_jobs([0.05] * 3)
    r = simulate(comp, comm, start, iterations=25, policy="mltcp", slope=slopes, intercept=0.5)
    k = r.iterations_to_interleave()
    assert k[0] > k[1] > k[2] > 0
    rc = simulate(*two_jobs([0.05]), iterations=25, policy="mltcp-cubic")
    assert rc.iterations_to_interleave()[0] > 0


def test_bad_model_input():
    with pytest.raises(ValueError, match="policy"):
        simulate(*two_jobs([0.1]), iterations=3, policy="magic")
    with pytest.raises(ValueError, match="intercept"):
        simulate(*two_jobs([0.1]), iterations=3, policy="mltcp", intercept=0)
