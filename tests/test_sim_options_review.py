"""Sim options review (2026-11-29): excess demand counted per physical link on every
cluster form, pods with spines refused alike by the run and ``topo show``, the uniform
form's spines named when no scheduler routes per spine, ``ideal``'s busiest links
explained, the uniform form's ToRs named as the run names them, and recorded-placement
errors naming the config file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cassini import cli
from cassini.errors import InputError
from cassini.sim.config import config_from_dict, read_config, run_warnings
from cassini.sim.report.run import results_json, run_config
from cassini.sim.results import JobRecord, SimResult
from cassini.sim.topologies import show
from cassini.sim.topologies.servers import server_table

UNIFORM = {"racks": 3, "servers_per_rack": 2, "gpus_per_server": 1}
WORKLOAD = {"poisson": {"jobs": 8, "load": 1.5, "gpus": {2: 1, 3: 1, 4: 1},
                        "iterations": [20, 40]}}  # fmt: skip


def _config(tmp_path: Path, cfg: dict[str, Any], name: str = "c.json") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(cfg))
    return f


def _result(excess: dict[str, float]) -> SimResult:
    job = JobRecord("j0", "vgg16", 1, 1, 1, 10, 0.0, 0.0, 1.0, 0.1, 0.1, 1.0, 0.0, ((0, 1),))
    one = np.ones(1)
    return SimResult("themis", (job,), one, one, one, excess, 1.0, 0.0, 0, 0, 0)


# -- 1: the same congestion, the same link-seconds on both forms --------------------------
def test_a_switch_links_two_directions_count_once_and_whole_links_as_they_are() -> None:
    uniform = {"tor0": 5.0, "srv1": 2.0, "pod0": 1.0, "tor1s2": 0.5}
    assert _result(uniform).excess_by_link() == uniform  # the uniform form: unchanged
    directed = {"tor0-spine0:up": 5.0, "tor0-spine0:down": 5.0, "srv1": 2.0,
                "agg0-core0:up": 1.0, "agg0-core0:down": 3.0}  # fmt: skip
    assert _result(directed).excess_by_link() == {
        "tor0-spine0": 5.0, "srv1": 2.0, "agg0-core0": 3.0}  # fmt: skip
    s = _result(directed).summary()
    assert (s["excess_demand_s_total"], s["links_with_excess"]) == (10.0, 3)
    assert s["excess_demand_s_max_link"] == 5.0
    packet = _result({"tor0-spine0:up": math.nan, "tor0-spine0:down": math.nan})
    assert math.isnan(packet.excess_by_link()["tor0-spine0"])  # not measured stays so
    assert packet.summary()["links_with_excess"] is None


def test_generate_two_tier_reports_the_uniform_forms_excess_demand() -> None:
    """Reviewer's sp1.yaml / gsp1.yaml: every job identical, the generated form reported
    twice the link-seconds and links (one per direction)."""
    base = {"workload": WORKLOAD, "schedulers": ["themis", "themis+random"], "seed": 5}
    uniform = config_from_dict(base | {"cluster": UNIFORM | {"spines": 1}})
    generated = config_from_dict(base | {"cluster": UNIFORM | {"generate": "two-tier"}})
    a = results_json(uniform, run_config(uniform))
    b = results_json(generated, run_config(generated))
    assert a["excess_demand_s_per_link"]["themis+random"]  # congestion to compare
    for name in base["schedulers"]:
        ja = [(j["start_s"], j["finish_s"]) for j in a["jobs"][name]]
        assert ja == [(j["start_s"], j["finish_s"]) for j in b["jobs"][name]]
        renamed = {f"{link}-spine0": s for link, s in a["excess_demand_s_per_link"][name].items()}
        assert b["excess_demand_s_per_link"][name] == renamed
        for key in ("excess_demand_s_total", "excess_demand_s_max_link", "links_with_excess"):
            assert b["summaries"][name][key] == a["summaries"][name][key]


# -- 2: pods with spines: one rule for the run and topo show -------------------------------
def test_pods_with_spines_are_refused_by_the_run_and_topo_show_naming_cluster_spines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = {"racks": 4, "servers_per_rack": 2, "racks_per_pod": 2, "gpus_per_server": 1}
    cfg = {"workload": {"poisson": {"jobs": 2, "load": 0.5, "gpus": {2: 1}}},
           "schedulers": ["themis", "themis+random+ecmp"]}  # fmt: skip
    with pytest.raises(InputError) as e:
        config_from_dict(cfg | {"cluster": cluster | {"spines": 2}})
    assert e.value.field == "cluster.spines" and "racks_per_pod" in e.value.problem
    f = _config(tmp_path, cfg | {"cluster": cluster | {"spines": 2}})
    out = tmp_path / "out"
    assert cli.main(["sim", "run", str(f), "--out", str(out), "--quiet"]) == 2
    assert f"error: {f}: cluster.spines: 2 spines with racks_per_pod" in capsys.readouterr().err
    assert not out.exists()
    assert cli.main(["sim", "topo", "show", str(f)]) == 2
    assert f"error: {f}: cluster.spines: 2 spines with racks_per_pod" in capsys.readouterr().err
    config_from_dict(cfg | {"cluster": cluster | {"spines": 1}})  # one spine: the pod tier


# -- 3: the uniform form's spines under single routing -------------------------------------
SPINES_WARNING = "cluster.spines: 4 spines only matter to ecmp and crux routing"


@pytest.mark.parametrize(
    ("extra", "schedulers", "warned"),
    [
        ({}, ["themis", "themis+cassini", "themis+mltcp"], True),
        ({}, ["ideal", "themis+single"], True),
        ({}, ["themis", "themis+ecmp"], False),  # one routes per spine
        ({}, ["themis+crux"], False),
        ({"routing": "ecmp"}, ["themis", "themis+cassini"], False),  # the config's routing
        ({"sweep": {"scheduler": ["themis+ecmp"]}}, ["themis"], False),  # the run's axis
    ],
)
def test_uniform_spines_warn_when_no_scheduler_routes_per_spine(
    extra: dict[str, Any], schedulers: list[str], warned: bool
) -> None:
    cfg = config_from_dict({"cluster": UNIFORM | {"spines": 4}, "workload": WORKLOAD,
                            "schedulers": schedulers} | extra)  # fmt: skip
    lines = [w for w in run_warnings(cfg) if w.startswith("cluster.spines")]
    if warned:
        assert len(lines) == 1 and lines[0].startswith(SPINES_WARNING)
        assert "single routing balances perfectly" in lines[0] and lines[0].endswith("ignored")
    else:
        assert lines == []


def test_generated_spines_and_one_spine_never_warn_and_topo_show_says_the_same(
    tmp_path: Path,
) -> None:
    for cluster in (UNIFORM | {"generate": "two-tier", "spines": 4}, UNIFORM | {"spines": 1}):
        cfg = config_from_dict({"cluster": cluster, "workload": WORKLOAD,
                                "schedulers": ["themis"]})  # fmt: skip
        assert run_warnings(cfg) == []  # single takes spine 0 of a generated fabric
        _, notes = show.load(_config(tmp_path, {"cluster": cluster}))
        assert not [n for n in notes if "spines" in n]
    _, notes = show.load(_config(tmp_path, {"cluster": UNIFORM | {"spines": 4}}))
    assert [n for n in notes if n.startswith(SPINES_WARNING)]


# -- 4: ideal's busiest links ---------------------------------------------------------------
def test_ideal_busiest_links_above_capacity_are_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reviewer's c_h2t.yaml: ideal's tor2-spine0 peaks at 1.11 of its capacity with no
    excess; the report says why (a dedicated network per job), the docs' 0..1 too."""
    (tmp_path / "twotier.csv").write_text("host,tor\nx1,t1\nx2,t1\ny1,t2\ny2,t2\ny3,t2\nz1,t3\n")
    poisson = {"jobs": 8, "load": 1.2, "gpus": {1: 1, 2: 2, 3: 1, 4: 2, 6: 1},
               "iterations": [30, 80]}  # fmt: skip
    f = _config(tmp_path, {"cluster": {"hosts": "twotier.csv", "gpus_per_server": 2},
                           "workload": {"poisson": poisson},
                           "schedulers": ["ideal", "themis"], "seed": 0})  # fmt: skip
    out = tmp_path / "out"
    assert cli.main(["sim", "run", str(f), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    report = json.loads((out / "results.json").read_text())["report"]
    over = [r for r in report["busiest_links"]["ideal"] if r["peak_utilisation"] > 1]
    assert over and all(r["excess_s"] == 0 for r in over)  # the case to explain
    assert all(r["peak_utilisation"] <= 1 + 1e-9 for r in report["busiest_links"]["themis"])
    notes = [n for n in report["notes"] if n.startswith("ideal: every job runs on a dedicated")]
    assert len(notes) == 1 and "peak_utilisation above 1" in notes[0]
    assert notes[0] in (out / "report.html").read_text().replace("&#x27;", "'")


# -- 5a: the uniform form's ToRs, one naming -------------------------------------------------
@pytest.mark.parametrize("pods", [{}, {"racks_per_pod": 2, "pod_oversubscription": 2}])
def test_topo_show_names_the_uniform_forms_tors_as_the_run_does(
    tmp_path: Path, pods: dict[str, Any]
) -> None:
    cluster = {"racks": 4, "servers_per_rack": 2, "gpus_per_server": 2} | pods
    f = _config(tmp_path, {"cluster": cluster, "workload": WORKLOAD, "schedulers": ["themis"]})
    shown = show.summarise(*show.load(f))
    run = server_table(read_config(f).cluster)  # results.json's servers
    assert [s["tors"] for s in shown["servers"]] == [s["tors"] for s in run]
    assert [s["tors"] for s in run] == [[f"tor{i // 2}"] for i in range(8)]
    assert [t["name"] for t in shown["tors"]] == [f"tor{r}" for r in range(4)]


# -- 5b: recorded placement's errors name the config file ------------------------------------
TRACE = "job_id,arrival_s,gpus,model,iterations,hosts\n"


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ("a,0,4,resnet50,30,h1:2;h2:2\nb,1,2,vgg16,30,h3:2\nc,2,4,bert,30,h4:2;h5:2\n",
         "cluster: the trace names 5 hosts, the cluster has 4 servers"),
        ("a,0,4,resnet50,30,h1:2;h2:2\nc,2,3,bert,30,h4:3\n",
         "jobs.c.hosts: 3 GPUs on host 'h4', its server has 2"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("override", [False, True])
def test_recorded_placement_errors_name_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str, error: str, override: bool
) -> None:
    (tmp_path / "tr.csv").write_text(TRACE + rows)
    schedulers = ["themis"] if override else ["themis", "recorded"]
    f = _config(tmp_path, {"cluster": {"racks": 2, "servers_per_rack": 2, "gpus_per_server": 2},
                           "workload": {"trace": "tr.csv"}, "schedulers": schedulers})  # fmt: skip
    args = ["sim", "run", str(f), "--out", str(tmp_path / "out"), "--quiet"]
    assert cli.main(args + (["--scheduler", "recorded"] if override else [])) == 2
    assert f"cassini sim: error: {f}: {error}\n" in capsys.readouterr().err
