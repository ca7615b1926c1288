"""`make demo` as a newcomer meets it (review of 2026-11-29): the MLTCP-left-loaded
notice the quiet experiments swallowed, part 1's p99 counting the start-up, a table whose
rows said nothing of what they are, progress counters that began at the previous run's
final count under no scheme's name, and two durations.  No testbed runs: the runner's
schemes, the cluster and the plots are stood in for."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from experiments import common, demo
from experiments.harness import Run
from testbed.results import ExperimentResult, JobResult, SchemeResult

ROOT = Path(__file__).resolve().parent.parent


def scheme(name: str, kind: str, cc: str, times: dict[str, list[float]]) -> SchemeResult:
    jobs = {
        j: JobResult(j, tuple(t), 1_000_000, (Path(f"{j}-rank0.jsonl"),)) for j, t in times.items()
    }
    return SchemeResult(name, kind, cc, "fair", jobs)


# -- item 1: the notice that a run loaded MLTCP and left it loaded ------------------


def test_run_config_says_mltcp_was_left_loaded_once_and_names_each_scheme(
    monkeypatch, capsys, tmp_path
):
    """run_config ran the runner with a progress that dropped every line, the notice of
    ensure_cc included; the scheme lines that say what the counters count went too."""
    from mltcp import admin, variants
    from testbed.run import experiment, session
    from testbed.run.schemes import Scheme

    loaded: list[str] = []
    have = lambda: ("reno", "cubic", *loaded)  # noqa: E731
    monkeypatch.setattr(session, "available_congestion_controls", have)
    monkeypatch.setattr(experiment, "available_congestion_controls", have)
    monkeypatch.setattr(admin, "load", lambda **_kw: loaded.extend(variants.CCS))

    class Counted(Scheme):
        def __init__(self, kind: str, first: bool = False) -> None:
            self.kind, self.runs_first = kind, first

        def run(self, state, spec):
            state.say("  a 8/8 b 8/8")  # a counter line, as without a terminal
            state.say("  cassini shifts: none")  # the planner's detail
            cc = self.congestion_control(state.cfg, spec)
            return scheme(spec.name, spec.kind, cc, {"a": [0.1, 0.1]})

    for kind, first in (("ideal", True), ("baseline", False), ("mltcp", False)):
        monkeypatch.setitem(experiment.SCHEMES, kind, Counted(kind, first))
    cfg = common.filling_config("ecn", "dctcp_bpf", "mltcp_dctcp", 8)
    common.run_config(cfg, tmp_path / "one", "first")
    common.run_config(cfg, tmp_path / "two", "second: loaded already, nothing to say")
    err = capsys.readouterr().err
    assert err.count(session.MLTCP_LEFT_LOADED) == 1, err
    for line in ("[1/3] ideal: ideal scheme", "[2/3] dctcp_bpf: baseline scheme"):
        assert err.count(f"\n{line}\n") == 2, err
    assert "8/8" not in err and "cassini shifts" not in err, err


# -- item 4: the previous run's logs at a session's start ---------------------------


def test_a_session_starts_without_the_previous_runs_logs(monkeypatch, tmp_path):
    """Only the ready files went: the counters showed the last run's 25/25, then 0/25."""
    from testbed.run import load_config, session
    from testbed.run.report import wait_with_progress

    cfg = load_config(common.job_set_config("pair", "fair", 25, ["baseline"]))
    monkeypatch.setattr(session, "ensure_cc", lambda cc, say=None: False)
    monkeypatch.setattr(session.Session, "_bring_up", lambda self: None)
    logs = tmp_path / "baseline"
    logs.mkdir()
    for job in ("j1", "j2"):
        for rank in (0, 1):
            (logs / f"{job}-rank{rank}.jsonl").write_text("{}\n" * 25)
            (logs / f"{job}-rank{rank}.jsonl.ready").touch()
    with session.Session(cfg, cfg.schemes[0], "cubic", logs) as s:
        assert sorted(p.name for p in logs.iterdir()) == []
        rank0 = {j: paths[0] for j, paths in s.logs.items()}
        said: list[str] = []

        class Done:  # a worker that has exited 0
            def poll(self):
                return 0

            def wait(self, timeout=None):
                return 0

        wait_with_progress([Done()], rank0, {"j1": 25, "j2": 25}, 10.0, said.append)
    assert said == ["  j1 0/25 j2 0/25"]


# -- items 2 and 3: what the rows count and mean ------------------------------------


def part1(startup_s: float = 0.196) -> ExperimentResult:
    """Experiment 1's three schemes, 24 counted iterations a job; CASSINI's j1 pays one
    start-up re-alignment in its first."""
    alone = {"j1": [0.104] * 24, "j2": [0.108] * 24}
    together = {"j1": [0.14] * 24, "j2": [0.15] * 24}
    held = {"j1": [startup_s] + [0.11] * 23, "j2": [0.115] * 24}
    return ExperimentResult(
        {
            "ideal": scheme("ideal", "ideal", "cubic", alone),
            "baseline": scheme("baseline", "baseline", "cubic", together),
            "cassini": scheme("cassini", "cassini", "cubic", held),
        },
        {},
    )


def part2() -> ExperimentResult:
    """Experiment 2's schemes, 44 counted iterations a job: job a alone is the faster."""
    alone = {"a": [0.15] * 29 + [0.11] * 15, "b": [0.13] * 29 + [0.12] * 15}
    return ExperimentResult(
        {
            "ideal": scheme("ideal", "ideal", "dctcp_bpf", alone),
            "dctcp_bpf": scheme(
                "dctcp_bpf", "baseline", "dctcp_bpf", {"a": [0.2] * 44, "b": [0.2] * 44}
            ),
            "mltcp_dctcp": scheme(
                "mltcp_dctcp", "mltcp", "mltcp_dctcp", {"a": [0.11] * 44, "b": [0.121] * 44}
            ),
        },
        {},
    )


def test_the_ideal_row_is_its_own_reference_in_both_parts():
    """Part 2's ideal row pooled both jobs' last 15 against the faster job's median over
    all 44 (1.26 / 1.12 in the review's runs); part 1's p99 was the mean of each job's."""
    for rows in (demo.rows_of(part1(), "1", 5), demo.rows_of(part2(), "2", 29, identical=True)):
        ideal = next(r for r in rows if r["scheme"] == "ideal")
        assert ideal["mean_vs_ideal"] == pytest.approx(1.0)
        assert ideal["p99_vs_ideal"] == pytest.approx(1.0)
    rows = {r["scheme"]: r for r in demo.rows_of(part2(), "2", 29, identical=True)}
    assert rows["ideal"]["mean_ms"] == pytest.approx(110.0)  # job a's last 15 alone
    assert rows["mltcp_dctcp"]["mean_vs_ideal"] == pytest.approx(0.1155 / 0.11)
    assert rows["dctcp_bpf"]["p99_vs_ideal"] == pytest.approx(0.2 / 0.11)


def run_demo(monkeypatch, tmp_path, capsys) -> tuple[list[str], list[str], dict]:
    """The demo on stand-in results: its stderr lines, its stdout lines and its JSON."""
    results = {"1/2": part1(), "2/2": part2()}
    monkeypatch.setattr(demo, "run_config", lambda cfg, where, label: results[label[:3]])
    monkeypatch.setattr(demo, "calibrate_comm_s", lambda *args: 0.05)
    monkeypatch.setattr(demo, "plot_timeline", lambda *args, **kw: None)
    monkeypatch.setattr(demo, "plot_cdf", lambda *args, **kw: None)
    run = Run(argparse.Namespace(), tmp_path)
    demo.run_demo(run)
    out, err = capsys.readouterr()
    return err.splitlines(), out.splitlines(), json.loads(run.results_path.read_text())


def test_part_1_leaves_out_every_schemes_start_up(monkeypatch, tmp_path, capsys):
    """One 196 ms start-up iteration was CASSINI's whole p99 (48 samples: the max)."""
    _, out, saved = run_demo(monkeypatch, tmp_path, capsys)
    cassini = next(r for r in saved["rows"] if r["scheme"] == "cassini")
    assert cassini["p99_ms"] == pytest.approx(115.0)
    assert cassini["experiment"] == f"1 cassini (fair), after {demo.STARTUP}"
    assert demo.STARTUP >= 1
    row = next(line for line in out if line.startswith("1 cassini") and " cassini " in line)
    assert "196" not in row and f"after {demo.STARTUP}" in row


def test_the_table_says_what_its_rows_are(monkeypatch, tmp_path, capsys):
    _, out, saved = run_demo(monkeypatch, tmp_path, capsys)
    header = next(i for i, line in enumerate(out) if line.startswith("experiment"))
    body = out[header + 1 : header + 7]
    assert "note" not in out[header].split()  # nothing filled it
    assert [line.split("  ")[1].strip() for line in body].count("same start") == 1
    assert not any(" baseline " in line for line in body)
    for line in body:
        if " ideal " in line:
            assert line.split()[-2:] == ["1.00", "1.00"], line
    legend = out[header + 7]
    assert legend == demo.LEGEND
    assert all(word in legend for word in ("ideal: each job alone", "same start:", "p99/ideal"))
    assert any(r["scheme"] == "baseline" for r in saved["rows"])  # the JSON keeps its key


def test_the_note_column_shows_when_a_row_has_a_note(capsys, tmp_path):
    rows = demo.rows_of(part1(), "1", demo.STARTUP)
    rows[2]["note"] = "declined: baseline's run, not re-run"
    demo.show_table(Run(argparse.Namespace(), tmp_path), rows)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-1] == "note" and out[3].endswith("not re-run")


# -- item 5: how long it takes -------------------------------------------------------


def test_the_readme_help_and_the_run_agree_on_about_a_minute(monkeypatch, tmp_path, capsys):
    assert demo.DURATION == "about a minute"
    help_text = demo.EXPERIMENT.parser().format_help()
    assert f"({demo.DURATION})" in help_text and "a few minutes" not in help_text
    readme = (ROOT / "README.md").read_text()
    assert f"**What `make demo` shows** ({demo.DURATION})" in readme
    err, _, _ = run_demo(monkeypatch, tmp_path, capsys)
    assert err[0].endswith(
        f"demo: experiments 1 (CASSINI) and 2 (MLTCP) on the emulated cluster, {demo.DURATION}"
    )
