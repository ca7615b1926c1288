"""What each operation of the service does, one function each: ``handler(service, call)``
-> ``(status, answer)`` where the answer is JSON-able (or bytes, sent as they are).  The
request has been read and checked before (:mod:`cassini.service.reading`); a handler
validates the body against its model (:mod:`cassini.service.models`, the same models the
OpenAPI document is generated from: a 400 naming the field), then reads it into typed
values with the domain readers (their refusals, of what the schema cannot say, are 422s)
and hands typed tasks to the worker pool (:mod:`cassini.service.tasks`).  Errors are
raised, not returned: the app's exception handlers turn them into the JSON error answer."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.responses import Response

from cassini import schema
from cassini.agent import MAX_EPOCH_AHEAD_S
from cassini.errors import InputError
from cassini.service import k8s, models
from cassini.service.cluster import check_nodes, read_job
from cassini.service.errors import BadRequest, NotFound, ServiceError, json_bytes
from cassini.service.registry import Registry
from cassini.service.service import Service
from cassini.service.shifts import JobShift, answered_shift
from cassini.service.tasks import AdviseTask, FilterTask, PrioritizeTask, ScoreTask


@dataclass(frozen=True)
class Call:
    """One request as a handler sees it: method, path parameters, validated query options,
    the parsed JSON body (None when none) and the deadline (:func:`time.monotonic`)."""

    method: str
    params: dict[str, str]
    options: dict[str, Any]
    body: Any
    deadline: float
    headers: Mapping[str, str] = field(default_factory=dict)


Answer = tuple[int, Any] | Response
Handler = Callable[[Service, Call], Awaitable[Answer]]


async def health(service: Service, call: Call) -> Answer:
    """Up (liveness: the process answers; readiness is :func:`readiness`), with the
    registered jobs kept but not used (and why)."""
    unusable = service.registry.unusable()
    return 200, {
        "status": "ok",
        "version": service.version,
        "unusable_jobs": [{"id": j, "reason": why} for j, why in unusable.items()],
    }


class NotReady(ServiceError):
    """``GET /readyz`` before the service can answer from its cluster."""

    status = 503
    when = (
        "not ready: under --kube, no cluster model from the API server applied yet (the "
        "message says what it waits for and the last error)"
    )


async def readiness(service: Service, call: Call) -> Answer:
    """Ready: 200, except under ``--kube`` until its first cluster model is applied (503
    naming what it waits for), when every extender score would be the neutral 5."""
    if service.config.kube is not None:
        kube = service.kube
        why = kube.not_ready() if kube is not None else "no cluster model yet: starting"
        if why is not None:
            raise NotReady(why)
    return 200, {"status": "ready", "version": service.version}


async def metrics(service: Service, call: Call) -> Answer:
    return 200, service.metrics.exposition()


async def openapi_document(service: Service, call: Call) -> Answer:
    return 200, service.openapi


async def advise(service: Service, call: Call) -> Answer:
    from cassini import api

    models.validate(models.AdviseRequest, call.body)
    links, jobs, candidates = api.read_advise_request(call.body)
    options = {
        "precision_deg": call.options.get("precision_deg", 5.0),
        "aggregate": call.options.get("aggregate", "mean"),
        "loops": call.options.get("loops", "reject"),
    }
    return 200, await service.compute(call.deadline, AdviseTask(links, jobs, candidates, options))


async def score(service: Service, call: Call) -> Answer:
    """The jobs on one link (at least one: an empty list is a 400 ``jobs: must not be
    empty``, as ``cassini score`` refuses it; see :class:`models.ScoreRequest`)."""
    from cassini.profile import profiles_from_dicts

    request = models.validate(models.ScoreRequest, call.body)
    precision_deg = call.options.get("precision_deg", 5.0)
    jobs = profiles_from_dicts(call.body["jobs"], "jobs")
    task = ScoreTask(jobs, request.capacity_bps, precision_deg)
    return 200, await service.compute(call.deadline, task)


async def list_jobs(service: Service, call: Call) -> Answer:
    jobs = service.registry.jobs()
    return 200, {"jobs": [jobs[j].to_dict() for j in sorted(jobs)]}


async def register_job(service: Service, call: Call) -> Answer:
    models.validate(models.JobRegistration, call.body)
    job = read_job(call.body)
    check_nodes(service.registry.cluster, job, "")
    new = service.registry.put(job)
    return (201 if new else 200), job.to_dict()


async def get_job(service: Service, call: Call) -> Answer:
    return 200, service.registry.job(call.params["job_id"]).to_dict()


async def delete_job(service: Service, call: Call) -> Answer:
    job_id = call.params["job_id"]
    row = service.registry.unreadable.get(job_id)
    job = service.registry.delete(job_id)
    if job is None:  # a stored row that no longer read, now removed: what of it reads
        assert row is not None
        return 200, {"id": job_id, "nodes": [], "iteration_time_s": row[1] or 0.0,
                     "phases": []}
    return 200, job.to_dict()


async def get_time_shift(service: Service, call: Call) -> Answer:
    """The job's time-shift with its ETag (a digest of the answer: it changes exactly when
    the answer does); ``If-None-Match`` matching it (:func:`none_match`) gets 304, no body."""
    registry = service.registry
    s = _unusable_shift(registry, call.params["job_id"])
    if s is None:
        job = registry.job(call.params["job_id"])
        s = registry.explicit.get(job.job_id)
        if s is not None and not s.shift:  # released: runs free at its own iteration time
            s = replace(s, period_s=job.profile.iteration_time_s)
        if s is None:
            _, shifts = await service.shifts(call.deadline)
            s = shifts.get(job.job_id)
        if s is None:  # registered after the computation started; not yet in its result
            s = JobShift(
                job.job_id, False, 0.0, job.profile.iteration_time_s, "not computed yet; retry"
            )
        s = answered_shift(s, registry.state(), registry.explicit)
    body = json_bytes(s.to_dict(registry.epoch_s))
    etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if none_match(call.headers.get("if-none-match", ""), etag):
        return Response(status_code=304, headers=headers)
    return Response(body, status_code=200, headers=headers, media_type="application/json")


def none_match(header: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` header matches ``etag`` (RFC 9110, 13.1.2): ``*``, or
    one of its tags by weak comparison (``W/"x"`` matches ``"x"``)."""
    tags = [t.strip() for t in header.split(",")]
    return any(t == "*" or t.removeprefix("W/") == etag for t in tags)


async def put_time_shift(service: Service, call: Call) -> Answer:
    registry = service.registry
    job = registry.job(call.params["job_id"])
    shift = read_time_shift_put(
        call.body, job.job_id, registry.epoch_s, job.profile.iteration_time_s
    )
    registry.set_shift(shift)
    answer = _unusable_shift(registry, job.job_id)
    if answer is None:
        answer = answered_shift(shift, registry.state(), registry.explicit)
    return 200, answer.to_dict(registry.epoch_s)


def _unusable_shift(registry: Registry, job_id: str) -> JobShift | None:
    """A kept job the service cannot use runs free, with the reason (its explicit shift
    stays stored for when it is usable again); None for a usable or unknown job."""
    why = registry.unusable().get(job_id)
    if why is None:
        return None
    job = registry.jobs().get(job_id)
    if job is not None:
        period = job.profile.iteration_time_s
    else:
        row = registry.unreadable.get(job_id)  # else a job its cluster source left out
        period = (row[1] if row is not None else None) or 0.0
        own = registry.explicit.get(job_id)
        if own is not None and own.shift:
            period = own.period_s
        if period <= 0:
            raise NotFound(f"job {job_id!r}: {why}", "job_id")
    return JobShift(job_id, False, 0.0, period, f"kept but not used: {why}")


def read_time_shift_put(
    obj: Any,
    job_id: str,
    default_epoch_s: float,
    iteration_time_s: float,
    now_s: float | None = None,
) -> JobShift:
    """``{"shift_s", "period_s", "epoch_s"?}`` (seconds) as the job's explicit shift,
    ``shift_s`` in [0, ``period_s``) and ``epoch_s`` at most a day ahead of ``now_s``
    (UNIX seconds, default the clock), else 422, as ``cassini.torch`` refuses such an
    epoch (the job would sleep until then); or ``{"shift": false, "reason"?}``: run
    free, at the job's own ``iteration_time_s`` (seconds).  The ``shift`` field picks the
    model (the schema's ``oneOf``); one that is not a boolean is a 400 naming it, as any
    other type error."""
    if isinstance(obj, dict) and "shift" in obj and not isinstance(obj["shift"], bool):
        # neither model's: the field that picks the model, in the schema's words; a wrong
        # type breaks the schema (a boolean), so a 400 as from models.validate
        raise BadRequest(
            f"must be true (hold) or false (release), got {schema.kind_of(obj['shift'])}",
            "shift",
        )
    if isinstance(obj, dict) and obj.get("shift") is False:
        release = models.validate(models.TimeShiftRelease, obj)
        return JobShift(job_id, False, 0.0, iteration_time_s, release.reason)
    hold = models.validate(models.TimeShiftHold, obj)
    if hold.shift_s >= hold.period_s:
        raise InputError(
            "shift_s", f"must be in [0, period_s = {hold.period_s:g}), got {hold.shift_s:g}"
        )
    if hold.epoch_s is not None:
        ahead = hold.epoch_s - (time.time() if now_s is None else now_s)
        if ahead > MAX_EPOCH_AHEAD_S:
            raise InputError(
                "epoch_s",
                f"{hold.epoch_s!r} is {ahead / 86400:.1f} days ahead of the service's clock "
                f"(at most {MAX_EPOCH_AHEAD_S / 86400:g} day): the job would sleep until then",
            )
    epoch = default_epoch_s if hold.epoch_s is None else hold.epoch_s
    return JobShift(job_id, True, hold.shift_s, hold.period_s, None, None, epoch)


async def _extender_scores(service: Service, call: Call, verb: str) -> tuple[Any, Any]:
    """(the request's args, the answer): JSON bytes from a prioritize task, score tuples
    from a filter task, or neutral scores when the service cannot judge."""
    models.validate(models.ExtenderArgs, call.body)
    args = k8s.read_extender_args(call.body)
    registry = service.registry
    pod = k8s.pod_profile(args, registry.jobs())
    names = args.node_names
    if pod is None or not registry.cluster.nodes:
        return args, [(n, None, k8s.NEUTRAL_SCORE, None, ()) for n in names]
    task_type = PrioritizeTask if verb == "prioritize" else FilterTask
    task = task_type(pod, names, service.config.precision_deg)
    return args, await service.compute(call.deadline, task, registry.state())


async def prioritize(service: Service, call: Call) -> Answer:
    _, answer = await _extender_scores(service, call, "prioritize")
    if isinstance(answer, bytes):
        return 200, answer  # the HostPriorityList, as the worker wrote it
    return 200, k8s.priority_list(answer)


async def filter_nodes(service: Service, call: Call) -> Answer:
    args, scores = await _extender_scores(service, call, "filter")
    return 200, k8s.filter_result(args, scores, service.config.min_score)
