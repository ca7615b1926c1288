"""``sweep.png`` read by a person: one line per scheme and per value of every other axis
(none joined across a hidden axis), a seed-only sweep drawn per scheme with its label,
and ``sim sweep --quiet`` without Ray's start-up lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import require
from helpers.saved_figures import capture, points_under_legends

from cassini.sim.config import config_from_dict
from cassini.sim.report import sweep
from cassini.sim.report.sweep import METRICS, write_sweep

BASE = {
    "name": "sweep-plot",
    "cluster": {"racks": 4, "servers_per_rack": 2, "gpus_per_server": 1,
                "server_link_bps": 5e10, "oversubscription": 2},
    "workload": {"poisson": {"jobs": 2, "load": 0.9, "gpus": {"1": 1, "2": 1},
                             "iterations": [20, 40]}},
    "schedulers": ["themis", "themis+cassini"],
    "candidates": 2,
}  # fmt: skip
SCHEMES = {"themis": 0.3, "themis+cassini": 0.1}


def _row(point: dict, scheme: str) -> dict:
    """A made-up summary whose numbers say where it came from."""
    value = 1 + SCHEMES[scheme] + point.get("load", 1) * point.get("oversubscription", 1) / 10
    value += point.get("seed", 0) / 100
    return point | {"scheduler": scheme} | {m: value for m in METRICS}


def _series(ax) -> dict[str, tuple[list[float], list[float]]]:
    """Every error-bar line of ``ax`` by its label: (xs, ys)."""
    out = {}
    for container in ax.containers:
        line = container.lines[0]
        xy = np.asarray(line.get_xydata(), float)
        out[container.get_label()] = (list(xy[:, 0]), list(xy[:, 1]))
    return out


def _write(monkeypatch, tmp_path: Path, axes: dict):
    cfg = config_from_dict(BASE | {"sweep": axes})
    rows = [_row(p, s) for p in sweep.grid(cfg) for s in SCHEMES]
    figures = capture(monkeypatch)
    write_sweep(cfg, rows, "pool", tmp_path)
    return figures["sweep.png"]


def test_two_axes_draw_one_line_per_scheme_and_value(monkeypatch, tmp_path: Path) -> None:
    axes = {"load": [0.8, 1.0], "oversubscription": [2, 4], "seed": [0, 1]}
    fig = _write(monkeypatch, tmp_path, axes)
    panels = [ax for ax in fig.axes if ax.containers]
    assert len(panels) == 2
    for ax in panels:
        series = _series(ax)
        assert set(series) == {f"{s}, oversubscription {o}" for s in SCHEMES for o in ("2", "4")}, (
            series.keys()
        )
        for label, (xs, ys) in series.items():
            assert xs == [0.8, 1.0], label  # along x only: no zigzag over the hidden axis
            scheme, over = label.split(", oversubscription ")
            expect = [1 + SCHEMES[scheme] + x * float(over) / 10 + 0.005 for x in xs]
            assert ys == pytest.approx(expect), label
        assert ax.get_xlabel() == "load"
    assert points_under_legends(fig) == 0


def test_a_seed_only_sweep_is_drawn_per_scheme(monkeypatch, tmp_path: Path) -> None:
    fig = _write(monkeypatch, tmp_path, {"seed": [0, 1]})
    panels = [ax for ax in fig.axes if ax.containers]
    assert len(panels) == 2
    for ax in panels:
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert set(SCHEMES) <= set(ticks), ticks
        assert ax.get_xlabel()
        series = _series(ax)
        drawn = sorted(ys[0] for _, ys in series.values())
        assert drawn == pytest.approx(sorted(1 + v + 0.1 + 0.005 for v in SCHEMES.values()))
    text = " ".join([fig.get_suptitle(), *(ax.get_title() for ax in fig.axes)])
    assert "mean over seeds" in text and "0, 1" in text


class _FakeRay(types.ModuleType):
    """Ray as :func:`sweep._on_ray` uses it; ``init`` logs what a local Ray logs at start,
    honouring ``configure_logging`` / ``logging_level`` as Ray documents them."""

    def __init__(self) -> None:
        super().__init__("ray")
        self.calls: list[dict] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs) -> None:
        self.calls.append(kwargs)
        if kwargs.get("configure_logging", True):
            logging.getLogger("ray").setLevel(kwargs.get("logging_level", logging.INFO))
        logging.getLogger("ray._private.authentication").warning("Token authentication ...")
        logging.getLogger("ray._private.worker").info("Started a local Ray instance.")

    def remote(self, f):
        return types.SimpleNamespace(remote=lambda *a: f(*a))

    def wait(self, pending, num_returns=1):
        return pending[:num_returns], pending[num_returns:]

    def get(self, refs):
        return refs

    def shutdown(self) -> None:
        pass


def test_sweep_on_ray_logs_nothing_at_start(monkeypatch, caplog) -> None:
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(sweep, "run_point", lambda cfg, p: [_row(dict(p), "themis")])
    ray_logger = logging.getLogger("ray")
    level = ray_logger.level
    caplog.set_level(logging.DEBUG)
    try:
        rows, backend = sweep.run_sweep(config_from_dict(BASE | {"sweep": {"seed": [0]}}),
                                        backend="ray")  # fmt: skip
    finally:
        ray_logger.setLevel(level)
    assert backend == "ray" and len(rows) == 1 and fake.calls
    assert not [r for r in caplog.records if r.name.startswith("ray")], caplog.text


@pytest.mark.slow
def test_cli_sweep_quiet_on_ray_prints_nothing_on_stderr(tmp_path: Path) -> None:
    require(sweep.ray_available(), "Ray (make setup installs the [ray] extra)")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(BASE | {"sweep": {"seed": [0]}}))
    done = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "sim", "sweep", str(cfg), "--out",
         str(tmp_path / "out"), "--quiet", "--backend", "ray"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
