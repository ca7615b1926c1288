"""The simulator's link sharing: MLTCP weights (and the kernels' progress table) are
mltcp.policy's, the simulator's MLTCP dynamics are mltcp.model's, strict priority leaves
a lower class only the rest."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.profile import JobProfile, Phase
from cassini.sim.network.flows import FlowJob
from cassini.sim.network.fluid import simulate
from cassini.sim.parts.sharing import mltcp_factor, mltcp_weight, progress_table, shared_rates
from mltcp import model
from mltcp.policy import ONE, MltcpParams, factor, factor_q, ratio_q

params = st.builds(
    MltcpParams,
    slope=st.floats(0, 8),
    intercept=st.floats(0.05, 4),
    scale_cut=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(
    p=params,
    sent=st.lists(st.integers(0, 10**9), min_size=2, max_size=5),
    per_iter=st.lists(st.integers(1, 10**9), min_size=5, max_size=5),
)
def test_mltcp_share_on_a_full_link_is_mltcp_policys(p, sent, per_iter) -> None:
    """Flows that all want the whole link split it in proportion to mltcp.policy's F
    (F squared with the scaled cut), F computed by the kernel's fixed-point rule."""
    n = len(sent)
    bits = [8 * s for s in sent]
    per_bits = [8 * b for b in per_iter[:n]]
    slope_q, intercept_q = p.fixed()[:2]
    expected_f = [
        factor_q(ratio_q(s, b), slope_q, intercept_q) / ONE
        for s, b in zip(sent, per_iter[:n], strict=True)
    ]
    assert [mltcp_factor(s, b, p) for s, b in zip(bits, per_bits, strict=True)] == expected_f
    for f, s, b in zip(expected_f, sent, per_iter[:n], strict=True):  # real-number rule
        # Q10 rounding of slope and intercept, truncation of the ratio and the product
        assert f == pytest.approx(factor(s / b, p), abs=(3 + p.slope) / ONE)
    weights = [mltcp_weight(s, b, p) for s, b in zip(bits, per_bits, strict=True)]
    gamma = 2 if p.scale_cut else 1
    capacity = 1e10
    rates = shared_rates([capacity] * n, [[0]] * n, [capacity], weights=weights)
    total = sum(f**gamma for f in expected_f)
    for r, f in zip(rates, expected_f, strict=True):
        assert r == pytest.approx(capacity * f**gamma / total, rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(p=params, per_iter=st.integers(1, 10**9), sent=st.integers(0, 10**9))
def test_the_progress_table_holds_mltcps_weights_exactly(p, per_iter, sent) -> None:
    """The kernels read MLTCP's weight off :func:`progress_table` at the fixed-point
    ratio: every entry is :func:`mltcp_weight` at that ratio, bit for bit, and a progress
    rule multiplies in its value at ``k / ONE``."""
    table = progress_table(p)
    r = ratio_q(sent, per_iter)
    assert table[r] == mltcp_weight(8 * sent, 8 * per_iter, p)
    both = progress_table(p, lambda x: 1.0 + x)
    assert both[r] == table[r] * (1.0 + r / ONE)
    assert progress_table(None) is None
    assert progress_table(None, lambda x: 2.0)[r] == 2.0


@pytest.mark.parametrize("offset_s", [0.005, 0.02])
def test_simulator_mltcp_dynamics_match_mltcp_model(offset_s) -> None:
    """Two identical jobs on one link converge to interleaving iteration by iteration as
    mltcp.model's MLTCP fluid model says (same F, same parameters)."""
    cap, compute, comm = 1e9, 0.06, 0.04
    period = compute + comm
    p = JobProfile("x", period, (Phase(compute, comm, cap),))
    jobs = [FlowJob("a", p, ("l",), 0.0), FlowJob("b", p, ("l",), offset_s)]
    params = MltcpParams()  # the defaults: the cut scaled too, shares as F**2
    sim = simulate(jobs, {"l": cap}, horizon_s=12 * period, mltcp=params)
    ref = model.simulate(
        np.array([compute, compute]),
        np.array([comm, comm]),
        np.array([0.0, offset_s]),
        10,
        policy="mltcp-scale-cut" if params.scale_cut else "mltcp",
        slope=params.slope,
        intercept=params.intercept,
    )
    for k, job in enumerate("ab"):
        got = np.array(sim.iteration_times_s[job][:10])
        assert got == pytest.approx(ref.iteration_times_s[0, k, :10], rel=0.01)
    # and it differs from max-min, which never interleaves them
    fair = simulate(jobs, {"l": cap}, horizon_s=12 * period)
    assert np.mean(fair.iteration_times_s["a"][-3:]) > 1.05 * np.mean(
        sim.iteration_times_s["a"][-3:]
    )


@settings(max_examples=200, deadline=None)
@given(
    high=st.lists(st.floats(1, 100), min_size=1, max_size=4),
    low=st.lists(st.floats(1, 100), min_size=1, max_size=4),
    capacity=st.floats(1, 300),
)
def test_low_priority_gets_only_what_the_higher_class_leaves(high, low, capacity) -> None:
    demand = high + low
    classes = [0] * len(high) + [1] * len(low)
    rates = shared_rates(demand, [[0]] * len(demand), [capacity], classes=classes)
    alone = shared_rates(high, [[0]] * len(high), [capacity])
    assert rates[: len(high)] == pytest.approx(alone)  # the higher class ignores the lower
    left = max(0.0, capacity - sum(alone))
    assert sum(rates[len(high) :]) == pytest.approx(min(left, sum(low)), abs=1e-6)
    for r, d in zip(rates, demand, strict=True):
        assert -1e-9 <= r <= d * (1 + 1e-9)


def test_strict_priority_in_the_fluid_model_starves_the_low_class() -> None:
    """On one link, a low-priority job sends only while the high one computes."""
    cap = 1e9
    p = JobProfile("x", 0.1, (Phase(0.0, 0.1, cap),))  # always sending at line rate
    jobs = [FlowJob("hi", p, ("l",), 0.0, priority=0), FlowJob("lo", p, ("l",), 0.0, priority=1)]
    r = simulate(jobs, {"l": cap}, horizon_s=1.0)
    assert np.mean(r.iteration_times_s["hi"]) == pytest.approx(0.1, rel=1e-6)
    assert r.iteration_times_s["lo"] == ()  # never finishes an iteration


def test_weighted_max_min_on_two_links() -> None:
    # flow 0 crosses both links; link 1 is shared with a weight-3 flow
    rates = shared_rates([10, 10, 10], [[0, 1], [1], [0]], [10, 8], weights=[1, 3, 1])
    assert rates == pytest.approx([2.0, 6.0, 8.0])
