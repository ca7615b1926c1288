"""``mltcp`` run from inside a network namespace (a newcomer's review, 2026-11-29), against
the fake kernel of tests/test_mltcp_cli.py (no root, nothing of this host touched):

1. ``ip netns exec NS mltcp ...`` mounts a /sys of its own: a selected cgroup only looks
   removed there, and it is never forgotten (``status`` only reads the state; ``select``,
   ``load`` and ``unload`` refuse there), so a later ``unload`` still detaches it;
2. there the BPF pins are not missing but out of sight: one line saying to run in the
   host's mount namespace (``nsenter --net``), exit 2; ``status`` never suggests ``ip
   netns exec``;
3. ``set`` names a bad flag (exit 2) before it finds that nothing is loaded;
4. ``select --default`` from another network namespace (``nsenter --net``) is refused,
   naming it and ``--netns``, instead of changing that namespace's default unrecorded.

``ip netns exec`` is faked as it looks to mltcp: another mount namespace than init's
(``proc/1/ns/mnt`` and ``proc/self/ns/mnt`` two files) and an empty /sys/fs/bpf.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path

import pytest
from test_mltcp_cli import FakeKernel, fake_kernel, mltcp, one_line

from mltcp import pinned
from mltcp.admin import cgroup, register, state
from mltcp.policy import MltcpParams

status = importlib.import_module("mltcp.admin.status")  # the package's `status` is a function
build = importlib.import_module("mltcp.admin.build")


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    k = fake_kernel(tmp_path, monkeypatch)
    mounts(monkeypatch, tmp_path / "mntns", other=False)  # the host's, whatever runs the test
    return k


def mounts(monkeypatch: pytest.MonkeyPatch, root: Path, other: bool) -> None:
    """This process in init's mount namespace, or (``other``) in one of its own."""
    for pid in ("1", "self"):
        (root / pid / "ns").mkdir(parents=True, exist_ok=True)
    (root / "1" / "ns" / "mnt").touch()
    here = root / "self" / "ns" / "mnt"
    here.unlink(missing_ok=True)
    if other:
        here.touch()
    else:
        os.link(root / "1" / "ns" / "mnt", here)
    monkeypatch.setattr(pinned, "PROC", root, raising=False)  # (before: no PROC)


def ip_netns_exec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """From here on, mltcp runs as under ``ip netns exec``: another mount namespace, whose
    /sys/fs/bpf is an empty directory of a fresh sysfs."""
    mounts(monkeypatch, tmp_path / "mntns", other=True)
    fresh = tmp_path / "fresh-sys-fs-bpf"
    fresh.mkdir()
    for module in (pinned, register, cgroup, status, build):
        monkeypatch.setattr(module, "PIN_DIR", fresh)
    for module in (cgroup, status):
        monkeypatch.setattr(module, "SELECT_PROG", fresh / "mltcp_select")


def selected_cgroup(kernel: FakeKernel, capsys, tmp_path: Path) -> str:
    """MLTCP loaded, and a cgroup recorded as selected (the path a fresh /sys lacks)."""
    assert mltcp(capsys, "load")[0] == 0
    cg = str(tmp_path / "sys-fs-cgroup-unified" / "X")
    state.save_state(dataclasses.replace(state.read_state(), cgroups=(cg,)))
    return cg


# -- 1: a cgroup is never forgotten where the host's /sys is out of sight -------------------
@pytest.mark.parametrize(
    "argv",
    [["status"], ["status", "--json"], ["load"], ["unload"], ["select", "reno", "--default"]],
    ids=" ".join,
)
def test_under_ip_netns_exec_a_selected_cgroup_is_not_forgotten(
    kernel, capsys, tmp_path, monkeypatch, argv
):
    """The reviewer's repro: ``ip netns exec A mltcp status`` emptied the state's cgroups
    ("was removed: forgotten", false), so a later ``unload`` left mltcp_select attached."""
    cg = selected_cgroup(kernel, capsys, tmp_path)
    before_state, before = state.STATE.read_text(), kernel.snapshot()
    ip_netns_exec(monkeypatch, tmp_path)
    code, out, err = mltcp(capsys, *argv)
    assert (code, out) == (2, "")
    line = one_line(err)
    assert "mount namespace" in line and "nsenter --net=" in line, line
    assert state.STATE.read_text() == before_state and cg in state.read_state().cgroups
    assert kernel.snapshot() == before  # nothing changed either


def test_status_only_reads_and_select_then_forgets_a_removed_cgroup(kernel, capsys, tmp_path):
    """In the host's mount namespace a removed cgroup is a note each time; ``status``
    writes nothing, the next ``select`` (or ``load``, ``unload``) drops it."""
    cg = selected_cgroup(kernel, capsys, tmp_path)
    before = state.STATE.read_text()
    for _ in range(2):
        code, out, _ = mltcp(capsys, "status")
        assert code == 0 and "problem:" not in out
        assert f"note: cgroup {cg} was removed" in out and "`mltcp select`" in out
        assert state.STATE.read_text() == before
    assert mltcp(capsys, "select", "mltcp_reno", "--default")[0] == 0
    assert state.read_state().cgroups == ()
    assert "cgroup" not in mltcp(capsys, "status")[1]


# -- 2: pins out of sight, not missing ------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [["mark", "j1"], ["assign-port", "5000", "j1"], ["set", "--slope", "1.5"], ["status"]],
    ids=" ".join,
)
def test_under_ip_netns_exec_pins_are_out_of_sight_in_one_line(
    kernel, capsys, tmp_path, monkeypatch, argv
):
    assert mltcp(capsys, "load")[0] == 0
    ip_netns_exec(monkeypatch, tmp_path)
    code, out, err = mltcp(capsys, *argv)
    line = one_line(err)
    assert (code, out) == (2, ""), line
    assert "removed by hand" not in line and "unload --force" not in line
    assert "another mount namespace" in line and "`nsenter --net=/run/netns/NAME mltcp" in line


def test_a_pin_removed_by_hand_in_the_host_namespace_is_still_said_so(kernel, capsys):
    assert mltcp(capsys, "load")[0] == 0
    (kernel.pins / "mltcp_marks").unlink()
    code, _, err = mltcp(capsys, "mark", "j1")
    assert code == 1 and "removed by hand" in one_line(err)


def test_mount_namespaces_are_compared_with_kthreadds_where_inits_is_hidden(tmp_path, monkeypatch):
    monkeypatch.setattr(pinned, "PIN_DIR", tmp_path)  # no mount point
    proc = tmp_path / "proc"
    for pid in ("2", "self"):
        (proc / pid / "ns").mkdir(parents=True)
        (proc / pid / "ns" / "mnt").touch()
    monkeypatch.setattr(pinned, "PROC", proc, raising=False)
    assert pinned.host_sys_hidden()  # 1's unreadable (a sandbox): 2's differs from ours
    (proc / "self" / "ns" / "mnt").unlink()
    os.link(proc / "2" / "ns" / "mnt", proc / "self" / "ns" / "mnt")
    assert not pinned.host_sys_hidden()
    (proc / "2" / "ns" / "mnt").unlink()
    assert not pinned.host_sys_hidden()  # cannot tell: as before, the host's
    monkeypatch.setattr(pinned, "PIN_DIR", Path("/"))  # a mount point: the pins are there
    (proc / "1" / "ns").mkdir(parents=True)
    (proc / "1" / "ns" / "mnt").touch()
    assert not pinned.host_sys_hidden()


def test_status_suggests_nsenter_not_ip_netns_exec(kernel, capsys):
    assert mltcp(capsys, "load", "--variant", "reno")[0] == 0
    kernel.add_netns("stale", "mltcp_cubic")
    code, out, _ = mltcp(capsys, "status")
    problems = [ln for ln in out.splitlines() if ln.startswith("problem:")]
    assert code == 0 and len(problems) == 1, out
    assert "ip netns exec" not in problems[0]
    net = kernel.netns_dir / "stale"
    assert f"`nsenter --net={net} sysctl -w net.ipv4.tcp_congestion_control=cubic`" in out


# -- 3: set names a bad flag first ------------------------------------------------------------
def test_set_names_a_bad_flag_when_nothing_is_loaded(kernel, capsys):
    code, out, err = mltcp(capsys, "set", "--slope", "-1")
    assert (code, out) == (2, "")
    assert one_line(err) == "mltcp: invalid parameter: --slope must be >= 0, got -1.0"
    code, _, err = mltcp(capsys, "set", "--slope", "1.5")  # a good flag: then, not loaded
    assert code == 1 and "MLTCP is not loaded" in one_line(err)


def test_set_checks_a_flag_alone_no_tighter_than_with_the_loaded_rule(kernel, capsys):
    from mltcp import admin

    assert mltcp(capsys, "load", "--intercept", "0.25")[0] == 0
    code, out, _ = mltcp(capsys, "set", "--slope", "63.5")  # 63.75 <= 64: fine
    assert code == 0 and "slope 63.5, intercept 0.25" in out
    code, _, err = mltcp(capsys, "set", "--intercept", "1")  # 64.5 with the loaded slope
    assert code == 2 and "--slope + --intercept must be <= 64" in one_line(err)
    assert admin.get_params() == MltcpParams(slope=63.5, intercept=0.25)


# -- 4: --default from another network namespace ------------------------------------------
def test_select_default_from_another_network_namespace_is_refused(kernel, capsys):
    """``nsenter --net=/run/netns/B mltcp select mltcp_cubic --default`` said "selected for
    the host", changed B's default only, and did not record it (a later unload refused)."""
    assert mltcp(capsys, "load")[0] == 0
    kernel.add_netns("B")
    here = kernel.proc / "self" / "ns" / "net"
    here.unlink()
    os.link(kernel.netns_dir / "B", here)  # nsenter --net=/run/netns/B
    before = kernel.snapshot()
    code, out, err = mltcp(capsys, "select", "mltcp_cubic", "--default")
    line = one_line(err)
    assert (code, out) == (2, ""), line
    assert "netns B" in line and "`mltcp select mltcp_cubic --netns B`" in line
    assert kernel.snapshot() == before and kernel.read("tcp_congestion_control") == "cubic"
    assert mltcp(capsys, "select", "mltcp_cubic", "--netns", "B")[0] == 0  # what it says
    assert kernel.netns["B"] == "mltcp_cubic"
    assert state.read_state().netns_before() == {"B": "cubic"}


def test_the_real_prerequisites_refuse_before_mounting_a_bpf_fs_in_a_hidden_sys(
    monkeypatch, tmp_path
):
    """load and unload call build.check_prerequisites, which mounted a BPF file system at
    the fresh /sys/fs/bpf of ``ip netns exec``: the hidden view then looked like the
    host's and a selected cgroup was forgotten (the tests' stand-in never mounts).  It
    refuses first now, whatever is selected."""
    ip_netns_exec(monkeypatch, tmp_path)
    ran: list[list[str]] = []
    monkeypatch.setattr(build.subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    monkeypatch.setattr(build.os, "geteuid", lambda: 0)
    monkeypatch.setattr(build.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(build, "Path", lambda p: type("P", (), {"exists": lambda s: True})())
    with pytest.raises(pinned.MltcpUsageError, match="mount namespace"):
        build.check_prerequisites()
    assert ran == []  # nothing mounted
