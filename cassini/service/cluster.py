"""The cluster ``cassini serve --cluster FILE`` knows: links, the links a job on each node
sends through, and the running jobs; and the two computations on it (pure functions, run
in the service's worker processes): per-node scores for a pod's job, and the running
jobs' time-shifts.

Cluster file (YAML or JSON)::

    epoch_s: 1767225600.0        # optional: UNIX time every job's slots count from
    links:                       # every link, capacity in bits/s
      - {id: tor0-up, capacity_bps: 4.0e+11}
      - {id: srv0.0-up, capacity_bps: 1.0e+11}
    nodes:                       # node name -> links a job on it sends through
      gpu-0-0: [srv0.0-up, srv0.0-down, tor0-up, tor0-down]
    jobs:                        # running jobs (also POST /v1/jobs at run time)
      - {id: bert-a, model: bert, nodes: [gpu-0-0, gpu-0-1]}
      - {id: mine, iteration_time_s: 0.2,
         phases: [{start_s: 0.1, duration_s: 0.1, rate_bps: 4.0e+10}], nodes: [gpu-0-2]}

A job crosses the links of all its nodes.  ``model`` names a profile of the library
(``cassini/data/profiles.json``); otherwise the job carries its own profile.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from cassini import schema
from cassini.advisor import Candidate, Link, advise, held_time_shifts
from cassini.circle import compatibility_score
from cassini.errors import InputError
from cassini.profile import JobProfile, Phase
from cassini.slip import slip_tolerances_s

#: Extender score of a node the service cannot judge (unknown node, pod without a profile,
#: server without a cluster): the middle of kube-scheduler's 0..10, the same for every node.
NEUTRAL_SCORE = 5
MAX_SCORE = 10
JOB_FIELDS = ("id", "nodes", "model", "iteration_time_s", "phases")


@lru_cache(maxsize=1)
def library() -> dict[str, JobProfile]:
    """The shipped profile library: id -> profile."""
    text = resources.files("cassini").joinpath("data/profiles.json").read_text()
    return {p["id"]: JobProfile.from_dict(p, f"library[{p['id']}]") for p in json.loads(text)}


@dataclass(frozen=True)
class RunningJob:
    """A running job: its profile and the nodes it runs on."""

    profile: JobProfile
    nodes: tuple[str, ...]
    model: str | None = None

    @property
    def job_id(self) -> str:
        return self.profile.job_id

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.job_id, "nodes": list(self.nodes)}
        if self.model is not None:
            out["model"] = self.model
        out["iteration_time_s"] = self.profile.iteration_time_s
        out["phases"] = [p.to_dict() for p in self.profile.phases]
        return out


def read_job(obj: Any, field: str = "", *, job_id: str | None = None) -> RunningJob:
    """A running job from JSON: ``{"id", "nodes", "model"}`` or ``{"id", "nodes",
    "iteration_time_s", "phases"}`` (the JOB of ``cassini advise`` plus its nodes)."""
    obj = schema.require_object(obj, field)
    schema.check_fields(obj, field, (), JOB_FIELDS)
    if "id" not in obj and job_id is None:
        raise InputError(schema.join(field, "id"), "missing required field")
    jid = schema.identifier(obj.get("id", job_id), schema.join(field, "id"))
    nodes_raw = schema.array(obj.get("nodes", []), schema.join(field, "nodes"))
    nodes = tuple(
        schema.identifier(n, f"{schema.join(field, 'nodes')}[{i}]") for i, n in enumerate(nodes_raw)
    )
    if len(set(nodes)) != len(nodes):
        raise InputError(schema.join(field, "nodes"), "names a node more than once")
    return RunningJob(profile_of(obj, field, jid), nodes, obj.get("model"))


def profile_of(obj: Mapping[str, Any], field: str, job_id: str) -> JobProfile:
    """The profile a job object gives: ``model`` (library id) or its own
    ``iteration_time_s`` and ``phases``."""
    has_own = "iteration_time_s" in obj or "phases" in obj
    if "model" in obj:
        if has_own:
            raise InputError(
                schema.join(field, "model"), "give a model or iteration_time_s/phases, not both"
            )
        model = schema.identifier(obj["model"], schema.join(field, "model"))
        known = library()
        if model not in known:
            raise InputError(
                schema.join(field, "model"),
                f"unknown model {model!r} (library: {', '.join(sorted(known))})",
            )
        base = known[model]
        return JobProfile(job_id, base.iteration_time_s, base.phases)
    for name in ("iteration_time_s", "phases"):
        if name not in obj:
            raise InputError(
                schema.join(field, name), "missing required field (or give a library model)"
            )
    mine = {"id": job_id, "iteration_time_s": obj["iteration_time_s"], "phases": obj["phases"]}
    try:
        return JobProfile.from_dict(mine, field or "job")
    except InputError as e:
        if field:
            raise
        raise InputError(e.field.removeprefix("job."), e.problem) from None


@dataclass(frozen=True)
class Cluster:
    """Links (id -> capacity, bits/s), node -> links, and the epoch (UNIX seconds) of the
    slot grid, or None for the server's start time."""

    links: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    epoch_s: float | None = None


def read_cluster(obj: Any, field: str = "") -> tuple[Cluster, list[RunningJob]]:
    """A cluster file's content: the cluster and its running jobs."""
    obj = schema.require_object(obj, field)
    schema.check_fields(obj, field, ("links", "nodes"), ("jobs", "epoch_s"))
    links: dict[str, float] = {}
    for i, raw in enumerate(schema.array(obj["links"], schema.join(field, "links"))):
        f = f"{schema.join(field, 'links')}[{i}]"
        raw = schema.require_object(raw, f)
        schema.check_fields(raw, f, ("id", "capacity_bps"))
        lid = schema.identifier(raw["id"], f"{f}.id")
        if lid in links:
            raise InputError(f"{f}.id", f"duplicate link id {lid!r}")
        links[lid] = schema.number(raw["capacity_bps"], f"{f}.capacity_bps", positive=True)
    nodes: dict[str, tuple[str, ...]] = {}
    nf = schema.join(field, "nodes")
    for name, raw in schema.require_object(obj["nodes"], nf).items():
        f = f"{nf}.{name}"
        path = []
        for k, lid in enumerate(schema.array(raw, f)):
            lid = schema.identifier(lid, f"{f}[{k}]")
            if lid not in links:
                raise InputError(f"{f}[{k}]", f"unknown link {lid!r} (not in links)")
            path.append(lid)
        nodes[str(name)] = tuple(dict.fromkeys(path))
    epoch = None
    if obj.get("epoch_s") is not None:
        epoch = schema.number(obj["epoch_s"], schema.join(field, "epoch_s"), non_negative=True)
    cluster = Cluster(links, nodes, epoch)
    jobs: list[RunningJob] = []
    seen: set[str] = set()
    jf = schema.join(field, "jobs")
    for i, raw in enumerate(schema.array(obj.get("jobs") or [], jf)):
        job = read_job(raw, f"{jf}[{i}]")
        if job.job_id in seen:
            raise InputError(f"{jf}[{i}].id", f"duplicate job id {job.job_id!r}")
        check_nodes(cluster, job, f"{jf}[{i}]")
        seen.add(job.job_id)
        jobs.append(job)
    return cluster, jobs


def load_cluster_file(path: str | Path) -> tuple[Cluster, list[RunningJob]]:
    """Read a cluster file (YAML or JSON; JSON is YAML); InputError names the problem."""
    import yaml  # a core dependency; imported here to keep `import cassini` light

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError("cluster", f"cannot read {path}: {e.strerror or e}") from None
    try:
        obj = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise InputError("", f"not YAML/JSON{where}: {problem}") from None
    return read_cluster(obj)


def check_nodes(cluster: Cluster, job: RunningJob, field: str) -> None:
    for i, node in enumerate(job.nodes):
        if node not in cluster.nodes:
            raise InputError(
                f"{schema.join(field, 'nodes')}[{i}]", f"unknown node {node!r} (not in the cluster)"
            )


# -- the state the workers compute on --------------------------------------------------------


@dataclass(frozen=True)
class State:
    """What the workers need: the cluster and the running jobs (id -> job).  ``version``
    changes whenever either does."""

    version: int
    cluster: Cluster
    jobs: dict[str, RunningJob]

    def job_links(self, job: RunningJob) -> tuple[str, ...]:
        """The links a job crosses: those of all its (known) nodes."""
        out: dict[str, None] = {}
        for node in job.nodes:
            for lid in self.cluster.nodes.get(node, ()):
                out[lid] = None
        return tuple(out)


def _shape(p: JobProfile) -> tuple:
    return (p.iteration_time_s, tuple((q.start_s, q.duration_s, q.rate_bps) for q in p.phases))


#: Link scores kept across requests and cluster changes (per worker process), keyed by
#: (capacity, precision, pod shape, others' shapes).
LINK_CACHE_SIZE = 65536
_LINK_SCORES: OrderedDict[tuple, float] = OrderedDict()


class Prepared:
    """A :class:`State` indexed for scoring.  Links carrying the same running jobs' shapes
    on the same capacity form one *group* (one link problem for a given pod); per node the
    groups of its links; per pod shape, the scores of the groups and nodes computed so far
    (a scheduler asks about the pods of one job many times)."""

    POD_CACHE_SIZE = 256

    def __init__(self, state: State) -> None:
        self.state = state
        on: dict[str, list[str]] = {}
        for job in state.jobs.values():
            for lid in state.job_links(job):
                on.setdefault(lid, []).append(job.job_id)
        self.jobs_on = {lid: tuple(sorted(js)) for lid, js in on.items()}
        shapes = {jid: _shape(job.profile) for jid, job in state.jobs.items()}
        group_of: dict[tuple, int] = {}
        self.groups: list[tuple[float, tuple]] = []  # (capacity, others' shapes)
        self.link_group: dict[str, int] = {}
        for lid, js in self.jobs_on.items():
            key = (state.cluster.links[lid], tuple(sorted(shapes[j] for j in js)))
            if key not in group_of:
                group_of[key] = len(self.groups)
                self.groups.append(key)
            self.link_group[lid] = group_of[key]
        self.node_groups: dict[str, tuple[int, ...]] = {
            node: tuple(self.link_group[lid] for lid in links if lid in self.link_group)
            for node, links in state.cluster.nodes.items()
        }
        # (pod shape, precision) -> (group scores, node -> NodeScore)
        self.by_pod: OrderedDict[tuple, tuple[list, dict]] = OrderedDict()

    def _score(
        self,
        capacity: float,
        others: tuple,
        pod: JobProfile,
        pod_shape: tuple,
        precision_deg: float,
    ) -> float:
        key = (capacity, precision_deg, pod_shape, others)
        hit = _LINK_SCORES.get(key)
        if hit is not None:
            _LINK_SCORES.move_to_end(key)
            return hit
        profiles = [pod] + [
            JobProfile(f"other{i}", t, [Phase(*q) for q in phases])
            for i, (t, phases) in enumerate(others)
        ]
        score = float(compatibility_score(profiles, capacity, precision_deg=precision_deg).score)
        _LINK_SCORES[key] = score
        if len(_LINK_SCORES) > LINK_CACHE_SIZE:
            _LINK_SCORES.popitem(last=False)
        return score

    def for_pod(self, pod_shape: tuple, precision_deg: float) -> tuple[list, dict]:
        """The group scores (None: not computed yet) and node scores of one pod shape."""
        key = (pod_shape, precision_deg)
        hit = self.by_pod.get(key)
        if hit is None:
            hit = self.by_pod[key] = ([None] * len(self.groups), {})
            if len(self.by_pod) > self.POD_CACHE_SIZE:
                self.by_pod.popitem(last=False)
        else:
            self.by_pod.move_to_end(key)
        return hit

    def link_score(
        self, lid: str, pod: JobProfile, pod_shape: tuple, precision_deg: float
    ) -> float | None:
        """Compatibility in [0, 1] of the pod's job with the other jobs on link ``lid``;
        None when no other job is on it."""
        js = self.jobs_on.get(lid)
        if not js:
            return None
        if pod.job_id in js:  # the pod's own job already crosses this link
            rest = [j for j in js if j != pod.job_id]
            if not rest:
                return None
            others = tuple(sorted(_shape(self.state.jobs[j].profile) for j in rest))
            capacity = self.state.cluster.links[lid]
        else:
            capacity, others = self.groups[self.link_group[lid]]
        return self._score(capacity, others, pod, pod_shape, precision_deg)


@dataclass(frozen=True)
class NodeScore:
    """One node's judgement: ``score`` in [0, 1] (None: not judged, neutral), the extender
    score 0..10, and the shared link with the lowest score, for the filter's reason."""

    node: str
    score: float | None
    extender_score: int
    worst_link: str | None = None
    worst_jobs: tuple[str, ...] = ()


def score_nodes(
    prepared: Prepared,
    pod: JobProfile | None,
    nodes: Sequence[str],
    precision_deg: float = 5.0,
) -> list[NodeScore]:
    """Score each node for the pod's job: the mean compatibility over the node's links
    that carry other running jobs (1.0 when none does), scaled to 0..10.  A node the
    cluster does not know, or a pod without a profile, gets :data:`NEUTRAL_SCORE`.
    Each link group is scored once per pod shape (and link problems are cached)."""
    if pod is None:
        return [NodeScore(node, None, NEUTRAL_SCORE) for node in nodes]
    pod_shape = _shape(pod)
    links_of = prepared.state.cluster.nodes
    if pod.job_id in prepared.state.jobs:
        # the pod's job may already cross some of these links: link by link, no reuse
        return [
            _node_by_links(prepared, node, links_of.get(node), pod, pod_shape, precision_deg)
            for node in nodes
        ]
    group_scores, node_scores = prepared.for_pod(pod_shape, precision_deg)
    out = []
    for node in nodes:
        known = node_scores.get(node)
        if known is not None:
            out.append(known)
            continue
        groups = prepared.node_groups.get(node)
        if groups is None:
            out.append(NodeScore(node, None, NEUTRAL_SCORE))
            continue
        scores = []
        for g in groups:
            s = group_scores[g]
            if s is None:
                capacity, others = prepared.groups[g]
                s = group_scores[g] = prepared._score(
                    capacity, others, pod, pod_shape, precision_deg
                )
            scores.append(s)
        worst = None
        if scores:
            g = groups[scores.index(min(scores))]
            worst = next(lid for lid in links_of[node] if prepared.link_group.get(lid) == g)
        node_scores[node] = result = _node_score(prepared, node, scores, worst)
        out.append(result)
    return out


def _node_by_links(
    prepared: Prepared,
    node: str,
    links: tuple[str, ...] | None,
    pod: JobProfile,
    pod_shape: tuple,
    precision_deg: float,
) -> NodeScore:
    if links is None:
        return NodeScore(node, None, NEUTRAL_SCORE)
    scores, worst, worst_score = [], None, math.inf
    for lid in links:
        s = prepared.link_score(lid, pod, pod_shape, precision_deg)
        if s is not None:
            scores.append(s)
            if s < worst_score:
                worst, worst_score = lid, s
    return _node_score(prepared, node, scores, worst)


def _node_score(prepared: Prepared, node: str, scores: list[float], worst: str | None) -> NodeScore:
    value = sum(scores) / len(scores) if scores else 1.0
    extender = int(round(MAX_SCORE * min(1.0, max(0.0, value))))
    jobs = prepared.jobs_on.get(worst, ()) if worst else ()
    return NodeScore(node, value, extender, worst, tuple(jobs))


@dataclass(frozen=True)
class JobShift:
    """A running job's time-shift: ``shift`` False means run free (``reason`` says why);
    ``shift_s`` in [0, ``period_s``) seconds; ``tolerance_s`` how late (seconds) a shifted
    job may run before its agent re-aligns it (:mod:`cassini.slip`)."""

    job_id: str
    shift: bool
    shift_s: float
    period_s: float
    reason: str | None
    tolerance_s: float | None = None


def compute_shifts(state: State, precision_deg: float = 5.0) -> dict[str, JobShift]:
    """Time-shifts of the running jobs that share links: the advisor on one candidate, the
    current placement (``loops="score"``, so a loopy placement still gets its best shifts).
    A job sharing no link, or one the advisor's prediction marks ``shift: false``, runs
    free; a shifted job's period is the advisor's ``agent_period_s`` when it gives one
    (never below the iteration time), else its iteration time."""
    out: dict[str, JobShift] = {}
    paths = {}
    for jid, job in state.jobs.items():
        links = state.job_links(job)
        if links:
            paths[jid] = links
    on: dict[str, int] = {}
    for links in paths.values():
        for lid in links:
            on[lid] = on.get(lid, 0) + 1
    sharing = {j for j, links in paths.items() if any(on[lid] > 1 for lid in links)}
    if sharing:
        used = {lid for j in sharing for lid in paths[j]}
        links = [Link(lid, state.cluster.links[lid]) for lid in sorted(used)]
        profiles = [state.jobs[j].profile for j in sorted(sharing)]
        cand = Candidate("current", {j: paths[j] for j in sorted(sharing)})
        advice = advise(links, profiles, [cand], precision_deg, loops="score", workers=1)
        result = advice.candidates[0]
    else:
        result = None
    # the advisor's prediction, when it makes one: per job, does shifting pay, and the
    # period the agent holds a shifted job to
    prediction = getattr(result, "prediction", None)
    on_period: dict[str, float] = {}
    if result is not None and result.status == "ok" and prediction is not None:
        held_at = {
            j: max(state.jobs[j].profile.iteration_time_s, float(p))
            for j, p in prediction.agent_period_s.items()
        }
        if any(p > state.jobs[j].profile.iteration_time_s * (1 + 1e-9) for j, p in held_at.items()):
            # held longer than they iterate: solve the shifts on those periods
            on_period = held_time_shifts(
                links, cand.paths, {j: state.jobs[j].profile for j in sorted(sharing)}, held_at,
                precision_deg,
            )  # fmt: skip
    for jid, job in state.jobs.items():
        period = job.profile.iteration_time_s
        if jid not in paths:
            out[jid] = JobShift(jid, False, 0.0, period, "runs on no node of the cluster")
            continue
        if jid not in sharing:
            out[jid] = JobShift(jid, False, 0.0, period, "shares no link with another job")
            continue
        assert result is not None
        if result.status != "ok":
            out[jid] = JobShift(jid, False, 0.0, period, result.reason or "placement rejected")
            continue
        if prediction is not None and prediction.shift.get(jid) is False:
            why = prediction.reasons.get(jid) or "the advisor predicts no gain from shifting"
            out[jid] = JobShift(jid, False, 0.0, period, str(why))
            continue
        held = period
        if prediction is not None and jid in prediction.agent_period_s:
            held = max(period, float(prediction.agent_period_s[jid]))
        shift = float(on_period.get(jid, result.time_shifts_s.get(jid, 0.0))) % held
        out[jid] = JobShift(jid, True, shift, held, None)
    shifted = {j: s for j, s in out.items() if s.shift}
    if shifted:
        capacities = {lid: state.cluster.links[lid] for j in shifted for lid in paths[j]}
        tolerances = slip_tolerances_s(
            capacities,
            {j: paths[j] for j in shifted},
            {j: state.jobs[j].profile for j in shifted},
            {j: s.period_s for j, s in shifted.items()},
            {j: s.shift_s for j, s in shifted.items()},
        )
        for j, s in shifted.items():
            out[j] = replace(s, tolerance_s=tolerances[j])
    return out
