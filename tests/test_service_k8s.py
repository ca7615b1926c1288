"""The kube-scheduler extender (``/k8s/v1/prioritize``, ``/k8s/v1/filter``) over real HTTP,
with requests shaped as kube-scheduler's Go encoder writes them."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers.service_util import HALF, call, error_of, ok_json, start, two_node_cluster


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("k8s") / "cluster.yaml"
    path.write_text(yaml.safe_dump(two_node_cluster()))
    srv = start(cluster_file=str(path), workers=1, quiet=True, min_score=0.9)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def bare():
    srv = start(workers=1, quiet=True)  # no --cluster
    try:
        yield srv
    finally:
        srv.stop()


def pod(annotations=None, name="p-0"):
    meta = {"name": name, "namespace": "default", "uid": "u-1"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "x"}]}}


PROFILE = json.dumps({"iteration_time_s": 0.1, "phases": HALF})


def args_names(p, names, lower=False):
    """ExtenderArgs of a nodeCacheCapable extender (NodeNames), as Go marshals it."""
    if lower:
        return {"pod": p, "nodes": None, "nodenames": names}
    return {"Pod": p, "Nodes": None, "NodeNames": names}


def args_nodes(p, names):
    """ExtenderArgs of an extender that is not nodeCacheCapable (full Node objects)."""
    items = [{"metadata": {"name": n, "labels": {"zone": "a"}}, "status": {}} for n in names]
    return {"Pod": p, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}


def scores(result):
    out = ok_json(result)
    assert all(set(h) == {"Host", "Score"} for h in out)
    assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in out)
    return {h["Host"]: h["Score"] for h in out}


@pytest.mark.parametrize("lower", [False, True])
def test_prioritize_compatible_node_scores_above_incompatible(served, lower):
    body = args_names(pod({"cassini.io/profile": PROFILE, "cassini.io/job": "new"}), None, lower)
    body["nodenames" if lower else "NodeNames"] = ["n1", "n2", "n3"]
    got = scores(call(served.port, "POST", "/k8s/v1/prioritize", body))
    # n1: beside a job that interleaves perfectly; n2: beside one that cannot; n3: idle
    assert got["n1"] == 10 and got["n3"] == 10
    assert got["n2"] < got["n1"]
    assert list(got) == ["n1", "n2", "n3"]


def test_prioritize_with_full_node_objects(served):
    p = pod({"cassini.io/profile": PROFILE})
    got = scores(call(served.port, "POST", "/k8s/v1/prioritize", args_nodes(p, ["n2", "n1"])))
    assert got["n1"] == 10 and got["n2"] < 10


def test_prioritize_mixed_case_field_names(served):
    p = pod({"cassini.io/profile": PROFILE})
    body = {"POD": p, "nodeNames": ["n1", "n2"]}
    got = scores(call(served.port, "POST", "/k8s/v1/prioritize", body))
    assert got["n1"] > got["n2"]


def test_model_annotation_uses_the_library(served):
    p = pod({"cassini.io/model": "vgg16"})
    got = scores(call(served.port, "POST", "/k8s/v1/prioritize", args_names(p, ["n1", "n3"])))
    assert set(got) == {"n1", "n3"} and got["n3"] == 10


def test_registered_job_profile_is_used(served):
    # the pod names a running job and carries no profile: the job's registered profile
    p = pod({"cassini.io/job": "half"})
    got = scores(call(served.port, "POST", "/k8s/v1/prioritize", args_names(p, ["n1", "n2"])))
    # on n1 the job meets only itself (score 1.0); on n2 it meets "most"
    assert got["n1"] == 10 and got["n2"] < 10


@pytest.mark.parametrize("annotations", [None, {}, {"other.io/x": "y"}, {"cassini.io/job": "?"}])
def test_pod_without_cassini_annotations_scores_neutral(served, annotations):
    body = args_names(pod(annotations), ["n1", "n2", "n3", "unknown"])
    got = scores(call(served.port, "POST", "/k8s/v1/prioritize", body))
    assert len(set(got.values())) == 1 and got["n1"] == 5
    out = ok_json(call(served.port, "POST", "/k8s/v1/filter", body))
    assert out["NodeNames"] == ["n1", "n2", "n3", "unknown"] and out["FailedNodes"] == {}


def test_server_without_cluster_scores_neutral(bare):
    body = args_names(pod({"cassini.io/profile": PROFILE}), ["a", "b"])
    assert scores(call(bare.port, "POST", "/k8s/v1/prioritize", body)) == {"a": 5, "b": 5}
    out = ok_json(call(bare.port, "POST", "/k8s/v1/filter", body))
    assert out["NodeNames"] == ["a", "b"] and out["Error"] == ""


def test_unknown_node_scores_neutral(served):
    body = args_names(pod({"cassini.io/profile": PROFILE}), ["n1", "elsewhere"])
    got = scores(call(served.port, "POST", "/k8s/v1/prioritize", body))
    assert got == {"n1": 10, "elsewhere": 5}


def test_filter_drops_nodes_below_min_score_with_node_names(served):
    body = args_names(pod({"cassini.io/profile": PROFILE}), ["n1", "n2", "n3", "elsewhere"])
    out = ok_json(call(served.port, "POST", "/k8s/v1/filter", body))
    assert set(out) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert out["Nodes"] is None and out["Error"] == ""
    assert out["NodeNames"] == ["n1", "n3", "elsewhere"]
    assert list(out["FailedNodes"]) == ["n2"] and "most" in out["FailedNodes"]["n2"]
    assert out["FailedAndUnresolvableNodes"] == {}


def test_filter_answers_node_objects_when_given_node_objects(served):
    body = args_nodes(pod({"cassini.io/profile": PROFILE}), ["n1", "n2"])
    out = ok_json(call(served.port, "POST", "/k8s/v1/filter", body))
    assert out["NodeNames"] is None
    # a subset of the supplied list, the objects as sent
    assert out["Nodes"]["items"] == [body["Nodes"]["items"][0]]
    assert list(out["FailedNodes"]) == ["n2"]


@pytest.mark.parametrize(
    "body, field",
    [
        (b'{"Pod": ', "body"),
        ({"NodeNames": ["n1"]}, "Pod"),
        ({"Pod": [], "NodeNames": ["n1"]}, "Pod"),
        (
            {"Pod": {"metadata": {"annotations": {"a": 1}}}, "NodeNames": []},
            'Pod.metadata.annotations["a"]',  # quoted as the cassini.io/* annotations are
        ),
        ({"Pod": {}, "NodeNames": "n1"}, "NodeNames"),
        ({"Pod": {}, "NodeNames": ["n1", 2]}, "NodeNames[1]"),
        ({"pod": {}, "nodes": {"items": [{"metadata": {}}]}}, "nodes.items[0].metadata.name"),
        # Nodes must be well formed even beside NodeNames (Go would not decode it either)
        ({"Pod": {}, "Nodes": {"items": [[None, None]]}, "NodeNames": ["n1"]}, "Nodes.items[0]"),
        (
            {"Pod": pod({"cassini.io/profile": "{oops"}), "NodeNames": ["n1"]},
            'Pod.metadata.annotations["cassini.io/profile"]',
        ),
        (
            {
                "Pod": pod(
                    {"cassini.io/profile": json.dumps({"iteration_time_s": -1, "phases": []})}
                ),
                "NodeNames": ["n1"],
            },
            'Pod.metadata.annotations["cassini.io/profile"].iteration_time_s',
        ),
        (
            {"Pod": pod({"cassini.io/model": "no-such-model"}), "NodeNames": ["n1"]},
            'Pod.metadata.annotations["cassini.io/model"]',
        ),
    ],
)
@pytest.mark.parametrize("verb", ["prioritize", "filter"])
def test_bad_requests_are_refused_naming_the_field(served, verb, body, field):
    """400 for a body that breaks the schema; 422 for an annotation the schema allows (a
    string) whose content the service cannot use (a profile that is not a JOB, a model not
    in the library)."""
    err = error_of(call(served.port, "POST", f"/k8s/v1/{verb}", body))
    assert err["code"] == (422 if "cassini.io/" in field else 400)
    assert err["field"] == field, err  # the exact field, not a prefix of it


def profile_pod(iteration_time_s=0.1, rate_bps=1e9):
    phase = {"start_s": 0.0, "duration_s": 0.05, "rate_bps": rate_bps}
    profile = json.dumps({"iteration_time_s": iteration_time_s, "phases": [phase]})
    return pod({"cassini.io/profile": profile})


ANNOTATION = 'Pod.metadata.annotations["cassini.io/profile"]'


@pytest.mark.parametrize(
    "p, field, words",
    [
        # 1 ns per iteration: every call ran past --timeout-s (504, worker killed)
        (profile_pod(0.05, 1e9), None, None),
        (profile_pod(iteration_time_s=1e-9), f"{ANNOTATION}.iteration_time_s", ">= 1e-06"),
        (profile_pod(iteration_time_s=1e9), f"{ANNOTATION}.iteration_time_s", "<= 604800"),
        # 1e300 b/s printed a 290-digit score
        (profile_pod(rate_bps=1e300), f"{ANNOTATION}.phases[0].rate_bps", "<= 1e+15"),
        # Python converts no integer of more than 4300 digits (a ValueError: a 500)
        (
            pod({"cassini.io/profile": '{"iteration_time_s": ' + "1" * 5000 + "}"}),
            ANNOTATION,
            "digits",
        ),
    ],
)
@pytest.mark.parametrize("verb", ["prioritize", "filter"])
def test_a_profile_annotation_has_the_bounds_of_a_request_body(served, verb, p, field, words):
    """models.MIN_TIME_S, MAX_TIME_S and MAX_RATE_BPS hold for the annotation too: a 422
    naming the annotation's field, at once, not a 504 or a 500."""
    result = call(served.port, "POST", f"/k8s/v1/{verb}", args_names(p, ["n1", "n2"]))
    if field is None:
        assert result[0] == 200, result
        return
    err = error_of(result)
    assert err["code"] == 422 and err["field"] == field and words in err["message"], err


def test_filter_at_min_score_0_drops_no_node(tmp_path):
    """A link the demand overfills twenty times scores 1 - 19 = -18; the node's
    compatibility is clamped to [0, 1], so the default --min-score 0 drops none."""
    hog = [{"start_s": 0.0, "duration_s": 0.1, "rate_bps": 1e10}]  # the whole iteration
    cluster = {
        "links": [{"id": "l1", "capacity_bps": 1e9}],
        "nodes": {"n1": ["l1"], "n1b": ["l1"]},  # a job on one node crosses no link
        "jobs": [{"id": "hog", "iteration_time_s": 0.1, "phases": hog, "nodes": ["n1", "n1b"]}],
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster))
    srv = start(cluster_file=str(path), workers=1, quiet=True)  # min_score 0
    try:
        p = pod({"cassini.io/profile": json.dumps({"iteration_time_s": 0.1, "phases": hog})})
        out = ok_json(call(srv.port, "POST", "/k8s/v1/filter", args_names(p, ["n1"])))
        assert out["NodeNames"] == ["n1"] and out["FailedNodes"] == {}, out
        assert scores(call(srv.port, "POST", "/k8s/v1/prioritize", args_names(p, ["n1"]))) == {
            "n1": 0
        }
    finally:
        srv.stop()


def test_extender_verbs_take_post_only(served):
    status, headers, _ = call(served.port, "GET", "/k8s/v1/prioritize")
    assert status == 405 and headers["Allow"] == "POST"
