"""The cluster model (:class:`~cassini.service.cluster.ClusterNetwork`) from Kubernetes
objects, as a hand-written cluster file would give it.  Pure: JSON objects in, model out.

Where a node sits (:class:`Hierarchy`) comes from one of:

- a Kueue ``Topology`` (``kueue.x-k8s.io``): ``spec.levels[].nodeLabel``, top level
  first; a node's domain at level k is the tuple of its values of levels 0..k, so a rack
  name may repeat under different blocks.  A last level ``kubernetes.io/hostname`` is the
  node itself (schema: kubernetes-sigs/kueue ``apis/kueue/v1beta1/topology_types.go``);
- Volcano ``HyperNode`` objects (``topology.volcano.sh/v1alpha1``): ``spec.tier`` (1 is
  the lowest), ``spec.members[]`` of type ``Node`` (selector ``exactMatch.name``,
  ``regexMatch.pattern`` or ``labelMatch``) or ``HyperNode`` (exact or regex on names)
  (schema: volcano-sh/apis ``pkg/apis/topology/v1alpha1/hypernode_types.go``);
- plain node labels, top first (``--topology-labels block,rack``); with none of these,
  the well-known ``topology.kubernetes.io/region`` and ``zone`` labels the nodes carry.
  With labels (these two and Kueue's), a node missing only the lowest tiers' labels sits
  directly under the deepest domain it names (a node with a region and no zone: under
  its region), reported in one line per missing label; a node missing a higher tier's
  label is not placed.

Links (:func:`build_cluster`): every node sends through its NIC (``<node>-nic``, the
node's annotation ``cassini.io/nic-bps`` in bits/s, a number or a Kubernetes quantity
such as ``100G``, else ``--nic-bps``) and through the
uplink and downlink of each domain above it (``<domain path joined by />-up`` and
``-down``), whose capacity is the sum of the capacities below it divided by that tier's
oversubscription.  A job on two or more nodes crosses the links of all its nodes (on one
node it crosses none), as with a cluster file.

A node the topology places but whose NIC cannot be sized (an annotation that is not a
capacity of at least :data:`MIN_NIC_BPS`, or none and no ``--nic-bps``) is left out of the
model, yet its NIC still counts towards the uplinks above it: at ``--nic-bps`` when given,
else at the median NIC of the kept nodes of its lowest domain that has any (reported, one
line per domain).  A node the API server no longer lists is gone: the uplinks above it are
the sum of the nodes that remain.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cassini import schema
from cassini.errors import InputError
from cassini.schema import counted
from cassini.service.cluster import CONTROL_CHARS, ClusterNetwork

ANNOTATION_NIC_BPS = "cassini.io/nic-bps"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: the tiers used when the cluster publishes no topology and --topology-labels is not
#: given: those of these well-known node labels the nodes carry, top first
WELL_KNOWN_LABELS = ("topology.kubernetes.io/region", "topology.kubernetes.io/zone")
#: the smallest NIC capacity (bits/s) a node annotation may give: below it, the number
#: was surely meant in another unit (``100`` for 100 Gb/s)
MIN_NIC_BPS = 1e6
#: how many node names a one-line summary lists before ``...``
NAMES_SHOWN = 4


def object_name(obj: Any, where: str = "") -> str:
    """An API object's ``metadata.name``: a non-empty string without control characters
    (Kubernetes allows none; one would hide in the logs), else InputError naming the
    field under ``where`` (``node[3].metadata.name``; ``metadata.name`` without it)."""
    if not isinstance(obj, Mapping):
        raise InputError(where, f"must be a JSON object, got {schema.kind_of(obj)}")
    meta = {} if obj.get("metadata") is None else obj["metadata"]
    if not isinstance(meta, Mapping):
        raise InputError(
            schema.join(where, "metadata"), f"must be a JSON object, got {schema.kind_of(meta)}"
        )
    name = meta.get("name")
    field = schema.join(where, "metadata.name")
    if not isinstance(name, str) or not name:
        raise InputError(field, f"missing or not a string, got {schema.kind_of(name)}")
    if CONTROL_CHARS.search(name):
        raise InputError(field, f"must not contain control characters, got {name!r}")
    return name


@dataclass(frozen=True)
class KubeNode:
    """What the model needs of a Node object: name, labels, annotations."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_object(cls, obj: Any, where: str = "node") -> KubeNode:
        """A Node from its API JSON (``metadata.name``, ``.labels``, ``.annotations``)."""
        name = object_name(obj, where)
        meta = obj["metadata"]
        labels = schema.require_object(meta.get("labels") or {}, f"{where}.metadata.labels")
        ann = schema.require_object(meta.get("annotations") or {}, f"{where}.metadata.annotations")
        return cls(name, {str(k): str(v) for k, v in labels.items()},
                   {str(k): str(v) for k, v in ann.items()})


@dataclass(frozen=True)
class Hierarchy:
    """Where nodes sit: the tiers' names (top first), each placed node's domain path (one
    name per tier, top first; shorter where a hierarchy skips tiers), the nodes that could
    not be placed (with why), and what it was read from; ``shallow``: the placed nodes
    whose path stops above the lowest tier for want of labels (node -> the labels)."""

    source: str
    tiers: tuple[str, ...]
    paths: dict[str, tuple[str, ...]]
    unplaced: dict[str, str] = field(default_factory=dict)
    #: the tier (0: top) of a domain whose depth in its path does not say it (a Volcano
    #: rack HyperNode with no parent sits in the rack tier, not the top one)
    domain_tiers: dict[tuple[str, ...], int] = field(default_factory=dict)
    shallow: dict[str, str] = field(default_factory=dict)

    def tier_index(self, path: tuple[str, ...]) -> int:
        """The tier (0: top) of the domain ``path`` (top first)."""
        return self.domain_tiers.get(path, len(path) - 1)


@dataclass(frozen=True)
class LinkOptions:
    """Link capacities: the NIC (bits/s) of nodes without the annotation (None: such a
    node is left out and reported) and the oversubscription of each tier, top first (a
    missing tier: 1, no oversubscription)."""

    nic_bps: float | None = None
    oversubscription: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.nic_bps is not None and not (self.nic_bps > 0 and math.isfinite(self.nic_bps)):
            raise InputError("nic-bps", f"must be a finite number > 0, got {self.nic_bps!r}")
        for i, x in enumerate(self.oversubscription):
            if not (x >= 1 and math.isfinite(x)):
                raise InputError(
                    f"oversubscription[{i}]", f"must be a finite number >= 1, got {x!r}"
                )

    def of_tier(self, depth: int) -> float:
        return self.oversubscription[depth] if depth < len(self.oversubscription) else 1.0


def hierarchy_from_labels(
    nodes: Iterable[KubeNode], labels: Sequence[str], source: str = ""
) -> Hierarchy:
    """Tiers from node labels, top first; a last ``kubernetes.io/hostname`` is the node.
    A node missing only the lowest tiers' labels is placed under the deepest domain it
    names (``shallow``); one missing a higher tier's label is not placed."""
    labels = list(labels)
    if not labels:
        raise InputError("topology-labels", "give at least one label")
    if len(set(labels)) != len(labels):
        raise InputError("topology-labels", f"a label repeats: {','.join(labels)}")
    if HOSTNAME_LABEL in labels[:-1]:
        raise InputError("topology-labels", f"{HOSTNAME_LABEL} can only be the last level")
    tiers = labels[:-1] if labels[-1] == HOSTNAME_LABEL else labels
    paths: dict[str, tuple[str, ...]] = {}
    unplaced: dict[str, str] = {}
    shallow: dict[str, str] = {}
    for node in nodes:
        values = [node.labels.get(label) or "" for label in tiers]
        depth = values.index("") if "" in values else len(values)
        missing = [label for label, v in zip(tiers, values, strict=True) if not v]
        if missing and (depth == 0 or any(values[depth:])):  # a higher tier's label missing
            unplaced[node.name] = f"no label {', '.join(missing)}"
            continue
        paths[node.name] = tuple(values[:depth])
        if missing:
            shallow[node.name] = ", ".join(missing)
    return Hierarchy(source or f"labels {','.join(labels)}", tuple(tiers), paths, unplaced,
                     shallow=shallow)


def hierarchy_from_well_known_labels(nodes: Iterable[KubeNode]) -> Hierarchy:
    """Tiers from :data:`WELL_KNOWN_LABELS`, those some node carries (the fallback when
    there is no Kueue Topology, no Volcano HyperNode and no ``--topology-labels``);
    InputError when no node carries either."""
    nodes = list(nodes)
    carried = [x for x in WELL_KNOWN_LABELS if any(n.labels.get(x) for n in nodes)]
    if nodes and not carried:
        raise InputError(
            "topology",
            "no Kueue Topology and no Volcano HyperNode in the cluster, and no node carries "
            f"the label {' or '.join(WELL_KNOWN_LABELS)}: give --topology-labels (node "
            "labels, top tier first)",
        )
    labels = carried or list(WELL_KNOWN_LABELS)
    return hierarchy_from_labels(
        nodes, labels, f"labels {','.join(labels)} (the well-known node labels: no Kueue "
        "Topology, no Volcano HyperNode, no --topology-labels)",
    )


def kueue_levels(topology: Any, where: str = "Topology") -> tuple[str, ...]:
    """The node labels of a Kueue ``Topology``'s ``spec.levels``, top first."""
    obj = schema.require_object(topology, where)
    spec = schema.require_object(obj.get("spec") or {}, f"{where}.spec")
    levels = schema.array(spec.get("levels"), f"{where}.spec.levels", non_empty=True)
    out = []
    for i, level in enumerate(levels):
        f = f"{where}.spec.levels[{i}]"
        label = schema.require_object(level, f).get("nodeLabel")
        if not isinstance(label, str) or not label:
            raise InputError(f"{f}.nodeLabel", "missing or not a string")
        out.append(label)
    return tuple(out)


def hierarchy_from_kueue(topology: Any, nodes: Iterable[KubeNode]) -> Hierarchy:
    """Tiers from a Kueue ``Topology`` object over the nodes' labels."""
    meta = topology.get("metadata") if isinstance(topology, dict) else None
    name = (meta.get("name") if isinstance(meta, dict) else None) or "?"
    levels = kueue_levels(topology, f"Topology {name}")
    return hierarchy_from_labels(nodes, levels, f"Kueue Topology {name}")


def _selects(selector: Mapping[str, Any], name: str, labels: Mapping[str, str] | None,
             where: str) -> bool:
    """Whether a HyperNode member selector matches ``name`` (and ``labels``, for nodes)."""
    exact = selector.get("exactMatch")
    if exact is not None:
        return schema.require_object(exact, f"{where}.exactMatch").get("name") == name
    regex = selector.get("regexMatch")
    if regex is not None:
        pattern = schema.require_object(regex, f"{where}.regexMatch").get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise InputError(f"{where}.regexMatch.pattern", "missing or not a string")
        try:
            return re.search(pattern, name) is not None
        except re.error as e:
            raise InputError(f"{where}.regexMatch.pattern", f"bad regex: {e}") from None
    label = selector.get("labelMatch")
    if label is not None:
        return labels is not None and _label_selector_matches(
            schema.require_object(label, f"{where}.labelMatch"), labels, f"{where}.labelMatch"
        )
    raise InputError(where, "needs exactMatch, regexMatch or labelMatch")


def _label_selector_matches(sel: Mapping[str, Any], labels: Mapping[str, str], where: str) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists,
    DoesNotExist); InputError naming the field of a malformed one."""
    match = schema.require_object(sel.get("matchLabels") or {}, f"{where}.matchLabels")
    for k, v in match.items():
        if not isinstance(v, str):
            raise InputError(f"{where}.matchLabels.{k}", f"must be a string, got {v!r}")
    exprs = schema.array(sel.get("matchExpressions") or [], f"{where}.matchExpressions")
    ok = all(labels.get(k) == v for k, v in match.items())
    for i, expr in enumerate(exprs):
        f = f"{where}.matchExpressions[{i}]"
        expr = schema.require_object(expr, f)
        key, op = expr.get("key"), expr.get("operator")
        if not isinstance(key, str) or not key:
            raise InputError(f"{f}.key", "missing or not a string")
        values = schema.array(expr.get("values") or [], f"{f}.values")
        if not all(isinstance(v, str) for v in values):
            raise InputError(f"{f}.values", "must be a list of strings")
        if op == "In":
            ok = ok and labels.get(key) in values
        elif op == "NotIn":
            ok = ok and labels.get(key) not in values
        elif op == "Exists":
            ok = ok and key in labels
        elif op == "DoesNotExist":
            ok = ok and key not in labels
        else:
            raise InputError(f"{f}.operator", f"unknown operator {op!r}")
    return ok


def _read_hypernodes(
    hypernodes: Sequence[Any],
) -> tuple[dict[str, int], dict[int, str], dict[str, list[Any]]]:
    """Each HyperNode's tier, the tiers' names (``spec.tierName``) and each HyperNode's
    members, checked; InputError naming the HyperNode's field."""
    tier_of: dict[str, int] = {}
    tier_name: dict[int, str] = {}
    specs: dict[str, list[Any]] = {}
    for i, hn in enumerate(hypernodes):
        where = f"HyperNode[{i}]"
        hn = schema.require_object(hn, where)
        meta = schema.require_object(hn.get("metadata") or {}, f"{where}.metadata")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}.metadata.name", "missing or not a string")
        where = f"HyperNode {name}"
        if name in specs:
            raise InputError(where, "listed twice by the API server")
        spec = schema.require_object(hn.get("spec") or {}, f"{where}.spec")
        try:
            tier = int(spec.get("tier"))
        except (TypeError, ValueError):
            raise InputError(
                f"{where}.spec.tier", f"must be an integer, got {spec.get('tier')!r}"
            ) from None
        tier_of[name] = tier
        if spec.get("tierName"):
            tier_name.setdefault(tier, str(spec["tierName"]))
        specs[name] = schema.array(spec.get("members") or [], f"{where}.spec.members")
    return tier_of, tier_name, specs


def _hypernode_members(
    specs: Mapping[str, list[Any]], tier_of: Mapping[str, int], nodes: Sequence[KubeNode]
) -> tuple[dict[str, list[str]], dict[str, dict[int, list[str]]]]:
    """Who lists whom: each HyperNode's parents (the HyperNodes listing it, sorted) and
    each node's HyperNodes by tier (sorted names)."""
    parents: dict[str, list[str]] = {}
    holders: dict[str, dict[int, list[str]]] = {}
    for name in sorted(specs, key=lambda n: (tier_of[n], n)):
        for j, member in enumerate(specs[name]):
            where = f"HyperNode {name}.spec.members[{j}]"
            member = schema.require_object(member, where)
            kind = member.get("type", "Node")
            selector = schema.require_object(member.get("selector") or {}, f"{where}.selector")
            if kind == "HyperNode":
                for child in specs:
                    if child != name and _selects(selector, child, None, f"{where}.selector"):
                        listed = parents.setdefault(child, [])
                        if name not in listed:
                            listed.append(name)
            elif kind == "Node":
                for node in nodes:
                    if _selects(selector, node.name, node.labels, f"{where}.selector"):
                        listed = holders.setdefault(node.name, {}).setdefault(tier_of[name], [])
                        if name not in listed:
                            listed.append(name)
            else:
                raise InputError(f"{where}.type", f"must be Node or HyperNode, got {kind!r}")
    return parents, holders


def hierarchy_from_hypernodes(hypernodes: Sequence[Any], nodes: Iterable[KubeNode]) -> Hierarchy:
    """Tiers from Volcano ``HyperNode`` objects: a node's path is the chain of HyperNodes
    that contain it, from the highest tier down to the lowest HyperNode listing it.  A
    domain keeps its own tier's place (a rack HyperNode with no parent is in the rack tier,
    not the top one).  A node listed by two HyperNodes of one tier, or under a HyperNode
    that two HyperNodes list, is not placed (``unplaced``, naming them)."""
    nodes = list(nodes)
    tier_of, tier_name, specs = _read_hypernodes(hypernodes)
    parents, holders = _hypernode_members(specs, tier_of, nodes)
    _check_no_cycle(parents)
    levels = sorted(set(tier_of.values()), reverse=True)
    rank = {t: i for i, t in enumerate(levels)}  # 0: the top tier
    paths: dict[str, tuple[str, ...]] = {}
    unplaced: dict[str, str] = {}
    domain_tiers: dict[tuple[str, ...], int] = {}
    for node in nodes:
        by_tier = holders.get(node.name)
        if not by_tier:
            unplaced[node.name] = "in no HyperNode"
            continue
        twice = [(t, hs) for t, hs in sorted(by_tier.items()) if len(hs) > 1]
        if twice:
            t, hs = twice[0]
            unplaced[node.name] = (
                f"in {len(hs)} HyperNodes of tier {t}: {', '.join(hs)} (one per tier)"
            )
            continue
        chain = [by_tier[min(by_tier)][0]]
        while len(parents.get(chain[-1], ())) == 1:
            chain.append(parents[chain[-1]][0])
        if len(parents.get(chain[-1], ())) > 1:
            above = parents[chain[-1]]
            unplaced[node.name] = (
                f"under HyperNode {chain[-1]}, a member of {len(above)} HyperNodes: "
                f"{', '.join(above)} (one parent each)"
            )
            continue
        path = tuple(reversed(chain))
        paths[node.name] = path
        for k in range(1, len(path) + 1):
            if rank[tier_of[path[k - 1]]] != k - 1:
                domain_tiers[path[:k]] = rank[tier_of[path[k - 1]]]
    tiers = tuple(tier_name.get(t, f"tier {t}") for t in levels)
    return Hierarchy("Volcano HyperNodes", tiers, paths, unplaced, domain_tiers)


def _check_no_cycle(parents: Mapping[str, Sequence[str]]) -> None:
    """InputError naming the HyperNodes that contain each other (child -> parents)."""
    done: set[str] = set()

    def walk(chain: list[str]) -> None:
        for up in parents.get(chain[-1], ()):
            if up in chain:
                cycle = list(reversed(chain[chain.index(up):] + [up]))
                raise InputError(
                    f"HyperNodes {', '.join(sorted(set(cycle)))}",
                    f"members of each other in a cycle ({' contains '.join(cycle)})",
                )
            if up not in done:
                walk([*chain, up])
        done.add(chain[-1])

    for start in sorted(parents):
        walk([start])


def nic_link(node: str) -> str:
    return f"{node}-nic"


def domain_links(path: Sequence[str]) -> tuple[str, str]:
    """The uplink and downlink ids of the domain ``path`` (top first)."""
    base = "/".join(path)
    return f"{base}-up", f"{base}-down"


#: Kubernetes quantity suffixes a NIC annotation may carry (bits/s): decimal and binary
QUANTITY_SUFFIXES = {
    "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
}
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T|P)")


def bits_per_s(raw: str) -> float:
    """A NIC capacity in bits/s: a plain number (``1.0e+11``) or a Kubernetes quantity
    (``100G``, ``400M``, ``100Gi``: decimal k, M, G, T, P; binary Ki, Mi, Gi, Ti); NaN
    when it is neither."""
    text = raw.strip()
    m = _QUANTITY.fullmatch(text)
    if m is not None:
        return float(m.group(1)) * QUANTITY_SUFFIXES[m.group(2)]
    try:
        return float(text)
    except ValueError:
        return math.nan


def nic_capacity(node: KubeNode, default_bps: float | None) -> float | None:
    """The node's NIC capacity (bits/s): its annotation (:func:`bits_per_s`, at least
    :data:`MIN_NIC_BPS`), else ``default_bps``; InputError naming the annotation (the
    caller names the node)."""
    raw = node.annotations.get(ANNOTATION_NIC_BPS)
    if raw is None:
        return default_bps
    value = bits_per_s(raw)
    if not (value > 0 and math.isfinite(value)):
        raise InputError(
            f"annotation {ANNOTATION_NIC_BPS}",
            f"must be a number of bits/s > 0 (1.0e+11) or a Kubernetes quantity (100G, "
            f"400M, 100Gi), got {raw!r}",
        )
    if value < MIN_NIC_BPS:
        raise InputError(
            f"annotation {ANNOTATION_NIC_BPS}",
            f"{raw.strip()} bits/s is below 1 Mbit/s; the unit is bits/s (e.g. 100e9 or 100G)",
        )
    return value


@dataclass(frozen=True)
class BuiltCluster:
    """The model built, with the hierarchy it came from, the nodes left out (name ->
    why), the nodes listed more than once but kept once (name -> how often), and what
    else the model assumed (subject -> what: left-out nodes' NICs counted at a median,
    nodes placed above the lowest tier), each one line ``subject: what``."""

    cluster: ClusterNetwork
    hierarchy: Hierarchy
    left_out: dict[str, str]
    repeated: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def check_oversubscription(hierarchy: Hierarchy, options: LinkOptions) -> None:
    """InputError (field ``oversubscription``) when ``options`` give more
    oversubscriptions than there are tiers (the extra ones would be ignored)."""
    if len(options.oversubscription) <= len(hierarchy.tiers):
        return
    tiers = (
        f"{len(hierarchy.tiers)} tiers ({', '.join(hierarchy.tiers)})"
        if hierarchy.tiers
        else "no tier above the nodes"
    )
    raise InputError(
        "oversubscription",
        f"{len(options.oversubscription)} values, but the cluster has {tiers}: give at "
        f"most {len(hierarchy.tiers)}, top tier first",
    )


def build_cluster(
    nodes: Iterable[KubeNode], hierarchy: Hierarchy, options: LinkOptions
) -> BuiltCluster:
    """The cluster model: each placed node's NIC and its domains' uplinks and downlinks,
    in sorted order (node names, then domain paths), so the same objects give the same
    model whatever order the API listed them in.  A node listed more than once is kept
    once when the copies are the same object, else left out; a placed node whose NIC
    cannot be sized is left out but counts towards its uplinks (see the module's head);
    InputError when ``options`` give more oversubscriptions than there are tiers."""
    check_oversubscription(hierarchy, options)
    by_name, left_out, repeated = _distinct(nodes, hierarchy)
    nic, unsized = _nics(by_name, hierarchy, options, left_out)
    estimated, notes = _estimate_nics(nic, unsized, hierarchy, options)
    notes |= _shallow_notes(hierarchy, by_name)
    capacity = _domain_capacities({**nic, **estimated}, hierarchy, options)
    used = {p[:k] for p in (hierarchy.paths[name] for name in nic) for k in range(1, len(p) + 1)}
    links: dict[str, float] = {}
    for path in sorted(used):
        up, down = domain_links(path)
        links[up] = capacity[path]
        links[down] = capacity[path]
    node_links: dict[str, tuple[str, ...]] = {}
    for name in sorted(nic):
        links[nic_link(name)] = nic[name]
        path = hierarchy.paths[name]
        chain = [nic_link(name)]
        for k in range(len(path), 0, -1):
            chain.extend(domain_links(path[:k]))
        node_links[name] = tuple(chain)
    return BuiltCluster(ClusterNetwork(links, node_links), hierarchy, left_out, repeated, notes)


def _distinct(
    nodes: Iterable[KubeNode], hierarchy: Hierarchy
) -> tuple[dict[str, KubeNode], dict[str, str], dict[str, str]]:
    """Each node once (name -> node), the nodes left out so far (not placed, or listed
    twice as different objects; name -> why) and those listed twice alike (name -> how
    often)."""
    copies: dict[str, list[KubeNode]] = {}
    for n in nodes:
        copies.setdefault(n.name, []).append(n)
    by_name = {name: objs[0] for name, objs in copies.items()}
    left_out = {n: why for n, why in hierarchy.unplaced.items() if n in by_name}
    repeated: dict[str, str] = {}
    for name, objs in copies.items():
        if len(objs) > 1 and all(o == objs[0] for o in objs):
            repeated[name] = f"listed {len(objs)} times (the same object); counted once"
        elif len(objs) > 1:
            left_out[name] = f"listed {len(objs)} times, with different labels or annotations"
    return by_name, left_out, repeated


def _nics(
    by_name: Mapping[str, KubeNode], hierarchy: Hierarchy, options: LinkOptions,
    left_out: dict[str, str],
) -> tuple[dict[str, float], list[str]]:
    """The kept nodes' NIC capacities (name -> bits/s), and the placed nodes left out for
    want of one (sorted names); ``left_out`` gets why."""
    nic: dict[str, float] = {}
    unsized: list[str] = []
    for name in sorted(by_name):
        if name in left_out:  # not placed, or listed twice over
            continue
        if name not in hierarchy.paths:
            left_out.setdefault(name, "not in the topology")
            continue
        try:
            cap = nic_capacity(by_name[name], options.nic_bps)
        except InputError as e:
            left_out[name] = str(e)  # names the annotation, not the node again
            unsized.append(name)
            continue
        if cap is None:
            left_out[name] = f"no annotation {ANNOTATION_NIC_BPS} and no --nic-bps"
            unsized.append(name)
            continue
        nic[name] = cap
    return nic, unsized


def _estimate_nics(
    nic: Mapping[str, float], unsized: Sequence[str], hierarchy: Hierarchy,
    options: LinkOptions,
) -> tuple[dict[str, float], dict[str, str]]:
    """The NICs the uplinks count for the placed nodes left out without one (name ->
    bits/s): ``--nic-bps``, else the median of the kept NICs of the node's lowest domain
    that has any (none anywhere: not counted); and one note per domain a median sized."""
    if options.nic_bps is not None:
        return dict.fromkeys(unsized, options.nic_bps), {}
    kept: dict[tuple[str, ...], list[float]] = {}
    for name, cap in nic.items():
        path = hierarchy.paths[name]
        for k in range(len(path) + 1):
            kept.setdefault(path[:k], []).append(cap)
    estimated: dict[str, float] = {}
    by_domain: dict[tuple[str, ...], list[str]] = {}
    sources: dict[tuple[str, ...], tuple[str, ...]] = {}  # a domain -> whose median it took
    for name in unsized:
        path = hierarchy.paths[name]
        if not path:  # no tier above the node: no uplink to count it in
            continue
        source = next((path[:k] for k in range(len(path), -1, -1) if path[:k] in kept), None)
        if source is not None:
            estimated[name] = statistics.median(kept[source])
            by_domain.setdefault(path, []).append(name)
            sources[path] = source
    notes: dict[str, str] = {}
    for path, names in sorted(by_domain.items()):
        source = sources[path]
        whose = (
            "its" if source == path
            else f"domain {'/'.join(source)}'s" if source else "the cluster's"
        )
        notes[f"domain {'/'.join(path)}"] = (
            f"{counted(len(names), 'node')} left out of the model ({_some(names)}) still "
            f"count{'s' if len(names) == 1 else ''} towards the uplinks above, each at "
            f"{estimated[names[0]] / 1e9:.4g} Gb/s: the median NIC of {whose} "
            f"{counted(len(kept[source]), 'kept node')} (no --nic-bps)"
        )
    return estimated, notes


def _shallow_notes(hierarchy: Hierarchy, by_name: Mapping[str, KubeNode]) -> dict[str, str]:
    """One note per set of missing labels: how many nodes, which, placed where."""
    groups: dict[str, list[str]] = {}
    for name, labels in sorted(hierarchy.shallow.items()):
        if name in by_name:
            groups.setdefault(labels, []).append(name)
    return {
        f"label {labels}": f"missing on {counted(len(names), 'node')} ({_some(names)}), placed "
        "directly under the deepest domain their other labels name"
        for labels, names in groups.items()
    }


def _some(names: Sequence[str]) -> str:
    """The first :data:`NAMES_SHOWN` names, then ``...``."""
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (", ..." if len(names) > NAMES_SHOWN else "")


def _domain_capacities(
    nic: Mapping[str, float], hierarchy: Hierarchy, options: LinkOptions
) -> dict[tuple[str, ...], float]:
    """Each domain's capacity: the sum of what is directly below it (NICs, domains) over
    its tier's oversubscription; InputError naming a domain whose sum overflows."""
    pending: dict[tuple[str, ...], float] = {}
    for name, cap in nic.items():
        path = hierarchy.paths[name]
        pending[path] = pending.get(path, 0.0) + cap
    capacity: dict[tuple[str, ...], float] = {}
    depth = max((len(p) for p in pending), default=0)
    while depth > 0:
        for path in [p for p in pending if len(p) == depth]:
            cap = pending.pop(path) / options.of_tier(hierarchy.tier_index(path))
            capacity[path] = cap
            up = path[:-1]
            if up:
                pending[up] = pending.get(up, 0.0) + cap
        depth -= 1
    for path, cap in capacity.items():
        if not math.isfinite(cap):
            raise InputError(
                f"domain {'/'.join(path)}", "capacity too large (the NICs below it overflow)"
            )
    return capacity
