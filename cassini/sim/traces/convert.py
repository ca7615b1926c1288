"""``cassini sim trace convert IN --out FILE``: a published trace as our trace, each bad
row reported on stderr (``file:line:column``) and counted, never dropped silently."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from cassini import files
from cassini.errors import InputError
from cassini.sim.traces import read
from cassini.sim.traces.files import check_not_gzip
from cassini.sim.traces.ours import write
from cassini.sim.workload import check_trace_suffix, load_library


def convert(args: argparse.Namespace, out: Path) -> int:
    """``trace convert``: a published trace to our CSV; bad rows reported, never dropped
    silently.  ``-``: the trace on standard input (copied to a file the readers open)."""
    if len(args.what) != 2:
        raise InputError("trace", "usage: cassini sim trace convert IN [--format F] --out FILE")
    if args.what[1] == files.STDIN:
        text = files.read_stdin()
        with files.spooled(text, ".json" if text.lstrip()[:1] in "[{" else ".csv") as spool:

            def named(line: str) -> str:
                return line.replace(str(spool), files.STDIN_NAME)

            try:
                return _convert_file(args, spool, out, named)
            except InputError as e:
                raise files.from_stdin(e, spool) from None
    if not Path(args.what[1]).is_dir():  # a folder may hold a trace's tables (pai2020, ...)
        check_not_gzip(Path(args.what[1]))  # before check_text: it would say "binary file"
        files.check_text(args.what[1])
    return _convert_file(args, Path(args.what[1]), out, lambda line: line)


def _convert_file(args: argparse.Namespace, path: Path, out: Path, named: Callable) -> int:
    """Convert the trace ``path`` to ``out``; ``named(line)``: a line as printed."""
    library = load_library(args.profiles)
    got = read(path, library, format=args.trace_format, seed=args.seed or 0, strict=args.strict)
    check_trace_suffix(out)  # after the input's own errors, before a line is printed
    for bad in got.bad:
        print(named(f"bad row: {bad}"), file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    write(got.jobs, out)  # run times as duration_s: no cluster here (docs/sim_traces.md)
    for note in got.notes:
        print(named(f"assumed: {note}"), file=sys.stderr)
    skipped = ", ".join(f"{n} {why}" for why, n in got.skipped.items())
    print(
        f"wrote {len(got.jobs)} jobs ({got.format}) to {out}; "
        f"{len(got.bad)} bad row{'s' if len(got.bad) != 1 else ''}"
        + (" (skipped, each listed above)" if got.bad else "")
        + (f"; skipped {sum(got.skipped.values())} by rule: {skipped}" if got.skipped else ""),
        file=sys.stderr,
    )
    return 0
