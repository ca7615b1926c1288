"""``cassini`` command line: score jobs on one link, or rank candidate placements.

Exit status: 0 on success, 2 on bad input (one line on stderr naming the field), 1 when
every candidate was rejected.  ``cassini serve`` runs the same as an HTTP service
(:mod:`cassini.server`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from cassini import api, server
from cassini.advisor import Advice
from cassini.errors import InputError
from cassini.sim import cli as sim_cli

EPILOG = """\
input formats (JSON; '-' reads standard input):
  score:  {"capacity_bps": C, "jobs": [JOB, ...]}
  advise: {"links": [{"id": "l1", "capacity_bps": C}, ...], "jobs": [JOB, ...],
           "candidates": [{"id": "c1", "paths": {"job": ["l1", ...]}}, ...]}
  JOB:    {"id": "vgg16", "iteration_time_s": 0.3,
           "phases": [{"start_s": 0.16, "duration_s": 0.14, "rate_bps": 4e10}]}
units: seconds, bits per second.  A time-shift t delays a job: its rate at time x
becomes rate((x - t) mod iteration_time).

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
        p.add_argument("file", nargs="?", help="request JSON file, or - for standard input")
        p.add_argument("--example", action="store_true", help="run on the built-in example")
        p.add_argument(
            "--precision-deg",
            type=float,
            default=5.0,
            help="angle step of the unified circle in degrees (default 5 = 72 angles)",
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
                help="rank by the mean link score (paper) or the worst link",
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
                type=int,
                default=None,
                help="processes for scoring links (default: automatic)",
            )
    serve = sub.add_parser(
        "serve",
        help=server.DESCRIPTION,
        description=server.DESCRIPTION,
        epilog=server.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    server.add_arguments(serve)
    sim_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return server.serve_command(args)
    if args.command == "sim":
        return sim_cli.main(args)
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
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InputError("file", f"cannot read {args.file}: {e.strerror}") from None
    return api.parse_json(text)


def _score_table(r: dict[str, Any]) -> str:
    approx = "" if r["period_exact"] else f" (approximate, {r['period_error']:.1%} stretch)"
    lines = [
        f"score {r['score']:.3f}  unified period {r['unified_period_s'] * 1e3:.1f} ms{approx}"
        f"  {r['n_angles']} angles  {r['method']} search",
        f"{'job':<20} {'time-shift (ms)':>16}",
    ]
    lines += [f"{j:<20} {t * 1e3:>16.1f}" for j, t in r["time_shifts_s"].items()]
    return "\n".join(lines)


def _advice_table(a: Advice) -> str:
    lines = [f"{'candidate':<16} {'status':<9} {'score':>6} {'min':>6} {'loops':>5}  note"]
    for c in a.candidates:
        score = f"{c.score:.3f}" if c.score is not None else "-"
        low = f"{c.min_link_score:.3f}" if c.min_link_score is not None else "-"
        note = "best" if c.candidate_id == a.best else (c.reason or "")
        lines.append(f"{c.candidate_id:<16} {c.status:<9} {score:>6} {low:>6} {c.loops:>5}  {note}")
    if a.best is None:
        lines.append("no candidate accepted")
        return "\n".join(lines)
    lines.append("")
    lines.append(f"best placement: {a.best}  (aggregate: {a.aggregate})")
    lines.append(f"{'link':<16} {'jobs':<40} {'score':>6}")
    for link, sol in a.link_solutions.items():
        lines.append(f"{link:<16} {', '.join(sol.job_ids):<40} {sol.score:>6.3f}")
    lines.append("")
    lines.append(f"{'job':<16} {'time-shift (ms)':>16}")
    for job, t in sorted(a.time_shifts_s.items()):
        lines.append(f"{job:<16} {t * 1e3:>16.1f}")
    return "\n".join(lines)


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
