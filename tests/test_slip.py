"""Slip tolerance (cassini.slip): how late a held job may run before its phases meet
another job's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.errors import InputError
from cassini.profile import JobProfile, Phase
from cassini.slip import link_slip_tolerances_s, slip_tolerances_s

CAP = 1e9  # bits/s


def _job(job_id: str, period_s: float, *phases: tuple[float, float, float]) -> JobProfile:
    return JobProfile(job_id, period_s, tuple(Phase(s, d, r) for s, d, r in phases))


def test_two_bursts_with_room_on_either_side():
    """Two 20 ms bursts at capacity, 50 ms apart in a 100 ms period: 30 ms of idle link on
    either side.  Without allowance the tolerance is that room; with 10 % it is 10 ms
    more (10 ms of overlap at capacity is 10 % of the period's capacity-time)."""
    a = _job("a", 0.1, (0.0, 0.02, CAP))
    b = _job("b", 0.1, (0.0, 0.02, CAP))
    shifts = {"a": 0.0, "b": 0.05}
    tight = link_slip_tolerances_s([a, b], CAP, shifts, allowance=0.0, limit=0.45)
    assert tight["a"] == pytest.approx(0.03, abs=0.0003)
    assert tight["b"] == pytest.approx(0.03, abs=0.0003)
    loose = link_slip_tolerances_s([a, b], CAP, shifts, allowance=0.1, limit=0.45)
    assert loose["b"] == pytest.approx(0.04, abs=0.0003)
    capped = link_slip_tolerances_s([a, b], CAP, shifts)  # default limit: 20 % of the period
    assert capped["b"] == pytest.approx(0.02)


def test_a_full_link_leaves_no_room():
    """Two bursts of half the period each, back to back: any slip overlaps them."""
    a = _job("a", 0.1, (0.0, 0.05, CAP))
    b = _job("b", 0.1, (0.0, 0.05, CAP))
    tol = link_slip_tolerances_s([a, b], CAP, {"a": 0.0, "b": 0.05}, allowance=0.0)
    assert tol["a"] == tol["b"] == 0.0
    # 5 % allowance: 5 ms of overlap at capacity
    five = link_slip_tolerances_s([a, b], CAP, {"a": 0.0, "b": 0.05}, allowance=0.05)
    assert five["b"] == pytest.approx(0.005, abs=0.0003)  # within one 0.25 ms step


def test_bursts_below_capacity_may_overlap():
    """Two bursts at 40 % of capacity never exceed it: the tolerance is the limit."""
    a = _job("a", 0.1, (0.0, 0.05, 0.4 * CAP))
    b = _job("b", 0.1, (0.0, 0.05, 0.4 * CAP))
    tol = link_slip_tolerances_s([a, b], CAP, {"a": 0.0, "b": 0.05}, allowance=0.0)
    assert tol["a"] == pytest.approx(0.02)


@settings(max_examples=40, deadline=None)
@given(
    starts=st.lists(st.floats(0.0, 0.08), min_size=2, max_size=2),
    durations=st.lists(st.floats(0.002, 0.02), min_size=2, max_size=2),
    rates=st.lists(st.floats(0.2, 1.0), min_size=2, max_size=2),
    shift=st.floats(0.0, 0.099),
    allowance=st.floats(0.0, 0.2),
)
def test_tolerance_keeps_the_excess_within_the_allowance(
    starts, durations, rates, shift, allowance
):
    period = 0.1
    a = _job("a", period, (starts[0], durations[0], rates[0] * CAP))
    b = _job("b", period, (starts[1], durations[1], rates[1] * CAP))
    shifts = {"a": 0.0, "b": shift}
    tol = link_slip_tolerances_s([a, b], CAP, shifts, allowance=allowance)
    more = link_slip_tolerances_s([a, b], CAP, shifts, allowance=allowance + 0.05)

    grid = np.linspace(0.0, period, 20_000, endpoint=False)

    def over(moved: str, d: float) -> float:
        """Excess (seconds of the link at capacity) sampled on a fine grid: a reference
        that handles any shift, independent of continuous_score's edge bookkeeping."""
        at = dict(shifts)
        at[moved] += d
        demand = a.rate_at(grid, at["a"]) + b.rate_at(grid, at["b"])
        return float(np.maximum(demand - CAP, 0.0).mean()) * period / CAP

    sampling = 4 * (rates[0] + rates[1]) * period / len(grid)  # edges fall between samples
    for job in ("a", "b"):
        assert 0.0 <= tol[job] <= 0.2 * period + 1e-12
        assert more[job] >= tol[job]
        base = over(job, 0.0)
        for d in (tol[job], -tol[job], 0.5 * tol[job]):
            assert over(job, d) <= base + allowance * period + sampling


def test_a_shift_near_the_period_wraps():
    """A shift just under the period plus a late slip passes the period: the same answer
    as the equivalent shift one period earlier (negative), which needs no wrap."""
    a = _job("a", 0.1, (0.0, 0.02, CAP))
    b = _job("b", 0.1, (0.085, 0.01, CAP))
    near = link_slip_tolerances_s([a, b], CAP, {"a": 0.0, "b": 0.09}, allowance=0.0)
    early = link_slip_tolerances_s([a, b], CAP, {"a": 0.0, "b": -0.01}, allowance=0.0)
    assert near == early
    # b sends over [0.075, 0.085) of the circle: 15 ms of room before a, 55 ms after a
    assert near["b"] == pytest.approx(0.015, abs=0.0003)


def test_tolerances_take_the_tightest_link_and_skip_free_jobs():
    roomy = _job("a", 0.1, (0.0, 0.02, CAP))
    full = _job("b", 0.1, (0.0, 0.05, CAP))
    other = _job("c", 0.1, (0.0, 0.05, CAP))
    free = _job("d", 0.1, (0.0, 0.05, CAP))
    profiles = {p.job_id: p for p in (roomy, full, other, free)}
    paths = {"a": ["l1"], "b": ["l1", "l2"], "c": ["l2"], "d": ["l1"]}
    periods = {"a": 0.1, "b": 0.1, "c": 0.1}  # d runs free
    shifts = {"a": 0.015, "b": 0.05, "c": 0.0}  # a has 15 ms on either side of b
    tol = slip_tolerances_s({"l1": CAP, "l2": CAP}, paths, profiles, periods, shifts)
    assert set(tol) == {"a", "b", "c"}
    assert tol["b"] == pytest.approx(tol["c"], abs=0.0003)  # l2 is full: the tightest
    assert tol["b"] < tol["a"]
    alone = slip_tolerances_s({"l1": CAP}, {"a": ["l1"]}, profiles, {"a": 0.12}, {"a": 0.0})
    assert alone == {"a": pytest.approx(0.024)}  # nothing to meet: the limit, of its period


def test_bad_input_names_the_field():
    a = _job("a", 0.1, (0.0, 0.02, CAP))
    b = _job("b", 0.1, (0.0, 0.02, CAP))
    with pytest.raises(InputError, match="capacity_bps"):
        link_slip_tolerances_s([a, b], 0.0, {})
    with pytest.raises(InputError, match="limit"):
        link_slip_tolerances_s([a, b], CAP, {}, limit=0.5)
    with pytest.raises(InputError, match="allowance"):
        link_slip_tolerances_s([a, b], CAP, {}, allowance=-1.0)
    with pytest.raises(InputError, match="periods_s.a"):
        slip_tolerances_s({"l": CAP}, {"a": ["l"]}, {"a": a}, {"a": 0.05}, {})
    with pytest.raises(InputError, match="shifts_s.b"):
        link_slip_tolerances_s([a, b], CAP, {"b": float("nan")})
    with pytest.raises(InputError, match="unknown link 'x'"):
        slip_tolerances_s({}, {"a": ["x"], "b": ["x"]}, {"a": a, "b": b}, {"a": 0.1, "b": 0.1}, {})
