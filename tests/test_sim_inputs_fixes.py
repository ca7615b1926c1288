"""Review 55 of ``cassini sim`` inputs: user profile files and the NIC they were measured
on, a trace row larger than the cluster, and ``topo show`` of a host table without GPUs.

Configs copied from /tmp/rev55/sim (prof.yaml, trace3.yaml + jobs3.csv)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cassini.errors import InputError
from cassini.nic_scale import MEASURED_NIC_BPS, on_link, scale_to_nic
from cassini.profile import JobProfile, Phase
from cassini.sim.config import config_from_dict, run_warnings
from cassini.sim.traces import BadRow, read
from cassini.sim.workload import load_library

ROOT = Path(__file__).resolve().parents[1]

# one phase of 30 ms at 0.8 Gbit/s in a 100 ms iteration: measured on a 1 Gbit/s NIC
PROFILE = JobProfile("slow", 0.1, (Phase(0.06, 0.03, 8e8),))


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cassini.cli", "sim", *args],
        capture_output=True, text=True, timeout=300, input=stdin,
    )  # fmt: skip


def profile_file(tmp_path: Path, name: str, nic_bps: object | None) -> Path:
    obj = PROFILE.to_dict()
    if nic_bps is not None:
        obj["provenance"] = {"source": "cassini profile", "nic_bps": nic_bps}
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def sim_config(profiles: object, link_bps: float = 1e9) -> dict:
    """prof.yaml's shape, small: one model, ideal (each job alone: its dedicated pace)."""
    return {
        "cluster": {
            "racks": 2, "servers_per_rack": 3, "gpus_per_server": 1, "server_link_bps": link_bps
        },
        "profiles": profiles,
        "workload": {
            "poisson": {"jobs": 3, "load": 0.5, "gpus": {2: 1}, "iterations": [5, 10],
                        "models": ["slow"]}
        },
        "schedulers": ["ideal"],
    }  # fmt: skip


# -- 1. a profile file's provenance.nic_bps -------------------------------------------------
@pytest.mark.parametrize("nic_bps", [1e9, 1e11])
def test_a_profile_file_is_scaled_from_its_own_nic(tmp_path: Path, nic_bps: float) -> None:
    """A file measured at ``nic_bps`` on links of that rate is the identity under
    scale-to-nic (it was rescaled as if measured at 50 Gbit/s: 0.1 s became 1.57 s on
    1 Gbit/s links), and on 2x links it is ``scale_to_nic`` from ``nic_bps``."""
    path = profile_file(tmp_path, "slow.json", nic_bps)
    lib = load_library([path])
    same = on_link(lib["slow"], nic_bps, "scale-to-nic")
    assert (same.iteration_time_s, same.phases) == (PROFILE.iteration_time_s, PROFILE.phases)
    fast = on_link(lib["slow"], 2 * nic_bps, "scale-to-nic")
    expect = scale_to_nic(PROFILE, 2 * nic_bps, nic_bps)
    assert (fast.iteration_time_s, fast.phases) == (expect.iteration_time_s, expect.phases)
    assert on_link(lib["slow"], 2 * nic_bps, "as-measured").phases == PROFILE.phases


def test_a_config_run_keeps_a_profile_measured_on_its_links(tmp_path: Path) -> None:
    from cassini.sim.report.run import simulate_config

    profile_file(tmp_path, "slow.json", 1e9)
    cfg = config_from_dict(sim_config(["slow.json"]), base=tmp_path)
    done = simulate_config(cfg)
    for job in done.results["ideal"].jobs:
        assert job.dedicated_iteration_s == pytest.approx(PROFILE.iteration_time_s, rel=1e-9)
    assert not [w for w in run_warnings(cfg) if "nic_bps" in w]


@pytest.mark.parametrize("bad", [0, -1e9, "fast", True])
def test_a_bad_provenance_nic_bps_names_the_field(tmp_path: Path, bad: object) -> None:
    path = profile_file(tmp_path, "slow.json", bad)
    with pytest.raises(InputError) as e:
        load_library([path])
    assert e.value.field.endswith("provenance.nic_bps") and str(path) in e.value.field


WARNING = (
    "profile 'slow' ({path}) has no provenance.nic_bps: taken as measured at 50 Gbit/s "
    "(rule scale-to-nic); give rule: as-measured to keep its rates, or write "
    "it with `cassini profile --nic-bps`"
)


def test_a_profile_file_without_nic_bps_is_warned_about(tmp_path: Path) -> None:
    path = profile_file(tmp_path, "slow.json", None)
    cfg = config_from_dict(sim_config(["slow.json"]), base=tmp_path)
    assert WARNING.format(path=path) in run_warnings(cfg)
    kept = config_from_dict(
        sim_config({"rule": "as-measured", "files": ["slow.json"]}), base=tmp_path
    )
    assert not [w for w in run_warnings(kept) if "nic_bps" in w]
    # and it is still taken as measured at 50 Gbit/s (documented, not changed)
    scaled = on_link(load_library([path])["slow"], 1e9, "scale-to-nic")
    assert scaled.phases == scale_to_nic(PROFILE, 1e9, MEASURED_NIC_BPS).phases
    # the README's profile rules say it (they said only "scale-to-nic")
    readme = (ROOT / "README.md").read_text()
    rules = next(line for line in readme.splitlines() if "`profiles: scale-to-nic`" in line)
    assert "provenance.nic_bps" in rules and "warning" in rules


def test_cli_run_warns_on_stderr_and_in_results_json(tmp_path: Path) -> None:
    path = profile_file(tmp_path, "slow.json", None)
    (tmp_path / "prof.yaml").write_text(yaml.safe_dump(sim_config(["slow.json"])))
    out = tmp_path / "out"
    done = cli("run", str(tmp_path / "prof.yaml"), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    line = WARNING.format(path=path)
    assert f"sim run: {line}" in done.stderr.splitlines()
    assert line in json.loads((out / "results.json").read_text())["warnings"]


# -- 2. a trace row larger than the cluster --------------------------------------------------
JOBS3 = "job_id,arrival_s,gpus,iterations,model\na,0,2,100,ResNet-50\nc,1,20,100,gpt2\n"
THREE_TIER = {"generate": "three-tier", "racks": 3, "servers_per_rack": 3, "racks_per_pod": 3,
              "gpus_per_server": 1}  # fmt: skip


def trace_config(tmp_path: Path, bad_rows: str) -> Path:
    (tmp_path / "jobs3.csv").write_text(JOBS3)
    path = tmp_path / "trace3.yaml"
    path.write_text(yaml.safe_dump({
        "cluster": THREE_TIER, "workload": {"trace": "jobs3.csv", "bad_rows": bad_rows},
        "schedulers": ["themis"],
    }))  # fmt: skip
    return path


def test_a_trace_row_too_large_is_a_skipped_bad_row(tmp_path: Path) -> None:
    cfg = config_from_dict(yaml.safe_load(trace_config(tmp_path, "skip").read_text()), tmp_path)
    got = cfg.read_workload(cfg.library())
    assert [j.job_id for j in got.jobs] == ["a"]
    assert got.summary["bad_rows"] == 1
    (bad,) = got.summary["bad_row_examples"]
    assert re.fullmatch(r".*jobs3\.csv:3:3: gpus: 20 GPUs, the cluster has 9", bad), bad


def test_a_trace_row_too_large_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    cfg = config_from_dict(yaml.safe_load(trace_config(tmp_path, "error").read_text()), tmp_path)
    with pytest.raises(BadRow, match=r"jobs3\.csv:3:3: gpus: 20 GPUs, the cluster has 9"):
        cfg.read_workload(cfg.library())


def test_cli_skips_the_row_too_large_and_runs(tmp_path: Path) -> None:
    done = cli("run", str(trace_config(tmp_path, "skip")), "--out", str(tmp_path / "o"),
               "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "jobs3.csv:3:3: gpus: 20 GPUs, the cluster has 9" in done.stderr
    done = cli("run", str(trace_config(tmp_path, "error")), "--out", str(tmp_path / "p"),
               "--quiet")  # fmt: skip
    assert done.returncode == 2
    assert "jobs3.csv:3:3: gpus: 20 GPUs, the cluster has 9" in done.stderr


def test_a_published_format_names_its_own_gpu_column(tmp_path: Path) -> None:
    """Tiresias: ``num_gpu`` (column 2) of the row asking for 8 GPUs on a 4-GPU cluster."""
    src = ROOT / "tests/data/traces/tiresias/8_job.csv"
    lines = src.read_text().splitlines()
    big = next(i for i, line in enumerate(lines) if i and int(line.split(",")[1]) > 4)
    got = read(src, load_library(), format="tiresias", strict=False, max_gpus=4)
    assert got.bad and all(int(b.problem.split()[0]) > 4 for b in got.bad)
    assert (got.bad[0].line, got.bad[0].column, got.bad[0].field) == (big + 1, 2, "num_gpu")
    assert all(j.gpus <= 4 for j in got.jobs)
    assert read(src, load_library(), format="tiresias").jobs  # no cluster: no check


# -- 3. topo show of a host table without GPUs --------------------------------------------
def test_topo_show_assumes_gpus_and_the_docs_say_so_where_run_refuses(tmp_path: Path) -> None:
    """``sim run`` refuses a host table without GPUs; ``topo show`` (inspecting the
    fabric) shows it with 8 per host and a note.  docs/topologies.md's parameter table
    says both (it said only "required")."""
    table = "host,tor\nh1,t1\n"
    shown = cli("topo", "show", "-", stdin=table)
    assert shown.returncode == 0, shown.stderr
    assert "gpus_per_server 8 assumed" in shown.stdout
    (tmp_path / "t.csv").write_text(table)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({
        "cluster": {"hosts": "t.csv"},
        "workload": {"poisson": {"jobs": 1, "load": 0.5, "gpus": {1: 1}}},
        "schedulers": ["themis"],
    }))  # fmt: skip
    run = cli("run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "o"), "--quiet")
    assert run.returncode == 2 and "cluster.gpus_per_server: required" in run.stderr
    docs = (ROOT / "docs/topologies.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `gpus_per_server` |"))
    assert "topo show" in row and "8" in row and "note" in row
