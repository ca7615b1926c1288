"""A link that one job of a candidate crosses alone counts when that job's peak rate is
above the link's capacity: scored like a shared link, slowing the job in the prediction.

The reviewer's case: jobs a and b each send 0.1 s of every 0.2 s iteration at 40 Gb/s.
On ``alone-thin`` job a crosses a 10 Gb/s link by itself (four times too much), b a
100 Gb/s one; on ``fat`` both share the 100 Gb/s link (80 Gb/s at most: it fits).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.service_util import call, start

from cassini import api
from cassini.advisor import Candidate, Link, advise
from cassini.circle import compatibility_score
from cassini.plugin import choose_placement
from cassini.predict import (
    agent_period_s,
    agent_periods_s,
    held_periods_s,
    predict_iteration_times,
    simulate_link,
)
from cassini.profile import JobProfile, Phase

THIN, FAT = 1e10, 1e11
BURST = [Phase(0.0, 0.1, 4e10)]  # 4e9 bits per 0.2 s iteration
JOBS = [JobProfile("a", 0.2, BURST), JobProfile("b", 0.2, BURST)]
LINKS = [Link("thin", THIN), Link("fat", FAT)]
ALONE_THIN = Candidate("alone-thin", {"a": ("thin",), "b": ("fat",)})
BOTH_FAT = Candidate("fat", {"a": ("fat",), "b": ("fat",)})
# a alone on thin: 4e9 bits at 1e10 b/s take 0.4 s, then the 0.1 s dedicated tail
A_ALONE_ON_THIN_S = 0.5
# thin's score: a sends 3e10 b/s above capacity on half the circle: 1 - 0.5 * 3 = -0.5
THIN_SCORE = -0.5


def request() -> dict:
    """The reviewer's case as an advise request (the CLI's and the service's JSON)."""
    job = {
        "iteration_time_s": 0.2,
        "phases": [{"start_s": 0.0, "duration_s": 0.1, "rate_bps": 4e10}],
    }
    return {
        "links": [{"id": "thin", "capacity_bps": THIN}, {"id": "fat", "capacity_bps": FAT}],
        "jobs": [{"id": j, **job} for j in ("a", "b")],
        "candidates": [
            {"id": "alone-thin", "paths": {"a": ["thin"], "b": ["fat"]}},
            {"id": "fat", "paths": {"a": ["fat"], "b": ["fat"]}},
        ],
    }


def test_the_fluid_model_puts_a_alone_on_thin_at_half_a_second():
    """The number the prediction must give (the fluid model on the link by itself)."""
    run = simulate_link([JOBS[0]], THIN)
    assert run.iteration_times_s["a"] == pytest.approx(A_ALONE_ON_THIN_S)
    # a link's own score by itself: the excess over capacity, as for a shared link
    assert compatibility_score([JOBS[0]], THIN).score == pytest.approx(THIN_SCORE)


def test_a_job_alone_over_a_links_capacity_loses_to_a_placement_that_fits():
    advice = advise(LINKS, JOBS, [ALONE_THIN, BOTH_FAT])
    assert advice.best == "fat"
    ranked = {c.candidate_id: c for c in advice.candidates}
    thin = ranked["alone-thin"]
    assert thin.link_scores == pytest.approx({"thin": THIN_SCORE})
    assert thin.score == pytest.approx(THIN_SCORE)
    assert thin.min_link_score == pytest.approx(THIN_SCORE)
    assert ranked["fat"].score == pytest.approx(1.0)
    assert [c.candidate_id for c in advice.candidates] == ["fat", "alone-thin"]


def test_the_prediction_slows_a_job_alone_over_a_links_capacity():
    advice = advise(LINKS, JOBS, [ALONE_THIN], predict="all")
    (thin,) = advice.candidates
    pred = thin.prediction
    assert pred is not None
    for kind in ("same_start", "shifted", "advised"):
        assert pred.iteration_s["a"][kind] == pytest.approx(A_ALONE_ON_THIN_S, rel=1e-6)
        assert pred.iteration_s["b"][kind] == pytest.approx(0.2)  # fits on fat
    # nothing to interleave with: neither job is held, no agent period, gain 1
    assert pred.shift == {"a": False, "b": False}
    assert pred.agent_period_s == {} and pred.gain == 1.0
    assert advice.time_shifts_s == {"a": 0.0, "b": 0.0}


def test_a_lone_overloaded_link_appears_in_link_solutions_with_one_job():
    advice = advise(LINKS, JOBS, [ALONE_THIN])
    assert set(advice.link_solutions) == {"thin"}  # b alone on fat fits: left out
    sol = advice.link_solutions["thin"]
    assert sol.job_ids == ("a",) and sol.score == pytest.approx(THIN_SCORE)
    assert advice.shift == {"a": False, "b": False}  # sharing nothing: not shifted


def test_only_the_lone_link_over_capacity_counts():
    """Of two links each crossed by one job, the one whose job's peak rate exceeds its
    capacity is scored, solved and simulated; the one it fits exactly stays out."""
    links = [Link("thin", THIN), Link("exact", 4e10)]  # b's 4e10 exactly fits on exact
    cand = Candidate("two-lone", {"a": ("thin",), "b": ("exact",)})
    advice = advise(links, JOBS, [cand])
    assert set(advice.link_solutions) == {"thin"}
    (res,) = advice.candidates
    assert set(res.link_scores) == {"thin"}
    pred = res.prediction
    assert pred.iteration_s["a"]["same_start"] == pytest.approx(A_ALONE_ON_THIN_S, rel=1e-6)
    assert pred.iteration_s["b"]["same_start"] == 0.2


def test_a_job_alone_within_a_links_capacity_stays_out():
    """A single-job link whose peak rate fits is neither scored nor simulated."""
    links = [Link("thin", 4e10), Link("fat", FAT)]  # a's 4e10 exactly fits
    advice = advise(links, JOBS, [ALONE_THIN], predict="all")
    assert advice.link_solutions == {}
    (cand,) = advice.candidates
    assert cand.link_scores == {} and cand.score == 1.0
    assert cand.prediction is not None
    assert cand.prediction.iteration_s["a"]["same_start"] == 0.2


def test_with_both_jobs_on_thin_the_prediction_already_used_the_capacity():
    """The shared case the lone one now matches: both jobs slowed on thin."""
    together = Candidate("thin", {"a": ("thin",), "b": ("thin",)})
    advice = advise(LINKS, JOBS, [together])
    (cand,) = advice.candidates
    assert cand.prediction.iteration_s["a"]["same_start"] > 0.5
    assert set(advice.link_solutions["thin"].job_ids) == {"a", "b"}


def test_a_shared_job_alone_on_another_overloaded_link_is_slowed_there():
    """A job on a shared link and alone on an overloaded one: both links scored, the
    prediction slows it on the lone link, and its agent period comes from the shared
    link only."""
    jobs = [*JOBS, JobProfile("c", 0.2, [Phase(0.1, 0.1, 4e10)])]
    cand = Candidate("mixed", {"a": ("fat", "thin"), "c": ("fat",)})
    advice = advise(LINKS, jobs, [cand])
    (res,) = advice.candidates
    assert set(res.link_scores) == {"fat", "thin"}
    assert res.link_scores["thin"] == pytest.approx(THIN_SCORE)
    assert res.link_scores["fat"] == pytest.approx(1.0)
    assert res.score == pytest.approx((1.0 + THIN_SCORE) / 2)
    pred = res.prediction
    assert pred.iteration_s["a"]["same_start"] == pytest.approx(A_ALONE_ON_THIN_S, rel=1e-6)
    assert pred.iteration_s["c"]["same_start"] == pytest.approx(0.2)


def test_predict_iteration_times_simulates_a_link_with_one_job():
    out = predict_iteration_times({j.job_id: j for j in JOBS}, {"thin": (THIN, ("a",))})
    assert out["a"] == pytest.approx(A_ALONE_ON_THIN_S) and out["b"] == 0.2


def test_a_link_with_one_job_holds_no_agent_period():
    """Nothing to interleave with on a lone link: no period for the agent (the testbed
    passes an advice's link_solutions, lone links included, to agent_periods_s)."""
    profiles = {j.job_id: j for j in JOBS}
    lone = compatibility_score([JOBS[0]], THIN)
    shared = compatibility_score(JOBS, FAT)
    assert held_periods_s(profiles, [lone]) == {}
    assert agent_periods_s(profiles, [lone]) == {}
    assert agent_period_s("a", profiles, [lone]) is None
    assert agent_periods_s(profiles, [lone, shared]) == agent_periods_s(profiles, [shared])


def test_the_plugin_chooses_the_placement_that_fits():
    jobs = {j.job_id: j for j in JOBS}
    links = {"thin": THIN, "fat": FAT}
    choice = choose_placement(
        jobs, links, [{"a": ["thin"], "b": ["fat"]}, {"a": ["fat"], "b": ["fat"]}]
    )
    assert choice.index == 1 and choice.score == pytest.approx(1.0)
    lone = next(r for r in choice.ranked if r.candidate_id == "0")
    assert lone.score == pytest.approx(THIN_SCORE)  # below 0: the score is not in [0, 1]


def test_the_cli_chooses_fat_and_scores_alone_thin_below_zero(tmp_path):
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request()))
    proc = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "advise", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["best"] == "fat"
    thin = next(c for c in out["candidates"] if c["id"] == "alone-thin")
    assert thin["score"] == pytest.approx(THIN_SCORE)
    assert thin["link_scores"] == pytest.approx({"thin": THIN_SCORE})
    table = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "advise", str(path), "--format", "table"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0 and "best placement: fat" in table.stdout


def test_the_prediction_of_alone_thin_when_it_is_the_only_candidate():
    out = api.advise_request({**request(), "candidates": request()["candidates"][:1]}).to_dict()
    (thin,) = out["candidates"]
    assert thin["predicted_iteration_s"]["a"]["same_start"] == pytest.approx(
        A_ALONE_ON_THIN_S, rel=1e-6
    )


def test_the_http_service_answers_the_same():
    srv = start(timeout_s=60, workers=1)
    try:
        status, _, body = call(srv.port, "POST", "/v1/advise", request())
    finally:
        srv.stop()
    assert status == 200, body
    out = json.loads(body)
    assert out == json.loads(json.dumps(api.advise_request(request()).to_dict()))
    assert out["best"] == "fat"
    thin = next(c for c in out["candidates"] if c["id"] == "alone-thin")
    assert thin["score"] == pytest.approx(THIN_SCORE)
