"""The report of a `cassini sim run`: utilisation from the job records, the link
timeline replayed from the engine's own network windows, and report.html loaded in a
real browser (headless Chromium)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from conftest import require

from cassini.sim.config import config_from_dict
from cassini.sim.report.html_report import number
from cassini.sim.report.page import most_congested_link
from cassini.sim.report.recording import link_timeline
from cassini.sim.report.run import simulate_config
from cassini.sim.report.utilisation import utilisation

CONFIG = {
    "name": "report-test",
    "cluster": {"racks": 4, "servers_per_rack": 4, "gpus_per_server": 4, "oversubscription": 4},
    "workload": {
        "poisson": {"jobs": 24, "load": 1.0, "gpus": {"8": 1, "12": 1}, "iterations": [60, 200]}
    },
    "schedulers": ["themis", "themis+cassini"],
    "candidates": 4,
}
PICTURES = {"link_heatmap.png", "link_timeline.png", "slowdown_cdf.png", "gpu_utilisation.png",
            "cdf.png"}  # fmt: skip


@pytest.fixture(scope="module")
def small_run():
    cfg = config_from_dict(CONFIG)
    return cfg, simulate_config(cfg, record=True)


def test_link_utilisation_carries_every_bit_the_jobs_sent(small_run) -> None:
    cfg, run = small_run
    for result in run.results.values():
        u = utilisation(result, cfg.cluster, run.library)
        width = np.diff(u.edges)
        sent: dict[str, float] = {}
        for j in result.jobs:
            for link in cfg.cluster.path(s for s, _ in j.placement):
                bits = run.library[j.model].bits_per_iteration * j.iterations
                sent[link] = sent.get(link, 0.0) + bits
        assert set(u.links) == set(sent)
        for i, link in enumerate(u.links):
            carried = float((u.link_share[i] * width).sum()) * cfg.cluster.links[link]
            assert carried == pytest.approx(sent[link], rel=1e-6)
        means = u.link_share.mean(axis=1)
        assert list(means) == sorted(means, reverse=True)  # busiest first
        gpu_s = float((u.gpu_allocated * width).sum()) * cfg.cluster.gpus
        assert gpu_s == pytest.approx(sum(j.gpus * (j.finish_s - j.start_s) for j in result.jobs))
        assert (u.gpu_effective <= u.gpu_allocated + 1e-9).all()


def test_the_link_timeline_replays_the_most_congested_window(small_run) -> None:
    cfg, run = small_run
    link = most_congested_link(cfg, run)
    assert link is not None
    for name, rec in run.recorders.items():
        tl = link_timeline(rec.windows, link, cfg.cluster.links)
        if tl is None:
            continue
        crossing = [w for w in rec.windows if any(link in f.path for f in w.flows)]
        assert max(w.excess_s.get(link, 0.0) for w in crossing) > 0 or name != "themis"
        totals = [sum(rates.values()) for _, _, rates in tl.steps]
        assert max(totals) <= tl.capacity_bps * (1 + 1e-9)  # max-min feasible
        assert max(totals) == pytest.approx(tl.capacity_bps)  # it did fill up
        assert {j for _, _, r in tl.steps for j in r} <= set(tl.jobs)
        assert all(b > a for a, b, _ in tl.steps)


def test_a_timeline_link_given_by_hand_is_drawn(small_run, tmp_path: Path) -> None:
    from cassini.sim.report.run import write_run

    cfg, run = small_run
    data = write_run(cfg, run.results, tmp_path, run=run, timeline_link="srv0")
    assert data["report"]["timeline_link"] == "srv0"
    assert data["report"]["timeline_link_chosen"] == "given with --timeline-link"
    assert (tmp_path / "link_timeline.png").stat().st_size > 1000


class _Page(HTMLParser):
    """Images with their load marks, and every table cell with a data-key."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []
        self.body: dict[str, str | None] = {}
        self.cells: dict[tuple[str, str], str] = {}
        self._row: dict[str, str | None] = {}
        self._key: str | None = None

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images.append(a)
        elif tag == "body":
            self.body = a
        elif tag == "tr":
            self._row = a
        elif tag == "td" and a.get("data-key") and self._row.get("data-scheme"):
            self._key = a["data-key"]

    def handle_data(self, data) -> None:
        if self._key:
            scheme = self._row.get("data-scheme")
            link = self._row.get("data-link")
            self.cells[(f"{scheme}|{link}" if link else str(scheme), self._key)] = data.strip()
            self._key = None


def _cli_run(tmp_path: Path) -> tuple[Path, dict]:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(CONFIG))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "sim", "run", str(cfg), "--out", str(out),
         "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out, json.loads((out / "results.json").read_text())


def _check_numbers(page: _Page, data: dict) -> None:
    assert data["summaries"]
    for name, s in data["summaries"].items():
        for key, scale in (("mean_iteration_s", 1e3), ("p99_slowdown", 1), ("mean_jct_s", 1),
                           ("makespan_s", 1), ("jobs", 1)):  # fmt: skip
            shown = page.cells[(name, key.removesuffix("_s") + "_ms" if scale == 1e3 else key)]
            assert shown == number(s[key] * scale if scale != 1 else s[key])
            assert float(shown) == pytest.approx(s[key] * scale, rel=1e-3, abs=0.5)
    for name, rows in data["report"]["busiest_links"].items():
        assert rows
        for r in rows:
            shown = float(page.cells[(f"{name}|{r['link']}", "mean_utilisation")])
            assert shown == pytest.approx(r["mean_utilisation"], rel=1e-3)


def test_run_writes_the_report_beside_results_json(tmp_path: Path) -> None:
    out, data = _cli_run(tmp_path)
    assert {p.name for p in out.glob("*.png")} == PICTURES
    assert {name for name, _ in data["report"]["pictures"]} == PICTURES
    assert data["report"]["timeline_link"] in CONFIG_LINKS()
    page = _Page()
    page.feed((out / "report.html").read_text())
    assert len(page.images) == len(PICTURES)
    assert all(str(i["src"]).startswith("data:image/png;base64,") for i in page.images)
    _check_numbers(page, data)
    # a link chosen by hand, and one that does not exist
    bad = subprocess.run(
        [sys.executable, "-m", "cassini.cli", "sim", "run", str(tmp_path / "c.json"), "--out",
         str(tmp_path / "o2"), "--quiet", "--timeline-link", "nosuch"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "--timeline-link" in bad.stderr


def CONFIG_LINKS() -> set[str]:  # noqa: N802 - a constant computed on demand
    return set(config_from_dict(CONFIG).cluster.links)


CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


@pytest.mark.slow
def test_report_html_in_headless_chromium(tmp_path: Path) -> None:
    browser = shutil.which("chromium")
    require(browser is not None, "chromium (Debian package; scripts/setup.sh installs it)")
    out, data = _cli_run(tmp_path)
    url = (out / "report.html").resolve().as_uri()
    env = {**os.environ, "HOME": str(tmp_path)}

    def chromium(*args: str) -> subprocess.CompletedProcess[str]:
        profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
        return subprocess.run(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip

    shot = tmp_path / "report.png"
    done = chromium("--window-size=1280,2000", f"--screenshot={shot}")
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2000, 1280)
    assert float(pixels[..., :3].std()) > 0.05  # not a blank page
    dom = chromium("--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = _Page()
    page.feed(dom.stdout)
    assert len(page.images) == len(PICTURES)
    assert all(i.get("data-loaded") == "true" for i in page.images), page.images
    assert page.body.get("data-images-loaded") == str(len(PICTURES))
    _check_numbers(page, data)
    assert not math.isnan(data["summaries"]["themis"]["mean_iteration_s"])
