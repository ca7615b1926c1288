"""A job as a workload or trace submits it (:class:`JobSpec`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class JobSpec:
    """A job as submitted: arrives at ``arrival_s`` seconds asking for ``gpus`` GPUs to
    train ``iterations`` iterations of ``model`` (a profile id).

    ``hosts``: where a trace recorded the job ran, ``(host name, GPUs on it)`` pairs
    (Philly's machines, Lingjun's worker host_ip, PAI's instance machines); empty when
    the trace records none.  Only the ``recorded`` scheduler uses it.  ``run_s``: the
    recorded run time (seconds) ``iterations`` were counted from (None when the trace gave
    a count, or none: drawn); a trace written out keeps it, not a count that holds for
    one profile on one cluster."""

    job_id: str
    arrival_s: float
    gpus: int
    iterations: int
    model: str
    hosts: tuple[tuple[str, int], ...] = ()
    run_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
