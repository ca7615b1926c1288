"""Every key of an advice answer is described by the OpenAPI document: a real
``POST /v1/advise`` answer (and ``cassini advise --example``'s JSON) with a prediction
validates against ``Advice`` and ``CandidateResult`` closed (``additionalProperties``
false), so a program written from the contract learns ``shift``, ``predicted_gain``,
``predicted_iteration_s``, ``shift_reasons``, ``agent_period_s`` and ``shift_threshold``;
the prediction's fields are optional (absent without a prediction), not required."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import test_service_openapi
from helpers.service_util import call, ok_json

from cassini import api
from cassini.cli import main

CLOSED = ("Advice", "CandidateResult")
TOP = {"shift", "predicted_gain"}
PER_CANDIDATE = {
    "predicted_iteration_s", "predicted_gain", "shift", "shift_reasons", "agent_period_s",
    "shift_threshold",
}


served = test_service_openapi.served  # the fixture: one server on a two-node cluster


@pytest.fixture(scope="module")
def served_answer(served):
    return ok_json(call(served.port, "POST", "/v1/advise", api.example("advise")))


def documents(served):
    """The served document and its copy in docs/ (the one a client is written from)."""
    return {
        "served": ok_json(call(served.port, "GET", "/openapi.json")),
        "docs": json.loads(test_service_openapi.DOC.read_text()),
    }


def closed_advice(document):
    """The ``Advice`` schema with Advice and CandidateResult allowing no key they do not
    describe (as in test_service_openapi.schema_of: a $ref into the components)."""
    components = copy.deepcopy(document["components"])
    for name in CLOSED:
        components["schemas"][name]["additionalProperties"] = False
    return {"$ref": "#/components/schemas/Advice", "components": components}


def assert_has_prediction(answer):
    """The answer carries a prediction (the test would prove nothing otherwise)."""
    assert set(answer) >= TOP, sorted(answer)
    best = answer["candidates"][0]
    assert best["id"] == answer["best"] and set(best) >= PER_CANDIDATE, sorted(best)
    assert any(PER_CANDIDATE.isdisjoint(c) for c in answer["candidates"][1:])


def test_a_served_advice_with_a_prediction_has_every_key_described(served, served_answer):
    assert_has_prediction(served_answer)
    for where, document in documents(served).items():
        schema = closed_advice(document)
        try:
            jsonschema.validate(served_answer, schema)
        except jsonschema.ValidationError as e:
            pytest.fail(f"{where} document: {e.message} at {list(e.absolute_path)}")
        # and the closed schema is strict: a key it does not describe fails, at either level
        top = copy.deepcopy(served_answer)
        top["held"] = {}
        inner = copy.deepcopy(served_answer)
        inner["candidates"][0]["held"] = {}
        for answer in (top, inner):
            with pytest.raises(jsonschema.ValidationError, match="held"):
                jsonschema.validate(answer, schema)


def test_the_cli_advice_with_a_prediction_has_every_key_described(served, capsys):
    assert main(["advise", "--example"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert_has_prediction(answer)
    jsonschema.validate(answer, closed_advice(documents(served)["docs"]))


def test_the_prediction_fields_are_optional_and_typed(served):
    schemas = documents(served)["docs"]["components"]["schemas"]
    for name, keys in (("Advice", TOP), ("CandidateResult", PER_CANDIDATE)):
        assert keys <= set(schemas[name]["properties"]), name
        assert keys.isdisjoint(schemas[name].get("required", [])), name
    per_job = schemas["CandidateResult"]["properties"]["predicted_iteration_s"]
    iteration = schemas[per_job["additionalProperties"]["$ref"].rsplit("/", 1)[1]]
    assert set(iteration["required"]) == {"shifted", "same_start", "advised"}
    for prop in ("predicted_iteration_s", "agent_period_s"):
        assert "seconds" in schemas["CandidateResult"]["properties"][prop]["description"]
