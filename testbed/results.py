"""Typed results of a testbed run: per scheme and job, iteration times (seconds), bytes,
worker log paths, measured profiles and the advice CASSINI followed.

``ExperimentResult.to_dict()`` is what ``results.json`` holds; ``from_dict`` reads it back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "iteration_times_s": list(self.iteration_times_s),
            "bytes": self.bytes,
            "start_offset_s": self.start_offset_s,
            "comm_times_s": list(self.comm_times_s),
            "logs": [str(p) for p in self.logs],
        }
        for name in ("realignments", "released", "period_s", "tolerance_s"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.off_slot:
            out["off_slot"] = list(self.off_slot)
        return out

    @classmethod
    def from_dict(cls, job_id: str, obj: Mapping[str, Any]) -> JobResult:
        return cls(
            job_id=job_id,
            iteration_times_s=tuple(obj["iteration_times_s"]),
            bytes=int(obj["bytes"]),
            logs=tuple(Path(p) for p in obj.get("logs", ())),
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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "cc": self.cc,
            "fabric": self.fabric,
            "jobs": {j: r.to_dict() for j, r in self.jobs.items()},
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
    def from_dict(cls, name: str, obj: Mapping[str, Any]) -> SchemeResult:
        return cls(
            name=name,
            kind=obj.get("kind", name),
            cc=obj["cc"],
            fabric=obj.get("fabric", ""),
            jobs={j: JobResult.from_dict(j, r) for j, r in obj["jobs"].items()},
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
    """Every scheme of one config, in the order they ran, and the config itself."""

    schemes: Mapping[str, SchemeResult]
    config: Mapping[str, Any]

    @property
    def ideal(self) -> SchemeResult | None:
        return next((s for s in self.schemes.values() if s.kind == "ideal"), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schemes": {n: s.to_dict() for n, s in self.schemes.items()},
            "config": dict(self.config),
        }

    def write(self, path: Path) -> None:
        """``to_dict()`` as strict JSON (:func:`cassini.outputs.json_text`: NaN and
        infinities, e.g. the summary of a job without iterations, as ``null``)."""
        path.write_text(json_text(self.to_dict()))

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> ExperimentResult:
        return cls(
            {n: SchemeResult.from_dict(n, s) for n, s in obj["schemes"].items()},
            obj.get("config", {}),
        )

    @classmethod
    def read(cls, path: Path | str) -> ExperimentResult:
        return cls.from_dict(json.loads(Path(path).read_text()))


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.results")
