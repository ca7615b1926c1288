"""cassini.plugin.choose_placement: the placement stage a scheduler calls."""

from __future__ import annotations

import dataclasses
import doctest
import subprocess
import sys
from pathlib import Path

import pytest

from cassini import plugin, schema
from cassini.advisor import CandidateResult
from cassini.errors import InputError
from cassini.plugin import PlacementChoice, choose_placement
from cassini.profile import JobProfile, Phase

GBPS = 1e9
ROOT = Path(__file__).resolve().parents[1]


def half_duty(job_id: str) -> JobProfile:
    """Sends at 1 Gbps for the first half of every 100 ms iteration."""
    return JobProfile(job_id, 0.1, [Phase(0.0, 0.05, GBPS)])


JOBS = {j: half_duty(j) for j in ("a", "b", "c")}
LINKS = {"l1": GBPS, "l2": GBPS, "l3": GBPS}
# three half-duty jobs at the link's full rate cannot all interleave on one link
COLLIDE = {"a": ["l1"], "b": ["l1"], "c": ["l1"]}
# two of them interleave perfectly (b half an iteration after a); c alone on l2
COMPATIBLE = {"a": ["l1"], "b": ["l1"], "c": ["l2"]}
# pairwise on three links: a loop that no shifts can satisfy
TRIANGLE = {"a": ["l1", "l3"], "b": ["l1", "l2"], "c": ["l2", "l3"]}


def test_picks_the_compatible_candidate():
    choice = choose_placement(JOBS, LINKS, [COLLIDE, COMPATIBLE])
    assert isinstance(choice, PlacementChoice) and choice.accepted
    assert choice.index == 1 and choice.candidate_id == "1"
    assert choice.score == pytest.approx(1.0)
    assert choice.time_shifts_s == pytest.approx({"a": 0.0, "b": 0.05, "c": 0.0})
    assert [r.candidate_id for r in choice.ranked] == ["1", "0"]
    assert all(isinstance(r, CandidateResult) for r in choice.ranked)
    assert choice.ranked[1].score < 1.0


def test_candidate_ids_and_ties_keep_the_schedulers_order():
    on_l2 = {"a": ["l2"], "b": ["l2"], "c": ["l3"]}  # the same problem on other links
    choice = choose_placement(JOBS, LINKS, [COMPATIBLE, on_l2], candidate_ids=["p1", "p2"])
    assert (choice.index, choice.candidate_id) == (0, "p1")
    choice = choose_placement(JOBS, LINKS, [on_l2, COMPATIBLE], candidate_ids=["p2", "p1"])
    assert (choice.index, choice.candidate_id) == (0, "p2")
    assert {r.candidate_id for r in choice.ranked} == {"p1", "p2"}


def test_result_is_frozen():
    choice = choose_placement(JOBS, LINKS, [COMPATIBLE])
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.index = 3


def test_fallback_when_every_candidate_is_rejected():
    choice = choose_placement(JOBS, LINKS, [TRIANGLE, TRIANGLE], loops="reject")
    assert not choice.accepted
    assert choice.index == 0 and choice.candidate_id == "0"
    assert choice.score is None
    assert choice.time_shifts_s == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert [r.status for r in choice.ranked] == ["rejected", "rejected"]
    assert all("loop" in r.reason for r in choice.ranked)


def test_loops_are_scored_by_default():
    choice = choose_placement(JOBS, LINKS, [TRIANGLE])
    assert choice.accepted and choice.index == 0 and choice.score < 1.0


def test_options_reach_the_advisor():
    by_min = choose_placement(JOBS, LINKS, [COLLIDE, COMPATIBLE], aggregate="min")
    assert by_min.index == 1
    fine = choose_placement(JOBS, LINKS, [COMPATIBLE], precision_deg=1.0)
    assert fine.time_shifts_s["b"] == pytest.approx(0.05)


def test_predictions_are_optional_and_never_change_the_choice():
    """The simulator asks for no predictions: same choice, shifts and scores, none
    predicted; by default the best candidate carries one."""
    full = choose_placement(JOBS, LINKS, [COLLIDE, COMPATIBLE])
    bare = choose_placement(JOBS, LINKS, [COLLIDE, COMPATIBLE], predict="none")
    assert (bare.index, bare.score) == (full.index, full.score)
    assert bare.time_shifts_s == full.time_shifts_s
    assert [r.score for r in bare.ranked] == [r.score for r in full.ranked]
    assert full.ranked[0].prediction is not None
    assert all(r.prediction is None for r in bare.ranked)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"jobs": {"a": "not a profile"}}, "jobs['a']"),
        ({"jobs": {"x": half_duty("a")}}, "jobs['x']"),
        ({"jobs": [half_duty("a")]}, "jobs"),
        ({"links": {"l1": 0}}, "links['l1']"),
        ({"links": {"l1": float("nan")}}, "links['l1']"),
        ({"links": ["l1"]}, "links"),
        ({"candidates": []}, "candidates"),
        ({"candidates": COMPATIBLE}, "candidates"),
        ({"candidates": [["l1"]]}, "candidates[0]"),
        ({"candidates": [{"a": "l1"}]}, "candidates[0].paths.a"),
        ({"candidates": [{"ghost": ["l1"]}]}, "candidates[0].paths.ghost"),
        ({"candidates": [{"a": ["l9"]}]}, "candidates[0].paths.a[0]"),
        ({"candidate_ids": ["only-one"]}, "candidate_ids"),
        ({"candidate_ids": ["same", "same"]}, "candidates[1].id"),
        ({"precision_deg": 0}, "precision_deg"),
        ({"aggregate": "max"}, "aggregate"),
        ({"loops": "ignore"}, "loops"),
        ({"predict": "some"}, "predict"),
    ],
)
def test_bad_input_raises_input_error_naming_the_field(kwargs, field):
    args = {"jobs": JOBS, "links": LINKS, "candidates": [COLLIDE, COMPATIBLE]} | kwargs
    with pytest.raises(InputError) as e:
        choose_placement(**args)
    assert e.value.field == field
    assert isinstance(e.value, ValueError)


def test_docstring_example_runs():
    result = doctest.testmod(plugin, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_themis_example_script_runs():
    r = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "themis_placement_stage.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert "<- chosen" in r.stdout and "time-shifts for the agents" in r.stdout


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"precision_deg": True}, "precision_deg"),  # a boolean is not a precision
        ({"candidate_ids": [""]}, "candidate_ids[0]"),  # nor an empty string an id
    ],
)
def test_a_flag_or_an_empty_id_is_refused(kwargs, field):
    with pytest.raises(InputError) as e:
        choose_placement(JOBS, LINKS, [COMPATIBLE], **kwargs)
    assert e.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"jobs": [half_duty("a")]}, "jobs", [half_duty("a")]),
        ({"jobs": {"a": "not a profile"}}, "jobs['a']", "not a profile"),
        ({"links": ["l1"]}, "links", ["l1"]),
        ({"candidates": COMPATIBLE}, "candidates", COMPATIBLE),
        ({"candidates": [["l1"]]}, "candidates[0]", ["l1"]),
        ({"candidates": [{"a": "l1"}]}, "candidates[0].paths.a", "l1"),
        ({"candidates": [{"a": 3}]}, "candidates[0].paths.a", 3),
    ],
)
def test_bad_input_names_the_value_as_the_schema_does(kwargs, field, value):
    """The wrong value is named by cassini.schema.kind_of, as every other input error."""
    args = {"jobs": JOBS, "links": LINKS, "candidates": [COLLIDE, COMPATIBLE]} | kwargs
    with pytest.raises(InputError) as e:
        choose_placement(**args)
    assert e.value.field == field
    assert e.value.problem.endswith(f", got {schema.kind_of(value)}"), e.value.problem
    assert "\n" not in str(e.value)
    assert not hasattr(plugin, "_kind")
