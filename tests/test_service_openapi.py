"""The OpenAPI document: valid (openapi-spec-validator), the one in docs/ up to date, its
paths and methods exactly the served ones, and real requests and answers valid against
its schemas (jsonschema)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from helpers.service_util import HALF, call, ok_json, start, two_node_cluster
from openapi_spec_validator import validate

from cassini import api
from cassini.service import contract

DOC = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"
METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("oa") / "cluster.json"
    path.write_text(json.dumps(two_node_cluster()))
    srv = start(cluster_file=str(path), workers=1, quiet=True)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def document(served):
    return ok_json(call(served.port, "GET", "/openapi.json"))


def test_served_document_is_valid_openapi(document):
    validate(document)  # raises on an invalid document
    assert document["openapi"].startswith("3.1")


def test_docs_copy_is_the_served_document(document):
    assert json.loads(DOC.read_text()) == document, (
        "docs/openapi.json is stale: python -c 'from cassini.service.app import "
        'write_openapi; write_openapi("docs/openapi.json")\''
    )


def test_documented_routes_are_exactly_the_served_ones(served, document):
    documented = {
        (path, method.upper())
        for path, item in document["paths"].items()
        for method in item
        if method.upper() in METHODS
    }
    # every documented path answers its methods (not 404/405) and refuses the others (405)
    for path in document["paths"]:
        concrete = path.replace("{job_id}", "ghost")  # 404 for the job, not the path
        for method in METHODS:
            body = b"{}" if method in ("POST", "PUT", "PATCH") else None
            status, headers, _ = call(served.port, method, concrete, body)
            if (path, method) in documented:
                assert status != 405, (path, method, status)
                assert status != 404 or "{job_id}" in path, (path, method, status)
            else:
                assert status == 405, (path, method, status)
                allowed = {m for m in headers["Allow"].split(", ") if m != "HEAD"}
                assert allowed == {m for p, m in documented if p == path}
    # and the app routes nothing else
    served_paths = {ep.template for ep in contract.ENDPOINTS}
    assert served_paths == set(document["paths"])
    assert call(served.port, "GET", "/v1/nothing")[0] == 404


def test_every_operation_documents_the_draining_503(document):
    """A draining server answers 503 (Retry-After) to any request, on every path."""
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method.upper() not in METHODS:
                continue
            answer = op["responses"].get("503")
            assert answer is not None, (path, method)
            assert "shutting down" in answer["description"], (path, method)
            assert "replica" not in answer["description"]


def schema_of(document, name):
    return {"$ref": f"#/components/schemas/{name}", "components": document["components"]}


@pytest.mark.parametrize(
    "name, request_",
    [
        ("AdviseRequest", lambda: api.example("advise")),
        ("ScoreRequest", lambda: api.example("score")),
        ("JobRegistration", lambda: {"id": "j", "model": "bert", "nodes": ["n1"]}),
        ("TimeShiftPut", lambda: {"shift_s": 0.01, "period_s": 0.1}),
    ],
)
def test_examples_validate_against_the_request_schemas(document, name, request_):
    jsonschema.validate(request_(), schema_of(document, name))


def test_answers_validate_against_the_answer_schemas(served, document):
    port = served.port
    cases = [
        ("POST", "/v1/advise", api.example("advise"), "Advice"),
        ("POST", "/v1/score", api.example("score"), "ScoreAnswer"),
        ("GET", "/v1/jobs", None, "JobList"),
        ("GET", "/v1/jobs/half/time_shift", None, "TimeShift"),
        ("GET", "/healthz", None, "Health"),
        (
            "POST",
            "/k8s/v1/prioritize",
            {
                "Pod": {"metadata": {"annotations": {"cassini.io/model": "bert"}}},
                "NodeNames": ["n1"],
            },
            "HostPriorityList",
        ),
        ("POST", "/k8s/v1/filter", {"Pod": {}, "NodeNames": ["n1"]}, "ExtenderFilterResult"),
        ("POST", "/v1/advise", {"links": []}, "Error"),
    ]
    for method, path, body, name in cases:
        status, _, raw = call(port, method, path, body)
        jsonschema.validate(json.loads(raw), schema_of(document, name))
    job = {"id": "x", "iteration_time_s": 0.1, "phases": HALF, "nodes": ["n3"]}
    jsonschema.validate(
        ok_json(call(port, "POST", "/v1/jobs", job), 201), schema_of(document, "RunningJob")
    )
