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

import networkx as nx
import numpy as np

from cassini.circle import LinkSolution, excess, roll
from cassini.profile import JobProfile


class _Component:
    """The links of one loopy component at the current rotations of their jobs.

    ``totals[n][row[link]]`` is the summed demand per angle (bits/s) of a link with ``n``
    angles.  Each job keeps, over the links it crosses (in id order), its demand vectors
    and current rotations, so that scoring many rotations of one job on all its links is
    one (links, rotations, |A|) array operation: the same floating-point operations, row
    by row, as scoring each link on its own (tested against the per-link reference)."""

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
        rows: dict[int, list[np.ndarray]] = {}
        self.row: dict[str, int] = {}
        for link in links:
            sol = link_solutions[link]
            step = sol.unified.period_s / sol.n_angles
            total = 0
            for i, j in enumerate(sol.job_ids):
                t_eff = sol.unified.period_s / sol.unified.repeats[i]
                # LinkSolution.rotations_of, one shift at a time
                factor[link, j] = t_eff / period[j] / step
                # round() halves to even, as np.rint
                rot[link, j] = round(shifts[j] * factor[link, j]) % sol.n_angles
                total = total + roll(sol.vectors[i], rot[link, j])
            same_size = rows.setdefault(sol.n_angles, [])
            self.row[link] = len(same_size)
            same_size.append(total)
        self.totals = {n: np.vstack(t) for n, t in rows.items()}
        self.jobs = {
            j: [
                _Group.of(
                    [link for link in on if link_solutions[link].n_angles == n],
                    [k for k, link in enumerate(on) if link_solutions[link].n_angles == n],
                    j,
                    link_solutions,
                    self.row,
                    factor,
                    rot,
                )
                for n in dict.fromkeys(link_solutions[link].n_angles for link in on)
            ]
            for j, on in links_of.items()
        }

    def scores(self, job: str, shifts: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Total score of ``job``'s links (summed in link id order) with the job at each of
        ``shifts`` (seconds; the others where they are), and per group of its links the
        rotations (links, shifts) it takes there."""
        groups = self.jobs[job]
        per_link: list[np.ndarray] = [np.empty(0)] * sum(len(g.positions) for g in groups)
        rotations = []
        for g in groups:
            rot = np.rint(shifts[None, :] * g.factors[:, None]).astype(np.int64) % g.n
            rest = self.totals[g.n][g.rows] - g.current
            demand = rest[:, None, :] + g.windows[g.lead, g.n - rot]
            score = 1.0 - excess(demand, g.capacity).sum(axis=-1) / g.norm
            for k, pos in enumerate(g.positions):
                per_link[pos] = score[k]
            rotations.append(rot)
        return sum(per_link), rotations

    def move(self, job: str, rotations: list[np.ndarray], index: int) -> None:
        """Put ``job`` at the rotations of its ``index``-th scored shift."""
        for g, rot in zip(self.jobs[job], rotations, strict=True):
            new = g.windows[g.lead[:, 0], g.n - rot[:, index]]
            totals = self.totals[g.n]
            totals[g.rows] = totals[g.rows] - g.current + new
            g.current = new


@dataclass
class _Group:
    """A job's links with ``n`` angles: their rows in the component's totals, their
    positions among the job's links, the job's demand on each (``windows[l, n - k]`` is
    its vector rolled by ``k`` angles, bits/s), shift-to-angle factors, capacities (bits/s,
    shape (links, 1, 1)), score norms (``n * capacity``, shape (links, 1)), the job's
    demand on each at its current rotation and ``lead`` (``arange(links)`` as a column)."""

    n: int
    positions: list[int]
    rows: np.ndarray
    windows: np.ndarray
    factors: np.ndarray
    capacity: np.ndarray
    norm: np.ndarray
    current: np.ndarray
    lead: np.ndarray

    @classmethod
    def of(
        cls,
        links: list[str],
        positions: list[int],
        job: str,
        link_solutions: Mapping[str, LinkSolution],
        row: Mapping[str, int],
        factor: Mapping[tuple[str, str], float],
        rot: Mapping[tuple[str, str], int],
    ) -> _Group:
        sols = [link_solutions[link] for link in links]
        n = sols[0].n_angles
        vectors = np.vstack([sol.vectors[sol.job_ids.index(job)] for sol in sols])
        doubled = np.concatenate([vectors, vectors], axis=1)
        step_link, step_angle = doubled.strides
        windows = np.lib.stride_tricks.as_strided(
            doubled, (len(links), n + 1, n), (step_link, step_angle, step_angle), writeable=False
        )
        lead = np.arange(len(links))[:, None]
        rotations = np.array([rot[link, job] for link in links], dtype=np.int64)
        return cls(
            n=n,
            positions=positions,
            rows=np.array([row[link] for link in links], dtype=np.int64),
            windows=windows,
            factors=np.array([factor[link, job] for link in links], float),
            capacity=np.array([sol.capacity_bps for sol in sols], float)[:, None, None],
            norm=np.array([n * sol.capacity_bps for sol in sols], float)[:, None],
            current=windows[lead[:, 0], n - rotations],
            lead=lead,
        )


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
        for _ in range(sweeps):
            moved = False
            for j in jobs:
                # candidate 0 is staying put; the rest are the proposals
                shifts = np.array(
                    [result[j], *_proposals(j, links_of[j], link_solutions, result, period)]
                )
                values, rotations = state.scores(j, shifts)
                best = int(np.argmax(values))
                if values[best] > values[0] + 1e-12:
                    result[j] = float(shifts[best])
                    state.move(j, rotations, best)
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
    neighbour: ``s_k - t_k^l + t_job^l`` (mod T_job)."""
    out = set()
    for link in links:
        sol = link_solutions[link]
        for k in sol.job_ids:
            if k != job:
                s = (shifts[k] - sol.time_shifts_s[k] + sol.time_shifts_s[job]) % period[job]
                out.add(round(s, 12))
    return sorted(out)
