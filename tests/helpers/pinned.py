"""Pinned answers of the shipped examples (``cassini advise --example``, ``cassini score
--example``), so that tests comparing two code paths (server vs ``api``, serial vs parallel)
also hold both to a number.  Recorded from the code of 2026-11-26 (commit d91867e); a change
here is a behaviour change to explain in the commit.

Tolerances: scores are sums of float64 bin averages, pinned to 1e-9 absolute (platform
summation order moves them by ~1e-15); shifts are grid multiples (period / angles), pinned
to 1e-9 s."""

from __future__ import annotations

from typing import Any

import pytest

SCORE_TOL = 1e-9
SHIFT_TOL_S = 1e-9

# advise --example at the defaults (5 degrees, aggregate mean, loops reject), best first:
# (candidate, score, min_link_score)
ADVISE_RANKING = [
    ("themis-3", 0.9438100907029479, 0.8780555555555556),
    ("themis-4", 0.9090412698412699, 0.7750555555555557),
    ("themis-2", 0.9021388888888888, 0.7553333333333332),
    ("themis-1", 0.8925479591836736, 0.6840731292517008),
]
ADVISE_SHIFTS_S = {
    "vgg16": 0.275, "vgg19": 0.18333333333333330, "wideresnet101": 0.12083333333333340,
    "resnet50": 0.05555555555555556, "bert": 0.0, "roberta": 0.14222222222222222,
}  # fmt: skip

# the same with aggregate=min, precision_deg=2, loops=score (the server's query test)
ADVISE_MIN_2DEG_RANKING = [
    ("themis-3", 0.9392535903250189, 0.8727437641723356),
    ("themis-4", 0.9045777777777779, 0.7676666666666669),
    ("themis-2", 0.8965138888888889, 0.746),
    ("themis-1", 0.8862773242630386, 0.6705612244897959),
]
ADVISE_MIN_2DEG_SHIFTS_S = {
    "vgg16": 0.24333333333333332, "vgg19": 0.018333333333333313,
    "wideresnet101": 0.08833333333333332, "resnet50": 0.05444444444444444, "bert": 0.0,
    "roberta": 0.05444444444444444,
}  # fmt: skip

# score --example: vgg16 and wideresnet101 interleave fully on the 0.3 s circle
SCORE = {"score": 1.0, "unified_period_s": 0.3, "n_angles": 72, "method": "exact",
         "time_shifts_s": {"vgg16": 0.0, "wideresnet101": 0.14583333333333334}}  # fmt: skip
SCORE_2DEG = {"score": 1.0, "unified_period_s": 0.3, "n_angles": 180, "method": "exact",
              "time_shifts_s": {"vgg16": 0.0, "wideresnet101": 0.145}}  # fmt: skip


def assert_advice(
    out: dict[str, Any],
    ranking: list[tuple[str, float, float]] = ADVISE_RANKING,
    shifts_s: dict[str, float] = ADVISE_SHIFTS_S,
) -> None:
    """``out`` (an advise answer as JSON) ranks, scores and shifts as pinned."""
    assert out["best"] == ranking[0][0]
    got = [(c["id"], c["score"], c["min_link_score"]) for c in out["candidates"]]
    assert [g[0] for g in got] == [r[0] for r in ranking]
    for g, r in zip(got, ranking, strict=True):
        assert g[1:] == pytest.approx(r[1:], abs=SCORE_TOL), g[0]
    assert out["time_shifts_s"] == pytest.approx(shifts_s, abs=SHIFT_TOL_S)


def assert_score(out: dict[str, Any], pinned: dict[str, Any] = SCORE) -> None:
    """``out`` (a score answer as JSON) is the pinned one."""
    assert out["score"] == pytest.approx(pinned["score"], abs=SCORE_TOL)
    assert out["unified_period_s"] == pytest.approx(pinned["unified_period_s"], abs=1e-12)
    assert (out["n_angles"], out["method"]) == (pinned["n_angles"], pinned["method"])
    assert out["time_shifts_s"] == pytest.approx(pinned["time_shifts_s"], abs=SHIFT_TOL_S)
