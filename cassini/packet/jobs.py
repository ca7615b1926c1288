"""Packet-level jobs run in ns-3: a job's ring of hops paced to its profile's phases, every
iteration's time measured (:func:`simulate`); ``cassini.packet.run`` and the simulator's
``network: packet`` both run their jobs here."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cassini.errors import InputError
from cassini.packet.fabric import MECHANISMS, SEGMENT_BYTES, FabricSettings
from cassini.packet.plan import PacketPlan, as_topology, plan
from cassini.priority import band_levels, intensity
from cassini.profile import JobProfile
from cassini.sim.network.flows import cycle_of
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster
from mltcp.policy import MltcpParams

FIRST_PORT = 10000
DEFAULT_SETTINGS = FabricSettings()
DEFAULT_MLTCP = MltcpParams()


@dataclass(frozen=True)
class PacketJob:
    """A job to run: on ``servers`` (indices), ``iterations`` of ``profile`` from
    ``start_s``; ``shift_s`` not None holds iteration k to start no earlier than
    ``start_s + shift_s + k * period`` (CASSINI's time-shift), ``period`` being
    ``period_s`` (the agent's period, seconds) or else the profile's iteration time."""

    job_id: str
    servers: tuple[int, ...]
    profile: JobProfile
    iterations: int
    start_s: float = 0.0
    shift_s: float | None = None
    period_s: float | None = None


@dataclass(frozen=True)
class JobResult:
    """A job's iteration times (seconds) at packet level; ``finished`` False when the
    horizon cut it short."""

    job_id: str
    servers: tuple[int, ...]
    iteration_times_s: tuple[float, ...]
    dedicated_iteration_s: float
    finished: bool

    @property
    def mean_iteration_s(self) -> float:
        t = self.iteration_times_s
        return float(sum(t) / len(t)) if t else math.nan


def default_scale(topo: Topology) -> float:
    """The fastest server link over 1 Gbit/s (at least 1)."""
    fastest = max(topo.link_bps[links[0]] for links in topo.host_links)
    return max(1.0, fastest / 1e9)


def priorities(jobs: Sequence[PacketJob], topo: Topology, bands: int) -> dict[str, int]:
    """Crux's order (descending GPU intensity) cut into ``bands`` equal-count bands;
    band 0 is served first."""

    def key(job: PacketJob) -> float:
        p = job.profile
        slowest = min(topo.link_bps[topo.host_links[s][0]] for s in job.servers)
        gpus = sum(topo.gpus_per_host[s] for s in job.servers)
        compute = p.iteration_time_s * (1 - p.communication_share)
        return intensity(gpus, compute, p.bits_per_iteration, slowest)

    order = sorted(jobs, key=lambda j: (-key(j), j.job_id))
    return band_levels([j.job_id for j in order], bands)


def simulate(
    cluster: Cluster | Topology,
    jobs: Sequence[PacketJob],
    *,
    sharing: str = "maxmin",
    routing: str = "single",
    seed: int = 0,
    scale: float | None = None,
    settings: FabricSettings = DEFAULT_SETTINGS,
    mltcp: MltcpParams = DEFAULT_MLTCP,
    horizon_s: float | None = None,
    path_index: Mapping[str, int] | None = None,
    levels: Mapping[str, int] | None = None,
) -> tuple[PacketPlan, list[JobResult]]:
    """Run ``jobs`` on ``cluster`` in ns-3 under ``sharing`` (fifo, maxmin, dctcp, mltcp,
    priority) and ``routing`` (single, ecmp, crux); returns the plan and every job's
    iteration times (seconds).  ``horizon_s`` (simulated seconds) stops a run early.
    ``path_index`` (job id -> path index) overrides ``routing``'s choice; ``levels`` (job
    id -> priority class, 0 first) overrides the band rule of :func:`priorities`, each
    level past the last band served in the last."""
    if sharing not in MECHANISMS:
        raise InputError("sharing", f"must be one of {', '.join(MECHANISMS)}, got {sharing!r}")
    from cassini.packet import fabric, mltcp_cc, native
    from cassini.packet.ns3env import load_ns

    topo = as_topology(cluster)
    factor = default_scale(topo) if scale is None else float(scale)
    peaks = {j.job_id: j.profile.peak_rate_bps for j in jobs}
    the_plan = plan(
        topo,
        {j.job_id: j.servers for j in jobs},
        scale=factor,
        routing=routing,
        seed=seed,
        peaks_bps=peaks,
        path_index=path_index,
    )
    ns = load_ns()
    cpp = native.define()
    built = fabric.build(the_plan, sharing, settings)
    bands: dict[str, int] = {}
    if sharing == "priority":
        bands = priorities(jobs, topo, settings.bands)
        if levels is not None:
            bands = {j.job_id: min(int(levels.get(j.job_id, 0)), settings.bands - 1) for j in jobs}
    null_cc = ns.Ptr[ns.TcpCongestionOps]()
    drivers = []
    port = FIRST_PORT
    for job in jobs:
        driver = _ring_driver(cpp, job, bool(the_plan.hops[job.job_id]), factor, sharing, mltcp)
        cc = mltcp_cc.make(mltcp) if sharing == "mltcp" else null_cc
        # band 0 holds the ACKs (see fabric): a job's level l is sent as DSCP l + 1
        dscp = bands.get(job.job_id, 0) + 1 if sharing == "priority" else 0
        for hop in the_plan.hops[job.job_id]:
            _add_hop(ns, built, driver, hop, port, cc, dscp)
            port += 1
            if port > 65000:
                raise InputError("jobs", "more than 55000 ring hops")
        driver.Start()
        drivers.append(driver)
    if horizon_s is not None:
        ns.Simulator.Stop(ns.Seconds(horizon_s))
    ns.Simulator.Run()
    results = [_result(job, driver) for job, driver in zip(jobs, drivers, strict=True)]
    ns.Simulator.Destroy()
    return the_plan, results


def _ring_driver(
    cpp: Any, job: PacketJob, networked: bool, factor: float, sharing: str, mltcp: MltcpParams
) -> Any:
    """The C++ ring driver of one job: its compute gaps (seconds), hop sizes (bytes) and
    phase rates (bytes/s, each hop paced to it), sizes and rates scaled down by
    ``factor``; a job on one server has no network and runs at its profile's own pace."""
    if networked:
        cycle = cycle_of(job.profile)
        gaps = list(cycle.gaps_s)
        sizes = [b / 8.0 / factor for b in cycle.bits]
        rates = [r / 8.0 / factor for r in cycle.rates_bps]
    else:
        gaps, sizes, rates = [job.profile.iteration_time_s], [], []
    return cpp.RingJob(
        gaps,
        sizes,
        rates,
        job.iterations,
        job.start_s,
        job.shift_s is not None,
        job.start_s + (job.shift_s or 0.0),
        job.period_s or job.profile.iteration_time_s,
        sharing == "mltcp" and mltcp.mode == "exact",
        SEGMENT_BYTES,  # paced one segment's payload at a time
    )


def _add_hop(ns: Any, built: Any, driver: Any, hop: Any, port: int, cc: Any, dscp: int) -> None:
    """One ring hop of ``driver``: a TCP sink on the hop's destination at ``port`` and the
    sending socket on its source, with congestion control ``cc`` and ``dscp``."""
    addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
    sink = ns.PacketSinkHelper("ns3::TcpSocketFactory", addr)
    sink.Install(built.nodes[f"host{hop.dst}"]).Start(ns.Seconds(0.0))
    src = built.nodes[f"host{hop.src}"]
    driver.AddHop(src, ns.Ipv4Address(hop.address), port, cc, dscp)


def _result(job: PacketJob, driver: Any) -> JobResult:
    """A job's iteration times (s) from its ring driver's iteration ends."""
    ends = [float(x) for x in driver.Ends()]
    marks = [job.start_s, *ends]
    times = tuple(b - a for a, b in zip(marks, marks[1:], strict=False))
    return JobResult(
        job.job_id, job.servers, times, job.profile.iteration_time_s, bool(driver.Finished())
    )
