"""experiments/cluster_scale.py on a few jobs: every column, both plots."""

from __future__ import annotations

import json
import math

from experiments import cluster_scale


def test_cluster_scale_tiny_run_writes_rows_and_plots(tmp_path, capsys) -> None:
    names = ["ideal", "themis", "themis+crux", "themis+defrag"]
    code = cluster_scale.main(
        ["--jobs", "40", "--setup", "1", "--schemes", ",".join(names), "--out", str(tmp_path)]
    )
    assert code == 0
    data = json.loads((tmp_path / "results.json").read_text())
    (setup,) = data["setups"].values()
    assert list(setup["rows"]) == names and setup["jobs"] == 40
    for name, row in setup["rows"].items():
        for column in (
            "mean_slowdown",
            "p99_slowdown",
            "mean_jct_s",
            "makespan_s",
            "gpu_utilisation",
            "worst_job_slowdown",
            "low_decile_slowdown",
            "migrations",
            "advisor_calls",
            "link_excess_s",
            "ecmp_collisions",
        ):
            assert column in row, (name, column)
    assert setup["rows"]["ideal"]["mean_slowdown"] == 1.0
    assert setup["rows"]["themis"]["low_decile_loss_vs_themis"] == 0.0
    assert math.isfinite(setup["rows"]["themis+crux"]["low_decile_loss_vs_themis"])
    assert set(data["models"]) <= set(cluster_scale.load_library())
    assert (tmp_path / "slowdown_cdf.png").stat().st_size > 0
    assert (tmp_path / "gpu_utilisation.png").stat().st_size > 0
    assert set(setup["versus_themis"]) == {"ideal", "themis+crux", "themis+defrag"}
    assert setup["versus_themis"]["ideal"]["gpu_utilisation_gain"] >= 0
    assert "Themis + Crux" in capsys.readouterr().out
    assert cluster_scale.main(["--summarise", str(tmp_path / "results.json")]) == 0
    assert "MonkeyTree" in capsys.readouterr().out
