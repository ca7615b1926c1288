"""PyTorch DistributedDataParallel training job: a real model (an MLP of ``width`` x
``layers`` on synthetic data) whose gradients DDP all-reduces over the network every step.

Runs inside a Mininet host with the gloo backend (``python -m testbed.ddp_worker
SPEC.json``), or on real GPU nodes under torchrun with NCCL (``--torchrun``, see
``testbed launch``).  Each iteration is one JSON line, as the synthetic worker writes:
``{"iter", "start", "comm_start", "end", "bytes_sent", "drift_s"}``; ``comm_start`` is the
end of the forward pass (DDP overlaps the all-reduce with the backward pass), and
``bytes_sent`` is what a ring all-reduce of the gradients sends from this rank
(``2 (n-1)/n * gradient bytes``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from cassini.agent import TimeShiftAgent


def gradient_bytes(width: int, layers: int) -> int:
    """Bytes of float32 gradients of the MLP (weights and biases)."""
    per_layer = width * width + width
    return 4 * (layers * per_layer + width * 10 + 10)


def build_model(width: int, layers: int) -> Any:
    import torch

    blocks: list[Any] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    blocks.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*blocks)


def run(spec: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(int(spec.get("threads", 1)))
    torch.manual_seed(spec.get("seed", 0))
    rank, world = spec["rank"], spec["world_size"]
    backend = spec.get("backend", "gloo")
    if "addrs" in spec:  # inside the emulated cluster: bind gloo to our own address
        os.environ.setdefault("GLOO_SOCKET_IFNAME", spec.get("iface", ""))
        init = f"tcp://{spec['addrs'][0]}:{spec['port']}"
        dist.init_process_group(
            backend, init_method=init, rank=rank, world_size=world, timeout=_timeout(120)
        )
    else:  # torchrun sets MASTER_ADDR etc.
        dist.init_process_group(backend, timeout=_timeout(300))
    device = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        if backend == "nccl"
        else torch.device("cpu")
    )
    width, layers, batch = spec.get("width", 256), spec.get("layers", 3), spec.get("batch", 32)
    model = build_model(width, layers).to(device)
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.index is not None else None
    )
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    sent = int(2 * (world - 1) / world * gradient_bytes(width, layers))

    agent = None
    if spec.get("period_s"):
        agent = TimeShiftAgent(spec.get("shift_s", 0.0), spec["period_s"], spec["epoch_s"])
    step(ddp, opt, loss_fn, x, y)  # warm-up: builds DDP buckets, opens TCP windows
    dist.barrier()
    if not agent:
        wait = spec.get("epoch_s", 0) + spec.get("shift_s", 0.0) - time.time()
        if wait > 0:
            time.sleep(wait)
    slot = torch.zeros(1, dtype=torch.float64)
    with open(spec["out"], "w", buffering=1) as out:
        for k in range(spec["iterations"]):
            drift = 0.0
            if agent:
                # rank 0 decides the slot (and any re-alignment) for the whole job
                slot[0] = agent.plan() if rank == 0 else 0.0
                dist.broadcast(slot, src=0)
                drift = agent.wait_until(float(slot[0]))
            start = time.time()
            extra = spec.get("compute_s", 0.0)
            if extra:
                time.sleep(extra)  # stands in for more compute than the small model has
            comm_start = step(ddp, opt, loss_fn, x, y)
            if device.type == "cuda":
                torch.cuda.synchronize()
            end = time.time()
            out.write(
                json.dumps(
                    {
                        "iter": k,
                        "start": start,
                        "comm_start": comm_start,
                        "end": end,
                        "bytes_sent": sent,
                        "drift_s": drift,
                        "realignments": agent.realignments if agent else None,
                    }
                )
                + "\n"
            )
    dist.destroy_process_group()


def step(ddp: Any, opt: Any, loss_fn: Any, x: Any, y: Any) -> float:
    """One training step; returns when the forward pass ended (the backward pass and the
    gradient all-reduce follow)."""
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(ddp(x), y)
    forward_end = time.time()
    loss.backward()
    opt.step()
    return forward_end


def _timeout(seconds: int) -> Any:
    import datetime

    return datetime.timedelta(seconds=seconds)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--torchrun":
        ap = argparse.ArgumentParser(prog="ddp_worker --torchrun")
        ap.add_argument("--iterations", type=int, default=100)
        ap.add_argument("--width", type=int, default=1024)
        ap.add_argument("--layers", type=int, default=4)
        ap.add_argument("--batch", type=int, default=64)
        ap.add_argument("--shift-s", type=float, default=0.0)
        ap.add_argument("--period-s", type=float, default=0.0)
        ap.add_argument("--epoch-s", type=float, default=0.0)
        ap.add_argument("--out", default="ddp.jsonl")
        ap.add_argument("--backend", default="nccl")
        a = ap.parse_args(argv[1:])
        rank = int(os.environ["RANK"])
        spec = {
            "rank": rank,
            "world_size": int(os.environ["WORLD_SIZE"]),
            "backend": a.backend,
            "iterations": a.iterations,
            "width": a.width,
            "layers": a.layers,
            "batch": a.batch,
            "shift_s": a.shift_s,
            "period_s": a.period_s,
            "epoch_s": a.epoch_s or time.time() + 5,
            "out": f"{a.out}.rank{rank}",
            "threads": os.cpu_count() or 1,
        }
        run(spec)
        return
    with open(argv[0]) as f:
        spec = json.load(f)
    spec.setdefault("world_size", len(spec["addrs"]))
    run(spec)


if __name__ == "__main__":
    main()
