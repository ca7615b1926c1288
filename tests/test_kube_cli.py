"""``cassini cluster from-kube`` through the real ``kubernetes`` client against a local
server replaying recorded API JSON (tests/helpers/kube_replay.py), and ``cassini cluster
show``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.kube_replay import ReplayApiServer

from cassini.cli import main
from cassini.service.cluster import load_cluster_file, read_cluster

DATA = Path(__file__).resolve().parent / "data" / "kube"
KUEUE = "/apis/kueue.x-k8s.io/{}/topologies"


def recorded(name):
    return json.loads((DATA / name).read_text())


@pytest.fixture
def api():
    with ReplayApiServer() as server:
        server.add_list("/api/v1/nodes", recorded("nodes-64.json"))
        server.add_list("/api/v1/pods", recorded("pods.json"))
        server.add_list(KUEUE.format("v1beta1"), recorded("kueue-topologies.json"))
        yield server


def test_from_kube_prints_the_hand_written_cluster(api, tmp_path, capsys):
    kubeconfig = api.kubeconfig(tmp_path)
    assert main(["cluster", "from-kube", "--kubeconfig", kubeconfig,
                 "--oversubscription", "2,8"]) == 0
    out = capsys.readouterr().out
    assert read_cluster(yaml.safe_load(out)) == load_cluster_file(DATA / "cluster-64.yaml")
    assert out.startswith("# cassini cluster from-kube: Kueue Topology default; tiers (top "
                          "first): cloud.provider.com/topology-block, "
                          "cloud.provider.com/topology-rack\n")
    # it asked for the newest Kueue version first, then the one served; pages of 500
    assert api.seen(KUEUE.format("v1beta2")) and api.seen(KUEUE.format("v1beta1"))
    assert api.seen("/api/v1/nodes", limit="500")


def test_from_kube_out_file_without_jobs(api, tmp_path, capsys):
    out = tmp_path / "cluster.yaml"
    assert main(["cluster", "from-kube", "--kubeconfig", api.kubeconfig(tmp_path),
                 "--oversubscription", "2,8", "--no-jobs", "--out", str(out)]) == 0
    cluster, jobs = load_cluster_file(out)
    assert jobs == [] and cluster == load_cluster_file(DATA / "cluster-64.yaml")[0]
    assert not api.seen("/api/v1/pods")
    assert main(["cluster", "show", str(out)]) == 0
    assert "[block-b/rack-3-up, block-b/rack-3-down]  50 Gb/s  (8 nodes)" in \
        capsys.readouterr().out


def test_topology_labels_override_and_left_out_nodes(api, tmp_path, capsys):
    nodes = recorded("nodes-64.json")
    del nodes["items"][5]["metadata"]["annotations"]["cassini.io/nic-bps"]
    api.lists["/api/v1/nodes"].clear()
    api.add_list("/api/v1/nodes", nodes)
    rc = main(["cluster", "from-kube", "--kubeconfig", api.kubeconfig(tmp_path),
               "--topology-labels", "cloud.provider.com/topology-block"])
    captured = capsys.readouterr()
    cluster, _ = read_cluster(yaml.safe_load(captured.out))
    assert rc == 0 and len(cluster.nodes) == 63 and "node-05" not in cluster.nodes
    assert "node node-05 left out: no annotation cassini.io/nic-bps" in captured.err
    assert cluster.nodes["node-00"] == ("node-00-nic", "block-a-up", "block-a-down")
    assert not api.seen(KUEUE.format("v1beta1"))  # labels given: no Topology looked up


def test_no_topology_anywhere_is_a_clear_error(tmp_path, capsys):
    with ReplayApiServer() as bare:
        bare.add_list("/api/v1/nodes", recorded("nodes-64.json"))
        rc = main(["cluster", "from-kube", "--kubeconfig", bare.kubeconfig(tmp_path)])
    assert rc == 2
    assert "no Kueue Topology and no Volcano HyperNode" in capsys.readouterr().err


def test_show_names_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("links: 3\nnodes: {}\n")
    assert main(["cluster", "show", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_volcano_hypernodes_when_there_is_no_kueue_topology(tmp_path, capsys):
    with ReplayApiServer() as api:
        api.add_list("/api/v1/nodes", recorded("nodes-64.json"))
        api.add_list("/apis/topology.volcano.sh/v1alpha1/hypernodes",
                     recorded("volcano-hypernodes.json"))
        assert main(["cluster", "from-kube", "--kubeconfig", api.kubeconfig(tmp_path),
                     "--oversubscription", "2,8", "--no-jobs"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# cassini cluster from-kube: Volcano HyperNodes; tiers (top first): "
                          "block, rack\n")
    cluster, _ = read_cluster(yaml.safe_load(out))
    want, _ = load_cluster_file(DATA / "cluster-64.yaml")
    # the same switches under the HyperNodes' names (block-a/a-rack-1 for block-a/rack-1)
    assert sorted(cluster.links.values()) == sorted(want.links.values())
    assert cluster.nodes["node-09"] == ("node-09-nic", "block-a/a-rack-1-up",
                                        "block-a/a-rack-1-down", "block-a-up", "block-a-down")
    renamed = {n: tuple(x.replace("/a-rack", "/rack").replace("/b-rack", "/rack") for x in ls)
               for n, ls in cluster.nodes.items()}
    assert renamed == want.nodes
