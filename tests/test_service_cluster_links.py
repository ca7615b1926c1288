"""The service's cluster file and the links a job crosses: a key given twice anywhere in
the cluster file is refused with its line and column (the shared reader of
:mod:`cassini.files`, as sim configs); a job on one node crosses no link (as the
simulator's one-server job: a data-parallel job within one node sends nothing over the
network), so it is nobody's partner for time-shifts and weighs on no link in the
extender's scores; a job whose nodes have no links is told so, not that it runs on no node
of the cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from helpers.service_util import HALF, MOST, call, ok_json, start

from cassini.cli import main as cassini_main
from cassini.errors import InputError
from cassini.service.cluster import load_cluster_file, read_cluster
from cassini.service.scoring import State
from cassini.service.shifts import compute_shifts

# -- 1. a key given twice in the cluster file ------------------------------------------------

LINKS = "links: [{id: a, capacity_bps: 1.0e+9}, {id: b, capacity_bps: 1.0e+9}]\n"


@pytest.mark.parametrize(
    "name, text, key, line, column",
    [
        # the report's case: g0 listed twice, the second silently won
        ("c.yaml", LINKS + "nodes: {g0: [a], g1: [a], g0: [b]}\n", "g0", 2, 27),
        # block style, a top-level key twice
        ("c.yaml", LINKS + "nodes:\n  g0: [a]\nnodes:\n  g1: [b]\n", "nodes", 4, 1),
        # inside a link and inside a job
        ("c.yaml", "links: [{id: a, id: b, capacity_bps: 1.0e+9}]\nnodes: {}\n", "id", 1, 17),
        ("c.yaml", LINKS + "nodes: {g0: [a]}\njobs:\n  - {id: j, model: bert, nodes: [g0],"
         " model: vgg16}\n", "model", 4, 39),
        # a JSON file (JSON is YAML to the cluster loader): the same line and column
        ("c.json", '{"links": [], "nodes": {"g0": [],\n "g0": []}}\n', "g0", 2, 2),
    ],
)
def test_a_key_given_twice_is_refused_with_its_line_and_column(
    tmp_path, name, text, key, line, column
):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as e:
        load_cluster_file(path)
    message = str(e.value)
    assert str(path) in message
    assert f"duplicate key {key!r} (line {line}, column {column})" in message, message


def test_cluster_show_exits_2_on_a_node_listed_twice(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(LINKS + "nodes: {g0: [a], g1: [a], g0: [b]}\n")
    assert cassini_main(["cluster", "show", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "duplicate key 'g0' (line 2, column 27)" in err[0], err


def test_serve_exits_2_on_a_node_listed_twice(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(LINKS + "nodes: {g0: [a], g1: [a], g0: [b]}\n")
    r = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "serve", "--port", "0", "--cluster", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cassini: error: --cluster {path}"), lines
    assert "duplicate key 'g0' (line 2, column 27)" in lines[0]


# -- 2. and 3. the links a job crosses -------------------------------------------------------


def example(a_nodes=("g0", "g2")):
    """up and fat, 1 Gb/s each; g0 sends through up, g1 through up and fat, g2 through
    nothing.  ``a`` (MOST) runs on g0 and g2 (it crosses up), ``b`` (HALF) on g1 alone,
    ``c`` on g2 alone."""
    return {
        "links": [{"id": "up", "capacity_bps": 1e9}, {"id": "fat", "capacity_bps": 1e9}],
        "nodes": {"g0": ["up"], "g1": ["up", "fat"], "g2": []},
        "jobs": [
            {"id": "a", "iteration_time_s": 0.1, "phases": MOST, "nodes": list(a_nodes)},
            {"id": "b", "iteration_time_s": 0.1, "phases": HALF, "nodes": ["g1"]},
            {"id": "c", "iteration_time_s": 0.1, "phases": HALF, "nodes": ["g2"]},
        ],
    }


def state_of(doc):
    cluster, jobs = read_cluster(doc)
    return State(1, cluster, {j.job_id: j for j in jobs})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("links") / "cluster.yaml"
    path.write_text(yaml.safe_dump(example()))
    srv = start(cluster_file=str(path), workers=1, quiet=True)
    try:
        yield srv
    finally:
        srv.stop()


def shift(port, job_id):
    return ok_json(call(port, "GET", f"/v1/jobs/{job_id}/time_shift"))


def test_a_job_on_a_node_without_links_is_told_so(served):
    got = shift(served.port, "c")
    assert got["shift"] is False
    assert got["reason"] == "its nodes have no links: it shares no link", got


def test_why_a_job_crosses_no_link():
    doc = example()
    doc["jobs"] += [
        {"id": "nowhere", "iteration_time_s": 0.1, "phases": HALF, "nodes": []},
        {"id": "bare2", "iteration_time_s": 0.1, "phases": HALF, "nodes": ["g2", "g3"]},
    ]
    doc["nodes"]["g3"] = []
    state = state_of(doc)
    # a node the cluster no longer knows (a reload dropped it): the job runs on no node of it
    state.cluster.nodes.pop("g3")
    got = compute_shifts(state)
    assert got["nowhere"].reason == "runs on no node of the cluster"
    assert got["c"].reason == "its nodes have no links: it shares no link"
    assert got["bare2"].reason == "its nodes have no links: it shares no link"
    assert got["b"].reason == "runs on one node: it sends nothing over the network"
    assert not any(s.shift for s in got.values())


def test_a_job_on_one_node_crosses_no_link():
    state = state_of(example())
    assert state.job_links(state.jobs["b"]) == ()
    assert state.job_links(state.jobs["c"]) == ()
    assert state.job_links(state.jobs["a"]) == ("up",)


def test_a_job_on_one_node_is_nobodys_time_shift_partner(served):
    # b on g1 alone sends nothing over the network: a shares up with nobody
    a, b = shift(served.port, "a"), shift(served.port, "b")
    assert a["shift"] is False and a["reason"] == "shares no link with another job", a
    assert b["shift"] is False
    assert b["reason"] == "runs on one node: it sends nothing over the network", b


def test_releasing_a_job_does_not_release_a_job_on_one_node(served):
    body = {"shift": False, "reason": "let go"}
    try:
        assert ok_json(call(served.port, "PUT", "/v1/jobs/a/time_shift", body))["released"]
        b = shift(served.port, "b")
        assert b["released"] is False and "released with its group" not in (b["reason"] or ""), b
    finally:
        job = example()["jobs"][0]
        assert call(served.port, "POST", "/v1/jobs", job)[0] == 200  # a registered again


def prioritize(port, annotations, nodes):
    pod = {"metadata": {"name": "p-0", "annotations": annotations}}
    out = ok_json(call(port, "POST", "/k8s/v1/prioritize", {"Pod": pod, "NodeNames": nodes}))
    return {h["Host"]: h["Score"] for h in out}


NEW = {"cassini.io/job": "new", "cassini.io/profile": json.dumps(
    {"iteration_time_s": 0.1, "phases": HALF})}


def test_prioritize_does_not_count_a_job_on_one_node_on_its_links(served):
    """g0 and g1 both send through up, where a runs, and no running job crosses fat: the
    same score.  b, on g1 alone, used to be counted on up and fat, and fat, shared with
    b only, raised g1's mean above g0's (g0 1, g1 5; now 6 and 6)."""
    got = prioritize(served.port, NEW, ["g0", "g1", "g2"])
    assert got["g0"] == got["g1"] < 10 and got["g2"] == 10, got


def test_prioritize_with_jobs_on_one_node_only(tmp_path):
    """The report's example: a on g0 alone, b on g1 alone: no running job crosses a link,
    so every node is as good as an idle one (it was g0 5, g1 7)."""
    doc = example(a_nodes=("g0",))
    doc["jobs"][0]["phases"] = HALF
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    srv = start(cluster_file=str(path), workers=1, quiet=True)
    try:
        assert prioritize(srv.port, NEW, ["g0", "g1", "g2"]) == {"g0": 10, "g1": 10, "g2": 10}
    finally:
        srv.stop()


def test_prioritize_a_pod_that_keeps_its_job_on_one_node(served):
    """The pod of b (on g1): on g1 the job stays on one node and crosses no link, so a on
    up does not matter (it scored 6 for meeting a there); on g0 the job would span g0 and
    g1, and meets a on up."""
    got = prioritize(served.port, {"cassini.io/job": "b"}, ["g0", "g1"])
    assert got["g1"] == 10 and got["g0"] < 10, got
