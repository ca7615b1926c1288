"""Hypothesis strategies for ``cassini sim`` configurations, for the config fuzzer
(``tests/test_sim_fuzz.py``).

A drawn :class:`SimCase` is a configuration as a config file holds it (a dict that
``yaml.safe_dump`` writes) plus the files it names (a host table, a trace), so a test can
write it to a folder and read it back through ``read_config`` or the CLI.  Every form the
simulator accepts is drawn: a plain ``Cluster`` (two- or three-tier, with spines), the
generators (two-tier, three-tier, fat-tree, rail-optimised), a host table with racks of
different sizes and hosts of different GPU counts; every routing; schedulers composed of
one part of each kind (or none) from every table, ``ideal`` always among them; both
network models; Poisson workloads and traces (with recorded hosts, so ``recorded`` is
valid on them).  Clusters hold at most 32 GPUs and workloads a few jobs of tens of
iterations, so one run takes well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from cassini.nic_scale import PROFILE_RULES
from cassini.sim.workload import load_library

MODELS = tuple(sorted(load_library()))
#: A tiny config (12 Poisson jobs on 16 GPUs, two schedulers, a two-point sweep) that the
#: simulator's CLI and bound tests share; tests derive variants with ``|``, never mutate it.
TINY_CONFIG = {
    "name": "tiny",
    "cluster": {"racks": 4, "servers_per_rack": 2, "gpus_per_server": 2},
    "workload": {
        "poisson": {"jobs": 12, "load": 0.9, "gpus": {"2": 1, "5": 1}, "iterations": [20, 60]}
    },
    "schedulers": ["themis", "themis+cassini"],
    "candidates": 4,
    "sweep": {"load": [0.8, 1.0]},
}
ROUTINGS = ("single", "ecmp", "crux")
NETWORKS = ("windows", "continuous")
QUEUES = ("themis", "pollux", "fifo", "las")
#: name parts by kind, one of each (or none) per scheduler; ``cassini`` and ``crux``
#: bundle two kinds each, drawn as placement / routing with their second part implied
PLACEMENT_PARTS = ("", "packed", "random", "cassini", "defrag", "cassini+defrag", "random+defrag")
ROUTING_PARTS = ("", "single", "ecmp", "crux")
SHARING_PARTS = ("", "maxmin", "mltcp", "priority")
TIMING_PARTS = ("", "free", "held")


@dataclass(frozen=True)
class SimCase:
    """One drawn configuration: ``config`` as the YAML file holds it, ``files`` the
    files it names (relative path -> text), ``gpus`` the cluster's GPUs."""

    config: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    gpus: int = 0


@dataclass(frozen=True)
class _Cluster:
    """A drawn ``cluster:`` object, the host-table text it names (if any) and the GPUs of
    each server in the engine's server order (by first appearance for generated
    clusters; a host table's by name, listed here in the table's order)."""

    obj: dict[str, Any]
    hosts: tuple[tuple[str, int], ...]  # (host name, GPUs), one per server
    table: str | None = None


LINK = st.sampled_from([1.0e10, 2.5e10, 5.0e10, 1.0e11])
OVER = st.sampled_from([1, 1.5, 2, 4])
GPUS_PER_SERVER = st.sampled_from([1, 2, 4, 8])


def _named(n: int, gpus: int) -> tuple[tuple[str, int], ...]:
    return tuple((f"m{i}", gpus) for i in range(n))


@st.composite
def plain_clusters(draw: st.DrawFn) -> _Cluster:
    """``Cluster``'s own fields: two-tier, or three-tier with ``racks_per_pod``."""
    racks = draw(st.integers(1, 4))
    servers = draw(st.integers(1, 3))
    gpus = draw(GPUS_PER_SERVER if racks * servers <= 4 else st.sampled_from([1, 2]))
    obj: dict[str, Any] = {
        "racks": racks,
        "servers_per_rack": servers,
        "gpus_per_server": gpus,
        "server_link_bps": draw(LINK),
        "oversubscription": draw(OVER),
    }
    if draw(st.booleans()):
        obj["spines"] = draw(st.integers(1, 4))
    if racks > 1 and obj.get("spines", 1) == 1 and draw(st.booleans()):
        obj["racks_per_pod"] = draw(st.sampled_from([d for d in (1, 2) if racks % d == 0]))
        obj["pod_oversubscription"] = draw(st.sampled_from([1, 2]))
    return _Cluster(obj, _named(racks * servers, gpus))


@st.composite
def two_tier_clusters(draw: st.DrawFn) -> _Cluster:
    racks, servers = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    gpus = draw(GPUS_PER_SERVER if racks * servers <= 4 else st.sampled_from([1, 2]))
    obj = {
        "generate": "two-tier",
        "racks": racks,
        "servers_per_rack": servers,
        "gpus_per_server": gpus,
        "server_link_bps": draw(LINK),
        "oversubscription": draw(OVER),
        "spines": draw(st.integers(1, 4)),
    }
    return _Cluster(obj, _named(racks * servers, gpus))


@st.composite
def three_tier_clusters(draw: st.DrawFn) -> _Cluster:
    per_pod = draw(st.integers(1, 2))
    racks = per_pod * draw(st.integers(1, 3))
    servers = draw(st.integers(1, 2))
    gpus = draw(GPUS_PER_SERVER if racks * servers <= 4 else st.sampled_from([1, 2]))
    obj = {
        "generate": "three-tier",
        "racks": racks,
        "servers_per_rack": servers,
        "racks_per_pod": per_pod,
        "gpus_per_server": gpus,
        "server_link_bps": draw(LINK),
        "oversubscription": draw(OVER),
        "pod_oversubscription": draw(st.sampled_from([1, 2, 3])),
        "aggs_per_pod": draw(st.integers(1, 2)),
        "cores": draw(st.integers(1, 2)),
    }
    return _Cluster(obj, _named(racks * servers, gpus))


@st.composite
def fat_tree_clusters(draw: st.DrawFn) -> _Cluster:
    k = draw(st.sampled_from([2, 4]))
    gpus = draw(st.sampled_from([1, 2]) if k == 4 else GPUS_PER_SERVER)
    obj = {"generate": "fat-tree", "k": k, "gpus_per_server": gpus, "server_link_bps": draw(LINK)}
    return _Cluster(obj, _named(k**3 // 4, gpus))


@st.composite
def rail_clusters(draw: st.DrawFn) -> _Cluster:
    groups, servers = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    gpus = draw(st.sampled_from([1, 2, 4]))
    obj = {
        "generate": "rail-optimised",
        "groups": groups,
        "servers_per_group": servers,
        "gpus_per_server": gpus,
        "server_link_bps": draw(LINK),
        "oversubscription": draw(OVER),
        "spines": draw(st.integers(1, 2)),
    }
    return _Cluster(obj, _named(groups * servers, gpus))


@st.composite
def host_table_clusters(draw: st.DrawFn) -> _Cluster:
    """Our host-table header: racks of 1-4 hosts of 1-8 GPUs each, two-tier (no
    ``agg``) or three-tier (``agg`` per pod, one core)."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    three = draw(st.booleans())
    rows, hosts = [], []
    for r, size in enumerate(sizes):
        for h in range(size):
            name = f"r{r}h{h}"
            gpus = draw(
                st.sampled_from([1, 2, 4, 8]) if sum(sizes) <= 4 else st.sampled_from([1, 2])
            )
            hosts.append((name, gpus))
            pod = f",c0,p{r % 2}" if three else ""
            rows.append(f"{name},{gpus}{pod},t{r}")
    header = "host,gpus,core,agg,tor" if three else "host,gpus,tor"
    obj = {
        "hosts": "hosts.csv",
        "server_link_bps": draw(LINK),
        "oversubscription": draw(OVER),
    }
    if three:
        obj["pod_oversubscription"] = draw(st.sampled_from([1, 2]))
    return _Cluster(obj, tuple(hosts), "\n".join([header, *rows]) + "\n")


CLUSTERS = st.one_of(
    plain_clusters(),
    two_tier_clusters(),
    three_tier_clusters(),
    fat_tree_clusters(),
    rail_clusters(),
    host_table_clusters(),
)


@st.composite
def scheduler_names(draw: st.DrawFn, *, recorded: bool) -> str:
    """``queue[+placement][+routing][+sharing][+timing]``, one part of each kind at
    most (so always valid); ``recorded`` adds the trace-driven queue to the choice."""
    queue = draw(st.sampled_from(QUEUES + (("recorded",) if recorded else ())))
    placement = draw(st.sampled_from(PLACEMENT_PARTS))
    routing = draw(st.sampled_from(ROUTING_PARTS))
    sharing = draw(st.sampled_from(SHARING_PARTS))
    timing = draw(st.sampled_from(TIMING_PARTS))
    if "cassini" in placement and timing == "free":
        timing = ""  # cassini brings held timing: free would be a second timing part
    if routing == "crux" and sharing:
        sharing = ""  # crux brings priority sharing (naming it again is refused)
    return "+".join(p for p in (queue, placement, routing, sharing, timing) if p)


@st.composite
def poisson_workloads(draw: st.DrawFn, gpus: int) -> dict[str, Any]:
    """A few jobs of tens of iterations, sizes up to the whole cluster, load 0.2-2.5."""
    sizes = draw(st.sets(st.integers(1, gpus), min_size=1, max_size=3))
    if draw(st.booleans()):
        sizes.add(gpus)  # the whole cluster, often
    low = draw(st.integers(10, 60))
    return {
        "poisson": {
            "jobs": draw(st.integers(1, 8)),
            "load": draw(st.sampled_from([0.2, 0.5, 0.9, 1.0, 1.5, 2.5])),
            "gpus": {g: draw(st.integers(1, 3)) for g in sorted(sizes)},
            "iterations": [low, low + draw(st.integers(0, 40))],
            "models": sorted(draw(st.sets(st.sampled_from(MODELS), min_size=1, max_size=4))),
        }
    }


@st.composite
def trace_rows(draw: st.DrawFn, hosts: tuple[tuple[str, int], ...]) -> str:
    """Our CSV trace with a ``hosts`` column: each job on 1-3 distinct hosts of the
    cluster, some of each one's GPUs (a generated cluster maps hosts to servers by first
    appearance, a host table by name: both fit)."""
    n = draw(st.integers(1, 6))
    arrival = 0.0
    rows = ["job_id,arrival_s,gpus,iterations,model,hosts"]
    for k in range(n):
        picked = draw(
            st.lists(st.sampled_from(range(len(hosts))), min_size=1, max_size=3, unique=True)
        )
        on = [(hosts[i][0], draw(st.integers(1, hosts[i][1]))) for i in picked]
        arrival += draw(st.sampled_from([0.0, 0.5, 2.0, 10.0]))
        cell = ";".join(f"{h}:{g}" for h, g in on)
        rows.append(
            f"t{k},{arrival},{sum(g for _, g in on)},{draw(st.integers(10, 80))},"
            f"{draw(st.sampled_from(MODELS))},{cell}"
        )
    return "\n".join(rows) + "\n"


@st.composite
def sim_cases(draw: st.DrawFn) -> SimCase:
    """A whole valid configuration (see the module docstring)."""
    cluster = draw(CLUSTERS)
    gpus = sum(g for _, g in cluster.hosts)
    files = {"hosts.csv": cluster.table} if cluster.table else {}
    trace = draw(st.booleans())
    if trace:
        files["jobs.csv"] = draw(trace_rows(cluster.hosts))
        workload: dict[str, Any] = {"trace": "jobs.csv"}
    else:
        workload = draw(poisson_workloads(gpus))
    schemes = draw(st.lists(scheduler_names(recorded=trace), min_size=1, max_size=3, unique=True))
    config: dict[str, Any] = {
        "name": "fuzz",
        "cluster": cluster.obj,
        "workload": workload,
        "schedulers": ["ideal", *schemes],
        "routing": draw(st.sampled_from(ROUTINGS)),
        "network": draw(st.sampled_from(NETWORKS)),
        "candidates": draw(st.integers(1, 4)),
        "seed": draw(st.integers(0, 3)),
    }
    if draw(st.booleans()):
        config["priority_levels"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        config["defrag"] = {"migration_s": draw(st.sampled_from([0, 1, 9])), "cooldown_s": 0}
    if draw(st.booleans()):  # absent: the default, scale-to-nic
        config["profiles"] = draw(st.sampled_from(PROFILE_RULES))
    return SimCase(config, files, gpus)
