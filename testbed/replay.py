"""Calibrated replay of a real model under DDP: real gradient tensors, replayed compute.

:func:`build_replay_model` returns a module with, for every parameter tensor of the real
model, a 1-D parameter of ``max(1, round(elements x scale))`` elements, registered in the
real model's order (same count and order of tensors, so DDP's buckets keep their structure
when the bucket caps are scaled by the same factor: :func:`ddp_bucket_kwargs`).  Its
forward runs the calibrated layers in forward order, each sleeping its forward time; the
backward runs them in reverse, each layer's ``torch.autograd.Function.backward`` sleeping
its backward time and then returning that layer's gradients.  DDP's autograd hooks
therefore fire layer by layer during the backward pass, buckets fill and their
asynchronous all-reduce overlaps the rest of the backward, exactly as in real DDP.

Times are the calibration's, multiplied by its ``time_factor`` (the stated
``cpu_scale_factor`` of a CPU calibration, 1 for a GPU one).  Sleeps are paced against a
deadline (start of the pass + the calibrated times so far), so sleep overshoot and hook
work do not accumulate over a hundred layers.

One training step (:func:`replay_step`): ``zero_grad``; ``loss = model(x).sum()`` with
``x = replay_input()``; ``loss.backward()``; sleep the optimizer time; ``optimizer.step()``.

``compute: cpu`` mode (:func:`build_cpu_model`) trains the real architecture on the CPU
instead, for smoke tests with a small batch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from testbed.calibration import DTYPE_BYTES, Calibration, default_calibration_path
from testbed.calibration import load_calibration as _load

DEFAULT_BUCKET_CAP_MB = 25.0
"""DDP's default bucket cap (MiB)."""

MIB = 1024 * 1024


def scaled_numel(numel: int, scale: float) -> int:
    """Elements of a replayed tensor standing for ``numel`` real ones (at least 1)."""
    return max(1, round(numel * scale))


def scaled_numels(cal: Calibration, scale: float) -> list[int]:
    """Elements of every replayed parameter tensor, in registration order."""
    _check_scale(scale)
    return [scaled_numel(n, scale) for n in cal.param_numels_in_registration_order()]


def scaled_gradient_bytes(cal: Calibration, scale: float) -> int:
    """Gradient bytes one replica of the replay model all-reduces per iteration."""
    return DTYPE_BYTES[cal.dtype] * sum(scaled_numels(cal, scale))


def ddp_bucket_cap_mb(scale: float, default_mb: float = DEFAULT_BUCKET_CAP_MB) -> float:
    """DDP's bucket cap (MiB) scaled with the parameters."""
    _check_scale(scale)
    return default_mb * scale


def first_bucket_cap_mb(scale: float) -> float:
    """DDP's default first-bucket cap (``dist._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB), scaled
    with the parameters (MiB)."""
    import torch.distributed as dist

    return dist._DEFAULT_FIRST_BUCKET_BYTES / MIB * ddp_bucket_cap_mb(scale, 1.0)


def ddp_bucket_kwargs(scale: float, default_mb: float = DEFAULT_BUCKET_CAP_MB) -> dict[str, Any]:
    """Keyword arguments for ``DistributedDataParallel`` that scale both of DDP's default
    caps (first bucket 1 MiB, the others 25 MiB) by ``scale``.

    Passing only ``bucket_cap_mb`` would not do: DDP then caps the first bucket at the same
    size as the others instead of 1 MiB.  ``bucket_cap_mb_list`` (a DDP argument in torch
    2.13) sets the first bucket's cap and, with its last entry, every later bucket's; the
    tests check the bucket count against DDP's defaults at scale 1."""
    return {
        "bucket_cap_mb_list": [first_bucket_cap_mb(scale), ddp_bucket_cap_mb(scale, default_mb)]
    }


def gradient_ready_order(cal: Calibration) -> list[int]:
    """Registration indices of the parameter tensors in the order the replay's backward makes
    their gradients ready: layers in reverse forward order, within a layer in registration
    order (the autograd engine runs the ``AccumulateGrad`` nodes of one ``Function``'s outputs
    in that order; measured with torch 2.13).  DDP records this order in iteration 0 and
    rebuilds its buckets from it."""
    return [i for layer in reversed(cal.layers) for i in sorted(layer.param_indices)]


def expected_bucket_count(
    cal_or_model: Calibration | str,
    scale: float,
    bucket_cap_mb: float | None = None,
    first_cap_mb: float | None = None,
) -> int:
    """Buckets DDP all-reduces per iteration (from iteration 1 on, after its rebuild) for the
    replay of ``cal_or_model`` (a calibration, or a model name: its shipped calibration) at
    ``scale``, computed with DDP's own rule (``dist._compute_bucket_assignment_by_size`` over
    the gradients in ready order).  Caps default to :func:`ddp_bucket_kwargs`'s; a job built
    with ``bucket_cap_mb=X`` alone has ``first_cap_mb=X``."""
    import torch.distributed as dist

    cal = (
        cal_or_model
        if isinstance(cal_or_model, Calibration)
        else _load(default_calibration_path(cal_or_model))
    )
    cap = ddp_bucket_cap_mb(scale) if bucket_cap_mb is None else bucket_cap_mb
    first = first_bucket_cap_mb(scale) if first_cap_mb is None else first_cap_mb
    numels = scaled_numels(cal, scale)
    order = gradient_ready_order(cal)
    dtype = getattr(torch, cal.dtype)
    tensors = [torch.empty(numels[i], dtype=dtype, device="meta") for i in order]
    limits = [int(first * MIB), int(cap * MIB)]
    buckets, _ = dist._compute_bucket_assignment_by_size(
        tensors, limits, [False] * len(order), order
    )
    return len(buckets)


class _Pacer:
    """Sleeps until a deadline that advances by each layer's time (seconds), so that one
    pass takes the sum of its layers' times however long each sleep or hook overran."""

    def __init__(self) -> None:
        self.deadline = 0.0

    def start(self) -> None:
        self.deadline = time.perf_counter()

    def wait(self, duration_s: float) -> None:
        self.deadline += duration_s
        left = self.deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)


class _ReplayLayer(torch.autograd.Function):
    """Forward: sleep the layer's forward time, pass ``x`` through.  Backward: sleep the
    layer's backward time, pass the gradient through and produce the parameters'."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layer: _LayerSpec, *params: torch.Tensor) -> Any:
        if layer.first_forward:
            layer.pacer.start()
        layer.pacer.wait(layer.forward_s)
        ctx.layer = layer
        ctx.shapes = [p.shape for p in params]
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        layer = ctx.layer
        if layer.first_backward:
            layer.pacer.start()
        layer.pacer.wait(layer.backward_s)
        value = float(grad.sum()) * 1e-3
        grads = tuple(torch.full(shape, value) for shape in ctx.shapes)
        return (grad, None, *grads)


class _LayerSpec:
    """One replayed layer: name, times (seconds, factor applied), its parameters' indices."""

    def __init__(
        self, name: str, forward_s: float, backward_s: float, indices: Sequence[int], pacer: _Pacer
    ) -> None:
        self.name, self.forward_s, self.backward_s = name, forward_s, backward_s
        self.indices = list(indices)
        self.pacer = pacer
        self.first_forward = self.first_backward = False


class ReplayModel(nn.Module):
    """The replay of a calibrated model (see the module docstring)."""

    def __init__(self, cal: Calibration, scale: float, time_factor: float | None = None) -> None:
        super().__init__()
        factor = cal.time_factor if time_factor is None else time_factor
        self.calibration = cal
        self.scale = scale
        self.time_factor = factor
        self.optimizer_s = cal.optimizer_s * factor
        self.params = nn.ParameterList(
            nn.Parameter(torch.zeros(n)) for n in scaled_numels(cal, scale)
        )
        pacer = _Pacer()
        self.layers = [
            _LayerSpec(
                layer.name,
                layer.forward_s * factor,
                layer.backward_s * factor,
                layer.param_indices,
                pacer,
            )
            for layer in cal.layers
        ]
        self.layers[0].first_forward = True
        self.layers[-1].first_backward = True

    @property
    def compute_s(self) -> float:
        """Replayed forward + backward + optimizer seconds of one iteration."""
        return sum(x.forward_s + x.backward_s for x in self.layers) + self.optimizer_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            params = [self.params[i] for i in layer.indices]
            x = _ReplayLayer.apply(x, layer, *params)
        return x


def build_replay_model(
    cal: Calibration, scale: float, time_factor: float | None = None
) -> ReplayModel:
    """The replay of ``cal`` with parameter tensors ``scale`` x the real ones (0 < scale
    <= 1) and the calibration's times x ``time_factor`` (default: ``cal.time_factor``)."""
    _check_scale(scale)
    return ReplayModel(cal, scale, time_factor)


def replay_input() -> torch.Tensor:
    """The (tiny) input a replay model is called with."""
    return torch.ones(1)


def replay_step(model: nn.Module, optimizer: torch.optim.Optimizer, optimizer_s: float) -> float:
    """One replayed training step of ``model`` (a :class:`ReplayModel`, possibly wrapped in
    DDP); returns the wall-clock time (``time.time()``) the forward pass ended."""
    optimizer.zero_grad(set_to_none=True)
    loss = model(replay_input()).sum()
    forward_end = time.time()
    loss.backward()
    if optimizer_s > 0:
        time.sleep(optimizer_s)
    optimizer.step()
    return forward_end


def build_cpu_model(
    name: str, batch: int, seq_len: int | None = None
) -> tuple[nn.Module, dict[str, torch.Tensor], Any]:
    """``compute: cpu`` mode: the real architecture ``name``, a synthetic batch of ``batch``
    samples and its loss function; a step is ``loss_fn(model, inputs).backward()``."""
    from testbed.models import build_model, example_batch

    model = build_model(name)
    model.train()
    kwargs = {"seq_len": seq_len} if seq_len else {}
    inputs, loss_fn = example_batch(name, batch, **kwargs)
    return model, inputs, loss_fn


def _check_scale(scale: float) -> None:
    from testbed.calibration import CalibrationError

    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale <= 1:
        raise CalibrationError("scale", f"a number in (0, 1], got {scale!r}")


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.replay")
