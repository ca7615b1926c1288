"""What a person sees in a run's report (review 2026-11-29).  Item 1: the report draws the
links the run routed each job on; with several spines under ecmp or crux, the
busiest-links table, the heat map and the link timeline named the ToRs' whole uplinks
(or an average over the spines) while the network model loaded one spine's, so a
saturated uplink read "never congested".  Item 2: more than ten schemes shared colours.
Item 3: docs/sim_paper_sweep.png was drawn by older plotting code.  Item 6: a sweep of
schedulers only printed "[]", an idle heat map said "0 busiest links" over 0-1 s, and the
JCT CDF's log axis was unsaid and had two or three labels."""

from __future__ import annotations

import json
import re
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.saved_figures import capture

from cassini.sim.config import config_from_dict
from cassini.sim.report import pictures, sweep
from cassini.sim.report.run import simulate_config, write_run
from cassini.sim.report.utilisation import Utilisation, utilisation
from cassini.sim.topologies.fabric import physical_link

JOBS = "job_id,arrival_s,gpus,iterations,model\na,0,4,60,vgg16\n"
CLUSTER = {"racks": 2, "servers_per_rack": 2, "gpus_per_server": 1,
           "server_link_bps": 5.0e10, "oversubscription": 2, "spines": 2}  # fmt: skip
#: the reviewer's c13 (uniform form) and c14 (generated two-tier): one 4-GPU job over
#: two racks, ecmp puts it on spine 1, whose 25 Gbit/s uplinks it over-subscribes
FORMS = {"uniform": CLUSTER, "generated": {"generate": "two-tier", **CLUSTER}}


def _config(tmp_path: Path, cluster: dict, **more):
    (tmp_path / "jobs.csv").write_text(JOBS)
    obj = {"name": "spines report", "cluster": cluster, "routing": "ecmp",
           "workload": {"trace": "jobs.csv", "format": "csv"}, "schedulers": ["themis"],
           "seed": 0, **more}  # fmt: skip
    return config_from_dict(obj, base=tmp_path)


def _report(tmp_path: Path, cluster: dict, timeline_link: str | None = None) -> dict:
    cfg = _config(tmp_path, cluster)
    done = simulate_config(cfg, record=True)
    out = tmp_path / "out"
    write_run(cfg, done.results, out, run=done, timeline_link=timeline_link)
    return json.loads((out / "results.json").read_text())


@pytest.mark.parametrize("form", FORMS)
def test_busiest_links_are_the_routed_uplinks_with_results_json_excess(tmp_path, form) -> None:
    data = _report(tmp_path, FORMS[form])
    per_link = data["excess_demand_s_per_link"]["themis"]
    assert per_link and all(s > 0 for s in per_link.values())  # spine 1's uplinks
    rows = data["report"]["busiest_links"]["themis"]
    top = rows[0]
    assert top["excess_s"] > 0 and physical_link(top["link"]) in per_link
    assert top["capacity_gbps"] == pytest.approx(25.0)  # one spine's uplink, not tor<r>'s 50
    srv = next(r for r in rows if r["link"] == "srv0")
    # the job's whole rate on half a server link's capacity, not half of it (an average)
    assert top["mean_utilisation"] == pytest.approx(2 * srv["mean_utilisation"])
    shown = {physical_link(r["link"]): r["excess_s"] for r in rows if r["excess_s"] > 0}
    assert shown == pytest.approx(per_link)  # the same links, the same seconds
    for r in rows:  # every shown link was routed on: spine 0 and tor<r> carried nothing
        assert r["link"].startswith("srv") or physical_link(r["link"]) in per_link
    report = data["report"]
    assert (
        report["timeline_link"] == top["link"] or physical_link(report["timeline_link"]) in per_link
    )
    caption = dict(report["pictures"])["link_timeline.png"]
    assert "never" not in caption and "most congested" in caption


@pytest.mark.parametrize("form", FORMS)
def test_heat_map_rows_are_the_links_the_model_loaded(tmp_path, form) -> None:
    cfg = _config(tmp_path, FORMS[form])
    done = simulate_config(cfg)
    result = done.results["themis"]
    u = utilisation(result, cfg.cluster, done.library)
    loaded = {link for link, s in result.excess_s.items() if s > 0}
    assert loaded and loaded <= set(u.links)
    assert set(u.links) == {link for _, path in result.routes["a"] for link in path}
    assert set(u.links[: len(loaded)]) == loaded  # the congested uplinks are the busiest


def test_the_given_whole_uplink_draws_the_spine_uplink_it_was_routed_on(tmp_path) -> None:
    """``--timeline-link tor1`` on the uniform form with two spines: ecmp loaded tor1s1,
    tor1 as a whole carried nothing; the caption said "it was never congested"."""
    data = _report(tmp_path, CLUSTER, timeline_link="tor1")
    report = data["report"]
    assert report["timeline_link"] == "tor1s1"
    assert "tor1s1" in data["excess_demand_s_per_link"]["themis"]
    caption = dict(report["pictures"])["link_timeline.png"]
    assert "never" not in caption and "most congested" in caption
    assert "as tor1" in report["timeline_link_chosen"]
    assert "as host" not in report["timeline_link_chosen"]
    page = (tmp_path / "out" / "report.html").read_text()
    assert "never slowed" not in page and "never congested" not in page


def test_a_given_link_no_job_crossed_is_said_so(tmp_path) -> None:
    """Spine 0's uplink carried nothing: not "never congested", "no job was routed"."""
    data = _report(tmp_path, FORMS["generated"], timeline_link="tor1-spine0:up")
    report = data["report"]
    assert report["timeline_link"] == "tor1-spine0:up"
    caption = dict(report["pictures"])["link_timeline.png"]
    assert "no job was routed over it" in caption and "never" not in caption
    page = (tmp_path / "out" / "report.html").read_text()
    assert "never slowed" not in page


def test_the_run_records_every_path_the_network_model_used(tmp_path) -> None:
    """Crux re-routes and defrag moves: each network window's flows run on the route the
    run recorded for their job at that time."""
    cluster = {"racks": 4, "servers_per_rack": 2, "gpus_per_server": 2,
               "server_link_bps": 5.0e10, "oversubscription": 2, "spines": 2}  # fmt: skip
    cfg = _config(
        tmp_path, cluster, routing="crux", schedulers=["themis", "themis+defrag"],
        workload={"poisson": {"jobs": 12, "load": 0.9, "gpus": {"2": 1, "4": 1, "6": 1},
                              "iterations": [20, 60]}},
        seed=1,
    )  # fmt: skip
    done = simulate_config(cfg, record=True)
    changed = checked = 0
    for name, result in done.results.items():
        assert set(result.routes) == {j.job_id for j in result.jobs}
        for j in result.jobs:
            times = [t for t, _ in result.routes[j.job_id]]
            assert times[0] == pytest.approx(j.start_s) and times == sorted(times)
            changed += len({path for _, path in result.routes[j.job_id]}) > 1
        for w in done.recorders[name].windows:
            for f in w.flows:
                path = [p for t, p in result.routes[f.job_id] if t <= w.now_s][-1]
                assert set(f.path) <= set(path)
                checked += bool(f.path)
    assert changed and checked  # some job did change its path; some flow crossed links


def test_utilisation_follows_a_job_over_its_routes_in_time(tmp_path) -> None:
    cfg = _config(tmp_path, CLUSTER)
    done = simulate_config(cfg)
    result = done.results["themis"]
    job = result.jobs[0]
    half = (job.start_s + job.finish_s) / 2
    first = tuple(cfg.cluster.path([0, 1, 2, 3], 0))
    second = tuple(cfg.cluster.path([0, 1, 2, 3], 1))
    moved = replace(result, routes={"a": ((job.start_s, first), (half, second))})
    u = utilisation(moved, cfg.cluster, done.library)
    width = np.diff(u.edges)
    bits = {
        link: float((u.link_share[i] * width).sum()) * cfg.cluster.links[link]
        for i, link in enumerate(u.links)
    }
    total = bits["srv0"]  # on every route: the job's whole traffic
    assert bits["tor0s0"] + bits["tor0s1"] == pytest.approx(total, rel=1e-6)
    assert 0 < bits["tor0s0"] < total and 0 < bits["tor0s1"] < total
    assert "tor0" not in bits


# -- item 2: one colour and marker per scheme, however many --------------------------------
def _idle(n: int = 300, level: float = 0.5) -> Utilisation:
    t = np.linspace(0.0, 30.0, n + 1)
    gpus = np.full(n, level)
    return Utilisation(t, (), np.zeros((0, n)), gpus, gpus)


def _style(line) -> tuple[str, str]:  # noqa: ANN001 - a matplotlib Line2D
    from matplotlib.colors import to_hex

    return to_hex(line.get_color()), str(line.get_marker())


def test_thirteen_schemes_differ_and_keep_their_style_across_pictures(monkeypatch, tmp_path):
    """The review's c4 (13 schedulers): themis+random and themis+cassini+free were both
    green, ideal and themis+mltcp both blue, lines only."""
    figures = capture(monkeypatch)
    names = [f"scheme{k}" for k in range(13)]
    pictures.gpu_utilisation({n: _idle() for n in names}, tmp_path / "gpu_utilisation.png")
    fig = pictures._pyplot().figure()
    ax = fig.add_subplot()
    for k, n in enumerate(names):  # long CDFs (no point marked one by one)
        pictures.cdf_steps(ax, np.linspace(1.0, 2.0, 200) + k, k, n)
    gpu = {ln.get_label(): _style(ln) for ln in figures["gpu_utilisation.png"].axes[0].lines
           if ln.get_label() in names}  # fmt: skip
    cdf = {ln.get_label(): _style(ln) for ln in ax.lines}
    assert len(set(gpu.values())) == len(names)  # no two schemes alike
    assert all(marker not in ("None", "", " ") for _, marker in gpu.values())
    assert cdf == gpu  # the same scheme, the same colour and marker


# -- item 3: the sweep picture in docs/results.md ------------------------------------------
def test_the_docs_sweep_picture_is_drawn_by_todays_plot(tmp_path) -> None:
    """Drawn by the current ``sweep._plot`` (its size), with its date and command said."""
    row = {
        "load": 0.8,
        "scheduler": "themis",
        "runs": 1,
        "mean_slowdown": 1.0,
        "p99_slowdown": 1.0,
        "mean_slowdown_range": None,
        "p99_slowdown_range": None,
    }
    data = {"name": "x", "aggregate": [row], "axes": {"load": [0.8]}, "seed": 0}  # fmt: skip
    sweep._plot(data, ["load", "scheduler"], tmp_path / "sweep.png")
    docs = Path(__file__).resolve().parent.parent / "docs"

    def size(png: Path) -> tuple[int, int]:
        return struct.unpack(">II", png.read_bytes()[16:24])

    assert size(docs / "sim_paper_sweep.png") == size(tmp_path / "sweep.png")
    text = (docs / "results.md").read_text()
    after = text.split("![sim sweep](sim_paper_sweep.png)", 1)[1][:400]
    assert "cassini sim sweep experiments/configs/sim_paper.yaml" in after
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", after)


# -- item 6 ----------------------------------------------------------------------------------
def test_a_sweep_of_schedulers_only_prints_no_empty_brackets() -> None:
    pair = {"pair": "themis/themis+cassini", "mean_iteration_s": 1.0, "p99_iteration_s": 1.0}
    row = {"scheduler": "themis", "runs": 1, "mean_slowdown": 1.0, "p99_slowdown": 1.0,
           "mean_jct_s": 9.0}  # fmt: skip
    only = sweep.sweep_table({"aggregate": [row], "ratios": [pair],
                              "axes": {"scheduler": ["themis", "themis+cassini"]}})  # fmt: skip
    assert "themis/themis+cassini: mean iteration 1.000x" in only and "[]" not in only
    at = {"load": 0.8}
    loads = sweep.sweep_table(
        {"aggregate": [row | at], "ratios": [pair | at], "axes": {"load": [0.8]}}
    )
    assert "themis/themis+cassini [load=0.8]: mean iteration" in loads


def test_an_idle_heat_map_says_so_over_the_whole_run(monkeypatch, tmp_path) -> None:
    """The review's c15 (single-GPU jobs only): "the 0 busiest links (of 0 used)" over
    0-1 s of a 25.7 s run."""
    figures = capture(monkeypatch)
    idle = _idle()
    pictures.heatmap({"ideal": idle}, tmp_path / "link_heatmap.png")
    ax = figures["link_heatmap.png"].axes[0]
    assert "0 busiest" not in ax.get_title() and "no link" in ax.get_title()
    assert ax.get_xlim() == pytest.approx((0.0, 30.0))


@pytest.mark.parametrize("jct", [[25.0, 31.0, 38.0], [3.0, 40.0, 900.0], [120.0, 125.0]])
def test_the_jct_cdf_says_log_scale_and_has_enough_labels(monkeypatch, tmp_path, jct) -> None:
    figures = capture(monkeypatch)
    cfg = _config(tmp_path, CLUSTER)
    result = simulate_config(cfg).results["themis"]
    job = result.jobs[0]
    jobs = tuple(replace(job, job_id=f"j{k}", finish_s=job.arrival_s + t)
                 for k, t in enumerate(jct))  # fmt: skip
    pictures.plot_cdfs({"themis": replace(result, jobs=jobs)}, tmp_path)
    ax = next(a for a in figures["cdf.png"].axes if "completion" in a.get_xlabel())
    assert "log scale" in ax.get_xlabel()
    lo, hi = ax.get_xlim()
    shown = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert len(shown) >= 4
    labels = [ax.xaxis.get_major_formatter()(t, 0) for t in shown]
    assert all(label and "10^" not in label for label in labels)
