"""Recorded placement: replay each job on exactly the hosts its trace names.

Traces that record where jobs ran (Philly's machines, Lingjun's worker ``host_ip``,
PAI's instance ``machine``) give every :class:`~cassini.sim.workload.JobSpec` its
``hosts``: ``(host name, GPUs on it)`` pairs.  The ``recorded`` scheduler (FIFO by
arrival, see :mod:`cassini.sim.schedulers`) starts a job once every one of its hosts has
the GPUs it used there free, and puts it on exactly those hosts; ``recorded+cassini``
keeps that placement and lets CASSINI time-shift the job.

Host -> server mapping (:data:`MAPPING_RULE`): the simulated cluster is the generated one
of the configuration (a trace's own topology, e.g. Lingjun's ``topo.csv``, is read by the
host-table cluster reader, not here), so each distinct host gets a server of it: hosts
in order of first appearance — jobs by arrival, then each job's hosts in the trace's
order — take servers 0, 1, 2, ...; two jobs that shared a host share a server.  Rack
membership therefore follows first appearance, not the real racks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cassini.errors import InputError
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec

MAPPING_RULE = (
    "recorded placement: each distinct host of the trace gets a server of the generated "
    "cluster, in order of first appearance (jobs by arrival, hosts in trace order)"
)


def host_servers(jobs: Sequence[JobSpec], cluster: Cluster) -> dict[str, int]:
    """Server index of every host the jobs name (see :data:`MAPPING_RULE`); InputError
    when a job has no hosts, more hosts than servers, or more GPUs on a host than a
    server has."""
    out: dict[str, int] = {}
    for job in sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)):
        if not job.hosts:
            raise InputError(
                f"jobs.{job.job_id}.hosts",
                "the recorded scheduler needs every job's hosts (this trace records none "
                "for it; formats with hosts: philly, lingjun, pai2020 with its instance "
                "table, csv with a hosts column)",
            )
        for host, gpus in job.hosts:
            if gpus > cluster.gpus_per_server:
                raise InputError(
                    f"jobs.{job.job_id}.hosts",
                    f"{gpus} GPUs on host {host!r}, a server has {cluster.gpus_per_server}",
                )
            out.setdefault(host, len(out))
    if len(out) > cluster.servers:
        raise InputError(
            "cluster",
            f"the trace names {len(out)} hosts, the cluster has {cluster.servers} servers",
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
