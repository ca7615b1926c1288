"""Options of ``cassini serve`` as the app takes them (:class:`ServiceConfig`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cassini.circle import n_angles
from cassini.files import MAX_WORKERS


@dataclass(frozen=True)
class ServiceConfig:
    """Options of the service: body limit (bytes), time limits (seconds), workers, the
    cluster file, the filter's minimum compatibility score in [0, 1], precision of the
    extender's and the time-shifts' computations (degrees); the state file
    (``:memory:``: none), who may write (a token file, or ``insecure_writes``; neither:
    writes are refused), the registry's size limit, the per-client write rate (writes
    per second, 0: unlimited) and the audit log (None: the service's log)."""

    max_body_bytes: int = 1 << 20
    timeout_s: float = 30.0
    read_timeout_s: float = 30.0
    workers: int | None = None
    cluster_file: str | None = None
    min_score: float = 0.0
    precision_deg: float = 5.0
    quiet: bool = False
    state_path: str = ":memory:"
    token_file: str | None = None
    insecure_writes: bool = False
    max_jobs: int = 10_000
    write_rate_per_s: float = 50.0
    audit_log: str | None = None
    token_review_url: str | None = None
    token_review_users: tuple[str, ...] = ()
    token_review_ca: str | None = None
    token_review_own_token: str | None = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    kube: Any = None  # cassini.service.kube.sync.KubeOptions: the cluster from the API server

    def __post_init__(self) -> None:
        if self.kube is not None and self.cluster_file is not None:
            raise ValueError("give a cluster file or kube, not both")
        if self.token_review_url and not self.token_review_users:
            raise ValueError("token_review_url needs token_review_users (who may write)")
        if not (isinstance(self.max_jobs, int) and self.max_jobs > 0):
            raise ValueError(f"max_jobs must be an int > 0, got {self.max_jobs!r}")
        if not (self.write_rate_per_s >= 0 and math.isfinite(self.write_rate_per_s)):
            raise ValueError(f"write_rate_per_s must be >= 0, got {self.write_rate_per_s!r}")
        if not (isinstance(self.max_body_bytes, int) and self.max_body_bytes > 0):
            raise ValueError(f"max_body_bytes must be an int > 0, got {self.max_body_bytes!r}")
        for name in ("timeout_s", "read_timeout_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.workers is not None and not (
            isinstance(self.workers, int) and 1 <= self.workers <= MAX_WORKERS
        ):
            raise ValueError(f"workers must be an int in 1..{MAX_WORKERS}, got {self.workers!r}")
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"min_score must be in [0, 1], got {self.min_score!r}")
        n_angles(self.precision_deg)
