"""Every experiment's command line: ``--help`` shows each option's default, bad flags and
an unwritable ``--out`` are refused in one line (exit status 2) before anything runs, and
the library modules say they are no command.  In one process: the modules are imported,
not spawned."""

from __future__ import annotations

import argparse
import importlib
import runpy
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(p.stem for p in (ROOT / "experiments").glob("*.py") if p.stem != "__init__")
#: positional arguments an experiment needs before its flags are checked
NEEDS = {"cassini_repeats": [str(ROOT / "experiments" / "configs" / "fair_two_jobs.yaml")]}


def _module(name: str):
    return importlib.import_module(f"experiments.{name}")


def _parser(module) -> argparse.ArgumentParser:
    return module.EXPERIMENT.parser() if hasattr(module, "EXPERIMENT") else module.parser()


def _shows_no_default(action: argparse.Action) -> bool:
    """A flag without a value (``--full``) or without a default has none to show."""
    if action.default is None or action.default is argparse.SUPPRESS:
        return True
    return action.nargs == 0 and action.default is False


def _experiments() -> list[str]:
    return [n for n in MODULES if hasattr(_module(n), "EXPERIMENT")]


@pytest.fixture
def nothing_runs(monkeypatch):
    """Flags a check lets through stop here, root or not, before the experiment's run."""

    def stop(*args, **kwargs):
        raise SystemExit("the checks let the flags through")

    monkeypatch.setattr("experiments.harness.require_root", stop)
    monkeypatch.setattr("experiments.harness.Run", stop)


def _refused(main, argv, capsys) -> str:
    """The one error line ``main(argv)`` exits with (status 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, (exit_.value.code, err)
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name", MODULES)
def test_every_command_helps_with_every_default_and_every_library_says_it_is_none(name, capsys):
    """``--help`` printed nothing of several options' defaults (cassini_repeats --runs,
    placement --candidates, ...), and ``python -m`` on a library printed nothing, exit 0."""
    module = _module(name)
    if not hasattr(module, "main"):
        with warnings.catch_warnings():  # runpy: the module is imported already (here)
            warnings.simplefilter("ignore", RuntimeWarning)
            with pytest.raises(SystemExit) as exit_:
                runpy.run_module(f"experiments.{name}", run_name="__main__")
        err = capsys.readouterr().err
        assert exit_.value.code == 2
        assert err.count("\n") == 1 and f"experiments.{name}: a library, not a command" in err
        return
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0 and f"-m experiments.{name}" in capsys.readouterr().out
    parser = _parser(module)
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = "/".join(action.option_strings) or action.dest
        assert action.help, f"{name} {flag}: no help line"
        shown = formatter._expand_help(action)
        assert _shows_no_default(action) or "default" in shown, f"{name} {flag}: {shown!r}"


@pytest.mark.parametrize("name", _experiments())
def test_every_experiment_refuses_an_out_it_cannot_write_before_running(
    name, tmp_path, capsys, nothing_runs
):
    """``--out`` under a file was a NotADirectoryError traceback (as root, or with no root
    needed) after the checks, from creating the folder."""
    afile = tmp_path / "afile"
    afile.write_text("")
    main = _module(name).main
    for out in (afile / "sub", afile):
        line = _refused(main, [*NEEDS.get(name, []), "--out", str(out)], capsys)
        assert f"--out: {out}" in line and "a file" in line, line


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--priority-levels", "0"], "--priority-levels: at least 1, got 0"),
        (["--priority-levels", "-3"], "--priority-levels: at least 1"),
        (["--jobs", "0"], "--jobs: at least 1"),
        (["--load", "0"], "--load: a finite number above 0"),
        (["--load", "nan"], "--load"),
        (["--load", "-0.5"], "--load"),
        # a typo ran the schemes before it (results.json with two rows), then died
        (["--setup", "0", "--schemes", "themis,themis+cassini,themis+mltpc"],
         "--schemes[2]: "),
        (["--schemes", "themis,themis"], "--schemes[1]: 'themis' repeats --schemes[0]"),
        (["--schemes", ","], "--schemes[0]: "),
    ],
)
def test_cluster_scale_refuses_counts_and_loads_no_run_takes(
    argv, named, tmp_path, capsys, nothing_runs
):
    """``--priority-levels 0`` ran the ideal scheme, wrote results.json and then died with
    ``ValueError: k must be >= 1`` (exit status 1)."""
    from experiments import cluster_scale

    line = _refused(cluster_scale.main, [*argv, "--out", str(tmp_path / "o")], capsys)
    assert named in line, line
    assert not (tmp_path / "o").exists()
