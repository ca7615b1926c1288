"""Recorded placement: every job replayed on exactly the hosts its trace names."""

from __future__ import annotations

from pathlib import Path

import pytest

from cassini.errors import InputError
from cassini.sim.engine import run
from cassini.sim.recorded import (
    BY_NAME_RULE,
    GENERATED_BY_NAME_RULE,
    MAPPING_RULE,
    host_servers,
    mapping_rule,
)
from cassini.sim.topologies.clos import two_tier
from cassini.sim.topologies.fat_tree import fat_tree
from cassini.sim.topologies.hosts import read_host_table
from cassini.sim.topology import Cluster
from cassini.sim.traces import read
from cassini.sim.workload import JobSpec, load_library

LIBRARY = load_library()
DATA = Path(__file__).parent / "data" / "traces"
CLUSTER = Cluster(racks=2, servers_per_rack=4, gpus_per_server=8)


@pytest.mark.parametrize("trace", ["lingjun", "philly/cluster_job_log", "pai2020"])
@pytest.mark.parametrize("scheduler", ["recorded", "recorded+cassini"])
def test_every_job_runs_on_exactly_its_recorded_hosts(trace: str, scheduler: str) -> None:
    jobs = read(DATA / trace, LIBRARY).jobs
    # shorter jobs keep the test fast; placement does not depend on length
    jobs = [JobSpec(j.job_id, j.arrival_s, j.gpus, 50, j.model, j.hosts) for j in jobs]
    result = run(CLUSTER, jobs, LIBRARY, scheduler)
    server_of = host_servers(jobs, CLUSTER)
    host_of = {s: h for h, s in server_of.items()}
    assert len(set(server_of.values())) == len(server_of)  # one server per host
    by_id = {j.job_id: j for j in jobs}
    assert {r.job_id for r in result.jobs} == set(by_id)
    for r in result.jobs:
        placed = {host_of[s]: g for s, g in r.placement}
        assert placed == dict(by_id[r.job_id].hosts), r.job_id


def test_a_job_waits_for_its_own_hosts_not_for_any_free_gpus() -> None:
    jobs = [
        JobSpec("a", 0.0, 16, 200, "vgg16", (("m1", 8), ("m2", 8))),
        JobSpec("b", 1.0, 8, 200, "vgg16", (("m2", 8),)),  # m2 is busy with a
        JobSpec("c", 2.0, 8, 200, "vgg16", (("m3", 8),)),  # free: starts at once
    ]
    done = {r.job_id: r for r in run(CLUSTER, jobs, LIBRARY, "recorded").jobs}
    assert done["b"].start_s == pytest.approx(done["a"].finish_s)
    assert done["c"].start_s == pytest.approx(2.0)
    # a scheduler of its own places b at once on any free GPUs
    themis = {r.job_id: r for r in run(CLUSTER, jobs, LIBRARY, "themis").jobs}
    assert themis["b"].start_s == pytest.approx(1.0)


def test_recorded_placement_refuses_what_it_cannot_replay() -> None:
    with pytest.raises(InputError, match="hosts"):
        run(CLUSTER, [JobSpec("x", 0.0, 8, 10, "vgg16")], LIBRARY, "recorded")
    many = [JobSpec(f"j{k}", float(k), 1, 10, "vgg16", ((f"h{k}", 1),)) for k in range(9)]
    with pytest.raises(InputError, match="9 hosts, the cluster has 8 servers"):
        run(CLUSTER, many, LIBRARY, "recorded")
    with pytest.raises(InputError, match="16 GPUs on host"):
        run(CLUSTER, [JobSpec("x", 0.0, 16, 10, "vgg16", (("h", 16),))], LIBRARY, "recorded")


def test_a_config_replays_lingjun_beside_a_scheduler_and_reports_the_mapping(tmp_path) -> None:
    from cassini.sim.config import config_from_dict
    from cassini.sim.report.run import simulate_config, write_run

    cfg = config_from_dict(
        {
            "cluster": {"racks": 2, "servers_per_rack": 4, "gpus_per_server": 8},
            "workload": {"trace": str(DATA / "lingjun"), "format": "lingjun"},
            "schedulers": ["recorded", "themis"],
        }
    )
    done = simulate_config(cfg, record=True)
    data = write_run(cfg, done.results, tmp_path, run=done)
    assert data["workload"]["format"] == "lingjun" and data["workload"]["jobs"] == 4
    assert MAPPING_RULE in data["report"]["notes"]
    assert MAPPING_RULE in (tmp_path / "report.html").read_text()
    hosts = {j.job_id: dict(j.hosts) for j in done.workload.jobs}
    server_of = host_servers(done.workload.jobs, CLUSTER)
    host_of = {s: h for h, s in server_of.items()}
    for record in data["jobs"]["recorded"]:
        assert {host_of[s]: g for s, g in record["placement"]} == hosts[record["job_id"]]


LINGJUN_TOPO = DATA / "lingjun" / "topo.csv"


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["recorded", "recorded+cassini"])
def test_lingjun_replays_on_its_own_topology_on_the_hosts_it_names(scheduler: str) -> None:
    """On the trace's own topo.csv every job runs on exactly the hosts (ips) its
    worker.csv rows name, so in their real racks, not in first-appearance order."""
    topo = read_host_table(LINGJUN_TOPO, gpus_per_server=8)
    jobs = read(DATA / "lingjun", LIBRARY).jobs
    jobs = [JobSpec(j.job_id, j.arrival_s, j.gpus, 50, j.model, j.hosts) for j in jobs]
    assert mapping_rule(topo, jobs) == BY_NAME_RULE
    first_seen = host_servers(jobs, CLUSTER)
    by_name = host_servers(jobs, topo)
    assert by_name != first_seen  # the file's order differs from first appearance
    result = run(topo, jobs, LIBRARY, scheduler)
    by_id = {j.job_id: j for j in jobs}
    assert {r.job_id for r in result.jobs} == set(by_id)
    assert any(r.racks > 1 for r in result.jobs)
    for r in result.jobs:
        placed = {topo.hosts[s]: g for s, g in r.placement}
        assert placed == dict(by_id[r.job_id].hosts), r.job_id
        assert r.racks == len({topo.rack_of(topo.host_index(h)) for h in placed})


def test_a_host_the_topology_lacks_is_refused_by_name(tmp_path) -> None:
    table = tmp_path / "topo.csv"
    lines = LINGJUN_TOPO.read_text().splitlines()
    table.write_text("\n".join(line for line in lines if "e3038539b9fc" not in line) + "\n")
    topo = read_host_table(table, gpus_per_server=8)
    jobs = read(DATA / "lingjun", LIBRARY).jobs
    with pytest.raises(InputError, match="host 'e3038539b9fc' is not in the cluster's host"):
        run(topo, jobs, LIBRARY, "recorded")
    with pytest.raises(InputError, match="16 GPUs on host"):
        run(
            topo, [JobSpec("x", 0.0, 16, 10, "vgg16", (("0c9d9de1b19e", 16),))], LIBRARY, "recorded"
        )


def test_generated_topologies_keep_first_appearance() -> None:
    topo = two_tier(racks=2, servers_per_rack=4, gpus_per_server=8)
    jobs = read(DATA / "lingjun", LIBRARY).jobs
    assert mapping_rule(topo, jobs) == MAPPING_RULE
    assert host_servers(jobs, topo) == host_servers(jobs, CLUSTER)


def test_a_generated_topology_places_its_own_host_names_by_name() -> None:
    """A trace naming only hosts of a generated topology (fat_tree(4): p<pod>e<edge>h<i>)
    runs on exactly those hosts, in their racks, not in first-appearance order."""
    topo = fat_tree(4)
    jobs = [
        JobSpec("a", 0.0, 8, 5, "vgg16", (("p2e0h1", 8),)),
        JobSpec("b", 1.0, 16, 5, "vgg16", (("p0e0h0", 8), ("p3e1h1", 8))),
    ]
    assert mapping_rule(topo, jobs) == GENERATED_BY_NAME_RULE
    assert host_servers(jobs, topo) == {"p2e0h1": 9, "p0e0h0": 0, "p3e1h1": 15}
    done = {r.job_id: r for r in run(topo, jobs, LIBRARY, "recorded").jobs}
    assert done["a"].placement == ((9, 8),)
    assert sorted(done["b"].placement) == [(0, 8), (15, 8)] and done["b"].racks == 2


def test_a_name_the_generated_topology_lacks_keeps_first_appearance() -> None:
    """One host outside the topology's names: every host maps by first appearance, and
    the stated rule says so (a generated Cluster names no hosts: always first appearance)."""
    topo = fat_tree(4)
    jobs = [
        JobSpec("a", 0.0, 8, 5, "vgg16", (("p2e0h1", 8),)),
        JobSpec("b", 1.0, 8, 5, "vgg16", (("m1", 8),)),
    ]
    assert mapping_rule(topo, jobs) == MAPPING_RULE
    assert host_servers(jobs, topo) == {"p2e0h1": 0, "m1": 1}
    done = {r.job_id: r for r in run(topo, jobs, LIBRARY, "recorded").jobs}
    assert done["a"].placement == ((0, 8),) and done["b"].placement == ((1, 8),)
    named = [JobSpec("a", 0.0, 8, 5, "vgg16", (("p2e0h1", 8),))]
    assert mapping_rule(CLUSTER, named) == MAPPING_RULE
    assert host_servers(named, CLUSTER) == {"p2e0h1": 0}


def test_a_config_replays_lingjun_on_its_topo_csv(tmp_path) -> None:
    from cassini.sim.config import config_from_dict
    from cassini.sim.report.run import simulate_config, write_run

    cfg = config_from_dict(
        {
            "cluster": {"hosts": str(LINGJUN_TOPO), "gpus_per_server": 8},
            "workload": {"trace": str(DATA / "lingjun"), "format": "lingjun"},
            "schedulers": ["recorded", "themis"],
        }
    )
    done = simulate_config(cfg, record=True)
    data = write_run(cfg, done.results, tmp_path, run=done)
    assert BY_NAME_RULE in data["report"]["notes"]
    hosts = {j.job_id: dict(j.hosts) for j in done.workload.jobs}
    for record in data["jobs"]["recorded"]:
        placed = {cfg.cluster.hosts[s]: g for s, g in record["placement"]}
        assert placed == hosts[record["job_id"]]


def test_the_report_states_the_by_name_rule_a_named_generated_topology_used(tmp_path) -> None:
    """``cassini sim run`` on a generated fat tree with a trace naming its hosts: the
    report's note is the rule the placement used (not first appearance)."""
    import json

    from cassini import cli

    (tmp_path / "t.csv").write_text(
        "job_id,arrival_s,gpus,iterations,model,hosts\n"
        "a,0,8,4,vgg16,p1e0h0:4;p2e0h1:4\n"
        "b,5,4,4,vgg16,p0e0h0:4\n"
    )
    (tmp_path / "c.yaml").write_text(
        "name: ft\n"
        "cluster: {generate: fat-tree, k: 4, gpus_per_server: 4, server_link_bps: 5.0e+10}\n"
        f"workload: {{trace: {tmp_path / 't.csv'}}}\n"
        "schedulers: [recorded]\n"
    )
    out = tmp_path / "o"
    assert cli.main(["sim", "run", str(tmp_path / "c.yaml"), "--out", str(out), "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["report"]["notes"] == [GENERATED_BY_NAME_RULE]
