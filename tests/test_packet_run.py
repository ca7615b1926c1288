"""A small packet-level run in ns-3 (issue 33's acceptance case): fat-tree k=4, four
two-server vgg16 jobs, three iterations each, through ``python -m cassini.packet.run``.
Jobs a and b share their racks' uplinks (routing single: every hop on its first path);
c and d each have a pod to themselves.  Checked against physics, not against the fluid
model: a job alone, every ring hop paced to its phase's rate, cannot beat its profile's
period (compute plus its bytes at the phases' rates) and loses only headers, ACKs and a
slow start to it; two jobs sharing uplinks are slower than one alone; strict
priority serves the job of level 0 first."""

import json

import pytest
from conftest import require

from cassini.packet import ns3env
from cassini.sim.network import cycle_of
from cassini.sim.workload import load_library

require(ns3env.available(), "ns-3 bindings (the [packet] extra; run make setup)")
pytestmark = pytest.mark.same_worker("ns-3")

SCALE = 500.0
TRACE = """job_id,arrival_s,gpus,iterations,model,hosts
a,0,16,3,vgg16,p0e0h0:8;p0e1h0:8
b,0,16,3,vgg16,p0e0h1:8;p0e1h1:8
c,0,16,3,vgg16,p2e0h0:8;p2e1h0:8
d,0,16,3,vgg16,p3e0h1:8;p3e1h1:8
"""
CONFIG = """cluster: {generate: fat-tree, k: 4, gpus_per_server: 8, server_link_bps: 5.0e+10}
workload: {trace: trace.csv}
schedulers: [themis]
routing: single
network: packet
seed: 0
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    d = tmp_path_factory.mktemp("packet")
    (d / "trace.csv").write_text(TRACE)
    (d / "cfg.yaml").write_text(CONFIG)
    return d / "cfg.yaml"


def paced_iteration_s() -> float:
    """vgg16's compute plus its bytes at its phases' rates (seconds): the fastest a job
    paced to them can go (on 50 Gbit/s links every rule leaves the profile as measured)."""
    c = cycle_of(load_library()["vgg16"])
    return sum(c.gaps_s) + sum(b / r for b, r in zip(c.bits, c.rates_bps, strict=True))


@pytest.mark.slow
def test_fat_tree_run_writes_results_and_obeys_physics(config, tmp_path):
    from cassini.packet.run import main

    out = tmp_path / "results.json"
    assert main([str(config), "--sharing", "maxmin", "--scale", str(SCALE), "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert (r["network"], r["sharing"], r["routing"], r["scale"]) == (
        "packet",
        "maxmin",
        "single",
        SCALE,
    )
    assert r["cpu_s"] > 0 and r["hosts"] == 16
    jobs = r["jobs"]
    assert set(jobs) == {"a", "b", "c", "d"}
    for j in jobs.values():
        assert j["finished"] and len(j["iteration_times_s"]) == 3
        assert j["mean_iteration_s"] == pytest.approx(sum(j["iteration_times_s"]) / 3)
    floor = paced_iteration_s()
    for alone in ("c", "d"):
        # at least compute + bytes at the phases' rates; at most that plus what headers
        # (54 of every 1502 bytes) and the reverse hop's ACKs take, and a slow start
        assert floor < jobs[alone]["mean_iteration_s"] < floor * 1.10
    for shared in ("a", "b"):
        assert jobs[shared]["mean_iteration_s"] > 1.2 * jobs["c"]["mean_iteration_s"]


@pytest.mark.slow
def test_strict_priority_serves_level_zero_first(config, monkeypatch):
    from cassini.packet import jobs, run

    monkeypatch.setattr(jobs, "priorities", lambda jobs, topo, bands: {"a": 3, "b": 0})
    r = run.run_config(config, sharing="priority", scale=SCALE)
    a, b = r["jobs"]["a"]["iteration_times_s"], r["jobs"]["b"]["iteration_times_s"]
    # b (level 0) barely notices a; a waits for b's phases
    floor = paced_iteration_s()
    assert all(floor < t < 1.10 * floor for t in b)
    assert a[0] > 1.5 * b[0] and sum(a) > 1.3 * sum(b)


@pytest.mark.slow
def test_mltcp_run_and_held_slots():
    """Under mltcp every job finishes and a job alone keeps its paced pace; a held
    job (CASSINI's time-shift) starts iteration k no earlier than start + shift +
    k * period, so alone it runs at the profile's period, not faster."""
    from cassini.packet.jobs import PacketJob, simulate
    from cassini.sim.topologies.fat_tree import fat_tree

    vgg = load_library()["vgg16"]
    period, floor = vgg.iteration_time_s, paced_iteration_s()
    jobs = [
        PacketJob("free", (0, 2), vgg, 3),
        PacketJob("held", (8, 10), vgg, 3, start_s=0.01, shift_s=0.03),
    ]
    _, results = simulate(fat_tree(4), jobs, sharing="mltcp", scale=SCALE)
    free, held = results
    assert free.finished and held.finished
    assert floor < free.mean_iteration_s < 1.10 * floor
    ends = [0.01 + sum(held.iteration_times_s[: k + 1]) for k in range(3)]
    for k, end in enumerate(ends):
        assert end >= 0.01 + 0.03 + k * period + floor
        assert end < 0.01 + 0.03 + k * period + 1.10 * floor


@pytest.mark.slow
def test_ns3_carries_every_hop_on_its_planned_links():
    """Two-tier with 4 spines, ECMP: the ns-3 links that carry data (bytes sent, per
    direction) are exactly the directed links of the planned hops; the rest carry at
    most ACKs."""
    from cassini.packet import fabric, native
    from cassini.packet.ns3env import load_ns
    from cassini.packet.plan import plan
    from cassini.sim.topologies.clos import two_tier

    ns = load_ns()
    cpp = native.define()
    jobs = {"x": [0, 4, 9], "y": [1, 13], "z": [2, 6, 10, 14]}
    p = plan(two_tier(4, 4, 8, spines=4), jobs, scale=500, routing="ecmp", seed=2)
    assert sorted(p.path_index.values()) == [0, 1, 2]  # seed 2 spreads them over spines
    built = fabric.build(p, "maxmin", fabric.FabricSettings())
    counter = cpp.ByteCounter()
    keys = {end: k for k, end in enumerate(built.devices)}
    for end, k in keys.items():
        counter.Watch(built.devices[end], k)
    hop_bytes = 200_000
    drivers, port = [], 30000
    for hops in p.hops.values():
        d = cpp.RingJob([0.001], [float(hop_bytes)], [], 1, 0.0, False, 0.0, 0.0, False, 1448)
        for hop in hops:
            addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
            helper = ns.PacketSinkHelper("ns3::TcpSocketFactory", addr)
            helper.Install(built.nodes[f"host{hop.dst}"]).Start(ns.Seconds(0.0))
            null = ns.Ptr[ns.TcpCongestionOps]()
            d.AddHop(built.nodes[f"host{hop.src}"], ns.Ipv4Address(hop.address), port, null, 0)
            port += 1
        d.Start()
        drivers.append(d)
    ns.Simulator.Run()
    assert all(d.Finished() for d in drivers)
    planned = {
        (a, link)
        for hops in p.hops.values()
        for h in hops
        for a, link in zip(h.nodes[:-1], h.links, strict=True)
    }
    carried = {end for end, k in keys.items() if counter.Bytes(k) >= hop_bytes}
    assert carried == planned
    for end, k in keys.items():
        if end not in planned:
            assert counter.Bytes(k) < hop_bytes / 10  # ACKs, SYNs
    ns.Simulator.Destroy()


SIM_TRACE = """job_id,arrival_s,gpus,iterations,model
a,0,12,4,vgg16
b,0,12,4,vgg16
"""
SIM_CONFIG = """cluster: {racks: 3, servers_per_rack: 2, gpus_per_server: 4,
          server_link_bps: 5.0e+10, oversubscription: 2}
workload: {trace: trace.csv}
schedulers: [themis, ideal]
network: packet
seed: 0
"""


@pytest.mark.slow
def test_simulator_runs_network_packet(tmp_path, capsys):
    """``cassini sim run`` with ``network: packet``: the simulator's own engine and
    placement, every window in ns-3.  The two 12-GPU jobs are packed on servers 0-2
    and 3-5 and share rack 1's uplink (2:1): under themis both are slowed; under ideal
    each is measured alone in ns-3 (paced to its phases' rates: the profile's period
    plus headers and ACKs, never below it)."""
    from cassini.cli import main

    (tmp_path / "trace.csv").write_text(SIM_TRACE)
    (tmp_path / "cfg.yaml").write_text(SIM_CONFIG)
    assert main(["sim", "run", str(tmp_path / "cfg.yaml"), "--out", str(tmp_path / "o")]) == 0
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    # the scale-down is in the results: 50 Gbit/s server links run at 100 Mbit/s
    assert results["packet"]["scale"] == pytest.approx(5e10 / 1e8)
    assert results["packet"]["fastest_server_link_bps"] == pytest.approx(1e8)
    jobs = results["jobs"]
    floor = paced_iteration_s()
    ideal = {j["job_id"]: j for j in jobs["ideal"]}
    themis = {j["job_id"]: j for j in jobs["themis"]}
    assert set(ideal) == set(themis) == {"a", "b"}
    for job_id, j in ideal.items():
        assert floor < j["mean_iteration_s"] < 1.10 * floor
        assert j["mean_iteration_s"] > j["dedicated_iteration_s"]  # measured, not the profile
        assert themis[job_id]["mean_iteration_s"] > 1.2 * j["mean_iteration_s"]


@pytest.mark.slow
def test_a_packet_run_prints_no_cling_noise(config, tmp_path):
    """The wheel's loader (``from ns import ns``) prints "[runStaticInitializersOnce]:
    Failed to materialize symbols" twice: it includes its headers before loading its
    libraries.  ``ns3env.load_ns`` loads the core library first; a fresh process's small
    run prints nothing of the kind (nor any other line) on stderr."""
    import subprocess
    import sys

    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "cassini.packet.run", str(config), "--iterations", "1",
           "--scale", str(SCALE), "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "materialize" not in done.stderr
    assert done.stderr.strip() == ""
    assert json.loads(out.read_text())["profiles"] == "scale-to-nic"
