"""One experiment: every scheme of a config run one after another on the same jobs, each
on freshly built clusters, compared in one ``results.json``."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from testbed.results import ExperimentResult
from testbed.run.config import RunConfig
from testbed.run.report import Progress
from testbed.run.schemes import SCHEMES, RunState


def run_experiment(
    cfg: RunConfig, out_dir: Path | str, progress: Progress | None = None
) -> ExperimentResult:
    """Run every scheme of ``cfg`` (those that run first, ``ideal``, first); write
    ``results.json`` after each."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    state = RunState(cfg, out, say, profiles=dict(cfg.profiles) or None)
    order = sorted(cfg.schemes, key=lambda s: 0 if SCHEMES[s.kind].runs_first else 1)
    for n, spec in enumerate(order, 1):
        state.step = f"[{n}/{len(order)}]"
        say(f"{state.step} {spec.name}: {spec.kind} scheme")
        t0 = time.time()
        res = SCHEMES[spec.kind].run(state, spec)
        state.done[spec.name] = replace(res, duration_s=time.time() - t0)
        ExperimentResult(state.done, cfg.raw).write(out / "results.json")
    return ExperimentResult(state.done, cfg.raw)
