"""``advise(..., stop_at_perfect=True)``: the simulator's short cut, which stops scoring
candidates at the first one that every scored link gives score 1, answers what the full
call answers (best candidate and every time-shift), and solves nothing after it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_advisor_fast_paths import _placement

from cassini import advisor
from cassini.profile import JobProfile, Phase


def _half(job_id: str, start_s: float = 0.0) -> JobProfile:
    """A 100 ms job sending at 1 Gbit/s for half of it."""
    return JobProfile(job_id, 0.1, (Phase(start_s, 0.05, 1e9),))


def _three_links() -> tuple[list[advisor.Link], dict[str, JobProfile]]:
    """``busy`` carries two half-duty jobs already (a third cannot fit), ``pair`` one
    (the new job ``n`` interleaves with it perfectly), ``other`` one more."""
    links = [advisor.Link(k, 1e9) for k in ("busy", "pair", "other")]
    jobs = {j: _half(j) for j in ("x", "y", "a", "z", "n")}
    return links, jobs


def _candidates(new_links: list[str]) -> list[advisor.Candidate]:
    base = {"x": ("busy",), "y": ("busy",), "a": ("pair",), "z": ("other",)}
    return [advisor.Candidate(f"c{i}", base | {"n": (link,)}) for i, link in enumerate(new_links)]


def test_stops_at_the_first_perfect_candidate_and_solves_nothing_after_it(monkeypatch):
    links, jobs = _three_links()
    cands = _candidates(["busy", "pair", "other"])
    full = advisor.advise(links, jobs, cands, predict="none")
    advisor.clear_link_cache()
    solved: list[tuple[str, ...]] = []
    real = advisor.compatibility_score
    monkeypatch.setattr(
        advisor,
        "compatibility_score",
        lambda profiles, *a, **k: solved.append(tuple(p.job_id for p in profiles))
        or real(profiles, *a, **k),
    )
    short = advisor.advise(links, jobs, cands, predict="none", stop_at_perfect=True)
    assert full.best == short.best == "c1"
    assert short.time_shifts_s == full.time_shifts_s
    assert [r.candidate_id for r in full.candidates] == ["c1", "c2", "c0"]
    # c0 (scored before c1) is ranked and listed; c2 (after c1) neither solved nor listed
    assert [r.candidate_id for r in short.candidates] == ["c1", "c0"]
    assert {k: s.score for k, s in short.link_solutions.items()} == {
        k: s.score for k, s in full.link_solutions.items()
    }
    assert all(len(ids) == 2 or "x" in ids for ids in solved)  # no ("n", "z") problem
    assert ("a", "n") in solved and not any("z" in ids and "n" in ids for ids in solved)


def test_without_a_perfect_candidate_every_candidate_is_scored():
    links, jobs = _three_links()
    cands = _candidates(["busy", "other", "busy"])  # "other" holds z: n and z interleave
    jobs["z"] = JobProfile("z", 0.1, (Phase(0.0, 0.06, 1e9),))  # 60 %: never perfect
    full = advisor.advise(links, jobs, cands, predict="none")
    short = advisor.advise(links, jobs, cands, predict="none", stop_at_perfect=True)
    assert short.candidates == full.candidates
    assert short.best == full.best and short.time_shifts_s == full.time_shifts_s


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    aggregate=st.sampled_from(["mean", "min"]),
    loops=st.sampled_from(["reject", "score"]),
    repair=st.booleans(),
)
def test_the_best_and_its_shifts_are_those_of_the_full_call(seed, aggregate, loops, repair):
    """Library jobs packed on a small two-tier cluster (most placements loop); the last
    job's path varies over the candidates, some of them onto links no job uses."""
    jobs, paths, capacity = _placement(seed)
    links = [advisor.Link(k, v) for k, v in capacity.items()]
    rng = np.random.default_rng(seed)
    new = list(jobs)[-1]
    names = sorted(capacity)
    cands = [
        advisor.Candidate(
            f"c{i}", paths | {new: tuple(rng.choice(names, int(rng.integers(1, 4)), False))}
        )
        for i in range(5)
    ]
    options = dict(aggregate=aggregate, loops=loops, repair=repair, predict="none")
    full = advisor.advise(links, jobs, cands, **options)
    short = advisor.advise(links, jobs, cands, **options, stop_at_perfect=True)
    assert short.best == full.best
    assert short.time_shifts_s == full.time_shifts_s
    listed = {r.candidate_id for r in short.candidates}
    assert [r for r in full.candidates if r.candidate_id in listed] == list(short.candidates)


def test_the_flag_keeps_the_full_call_when_false():
    links, jobs = _three_links()
    cands = _candidates(["pair", "busy"])
    default = advisor.advise(links, jobs, cands, predict="none")
    assert [r.candidate_id for r in default.candidates] == ["c0", "c1"]


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
