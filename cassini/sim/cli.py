"""``cassini sim``: run, sweep and export simulated cluster workloads; exit status 0 on
success, 2 on bad input (one line on stderr naming the field)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cassini import files, outputs
from cassini.errors import InputError
from cassini.files import MAX_WORKERS, input_file, non_negative_int, output_path

if TYPE_CHECKING:
    from cassini.sim.config import SimConfig

DESCRIPTION = (
    "Trace-driven simulation of a GPU cluster: jobs arrive (Poisson or a trace), a "
    "Themis- or Pollux-like scheduler places them (optionally choosing among candidate "
    "placements with CASSINI), and a flow-level network model gives every job's iteration "
    "times; MLTCP, Crux priorities and paths, ECMP and defragmentation compose with it.  "
    "Reports mean/p99 iteration time, JCT, makespan, excess-demand time, GPU utilisation, "
    "migrations and ECMP collisions."
)

#: Where the epilog lists the parts, one line per kind of cassini.sim.parts.KINDS, filled
#: in when help is shown (:class:`_Help`), so a part added to a table is listed.
PARTS = "{parts by kind}"
EPILOG = """\
schedulers: a queue policy + parts, e.g. themis, themis+cassini, themis+crux+mltcp,
  pollux+defrag+ecmp; ideal (dedicated network).  Parts by kind:
{parts by kind}
    (cassini = placement cassini + held; crux = crux routing + priority;
     a timing named beside cassini replaces held: themis+cassini+free)
  recorded (+cassini): each job on the hosts its trace names (philly, lingjun, pai2020)
config (YAML or JSON), see experiments/configs/sim_*.yaml:
  cluster:   {racks, servers_per_rack, gpus_per_server, server_link_bps, oversubscription,
              racks_per_pod (three-tier), pod_oversubscription, spines (ECMP paths)}
             or {hosts: topo.csv, gpus_per_server, ...} or {generate: fat-tree, k, ...}
             (two-tier, three-tier, fat-tree, rail-optimised; docs/topologies.md)
  routing: single|ecmp|crux   priority_levels: 8   mltcp: {slope, intercept, scale_cut}
  defrag: {migration_s: 9, cooldown_s: 300}
  network: windows (default: each group re-simulated per change) | continuous (one flow
           state stepped once through time; for thousands of jobs, docs/sim_speed.md)
           | packet (each window run in ns-3, rates scaled down; docs/packet_reference.md)
  workload:  {poisson: {jobs, load, gpus: {count: weight}, iterations: [lo, hi], models}}
             or {trace: FILE, format: F, bad_rows: error|skip}   (format detected if absent)
trace formats (cassini/sim/traces/<format>.py documents columns and assumptions):
  philly (cluster_job_log JSON), helios (cluster_log.csv), acme (trace_seren/kalos.csv),
  pai2020 (pai_job_table + pai_task_table), lingjun (job.csv + worker.csv),
  pollux (adaptdl workload CSV), tiresias (*_job.csv), csv (ours: job_id, arrival_s, gpus,
  iterations|duration_s, model[, hosts])
  schedulers: [themis, themis+cassini]    candidates: 10   seed: 0
  sweep:     {load: [...], seed: [...], scheduler: [...], oversubscription: [...]}

examples:
  cassini sim run experiments/configs/sim_paper.yaml --out results/sim
  cassini sim sweep experiments/configs/sim_paper.yaml --out results/sweep --workers 2
  cassini sim trace experiments/configs/sim_paper.yaml --out jobs.csv
  cassini sim trace convert cluster_job_log --format philly --out jobs.csv
  cassini sim topo show topo.csv --gpus-per-server 8     (host tables: docs/topologies.md)
  cat sim.yaml | cassini sim run - --out results/sim   (- : standard input; the files
    it names are found from the current folder, a config file's from its own folder)
"""


class _Help(argparse.RawDescriptionHelpFormatter):
    """The epilog as written, :data:`PARTS` replaced by the parts tables' entries."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if PARTS in text:
            from cassini.sim.parts import KINDS

            kinds = (f"    {kind}: {', '.join(table)}" for kind, table in KINDS.items())
            text = text.replace(PARTS, "\n".join(kinds))
        return super()._fill_text(text, width, indent)


def add_parser(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser(
        "sim",
        help="simulate a cluster: schedulers with and without CASSINI",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_Help,
    )
    ssub = sim.add_subparsers(dest="sim_command", required=True, metavar="SUBCOMMAND")
    run = ssub.add_parser(
        "run",
        help="simulate every scheduler of CONFIG on the same jobs",
        description="Simulate every scheduler of CONFIG on the same jobs; write "
        "results.json, cdf.png, the report's pictures (link_heatmap.png, link_timeline.png, "
        "slowdown_cdf.png, gpu_utilisation.png) and report.html (one static page, opens "
        "offline) under --out; print a table (or JSON with --format json).  results.json's "
        "fields, with their units: docs/sim_traces.md.",
        epilog=EPILOG,
        formatter_class=_Help,
    )
    sweep = ssub.add_parser(
        "sweep",
        help="run CONFIG's sweep grid in parallel (Ray if installed, else processes)",
        description="Run every point of CONFIG's sweep grid (all schedulers on the same "
        "jobs at each point) in parallel on Ray (local, or --address) or in a process "
        "pool; write sweep.json and sweep.png under --out.",
        epilog=EPILOG,
        formatter_class=_Help,
    )
    trace = ssub.add_parser(
        "trace",
        usage="cassini sim trace CONFIG --out FILE\n"
        "       cassini sim trace convert IN [--format F] [--strict] [--seed N]\n"
        "                                 [--profiles F ...] --out FILE",
        help="write CONFIG's jobs, or convert a published trace, as our CSV/JSON trace",
        description="`trace CONFIG --out F`: write the jobs CONFIG's workload generates. "
        "`trace convert IN --format FMT --out F`: read a published trace (philly, helios, "
        "acme, pai2020, lingjun, pollux, tiresias, csv; detected when --format is absent) "
        "and write our trace (F ends in .csv, or .json for a JSON array).  Bad rows are "
        "skipped, each reported as file:line:column, and counted (--strict: stop at the "
        "first, exit 2); a file not in the named format exits 2 saying what was expected.  "
        "--format, --strict, --seed and --profiles are convert's: given with CONFIG, exit 2.  "
        "Recorded run times are written as duration_s, seconds (docs/sim_traces.md).",
        epilog=EPILOG,
        formatter_class=_Help,
    )
    _add_topo(ssub)
    for p in (run, sweep):
        p.add_argument("config", type=input_file, help="configuration file (YAML/JSON; - stdin)")
        p.add_argument("--out", required=True, type=output_path, help="output directory")
    _add_trace_arguments(trace)
    for p in (run, sweep):
        p.add_argument(
            "--format",
            choices=("table", "json"),
            default="table",
            help="stdout: table for people (default) or JSON summary",
        )
        p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    run.add_argument(
        "--timeline-link",
        help="link whose timeline (which job sends when) the report draws: a link id, or "
        "a host name of the cluster for its link (default: the most congested)",
    )
    run.add_argument(
        "--scheduler",
        action="append",
        help="run only this scheduler (repeatable; default: the config's)",
    )
    sweep.add_argument(
        "--backend",
        choices=("auto", "ray", "pool"),
        default="auto",
        help="auto: Ray when installed (or --address given), else a pool",
    )
    sweep.add_argument("--address", help="Ray cluster address (default: a local Ray)")
    sweep.add_argument("--workers", type=files.int_in(1, MAX_WORKERS), metavar="N",
                       help=f"points run at once, 1..{MAX_WORKERS}, never more than the points: "
                       "pool processes (default: CPUs), or Ray tasks in flight (Ray keeps "
                       "its own CPUs)")  # fmt: skip


def _add_topo(ssub: argparse._SubParsersAction) -> None:
    """``cassini sim topo show``."""
    topo = ssub.add_parser(
        "topo",
        help="inspect a cluster topology (host table or config)",
        description="Inspect a topology: a host table (CSV: Lingjun topo.csv or ours) or a "
        "config's cluster (YAML/JSON).  See docs/topologies.md.",
    )
    tsub = topo.add_subparsers(dest="topo_command", required=True, metavar="SUBCOMMAND")
    show = tsub.add_parser(
        "show",
        help="hosts, GPUs, switches per tier, uplink oversubscription per ToR, irregularities",
        description="Print hosts, GPUs, switches and links per tier, uplink "
        "oversubscription per ToR and anything irregular (table, or --format json).  FILE "
        "may be - (stdin): a host table if its first line is a CSV header, else a config.",
    )
    # the defaults the reader uses (None here: a flag given beside its column is an error)
    from cassini.sim.topologies.hosts import DEFAULTS
    from cassini.sim.topologies.show import ASSUMED_GPUS_PER_SERVER

    show.add_argument("file", type=input_file, help="host table (CSV, whatever its name: a "
                      "first line with commas and no colon) or config (YAML/JSON); - for "
                      "stdin")  # fmt: skip
    show.add_argument("--format", choices=("table", "json"), default="table",
                      help="stdout: table for people (default) or JSON summary")  # fmt: skip
    show.add_argument("--json", dest="format", action="store_const", const="json",
                      help="the same as --format json")  # fmt: skip
    show.add_argument("--gpus-per-server", type=int,
                      help="GPUs per host of a host table without a gpus column (default "
                      f"{ASSUMED_GPUS_PER_SERVER}, assumed with a note)")  # fmt: skip
    show.add_argument("--server-link-bps", type=float,
                      help="host link, bits/s, where the table has no host_bps column "
                      f"(default {DEFAULTS['server_link_bps']:g})")  # fmt: skip
    show.add_argument("--oversubscription", type=float,
                      help="ToR downlinks / uplinks, where the table has no tor_uplink_bps "
                      f"column (default {DEFAULTS['oversubscription']:g})")  # fmt: skip
    show.add_argument("--pod-oversubscription", type=float,
                      help="aggregation downlinks / uplinks, where the table has an agg and "
                      "no agg_uplink_bps column (default "
                      f"{DEFAULTS['pod_oversubscription']:g})")  # fmt: skip


def _add_trace_arguments(trace: argparse.ArgumentParser) -> None:
    """``cassini sim trace CONFIG`` and ``trace convert IN``'s arguments."""
    trace.add_argument(
        "what", nargs="+", type=input_file, metavar="ARG", help="CONFIG, or: convert IN"
    )
    trace.add_argument("--out", required=True, type=output_path, help="trace file to write")
    trace.add_argument("--format", dest="trace_format", help="convert: the input's format")
    trace.add_argument("--strict", action="store_true", help="convert: stop at a bad row")
    trace.add_argument(
        "--seed", type=non_negative_int, help="convert: seed of the model rule, >= 0 (default 0)"
    )
    trace.add_argument(
        "--profiles",
        action="append",
        default=[],
        type=input_file,
        help="convert: extra profile JSON files",
    )


def main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from cassini.sim.config import check_schedulers, run_warnings
    from cassini.sim.traces.ours import write
    from cassini.sim.workload import check_trace_suffix

    if args.sim_command == "topo":
        from cassini.sim.topologies.show import main as topo_main

        return topo_main(args)
    try:
        if args.sim_command != "trace":
            cfg = _read_config(args.config)
            if args.sim_command == "run" and args.scheduler:
                check_schedulers(tuple(args.scheduler), "--scheduler")
                cfg = replace(cfg, schedulers=tuple(args.scheduler))
        out = Path(args.out)
        if args.sim_command == "trace":  # a file; run and sweep write a folder
            outputs.check_output_file(out)
        else:
            outputs.check_output_dir(out)
            for line in run_warnings(cfg):  # not errors; results.json has them too
                print(f"sim {args.sim_command}: {line}", file=sys.stderr)
        if args.sim_command == "trace":
            if args.what[0] == "convert":
                from cassini.sim.traces.convert import convert

                return convert(args, out)
            if len(args.what) != 1:
                raise InputError("trace", "give CONFIG, or: convert IN --format F --out FILE")
            _no_convert_options(args)
            from cassini.sim.report.run import CONVERT_LISTS, skipped_rows_line

            cfg = _read_config(args.what[0])
            workload = cfg.read_workload(cfg.library())
            line = skipped_rows_line(workload.summary, CONVERT_LISTS)
            if line:  # as sim run prints it
                print(line, file=sys.stderr)
            check_trace_suffix(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            write(workload.jobs, out)  # recorded run times as duration_s, as convert
            print(f"wrote {len(workload.jobs)} jobs to {out}", file=sys.stderr)
            return 0
        return _run(args, cfg, out) if args.sim_command == "run" else _sweep(args, cfg, out)
    except InputError as e:
        print(f"cassini sim: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"cassini sim: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # nothing half-written: outputs are staged (cassini.outputs)
        print("cassini sim: interrupted; nothing written", file=sys.stderr)
        return 130


def _read_config(path: str) -> SimConfig:
    """The config in ``path`` (``-``: stdin, its files named from the current folder); its
    drawn jobs bounded (:data:`~cassini.sim.workload.MAX_JOBS`) before a sweep's workers."""
    from cassini.sim.config import check_models, config_from_dict, read_config
    from cassini.sim.workload import check_job_count

    name = files.input_name(path)
    try:
        if path != files.STDIN:
            cfg = read_config(path)
        else:  # JSON is YAML too
            obj = files.parse_yaml(files.read_stdin(), name)
            cfg = check_models(config_from_dict(obj, base=Path(".")))
        if cfg.poisson is not None:
            check_job_count(cfg.poisson["jobs"])
    except InputError as e:
        raise e.in_file(name) from None
    return cfg


def _no_convert_options(args: argparse.Namespace) -> None:
    """``trace CONFIG``: InputError for an option only ``trace convert`` reads."""
    flags = (("--format", args.trace_format is not None), ("--strict", args.strict),
             ("--seed", args.seed is not None), ("--profiles", args.profiles))  # fmt: skip
    for flag, given in flags:
        if given:
            raise InputError(flag, "only with `trace convert IN`; CONFIG sets its own")


def _run(args: argparse.Namespace, cfg: SimConfig, out: Path) -> int:
    """``sim run``: every scheduler on the same jobs; results.json and report.html."""
    from cassini.sim.report import run as report

    progress = None if args.quiet else report.stderr_progress
    done = report.simulate_config(cfg, progress=progress, record=True)
    line = report.skipped_rows_line(done.workload.summary)
    if line:  # not progress: printed with --quiet too
        print(line, file=sys.stderr)
    data = report.write_run(
        cfg, done.results, out, run=done, timeline_link=args.timeline_link,
        config_path=args.config,
    )
    if args.format == "json":
        print(outputs.json_text({k: data[k] for k in ("summaries", "ratios")}))
    else:
        print(report.table(data["summaries"]))
        print(f"results: {out / 'results.json'}, report: {out / 'report.html'}")
    return 0


def _sweep(args: argparse.Namespace, cfg: SimConfig, out: Path) -> int:
    """``sim sweep``: the grid's points in parallel; sweep.json and sweep.png."""
    from cassini.sim.report import sweep

    try:  # an axis value the cluster cannot take: an error in the config's file
        lines = sweep.sweep_skipped_rows(cfg)
    except InputError as e:
        raise e.in_file(files.input_name(args.config)) from None
    for line in lines:  # not progress: printed with --quiet too
        print(line, file=sys.stderr)

    def tick(done: int, total: int) -> None:
        if not args.quiet:
            print(f"  sweep: {done}/{total} points done", file=sys.stderr, flush=True)

    rows, backend = sweep.run_sweep(
        cfg, backend=args.backend, address=args.address, workers=args.workers, progress=tick
    )
    data = sweep.write_sweep(cfg, rows, backend, out, config_path=args.config)
    if args.format == "json":
        print(outputs.json_text({k: data[k] for k in ("aggregate", "ratios", "backend")}))
    else:
        print(sweep.sweep_table(data))
        print(f"backend: {backend}; results: {out / 'sweep.json'}, plot: {out / 'sweep.png'}")
    return 0
