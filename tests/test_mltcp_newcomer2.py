"""MLTCP's reference model and parameters (a reviewer's report, 2026-11-29), without root
and without this host's kernel (``mltcp`` runs against tests/test_mltcp_cli.py's fake):

1. the convergence experiment models the policy the parameters and the control call for
   (``mltcp.model.policy_of``: the default ``scale_cut`` on ``mltcp_dctcp`` shares as F**2),
   in the sweep and in each run's model, and results.json names it;
2. a positive slope, intercept or idle gap under half the kernel's step is refused by
   ``MltcpParams`` itself, so the CLI, a testbed scheme and the library alike, and the
   message says what the kernel would store (an intercept: 1/1024, not 0);
3. ``mltcp load``/``set`` report slope + intercept as the sum of the values that would be
   used (the loaded or default one beside the one given), not of a placeholder's.

(4, the ratio over the whole u64 domain in C and Python: tests/test_mltcp_policy.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_mltcp_cli import kernel, mltcp, one_line  # noqa: F401 (kernel: a fixture)

from experiments import mltcp_convergence
from mltcp import cli, model, policy
from mltcp.admin.params import params_from
from mltcp.policy import MltcpOptions, MltcpParams


# -- 1. the model's policy ----------------------------------------------------------------
@pytest.mark.parametrize(
    "cc, scale_cut, expected",
    [
        ("mltcp_dctcp", True, "mltcp-scale-cut"),
        ("mltcp_dctcp", False, "mltcp"),
        ("mltcp_reno", True, "mltcp"),  # scale_cut is mltcp_dctcp's alone
        ("mltcp_cubic", True, "mltcp-cubic"),
        ("mltcp_cubic", False, "mltcp-cubic"),
        ("dctcp_bpf", True, "fair"),
        ("cubic", True, "fair"),
    ],
)
def test_the_model_policy_follows_the_control_and_its_parameters(cc, scale_cut, expected):
    assert model.policy_of(cc, MltcpParams(scale_cut=scale_cut)) == expected
    assert expected in model.POLICIES


def two_jobs_from(offset: float, policy_name: str, iterations: int) -> int:
    """Iterations the fluid model takes to interleave two 50 ms + 50 ms jobs started
    ``offset`` of a phase apart, at MLTCP's defaults, under ``policy_name``."""
    c = np.full((1, 2), 0.05)
    p = MltcpParams()
    r = model.simulate(
        c, c, np.array([[0.0, offset * 0.05]]), iterations, policy_name, p.slope, p.intercept
    )
    return int(r.iterations_to_interleave()[0])


def test_the_sweep_models_the_defaults_scale_cut_and_says_so():
    """It modelled the paper's rule (share ~ F) at the defaults, whose scale_cut on
    mltcp_dctcp shares as F**2: 5 iterations where the kernel's rule takes 3."""
    s = mltcp_convergence.sweep(iterations=30)
    d = s["defaults"]
    assert d["iterations_to_interleave"] == two_jobs_from(d["offset"], "mltcp-scale-cut", 30)
    assert (s["cc"], s["policy"]) == ("mltcp_dctcp", "mltcp-scale-cut")
    # the two rules differ here, so the count says which one was modelled
    assert two_jobs_from(d["offset"], "mltcp", 30) != d["iterations_to_interleave"]
    assert "mltcp_dctcp modelled as policy mltcp-scale-cut" in mltcp_convergence.sweep_summary(s)


def test_a_runs_model_uses_the_policy_of_its_control_and_loaded_parameters():
    logs = {"a": [{"comm_start": 0.0}], "b": [{"comm_start": 0.005}]}
    entry = {"comm_s": 0.05, "compute_s": 0.05}
    for cc, params, expected in [
        ("mltcp_dctcp", MltcpParams(), "mltcp-scale-cut"),
        ("mltcp_dctcp", MltcpParams(scale_cut=False), "mltcp"),
        ("mltcp_cubic", MltcpParams(), "mltcp-cubic"),
    ]:
        got, name = mltcp_convergence.model_of_run(logs, cc, entry, 12, params)
        assert name == got["policy"] == expected
        direct = mltcp_convergence.model_run([0.0, 0.005], 0.05, 0.05, 12, params, expected)
        assert got["offsets"] == direct["offsets"]


# -- 2. the kernel's resolution, in MltcpParams -------------------------------------------
@pytest.mark.parametrize(
    "name, value, stored",
    [
        ("slope", 0.0004, "stored as 0"),
        ("idle_ms", 0.0004, "stored as 0"),
        ("intercept", 0.0004, "stored as 1/1024"),
    ],
)
def test_a_value_under_the_kernels_resolution_is_refused_by_the_parameters(name, value, stored):
    p = MltcpParams(**{name: value})  # a real-number rule (the simulator takes it as stored)
    with pytest.raises(ValueError, match=rf"^{name} {value} is under the kernel's resolution"):
        p.check_stored()
    with pytest.raises(ValueError, match=stored):
        p.check_stored()
    # the testbed's path: a scheme's options over the loaded parameters
    if name != "idle_ms":
        with pytest.raises(ValueError, match=f"^{name} {value}"):
            MltcpOptions(**{name: value}).over(MltcpParams())
    MltcpParams(**{name: 1 / 1024 if name != "idle_ms" else 0.001}).check_stored()  # 1 step


def test_the_library_refuses_it_before_writing_anything(kernel):  # noqa: F811
    """admin.set_params stored idle_us 0, which status then read back as 1 µs."""
    from mltcp import admin
    from mltcp.admin.params import read_config

    admin.load("reno")
    before = kernel.snapshot()
    with pytest.raises(ValueError, match="idle_ms 0.0004 is under"):
        admin.set_params(MltcpParams(idle_ms=0.0004))
    with pytest.raises(ValueError, match="slope 0.0004 is under"):
        admin.load("cubic", MltcpParams(slope=0.0004))
    assert kernel.snapshot() == before and read_config() == MltcpParams().fixed()


def test_the_cli_says_what_an_intercept_under_the_resolution_would_be_stored_as():
    problem = cli.bad_argument(cli.build_parser().parse_args(["load", "--intercept", "0.0004"]))
    assert problem is not None and problem.startswith("--intercept 0.0004 ")
    assert "stored as 1/1024" in problem and "stored as 0" not in problem
    assert MltcpParams(intercept=0.0004 * 2).fixed()[1] == 1  # a step from half one: kept


@given(
    slope=st.floats(0, 8),
    intercept=st.floats(1e-6, 8),
    idle_ms=st.floats(1e-6, 100),
)
def test_parameters_the_kernel_takes_are_stored_as_themselves(slope, intercept, idle_ms):
    """Whatever check_stored passes, the kernel stores non-zero where it was (no slope or
    idle gap lost to 0; the idle gap read back as what was stored, not as 1 µs); what it
    refuses is under half a step."""
    p = MltcpParams(slope, intercept, idle_ms)
    try:
        p.check_stored()
    except ValueError as e:
        assert "under the kernel's resolution" in str(e)
        given = {"slope": slope, "intercept": intercept, "idle_ms": idle_ms}
        assert any(0 < v * policy.SCALE[n] <= 0.5 for n, v in given.items())
        return
    slope_q, intercept_q, idle_us, _, _ = p.fixed()
    assert (slope_q > 0) == (slope > 0) and intercept_q > 0 and idle_us > 0
    back = params_from(p.fixed())
    assert back.fixed() == p.fixed() and back.idle_ms == idle_us / 1000


def test_a_testbed_scheme_under_the_resolution_is_a_config_error_naming_it():
    from testbed.run.config import ConfigError
    from testbed.run.load import load_config

    topology = {
        "kind": "dumbbell",
        "pairs": 2,
        "bottleneck_bps": 200_000_000,
        "access_bps": 1_000_000_000,
        "fabric": "ecn",
    }
    jobs = [
        {
            "id": j,
            "kind": "synthetic",
            "hosts": hosts,
            "compute_s": 0.05,
            "bytes": 1_250_000,
            "iterations": 4,
        }
        for j, hosts in (("a", ["h1", "h3"]), ("b", ["h2", "h4"]))
    ]
    for key in ("slope", "intercept"):
        raw = {"topology": topology, "jobs": jobs, "schemes": [{"scheme": "mltcp", key: 0.0004}]}
        with pytest.raises(ConfigError, match=rf"schemes\[0\].*{key} 0.0004 is under"):
            load_config(raw)


# -- 3. the sum that is reported ------------------------------------------------------------
def test_load_reports_the_sum_of_the_slope_given_and_the_intercept_used(kernel, capsys):  # noqa: F811
    code, out, err = mltcp(capsys, "load", "--slope", "64")  # nothing loaded: intercept 1
    assert (code, out) == (2, "")
    assert one_line(err).endswith("--slope + --intercept must be <= 64, got 64 + 1 = 65")
    assert mltcp(capsys, "load", "--intercept", "4")[0] == 0
    code, _, err = mltcp(capsys, "load", "--slope", "61")
    assert code == 2 and one_line(err).endswith("got 61 + 4 = 65")
    code, _, err = mltcp(capsys, "set", "--slope", "60.5")
    assert code == 2 and one_line(err).endswith("got 60.5 + 4 = 64.5")


def test_params_report_the_real_sum_before_touching_the_kernel(monkeypatch):
    monkeypatch.setattr(cli, "_loaded_or_defaults", lambda: MltcpParams())
    args = cli.build_parser().parse_args(["load", "--slope", "64"])
    with pytest.raises(ValueError, match=r"got 64 \+ 1 = 65$"):
        cli._params(args)
    assert policy.RULE_MAX == 64
