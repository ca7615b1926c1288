"""One definition of every shared layout: the map keys and values of ``ebpf/mltcp_maps.h``
as clang's BTF describes them must be what ``mltcp.layout`` packs, member for member; a
header changed on its own makes these tests fail.  Needs clang, bpftool and the kernel's
BTF (not root); under CI=true missing ones fail.  The kernel-side sizes of the pinned maps
are checked in tests/test_mltcp_kernel_root.py."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import require

from mltcp import layout, policy

EBPF = Path(__file__).resolve().parent.parent / "ebpf"
OBJECTS = ["mltcp_reno", "mltcp_cubic", "dctcp_bpf", "mltcp_dctcp", "mltcp_select"]


@pytest.fixture(scope="module")
def built():
    for tool in ("clang", "bpftool", "make"):
        require(shutil.which(tool) is not None, f"{tool} (run make setup)")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "kernel BTF")
    r = subprocess.run(["make", "-s", "-C", str(EBPF)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return EBPF


def btf(obj: Path) -> dict:
    out = subprocess.run(
        ["bpftool", "-j", "btf", "dump", "file", str(obj)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


@pytest.mark.parametrize("name", OBJECTS)
def test_every_map_of_every_object_is_described_and_matches(built, name):
    b = btf(built / f"{name}.bpf.o")
    maps = layout.btf_map_types(b)
    assert set(maps) <= set(layout.MAPS), set(maps) - set(layout.MAPS)
    assert "mltcp_config" in maps and "mltcp_flows" in maps
    assert layout.btf_problems(b, layout.MAPS) == []


def test_the_ecn_markers_config_matches(built):
    b = btf(built / "ecn_mark.bpf.o")
    assert "ecn_config" in layout.btf_map_types(b)
    assert layout.btf_problems(b, layout.ECN_MAPS) == []


STATS_END = "\t__u32 job;\n};\n\n/* mltcp_repairs"
CONFIG_START = "\t__u32 slope_q;\t\t/* Q10 */\n\t__u32 intercept_q;"


@pytest.mark.parametrize(
    "edit, changed, expect",
    [
        (STATS_END, STATS_END.replace("job;", "job;\n\t__u64 extra;"), "mltcp_flow_stats: C size"),
        (CONFIG_START, "\t__u32 intercept_q;\n\t__u32 slope_q;", "mltcp_config: C members"),
        ("typedef __u16 mltcp_port_t;", "typedef __u32 mltcp_port_t;", "mltcp_port_t: C size 4"),
    ],
)
def test_a_header_changed_alone_is_caught(built, tmp_path, edit, changed, expect):
    """Rebuild mltcp_select from a copy of ebpf/ with one header edit: the check fails."""
    for f in [*built.glob("*.h"), built / "mltcp_select.bpf.c", built / "Makefile"]:
        shutil.copy(f, tmp_path / f.name)
    header = tmp_path / "mltcp_maps.h"
    text = header.read_text()
    assert edit in text
    header.write_text(text.replace(edit, changed))
    r = subprocess.run(
        ["make", "-s", "-C", str(tmp_path), "mltcp_select.bpf.o"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    problems = layout.btf_problems(btf(tmp_path / "mltcp_select.bpf.o"), layout.MAPS)
    assert any(expect in p for p in problems), problems


def test_records_pack_to_their_sizes():
    assert layout.FLOW_STATS.size == 32 and layout.CGROUP_CFG.size == 24
    raw = layout.CGROUP_CFG.pack(b"mltcp_reno", 7, layout.CGROUP_ECN)
    assert raw[:16] == b"mltcp_reno" + bytes(6) and layout.CGROUP_CFG.unpack(raw)[1:] == (7, 1)


def test_constants_match_the_header():
    """The header's flag, mode and length constants are the ones user space writes."""
    text = (EBPF / "mltcp_maps.h").read_text()
    found = re.findall(r"#define (MLTCP_\w+)\s+(0x[0-9a-f]+|\d+)", text)
    defines = {name: int(value, 0) for name, value in found}
    assert defines["MLTCP_FLAG_SCALE_CUT"] == policy.FLAG_SCALE_CUT
    assert defines["MLTCP_CGROUP_ECN"] == layout.CGROUP_ECN
    assert defines["MLTCP_FLOW_ENDED"] == layout.FLOW_ENDED
    assert defines["MLTCP_REPAIR_LOG_LEN"] == layout.REPAIR_LOG_LEN
    assert [defines["MLTCP_MODE_IDLE"], defines["MLTCP_MODE_EXACT"]] == [
        policy.MODES.index("idle"),
        policy.MODES.index("exact"),
    ]
