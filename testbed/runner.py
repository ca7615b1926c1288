"""The experiment runner's former home, kept so that existing imports work: the runner is
the :mod:`testbed.run` package (config, schemes, session, planning, profiles, report).

Job kinds: ``synthetic`` (sleep, then a TCP ring all-reduce of ``bytes``), ``ddp`` (a
small MLP under PyTorch DDP), ``model`` (a real architecture under PyTorch DDP: ResNet-50,
VGG, BERT, GPT-2 ..., compute replayed from a calibration file, gradients real; see
:mod:`testbed.replay`).  Schemes: :mod:`testbed.run.schemes`.
"""

from __future__ import annotations

from collections.abc import Mapping

from testbed.results import SchemeResult
from testbed.run.config import (
    DEFAULT_NIC_BPS,
    JOB_KINDS,
    PROFILE_SOURCES,
    ConfigError,
    RunConfig,
    SchemeSpec,
    TestbedJob,
)
from testbed.run.experiment import run_experiment
from testbed.run.load import load_config
from testbed.run.planning import agent_periods, max_link_load
from testbed.run.profiles import ddp_bucket_profile as _profile_from_buckets
from testbed.run.profiles import iteration_jitter, payload_efficiency
from testbed.run.report import Progress, default_out_dir, format_table
from testbed.run.schemes import SCHEMES
from testbed.run.session import BASE_PORT

SCHEME_KINDS = tuple(SCHEMES)


def _cc(cfg: RunConfig, scheme: SchemeSpec) -> str:
    """The congestion control ``scheme`` runs under."""
    return SCHEMES[scheme.kind].congestion_control(cfg, scheme)


def _same_schedule(
    cfg: RunConfig,
    scheme: SchemeSpec,
    shifts: Mapping[str, float],
    periods: Mapping[str, float],
    done: Mapping[str, SchemeResult],
) -> SchemeResult | None:
    """:func:`testbed.run.planning.same_schedule` on ``scheme``'s congestion control."""
    from testbed.run.planning import same_schedule

    return same_schedule(cfg, _cc(cfg, scheme), shifts, periods, done)


__all__ = [
    "BASE_PORT",
    "DEFAULT_NIC_BPS",
    "JOB_KINDS",
    "PROFILE_SOURCES",
    "SCHEME_KINDS",
    "ConfigError",
    "Progress",
    "RunConfig",
    "SchemeSpec",
    "TestbedJob",
    "_profile_from_buckets",
    "agent_periods",
    "default_out_dir",
    "format_table",
    "iteration_jitter",
    "load_config",
    "max_link_load",
    "payload_efficiency",
    "run_experiment",
]
