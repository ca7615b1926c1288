"""The window model (``network: windows``): at every change each group of jobs coupled
through links that can congest is simulated over a short window, and each of its jobs
runs at the mean iteration time measured there until the next change."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cassini.sim.network.flows import FlowJob, NetworkResult, cycle_of
from cassini.sim.network.fluid import simulate

if TYPE_CHECKING:
    from cassini.sim.state import ClusterState, RunningJob

#: Warm-up of a group under MLTCP sharing, in periods of its longest job: every
#: evaluation starts from phases set by start times (or shifts), and MLTCP takes several
#: iterations to interleave jobs (mltcp.policy.iterations_to_interleave: ~5-10 at k = 2).
MLTCP_WARMUP_PERIODS = 12.0
#: Times a free-running group's network window is stretched when some job completed no
#: iteration in it (see ``WindowNetwork._network``); each stretch at least doubles it.
WINDOW_STRETCHES = 8


@dataclass(frozen=True)
class NetworkWindow:
    """How long the network model looks at a group of jobs: ``warmup_periods`` then
    ``measure_periods`` of the group's longest iteration time."""

    warmup_periods: float = 2.0
    measure_periods: float = 4.0


#: the window every simulation uses unless told otherwise
DEFAULT_WINDOW = NetworkWindow()


class WindowNetwork:
    """Jobs run at the iteration times their group's last window measured; progress
    between events is a line per job."""

    def __init__(self, sim: ClusterState) -> None:
        self.sim = sim
        self.events = 0  # fluid events stepped, all windows
        self.evaluations = 0  # windows simulated
        self.window_s = 0.0  # simulated seconds of all windows
        self.excess: dict[str, float] = {}  # seconds of excess demand per link
        self.excess_rate: dict[frozenset[str], dict[str, float]] = {}

    # -- the engine's calls -----------------------------------------------------------
    def start(self, r: RunningJob) -> None:
        """A job was placed (nothing to note: its pace comes with the next update)."""

    def shift_group(self, job_id: str) -> set[str]:
        """The jobs whose time-shifts the placement of ``job_id`` may set."""
        return self.sim.component({job_id})

    def next_finish(self) -> tuple[float, list[str]]:
        """The next finish of a running job at its pace, and who finishes then (every
        job within 1e-9 s of the first)."""
        sim = self.sim
        best, who = math.inf, []
        for job_id, r in sim.running.items():
            t = sim.now + r.stall_s + max(0.0, r.iterations - r.done) * r.iteration_time_s
            if t < best - 1e-9:
                best, who = t, [job_id]
            elif abs(t - best) <= 1e-9:
                who.append(job_id)
        return best, who

    def advance(self, t: float) -> tuple[float, list[str]]:
        """Every job's progress up to ``t`` (s) at its pace; no job ends early here."""
        sim = self.sim
        dt = t - sim.now
        if not dt > 0 or math.isinf(dt):
            return t, []
        for r in sim.running.values():
            run = dt
            if r.stall_s > 0:  # sitting out a migration
                stalled = min(r.stall_s, dt)
                r.stall_s -= stalled
                run -= stalled
                if run <= 0:
                    continue
            n = run / r.iteration_time_s
            r.done += n
            if r.history and r.history[-1][0] is r.samples:
                r.history[-1] = (r.samples, r.history[-1][1] + n)
            else:
                r.history.append((r.samples, n))
                r.timeline.append((sim.now, r.iteration_time_s))
        for rates in self.excess_rate.values():
            for link, fraction in rates.items():
                self.excess[link] = self.excess.get(link, 0.0) + fraction * dt
        return t, []

    def done(self, r: RunningJob) -> float:
        """Iterations ``r`` has completed by now."""
        return r.done

    def current_iteration_s(self, r: RunningJob) -> float:
        """The iteration time (s) ``r`` runs at now: its group's last window's measure,
        its pace until the next change."""
        return r.iteration_time_s

    def stalled(self, r: RunningJob) -> None:
        """``r`` was given a migration stall (its pace is re-measured at the update)."""

    def finish(self, job_id: str) -> None:
        """A job ends (its progress is already up to date)."""

    def excess_s(self) -> dict[str, float]:
        return dict(self.excess)

    def distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """Iteration times (s, and over dedicated) measured outside the jobs' histories:
        none here."""
        return np.zeros(0), np.zeros(0)

    # -- evaluation ---------------------------------------------------------------------
    def update(self, changed: set[str]) -> None:
        """Re-run the window for every group that holds a changed job."""
        sim = self.sim
        todo = {j for j in changed if j in sim.running}
        for group_key in [g for g in self.excess_rate if g & changed]:
            del self.excess_rate[group_key]
        while todo:
            group = sim.component({todo.pop()})
            todo -= group
            self._evaluate_group(sorted(group))

    def _evaluate_group(self, group: list[str]) -> None:
        sim = self.sim
        runs = [sim.running[j] for j in group]
        shared = any(sim.coupling(link) for r in runs for link in r.path)
        if sim.scheduler.dedicated_network or not shared:
            for r in runs:
                r.iteration_time_s = r.profile.iteration_time_s
                r.samples = (r.profile.iteration_time_s,)
            return
        if sim.scheduler.priority:
            sim.set_levels(runs)
        result = self._held(runs) if sim.scheduler.held else self._network(runs, held=False)
        for r in runs:
            times = result.iteration_times_s[r.spec.job_id]
            r.samples = tuple(times) if times else (r.profile.iteration_time_s,)
            r.iteration_time_s = float(np.mean(r.samples))
        window = result.window_s
        self.excess_rate[frozenset(group)] = {
            link: s / window for link, s in result.excess_s.items() if s > 0
        }

    def _held(self, runs: list[RunningJob]) -> NetworkResult:
        """Jobs held to their time-shifts by the agent.  A group that cannot keep the
        shifts at its dedicated pace (some job busier than its period plus half the
        tolerance) would re-align over and over; the agent then releases it to run free
        from its shifted start.  (Stretching every period by a common factor instead was
        tried: it lost to releasing in 255 of 256 groups of a 300-job run.)"""
        timing = self.sim.scheduler.timing
        if len(runs) > timing.group_limit:
            return self._network(runs, held=False, from_shifts=True)
        result = self._network(runs, held=True)
        busy = [result.busy_s[r.spec.job_id] for r in runs]
        # a job with no busy record finished no iteration within the measured window,
        # several of its periods: it cannot keep its slots either
        if all(busy):
            need = max(
                float(np.mean(b)) / r.profile.iteration_time_s
                for r, b in zip(runs, busy, strict=True)
            )
            if need <= 1 + timing.tolerance / 2:
                return result
        return self._network(runs, held=False, from_shifts=True)

    def _network(
        self, runs: list[RunningJob], *, held: bool, from_shifts: bool = False
    ) -> NetworkResult:
        """Simulate the group: held to the shifts, or free-running phased by start time
        or by the shifts.

        The window is counted in periods of the group's longest dedicated iteration.  A
        job can be slowed past that whole window (its own path thinner than its demand,
        e.g. one ECMP spine's share of an oversubscribed uplink, or many jobs sharing):
        free-running, the window is then stretched to the longest iteration the group's
        links allow (:func:`stretched_iteration_s`), doubling beyond that, until every
        job completes one.  Held, a job without a whole iteration is left to
        :meth:`_held`, which releases its group."""
        longest = max(r.profile.iteration_time_s for r in runs)
        result = self._window(runs, longest, held=held, from_shifts=from_shifts)
        if held:
            return result
        stretched = max(stretched_iteration_s(r, self.sim) for r in runs)
        for _ in range(WINDOW_STRETCHES):
            if all(result.iteration_times_s[r.spec.job_id] for r in runs):
                break
            longest = max(2 * longest, stretched)
            result = self._window(runs, longest, held=False, from_shifts=from_shifts)
        return result

    def _flow_jobs(self, runs: list[RunningJob], *, held: bool, from_shifts: bool) -> list[FlowJob]:
        """The group as the fluid model's jobs: anchors relative to now, held jobs on
        their shifts' slot grids, paths cut to the links that can congest."""
        sim = self.sim
        flows = []
        for r in runs:
            period = r.profile.iteration_time_s
            offset = cycle_of(r.profile).offset_s
            if held:
                grid = period
                anchor = (r.shift_s + offset - sim.now) % period
            else:
                grid = None
                phase = r.shift_s if from_shifts else r.start_s
                anchor = (phase + offset - sim.now) % period
            path = tuple(link for link in r.path if sim.coupling(link))
            level = r.level if sim.scheduler.sharing.strict else 0
            share = sim.scheduler.sharing.share(r.spec)
            flows.append(FlowJob(r.spec.job_id, r.profile, path, anchor, grid, level, share))
        return flows

    def _window(
        self, runs: list[RunningJob], longest: float, *, held: bool, from_shifts: bool
    ) -> NetworkResult:
        """One network window over the group, its warm-up and measured parts counted in
        periods of ``longest`` seconds."""
        sim = self.sim
        periods = sim.window.warmup_periods
        if sim.scheduler.sharing.dynamic:  # let MLTCP re-converge from the start phases
            periods = max(periods, MLTCP_WARMUP_PERIODS)
        warmup = periods * longest
        horizon = warmup + sim.window.measure_periods * longest
        flows = self._flow_jobs(runs, held=held, from_shifts=from_shifts)
        mltcp = sim.options.mltcp if sim.scheduler.mltcp else None
        progress = sim.scheduler.sharing.progress_weight()
        result = simulate(
            flows,
            sim.cluster.links,
            horizon_s=horizon,
            warmup_s=warmup,
            tolerance=sim.scheduler.timing.tolerance,
            mltcp=mltcp,
            progress=progress,
        )
        self.evaluations += 1
        if sim.recorder is not None:
            sim.recorder.window(
                sim.now, tuple(flows), horizon, warmup, result, mltcp, progress=progress
            )
        self.events += result.events
        self.window_s += horizon
        return result


def stretched_iteration_s(r: RunningJob, sim: ClusterState) -> float:
    """Longest iteration (s) max-min sharing can give ``r``: each phase sends at no less
    than its own rate or its fair share of each link of its path that can congest
    (capacity over the jobs on it, or under share weights its weight's part of the
    link), whichever is lower."""
    sharing = sim.scheduler.sharing

    def fair_bps(link: str) -> float:
        jobs = sim.on_link[link]
        if not sharing.weighted:
            return sim.cluster.links[link] / len(jobs)
        total = sum(sharing.share(sim.running[j].spec) for j in jobs)
        return sim.cluster.links[link] * sharing.share(r.spec) / total

    share = min((fair_bps(link) for link in r.path if sim.coupling(link)), default=math.inf)
    return r.profile.iteration_time_s + r.profile.bits_per_iteration / share
