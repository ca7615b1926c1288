"""The pure parts of experiments.sim_vs_packet: both models' profiles from the one
``profiles:`` rule, the ratio, ranking and target maths.  No ns-3."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cassini.nic_scale import PROFILE_RULES, on_link
from cassini.sim.engine import run
from cassini.sim.options import SimOptions
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec, load_library
from experiments import sim_vs_packet as svp


@pytest.mark.parametrize("rule", PROFILE_RULES)
def test_fluid_and_packet_sides_get_the_same_profile_for_a_job(rule):
    """Issue 33 §0: on 100 Gbit/s server links (twice the NICs the library was measured
    on) the fluid engine and the packet side (sim_vs_packet's jobs and the packet
    runner's) hold every job to one profile: the library's under ``rule`` on the job's
    servers, which scale-to-nic makes shorter than as measured."""
    from cassini.packet.run import jobs_of

    cluster = Cluster(4, 2, 4, 1e11, 2.0, spines=2)
    library = load_library()
    specs = [JobSpec("a", 0.0, 8, 3, "vgg16"), JobSpec("b", 0.0, 12, 3, "resnet50")]
    res = run(cluster, specs, library, "themis", options=SimOptions(profiles=rule))
    records = {r.job_id: r for r in res.jobs}
    packet = {j.job_id: j for j in svp.packet_jobs(specs, records, library, cluster, rule, False)}
    servers = {j: p.servers for j, p in packet.items()}
    runner = {j.job_id: j for j in jobs_of(specs, servers, library, None, cluster, rule)}
    for spec in specs:
        measured = library[spec.model]
        expected = on_link(measured, 1e11, rule)
        job = packet[spec.job_id]
        assert job.profile.phases == expected.phases == runner[spec.job_id].profile.phases
        assert job.profile.iteration_time_s == expected.iteration_time_s
        assert records[spec.job_id].dedicated_iteration_s == pytest.approx(
            job.profile.iteration_time_s, rel=1e-12
        )
        if rule == "scale-to-nic":
            assert job.profile.iteration_time_s < measured.iteration_time_s
            assert job.profile.bits_per_iteration == pytest.approx(measured.bits_per_iteration)
        else:
            assert job.profile.phases == measured.phases


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
