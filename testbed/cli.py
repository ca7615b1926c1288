"""``testbed`` command line: run experiments on an emulated cluster, clean up after a
crashed run, print (or run) the same jobs on real GPU nodes."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from cassini.files import input_file, output_path

EXAMPLE = """\
example config (YAML):
  topology: {kind: dumbbell, pairs: 2, bottleneck_bps: 200000000,
             access_bps: 1000000000, fabric: fair}
  jobs:
    - {id: a, kind: synthetic, hosts: [h1, h3], compute_s: 0.05, bytes: 1250000,
       iterations: 40}
    - {id: b, kind: synthetic, hosts: [h2, h4], compute_s: 0.05, bytes: 1250000,
       iterations: 40}
  schemes: [baseline, cassini, ideal]

topology: kind dumbbell (pairs, bottleneck_bps, access_bps) or leaf_spine (leaves,
  spines, hosts_per_leaf, host_bps, oversubscription, routing fixed | hash (ECMP, keyed
  by ecmp_seed) | path (path selection)); fabric FABRIC_NAMES with
  buffer_packets and ecn_threshold_bytes.  A dumbbell with pairs: n names its hosts
  h1..h2n, left h1..hn.
jobs: id, kind (synthetic (default) | ddp | model), hosts, iterations (3 .. 1000000),
  compute_s, bytes (all-reduce size per iteration), shift (seconds or auto), jitter
  (fraction of compute), width/layers/batch (ddp), model/compute/calibration/scale/nic_bps
  (model), clock_offset_s (an error injected into the job's hosts' clocks, seconds),
  priority (prio: 0 highest .. 7; default Crux's rule, cassini.priority).
schemes: SCHEME_NAMES, or {scheme:, name: (a directory name under OUT), cc:}.
optional: cc (default cubic; dctcp_bpf on ecn; the kernel's or mltcp_*), seed, agent:
  {slack, drift_tolerance (0..1), jitter (stdev | robust | trimmed | none | room: how the held
  period's jitter slack is read), rerun_declined}, profile_iterations (3 .. 1000000), profile_source
  (auto | log | hook | pcap), profiles.
numbers: YAML reads 2e8 as a string; write 2.0e+8 or 200000000.
output: OUT/results.json (testbed.results.ExperimentResult): per scheme and job, iteration
  times, bytes and the workers' log paths (relative to OUT); the profiles measured and
  CASSINI's advice; "complete": false while (or if a run stopped before) every scheme ran.
  Each scheme's logs in OUT/<name>/ (ideal: OUT/<name>/<job>/).
"""


class _RunHelp(argparse.RawDescriptionHelpFormatter):
    """``testbed run --help``: the example with the fabric and scheme names of their
    tables, read only when the help is shown (the tables' modules take a while to load)."""

    def add_text(self, text: str | None) -> None:
        if text == EXAMPLE:
            from testbed.fabric import FABRICS
            from testbed.run.schemes import SCHEMES

            text = text.replace("FABRIC_NAMES", " | ".join(FABRICS))
            text = text.replace("SCHEME_NAMES", " | ".join(SCHEMES))
        super().add_text(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="testbed",
        description="Emulated GPU cluster (Mininet, Linux bridges, HTB-shaped links) running "
        "real TCP training jobs; compares placement/transport schemes in one run.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run an experiment config",
        epilog=EXAMPLE,
        formatter_class=_RunHelp,
    )
    run.add_argument("config", type=input_file, help="YAML (or JSON) experiment config")
    run.add_argument(
        "--out", default=None, type=output_path, help="output folder (default: a new temp dir)"
    )
    run.add_argument("--json", action="store_true", help="print results JSON on stdout")
    sub.add_parser(
        "cleanup",
        help="remove leftovers of crashed runs (only what we created)",
        description="Remove what crashed or interrupted runs left behind, only what a "
        "testbed run created: its hosts' shells, its bridges and their ports, the ECN "
        "marker's pins, and its jobs' cgroups (testbed-mltcp-*, testbed-prio-*; their "
        "processes killed first).  Runs still alive are left alone.  MLTCP's congestion "
        "controls, which `testbed run` loads when a scheme needs them, stay loaded: "
        "`mltcp unload` removes them.",
    )
    _add_launch(sub)
    _add_calibrate(sub)
    return parser


def _add_launch(sub: argparse._SubParsersAction) -> None:
    """The ``launch`` command: the same DDP job on real GPU nodes."""
    launch = sub.add_parser(
        "launch",
        help="print (or run over ssh) torchrun commands for real GPU nodes",
        description="Same DDP job on real GPU nodes: NCCL over sockets, chosen congestion "
        "control.  Dry run unless --run.  The commands run where `ssh NODE` starts (the "
        "login's home directory), which must hold a checkout of this repository (its "
        "testbed package and, for --priority, its ebpf/ folder).",
    )
    launch.add_argument("--nodes", required=True, help="comma-separated hostnames, first is master")
    launch.add_argument("--gpus-per-node", type=int, default=1, help="processes per node (>= 1)")
    launch.add_argument("--iterations", type=int, default=100)
    launch.add_argument("--width", type=int, default=1024)
    launch.add_argument("--layers", type=int, default=4)
    launch.add_argument(
        "--model", help="a real architecture (resnet50, vgg16, ...) instead of the MLP"
    )
    launch.add_argument(
        "--scale", type=float, default=1.0, help="parameter sizes x scale, in (0, 1]"
    )
    launch.add_argument(
        "--compute",
        choices=("replay", "cpu"),
        default="cpu",
        help="with --model: cpu (default) runs real forward and backward passes on each "
        "rank's device (the node's GPU under NCCL; the name comes from the emulated testbed, "
        "where that device is the CPU); replay sleeps the calibration's per-layer times",
    )
    launch.add_argument(
        "--cc",
        default="cubic",
        help="congestion control on the nodes: the kernel's (reno, cubic, bbr, dctcp, ...) "
        "or ours (mltcp_reno, mltcp_cubic, mltcp_dctcp, dctcp_bpf)",
    )
    launch.add_argument("--iface", default=None, help="NCCL_SOCKET_IFNAME")
    launch.add_argument(
        "--priority",
        type=int,
        choices=range(8),
        default=None,
        help="mark the job's sockets with this class's DSCP (0 highest .. 7), for switches "
        "with strict-priority queues (as the emulated prio fabric); builds and loads "
        "ebpf/dscp_mark.bpf.o relative to the node's ssh login directory",
    )
    launch.add_argument("--port", type=int, default=29500, help="rendezvous port (1..65535)")
    launch.add_argument("--shift-s", type=float, default=0.0, help="time-shift (s), < --period-s")
    launch.add_argument(
        "--period-s", type=float, default=0.0, help="the agent's period (s); 0: not held"
    )
    launch.add_argument(
        "--out", default="ddp.jsonl", type=output_path, help="per-rank log path on the nodes"
    )
    launch.add_argument("--run", action="store_true", help="run over ssh instead of printing")


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    """The ``calibrate`` command: a real model's per-layer compute times."""
    cal = sub.add_parser(
        "calibrate",
        help="measure a real model's per-layer compute times (the replay reads the file)",
        description="Per-layer forward/backward, optimizer step and iteration times of a real "
        "architecture on one device (medians after warm-up); progress on stderr.  A CPU "
        "calibration needs a stated scale (--gpu-iteration-s or --cpu-scale-factor, with "
        "--scale-note) before it stands for a GPU.",
    )
    cal.add_argument("--model", required=True, help="resnet50 | vgg16 | vgg11 | "
                     "wide_resnet101 | bert_base | gpt2")  # fmt: skip
    cal.add_argument("--batch", type=int, required=True, help="samples per iteration")
    cal.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    cal.add_argument("--out", required=True, type=output_path, help="calibration JSON to write")
    cal.add_argument("--repeats", type=int, default=20, help="measured iterations (median)")
    cal.add_argument("--warmup", type=int, default=5, help="iterations discarded first")
    cal.add_argument("--seq-len", type=int, default=None, help="tokens (language models, 128)")
    cal.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    cal.add_argument("--gpu-iteration-s", type=float, default=None,
                     help="CPU only: GPU-class iteration time (s) to scale to")  # fmt: skip
    cal.add_argument("--cpu-scale-factor", type=float, default=None,
                     help="CPU only: the factor itself")  # fmt: skip
    cal.add_argument("--scale-note", default="", help="where the scale comes from")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "calibrate":
        from testbed.calibrate import main_calibrate

        return main_calibrate(args, argv)
    if args.command == "cleanup":
        from testbed.net import cleanup

        removed = cleanup()
        print(f"removed {len(removed)} leftover(s)")
        return 0
    if args.command == "launch":
        from cassini.errors import InputError
        from testbed.launch import check_args, launch_commands, run_commands

        try:
            check_args(args)
            cmds = launch_commands(args)
        except InputError as e:
            print(f"testbed launch: error: {e}", file=sys.stderr)
            return 2
        if not args.run:
            for host, cmd in cmds:
                print(f"# {host}\n{cmd}")
            return 0
        return run_commands(cmds)
    from cassini.errors import InputError
    from cassini.outputs import check_output_dir, json_text
    from testbed import run  # run.run_experiment read at the call: tests replace it there
    from testbed.net import TestbedError
    from testbed.run import default_out_dir, format_table

    if args.out is not None:  # before the config is read and anything runs
        try:
            check_output_dir(args.out)
        except InputError as e:
            print(f"testbed run: error: --out: {e}", file=sys.stderr)
            return 2
    try:
        cfg = run.load_config(args.config)
        out = Path(args.out) if args.out else default_out_dir()
        results = run.run_experiment(cfg, out)
    except InputError as e:  # a ConfigError, or bad input met while running (it names it)
        print(f"testbed: config error: {e.in_file(args.config)}", file=sys.stderr)
        return 2
    except TestbedError as e:
        print(f"testbed: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("testbed: interrupted; the cluster was torn down", file=sys.stderr)
        return 130
    if args.json:  # log paths absolute: stdout has no folder to be relative to
        print(json_text(replace(results, folder=None).to_dict()))
    else:
        print(format_table(results))
        print(f"results: {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
