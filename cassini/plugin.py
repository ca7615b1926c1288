"""Plug-in API for cluster schedulers: CASSINI as the placement stage.

Research schedulers (Themis, Pollux, Gandiva, ...) decide *which* job gets GPUs and *how
many* in an allocation stage, then pick *where* in a placement stage, often among several
equally good server sets.  :func:`choose_placement` is that last step: hand it the
candidate placements, in the scheduler's order of preference, and it returns the one
whose jobs' communication phases interleave best on the links they share, with one
time-shift per job.  It never blocks a scheduler: when CASSINI rejects every candidate
the scheduler's first candidate comes back with zero shifts.

No I/O, no processes; everything it needs comes in as arguments, and its answer depends
on them only.  It runs in the calling process (the advisor's process pool is not used)
and solves each distinct (link capacity, set of jobs) problem once per call.  The link
solutions, demand rows and link simulations it computes are kept for later calls in
module-level caches that every thread shares; they are locked, so threads may call it at
once (predictions are made one at a time).  Time-shift convention: a job
shifted by ``t`` sends at time ``x`` what it sent at ``x - t`` unshifted.

Example: two jobs that each send half of every 100 ms iteration at the full 1 Gbps of a
link interleave perfectly when they share it; a third identical job cannot fit beside
them, so the candidate that keeps it apart wins:

>>> from cassini.plugin import choose_placement
>>> from cassini.profile import JobProfile, Phase
>>> half = [Phase(start_s=0.0, duration_s=0.05, rate_bps=1e9)]
>>> jobs = {j: JobProfile(j, 0.1, half) for j in ("a", "b", "c")}
>>> links = {"l1": 1e9, "l2": 1e9}
>>> together = {"a": ["l1"], "b": ["l1"], "c": ["l1"]}
>>> apart = {"a": ["l1"], "b": ["l1"], "c": ["l2"]}
>>> choice = choose_placement(jobs, links, [together, apart])
>>> choice.index, choice.candidate_id, round(choice.score, 3)
(1, '1', 1.0)
>>> {j: round(t, 3) for j, t in choice.time_shifts_s.items()}
{'a': 0.0, 'b': 0.05, 'c': 0.0}
>>> choice.shift, choice.agent_period_s
({'a': True, 'b': True, 'c': False}, {'a': 0.1, 'b': 0.1})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cassini import schema
from cassini.advisor import Advice, Candidate, CandidateResult, Link, advise
from cassini.errors import InputError
from cassini.predict import agent_periods_s
from cassini.profile import JobProfile

__all__ = ["PlacementChoice", "choose_placement"]


@dataclass(frozen=True)
class PlacementChoice:
    """The placement stage's answer.

    Attributes
    ----------
    index : int or None
        Position of the chosen candidate in the scheduler's ``candidates`` sequence.
        Always an int for a valid call (there is at least one candidate and the fallback
        picks one); typed ``int | None`` so that callers handle "no placement" explicitly.
    candidate_id : str or None
        Id of the chosen candidate: ``candidate_ids[index]``, or ``str(index)``.
    time_shifts_s : dict
        Job id -> seconds to delay that job's iterations, in ``[0, iteration_time_s)``,
        for every job in ``jobs`` (0.0 for a job sharing no link).  All zeros in the
        fallback.
    score : float or None
        The chosen candidate's aggregate compatibility score: at most 1, with no lower
        bound.  Each link scores ``1 - sum Excess / (|A| C)``, i.e. 1 minus its mean
        excess of demand over capacity divided by the capacity, so an overloaded link
        scores below 0 (a job alone sending 4x a link's capacity half the time: -0.5;
        4x all the time: -2.0).  1.0 when no link is scored (none shared, and no job
        alone on a link above its capacity); None in the fallback, when CASSINI
        accepted no candidate.
    ranked : tuple of :class:`cassini.advisor.CandidateResult`
        Every candidate as the advisor scored it, best first; rejected ones last with
        their ``reason``.  Their ``candidate_id`` is the id described above.
    shift : dict
        Job id -> whether its agent should hold it to its time-shift, for every job in
        ``jobs``: the chosen candidate's prediction (``ranked[0].prediction.shift``, with
        its reasons), or without one (``predict="none"``) every job sharing a link.
        False for a job sharing no link, and for all in the fallback.
    agent_period_s : dict
        Job id -> the period in seconds to hold it to, for each job whose ``shift`` is
        true: its iteration time stretched to what its links' bytes need
        (:func:`cassini.predict.agent_periods_s`).  Where it is longer than the
        iteration time, solve the shifts on these periods
        (:func:`cassini.advisor.held_time_shifts`), as ``cassini serve`` does.
    """

    index: int | None
    candidate_id: str | None
    time_shifts_s: dict[str, float]
    score: float | None
    ranked: tuple[CandidateResult, ...]
    shift: dict[str, bool] = field(default_factory=dict)
    agent_period_s: dict[str, float] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        """True when CASSINI accepted the chosen candidate; False for the fallback."""
        return self.score is not None


def choose_placement(
    jobs: Mapping[str, JobProfile],
    links: Mapping[str, float],
    candidates: Sequence[Mapping[str, Sequence[str]]],
    *,
    precision_deg: float = 5.0,
    aggregate: str = "mean",
    loops: str = "score",
    candidate_ids: Sequence[str] | None = None,
    repair: bool = True,
    predict: str = "best",
) -> PlacementChoice:
    """Choose among a scheduler's candidate placements the one whose jobs interleave best.

    Parameters
    ----------
    jobs : mapping
        Job id -> :class:`cassini.profile.JobProfile` (iteration time and communication
        phases), for every job a candidate may place: the running jobs as well as the
        ones being placed.  Each key must equal its profile's ``job_id``.
    links : mapping
        Link id -> capacity in bits per second, for every link a path may name.
    candidates : sequence of mappings
        The placements to compare, in the scheduler's order of preference (ties keep that
        order).  Each maps a job id to the ids of the links its traffic crosses; a job
        left out crosses no link (e.g. all its workers are on one server).
    precision_deg : float, optional (default 5.0)
        Angle step of CASSINI's unified circle in degrees (5 = 72 angles); smaller is
        more precise and slower.
    aggregate : {"mean", "min"}, optional (default "mean")
        Rank candidates by the mean of their link scores (the paper) or by the worst link.
    loops : {"score", "reject"}, optional (default "score")
        A candidate whose affinity graph has a loop that still costs score after repair
        is ranked by the scores its shifts achieve ("score", better for busy clusters
        where most candidates have loops) or rejected ("reject", as the paper).
    candidate_ids : sequence of str, optional
        Unique non-empty strings, one per candidate; by default candidate ``i`` is ``str(i)``.
    repair : bool, optional (default True)
        Refine the shifts of loopy affinity graphs (beyond the paper, which drops loops);
        off is faster on large candidates.
    predict : {"best", "all", "none"}, optional (default "best")
        Predict iteration times (shifted and at the same start) for the best candidate,
        every accepted one, or none (in ``ranked[i].prediction``); they never change the
        choice or the shifts, so a caller that does not read them saves their time.

    Returns
    -------
    choice : PlacementChoice
        ``index`` and ``candidate_id`` of the best candidate, its ``time_shifts_s``,
        ``shift``, ``agent_period_s`` and ``score``, and all candidates ``ranked``.

        Fallback: when every candidate is rejected (only with ``loops="reject"``),
        ``index`` is 0 (the scheduler's first), every ``time_shifts_s`` 0.0 and ``score``
        None, so the scheduler can always proceed; ``choice.accepted`` tells them apart.

    Raises
    ------
    InputError
        (a ``ValueError`` naming the offending ``field``) for a job that is not a
        ``JobProfile`` or not under its id, a non-positive or non-finite capacity, no
        candidates, a path that is not link ids or names an unknown job or link, bad
        ``candidate_ids`` (wrong length, duplicates, not strings) or options.

    The module docstring has the notes (process, time-shift convention) and an example.
    """
    job_map = _read_jobs(jobs)
    link_list = _read_links(links)
    cands = _read_candidates(candidates, candidate_ids)
    advice = advise(
        link_list,
        job_map,
        cands,
        precision_deg,
        aggregate,
        loops=loops,
        workers=1,
        repair=repair,
        predict=predict,
    )
    return _choice(advice, cands, job_map)


def _choice(
    advice: Advice, cands: Sequence[Candidate], job_map: Mapping[str, JobProfile]
) -> PlacementChoice:
    """The advice's best candidate, or the scheduler's first with zero shifts when every
    candidate was rejected."""
    if advice.best is None:
        return PlacementChoice(
            index=0,
            candidate_id=cands[0].candidate_id,
            time_shifts_s={j: 0.0 for j in job_map},
            score=None,
            ranked=advice.candidates,
            shift={j: False for j in job_map},
        )
    index_of = {c.candidate_id: i for i, c in enumerate(cands)}
    best = advice.candidates[0]
    shift = advice.shift
    if best.prediction is not None:
        periods = dict(best.prediction.agent_period_s)
    else:  # no prediction: every job sharing a link, at the periods its links need
        shared = [sol for sol in advice.link_solutions.values() if len(sol.job_ids) > 1]
        periods = agent_periods_s(job_map, shared, shift=shift)
    return PlacementChoice(
        index=index_of[best.candidate_id],
        candidate_id=best.candidate_id,
        time_shifts_s=dict(advice.time_shifts_s),
        score=best.score,
        ranked=advice.candidates,
        shift=shift,
        agent_period_s=periods,
    )


def _read_jobs(jobs: Mapping[str, JobProfile]) -> dict[str, JobProfile]:
    if not isinstance(jobs, Mapping):
        raise InputError(
            "jobs", f"must be a mapping job id -> JobProfile, got {schema.kind_of(jobs)}"
        )
    out: dict[str, JobProfile] = {}
    for key, profile in jobs.items():
        field = f"jobs[{key!r}]"
        if not isinstance(profile, JobProfile):
            raise InputError(field, f"must be a JobProfile, got {schema.kind_of(profile)}")
        if str(key) != profile.job_id:
            raise InputError(field, f"key differs from the profile's job_id {profile.job_id!r}")
        out[profile.job_id] = profile
    return out


def _read_links(links: Mapping[str, float]) -> list[Link]:
    if not isinstance(links, Mapping):
        raise InputError(
            "links", f"must be a mapping link id -> capacity_bps, got {schema.kind_of(links)}"
        )
    out = []
    for key, capacity in links.items():
        try:
            out.append(Link(str(key), capacity))
        except InputError as e:
            raise InputError(f"links[{key!r}]", e.problem) from None
    return out


def _read_candidates(
    candidates: Sequence[Mapping[str, Sequence[str]]], ids: Sequence[str] | None
) -> list[Candidate]:
    if isinstance(candidates, str | bytes | Mapping) or not isinstance(candidates, Sequence):
        raise InputError(
            "candidates",
            f"must be a sequence of mappings job id -> links, got {schema.kind_of(candidates)}",
        )
    if ids is None:
        ids = [str(i) for i in range(len(candidates))]
    elif isinstance(ids, str | bytes) or len(ids) != len(candidates):
        raise InputError(
            "candidate_ids", f"must give one id per candidate ({len(candidates)}), got {ids!r}"
        )
    out = []
    for i, (cid, paths) in enumerate(zip(ids, candidates, strict=True)):
        field = f"candidates[{i}]"
        if not isinstance(paths, Mapping):
            raise InputError(
                field, f"must be a mapping job id -> links, got {schema.kind_of(paths)}"
            )
        read: dict[str, tuple[str, ...]] = {}
        for job, path in paths.items():
            if isinstance(path, str | bytes) or not isinstance(path, Sequence):
                raise InputError(
                    f"{field}.paths.{job}",
                    f"must be a sequence of link ids, got {schema.kind_of(path)}",
                )
            read[str(job)] = tuple(str(link) for link in path)
        if not isinstance(cid, str):  # an int would come back as a str: refused, not renamed
            raise InputError(
                f"candidate_ids[{i}]", f"must be a string id, got {schema.kind_of(cid)}"
            )
        out.append(Candidate(schema.identifier(cid, f"candidate_ids[{i}]"), read))
    return out
