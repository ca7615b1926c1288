"""``cassini cluster from-kube`` (the model built from the cluster, in the cluster file
format) and ``cassini cluster show FILE`` (a cluster file drawn tier by tier), and the
Kubernetes options ``cassini serve --kube`` shares with them.  Standard library only at
module level."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from cassini import files

EPILOG = """\
topology, in order of what exists (unless --topology-labels is given):
  a Kueue Topology (kueue.x-k8s.io: spec.levels[].nodeLabel, top level first),
  Volcano HyperNodes (topology.volcano.sh: tiers, members), or
  --topology-labels A,B,C (node labels, top tier first; a last kubernetes.io/hostname
  is the node itself), else the well-known labels topology.kubernetes.io/region,zone
  (those the nodes carry).
links: each node's NIC (node annotation cassini.io/nic-bps, bits/s: 1.0e+11 or a
Kubernetes quantity such as 100G, 400M, 100Gi; else --nic-bps)
and the uplink/downlink of every domain above it: the sum of the capacities below it
divided by the tier's --oversubscription (top tier first; default 1).
what cannot be modelled is reported once (stderr and the file's header): nodes left
out, nodes listed twice, jobs' nodes not in the model (dropped), jobs not registered, job
ids that pods of two namespaces (or with two profiles) carry (left out, never merged).
examples:
  cassini cluster from-kube --oversubscription 2,4 --out cluster.yaml
  cassini cluster show cluster.yaml
"""

FROM_KUBE_EXIT = """\
exit status: 0 written; 1 the API server cannot be reached (each request waits at most
30 s) or answers an error (the request and the server's message named); 2 bad
options (an --out that cannot be written, --topology-labels with --kueue-topology, an
unknown --context: checked before the API server is asked), a bad kubeconfig, or a
cluster it cannot model (one line on stderr).
"""


def _ratios(text: str) -> tuple[float, ...]:
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be numbers, got {part!r}") from None
        if not (value >= 1 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"each must be a finite number >= 1, got {part}")
        out.append(value)
    return tuple(out)


def _labels(text: str) -> tuple[str, ...]:
    out = tuple(x.strip() for x in text.split(",") if x.strip())
    if not out:
        raise argparse.ArgumentTypeError("give at least one label")
    return out


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the cluster is and how its topology becomes links."""
    parser.add_argument(
        "--kubeconfig", metavar="FILE", default=None, type=files.input_file,
        help="kubeconfig file (default: the pod's in-cluster config, else ~/.kube/config)",
    )
    parser.add_argument(
        "--context", metavar="NAME", default=None,
        help="the kubeconfig context to use (default: its current-context; an unknown one: "
        "exit 2 listing those there are)",
    )
    parser.add_argument(
        "--topology-labels", type=_labels, default=(), metavar="A,B,C",
        help="node labels of the tiers, top first (default: a Kueue Topology, else Volcano "
        "HyperNodes, else the labels topology.kubernetes.io/region,zone the nodes carry)",
    )
    parser.add_argument(
        "--kueue-topology", metavar="NAME", default=None,
        help="the Kueue Topology to use (default: the only one, else 'default'; not with "
        "--topology-labels)",
    )
    parser.add_argument(
        "--nic-bps", type=files.positive_float, default=None, metavar="BPS",
        help="NIC capacity (bits/s) of nodes without the cassini.io/nic-bps annotation "
        "(default: such nodes are left out, and reported)",
    )
    parser.add_argument(
        "--oversubscription", type=_ratios, default=(), metavar="X,Y",
        help="oversubscription of each tier's uplinks, top tier first (default 1; at most "
        "one value per tier)",
    )


def link_options(args: argparse.Namespace) -> Any:
    from cassini.service.kube.topology import LinkOptions

    return LinkOptions(args.nic_bps, tuple(args.oversubscription))


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``cassini cluster``."""
    p = sub.add_parser(
        "cluster",
        help="the cluster model: build it from Kubernetes, or draw a cluster file",
        description="Build the cluster model 'cassini serve' scores on from what a Kubernetes "
        "cluster publishes, or draw a cluster file tier by tier.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    csub = p.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    fk = csub.add_parser(
        "from-kube",
        help="print the model built from the cluster's nodes, topology and pods",
        description="Print the model built from the cluster (the cluster file format, for "
        "'cassini serve --cluster').",
        epilog=EPILOG + FROM_KUBE_EXIT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_kube_arguments(fk)
    fk.add_argument("--out", metavar="FILE", default=None, type=files.output_path,
                    help="write here, all at once (default: stdout); its folder is made "
                    "if missing")
    fk.add_argument("--no-jobs", action="store_true", help="leave out the jobs of the pods")
    show = csub.add_parser(
        "show",
        help="draw a cluster file tier by tier",
        description="Read a cluster file (YAML or JSON: the format 'cassini serve --cluster' "
        "reads and 'cassini cluster from-kube' writes) and print its network on stdout: a "
        "line counting nodes, links and shared switches, then the links tier by tier from "
        "the top (each uplink/downlink pair with its capacity and the number of nodes "
        "below it), down to each node and its NIC.",
        epilog="exit status: 0 drawn, 2 a bad file (one line naming it on stderr).",
    )
    show.add_argument("file", type=files.input_file,
                      help="cluster file (YAML/JSON), or - for standard input")


def main(args: argparse.Namespace) -> int:
    from cassini.errors import InputError

    try:
        if args.cluster_command == "show":
            return _show(args)
        return _from_kube(args)
    except InputError as e:
        print(f"cassini: error: {e}", file=sys.stderr)
        return 2


def _show(args: argparse.Namespace) -> int:
    """Draw the file; a bad file is an InputError naming it once (exit 2, in :func:`main`),
    anything else a bug that surfaces."""
    from cassini.service.cluster import load_cluster_file
    from cassini.service.kube.render import draw

    cluster, _ = load_cluster_file(args.file)  # - : standard input
    sys.stdout.write(draw(cluster))
    return 0


def _from_kube(args: argparse.Namespace) -> int:
    from cassini.schema import counted
    from cassini.service.kube import client
    from cassini.service.kube.render import cluster_file_text

    client.check_source_options(args.topology_labels, args.kueue_topology)
    client.kubernetes_module()
    if args.out:  # before the API server is asked (as every command checks its --out)
        _check_out(args.out)
    api = client.api_client(args.kubeconfig, args.context)
    try:
        built, pod_jobs = client.model_from_kube(
            api, link_options(args), args.topology_labels, args.kueue_topology,
            with_jobs=not args.no_jobs,
        )
    except client.RequestFailed as e:  # a runtime failure (exit 1), not bad options
        host = api.configuration.host
        line = str(e) if e.status else f"cannot reach the API server at {host}: {e.why} " \
            f"({e.request})"
        print(f"cassini: error: {line}", file=sys.stderr)
        return 1
    h = built.hierarchy
    cluster = built.cluster
    tag = "cassini cluster from-kube"
    header = [f"{tag}: {h.source}; tiers (top first): {', '.join(h.tiers) or '(none)'}"]
    reports: list[str] = []
    for node, why in sorted(built.repeated.items()):
        reports.append(f"node {node} {why}")
    for node, why in sorted(built.left_out.items()):
        reports.append(f"node {node} left out: {why}")
    reports.extend(f"{k}: {v}" for k, v in sorted(built.notes.items()))
    if not cluster.nodes:
        for line in reports:
            print(f"{tag}: {line}", file=sys.stderr)
        why = (f"all {len(built.left_out)} nodes left out (above)" if built.left_out
               else "the API server lists no node")
        print(f"cassini: error: no node in the model: {why}; nothing written", file=sys.stderr)
        return 2
    for job, why in sorted(pod_jobs.conflicts.items()):
        reports.append(f"job {job} left out: {why}")
    for job, why in sorted(pod_jobs.problems.items()):
        reports.append(f"job {job} not registered: {why}")
    for job, why in sorted(pod_jobs.dropped.items()):
        reports.append(f"job {job}: {why}")
    header.append(f"{counted(len(cluster.nodes), 'node')}, {counted(len(cluster.links), 'link')}, "
                  f"{counted(len(pod_jobs.jobs), 'running job')}")
    header.extend(reports)
    for line in reports:
        print(f"{tag}: {line}", file=sys.stderr)
    text = cluster_file_text(cluster, pod_jobs.jobs.values(), header)
    if args.out:
        return _write_out(args.out, text)
    sys.stdout.write(text)
    return 0


def _check_out(path: str) -> None:
    """InputError naming ``--out`` and ``path`` when the file cannot be written."""
    from cassini import outputs
    from cassini.errors import InputError

    try:
        outputs.check_output_file(path)
    except InputError as e:
        raise InputError(f"--out {e.field}", e.problem) from None


def _write_out(path: str, text: str) -> int:
    """Write ``text`` to ``path`` whole or not at all (:func:`cassini.outputs.replaced`);
    a failure the check before could not foresee (a full disk) is one line, exit 2."""
    from pathlib import Path

    from cassini import outputs

    try:
        with outputs.replaced(Path(path)) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as e:
        print(f"cassini: error: --out {path}: cannot write: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0
