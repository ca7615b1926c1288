"""Testbed on the real kernel: Mininet hosts, bridges, HTB, real TCP.  Needs root; in CI
(CI=true) a missing prerequisite fails instead of skipping."""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import require

from cassini.measure import iteration_times, profile_from_pcap
from cassini.predict import Slot, simulate_link
from testbed.capture import Capture
from testbed.iterations import read_log
from testbed.net import EmulatedCluster, TestbedError, leftovers
from testbed.run import load_config, run_experiment
from testbed.run.profiles import payload_efficiency
from testbed.topo import FabricSpec, dumbbell

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("testbed_host")]


def config(fabric="fair", iterations=10, kind="synthetic", schemes=("baseline",), **job):
    base = {"kind": kind, "compute_s": 0.03, "bytes": 500_000, "iterations": iterations, **job}
    return {
        "topology": {
            "kind": "dumbbell",
            "pairs": 2,
            "bottleneck_bps": 200_000_000,
            "access_bps": 1_000_000_000,
            "fabric": fabric,
        },
        "jobs": [
            {"id": "a", "hosts": ["h1", "h3"], **base},
            {"id": "b", "hosts": ["h2", "h4"], **base},
        ],
        "schemes": list(schemes),
    }


def runner_result(out):
    """``out/results.json`` as the runner wrote it."""
    return json.loads((out / "results.json").read_text())


@pytest.mark.timing
def test_two_synthetic_jobs_cross_the_bottleneck(tmp_path):
    start = time.time()
    res = run_experiment(load_config(config()), tmp_path, progress=lambda m: None)
    elapsed = time.time() - start
    print(f"10 iterations of the baseline scheme: {elapsed:.1f} s")
    # a hang guard, not a speed target: measured 3.3 s (one run under -m root, 2026-11-26,
    # this 2-core machine shared with other developers' runs); 60 s is 18x that
    assert elapsed < 60
    base = res.schemes["baseline"]
    for job in ("a", "b"):
        assert len(base.jobs[job].iteration_times_s) == 9
        assert [p.parent for p in base.jobs[job].logs] == [tmp_path / "baseline"] * 2
    # each rank-0 worker (h1, h2) sends 500 kB per iteration across tbs1->tbs2; link bytes
    # count from the common start (the warm-up all-reduce is before it)
    payload = 2 * 10 * 500_000
    crossed = base.link_bytes["tbs1->tbs2"]
    assert payload <= crossed <= 1.3 * payload
    # results.json is the same result, read back
    assert runner_result(tmp_path) == res.to_dict()


def test_pytorch_ddp_2x2_workers(tmp_path):
    cfg = config(kind="ddp", iterations=6, width=128, layers=2)
    res = run_experiment(load_config(cfg), tmp_path, progress=lambda m: None)
    for job in ("a", "b"):
        result = res.schemes["baseline"].jobs[job]
        times = result.iteration_times_s
        assert len(times) == 5 and all(t > 0 for t in times)
        assert [r["iter"] for r in result.records(1)] == list(range(6))


def twice(check, tmp_path) -> None:
    """Run ``check(out_dir)``; when its first run misses, say how and run it once more.
    For the two tests of CASSINI's agent holding a synthetic pair: on 2026-11-26 each held
    in every root-only run (48 of 48 tests passed in a fresh clone) but both missed in one
    of three fresh-clone `make test` runs on an idle machine (job a ran 0.12-0.16 s
    iterations against a 0.117 s period at start-up, re-aligned 3 times and was released;
    in the other test 12 of 19 iterations within 5 %), and once in a root-only run while
    a `pip install` shared the 2 cores (15 of 19).  Two misses in a row still fail."""
    try:
        check(tmp_path / "run1")
    except AssertionError as first:
        print(f"first run missed, running once more: {first}")
        check(tmp_path / "run2")


def test_agent_holds_cassini_shift(tmp_path):
    # 800 kB per iteration (32 ms of a ~85 ms iteration at 200 Mbit/s), so that the
    # advice's predicted gain stays clear of its threshold.  Measured 2026-11-26 (this
    # 2-core machine, shared): 600 kB gave gains 0.99-1.19 and CASSINI held no job in 4
    # of 8 runs (on this branch and before it); 800 kB gains 1.17-1.19, both jobs held,
    # 95-100 % of iterations within 5 % (3 runs); 1 MB gains 1.15-1.22, but one of 3 runs
    # re-aligned at start-up (58 % within)
    def check(out):
        cfg = load_config(
            {
                **config(iterations=20, bytes=800_000, compute_s=0.05),
                "schemes": ["cassini"],
                "profile_iterations": 8,
            }
        )
        res = run_experiment(cfg, out, progress=lambda m: None)
        cassini = res.schemes["cassini"]
        periods = {j: r.period_s for j, r in cassini.jobs.items()}
        print(f"predicted gain {cassini.advice['predicted_gain']:.3f}, periods {periods}")
        assert all(periods.values()), periods  # both jobs held by the agent
        for job, period in periods.items():
            drifts = [r["drift_s"] for r in cassini.jobs[job].records(0)[1:]]
            within = sum(d <= 0.05 * period for d in drifts) / len(drifts)
            print(f"{job}: {within:.0%} of iterations within 5 % of the period")
            assert within >= 0.8, (job, drifts)
        # the two jobs' shifts really differ by about half an iteration
        shifts = {j: cassini.jobs[j].start_offset_s for j in ("a", "b")}
        period = periods["a"]
        gap = abs(shifts["a"] - shifts["b"]) % period
        assert 0.3 * period <= gap <= 0.7 * period

    twice(check, tmp_path)


def predicted_at_offsets(profiles, capacity_bps, offsets_s):
    """Per job, the fluid model's iteration time (s) averaged over the run's iterations,
    each simulated with the two jobs free-running at that iteration's offset (job b's
    communication start minus job a's, seconds; rounded to 1 ms)."""
    out = {"a": [], "b": []}
    for offset in offsets_s:
        late, shift = ("b", offset) if offset >= 0 else ("a", -offset)
        # a slot with a vanishing period only delays the job's first iteration
        slots = {late: Slot(round(shift, 3), 1e-9)}
        run = simulate_link([profiles["a"], profiles["b"]], capacity_bps, slots, iterations=8)
        for job in out:
            out[job].append(run.iteration_times_s[job])
    return {job: sum(times) / len(times) for job, times in out.items()}


def test_advice_predicts_the_testbed_pair_within_10_percent(tmp_path):
    """The advisor's prediction (cassini.predict) against the same run's measurement:
    a compatible pair (40 % communication each) shifted, and free-running from the same
    start.  On ``fair`` a free-running pair's offset is neutral and random-walks (a few ms
    per iteration here; one CI run wandered ~40 ms and ran at 0.113 s for a same-start
    prediction of 0.145 s), so that side is held to the model at the offsets the run had,
    which is the advisor's same-start number while the pair stays aligned."""

    def check(out):
        cfg = load_config(
            {
                **config(iterations=20, bytes=1_000_000, compute_s=0.06),
                "schemes": ["ideal", "baseline", "cassini"],
            }
        )
        res = run_experiment(cfg, out, progress=lambda m: None)
        cassini, baseline = res.schemes["cassini"], res.schemes["baseline"]
        predicted = cassini.advice["candidates"][0]["predicted_iteration_s"]
        for job in ("a", "b"):
            held = cassini.jobs[job]
            assert held.period_s is not None and not held.released
            # held by the agent: never faster than the period it was given
            shifted = max(predicted[job]["shifted"], held.period_s)
            measured = sum(held.iteration_times_s) / len(held.iteration_times_s)
            assert measured == pytest.approx(shifted, rel=0.10)
        capacity = 200e6 * payload_efficiency(cfg, res.schemes["ideal"])
        aligned = predicted_at_offsets(cassini.profiles, capacity, [0.0])
        for job in ("a", "b"):  # the model at offset 0 is the advisor's same-start prediction
            assert aligned[job] == pytest.approx(predicted[job]["same_start"], rel=0.01)
        pairs = zip(baseline.jobs["a"].records(0), baseline.jobs["b"].records(0), strict=True)
        offsets = [rb["comm_start"] - ra["comm_start"] for ra, rb in pairs]
        expected = predicted_at_offsets(cassini.profiles, capacity, offsets[1:])
        for job in ("a", "b"):
            times = baseline.jobs[job].iteration_times_s
            assert sum(times) / len(times) == pytest.approx(expected[job], rel=0.10), offsets

    twice(check, tmp_path)


def test_pcap_profile_recovers_iteration_time(tmp_path):
    topo = dumbbell(1, 200e6, 1e9, FabricSpec("fifo"))
    spec = {
        "job_id": "a",
        "rank": 0,
        "world_size": 2,
        "addrs": ["10.0.0.1", "10.0.0.2"],
        "port": 7000,
        "compute_s": 0.06,
        "bytes": 400_000,
        "iterations": 30,
        "epoch_s": time.time() + 2.5,
        "out": str(tmp_path / "r0.jsonl"),
    }
    with EmulatedCluster(topo) as cluster:
        procs = []
        with Capture(cluster, "h1", tmp_path / "h1.pcap"):
            for rank, host in enumerate(("h1", "h2")):
                s = {**spec, "rank": rank, "out": str(tmp_path / f"r{rank}.jsonl")}
                path = tmp_path / f"s{rank}.json"
                path.write_text(json.dumps(s))
                procs.append(
                    cluster.popen(host, [sys.executable, "-m", "testbed.worker", str(path)])
                )
            assert [p.wait(timeout=60) for p in procs] == [0, 0]
    records = read_log(tmp_path / "r0.jsonl")
    measured = sum(iteration_times(records)) / 29
    profile = profile_from_pcap("a", tmp_path / "h1.pcap", "10.0.0.1")
    assert profile.iteration_time_s == pytest.approx(measured, rel=0.05)
    # the fold at one period smears each phase over how far the iterations' starts wander
    # from a fixed period (a run of 80 ms iterations turning into 78 ms ones wandered
    # 18 ms, and read a 16 ms phase as 29 ms): never longer than the bytes need at the
    # link's rate plus the wander.  Shorter is possible: the smeared edges fall under
    # the phase threshold (half the typical rate) and the bytes conserved into the rest
    # raise its rate (one CI run read a 16 ms phase as 12 ms); at least half remains.
    starts = np.array([r["comm_start"] for r in records])
    k = np.arange(starts.size)
    residual = starts - np.polyval(np.polyfit(k, starts, 1), k)
    wander_share = float(residual.max() - residual.min()) / measured
    comm_share = 0.4e6 * 8 / 200e6 / measured
    assert 0.5 * comm_share <= profile.communication_share <= comm_share + wander_share + 0.05


def test_teardown_after_crash_leaves_nothing(tmp_path, monkeypatch):
    topo = dumbbell(2, 100e6, 1e9, FabricSpec("ecn"))
    with pytest.raises(RuntimeError, match="boom"), EmulatedCluster(topo, cc="cubic") as cluster:
        pids = [h.pid for h in cluster.net.hosts]
        crash = cluster.popen("h1", [sys.executable, "-c", "raise SystemExit(3)"])
        hang = cluster.popen("h2", ["sleep", "300"])  # a worker that would hang forever
        assert crash.wait(timeout=20) == 3
        assert hang.poll() is None
        raise RuntimeError("boom")
    assert leftovers() == []
    # the hanging worker went with its host: killed, not left running in a lost namespace
    assert hang.wait(timeout=10) is not None
    assert not os.path.exists(f"/proc/{hang.pid}"), "the hanging worker is still alive"
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), "host namespace shell still alive"
    assert not os.path.exists("/sys/fs/bpf/testbed/ecn_mark")

    # and through the runner: a crashing worker fails the scheme, cleanly
    from dataclasses import replace

    from testbed.run import session

    real = session.worker_spec

    def crashing(*args, **kwargs):
        return replace(real(*args, **kwargs), iterations="not a number")

    monkeypatch.setattr(session, "worker_spec", crashing)
    with pytest.raises(TestbedError, match="worker"):
        run_experiment(load_config(config()), tmp_path, progress=lambda m: None)
    assert leftovers() == []


def test_cleanup_command_runs():
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "cleanup"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "removed" in r.stdout


def test_leaf_spine_traffic_takes_the_described_spine(tmp_path):
    cfg = {
        "topology": {
            "kind": "leaf_spine",
            "leaves": 2,
            "spines": 2,
            "hosts_per_leaf": 2,
            "host_bps": 500_000_000,
            "oversubscription": 2,
            "fabric": "fifo",
        },
        "jobs": [
            {"id": "a", "hosts": ["h1", "h4"], "compute_s": 0.02, "bytes": 300_000, "iterations": 5}
        ],
        "schemes": ["baseline"],
    }
    res = run_experiment(load_config(cfg), tmp_path, progress=lambda m: None)
    moved = res.schemes["baseline"].link_bytes
    # h4 is host index 3: reached through spine 3 mod 2 = tbp2; h1 (index 0) through tbp1
    # link bytes count from the common start: the 5 timed iterations (the warm-up before)
    assert moved["tbl1->tbp2"] > 5 * 300_000 and moved["tbp1->tbl1"] > 5 * 300_000
    assert moved["tbl1->tbp1"] < 100_000 and moved["tbp2->tbl1"] < 100_000


def test_ecn_fabric_marks_ect_packets(tmp_path):
    cfg = {**config(fabric="ecn", iterations=8), "cc": "cubic"}
    res = run_experiment(load_config(cfg), tmp_path, progress=lambda m: None)
    base = res.schemes["baseline"]
    assert base.fabric == "ecn"
    assert sum(base.ecn_marks.values()) > 0


def test_tcp_state_counts_a_forced_retransmission_timeout():
    """The worker's ``total_rto`` and ``total_rto_time_ms`` read the right bytes of this
    kernel's tcp_info: a peer that goes away for 2 s (its veth down) costs the sender at
    least one retransmission timeout and some of those 2 s in recovery."""
    from testbed.worker import tcp_state

    ns, near, far = f"rtot{os.getpid()}", f"rtoa{os.getpid()}", f"rtob{os.getpid()}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True)

    server = sender = None
    ip("netns", "add", ns)
    try:
        ip("link", "add", near, "type", "veth", "peer", "name", far)
        ip("link", "set", far, "netns", ns)
        ip("addr", "add", "10.251.0.1/24", "dev", near)
        ip("link", "set", near, "up")
        ip("-n", ns, "addr", "add", "10.251.0.2/24", "dev", far)
        ip("-n", ns, "link", "set", far, "up")
        sink = ("import socket\ns = socket.create_server(('10.251.0.2', 5999))\n"
                "c, _ = s.accept()\nwhile c.recv(65536): pass")  # fmt: skip
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", sink])
        deadline = time.monotonic() + 10
        while sender is None:
            try:
                sender = socket.create_connection(("10.251.0.2", 5999), timeout=1)
            except OSError:
                assert time.monotonic() < deadline, "the sink never listened"
                time.sleep(0.1)
        sender.sendall(bytes(10_000))
        time.sleep(0.2)
        before = tcp_state(sender)
        require("total_rto" in before, "tcp_info's timeout counters (Linux 6.7+)")
        ip("-n", ns, "link", "set", far, "down")
        sender.setblocking(False)
        sender.send(bytes(50_000))
        time.sleep(2.0)
        ip("-n", ns, "link", "set", far, "up")
        time.sleep(1.5)
        after = tcp_state(sender)
    finally:
        if sender is not None:
            sender.close()
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", near], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert before["total_rto"] == 0 and before["total_rto_time_ms"] == 0
    assert after["total_rto"] >= 1, after
    assert 200 <= after["total_rto_time_ms"] <= 5_000, after
