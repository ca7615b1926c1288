"""The rows beside a job's own (PAI's task and instance tables, Lingjun's worker.csv) and
rows that never started (Helios, Acme): GPUs follow one stated rule, a retried or
repeated row counts once, a bad secondary row rejects its job once, a job that never
started is skipped by its rule and a line cut short is a bad row."""

from __future__ import annotations

from pathlib import Path

import pytest

from cassini import cli
from cassini.sim.config import config_from_dict
from cassini.sim.report.run import simulate_config
from cassini.sim.traces import BadRow, read
from cassini.sim.workload import load_library

LIBRARY = load_library()

PAI_JOBS = "jobA,iA,u1,Terminated,4550879.0,4551416.0\njobB,iB,u1,Terminated,4550900.0,4560000.0\n"


def pai(tmp_path: Path, tasks: str, instances: str | None = None, jobs: str = PAI_JOBS) -> Path:
    folder = tmp_path / "pai"
    folder.mkdir()
    (folder / "pai_job_table.csv").write_text(jobs)
    (folder / "pai_task_table.csv").write_text(tasks)
    if instances is not None:
        (folder / "pai_instance_table.csv").write_text(instances)
    return folder


# -- 3: PAI's GPUs are the task table's; instance rows give placement only -----------------
PAI_TASKS = (
    "jobA,worker,2.0,Terminated,4550890.0,4551400.0,600.0,29.0,100.0,V100\n"
    "jobB,worker,2.0,Terminated,4550950.0,4559990.0,800.0,58.0,100.0,V100\n"
)
PAI_INSTANCES = (
    "jobA,worker,instA0,wA0,iA,Terminated,4550890.0,4551400.0,m1\n"
    "jobA,worker,instA1,wA1,iA,Failed,4550890.0,4550900.0,\n"  # no machine
    "jobB,worker,instB0,wB0a,iB,Failed,4550950.0,4551000.0,m2\n"  # instB0 retried:
    "jobB,worker,instB0,wB0b,iB,Terminated,4551000.0,4559990.0,m3\n"  # its last attempt
    "jobB,worker,instB1,wB1,iB,Terminated,4550950.0,4559990.0,m3\n"
)


def test_pai_gpus_are_the_task_tables_whatever_the_instance_rows(tmp_path: Path) -> None:
    got = read(pai(tmp_path, PAI_TASKS, PAI_INSTANCES), LIBRARY, format="pai2020")
    jobs = {j.job_id: j for j in got.jobs}
    # was: jobA 1 GPU (m1:1, the machineless instance dropped), jobB 3 (m2:1;m3:2)
    assert {k: j.gpus for k, j in jobs.items()} == {"jobA": 2, "jobB": 2}
    assert jobs["jobB"].hosts == (("m3", 2),)  # a retried instance is its last attempt
    assert jobs["jobA"].hosts == ()  # its instances disagree with the task table
    assert not got.bad
    notes = " ".join(got.notes)
    assert "GPUs: from pai_task_table alone" in notes
    assert "1 of 2 jobs" in notes and "last attempt" in notes
    assert "jobA: task table 2 GPUs, instances 1 GPU on machines, 1 instance without a" in notes


def test_pai_job_without_instance_rows_keeps_its_gpus_unplaced(tmp_path: Path) -> None:
    instances = PAI_INSTANCES.split("\n", 2)[2]  # jobB's rows only
    got = read(pai(tmp_path, PAI_TASKS, instances), LIBRARY, format="pai2020")
    jobs = {j.job_id: j for j in got.jobs}
    assert jobs["jobA"].gpus == 2 and jobs["jobA"].hosts == ()
    assert jobs["jobB"].hosts == (("m3", 2),)
    assert "such job" not in " ".join(got.notes)  # no rows is not a disagreement


# -- 3: Lingjun's workers by name -------------------------------------------------------------
LJ_JOBS = (
    "id,uid,job_name,kind,namespace,model,status,gmt_job_submitted,gmt_job_running,"
    "gmt_job_finished,gmt_job_stopped,priority\n"
    "1,9c1e,dlc1,PyTorchJob,ns-a,bert,Succeeded,2023/7/15 02:19,2023/7/15 02:20,"
    "2023/7/15 04:20,,1\n"
    "2,9c1f,dlc2,PyTorchJob,ns-a,gpt2,Succeeded,2023/7/15 02:25,2023/7/15 02:26,"
    "2023/7/15 03:26,,1\n"
)
LJ_HEAD = (
    "id,job_name,worker_name,replica_type,host_ip,gmt_created,gmt_pod_running,"
    "gmt_pod_finished,RES\n"
)


def lj_worker(n: int, job: str, name: str, host: str, gpus: int) -> str:
    return (
        f"{n},{job},{name},worker,{host},2023/7/15 02:19,2023/7/15 02:20,2023/7/15 04:20,"
        f'"{{""nvidia.com/gpu"": ""{gpus}""}}"\n'
    )


def lingjun(tmp_path: Path, workers: str) -> Path:
    folder = tmp_path / "lingjun"
    folder.mkdir()
    (folder / "job.csv").write_text(LJ_JOBS)
    (folder / "worker.csv").write_text(LJ_HEAD + workers)
    return folder


def test_lingjun_a_repeated_worker_row_counts_once(tmp_path: Path) -> None:
    again = lj_worker(14, "dlc2", "dlc2-worker-0", "e303", 4)
    workers = lj_worker(12, "dlc1", "dlc1-worker-0", "525c", 8) + again + again
    got = read(lingjun(tmp_path, workers), LIBRARY, format="lingjun")
    jobs = {j.job_id: j for j in got.jobs}
    assert jobs["dlc2"].gpus == 4 and jobs["dlc2"].hosts == (("e303", 4),)  # was e303:8
    assert not got.bad
    assert any("1 repeated worker row counted once" in n for n in got.notes)


def test_lingjun_a_worker_repeated_on_another_host_rejects_its_job(tmp_path: Path) -> None:
    workers = (
        lj_worker(12, "dlc1", "dlc1-worker-0", "525c", 8)
        + lj_worker(14, "dlc2", "dlc2-worker-0", "e303", 4)
        + lj_worker(15, "dlc2", "dlc2-worker-0", "f404", 4)
    )
    path = lingjun(tmp_path, workers)
    got = read(path, LIBRARY, format="lingjun", strict=False)
    assert [j.job_id for j in got.jobs] == ["dlc1"]
    assert [str(b) for b in got.bad] == [
        f"{path / 'worker.csv'}:4:3: worker_name: worker 'dlc2-worker-0' repeats line 3 "
        "with another host_ip or GPUs (f404:4, was e303:4)"
    ]


# -- 4: a bad secondary row rejects its job, counted once -------------------------------------
def test_pai_bad_task_row_rejects_its_job_once(tmp_path: Path) -> None:
    jobs = PAI_JOBS + "jobC,iC,u1,Terminated,4551000.0,4552000.0\n"
    tasks = (
        "jobA,ps,1.0,Terminated,4550890.0,4551400.0,600.0,29.0,abc,V100\n"
        "jobA,worker,2.0,Terminated,4550890.0,4551400.0,600.0,29.0,100.0,V100\n"
        "jobB,worker,2.0,Terminated,4550950.0,4559990.0,800.0,58.0,1e2x,V100\n"
        "jobC,worker,1.0,Terminated,4551000.0,4551900.0,800.0,58.0,100.0,V100\n"
    )
    folder = pai(tmp_path, tasks, jobs=jobs)
    got = read(folder, LIBRARY, format="pai2020", strict=False)
    # was: jobA kept with 2 GPUs; jobB a bad row and also "skipped by rule: no GPU task"
    assert [j.job_id for j in got.jobs] == ["jobC"]
    assert not got.skipped
    table = folder / "pai_task_table.csv"
    assert [str(b) for b in got.bad] == [
        f"{table}:1:9: plan_gpu: not a number: 'abc'",
        f"{table}:3:9: plan_gpu: not a number: '1e2x'",
    ]
    with pytest.raises(BadRow, match=r"pai_task_table.csv:1:9: plan_gpu"):
        read(folder, LIBRARY, format="pai2020")


def test_pai_two_bad_rows_of_one_job_are_one_bad_row(tmp_path: Path) -> None:
    tasks = (
        "jobA,ps,1.0,Terminated,4550890.0,4551400.0,600.0,29.0,abc,V100\n"
        "jobA,worker,x,Terminated,4550890.0,4551400.0,600.0,29.0,100.0,V100\n"
        "jobB,worker,2.0,Terminated,4550950.0,4559990.0,800.0,58.0,100.0,V100\n"
    )
    folder = pai(tmp_path, tasks)
    got = read(folder, LIBRARY, format="pai2020", strict=False)
    assert [j.job_id for j in got.jobs] == ["jobB"]
    (bad,) = got.bad
    assert (bad.line, bad.column, bad.field) == (1, 9, "plan_gpu")
    assert f"1 more bad row of job 'jobA': {folder / 'pai_task_table.csv'}:2" in str(bad)


def test_pai_a_cut_short_task_row_rejects_its_job(tmp_path: Path) -> None:
    tasks = PAI_TASKS + "jobA,worker2,2.0,Terminated,4550890.0\n"  # cut after start_time
    folder = pai(tmp_path, tasks)
    got = read(folder, LIBRARY, format="pai2020", strict=False)
    assert [j.job_id for j in got.jobs] == ["jobB"]
    (bad,) = got.bad
    assert (bad.line, bad.column, bad.field) == (3, 6, "end_time")
    assert "missing column" in bad.problem


def test_pai_bad_row_of_a_job_not_in_the_job_table_is_still_reported(tmp_path: Path) -> None:
    tasks = PAI_TASKS + "jobZ,worker,1.0,Terminated,4550890.0,4551400.0,600.0,29.0,q,V100\n"
    got = read(pai(tmp_path, tasks), LIBRARY, format="pai2020", strict=False)
    assert len(got.jobs) == 2
    assert [(b.line, b.field) for b in got.bad] == [(3, "plan_gpu")]


def test_lingjun_worker_without_host_rejects_its_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workers = (
        lj_worker(12, "dlc1", "dlc1-worker-0", "525c", 8)
        + lj_worker(13, "dlc1", "dlc1-worker-1", "", 8)
        + lj_worker(14, "dlc2", "dlc2-worker-0", "e303", 4)
    )
    path = lingjun(tmp_path, workers)
    got = read(path, LIBRARY, format="lingjun", strict=False)
    assert [j.job_id for j in got.jobs] == ["dlc2"]  # was: dlc1 kept with 8 GPUs, not 16
    assert [str(b) for b in got.bad] == [f"{path / 'worker.csv'}:3:5: host_ip: missing value"]
    assert not got.skipped
    out = tmp_path / "o.csv"
    assert cli.main(["sim", "trace", "convert", str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "wrote 1 jobs (lingjun)" in err and "; 1 bad row (" in err and "by rule" not in err


# -- 5: Helios/Acme: never started is skipped; a line cut short is bad ------------------------
KALOS = (
    "job_id,user,node_num,gpu_num,cpu_num,mem_per_pod_GB,shared_mem_per_pod,type,state,"
    "submit_time,start_time,end_time,fail_time,stop_time,duration,queue,gpu_time\n"
    "dlcA,u,1,8,96,1000,100.0,Other,FAILED,2023-05-17 11:00:58+00:00,2023-05-17 11:01:08+00:00,"
    "2023-05-17 11:01:16+00:00,2023-05-17 11:01:16+00:00,,18,10.0,144.0\n"
    "dlcB,u,1,8,960,1000,100.0,Other,CANCELLED,2023-05-17 11:28:42+00:00,,"
    "2023-05-17 11:30:04+00:00,,2023-05-17 11:30:04+00:00,,,\n"
)


def test_acme_a_cancelled_job_that_never_started_is_skipped(tmp_path: Path) -> None:
    trace = tmp_path / "trace_kalos.csv"
    trace.write_text(KALOS)
    got = read(trace, LIBRARY)  # strict: was trace_kalos.csv:3:11: start_time: missing value
    assert got.format == "acme" and [j.job_id for j in got.jobs] == ["dlcA"]
    assert dict(got.skipped) == {"never started (no start_time nor duration)": 1}
    cfg = config_from_dict(
        {
            "cluster": {"racks": 4, "servers_per_rack": 2, "gpus_per_server": 8},
            "workload": {"trace": str(trace)},
            "schedulers": ["ideal"],
        }
    )
    done = simulate_config(cfg)  # bad_rows: error, the default
    assert [r.job_id for r in done.results["ideal"].jobs] == ["dlcA"]


HELIOS = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,"
    "queue\n"
    "1,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 19:41:01,3600,0\n"
)


def test_helios_a_cpu_job_without_times_is_skipped_as_a_cpu_job(tmp_path: Path) -> None:
    trace = tmp_path / "cluster_log.csv"
    trace.write_text(
        HELIOS + "2,u,vc,0,1,1,CANCELLED,2020-06-09 18:42:01,,2020-06-09 18:43:01,,0\n"
    )
    got = read(trace, LIBRARY)  # was: bad row, start_time missing
    assert dict(got.skipped) == {"no GPUs (gpu_num 0)": 1}


def test_helios_a_truncated_last_line_is_a_bad_row(tmp_path: Path) -> None:
    trace = tmp_path / "cluster_log.csv"
    trace.write_text(HELIOS + "2,u,vc,2,1,1,COMPLETED,2020-06-09 18:42:01,2020-06-09 18:42:01")
    got = read(trace, LIBRARY, strict=False)
    assert not got.skipped  # was: skipped by rule: no duration and no end_time
    assert [str(b) for b in got.bad] == [
        f"{trace}:3:10: end_time: missing column: the row ends before it (truncated line?)"
    ]
    with pytest.raises(BadRow, match=r"cluster_log.csv:3:10: end_time: missing column"):
        read(trace, LIBRARY)


def test_pai_a_rejected_job_repeated_in_the_job_table_is_a_duplicate(tmp_path: Path) -> None:
    jobs = PAI_JOBS + "jobA,iA,u1,Terminated,4550879.0,4551416.0\n"
    tasks = PAI_TASKS.replace("jobA,worker,2.0", "jobA,worker,two")
    folder = pai(tmp_path, tasks, jobs=jobs)
    got = read(folder, LIBRARY, format="pai2020", strict=False)
    assert [j.job_id for j in got.jobs] == ["jobB"]
    first, again = got.bad
    assert (first.file, first.line, first.field) == (
        str(folder / "pai_task_table.csv"),
        1,
        "inst_num",
    )
    assert (again.file, again.line, again.field) == (
        str(folder / "pai_job_table.csv"),
        3,
        "job_name",
    )
    assert f"duplicate job id 'jobA' (rejected before for {first})" in again.problem


def test_pai_placement_note_counts_only_the_jobs_finish_keeps(tmp_path: Path) -> None:
    """A job dropped by ``finish`` (a placeholder start time, far before the median) was
    still counted in the placement note ("2 of 4 jobs"); the notes count the jobs kept."""
    jobs = (
        "jobA,iA,u1,Terminated,4550879.0,4551416.0\njobB,iB,u1,Terminated,4550900.0,4560000.0\n"
        "jobC,iC,u1,Terminated,4550900.0,4560000.0\n"
        "jobZ,iZ,u1,Terminated,-2000000000.0,4560000.0\n"
    )
    tasks = PAI_TASKS + (
        "jobC,worker,1.0,Terminated,4550950.0,4559990.0,800.0,58.0,100.0,V100\n"
        "jobZ,worker,1.0,Terminated,4550950.0,4559990.0,800.0,58.0,100.0,V100\n"
    )
    instances = PAI_INSTANCES + "jobZ,worker,instZ0,wZ0,iZ,Terminated,4550950.0,4559990.0,m9\n"
    got = read(pai(tmp_path, tasks, instances, jobs=jobs), LIBRARY, format="pai2020", strict=False)
    assert sorted(j.job_id for j in got.jobs) == ["jobA", "jobB", "jobC"]
    assert len(got.bad) == 1 and "jobZ" not in " ".join(j.job_id for j in got.jobs)
    notes = " ".join(got.notes)
    assert "(1 of 3 jobs)" in notes, got.notes
    assert "model: 3 jobs by the seeded rule" in notes, got.notes
