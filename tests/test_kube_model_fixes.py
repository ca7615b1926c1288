"""The Kubernetes model and the extender, after the review of 2026-11-29 (items 2, 3, 4,
12, 13, 14, 16, 18): a left-out node's NIC still counts towards its rack's uplink, one
rule for a pod's job id, a node's score its worst link, an unknown model in one pod
reported, a model name in the profile annotation pointed to cassini.io/model, a NIC
annotation below 1 Mbit/s refused, ``cluster show`` on one node, and nodes missing only
a lower tier's label placed under the domain they name.  Recorded API JSON replayed
through the real ``kubernetes`` client (tests/helpers/kube_replay.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import kube_replay
from helpers.kube_replay import ReplayApiServer, until
from helpers.service_util import call, error_of, ok_json

from cassini.cli import main
from cassini.errors import InputError
from cassini.service import k8s
from cassini.service.cluster import ClusterNetwork, load_cluster_file
from cassini.service.kube import pods as kube_pods
from cassini.service.kube.pods import JobPod, job_pod, jobs_from_pods
from cassini.service.kube.render import draw
from cassini.service.kube.topology import (
    KubeNode,
    LinkOptions,
    build_cluster,
    hierarchy_from_kueue,
    hierarchy_from_labels,
    hierarchy_from_well_known_labels,
    nic_capacity,
)
from cassini.service.scoring import Prepared, State, score_nodes

DATA = Path(__file__).resolve().parent / "data" / "kube"
NODES, PODS = "/api/v1/nodes", "/api/v1/pods"
KUEUE = "/apis/kueue.x-k8s.io/v1beta1/topologies"
NIC = "cassini.io/nic-bps"
REGION, ZONE = "topology.kubernetes.io/region", "topology.kubernetes.io/zone"


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def node_object(body: dict, name: str) -> dict:
    return next(o for o in body["items"] if o["metadata"]["name"] == name)


def kube_nodes(body: dict) -> list[KubeNode]:
    return [KubeNode.from_object(o) for o in body["items"]]


def kueue_model(body: dict, options: LinkOptions):
    nodes = kube_nodes(body)
    (topology,) = recorded("kueue-topologies.json")["items"]
    return build_cluster(nodes, hierarchy_from_kueue(topology, nodes), options)


# item 2: a node left out of the model still counts towards its domain's uplink


def test_a_bad_nic_annotation_does_not_shrink_the_rack_uplink():
    """The review's case: node-01 '100Gbps' left out made block-a/rack-0-up 350 Gb/s, not
    the 400 Gb/s of its 8 NICs; counted at the rack's median (50 Gb/s), said once."""
    body = recorded("nodes-64.json")
    node_object(body, "node-01")["metadata"]["annotations"][NIC] = "100Gbps"
    node_object(body, "node-02")["metadata"]["annotations"][NIC] = "1e3"  # item 14 too
    built = kueue_model(body, LinkOptions())
    assert set(built.left_out) == {"node-01", "node-02"}
    links = built.cluster.links
    assert links["block-a/rack-0-up"] == links["block-a/rack-0-down"] == 4e11
    assert links["block-a-up"] == 16e11
    ((subject, note),) = built.notes.items()  # one line for the domain, not one per node
    assert subject == "domain block-a/rack-0"
    assert "2 nodes left out of the model (node-01, node-02)" in note
    assert "50 Gb/s: the median NIC of its 6 kept nodes (no --nic-bps)" in note
    # with --nic-bps, the left-out NICs count at it, and nothing more is said
    flag = kueue_model(body, LinkOptions(nic_bps=1e11))
    assert flag.cluster.links["block-a/rack-0-up"] == 6 * 5e10 + 2 * 1e11 and not flag.notes


def test_a_rack_left_out_whole_still_counts_in_its_block():
    """No node of block-a/rack-1 has an annotation (and no --nic-bps): the rack has no
    links (no node sends through them), but the block's uplink counts its 8 NICs at the
    median of the block's kept nodes."""
    body = recorded("nodes-64.json")
    rack1 = [f"node-{i:02d}" for i in range(8, 16)]
    for name in rack1:
        del node_object(body, name)["metadata"]["annotations"][NIC]
    built = kueue_model(body, LinkOptions(oversubscription=(2.0, 8.0)))
    assert set(built.left_out) == set(rack1)
    assert "block-a/rack-1-up" not in built.cluster.links
    assert built.cluster.links["block-a-up"] == 4 * 8 * 5e10 / 8 / 2  # as with all 32 NICs
    note = built.notes["domain block-a/rack-1"]
    assert "8 nodes left out of the model (node-08, node-09, node-10, node-11, ...)" in note
    assert "the median NIC of domain block-a's 24 kept nodes" in note


def test_a_deleted_node_is_gone_from_its_rack_uplink():
    """The model's rule, as documented: a node the API server no longer lists does not
    count (unlike a listed node left out)."""
    body = recorded("nodes-64.json")
    body["items"] = [o for o in body["items"] if o["metadata"]["name"] != "node-01"]
    built = kueue_model(body, LinkOptions())
    assert built.cluster.links["block-a/rack-0-up"] == 7 * 5e10 and not built.notes


def test_from_kube_writes_the_full_uplink(tmp_path, capsys):
    body = recorded("nodes-64.json")
    node_object(body, "node-03")["metadata"]["annotations"][NIC] = "100g"
    out = tmp_path / "cluster.yaml"
    with ReplayApiServer() as api:
        api.add_list(NODES, body)
        api.add_list(PODS, recorded("pods.json"))
        api.add_list(KUEUE, recorded("kueue-topologies.json"))
        rc = main(["cluster", "from-kube", "--kubeconfig", api.kubeconfig(tmp_path),
                   "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    cluster, _ = load_cluster_file(out)
    assert "node-03" not in cluster.nodes
    assert cluster.links["block-a/rack-0-up"] == 4e11  # was 3.5e11


# item 3: one rule for a pod's job id


def test_the_extender_reads_the_job_label_as_the_pod_sync_does():
    args = k8s.read_extender_args({"Pod": {"metadata": {
        "name": "vgg16-b-2", "labels": {"cassini.io/job": "vgg16-b"}}}, "NodeNames": ["n"]})
    running = {j.job_id: j for j in load_cluster_file(DATA / "cluster-64.yaml")[1]}
    assert k8s.pod_profile(args, running) == running["vgg16-b"].profile  # was None
    assert args.labels == {"cassini.io/job": "vgg16-b"}
    # the annotation wins over the label, in both places
    meta = {"name": "p", "annotations": {"cassini.io/job": "a"}, "labels": {"cassini.io/job": "b"}}
    args = k8s.read_extender_args({"Pod": {"metadata": meta}})
    assert k8s.pod_job_id(args.annotations, args.labels) == "a"
    assert job_pod({"metadata": meta, "spec": {"nodeName": "n"}}).job_id == "a"
    with pytest.raises(InputError, match="must not be empty"):
        k8s.pod_profile(k8s.read_extender_args(
            {"Pod": {"metadata": {"annotations": {"cassini.io/job": ""}}}}), {})
    with pytest.raises(InputError, match=r"labels\[\"cassini.io/job\"\]: must be a string"):
        k8s.read_extender_args({"Pod": {"metadata": {"labels": {"cassini.io/job": 3}}}})
    assert kube_pods.pod_job_id is k8s.pod_job_id  # one function, imported


# item 4: a node's score is its worst link


def heavy_profile() -> str:
    return json.dumps({"iteration_time_s": 0.2,
                       "phases": [{"start_s": 0, "duration_s": 0.19, "rate_bps": 4.5e10}]})


def test_a_nic_shared_with_an_incompatible_job_ranks_below_an_empty_node():
    """The review's case: a heavy job against bert-a on node-00's NIC scores 0.76 there;
    the mean over the node's 5 links (NIC, rack and block up and down) gave 0.95, rounded
    to 10 as for node-01, whose links carry bert-a with room to spare."""
    built = kueue_model(recorded("nodes-64.json"), LinkOptions())
    running = {j.job_id: j for j in load_cluster_file(DATA / "cluster-64.yaml")[1]}
    prepared = Prepared(State(1, built.cluster, running))
    pod = k8s.pod_profile(k8s.ExtenderArgs("heavy-0", {"cassini.io/profile": heavy_profile()},
                                           (), None), {})
    s00, s01, s63 = score_nodes(prepared, pod, ["node-00", "node-01", "node-63"])
    assert s00.worst_link == "node-00-nic" and s00.worst_jobs == ("bert-a",)
    assert s00.score == pytest.approx(0.763, abs=1e-3) and s00.extender_score == 8
    assert s01.extender_score == s63.extender_score == 10  # no conflict: the top score


def test_serve_kube_answers_with_the_new_rules(tmp_path):
    """Through HTTP: item 4 (node-00 below node-01), item 3 (the job id as a label answers
    as the annotation does), item 13 (a model name in cassini.io/profile)."""
    lines: list[str] = []
    with ReplayApiServer() as api:
        api.add_list(NODES, recorded("nodes-64.json"))
        api.add_list(PODS, recorded("pods.json"))
        api.add_list(KUEUE, recorded("kueue-topologies.json"))
        srv = kube_replay.serve_kube(api, tmp_path, lines)
        try:
            until(lambda: set(srv.service.registry.jobs()) == {"bert-a", "vgg16-b"}, "jobs")

            def prioritize(meta, names):
                body = {"Pod": {"metadata": meta}, "NodeNames": names}
                return call(srv.port, "POST", "/k8s/v1/prioritize", body)

            heavy = {"name": "heavy-0", "annotations": {"cassini.io/profile": heavy_profile()}}
            got = ok_json(prioritize(heavy, ["node-00", "node-01"]))
            assert got == [{"Host": "node-00", "Score": 8}, {"Host": "node-01", "Score": 10}]
            names = ["node-33", "node-34", "node-40", "node-00"]
            model = {"cassini.io/model": "vgg16"}
            by_label = ok_json(prioritize({"name": "vgg16-b-2", "annotations": model,
                                           "labels": {"cassini.io/job": "vgg16-b"}}, names))
            by_annotation = ok_json(prioritize(
                {"name": "vgg16-b-2", "annotations": {**model, "cassini.io/job": "vgg16-b"}},
                names))
            no_job = ok_json(prioritize({"name": "vgg16-b-2", "annotations": model}, names))
            assert by_label == by_annotation != no_job
            err = error_of(prioritize({"name": "p", "annotations": {
                "cassini.io/profile": "bert"}}, names))
            assert err["code"] == 422 and "goes in cassini.io/model" in err["message"]
        finally:
            srv.stop()


# item 12: an unknown model in one of a job's pods


def pod(name: str, node: str, annotations: dict[str, str]) -> JobPod:
    return JobPod(f"default/{name}", name.rsplit("-", 1)[0], node, False, annotations)


def test_an_unknown_model_in_one_pod_is_reported_and_the_known_one_used():
    result = jobs_from_pods([
        pod("e-0", "node-08", {"cassini.io/model": "bertt"}),
        pod("e-1", "node-09", {"cassini.io/model": "bert"}),
    ])
    assert result.jobs["e"].model == "bert" and result.jobs["e"].nodes == ("node-08", "node-09")
    note = result.dropped["e"]
    assert note.startswith('pod default/e-0: Pod.metadata.annotations["cassini.io/model"]: '
                           "unknown model 'bertt'")
    assert "did you mean 'bert'?" in note
    assert note.endswith("ignored; its profile is model bert, from pod default/e-1")
    # two known, different models: still two jobs under one name
    two = jobs_from_pods([pod("d-0", "n0", {"cassini.io/model": "bert"}),
                          pod("d-1", "n1", {"cassini.io/model": "vgg16"})])
    assert "d" in two.conflicts and not two.jobs
    # no known one: not registered, saying why
    none = jobs_from_pods([pod("x-0", "n0", {"cassini.io/model": "llama"})])
    assert "unknown model 'llama'" in none.problems["x"] and not none.jobs


# item 13: a model name in the profile annotation


@pytest.mark.parametrize("text, field", [
    ("bert", ""), (" gpt2 ", ""), ('"bert"', ""), ('{"model": "bert"}', ".model"),
])
def test_a_model_name_in_the_profile_annotation_says_where_it_goes(text, field):
    args = k8s.ExtenderArgs("p", {"cassini.io/profile": text}, (), None)
    with pytest.raises(InputError) as e:
        k8s.pod_profile(args, {})
    assert e.value.field == f'Pod.metadata.annotations["cassini.io/profile"]{field}'
    assert "a library model's name goes in cassini.io/model" in e.value.problem
    # JSON broken otherwise: the reader's words, as before
    bad = k8s.ExtenderArgs("p", {"cassini.io/profile": '{"iteration_time_s": '}, (), None)
    with pytest.raises(InputError, match="malformed JSON at column"):
        k8s.pod_profile(bad, {})


# item 14: a NIC annotation below 1 Mbit/s


@pytest.mark.parametrize("raw", ["1e3", "100", "10k", "999999"])
def test_a_nic_annotation_below_1_mbit_is_refused_saying_the_unit(raw):
    with pytest.raises(InputError) as e:
        nic_capacity(KubeNode("n0", {}, {NIC: raw}), None)
    assert str(e.value) == (
        f"annotation cassini.io/nic-bps: {raw} bits/s is below 1 Mbit/s; the unit is bits/s "
        "(e.g. 100e9 or 100G)"
    )
    assert nic_capacity(KubeNode("n0", {}, {NIC: "1M"}), None) == 1e6


# item 16: cassini cluster show


def test_show_counts_one_node_and_gives_each_link_its_capacity():
    one = kueue_model({"items": [node_object(recorded("nodes-64.json"), "node-00")]},
                      LinkOptions()).cluster
    assert draw(one).splitlines() == [
        "1 node, 5 links, 0 shared switches",
        "nodes on no shared switch:",
        "  node-00  (node-00-nic, block-a/rack-0-up, block-a/rack-0-down, block-a-up, "
        "block-a-down, 50 Gb/s)",  # the node's order, one capacity for them all
    ]
    mixed = ClusterNetwork(
        {"r-up": 1e11, "r-down": 5e10, "a-nic": 5e10, "a-x": 2.5e10, "b-nic": 5e10},
        {"a": ("a-nic", "a-x", "r-up", "r-down"), "b": ("b-nic", "r-up", "r-down")},
    )
    assert draw(mixed).splitlines() == [
        "2 nodes, 5 links, 1 shared switch",
        "[r-up 100 Gb/s, r-down 50 Gb/s]  (2 nodes)",
        "  a  (a-nic 50 Gb/s, a-x 25 Gb/s)",
        "  b  (b-nic, 50 Gb/s)",
    ]


# item 18: nodes missing a lower tier's label


def labelled(name: str, labels: dict[str, str]) -> KubeNode:
    return KubeNode(name, labels, {NIC: "50G"})


def test_nodes_without_a_zone_sit_under_their_region_in_one_line():
    """The review's case: every node has a region, half a zone; the other half were left
    out, one line each."""
    nodes = [labelled(f"n{i}", {REGION: "r1", **({ZONE: f"z{i // 2}"} if i < 4 else {})})
             for i in range(10)]
    h = hierarchy_from_well_known_labels(nodes)
    assert h.tiers == (REGION, ZONE) and not h.unplaced
    assert h.paths["n0"] == ("r1", "z0") and h.paths["n9"] == ("r1",)
    built = build_cluster(nodes, h, LinkOptions())
    assert not built.left_out
    assert built.cluster.nodes["n9"] == ("n9-nic", "r1-up", "r1-down")
    assert built.cluster.links["r1-up"] == 10 * 5e10  # 2 zones of 2 and 6 nodes directly
    assert built.notes == {f"label {ZONE}": (
        "missing on 6 nodes (n4, n5, n6, n7, ...), placed directly under the deepest domain "
        "their other labels name")}


def test_a_node_missing_a_higher_tier_label_is_still_left_out():
    nodes = [
        labelled("top", {"b": "b1", "r": "r1", "s": "s1"}),
        labelled("no-top", {"r": "r1", "s": "s1"}),
        labelled("gap", {"b": "b1", "s": "s1"}),  # a rack missing between block and sub
        labelled("shallow", {"b": "b1"}),
    ]
    h = hierarchy_from_labels(nodes, ["b", "r", "s"])
    assert h.unplaced == {"no-top": "no label b", "gap": "no label r"}
    assert h.paths == {"top": ("b1", "r1", "s1"), "shallow": ("b1",)}
    assert h.shallow == {"shallow": "r, s"}

