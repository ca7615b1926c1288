"""The pure parts of experiments.sim_vs_packet: NIC-scaled profiles (bytes kept, phases at
the link rate, compute gaps kept), the ratio, ranking and target maths.  No ns-3."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.profile import JobProfile, Phase
from cassini.sim.network import cycle_of
from cassini.sim.workload import load_library
from experiments import sim_vs_packet as svp


@st.composite
def profiles(draw):
    """A profile of 1-4 separated phases (seconds, bits/s)."""
    n = draw(st.integers(1, 4))
    cursor, phases = 0.0, []
    for _ in range(n):
        cursor += draw(st.floats(0.001, 0.05))
        duration = draw(st.floats(0.001, 0.05))
        phases.append(Phase(cursor, duration, draw(st.floats(1e9, 5e10))))
        cursor += duration
    period = cursor + draw(st.floats(0.001, 0.05))
    return JobProfile("p", period, tuple(phases))


@settings(max_examples=60, deadline=None)
@given(profiles(), st.floats(1e9, 4e11))
def test_nic_scaling_keeps_bytes_and_compute_and_sends_at_line_rate(profile, link):
    scaled = svp.nic_scaled(profile, link)
    assert scaled.bits_per_iteration == pytest.approx(profile.bits_per_iteration, rel=1e-9)
    before, after = cycle_of(profile), cycle_of(scaled)
    assert sum(after.gaps_s) == pytest.approx(sum(before.gaps_s), rel=1e-9, abs=1e-12)
    assert all(r == pytest.approx(link, rel=1e-9) for r in after.rates_bps)
    compute = sum(before.gaps_s)
    assert scaled.iteration_time_s == pytest.approx(
        compute + profile.bits_per_iteration / link, rel=1e-9
    )


def test_nic_scaling_of_a_library_profile_matches_the_packet_docs():
    # docs/packet_reference.md: vgg16's compute plus its bytes at 50 Gbit/s is 0.1433 s
    vgg16 = svp.nic_scaled(load_library()["vgg16"], 50e9)
    assert vgg16.iteration_time_s == pytest.approx(0.1433, abs=5e-4)
    with pytest.raises(ValueError, match="link_bps"):
        svp.nic_scaled(load_library()["vgg16"], 0.0)


def test_ranking_ties_and_discordant_pairs():
    fluid = {"a": 1.0, "b": 1.5, "c": 1.2}
    assert svp.ranking(fluid) == ["a", "c", "b"]
    assert svp.discordant_pairs(fluid, {"a": 1.0, "b": 1.3, "c": 1.4}) == [("b", "c")]
    # within 1 % in one model: a tie, not a disagreement
    assert svp.discordant_pairs({"a": 1.0, "b": 1.005}, {"a": 1.2, "b": 1.0}) == []
    assert svp.discordant_pairs(fluid, fluid) == []


@given(st.dictionaries(st.sampled_from("abcdef"), st.floats(0.5, 5.0), min_size=2))
def test_a_ranking_agrees_with_itself_scaled(values):
    doubled = {k: 2 * v for k, v in values.items()}
    assert svp.discordant_pairs(values, doubled) == []
    flipped = {k: 10 - v for k, v in values.items()}
    separated = [
        (a, b) for a in sorted(values) for b in sorted(values)
        if a < b and svp._signed(values[a], values[b], svp.TIE)
        and svp._signed(flipped[a], flipped[b], svp.TIE)
    ]
    assert svp.discordant_pairs(values, flipped) == separated


def test_verdict_targets():
    ok = svp.verdict({"x": 1.05, "y": 0.95}, [1.0] * 9 + [1.5], 0)
    assert ok["schemes_within_10pc"] and ok["jobs_target_met"] and ok["same_ranking"]
    bad = svp.verdict({"x": 1.12}, [1.0] * 8 + [1.5, 0.7], 1)
    assert bad["worst_scheme_error"] == pytest.approx(0.12)
    assert not bad["schemes_within_10pc"] and not bad["jobs_target_met"]
    assert bad["jobs_within_20pc_share"] == pytest.approx(0.8)
    assert not bad["same_ranking"]
    assert math.isnan(svp.ratio(1.0, 0.0)) and svp.ratio(3.0, 2.0) == 1.5


@pytest.mark.parametrize("scenario", svp.SCENARIOS, ids=lambda s: s.name)
def test_every_scenario_fits_at_once_with_8_to_30_jobs(scenario):
    cluster = scenario.cluster()
    specs = svp.job_specs(scenario, 5, cluster.gpus, 0)
    assert 8 <= len(specs) <= 30
    assert sum(s.gpus for s in specs) <= cluster.gpus
    assert all(s.arrival_s == 0.0 and s.iterations == 5 for s in specs)
    assert svp.server_link_bps(cluster) == 50e9
