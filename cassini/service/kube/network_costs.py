"""CASSINI's view as a scheduler-plugins ``NetworkTopology`` ``weights`` entry (pure).

The ``NetworkOverhead`` plugin (kubernetes-sigs/scheduler-plugins
``pkg/networkaware/networkoverhead``) reads, from the entry its ``weightsName`` names,
the costs between regions (``topologyKey: topology.kubernetes.io/region``) and between
zones (``topology.kubernetes.io/zone``), integers in 0..100 (``MaxCost``; the same zone
costs 1, the same host 0).  Schema followed: scheduler-plugins
``manifests/networktopology/crd.yaml`` (``spec.weights[].topologyList[].originList[]
.costList[]``, group ``networktopology.diktyo.x-k8s.io``).

Mapping (:func:`weights_entry`): the lowest tier of the hierarchy is the zone level, the
tier above it the region level (one tier: zones only).  A domain's *compatibility* is
CASSINI's score (0..1) of the running jobs crossing its uplink (1 with none); traffic
between domains o and d crosses both uplinks, so::

    networkCost(o, d) = 1 + round(99 * (1 - min(compat(o), compat(d))))

1 when CASSINI sees the jobs there interleave perfectly (no worse than the same zone),
100 when they cannot share at all.  A name that repeats under different parents (rack-0
of two blocks) is one zone to the plugin: it gets the worst of its instances.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cassini.profile import JobProfile
from cassini.service.kube.topology import Hierarchy, domain_links
from cassini.service.scoring import State

WEIGHTS_NAME = "cassini"
REGION_KEY = "topology.kubernetes.io/region"
ZONE_KEY = "topology.kubernetes.io/zone"
MAX_COST = 100
MIN_CROSS_COST = 1

Scorer = Callable[[Sequence[JobProfile], float], float]


def cost_of(compat_a: float, compat_b: float) -> int:
    """The cost between two domains from their uplinks' compatibility (0..1)."""
    worst = min(max(0.0, min(compat_a, compat_b)), 1.0)
    return MIN_CROSS_COST + round((MAX_COST - MIN_CROSS_COST) * (1.0 - worst))


def domain_compatibility(
    hierarchy: Hierarchy, state: State, depth: int, score: Scorer
) -> dict[str, float]:
    """Per domain *name* at tier ``depth`` (0: top): the compatibility of the jobs on
    its uplink, the worst over domains of that name."""
    paths = {p[: depth + 1] for p in hierarchy.paths.values() if len(p) > depth}
    on_link: dict[str, list[JobProfile]] = {}
    for job in state.jobs.values():
        for lid in state.job_links(job):
            on_link.setdefault(lid, []).append(job.profile)
    out: dict[str, float] = {}
    for path in sorted(paths):
        up, _ = domain_links(path)
        jobs = on_link.get(up, [])
        compat = score(jobs, state.cluster.links[up]) if jobs and up in state.cluster.links \
            else 1.0
        out[path[-1]] = min(out.get(path[-1], 1.0), compat)
    return out


def _topology(key: str, compat: Mapping[str, float]) -> dict[str, Any]:
    names = sorted(compat)
    return {
        "topologyKey": key,
        "originList": [
            {
                "origin": o,
                "costList": [
                    {"destination": d, "networkCost": cost_of(compat[o], compat[d])}
                    for d in names if d != o
                ],
            }
            for o in names
        ],
    }


def weights_entry(hierarchy: Hierarchy, state: State, score: Scorer) -> dict[str, Any]:
    """The ``weights`` entry named ``cassini`` for the current jobs."""
    depth = len(hierarchy.tiers)
    topologies = []
    if depth >= 2:
        topologies.append(_topology(REGION_KEY,
                                    domain_compatibility(hierarchy, state, depth - 2, score)))
    if depth >= 1:
        topologies.append(_topology(ZONE_KEY,
                                    domain_compatibility(hierarchy, state, depth - 1, score)))
    return {"name": WEIGHTS_NAME, "topologyList": topologies}


def with_entry(obj: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The NetworkTopology object with its ``weights`` entry of that name replaced (or
    added), the others kept."""
    spec = dict(obj.get("spec") or {})
    weights = [w for w in spec.get("weights") or [] if w.get("name") != entry["name"]]
    spec["weights"] = [*weights, entry]
    spec.setdefault("configmapName", "")
    return {**obj, "spec": spec}


def cassini_scorer(precision_deg: float) -> Scorer:
    """CASSINI's link compatibility score (:func:`cassini.circle.compatibility_score`)."""
    from cassini.circle import compatibility_score

    def score(jobs: Sequence[JobProfile], capacity_bps: float) -> float:
        return float(compatibility_score(list(jobs), capacity_bps,
                                         precision_deg=precision_deg).score)

    return score
