"""What a run records of its settings: the resolved network settings in results.json,
sweep.json and report.html; one warning per setting no scheduler of the run uses (stderr
and results.json, not an error); repeated scheduler names and parts refused."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cassini import cli
from cassini.errors import InputError
from cassini.sim.config import config_from_dict, run_warnings
from cassini.sim.schedulers import Scheduler

#: a tiny run: a few short jobs on two racks
BASE: dict[str, Any] = {
    "name": "settings",
    "cluster": {"racks": 2, "servers_per_rack": 2, "gpus_per_server": 4},
    "workload": {
        "poisson": {"jobs": 4, "load": 0.9, "gpus": {"4": 1, "8": 1}, "iterations": [20, 40]}
    },
    "schedulers": ["themis"],
}
DEFAULTS = {
    "network": "windows",
    "routing": "single",
    "priority_levels": 8,
    "mltcp": {"slope": 2.0, "intercept": 1.0, "scale_cut": True},
    "defrag": {"migration_s": 9.0, "cooldown_s": 300.0},
    "precision_deg": 5.0,
}


def _sim(tmp_path: Path, command: str, config: dict[str, Any], *extra: str) -> Path:
    path = tmp_path / f"{len(list(tmp_path.glob('*.json')))}.json"
    path.write_text(json.dumps(config))
    out = tmp_path / f"out_{path.stem}"
    args = ["sim", command, str(path), "--out", str(out), "--quiet", *extra]
    if command == "sweep":
        args += ["--backend", "pool", "--workers", "1"]
    assert cli.main(args) == 0
    return out


# -- 1: the resolved settings are recorded ------------------------------------------------
def test_results_and_report_say_which_network_model_ran(tmp_path: Path) -> None:
    """The same jobs under ``network: windows`` and ``continuous`` give different numbers;
    results.json and report.html said nothing of which model ran."""
    for network in ("windows", "continuous"):
        out = _sim(tmp_path, "run", BASE | {"network": network, "mltcp": {"slope": 3}})
        data = json.loads((out / "results.json").read_text())
        assert data["settings"] == DEFAULTS | {
            "network": network,
            "mltcp": DEFAULTS["mltcp"] | {"slope": 3},
        }
        assert data["profiles"] == "scale-to-nic"  # kept beside it
        page = (out / "report.html").read_text()
        line = re.search(r'<p id="settings">(.*?)</p>', page)
        assert line is not None, page[:2000]
        text = re.sub(r"<[^>]+>", "", line.group(1))
        for shown in (
            f"network: {network}",
            "routing: single",
            "priority_levels: 8",
            "mltcp: {slope: 3, intercept: 1, scale_cut: true}",
            "defrag: {migration_s: 9, cooldown_s: 300}",
            "precision_deg: 5",
            "profiles: scale-to-nic",
        ):
            assert shown in text, text


def test_sweep_json_records_the_settings(tmp_path: Path) -> None:
    config = BASE | {"network": "continuous", "routing": "ecmp", "sweep": {"seed": [0, 1]}}
    data = json.loads((_sim(tmp_path, "sweep", config) / "sweep.json").read_text())
    assert data["settings"] == DEFAULTS | {"network": "continuous", "routing": "ecmp"}
    assert data["warnings"] == []


# -- 2: settings no scheduler uses are said, not silently ignored --------------------------
def test_unused_settings_warn_on_stderr_and_in_results(tmp_path: Path, capsys) -> None:
    config = BASE | {
        "cluster": {"racks": 1, "servers_per_rack": 4, "gpus_per_server": 4, "spines": 4},
        "priority_levels": 8,
        "mltcp": {"slope": 3},
    }
    out = _sim(tmp_path, "run", config)
    warned = [w for w in capsys.readouterr().err.splitlines() if w.startswith("sim run: ")]
    assert warned == [
        "sim run: priority_levels: no scheduler of this run uses priority classes "
        "(crux, priority); ignored",
        "sim run: mltcp: no scheduler of this run uses MLTCP (mltcp); ignored",
        "sim run: cluster.spines: a one-rack cluster sends no traffic through spines; ignored",
    ]
    data = json.loads((out / "results.json").read_text())
    assert data["warnings"] == [w.removeprefix("sim run: ") for w in warned]
    assert "uses MLTCP (mltcp); ignored" in (out / "report.html").read_text()
    # --scheduler picks the run's schedulers: one that uses them silences the warnings
    _sim(tmp_path, "run", config, "--scheduler", "themis+crux+mltcp")
    assert "spines" in capsys.readouterr().err  # still one rack
    used = {"schedulers": ["themis+crux+mltcp"], "cluster": BASE["cluster"] | {"spines": 2}}
    _sim(tmp_path, "run", config | used)
    assert "sim run: " not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "schedulers", "key"),
    [
        ({"routing": "ecmp"}, ["ideal", "themis+crux", "themis+single"], "routing"),
        ({"defrag": {"cooldown_s": 10}}, ["themis", "themis+cassini"], "defrag"),
        ({"precision_deg": 2}, ["themis", "themis+defrag"], "precision_deg"),
        ({"priority_levels": 4}, ["ideal", "themis+mltcp"], "priority_levels"),
    ],
)
def test_each_unused_setting_is_named(extra, schedulers, key) -> None:
    cfg = config_from_dict(BASE | extra | {"schedulers": schedulers})
    assert [w.split(":")[0] for w in run_warnings(cfg)] == [key]
    used = {"routing": "themis", "defrag": "themis+defrag", "precision_deg": "themis+cassini",
            "priority_levels": "themis+priority"}[key]  # fmt: skip
    assert run_warnings(config_from_dict(BASE | extra | {"schedulers": [used]})) == []
    # a sweep's scheduler axis is the run's schedulers
    swept = config_from_dict(BASE | extra | {"schedulers": schedulers,
                                             "sweep": {"scheduler": [used]}})  # fmt: skip
    assert run_warnings(swept) == []
    # defaults never warn: only what the config gave
    assert run_warnings(config_from_dict(BASE | {"schedulers": schedulers})) == []


# -- 3: repeated scheduler names and parts ---------------------------------------------
@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"schedulers": ["themis", "themis"]}, r"schedulers\[1\]: 'themis' repeats schedulers\[0"),
        ({"schedulers": ["themis", "themis+crux+crux"]}, r"schedulers\[1\]: .* part 'crux' twice"),
        ({"sweep": {"scheduler": ["ideal", "las", "ideal"]}}, r"sweep.scheduler\[2\]: 'ideal' rep"),
        ({"sweep": {"scheduler": ["themis+mltcp+mltcp"]}}, r"sweep.scheduler\[0\]: .* twice"),
    ],
)  # fmt: skip
def test_repeated_schedulers_and_parts_are_refused(config, field) -> None:
    with pytest.raises(InputError, match=field):
        config_from_dict(BASE | config)


def test_a_part_named_twice_is_refused_like_two_routing_parts() -> None:
    names = ("themis+crux+crux", "themis+cassini+mltcp+cassini", "pollux+first+packed",
             "themis+crux+priority", "themis+priority+crux", "themis+cassini+crux+priority")
    for name in names:
        with pytest.raises(InputError, match=r"twice( \(.*\))?; give each part once"):
            Scheduler.parse(name)
    with pytest.raises(InputError, match="2 routing parts"):
        Scheduler.parse("themis+ecmp+crux")
    with pytest.raises(InputError, match=r"sharing part 'priority' twice \(bundle 'crux' incl"):
        Scheduler.parse("themis+priority+crux")
    # a bundle's default part named again stays allowed, as documented
    assert Scheduler.parse("themis+cassini+held").canonical == "themis+cassini"


def test_the_cli_refuses_repeats_with_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.json"
    args = ["--out", str(tmp_path / "out"), "--quiet"]
    for schedulers, extra, where in (
        (["themis", "themis"], [], "schedulers[1]"),
        (["themis+crux+crux"], [], "schedulers[0]"),
        (["themis"], ["--scheduler", "las", "--scheduler", "las"], "--scheduler[1]"),
    ):
        path.write_text(json.dumps(BASE | {"schedulers": schedulers}))
        assert cli.main(["sim", "run", str(path), *args, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{where}: " in err[0], err
    assert not (tmp_path / "out").exists()
