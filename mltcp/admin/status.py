"""``mltcp status``: what is loaded, the parameters, window repairs, what is broken in
MLTCP's kernel state, and per-flow statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mltcp import layout, variants
from mltcp.admin.cgroup import SELECT_PROG, attached
from mltcp.admin.params import get_params
from mltcp.admin.register import netns_selecting_ours
from mltcp.admin.state import read_state
from mltcp.bpfmap import LayoutMismatch, PinnedMap
from mltcp.pinned import MAPS, PIN_DIR, SHARED_MAPS, SYSCTL, allowed, loaded, open_map
from mltcp.policy import ONE


def status(flows: bool = False) -> dict[str, Any]:
    """Loaded controls, allowed list, default, parameters, window repairs (with their log)
    and problems; with ``flows``, every flow the kernel tracks."""
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
    if flows and (PIN_DIR / "mltcp_flows").exists():
        out["flows"] = flow_rows()
    return out


def flow_rows() -> list[dict[str, Any]]:
    """Every flow in the kernel's flow map, by local then remote port."""
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
                    "factor": f_q / ONE,
                    "job": job,
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


def problems(ours: list[str] | None = None) -> list[str]:
    """What is broken in MLTCP's kernel state, one line each: pinned maps missing or of
    another layout, a named network namespace selecting one of our controls that is not
    loaded, selected cgroups that are gone or lost their program."""
    ours = loaded() if ours is None else ours
    out = []
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
                f"another there (`ip netns exec {ns} sysctl -w "
                f"net.ipv4.tcp_congestion_control={variants.base_of(cc)}`)"
            )
    for cg in read_state().cgroups:
        if not Path(cg).is_dir():
            out.append(f"cgroup {cg} was selected but no longer exists")
        elif not SELECT_PROG.exists():
            out.append(f"cgroup {cg} was selected but {SELECT_PROG} is missing")
        elif not attached(Path(cg)):
            out.append(f"cgroup {cg} was selected but mltcp_select is not attached")
    return out
