"""The links the running jobs are on (a mixin of the engine): paths, summed peak
demand per link, which links can congest and the groups they couple."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cassini.profile import JobProfile
from cassini.sim.network.flows import cycle_of
from cassini.sim.parts import priority as crux
from cassini.sim.parts.routing import collisions, crux_paths, route_path
from cassini.sim.state import RunningJob


class Routes:
    """Routing and link bookkeeping over the engine's ``running``, ``on_link`` and
    ``peak_on_link`` (bits/s) tables."""

    cluster: Any
    routing: Any
    seed: int
    collisions: int
    running: dict[str, RunningJob]
    on_link: dict[str, set[str]]
    peak_on_link: dict[str, float]
    _cross_rack: frozenset[str]

    def _racks(self, placement: Mapping[int, int]) -> list[int]:
        return sorted({self.cluster.rack_of(s) for s in placement})

    def route_candidate(self, job_id: str, placement: Mapping[int, int]) -> tuple[str, ...]:
        """The path a job would take on ``placement`` under this run's routing."""
        racks = self._racks(placement)
        spine = None
        if len(racks) > 1:
            spine = self.routing.spine(self.cluster, job_id, racks, self.seed, self.peak_on_link)
        return route_path(self.cluster, placement, spine)

    def _route(self, job_id: str, r: RunningJob, *, count: bool = False) -> None:
        """Give ``r`` its path (not yet on the links) and its Crux intensity."""
        racks = self._racks(r.placement)
        r.spine = None
        if len(racks) > 1:
            r.spine = self.routing.spine(self.cluster, job_id, racks, self.seed, self.peak_on_link)
            if count and r.spine is not None:
                self.collisions += collisions(self.cluster, racks, r.spine, self.peak_on_link)
        r.path = route_path(self.cluster, r.placement, r.spine)
        links = self.cluster.links
        r.intensity = crux.intensity(
            sum(r.placement.values()),
            compute_s(r.profile),
            r.profile.bits_per_iteration,
            min((links[link] for link in r.path), default=0.0),
        )

    def _link(self, job_id: str, r: RunningJob) -> None:
        for link in r.path:
            self.on_link.setdefault(link, set()).add(job_id)
            self.peak_on_link[link] = self.peak_on_link.get(link, 0.0) + r.profile.peak_rate_bps

    def _unlink(self, job_id: str, r: RunningJob) -> set[str]:
        """Take ``r`` off its links; return the jobs left on them."""
        neighbours: set[str] = set()
        for link in r.path:
            self.on_link[link].discard(job_id)
            self.peak_on_link[link] -= r.profile.peak_rate_bps
            neighbours |= self.on_link[link]
        return neighbours

    def _reroute(self) -> set[str]:
        """Crux's path selection over every running cross-rack job, in descending
        intensity, when the set of cross-rack jobs changed."""
        cross = frozenset(j for j, r in self.running.items() if r.spine is not None)
        if cross == self._cross_rack:
            return set()
        self._cross_rack = cross
        order = sorted(cross, key=lambda j: (-self.running[j].intensity, j))
        background = dict(self.peak_on_link)
        for j in order:  # route from scratch: only the single-rack traffic stays
            r = self.running[j]
            for link in r.path:
                background[link] -= r.profile.peak_rate_bps
        spines = crux_paths(
            self.cluster,
            [
                (j, self._racks(self.running[j].placement), self.running[j].profile.peak_rate_bps)
                for j in order
            ],
            background,
        )
        changed: set[str] = set()
        for j, k in spines.items():
            r = self.running[j]
            if k == r.spine:
                continue
            changed |= self._unlink(j, r) | {j}
            r.spine = k
            r.path = route_path(self.cluster, r.placement, k)
            self._link(j, r)
        return changed

    def coupling(self, link: str, extra_bps: float = 0.0) -> bool:
        """Whether the jobs on ``link`` (plus one more peaking at ``extra_bps``) can ever
        want more than its capacity; a link that cannot never slows a flow, so it couples
        nobody."""
        peak = self.peak_on_link.get(link, 0.0) + extra_bps
        return peak > self.cluster.links[link] * (1 + 1e-9)

    def component(self, seeds: set[str], limit: int | None = None) -> set[str]:
        """Running jobs connected to ``seeds`` through links that can congest; with
        ``limit``, the search stops once it holds more than ``limit`` jobs (a result of
        at most ``limit`` jobs is then the whole group)."""
        seen: set[str] = set()
        todo = list(seeds)
        coupled: dict[str, bool] = {}
        while todo:
            j = todo.pop()
            if j in seen or j not in self.running:
                continue
            seen.add(j)
            if limit is not None and len(seen) > limit:
                break
            for link in self.running[j].path:
                c = coupled.get(link)
                if c is None:
                    c = coupled[link] = self.coupling(link)
                if c:
                    todo.extend(self.on_link[link] - seen)
        return seen


def compute_s(profile: JobProfile) -> float:
    """Seconds per iteration outside communication phases (the GPU's compute)."""
    return float(sum(cycle_of(profile).gaps_s))
