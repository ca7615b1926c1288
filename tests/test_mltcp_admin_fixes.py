"""Fixes to the ``mltcp`` command line (review of 2026-11-29), against the fake kernel of
tests/test_mltcp_cli.py (no root) and, for what only the kernel can show, in the running
kernel (tests marked root: loopback, this run's cgroup and namespaces it creates):

1. ``unload`` counts sockets in every network namespace of the host, named or not,
   listeners included, names the namespace when it refuses, ``--force`` moves them in
   each; ``status`` reports an orphaned struct_ops;
2. a flow whose socket lets go of MLTCP (``release``) is marked ended: ``status --flows``
   lists live flows only; the job is shown by name when the state records it;
3. a removed cgroup is forgotten (a note, once), not a problem forever;
4. a relative ``--cgroup`` path is taken from the working directory;
5. an unknown congestion control exits 2 naming the known ones; a known one not loaded
   names the ``mltcp load --variant`` that loads it;
6. help and error texts: descriptions, flags named, bounds, cgroup v1 exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import require
from test_mltcp_cli import FakeKernel, fake_kernel, mltcp, one_line

from mltcp import cli, layout, marks, pinned, variants
from mltcp.admin import cgroup, state
from mltcp.policy import ONE

status = importlib.import_module("mltcp.admin.status")  # the package's `status` is a function

EBPF = Path(__file__).resolve().parent.parent / "ebpf"
LISTENER = "LISTEN 0      4      127.0.0.1:5000 0.0.0.0:*\n\t mltcp_reno cwnd:10 \n"
CONNECTED = "ESTAB 0      0      10.0.0.1:5001 10.0.0.2:7000\n\t mltcp_cubic wscale:7,7 \n"


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    return fake_kernel(tmp_path, monkeypatch)


# -- 1: every namespace, listeners, orphans (fake kernel) ---------------------------------
def test_unload_refuses_for_a_listener_naming_the_init_namespace(kernel, capsys):
    assert mltcp(capsys, "load")[0] == 0
    kernel.add_sockets(kernel.proc / "self" / "ns" / "net", LISTENER)
    before = kernel.snapshot()
    code, out, err = mltcp(capsys, "unload")
    assert (code, out) == (1, "")
    assert "1 socket(s) on mltcp_reno in netns init" in one_line(err) and "--force" in err
    assert kernel.snapshot() == before  # nothing unloaded


def test_unload_refuses_for_sockets_in_an_unnamed_namespace_and_force_moves_them(kernel, capsys):
    assert mltcp(capsys, "load")[0] == 0
    net = kernel.add_process(4242)  # `unshare -n`, a Mininet host: no name under /run/netns
    kernel.add_process(4243, like=4242)
    kernel.add_sockets(net, CONNECTED)
    kernel.add_netns("named")
    kernel.add_sockets(kernel.netns_dir / "named", LISTENER)
    code, _, err = mltcp(capsys, "unload")
    line = one_line(err)
    assert code == 1 and "1 socket(s) on mltcp_cubic in netns pid 4242" in line
    assert "1 socket(s) on mltcp_reno in netns named" in line
    code, out, _ = mltcp(capsys, "unload", "--force")
    assert code == 0 and "mltcp_cubic" in out
    switched = [c for c in kernel.commands if c[-2:-1] == ["cat"]]
    assert ["nsenter", f"--net={net}"] in [c[:2] for c in switched]
    assert ["nsenter", f"--net={kernel.netns_dir / 'named'}"] in [c[:2] for c in switched]
    assert not set(variants.CCS) & set(kernel.read("tcp_available_congestion_control").split())


def test_each_namespace_is_counted_once_under_its_name_or_lowest_pid(kernel):
    from mltcp.admin import netns

    kernel.add_process(30)  # alone in its namespace
    kernel.add_process(12)
    kernel.add_process(17, like=12)
    kernel.add_process(9, like=1)  # the init namespace
    kernel.add_netns("h1")
    os.link(kernel.netns_dir / "h1", kernel.proc / "40")  # not a namespace file: skipped
    found = netns.every()
    assert [ns.label for ns in found] == ["init", "h1", "pid 12", "pid 30"]
    assert found[0].here and not any(ns.here for ns in found[1:])
    assert found[2].paths == (str(kernel.proc / "12/ns/net"), str(kernel.proc / "17/ns/net"))


def test_status_reports_an_orphaned_struct_ops_and_what_to_do(kernel, capsys):
    kernel.orphans = ["mltcp_reno"]  # unregistered while a socket still held it
    kernel.add_sockets(kernel.proc / "self" / "ns" / "net", LISTENER)
    code, out, _ = mltcp(capsys, "status")
    assert code == 0 and out.startswith("loaded: nothing")
    problems = [ln for ln in out.splitlines() if ln.startswith("problem:")]
    assert len(problems) == 1 and "mltcp_reno" in problems[0] and "orphan" in problems[0]
    assert "`mltcp unload --force`" in problems[0]


def test_an_orphan_no_socket_holds_is_said_to_go_at_reboot(kernel, capsys):
    """A struct_ops the kernel itself keeps (a failed setsockopt or sysctl of the control
    leaked a reference; seen on this host): no socket uses it, ``unload --force`` moves
    nothing and frees nothing, so the advice is not that."""
    kernel.orphans = ["mltcp_dctcp"]
    code, out, _ = mltcp(capsys, "status")
    problems = [ln for ln in out.splitlines() if ln.startswith("problem:")]
    assert code == 0 and len(problems) == 1, out
    assert "no socket uses it" in problems[0] and "freed at reboot" in problems[0]
    assert "moves them" not in problems[0]


def test_status_reports_a_control_registered_that_the_state_does_not_record(kernel, capsys):
    assert mltcp(capsys, "load", "--variant", "reno")[0] == 0
    state.STATE.unlink()  # lost
    code, out, _ = mltcp(capsys, "status")
    assert code == 0 and "problem: mltcp_reno is registered but `mltcp load` did not" in out
    assert "mltcp load --variant reno" in out


# -- 2: flows: ended ones, job names (fake kernel; the release itself: root test below) ----
def put_flow(k: FakeKernel, lport: int, rport: int, job: int, ended: bool) -> None:
    factor_q = 2048 | (status.FLOW_ENDED if ended else 0)
    value = layout.FLOW_STATS.pack(5, 1000, 9000, factor_q, job)
    path = str(k.pins / "mltcp_flows")
    k.maps.setdefault(path, {})[layout.FLOW_KEY.pack(lport, rport)] = value


def test_status_flows_lists_live_flows_by_job_name_and_ended_ones_on_request(kernel, capsys):
    assert mltcp(capsys, "load")[0] == 0
    assert mltcp(capsys, "assign-port", "7000", "trainer-a")[0] == 0
    put_flow(kernel, 41000, 7000, marks.job_key("trainer-a"), ended=False)
    put_flow(kernel, 41001, 7000, marks.job_key("trainer-a"), ended=True)
    put_flow(kernel, 41002, 7001, marks.job_key("someone-else"), ended=False)
    put_flow(kernel, 41003, 7002, 0, ended=False)
    code, out, _ = mltcp(capsys, "status", "--flows")
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("  ")]
    assert code == 0 and [r[0] for r in rows] == ["41000->7000", "41002->7001", "41003->7002"]
    assert rows[0][1:3] == ["job", "trainer-a"] and "F 2.000" in out
    key = marks.job_key("someone-else")
    assert f"job key {key} (a hash; its name was not given here)" in out
    assert rows[2][1:3] == ["no", "job"]
    code, out, _ = mltcp(capsys, "status", "--flows", "--ended")
    assert "41001->7000 job trainer-a iterations 5 last 1000 B F 2.000 (ended)" in out
    flows = json.loads(mltcp(capsys, "status", "--flows", "--json")[1])["flows"]
    assert [(f["local_port"], f["job_name"], f["ended"]) for f in flows] == [
        (41000, "trainer-a", False),
        (41002, None, False),
        (41003, None, False),
    ]


def test_job_names_are_kept_in_the_state_newest_last_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE", tmp_path / "state.json")
    monkeypatch.setattr(state, "JOBS_KEPT", 3)
    # "a" again: already recorded, not written again (review mends: `mark` runs at every
    # iteration), so it keeps its place and is the first to go
    for job in ("a", "b", "c", "a", "d"):
        state.remember_job(job)
    kept = state.read_state().job_names()
    assert list(kept.values()) == ["b", "c", "d"]
    assert kept[marks.job_key("d")] == "d"
    raw = json.loads((tmp_path / "state.json").read_text())["jobs"]
    assert raw == {str(marks.job_key(j)): j for j in ("b", "c", "d")}
    (tmp_path / "state.json").write_text('{"jobs": {"x": "a"}}')
    with pytest.raises(pinned.MltcpError, match="jobs must map job keys"):
        state.read_state()


def test_ended_goes_with_flows(kernel, capsys):
    code, out, err = mltcp(capsys, "status", "--ended")
    assert (code, out) == (2, "") and one_line(err) == "mltcp: --ended goes with --flows"


def test_the_ended_flag_is_the_headers_and_above_any_factor():
    text = (EBPF / "mltcp_maps.h").read_text()
    found = re.search(r"#define MLTCP_FLOW_ENDED\s+(0x[0-9a-fA-F]+)", text)
    assert found and int(found.group(1), 16) == status.FLOW_ENDED
    assert status.FLOW_ENDED > 64 * ONE  # F <= 64: the flag never collides with a factor


@pytest.mark.parametrize("v", variants.VARIANTS, ids=lambda v: v.cc)
def test_every_variant_wires_release_to_mark_its_flow_ended(v):
    """Each variant's tcp_congestion_ops sets .release to a program calling mltcp_release
    (the source of a shared one names the handler through its macro)."""
    code = re.sub(r"/\*.*?\*/", "", (EBPF / v.source).read_text(), flags=re.S)
    ops = code[code.index('SEC(".struct_ops")') :]
    handler = re.search(r"\.release\s*=\s*\(void \*\)\s*([\w(]+\)?)", ops)
    assert handler, f"{v.source}: no .release in its tcp_congestion_ops"
    name = re.escape(handler.group(1))
    body = re.search(rf"{name},\s*struct sock \*sk\)\s*\{{(.*?)\}}", code, flags=re.S)
    assert body and "mltcp_release(" in body.group(1), f"{v.source}: release does not mark"


# -- 3: removed cgroups ---------------------------------------------------------------------
def test_a_removed_cgroup_is_a_note_once_and_unload_still_restores(kernel, capsys, tmp_path):
    kernel.add_netns("ns1", "reno")
    assert mltcp(capsys, "load")[0] == 0
    assert mltcp(capsys, "select", "mltcp_reno", "--netns", "ns1")[0] == 0
    gone = str(tmp_path / "removed-cgroup")
    state.save_state(replace_cgroups(state.read_state(), (gone,)))
    code, out, _ = mltcp(capsys, "status")  # status only reads: a note, the state kept
    assert code == 0 and "problem:" not in out
    assert f"note: cgroup {gone} was removed" in out
    assert gone in state.read_state().cgroups
    assert mltcp(capsys, "select", "mltcp_reno", "--netns", "ns1")[0] == 0  # forgets it
    code, out, _ = mltcp(capsys, "status")
    assert "cgroup" not in out and gone not in state.read_state().cgroups
    assert mltcp(capsys, "unload")[0] == 0
    assert kernel.netns == {"ns1": "reno"}
    assert kernel.read("tcp_allowed_congestion_control") == "reno cubic"
    assert kernel.read("tcp_congestion_control") == "cubic"


def test_select_and_load_drop_removed_cgroups_and_forget_cgroup_drops_one(kernel, capsys):
    for command in (["load"], ["select", "mltcp_reno", "--default"]):
        state.save_state(state.LoaderState(cgroups=("/nonexistent/cg-a",)))
        assert mltcp(capsys, *command)[0] == 0
        assert state.read_state().cgroups == ()
    here = Path.cwd()
    state.save_state(replace_cgroups(state.read_state(), (str(here), "/nonexistent/b")))
    assert cgroup.forget_cgroup(here) is True and cgroup.forget_cgroup(here) is False
    assert state.read_state().cgroups == ("/nonexistent/b",)


def replace_cgroups(st: state.LoaderState, cgroups: tuple[str, ...]) -> state.LoaderState:
    import dataclasses

    return dataclasses.replace(st, cgroups=cgroups)


# -- 4, 6: --cgroup paths -------------------------------------------------------------------
@pytest.fixture
def fake_mounts(tmp_path, monkeypatch):
    """A cgroup2 hierarchy at tmp/v2 and a cgroup v1 one at tmp/v1, each with a cgroup x."""
    for kind in ("v1", "v2"):
        (tmp_path / kind / "x").mkdir(parents=True)
        (tmp_path / kind / "x" / "cgroup.procs").touch()
    mounts = tmp_path / "mounts"
    mounts.write_text(
        f"cgroup {tmp_path / 'v1'} cgroup rw,pids 0 0\ncgroup2 {tmp_path / 'v2'} cgroup2 rw 0 0\n"
    )
    monkeypatch.setattr(cgroup, "MOUNTS", mounts, raising=False)  # (before: no MOUNTS)
    return tmp_path


def test_a_relative_cgroup_path_is_taken_from_the_working_directory(fake_mounts, monkeypatch):
    monkeypatch.chdir(fake_mounts / "v2")
    assert cgroup.cgroup_problem("x") is None
    assert cgroup.absolute("x") == fake_mounts / "v2" / "x"
    assert cli.bad_argument(cli.build_parser().parse_args(["select", "--cgroup", "x"])) is None


def test_a_cgroup_v1_directory_exits_2_like_any_bad_cgroup(kernel, capsys, fake_mounts):
    assert mltcp(capsys, "load")[0] == 0
    before = kernel.snapshot()
    code, out, err = mltcp(capsys, "select", "mltcp_reno", "--cgroup", str(fake_mounts / "v1/x"))
    assert (code, out) == (2, "")
    assert one_line(err).startswith("mltcp: --cgroup ") and "not on a cgroup v2" in err
    assert kernel.snapshot() == before


# -- 5: congestion-control names ------------------------------------------------------------
def test_an_unknown_control_exits_2_listing_the_known_ones(kernel, capsys):
    assert mltcp(capsys, "load", "--variant", "reno")[0] == 0
    kernel.add_netns("X")
    code, out, err = mltcp(capsys, "select", "mltcp_foo", "--netns", "X")
    line = one_line(err)
    assert (code, out) == (2, "") and "unknown congestion control mltcp_foo" in line
    assert all(cc in line for cc in variants.CCS) and "cubic" in line


def test_a_known_control_not_loaded_names_the_load_that_loads_it(kernel, capsys):
    assert mltcp(capsys, "load", "--variant", "reno")[0] == 0
    kernel.add_netns("X")
    code, _, err = mltcp(capsys, "select", "mltcp_dctcp", "--netns", "X")
    assert code == 1 and "run `mltcp load --variant dctcp` first" in one_line(err)
    assert kernel.netns == {"X": "cubic"}


# -- 6: help and messages -------------------------------------------------------------------
def subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_command_and_argument_says_what_it_is(name):
    parser = subcommands()[name]
    assert parser.description, f"mltcp {name} has no description"
    bare = [a.dest for a in parser._actions if a.help is None and a.dest != "help"]
    assert bare == [], f"mltcp {name}: no help for {bare}"


def test_help_gives_the_bounds_and_what_each_variant_loads():
    for name in ("set", "load"):
        helps = {a.dest: a.help for a in subcommands()[name]._actions}
        assert "slope + intercept <= 64" in helps["slope"]
        assert "slope + intercept <= 64" in helps["intercept"]
        assert "<= 60000" in helps["idle_ms"] and "milliseconds" in helps["idle_ms"]
    variant = next(a for a in subcommands()["load"]._actions if a.dest == "variant")
    for v in variants.VARIANTS:
        assert f"{v.name} loads {v.cc}" in variant.help


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["set", "--idle-ms", "70000"], "--idle-ms must be in (0, 60000]"),
        (["set", "--slope", "-1"], "--slope must be >= 0"),
        (["set", "--slope", "60", "--intercept", "5"], "--slope + --intercept must be <= 64"),
    ],
)
def test_parameter_errors_name_the_flag(kernel, capsys, argv, flag):
    assert mltcp(capsys, "load")[0] == 0
    code, _, err = mltcp(capsys, *argv)
    assert code == 2 and flag in one_line(err) and "idle_ms" not in err


def test_mark_says_what_its_number_is(kernel, capsys, monkeypatch):
    """Its help says what the number is; stdout is the bare number, as scripts read it
    (review mends: the words had broken `n=$(mltcp mark job)`)."""
    monkeypatch.setattr(marks, "_marks", None)  # opened afresh, in this fake kernel
    assert mltcp(capsys, "load")[0] == 0
    assert "iteration ends marked for JOB so far" in " ".join(
        subcommands()["mark"].format_help().split()
    )
    code, out, _ = mltcp(capsys, "mark", "trainer-a")
    assert code == 0 and out == "1\n"
    assert state.read_state().job_names() == {marks.job_key("trainer-a"): "trainer-a"}
    monkeypatch.setattr(marks, "_marks", None)


# -- root: the running kernel ---------------------------------------------------------------
def cli_run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mltcp.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)),
    )


def _struct_ops_of_ours() -> list[dict]:
    out = subprocess.run(["bpftool", "-j", "struct_ops", "list"], capture_output=True, text=True)
    return [m for m in json.loads(out.stdout or "[]") if m.get("name") in variants.CCS]


#: the struct_ops of ours the host held before these tests (a kernel-leaked orphan stays
#: until a reboot): tests must not assume a clean host; filled by the ``host`` fixture
LINGERING: set[int] = set()


def ours_in_kernel() -> list[dict]:
    """Our struct_ops maps the kernel holds (registered or orphaned), less those the host
    held before these tests."""
    return [m for m in _struct_ops_of_ours() if m.get("id") not in LINGERING]


def gone_soon() -> bool:
    """No struct_ops of ours left within 3 s (freed after its last socket, RCU)."""
    deadline = time.monotonic() + 3.0
    while ours_in_kernel():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def host():
    require(os.geteuid() == 0, "root")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "kernel BTF")
    for tool in ("clang", "bpftool", "nsenter", "ss", "unshare"):
        require(shutil.which(tool) is not None, f"{tool} (run make setup)")
    from helpers.mltcp_flows import take_mltcp

    from mltcp import admin

    take_mltcp()  # a clean start; never another user's sockets
    LINGERING.update(m["id"] for m in _struct_ops_of_ours())  # what is left is an orphan
    yield admin
    admin.unload()  # our sockets are closed: nothing to force


def listener(cc: str) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def cc_of(s: socket.socket) -> str:
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()


@pytest.mark.root
def test_root_unload_sees_a_listener_and_force_moves_it(host):
    host.load("reno")
    s = listener("mltcp_reno")
    try:
        r = cli_run("unload")
        assert r.returncode == 1 and "on mltcp_reno in netns init" in r.stderr, r.stderr
        assert "mltcp_reno" in pinned.available()
        r = cli_run("unload", "--force")
        assert r.returncode == 0, r.stderr
        assert cc_of(s) == "reno" and gone_soon(), ours_in_kernel()
    finally:
        s.close()


UNNAMED = textwrap.dedent("""
    import socket, subprocess, sys
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"mltcp_reno")
    c.connect(srv.getsockname()); a, _ = srv.accept()
    print("ready", flush=True)
    sys.stdin.readline()
    print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode())
""")


@pytest.mark.root
def test_root_unload_sees_a_namespace_without_a_name_and_force_moves_it(host):
    host.load("reno")
    p = subprocess.Popen(
        ["unshare", "-n", sys.executable, "-c", UNNAMED],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        r = cli_run("unload")
        assert r.returncode == 1, r.stderr
        assert f"1 socket(s) on mltcp_reno in netns pid {p.pid}" in r.stderr, r.stderr
        r = cli_run("unload", "--force")
        assert r.returncode == 0, r.stderr
        out, _ = p.communicate("\n", timeout=10)
        assert out.strip() == "reno"
        assert gone_soon(), ours_in_kernel()
    finally:
        p.kill()
        p.wait()


@pytest.mark.root
def test_root_status_reports_an_orphan_and_unload_force_frees_it(host):
    host.load("reno")
    s = listener("mltcp_reno")
    try:
        # what the old unload did: unregister while a socket (a listener) holds it
        subprocess.run(["bpftool", "struct_ops", "unregister", "name", "mltcp_reno"])
        assert "mltcp_reno" not in pinned.available() and ours_in_kernel()
        r = cli_run("status")
        assert r.returncode == 0 and "orphan" in r.stdout and "unload --force" in r.stdout
        r = cli_run("unload")
        assert r.returncode == 1 and "in netns init" in r.stderr, r.stderr
        r = cli_run("unload", "--force")
        assert r.returncode == 0, r.stderr
        assert cc_of(s) == "reno" and gone_soon(), ours_in_kernel()
        orphans = [ln for ln in cli_run("status").stdout.splitlines() if "orphan" in ln]
        assert all(any(f"map id {i})" in ln for i in LINGERING) for ln in orphans), orphans
    finally:
        s.close()


def bursts(cc: str, n: int = 3, size: int = 200_000, gap_s: float = 0.03):
    """A loopback connection on ``cc`` sending ``n`` bursts, each answered by one byte,
    ``gap_s`` apart (idle gaps: iteration boundaries).  Returns (client, server thread)
    with the client still open."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        a, _ = srv.accept()
        with a:
            while (k := int.from_bytes(a.recv(4, socket.MSG_WAITALL), "big")) > 0:
                a.recv(k, socket.MSG_WAITALL)
                a.sendall(b"k")
        srv.close()

    t = threading.Thread(target=serve)
    t.start()
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    c.connect(srv.getsockname())
    for _ in range(n + 1):  # the last send ends the last iteration
        c.sendall(size.to_bytes(4, "big") + bytes(size))
        c.recv(1)
        time.sleep(gap_s)
    return c, t


@pytest.mark.root
@pytest.mark.parametrize("v", variants.VARIANTS, ids=lambda v: v.cc)
def test_root_a_closed_flow_leaves_status_flows(host, v):
    from mltcp.policy import MltcpParams

    host.load(v.name, MltcpParams(1.0, 0.5, idle_ms=10))
    host.set_params(MltcpParams(1.0, 0.5, idle_ms=10))
    c, t = bursts(v.cc)
    port = c.getsockname()[1]

    def listed(*flags):
        r = cli_run("status", "--flows", "--json", *flags)
        assert r.returncode == 0, r.stderr
        return [f for f in json.loads(r.stdout).get("flows", []) if f["local_port"] == port]

    try:
        live = listed()
        assert len(live) == 1 and live[0]["iterations"] >= 2 and not live[0]["ended"], live
    finally:
        c.sendall((0).to_bytes(4, "big"))
        c.close()
        t.join(10)
    deadline = time.monotonic() + 3.0  # the socket is destroyed once the FINs are through
    while listed() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listed() == []
    ended = listed("--ended")  # the last send, after a gap, may have ended one more
    assert len(ended) == 1 and ended[0]["ended"] and ended[0]["iterations"] >= live[0]["iterations"]


@pytest.mark.root
def test_root_select_takes_a_relative_cgroup_path_from_the_working_directory(host, run_cgroup):
    host.load("reno")
    r = cli_run("select", "mltcp_reno", "--cgroup", run_cgroup.name, cwd=run_cgroup.parent)
    assert r.returncode == 0, r.stderr
    assert str(run_cgroup) in state.read_state().cgroups
    shown = subprocess.run(
        ["bpftool", "cgroup", "show", str(run_cgroup)], capture_output=True, text=True
    )
    assert "mltcp_select" in shown.stdout
    assert host.forget_cgroup(run_cgroup) is True
    shown = subprocess.run(
        ["bpftool", "cgroup", "show", str(run_cgroup)], capture_output=True, text=True
    )
    assert "mltcp_select" not in shown.stdout and str(run_cgroup) not in state.read_state().cgroups
