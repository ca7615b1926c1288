"""``trace convert``'s output reproduces the direct read of a trace on any cluster (recorded
run times written as ``duration_s``); one outlier submission date is the bad row, not every
other row; the model-rule counts of the assumptions count only the jobs kept."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cassini import cli
from cassini.sim.config import config_from_dict
from cassini.sim.traces import BadRow, read
from cassini.sim.workload import load_library

LIBRARY = load_library()
HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
)


def helios_row(job: str, gpus: int, submit: str, duration: int = 3600) -> str:
    return (
        f"{job},u,vc,{gpus},1,1,COMPLETED,{submit},2020-06-09 18:41:01,"
        f"2020-06-09 19:41:01,{duration},0\n"
    )


def config(trace: str, fmt: str, link_bps: float = 1e10) -> dict:
    return {
        "name": "d",
        "cluster": {"racks": 2, "servers_per_rack": 2, "gpus_per_server": 2,
                    "server_link_bps": link_bps},
        "workload": {"trace": trace, "format": fmt},
        "schedulers": ["ideal"],
    }  # fmt: skip


def run_jobs(tmp_path: Path, name: str, cfg: dict) -> dict[str, tuple[int, float]]:
    """``sim run`` of ``cfg``: each job's (iterations, run time in s: finish - start)."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    assert cli.main(["sim", "run", str(path), "--out", str(tmp_path / name), "--quiet"]) == 0
    results = json.loads((tmp_path / name / "results.json").read_text())
    return {
        j["job_id"]: (j["iterations"], j["finish_s"] - j["start_s"])
        for j in results["jobs"]["ideal"]
    }


# -- 1: convert, then run: the trace's run times ----------------------------------------------
def test_a_converted_trace_runs_as_the_trace_read_directly(tmp_path: Path) -> None:
    (tmp_path / "cluster_log.csv").write_text(
        HEADER
        + helios_row("1425511", 1, "2020-06-09 18:41:01")
        + helios_row("1425512", 4, "2020-06-09 18:41:27", duration=249)
    )
    argv = ["sim", "trace", "convert", str(tmp_path / "cluster_log.csv")]
    assert cli.main([*argv, "--out", str(tmp_path / "out.csv")]) == 0
    direct = run_jobs(tmp_path, "rd", config(str(tmp_path / "cluster_log.csv"), "helios"))
    converted = run_jobs(tmp_path, "rc", config(str(tmp_path / "out.csv"), "csv"))
    assert converted == direct  # was 15000 iterations, 10800 s for job 1425511
    assert direct["1425511"] == (5000, pytest.approx(3600.0))  # the recorded run time
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert [(r["duration_s"], r["iterations"]) for r in rows] == [("3600.0", ""), ("249.0", "")]
    # JSON too, and on another cluster (links 10x faster): the same jobs as the direct read
    assert cli.main([*argv, "--out", str(tmp_path / "out.json")]) == 0
    for link_bps in (1e10, 1e11):
        want = config_from_dict(config(str(tmp_path / "cluster_log.csv"), "helios", link_bps))
        for out in ("out.csv", "out.json"):
            got = config_from_dict(config(str(tmp_path / out), "csv", link_bps))
            assert got.read_workload(LIBRARY).jobs == want.read_workload(LIBRARY).jobs


def test_sim_trace_config_writes_the_run_times_as_convert_does(tmp_path: Path) -> None:
    (tmp_path / "cluster_log.csv").write_text(
        HEADER + helios_row("a", 1, "2020-06-09 18:41:01")
        + helios_row("b", 2, "2020-06-09 18:42:01", duration=249)
    )  # fmt: skip
    direct = config(str(tmp_path / "cluster_log.csv"), "helios")
    (tmp_path / "d.json").write_text(json.dumps(direct))
    traced, converted = tmp_path / "t.csv", tmp_path / "c.csv"
    assert cli.main(["sim", "trace", str(tmp_path / "d.json"), "--out", str(traced)]) == 0
    argv = ["sim", "trace", "convert", str(tmp_path / "cluster_log.csv"), "--out", str(converted)]
    assert cli.main(argv) == 0
    assert traced.read_text() == converted.read_text()
    faster = config_from_dict(config(str(traced), "csv", 1e11))
    want = config_from_dict(config(str(tmp_path / "cluster_log.csv"), "helios", 1e11))
    assert faster.read_workload(LIBRARY).jobs == want.read_workload(LIBRARY).jobs
    # a count stays a count: our csv's iterations are written as iterations
    (tmp_path / "ours.csv").write_text("job_id,arrival_s,gpus,iterations,model\nx,0,2,77,bert\n")
    argv = ["sim", "trace", "convert", str(tmp_path / "ours.csv"), "--out", str(converted)]
    assert cli.main(argv) == 0
    assert converted.read_text().splitlines() == [
        "job_id,arrival_s,gpus,iterations,model", "x,0.0,2,77,bert"
    ]  # fmt: skip


# -- 2: one outlier submission is the bad row ---------------------------------------------------
def outlier_trace(tmp_path: Path) -> Path:
    path = tmp_path / "cluster_log.csv"
    path.write_text(
        HEADER
        + helios_row("1", 1, "2020-06-09 18:41:01")
        + helios_row("2", 1, "1970-01-01 00:00:00")
        + helios_row("3", 2, "2020-06-09 18:43:01")
    )
    return path


def test_one_placeholder_submission_is_the_bad_row_and_the_others_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = outlier_trace(tmp_path)
    got = read(path, LIBRARY, format="helios", strict=False)
    assert sorted(j.job_id for j in got.jobs) == ["1", "3"]  # was ["2"]
    assert [(b.line, b.column, b.field) for b in got.bad] == [(3, 8, "submit_time")]
    assert "1.59e+09 s before the median submission, more than 1e9 s" in got.bad[0].problem
    assert [j.arrival_s for j in got.jobs] == [0.0, 120.0]
    with pytest.raises(BadRow, match=r"cluster_log.csv:3:8: submit_time: arrives 1.59e\+09 s"):
        read(path, LIBRARY, format="helios")
    out = tmp_path / "o.csv"
    assert cli.main(["sim", "trace", "convert", str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"bad row: {path}:3:8: submit_time" in err and "1 bad row" in err
    assert [r["job_id"] for r in csv.DictReader(out.open())] == ["1", "3"]


# -- 6: the model rule counts the jobs kept ---------------------------------------------------
def test_the_model_rule_counts_only_the_jobs_kept(tmp_path: Path) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text(
        HEADER
        + helios_row("1", 1, "2020-06-09 18:41:01")
        + helios_row("1", 1, "2020-06-09 18:42:01")  # duplicate id
        + helios_row("2", 64, "2020-06-09 18:43:01")  # more GPUs than the cluster's 8
        + helios_row("3", 2, "2070-06-09 18:43:01")  # 50 years later
        + helios_row("4", 2, "2020-06-09 18:44:01")
    )
    got = read(path, LIBRARY, format="helios", strict=False, max_gpus=8)
    assert sorted(j.job_id for j in got.jobs) == ["1", "4"] and len(got.bad) == 3
    seeded = [n for n in got.notes if n.startswith("model:")]
    assert len(seeded) == 1 and seeded[0].startswith("model: 2 jobs by the seeded rule")  # was 5
    assert all(type(n) is str for n in got.notes)  # plain lines, for results.json
    # through a run: results.json's workload.assumptions
    cfg = config(str(path), "helios") | {"workload": {"trace": str(path), "bad_rows": "skip"}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert cli.main(["sim", "run", str(tmp_path / "c.json"), "--out", str(tmp_path / "r"),
                     "--quiet"]) == 0  # fmt: skip
    workload = json.loads((tmp_path / "r" / "results.json").read_text())["workload"]
    assert workload["jobs"] == 2 and workload["bad_rows"] == 3
    assert any(a.startswith("model: 2 jobs by the seeded rule") for a in workload["assumptions"])


def test_names_of_rejected_rows_are_not_counted(tmp_path: Path) -> None:
    path = tmp_path / "8_job.csv"
    path.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        "0,1,0,606,vgg19,164,30\n"
        "0,1,5,606,vgg19,164,30\n"  # duplicate id: not a second named job
        "1,64,30,133,mystery,147,23\n"  # too many GPUs: its unknown name is not listed
        "2,2,40,133,enigma,147,23\n"
    )
    got = read(path, LIBRARY, format="tiresias", strict=False, max_gpus=8)
    assert [j.job_id for j in got.jobs] == ["0", "2"] and len(got.bad) == 2
    notes = [n for n in got.notes if n.startswith("model")]
    assert notes == [
        "model: 1 jobs by the trace's model name, 0 through the reader's alias table",
        notes[1],
        "model names not in the library (seeded rule used): enigma (1)",
    ]
    assert notes[1].startswith("model: 1 jobs by the seeded rule")
