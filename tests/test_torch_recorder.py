"""The DDP comm-hook recorder on a real 2-rank gloo job over loopback (no root), and
profile_from_buckets on synthetic records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import LazyModule
from helpers.gloo_util import leave_process_group
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.measure import (
    BucketRecord,
    bucket_records_from_dicts,
    profile_from_buckets,
    read_jsonl,
    ring_allreduce_bytes,
)

torch = LazyModule("torch", "the testbed extra")

WORLD = 2
ITERATIONS = 12
WIDTH, LAYERS = 384, 4  # ~2.4 MB of float32 gradients
BUCKET_CAP_MB = 0.5  # several buckets (DDP's first bucket has its own 1 MiB cap)


def _worker(rank: int, out_dir: str) -> None:
    import time

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from cassini.torch.recorder import CommHookRecorder

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group(
        "gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=WORLD
    )
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10))
    ddp = DistributedDataParallel(model, bucket_cap_mb=BUCKET_CAP_MB)
    recorder = CommHookRecorder().register(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(16, WIDTH), torch.randint(0, 10, (16,))
    before = [p.detach().clone() for p in model.parameters()]
    steps = []
    for _ in range(ITERATIONS):
        recorder.mark_iteration()
        t0 = time.time()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        steps.append(time.time() - t0)
    grads_equal = all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    # the hook must still average: both ranks hold identical parameters
    flat = torch.cat([p.detach().ravel() for p in model.parameters()])
    other = flat.clone()
    dist.broadcast(other, src=0)
    recorder.write_jsonl(Path(out_dir) / f"rank{rank}.jsonl")
    info = {
        "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "step_s": steps,
        "unchanged": grads_equal,
        "same_as_rank0": bool(torch.equal(flat, other)),
    }
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(info))
    leave_process_group()


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    torch.multiprocessing.spawn(_worker, args=(str(out),), nprocs=WORLD, join=True)
    return out


def test_recorder_counts_every_gradient_byte_once_per_iteration(ddp_run):
    for rank in range(WORLD):
        info = json.loads((ddp_run / f"rank{rank}.json").read_text())
        assert not info["unchanged"] and info["same_as_rank0"]
        log = bucket_records_from_dicts(read_jsonl(ddp_run / f"rank{rank}.jsonl"))
        assert log.world_size == WORLD
        assert sorted(log.iteration_starts_s) == list(range(ITERATIONS))
        per_iter: dict[int, list[BucketRecord]] = {}
        for r in log.records:
            per_iter.setdefault(r.iteration, []).append(r)
            assert r.end_s >= r.start_s >= log.iteration_starts_s[r.iteration]
        assert sorted(per_iter) == list(range(ITERATIONS))
        for k, recs in per_iter.items():
            assert sum(r.bytes for r in recs) == info["gradient_bytes"], f"iteration {k}"
            assert sorted(r.bucket for r in recs) == list(range(len(recs)))
        # DDP rebuilds its buckets after the first iteration, then uses several
        assert min(len(per_iter[k]) for k in range(1, ITERATIONS)) >= 3


def test_recorder_profile_moves_the_ring_allreduce_bytes(ddp_run):
    info = json.loads((ddp_run / "rank0.json").read_text())
    log = bucket_records_from_dicts(read_jsonl(ddp_run / "rank0.jsonl"))
    profile = profile_from_buckets("ddp", log.records, WORLD, log.iteration_starts_s)
    assert profile.bytes_per_iteration == pytest.approx(
        ring_allreduce_bytes(info["gradient_bytes"], WORLD), rel=1e-9
    )
    # iteration time agrees with the worker's own step timing (marks are step starts)
    steps = np.array(info["step_s"][1:])
    assert profile.iteration_time_s >= np.min(steps)
    assert profile.iteration_time_s <= np.max(steps) + np.median(steps)
    assert profile.phases and profile.communication_share <= 1.0
    # the all-reduces run during the backward pass, after the forward pass began
    assert profile.phases[0].start_s > 0
    assert all(p.rate_bps > 0 for p in profile.phases)


@given(
    n_iter=st.integers(3, 8),
    sizes=st.lists(st.integers(1, 10**7), min_size=1, max_size=6),
    period=st.floats(0.01, 1.0),
    world=st.integers(2, 16),
    jitter=st.floats(0.0, 0.3),
    data=st.data(),
)
@settings(max_examples=60, deadline=None)
def test_profile_from_buckets_conserves_bits_and_period(n_iter, sizes, period, world, jitter, data):
    """Bits per iteration equal the ring all-reduce bytes of the buckets, whatever the
    timing; the iteration time is the interval between iteration starts."""
    records, starts = [], {}
    for k in range(n_iter):
        starts[k] = 100.0 + k * period
        t = starts[k] + data.draw(st.floats(0.0, 0.5)) * period
        for b, size in enumerate(sizes):
            d = data.draw(st.floats(0.0, 0.4 / len(sizes))) * period
            records.append(BucketRecord(k, b, size, t, t + d))
            t += d + jitter * data.draw(st.floats(0.0, 0.1)) * period / len(sizes)
    profile = profile_from_buckets("j", records, world, starts, skip=0)
    assert profile.iteration_time_s == pytest.approx(period, rel=1e-9)
    assert profile.bits_per_iteration == pytest.approx(
        8 * ring_allreduce_bytes(sum(sizes), world), rel=1e-9
    )
    auto = profile_from_buckets("j", records, world, skip=0)  # origins from bucket 0
    assert auto.bits_per_iteration == pytest.approx(profile.bits_per_iteration, rel=1e-9)


def test_profile_from_buckets_merges_overlaps_and_folds_past_the_period():
    period = 0.1
    records = []
    for k in range(4):
        t0 = k * period
        records += [
            BucketRecord(k, 0, 1000, t0 + 0.02, t0 + 0.04),
            BucketRecord(k, 1, 3000, t0 + 0.03, t0 + 0.05),  # overlaps bucket 0
            BucketRecord(k, 2, 2000, t0 + 0.09, t0 + 0.11),  # runs into the next iteration
        ]
    profile = profile_from_buckets("j", records, 2, [k * period for k in range(4)], skip=0)
    assert len(profile.phases) == 2
    first, wrap = profile.phases
    assert (first.start_s, first.duration_s) == pytest.approx((0.02, 0.03))
    assert first.rate_bps * first.duration_s == pytest.approx(8 * 4000)
    assert (wrap.start_s, wrap.duration_s) == pytest.approx((0.09, 0.02))


def test_profile_from_buckets_errors_name_the_field():
    from cassini.errors import InputError

    rec = [BucketRecord(0, 0, 10, 0.0, 0.1)]
    with pytest.raises(InputError, match="world_size"):
        profile_from_buckets("j", rec, 0)
    with pytest.raises(InputError, match="records"):
        profile_from_buckets("j", rec, 2)
    with pytest.raises(InputError, match=r"records\[0\].end_s"):
        profile_from_buckets("j", [BucketRecord(0, 0, 10, 1.0, 0.5)], 2)
