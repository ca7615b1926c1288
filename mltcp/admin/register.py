"""Register and unregister our congestion controls (struct_ops ``tcp_congestion_ops``,
``bpftool struct_ops register``; they stay registered until unregistered), allow them in
network namespaces, and put the kernel back as ``load`` found it.  ``unload --force``
first moves the sockets still using one to its base algorithm (``ebpf/mltcp_switch.bpf.c``,
a TCP socket iterator run in every named network namespace), so their flows keep running.
"""

from __future__ import annotations

import re
from dataclasses import replace

from mltcp import variants
from mltcp.admin import netns as namespaces
from mltcp.admin.build import build, check_prerequisites, run, verifier_lines
from mltcp.admin.cgroup import unselect_cgroups
from mltcp.admin.params import read_config, set_params
from mltcp.admin.state import STATE, read_state, save_state
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


def load(variant: str = "all", params: MltcpParams | None = None) -> list[str]:
    """Register the variant(s) (idempotent), set parameters, allow them in namespaces.
    Returns the congestion-control names now loaded."""
    check_prerequisites()
    state = read_state()
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


def unload(force: bool = False) -> list[str]:
    """Unregister every variant and put the kernel back as ``load`` found it, named network
    namespaces included: one given to ``select --netns`` gets back what it selected
    before (its variant's base if that was one of ours).  Refused while sockets use one,
    or while a namespace ``select`` did not record (set by hand) selects one; with
    ``force``, those sockets are first moved to their base algorithm and such a
    namespace is given its base."""
    check_prerequisites()
    state = read_state()
    ours = loaded()
    busy = {n: c for n in ours if (c := sockets_using(n))}
    selecting = netns_selecting_ours()
    recorded = state.netns_before()
    by_hand = {ns: cc for ns, cc in selecting.items() if ns not in recorded}
    if (busy or by_hand) and not force:
        detail = [f"{c} socket(s) on {n}" for n, c in busy.items()]
        detail += [f"netns {ns} selects {cc} (not by `mltcp select`)" for ns, cc in by_hand.items()]
        what = "close them" if busy else "select another there"
        if busy and by_hand:
            what = "close them and select another there"
        raise MltcpError(f"still in use: {', '.join(detail)}; {what} first or use --force")
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
    """Move every TCP socket on one of our congestion controls, in the init namespace and
    in every named one, to its base algorithm; returns (local port, remote port, new CC)
    per socket moved."""
    obj = build("mltcp_switch")
    SWITCH_ITER.unlink(missing_ok=True)
    r = run(["bpftool", "iter", "pin", str(obj), str(SWITCH_ITER)])
    if r.returncode != 0:
        raise MltcpError(f"the kernel rejected mltcp_switch:\n{verifier_lines(r.stderr)}")
    moved = []
    try:
        outputs = [SWITCH_ITER.read_text()]
        for ns in namespaces.names():
            # nsenter, not `ip netns exec`: that remounts /sys and hides the bpf pin
            outputs.append(
                run(["nsenter", f"--net=/run/netns/{ns}", "cat", str(SWITCH_ITER)]).stdout
            )
        for out in outputs:
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


def sockets_using(name: str) -> int:
    """TCP sockets using congestion control ``name`` in the init namespace and in every
    named namespace (``ip netns``)."""
    count = _count_in(["ss", "-Htin"], name)
    for ns in namespaces.names():
        count += _count_in(["ip", "netns", "exec", ns, "ss", "-Htin"], name)
    return count


def _count_in(cmd: list[str], name: str) -> int:
    return len(re.findall(rf"\b{re.escape(name)}\b", run(cmd).stdout))
