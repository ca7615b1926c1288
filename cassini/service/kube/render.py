"""A cluster model as text: in the cluster file format (:func:`cluster_file_text`, what
``cassini serve --cluster`` reads back) and drawn tier by tier (:func:`draw`).  Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import yaml

from cassini.schema import counted
from cassini.service.cluster import ClusterNetwork, RunningJob

#: PyYAML's implicit typing of plain scalars (what safe_load and safe_dump use)
_RESOLVER = yaml.resolver.Resolver()
_STR = "tag:yaml.org,2002:str"


def yaml_float(x: float) -> str:
    """A float YAML 1.1 reads back as the same float (PyYAML needs a dot in 1e+22)."""
    text = repr(float(x))
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exp = text.split("e")
        text = f"{mantissa}.0e{exp}"
    return text


def _scalar(s: str) -> str:
    """A string as a YAML flow scalar: plain when YAML reads it back as this string (and
    no reader takes it for a number), else JSON-quoted: ``.inf``, ``-1``, ``1_000``,
    ``true``, ``0x1f``, ``null``, ``~``, ``1e3`` would read as another type."""
    plain = (
        s
        and (s[0].isalnum() or s[0] in "_./")
        and all(c.isalnum() or c in "-_./" for c in s)
        and _RESOLVER.resolve(yaml.nodes.ScalarNode, s, (True, False)) == _STR
        and not _numeric(s)
    )
    return s if plain else json.dumps(s)


def _numeric(s: str) -> bool:
    """Whether ``s`` reads as a number somewhere (YAML 1.2 reads ``1e3`` and ``0o17`` as
    numbers, where PyYAML's YAML 1.1 does not): quoted too, for other readers."""
    for parse in (float, lambda x: int(x, 0)):
        try:
            parse(s)
            return True
        except ValueError:
            pass
    return False


#: What a YAML comment cannot hold: line breaks and what PyYAML refuses to read.
_NOT_IN_COMMENT = re.compile(
    "[^\t\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def comment(line: str) -> str:
    """``line`` as one YAML comment line (line breaks and unreadable characters escaped)."""
    text = _NOT_IN_COMMENT.sub(lambda m: repr(m.group())[1:-1], line)
    return f"# {text}" if text else "#"


def cluster_file_text(
    cluster: ClusterNetwork, jobs: Iterable[RunningJob] = (), header: Sequence[str] = ()
) -> str:
    """The cluster file (YAML) of the model: ``links``, ``nodes``, ``jobs`` (and
    ``epoch_s`` when set), ``header`` lines as comments on top."""
    out = [comment(line) for line in header]
    if cluster.epoch_s is not None:
        out.append(f"epoch_s: {yaml_float(cluster.epoch_s)}")
    out.append("links:" if cluster.links else "links: []")
    for lid, cap in cluster.links.items():
        out.append(f"  - {{id: {_scalar(lid)}, capacity_bps: {yaml_float(cap)}}}")
    out.append("nodes:" if cluster.nodes else "nodes: {}")
    for node, links in cluster.nodes.items():
        out.append(f"  {_scalar(node)}: [{', '.join(_scalar(x) for x in links)}]")
    jobs = list(jobs)
    if jobs:
        out.append("jobs:")
    for job in jobs:
        nodes = f"nodes: [{', '.join(_scalar(n) for n in job.nodes)}]"
        if job.model is not None:
            out.append(f"  - {{id: {_scalar(job.job_id)}, model: {_scalar(job.model)}, {nodes}}}")
        else:
            phases = ", ".join(
                f"{{start_s: {yaml_float(p.start_s)}, duration_s: {yaml_float(p.duration_s)}, "
                f"rate_bps: {yaml_float(p.rate_bps)}}}"
                for p in job.profile.phases
            )
            out.append(
                f"  - {{id: {_scalar(job.job_id)}, iteration_time_s: "
                f"{yaml_float(job.profile.iteration_time_s)}, phases: [{phases}], {nodes}}}"
            )
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Switch:
    """Links shared by the same set of nodes (one switch port pair, or a NIC)."""

    links: tuple[str, ...]
    capacities_bps: tuple[float, ...]
    nodes: frozenset[str]


def switches(cluster: ClusterNetwork) -> list[Switch]:
    """The cluster's links grouped by the set of nodes that send through them, largest
    set first (ties by first link id)."""
    users: dict[str, set[str]] = {}
    for node, links in cluster.nodes.items():
        for lid in links:
            users.setdefault(lid, set()).add(node)
    groups: dict[frozenset[str], list[str]] = {}
    for lid in cluster.links:
        groups.setdefault(frozenset(users.get(lid, ())), []).append(lid)
    out = [
        Switch(tuple(ls), tuple(cluster.links[x] for x in ls), nodes)
        for nodes, ls in groups.items()
    ]
    return sorted(out, key=lambda s: (-len(s.nodes), s.links[0]))


def _bps(x: float) -> str:
    for unit, scale in (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6)):
        if x >= scale:
            return f"{x / scale:g} {unit}"
    return f"{x:g} b/s"


def _links(links: Sequence[str], capacities: Sequence[float]) -> str:
    """Links and their capacity: ``a, b, 50 Gb/s`` when they share one, else each with
    its own (``a 50 Gb/s, b 100 Gb/s``)."""
    if len(set(capacities)) == 1:
        return f"{', '.join(links)}, {_bps(capacities[0])}"
    return ", ".join(f"{x} {_bps(c)}" for x, c in zip(links, capacities, strict=True))


def draw(cluster: ClusterNetwork) -> str:
    """The cluster tier by tier: each switch (links shared by more than one node) under
    the smallest switch that contains its nodes, with its links and capacity; under the
    lowest, its nodes and their own links (NICs), in the node's order; links that differ
    in capacity each show their own."""
    groups = switches(cluster)
    shared = [s for s in groups if len(s.nodes) > 1]
    parent: dict[int, int | None] = {}
    for i, s in enumerate(shared):
        holders = [j for j, t in enumerate(shared) if j != i and s.nodes < t.nodes]
        parent[i] = min(holders, key=lambda j: len(shared[j].nodes)) if holders else None
    own = {x for s in groups if len(s.nodes) == 1 for x in s.links}  # a node's own links
    lines = [
        f"{counted(len(cluster.nodes), 'node')}, {counted(len(cluster.links), 'link')}, "
        f"{counted(len(shared), 'shared switch')}"
    ]

    def node_line(node: str, indent: str) -> str:
        mine = [x for x in cluster.nodes[node] if x in own]  # in the node's own order
        what = _links(mine, [cluster.links[x] for x in mine]) if mine else "no own link"
        return f"{indent}{node}  ({what})"

    def walk(i: int, depth: int) -> None:
        s = shared[i]
        indent = "  " * depth
        if len(set(s.capacities_bps)) == 1:
            links = f"[{', '.join(s.links)}]  {_bps(s.capacities_bps[0])}"
        else:
            links = f"[{_links(s.links, s.capacities_bps)}]"
        lines.append(f"{indent}{links}  ({counted(len(s.nodes), 'node')})")
        kids = [j for j in parent if parent[j] == i]
        for j in kids:
            walk(j, depth + 1)
        covered = set().union(*(shared[j].nodes for j in kids)) if kids else set()
        for node in sorted(s.nodes - covered):
            lines.append(node_line(node, "  " * (depth + 1)))

    for i in (j for j in parent if parent[j] is None):
        walk(i, 0)
    in_shared = set().union(*(s.nodes for s in shared)) if shared else set()
    alone = sorted(n for n in cluster.nodes if n not in in_shared)
    if alone:
        lines.append("nodes on no shared switch:")
        lines.extend(node_line(n, "  ") for n in alone)
    return "\n".join(lines) + "\n"
