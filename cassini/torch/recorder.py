"""A DDP communication hook that records each gradient bucket's all-reduce.

Two lines in a training script, no root and no packet capture::

    recorder = CommHookRecorder()
    recorder.register(ddp_model)          # replaces DDP's default all-reduce hook
    for batch in loader:
        recorder.mark_iteration()         # optional: the iteration start (else bucket 0)
        ...
    recorder.write_jsonl("buckets.jsonl") # then: cassini profile --from recorder ...
    profile = recorder.profile("my-job")  # or directly

The hook does what DDP's default ``allreduce_hook`` does (average the bucket's gradients
over the process group with one asynchronous all-reduce) and records the bucket's bytes,
the launch time and the time its future completes (wall clock, seconds).  torch is
imported when a recorder is created, not when this module is.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cassini.measure import BucketRecord, profile_from_buckets, ring_allreduce_bytes
from cassini.profile import JobProfile

__all__ = [
    "BucketRecord",
    "CommHookRecorder",
    "profile_from_buckets",
    "ring_allreduce_bytes",
]


class CommHookRecorder:
    """Records ``BucketRecord(iteration, bucket, bytes, start_s, end_s)`` for every bucket
    DDP all-reduces.

    ``process_group``: the group to all-reduce over (None: the default group).
    ``clock``: wall-clock seconds (injectable for tests).  Iterations are numbered by
    :meth:`mark_iteration` calls once it has been called, else by bucket 0 (the first
    bucket DDP reduces in every backward pass)."""

    def __init__(self, process_group: Any = None, clock: Callable[[], float] = time.time) -> None:
        import torch.distributed  # noqa: F401 - fail early without torch

        self.process_group = process_group
        self.clock = clock
        self._records: list[BucketRecord] = []
        self._starts: dict[int, float] = {}
        self._iteration = -1
        self._marked = False
        self._lock = threading.Lock()

    # -- the hook -----------------------------------------------------------------------
    def register(self, ddp_model: Any) -> CommHookRecorder:
        """Install the hook on a ``DistributedDataParallel`` model (once, before the first
        backward pass); returns the recorder."""
        ddp_model.register_comm_hook(self, _hook)
        return self

    def mark_iteration(self) -> int:
        """Mark the start of an iteration (call at the top of each step); returns its index."""
        with self._lock:
            self._marked = True
            self._iteration += 1
            self._starts[self._iteration] = self.clock()
            return self._iteration

    def _launch(self, bucket_index: int) -> tuple[int, float]:
        with self._lock:
            if bucket_index == 0 and not self._marked:
                self._iteration += 1
            return self._iteration, self.clock()

    def _done(self, record: BucketRecord) -> None:
        with self._lock:
            self._records.append(record)

    # -- results ------------------------------------------------------------------------
    @property
    def records(self) -> list[BucketRecord]:
        """Completed bucket all-reduces so far, in completion order."""
        with self._lock:
            return list(self._records)

    @property
    def iteration_starts_s(self) -> dict[int, float]:
        """Wall-clock start (seconds) of each iteration marked by :meth:`mark_iteration`."""
        with self._lock:
            return dict(self._starts)

    def world_size(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size(self.process_group)

    def profile(self, job_id: str, world_size: int | None = None, **kwargs: Any) -> JobProfile:
        """:func:`cassini.measure.profile_from_buckets` of what was recorded."""
        return profile_from_buckets(
            job_id,
            self.records,
            world_size if world_size is not None else self.world_size(),
            self.iteration_starts_s or None,
            **kwargs,
        )

    def write_jsonl(self, path: Path | str, world_size: int | None = None) -> None:
        """Write the log ``cassini profile --from recorder`` reads: a meta line (world
        size, rank), the marked iteration starts, then one line per bucket record."""
        import torch.distributed as dist

        world = world_size if world_size is not None else self.world_size()
        rank = dist.get_rank(self.process_group) if dist.is_initialized() else 0
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"type": "meta", "world_size": world, "rank": rank}) + "\n")
            for k, t in sorted(self.iteration_starts_s.items()):
                f.write(json.dumps({"type": "iteration", "iteration": k, "start_s": t}) + "\n")
            for r in self.records:
                f.write(json.dumps(r.to_dict()) + "\n")


def _hook(state, bucket):  # unannotated: DDP rejects string annotations on a hook
    """allreduce_hook with timing (``state``: the recorder, ``bucket``: a
    ``dist.GradBucket``; returns a ``Future[Tensor]``): divide by the group size,
    all-reduce asynchronously, record when the future completes."""
    import torch.distributed as dist

    group = state.process_group if state.process_group is not None else dist.group.WORLD
    tensor = bucket.buffer()
    index = bucket.index()
    nbytes = tensor.numel() * tensor.element_size()
    iteration, start = state._launch(index)
    tensor.div_(dist.get_world_size(group))
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

    def finish(f: Any) -> Any:
        state._done(BucketRecord(iteration, index, nbytes, start, state.clock()))
        return f.value()[0]

    return fut.then(finish)
