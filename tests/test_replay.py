"""testbed.replay: the replay model's tensors, its paced compute, and real DDP over gloo on
127.0.0.1 (buckets and bytes per iteration as DDP's own rule predicts, the all-reduce
overlapping the backward pass)."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from conftest import LazyModule
from helpers.gloo_util import leave_process_group

from testbed.calibration import (
    CalibrationError,
    default_calibration_path,
    load_calibration,
)

torch = LazyModule("torch", "the testbed extra")
dist = LazyModule("torch.distributed", "the testbed extra")
replay = LazyModule("testbed.replay", "the testbed extra (torch)")
models = LazyModule("testbed.models", "the testbed extra (torch)")

SCALE = 0.01


def resnet50() -> Any:
    return load_calibration(default_calibration_path("resnet50"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_replay_tensors_follow_the_real_model() -> None:
    cal = resnet50()
    model = replay.build_replay_model(cal, SCALE)
    real = [n for _, n in models.parameter_sizes("resnet50")]
    got = [p.numel() for p in model.parameters()]
    assert len(got) == len(real) == 161
    assert got == [max(1, round(n * SCALE)) for n in real]
    tiny = replay.build_replay_model(cal, 1e-12)
    assert all(p.numel() == 1 for p in tiny.parameters())
    for bad in (0, -0.5, 1.5, True):
        with pytest.raises(CalibrationError, match="^scale:"):
            replay.build_replay_model(cal, bad)


def test_scaled_gradient_bytes_and_caps() -> None:
    cal = resnet50()
    assert replay.scaled_gradient_bytes(cal, 1.0) == cal.gradient_bytes == 4 * 25_557_032
    assert replay.scaled_gradient_bytes(cal, SCALE) == pytest.approx(
        SCALE * cal.gradient_bytes, rel=0.02
    )
    assert replay.ddp_bucket_cap_mb(SCALE) == pytest.approx(0.25)
    assert replay.ddp_bucket_kwargs(SCALE) == {"bucket_cap_mb_list": [0.01, 0.25]}


class VirtualClock:
    """``time.perf_counter``/``time.sleep`` on a virtual clock: every sleep overruns by
    ``overrun_s`` (a loaded machine waking the sleeper late), nothing else takes time."""

    def __init__(self, overrun_s: float) -> None:
        self.now, self.overrun_s, self.sleeps = 100.0, overrun_s, 0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds + self.overrun_s
        self.sleeps += 1


@pytest.mark.parametrize("overrun_s", [0.0, 0.002])
def test_replay_times_are_the_calibration_times_the_factor(monkeypatch, overrun_s) -> None:
    cal = resnet50()
    model = replay.build_replay_model(cal, SCALE, time_factor=2 * cal.time_factor)
    target_fwd = 2 * cal.time_factor * sum(x.forward_s for x in cal.layers)
    target_bwd = 2 * cal.time_factor * sum(x.backward_s for x in cal.layers)
    assert model.compute_s == pytest.approx(2 * cal.replay_compute_s)
    clock = VirtualClock(overrun_s)
    monkeypatch.setattr(replay, "time", clock)  # the pacer's clock and sleep
    t0 = clock.perf_counter()
    loss = model(replay.replay_input()).sum()
    t1 = clock.perf_counter()
    loss.backward()
    t2 = clock.perf_counter()
    # each pass takes its calibrated time; overruns do not add up (the pacer sleeps to
    # deadlines, not durations): at most one overrun is left at the end of a pass
    for elapsed, target in ((t1 - t0, target_fwd), (t2 - t1, target_bwd)):
        assert target - 1e-9 <= elapsed <= target + overrun_s + 1e-9
    if overrun_s == 0:
        assert (t1 - t0, t2 - t1) == pytest.approx((target_fwd, target_bwd), abs=1e-9)
    assert clock.sleeps >= 2
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())


@pytest.fixture
def one_rank_group() -> Any:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def _buckets_per_iteration(ddp: Any, iterations: int = 3) -> list[tuple[int, int]]:
    """(buckets, bytes) all-reduced in each iteration after the first (DDP rebuilds its
    buckets from the gradient order it saw in iteration 0)."""
    seen: list[int] = []

    def hook(_state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations
        buf = bucket.buffer()
        seen.append(buf.numel() * buf.element_size())
        fut = dist.all_reduce(buf, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    out = []
    for _ in range(iterations + 1):
        seen.clear()
        replay.replay_step(ddp, opt, 0.0)
        out.append((len(seen), sum(seen)))
    return out[1:]


@pytest.mark.parametrize(
    ("scale", "ddp_kwargs", "expect_kwargs"),
    [
        (1.0, {}, {}),  # DDP's defaults on the full-size tensors
        (1.0, "scaled", {}),
        (SCALE, "scaled", {}),
        (SCALE, {"bucket_cap_mb": 0.25}, {"bucket_cap_mb": 0.25, "first_cap_mb": 0.25}),
    ],
    ids=["full-default", "full-scaled-caps", "scaled", "scaled-single-cap"],
)
def test_bucket_count_matches_ddp(
    one_rank_group: None, scale: float, ddp_kwargs: Any, expect_kwargs: dict[str, float]
) -> None:
    cal = resnet50()
    model = replay.build_replay_model(cal, scale, time_factor=0.0)
    kwargs = replay.ddp_bucket_kwargs(scale) if ddp_kwargs == "scaled" else ddp_kwargs
    ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    expected = replay.expected_bucket_count(cal, scale, **expect_kwargs)
    assert expected > 1
    for buckets, nbytes in _buckets_per_iteration(ddp):
        assert buckets == expected
        assert nbytes == replay.scaled_gradient_bytes(cal, scale)


def _rank(rank: int, port: int, iterations: int, queue: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    cal = resnet50()
    model = replay.build_replay_model(cal, SCALE)
    ddp = torch.nn.parallel.DistributedDataParallel(model, **replay.ddp_bucket_kwargs(SCALE))
    launches: list[tuple[float, int]] = []

    def hook(_state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations
        buf = bucket.buffer()
        launches.append((time.perf_counter(), buf.numel() * buf.element_size()))
        fut = dist.all_reduce(buf, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    rows = []
    for it in range(iterations + 1):
        launches.clear()
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = ddp(replay.replay_input()).sum()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        time.sleep(model.optimizer_s)
        opt.step()
        t3 = time.perf_counter()
        if it > 0:  # iteration 0 builds DDP's buckets
            rows.append(
                {
                    "iteration_s": t3 - t0,
                    "backward_start": t1,
                    "backward_end": t2,
                    "first_launch": launches[0][0],
                    "buckets": len(launches),
                    "bytes": sum(b for _, b in launches),
                }
            )
    queue.put((rank, rows))
    queue.close()
    queue.join_thread()  # the rows are in the pipe before os._exit
    leave_process_group()


@pytest.mark.timing
def test_two_rank_gloo_ddp_replay_of_resnet50() -> None:
    import torch.multiprocessing as mp

    cal = resnet50()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, 3, queue)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        results = dict(queue.get(timeout=90) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    expected_buckets = replay.expected_bucket_count(cal, SCALE)
    grad_bytes = replay.scaled_gradient_bytes(cal, SCALE)
    compute_s = cal.replay_compute_s
    backward_s = cal.time_factor * sum(x.backward_s for x in cal.layers)
    for rank, rows in results.items():
        assert len(rows) == 3, rank
        for row in rows:
            assert row["buckets"] == expected_buckets
            assert row["bytes"] == pytest.approx(grad_bytes, rel=0.02)
            assert row["iteration_s"] >= compute_s  # sleeps never end early
            # the first bucket's all-reduce starts while most of the backward pass is still
            # to run, and overlaps it.  Measured (3 runs x 2 ranks x 3 iterations, this
            # 2-core machine shared with other developers' tests, 2026-11-26): 0.92-1.23 of
            # the backward time (over 1: backward_end waits for the last all-reduce); a
            # launch after the backward would give ~0.  0.3 is 3x under the lowest value.
            overlap = (row["backward_end"] - row["first_launch"]) / backward_s
            print(f"rank {rank}: backward left after the first launch {overlap:.3f}")
            assert overlap > 0.3


def test_cpu_mode_real_step() -> None:
    model, inputs, loss_fn = replay.build_cpu_model("vgg11", 1)
    loss = loss_fn(model, inputs)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters())
