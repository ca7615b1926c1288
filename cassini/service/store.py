"""Where the registry's state survives a restart: an embedded SQLite database
(``cassini serve --state PATH``; ``:memory:`` keeps it in memory, as before).

What it holds: the jobs registered over HTTP, the time-shifts set by PUT (and releases),
and the epoch (UNIX seconds) every job's slots count from, chosen once, when the file is
made, and kept.  WAL journal, ``synchronous=FULL``, one transaction per write: an answer
2xx is sent after its transaction committed, so a write the client saw acknowledged is
in the file, whatever happens to the process after.  The schema's version is
``PRAGMA user_version``; an older file is migrated in place, a newer one or a file that
is not a sound SQLite database is refused (:class:`StateError`) and left as it is, and
so is a SQLite database of another program (tables of its own and no cassini schema).

A row the service wrote is never a reason to refuse the file: a job row it can no longer
read is kept as it is and reported (:attr:`StoredJobs.unreadable`), never dropped, and so
is a time-shift row that breaks PUT's rules (:attr:`StoredShifts.unreadable`).  A job
registered by ``model`` is stored with the model *and* the profile it resolved to; it is
read back with that profile (the library may have changed since), the model as its label.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cassini.agent import MAX_PERIOD_S, MIN_PERIOD_S, epoch_problem
from cassini.errors import InputError
from cassini.service.cluster import RunningJob, read_job
from cassini.service.shifts import JobShift

MEMORY = ":memory:"
#: The schema this code writes; MIGRATIONS[v] takes a file from version v - 1 to v.
SCHEMA_VERSION = 1
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, body TEXT NOT NULL)",
        "CREATE TABLE shifts (job_id TEXT PRIMARY KEY, shift INTEGER NOT NULL, "
        "shift_s REAL NOT NULL, period_s REAL NOT NULL, epoch_s REAL, reason TEXT)",
    ),
}


OUR_TABLES = frozenset({"meta", "jobs", "shifts"})


class StateError(Exception):
    """The state file cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class StoredJobs:
    """The job rows of a state file: those read (``jobs``) and those kept but no longer
    readable (``unreadable``: id -> why, with the row's iteration time in seconds when it
    still gives one, else None)."""

    jobs: list[RunningJob] = field(default_factory=list)
    unreadable: dict[str, tuple[str, float | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredShifts:
    """The time-shift rows of a state file: those read (``shifts``) and those kept but no
    longer readable (``unreadable``: job id -> why)."""

    shifts: list[JobShift] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)


class Store:
    """The registry's persistent half.  Not thread-safe: the service calls it from its
    event loop only, one write at a time."""

    def __init__(self, path: str = MEMORY, *, default_epoch_s: float) -> None:
        self.path = path
        self._lock_fd = _lock(path)  # before SQLite opens it: one file, one process
        try:
            self._conn = _connect(path)
        except StateError:
            self._unlock()
            raise
        try:
            self._check_and_migrate()
            self.epoch_s = self._epoch(default_epoch_s)
        except sqlite3.DatabaseError as e:
            self.close()
            raise StateError(f"{path}: not a usable SQLite database: {e}") from None
        except StateError:
            self.close()
            raise

    # -- opening ---------------------------------------------------------------------
    def _check_and_migrate(self) -> None:
        conn = self._conn
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # reads the header
        tables = {
            name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%'"
            )
        }
        if (version == 0 and tables) or (0 < version <= SCHEMA_VERSION
                                         and not tables >= OUR_TABLES):
            raise StateError(
                f"{self.path}: not a cassini state file ({_foreign(version, tables)}); "
                "give another --state file"
            )
        if version > SCHEMA_VERSION:
            raise StateError(
                f"{self.path}: schema version {version} is newer than this cassini's "
                f"({SCHEMA_VERSION}); run a newer cassini or give another --state file"
            )
        if self.path != MEMORY:
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StateError(f"{self.path}: damaged database: {check}")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StateError(f"{self.path}: cannot use WAL journal mode (got {mode})")
        conn.execute("PRAGMA synchronous=FULL")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self._transaction():
                for statement in MIGRATIONS[target]:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {target}")

    def _epoch(self, default_epoch_s: float) -> float:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'epoch_s'").fetchone()
        if row is not None:
            try:
                epoch_s = float(row[0])
            except (TypeError, ValueError):
                epoch_s = math.nan
            # the rule of PUT and the cluster file: UNIX seconds, finite, in [0, 1e10)
            problem = epoch_problem(epoch_s)
            if problem is not None:
                raise StateError(
                    f"{self.path}: meta.epoch_s is {str(row[0])[:40]!r}: {problem}"
                )
            return epoch_s
        with self._transaction():
            self._conn.execute(
                "INSERT INTO meta (key, value) VALUES ('epoch_s', ?)", (repr(default_epoch_s),)
            )
        return default_epoch_s

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- reading ---------------------------------------------------------------------
    def jobs(self) -> StoredJobs:
        """The jobs registered over HTTP, each row checked as a request body is (a model
        with its stored profile allowed); rows that fail are kept and reported."""
        out = StoredJobs()
        for job_id, body in self._conn.execute("SELECT id, body FROM jobs ORDER BY id"):
            try:
                job = stored_job(json.loads(body))
                if job.job_id != job_id:
                    raise InputError("id", f"the row's body names job {job.job_id!r}")
                out.jobs.append(job)
            except (ValueError, TypeError, InputError) as e:
                out.unreadable[str(job_id)] = (f"stored row unreadable: {e}",
                                               _iteration_time_s(body))
        return out

    def shifts(self) -> StoredShifts:
        """The time-shifts set explicitly (by PUT), each row checked as PUT checks its
        body; rows that fail are kept and reported."""
        out = StoredShifts()
        rows = self._conn.execute(
            "SELECT job_id, shift, shift_s, period_s, epoch_s, reason FROM shifts ORDER BY job_id"
        )
        for j, s, a, p, e, r in rows:
            problem = _shift_row_problem(s, a, p, e, r)
            if problem is not None:
                out.unreadable[str(j)] = f"stored time-shift unreadable: {problem}"
            else:
                out.shifts.append(JobShift(j, bool(s), float(a), float(p), r, None,
                                           None if e is None else float(e)))
        return out

    # -- writing: one transaction each ---------------------------------------------------
    def put_job(self, job: RunningJob) -> None:
        """Register or replace a job; its explicit shift goes."""
        body = json.dumps(job.to_dict(), separators=(",", ":"))
        with self._transaction():
            self._conn.execute("INSERT OR REPLACE INTO jobs (id, body) VALUES (?, ?)",
                               (job.job_id, body))
            self._conn.execute("DELETE FROM shifts WHERE job_id = ?", (job.job_id,))

    def delete_job(self, job_id: str) -> None:
        with self._transaction():
            self._conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
            self._conn.execute("DELETE FROM shifts WHERE job_id = ?", (job_id,))

    def set_shift(self, shift: JobShift) -> None:
        with self._transaction():
            self._conn.execute(
                "INSERT OR REPLACE INTO shifts (job_id, shift, shift_s, period_s, epoch_s, "
                "reason) VALUES (?, ?, ?, ?, ?, ?)",
                (shift.job_id, int(shift.shift), shift.shift_s, shift.period_s, shift.epoch_s,
                 shift.reason),
            )

    def forget_shifts(self, keep: set[str]) -> None:
        """Drop the explicit shifts of jobs not in ``keep`` (after a cluster reload)."""
        with self._transaction():
            for (job_id,) in self._conn.execute("SELECT job_id FROM shifts").fetchall():
                if job_id not in keep:
                    self._conn.execute("DELETE FROM shifts WHERE job_id = ?", (job_id,))

    def close(self) -> None:
        """Close the database, then give the file up to another process."""
        self._conn.close()
        self._unlock()

    def _unlock(self) -> None:
        # closed after SQLite's connection: closing a descriptor of the file drops every
        # POSIX lock this process holds on it, SQLite's included
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def stored_job(obj: Any) -> RunningJob:
    """A job row as :meth:`RunningJob.to_dict` wrote it: a library job's ``model`` comes
    with the profile it resolved to when it was registered, and that profile is used."""
    if isinstance(obj, dict) and "model" in obj and ("phases" in obj or "iteration_time_s" in obj):
        own = {k: v for k, v in obj.items() if k != "model"}
        model = obj["model"]
        if not isinstance(model, str) or not model:
            raise InputError("model", "must be a non-empty string")
        return replace(read_job(own), model=model)
    return read_job(obj)


def _foreign(version: int, tables: set[str]) -> str:
    """What a SQLite database that is not a cassini state file holds instead."""
    theirs = sorted(tables - OUR_TABLES)
    if theirs:
        return f"a SQLite database with tables {', '.join(theirs)}"
    if version == 0:
        return f"tables {', '.join(sorted(tables))} but schema version 0"
    missing = ", ".join(sorted(OUR_TABLES - tables))
    return f"schema version {version} without its tables {missing}"


def _shift_row_problem(shift: Any, shift_s: Any, period_s: Any, epoch_s: Any,
                       reason: Any) -> str | None:
    """What is wrong with a row of the ``shifts`` table, or None: ``shift`` 0 or 1,
    ``period_s`` in the slot grid's bounds (seconds), ``shift_s`` in [0, period_s),
    ``epoch_s`` null or UNIX seconds in [0, 1e10), ``reason`` null or text."""
    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    if not isinstance(shift, int) or shift not in (0, 1):
        return f"shift must be 0 or 1, got {str(shift)[:40]!r}"
    if not (number(period_s) and MIN_PERIOD_S <= period_s <= MAX_PERIOD_S):
        return (f"period_s must be in [{MIN_PERIOD_S:g}, {MAX_PERIOD_S:g}] seconds, got "
                f"{str(period_s)[:40]!r}")
    if not (number(shift_s) and 0 <= shift_s < period_s):
        return f"shift_s must be in [0, period_s = {period_s:g}), got {str(shift_s)[:40]!r}"
    if epoch_s is not None and not number(epoch_s):
        return f"epoch_s must be a number of UNIX seconds, got {str(epoch_s)[:40]!r}"
    if epoch_s is not None and (problem := epoch_problem(float(epoch_s))) is not None:
        return f"epoch_s {problem}"  # PUT's rule: UNIX seconds in [0, 1e10)
    if reason is not None and not isinstance(reason, str):
        return f"reason must be text, got {str(reason)[:40]!r}"
    return None


def _iteration_time_s(body: str) -> float | None:
    """The iteration time (seconds) an unreadable row still gives, else None."""
    try:
        value = json.loads(body).get("iteration_time_s")
    except (ValueError, AttributeError):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e9:
        return float(value)
    return None


def _lock(path: str) -> int | None:
    """An open descriptor of the state file holding an exclusive ``flock`` (None for
    ``:memory:``), or StateError when another process holds it: two services writing one
    file would each keep a registry the other never reads.  An empty new file is made
    here (SQLite takes an empty file as a new database); the lock goes when the process
    does, however it ends."""
    if path == MEMORY:
        return None
    p = Path(path)
    if p.exists() and not p.is_file():
        raise StateError(f"{path}: not a file")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StateError(f"{path}: cannot create its directory: {e.strerror or e}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)  # as SQLite makes it
    except OSError as e:
        raise StateError(f"{path}: cannot open: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateError(
            f"{path}: in use by another cassini serve (one state file, one process); stop "
            "it or give another --state file"
        ) from None
    return fd


def _connect(path: str) -> sqlite3.Connection:
    try:
        # isolation_level=None: transactions are the explicit BEGIN/COMMIT above
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
    except sqlite3.Error as e:
        raise StateError(f"{path}: cannot open: {e}") from None
