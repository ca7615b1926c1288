"""Shared plumbing for the experiment scripts: run testbed configs, write results and
plots under ``results/<name>/``, print tables, report progress."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "results"


def out_dir(name: str, override: str | None = None) -> Path:
    path = Path(override) if override else RESULTS / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def p99(times: list[float]) -> float:
    """99th percentile by nearest rank (a measured iteration time, not an interpolation)."""
    ordered = sorted(times)
    return ordered[max(0, int(round(0.99 * len(ordered))) - 1)]


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def require_root() -> None:
    if os.geteuid() != 0:
        raise SystemExit("this experiment runs Mininet: it needs root")


def run_config(cfg: dict[str, Any], where: Path, label: str) -> dict[str, Any]:
    """Run one testbed config (quietly) and return its results."""
    from testbed.runner import load_config, run_experiment

    progress(f"{label} ...")
    res = run_experiment(load_config(cfg), where, progress=lambda m: None)
    return res


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, default=float))


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    """Rows as a fixed-width table; columns are (key, header, format)."""

    def cell(v: Any, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else str(v)

    body = [[cell(row.get(key, ""), fmt) for key, _, fmt in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, (_, h, _) in enumerate(columns)]
    lines = ["  ".join(h.ljust(w) for (_, h, _), w in zip(columns, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)
