"""cassini as a Python library (the reviewer's report of 2026-11-29): what a caller gets
back is its own (changing it changes no later answer, whatever the caches keep), a
mistake in the arguments is an InputError naming the field, and :mod:`cassini.api`
refuses what the CLI and the service refuse."""

from __future__ import annotations

import math
import pickle
from dataclasses import fields
from typing import Any

import pytest

from cassini import Candidate, JobProfile, Link, Phase, advise, api
from cassini.advisor import clear_link_cache
from cassini.circle import LinkSolution, compatibility_score
from cassini.errors import InputError
from cassini.predict import (
    Slot,
    agent_period_s,
    agent_periods_s,
    predict_iteration_times,
    simulate_link,
)


def _pair(x: str, y: str):
    jobs = [
        JobProfile(x, 0.3, [Phase(0.16, 0.14, 40e9)]),
        JobProfile(y, 0.3, [Phase(0.17, 0.13, 38e9)]),
    ]
    return advise([Link("L", 50e9)], jobs, [Candidate("c", {x: ["L"], y: ["L"]})])


# -- 1. an advice's link solutions are the caller's ---------------------------------------


def test_changing_an_advices_link_solution_changes_no_later_advice():
    """The advisor keeps each link problem's solution for later calls; the advice hands
    out a copy (its own dict, the arrays read-only), so a caller's edit stays its own."""
    clear_link_cache()
    first = _pair("a", "b")  # solved now
    shifts = dict(first.time_shifts_s)
    assert shifts["b"] > 0
    solution = first.link_solutions["L"]
    solution.time_shifts_s["b"] = 0.29
    again = _pair("a", "b")  # the kept solution
    assert again.time_shifts_s == shifts
    with pytest.raises(ValueError, match="read-only"):
        solution.demand_bps[0] = 0.0
    with pytest.raises(ValueError, match="read-only"):
        solution.vectors[0, 0] = 0.0
    assert again.link_solutions["L"].time_shifts_s == shifts
    again.link_solutions["L"].time_shifts_s["b"] = 0.01
    renamed = _pair("p", "q")  # the kept solution, for other job ids
    assert renamed.time_shifts_s == {"p": shifts["a"], "q": shifts["b"]}
    assert _pair("a", "b").time_shifts_s == shifts
    # what is kept and what is handed out still pickle (the cache may cross processes)
    copy = pickle.loads(pickle.dumps(_pair("a", "b")))
    assert copy.time_shifts_s == shifts
    assert copy.link_solutions["L"].time_shifts_s == shifts


def test_a_solutions_own_copy_shares_every_field_but_its_shifts():
    """What the advice hands out (:meth:`LinkSolution.own_copy`) is the kept solution in
    every field (a field added later included), its shifts a dict of its own."""
    kept = compatibility_score([HALF, OTHER], 1e9)
    copy = kept.own_copy()
    for f in fields(LinkSolution):
        if f.name == "time_shifts_s":
            assert copy.time_shifts_s == kept.time_shifts_s
            assert copy.time_shifts_s is not kept.time_shifts_s
        else:
            assert getattr(copy, f.name) is getattr(kept, f.name), f.name


# -- 2. a link simulation is the caller's ---------------------------------------------------


def test_changing_a_link_simulation_changes_no_later_prediction():
    a = JobProfile("a", 0.1, [Phase(0.0, 0.05, 10e9)])
    b = JobProfile("b", 0.1, [Phase(0.0, 0.05, 10e9)])

    def same_start() -> float:
        advice = advise([Link("L", 10e9)], [a, b], [Candidate("c", {"a": ["L"], "b": ["L"]})])
        return advice.prediction.iteration_s["a"]["same_start"]

    before = same_start()
    run = simulate_link([a, b], 10e9)
    assert run.iteration_times_s["a"] == pytest.approx(before)
    for field in ("iteration_times_s", "iterations", "bits_sent", "bits_completed"):
        for job in ("a", "b"):
            getattr(run, field)[job] *= 1000
    assert same_start() == before
    assert predict_iteration_times({"a": a, "b": b}, {"L": (10e9, ["a", "b"])})["a"] == before
    assert simulate_link([a, b], 10e9).iteration_times_s["a"] == pytest.approx(before)


# -- 4. a mistake is an InputError naming the field ------------------------------------------

HALF = JobProfile("half", 0.1, [Phase(0.0, 0.05, 1e9)])
OTHER = JobProfile("other", 0.1, [Phase(0.05, 0.05, 1e9)])
RAW_PHASE = {"start_s": 0.0, "duration_s": 0.01, "rate_bps": 1.0}


def _solution():
    return compatibility_score([HALF, OTHER], 1e9)


MISTAKES: list[tuple[str, Any, str]] = [
    ("a phase given as a dict", lambda: JobProfile("x", 0.1, [RAW_PHASE]), "phases[0]"),
    ("a phase given as a tuple", lambda: JobProfile("x", 0.1, [(0.0, 0.01, 1.0)]), "phases[0]"),
    ("phases a number", lambda: JobProfile("x", 0.1, 5), "phases"),
    ("phases None", lambda: JobProfile("x", 0.1, None), "phases"),
    ("score: jobs a mapping", lambda: compatibility_score({"half": HALF}, 1e9), "jobs"),
    ("score: jobs as dicts", lambda: compatibility_score([HALF.to_dict()], 1e9), "jobs[0]"),
    ("score: one profile", lambda: compatibility_score(HALF, 1e9), "jobs"),
    (
        "score: restarts a string",
        lambda: compatibility_score([HALF], 1e9, restarts="x"),
        "restarts",
    ),
    ("score: a negative seed", lambda: compatibility_score([HALF], 1e9, seed=-1), "seed"),
    (
        "prediction: a link's job not in profiles",
        lambda: predict_iteration_times({"half": HALF}, {"L": (1e10, ["half", "zz"])}),
        "links['L']",
    ),
    (
        "agent period: profiles a list",
        lambda: agent_period_s("half", [HALF, OTHER], [_solution()]),
        "profiles",
    ),
    (
        "agent period: a link's job not in profiles",
        lambda: agent_period_s("half", {"half": HALF}, [_solution()]),
        "link_solutions[0]",
    ),
]


@pytest.mark.parametrize("call, field", [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_a_library_callers_mistake_is_an_input_error_naming_the_field(call, field):
    with pytest.raises(InputError) as e:
        call()
    assert e.value.field == field, str(e.value)


# -- 5. cassini.api refuses what the CLI and the service refuse ------------------------------


def _job(**over: Any) -> dict[str, Any]:
    job = {"id": "a", "iteration_time_s": 0.1, "phases": [dict(RAW_PHASE, rate_bps=1e9)]}
    return {**job, **over}


def _score(**over: Any) -> dict[str, Any]:
    return {"capacity_bps": 1e9, "jobs": [_job(), _job(id="b")], **over}


def _advise(edit) -> dict[str, Any]:
    body = api.example("advise")
    edit(body)
    return body


def _set_link_id(body: dict[str, Any]) -> None:
    body["links"][0]["id"] = 5


def _set_candidate_id(body: dict[str, Any]) -> None:
    body["candidates"][0]["id"] = 1


def _set_link_capacity(body: dict[str, Any]) -> None:
    body["links"][0]["capacity_bps"] = 2e15


def _set_path_link(body: dict[str, Any]) -> None:
    job = next(iter(body["candidates"][0]["paths"]))
    body["candidates"][0]["paths"][job][0] = 7


#: (name, command, body, the field refused)
BODIES: list[tuple[str, str, dict[str, Any], str]] = [
    ("an integer job id", "score", _score(jobs=[{**_job(id=5), "phases": []}]), "jobs[0].id"),
    (
        "a phase under a microsecond",
        "score",
        _score(jobs=[_job(phases=[dict(RAW_PHASE, duration_s=5e-7)])]),
        "jobs[0].phases[0].duration_s",
    ),
    (
        "an iteration under a microsecond",
        "score",
        _score(jobs=[_job(iteration_time_s=9e-7, phases=[dict(RAW_PHASE, duration_s=4e-7)])]),
        "jobs[0].iteration_time_s",
    ),
    ("a capacity above 1e15 bits/s", "score", _score(capacity_bps=1.001e15), "capacity_bps"),
    ("a capacity under 1 bit/s", "score", _score(capacity_bps=0.5), "capacity_bps"),
    ("an integer link id", "advise", _advise(_set_link_id), "links[0].id"),
    ("an integer candidate id", "advise", _advise(_set_candidate_id), "candidates[0].id"),
    (
        "a link capacity above 1e15 bits/s",
        "advise",
        _advise(_set_link_capacity),
        "links[0].capacity_bps",
    ),
]


def _refused(call) -> str | None:
    try:
        call()
    except InputError as e:
        return e.field
    return None


@pytest.mark.parametrize(
    "command, body, field", [b[1:] for b in BODIES], ids=[b[0] for b in BODIES]
)
def test_the_api_refuses_what_the_service_model_refuses(command, body, field):
    """A library caller of api.score_request/advise_request gets the verdict of ``cassini
    score``/``advise`` and the service (their model first, then these readers)."""
    from cassini.service import models
    from cassini.service.errors import BadRequest

    answer = api.score_request if command == "score" else api.advise_request
    assert _refused(lambda: answer(body)) == field
    model = models.ScoreRequest if command == "score" else models.AdviseRequest
    with pytest.raises(BadRequest) as e:
        models.validate(model, body)
    assert e.value.field == field


def test_the_api_refuses_a_path_naming_a_link_by_a_number():
    body = _advise(_set_path_link)
    job = next(iter(body["candidates"][0]["paths"]))
    with pytest.raises(InputError) as e:  # was read as the link "7", unknown
        api.advise_request(body)
    assert str(e.value) == f"candidates[0].paths.{job}[0]: must be a string, got the number 7"


def test_the_api_still_answers_the_examples():
    assert api.score_request(api.example("score"))["score"] > 0
    assert api.advise_request(api.example("advise")).best is not None


# -- 6. no silent acceptance ------------------------------------------------------------------


SILENT: list[tuple[str, Any, str]] = [
    (
        "slack NaN",
        lambda: agent_periods_s({"half": HALF, "other": OTHER}, [_solution()], slack=math.nan),
        "slack",
    ),
    (
        "slack NaN (one job)",
        lambda: agent_period_s(
            "half", {"half": HALF, "other": OTHER}, [_solution()], slack=math.nan
        ),
        "slack",
    ),
    ("a slot's shift NaN", lambda: Slot(math.nan, 0.1), "shift_s"),
    ("a slot's shift negative", lambda: Slot(-0.01, 0.1), "shift_s"),
    ("a slot's period 0", lambda: Slot(0.0, 0.0), "period_s"),
    ("a slot's period infinite", lambda: Slot(0.0, math.inf), "period_s"),
    ("a slot's period a boolean", lambda: Slot(0.0, True), "period_s"),
    (
        "a link simulated with one job twice",
        lambda: simulate_link([HALF, HALF], 1e9),
        "profiles[1]",
    ),
    ("a job id None", lambda: JobProfile(None, 0.1), "job_id"),
]


@pytest.mark.parametrize("call, field", [s[1:] for s in SILENT], ids=[s[0] for s in SILENT])
def test_a_value_that_makes_no_sense_is_refused(call, field):
    with pytest.raises(InputError) as e:
        call()
    assert e.value.field == field, str(e.value)


def test_what_was_accepted_still_is():
    assert Slot(0, 1).period_s == 1 and Slot(0.0, 1e-9).shift_s == 0.0
    assert JobProfile(7, 0.1).job_id == "7"
    assert JobProfile("g", 0.1, (p for p in HALF.phases)).phases == HALF.phases
    assert compatibility_score((HALF, OTHER), 1e9, restarts=0, seed=3).score == pytest.approx(1)
    assert agent_periods_s({"half": HALF, "other": OTHER}, [_solution()], slack=0.03)
