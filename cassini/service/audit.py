"""The audit trail of writes: one JSON line per accepted or refused write (time, client
address, token name, method, path, job, outcome, status), appended to ``--audit-log``
(default: the service's log on standard error) and counted in ``/metrics``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class AuditEntry:
    """One write: ``time_s`` UNIX seconds; ``token`` the token's name (never the token);
    ``outcome`` accepted (2xx) or refused."""

    time_s: float
    client: str
    token: str | None
    method: str
    path: str
    job: str | None
    status: int

    @property
    def outcome(self) -> str:
        return "accepted" if 200 <= self.status < 300 else "refused"

    def to_json(self) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.time_s))
        return json.dumps(
            {
                "time": f"{stamp}.{int(self.time_s % 1 * 1000):03d}Z",
                "client": self.client,
                "token": self.token,
                "method": self.method,
                "path": self.path,
                "job": self.job,
                "outcome": self.outcome,
                "status": self.status,
            },
            separators=(",", ":"),
        )


class AuditLog:
    """Appends entries as JSON lines to ``path``, each line one ``write`` on an
    ``O_APPEND`` descriptor (lines never interleave); without a path, to ``log`` (the
    service's log, standard error)."""

    def __init__(self, path: str | None, log: Callable[[str], None]) -> None:
        self.path = path
        self._log = log
        self._fd: int | None = None
        if path is not None:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def append(self, entry: AuditEntry) -> None:
        if self._fd is None:
            self._log(entry.to_json())
        else:
            os.write(self._fd, (entry.to_json() + "\n").encode("utf-8"))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
