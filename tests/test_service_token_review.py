"""``--token-review``: a Kubernetes ServiceAccount token is checked with the TokenReview
API.  No API server runs here, so the API server is a stub on loopback that answers
TokenReviews the way kube-apiserver does (``status.authenticated``, ``status.user``)."""

from __future__ import annotations

import json

import pytest
from helpers.fake_http import JsonHandler, serving
from helpers.service_util import HALF, call, ok_json, start

OWN = "the-service-own-serviceaccount-token"
KNOWN = {
    "launcher-sa-token-0123456789": "system:serviceaccount:training:launcher",
    "other-sa-token-0123456789ab": "system:serviceaccount:default:default",
}


class _ApiServer(JsonHandler):
    reviews: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != f"Bearer {OWN}":
            self.send_response(401)
            self.end_headers()
            return
        type(self).reviews.append(review)
        user = KNOWN.get(review["spec"]["token"])
        status = {"authenticated": True, "user": {"username": user}} if user else {}
        self.send_json(201, {**review, "status": status})


@pytest.fixture
def served(tmp_path):
    own = tmp_path / "token"
    own.write_text(OWN + "\n")
    audit = tmp_path / "audit.jsonl"
    with serving(_ApiServer) as api:
        url = f"http://127.0.0.1:{api.server_address[1]}/apis/authentication.k8s.io/v1/tokenreviews"
        srv = start(token_review_url=url, insecure_writes=False, audit_log=str(audit),
                    token_review_users=("system:serviceaccount:training:launcher",),
                    token_review_own_token=str(own), workers=1, quiet=True)
        try:
            yield srv, audit
        finally:
            srv.stop()


def test_a_reviewed_service_account_of_an_allowed_user_may_write(served):
    srv, audit = served
    job = {"id": "k", "iteration_time_s": 0.1, "phases": HALF}
    launcher, other = list(KNOWN)
    assert call(srv.port, "POST", "/v1/jobs", job)[0] == 401
    assert call(srv.port, "POST", "/v1/jobs", job,
                headers={"Authorization": "Bearer not-a-k8s-token-at-all"})[0] == 401
    # authenticated, but not a user allowed to write
    assert call(srv.port, "POST", "/v1/jobs", job,
                headers={"Authorization": f"Bearer {other}"})[0] == 401
    for status in (201, 200):  # the second answer comes from the cache
        ok_json(call(srv.port, "POST", "/v1/jobs", job,
                     headers={"Authorization": f"Bearer {launcher}"}), status)
    assert [r["spec"]["token"] for r in _ApiServer.reviews].count(launcher) == 1
    assert all(r["kind"] == "TokenReview" for r in _ApiServer.reviews)
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert lines[-1]["token"] == "system:serviceaccount:training:launcher"
    assert launcher not in audit.read_text()
