"""``mltcp`` command line: load, parameterise, select, inspect and unload the MLTCP
congestion controls.  Exit status 2 for bad parameters, 1 for any other problem (not root
included), each with one line saying what to do.  Every command needs root."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import replace

from cassini.files import input_dir
from mltcp import variants
from mltcp.policy import MltcpParams, check_fields, resolution_problem

DEFAULTS = MltcpParams()
PARAMS = tuple(f.name for f in dataclasses.fields(MltcpParams))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mltcp",
        description="ML-aware TCP congestion control loaded into the running kernel as eBPF. "
        "A flow's window growth is scaled by F = slope * ratio + intercept, ratio being the "
        "fraction of its iteration's bytes already acked, so competing training jobs drift "
        "into an interleaved schedule.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    load = sub.add_parser(
        "load",
        help="build and register (idempotent); allow in namespaces",
        description="Build and register the congestion controls and allow them in network "
        "namespaces.  Idempotent: run again, it changes only the parameters given (a first "
        "load starts from the defaults).",
    )
    loads = ", ".join(f"{v.name} loads {v.cc}" for v in variants.VARIANTS)
    load.add_argument(
        "--variant",
        default="all",
        choices=(*variants.NAMES, "all"),
        help=f"which congestion control to register: {loads}; all: every one (default)",
    )
    _add_params(load, load=True)
    _add_params(
        sub.add_parser(
            "set",
            help="change parameters at run time (no reload)",
            description="Change the rule's parameters of the loaded controls; flows use them "
            "from their next ACK.  Only the flags given change.",
        ),
        False,
    )
    _add_select(
        sub.add_parser(
            "select",
            help="use a variant in a netns, for one cgroup's sockets, or host-wide",
            description="Make a congestion control the one a named network namespace, the "
            "TCP sockets of one cgroup v2, or the host uses by default.",
        )
    )
    _add_status(sub)
    un = sub.add_parser(
        "unload",
        help="unregister and restore the kernel's settings",
        description="Unregister every variant and put back the allowed list, the default and "
        "each namespace's choice as `load` and `select` found them.  Refused while a TCP "
        "socket (listeners included) in any network namespace of the host, named or not, "
        "uses one, naming the namespace (`pid N` for one without a name).",
    )
    un.add_argument(
        "--force",
        action="store_true",
        help="even if sockets still use it: they move to the base algorithm (reno/cubic), "
        "in every network namespace",
    )
    job_help = "the job's name, as the training process gives it to mltcp.mark_iteration"
    mark = sub.add_parser(
        "mark",
        help="mark an iteration end for a job (exact mode)",
        description="Tell the kernel that JOB finished an iteration (exact mode; a training "
        "process calls mltcp.mark_iteration instead).  Prints a bare number on standard "
        "output: the iteration ends marked for JOB so far, this one included.",
    )
    mark.add_argument("job", help=job_help)
    port = sub.add_parser(
        "assign-port",
        help="flows to/from PORT belong to JOB (exact mode)",
        description="Tie the TCP flows whose local or remote port is PORT to JOB, so JOB's "
        "marks end their iterations (exact mode).",
    )
    port.add_argument("port", type=int, help="a TCP port, 1..65535")
    port.add_argument("job", help=job_help)
    return p


def _add_status(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser(
        "status",
        help="what is loaded, parameters, per-flow statistics",
        description="What is loaded, the allowed list and default, the parameters, window "
        "repairs, and what is wrong in MLTCP's kernel state (a line `problem:` each, saying "
        "what to do; `note:` for what the next select, load or unload will tidy, such as "
        "a removed cgroup; status itself only reads).",
    )
    st.add_argument(
        "--flows",
        action="store_true",
        help="also the flows on MLTCP now: iterations, bytes of the last one, F at its end, "
        "the job (its name when `select --job`/`assign-port`/`mark` gave it here, else the "
        "kernel's key, a hash).  A row is keyed by (local port, remote port) alone: flows "
        "with the same ports in different network namespaces share one",
    )
    st.add_argument(
        "--ended",
        action="store_true",
        help="with --flows: also flows whose socket closed or left MLTCP (their last "
        "counts, until the kernel's map reuses their row)",
    )
    st.add_argument("--json", action="store_true", help="one JSON object instead of lines")


def _add_params(sp: argparse.ArgumentParser, load: bool) -> None:
    """The rule's parameters, None when not given: ``set`` changes only what it is given
    (its help says so), and so does ``load``, which starts from MltcpParams' defaults
    when nothing is loaded and from the loaded values on a reload."""

    def said(value: object) -> str:
        if load:
            return f"default {value}"
        return f"unset: keeps the loaded value; load's default {value}"

    sp.add_argument(
        "--slope",
        type=float,
        help="F's slope, >= 0, slope + intercept <= 64, in steps of 1/1024 "
        f"({said(DEFAULTS.slope)})",
    )
    sp.add_argument(
        "--intercept",
        type=float,
        help="F's intercept, > 0, slope + intercept <= 64, in steps of 1/1024 "
        f"({said(DEFAULTS.intercept)})",
    )
    sp.add_argument(
        "--idle-ms",
        type=float,
        help="idle gap that ends an iteration, milliseconds, > 0 and <= 60000, in steps of "
        f"1 µs ({said(DEFAULTS.idle_ms)})",
    )
    sp.add_argument(
        "--mode",
        choices=("idle", "exact"),
        help=f"iteration boundaries: idle gaps, or marks from the trainer ({said(DEFAULTS.mode)})",
    )
    scale = "on" if DEFAULTS.scale_cut else "off"
    sp.add_argument(
        "--scale-cut",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mltcp_dctcp: divide the window cut on ECN marks by F too, so a flow further "
        "through its iteration backs off less (beyond the paper's rule; "
        f"{said(scale)}; --no-scale-cut for the paper's rule)",
    )


def _add_select(sel: argparse.ArgumentParser) -> None:
    sel.add_argument(
        "cc", nargs="?", default="mltcp_reno", help="congestion control name (default: mltcp_reno)"
    )
    where = sel.add_mutually_exclusive_group(required=True)
    where.add_argument("--netns", help="named network namespace (ip netns)")
    where.add_argument(
        "--cgroup",
        metavar="PATH",
        type=input_dir,
        help="a cgroup v2 directory (a relative one from the working directory): only its "
        "processes' TCP sockets (a sock_ops program)",
    )
    where.add_argument("--default", action="store_true", help="the host's default")
    sel.add_argument("--job", help="with --cgroup: tie those sockets to JOB (exact mode)")
    ecn_ccs = ", ".join(v.cc for v in variants.VARIANTS if v.needs_ecn)
    sel.add_argument(
        "--ecn",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --cgroup: negotiate ECN for those sockets, whatever net.ipv4.tcp_ecn says "
        f"(default: when the congestion control needs it, e.g. {ecn_ccs})",
    )


def _given(args: argparse.Namespace) -> dict[str, object]:
    """The parameters given on the command line, by MltcpParams' field names."""
    return {f: getattr(args, f) for f in PARAMS if getattr(args, f) is not None}


def _params(args: argparse.Namespace) -> MltcpParams | None:
    """The parameters ``load`` or ``set`` asks for: the loaded ones with those given
    changed (``load`` with nothing loaded: the defaults with them changed; with none given:
    None, the loaded ones kept).  ValueError naming the field where they are not valid:
    those given are checked first, on their own (before anything is read: a bad flag is
    named, not that nothing is loaded), then with the values that would be used with them
    (slope + intercept: the one given and the one loaded, or the default)."""
    from mltcp import admin

    given = _given(args)
    check_fields(given)
    if args.command == "load":
        if not given:
            return None
        return replace(_loaded_or_defaults(), **given)
    return replace(admin.get_params(), **given)


def _loaded_or_defaults() -> MltcpParams:
    """What a reload keeps: the parameters in the config map, or the defaults when there is
    none (nothing loaded) or no one has written it yet."""
    from mltcp.admin.params import params_from, read_config
    from mltcp.pinned import MltcpError

    try:
        raw = read_config()
    except MltcpError:  # no config map (or one load will replace)
        return DEFAULTS
    return params_from(raw) if any(raw) else DEFAULTS


def _load_or_set(args: argparse.Namespace) -> int:
    from mltcp import admin

    try:
        params = _params(args)
    except ValueError as e:
        print(f"mltcp: invalid parameter: {_flags(str(e))}", file=sys.stderr)
        return 2
    names: list[str] = []
    if args.command == "load":
        names = admin.load(args.variant, params)
    else:
        admin.set_params(params)  # never None for set: _params read the loaded ones
    p = admin.get_params()  # as the kernel holds them (fixed point), not as typed
    said = f"slope {p.slope}, intercept {p.intercept}, idle {p.idle_ms} ms, mode {p.mode}" + (
        ", cut scaled by 1/F" if p.scale_cut else ""
    )
    print(f"loaded {', '.join(names)} ({said})" if args.command == "load" else f"set {said}")
    return 0


def _select(args: argparse.Namespace) -> int:
    from mltcp import admin

    admin.select(
        args.cc,
        netns=args.netns,
        default=args.default,
        cgroup=args.cgroup,
        job=args.job,
        ecn=args.ecn,
    )
    if args.netns:
        where = f"netns {args.netns}"
    elif args.cgroup:
        where = f"cgroup {args.cgroup}" + (f" (job {args.job})" if args.job else "")
    else:
        where = "the host"
    print(f"{args.cc} selected for {where}")
    return 0


def _flags(message: str) -> str:
    """A parameter error of MltcpParams with its fields named as the flags that set them
    (``idle_ms must be ...`` -> ``--idle-ms must be ...``)."""
    for name in PARAMS:
        message = re.sub(rf"\b{name}\b", "--" + name.replace("_", "-"), message)
    return message


def _cgroup_problem(path: str) -> str | None:
    """What makes ``path`` unusable as a cgroup v2 directory (``PATH: problem``), or None;
    a relative path is taken from the working directory."""
    from cassini import files
    from cassini.errors import InputError
    from mltcp.admin.cgroup import cgroup_problem

    try:
        files.check_dir(path)
    except InputError as e:
        return str(e)
    return cgroup_problem(path)


def _unknown_cc(cc: str) -> str | None:
    """Why ``cc`` is no congestion control at all (neither ours nor the kernel's), or None."""
    from mltcp.admin.cgroup import not_loaded
    from mltcp.pinned import available

    if cc in variants.CCS or cc in available():
        return None
    return not_loaded(cc)


def _status(args: argparse.Namespace) -> int:
    from mltcp import admin

    s = admin.status(flows=args.flows, ended=args.ended)
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    print(f"loaded: {', '.join(s['loaded']) or 'nothing'}; default {s['default']}")
    if "params" in s:
        print("params: " + ", ".join(f"{k} {v}" for k, v in s["params"].items()))
    for problem in s.get("problems", []):
        print(f"problem: {problem}")
    for note in s.get("notes", []):
        print(f"note: {note}")
    if s.get("window_repairs"):
        print(f"windows repaired (impossible kernel values): {s['window_repairs']}")
    for f in s.get("flows", []):
        print(
            f"  {f['local_port']}->{f['remote_port']} {_job(f)} iterations "
            f"{f['iterations']} last {f['last_iteration_bytes']} B F {f['factor']:.3f}"
            + (" (ended)" if f["ended"] else "")
        )
    return 0


def _job(flow: dict) -> str:
    """A flow's job as ``status --flows`` prints it: its name when recorded, else its key."""
    if flow["job_name"] is not None:
        return f"job {flow['job_name']}"
    if not flow["job"]:
        return "no job"
    return f"job key {flow['job']} (a hash; its name was not given here)"


def _unload(args: argparse.Namespace) -> int:
    from mltcp import admin

    names = admin.unload(force=args.force)
    print(f"unloaded {', '.join(names) or 'nothing'}")
    return 0


def _mark(args: argparse.Namespace) -> int:
    from mltcp import marks

    count = marks.mark_iteration(args.job)
    _remember(args.job)
    print(count)  # the bare number: scripts read it (n=$(mltcp mark JOB))
    return 0


def _assign_port(args: argparse.Namespace) -> int:
    from mltcp import marks

    marks.assign_port(args.port, args.job)
    _remember(args.job)
    return 0


def _remember(job: str) -> None:
    """Record ``job``'s name for ``status --flows``; what was done in the kernel stands,
    so a failure is a warning on standard error, not the command's failure."""
    from mltcp.admin.state import remember_job
    from mltcp.pinned import MltcpError

    try:
        remember_job(job)
    except (OSError, MltcpError) as e:
        print(
            f"mltcp: warning: job {job}'s name not recorded (`status --flows` will show its "
            f"key): {e}",
            file=sys.stderr,
        )


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "load": _load_or_set,
    "set": _load_or_set,
    "select": _select,
    "status": _status,
    "unload": _unload,
    "mark": _mark,
    "assign-port": _assign_port,
}


def bad_argument(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments themselves, in one line naming the flag or
    argument (exit 2, before root is checked or anything touches the kernel), or None."""
    for name in ("slope", "intercept", "idle_ms"):  # MltcpParams' own rule, before root
        value = getattr(args, name, None)
        if value is not None and (problem := resolution_problem(name, value)):
            return _flags(problem)
    if args.command in ("mark", "assign-port") and not args.job.strip():
        return "JOB must not be empty"
    if args.command == "assign-port" and not 0 < args.port < 65536:
        return f"PORT must be in 1..65535, got {args.port}"
    if args.command == "status" and args.ended and not args.flows:
        return "--ended goes with --flows"
    if args.command == "select":
        if problem := _unknown_cc(args.cc):
            return problem
        if args.cgroup is not None and (problem := _cgroup_problem(args.cgroup)):
            return f"--cgroup {problem}"
        if args.job is not None and args.cgroup is None:
            return "--job goes with --cgroup (or use `mltcp assign-port`)"
        if args.job is not None and not args.job.strip():
            return "--job must not be empty"
        if args.ecn is not None and args.cgroup is None:
            flag = "--ecn" if args.ecn else "--no-ecn"
            return f"{flag} goes with --cgroup (elsewhere net.ipv4.tcp_ecn decides)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mltcp.pinned import MltcpError

    problem = bad_argument(args)
    if problem:
        print(f"mltcp: {problem}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:  # before anything: the bpf(2) calls and sysctl writes need it
        print(f"mltcp: {args.command} needs root: run with sudo", file=sys.stderr)
        return 1
    try:
        return COMMANDS[args.command](args)
    except MltcpError as e:
        print(f"mltcp: {e}", file=sys.stderr)
        return getattr(e, "exit_status", 1)  # 2: run where it cannot do what it says
    except PermissionError as e:  # root without the capability (a container, lockdown)
        print(f"mltcp: {args.command}: {e} (root, yet not permitted here)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
