"""Typed results of a testbed run: per scheme and job, iteration times (seconds), bytes,
worker log paths, measured profiles and the advice CASSINI followed.

``ExperimentResult.to_dict()`` is what ``results.json`` holds; ``from_dict`` reads it back.
Worker log paths are held absolute and written relative to results.json's folder (the
folder moves with its logs); :meth:`ExperimentResult.read` resolves them against it
(and still reads files written with absolute or working-directory-relative paths).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cassini.outputs import json_text
from cassini.profile import JobProfile
from testbed import iterations
from testbed.topo import LinkDirection


class JobDirection(str):
    """One job's own bytes on one link direction (the ``ideal`` scheme runs each job
    alone): its text ``"job:src->dst"`` is the key in that scheme's ``link_bytes``."""

    __slots__ = ()

    def __new__(cls, job_id: str, direction: str) -> JobDirection:
        return super().__new__(cls, f"{job_id}:{direction}")

    def __getnewargs__(self) -> tuple[str, str]:  # copy and pickle rebuild from the parts
        return (self.job_id, self.direction)

    @property
    def job_id(self) -> str:
        return self.partition(":")[0]

    @property
    def direction(self) -> LinkDirection:
        return LinkDirection.parse(self.partition(":")[2])

    @classmethod
    def parse(cls, text: str) -> JobDirection:
        job_id, colon, direction = text.partition(":")
        if not colon:
            raise ValueError(f"a job's link direction is 'job:src->dst', got {text!r}")
        return cls(job_id, direction)


@dataclass(frozen=True)
class JobResult:
    """One job in one scheme.  ``iteration_times_s`` are rank 0's (seconds between
    successive iteration ends); ``bytes`` is what all its ranks sent; ``logs`` are the
    ranks' JSON-lines logs, rank 0 first."""

    job_id: str
    iteration_times_s: tuple[float, ...]
    bytes: int
    logs: tuple[Path, ...]
    start_offset_s: float = 0.0
    comm_times_s: tuple[float, ...] = ()
    realignments: int | None = None
    released: bool | None = None
    period_s: float | None = None
    tolerance_s: float | None = None
    off_slot: tuple[int, ...] = ()  # held: indices into iteration_times_s the agent did not hold

    @property
    def summary(self) -> dict[str, float]:
        """Mean, p50, p99 iteration time (seconds)."""
        return iterations.summary(self.iteration_times_s)

    def records(self, rank: int = 0) -> list[dict[str, Any]]:
        """The rank's per-iteration log records."""
        return iterations.read_log(self.logs[rank])

    def to_dict(self, folder: Path | None = None) -> dict[str, Any]:
        """As results.json holds it: log paths relative to ``folder`` (results.json's)
        where they lie under it, else as they are."""
        out: dict[str, Any] = {
            "iteration_times_s": list(self.iteration_times_s),
            "bytes": self.bytes,
            "start_offset_s": self.start_offset_s,
            "comm_times_s": list(self.comm_times_s),
            "logs": [_log_text(p, folder) for p in self.logs],
        }
        for name in ("realignments", "released", "period_s", "tolerance_s"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.off_slot:
            out["off_slot"] = list(self.off_slot)
        return out

    @classmethod
    def from_dict(
        cls, job_id: str, obj: Mapping[str, Any], folder: Path | None = None
    ) -> JobResult:
        """Read back; with ``folder`` (results.json's), log paths resolved against it
        (:func:`resolve_log`)."""
        return cls(
            job_id=job_id,
            iteration_times_s=tuple(obj["iteration_times_s"]),
            bytes=int(obj["bytes"]),
            logs=tuple(resolve_log(p, folder) for p in obj.get("logs", ())),
            start_offset_s=float(obj.get("start_offset_s", 0.0)),
            comm_times_s=tuple(obj.get("comm_times_s", ())),
            realignments=obj.get("realignments"),
            released=obj.get("released"),
            period_s=obj.get("period_s"),
            tolerance_s=obj.get("tolerance_s"),
            off_slot=tuple(int(i) for i in obj.get("off_slot", ())),
        )


@dataclass(frozen=True)
class SchemeResult:
    """One scheme of a run: every job's result, the fabric, bytes per link direction,
    ECN marks, and for ``ideal``/``cassini`` the profiles measured and the advice."""

    name: str
    kind: str
    cc: str
    fabric: str
    jobs: Mapping[str, JobResult]
    link_bytes: Mapping[str, int] = field(default_factory=dict)
    ecn_marks: Mapping[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    profiles: Mapping[str, JobProfile] = field(default_factory=dict)
    profile_source: str | None = None
    advice: Mapping[str, Any] | None = None
    mltcp_flows: Mapping[str, Any] = field(default_factory=dict)  # job -> mode, steps, flows
    measured_as: str | None = None  # CASSINI declined: the scheme whose run is its schedule

    @property
    def summary(self) -> dict[str, dict[str, float]]:
        return {j: r.summary for j, r in self.jobs.items()}

    @property
    def reused_note(self) -> str:
        """What every table showing this row must say when it is another scheme's run
        (CASSINI declined every shift, so the runner copied that run): "" otherwise."""
        if self.measured_as is None:
            return ""
        return f"declined: {self.measured_as}'s run, not re-run"

    def ratios(self, ideal: SchemeResult, skip: int = 0) -> dict[str, float]:
        """Each job's mean iteration time (after ``skip`` iterations) over its ideal."""
        out = {}
        for job, r in self.jobs.items():
            base = ideal.jobs[job].iteration_times_s
            times = r.iteration_times_s[skip:]
            out[job] = (sum(times) / len(times)) / (sum(base) / len(base)) if times else math.nan
        return out

    def to_dict(self, folder: Path | None = None) -> dict[str, Any]:
        """As results.json holds it (log paths relative to ``folder``: JobResult.to_dict)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "cc": self.cc,
            "fabric": self.fabric,
            "jobs": {j: r.to_dict(folder) for j, r in self.jobs.items()},
            "summary": self.summary,
            "link_bytes": dict(self.link_bytes),
            "duration_s": self.duration_s,
        }
        if self.ecn_marks:
            out["ecn_marks"] = dict(self.ecn_marks)
        if self.profiles:
            out["profiles"] = {j: p.to_dict() for j, p in self.profiles.items()}
            out["profile_source"] = self.profile_source
        if self.advice is not None:
            out["advice"] = dict(self.advice)
        if self.mltcp_flows:
            out["mltcp_flows"] = dict(self.mltcp_flows)
        if self.measured_as is not None:
            out["measured_as"] = self.measured_as
        return out

    @classmethod
    def from_dict(
        cls, name: str, obj: Mapping[str, Any], folder: Path | None = None
    ) -> SchemeResult:
        return cls(
            name=name,
            kind=obj.get("kind", name),
            cc=obj["cc"],
            fabric=obj.get("fabric", ""),
            jobs={j: JobResult.from_dict(j, r, folder) for j, r in obj["jobs"].items()},
            link_bytes=obj.get("link_bytes", {}),
            ecn_marks=obj.get("ecn_marks", {}),
            duration_s=float(obj.get("duration_s", 0.0)),
            profiles={
                j: JobProfile.from_dict(p, f"profiles.{j}")
                for j, p in (obj.get("profiles") or {}).items()
            },
            profile_source=obj.get("profile_source"),
            advice=obj.get("advice"),
            mltcp_flows=obj.get("mltcp_flows", {}),
            measured_as=obj.get("measured_as"),
        )


@dataclass(frozen=True)
class ExperimentResult:
    """Every scheme of one config, in the order they ran, and the config itself.
    ``complete``: every scheme of the config ran (false in the results.json an
    interrupted or failed run leaves: the schemes before it).  ``folder``: where its
    results.json is (read from, or written by the runner): log paths are written
    relative to it."""

    schemes: Mapping[str, SchemeResult]
    config: Mapping[str, Any]
    complete: bool = True
    folder: Path | None = field(default=None, compare=False)

    @property
    def ideal(self) -> SchemeResult | None:
        return next((s for s in self.schemes.values() if s.kind == "ideal"), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schemes": {n: s.to_dict(self.folder) for n, s in self.schemes.items()},
            "config": dict(self.config),
            "complete": self.complete,
        }

    def write(self, path: Path) -> None:
        """``to_dict()`` as strict JSON (:func:`cassini.outputs.json_text`: NaN and
        infinities, e.g. the summary of a job without iterations, as ``null``), log
        paths relative to ``path``'s folder."""
        here = replace(self, folder=Path(path).absolute().parent)
        path.write_text(json_text(here.to_dict()))

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], folder: Path | None = None) -> ExperimentResult:
        """Read back; ``folder``: where results.json is (relative log paths resolved
        against it).  A file from before ``complete`` was written counts as complete."""
        return cls(
            {n: SchemeResult.from_dict(n, s, folder) for n, s in obj["schemes"].items()},
            obj.get("config", {}),
            complete=bool(obj.get("complete", True)),
            folder=folder,
        )

    @classmethod
    def read(cls, path: Path | str) -> ExperimentResult:
        """``path`` (a results.json), its log paths resolved against its folder."""
        path = Path(path)
        return cls.from_dict(json.loads(path.read_text()), path.absolute().parent)


def _log_text(log: Path, folder: Path | None) -> str:
    """``log`` as results.json in ``folder`` holds it: relative to ``folder`` when it lies
    under it (a relative ``log`` is the working directory's), else absolute."""
    if folder is None:
        return str(log)
    log, folder = Path(os.path.abspath(log)), Path(os.path.abspath(folder))
    return str(log.relative_to(folder)) if log.is_relative_to(folder) else str(log)


def resolve_log(text: str, folder: Path | None) -> Path:
    """A log path as results.json in ``folder`` holds it, made absolute.  Written since
    2026-11-29: relative to ``folder``.  Older files hold absolute paths, or paths
    relative to the working directory of their run (``--out relout``:
    ``relout/baseline/a-rank0.jsonl``); a path that is not there is looked up under
    ``folder`` by its tail (``folder/baseline/a-rank0.jsonl``), so a moved folder still
    reads.  Nothing found: ``folder/text`` (relative) or ``text`` (absolute)."""
    path = Path(text)
    if folder is None:
        return path
    first = path if path.is_absolute() else folder / path
    if first.exists():
        return first
    parts = path.parts[1:] if path.is_absolute() else path.parts
    for k in range(1, len(parts)):
        tail = folder.joinpath(*parts[k:])
        if tail.exists():
            return tail
    return first


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.results")
