"""testbed.calibration: the file format (round trip, every bad field named), a real CPU
calibration's bookkeeping, the shipped files, and ``testbed calibrate``'s bad input."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import LazyModule, require_module

from testbed import calibration as cm
from testbed import cli
from testbed.calibrate import calibrate
from testbed.model_names import MODEL_NAMES


@pytest.fixture
def torch():
    """torch (and transformers) for the tests that build models, at test time, not at
    collection: every pytest process collects this file, and importing them took ~4 s."""
    require_module("transformers", "the testbed extra")
    return require_module("torch", "the testbed extra")


models = LazyModule("testbed.models", "the testbed extra (torch)")


def sample_dict() -> dict[str, Any]:
    """A small valid calibration (three layers, four tensors) as parsed JSON."""
    layers = [
        {"name": "a", "forward_s": 0.01, "backward_s": 0.02, "param_bytes": 4 * 30,
         "param_numels": [20, 10], "param_indices": [0, 1]},
        {"name": "b", "forward_s": 0.0, "backward_s": 0.01, "param_bytes": 4 * 5,
         "param_numels": [5], "param_indices": [3]},
        {"name": "c", "forward_s": 0.02, "backward_s": 0.03, "param_bytes": 4 * 7,
         "param_numels": [7], "param_indices": [2]},
    ]  # fmt: skip
    return {
        "model": "vgg11",
        "batch": 2,
        "seq_len": None,
        "input": "images",
        "device": "cpu",
        "device_name": "test CPU",
        "torch_version": "2.13.0",
        "dtype": "float32",
        "provenance": "cpu",
        "cpu_scale_factor": 0.5,
        "scale_note": "test",
        "scale_target_iteration_s": None,
        "command": "testbed calibrate ...",
        "repeats": 3,
        "warmup": 1,
        "threads": 2,
        "created": "2026-01-01T00:00:00Z",
        "layers": layers,
        "forward_s": 0.03,
        "backward_s": 0.06,
        "optimizer_s": 0.01,
        "iteration_s": 0.11,
        "gradient_bytes": 4 * 42,
        "version": 1,
        "extra": {},
    }


def test_round_trip_and_derived_times(tmp_path: Path) -> None:
    cal = cm.Calibration.from_dict(sample_dict())
    assert cal.layers[1].param_indices == (3,)
    assert cal.param_numels_in_registration_order() == [20, 10, 7, 5]
    assert cal.time_factor == 0.5
    assert cal.replay_iteration_s == pytest.approx(0.055)
    assert cal.replay_compute_s == pytest.approx(0.5 * (0.09 + 0.01))
    path = tmp_path / "c.json"
    cal.dump(path)
    again = cm.load_calibration(path)
    assert again == cal
    assert json.loads(path.read_text()) == cal.to_dict()


def _set(d: dict[str, Any], path: str, value: Any) -> None:
    keys: list[Any] = []
    for part in path.replace("]", "").replace("[", ".").split("."):
        keys.append(int(part) if part.isdigit() else part)
    for k in keys[:-1]:
        d = d[k]
    if value is _DELETE:
        del d[keys[-1]]
    else:
        d[keys[-1]] = value


_DELETE = object()

BAD_FIELDS = [
    ("batch", _DELETE, "batch: missing"),
    ("batch", 0, "batch: must be >= 1"),
    ("batch", 2.5, "batch: an integer"),
    ("model", "alexnet", "model: one of"),
    ("device", "tpu", "device: one of cpu, cuda"),
    ("provenance", "guess", "provenance: one of gpu, cpu"),
    ("provenance", "gpu", "cpu_scale_factor: must be null for provenance gpu"),
    ("cpu_scale_factor", None, "cpu_scale_factor: required"),
    ("cpu_scale_factor", -1, "cpu_scale_factor: must be > 0"),
    ("dtype", "int8", "dtype: one of"),
    ("iteration_s", 0, "iteration_s: must be > 0"),
    ("optimizer_s", "fast", "optimizer_s: a finite number"),
    ("command", _DELETE, "command: missing"),
    ("scale_note", 3, "scale_note: a string"),
    ("layers", [], "layers: a non-empty list"),
    ("layers[2].backward_s", -0.1, "layers[2].backward_s: must be >= 0"),
    ("layers[0].forward_s", float("nan"), "layers[0].forward_s: a finite number"),
    ("layers[1].name", _DELETE, "layers[1].name: missing"),
    ("layers[0].param_bytes", 4 * 31, "layers[0].param_bytes: 124 != 4 bytes x 30"),
    ("layers[0].param_numels[1]", 0, "layers[0].param_numels[1]: an integer >= 1"),
    ("layers[0].param_indices", [0], "layers[0].param_indices: one index per entry"),
    ("layers[1].param_indices", [1], "layers: param_indices must cover 0..n-1"),
    ("layers[1].colour", "red", "layers[1].colour: unknown field"),
    ("gradient_bytes", 4 * 41, "gradient_bytes: 164 != sum of layers' param_bytes 168"),
    ("surprise", 1, "surprise: unknown field"),
    ("version", 2, "version: 1 expected"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD_FIELDS, ids=[b[0] for b in BAD_FIELDS])
def test_every_bad_field_is_named(path: str, value: Any, message: str) -> None:
    raw = copy.deepcopy(sample_dict())
    _set(raw, path, value)
    with pytest.raises(cm.CalibrationError) as err:
        cm.Calibration.from_dict(raw)
    assert str(err.value).startswith(message), str(err.value)


def test_load_rejects_non_json_and_non_objects(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(cm.CalibrationError, match="not JSON"):
        cm.load_calibration(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(cm.CalibrationError, match="a JSON object"):
        cm.load_calibration(bad)


def test_real_cpu_calibration_adds_up(torch) -> None:
    cal = calibrate("resnet50", batch=1, device="cpu", repeats=1, warmup=0, command="t")
    # one repeat: the per-layer attribution sums to the whole passes exactly
    assert sum(x.forward_s for x in cal.layers) == pytest.approx(cal.forward_s, rel=1e-6)
    assert sum(x.backward_s for x in cal.layers) == pytest.approx(cal.backward_s, rel=1e-6)
    assert cal.iteration_s >= cal.forward_s + cal.backward_s + cal.optimizer_s
    assert cal.gradient_bytes == 4 * models.parameter_count("resnet50")
    assert len(cal.layers) == 107  # 53 convolutions, 53 batch norms, the classifier
    assert all(x.forward_s >= 0 and x.backward_s >= 0 for x in cal.layers)
    assert cal.layers[0].name == "resnet.embedder.embedder.convolution"
    assert cal.layers[-1].name == "classifier.1"
    assert cal.provenance == "cpu" and "UNSCALED" in cal.scale_note
    assert cm.Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_shipped_calibrations(model: str) -> None:
    cal = cm.load_calibration(cm.default_calibration_path(model))
    assert cal.model == model
    assert cal.gradient_bytes == 4 * models.parameter_count(model)
    assert cal.provenance == "cpu" and cal.device == "cpu"
    assert cal.cpu_scale_factor is not None and 0 < cal.cpu_scale_factor < 1
    assert "NOT a GPU measurement" in cal.scale_note
    assert cal.command.startswith(f"testbed calibrate --model {model} ")
    assert "--device cpu" in cal.command
    # the factor maps this CPU iteration to the stated GPU-class iteration
    assert cal.scale_target_iteration_s is not None
    assert cal.replay_iteration_s == pytest.approx(cal.scale_target_iteration_s, rel=1e-3)
    assert 0.03 < cal.replay_iteration_s < 0.5


GPU_DIR = cm.CALIBRATION_DIR / "gpu-h200"


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_shipped_gpu_calibrations(model: str) -> None:
    """The H200 files (scripts/device/calibrate_gpu.sh): CUDA-event times, no factor,
    per-layer times that add up to the passes, and an iteration no shorter than its parts."""
    cal = cm.load_calibration(GPU_DIR / f"{model}.json")
    assert cal.model == model and cal.provenance == "gpu" and cal.device == "cuda"
    assert "H200" in cal.device_name
    assert cal.cpu_scale_factor is None
    assert cal.gradient_bytes == 4 * models.parameter_count(model)
    assert "--device cuda" in cal.command
    assert cal.replay_iteration_s == pytest.approx(cal.iteration_s)
    assert cal.iteration_s >= 0.99 * (cal.forward_s + cal.backward_s + cal.optimizer_s)
    # per-layer medians need not add up to the median pass (wide_resnet101: 5.4 % short)
    assert sum(x.forward_s for x in cal.layers) == pytest.approx(cal.forward_s, rel=0.1)
    assert sum(x.backward_s for x in cal.layers) == pytest.approx(cal.backward_s, rel=0.1)
    # a GPU is much faster than the CPU that made the shipped files, per sample
    cpu = cm.load_calibration(cm.default_calibration_path(model))
    assert cal.iteration_s / cal.batch < cpu.iteration_s / cpu.batch / 10


BAD_ARGS = [
    (["--model", "alexnet"], "--model"),
    (["--batch", "0"], "--batch"),
    (["--repeats", "0"], "--repeats"),
    (["--warmup", "-1"], "--warmup"),
    (["--cpu-scale-factor", "0.1"], "--scale-note"),
    (["--cpu-scale-factor", "-2", "--scale-note", "x"], "--cpu-scale-factor"),
    (["--gpu-iteration-s", "0.1", "--cpu-scale-factor", "0.1", "--scale-note", "x"],
     "--gpu-iteration-s"),
    (["--out", "/nonexistent/dir/x.json"], "--out"),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "flag"), BAD_ARGS, ids=[b[1] + str(i) for i, b in
                                                          enumerate(BAD_ARGS)])  # fmt: skip
def test_cli_bad_input_exits_2_naming_the_flag(
    extra: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["calibrate", "--model", "vgg11", "--batch", "2", "--device", "cpu"]
    args += ["--out", str(tmp_path / "x.json")]
    assert cli.main(args + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"testbed calibrate: {flag}:"), err
    assert not (tmp_path / "x.json").exists()


def test_cli_cuda_without_a_gpu_exits_2(
    torch, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # runs on a GPU host too
    out = tmp_path / "x.json"
    args = ["calibrate", "--model", "vgg11", "--batch", "2", "--device", "cuda", "--out", str(out)]
    assert cli.main(args) == 2
    assert capsys.readouterr().err.startswith("testbed calibrate: --device: cuda requested")
