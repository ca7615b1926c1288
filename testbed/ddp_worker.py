"""PyTorch DistributedDataParallel training job whose gradients DDP all-reduces over the
network every step: a small MLP (``kind: ddp``, ``width`` x ``layers`` on synthetic data)
or a real architecture (``kind: model``: ResNet-50, VGG, BERT, GPT-2 ..., see
:mod:`testbed.models`) whose compute is replayed from a GPU calibration
(:mod:`testbed.replay`) or run for real on the CPU (``compute: cpu``).

Runs inside a Mininet host with the gloo backend (``python -m testbed.ddp_worker
SPEC.json``), or on real GPU nodes under torchrun with NCCL (``--torchrun``, see
``testbed launch``).  Each iteration is one JSON line, as the synthetic worker writes:
``{"iter", "start", "comm_start", "end", "bytes_sent", "drift_s", "buckets"}``;
``comm_start`` is when the first gradient bucket's all-reduce began (DDP overlaps the
all-reduce with the backward pass), ``buckets`` lists every bucket's all-reduce
``[bucket index, bytes, start, end]`` (:class:`cassini.torch.CommHookRecorder`), and
``bytes_sent`` is what a ring all-reduce of the gradients sends from this rank
(``2 (n-1)/n * gradient bytes``).

The time-shift agent is :class:`cassini.torch.TimeShift`, the same a user's training
script runs: rank 0 plans every slot and the job's ranks wait for it together.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from cassini.torch.timeshift import ShiftSettings, TimeShift
from testbed import internal_command_usage, releaseboard
from testbed.startgate import worker_ready
from testbed.workerspec import WorkerSpec


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


def run(spec: WorkerSpec) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from cassini.torch.recorder import CommHookRecorder

    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    device = _join_group(spec)
    job = build_job(spec, device)
    ddp = DistributedDataParallel(
        job.model, device_ids=[device.index] if device.index is not None else None, **job.ddp_kwargs
    )
    recorder = CommHookRecorder()
    recorder.register(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    # MLTCP exact mode: the optimizer step ends an iteration, marked once per job and
    # kernel (two ranks marking one job would end some flows' iterations twice)
    if spec.marks_iterations:
        import mltcp
        from mltcp import marks

        if spec.mltcp_marks_fd is not None:
            marks.use_marks_fd(spec.mltcp_marks_fd)
        mltcp.torch_hook(opt, spec.mltcp_job)
    job.step(ddp, opt)  # warm-up: builds DDP buckets, opens TCP windows
    job.step(ddp, opt)  # DDP rebuilds its buckets after the first iteration
    dist.barrier()
    shift = _start(spec)
    _train(spec, job, ddp, opt, recorder, shift, device)
    shift.close()
    # two barriers: after the first, every rank is past the last step (and rank 0 past its
    # MLTCP mark); the second then sends on every flow after that mark, so the kernel sees
    # the last iteration end on each of them (with one barrier, the other rank's barrier
    # bytes could leave before the mark, and that flow counted one iteration short)
    dist.barrier()
    dist.barrier()
    dist.destroy_process_group()


def _join_group(spec: WorkerSpec) -> Any:
    """Join the job's process group; returns this rank's device."""
    import torch
    import torch.distributed as dist

    if spec.addrs:  # inside the emulated cluster: bind gloo to our own address
        os.environ.setdefault("GLOO_SOCKET_IFNAME", spec.iface)
        init = f"tcp://{spec.addrs[0]}:{spec.port}"
        dist.init_process_group(
            spec.backend,
            init_method=init,
            rank=spec.rank,
            world_size=spec.world_size,
            timeout=_timeout(120),
        )
    else:  # torchrun sets MASTER_ADDR etc.
        dist.init_process_group(spec.backend, timeout=_timeout(300))
    if spec.backend != "nccl":
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)  # collectives on tensors of the current device
    return device


def _start(spec: WorkerSpec) -> TimeShift:
    """Wait for the common epoch; the time-shift agent when the job is held to a period,
    else sleep until the job's offset."""
    epoch = worker_ready(spec)  # every job's workers start from one epoch
    settings = None
    if spec.period_s:
        settings = ShiftSettings(True, spec.shift_s, spec.period_s, epoch, spec.tolerance_s)
    offset = spec.clock_offset_s  # an injected clock error (seconds)
    board = None
    if spec.period_s and spec.release_board and spec.rank == 0:  # the planner rank
        board = releaseboard.Board(spec.release_board, spec.job_id, spec.partners)
    shift = TimeShift(settings, channel=board, clock=lambda: time.time() + offset)
    if not shift.enabled:
        wait = epoch + spec.shift_s - time.time()
        if wait > 0:
            time.sleep(wait)
    return shift


def _train(
    spec: WorkerSpec, job: _Job, ddp: Any, opt: Any, recorder: Any, shift: TimeShift, device: Any
) -> None:
    """The timed iterations, one JSON line each."""
    import torch

    sent = int(2 * (spec.world_size - 1) / spec.world_size * job.gradient_bytes)
    extra = spec.compute_s if spec.kind == "ddp" else 0.0
    with open(spec.out, "w", buffering=1) as out:
        for k in range(spec.iterations):
            drift = shift.wait()
            start = time.time()
            recorder.mark_iteration()
            first = len(recorder.records)
            if extra:
                time.sleep(extra)  # stands in for more compute than the small model has
            job.step(ddp, opt)
            if device.type == "cuda":
                torch.cuda.synchronize()
            end = time.time()
            buckets = [[r.bucket, r.bytes, r.start_s, r.end_s] for r in recorder.records[first:]]
            record = {
                "iter": k,
                "start": start,
                "comm_start": min((b[2] for b in buckets), default=end),
                "end": end,
                "bytes_sent": sent,
                "drift_s": drift,
                "buckets": buckets,
            }
            if shift.agent is not None:
                record["realignments"] = shift.agent.realignments
                record["released"] = shift.agent.released
            out.write(json.dumps(record) + "\n")


class _Job:
    """A model to wrap in DDP, its training step ``step(ddp, optimizer)``, its gradient
    bytes, and the DDP keyword arguments (bucket caps) that keep the real model's bucket
    structure."""

    def __init__(self, model: Any, step: Any, gradient_bytes: int, ddp_kwargs: dict[str, Any]):
        self.model, self.step, self.gradient_bytes = model, step, gradient_bytes
        self.ddp_kwargs = ddp_kwargs


def build_job(spec: WorkerSpec, device: Any) -> _Job:
    """The MLP (``kind: ddp``) or a real architecture (``kind: model``)."""
    import torch

    if spec.kind == "model":
        from testbed import replay
        from testbed.calibration import load_calibration

        cal = load_calibration(spec.calibration)
        if spec.compute == "replay":
            scale = spec.scale
            model = replay.build_replay_model(cal, scale)
            return _Job(
                model,
                lambda ddp, opt: replay.replay_step(ddp, opt, model.optimizer_s),
                replay.scaled_gradient_bytes(cal, scale),
                replay.ddp_bucket_kwargs(scale),
            )
        model, inputs, loss_fn = replay.build_cpu_model(cal.model, spec.batch)
        inputs = {k: v.to(device) for k, v in inputs.items()}  # real compute, on the device

        def cpu_step(ddp: Any, opt: Any) -> None:
            opt.zero_grad(set_to_none=True)
            loss_fn(ddp, inputs).backward()
            opt.step()

        nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        return _Job(model.to(device), cpu_step, nbytes, {})
    width, layers, batch = spec.width, spec.layers, spec.batch
    model = build_model(width, layers).to(device)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def mlp_step(ddp: Any, opt: Any) -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        opt.step()

    return _Job(model, mlp_step, gradient_bytes(width, layers), {})


def _timeout(seconds: int) -> Any:
    import datetime

    return datetime.timedelta(seconds=seconds)


def torchrun_spec(argv: list[str]) -> WorkerSpec:
    """This rank's spec from ``--torchrun`` arguments and torchrun's environment."""
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
    ap.add_argument("--model", help="a real architecture (testbed.models) instead of the MLP")
    ap.add_argument("--compute", choices=("replay", "cpu"), default="replay")
    ap.add_argument("--calibration", help="calibration file (default: the shipped one)")
    ap.add_argument("--scale", type=float, default=1.0, help="parameter sizes x scale")
    a = ap.parse_args(argv)
    rank = int(os.environ["RANK"])
    model: dict[str, Any] = {"kind": "ddp"}
    if a.model:
        from testbed.calibration import default_calibration_path

        model = {
            "kind": "model",
            "model": a.model,
            "compute": a.compute,
            "calibration": a.calibration or str(default_calibration_path(a.model)),
            "scale": a.scale,
        }
    return WorkerSpec(
        job_id=os.environ.get("MLTCP_JOB") or "ddp",
        rank=rank,
        world_size=int(os.environ["WORLD_SIZE"]),
        iterations=a.iterations,
        out=f"{a.out}.rank{rank}",
        backend=a.backend,
        width=a.width,
        layers=a.layers,
        batch=a.batch,
        shift_s=a.shift_s,
        period_s=a.period_s or None,
        epoch_s=a.epoch_s or time.time() + 5,
        threads=os.cpu_count() or 1,
        mltcp_job=os.environ.get("MLTCP_JOB"),  # exact mode: testbed launch sets it
        # one marker per node: each node's kernel counts its own flows
        mltcp_marker=int(os.environ.get("LOCAL_RANK", 0)) == 0,
        **model,
    )


USAGE = "python -m testbed.ddp_worker SPEC_JSON | --torchrun [OPTIONS]"
ABOUT = (
    "One rank of a PyTorch DDP testbed job (kind ddp or model), from its spec (a\n"
    "testbed.workerspec.WorkerSpec JSON file).  An internal command: `testbed run`\n"
    "starts it inside the emulated cluster's hosts, and the torchrun commands that\n"
    "`testbed launch` prints start it with --torchrun on real GPU nodes (--torchrun\n"
    "--help lists those options).  To run jobs: `testbed run CONFIG` or `testbed launch`."
)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    internal_command_usage(argv, USAGE, ABOUT)
    if argv and argv[0] == "--torchrun":
        run(torchrun_spec(argv[1:]))
        return
    run(WorkerSpec.load(argv[0]))
    # the log is complete: leave without the interpreter's teardown, where gloo's threads
    # sometimes abort the process ("terminate called without an active exception")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
