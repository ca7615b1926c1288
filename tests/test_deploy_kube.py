"""deploy/cassini-kube.yaml and deploy/example-kube-job.yaml: ``cassini serve --kube``'s
command parses, its ServiceAccount's RBAC allows every request the service makes (those
the replaying API server saw, and the publisher's), and the example job's pods resolve to
one job."""

from __future__ import annotations

import copy
import json
import os
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


def comment(name):
    """The manifest's comment lines, '#' and one space dropped, joined by newlines."""
    return "\n".join(line.lstrip()[1:].strip() for line in (DEPLOY / name).read_text()
                     .splitlines() if line.lstrip().startswith("#"))


def kube_container():
    spec = one("cassini-kube.yaml", "Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, container, build_parser().parse_args(container["command"][1:])


def test_the_shipped_oversubscription_fits_a_cluster_of_any_number_of_tiers():
    """Until 2026-12 '1,2' made the pod exit 2 on a cluster of one tier or none."""
    from cassini.service.kube.cli import link_options
    from cassini.service.kube.topology import Hierarchy, check_oversubscription

    _, _, args = kube_container()
    options = link_options(args)
    for n in range(4):
        check_oversubscription(Hierarchy("t", tuple(f"t{i}" for i in range(n)), {}), options)
    text = comment("cassini-kube.yaml")
    assert '"--oversubscription", "X,Y"' in text and "top tier first" in text
    # the topology fallback and how to name the tiers, said where the flags are set
    for words in ("topology.kubernetes.io/region", "topology.kubernetes.io/zone",
                  '"--topology-labels"', "100G"):
        assert words in text, words


def mounted_secret(spec, container, path):
    for m in container["volumeMounts"]:
        if path.startswith(m["mountPath"].rstrip("/") + "/"):
            volume = next(v for v in spec["volumes"] if v["name"] == m["name"])
            return volume["secret"]["secretName"]
    raise AssertionError(f"{path} is on no mounted volume")


def test_the_agents_release_is_authorised_by_the_token_the_service_reads(tmp_path):
    """Until 2026-12 the kube install had no --token-file: the agent's release PUT got 403."""
    from cassini.service.auth import read_token_file
    from cassini.torch.timeshift import ENV_TOKEN_FILE, read_token

    spec, container, args = kube_container()
    assert args.token_file and not args.insecure_writes
    secret = mounted_secret(spec, container, args.token_file)
    assert container["imagePullPolicy"] == "IfNotPresent"
    # the jobs' pods mount a Secret of that name (in their namespace) for the agent
    template = one("example-kube-job.yaml", "Job")["spec"]["template"]
    (train,) = template["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in train["env"]}
    assert mounted_secret(template["spec"], train, env[ENV_TOKEN_FILE]) == secret
    # the Secret is generated by the documented command, never a file to edit
    text = comment("cassini-kube.yaml")
    literal = f'create secret generic {secret} \\\n--from-literal=token="$(openssl rand -hex 32)'
    assert f'kubectl -n kube-system {literal} agents"' in text
    assert f"kubectl -n NAMESPACE create secret generic {secret}" in text
    token = tmp_path / "token"
    token.write_text(os.urandom(32).hex() + " agents")  # what that command stores
    assert read_token_file(token).name_of(read_token(str(token))) == "agents"


def test_the_cassini_images_are_not_pulled_when_present():
    for name in ("cassini.yaml", "cassini-kube.yaml"):
        (container,) = one(name, "Deployment")["spec"]["template"]["spec"]["containers"]
        assert container["image"].startswith("netaware-ml:")
        assert container["imagePullPolicy"] == "IfNotPresent", name


def test_the_scheduler_configuration_says_it_is_a_second_schedulers():
    """Its comment told users to pass it to their default kube-scheduler, whose pods its
    only profile (cassini-scheduler) never sees."""
    (cfg,) = docs("scheduler-config.yaml")
    names = {p["schedulerName"] for p in cfg["profiles"]}
    text = comment("scheduler-config.yaml")
    if "default-scheduler" not in names:
        assert names == {"cassini-scheduler"} and "second scheduler" in text
        assert "default scheduler instead, pass it with --config" not in text
