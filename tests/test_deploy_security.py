"""deploy/: the service's state, writer tokens and the example job's one write are wired
as the service expects them (the manifests parse into valid ``cassini serve`` options)."""

from __future__ import annotations

from pathlib import Path

import yaml

from cassini.cli import build_parser

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def docs(name):
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]


def one(name, kind):
    (found,) = [d for d in docs(name) if d["kind"] == kind]
    return found


def mounted(spec, container, path):
    """The volume of ``spec`` mounted in ``container`` at a directory above ``path``."""
    for m in container["volumeMounts"]:
        if path.startswith(m["mountPath"].rstrip("/") + "/"):
            return next(v for v in spec["volumes"] if v["name"] == m["name"])
    raise AssertionError(f"{path} is on no mounted volume")


def test_service_keeps_state_on_a_volume_and_reads_tokens_from_a_secret():
    dep = one("cassini.yaml", "Deployment")
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = build_parser().parse_args(container["command"][1:])
    assert not args.insecure_writes
    tokens = mounted(spec, container, args.token_file)
    assert tokens["secret"]["secretName"] == "cassini-tokens"
    state = mounted(spec, container, args.state)
    claim = state["persistentVolumeClaim"]["claimName"]
    assert one("cassini.yaml", "PersistentVolumeClaim")["metadata"]["name"] == claim
    # one writer on the SQLite file, and time to drain on SIGTERM
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    assert spec["terminationGracePeriodSeconds"] > args.timeout_s


def test_example_job_writes_with_a_token_read_from_a_secret_file():
    pod = one("example-job.yaml", "Pod")
    (init,) = pod["spec"]["initContainers"]
    script = init["command"][-1]
    assert "POST" in script and "/v1/jobs" in script
    assert "Authorization: Bearer $(cat /var/run/cassini/token)" in script
    volume = mounted(pod["spec"], init, "/var/run/cassini/token")
    assert "secretName" in volume["secret"]
    # the training container only reads (no token) and re-reads its shift
    (train,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in train["env"]}
    assert "CASSINI_REFRESH_ITERATIONS" in env and "volumeMounts" not in train
