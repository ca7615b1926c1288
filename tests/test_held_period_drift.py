"""Held jobs whose periods do not fit together on a link are named: the 25 % cap of
:func:`cassini.predict.held_periods_s` leaves them drifting, and the advice says so."""

from __future__ import annotations

import dataclasses
import json

import pytest

from cassini.advisor import Candidate, Link, advise
from cassini.circle import compatibility_score
from cassini.plugin import choose_placement
from cassini.predict import MAX_PROPAGATED_STRETCH, drifting_links, held_periods_s
from cassini.profile import JobProfile, Phase
from cassini.service.cluster import library

GBPS = 1e9


def _job(job_id: str, period_s: float, share: float, rate_bps: float) -> JobProfile:
    return JobProfile(job_id, period_s, [Phase(0.0, share * period_s, rate_bps)])


def test_two_links_whose_circles_disagree_beyond_the_cap_are_named():
    """b and c more than fill l2 (1.4x its capacity: both asked for 0.14 s); a and b on
    l1 have room and repeat 1:1, so a would need 0.14 s, 40 % over what its own link
    asks: past the 25 % cap a keeps 0.1 s and drifts against b on l1.  l2 fits."""
    a = _job("a", 0.1, 0.1, 0.4 * GBPS)
    b = _job("b", 0.1, 0.5, GBPS)
    c = _job("c", 0.1, 0.9, GBPS)
    jobs = {"a": a, "b": b, "c": c}
    sols = {"l1": compatibility_score([a, b], GBPS), "l2": compatibility_score([b, c], GBPS)}
    assert sols["l1"].unified.repeats == (1, 1) == sols["l2"].unified.repeats
    held = held_periods_s(jobs, sols.values())
    assert held["a"] == pytest.approx(0.1)
    assert held["b"] == held["c"] == pytest.approx(0.14)
    assert held["b"] > held["a"] * (1 + MAX_PROPAGATED_STRETCH)
    assert drifting_links(sols, held) == {"l1": ("a", "b")}
    # run free, a job drifts against no one: only the held jobs count
    assert drifting_links(sols, {j: held[j] for j in "bc"}) == {}


def test_periods_that_fit_are_not_named():
    """A chain whose circles agree (a job on two links takes the longer, its partners
    follow within the cap) and a 2:1 pair held in exactly that ratio: no drift."""
    a, b = _job("a", 0.0900, 0.3, 0.5 * GBPS), _job("b", 0.0902, 0.3, 0.5 * GBPS)
    e = _job("e", 0.0950, 0.1, 0.5 * GBPS)
    sols = {"s1": compatibility_score([a, b], GBPS), "s2": compatibility_score([b, e], GBPS)}
    held = held_periods_s({"a": a, "b": b, "e": e}, sols.values())
    assert drifting_links(sols, held) == {}
    c, d = _job("c", 0.0402, 0.25, 0.5 * GBPS), _job("d", 0.0800, 0.125, 0.5 * GBPS)
    pair = {"l": compatibility_score([c, d], GBPS)}
    assert pair["l"].unified.repeats == (2, 1)
    held = held_periods_s({"c": c, "d": d}, pair.values())
    assert drifting_links(pair, held) == {}
    # slack multiplies every period alike: still commensurate
    assert drifting_links(pair, {j: p * 1.03 for j, p in held.items()}) == {}


def test_advice_says_which_held_jobs_drift_and_where():
    """The reviewer's case: vgg and huge share s1 and both stay held, at 0.186 s and
    0.685 s (s1's circle repeats them 7 and 8 times): each one's reason names the
    other, the link and both periods.  Which jobs are held and their periods are
    unchanged; the declined jobs' reasons are as before."""
    lib = library()
    jobs = {
        j: dataclasses.replace(lib[name], job_id=j)
        for j, name in [("vgg", "vgg16"), ("rn", "resnet50"), ("big", "gpt2"),
                        ("one", "bert"), ("huge", "wideresnet101")]
    }  # fmt: skip
    links = {f"s{i}": 50e9 for i in range(6)}
    links |= {"rack0-up": 50e9, "rack1-up": 50e9, "rack2-up": 10e9}
    spine = ["rack0-up", "rack2-up"]
    cand = {
        "vgg": ["s0", "s1"],
        "rn": ["s2", "s3"],
        "big": [*spine, "s0", "s4", "s5"],
        "one": [],
        "huge": [*spine, "rack1-up", "s1", "s2", "s3", "s4", "s5"],
    }
    choice = choose_placement(jobs, links, [cand])
    assert choice.shift == {"vgg": True, "huge": True, "rn": False, "big": False, "one": False}
    periods = choice.agent_period_s
    assert periods["huge"] / periods["vgg"] > 3.0  # not 8:7
    reasons = choice.ranked[0].prediction.reasons
    for job, partner in (("vgg", "huge"), ("huge", "vgg")):
        why = reasons[job]
        assert f"drifts against {partner} on s1 " in why
        assert f"{periods[job]:.4g} s" in why and f"{periods[partner]:.4g} s" in why
        assert "MAX_PROPAGATED_STRETCH" in why and "does not last" in why
    # links where only one of them is held (s0: big declined; s2, s3: rn declined) drift
    # against no one
    assert "s0" not in reasons["vgg"] and "s2" not in reasons["huge"]
    for job in ("rn", "big", "one"):
        assert "drifts" not in reasons[job]


def test_advice_whose_periods_fit_gives_no_drift_reason():
    comm = 0.05
    a = JobProfile("a", 0.1, [Phase(0.05, comm, GBPS)])
    b = JobProfile("b", 0.1, [Phase(0.05, comm, GBPS)])
    advice = advise([Link("l", GBPS)], [a, b], [Candidate("c", {"a": ("l",), "b": ("l",)})])
    pred = advice.prediction
    assert pred.shift == {"a": True, "b": True}
    assert all("drifts" not in why for why in pred.reasons.values())


def test_a_job_is_named_against_the_partners_it_drifts_from_only():
    """Three held jobs on one link, two of them on one circle: each names only the job
    off its circle (a and b fit together; both drift against c, stretched by a second
    link)."""
    from cassini.advisor import _drift_reasons

    a, b = _job("a", 0.1, 0.1, 0.2 * GBPS), _job("b", 0.1, 0.1, 0.2 * GBPS)
    c, d = _job("c", 0.1, 0.5, GBPS), _job("d", 0.1, 0.9, GBPS)
    sols = {"l1": compatibility_score([a, b, c], GBPS), "l2": compatibility_score([c, d], GBPS)}
    held = held_periods_s({"a": a, "b": b, "c": c, "d": d}, sols.values())
    assert held["a"] == held["b"] != held["c"]
    reasons = _drift_reasons(sols, held)
    assert "drifts against c on l1" in reasons["a"] and "drifts against c on l1" in reasons["b"]
    assert "drifts against a, b on l1" in reasons["c"]


# -- the drift caveat where users read the advice: the CLI table and the service -------------

_SPINE = ["rack0-up", "rack2-up"]
#: the reviewer's case above: job -> (library model, the links it crosses)
_DRIFT_CASE = {
    "vgg": ("vgg16", ["s0", "s1"]),
    "rn": ("resnet50", ["s2", "s3"]),
    "big": ("gpt2", [*_SPINE, "s0", "s4", "s5"]),
    "one": ("bert", []),
    "huge": ("wideresnet101", [*_SPINE, "rack1-up", "s1", "s2", "s3", "s4", "s5"]),
}
_DRIFT_CAPS = {f"s{i}": 50e9 for i in range(6)} | {
    "rack0-up": 50e9, "rack1-up": 50e9, "rack2-up": 10e9
}  # fmt: skip


def test_the_advice_table_says_which_shifted_jobs_drift(tmp_path, capsys):
    """A held job's caveat was only in the JSON's shift_reasons: the table printed
    reasons for jobs not shifted only."""
    from cassini.cli import main

    lib = library()
    request = {
        "links": [{"id": k, "capacity_bps": v} for k, v in _DRIFT_CAPS.items()],
        "jobs": [
            dataclasses.replace(lib[m], job_id=j).to_dict() for j, (m, _) in _DRIFT_CASE.items()
        ],
        "candidates": [{"id": "c", "paths": {j: p for j, (_, p) in _DRIFT_CASE.items()}}],
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    assert main(["advise", str(path), "--format", "table"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":")[0].strip(): line for line in out.splitlines() if line.startswith("  ")}
    for job, partner in (("vgg", "huge"), ("huge", "vgg")):
        assert lines[job].startswith(f"  {job}: shifted, but drifts against {partner} on s1 "), out
        assert "does not last" in lines[job]
    assert lines["rn"].startswith("  rn: not shifted: ") and "drifts" not in lines["rn"]


def test_the_service_answers_a_shifted_jobs_drift_as_its_reason():
    """GET time_shift of a held job answered reason null even when its interleaving
    drifts; a job whose periods fit still answers null."""
    from cassini.service.cluster import read_cluster
    from cassini.service.scoring import State
    from cassini.service.shifts import compute_shifts

    doc = {
        "links": [{"id": k, "capacity_bps": v} for k, v in _DRIFT_CAPS.items()],
        "nodes": {f"{j}-0": p for j, (_, p) in _DRIFT_CASE.items()}
        | {f"{j}-1": [] for j in _DRIFT_CASE},
        "jobs": [
            {"id": j, "model": m, "nodes": [f"{j}-0", f"{j}-1"]}
            for j, (m, _) in _DRIFT_CASE.items()
        ],
    }
    cluster, jobs = read_cluster(doc)
    got = compute_shifts(State(1, cluster, {j.job_id: j for j in jobs}))
    assert {j for j, s in got.items() if s.shift} == {"vgg", "huge"}
    for job, partner in (("vgg", "huge"), ("huge", "vgg")):
        assert got[job].reason.startswith(f"held, but drifts against {partner} on s1 "), got[job]
    # periods that fit: shifted, reason null
    fit = {
        "links": [{"id": "l", "capacity_bps": GBPS}],
        "nodes": {"a0": ["l"], "a1": [], "b0": ["l"], "b1": []},
        "jobs": [
            {"id": j, "iteration_time_s": 0.1, "nodes": [f"{j}0", f"{j}1"],
             "phases": [{"start_s": 0.05, "duration_s": 0.05, "rate_bps": GBPS}]}
            for j in ("a", "b")
        ],  # fmt: skip
    }
    cluster, jobs = read_cluster(fit)
    got = compute_shifts(State(1, cluster, {j.job_id: j for j in jobs}))
    assert all(s.shift and s.reason is None for s in got.values()), got


def test_the_advice_table_keeps_its_columns_for_long_ids(tmp_path, capsys):
    """A 19-character candidate id pushed its row's status out of line (ids were padded
    to 16 characters); long link and job ids did the same in the other two tables."""
    from cassini.cli import main

    half = [{"start_s": 0.05, "duration_s": 0.05, "rate_bps": GBPS}]
    long_job = "a-job-with-a-long-id-0"
    request = {
        "links": [{"id": "a-link-with-a-long-name", "capacity_bps": GBPS}],
        "jobs": [
            {"id": j, "iteration_time_s": 0.1, "phases": half} for j in ("b", long_job)
        ],
        "candidates": [
            {"id": cid, "paths": {"b": ["a-link-with-a-long-name"],
                                  long_job: ["a-link-with-a-long-name"]}}
            for cid in ("c", "unknown-job-omitted")
        ],  # fmt: skip
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    assert main(["advise", str(path), "--format", "table"]) == 0
    out = capsys.readouterr().out
    # three tables: candidates; "best placement" then links; jobs, then the notes
    cands, links, jobs = (b.splitlines() for b in out.split("\n\n"))
    tables = {
        "status": cands,  # left-aligned columns start at their heading...
        "jobs": links[1:],
        "time-shift (ms)": [r for r in jobs if not r.startswith(("  ", "predicted"))],
    }
    for heading, (header, *rows) in tables.items():
        assert rows, out
        at = header.index(heading)
        if heading == "time-shift (ms)":  # ...a right-aligned one ends at its heading's end
            at += len(heading) - 1
        for row in rows:
            if heading == "time-shift (ms)":
                assert row[at] != " " and row[at + 1] == " ", (header, row)
            else:
                assert row[at - 1] == " " and row[at] != " ", (header, row)


def test_the_score_table_keeps_its_column_for_long_job_ids(tmp_path, capsys):
    """The score table padded job ids to 20 characters: a 28-character id pushed its
    shift out of line (the advice tables' fix had missed it)."""
    from cassini.cli import main

    half = [{"start_s": 0.05, "duration_s": 0.05, "rate_bps": GBPS}]
    ids = ("b", "a-job-with-a-longer-id-of-28")
    request = {
        "capacity_bps": GBPS,
        "jobs": [{"id": j, "iteration_time_s": 0.1, "phases": half} for j in ids],
    }
    path = tmp_path / "link.json"
    path.write_text(json.dumps(request))
    assert main(["score", str(path), "--format", "table"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()[1:]
    end = header.index("time-shift (ms)") + len("time-shift (ms)") - 1
    assert len(rows) == 2
    for row in rows:  # right-aligned: every shift ends where its heading does
        assert row[end] != " " and row[end + 1 :] == "", (header, row)
