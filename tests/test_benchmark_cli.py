"""The benchmark scripts under ``benchmarks/`` as command-line tools: a bad value exits 2
with one error line naming the flag, before anything runs or is written; help explains
the flags, units and columns; targets agree with the README's headlines; progress goes to
stderr only; nothing is left half-written.

Most cases run a script's ``main()`` in this process with ``sys.argv`` set and the costly
parts (simulations, timed runs, servers, network setup) replaced by :func:`ran`, which
fails the test: a value the script should refuse never reaches them.  A few run the script
as a subprocess with tiny arguments.  ``bench_mltcp_overhead.py`` needs root: it is only
ever run here with its privileged parts replaced (or with ``--help``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


@functools.cache
def script(name: str) -> types.ModuleType:
    """``benchmarks/NAME.py`` as a module (loaded once per test process)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_cli_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ran(*args: Any, **kwargs: Any) -> Any:
    """Stands in for a costly part: reaching it fails the test."""
    raise AssertionError("the benchmark went on: the bad value was not refused up front")


def call_main(monkeypatch, name: str, argv: list[str]) -> Any:
    """``main()`` of script ``name`` as ``python benchmarks/NAME.py ARGV...``."""
    monkeypatch.setattr(sys, "argv", [str(BENCH / f"{name}.py"), *argv])
    return script(name).main()


def error_line(stderr: str) -> str:
    """The one line of ``stderr`` that is not argparse's usage text (usage: and its
    indented continuation lines); fails unless there is exactly one."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    problems = [line for line in lines if not line.startswith(("usage:", " "))]
    assert len(problems) == 1, f"expected one error line, got:\n{stderr}"
    return problems[0]


def assert_refused(monkeypatch, capsys, name: str, argv: list[str], flag: str) -> str:
    """``NAME.py ARGV`` exits 2 with one error line naming ``flag``; returns the line."""
    with pytest.raises(SystemExit) as exit_:
        call_main(monkeypatch, name, argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    line = error_line(err)
    assert "error" in line and flag in line, line
    return line


def help_text(monkeypatch, capsys, name: str) -> str:
    """``NAME.py --help``, whitespace collapsed."""
    with pytest.raises(SystemExit) as exit_:
        call_main(monkeypatch, name, ["--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def flag_help(text: str, flag: str) -> str:
    """The help text of ``flag`` in collapsed ``--help`` output ('' when it has none)."""
    metavar = r"(?: [A-Z_]+(?: \[[A-Z_ .]+\])?)?"
    found = re.search(
        rf"(?<![\w-]){re.escape(flag)}{metavar} (.*?)(?= --|$)", text.split("options:", 1)[1]
    )
    return found.group(1) if found else ""


def run_script(name: str, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


# --- 1. bad counts and values ---------------------------------------------------------


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--repeat", "0"], "--repeat"),
        (["--repeat", "-1"], "--repeat"),
        (["--scales", "0"], "--scales"),
        (["--scales", "-1"], "--scales"),
        (["--jobs", "0"], "--jobs"),
        (["--jobs", "-5"], "--jobs"),
        (["--candidates", "0"], "--candidates"),
        (["--precision-deg", "0"], "--precision-deg"),
        (["--seed", "-1"], "--seed"),
    ],
)
def test_bench_advisor_refuses_bad_counts(monkeypatch, capsys, argv, flag):
    monkeypatch.setattr(script("bench_advisor"), "run", ran)
    assert_refused(monkeypatch, capsys, "bench_advisor", argv, flag)


def test_bench_advisor_reports_no_shared_link_without_crashing():
    """40 jobs, 2 candidates: no link carries two jobs (ZeroDivisionError before)."""
    small = ("--jobs", "40", "--candidates", "2", "--scales", "1", "--repeat", "1")
    text = run_script("bench_advisor", *small)
    assert text.returncode == 0, text.stderr
    assert "0 shared links per candidate" in text.stdout
    assert "no link is shared" in text.stdout
    figures = json.loads(run_script("bench_advisor", *small, "--json").stdout)
    assert figures["shared_links_per_candidate"] == 0
    assert set(figures["ms_per_shared_link"].values()) == {None}


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--iterations", "5"], "--iterations"),
        (["--iterations", "0"], "--iterations"),
        (["--iterations", "-3"], "--iterations"),
        (["--step-ms", "0"], "--step-ms"),
        (["--step-ms", "-1"], "--step-ms"),
    ],
)
def test_bench_timeshift_refuses_bad_values(monkeypatch, capsys, argv, flag):
    fake_torch(monkeypatch, ran)
    line = assert_refused(monkeypatch, capsys, "bench_timeshift", argv, flag)
    if flag == "--iterations":
        assert "at least 6" in line  # the first 5 are start-up and left out


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--jobs", "0"], "--jobs"),
        (["--jobs", "-5"], "--jobs"),
        (["--load", "0"], "--load"),
        (["--load", "-1"], "--load"),
        (["--target", "0"], "--target"),
        (["--target", "-5"], "--target"),
        (["--schedulers", "bogus"], "--schedulers"),
        (["--config", "/nonexistent.yaml"], "--config"),
    ],
)
def test_bench_sim_refuses_bad_values(monkeypatch, capsys, argv, flag):
    monkeypatch.setattr(script("bench_sim"), "warm_up", ran)
    monkeypatch.setattr(script("bench_sim"), "timed", ran)
    assert_refused(monkeypatch, capsys, "bench_sim", argv, flag)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--jobs", "0"], "--jobs"),
        (["--jobs", "-2"], "--jobs"),
        (["--config", "/nonexistent.yaml"], "--config"),
        (["--scheduler", "bogus"], "--scheduler"),
    ],
)
def test_cassini_split_refuses_bad_values(monkeypatch, capsys, argv, flag):
    monkeypatch.setattr(script("cassini_split"), "timed_parts", ran)
    assert_refused(monkeypatch, capsys, "cassini_split", argv, flag)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--clients", "0"], "--clients"),
        (["--clients", "4", "-1"], "--clients"),
        (["--seconds", "0"], "--seconds"),
        (["--seconds", "-1"], "--seconds"),
        (["--models", "0"], "--models"),
        (["--models", "999"], "--models"),
        (["--jobs", "-1"], "--jobs"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_bench_service_refuses_bad_values(monkeypatch, capsys, argv, flag):
    bench = script("bench_service")
    for part in ("start_server", "measure_http", "measure_in_process"):
        monkeypatch.setattr(bench, part, ran)
    line = assert_refused(monkeypatch, capsys, "bench_service", argv, flag)
    if argv == ["--models", "999"]:
        assert "13" in line  # the models the library has


@pytest.mark.parametrize(
    "argv, flag",
    [
        ([".", "--rounds", "0"], "--rounds"),
        (["/nonexistent/tree"], "BEFORE_TREE"),
        ([".", "/nonexistent/tree"], "AFTER_TREE"),
    ],
)
def test_refine_before_after_refuses_bad_values(monkeypatch, capsys, argv, flag):
    monkeypatch.setattr(script("refine_before_after"), "cases", ran)
    argv = [str(ROOT) if a == "." else a for a in argv]
    assert_refused(monkeypatch, capsys, "refine_before_after", argv, flag)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--tree", "before"], "--tree"),
        (["--tree", "=."], "--tree"),
        (["--tree", "x=/nonexistent"], "--tree"),
        (["--tree", "a=.", "--tree", "b=/nonexistent"], "--tree"),
        (["--tree", "a=.", "--rounds", "0"], "--rounds"),
        (["--tree", "a=.", "--only", "bogus"], "--only"),
        (["--tree", "a=.", "--only", "sim_1024,sim_1024"], "--only"),
    ],
)
def test_sim_before_after_refuses_bad_values_and_writes_nothing(
    monkeypatch, capsys, tmp_path, argv, flag
):
    monkeypatch.setattr(script("sim_before_after"), "run_once", ran)
    out = tmp_path / "out"
    argv = [re.sub(r"=\.$", f"={ROOT}", a) for a in argv]
    assert_refused(monkeypatch, capsys, "sim_before_after", [*argv, "--out", str(out)], flag)
    assert not out.exists()


def test_sim_before_after_refuses_an_out_that_is_a_file(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(script("sim_before_after"), "run_once", ran)
    out = tmp_path / "out"
    out.write_text("keep me\n")
    argv = ["--tree", f"a={ROOT}", "--out", str(out)]
    assert_refused(monkeypatch, capsys, "sim_before_after", argv, "--out")
    assert out.read_text() == "keep me\n"


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--rounds", "0"], "--rounds"),
        (["--flows", "0"], "--flows"),
        (["--seconds", "0"], "--seconds"),
        (["--rate-mbps", "-1"], "--rate-mbps"),
    ],
)
def test_bench_mltcp_overhead_refuses_bad_values_before_any_setup(monkeypatch, capsys, argv, flag):
    bench = script("bench_mltcp_overhead")
    monkeypatch.setattr(bench.admin, "load", ran)
    for part in ("setup", "teardown", "sh"):
        monkeypatch.setattr(bench, part, ran)
    assert_refused(monkeypatch, capsys, "bench_mltcp_overhead", argv, flag)


@pytest.mark.parametrize(
    "name, argv, flag",
    [
        ("bench_advisor", ["--repeat", "0"], "--repeat"),
        ("bench_timeshift", ["--iterations", "0"], "--iterations"),
        ("bench_sim", ["--config", "/nonexistent.yaml"], "--config"),
        ("cassini_split", ["--config", "/nonexistent.yaml"], "--config"),
        ("bench_service", ["--models", "0"], "--models"),
        ("refine_before_after", ["/nonexistent/tree"], "BEFORE_TREE"),
        ("sim_before_after", ["--tree", "before", "--out", "{out}"], "--tree"),
    ],
)
def test_scripts_as_commands_exit_2_with_one_line(tmp_path, name, argv, flag):
    """The same refusals through ``python benchmarks/NAME.py`` itself (no traceback)."""
    out = tmp_path / "out"
    proc = run_script(name, *(a.format(out=out) for a in argv))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert flag in error_line(proc.stderr)
    assert not out.exists()


# --- 2. sim_before_after: a failed run ----------------------------------------------


def fake_tree(where: Path) -> Path:
    """A tree whose ``cassini sim run`` writes to stderr and exits 3."""
    (where / "cassini").mkdir(parents=True)
    (where / "cassini" / "__init__.py").write_text("")
    (where / "cassini" / "cli.py").write_text(
        "import sys\n\n\ndef entry():\n"
        "    print('line one of the trouble', file=sys.stderr)\n"
        "    print('boom from the fake tree', file=sys.stderr)\n"
        "    sys.exit(3)\n"
    )
    (where / "experiments" / "configs").mkdir(parents=True)
    (where / "experiments" / "configs" / "sim_1024.yaml").write_text("")
    return where


@pytest.mark.parametrize("out_exists", [False, True])
def test_sim_before_after_failed_run_says_why_and_leaves_nothing(
    monkeypatch, capsys, tmp_path, out_exists
):
    tree = fake_tree(tmp_path / "tree")
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
        (out / "mine.txt").write_text("kept\n")
    argv = ["--tree", f"bad={tree}", "--out", str(out), "--only", "sim_1024"]
    try:
        code = call_main(monkeypatch, "sim_before_after", argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code not in (0, None), err
    assert "boom from the fake tree" in err
    last = err.strip().splitlines()[-1]
    assert "bad" in last and "sim_1024" in last and "error" in last, last
    if out_exists:
        assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]  # no work/ left
    else:
        assert not out.exists()


# --- 3. repeated names ----------------------------------------------------------------


def test_bench_sim_refuses_a_scheduler_named_twice(monkeypatch, capsys):
    monkeypatch.setattr(script("bench_sim"), "warm_up", ran)
    monkeypatch.setattr(script("bench_sim"), "timed", ran)
    argv = ["--schedulers", "themis,ideal,themis"]
    line = assert_refused(monkeypatch, capsys, "bench_sim", argv, "--schedulers")
    assert "themis" in line


def test_sim_before_after_refuses_a_tree_label_given_twice(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(script("sim_before_after"), "run_once", ran)
    out = tmp_path / "out"
    argv = ["--tree", f"a={ROOT}", "--tree", f"a={ROOT}", "--out", str(out)]
    line = assert_refused(monkeypatch, capsys, "sim_before_after", argv, "--tree")
    assert "'a'" in line
    assert not out.exists()


# --- 4. bench_advisor's scales --------------------------------------------------------


def fake_figures(scale: int, *args: Any, **kwargs: Any) -> dict:
    ms = {"serial, reject": 2.0 * scale, "links only, no dedup": 4.0 * scale}
    return {
        "gpus": 1024 * scale, "gpus_used": 100, "jobs": 10, "candidates": 2,
        "shared_links_per_candidate": 3.0, "jobs_per_shared_link": {2: 3},
        "loops_per_candidate": 0.0, "accepted_candidates": {"reject": 2, "score": 2},
        "best": "c0", "best_score": 0.9, "ms_per_candidate": ms,
        "ms_per_candidate_runs": {k: [v] for k, v in ms.items()},
        "cpu_ms_per_candidate": ms, "ms_per_shared_link": ms,
    }  # fmt: skip


def test_bench_advisor_refuses_scales_out_of_order(monkeypatch, capsys):
    monkeypatch.setattr(script("bench_advisor"), "run", ran)
    line = assert_refused(monkeypatch, capsys, "bench_advisor", ["--scales", "2", "1"], "--scales")
    assert "ascending" in line


def test_bench_advisor_scaling_compares_the_largest_to_the_smallest(monkeypatch, capsys):
    monkeypatch.setattr(script("bench_advisor"), "run", fake_figures)
    call_main(monkeypatch, "bench_advisor", ["--scales", "1", "4", "16"])
    out = capsys.readouterr().out
    assert "scaling 1024 -> 16384 GPUs (x16)" in out
    assert re.search(r"serial, reject\s+time per candidate x16\.0", out)


# --- 5. help --------------------------------------------------------------------------


def test_bench_timeshift_help_is_whole_and_gives_units(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys, "bench_timeshift")
    assert "(a broadcast every step before anyone starts)." in text  # not cut mid-sentence
    assert "start-up" in flag_help(text, "--iterations")
    assert "milliseconds" in flag_help(text, "--step-ms")


def test_bench_sim_help_explains_units_columns_and_defaults(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys, "bench_sim")
    for words in ("seconds", "/target", "/ideal", "ref/cpu", "higher is better", "÷"):
        assert words in text, words
    assert "ideal,themis,themis+cassini" in flag_help(text, "--schedulers")
    assert "480" in text and "600" not in text


def test_bench_advisor_help_gives_every_flag_with_its_default(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys, "bench_advisor")
    for flag in ("--jobs", "--candidates", "--precision-deg", "--seed", "--scales", "--repeat"):
        assert "default" in flag_help(text, flag), flag
    assert "degrees" in flag_help(text, "--precision-deg")
    assert re.search(r"speed vs baseline.{0,20} the baseline's time divided by the row's", text)


def test_bench_advisor_table_says_what_speed_vs_baseline_is(monkeypatch, capsys):
    monkeypatch.setattr(script("bench_advisor"), "run", fake_figures)
    call_main(monkeypatch, "bench_advisor", ["--scales", "1"])
    out = capsys.readouterr().out
    assert "speed vs baseline = baseline's time ÷ the row's" in out
    assert re.search(r"serial, reject .* 2\.00x", out)


def test_bench_mltcp_overhead_help_gives_every_flag_with_its_default(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys, "bench_mltcp_overhead")
    for flag in ("--flows", "--rate-mbps", "--seconds", "--rounds"):
        assert "default" in flag_help(text, flag), flag
    assert "Mbit/s" in flag_help(text, "--rate-mbps")


# --- 6. targets as the README's headlines give them -----------------------------------


def test_bench_advisor_states_the_headline_scaling_target():
    from experiments.headlines import BY_ID

    limit = BY_ID["advisor_16k_scaling"].target.value
    doc = " ".join(script("bench_advisor").__doc__.split())
    assert f"at most {limit:g}x the time" in doc
    assert "20x" not in doc


def sim_output(monkeypatch, capsys, argv: list[str]) -> str:
    """bench_sim.py's stdout with every simulation replaced by a fixed row."""
    bench = script("bench_sim")
    row = {
        "wall_s": 1.0, "cpu_s": 1.0, "network_evaluations": 1, "network_events": 1,
        "events_per_s": 1.0, "network_window_s": 1.0, "placements_advised": 0,
        "mean_slowdown": 1.0, "p99_slowdown": 1.0,
    }  # fmt: skip
    monkeypatch.setattr(bench, "warm_up", lambda *a, **k: None)
    monkeypatch.setattr(bench, "timed", lambda *a, **k: dict(row))
    call_main(monkeypatch, "bench_sim", [*argv, "--jobs", "5", "--schedulers", "themis"])
    return capsys.readouterr().out


def test_bench_sim_16k_target_is_the_readme_headline(monkeypatch, capsys):
    from experiments.headlines import BY_ID

    config = str(ROOT / "experiments/configs/sim_16k.yaml")
    got = json.loads(sim_output(monkeypatch, capsys, ["--config", config, "--json"]))
    assert got["target_s"] == BY_ID["sim_16k"].target.value == 480
    assert "sim_16k" in got["target_source"]
    text = sim_output(monkeypatch, capsys, ["--config", config])
    assert "target 480 s (README headline sim_16k" in text


def test_bench_sim_says_which_target_applies_and_why(monkeypatch, capsys, tmp_path):
    config = tmp_path / "mine.yaml"
    shutil.copy(ROOT / "experiments/configs/sim_1024.yaml", config)
    text = sim_output(monkeypatch, capsys, ["--config", str(config)])
    assert "target 20 s (default: config mine has no target of its own)" in text
    text = sim_output(monkeypatch, capsys, ["--config", str(config), "--target", "7"])
    assert "target 7 s (--target)" in text
    text = sim_output(monkeypatch, capsys, [])
    assert "target 20 s (issue 22 §3" in text


# --- 7. progress on stderr --------------------------------------------------------------


def test_bench_advisor_prints_progress_on_stderr_only():
    small = ("--jobs", "5", "--candidates", "1", "--scales", "1", "--repeat", "2", "--json")
    proc = run_script("bench_advisor", *small)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # stdout is the JSON document alone
    lines = proc.stderr.strip().splitlines()
    assert len(lines) >= 3, proc.stderr  # draw, warm-up, a line per timing round
    assert any("timing 2/2" in line for line in lines), proc.stderr


class FakeServer:
    def send_signal(self, sig: int) -> None:
        pass

    def wait(self, timeout: float) -> int:
        return 0


def fake_service(monkeypatch) -> None:
    """bench_service.py with no server, no clients: every request answers at once, and
    no request completes in a load run (latencies None)."""
    bench = script("bench_service")
    monkeypatch.setattr(bench, "start_server", lambda *a, **k: (FakeServer(), 1))
    monkeypatch.setattr(bench, "send_once", lambda port, req: (200, 0.001))
    none = {"requests": 0, "req_per_s": 0.0, "p50_ms": None, "p99_ms": None, "errors": 0,
            "error_kinds": []}  # fmt: skip
    monkeypatch.setattr(bench, "load", lambda port, r, clients, s: {"clients": clients, **none})

    def in_process(doc, bodies, figures):
        timing = {"calls": 1, "mean_ms": 1.0, "p50_ms": 1.0, "p99_ms": 1.0}
        figures["in_process"] = {"advise": timing, "prioritize": timing}
        figures["in_process_prioritize_cold_ms_per_model"] = 1.0

    monkeypatch.setattr(bench, "measure_in_process", in_process)


def test_bench_service_prints_progress_on_stderr_only(monkeypatch, capsys):
    fake_service(monkeypatch)
    argv = ["--clients", "1", "2", "--seconds", "0.1", "--models", "1", "--jobs", "2"]
    call_main(monkeypatch, "bench_service", [*argv, "--json"])
    captured = capsys.readouterr()
    figures = json.loads(captured.out)  # stdout is the JSON document alone
    assert [r["clients"] for r in figures["http"]["writes"]] == [1, 2]
    lines = captured.err.strip().splitlines()
    assert len(lines) >= 6, captured.err  # cluster, server, cold, 2 x reads, 2 x writes, ...
    assert any("writes, 2 client(s)" in line for line in lines), captured.err


def test_bench_service_table_shows_a_run_without_answers(monkeypatch, capsys):
    fake_service(monkeypatch)
    call_main(monkeypatch, "bench_service", ["--clients", "1", "--seconds", "0.1", "--models", "1"])
    out = capsys.readouterr().out
    assert re.search(r"^advise\s+1\s+0\.0\s+-\s+-\s+0$", out, re.M), out


# --- 8. bench_timeshift's temporary folder --------------------------------------------


def fake_torch(monkeypatch, spawn) -> None:
    """``torch.multiprocessing.spawn`` is ``spawn`` (no torch imported, no rank run)."""
    mp = types.ModuleType("torch.multiprocessing")
    mp.spawn = spawn
    torch = types.ModuleType("torch")
    torch.multiprocessing = mp
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.multiprocessing", mp)


def written_costs(fn, args, nprocs, join):
    """What the two ranks write: per exchange, costs of the iterations after start-up."""
    port, options, out = args
    for rank in range(nprocs):
        costs = [1e-4] * (options.iterations - 5)
        Path(f"{out}.{rank}").write_text(json.dumps({"ahead": costs, "sync": costs}))


def failed_rank(fn, args, nprocs, join):
    written_costs(fn, args, 1, join)
    raise RuntimeError("rank 1 failed")


@pytest.mark.parametrize("spawn", [written_costs, failed_rank])
def test_bench_timeshift_removes_its_temporary_folder(monkeypatch, capsys, tmp_path, spawn):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    fake_torch(monkeypatch, spawn)
    if spawn is failed_rank:
        with pytest.raises(RuntimeError, match="rank 1 failed"):
            call_main(monkeypatch, "bench_timeshift", ["--iterations", "8", "--json"])
    else:
        call_main(monkeypatch, "bench_timeshift", ["--iterations", "8", "--json"])
        got = json.loads(capsys.readouterr().out)
        assert got["iterations"] == 8
        assert got["modes"]["ahead"]["rank1"]["median_s"] == 1e-4
    assert list(tmp.iterdir()) == []


def test_sim_before_after_masks_what_differs_between_trees_only():
    masked = script("sim_before_after").masked
    results = {"config": "/tmp/tree/sim.yaml", "summary": [{"wall_s": 1.5, "mean_x": 1.2}]}
    assert masked(results) == {"config": "masked", "summary": [{"wall_s": "masked", "mean_x": 1.2}]}


# --- 9. what a run measures (review of 2026-11-29) --------------------------------------


@pytest.mark.parametrize(
    "argv, network",
    [
        (["--network", "continuous", "--reference"], "continuous"),
        (["--config", str(ROOT / "experiments/configs/sim_16k.yaml"), "--reference"], "continuous"),
    ],
)
def test_bench_sim_refuses_reference_on_a_model_without_a_reference_loop(
    monkeypatch, capsys, argv, network
):
    """The reference loop replaces the window model's ``simulate`` only: on the continuous
    model the "reference" run timed the compiled run a second time (ref/cpu 1.0x)."""
    monkeypatch.setattr(script("bench_sim"), "warm_up", ran)
    monkeypatch.setattr(script("bench_sim"), "timed", ran)
    line = assert_refused(monkeypatch, capsys, "bench_sim", argv, "--reference")
    assert network in line and "windows" in line, line


def test_bench_sim_reference_runs_on_the_window_model(monkeypatch, capsys):
    """``--network windows`` over a continuous config: the reference run is made."""
    config = str(ROOT / "experiments/configs/sim_16k.yaml")
    argv = ["--config", config, "--network", "windows", "--reference", "--json"]
    got = json.loads(sim_output(monkeypatch, capsys, argv))
    assert got["network"] == "windows"
    assert "reference" in got["rows"]["themis"]


def test_bench_sim_timed_refuses_a_reference_run_off_the_window_model(monkeypatch):
    """Called as a library (``timed(..., reference=True)``), not only from the command."""
    from cassini.sim.config import read_config

    bench = script("bench_sim")
    monkeypatch.setattr(bench.engine, "Simulation", ran)
    cfg = read_config(str(ROOT / "experiments/configs/sim_16k.yaml"))
    assert cfg.options.network == "continuous"
    with pytest.raises(ValueError, match="continuous"):
        bench.timed(cfg, [], {}, "themis", reference=True, quiet=True)


def two_costs(fn, args, nprocs, join):
    """Each rank writes two costs (``--iterations 7``): 3 ms and 1 ms."""
    port, options, out = args
    for rank in range(nprocs):
        costs = [3e-3, 1e-3]
        Path(f"{out}.{rank}").write_text(json.dumps({"ahead": costs, "sync": costs}))


def test_bench_timeshift_p99_is_never_below_the_median(monkeypatch, capsys):
    """Two costs: the old index rule took the smaller one as p99 (below the median)."""
    fake_torch(monkeypatch, two_costs)
    call_main(monkeypatch, "bench_timeshift", ["--iterations", "7", "--step-ms", "10", "--json"])
    row = json.loads(capsys.readouterr().out)["modes"]["ahead"]["rank0"]
    assert row["median_s"] == pytest.approx(2e-3)
    assert row["p99_s"] == pytest.approx(2.98e-3)  # numpy.percentile, linear
    assert row["p99_pct_of_step"] == pytest.approx(29.8)


@pytest.mark.parametrize(
    "costs", [[5.0], [1.0, 9.0], [3.0, 1.0, 2.0], [float(k % 7) for k in range(95)]]
)
def test_bench_timeshift_cost_figures_follow_numpy_percentile(costs):
    import numpy as np

    row = script("bench_timeshift").cost_figures(costs, step_s=10.0)
    assert row["p99_s"] == pytest.approx(float(np.percentile(costs, 99)))
    assert row["median_s"] <= row["p99_s"] <= max(costs)
    assert row["median_pct_of_step"] == pytest.approx(row["median_s"] * 10)


def test_bench_timeshift_help_says_how_p99_is_taken(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys, "bench_timeshift")
    assert "percentile" in text and "never below the median" in text


def burn_cpu(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def split_rows(out: str) -> dict[str, tuple[float, int]]:
    """cassini_split.py's rows: label -> (seconds, calls)."""
    rows = re.findall(r"^\s*([\d.]+) s\s+[\d.]+ %\s+(\d+) calls\s+(.+)$", out, re.M)
    return {label.strip(): (float(s), int(n)) for s, n, label in rows}


def test_cassini_split_rows_nest_when_the_kernels_load_inside_the_run(monkeypatch, capsys):
    """``Simulation.run`` loads the kernels, and the advisor's loader solves link problems
    of its own (``circle.warm_compiled``): timed inside the run, they made the link
    problems' row larger than the advice that holds them."""
    from cassini import advisor, circle
    from cassini.sim import engine
    from cassini.sim.network import kernels
    from cassini.sim.parts import placement

    split = script("cassini_split")
    # every attribute the script rewrites, restored after the test
    for owner, name, _ in split.PARTS:
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setitem(placement.PLACEMENTS, "cassini", placement.PLACEMENTS["cassini"])
    monkeypatch.setattr(placement, "advise", placement.advise)
    monkeypatch.setattr(advisor, "compatibility_score", advisor.compatibility_score)

    monkeypatch.setattr(circle, "compatibility_score", lambda *a, **k: burn_cpu(0.05))
    monkeypatch.setattr(placement, "cassini", lambda *a, **k: circle.compatibility_score())
    loaded: list[str] = []

    def load_kernels(network, *, advisor=False):  # a cold loader: one link problem, once
        if not loaded:
            loaded.append(network)
            circle.compatibility_score()

    monkeypatch.setattr(kernels, "load_kernels", load_kernels)
    monkeypatch.setattr(engine, "load_kernels", load_kernels)

    class Run:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def run(self) -> Any:  # as Simulation.run: kernels first, then the placements
            engine.load_kernels("windows", advisor=True)
            placement.cassini()
            summary = {"mean_slowdown": 1.0, "p99_slowdown": 1.0}
            return types.SimpleNamespace(summary=lambda: summary)

    monkeypatch.setattr(engine, "Simulation", Run)
    call_main(monkeypatch, "cassini_split", ["--jobs", "3"])
    rows = split_rows(capsys.readouterr().out)
    advice = rows["advice: placement.cassini (all of it)"]
    solved = rows["advice: link problems solved (compatibility_score)"]
    assert solved[1] == 1, rows  # the run's own link problem, not the loader's
    assert solved[0] <= advice[0], rows


def recording_children(monkeypatch) -> list[tuple[str, list[str]]]:
    """``subprocess.run`` answers at once for sim_before_after.py's children: each call's
    (tree, arguments) recorded; a run given ``--out`` writes a results.json there."""
    calls: list[tuple[str, list[str]]] = []

    def fake_run(argv, cwd=None, **kwargs):
        calls.append((Path(cwd).name, list(argv[1:])))
        if "--out" in argv:
            out = Path(argv[argv.index("--out") + 1])
            (out / "results.json").write_text(json.dumps({"wall_s": 1.0, "mean_x": 1.2}))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    return calls


def test_sim_before_after_warms_up_each_tree_untimed_before_the_rounds(
    monkeypatch, capsys, tmp_path
):
    """A fresh tree's first run compiled its numba cache inside the timed round (48 s
    against 32 s with identical results): each tree is warmed up first, untimed."""
    new = fake_tree(tmp_path / "new")
    (new / "cassini" / "sim").mkdir()
    (new / "cassini" / "sim" / "jit_warmup.py").write_text("")
    old = fake_tree(tmp_path / "old")  # from before cassini.sim.jit_warmup
    calls = recording_children(monkeypatch)
    out = tmp_path / "out"
    argv = ["--tree", f"a={new}", "--tree", f"b={old}", "--out", str(out), "--only", "sim_1024"]
    assert call_main(monkeypatch, "sim_before_after", argv) == 0
    assert calls[0] == ("new", ["-m", "cassini.sim.jit_warmup"])
    assert calls[1][0] == "old" and "sim_1024.yaml" in " ".join(calls[1][1])
    assert "warm-up" in calls[1][1][calls[1][1].index("--out") + 1]  # not the compared run
    assert [tree for tree, _ in calls[2:]] == ["new", "old"]  # the timed round
    times = json.loads((out / "times.json").read_text())
    assert [len(v) for v in times["sim_1024"].values()] == [1, 1]
    assert "warm-up a (untimed" in capsys.readouterr().out


@pytest.mark.parametrize("only", ["sim_1024,", ",", "", "sim_1024,,cluster_scale"])
def test_sim_before_after_refuses_an_empty_run_name(monkeypatch, capsys, tmp_path, only):
    monkeypatch.setattr(script("sim_before_after"), "run_once", ran)
    out = tmp_path / "out"
    argv = ["--tree", f"a={ROOT}", "--only", only, "--out", str(out)]
    line = assert_refused(monkeypatch, capsys, "sim_before_after", argv, "--only")
    assert "empty run name" in line, line
    assert not out.exists()


def test_bench_advisor_says_jobs_per_shared_link_counts_every_candidate(monkeypatch, capsys):
    monkeypatch.setattr(script("bench_advisor"), "run", fake_figures)
    call_main(monkeypatch, "bench_advisor", ["--scales", "1"])
    assert "jobs per shared link, over all 2 candidates: {2: 3}" in capsys.readouterr().out


def test_bench_advisor_json_shape_is_in_help_and_kept(monkeypatch, capsys):
    """One size: an object; several: a list (experiments/headlines.py reads both)."""
    text = flag_help(help_text(monkeypatch, capsys, "bench_advisor"), "--json")
    assert "one object for a single cluster size" in text and "a list of objects" in text, text
    monkeypatch.setattr(script("bench_advisor"), "run", fake_figures)
    call_main(monkeypatch, "bench_advisor", ["--scales", "1", "--json"])
    assert isinstance(json.loads(capsys.readouterr().out), dict)
    call_main(monkeypatch, "bench_advisor", ["--scales", "1", "2", "--json"])
    assert [f["gpus"] for f in json.loads(capsys.readouterr().out)] == [1024, 2048]


def test_bench_advisor_no_shared_link_has_no_speed_vs_baseline(monkeypatch, capsys):
    """The baseline scores nothing without a shared link: "0.01x" said nothing true."""

    def unshared(scale: int, *args: Any, **kwargs: Any) -> dict:
        return {**fake_figures(scale), "shared_links_per_candidate": 0.0,
                "jobs_per_shared_link": {}}  # fmt: skip

    monkeypatch.setattr(script("bench_advisor"), "run", unshared)
    call_main(monkeypatch, "bench_advisor", ["--scales", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("serial, ", "links only"))]
    assert len(rows) == 2 and all(line.split()[-1] == "-" for line in rows), out
