"""One experiment: every scheme of a config run one after another on the same jobs, each
on freshly built clusters, compared in one ``results.json``."""

from __future__ import annotations

import sys
import time
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from cassini.outputs import check_output_dir
from mltcp import variants
from testbed import fields
from testbed.net import TestbedError
from testbed.results import ExperimentResult
from testbed.run.config import ConfigError, RunConfig
from testbed.run.report import Progress
from testbed.run.schemes import SCHEMES, RunState
from testbed.run.session import available_congestion_controls, ensure_cc


def scheme_congestion_controls(cfg: RunConfig) -> dict[str, str]:
    """The congestion control each of ``cfg``'s schemes runs under, by scheme name."""
    return {s.name: SCHEMES[s.kind].congestion_control(cfg, s) for s in cfg.schemes}


class UnavailableCongestionControl(ConfigError, TestbedError):
    """A config's congestion control this kernel lacks: a config error naming the field
    (``cc`` or ``schemes[i].cc``; exit 2, as an unknown one), and a TestbedError."""


def check_congestion_controls(cfg: RunConfig, available: Collection[str] | None = None) -> None:
    """:class:`UnavailableCongestionControl` naming every scheme of ``cfg`` (and the
    field that chose it) whose congestion control the kernel lacks (``available``: the
    kernel's list, default read from ``/proc/sys/net/ipv4/tcp_available_congestion_control``)
    and that is not one of ours (``mltcp_*``, ``dctcp_bpf``:
    :func:`~testbed.run.session.ensure_cc` loads them).  :func:`run_experiment` calls it
    before its first scheme, so a missing control never leaves a results.json with only
    the schemes before it."""
    have = tuple(available_congestion_controls() if available is None else available)
    chosen = scheme_congestion_controls(cfg)
    missing = [
        (f"schemes[{i}].cc" if spec.cc else "cc", spec.name, chosen[spec.name])
        for i, spec in enumerate(cfg.schemes)
        if chosen[spec.name] not in have and variants.by_cc(chosen[spec.name]) is None
    ]
    if missing:
        where = ", ".join(dict.fromkeys(f for f, _, _ in missing))
        said = [f"scheme {n!r}: congestion control {cc!r} is not available" for _, n, cc in missing]
        raise UnavailableCongestionControl(
            where,
            f"{'; '.join(said)} (this kernel has: {' '.join(have)}; ours load on demand: "
            f"{', '.join(variants.CCS)}); no scheme ran",
        )


def run_experiment(
    cfg: RunConfig, out_dir: Path | str, progress: Progress | None = None
) -> ExperimentResult:
    """Run every scheme of ``cfg`` (those that run first, ``ideal``, first); write
    ``results.json`` after each.  Before the first: ``out_dir`` must be (made) a folder
    to write in (else an InputError naming it) and every scheme's congestion control
    must be available or ours, loaded here (else a TestbedError naming the schemes,
    :func:`check_congestion_controls`); ours stay loaded after the run, which
    ``progress`` hears when this run loaded them.  Each results.json but the last says
    ``"complete": false`` (an empty one is written before the first scheme, over an earlier
    run's); a run cut short (Ctrl-C, a failed scheme) keeps the last one and ``progress``
    hears so.  Log paths are absolute in the result returned, relative
    to ``out_dir`` in results.json."""
    out = Path(out_dir).absolute()  # the logs' paths do not depend on the cwd of a reader
    check_output_dir(out)
    for i, spec in enumerate(cfg.schemes):  # a config built in code skipped load_config
        fields.scheme_name(spec.name, f"schemes[{i}].name")
    check_congestion_controls(cfg)
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    for cc in sorted(set(scheme_congestion_controls(cfg).values())):
        ensure_cc(cc, say)  # ours loaded now (and left loaded, said so), not at their scheme
    out.mkdir(parents=True, exist_ok=True)
    # an earlier run's results.json in this folder says "complete" while this run writes
    # over its logs: an empty, incomplete one until the first scheme's
    ExperimentResult({}, cfg.raw, complete=False, folder=out).write(out / "results.json")
    state = RunState(cfg, out, say, profiles=dict(cfg.profiles) or None)
    order = sorted(cfg.schemes, key=lambda s: 0 if SCHEMES[s.kind].runs_first else 1)
    try:
        for n, spec in enumerate(order, 1):
            state.step = f"[{n}/{len(order)}]"
            say(f"{state.step} {spec.name}: {spec.kind} scheme")
            t0 = time.time()
            res = SCHEMES[spec.kind].run(state, spec)
            state.done[spec.name] = replace(res, duration_s=time.time() - t0)
            done = ExperimentResult(state.done, cfg.raw, complete=n == len(order), folder=out)
            done.write(out / "results.json")
    except BaseException:
        if state.done and len(state.done) < len(order):
            left = [s.name for s in order if s.name not in state.done]
            say(
                f'partial results kept: {out / "results.json"} ("complete": false; ran '
                f"{', '.join(state.done)}; not run: {', '.join(left)})"
            )
        raise
    return ExperimentResult(state.done, cfg.raw, folder=out)


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.experiment")
