"""Loop repair: one time-shift per job when the affinity graph has loops.

On a tree, Algorithm 1 keeps every link at its own optimum.  Around a loop the links'
optima may disagree, and the paper drops the candidate; on a large cluster with jobs
spread over several servers nearly every candidate has loops, so that leaves nothing to
choose from.  Here the shifts from Algorithm 1 are improved by coordinate ascent on the
sum of the link scores the shifts achieve: each job in turn moves to the best of a few
proposals, namely the shifts that put it where each of its links' optimum wants it
relative to each neighbour on that link (plus staying put).  Scores are read off the
links' precomputed angle vectors, a job's shift being rounded to the nearest angle of
each link, so a move costs a few vector additions.  Every accepted move strictly raises
the total, so the ascent terminates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx
import numpy as np

from cassini.circle import LinkSolution, excess, roll
from cassini.profile import JobProfile


class _Component:
    """The links of one loopy component at the current rotations of their jobs.

    ``totals[n][row[link]]`` is the summed demand per angle (bits/s) of a link with ``n``
    angles.  Every (job, link) pair of the component is a row of one :class:`_Pairs`
    table per angle count, ordered by job then link id, so a job's links are a slice of
    it and scoring many rotations of one job on all its links is one (links, rotations,
    |A|) array operation: the same floating-point operations, row by row, as scoring
    each link on its own (tested against the per-link reference)."""

    def __init__(
        self,
        links: list[str],
        links_of: Mapping[str, list[str]],
        link_solutions: Mapping[str, LinkSolution],
        shifts: Mapping[str, float],
        period: Mapping[str, float],
    ) -> None:
        factor: dict[tuple[str, str], float] = {}
        rot: dict[tuple[str, str], int] = {}
        vector: dict[tuple[str, str], np.ndarray] = {}
        totals: dict[int, list[np.ndarray]] = {}
        row: dict[str, int] = {}
        for link in links:
            sol = link_solutions[link]
            step = sol.unified.period_s / sol.n_angles
            total = 0
            for i, j in enumerate(sol.job_ids):
                t_eff = sol.unified.period_s / sol.unified.repeats[i]
                # LinkSolution.rotations_of, one shift at a time (round() halves to even,
                # as np.rint)
                factor[link, j] = t_eff / period[j] / step
                rot[link, j] = round(shifts[j] * factor[link, j]) % sol.n_angles
                vector[link, j] = sol.vectors[i]
                total = total + roll(sol.vectors[i], rot[link, j])
            same_size = totals.setdefault(sol.n_angles, [])
            row[link] = len(same_size)
            same_size.append(total)
        self.totals = {n: np.vstack(t) for n, t in totals.items()}
        pairs: dict[int, list[tuple[str, str]]] = {n: [] for n in totals}
        # per job: (angle count, first row, end row, positions among its links)
        self.groups: dict[str, list[tuple[int, int, int, list[int]]]] = {}
        for j, on in links_of.items():
            groups = []
            for n in dict.fromkeys(link_solutions[link].n_angles for link in on):
                at = [k for k, link in enumerate(on) if link_solutions[link].n_angles == n]
                first = len(pairs[n])
                pairs[n] += [(on[k], j) for k in at]
                groups.append((n, first, len(pairs[n]), at))
            self.groups[j] = groups
        self.pairs = {
            n: _Pairs.of(n, p, link_solutions, row, factor, rot, vector)
            for n, p in pairs.items()
            if p
        }

    def scores(self, job: str, shifts: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Total score of ``job``'s links (summed in link id order) with the job at each of
        ``shifts`` (seconds; the others where they are), and per group of its links the
        rotations (links, shifts) it takes there."""
        groups = self.groups[job]
        per_link: list[np.ndarray] = [np.empty(0)] * sum(len(at) for *_, at in groups)
        rotations = []
        for n, a, b, at in groups:
            t = self.pairs[n]
            rot = np.rint(shifts[None, :] * t.factors[a:b, None]).astype(np.int64) % n
            rest = self.totals[n][t.rows[a:b]] - t.current[a:b]
            demand = rest[:, None, :] + t.windows[a:b][_lead(b - a), n - rot]
            score = 1.0 - excess(demand, t.capacity[a:b]).sum(axis=-1) / t.norm[a:b]
            for k, pos in enumerate(at):
                per_link[pos] = score[k]
            rotations.append(rot)
        return sum(per_link), rotations

    def move(self, job: str, rotations: list[np.ndarray], index: int) -> None:
        """Put ``job`` at the rotations of its ``index``-th scored shift."""
        for (n, a, b, _), rot in zip(self.groups[job], rotations, strict=True):
            t = self.pairs[n]
            new = t.windows[a:b][_lead(b - a)[:, 0], n - rot[:, index]]
            totals, rows = self.totals[n], t.rows[a:b]
            totals[rows] = totals[rows] - t.current[a:b] + new
            t.current[a:b] = new


@dataclass(frozen=True)
class _Pairs:
    """The (link, job) pairs of a component whose links have ``n`` angles (ordered by job
    then link): each link's
    row in the totals, the job's demand on it (``windows[p, n - k]`` is the vector rolled
    by ``k`` angles, bits/s), shift-to-angle factors, capacities (bits/s, shape (pairs,
    1, 1)), score norms (``n * capacity``, shape (pairs, 1)) and the job's demand at its
    current rotation (updated as jobs move)."""

    rows: np.ndarray
    windows: np.ndarray
    factors: np.ndarray
    capacity: np.ndarray
    norm: np.ndarray
    current: np.ndarray

    @classmethod
    def of(
        cls,
        n: int,
        pairs: list[tuple[str, str]],
        link_solutions: Mapping[str, LinkSolution],
        row: Mapping[str, int],
        factor: Mapping[tuple[str, str], float],
        rot: Mapping[tuple[str, str], int],
        vector: Mapping[tuple[str, str], np.ndarray],
    ) -> _Pairs:
        vectors = np.vstack([vector[p] for p in pairs])
        doubled = np.concatenate([vectors, vectors], axis=1)
        step_pair, step_angle = doubled.strides
        windows = np.lib.stride_tricks.as_strided(
            doubled, (len(pairs), n + 1, n), (step_pair, step_angle, step_angle), writeable=False
        )
        capacity = np.array([link_solutions[link].capacity_bps for link, _ in pairs], float)
        rotations = np.array([rot[p] for p in pairs], dtype=np.int64)
        return cls(
            rows=np.array([row[link] for link, _ in pairs], dtype=np.int64),
            windows=windows,
            factors=np.array([factor[p] for p in pairs], float),
            capacity=capacity[:, None, None],
            norm=np.array([n * link_solutions[link].capacity_bps for link, _ in pairs])[:, None],
            current=windows[np.arange(len(pairs)), n - rotations],
        )


@lru_cache(maxsize=64)
def _lead(count: int) -> np.ndarray:
    """``arange(count)`` as a column (read-only, shared)."""
    lead = np.arange(count)[:, None]
    lead.setflags(write=False)
    return lead


def refine_shifts(
    graph: nx.Graph,
    link_solutions: Mapping[str, LinkSolution],
    profiles: Mapping[str, JobProfile],
    shifts: Mapping[str, float],
    *,
    sweeps: int = 5,
    components: Iterable[set] | None = None,
) -> dict[str, float]:
    """Improve one-shift-per-job assignments on the loopy components of an affinity graph.

    Parameters
    ----------
    graph : affinity graph (see :func:`cassini.affinity.affinity_graph`).
    link_solutions : each shared link's own optimum.
    profiles : job profiles by id.
    shifts : starting shifts (seconds), e.g. from Algorithm 1.
    sweeps : at most this many passes over the jobs.
    components : the graph's connected components (node sets), when already known.

    Returns
    -------
    New shifts (seconds, in [0, T_job)); jobs on tree components are unchanged.
    """
    result = dict(shifts)
    period = {j: p.iteration_time_s for j, p in profiles.items()}
    if components is None:
        components = nx.connected_components(graph)
    for component in components:
        jobs = sorted(n[1] for n in component if n[0] == "job")
        # bipartite: every edge has one job end
        edges = sum(graph.degree(("job", j)) for j in jobs)
        if edges < len(component):  # a tree: already optimal
            continue
        links = sorted(n[1] for n in component if n[0] == "link")
        links_of = {j: sorted(link[1] for link in graph[("job", j)]) for j in jobs}
        state = _Component(links, links_of, link_solutions, result, period)
        # a job whose links' jobs (itself included) have not moved since it was last
        # scored would score the same again and stay: it is skipped until one moves
        sharing = {
            j: {k for link in links_of[j] for k in link_solutions[link].job_ids} for j in jobs
        }
        stale = set(jobs)
        for _ in range(sweeps):
            moved = False
            for j in jobs:
                if j not in stale:
                    continue
                stale.discard(j)
                # candidate 0 is staying put; the rest are the proposals
                shifts = np.array(
                    [result[j], *_proposals(j, links_of[j], link_solutions, result, period)]
                )
                values, rotations = state.scores(j, shifts)
                best = int(values.argmax())
                if values[best] > values[0] + 1e-12:
                    result[j] = float(shifts[best])
                    state.move(j, rotations, best)
                    stale |= sharing[j]
                    moved = True
            if not moved:
                break
    return result


def _proposals(
    job: str,
    links: list[str],
    link_solutions: Mapping[str, LinkSolution],
    shifts: Mapping[str, float],
    period: Mapping[str, float],
) -> list[float]:
    """Shifts that restore, on one link, the optimum's placement of ``job`` relative to one
    neighbour: ``s_k - t_k^l + t_job^l`` (mod T_job), in ``[0, T_job)``: one that rounds
    to T_job is 0, the same point of the job's circle."""
    out = set()
    for link in links:
        sol = link_solutions[link]
        for k in sol.job_ids:
            if k != job:
                s = (shifts[k] - sol.time_shifts_s[k] + sol.time_shifts_s[job]) % period[job]
                s = round(s, 12)
                out.add(s if s < period[job] else 0.0)
    return sorted(out)
