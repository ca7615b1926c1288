"""``mltcp select``: a congestion control for a named network namespace, for the host, or
for the TCP sockets of one cgroup v2 (the sock_ops program ``ebpf/mltcp_select.bpf.c``,
pinned as ``/sys/fs/bpf/mltcp_select``, attached to each cgroup given; the cgroups are
recorded in the loader's state so ``unload`` detaches it)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from mltcp import layout, variants
from mltcp.admin import netns as namespaces
from mltcp.admin.build import build, run, verifier_lines
from mltcp.admin.state import LoaderState, read_state, save_state
from mltcp.marks import job_key
from mltcp.pinned import PIN_DIR, SYSCTL, MltcpError, allowed, available, open_map

SELECT_PROG = PIN_DIR / "mltcp_select"  # the pinned cgroup sock_ops program


def select(
    cc: str,
    netns: str | None = None,
    default: bool = False,
    cgroup: str | os.PathLike[str] | None = None,
    job: int | str | None = None,
    ecn: bool | None = None,
) -> None:
    """Make ``cc`` the congestion control of a named network namespace (recorded, so
    ``unload`` puts back what it selected before), of the host, or of
    the TCP sockets of one cgroup v2 (a sock_ops program; with ``job``, those sockets are
    also tied to the job for exact mode).  For a cgroup, ECN is negotiated per socket
    (``BPF_SOCK_OPS_NEEDS_ECN``) when ``ecn`` says so, by default when ``cc`` needs it."""
    if cc not in available():
        raise MltcpError(f"{cc} is not loaded: run `mltcp load` first")
    if job is not None and cgroup is None:
        raise MltcpError("--job goes with --cgroup (or use `mltcp assign-port`)")
    if ecn is not None and cgroup is None:
        raise MltcpError("--ecn goes with --cgroup (elsewhere net.ipv4.tcp_ecn decides)")
    if cc not in allowed():
        (SYSCTL / "tcp_allowed_congestion_control").write_text(" ".join([*allowed(), cc]))
    if cgroup is not None:
        _select_cgroup(cc, Path(cgroup), job, variants.needs_ecn(cc) if ecn is None else ecn)
    elif netns:
        _select_netns(cc, netns)
    elif default:
        (SYSCTL / "tcp_congestion_control").write_text(cc)
    else:
        raise MltcpError("say where: --netns NAME, --cgroup PATH or --default")


def _select_netns(cc: str, ns: str) -> None:
    """``cc`` for namespace ``ns``, what it selected before recorded first (once: the value
    before mltcp changed it), so ``unload`` can put it back."""
    state = read_state()
    before = state.netns_before()
    if ns not in before:
        was = namespaces.selected(ns)
        if was is None:
            raise MltcpError(
                f"cannot select {cc} in netns {ns}: cannot read what it selects "
                "(is it one of `ip netns list`?)"
            )
        save_state(replace(state, netns=tuple(sorted({**before, ns: was}.items()))))
    namespaces.select(ns, cc)


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
        r = run(["bpftool", "prog", "load", str(obj), str(SELECT_PROG), "type", "sockops"])
        if r.returncode != 0:
            raise MltcpError(f"the kernel rejected mltcp_select:\n{verifier_lines(r.stderr)}")
    if not attached(path):
        attach = ["bpftool", "cgroup", "attach", str(path), "sock_ops"]
        r = run([*attach, "pinned", str(SELECT_PROG), "multi"])
        if r.returncode != 0:
            raise MltcpError(f"attaching to {path} failed: {r.stderr.strip()}")
    state = read_state()
    save_state(replace(state, cgroups=tuple(sorted(set(state.cgroups) | {str(path)}))))
    flags = layout.CGROUP_ECN if ecn else 0
    value = layout.CGROUP_CFG.pack(cc.encode(), job_key(job) if job else 0, flags)
    with open_map("mltcp_cgroup_cfg") as m:
        m.update(layout.CGROUP_ID.pack(path.stat().st_ino), value)


def attached(path: Path) -> bool:
    """Is the pinned mltcp_select program attached to the cgroup ``path``?"""
    prog = run(["bpftool", "-j", "prog", "show", "pinned", str(SELECT_PROG)])
    show = run(["bpftool", "-j", "cgroup", "show", str(path)])
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


def unselect_cgroups(state: LoaderState) -> LoaderState:
    """Detach mltcp_select from every cgroup we gave it to that still exists (by program
    id, so it works when its pin was removed by hand); returns the state without them."""
    for cg in state.cgroups:
        if not Path(cg).is_dir():
            continue  # removed while attached: the kernel dropped the attachment with it
        try:
            attachments = json.loads(run(["bpftool", "-j", "cgroup", "show", cg]).stdout or "[]")
        except ValueError:
            attachments = []
        for a in attachments:
            if a.get("name") == "mltcp_select" and "sock_ops" in str(a.get("attach_type")):
                run(["bpftool", "cgroup", "detach", cg, "sock_ops", "id", str(a["id"])])
    SELECT_PROG.unlink(missing_ok=True)
    (PIN_DIR / "mltcp_cgroup_cfg").unlink(missing_ok=True)
    return replace(state, cgroups=())
