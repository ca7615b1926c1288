"""cassini.outputs: strict JSON, output paths checked before the work, and nothing
half-written when a write is interrupted."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cassini import outputs
from cassini.errors import InputError


def test_non_finite_floats_are_null_and_the_text_is_strict_json() -> None:
    data = {"nan": math.nan, "inf": [math.inf, -math.inf, 1.5], "np": np.float64("nan"),
            "arr": np.array([1.0, np.inf]), "tuple": (math.nan, 2), "ok": 0.25}  # fmt: skip
    text = outputs.json_text(data)

    def refuse(token: str) -> None:
        raise AssertionError(token)

    assert json.loads(text, parse_constant=refuse) == {
        "nan": None, "inf": [None, None, 1.5], "np": None, "arr": [1.0, None],
        "tuple": [None, 2], "ok": 0.25,
    }  # fmt: skip


def test_output_paths_that_cannot_be_written_are_named(tmp_path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(InputError, match="exists and is a file"):
        outputs.check_output_dir(afile)
    with pytest.raises(InputError, match="is a file, not a folder"):
        outputs.check_output_dir(afile / "sub" / "deeper")
    with pytest.raises(InputError, match="is a file, not a folder"):
        outputs.check_output_file(afile / "x.csv")
    with pytest.raises(InputError, match="is a directory"):
        outputs.check_output_file(tmp_path)
    outputs.check_output_dir(tmp_path / "new" / "folder")  # made later: fine
    outputs.check_output_file(tmp_path / "new" / "file.csv")
    assert not (tmp_path / "new").exists()  # checking makes nothing


def test_a_staged_write_moves_in_whole_or_leaves_the_folder_as_it_was(tmp_path) -> None:
    out = tmp_path / "out"
    with outputs.staged(out) as stage:
        (stage / "results.json").write_text("{}")
        (stage / "cdf.png").write_bytes(b"png")
    assert sorted(p.name for p in out.iterdir()) == ["cdf.png", "results.json"]
    with pytest.raises(KeyboardInterrupt), outputs.staged(out) as stage:
        (stage / "results.json").write_text('{"new": 1}')
        (stage / "cdf.png").write_bytes(b"half")
        raise KeyboardInterrupt
    assert (out / "results.json").read_text() == "{}"  # the old run's files, untouched
    assert (out / "cdf.png").read_bytes() == b"png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no partial folder left


def test_a_replaced_file_is_whole_or_as_it_was(tmp_path) -> None:
    path = tmp_path / "sub" / "trace.csv"
    with outputs.replaced(path) as tmp:
        tmp.write_text("a,b\n")
    assert path.read_text() == "a,b\n"
    with pytest.raises(RuntimeError), outputs.replaced(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("stopped")
    assert path.read_text() == "a,b\n"
    assert [p.name for p in path.parent.iterdir()] == ["trace.csv"]
