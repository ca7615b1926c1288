"""cassini.sim.traces: every published format's reader on a small fixture in that
format's exact columns, bad rows named by file:line:column, format mismatches, detection,
conversion to our CSV."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cassini.errors import InputError
from cassini.sim.traces import READERS, BadRow, NotThisFormat, detect, read
from cassini.sim.traces.common import ModelRule, iterations_for
from cassini.sim.workload import JobSpec, load_library, read_trace

LIBRARY = load_library()
DATA = Path(__file__).parent / "data" / "traces"

#: format -> (fixture path under DATA, jobs kept, skipped count)
FIXTURES = {
    "philly": ("philly/cluster_job_log", 4, 2),
    "helios": ("helios/cluster_log.csv", 4, 2),
    "acme": ("acme/trace_seren.csv", 4, 1),
    "pai2020": ("pai2020", 3, 2),
    "lingjun": ("lingjun", 4, 1),
    "pollux": ("pollux/workload-1.csv", 6, 0),
    "tiresias": ("tiresias/8_job.csv", 7, 1),
    "csv": ("csv/jobs.csv", 3, 0),
}

#: format -> (file to corrupt (relative to the copied fixture), old text, new text,
#: expected line, column, field)
CORRUPTIONS = {
    "philly": ("cluster_job_log", '"submitted_time": "2017-10-07 01:24:10"',
               '"submitted_time": "yesterday"', 4, None, "submitted_time"),
    "helios": ("cluster_log.csv", "1425514,uXBbc,vcJkd,16,", "1425514,uXBbc,vcJkd,sixteen,",
               5, 4, "gpu_num"),
    "acme": ("trace_seren.csv", "Other,COMPLETED,2023-03-01 00:23:58+08:00",
             "Other,COMPLETED,2023-03-01 25:23:58", 3, 8, "submit_time"),
    "pai2020": ("pai_task_table.csv", "4.0,Terminated,4550950.0,4559990.0,800.0,58.59375,200.0",
                "4.0,Terminated,4550950.0,4559990.0,800.0,58.59375,lots", 3, 9, "plan_gpu"),
    "lingjun": ("worker.csv", 'gpu"": ""4""}"\n15', 'gpu"": ""four""}"\n15', 5, 9, "RES"),
    "pollux": ("workload-1.csv", "imagenet-3,262,imagenet,16,", "imagenet-3,262,imagenet,-16,",
               5, 4, "num_replicas"),
    "tiresias": ("8_job.csv", "3,1,79,513,vgg16,121,20", "3,1,79,513,vgg16,,20", 5, 6, "duration"),
    "csv": ("jobs.csv", "c,4,4,500,,resnet50,", "c,4,4,500,,nosuch,", 4, 6, "model"),
}  # fmt: skip


def copy_fixture(fmt: str, tmp_path: Path) -> Path:
    src = DATA / FIXTURES[fmt][0]
    if src.is_dir():
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
    else:
        dst = tmp_path / src.parent.name / src.name
        dst.parent.mkdir()
        shutil.copy(src, dst)
    return dst


@pytest.mark.parametrize("fmt", sorted(FIXTURES))
def test_each_reader_parses_its_fixture(fmt: str) -> None:
    path, n_jobs, n_skipped = FIXTURES[fmt]
    assert detect(DATA / path) == fmt
    r = read(DATA / path, LIBRARY, format=fmt)
    assert r.format == fmt and not r.bad
    assert len(r.jobs) == n_jobs
    assert sum(r.skipped.values()) == n_skipped
    assert [j.arrival_s for j in r.jobs] == sorted(j.arrival_s for j in r.jobs)
    for j in r.jobs:
        assert j.model in LIBRARY and j.gpus >= 1 and j.iterations >= 1
        if j.hosts:
            assert sum(g for _, g in j.hosts) == j.gpus
    assert READERS[fmt].__doc__ and READERS[fmt].SOURCE


@pytest.mark.parametrize("fmt", sorted(CORRUPTIONS))
def test_a_bad_row_is_named_by_file_line_and_column(fmt: str, tmp_path: Path) -> None:
    where = copy_fixture(fmt, tmp_path)
    name, old, new, line, column, field = CORRUPTIONS[fmt]
    target = where / name if where.is_dir() else where.parent / name
    text = target.read_text()
    assert text.count(old) == 1, "fixture changed under the test"
    target.write_text(text.replace(old, new))
    with pytest.raises(BadRow) as info:
        read(where, LIBRARY, format=fmt)
    e = info.value
    assert isinstance(e, InputError) and e.field == field
    assert (e.file, e.line) == (str(target), line)
    if column is None:  # JSON: the column where the key starts
        column = target.read_text().splitlines()[line - 1].index(f'"{field}"') + 1
    assert e.column == column
    assert str(e).startswith(f"{target}:{line}:{column}: {field}: ")
    # not strict: the bad row is counted and reported, the others still read
    lax = read(where, LIBRARY, format=fmt, strict=False)
    assert [str(b) for b in lax.bad] == [str(e)]
    good = FIXTURES[fmt][1]
    assert len(lax.jobs) in (good - 1, good)  # a bad worker/task row drops its job's GPUs


def test_the_recorded_placements_are_read_exactly() -> None:
    philly = {j.job_id: j for j in read(DATA / "philly/cluster_job_log", LIBRARY).jobs}
    first = philly["application_1506638472019_14199"]  # two attempts: the last one counts
    assert first.hosts == (("m412", 8), ("m413", 4)) and first.gpus == 12
    # 7200 s on the chosen profile's dedicated pace
    assert first.iterations == iterations_for(7200, LIBRARY[first.model])
    lingjun = {j.job_id: j for j in read(DATA / "lingjun", LIBRARY).jobs}
    assert lingjun["dlc2b3c4d5e6f7a8"].hosts == (("e3038539b9fc", 8),)  # two workers, one host
    assert lingjun["dlc1a2b3c4d5e6f7"].hosts == (("525c32e31f71", 8), ("99becf8368ff", 8))
    assert lingjun["dlc1a2b3c4d5e6f7"].model == "bert"  # named by the trace
    pai = {j.job_id: j for j in read(DATA / "pai2020", LIBRARY).jobs}
    assert pai["4f057009a5d481acec67b088"].hosts == (
        ("6884752e3565b15cafe14218", 4),
        ("74e1c8457b01c76b314b22bb", 4),
    )
    # plan_gpu 50: half a GPU is a whole one here
    assert pai["4b3f04b66a525d2df903eb16"].gpus == 1


def test_the_seeded_model_rule_is_stable_and_printed() -> None:
    rule = ModelRule(LIBRARY, seed=3)
    picks = [rule.choose(f"j{k}") for k in range(200)]
    assert picks == [ModelRule(LIBRARY, seed=3).choose(f"j{k}") for k in range(200)]
    assert picks != [ModelRule(LIBRARY, seed=4).choose(f"j{k}") for k in range(200)]
    assert set(picks) == set(LIBRARY)  # every profile gets jobs
    assert rule.choose("x", "GPT-2") == "gpt2"
    notes = " ".join(rule.notes())
    assert "seeded rule" in notes and "sha256('3:<job id>')" in notes
    r = read(DATA / "helios/cluster_log.csv", LIBRARY, seed=3)
    assert any("seeded rule" in n for n in r.notes)


@pytest.mark.parametrize("fmt", sorted(FIXTURES))
def test_a_file_in_another_format_is_refused_saying_what_was_expected(fmt: str) -> None:
    other = DATA / ("tiresias/8_job.csv" if fmt != "tiresias" else "pollux/workload-1.csv")
    with pytest.raises(NotThisFormat) as info:
        read(other, LIBRARY, format=fmt)
    assert str(info.value).startswith(f"trace: {other}: not ")
    assert READERS[fmt].EXPECTED in str(info.value)


def test_our_csv_round_trips_recorded_hosts(tmp_path: Path) -> None:
    from cassini.sim.traces.ours import write as write_trace

    jobs = read(DATA / "lingjun", LIBRARY).jobs
    for suffix in (".csv", ".json"):
        path = tmp_path / f"t{suffix}"
        write_trace(jobs, path)
        assert read_trace(path, LIBRARY) == jobs
    assert read_trace(DATA / "csv/jobs.csv", LIBRARY)[0] == JobSpec(
        "a", 0.0, 16, 300, "vgg16", (("m1", 8), ("m2", 8))
    )


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cassini.cli", "sim", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_convert_writes_our_csv_and_reports_bad_rows(tmp_path: Path) -> None:
    out = tmp_path / "jobs.csv"
    done = cli("trace", "convert", str(DATA / "philly/cluster_job_log"), "--format", "philly",
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert read_trace(out, LIBRARY) == read(DATA / "philly/cluster_job_log", LIBRARY).jobs
    assert "4 jobs" in done.stderr and "skipped 2" in done.stderr
    # a bad row: counted, named, the rest converted
    bad = tmp_path / "helios.csv"
    bad.write_text((DATA / "helios/cluster_log.csv").read_text().replace(",16,64,", ",x,64,"))
    done = cli("trace", "convert", str(bad), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"{bad}:5:4: gpu_num: not a number" in done.stderr
    assert "1 bad row" in done.stderr
    assert len(read_trace(out, LIBRARY)) == 3
    done = cli("trace", "convert", str(bad), "--out", str(out), "--strict")
    assert done.returncode == 2 and f"{bad}:5:4: gpu_num" in done.stderr
    # not the named format: exit 2 saying what was expected
    done = cli("trace", "convert", str(DATA / "pollux/workload-1.csv"), "--format", "helios",
               "--out", str(out))  # fmt: skip
    assert done.returncode == 2
    assert "expected" in done.stderr or "not a Helios" in done.stderr, done.stderr


def test_a_config_reads_any_format(tmp_path: Path) -> None:
    from cassini.sim.config import config_from_dict

    cfg = config_from_dict(
        {
            "cluster": {"racks": 2, "servers_per_rack": 4, "gpus_per_server": 8},
            "workload": {"trace": str(DATA / "tiresias/8_job.csv"), "format": "tiresias"},
            "schedulers": ["themis"],
        }
    )
    jobs = cfg.jobs(LIBRARY)
    assert jobs == read(DATA / "tiresias/8_job.csv", LIBRARY).jobs
    with pytest.raises(InputError, match="workload.format"):
        config_from_dict(
            {
                "cluster": {"racks": 2, "servers_per_rack": 4, "gpus_per_server": 8},
                "workload": {"trace": "x.csv", "format": "nosuch"},
                "schedulers": ["themis"],
            }
        )
    data = json.loads(json.dumps(cfg.read_workload(LIBRARY).summary))
    assert data["format"] == "tiresias" and data["jobs"] == 7
    assert data["skipped"] == {"no GPUs (num_gpu 0)": 1}
