"""Rank candidate placements (CASSINI §4.2, Algorithm 2).

For each candidate: build the affinity graph, score every shared link with the
geometric abstraction, derive one time-shift per job with Algorithm 1 (repairing loops),
aggregate the link scores those shifts achieve (mean, as the paper; min on request) and
rank.  A link that one job crosses alone is scored too when that job's peak phase rate
exceeds the link's capacity (:func:`_scored_links`): its score is the same excess over
capacity, and the prediction slows the job there.  A loop that still costs a link score
is handled by ``loops``: "reject" drops the candidate with the reason (the paper drops
every loop), "score" keeps it and ranks it by the scores its shifts really achieve.  The
same (link capacity, set of jobs) recurs across candidates, so each distinct link problem
is solved once per call; distinct problems run in a process pool when there are enough
of them to pay for it.

Advice knows its cost (:mod:`cassini.predict`): for the best candidate (or every one) it
predicts each job's iteration time with the shifts (held by the agent to the period the
link's bytes require) and without (same start), and recommends no shift for a job whose
predicted gain is under a threshold, with the reason, unless its shift is what gives
another job its gain (:func:`predict_candidate`).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from cassini import schema
from cassini.affinity import affinity_graph, time_shifts
from cassini.agent import MAX_PERIOD_S, MIN_PERIOD_S
from cassini.circle import (
    LinkSolution,
    check_capacity,
    check_job_bounds,
    clear_demand_rows,
    compatibility_score,
    n_angles,
)
from cassini.errors import InputError
from cassini.files import MAX_WORKERS
from cassini.predict import (
    COMMENSURATE_RTOL,
    MAX_PROPAGATED_STRETCH,
    NotConverged,
    Slot,
    agent_periods_s,
    bytes_stretch,
    clear_cache,
    drifting_links,
    predict_iteration_times,
)
from cassini.profile import JobProfile
from cassini.schema import kind_of as _kind  # how every error names a wrong value
from cassini.shared_cache import SharedCache

#: Default shift threshold: a job is shifted only if its predicted gain is at least 2 %.
SHIFT_THRESHOLD = 0.02
#: the reason given for a job that shares no link: not a decline, nothing to interleave
NO_SHARED_LINK = "shares no link with another job"

#: Distinct link problems above which ``workers=None`` scores them in a process pool.
PARALLEL_THRESHOLD = 256
#: Link solutions kept for reuse across calls (schedulers ask about the same job mixes).
LINK_CACHE_SIZE = 4096
_LINK_CACHE: SharedCache[LinkSolution] = SharedCache(LINK_CACHE_SIZE)


@dataclass(frozen=True)
class Link:
    """A network link: ``capacity_bps`` in bits per second."""

    link_id: str
    capacity_bps: float

    def __post_init__(self) -> None:
        schema.number(self.capacity_bps, "capacity_bps", positive=True)  # the one check


@dataclass(frozen=True)
class Candidate:
    """A candidate placement: for each job, the ids of the links its traffic crosses.
    A job absent from ``paths`` crosses no link (e.g. all its workers share a server)."""

    candidate_id: str
    paths: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class Prediction:
    """What a candidate's shifts are predicted to cost and gain (:mod:`cassini.predict`).

    ``iteration_s[job]`` holds the predicted iteration time in seconds "shifted" (every
    job sharing a link held to its slot), "same_start" (every job free-running from 0) and
    "advised" (only the jobs with ``shift[job]`` true held); ``gain`` is the mean over the
    jobs sharing links of same_start / shifted (1.0 when none does); ``shift[job]`` says
    whether the job should apply its time-shift, ``reasons[job]`` why (or why not);
    ``agent_period_s[job]`` is the period the agent holds a shifted job to.  ``drifts[job]``
    is the caveat of a held job whose interleaving does not last (its period is not
    commensurate with a partner's; also the tail of its ``reasons`` entry)."""

    iteration_s: dict[str, dict[str, float]]
    gain: float
    shift: dict[str, bool]
    reasons: dict[str, str]
    agent_period_s: dict[str, float]
    threshold: float
    drifts: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "predicted_iteration_s": self.iteration_s,
            "predicted_gain": self.gain,
            "shift": self.shift,
            "shift_reasons": self.reasons,
            "agent_period_s": self.agent_period_s,
            "shift_threshold": self.threshold,
        }


@dataclass(frozen=True)
class CandidateResult:
    """How one candidate scored.  ``score`` aggregates ``link_scores`` (1.0 when no link is
    scored); ``status`` is "ok" or "rejected" with a ``reason``.  ``link_scores`` holds
    every shared link and every link one job crosses alone above its capacity (that
    link's own score: no shift changes it).  A score is at most 1 and has no lower bound:
    ``1 - mean excess / capacity``, below 0 where demand exceeds the link's capacity by
    more than the capacity on average."""

    candidate_id: str
    status: str
    score: float | None
    min_link_score: float | None
    link_scores: dict[str, float]
    time_shifts_s: dict[str, float]
    reason: str | None = None
    loops: int = 0
    loop_loss: float = 0.0
    prediction: Prediction | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
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
        if self.prediction is not None:
            out.update(self.prediction.to_dict())
        return out


@dataclass(frozen=True)
class Advice:
    """Result of :func:`advise`: the best candidate (None when all were rejected), its
    per-job time-shifts in seconds, and every candidate ranked best first.

    ``link_solutions`` are the best candidate's scored links (:func:`_scored_links`), in
    link id order: each shared link, and each link one job crosses alone at a peak rate
    above its capacity, as a :class:`LinkSolution` with that one job in ``job_ids``
    (its shift 0; it scores the excess over capacity).  Such a one-job link has nothing
    to interleave: it holds no agent period and does not make its job "sharing"."""

    best: str | None
    time_shifts_s: dict[str, float]
    candidates: tuple[CandidateResult, ...]
    precision_deg: float
    aggregate: str
    loops: str = "reject"
    link_solutions: dict[str, LinkSolution] = field(default_factory=dict, compare=False)

    @property
    def prediction(self) -> Prediction | None:
        """The best candidate's prediction (None without a best or a prediction)."""
        best = next((c for c in self.candidates if c.candidate_id == self.best), None)
        return best.prediction if best is not None else None

    @property
    def shift(self) -> dict[str, bool]:
        """Per job of the best candidate: apply its time-shift?  Without a prediction,
        every job that shares a link (the paper's advice)."""
        pred = self.prediction
        if pred is not None:
            return dict(pred.shift)
        sharing = {
            j for sol in self.link_solutions.values() if len(sol.job_ids) > 1 for j in sol.job_ids
        }
        return {j: j in sharing for j in self.time_shifts_s}

    def to_dict(self) -> dict[str, Any]:
        out = {
            "best": self.best,
            "time_shifts_s": self.time_shifts_s,
            "precision_deg": self.precision_deg,
            "aggregate": self.aggregate,
            "loops": self.loops,
            "candidates": [c.to_dict() for c in self.candidates],
        }
        pred = self.prediction
        if pred is not None:
            out["shift"] = pred.shift
            out["predicted_gain"] = pred.gain
        return out


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
    predict: str = "best",
    shift_threshold: float = SHIFT_THRESHOLD,
    agent_slack: float = 0.0,
) -> Advice:
    """Score and rank candidate placements; return the best with its time-shifts.

    Parameters
    ----------
    links : every link a path may name, as :class:`Link` (the plug-in takes mappings).
    jobs : the jobs' profiles: a sequence, or a mapping keyed by their job_ids.
    candidates : :class:`Candidate` placements, in the scheduler's order of preference.
    precision_deg : angle step of the unified circle (5 degrees = 72 angles).
    aggregate : "mean" (paper) or "min" (worst link first); the other is the tie-breaker.
    loops : "reject" a candidate whose loops cost some link more than
        :data:`cassini.affinity.LOOP_TOLERANCE` of score even after repair, or "score" it
        by what its shifts achieve (better for large clusters, where most candidates
        have loops).
    workers : processes for scoring distinct link problems (1..MAX_WORKERS); None =
        automatic (a pool only above :data:`PARALLEL_THRESHOLD` problems), 1 = in this
        process (:func:`pool_size`).
    resolution_s : iteration times are quantised to this before taking LCMs.
    repair : refine the shifts of loopy affinity graphs (beyond the paper; costs time
        on large candidates).
    predict : predict iteration times with and without the shifts for the "best"
        candidate (default), "all" accepted candidates, or "none".
    shift_threshold : a job whose predicted gain from shifting (same start / advised
        - 1) is under this is not shifted, unless its shift gives another job its gain
        (:func:`predict_candidate`).
    agent_slack : the agent's period margin for jitter (see
        :func:`cassini.predict.agent_period_s`), used in the prediction.

    Links scored: 2+ jobs, or one job above the capacity (:func:`_scored_links`).

    Returns Advice (``best`` None when every candidate was rejected); every time-shift
    in ``[0, iteration_time_s)`` of its job.  Raises InputError naming the argument
    (``links[2].id``, ``jobs[1]``, ``workers``): wrong kinds, unknown jobs or links in a
    path, duplicate ids, a jobs mapping's key not its profile's job_id, no candidates,
    bad options, numbers out of the circle's bounds (:func:`_link_map`, :func:`_job_map`).
    """
    _check_options(aggregate, loops, predict, shift_threshold, agent_slack)
    _check_counts(workers, resolution_s)
    n_angles(precision_deg)  # validates
    link_map = _link_map(links)
    job_map = _job_map(jobs)
    candidates = _checked_candidates(candidates, link_map, job_map)
    solutions_of = _link_solutions(
        candidates, link_map, job_map, precision_deg, resolution_s, workers
    )
    results = [
        _evaluate(cand, solutions_of[cand.candidate_id], job_map, loops, repair)
        for cand in candidates
    ]
    ranked = _ranked(results, aggregate)
    if predict != "none":
        capacity = {link_id: link.capacity_bps for link_id, link in link_map.items()}
        ranked = _with_predictions(
            ranked, predict, solutions_of, job_map, capacity, shift_threshold, agent_slack
        )
    best = ranked[0] if ranked[0].status == "ok" else None
    return Advice(
        best=best.candidate_id if best else None,
        time_shifts_s=dict(best.time_shifts_s) if best else {},
        candidates=ranked,
        precision_deg=float(precision_deg),
        aggregate=aggregate,
        loops=loops,
        link_solutions=_handed_out(solutions_of[best.candidate_id]) if best else {},
    )


def _with_predictions(
    ranked: tuple[CandidateResult, ...],
    predict: str,
    solutions_of: Mapping[str, Mapping[str, LinkSolution]],
    job_map: Mapping[str, JobProfile],
    capacity_bps: Mapping[str, float],
    threshold: float,
    slack: float,
) -> tuple[CandidateResult, ...]:
    """The ranked candidates with their predictions: the best one's (``predict`` "best")
    or every accepted one's ("all").  A prediction whose link simulation does not finish
    (:class:`cassini.predict.NotConverged`: iteration times too far apart) is left out,
    the candidate's ``reason`` saying so; its shifts and scores stand."""

    def predicted(r: CandidateResult) -> CandidateResult:
        try:
            prediction = predict_candidate(
                r.time_shifts_s,
                solutions_of[r.candidate_id],
                job_map,
                capacity_bps,
                threshold=threshold,
                slack=slack,
            )
        except NotConverged as e:
            return replace(r, reason=f"no prediction: {e}")
        return replace(r, prediction=prediction)

    return tuple(
        predicted(r) if (predict == "all" or i == 0) and r.status == "ok" else r
        for i, r in enumerate(ranked)
    )


def _check_options(
    aggregate: str, loops: str, predict: str, shift_threshold: float, agent_slack: float
) -> None:
    """:func:`advise`'s modes and numbers, each error naming its parameter."""
    if aggregate not in ("mean", "min"):
        raise InputError("aggregate", f"must be 'mean' or 'min', got {aggregate!r}")
    if loops not in ("reject", "score"):
        raise InputError("loops", f"must be 'reject' or 'score', got {loops!r}")
    if predict not in ("best", "all", "none"):
        raise InputError("predict", f"must be 'best', 'all' or 'none', got {predict!r}")
    schema.number(shift_threshold, "shift_threshold", non_negative=True)
    schema.number(agent_slack, "agent_slack", non_negative=True)


def _check_counts(workers: int | None, resolution_s: float) -> None:
    """``workers`` (None, or 1 to MAX_WORKERS as the command lines take) and
    ``resolution_s``, checked whether or not a link is shared."""
    if workers is not None and (
        isinstance(workers, bool)
        or not isinstance(workers, numbers.Integral)
        or not 1 <= workers <= MAX_WORKERS
    ):
        raise InputError(
            "workers", f"must be None or an integer in 1..{MAX_WORKERS}, got {_kind(workers)}"
        )
    schema.number(resolution_s, "resolution_s", positive=True)


def _check_period(seconds: float, field: str) -> None:
    """An iteration time (or held period) the unified circle's arithmetic can hold."""
    if not MIN_PERIOD_S <= seconds <= MAX_PERIOD_S:
        raise InputError(
            field,
            f"must be in [{MIN_PERIOD_S:g}, {MAX_PERIOD_S:g}] seconds (a microsecond to a "
            f"week), got {seconds:g}",
        )


def _link_map(links: Iterable[Link]) -> dict[str, Link]:
    """The links by id, in the order given; a duplicate id, or a capacity under
    :data:`cassini.circle.MIN_CAPACITY_BPS`, is an error naming its index."""
    if isinstance(links, Mapping | str | bytes) or not isinstance(links, Iterable):
        raise InputError(
            "links",
            f"must be an iterable of cassini.advisor.Link, got {_kind(links)} "
            "(cassini.plugin.choose_placement takes a mapping link id -> capacity_bps)",
        )
    link_map: dict[str, Link] = {}
    for i, link in enumerate(links):
        if not isinstance(link, Link):
            raise InputError(f"links[{i}]", f"must be a cassini.advisor.Link, got {_kind(link)}")
        if link.link_id in link_map:
            raise InputError(f"links[{i}].id", f"duplicate link id {link.link_id!r}")
        check_capacity(link.capacity_bps, f"links[{i}].capacity_bps")
        link_map[link.link_id] = link
    return link_map


def _job_map(jobs: Sequence[JobProfile] | Mapping[str, JobProfile]) -> dict[str, JobProfile]:
    """The jobs by id, from a sequence (each id once) or a mapping (each key its profile's
    job_id), each iteration time in [:data:`cassini.agent.MIN_PERIOD_S`,
    :data:`cassini.agent.MAX_PERIOD_S`] seconds and no phase faster than
    :data:`cassini.agent.MAX_RATE_BPS`; errors name ``jobs[i]`` or ``jobs['key']``."""
    if isinstance(jobs, Mapping):
        items = [(f"jobs[{key!r}]", key, p) for key, p in jobs.items()]
    elif isinstance(jobs, str | bytes) or not isinstance(jobs, Iterable):
        raise InputError(
            "jobs",
            f"must be a sequence of JobProfile or a mapping job id -> JobProfile, "
            f"got {_kind(jobs)}",
        )
    else:
        items = [(f"jobs[{i}]", None, p) for i, p in enumerate(jobs)]
    job_map: dict[str, JobProfile] = {}
    for field_name, key, p in items:
        if not isinstance(p, JobProfile):
            raise InputError(field_name, f"must be a cassini.profile.JobProfile, got {_kind(p)}")
        if key is not None and key != p.job_id:
            raise InputError(field_name, f"key differs from the profile's job_id {p.job_id!r}")
        if p.job_id in job_map:
            raise InputError(f"{field_name}.id", f"duplicate job id {p.job_id!r}")
        check_job_bounds(p, field_name)  # the circle's own bounds, named as here
        job_map[p.job_id] = p
    return job_map


def _checked_candidates(
    candidates: Iterable[Candidate],
    link_map: Mapping[str, Link],
    job_map: Mapping[str, JobProfile],
) -> list[Candidate]:
    """The candidates as a list: at least one, each a :class:`Candidate`, ids unique,
    paths naming known jobs and links."""
    if isinstance(candidates, Mapping | str | bytes | Candidate) or not isinstance(
        candidates, Iterable
    ):
        raise InputError(
            "candidates",
            f"must be an iterable of cassini.advisor.Candidate, got {_kind(candidates)}",
        )
    candidates = list(candidates)
    if not candidates:
        raise InputError("candidates", "must not be empty")
    seen: set[str] = set()
    for i, cand in enumerate(candidates):
        if not isinstance(cand, Candidate):
            raise InputError(
                f"candidates[{i}]",
                f"must be a cassini.advisor.Candidate, got {_kind(cand)} "
                "(cassini.plugin.choose_placement takes mappings job id -> link ids)",
            )
        if cand.candidate_id in seen:
            raise InputError(f"candidates[{i}].id", f"duplicate candidate id {cand.candidate_id!r}")
        seen.add(cand.candidate_id)
        _check_paths(cand, i, link_map, job_map)
    return candidates


def _link_solutions(
    candidates: Sequence[Candidate],
    link_map: Mapping[str, Link],
    job_map: Mapping[str, JobProfile],
    precision_deg: float,
    resolution_s: float,
    workers: int | None,
) -> dict[str, dict[str, LinkSolution]]:
    """Candidate id -> scored link id (:func:`_scored_links`) -> its solution; each
    distinct link problem (capacity, jobs) across all candidates is solved once."""
    capacity = {link_id: link.capacity_bps for link_id, link in link_map.items()}
    peak: dict[str, float] = {}  # the jobs found alone on a link, by id
    shared = [_scored_links(cand, capacity, job_map, peak) for cand in candidates]
    problems: dict[tuple[float, tuple[str, ...]], None] = {}
    for links in shared:
        for link, job_ids in links.items():
            problems[(link_map[link].capacity_bps, job_ids)] = None
    solved = _solve_all(list(problems), job_map, precision_deg, resolution_s, workers)
    return {
        cand.candidate_id: {
            link: solved[(link_map[link].capacity_bps, job_ids)] for link, job_ids in links.items()
        }
        for cand, links in zip(candidates, shared, strict=True)
    }


#: Scores that differ by less than this rank as equal, the scheduler's order deciding: a
#: perfectly interleaved shared link scores 1 - 6e-16 where its sums round up, and an
#: unshared one exactly 1; a grid step moves a score by ~1e-3.
SCORE_TIE = 1e-9


def _ranked(results: list[CandidateResult], aggregate: str) -> tuple[CandidateResult, ...]:
    """Accepted candidates first, by ``aggregate`` score then the other (each to
    :data:`SCORE_TIE`), ties in the scheduler's order; rejected ones last, in that order."""

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
        return (0, -round(first / SCORE_TIE), -round(second / SCORE_TIE), i)

    return tuple(r for _, r in sorted(enumerate(results), key=rank_key))


def _check_paths(
    cand: Candidate, index: int, link_map: Mapping[str, Link], job_map: Mapping[str, JobProfile]
) -> None:
    if not isinstance(cand.paths, Mapping):
        raise InputError(
            f"candidates[{index}].paths",
            f"must be a mapping job id -> link ids, got {_kind(cand.paths)}",
        )
    for job, path in cand.paths.items():
        field_name = f"candidates[{index}].paths.{job}"
        if job not in job_map:
            raise InputError(field_name, f"unknown job {job!r} (not in jobs)")
        if isinstance(path, str | bytes) or not isinstance(path, Collection):
            raise InputError(field_name, f"must be a sequence of link ids, got {_kind(path)}")
        for k, link in enumerate(path):
            if link not in link_map:
                raise InputError(f"{field_name}[{k}]", f"unknown link {link!r} (not in links)")


def _jobs_on(cand: Candidate) -> dict[str, set[str]]:
    """Link id -> the jobs crossing it."""
    on: dict[str, set[str]] = {}
    for job, path in cand.paths.items():
        for link in path:
            on.setdefault(link, set()).add(job)
    return on


def _scored_links(
    cand: Candidate,
    capacity_bps: Mapping[str, float],
    job_map: Mapping[str, JobProfile],
    peak_bps: dict[str, float] | None = None,
) -> dict[str, tuple[str, ...]]:
    """The links a candidate is scored on, in link id order: link id -> sorted ids of the
    jobs crossing it, for links carrying 2+ jobs and for links one job crosses alone at
    a peak phase rate above the capacity (``peak_rate_bps > capacity_bps``; a lone job
    within the capacity is left out: nothing slows it).
    ``peak_bps`` keeps the jobs' peak rates across candidates."""
    peak = peak_bps if peak_bps is not None else {}
    out: dict[str, tuple[str, ...]] = {}
    for link, js in sorted(_jobs_on(cand).items()):
        if len(js) > 1:
            out[link] = tuple(sorted(js))
            continue
        (job,) = js
        rate = peak.get(job)
        if rate is None:
            rate = peak[job] = job_map[job].peak_rate_bps
        if rate > capacity_bps[link]:
            out[link] = (job,)
    return out


def _solve_one(
    args: tuple[float, tuple[JobProfile, ...], float, float],
) -> LinkSolution:
    capacity, profiles, precision_deg, resolution_s = args
    return compatibility_score(
        profiles, capacity, precision_deg=precision_deg, resolution_s=resolution_s
    )


def pool_size(workers: int, tasks: int) -> int:
    """Processes to start for ``tasks`` tasks when ``workers`` are asked for: never more
    than the tasks nor :data:`cassini.files.MAX_WORKERS` (which command lines refuse to
    exceed), at least 1 (1: run them in this process)."""
    return max(1, min(int(workers), tasks, MAX_WORKERS))


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
            solved[(cap, job_ids)] = _renamed(known, job_ids)
        else:
            todo.append(((cap, job_ids), shape))
    tasks = [
        (cap, tuple(job_map[j] for j in job_ids), precision_deg, resolution_s)
        for (cap, job_ids), _ in todo
    ]
    if workers is None:
        workers = min(8, os.cpu_count() or 1) if len(tasks) >= PARALLEL_THRESHOLD else 1
    workers = pool_size(workers, len(tasks))  # 40 asked for 6 problems: 6 processes
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            chunk = max(1, len(tasks) // (4 * workers))
            solutions = list(pool.map(_solve_one, tasks, chunksize=chunk))
    else:
        solutions = [_solve_one(t) for t in tasks]
    for (key, _), sol in zip(todo, solutions, strict=True):
        _freeze(sol)
        solved[key] = sol
    _LINK_CACHE.put_all((shape, sol) for (_, shape), sol in zip(todo, solutions, strict=True))
    return solved


def _freeze(sol: LinkSolution) -> None:
    """Make a solution's arrays read-only before the cache keeps it: every advice that
    reuses it shares them (its dict is copied out by :func:`_handed_out`)."""
    sol.demand_bps.setflags(write=False)
    if sol.vectors is not None:
        sol.vectors.setflags(write=False)


def clear_link_cache() -> None:
    """Forget the link solutions and predictions kept from earlier calls (benchmarks time
    cold calls)."""
    _LINK_CACHE.clear()
    clear_demand_rows()
    clear_cache()


def predict_candidate(
    time_shifts_s: Mapping[str, float],
    solutions: Mapping[str, LinkSolution],
    job_map: Mapping[str, JobProfile],
    capacity_bps: Mapping[str, float],
    *,
    threshold: float = SHIFT_THRESHOLD,
    slack: float = 0.0,
) -> Prediction:
    """Predict a candidate's iteration times shifted and at the same start, and decide
    per job whether shifting pays.

    Shifted: every job sharing a link held by the agent at ``time_shifts_s`` stretched to
    its :func:`cassini.predict.agent_period_s` ("shifted": all held).  Then the decline
    rule: among the held jobs whose gain (same start / advised) is under
    ``1 + threshold``, those with no partner (a job on one of their links) that gains,
    and those their own shift slows (advised slower than their same start), are declined
    (run free from 0) together: declining a job changes only its links' jobs.  Then, one
    at a time, lowest gain first, a job under the threshold is declined unless its shift
    is what gives another job its gain, that is unless predicting without it takes a
    held job's gain under the threshold.  A job left without a held partner is declined
    with the others (nothing to interleave with).  After each decline the rest are
    predicted again ("advised"), until no job is declined.  Each reason
    quotes the figure it used: "shifted (all held)" before any decline, else the held
    set's with the declined jobs named.

    Every link of ``solutions`` is simulated, a link with one job (crossed alone above
    its capacity) included: it slows its job.  Only the links with 2+ jobs share: they
    make a job held, give its agent period and count in ``gain``; a job on one-job links
    only runs free ("shares no link with another job")."""
    return _predict_candidate(time_shifts_s, solutions, job_map, capacity_bps, threshold, slack)


def _predict_candidate(
    time_shifts_s: Mapping[str, float],
    solutions: Mapping[str, LinkSolution],
    job_map: Mapping[str, JobProfile],
    capacity_bps: Mapping[str, float],
    threshold: float,
    slack: float,
) -> Prediction:
    links = {link: (capacity_bps[link], sol.job_ids) for link, sol in solutions.items()}
    pairs = {link: sol for link, sol in solutions.items() if len(sol.job_ids) > 1}
    shared = sorted({j for sol in pairs.values() for j in sol.job_ids})
    every = agent_periods_s(job_map, pairs.values(), slack=slack)
    periods = {j: every[j] for j in shared if j in every}

    stretch = _bytes_stretches(periods, pairs, job_map)

    def predicted(held: Iterable[str]) -> dict[str, float]:
        slots = {
            j: Slot(
                time_shifts_s.get(j, 0.0) * periods[j] / job_map[j].iteration_time_s, periods[j]
            )
            for j in held
        }
        return predict_iteration_times(job_map, links, slots)

    same = predict_iteration_times(job_map, links)
    shifted = predicted(shared)
    rule = _DeclineRule(same, predicted, _link_partners(shared, pairs), stretch, threshold)
    held, advised, reasons = rule.apply(shared, shifted)
    iteration_s, shift = {}, {}
    for j in job_map:
        iteration_s[j] = {"shifted": shifted[j], "same_start": same[j], "advised": advised[j]}
        shift[j] = j in held
        if j not in periods:
            reasons[j] = NO_SHARED_LINK
    drifts = _drift_reasons(pairs, {j: periods[j] for j in held})
    for j, why in drifts.items():
        reasons[j] = f"{reasons[j]}; {why}"
    gain = float(sum(same[j] / shifted[j] for j in shared) / len(shared)) if shared else 1.0
    return Prediction(
        iteration_s=iteration_s,
        gain=gain,
        shift=shift,
        reasons=dict(sorted(reasons.items())),
        agent_period_s={j: periods[j] for j in sorted(held)},
        threshold=threshold,
        drifts=dict(sorted(drifts.items())),
    )


def _drift_reasons(
    solutions: Mapping[str, LinkSolution], periods: Mapping[str, float]
) -> dict[str, str]:
    """Why a held job's interleaving does not last, for each held job (``periods``: the
    held jobs' agent periods, seconds) on a link where
    :func:`cassini.predict.drifting_links` finds the held jobs' periods not in the ratio
    of the link's circle: the partners, the link, their periods and repeats."""
    clauses: dict[str, list[str]] = {}
    for link, jobs in drifting_links(solutions, periods).items():
        reps = dict(zip(solutions[link].job_ids, solutions[link].unified.repeats, strict=True))
        circle = {k: periods[k] * reps[k] for k in jobs}  # equal for jobs that fit together
        for j in jobs:
            others = [
                k
                for k in jobs
                if k != j
                and max(circle[k], circle[j]) > min(circle[k], circle[j]) * (1 + COMMENSURATE_RTOL)
            ]
            if not others:  # it fits with every partner here (they drift among themselves)
                continue
            figures = ", ".join(f"{k} {periods[k]:.4g} s" for k in (j, *others))
            times = ", ".join(str(reps[k]) for k in (j, *others))
            clauses.setdefault(j, []).append(
                f"against {', '.join(others)} on {link} (periods {figures}; "
                f"{link}'s circle repeats them {times} times)"
            )
    return {
        j: f"held, but drifts {' and '.join(parts)}: not commensurate, the stretch that "
        f"would make them so exceeds MAX_PROPAGATED_STRETCH ({MAX_PROPAGATED_STRETCH:.0%}), "
        "so the interleaving there does not last"
        for j, parts in clauses.items()
    }


#: a job whose advised iteration time exceeds its same start's by more than this share
#: is slowed by its own shift (below it: float noise of equal times)
SLOWED = 1e-9


@dataclass(frozen=True)
class _DeclineRule:
    """The decline rule of :func:`predict_candidate`: ``same`` (same-start iteration
    times), ``predicted(held)`` (iteration times with those jobs held), each job's link
    ``partners`` and bytes ``stretch``, and the gain ``threshold``."""

    same: Mapping[str, float]
    predicted: Callable[[Iterable[str]], dict[str, float]]
    partners: Mapping[str, set[str]]
    stretch: Mapping[str, float]
    threshold: float

    def gains(self, job: str, times: Mapping[str, float]) -> bool:
        return self.same[job] >= times[job] * (1.0 + self.threshold)

    def apply(
        self, shared: list[str], shifted: dict[str, float]
    ) -> tuple[set[str], dict[str, float], dict[str, str]]:
        """The jobs held, their advised iteration times and every shared job's reason."""
        same, gains = self.same, self.gains
        held, advised, reasons = set(shared), shifted, {}
        declined: list[str] = []
        kept_for: dict[str, list[str]] = {}  # a job held for others: whose gain it keeps
        while True:
            gaining = sorted(j for j in held if gains(j, advised))
            under = sorted(held - set(gaining), key=lambda j: (same[j] / advised[j], j))
            # declining a job can take only its partners' gain: those with no partner that
            # gains, and those their own shift slows, go together (one prediction)
            free = [
                j for j in under
                if not self.partners[j] & set(gaining) or advised[j] > same[j] * (1.0 + SLOWED)
            ]  # fmt: skip
            if free:
                held, advised = self.decline(free, held, advised, declined, reasons)
                continue
            for j in under:
                rest = held - {j}
                alone = sorted(k for k in rest if not self.partners[k] & rest)
                trial = self.predicted(rest - set(alone))
                taken = [k for k in gaining if k in alone or not gains(k, trial)]
                if taken:  # (a job its shift slows is in `free`)
                    kept_for[j] = taken
                    continue
                held, advised = self.decline([j], held, advised, declined, reasons, trial)
                break
            else:
                break
        figure = _figure(declined, final=True)
        for j in held:
            numbers = (
                f"predicted {_ms(advised[j])} {figure} vs {_ms(same[j])} at the same start "
                f"({same[j] / advised[j] - 1:+.1%})"
            )
            reasons[j] = (
                numbers
                if gains(j, advised)
                else f"held for {', '.join(kept_for[j])}: declining it would take their gain "
                f"under {self.threshold:.0%} ({numbers})"
            )
        return held, advised, reasons

    def decline(
        self,
        jobs: list[str],
        held: set[str],
        advised: dict[str, float],
        declined: list[str],
        reasons: dict[str, str],
        trial: dict[str, float] | None = None,
    ) -> tuple[set[str], dict[str, float]]:
        """Decline ``jobs`` and the held jobs they leave without a held partner (their
        reasons at the ``advised`` times, ``declined`` extended); the jobs still held and
        their predicted times (``trial``, when already predicted for exactly them)."""
        rest = held - set(jobs)
        alone = sorted(k for k in rest if not self.partners[k] & rest)
        if trial is None:
            trial = self.predicted(rest - set(alone))
        figure = _figure(declined, final=False)
        for k in (*jobs, *alone):
            reasons[k] = self.declined(k, advised, figure)
        declined += [*jobs, *alone]
        return rest - set(alone), trial

    def declined(self, job: str, advised: Mapping[str, float], figure: str) -> str:
        """Why ``job`` is declined at the ``advised`` times (``figure``: which they are)."""
        if self.gains(job, advised):  # its partners went: it has nothing to interleave with
            return (
                "no other job on its links is shifted: nothing to interleave with "
                f"(predicted {_ms(advised[job])} {figure} vs {_ms(self.same[job])} at "
                "the same start)"
            )
        return _decline_reason(
            self.stretch[job], advised[job], self.same[job], self.threshold, figure
        )


def _figure(declined: Sequence[str], *, final: bool) -> str:
    """Which predicted iteration time a reason quotes: all held, or (after declines) the
    held set's, which is the "advised" figure once no more job is declined."""
    if not declined:
        return "shifted (all held)"
    names = ", ".join(sorted(declined))
    return f"{'advised' if final else 'held'} ({names} not shifted)"


def _bytes_stretches(
    jobs: Iterable[str], solutions: Mapping[str, LinkSolution], job_map: Mapping[str, JobProfile]
) -> dict[str, float]:
    """Per job: the largest bytes stretch (:func:`cassini.predict.bytes_stretch`) of the
    links it shares."""
    stretch_of: dict[str, list[float]] = {}
    for sol in solutions.values():  # each link's stretch once, not once per job on it
        stretch = bytes_stretch((job_map[k] for k in sol.job_ids), sol.capacity_bps)
        for k in sol.job_ids:
            stretch_of.setdefault(k, []).append(stretch)
    return {j: max(stretch_of[j]) for j in jobs}


def _link_partners(
    jobs: Iterable[str], solutions: Mapping[str, LinkSolution]
) -> dict[str, set[str]]:
    """Per job: the other jobs sharing one of its links."""
    partners: dict[str, set[str]] = {}
    for sol in solutions.values():
        for k in sol.job_ids:
            partners.setdefault(k, set()).update(sol.job_ids)
    return {j: partners.get(j, set()) - {j} for j in jobs}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _decline_reason(
    stretch: float, advised_s: float, same_s: float, threshold: float, figure: str
) -> str:
    """Why a job is advised not to shift (``stretch``: the bytes stretch of its links;
    ``figure``: which prediction ``advised_s`` is)."""
    numbers = f"predicted {_ms(advised_s)} {figure} vs {_ms(same_s)} at the same start"
    if stretch > 1.0 and advised_s >= same_s:
        return (
            f"the period its links' bytes require (x{stretch:.3f}) costs more than the "
            f"contention shifting removes: {numbers}"
        )
    return f"predicted gain {same_s / advised_s - 1:+.1%} is under {threshold:.0%}: {numbers}"


def _wrapped(shift_s: float, job: JobProfile) -> float:
    """``shift_s`` in ``[0, iteration_time_s)``: a shift that rounding (or ``%`` of a tiny
    negative) brought to the iteration time is 0, the same point of the job's circle."""
    if 0.0 <= shift_s < job.iteration_time_s:
        return shift_s
    shift_s %= job.iteration_time_s
    return shift_s if shift_s < job.iteration_time_s else 0.0


def _renamed(sol: LinkSolution, job_ids: tuple[str, ...]) -> LinkSolution:
    """The same solution for other jobs with the same profiles (matched by position)."""
    if sol.job_ids == job_ids:
        return sol
    names = dict(zip(sol.job_ids, job_ids, strict=True))
    return replace(
        sol, time_shifts_s={names[j]: t for j, t in sol.time_shifts_s.items()}, job_ids=job_ids
    )


def _handed_out(solutions: Mapping[str, LinkSolution]) -> dict[str, LinkSolution]:
    """The solutions an advice hands its caller: each a copy with its own
    ``time_shifts_s`` (its arrays shared and read-only, :func:`_freeze`), so that a caller
    changing them changes neither the kept solutions (:data:`_LINK_CACHE`) nor a later
    advice.  Inside a call the kept ones are read as they are."""
    return {link: sol.own_copy() for link, sol in solutions.items()}


def _evaluate(
    cand: Candidate,
    sols: Mapping[str, LinkSolution],
    job_map: Mapping[str, JobProfile],
    loops: str,
    repair: bool = True,
) -> CandidateResult:
    graph = affinity_graph(cand.paths, sols)  # links with 2+ jobs only
    assignment = time_shifts(graph, sols, job_map, repair=repair)
    link_scores = assignment.link_scores
    # a link one job crosses alone (above its capacity) scores its own optimum: its
    # excess is the same at every shift of that job
    lone = {link: sol.score for link, sol in sols.items() if len(sol.job_ids) < 2}
    if lone:
        link_scores = dict(sorted({**link_scores, **lone}.items()))
    shifts = {j: _wrapped(assignment.time_shifts_s.get(j, 0.0), job_map[j]) for j in job_map}
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


def held_time_shifts(
    links: Iterable[Link],
    paths: Mapping[str, Sequence[str]],
    profiles: Mapping[str, JobProfile],
    periods: Mapping[str, float],
    precision_deg: float = 5.0,
) -> dict[str, float]:
    """Time-shifts (seconds) for the jobs a time-shift agent holds to ``periods``
    (seconds; e.g. :func:`cassini.predict.agent_periods_s`), solved on those periods.

    A held job's traffic repeats every ``periods[job]`` seconds, not every
    ``iteration_time_s``: its phases keep their offsets from the slot's start and the
    stretch is idle time at the end.  So the shifts come from the profiles padded to
    their periods (a circle of that circumference), not from the unpadded circle's shifts
    scaled up, which moves the phases against each other by the padding (measured on two
    VGG-11 DDP jobs: 3-6 % longer iterations, and the agent's slots missed).  Jobs not in
    ``periods`` keep their own profile; ``paths`` names every job's links.

    Raises InputError naming ``profiles['j']``, ``paths['j']`` or ``periods['j']``: a
    profile not under its job_id, a job without a path, a period for a job not in
    ``profiles``, or one that is not a number at least the job's iteration time (an agent
    never holds a job to a shorter period)."""
    _check_held(paths, profiles, periods)
    if not periods:
        return {}
    padded = [
        replace(p, iteration_time_s=periods[j]) if j in periods else p for j, p in profiles.items()
    ]
    cand = Candidate("held", {j: tuple(paths[j]) for j in profiles})
    advice = advise(links, padded, [cand], precision_deg, loops="score", workers=1, predict="none")
    return {j: float(advice.time_shifts_s.get(j, 0.0)) for j in periods}


#: a held period may fall this share under the job's iteration time (float rounding:
#: :func:`cassini.predict.agent_period_s` of an unstretched job can come back an ulp short)
PERIOD_ROUNDING = 1e-9


def _check_held(
    paths: Mapping[str, Sequence[str]],
    profiles: Mapping[str, JobProfile],
    periods: Mapping[str, float],
) -> None:
    """:func:`held_time_shifts`'s arguments, each error naming the job's entry."""
    for name, value in (("paths", paths), ("profiles", profiles), ("periods", periods)):
        if not isinstance(value, Mapping):
            raise InputError(name, f"must be a mapping keyed by job id, got {_kind(value)}")
    for j, p in profiles.items():
        if not isinstance(p, JobProfile):
            raise InputError(f"profiles[{j!r}]", f"must be a JobProfile, got {_kind(p)}")
        if p.job_id != j:
            raise InputError(
                f"profiles[{j!r}]", f"key differs from the profile's job_id {p.job_id!r}"
            )
        path = paths.get(j)
        if isinstance(path, str | bytes) or not isinstance(path, Collection):
            raise InputError(
                f"paths[{j!r}]",
                f"must be the job's link ids (an empty list for none), got {_kind(path)}",
            )
    for j, period in periods.items():
        field_name = f"periods[{j!r}]"
        if j not in profiles:
            raise InputError(field_name, f"unknown job {j!r} (not in profiles)")
        schema.number(period, field_name, positive=True)
        own = profiles[j].iteration_time_s
        if period < own * (1.0 - PERIOD_ROUNDING):
            raise InputError(
                field_name,
                f"must be at least the job's iteration time {own:g} s, got {period:g}",
            )
        _check_period(period, field_name)
