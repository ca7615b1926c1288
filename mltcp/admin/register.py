"""Register and unregister our congestion controls (struct_ops ``tcp_congestion_ops``,
``bpftool struct_ops register``; they stay registered until unregistered), allow them in
network namespaces, and put the kernel back as ``load`` found it.  ``unload`` counts the
sockets on our controls in every network namespace of the host, named or not (Mininet's
hosts, ``unshare -n``), listeners included; ``unload --force`` first moves them to their
base algorithm (``ebpf/mltcp_switch.bpf.c``, a TCP socket iterator read in each
namespace), so their flows keep running.  A control unregistered while sockets still held
it lives on, unlisted, until they let go: :func:`orphans` finds it for ``status``.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from mltcp import variants
from mltcp.admin import netns as namespaces
from mltcp.admin.build import build, check_prerequisites, run, verifier_lines
from mltcp.admin.cgroup import unselect_cgroups, without_removed
from mltcp.admin.params import read_config, set_params
from mltcp.admin.state import STATE, locked, read_state, save_state
from mltcp.bpfmap import LayoutMismatch, PinnedMap
from mltcp.pinned import MAPS, PIN_DIR, SYSCTL, MltcpError, allowed, available, loaded
from mltcp.policy import MltcpParams

SWITCH_ITER = PIN_DIR / "mltcp_switch_iter"


def sources(variant: str) -> list[str]:
    """Congestion-control names a ``--variant`` stands for (``all``: every one)."""
    if variant == "all":
        return list(variants.CCS)
    try:
        return [variants.by_name(variant).cc]
    except KeyError:
        choices = ", ".join(variants.NAMES)
        raise MltcpError(f"unknown variant {variant!r}: one of {choices}, all") from None


@locked()  # it reads and writes the loader state: one at a time
def load(variant: str = "all", params: MltcpParams | None = None) -> list[str]:
    """Register the variant(s) (idempotent), set parameters, allow them in namespaces.
    Returns the congestion-control names now loaded; ValueError naming the field, before
    anything is done, for ``params`` the kernel would not hold."""
    if params is not None:
        params.check_stored()
    check_prerequisites()
    state, _ = without_removed(read_state())  # a removed cgroup took its attachment along
    if state.allowed_before is None:
        state = replace(state, allowed_before=tuple(allowed()))
    if state.default_before is None:
        default = (SYSCTL / "tcp_congestion_control").read_text().strip()
        state = replace(state, default_before=default)
    names = sources(variant)
    if not loaded():
        _drop_stale_pins()
    for name in names:
        if name in available():
            continue
        r = run(["bpftool", "struct_ops", "register", str(build(name))])
        if r.returncode != 0 or name not in available():
            raise MltcpError(f"the kernel rejected {name}:\n{verifier_lines(r.stderr + r.stdout)}")
    if params is not None or not any(read_config()):  # a new config map: all zeros
        set_params(params or MltcpParams())
    now = allowed()
    missing = [n for n in names if n not in now]
    if missing:
        (SYSCTL / "tcp_allowed_congestion_control").write_text(" ".join(now + missing))
    save_state(replace(state, loaded=tuple(sorted(set(state.loaded) | set(names)))))
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


@locked()
def unload(force: bool = False) -> list[str]:
    """Unregister every variant and put the kernel back as ``load`` found it, named network
    namespaces included: one given to ``select --netns`` gets back what it selected
    before (its variant's base if that was one of ours).  Refused while sockets use one
    of ours (registered, or an orphan left unregistered) in any network namespace of the
    host, listeners included, or while a namespace ``select`` did not record (set by hand)
    selects one; with ``force``, those sockets are first moved to their base algorithm
    and such a namespace is given its base."""
    check_prerequisites()
    state, _ = without_removed(read_state())
    ours = loaded()
    busy = sockets_by_netns()
    selecting = netns_selecting_ours()
    recorded = state.netns_before()
    by_hand = {ns: cc for ns, cc in selecting.items() if ns not in recorded}
    if (busy or by_hand) and not force:
        raise MltcpError(_in_use(busy, by_hand))
    for ns, cc in selecting.items():
        before = recorded.get(ns)
        gone = before is None or before in variants.CCS or before not in available()
        namespaces.select(ns, variants.base_of(cc) if gone else before)
    if busy:
        switch_sockets()
    default = (SYSCTL / "tcp_congestion_control").read_text().strip()
    if default in ours:
        (SYSCTL / "tcp_congestion_control").write_text(state.default_before or "cubic")
    keep = [a for a in allowed() if a not in ours]
    (SYSCTL / "tcp_allowed_congestion_control").write_text(" ".join(state.allowed_before or keep))
    unselect_cgroups(state)  # no cgroup may keep asking for a CC that is going away
    for name in ours:
        _unregister(name)
    for m in MAPS:
        (PIN_DIR / m).unlink(missing_ok=True)
    STATE.unlink(missing_ok=True)
    return ours


def _in_use(busy: dict[str, dict[str, int]], by_hand: dict[str, str]) -> str:
    """``unload``'s refusal, in one line: the sockets per namespace and control, and the
    namespaces that select one of ours by hand."""
    detail = [
        f"{n} socket(s) on {cc} in netns {ns}"
        for ns, counts in busy.items()
        for cc, n in counts.items()
    ]
    detail += [f"netns {ns} selects {cc} (not by `mltcp select`)" for ns, cc in by_hand.items()]
    what = "close them" if busy else "select another there"
    if busy and by_hand:
        what = "close them and select another there"
    return f"still in use: {', '.join(detail)}; {what} first or use --force"


def _unregister(name: str) -> None:
    r = run(["bpftool", "struct_ops", "unregister", "name", name])
    # EINPROGRESS: an earlier registration already unregistered, waiting for its last
    # (orphaned) sockets to close; the kernel frees it then
    failed = [
        line
        for line in r.stderr.splitlines()
        if line.startswith("Error") and "Operation now in progress" not in line
    ]
    if r.returncode != 0 and failed:
        raise MltcpError(f"unregistering {name} failed: {r.stderr.strip()}")


def switch_sockets() -> list[tuple[int, int, str]]:
    """Move every TCP socket on one of our congestion controls, listeners included, in
    every network namespace of the host (:func:`mltcp.admin.netns.every`), to its base
    algorithm; returns (local port, remote port, new CC) per socket moved."""
    obj = build("mltcp_switch")
    SWITCH_ITER.unlink(missing_ok=True)
    r = run(["bpftool", "iter", "pin", str(obj), str(SWITCH_ITER)])
    if r.returncode != 0:
        raise MltcpError(f"the kernel rejected mltcp_switch:\n{verifier_lines(r.stderr)}")
    moved = []
    try:
        for ns in namespaces.every():
            # reading the pinned iterator walks the reader's namespace's sockets
            out = namespaces.run_in(ns, ["cat", str(SWITCH_ITER)]).stdout
            for line in out.splitlines():
                lport, rport, cc = line.split()
                moved.append((int(lport), int(rport), cc))
    finally:
        SWITCH_ITER.unlink(missing_ok=True)
    return moved


def netns_selecting_ours() -> dict[str, str]:
    """Each named network namespace that selects one of our congestion controls (loaded
    or not), with it."""
    found = {ns: namespaces.selected(ns) for ns in namespaces.names()}
    return {ns: cc for ns, cc in found.items() if cc in variants.CCS}


def sockets_by_netns() -> dict[str, dict[str, int]]:
    """Per network namespace of the host that has any (by its label: its name, ``init``
    or ``pid N``), the TCP sockets on each of our congestion controls, in every state
    (``ss -a``: listeners too, which hold a control as much as a connection does)."""
    out = {}
    for ns in namespaces.every():
        text = namespaces.run_in(ns, ["ss", "-Htina"]).stdout
        counts = {cc: n for cc in variants.CCS if (n := _count(text, cc))}
        if counts:
            out[ns.label] = counts
    return out


def sockets_using(name: str) -> int:
    """TCP sockets using congestion control ``name`` in every network namespace."""
    return sum(counts.get(name, 0) for counts in sockets_by_netns().values())


def _count(text: str, name: str) -> int:
    return len(re.findall(rf"\b{re.escape(name)}\b", text))


def orphans() -> list[dict[str, Any]]:
    """Our struct_ops still in the kernel after being unregistered (``id``, ``name``): held
    by sockets that were not moved first (an unload that missed them, or an unregister by
    hand).  The kernel frees each when its last socket lets go; ``unload --force`` moves
    them to the base algorithm."""
    try:
        entries = json.loads(run(["bpftool", "-j", "struct_ops", "dump"]).stdout or "[]")
    except (OSError, ValueError):  # no bpftool (nothing loaded either, then), or no JSON
        return []
    out, info = [], {}
    for e in entries if isinstance(entries, list) else []:
        if "bpf_map_info" in e:
            info = e["bpf_map_info"]
            continue
        value = e.get("bpf_struct_ops_tcp_congestion_ops")
        if not value or info.get("name") not in variants.CCS:
            continue
        if value.get("common", {}).get("state") != "BPF_STRUCT_OPS_STATE_INUSE":
            out.append({"id": info.get("id"), "name": info["name"]})
    return out
