"""A newcomer's review of the trace readers, the simulator's workload and ``cassini
profile --from worker-log``: one malformed JSON record no longer drops every later one,
duplicate ids are bad rows in every format, model names match as trace names do,
absurd magnitudes are bad rows, skipped rows are said on the console, gzip and unknown
output suffixes are refused saying why, impossible worker-log timings are errors."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from cassini import cli
from cassini.errors import InputError
from cassini.sim.traces import BadRow, read
from cassini.sim.workload import load_library, poisson_jobs

LIBRARY = load_library()
DATA = Path(__file__).parent / "data" / "traces"


def philly_record(job_id: str, submitted: str = "2017-10-07 01:12:00") -> str:
    attempt = {
        "start_time": "2017-10-07 01:12:09",
        "end_time": "2017-10-07 02:12:09",
        "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}],
    }
    return json.dumps({"jobid": job_id, "submitted_time": submitted, "attempts": [attempt]})


def ids(got) -> list[str]:  # noqa: ANN001 - a TraceRead
    return sorted(j.job_id for j in got.jobs)


# -- 1: a malformed JSON record is one bad row ---------------------------------------------
def test_a_bad_json_line_is_one_bad_row_and_the_later_lines_are_read(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    lines = [philly_record("j1"), '{"jobid": "jx", oops}', philly_record("j2"), "42"]
    path.write_text("\n".join([*lines, philly_record("j3")]) + "\n")
    got = read(path, LIBRARY, format="philly", strict=False)
    assert ids(got) == ["j1", "j2", "j3"]  # was ["j1"]: reading stopped at line 2
    assert [(b.line, b.field) for b in got.bad] == [(2, "trace"), (4, "trace")]
    assert "malformed JSON" in str(got.bad[0]) and "expected a JSON object" in str(got.bad[1])
    with pytest.raises(BadRow, match=r"log.json:2:17: trace: malformed JSON"):
        read(path, LIBRARY, format="philly")


@pytest.mark.parametrize("element", ["null", "42", '"a string"', "[1, 2]"])
def test_an_array_element_that_is_not_an_object_is_one_bad_row(
    tmp_path: Path, element: str
) -> None:
    path = tmp_path / "log.json"
    path.write_text(
        "[\n" + ",\n".join([philly_record("j1"), element, philly_record("j2")]) + "\n]\n"
    )
    got = read(path, LIBRARY, format="philly", strict=False)
    assert ids(got) == ["j1", "j2"]
    [bad] = got.bad
    assert str(bad) == f"{path}:3:1: trace: {bad.problem}"
    assert bad.problem.startswith("expected a JSON object, got ")
    # our own JSON trace the same
    ours = tmp_path / "t.json"
    row = {"job_id": "a", "arrival_s": 0, "gpus": 2, "iterations": 10, "model": "bert"}
    ours.write_text(json.dumps([row, json.loads(element), {**row, "job_id": "b"}]))
    got = read(ours, LIBRARY, format="csv", strict=False)
    assert ids(got) == ["a", "b"] and len(got.bad) == 1


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("[\n" + philly_record("j1") + ",\n" + philly_record("j2") + "\n", "4:1"),  # no ]
        ("[\n" + philly_record("j1") + ",\n" + philly_record("j2") + ",\n]\n", "4:1"),
        ("[\n" + philly_record("j1") + "\n" + philly_record("j2") + "\n]\n", "3:1"),
    ],
    ids=["truncated", "trailing-comma", "missing-comma"],
)
def test_an_array_that_does_not_parse_is_one_error_and_nothing_is_read(
    tmp_path: Path, body: str, where: str
) -> None:
    path = tmp_path / "log.json"
    path.write_text(body)
    for strict in (True, False):  # not a partial read with a bad row
        with pytest.raises(BadRow) as info:
            read(path, LIBRARY, format="philly", strict=strict)
        assert str(info.value).startswith(f"{path}:{where}: trace: malformed JSON")
        assert "nothing was read" in str(info.value)


def test_a_malformed_csv_row_is_one_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    big = "x" * (csv.field_size_limit() + 1)  # the csv module refuses this field
    rows = ["job_id,arrival_s,gpus,iterations,model", "a,0,2,10,bert", f"{big},0,2,10,bert"]
    path.write_text("\n".join([*rows, "b,1,2,10,bert"]) + "\n")
    got = read(path, LIBRARY, format="csv", strict=False)
    assert ids(got) == ["a", "b"]
    assert [(b.line, b.field) for b in got.bad] == [(3, "row")]


# -- 2: sim run says what bad_rows: skip left out ---------------------------------------------
def test_sim_run_prints_the_skipped_bad_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.csv").write_text(
        "job_id,arrival_s,gpus,duration_s,model\na,0,8,-5,vgg16\nb,0,8,0,vgg16\n"
        "c,0,8,10,vgg16\nd,0,8,x,vgg16\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "cluster: {racks: 2, servers_per_rack: 2, gpus_per_server: 8}\n"
        "workload: {trace: t.csv, format: csv, bad_rows: skip}\n"
        "schedulers: [themis]\n"
    )
    assert cli.main(["sim", "run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "bad row" in x]
    assert len(lines) == 1, err
    assert "skipped 3 bad rows" in lines[0]
    assert f"{tmp_path / 't.csv'}:2:4: duration_s: must be > 0" in lines[0]
    assert f"{tmp_path / 't.csv'}:3:4: duration_s" in lines[0] and "and 1 more" in lines[0]



def test_sim_sweep_prints_the_skipped_bad_rows_once_per_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sweep`` says what ``bad_rows: skip`` left out as ``run`` does: the same line, once
    for the trace however many grid points (seeds) read it."""
    (tmp_path / "t.csv").write_text(
        "job_id,arrival_s,gpus,duration_s,model\na,0,8,-5,vgg16\nb,0,8,10,vgg16\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "cluster: {racks: 2, servers_per_rack: 2, gpus_per_server: 8}\n"
        "workload: {trace: t.csv, format: csv, bad_rows: skip}\n"
        "schedulers: [themis]\nsweep: {seed: [0, 1]}\n"
    )
    assert cli.main(["sim", "run", str(cfg), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    ran = [x for x in capsys.readouterr().err.splitlines() if "bad row" in x]
    argv = ["sim", "sweep", str(cfg), "--out", str(tmp_path / "sweep"), "--quiet"]
    assert cli.main([*argv, "--backend", "pool", "--workers", "1"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "bad row" in x]
    assert len(ran) == 1 and len(lines) == 1, err
    said, _, listed = lines[0].rpartition("; ")  # sweep.json keeps no rows: not "results"
    assert said == ran[0].rpartition("; ")[0] and "trace convert" in listed, err
    assert f"{tmp_path / 't.csv'}:2:4: duration_s: must be > 0" in lines[0]

# -- 3: a duplicate id is a bad row in every reader -------------------------------------------
HELIOS = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,"
    "queue\n1,u,v,8,1,1,COMPLETED,2020-06-09 18:41:01,x,x,3600,0\n"
    "1,u,v,8,1,1,COMPLETED,2020-06-09 18:42:01,x,x,3600,0\n"
    "2,u,v,8,1,1,COMPLETED,2020-06-09 18:43:01,x,x,3600,0\n"
)


def duplicated(fmt: str, tmp_path: Path) -> tuple[Path, str, int, str]:
    """A trace in ``fmt`` whose id ``x`` repeats: (path, file of the row, line, field)."""
    if fmt == "helios":
        path = tmp_path / "cluster_log.csv"
        path.write_text(HELIOS)
        return path, str(path), 3, "job_id"
    if fmt == "philly":
        path = tmp_path / "log.json"
        records = ",\n".join(philly_record(j) for j in ("j1", "j1", "j2"))
        path.write_text(f"[\n{records}\n]\n")
        return path, str(path), 3, "jobid"
    path = tmp_path / "lingjun"
    shutil.copytree(DATA / "lingjun", path)
    jobs = path / "job.csv"
    rows = jobs.read_text().splitlines()
    jobs.write_text("\n".join([*rows, rows[1]]) + "\n")  # the first job again, last
    return path, str(jobs), len(rows) + 1, "job_name"


@pytest.mark.parametrize("fmt", ["helios", "philly", "lingjun"])
def test_a_duplicate_job_id_is_a_bad_row_with_its_position(fmt: str, tmp_path: Path) -> None:
    path, file, line, field = duplicated(fmt, tmp_path)
    got = read(path, LIBRARY, format=fmt, strict=False)  # was: InputError, no line
    assert len(got.bad) == 1
    bad = got.bad[0]
    assert (bad.file, bad.line, bad.field) == (file, line, field)
    assert "duplicate job id" in bad.problem and "first on line 2" in bad.problem
    assert len(set(ids(got))) == len(got.jobs) >= 2
    with pytest.raises(BadRow) as info:
        read(path, LIBRARY, format=fmt)
    assert (info.value.file, info.value.line) == (file, line)


def test_convert_keeps_going_past_a_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, file, line, _ = duplicated("helios", tmp_path)
    out = tmp_path / "o.csv"
    assert cli.main(["sim", "trace", "convert", str(path), "--out", str(out)]) == 0
    assert f"{file}:{line}:1: job_id: duplicate job id '1'" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 3  # header + 2 jobs


# -- 4: model names match as trace names do -----------------------------------------------
@pytest.mark.parametrize(
    ("name", "model"), [("VGG16", "vgg16"), ("ResNet50", "resnet50"), ("vgg-16", "vgg16")]
)
def test_a_model_name_matches_ignoring_case_and_punctuation(
    tmp_path: Path, name: str, model: str
) -> None:
    from cassini.sim.config import read_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "cluster: {racks: 2, servers_per_rack: 2, gpus_per_server: 8}\n"
        f"workload: {{poisson: {{jobs: 4, load: 0.5, gpus: {{8: 1}}, models: [{name}]}}}}\n"
        "schedulers: [themis]\n"
    )
    c = read_config(cfg)
    assert c.poisson is not None and c.poisson["models"] == [model]
    assert {j.model for j in c.jobs(LIBRARY)} == {model}
    jobs = poisson_jobs(3, 0.5, 32, LIBRARY, gpus={8: 1}, models=[name])
    assert {j.model for j in jobs} == {model}
    trace = tmp_path / "t.csv"
    trace.write_text(f"job_id,arrival_s,gpus,iterations,model\na,0,2,10,{name}\n")
    assert [j.model for j in read(trace, LIBRARY, format="csv").jobs] == [model]


def test_an_unknown_model_says_the_closest_name(tmp_path: Path) -> None:
    from cassini.profile import library_model, match_model

    with pytest.raises(InputError, match=r"unknown model 'resnet' .*; did you mean 'resnet50'\?"):
        library_model("resnet", LIBRARY, "models")
    with pytest.raises(InputError) as info:
        library_model("llama", LIBRARY, "models")
    assert "did you mean" not in str(info.value) and "library: bert" in str(info.value)
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,arrival_s,gpus,iterations,model\na,0,2,10,vgg61\n")
    with pytest.raises(BadRow, match=r"t.csv:2:5: model: unknown model 'vgg61' .*did you mean"):
        read(trace, LIBRARY, format="csv")
    # ambiguous: two ids with one key; an exact id still wins
    ids_ = {"vgg16", "VGG-16"}
    assert match_model("VGG-16", ids_) == "VGG-16" and match_model("Vgg_16", ids_) is None
    with pytest.raises(InputError, match="ambiguous: it matches VGG-16, vgg16"):
        library_model("Vgg_16", ids_)


# -- 6: absurd magnitudes -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("row", "column", "field"),
    [
        ("a,0,8,1e300,vgg16", 4, "iterations"),
        ("a,1e300,8,100,vgg16", 2, "arrival_s"),
        (f"a,0,8,{10**9 + 1},vgg16", 4, "iterations"),
    ],
)
def test_an_absurd_number_in_our_trace_is_a_bad_row(
    tmp_path: Path, row: str, column: int, field: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"job_id,arrival_s,gpus,iterations,model\n{row}\nb,0,8,100,vgg16\n")
    got = read(path, LIBRARY, format="csv", strict=False)
    assert ids(got) == ["b"]
    assert [(b.line, b.column, b.field) for b in got.bad] == [(2, column, field)]
    assert "must be <= 1e9" in got.bad[0].problem
    with pytest.raises(BadRow, match=f"t.csv:2:{column}: {field}: must be <= 1e9"):
        read(path, LIBRARY, format="csv")


def test_a_run_time_of_too_many_iterations_is_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job_id,arrival_s,gpus,duration_s,model\na,0,8,1e9,vgg16\nb,0,8,60,vgg16\n")
    got = read(path, LIBRARY, format="csv", strict=False)
    assert ids(got) == ["b"] and got.bad[0].field == "duration_s"
    assert "iterations of vgg16, more than 1e9" in got.bad[0].problem
    helios = tmp_path / "cluster_log.csv"
    helios.write_text(HELIOS.replace(",3600,", ",1e20,", 1).replace("\n1,", "\n3,", 1))
    got = read(helios, LIBRARY, format="helios", strict=False)
    assert ids(got) == ["1", "2"]  # was also job 3 with 4e20 iterations
    assert [(b.line, b.field) for b in got.bad] == [(2, "duration")]
    # within the run-time bound, but more than 1e9 iterations of any profile
    helios.write_text(HELIOS.replace(",3600,", ",9e8,", 1).replace("\n1,", "\n3,", 1))
    got = read(helios, LIBRARY, format="helios", strict=False)
    assert ids(got) == ["1", "2"] and [(b.line, b.field) for b in got.bad] == [(2, "duration")]
    assert "more than 1e9" in got.bad[0].problem


def test_an_arrival_decades_after_the_first_is_a_bad_row(tmp_path: Path) -> None:
    helios = tmp_path / "cluster_log.csv"
    text = HELIOS.replace("\n1,", "\n3,", 1)  # ids 3, 1, 2: no duplicate
    helios.write_text(text.replace("2020-06-09 18:43:01", "2060-06-09 18:43:01"))
    got = read(helios, LIBRARY, format="helios", strict=False)
    assert [(b.line, b.field) for b in got.bad] == [(4, "submit_time")]
    assert "after the first submission, more than 1e9 s" in got.bad[0].problem
    assert ids(got) == ["1", "3"]
    with pytest.raises(BadRow, match=r"cluster_log.csv:4:8: submit_time: arrives 1.26e\+09 s"):
        read(helios, LIBRARY, format="helios")


# -- 7: gzip and the output's suffix ---------------------------------------------------------
def test_a_gzip_trace_is_refused_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(b"job_id,arrival_s,gpus,iterations,model\na,0,2,10,bert\n"))
    out = tmp_path / "o.csv"
    assert cli.main(["sim", "trace", "convert", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: gzip-compressed: decompress it first" in err
    assert f"gunzip {path}" in err and not out.exists()
    with pytest.raises(InputError, match="gzip-compressed"):
        read(path, LIBRARY)
    pai = tmp_path / "pai"  # a table of a folder's trace, gzip'd beside the others
    shutil.copytree(DATA / "pai2020", pai)
    task = pai / "pai_task_table.csv"
    (pai / "pai_task_table.csv.gz").write_bytes(gzip.compress(task.read_bytes()))
    task.unlink()
    with pytest.raises(InputError, match=r"found pai_task_table.csv.gz: decompress it first"):
        read(pai, LIBRARY)


def test_an_unknown_output_suffix_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "t.csv"
    src.write_text("job_id,arrival_s,gpus,iterations,model\na,0,2,10,bert\n")
    out = tmp_path / "o.jsonl"
    assert cli.main(["sim", "trace", "convert", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"cassini sim: error: out: {out}: ")
    assert ".csv or .json" in err and not out.exists()
    for suffix in (".csv", ".json"):
        ok = tmp_path / f"o{suffix}"
        assert cli.main(["sim", "trace", "convert", str(src), "--out", str(ok)]) == 0
        assert read(ok, LIBRARY, format="csv").jobs[0].job_id == "a"
