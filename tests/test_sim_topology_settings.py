"""Topology settings are used or refused, never dropped: ``topo show`` builds the plain
``racks:`` form as the run does (its spines too), pod-tier settings on a fabric without a
pod tier are errors naming the field, and every cluster form explains a YAML ``5e10``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cassini import cli
from cassini.errors import InputError
from cassini.packet.plan import as_topology
from cassini.sim.config import config_from_dict, read_config
from cassini.sim.topologies import show
from cassini.sim.topologies.hosts import read_host_table
from cassini.sim.topology import Cluster

WORKLOAD = {"poisson": {"jobs": 2, "load": 0.5, "gpus": {1: 1}}}
BASE = {"workload": WORKLOAD, "schedulers": ["themis"]}
PLAIN = {"racks": 2, "servers_per_rack": 2, "gpus_per_server": 1}
YAML_HINT = "YAML reads 5e10 as a string"


def _yaml(tmp_path: Path, cluster: str, name: str = "c.yaml") -> Path:
    f = tmp_path / name
    f.write_text(
        f"cluster: {cluster}\n"
        "workload: {poisson: {jobs: 2, load: 0.5, gpus: {1: 1}}}\n"
        "schedulers: [themis]\n"
    )
    return f


# -- 1. topo show builds the plain form's fabric as the run does ----------------------------
@pytest.mark.parametrize(
    "extra",
    [{"spines": 3}, {}, {"spines": 2, "server_link_bps": 1e11, "oversubscription": 4}],
)
def test_topo_show_builds_the_plain_form_as_the_run_does(
    tmp_path: Path, extra: dict[str, Any]
) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps(BASE | {"cluster": PLAIN | extra}))
    shown, _ = show.load(f)
    run = as_topology(read_config(f).cluster)  # the fabric a network: packet run builds
    assert show.summarise(shown) == show.summarise(run)
    cluster = Cluster.from_dict(PLAIN | extra)
    spines = extra.get("spines", 1)
    assert len(shown.switches_in("spine")) == spines
    uplinks = [link.bps for link in shown.fabric_links if link.upper.startswith("spine")]
    assert len(uplinks) == 2 * spines
    assert set(uplinks) == {cluster.links[cluster.uplink(0, 0)]}


def test_topo_show_text_names_every_spine_of_the_plain_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _yaml(tmp_path, "{racks: 2, servers_per_rack: 2, gpus_per_server: 1, spines: 3}")
    assert cli.main(["sim", "topo", "show", str(f)]) == 0
    out = capsys.readouterr().out
    assert "switches: tor 2, spine 3" in out
    (row,) = [line.split() for line in out.splitlines() if line.strip().startswith("tor-spine")]
    assert row[1] == "6"


# -- 2. pod-tier settings need a pod tier ---------------------------------------------------
def test_an_agg_uplink_column_needs_an_agg_column(tmp_path: Path) -> None:
    f = tmp_path / "two.csv"
    f.write_text("host,tor,agg_uplink_bps\nx,A,1e11\ny,B,1e11\n")
    with pytest.raises(InputError) as e:
        read_host_table(f, gpus_per_server=1)
    assert e.value.field == f"{f}:1:3"
    assert "agg_uplink_bps" in e.value.problem and "pod tier" in e.value.problem
    assert "agg column" in e.value.problem


def test_differing_agg_uplinks_without_agg_are_refused_for_the_missing_tier(
    tmp_path: Path,
) -> None:
    f = tmp_path / "two.csv"
    f.write_text("host,tor,agg_uplink_bps\nx,A,1e11\ny,B,2e11\n")
    with pytest.raises(InputError) as e:
        read_host_table(f, gpus_per_server=1)
    assert e.value.field == f"{f}:1:3" and "pod tier" in e.value.problem


@pytest.mark.parametrize(
    ("text", "where", "named"),
    [
        ("host,core,agg,tor,agg_uplink_bps\nx,c1,p1,A,1e11\ny,c1,p1,B,2e11\n", 3, "c1/p1"),
        ("host,agg,tor,agg_uplink_bps\nx,p1,A,1e11\ny,p1,B,2e11\n", 3, "p1"),
        ("host,agg,tor,tor_uplink_bps\nx,p1,A,1e11\ny,p1,A,2e11\n", 3, "p1/A"),
        ("host,tor,tor_uplink_bps\nx,A,1e11\ny,A,2e11\n", 3, "A"),
    ],
)
def test_differing_uplinks_name_the_switch(
    tmp_path: Path, text: str, where: int, named: str
) -> None:
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        read_host_table(f, gpus_per_server=1)
    assert e.value.field.startswith(f"{f}:{where}:")
    kind = "aggregation switch" if "agg_uplink" in text else "ToR"
    assert e.value.problem.endswith(f"for the same {kind} {named!r}"), e.value.problem


@pytest.mark.parametrize("value", [100, 1, 2.5])
def test_pod_oversubscription_on_a_two_tier_host_table_is_refused(
    tmp_path: Path, value: float
) -> None:
    f = tmp_path / "two.csv"
    f.write_text("host,tor\nx,A\ny,B\n")
    with pytest.raises(InputError) as e:
        read_host_table(f, gpus_per_server=1, pod_oversubscription=value)
    assert e.value.field == "pod_oversubscription"
    assert "pod tier" in e.value.problem and "agg column" in e.value.problem
    (tmp_path / "sim.json").write_text(
        json.dumps(
            BASE
            | {"cluster": {"hosts": "two.csv", "gpus_per_server": 1, "pod_oversubscription": value}}
        )
    )
    with pytest.raises(InputError) as e:
        read_config(tmp_path / "sim.json")
    assert e.value.field.endswith(": cluster.pod_oversubscription")
    assert "pod tier" in e.value.problem


def test_pod_oversubscription_on_a_three_tier_host_table_still_counts(tmp_path: Path) -> None:
    f = tmp_path / "three.csv"
    f.write_text("host,agg,tor\nx,p1,A\ny,p1,B\n")
    topo = read_host_table(f, gpus_per_server=1, server_link_bps=1e11, pod_oversubscription=4)
    (agg,) = topo.switches_in("agg")
    assert topo.uplink_bps[agg.id] == pytest.approx(2 * 1e11 / 2 / 4)


def test_topo_show_refuses_pod_oversubscription_on_a_two_tier_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "two.csv"
    f.write_text("host,tor\nx,A\ny,B\n")
    argv = ["sim", "topo", "show", str(f), "--gpus-per-server", "1"]
    assert cli.main([*argv, "--pod-oversubscription", "100"]) == 2
    err = capsys.readouterr().err
    assert "pod_oversubscription" in err and "pod tier" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("value", [100, 1])
def test_pod_oversubscription_on_the_plain_form_needs_racks_per_pod(value: float) -> None:
    with pytest.raises(InputError) as e:
        Cluster.from_dict(PLAIN | {"pod_oversubscription": value})
    assert e.value.field == "cluster.pod_oversubscription"
    assert "pod tier" in e.value.problem and "racks_per_pod" in e.value.problem
    with pytest.raises(InputError) as e:
        config_from_dict(BASE | {"cluster": PLAIN | {"pod_oversubscription": value}})
    assert e.value.field == "cluster.pod_oversubscription"
    three = Cluster.from_dict(PLAIN | {"racks_per_pod": 1, "pod_oversubscription": value})
    assert three.to_dict()["pod_oversubscription"] == value


def test_topo_show_and_run_refuse_the_plain_form_with_pod_oversubscription(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _yaml(
        tmp_path, "{racks: 2, servers_per_rack: 2, gpus_per_server: 1, pod_oversubscription: 100}"
    )
    assert cli.main(["sim", "topo", "show", str(f)]) == 2
    err = capsys.readouterr().err
    assert "cluster.pod_oversubscription" in err and "racks_per_pod" in err
    assert cli.main(["sim", "run", str(f), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "cluster.pod_oversubscription" in capsys.readouterr().err


# -- 3. a YAML 5e10 is explained on every cluster form --------------------------------------
@pytest.mark.parametrize(
    "cluster",
    [
        "{racks: 2, servers_per_rack: 2, gpus_per_server: 1, server_link_bps: 5e10}",
        "{generate: two-tier, racks: 2, servers_per_rack: 2, gpus_per_server: 1, "
        "server_link_bps: 5e10}",
        "{generate: three-tier, racks: 2, servers_per_rack: 2, racks_per_pod: 1, "
        "gpus_per_server: 1, server_link_bps: 5e10}",
        "{generate: fat-tree, k: 2, server_link_bps: 5e10}",
        "{generate: rail-optimised, groups: 2, servers_per_group: 2, server_link_bps: 5e10}",
        "{hosts: two.csv, gpus_per_server: 1, server_link_bps: 5e10}",
    ],
)
def test_a_yaml_5e10_is_explained_on_every_cluster_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster: str
) -> None:
    (tmp_path / "two.csv").write_text("host,tor\nx,A\ny,B\n")
    f = _yaml(tmp_path, cluster)
    with pytest.raises(InputError) as e:
        read_config(f)
    assert e.value.field.endswith("cluster.server_link_bps")
    assert YAML_HINT in e.value.problem and "5.0e+10" in e.value.problem
    assert cli.main(["sim", "topo", "show", str(f)]) == 2
    assert YAML_HINT in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("5e10", YAML_HINT),
        ("fast", "must be a number, got"),
        (0, "must be > 0, got 0"),
        (-1.5, "must be > 0"),
        (float("nan"), "must be finite"),
        (True, "must be a number"),
    ],
)
def test_generated_link_speeds_are_checked_as_the_plain_form_checks_them(
    value: Any, problem: str
) -> None:
    plain = PLAIN | {"server_link_bps": value}
    with pytest.raises(InputError) as e:
        Cluster.from_dict(plain)
    assert problem in e.value.problem
    with pytest.raises(InputError) as g:
        config_from_dict(BASE | {"cluster": plain | {"generate": "two-tier"}})
    assert (g.value.field, g.value.problem) == (e.value.field, e.value.problem)


def test_the_generated_equivalent_takes_the_clusters_spines_or_refuses_pods_with_spines(
    tmp_path: Path, capsys
) -> None:
    from cassini.sim.topologies.clos import from_cluster

    topo = from_cluster(Cluster(2, 2, 1, spines=3))  # the cluster's own, not one
    assert len(topo.switches_in("spine")) == 3
    with pytest.raises(InputError, match="spines with racks_per_pod") as e:
        from_cluster(Cluster(4, 2, 1, racks_per_pod=2, spines=2))
    assert e.value.field == "spines"
    f = _yaml(tmp_path, "{racks: 4, servers_per_rack: 2, gpus_per_server: 1, "
              "racks_per_pod: 2, spines: 2}")  # fmt: skip
    assert cli.main(["sim", "topo", "show", str(f)]) == 2  # not a fabric without its spines
    assert "spines with racks_per_pod" in capsys.readouterr().err
