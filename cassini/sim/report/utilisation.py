"""Utilisation over time, from a run's job records: per link and of the GPUs."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cassini.profile import JobProfile
from cassini.sim.parts.routing import path_count, route_path
from cassini.sim.results import JobRecord, SimResult
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster


@dataclass(frozen=True)
class Utilisation:
    """``edges``: bin edges in seconds (n + 1); ``links``: link ids, busiest (highest
    mean) first; ``link_share[i, k]``: mean utilisation of ``links[i]`` in bin k (0..1);
    ``gpu_allocated`` / ``gpu_effective``: fractions of all GPUs per bin."""

    edges: np.ndarray
    links: tuple[str, ...]
    link_share: np.ndarray
    gpu_allocated: np.ndarray
    gpu_effective: np.ndarray

    def busiest(self, n: int) -> list[tuple[str, float, float]]:
        """``(link, mean, peak)`` of the ``n`` busiest links."""
        return [
            (link, float(self.link_share[i].mean()), float(self.link_share[i].max()))
            for i, link in enumerate(self.links[:n])
        ]


def segments(job: JobRecord) -> Iterator[tuple[float, float, float]]:
    """``(t0, t1, mean iteration time)`` over the job's run."""
    points = list(job.timeline) or [(job.start_s, job.mean_iteration_s)]
    for k, (t0, it) in enumerate(points):
        t1 = points[k + 1][0] if k + 1 < len(points) else job.finish_s
        if t1 > t0:
            yield t0, t1, it


def _spread(out: np.ndarray, edges: np.ndarray, t0: float, t1: float, value: float) -> None:
    """Add ``value`` times the overlap of [t0, t1) with each bin, over the bin's width."""
    width = edges[1:] - edges[:-1]
    overlap = np.clip(np.minimum(edges[1:], t1) - np.maximum(edges[:-1], t0), 0, None)
    out += value * overlap / width


def link_weights(cluster: Cluster | Topology, servers: list[int]) -> dict[str, float]:
    """Each link a job on ``servers`` would load, with the share of its rate counted
    there, for a result that does not say how the run routed it (no ``routes``): 1 on a
    ``Cluster`` path; on a ``Topology``, the mean over its path indices."""
    if isinstance(cluster, Cluster):
        return dict.fromkeys(cluster.path(servers), 1.0)
    n = path_count(cluster, sorted({cluster.rack_of(s) for s in servers}))
    out: dict[str, float] = {}
    for k in range(n):
        for link in route_path(cluster, servers, k):
            out[link] = out.get(link, 0.0) + 1.0 / n
    return out


def routed_links(
    job: JobRecord,
    routes: Mapping[str, Sequence[tuple[float, Sequence[str]]]],
    cluster: Cluster | Topology,
) -> list[tuple[float, float, dict[str, float]]]:
    """``(t0 s, t1 s, {link: share of the job's rate})`` over the job's run: the links of
    each path the run routed it on (``SimResult.routes``: its chosen spine or path index,
    as the network model loaded it; from each placement, move or re-route to the next),
    each carrying its whole rate.  A result without the job's routes falls back on
    :func:`link_weights` of its placement."""
    paths = routes.get(job.job_id)
    if not paths:
        return [(-math.inf, math.inf, link_weights(cluster, [s for s, _ in job.placement]))]
    ends = [t for t, _ in paths[1:]] + [math.inf]
    starts = [-math.inf] + [t for t, _ in paths[1:]]  # the first from the job's start
    return [
        (t0, t1, dict.fromkeys(path, 1.0))
        for t0, t1, (_, path) in zip(starts, ends, paths, strict=True)
        if t1 > t0
    ]


def utilisation(
    result: SimResult,
    cluster: Cluster | Topology,
    library: Mapping[str, JobProfile],
    *,
    end_s: float | None = None,
    bins: int = 200,
) -> Utilisation:
    """Per-link and GPU utilisation of ``result`` in ``bins`` bins over [0, ``end_s``]
    (default: the last finish): each job's rate on the links it was routed on
    (:func:`routed_links`)."""
    end = end_s or max((j.finish_s for j in result.jobs), default=1.0) or 1.0
    edges = np.linspace(0.0, end, bins + 1)
    carried: dict[str, np.ndarray] = {}
    allocated = np.zeros(bins)
    effective = np.zeros(bins)
    for job in result.jobs:
        bits = library[job.model].bits_per_iteration
        spans = routed_links(job, result.routes, cluster)
        for t0, t1, it in segments(job):
            _spread(allocated, edges, t0, t1, job.gpus)
            _spread(effective, edges, t0, t1, job.gpus * job.dedicated_iteration_s / it)
            for a, b, path in spans if bits > 0 else ():
                lo, hi = max(t0, a), min(t1, b)
                if not path or hi <= lo:
                    continue
                rate = np.zeros(bins)
                _spread(rate, edges, lo, hi, bits / it)
                for link, weight in path.items():
                    if link not in carried:
                        carried[link] = np.zeros(bins)
                    carried[link] += rate * weight
    links = sorted(carried, key=lambda link: -carried[link].sum() / cluster.links[link])
    share = (
        np.array([carried[link] / cluster.links[link] for link in links])
        if links
        else np.zeros((0, bins))
    )
    return Utilisation(
        edges, tuple(links), share, allocated / cluster.gpus, effective / cluster.gpus
    )
