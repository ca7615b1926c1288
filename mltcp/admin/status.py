"""``mltcp status``: what is loaded, the parameters, window repairs, what is broken in
MLTCP's kernel state, and per-flow statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mltcp import layout, variants
from mltcp.admin import netns as namespaces
from mltcp.admin.cgroup import SELECT_PROG, attached, removed
from mltcp.admin.params import get_params
from mltcp.admin.register import netns_selecting_ours, orphans, sockets_using
from mltcp.admin.state import STATE, read_state
from mltcp.bpfmap import LayoutMismatch, PinnedMap
from mltcp.layout import FLOW_ENDED
from mltcp.pinned import (
    MAPS,
    NOT_HOST_SYS,
    PIN_DIR,
    SHARED_MAPS,
    SYSCTL,
    MltcpUsageError,
    allowed,
    host_sys_hidden,
    loaded,
    open_map,
)
from mltcp.policy import ONE


def status(flows: bool = False, ended: bool = True) -> dict[str, Any]:
    """Loaded controls, allowed list, default, parameters, window repairs (with their log),
    problems and notes (cgroups found removed, which the next ``select``, ``load`` or
    ``unload`` drops from the state); with ``flows``, the flows the kernel tracks (with
    ``ended``, those whose socket has closed or left MLTCP too, each marked so, until the
    map reuses their slot).  It only reads: the loader's state is left as it is.
    :class:`MltcpUsageError` where this process does not see the host's /sys (``ip netns
    exec``): what it would report is not there."""
    if host_sys_hidden():
        raise MltcpUsageError(f"status cannot see MLTCP's pins and cgroups here: {NOT_HOST_SYS}")
    notes = [
        f"cgroup {cg} was removed (its mltcp_select attachment went with it): the next "
        "`mltcp select`, `load` or `unload` forgets it"
        for cg in removed(read_state())
    ]
    ours = loaded()
    out: dict[str, Any] = {
        "loaded": ours,
        "allowed": allowed(),
        "default": (SYSCTL / "tcp_congestion_control").read_text().strip(),
    }
    if ours and (PIN_DIR / "mltcp_config").exists():
        p = get_params()
        out["params"] = {
            "slope": p.slope,
            "intercept": p.intercept,
            "idle_ms": p.idle_ms,
            "mode": p.mode,
            "scale_cut": p.scale_cut,
        }
    if ours and (PIN_DIR / "mltcp_repairs").exists():
        with open_map("mltcp_repairs") as m:
            raw = m.lookup(layout.U32.pack(0))
        # windows put back from impossible values the kernel left (see ebpf/mltcp_common.h)
        out["window_repairs"] = layout.REPAIR_COUNT.unpack(raw)[0] if raw else 0
        if out["window_repairs"] and (PIN_DIR / "mltcp_repair_log").exists():
            out["repair_log"] = repair_log(out["window_repairs"])
    out["problems"] = problems(ours)
    out["notes"] = notes
    if flows and (PIN_DIR / "mltcp_flows").exists():
        out["flows"] = [r for r in flow_rows() if ended or not r["ended"]]
    return out


def flow_rows() -> list[dict[str, Any]]:
    """Every flow in the kernel's flow map, by local then remote port: its statistics at
    its last iteration boundary, ``job`` (the kernel's key, 0 for none) with ``job_name``
    (the name given to ``select --job``, ``assign-port`` or ``mark``, None when the state
    does not record it), and ``ended`` (its socket closed or left MLTCP).  The map is
    keyed by (local port, remote port) alone: two flows with the same ports in different
    network namespaces share one row, the last to end an iteration wins."""
    names = read_state().job_names()
    rows = []
    with open_map("mltcp_flows") as m:
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
                    "factor": (f_q & ~FLOW_ENDED) / ONE,
                    "job": job,
                    "job_name": names.get(job),
                    "ended": bool(f_q & FLOW_ENDED),
                }
            )
    return sorted(rows, key=lambda r: (r["local_port"], r["remote_port"]))


def repair_log(repairs: int) -> list[dict[str, int]]:
    """The sockets as mltcp_guard found them, oldest first (the last 64 repairs)."""
    rows = []
    with open_map("mltcp_repair_log") as m:
        for n in range(max(0, repairs - layout.REPAIR_LOG_LEN), repairs):
            raw = m.lookup(layout.U32.pack(n % layout.REPAIR_LOG_LEN))
            if raw:
                names = [f for f, _ in layout.REPAIR_EVENT.fields]
                rows.append(dict(zip(names, layout.REPAIR_EVENT.unpack(raw), strict=True)))
    return rows


def _orphan_problem(orphan: dict[str, Any], ours: list[str]) -> str:
    """The problem line of one orphan: held by sockets (``unload --force`` moves them and
    the kernel frees it), or, where no socket uses its name and none of ours registered
    under it could, held by the kernel itself (a failed setsockopt or sysctl of the control
    can leak a reference): nothing frees it but a reboot, and it is harmless."""
    name, where = orphan["name"], f"{orphan['name']} (struct_ops map id {orphan['id']})"
    if name not in ours and sockets_using(name) == 0:
        return (
            f"{where} is unregistered and no socket uses it (an orphan the kernel itself "
            "holds, e.g. from a failed setsockopt or sysctl of it): harmless, freed at reboot; "
            "`unload --force` cannot free it"
        )
    return (
        f"{where} is unregistered but still held by sockets (an orphan): `mltcp unload "
        f"--force` moves them to {variants.base_of(name)} and the kernel frees it"
    )


def problems(ours: list[str] | None = None) -> list[str]:
    """What is broken in MLTCP's kernel state, one line each: pinned maps missing or of
    another layout, a named network namespace selecting one of our controls that is not
    loaded, selected cgroups that lost their program, and struct_ops of ours the state
    does not know: unregistered ones sockets still hold (orphans), registered ones
    ``mltcp load`` did not record."""
    ours = loaded() if ours is None else ours
    out = [_orphan_problem(o, ours) for o in orphans()]
    recorded = read_state().loaded
    out += [
        f"{cc} is registered but `mltcp load` did not record it ({STATE} lost, or registered "
        f"by hand): `mltcp load --variant {v.name}` adopts it"
        for cc in ours
        if cc not in recorded and (v := variants.by_cc(cc))
    ]
    if ours:
        for name in SHARED_MAPS:
            path = PIN_DIR / name
            if not path.exists():
                out.append(f"pinned map {path} is missing (unload --force and load again)")
                continue
            try:
                PinnedMap(str(path), *MAPS[name]).close()
            except LayoutMismatch as e:
                out.append(f"pinned map of another layout: {e}")
    for ns, cc in netns_selecting_ours().items():
        if cc not in ours:  # unregistered: new connections there still get it
            out.append(
                f"netns {ns} selects {cc}, which is not loaded: `mltcp load` it, or select "
                f"another there (`nsenter --net={namespaces.NETNS_DIR / ns} sysctl -w "
                f"net.ipv4.tcp_congestion_control={variants.base_of(cc)}`)"
            )
    for cg in read_state().cgroups:
        if not Path(cg).is_dir():
            continue  # removed: a note (select, load or unload forgets it)
        if not SELECT_PROG.exists():
            out.append(f"cgroup {cg} was selected but {SELECT_PROG} is missing")
        elif not attached(Path(cg)):
            out.append(f"cgroup {cg} was selected but mltcp_select is not attached")
    return out
