"""A run's report read by a person: what its pictures draw (a single job's CDF, legends
beside the data, a timeline's titles and texts), the page's header (seed, candidates,
config, routing per scheme), the workload table, one label for excess demand, and the
ratios when CASSINI removed all of a metric."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from helpers.saved_figures import (
    capture,
    data_points,
    inside_figure,
    legend_over_panels,
    points_under_legends,
    renderer,
)

from cassini import outputs
from cassini.sim.config import config_from_dict
from cassini.sim.report import html_report, pictures
from cassini.sim.report.recording import LinkTimeline
from cassini.sim.report.run import ratios, simulate_config, table, write_run
from cassini.sim.report.utilisation import Utilisation

ONE_JOB = {
    "name": "one-job",
    "cluster": {"racks": 4, "servers_per_rack": 2, "gpus_per_server": 1,
                "server_link_bps": 5e10, "oversubscription": 2},
    "workload": {"poisson": {"jobs": 1, "load": 0.9, "gpus": {"3": 1},
                             "iterations": [50, 100]}},
    "schedulers": ["ideal", "themis", "themis+cassini", "themis+defrag+ecmp+mltcp+free"],
    "candidates": 3,
}  # fmt: skip
CONGESTED = {
    "name": "congested",
    "cluster": {"racks": 4, "servers_per_rack": 4, "gpus_per_server": 4, "oversubscription": 4},
    "workload": {
        "poisson": {"jobs": 24, "load": 1.0, "gpus": {"8": 1, "12": 1}, "iterations": [60, 200]}
    },
    "schedulers": ["ideal", "themis", "themis+cassini"],
    "candidates": 4,
}
CONFIG_PATH = Path("/configs/one-job.yaml")


class _Page(HTMLParser):
    """The page's visible text, the settings line's spans and every table's rows."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.spans: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._span: str | None = None
        self._cell: list[str] | None = None
        self._in_style = False

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        if tag in ("style", "script"):
            self._in_style = True
        elif tag == "table":
            self._table = a.get("id") or "?"
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "span" and a.get("data-key"):
            self._span = a["data-key"]
            self.spans[self._span] = ""

    def handle_endtag(self, tag) -> None:
        if tag in ("style", "script"):
            self._in_style = False
        elif tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "span":
            self._span = None

    def handle_data(self, data) -> None:
        if self._in_style:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._span:
            self.spans[self._span] += data


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


@pytest.fixture(scope="module")
def one_job(tmp_path_factory):
    """The one-job run written twice, seeds 0 and 1, with the figures each saved."""
    out = {}
    for seed in (0, 1):
        cfg = config_from_dict(ONE_JOB | {"seed": seed})
        run = simulate_config(cfg, record=True)
        folder = tmp_path_factory.mktemp(f"seed{seed}")
        with pytest.MonkeyPatch.context() as mp:
            figures = capture(mp)
            data = write_run(cfg, run.results, folder, run=run, config_path=CONFIG_PATH)
        out[seed] = (data, folder, figures)
    return out


@pytest.fixture(scope="module")
def congested(tmp_path_factory):
    cfg = config_from_dict(CONGESTED)
    run = simulate_config(cfg, record=True)
    folder = tmp_path_factory.mktemp("congested")
    with pytest.MonkeyPatch.context() as mp:
        figures = capture(mp)
        data = write_run(cfg, run.results, folder, run=run)
    return data, folder, figures


def _visible(line) -> bool:
    """A line shows: it has a marker, or two points apart."""
    if line.get_marker() not in (None, "", "None", " ") and len(line.get_xydata()):
        return True
    xy = np.unique(np.asarray(line.get_xydata(), float), axis=0)
    return len(xy) >= 2


# -- item 2: a single job's CDFs ----------------------------------------------------------
def test_a_single_jobs_cdfs_show_their_point(one_job) -> None:
    data, _, figures = one_job[0]
    jct = data["jobs"]["themis"][0]["jct_s"]
    for name in ("slowdown_cdf.png", "cdf.png"):
        for ax in figures[name].axes:
            lines = [ln for ln in ax.lines if ln.get_label() in data["summaries"]]
            assert lines, (name, ax.get_xlabel())
            assert all(_visible(ln) for ln in lines), (name, ax.get_xlabel())
    jct_ax = next(ax for ax in figures["cdf.png"].axes if "completion" in ax.get_xlabel())
    lo, hi = jct_ax.get_xlim()
    assert lo < jct < hi
    lo, hi = jct_ax.get_ylim()
    assert lo <= 0.0 and hi >= 1.0


# -- item 10: legends beside the data, the JCT CDF as steps -----------------------------
def _utilisation(level: float, n: int = 50) -> Utilisation:
    t = np.linspace(0.0, 100.0, n + 1)
    wave = np.clip(level + 0.15 * np.sin(np.linspace(0, 6, n)), 0, 1)
    return Utilisation(t, (), np.zeros((0, n)), np.clip(wave + 0.05, 0, 1), wave)


def test_gpu_utilisation_legend_covers_no_line(monkeypatch, tmp_path: Path) -> None:
    figures = capture(monkeypatch)
    util = {f"scheme{k}": _utilisation(0.15 + 0.14 * k) for k in range(6)}
    pictures.gpu_utilisation(util, tmp_path / "gpu_utilisation.png")
    fig = figures["gpu_utilisation.png"]
    assert points_under_legends(fig) == 0
    assert all(
        inside_figure(fig, leg)
        for leg in [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend())]
    )


def test_cdf_legends_cover_no_line_and_jct_is_a_step(congested) -> None:
    data, _, figures = congested
    for name in ("cdf.png", "slowdown_cdf.png"):
        assert points_under_legends(figures[name]) == 0, name
    jct_ax = next(ax for ax in figures["cdf.png"].axes if "completion" in ax.get_xlabel())
    drawn = [ln for ln in jct_ax.lines if ln.get_label() in data["summaries"]]
    assert drawn and all(ln.get_drawstyle().startswith("steps") for ln in drawn)


# -- item 6: the link timeline --------------------------------------------------------------
def test_timeline_legend_beside_the_bars(congested) -> None:
    _, _, figures = congested
    fig = figures["link_timeline.png"]
    assert fig.legends or any(ax.get_legend() for ax in fig.axes)
    assert not legend_over_panels(fig)


def _one_job_timeline() -> LinkTimeline:
    steps = tuple((k * 0.1, (k + 1) * 0.1, {"j0": 4e10 if k % 2 else 0.0}) for k in range(20))
    return LinkTimeline("tor0", 5e10, 12.0, 0.5, ("j0",), steps)


def test_timeline_titles_and_texts_fit(monkeypatch, tmp_path: Path) -> None:
    figures = capture(monkeypatch)
    why = ("no network window crossed tor0 under themis: its jobs' summed peak demand "
           "never exceeded its capacity, so it never slowed anyone")  # fmt: skip
    lines = {"themis": why, "themis+cassini": _one_job_timeline()}
    pictures.timeline(lines, "tor0", tmp_path / "link_timeline.png")
    fig = figures["link_timeline.png"]
    titles = [ax.get_title() for ax in fig.axes]
    assert any("1 job," in t for t in titles) and not any("1 jobs" in t for t in titles)
    drawn = renderer(fig)
    for ax in fig.axes:
        box = ax.get_window_extent(drawn)
        for text in ax.texts:
            ext = text.get_window_extent(drawn)
            assert box.x0 <= ext.x0 and ext.x1 <= box.x1, text.get_text()
    assert not legend_over_panels(fig)


def _caption(data) -> str:
    return next(c for name, c in data["report"]["pictures"] if name == "link_timeline.png")


def test_timeline_caption_says_how_the_link_was_chosen(one_job, congested) -> None:
    quiet = _caption(one_job[0][0])
    assert "no link was ever congested" in quiet and "most congested" not in quiet
    busy = _caption(congested[0])
    assert "most congested" in busy and "never" not in busy
    for caption in (quiet, busy):
        assert not re.search(r"\([^)]*\(", caption), caption  # no nested brackets


# -- items 3, 4, 9: the page's header and workload table --------------------------------
def test_header_names_seed_candidates_and_config(one_job) -> None:
    headers = {}
    for seed, (data, folder, _) in one_job.items():
        page = _page(folder / "report.html")
        assert page.spans["seed"].endswith(str(seed))
        assert page.spans["candidates"].endswith("3")
        assert str(CONFIG_PATH) in page.spans["config"]
        assert data["config"] == str(CONFIG_PATH)
        headers[seed] = tuple(sorted(page.spans.items()))
    assert headers[0] != headers[1]


PYTHON_REPR = re.compile(r"[\[{(]'|'[\]}),:]|\bNone\b|\bTrue\b|\bFalse\b|\{\d")


def test_poisson_workload_table_is_filled_and_readable(one_job) -> None:
    _, folder, _ = one_job[0]
    page = _page(folder / "report.html")
    rows = {r[0]: r[1] for r in page.tables["workload"][1:]}
    assert rows["jobs"] == "1"
    assert rows["load"] == "0.9"
    assert "3 GPUs" in rows["GPUs per job"] and "100 %" in rows["GPUs per job"]
    assert rows["iterations per job"] == "50–100"
    text = "".join(page.text)
    assert not PYTHON_REPR.search(text), PYTHON_REPR.search(text)


def test_routing_is_named_per_scheme_where_it_differs(one_job) -> None:
    data, folder, _ = one_job[0]
    page = _page(folder / "report.html")
    routing = page.spans["routing"]
    assert "single" in routing and "default" in routing
    assert "themis+defrag+ecmp+mltcp+free: ecmp" in routing
    assert "themis+cassini:" not in routing  # the default: not repeated
    assert data["routing_by_scheme"]["themis+defrag+ecmp+mltcp+free"] == "ecmp"
    assert data["routing_by_scheme"]["themis"] == "single"


# -- item 7: one label for excess demand; the wall time's digits --------------------------
SUMMARY = {
    "jobs": 3, "mean_iteration_s": 0.2, "p99_iteration_s": 0.5, "mean_slowdown": 1.2,
    "p99_slowdown": 1.5, "mean_jct_s": 30.0, "p99_jct_s": 50.0, "makespan_s": 90.0,
    "excess_demand_s_total": 7.5, "wall_s": 0.00287,
}  # fmt: skip


def test_excess_demand_has_one_label_and_wall_time_its_digits(one_job) -> None:
    text = table({"themis": SUMMARY, "themis+cassini": SUMMARY | {"wall_s": 12.34}})
    head, units, base, cassini = text.splitlines()[:4]
    label, unit = html_report.EXCESS_LABEL, html_report.EXCESS_UNIT
    assert label in head and f"({unit})" in units
    assert "0.00287" in base and " 0.0 " not in f"{base} " and "12.3" in cassini
    _, folder, _ = one_job[0]
    page = _page(folder / "report.html")
    heads = [t[0] for key, t in page.tables.items() if t and key != "ratios"]
    labelled = [h for head in heads for h in head if "excess" in h]
    assert labelled and set(labelled) == {f"{label} ({unit})"}, labelled


# -- item 8: CASSINI's excess at 0 ------------------------------------------------------------
def test_ratios_show_cassini_removing_all_excess(tmp_path: Path) -> None:
    summaries = {"themis": SUMMARY, "themis+cassini": SUMMARY | {"excess_demand_s_total": 0.0}}
    r = ratios(summaries)["themis/themis+cassini"]
    assert r["mean_iteration_s"] == pytest.approx(1.0)
    assert r["cassini_zero"] == {"excess_demand_s_total": 7.5}
    back = json.loads(outputs.json_text({"ratios": ratios(summaries)}))
    assert back["ratios"]["themis/themis+cassini"]["cassini_zero"]["excess_demand_s_total"] == 7.5
    data = {"name": "r", "summaries": summaries, "ratios": ratios(summaries)}
    html_report.write(tmp_path / "report.html", data, [], {})
    page = _page(tmp_path / "report.html")
    head, row = page.tables["ratios"][0], page.tables["ratios"][1]
    assert not any("_" in h for h in head), head  # the summary's labels, not keys
    cell = dict(zip(head, row, strict=True))[f"{html_report.EXCESS_LABEL}"]
    assert "0 of 7.5" in cell
    both_zero = {k: v | {"excess_demand_s_total": 0.0} for k, v in summaries.items()}
    assert "cassini_zero" not in ratios(both_zero)["themis/themis+cassini"]


def test_points_under_legends_sees_a_legend_on_a_line(monkeypatch, tmp_path: Path) -> None:
    """The check itself: a legend drawn over a line counts its points."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot(np.linspace(0, 1, 50), np.full(50, 0.5), label="flat")
    ax.legend(loc="center")
    assert points_under_legends(fig) > 0
    assert data_points(ax).shape[1] == 2
    plt.close(fig)


def test_the_cli_names_its_config_in_the_report(tmp_path: Path, capsys) -> None:
    from cassini import cli

    config = tmp_path / "one.json"
    config.write_text(json.dumps(ONE_JOB))
    out = tmp_path / "out"
    assert cli.main(["sim", "run", str(config), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert json.loads((out / "results.json").read_text())["config"] == str(config)
    assert str(config) in _page(out / "report.html").spans["config"]
