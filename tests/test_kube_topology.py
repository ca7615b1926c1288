"""The cluster model from Kubernetes objects (cassini.service.kube.topology, pods, render):
pure functions on API JSON.  Objects follow the published schemas: Kueue Topology
(kubernetes-sigs/kueue apis/kueue/v1beta1/topology_types.go), Volcano HyperNode
(volcano-sh/apis pkg/apis/topology/v1alpha1/hypernode_types.go)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cassini.errors import InputError
from cassini.service.cluster import load_cluster_file, read_cluster
from cassini.service.kube.pods import job_pod, jobs_from_pods
from cassini.service.kube.render import cluster_file_text, draw, yaml_float
from cassini.service.kube.topology import (
    KubeNode,
    LinkOptions,
    build_cluster,
    hierarchy_from_hypernodes,
    hierarchy_from_kueue,
    hierarchy_from_labels,
)

DATA = Path(__file__).resolve().parent / "data" / "kube"
BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"


def recorded_nodes():
    body = json.loads((DATA / "nodes-64.json").read_text())
    return [KubeNode.from_object(o) for o in body["items"]]


def kueue_topology():
    (topo,) = json.loads((DATA / "kueue-topologies.json").read_text())["items"]
    return topo


def test_kueue_topology_gives_the_hand_written_cluster():
    nodes = recorded_nodes()
    h = hierarchy_from_kueue(kueue_topology(), nodes)
    assert h.tiers == (BLOCK, RACK) and not h.unplaced  # hostname level = the node itself
    built = build_cluster(nodes, h, LinkOptions(oversubscription=(2.0, 8.0)))
    cluster, _ = load_cluster_file(DATA / "cluster-64.yaml")
    assert built.cluster.links == cluster.links
    assert built.cluster.nodes == cluster.nodes
    assert not built.left_out


def test_rack_names_repeat_under_blocks_as_distinct_domains():
    nodes = recorded_nodes()
    h = hierarchy_from_kueue(kueue_topology(), nodes)
    assert h.paths["node-00"] == ("block-a", "rack-0")
    assert h.paths["node-32"] == ("block-b", "rack-0")
    built = build_cluster(nodes, h, LinkOptions())
    assert set(built.cluster.nodes["node-00"]).isdisjoint(built.cluster.nodes["node-32"])
    # no oversubscription: a rack carries its 8 NICs, a block its 4 racks
    assert built.cluster.links["block-a/rack-0-up"] == 4e11
    assert built.cluster.links["block-b-down"] == 16e11


def test_order_of_the_api_list_does_not_change_the_model():
    nodes = recorded_nodes()
    h = hierarchy_from_kueue(kueue_topology(), nodes)
    a = build_cluster(nodes, h, LinkOptions()).cluster
    b = build_cluster(list(reversed(nodes)), h, LinkOptions()).cluster
    assert list(a.links) == list(b.links) and a.nodes == b.nodes


def node(name, labels=None, nic=None):
    ann = {"cassini.io/nic-bps": nic} if nic is not None else {}
    return KubeNode(name, {"kubernetes.io/hostname": name, **(labels or {})}, ann)


def test_labels_nic_flag_annotation_and_left_out_nodes():
    nodes = [
        node("a", {"zone": "z1"}, "2e11"),
        node("b", {"zone": "z1"}),
        node("c", {}),  # no zone label: the control plane, say
        node("d", {"zone": "z2"}, "fast"),
    ]
    h = hierarchy_from_labels(nodes, ["zone", "kubernetes.io/hostname"])
    assert h.tiers == ("zone",) and h.unplaced == {"c": "no label zone"}
    built = build_cluster(nodes, h, LinkOptions(nic_bps=1e11, oversubscription=(3.0,)))
    assert built.cluster.links == {"z1-up": 1e11, "z1-down": 1e11, "a-nic": 2e11, "b-nic": 1e11}
    assert set(built.left_out) == {"c", "d"} and "cassini.io/nic-bps" in built.left_out["d"]
    without_flag = build_cluster(nodes, h, LinkOptions())
    assert set(without_flag.cluster.nodes) == {"a"} and "--nic-bps" in without_flag.left_out["b"]


@pytest.mark.parametrize("labels", [[], ["x", "x"], ["kubernetes.io/hostname", "rack"]])
def test_bad_label_lists_are_refused(labels):
    with pytest.raises(InputError):
        hierarchy_from_labels([], labels)


def test_bad_options_and_topology_are_refused():
    with pytest.raises(InputError, match="oversubscription"):
        LinkOptions(oversubscription=(0.5,))
    with pytest.raises(InputError, match="levels"):
        hierarchy_from_kueue({"metadata": {"name": "t"}, "spec": {"levels": []}}, [])


def hypernode(name, tier, members, tier_name=None):
    spec = {"tier": tier, "members": members}
    if tier_name:
        spec["tierName"] = tier_name
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
            "metadata": {"name": name}, "spec": spec}


def test_volcano_hypernodes_exact_regex_and_label_members():
    nodes = [node(f"n{i}", {"rack": "r1" if i >= 4 else "r0"}, "1e11") for i in range(6)]
    hns = [
        hypernode("s0", 1, [{"type": "Node", "selector": {"exactMatch": {"name": "n0"}}},
                            {"type": "Node", "selector": {"exactMatch": {"name": "n1"}}}]),
        hypernode("s1", 1, [{"type": "Node", "selector": {"regexMatch": {"pattern": "^n[23]$"}}}]),
        hypernode("s2", 1, [{"type": "Node",
                             "selector": {"labelMatch": {"matchLabels": {"rack": "r1"}}}}]),
        hypernode("spine", 2, [{"type": "HyperNode",
                                "selector": {"regexMatch": {"pattern": "^s"}}}], tier_name="spine"),
    ]
    h = hierarchy_from_hypernodes(hns, nodes)
    assert h.tiers == ("spine", "tier 1")
    assert h.paths == {"n0": ("spine", "s0"), "n1": ("spine", "s0"), "n2": ("spine", "s1"),
                       "n3": ("spine", "s1"), "n4": ("spine", "s2"), "n5": ("spine", "s2")}
    built = build_cluster(nodes, h, LinkOptions(oversubscription=(3.0, 1.0)))
    assert built.cluster.links["spine/s0-up"] == 2e11
    assert built.cluster.links["spine-up"] == pytest.approx(2e11)
    assert built.cluster.nodes["n4"] == ("n4-nic", "spine/s2-up", "spine/s2-down",
                                         "spine-up", "spine-down")


def test_hypernode_without_selector_is_refused():
    with pytest.raises(InputError, match="exactMatch"):
        hierarchy_from_hypernodes([hypernode("s", 1, [{"type": "Node", "selector": {}}])],
                                  [node("n")])


def test_the_file_text_reads_back_as_the_same_model():
    cluster, jobs = load_cluster_file(DATA / "cluster-64.yaml")
    text = cluster_file_text(cluster, jobs, ["a header"])
    again, jobs2 = read_cluster(yaml.safe_load(text))
    assert again == cluster and jobs2 == jobs and text.startswith("# a header\n")
    assert yaml.safe_load(f"x: {yaml_float(1e22)}")["x"] == 1e22


def test_draw_shows_tiers_nested():
    cluster, _ = load_cluster_file(DATA / "cluster-64.yaml")
    lines = draw(cluster).splitlines()
    assert lines[0] == "64 nodes, 84 links, 10 shared switches"
    assert lines[1] == "[block-a-up, block-a-down]  100 Gb/s  (32 nodes)"
    assert lines[2] == "  [block-a/rack-0-up, block-a/rack-0-down]  50 Gb/s  (8 nodes)"
    assert lines[3] == "    node-00  (node-00-nic, 50 Gb/s)"


def test_pods_resolve_to_jobs():
    body = json.loads((DATA / "pods.json").read_text())
    pods = [p for p in map(job_pod, body["items"]) if p is not None]
    result = jobs_from_pods(pods)
    _, expected = load_cluster_file(DATA / "cluster-64.yaml")
    assert result.jobs == {j.job_id: j for j in expected}  # pending and finished pods: no job
    assert not result.problems


def test_a_job_named_by_label_and_one_without_profile():
    pods = [
        {"metadata": {"name": "w-0", "namespace": "ml", "labels": {"cassini.io/job": "w"},
                      "annotations": {"cassini.io/model": "gpt2"}},
         "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "x-0", "annotations": {"cassini.io/job": "x"}},
         "spec": {"nodeName": "n2"}, "status": {"phase": "Running"}},
    ]
    result = jobs_from_pods([job_pod(p) for p in pods])
    assert result.jobs["w"].job_id == "w" and result.jobs["w"].nodes == ("n1",)
    assert "x" in result.problems and "x" not in result.jobs
