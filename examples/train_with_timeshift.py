"""A plain PyTorch DDP training script that honours the time-shift CASSINI gave its job.

The two lines that matter are marked ``# CASSINI``; everything else is an ordinary DDP
loop.  The scheduler hands the job either the numbers (``CASSINI_SHIFT_S``,
``CASSINI_PERIOD_S``, ``CASSINI_EPOCH_S``) or a ``cassini serve`` URL and the job's id
(``CASSINI_URL``, ``CASSINI_JOB_ID``); without any of them the script runs free.

Run on one machine (gloo on loopback, two processes)::

    CASSINI_URL=http://127.0.0.1:8080 CASSINI_JOB_ID=job-a \\
        torchrun --standalone --nproc_per_node=2 examples/train_with_timeshift.py --steps 20

Rank 0 prints one JSON line at the end: the iteration start times it measured, and what
the agent did (period, shift, re-alignments, whether it released the job).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import cassini.torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    ap.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 10)
    )
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(args.batch, args.width)
    y = torch.randint(0, 10, (args.batch,))

    shift = cassini.torch.TimeShift.from_env()  # CASSINI: read the job's slot grid
    starts = []
    for _ in range(args.steps):
        shift.wait()  # CASSINI: hold this step to the job's slot
        starts.append(time.time())
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        opt.step()
    shift.close()  # CASSINI: the next step's decision is still in flight

    if dist.get_rank() == 0:
        print(json.dumps({"starts_s": starts, "agent": shift.status()}), flush=True)
    dist.barrier()  # every rank done before gloo is torn down (else it may abort one)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # gloo's threads may still hold work objects while the interpreter tears down, and
    # under CPU load that teardown sometimes aborts a rank (SIGABRT, "terminate called
    # without an active exception") after the training is done: torchrun then reports the
    # job failed.  Leaving without the teardown is the usual workaround.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
