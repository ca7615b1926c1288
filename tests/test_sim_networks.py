"""One suite over every fluid network model (``windows``, ``continuous``) and both ways
the rate kernel runs (compiled with numba, plain Python), against the oracles of
``tests/helpers/sim_oracle.py``: the reference event loop (:func:`simulate_reference`) and
exact max-min rates (:func:`max_min_rates`).  A new network model joins by an entry in
:data:`MODELS` (a test fails until it has one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import require_module
from helpers.kernels import KERNELS, Kernel, kernel
from helpers.sim_oracle import max_min_rates, simulate_reference
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cassini.sim.network import NETWORKS
from cassini.sim.network.flows import FlowJob, csr_links, cycle_of
from cassini.sim.network.windows import WindowNetwork
from cassini.sim.parts.sharing import shared_rates
from tests.test_sim_fastloop import CAPS, Rule, groups

require_module("numba", "the [sim] extra: the compiled kernel, and its JIT switch")

#: the fluid models (``packet`` runs ns-3 per window: tests/test_packet_run.py)
FLUID_NETWORKS = sorted(set(NETWORKS) - {"packet"})


@dataclass(frozen=True)
class Run:
    """What a model measured over a window: per job id its iteration times and busy
    times (s), per link its seconds of demand over capacity; the window model also its
    events and the bits each link carried."""

    times_s: dict[str, list[float]]
    busy_s: dict[str, list[float]]
    excess_s: dict[str, float]
    events: int | None = None
    carried_bits: dict[str, float] | None = None


def run_windows(k: Kernel, jobs: list[FlowJob], rule: Rule, horizon_s: float,
                warmup_s: float) -> Run:  # fmt: skip
    """The window model's loop (``windows``) on ``k``'s kernel."""
    out = k.fluid.simulate(jobs, CAPS, horizon_s=horizon_s, warmup_s=warmup_s, **rule.kw)
    return Run(
        {j: list(t) for j, t in out.iteration_times_s.items()},
        {j: list(b) for j, b in out.busy_s.items()},
        dict(out.excess_s),
        out.events,
        dict(out.carried_bits),
    )


def run_continuous(k: Kernel, jobs: list[FlowJob], rule: Rule,
                   horizon_s: float, warmup_s: float) -> Run:  # fmt: skip
    """The continuous model's flow state (``continuous``) on ``k``'s kernel, each job
    beginning its first cycle at its anchor, stepped to ``horizon_s``; it reports every
    cycle (no warm-up window: ``warmup_s`` must be 0)."""
    assert warmup_s == 0.0
    state = k.flowstate.FlowState(
        dict(CAPS), **rule.kw, classes=len({j.priority for j in jobs}) > 1,
        weighted=any(j.share != 1.0 for j in jobs),
        mltcp_every_event=True,  # as the reference re-solves MLTCP's weights
    )  # fmt: skip
    for uid, j in enumerate(jobs):
        state.add(
            j.job_id, cycle_of(j.profile), list(j.path), done=0.0, iterations=10**9,
            pos_s=0.0, stall_s=j.anchor_s, grid_s=j.grid_period_s, anchor_s=j.anchor_s,
            priority=j.priority, share=j.share, uid=uid,
        )  # fmt: skip
    times: dict[str, list[float]] = {j.job_id: [] for j in jobs}
    busy: dict[str, list[float]] = {j.job_id: [] for j in jobs}
    while state.t < horizon_s:  # a held job that overruns its period stops the stepping
        adv = state.advance(horizon_s)
        assert not adv.finished
        for uid, (c, b) in adv.cycles().items():
            times[jobs[uid].job_id].extend(c)
            busy[jobs[uid].job_id].extend(b)
    return Run(times, busy, state.excess_s())


#: network model -> (its runner, its warm-up in longest iterations); the continuous model
#: reports every cycle from its start, so it has none
MODELS: dict[str, tuple[Callable[..., Run], float]] = {
    "windows": (run_windows, 2.1713),  # off the grid: an event on the edge is ambiguous
    "continuous": (run_continuous, 0.0),
}


@pytest.fixture(scope="module", params=KERNELS)
def rate_kernel(request: pytest.FixtureRequest) -> Kernel:
    """The kernel compiled, then the same code as plain Python."""
    k = kernel(request.param)
    assert k.compiled == (request.param == "compiled"), "the kernel did not run as named"
    return k


def test_every_fluid_network_model_is_in_the_suite() -> None:
    assert sorted(MODELS) == FLUID_NETWORKS


@pytest.mark.parametrize("network", FLUID_NETWORKS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(group=groups(), periods=st.integers(3, 10))
def test_a_model_gives_the_reference_loops_results(network, rate_kernel, group, periods):
    """Iteration times, busy times and excess demand as the reference loop gives them,
    over random small groups: max-min, MLTCP, progress-weighted, priority and
    share-weighted sharing,
    free-running and held to slot grids."""
    jobs, rule = group
    jobs = [j for j in jobs if j.profile.phases]  # pure compute never enters a flow state
    assume(jobs)
    runner, warmup = MODELS[network]
    longest = max(j.profile.iteration_time_s for j in jobs)
    horizon, warmup_s = (periods + 0.3137) * longest, warmup * longest
    ref = simulate_reference(jobs, CAPS, horizon_s=horizon, warmup_s=warmup_s, **rule.kw)
    got = runner(rate_kernel, jobs, rule, horizon, warmup_s)
    for j, times in ref.iteration_times_s.items():
        assert got.times_s[j] == pytest.approx(times, rel=1e-6, abs=1e-9), j
        # a cycle's busy time is known when it ends (the reference) or when the next one
        # begins (the flow state): a held job waiting for its slot at the horizon has one
        # fewer in the flow state
        ref_busy = list(ref.busy_s[j])[: len(got.busy_s[j])]
        assert len(ref.busy_s[j]) - len(ref_busy) <= (1 if network == "continuous" else 0)
        assert got.busy_s[j] == pytest.approx(ref_busy, rel=1e-6, abs=1e-9), j
    for link, s in ref.excess_s.items():
        assert got.excess_s.get(link, 0.0) == pytest.approx(s, rel=1e-6, abs=1e-9), link
    if got.events is not None:
        assert got.events == ref.events
    if got.carried_bits is not None:
        assert got.carried_bits == pytest.approx(ref.carried_bits, rel=1e-6)


def solve_all(k: Kernel, demand: list[float], paths: list[list[int]], caps: list[float],
              shares: list[float] | None = None):  # fmt: skip
    """Every flow's rate (bits/s) from the kernel's set solver, all flows sending and
    capped at ``demand``, one class, max-min weighted by ``shares`` (None: all 1; no
    MLTCP weights)."""
    rates = k.rates
    n, n_links = len(demand), len(caps)
    weight = np.ones(n) if shares is None else np.array(shares, float)
    net = (*csr_links(paths, n_links), np.array(caps, float), np.zeros(n, np.int64), weight)
    load = np.zeros(n_links)
    for d, p in zip(demand, paths, strict=True):
        load[p] += d
    flow = (
        np.full(n, rates._SEND, np.int64),  # mode
        np.zeros(n, np.int64),  # phase
        np.ones(n),  # remaining bits (unused without MLTCP)
        np.zeros((n, 1)),  # sent before the phase
        np.ones((n, 1)),  # bits of the phase
        np.ones(n),  # bits per iteration
        np.array(demand, float),
        weight.copy(),  # weight
        np.array(demand, float),  # got: the demand unless a full link says otherwise
        load > np.array(caps) * (1 + 1e-9),  # full links
    )
    flow_sets, scratch = rates._scratch(n, n_links)
    rule = (False, np.ones(1), shares is not None)
    label = 1
    for s in range(n):
        if flow_sets[0][s] != label and rates._crosses(s, net, flow[9]):
            rates._solve_set(s, label, rule, net, flow, flow_sets, scratch)
    return flow[8].tolist()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    flows=st.lists(
        st.tuples(st.floats(1e8, 2e10), st.sets(st.integers(0, 3), min_size=1, max_size=3)),
        min_size=1,
        max_size=8,
    ),
    caps=st.lists(st.floats(1e9, 3e10), min_size=4, max_size=4),
)
def test_the_kernel_fills_to_exact_max_min_rates(rate_kernel, flows, caps) -> None:
    demand = [d for d, _ in flows]
    paths = [sorted(p) for _, p in flows]
    want = max_min_rates(demand, paths, caps)
    assert solve_all(rate_kernel, demand, paths, caps) == pytest.approx(want, rel=1e-7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    flows=st.lists(
        st.tuples(
            st.floats(1e8, 2e10),
            st.sets(st.integers(0, 3), min_size=1, max_size=3),
            st.sampled_from((0.5, 1.0, 2.0, 3.0, 8.0)),
        ),
        min_size=1,
        max_size=8,
    ),
    caps=st.lists(st.floats(1e9, 3e10), min_size=4, max_size=4),
)
def test_the_kernel_fills_to_weighted_max_min_rates(rate_kernel, flows, caps) -> None:
    """Share weights (a sharing rule's ``weight``): the kernel's rates are the weighted
    progressive filling of ``parts.sharing.shared_rates``."""
    demand = [d for d, _, _ in flows]
    paths = [sorted(p) for _, p, _ in flows]
    shares = [w for _, _, w in flows]
    want = shared_rates(demand, paths, caps, weights=shares)
    got = solve_all(rate_kernel, demand, paths, caps, shares)
    assert got == pytest.approx(want, rel=1e-7)


def test_the_plain_kernel_is_a_copy_beside_the_compiled_one() -> None:
    """Making the plain copies leaves the simulator's own modules as they were."""
    import sys

    from cassini.sim import network
    from cassini.sim.network import rates

    plain = kernel("plain")
    assert sys.modules["cassini.sim.network.rates"] is rates and network.rates is rates
    assert plain.rates is not rates and plain.rates._solve_set is not rates._solve_set
    assert not plain.compiled and kernel("compiled").rates is rates


class DedicatedNetwork(WindowNetwork):
    """docs/extending.md's worked example of a network model: every job at its dedicated
    pace, as if no link were shared (the window model's stepping, no windows)."""

    def update(self, changed: set[str]) -> None:
        for job_id in changed & self.sim.running.keys():
            r = self.sim.running[job_id]
            r.iteration_time_s = r.profile.iteration_time_s
            r.samples = (r.iteration_time_s,)


def test_a_network_model_is_a_class_and_its_entry_in_networks(monkeypatch) -> None:
    from cassini.sim.engine import run
    from cassini.sim.options import SimOptions
    from tests.test_sim_structure import small_jobs

    monkeypatch.setitem(NETWORKS, "dedicated", DedicatedNetwork)
    cluster, jobs, library = small_jobs(24)
    options = SimOptions(network="dedicated")
    result = run(cluster, jobs, library, "themis+cassini", options=options, seed=1)
    assert sorted(r.job_id for r in result.jobs) == sorted(j.job_id for j in jobs)
    assert all(abs(r.slowdown - 1) < 1e-9 for r in result.jobs)
