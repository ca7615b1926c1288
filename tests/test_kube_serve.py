"""``cassini serve --kube`` through the real ``kubernetes`` client against a local server
replaying recorded API JSON (tests/helpers/kube_replay.py): the model and the jobs from
Nodes and Pods, kept up to date by watches (bookmarks, 410 Gone, node churn), and the
extender answering as with the hand-written cluster file."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import pytest
from helpers import kube_replay
from helpers.kube_replay import ReplayApiServer, bookmark, event, gone, until
from helpers.service_util import call, ok_json, start

from cassini.service.cluster import load_cluster_file
from cassini.service.kube.sync import KubeOptions
from cassini.service.kube.topology import LinkOptions
from cassini.service.kube.watch import Backoff

DATA = Path(__file__).resolve().parent / "data" / "kube"
NODES, PODS = "/api/v1/nodes", "/api/v1/pods"


def recorded(name):
    return json.loads((DATA / name).read_text())


def replay():
    server = ReplayApiServer()
    server.add_list(NODES, recorded("nodes-64.json"))
    server.add_list(PODS, recorded("pods.json"))
    server.add_list("/apis/kueue.x-k8s.io/v1beta1/topologies", recorded("kueue-topologies.json"))
    return server


def serve_kube(api, tmp_path, lines):
    return kube_replay.serve_kube(api, tmp_path, lines, LinkOptions(oversubscription=(2.0, 8.0)))


def pod(name, job, node, model="gpt2", phase="Running"):
    p = copy.deepcopy(recorded("pods.json")["items"][0])
    p["metadata"].update(name=name, uid=f"uid-{name}",
                         annotations={"cassini.io/job": job, "cassini.io/model": model})
    p["spec"].pop("nodeName", None)
    if node:
        p["spec"]["nodeName"] = node
    p["status"] = {"phase": phase}
    return p


def new_pod_args(names):
    meta = {"name": "llm-0", "namespace": "training",
            "annotations": {"cassini.io/job": "llm", "cassini.io/model": "gpt2"}}
    return {"Pod": {"metadata": meta, "spec": {}}, "Nodes": None, "NodeNames": names}


def test_prioritize_answers_as_with_the_hand_written_file(tmp_path):
    lines = []
    with replay() as api:
        kube = serve_kube(api, tmp_path, lines)
        handwritten = start(cluster_file=str(DATA / "cluster-64.yaml"), workers=1, quiet=True)
        try:
            reg = kube.service.registry
            until(lambda: set(reg.jobs()) == {"bert-a", "vgg16-b"}, "the pods' jobs")
            cluster, jobs = load_cluster_file(DATA / "cluster-64.yaml")
            assert reg.cluster == cluster and list(reg.jobs().values()) == jobs
            names = sorted(cluster.nodes)
            body = new_pod_args(names)
            got = ok_json(call(kube.port, "POST", "/k8s/v1/prioritize", body))
            want = ok_json(call(handwritten.port, "POST", "/k8s/v1/prioritize", body))
            assert got == want
            assert len({h["Score"] for h in got}) > 1  # the jobs make some nodes worse
        finally:
            kube.stop()
            handwritten.stop()
    assert any("job bert-a registered on node-00, node-09" in line for line in lines)


def test_a_pod_bound_then_deleted_registers_then_removes_its_job(tmp_path):
    lines = []
    gate = threading.Event()
    with replay() as api:
        pending = pod("gpt2-e-0", "gpt2-e", None, phase="Pending")
        bound = pod("gpt2-e-0", "gpt2-e", "node-12")
        api.add_watch(PODS, [
            event("ADDED", pending, "2101"),
            event("MODIFIED", bound, "2102"),
            gate,
            event("DELETED", bound, "2103"),
            bookmark("Pod", "v1", "2200"),
        ])
        srv = serve_kube(api, tmp_path, lines)
        try:
            reg = srv.service.registry
            until(lambda: "gpt2-e" in reg.jobs(), "the bound pod's job")
            assert reg.jobs()["gpt2-e"].nodes == ("node-12",)
            assert ok_json(call(srv.port, "GET", "/v1/jobs/gpt2-e"))["nodes"] == ["node-12"]
            gate.set()
            until(lambda: "gpt2-e" not in reg.jobs(), "the job's removal")
            assert set(reg.jobs()) == {"bert-a", "vgg16-b"}
            # the next watch resumes from the bookmark's resourceVersion, with bookmarks
            until(lambda: api.seen(PODS, watch="true", resourceVersion="2200"), "re-watch")
            assert api.seen(PODS, watch="true", resourceVersion="2100",
                            allowWatchBookmarks="true")
        finally:
            srv.stop()
    assert any("job gpt2-e removed (its last pod ended)" in line for line in lines)


def test_a_410_mid_stream_lists_again_without_losing_a_job(tmp_path):
    lines = []
    with replay() as api:
        later = recorded("pods.json")
        later["metadata"]["resourceVersion"] = "2300"
        later["items"].append(pod("gpt2-f-0", "gpt2-f", "node-50"))  # came during the gap
        api.add_list(PODS, later)
        api.add_watch(PODS, [event("MODIFIED", recorded("pods.json")["items"][0], "2101"),
                             gone()])
        srv = serve_kube(api, tmp_path, lines)
        try:
            reg = srv.service.registry
            until(lambda: "gpt2-f" in reg.jobs(), "the job listed again")
            assert set(reg.jobs()) == {"bert-a", "vgg16-b", "gpt2-f"}
            until(lambda: api.seen(PODS, watch="true", resourceVersion="2300"), "watch from 2300")
        finally:
            srv.stop()
    assert any("watch pods: too old resource version" in line and "listing again" in line
               for line in lines)
    assert not any("removed" in line for line in lines)  # no job vanished meanwhile


def test_node_churn_updates_the_model_and_reports_jobs_on_a_removed_node(tmp_path):
    lines = []
    with replay() as api:
        nodes = recorded("nodes-64.json")["items"]
        moved = copy.deepcopy(nodes[63])
        moved["metadata"]["labels"]["cloud.provider.com/topology-rack"] = "rack-0"
        status_only = copy.deepcopy(nodes[1])
        status_only["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-27T08:05:00Z"
        added = copy.deepcopy(nodes[2])
        added["metadata"]["name"] = "node-64"
        added["metadata"]["labels"]["kubernetes.io/hostname"] = "node-64"
        api.add_watch(NODES, [
            event("MODIFIED", status_only, "2049"),
            event("MODIFIED", moved, "2050"),
            event("DELETED", nodes[33], "2051"),
            event("ADDED", added, "2052"),
        ])
        srv = serve_kube(api, tmp_path, lines)
        try:
            reg = srv.service.registry
            until(lambda: "node-64" in reg.cluster.nodes, "the added node")
            assert "node-33" not in reg.cluster.nodes and len(reg.cluster.nodes) == 64
            assert "block-b/rack-0-up" in reg.cluster.nodes["node-63"]
            assert reg.cluster.links["block-b/rack-3-up"] == 7 * 5e10 / 8
            assert reg.jobs()["vgg16-b"].nodes == ("node-33", "node-40")  # kept
            # its remaining node still counts on the extender's links, the removed one not
            body = new_pod_args(["node-34", "node-41"])
            scores = {h["Host"]: h["Score"]
                      for h in ok_json(call(srv.port, "POST", "/k8s/v1/prioritize", body))}
            assert scores["node-41"] < scores["node-34"]  # node-41: rack of vgg16-b's node-40
        finally:
            srv.stop()
    assert any("job vgg16-b runs on nodes no longer in the model" in line and "node-33" in line
               for line in lines)


def test_api_errors_back_off_and_recover(tmp_path):
    lines = []
    with replay() as api:
        error = (500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                       "reason": "InternalError", "message": "etcdserver: request timed out"})
        api.lists[PODS].extendleft([error, error])
        srv = serve_kube(api, tmp_path, lines)
        try:
            reg = srv.service.registry
            until(lambda: set(reg.jobs()) == {"bert-a", "vgg16-b"}, "recovery")
        finally:
            srv.stop()
    waits = [line for line in lines if "watch pods: GET /api/v1/pods: 500 " in line]
    assert len(waits) == 2
    assert waits[0].startswith("cassini serve: watch pods: GET /api/v1/pods: 500 Internal "
                               "Server Error: etcdserver: request timed out; retrying")
    assert "retrying in 0.05 s (error 1 in a row)" in waits[0]
    assert "retrying in 0.1 s (error 2 in a row)" in waits[1]


def test_kube_and_cluster_file_exclude_each_other():
    with pytest.raises(ValueError, match="not both"):
        start(kube=KubeOptions(), cluster_file=str(DATA / "cluster-64.yaml"))


def test_serve_options_become_kube_options(tmp_path, capsys):
    from cassini.cli import build_parser
    from cassini.service.cli import _kube_options

    with ReplayApiServer() as api:
        kubeconfig = api.kubeconfig(tmp_path)
    args = build_parser().parse_args([
        "serve", "--kube", "--kubeconfig", kubeconfig, "--topology-labels", "zone,rack",
        "--nic-bps", "2.5e10", "--oversubscription", "3,2",
        "--publish-network-topology", "ml/view", "--publish-interval-s", "10"])
    assert _kube_options(args) == KubeOptions(
        kubeconfig=kubeconfig, topology_labels=("zone", "rack"), kueue_topology=None,
        links=LinkOptions(2.5e10, (3.0, 2.0)), publish_network_topology="ml/view",
        publish_interval_s=10.0)
    bad = build_parser().parse_args(["serve", "--kube", "--kubeconfig", str(tmp_path / "no")])
    assert _kube_options(bad) == 2
    err = capsys.readouterr().err
    assert err.startswith("cassini: error: --kube: ") and f"{tmp_path / 'no'}: " in err


# more --oversubscription values than tiers: refused, not an empty cluster served


def test_more_oversubscriptions_than_the_topology_labels_tiers_are_refused_at_start(
    tmp_path, capsys
):
    """Served no node on every rebuild (logged only) until 2026-12."""
    from cassini.cli import build_parser
    from cassini.service.cli import _kube_options

    with ReplayApiServer() as api:
        kubeconfig = api.kubeconfig(tmp_path)
    for labels in ("zone,rack", "zone,rack,kubernetes.io/hostname"):
        args = build_parser().parse_args([
            "serve", "--kube", "--kubeconfig", kubeconfig, "--topology-labels", labels,
            "--oversubscription", "2,8,4"])  # fmt: skip
        assert _kube_options(args) == 2
        err = capsys.readouterr().err
        assert err == (
            "cassini: error: --oversubscription: 3 values, but the cluster has 2 tiers "
            "(zone, rack): give at most 2, top tier first\n"
        )
    ok = build_parser().parse_args([
        "serve", "--kube", "--kubeconfig", kubeconfig, "--topology-labels", "zone,rack",
        "--oversubscription", "2,8"])  # fmt: skip
    assert _kube_options(ok).links.oversubscription == (2.0, 8.0)


def test_too_many_oversubscriptions_for_the_first_model_stop_the_service(tmp_path):
    """The tiers known only from the cluster (a Kueue Topology of 2 levels): the first
    model's failure stops the service (one line kept), nothing applied."""
    lines = []
    with replay() as api:
        opts = KubeOptions(kubeconfig=api.kubeconfig(tmp_path), watch_timeout_s=5,
                           links=LinkOptions(oversubscription=(2.0, 8.0, 4.0)),
                           backoff=Backoff(first_s=0.05, max_s=1.0))
        srv = start(kube=opts, workers=1, quiet=True, log=lines.append)
        try:
            until(lambda: srv.failures, "the fatal error")
            srv._thread.join(20)
            assert not srv._thread.is_alive()  # the server stopped by itself
            assert srv.failures == [
                "--oversubscription: 3 values, but the cluster has 2 tiers "
                "(cloud.provider.com/topology-block, cloud.provider.com/topology-rack): give "
                "at most 2, top tier first"
            ]
            assert not srv.service.registry.cluster.nodes
            assert not any("keeping the previous model" in line for line in lines)
        finally:
            srv.stop()


def test_serve_exits_2_when_its_first_model_has_too_many_oversubscriptions(tmp_path, capsys):
    with replay() as api:
        rc = kube_replay.serve_main([
            "--kube", "--kubeconfig", api.kubeconfig(tmp_path), "--oversubscription", "2,8,4",
            "--host", "127.0.0.1", "--port", "0", "--state", ":memory:", "--workers", "1",
        ])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.splitlines()[-1] == (
        "cassini: error: --oversubscription: 3 values, but the cluster has 2 tiers "
        "(cloud.provider.com/topology-block, cloud.provider.com/topology-rack): give at most "
        "2, top tier first"
    )
    assert "Traceback" not in err


# a node without a sound metadata.name: reported in one line and left out


def bad_names():
    nodes = recorded("nodes-64.json")
    items = nodes["items"]
    no_meta = copy.deepcopy(items[0])
    del no_meta["metadata"]
    number = copy.deepcopy(items[1])
    number["metadata"].update(name=42, uid="uid-number")
    empty = copy.deepcopy(items[2])
    empty["metadata"]["name"] = ""
    control = copy.deepcopy(items[3])
    control["metadata"]["name"] = "node-03\nnode-99"
    return nodes, [no_meta, number, empty, control]


def test_nodes_without_a_sound_name_are_reported_and_left_out(tmp_path):
    """A node without metadata made the list fail (KeyError) and retry forever, and one
    whose name held a newline went into the model, until 2026-12."""
    lines = []
    nodes, bad = bad_names()
    nodes["items"].extend(bad)
    with replay() as api:
        api.lists[NODES].clear()
        api.add_list(NODES, nodes)
        later = copy.deepcopy(recorded("nodes-64.json")["items"][2])
        later["metadata"]["name"] = "node-64"
        api.add_watch(NODES, [*(event("ADDED", b, f"{2049 + i}") for i, b in enumerate(bad)),
                              event("ADDED", later, "2060")])
        srv = serve_kube(api, tmp_path, lines)
        try:
            reg = srv.service.registry
            until(lambda: "node-64" in reg.cluster.nodes, "the good node after the bad ones")
            assert len(reg.cluster.nodes) == 65
            assert not any("\n" in n or not isinstance(n, str) for n in reg.cluster.nodes)
            # the watches go on: no error, no retry
            assert not any("retrying" in line for line in lines)
        finally:
            srv.stop()
    ignored = [line for line in lines if "object ignored" in line]
    assert all("\n" not in line for line in ignored)
    assert ignored[:4] == [
        "cassini serve: watch nodes: items[64].metadata.name: missing or not a string, got "
        "null; object ignored",
        "cassini serve: watch nodes: items[65].metadata.name: missing or not a string, got "
        "the number 42 (uid uid-number); object ignored",
        "cassini serve: watch nodes: items[66].metadata.name: missing or not a string, got "
        "the string '' (uid 5c0e9a1e-0000-4000-8000-000000000002); object ignored",
        "cassini serve: watch nodes: items[67].metadata.name: must not contain control "
        "characters, got 'node-03\\nnode-99' (uid 5c0e9a1e-0000-4000-8000-000000000003); "
        "object ignored",
    ]
    assert len(ignored) == 8 and ignored[5] == (
        "cassini serve: watch nodes: ADDED event's object.metadata.name: missing or not a "
        "string, got the number 42 (uid uid-number); object ignored"
    )
