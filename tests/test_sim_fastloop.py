"""The window model's one event loop reports every step to an ``on_step`` observer as the
reference numpy loop does (same steps, senders and rates, up to float rounding), and an
observer changes no result.  The random small groups drawn here (max-min, MLTCP,
progress-weighted, priority and share-weighted sharing, free-running and on slot grids)
are also those of ``tests/test_sim_networks.py``, which holds every network model,
compiled and as plain Python, to the same oracle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from helpers.sim_oracle import simulate_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cassini.profile import JobProfile, Phase
from cassini.sim.network.flows import FlowJob, NetworkResult
from cassini.sim.network.fluid import simulate
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


def rising(x: float) -> float:
    """A progress rule: a flow's weight grows with its iteration's bytes sent."""
    return 1.0 + 3.0 * x


def falling(x: float) -> float:
    """A progress rule: a flow's weight shrinks as its iteration's bytes go out."""
    return 2.0 - x


@dataclass(frozen=True)
class Rule:
    """A group's sharing: MLTCP's parameters and a progress rule (None: off)."""

    mltcp: MltcpParams | None = None
    progress: Callable[[float], float] | None = None

    @property
    def kw(self) -> dict:
        return {"mltcp": self.mltcp, "progress": self.progress}


@st.composite
def groups(draw) -> tuple[list[FlowJob], Rule]:
    n = draw(st.integers(2, 4))
    held = draw(st.booleans())
    priority = draw(st.booleans())
    weighted = draw(st.booleans())  # share weights, as a weighting sharing rule gives
    jobs = []
    for i in range(n):
        p = draw(profiles(f"j{i}"))
        path = tuple(sorted(draw(st.sets(st.sampled_from(LINKS), min_size=1, max_size=2))))
        anchor = draw(st.floats(0.0, 1.0)) * p.iteration_time_s
        grid = p.iteration_time_s if held else None
        level = draw(st.integers(0, 2)) if priority else 0
        share = draw(st.sampled_from((0.5, 1.0, 2.0, 3.0))) if weighted else 1.0
        jobs.append(FlowJob(f"j{i}", p, path, anchor, grid, level, share))
    mltcp = MltcpParams() if draw(st.booleans()) else None
    return jobs, Rule(mltcp, draw(st.sampled_from((None, None, rising, falling))))


def assert_same(got: NetworkResult, ref: NetworkResult) -> None:
    for job, times in ref.iteration_times_s.items():
        assert len(got.iteration_times_s[job]) == len(times), job
        assert got.iteration_times_s[job] == pytest.approx(times, rel=1e-6, abs=1e-9)
        assert got.busy_s[job] == pytest.approx(ref.busy_s[job], rel=1e-6, abs=1e-9)
    for link, s in ref.excess_s.items():
        assert got.excess_s[link] == pytest.approx(s, rel=1e-6, abs=1e-9)
        assert got.carried_bits[link] == pytest.approx(ref.carried_bits[link], rel=1e-6)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), periods=st.integers(3, 10))
def test_an_observer_sees_the_reference_loops_steps(group, periods) -> None:
    """Every step the reference loop takes, with its senders and their rates, in order;
    and the observed run's results are those of the unobserved one."""
    jobs, rule = group
    longest = max(j.profile.iteration_time_s for j in jobs)
    kw = dict(horizon_s=(periods + 0.3137) * longest, warmup_s=2.1713 * longest, **rule.kw)
    ref_steps: list[tuple] = []
    ref = simulate_reference(jobs, CAPS, on_step=lambda *a: ref_steps.append(a), **kw)
    steps: list[tuple] = []
    observed = simulate(jobs, CAPS, on_step=lambda *a: steps.append(a), **kw)
    assert_same(observed, ref)
    assert_same(observed, simulate(jobs, CAPS, **kw))
    assert len(steps) == len(ref_steps)
    for (t, dt, sending, rates), (rt, rdt, rsending, rrates) in zip(steps, ref_steps, strict=True):
        assert (t, dt) == pytest.approx((rt, rdt), rel=1e-6, abs=1e-9)
        assert sending.tolist() == np.asarray(rsending).tolist()
        assert rates == pytest.approx(np.asarray(rrates, float), rel=1e-6)


def test_an_observer_sees_steps_that_tile_the_window_within_capacity() -> None:
    """Two jobs on one link: the steps follow each other from 0 to the horizon, and the
    rates on the link never sum above its capacity."""
    p = JobProfile("x", 0.1, (Phase(0.02, 0.05, 1e10),))
    jobs = [FlowJob("a", p, ("l0",), 0.0), FlowJob("b", p, ("l0",), 0.03)]
    steps: list[tuple] = []
    simulate(jobs, CAPS, horizon_s=2.0, warmup_s=0.5, on_step=lambda *a: steps.append(a))
    assert steps[0][0] == 0.0
    for (t, dt, _, _), (t_next, _, _, _) in zip(steps, steps[1:], strict=False):
        assert dt > 0 and t + dt == pytest.approx(t_next, abs=1e-12)
    assert steps[-1][0] + steps[-1][1] == pytest.approx(2.0)
    assert max(float(np.sum(r)) for *_, r in steps) <= CAPS["l0"] * (1 + 1e-9)
    assert any(len(s) == 2 for _, _, s, _ in steps)  # the two phases overlap at times


def test_too_many_events_names_the_window() -> None:
    from cassini.errors import InputError

    p = JobProfile("x", 0.1, (Phase(0.02, 0.05, 1e10),))
    jobs = [FlowJob("a", p, ("l0",), 0.0), FlowJob("b", p, ("l0",), 0.03)]
    with pytest.raises(InputError, match="more than 10 events"):
        simulate(jobs, CAPS, horizon_s=2.0, warmup_s=0.5, max_events=10)
