"""MLTCP under load and under hand-made breakage (root; each test well under a minute):
unload while 50 flows run (refused, then forced: flows go on on the base algorithm and
nothing is left behind), idempotent load/unload and load after a crash that left pins,
parameters changed every 100 ms under traffic, 200 flows on one FIFO bottleneck for 20 s
in exact mode, a selected cgroup removed and a pinned map removed by hand.  Window repairs
are allowed only with the known kernel fault's signature: it strikes on loss Recovery as
well as on ECN's CWR."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import require
from helpers.mltcp_flows import Pair, finish, sh, take_mltcp, wait_until
from helpers.mltcp_window_fault import is_known_kernel_fault, repairs_since

from mltcp import admin, bpfmap, layout, marks, pinned, variants
from mltcp.bpfmap import map_info
from mltcp.policy import MltcpParams

pytestmark = pytest.mark.root
SYSCTL = Path("/proc/sys/net/ipv4")
OURS = set(variants.CCS)


def our_struct_ops() -> set[int]:
    """Map ids of the struct_ops of ours in the kernel (registered or not)."""
    maps = json.loads(sh("bpftool", "-j", "map", "show") or "[]")
    return {m["id"] for m in maps if m.get("type") == "struct_ops" and m.get("name") in OURS}


def snapshot() -> dict:
    """What the host had before: other algorithms, and the orphans of ours it already held
    (a struct_ops a socket or the kernel keeps after its unload: until the sockets close,
    or, leaked by the kernel, until a reboot; tests must not assume a clean host)."""
    return {
        "available": [c for c in pinned.available() if c not in OURS],
        "allowed": [c for c in pinned.allowed() if c not in OURS],
        "default": (SYSCTL / "tcp_congestion_control").read_text().strip(),
        # taken after take_mltcp() unloaded ours: what is left of ours is an orphan
        "lingering": our_struct_ops(),
    }


def new_problems(before: dict) -> list[str]:
    """``mltcp status``'s problems, less the orphans the host held before the tests."""
    old = [f"map id {i})" for i in before["lingering"]]
    return [p for p in admin.status()["problems"] if not any(o in p for o in old)]


def assert_clean(before: dict) -> None:
    """Nothing of MLTCP left in the kernel: none of ours available, allowed or the
    default, every other algorithm that was available still is, no pins, no registered
    or lingering struct_ops, no state file.  (The allowed list and the default are
    host-wide settings a testbed run writes too: only our names are checked in them.)"""
    assert not OURS & set(pinned.available())
    assert not OURS & set(pinned.allowed())
    assert (SYSCTL / "tcp_congestion_control").read_text().strip() not in OURS
    assert set(before["available"]) <= set(pinned.available())
    assert sorted(p.name for p in pinned.PIN_DIR.glob("mltcp*")) == []
    assert not admin.STATE.exists()

    def no_struct_ops() -> bool:
        return not our_struct_ops() - before["lingering"]

    # a struct_ops map lives until the last socket that used it lets go (RCU)
    assert wait_until(no_struct_ops, 3.0), "a struct_ops map of ours is still in the kernel"


@pytest.fixture(scope="module")
def kernel():
    require(os.geteuid() == 0, "root")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "kernel BTF")
    for tool in ("clang", "bpftool", "nsenter", "ss", "tc"):
        require(subprocess.run(["which", tool], capture_output=True).returncode == 0, tool)
    take_mltcp()  # what an aborted run left; never another user's sockets
    before = snapshot()
    yield before
    admin.unload()  # our flows are gone: nothing to force
    assert_clean(before)


@pytest.fixture
def cgroup_dir(kernel, run_cgroup):
    """This run's cgroup (conftest), once MLTCP is loaded."""
    return run_cgroup


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mltcp.cli", *args], capture_output=True, text=True, timeout=120
    )


def repairs() -> int:
    return admin.status()["window_repairs"]


def assert_only_known_fault_repairs(before: int) -> None:
    """Every window mltcp_guard repaired since `before` had the known kernel fault's
    signature (README, Known problems): the guard may act, our growth may not need it.
    Measured (2026-11-26, this host and CI): the 200-flow run below hit it on loss
    Recovery in 1 of 9 runs here (2 sockets) and once in CI (5); never on our growth."""
    log = repairs_since(before)
    print(f"window repairs (known kernel fault): {len(log)}")
    unknown = [e for e in log if not is_known_kernel_fault(e)]
    assert unknown == [], unknown[:3]


@pytest.mark.timing
def test_unload_under_50_flows_refused_then_forced_flows_continue_nothing_leaks(
    kernel, tmp_path, cgroup_dir
):
    admin.load("reno", MltcpParams(1.0, 0.5, idle_ms=10))
    admin.select("mltcp_reno", cgroup=cgroup_dir, job="fault-unload")  # to be detached
    with Pair("mltf_un", 213) as pair:
        port = pair.start_server(tmp_path)
        p = pair.start_clients(tmp_path, port, 50, 40_000, 5.0, 0.01, 21000, cc="mltcp_reno")
        try:
            time.sleep(1.0)
            r = cli("unload")
            assert r.returncode == 1 and "still in use" in r.stderr and "--force" in r.stderr
            assert "mltcp_reno" in pinned.available()
            t_unload = time.time()
            r = cli("unload", "--force")
            assert r.returncode == 0, r.stderr
        finally:
            out = finish(p, tmp_path, 30, pair)
    rows = out["flows"]
    assert len(rows) == 50
    # every flow moved to Reno and kept completing iterations after the unload
    assert {f["cc"] for f in rows} == {"reno"}
    after = t_unload - out["t0"] + 0.5
    first_last = min(f["last_done_s"] for f in rows) - (after - 0.5)
    print(f"every flow's last iteration at least {first_last:.2f} s after the forced unload")
    # measured (one run, 2026-11-26): every flow completed iterations until 3.6 s after the
    # forced unload (the 5 s run's end); a stalled flow stops at the unload.  0.5 s is the
    # margin for a loaded machine's scheduling
    stalled = [f for f in rows if f["last_done_s"] < after]
    assert stalled == [], stalled[:3]
    assert "mltcp_select" not in sh("bpftool", "cgroup", "show", str(cgroup_dir))
    assert_clean(kernel)


def test_load_unload_idempotent_and_load_after_a_crash_that_left_pins(kernel):
    assert admin.unload(force=True) == []
    assert admin.unload() == []
    names = admin.load("all")
    assert sorted(names) == sorted(OURS)
    assert admin.get_params() == MltcpParams()  # a new config map gets the defaults
    assert admin.load("all") == names
    assert all(pinned.allowed().count(n) == 1 for n in names)
    # crash 1: the congestion controls went away (unregistered behind our back), the
    # pins and nothing else stayed; the state file is gone
    for map_id in our_struct_ops() - kernel["lingering"]:  # by id: an orphan shares a name
        sh("bpftool", "struct_ops", "unregister", "id", str(map_id))
    admin.STATE.unlink()
    assert (pinned.PIN_DIR / "mltcp_config").exists()
    assert admin.load("reno") == ["mltcp_reno"]
    assert new_problems(kernel) == []
    # crash 2: an older mltcp left a pin of another layout
    admin.unload(force=True)
    sh(
        "bpftool", "map", "create", str(pinned.PIN_DIR / "mltcp_flows"), "type", "hash",
        "key", "4", "value", "16", "entries", "16", "name", "mltcp_flows",
    )  # fmt: skip
    assert admin.load("reno") == ["mltcp_reno"]
    assert new_problems(kernel) == []
    fd_path = str(pinned.PIN_DIR / "mltcp_flows")
    with bpfmap.PinnedMap(fd_path, *pinned.MAPS["mltcp_flows"]) as m:
        assert map_info(m.fd)["value_size"] == layout.FLOW_STATS.size
    admin.unload()
    admin.unload()
    assert_clean(kernel)


@pytest.mark.timing
def test_parameters_changed_every_100ms_under_traffic_no_stall_no_unknown_repair(kernel, tmp_path):
    admin.load("reno", MltcpParams(1.0, 0.5, idle_ms=10, mode="exact"))
    settings = [
        MltcpParams(1.0, 0.5, 10, "exact"),
        MltcpParams(3.0, 0.25, 1, "idle"),
        MltcpParams(0.0, 1.0, 50, "exact"),
        MltcpParams(2.0, 1.5, 5, "idle"),
        MltcpParams(0.5, 0.75, 20, "exact"),
    ]
    changes = 0
    stop = threading.Event()

    def churn():
        nonlocal changes
        while not stop.is_set():
            admin.set_params(settings[changes % len(settings)])
            changes += 1
            time.sleep(0.1)

    before = repairs()
    with Pair("mltf_pc", 214, rate_bps=100e6, buffer_packets=100) as pair:
        port = pair.start_server(tmp_path)
        p = pair.start_clients(
            tmp_path, port, 20, 100_000, 4.0, 0.005, 22000, cc="mltcp_reno", mark=True, job0=500
        )
        t = threading.Thread(target=churn)
        t.start()
        try:
            out = finish(p, tmp_path, 30)
        finally:
            stop.set()
            t.join()
    rows = out["flows"]
    slowest = max(f["max_s"] for f in rows)
    print(f"{changes} parameter changes; slowest iteration {slowest:.3f} s")
    # measured (one run, 2026-11-26): 43 changes in the 4 s run (one per 100 ms sleep plus
    # the map write), slowest iteration 0.217 s; the bounds leave a loaded machine 30 %
    # fewer changes and 4.6x slower iterations before failing
    assert changes >= 30
    # every flow kept going: at least 5 iterations, none longer than a second
    assert min(f["iterations"] for f in rows) >= 5, rows
    assert max(f["max_s"] for f in rows) < 1.0, max(f["max_s"] for f in rows)
    assert_only_known_fault_repairs(before)


def test_200_flows_for_20s_exact_iteration_counts_no_unknown_repair_on_fifo(kernel, tmp_path):
    admin.load("reno", MltcpParams(1.0, 0.5, idle_ms=10, mode="exact"))
    n, base, job0 = 200, 23000, 2000
    for i in range(n):
        marks.assign_port(base + i, job0 + i)
    before = repairs()
    # the FIFO sits in a router namespace: on the sender's own interface, 200 flows keep
    # it full and Linux aborts a flow whose sends keep failing locally (see Pair).  Five
    # packets of buffer per flow: with one (200 packets) plain Reno starves a tenth of the
    # flows in RTO back-off (1 iteration in 20 s, measured), which is TCP, not MLTCP
    with Pair("mltf_200", 215, rate_bps=200e6, buffer_packets=1000, router=True) as pair:
        port = pair.start_server(tmp_path)
        p = pair.start_clients(
            tmp_path, port, n, 50_000, 20.0, 0.005, base, cc="mltcp_reno", mark=True, job0=job0
        )
        out = finish(p, tmp_path, 50)
    kernel_rows = {f["local_port"]: f for f in admin.status(flows=True)["flows"]}
    wrong = []
    for f in out["flows"]:
        k = kernel_rows.get(f["lport"])
        if k is None or k["iterations"] != f["iterations"] or k["job"] != f["job"]:
            wrong.append((f, k))
    assert len(out["flows"]) == n
    assert min(f["iterations"] for f in out["flows"]) >= 10
    assert wrong == [], wrong[:3]
    assert_only_known_fault_repairs(before)
    admin.set_params(MltcpParams(1.0, 0.5, idle_ms=10, mode="idle"))


def test_cgroup_removed_while_attached_and_pin_removed_by_hand(kernel, cgroup_dir):
    admin.load("reno")
    admin.select("mltcp_reno", cgroup=cgroup_dir, job="fault-cg")
    assert new_problems(kernel) == []
    cgroup_dir.rmdir()  # empty: the kernel lets it go with the program attached
    found = admin.status()  # a note: the attachment went with the cgroup; status only reads
    old = [f"map id {i})" for i in kernel["lingering"]]
    assert [p for p in found["problems"] if not any(o in p for o in old)] == []
    assert any("was removed" in n and str(cgroup_dir) in n for n in found["notes"])
    assert str(cgroup_dir) in str(admin.read_state().cgroups)
    admin.forget_removed_cgroups()  # as the next select, load or unload does
    assert str(cgroup_dir) not in str(admin.read_state().cgroups)
    assert admin.status()["notes"] == []
    (pinned.PIN_DIR / "mltcp_marks").unlink()
    problems = admin.status()["problems"]
    assert any("mltcp_marks is missing" in p for p in problems), problems
    r = cli("mark", "fault-cg")
    assert r.returncode == 1 and "removed by hand" in r.stderr
    r = cli("status")
    assert r.returncode == 0 and "mltcp_marks is missing" in r.stdout
    r = cli("unload")
    assert r.returncode == 0, r.stderr
    assert_clean(kernel)
