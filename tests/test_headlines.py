"""The headline figures: the README renders from docs/figures (no figure goes stale
silently), every figures file's summary follows from its runs, and the summary, busy-host
and marker logic (experiments.figures)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments import headlines
from experiments.figures import (
    BUSY_CPU_FRACTION,
    BUSY_LOAD_PER_CORE,
    HostLoad,
    MetricView,
    Target,
    figure_text,
    is_busy,
    marked_ids,
    only_our_residue,
    replace_marked,
    spread,
    summarise,
    usable,
)

ROOT = headlines.ROOT


def test_readme_is_rendered_from_the_figures_files():
    text = headlines.README.read_text()
    assert "<!-- headlines:table -->" in text and "<!-- /headlines:table -->" in text
    assert text == headlines.render(text, headlines.load_figures()), (
        "README.md differs from its rendering from docs/figures: run "
        "`.venv/bin/python -m experiments.headlines --render`"
    )


def test_readme_markers_name_known_headlines_and_the_table_lists_every_one():
    text = headlines.README.read_text()
    assert set(marked_ids(text)) <= set(headlines.BY_ID)
    block = text.split("<!-- headlines:table -->")[1].split("<!-- /headlines:table -->")[0]
    for h in headlines.HEADLINES:
        assert f"`{h.command_text()}`" in block, h.id


def test_every_figures_file_summary_follows_from_its_runs():
    for key, fig in headlines.load_figures().items():
        h = headlines.BY_ID[key]
        expect = summarise(fig["runs"], [x.name for x in h.metrics], h.target, fig["allow_busy"])
        assert fig["summary"] == json.loads(json.dumps(expect)), key
        for run in fig["runs"]:
            for field in ("date", "commit", "dirty", "machine", "load_before", "load_after"):
                assert field in run, f"{key} run {run.get('run')}: no {field}"


def test_the_table_is_well_formed():
    ids = [h.id for h in headlines.HEADLINES]
    assert len(ids) == len(set(ids))
    for h in headlines.HEADLINES:
        module = h.argv[2] if h.argv[:2] == ("python", "-m") else None
        if module and module.startswith("experiments."):
            assert h.repeats == headlines.TESTBED_REPEATS or not h.needs_root, h.id
            assert importlib.util.find_spec(module) is not None, h.id
        elif h.argv[0] == "python":
            assert (ROOT / h.argv[1]).is_file(), h.id
            assert h.repeats == headlines.BENCHMARK_REPEATS, h.id
        for word in h.argv:
            if word.startswith("experiments/configs/"):
                assert (ROOT / word).is_file(), f"{h.id}: {word}"


def test_unmeasured_headlines_render_as_not_yet_measured_never_a_number():
    rendered = headlines.table({})
    for h in headlines.HEADLINES:
        row = next(line for line in rendered.splitlines() if line.startswith(f"| {h.what} |"))
        figure = row.split(" | ")[1]
        assert figure == f"not yet re-measured (`{h.rerun_text()}`)"


def test_a_figure_renders_its_median_range_count_date_and_busy_label():
    runs = [
        run(k, {"ms": v, "vs_naive": v / 100}, busy=k == 2) for k, v in enumerate((40, 44, 30), 1)
    ]
    h = headlines.BY_ID["advisor_1024"]
    fig = headlines.figure_for(h, runs, allow_busy=True)
    text = headlines.cell(h, fig)
    assert "per candidate 40.0 [30.0, 44.0] ms" in text
    assert "of 3, 2026-11-27, busy host" in text
    assert "target met in 3 of 3" in text
    quiet = headlines.figure_for(h, runs, allow_busy=False)
    assert "of 2, 2026-11-27)" in headlines.cell(h, quiet)


def run(k: int, values: dict[str, float], busy: bool = False, rc: int = 0) -> dict:
    return {
        "run": k,
        "date": f"2026-11-27T21:0{k}:00Z",
        "commit": "abc",
        "dirty": False,
        "machine": {"cpu_model": "x", "cores": 2},
        "busy": busy,
        "returncode": rc,
        "values": values,
        "error": None,
    }


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30))
def test_spread_median_lies_in_its_range(values):
    s = spread(values)
    assert s.low <= s.median <= s.high and s.n == len(values)
    assert s.low == min(values) and s.high == max(values)


def test_spread_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="no values"):
        spread([])


loads = st.builds(
    HostLoad,
    load1=st.floats(0, 64),
    busy_fraction=st.floats(0, 1),
    cores=st.integers(1, 64),
    sample_s=st.just(2.0),
)


@given(loads)
def test_busy_rule_is_its_two_thresholds(load):
    expect = load.load1 / load.cores > BUSY_LOAD_PER_CORE or load.busy_fraction > BUSY_CPU_FRACTION
    assert is_busy(load) == expect
    # waiting for our own residue only ever happens on a host the rule calls busy
    if only_our_residue(load):
        assert is_busy(load)


def test_busy_rule_examples():
    assert not is_busy(HostLoad(0.9, 0.2, 2, 2.0))
    assert is_busy(HostLoad(1.1, 0.0, 2, 2.0))
    assert is_busy(HostLoad(0.0, 0.3, 2, 2.0))
    assert only_our_residue(HostLoad(1.5, 0.05, 2, 2.0))
    assert not only_our_residue(HostLoad(1.5, 0.6, 2, 2.0))
    with pytest.raises(ValueError, match="busy_fraction"):
        HostLoad(0.1, 1.5, 2, 2.0)


@given(
    st.lists(st.tuples(st.booleans(), st.sampled_from([0, 1]), st.floats(0.5, 2.0)), max_size=12),
    st.booleans(),
)
def test_summary_uses_quiet_finished_runs_unless_busy_ones_are_allowed(spec, allow_busy):
    runs = [run(k, {"x": v}, busy=b, rc=rc) for k, (b, rc, v) in enumerate(spec, 1)]
    target = Target("x", "<=", 1.0)
    s = summarise(runs, ["x"], target, allow_busy)
    kept = [r for r in runs if r["returncode"] == 0 and (allow_busy or not r["busy"])]
    assert usable(runs, allow_busy) == kept
    if not kept:
        assert s is None
        return
    assert s["n"] == len(kept) and s["runs_total"] == len(runs)
    assert s["busy_host"] == any(r["busy"] for r in kept)
    xs = [r["values"]["x"] for r in kept]
    assert s["metrics"]["x"]["min"] == min(xs) and s["metrics"]["x"]["max"] == max(xs)
    assert s["target"]["met_runs"] == sum(v <= 1.0 for v in xs) and s["target"]["of"] == len(xs)
    assert s["date"] == kept[-1]["date"]


def test_target_directions():
    assert Target("x", ">=", 2).met(2) and not Target("x", ">=", 2).met(1.9)
    with pytest.raises(ValueError, match="op"):
        Target("x", "<", 1)


@given(
    st.dictionaries(st.sampled_from(["a", "b.c", "d-e"]), st.text(alphabet="xyz 0.[]", max_size=20))
)
def test_marker_replacement_is_idempotent(values):
    inline = {"a": "A1", "b.c": "B1", "d-e": "D1", **values}
    text = (
        "intro <!-- headline:a -->old<!-- /headline:a --> mid <!-- headline:b.c -->\nx\n"
        "<!-- /headline:b.c -->\n<!-- headlines:table -->\n| old |\n<!-- /headlines:table -->\n"
    )
    once = replace_marked(text, inline, "| new |\n")
    assert replace_marked(once, inline, "| new |\n") == once
    assert f"<!-- headline:a -->{inline['a']}<!-- /headline:a -->" in once
    assert "| new |" in once and "| old |" not in once


def test_an_unknown_marker_is_named():
    with pytest.raises(ValueError, match="headline:nope"):
        replace_marked("<!-- headline:nope -->x<!-- /headline:nope -->", {}, None)


def test_figure_text_skips_metrics_without_values():
    summary = {
        "n": 1,
        "date": "2026-11-27T00:00:00Z",
        "metrics": {"a": {"median": 1.0, "min": 1.0, "max": 1.0, "n": 1}},
    }
    text = figure_text(summary, [MetricView("a", "A", "s"), MetricView("b", "B", "s")])
    assert text == "A 1.000 [1.000, 1.000] s (median [min, max] of 1, 2026-11-27)"


def test_stdout_json_takes_the_document_after_text_lines():
    assert headlines.stdout_json('{"a": 1}') == {"a": 1}
    assert headlines.stdout_json('link 500\nratio 0.99\n{"a": [1, 2]}\n') == {"a": [1, 2]}
    with pytest.raises(ValueError, match="no JSON"):
        headlines.stdout_json("nothing here")


def test_extractors_compute_the_same_process_ratios(tmp_path):
    adv = {
        "ms_per_candidate": {"serial, reject": 40.0, "links only, no dedup": 100.0},
        "cpu_ms_per_candidate": {"serial, reject": 30.0},
    }
    assert headlines.advisor_1024(json.dumps(adv), tmp_path)["vs_naive"] == pytest.approx(0.4)
    sim = {"rows": {name: {"wall_s": w, "mean_slowdown": 1.2, "p99_slowdown": 2.0}
                    for name, w in (("themis", 10.0), ("themis+cassini", 14.0))}}  # fmt: skip
    assert headlines.sim_speed(json.dumps(sim), tmp_path)["ratio"] == pytest.approx(1.4)
    row = {"cassini_vs_ideal": 1.1, "baseline_vs_ideal": 1.3, "cassini_vs_baseline": 0.85}
    (tmp_path / "fair_two_jobs.json").write_text(json.dumps({"runs": [row]}))
    got = headlines.cassini_repeats_file("fair_two_jobs")("", tmp_path)
    assert got == {"cassini": 1.1, "same_start": 1.3, "vs_same_start": 0.85}
    with pytest.raises(ValueError, match="no results file"):
        headlines.cassini_repeats_file("missing")("", tmp_path)
    verdicts = {"a": {"worst_scheme_error": 0.06, "jobs_within_20pc_share": 1.0,
                      "discordant_pairs": 0},
                "b": {"worst_scheme_error": 0.04, "jobs_within_20pc_share": 0.75,
                      "discordant_pairs": 2}}  # fmt: skip
    scenarios = {k: {"verdict": v} for k, v in verdicts.items()} | {"c": {"schemes": {}}}
    (tmp_path / "results.json").write_text(json.dumps({"scenarios": scenarios}))
    got = headlines.sim_vs_packet("", tmp_path)
    assert got == {"worst_scheme": 0.06, "jobs_within": 0.75, "discordant": 2.0}


def test_history_entry_names_each_figure_and_its_busy_runs():
    h = headlines.BY_ID["agent_cost"]
    runs = [run(1, {"median_pct": 0.5, "p99_pct": 0.7}, busy=True)]
    for r in runs:
        r["load_before"] = {"load_per_core": 1.2}
    entry = headlines.history_entry([headlines.figure_for(h, runs, True)], runs[0]["date"], True)
    assert re.search(r"`agent_cost`: .*1 runs, 1 on a busy host, 0 failed", entry)
    assert "--allow-busy" in entry


def test_a_run_is_recorded_with_its_host_and_values_and_a_slow_one_times_out(tmp_path, monkeypatch):
    from experiments import host_load

    monkeypatch.setattr(headlines, "RUNS_DIR", tmp_path)
    monkeypatch.setattr(headlines, "settled_load", lambda s: host_load.sample(s))
    script = "import json, sys; print('warming up'); print(json.dumps({'v': 2.5}))"
    h = headlines.Headline(
        "probe",
        "a probe",
        ("python", "-c", script),
        2,
        lambda out, folder: {"x": headlines.stdout_json(out)["v"]},
        (MetricView("x", "x", "s"),),
        Target("x", "<=", 3.0),
        False,
    )
    machine = host_load.machine()
    rec = headlines.run_once(h, 1, ("abc", True), machine, 0.05)
    assert rec["values"] == {"x": 2.5} and rec["error"] is None and rec["returncode"] == 0
    assert rec["busy"] == is_busy(HostLoad(**{
        k: rec["load_before"][k] for k in ("load1", "busy_fraction", "cores", "sample_s")
    }))  # fmt: skip
    assert rec["machine"]["cores"] >= 1 and rec["dirty"] is True
    assert (tmp_path / "probe" / "run1").is_dir()
    slow = headlines.Headline(
        "slow", "slow", ("python", "-c", "import time; time.sleep(30)"), 1,
        h.extract, h.metrics, None, False,
    )  # fmt: skip
    rec = headlines.run_once(slow, 1, ("abc", False), machine, 0.05, timeout_s=0.5)
    assert rec["returncode"] is None and "timed out" in rec["error"] and rec["values"] == {}
    assert summarise([rec], ["x"], None, allow_busy=True) is None


def test_the_commands_own_outputs_do_not_make_the_tree_dirty(tmp_path, monkeypatch):
    """A headline's rendering (README, history, figures) must not mark the next headline's
    runs as measured on a modified tree; any other change must."""
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    for name in ("README.md", "docs/results.md", "code.py"):
        (tmp_path / name).write_text("x\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(headlines, "ROOT", tmp_path)
    assert headlines.git_state()[1] is False
    (tmp_path / "README.md").write_text("rendered\n")
    (tmp_path / "docs/results.md").write_text("appended\n")
    (tmp_path / "docs/figures/x.json").write_text("{}\n")
    assert headlines.git_state()[1] is False
    (tmp_path / "code.py").write_text("changed\n")
    assert headlines.git_state()[1] is True


def test_every_table_row_has_four_cells_even_when_a_figure_holds_bars():
    """A metric label such as ``|sim ÷ testbed − 1|`` must not split its row in GitHub's
    Markdown: its bars are escaped in the table."""
    rows = headlines.table(headlines.load_figures()).splitlines()
    assert any("\\|" in row for row in rows)  # the shipped figures hold such labels
    for row in rows:
        assert len(re.findall(r"(?<!\\)\|", row)) == 5, row


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--sample-s", "-1"], "--sample-s: must be a finite number above 0, got -1"),
        (["--sample-s", "0"], "--sample-s"),
        (["--sample-s", "nan"], "--sample-s"),
        (["--timeout-s", "-5"], "--timeout-s: must be a finite number above 0, got -5"),
        (["--timeout-s", "0"], "--timeout-s"),
        (["--timeout-s", "inf"], "--timeout-s"),
    ],
)
def test_sample_and_timeout_are_refused_in_one_line_before_any_run(
    argv, named, monkeypatch, capsys
):
    """``--sample-s -1`` ran on until ``time.sleep`` refused it (a traceback); ``--timeout-s
    -5`` was taken, every run then recorded as timed out."""

    def no_run(*args, **kwargs):
        raise SystemExit("the flags were let through to a run")

    monkeypatch.setattr(headlines, "run_once", no_run)
    with pytest.raises(SystemExit) as exit_:
        headlines.main(["--only", "agent_cost", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, (exit_.value.code, err)
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert line.startswith("python -m experiments.headlines: error: ") and named in line, err


def test_a_failed_run_fails_the_command_even_when_others_made_the_figure(
    copies, monkeypatch, capsys
):
    """One run of three failing left a figure from the other two and exit status 0."""
    h = headlines.BY_ID["agent_cost"]
    values = {"median_pct": 0.5, "p99_pct": 0.7}

    def run_once(h, k, state, machine, sample_s, timeout_s=None):
        rec = run(k, {} if k == 2 else values, rc=1 if k == 2 else 0)
        rec["error"] = "exit 1: boom" if k == 2 else None
        return {**rec, "load_before": {"load_per_core": 0.1}}

    monkeypatch.setattr(headlines, "run_once", run_once)
    assert headlines.main(["--only", h.id, "--repeats", "3"]) == 1
    figure = json.loads((copies / "figures" / f"{h.id}.json").read_text())
    assert figure["summary"]["n"] == 2 and figure["summary"]["runs_total"] == 3
    assert "failed: agent_cost run 2" in capsys.readouterr().err
    # every run finished: exit status 0
    monkeypatch.setattr(headlines, "run_once", lambda h, k, *a, **kw: {
        **run(k, values), "load_before": {"load_per_core": 0.1}
    })  # fmt: skip
    assert headlines.main(["--only", h.id, "--repeats", "3"]) == 0


@pytest.fixture(autouse=True)
def _the_repository_is_not_written():
    """No test of this file writes the repository's README, results history or figures
    (a test that stubbed the writer of one wrote the real README when the code changed)."""
    paths = [headlines.README, headlines.RESULTS, *sorted(headlines.FIGURES.glob("*.json"))]
    before = {p: p.read_bytes() for p in paths}
    yield
    after = [headlines.README, headlines.RESULTS, *sorted(headlines.FIGURES.glob("*.json"))]
    assert after == paths and all(p.read_bytes() == before[p] for p in paths)


@pytest.fixture
def copies(tmp_path, monkeypatch):
    """The figures, the README and the results history copied under ``tmp_path``, and the
    command pointed at the copies."""
    shutil.copytree(headlines.FIGURES, tmp_path / "figures")
    for name, path in (("README.md", headlines.README), ("results.md", headlines.RESULTS)):
        shutil.copy(path, tmp_path / name)
    monkeypatch.setattr(headlines, "FIGURES", tmp_path / "figures")
    monkeypatch.setattr(headlines, "README", tmp_path / "README.md")
    monkeypatch.setattr(headlines, "RESULTS", tmp_path / "results.md")
    monkeypatch.setattr(headlines, "git_state", lambda: ("abc", False))
    return tmp_path


def fake_run(h, k, state, machine, sample_s, timeout_s=None):
    values = {x.name: 7.0 for x in h.metrics}
    return {**run(k, values), "load_before": {"load_per_core": 0.1}}


def test_an_interrupted_run_set_leaves_each_finished_headline_recorded(copies, monkeypatch):
    """Ctrl-C during the third headline left the first two figures files rewritten but the
    README rendered from the old ones and no entry in the history."""
    done, cut = ["agent_cost", "advisor_1024"], "sim_1024"
    figures_before = headlines.load_figures(copies / "figures")
    history_before = (copies / "results.md").read_text()

    def run_once(h, k, *args, **kwargs):
        if h.id == cut:
            raise KeyboardInterrupt
        return fake_run(h, k, *args, **kwargs)

    monkeypatch.setattr(headlines, "run_once", run_once)
    with pytest.raises(KeyboardInterrupt):
        headlines.main(["--only", *done, cut, "--repeats", "2"])
    figures = headlines.load_figures(copies / "figures")
    for key in done:
        assert figures[key]["summary"]["n"] == 2 and figures[key] != figures_before.get(key)
    assert figures.get(cut) == figures_before.get(cut)
    readme = (copies / "README.md").read_text()
    assert readme == headlines.render(readme, figures)
    history = (copies / "results.md").read_text()
    assert history.startswith(history_before)
    added = history[len(history_before) :]
    # one entry for the run set, listing the headlines it finished and nothing of the cut one
    assert len(re.findall(r"^### .* UTC: agent_cost, advisor_1024$", added, re.M)) == 1
    assert added.count("\n### ") == 1 and cut not in added
    assert all(f"- `{key}`: " in added for key in done)


def test_a_write_cut_half_way_leaves_the_old_file_whole(copies, monkeypatch):
    """The figures file, the history and the README were written in place: an interrupt
    during the write left half a file (the figures file then no longer loaded)."""
    before = {p.name: p.read_bytes() for p in copies.rglob("*") if p.is_file()}
    real_write = Path.write_text

    def half_then_interrupt(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(headlines, "run_once", fake_run)
    monkeypatch.setattr(Path, "write_text", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):  # the figures file: written first
        headlines.main(["--only", "agent_cost", "--repeats", "1"])
    with pytest.raises(KeyboardInterrupt):
        headlines.append_history("\n### an entry\n", copies / "results.md")
    with pytest.raises(KeyboardInterrupt):
        headlines.write_readme({})  # every figure "not yet re-measured": a change
    after = {p.name: p.read_bytes() for p in copies.rglob("*") if p.is_file()}
    assert after == before  # nothing half-written, no temporary file left behind


def damage(copies) -> Path:
    path = copies / "figures" / "agent_cost.json"
    path.write_text(path.read_text()[:200])
    return path


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert "Traceback" not in err
    return line


@pytest.mark.parametrize("argv", [["--render"], ["--only", "advisor_1024"]])
def test_a_damaged_figures_file_is_named_in_one_line_before_anything_runs(
    argv, copies, monkeypatch, capsys
):
    """A truncated figures file ended ``--render`` in a JSONDecodeError traceback, and a
    measuring run only after all its runs."""
    path = damage(copies)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        headlines.load_figures(path.parent)
    readme = (copies / "README.md").read_text()
    monkeypatch.setattr(headlines, "run_once", lambda *a, **kw: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as exit_:
        headlines.main(argv)
    assert exit_.value.code == 2
    line = one_error_line(capsys)
    assert f"{path}: damaged figures file, not JSON" in line, line
    assert (copies / "README.md").read_text() == readme


@pytest.mark.parametrize("argv", [["--render"], ["--only", "advisor_1024"]])
def test_a_readme_marker_of_no_headline_is_named_in_one_line(argv, copies, monkeypatch, capsys):
    """``<!-- headline:nope -->`` in the README ended ``--render`` in a ValueError
    traceback."""
    readme = copies / "README.md"
    readme.write_text(readme.read_text() + "x <!-- headline:nope -->y<!-- /headline:nope -->\n")
    monkeypatch.setattr(headlines, "run_once", lambda *a, **kw: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as exit_:
        headlines.main(argv)
    assert exit_.value.code == 2
    line = one_error_line(capsys)
    assert str(readme) in line and "headline:nope" in line, line


def test_a_file_damaged_during_a_run_set_stops_it_with_the_finished_ones_recorded(
    copies, monkeypatch, capsys
):
    """A figures file damaged while the second headline ran: the first stays recorded, the
    second is not written at all, and the command says so in one line (exit 2)."""
    figures_before = headlines.load_figures(copies / "figures")

    def run_once(h, k, *args, **kwargs):
        if h.id == "sim_1024" and k == 1:
            damage(copies)
        return fake_run(h, k, *args, **kwargs)

    monkeypatch.setattr(headlines, "run_once", run_once)
    with pytest.raises(SystemExit) as exit_:
        headlines.main(["--only", "advisor_1024", "sim_1024", "--repeats", "1"])
    assert exit_.value.code == 2
    assert "sim_1024 was measured but not recorded" in one_error_line(capsys)
    fresh = json.loads((copies / "figures" / "advisor_1024.json").read_text())
    assert fresh["summary"]["n"] == 1
    sim = copies / "figures" / "sim_1024.json"
    assert json.loads(sim.read_text()) == figures_before["sim_1024"]
    last = (copies / "results.md").read_text().rsplit("\n### ", 1)[1]
    assert "`advisor_1024`: " in last and "sim_1024" not in last
