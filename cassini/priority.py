"""Crux's GPU intensity and its priorities compressed to K hardware queues: the one rule
the simulator's priority sharing (:mod:`cassini.sim.engine`) and the testbed's ``prio``
fabric (:mod:`testbed.run.priorities`) both use (:func:`crux_levels`).

* Intensity ``I = W / t``: W the job's GPU compute per iteration (GPUs x compute
  seconds outside communication phases, GPU-seconds), t its iteration's bits over the
  slowest link of its path (seconds).  Priority ``P = k * I`` with k = 1 (Crux's k
  corrects for compute/communication overlap and iteration counts; our profiles give
  the phases outside compute already).
* Compression to K levels (:func:`max_k_cut_levels`): jobs that share a congestible link
  form a contention DAG (edge from the higher- to the lower-priority job, weight
  ``min(P_u, P_v)``: the intensity at stake when the two share a queue); over ``m``
  random topological orders, cut each order into at most K contiguous levels so that
  the weight of edges *between* levels is largest (dynamic programme, exact per order),
  and keep the best.  The simple rule :func:`band_levels` (K equal-count bands in
  descending intensity) is reported beside it on the same groups
  (``priority_cut_fraction``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence, Set

import numpy as np

from cassini import kernel_cache

#: random topological orders tried by the max-K-cut (Crux: m = 10)
ORDERS = 10


def intensity(gpus: int, compute_s: float, bits: float, slowest_bps: float) -> float:
    """Crux's GPU intensity (GPU-seconds of compute per second of communication); inf
    for a job that sends nothing."""
    if bits <= 0 or slowest_bps <= 0:
        return float("inf")
    return gpus * compute_s / (bits / slowest_bps)


def band_levels(order: Sequence[str], k: int) -> dict[str, int]:
    """K equal-count bands of ``order`` (highest priority first): level 0 .. k-1."""
    n = len(order)
    return {j: min(k - 1, i * k // max(1, n)) for i, j in enumerate(order)}


def cut_weight(levels: Mapping[str, int], edges: Mapping[tuple[str, str], float]) -> float:
    """Summed weight of the edges whose ends are in different levels."""
    return float(sum(w for (u, v), w in edges.items() if levels[u] != levels[v]))


def _random_topological(
    nodes: Sequence[str],
    indegree: Mapping[str, int],
    successors: Mapping[str, Sequence[str]],
    rng: np.random.Generator,
) -> list[str]:
    """A random topological order of the contention DAG (edges higher -> lower P):
    ``indegree`` counts each job's higher-priority neighbours, ``successors`` lists its
    lower-priority ones in priority order."""
    indeg = dict(indegree)
    ready = [j for j in nodes if indeg[j] == 0]
    out = []
    while ready:
        j = ready.pop(int(rng.integers(len(ready))))
        out.append(j)
        for v in successors[j]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return out


def _segment_costs(a: np.ndarray) -> np.ndarray:
    """``within[i, j]``: summed weight of the edges inside positions [i, j) (inf below
    the diagonal, 0 on it), from the upper-triangular weights ``a``."""
    n = len(a)
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = a.cumsum(0).cumsum(1)
    d = np.diag(p)
    within = d[None, :] - p - p.T + d[:, None]  # within[i, j]: segment [i, j)
    within[np.tril_indices(n + 1)] = np.inf
    within[np.arange(n + 1), np.arange(n + 1)] = 0.0
    return within


def _cut_programme(within: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The dynamic programme over ``within`` for up to ``k`` levels: the least cost of
    each prefix, and for each added level the best start of its last segment."""
    cost = within[0].copy()
    choices = np.zeros((max(0, k - 1), len(cost)), np.int64)
    for level in range(1, k):
        total = cost[:, None] + within
        arg = total.argmin(axis=0)
        choices[level - 1] = arg
        cost = total[arg, np.arange(len(cost))]
    return cost, choices


try:  # the same steps compiled where numba is installed (the [sim] extra)
    from numba import njit

    kernel_cache.ensure_fresh()  # drop cached code another changed source made stale

    @njit(cache=True)
    def _cut_programme_compiled(within, k):  # pragma: no cover - compiled
        m = within.shape[0]
        cost = within[0].copy()
        choices = np.zeros((max(0, k - 1), m), np.int64)
        new = np.empty(m)
        for level in range(1, k):
            for j in range(m):
                best, arg = np.inf, 0
                for i in range(m):
                    v = cost[i] + within[i, j]
                    if v < best or (i == 0 and not v > best):
                        best, arg = v, i
                choices[level - 1, j] = arg
                new[j] = best
            cost[:] = new
        return cost, choices

    @njit(cache=True)
    def _segment_costs_compiled(a):  # pragma: no cover - compiled
        n = a.shape[0]
        column = np.zeros(n)  # a.cumsum(0)'s row i, then .cumsum(1): the same sums in order
        p = np.zeros((n + 1, n + 1))
        for i in range(n):
            run = 0.0
            for j in range(n):
                column[j] = a[i, j] if i == 0 else column[j] + a[i, j]
                run = column[j] if j == 0 else run + column[j]
                p[i + 1, j + 1] = run
        within = np.empty((n + 1, n + 1))
        for i in range(n + 1):
            for j in range(n + 1):
                if i > j:
                    within[i, j] = np.inf
                elif i == j:
                    within[i, j] = 0.0
                else:
                    within[i, j] = ((p[j, j] - p[i, j]) - p[j, i]) + p[i, i]
        return within

except ImportError:  # pragma: no cover - exercised where numba is absent
    _cut_programme_compiled = None
    _segment_costs_compiled = None


def _best_cut_at(ends: np.ndarray, weights: np.ndarray, n: int, k: int) -> tuple[float, list[int]]:
    """Least within-level weight cutting an order of ``n`` jobs into <= k contiguous
    levels, with the level of each position; the edges are given by the positions of
    their ends in the order (one row per edge) and their ``weights``."""
    a = np.zeros((n, n))
    lo, hi = ends.min(axis=1), ends.max(axis=1)
    a[lo, hi] += weights  # one edge per pair: each cell gets at most one weight
    within = (_segment_costs_compiled or _segment_costs)(a)
    programme = _cut_programme_compiled or _cut_programme
    cost, choices = programme(within, k)
    # backtrack from the full order
    levels = [0] * n
    j, level = n, len(choices)
    while level > 0:
        i = int(choices[level - 1][j])
        for x in range(i, j):
            levels[x] = level
        j, level = i, level - 1
    # renumber used levels 0.. in order
    used = sorted(set(levels))
    levels = [used.index(x) for x in levels]
    return float(cost[n]), levels


def max_k_cut_levels(
    priority: Mapping[str, float],
    edges: Mapping[tuple[str, str], float],
    k: int,
    rng: np.random.Generator,
    orders: int = ORDERS,
) -> dict[str, int]:
    """Levels 0 (highest) .. k-1 for the jobs of ``priority`` maximising the weight of
    contention ``edges`` cut between levels, over ``orders`` random topological orders."""
    nodes = sorted(priority, key=lambda j: (-priority[j], j))
    if len(nodes) <= k:
        return {j: i for i, j in enumerate(nodes)}
    neighbours: dict[str, set[str]] = {j: set() for j in nodes}
    for u, v in edges:
        neighbours[u].add(v)
        neighbours[v].add(u)
    # in priority order, not a set's (string hashes change from process to process: the
    # random orders, and so the levels, would too)
    rank = {j: i for i, j in enumerate(nodes)}
    adjacent = {j: sorted(vs, key=rank.__getitem__) for j, vs in neighbours.items()}
    indegree, successors = {}, {}
    for j, vs in adjacent.items():
        split = bisect.bisect_left([rank[v] for v in vs], rank[j])
        indegree[j], successors[j] = split, vs[split:]
    ends = np.array([(rank[u], rank[v]) for u, v in edges], np.int64).reshape(-1, 2)
    weights = np.array(list(edges.values()), float)
    best: tuple[float, list[str], list[int]] | None = None
    for t in range(orders):
        order = nodes if t == 0 else _random_topological(nodes, indegree, successors, rng)
        pos = np.empty(len(nodes), np.int64)
        pos[[rank[j] for j in order]] = np.arange(len(order))
        within, levels = _best_cut_at(pos[ends], weights, len(order), k)
        if best is None or within < best[0] - 1e-12:
            best = (within, order, levels)
    assert best is not None
    return dict(zip(best[1], best[2], strict=True))


def crux_levels(
    intensities: Mapping[str, float],
    shared: Mapping[str, Set[str]],
    k: int,
    rng: np.random.Generator,
) -> tuple[dict[str, int], dict[str, float], dict[tuple[str, str], float]]:
    """Crux's priority levels 0 (highest) .. k-1 for jobs of GPU ``intensities``, where
    ``shared`` holds each job's congestible links: a job that sends nothing (inf) ranks
    above every finite one, jobs sharing a link are joined by a contention edge of weight
    ``min(P_u, P_v)``, and :func:`max_k_cut_levels` compresses the order to ``k`` levels.
    Returns the levels, the priorities used and the edges."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    finite = max((p for p in intensities.values() if math.isfinite(p)), default=1.0)
    prio = {j: (p if math.isfinite(p) else 2 * finite) for j, p in intensities.items()}
    ids = list(prio)
    index = {j: a for a, j in enumerate(ids)}
    on_link: dict[str, list[int]] = {}
    for j in ids:
        for link in shared.get(j, ()):
            on_link.setdefault(link, []).append(index[j])
    pairs = {(a, b) for members in on_link.values() for a in members for b in members if a < b}
    # (in the order of ids, the lower index first: the order every sum over edges takes)
    edges = {(ids[a], ids[b]): min(prio[ids[a]], prio[ids[b]]) for a, b in sorted(pairs)}
    return max_k_cut_levels(prio, edges, k, rng), prio, edges
