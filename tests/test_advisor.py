import pytest
from helpers.pinned import assert_advice

from cassini.advisor import Candidate, Link, advise
from cassini.affinity import LOOP_TOLERANCE
from cassini.api import example, read_advise_request
from cassini.errors import InputError
from cassini.profile import JobProfile, Phase

GBPS = 1e9


def jobs():
    half = [Phase(0.0, 0.05, GBPS)]
    return [
        JobProfile("a", 0.1, half),
        JobProfile("b", 0.1, half),
        JobProfile("big", 0.1, [Phase(0.0, 0.09, GBPS)]),
        JobProfile("solo", 0.2, half),
    ]


LINKS = [Link("l1", GBPS), Link("l2", GBPS), Link("l3", GBPS)]


def test_ranks_by_mean_and_returns_best_shifts():
    candidates = [
        Candidate("bad", {"a": ("l1",), "big": ("l1",), "b": ("l2",)}),
        Candidate("good", {"a": ("l1",), "b": ("l1",), "big": ("l2",)}),
    ]
    advice = advise(LINKS, jobs(), candidates)
    assert advice.best == "good"
    assert [c.candidate_id for c in advice.candidates] == ["good", "bad"]
    good = advice.candidates[0]
    assert good.score == pytest.approx(1.0) and good.min_link_score == pytest.approx(1.0)
    assert set(good.link_scores) == {"l1"}
    # a at 0, b half an iteration later; jobs sharing nothing get 0
    assert advice.time_shifts_s == pytest.approx({"a": 0.0, "b": 0.05, "big": 0.0, "solo": 0.0})
    assert advice.candidates[1].score < 1.0


def test_candidate_without_shared_links_scores_one():
    advice = advise(LINKS, jobs(), [Candidate("spread", {"a": ("l1",), "b": ("l2",)})])
    assert advice.best == "spread" and advice.candidates[0].score == 1.0


def test_min_aggregate_prefers_no_bad_link():
    # c: 70 ms of 100 ms at line rate.  Pair scores on a 1 Gb/s link (overlap / period):
    # a+b 1.0, a+big 0.6, b+big 0.6, big+c 0.4 (at least 60 ms of 90 + 70 ms overlap)
    j = [*jobs(), JobProfile("c", 0.1, [Phase(0.0, 0.07, GBPS)])]
    mixed = Candidate(  # one perfect link, one poor link: mean 0.7, min 0.4
        "mixed", {"a": ("l1",), "b": ("l1",), "big": ("l2",), "c": ("l2",)}
    )
    even = Candidate(  # two middling links: mean 0.6, min 0.6
        "even", {"a": ("l1",), "b": ("l2",), "big": ("l1", "l2")}
    )
    by_mean = advise(LINKS, j, [even, mixed], aggregate="mean")
    by_min = advise(LINKS, j, [mixed, even], aggregate="min")
    assert by_mean.best == "mixed" and by_min.best == "even"  # not the scheduler's first
    scores = {c.candidate_id: c for c in by_mean.candidates}
    assert scores["mixed"].link_scores == pytest.approx({"l1": 1.0, "l2": 0.4}, abs=1e-9)
    assert scores["even"].link_scores == pytest.approx({"l1": 0.6, "l2": 0.6}, abs=1e-9)
    assert scores["mixed"].score == pytest.approx(0.7, abs=1e-9)
    assert scores["even"].min_link_score == pytest.approx(0.6, abs=1e-9)


def test_ties_keep_scheduler_order():
    c1 = Candidate("first", {"a": ("l1",), "b": ("l1",)})
    c2 = Candidate("second", {"a": ("l2",), "b": ("l2",)})
    assert advise(LINKS, jobs(), [c1, c2]).best == "first"
    assert advise(LINKS, jobs(), [c2, c1]).best == "second"


def test_scores_equal_but_for_rounding_keep_scheduler_order():
    """Two half-duty jobs interleave perfectly on one link (score 1 - 6e-16 after the
    sums' rounding) or sit on two links (exactly 1): equal, so the first listed wins."""
    half = [Phase(0.0, 0.05, 1e9)]
    pair = [JobProfile(j, 0.1, half) for j in ("a", "b")]
    links = [Link("l1", 1e9), Link("l2", 1e9)]
    together = Candidate("together", {"a": ("l1",), "b": ("l1",)})
    apart = Candidate("apart", {"a": ("l1",), "b": ("l2",)})
    advice = advise(links, pair, [together, apart])
    assert advice.best == "together"
    assert {c.score for c in advice.candidates} != {1.0}  # the rounding is there
    assert advise(links, pair, [apart, together]).best == "apart"


def test_parallel_scoring_matches_serial():
    request = example("advise")
    links, js, cands = read_advise_request(request)
    serial = advise(links, js, cands, workers=1)
    parallel = advise(links, js, cands, workers=2)
    assert serial.to_dict() == parallel.to_dict()
    assert_advice(serial.to_dict())  # and both are the pinned answer


def test_example_loops_are_repaired_and_accepted():
    links, js, cands = read_advise_request(example("advise"))
    advice = advise(links, js, cands)
    assert advice.best is not None
    looped = [c for c in advice.candidates if c.loops > 0]
    assert looped and all(c.status == "ok" for c in looped)
    assert all(c.loop_loss <= LOOP_TOLERANCE for c in looped)


def triangle():
    """Three jobs sending at full rate half of each iteration, pairwise on three links:
    each link wants its pair 50 ms apart, which no assignment around an odd cycle gives."""
    half = [Phase(0.0, 0.05, GBPS)]
    js = [JobProfile(j, 0.1, half) for j in ("a", "b", "c")]
    cand = Candidate("tri", {"a": ("l1", "l3"), "b": ("l1", "l2"), "c": ("l2", "l3")})
    return js, cand


def test_unfixable_loop_rejected_with_reason_or_scored_on_request():
    js, cand = triangle()
    spread = Candidate("spread", {"a": ("l1",), "b": ("l2",), "c": ("l3",)})
    rejected = advise(LINKS, js, [cand, spread])
    tri = next(c for c in rejected.candidates if c.candidate_id == "tri")
    assert tri.status == "rejected" and "loop" in tri.reason and tri.loops == 1
    assert rejected.best == "spread"
    scored = advise(LINKS, js, [cand], loops="score")
    tri = scored.candidates[0]
    assert tri.status == "ok" and scored.best == "tri"
    assert tri.loop_loss > LOOP_TOLERANCE
    # the achieved scores are honest: below the links' optimum of 1
    assert tri.score < 1.0 and tri.reason


@pytest.mark.parametrize(
    "cands, field",
    [
        ([Candidate("c", {"a": ("nope",)})], "candidates[0].paths.a[0]"),
        ([Candidate("c", {"ghost": ("l1",)})], "candidates[0].paths.ghost"),
        ([Candidate("c", {}), Candidate("c", {})], "candidates[1].id"),
        ([], "candidates"),
    ],
)
def test_bad_candidates(cands, field):
    with pytest.raises(InputError) as e:
        advise(LINKS, jobs(), cands)
    assert e.value.field == field


def test_bad_options():
    with pytest.raises(InputError, match="aggregate"):
        advise(LINKS, jobs(), [Candidate("c", {})], aggregate="max")
    with pytest.raises(InputError, match="precision_deg"):
        advise(LINKS, jobs(), [Candidate("c", {})], precision_deg=0)


def test_prediction_for_the_best_candidate_by_default_or_all():
    candidates = [
        Candidate("bad", {"a": ("l1",), "big": ("l1",), "b": ("l2",)}),
        Candidate("good", {"a": ("l1",), "b": ("l1",), "big": ("l2",)}),
    ]
    advice = advise(LINKS, jobs(), candidates)
    assert [c.prediction is not None for c in advice.candidates] == [True, False]
    assert advice.prediction is advice.candidates[0].prediction
    assert set(advice.prediction.shift) == {"a", "b", "big", "solo"}
    assert advice.prediction.reasons["solo"] == "shares no link with another job"
    everyone = advise(LINKS, jobs(), candidates, predict="all")
    assert all(c.prediction is not None for c in everyone.candidates)
    # prediction does not change the ranking or the shifts
    assert [c.candidate_id for c in everyone.candidates] == ["good", "bad"]
    assert everyone.time_shifts_s == advice.time_shifts_s
    none = advise(LINKS, jobs(), candidates, predict="none")
    assert none.shift == {"a": True, "b": True, "big": False, "solo": False}
