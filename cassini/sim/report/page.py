"""A run's report beside its ``results.json``: the pictures (which link the timeline
draws, and why), each scheme's busiest links, and ``report.html``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.sim.config import SimConfig, Workload
from cassini.sim.engine import SimResult
from cassini.sim.report.recording import NetworkRecorder
from cassini.sim.schedulers import Scheduler
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topologies.servers import host_link
from cassini.sim.topology import Cluster


@dataclass
class Run:
    """Every scheme's result on the same jobs, with what the report needs besides."""

    results: dict[str, SimResult]
    workload: Workload
    library: dict[str, JobProfile]
    recorders: dict[str, NetworkRecorder] = field(default_factory=dict)


#: Rows of each scheme's busiest-links table in the report.
BUSIEST_LINKS = 10
#: The report's note on a rail-optimised fabric's capacities.
RAILS_NOTE = (
    "rail-optimised fabric: every server has {planes} NICs, one per rail (srv<i>.<rail>); "
    "each link's capacity is one NIC's (as topo show lists it), and a job puts 1/{planes} "
    "of its rate on each of its server's rails"
)
#: The report's note on a scheme that runs every job on a dedicated network (``ideal``).
DEDICATED_NOTE = (
    "{names}: every job runs on a dedicated network, so its busiest links give the demand "
    "those jobs would put on the shared fabric's links over their capacity: "
    "peak_utilisation above 1 is demand a shared link could not carry, with no excess "
    "demand counted (no link is shared)"
)
#: What the report says of excess demand where the network model did not measure it
#: (``network: packet``: NaN per link, ``null`` in results.json).
NOT_MEASURED = "excess demand is not measured at packet level"
NOT_MEASURED_NOTE = (
    f"network: packet: {NOT_MEASURED} (results.json gives it as null, this page as \u2013), "
    "and ns-3's windows are not recorded, so no link timeline is drawn"
)


def excess_measured(run: Run) -> bool:
    """Whether every scheme's network model measured excess demand (the packet model
    does not)."""
    return all(r.excess_measured for r in run.results.values())


def most_congested_link(cfg: SimConfig, run: Run) -> str | None:
    """The link with the most excess demand summed over the schemes; None without any."""
    excess: dict[str, float] = {}
    for r in run.results.values():
        for link, s in r.excess_s.items():
            excess[link] = excess.get(link, 0.0) + s
    if any(v > 0 for v in excess.values()):
        return max(sorted(excess), key=lambda link: excess[link])
    return None


def _same_tor_uplinks(cluster: Cluster | Topology, link: str) -> list[str]:
    """A uniform cluster's uplinks of the ToR whose uplink ``link`` is, when it has
    several spines: its whole ``tor<r>`` (single routing loads it) and each spine's
    ``tor<r>s<k>`` (ecmp and crux load one of them); [] for any other link."""
    if not isinstance(cluster, Cluster) or cluster.spines < 2:
        return []
    rack = re.fullmatch(r"tor(\d+)(s\d+)?", link)
    if rack is None or int(rack.group(1)) >= cluster.racks:
        return []
    r = int(rack.group(1))
    return [cluster.uplink(r, None), *(cluster.uplink(r, k) for k in range(cluster.spines))]


def routed_instead(cfg: SimConfig, run: Run, util: Mapping[str, Any], link: str) -> str | None:
    """For a link no scheme routed any job over, the uplink of the same ToR that jobs
    were routed over (``tor1`` given, ecmp loaded ``tor1s1``): the one with the most
    excess demand summed over the schemes, then the busiest; None when there is none."""
    used = {lk for u in util.values() for lk in u.links}
    if link in used:
        return None
    parts = [lk for lk in _same_tor_uplinks(cfg.cluster, link) if lk in used]

    def rank(lk: str) -> tuple[float, float]:
        excess = [r.excess_s.get(lk, 0.0) for r in run.results.values()]
        mean = max(float(u.link_share[u.links.index(lk)].mean())
                   for u in util.values() if lk in u.links)  # fmt: skip
        return sum(s for s in excess if not math.isnan(s)), mean

    return max(parts, key=rank, default=None)


def timeline_choice(
    cfg: SimConfig, run: Run, util: Mapping[str, Any], given: str | None
) -> tuple[str | None, str, str]:
    """The link the timeline draws, how it was chosen, and which of its windows: the
    given link (or, where no job was routed over it, the same ToR's uplink they were
    routed over: :func:`routed_instead`), else the most congested, else (nothing
    congested) the busiest; the window where the link was most congested, or the one
    with the most jobs on it.  Where excess demand was not measured (packet level),
    nothing is said congested; a given link no job crossed is said so."""
    link = given or most_congested_link(cfg, run)
    how = "given with --timeline-link" if given else "the most congested"
    instead = routed_instead(cfg, run, util, given) if given else None
    if instead is not None:
        how += (
            f" as {given}: no job was routed over {given} itself, but over this uplink of "
            "the same ToR"
        )
        link = instead
    measured = excess_measured(run)
    if link is None:  # nothing congested (or nothing measured): the busiest link
        link = next((u.links[0] for u in util.values() if u.links), None)
        how = "the busiest; " + ("no link was ever congested" if measured else NOT_MEASURED)
    if any(r.excess_s.get(link, 0.0) > 0 for r in run.results.values()):
        return link, how, "the network window where it was most congested"
    if given and not any(link in u.links for u in util.values()):
        return link, how, "no network window: no job was routed over it"
    never = ("; it was never congested" if measured else f"; {NOT_MEASURED}") if given else ""
    return link, how, f"the network window with the most jobs on it{never}"


def given_link(cfg: SimConfig, given: str | None) -> str | None:
    """The link ``--timeline-link`` names: a link id, or a host name of the cluster's
    table (its server's link); InputError naming the flag for anything else."""
    if given is None or given in cfg.cluster.links:
        return given
    link = host_link(cfg.cluster, given, "--timeline-link")
    if link is not None:
        return link
    fabric = [lk for lk in cfg.cluster.links if not lk.startswith("srv")][:2]
    named = isinstance(cfg.cluster, Topology)  # a uniform cluster names no hosts
    hosts = "; or a host name of the cluster (results.json's servers)" if named else ""
    raise InputError(
        "--timeline-link",
        f"no link {given!r} (srv<i> is server i's link; switch links are named like "
        f"{', '.join(fabric) or 'tor<r>'}{hosts})",
    )


def link_capacity_bps(cluster: Cluster | Topology, link: str) -> float:
    """A link's capacity as ``topo show`` lists it: one link's (one NIC's on a
    rail-optimised fabric) physical bits/s in each direction.  The network model's own
    figure (``cluster.links``) is that times the rails: every job puts a rail's share of
    its rate on each, and utilisation is the same fraction in either."""
    if isinstance(cluster, Topology):
        return cluster.link_bps[link]
    return cluster.links[link]


def timeline_panels(cfg: SimConfig, run: Run, util: Mapping[str, Any], link: str) -> dict[str, Any]:
    """Per scheme, the timeline of ``link`` replayed from its network windows, or why
    there is none: a dedicated network, no job routed over the link, or jobs on it
    whose summed peak demand never exceeded its capacity (never simulated)."""
    from cassini.sim.report.recording import link_timeline

    lines: dict[str, Any] = {}
    for name, rec in run.recorders.items():
        scheduler = Scheduler.parse(name)
        tolerance = scheduler.timing.tolerance
        tl = link_timeline(rec.windows, link, cfg.cluster.links, tolerance=tolerance)
        if scheduler.dedicated_network:
            tl = f"{name} runs every job on a dedicated network: no network model to draw"
        elif tl is None and link not in util[name].links:
            tl = f"no job was routed over {link} under {name}"
        elif tl is None:
            tl = (
                f"no network window crossed {link} under {name}: its jobs' summed peak "
                "demand never exceeded its capacity, so it never slowed anyone"
            )
        lines[name] = tl
    return lines


def write_report(
    cfg: SimConfig, run: Run, data: Mapping[str, Any], out_dir: Path, timeline_link: str | None
) -> dict[str, Any]:
    """The pictures; returns what ``report.html`` will show besides results.json."""
    from cassini.sim.recorded import mapping_rule
    from cassini.sim.report import pictures
    from cassini.sim.report.utilisation import utilisation

    given = timeline_link
    timeline_link = given_link(cfg, given)
    end = max((j.finish_s for r in run.results.values() for j in r.jobs), default=1.0)
    util = {
        name: utilisation(r, cfg.cluster, run.library, end_s=end) for name, r in run.results.items()
    }
    link, how, window = timeline_choice(cfg, run, util, timeline_link)
    if given is not None and given != timeline_link:
        how += f" as host {given}"
    files = [
        (pictures.heatmap(util, out_dir / "link_heatmap.png", cfg.name),
         "Per-link utilisation over time, the busiest links on top (ideal: the demand a "
         "dedicated network would carry; colours stop at 1)"),
        (pictures.slowdown_cdf(run.results, out_dir / "slowdown_cdf.png"),
         "Per-job slowdown (mean iteration time over dedicated), CDF per scheme"),
        (pictures.gpu_utilisation(util, out_dir / "gpu_utilisation.png"),
         "GPU utilisation over time: computing (solid) and allocated (dashed)"),
    ]  # fmt: skip
    if link is not None and excess_measured(run):  # packet level: no windows recorded
        lines = timeline_panels(cfg, run, util, link)
        path = pictures.timeline(lines, link, out_dir / "link_timeline.png")
        files.insert(1, (path, f"Who sends when on link {link} ({how}), in {window}"))
    files.append((out_dir / "cdf.png", "Iteration time over dedicated, and JCT: CDFs"))
    hosts = {lk: row["host"] for row in data["servers"] for lk in row["links"]}
    unmeasured = 0.0 if excess_measured(run) else math.nan  # a link excess_s leaves out
    busiest = {
        name: [
            {
                "link": lk,
                "host": hosts.get(lk),
                "capacity_gbps": link_capacity_bps(cfg.cluster, lk) / 1e9,
                "mean_utilisation": mean,
                "peak_utilisation": peak,
                "excess_s": run.results[name].excess_s.get(lk, unmeasured),
            }
            for lk, mean, peak in u.busiest(BUSIEST_LINKS)
        ]
        for name, u in util.items()
    }
    notes = []
    if any(name.startswith("recorded") for name in run.results):
        notes.append(mapping_rule(cfg.cluster, run.workload.jobs))
    dedicated = [name for name in run.results if Scheduler.parse(name).dedicated_network]
    if dedicated:
        notes.append(DEDICATED_NOTE.format(names=", ".join(dedicated)))
    if not excess_measured(run):
        notes.append(NOT_MEASURED_NOTE)
    if isinstance(cfg.cluster, Topology) and cfg.cluster.planes > 1:
        notes.append(RAILS_NOTE.format(planes=cfg.cluster.planes))
    return {
        "timeline_link": link,
        "timeline_link_chosen": how,
        "pictures": [[p.name, caption] for p, caption in files],
        "busiest_links": busiest,
        "notes": notes,
    }


def write_page(data: Mapping[str, Any], out_dir: Path) -> Path:
    """``report.html`` from ``results.json``'s data and the pictures in ``out_dir``."""
    from cassini.sim.report import html_report

    rep = data["report"]
    pictures = [(out_dir / name, caption) for name, caption in rep["pictures"]]
    notes = [f"timeline link: {rep['timeline_link']} ({rep['timeline_link_chosen']})"]
    return html_report.write(
        out_dir / "report.html", data, pictures, rep["busiest_links"], notes + rep["notes"]
    )
