"""What a report's pictures showed: every matplotlib figure saved while a test runs,
kept by file name, and the checks people make by eye (a legend over the data, a text
past its panel) as numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest


def capture(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Figures saved from now on, by file name (the last one saved under a name)."""
    from matplotlib.figure import Figure

    saved: dict[str, Any] = {}
    real = Figure.savefig

    def savefig(self: Figure, fname: Any, *args: Any, **kwargs: Any) -> Any:
        name = Path(str(fname)).name
        if name.startswith(".") and ".partial-" in name:  # cassini.outputs.replaced's file
            name = name[1:].rsplit(".partial-", 1)[0]
        saved[name] = self
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved


def _sampled(points: np.ndarray, per_segment: int = 12) -> np.ndarray:
    """Points along a polyline, ``per_segment`` between each two vertices."""
    points = points[np.isfinite(points).all(axis=1)]
    if len(points) < 2:
        return points
    t = np.linspace(0.0, 1.0, per_segment, endpoint=False)[None, :, None]
    a, b = points[:-1, None, :], points[1:, None, :]
    return np.vstack([(a + t * (b - a)).reshape(-1, 2), points[-1:]])


def data_points(ax: Any) -> np.ndarray:
    """The display coordinates of everything drawn as data in ``ax``: lines (error bars
    and reference lines too) and filled areas' outlines, sampled along their segments."""
    out = [np.zeros((0, 2))]
    for line in ax.lines:
        if line.get_visible() and len(line.get_xydata()):
            xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
            out.append(_sampled(xy))
    for coll in ax.collections:
        for path in coll.get_paths():
            if len(path.vertices):
                out.append(_sampled(coll.get_transform().transform(path.vertices)))
    return np.vstack(out)


def renderer(fig: Any) -> Any:
    """``fig`` drawn (again) on an Agg canvas (a closed pyplot figure has none)."""
    if not hasattr(fig.canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def legends(fig: Any) -> list[Any]:
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]


def points_under_legends(fig: Any) -> int:
    """How many drawn data points any legend of ``fig`` covers."""
    drawn = renderer(fig)
    covered = 0
    for leg in legends(fig):
        box = leg.get_window_extent(drawn)
        for ax in fig.axes:
            p = data_points(ax)
            x, y = p[:, 0], p[:, 1]
            inside = (x > box.x0) & (x < box.x1) & (y > box.y0) & (y < box.y1)
            covered += int(inside.sum())
    return covered


def inside_figure(fig: Any, artist: Any) -> bool:
    box = artist.get_window_extent(renderer(fig))
    frame = fig.bbox
    return (
        box.x0 >= frame.x0 - 1
        and box.x1 <= frame.x1 + 1
        and box.y0 >= frame.y0 - 1
        and box.y1 <= frame.y1 + 1
    )


def legend_over_panels(fig: Any) -> bool:
    """Whether a legend of ``fig`` overlaps any of its panels (axes)."""
    drawn = renderer(fig)
    return any(
        leg.get_window_extent(drawn).overlaps(ax.get_window_extent(drawn))
        for leg in legends(fig)
        for ax in fig.axes
        if ax.get_visible() and ax.axison
    )
