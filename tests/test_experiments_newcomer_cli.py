"""The command lines of experiments.sim_validation and experiments.cluster_scale as a
newcomer meets them: a count they cannot run is refused rather than replaced by the
default, an input file that is missing, empty or another experiment's is one line naming
its flag and the file (exit status 2, before ``--out`` is made), ``--summarise`` says
what it cannot range over, and a trace run's tables say it is a trace.

No testbed run starts here: every sim_validation call models a ``--results`` file, and a
guard stops the test should a check let a testbed run through."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from test_experiment_flags import _refused  # the one error line, exit status 2

from experiments import cluster_scale as cs
from experiments import common
from experiments import sim_validation as sv
from experiments.harness import UsageError
from testbed.results import ExperimentResult, JobResult, SchemeResult
from testbed.run import load_config


@pytest.fixture(autouse=True)
def no_testbed_run(monkeypatch):
    """A check that let a testbed run through stops here (this machine runs as root)."""

    def stop(*args, **kwargs):
        raise AssertionError("a testbed run would have started")

    monkeypatch.setattr(sv, "run_config", stop)
    monkeypatch.setattr("experiments.harness.require_root", stop)


def _args(**kw) -> argparse.Namespace:
    base = {"iterations": None, "quick": False, "results": None, "set": "pair", "out": None}
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture
def finished_run(tmp_path) -> Path:
    """A finished testbed run's results.json: the pair at its nominal profiles, the same
    start overlapping, CASSINI holding both to 103 ms."""
    raw = sv.scenario("pair", 10)
    profiles = common.nominal_profiles(load_config(raw))

    def scheme(name, seconds, **kw):
        jobs = {j: JobResult(j, (seconds,) * 9, 0, ()) for j in profiles}
        return SchemeResult(name, name, "cubic", "fair", jobs, **kw)

    path = tmp_path / "run" / "results.json"
    path.parent.mkdir()
    ExperimentResult(
        {
            "ideal": scheme("ideal", 0.1, profiles=profiles, profile_source="log"),
            "baseline": scheme("baseline", 0.14),
            "cassini": scheme("cassini", 0.103),
        },
        raw,
    ).write(path)
    return path


# -- sim_validation --iterations ------------------------------------------------------


@pytest.mark.parametrize("count", [0, 4, -1])
@pytest.mark.parametrize("quick", [False, True])
def test_iterations_below_five_are_refused_not_replaced_by_the_default(count, quick):
    """``--iterations 0`` ran the default 30 (12 with --quick): ``args.iterations or
    DEFAULT`` took 0 for "not given"."""
    args = _args(iterations=count, quick=quick)
    assert sv.chosen_iterations(args) == count
    with pytest.raises(UsageError, match=rf"^--iterations: at least 5, got {count} "):
        sv.check(args)


def test_iterations_not_given_are_the_default_and_five_passes():
    assert sv.chosen_iterations(_args()) == sv.DEFAULT_ITERATIONS
    assert sv.chosen_iterations(_args(quick=True)) == sv.QUICK_ITERATIONS
    sv.check(_args(iterations=5))


def test_iterations_zero_is_refused_on_the_command_line(finished_run, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--iterations", "0", "--results", str(finished_run), "--out", str(out)]
    line = _refused(sv.main, argv, capsys)
    assert "--iterations: at least 5, got 0" in line, line
    assert not out.exists()


# -- sim_validation --results ---------------------------------------------------------


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _cluster_scale_results() -> dict:
    return {"load": 0.9, "routing": "ecmp", "seed": 1, "setups": {}}


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda d: d / "nonexistent.json", "no such file"),
        (lambda d: _write(d, "empty.json", ""), "empty"),
        (lambda d: _write(d, "blank.json", " \n"), "empty"),
        (lambda d: _write(d, "bad.json", "{not json"), "malformed JSON"),
        (lambda d: _write(d, "list.json", "[1, 2]"), "no 'schemes' object"),
        # cluster_scale's results.json: KeyError 'schemes' before
        (lambda d: _write(d, "cs.json", json.dumps(_cluster_scale_results())), "no 'schemes'"),
        # sim_validation's own validation.json
        (lambda d: _write(d, "v.json", json.dumps({"scenario": {}, "rows": []})), "no 'schemes'"),
        (lambda d: _write(d, "j.json", json.dumps({"schemes": {"ideal": {}}})), "no 'cc' field"),
        (lambda d: d, "is a directory"),
    ],
)
def test_a_results_file_that_is_no_testbed_run_is_one_line(make, said, tmp_path, capsys):
    """A missing, empty or foreign --results file was a traceback (exit status 1) after
    an empty --out folder was made."""
    path = make(tmp_path)
    out = tmp_path / "out"
    line = _refused(sv.main, ["--results", str(path), "--out", str(out)], capsys)
    assert f"--results: {path}" in line and said in line, line
    assert not out.exists()


@pytest.mark.parametrize("main, flag", [(sv.main, "--results"), (cs.main, "--summarise")])
def test_an_empty_file_name_is_refused(main, flag, tmp_path, capsys):
    """``--results ""`` read as "not given": a testbed run (as root) instead of a model."""
    out = tmp_path / "out"
    line = _refused(main, [flag, "", "--out", str(out)], capsys)
    assert f"{flag}: an empty file name" in line, line
    assert not out.exists()


def test_a_run_without_its_ideal_scheme_is_refused_before_out_is_made(
    finished_run, tmp_path, capsys
):
    raw = json.loads(finished_run.read_text())
    del raw["schemes"]["ideal"]
    path = _write(tmp_path, "no_ideal.json", json.dumps(raw))
    out = tmp_path / "out"
    line = _refused(sv.main, ["--results", str(path), "--out", str(out)], capsys)
    assert f"--results: {path}: the run has no ideal scheme" in line, line
    assert not out.exists()


def test_a_finished_run_reads_back_and_passes_the_check(finished_run):
    sv.check(_args(results=str(finished_run)))
    read = sv.read_results(finished_run)
    assert isinstance(read, ExperimentResult) and "ideal" in read.schemes


# -- cluster_scale --summarise --------------------------------------------------------


#: every column of cluster_scale's table
ROW_FIELDS = (
    *("mean_slowdown", "p99_slowdown", "mean_jct_s", "makespan_s", "gpu_utilisation"),
    *("worst_job_slowdown", "low_decile_slowdown", "low_decile_loss_vs_themis"),
    *("migrations", "advisor_calls", "link_excess_s", "ecmp_collisions", "wall_s"),
)


def _row(slowdown: float) -> dict:
    row = {field: 0 for field in ROW_FIELDS}
    return row | {
        "mean_slowdown": slowdown,
        "p99_slowdown": slowdown,
        "mean_jct_s": 1000 * slowdown,
        "gpu_utilisation": 0.45 / slowdown,
    }


SETUPS = ("256 GPUs, 2:1, 4 spines", "256 GPUs, 4:1, 4 spines")
SCHEMES = ("themis", "themis+cassini", "themis+crux", "themis+defrag")


def _scale_run(tmp_path: Path, name: str, seed: int, rows=None) -> Path:
    """A cluster_scale results.json: ``rows`` per setup (default: every scheme of
    :data:`SCHEMES` in both setups)."""
    if rows is None:
        rows = {setup: SCHEMES for setup in SETUPS}
    data = _cluster_scale_results() | {"seed": seed}
    data["setups"] = {
        setup: {"jobs": 300, "rows": {s: _row(1.1 if s == "themis" else 1.02) for s in names}}
        for setup, names in rows.items()
    }
    return _write(tmp_path, name, json.dumps(data))


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda d: d / "nonexistent.json", "no such file"),
        (lambda d: _write(d, "empty.json", ""), "empty"),
        (lambda d: _write(d, "bad.json", "{"), "malformed JSON"),
        (lambda d: _write(d, "tb.json", json.dumps({"schemes": {}})), "no 'setups' object"),
        (lambda d: d, "is a directory"),
    ],
)
@pytest.mark.parametrize("several", [False, True])
def test_a_summarise_file_that_is_no_run_of_it_is_one_line(make, said, several, tmp_path, capsys):
    """``--summarise /nonexist`` or an empty file was a traceback (exit status 1)."""
    bad = make(tmp_path)
    paths = [str(_scale_run(tmp_path, "good.json", 1)), str(bad)] if several else [str(bad)]
    out = tmp_path / "out"
    line = _refused(cs.main, ["--summarise", *paths, "--out", str(out)], capsys)
    assert f"--summarise: {bad}" in line and said in line, line
    assert not out.exists()


def test_a_summarise_row_the_table_cannot_read_is_named(tmp_path, capsys):
    path = _scale_run(tmp_path, "a.json", 1)
    data = json.loads(path.read_text())
    del data["setups"][SETUPS[1]]["rows"]["themis+crux"]["wall_s"]
    path.write_text(json.dumps(data))
    line = _refused(cs.main, ["--summarise", str(path)], capsys)
    assert "rows['themis+crux']: no 'wall_s' field" in line, line


def test_the_same_seed_twice_is_said_in_one_line(tmp_path, capsys):
    """Two runs of seed 1 printed "2 runs (seeds 1, 1)" and a range over one seed."""
    a, b = _scale_run(tmp_path, "a.json", 1), _scale_run(tmp_path, "b.json", 1)
    assert cs.summarise_seeds([a, b]) == 0
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert "same seed" in line and f"seed 1: {a}, {b}" in line, line
    assert "over 1 seed, not 2" in line, line
    assert "CASSINI" in captured.out


def test_different_seeds_warn_of_nothing(tmp_path, capsys):
    runs = [_scale_run(tmp_path, f"s{k}.json", k) for k in (1, 2, 3)]
    assert cs.summarise_seeds(runs) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.count("3 runs (seeds 1, 2, 3)") == 2
    assert captured.out.count("MonkeyTree") == 2


def test_rows_missing_from_one_run_are_named_not_dropped_in_silence(tmp_path, capsys):
    """An interrupted run without Crux and MonkeyTree at 4:1: the two rows vanished from
    the 4:1 table without a word."""
    whole = _scale_run(tmp_path, "whole.json", 1)
    cut = _scale_run(tmp_path, "cut.json", 2, {SETUPS[0]: SCHEMES, SETUPS[1]: SCHEMES[:2]})
    assert cs.summarise_seeds([whole, cut]) == 0
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert f"{cut} lacks '{SETUPS[1]}': themis+crux, themis+defrag" in line, line
    assert str(whole) not in line
    two_one, four_one = captured.out.split(SETUPS[1])
    assert "Crux" in two_one and "MonkeyTree" in two_one
    assert "CASSINI" in four_one and "Crux" not in four_one


def test_a_setup_missing_from_a_run_is_ranged_over_the_others_and_named(tmp_path, capsys):
    """A run of --setup 0 only beside a run of both: a KeyError traceback when the first
    file had the setup, silence when it did not."""
    both = _scale_run(tmp_path, "both.json", 1)
    one = _scale_run(tmp_path, "one.json", 2, {SETUPS[0]: SCHEMES})
    for paths in ([both, one], [one, both]):
        assert cs.summarise_seeds(paths) == 0
        captured = capsys.readouterr()
        (line,) = captured.err.splitlines()
        assert f"{one} lacks the setup '{SETUPS[1]}'" in line, line
        assert f"{SETUPS[1]}: 1 run (seed 1)" in captured.out
        assert f"{SETUPS[0]}: 2 runs" in captured.out


def test_a_run_without_themis_names_it(tmp_path, capsys):
    whole = _scale_run(tmp_path, "whole.json", 1)
    cut = _scale_run(tmp_path, "cut.json", 2, {s: SCHEMES[1:] for s in SETUPS})
    assert cs.summarise_seeds([whole, cut]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{cut} lacks '{SETUPS[0]}': themis (every mechanism's baseline)" in line, line


# -- cluster_scale --trace ------------------------------------------------------------

TRACE = """job_id,arrival_s,gpus,iterations,duration_s,model,hosts
a,0,8,200,,vgg16,
b,5,16,200,,bert,
c,9,4,300,,resnet50,
"""


def test_a_trace_run_titles_its_tables_with_the_trace_not_a_load(tmp_path, capsys):
    """A trace run printed "load 0.9" in each table's title: a trace has no load."""
    trace = _write(tmp_path, "mine.csv", TRACE)
    out = tmp_path / "out"
    argv = ["--trace", str(trace), "--setup", "1", "--schemes", "ideal,themis"]
    assert cs.main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    titles = [line for line in printed.splitlines() if line.startswith(SETUPS[1])]
    assert titles == [f"{SETUPS[1]}, 3 jobs, trace mine.csv, routing ecmp"], printed
    data = json.loads((out / "results.json").read_text())
    assert data["trace"] == str(trace) and data["load"] is None
    assert cs.main(["--summarise", str(out / "results.json"), "--out", str(out)]) == 0
    assert f"{SETUPS[1]}, 3 jobs, trace mine.csv, routing ecmp" in capsys.readouterr().out


def test_a_poisson_run_still_titles_its_tables_with_its_load(tmp_path, capsys):
    path = _scale_run(tmp_path, "p.json", 1)
    assert cs.summarise(path) == 0
    assert f"{SETUPS[0]}, 300 jobs, load 0.9, routing ecmp" in capsys.readouterr().out
