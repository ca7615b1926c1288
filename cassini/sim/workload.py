"""Jobs that arrive at the simulated cluster: the profile library, Poisson arrivals at a
given load, and trace files.

Trace format (CSV with a header row, or a JSON array of objects), one job per row,
modelled on the Philly trace's fields:

=============  ===========================================================
``job_id``     unique id (Philly: ``jobid``)
``arrival_s``  submission time, seconds from the start (Philly: ``submitted_time``)
``gpus``       GPUs requested (Philly: ``num_gpus``)
``iterations`` iterations to train; or ``duration_s``, the run time on a dedicated
               network (Philly: ``duration``), turned into iterations with the
               model's iteration time
``model``      a profile id from the library (``cassini/data/profiles.json`` or a
               file given with ``--profiles``)
=============  ===========================================================
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from cassini import schema
from cassini.errors import InputError
from cassini.profile import JobProfile, profiles_from_dicts

TRACE_FIELDS = ("job_id", "arrival_s", "gpus", "iterations", "model")


@dataclass(frozen=True)
class JobSpec:
    """A job as submitted: arrives at ``arrival_s`` seconds asking for ``gpus`` GPUs to
    train ``iterations`` iterations of ``model`` (a profile id)."""

    job_id: str
    arrival_s: float
    gpus: int
    iterations: int
    model: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- profile library ----------------------------------------------------------------------
def load_library(extra: Sequence[Path | str] = ()) -> dict[str, JobProfile]:
    """The shipped profile library plus profiles from ``extra`` JSON files (one profile
    object or an array of them each, e.g. written by ``testbed.measure``); a later file
    replaces a profile of the same id."""
    text = resources.files("cassini").joinpath("data/profiles.json").read_text()
    library = {p.job_id: p for p in profiles_from_dicts(json.loads(text), "library")}
    for path in extra:
        try:
            data = json.loads(Path(path).read_text())
        except OSError as e:
            raise InputError("profiles", f"cannot read {path}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise InputError("profiles", f"{path}: malformed JSON: {e.msg}") from None
        items = data if isinstance(data, list) else [data]
        library |= {p.job_id: p for p in profiles_from_dicts(items, str(path))}
    return library


# -- Poisson arrivals ---------------------------------------------------------------------
def poisson_jobs(
    n_jobs: int,
    load: float,
    total_gpus: int,
    library: Mapping[str, JobProfile],
    *,
    gpus: Mapping[int, float],
    iterations: tuple[int, int] = (200, 1000),
    models: Sequence[str] | None = None,
    seed: int = 0,
) -> list[JobSpec]:
    """``n_jobs`` jobs arriving as a Poisson process at ``load``.

    Parameters
    ----------
    n_jobs : number of jobs.
    load : offered load, the mean fraction of the cluster's GPUs that the jobs would keep
        busy on a dedicated network (1.0 = all of them).
    total_gpus : GPUs in the cluster.
    library : profiles by id.
    gpus : GPU-count distribution, ``{gpus: weight}``.
    iterations : inclusive range of iterations per job, drawn uniformly (paper: 200-1000).
    models : profile ids drawn uniformly (default: the whole library, as the paper).
    seed : random seed.

    Returns
    -------
    Jobs sorted by arrival; the arrival rate is ``load * total_gpus / E[gpus * run time]``.
    """
    if n_jobs < 1:
        raise InputError("n_jobs", f"must be >= 1, got {n_jobs}")
    schema.number(load, "load", positive=True)
    models = list(models or sorted(library))
    for m in models:
        if m not in library:
            raise InputError(
                "models", f"unknown model {m!r} (library: {', '.join(sorted(library))})"
            )
    sizes = np.array(sorted(gpus), int)
    weights = np.array([gpus[int(g)] for g in sizes], float)
    if len(sizes) == 0 or (sizes < 1).any() or (weights < 0).any() or weights.sum() <= 0:
        raise InputError("gpus", "needs GPU counts >= 1 with non-negative weights, not all 0")
    if sizes.max() > total_gpus:
        raise InputError("gpus", f"{sizes.max()} GPUs requested but the cluster has {total_gpus}")
    lo, hi = iterations
    if not 1 <= lo <= hi:
        raise InputError("iterations", f"need 1 <= low <= high, got {iterations}")
    rng = np.random.default_rng(seed)
    size = rng.choice(sizes, n_jobs, p=weights / weights.sum())
    iters = rng.integers(lo, hi + 1, n_jobs)
    model = rng.choice(np.array(models), n_jobs)
    mean_t = np.mean([library[m].iteration_time_s for m in models])
    mean_work = float(np.sum(sizes * weights) / weights.sum()) * (lo + hi) / 2 * mean_t  # GPU-s
    rate = load * total_gpus / mean_work  # jobs per second
    arrival = np.cumsum(rng.exponential(1 / rate, n_jobs))
    arrival -= arrival[0]
    return [
        JobSpec(f"j{k}", float(arrival[k]), int(size[k]), int(iters[k]), str(model[k]))
        for k in range(n_jobs)
    ]


# -- trace files --------------------------------------------------------------------------
def read_trace(path: Path | str, library: Mapping[str, JobProfile]) -> list[JobSpec]:
    """Read a CSV or JSON trace (see the module docstring); raises InputError naming the
    row and field of the first problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError("trace", f"cannot read {path}: {e.strerror}") from None
    if path.suffix.lower() == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(
                "trace", f"{path}: malformed JSON at line {e.lineno}: {e.msg}"
            ) from None
        rows = schema.array(rows, "trace", non_empty=True)
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
        if not rows:
            raise InputError("trace", f"{path}: no rows (CSV needs a header and one row per job)")
    return jobs_from_rows(rows, library)


def jobs_from_rows(rows: Sequence[Any], library: Mapping[str, JobProfile]) -> list[JobSpec]:
    jobs, seen = [], set()
    for k, row in enumerate(rows):
        f = f"trace[{k}]"
        row = schema.require_object(row, f)
        optional = ("iterations", "duration_s")
        schema.check_fields(row, f, ("job_id", "arrival_s", "gpus", "model"), optional)
        job_id = schema.identifier(row["job_id"], f"{f}.job_id")
        if job_id in seen:
            raise InputError(f"{f}.job_id", f"duplicate job id {job_id!r}")
        seen.add(job_id)
        model = schema.identifier(row["model"], f"{f}.model")
        if model not in library:
            raise InputError(f"{f}.model", f"unknown model {model!r}")
        arrival = schema.number(_num(row["arrival_s"]), f"{f}.arrival_s", non_negative=True)
        gpus = schema.number(_num(row["gpus"]), f"{f}.gpus", positive=True)
        if gpus != int(gpus):
            raise InputError(f"{f}.gpus", f"must be a whole number, got {gpus:g}")
        given = [name for name in optional if row.get(name) not in (None, "")]
        if len(given) != 1:
            raise InputError(f, "give exactly one of iterations and duration_s")
        if given[0] == "iterations":
            iters = schema.number(_num(row["iterations"]), f"{f}.iterations", positive=True)
        else:
            duration = schema.number(_num(row["duration_s"]), f"{f}.duration_s", positive=True)
            iters = max(1.0, duration / library[model].iteration_time_s)
        jobs.append(JobSpec(job_id, arrival, int(gpus), int(math.ceil(iters)), model))
    return sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))


def write_trace(jobs: Sequence[JobSpec], path: Path | str) -> None:
    """Write jobs as a CSV (``.csv``) or JSON trace that :func:`read_trace` reads back."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps([j.to_dict() for j in jobs], indent=1))
        return
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TRACE_FIELDS)
        writer.writeheader()
        for j in jobs:
            writer.writerow(j.to_dict())


def _num(value: Any) -> Any:
    """CSV cells are strings: turn numeric ones into numbers, leave the rest to fail."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value
