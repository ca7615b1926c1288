"""Recorded placement: replay each job on exactly the hosts its trace names."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from cassini.errors import InputError
from cassini.sim.schedulers import Scheduler
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec

MAPPING_RULE = (
    "recorded placement: each distinct host of the trace gets a server of the generated "
    "cluster, in order of first appearance (jobs by arrival, hosts in trace order)"
)
BY_NAME_RULE = (
    "recorded placement: each host of the trace is the host of the same name in the "
    "cluster's host table (its own rack and pod)"
)
GENERATED_BY_NAME_RULE = (
    "recorded placement: every host the trace names is a host of the generated topology, "
    "so each is the host of that name (its rack and pod)"
)


def by_name(cluster: Cluster | Topology, jobs: Sequence[JobSpec]) -> bool:
    """Whether recorded hosts map to servers by name: the cluster is a host table, or a
    generated topology (which names its hosts) naming every host ``jobs`` name.  A
    generated :class:`Cluster` names none: first appearance."""
    if not isinstance(cluster, Topology):
        return False
    if "hosts" in cluster.source:
        return True
    named = {host for job in jobs for host, _ in job.hosts}
    return bool(named) and named <= set(cluster.hosts)


def mapping_rule(cluster: Cluster | Topology, jobs: Sequence[JobSpec]) -> str:
    """The host -> server rule recorded placement uses for ``jobs`` on ``cluster``."""
    if not by_name(cluster, jobs):
        return MAPPING_RULE
    assert isinstance(cluster, Topology)
    return BY_NAME_RULE if "hosts" in cluster.source else GENERATED_BY_NAME_RULE


def unmatched_hosts_warning(cluster: Cluster | Topology, jobs: Sequence[JobSpec]) -> str | None:
    """One line when some, not all, of the hosts ``jobs`` name are host names of the
    generated topology ``cluster``: a typo then silently moves every job to first
    appearance (:func:`by_name`); up to 3 of the unmatched hosts are named."""
    if not isinstance(cluster, Topology) or "hosts" in cluster.source:
        return None
    ranked = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
    named = list(dict.fromkeys(host for job in ranked for host, _ in job.hosts))
    known = set(cluster.hosts)
    unmatched = [h for h in named if h not in known]
    if not unmatched or len(unmatched) == len(named):
        return None
    more = f" and {len(unmatched) - 3} more" if len(unmatched) > 3 else ""
    return (
        f"recorded placement: {len(named) - len(unmatched)} of the trace's {len(named)} "
        f"hosts are host names of the generated topology, not "
        f"{', '.join(map(repr, unmatched[:3]))}{more}: every host was placed by first "
        "appearance instead (by name only when all match)"
    )


def recorded_warnings(
    cluster: Cluster | Topology,
    schedulers: Sequence[Scheduler],
    read_jobs: Callable[[], Sequence[JobSpec]],
) -> list[str]:
    """:func:`unmatched_hosts_warning` for a run of ``schedulers`` (the sweep's scheduler
    axis among them) on ``cluster`` when one is recorded, the jobs read by ``read_jobs``
    only then; a workload that cannot be read gives none here (its error comes where
    the run reads it)."""
    if not any(s.policy == "recorded" for s in schedulers):
        return []
    if not isinstance(cluster, Topology) or "hosts" in cluster.source:
        return []  # a host table refuses an unknown host; a uniform cluster names none
    try:
        jobs = read_jobs()
    except InputError:
        return []
    line = unmatched_hosts_warning(cluster, jobs)
    return [line] if line else []


def host_servers(jobs: Sequence[JobSpec], cluster: Cluster | Topology) -> dict[str, int]:
    """Server index of every host the jobs name (by name or by first appearance, as
    :func:`by_name` picks and :func:`mapping_rule` states); InputError when a job has no
    hosts, a host the host table lacks, more hosts than servers, or more GPUs on a host
    than its server has."""
    named = by_name(cluster, jobs)
    out: dict[str, int] = {}
    for job in sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)):
        if not job.hosts:
            raise InputError(
                f"jobs.{job.job_id}.hosts",
                "the recorded scheduler needs every job's hosts (this trace records none "
                "for it; formats with hosts: philly, lingjun, pai2020 with its instance "
                "table, csv with a hosts column)",
            )
        for host, _ in job.hosts:
            if host in out:
                continue
            if named:
                assert isinstance(cluster, Topology)
                try:
                    out[host] = cluster.host_index(host)
                except InputError:
                    raise InputError(
                        f"jobs.{job.job_id}.hosts",
                        f"host {host!r} is not in the cluster's host table "
                        f"({cluster.source['hosts']}, {cluster.servers} hosts)",
                    ) from None
            else:
                out[host] = len(out)
    if len(out) > cluster.servers:
        raise InputError(
            "cluster",
            f"the trace names {len(out)} hosts, the cluster has {cluster.servers} servers",
        )
    per_server = cluster.gpus_per_host
    for job in jobs:
        used: dict[str, int] = {}
        for host, gpus in job.hosts:
            used[host] = used.get(host, 0) + gpus
        for host, gpus in used.items():
            if gpus > per_server[out[host]]:
                raise InputError(
                    f"jobs.{job.job_id}.hosts",
                    f"{gpus} GPUs on host {host!r}, its server has {per_server[out[host]]}",
                )
    return out


def recorded_options(
    job: JobSpec, servers: dict[str, int], free: np.ndarray
) -> list[dict[int, int]]:
    """The job's one placement ``{server: GPUs}`` if its hosts' GPUs are free, else none."""
    placement: dict[int, int] = {}
    for host, gpus in job.hosts:
        s = servers[host]
        placement[s] = placement.get(s, 0) + gpus
    if all(free[s] >= g for s, g in placement.items()):
        return [placement]
    return []
