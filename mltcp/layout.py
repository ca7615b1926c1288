"""Keys and values of the pinned BPF maps, as user space packs and reads them.

The one definition is the C header ``ebpf/mltcp_maps.h``; this module describes the same
records field by field (little-endian, no implicit padding) and checks that description
against the BTF clang writes into the compiled objects (:func:`btf_problems`, used by
``tests/test_mltcp_layout.py``) and against the key and value sizes the kernel reports for
a pinned map (:class:`mltcp.bpfmap.PinnedMap` refuses a map whose sizes differ).  Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Record:
    """A C type as bytes: ``name`` is its C name (struct tag or typedef), ``fields`` are
    (member name, :mod:`struct` format) in order; a scalar has one field named ``""``."""

    name: str
    fields: tuple[tuple[str, str], ...]

    @property
    def fmt(self) -> str:
        return "<" + "".join(f for _, f in self.fields)

    @property
    def size(self) -> int:
        return struct.calcsize(self.fmt)

    def offsets(self) -> list[tuple[str, int, int]]:
        """(member, byte offset, byte size) of each field."""
        out, off = [], 0
        for name, f in self.fields:
            size = struct.calcsize("<" + f)
            out.append((name, off, size))
            off += size
        return out

    def pack(self, *values: Any) -> bytes:
        return struct.pack(self.fmt, *values)

    def unpack(self, raw: bytes) -> tuple[Any, ...]:
        return struct.unpack(self.fmt, raw)


U32 = Record("__u32", (("", "I"),))
CONFIG = Record(
    "mltcp_config",
    (("slope_q", "I"), ("intercept_q", "I"), ("idle_us", "I"), ("mode", "I"), ("flags", "I")),
)
PORT = Record("mltcp_port_t", (("", "H"),))
JOB = Record("mltcp_job_t", (("", "I"),))
MARK_COUNT = Record("mltcp_mark_count_t", (("", "Q"),))
FLOW_KEY = Record("mltcp_flow_key", (("local_port", "H"), ("remote_port", "H")))
FLOW_STATS = Record(
    "mltcp_flow_stats",
    (
        ("iterations", "Q"),
        ("last_iter_bytes", "Q"),
        ("bytes_acked", "Q"),
        ("factor_q", "I"),
        ("job", "I"),
    ),
)
REPAIR_COUNT = Record("mltcp_repair_count_t", (("", "Q"),))
REPAIR_EVENT = Record(
    "mltcp_repair_event",
    (("time_ns", "Q"),)
    + tuple(
        (name, "I")
        for name in [
            "local_port",
            "snd_cwnd",
            "snd_ssthresh",
            "prior_cwnd",
            "prior_ssthresh",
            "packets_out",
            "prr_delivered",
            "prr_out",
            "snd_una",
            "snd_nxt",
            "high_seq",
            "undo_marker",
            "delivered",
            "delivered_ce",
            "ca_state",
            "ecn_flags",
            "where",
            "acked",
        ]  # fmt: skip
    ),
)
REPAIR_LOG_LEN = 64  # MLTCP_REPAIR_LOG_LEN
CGROUP_ID = Record("__u64", (("", "Q"),))
CGROUP_CFG = Record("mltcp_cgroup_cfg", (("cc", "16s"), ("job", "I"), ("flags", "I")))
CGROUP_ECN = 0x1  # MLTCP_CGROUP_ECN: answer BPF_SOCK_OPS_NEEDS_ECN
# MLTCP_FLOW_ENDED: set in a flow's factor_q when its socket let go of MLTCP (closed, or
# moved to another control); F itself never exceeds 64 (2^16 in Q10)
FLOW_ENDED = 0x80000000
ECN_IFINDEX = Record("__u32", (("", "I"),))
ECN_CONFIG = Record("ecn_config", (("rate_bps", "Q"), ("threshold_bytes", "Q")))

# every pinned map: (key, value)
MAPS: dict[str, tuple[Record, Record]] = {
    "mltcp_config": (U32, CONFIG),
    "mltcp_ports": (PORT, JOB),
    "mltcp_marks": (JOB, MARK_COUNT),
    "mltcp_flows": (FLOW_KEY, FLOW_STATS),
    "mltcp_repairs": (U32, REPAIR_COUNT),
    "mltcp_repair_log": (U32, REPAIR_EVENT),
    "mltcp_cgroup_cfg": (CGROUP_ID, CGROUP_CFG),
}
# the testbed's ECN marker (testbed/bpf/ecn_mark.bpf.c), written by testbed.fabric
ECN_MAPS: dict[str, tuple[Record, Record]] = {"ecn_config": (ECN_IFINDEX, ECN_CONFIG)}


# -- BTF (the JSON `bpftool -j btf dump file OBJ` prints) ---------------------------------


def _types(btf: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {t["id"]: t for t in btf["types"]}


def _size(types: dict[int, dict[str, Any]], tid: int) -> int:
    t = types[tid]
    kind = t["kind"]
    if kind in ("INT", "STRUCT", "UNION", "ENUM", "ENUM64", "FLOAT"):
        return t["size"]
    if kind in ("TYPEDEF", "CONST", "VOLATILE", "RESTRICT", "TYPE_TAG"):
        return _size(types, t["type_id"])
    if kind == "ARRAY":
        return t["nr_elems"] * _size(types, t["type_id"])
    if kind == "PTR":
        return 8
    raise ValueError(f"BTF type {tid} of kind {kind} has no size here")


def _names(types: dict[int, dict[str, Any]], tid: int) -> tuple[list[str], int]:
    """Every name along a typedef chain, and the id it ends at."""
    names = []
    while types[tid]["kind"] in ("TYPEDEF", "CONST", "VOLATILE"):
        names.append(types[tid]["name"])
        tid = types[tid]["type_id"]
    names.append(types[tid].get("name", ""))
    return names, tid


def btf_map_types(btf: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """map name -> (key type id, value type id), from the ``.maps`` section's BTF."""
    types = _types(btf)
    out = {}
    for t in btf["types"]:
        if t["kind"] != "DATASEC" or t["name"] != ".maps":
            continue
        for v in t["vars"]:
            var = types[v["type_id"]]
            members = {m["name"]: m["type_id"] for m in types[var["type_id"]]["members"]}
            if "key" in members and "value" in members:
                key = types[members["key"]]["type_id"]  # __type(key, T) is a T *
                value = types[members["value"]]["type_id"]
                out[var["name"]] = (key, value)
    return out


def record_problems(btf: dict[str, Any], tid: int, rec: Record) -> list[str]:
    """How the BTF type ``tid`` differs from ``rec`` (name, size, members); [] if not."""
    types = _types(btf)
    names, end = _names(types, tid)
    problems = []
    if rec.name not in names:
        problems.append(f"C type is {' -> '.join(names)}, Python says {rec.name}")
    size = _size(types, tid)
    if size != rec.size:
        problems.append(f"{rec.name}: C size {size} bytes, Python {rec.size}")
    t = types[end]
    if t["kind"] == "STRUCT":
        c_fields = [
            (m["name"], m["bits_offset"] // 8, _size(types, m["type_id"])) for m in t["members"]
        ]
        if c_fields != rec.offsets():
            problems.append(f"{rec.name}: C members {c_fields}, Python {rec.offsets()}")
    elif len(rec.fields) != 1:
        problems.append(f"{rec.name}: C scalar, Python has {len(rec.fields)} fields")
    return problems


def btf_problems(btf: dict[str, Any], maps: dict[str, tuple[Record, Record]]) -> list[str]:
    """Every difference between the maps an object defines and ``maps`` (maps the object
    does not define are not checked)."""
    problems = []
    for name, (key_id, value_id) in btf_map_types(btf).items():
        if name not in maps:
            continue
        key, value = maps[name]
        problems += [f"{name} key: {p}" for p in record_problems(btf, key_id, key)]
        problems += [f"{name} value: {p}" for p in record_problems(btf, value_id, value)]
    return problems
