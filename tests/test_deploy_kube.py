"""deploy/cassini-kube.yaml and deploy/example-kube-job.yaml: ``cassini serve --kube``'s
command parses, its ServiceAccount's RBAC allows every request the service makes (those
the replaying API server saw, and the publisher's), and the example job's pods resolve to
one job."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from helpers.kube_replay import ReplayApiServer

from cassini.cli import build_parser, main
from cassini.service.kube import client, publish
from cassini.service.kube.pods import job_pod, jobs_from_pods

ROOT = Path(__file__).resolve().parent.parent
DEPLOY, DATA = ROOT / "deploy", ROOT / "tests" / "data" / "kube"


def docs(name):
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]


def one(name, kind):
    (found,) = [d for d in docs(name) if d["kind"] == kind]
    return found


def allowed(rules, group, resource, verb):
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               for r in rules)


def test_the_deployment_runs_serve_kube_as_its_service_account():
    dep = one("cassini-kube.yaml", "Deployment")
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = build_parser().parse_args(container["command"][1:])
    assert args.command == "serve" and args.kube and args.cluster is None
    assert args.kubeconfig is None  # in-cluster config
    assert spec["serviceAccountName"] == one("cassini-kube.yaml", "ServiceAccount")["metadata"][
        "name"]
    # the same Service the scheduler's extender URL names (deploy/scheduler-config.yaml)
    svc = one("cassini-kube.yaml", "Service")
    assert svc == one("cassini.yaml", "Service")
    (cfg,) = docs("scheduler-config.yaml")
    url = urlsplit(cfg["extenders"][0]["urlPrefix"])
    assert url.hostname.split(".")[:2] == [svc["metadata"]["name"], svc["metadata"]["namespace"]]


def test_rbac_allows_every_request_the_service_makes(tmp_path, capsys):
    binding = one("cassini-kube.yaml", "ClusterRoleBinding")
    role = one("cassini-kube.yaml", "ClusterRole")
    sa = one("cassini-kube.yaml", "ServiceAccount")["metadata"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {"kind": "ServiceAccount", **{k: sa[k] for k in ("name", "namespace")}} in \
        binding["subjects"]
    rules = role["rules"]
    with ReplayApiServer() as api:
        api.add_list("/api/v1/nodes", json.loads((DATA / "nodes-64.json").read_text()))
        api.add_list("/api/v1/pods", json.loads((DATA / "pods.json").read_text()))
        assert main(["cluster", "from-kube", "--kubeconfig", api.kubeconfig(tmp_path)]) == 2
        capsys.readouterr()
        requests = list(api.requests)
    seen = set()
    for method, path, query in requests:
        parts = path.strip("/").split("/")
        group, resource = ("", parts[2]) if parts[0] == "api" else (parts[1], parts[3])
        verb = "watch" if query.get("watch") else "list"
        assert method == "GET"
        seen.add((group, resource))
        assert allowed(rules, group, resource, verb), (group, resource, verb)
    assert (client.KUEUE_GROUP, "topologies") in seen
    assert (client.VOLCANO_GROUP, "hypernodes") in seen
    for resource in ("nodes", "pods"):  # what serve --kube watches
        assert allowed(rules, "", resource, "watch")
    # the publisher: get, then create or update, in the Role's namespace
    writer = one("cassini-kube.yaml", "Role")
    rb = one("cassini-kube.yaml", "RoleBinding")
    assert rb["roleRef"]["name"] == writer["metadata"]["name"]
    for verb in ("get", "create", "update"):
        assert allowed(writer["rules"], publish.GROUP, publish.PLURAL, verb)


def test_the_example_jobs_pods_are_one_job():
    job = one("example-kube-job.yaml", "Job")
    template = job["spec"]["template"]
    assert template["spec"]["schedulerName"] == "cassini-scheduler"
    pods = []
    for i in range(job["spec"]["parallelism"]):
        pod = copy.deepcopy(template)
        pod["metadata"]["name"] = f"bert-b-{i}"
        pod["spec"]["nodeName"] = f"gpu-{i}"
        pod["status"] = {"phase": "Running"}
        pods.append(job_pod(pod))
    result = jobs_from_pods(pods)
    (only,) = result.jobs.values()
    assert only.job_id == "bert-b" and only.nodes == ("gpu-0", "gpu-1") and only.model == "bert"
