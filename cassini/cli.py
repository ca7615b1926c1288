"""``cassini`` command line: score jobs on one link, or rank candidate placements.

Exit status: 0 on success, 2 on bad input (one line on stderr naming the field), 1 when
every candidate was rejected.  ``cassini serve`` runs the same as an HTTP service
(:mod:`cassini.service`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from cassini import api, files, outputs
from cassini.advisor import Advice
from cassini.errors import InputError
from cassini.files import MAX_WORKERS, input_file, output_path, positive_float
from cassini.service import cli as service_cli
from cassini.service.kube import cli as cluster_cli
from cassini.sim import cli as sim_cli

EPILOG = """\
'-' for the input file reads standard input in score, advise, profile (not --from
pcap), sim run, sim sweep, sim trace, sim trace convert, sim topo show and cluster show.
input formats (JSON):
  score:  {"capacity_bps": C, "jobs": [JOB, ...]}
  advise: {"links": [{"id": "l1", "capacity_bps": C}, ...], "jobs": [JOB, ...],
           "candidates": [{"id": "c1", "paths": {"job": ["l1", ...]}}, ...]}
  JOB:    {"id": "vgg16", "iteration_time_s": 0.3,
           "phases": [{"start_s": 0.16, "duration_s": 0.14, "rate_bps": 4e10}]}
units: seconds, bits per second.  A time-shift t delays a job: its rate at time x
becomes rate((x - t) mod iteration_time).  The rules are cassini serve's: ids are
strings, at least one job, times 1e-6 to 604800 s (a week), rates up to 1e15 bits/s,
capacities from 1 bit/s.

examples:
  cassini advise --example --format table
  cassini score link.json
  cat request.json | cassini advise - --precision-deg 2
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cassini",
        description="Network-aware placement advisor (CASSINI, NSDI 2024): finds time-shifts "
        "that interleave the communication phases of jobs sharing links, and ranks "
        "candidate placements by how well their jobs interleave.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in (
        ("score", "compatibility score and time-shifts of the jobs on one link"),
        ("advise", "rank candidate placements; best placement with one time-shift per job"),
    ):
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "file",
            nargs="?",
            type=input_file,
            help="request JSON file, or - for standard input",
        )
        p.add_argument("--example", action="store_true", help="run on the built-in example")
        p.add_argument(
            "--precision-deg",
            type=float,
            default=5.0,
            help="angle step of the unified circle in degrees, 0.1 to 180 (default 5 = 72 "
            "angles over the link's unified period: where one job iterates many times "
            "faster than its partner its phases blur and the link scores too high; give "
            "1 or 0.5 there, docs/known_problems.md#coarse-grid)",
        )
        p.add_argument(
            "--format",
            choices=("json", "table"),
            default="json",
            help="json for machines (default), table for people",
        )
        if name == "advise":
            p.add_argument(
                "--aggregate",
                choices=("mean", "min"),
                default="mean",
                help="rank by the mean link score (default, as the paper) or the worst link",
            )
            p.add_argument(
                "--loops",
                choices=("reject", "score"),
                default="reject",
                help="a candidate whose affinity-graph loops still cost score after repair: "
                "reject it (default, as the paper) or rank it by the score its shifts achieve",
            )
            p.add_argument(
                "--workers",
                type=files.int_in(1, MAX_WORKERS),
                default=None,
                metavar="N",
                help=f"processes for scoring links, 1..{MAX_WORKERS}; never more than the "
                "distinct link problems (default: automatic)",
            )
    serve = sub.add_parser(
        "serve",
        help=service_cli.DESCRIPTION,
        description=service_cli.DESCRIPTION,
        epilog=service_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    service_cli.add_arguments(serve)
    sim_cli.add_parser(sub)
    cluster_cli.add_parser(sub)
    _add_profile_parser(sub)
    return parser


def _version() -> str:
    """The installed package's version (``cassini --version``)."""
    from importlib import metadata

    try:
        return metadata.version("netaware-ml")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return service_cli.serve_command(args)
    if args.command == "sim":
        return sim_cli.main(args)
    if args.command == "cluster":
        return cluster_cli.main(args)
    if args.command == "profile":
        return _profile_command(args)
    try:
        request = _read_request(args)
        if args.command == "score":
            response = api.score_request(request, precision_deg=args.precision_deg)
            out = (
                json.dumps(response, indent=2) if args.format == "json" else _score_table(response)
            )
            print(out)
            return 0
        advice = api.advise_request(
            request,
            precision_deg=args.precision_deg,
            aggregate=args.aggregate,
            loops=args.loops,
            workers=args.workers,
        )
    except InputError as e:
        print(f"cassini: error: {e}", file=sys.stderr)
        return 2
    print(
        json.dumps(advice.to_dict(), indent=2) if args.format == "json" else _advice_table(advice)
    )
    return 0 if advice.best is not None else 1


def _read_request(args: argparse.Namespace) -> Any:
    if args.example:
        if args.file:
            raise InputError("file", "give a file or --example, not both")
        return api.example(args.command)
    if not args.file:
        raise InputError("file", "missing: give a JSON file, - for stdin, or --example")
    text = files.read_input(args.file)
    return _checked_request(args.command, files.parse_json(text, files.input_name(args.file)))


def _checked_request(command: str, request: Any) -> Any:
    """``request`` checked by the rules of ``POST /v1/<command>``: the service's model
    (:mod:`cassini.service.models`; its bounds, string ids, at least one job), so that a
    body one accepts the other accepts, refused in the same words (the whole input is
    ``input`` here, ``body`` there); the readers of :mod:`cassini.api` then check the
    rest, as the service's do."""
    from cassini.service import models
    from cassini.service.errors import BadRequest

    model = models.ScoreRequest if command == "score" else models.AdviseRequest
    try:
        models.validate(model, request)
    except BadRequest as e:
        field = "input" if e.field in (None, "body") else e.field
        raise InputError(field, e.message) from None
    return request


def _score_table(r: dict[str, Any]) -> str:
    approx = "" if r["period_exact"] else f" (approximate, {r['period_error']:.1%} stretch)"
    lines = [
        f"score {r['score']:.3f}  unified period {r['unified_period_s'] * 1e3:.1f} ms{approx}"
        f"  {r['n_angles']} angles  {r['method']} search",
    ]
    w = max([20, *map(len, r["time_shifts_s"])])  # long ids keep the column
    lines.append(f"{'job':<{w}} {'time-shift (ms)':>16}")
    lines += [f"{j:<{w}} {t * 1e3:>16.1f}" for j, t in r["time_shifts_s"].items()]
    return "\n".join(lines)


def _advice_table(a: Advice) -> str:
    w = max([16, *(len(c.candidate_id) for c in a.candidates)])  # long ids keep the columns
    lines = [f"{'candidate':<{w}} {'status':<9} {'score':>6} {'min':>6} {'loops':>5}  note"]
    for c in a.candidates:
        score = f"{c.score:.3f}" if c.score is not None else "-"
        low = f"{c.min_link_score:.3f}" if c.min_link_score is not None else "-"
        note = "best" if c.candidate_id == a.best else (c.reason or "")
        cid = c.candidate_id
        lines.append(f"{cid:<{w}} {c.status:<9} {score:>6} {low:>6} {c.loops:>5}  {note}")
    if a.best is None:
        lines.append("no candidate accepted")
        return "\n".join(lines)
    lines.append("")
    lines.append(f"best placement: {a.best}  (aggregate: {a.aggregate})")
    # "score": what the link reaches at the candidate's time-shifts (what the candidate's
    # score aggregates); "alone": its own best, where a loop of links (loops: score) can
    # keep the shifts from giving every link its best at once
    best = next(c for c in a.candidates if c.candidate_id == a.best)
    lw = max([16, *map(len, a.link_solutions)])
    jw = max([40, *(len(", ".join(s.job_ids)) for s in a.link_solutions.values())])
    lines.append(f"{'link':<{lw}} {'jobs':<{jw}} {'score':>6} {'alone':>6}")
    for link, sol in a.link_solutions.items():
        got = best.link_scores.get(link, sol.score)
        jobs = ", ".join(sol.job_ids)
        lines.append(f"{link:<{lw}} {jobs:<{jw}} {got:>6.3f} {sol.score:>6.3f}")
    kw = max([16, *map(len, a.time_shifts_s)])
    lines.append("")
    pred = a.prediction
    if pred is None:
        lines.append(f"{'job':<{kw}} {'time-shift (ms)':>16}")
        for job, t in sorted(a.time_shifts_s.items()):
            lines.append(f"{job:<{kw}} {t * 1e3:>16.1f}")
        return "\n".join(lines)
    lines.append(
        f"{'job':<{kw}} {'time-shift (ms)':>16} {'shift':>5} {'same start':>11} {'shifted':>9} "
        f"{'advised':>9}  (predicted ms/iteration)"
    )
    for job, t in sorted(a.time_shifts_s.items()):
        it = pred.iteration_s[job]
        lines.append(
            f"{job:<{kw}} {t * 1e3:>16.1f} {'yes' if pred.shift[job] else 'no':>5} "
            f"{it['same_start'] * 1e3:>11.1f} {it['shifted'] * 1e3:>9.1f} "
            f"{it['advised'] * 1e3:>9.1f}"
        )
    lines.append(f"predicted gain (same start / shifted, mean): {pred.gain:.3f}")
    for job, why in pred.reasons.items():
        if not pred.shift[job]:
            lines.append(f"  {job}: not shifted: {why}")
        elif job in pred.drifts:
            lines.append(f"  {job}: shifted, but {pred.drifts[job].removeprefix('held, but ')}")
    return "\n".join(lines)


PROFILE_HELP = "a job's profile (JOB JSON) from a DDP recorder log, a worker log or a pcap"
PROFILE_EPILOG = """\
sources:
  recorder    JSON lines of cassini.torch.CommHookRecorder.write_jsonl (world size read
              from its meta line unless --world-size is given)
  worker-log  JSON lines {"start", "comm_start", "end", "bytes_sent"} per iteration
              (testbed workers)
  pcap        a tcpdump, dumpcap or tshark capture (pcap or pcapng; Ethernet, Linux
              cooked as from -i any, BSD loopback or raw IP); --src-ip selects the
              job's host; rates count TCP/UDP payload (not headers) and every payload
              byte; --window START END (wall clock s, e.g. the first and last
              iteration starts) leaves out set-up and idle time, which would
              otherwise dilute the rates; --starts-log LOG
              folds each iteration from its own start in the job's worker or
              recorder log (phases stay where they are in the iteration when
              iterations vary; a fold at one period slides them)
options: --world-size applies to recorder; --src-ip, --dt-s, --window and --starts-log to
pcap; --skip to recorder, worker-log and pcap with --starts-log; others are refused.
output: the JOB object of `cassini advise` ({"id", "iteration_time_s", "phases": [...]}).

examples:
  cassini profile --from recorder buckets.jsonl --job-id resnet --plot resnet.png
  cassini profile --from pcap h1.pcap --src-ip 10.0.0.1 --out h1.json
"""


def _add_profile_parser(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help=PROFILE_HELP,
        description=PROFILE_HELP,
        epilog=PROFILE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "file",
        type=input_file,
        help="the recorder log, worker log or capture; - reads a log from standard input "
        "(a capture is read from a file)",
    )
    p.add_argument(
        "--from", dest="source", required=True, choices=("recorder", "worker-log", "pcap")
    )
    p.add_argument(
        "--job-id", type=_job_id, default="job", help="id of the job in the output (default job)"
    )
    p.add_argument("--world-size", type=int, default=None, help="ranks of the job (recorder)")
    p.add_argument("--src-ip", default=None, help="the job host's IPv4 address, a.b.c.d (pcap)")
    p.add_argument(
        "--dt-s",
        type=positive_float,
        default=None,
        help="pcap: time bin in seconds, at least 1e-06 (default 0.001); the iteration time "
        "is read at bins of at least twice the packets' median spacing",
    )
    p.add_argument(
        "--window",
        nargs=2,
        type=float,
        default=None,
        metavar=("START_S", "END_S"),
        help="pcap: only packets in [START_S, END_S) (wall clock seconds)",
    )
    p.add_argument(
        "--starts-log",
        default=None,
        type=input_file,
        metavar="LOG",
        help="pcap: fold each iteration from its start in this worker or recorder log",
    )
    p.add_argument(
        "--skip",
        type=int,
        default=None,
        help="warm-up iterations left out (default 1; recorder, worker-log, pcap with "
        "--starts-log)",
    )
    p.add_argument(
        "--nic-bps",
        type=positive_float,
        default=None,
        metavar="BPS",
        help="the NIC rate (bits/s) of the host it was measured on, written as "
        "provenance.nic_bps: cassini sim scales the profile from it to its own links "
        "(profiles: scale-to-nic; without it, 50 Gbit/s is assumed, with a warning)",
    )
    p.add_argument(
        "--plot",
        default=None,
        type=output_path,
        metavar="OUT.png",
        help="draw rate over an iteration; its extension names the format (.png, .pdf, ...); "
        "its folder is made if missing",
    )
    p.add_argument(
        "--out",
        default=None,
        type=output_path,
        metavar="FILE",
        help="write the JSON here, not stdout",
    )


def _job_id(text: str) -> str:
    """argparse ``type`` of ``--job-id``: not empty (score and advise refuse an empty id)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty (score and advise need an id)")
    return text


#: ``cassini profile``'s options that apply to some sources only: flag -> (attribute,
#: the sources it applies to); ``--skip`` applies to a capture only with ``--starts-log``
PROFILE_SOURCE_OPTIONS = {
    "--world-size": ("world_size", ("recorder",)),
    "--src-ip": ("src_ip", ("pcap",)),
    "--dt-s": ("dt_s", ("pcap",)),
    "--window": ("window", ("pcap",)),
    "--starts-log": ("starts_log", ("pcap",)),
    "--skip": ("skip", ("recorder", "worker-log")),
}


def _check_profile_options(args: argparse.Namespace) -> None:
    """InputError naming the first option given that ``--from SOURCE`` does not use (they
    had been ignored: ``--from worker-log --src-ip ...`` exited 0)."""
    for flag, (dest, sources) in PROFILE_SOURCE_OPTIONS.items():
        if getattr(args, dest) is None or args.source in sources:
            continue
        if flag == "--skip" and args.source == "pcap":
            if args.starts_log is not None:
                continue
            raise InputError(flag, "applies to --from pcap only with --starts-log (and to "
                             "--from recorder or worker-log)")  # fmt: skip
        raise InputError(flag, f"applies to --from {' or '.join(sources)} only")
    if args.skip is not None and args.skip < 0:
        raise InputError("skip", f"must be >= 0, got {args.skip}")


def _profile_command(args: argparse.Namespace) -> int:
    try:
        _check_profile_options(args)
        if args.out:
            outputs.check_output_file(args.out)
        if args.plot:
            _check_plot(args.plot)  # before the work, and before --out is written
        profile = _profile(args)
        if args.plot:
            _plot_profile(profile, args.plot)
    except InputError as e:
        print(f"cassini: error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(_with_provenance(profile.to_dict(), args), indent=2)
    if args.out:
        with outputs.replaced(Path(args.out)) as tmp:
            tmp.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


def _with_provenance(obj: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The profile's JSON with ``provenance.nic_bps`` (bits/s) when ``--nic-bps`` gave it
    (what ``cassini sim`` scales the profile from), and its source."""
    if args.nic_bps is None:
        return obj
    return obj | {"provenance": {"nic_bps": args.nic_bps,
                                 "source": f"cassini profile --from {args.source}"}}


def _profile(args: argparse.Namespace) -> Any:
    """The JobProfile of ``cassini profile``'s source; logs may come from standard input
    (``-``), a capture only from a file."""
    from cassini import measure

    skip = 1 if args.skip is None else args.skip
    if args.source == "pcap":
        return _profile_pcap(args, skip)
    if args.source == "worker-log":
        records = files.read_jsonl(args.file, "log")
        return measure.profile_from_log(args.job_id, records, skip=skip, communicates=True)
    log = measure.bucket_records_from_dicts(files.read_jsonl(args.file, "log"))
    world = args.world_size if args.world_size is not None else log.world_size
    if world is None:
        raise InputError("world_size", "missing: the log has no meta line; give --world-size")
    return measure.profile_from_buckets(
        args.job_id,
        log.records,
        world,
        log.iteration_starts_s or None,
        skip=skip,
        communicates=True,
    )


def _profile_pcap(args: argparse.Namespace, skip: int) -> Any:
    """``cassini profile --from pcap``: the capture's profile; a series without a period
    is named by the capture and ``--dt-s`` (not the library's ``samples_bps``)."""
    from cassini import measure
    from cassini.agent import MIN_PERIOD_S

    if args.file == files.STDIN:
        raise InputError("file", "--from pcap reads a capture file, not standard input")
    if not args.src_ip:
        raise InputError("--src-ip", "missing: required with --from pcap")
    if args.dt_s is not None and args.dt_s < MIN_PERIOD_S:  # its phases no reader takes
        raise InputError(
            "--dt-s", f"must be >= {MIN_PERIOD_S:g} s (the shortest phase a profile may "
            f"have), got {args.dt_s:g}"
        )
    window = tuple(args.window) if args.window else None
    dt_s = 0.001 if args.dt_s is None else args.dt_s
    starts = None
    if args.starts_log:
        if window:
            raise InputError("window", "not with --starts-log, which sets it")
        lines = files.read_jsonl(args.starts_log, "starts_log")
        starts = measure.iteration_starts(lines, skip, "starts_log")
    try:
        return measure.profile_from_pcap(
            args.job_id, args.file, args.src_ip, dt_s, window_s=window, iteration_starts_s=starts
        )
    except InputError as e:
        if e.field == "src_ip":  # the address is checked there (a.b.c.d), named as the flag
            raise InputError("--src-ip", e.problem) from None
        if e.field != "samples_bps":
            raise
        raise InputError(
            args.file, f"the capture's rate series at --dt-s {dt_s:g} s {e.problem}"
        ) from None


def _check_plot(path: str) -> None:
    """``--plot`` names a file matplotlib can write: not a folder, in a folder we may
    write in, with an extension naming a format (matplotlib had failed after the work,
    leaving ``--out`` unwritten, and written ``d.png`` for a folder ``d``)."""
    try:
        outputs.check_output_file(path)
    except InputError as e:
        raise InputError("--plot", str(e)) from None
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise InputError("--plot", "needs matplotlib (pip install 'netaware-ml[sim]')") from None
    kinds = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = Path(path).suffix.lower()
    if suffix.lstrip(".") not in kinds:
        got = f"unknown extension {suffix!r}" if suffix else "no extension"
        raise InputError(
            "--plot", f"{path}: {got}; the picture's format is one of ." + ", .".join(kinds)
        )


def _plot_profile(profile: Any, path: str) -> None:
    """Rate (bits/s) over one iteration, as a step plot (matplotlib, imported here), into
    ``path`` (its folder made if missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--plot", "needs matplotlib (pip install 'netaware-ml[sim]')") from None
    import numpy as np

    period = profile.iteration_time_s
    starts, ends, _ = profile.intervals()
    edges = np.unique(np.concatenate([[0.0, period], starts, ends]))
    rate = profile.rate_at(0.5 * (edges[1:] + edges[:-1]))
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.stairs(rate / 1e9, edges * 1e3, fill=True, alpha=0.6)
    ax.set_xlabel("time in iteration (ms)")
    ax.set_ylabel("rate (Gbit/s)")
    ax.set_xlim(0, period * 1e3)
    n = len(profile.phases)
    ax.set_title(  # the job id on its own line: a long one no longer cuts the figures off
        f"{profile.job_id}\n{period * 1e3:.1f} ms/iteration, "
        f"{profile.bytes_per_iteration / 1e6:.2f} MB/iteration, {n} phase{'' if n == 1 else 's'}",
        fontsize=10,
    )
    fig.tight_layout()
    target = Path(path)
    try:  # its folder made as --out's is, the picture written whole or not at all
        outputs.save_figure(fig, target, dpi=100)
    except OSError as e:
        raise InputError("--plot", f"cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def entry() -> None:
    """Console-script entry point: exit quietly when the reader of stdout goes away."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


if __name__ == "__main__":
    entry()
