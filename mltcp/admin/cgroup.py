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
from mltcp.admin.state import LoaderState, locked, read_state, remember_job, save_state
from mltcp.marks import job_key
from mltcp.pinned import (
    NOT_HOST_SYS,
    PIN_DIR,
    SYSCTL,
    MltcpError,
    MltcpUsageError,
    allowed,
    available,
    host_sys_hidden,
    namespace_ident,
    open_map,
    require_host_sys,
)

SELECT_PROG = PIN_DIR / "mltcp_select"  # the pinned cgroup sock_ops program
MOUNTS = Path("/proc/self/mounts")


@locked()  # it reads and writes the loader state: one at a time
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
    require_host_sys()  # a /sys of its own (ip netns exec): nothing here is the host's
    if cc not in available():
        raise MltcpError(not_loaded(cc))
    if job is not None and cgroup is None:
        raise MltcpError("--job goes with --cgroup (or use `mltcp assign-port`)")
    if ecn is not None and cgroup is None:
        raise MltcpError("--ecn goes with --cgroup (elsewhere net.ipv4.tcp_ecn decides)")
    if default and cgroup is None and not netns:
        _refuse_outside_the_host_netns(cc)
    forget_removed_cgroups()  # before any change: refused where the host's /sys is hidden
    if cc not in allowed():
        (SYSCTL / "tcp_allowed_congestion_control").write_text(" ".join([*allowed(), cc]))
    if cgroup is not None:
        ecn = variants.needs_ecn(cc) if ecn is None else ecn
        _select_cgroup(cc, absolute(cgroup), job, ecn)
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


def _refuse_outside_the_host_netns(cc: str) -> None:
    """``select --default`` from another network namespace than the host's (``nsenter
    --net``) would change that one's default, unrecorded: :class:`MltcpUsageError`, saying
    to select it by ``--netns NAME`` (recorded, so ``unload`` puts it back)."""

    def ident(pid: str) -> tuple[int, int] | None:
        return namespace_ident(namespaces.PROC / pid / "ns" / "net")

    host = ident("1") or ident("2")  # init's, or kthreadd's where init's is hidden
    if host is not None and ident("self") not in (None, host):
        label = next((ns.label for ns in namespaces.every() if ns.here), "this one")
        name = label if label in namespaces.names() else "NAME"
        raise MltcpUsageError(
            f"--default is the host's, but this process runs in netns {label} and would "
            f"change that one's only: `mltcp select {cc} --netns {name}` selects for it"
        )


def not_loaded(cc: str) -> str:
    """Why ``cc`` cannot be selected: not one of ours or the kernel's (the names known),
    or one of ours that is not loaded (the ``mltcp load`` that loads it)."""
    v = variants.by_cc(cc)
    if v is None:
        kernel = [c for c in available() if c not in variants.CCS]
        return (
            f"unknown congestion control {cc}: one of {', '.join(variants.CCS)} (ours) "
            f"or {', '.join(kernel)} (the kernel's)"
        )
    return f"{cc} is not loaded: run `mltcp load --variant {v.name}` first"


def absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute (a relative one from the working directory) and without
    symbolic links, as the mount table names the hierarchies."""
    return Path(path).resolve()


def cgroup_problem(path: str | os.PathLike[str]) -> str | None:
    """What makes ``path`` unusable for ``select --cgroup``, in a few words, or None."""
    path = absolute(path)
    if not path.is_dir() or not (path / "cgroup.procs").exists():
        return f"{path} is not a cgroup directory (no cgroup.procs)"
    if _fs_type(path) != "cgroup2":
        return (
            f"{path} is not on a cgroup v2 hierarchy (sock_ops programs attach to cgroup v2; "
            "mount one with `mount -t cgroup2 none DIR`)"
        )
    return None


def _select_cgroup(cc: str, path: Path, job: int | str | None, ecn: bool) -> None:
    if problem := cgroup_problem(path):
        raise MltcpError(problem)
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
    if job:
        remember_job(job)
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
    for line in MOUNTS.read_text().splitlines():
        _, mnt, fstype, *_ = line.split()
        if (str(path) + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best):
            best, kind = mnt, fstype
    return kind


def _detach(cg: str) -> None:
    """Detach mltcp_select from cgroup ``cg`` (by program id, so it works when its pin was
    removed by hand)."""
    try:
        attachments = json.loads(run(["bpftool", "-j", "cgroup", "show", cg]).stdout or "[]")
    except ValueError:
        attachments = []
    for a in attachments:
        if a.get("name") == "mltcp_select" and "sock_ops" in str(a.get("attach_type")):
            run(["bpftool", "cgroup", "detach", cg, "sock_ops", "id", str(a["id"])])


def removed(state: LoaderState) -> list[str]:
    """The cgroups of ``state`` that no longer exist.  :class:`MltcpUsageError` where one
    only looks missing because this process does not see the host's /sys (``ip netns
    exec``): it is never taken for removed then."""
    gone = [cg for cg in state.cgroups if not Path(cg).is_dir()]
    if gone and host_sys_hidden():
        raise MltcpUsageError(f"cannot tell whether cgroup {gone[0]} still exists: {NOT_HOST_SYS}")
    return gone


def without_removed(state: LoaderState) -> tuple[LoaderState, list[str]]:
    """``state`` without the cgroups that no longer exist, and those (:func:`removed`): a
    removed cgroup's attachment went with it, so there is nothing left to detach."""
    gone = removed(state)
    return replace(state, cgroups=tuple(c for c in state.cgroups if c not in gone)), gone


def forget_removed_cgroups() -> list[str]:
    """Drop the removed cgroups from the loader's state (``select``, ``load`` and
    ``unload`` do; ``status`` only reports them); returns them.  The state is written
    (under :func:`locked`) only when one was removed."""
    if not without_removed(read_state())[1]:
        return []
    with locked():
        state, gone = without_removed(read_state())  # again: another may have dropped them
        if gone:
            save_state(state)
        return gone


def forget_cgroup(path: str | os.PathLike[str]) -> bool:
    """For a caller about to remove cgroup ``path`` (the testbed after a run): detach
    mltcp_select from it and drop it from the loader's state.  Returns whether the state
    had it; a cgroup ``select`` never saw is left alone (and the state not locked)."""
    cg = str(absolute(path))
    if cg not in read_state().cgroups:
        return False
    with locked():
        state = read_state()  # again: another may have dropped it
        if cg not in state.cgroups:
            return False
        if Path(cg).is_dir():
            _detach(cg)
        save_state(replace(state, cgroups=tuple(c for c in state.cgroups if c != cg)))
        return True


def unselect_cgroups(state: LoaderState) -> LoaderState:
    """Detach mltcp_select from every cgroup we gave it to that still exists; returns the
    state without them."""
    for cg in without_removed(state)[0].cgroups:
        _detach(cg)
    SELECT_PROG.unlink(missing_ok=True)
    (PIN_DIR / "mltcp_cgroup_cfg").unlink(missing_ok=True)
    return replace(state, cgroups=())
