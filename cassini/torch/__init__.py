"""CASSINI inside a PyTorch training job.

Two lines in a training script hold its iterations to the time-shift the scheduler chose::

    shift = cassini.torch.TimeShift.from_env()   # after init_process_group
    ...
    for batch in loader:
        shift.wait()                               # top of every step
        ...

(or ``shift.attach(ddp_model)``, which waits in a forward pre-hook).  ``CommHookRecorder``
(:mod:`cassini.torch.recorder`) records a DDP job's gradient buckets and turns them into
a :class:`cassini.profile.JobProfile`.

Importing this package does not import torch; the classes import it when used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TimeShift", "TimeShiftError", "CommHookRecorder"]


def __getattr__(name: str) -> Any:
    if name in ("TimeShift", "TimeShiftError", "ShiftSettings", "ServiceUnavailable"):
        from cassini.torch import timeshift

        return getattr(timeshift, name)
    if name in ("CommHookRecorder", "BucketRecord", "profile_from_buckets"):
        from cassini.torch import recorder

        return getattr(recorder, name)
    raise AttributeError(f"module 'cassini.torch' has no attribute {name!r}")
