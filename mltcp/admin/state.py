"""What ``mltcp load`` and ``select`` changed in the kernel, kept in ``/run/mltcp/state.json``
so ``unload`` can put it back."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mltcp.pinned import MltcpError

STATE = Path("/run/mltcp/state.json")
JOBS_KEPT = 4096  # job names remembered (as many as the kernel's port and mark maps hold)


@dataclass(frozen=True)
class LoaderState:
    """``allowed_before`` / ``default_before``: the allowed list and the default congestion
    control found by the first ``load`` (None until then); ``loaded``: the congestion
    controls ``load`` registered; ``cgroups``: the cgroup directories given to ``select``;
    ``netns``: (namespace, the congestion control it selected before ``select --netns``
    first changed it) for every named namespace given to ``select``, sorted; ``jobs``:
    (job key, the name it was given as) for the last :data:`JOBS_KEPT` jobs given to
    ``select --job``, ``assign-port`` or ``mark``, oldest first, so ``status --flows`` can
    name a flow's job (the kernel knows only the key, a hash of the name)."""

    allowed_before: tuple[str, ...] | None = None
    default_before: str | None = None
    loaded: tuple[str, ...] = ()
    cgroups: tuple[str, ...] = ()
    netns: tuple[tuple[str, str], ...] = ()
    jobs: tuple[tuple[int, str], ...] = ()

    def netns_before(self) -> dict[str, str]:
        """Each namespace given to ``select --netns``: the control it selected before."""
        return dict(self.netns)

    def job_names(self) -> dict[int, str]:
        """Each job key recorded: the name it was given as."""
        return dict(self.jobs)

    @classmethod
    def from_json(cls, raw: Any) -> LoaderState:
        """The state as saved; a field of the wrong type is an :class:`MltcpError` naming
        it."""
        if not isinstance(raw, dict):
            raise MltcpError(f"{STATE}: expected a JSON object, got {type(raw).__name__}")
        before = raw.get("allowed_before")
        default = raw.get("default_before")
        if default is not None and not isinstance(default, str):
            raise MltcpError(f"{STATE}: default_before must be a string, got {default!r}")
        return cls(
            None if before is None else _names(before, "allowed_before"),
            default,
            _names(raw.get("loaded", []), "loaded"),
            _names(raw.get("cgroups", []), "cgroups"),
            _netns(raw.get("netns", {})),
            _jobs(raw.get("jobs", {})),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"loaded": list(self.loaded), "cgroups": list(self.cgroups)}
        if self.allowed_before is not None:
            out["allowed_before"] = list(self.allowed_before)
        if self.default_before is not None:
            out["default_before"] = self.default_before
        if self.netns:
            out["netns"] = dict(self.netns)
        if self.jobs:
            out["jobs"] = {str(k): v for k, v in self.jobs}
        return out


def _names(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MltcpError(f"{STATE}: {name} must be a list of strings, got {value!r}")
    return tuple(value)


def _netns(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise MltcpError(f"{STATE}: netns must map namespace names to strings, got {value!r}")
    return tuple(sorted(value.items()))


def _jobs(value: Any) -> tuple[tuple[int, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k.isdigit() and isinstance(v, str) for k, v in value.items()
    ):
        raise MltcpError(f"{STATE}: jobs must map job keys (digits) to names, got {value!r}")
    return tuple((int(k), v) for k, v in value.items())


def remember_job(job: int | str) -> None:
    """Record the name ``job`` was given as (``select --job``, ``assign-port``, ``mark``)
    under its kernel key, for ``status --flows``."""
    from mltcp.marks import job_key

    state = read_state()
    key = job_key(job)
    if state.jobs[-1:] == ((key, str(job)),):  # already the newest
        return
    names = [(k, v) for k, v in state.jobs if k != key] + [(key, str(job))]
    save_state(replace(state, jobs=tuple(names[-JOBS_KEPT:])))


def read_state() -> LoaderState:
    """The saved state; an empty one when there is none or it is not JSON (a crash while
    writing it)."""
    try:
        raw = json.loads(STATE.read_text())
    except (OSError, ValueError):
        return LoaderState()
    return LoaderState.from_json(raw)


def save_state(state: LoaderState) -> None:
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state.to_json()))
