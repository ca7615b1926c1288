"""MLTCP: ML-aware TCP congestion control (eBPF) — user-space side.

Training code marks iteration ends for the kernel's exact mode::

    import mltcp
    mltcp.assign_port(29500, "job-a")     # flows to/from this port belong to job-a
    ...
    mltcp.mark_iteration("job-a")         # after every optimizer step

or wraps its optimizer: ``optimizer = mltcp.torch_hook(optimizer, "job-a")``.  None of
this needs root or starts a process (:mod:`mltcp.marks`); loading the congestion controls
does (:mod:`mltcp.admin`, the ``mltcp`` command).
"""

from __future__ import annotations

from typing import Any

from mltcp.marks import assign_port, mark_iteration, use_marks_fd
from mltcp.policy import MltcpParams

__all__ = ["MltcpParams", "assign_port", "mark_iteration", "torch_hook", "use_marks_fd"]


def torch_hook(optimizer: Any, job_id: int | str) -> Any:
    """Make ``optimizer.step()`` mark an iteration of ``job_id`` after each step (PyTorch's
    optimizer step post-hooks); returns the optimizer."""
    optimizer.register_step_post_hook(lambda *args, **kwargs: mark_iteration(job_id))
    return optimizer
