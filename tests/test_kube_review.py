"""``cassini serve --kube`` and ``cassini cluster from-kube`` on the cluster shapes a
newcomer's review found mishandled, through the real ``kubernetes`` client against the
replaying API server (tests/helpers/kube_replay.py), on small inline API JSON: a plain
cluster (no Kueue, no Volcano, no --topology-labels), a job id two namespaces share, NIC
annotations in Kubernetes units, Volcano trees with gaps and overlaps, and job ids YAML
would read as other types."""

from __future__ import annotations

import threading

import pytest
from helpers.kube_replay import ReplayApiServer, event, serve_kube, serve_main, until
from helpers.service_util import call, ok_json

from cassini.cli import main
from cassini.errors import InputError
from cassini.service.cluster import load_cluster_file
from cassini.service.kube.pods import job_pod, jobs_from_pods
from cassini.service.kube.render import cluster_file_text
from cassini.service.kube.topology import (
    KubeNode,
    LinkOptions,
    build_cluster,
    hierarchy_from_hypernodes,
)

NODES, PODS = "/api/v1/nodes", "/api/v1/pods"
HYPERNODES = "/apis/topology.volcano.sh/v1alpha1/hypernodes"
REGION, ZONE = "topology.kubernetes.io/region", "topology.kubernetes.io/zone"


def node(name, labels=None, nic="1.0e+11"):
    ann = {} if nic is None else {"cassini.io/nic-bps": nic}
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                         "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                         "annotations": ann}}


def pod(name, job, on, model="bert", ns="training"):
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}",
                         "resourceVersion": "5",
                         "annotations": {"cassini.io/job": job, "cassini.io/model": model}},
            "spec": {"nodeName": on}, "status": {"phase": "Running"}}


def listed(kind, items, rv="100"):
    return {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv},
            "items": items}


def plain_cloud(nic="1.0e+11"):
    """Four nodes of a plain cloud cluster: region and zone labels, nothing else."""
    return listed("NodeList", [
        node(f"n{i}", {REGION: "r1", ZONE: "r1-" + "ab"[i // 2]}, nic) for i in range(4)
    ])


def replay(nodes, pods=None, hypernodes=None):
    api = ReplayApiServer()
    api.add_list(NODES, nodes)
    api.add_list(PODS, pods if pods is not None else listed("PodList", [], "200"))
    if hypernodes is not None:
        api.add_list(HYPERNODES, {"apiVersion": "topology.volcano.sh/v1alpha1",
                                  "kind": "HyperNodeList", "metadata": {"resourceVersion": "4"},
                                  "items": hypernodes})
    return api


def from_kube(api, tmp_path, capsys, *args):
    """Run from-kube into a file: (exit status, the file, stderr)."""
    out = tmp_path / "cluster.yaml"
    with api:
        rc = main(["cluster", "from-kube", "--kubeconfig", api.kubeconfig(tmp_path),
                   "--out", str(out), *args])
    return rc, out, capsys.readouterr().err


# 1. a plain cluster: the well-known region/zone labels, else stop with one line

FALLBACK = (f"labels {REGION},{ZONE} (the well-known node labels: no Kueue Topology, no "
            "Volcano HyperNode, no --topology-labels)")


def test_from_kube_on_a_plain_cluster_uses_the_region_and_zone_labels(tmp_path, capsys):
    """Until 2026-12: exit 2, 'no Kueue Topology and no Volcano HyperNode'."""
    rc, out, err = from_kube(replay(plain_cloud()), tmp_path, capsys)
    assert rc == 0, err
    assert out.read_text().startswith(
        f"# cassini cluster from-kube: {FALLBACK}; tiers (top first): {REGION}, {ZONE}\n")
    cluster, _ = load_cluster_file(out)
    assert cluster.nodes["n0"] == ("n0-nic", "r1/r1-a-up", "r1/r1-a-down", "r1-up", "r1-down")
    # only the labels the nodes carry: zones alone make one tier
    zones = listed("NodeList", [node(f"n{i}", {ZONE: "ab"[i % 2]}) for i in range(4)])
    rc, out, err = from_kube(replay(zones), tmp_path, capsys)
    assert rc == 0, err
    assert load_cluster_file(out)[0].nodes["n1"] == ("n1-nic", "b-up", "b-down")


def test_serve_kube_on_a_plain_cluster_serves_the_zones_and_says_so(tmp_path):
    """Until 2026-12: an empty model served (every node scored 5, jobs on no node)."""
    lines = []
    pods = listed("PodList", [pod("b-0", "bert-b", "n0"), pod("b-1", "bert-b", "n2")], "200")
    with replay(plain_cloud(), pods) as api:
        srv = serve_kube(api, tmp_path, lines)
        try:
            reg = srv.service.registry
            until(lambda: len(reg.cluster.nodes) == 4 and "bert-b" in reg.jobs(), "the model")
            assert reg.cluster.nodes["n2"][1] == "r1/r1-b-up"
        finally:
            srv.stop()
    assert f"cassini serve: kube: topology: {FALLBACK}; tiers (top first): {REGION}, {ZONE}" \
        in lines
    assert not any("runs on nodes no longer in the model" in line for line in lines)


NO_LABELS = ("no node in the model: topology: no Kueue Topology and no Volcano HyperNode in "
             f"the cluster, and no node carries the label {REGION} or {ZONE}: give "
             "--topology-labels (node labels, top tier first)")


@pytest.mark.parametrize("nodes, line", [
    (listed("NodeList", [node("n0"), node("n1")]), NO_LABELS),
    (plain_cloud(nic=None), "no node in the model: all 4 nodes left out (logged above)"),
])
def test_serve_kube_stops_when_its_first_model_has_no_node(tmp_path, nodes, line):
    """Until 2026-12: /healthz 200 and an empty model served, one line logged."""
    lines = []
    with replay(nodes) as api:
        srv = serve_kube(api, tmp_path, lines)
        try:
            until(lambda: srv.failures, "the fatal error")
            srv._thread.join(20)
            assert not srv._thread.is_alive()  # stopped by itself
            assert srv.failures == [line]
            assert not srv.service.registry.cluster.nodes
        finally:
            srv.stop()


def test_serve_kube_exits_2_with_one_line_on_a_cluster_without_topology(tmp_path, capsys):
    with replay(listed("NodeList", [node("n0")])) as api:
        rc = serve_main(["--kube", "--kubeconfig", api.kubeconfig(tmp_path),
                         "--host", "127.0.0.1", "--port", "0", "--state", ":memory:",
                         "--workers", "1", "--nic-bps", "1.0e+11"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.splitlines()[-1] == f"cassini: error: {NO_LABELS}"
    assert "Traceback" not in err


# 3. one job id, two namespaces (or two profiles): left out and reported, never merged

TWO_TEAMS = "pods of namespaces team-a and team-b carry this cassini.io/job (two jobs under " \
    "one id: give each its own)"


def two_teams():
    return listed("PodList", [
        pod("train-0", "train", "n0", "vgg16", "team-a"),
        pod("train-1", "train", "n1", "vgg16", "team-a"),
        pod("train-0", "train", "n2", "bert", "team-b"),
        pod("train-1", "train", "n3", "bert", "team-b"),
        pod("ok-0", "ok", "n3", "resnet50", "team-b"),
    ], "200")


def test_from_kube_reports_a_job_id_two_namespaces_share(tmp_path, capsys):
    """Until 2026-12: one job train on n0..n3 with team-a's vgg16, bert dropped."""
    rc, out, err = from_kube(replay(plain_cloud(), two_teams()), tmp_path, capsys)
    assert rc == 0, err
    _, jobs = load_cluster_file(out)
    assert [j.job_id for j in jobs] == ["ok"]
    assert err.splitlines() == [f"cassini cluster from-kube: job train left out: {TWO_TEAMS}"]
    assert f"# job train left out: {TWO_TEAMS}\n" in out.read_text()


def test_a_job_id_whose_pods_give_two_profiles_is_a_conflict():
    pods = [pod("x-0", "x", "n0", "bert", "ml"), pod("x-1", "x", "n1", "vgg16", "ml"),
            pod("y-0", "y", "n0", "bert", "ml"), pod("y-1", "y", "n1", "bert", "ml")]
    result = jobs_from_pods([job_pod(p) for p in pods])
    assert set(result.jobs) == {"y"} and result.jobs["y"].nodes == ("n0", "n1")
    assert result.conflicts == {
        "x": "its pods give different profiles: model bert (ml/x-0) and model vgg16 (ml/x-1)"
    }


def test_serve_lists_a_shared_job_id_as_unusable_until_one_team_renames(tmp_path):
    lines = []
    gate = threading.Event()
    team_b = [p for p in two_teams()["items"] if p["metadata"]["name"].startswith("train")][2:]
    with replay(plain_cloud(), two_teams()) as api:
        api.add_watch(PODS, [gate, *(event("DELETED", p, f"{201 + i}")
                                     for i, p in enumerate(team_b))])
        srv = serve_kube(api, tmp_path, lines)
        try:
            reg = srv.service.registry
            until(lambda: "ok" in reg.jobs(), "the pods' jobs")
            assert "train" not in reg.jobs()
            health = ok_json(call(srv.port, "GET", "/healthz"))
            assert health["unusable_jobs"] == [{"id": "train", "reason": TWO_TEAMS}]
            status, _, body = call(srv.port, "GET", "/v1/jobs/train/time_shift")
            assert status == 404 and TWO_TEAMS in body.decode()
            gate.set()  # team-b's pods go: train is team-a's job alone
            until(lambda: "train" in reg.jobs(), "team-a's job")
            assert reg.jobs()["train"].nodes == ("n0", "n1")
            assert reg.jobs()["train"].model == "vgg16"
            assert ok_json(call(srv.port, "GET", "/healthz"))["unusable_jobs"] == []
        finally:
            srv.stop()
    assert lines.count(f"cassini serve: kube: job train left out: {TWO_TEAMS}") == 1


# 4. NIC capacities in Kubernetes units


@pytest.mark.parametrize("raw, bps", [
    ("100G", 1e11), ("25G", 2.5e10), ("400M", 4e8), ("100Gi", 100 * 2.0**30),
    ("1.5T", 1.5e12), ("10000k", 1e7), ("1024Ki", 2.0**20), ("1.0e+11", 1e11),
    ("25000000000", 2.5e10),  # k and Ki above the 1 Mbit/s floor (tests/test_kube_model_fixes)
])
def test_a_nic_annotation_may_be_a_kubernetes_quantity(raw, bps):
    """Until 2026-12: 100G, 100Gi... left the node out."""
    n = KubeNode("n0", {"zone": "a"}, {"cassini.io/nic-bps": raw})
    from cassini.service.kube.topology import hierarchy_from_labels

    built = build_cluster([n], hierarchy_from_labels([n], ["zone"]), LinkOptions())
    assert built.cluster.links["n0-nic"] == pytest.approx(bps) and not built.left_out


@pytest.mark.parametrize("raw", ["fast", "100g", "100 Gbps", "0G", "-1G", "nan", "100Pi"])
def test_a_nic_annotation_of_no_accepted_form_says_which_are(raw):
    n = KubeNode("n0", {"zone": "a"}, {"cassini.io/nic-bps": raw})
    from cassini.service.kube.topology import hierarchy_from_labels

    built = build_cluster([n], hierarchy_from_labels([n], ["zone"]), LinkOptions())
    assert built.left_out == {"n0": (
        "annotation cassini.io/nic-bps: must be a number of bits/s > 0 (1.0e+11) or a "
        f"Kubernetes quantity (100G, 400M, 100Gi), got {raw!r}")}


# 5. Volcano HyperNode trees with gaps and overlaps


def hypernode(name, tier, members, tier_name):
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
            "metadata": {"name": name},
            "spec": {"tier": tier, "tierName": tier_name, "members": members}}


def regex(kind, pattern):
    return {"type": kind, "selector": {"regexMatch": {"pattern": pattern}}}


def kube_nodes(n):
    return [KubeNode(f"n{i}", {}, {"cassini.io/nic-bps": "1e11"}) for i in range(n)]


def test_a_rack_hypernode_without_parent_keeps_the_rack_ratio():
    """Until 2026-12: rC got the spine's 4 (5e10), not the rack's 2 (1e11)."""
    hns = [hypernode("rA", 1, [regex("Node", "^n[01]$")], "rack"),
           hypernode("rC", 1, [regex("Node", "^n[23]$")], "rack"),
           hypernode("top", 2, [{"type": "HyperNode",
                                 "selector": {"exactMatch": {"name": "rA"}}}], "spine")]
    nodes = kube_nodes(4)
    h = hierarchy_from_hypernodes(hns, nodes)
    assert h.tiers == ("spine", "rack") and h.paths["n2"] == ("rC",)
    links = build_cluster(nodes, h, LinkOptions(oversubscription=(4.0, 2.0))).cluster.links
    assert links["rC-up"] == links["top/rA-up"] == 1e11
    assert links["top-up"] == 1e11 / 4


def test_a_node_in_two_hypernodes_of_one_tier_is_left_out_and_reported(tmp_path, capsys):
    """Until 2026-12: n1 silently put in rA, the alphabetically first."""
    hns = [hypernode("rA", 1, [regex("Node", "^n[01]$")], "rack"),
           hypernode("rB", 1, [regex("Node", "^n[123]$")], "rack"),
           hypernode("top", 2, [regex("HyperNode", "^r")], "spine")]
    nodes = listed("NodeList", [node(f"n{i}") for i in range(4)])
    rc, out, err = from_kube(replay(nodes, hypernodes=hns), tmp_path, capsys, "--no-jobs")
    assert rc == 0, err
    cluster, _ = load_cluster_file(out)
    assert sorted(cluster.nodes) == ["n0", "n2", "n3"]
    assert cluster.nodes["n2"][1] == "top/rB-up"
    assert err.splitlines() == [
        "cassini cluster from-kube: node n1 left out: in 2 HyperNodes of tier 1: rA, rB "
        "(one per tier)"
    ]


def test_nodes_under_a_hypernode_two_hypernodes_list_are_left_out():
    hns = [hypernode("rA", 1, [regex("Node", "^n[01]$")], "rack"),
           hypernode("rB", 1, [regex("Node", "^n[23]$")], "rack"),
           hypernode("s1", 2, [regex("HyperNode", "^r")], "spine"),
           hypernode("s2", 2, [regex("HyperNode", "^rA$")], "spine")]
    h = hierarchy_from_hypernodes(hns, kube_nodes(4))
    assert h.paths == {"n2": ("s1", "rB"), "n3": ("s1", "rB")}
    assert h.unplaced["n0"] == "under HyperNode rA, a member of 2 HyperNodes: s1, s2 " \
        "(one parent each)"


def test_hypernodes_in_a_cycle_through_a_second_parent_are_refused():
    hns = [hypernode("rA", 1, [regex("Node", "^n0$")], "rack"),
           hypernode("s1", 2, [regex("HyperNode", "^rA$")], "spine"),
           hypernode("s2", 2, [regex("HyperNode", "^(rA|s3)$")], "spine"),
           hypernode("s3", 3, [regex("HyperNode", "^s2$")], "top")]
    with pytest.raises(InputError, match="cycle"):
        hierarchy_from_hypernodes(hns, kube_nodes(1))


# 6. ids YAML would read as another type: quoted, read back as the ids

ODD_IDS = [".inf", "-1", "1_000", "true", "0x1f", "123", "null", "~", "1e3", "-.inf", ".NaN",
           "yes", "Off", "0o17", "2001-12-14", "1.5"]


def test_from_kube_writes_ids_the_cluster_file_reader_reads_back(tmp_path, capsys):
    """Until 2026-12: .inf and -1 were written plain; serve --cluster refused the file
    ('jobs[2].id: must be a string id, got the number inf')."""
    names = ["123", "true", "0x1f", "n1"]
    nodes = listed("NodeList", [node(n, {"rack": "r"}) for n in names])
    pods = listed("PodList", [pod(f"p{i}", j, names[i % 4]) for i, j in enumerate(ODD_IDS)],
                  "200")
    rc, out, err = from_kube(replay(nodes, pods), tmp_path, capsys, "--topology-labels", "rack")
    assert rc == 0, err
    cluster, jobs = load_cluster_file(out)  # what `cassini serve --cluster` reads
    assert sorted(cluster.nodes) == sorted(names)
    assert {j.job_id: j.nodes for j in jobs} == {
        j: (names[i % 4],) for i, j in enumerate(ODD_IDS)}


def test_the_cluster_file_text_quotes_only_what_needs_it(tmp_path):
    from cassini.service.cluster import ClusterNetwork

    names = [*ODD_IDS, "n-1", "~x"]
    cluster = ClusterNetwork({i + "-nic": 1e11 for i in names}, {i: (i + "-nic",) for i in names})
    text = cluster_file_text(cluster)
    (tmp_path / "c.yaml").write_text(text)
    assert load_cluster_file(tmp_path / "c.yaml")[0] == cluster
    assert "  n-1: [n-1-nic]\n" in text and '  ".inf": [.inf-nic]\n' in text
