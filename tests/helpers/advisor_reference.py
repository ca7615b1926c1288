"""The advisor's hot paths as they were before the speed work of issue 22 §3 (commit
9922df3), kept as references: the fast paths in ``cassini.circle``, ``cassini.refine`` and
``cassini.affinity`` must give the same numbers bit for bit (tests/test_advisor_fast_paths.py).
Plain numpy, one array operation per job and per link, as the code then was."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import networkx as nx
import numpy as np

from cassini.circle import LinkSolution, UnifiedPeriod, excess, roll
from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.refine import _proposals


def unified_period(
    iteration_times_s: Sequence[float],
    *,
    resolution_s: float = 1e-3,
    max_period_factor: int = 8,
    tolerance: float = 0.01,
) -> UnifiedPeriod:
    """``cassini.circle.unified_period`` on arrays (before: every step a numpy call)."""
    if len(iteration_times_s) == 0:
        raise InputError("jobs", "must not be empty")
    times = np.asarray(iteration_times_s, float)
    if np.any(~np.isfinite(times)) or np.any(times <= 0):
        raise InputError("iteration_time_s", "must be finite and > 0")
    ticks = np.maximum(1, np.rint(times / resolution_s)).astype(np.int64)
    cap_ticks = max_period_factor * int(ticks.max())
    lcm = 1
    for t in ticks.tolist():
        lcm = math.lcm(lcm, t)
        if lcm > cap_ticks:
            break
    if lcm <= cap_ticks:
        period_s = lcm * resolution_s
        repeats = tuple(int(lcm // t) for t in ticks.tolist())
        exact = True
    else:
        cap_s = max_period_factor * float(times.max())
        counts = np.floor(cap_s / times).astype(np.int64)
        periods = np.concatenate(
            [t * np.arange(1, c + 1) for t, c in zip(times, counts, strict=True)]
        )
        periods = np.unique(periods[periods >= times.max()])
        reps = np.floor(periods[:, None] / times[None, :] + 1e-9)
        worst = np.max(periods[:, None] / (reps * times[None, :]) - 1.0, axis=1)
        within = np.nonzero(worst <= tolerance)[0]
        best = int(within[0]) if within.size else int(np.argmin(worst))
        period_s = float(periods[best])
        repeats = tuple(int(r) for r in reps[best])
        exact = False
    error = float(np.max(np.abs(period_s / np.asarray(repeats, float) - times) / times))
    return UnifiedPeriod(period_s, repeats, error, exact and error <= tolerance)  # see circle


def rotation_period(vector: np.ndarray) -> int:
    """``cassini.circle.rotation_period``, one divisor at a time."""
    n = vector.size
    atol = 1e-9 * max(1.0, float(np.abs(vector).max()))
    for s in (d for d in range(1, n) if n % d == 0):
        if np.abs(vector[s:] - vector[:-s]).max() <= atol:
            return s
    return n


def rotation_matrix(vector: np.ndarray, count: int) -> np.ndarray:
    """``cassini.circle._rotation_matrix`` with its index built each call."""
    n = vector.size
    idx = (np.arange(n)[None, :] - np.arange(count)[:, None]) % n
    return vector[idx]


class _LinkState:
    """A link's demand at the current rotations, one link at a time."""

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
    """``cassini.refine.refine_shifts`` scoring each link of a job on its own."""
    result = dict(shifts)
    period = {j: p.iteration_time_s for j, p in profiles.items()}
    for component in nx.connected_components(graph):
        sub = graph.subgraph(component)
        if sub.number_of_edges() < sub.number_of_nodes():
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
                shifts_j = np.array(
                    [result[j], *_proposals(j, links_of[j], link_solutions, result, period)]
                )
                rotations = {
                    link: link_solutions[link].rotations_of(j, shifts_j, period[j])
                    for link in links_of[j]
                }
                values = sum(states[link].scores_with(j, rotations[link]) for link in links_of[j])
                best = int(np.argmax(values))
                if values[best] > values[0] + 1e-12:
                    result[j] = float(shifts_j[best])
                    for link in links_of[j]:
                        states[link].move(j, int(rotations[link][best]))
                    moved = True
            if not moved:
                break
    return result


def best_common_rotation(
    sol: LinkSolution,
    shifts: Mapping[str, float],
    iteration_times_s: Mapping[str, float],
    jobs: Sequence[str],
    anchor: str,
) -> tuple[float, float]:
    """``cassini.affinity._best_common_rotation`` on arrays of rotations."""
    t_anchor = iteration_times_s[anchor]
    base = shifts[anchor] - sol.time_shifts_s[anchor]
    repeats = max(1, int(round(sol.unified_period_s / t_anchor)))
    deltas = base + t_anchor * np.arange(repeats)
    worst = np.zeros(repeats)
    for k in jobs:
        t_k = iteration_times_s[k]
        diff = np.mod(shifts[k] - sol.time_shifts_s[k] - deltas, t_k)
        worst = np.maximum(worst, np.minimum(diff, t_k - diff))
    i = int(np.argmin(worst))
    return float(deltas[i]), float(worst[i])


def affinity_graph(
    paths: Mapping[str, Sequence[str]],
    link_solutions: Mapping[str, LinkSolution] | None = None,
) -> nx.Graph:
    """``cassini.affinity.affinity_graph`` adding one node and one edge at a time."""
    jobs_on: dict[str, list[str]] = {}
    for job, links in paths.items():
        for link in dict.fromkeys(links):
            jobs_on.setdefault(link, []).append(job)
    graph = nx.Graph()
    for link, jobs in jobs_on.items():
        if len(jobs) < 2:
            continue
        graph.add_node(("link", link), kind="link", id=link)
        for job in jobs:
            graph.add_node(("job", job), kind="job", id=job)
            weight = 0.0
            if link_solutions is not None:
                weight = link_solutions[link].time_shifts_s[job]
            graph.add_edge(("job", job), ("link", link), weight=weight)
    return graph


def loop_through(graph: nx.Graph, node: tuple[str, str]) -> str:
    """``cassini.affinity.LoopNames.through``, with a cycle basis per call."""
    for cycle in nx.cycle_basis(graph):
        if node in cycle:
            i = cycle.index(node)
            ordered = cycle[i:] + cycle[:i]
            if ordered[0][0] == "link":
                ordered = ordered[1:] + ordered[:1]
            return "-".join(n[1] for n in [*ordered, ordered[0]])
    return f"through {node[1]}"


def centre(
    vectors: np.ndarray,
    periods: list[int],
    capacity: float,
    rotations: list[int],
    margin: float = 0.15,
    sweeps: int = 3,
) -> list[int]:
    """``cassini.circle._centre`` blurring every job's demand up front."""
    n, angles = len(vectors), vectors.shape[1]
    width = int(round(margin * angles))
    if n < 2 or width < 1:
        return rotations
    kernel = np.zeros(angles)
    kernel[np.arange(-width, width + 1) % angles] = 1.0 / (2 * width + 1)
    blurred = np.real(np.fft.ifft(np.fft.fft(vectors, axis=1) * np.fft.fft(kernel)))
    rot = list(rotations)
    total = sum_rotated(vectors, rot)
    soft_total = sum_rotated(blurred, rot)
    tol = 1e-9 * capacity * angles
    tiny = 1e-9 * float(np.abs(blurred).max() ** 2) * angles
    mats: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for _ in range(sweeps):
        moved = False
        for i in range(1, n):
            if i not in mats:
                mats[i] = (
                    rotation_matrix(vectors[i], periods[i]),
                    rotation_matrix(blurred[i], periods[i]),
                )
            hard_m, soft_m = mats[i]
            rest = total - hard_m[rot[i]]
            soft_rest = soft_total - soft_m[rot[i]]
            hard = excess(rest[None, :] + hard_m, capacity).sum(axis=-1)
            penalty = soft_m @ soft_rest
            penalty[hard > hard[rot[i]] + tol] = np.inf
            k = int(np.argmin(penalty))
            if penalty[k] < penalty[rot[i]] - tiny:
                rot[i], moved = k, True
                total, soft_total = rest + hard_m[k], soft_rest + soft_m[k]
        if not moved:
            break
    return rot


def sum_rotated(vectors: np.ndarray, rotations: Sequence[int]) -> np.ndarray:
    """``cassini.circle.rotated_sum``."""
    total = np.zeros(vectors.shape[1])
    for v, k in zip(vectors, rotations, strict=True):
        total += roll(v, k)
    return total
