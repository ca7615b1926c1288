"""Affinity graph and unique time-shifts (CASSINI §4.1, Algorithm 1, Appendix A).

The affinity graph is bipartite: job nodes ``("job", id)`` for jobs sharing at least one
link with another job, link nodes ``("link", id)`` for links carrying more than one job,
and an edge for every job crossing a link, weighted by that job's time-shift on that link
(seconds, from :func:`cassini.circle.compatibility_score`).

Algorithm 1 walks each connected component breadth-first from a reference job at shift 0
and gives a job ``k`` reached from job ``j`` over link ``l`` the shift
``t_k = (t_j - w(j,l) + w(l,k)) mod T_k``.  On a tree this preserves every link's relative
shifts (Eq. 6).  The paper drops candidates whose graph has a loop; here a loop is kept
when the shifts around it agree on every link (checked by :func:`check_consistency`), and
when a link is entered while some of its jobs already have shifts, the link's common
rotation is chosen among all equivalent ones to agree with them.

A link whose relative shifts are not preserved is still sound when the final shifts score
as well on it as its own optimum (a link often has many optimal rotations, and another
link of the loop may pick a different one): such loops are accepted too.  When a loop
loses score, :func:`cassini.refine.refine_shifts` repairs the shifts by coordinate ascent;
only loops that still cost some link more than ``loop_tolerance`` of score are reported
as conflicts.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from cassini.circle import LinkSolution, score_at_shifts
from cassini.profile import JobProfile
from cassini.refine import refine_shifts

#: Score a loop may cost a link and still count as consistent: well below what the 5-degree
#: grid resolves (one angle holding a phase edge moves a score by ~1/72 * rate/capacity).
LOOP_TOLERANCE = 0.005


def job_node(job_id: str) -> tuple[str, str]:
    return ("job", job_id)


def link_node(link_id: str) -> tuple[str, str]:
    return ("link", link_id)


def affinity_graph(
    paths: Mapping[str, Sequence[str]],
    link_solutions: Mapping[str, LinkSolution] | None = None,
) -> nx.Graph:
    """Bipartite affinity graph of a placement.

    Parameters
    ----------
    paths : job id -> the ids of the links its traffic crosses.
    link_solutions : link id -> solution for that link; when given, each edge gets
        ``weight`` = the job's shift on the link (seconds).

    Returns
    -------
    networkx.Graph with ``kind`` ("job"/"link") and ``id`` on every node.

    Examples
    --------
    >>> g = affinity_graph({"j1": ["l1"], "j2": ["l1", "l2"], "j3": ["l2"], "j4": ["l3"]})
    >>> sorted(n[1] for n in g if n[0] == "link")
    ['l1', 'l2']
    """
    jobs_on: dict[str, list[str]] = {}
    for job, links in paths.items():
        for link in dict.fromkeys(links):  # a link listed twice is crossed once
            jobs_on.setdefault(link, []).append(job)
    # nodes and edges in the order of one add_node/add_edge at a time, added in bulk
    nodes: dict[tuple[str, str], dict[str, str]] = {}  # first appearance, as add_node
    edges: list[tuple[tuple[str, str], tuple[str, str], dict[str, float]]] = []
    for link, jobs in jobs_on.items():
        if len(jobs) < 2:
            continue
        l_node = link_node(link)
        nodes[l_node] = {"kind": "link", "id": link}
        shifts = link_solutions[link].time_shifts_s if link_solutions is not None else None
        for job in jobs:
            j_node = job_node(job)
            if j_node not in nodes:
                nodes[j_node] = {"kind": "job", "id": job}
            weight = shifts[job] if shifts is not None else 0.0
            edges.append((j_node, l_node, {"weight": weight}))
    graph = nx.Graph()
    # the nodes alone, then their attributes: ``add_nodes_from`` given (node, dict) pairs
    # first tries each pair as a node and pays for a TypeError per node
    graph.add_nodes_from(nodes)
    nx.set_node_attributes(graph, nodes)
    graph.add_edges_from(edges)
    return graph


@dataclass(frozen=True)
class ShiftAssignment:
    """One time-shift per job (seconds, in [0, T_job)) and what the check found.

    ``conflicts`` is empty when every link keeps its optimal score; ``link_scores`` are the
    scores the final shifts achieve on each shared link; ``loops`` is the number of
    independent cycles in the graph (0 for the trees of the paper).
    """

    time_shifts_s: dict[str, float]
    conflicts: tuple[str, ...]
    loops: int
    link_scores: dict[str, float]
    max_loss: float = 0.0  # largest (link optimum - achieved score) over the links
    repaired: bool = False  # the loop repair changed the shifts

    @property
    def consistent(self) -> bool:
        return not self.conflicts


def time_shifts(
    graph: nx.Graph,
    link_solutions: Mapping[str, LinkSolution],
    profiles: Mapping[str, JobProfile],
    *,
    repair: bool = True,
    loop_tolerance: float = LOOP_TOLERANCE,
) -> ShiftAssignment:
    """Algorithm 1: one time-shift per job from the per-link shifts on the edges.

    The reference job of each component (shift 0) is the one on most shared links, ties
    broken by id, so results are deterministic.  Jobs not in the graph are not returned.
    When loops lose score and ``repair`` is set, the shifts are refined (and kept only if
    the total achieved score improves).
    """
    iteration_times_s = {j: p.iteration_time_s for j, p in profiles.items()}
    shifts: dict[str, float] = {}
    anchored: set[str] = set()
    components = list(nx.connected_components(graph))
    for component in sorted(components, key=_component_key):
        jobs = [n for n in component if n[0] == "job"]
        ref = min(jobs, key=lambda n: (-graph.degree(n), n[1]))
        shifts[ref[1]] = 0.0
        queue = deque([ref])
        while queue:
            j = queue.popleft()
            for l_node in sorted(graph[j]):
                link = l_node[1]
                if link in anchored:
                    continue
                anchored.add(link)
                sol = link_solutions[link]
                delta = _link_rotation(sol, shifts, iteration_times_s, j[1])
                for k_node in sorted(graph[l_node]):
                    k = k_node[1]
                    if k not in shifts:
                        # Python's % on floats is np.mod's
                        shifts[k] = float((sol.time_shifts_s[k] + delta) % iteration_times_s[k])
                        queue.append(k_node)
    loops = graph.number_of_edges() - graph.number_of_nodes() + len(components)
    check = dict(score_tolerance=loop_tolerance, loop_names=LoopNames(graph))
    conflicts, realised = check_consistency(graph, link_solutions, shifts, profiles, **check)
    repaired = False
    if loops and repair and _loss(realised, link_solutions) > 1e-9:
        better = refine_shifts(graph, link_solutions, profiles, shifts, components=components)
        c2, r2 = check_consistency(graph, link_solutions, better, profiles, **check)
        if sum(r2.values()) > sum(realised.values()) + 1e-12:
            shifts, conflicts, realised, repaired = better, c2, r2, True
    return ShiftAssignment(
        shifts, tuple(conflicts), loops, realised, _loss(realised, link_solutions), repaired
    )


def _loss(realised: Mapping[str, float], link_solutions: Mapping[str, LinkSolution]) -> float:
    return max((link_solutions[k].score - v for k, v in realised.items()), default=0.0)


def check_consistency(
    graph: nx.Graph,
    link_solutions: Mapping[str, LinkSolution],
    shifts: Mapping[str, float],
    profiles: Mapping[str, JobProfile],
    *,
    score_tolerance: float = 1e-9,
    loop_names: LoopNames | None = None,
) -> tuple[list[str], dict[str, float]]:
    """Check the final shifts on every shared link.

    First Eq. 6: the final shifts equal the link's own shifts up to one common rotation
    ``delta`` of the whole link (``shift_j = t_j^l + delta (mod T_j)`` for every job ``j``
    on ``l``), misalignments up to half an angle being indistinguishable on the grid.
    Where that fails, the link's score at the final shifts is computed on the same grid;
    the link is still sound if it is within ``score_tolerance`` of the link's optimum.
    ``loop_names`` (of this graph) may be shared between checks of the same graph.

    Returns
    -------
    (problems, link_scores): one message per link that loses score, naming a loop
    through it (empty when consistent), and the score each link achieves.
    """
    iteration_times_s = {j: p.iteration_time_s for j, p in profiles.items()}
    problems, realised = [], {}
    loop_names = loop_names if loop_names is not None else LoopNames(graph)
    for l_node in sorted(n for n in graph if n[0] == "link"):
        link = l_node[1]
        sol = link_solutions[link]
        jobs = sorted(k[1] for k in graph[l_node])
        realised[link] = sol.score
        if _aligned_within(sol, shifts, iteration_times_s, jobs, jobs[0], _tolerance(sol)):
            continue
        score, _ = score_at_shifts(
            [profiles[j] for j in sol.job_ids],
            sol.capacity_bps,
            dict(shifts),
            sol.unified,
            sol.n_angles,
        )
        realised[link] = score
        if score < sol.score - score_tolerance:
            _, error = _best_common_rotation(sol, shifts, iteration_times_s, jobs, jobs[0])
            problems.append(
                f"loop {loop_names.through(l_node)} has inconsistent time-shifts: on link "
                f"{link} the relative shifts are off by {error * 1e3:.3g} ms and its score "
                f"drops from {sol.score:.3f} to {score:.3f}"
            )
    return problems, realised


def _link_rotation(
    sol: LinkSolution,
    shifts: Mapping[str, float],
    iteration_times_s: Mapping[str, float],
    entry_job: str,
) -> float:
    """Common rotation (seconds) for a link entered from ``entry_job``.  Every rotation
    ``t_entry - w(entry, l) + i * T_entry`` keeps the entry job's shift; pick the one that
    best agrees with the link's other jobs that already have shifts (loops)."""
    visited = [k for k in sol.time_shifts_s if k in shifts]
    delta, _ = _best_common_rotation(sol, shifts, iteration_times_s, visited, entry_job)
    return delta


def _best_common_rotation(
    sol: LinkSolution,
    shifts: Mapping[str, float],
    iteration_times_s: Mapping[str, float],
    jobs: Sequence[str],
    anchor: str,
) -> tuple[float, float]:
    """Among the rotations keeping ``anchor`` aligned, the one with the least worst
    misalignment (seconds) over ``jobs``; returns (rotation, misalignment)."""
    t_anchor = iteration_times_s[anchor]
    base = shifts[anchor] - sol.time_shifts_s[anchor]
    if len(jobs) == 1 and jobs[0] == anchor:
        # the anchor alone (a tree's link): the first rotation keeps it exactly
        # (misalignment 0.0), which no later one beats; the search's own values
        return float(base + t_anchor * 0), 0.0
    repeats = max(1, int(round(sol.unified_period_s / t_anchor)))
    # plain floats (a few jobs, a few rotations): Python's % on floats is np.mod's
    offsets = [(shifts[k] - sol.time_shifts_s[k], iteration_times_s[k]) for k in jobs]
    best_delta, best_worst = base, math.inf
    for i in range(repeats):
        delta = base + t_anchor * i
        worst = 0.0
        for offset, t_k in offsets:
            diff = (offset - delta) % t_k
            # max(worst, min(diff, t_k - diff)) without the builtins' call cost (the
            # same comparisons: min keeps its first argument unless the second is less)
            other = t_k - diff
            near = other if other < diff else diff
            if near > worst:
                worst = near
        if worst < best_worst:
            best_delta, best_worst = delta, worst
    return float(best_delta), float(best_worst)


def _aligned_within(
    sol: LinkSolution,
    shifts: Mapping[str, float],
    iteration_times_s: Mapping[str, float],
    jobs: Sequence[str],
    anchor: str,
    tolerance: float,
) -> bool:
    """Whether :func:`_best_common_rotation`'s misalignment is at most ``tolerance``
    seconds: some rotation keeps every job within it (the same arithmetic, stopping at
    the first job out of it and the first rotation that fits)."""
    if not jobs:
        return tolerance >= 0.0
    t_anchor = iteration_times_s[anchor]
    base = shifts[anchor] - sol.time_shifts_s[anchor]
    repeats = max(1, int(round(sol.unified_period_s / t_anchor)))
    offsets = [(shifts[k] - sol.time_shifts_s[k], iteration_times_s[k]) for k in jobs]
    for i in range(repeats):
        delta = base + t_anchor * i
        for offset, t_k in offsets:
            diff = (offset - delta) % t_k
            other = t_k - diff
            if (other if other < diff else diff) > tolerance:  # min(diff, other)
                break
        else:
            return True
    return False


def _tolerance(sol: LinkSolution) -> float:
    step = sol.unified_period_s / sol.n_angles
    return 0.5 * step + sol.unified.max_relative_error * sol.unified_period_s + 1e-9


class LoopNames:
    """Names of the loops of an affinity graph: for a node, the first cycle of
    ``nx.cycle_basis(graph)`` through it, written from a job.  The basis is found once, on
    the first name asked (not once per link that loses score: on a 16,384-GPU candidate
    that search was a third of the advisor's time)."""

    def __init__(self, graph: nx.Graph) -> None:
        self._graph = graph
        self._first: dict[tuple[str, str], list] | None = None

    def through(self, node: tuple[str, str]) -> str:
        if self._first is None:
            self._first = {}
            for cycle in nx.cycle_basis(self._graph):
                for n in cycle:
                    self._first.setdefault(n, cycle)
        cycle = self._first.get(node)
        if cycle is None:
            return f"through {node[1]}"
        i = cycle.index(node)
        ordered = cycle[i:] + cycle[:i]
        # start the printed loop at a job, as the paper draws them
        if ordered[0][0] == "link":
            ordered = ordered[1:] + ordered[:1]
        return "-".join(n[1] for n in [*ordered, ordered[0]])


def _component_key(component: set) -> str:
    return min(n[1] for n in component if n[0] == "job")
