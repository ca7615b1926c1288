"""The simulator's outputs after a researcher's review (2026-11-29): which server index is
which host (results.json, topo show --json, --timeline-link), the packed rule as the docs
tell it, --help's parts from the tables, a sweep that records what reproduces it, trace's
skipped rows, messages for a setting beside a host table's column or a sweep axis the
cluster cannot take, report.html's keys in the unit shown, rail capacities per NIC,
results.json's every field documented, and its config path absolute."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.sim_configs import TINY_CONFIG

from cassini import cli
from cassini.sim.config import config_from_dict
from cassini.sim.report.html_report import number
from cassini.sim.report.run import simulate_config, write_run

ROOT = Path(__file__).resolve().parents[1]
#: hosts listed out of rack order: server indices follow the racks, not the rows
SHUFFLED = """host,gpus,core,agg,tor,host_bps,tor_uplink_bps
n10,8,core,podB,r4,1e11,1e11
n05,2,core,podB,r3,2.5e10,1.5e11
n01,8,core,podA,r1,1e11,2e11
n04,8,core,podA,r2,1e11,1e11
n02,8,core,podA,r1,1e11,2e11
"""
RECORDED = """job_id,arrival_s,gpus,model,iterations,hosts
r1,0,10,vgg16,40,n10:8;n05:2
r2,1,16,bert,40,n01:8;n04:8
r3,2,4,gpt2,30,n02:4
"""
REC_CONFIG = {
    "cluster": {"hosts": "hosts.csv"},
    "workload": {"trace": "rec.csv"},
    "schedulers": ["recorded", "themis"],
}


def _write(folder: Path, config: Mapping[str, Any], name: str = "c.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """The recorded trace on the shuffled host table, run through the CLI."""
    folder = tmp_path_factory.mktemp("rec")
    (folder / "hosts.csv").write_text(SHUFFLED)
    (folder / "rec.csv").write_text(RECORDED)
    config = _write(folder, REC_CONFIG)
    assert cli.main(["sim", "run", str(config), "--out", str(folder / "out"), "--quiet"]) == 0
    return folder, json.loads((folder / "out" / "results.json").read_text())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """TINY_CONFIG (themis and themis+cassini) run through the CLI."""
    folder = tmp_path_factory.mktemp("tiny")
    config = _write(folder, TINY_CONFIG)
    assert cli.main(["sim", "run", str(config), "--out", str(folder / "out"), "--quiet"]) == 0
    return folder / "out", json.loads((folder / "out" / "results.json").read_text())


# -- item 4: server index -> host ---------------------------------------------------------
def test_results_json_says_which_server_index_is_which_host(recorded) -> None:
    _, data = recorded
    servers = data["servers"]
    assert [s["index"] for s in servers] == list(range(5))
    by_index = {s["index"]: s for s in servers}
    assert by_index[0]["host"] == "n01" and by_index[0]["tors"] == ["core/podA/r1"]
    # recorded placement puts each job on the hosts its trace names: the table agrees
    wanted = {"r1": {"n10": 8, "n05": 2}, "r2": {"n01": 8, "n04": 8}, "r3": {"n02": 4}}
    for job in data["jobs"]["recorded"]:
        hosts = {by_index[i]["host"]: g for i, g in job["placement"]}
        assert hosts == wanted[job["job_id"]]
    n05 = next(s for s in servers if s["host"] == "n05")
    assert n05["gpus"] == 2 and n05["link_bps"] == 2.5e10 and n05["links"] == ["srv3"]
    assert n05["rack"] == 2 and n05["pod"] == 1


def test_timeline_link_takes_a_host_name(recorded, capsys) -> None:
    folder, data = recorded
    n05 = next(s for s in data["servers"] if s["host"] == "n05")
    code, _, err = _cli(capsys, "sim", "run", str(folder / "c.json"), "--out",
                        str(folder / "o2"), "--quiet", "--timeline-link", "n05")  # fmt: skip
    assert code == 0, err
    report = json.loads((folder / "o2" / "results.json").read_text())["report"]
    assert report["timeline_link"] == n05["links"][0]
    assert "n05" in report["timeline_link_chosen"]
    code, _, err = _cli(capsys, "sim", "run", str(folder / "c.json"), "--out",
                        str(folder / "o3"), "--quiet", "--timeline-link", "n99")  # fmt: skip
    assert code == 2 and "--timeline-link" in err and "host name" in err


def test_topo_show_json_lists_the_same_servers(recorded, capsys) -> None:
    folder, data = recorded
    code, out, err = _cli(capsys, "sim", "topo", "show", str(folder / "hosts.csv"), "--json")
    assert code == 0, err
    assert json.loads(out)["servers"] == data["servers"]


def test_a_host_with_rails_names_its_links(tmp_path: Path) -> None:
    from cassini.errors import InputError
    from cassini.sim.report.page import given_link

    cfg = config_from_dict(RAIL)
    with pytest.raises(InputError, match=r"--timeline-link: host 'g0h1' is server 1.*srv1\.0"):
        given_link(cfg, "g0h1")
    assert given_link(cfg, "srv1.1") == "srv1.1"


# -- item 5: the packed rule as docs/internals.md tells it --------------------------------
def test_internals_tells_the_packed_rule_the_code_follows(tmp_path: Path) -> None:
    from cassini.sim.parts.placement import candidate_placements
    from cassini.sim.topologies.hosts import read_host_table

    text = " ".join((ROOT / "docs" / "internals.md").read_text().split())
    assert "fewest racks, then fewest servers" not in text
    assert "5 servers where 3 would do" in text
    table = tmp_path / "pack.csv"
    table.write_text("host,gpus,tor\ns1,2,r1\ns2,2,r1\ns3,2,r1\ns4,2,r1\nbig,8,r2\n")
    topo = read_host_table(table)
    free = np.array(topo.gpus_per_host)
    packed = candidate_placements(topo, free, 12, 4, np.random.default_rng(0))[0]
    assert packed == {0: 2, 1: 2, 2: 2, 3: 2, 4: 4}  # 5 servers in the fewest racks (2)
    # one that fits a server: best fit, the fullest server that still has room
    free = np.array([8, 8, 8, 8, 3])
    assert candidate_placements(topo, free, 3, 4, np.random.default_rng(0))[0] == {4: 3}


# -- item 6: --help lists the parts tables ------------------------------------------------
def test_help_lists_a_part_added_to_a_table(monkeypatch, capsys) -> None:
    from cassini.sim.parts import KINDS
    from cassini.sim.parts.queue import QUEUE_POLICIES

    monkeypatch.setitem(QUEUE_POLICIES, "sjf", QUEUE_POLICIES["fifo"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["sim", "run", "--help"])
    out = capsys.readouterr().out
    for kind, table in KINDS.items():
        assert f"{kind}: {', '.join(table)}" in out
    assert "sjf" in out.split("Parts by kind:")[1].split("(cassini =")[0]


# -- item 7: sweep.json reproduces its rows -----------------------------------------------
def test_sweep_json_records_what_reproduces_it(tmp_path: Path, monkeypatch, capsys) -> None:
    from cassini.sim.report.sweep import _description, run_point

    config = TINY_CONFIG | {"seed": 7, "schedulers": ["themis"]}
    config["workload"] = {"poisson": {**TINY_CONFIG["workload"]["poisson"], "jobs": 5}}
    _write(tmp_path, config, "sweep.json.yaml")
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(capsys, "sim", "sweep", "sweep.json.yaml", "--out", "out", "--quiet",
                        "--workers", "1", "--backend", "pool")  # fmt: skip
    assert code == 0, err
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert data["config"] == str(tmp_path / "sweep.json.yaml")
    assert data["seed"] == 7 and data["schedulers"] == ["themis"]
    assert data["cluster"] == TINY_CONFIG["cluster"] | {
        "server_link_bps": 5e10, "oversubscription": 2.0, "gpus": 16}  # fmt: skip
    assert data["workload"]["poisson"]["jobs"] == 5
    # the recorded fields alone rebuild the config: the first row again
    cluster = {k: v for k, v in data["cluster"].items() if k != "gpus"}
    again = config_from_dict({"cluster": cluster, "workload": data["workload"],
                              "seed": data["seed"], "schedulers": data["schedulers"],
                              "candidates": data["candidates"]})  # fmt: skip
    row = data["rows"][0]
    rerun = run_point(again, {"load": row["load"]})[0]
    assert rerun["mean_slowdown"] == row["mean_slowdown"]
    assert "seed 7" in _description(data, "load", [])


# -- item 8: trace CONFIG says which rows it skipped --------------------------------------
def test_trace_prints_the_skipped_rows_as_run_does(tmp_path: Path, capsys) -> None:
    (tmp_path / "t.csv").write_text(
        "job_id,arrival_s,gpus,iterations,model\na,0,2,10,bert\nb,abc,2,10,bert\n"
        "c,1,2,10,nosuchmodel\nd,2,2,10,gpt2\n"
    )
    config = TINY_CONFIG | {"workload": {"trace": "t.csv", "bad_rows": "skip"}}
    path = _write(tmp_path, {k: v for k, v in config.items() if k != "sweep"})
    code, _, err = _cli(capsys, "sim", "trace", str(path), "--out", str(tmp_path / "j.csv"))
    assert code == 0, err
    assert "workload: skipped 2 bad rows of" in err and "t.csv:3:2" in err
    assert "wrote 2 jobs" in err


# -- item 9: a setting beside a host table's column, a sweep axis the cluster refuses ----
def test_a_setting_beside_its_column_is_named_as_given(tmp_path: Path, capsys) -> None:
    (tmp_path / "hosts.csv").write_text(SHUFFLED)
    (tmp_path / "rec.csv").write_text(RECORDED)
    config = REC_CONFIG | {"cluster": {"hosts": "hosts.csv", "gpus_per_server": 8}}
    path = _write(tmp_path, config)
    code, _, err = _cli(capsys, "sim", "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "cluster.gpus_per_server: " in err
    assert "has a gpus column, so cluster.gpus_per_server must not be given: remove one" in err
    code, _, err = _cli(capsys, "sim", "topo", "show", str(tmp_path / "hosts.csv"),
                        "--gpus-per-server", "8")  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert "hosts.csv: --gpus-per-server: " in err
    assert "so --gpus-per-server must not be given" in err


@pytest.mark.parametrize(
    ("cluster", "says"),
    [
        ({"generate": "fat-tree", "k": 4, "gpus_per_server": 2}, "(fat-tree) cannot take"),
        ({"hosts": "hosts.csv"}, "has a tor_uplink_bps column, so sweep.oversubscription"),
    ],
)
def test_a_sweep_axis_the_cluster_refuses_names_the_axis(tmp_path, capsys, cluster, says):
    (tmp_path / "hosts.csv").write_text(SHUFFLED)
    config = TINY_CONFIG | {"cluster": cluster, "sweep": {"oversubscription": [1, 2]}}
    path = _write(tmp_path, config)
    code, _, err = _cli(capsys, "sim", "sweep", str(path), "--out", str(tmp_path / "o"),
                        "--workers", "1", "--backend", "pool")  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert f"{path}: sweep.oversubscription: " in err and says in err


# -- item 10: report.html's keys in the unit the cell shows -------------------------------
class _Cells(HTMLParser):
    """Every summary row's cells: (scheme, data-key) -> text."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str], str] = {}
        self._scheme: str | None = None
        self._key: str | None = None
        self._table: str | None = None

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id")
        elif tag == "tr":
            self._scheme = a.get("data-scheme")
        elif tag == "td" and self._table == "summary" and a.get("data-key"):
            self._key = a["data-key"]

    def handle_data(self, data) -> None:
        if self._key and self._scheme:
            self.cells[(self._scheme, self._key)] = data.strip()
            self._key = None


def test_report_cells_hold_their_keys_unit(tiny) -> None:
    out, data = tiny
    page = _Cells()
    page.feed((out / "report.html").read_text())
    assert page.cells
    for (scheme, key), shown in page.cells.items():
        summary = data["summaries"][scheme]
        if key in summary:  # results.json's key: results.json's value and unit
            assert shown == number(summary[key]), (scheme, key)
        else:
            assert key.endswith("_ms") and shown == number(summary[key[:-3] + "_s"] * 1e3)
    assert ("themis", "mean_iteration_ms") in page.cells


# -- item 11: rail-optimised capacities per NIC, as topo show lists them ------------------
RAIL = {
    "name": "rails",
    "cluster": {"generate": "rail-optimised", "groups": 2, "servers_per_group": 2,
                "gpus_per_server": 2, "server_link_bps": 1.0e11, "oversubscription": 2},
    "workload": {"poisson": {"jobs": 4, "load": 1.0, "gpus": {"4": 1, "6": 1},
                             "iterations": [10, 20]}},
    "schedulers": ["themis"],
}  # fmt: skip


def test_rail_capacities_are_one_nics(tmp_path: Path) -> None:
    from cassini.sim.topologies.show import summarise

    cfg = config_from_dict(RAIL)
    done = simulate_config(cfg, record=True)
    data = write_run(cfg, done.results, tmp_path, run=done)
    links = summarise(cfg.cluster)["links"]  # topo show: bits/s of every link, per tier
    assert links["host-tor"]["bps"] == {"1e+11": 8}  # 4 servers, 2 NICs each
    physical = {lk.id: lk.bps for lk in cfg.cluster.fabric_links}
    rows = data["report"]["busiest_links"]["themis"]
    assert any(r["link"].startswith("srv") for r in rows)
    for r in rows:
        bps = physical[r["link"].removesuffix(":up").removesuffix(":down")]
        assert r["capacity_gbps"] == pytest.approx(bps / 1e9), r
    assert any("one NIC's" in note for note in data["report"]["notes"])
    assert "capacity (Gbit/s, one link)" in (tmp_path / "report.html").read_text()


# -- item 13: every field of results.json documented --------------------------------------
def _section(doc: str, heading: str) -> str:
    text = (ROOT / "docs" / doc).read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _first_cells(section: str) -> set[str]:
    """The names in the first column of the section's tables."""
    out: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            out |= set(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
    return out


def _nested_keys(data: Mapping[str, Any]) -> Iterator[str]:
    """The keys of results.json's nested objects other than those of the tables'
    levels (links, schemes and pairs are data, not fields)."""
    yield from data["settings"]
    for value in data["settings"].values():
        if isinstance(value, Mapping):
            yield from value
    yield from data["workload"]
    yield from data["workload"].get("poisson", {})
    for pair in data["ratios"].values():
        yield from pair
    for summary in data["summaries"].values():
        yield from summary.get("lowest_priority_decile") or {}
    for rows in data["report"]["busiest_links"].values():
        for row in rows:
            yield from row


def test_every_field_of_results_json_is_documented(tiny, recorded) -> None:
    section = _section("sim_traces.md", "results.json")
    named = _first_cells(section)
    quoted = set(re.findall(r"`([^`]+)`", section))
    for _, data in (tiny, recorded):
        levels = {
            "top level": set(data),
            "summary": {k for s in data["summaries"].values() for k in s},
            "job": {k for jobs in data["jobs"].values() for j in jobs for k in j},
            "server": {k for s in data["servers"] for k in s},
            "report": set(data["report"]),
        }
        for level, keys in levels.items():
            assert keys <= named, f"{level} fields not in the tables: {sorted(keys - named)}"
        nested = set(_nested_keys(data))
        assert nested <= quoted, f"not documented: {sorted(nested - quoted)}"
    sweep = _section("sim_traces.md", "sweep.json")
    for key in ("seed", "config", "cluster", "workload", "rows", "aggregate", "ratios"):
        assert f"`{key}`" in sweep


# -- item 14: results.json names its config by absolute path ------------------------------
def test_results_json_config_is_absolute(tmp_path: Path, monkeypatch, capsys) -> None:
    config = {k: v for k, v in TINY_CONFIG.items() if k != "sweep"} | {"schedulers": ["themis"]}
    _write(tmp_path, config)
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(capsys, "sim", "run", "c.json", "--out", "out", "--quiet")
    assert code == 0, err
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["config"] == os.path.join(str(tmp_path), "c.json")
