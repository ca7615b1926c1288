"""Jobs that arrive at the simulated cluster: the profile library, Poisson arrivals at a
given load, and trace files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from cassini import files, schema
from cassini.errors import InputError
from cassini.nic_scale import MEASURED_NIC_BPS, MeasuredProfile, on_link
from cassini.profile import JobProfile, library_model, profiles_from_dicts
from cassini.sim.jobspec import JobSpec
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topology import Cluster

#: The most jobs a Poisson workload draws (``workload.poisson.jobs``): a simulation of more
#: would run for days, and a huge count overflowed numpy's draw.
MAX_JOBS = 1_000_000


# -- profile library ----------------------------------------------------------------------
def load_library(extra: Sequence[Path | str] = ()) -> dict[str, JobProfile]:
    """The shipped profile library plus profiles from ``extra`` JSON files (one profile
    object or an array of them each, e.g. written by ``testbed.measure``); a later file
    replaces a profile of the same id.  A profile whose ``provenance.nic_bps`` (bits/s,
    the NIC it was measured on) is not 50 Gbit/s is a
    :class:`cassini.nic_scale.MeasuredProfile`, scaled from that rate under
    ``profiles: scale-to-nic``; one without is taken as measured at 50 Gbit/s
    (:func:`profile_warnings` says so)."""
    text = resources.files("cassini").joinpath("data/profiles.json").read_text()
    library = {p.job_id: p for p, _ in _profiles(json.loads(text), "library")}
    for path in extra:
        library |= {p.job_id: p for p, _ in _read_profiles(path)}
    return library


def profile_warnings(extra: Sequence[Path | str], rule: str) -> list[str]:
    """One line per profile of the ``extra`` files that names no ``provenance.nic_bps``
    when ``rule`` is ``scale-to-nic``: it is taken as measured at 50 Gbit/s."""
    if rule != "scale-to-nic":
        return []
    gbit = f"{MEASURED_NIC_BPS / 1e9:g} Gbit/s"
    return [
        f"profile {p.job_id!r} ({path}) has no provenance.nic_bps: taken as measured at "
        f"{gbit} (rule scale-to-nic); give rule: as-measured to keep its rates, or write "
        "it with `cassini profile --nic-bps`"
        for path in extra
        for p, given in _read_profiles(path)
        if not given
    ]


def _read_profiles(path: Path | str) -> list[tuple[JobProfile, bool]]:
    data = files.parse_json(files.read_text(path), str(path))
    return _profiles(data if isinstance(data, list) else [data], str(path))


def _profiles(items: Any, field: str) -> list[tuple[JobProfile, bool]]:
    """The profiles of a JSON array, each with whether it names ``provenance.nic_bps``
    (a number > 0, InputError naming ``field[i].provenance.nic_bps`` otherwise)."""
    out = []
    for i, p in enumerate(profiles_from_dicts(items, field)):
        provenance = items[i].get("provenance", {})
        if "nic_bps" not in provenance:
            out.append((p, False))
            continue
        where = f"{field}[{i}].provenance.nic_bps"
        nic = schema.number(provenance["nic_bps"], where, positive=True)
        if nic != MEASURED_NIC_BPS:
            p = MeasuredProfile(p.job_id, p.iteration_time_s, p.phases, nic_bps=nic)
        out.append((p, True))
    return out


def server_link_bps(cluster: Cluster | Topology, server: int) -> float:
    """Server ``server``'s link to its ToR (bits/s) as the network model sees it: with
    several planes (rails), one link's capacity x planes, the job's traffic being spread
    over all of them (``Topology.links``)."""
    if isinstance(cluster, Topology):
        return min(cluster.links[link] for link in cluster.host_links[server])
    return float(cluster.server_link_bps)


def cluster_link_bps(cluster: Cluster | Topology) -> float:
    """The server link (bits/s) a job has on ``cluster`` before it is placed: the
    slowest :func:`server_link_bps`.  A dedicated network runs a job at its profile on
    this link; the engine's queue policies rank by it too."""
    if isinstance(cluster, Topology):
        return min(server_link_bps(cluster, s) for s in range(len(cluster.host_links)))
    return server_link_bps(cluster, 0)


def library_on_cluster(
    library: Mapping[str, JobProfile], cluster: Cluster | Topology, rule: str
) -> dict[str, JobProfile]:
    """Each profile of ``library`` as a job gets it on ``cluster`` under the
    ``profiles:`` ``rule`` (:func:`cassini.nic_scale.on_link` on
    :func:`cluster_link_bps`): the profiles a Poisson ``load`` and a trace's run time
    (seconds on a dedicated network) are counted in."""
    link = cluster_link_bps(cluster)
    return {m: on_link(p, link, rule) for m, p in library.items()}


# -- Poisson arrivals ---------------------------------------------------------------------
def check_job_count(n_jobs: object) -> int:
    """``workload.poisson.jobs``: an integer in 1..:data:`MAX_JOBS` (InputError naming
    that field otherwise)."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or not 1 <= n_jobs <= MAX_JOBS:
        try:
            got = repr(n_jobs)
        except ValueError:  # an integer too long to write out
            got = "a number too long to show"
        got = got if len(got) <= 40 else got[:37] + "..."
        raise InputError("workload.poisson.jobs", f"must be an integer in 1..{MAX_JOBS}, got {got}")
    return n_jobs


def poisson_jobs(
    n_jobs: int,
    load: float,
    total_gpus: int,
    library: Mapping[str, JobProfile],
    *,
    gpus: Mapping[int, float],
    iterations: tuple[int, int] = (200, 1000),
    models: Sequence[str] | None = None,
    seed: int = 0,
) -> list[JobSpec]:
    """``n_jobs`` jobs arriving as a Poisson process at ``load``.

    Parameters
    ----------
    n_jobs : number of jobs, 1..:data:`MAX_JOBS` (InputError naming
        ``workload.poisson.jobs`` otherwise).
    load : offered load, the mean fraction of the cluster's GPUs that the jobs would keep
        busy on a dedicated network (1.0 = all of them).
    total_gpus : GPUs in the cluster.
    library : profiles by id, as the jobs run them on the cluster: the load is counted
        in their iteration times.  Before placement a job's server link is the
        cluster's (:func:`cluster_link_bps`), which is what a dedicated network gives
        it, so :meth:`cassini.sim.config.SimConfig.read_workload` passes
        :func:`library_on_cluster` (the ``profiles:`` rule on that link); the library as
        measured counts the load at the NIC it was measured on (50 Gbit/s).
    gpus : GPU-count distribution, ``{gpus: weight}``.
    iterations : inclusive range of iterations per job, drawn uniformly (paper: 200-1000).
    models : profile ids drawn uniformly (default: the whole library, as the paper); a
        name differing from an id only in case and punctuation (``VGG16``) means that id.
    seed : random seed.

    Returns
    -------
    Jobs sorted by arrival; the arrival rate is ``load * total_gpus / E[gpus * run time]``.
    """
    check_job_count(n_jobs)  # a huge count overflowed numpy's draw, or ran for days
    schema.number(load, "load", positive=True)
    models = [library_model(m, library, "models") for m in models or sorted(library)]
    sizes = np.array(sorted(gpus), int)
    weights = np.array([gpus[int(g)] for g in sizes], float)
    if len(sizes) == 0 or (sizes < 1).any() or (weights < 0).any() or weights.sum() <= 0:
        raise InputError("gpus", "needs GPU counts >= 1 with non-negative weights, not all 0")
    if sizes.max() > total_gpus:
        raise InputError("gpus", f"{sizes.max()} GPUs requested but the cluster has {total_gpus}")
    lo, hi = iterations
    if not 1 <= lo <= hi:
        raise InputError("iterations", f"need 1 <= low <= high, got {iterations}")
    rng = np.random.default_rng(seed)
    size = rng.choice(sizes, n_jobs, p=weights / weights.sum())
    iters = rng.integers(lo, hi + 1, n_jobs)
    model = rng.choice(np.array(models), n_jobs)
    mean_t = np.mean([library[m].iteration_time_s for m in models])
    mean_work = float(np.sum(sizes * weights) / weights.sum()) * (lo + hi) / 2 * mean_t  # GPU-s
    rate = load * total_gpus / mean_work  # jobs per second
    arrival = np.cumsum(rng.exponential(1 / rate, n_jobs))
    arrival -= arrival[0]
    return [
        JobSpec(f"j{k}", float(arrival[k]), int(size[k]), int(iters[k]), str(model[k]))
        for k in range(n_jobs)
    ]


# -- trace files --------------------------------------------------------------------------
def read_trace(path: Path | str, library: Mapping[str, JobProfile]) -> list[JobSpec]:
    """Read our CSV or JSON trace (see the module docstring); raises InputError naming
    file, line, column and field of the first problem.  Other published formats:
    :mod:`cassini.sim.traces`."""
    from cassini.sim.traces import read

    return read(path, library, format="csv").jobs


#: The trace files :func:`cassini.sim.traces.ours.write` writes, by suffix.
TRACE_SUFFIXES = (".csv", ".json")


def check_trace_suffix(path: Path | str) -> None:
    """InputError naming ``out`` unless ``path`` ends in a suffix our trace is written
    with (:data:`TRACE_SUFFIXES`; ``x.jsonl`` was written as CSV)."""
    suffix = Path(path).suffix.lower()
    if suffix not in TRACE_SUFFIXES:
        got = f"unknown suffix {suffix!r}" if suffix else "no suffix"
        raise InputError(
            "out", f"{path}: {got} (a trace is written as {' or '.join(TRACE_SUFFIXES)})"
        )
