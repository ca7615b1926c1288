"""JSON requests and responses of the advisor: the contract the CLI and the HTTP service
share.  Readers are strict (unknown fields are errors) and raise
:class:`cassini.errors.InputError` naming the field.

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
from cassini.circle import LinkSolution, compatibility_score
from cassini.errors import InputError
from cassini.profile import profiles_from_dicts


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
    capacity = schema.number(obj["capacity_bps"], "capacity_bps", positive=True)
    jobs = profiles_from_dicts(obj["jobs"], "jobs")
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
        links.append(
            Link(
                schema.identifier(raw["id"], f"{f}.id"),
                schema.number(raw["capacity_bps"], f"{f}.capacity_bps", positive=True),
            )
        )
    jobs = profiles_from_dicts(obj["jobs"], "jobs")
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
            paths[str(job)] = tuple(schema.identifier(x, f"{pf}[{k}]") for k, x in enumerate(items))
        candidates.append(Candidate(schema.identifier(raw["id"], f"{f}.id"), paths))
    return links, jobs, candidates


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
