"""The Kubernetes integration's review findings (2026-11-29), through the real
``kubernetes`` client against the replaying API server (tests/helpers/kube_replay.py) or a
server that never answers: the topology objects read again without a restart, a
transient API error at start-up retried, bounded request waits, ``GET /readyz``, the
failed request named in from-kube's error, ``--context``, ``--topology-labels`` with
``--kueue-topology``, and the manifests and docs that go with them."""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml
from helpers.kube_replay import TOKEN, ReplayApiServer, _status, event, until
from helpers.service_util import call, error_of, ok_json, start

from cassini.cli import build_parser, main
from cassini.service.kube import client
from cassini.service.kube.sync import KubeOptions
from cassini.service.kube.watch import Backoff

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "kube"
NODES, PODS = "/api/v1/nodes", "/api/v1/pods"
HYPERNODES = "/apis/topology.volcano.sh/v1alpha1/hypernodes"
KUEUE_V1BETA1 = "/apis/kueue.x-k8s.io/v1beta1/topologies"
KUEUE_V1BETA2 = "/apis/kueue.x-k8s.io/v1beta2/topologies"


def recorded(name):
    return json.loads((DATA / name).read_text())


def options(kubeconfig, **kw):
    """Short watches and back-off, as the other kube tests use."""
    return KubeOptions(kubeconfig=kubeconfig, watch_timeout_s=5,
                       backoff=Backoff(first_s=0.05, max_s=1.0), **kw)


def serve(kube, lines):
    return start(kube=kube, workers=1, quiet=True, log=lines.append)


def kubeconfig(path, current, servers, token=TOKEN):
    """A kubeconfig at ``path`` with one context per ``servers`` item (name -> URL)."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": n, "cluster": {"server": url}} for n, url in servers.items()],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in servers],
    }))
    return str(path)


class Silent:
    """A server on 127.0.0.1 that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


# 1. the topology objects are read again without a restart


def test_a_new_hypernode_places_a_node_that_came_after_the_start(tmp_path):
    """Until 2026-12 the HyperNodes were read at the first list only: node-64 stayed out
    of the model ("in no HyperNode") and scored the neutral 5 until a restart."""
    lines = []
    gate = threading.Event()
    hypernodes = recorded("volcano-hypernodes.json")
    later = copy.deepcopy(hypernodes)
    later["items"].append({"metadata": {"name": "a-rack-4"}, "spec": {
        "tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "node-64"}}}]}})
    block_a = next(h for h in later["items"] if h["metadata"]["name"] == "block-a")
    block_a["spec"]["members"].append(
        {"type": "HyperNode", "selector": {"exactMatch": {"name": "a-rack-4"}}})
    nodes = recorded("nodes-64.json")["items"]
    new = []
    for i in range(64, 70):  # node-64, then five that no HyperNode lists
        n = copy.deepcopy(nodes[0])
        n["metadata"]["name"] = f"node-{i}"
        new.append(event("ADDED", n, str(3000 + i)))
    with ReplayApiServer() as api:
        api.add_list(NODES, recorded("nodes-64.json"))
        api.add_list(PODS, recorded("pods.json"))
        api.add_list(HYPERNODES, hypernodes)
        api.add_list(HYPERNODES, later)  # what a later read finds
        api.add_watch(NODES, [gate, *new])
        srv = serve(options(api.kubeconfig(tmp_path), topology_recheck_s=0.3), lines)
        try:
            reg = srv.service.registry
            until(lambda: len(reg.cluster.nodes) == 64, "the first model")
            gate.set()
            until(lambda: "node-64" in reg.cluster.nodes, "node-64 placed by the new HyperNode")
            assert "block-a/a-rack-4-up" in reg.cluster.nodes["node-64"]
            time.sleep(1.0)  # the five other nodes' events: rate-limited re-reads
            reads = len(api.seen(HYPERNODES))
        finally:
            srv.stop()
    assert 2 <= reads <= 3, reads  # the first list, then at most one per 0.3 s
    assert "cassini serve: kube: the topology changed (Volcano HyperNodes); rebuilding the " \
        "model" in lines
    assert "cassini serve: kube: node node-64 left out of the model: in no HyperNode" in lines


def test_a_changed_kueue_topology_is_read_again_periodically(tmp_path):
    """No node event needed: the periodic re-read finds the Topology's new levels (a
    failed read in between keeps the previous topology, said in one line)."""
    lines = []
    flat = recorded("kueue-topologies.json")
    levels = flat["items"][0]["spec"]["levels"]
    flat["items"][0]["spec"]["levels"] = [levels[0], levels[2]]  # rack level dropped
    with ReplayApiServer() as api:
        api.add_list(NODES, recorded("nodes-64.json"))
        api.add_list(PODS, recorded("pods.json"))
        api.add_list(KUEUE_V1BETA1, recorded("kueue-topologies.json"))
        api.add_list(KUEUE_V1BETA1, (500, _status(500, "InternalError", "etcd timeout")))
        api.add_list(KUEUE_V1BETA1, flat)
        srv = serve(options(api.kubeconfig(tmp_path), topology_resync_s=1.0), lines)
        try:
            reg = srv.service.registry
            until(lambda: "block-a/rack-0-up" in reg.cluster.links, "the first model")
            until(lambda: "block-a/rack-0-up" not in reg.cluster.links, "the new levels")
            assert reg.cluster.nodes["node-00"] == ("node-00-nic", "block-a-up", "block-a-down")
        finally:
            srv.stop()
    assert (f"cassini serve: kube: topology: GET {KUEUE_V1BETA1}: 500 Internal Server Error: "
            "etcd timeout; keeping the previous topology") in lines
    assert any(line.startswith("cassini serve: kube: the topology changed (Kueue Topology")
               for line in lines)


# 5. one transient error at start-up is retried, in one line


def test_a_transient_topology_error_at_start_up_is_retried(tmp_path):
    """Until 2026-12 one 500 on the Kueue list stopped serve --kube (exit 2) with the
    client's five-line message."""
    lines = []
    with ReplayApiServer() as api:
        api.add_list(NODES, recorded("nodes-64.json"))
        api.add_list(PODS, recorded("pods.json"))
        api.add_list(KUEUE_V1BETA2, (500, _status(500, "InternalError", "etcd timeout")))
        api.add_list(KUEUE_V1BETA2, recorded("kueue-topologies.json"))
        srv = serve(options(api.kubeconfig(tmp_path)), lines)
        try:
            reg = srv.service.registry
            until(lambda: len(reg.cluster.nodes) == 64, "the model after the retry")
            assert not srv.failures
        finally:
            srv.stop()
    assert (f"cassini serve: watch nodes: GET {KUEUE_V1BETA2}: 500 Internal Server Error: "
            "etcd timeout; retrying in 0.05 s (error 1 in a row)") in lines
    assert not any("\n" in line for line in lines)


# 6. every request has a bounded wait


@pytest.mark.timeout(60)
def test_from_kube_gives_up_on_a_server_that_never_answers(tmp_path, capsys, monkeypatch):
    """Until 2026-12 it waited forever, printing nothing."""
    monkeypatch.setattr(client, "REQUEST_TIMEOUT_S", 0.5)
    silent = Silent()
    try:
        kc = kubeconfig(tmp_path / "kc", "silent", {"silent": silent.url})
        began = time.monotonic()
        rc = main(["cluster", "from-kube", "--kubeconfig", kc, "--no-jobs"])
        took = time.monotonic() - began
    finally:
        silent.close()
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err == (f"cassini: error: cannot reach the API server at {silent.url}: timed out "
                   f"after 0.5 s (GET {KUEUE_V1BETA2})\n")
    assert took < 5  # one try: no retry after a timeout


def test_a_refused_connection_is_not_called_a_timeout(tmp_path, capsys):
    """urllib3 makes a refused connection a ConnectTimeoutError too: said as what it is."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()  # nothing listens there now
    kc = kubeconfig(tmp_path / "kc", "gone", {"gone": url})
    assert main(["cluster", "from-kube", "--kubeconfig", kc, "--no-jobs"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"cassini: error: cannot reach the API server at {url}: cannot "
                          "connect: ") and "refused" in err and "timed out" not in err
    assert err.endswith(f" (GET {KUEUE_V1BETA2})\n") and err.count("\n") == 1


@pytest.mark.timeout(60)
def test_serve_kube_logs_and_retries_a_list_that_times_out(tmp_path):
    lines = []
    silent = Silent()
    try:
        kc = kubeconfig(tmp_path / "kc", "silent", {"silent": silent.url})
        srv = serve(options(kc, request_timeout_s=0.5), lines)
        try:
            until(lambda: any("watch nodes: GET /api/v1/nodes: timed out after 0.5 s; retrying"
                              in line for line in lines), "the timed out list", 15)
            status, _, body = call(srv.port, "GET", "/readyz")
            assert status == 503
            assert "timed out after 0.5 s" in json.loads(body)["error"]["message"]
        finally:
            srv.stop()
    finally:
        silent.close()


# 7. readiness: /readyz


def test_readyz_is_503_with_the_reason_until_the_first_model(tmp_path):
    """Until 2026-12 there was only /healthz, 200 while no model was served (a 401
    forever: every prioritize answered the neutral 5)."""
    lines = []
    with ReplayApiServer() as api:
        api.add_list(NODES, recorded("nodes-64.json"))
        api.add_list(PODS, recorded("pods.json"))
        api.add_list(KUEUE_V1BETA1, recorded("kueue-topologies.json"))
        bad = kubeconfig(tmp_path / "bad", "r", {"r": api.url}, token="wrong")
        srv = serve(options(bad), lines)
        try:
            until(lambda: any("401" in line for line in lines), "the 401")
            assert ok_json(call(srv.port, "GET", "/healthz"))["status"] == "ok"  # alive
            err = error_of(call(srv.port, "GET", "/readyz"))
            assert err["code"] == 503
            assert err["message"].startswith("no cluster model yet: waiting for the Kubernetes "
                                             "API server's nodes and pods (last error: watch ")
            assert "401 Unauthorized: no or wrong token (check the kubeconfig's credentials)" \
                in err["message"]
        finally:
            srv.stop()
        good = serve(options(api.kubeconfig(tmp_path)), lines)
        try:
            until(lambda: good.service.registry.cluster.nodes, "the model")
            until(lambda: call(good.port, "GET", "/readyz")[0] == 200, "ready")
            assert ok_json(call(good.port, "GET", "/readyz"))["status"] == "ready"
        finally:
            good.stop()


def test_readyz_is_200_without_kube():
    srv = start(workers=1, quiet=True)
    try:
        assert ok_json(call(srv.port, "GET", "/readyz")) == {"status": "ready",
                                                             "version": srv.service.version}
        assert call(srv.port, "HEAD", "/readyz")[0] == 200
    finally:
        srv.stop()


def test_the_manifests_probe_readiness_on_readyz_and_liveness_on_healthz():
    for name in ("cassini.yaml", "cassini-kube.yaml"):
        (dep,) = [d for d in yaml.safe_load_all((ROOT / "deploy" / name).read_text())
                  if d and d["kind"] == "Deployment"]
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", name
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", name


# 8. from-kube names the request that failed and the server's message


@pytest.mark.parametrize("path", [NODES, PODS])
def test_from_kube_names_the_failed_request_and_the_servers_message(tmp_path, capsys, path):
    """Until 2026-12 a 403 on nodes and a 403 on pods both printed "the API server
    answered 403 Forbidden"."""
    message = f'{path.rsplit("/", 1)[1]} is forbidden: User "system:serviceaccount:x" ' \
        "cannot list"
    with ReplayApiServer() as api:
        api.add_list(KUEUE_V1BETA1, recorded("kueue-topologies.json"))
        api.add_list(NODES, recorded("nodes-64.json"))
        api.add_list(PODS, recorded("pods.json"))
        api.lists[path].appendleft((403, _status(403, "Forbidden", message)))
        rc = main(["cluster", "from-kube", "--kubeconfig", api.kubeconfig(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err == (f"cassini: error: GET {path}: 403 Forbidden: {message} (RBAC: "
                   "deploy/cassini-kube.yaml's ClusterRole lists what it needs)\n")


# 15. --topology-labels with --kueue-topology


BOTH = ("--topology-labels, --kueue-topology: give one, not both (--topology-labels names "
        "the tiers' node labels; --kueue-topology picks the Kueue Topology that names them)")


def test_topology_labels_and_kueue_topology_together_are_refused(tmp_path, capsys):
    """Until 2026-12 --kueue-topology was silently ignored."""
    from cassini.service.cli import _kube_options

    with ReplayApiServer() as api:
        kc = api.kubeconfig(tmp_path)
        flags = ["--kubeconfig", kc, "--topology-labels", "a,b", "--kueue-topology", "default"]
        rc = main(["cluster", "from-kube", *flags])
        assert rc == 2
        assert capsys.readouterr().err == f"cassini: error: {BOTH}\n"
        assert not api.requests  # checked before the API server is asked
        assert _kube_options(build_parser().parse_args(["serve", "--kube", *flags])) == 2
        assert capsys.readouterr().err == f"cassini: error: --kube: {BOTH}\n"


# 17. --context


def two_contexts(tmp_path, api):
    """current-context 'dead' (nothing listens there); 'replay' the replaying server."""
    return kubeconfig(tmp_path / "kc", "dead", {"dead": "http://127.0.0.1:1", "replay": api.url})


def test_from_kube_uses_the_context_given_and_refuses_an_unknown_one(tmp_path, capsys):
    with ReplayApiServer() as api:
        api.add_list(KUEUE_V1BETA1, recorded("kueue-topologies.json"))
        api.add_list(NODES, recorded("nodes-64.json"))
        api.add_list(PODS, recorded("pods.json"))
        kc = two_contexts(tmp_path, api)
        assert main(["cluster", "from-kube", "--kubeconfig", kc, "--context", "replay"]) == 0
        out = capsys.readouterr().out
        assert "# 64 nodes" in out
        asked = len(api.requests)
        assert main(["cluster", "from-kube", "--kubeconfig", kc, "--context", "nosuch"]) == 2
        assert len(api.requests) == asked
    assert capsys.readouterr().err == (f"cassini: error: --context: no context 'nosuch' in "
                                       f"{kc} (there are: dead, replay)\n")


def test_serve_kube_uses_the_context_given(tmp_path, capsys):
    from cassini.service.cli import _kube_options, serve_command

    lines = []
    with ReplayApiServer() as api:
        api.add_list(KUEUE_V1BETA1, recorded("kueue-topologies.json"))
        api.add_list(NODES, recorded("nodes-64.json"))
        api.add_list(PODS, recorded("pods.json"))
        kc = two_contexts(tmp_path, api)
        args = build_parser().parse_args(["serve", "--kube", "--kubeconfig", kc,
                                          "--context", "replay"])
        kube = _kube_options(args)
        assert kube.context == "replay"
        srv = serve(options(kc, context=kube.context), lines)
        try:
            until(lambda: len(srv.service.registry.cluster.nodes) == 64, "the model")
        finally:
            srv.stop()
        bad = build_parser().parse_args(["serve", "--kube", "--kubeconfig", kc,
                                         "--context", "nosuch"])
        assert _kube_options(bad) == 2
        assert capsys.readouterr().err == (f"cassini: error: --kube: --context: no context "
                                           f"'nosuch' in {kc} (there are: dead, replay)\n")
        alone = build_parser().parse_args(["serve", "--context", "replay"])
        assert serve_command(alone) == 2
        assert capsys.readouterr().err == "cassini: error: --context needs --kube\n"


def test_from_kube_help_states_the_request_timeout():
    from cassini.service.kube.cli import FROM_KUBE_EXIT

    assert f"each request waits at most\n{client.REQUEST_TIMEOUT_S:g} s" in FROM_KUBE_EXIT


# 9-11. manifests and docs


def pod_specs(doc):
    """The pod specs of a manifest document (a Pod's, a workload's template's)."""
    if not doc:
        return []
    if doc.get("kind") == "Pod":
        return [doc["spec"]]
    template = (doc.get("spec") or {}).get("template")
    return [template["spec"]] if template else []


def test_every_secret_volume_is_readable_by_its_containers_user():
    """example-job.yaml mounted its token 0400 (root only) into curlimages/curl, which runs
    as a non-root user, without an fsGroup (which adds group read): the init container
    could not read it."""
    seen = 0
    for path in sorted((ROOT / "deploy").glob("*.yaml")):
        for spec in (s for d in yaml.safe_load_all(path.read_text()) for s in pod_specs(d)):
            fs_group = (spec.get("securityContext") or {}).get("fsGroup")
            for volume in spec.get("volumes") or []:
                if "secret" in volume:
                    seen += 1
                    mode = volume["secret"].get("defaultMode", 0o644)
                    assert mode & 0o004 or fs_group is not None, \
                        f"{path.name}: {volume['name']} mode {mode:o}, no fsGroup"
    assert seen >= 3


def section(text, heading):
    start = text.index(heading)
    end = re.search(r"\n#+ ", text[start + len(heading):])
    return text[start:start + len(heading) + (end.start() if end else len(text))]


def test_the_readme_makes_the_jobs_token_before_applying_the_example_job():
    """The README applied example-kube-job.yaml, which mounts Secret cassini-token in its
    own namespace, after making it in kube-system only: the pods waited forever."""
    deploy = section((ROOT / "README.md").read_text(), "## Deploy")
    steps = [line.strip() for line in deploy.splitlines()]
    job = next(i for i, s in enumerate(steps) if "example-kube-job.yaml" in s)
    made = [i for i, s in enumerate(steps) if "create secret generic cassini-token" in s
            and "-n kube-system" not in s]
    assert made and made[0] < job, deploy
    assert "-n default" in steps[made[0]]


def test_the_docs_describe_the_kube_deployment_path():
    internals = section((ROOT / "docs" / "internals.md").read_text(),
                        "### Deploying next to kube-scheduler")
    assert "deploy/cassini-kube.yaml" in internals and "--kube" in internals
    assert "/readyz" in internals
    readme = section((ROOT / "README.md").read_text(),
                     "## Using `cassini serve` and the Kubernetes extender")
    launcher = next(p for p in readme.split("\n\n") if "POST /v1/jobs" in p and "launcher" in p)
    assert "--kube" in launcher  # not needed there: the pods' annotations register the job
    service = (ROOT / "docs" / "service.md").read_text()
    assert "| `GET /readyz` |" in service and "`--context NAME`" in service


def test_the_models_notes_and_pod_notes_are_logged_and_printed(tmp_path, capsys):
    """What the model estimated (a left-out node's NIC counted in its rack's uplink) and
    what a job's pods disagreed on (one pod's unknown model ignored) are said: by
    ``serve --kube`` in its log and by ``from-kube`` on stderr, not only kept in the
    model's fields."""
    nodes = recorded("nodes-64.json")
    node = next(n for n in nodes["items"] if n["metadata"]["name"] == "node-03")
    node["metadata"]["annotations"]["cassini.io/nic-bps"] = "100g"  # not a quantity
    pods = recorded("pods.json")
    first = pods["items"][0]
    other = copy.deepcopy(first)
    other["metadata"]["name"] = first["metadata"]["name"][:-1] + "9"
    other["metadata"]["annotations"]["cassini.io/model"] = "bertt"
    pods["items"].insert(0, other)
    job = first["metadata"]["annotations"]["cassini.io/job"]
    lines: list[str] = []
    with ReplayApiServer() as api:
        for _ in range(2):
            api.add_list(NODES, nodes)
            api.add_list(PODS, pods)
            api.add_list(KUEUE_V1BETA1, recorded("kueue-topologies.json"))
        rc = main(["cluster", "from-kube", "--kubeconfig", api.kubeconfig(tmp_path),
                   "--out", str(tmp_path / "c.yaml")])
        err = capsys.readouterr().err
        srv = serve(options(api.kubeconfig(tmp_path)), lines)
        try:
            until(lambda: srv.service.registry.cluster.nodes, "the first model")
        finally:
            srv.stop()
    assert rc == 0, err
    estimate = [ln for ln in err.splitlines() if "node-03" in ln and "uplink" in ln]
    assert estimate, err
    assert any(f"job {job}: " in ln and "unknown model 'bertt'" in ln for ln in err.splitlines())
    assert any("node-03" in ln and "uplink" in ln for ln in lines), lines
    assert any(f"kube: job {job}: " in ln and "'bertt'" in ln for ln in lines), lines
