"""The service's request and answer bodies as typed models (pydantic v2), defined once:
a request body is validated by its model (:func:`validate`, a
:class:`~cassini.service.errors.BadRequest` naming the field as the JSON readers do,
``jobs[0].phases[1].rate_bps: must be >= 0, got -1``), and the OpenAPI components are
generated from the same models (:func:`component_schemas`).

What JSON Schema cannot say (a phase inside its iteration, phases not overlapping,
``shift_s < period_s``, a node of the cluster, a model of the library, a path naming a job
of the request) is checked by the domain readers after the model; such a refusal is a 422
(:class:`~cassini.service.errors.Unprocessable`), a body that breaks the schema a 400.
``cassini score`` and ``cassini advise`` validate their file by the same models and then
read it with the same readers (:func:`cassini.api.read_advise_request`): a body one
accepts the other accepts, and a refusal names the same field in the same words.
Units: seconds, bits per second."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.json_schema import models_json_schema

from cassini.agent import (
    MAX_EPOCH_AHEAD_S,
    MAX_EPOCH_S,
    MAX_PERIOD_S,
    MAX_RATE_BPS,
    MIN_PERIOD_S,
    epoch_problem,
)
from cassini.schema import join as _join
from cassini.schema import kind_of as _kind
from cassini.schema import not_a_number as _not_a_number
from cassini.service.cluster import MAX_JOB_ID_CHARS, TIME_SHIFT_PATH, unroutable
from cassini.service.errors import BadRequest

M = TypeVar("M", bound=BaseModel)

# -- field types ---------------------------------------------------------------------------

#: Bounds of the numbers a request may carry: a time from a microsecond to a week (an
#: iteration, a phase, a period, in seconds) and a rate up to 1 Pb/s.  Past them the
#: unified circle's arithmetic overflows (1e308 s) or its period error is infinite (5e-324
#: s), and no training job is there.
MIN_TIME_S = MIN_PERIOD_S  # the agent's slot grid and the service: one pair of bounds
MAX_TIME_S = MAX_PERIOD_S

Id = Annotated[str, Field(min_length=1)]


def _refusing(problem_of: Callable[[Any], str | None]) -> Callable[[Any], Any]:
    """A validator passing a value on, or raising ValueError with ``problem_of``'s reason
    when it gives one."""

    def check(value: Any) -> Any:
        problem = problem_of(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return check


#: ``job_id``, or ValueError with :func:`cassini.service.cluster.unroutable`'s reason
_routable = _refusing(unroutable)


#: A job id the job routes can name (:func:`cassini.service.cluster.unroutable` is the
#: rule; the schema states it): no control characters, at most MAX_JOB_ID_CHARS
#: characters, not ending in /time_shift (/v1/jobs/<id> would be another job's time-shift).
JobId = Annotated[
    str,
    Field(
        min_length=1,
        json_schema_extra={
            "maxLength": MAX_JOB_ID_CHARS,
            "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$",
            "not": {"pattern": f"{TIME_SHIFT_PATH}$"},
        },
        description=f"at most {MAX_JOB_ID_CHARS} characters, no control characters, not "
        f"ending in {TIME_SHIFT_PATH} (that path is a job's time-shift)",
    ),
    AfterValidator(_routable),
]
Seconds = Annotated[float, Field(ge=0, le=MAX_TIME_S, description="seconds")]
PositiveSeconds = Annotated[
    float, Field(ge=MIN_TIME_S, le=MAX_TIME_S, description="seconds")
]
Bps = Annotated[float, Field(ge=0, le=MAX_RATE_BPS, description="bits per second")]


#: an epoch, or ValueError with :func:`cassini.agent.epoch_problem`'s reason (an epoch in
#: milliseconds is said to be one)
_epoch = _refusing(epoch_problem)


#: UNIX seconds slot 0 counts from, below :data:`cassini.agent.MAX_EPOCH_S` (the year
#: 2286): an epoch in milliseconds is refused, not slept on.
EpochSeconds = Annotated[
    float,
    Field(ge=0, json_schema_extra={"exclusiveMaximum": MAX_EPOCH_S}),
    AfterValidator(_epoch),
]
PositiveBps = Annotated[float, Field(ge=1, le=MAX_RATE_BPS, description="bits per second")]
NumberMap = dict[str, float]


class Strict(BaseModel):
    """A request object: exact JSON types (no "1" for 1, no true for 1), finite numbers,
    no fields beyond its own."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


class Open(BaseModel):
    """An answer object: the fields listed, and maybe more (additional fields allowed)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class Closed(BaseModel):
    """An answer object with exactly the fields listed."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# -- requests --------------------------------------------------------------------------------


class Phase(Strict):
    """A communication phase of an iteration; it must end within the iteration and not
    overlap another phase (checked after the schema: 422)."""

    start_s: Annotated[
        float, Field(ge=0, le=MAX_TIME_S, description="seconds into the iteration")
    ]
    duration_s: PositiveSeconds
    rate_bps: Bps


class Job(Strict):
    """A job's periodic demand (the JOB of ``cassini advise``)."""

    id: Id
    iteration_time_s: Annotated[
        float, Field(ge=MIN_TIME_S, le=MAX_TIME_S, description="seconds per iteration")
    ]
    phases: list[Phase]
    # absent, not null (no default in the schema): as a library entry or profile file has it
    provenance: Annotated[
        dict[str, Any],
        Field(default=None, json_schema_extra=lambda s: s.pop("default", None),
              description="where the numbers come from (a profile library entry's); read "
              "and not used"),
    ]


class ProfileAnnotation(Strict):
    """A pod's ``cassini.io/profile`` annotation (a JOB as JSON, ``id`` optional): the
    bounds a request body's job has (seconds, bits per second).  Its fields are checked by
    the extender's reader (:func:`cassini.service.k8s.pod_profile`), not the schema: the
    annotation is a string there."""

    model_config = ConfigDict(extra="ignore")  # id and unknown fields: read by pod_profile

    iteration_time_s: Annotated[
        float, Field(ge=MIN_TIME_S, le=MAX_TIME_S, description="seconds per iteration")
    ]
    phases: list[Phase]


class Link(Strict):
    id: Id
    capacity_bps: PositiveBps


class Candidate(Strict):
    id: Id
    paths: Annotated[
        dict[str, list[Id]],
        Field(description="job id -> ids of the links its traffic crosses (jobs and "
              "links of this request: 422 otherwise)"),
    ]


def _shipped_example(name: str) -> Any:
    """Adds the shipped example request ``name`` (``cassini/data/example_NAME.json``) to
    a schema's ``examples``."""

    def add(schema: dict[str, Any]) -> None:
        from cassini.api import example

        schema["examples"] = [example(name)]

    return add


class AdviseRequest(Strict):
    model_config = ConfigDict(json_schema_extra=_shipped_example("advise"))

    links: Annotated[list[Link], Field(min_length=1)]
    jobs: Annotated[
        list[Job],
        Field(min_length=1, description="the jobs to place (at least one: placing no job "
              "has nothing to rank); ids unique (422 otherwise)"),
    ]
    candidates: Annotated[list[Candidate], Field(min_length=1)]


class ScoreRequest(Strict):
    """The jobs sharing one link of capacity_bps (bits per second). At least one job, as
    cassini score and the advise request want: a link with no jobs is almost surely a
    mistake in the request (a file cut short, a filter that matched nothing), which an
    answer of score 1 with no period would hide."""

    model_config = ConfigDict(json_schema_extra=_shipped_example("score"))

    capacity_bps: PositiveBps
    jobs: Annotated[
        list[Job],
        Field(min_length=1, description="the jobs sharing the link (at least one); ids "
              "unique (422 otherwise)"),
    ]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class JobRegistration(Strict):
    """A running job to register: its nodes and either a library ``model`` or its own
    ``iteration_time_s`` and ``phases``, not both."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["model"], "not": {"anyOf": [
                    {"required": ["iteration_time_s"]}, {"required": ["phases"]}]}},
                {"required": ["iteration_time_s", "phases"], "not": {"required": ["model"]}},
            ],
            "examples": [
                {"id": "bert-a", "model": "bert", "nodes": []},
                {
                    "id": "mine",
                    "iteration_time_s": 0.2,
                    "phases": [{"start_s": 0.1, "duration_s": 0.1, "rate_bps": 4.0e10}],
                    "nodes": [],
                },
            ],
        }
    )

    id: JobId
    nodes: Annotated[
        list[Id],
        Field(default_factory=list, json_schema_extra={"uniqueItems": True},
              description="nodes of --cluster (422 for a node it does not have)"),
    ]
    # absent, not null: no default in the schema (the oneOf says which are required)
    model: Annotated[
        str,
        Field(default=None, min_length=1, json_schema_extra=_no_default,
              description="a profile library id (422 for one the library does not have)"),
    ]
    iteration_time_s: Annotated[
        float,
        Field(default=None, ge=MIN_TIME_S, le=MAX_TIME_S, json_schema_extra=_no_default,
              description="seconds per iteration"),
    ]
    phases: Annotated[list[Phase], Field(default=None, json_schema_extra=_no_default)]
    provenance: Annotated[
        dict[str, Any],
        Field(default=None, json_schema_extra=_no_default,
              description="where the numbers come from (as cassini profile --nic-bps "
              "writes it, or a library entry's); read and not used"),
    ]

    @model_validator(mode="after")
    def _model_or_own_profile(self) -> JobRegistration:
        fields = self.model_fields_set
        if len(set(self.nodes)) != len(self.nodes):
            raise _FieldError("nodes", "names a node more than once")
        if "model" in fields and fields & {"iteration_time_s", "phases"}:
            raise _FieldError("model", "give a model or iteration_time_s/phases, not both")
        if "model" not in fields:
            for name in ("iteration_time_s", "phases"):
                if name not in fields:
                    raise _FieldError(name, "missing required field (or give a library model)")
        return self


class TimeShiftHold(Strict):
    """An explicit time-shift: slot k starts at epoch_s + shift_s + k * period_s, with
    shift_s in [0, period_s) and epoch_s at most a day ahead of the service's clock (422
    otherwise)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"shift_s": 0.03, "period_s": 0.12}]}
    )

    shift: Annotated[Literal[True], Field(default=True, description="true: hold the shift")]
    shift_s: Seconds
    period_s: PositiveSeconds
    epoch_s: Annotated[
        EpochSeconds | None,
        Field(default=None, description=f"UNIX seconds slot 0 counts from, below "
              f"{MAX_EPOCH_S:g} (seconds, not milliseconds) and at most "
              f"{MAX_EPOCH_AHEAD_S:g} s ahead of the service's clock (null or absent: the "
              "service's epoch)"),
    ]


class TimeShiftRelease(Strict):
    """Release the job to run free."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"shift": False, "reason": "missed its slot 3 times"}]}
    )

    shift: Annotated[Literal[False], Field(description="false: release the job")]
    reason: Annotated[str, Field(default="released by PUT", description="why it is released")]


class GoObject(BaseModel):
    """A Kubernetes object as Go's decoder reads it: field names match case-insensitively
    (the exact name first), unknown fields are ignored."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _go_field_names(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for name in cls.model_fields:
            if name not in out:
                folded = name.casefold()
                key = next((k for k in data if isinstance(k, str) and k.casefold() == folded),
                           None)
                if key is not None:
                    out[name] = out.pop(key)
        return out


class NodeMeta(GoObject):
    name: str


class NodeObject(GoObject):
    """A v1.Node; the extender reads only its name."""

    metadata: NodeMeta


class NodeList(GoObject):
    items: list[NodeObject] = Field(default_factory=list)


class PodMeta(GoObject):
    name: str | None = None
    annotations: dict[str, str] | None = Field(
        default=None,
        description="cassini.io/job, cassini.io/profile (a JOB as JSON) or cassini.io/model "
        "(a library id); a profile or model the service cannot read is a 422",
    )


class PodObject(GoObject):
    """The v1.Pod being scheduled; the extender reads its name and annotations."""

    metadata: PodMeta | None = None


class ExtenderArgs(GoObject):
    """k8s.io/kube-scheduler/extender/v1 ExtenderArgs; field names match case-insensitively
    (Go's decoder); Nodes when the extender is not nodeCacheCapable, NodeNames when it is
    (both given: NodeNames counts, and Nodes must still be well formed)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "Pod": {"metadata": {"name": "bert-b-0",
                                         "annotations": {"cassini.io/model": "bert"}}},
                    "NodeNames": ["n1", "n2"],
                },
                {
                    "Pod": {"metadata": {"name": "p", "annotations": {"cassini.io/job": "half"}}},
                    "Nodes": {"items": [{"metadata": {"name": "n2"}}]},
                },
            ]
        }
    )

    Pod: PodObject
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


# -- answers ---------------------------------------------------------------------------------


class PredictedIteration(Closed):
    """One job's predicted iteration time (seconds), three ways."""

    shifted: Annotated[float, Field(description="seconds; every job sharing a link held "
                                    "to its slot")]
    same_start: Annotated[float, Field(description="seconds; every job free-running from "
                                       "0 (no time-shift)")]
    advised: Annotated[float, Field(description="seconds; only the jobs whose shift is "
                                    "true held")]


#: Present only on a candidate with a prediction (the best one, when it is "ok" and its
#: link simulation finished): absent, not null, so no default in the schema.
_PREDICTED = "present only when a prediction was made"

#: job id -> hold it to its time-shift (true) or let it run free (false)
ShiftMap = Annotated[
    dict[str, bool],
    Field(default=None, json_schema_extra=_no_default,
          description="job id -> apply its time-shift (true) or run free (false); "
          f"{_PREDICTED}"),
]
#: mean over the jobs sharing a link of same_start / shifted iteration time
PredictedGain = Annotated[
    float,
    Field(default=None, json_schema_extra=_no_default,
          description="mean over the jobs sharing a link of their same_start / shifted "
          "predicted iteration times (above 1: holding them is faster; 1.0 when no job "
          f"shares a link); {_PREDICTED}"),
]


class CandidateResult(Open):
    """How one candidate scored.  predicted_iteration_s, predicted_gain, shift,
    shift_reasons, agent_period_s and shift_threshold come with a prediction, made for
    the best candidate when it is "ok" (its reason says "no prediction: ..." when its link
    simulation did not finish); the other candidates have none of them."""

    id: str
    status: Literal["ok", "rejected"]
    score: float | None
    min_link_score: float | None = None
    link_scores: NumberMap | None = None
    time_shifts_s: Annotated[NumberMap, Field(description="job id -> seconds")]
    loops: int | None = None
    loop_loss: float | None = None
    reason: str | None
    predicted_iteration_s: Annotated[
        dict[str, PredictedIteration],
        Field(default=None, json_schema_extra=_no_default,
              description=f"job id -> predicted seconds per iteration; {_PREDICTED}"),
    ]
    predicted_gain: PredictedGain
    shift: ShiftMap
    shift_reasons: Annotated[
        dict[str, str],
        Field(default=None, json_schema_extra=_no_default,
              description=f"job id -> why it is shifted or not; {_PREDICTED}"),
    ]
    agent_period_s: Annotated[
        NumberMap,
        Field(default=None, json_schema_extra=_no_default,
              description="job id -> seconds: the period the time-shift agent holds the "
              f"job to (only the jobs whose shift is true); {_PREDICTED}"),
    ]
    shift_threshold: Annotated[
        float,
        Field(default=None, json_schema_extra=_no_default,
              description="fraction (0.02 = 2 %): a job predicted to gain less from its "
              f"shift is not shifted, unless another job gains by it; {_PREDICTED}"),
    ]


class Advice(Open):
    """The best candidate (null when every one was rejected), its time-shifts, and every
    candidate ranked best first; shift and predicted_gain repeat the best candidate's
    prediction, present only when it has one."""

    best: str | None
    time_shifts_s: Annotated[NumberMap, Field(description="job id -> seconds")]
    precision_deg: float | None = None
    aggregate: str | None = None
    loops: str | None = None
    candidates: list[CandidateResult]
    shift: Annotated[ShiftMap, Field(description="the best candidate's shift: job id -> "
                                     "apply its time-shift (true) or run free (false); "
                                     f"{_PREDICTED}")]
    predicted_gain: Annotated[PredictedGain, Field(description="the best candidate's "
                                                   f"predicted_gain; {_PREDICTED}")]


class ScoreAnswer(Open):
    score: float
    time_shifts_s: Annotated[NumberMap, Field(description="job id -> seconds")]
    unified_period_s: Annotated[float, Field(description="seconds")]
    period_exact: bool | None = None
    period_error: float | None = None
    n_angles: int | None = None
    method: str | None = None
    demand_bps: list[float] | None = None


class AnswerPhase(Closed):
    start_s: float
    duration_s: float
    rate_bps: float


class RunningJob(Closed):
    """A registered job: its nodes, its library model if it named one, and its profile."""

    id: str
    nodes: list[str]
    model: str | None = None
    iteration_time_s: Annotated[float, Field(description="seconds per iteration")]
    phases: list[AnswerPhase]


class JobList(Closed):
    jobs: list[RunningJob]


class TimeShift(Closed):
    job_id: str
    shift: Annotated[bool, Field(description="false: run free (reason says why)")]
    shift_s: Annotated[float, Field(ge=0, description="seconds in [0, period_s)")]
    period_s: Annotated[float, Field(gt=0, description="seconds; the job's iteration time")]
    epoch_s: Annotated[float, Field(ge=0, description="UNIX seconds slot 0 counts from")]
    reason: Annotated[
        str | None,
        Field(description="shift false: why it runs free; shift true: null, or the caveat "
              "that its interleaving drifts (held, but its period is not commensurate with "
              "a partner's on a link)"),
    ]
    released: Annotated[
        bool,
        Field(description="true: released by PUT (shift false), the job's own or a job "
              "of its held group (jobs joined by shared links); it runs free"),
    ]
    tolerance_s: Annotated[
        float | None,
        Field(default=None, ge=0, description="seconds an iteration may start late before "
              "the agent re-aligns the job (the advisor's slip tolerance; null: the agent's "
              "default)"),
    ]


class HostPriority(Closed):
    Host: str
    Score: Annotated[int, Field(ge=0, le=10)]


class ExtenderFilterResult(Closed):
    Nodes: dict[str, Any] | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class UnusableJob(Closed):
    """A registered job kept in the state file but left out of every computation."""

    id: Id
    reason: str


class Health(Closed):
    status: str
    version: str | None = None
    unusable_jobs: Annotated[
        list[UnusableJob],
        Field(description="registered jobs kept in the state file but not used (a node "
              "left the cluster, or the stored row no longer reads); each answers "
              "shift: false with the reason"),
    ] = []


class ErrorDetail(Closed):
    code: int
    field: Annotated[
        str | None,
        Field(description="JSON path into the body, query.NAME, a header or path "
              "parameter; null when no single field is to blame"),
    ]
    message: str


class Error(Closed):
    error: ErrorDetail


#: Request models by component name, validated in "validation" mode.
REQUESTS: tuple[type[BaseModel], ...] = (
    AdviseRequest, ScoreRequest, JobRegistration, TimeShiftHold, TimeShiftRelease, ExtenderArgs,
)
#: Answer models by component name.
ANSWERS: tuple[type[BaseModel], ...] = (
    Advice, ScoreAnswer, RunningJob, JobList, TimeShift, HostPriority, ExtenderFilterResult,
    Health, Error,
)


# -- validation errors as the service's field-named errors -----------------------------------


class _FieldError(Exception):
    """A cross-field schema rule broken (raised from a model validator, passes through
    pydantic): the field to blame and the problem."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


def validate(model: type[M], body: Any, prefix: str = "") -> M:
    """``body`` as ``model``; a :class:`BadRequest` naming the first field that breaks it
    (unknown fields first, as the JSON readers report them)."""
    try:
        return model.model_validate(body)
    except _FieldError as e:
        raise BadRequest(e.problem, _join(prefix, e.field)) from None
    except ValidationError as e:
        errors = e.errors(include_url=False)
        errors.sort(key=lambda err: err["type"] != "extra_forbidden")
        first = errors[0]
        field = _field_name(body, first["loc"]) or prefix or "body"
        if prefix and field != prefix:
            field = _join(prefix, field)
        raise BadRequest(_problem(first), field) from None


#: Object keys written ``name["key"]`` in a field path (free-form keys such as
#: ``cassini.io/job``), not ``name.key``.
QUOTED_KEYS_OF = ("annotations",)


def _field_name(body: Any, loc: Iterable[int | str]) -> str:
    """The JSON path of a pydantic error location, with the keys as the body spells them
    (the k8s names match case-insensitively): ``jobs[0].phases[1].rate_bps``."""
    out = ""
    node = body
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        else:
            key = part
            if isinstance(node, Mapping) and part not in node:
                folded = part.casefold()
                key = next(
                    (k for k in node if isinstance(k, str) and k.casefold() == folded), part
                )
            if previous in QUOTED_KEYS_OF:
                out += f'["{key}"]'
            else:
                out = _join(out, key)
            node = node.get(key) if isinstance(node, Mapping) else None
        previous = part
    return out


_TYPES = {
    "float_type": "a number",
    "int_type": "an integer",
    "string_type": "a string",
    "bool_type": "a boolean",
    "list_type": "a JSON array",
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
}


#: pydantic's bound errors: (the comparison, its context key)
_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
           "less_than_equal": ("<=", "le")}  # fmt: skip


def _beside(value: Any, bound: Any) -> str:
    """``value`` as a bound's error shows it: ``:g``, or in full (repr) when that reads as
    the bound (``must be <= 604800, got 604800`` for 604800.0001)."""
    shown = f"{value:g}"
    return repr(value) if shown == f"{bound:g}" else shown


def _problem(err: Mapping[str, Any]) -> str:
    """A pydantic error's problem in the JSON readers' words."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return "missing required field"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
        return "must be finite, got an integer too large for a float"  # as schema.number
    if kind == "float_type":
        return _not_a_number(value, "a number")  # a quoted number gets schema.number's hint
    if kind in _TYPES:
        return f"must be {_TYPES[kind]}, got {_kind(value)}"
    if kind == "finite_number":
        return f"must be finite, got {value}"
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        return f"must be {op} {ctx[key]:g}, got {_beside(value, ctx[key])}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else err["msg"]
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, got {_kind(value)}"
    return str(err["msg"])


# -- the OpenAPI components ------------------------------------------------------------------


def component_schemas() -> dict[str, Any]:
    """JSON Schemas of every request and answer model, by name, referring to each other
    as ``#/components/schemas/NAME`` (titles dropped: the names say it)."""
    models = [(m, "validation") for m in (*REQUESTS, *ANSWERS)]
    _, top = models_json_schema(models, ref_template="#/components/schemas/{model}")
    schemas = {name: _untitled(s) for name, s in top["$defs"].items()}
    schemas["HostPriorityList"] = {
        "type": "array", "items": {"$ref": "#/components/schemas/HostPriority"},
    }
    schemas["TimeShiftPut"] = {
        "description": "hold an explicit time-shift, or release the job to run free",
        "oneOf": [
            {"$ref": "#/components/schemas/TimeShiftHold"},
            {"$ref": "#/components/schemas/TimeShiftRelease"},
        ],
    }
    return dict(sorted(schemas.items()))


def _untitled(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: (_untitled(v) if k != "properties" else {p: _untitled(s) for p, s in v.items()})
            for k, v in schema.items()
            if k != "title"
        }
    if isinstance(schema, list):
        return [_untitled(s) for s in schema]
    return schema
