"""Kubernetes ServiceAccount tokens as writer tokens (``--token-review URL``): a bearer
token that is not in ``--token-file`` is sent to the API server's TokenReview API
(``POST {URL}`` = ``https://APISERVER/apis/authentication.k8s.io/v1/tokenreviews``); if
the API server says it is authenticated and its user is one of ``--token-review-user``
(e.g. ``system:serviceaccount:training:launcher``), the write goes ahead under that name.

The service calls the API server with its own ServiceAccount token (the file
``/var/run/secrets/kubernetes.io/serviceaccount/token`` by default) and needs RBAC to
create TokenReviews: bind its ServiceAccount to the ``system:auth-delegator`` ClusterRole
(or a ClusterRole with ``create`` on ``tokenreviews`` in ``authentication.k8s.io``).
Answers are cached per token (by its SHA-256 digest) for ``cache_s`` seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass
class TokenReviewer:
    """Asks the API server at ``url`` who a token belongs to; only ``allowed`` users may
    write.  ``own_token_file``: the service's own credentials; ``ca_file``: the API
    server's CA (None: the system's)."""

    url: str
    allowed: frozenset[str]
    own_token_file: str | None = str(SERVICE_ACCOUNT_DIR / "token")
    ca_file: str | None = None
    timeout_s: float = 5.0
    cache_s: float = 60.0
    _cache: dict[bytes, tuple[str | None, float]] = field(default_factory=dict)

    async def user_of(self, token: str) -> str | None:
        """The allowed user the token authenticates as, else None."""
        key = hashlib.sha256(token.encode("utf-8")).digest()
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        user = await asyncio.to_thread(self._review, token)
        allowed = user if user in self.allowed else None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (allowed, now + self.cache_s)
        return allowed

    def _review(self, token: str) -> str | None:
        body = json.dumps({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            if self.own_token_file:
                own = Path(self.own_token_file).read_text(encoding="utf-8").strip()
                headers["Authorization"] = f"Bearer {own}"
            request = urllib.request.Request(self.url, body, headers, method="POST")
            context = None
            if self.url.startswith("https"):
                context = ssl.create_default_context(cafile=self.ca_file)
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=context) as r:
                answer = json.loads(r.read().decode("utf-8"))
        except (urllib.error.URLError, OSError, ValueError, ssl.SSLError):
            return None  # cannot tell: refuse (the audit records the 401)
        status = answer.get("status") or {}
        if status.get("authenticated") is not True:
            return None
        user = (status.get("user") or {}).get("username")
        return user if isinstance(user, str) else None
