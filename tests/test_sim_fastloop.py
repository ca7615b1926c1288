"""The network model's Python event loop gives the reference numpy loop's results: same
events, iteration times, busy times, excess demand and carried bits, up to float rounding,
over random small groups with max-min, MLTCP and priority sharing, free-running and on
slot grids; and the plain max-min solvers."""

from __future__ import annotations

import pytest
from helpers.sim_oracle import simulate_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cassini.profile import JobProfile, Phase
from cassini.sim.network.flows import FlowJob, NetworkResult
from cassini.sim.network.fluid import simulate
from cassini.sim.network.rates import max_min_links, water_fill
from cassini.sim.parts.sharing import shared_rates
from mltcp.policy import MltcpParams

LINKS = ("l0", "l1", "l2")
CAPS = {"l0": 1e10, "l1": 2e10, "l2": 1.5e10}
PERIODS = (0.05, 0.1, 0.2, 0.0731)  # commensurate ones (groups that repeat) and not


@st.composite
def profiles(draw, job_id: str) -> JobProfile:
    period = draw(st.sampled_from(PERIODS))
    n = draw(st.integers(1, 3))
    cuts = sorted(draw(st.lists(st.floats(0.0, 0.95), min_size=2 * n, max_size=2 * n)))
    phases = []
    for k in range(n):
        a, b = cuts[2 * k], cuts[2 * k + 1]
        if b - a < 0.02:
            continue
        rate = draw(st.sampled_from((4e9, 8e9, 1e10, 1.6e10)))
        phases.append(Phase(a * period, (b - a) * period, rate))
    return JobProfile(job_id, period, tuple(phases))


@st.composite
def groups(draw) -> tuple[list[FlowJob], MltcpParams | None]:
    n = draw(st.integers(2, 4))
    held = draw(st.booleans())
    priority = draw(st.booleans())
    jobs = []
    for i in range(n):
        p = draw(profiles(f"j{i}"))
        path = tuple(sorted(draw(st.sets(st.sampled_from(LINKS), min_size=1, max_size=2))))
        anchor = draw(st.floats(0.0, 1.0)) * p.iteration_time_s
        grid = p.iteration_time_s if held else None
        level = draw(st.integers(0, 2)) if priority else 0
        jobs.append(FlowJob(f"j{i}", p, path, anchor, grid, level))
    mltcp = MltcpParams() if draw(st.booleans()) else None
    return jobs, mltcp


def assert_same(got: NetworkResult, ref: NetworkResult) -> None:
    for job, times in ref.iteration_times_s.items():
        assert len(got.iteration_times_s[job]) == len(times), job
        assert got.iteration_times_s[job] == pytest.approx(times, rel=1e-6, abs=1e-9)
        assert got.busy_s[job] == pytest.approx(ref.busy_s[job], rel=1e-6, abs=1e-9)
    for link, s in ref.excess_s.items():
        assert got.excess_s[link] == pytest.approx(s, rel=1e-6, abs=1e-9)
        assert got.carried_bits[link] == pytest.approx(ref.carried_bits[link], rel=1e-6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), periods=st.integers(3, 12))
def test_python_loop_gives_the_reference_results(group, periods) -> None:
    """The Python loop (``loop="python"``, for ``on_step`` observers); the compiled loop,
    compiled and as plain Python, is held to the same oracle in tests/test_sim_networks.py."""
    jobs, mltcp = group
    longest = max(j.profile.iteration_time_s for j in jobs)
    # window edges off the grid: an event exactly on an edge falls either side by rounding
    kw = dict(horizon_s=(periods + 0.3137) * longest, warmup_s=2.1713 * longest, mltcp=mltcp)
    ref = simulate_reference(jobs, CAPS, **kw)
    stepped = simulate(jobs, CAPS, loop="python", **kw)
    assert stepped.events == ref.events
    assert_same(stepped, ref)


def test_water_fill_is_max_min_on_one_link() -> None:
    assert water_fill([10.0, 10.0, 2.0], 12.0) == [5.0, 5.0, 2.0]
    assert water_fill([1.0, 2.0], 12.0) == [1.0, 2.0]


@settings(max_examples=300, deadline=None)
@given(
    flows=st.lists(
        st.tuples(
            st.floats(1e8, 2e10),
            st.sets(st.integers(0, 3), min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=8,
    ),
    caps=st.lists(st.floats(1e9, 3e10), min_size=4, max_size=4),
)
def test_max_min_links_is_progressive_filling(flows, caps) -> None:
    """The fast max-min solver gives shared_rates' (unweighted) rates."""
    demand = [d for d, _ in flows]
    paths = [sorted(p) for _, p in flows]
    assert max_min_links(demand, paths, caps) == pytest.approx(
        shared_rates(demand, paths, caps), rel=1e-7
    )


def test_auto_loop_is_compiled_unless_observed_or_numba_is_missing(monkeypatch) -> None:
    """``loop="auto"`` runs the compiled loop; an ``on_step`` observer or a machine
    without numba gets the Python loop, and asking for the compiled one there says why."""
    from cassini.errors import InputError
    from cassini.sim.network import jitloop

    p = JobProfile("x", 0.1, (Phase(0.02, 0.05, 1e10),))
    jobs = [FlowJob("a", p, ("l0",), 0.0), FlowJob("b", p, ("l0",), 0.03)]
    kw = dict(horizon_s=2.0, warmup_s=0.5)
    calls = []
    real = jitloop.run_events_compiled

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(jitloop, "run_events_compiled", counted)
    auto = simulate(jobs, CAPS, **kw)
    assert calls == [1]
    steps = []
    observed = simulate(jobs, CAPS, on_step=lambda *a: steps.append(a), **kw)
    assert calls == [1] and steps
    assert_same(observed, auto)
    with pytest.raises(InputError, match="on_step"):
        simulate(jobs, CAPS, loop="compiled", on_step=lambda *a: None, **kw)
    monkeypatch.setattr(jitloop, "AVAILABLE", False)
    assert_same(simulate(jobs, CAPS, **kw), auto)
    assert calls == [1]
    with pytest.raises(InputError, match="numba is not installed"):
        simulate(jobs, CAPS, loop="compiled", **kw)
    with pytest.raises(InputError, match="unknown loop"):
        simulate(jobs, CAPS, loop="fast", **kw)
