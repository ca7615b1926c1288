"""A newcomer's review of the trace readers: PAI's GPU count without the instance table,
a broken JSON-lines record named at its first line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cassini.sim.config import config_from_dict
from cassini.sim.report.run import simulate_config
from cassini.sim.traces import BadRow, read
from cassini.sim.workload import load_library

LIBRARY = load_library()
DATA = Path(__file__).parent / "data" / "traces"
PAI = DATA / "pai2020"

#: the PAI fixture's jobs with a GPU task: inst_num x ceil(plan_gpu / 100) over GPU tasks
PAI_GPUS = {
    "4b3f04b66a525d2df903eb16": 1,  # 1 x ceil(50 / 100)
    "4f057009a5d481acec67b088": 8,  # ps plan_gpu 0; worker 4 x ceil(200 / 100)
    "af724763f4f5d0beef445849": 2,  # 2 x ceil(100 / 100)
}


def pai_without_instances(tmp_path: Path) -> Path:
    folder = tmp_path / "pai"
    folder.mkdir()
    for table in ("pai_job_table.csv", "pai_task_table.csv"):
        shutil.copy(PAI / table, folder / table)
    return folder


# -- 1: PAI's GPUs from the task table alone -----------------------------------------------
def test_pai_gpus_without_the_instance_table_are_instances_times_gpus(tmp_path: Path) -> None:
    alone = read(pai_without_instances(tmp_path), LIBRARY)
    gpus = {j.job_id: j.gpus for j in alone.jobs}
    assert gpus == PAI_GPUS  # was the tasks' start_time (4550890.0, ...)
    assert all(type(j.gpus) is int and j.hosts == () for j in alone.jobs)
    # the same counts as the instance table's machines give, on the same fixture
    placed = read(PAI, LIBRARY)
    assert {j.job_id: j.gpus for j in placed.jobs} == PAI_GPUS
    assert {j.job_id: sum(g for _, g in j.hosts) for j in placed.jobs} == PAI_GPUS


def test_pai_without_the_instance_table_simulates_its_jobs_on_their_gpus(tmp_path: Path) -> None:
    cfg = config_from_dict(
        {
            "cluster": {"racks": 2, "servers_per_rack": 2, "gpus_per_server": 4},
            "workload": {"trace": str(pai_without_instances(tmp_path)), "format": "pai2020"},
            "schedulers": ["themis"],
        }
    )
    done = simulate_config(cfg)
    records = done.results["themis"].jobs
    assert {r.job_id: r.gpus for r in records} == PAI_GPUS
    assert all(type(r.gpus) is int for r in records)


def test_pai_task_with_no_instances_holds_no_gpus(tmp_path: Path) -> None:
    folder = pai_without_instances(tmp_path)
    tasks = folder / "pai_task_table.csv"
    job = "af724763f4f5d0beef445849"
    text = tasks.read_text().replace(f"{job},worker,2.0", f"{job},worker,0.0")
    tasks.write_text(text)
    got = read(folder, LIBRARY)
    assert job not in {j.job_id for j in got.jobs}  # was a job of 0 GPUs
    assert got.skipped["no GPU task"] == 2


# -- 3: a broken JSON-lines record is named at its first line -------------------------------
def philly_record(job_id: str) -> str:
    attempt = {
        "start_time": "2017-10-07 01:12:09",
        "end_time": "2017-10-07 02:12:09",
        "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}],
    }
    return json.dumps(
        {"jobid": job_id, "submitted_time": "2017-10-07 01:12:00", "attempts": [attempt]}
    )


def test_an_unterminated_json_line_is_named_at_the_line_it_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "philly.jsonl"
    lines = [philly_record("j1"), philly_record("j2"), philly_record("j3")]
    lines += ['{"jobid": "broken", "attempts": [', philly_record("j5")]
    path.write_text("\n".join(lines) + "\n")
    got = read(path, LIBRARY, format="philly", strict=False)
    assert sorted(j.job_id for j in got.jobs) == ["j1", "j2", "j3", "j5"]
    [bad] = got.bad
    assert (bad.line, bad.column) == (4, 1)  # was 6:1, past the file's 5 lines
    assert str(bad).startswith(f"{path}:4:1: trace: malformed JSON: ")
    assert "(at line 6, column 1, in the record that starts here)" in str(bad)
    with pytest.raises(BadRow, match=r"philly.jsonl:4:1: trace: malformed JSON"):
        read(path, LIBRARY, format="philly")


def test_a_fault_on_the_record_first_line_keeps_its_column(tmp_path: Path) -> None:
    path = tmp_path / "philly.jsonl"
    path.write_text("\n".join([philly_record("j1"), '{"jobid": "jx", oops}', ""]))
    [bad] = read(path, LIBRARY, format="philly", strict=False).bad
    assert (bad.line, bad.column) == (2, 17) and "at line" not in str(bad)
