"""JSON requests and responses of the advisor: the contract the CLI, the HTTP service and
a library caller share.  Readers are strict (unknown fields are errors) and raise
:class:`cassini.errors.InputError` naming the field.  They accept the bodies the
service accepts, its model's rules included (:mod:`cassini.service.models`: ids are
strings, a phase lasts at least a microsecond, a capacity is at most 1e15 bits/s, at
least one job).  ``cassini score``/``advise`` and the service validate a body by that
model first, so that their refusals have the same words; called from Python, a body that
breaks one of its rules is refused here, naming the field (in these readers' words).

score request   ``{"capacity_bps": C, "jobs": [JOB, ...]}``
score response  ``{"score", "time_shifts_s": {job: s}, "unified_period_s", ...}``
advise request  ``{"links": [{"id", "capacity_bps"}], "jobs": [JOB, ...],
                   "candidates": [{"id", "paths": {job: [link, ...]}}]}``
advise response ``{"best", "time_shifts_s", "candidates": [{"id", "status", "score",
                   "min_link_score", "link_scores", "reason", ...}]}``
JOB             ``{"id", "iteration_time_s", "phases": [{"start_s", "duration_s",
                   "rate_bps"}]}``
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from cassini import files, schema
from cassini.advisor import Advice, Candidate, Link, advise
from cassini.agent import MAX_PERIOD_S, MAX_RATE_BPS, MIN_PERIOD_S
from cassini.circle import MIN_CAPACITY_BPS, LinkSolution, compatibility_score
from cassini.errors import InputError
from cassini.profile import JobProfile, profiles_from_dicts


def parse_json(text: str) -> Any:
    """Parse JSON text; a syntax error becomes an InputError with line and column."""
    try:
        return files.loads_json(text)
    except json.JSONDecodeError as e:
        raise InputError(
            "input", f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    except ValueError as e:  # a key given twice; an integer too long to convert
        raise InputError("input", f"malformed JSON: {e}") from None


def score_request(obj: Any, *, precision_deg: float = 5.0) -> dict[str, Any]:
    """Answer a one-link score request."""
    obj = schema.require_object(obj, "")
    schema.check_fields(obj, "", ("capacity_bps", "jobs"))
    capacity = _capacity(obj["capacity_bps"], "capacity_bps")
    jobs = _jobs(obj["jobs"])
    return score_response(compatibility_score(jobs, capacity, precision_deg=precision_deg))


def score_response(sol: LinkSolution) -> dict[str, Any]:
    return {
        "score": sol.score,
        "time_shifts_s": sol.time_shifts_s,
        "unified_period_s": sol.unified_period_s,
        "period_exact": sol.unified.exact,
        "period_error": sol.unified.max_relative_error,
        "n_angles": sol.n_angles,
        "method": sol.method,
        "demand_bps": [float(x) for x in sol.demand_bps],
    }


def read_advise_request(obj: Any) -> tuple[list[Link], list, list[Candidate]]:
    """Read an advise request into (links, jobs, candidates)."""
    obj = schema.require_object(obj, "")
    schema.check_fields(obj, "", ("links", "jobs", "candidates"))
    links = []
    for i, raw in enumerate(schema.array(obj["links"], "links", non_empty=True)):
        f = f"links[{i}]"
        raw = schema.require_object(raw, f)
        schema.check_fields(raw, f, ("id", "capacity_bps"))
        capacity = _capacity(raw["capacity_bps"], f"{f}.capacity_bps")
        links.append(Link(_string_id(raw["id"], f"{f}.id"), capacity))
    jobs = _jobs(obj["jobs"])
    candidates = []
    for i, raw in enumerate(schema.array(obj["candidates"], "candidates", non_empty=True)):
        f = f"candidates[{i}]"
        raw = schema.require_object(raw, f)
        schema.check_fields(raw, f, ("id", "paths"))
        paths_raw = schema.require_object(raw["paths"], f"{f}.paths")
        paths = {}
        for job, path in paths_raw.items():
            pf = f"{f}.paths.{job}"
            items = schema.array(path, pf)
            paths[_string_id(job, pf)] = tuple(
                _string_id(x, f"{pf}[{k}]") for k, x in enumerate(items)
            )
        candidates.append(Candidate(_string_id(raw["id"], f"{f}.id"), paths))
    return links, jobs, candidates


# -- the service model's rules that the domain readers leave to it -------------------------


def _string_id(value: Any, field: str) -> str:
    """A non-empty string id (an integer is refused, as the service's model refuses it)."""
    if not isinstance(value, str):
        raise InputError(field, f"must be a string, got {schema.kind_of(value)}")
    if not value:
        raise InputError(field, "must not be empty")
    return value


def _capacity(value: Any, field: str) -> float:
    """A capacity in bits/s, from :data:`cassini.circle.MIN_CAPACITY_BPS` to
    :data:`cassini.agent.MAX_RATE_BPS`."""
    capacity = schema.number(value, field)
    _within(capacity, field, MIN_CAPACITY_BPS, MAX_RATE_BPS)
    return capacity


def _jobs(raw: Any) -> list[JobProfile]:
    """The request's jobs (:func:`cassini.profile.profiles_from_dicts`) within the
    model's bounds, checked in its order: each id a string, each iteration time from
    :data:`~cassini.agent.MIN_PERIOD_S` to :data:`~cassini.agent.MAX_PERIOD_S` seconds,
    each phase at least MIN_PERIOD_S long and at most
    :data:`~cassini.agent.MAX_RATE_BPS` fast."""
    jobs = profiles_from_dicts(raw, "jobs")
    for i, job in enumerate(raw):  # read: a list of objects, phases of numbers
        _string_id(job["id"], f"jobs[{i}].id")
        _within(job["iteration_time_s"], f"jobs[{i}].iteration_time_s", MIN_PERIOD_S, MAX_PERIOD_S)
        for k, phase in enumerate(job["phases"]):
            field = f"jobs[{i}].phases[{k}]"
            _within(phase["duration_s"], f"{field}.duration_s", MIN_PERIOD_S, MAX_PERIOD_S)
            _within(phase["rate_bps"], f"{field}.rate_bps", 0.0, MAX_RATE_BPS)
    return jobs


def _within(value: float, field: str, low: float, high: float) -> None:
    """InputError naming ``field`` unless ``low <= value <= high`` (the model's words)."""
    if low <= value <= high:
        return
    op, bound = (">=", low) if value < low else ("<=", high)
    raise InputError(field, f"must be {op} {bound:g}, got {schema.shown_against(value, bound)}")


def advise_request(
    obj: Any,
    *,
    precision_deg: float = 5.0,
    aggregate: str = "mean",
    loops: str = "reject",
    workers: int | None = None,
) -> Advice:
    """Answer an advise request (see the module docstring for the schema)."""
    links, jobs, candidates = read_advise_request(obj)
    return advise(links, jobs, candidates, precision_deg, aggregate, loops=loops, workers=workers)


def example(name: str) -> Any:
    """A built-in example request: ``"advise"`` (the paper's motivating cluster) or
    ``"score"`` (two of its jobs on one link)."""
    if name not in ("advise", "score"):
        raise InputError("example", f"unknown example {name!r}")
    text = resources.files("cassini").joinpath(f"data/example_{name}.json").read_text()
    return json.loads(text)
