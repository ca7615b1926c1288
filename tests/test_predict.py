"""Advice that knows its cost: bytes stretch, agent period, fluid prediction of iteration
times shifted and at the same start, and the advisor declining shifts that do not pay."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cassini.advisor import Candidate, Link, advise
from cassini.circle import compatibility_score
from cassini.errors import InputError
from cassini.predict import (
    LINE_RATE_SHARE,
    Slot,
    agent_period_s,
    agent_periods_s,
    bytes_stretch,
    held_periods_s,
    link_load,
    link_time_s,
    simulate_link,
)
from cassini.profile import JobProfile, Phase

GBPS = 1e9
T = 0.1


def pair_advice(a: JobProfile, b: JobProfile, capacity: float = GBPS, **kwargs):
    return advise(
        [Link("l", capacity)],
        [a, b],
        [Candidate("c", {a.job_id: ("l",), b.job_id: ("l",)})],
        **kwargs,
    )


def test_compatible_pair_shifted_runs_at_its_dedicated_time_same_start_slower():
    comm = 0.5 * T
    a = JobProfile("a", T, [Phase(T - comm, comm, GBPS)])
    b = JobProfile("b", T, [Phase(T - comm, comm, GBPS)])
    advice = pair_advice(a, b)
    pred = advice.prediction
    for j in "ab":
        assert pred.iteration_s[j]["shifted"] == pytest.approx(T, rel=1e-9)
        # at the same start both phases share the link: each takes twice as long
        assert pred.iteration_s[j]["same_start"] == pytest.approx(T + comm, rel=1e-9)
        assert pred.shift[j] and pred.iteration_s[j]["advised"] == pred.iteration_s[j]["shifted"]
    assert pred.gain == pytest.approx((T + comm) / T)
    assert advice.shift == {"a": True, "b": True}
    d = advice.to_dict()
    cand = d["candidates"][0]
    assert cand["predicted_iteration_s"]["a"]["same_start"] == pytest.approx(T + comm)
    assert cand["shift"] == {"a": True, "b": True} and set(cand["shift_reasons"]) == {"a", "b"}
    assert d["shift"] == {"a": True, "b": True} and d["predicted_gain"] == pred.gain
    assert cand["agent_period_s"] == pytest.approx({"a": T, "b": T})


def test_pair_whose_bytes_overfill_the_link_is_not_shifted():
    """Each job sends all iteration long at 60 % of the link: the bytes need 120 %, so the
    agent would have to stretch both periods by 1.2, and at the same start fair sharing
    already gives each job exactly that -- shifting cannot pay."""
    share = 0.6
    a = JobProfile("a", T, [Phase(0.0, T, share * GBPS)])
    b = JobProfile("b", T, [Phase(0.0, T, share * GBPS)])
    assert link_load([a, b], GBPS) == pytest.approx(2 * share)
    advice = pair_advice(a, b)
    sol = advice.link_solutions["l"]
    assert agent_period_s("a", {"a": a, "b": b}, [sol]) == pytest.approx(2 * share * T)
    pred = advice.prediction
    for j in "ab":
        assert pred.iteration_s[j]["same_start"] == pytest.approx(2 * share * T, rel=1e-9)
        assert pred.iteration_s[j]["shifted"] >= pred.iteration_s[j]["same_start"] - 1e-12
        assert pred.shift[j] is False
        assert "period its links' bytes require" in pred.reasons[j]
    assert advice.to_dict()["shift"] == {"a": False, "b": False}
    assert pred.agent_period_s == {}


@given(
    rate_share=st.floats(0.05, 1.5),
    duration=st.floats(0.001, 0.09),
)
def test_link_time_counts_bits_and_a_line_rate_phase_its_duration(rate_share, duration):
    """A phase at line rate (>= LINE_RATE_SHARE of capacity) holds the link for its whole
    duration, or its bits at capacity when it reached more than the capacity; a slower
    phase for its bits at capacity only."""
    p = JobProfile("a", T, [Phase(0.0, duration, rate_share * GBPS)])
    bits_time = rate_share * duration
    expected = max(bits_time, duration) if rate_share >= LINE_RATE_SHARE else bits_time
    assert link_time_s(p, GBPS) == pytest.approx(expected)
    assert link_time_s(p, GBPS) >= bits_time * (1 - 1e-12)
    assert link_load([p], GBPS) == pytest.approx(expected / T)


def test_two_line_rate_jobs_are_stretched_by_their_phases_durations():
    """Two synthetic jobs of the testbed: 1.25 MB phases that take 56.5 ms at 177 Mbit/s
    on a 182 Mbit/s payload link (97 %), 107 ms iterations.  Their bits need 2 x 54.9 ms,
    their phases 2 x 56.5 ms: the held period has room for the phases."""
    cap = 182e6
    phase = Phase(0.050, 0.0565, 1.25e6 * 8 / 0.0565)
    a = JobProfile("a", 0.107, [phase])
    b = JobProfile("b", 0.107, [phase])
    assert bytes_stretch([a, b], cap) == pytest.approx(2 * 0.0565 / 0.107)
    sol = compatibility_score([a, b], cap)
    assert agent_period_s("a", {"a": a, "b": b}, [sol]) == pytest.approx(2 * 0.0565)


def test_ddp_bursts_below_line_rate_need_no_stretch_and_no_shift():
    """DDP-shaped: each job sends 80 % of the iteration at 40 % of line rate.  The sum of
    phase durations is 1.6 iterations (the old envelope stretch), but the bytes need 64 %
    of the link: no stretch, no contention at the same start, nothing to gain."""
    bursts = [Phase(k * 0.2 * T, 0.16 * T, 0.4 * GBPS) for k in range(5)]
    a, b = JobProfile("a", T, bursts), JobProfile("b", T, bursts)
    durations = sum(p.communication_share for p in (a, b))
    assert durations > 1 and bytes_stretch([a, b], GBPS) == 1.0
    advice = pair_advice(a, b)
    pred = advice.prediction
    assert pred.agent_period_s == {}
    for j in "ab":
        assert pred.iteration_s[j]["same_start"] == pytest.approx(T, rel=1e-9)
        assert pred.shift[j] is False and "under 2%" in pred.reasons[j]
    sol = advice.link_solutions["l"]
    assert agent_period_s("a", {"a": a, "b": b}, [sol]) == pytest.approx(T)


def test_threshold_and_predict_options():
    comm = 0.5 * T
    a = JobProfile("a", T, [Phase(T - comm, comm, GBPS)])
    b = JobProfile("b", T, [Phase(T - comm, comm, GBPS)])
    gain = (T + comm) / T - 1
    assert not any(pair_advice(a, b, shift_threshold=gain * 1.01).shift.values())
    assert all(pair_advice(a, b, shift_threshold=gain * 0.99).shift.values())
    none = pair_advice(a, b, predict="none")
    assert none.prediction is None and "shift" not in none.to_dict()
    assert "predicted_gain" not in none.to_dict()["candidates"][0]
    for bad, field in (({"predict": "x"}, "predict"), ({"shift_threshold": -1}, "shift_")):
        with pytest.raises(InputError, match=field):
            pair_advice(a, b, **bad)


def test_agent_period_includes_slack_and_skips_jobs_without_shared_links():
    a = JobProfile("a", T, [Phase(0.0, T, 0.6 * GBPS)])
    b = JobProfile("b", T, [Phase(0.0, T, 0.6 * GBPS)])
    c = JobProfile("c", T, [Phase(0.0, T, 0.6 * GBPS)])
    sol = compatibility_score([a, b], GBPS)
    jobs = {"a": a, "b": b, "c": c}
    slack = 0.05
    stretch = bytes_stretch([a, b], GBPS)
    assert agent_period_s("a", jobs, [sol], slack=slack) == pytest.approx(T * stretch * (1 + slack))
    assert agent_period_s("c", jobs, [sol]) is None
    assert set(agent_periods_s(jobs, [sol])) == {"a", "b"}
    assert set(agent_periods_s(jobs, [sol], shift={"a": True, "b": False})) == {"a"}
    with pytest.raises(InputError, match="slack"):
        agent_period_s("a", jobs, [sol], slack=-0.1)


def test_simulate_link_input_errors_name_the_field():
    a = JobProfile("a", T, [Phase(0.0, T / 2, GBPS)])
    with pytest.raises(InputError, match="capacity_bps"):
        simulate_link([a], 0.0)
    with pytest.raises(InputError, match="iterations"):
        simulate_link([a], GBPS, iterations=2, warmup=2)
    with pytest.raises(InputError, match="sharing"):
        simulate_link([a], GBPS, sharing="fifo")


phase_st = st.tuples(
    st.floats(0.0, 0.99), st.floats(0.01, 1.0), st.floats(0.05, 1.0)
)  # start, duration (fractions of the gap), rate (fraction of capacity)


@st.composite
def profiles_st(draw, job_id):
    period = draw(st.floats(0.02, 0.3))
    n = draw(st.integers(1, 3))
    phases, t = [], 0.0
    for _ in range(n):
        start_f, dur_f, rate_f = draw(phase_st)
        room = period - t
        start = t + start_f * room / 2
        dur = max(dur_f * (period - start) / n, 1e-6 * period)
        if start + dur > period:
            break
        phases.append(Phase(start, dur, rate_f * GBPS))
        t = start + dur
    return JobProfile(job_id, period, phases)


@given(
    jobs=st.integers(1, 4).flatmap(lambda n: st.tuples(*[profiles_st(f"j{i}") for i in range(n)])),
    held=st.lists(st.booleans(), min_size=4, max_size=4),
    shifts=st.lists(st.floats(0.0, 0.999), min_size=4, max_size=4),
    stretch=st.floats(1.0, 1.5),
    sharing=st.sampled_from(["max-min", "proportional"]),
)
@settings(max_examples=150, deadline=None)
def test_prediction_never_beats_a_dedicated_link_and_conserves_bits(
    jobs, held, shifts, stretch, sharing
):
    slots = {
        p.job_id: Slot(s * p.iteration_time_s * stretch, p.iteration_time_s * stretch)
        for p, h, s in zip(jobs, held, shifts, strict=False)
        if h
    }
    iterations = 5
    run = simulate_link(list(jobs), GBPS, slots, iterations=iterations, warmup=1, sharing=sharing)
    assert run.peak_rate_bps <= GBPS * (1 + 1e-9)
    for p in jobs:
        floor = slots[p.job_id].period_s if p.job_id in slots else p.iteration_time_s
        assert run.iteration_times_s[p.job_id] >= floor * (1 - 1e-9)
        if p.bits_per_iteration == 0:
            continue
        done, sent, bits = (
            run.bits_completed[p.job_id],
            run.bits_sent[p.job_id],
            p.bits_per_iteration,
        )
        m = run.iterations[p.job_id]
        assert m >= iterations
        tol = 1e-6 * bits
        # whole iterations' bits, plus the phases of the one under way
        assert m * bits - tol <= done <= (m + 1) * bits + tol
        assert -tol <= sent - done <= max(q.rate_bps * q.duration_s for q in p.phases) + tol
    if len(jobs) == 1 and not slots:  # alone on a link faster than its phases
        assert run.iteration_times_s[jobs[0].job_id] == pytest.approx(jobs[0].iteration_time_s)


@given(
    jobs=st.integers(2, 4).flatmap(lambda n: st.tuples(*[profiles_st(f"j{i}") for i in range(n)])),
    capacity_f=st.floats(0.5, 2.0),
    threshold=st.sampled_from([0.0, 0.02, 0.1]),
)
@example(  # CI found it: 0.0213...*r/r rounded one ulp under the job's own period
    jobs=(
        JobProfile("j0", 0.02134538608331736, (Phase(0.0, 0.02134538608331736, 0.5 * GBPS),)),
        JobProfile("j1", 0.02, (Phase(0.0, 0.02, 0.5 * GBPS),)),
    ),
    capacity_f=1.0,
    threshold=0.0,
)
@example(  # j1 gains nothing itself: its shift is what gives j0 and j2 theirs (held)
    jobs=(
        JobProfile("j0", 0.05, (Phase(0.002, 0.015, 6 * GBPS),)),
        JobProfile("j1", 0.05, (Phase(0.028, 0.014, 4 * GBPS),)),
        JobProfile("j2", 0.05, (Phase(0.020, 0.023, 10 * GBPS),)),
    ),
    capacity_f=10.0,
    threshold=0.02,
)
@settings(max_examples=60, deadline=None)
def test_advice_shifts_only_jobs_predicted_to_gain_the_threshold(jobs, capacity_f, threshold):
    """A held job gains the threshold, or is held for others: its shift costs it nothing
    and declining it would take a held partner's gain (the decline rule)."""
    capacity = capacity_f * GBPS
    advice = advise(
        [Link("l", capacity)],
        list(jobs),
        [Candidate("c", {j.job_id: ("l",) for j in jobs})],
        shift_threshold=threshold,
    )
    pred = advice.prediction
    for j in jobs:
        it = pred.iteration_s[j.job_id]
        for mode in ("shifted", "same_start", "advised"):  # never faster than dedicated
            assert it[mode] >= j.iteration_time_s * (1 - 1e-9)
        if pred.shift[j.job_id]:
            if it["same_start"] < it["advised"] * (1 + threshold) * (1 - 1e-9):
                assert it["advised"] <= it["same_start"] * (1 + 1e-9)  # not slowed
                assert pred.reasons[j.job_id].startswith("held for ")
                assert any(
                    pred.shift[k] and v["same_start"] >= v["advised"] * (1 + threshold)
                    for k, v in pred.iteration_s.items()
                )
            assert pred.agent_period_s[j.job_id] >= j.iteration_time_s
        assert pred.reasons[j.job_id]
    # one link: a job is never held without a held partner (nothing to interleave with)
    assert sum(pred.shift.values()) != 1


@given(
    jobs=st.integers(1, 3).flatmap(lambda n: st.tuples(*[profiles_st(f"j{i}") for i in range(n)])),
    held=st.lists(st.booleans(), min_size=3, max_size=3),
    stretch=st.floats(1.0, 1.5),
)
@settings(max_examples=60, deadline=None)
def test_closed_form_for_links_whose_peaks_fit_matches_the_simulation(jobs, held, stretch):
    from cassini.predict import _simulate, _uncontended

    capacity = sum(p.peak_rate_bps for p in jobs) or GBPS
    slots = {
        p.job_id: Slot(0.3 * p.iteration_time_s * stretch, p.iteration_time_s * stretch)
        for p, h in zip(jobs, held, strict=False)
        if h
    }
    fluid = _simulate(list(jobs), capacity, slots, 5, 1, "max-min")
    closed = _uncontended(list(jobs), slots, 5)
    for j in fluid.iteration_times_s:
        assert fluid.iteration_times_s[j] == pytest.approx(closed.iteration_times_s[j], rel=1e-9)


def test_jobs_sharing_a_link_are_held_to_commensurate_periods():
    """90.0 and 90.2 ms quantise to one 90 ms circle; held to their own times the two
    would drift 0.2 ms apart every iteration.  Both get the longer one; a 2:1 pair gets
    periods in exactly that ratio, the longer job's own time setting the circle."""
    a = JobProfile("a", 0.0900, [Phase(0.0, 0.03, 0.5 * GBPS)])
    b = JobProfile("b", 0.0902, [Phase(0.0, 0.03, 0.5 * GBPS)])
    sol = compatibility_score([a, b], GBPS)
    periods = agent_periods_s({"a": a, "b": b}, [sol], slack=0.05)
    assert periods["a"] == periods["b"] == pytest.approx(0.0902 * 1.05)
    c = JobProfile("c", 0.0402, [Phase(0.0, 0.01, 0.5 * GBPS)])
    d = JobProfile("d", 0.0800, [Phase(0.0, 0.01, 0.5 * GBPS)])
    sol = compatibility_score([c, d], GBPS)
    assert sol.unified.repeats == (2, 1)
    held = held_periods_s({"c": c, "d": d}, [sol])
    assert held["d"] == pytest.approx(2 * held["c"]) and held["c"] >= 0.0402
    # a job on two links takes the longer circle, and its partners on both follow
    e = JobProfile("e", 0.0950, [Phase(0.0, 0.01, 0.5 * GBPS)])
    s1, s2 = compatibility_score([a, b], GBPS), compatibility_score([b, e], GBPS)
    chain = held_periods_s({"a": a, "b": b, "e": e}, [s1, s2])
    assert chain["a"] == chain["b"] == chain["e"] == pytest.approx(0.0950)


def test_period_slack_grows_with_how_full_the_link_is():
    from cassini.predict import period_slack

    assert period_slack(0.0) == period_slack(0.8) == period_slack(1.0) == 0.03  # default
    ramp = {"low": 0.01, "high": 0.03}
    assert period_slack(0.0, **ramp) == period_slack(0.8, **ramp) == 0.01
    assert period_slack(0.95, **ramp) == period_slack(1.0, **ramp) == 0.03
    assert 0.01 < period_slack(0.875, **ramp) < 0.03
    loads = [i / 100 for i in range(101)]
    slacks = [period_slack(x, **ramp) for x in loads]
    assert slacks == sorted(slacks)
    for bad in (-0.1, float("nan")):
        with pytest.raises(InputError, match="link_load"):
            period_slack(bad)


@given(
    times=st.lists(st.floats(0.05, 0.5), min_size=3, max_size=7),
    data=st.data(),
)
@settings(max_examples=40, deadline=None)
def test_held_periods_stay_bounded_when_links_form_a_loop(times, data):
    """Links whose repeats disagree around a loop have no common period; revisiting them
    used to stretch every job without end (10^5 s periods in a 1,024-GPU simulation, where
    the link simulation then never finished).  Every held period stays between the job's
    own iteration time and MAX_PROPAGATED_STRETCH over what its own links ask."""
    from cassini.predict import MAX_PROPAGATED_STRETCH, requested_periods_s

    jobs = {
        f"j{i}": JobProfile(f"j{i}", t, [Phase(0.0, 0.1 * t, 0.4 * GBPS)])
        for i, t in enumerate(times)
    }
    ids = sorted(jobs)
    ring = [(ids[i], ids[(i + 1) % len(ids)]) for i in range(len(ids))]
    chords = data.draw(st.lists(st.sampled_from([(a, b) for a in ids for b in ids if a < b])))
    sols = [compatibility_score([jobs[a], jobs[b]], GBPS) for a, b in ring + chords]
    held = held_periods_s(jobs, sols)
    asked = requested_periods_s(jobs, sols)
    for j, p in held.items():
        assert jobs[j].iteration_time_s <= p <= asked[j] * (1 + MAX_PROPAGATED_STRETCH) * (
            1 + 1e-9
        )
