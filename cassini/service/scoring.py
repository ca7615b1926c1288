"""Per-node scores for a pod's job on the cluster's running jobs (runs in the service's
worker processes): :class:`State` (what the workers compute on), :class:`Prepared` (it,
indexed by link group, with caches), :func:`score_nodes`."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from cassini.circle import compatibility_score
from cassini.profile import JobProfile, Phase
from cassini.service.cluster import MAX_SCORE, NEUTRAL_SCORE, ClusterNetwork, RunningJob
from cassini.shared_cache import SharedCache


@dataclass(frozen=True)
class State:
    """What the workers need: the cluster and the running jobs (id -> job).  ``version``
    changes whenever either does."""

    version: int
    cluster: ClusterNetwork
    jobs: dict[str, RunningJob]

    def job_links(self, job: RunningJob) -> tuple[str, ...]:
        """The links a job crosses: those of all its (known) nodes; none on one node (a
        data-parallel job within one node sends nothing over the network, as the
        simulator's job on one server crosses no link)."""
        if len(job.nodes) < 2:
            return ()
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
_LINK_SCORES: SharedCache[float] = SharedCache(LINK_CACHE_SIZE)


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
            return hit
        profiles = [pod] + [
            JobProfile(f"other{i}", t, [Phase(*q) for q in phases])
            for i, (t, phases) in enumerate(others)
        ]
        score = float(compatibility_score(profiles, capacity, precision_deg=precision_deg).score)
        _LINK_SCORES.put(key, score)
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

    def stays_on(self, job_id: str, node: str) -> bool:
        """Whether the running job ``job_id`` runs on ``node`` alone: its pod placed there
        keeps it on one node, where it crosses no link."""
        job = self.state.jobs.get(job_id)
        return job is not None and job.nodes == (node,)

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
    """Score each node for the pod's job: the lowest compatibility over the node's links
    that carry other running jobs (1.0 when none does), scaled to 0..10.  A node the
    cluster does not know, or a pod without a profile, gets :data:`NEUTRAL_SCORE`; the
    node a running job runs on alone gets 1.0 for that job's pod (the job stays on one
    node and crosses no link).  Each link group is scored once per pod shape (and link
    problems are cached)."""
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
    if prepared.stays_on(pod.job_id, node):
        return _node_score(prepared, node, [], None)
    scores, worst, worst_score = [], None, math.inf
    for lid in links:
        s = prepared.link_score(lid, pod, pod_shape, precision_deg)
        if s is not None:
            scores.append(s)
            if s < worst_score:
                worst, worst_score = lid, s
    return _node_score(prepared, node, scores, worst)


def _node_score(prepared: Prepared, node: str, scores: list[float], worst: str | None) -> NodeScore:
    """The node's compatibility: the lowest of its link scores (the pod's job crosses
    every link of the node, and the worst one holds it back: a conflict on the NIC alone
    shows, where a mean over the NIC and the tiers' links above would hide it), clamped
    to [0, 1] (a link score is ``1 - excess / capacity``, below 0 when the demand exceeds
    twice the capacity), so that ``--min-score 0`` drops no node; 1.0 with none."""
    lowest = min(scores) if scores else 1.0
    value = min(1.0, max(0.0, lowest))
    extender = int(round(MAX_SCORE * value))
    jobs = prepared.jobs_on.get(worst, ()) if worst else ()
    return NodeScore(node, value, extender, worst, tuple(jobs))
