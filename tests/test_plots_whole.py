"""The experiments' pictures are written whole or not at all: a run stopped while a
figure is being saved keeps the previous picture, and leaves no partial file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from experiments.plots import figure

ROOT = Path(__file__).resolve().parent.parent


def test_an_interrupted_save_keeps_the_old_picture(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    path = tmp_path / "cdf.png"
    path.write_bytes(b"old picture")
    real = Figure.savefig

    def cut(self, fname, *args, **kwargs):
        real(self, fname, *args, **kwargs)
        Path(fname).write_bytes(Path(fname).read_bytes()[:10])  # half of it on disk...
        raise KeyboardInterrupt  # ...when Ctrl-C arrives

    monkeypatch.setattr(Figure, "savefig", cut)
    with pytest.raises(KeyboardInterrupt), figure(path) as (_, ax):
        ax.plot([0, 1], [0, 1])
    assert path.read_bytes() == b"old picture"
    assert [p.name for p in tmp_path.iterdir()] == ["cdf.png"]


def test_a_saved_picture_is_a_whole_png_with_its_name(tmp_path):
    path = tmp_path / "new" / "timeline.png"
    with figure(path) as (_, ax):
        ax.plot([0, 1], [1, 0])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["timeline.png"]


def test_experiments_save_pictures_only_through_save_figure():
    """A bare ``fig.savefig(path)`` writes in place: the experiments call
    ``cassini.outputs.save_figure`` (or ``experiments.plots.figure``), which goes through
    a file beside."""
    bare = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "experiments").glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\.savefig\(", line) and "tmp" not in line
    ]
    assert bare == [], bare
