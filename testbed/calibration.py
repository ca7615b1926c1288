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

Measuring a model is :mod:`testbed.calibrate` (``testbed calibrate``); this module is the
file format, read strictly through :class:`cassini.schema.Reader`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from cassini.errors import InputError
from cassini.schema import Reader
from testbed.model_names import MODEL_NAMES

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibrations"
"""The shipped calibration files, ``<model>.json``."""

PROVENANCES = ("gpu", "cpu")
DEVICES = ("cpu", "cuda")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SCHEMA_VERSION = 1


CalibrationError = InputError
"""A bad or missing calibration field (``str()`` starts with the field's path): the
project's one input error, under the name this module's callers know."""


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
        :class:`~cassini.errors.InputError` naming it."""
        return _parse(raw)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


def load_calibration(path: str | Path) -> Calibration:
    """Read and validate a calibration file; :class:`~cassini.errors.InputError` names
    the file (missing, unreadable, empty, binary, not JSON) or the bad field."""
    from cassini import files

    text = files.read_text(path)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}:{e.colno}", f"not JSON: {e.msg}") from None
    return _parse(raw)


def default_calibration_path(model: str) -> Path:
    """The shipped calibration of ``model``."""
    return CALIBRATION_DIR / f"{model}.json"


# ---------------------------------------------------------------- validation


def _parse(raw: Any) -> Calibration:
    r = Reader(raw, "(file)" if not isinstance(raw, dict) else "")
    model = r.choice("model", MODEL_NAMES)
    device = r.choice("device", DEVICES)
    provenance = r.choice("provenance", PROVENANCES)
    dtype = r.choice("dtype", tuple(DTYPE_BYTES))
    factor = r.number("cpu_scale_factor", positive=True, optional=True)
    if provenance == "cpu" and factor is None:
        raise InputError("cpu_scale_factor", "required (a number > 0) for provenance cpu")
    if provenance == "gpu" and factor is not None:
        raise InputError("cpu_scale_factor", "must be null for provenance gpu")
    if provenance == "gpu" and device != "cuda":
        raise InputError("provenance", f"gpu, but device is {device!r}")
    layers = tuple(_layer(x, DTYPE_BYTES[dtype]) for x in r.objects("layers", "layer timings"))
    indices = sorted(i for layer in layers for i in layer.param_indices)
    if indices != list(range(len(indices))):
        raise InputError(
            "layers", "param_indices must cover 0..n-1 once each (the registration order)"
        )
    grad = r.integer("gradient_bytes", minimum=1)
    total = sum(layer.param_bytes for layer in layers)
    if grad != total:
        raise InputError("gradient_bytes", f"{grad} != sum of layers' param_bytes {total}")
    extra = r.mapping("extra", {})
    version = r.integer("version", minimum=1, default=SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise InputError("version", f"{SCHEMA_VERSION} expected, got {version}")
    r.no_other_fields(Calibration.__dataclass_fields__)
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


def _layer(r: Reader, elem_bytes: int) -> LayerTiming:
    numels = r.int_list("param_numels", minimum=1)
    indices = r.int_list("param_indices", minimum=0)
    if len(indices) != len(numels):
        raise InputError(r.field("param_indices"), "one index per entry of param_numels")
    param_bytes = r.integer("param_bytes", minimum=1)
    if param_bytes != elem_bytes * sum(numels):
        raise InputError(
            r.field("param_bytes"),
            f"{param_bytes} != {elem_bytes} bytes x {sum(numels)} elements of param_numels",
        )
    r.no_other_fields(LayerTiming.__dataclass_fields__)
    return LayerTiming(
        name=r.string("name"),
        forward_s=r.number("forward_s"),
        backward_s=r.number("backward_s"),
        param_bytes=param_bytes,
        param_numels=tuple(numels),
        param_indices=tuple(indices),
    )


def with_scale(
    cal: Calibration, factor: float, note: str, target_iteration_s: float | None
) -> Calibration:
    """``cal`` (a CPU calibration) with ``cpu_scale_factor`` = ``factor`` and the note
    saying how the factor was obtained."""
    if cal.provenance != "cpu":
        raise InputError("provenance", "only a CPU calibration takes a cpu_scale_factor")
    if not (factor > 0 and math.isfinite(factor)):
        raise InputError("cpu_scale_factor", f"must be > 0, got {factor!r}")
    return replace(
        cal, cpu_scale_factor=factor, scale_note=note, scale_target_iteration_s=target_iteration_s
    )


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.calibration")
