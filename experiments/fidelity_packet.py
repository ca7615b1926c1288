"""A testbed scenario of ``experiments.sim_fidelity`` at packet level (issue 33 §2, "close
the loop on the testbed"): the same hosts, links, jobs, start offsets, CASSINI periods,
MLTCP parameters and priority classes, run in ns-3 (:mod:`cassini.packet.run`).

The testbed topology becomes the simulator's fabric link for link: a dumbbell's two
switches are two racks under one spine whose two uplinks both run at the bottleneck rate
(the same bottleneck, one more hop of 1 µs); a leaf-spine is the two-tier fabric of its
leaves, spines and uplink rate.  Links run at their own rates (scale 1: the testbed's
are 200 Mbit/s to 1 Gbit/s already).  Queues hold the fabric's ``buffer_packets``;
``ecn`` marks at ``ecn_threshold_bytes`` (in full packets).  Mechanisms, by the
testbed's fabric and scheme: ``fair`` -> ``maxmin`` (per-flow fair queueing; the testbed's
HTB class per job is the same with one flow per job and direction), ``ecn`` ->
``dctcp`` (MLTCP scheme: ``mltcp``), ``prio`` -> ``priority`` with the jobs' classes,
``fifo`` -> ``fifo``.  On a leaf-spine each job takes the spine its ring's first hop
takes on the testbed (hash or path selection).

Iteration times are counted as the testbed counts them: the intervals between
iteration ends, the first iteration (start-up, the initial shift) left out.  Needs the
``[packet]`` extra; no root.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cassini.packet.fabric import WIRE_BYTES, FabricSettings
from cassini.profile import JobProfile
from cassini.sim.topologies.clos import two_tier
from cassini.sim.topologies.fabric import Topology
from mltcp.policy import MltcpParams
from testbed.run.config import RunConfig
from testbed.topo import TestbedTopology

#: testbed fabric kind -> the packet mechanism of its default congestion control
SHARING = {"fair": "maxmin", "ecn": "dctcp", "prio": "priority", "fifo": "fifo"}


def fabric_of(topo: TestbedTopology) -> tuple[Topology, dict[str, int]]:
    """The testbed topology as the simulator's fabric and each host's server index;
    ValueError for a layout it cannot mirror (hosts not grouped leaf by leaf, leaves of
    different sizes or host link rates, a fabric other than a dumbbell or leaf-spine)."""
    leaves = list(dict.fromkeys(topo.attach[h] for h in topo.hosts))
    per_leaf = [[h for h in topo.hosts if topo.attach[h] == leaf] for leaf in leaves]
    if [h for group in per_leaf for h in group] != list(topo.hosts):
        raise ValueError("topology: hosts must be listed leaf by leaf")
    if len({len(g) for g in per_leaf}) != 1:
        raise ValueError("topology: every leaf needs as many hosts")
    capacity = {str(d): c for d, c in topo.link_capacity().items()}
    host_bps = {capacity[f"{h}->{topo.attach[h]}"] for h in topo.hosts}
    if len(host_bps) != 1:
        raise ValueError(f"topology: host links differ: {sorted(host_bps)}")
    access = host_bps.pop()
    hosts_per_leaf = len(per_leaf[0])
    if topo.kind == "dumbbell" and len(leaves) == 2:
        uplink = capacity[f"{leaves[0]}->{leaves[1]}"]
        spines = 1
    elif topo.kind == "leaf_spine":
        spines = len(topo.spines)
        uplink = capacity[f"{leaves[0]}->{topo.spines[0]}"]
    else:
        raise ValueError(f"topology: {topo.kind!r} with {len(leaves)} switches is not mirrored")
    # two_tier's uplinks: hosts x access / oversubscription, split over the spines
    over = hosts_per_leaf * access / (uplink * spines)
    fabric = two_tier(len(leaves), hosts_per_leaf, 1, access, over, spines=spines)
    return fabric, {h: i for i, h in enumerate(topo.hosts)}


def settings_of(topo: TestbedTopology) -> FabricSettings:
    """Queue sizes and the ECN threshold (full packets) of the testbed's fabric."""
    spec = topo.fabric
    return FabricSettings(
        ecn_k=max(1, round(spec.ecn_threshold_bytes / WIRE_BYTES)), limit=spec.buffer_packets
    )


def sharing_of(topo: TestbedTopology, scheme_kind: str) -> str:
    """The packet mechanism of a scheme (``baseline``, ``cassini``, ``mltcp``) on the
    testbed's fabric."""
    if scheme_kind == "mltcp":
        return "mltcp"
    return SHARING[topo.fabric.kind]


def path_index(topo: TestbedTopology, hosts: tuple[str, ...]) -> int:
    """The spine (index) the job's first ring hop crosses on the testbed; 0 without
    spines."""
    if topo.kind != "leaf_spine" or len(hosts) < 2:
        return 0
    switches = topo.switch_path(hosts[0], hosts[1])
    return topo.spines.index(switches[1]) if len(switches) == 3 else 0


def packet_iteration_times(
    cfg: RunConfig,
    profiles: Mapping[str, JobProfile],
    scheme_kind: str,
    count: int,
    starts_s: Mapping[str, float] | None = None,
    periods_s: Mapping[str, float] | None = None,
    priorities: Mapping[str, int] | None = None,
    mltcp: MltcpParams | None = None,
) -> dict[str, list[float]]:
    """Each job's iteration times (seconds) at packet level, ``count - 1`` of them as the
    testbed counts them: jobs start at ``starts_s`` (seconds); a job in ``periods_s``
    is held to the agent's grid (iteration k no earlier than ``start mod period + k *
    period``); ``priorities``: classes under ``prio``; ``mltcp``: MLTCP's parameters."""
    from cassini.packet.jobs import PacketJob, simulate

    topo = cfg.topology
    fabric, index = fabric_of(topo)
    starts_s, periods_s = starts_s or {}, periods_s or {}
    jobs = []
    for job in cfg.jobs:
        servers = tuple(index[h] for h in job.hosts)
        start, period = starts_s.get(job.job_id, 0.0), periods_s.get(job.job_id)
        profile = profiles[job.job_id]
        if period:
            jobs.append(PacketJob(job.job_id, servers, profile, count, 0.0, start % period, period))
        else:
            jobs.append(PacketJob(job.job_id, servers, profile, count, start))
    sharing = sharing_of(topo, scheme_kind)
    kw: dict[str, Any] = {"mltcp": mltcp} if mltcp is not None else {}
    # ns-3 stops here (simulated seconds): room for every job to run its count even if
    # the jobs took turns, as the fluid side's horizon allows
    longest = max(periods_s.get(j.job_id) or profiles[j.job_id].iteration_time_s for j in cfg.jobs)
    start = max([0.0, *starts_s.values()])
    horizon = start + (count + 2) * longest * max(2, len(cfg.jobs)) * 2
    _, results = simulate(
        fabric,
        jobs,
        sharing=sharing,
        scale=1.0,
        settings=settings_of(topo),
        path_index={j.job_id: path_index(topo, j.hosts) for j in cfg.jobs},
        levels=dict(priorities or {}) if sharing == "priority" else None,
        horizon_s=horizon,
        **kw,
    )
    out = {}
    for r in results:
        times = list(r.iteration_times_s)[1:count]
        if not r.finished or len(times) < count - 1:
            raise RuntimeError(f"{r.job_id}: ran {len(r.iteration_times_s)} of {count} iterations")
        out[r.job_id] = times
    return out


if __name__ == "__main__":
    from experiments import not_a_command

    not_a_command("experiments.fidelity_packet", "run python -m experiments.sim_fidelity --help")
