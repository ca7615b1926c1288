"""What each operation of the service does, one function each: ``handler(service, call)``
-> ``(status, answer)`` where the answer is JSON-able (or bytes, sent as they are).  The
request has been read and checked before (:mod:`cassini.service.reading`); a handler
validates the body's schema once, here, into typed values, and hands typed tasks to the
worker pool (:mod:`cassini.service.tasks`).  Errors are raised, not returned: the app's
exception handlers turn them into the JSON error answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cassini import schema
from cassini.errors import InputError
from cassini.service import k8s
from cassini.service.cluster import check_nodes, read_job
from cassini.service.service import Service
from cassini.service.shifts import JobShift
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


Answer = tuple[int, Any]
Handler = Callable[[Service, Call], Awaitable[Answer]]


async def health(service: Service, call: Call) -> Answer:
    return 200, {"status": "ok", "version": service.version}


async def metrics(service: Service, call: Call) -> Answer:
    return 200, service.metrics.exposition()


async def openapi_document(service: Service, call: Call) -> Answer:
    return 200, service.openapi


async def advise(service: Service, call: Call) -> Answer:
    from cassini import api

    links, jobs, candidates = api.read_advise_request(call.body)
    options = {
        "precision_deg": call.options.get("precision_deg", 5.0),
        "aggregate": call.options.get("aggregate", "mean"),
        "loops": call.options.get("loops", "reject"),
    }
    return 200, await service.compute(call.deadline, AdviseTask(links, jobs, candidates, options))


async def score(service: Service, call: Call) -> Answer:
    from cassini.profile import profiles_from_dicts

    obj = schema.require_object(call.body, "")
    schema.check_fields(obj, "", ("capacity_bps", "jobs"))
    capacity = schema.number(obj["capacity_bps"], "capacity_bps", positive=True)
    jobs = profiles_from_dicts(obj["jobs"], "jobs")
    task = ScoreTask(jobs, capacity, call.options.get("precision_deg", 5.0))
    return 200, await service.compute(call.deadline, task)


async def list_jobs(service: Service, call: Call) -> Answer:
    jobs = service.registry.jobs()
    return 200, {"jobs": [jobs[j].to_dict() for j in sorted(jobs)]}


async def register_job(service: Service, call: Call) -> Answer:
    job = read_job(call.body)
    check_nodes(service.registry.cluster, job, "")
    new = service.registry.put(job)
    return (201 if new else 200), job.to_dict()


async def get_job(service: Service, call: Call) -> Answer:
    return 200, service.registry.job(call.params["job_id"]).to_dict()


async def delete_job(service: Service, call: Call) -> Answer:
    return 200, service.registry.delete(call.params["job_id"]).to_dict()


async def get_time_shift(service: Service, call: Call) -> Answer:
    registry = service.registry
    job = registry.job(call.params["job_id"])
    explicit = registry.explicit.get(job.job_id)
    if explicit is not None:
        return 200, explicit.to_dict(registry.epoch_s)
    _, shifts = await service.shifts(call.deadline)
    s = shifts.get(job.job_id)
    if s is None:  # registered after the computation started; not yet in its result
        s = JobShift(
            job.job_id, False, 0.0, job.profile.iteration_time_s, "not computed yet; retry"
        )
    return 200, s.to_dict(registry.epoch_s)


async def put_time_shift(service: Service, call: Call) -> Answer:
    registry = service.registry
    job = registry.job(call.params["job_id"])
    shift = read_time_shift_put(call.body, job.job_id, registry.epoch_s)
    registry.set_shift(shift)
    return 200, shift.to_dict(registry.epoch_s)


def read_time_shift_put(obj: Any, job_id: str, default_epoch_s: float) -> JobShift:
    """``{"shift_s", "period_s", "epoch_s"?}`` (seconds) as the job's explicit shift;
    ``shift_s`` in [0, ``period_s``)."""
    obj = schema.require_object(obj, "")
    schema.check_fields(obj, "", ("shift_s", "period_s"), ("epoch_s",))
    period = schema.number(obj["period_s"], "period_s", positive=True)
    shift = schema.number(obj["shift_s"], "shift_s", non_negative=True)
    if shift >= period:
        raise InputError("shift_s", f"must be in [0, period_s = {period:g}), got {shift:g}")
    epoch = default_epoch_s
    if obj.get("epoch_s") is not None:
        epoch = schema.number(obj["epoch_s"], "epoch_s", non_negative=True)
    return JobShift(job_id, True, shift, period, None, None, epoch)


async def _extender_scores(service: Service, call: Call, verb: str) -> tuple[Any, Any]:
    """(the request's args, the answer): JSON bytes from a prioritize task, score tuples
    from a filter task, or neutral scores when the service cannot judge."""
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
