"""``testbed calibrate``: measure a real model's per-layer compute times on one device and
write a :class:`testbed.calibration.Calibration` (see that module for how the times are
attributed to layers so that they add up).  Needs PyTorch; the file format does not."""

from __future__ import annotations

import math
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cassini.errors import InputError
from testbed.calibration import DEVICES, DTYPE_BYTES, Calibration, LayerTiming, with_scale
from testbed.model_names import MODEL_NAMES


def owner_modules(model: Any) -> list[tuple[str, Any, list[int]]]:
    """``(module name, module, parameter indices)`` of every module that directly owns
    parameters, in registration order; a tensor shared by several modules belongs to the
    first (as in ``named_parameters``)."""
    index = {id(p): i for i, (_, p) in enumerate(model.named_parameters())}
    seen: set[int] = set()
    out = []
    for name, module in model.named_modules():
        mine = []
        for p in module.parameters(recurse=False):
            if id(p) in index and id(p) not in seen:
                seen.add(id(p))
                mine.append(index[id(p)])
        if mine:
            out.append((name, module, mine))
    return out


def calibrate(
    name: str,
    batch: int,
    device: str = "cpu",
    repeats: int = 5,
    warmup: int = 2,
    seq_len: int | None = None,
    command: str = "",
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Measure ``name`` at ``batch`` on ``device`` (``"cpu"`` or ``"cuda"``): per-layer
    forward/backward, SGD step (momentum 0.9) and whole-iteration times (seconds, medians
    of ``repeats`` after ``warmup``).  A CPU calibration comes back with
    ``cpu_scale_factor`` 1.0 and a note saying it is unscaled: set the factor (and say how
    it was obtained) with :func:`~testbed.calibration.with_scale` before a replay uses it."""
    import torch

    from testbed.models import DEFAULT_SEQ_LEN, build_model, example_batch, is_language_model

    say = progress or (lambda msg: None)
    _check_request(device, repeats, warmup)
    if threads is not None:
        torch.set_num_threads(threads)
    seq = (seq_len or DEFAULT_SEQ_LEN) if is_language_model(name) else None
    torch.manual_seed(0)
    say(f"building {name}")
    model = build_model(name).to(device)
    model.train()
    inputs, loss_fn = example_batch(name, batch, device=device, **({"seq_len": seq} if seq else {}))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    clock = _LayerClock(model, cuda=device == "cuda")
    try:
        samples = []
        for it in range(warmup + repeats):
            sample = clock.iteration(lambda: loss_fn(model, inputs), opt)
            if it >= warmup:
                samples.append(sample)
            say(
                f"{name}: iteration {it + 1}/{warmup + repeats}: {sample['iter']:.3f} s"
                + (" (warm-up)" if it < warmup else "")
            )
    finally:
        clock.remove()
    layers = clock.layer_timings(samples)
    return _calibration(name, batch, device, seq, command, repeats, warmup, layers, samples)


def _check_request(device: str, repeats: Any, warmup: Any) -> None:
    """The device exists; ``repeats`` >= 1 and ``warmup`` >= 0 are integers."""
    import torch

    if device not in DEVICES:
        raise InputError("device", f"one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("device", "cuda requested but torch sees no CUDA device")
    if not isinstance(repeats, int) or repeats < 1:
        raise InputError("repeats", f"an integer >= 1, got {repeats!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise InputError("warmup", f"an integer >= 0, got {warmup!r}")


class _LayerClock:
    """Hooks on every parameter-owning module of ``model``: when each forward ends (forward
    hooks) and when each layer's gradients are ready (post-accumulate-grad hooks), as CUDA
    events on a GPU or ``time.perf_counter`` on the CPU."""

    def __init__(self, model: Any, cuda: bool) -> None:
        self.cuda = cuda
        self.owners = owner_modules(model)
        self.params = [p for _, p in model.named_parameters()]
        owner_of_param = {i: k for k, (_, _, idx) in enumerate(self.owners) for i in idx}
        self.fwd_end: dict[int, Any] = {}
        self.first_call: list[int] = []  # owners in the order the forward first calls them
        self.called: set[int] = set()
        self.grad_ready: dict[int, list[Any]] = {}
        self.handles = []
        for k, (_, module, _) in enumerate(self.owners):
            self.handles.append(module.register_forward_hook(self._forward_hook(k)))
        for i, p in enumerate(self.params):
            hook = self._grad_hook(owner_of_param[i])
            self.handles.append(p.register_post_accumulate_grad_hook(hook))

    def _forward_hook(self, k: int) -> Callable[..., None]:
        def hook(_m: Any, _i: Any, _o: Any) -> None:
            self.fwd_end[k] = self.stamp()
            if k not in self.called:
                self.called.add(k)
                self.first_call.append(k)

        return hook

    def _grad_hook(self, k: int) -> Callable[[Any], None]:
        def hook(_p: Any) -> None:
            self.grad_ready.setdefault(k, []).append(self.stamp())

        return hook

    def stamp(self) -> Any:
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def elapsed(self, a: Any, b: Any) -> float:
        """Seconds from stamp ``a`` to stamp ``b``."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def iteration(self, forward: Callable[[], Any], opt: Any) -> dict[str, Any]:
        """One training iteration (``forward()`` returns the loss); its times (seconds)
        relative to the forward's start."""
        self.fwd_end.clear()
        self.grad_ready.clear()
        t0 = self.stamp()
        opt.zero_grad(set_to_none=True)
        f0 = self.stamp()
        loss = forward()
        f1 = self.stamp()
        loss.backward()
        b1 = self.stamp()
        opt.step()
        o1 = self.stamp()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        el = self.elapsed
        return {
            "fwd_end": {k: el(f0, v) for k, v in self.fwd_end.items()},
            "ready": {k: max(el(f0, v) for v in vs) for k, vs in self.grad_ready.items()},
            "f1": el(f0, f1),
            "b1": el(f0, b1),
            "opt": el(b1, o1),
            "iter": el(t0, o1),
        }

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def layer_timings(self, samples: list[dict[str, Any]]) -> tuple[LayerTiming, ...]:
        """Every layer in forward order: median forward and backward seconds."""
        order = list(self.first_call)
        missing = [self.owners[k][0] for k in range(len(self.owners)) if k not in set(order)]
        if missing:
            raise InputError("layers", f"modules never called in the forward: {missing[:3]}")
        per_layer = [_attribute(s, order) for s in samples]
        elem = DTYPE_BYTES["float32"]
        layers = []
        for pos, k in enumerate(order):
            lname, _, idx = self.owners[k]
            numels = [self.params[i].numel() for i in idx]
            layers.append(
                LayerTiming(
                    name=lname,
                    forward_s=statistics.median(pl[0][pos] for pl in per_layer),
                    backward_s=statistics.median(pl[1][pos] for pl in per_layer),
                    param_bytes=elem * sum(numels),
                    param_numels=tuple(numels),
                    param_indices=tuple(idx),
                )
            )
        return tuple(layers)


def _calibration(
    name: str,
    batch: int,
    device: str,
    seq: int | None,
    command: str,
    repeats: int,
    warmup: int,
    layers: tuple[LayerTiming, ...],
    samples: list[dict[str, Any]],
) -> Calibration:
    """The calibration record of a measurement: whole-pass medians and provenance."""
    import torch

    from testbed.models import DEFAULT_SEQ_LEN, input_description

    cuda = device == "cuda"
    return Calibration(
        model=name,
        batch=batch,
        seq_len=seq,
        input=input_description(name, seq or DEFAULT_SEQ_LEN),
        device=device,
        device_name=_device_name(device),
        torch_version=torch.__version__,
        dtype="float32",
        provenance="gpu" if cuda else "cpu",
        cpu_scale_factor=None if cuda else 1.0,
        scale_note=(
            "measured on a GPU; no scaling"
            if cuda
            else "UNSCALED CPU measurement (factor 1.0): not GPU-like until a factor is set"
        ),
        scale_target_iteration_s=None,
        command=command,
        repeats=repeats,
        warmup=warmup,
        threads=torch.get_num_threads(),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        layers=layers,
        forward_s=statistics.median(s["f1"] for s in samples),
        backward_s=statistics.median(s["b1"] - s["f1"] for s in samples),
        optimizer_s=statistics.median(s["opt"] for s in samples),
        iteration_s=statistics.median(s["iter"] for s in samples),
        gradient_bytes=sum(layer.param_bytes for layer in layers),
    )


def _attribute(sample: dict[str, Any], order: list[int]) -> tuple[list[float], list[float]]:
    """Per-layer forward and backward seconds of one iteration (see the module docstring);
    each list is indexed by position in forward ``order`` and sums to the whole pass."""
    fwd = []
    prev = 0.0
    for k in order:
        t = max(sample["fwd_end"][k], prev)
        fwd.append(t - prev)
        prev = t
    fwd[-1] += max(0.0, sample["f1"] - prev)
    bwd = [0.0] * len(order)
    mark = sample["f1"]
    for pos in range(len(order) - 1, -1, -1):
        ready = sample["ready"].get(order[pos], mark)
        bwd[pos] = max(0.0, ready - mark)
        mark = max(mark, ready)
    bwd[0] += max(0.0, sample["b1"] - mark)
    return fwd, bwd


def _device_name(device: str) -> str:
    import platform

    import torch

    if device == "cuda":
        return str(torch.cuda.get_device_name(0))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main_calibrate(args: Any, argv: Sequence[str]) -> int:
    """``testbed calibrate``: measure, write ``--out``; bad input exits 2 naming the field.
    ``argv`` (the arguments after ``testbed``) is recorded as the file's ``command``."""
    def fail(field_name: str, message: str) -> int:
        print(f"testbed calibrate: {field_name}: {message}", file=sys.stderr)
        return 2

    if args.model not in MODEL_NAMES:
        return fail("--model", f"one of {', '.join(MODEL_NAMES)}, got {args.model!r}")
    checks = [
        ("--batch", args.batch, 1),
        ("--repeats", args.repeats, 1),
        ("--warmup", args.warmup, 0),
        ("--seq-len", args.seq_len, 2),
        ("--threads", args.threads, 1),
    ]
    for flag, value, minimum in checks:
        if value is not None and value < minimum:
            return fail(flag, f"must be >= {minimum}, got {value}")
    out = Path(args.out)
    if not out.parent.is_dir():
        return fail("--out", f"folder {out.parent} does not exist")
    factor, target = args.cpu_scale_factor, args.gpu_iteration_s
    for flag, value in (("--cpu-scale-factor", factor), ("--gpu-iteration-s", target)):
        if value is None:
            continue
        if args.device != "cpu":
            return fail(flag, "only for --device cpu")
        if not (value > 0 and math.isfinite(value)):
            return fail(flag, f"must be > 0, got {value}")
    if factor is not None and target is not None:
        return fail("--gpu-iteration-s", "give either it or --cpu-scale-factor, not both")
    if (factor is not None or target is not None) and not args.scale_note:
        return fail("--scale-note", "required with a scale: say where the factor comes from")
    try:
        cal = calibrate(
            args.model,
            args.batch,
            device=args.device,
            repeats=args.repeats,
            warmup=args.warmup,
            seq_len=args.seq_len,
            command=shlex.join(["testbed", *argv]),
            threads=args.threads,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
        if target is not None:
            factor = target / cal.iteration_s
            note = (
                f"cpu_scale_factor = {target:g} s (GPU-class iteration, source below) / "
                f"{cal.iteration_s:.4f} s (this CPU iteration) = {factor:.5f}. "
                "NOT a GPU measurement. " + args.scale_note
            )
            cal = with_scale(cal, factor, note, target)
        elif factor is not None:
            note = f"cpu_scale_factor = {factor:g}, NOT a GPU measurement. " + args.scale_note
            cal = with_scale(cal, factor, note, factor * cal.iteration_s)
    except InputError as e:
        flags = ("model", "batch", "device", "repeats", "warmup", "seq_len", "threads")
        return fail("--" + e.field.replace("_", "-") if e.field in flags else e.field, e.problem)
    cal.dump(out)
    print(
        f"{args.model}: iteration {cal.iteration_s:.3f} s on {cal.device} "
        f"(replayed as {cal.replay_iteration_s:.3f} s), {len(cal.layers)} layers, "
        f"{cal.gradient_bytes} gradient bytes -> {out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.calibrate")
