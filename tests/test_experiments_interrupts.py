"""The experiments' harness when a run is cut short or its --out is odd: Ctrl-C is one line
and exit status 130 (a 30-60 line traceback until 2026-11), nothing half-written, no
empty --out folder left by a run that stopped early, ``--out ""`` refused; and
sim_vs_packet's output folder after a rerun, its --scale check and its verdict text."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest

from cassini.errors import InputError
from experiments import common, harness
from experiments import sim_vs_packet as svp
from experiments.harness import Experiment, Run

ROOT = Path(__file__).resolve().parent.parent

#: a toy experiment through the real harness: saves its results after every step, says
#: "started" on stderr once the first is saved, and runs until it is interrupted
TOY = textwrap.dedent(
    """
    import sys, time
    from experiments.harness import Experiment

    def run(r):
        for step in range(600):
            r.save({"steps": step + 1})
            if step == 0:
                print("started", file=sys.stderr, flush=True)
            time.sleep(0.05)

    sys.exit(Experiment("toy", "toy", run, needs_root=False).main())
    """
)


def _interrupt(argv: list[str], started: str, cwd: Path = ROOT) -> tuple[int, list[str]]:
    """Run ``argv``; once a line of stderr starts with ``started``, SIGINT; the exit
    status and the stderr lines that followed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a suite started in the background (nohup, CI) has SIGINT ignored, and a child
    # inherits that: Python then never raises KeyboardInterrupt.  The child gets the
    # default back, as a terminal's Ctrl-C would find it.
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith(started):
                break
        else:
            pytest.fail(f"{argv}: never printed {started!r}")
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        return proc.wait(timeout=30), rest.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_is_one_line_saying_what_was_written_and_exit_130(tmp_path):
    """The reviewer's ``timeout -s INT 3 python -m experiments.<x>``: a traceback wall and
    death by SIGINT; now one line and 130, the results file whole."""
    out = tmp_path / "out"
    code, err = _interrupt([sys.executable, "-c", TOY, "--out", str(out)], "started")
    assert code == 130, err
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert re.fullmatch(
        rf"python -m experiments.toy: interrupted: wrote results.json under {out} before the "
        r"interrupt; what had not finished was not written",
        err[0],
    ), err
    assert json.loads((out / "results.json").read_text())["steps"] >= 1
    assert [p.name for p in out.iterdir()] == ["results.json"]  # no temporary left


def test_ctrl_c_on_cluster_scale_mid_run(tmp_path):
    """The reviewer's reproduction: cluster_scale (default small run, ~2 s a setup)
    interrupted once its first setup has started."""
    out = tmp_path / "x"
    argv = [sys.executable, "-m", "experiments.cluster_scale", "--setup", "0", "--out", str(out)]
    code, err = _interrupt(argv, "== ")
    assert code == 130, err
    last = [line for line in err if not line.startswith("   ")]  # its per-scheme progress
    assert len(last) == 1 and "Traceback" not in "\n".join(err), err
    assert last[0].startswith("python -m experiments.cluster_scale: interrupted: "), err


def _toy(run, name: str = "toy") -> Experiment:
    return Experiment(name, "toy", run, needs_root=False)


def _main(experiment: Experiment, argv: list[str]) -> int:
    """``experiment.main(argv)``; an interrupt escaping it fails the test (not the session)."""
    try:
        return experiment.main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main")


def test_an_interrupt_before_anything_is_written_leaves_no_out_folder(tmp_path, capsys):
    def run(r: Run):
        raise KeyboardInterrupt

    out = tmp_path / "a" / "b"
    assert _main(_toy(run), ["--out", str(out)]) == 130
    err = capsys.readouterr().err.splitlines()
    assert err == [f"python -m experiments.toy: interrupted: nothing written, {out} not made"]
    assert not (tmp_path / "a").exists()


def test_an_interrupt_names_only_what_this_run_wrote(tmp_path, capsys):
    (tmp_path / "old.png").write_text("earlier run")
    (tmp_path / "results.json").write_text("{}")

    def run(r: Run):
        r.save({"x": 1})
        raise KeyboardInterrupt

    assert _main(_toy(run), ["--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "wrote results.json under" in err[0] and "old.png" not in err[0]


def test_an_interrupt_while_results_are_written_leaves_the_earlier_file(tmp_path, monkeypatch):
    """``write_json`` wrote in place: Ctrl-C mid-write left a truncated results.json."""
    path = tmp_path / "results.json"
    path.write_text('{"old": true}\n')
    real = Path.write_text

    def half_then_interrupt(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        common.write_json(path, {"new": list(range(100))})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_an_input_error_while_running_leaves_no_empty_out_folder(tmp_path, capsys):
    def run(r: Run):
        raise InputError("--scale", "must be > 0")

    out = tmp_path / "v1" / "sub"
    assert _toy(run).main(["--out", str(out)]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert not (tmp_path / "v1").exists()


def test_an_empty_out_is_refused_not_taken_for_the_default(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(harness, "RESULTS", tmp_path)
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    runs = []
    for empty in ("", " "):
        with pytest.raises(SystemExit) as e:
            _toy(runs.append).main(["--out", empty])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "error: --out: empty" in err, err
    assert runs == [] and not any(tmp_path.iterdir())


def test_the_out_help_says_an_existing_folder_s_results_are_replaced(capsys):
    with pytest.raises(SystemExit):
        svp.main(["--help"])
    text = " ".join(capsys.readouterr().out.replace("``", "").split())
    assert "replaces its results file whole" in text
    assert "existing --out replaces its results" in text


# -- sim_vs_packet, without ns-3: its scenarios replaced by a stand-in ----------------------
def _fake_scenario(run, scenario, report, save=None):
    """One scheme of two jobs, as run_scenario records them, saved as it saves."""
    jobs = {
        j: {"fluid_s": 1.05, "packet_s": 1.0, "dedicated_s": 1.0, "ratio": 1.05}
        for j in ("j00", "j01")
    }
    out = {"note": scenario.note, "schemes": {"themis": {"packet_cpu_s": 0.1, "jobs": jobs}}}
    report["scenarios"][scenario.name] = out
    save = save or (lambda: run.save(report))
    save()
    svp.summarise(out)
    save()
    return out


@pytest.fixture
def no_ns3(monkeypatch):
    monkeypatch.setattr(svp, "run_scenario", _fake_scenario)
    monkeypatch.setattr(svp, "plot", lambda out, path, title: path.write_bytes(b"png"))


def test_a_rerun_into_the_same_out_leaves_only_its_own_plots(tmp_path, no_ns3):
    """fat-tree-k4 then two-tier-32 into one --out left scatter_fat-tree-k4.png beside a
    results.json listing two-tier-32 only."""
    for name in ("fat-tree-k4", "two-tier-32"):
        assert svp.main(["--scenarios", name, "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "scatter_two-tier-32.png"]
    assert list(json.loads((tmp_path / "results.json").read_text())["scenarios"]) == [
        "two-tier-32"
    ]


def test_the_verdict_is_printed_as_text_not_a_dict(tmp_path, no_ns3, capsys):
    assert svp.main(["--scenarios", "fat-tree-k4", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "{'" not in out and "verdict: schemes' mean slowdown within 10%: met" in out, out
    assert "jobs' mean iteration within 20%: met (100% of jobs, target 90%)" in out
    assert "ranking packet: themis" in out
    assert "verdict" in json.loads((tmp_path / "results.json").read_text())["scenarios"][
        "fat-tree-k4"
    ]


@pytest.mark.parametrize("scale", ["0", "-1", "nan"])
def test_a_bad_scale_is_refused_by_its_flag_before_anything_runs(tmp_path, scale, capsys,
                                                                 monkeypatch):
    """``--scale 0`` ran the first scheme, then stopped naming "scale" and left an empty
    --out folder."""
    monkeypatch.setattr(svp, "run_scenario", lambda *a, **k: pytest.fail("it ran"))
    with pytest.raises(SystemExit) as e:
        svp.main(["--scale", scale, "--out", str(tmp_path / "v1")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error: --scale: a finite number above 0" in err, err
    assert not (tmp_path / "v1").exists()


# -- ns-3's Node: no Python code when a Node view is deleted --------------------------------
@pytest.mark.same_worker("ns-3")
def test_deleting_a_node_view_runs_no_python_code_and_frees_it():
    """load_ns gave Node a Python ``__del__`` (a lambda keeping every view in a list): a
    Ctrl-C landing in it was swallowed ("Exception ignored in ... <lambda>") and the run
    went on."""
    from conftest import require

    from cassini.packet import ns3env

    require(ns3env.available(), "ns-3 bindings (the [packet] extra; run make setup)")
    ns = ns3env.load_ns()
    nodes = ns.NodeContainer()
    nodes.Create(1)
    view = nodes.Get(0).__deref__()  # what ``ptr.GetObject[...]`` goes through
    assert type(view).__name__ == "Node" and not view.__python_owns__
    alive = weakref.ref(view)
    calls: list[str] = []
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name)
                   if event == "call" else None)
    try:
        del view
    finally:
        sys.setprofile(None)
    gc.collect()
    assert calls == [] and alive() is None
    assert nodes.Get(0).GetId() == 0  # the node itself is ns-3's, untouched


def test_the_cassini_split_usage_config_exists_from_the_repository_root():
    """Its usage suggested ``--config sim_1024.yaml``, refused as no such file."""
    doc = (ROOT / "benchmarks" / "cassini_split.py").read_text()
    configs = re.findall(r"--config (\S+?)\]", doc)
    assert configs and all((ROOT / c).is_file() for c in configs), configs

