"""--publish-network-topology: CASSINI's view as the 'cassini' weights of a
scheduler-plugins NetworkTopology (schema: kubernetes-sigs/scheduler-plugins
manifests/networktopology/crd.yaml), pure and through the replaying API server."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from helpers.kube_replay import ReplayApiServer
from helpers.service_util import start

from cassini.profile import JobProfile, Phase
from cassini.service.cluster import ClusterNetwork, RunningJob
from cassini.service.kube.network_costs import cost_of, weights_entry, with_entry
from cassini.service.kube.sync import KubeOptions
from cassini.service.kube.topology import Hierarchy, LinkOptions
from cassini.service.scoring import State

DATA = Path(__file__).resolve().parent / "data" / "kube"
NT = "/apis/networktopology.diktyo.x-k8s.io/v1alpha1/namespaces/training/networktopologies/view"


def test_cost_mapping_ends():
    assert cost_of(1.0, 1.0) == 1 and cost_of(0.0, 1.0) == 100 and cost_of(0.5, 0.9) == 51


def job(jid, nodes):
    return RunningJob(JobProfile(jid, 0.1, (Phase(0.0, 0.05, 1e9),)), tuple(nodes))


def test_weights_between_regions_and_zones_with_repeated_zone_names():
    h = Hierarchy("labels", ("block", "rack"), {
        "a0": ("A", "r0"), "a1": ("A", "r1"), "a2": ("A", "r1"), "b0": ("B", "r0"),
        "b1": ("B", "r1"), "b2": ("B", "r0")})
    links = {f"{p}-{d}": 1e9 for p in ("A", "B", "A/r0", "A/r1", "B/r0", "B/r1")
             for d in ("up", "down")}
    nodes = {n: (f"{'/'.join(p)}-up", f"{p[0]}-up") for n, p in h.paths.items()}
    # each job on two nodes of one rack (a job on one node crosses no link)
    state = State(1, ClusterNetwork(links, nodes), {
        "j1": job("j1", ["b0", "b2"]), "j2": job("j2", ["b0", "b2"]),
        "j3": job("j3", ["a1", "a2"])})

    def score(jobs, capacity):  # a stand-in: each extra job on a link costs a quarter
        assert capacity == 1e9
        return 1.0 - 0.25 * (len(jobs) - 1)

    entry = weights_entry(h, state, score)
    assert entry["name"] == "cassini"
    region, zone = entry["topologyList"]
    assert region["topologyKey"] == "topology.kubernetes.io/region"
    assert zone["topologyKey"] == "topology.kubernetes.io/zone"
    costs = {(o["origin"], c["destination"]): c["networkCost"]
             for o in region["originList"] for c in o["costList"]}
    assert costs == {("A", "B"): 26, ("B", "A"): 26}  # B's uplink: 2 jobs -> 0.75
    zones = {(o["origin"], c["destination"]): c["networkCost"]
             for o in zone["originList"] for c in o["costList"]}
    assert zones == {("r0", "r1"): 26, ("r1", "r0"): 26}  # r0 = the worse of A/r0, B/r0


def test_with_entry_keeps_the_other_weights():
    obj = {"metadata": {"name": "v"}, "spec": {"configmapName": "netperf", "weights": [
        {"name": "UserDefined", "topologyList": []}, {"name": "cassini", "topologyList": []}]}}
    new = with_entry(obj, {"name": "cassini", "topologyList": [{"topologyKey": "k"}]})
    assert [w["name"] for w in new["spec"]["weights"]] == ["UserDefined", "cassini"]
    assert new["spec"]["weights"][1]["topologyList"] == [{"topologyKey": "k"}]
    assert new["spec"]["configmapName"] == "netperf" and obj["spec"]["weights"][1] != new


def test_serve_publishes_the_weights(tmp_path):
    pods = json.loads((DATA / "pods.json").read_text())
    # a gpt2 job on two nodes beside vgg16-b's node-33 (a job on one node crosses no link)
    for i, node in enumerate(("node-34", "node-35")):
        extra = copy.deepcopy(pods["items"][2])
        extra["metadata"].update(
            name=f"gpt2-g-{i}", uid=f"uid-g{i}",
            annotations={"cassini.io/job": "gpt2-g", "cassini.io/model": "gpt2"})
        extra["spec"]["nodeName"] = node
        pods["items"].append(extra)
    lines = []
    with ReplayApiServer() as api:
        api.add_list("/api/v1/nodes", json.loads((DATA / "nodes-64.json").read_text()))
        api.add_list("/api/v1/pods", pods)
        api.add_list("/apis/kueue.x-k8s.io/v1beta1/topologies",
                     json.loads((DATA / "kueue-topologies.json").read_text()))
        api.objects[NT] = {
            "apiVersion": "networktopology.diktyo.x-k8s.io/v1alpha1", "kind": "NetworkTopology",
            "metadata": {"name": "view", "namespace": "training", "resourceVersion": "7"},
            "spec": {"configmapName": "netperf-metrics",
                     "weights": [{"name": "UserDefined", "topologyList": []}]}}
        opts = KubeOptions(kubeconfig=api.kubeconfig(tmp_path), watch_timeout_s=5,
                           links=LinkOptions(oversubscription=(2.0, 8.0)),
                           publish_network_topology="training/view", publish_interval_s=0.2)
        srv = start(kube=opts, workers=1, quiet=True, log=lines.append)
        try:
            end = time.monotonic() + 30
            while time.monotonic() < end and len(api.objects[NT]["spec"]["weights"]) < 2:
                time.sleep(0.05)
        finally:
            srv.stop()
        obj = api.objects[NT]
    assert obj["metadata"]["resourceVersion"] == "8"  # replaced once, on the version read
    user, mine = obj["spec"]["weights"]
    assert user["name"] == "UserDefined" and mine["name"] == "cassini"
    region, zone = mine["topologyList"]
    names = {o["origin"] for o in region["originList"]}
    assert names == {"block-a", "block-b"}
    zones = {(o["origin"], c["destination"]): c["networkCost"]
             for o in zone["originList"] for c in o["costList"]}
    assert set(zones) == {(a, b) for a in ("rack-0", "rack-1", "rack-2", "rack-3")
                          for b in ("rack-0", "rack-1", "rack-2", "rack-3") if a != b}
    # rack-0 of block-b carries vgg16-b and gpt2-g on 50 Gb/s: worse than racks 2 and 3
    assert zones[("rack-0", "rack-2")] > zones[("rack-2", "rack-3")] == 1
    assert any("NetworkTopology training/view: weights 'cassini' updated" in x for x in lines)
