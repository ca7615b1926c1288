"""What ``mltcp load`` and ``select`` changed in the kernel, kept in ``/run/mltcp/state.json``
so ``unload`` can put it back."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mltcp.pinned import MltcpError

STATE = Path("/run/mltcp/state.json")
LOCK_NAME = "state.lock"  # beside STATE: the flock every read-modify-write of it holds
JOBS_KEPT = 4096  # job names remembered (as many as the kernel's port and mark maps hold)


@dataclass(frozen=True)
class LoaderState:
    """``allowed_before`` / ``default_before``: the allowed list and the default congestion
    control found by the first ``load`` (None until then); ``loaded``: the congestion
    controls ``load`` registered; ``cgroups``: the cgroup directories given to ``select``;
    ``netns``: (namespace, the congestion control it selected before ``select --netns``
    first changed it) for every named namespace given to ``select``, sorted; ``jobs``:
    (job key, the name it was given as) for the last :data:`JOBS_KEPT` jobs given to
    ``select --job``, ``assign-port`` or ``mark``, in the order first given, so ``status
    --flows`` can name a flow's job (the kernel knows only the key, a hash of the name)."""

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


_held = threading.RLock()  # this process's hold on the flock (its threads wait on it)
_fd: int | None = None  # the lock file's descriptor while this process holds the flock
_depth = 0  # how many nested locked() blocks of this process hold it


def _after_fork_in_child() -> None:
    """A child forked inside :func:`locked` does not hold the lock: it closes its copy of
    the descriptor (which would keep the parent's flock alive) and starts afresh."""
    global _held, _fd, _depth
    if _fd is not None:
        os.close(_fd)
    _held, _fd, _depth = threading.RLock(), None, 0


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextmanager
def locked() -> Iterator[None]:
    """Hold the loader state's lock (an ``flock`` on :data:`LOCK_NAME` beside
    :data:`STATE`) for one read-modify-write of it: ``mark``, ``assign-port``, ``status``,
    ``select``, ``load`` and ``unload`` may run at once, and a write between another's read
    and write was lost (the loaded controls with it, so ``unload`` could not put the host
    back).  Nested uses in one process share the lock (``select`` forgets removed cgroups
    and records a job inside its own); also a decorator."""
    global _fd, _depth
    with _held:
        if _depth == 0:
            STATE.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(STATE.with_name(LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            _fd = fd
        _depth += 1
        try:
            yield
        finally:
            _depth = max(_depth - 1, 0)  # 0 already in a child forked inside (reset)
            if _depth == 0 and _fd is not None:
                os.close(_fd)  # releases the flock
                _fd = None


def remember_job(job: int | str) -> None:
    """Record the name ``job`` was given as (``select --job``, ``assign-port``, ``mark``)
    under its kernel key, for ``status --flows``.  A name already recorded is not written
    again (``mark`` runs at every iteration)."""
    from mltcp.marks import job_key

    key, name = job_key(job), str(job)
    if read_state().job_names().get(key) == name:
        return
    with locked():
        state = read_state()
        if state.job_names().get(key) == name:  # recorded meanwhile
            return
        names = [(k, v) for k, v in state.jobs if k != key] + [(key, name)]
        save_state(replace(state, jobs=tuple(names[-JOBS_KEPT:])))


def read_state() -> LoaderState:
    """The saved state; an empty one when there is none or it is not JSON (written by hand:
    :func:`save_state` replaces the file whole)."""
    try:
        raw = json.loads(STATE.read_text())
    except (OSError, ValueError):
        return LoaderState()
    return LoaderState.from_json(raw)


def save_state(state: LoaderState) -> None:
    """Write ``state`` to :data:`STATE` whole: a temporary file in its folder, renamed over
    it (a reader sees the old file or the new one, never a half-written one; mode 0644).
    A read-modify-write holds :func:`locked`."""
    STATE.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=STATE.parent, prefix=f".{STATE.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(state.to_json()))
        os.chmod(tmp, 0o644)
        os.replace(tmp, STATE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
