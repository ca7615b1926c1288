"""``cassini sim topo show FILE``: what a topology holds -- hosts, GPUs, switches per tier,
links per tier, uplink oversubscription per ToR -- and everything irregular about it."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from cassini import files
from cassini.errors import InputError
from cassini.sim.topologies.clos import from_cluster
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topologies.hosts import ColumnConflict, read_host_table
from cassini.sim.topologies.registry import build, is_topology_form
from cassini.sim.topologies.servers import server_table

#: GPUs per host assumed for a host table that names none (the Lingjun hosts have 8).
ASSUMED_GPUS_PER_SERVER = 8


def load(path: Path | str, **params: Any) -> tuple[Topology, list[str]]:
    """The topology in ``path`` -- a host table (``params`` as :func:`read_host_table`
    takes them) or a YAML/JSON config (its ``cluster:``, or the whole file as a
    ``cluster:`` object) -- and the assumptions made reading it.  Which of the two is
    :func:`is_host_table`'s answer for the file's first lines, whatever its name; ``-``:
    standard input, decided the same way (:func:`_load_stdin`)."""
    if str(path) == files.STDIN:
        return _load_stdin(**params)
    path = Path(path)
    files.check_text(path)
    notes: list[str] = []
    given = {k: v for k, v in params.items() if v is not None}
    if path.suffix.lower() == ".csv" or is_host_table(_head(path)):  # a .csv is one anyway
        try:
            return read_host_table(path, **given), notes
        except ColumnConflict as e:  # named as this command takes it: its flag
            raise e.given_as("--" + e.field.replace("_", "-")) from None
        except InputError as e:
            if e.field != "gpus_per_server" or "gpus_per_server" in given:
                raise
        notes.append(
            f"gpus_per_server {ASSUMED_GPUS_PER_SERVER} assumed (the file names none; "
            "--gpus-per-server)"
        )
        topo = read_host_table(path, **given, gpus_per_server=ASSUMED_GPUS_PER_SERVER)
        return topo, notes
    if given:
        raise InputError("topo show", NOT_A_HOST_TABLE)
    return _config_topology(files.read_data(path), path.parent, notes)


#: Why the host-table options are refused for a config.
NOT_A_HOST_TABLE = (
    "link speed and GPU options apply to host tables (a first line that is a CSV header)"
)


def is_host_table(text: str) -> bool:
    """Whether ``text`` (a whole input, or its first lines) is a host table: its first
    line that is neither blank nor a YAML comment has commas and no colon (a CSV header;
    a YAML or JSON config's first line has a colon, or no comma).  The one rule for files,
    whatever their name, and for standard input."""
    first = next((line for line in text.splitlines()
                  if line.strip() and not line.lstrip().startswith("#")), "")  # fmt: skip
    return "," in first and ":" not in first


def _head(path: Path, size: int = 1 << 16) -> str:
    """The first ``size`` bytes of ``path`` as text (checked by :func:`files.check_text`
    before), enough for :func:`is_host_table`."""
    with open(path, "rb") as f:
        return f.read(size).decode("utf-8", "replace")


def _load_stdin(**params: Any) -> tuple[Topology, list[str]]:
    """:func:`load` of standard input: a host table when :func:`is_host_table` says so,
    read from a private copy whose name errors do not show; else a YAML/JSON config, the
    files it names found from the current folder."""
    text = files.read_stdin()
    if is_host_table(text):
        with files.spooled(text, ".csv") as spool:
            try:
                topo, notes = load(spool, **params)
            except InputError as e:
                raise files.from_stdin(e, spool) from None
        return replace(topo, source={**topo.source, "hosts": files.STDIN}), notes
    if any(v is not None for v in params.values()):
        raise InputError("topo show", NOT_A_HOST_TABLE)
    return _config_topology(files.parse_yaml(text, files.STDIN_NAME), Path("."), [])


def _config_topology(obj: Any, base: Path, notes: list[str]) -> tuple[Topology, list[str]]:
    """The topology of a config's ``cluster:`` (or of a whole file that is one); the
    files it names are found from ``base``."""
    field = "cluster" if isinstance(obj, Mapping) and "cluster" in obj else ""
    cluster = obj["cluster"] if field else obj
    if is_topology_form(cluster):
        return build(cluster, field or "cluster", base), notes
    from cassini import schema
    from cassini.sim.topology import SINGLE_ROUTING_SPINES, Cluster

    notes.append("today's uniform Cluster form, shown as the equivalent generated fabric")
    uniform = Cluster.from_dict(cluster, field or "cluster")
    if uniform.spines > 1:  # what the run does with them (run_warnings says it too)
        why = SINGLE_ROUTING_SPINES.format(spines=uniform.spines, which="")
        shown = f"shown here split into its {uniform.spines} tor-spine links"
        notes.append(f"{schema.join(field or 'cluster', 'spines')}: {why}, {shown}")
    # the fabric the run builds from it (cassini.packet.plan.as_topology), spines and all
    return _run_tor_names(from_cluster(uniform)), notes


def _run_tor_names(topo: Topology) -> Topology:
    """``topo`` (a uniform cluster's generated fabric) with every ToR named by its id,
    ``tor<r>`` for rack r, as the run names it (results.json's ``servers``, the
    ``tor<r>`` uplinks), not ``pod<p>-tor<k>`` as ``generate: three-tier`` does."""
    tors = {t for rack in topo.rack_tors for t in rack}
    switches = tuple(replace(s, name=s.id) if s.id in tors else s for s in topo.switches)
    return replace(topo, switches=switches)


def _link_tier(topo: Topology, lower: str, upper: str) -> str:
    tier = {s.id: s.tier for s in topo.switches}
    return f"{tier.get(lower, 'host')}-{tier[upper]}"


def summarise(topo: Topology, notes: list[str] | None = None) -> dict[str, Any]:
    """A JSON-ready summary of ``topo``, with ``irregular`` listing what is not uniform."""
    links: dict[str, dict[str, Any]] = {}
    for link in topo.fabric_links:
        entry = links.setdefault(
            _link_tier(topo, link.lower, link.upper), {"count": 0, "bps": Counter()}
        )
        entry["count"] += 1
        entry["bps"][link.bps] += 1
    tors = []
    for r, members in enumerate(topo.racks):
        for tor in topo.rack_tors[r]:
            sw = next(s for s in topo.switches if s.id == tor)
            tors.append(
                {
                    "tor": tor,
                    "name": sw.name,
                    "pod": topo.rack_pods[r],
                    "hosts": len(members),
                    "gpus": sum(topo.gpus_per_host[s] for s in members),
                    "downlink_bps": topo.downlink_bps[tor],
                    "uplink_bps": topo.uplink_bps[tor],
                    "oversubscription": topo.oversubscription(tor),
                }
            )
    upper = [
        {
            "switch": s.id,
            "name": s.name,
            "tier": s.tier,
            "downlink_bps": topo.downlink_bps[s.id],
            "uplink_bps": topo.uplink_bps[s.id],
            "oversubscription": topo.oversubscription(s.id),
        }
        for s in topo.switches
        if s.tier != "tor"
    ]
    return {
        "kind": topo.kind,
        "source": topo.to_dict(),
        "hosts": topo.servers,
        "gpus": topo.gpus,
        "gpus_per_host": _counts(Counter(topo.gpus_per_host)),
        "racks": len(topo.racks),
        "rack_sizes": _counts(topo.rack_sizes()),
        "pods": topo.pods,
        "planes": topo.planes,
        "switches": {t: len(topo.switches_in(t)) for t in topo.tiers},
        "links": {
            t: {"count": v["count"], "bps": _counts(v["bps"])} for t, v in sorted(links.items())
        },
        "tors": tors,
        "upper_switches": upper,
        "irregular": irregularities(topo),
        "notes": list(notes or []),
        # server index (as a run's placements and srv<i> links name it) -> host, rack, ...
        "servers": server_table(topo),
    }


def _counts(counter: Counter[Any]) -> dict[str, int]:
    return {f"{k:g}" if isinstance(k, float) else str(k): v for k, v in sorted(counter.items())}


def irregularities(topo: Topology) -> list[str]:
    """What is not uniform, one sentence each (empty for a uniform fabric)."""
    out = []
    sizes = topo.rack_sizes()
    if len(sizes) > 1:
        spread = ", ".join(f"{n} of {k}" for k, n in sorted(sizes.items(), reverse=True))
        out.append(f"racks of different sizes: {min(sizes)}-{max(sizes)} hosts ({spread})")
    repeated = topo.repeated_tor_names()
    if repeated:
        shown = ", ".join(f"{k} x{n}" for k, n in list(repeated.items())[:6])
        more = "" if len(repeated) <= 6 else f", ... ({len(repeated)} names)"
        out.append(f"ToR names repeated under different parents: {shown}{more}")
    gpus = Counter(topo.gpus_per_host)
    if len(gpus) > 1:
        out.append(f"hosts with different GPU counts (GPUs: hosts): {_pairs(_counts(gpus))}")
    host_bps = Counter(topo.link_bps[h] for hl in topo.host_links for h in hl)
    if len(host_bps) > 1:
        out.append(f"host links of different speeds (bits/s: links): {_pairs(_counts(host_bps))}")
    for tier in topo.tiers[:-1]:
        ratios = Counter(
            round(topo.oversubscription(s.id) or 0.0, 3) for s in topo.switches_in(tier)
        )
        if len(ratios) > 1:
            out.append(
                f"{tier} uplink oversubscription differs (ratio: switches): "
                f"{_pairs(_counts(ratios))}"
            )
    for lower, tier in itertools.pairwise(topo.tiers):
        below = {s.id for s in topo.switches_in(lower)}
        children = Counter(
            sum(1 for link in topo.fabric_links if link.upper == s.id and link.lower in below)
            for s in topo.switches_in(tier)
        )
        if len(children) > 1:
            out.append(
                f"{tier} switches with different numbers of {lower} switches below "
                f"({lower}s below: {tier} switches): {_pairs(_counts(children))}"
            )
    return out


def format_text(summary: Mapping[str, Any]) -> str:
    """The summary for people: totals, tiers, links, irregularities, then one row per
    ToR."""
    s = summary
    lines = [
        f"kind: {s['kind']}   hosts: {s['hosts']}   GPUs: {s['gpus']} "
        f"(per host: {_pairs(s['gpus_per_host'])})   racks: {s['racks']}   pods: {s['pods']}"
        + (f"   planes (rails): {s['planes']}" if s["planes"] > 1 else ""),
        f"rack sizes (hosts: racks): {_pairs(s['rack_sizes'])}",
        "switches: " + ", ".join(f"{t} {n}" for t, n in s["switches"].items()),
        "links:",
    ]
    for tier, v in s["links"].items():
        lines.append(f"  {tier:<12} {v['count']:>6}  bits/s: {_pairs(v['bps'])}")
    lines.append("irregular:" + ("" if s["irregular"] else " nothing (uniform)"))
    lines += [f"  - {x}" for x in s["irregular"]]
    for note in s["notes"]:
        lines.append(f"note: {note}")
    if s["upper_switches"]:
        lines.append("")
        lines.append(f"{'switch':<10} {'name':<24} {'down Gb/s':>10} {'up Gb/s':>10} {'over':>6}")
        for u in s["upper_switches"]:
            lines.append(_switch_row(u["switch"], u["name"], u))
    lines.append("")
    lines.append(
        f"{'ToR':<10} {'name':<24} {'pod':>4} {'hosts':>5} {'GPUs':>5} "
        f"{'down Gb/s':>10} {'up Gb/s':>10} {'over':>6}"
    )
    for t in s["tors"]:
        lines.append(
            f"{t['tor']:<10} {t['name']:<24} {t['pod']:>4} {t['hosts']:>5} {t['gpus']:>5} "
            f"{t['downlink_bps'] / 1e9:>10.1f} {t['uplink_bps'] / 1e9:>10.1f} "
            f"{_ratio(t['oversubscription']):>6}"
        )
    return "\n".join(lines)


def _switch_row(sid: str, name: str, u: Mapping[str, Any]) -> str:
    return (
        f"{sid:<10} {name:<24} {u['downlink_bps'] / 1e9:>10.1f} {u['uplink_bps'] / 1e9:>10.1f} "
        f"{_ratio(u['oversubscription']):>6}"
    )


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _pairs(d: Mapping[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in d.items())


def main(args: Any) -> int:
    """``cassini sim topo show``: 0, or 2 with one line on stderr for bad input."""
    import sys

    try:
        topo, notes = load(
            args.file,
            gpus_per_server=args.gpus_per_server,
            server_link_bps=args.server_link_bps,
            oversubscription=args.oversubscription,
            pod_oversubscription=args.pod_oversubscription,
        )
    except InputError as e:
        print(f"cassini sim topo: error: {e.in_file(files.input_name(args.file))}", file=sys.stderr)
        return 2
    summary = summarise(topo, notes)
    print(json.dumps(summary, indent=1) if args.format == "json" else format_text(summary))
    return 0
