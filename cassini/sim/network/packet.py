"""The packet-level model (``network: packet``): the window model's rule with every window
run in ns-3 (:mod:`cassini.packet`) instead of the fluid model; ``docs/internals.md``
("The packet-level model") tells its rules."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from cassini.errors import InputError
from cassini.sim.network.flows import NetworkResult, cycle_of
from cassini.sim.network.windows import MLTCP_WARMUP_PERIODS, WindowNetwork

if TYPE_CHECKING:
    from cassini.packet.jobs import PacketJob
    from cassini.sim.state import ClusterState, RunningJob
    from cassini.sim.topologies.fabric import Topology

#: every server link runs at this rate at packet level (bits/s); the scale factor is
#: the fastest server link over it
PACKET_LINK_BPS = 1e8


def fastest_server_link_bps(topo: Topology) -> float:
    """The fastest server (host) link of ``topo``, bits/s."""
    return max(topo.link_bps[links[0]] for links in topo.host_links)


def packet_scale(topo: Topology) -> float:
    """The factor link rates and phase bytes are divided by: the fastest server link
    over :data:`PACKET_LINK_BPS` (at least 1)."""
    return max(1.0, fastest_server_link_bps(topo) / PACKET_LINK_BPS)


class PacketNetwork(WindowNetwork):
    """Jobs run at the iteration times their group's last ns-3 window measured."""

    def __init__(self, sim: ClusterState) -> None:
        from cassini.packet import ns3env
        from cassini.packet.plan import as_topology

        self.topology = as_topology(sim.cluster)  # InputError: too large, planes
        sharing = sim.scheduler.sharing
        if sharing.functions:
            raise InputError(
                "network",
                f"the packet model does not run the sharing rule(s) "
                f"{', '.join(sharing.functions)} of scheduler {sim.scheduler.name!r} "
                "(it maps maxmin, mltcp and priority to ns-3): use network windows or "
                "continuous",
            )
        if not ns3env.available():
            raise InputError("network", ns3env.MISSING)
        super().__init__(sim)
        self.scale = packet_scale(self.topology)
        self.alone: dict[tuple[str, tuple[int, ...], int, str], tuple[float, ...]] = {}

    def _sharing(self) -> str:
        """The packet mechanism of the run's scheduler."""
        scheduler = self.sim.scheduler
        if scheduler.dedicated_network:
            return "maxmin"
        if scheduler.mltcp:
            return "mltcp"
        return "priority" if scheduler.priority else "maxmin"

    def excess_s(self) -> dict[str, float]:
        """Not measured at packet level (ns-3 reports no demand over capacity): NaN on
        every link, which results.json writes as ``null``, never as a 0 that says no link
        was congested."""
        return dict.fromkeys(self.sim.cluster.links, math.nan)

    def _evaluate_group(self, group: list[str]) -> None:
        """A group coupled through links: the window model's rule over ns-3 windows;
        jobs on links of their own (or a dedicated network): each measured alone."""
        sim = self.sim
        runs = [sim.running[j] for j in group]
        shared = any(sim.coupling(link) for r in runs for link in r.path)
        if shared and not sim.scheduler.dedicated_network:
            super()._evaluate_group(group)
            return
        for r in runs:
            r.samples = self._alone(r)
            r.iteration_time_s = float(np.mean(r.samples))

    def _alone(self, r: RunningJob) -> tuple[float, ...]:
        """Iteration times (s) of ``r`` alone on the fabric, measured once per profile,
        servers and path."""
        servers = tuple(sorted(r.placement))
        if len(servers) < 2:
            return (r.profile.iteration_time_s,)
        key = (r.spec.model, servers, r.spine or 0, self._sharing())
        if key not in self.alone:
            period = r.profile.iteration_time_s
            result = self._run([r], period, held=False, from_shifts=False)
            times = result.iteration_times_s[r.spec.job_id]
            self.alone[key] = times or (period,)
        return self.alone[key]

    def _window(
        self, runs: list[RunningJob], longest: float, *, held: bool, from_shifts: bool
    ) -> NetworkResult:
        """One ns-3 window over the group (the window model's length rule)."""
        return self._run(runs, longest, held=held, from_shifts=from_shifts)

    def _run(
        self, runs: list[RunningJob], longest: float, *, held: bool, from_shifts: bool
    ) -> NetworkResult:
        """Run ``runs`` in ns-3 for the warm-up and measured periods of ``longest``
        seconds; iteration times of the iterations that start after the warm-up."""
        from cassini.packet.jobs import simulate

        sim = self.sim
        periods = sim.window.warmup_periods
        if sim.scheduler.mltcp:
            periods = max(periods, MLTCP_WARMUP_PERIODS)
        warmup = periods * longest
        horizon = warmup + sim.window.measure_periods * longest
        jobs = [self._packet_job(r, horizon, held=held, from_shifts=from_shifts) for r in runs]
        sharing = self._sharing()
        _, results = simulate(
            self.topology,
            jobs,
            sharing=sharing,
            scale=self.scale,
            mltcp=sim.options.mltcp,
            horizon_s=horizon,
            path_index={r.spec.job_id: r.spine or 0 for r in runs},
            levels={r.spec.job_id: r.level for r in runs} if sharing == "priority" else None,
        )
        times = {}
        for job, res in zip(jobs, results, strict=True):
            start = job.start_s + (job.shift_s or 0.0)
            ends = np.cumsum(res.iteration_times_s) + job.start_s
            starts = np.concatenate([[start], ends[:-1]])
            times[job.job_id] = tuple(
                float(t) for s, t in zip(starts, res.iteration_times_s, strict=True) if s >= warmup
            )
        self.evaluations += 1
        self.window_s += horizon
        return NetworkResult(
            iteration_times_s=times,
            busy_s=times,  # held: an iteration longer than its period missed its slot
            excess_s={},
            carried_bits={},
            window_s=horizon - warmup,
            events=0,
        )

    def _packet_job(
        self, r: RunningJob, horizon: float, *, held: bool, from_shifts: bool
    ) -> PacketJob:
        """``r`` as a packet-level job, its cycle anchored as the fluid window anchors
        it (times relative to now, s), with enough iterations to outlast ``horizon``."""
        from cassini.packet.jobs import PacketJob

        period = r.profile.iteration_time_s
        phase = r.shift_s if (held or from_shifts) else r.start_s
        anchor = (phase + cycle_of(r.profile).offset_s - self.sim.now) % period
        count = math.ceil(horizon / period) + 1
        servers = tuple(sorted(r.placement))
        if held:
            return PacketJob(r.spec.job_id, servers, r.profile, count, 0.0, anchor)
        return PacketJob(r.spec.job_id, servers, r.profile, count, anchor)
