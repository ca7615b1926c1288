"""Rank candidate placements (CASSINI §4.2, Algorithm 2).

For each candidate: build the affinity graph, score every shared link with the
geometric abstraction, derive one time-shift per job with Algorithm 1 (repairing loops),
aggregate the link scores those shifts achieve (mean, as the paper; min on request) and
rank.  A loop that still costs a link score is handled by ``loops``: "reject" drops the
candidate with the reason (the paper drops every loop), "score" keeps it and ranks it by
the scores its shifts really achieve.  The same (link capacity, set of jobs) recurs across
candidates, so each distinct link problem is solved once per call; distinct problems run
in a process pool when there are enough of them to pay for it.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from cassini.affinity import affinity_graph, time_shifts
from cassini.circle import LinkSolution, compatibility_score, n_angles
from cassini.errors import InputError
from cassini.profile import JobProfile, profile_map

#: Distinct link problems above which ``workers=None`` scores them in a process pool.
PARALLEL_THRESHOLD = 256
#: Link solutions kept for reuse across calls (schedulers ask about the same job mixes).
LINK_CACHE_SIZE = 4096
_LINK_CACHE: OrderedDict[tuple, LinkSolution] = OrderedDict()


@dataclass(frozen=True)
class Link:
    """A network link: ``capacity_bps`` in bits per second."""

    link_id: str
    capacity_bps: float

    def __post_init__(self) -> None:
        if not (
            isinstance(self.capacity_bps, int | float)
            and math.isfinite(self.capacity_bps)
            and self.capacity_bps > 0
        ):
            raise InputError(
                "capacity_bps", f"must be a finite number > 0, got {self.capacity_bps!r}"
            )


@dataclass(frozen=True)
class Candidate:
    """A candidate placement: for each job, the ids of the links its traffic crosses.
    A job absent from ``paths`` crosses no link (e.g. all its workers share a server)."""

    candidate_id: str
    paths: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class CandidateResult:
    """How one candidate scored.  ``score`` aggregates ``link_scores`` (1.0 when no link is
    shared); ``status`` is "ok" or "rejected" with a ``reason``."""

    candidate_id: str
    status: str
    score: float | None
    min_link_score: float | None
    link_scores: dict[str, float]
    time_shifts_s: dict[str, float]
    reason: str | None = None
    loops: int = 0
    loop_loss: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.candidate_id,
            "status": self.status,
            "score": self.score,
            "min_link_score": self.min_link_score,
            "link_scores": self.link_scores,
            "time_shifts_s": self.time_shifts_s,
            "loops": self.loops,
            "loop_loss": self.loop_loss,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Advice:
    """Result of :func:`advise`: the best candidate (None when all were rejected), its
    per-job time-shifts in seconds, and every candidate ranked best first."""

    best: str | None
    time_shifts_s: dict[str, float]
    candidates: tuple[CandidateResult, ...]
    precision_deg: float
    aggregate: str
    loops: str = "reject"
    link_solutions: dict[str, LinkSolution] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "time_shifts_s": self.time_shifts_s,
            "precision_deg": self.precision_deg,
            "aggregate": self.aggregate,
            "loops": self.loops,
            "candidates": [c.to_dict() for c in self.candidates],
        }


def advise(
    links: Iterable[Link],
    jobs: Sequence[JobProfile] | Mapping[str, JobProfile],
    candidates: Iterable[Candidate],
    precision_deg: float = 5.0,
    aggregate: str = "mean",
    *,
    loops: str = "reject",
    workers: int | None = None,
    resolution_s: float = 1e-3,
    repair: bool = True,
) -> Advice:
    """Score and rank candidate placements; return the best with its time-shifts.

    Parameters
    ----------
    links : every link a path may name, with its capacity.
    jobs : the jobs' profiles.
    candidates : placements to compare, in the scheduler's order of preference (ties
        keep that order).
    precision_deg : angle step of the unified circle (5 degrees = 72 angles).
    aggregate : "mean" (paper) or "min" (worst link first); the other is the tie-breaker.
    loops : "reject" a candidate whose loops cost some link more than
        :data:`cassini.affinity.LOOP_TOLERANCE` of score even after repair, or "score" it
        by what its shifts achieve (better for large clusters, where most candidates
        have loops).
    workers : processes for scoring distinct link problems; None = automatic (a pool only
        above :data:`PARALLEL_THRESHOLD` problems), 1 = in this process.
    resolution_s : iteration times are quantised to this before taking LCMs.
    repair : refine the shifts of loopy affinity graphs (beyond the paper; costs time
        on large candidates).

    Returns
    -------
    Advice; ``best`` is None when every candidate was rejected.

    Raises
    ------
    InputError for unknown jobs or links in a path, duplicate ids, no candidates, bad
    precision or aggregate.
    """
    if aggregate not in ("mean", "min"):
        raise InputError("aggregate", f"must be 'mean' or 'min', got {aggregate!r}")
    if loops not in ("reject", "score"):
        raise InputError("loops", f"must be 'reject' or 'score', got {loops!r}")
    n_angles(precision_deg)  # validates
    link_map: dict[str, Link] = {}
    for link in links:
        if link.link_id in link_map:
            raise InputError("links", f"duplicate link id {link.link_id!r}")
        link_map[link.link_id] = link
    job_map = profile_map(jobs)
    candidates = list(candidates)
    if not candidates:
        raise InputError("candidates", "must not be empty")
    seen: set[str] = set()
    for i, cand in enumerate(candidates):
        if cand.candidate_id in seen:
            raise InputError(f"candidates[{i}].id", f"duplicate candidate id {cand.candidate_id!r}")
        seen.add(cand.candidate_id)
        _check_paths(cand, i, link_map, job_map)

    # distinct link problems across all candidates
    problems: dict[tuple[float, tuple[str, ...]], None] = {}
    for cand in candidates:
        for link, job_ids in _shared_links(cand).items():
            problems[(link_map[link].capacity_bps, job_ids)] = None
    solved = _solve_all(list(problems), job_map, precision_deg, resolution_s, workers)

    results, solutions_of = [], {}
    for cand in candidates:
        shared = _shared_links(cand)
        sols = {
            link: solved[(link_map[link].capacity_bps, job_ids)] for link, job_ids in shared.items()
        }
        solutions_of[cand.candidate_id] = sols
        results.append(_evaluate(cand, sols, job_map, loops, repair))

    def rank_key(item: tuple[int, CandidateResult]) -> tuple:
        i, r = item
        if r.status != "ok":
            return (1, 0.0, 0.0, i)
        first, second = (
            (r.score, r.min_link_score)
            if aggregate == "mean"
            else (
                r.min_link_score,
                r.score,
            )
        )
        return (0, -first, -second, i)

    ranked = tuple(r for _, r in sorted(enumerate(results), key=rank_key))
    best = ranked[0] if ranked[0].status == "ok" else None
    return Advice(
        best=best.candidate_id if best else None,
        time_shifts_s=dict(best.time_shifts_s) if best else {},
        candidates=ranked,
        precision_deg=float(precision_deg),
        aggregate=aggregate,
        loops=loops,
        link_solutions=solutions_of[best.candidate_id] if best else {},
    )


def _check_paths(
    cand: Candidate, index: int, link_map: Mapping[str, Link], job_map: Mapping[str, JobProfile]
) -> None:
    for job, path in cand.paths.items():
        field_name = f"candidates[{index}].paths.{job}"
        if job not in job_map:
            raise InputError(field_name, f"unknown job {job!r} (not in jobs)")
        for k, link in enumerate(path):
            if link not in link_map:
                raise InputError(f"{field_name}[{k}]", f"unknown link {link!r} (not in links)")


def _shared_links(cand: Candidate) -> dict[str, tuple[str, ...]]:
    """Link id -> sorted ids of the jobs crossing it, for links carrying 2+ jobs."""
    on: dict[str, set[str]] = {}
    for job, path in cand.paths.items():
        for link in path:
            on.setdefault(link, set()).add(job)
    return {link: tuple(sorted(js)) for link, js in sorted(on.items()) if len(js) > 1}


def _solve_one(
    args: tuple[float, tuple[JobProfile, ...], float, float],
) -> LinkSolution:
    capacity, profiles, precision_deg, resolution_s = args
    return compatibility_score(
        profiles, capacity, precision_deg=precision_deg, resolution_s=resolution_s
    )


def _solve_all(
    keys: list[tuple[float, tuple[str, ...]]],
    job_map: Mapping[str, JobProfile],
    precision_deg: float,
    resolution_s: float,
    workers: int | None,
) -> dict[tuple[float, tuple[str, ...]], LinkSolution]:
    """Solve each distinct link problem, reusing solutions of earlier calls: a problem
    is the link capacity and the jobs' profiles in id order, whatever the ids."""
    solved: dict[tuple[float, tuple[str, ...]], LinkSolution] = {}
    todo: list[tuple[tuple[float, tuple[str, ...]], tuple]] = []
    for cap, job_ids in keys:
        shape = (cap, precision_deg, resolution_s) + tuple(
            (job_map[j].iteration_time_s, job_map[j].phases) for j in job_ids
        )
        known = _LINK_CACHE.get(shape)
        if known is not None:
            _LINK_CACHE.move_to_end(shape)
            solved[(cap, job_ids)] = _renamed(known, job_ids)
        else:
            todo.append(((cap, job_ids), shape))
    tasks = [
        (cap, tuple(job_map[j] for j in job_ids), precision_deg, resolution_s)
        for (cap, job_ids), _ in todo
    ]
    if workers is None:
        workers = min(8, os.cpu_count() or 1) if len(tasks) >= PARALLEL_THRESHOLD else 1
    if workers > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            chunk = max(1, len(tasks) // (4 * workers))
            solutions = list(pool.map(_solve_one, tasks, chunksize=chunk))
    else:
        solutions = [_solve_one(t) for t in tasks]
    for (key, shape), sol in zip(todo, solutions, strict=True):
        solved[key] = sol
        _LINK_CACHE[shape] = sol
        if len(_LINK_CACHE) > LINK_CACHE_SIZE:
            _LINK_CACHE.popitem(last=False)
    return solved


def clear_link_cache() -> None:
    """Forget the link solutions kept from earlier calls (benchmarks time cold calls)."""
    _LINK_CACHE.clear()


def _renamed(sol: LinkSolution, job_ids: tuple[str, ...]) -> LinkSolution:
    """The same solution for other jobs with the same profiles (matched by position)."""
    if sol.job_ids == job_ids:
        return sol
    names = dict(zip(sol.job_ids, job_ids, strict=True))
    return replace(
        sol, time_shifts_s={names[j]: t for j, t in sol.time_shifts_s.items()}, job_ids=job_ids
    )


def _evaluate(
    cand: Candidate,
    sols: Mapping[str, LinkSolution],
    job_map: Mapping[str, JobProfile],
    loops: str,
    repair: bool = True,
) -> CandidateResult:
    graph = affinity_graph(cand.paths, sols)
    assignment = time_shifts(graph, sols, job_map, repair=repair)
    link_scores = assignment.link_scores
    shifts = {j: assignment.time_shifts_s.get(j, 0.0) for j in job_map}
    reason = "; ".join(assignment.conflicts) or None
    if reason and loops == "reject":
        return CandidateResult(
            cand.candidate_id,
            "rejected",
            None,
            None,
            link_scores,
            {},
            reason=reason,
            loops=assignment.loops,
            loop_loss=assignment.max_loss,
        )
    scores = list(link_scores.values())
    return CandidateResult(
        cand.candidate_id,
        "ok",
        float(sum(scores) / len(scores)) if scores else 1.0,
        float(min(scores)) if scores else 1.0,
        link_scores,
        shifts,
        reason=reason,
        loops=assignment.loops,
        loop_loss=assignment.max_loss,
    )
