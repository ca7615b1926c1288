"""Per-layer compute calibration of a real model: how long each layer's forward and
backward pass, the optimizer step and a whole training iteration take on one device.
The calibrated replay (:mod:`testbed.replay`) reads these files.

A *layer* is a module that directly owns parameter tensors (convolution, batch norm,
linear, layer norm, embedding), listed in the order the forward pass first calls it.
Times are attributed so that they add up:

* ``forward_s`` of a layer runs from the end of the previous layer's forward (its forward
  hook; the forward's start for the first) to the end of its own, so the parameter-free
  work in between (activations, pooling, attention softmax, residual adds) counts towards
  the next layer; the last layer also takes the loss computation after it.
* ``backward_s`` of a layer, going in reverse forward order, runs from the moment the
  previous (later) layers' gradients were all ready to the moment its own are (the
  parameters' post-accumulate-grad hooks: exactly when DDP's hooks would fire); the first
  layer also takes the tail until ``backward()`` returns.

Each is the median over ``repeats`` iterations after ``warmup`` iterations.  On CUDA the
hooks record CUDA events; on the CPU they read ``time.perf_counter``.

A CPU calibration (``provenance: "cpu"``) is not a GPU measurement.  It carries
``cpu_scale_factor`` (GPU-class time / CPU time, applied by the replay) and
``scale_note`` saying where that factor comes from.
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibrations"
"""The shipped calibration files, ``<model>.json``."""

PROVENANCES = ("gpu", "cpu")
DEVICES = ("cpu", "cuda")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SCHEMA_VERSION = 1


class CalibrationError(ValueError):
    """A bad or missing calibration field; ``str()`` starts with the field's path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class LayerTiming:
    """One parameter-owning layer: forward and backward time (seconds), gradient bytes,
    and its parameter tensors (elements each, and their indices in the model's
    parameter registration order)."""

    name: str
    forward_s: float
    backward_s: float
    param_bytes: int
    param_numels: tuple[int, ...]
    param_indices: tuple[int, ...]


@dataclass(frozen=True)
class Calibration:
    """Compute timing of one model at one batch size on one device (seconds, bytes)."""

    model: str
    batch: int
    seq_len: int | None  # tokens per sample (language models), else None
    input: str  # one sample, in words
    device: str  # "cpu" | "cuda"
    device_name: str  # GPU name or CPU model
    torch_version: str
    dtype: str
    provenance: str  # "gpu" | "cpu"
    cpu_scale_factor: float | None  # GPU-class time / CPU time; None for provenance gpu
    scale_note: str  # how cpu_scale_factor was obtained (or why none)
    scale_target_iteration_s: float | None  # the GPU-class iteration the factor maps to
    command: str  # the exact command that produced the file
    repeats: int
    warmup: int
    threads: int  # torch intra-op threads during the measurement
    created: str  # UTC, ISO 8601
    layers: tuple[LayerTiming, ...]
    forward_s: float  # whole forward incl. loss (median)
    backward_s: float  # whole backward (median)
    optimizer_s: float  # SGD step (median)
    iteration_s: float  # zero_grad + forward + backward + step (median)
    gradient_bytes: int
    version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes

    @property
    def time_factor(self) -> float:
        """What the replay multiplies measured times by: ``cpu_scale_factor`` for a CPU
        calibration, 1 for a GPU one."""
        if self.provenance == "cpu":
            return float(self.cpu_scale_factor or 1.0)
        return 1.0

    @property
    def replay_iteration_s(self) -> float:
        """The iteration time (seconds) the replay reproduces: ``iteration_s`` x factor."""
        return self.iteration_s * self.time_factor

    @property
    def replay_compute_s(self) -> float:
        """Sum of the replayed per-layer forward and backward times and the optimizer step
        (seconds, factor applied): the least a replayed iteration can take."""
        per_layer = sum(layer.forward_s + layer.backward_s for layer in self.layers)
        return (per_layer + self.optimizer_s) * self.time_factor

    @property
    def parameter_tensors(self) -> int:
        return sum(len(layer.param_numels) for layer in self.layers)

    def param_numels_in_registration_order(self) -> list[int]:
        """Elements of every parameter tensor, in the model's registration order."""
        out = [0] * self.parameter_tensors
        for layer in self.layers:
            for i, n in zip(layer.param_indices, layer.param_numels, strict=True):
                out[i] = n
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layers"] = list(d["layers"])
        for layer in d["layers"]:
            layer["param_numels"] = list(layer["param_numels"])
            layer["param_indices"] = list(layer["param_indices"])
        return d

    @classmethod
    def from_dict(cls, raw: Any) -> Calibration:
        """Validate ``raw`` (parsed JSON); a bad or missing field raises
        :class:`CalibrationError` naming it."""
        return _parse(raw)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


def load_calibration(path: str | Path) -> Calibration:
    """Read and validate a calibration file (``OSError`` if unreadable, else
    :class:`CalibrationError` naming the bad field)."""
    text = Path(path).read_text()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise CalibrationError("(file)", f"not JSON: {e}") from None
    return _parse(raw)


def default_calibration_path(model: str) -> Path:
    """The shipped calibration of ``model``."""
    return CALIBRATION_DIR / f"{model}.json"


# ---------------------------------------------------------------- validation


def _parse(raw: Any) -> Calibration:
    from testbed.models import MODEL_NAMES

    if not isinstance(raw, dict):
        raise CalibrationError("(file)", "a JSON object")
    r = _Reader(raw, "")
    model = r.string("model")
    if model not in MODEL_NAMES:
        raise CalibrationError("model", f"one of {', '.join(MODEL_NAMES)}, got {model!r}")
    device = r.choice("device", DEVICES)
    provenance = r.choice("provenance", PROVENANCES)
    dtype = r.choice("dtype", tuple(DTYPE_BYTES))
    factor = r.number("cpu_scale_factor", positive=True, optional=True)
    if provenance == "cpu" and factor is None:
        raise CalibrationError("cpu_scale_factor", "required (a number > 0) for provenance cpu")
    if provenance == "gpu" and factor is not None:
        raise CalibrationError("cpu_scale_factor", "must be null for provenance gpu")
    if provenance == "gpu" and device != "cuda":
        raise CalibrationError("provenance", f"gpu, but device is {device!r}")
    layers_raw = raw.get("layers")
    if not isinstance(layers_raw, list) or not layers_raw:
        raise CalibrationError("layers", "a non-empty list of layer timings")
    elem = DTYPE_BYTES[dtype]
    layers = tuple(_layer(x, f"layers[{i}]", elem) for i, x in enumerate(layers_raw))
    indices = sorted(i for layer in layers for i in layer.param_indices)
    if indices != list(range(len(indices))):
        raise CalibrationError(
            "layers", "param_indices must cover 0..n-1 once each (the registration order)"
        )
    grad = r.integer("gradient_bytes", minimum=1)
    total = sum(layer.param_bytes for layer in layers)
    if grad != total:
        raise CalibrationError("gradient_bytes", f"{grad} != sum of layers' param_bytes {total}")
    extra = raw.get("extra", {})
    if not isinstance(extra, dict):
        raise CalibrationError("extra", "an object")
    version = r.integer("version", minimum=1, default=SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise CalibrationError("version", f"{SCHEMA_VERSION} expected, got {version}")
    known = {f for f in Calibration.__dataclass_fields__}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise CalibrationError(unknown[0], "unknown field")
    return Calibration(
        model=model,
        batch=r.integer("batch", minimum=1),
        seq_len=r.integer("seq_len", minimum=1, optional=True),
        input=r.string("input"),
        device=device,
        device_name=r.string("device_name"),
        torch_version=r.string("torch_version"),
        dtype=dtype,
        provenance=provenance,
        cpu_scale_factor=factor,
        scale_note=r.string("scale_note"),
        scale_target_iteration_s=r.number("scale_target_iteration_s", positive=True, optional=True),
        command=r.string("command"),
        repeats=r.integer("repeats", minimum=1),
        warmup=r.integer("warmup", minimum=0),
        threads=r.integer("threads", minimum=1),
        created=r.string("created"),
        layers=layers,
        forward_s=r.number("forward_s"),
        backward_s=r.number("backward_s"),
        optimizer_s=r.number("optimizer_s"),
        iteration_s=r.number("iteration_s", positive=True),
        gradient_bytes=grad,
        version=version,
        extra=extra,
    )


def _layer(raw: Any, where: str, elem_bytes: int) -> LayerTiming:
    if not isinstance(raw, dict):
        raise CalibrationError(where, "a layer object")
    r = _Reader(raw, where + ".")
    numels = r.int_list("param_numels", minimum=1)
    indices = r.int_list("param_indices", minimum=0)
    if len(indices) != len(numels):
        raise CalibrationError(f"{where}.param_indices", "one index per entry of param_numels")
    param_bytes = r.integer("param_bytes", minimum=1)
    if param_bytes != elem_bytes * sum(numels):
        raise CalibrationError(
            f"{where}.param_bytes",
            f"{param_bytes} != {elem_bytes} bytes x {sum(numels)} elements of param_numels",
        )
    unknown = sorted(set(raw) - set(LayerTiming.__dataclass_fields__))
    if unknown:
        raise CalibrationError(f"{where}.{unknown[0]}", "unknown field")
    return LayerTiming(
        name=r.string("name"),
        forward_s=r.number("forward_s"),
        backward_s=r.number("backward_s"),
        param_bytes=param_bytes,
        param_numels=tuple(numels),
        param_indices=tuple(indices),
    )


class _Reader:
    """Typed field access that names the field (with ``prefix``) in every error."""

    def __init__(self, raw: dict[str, Any], prefix: str) -> None:
        self.raw, self.prefix = raw, prefix

    def _get(self, key: str, optional: bool) -> Any:
        if key not in self.raw:
            if optional:
                return None
            raise CalibrationError(self.prefix + key, "missing")
        return self.raw[key]

    def string(self, key: str) -> str:
        v = self._get(key, False)
        if not isinstance(v, str):
            raise CalibrationError(self.prefix + key, f"a string, got {v!r}")
        return v

    def choice(self, key: str, options: Sequence[str]) -> str:
        v = self.string(key)
        if v not in options:
            raise CalibrationError(self.prefix + key, f"one of {', '.join(options)}, got {v!r}")
        return v

    def number(self, key: str, positive: bool = False, optional: bool = False) -> Any:
        v = self._get(key, optional)
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise CalibrationError(self.prefix + key, f"a finite number, got {v!r}")
        if positive and v <= 0:
            raise CalibrationError(self.prefix + key, f"must be > 0, got {v!r}")
        if v < 0:
            raise CalibrationError(self.prefix + key, f"must be >= 0, got {v!r}")
        return float(v)

    def integer(
        self, key: str, minimum: int = 0, optional: bool = False, default: int | None = None
    ) -> Any:
        if default is not None and key not in self.raw:
            return default
        v = self._get(key, optional)
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise CalibrationError(self.prefix + key, f"an integer, got {v!r}")
        if v < minimum:
            raise CalibrationError(self.prefix + key, f"must be >= {minimum}, got {v!r}")
        return v

    def int_list(self, key: str, minimum: int) -> list[int]:
        v = self._get(key, False)
        if not isinstance(v, list) or not v:
            raise CalibrationError(self.prefix + key, "a non-empty list of integers")
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
                raise CalibrationError(
                    f"{self.prefix}{key}[{i}]", f"an integer >= {minimum}, got {x!r}"
                )
        return v


# ---------------------------------------------------------------- measurement


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
    it was obtained) with :func:`with_scale` before a replay uses it."""
    import torch

    from testbed.models import (
        DEFAULT_SEQ_LEN,
        build_model,
        example_batch,
        input_description,
        is_language_model,
    )

    say = progress or (lambda msg: None)
    if device not in DEVICES:
        raise CalibrationError("device", f"one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise CalibrationError("device", "cuda requested but torch sees no CUDA device")
    if not isinstance(repeats, int) or repeats < 1:
        raise CalibrationError("repeats", f"an integer >= 1, got {repeats!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise CalibrationError("warmup", f"an integer >= 0, got {warmup!r}")
    if threads is not None:
        torch.set_num_threads(threads)
    lm = is_language_model(name)
    seq = (seq_len or DEFAULT_SEQ_LEN) if lm else None
    torch.manual_seed(0)
    say(f"building {name}")
    model = build_model(name).to(device)
    model.train()
    kwargs = {"seq_len": seq} if seq else {}
    inputs, loss_fn = example_batch(name, batch, device=device, **kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    owners = owner_modules(model)
    params = [p for _, p in model.named_parameters()]
    owner_of_param = {i: k for k, (_, _, idx) in enumerate(owners) for i in idx}
    cuda = device == "cuda"

    def stamp() -> Any:
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    fwd_end: dict[int, Any] = {}
    first_call: list[int] = []
    first_call_set: set[int] = set()
    grad_ready: dict[int, list[Any]] = {}
    handles = []
    for k, (_, module, _) in enumerate(owners):

        def fhook(_m: Any, _i: Any, _o: Any, k: int = k) -> None:
            fwd_end[k] = stamp()
            if k not in first_call_set:
                first_call_set.add(k)
                first_call.append(k)

        handles.append(module.register_forward_hook(fhook))
    for i, p in enumerate(params):

        def ghook(_p: Any, k: int = owner_of_param[i]) -> None:
            grad_ready.setdefault(k, []).append(stamp())

        handles.append(p.register_post_accumulate_grad_hook(ghook))

    samples: list[dict[str, Any]] = []
    try:
        for it in range(warmup + repeats):
            fwd_end.clear()
            grad_ready.clear()
            t0 = stamp()
            opt.zero_grad(set_to_none=True)
            f0 = stamp()
            loss = loss_fn(model, inputs)
            f1 = stamp()
            loss.backward()
            b1 = stamp()
            opt.step()
            o1 = stamp()
            if cuda:
                torch.cuda.synchronize()

            def el(a: Any, b: Any) -> float:
                return a.elapsed_time(b) / 1e3 if cuda else b - a

            # times relative to f0, seconds
            rel_f = {k: el(f0, v) for k, v in fwd_end.items()}
            rel_g = {k: max(el(f0, v) for v in vs) for k, vs in grad_ready.items()}
            sample = {
                "fwd_end": rel_f,
                "ready": rel_g,
                "f1": el(f0, f1),
                "b1": el(f0, b1),
                "opt": el(b1, o1),
                "iter": el(t0, o1),
            }
            if it >= warmup:
                samples.append(sample)
            say(
                f"{name}: iteration {it + 1}/{warmup + repeats}: {sample['iter']:.3f} s"
                + (" (warm-up)" if it < warmup else "")
            )
    finally:
        for h in handles:
            h.remove()
    order = list(first_call)
    missing = [owners[k][0] for k in range(len(owners)) if k not in set(order)]
    if missing:
        raise CalibrationError("layers", f"modules never called in the forward: {missing[:3]}")
    per_layer = [_attribute(s, order) for s in samples]
    layers = []
    elem = DTYPE_BYTES["float32"]
    for pos, k in enumerate(order):
        lname, _, idx = owners[k]
        numels = [params[i].numel() for i in idx]
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
    gradient_bytes = sum(layer.param_bytes for layer in layers)
    provenance = "gpu" if cuda else "cpu"
    return Calibration(
        model=name,
        batch=batch,
        seq_len=seq,
        input=input_description(name, seq or DEFAULT_SEQ_LEN),
        device=device,
        device_name=_device_name(device),
        torch_version=torch.__version__,
        dtype="float32",
        provenance=provenance,
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
        layers=tuple(layers),
        forward_s=statistics.median(s["f1"] for s in samples),
        backward_s=statistics.median(s["b1"] - s["f1"] for s in samples),
        optimizer_s=statistics.median(s["opt"] for s in samples),
        iteration_s=statistics.median(s["iter"] for s in samples),
        gradient_bytes=gradient_bytes,
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


def with_scale(
    cal: Calibration, factor: float, note: str, target_iteration_s: float | None
) -> Calibration:
    """``cal`` (a CPU calibration) with ``cpu_scale_factor`` = ``factor`` and the note
    saying how the factor was obtained."""
    from dataclasses import replace

    if cal.provenance != "cpu":
        raise CalibrationError("provenance", "only a CPU calibration takes a cpu_scale_factor")
    if not (factor > 0 and math.isfinite(factor)):
        raise CalibrationError("cpu_scale_factor", f"must be > 0, got {factor!r}")
    return replace(
        cal, cpu_scale_factor=factor, scale_note=note, scale_target_iteration_s=target_iteration_s
    )


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
    from testbed.models import MODEL_NAMES

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
    except CalibrationError as e:
        flags = ("model", "batch", "device", "repeats", "warmup", "seq_len", "threads")
        return fail("--" + e.field.replace("_", "-") if e.field in flags else e.field, e.message)
    cal.dump(out)
    print(
        f"{args.model}: iteration {cal.iteration_s:.3f} s on {cal.device} "
        f"(replayed as {cal.replay_iteration_s:.3f} s), {len(cal.layers)} layers, "
        f"{cal.gradient_bytes} gradient bytes -> {out}",
        file=sys.stderr,
    )
    return 0
