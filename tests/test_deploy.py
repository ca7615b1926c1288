"""deploy/: the YAML parses, the scheduler configuration names our extender endpoints, and
the manifests agree with the service (command line, probes, cluster file, annotations)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from cassini.cli import build_parser
from cassini.service import contract
from cassini.service.cluster import read_cluster
from cassini.service.k8s import pod_profile, read_extender_args

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def docs(name):
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]


def served(path, method):
    for ep in contract.ENDPOINTS:
        if ep.template == path:
            return method in ep.allowed_methods()
    return False


def kind(name, k):
    found = [d for d in docs(name) if d["kind"] == k]
    assert found, f"no {k} in {name}"
    return found


MANIFESTS = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "cluster-example.yaml")


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_manifest_parses(name):
    for d in docs(name):
        assert d["apiVersion"] and d["kind"]


def test_example_cluster_file_is_valid():
    cluster, jobs = read_cluster(yaml.safe_load((DEPLOY / "cluster-example.yaml").read_text()))
    assert len(cluster.nodes) == 4 and [j.job_id for j in jobs] == ["vgg16-a", "bert-b", "custom-c"]


def scheduler_config():
    (cfg,) = docs("scheduler-config.yaml")
    return cfg


def test_scheduler_configuration_names_our_endpoints():
    cfg = scheduler_config()
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    (ext,) = cfg["extenders"]
    url = urlsplit(ext["urlPrefix"])
    # kube-scheduler calls strings.TrimRight(urlPrefix, "/") + "/" + verb
    for verb_key in ("filterVerb", "prioritizeVerb"):
        path = url.path.rstrip("/") + "/" + ext[verb_key]
        assert served(path, "POST"), path
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is True
    assert ext["weight"] >= 1 and "bindVerb" not in ext and "preemptVerb" not in ext
    # the Service the URL names exists, on that port
    (svc,) = kind("cassini.yaml", "Service")
    host = url.hostname.split(".")
    assert host[:2] == [svc["metadata"]["name"], svc["metadata"]["namespace"]]
    assert url.port == svc["spec"]["ports"][0]["port"]
    assert cfg["profiles"][0]["schedulerName"] == "cassini-scheduler"


def test_second_scheduler_carries_the_same_configuration():
    (cm,) = kind("scheduler.yaml", "ConfigMap")
    assert yaml.safe_load(cm["data"]["scheduler-config.yaml"]) == scheduler_config()
    (dep,) = kind("scheduler.yaml", "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert any(a.startswith("--config=") for a in container["command"])
    (pod,) = docs("example-job.yaml")
    assert pod["spec"]["schedulerName"] == scheduler_config()["profiles"][0]["schedulerName"]


def test_cassini_deployment_runs_a_valid_command_with_a_valid_cluster_file():
    (cm,) = kind("cassini.yaml", "ConfigMap")
    cluster, jobs = read_cluster(yaml.safe_load(cm["data"]["cluster.yaml"]))
    assert cluster.links and cluster.nodes
    (dep,) = kind("cassini.yaml", "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:2] == ["cassini", "serve"]
    args = build_parser().parse_args(command[1:])
    assert args.command == "serve" and args.cluster == "/etc/cassini/cluster.yaml"
    mount = container["volumeMounts"][0]["mountPath"]
    assert args.cluster.startswith(mount + "/")
    assert container["ports"][0]["containerPort"] == args.port
    for probe in ("readinessProbe", "livenessProbe"):
        assert served(container[probe]["httpGet"]["path"], "GET")
    assert dep["spec"]["replicas"] == 1  # the registry lives in the process


def test_example_pod_annotations_are_what_the_extender_reads():
    (pod,) = docs("example-job.yaml")
    args = read_extender_args({"Pod": pod, "NodeNames": ["gpu-0-0"]})
    profile = pod_profile(args, {})
    assert (
        profile is not None and profile.job_id == pod["metadata"]["annotations"]["cassini.io/job"]
    )
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert {"CASSINI_URL", "CASSINI_JOB_ID"} <= set(env)
    assert "cassini.io/job" in env["CASSINI_JOB_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
