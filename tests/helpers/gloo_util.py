"""Leaving a gloo process group from a test's worker process without the teardown abort.

Under load, a gloo worker sometimes dies with SIGABRT ("terminate called without an
active exception") after its work is done: once in ``destroy_process_group`` when the
peer has already closed its sockets, or in the interpreter's finalisation while gloo's
threads still hold work objects.  Both come after the results are written, yet a spawned
worker that aborts fails the test (CI on 2026-11-24: ``test_torch_recorder``).  The same
workaround as ``testbed/ddp_worker.py``: every rank meets at a barrier, leaves the group,
flushes, and exits without the interpreter's teardown.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def leave_process_group() -> NoReturn:
    """Barrier, ``destroy_process_group``, flush stdout/stderr, ``os._exit(0)``.  Call it
    last in a spawned worker, after its results are on disk (an ``mp.Queue`` must be
    closed and its feeder joined first: ``os._exit`` does not wait for it)."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
