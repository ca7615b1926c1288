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

from collections.abc import Mapping

import networkx as nx
import numpy as np

from cassini.circle import LinkSolution, excess, roll
from cassini.profile import JobProfile


class _LinkState:
    """A link's demand at the current rotations, updated as jobs move; scoring many
    rotations of one job is one (rotations, |A|) array operation."""

    def __init__(self, sol: LinkSolution, rotations: dict[str, int]) -> None:
        self.sol = sol
        self.vector = {j: sol.vectors[i] for i, j in enumerate(sol.job_ids)}
        self.rot = dict(rotations)
        self.total = sum(roll(self.vector[j], self.rot[j]) for j in sol.job_ids)
        self.norm = sol.n_angles * sol.capacity_bps

    def _rolled(self, job: str, rotations: np.ndarray) -> np.ndarray:
        n = self.sol.n_angles
        return self.vector[job][(np.arange(n)[None, :] - rotations[:, None]) % n]

    def scores_with(self, job: str, rotations: np.ndarray) -> np.ndarray:
        """Link score with ``job`` at each of ``rotations`` (the others where they are)."""
        rest = self.total - roll(self.vector[job], self.rot[job])
        demand = rest[None, :] + self._rolled(job, rotations)
        return 1.0 - excess(demand, self.sol.capacity_bps).sum(axis=-1) / self.norm

    def move(self, job: str, rotation: int) -> None:
        v = self.vector[job]
        self.total = self.total - roll(v, self.rot[job]) + roll(v, rotation)
        self.rot[job] = rotation


def refine_shifts(
    graph: nx.Graph,
    link_solutions: Mapping[str, LinkSolution],
    profiles: Mapping[str, JobProfile],
    shifts: Mapping[str, float],
    *,
    sweeps: int = 5,
) -> dict[str, float]:
    """Improve one-shift-per-job assignments on the loopy components of an affinity graph.

    Parameters
    ----------
    graph : affinity graph (see :func:`cassini.affinity.affinity_graph`).
    link_solutions : each shared link's own optimum.
    profiles : job profiles by id.
    shifts : starting shifts (seconds), e.g. from Algorithm 1.
    sweeps : at most this many passes over the jobs.

    Returns
    -------
    New shifts (seconds, in [0, T_job)); jobs on tree components are unchanged.
    """
    result = dict(shifts)
    period = {j: p.iteration_time_s for j, p in profiles.items()}
    for component in nx.connected_components(graph):
        sub = graph.subgraph(component)
        if sub.number_of_edges() < sub.number_of_nodes():  # a tree: already optimal
            continue
        links = sorted(n[1] for n in component if n[0] == "link")
        jobs = sorted(n[1] for n in component if n[0] == "job")
        states = {
            link: _LinkState(
                link_solutions[link],
                {
                    j: int(
                        link_solutions[link].rotations_of(j, np.array([result[j]]), period[j])[0]
                    )
                    for j in link_solutions[link].job_ids
                },
            )
            for link in links
        }
        links_of = {j: sorted(link[1] for link in graph[("job", j)]) for j in jobs}
        for _ in range(sweeps):
            moved = False
            for j in jobs:
                # candidate 0 is staying put; the rest are the proposals
                shifts = np.array(
                    [result[j], *_proposals(j, links_of[j], link_solutions, result, period)]
                )
                rotations = {
                    link: link_solutions[link].rotations_of(j, shifts, period[j])
                    for link in links_of[j]
                }
                values = sum(states[link].scores_with(j, rotations[link]) for link in links_of[j])
                best = int(np.argmax(values))
                if values[best] > values[0] + 1e-12:
                    result[j] = float(shifts[best])
                    for link in links_of[j]:
                        states[link].move(j, int(rotations[link][best]))
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
