"""The packet runner places a trace's ``hosts`` where ``cassini sim run``'s ``recorded``
scheduler does: one host -> server rule (cassini.sim.recorded.host_servers), no ns-3."""

from __future__ import annotations

import pytest

from cassini.errors import InputError
from cassini.packet.run import main, place
from cassini.sim.engine import run
from cassini.sim.topologies.fat_tree import fat_tree
from cassini.sim.topologies.hosts import read_host_table
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec, load_library

LIBRARY = load_library()
CLUSTER = Cluster(racks=2, servers_per_rack=2, gpus_per_server=4, server_link_bps=50e9)


def job(job_id: str, arrival_s: float, *hosts: tuple[str, int]) -> JobSpec:
    return JobSpec(job_id, arrival_s, sum(g for _, g in hosts), 3, "vgg16", tuple(hosts))


#: names that sort, and rows that list, otherwise than the jobs' arrival order: b comes
#: first, so zeta and alpha are its servers 0 and 1; a shares alpha with it
JOBS = [
    job("a", 5.0, ("alpha", 2), ("mid", 4)),
    job("b", 0.0, ("zeta", 4), ("alpha", 2)),
    job("c", 9.0, ("omega", 3)),
]


def simulator_servers(cluster, jobs) -> dict[str, tuple[int, ...]]:
    """Each job's servers as the fluid simulator's ``recorded`` scheduler places it."""
    result = run(cluster, jobs, LIBRARY, "recorded")
    return {r.job_id: tuple(sorted(s for s, _ in r.placement)) for r in result.jobs}


def test_a_generated_cluster_places_hosts_as_the_simulators_recorded_does() -> None:
    placed = place(CLUSTER, JOBS)
    assert placed == simulator_servers(CLUSTER, JOBS)
    assert placed == {"b": (0, 1), "a": (1, 2), "c": (3,)}  # first appearance by arrival


def test_a_host_table_places_hosts_by_name_as_the_simulators_recorded_does(tmp_path) -> None:
    table = tmp_path / "topo.csv"
    table.write_text(
        "ip,DSW,PSW,ASW\nomega,G1,P1,S1\nmid,G1,P1,S1\nalpha,G1,P1,S2\nzeta,G1,P1,S2\n"
    )
    topo = read_host_table(table, gpus_per_server=4)
    placed = place(topo, JOBS)
    assert placed == simulator_servers(topo, JOBS)
    assert placed == {"b": (2, 3), "a": (1, 2), "c": (0,)}  # the table's rows


def test_a_generated_topologys_own_host_names_place_by_name_as_the_simulator_does() -> None:
    """fat_tree(4) names its hosts p<pod>e<edge>h<i>: a trace naming only those runs on
    them; one name it lacks sends every host back to first appearance."""
    topo = fat_tree(4)
    named = [job("t", 0.0, ("p1e0h0", 8), ("p2e0h1", 8)), job("u", 1.0, ("p0e0h0", 4))]
    placed = place(topo, named)
    assert placed == simulator_servers(topo, named)
    assert placed == {"t": (4, 9), "u": (0,)}  # the fat tree's own hosts, across pods
    mixed = [*named, job("v", 2.0, ("m1", 2))]
    placed = place(topo, mixed)
    assert placed == simulator_servers(topo, mixed)
    assert placed == {"t": (0, 1), "u": (2,), "v": (3,)}  # first appearance by arrival


@pytest.mark.parametrize(
    ("jobs", "field"),
    [
        ([job("a", 0.0, *((f"m{i}", 1) for i in range(5)))], "cluster"),  # 5 hosts, 4 servers
        ([job("a", 0.0, ("m1", 3), ("m1", 2))], "jobs.a.hosts"),  # 5 GPUs on a 4-GPU server
    ],
)
def test_what_the_simulator_refuses_is_refused_the_same_way(jobs, field) -> None:
    with pytest.raises(InputError) as fluid:
        run(CLUSTER, jobs, LIBRARY, "recorded")
    with pytest.raises(InputError) as packet:
        place(CLUSTER, jobs)
    assert packet.value.field == fluid.value.field == field
    assert str(packet.value) == str(fluid.value)


def test_hosts_taken_by_an_earlier_job_name_the_job() -> None:
    jobs = [job("a", 0.0, ("m1", 4)), job("b", 1.0, ("m1", 1))]
    with pytest.raises(InputError, match=r"^jobs\.b: its hosts' GPUs are taken"):
        place(CLUSTER, jobs)


def write_config(tmp_path, rows: str) -> str:
    (tmp_path / "pk.csv").write_text("job_id,arrival_s,gpus,iterations,model,hosts\n" + rows)
    cfg = tmp_path / "cfg_pk.yaml"
    cfg.write_text(
        "name: pk\ncluster: {racks: 2, servers_per_rack: 2, gpus_per_server: 4, "
        "server_link_bps: 5.0e+10, oversubscription: 2}\nworkload: {trace: pk.csv}\n"
        "schedulers: [recorded]\n"
    )
    return str(cfg)


def test_the_cli_names_the_file_and_the_job_of_a_bad_host(tmp_path, capsys) -> None:
    """Refused before ns-3 is loaded: exit 2, the config and the job's field named."""
    cfg = write_config(tmp_path, "a,0,8,4,vgg16,m1:8\n")
    assert main([cfg, "--out", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {cfg}: jobs.a.hosts: 8 GPUs on host 'm1', its server has 4"
    assert not (tmp_path / "out.json").exists()


def test_help_shows_the_sharing_default(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: maxmin)" in out
