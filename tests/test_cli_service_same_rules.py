"""``cassini score``/``cassini advise`` and ``POST /v1/score``/``/v1/advise`` read a
request body by one set of rules (:mod:`cassini.service.models`, then the domain readers
of :mod:`cassini.api`): any body one accepts the other accepts, and a refusal names the
same field with the same words.  The service differed: it answered an empty job list of
``/v1/score`` with score 1 (the CLI: ``jobs: must not be empty``), refused an integer
job id (the CLI took it), and refused a capacity under 1 bit/s, a rate over 1e15 bits/s
and a time under a microsecond or over a week, all of which the CLI took.

The service side runs in-process: the handler with a stand-in for the worker pool that
runs the task here, on the body as the service's JSON reader reads it."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import time
from typing import Any

import pytest

from cassini import api, files
from cassini.cli import main
from cassini.errors import InputError
from cassini.service import handlers, models
from cassini.service.errors import ServiceError

PREFIX = "cassini: error: "
#: The whole request as each names it: the CLI's input, the service's body.
WHOLE = {"input": "body"}


class _Pool:
    """Stands in for the service: runs each task in this process."""

    async def compute(self, deadline: float, task: Any, state: Any = None) -> Any:
        return task.run(None)


def service_verdict(command: str, text: str) -> str | None:
    """None when the service answers 200, else ``field: message`` of its error."""
    handler = handlers.score if command == "score" else handlers.advise
    body = files.loads_json(text)
    call = handlers.Call("POST", {}, {}, body, time.monotonic() + 60)
    try:
        status, _ = asyncio.run(handler(_Pool(), call))  # type: ignore[arg-type, misc]
    except ServiceError as e:
        assert e.status in (400, 422), e
        return f"{e.field}: {e.message}"
    except InputError as e:  # the app answers these 422
        return str(e)
    assert status == 200
    return None


def cli_verdict(command: str, text: str, tmp_path, capsys) -> str | None:
    """None when ``cassini COMMAND FILE`` answers (exit 0, or 1: every candidate
    rejected), else its one error line, less the prefix, the whole input named as the
    service names it."""
    path = tmp_path / "request.json"
    path.write_text(text, encoding="utf-8")
    code = main([command, str(path)])
    err = capsys.readouterr().err
    if code in (0, 1):
        return None
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), err
    line = lines[0].removeprefix(PREFIX)
    field, _, problem = line.partition(": ")
    return f"{WHOLE.get(field, field)}: {problem}"


# -- the table -------------------------------------------------------------------------------


def _job(**over: Any) -> dict[str, Any]:
    job = {
        "id": "a",
        "iteration_time_s": 0.1,
        "phases": [{"start_s": 0.0, "duration_s": 0.05, "rate_bps": 1e9}],
    }
    job.update(over)
    return job


def _phase(**over: Any) -> dict[str, Any]:
    phase = {"start_s": 0.0, "duration_s": 0.05, "rate_bps": 1e9}
    phase.update(over)
    return phase


def score(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"capacity_bps": 1e9, "jobs": [_job(), _job(id="b")]}
    body.update(over)
    return body


def advise(edit: Any = None) -> dict[str, Any]:
    body = copy.deepcopy(api.example("advise"))
    if edit is not None:
        edit(body)
    return body


def _without(key: str) -> Any:
    return lambda b: b.pop(key)


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def edit(body: dict[str, Any]) -> None:
        node = body
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return edit


WEEK_S = 7 * 86400.0

#: (name, command, body as JSON text or as an object, refused: the field named or None)
CASES: list[tuple[str, str, Any, str | None]] = [
    ("valid score", "score", score(), None),
    ("valid advise", "advise", advise(), None),
    ("score: no jobs", "score", score(jobs=[]), "jobs"),
    ("advise: no jobs", "advise", advise(_set(("jobs",), [])), "jobs"),
    ("score: integer job id", "score", score(jobs=[_job(id=5), _job()]), "jobs[0].id"),
    ("score: empty job id", "score", score(jobs=[_job(id="")]), "jobs[0].id"),
    ("advise: integer link id", "advise", advise(_set(("links", 0, "id"), 5)), "links[0].id"),
    ("advise: integer candidate id", "advise", advise(_set(("candidates", 0, "id"), 1)),
     "candidates[0].id"),
    # bounds: capacity in [1, 1e15] bits/s
    ("capacity 1 bit/s", "score", score(capacity_bps=1), None),
    ("capacity 0.5 bit/s", "score", score(capacity_bps=0.5), "capacity_bps"),
    ("capacity 0", "score", score(capacity_bps=0), "capacity_bps"),
    ("capacity 1e15", "score", score(capacity_bps=1e15), None),
    ("capacity above 1e15", "score", score(capacity_bps=1.001e15), "capacity_bps"),
    ("capacity: an integer too large for a float", "score", score(capacity_bps=10**400),
     "capacity_bps"),
    ("link capacity 0.5", "advise", advise(_set(("links", 0, "capacity_bps"), 0.5)),
     "links[0].capacity_bps"),
    ("link capacity above 1e15", "advise", advise(_set(("links", 0, "capacity_bps"), 2e15)),
     "links[0].capacity_bps"),
    # rate in [0, 1e15] bits/s
    ("rate 0", "score", score(jobs=[_job(phases=[_phase(rate_bps=0)])]), None),
    ("rate 1e15", "score", score(jobs=[_job(phases=[_phase(rate_bps=1e15)])]), None),
    ("rate above 1e15", "score", score(jobs=[_job(phases=[_phase(rate_bps=1.001e15)])]),
     "jobs[0].phases[0].rate_bps"),
    ("rate below 0", "score", score(jobs=[_job(phases=[_phase(rate_bps=-1)])]),
     "jobs[0].phases[0].rate_bps"),
    # times: iteration and duration in [1 us, a week] seconds, start in [0, iteration)
    ("iteration 1 us", "score",
     score(jobs=[_job(iteration_time_s=1e-6, phases=[_phase(duration_s=1e-6)])]), None),
    ("iteration under 1 us", "score",
     score(jobs=[_job(iteration_time_s=9e-7, phases=[_phase(duration_s=4e-7)])]),
     "jobs[0].iteration_time_s"),
    ("iteration a week", "score",
     score(jobs=[_job(iteration_time_s=WEEK_S, phases=[_phase(duration_s=1.0)])]), None),
    ("iteration over a week", "score",
     score(jobs=[_job(iteration_time_s=WEEK_S + 1, phases=[_phase(duration_s=1.0)])]),
     "jobs[0].iteration_time_s"),
    ("iteration 0", "score", score(jobs=[_job(iteration_time_s=0)]),
     "jobs[0].iteration_time_s"),
    ("duration 1 us", "score", score(jobs=[_job(phases=[_phase(duration_s=1e-6)])]), None),
    ("duration under 1 us", "score", score(jobs=[_job(phases=[_phase(duration_s=9e-7)])]),
     "jobs[0].phases[0].duration_s"),
    ("duration beyond the iteration", "score",
     score(jobs=[_job(phases=[_phase(duration_s=0.2)])]), "jobs[0].phases[0].duration_s"),
    ("start 0", "score", score(jobs=[_job(phases=[_phase(start_s=0.0)])]), None),
    ("start below 0", "score", score(jobs=[_job(phases=[_phase(start_s=-1e-9)])]),
     "jobs[0].phases[0].start_s"),
    ("start beyond the iteration", "score", score(jobs=[_job(phases=[_phase(start_s=0.2)])]),
     "jobs[0].phases[0].start_s"),
    # not finite, wrong types
    ("NaN capacity", "score", '{"capacity_bps": NaN, "jobs": []}', "capacity_bps"),
    ("NaN rate", "score",
     json.dumps(score(jobs=[_job(phases=[_phase(rate_bps=math.nan)])])),
     "jobs[0].phases[0].rate_bps"),
    ("Infinity iteration", "advise",
     json.dumps(advise(_set(("jobs", 0, "iteration_time_s"), math.inf))),
     "jobs[0].iteration_time_s"),
    ("capacity a boolean", "score", score(capacity_bps=True), "capacity_bps"),
    ("capacity a string", "score", score(capacity_bps="1e9"), "capacity_bps"),
    ("phases null", "score", score(jobs=[_job(phases=None)]), "jobs[0].phases"),
    ("top level an array", "advise", [1, 2], "body"),
    # missing and unknown fields
    ("no capacity_bps", "score", {"jobs": [_job()]}, "capacity_bps"),
    ("no jobs field", "score", {"capacity_bps": 1e9}, "jobs"),
    ("job without phases", "score", score(jobs=[{"id": "a", "iteration_time_s": 0.1}]),
     "jobs[0].phases"),
    ("no links", "advise", advise(_without("links")), "links"),
    ("candidate without paths", "advise", advise(lambda b: b["candidates"][0].pop("paths")),
     "candidates[0].paths"),
    ("unknown field", "score", score(colour="blue"), "colour"),
    ("unknown job field", "score", score(jobs=[_job(speed=3)]), "jobs[0].speed"),
    ("a job's provenance object", "score", score(jobs=[_job(provenance={"source": "lab"})]),
     None),
    ("a provenance that is not an object", "score", score(jobs=[_job(provenance=3)]),
     "jobs[0].provenance"),
    # rules the schema states in words (the service's 422)
    ("duplicate job ids", "score", score(jobs=[_job(), _job()]), "jobs[1].id"),
    ("a path to an unknown link", "advise",
     advise(_set(("candidates", 0, "paths", "vgg16"), ["nowhere"])),
     "candidates[0].paths.vgg16[0]"),
]


def _text(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body)


@pytest.mark.parametrize(
    "command, body, field", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_cli_and_the_service_accept_and_refuse_the_same_bodies(
    command, body, field, tmp_path, capsys
):
    text = _text(body)
    served = service_verdict(command, text)
    cli = cli_verdict(command, text, tmp_path, capsys)
    assert cli == served
    if field is None:
        assert served is None
    else:
        assert served is not None and served.split(": ")[0] == field, served


def test_the_bounds_are_the_agents_and_the_schemas():
    """One pair of time bounds (the agent's slot grid) and one rate bound, in the OpenAPI
    document's request schemas as the readers apply them."""
    from cassini.agent import MAX_PERIOD_S, MIN_PERIOD_S

    assert (models.MIN_TIME_S, models.MAX_TIME_S) == (MIN_PERIOD_S, MAX_PERIOD_S)
    schemas = models.component_schemas()
    job = schemas["Job"]["properties"]
    assert job["iteration_time_s"]["minimum"] == MIN_PERIOD_S
    assert job["iteration_time_s"]["maximum"] == MAX_PERIOD_S
    phase = schemas["Phase"]["properties"]
    assert phase["rate_bps"]["maximum"] == models.MAX_RATE_BPS
    assert schemas["ScoreRequest"]["properties"]["jobs"]["minItems"] == 1
    assert job["id"]["type"] == "string"


def test_the_cli_help_states_the_bounds_the_models_apply():
    from cassini.cli import EPILOG

    assert (models.MIN_TIME_S, models.MAX_TIME_S, models.MAX_RATE_BPS) == (1e-6, WEEK_S, 1e15)
    text = " ".join(EPILOG.split())
    assert "times 1e-6 to 604800 s (a week), rates up to 1e15 bits/s" in text
    assert "capacities from 1 bit/s" in text
    assert models.component_schemas()["Link"]["properties"]["capacity_bps"]["minimum"] == 1
