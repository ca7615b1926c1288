import networkx as nx
import pytest

from cassini.affinity import affinity_graph, check_consistency, time_shifts
from cassini.circle import compatibility_score, score_at_shifts
from cassini.profile import JobProfile, Phase

GBPS = 1e9


def chain_jobs():
    # Appendix A: j1 -l1- j2 -l2- j3, three different iteration times
    return {
        "j1": JobProfile("j1", 0.040, [Phase(0.000, 0.010, GBPS)]),
        "j2": JobProfile("j2", 0.060, [Phase(0.005, 0.010, GBPS)]),
        "j3": JobProfile("j3", 0.030, [Phase(0.002, 0.008, GBPS)]),
    }


def solve(paths, jobs, capacity=GBPS):
    on = {}
    for j, links in paths.items():
        for link in links:
            on.setdefault(link, []).append(jobs[j])
    return {link: compatibility_score(js, capacity) for link, js in on.items() if len(js) > 1}


def test_graph_is_bipartite_and_skips_unshared():
    paths = {"j1": ["l1"], "j2": ["l1", "l2"], "j3": ["l2", "l9"], "j4": ["l3"]}
    g = affinity_graph(paths)
    assert nx.is_bipartite(g)
    assert set(g) == {("job", "j1"), ("job", "j2"), ("job", "j3"), ("link", "l1"), ("link", "l2")}


def test_appendix_a_chain_follows_algorithm_1():
    jobs = chain_jobs()
    paths = {"j1": ["l1"], "j2": ["l1", "l2"], "j3": ["l2"]}
    sols = solve(paths, jobs)
    g = affinity_graph(paths, sols)
    assert g.edges[("job", "j2"), ("link", "l1")]["weight"] == sols["l1"].time_shifts_s["j2"]
    result = time_shifts(g, sols, jobs)
    assert result.loops == 0 and result.consistent
    w = {(j, link): s.time_shifts_s[j] for link, s in sols.items() for j in s.time_shifts_s}
    # reference job: j2 is on most links
    t2 = 0.0
    t1 = (t2 - w["j2", "l1"] + w["j1", "l1"]) % 0.040
    t3 = (t2 - w["j2", "l2"] + w["j3", "l2"]) % 0.030
    assert result.time_shifts_s == pytest.approx({"j1": t1, "j2": t2, "j3": t3})
    # every link keeps the score it was solved for
    assert result.link_scores == pytest.approx({k: s.score for k, s in sols.items()})


def test_eq6_check_detects_a_broken_shift():
    jobs = chain_jobs()
    paths = {"j1": ["l1"], "j2": ["l1", "l2"], "j3": ["l2"]}
    sols = solve(paths, jobs)
    g = affinity_graph(paths, sols)
    good = time_shifts(g, sols, jobs).time_shifts_s
    problems, _ = check_consistency(g, sols, good, jobs)
    assert problems == []
    # moving j3 onto j2's phase (j2 at 0 sends during [5, 15) ms) loses score on l2
    bad = dict(good, j3=0.003)
    problems, scores = check_consistency(g, sols, bad, jobs)
    assert scores["l2"] < sols["l2"].score - 0.01
    assert len(problems) == 1 and "link l2" in problems[0]
    # moving it elsewhere breaks Eq. 6 but keeps score 1: still sound
    sol = sols["l2"]
    harmless = []
    for ms in range(5, 26):
        moved = dict(good, j3=(good["j3"] + ms / 1000) % 0.030)
        score, _ = score_at_shifts(
            [jobs[j] for j in sol.job_ids], sol.capacity_bps, moved, sol.unified, sol.n_angles
        )
        if score >= sol.score - 1e-9:
            harmless.append(moved)
    assert harmless, "l2 has slack: some move of j3 keeps its optimum"
    for moved in harmless:
        problems, scores = check_consistency(g, sols, moved, jobs)
        assert problems == [] and scores["l2"] == pytest.approx(sol.score)


def test_consistent_loop_is_accepted():
    # two jobs crossing the same two links (e.g. up- and downlink): a loop j1-l1-j2-l2-j1
    jobs = {
        "j1": JobProfile("j1", 0.1, [Phase(0.0, 0.05, GBPS)]),
        "j2": JobProfile("j2", 0.1, [Phase(0.0, 0.05, GBPS)]),
    }
    paths = {"j1": ["l1", "l2"], "j2": ["l1", "l2"]}
    sols = solve(paths, jobs)
    result = time_shifts(affinity_graph(paths, sols), sols, jobs)
    assert result.loops == 1
    assert result.consistent
    assert result.time_shifts_s["j2"] == pytest.approx(0.05)


def test_loop_keeping_every_optimal_score_is_accepted():
    # l1 carries j1, j2 and j3; l2 carries only j1 and j2.  l2 has many optimal rotations;
    # the loop is sound when the final shifts keep both links at their optimum.
    jobs = {
        "j1": JobProfile("j1", 0.1, [Phase(0.0, 0.03, GBPS)]),
        "j2": JobProfile("j2", 0.1, [Phase(0.0, 0.03, GBPS)]),
        "j3": JobProfile("j3", 0.1, [Phase(0.0, 0.03, GBPS)]),
    }
    paths = {"j1": ["l1", "l2"], "j2": ["l1", "l2"], "j3": ["l1"]}
    sols = solve(paths, jobs)
    result = time_shifts(affinity_graph(paths, sols), sols, jobs)
    assert result.loops == 1 and result.consistent
    assert result.link_scores["l1"] == pytest.approx(1.0)
    assert result.link_scores["l2"] == pytest.approx(1.0)


def test_inconsistent_loop_is_reported_and_repaired():
    # Hand-made per-link shifts that cannot hold together: on l1 j2 is 25 ms after j1,
    # on l2 it must be 50 ms after it, and only that placement scores 1 on l2.
    jobs = {
        "j1": JobProfile("j1", 0.1, [Phase(0.0, 0.025, GBPS)]),
        "j2": JobProfile("j2", 0.1, [Phase(0.0, 0.025, GBPS)]),
        "j3": JobProfile("j3", 0.1, [Phase(0.0, 0.050, GBPS)]),
    }
    paths = {"j1": ["l1", "l2"], "j2": ["l1", "l2"], "j3": ["l2"]}
    sols = solve(paths, jobs)
    from dataclasses import replace

    sols["l1"] = replace(sols["l1"], time_shifts_s={"j1": 0.0, "j2": 0.025})
    sols["l2"] = replace(sols["l2"], time_shifts_s={"j1": 0.0, "j2": 0.075, "j3": 0.025})
    graph = affinity_graph(paths, sols)
    plain = time_shifts(graph, sols, jobs, repair=False)
    assert not plain.consistent and not plain.repaired
    assert "loop" in plain.conflicts[0] and "j1" in plain.conflicts[0]
    # l1 only needs j1 and j2 apart: the repair moves j2 to where l2 wants it
    repaired = time_shifts(graph, sols, jobs)
    assert repaired.repaired and repaired.consistent
    assert repaired.time_shifts_s["j2"] == pytest.approx(0.075)
    assert sum(repaired.link_scores.values()) > sum(plain.link_scores.values()) + 0.1
