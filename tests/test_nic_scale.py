"""Issue 33 §0: profiles on the fabric they run on.  The rule (``cassini.nic_scale``),
the simulator's ``profiles:`` config key, and ``results.json`` naming the rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.errors import InputError
from cassini.nic_scale import MEASURED_NIC_BPS, _offset, nic_factor, scale_to_nic
from cassini.profile import JobProfile, Phase
from cassini.sim.config import config_from_dict
from cassini.sim.report.run import results_json, simulate_config
from cassini.sim.workload import load_library

LIBRARY = load_library()
REL = 1e-9


@st.composite
def profiles(draw: st.DrawFn) -> JobProfile:
    """A valid profile: 1-5 phases laid out in order with gaps (possibly none) between
    them, the last one possibly wrapping past the iteration's end."""
    n = draw(st.integers(1, 5))
    gaps = [draw(st.floats(0.0, 0.05)) for _ in range(n)]
    durations = [draw(st.floats(1e-4, 0.1)) for _ in range(n)]
    rates = [draw(st.floats(1e8, 5e10)) for _ in range(n)]
    tail = draw(st.floats(1e-4, 0.1))
    period = sum(gaps) + sum(durations) + tail
    shift = draw(st.floats(0.0, 0.999)) * period  # rotates the layout: may wrap
    phases, cursor = [], 0.0
    for gap, d, r in zip(gaps, durations, rates, strict=True):
        cursor += gap
        phases.append(Phase((cursor + shift) % period, d, r))
        cursor += d
    return JobProfile("j", period, tuple(phases))


LINKS = st.sampled_from([1e10, 2.5e10, 5e10, 1e11, 2e11, 4e11])


def wrap_end(p: JobProfile) -> float:
    """Where a phase that wraps past the iteration's end ends (s), else 0."""
    return max(0.0, max(q.end_s for q in p.phases) - p.iteration_time_s)


def starts_in_frame(p: JobProfile, origin: float) -> list[tuple[float, Phase]]:
    """The phases with their starts measured from ``origin`` (s), in that order."""
    return sorted((_offset(q.start_s, origin, p.iteration_time_s), q) for q in p.phases)


@settings(max_examples=200, deadline=None)
@given(profiles(), LINKS)
def test_bytes_are_kept(profile: JobProfile, link: float) -> None:
    scaled = scale_to_nic(profile, link)
    assert scaled.bits_per_iteration == pytest.approx(profile.bits_per_iteration, rel=REL)
    assert len(scaled.phases) == len(profile.phases)


@settings(max_examples=200, deadline=None)
@given(profiles(), st.sampled_from([5e10, 1e11, 2e11, 4e11]))
def test_a_faster_nic_never_lengthens_and_keeps_the_compute_bound(
    profile: JobProfile, link: float
) -> None:
    """On a NIC at least as fast: phases and the iteration no longer than measured; the
    iteration no shorter than measured less the last phase's saving (compute bound); no
    phase starts before it did as measured (its gradients are not ready earlier)."""
    f = link / MEASURED_NIC_BPS
    scaled = scale_to_nic(profile, link)
    assert scaled.iteration_time_s <= profile.iteration_time_s * (1 + REL)
    origin = wrap_end(profile)  # both measured from where the measured wrap ends
    old, new = starts_in_frame(profile, origin), starts_in_frame(scaled, origin)
    for (s0, p0), (s1, p1) in zip(old, new, strict=True):
        assert p1.duration_s == pytest.approx(p0.duration_s / f, rel=REL)
        assert p1.rate_bps == pytest.approx(p0.rate_bps * f, rel=REL)
        assert s1 == pytest.approx(s0, rel=1e-9, abs=1e-12)  # kept: none waits longer
    last = old[-1][1]
    bound = profile.iteration_time_s - last.duration_s * (1 - 1 / f)
    assert scaled.iteration_time_s >= bound * (1 - REL)
    compute = profile.iteration_time_s - sum(p.duration_s for p in profile.phases)
    assert (
        scaled.iteration_time_s - sum(p.duration_s for p in scaled.phases)
        >= compute * (1 - REL) - 1e-12
    )


@settings(max_examples=100, deadline=None)
@given(profiles(), st.sampled_from([1e10, 2.5e10]))
def test_a_slower_nic_lengthens(profile: JobProfile, link: float) -> None:
    scaled = scale_to_nic(profile, link)
    assert scaled.iteration_time_s >= profile.iteration_time_s * (1 - REL)
    assert scaled.peak_rate_bps < profile.peak_rate_bps


@given(profiles())
def test_the_measured_nic_is_the_identity(profile: JobProfile) -> None:
    assert scale_to_nic(profile, MEASURED_NIC_BPS) == profile


def test_vgg16_on_200_gbit_links() -> None:
    """By hand: vgg16's phases at 4x their rate; its last phase (0.0885 s) now lasts a
    quarter as long and the iteration is that much shorter; the first phase's saving
    becomes compute-bound waiting before the second."""
    vgg = LIBRARY["vgg16"]
    scaled = scale_to_nic(vgg, 2e11)
    first, last = vgg.phases[0], vgg.phases[-1]
    assert [p.start_s for p in scaled.phases] == pytest.approx([first.start_s, last.start_s])
    assert scaled.iteration_time_s == pytest.approx(vgg.iteration_time_s - 0.75 * last.duration_s)


def test_nic_factor_is_the_testbed_scale() -> None:
    """The testbed's default tensor scale for a 200 Mbit/s link standing for a 50 Gbit/s
    NIC is the same ratio."""
    assert nic_factor(2e8, 5e10) == pytest.approx(0.004)
    with pytest.raises(ValueError):
        nic_factor(0.0)


# -- the config key -----------------------------------------------------------------------
BASE = {
    "cluster": {
        "racks": 2,
        "servers_per_rack": 2,
        "gpus_per_server": 4,
        "server_link_bps": 2e11,
        "oversubscription": 2,
    },
    "workload": {
        "poisson": {
            "jobs": 4,
            "load": 1.0,
            "gpus": {4: 1, 8: 1},
            "iterations": [20, 30],
            "models": ["vgg16", "bert"],
        }
    },
    "schedulers": ["ideal", "themis"],
}


@pytest.mark.parametrize(
    ("value", "rule", "files"),
    [
        (None, "scale-to-nic", 0),
        ("scale-to-nic", "scale-to-nic", 0),
        ("as-measured", "as-measured", 0),
        (["extra.json"], "scale-to-nic", 1),
        ({"rule": "as-measured", "files": ["extra.json"]}, "as-measured", 1),
    ],
)
def test_profiles_key(value: object, rule: str, files: int) -> None:
    obj = dict(BASE) if value is None else {**BASE, "profiles": value}
    cfg = config_from_dict(obj)
    assert cfg.options.profiles == rule
    assert len(cfg.profiles) == files


@pytest.mark.parametrize("value", ["scale_to_nic", "measured", {"rule": "x"}, {"files": 3}])
def test_a_bad_profiles_value_names_the_field(value: object) -> None:
    with pytest.raises(InputError) as e:
        config_from_dict({**BASE, "profiles": value})
    assert e.value.field.startswith("profiles")


def test_cli_exits_2_naming_profiles(tmp_path: Path) -> None:
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump({**BASE, "profiles": "fast"}))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cassini.cli",
            "sim",
            "run",
            str(tmp_path / "sim.yaml"),
            "--out",
            str(tmp_path / "out"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "profiles" in out.stderr and "Traceback" not in out.stderr


def test_results_name_the_rule_and_scaling_shortens_jobs() -> None:
    """Same workload and seed on 200 Gbit/s links: results.json says which rule ran, and
    under scale-to-nic every job's dedicated iteration is at most the library's (the
    links are 4x the measured NICs) and below it for vgg16."""
    runs = {}
    for rule in ("scale-to-nic", "as-measured"):
        cfg = config_from_dict({**BASE, "profiles": rule})
        done = simulate_config(cfg)
        data = json.loads(json.dumps(results_json(cfg, done.results, done.workload.summary)))
        assert data["profiles"] == rule
        runs[rule] = {j["job_id"]: j for j in data["jobs"]["ideal"]}
    assert runs["scale-to-nic"].keys() == runs["as-measured"].keys()
    for job_id, scaled in runs["scale-to-nic"].items():
        measured = runs["as-measured"][job_id]
        assert measured["dedicated_iteration_s"] == LIBRARY[measured["model"]].iteration_time_s
        assert scaled["dedicated_iteration_s"] <= measured["dedicated_iteration_s"]
        if scaled["model"] == "vgg16":
            assert scaled["dedicated_iteration_s"] < 0.8 * measured["dedicated_iteration_s"]


def test_a_phase_starting_where_the_wrap_ends_stays_first():
    """Hypothesis found it (2026-11-28): the wrapping phase ends where the first begins,
    and ``(start - wrap end) % period`` rounded to just under a period, so the first
    phase sorted last and a 2x NIC made the iteration 12 % longer."""
    period, b_start, b_duration = 0.2614091437700534, 0.22818137147433326, 0.07160848715200356
    a_start = 0.03838071485628336  # B's wrap ends 5.6e-17 s later: the same instant
    profile = JobProfile("j", period, (Phase(a_start, 0.06, 1e8), Phase(b_start, b_duration, 1e8)))
    scaled = scale_to_nic(profile, 1e11)
    assert scaled.iteration_time_s <= period
    assert scaled.iteration_time_s == pytest.approx(period - b_duration / 2, rel=1e-9)


def test_python_and_config_defaults_agree_and_on_link_applies_the_rule() -> None:
    """``SimOptions()`` and a config without ``profiles:`` both run scale-to-nic; the one
    rule (``on_link``) scales under it, leaves the profile alone under as-measured and
    refuses an unknown rule."""
    from cassini.nic_scale import DEFAULT_PROFILE_RULE, on_link
    from cassini.sim.options import SimOptions

    assert SimOptions().profiles == config_from_dict(BASE).options.profiles
    assert SimOptions().profiles == DEFAULT_PROFILE_RULE == "scale-to-nic"
    vgg = load_library()["vgg16"]
    assert on_link(vgg, 2e11) == scale_to_nic(vgg, 2e11) != vgg
    assert on_link(vgg, 2e11, "as-measured") is vgg
    with pytest.raises(ValueError, match="profiles rule"):
        on_link(vgg, 2e11, "line-rate")
