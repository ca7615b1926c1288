"""The computations a worker process runs, one small frozen dataclass each: the HTTP
process builds a task from an already validated request and the worker calls its
:meth:`run` (nothing is validated twice).  ``prepared`` is the worker's copy of the
cluster state (:class:`cassini.service.scoring.Prepared`), None before the first."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cassini.advisor import Candidate, Link
from cassini.profile import JobProfile


class Task(Protocol):
    def run(self, prepared: Any) -> Any:
        """The answer, JSON-able (or the JSON bytes themselves)."""
        ...


@dataclass(frozen=True)
class AdviseTask:
    """``POST /v1/advise``: rank the candidates."""

    links: Sequence[Link]
    jobs: Sequence[JobProfile]
    candidates: Sequence[Candidate]
    options: dict[str, Any] = field(default_factory=dict)

    def run(self, prepared: Any) -> Any:
        from cassini.advisor import advise

        # workers=1: the service's parallelism is its pool of processes, one per request
        return advise(self.links, self.jobs, self.candidates, workers=1, **self.options).to_dict()


@dataclass(frozen=True)
class ScoreTask:
    """``POST /v1/score``: jobs sharing one link of ``capacity_bps`` (bits/s)."""

    jobs: Sequence[JobProfile]
    capacity_bps: float
    precision_deg: float = 5.0

    def run(self, prepared: Any) -> Any:
        from cassini.api import score_response
        from cassini.circle import compatibility_score

        sol = compatibility_score(self.jobs, self.capacity_bps, precision_deg=self.precision_deg)
        return score_response(sol)


@dataclass(frozen=True)
class PrioritizeTask:
    """The extender's prioritize verb; the answer is the ``HostPriorityList`` JSON bytes
    (the HTTP process only forwards them)."""

    pod: JobProfile
    nodes: Sequence[str]
    precision_deg: float

    def run(self, prepared: Any) -> Any:
        from cassini.service.errors import json_bytes
        from cassini.service.scoring import score_nodes

        scores = score_nodes(prepared, self.pod, self.nodes, self.precision_deg)
        return json_bytes([{"Host": s.node, "Score": s.extender_score} for s in scores])


@dataclass(frozen=True)
class FilterTask:
    """The extender's filter verb: per node (name, score, extender score, worst link, the
    jobs on it)."""

    pod: JobProfile
    nodes: Sequence[str]
    precision_deg: float

    def run(self, prepared: Any) -> Any:
        from cassini.service.scoring import score_nodes

        scores = score_nodes(prepared, self.pod, self.nodes, self.precision_deg)
        return [(s.node, s.score, s.extender_score, s.worst_link, s.worst_jobs) for s in scores]


@dataclass(frozen=True)
class ShiftsTask:
    """The running jobs' time-shifts on the current state."""

    precision_deg: float

    def run(self, prepared: Any) -> Any:
        from cassini.service.shifts import compute_shifts

        return compute_shifts(prepared.state, self.precision_deg)


@dataclass(frozen=True)
class SleepTask:
    """A computation that runs ``seconds`` (tests of the time limit)."""

    seconds: float

    def run(self, prepared: Any) -> Any:
        time.sleep(self.seconds)
        return None
