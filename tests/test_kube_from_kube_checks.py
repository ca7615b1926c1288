"""``cassini cluster from-kube`` on inconsistent or malformed API answers, replayed through
the real ``kubernetes`` client (tests/helpers/kube_replay.py): what it writes, ``cassini
serve --cluster`` reads back (the same loader, :func:`load_cluster_file`); what it
cannot model is reported once, or refused with one line (exit 2), never a traceback."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from helpers.kube_replay import ReplayApiServer

from cassini.cli import main
from cassini.service.cluster import load_cluster_file

DATA = Path(__file__).resolve().parent / "data" / "kube"
NODES, PODS = "/api/v1/nodes", "/api/v1/pods"
KUEUE = "/apis/kueue.x-k8s.io/v1beta1/topologies"
HYPERNODES = "/apis/topology.volcano.sh/v1alpha1/hypernodes"


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def node(body: dict, name: str) -> dict:
    return next(o for o in body["items"] if o["metadata"]["name"] == name)


def serve(
    nodes: dict | None = None, pods: dict | None = None, hypernodes: dict | None = None
) -> ReplayApiServer:
    """A replay server: the recorded nodes and pods, and the Kueue Topology unless
    ``hypernodes`` are given."""
    server = ReplayApiServer()
    server.add_list(NODES, nodes if nodes is not None else recorded("nodes-64.json"))
    server.add_list(PODS, pods if pods is not None else recorded("pods.json"))
    if hypernodes is None:
        server.add_list(KUEUE, recorded("kueue-topologies.json"))
    else:
        server.add_list(HYPERNODES, hypernodes)
    return server


def from_kube(server: ReplayApiServer, tmp_path: Path, capsys, *args: str):
    """Run from-kube into a file: (exit status, the file, stderr)."""
    out = tmp_path / "cluster.yaml"
    with server:
        rc = main(
            [
                "cluster",
                "from-kube",
                "--kubeconfig",
                server.kubeconfig(tmp_path),
                "--out",
                str(out),
                *args,
            ]
        )
    return rc, out, capsys.readouterr().err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cassini: error: "), err
    assert "Traceback" not in err
    return lines[0]


# bug 8: jobs only on the nodes written; whatever is written, serve accepts


def test_a_left_out_node_is_dropped_from_its_job_and_serve_reads_the_file(tmp_path, capsys):
    nodes = recorded("nodes-64.json")
    node(nodes, "node-00")["metadata"]["annotations"]["cassini.io/nic-bps"] = "fast"
    rc, out, err = from_kube(serve(nodes=nodes), tmp_path, capsys, "--oversubscription", "2,8")
    assert rc == 0
    cluster, jobs = load_cluster_file(out)  # what `cassini serve --cluster` does
    assert "node-00" not in cluster.nodes and len(cluster.nodes) == 63
    assert {j.job_id: j.nodes for j in jobs} == {
        "bert-a": ("node-09",),
        "vgg16-b": ("node-33", "node-40"),
    }
    # said once, without the node named twice
    assert err.count("node-00 left out") == 1 and "node node-00:" not in err
    assert (
        "node node-00 left out: annotation cassini.io/nic-bps: must be a number of "
        "bits/s > 0 (1.0e+11) or a Kubernetes quantity (100G, 400M, 100Gi), got 'fast'"
    ) in err
    assert (
        "job bert-a: node-00 (left out of the model) dropped from its nodes; kept on node-09"
    ) in err
    assert main(["cluster", "show", str(out)]) == 0


def test_a_pod_on_no_node_and_a_job_left_without_nodes(tmp_path, capsys):
    nodes, pods = recorded("nodes-64.json"), recorded("pods.json")
    for o in pods["items"]:
        if o["metadata"]["name"] == "vgg16-b-0":
            o["spec"]["nodeName"] = "node-99"  # no such node
        if o["metadata"]["name"] == "vgg16-b-1":
            del node(nodes, "node-40")["metadata"]["annotations"]["cassini.io/nic-bps"]
    rc, out, err = from_kube(serve(nodes=nodes, pods=pods), tmp_path, capsys)
    assert rc == 0
    cluster, jobs = load_cluster_file(out)
    assert [j.job_id for j in jobs] == ["bert-a"]
    assert (
        "job vgg16-b not registered: none of its nodes is in the model: node-40 (left "
        "out of the model), node-99 (no such node)"
    ) in err
    text = out.read_text()
    assert "vgg16-b" not in text.split("\njobs:")[1]
    assert "# job vgg16-b not registered: none of its nodes" in text
    assert err.count("vgg16-b") == 1


def test_no_node_in_the_model_is_an_error_and_nothing_is_written(tmp_path, capsys):
    empty = {
        "kind": "NodeList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "1"},
        "items": [],
    }
    rc, out, err = from_kube(serve(nodes=empty), tmp_path, capsys)
    assert rc == 2 and not out.exists()
    assert one_error_line(err) == (
        "cassini: error: no node in the model: the API server lists no node; nothing written"
    )
    nodes = recorded("nodes-64.json")
    for o in nodes["items"]:
        del o["metadata"]["annotations"]["cassini.io/nic-bps"]
    rc, out, err = from_kube(serve(nodes=nodes), tmp_path, capsys)
    assert rc == 2 and not out.exists()
    lines = err.strip().splitlines()
    assert len(lines) == 65 and lines[-1] == (
        "cassini: error: no node in the model: all 64 nodes left out (above); nothing written"
    )


def test_an_unroutable_job_id_and_line_breaks_stay_out_of_the_file(tmp_path, capsys):
    pods = recorded("pods.json")
    pods["items"][0]["metadata"]["annotations"]["cassini.io/job"] = "bert\na"
    pods["items"][1]["metadata"]["annotations"]["cassini.io/job"] = "bert\na"
    rc, out, err = from_kube(serve(pods=pods), tmp_path, capsys)
    assert rc == 0
    _, jobs = load_cluster_file(out)
    assert [j.job_id for j in jobs] == ["vgg16-b"]
    assert "job bert\na not registered: its id must not contain control characters" in err
    assert "# job bert\\na not registered" in out.read_text()


# bug 10: a kubeconfig or an API answer of the wrong shape


@pytest.mark.parametrize("text", ["- a\n", "clusters: 3\ncurrent-context: x\n", "7\n"])
def test_a_kubeconfig_of_the_wrong_shape_is_one_line(tmp_path, capsys, text):
    kubeconfig = tmp_path / "kc.yaml"
    kubeconfig.write_text(text)
    assert main(["cluster", "from-kube", "--kubeconfig", str(kubeconfig)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(kubeconfig) in line and "kubeconfig" in line


@pytest.mark.parametrize("path", [NODES, PODS, KUEUE])
def test_an_api_answer_that_is_a_json_list_is_one_line(tmp_path, capsys, path):
    server = serve()
    server.lists[path].clear()
    server.add_list(path, [{"metadata": {"name": "node-00"}}])
    rc, out, err = from_kube(server, tmp_path, capsys)
    assert rc == 2 and not out.exists()
    assert one_error_line(err) == (
        f"cassini: error: GET {path}: the API server answered a list, not a list object"
    )


def test_api_items_of_the_wrong_shape_is_one_line(tmp_path, capsys):
    rc, _, err = from_kube(serve(nodes={"items": {"a": 1}}), tmp_path, capsys)
    assert rc == 2
    assert one_error_line(err) == (
        "cassini: error: GET /api/v1/nodes: items: must be a list, got an object"
    )


@pytest.mark.parametrize(
    "name, problem",
    [
        (None, "missing or not a string, got null"),
        (42, "missing or not a string, got the number 42"),
        ("", "missing or not a string, got the string ''"),
        ("node-00\nnode-99", "must not contain control characters, got 'node-00\\nnode-99'"),
    ],
)
def test_a_node_without_a_sound_name_is_refused_in_one_line(tmp_path, capsys, name, problem):
    """As cassini serve --kube leaves such a node out and reports it; a name with a
    newline was written into the cluster file until 2026-12."""
    nodes = recorded("nodes-64.json")
    nodes["items"][0]["metadata"]["name"] = name
    rc, out, err = from_kube(serve(nodes=nodes), tmp_path, capsys)
    assert rc == 2 and not out.exists()
    assert one_error_line(err) == f"cassini: error: node[0].metadata.name: {problem}"


# bug 9: malformed HyperNode label selectors name the HyperNode


def hypernodes_with(selector: dict) -> dict:
    """The recorded HyperNodes, a-rack-0's member selecting by ``labelMatch``."""
    body = recorded("volcano-hypernodes.json")
    rack = next(h for h in body["items"] if h["metadata"]["name"] == "a-rack-0")
    rack["spec"]["members"] = [{"type": "Node", "selector": {"labelMatch": selector}}]
    return body


@pytest.mark.parametrize(
    ("selector", "field", "problem"),
    [
        ({"matchLabels": "x"}, "matchLabels", "must be a JSON object, got the string 'x'"),
        ({"matchLabels": {"a": 1}}, "matchLabels.a", "must be a string, got 1"),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
            "matchExpressions[0].values",
            "must be a JSON array, got the string 'x'",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
            "matchExpressions[0].values",
            "must be a list of strings",
        ),
        (
            {"matchExpressions": {"key": "a"}},
            "matchExpressions",
            "must be a JSON array, got an object",
        ),
        (
            {"matchExpressions": ["a"]},
            "matchExpressions[0]",
            "must be a JSON object, got the string 'a'",
        ),
        (
            {"matchExpressions": [{"key": ["a"], "operator": "Exists"}]},
            "matchExpressions[0].key",
            "missing or not a string",
        ),
    ],
)
def test_a_malformed_label_selector_names_the_hypernode(tmp_path, capsys, selector, field, problem):
    rc, out, err = from_kube(serve(hypernodes=hypernodes_with(selector)), tmp_path, capsys)
    assert rc == 2 and not out.exists()
    assert one_error_line(err) == (
        f"cassini: error: HyperNode a-rack-0.spec.members[0].selector.labelMatch.{field}: {problem}"
    )


def test_a_good_label_selector_still_places_nodes(tmp_path, capsys):
    selector = {
        "matchLabels": {"cloud.provider.com/topology-block": "block-a"},
        "matchExpressions": [
            {"key": "cloud.provider.com/topology-rack", "operator": "In", "values": ["rack-0"]}
        ],
    }
    rc, out, _ = from_kube(
        serve(hypernodes=hypernodes_with(selector)), tmp_path, capsys, "--no-jobs"
    )
    assert rc == 0
    cluster, _ = load_cluster_file(out)
    assert cluster.nodes["node-00"][1] == "block-a/a-rack-0-up"


# bug 11: inconsistent input refused or reported


def test_more_oversubscriptions_than_tiers_is_refused(tmp_path, capsys):
    rc, out, err = from_kube(serve(), tmp_path, capsys, "--oversubscription", "2,8,4")
    assert rc == 2 and not out.exists()
    assert one_error_line(err) == (
        "cassini: error: oversubscription: 3 values, but the cluster has 2 tiers "
        "(cloud.provider.com/topology-block, cloud.provider.com/topology-rack): give at "
        "most 2, top tier first"
    )


def test_a_node_listed_twice_is_reported(tmp_path, capsys):
    nodes = recorded("nodes-64.json")
    nodes["items"].append(copy.deepcopy(node(nodes, "node-01")))
    other = copy.deepcopy(node(nodes, "node-02"))
    other["metadata"]["labels"]["cloud.provider.com/topology-rack"] = "rack-3"
    nodes["items"].append(other)
    rc, out, err = from_kube(serve(nodes=nodes), tmp_path, capsys)
    assert rc == 0
    cluster, _ = load_cluster_file(out)
    assert "node-01" in cluster.nodes and "node-02" not in cluster.nodes
    assert err.count("node-01") == 1 and err.count("node-02") == 1
    assert "node node-01 listed 2 times (the same object); counted once" in err
    assert "node node-02 left out: listed 2 times, with different labels or annotations" in err


def test_hypernodes_containing_each_other_are_refused(tmp_path, capsys):
    body = recorded("volcano-hypernodes.json")
    for h in body["items"]:
        if h["metadata"]["name"] in ("block-a", "block-b"):
            other = "block-b" if h["metadata"]["name"] == "block-a" else "block-a"
            h["spec"]["members"].append(
                {"type": "HyperNode", "selector": {"exactMatch": {"name": other}}}
            )
    rc, out, err = from_kube(serve(hypernodes=body), tmp_path, capsys)
    assert rc == 2 and not out.exists()
    assert one_error_line(err) == (
        "cassini: error: HyperNodes block-a, block-b: members of each other in a cycle "
        "(block-a contains block-b contains block-a)"
    )
