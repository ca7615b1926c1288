"""The testbed config several root tests start from: two jobs (a on h1/h3, b on h2/h4) on
a 2-pair dumbbell with a 200 Mbit/s ``fair`` bottleneck and 1 Gbit/s access links."""

from __future__ import annotations

from typing import Any


def dumbbell_pair(job: dict[str, Any]) -> dict[str, Any]:
    """A runner config of jobs ``a`` and ``b``, each ``job`` (kind, sizes, iterations),
    scheme ``baseline``."""
    return {
        "topology": {
            "kind": "dumbbell",
            "pairs": 2,
            "bottleneck_bps": 200_000_000,
            "access_bps": 1_000_000_000,
            "fabric": "fair",
        },
        "jobs": [
            {"id": "a", "hosts": ["h1", "h3"], **job},
            {"id": "b", "hosts": ["h2", "h4"], **job},
        ],
        "schemes": ["baseline"],
    }
