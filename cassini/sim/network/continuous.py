"""The continuous network model (``network: continuous``): one flow state stepped
through time, the jobs that cannot be slowed running at their dedicated pace;
``docs/internals.md`` ("The continuous model") tells its rules."""

from __future__ import annotations

import bisect
import heapq
import math
from typing import TYPE_CHECKING

import numpy as np

from cassini.sim.network.flows import Cycle, cycle_of
from cassini.sim.network.flowstate import Advanced, FlowState
from cassini.sim.network.segments import Segments
from cassini.sim.network.step_windows import StepWindows

if TYPE_CHECKING:
    from cassini.sim.state import ClusterState, RunningJob


#: Crux's levels: groups larger than this are recomputed only when much of them is new
LARGE_GROUP = 64
#: ... more than this share of the group new or changed since the last computation
NEW_SHARE = 0.05


def nearest_level(known: list[tuple[float, int]], priority: float) -> int:
    """The level of the job in ``known`` ((priority, level) pairs sorted by priority)
    whose priority is nearest ``priority`` (the higher one on a tie)."""
    keys = [p for p, _ in known]
    at = bisect.bisect_left(keys, priority)
    near = [c for c in (at - 1, at) if 0 <= c < len(known)]
    best = min(near, key=lambda c: (abs(keys[c] - priority), -keys[c]))
    return known[best][1]


class ContinuousNetwork(Segments, StepWindows):
    """The flow state of one simulation and what it reported so far."""

    def __init__(self, sim: ClusterState) -> None:
        self.sim = sim
        s = sim.scheduler
        tolerance, held_limit = s.timing.tolerance, s.timing.group_limit
        self.flow = FlowState(
            dict(sim.cluster.links),
            mltcp=sim.options.mltcp if s.mltcp else None,
            progress=s.sharing.progress_weight(),
            classes=s.sharing.strict,
            weighted=bool(s.sharing.weighted),
            tolerance=tolerance,
        )
        self.tolerance = tolerance
        self.held_limit = held_limit
        self.uid: dict[str, int] = {}
        self.job_of_uid: list[str] = []  # uid -> job id
        self.dedicated: list[float] = []
        self._sum: list[float] = []  # cycle seconds since the job's last timeline point
        self._n: list[int] = []
        self._mark: dict[str, float] = {}  # time of the job's last timeline point
        self._since: dict[str, tuple[float, float, float]] = {}  # see Segments
        self.chunks: list[tuple[np.ndarray, np.ndarray]] = []  # (uid, cycle s)
        self._finishes: list[tuple[float, str, int]] = []  # (time s, job, version)
        self._cycles: dict[str, Cycle] = {}
        self._held: set[str] = set()  # jobs on slot grids
        self._leveled: set[str] = set()  # jobs given Crux levels by a full computation
        self._ended_in_flow: set[str] = set()  # ended in the flow state, not yet finished
        self._best = np.zeros(len(self.flow.caps))  # report: most excess of one step, per link
        self.events = 0  # fluid events stepped
        self.evaluations = 0  # (no windows)

    # -- the engine's calls -----------------------------------------------------------
    def start(self, r: RunningJob) -> None:
        """A job was placed: its cycles' origin and its line start now."""
        r.origin_s = self.origin(r)
        r.since_s = self.sim.now

    def shift_group(self, job_id: str) -> set[str]:
        """The jobs whose time-shifts the placement of ``job_id`` may set: only a held
        (small) group's grids read the shifts."""
        group = self.sim.component({job_id}, limit=self.held_limit)
        return {job_id} if len(group) > self.held_limit else group

    def advance(self, t: float) -> tuple[float, list[str]]:
        """Step the flow state towards ``t`` (s); it may stop where a flow job ends:
        that time and the jobs that ended."""
        if not self.flow.slot_of:
            return t, []
        adv = self._step(t)
        self.events += adv.events
        self._ended_in_flow.update(adv.finished)
        return adv.t_s, list(adv.finished)

    def done(self, r: RunningJob) -> float:
        """Iterations ``r`` has completed by now."""
        job_id = r.spec.job_id
        if job_id in self.flow:
            return self.flow.progress(job_id)[0]
        self.materialize(r)
        return r.done

    def stalled(self, r: RunningJob) -> None:
        """``r`` was given a migration stall: outside the state its finish moves."""
        if r.spec.job_id not in self.flow:
            self.schedule_finish(r)

    def excess_s(self) -> dict[str, float]:
        return self.flow.excess_s()

    @property
    def window_s(self) -> float:
        """Simulated seconds the flow state ran."""
        return self.flow.t

    # -- jobs at dedicated pace ------------------------------------------------------------
    # A job outside the flow state runs at its dedicated pace: its progress is a line
    # from ``since_s`` (``done`` iterations then, a migration stall of ``stall_s`` to sit
    # out first) and its finish a fixed time, kept in a heap; nothing is stepped per job
    # between events.
    def materialize(self, r: RunningJob) -> None:
        """Bring a job at dedicated pace up to ``sim.now``: its iterations done, stall
        left, cycle origin and history."""
        sim = self.sim
        dt = sim.now - r.since_s
        if dt <= 0:
            return
        stalled = min(r.stall_s, dt)
        r.stall_s -= stalled
        r.origin_s += stalled  # a stall shifts its cycles
        period = r.profile.iteration_time_s
        n = (dt - stalled) / period
        if n > 0:
            r.done += n
            samples = (period,)
            if r.history and r.history[-1][0] == samples:
                r.history[-1] = (samples, r.history[-1][1] + n)
            else:
                r.history.append((samples, n))
                r.timeline.append((r.since_s, period))
        r.since_s = sim.now

    def schedule_finish(self, r: RunningJob) -> None:
        """(Re)file the finish of a job at dedicated pace (from ``sim.now``)."""
        sim = self.sim
        r.since_s = sim.now
        r.finish_version += 1
        period = r.profile.iteration_time_s
        t = sim.now + r.stall_s + max(0.0, r.iterations - r.done) * period
        heapq.heappush(self._finishes, (t, r.spec.job_id, r.finish_version))

    def next_finish(self) -> tuple[float, list[str]]:
        """The next finish among the jobs at dedicated pace, and who finishes then
        (every job within 1e-9 s of the first)."""
        sim = self.sim
        heap = self._finishes
        best, who, keep = math.inf, [], []
        while heap:
            t, job_id, version = heap[0]
            if t > best + 1e-9:
                break
            heapq.heappop(heap)
            r = sim.running.get(job_id)
            if r is None or job_id in self.flow or version != r.finish_version:
                continue  # finished, in the flow state, or filed again since
            best = min(best, t)
            who.append(job_id)
            keep.append((t, job_id, version))
        for entry in keep:
            heapq.heappush(heap, entry)
        return best, who

    # -- bookkeeping ----------------------------------------------------------------------
    def __contains__(self, job_id: str) -> bool:
        return job_id in self.flow

    def cycle(self, r: RunningJob) -> Cycle:
        """The job's profile as a cycle (computed once per job)."""
        job_id = r.spec.job_id
        if job_id not in self._cycles:
            self._cycles[job_id] = cycle_of(r.profile)
        return self._cycles[job_id]

    def origin(self, r: RunningJob) -> float:
        """When a new job's cycles begin (absolute s): at its shift under CASSINI (the
        agent starts it there), else at its start; cycles begin ``offset`` after."""
        sim = self.sim
        ref = r.shift_s if sim.scheduler.held else r.start_s
        return ref + self.cycle(r).offset_s

    # -- stepping -------------------------------------------------------------------------
    def _step(self, t_goal: float) -> Advanced:
        before = self._before_step()
        adv = self.flow.advance(t_goal)
        if before is not None:
            self._record(before)
        if len(adv.uid):
            self.chunks.append((adv.uid, adv.cycle_s))
            sums = np.bincount(adv.uid, weights=adv.cycle_s, minlength=len(self._sum))
            counts = np.bincount(adv.uid, minlength=len(self._n))
            for u in np.flatnonzero(counts):
                self._sum[u] += float(sums[u])
                self._n[u] += int(counts[u])
            if adv.slow:
                self._release_slow(adv)
        return adv

    def _release_slow(self, adv: Advanced) -> None:
        """A held job that ended a cycle later than its period plus half the agent's
        tolerance cannot keep its slots: its group runs free from where it is."""
        sim = self.sim
        for u, (_, busy) in adv.cycles().items():
            job_id = self.job_of_uid[u]
            if job_id not in self.flow or not self.flow.held(job_id):
                continue
            r = sim.running[job_id]
            if float(np.max(busy)) <= r.profile.iteration_time_s * (1 + self.tolerance / 2):
                continue
            for j in sim.component({job_id}, limit=self.held_limit):
                sim.running[j].released = True
                if j in self.flow:
                    self.flow.set_grid(j, None)
                self._held.discard(j)

    # -- changes --------------------------------------------------------------------------
    def update(self, changed: set[str]) -> None:
        """Bring the flow state in line with the running jobs after ``changed`` jobs
        arrived, finished, moved or changed shifts."""
        sim = self.sim
        if not self.flow.slot_of:  # an empty state is not stepped: bring its clock on
            self.flow.t = sim.now
        affected: set[str] = set()
        for j in changed:
            if j not in sim.running:
                continue
            affected.add(j)
            for link in sim.running[j].path:
                affected |= sim.on_link.get(link, set())
        for j in sorted(affected):
            r = sim.running[j]
            path = [link for link in r.path if sim.coupling(link)]
            cycle = self.cycle(r)
            want = bool(path) and bool(cycle.bits)
            if j in self.flow:
                self.point(j, stays=want)
                if not want:
                    done, pos, stall = self.flow.remove(j)
                    r.done, r.origin_s = done, sim.now - pos
                    r.stall_s += stall
                    r.iteration_time_s = r.profile.iteration_time_s
                    r.samples = (r.profile.iteration_time_s,)
                    self.schedule_finish(r)
                    continue
                self.flow.set_links(j, path)
                stall = r.stall_s
                if stall > 0:  # migrated: sits out the stall, then starts over
                    self.flow.stall(j, stall)
                    r.stall_s = 0.0
                self.opened(j, stall)
            elif want:
                self.materialize(r)
                pos = (sim.now - r.origin_s) % r.profile.iteration_time_s
                self.register(j, r.profile.iteration_time_s)
                self._mark[j] = sim.now
                self.flow.add(
                    j,
                    cycle,
                    path,
                    done=r.done,
                    iterations=r.iterations,
                    pos_s=pos,
                    stall_s=r.stall_s,
                    priority=r.level,
                    share=sim.scheduler.sharing.share(r.spec),
                    uid=self.uid[j],
                )
                self.opened(j, r.stall_s)
                r.stall_s = 0.0
            elif r.samples == ():  # new, at dedicated pace
                r.iteration_time_s = r.profile.iteration_time_s
                r.samples = (r.profile.iteration_time_s,)
                self.schedule_finish(r)
        if sim.scheduler.priority:
            seen: set[str] = set()
            for j in sorted(changed):
                if j in seen or j not in sim.running:
                    continue
                group = sim.component({j})
                seen |= group
                self._priorities(group, changed)
        if sim.scheduler.held:
            self._hold(changed)

    def _priorities(self, group: set[str], changed: set[str]) -> None:
        """Crux's levels for a group (:meth:`ClusterState._levels`: max-K-cut over 10
        random orders).  A group of more than :data:`LARGE_GROUP` jobs is recomputed
        only once more than :data:`NEW_SHARE` of it is new or changed since its last
        computation; in between, each new or changed job takes the level of the job
        nearest to it in priority (its Crux intensity)."""
        sim = self.sim
        runs = [sim.running[k] for k in sorted(group)]
        fresh = [r for r in runs if r.spec.job_id in changed or r.spec.job_id not in self._leveled]
        if len(runs) <= LARGE_GROUP or len(fresh) > NEW_SHARE * len(runs):
            sim.set_levels(runs)
            self._leveled.update(group)
            touched = runs
        else:
            finite = max((r.intensity for r in runs if math.isfinite(r.intensity)), default=1.0)

            def prio(r: RunningJob) -> float:
                return r.intensity if math.isfinite(r.intensity) else 2 * finite

            fresh_ids = {r.spec.job_id for r in fresh}
            known = sorted((prio(r), r.level) for r in runs if r.spec.job_id not in fresh_ids)
            for r in fresh:
                r.level = nearest_level(known, prio(r))
            touched = fresh
        for r in touched:
            if r.spec.job_id in self.flow:
                self.flow.set_class(r.spec.job_id, r.level)

    def _hold(self, changed: set[str]) -> None:
        """Held jobs keep slot grids while their group is small (at most
        ``held_limit`` jobs) and none of it has been released; a held job whose group
        grew runs free.  Only the changed jobs' groups and the held jobs are searched,
        each search stopping past the limit."""
        sim = self.sim
        limit = self.held_limit
        for j in sorted(self._held):
            if j not in self.flow or j not in sim.running:
                self._held.discard(j)
            elif len(sim.component({j}, limit=limit)) > limit or sim.running[j].released:
                self.flow.set_grid(j, None)
                self._held.discard(j)
        seen: set[str] = set()
        for j in sorted(changed):
            if j in seen or j not in sim.running:
                continue
            group = sim.component({j}, limit=limit)
            seen |= group
            if len(group) > limit or any(sim.running[k].released for k in group):
                continue
            for k in sorted(group):  # held while small, until one cannot keep its period
                r = sim.running[k]
                if k in self.flow:
                    anchor = r.shift_s + self.cycle(r).offset_s
                    self.flow.set_grid(k, r.profile.iteration_time_s, anchor)
                    self._held.add(k)

    def finish(self, job_id: str) -> None:
        """A job ends: close its timeline; the jobs on its links may keep their slots
        again.  A job that ended in the flow state (its slot is gone already) ran its
        iterations there, every one reported as a cycle: only a job at dedicated pace is
        brought up to now (its ``since_s`` is when it last left the state, or started)."""
        sim = self.sim
        if job_id in self._ended_in_flow:
            self._ended_in_flow.discard(job_id)
        elif job_id not in self.flow:
            self.materialize(sim.running[job_id])
        for link in sim.running[job_id].path:
            for j in sim.on_link.get(link, ()):
                sim.running[j].released = False
        if job_id in self.uid and (self._n[self.uid[job_id]] or job_id in self._mark):
            self.point(job_id)
        self._cycles.pop(job_id, None)
        self._since.pop(job_id, None)

    # -- results --------------------------------------------------------------------------
    def distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Every cycle the state reported: its length (s) and over its job's dedicated
        iteration time."""
        if not self.chunks:
            return np.zeros(0), np.zeros(0)
        uid = np.concatenate([u for u, _ in self.chunks])
        times = np.concatenate([t for _, t in self.chunks])
        return times, times / np.asarray(self.dedicated)[uid]
