"""Build, register, select, parameterise and unload the MLTCP congestion controls.

The BPF programs (``ebpf/*.bpf.c``) are struct_ops ``tcp_congestion_ops`` registered with
``bpftool struct_ops register`` (they stay registered until unregistered).  Their shared
maps are pinned by name under ``/sys/fs/bpf`` (``mltcp_config``, ``mltcp_ports``,
``mltcp_marks``, ``mltcp_flows``, ``mltcp_repairs``).  What ``load`` changes (the allowed
list, the default congestion control, the cgroups given to ``select``) is recorded in
``/run/mltcp/state.json`` so ``unload`` puts it back.  ``select --cgroup`` attaches the
sock_ops program ``ebpf/mltcp_select.bpf.c`` (pinned as ``/sys/fs/bpf/mltcp_select``).
Keys and values of every map are defined once in ``ebpf/mltcp_maps.h``; :mod:`mltcp.layout`
describes them for Python and every pinned map is checked against the sizes the kernel
reports when it is opened.  ``unload --force`` first moves the sockets still using our
congestion controls to their base algorithm (``ebpf/mltcp_switch.bpf.c``, a TCP socket
iterator run in every named network namespace), so their flows keep running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

from mltcp import layout
from mltcp.bpfmap import LayoutMismatch, PinnedMap
from mltcp.policy import FLAG_SCALE_CUT, MODES, ONE, MltcpParams

EBPF_DIR = Path(__file__).resolve().parent.parent / "ebpf"
PIN_DIR = Path("/sys/fs/bpf")
STATE = Path("/run/mltcp/state.json")
SELECT_PROG = Path("/sys/fs/bpf/mltcp_select")  # the pinned cgroup sock_ops program
SYSCTL = Path("/proc/sys/net/ipv4")
VARIANTS = {
    "reno": "mltcp_reno",
    "cubic": "mltcp_cubic",
    "dctcp": "mltcp_dctcp",
    "dctcp_bpf": "dctcp_bpf",
}
# congestion controls that need ECN negotiated (TCP_CONG_NEEDS_ECN): `select --cgroup` also
# answers BPF_SOCK_OPS_NEEDS_ECN for their sockets
ECN_CCS = ("dctcp_bpf", "mltcp_dctcp", "dctcp")
MAPS = {  # name: (key size, value size) in bytes, from the one definition
    name: (key.size, value.size) for name, (key, value) in layout.MAPS.items()
}
SHARED_MAPS = [m for m in MAPS if m != "mltcp_cgroup_cfg"]  # pinned by every variant
SWITCH_ITER = PIN_DIR / "mltcp_switch_iter"


class MltcpError(RuntimeError):
    """A clear, one-line problem with what to do about it."""


# -- prerequisites -------------------------------------------------------------------------


def check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise MltcpError("loading congestion controls needs root: run with sudo")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        raise MltcpError("no kernel BTF (/sys/kernel/btf/vmlinux): need CONFIG_DEBUG_INFO_BTF=y")
    for tool in ("clang", "bpftool"):
        if shutil.which(tool) is None:
            raise MltcpError(f"`{tool}` not found: run `make setup` (Debian: clang llvm bpftool)")
    if not os.path.ismount(PIN_DIR):
        subprocess.run(["mount", "-t", "bpf", "bpf", str(PIN_DIR)], check=True)


def sources(variant: str) -> list[str]:
    """Congestion-control names a ``--variant`` stands for."""
    if variant == "all":
        return list(VARIANTS.values())
    if variant not in VARIANTS:
        raise MltcpError(f"unknown variant {variant!r}: one of {', '.join(VARIANTS)}, all")
    return [VARIANTS[variant]]


# -- build and register --------------------------------------------------------------------


def build(name: str) -> Path:
    """Compile ``ebpf/NAME.bpf.c`` (and vmlinux.h from this kernel's BTF) if needed."""
    obj = EBPF_DIR / f"{name}.bpf.o"
    r = subprocess.run(
        ["make", "-s", "-C", str(EBPF_DIR), obj.name], capture_output=True, text=True
    )
    if r.returncode != 0:
        raise MltcpError(f"building {name} failed:\n{_tail(r.stderr or r.stdout, 20)}")
    return obj


def available() -> list[str]:
    return (SYSCTL / "tcp_available_congestion_control").read_text().split()


def allowed() -> list[str]:
    return (SYSCTL / "tcp_allowed_congestion_control").read_text().split()


def load(variant: str = "all", params: MltcpParams | None = None) -> list[str]:
    """Register the variant(s) (idempotent), set parameters, allow them in namespaces.
    Returns the congestion-control names now loaded."""
    check_prerequisites()
    state = _state()
    state.setdefault("allowed_before", allowed())
    state.setdefault("default_before", (SYSCTL / "tcp_congestion_control").read_text().strip())
    names = sources(variant)
    if not [n for n in VARIANTS.values() if n in available()]:
        _drop_stale_pins()
    for name in names:
        if name in available():
            continue
        obj = build(name)
        r = subprocess.run(
            ["bpftool", "struct_ops", "register", str(obj)], capture_output=True, text=True
        )
        if r.returncode != 0 or name not in available():
            raise MltcpError(f"the kernel rejected {name}:\n{_verifier_lines(r.stderr + r.stdout)}")
    if params is not None or not any(_read_config()):  # a new config map: all zeros
        set_params(params or MltcpParams())
    now = allowed()
    missing = [n for n in names if n not in now]
    if missing:
        (SYSCTL / "tcp_allowed_congestion_control").write_text(" ".join(now + missing))
    state["loaded"] = sorted(set(state.get("loaded", [])) | set(names))
    _save_state(state)
    return names


def _drop_stale_pins() -> None:
    """With none of our congestion controls registered, pins left by a crash are only
    reused if their layout is today's; any other is removed (libbpf would refuse it)."""
    for name, (key_size, value_size) in MAPS.items():
        path = PIN_DIR / name
        if not path.exists():
            continue
        try:
            PinnedMap(str(path), key_size, value_size).close()
        except (LayoutMismatch, OSError):
            path.unlink(missing_ok=True)


def unload(force: bool = False) -> list[str]:
    """Unregister every MLTCP variant and put the kernel back as ``load`` found it.  With
    ``force``, sockets still using one are first moved to its base algorithm."""
    check_prerequisites()
    state = _state()
    ours = [n for n in VARIANTS.values() if n in available()]
    busy = {n: c for n in ours if (c := sockets_using(n))}
    if busy and not force:
        detail = ", ".join(f"{c} socket(s) on {n}" for n, c in busy.items())
        raise MltcpError(f"still in use: {detail}; close them first or use --force")
    if busy:
        switch_sockets()
    default = (SYSCTL / "tcp_congestion_control").read_text().strip()
    if default in ours:
        (SYSCTL / "tcp_congestion_control").write_text(state.get("default_before", "cubic"))
    before = state.get("allowed_before")
    keep = [a for a in allowed() if a not in ours]
    (SYSCTL / "tcp_allowed_congestion_control").write_text(" ".join(before or keep))
    _unselect_cgroups(state)  # no cgroup may keep asking for a CC that is going away
    for name in ours:
        r = subprocess.run(
            ["bpftool", "struct_ops", "unregister", "name", name], capture_output=True, text=True
        )
        # EINPROGRESS: an earlier registration already unregistered, waiting for its last
        # (orphaned) sockets to close; the kernel frees it then
        failed = [
            line
            for line in r.stderr.splitlines()
            if line.startswith("Error") and "Operation now in progress" not in line
        ]
        if r.returncode != 0 and failed:
            raise MltcpError(f"unregistering {name} failed: {r.stderr.strip()}")
    for m in MAPS:
        (PIN_DIR / m).unlink(missing_ok=True)
    STATE.unlink(missing_ok=True)
    return ours


def switch_sockets() -> list[tuple[int, int, str]]:
    """Move every TCP socket on one of our congestion controls, in the init namespace and
    in every named one, to its base algorithm; returns (local port, remote port, new CC)
    per socket moved."""
    obj = build("mltcp_switch")
    SWITCH_ITER.unlink(missing_ok=True)
    r = subprocess.run(
        ["bpftool", "iter", "pin", str(obj), str(SWITCH_ITER)], capture_output=True, text=True
    )
    if r.returncode != 0:
        raise MltcpError(f"the kernel rejected mltcp_switch:\n{_verifier_lines(r.stderr)}")
    moved = []
    try:
        outputs = [SWITCH_ITER.read_text()]
        for ns in _netns():
            # nsenter, not `ip netns exec`: that remounts /sys and hides the bpf pin
            outputs.append(
                subprocess.run(
                    ["nsenter", f"--net=/run/netns/{ns}", "cat", str(SWITCH_ITER)],
                    capture_output=True,
                    text=True,
                ).stdout
            )
        for out in outputs:
            for line in out.splitlines():
                lport, rport, cc = line.split()
                moved.append((int(lport), int(rport), cc))
    finally:
        SWITCH_ITER.unlink(missing_ok=True)
    return moved


def _netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()]


def sockets_using(name: str) -> int:
    """TCP sockets using congestion control ``name`` in the init namespace and in every
    named namespace (``ip netns``)."""
    count = _count_in(["ss", "-Htin"], name)
    for ns in _netns():
        count += _count_in(["ip", "netns", "exec", ns, "ss", "-Htin"], name)
    return count


def _count_in(cmd: list[str], name: str) -> int:
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return len(re.findall(rf"\b{re.escape(name)}\b", out))


# -- parameters ----------------------------------------------------------------------------


def _map(name: str) -> PinnedMap:
    path = PIN_DIR / name
    if not path.exists():
        if [n for n in VARIANTS.values() if n in available()]:
            raise MltcpError(
                f"{path} is missing (removed by hand?): run `mltcp unload --force` and load again"
            )
        raise MltcpError("MLTCP is not loaded: run `mltcp load` first")
    try:
        return PinnedMap(str(path), *MAPS[name])
    except LayoutMismatch as e:
        raise MltcpError(
            f"{e}: it was made by another version of mltcp; run `mltcp unload --force` "
            "and load again"
        ) from None


def set_params(params: MltcpParams) -> None:
    """Write the parameters to the pinned config map: flows use them from their next ACK."""
    with _map("mltcp_config") as m:
        m.update(layout.U32.pack(0), layout.CONFIG.pack(*params.fixed()))


def _read_config() -> tuple[int, int, int, int, int]:
    with _map("mltcp_config") as m:
        raw = m.lookup(layout.U32.pack(0))
    return layout.CONFIG.unpack(raw) if raw else (0, 0, 0, 0, 0)


def get_params() -> MltcpParams:
    slope_q, intercept_q, idle_us, mode, flags = _read_config()
    return MltcpParams(
        slope_q / ONE,
        max(intercept_q, 1) / ONE,
        max(idle_us, 1) / 1000,
        MODES[mode] if mode < len(MODES) else "idle",
        bool(flags & FLAG_SCALE_CUT),
    )


# -- jobs: exact iteration boundaries ------------------------------------------------------


def job_key(job_id: int | str) -> int:
    """The 32-bit id the kernel uses for a job (strings hash with CRC-32; never 0)."""
    if isinstance(job_id, int) and 0 < job_id < 2**32:
        return job_id
    return zlib.crc32(str(job_id).encode()) or 1


def assign_port(port: int, job_id: int | str) -> None:
    """Flows to or from ``port`` belong to ``job_id`` (exact mode)."""
    if not 0 < port < 65536:
        raise MltcpError(f"port must be in 1..65535, got {port}")
    with _map("mltcp_ports") as m:
        m.update(layout.PORT.pack(port), layout.JOB.pack(job_key(job_id)))


_marks: PinnedMap | None = None


def open_marks() -> int:
    """A new file descriptor of the pinned iteration-marks map, for a child process that
    cannot see ``/sys/fs/bpf`` (pass it with ``pass_fds``, then :func:`use_marks_fd`)."""
    m = _map("mltcp_marks")
    os.set_inheritable(m.fd, True)
    return m.fd


def use_marks_fd(fd: int) -> None:
    """Mark iterations through an inherited descriptor of the marks map (see
    :func:`open_marks`) instead of opening the pin."""
    global _marks
    _marks = PinnedMap.from_fd(fd, *MAPS["mltcp_marks"])


def mark_iteration(job_id: int | str) -> int:
    """Tell the kernel that ``job_id`` finished an iteration; returns its new count."""
    global _marks
    if _marks is None:
        _marks = _map("mltcp_marks")
    key = layout.JOB.pack(job_key(job_id))
    raw = _marks.lookup(key)
    count = (layout.MARK_COUNT.unpack(raw)[0] if raw else 0) + 1
    _marks.update(key, layout.MARK_COUNT.pack(count))
    return count


# -- selection and status ------------------------------------------------------------------


def select(
    cc: str,
    netns: str | None = None,
    default: bool = False,
    cgroup: str | os.PathLike[str] | None = None,
    job: int | str | None = None,
    ecn: bool | None = None,
) -> None:
    """Make ``cc`` the congestion control of a named network namespace, of the host, or of
    the TCP sockets of one cgroup v2 (a sock_ops program; with ``job``, those sockets are
    also tied to the job for exact mode).  For a cgroup, ECN is negotiated per socket
    (``BPF_SOCK_OPS_NEEDS_ECN``) when ``ecn`` says so, by default when ``cc`` needs it."""
    if cc not in available():
        raise MltcpError(f"{cc} is not loaded: run `mltcp load` first")
    if job is not None and cgroup is None:
        raise MltcpError("--job goes with --cgroup (or use `mltcp assign-port`)")
    if cc not in allowed():
        (SYSCTL / "tcp_allowed_congestion_control").write_text(" ".join([*allowed(), cc]))
    if ecn is not None and cgroup is None:
        raise MltcpError("--ecn goes with --cgroup (elsewhere net.ipv4.tcp_ecn decides)")
    if cgroup is not None:
        _select_cgroup(cc, Path(cgroup), job, cc in ECN_CCS if ecn is None else ecn)
    elif netns:
        r = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                netns,
                "sysctl",
                "-qw",
                f"net.ipv4.tcp_congestion_control={cc}",
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise MltcpError(f"cannot select {cc} in netns {netns}: {r.stderr.strip()}")
    elif default:
        (SYSCTL / "tcp_congestion_control").write_text(cc)
    else:
        raise MltcpError("say where: --netns NAME, --cgroup PATH or --default")


def _select_cgroup(cc: str, path: Path, job: int | str | None, ecn: bool) -> None:
    if not path.is_dir() or not (path / "cgroup.procs").exists():
        raise MltcpError(f"{path} is not a cgroup directory")
    if _fs_type(path) != "cgroup2":
        raise MltcpError(
            f"{path} is not on a cgroup v2 hierarchy (sock_ops programs attach to cgroup v2; "
            "mount one with `mount -t cgroup2 none DIR`)"
        )
    if not SELECT_PROG.exists():
        obj = build("mltcp_select")
        r = subprocess.run(
            ["bpftool", "prog", "load", str(obj), str(SELECT_PROG), "type", "sockops"],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise MltcpError(f"the kernel rejected mltcp_select:\n{_verifier_lines(r.stderr)}")
    if not _attached(path):
        r = subprocess.run(
            [
                "bpftool",
                "cgroup",
                "attach",
                str(path),
                "sock_ops",
                "pinned",
                str(SELECT_PROG),
                "multi",
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise MltcpError(f"attaching to {path} failed: {r.stderr.strip()}")
    state = _state()
    state["cgroups"] = sorted(set(state.get("cgroups", [])) | {str(path)})
    _save_state(state)
    flags = layout.CGROUP_ECN if ecn else 0
    value = layout.CGROUP_CFG.pack(cc.encode(), job_key(job) if job else 0, flags)
    with _map("mltcp_cgroup_cfg") as m:
        m.update(layout.CGROUP_ID.pack(path.stat().st_ino), value)


def _attached(path: Path) -> bool:
    """Is the pinned mltcp_select program attached to the cgroup ``path``?"""
    prog = subprocess.run(
        ["bpftool", "-j", "prog", "show", "pinned", str(SELECT_PROG)],
        capture_output=True,
        text=True,
    )
    show = subprocess.run(
        ["bpftool", "-j", "cgroup", "show", str(path)], capture_output=True, text=True
    )
    try:
        pid = json.loads(prog.stdout)["id"]
        return any(a.get("id") == pid for a in json.loads(show.stdout or "[]"))
    except (ValueError, KeyError, TypeError):
        return False


def _fs_type(path: Path) -> str:
    """The file-system type of the mount holding ``path`` (longest matching mount point)."""
    best, kind = "", ""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mnt, fstype, *_ = line.split()
        if (str(path) + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best):
            best, kind = mnt, fstype
    return kind


def _unselect_cgroups(state: dict[str, Any]) -> None:
    """Detach mltcp_select from every cgroup we gave it to that still exists (by program
    id, so it works when its pin was removed by hand)."""
    for cg in state.get("cgroups", []):
        if not Path(cg).is_dir():
            continue  # removed while attached: the kernel dropped the attachment with it
        show = subprocess.run(
            ["bpftool", "-j", "cgroup", "show", cg], capture_output=True, text=True
        )
        try:
            attached = json.loads(show.stdout or "[]")
        except ValueError:
            attached = []
        for a in attached:
            if a.get("name") == "mltcp_select" and "sock_ops" in str(a.get("attach_type")):
                subprocess.run(
                    ["bpftool", "cgroup", "detach", cg, "sock_ops", "id", str(a["id"])],
                    capture_output=True,
                )
    state["cgroups"] = []
    SELECT_PROG.unlink(missing_ok=True)
    (PIN_DIR / "mltcp_cgroup_cfg").unlink(missing_ok=True)


def status(flows: bool = False) -> dict[str, Any]:
    loaded = [n for n in VARIANTS.values() if n in available()]
    out: dict[str, Any] = {
        "loaded": loaded,
        "allowed": allowed(),
        "default": (SYSCTL / "tcp_congestion_control").read_text().strip(),
    }
    if loaded and (PIN_DIR / "mltcp_config").exists():
        p = get_params()
        out["params"] = {
            "slope": p.slope,
            "intercept": p.intercept,
            "idle_ms": p.idle_ms,
            "mode": p.mode,
            "scale_cut": p.scale_cut,
        }
    if loaded and (PIN_DIR / "mltcp_repairs").exists():
        with _map("mltcp_repairs") as m:
            raw = m.lookup(layout.U32.pack(0))
        # windows put back from impossible values the kernel left (see ebpf/mltcp_common.h)
        out["window_repairs"] = layout.REPAIR_COUNT.unpack(raw)[0] if raw else 0
        if out["window_repairs"] and (PIN_DIR / "mltcp_repair_log").exists():
            out["repair_log"] = repair_log(out["window_repairs"])
    out["problems"] = problems(loaded)
    if flows and (PIN_DIR / "mltcp_flows").exists():
        rows = []
        with _map("mltcp_flows") as m:
            for key in m.iter_keys():
                raw = m.lookup(key)
                if raw is None:
                    continue
                lport, rport = layout.FLOW_KEY.unpack(key)
                iters, last, acked, f_q, job = layout.FLOW_STATS.unpack(raw)
                rows.append(
                    {
                        "local_port": lport,
                        "remote_port": rport,
                        "iterations": iters,
                        "last_iteration_bytes": last,
                        "bytes_acked": acked,
                        "factor": f_q / ONE,
                        "job": job,
                    }
                )
        out["flows"] = sorted(rows, key=lambda r: (r["local_port"], r["remote_port"]))
    return out


def repair_log(repairs: int) -> list[dict[str, int]]:
    """The sockets as mltcp_guard found them, oldest first (the last 64 repairs)."""
    rows = []
    with _map("mltcp_repair_log") as m:
        for n in range(max(0, repairs - layout.REPAIR_LOG_LEN), repairs):
            raw = m.lookup(layout.U32.pack(n % layout.REPAIR_LOG_LEN))
            if raw:
                names = [f for f, _ in layout.REPAIR_EVENT.fields]
                rows.append(dict(zip(names, layout.REPAIR_EVENT.unpack(raw), strict=True)))
    return rows


def problems(loaded: list[str] | None = None) -> list[str]:
    """What is broken in MLTCP's kernel state, one line each: pinned maps missing or of
    another layout, selected cgroups that are gone or lost their program."""
    loaded = [n for n in VARIANTS.values() if n in available()] if loaded is None else loaded
    out = []
    if loaded:
        for name in SHARED_MAPS:
            path = PIN_DIR / name
            if not path.exists():
                out.append(f"pinned map {path} is missing (unload --force and load again)")
                continue
            try:
                PinnedMap(str(path), *MAPS[name]).close()
            except LayoutMismatch as e:
                out.append(f"pinned map of another layout: {e}")
    for cg in _state().get("cgroups", []):
        if not Path(cg).is_dir():
            out.append(f"cgroup {cg} was selected but no longer exists")
        elif not SELECT_PROG.exists():
            out.append(f"cgroup {cg} was selected but {SELECT_PROG} is missing")
        elif not _attached(Path(cg)):
            out.append(f"cgroup {cg} was selected but mltcp_select is not attached")
    return out


# -- helpers -------------------------------------------------------------------------------


def _state() -> dict[str, Any]:
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return {}


def _save_state(state: dict[str, Any]) -> None:
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state))


def _tail(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _verifier_lines(log: str) -> str:
    """The part of a libbpf/verifier log that says why (the last instructions and the
    error), not the whole dump."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    keep = [
        ln
        for ln in lines
        if re.search(
            r"invalid|unknown|not allowed|error|R\d|denied|"
            r"failed|-E[A-Z]+",
            ln,
            re.I,
        )
    ]
    return "\n".join((keep or lines)[-15:])
