"""Run a simulator configuration at packet level in ns-3 and write a results JSON.

``python -m cassini.packet.run CONFIG [--sharing maxmin] [--scale 50] [--out results.json]``

CONFIG is a ``cassini sim run`` configuration (:mod:`cassini.sim.config`; ``network:
packet`` accepted, which the simulator itself does not take yet): its ``cluster``,
``workload`` (Poisson or a trace), ``profiles`` (its files and its rule, applied as the
simulator applies it: :func:`cassini.sim.engine.job_profile`), ``routing``, ``mltcp`` and
``seed`` are used; ``schedulers``, ``network`` and ``candidates`` are not (a packet-level
run is one mechanism, given with ``--sharing``).  Every job is placed at its arrival,
packed (:func:`cassini.sim.parts.placement.candidate_placements`' first candidate) on the
GPUs the jobs before it left free, or on the hosts its trace row names (given servers by
the rule ``cassini sim run``'s ``recorded`` scheduler uses:
:func:`cassini.sim.recorded.host_servers`); all jobs must fit
at once (no queueing, no completions freeing GPUs: until the simulator's network seam
lands, a packet-level run replays placements, it does not schedule).

Scale: every link's rate and every phase's bytes and rate are divided by ``--scale``
(default: the fastest server link over 1 Gbit/s), compute times kept, so a phase takes
as long as at full rate; results state the factor.  Every ring hop is paced to its
phase's rate (the fluid model's cap on a phase's flows), so a job alone runs at its
profile's period plus what packets add (headers, ACKs, slow start).  Output per job: every
iteration's time (seconds, end minus the previous end; the first from the job's start)
and their mean.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from cassini.errors import InputError
from cassini.nic_scale import DEFAULT_PROFILE_RULE
from cassini.packet.fabric import MECHANISMS, FabricSettings
from cassini.packet.jobs import DEFAULT_SETTINGS, PacketJob, simulate
from cassini.packet.ns3env import PacketUnavailable
from cassini.packet.plan import as_topology
from cassini.profile import JobProfile
from cassini.sim.engine import job_profile
from cassini.sim.parts.placement import candidate_placements
from cassini.sim.recorded import host_servers, recorded_options
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec


def place(
    cluster: Cluster | Topology, specs: Sequence[JobSpec], seed: int = 0
) -> dict[str, tuple[int, ...]]:
    """Servers of every job: its trace's hosts (their servers by the simulator's recorded
    rule, :func:`cassini.sim.recorded.host_servers`: by name on a host table or on a
    generated topology that names every host the trace names, else first appearance),
    else packed on the GPUs still free; all at once (InputError naming the job when one
    does not fit)."""
    topo = as_topology(cluster)
    free = np.array(topo.gpus_per_host, dtype=np.int64)
    rng = np.random.default_rng(seed)
    recorded = [s for s in specs if s.hosts]
    host_server = host_servers(recorded, cluster) if recorded else {}
    out: dict[str, tuple[int, ...]] = {}
    for spec in sorted(specs, key=lambda s: s.arrival_s):
        if spec.hosts:
            options = recorded_options(spec, host_server, free)
            problem = "its hosts' GPUs are taken by the jobs before it"
        else:
            options = candidate_placements(topo, free, spec.gpus, 1, rng)
            problem = f"{spec.gpus} GPUs do not fit beside the jobs before it"
        if not options:
            raise InputError(
                f"jobs.{spec.job_id}", f"{problem}: a packet-level run places every job at once"
            )
        for s, g in options[0].items():
            free[s] -= g
        out[spec.job_id] = tuple(sorted(options[0]))
    return out


def jobs_of(
    specs: Sequence[JobSpec],
    servers: Mapping[str, Sequence[int]],
    library: Mapping[str, JobProfile],
    iterations: int | None,
    cluster: Cluster | Topology,
    rule: str = DEFAULT_PROFILE_RULE,
) -> list[PacketJob]:
    """PacketJobs for ``specs`` (free-running from their arrival), ``iterations`` capping
    each job's count; each job's profile is its library profile under the ``profiles:``
    ``rule`` on its servers' slowest link (:func:`cassini.sim.engine.job_profile`, the
    fluid engine's own)."""
    out = []
    for s in sorted(specs, key=lambda s: s.arrival_s):
        n = s.iterations if iterations is None else min(iterations, s.iterations)
        on = tuple(servers[s.job_id])
        profile = job_profile(library[s.model], cluster, on, rule)
        out.append(PacketJob(s.job_id, on, profile, n, s.arrival_s))
    return out


def run_config(
    path: Path | str,
    *,
    sharing: str = "maxmin",
    scale: float | None = None,
    iterations: int | None = None,
    settings: FabricSettings = DEFAULT_SETTINGS,
) -> dict[str, Any]:
    """Read a simulator configuration, run it at packet level, return the results JSON
    object."""
    from cassini import files
    from cassini.sim.config import config_from_dict

    path = Path(path)
    obj = files.read_data(path)
    if isinstance(obj, dict) and obj.get("network") == "packet":
        obj = {k: v for k, v in obj.items() if k != "network"}  # what this runner is
    try:
        cfg = config_from_dict(obj, base=path.parent)
    except InputError as e:
        raise e.in_file(path) from None
    library = cfg.library()
    specs = cfg.jobs(library)
    topo = as_topology(cfg.cluster)
    try:
        servers = place(cfg.cluster, specs, cfg.seed)
    except InputError as e:
        raise e.in_file(path) from None
    jobs = jobs_of(specs, servers, library, iterations, topo, cfg.options.profiles)
    load_cpu, load_wall = _cpu_s(), time.perf_counter()
    from cassini.packet import native

    native.define()  # ns-3's bindings and our C++: once per process
    start_cpu = _cpu_s()
    load = (start_cpu - load_cpu, time.perf_counter() - load_wall)
    wall = time.perf_counter()
    the_plan, results = simulate(
        topo,
        jobs,
        sharing=sharing,
        routing=cfg.options.routing,
        seed=cfg.seed,
        scale=scale,
        settings=settings,
        mltcp=cfg.options.mltcp,
    )
    cpu = _cpu_s() - start_cpu
    return {
        "config": str(path),
        "network": "packet",
        "sharing": sharing,
        "routing": cfg.options.routing,
        "scale": the_plan.scale,
        "scale_note": "link rates, phase bytes and phase rates divided by scale; compute "
        "times kept",
        # how the library's profiles met the server links (cassini.nic_scale.on_link)
        "profiles": cfg.options.profiles,
        "settings": asdict(settings),
        "hosts": topo.servers,
        "cpu_s": round(cpu, 3),
        "wall_s": round(time.perf_counter() - wall, 3),
        "ns3_load_cpu_s": round(load[0], 3),
        "ns3_load_wall_s": round(load[1], 3),
        "jobs": {
            r.job_id: {
                "servers": list(r.servers),
                "path_index": the_plan.path_index[r.job_id],
                "mean_iteration_s": r.mean_iteration_s,
                "dedicated_iteration_s": r.dedicated_iteration_s,
                "iteration_times_s": list(r.iteration_times_s),
                "finished": r.finished,
            }
            for r in results
        },
    }


def _cpu_s() -> float:
    """CPU seconds this process has used (user + system)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cassini.packet.run",
        description="Run a simulator configuration at packet level in ns-3.",
    )
    parser.add_argument("config", help="a cassini sim configuration (YAML or JSON)")
    parser.add_argument(
        "--sharing",
        default="maxmin",
        choices=sorted(MECHANISMS),
        help="link-sharing mechanism: switch queue discipline and TCP variant "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=None,
        help="divide link rates and phase bytes by this (default: to 1 Gbit/s)",
    )
    parser.add_argument(
        "--iterations", type=int, default=None, help="run at most this many iterations of every job"
    )
    parser.add_argument(
        "--ecn-k",
        type=int,
        default=FabricSettings.ecn_k,
        help="RED marking threshold, packets (dctcp, mltcp)",
    )
    parser.add_argument("--out", default="packet_results.json", help="results JSON path")
    args = parser.parse_args(argv)
    try:
        out = run_config(
            args.config,
            sharing=args.sharing,
            scale=args.scale,
            iterations=args.iterations,
            settings=FabricSettings(ecn_k=args.ecn_k),
        )
    except (InputError, PacketUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps(out, indent=1))
    for job_id, r in out["jobs"].items():
        print(
            f"{job_id}: mean iteration {r['mean_iteration_s']:.6f} s "
            f"(dedicated {r['dedicated_iteration_s']:.6f} s)"
        )
    print(
        f"scale {out['scale']:g}: {out['cpu_s']} CPU s simulating, "
        f"{out['ns3_load_cpu_s']} CPU s loading ns-3; wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
