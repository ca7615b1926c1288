"""Running jobs from Pods (pure).  A pod belongs to job J when it carries
``cassini.io/job: J`` as an annotation (or, failing that, a label), whatever controller
made it (a PodGroup, a JobSet, a PyTorchJob...).  A job runs while at least one of its
pods is bound to a node (``spec.nodeName``) and not finished (phase neither
``Succeeded`` nor ``Failed``); its nodes are those pods' nodes, its profile the
``cassini.io/model`` or ``cassini.io/profile`` annotation of its first pod (by namespace
and name) that has a readable one; a pod whose annotation cannot be read (an unknown
model) is reported with the job (``PodJobs.dropped``).  A job id that running pods of two
namespaces carry, or whose pods give different profiles, is two jobs under one name: left
out and reported (``PodJobs.conflicts``), never merged."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.service.cluster import RunningJob, unroutable
from cassini.service.k8s import (
    ANNOTATION_JOB,
    ANNOTATION_MODEL,
    ANNOTATION_PROFILE,
    ExtenderArgs,
    pod_job_id,
    pod_profile,
)

FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class JobPod:
    """What a job needs of one of its pods: ``namespace/name``, the job, the node it is
    bound to (None: not yet), whether it finished, and its annotations."""

    key: str
    job_id: str
    node: str | None
    finished: bool
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.node is not None and not self.finished


def pod_key(obj: Any) -> str:
    """``namespace/name`` of a Pod object ('' when it has no name)."""
    meta = obj.get("metadata") or {} if isinstance(obj, dict) else {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def job_pod(obj: Any) -> JobPod | None:
    """The pod as one of a job's, or None when it names no job."""
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata") or {}
    ann = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    job_id = pod_job_id(ann, meta.get("labels") or {})
    if not job_id:
        return None
    node = (obj.get("spec") or {}).get("nodeName") or None
    phase = (obj.get("status") or {}).get("phase")
    return JobPod(pod_key(obj), str(job_id), node, phase in FINISHED_PHASES, ann)


@dataclass(frozen=True)
class PodJobs:
    """The running jobs the pods give (id -> job), the jobs named by running pods that
    could not be registered (id -> why), the registered jobs with something dropped (id
    -> what and why: pods whose profile could not be read; nodes, see
    :func:`jobs_on_nodes`), and the job ids left out because pods of different jobs carry
    them (id -> which namespaces or profiles)."""

    jobs: dict[str, RunningJob]
    problems: dict[str, str]
    dropped: dict[str, str] = field(default_factory=dict)
    conflicts: dict[str, str] = field(default_factory=dict)


def jobs_from_pods(pods: Iterable[JobPod]) -> PodJobs:
    """Group the running pods by job; one :class:`RunningJob` per job (an id carried by
    pods of two namespaces, or with two profiles, in ``conflicts`` instead)."""
    by_job: dict[str, list[JobPod]] = {}
    for pod in pods:
        if pod.running:
            by_job.setdefault(pod.job_id, []).append(pod)
    jobs: dict[str, RunningJob] = {}
    problems: dict[str, str] = {}
    conflicts: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for job_id in sorted(by_job):
        bad_id = unroutable(job_id)
        if bad_id is not None:
            problems[job_id] = f"its id {bad_id}"
            continue
        members = sorted(by_job[job_id], key=lambda p: p.key)
        spaces = sorted({p.key.split("/", 1)[0] for p in members})
        if len(spaces) > 1:
            conflicts[job_id] = (
                f"pods of namespaces {_and(spaces)} carry this {ANNOTATION_JOB} (two jobs "
                "under one id: give each its own)"
            )
            continue
        profiles, unread = _profiles(job_id, members)
        if not profiles:
            problems[job_id] = unread[0] if unread else (
                f"no {ANNOTATION_MODEL} or {ANNOTATION_PROFILE} on its pods"
            )
            continue
        if len(profiles) > 1:
            given = [f"{what} ({pod.key})" for pod, what, _ in profiles.values()]
            conflicts[job_id] = f"its pods give different profiles: {_and(given)}"
            continue
        ((profile, (first, what, model)),) = profiles.items()
        if unread:
            more = f" (and {len(unread) - 1} more pods)" if len(unread) > 1 else ""
            dropped[job_id] = (
                f"{unread[0]}{more}: ignored; its profile is {what}, from pod {first.key}"
            )
        nodes = tuple(sorted({p.node for p in members if p.node is not None}))
        jobs[job_id] = RunningJob(profile, nodes, model)
    return PodJobs(jobs, problems, dropped, conflicts)


def _profiles(
    job_id: str, members: list[JobPod]
) -> tuple[dict[JobProfile, tuple[JobPod, str, str | None]], list[str]]:
    """The distinct profiles the pods give, in pod order: profile -> (the first pod
    giving it, what it says, its model or None); and the pods whose annotation cannot be
    read (``pod <key>: <why>``, in pod order)."""
    found: dict[JobProfile, tuple[JobPod, str, str | None]] = {}
    unread: list[str] = []
    for pod in members:
        ann = pod.annotations | {ANNOTATION_JOB: job_id}  # the job a label named
        try:
            profile = pod_profile(ExtenderArgs(pod.key, ann, (), None), {})
        except InputError as e:
            unread.append(f"pod {pod.key}: {e}")
            continue
        if profile is not None and profile not in found:
            model = pod.annotations.get(ANNOTATION_MODEL)
            what = f"model {model}" if model is not None else ANNOTATION_PROFILE
            found[profile] = (pod, what, model)
    return found, unread


def _and(words: list[str]) -> str:
    """``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def jobs_on_nodes(
    pod_jobs: PodJobs, nodes: Collection[str], left_out: Mapping[str, str] | None = None
) -> PodJobs:
    """The jobs restricted to ``nodes`` (the model's): a node not among them is dropped
    from its job (reported in ``dropped``, saying whether it was ``left_out`` of the model
    or is no node at all); a job left with no node is not registered (``problems``)."""
    left_out = left_out or {}
    jobs: dict[str, RunningJob] = {}
    problems = dict(pod_jobs.problems)
    dropped = dict(pod_jobs.dropped)
    for job_id, job in pod_jobs.jobs.items():
        gone = [n for n in job.nodes if n not in nodes]
        if not gone:
            jobs[job_id] = job
            continue
        why = ", ".join(
            f"{n} ({'left out of the model' if n in left_out else 'no such node'})"
            for n in gone
        )
        kept = tuple(n for n in job.nodes if n in nodes)
        if kept:
            jobs[job_id] = replace(job, nodes=kept)
            line = f"{why} dropped from its nodes; kept on {', '.join(kept)}"
            dropped[job_id] = f"{dropped[job_id]}; {line}" if job_id in dropped else line
        else:
            problems[job_id] = f"none of its nodes is in the model: {why}"
    return PodJobs(jobs, problems, dropped, dict(pod_jobs.conflicts))
