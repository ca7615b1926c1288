"""Testbed runs as objects: one config (:mod:`~testbed.run.config`), the schemes it
compares (:mod:`~testbed.run.schemes`, one class each in ``SCHEMES``), each scheme's jobs
on a freshly built emulated cluster (:mod:`~testbed.run.session`), CASSINI's plan
(:mod:`~testbed.run.planning`) from what the ideal runs measured
(:mod:`~testbed.run.profiles`), and the experiment that runs them all
(:mod:`~testbed.run.experiment`).

Returns a :class:`testbed.results.ExperimentResult`; ``DIR/results.json`` holds its
``to_dict()``: ``{"schemes": {name: {"jobs": {job: {"iteration_times_s", "bytes", "logs",
...}}, "summary": {job: {"mean_s", "p50_s", "p99_s"}}, ...}}, "config": ..., "complete":
true}`` (``false`` until every scheme ran), log paths relative to ``DIR``.
"""

from testbed.run.config import ConfigError, RunConfig, SchemeSpec, TestbedJob
from testbed.run.experiment import run_experiment
from testbed.run.load import load_config
from testbed.run.report import default_out_dir, format_table

__all__ = [
    "ConfigError",
    "RunConfig",
    "SchemeSpec",
    "TestbedJob",
    "default_out_dir",
    "format_table",
    "load_config",
    "run_experiment",
]
