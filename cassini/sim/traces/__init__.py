"""Readers for the GPU-cluster traces people publish, one module per format."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.sim.traces import acme, helios, lingjun, ours, pai2020, philly, pollux, tiresias
from cassini.sim.traces.common import BadRow, NotThisFormat, TraceRead
from cassini.sim.traces.files import check_not_gzip

__all__ = ["READERS", "BadRow", "NotThisFormat", "TraceRead", "detect", "read"]

#: Every reader by its ``--format`` name.  Detection tries them in this order.
READERS: dict[str, ModuleType] = {
    m.NAME: m for m in (philly, lingjun, pai2020, acme, helios, tiresias, pollux, ours)
}


def detect(path: Path | str) -> str:
    """The format of ``path`` from its name and first bytes; InputError when none fits."""
    path = Path(path)
    if path.is_dir():
        for name in ("pai2020", "lingjun"):
            if READERS[name].sniff(path, ""):
                return name
        raise InputError("format", f"{path}: a directory holding no known trace tables")
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as f:
            head = f.read(65536)
    except OSError as e:
        raise InputError("trace", f"cannot read {path}: {e.strerror}") from None
    for name, reader in READERS.items():
        if reader.sniff(path, head):
            return name
    raise InputError(
        "format",
        f"{path}: cannot tell the trace format; give --format (one of {', '.join(READERS)})",
    )


def read(
    path: Path | str,
    library: Mapping[str, JobProfile],
    *,
    format: str | None = None,
    seed: int = 0,
    strict: bool = True,
    max_gpus: int | None = None,
) -> TraceRead:
    """Read ``path`` in ``format`` (detected when None) into jobs.

    ``seed`` drives the seeded rules (model choice, drawn iterations) of formats that
    need them.  ``strict``: the first malformed row raises :class:`BadRow`
    (``file:line:column: field: problem``); otherwise bad rows are collected in the
    result.  ``max_gpus`` (the cluster's GPUs): a job asking for more is a bad row naming
    the row's GPU field.  A file that is not in ``format`` raises :class:`NotThisFormat`
    saying what was expected."""
    path = Path(path)
    if not path.is_dir():
        check_not_gzip(path)  # else detection reads it as mangled text
    name = format or detect(path)
    if name not in READERS:
        raise InputError("format", f"unknown trace format {name!r} (one of {', '.join(READERS)})")
    if not path.exists():
        raise InputError("trace", f"cannot read {path}: No such file or directory")
    result = READERS[name].read(path, library, seed=seed, strict=strict, max_gpus=max_gpus)
    if format is None:
        result.notes.insert(0, f"format: {name} (detected)")
    return result
