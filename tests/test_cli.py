import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.pinned import (
    ADVISE_MIN_2DEG_RANKING,
    ADVISE_MIN_2DEG_SHIFTS_S,
    assert_advice,
    assert_score,
)

from cassini.api import example


def run(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "cassini.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_advise_example_json_contract():
    r = run("advise", "--example")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"best", "time_shifts_s", "candidates"}
    ids = {c["id"] for c in out["candidates"]}
    assert out["best"] in ids
    for c in out["candidates"]:
        assert set(c) >= {"id", "status", "score", "min_link_score", "link_scores", "reason"}
        assert c["status"] in ("ok", "rejected")
    assert set(out["time_shifts_s"]) == {j["id"] for j in example("advise")["jobs"]}
    assert_advice(out)  # winner themis-3 at 0.94381, every score and shift pinned


def test_advise_example_min_aggregate_picks_the_named_candidate():
    r = run("advise", "--example", "--aggregate", "min", "--precision-deg", "2", "--loops", "score")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["best"] == "themis-3"  # the highest worst link (0.8727), as pinned
    assert_advice(out, ADVISE_MIN_2DEG_RANKING, ADVISE_MIN_2DEG_SHIFTS_S)


def test_advise_table_shows_each_links_score_at_the_chosen_shifts():
    """Three jobs around a loop of three links (each pair interleaves alone, not all three
    at once): the table's link scores are the ones the candidate's score aggregates (it
    printed each link's own best, 1.000 everywhere, beside a candidate minimum of 0.725)."""
    phase = [{"start_s": 0, "duration_s": 0.14, "rate_bps": 4e10}]
    request = {
        "links": [{"id": f"l{i}", "capacity_bps": 5e10} for i in (1, 2, 3)],
        "jobs": [{"id": j, "iteration_time_s": 0.3, "phases": phase} for j in "abc"],
        "candidates": [{"id": "tri", "paths": {"a": ["l1", "l3"], "b": ["l1", "l2"],
                                               "c": ["l2", "l3"]}}],
    }  # fmt: skip
    text = json.dumps(request)
    advice = json.loads(run("advise", "-", "--loops", "score", stdin=text).stdout)
    achieved = advice["candidates"][0]["link_scores"]
    assert min(achieved.values()) < 0.99  # the loop costs one link
    table = run("advise", "-", "--loops", "score", "--format", "table", stdin=text).stdout
    rows = {ln.split()[0]: ln.split() for ln in table.splitlines() if ln.startswith("l")}
    for link, score in achieved.items():
        assert float(rows[link][-2]) == pytest.approx(score, abs=5e-4)  # score column
        assert float(rows[link][-1]) == pytest.approx(1.0)  # alone


def test_score_from_stdin_and_table():
    request = json.dumps(example("score"))
    r = run("score", "-", stdin=request)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"score", "time_shifts_s", "unified_period_s"}
    assert out["score"] <= 1.0
    assert_score(out)
    r = run("score", "-", "--format", "table", "--precision-deg", "2", stdin=request)
    assert r.returncode == 0 and "score" in r.stdout and "180 angles" in r.stdout


def test_help_explains():
    r = run("advise", "--help")
    assert r.returncode == 0 and "time-shift" in r.stdout and "--precision-deg" in r.stdout


def job(**over):
    j = {
        "id": "a",
        "iteration_time_s": 0.1,
        "phases": [{"start_s": 0.0, "duration_s": 0.05, "rate_bps": 1e9}],
    }
    j.update(over)
    return j


def advise_req(**over):
    req = {
        "links": [{"id": "l1", "capacity_bps": 1e9}],
        "jobs": [job(), job(id="b")],
        "candidates": [{"id": "c1", "paths": {"a": ["l1"], "b": ["l1"]}}],
    }
    req.update(over)
    return req


BAD = [
    ("score", "{not json", "malformed JSON"),
    ("score", json.dumps({"capacity_bps": 1e9, "jobs": []}), "jobs: must not be empty"),
    (
        "score",
        json.dumps({"capacity_bps": 0, "jobs": [job()]}),
        "capacity_bps: must be >= 1, got 0",
    ),
    (
        "score",
        json.dumps({"capacity_bps": 1e9, "jobs": [job(iteration_time_s=-1)]}),
        "jobs[0].iteration_time_s: must be >= 1e-06, got -1",
    ),
    (
        "score",
        json.dumps({"capacity_bps": 1e9, "jobs": [job(iteration_time_s=0)]}),
        "jobs[0].iteration_time_s: must be >= 1e-06, got 0",
    ),
    (
        "score",
        json.dumps(
            {
                "capacity_bps": 1e9,
                "jobs": [job(phases=[{"start_s": 0.2, "duration_s": 0.01, "rate_bps": 1}])],
            }
        ),
        "jobs[0].phases[0].start_s: must be inside the iteration",
    ),
    (
        "score",
        json.dumps(
            {
                "capacity_bps": 1e9,
                "jobs": [job(phases=[{"start_s": 0.0, "duration_s": -0.01, "rate_bps": 1}])],
            }
        ),
        "jobs[0].phases[0].duration_s: must be >= 1e-06, got -0.01",
    ),
    (
        "score",
        json.dumps({"capacity_bps": 1e9, "jobs": [job(speed=3)]}),
        "jobs[0].speed: unknown field",
    ),
    (
        "score",
        json.dumps({"capacity_bps": 1e9, "jobs": [job()], "extra": 1}),
        "extra: unknown field",
    ),
    (
        "score",
        json.dumps({"capacity_bps": 1e9, "jobs": [job(), job()]}),
        "jobs[1].id: duplicate job id",
    ),
    (
        "advise",
        json.dumps(advise_req(candidates=[{"id": "c1", "paths": {"a": ["l7"]}}])),
        "candidates[0].paths.a[0]: unknown link 'l7'",
    ),
    ("advise", json.dumps(advise_req(jobs=[])), "jobs: must not be empty"),
    (
        "advise",
        json.dumps(advise_req(links=[{"id": "l1", "capacity_bps": "fast"}])),
        "links[0].capacity_bps: must be a number",
    ),
    (
        "advise",
        json.dumps(advise_req(candidates=[{"id": "c1", "paths": {"a": ["l1"]}, "why": 1}])),
        "candidates[0].why: unknown field",
    ),
    ("advise", json.dumps([1, 2]), "input: must be a JSON object"),
    # a key given twice was taken silently (the last won); an integer past Python's
    # 4,300 digits raised ValueError: a traceback and exit 1
    (
        "score",
        '{"capacity_bps": 1e10, "capacity_bps": 2e10, "jobs": []}',
        "duplicate key 'capacity_bps'",
    ),
    (
        "score",
        '{"capacity_bps": ' + "9" * 5000 + ', "jobs": []}',
        "<stdin>: malformed JSON: a number is too long (5000 digits",
    ),
]


@pytest.mark.parametrize("command, text, message", BAD)
def test_bad_input_exits_2_with_one_clear_line(command, text, message):
    r = run(command, "-", stdin=text)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert message in lines[0]


def test_a_precision_finer_than_the_bound_is_refused_not_allocated():
    """0.001 degrees (360,000 angles) asked numpy for 966 GiB: a traceback."""
    examples = Path(__file__).resolve().parent.parent / "examples"
    for command, name in (("score", "link.json"), ("advise", "request.json")):
        r = run(command, str(examples / name), "--precision-deg", "0.001")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "precision_deg: must be in [0.1, 180] degrees" in r.stderr


def test_missing_file_and_bad_flag(tmp_path):
    r = run("advise", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    r = run("advise")
    assert r.returncode == 2 and "--example" in r.stderr
    r = run("advise", "--example", "--precision-deg", "0")
    assert r.returncode == 2 and "precision_deg" in r.stderr


def test_stdin_is_read_as_a_file_is_bom_included():
    """``score -`` read stdin with its own parser: a byte-order mark a file may carry was
    a malformed-JSON exit 2 from stdin only."""
    from cassini import api

    text = run("score", "--example").stdout  # the example's answer, to compare
    body = "\ufeff" + json.dumps(api.example("score"))
    r = run("score", "-", stdin=body)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["score"] == json.loads(text)["score"]
