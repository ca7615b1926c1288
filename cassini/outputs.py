"""Files we write: JSON that every parser reads, output paths checked before the work that
fills them, and nothing half-written when a run is interrupted.

* :func:`json_text` — ``json.dumps`` with every non-finite float (NaN, ±inf: a ratio of
  nothing, a job with no intensity) written as ``null``; Python's ``NaN`` / ``Infinity``
  tokens are not JSON and strict parsers (browsers, ``jq``, Go, Rust) refuse them.
* :func:`check_output_dir` / :func:`check_output_file` — InputError naming the path when
  it cannot be written (it is a file where a folder is wanted, a folder on its way is a
  file, or permission is denied), raised before a long simulation rather than after.
* :func:`staged` — write a run's files into a hidden folder beside the output folder and
  move each one in when all are written: a run stopped half-way (Ctrl-C, an error)
  leaves the output folder as it was, never a truncated picture beside an old
  ``results.json``.  :func:`replaced` does the same for one file, and
  :func:`save_figure` for a matplotlib figure.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from cassini.errors import InputError


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (in dicts, lists and tuples) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def json_text(obj: Any, indent: int | None = 1) -> str:
    """``obj`` as strict JSON: non-finite floats as ``null`` (numpy floats included)."""
    return json.dumps(finite(obj), indent=indent, default=_plain, allow_nan=False)


def _plain(obj: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists (non-finite ones as None)."""
    if hasattr(obj, "tolist"):
        return finite(obj.tolist())
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def check_output_dir(path: str | Path) -> None:
    """InputError(path, problem) when ``path`` cannot be (made) a folder we write in."""
    target = Path(path)
    if target.exists():
        if not target.is_dir():
            raise InputError(str(path), "exists and is a file, expected a folder to write in")
        if not os.access(target, os.W_OK | os.X_OK):
            raise InputError(str(path), "cannot write: permission denied")
        return
    _check_parent(target, str(path))


def check_output_file(path: str | Path) -> None:
    """InputError(path, problem) when the file ``path`` cannot be written (its folder is
    made if missing)."""
    target = Path(path)
    if target.is_dir():
        raise InputError(str(path), "is a directory, expected a file to write")
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(str(path), "cannot write: permission denied")
    _check_parent(target, str(path))


def _check_parent(target: Path, name: str) -> None:
    """The nearest existing folder on ``target``'s way must be a writable folder."""
    for parent in target.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(name, f"cannot write: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InputError(name, f"cannot write in {parent}: permission denied")
            return


@contextmanager
def staged(out_dir: Path) -> Iterator[Path]:
    """A fresh hidden folder beside ``out_dir`` to write into; when the block ends
    normally every file in it is moved into ``out_dir`` (made if missing, files of the
    same name replaced) and the folder removed; when it raises (KeyboardInterrupt
    included) the folder is removed and ``out_dir`` left as it was."""
    check_output_dir(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        yield stage
        out_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted(stage.iterdir()):
            os.replace(path, out_dir / path.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; moved onto ``path`` when the block ends
    normally, removed when it raises (``path`` left as it was).  The file gets the mode
    an ordinary ``open(path, "w")`` would give it: an existing file's mode is kept, a
    new file gets 0666 less the umask (``mkstemp``'s 0600 had made every output private)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_file(path)
    try:
        yield tmp
        with suppress(FileNotFoundError):  # a new file: the umask applied when it was made
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))  # after writing: 0444 too
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _new_file(path: Path) -> Path:
    """A fresh, empty file named ``.NAME.partial-XXXXXXXX`` beside ``path``, created
    (exclusively) with mode 0666 so that the umask decides, as for any new file."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.partial-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(f"no free temporary name beside {path}")


def save_figure(fig: Any, path: str | Path, dpi: int = 100) -> None:
    """Matplotlib ``fig`` saved to ``path`` at ``dpi``, its format from the suffix (PNG
    without one), through :func:`replaced`: an interrupt leaves the old picture, never a
    truncated one."""
    path = Path(path)
    with replaced(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".").lower() or "png")
