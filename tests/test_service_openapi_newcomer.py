"""The OpenAPI document against what the server does, from a newcomer's review: a
``shift`` of the wrong type is a 400 like any other type error, every route and method
the app answers (HEAD with each GET) is an operation, every header the server sends on
a 200/304/401/405/429/503 is declared, a -0.0 a PUT stores is 0.0, and a PUT on a member
of a released group is kept but answered as released.  Real HTTP on loopback."""

from __future__ import annotations

import json
import math

import pytest
from helpers.service_util import HALF, call, error_of, ok_json, pair, start, two_node_cluster

from cassini.service.app import create_app
from cassini.service.contract import ENDPOINTS

TOKEN = "newcomer-token-0123456789abcdef"
#: Headers of the transport, not of the API: uvicorn's, and the body's length and type
#: (OpenAPI ignores a declared Content-Type).
TRANSPORT = {"content-type", "content-length", "date", "server", "transfer-encoding"}
TIME_SHIFT = "/v1/jobs/{job_id}/time_shift"
WRITES = [  # (method, path template, body)
    ("POST", "/v1/jobs", {"id": "w", "iteration_time_s": 0.1, "phases": HALF}),
    ("PUT", TIME_SHIFT, {"shift_s": 0.01, "period_s": 0.1}),
    ("DELETE", "/v1/jobs/{job_id}", None),
]


def cluster_file(tmp_path):
    doc = two_node_cluster()
    doc["jobs"] += [  # a and b share l3: one held group
        {"id": "a", "iteration_time_s": 0.1, "phases": HALF, "nodes": pair("n3")},
        {"id": "b", "iteration_time_s": 0.1, "phases": HALF, "nodes": pair("n3")},
    ]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    srv = start(cluster_file=cluster_file(tmp_path_factory.mktemp("oan")), workers=1,
                quiet=True)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def document(served):
    return ok_json(call(served.port, "GET", "/openapi.json"))


def concrete(path: str, job_id: str = "half") -> str:
    return path.replace("{job_id}", job_id)


def undeclared(document, path, method, status, headers) -> set[str]:
    """The headers of an answer that its operation's response for ``status`` does not
    declare (transport headers aside)."""
    response = document["paths"][path][method.lower()]["responses"][str(status)]
    declared = {h.lower() for h in response.get("headers", {})}
    return {k.lower() for k in headers} - TRANSPORT - declared


# -- 1. a shift of the wrong type is a 400 ---------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"shift": "false"},
        {"shift": 1, "shift_s": 0.01, "period_s": 0.1},
        {"shift": 0},
        {"shift": None},
        {"shift": [True]},
    ],
)
def test_a_put_shift_of_the_wrong_type_is_a_400_naming_it(served, body):
    """The schema types ``shift`` as a boolean: a wrong type breaks it (400, as a string
    ``shift_s`` does), not a rule stated in words (422)."""
    result = call(served.port, "PUT", "/v1/jobs/half/time_shift", body)
    assert result[0] == 400, result
    err = error_of(result)
    assert err["field"] == "shift"
    assert err["message"].startswith("must be true (hold) or false (release), got ")
    assert "\n" not in err["message"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"shift_s": 0.2, "period_s": 0.1}, "shift_s"),  # shift_s not below period_s
        ({"shift_s": 0.01, "period_s": 0.1, "epoch_s": 9e9}, "epoch_s"),  # > a day ahead
    ],
)
def test_the_rules_stated_in_words_stay_422(served, body, field):
    result = call(served.port, "PUT", "/v1/jobs/half/time_shift", body)
    assert result[0] == 422, result
    assert error_of(result)["field"] == field
    other = call(served.port, "PUT", "/v1/jobs/half/time_shift", {"shift_s": "x", "period_s": 1})
    assert other[0] == 400 and error_of(other)["field"] == "shift_s"


# -- 3. -0.0 is stored as 0.0 -----------------------------------------------------------------


def test_a_negative_zero_a_put_stores_is_zero(served):
    raw = b'{"shift_s": -0.0, "period_s": 0.1, "epoch_s": -0.0}'
    for status, _, body in (
        call(served.port, "PUT", "/v1/jobs/most/time_shift", raw),
        call(served.port, "GET", "/v1/jobs/most/time_shift"),
    ):
        assert status == 200, body
        assert b"-0.0" not in body, body
        answer = json.loads(body)
        for name in ("shift_s", "epoch_s"):
            assert answer[name] == 0.0 and math.copysign(1.0, answer[name]) == 1.0, answer


def test_a_negative_zero_in_any_body_is_stored_as_zero(served):
    """Not the PUT alone: every JSON body is read with -0.0 as 0.0
    (cassini.files.loads_json), a registration's phase start included."""
    raw = (
        b'{"id": "negz", "iteration_time_s": 0.1, "phases": '
        b'[{"start_s": -0.0, "duration_s": 0.05, "rate_bps": 1e9}]}'
    )
    for status, _, body in (
        call(served.port, "POST", "/v1/jobs", raw),
        call(served.port, "GET", "/v1/jobs/negz"),
    ):
        assert status in (200, 201), body
        assert b"-0.0" not in body, body


# -- released group: a PUT on a member -------------------------------------------------------


def test_a_put_on_a_member_of_a_released_group_is_kept_and_answered_released(served):
    """200: the shift is kept, but the answer is the group's release (shift false, the
    reason naming the released job) until the group is held again; then it applies."""
    port = served.port
    release = {"shift": False, "reason": "missed its slot"}
    ok_json(call(port, "PUT", "/v1/jobs/a/time_shift", release))
    out = ok_json(call(port, "PUT", "/v1/jobs/b/time_shift", {"shift_s": 0.02, "period_s": 0.1}))
    assert out["shift"] is False and out["released"] is True, out
    assert out["reason"] == "released with its group: a runs free (missed its slot)", out
    ok_json(call(port, "PUT", "/v1/jobs/a/time_shift", {"shift_s": 0.0, "period_s": 0.1}))
    held = ok_json(call(port, "GET", "/v1/jobs/b/time_shift"))
    assert held["shift"] is True and held["shift_s"] == 0.02 and held["released"] is False


# -- 2. every route and method, every header ------------------------------------------------


def test_every_route_and_method_the_app_answers_is_an_operation(document):
    """The app's route table (Starlette adds HEAD to a GET route) against the document,
    both ways: the document's operations are exactly the routed methods."""
    app = create_app()
    routed = {(r.name, m) for r in app.routes for m in r.methods}
    assert {name for name, _ in routed} == {ep.template for ep in ENDPOINTS}
    methods = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
    documented = {
        (path, m.upper()) for path, item in document["paths"].items() for m in item if m in methods
    }
    assert documented == routed
    assert sum(1 for _, m in documented if m == "HEAD") == 7
    ids = [op["operationId"] for item in document["paths"].values()
           for m, op in item.items() if m in methods]
    assert len(ids) == len(set(ids))


def test_head_and_405_answer_as_the_document_says(served, document):
    """HEAD answers where GET does, with its status and headers and no body; a method the
    path does not take is a 405 whose Allow names exactly the documented methods."""
    for path, item in document["paths"].items():
        if "head" in item:
            get = call(served.port, "GET", concrete(path))
            head = call(served.port, "HEAD", concrete(path))
            assert head[0] == get[0] == 200 and head[2] == b"", (path, head)
            assert undeclared(document, path, "HEAD", 200, head[1]) == set(), path
            assert {k.lower() for k in head[1]} == {k.lower() for k in get[1]}, path
        status, headers, _ = call(served.port, "PATCH", concrete(path), {})
        assert status == 405, (path, status)
        methods = {m.upper() for m in item if m != "parameters"}
        assert set(headers["Allow"].split(", ")) == methods, path
        for method in methods:
            assert undeclared(document, path, method, 405, headers) == set(), (path, method)


def test_the_time_shift_etag_and_if_none_match_are_declared(served, document):
    op = document["paths"][TIME_SHIFT]
    for method in ("GET", "HEAD"):
        params = {(p["name"], p["in"]) for p in op[method.lower()]["parameters"]}
        assert ("If-None-Match", "header") in params, method
        status, headers, _ = call(served.port, method, "/v1/jobs/half/time_shift")
        assert status == 200 and headers["ETag"], method
        assert undeclared(document, TIME_SHIFT, method, 200, headers) == set(), method
        assert op[method.lower()]["responses"]["200"]["headers"]["ETag"]["required"] is True
        again = call(served.port, method, "/v1/jobs/half/time_shift",
                     headers={"If-None-Match": headers["ETag"]})
        assert again[0] == 304, method
        assert undeclared(document, TIME_SHIFT, method, 304, again[1]) == set(), method


def test_the_draining_503_headers_are_declared(served, document):
    """While draining every request is a 503 with Retry-After and Connection: close."""
    service = served.service
    service.drain.draining = True
    try:
        for path, item in document["paths"].items():
            for method in (m.upper() for m in item if m != "parameters"):
                status, headers, _ = call(served.port, method, concrete(path))
                assert status == 503 and headers["Retry-After"] == "1", (path, method)
                assert undeclared(document, path, method, 503, headers) == set(), (path, method)
    finally:
        service.drain.draining = False


def test_the_401_and_429_headers_are_declared(tmp_path, document):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} newcomer\n")
    srv = start(cluster_file=cluster_file(tmp_path), workers=1, quiet=True,
                token_file=str(tokens), insecure_writes=False, write_rate_per_s=0.5)
    try:
        for method, path, body in WRITES:
            status, headers, _ = call(srv.port, method, concrete(path), body)
            assert status == 401 and headers["WWW-Authenticate"], (method, path)
            assert undeclared(document, path, method, 401, headers) == set(), (method, path)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        statuses = []
        for _ in range(3):  # a burst of twice 0.5/s: the second write is over the rate
            method, path, body = WRITES[1]
            status, headers, _ = call(srv.port, method, concrete(path), body, headers=auth)
            statuses.append(status)
        assert statuses[0] == 200 and statuses[-1] == 429, statuses
        assert int(headers["Retry-After"]) >= 1
        assert undeclared(document, path, method, 429, headers) == set()
    finally:
        srv.stop()
