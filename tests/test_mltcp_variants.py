"""The variants table (``mltcp/variants.py``) is the only place a congestion control is
named: ``ebpf/Makefile`` builds exactly its objects, each from its source with its define,
each object registers the control the table names, ``ebpf/mltcp_switch.bpf.c`` moves each
to the table's base, and the loader, ``mltcp load --variant`` and ``testbed launch`` read it.
A variant added anywhere else, or missed somewhere, fails here with its name.  The last
test (root) switches a live socket of every variant to its base in the kernel."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import require

from mltcp import variants
from mltcp.admin import state as admin_state
from mltcp.pinned import MltcpError

EBPF = Path(__file__).resolve().parent.parent / "ebpf"
VARIANTS = variants.VARIANTS
IDS = [v.cc for v in VARIANTS]


def make(*args: str) -> str:
    r = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(EBPF), f"PYTHON={sys.executable}", *args],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def built() -> Path:
    for tool in ("clang", "bpftool", "make"):
        require(shutil.which(tool) is not None, f"{tool} (run make setup)")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "kernel BTF")
    make()
    return EBPF


def test_the_table_is_consistent():
    assert len(set(variants.NAMES)) == len(VARIANTS)
    assert len(set(variants.CCS)) == len(VARIANTS)
    for v in VARIANTS:
        assert (EBPF / v.source).is_file(), f"{v.cc}: no ebpf/{v.source}"
        if v.define:  # a shared source is built once per define: the source must use it
            assert v.define in (EBPF / v.source).read_text(), f"{v.cc}: {v.define} unused"
        assert variants.by_name(v.name) == v and variants.by_cc(v.cc) == v
    with pytest.raises(KeyError, match="one of reno, cubic"):
        variants.by_name("vegas")
    assert variants.by_cc("cubic") is None
    assert [v.cc for v in VARIANTS if variants.needs_ecn(v.cc)] == ["mltcp_dctcp", "dctcp_bpf"]
    assert variants.needs_ecn("dctcp") and not variants.needs_ecn("cubic")


def test_a_name_the_kernel_cannot_hold_is_refused():
    with pytest.raises(ValueError, match="cc 'mltcp_much_too_long'"):
        variants.Variant("x", "mltcp_much_too_long", "x.bpf.c", None, "reno", needs_ecn=False)


def test_the_makefile_builds_every_variant_from_its_source_with_its_define(built):
    objects = make("objects").split()
    variant_objects = [o for o in objects if variants.by_cc(o.removesuffix(".bpf.o"))]
    assert variant_objects == [v.obj for v in VARIANTS]
    for v in VARIANTS:
        commands = [ln for ln in make("-n", "-B", v.obj).splitlines() if f"-o {v.obj}" in ln]
        assert len(commands) == 1, (v.cc, commands)
        words = commands[0].split()
        assert words[words.index("-c") + 1] == v.source, v.cc
        defines = [w for w in words if w.startswith("-D") and not w.startswith("-D__TARGET")]
        assert defines == ([f"-D{v.define}"] if v.define else []), v.cc


def struct_ops_names(obj: Path) -> list[str]:
    out = subprocess.run(
        ["bpftool", "-j", "btf", "dump", "file", str(obj)], capture_output=True, text=True
    )
    types = json.loads(out.stdout)["types"]
    by_id = {t["id"]: t for t in types}
    return [
        by_id[var["type_id"]]["name"]
        for t in types
        if t["kind"] == "DATASEC" and t["name"].startswith(".struct_ops")
        for var in t["vars"]
    ]


@pytest.mark.parametrize("v", VARIANTS, ids=IDS)
def test_each_object_registers_the_control_the_table_names(built, v):
    assert struct_ops_names(built / v.obj) == [v.cc]


def test_the_switcher_maps_every_variant_to_its_base_and_names_none_itself(built):
    header = (built / "mltcp_variants.h").read_text()
    assert re.findall(r'X\("(\w+)", "(\w+)"\)', header) == [(v.cc, v.base) for v in VARIANTS]
    source = (EBPF / "mltcp_switch.bpf.c").read_text()
    assert '#include "mltcp_variants.h"' in source and "MLTCP_VARIANTS(" in source
    code = re.sub(r"/\*.*?\*/", "", source, flags=re.S)  # comments may name them
    named = [cc for cc in variants.CCS if cc in code]
    assert named == [], f"mltcp_switch.bpf.c names {named}: take them from the table"


def test_every_base_is_the_kernels_own():
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    for v in VARIANTS:
        assert variants.by_cc(v.base) is None, f"{v.cc}: base {v.base} is one of ours"
        assert v.base in available, f"{v.cc}: base {v.base} is not in this kernel"


def test_the_cli_and_testbed_launch_offer_the_table():
    from mltcp.cli import build_parser
    from testbed.launch import is_mltcp, mltcp_setup

    for name in [*variants.NAMES, "all"]:
        assert build_parser().parse_args(["load", "--variant", name]).variant == name
    with pytest.raises(SystemExit):
        build_parser().parse_args(["load", "--variant", "vegas"])
    for v in VARIANTS:
        assert is_mltcp(v.cc)
        assert f"load --variant {v.name} " in mltcp_setup(v.cc, "job")
    assert not is_mltcp("cubic")


def test_a_training_process_imports_no_admin_code():
    """``import mltcp`` (marks, ports, the marks descriptor) starts no process and needs no
    root: neither the admin package nor subprocess is imported."""
    code = (
        "import json, sys, mltcp, mltcp.marks; "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'subprocess' or 'mltcp' in m)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert "mltcp.marks" in loaded  # the check sees what was imported
    assert "subprocess" not in loaded and not [m for m in loaded if "admin" in m], loaded


def test_the_state_file_reads_into_a_dataclass_and_names_a_bad_field(tmp_path, monkeypatch):
    monkeypatch.setattr(admin_state, "STATE", tmp_path / "state.json")
    assert admin_state.read_state() == admin_state.LoaderState()  # none yet
    saved = admin_state.LoaderState(("reno", "cubic"), "cubic", ("mltcp_reno",), ("/cg/a",))
    admin_state.save_state(saved)
    assert admin_state.read_state() == saved
    raw = json.loads((tmp_path / "state.json").read_text())
    assert raw == {
        "allowed_before": ["reno", "cubic"],
        "default_before": "cubic",
        "loaded": ["mltcp_reno"],
        "cgroups": ["/cg/a"],
    }
    (tmp_path / "state.json").write_text('{"cgroups": "/cg/a"}')
    with pytest.raises(MltcpError, match="cgroups must be a list of strings"):
        admin_state.read_state()
    (tmp_path / "state.json").write_text("{not json")  # a crash while writing it
    assert admin_state.read_state() == admin_state.LoaderState()


@pytest.mark.root
def test_unload_force_moves_a_socket_of_every_variant_to_its_base(built):
    from mltcp import admin

    require(os.geteuid() == 0, "root")
    for tool in ("bpftool", "ss", "nsenter"):
        require(shutil.which(tool) is not None, tool)
    admin.unload(force=True)  # programs of this build, not an older registered one
    admin.load("all")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(len(VARIANTS))
    accepted: list[socket.socket] = []
    clients: list[tuple[variants.Variant, socket.socket]] = []
    try:
        t = threading.Thread(target=lambda: [accepted.append(srv.accept()[0]) for _ in VARIANTS])
        t.start()
        for v in VARIANTS:
            c = socket.socket()
            clients.append((v, c))
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, v.cc.encode())
            c.connect(srv.getsockname())
        t.join(10)
        moved = admin.switch_sockets()
        for v, c in clients:
            cc = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
            assert cc.rstrip(b"\0").decode() == v.base, v.cc
            assert (c.getsockname()[1], srv.getsockname()[1], v.base) in moved, v.cc
    finally:
        for s in [c for _, c in clients] + accepted + [srv]:
            s.close()
        admin.unload(force=True)
