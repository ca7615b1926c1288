"""The experiments' harness: options, checks, root, --out, the results file and tables."""

import json

import pytest

from experiments.columns import Column
from experiments.harness import Experiment, Run, UsageError, full, iterations, option


def _experiment(runs, code=None, **kw):
    def run(r: Run):
        runs.append(r)
        r.save({"iterations": r.args.iterations, "full": r.args.full})
        r.show([{"x": 1.234, "y": "a"}], [Column("x", "x", ".1f"), Column("y", "y")], "T")
        return code

    def check(args):
        if args.iterations < 3:
            raise UsageError("--iterations: at least 3")

    return Experiment(
        "toy",
        "toy experiment\n\n    python -m experiments.toy",
        run,
        options=(full("bigger"), iterations(10), option("--name", default="n")),
        check=check,
        needs_root=lambda args: args.name == "root",
        **kw,
    )


def test_the_run_gets_its_arguments_folder_results_file_and_table(tmp_path, capsys):
    runs = []
    code = _experiment(runs).main(["--full", "--iterations", "4", "--out", str(tmp_path)])
    assert code == 0 and runs[0].out == tmp_path
    assert json.loads((tmp_path / "results.json").read_text()) == {"iterations": 4, "full": True}
    assert capsys.readouterr().out == "T\nx    y\n1.2  a\n"


def test_results_file_named_from_the_arguments_and_exit_status_passed_on(tmp_path):
    exp = _experiment([], results_name=lambda args: f"{args.name}.json", code=3)
    assert exp.main(["--name", "b", "--out", str(tmp_path)]) == 3
    assert (tmp_path / "b.json").exists() and not (tmp_path / "results.json").exists()


def test_bad_flags_are_refused_like_argparse_before_anything_runs(tmp_path, capsys):
    runs = []
    with pytest.raises(SystemExit) as e:
        _experiment(runs).main(["--iterations", "2", "--out", str(tmp_path)])
    assert e.value.code == 2 and "--iterations: at least 3" in capsys.readouterr().err
    assert runs == [] and not any(tmp_path.iterdir())


def test_root_is_required_when_the_experiment_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    runs = []
    with pytest.raises(SystemExit, match="needs root"):
        _experiment(runs).main(["--name", "root", "--out", str(tmp_path)])
    assert runs == []
    assert _experiment(runs).main(["--out", str(tmp_path)]) == 0  # this run does not


def test_help_is_the_docstring_and_names_the_module(capsys):
    with pytest.raises(SystemExit):
        _experiment([]).main(["--help"])
    out = capsys.readouterr().out
    assert "python -m experiments.toy" in out and "--out OUT" in out and "--full" in out


def test_a_config_error_while_running_is_one_line_and_exit_2(tmp_path, capsys):
    """A config the flags made and the testbed refuses: a traceback until 2026-12."""
    from testbed.run import ConfigError

    def run(r: Run):
        raise ConfigError("jobs[0].iterations", "must be >= 3, got 0")

    code = Experiment("toy", "toy", run, needs_root=False).main(["--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "jobs[0].iterations: must be >= 3, got 0" in err[0]


def test_other_failures_of_the_run_are_not_taken_for_input_errors(tmp_path):
    def run(r: Run):
        raise RuntimeError("the cluster fell over")

    with pytest.raises(RuntimeError, match="fell over"):
        Experiment("toy", "toy", run, needs_root=False).main(["--out", str(tmp_path)])
